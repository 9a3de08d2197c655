/*
 * objstore.h - C client library for the objstore Redis module.
 *
 * A program talks to one node (TCP or unix socket, hiredis underneath) and,
 * when it runs on the same machine, maps the node's shared-memory arena so
 * that object bytes are written and read in place: create -> pointer ->
 * seal, pin -> pointer -> release. Copying put/get variants work from any
 * machine. The context is opaque; every call returns 0 on success and -1 on
 * error, and the error is read with objClientErrCode()/objClientErrMsg().
 */
#ifndef OBJSTORE_CLIENT_H
#define OBJSTORE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version of this header. The shared library's SONAME carries the major
 * (libobjstore.so.0); objVersion() tells which library a program runs
 * against, encoded like OBJSTORE_VERSION, so that a program built against a
 * newer header can refuse an older library. */
#define OBJSTORE_VERSION_MAJOR  0
#define OBJSTORE_VERSION_MINOR  5
#define OBJSTORE_VERSION_PATCH  0
#define OBJSTORE_VERSION_STRING "0.5.0"
#define OBJSTORE_VERSION                                                                           \
    ((OBJSTORE_VERSION_MAJOR << 16) | (OBJSTORE_VERSION_MINOR << 8) | OBJSTORE_VERSION_PATCH)
unsigned objVersion(void);

/*
 * Allocator hooks: every allocation of the library (contexts, the pin cache,
 * the RDMA send queue, the copies objClientGet returns) goes through this
 * table; the C library's malloc family until it is replaced. Not covered:
 * the reply objects hiredis builds (hiredis' allocator) and the RDMA stream's
 * control block and buffers (module/rdma, shared with the module).
 *
 * Call objSetAllocators (or objResetAllocators) only while the library holds
 * no memory: before the first connect, or after every context has been
 * freed with objClientFree/objRdmaFree and every objClientGet copy with
 * objClientFreeData (the library frees with the table in force at that
 * moment, so a switch while it holds memory would hand blocks to the wrong
 * free). It is not thread-safe: set it once, before threads use the library.
 * objSetAllocators returns the table that was in force and ignores (leaves
 * unchanged) a NULL table or one with a NULL member.
 */
typedef struct ObjAllocFuncs {
    void *(*mallocFn)(size_t size);
    void *(*callocFn)(size_t nmemb, size_t size);
    void *(*reallocFn)(void *ptr, size_t size);
    void (*freeFn)(void *ptr);
} ObjAllocFuncs;
ObjAllocFuncs objSetAllocators(const ObjAllocFuncs *fns);
void objResetAllocators(void);

/* Error codes: the first word of the server's error reply, or a local cause.
 * Which word maps to which code: module/common/errwords.h. New codes are
 * added at the end (the values are part of the ABI). */
typedef enum ObjErr {
    OBJ_OK = 0,
    OBJ_ERR_IO,           /* connection or protocol failure (hiredis) */
    OBJ_ERR_MAP,          /* the arena could not be mapped (remote node, permissions) */
    OBJ_ERR_BADARG,       /* BADARG */
    OBJ_ERR_NOTFOUND,     /* NOTFOUND */
    OBJ_ERR_EXISTS,       /* EXISTS */
    OBJ_ERR_OOM,          /* OOM */
    OBJ_ERR_NOTSEALED,    /* NOTSEALED */
    OBJ_ERR_WRONGSTATE,   /* WRONGSTATE */
    OBJ_ERR_TIMEOUT,      /* TIMEOUT */
    OBJ_ERR_OTHER,        /* any other server error (TRYAGAIN, IOERR, PROTOCOL, ERR, ...) */
    OBJ_ERR_UNAVAILABLE,  /* UNAVAILABLE: the directory or a peer node is unreachable */
    OBJ_ERR_NOTSUPPORTED, /* NOTSUPPORTED */
    OBJ_ERR_CHECKSUM,     /* CHECKSUM */
    OBJ_ERR_BUSY,         /* BUSY */
    OBJ_ERR_AUTH,         /* NOPERM, NOAUTH, WRONGPASS: authentication or ACL */
    OBJ_ERR_DRAINING      /* DRAINING: the node is draining (since 0.5) */
} ObjErr;

typedef struct ObjClient ObjClient;

/* A zero-copy view of a pinned object; valid until it is released
 * (objClientReleaseBuffer, or objClientRelease). */
typedef struct ObjBuffer {
    const void *data;
    size_t size;
    const void *meta;
    size_t metaSize;
} ObjBuffer;

/* Connect; always returns a context (NULL only when out of memory). Check
 * objClientErrCode() before use; free it with objClientFree() either way. */
