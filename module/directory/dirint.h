/*
 * dirint.h - the directory client's parts as they see each other: the
 * tunables, the control block (one per process, `dir`), and the few
 * functions each part offers the parts above it. Callers outside
 * module/directory use directory.h instead.
 *
 * The parts, lowest first; each calls only the ones before it:
 *   state.c    control block, allocation, clocks, error counters, ops, results
 *   queue.c    the FIFO of requests (under dir.lock)
 *   keys.c     the key schema: object keys, node keys, registry buckets
 *   tomb.c     generations as tombstones carry them; a purge handed to the node
 *   conn.c     the slot map and one connection per master
 *   batch.c    commands routed per slot, pipelined, redirections followed
 *   publish.c  writes: publish/unpublish, heartbeat, re-publish, unregister
 *   lookup.c   reads: object lookups, node lookups, listings, the node cache
 *   versions.c named versions, purges and the purge log
 *   claim.c    repair claims and write barriers
 *   thread.c   the directory thread: connect, run the queue, sleep
 *   directory.c  start, stop and the public API
 * Everything here runs on the directory thread unless it says otherwise.
 */
#ifndef OBJSTORE_DIRINT_H
#define OBJSTORE_DIRINT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>

#include <hiredis/hiredis.h>

#include "common/heap.h"
#include "common/list.h"
#include "directory.h"
#include "slots.h"

/* ---- tunables ----------------------------------------------------------------- */

/* A directory that does not answer a connect or a command in this time is
 * unreachable for now (the command fails, the connection is dropped and
 * dialled again with backoff). Long enough that a busy host's directory
 * Redis (a fork, a loaded machine) is not taken for a dead one. */
#define OBJ_DIR_CONNECT_TIMEOUT_MS 2000
#define OBJ_DIR_COMMAND_TIMEOUT_MS 5000
#define OBJ_DIR_STOP_TIMEOUT_MS    500
#define OBJ_DIR_BACKOFF_MIN_MS     100
#define OBJ_DIR_BACKOFF_MAX_MS     2000
/* Pending publishes + unpublishes; beyond it they are dropped and a full
 * re-publish is scheduled instead (one op costs ~100 bytes + the id). */
#ifndef OBJ_DIR_QUEUE_MAX /* a test build may lower it */
#define OBJ_DIR_QUEUE_MAX 1000000
#endif
/* Queued operations taken and sent per round trip. */
#define OBJ_DIR_PIPELINE 256
/* Publishes and unpublishes wait this long for company before they are
 * sent (unless a read, a full pipeline or a stop comes first): one round
 * trip, and one wake-up of this thread and of the directory Redis, then
 * carries every seal and delete of those milliseconds instead of one each.
 * A location becomes visible to others that much later; a lookup never
 * waits for it. */
#define OBJ_DIR_WRITE_DELAY_MS 2
/* Node entries an object lookup may take from memory instead of the
 * directory: each is trusted for one heartbeat interval after it was read
 * (a node's entry changes only when it restarts, and its liveness is
 * node-ttl coarse anyway), so a lookup is one round trip, not two, while a
 * scheduler's objects live on a handful of nodes. A dead node stays listed
 * that much longer; a fetch from it fails over to the next location. A
 * node restarted meanwhile keeps its old boot here as long, so its old prot
 * entries may count for that one interval more (a repair pass after it sees
 * them right). */
#define OBJ_DIR_NODE_CACHE 256
/* Decimal tags 0..OBJ_DIR_MARK_TAGS-1 hash to every one of the 16384 slots
 * (109758 of them do), so each master gets a marker key in a slot of its
 * own (dirMarkKeyOf). */
#define OBJ_DIR_MARK_TAGS   (1 << 17)
#define OBJ_DIR_MARK_PREFIX "objstore:mark:"

/* MOVED/ASK hops followed for one command before giving up on it. */
#define OBJ_DIR_REDIRECTS_MAX 5

