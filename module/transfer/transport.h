/*
 * transport.h - the operations table that hides which wire a connection is
 * on, the way Redis's ConnectionType hides tcp/unix/tls. The engine core
 * (engine.c, fetch logic, handshake) talks to a Conn only through these
 * operations, and transports report back only through the engineOn*()
 * upcalls declared at the bottom. Everything here runs on the engine thread.
 */
#ifndef OBJSTORE_TRANSPORT_H
#define OBJSTORE_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

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
     * until engineOnUp(). Returns NULL with a reason in err. */
    Conn *(*connect)(Peer *peer, const char *addr, int port, char *err, size_t errLen);
    /* Queue a frame. With payload: the bytes follow the frame (streams) or
     * ride inline in the same message (rings; payloadLen <= maxInline). The
     * caller keeps the payload memory valid (pinned) until
     * engineOnSendDone(cookie). Returns 0, or -1 (the conn is being closed). */
    int (*send)(Conn *c, WireMsg *m, const void *payload, size_t payloadLen, void *cookie);
    /* Streams only: the next len bytes of the stream go to dst (dst NULL:
     * they are read and thrown away); then engineOnPayloadDone(). NULL on
     * message transports. */
    int (*recvPayload)(Conn *c, void *dst, size_t len);
    /* Streams only: the rest of the payload being received is thrown away,
     * its destination is no longer valid (a cancelled fetch); the stream
     * stays in step and engineOnPayloadDone() still comes at its end. */
    void (*discardPayload)(Conn *c);
    /* RDMA only: read len bytes at (raddr, rkey) of the peer into dst (which
     * lies in the registered arena); engineOnReadDone(cookie, status) when
     * done. NULL on transports without one-sided reads. */
    int (*readRemote)(Conn *c, void *dst, uint64_t len, uint64_t raddr, uint32_t rkey,
                      void *cookie);
    /* Largest payload send() may carry inline (SIZE_MAX on streams). */
    size_t (*maxInline)(Conn *c);
    /* rkey under which the whole local arena can be read (RDMA), else 0. */
    uint32_t (*arenaRkey)(Conn *c);
    /* Close now: no further upcalls except engineOnClosed(). */
    void (*close)(Conn *c, const char *why);
} TransportOps;

/* What every connection has, whatever its transport. Transports allocate
 * their own struct with this as its first member. */
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
    /* Set by the transport while it has bytes queued: when the queue last
     * moved (or became non-empty); 0 when empty. A queue that does not move
     * for ENGINE_SEND_STALL_US gets the connection closed (engine.c). */
    int64_t txStallSinceUs;
    struct Conn *next; /* engine's list of all connections */
};

/* ---- upcalls from transports into the engine core (engine.c) ---- */

/* Register a file descriptor with the engine's epoll; fn(arg, events) runs on
 * readiness. Returns 0 or -1. */
typedef void EngineFdFn(void *arg, uint32_t events);
int engineWatch(int fd, uint32_t events, EngineFdFn *fn, void *arg);
int engineModify(int fd, uint32_t events, EngineFdFn *fn, void *arg);
void engineUnwatch(int fd);
uint64_t engineNextConnId(void);
/* A frame failed to decode (counted in transfer_bad_frames). */
void engineCountBadFrame(void);
/* Should the transport stop reading new frames from c for now? (It holds as
 * many pins as a connection may: its requests wait in the socket.) */
int engineConnBusy(const Conn *c);
/* The transport is up (connected or accepted): the core starts the handshake. */
void engineOnUp(Conn *c);
/* A frame arrived; payload is non-NULL for an inline DATA on a ring
 * transport. Returns 0, or -1 when the core wants the conn closed (the
 * transport then closes it with the logged reason). */
int engineOnFrame(Conn *c, const WireMsg *m, const uint8_t *payload, size_t payloadLen);
void engineOnPayloadDone(Conn *c);
void engineOnSendDone(Conn *c, void *cookie);
void engineOnReadDone(Conn *c, void *cookie, int ok);
/* The conn is gone (peer closed, error, or close()); called exactly once.
 * The transport frees its memory after this returns. */
void engineOnClosed(Conn *c, const char *why);
/* Log from any engine-side file, with a level "warning"/"notice"/"verbose". */
void engineLog(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif /* OBJSTORE_TRANSPORT_H */
