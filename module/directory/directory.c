/*
 * directory.c - the object directory client: one background thread that owns
 * a blocking hiredis connection to the directory Redis and a FIFO of work.
 *
 * Callers (the Redis main thread, transfer threads) only copy their request
 * into the queue and signal the thread, so a slow or dead directory never
 * stalls them. The thread connects (with backoff when it cannot), registers
 * the node and renews it every heartbeat, and drains the queue in pipelined
 * rounds. Lookups and node listings answer through a callback that runs on
 * this thread, exactly once per request, also when the directory is down.
 *
 * Writes are idempotent (HSET, SADD, a remove-if-last script), which is what
 * makes failure handling simple: when the connection breaks, writes whose
 * replies were not read go back to the head of the queue and are sent again
 * after reconnecting. Every (re)connect first re-publishes all local objects
 * through the snapshot callback, because a restarted directory may have lost
 * everything, and only then drains the queue, so the queue's later history
 * (deletes in particular) is applied on top of the snapshot.
 *
 * Allocation failure aborts, as it does everywhere in Redis.
 */
#include "directory.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include <hiredis/hiredis.h>

#include "slots.h"

/* ---- tunables ----------------------------------------------------------------- */

#define OBJ_DIR_CONNECT_TIMEOUT_MS 500
#define OBJ_DIR_COMMAND_TIMEOUT_MS 1000
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
 * that much longer; a fetch from it fails over to the next location. */
#define OBJ_DIR_NODE_CACHE 256
/* MOVED/ASK hops followed for one command before giving up on it. */
#define OBJ_DIR_REDIRECTS_MAX 5

/* The node registry is OBJ_DIR_NODE_BUCKETS sets objstore:nodes:{b<k>}, a
 * node in bucket CRC16(name) % OBJ_DIR_NODE_BUCKETS: no single key that
 * every heartbeat writes, and on a cluster the buckets' slots spread over
 * the shards. Changing the count orphans registrations for one node-ttl. */
#define OBJ_DIR_NODE_BUCKETS 16
#define OBJ_DIR_NODES_PREFIX "objstore:nodes:"
#define OBJ_DIR_NODE_PREFIX  "objstore:node:"

/* Removes one location and, atomically with it, the object's meta once no
 * location is left. KEYS[1] = loc set, KEYS[2] = meta hash, ARGV[1] = node. */
static const char dirUnpublishScript[] =
    "redis.call('SREM', KEYS[1], ARGV[1]) "
    "if redis.call('SCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[2]) end "
    "return 1";

/* ---- control block -------------------------------------------------------------- */

typedef enum DirOpKind {
    DIR_OP_PUBLISH,
    DIR_OP_UNPUBLISH,
    DIR_OP_LOOKUP,
    DIR_OP_LIST,
    DIR_OP_NODE /* one node's entry, by name (in id) */
} DirOpKind;

/* One master of the slot map and the thread's connection to it. */
typedef struct DirConn {
    redisContext *ctx; /* NULL while disconnected */
    int64_t retryMs;   /* monotonic: no new connect attempt before it */
    char err[256];     /* why it is down, for DIR_UNAVAILABLE results */
} DirConn;

/* One command of a batch, formatted once so that a redirection can resend
 * it as is. */
typedef struct DirCmd {
    char *cmd;
    size_t len;
    int slot;
    int master;        /* where it went; -1: no master serves the slot */
    redisReply *reply; /* NULL: its shard could not be reached */
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
    struct DirOp *next;
    DirOpKind kind;
    uint64_t size, metaSize, checksum; /* publish */
    DirResultFn *cb;                   /* lookup, list */
    void *arg;
    size_t idLen;
    char id[]; /* idLen bytes + NUL */
} DirOp;

typedef struct DirState {
    /* Shared with the callers; everything in this group is guarded by lock. */
    pthread_mutex_t lock;
    pthread_cond_t wake;   /* work queued or stop requested */
    int started;           /* between dirStart and the end of dirStop */
    int accepting;         /* callers may enqueue */
    int stopping;          /* the thread must unregister and exit */
    DirOp *head, *tail;    /* FIFO of requests */
    size_t pendingWrites;  /* publishes + unpublishes in the queue */
    int64_t writesSinceMs; /* when the oldest of them was queued (dirNowMs), 0 if none */
    size_t pendingReads;   /* lookups + listings in the queue */
    int needSnapshot;      /* re-publish everything at the next chance */
    DirStats stats;

    /* Owned by the directory thread (set up before it starts). */
    pthread_t thread;
    DirConfig cfg;
    DirSnapshotFn *snapshot;
    void *snapshotArg;
    SlotsAddr seeds[OBJ_DIR_SEEDS_MAX]; /* where the slot map is read first */
    int nSeeds;
    SlotsMap map;   /* slot -> master; one master for a single Redis */
    int haveMap;    /* map has been read at least once */
    int mapStale;   /* a MOVED or a lost master: re-read it at nextConnectMs */
    int mapCovered; /* slots that have a master */
    DirConn *conns; /* nConns == map.nMasters, same order */
    int nConns;
    int everConnected;
    int backoffMs;
    int64_t nextConnectMs, nextHeartbeatMs; /* monotonic */
    char *nodeKey;                          /* objstore:node:<name> */
    char *bucketKey;                        /* objstore:nodes:{b<k>}, this node's bucket */
    size_t nodeKeyLen, bucketKeyLen, nameLen;
    char lastIoError[256]; /* why the directory is unreachable, for results */
    DirNodeCached nodeCache[OBJ_DIR_NODE_CACHE];
    int nodeCacheNext;     /* the slot a new name takes when none is free */
    uint64_t nodeCacheGen; /* the current lookup batch */
} DirState;

static DirState dir = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Collects what the snapshot callback emits; see dirRepublish. */
typedef struct DirCollect {
    DirOp *head, *tail;
} DirCollect;

/* ---- small helpers ------------------------------------------------------------------ */

/* Out of memory: there is no sane way on, so stop like Redis does. */
static void dirOom(void)
{
    fprintf(stderr, "objstore directory: out of memory\n");
    abort();
}

/* malloc/calloc that never return NULL (they abort instead). */
static void *dirMalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (p == NULL)
        dirOom();
    return p;
}

static void *dirCalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (p == NULL)
        dirOom();
    return p;
}

static int64_t dirNowMs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t dirWallMs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct timeval dirTimeval(int ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    return tv;
}

/* Builds the key objstore:{<id>}<suffix> (binary-safe). Returns a malloc'd
 * buffer and its length in *lenOut; can't fail. The hash tag is the same for
 * both of an object's keys whatever the id holds, so they share a slot. */
static char *dirObjKey(const char *id, size_t idLen, const char *suffix, size_t *lenOut)
{
    static const char prefix[] = "objstore:{";
    size_t plen = sizeof(prefix) - 1, slen = strlen(suffix);
    char *k = dirMalloc(plen + idLen + 1 + slen + 1);
    memcpy(k, prefix, plen);
    if (idLen > 0)
        memcpy(k + plen, id, idLen);
    k[plen + idLen] = '}';
    memcpy(k + plen + idLen + 1, suffix, slen + 1);
    *lenOut = plen + idLen + 1 + slen;
    return k;
}

/* Builds objstore:node:<name> for a name of nameLen bytes; can't fail. */
static char *dirNodeKey(const char *name, size_t nameLen, size_t *lenOut)
{
    size_t plen = sizeof(OBJ_DIR_NODE_PREFIX) - 1;
    char *k = dirMalloc(plen + nameLen + 1);
    memcpy(k, OBJ_DIR_NODE_PREFIX, plen);
    memcpy(k + plen, name, nameLen);
    k[plen + nameLen] = '\0';
    *lenOut = plen + nameLen;
    return k;
}

/* Counts one error and remembers its text for dirGetStats. */
static void dirNoteError(const char *fmt, ...)
{
    char msg[sizeof(dir.stats.lastError)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&dir.lock);
    dir.stats.errors++;
    memcpy(dir.stats.lastError, msg, sizeof(msg));
    pthread_mutex_unlock(&dir.lock);
}

static void dirCountDone(uint64_t publishes, uint64_t unpublishes, uint64_t lookups)
{
    pthread_mutex_lock(&dir.lock);
    dir.stats.publishes += publishes;
    dir.stats.unpublishes += unpublishes;
    dir.stats.lookups += lookups;
    pthread_mutex_unlock(&dir.lock);
}

/* dirStop has been called: long work (a big re-publish) stops early. */
static int dirStopRequested(void)
{
    pthread_mutex_lock(&dir.lock);
    int stopping = dir.stopping;
    pthread_mutex_unlock(&dir.lock);
    return stopping;
}

static int dirOpIsWrite(const DirOp *op)
{
    return op->kind == DIR_OP_PUBLISH || op->kind == DIR_OP_UNPUBLISH;
}

static DirOp *dirOpNew(DirOpKind kind, const char *id, size_t idLen)
{
    DirOp *op = dirCalloc(1, sizeof(*op) + idLen + 1);
    op->kind = kind;
    op->idLen = idLen;
    if (idLen > 0)
        memcpy(op->id, id, idLen);
    return op;
}

static void dirOpsFree(DirOp *op)
{
    while (op != NULL) {
        DirOp *next = op->next;
        free(op);
        op = next;
    }
}

/* A fresh result for the callback, carrying a copy of the id; can't fail. */
static DirResult *dirResultNew(const char *id, size_t idLen)
{
    DirResult *res = dirCalloc(1, sizeof(*res));
    if (id != NULL) {
        res->id = dirMalloc(idLen + 1);
        if (idLen > 0)
            memcpy(res->id, id, idLen);
        res->id[idLen] = '\0';
        res->idLen = idLen;
    }
    return res;
}