/* The node registry is OBJ_DIR_NODE_BUCKETS sets objstore:nodes:{b<k>}, a
 * node in bucket CRC16(name) % OBJ_DIR_NODE_BUCKETS: no single key that
 * every heartbeat writes, and on a cluster the buckets' slots spread over
 * the shards. Changing the count orphans registrations for one node-ttl. */
#define OBJ_DIR_NODE_BUCKETS 16
#define OBJ_DIR_NODES_PREFIX "objstore:nodes:"
#define OBJ_DIR_NODE_PREFIX  "objstore:node:"

/* ---- control block -------------------------------------------------------------- */

typedef enum DirOpKind {
    DIR_OP_PUBLISH,
    DIR_OP_UNPUBLISH,
    DIR_OP_LOOKUP,
    DIR_OP_LIST,
    DIR_OP_NODE,    /* one node's entry, by name (in id) */
    DIR_OP_VERSION, /* a version request or a purge (DirVerReq, versions.c) */
    DIR_OP_CLAIM,   /* dirClaim: claimMs in size */
    DIR_OP_BARRIER  /* dirBarrier: answered once the writes before it were */
} DirOpKind;

/* The arguments of a DIR_OP_VERSION, copied (the name is the op's id). */
typedef struct DirVerReq {
    DirVerKind kind;
    uint64_t version, retain;
    size_t nIds;
    char **ids;
    size_t *idLens;
} DirVerReq;

/* One master of the slot map and the thread's connection to it. */
typedef struct DirConn {
    redisContext *ctx; /* NULL while disconnected */
    int64_t retryMs;   /* monotonic: no new connect attempt before it */
    char err[256];     /* why it is down, for DIR_UNAVAILABLE results */
    int policyChecked; /* its maxmemory-policy was read (once per master) */
    /* This node's marker on this master (see dirAddMarks): its key, in a slot
     * the master serves (NULL: none yet), and the value the master last
     * acknowledged (0: none expected yet). */
    char *markKey;
    size_t markKeyLen;
    uint64_t markSeq;
} DirConn;

/* One command of a batch, formatted once so that a redirection can resend
 * it as is. */
typedef struct DirCmd {
    char *cmd;
    size_t len;
    int slot;
    int master;        /* where it went; -1: no master serves the slot */
    redisReply *reply; /* NULL: its shard could not be reached */
    int mark;          /* a marker (dirAddMarks) of master markMaster, value markVal */
    int markMaster;
    uint64_t markVal;
    /* When set, an ASK for this command is followed by onAsk(c, m, askArg)
     * instead of the command itself after ASKING: a script on more than one
     * key cannot run on an importing master before all its keys are there
     * (TRYAGAIN), so its writer says what to send instead. It leaves the
     * final answer in c->reply, or NULL when master m was lost. */
    void (*onAsk)(struct DirCmd *c, int m, const void *askArg);
    const void *askArg;
} DirCmd;

typedef struct DirBatch {
    DirCmd *cmds;
    size_t n, cap;
} DirBatch;

/* A node entry as an object lookup read it (see OBJ_DIR_NODE_CACHE). */
typedef struct DirNodeCached {
    DirNode node;   /* node.name[0] == '\0': free slot */
    int64_t readMs; /* dirNowMs when read */
    uint64_t gen;   /* the lookup batch that read it */
} DirNodeCached;

/* One queued request; the caller's arguments are copied into it. */
typedef struct DirOp {
    ObjListLink link; /* in the queue, or in the list being worked on */
    DirOpKind kind;
    uint64_t size, metaSize, checksum; /* publish */
    DirCopy copy;                      /* publish */
    uint32_t want;                     /* publish: copies wanted (>= 1) */
    int resync;                        /* publish: from a re-publish, not a fresh seal */
    char *takeover;                    /* publish: the owner it takes over from, or NULL */
    int writesAhead;                   /* barrier: taken while writes before it wait */
    size_t cmdIndex;                   /* publish, unpublish: its script's place in the batch */
    DirVerReq *ver;                    /* DIR_OP_VERSION */
    DirResultFn *cb;                   /* lookup, list */
    void *arg;
    size_t idLen;
    char id[]; /* idLen bytes + NUL */
} DirOp;

