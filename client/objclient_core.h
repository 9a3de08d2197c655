/*
 * objclient_core.h - private to the client library: the ObjClient context and
 * the command layer (objstore.c) that every file of the library builds its
 * calls on: errors, sending a command over the client's transport, reading
 * replies, mapping the arena. Not installed; programs use objstore.h, and a
 * transport plugs in through objclient_int.h.
 */
#ifndef OBJSTORE_OBJCLIENT_CORE_H
#define OBJSTORE_OBJCLIENT_CORE_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

#include "objclient_int.h"
#include "objstore.h"

#define OBJ_HIDDEN __attribute__((visibility("hidden")))

#define OBJ_CLIENT_ERRSTR_LEN 512
#define OBJ_CLIENT_MAX_ARGS   12

/* Commands of one pipelined OBJ.RELEASE batch, at most (a longer one is sent in chunks). */
#define OBJ_CLIENT_RELEASE_BATCH 128

/*
 * One id the pin cache holds pinned on the server (exactly one server pin per
 * entry, whatever the program's count). In the hash chain always; in the
 * idle list (oldest first) while users is 0.
 */
typedef struct PinEntry {
    struct PinEntry *hashNext;
    struct PinEntry *idlePrev, *idleNext;
    ObjBuffer view; /* what OBJ.PIN answered, checked against the mapping */
    size_t users;   /* the program's pins of this entry not yet released */
    int stale;      /* deleted through this client: never served again */
    uint64_t hash;
    size_t idLen;
    unsigned char id[]; /* idLen bytes */
} PinEntry;

/* The client-side pin cache: a chained hash of entries plus the idle list. */
typedef struct PinCache {
    PinEntry **buckets;
    size_t nbuckets; /* a power of two; 0 until the first entry */
    size_t count;    /* entries, stale ones included */
    PinEntry *idleHead, *idleTail;
    size_t idle;
    size_t maxIdle; /* 0: off */
    uint64_t hits, misses, batches, released;
} PinCache;

/* One connection to one node, and that node's arena once it is mapped. */
struct ObjClient {
    const ObjClientTransport *tr; /* TCP (hiredis) or RDMA: objclient_int.h */
    void *conn;                   /* its connection; NULL when it could not be allocated */
    ObjErr err;                   /* OBJ_OK after every successful call */
    char errstr[OBJ_CLIENT_ERRSTR_LEN];

    /* The arena: mapped on the first create/pin, unmapped by objClientFree. */
    unsigned char *arenaBase; /* NULL until mapped */
    size_t arenaSize;         /* bytes mapped (the whole arena file) */
    char *arenaPath;
    int arenaReadOnly; /* 1: only O_RDONLY was allowed, mapped PROT_READ (clientOpenArena) */

    PinCache pins;      /* off (maxIdle 0) until objClientSetPinCache */
    size_t prefaultMin; /* objClientSetPinPrefault; 0: off */
    int putThreads;     /* objClientSetPutThreads; 0: OBJ_PUT_THREADS_DEFAULT */
    int noArena;        /* the arena could not be mapped: puts go inline */
};

/* ---- errors (objstore.c) ---------------------------------------------------------------- */

/* Record an error with a printf-style message. Can't fail (the message is
 * truncated to the buffer). Returns -1 so callers can `return clientFail(...)`. */