static void dirResultSet(DirResult *res, DirStatus status, const char *fmt, ...)
{
    va_list ap;
    res->status = status;
    va_start(ap, fmt);
    vsnprintf(res->err, sizeof(res->err), fmt, ap);
    va_end(ap);
}

/* ---- the queue (callers hold dir.lock) ---------------------------------------------- */

static void dirCountLocked(const DirOp *op, int delta)
{
    if (dirOpIsWrite(op)) {
        if (dir.pendingWrites == 0 && delta > 0)
            dir.writesSinceMs = dirNowMs();
        dir.pendingWrites += (size_t)delta;
        if (dir.pendingWrites == 0)
            dir.writesSinceMs = 0;
    } else {
        dir.pendingReads += (size_t)delta;
    }
}

static void dirPushLocked(DirOp *op)
{
    op->next = NULL;
    if (dir.tail != NULL)
        dir.tail->next = op;
    else
        dir.head = op;
    dir.tail = op;
    dirCountLocked(op, 1);
    /* A write that joins others already waiting need not wake the thread:
     * it is asleep until their delay ends (OBJ_DIR_WRITE_DELAY_MS). */
    if (!dirOpIsWrite(op) || dir.pendingWrites == 1 || dir.pendingWrites >= OBJ_DIR_PIPELINE)
        pthread_cond_signal(&dir.wake);
}

/* Unlinks up to max operations from the head, in order. */
static DirOp *dirTakeLocked(size_t max)
{
    DirOp *first = dir.head, *last = NULL;
    for (size_t n = 0; n < max && dir.head != NULL; n++) {
        last = dir.head;
        dir.head = last->next;
        dirCountLocked(last, -1);
    }
    if (last != NULL)
        last->next = NULL;
    if (dir.head == NULL)
        dir.tail = NULL;
    return last != NULL ? first : NULL;
}

/* Unlinks every lookup and listing (keeping their order), leaving the writes
 * queued: used while the directory is down, to answer the reads at once. */
static DirOp *dirTakeReadsLocked(void)
{
    DirOp *reads = NULL, **readTail = &reads;
    DirOp **link = &dir.head;
    dir.tail = NULL;
    while (*link != NULL) {
        DirOp *op = *link;
        if (dirOpIsWrite(op)) {
            dir.tail = op;
            link = &op->next;
            continue;
        }
        *link = op->next;
        op->next = NULL;
        *readTail = op;
        readTail = &op->next;
        dirCountLocked(op, -1);
    }
    return reads;
}

/* list with rest linked after its last op (list must not be NULL). */
static DirOp *dirListAppend(DirOp *list, DirOp *rest)
{
    DirOp *tail = list;
    while (tail->next != NULL)
        tail = tail->next;
    tail->next = rest;
    return list;
}

/* Puts a list of unfinished operations back at the head, in order. */
static void dirRequeueFront(DirOp *list)
{
    if (list == NULL)
        return;
    pthread_mutex_lock(&dir.lock);
    DirOp *last = list;
    for (DirOp *op = list; op != NULL; op = op->next) {
        dirCountLocked(op, 1);
        last = op;
    }
    last->next = dir.head;
    dir.head = list;
    if (dir.tail == NULL)
        dir.tail = last;
    pthread_mutex_unlock(&dir.lock);
}

/* ---- connections: one per master ------------------------------------------------------- */

/*
 * Drops master m's connection after an I/O error (or a reply saying the
 * server cannot serve now), remembers why for DIR_UNAVAILABLE results, and
 * schedules a re-read of the slot map with backoff: a dead connection is how
 * a failover shows, and the shard may come back empty, so a full re-publish
 * is due as well. Can't fail.
 */
static void dirConnFail(int m, const char *fmt, ...)
{
    DirConn *c = &dir.conns[m];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    memcpy(dir.lastIoError, c->err, sizeof(dir.lastIoError));
    dirNoteError("%s", c->err);

    redisFree(c->ctx);
    c->ctx = NULL;
    int64_t now = dirNowMs();
    c->retryMs = now + dir.backoffMs;
    dir.mapStale = 1;
    dir.nextConnectMs = now + dir.backoffMs;
    dir.backoffMs =
        dir.backoffMs * 2 > OBJ_DIR_BACKOFF_MAX_MS ? OBJ_DIR_BACKOFF_MAX_MS : dir.backoffMs * 2;
    pthread_mutex_lock(&dir.lock);
    dir.stats.connected = 0;
    dir.needSnapshot = 1;
    pthread_mutex_unlock(&dir.lock);

    /* SIGPIPE is blocked on this thread; discard one left pending by the
     * broken socket so it can never surface later. */
    sigset_t pipeSet;
    struct timespec zero = {0, 0};
    sigemptyset(&pipeSet);
    sigaddset(&pipeSet, SIGPIPE);
    while (sigtimedwait(&pipeSet, NULL, &zero) == SIGPIPE) {
    }
}

/* Error replies that mean "not now" rather than "not this way": the server
 * is starting, busy, not writable, or its cluster is failing over. They are
 * treated like a lost link. */
static int dirIsTransient(const char *msg)
{
    static const char *const words[] = {"LOADING",    "BUSY",     "NOAUTH",      "READONLY",
                                        "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS"};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        size_t n = strlen(words[i]);
        if (strncmp(msg, words[i], n) == 0 && (msg[n] == ' ' || msg[n] == '\0'))
            return 1;
    }
    return 0;
}

/* Keeps dir.conns as long as dir.map.masters (new entries disconnected). */
static void dirConnsSync(void)
{
    if (dir.nConns >= dir.map.nMasters)
        return;
    DirConn *grown = realloc(dir.conns, (size_t)dir.map.nMasters * sizeof(*grown));
    if (grown == NULL)
        dirOom();
    memset(grown + dir.nConns, 0, (size_t)(dir.map.nMasters - dir.nConns) * sizeof(*grown));
    dir.conns = grown;
    dir.nConns = dir.map.nMasters;
}

/*
 * Opens a connection to host:port with the connect and command timeouts,
 * keepalive and AUTH. Returns the context, or NULL with why in err.
 */