/* The op holding link l. */
#define dirOpOf(l) objListEntry((l), DirOp, link)

typedef struct DirState {
    /* Shared with the callers; everything in this group is guarded by lock. */
    pthread_mutex_t lock;
    pthread_cond_t wake;   /* work queued or stop requested */
    int started;           /* between dirStart and the end of dirStop */
    int accepting;         /* callers may enqueue */
    int stopping;          /* the thread must unregister and exit */
    ObjList queue;         /* FIFO of requests (DirOp.link) */
    size_t pendingWrites;  /* publishes + unpublishes in the queue */
    size_t batchWrites;    /* of them, taken by the thread and not yet answered */
    int64_t writesSinceMs; /* when the oldest of them was queued (dirNowMs), 0 if none */
    size_t pendingReads;   /* lookups + listings in the queue */
    int needSnapshot;      /* re-publish everything at the next chance */
    int serverUp;          /* dirServerUp: if down, connect at once and start backoff anew */
    int draining;          /* dirSetDraining: the registration's draining field */
    int beatNow;           /* dirSetDraining: renew the registration at the next turn */
    uint64_t bootId;       /* this incarnation's boot id (DirConfig.boot), 0 before a start */
    DirStats stats;

    /* Owned by the directory thread (set up before it starts). */
    pthread_t thread;
    DirConfig cfg;
    DirSnapshotFn *snapshot;
    void *snapshotArg;
    SlotsAddr seeds[OBJ_DIR_SEEDS_MAX]; /* where the slot map is read first */
    int nSeeds;
    SlotsMap map;      /* slot -> master; one master for a single Redis */
    int haveMap;       /* map has been read at least once */
    int mapStale;      /* a MOVED or a lost master: re-read it at nextConnectMs */
    int mapCovered;    /* slots that have a master */
    uint64_t markNext; /* the last marker value written (dirAddMarks) */
    DirConn *conns;    /* nConns == map.nMasters, same order */
    int nConns;
    int everConnected;
    int backoffMs;
    int64_t nextConnectMs, nextHeartbeatMs; /* monotonic */
    int64_t nextPurgeMs;                    /* monotonic: next read of the purge log */
    char purgeLastId[48];                   /* the last purge log entry seen ("": none read) */
    char *nodeKey;                          /* objstore:node:<name> */
    char *bucketKey;                        /* objstore:nodes:{b<k>}, this node's bucket */
    size_t nodeKeyLen, bucketKeyLen, nameLen;
    char boot[24];         /* this incarnation's boot id in decimal (dirBootId's) */
    char lastIoError[256]; /* why the directory is unreachable, for results */
    DirNodeCached nodeCache[OBJ_DIR_NODE_CACHE];
    int nodeCacheNext;     /* the slot a new name takes when none is free */
    uint64_t nodeCacheGen; /* the current lookup batch */
} DirState;

extern DirState dir;

/* ---- state.c ---------------------------------------------------------------------- */

