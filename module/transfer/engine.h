/*
 * engine.h - the transfer engine: one thread with its own epoll loop that
 * serves FETCH requests from other nodes and pulls objects for OBJ.FETCH.
 *
 * The Redis main thread talks to it only by queueing work (engineSubmit*,
 * engineCancelFetch: an eventfd wakes the loop) and gets answers through
 * the callbacks in EngineConfig, which run on the engine thread and must
 * only hand off (RedisModule_UnblockClient and friends are thread-safe).
 * The engine shares the object table (under its lock) and the arena.
 * No Redis headers: transports, fetch logic and handshake are pure C.
 */
#ifndef OBJSTORE_ENGINE_H
#define OBJSTORE_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "common/list.h"
#include "directory/directory.h"
#include "store/objtable.h"
#include "wire.h"

typedef enum FetchVia { FETCH_VIA_AUTO = 0, FETCH_VIA_TCP, FETCH_VIA_RDMA } FetchVia;

/* The outcome of one id of an OBJ.FETCH. */
typedef struct FetchItem {
    char *id;
    size_t idLen;
    int done;
    char err[192]; /* "" on success, else "CODE message" */
} FetchItem;

/* One OBJ.FETCH call. The main thread allocates it, the engine fills the
 * items and calls onFetchDone exactly once (complete or cancelled); after
 * that the engine never touches it again. */
typedef struct FetchReq {
    uint64_t seq; /* set by engineSubmitFetch */
    void *owner;  /* the blocked client, for the callback */
    FetchVia via;
    /* FROM: the node believed to hold the ids, tried first without asking
     * the directory; "" = no hint. Never this node's own name. */
    char from[OBJ_WIRE_NAME_MAX + 1];
    size_t n, remaining;
    int cancelled;
    int timedOut;       /* cancelled because its time ran out */
    int64_t deadlineUs; /* utilMonoUs() deadline, 0 = none */
    FetchItem *items;
    ObjListLink link; /* the requesting side's list of live requests */
    /* Engine-internal requests (a REPL's fetch, repl.c): when set, done runs
     * instead of cfg->onFetchDone, and the request is not counted as an
     * OBJ.FETCH one (fetch_requests). doneArg is the caller's. NULL for
     * every request from the Redis thread. */
    void (*done)(struct FetchReq *req);
    void *doneArg;
} FetchReq;

/* REPL flags (engineSubmitRepl), the wire's. */
#define ENGINE_REPL_PROTECT WIRE_REPL_PROTECT /* the copy counts toward want */
#define ENGINE_REPL_OWN     WIRE_REPL_OWN     /* the target takes ownership from the asker */

/* One REPL: ask node `target` to hold a counted copy of id (repl.c). The
 * caller allocates it and fills everything above `ok`; the engine answers
 * through cfg->onReplDone exactly once, after which it never touches it. */
typedef struct ReplReq {
    uint64_t seq;                       /* set by engineSubmitRepl */
    void *owner;                        /* for the callback */
    char target[OBJ_WIRE_NAME_MAX + 1]; /* the node asked to hold a copy */
    char id[OBJ_ID_MAX];
    size_t idLen;
    uint64_t checksum;  /* the generation asked for */
    uint32_t flags;     /* ENGINE_REPL_* */
    uint32_t want;      /* 1..OBJ_WIRE_WANT_MAX */
    int64_t deadlineUs; /* utilMonoUs() by which the engine answers (0: none) */
    int ok;             /* out: 1 when the target answered HELD */
    char err[192];      /* out: "" or "CODE message" */
    ObjListLink link;   /* the engine's list of REPLs under way */
} ReplReq;