ObjClient *objClientConnect(const char *host, int port);
ObjClient *objClientConnectUnix(const char *path);
/* Over RDMA to the node's rdma-client-port (addr: the node's RDMA address).
 * The copying calls work from anywhere; create/pin only on the node's machine. */
ObjClient *objClientConnectRdma(const char *addr, int port);
void objClientFree(ObjClient *c); /* accepts NULL; unmaps the arena */

ObjErr objClientErrCode(const ObjClient *c);
const char *objClientErrMsg(const ObjClient *c); /* "" when there is no error */

/* Reserve size bytes; *data points at them inside the mapped arena. */
int objClientCreate(ObjClient *c, const void *id, size_t idLen, size_t size, const void *meta,
                    size_t metaLen, void **data);
int objClientSeal(ObjClient *c, const void *id, size_t idLen);
int objClientAbort(ObjClient *c, const void *id, size_t idLen);

/* Pin a sealed object (waiting up to timeoutMs for it; 0 = do not wait for
 * a missing id, -1 = wait forever) and point *out into the arena. */
int objClientPin(ObjClient *c, const void *id, size_t idLen, long long timeoutMs, ObjBuffer *out);
/* Drop the pin whose view objClientPin put in *buf (since 0.2). Prefer it to
 * objClientRelease: an id deleted and made again while this client pinned
 * the old object names two objects, and the view tells which pin goes. */
int objClientReleaseBuffer(ObjClient *c, const void *id, size_t idLen, const ObjBuffer *buf);
/* Drop the pin of the one object this client pins under id. While it pins
 * two (the id was deleted and made again), nothing is released and the call
 * fails with OBJ_ERR_WRONGSTATE: use objClientReleaseBuffer. */
int objClientRelease(ObjClient *c, const void *id, size_t idLen);

/*
 * Client-side pin cache (off by default; see docs/client.md, "Pin cache"). With it on,
 * objClientRelease does not send OBJ.RELEASE at once: the object stays pinned
 * on the server, and a later objClientPin of the same id (by value) is served
 * from the cache without a round trip. Released ("idle") entries are given
 * back in one pipelined batch of OBJ.RELEASE when there are more than maxIdle
 * of them (the oldest go, down to maxIdle / 2), on objClientFlushReleases()
 * and in objClientFree(). While an id is cached the server keeps its object
 * pinned: OBJ.DEL of it (by anyone) answers DEFERRED and frees the memory
 * only after the batch release, and a cached pin keeps returning that object
 * even if the id was deleted and made again meanwhile; so use it for ids
 * that are never reused, or flush after a delete. objClientDelete through the
 * same client drops its own cached entry first, and a later pin of the id
 * pins the new object: release each view with objClientReleaseBuffer.
 */
#define OBJ_PIN_CACHE_DEFAULT_IDLE 64

/* Enable the cache with room for maxIdle idle entries (0: disable, which
 * first gives every idle entry back). Returns 0, or -1 with the error of the
 * release batch recorded (the cache is still reconfigured). */
int objClientSetPinCache(ObjClient *c, size_t maxIdle);
/* Send every deferred OBJ.RELEASE now, in one pipelined batch. Returns 0, or
 * -1 with the first failing release's error (all are sent and forgotten). */
int objClientFlushReleases(ObjClient *c);

/* Counters of the pin cache since connect (all 0 while it was never on). */
typedef struct ObjPinCacheStats {
    uint64_t hits;     /* objClientPin calls served from the cache: no round trip */
    uint64_t misses;   /* objClientPin calls that sent OBJ.PIN (cache on) */
    uint64_t batches;  /* pipelined OBJ.RELEASE batches sent */
    uint64_t released; /* OBJ.RELEASE commands sent in those batches */
    size_t cached;     /* ids this cache holds pinned on the server now */
    size_t idle;       /* of those, released by the program and not yet given back */
    size_t maxIdle;    /* the bound set by objClientSetPinCache (0: off) */
} ObjPinCacheStats;
/* Fill *st. Returns 0, or -1 for a NULL client or st. */
int objClientPinCacheStats(const ObjClient *c, ObjPinCacheStats *st);

/*
 * Prefault (off by default): when objClientPin answers from the server with
 * an object of at least minBytes, populate this process's page tables for it
 * with one madvise(MADV_POPULATE_READ) instead of a page fault per 4 KiB on
 * first read; worth it when the program reads whole large objects (about 1.8x
 * the read rate of fresh 1 MiB objects), not when it reads a few bytes of
 * them, as the pin then costs time in proportion to the size. 0: off. A
 * kernel without MADV_POPULATE_READ (before 5.14) turns it off silently.
 * Returns 0, or -1 for a NULL client.
 */
int objClientSetPinPrefault(ObjClient *c, size_t minBytes);