OBJ_HIDDEN int clientFail(ObjClient *c, ObjErr code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Forget the previous error: every successful call ends here. Returns 0. */
OBJ_HIDDEN int clientOk(ObjClient *c);
/* Record a server error reply (code word and full text). Returns -1. */
OBJ_HIDDEN int clientFailReply(ObjClient *c, const redisReply *r);
/* Record an I/O error with the transport's description of it. Returns -1. */
OBJ_HIDDEN int clientFailIo(ObjClient *c);
/* Record "the server answered something this library does not understand". Returns -1. */
OBJ_HIDDEN int clientFailShape(ObjClient *c, const char *cmd, const redisReply *r);

/* ---- commands (objstore.c) -------------------------------------------------------------- */

/* The arguments of one command; ids and data are binary-safe (pointer + length). */
typedef struct CmdArgs {
    int argc;
    const char *argv[OBJ_CLIENT_MAX_ARGS];
    size_t lens[OBJ_CLIENT_MAX_ARGS];
} CmdArgs;

/* Append an argument (the caller keeps it alive until the call). Can't fail:
 * callers never add more than OBJ_CLIENT_MAX_ARGS. */
OBJ_HIDDEN void argsAdd(CmdArgs *a, const void *p, size_t len);
/* Append a NUL-terminated argument. Can't fail. */
OBJ_HIDDEN void argsAddStr(CmdArgs *a, const char *s);
/* Whether the connection is usable (no transport error so far). */
OBJ_HIDDEN int clientConnected(const ObjClient *c);
/* Send one command and wait for its reply. Returns the reply (free it with
 * freeReplyObject) unless it is an error reply or the transport failed: then
 * NULL, with the error recorded. */
OBJ_HIDDEN redisReply *clientCallArgv(ObjClient *c, int argc, const char **argv,
                                      const size_t *lens);
/* clientCallArgv of a CmdArgs. */
OBJ_HIDDEN redisReply *clientCall(ObjClient *c, CmdArgs *a);
/* Judge the reply r (NULL: the call failed, the error is recorded) of a
 * command that answers a status: any status is success. Frees r. Returns 0,
 * or -1 with the error recorded. */
OBJ_HIDDEN int clientStatusVerdict(ObjClient *c, const char *cmd, redisReply *r);
/* Pass the reply r of cmd through when it is of the given type (REDIS_REPLY_*);
 * anything else is freed and recorded as a reply this library does not
 * understand. Returns r, or NULL with the error recorded (also for r NULL). */
OBJ_HIDDEN redisReply *clientExpect(ObjClient *c, const char *cmd, redisReply *r, int type);
/* Send a command that answers a status (clientStatusVerdict). Returns 0 or -1. */
OBJ_HIDDEN int clientCallStatus(ObjClient *c, CmdArgs *a);
/* Send n status commands in one pipeline where the transport has one, every
 * reply read even after an error. Returns 0, or -1 with the first error recorded. */
OBJ_HIDDEN int clientCallPipeline(ObjClient *c, CmdArgs *cmds, int n);
/* Start the arguments of `cmd id ...`. Returns 0, or -1 with the error
 * recorded (also for a NULL client). */
OBJ_HIDDEN int clientIdCommand(ObjClient *c, const char *cmd, const void *id, size_t idLen,
                               CmdArgs *a);
/* Add the TIMEOUT option (0: nothing, > 0: that many ms, -1: forever); buf
 * must outlive the call. Returns 0, or -1 (BADARG) for other negative values. */
OBJ_HIDDEN int clientAddTimeout(ObjClient *c, CmdArgs *a, long long timeoutMs, char *buf,
                                size_t bufLen);

/* ---- replies (objstore.c) --------------------------------------------------------------- */

/* The value of field `name` in a flat field/value array reply, or NULL. */
OBJ_HIDDEN const redisReply *replyField(const redisReply *r, const char *name);
/* A non-negative integer from an integer or decimal string reply. Returns 0, or -1. */
OBJ_HIDDEN int replyToU64(const redisReply *v, uint64_t *out);
/* Field `name` of a field/value reply as a number. Returns 0, or -1 (error recorded). */
OBJ_HIDDEN int clientField(ObjClient *c, const char *cmd, const redisReply *r, const char *name,
                           uint64_t *out);

/* ---- the arena (objstore.c) ------------------------------------------------------------- */

/* Map the node's arena if it is not mapped yet. Returns 0, or -1 with
 * OBJ_ERR_MAP (or the error of OBJ.STATS) recorded. */
OBJ_HIDDEN int clientMapArena(ObjClient *c);
/* Whether [offset, offset + len) lies inside the mapped arena. */
OBJ_HIDDEN int clientInArena(const ObjClient *c, uint64_t offset, uint64_t len);

/* ---- the pin cache (pins.c) ------------------------------------------------------------- */

/* Before this client deletes id: its cached entry must not serve it again.
 * Returns 0, or -1 with the error recorded. */
OBJ_HIDDEN int pinForget(ObjClient *c, const void *id, size_t idLen);
/* At disconnect: give every entry's server pin back and free the table. Returns 0 or -1. */
OBJ_HIDDEN int pinDrop(ObjClient *c);

#endif /* OBJSTORE_OBJCLIENT_CORE_H */