typedef struct EngineConfig {
    ObjTable *table;
    uint8_t *arenaBase;
    uint64_t arenaSize;
    char nodeName[OBJ_WIRE_NAME_MAX + 1];
    char secret[256];
    char tcpBind[64];
    int tcpPort; /* 0: no TCP listener */
    /* Ask peers for encrypted TCP payloads (OBJ_FEAT_ENCRYPT): a TCP session
     * either side asks it of encrypts its payloads both ways. */
    int encrypt;
    char rdmaBind[64];
    int rdmaPort; /* 0: no RDMA */
    char rdmaDevice[64];
    uint64_t rdmaReadMin; /* RDMA: objects >= this use the read rendezvous */
    /* Uploads of large objects this node serves at once before it answers
     * a requester that has other holders BUSY (0: no limit). */
    int uploadSlots;
    /* Bytes of buffers that serving spilled objects may hold at once, all
     * connections together (tierserve.c; one read alone may exceed it). */
    uint64_t tierServeBudget;
    /* Callbacks, run on the engine thread. */
    void (*onFetchDone)(FetchReq *req);
    /* A fetched object was sealed, or a failed one aborted: local waiters
     * for that id should look again. */
    void (*onChanged)(const char *id, size_t idLen);
    /* A REPL this node sent is over (r->ok, r->err). */
    void (*onReplDone)(ReplReq *r);
    /* Target side: peer asked this node to hold id (flags, want, checksum),
     * and the object is sealed here with that checksum (fetched now, or
     * held already). Make the copy count: returns 0, or -1 with err "CODE
     * message" (e.g. "DRAINING ..."). May take the table lock. NULL: this
     * node takes no counted copies (REPL is answered NOTSUPPORTED). */
    int (*onReplicated)(const char *peer, const char *id, size_t idLen, uint64_t checksum,
                        uint32_t flags, uint32_t want, char *err, size_t errLen);
    /* Target side, before fetching: may this node take a copy now? Returns
     * 0, or -1 with err "CODE message" (a draining node). NULL: always. */
    int (*mayReplicate)(char *err, size_t errLen);
    void (*log)(const char *level, const char *msg);
} EngineConfig;

/* Start listeners and the thread. Returns 0, or -1 with a reason in err (a
 * failing RDMA setup is not fatal: it is logged and RDMA is disabled). */
int engineStart(const EngineConfig *cfg, char *err, size_t errLen);
/* Stop the thread, close every connection, fail queued requests. */
void engineStop(void);

/* Queue a fetch; req->seq is assigned before this returns. */
void engineSubmitFetch(FetchReq *req);
/* Queue a REPL (any thread); r->seq is assigned before this returns, and
 * cfg->onReplDone(r) runs exactly once, on the engine thread: HELD (r->ok
 * 1), the target's ERROR, "TIMEOUT ..." at r->deadlineUs, "UNAVAILABLE ..."
 * when the target cannot be reached or its connection closes (or the
 * engine stops: then on the thread that calls engineStop). When the engine
 * is not running, "UNAVAILABLE ..." at once, on the caller's thread. */
void engineSubmitRepl(ReplReq *r);
/* Cancel a fetch by seq (timedOut: its deadline passed; else its client
 * left); harmless if it already finished. */
void engineCancelFetch(uint64_t seq, int timedOut);
/* Change the RDMA inline/rendezvous threshold at run time. */
void engineSetRdmaReadMin(uint64_t bytes);
/* Is RDMA usable on this node? */
int engineRdmaEnabled(void);

typedef struct EngineTransportStats {
    uint64_t fetches, bytes, failures, failovers;
    uint64_t latencyUsSum, latencyUsMax, latencyCount;
    uint64_t served, servedBytes;
    uint64_t servedInline, servedRndv; /* how served objects travelled */
} EngineTransportStats;

typedef struct EngineStats {
    EngineTransportStats tcp, rdma;
    uint64_t fetchRequests, shared, localHits, cancelled, connections, badFrames;
    uint64_t refusedConnections; /* closed at the handshake caps or deadline */
    uint64_t encryptedSessions;  /* sessions keyed to encrypt their payloads (TCP) */
    /* FROM hints: transfers the hinted node completed (no directory lookup
     * of the object), and those that fell back to the directory. */
    uint64_t hintHits, hintFallbacks;
    /* Load spreading: object bytes sent and received (every attempt, over
     * both transports), BUSY answers given to requesters with other holders
     * (redirects) and taken from holders (redirected), fetches that went on
     * from the offset they had reached after their source failed. */
    uint64_t uploadedBytes, downloadedBytes, redirects, redirected, rangeResumes;
    /* Relays: PART answers sent from objects still being received here, and
     * fetches that followed a BUSY to the relay it named. */
    uint64_t relayed, relayFollows;
    /* Spilled objects served (tierserve.c): tier files read, servings that
     * shared a read already made or under way, servings that waited for the
     * budget; and now: bytes of read buffers held, servings waiting. */
    uint64_t tierServeReads, tierServeShared, tierServeWaits, tierServeBytes, tierServeWaiting;
    /* FETCHes that found their object sealed with its checksum still being
     * taken, and waited for it before any byte was sent. */
    uint64_t checksumWaits;
    /* REPLs (repl.c): sent, answered HELD here, sent and not answered HELD,
     * and the bytes received by the fetches REPLs made here. */
    uint64_t replRequests, replServed, replFailed, replBytes;
} EngineStats;
void engineGetStats(EngineStats *st);

#endif /* OBJSTORE_ENGINE_H */