/*
 * Put size bytes under id, sealed. A small object (under 1 MiB) travels
 * inline in one OBJ.PUT: one round trip, from anywhere. A larger one, when
 * this client can map the node's arena (same machine, permission to open
 * its file), is created, copied straight into the arena by up to
 * objClientSetPutThreads threads, and sealed; elsewhere it goes inline too.
 * A put that fails leaves nothing behind (a client that dies mid-copy
 * leaves a created object, which the node drops with its connection).
 */
int objClientPut(ObjClient *c, const void *id, size_t idLen, const void *data, size_t size,
                 const void *meta, size_t metaLen);
/* One piece of an object put by objClientPutParts: len bytes from data,
 * placed at offset in the object. */
typedef struct ObjPart {
    const void *data;
    size_t len;
    size_t offset;
} ObjPart;
/* objClientPut of an object of size bytes made of n parts at their offsets
 * (pieces may not overlap; bytes no part covers read as zeros). Since 0.4. */
int objClientPutParts(ObjClient *c, const void *id, size_t idLen, const ObjPart *parts, size_t n,
                      size_t size, const void *meta, size_t metaLen);
/* Copy threads of a large put through the arena (the caller's thread is
 * one of them; each takes at least 4 MiB). 0: OBJ_PUT_THREADS_DEFAULT.
 * Returns 0, or -1 (BADARG outside 0..64; or a NULL client). Since 0.4. */
#define OBJ_PUT_THREADS_DEFAULT 2
int objClientSetPutThreads(ObjClient *c, int threads);

/*
 * Copies (since 0.5; docs/cluster.md, "Copies, repair and drain"). An object
 * may ask for `replicas` copies on distinct live nodes: the node that seals
 * it places the others, and answers once that many hold it (checked against
 * its checksum) or when the wait runs out, with how many do, like Redis's
 * WAIT: fewer holders than asked is not an error (the node's repair goes
 * on). replicas: 0 = the node's default (config `replicas`), else 1 to the
 * node's replicas-max (BADARG above). waitMs: OBJ_WAIT_DEFAULT = the node's
 * replica-timeout, 0 = do not wait (*holders 1 at once, the copies go on),
 * > 0 ms; not sent for replicas 1. *holders (may be NULL): the live nodes
 * holding the object when the node answered, this one included (1 for an
 * object of one copy). A draining node refuses new objects with
 * OBJ_ERR_DRAINING.
 */
#define OBJ_WAIT_DEFAULT (-1)
/* objClientSeal with replicas copies and the wait. Returns 0, or -1. */
int objClientSealReplicas(ObjClient *c, const void *id, size_t idLen, int replicas,
                          long long waitMs, int *holders);
/* objClientPut with replicas copies and the wait. Returns 0, or -1. */
int objClientPutReplicas(ObjClient *c, const void *id, size_t idLen, const void *data, size_t size,
                         const void *meta, size_t metaLen, int replicas, long long waitMs,
                         int *holders);
/* objClientPutParts with replicas copies and the wait. Returns 0, or -1. */
int objClientPutPartsReplicas(ObjClient *c, const void *id, size_t idLen, const ObjPart *parts,
                              size_t n, size_t size, const void *meta, size_t metaLen, int replicas,
                              long long waitMs, int *holders);

/*
 * Drain (since 0.5): the node refuses new objects (DRAINING) and moves its
 * primaries and protected copies to other nodes, so that it can leave
 * without losing any (docs/cluster.md, "Copies, repair and drain").
 */
typedef enum ObjDrainState {
    OBJ_DRAIN_IDLE = 0, /* not draining (never, or cancelled) */
    OBJ_DRAIN_DRAINING, /* moving its objects */
    OBJ_DRAIN_DRAINED   /* nothing left to move: the node may stop */
} ObjDrainState;
/* What OBJ.DRAIN answers: the drain's state and progress. */
typedef struct ObjDrainStatus {
    ObjDrainState state;
    uint64_t objectsLeft;  /* primaries and protected copies still to move */
    uint64_t objectsMoved; /* moved so far */
    uint64_t bytesMoved;
    uint64_t failures;   /* moves that failed */
    char lastError[256]; /* the last failure's error, "" when none */
} ObjDrainStatus;
/* Start draining the node (a drain under way is joined) and, for waitMs >
 * 0, wait up to that long for it to end; 0: answer at once. *st (may be
 * NULL): the state when the node answered. Returns 0, or -1. */
int objClientDrain(ObjClient *c, long long waitMs, ObjDrainStatus *st);
/* The drain's state and progress now (OBJ.DRAIN STATUS). Returns 0, or -1. */
int objClientDrainStatus(ObjClient *c, ObjDrainStatus *st);
/* Stop draining: the node takes new objects again (OBJ.DRAIN CANCEL); what
 * moved stays moved. *st (may be NULL) as objClientDrain. Returns 0, or -1. */