static redisContext *dirOpen(const char *host, int port, char *err, size_t errLen)
{
    redisContext *c = redisConnectWithTimeout(host, port, dirTimeval(OBJ_DIR_CONNECT_TIMEOUT_MS));
    if (c == NULL || c->err) {
        snprintf(err, errLen, "cannot connect to directory %.64s:%d: %s", host, port,
                 c != NULL ? c->errstr : "out of memory");
        redisFree(c);
        return NULL;
    }
    if (redisSetTimeout(c, dirTimeval(OBJ_DIR_COMMAND_TIMEOUT_MS)) != REDIS_OK) {
        snprintf(err, errLen, "directory %.64s:%d: cannot set timeout", host, port);
        redisFree(c);
        return NULL;
    }
    redisEnableKeepAlive(c); /* only a hint: a failure here costs nothing */
    if (dir.cfg.password[0] != '\0') {
        redisReply *r = redisCommand(c, "AUTH %s", dir.cfg.password);
        if (r == NULL || r->type == REDIS_REPLY_ERROR) {
            snprintf(err, errLen, "directory %.64s:%d refused AUTH: %.64s", host, port,
                     r != NULL      ? r->str
                     : c->errstr[0] ? c->errstr
                                    : "connection lost");
            freeReplyObject(r);
            redisFree(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    return c;
}

/*
 * Makes sure master m has a connection. Without force, a master that failed
 * less than a backoff ago is not tried again, so that commands for a dead
 * shard fail at once. Returns 0, or -1 (dir.conns[m].err says why).
 */
static int dirConnEnsure(int m, int force)
{
    DirConn *c = &dir.conns[m];
    if (c->ctx != NULL)
        return 0;
    if (!force && dirNowMs() < c->retryMs)
        return -1;
    const SlotsAddr *a = &dir.map.masters[m];
    char err[sizeof(c->err)];
    c->ctx = dirOpen(a->host, a->port, err, sizeof(err));
    if (c->ctx == NULL) {
        dirConnFail(m, "%s", err);
        return -1;
    }
    return 0;
}

/*
 * Reads master m's next pipelined reply. Returns it (free with
 * freeReplyObject), or NULL when the connection failed or the server
 * answered with a transient error; then dirConnFail has run.
 */
static redisReply *dirReadFrom(int m)
{
    DirConn *c = &dir.conns[m];
    const SlotsAddr *a = &dir.map.masters[m];
    redisReply *r = NULL;
    if (redisGetReply(c->ctx, (void **)&r) != REDIS_OK || r == NULL) {
        dirConnFail(m, "directory %.64s:%d: %s", a->host, a->port,
                    c->ctx->errstr[0] ? c->ctx->errstr : "connection lost");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR && dirIsTransient(r->str)) {
        dirConnFail(m, "directory %.64s:%d: %s", a->host, a->port, r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* Sends what is buffered on master m's connection. Returns 0, or -1 after
 * dirConnFail. */
static int dirFlush(int m)
{
    DirConn *c = &dir.conns[m];
    int done = 0;
    while (!done) {
        if (redisBufferWrite(c->ctx, &done) != REDIS_OK) {
            const SlotsAddr *a = &dir.map.masters[m];
            dirConnFail(m, "directory %.64s:%d: %s", a->host, a->port, c->ctx->errstr);
            return -1;
        }
    }
    return 0;
}

/* ---- the slot map ------------------------------------------------------------------------ */

/*
 * Fills map from a CLUSTER SLOTS reply; an entry whose host is empty or "?"
 * (an endpoint the server does not know) means the server asked. Returns the
 * number of slots covered (0 for a reply of no use).
 */
static int dirMapFromReply(const redisReply *r, const SlotsAddr *asked, SlotsMap *map)
{
    if (r->type != REDIS_REPLY_ARRAY)
        return 0;
    for (size_t i = 0; i < r->elements; i++) {
        const redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2)
            continue;
        const redisReply *host = e->element[2]->element[0], *port = e->element[2]->element[1];
        if (host->type != REDIS_REPLY_STRING || port->type != REDIS_REPLY_INTEGER ||
            port->integer <= 0 || port->integer > 65535 || host->len >= SLOTS_HOST_MAX)
            continue;
        char h[SLOTS_HOST_MAX];
        if (host->len == 0 || (host->len == 1 && host->str[0] == '?'))
            snprintf(h, sizeof(h), "%s", asked->host);
        else
            snprintf(h, sizeof(h), "%.*s", (int)host->len, host->str);
        if (slotsMapAssign(map, (int)e->element[0]->integer, (int)e->element[1]->integer, h,
                           (int)port->integer) < 0 &&
            slotsMapAddMaster(map, h, (int)port->integer) < 0)
            dirOom(); /* the range was bad, or adding the master ran out of memory */
    }
    return slotsMapCovered(map);
}

/*
 * Asks one server for the slot map, on its existing connection when it is a
 * master already connected, else on a connection of its own. A server that
 * refuses CLUSTER SLOTS (other than for a transient reason) is a single
 * Redis: one master, every slot. Returns 0 with map filled, or -1 with why
 * in err.
 */
static int dirMapAsk(const SlotsAddr *a, SlotsMap *map, char *err, size_t errLen)
{
    int m = slotsMapFind(&dir.map, a->host, a->port);
    redisContext *c = m >= 0 && m < dir.nConns ? dir.conns[m].ctx : NULL;
    int own = c == NULL;
    if (own && (c = dirOpen(a->host, a->port, err, errLen)) == NULL)
        return -1;
    int rc = -1;
    redisReply *r = redisCommand(c, "CLUSTER SLOTS");
    if (r == NULL) {
        snprintf(err, errLen, "directory %.64s:%d: %s", a->host, a->port,
                 c->errstr[0] ? c->errstr : "connection lost");
        if (!own) {
            dirConnFail(m, "%s", err);
            c = NULL;
        }
    } else if (r->type == REDIS_REPLY_ERROR && !dirIsTransient(r->str)) {
        /* "cluster support disabled": a single Redis. Any other refusal (the
         * command renamed away, an ACL without +cluster) is taken the same
         * way; should the server be a cluster node after all, its MOVED
         * answers teach the map slot by slot. */
        if (slotsMapAssign(map, 0, SLOTS_COUNT - 1, a->host, a->port) < 0)
            dirOom();
        rc = 0;
    } else if (r->type == REDIS_REPLY_ERROR) {
        snprintf(err, errLen, "directory %.64s:%d: %.64s", a->host, a->port, r->str);
    } else if (dirMapFromReply(r, a, map) == 0) {
        snprintf(err, errLen, "directory %.64s:%d: CLUSTER SLOTS lists no slot", a->host, a->port);
    } else {
        rc = 0;
    }
    freeReplyObject(r);
    if (own)
        redisFree(c);
    return rc;
}

/*
 * Re-reads the slot map: from the masters of the current map (connected ones
 * first), then from the seeds. Connections of masters that stay are kept,
 * the others closed. Returns 0, or -1 with dir.lastIoError set (the old map
 * stays).
 */
static int dirMapLoad(void)
{
    SlotsMap *fresh = dirMalloc(sizeof(*fresh));
    slotsMapInit(fresh);
    int nAddr = 0, rc = -1;
    SlotsAddr *addrs = dirCalloc((size_t)(dir.map.nMasters + dir.nSeeds), sizeof(*addrs));
    for (int pass = 0; pass < 2; pass++)
        for (int m = 0; m < dir.map.nMasters; m++)
            if ((dir.conns[m].ctx != NULL) == (pass == 0))
                addrs[nAddr++] = dir.map.masters[m];
    for (int s = 0; s < dir.nSeeds; s++)
        addrs[nAddr++] = dir.seeds[s];
    char err[sizeof(dir.lastIoError)] = "no directory address";
    for (int i = 0; i < nAddr && rc != 0; i++) {
        rc = dirMapAsk(&addrs[i], fresh, err, sizeof(err));
        if (rc != 0)
            slotsMapReset(fresh);
    }
    free(addrs);
    if (rc != 0) {
        memcpy(dir.lastIoError, err, sizeof(err));
        dirNoteError("%s", err);
        slotsMapReset(fresh);
        free(fresh);
        return -1;
    }

    /* Carry the connections over by address, close the rest. */
    DirConn *conns = dirCalloc((size_t)fresh->nMasters, sizeof(*conns));
    for (int m = 0; m < dir.nConns; m++) {
        int to = slotsMapFind(fresh, dir.map.masters[m].host, dir.map.masters[m].port);
        if (to >= 0)
            conns[to] = dir.conns[m];
        else
            redisFree(dir.conns[m].ctx);
    }
    free(dir.conns);
    slotsMapReset(&dir.map);
    dir.map = *fresh;
    free(fresh);
    dir.conns = conns;
    dir.nConns = dir.map.nMasters;
    dir.mapCovered = slotsMapCovered(&dir.map);
    dir.haveMap = 1;
    dir.mapStale = 0;
    return 0;
}

/* Every slot has a master, every master a connection, and the map is not
 * known to be stale: writes may flow. */
static int dirAllUp(void)
{
    if (!dir.haveMap || dir.mapStale || dir.mapCovered != SLOTS_COUNT)
        return 0;
    for (int m = 0; m < dir.nConns; m++)
        if (dir.conns[m].ctx == NULL)
            return 0;
    return 1;
}

/* ---- batches: commands grouped per master, pipelined, redirections followed --------------- */

/* Adds one command for key (which routes it) to a batch; can't fail. */
static void dirBatchAdd(DirBatch *b, const char *key, size_t keyLen, int argc, const char **argv,
                        const size_t *lens)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 16;
        DirCmd *grown = realloc(b->cmds, b->cap * sizeof(*grown));
        if (grown == NULL)
            dirOom();
        b->cmds = grown;
    }
    DirCmd *c = &b->cmds[b->n++];
    memset(c, 0, sizeof(*c));
    int len = redisFormatCommandArgv(&c->cmd, argc, argv, lens);
    if (len < 0)
        dirOom();
    c->len = (size_t)len;
    c->slot = slotsKeySlot(key, keyLen);
    c->master = -1;
}

/* Frees the commands and replies of a batch and empties it. */
static void dirBatchFree(DirBatch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        redisFreeCommand(b->cmds[i].cmd);
        freeReplyObject(b->cmds[i].reply);
    }
    free(b->cmds);
    memset(b, 0, sizeof(*b));
}

/* Why a command has no reply, for DIR_UNAVAILABLE results. */
static const char *dirCmdWhy(const DirCmd *c)
{
    if (c->master >= 0 && c->master < dir.nConns && dir.conns[c->master].err[0] != '\0')
        return dir.conns[c->master].err;
    if (c->master < 0)
        return "no directory master serves the slot (the cluster is failing over)";
    return dir.lastIoError;
}

/*
 * Follows a MOVED or ASK answer to one command, at most a few hops: MOVED
 * fixes the slot in the map and asks for a full re-read soon, ASK sends
 * ASKING first and changes nothing. c->reply ends as the final answer, or
 * NULL when the target cannot be reached.
 */
static void dirRedirect(DirCmd *c)
{
    for (int hop = 0; hop < OBJ_DIR_REDIRECTS_MAX; hop++) {
        SlotsRedirect rd;
        if (c->reply == NULL || c->reply->type != REDIS_REPLY_ERROR ||
            slotsParseRedirect(c->reply->str, c->reply->len, &rd) != 0)
            return;
        char host[SLOTS_HOST_MAX];
        snprintf(host, sizeof(host), "%s",
                 rd.to.host[0] != '\0' ? rd.to.host : dir.map.masters[c->master].host);
        int m = slotsMapAddMaster(&dir.map, host, rd.to.port);
        if (m < 0)
            dirOom();
        dirConnsSync();
        if (rd.kind == SLOTS_REDIRECT_MOVED) {
            slotsMapAssign(&dir.map, rd.slot, rd.slot, host, rd.to.port);
            dir.mapStale = 1;
            dir.nextConnectMs = dirNowMs(); /* re-read the whole map at once */
        }
        freeReplyObject(c->reply);
        c->reply = NULL;
        c->master = m;
        if (dirConnEnsure(m, 1) != 0)
            return;
        if (rd.kind == SLOTS_REDIRECT_ASK &&
            redisAppendCommand(dir.conns[m].ctx, "ASKING") != REDIS_OK)
            dirOom();
        if (redisAppendFormattedCommand(dir.conns[m].ctx, c->cmd, c->len) != REDIS_OK)
            dirOom();
        if (rd.kind == SLOTS_REDIRECT_ASK) {
            redisReply *ok = dirReadFrom(m);
            if (ok == NULL)
                return;
            freeReplyObject(ok);
        }
        c->reply = dirReadFrom(m);
    }
}

/*
 * Runs a batch: each command goes to the master of its slot; all masters get
 * their share pipelined before any reply is read, so a batch costs one round
 * trip however many shards it touches. Afterwards every command has its
 * reply, or NULL when its shard could not be reached (dirCmdWhy says why).
 * Can't fail otherwise.
 */
static void dirBatchRun(DirBatch *b)
{
    if (!dir.haveMap || b->n == 0)
        return;
    enum { UNUSED = 0, SENDING, FAILED };
    unsigned char *state = dirCalloc((size_t)dir.nConns, 1);
    for (size_t i = 0; i < b->n; i++) {
        DirCmd *c = &b->cmds[i];
        c->master = slotsMapOwner(&dir.map, c->slot);
        if (c->master < 0)
            continue;
        if (state[c->master] == UNUSED)
            state[c->master] = dirConnEnsure(c->master, 0) == 0 ? SENDING : FAILED;
        if (state[c->master] == SENDING &&
            redisAppendFormattedCommand(dir.conns[c->master].ctx, c->cmd, c->len) != REDIS_OK)
            dirOom(); /* hiredis only fails here when it cannot allocate */
    }
    for (int m = 0; m < dir.nConns; m++)
        if (state[m] == SENDING && dirFlush(m) != 0)
            state[m] = FAILED;
    for (size_t i = 0; i < b->n; i++) {
        DirCmd *c = &b->cmds[i];
        if (c->master < 0 || state[c->master] != SENDING)
            continue;
        c->reply = dirReadFrom(c->master);
        if (c->reply == NULL)
            state[c->master] = FAILED;
    }
    free(state);
    for (size_t i = 0; i < b->n; i++)
        dirRedirect(&b->cmds[i]);
}

/* Counts an error reply to a write (the write cannot succeed by being
 * repeated); the reply stays with the batch. */
static void dirAck(const redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR)
        dirNoteError("directory write refused: %s", r->str);
}

/*
 * On a Redis Cluster, every master this node holds a connection to answers
 * a PING once per heartbeat. The heartbeat itself reaches only the shards
 * of this node's two keys; without this a failover of another shard goes
 * unnoticed by a node with nothing to write there, and that node never
 * re-publishes what the promoted replica may have lost. A dead link is
 * handled like any other (dirConnFail: map re-read, full re-publish). Can't
 * fail.
 */
static void dirPingMasters(void)
{
    if (dir.nConns < 2)
        return; /* one Redis: the heartbeat just talked to it */
    for (int m = 0; m < dir.nConns; m++) {
        redisContext *ctx = dir.conns[m].ctx;
        if (ctx == NULL)
            continue;
        redisReply *r = redisCommand(ctx, "PING");
        if (r == NULL) {
            char why[128];
            snprintf(why, sizeof(why), "%s", ctx->errstr);
            dirConnFail(m, "PING: %s", why);
            continue;
        }
        freeReplyObject(r);
    }
}

/*
 * Registers this node (or renews it): HSET its fields and PEXPIRE its key,
 * and SADD it to its registry bucket, in one round. Returns 0, or -1 when a
 * shard could not be reached (dirConnFail has run). Error replies are
 * counted only. Then dirPingMasters.
 */
static int dirHeartbeat(void)
{
    char tcpPort[16], rdmaPort[16], features[16], beat[24];
    char ttl[24];
    snprintf(tcpPort, sizeof(tcpPort), "%d", dir.cfg.tcpPort);
    snprintf(rdmaPort, sizeof(rdmaPort), "%d", dir.cfg.rdmaPort);
    snprintf(features, sizeof(features), "%" PRIu32, dir.cfg.features);
    snprintf(beat, sizeof(beat), "%" PRId64, dirWallMs());
    snprintf(ttl, sizeof(ttl), "%d", dir.cfg.ttlMs);

    const char *hset[] = {"HSET",     dir.nodeKey, "addr",           dir.cfg.addr, "tcp_port",
                          tcpPort,    "rdma_addr", dir.cfg.rdmaAddr, "rdma_port",  rdmaPort,
                          "features", features,    "heartbeat_ms",   beat};
    enum { HSET_ARGC = sizeof(hset) / sizeof(hset[0]) };
    size_t hsetLen[HSET_ARGC];
    for (int i = 0; i < HSET_ARGC; i++)
        hsetLen[i] = strlen(hset[i]);
    hsetLen[1] = dir.nodeKeyLen;
    const char *expire[] = {"PEXPIRE", dir.nodeKey, ttl};
    size_t expireLen[] = {7, dir.nodeKeyLen, strlen(ttl)};
    const char *sadd[] = {"SADD", dir.bucketKey, dir.cfg.nodeName};
    size_t saddLen[] = {4, dir.bucketKeyLen, dir.nameLen};

    DirBatch b = {0};
    dirBatchAdd(&b, dir.nodeKey, dir.nodeKeyLen, HSET_ARGC, hset, hsetLen);
    dirBatchAdd(&b, dir.nodeKey, dir.nodeKeyLen, 3, expire, expireLen);
    dirBatchAdd(&b, dir.bucketKey, dir.bucketKeyLen, 3, sadd, saddLen);
    dir.nextHeartbeatMs = dirNowMs() + dir.cfg.heartbeatMs;
    dirBatchRun(&b);
    int rc = 0;
    for (size_t i = 0; i < b.n; i++) {
        if (b.cmds[i].reply == NULL)
            rc = -1;
        else
            dirAck(b.cmds[i].reply);
    }
    dirBatchFree(&b);
    dirPingMasters();
    return rc;
}

/* ---- writes ---------------------------------------------------------------------------- */

/* Adds the commands of one publish or unpublish to a batch. Both keys carry
 * the {id} tag, so they go to one shard, in order. */
static void dirAddWrite(DirBatch *b, const DirOp *op)
{
    size_t metaLen, locLen;
    char *metaKey = dirObjKey(op->id, op->idLen, ":meta", &metaLen);
    char *locKey = dirObjKey(op->id, op->idLen, ":loc", &locLen);

    if (op->kind == DIR_OP_PUBLISH) {
        char size[24], metaSize[24], checksum[24];
        snprintf(size, sizeof(size), "%" PRIu64, op->size);
        snprintf(metaSize, sizeof(metaSize), "%" PRIu64, op->metaSize);
        snprintf(checksum, sizeof(checksum), "%016" PRIx64, op->checksum);
        /* The location goes in first: an unpublish by another node that
         * runs in between then sees a non-empty set and keeps the meta. */
        const char *sadd[] = {"SADD", locKey, dir.cfg.nodeName};
        size_t saddLen[] = {4, locLen, dir.nameLen};
        const char *hset[] = {"HSET",      metaKey,  "size",     size,
                              "meta_size", metaSize, "checksum", checksum};
        size_t hsetLen[] = {4, metaLen, 4, strlen(size), 9, strlen(metaSize), 8, 16};
        dirBatchAdd(b, locKey, locLen, 3, sadd, saddLen);
        dirBatchAdd(b, metaKey, metaLen, 8, hset, hsetLen);
    } else {
        const char *eval[] = {"EVAL", dirUnpublishScript, "2", locKey, metaKey, dir.cfg.nodeName};
        size_t evalLen[] = {4, sizeof(dirUnpublishScript) - 1, 1, locLen, metaLen, dir.nameLen};
        dirBatchAdd(b, locKey, locLen, 6, eval, evalLen);
    }
    free(metaKey);
    free(locKey);
}

/*
 * Takes the replies of the writes list .. end (exclusive), whose commands
 * dirAddWrite put first in the run batch b, in order: frees each op that
 * was answered (and counts it), and returns those that were not (their
 * shard could not be reached), in order, unlinked from end; NULL when all
 * were answered. Can't fail.
 */
static DirOp *dirTakeWriteReplies(const DirBatch *b, DirOp *list, DirOp *end)
{
    uint64_t publishes = 0, unpublishes = 0;
    DirOp *left = NULL, **leftTail = &left;
    size_t i = 0;
    while (list != end) {
        DirOp *next = list->next;
        size_t replies = list->kind == DIR_OP_PUBLISH ? 2 : 1, answered = 0;
        for (size_t k = i; k < i + replies; k++)
            answered += b->cmds[k].reply != NULL;
        if (answered < replies) {
            list->next = NULL;
            *leftTail = list;
            leftTail = &list->next;
        } else {
            for (size_t k = i; k < i + replies; k++)
                dirAck(b->cmds[k].reply);
            if (list->kind == DIR_OP_PUBLISH)
                publishes++;
            else
                unpublishes++;
            free(list);
        }
        i += replies;
        list = next;
    }
    dirCountDone(publishes, unpublishes, 0);
    return left;
}

/*
 * Sends a list of publishes/unpublishes in pipelined rounds (each round one
 * batch over all shards), renewing the heartbeat between rounds when it is
 * due, and frees each operation once its replies are in. Returns NULL when
 * all were answered, or the operations not known to be applied, in order,
 * when a shard could not be reached (the caller requeues or drops them;
 * sending them again is harmless).
 */
static DirOp *dirSendWrites(DirOp *list)
{
    while (list != NULL) {
        if (dirStopRequested())
            return list;
        if (dirNowMs() >= dir.nextHeartbeatMs && dirHeartbeat() != 0)
            return list;
        DirBatch b = {0};
        DirOp *end = list;
        for (int n = 0; end != NULL && n < OBJ_DIR_PIPELINE; n++, end = end->next)
            dirAddWrite(&b, end);
        dirBatchRun(&b);
        DirOp *left = dirTakeWriteReplies(&b, list, end);
        dirBatchFree(&b);
        if (left != NULL)
            return dirListAppend(left, end);
        list = end;
    }
    return NULL;
}

/* The emit function handed to the snapshot callback: it only copies, so the
 * callback may hold its own locks while it iterates. */
static void dirCollectEmit(const char *id, size_t idLen, uint64_t size, uint64_t metaSize,
                           uint64_t checksum, void *emitArg)
{
    DirCollect *col = emitArg;
    DirOp *op = dirOpNew(DIR_OP_PUBLISH, id, idLen);
    op->size = size;
    op->metaSize = metaSize;
    op->checksum = checksum;
    if (col->tail != NULL)
        col->tail->next = op;
    else
        col->head = op;
    col->tail = op;
}

/*
 * Re-publishes every local object: collects them from the snapshot callback,
 * then sends them in pipelined rounds. When a shard fails half-way the rest
 * is dropped, because dirConnFail schedules a whole new snapshot.
 */
static void dirRepublish(void)
{
    if (dir.snapshot == NULL)
        return;
    DirCollect col = {NULL, NULL};
    dir.snapshot(dirCollectEmit, &col, dir.snapshotArg);
    dirOpsFree(dirSendWrites(col.head));
}

/*
 * (Re)connects: reads the slot map (from a known master or a seed), connects
 * to every master, registers, and re-publishes when a snapshot is due
 * (always after a failure, and on the first connect). While some shard
 * cannot be reached the next attempt is scheduled with backoff; the shards
 * that answer still get the heartbeat.
 */
static void dirConnect(void)
{
    if (dirMapLoad() != 0) {
        dir.nextConnectMs = dirNowMs() + dir.backoffMs;
        dir.backoffMs =
            dir.backoffMs * 2 > OBJ_DIR_BACKOFF_MAX_MS ? OBJ_DIR_BACKOFF_MAX_MS : dir.backoffMs * 2;
        return;
    }
    int down = 0;
    for (int m = 0; m < dir.nConns; m++)
        if (dirConnEnsure(m, 1) != 0)
            down = 1;
    if (dir.mapCovered != SLOTS_COUNT) {
        snprintf(dir.lastIoError, sizeof(dir.lastIoError),
                 "directory cluster: %d of %d slots have no master", SLOTS_COUNT - dir.mapCovered,
                 SLOTS_COUNT);
        dirNoteError("%s", dir.lastIoError);
        dir.mapStale = 1;
        dir.nextConnectMs = dirNowMs() + OBJ_DIR_BACKOFF_MIN_MS;
        down = 1;
    }
    if (dirHeartbeat() != 0 || down)
        return;

    pthread_mutex_lock(&dir.lock);
    if (dir.everConnected && !dir.stats.connected)
        dir.stats.reconnects++;
    dir.stats.connected = 1;
    int snapshot = dir.needSnapshot;
    dir.needSnapshot = 0;
    pthread_mutex_unlock(&dir.lock);
    dir.everConnected = 1;
    dir.backoffMs = OBJ_DIR_BACKOFF_MIN_MS;
    if (snapshot)
        dirRepublish();
}

/* ---- reads ----------------------------------------------------------------------------- */

/* The value of field in an HGETALL reply, or NULL when absent or not a string. */
static const redisReply *dirHashGet(const redisReply *h, const char *field)
{
    size_t flen = strlen(field);
    for (size_t i = 0; i + 1 < h->elements; i += 2) {
        const redisReply *k = h->element[i];
        if (k->type == REDIS_REPLY_STRING && (size_t)k->len == flen &&
            memcmp(k->str, field, flen) == 0) {
            const redisReply *v = h->element[i + 1];
            return v->type == REDIS_REPLY_STRING ? v : NULL;
        }
    }
    return NULL;
}

/* Parses field as a plain decimal in [0, max]: digits only, no sign or
 * spaces. Returns 0 and sets *out, or -1. */
static int dirHashU64(const redisReply *h, const char *field, uint64_t max, uint64_t *out)
{
    const redisReply *v = dirHashGet(h, field);
    if (v == NULL || v->len < 1 || v->len > 20)
        return -1;
    uint64_t n = 0;
    for (size_t i = 0; i < v->len; i++) {
        unsigned d = (unsigned char)v->str[i] - '0';
        if (d > 9 || n > (UINT64_MAX - d) / 10)
            return -1;
        n = n * 10 + d;
    }
    if (n > max)
        return -1;
    *out = n;
    return 0;
}

/* Parses field as exactly 16 hex digits. Returns 0 and sets *out, or -1. */
static int dirHashHex64(const redisReply *h, const char *field, uint64_t *out)
{
    const redisReply *v = dirHashGet(h, field);
    if (v == NULL || v->len != 16)
        return -1;
    uint64_t n = 0;
    for (int i = 0; i < 16; i++) {
        char c = v->str[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return -1;
        n = n << 4 | d;
    }
    *out = n;
    return 0;
}

/* Copies field as a C string into buf (cap bytes with the NUL); it may be
 * empty but must fit and hold no NUL. Returns 0, or -1. */
static int dirHashText(const redisReply *h, const char *field, char *buf, size_t cap)
{
    const redisReply *v = dirHashGet(h, field);
    if (v == NULL || (size_t)v->len >= cap || memchr(v->str, '\0', (size_t)v->len) != NULL)
        return -1;
    memcpy(buf, v->str, (size_t)v->len);
    buf[v->len] = '\0';
    return 0;
}

/* Fills res's size fields from a meta hash. Returns 0, or -1 with *why set. */
static int dirParseMeta(const redisReply *h, DirResult *res, const char **why)
{
    if (dirHashU64(h, "size", UINT64_MAX, &res->size) != 0)
        *why = "size is not a decimal number";
    else if (dirHashU64(h, "meta_size", UINT64_MAX, &res->metaSize) != 0)
        *why = "meta_size is not a decimal number";
    else if (dirHashHex64(h, "checksum", &res->checksum) != 0)
        *why = "checksum is not 16 hex digits";
    else
        return 0;
    return -1;
}

/* Fills a DirNode from a node hash. Returns 0, or -1 when a field is
 * missing or malformed. */
static int dirParseNode(const redisReply *h, const redisReply *name, DirNode *n)
{
    uint64_t tcpPort, rdmaPort, features, beat;
    if (h->elements % 2 != 0 || dirHashText(h, "addr", n->addr, sizeof(n->addr)) != 0 ||
        dirHashText(h, "rdma_addr", n->rdmaAddr, sizeof(n->rdmaAddr)) != 0 ||
        dirHashU64(h, "tcp_port", 65535, &tcpPort) != 0 ||
        dirHashU64(h, "rdma_port", 65535, &rdmaPort) != 0 ||
        dirHashU64(h, "features", UINT32_MAX, &features) != 0 ||
        dirHashU64(h, "heartbeat_ms", INT64_MAX, &beat) != 0)
        return -1;
    memcpy(n->name, name->str, (size_t)name->len);
    n->name[name->len] = '\0';
    n->tcpPort = (int)tcpPort;
    n->rdmaPort = (int)rdmaPort;
    n->features = (uint32_t)features;
    n->heartbeatMs = (int64_t)beat;
    return 0;
}

/* A node name as stored in a set is usable when it fits DirNode.name. */
static int dirNameValid(const redisReply *name)
{
    return name->type == REDIS_REPLY_STRING && name->len > 0 && name->len < OBJ_DIR_NAME_MAX &&
           memchr(name->str, '\0', (size_t)name->len) == NULL;
}

/* The cache slot of the node named name (len bytes, not empty), or NULL. */
static DirNodeCached *dirNodeCacheFind(const char *name, size_t len)
{
    for (int i = 0; i < OBJ_DIR_NODE_CACHE; i++) {
        DirNodeCached *c = &dir.nodeCache[i];
        if (strlen(c->node.name) == len && memcmp(c->node.name, name, len) == 0)
            return c;
    }
    return NULL;
}

/*
 * The cached entry of node name that may stand in for reading it at cacheNow
 * (a dirNowMs taken once per batch), or NULL: read within the last heartbeat
 * interval, and by an earlier batch, so that what a batch reads itself never
 * changes which of its names it asked for. cacheNow 0: no cache.
 */
static const DirNode *dirNodeCacheGet(const redisReply *name, int64_t cacheNow)
{
    if (cacheNow == 0)
        return NULL;
    const DirNodeCached *c = dirNodeCacheFind(name->str, (size_t)name->len);
    if (c == NULL || c->gen == dir.nodeCacheGen || cacheNow - c->readMs >= dir.cfg.heartbeatMs)
        return NULL;
    return &c->node;
}

/* Remember node n as read now by the current batch (replacing its older
 * entry, else a free slot, else the next one round-robin). Can't fail. */
static void dirNodeCachePut(const DirNode *n)
{
    DirNodeCached *slot = dirNodeCacheFind(n->name, strlen(n->name));
    for (int i = 0; i < OBJ_DIR_NODE_CACHE && !slot; i++)
        if (!dir.nodeCache[i].node.name[0])
            slot = &dir.nodeCache[i];
    if (!slot) {
        slot = &dir.nodeCache[dir.nodeCacheNext];
        dir.nodeCacheNext = (dir.nodeCacheNext + 1) % OBJ_DIR_NODE_CACHE;
    }
    slot->node = *n;
    slot->readMs = dirNowMs();
    slot->gen = dir.nodeCacheGen;
}

/* Forget the node named name (len bytes, not empty): its key has expired. */
static void dirNodeCacheForget(const char *name, size_t len)
{
    DirNodeCached *slot = dirNodeCacheFind(name, len);
    if (slot)
        memset(slot, 0, sizeof(*slot));
}

/* Adds an HGETALL of each usable name's node key to a batch, except for
 * names dirNodeCacheGet answers at cacheNow (0: none). */
static void dirAddNodeFetches(DirBatch *b, const redisReply *const *names, size_t n,
                              int64_t cacheNow)
{
    for (size_t i = 0; i < n; i++) {
        if (!dirNameValid(names[i]) || dirNodeCacheGet(names[i], cacheNow))
            continue;
        size_t keyLen;
        char *key = dirNodeKey(names[i]->str, (size_t)names[i]->len, &keyLen);
        const char *argv[] = {"HGETALL", key};
        size_t lens[] = {7, keyLen};
        dirBatchAdd(b, key, keyLen, 2, argv, lens);
        free(key);
    }
}

/*
 * Reads the node hashes that dirAddNodeFetches added for the same names and
 * the same cacheNow (starting at command *next of the run batch, which it
 * advances; names the cache answered take no command) into
 * res->nodes/res->count (live, well-formed nodes only), and keeps what it
 * read in the cache. gone[i] is set for names whose key has expired (when
 * gone is not NULL); *malformed counts names or hashes that could not be
 * used, *unreachable the nodes whose shard did not answer (why then says
 * why). Can't fail.
 */
static void dirCollectNodes(const DirBatch *b, size_t *next, const redisReply *const *names,
                            size_t n, int64_t cacheNow, DirResult *res, unsigned char *gone,
                            size_t *malformed, size_t *unreachable, char *why, size_t whyLen)
{
    res->nodes = dirCalloc(n, sizeof(DirNode));
    res->count = 0;
    *malformed = *unreachable = 0;
    for (size_t i = 0; i < n; i++) {
        if (!dirNameValid(names[i])) {
            (*malformed)++;
            continue;
        }
        const DirNode *cached = dirNodeCacheGet(names[i], cacheNow);
        if (cached) {
            res->nodes[res->count++] = *cached;
            continue;
        }
        const DirCmd *c = &b->cmds[(*next)++];
        const redisReply *h = c->reply;
        if (h == NULL) {
            (*unreachable)++;
            size_t whyN = strnlen(dirCmdWhy(c), whyLen - 1);
            memcpy(why, dirCmdWhy(c), whyN);
            why[whyN] = '\0';
        } else if (h->type == REDIS_REPLY_ARRAY && h->elements == 0) {
            if (gone != NULL)
                gone[i] = 1;
            dirNodeCacheForget(names[i]->str, (size_t)names[i]->len);
        } else if (h->type == REDIS_REPLY_ARRAY &&
                   dirParseNode(h, names[i], &res->nodes[res->count]) == 0) {
            dirNodeCachePut(&res->nodes[res->count]);
            res->count++;
        } else {
            (*malformed)++;
        }
    }
}

/* An error reply to a read: a wrong type means a malformed entry (that is the
 * entry's fault); anything else means the directory cannot answer. */
static void dirSetReplyError(DirResult *res, const redisReply *r, const char *what)
{
    if (strncmp(r->str, "WRONGTYPE", 9) == 0)
        dirResultSet(res, DIR_NOTFOUND, "malformed directory entry: %s has the wrong type", what);
    else
        dirResultSet(res, DIR_UNAVAILABLE, "directory error: %s", r->str);
}

/*
 * Looks n objects up together: the meta hash and location set of each in
 * one round over the shards (an object's two keys share its {id} slot, so
 * each lookup is one round trip to one shard), then the hashes of the
 * listed nodes the node cache cannot answer in another (none, usually). A
 * location whose shard does not answer is left out; only when no location
 * is left for that reason is the answer DIR_UNAVAILABLE. Runs every
 * callback (exactly once) and frees the ops.
 *
 * writes (NULL, or the publishes/unpublishes queued before these lookups)
 * go first in the same pipeline, so that a lookup never waits a round trip
 * of its own behind them; Redis runs a connection's commands in order, so
 * the lookups still see them. Returns the writes whose shard did not
 * answer, in order (NULL: none), for the caller to queue again.
 */
static DirOp *dirDoLookups(DirOp *writes, DirOp **ops, size_t n)
{
    DirOp *left = NULL;
    DirBatch b = {0}, nb = {0};
    for (DirOp *w = writes; w != NULL; w = w->next)
        dirAddWrite(&b, w);
    size_t first = b.n; /* the lookups' commands start here */
    DirResult **res = dirCalloc(n, sizeof(*res));
    unsigned char *needNodes = dirCalloc(n, 1);
    int64_t cacheNow = dirNowMs();
    dir.nodeCacheGen++;
    for (size_t i = 0; i < n; i++) {
        size_t metaLen, locLen;
        char *metaKey = dirObjKey(ops[i]->id, ops[i]->idLen, ":meta", &metaLen);
        char *locKey = dirObjKey(ops[i]->id, ops[i]->idLen, ":loc", &locLen);
        const char *hget[] = {"HGETALL", metaKey};
        size_t hgetLen[] = {7, metaLen};
        const char *smem[] = {"SMEMBERS", locKey};
        size_t smemLen[] = {8, locLen};
        dirBatchAdd(&b, metaKey, metaLen, 2, hget, hgetLen);
        dirBatchAdd(&b, locKey, locLen, 2, smem, smemLen);
        free(metaKey);
        free(locKey);
    }
    dirBatchRun(&b);
    if (writes != NULL)
        left = dirTakeWriteReplies(&b, writes, NULL);

    for (size_t i = 0; i < n; i++) {
        DirResult *r = res[i] = dirResultNew(ops[i]->id, ops[i]->idLen);
        const DirCmd *mc = &b.cmds[first + 2 * i], *lc = &b.cmds[first + 2 * i + 1];
        const redisReply *meta = mc->reply, *loc = lc->reply;
        const char *why = NULL;
        if (meta == NULL || loc == NULL)
            dirResultSet(r, DIR_UNAVAILABLE, "%s", dirCmdWhy(meta == NULL ? mc : lc));
        else if (meta->type == REDIS_REPLY_ERROR)
            dirSetReplyError(r, meta, "the meta hash");
        else if (loc->type == REDIS_REPLY_ERROR)
            dirSetReplyError(r, loc, "the location set");
        else if (meta->type != REDIS_REPLY_ARRAY || loc->type != REDIS_REPLY_ARRAY)
            dirResultSet(r, DIR_NOTFOUND, "malformed directory entry: unexpected reply type");
        else if (meta->elements == 0)
            dirResultSet(r, DIR_NOTFOUND, "object is not in the directory");
        else if (meta->elements % 2 != 0 || dirParseMeta(meta, r, &why) != 0)
            dirResultSet(r, DIR_NOTFOUND, "malformed directory entry: %s",
                         why != NULL ? why : "odd hash reply");
        else if (loc->elements == 0)
            dirResultSet(r, DIR_NOTFOUND, "object has no location in the directory");
        else {
            needNodes[i] = 1;
            dirAddNodeFetches(&nb, (const redisReply *const *)loc->element, loc->elements,
                              cacheNow);
        }
    }
    dirBatchRun(&nb);

    size_t next = 0;
    for (size_t i = 0; i < n; i++) {
        if (needNodes[i]) {
            const redisReply *loc = b.cmds[first + 2 * i + 1].reply;
            char down[sizeof(res[i]->err)] = "";
            size_t malformed = 0, unreachable = 0;
            dirCollectNodes(&nb, &next, (const redisReply *const *)loc->element, loc->elements,
                            cacheNow, res[i], NULL, &malformed, &unreachable, down, sizeof(down));
            if (res[i]->count > 0)
                dirResultSet(res[i], DIR_FOUND, "");
            else if (unreachable > 0)
                dirResultSet(res[i], DIR_UNAVAILABLE, "%s", down);
            else
                dirResultSet(res[i], DIR_NOTFOUND,
                             "object has no live location (%zu listed, %zu malformed node "
                             "entries)",
                             loc->elements, malformed);
        }
    }
    dirBatchFree(&nb);
    dirBatchFree(&b);
    dirCountDone(0, 0, n);
    for (size_t i = 0; i < n; i++) {
        ops[i]->cb(res[i], ops[i]->arg);
        free(ops[i]);
    }
    free(needNodes);
    free(res);
    return left;
}

/* Builds objstore:nodes:{b<k>}, the registry bucket of bucket k; can't fail. */
static char *dirBucketKey(int k, size_t *lenOut)
{
    char buf[64];
    int n = snprintf(buf, sizeof(buf), "%s{b%d}", OBJ_DIR_NODES_PREFIX, k);
    char *key = dirMalloc((size_t)n + 1);
    memcpy(key, buf, (size_t)n + 1);
    *lenOut = (size_t)n;
    return key;
}

/* The registry bucket of a node: spread by the CRC16 of its name. */
static int dirBucketOf(const char *name, size_t nameLen)
{
    return slotsCrc16(name, nameLen) % OBJ_DIR_NODE_BUCKETS;
}

/*
 * Lists live nodes: every registry bucket in one batch (the buckets spread
 * over the shards), then each node's hash in another; names whose key has
 * expired are removed from their bucket on the way. Every shard must answer,
 * or the listing is DIR_UNAVAILABLE: a partial list would read as dead
 * nodes. Fills res; never fails otherwise (a failed clean-up does not spoil
 * the answer).
 */
static void dirDoList(DirResult *res)
{
    DirBatch b = {0};
    for (int k = 0; k < OBJ_DIR_NODE_BUCKETS; k++) {
        size_t keyLen;
        char *key = dirBucketKey(k, &keyLen);
        const char *argv[] = {"SMEMBERS", key};
        size_t lens[] = {8, keyLen};
        dirBatchAdd(&b, key, keyLen, 2, argv, lens);
        free(key);
    }
    dirBatchRun(&b);

    size_t total = 0;
    for (int k = 0; k < OBJ_DIR_NODE_BUCKETS; k++) {
        const redisReply *r = b.cmds[k].reply;
        if (r == NULL) {
            dirResultSet(res, DIR_UNAVAILABLE, "%s", dirCmdWhy(&b.cmds[k]));
            goto out_free_batch;
        }
        if (r->type == REDIS_REPLY_ERROR) {
            dirSetReplyError(res, r, "a node registry bucket");
            goto out_free_batch;
        }
        if (r->type != REDIS_REPLY_ARRAY) {
            dirResultSet(res, DIR_NOTFOUND, "malformed directory: unexpected reply type");
            goto out_free_batch;
        }
        total += r->elements;
    }

    const redisReply **names = dirCalloc(total, sizeof(*names));
    int *bucketOf = dirCalloc(total, sizeof(*bucketOf));
    size_t n = 0;
    for (int k = 0; k < OBJ_DIR_NODE_BUCKETS; k++) {
        const redisReply *r = b.cmds[k].reply;
        for (size_t i = 0; i < r->elements; i++) {
            bucketOf[n] = k;
            names[n++] = r->element[i];
        }
    }
    unsigned char *gone = dirCalloc(total, 1);
    size_t malformed = 0, unreachable = 0, next = 0;
    char down[sizeof(res->err)] = "";
    DirBatch nb = {0};
    dirAddNodeFetches(&nb, names, n, 0);
    dirBatchRun(&nb);
    dirCollectNodes(&nb, &next, names, n, 0, res, gone, &malformed, &unreachable, down,
                    sizeof(down));
    dirBatchFree(&nb);
    if (unreachable > 0) {
        res->count = 0;
        dirResultSet(res, DIR_UNAVAILABLE, "%s", down);
    } else {
        dirResultSet(res, DIR_FOUND, "");
        DirBatch clean = {0};
        for (size_t i = 0; i < n; i++) {
            if (!gone[i])
                continue;
            size_t keyLen;
            char *key = dirBucketKey(bucketOf[i], &keyLen);
            const char *argv[] = {"SREM", key, names[i]->str};
            size_t lens[] = {4, keyLen, (size_t)names[i]->len};
            dirBatchAdd(&clean, key, keyLen, 3, argv, lens);
            free(key);
        }
        dirBatchRun(&clean);
        for (size_t i = 0; i < clean.n; i++)
            if (clean.cmds[i].reply != NULL)
                dirAck(clean.cmds[i].reply);
        dirBatchFree(&clean);
    }
    free(gone);
    free(bucketOf);
    free(names);
out_free_batch:
    dirBatchFree(&b);
}

/* Answers one listing and frees it: the callback runs exactly once. */
static void dirRunList(DirOp *op)
{
    DirResult *res = dirResultNew(NULL, 0);
    if (!dir.haveMap)
        dirResultSet(res, DIR_UNAVAILABLE, "%s", dir.lastIoError);
    else
        dirDoList(res);
    op->cb(res, op->arg);
    free(op);
}

/*
 * Answers one node lookup and frees it: an HGETALL of objstore:node:<name>,
 * routed by that key's slot like every other command. DIR_FOUND carries the
 * node as res->nodes[0]; an expired or malformed entry is DIR_NOTFOUND. The
 * callback runs exactly once.
 */
static void dirRunNode(DirOp *op)
{
    DirResult *res = dirResultNew(op->id, op->idLen);
    /* dirParseNode takes the name as a reply string, as the registry gives it. */
    redisReply name = {.type = REDIS_REPLY_STRING, .str = op->id, .len = op->idLen};

    if (!dir.haveMap) {
        dirResultSet(res, DIR_UNAVAILABLE, "%s", dir.lastIoError);
    } else if (!dirNameValid(&name)) {
        dirResultSet(res, DIR_NOTFOUND, "not a usable node name");
    } else {
        DirBatch b = {0};
        dirAddNodeFetches(&b, (const redisReply *const[]){&name}, 1, 0);
        dirBatchRun(&b);
        const redisReply *h = b.cmds[0].reply;
        res->nodes = dirCalloc(1, sizeof(DirNode));
        if (h == NULL)
            dirResultSet(res, DIR_UNAVAILABLE, "%s", dirCmdWhy(&b.cmds[0]));
        else if (h->type == REDIS_REPLY_ERROR)
            dirSetReplyError(res, h, "the node hash");
        else if (h->type != REDIS_REPLY_ARRAY || h->elements == 0)
            dirResultSet(res, DIR_NOTFOUND, "node '%.64s' is not registered", op->id);
        else if (dirParseNode(h, &name, &res->nodes[0]) != 0)
            dirResultSet(res, DIR_NOTFOUND, "malformed directory entry of node '%.64s'", op->id);
        else {
            res->count = 1;
            dirResultSet(res, DIR_FOUND, "");
        }
        dirBatchFree(&b);
    }
    op->cb(res, op->arg);
    free(op);
}

/* Answers every read in a list with DIR_UNAVAILABLE and frees the list
 * (writes in it are just freed). */
static void dirFailReads(DirOp *list, const char *why)
{
    while (list != NULL) {
        DirOp *next = list->next;
        if (dirOpIsWrite(list)) {
            free(list);
        } else {
            DirResult *res = dirResultNew(list->kind == DIR_OP_LIST ? NULL : list->id, list->idLen);
            dirResultSet(res, DIR_UNAVAILABLE, "%s", why);
            list->cb(res, list->arg);
            free(list);
        }
        list = next;
    }
}

/*
 * Runs a batch taken from the queue, in order: runs of writes go out
 * pipelined, runs of lookups together, listings one at a time (a read whose
 * shard is down answers DIR_UNAVAILABLE by itself). When a write cannot reach its
 * shard, whatever is unfinished goes back to the queue head.
 */
static void dirRunBatch(DirOp *op)
{
    while (op != NULL) {
        DirOp *rest;
        DirOp *writes = NULL;
        if (dirOpIsWrite(op)) {
            DirOp *last = op;
            while (last->next != NULL && dirOpIsWrite(last->next))
                last = last->next;
            rest = last->next;
            last->next = NULL;
            if (rest != NULL && rest->kind == DIR_OP_LOOKUP && dir.haveMap) {
                writes = op; /* sent in the lookups' pipeline, below */
                op = rest;
            }
        }
        if (writes == NULL && dirOpIsWrite(op)) {
            DirOp *left = dirSendWrites(op);
            if (left != NULL) {
                dirRequeueFront(dirListAppend(left, rest));
                return;
            }
        } else if (op->kind == DIR_OP_LOOKUP) {
            /* Consecutive lookups share their round trips. */
            DirOp *ops[OBJ_DIR_PIPELINE];
            size_t n = 0;
            for (rest = op; rest != NULL && rest->kind == DIR_OP_LOOKUP && n < OBJ_DIR_PIPELINE;
                 rest = rest->next)
                ops[n++] = rest;
            if (dir.haveMap) {
                DirOp *left = dirDoLookups(writes, ops, n);
                if (left != NULL) { /* as for writes alone: they and all after go back */
                    dirRequeueFront(dirListAppend(left, rest));
                    return;
                }
            } else {
                ops[n - 1]->next = NULL;
                dirFailReads(op, dir.lastIoError);
            }
        } else {
            rest = op->next;
            op->next = NULL;
            if (op->kind == DIR_OP_NODE)
                dirRunNode(op);
            else
                dirRunList(op);
        }
        op = rest;
    }
}

/* ---- the thread ----------------------------------------------------------------------- */

/* Best effort, briefly: remove this node from the directory, so peers stop
 * considering it at once rather than when its key expires; then close every
 * connection and forget the map. */
static void dirUnregister(void)
{
    if (dir.haveMap) {
        for (int m = 0; m < dir.nConns; m++)
            if (dir.conns[m].ctx != NULL)
                redisSetTimeout(dir.conns[m].ctx, dirTimeval(OBJ_DIR_STOP_TIMEOUT_MS));
        const char *del[] = {"DEL", dir.nodeKey};
        size_t delLen[] = {3, dir.nodeKeyLen};
        const char *srem[] = {"SREM", dir.bucketKey, dir.cfg.nodeName};
        size_t sremLen[] = {4, dir.bucketKeyLen, dir.nameLen};
        DirBatch b = {0};
        dirBatchAdd(&b, dir.nodeKey, dir.nodeKeyLen, 2, del, delLen);
        dirBatchAdd(&b, dir.bucketKey, dir.bucketKeyLen, 3, srem, sremLen);
        dirBatchRun(&b);
        dirBatchFree(&b);
    }
    for (int m = 0; m < dir.nConns; m++)
        redisFree(dir.conns[m].ctx);
    free(dir.conns);
    dir.conns = NULL;
    dir.nConns = 0;
    slotsMapReset(&dir.map);
    dir.haveMap = 0;
}

/* Sleeps until deadlineMs (monotonic) or a signal on dir.wake. */
static void dirWaitLocked(int64_t deadlineMs)
{
    int64_t wait = deadlineMs - dirNowMs();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += wait / 1000;
    ts.tv_nsec += (long)(wait % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&dir.wake, &dir.lock, &ts);
}

/*
 * The directory thread: (re)connect when due, renew the heartbeat when due,
 * then take the next piece of work -- while some shard is down only the
 * reads (those for live shards are answered, the others refused at once),
 * else a batch of the queue (writes alone first wait OBJ_DIR_WRITE_DELAY_MS
 * for company), or a re-publish after a queue overflow -- or
 * sleep until the next deadline. On stop: unregister, refuse what is left,
 * exit.
 */
static void *dirThreadMain(void *unused)
{
    (void)unused;
    pthread_setname_np(pthread_self(), "obj-directory"); /* top -H, perf */
    for (;;) {
        if (!dirAllUp() && dirNowMs() >= dir.nextConnectMs)
            dirConnect();
        if (dir.haveMap && dirNowMs() >= dir.nextHeartbeatMs)
            dirHeartbeat();
        int up = dirAllUp();

        DirOp *work = NULL;
        int snapshot = 0, stop = 0;
        pthread_mutex_lock(&dir.lock);
        for (;;) {
            int64_t deadline;
            if (dir.stopping) {
                stop = 1;
                break;
            }
            if (!up) {
                if (dir.pendingReads > 0) {
                    work = dirTakeReadsLocked();
                    break;
                }
                deadline = dir.nextConnectMs;
                if (dir.haveMap && dir.nextHeartbeatMs < deadline)
                    deadline = dir.nextHeartbeatMs;
            } else {
                int64_t writesDue = dir.writesSinceMs + OBJ_DIR_WRITE_DELAY_MS;
                if (dir.head != NULL &&
                    (dir.pendingReads > 0 || dir.pendingWrites >= OBJ_DIR_PIPELINE ||
                     dirNowMs() >= writesDue)) {
                    work = dirTakeLocked(OBJ_DIR_PIPELINE);
                    break;
                }
                if (dir.needSnapshot) {
                    dir.needSnapshot = 0;
                    snapshot = 1;
                    break;
                }
                deadline = dir.nextHeartbeatMs;
                if (dir.head != NULL && writesDue < deadline)
                    deadline = writesDue; /* only writes, waiting for company */
            }
            if (dirNowMs() >= deadline)
                break;
            dirWaitLocked(deadline);
        }
        pthread_mutex_unlock(&dir.lock);
        if (stop)
            break;

        if (work != NULL) {
            dirRunBatch(work);
        } else if (snapshot) {
            dirRepublish();
        }
    }

    dirUnregister();
    pthread_mutex_lock(&dir.lock);
    DirOp *left = dirTakeLocked(SIZE_MAX);
    pthread_mutex_unlock(&dir.lock);
    dirFailReads(left, "directory stopped");
    return NULL;
}

/* ---- public API ------------------------------------------------------------------------ */

/*
 * Starts the thread. Returns 0, or -1 with errno: EINVAL for a config that
 * cannot work (no node name, bad port, heartbeat not shorter than the ttl),
 * EBUSY when already started, or pthread's error. Connecting happens later.
 */
int dirStart(const DirConfig *cfg, DirSnapshotFn *snapshot, void *snapshotArg)
{
    size_t nameLen = strnlen(cfg->nodeName, sizeof(cfg->nodeName));
    if (nameLen == 0 || nameLen >= sizeof(cfg->nodeName) ||
        strnlen(cfg->host, sizeof(cfg->host)) >= sizeof(cfg->host) ||
        strnlen(cfg->password, sizeof(cfg->password)) >= sizeof(cfg->password) ||
        strnlen(cfg->addr, sizeof(cfg->addr)) >= sizeof(cfg->addr) ||
        strnlen(cfg->seeds, sizeof(cfg->seeds)) >= sizeof(cfg->seeds) ||
        strnlen(cfg->rdmaAddr, sizeof(cfg->rdmaAddr)) >= sizeof(cfg->rdmaAddr) ||
        (cfg->seeds[0] == '\0' && (cfg->port <= 0 || cfg->port > 65535)) || cfg->tcpPort < 0 ||
        cfg->tcpPort > 65535 || cfg->rdmaPort < 0 || cfg->rdmaPort > 65535 ||
        cfg->heartbeatMs <= 0 || cfg->ttlMs <= cfg->heartbeatMs) {
        errno = EINVAL;
        return -1;
    }
    SlotsAddr seeds[OBJ_DIR_SEEDS_MAX];
    int nSeeds = 1;
    if (cfg->seeds[0] != '\0') {
        nSeeds = slotsParseSeeds(cfg->seeds, seeds, OBJ_DIR_SEEDS_MAX);
    } else if (cfg->host[0] != '\0') {
        snprintf(seeds[0].host, sizeof(seeds[0].host), "%s", cfg->host);
        seeds[0].port = cfg->port;
    } else {
        nSeeds = -1;
    }
    if (nSeeds < 1) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&dir.lock);
    int busy = dir.started;
    dir.started = 1;
    pthread_mutex_unlock(&dir.lock);
    if (busy) {
        errno = EBUSY;
        return -1;
    }

    /* Only this function and dirStop touch these while no thread runs. */
    dir.cfg = *cfg;
    dir.nameLen = nameLen;
    dir.snapshot = snapshot;
    dir.snapshotArg = snapshotArg;
    memcpy(dir.seeds, seeds, sizeof(seeds));
    dir.nSeeds = nSeeds;
    memset(dir.nodeCache, 0, sizeof(dir.nodeCache)); /* entries of an earlier start */
    slotsMapInit(&dir.map);
    dir.haveMap = dir.mapStale = dir.mapCovered = 0;
    dir.conns = NULL;
    dir.nConns = 0;
    dir.everConnected = 0;
    dir.backoffMs = OBJ_DIR_BACKOFF_MIN_MS;
    dir.nextConnectMs = 0;
    dir.nextHeartbeatMs = 0;
    snprintf(dir.lastIoError, sizeof(dir.lastIoError), "directory %.64s:%d: not connected yet",
             seeds[0].host, seeds[0].port);
    dir.nodeKey = dirNodeKey(cfg->nodeName, nameLen, &dir.nodeKeyLen);
    dir.bucketKey = dirBucketKey(dirBucketOf(cfg->nodeName, nameLen), &dir.bucketKeyLen);

    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&dir.wake, &attr);
    pthread_condattr_destroy(&attr);

    pthread_mutex_lock(&dir.lock);
    memset(&dir.stats, 0, sizeof(dir.stats));
    dir.stopping = 0;
    dir.needSnapshot = 1;
    dir.accepting = 1;
    pthread_mutex_unlock(&dir.lock);

    /* The thread gets no asynchronous signals: SIGPIPE from a broken socket
     * must become EPIPE, and the process's signals belong to its main thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&dir.thread, NULL, dirThreadMain, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        pthread_mutex_lock(&dir.lock);
        dir.accepting = 0;
        DirOp *left = dirTakeLocked(SIZE_MAX);
        dir.started = 0;
        pthread_mutex_unlock(&dir.lock);
        dirFailReads(left, "directory thread did not start");
        pthread_cond_destroy(&dir.wake);
        free(dir.nodeKey);
        free(dir.bucketKey);
        dir.nodeKey = dir.bucketKey = NULL;
        errno = rc;
        return -1;
    }
    return 0;
}

/*
 * Stops the thread: it unregisters (bounded by a short timeout), answers the
 * reads still queued with DIR_UNAVAILABLE and drops pending writes. Returns
 * once it has exited; does nothing when not started.
 */
void dirStop(void)
{
    pthread_mutex_lock(&dir.lock);
    if (!dir.started || !dir.accepting) {
        pthread_mutex_unlock(&dir.lock);
        return;
    }
    dir.accepting = 0;
    dir.stopping = 1;
    pthread_cond_signal(&dir.wake);
    pthread_mutex_unlock(&dir.lock);

    pthread_join(dir.thread, NULL);
    pthread_cond_destroy(&dir.wake);
    free(dir.nodeKey);
    free(dir.bucketKey);
    dir.nodeKey = dir.bucketKey = NULL;

    pthread_mutex_lock(&dir.lock);
    dir.stats.connected = 0;
    dir.stats.queued = 0;
    dir.pendingWrites = dir.pendingReads = 0;
    dir.started = 0;
    pthread_mutex_unlock(&dir.lock);
}

/* Queues a write, or drops it (counted, with a full re-publish scheduled)
 * when the queue is full. Silently ignored while not started. */
static void dirEnqueueWrite(DirOp *op)
{
    pthread_mutex_lock(&dir.lock);
    if (!dir.accepting) {
        pthread_mutex_unlock(&dir.lock);
        free(op);
        return;
    }
    if (dir.pendingWrites >= OBJ_DIR_QUEUE_MAX) {
        dir.stats.errors++;
        snprintf(dir.stats.lastError, sizeof(dir.stats.lastError),
                 "directory queue full (%d): update dropped, full re-publish scheduled",
                 OBJ_DIR_QUEUE_MAX);
        dir.needSnapshot = 1;
        pthread_mutex_unlock(&dir.lock);
        free(op);
        return;
    }
    dirPushLocked(op);
    pthread_mutex_unlock(&dir.lock);
}

/* Queues a read; when the directory is not running, answers it right away
 * on the caller's thread with DIR_UNAVAILABLE. */
static void dirEnqueueRead(DirOp *op)
{
    pthread_mutex_lock(&dir.lock);
    if (dir.accepting) {
        dirPushLocked(op);
        pthread_mutex_unlock(&dir.lock);
        return;
    }
    pthread_mutex_unlock(&dir.lock);
    dirFailReads(op, "directory not running");
}

void dirPublish(const char *id, size_t idLen, uint64_t size, uint64_t metaSize, uint64_t checksum)
{
    DirOp *op = dirOpNew(DIR_OP_PUBLISH, id, idLen);
    op->size = size;
    op->metaSize = metaSize;
    op->checksum = checksum;
    dirEnqueueWrite(op);
}

void dirUnpublish(const char *id, size_t idLen)
{
    dirEnqueueWrite(dirOpNew(DIR_OP_UNPUBLISH, id, idLen));
}

void dirLookup(const char *id, size_t idLen, DirResultFn *cb, void *arg)
{
    DirOp *op = dirOpNew(DIR_OP_LOOKUP, id, idLen);
    op->cb = cb;
    op->arg = arg;
    dirEnqueueRead(op);
}

void dirListNodes(DirResultFn *cb, void *arg)
{
    DirOp *op = dirOpNew(DIR_OP_LIST, NULL, 0);
    op->cb = cb;
    op->arg = arg;
    dirEnqueueRead(op);
}

void dirLookupNode(const char *name, size_t nameLen, DirResultFn *cb, void *arg)
{
    DirOp *op = dirOpNew(DIR_OP_NODE, name, nameLen);
    op->cb = cb;
    op->arg = arg;
    dirEnqueueRead(op);
}

/* Frees a result and everything it holds; accepts NULL. */
void dirResultFree(DirResult *res)
{
    if (res == NULL)
        return;
    free(res->nodes);
    free(res->id);
    free(res);
}

/* A consistent copy of the counters; safe from any thread. */
void dirGetStats(DirStats *st)
{
    pthread_mutex_lock(&dir.lock);
    *st = dir.stats;
    st->queued = dir.pendingWrites;
    pthread_mutex_unlock(&dir.lock);
}
