/*
 * transport.h - the operations table that hides which wire a connection is
 * on, the way Redis's ConnectionType hides tcp/unix/tls. The engine core
 * (engine.c, fetch logic, handshake) talks to a Conn only through these
 * operations, and transports report back only through the TransportHost
 * they are given when created. Everything here runs on the engine thread.
 */
#ifndef OBJSTORE_TRANSPORT_H
#define OBJSTORE_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "common/list.h"
#include "wire.h"

typedef struct Conn Conn;
typedef struct Peer Peer;

typedef enum ConnState {
    CONN_CONNECTING = 0, /* transport not yet up */
    CONN_HANDSHAKE,      /* HELLO/AUTH in progress */
    CONN_READY,          /* authenticated: requests flow */
    CONN_CLOSED
} ConnState;

typedef struct TransportOps {
    const char *name; /* "tcp", "rdma" */
    uint32_t feature; /* OBJ_FEAT_* */
    /* Start accepting on bind:port. Returns 0, or -1 with a reason in err. */
    int (*listen)(const char *bind, int port, char *err, size_t errLen);
    void (*shutdown)(void); /* stop listening and close every connection */
    /* Begin connecting to addr:port for peer; the Conn is CONN_CONNECTING
     * until host->onUp(). Returns NULL with a reason in err. */
    Conn *(*connect)(Peer *peer, const char *addr, int port, char *err, size_t errLen);
    /* Queue a frame. With payload: the bytes follow the frame in the
     * stream. The caller keeps the payload memory valid
     * (pinned) until host->onSendDone(cookie). Returns 0, or -1 (the conn is
     * being closed). */
    int (*send)(Conn *c, WireMsg *m, const void *payload, size_t payloadLen, void *cookie);
    /* The next len bytes of the stream go to dst (dst NULL: they are read
     * and thrown away); then host->onPayloadDone(). */
    int (*recvPayload)(Conn *c, void *dst, size_t len);
    /* The rest of the payload being received is thrown away,
     * its destination is no longer valid (a cancelled fetch); the stream
     * stays in step and host->onPayloadDone() still comes at its end. */
    void (*discardPayload)(Conn *c);
    /* Inside host->onPayloadDone() of a payload received whole: its
     * XXH3-64 (store/checksum.h), taken as the bytes landed, so that the
     * fetch needs no second pass. Returns 0, or -1 when there is none.
     * NULL on transports that take none. */
    int (*payloadHash)(Conn *c, uint64_t *sum);
    /* While a payload of expect bytes with a destination is being received
     * (also from host->onClosed): how many of its bytes have landed there,
     * in order from its start (a failed fetch resumes from there). NULL on
     * transports that cannot tell. */
    uint64_t (*payloadLanded)(Conn *c, uint64_t expect);
    /* RDMA only: read len bytes at (raddr, rkey) of the peer into dst (which
     * lies in the registered arena); host->onReadDone(cookie, status, sum)
     * when done. NULL on transports without one-sided reads. */
    int (*readRemote)(Conn *c, void *dst, uint64_t len, uint64_t raddr, uint32_t rkey,
                      void *cookie);
    /* RDMA only (NULL elsewhere): how many bytes of the reads posted with
     * cookie have landed at dst, in order from its start (the READ chunks
     * completed; a queue pair completes them in order). Valid while they are
     * in flight and inside host->onReadDone for them (a failed read keeps
     * its prefix: a fetch resumes from there, a relay serves it); 0 for a
     * cookie it does not know. */
    uint64_t (*readLanded)(Conn *c, void *cookie);
    /* RDMA only (NULL elsewhere): let c's peer read len bytes at addr (in
     * the arena), on c only, until revokeRead. Returns a grant and *rkey,
     * the key for RNDV: any frame sent on c afterwards reaches the peer
     * after the key works. NULL when no key can be had (a verbs error,
     * logged; the transport allows as many grants per connection as the
     * engine allows pins, so the pin cap answers BUSY first). */
    void *(*grantRead)(Conn *c, const void *addr, uint64_t len, uint32_t *rkey);
    /* End a grant (the requester said DONE): once the key no longer opens
     * anything, host->onSendDone(c, cookie). Grants of a connection that
     * closes end with it, before host->onClosed. */
    void (*revokeRead)(Conn *c, void *grant, void *cookie);
    /* Optional: the handshake just succeeded (the peer proved the secret).
     * Whatever a transport allows or allocates in bulk for a connection
     * waits for this (the RDMA transport's remote read access and full
     * receive buffer). Called before any request is sent on c. Returns 0,
     * or -1 (the core closes c). */
    int (*authenticated)(Conn *c);
    /* Optional: called every engine tick (keepalives, dead-peer checks). */
    void (*tick)(void);
    /* Close now: no further upcalls except host->onClosed(). */
    void (*close)(Conn *c, const char *why);
} TransportOps;