int objClientDrainCancel(ObjClient *c, ObjDrainStatus *st);

/* Copying variant: bytes travel through the Redis connection. */
/* *data is malloc'ed (free with objClientFreeData); timeout as objClientPin. */
int objClientGet(ObjClient *c, const void *id, size_t idLen, long long timeoutMs, void **data,
                 size_t *size);
void objClientFreeData(void *data);

int objClientDelete(ObjClient *c, const void *id, size_t idLen);
/* *exists is set to 1 when the object is sealed and present, else 0. */
int objClientExists(ObjClient *c, const void *id, size_t idLen, int *exists);

/* Pull remote objects into this node (OBJ.FETCH); timeoutMs <= 0: server default. */
int objClientFetch(ObjClient *c, const void *id, size_t idLen, long long timeoutMs);

/* One node of objClientBroadcast: a context connected to it, its name for
 * the report, and (filled in) its outcome. */
typedef struct ObjBroadcastDest {
    ObjClient *client; /* connected to the node that is to hold the object */
    const char *name;  /* the node's name, as the caller knows it (not used by the call) */
    ObjErr err;        /* out: OBJ_OK once the node holds the object */
    char errMsg[256];  /* out: why not (the server's error text), "" on success */
    int pending;       /* internal */
} ObjBroadcastDest;

/* Place object id on every node of dests: OBJ.FETCH on each, all sent
 * before any answer is awaited, so the nodes fetch at once (and relay and
 * spread among themselves); a context over another transport than TCP or
 * a unix socket is asked in turn. timeoutMs <= 0: each node's default.
 * A node that answers NOTFOUND is asked again for up to a second (never
 * past timeoutMs): a put reaches the directory a moment after OBJ.PUT
 * returns. Returns 0 when every node holds the object, -1 when any does
 * not: each dest's err and errMsg say which and why (as its client's
 * objClientErrCode/Msg). Since 0.3. */
int objClientBroadcast(ObjBroadcastDest *dests, size_t n, const void *id, size_t idLen,
                       long long timeoutMs);

/* Object description from OBJ.INFO. */
typedef struct ObjInfo {
    uint64_t size;
    uint64_t metaSize;
    uint64_t offset;
    uint64_t pins;
    uint64_t checksum;
    int sealed;
} ObjInfo;
int objClientInfo(ObjClient *c, const void *id, size_t idLen, ObjInfo *info);

/*
 * Named versions (since 0.4; docs/client.md, docs/commands.md). A version
 * of a name is a manifest object and the part objects it references, made
 * current at once for every node by OBJ.VPUBLISH; readers ask for the
 * latest, or wait for one newer than theirs. Names are 1 to 512 bytes,
 * versions 1 to 2^53 - 1.
 */
/* Make version (strictly above every version of name published before,
 * else OBJ_ERR_EXISTS) of name current, naming manifest and nParts parts
 * (each sealed and published somewhere, else OBJ_ERR_NOTFOUND and nothing
 * changes). retain > 0: afterwards only the retain newest versions are
 * kept; the objects of the others that no kept version names are purged
 * (objClientPurge). */
int objClientVersionPublish(ObjClient *c, const void *name, size_t nameLen, uint64_t version,
                            const void *manifest, size_t manifestLen, const void *const *parts,
                            const size_t *partLens, size_t nParts, uint64_t retain);
/* The latest version of name and its manifest id (*manifest malloc'ed: free
 * it with objClientFreeData). newer < 0: answer at once (OBJ_ERR_NOTFOUND
 * when name has no version). newer >= 0: wait until a version above newer
 * exists; timeoutMs as objClientPin (0 or -1: no deadline), then
 * OBJ_ERR_TIMEOUT. */
int objClientVersionLatest(ObjClient *c, const void *name, size_t nameLen, long long newer,
                           long long timeoutMs, uint64_t *version, void **manifest,
                           size_t *manifestLen);
/* The manifest id of one version (free it with objClientFreeData);
 * OBJ_ERR_NOTFOUND for an unknown or dropped version. */
int objClientVersionGet(ObjClient *c, const void *name, size_t nameLen, uint64_t version,
                        void **manifest, size_t *manifestLen);
/* Drop one version at once; its objects no other version names are purged. */
int objClientVersionDrop(ObjClient *c, const void *name, size_t nameLen, uint64_t version);
/* Delete n objects on every node, replicas included (OBJ.PURGE): each
 * copy is freed at once, or when its last pin goes, and a node that was
 * away does not bring its copy back. *known (may be NULL): how many of the
 * ids the directory knew. */
int objClientPurge(ObjClient *c, const void *const *ids, const size_t *idLens, size_t n,
                   size_t *known);

#ifdef __cplusplus
}
#endif

#endif /* OBJSTORE_CLIENT_H */