void dirOom(void);
void *dirMalloc(size_t n);
void *dirCalloc(size_t n, size_t size);
int64_t dirNowMs(void);
int64_t dirWallMs(void);
struct timeval dirTimeval(int ms);
/* Schedules the next connect attempt one backoff from now and doubles it. */
void dirBackoff(void);
void dirNoteError(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void dirLog(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dirScheduleSnapshot(const char *why);
void dirCountDone(uint64_t publishes, uint64_t unpublishes, uint64_t lookups);
int dirStopRequested(void);
int dirOpIsWrite(const DirOp *op);
DirOp *dirOpNew(DirOpKind kind, const char *id, size_t idLen);
void dirOpFree(DirOp *op);
void dirOpsFree(ObjList *list);
DirResult *dirResultNew(const char *id, size_t idLen);
void dirResultSet(DirResult *res, DirStatus status, const char *fmt, ...);
void dirFailOne(DirOp *op, const char *why);
void dirFailReads(ObjList *list, const char *why);

/* ---- queue.c (the *Locked ones with dir.lock held) --------------------------------- */

void dirPushLocked(DirOp *op);
void dirTakeLocked(ObjList *out, size_t max);
void dirTakeReadsLocked(ObjList *out);
void dirRequeueFront(ObjList *list);

/* ---- keys.c ------------------------------------------------------------------------- */

char *dirObjKey(const char *id, size_t idLen, const char *suffix, size_t *lenOut);
char *dirNodeKey(const char *name, size_t nameLen, size_t *lenOut);
char *dirBucketKey(int k, size_t *lenOut);
char *dirMarkKey(unsigned tag, size_t *lenOut);
int dirBucketOf(const char *name, size_t nameLen);

/* ---- tomb.c ------------------------------------------------------------------------- */

#define OBJ_DIR_GEN_MAX 64 /* "size:meta_size:checksum" and its NUL */
size_t dirGenFormat(char *out, uint64_t size, uint64_t metaSize, uint64_t checksum);
void dirApplyPurge(const char *id, size_t idLen, const char *gen, size_t genLen);

/* ---- conn.c ------------------------------------------------------------------------- */

void dirConnFail(int m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void dirConnsSync(void);
int dirConnEnsure(int m, int force);
redisReply *dirReadFrom(int m);
int dirFlush(int m);
int dirMapLoad(void);
int dirAllUp(void);
void dirConnsCloseAll(void);

/* ---- batch.c ------------------------------------------------------------------------ */

void dirBatchAdd(DirBatch *b, const char *key, size_t keyLen, int argc, const char **argv,
                 const size_t *lens);
void dirBatchFree(DirBatch *b);
const char *dirCmdWhy(const DirCmd *c);
void dirBatchRun(DirBatch *b);
void dirAck(const redisReply *r);

/* ---- publish.c ---------------------------------------------------------------------- */

int dirHeartbeat(void);
void dirUnregister(void);
void dirAddWrite(DirBatch *b, DirOp *op);
/* Drops the publishes of writes whose copy this node no longer holds. */
void dirDropGonePublishes(ObjList *writes);
void dirTakeWriteReplies(const DirBatch *b, ObjList *writes);
int dirSendWrites(ObjList *list);
void dirRepublish(void);
void dirAddMarks(DirBatch *b, size_t upTo, int every);
void dirCheckMarks(const DirBatch *b);

/* ---- lookup.c ----------------------------------------------------------------------- */

void dirDoLookups(ObjList *writes, DirOp **ops, size_t n);
void dirRunList(DirOp *op);
void dirRunNode(DirOp *op);

/* ---- versions.c --------------------------------------------------------------------- */

/* Purge log tunables: how often it is read, how long a tombstone lives, and
 * how many entries the log keeps (docs/cluster.md). */
#define OBJ_DIR_PURGE_POLL_MS 100
#define OBJ_DIR_TOMB_TTL_MS   (24LL * 3600 * 1000) /* unless DirConfig.tombTtlMs says */
#define OBJ_DIR_PURGE_LOG_MAX 100000
#define OBJ_DIR_PURGE_LOG     "objstore:purgelog"

void dirRunVersion(DirOp *op);
void dirFollowPurges(void);

/* ---- claim.c ------------------------------------------------------------------------ */

void dirRunClaim(DirOp *op);
void dirRunBarrier(DirOp *op);

/* ---- thread.c ----------------------------------------------------------------------- */

void *dirThreadMain(void *unused);

#endif /* OBJSTORE_DIRINT_H */