/* What every connection has, whatever its transport. Transports allocate
 * their own struct, zero-filled, with this as its first member. */
struct Conn {
    const TransportOps *ops;
    uint64_t id;
    ConnState state;
    int outgoing;
    Peer *peer; /* outgoing: the peer we dialled; incoming: NULL */
    char peerName[OBJ_WIRE_NAME_MAX + 1];
    char desc[96];                     /* "tcp 127.0.0.1:7001" for logs */
    uint8_t nonce[OBJ_WIRE_NONCE];     /* ours */
    uint8_t peerNonce[OBJ_WIRE_NONCE]; /* theirs */
    uint32_t peerFeatures;
    int helloSeen;    /* the peer's HELLO arrived (acceptor side) */
    char failWhy[96]; /* why the session failed, for the requests on it */
    char source[48];  /* incoming: the peer's address without port, for the
                       * per-source handshake cap ("" = not capped per source) */
    int64_t upUs;     /* when the handshake clock started (utilMonoUs) */
    uint32_t pins;    /* objects pinned for this connection (serve.c) */
    uint32_t uploads; /* of them, large objects being sent (serve.c's upload slots) */
    /* Set by the transport while it has bytes queued: when the queue last
     * moved (or became non-empty); 0 when empty. A queue that does not move
     * for ENGINE_SEND_STALL_US gets the connection closed (engine.c). */
    int64_t txStallSinceUs;
    /* The session MAC (wire.h), each direction keyed once the handshake
     * proved the secret; NULL before. Transports seal what they send under
     * txMac (wireSeal) and check what they receive under rxMac; the core
     * sets both and frees them when the conn closes. */
    WireMac *txMac, *rxMac;
    ObjListLink link; /* the engine's list of connections; zero until it links c */
};

/* ---- the host: what a transport may ask of the engine core ---- */

/* fn(arg, events) runs on the engine thread when fd is ready. */
typedef void EngineFdFn(void *arg, uint32_t events);

/* Given to a transport when it is created; the only way it calls into the
 * core (transports never name engine functions). */
typedef struct TransportHost {
    /* Register / change / drop a descriptor in the engine's epoll. 0 or -1. */
    int (*watch)(int fd, uint32_t events, EngineFdFn *fn, void *arg);
    int (*modify)(int fd, uint32_t events, EngineFdFn *fn, void *arg);
    void (*unwatch)(int fd);
    uint64_t (*nextConnId)(void);
    /* A frame failed to decode (counted in transfer_bad_frames). */
    void (*countBadFrame)(void);
    /* A connection from desc was refused before its handshake (no room):
     * counted in transfer_refused_connections, logged at most once a second. */
    void (*refused)(const char *desc, const char *why);
    /* Should the transport stop reading new frames from c for now? (It holds
     * as many pins as a connection may: its requests wait in the socket.) */
    int (*connBusy)(const Conn *c);
    /* The transport is up (connected or accepted): the core starts the
     * handshake. */
    void (*onUp)(Conn *c);
    /* A frame arrived (a DATA frame's payload follows it in the stream:
     * the handler says where it goes with recvPayload). Returns 0, or -1
     * when the core wants the conn closed (the transport then closes it
     * with the logged reason). */
    int (*onFrame)(Conn *c, const WireMsg *m);
    void (*onPayloadDone)(Conn *c);
    /* Payload bytes landed in their destination, not yet all of them
     * (called at least once per read that moved some, and after RDMA READ
     * chunks completed). */
    void (*onPayloadMoved)(Conn *c);
    void (*onSendDone)(Conn *c, void *cookie);
    /* sum: the XXH3-64 of the bytes read (store/checksum.h), taken as they
     * landed, or NULL when the reads failed or the transport took none. */
    void (*onReadDone)(Conn *c, void *cookie, int ok, const uint64_t *sum);
    /* The conn is gone (peer closed, error, or close()); called exactly
     * once. The transport frees its memory after this returns. */
    void (*onClosed)(Conn *c, const char *why);
    /* Log with a level "warning"/"notice"/"verbose". */
    void (*log)(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
} TransportHost;

#endif /* OBJSTORE_TRANSPORT_H */
