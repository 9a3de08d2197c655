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

#define OBJ_DIR_NODES_KEY   "objstore:nodes"
#define OBJ_DIR_NODE_PREFIX "objstore:node:"

/* Removes one location and, atomically with it, the object's meta once no
 * location is left. KEYS[1] = loc set, KEYS[2] = meta hash, ARGV[1] = node. */
static const char dirUnpublishScript[] =
    "redis.call('SREM', KEYS[1], ARGV[1]) "
    "if redis.call('SCARD', KEYS[1]) == 0 then redis.call('DEL', KEYS[2]) end "
    "return 1";

/* ---- control block -------------------------------------------------------------- */

typedef enum DirOpKind { DIR_OP_PUBLISH, DIR_OP_UNPUBLISH, DIR_OP_LOOKUP, DIR_OP_LIST } DirOpKind;

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
    pthread_cond_t wake;  /* work queued or stop requested */
    int started;          /* between dirStart and the end of dirStop */
    int accepting;        /* callers may enqueue */
    int stopping;         /* the thread must unregister and exit */
    DirOp *head, *tail;   /* FIFO of requests */
    size_t pendingWrites; /* publishes + unpublishes in the queue */
    size_t pendingReads;  /* lookups + listings in the queue */
    int needSnapshot;     /* re-publish everything at the next chance */
    DirStats stats;

    /* Owned by the directory thread (set up before it starts). */
    pthread_t thread;
    DirConfig cfg;
    DirSnapshotFn *snapshot;
    void *snapshotArg;
    redisContext *ctx; /* NULL while disconnected */
    int everConnected;
    int backoffMs;
    int64_t nextConnectMs, nextHeartbeatMs; /* monotonic */
    char *nodeKey;                          /* objstore:node:<name> */
    size_t nodeKeyLen, nameLen;
    char lastIoError[128]; /* why the directory is unreachable, for results */
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
    if (dirOpIsWrite(op))
        dir.pendingWrites += (size_t)delta;
    else
        dir.pendingReads += (size_t)delta;
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

/* ---- connection ---------------------------------------------------------------------- */

/*
 * Drops the connection after an I/O error (or a reply saying the server
 * cannot serve now) and schedules the next attempt with backoff. The
 * reason is kept for DIR_UNAVAILABLE results. Can't fail.
 */
static void dirFail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(dir.lastIoError, sizeof(dir.lastIoError), fmt, ap);
    va_end(ap);
    dirNoteError("%s", dir.lastIoError);

    redisFree(dir.ctx);
    dir.ctx = NULL;
    dir.nextConnectMs = dirNowMs() + dir.backoffMs;
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
 * is starting, busy, or not writable. They are treated like a lost link. */
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

/* Queues one command on the connection (no I/O yet); can't fail. */
static void dirAppend(int argc, const char **argv, const size_t *lens)
{
    if (redisAppendCommandArgv(dir.ctx, argc, argv, lens) != REDIS_OK)
        dirOom(); /* hiredis only fails here when it cannot allocate */
}

/*
 * Reads the next pipelined reply. Returns it (free with freeReplyObject), or
 * NULL when the connection failed or the server answered with a transient
 * error; then dirFail has run and dir.ctx is NULL.
 */
static redisReply *dirRead(void)
{
    redisReply *r = NULL;
    if (redisGetReply(dir.ctx, (void **)&r) != REDIS_OK || r == NULL) {
        dirFail("directory %s:%d: %s", dir.cfg.host, dir.cfg.port,
                dir.ctx->errstr[0] ? dir.ctx->errstr : "connection lost");
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR && dirIsTransient(r->str)) {
        dirFail("directory %s:%d: %s", dir.cfg.host, dir.cfg.port, r->str);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* Consumes a write's reply: an error reply is counted and otherwise ignored
 * (the write cannot succeed by being repeated). */
static void dirAck(redisReply *r)
{
    if (r->type == REDIS_REPLY_ERROR)
        dirNoteError("directory write refused: %s", r->str);
    freeReplyObject(r);
}

/*
 * Registers this node (or renews it): HSET its fields, PEXPIRE the key, SADD
 * it to the node set, in one round trip. Returns 0, or -1 when the
 * connection failed (dirFail has run). Error replies are counted only.
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
    const char *sadd[] = {"SADD", OBJ_DIR_NODES_KEY, dir.cfg.nodeName};
    size_t saddLen[] = {4, sizeof(OBJ_DIR_NODES_KEY) - 1, dir.nameLen};

    dirAppend(HSET_ARGC, hset, hsetLen);
    dirAppend(3, expire, expireLen);
    dirAppend(3, sadd, saddLen);
    dir.nextHeartbeatMs = dirNowMs() + dir.cfg.heartbeatMs;
    for (int i = 0; i < 3; i++) {
        redisReply *r = dirRead();
        if (r == NULL)
            return -1;
        dirAck(r);
    }
    return 0;
}

/* ---- writes ---------------------------------------------------------------------------- */

/* Queues the commands of one publish or unpublish on the connection. */
static void dirAppendWrite(const DirOp *op)
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
        dirAppend(3, sadd, saddLen);
        dirAppend(8, hset, hsetLen);
    } else {
        const char *eval[] = {"EVAL", dirUnpublishScript, "2", locKey, metaKey, dir.cfg.nodeName};
        size_t evalLen[] = {4, sizeof(dirUnpublishScript) - 1, 1, locLen, metaLen, dir.nameLen};
        dirAppend(6, eval, evalLen);
    }
    free(metaKey);
    free(locKey);
}

/*
 * Sends a list of publishes/unpublishes in pipelined rounds, renewing the
 * heartbeat between rounds when it is due, and frees each operation once its
 * replies are in. Returns NULL when all were answered, or the operations not
 * known to be applied when the connection failed (the caller requeues or
 * drops them; sending them again is harmless).
 */
static DirOp *dirSendWrites(DirOp *list)
{
    while (list != NULL) {
        if (dirStopRequested())
            return list;
        if (dirNowMs() >= dir.nextHeartbeatMs && dirHeartbeat() != 0)
            return list;
        DirOp *end = list;
        for (int n = 0; end != NULL && n < OBJ_DIR_PIPELINE; n++, end = end->next)
            dirAppendWrite(end);

        uint64_t publishes = 0, unpublishes = 0;
        while (list != end) {
            int replies = list->kind == DIR_OP_PUBLISH ? 2 : 1;
            for (int i = 0; i < replies; i++) {
                redisReply *r = dirRead();
                if (r == NULL) {
                    dirCountDone(publishes, unpublishes, 0);
                    return list;
                }
                dirAck(r);
            }
            if (list->kind == DIR_OP_PUBLISH)
                publishes++;
            else
                unpublishes++;
            DirOp *next = list->next;
            free(list);
            list = next;
        }
        dirCountDone(publishes, unpublishes, 0);
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
 * then sends them in pipelined rounds. When the connection fails half-way
 * the rest is dropped, because dirFail schedules a whole new snapshot.
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
 * Connects, authenticates, registers, and re-publishes when a snapshot is due
 * (always after a failure, and on the first connect). On any failure the
 * context is dropped and the next attempt scheduled with backoff.
 */
static void dirConnect(void)
{
    redisContext *c =
        redisConnectWithTimeout(dir.cfg.host, dir.cfg.port, dirTimeval(OBJ_DIR_CONNECT_TIMEOUT_MS));
    if (c == NULL || c->err) {
        dir.ctx = c;
        dirFail("cannot connect to directory %s:%d: %s", dir.cfg.host, dir.cfg.port,
                c != NULL ? c->errstr : "out of memory");
        return;
    }
    dir.ctx = c;
    if (redisSetTimeout(c, dirTimeval(OBJ_DIR_COMMAND_TIMEOUT_MS)) != REDIS_OK) {
        dirFail("directory %s:%d: cannot set timeout", dir.cfg.host, dir.cfg.port);
        return;
    }
    redisEnableKeepAlive(c); /* only a hint: a failure here costs nothing */

    if (dir.cfg.password[0] != '\0') {
        const char *auth[] = {"AUTH", dir.cfg.password};
        size_t authLen[] = {4, strlen(dir.cfg.password)};
        dirAppend(2, auth, authLen);
        redisReply *r = dirRead();
        if (r == NULL)
            return;
        if (r->type == REDIS_REPLY_ERROR) {
            dirFail("directory %s:%d refused AUTH: %s", dir.cfg.host, dir.cfg.port, r->str);
            freeReplyObject(r);
            return;
        }
        freeReplyObject(r);
    }
    if (dirHeartbeat() != 0)
        return;

    pthread_mutex_lock(&dir.lock);
    dir.stats.connected = 1;
    if (dir.everConnected)
        dir.stats.reconnects++;
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

/*
 * Fetches the node hashes for the names in a SMEMBERS reply, pipelined, into
 * res->nodes/res->count (live, well-formed nodes only). gone[i] is set for
 * names whose key has expired (when gone is not NULL); *malformed counts
 * names or hashes that could not be used. Returns 0, or -1 when the
 * connection failed (res->nodes is then left empty).
 */
static int dirFetchNodes(const redisReply *names, DirResult *res, unsigned char *gone,
                         size_t *malformed)
{
    size_t n = names->elements;
    res->nodes = dirCalloc(n, sizeof(DirNode));
    res->count = 0;
    *malformed = 0;
    for (size_t i = 0; i < n; i++) {
        const redisReply *name = names->element[i];
        if (!dirNameValid(name))
            continue;
        size_t keyLen;
        char *key = dirNodeKey(name->str, (size_t)name->len, &keyLen);
        const char *argv[] = {"HGETALL", key};
        size_t lens[] = {7, keyLen};
        dirAppend(2, argv, lens);
        free(key);
    }
    for (size_t i = 0; i < n; i++) {
        const redisReply *name = names->element[i];
        if (!dirNameValid(name)) {
            (*malformed)++;
            continue;
        }
        redisReply *h = dirRead();
        if (h == NULL) {
            res->count = 0;
            return -1;
        }
        if (h->type == REDIS_REPLY_ARRAY && h->elements == 0) {
            if (gone != NULL)
                gone[i] = 1;
        } else if (h->type == REDIS_REPLY_ARRAY &&
                   dirParseNode(h, name, &res->nodes[res->count]) == 0) {
            res->count++;
        } else {
            (*malformed)++;
        }
        freeReplyObject(h);
    }
    return 0;
}

static void dirSetUnavailable(DirResult *res)
{
    dirResultSet(res, DIR_UNAVAILABLE, "%s", dir.lastIoError);
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
 * Looks an object up: its meta and location set in one round trip, then the
 * hashes of the listed nodes in another. Fills res; never fails otherwise.
 */
static void dirDoLookup(const DirOp *op, DirResult *res)
{
    size_t metaLen, locLen;
    char *metaKey = dirObjKey(op->id, op->idLen, ":meta", &metaLen);
    char *locKey = dirObjKey(op->id, op->idLen, ":loc", &locLen);
    const char *hget[] = {"HGETALL", metaKey};
    size_t hgetLen[] = {7, metaLen};
    const char *smem[] = {"SMEMBERS", locKey};
    size_t smemLen[] = {8, locLen};
    dirAppend(2, hget, hgetLen);
    dirAppend(2, smem, smemLen);
    free(metaKey);
    free(locKey);

    redisReply *meta = dirRead();
    redisReply *loc = meta != NULL ? dirRead() : NULL;
    const char *why = NULL;
    size_t malformed = 0;
    if (meta == NULL || loc == NULL)
        dirSetUnavailable(res);
    else if (meta->type == REDIS_REPLY_ERROR)
        dirSetReplyError(res, meta, "the meta hash");
    else if (loc->type == REDIS_REPLY_ERROR)
        dirSetReplyError(res, loc, "the location set");
    else if (meta->type != REDIS_REPLY_ARRAY || loc->type != REDIS_REPLY_ARRAY)
        dirResultSet(res, DIR_NOTFOUND, "malformed directory entry: unexpected reply type");
    else if (meta->elements == 0)
        dirResultSet(res, DIR_NOTFOUND, "object is not in the directory");
    else if (meta->elements % 2 != 0 || dirParseMeta(meta, res, &why) != 0)
        dirResultSet(res, DIR_NOTFOUND, "malformed directory entry: %s",
                     why != NULL ? why : "odd hash reply");
    else if (loc->elements == 0)
        dirResultSet(res, DIR_NOTFOUND, "object has no location in the directory");
    else if (dirFetchNodes(loc, res, NULL, &malformed) != 0)
        dirSetUnavailable(res);
    else if (res->count == 0)
        dirResultSet(res, DIR_NOTFOUND,
                     "object has no live location (%zu listed, %zu malformed node entries)",
                     loc->elements, malformed);
    else
        dirResultSet(res, DIR_FOUND, "");
    freeReplyObject(meta);
    freeReplyObject(loc);
}

/*
 * Lists live nodes: the node set, then each node's hash; names whose key has
 * expired are removed from the set on the way. Fills res; never fails
 * otherwise (a failed clean-up does not spoil the answer).
 */
static void dirDoList(DirResult *res)
{
    const char *smem[] = {"SMEMBERS", OBJ_DIR_NODES_KEY};
    size_t smemLen[] = {8, sizeof(OBJ_DIR_NODES_KEY) - 1};
    dirAppend(2, smem, smemLen);
    redisReply *names = dirRead();
    if (names == NULL) {
        dirSetUnavailable(res);
        return;
    }
    size_t malformed = 0;
    unsigned char *gone = NULL;
    if (names->type == REDIS_REPLY_ERROR) {
        dirSetReplyError(res, names, OBJ_DIR_NODES_KEY);
    } else if (names->type != REDIS_REPLY_ARRAY) {
        dirResultSet(res, DIR_NOTFOUND, "malformed directory: unexpected reply type");
    } else {
        gone = dirCalloc(names->elements, 1);
        if (dirFetchNodes(names, res, gone, &malformed) != 0) {
            dirSetUnavailable(res);
        } else {
            dirResultSet(res, DIR_FOUND, "");
            size_t argc = 2;
            const char **argv = dirCalloc(names->elements + 2, sizeof(*argv));
            size_t *lens = dirCalloc(names->elements + 2, sizeof(*lens));
            argv[0] = "SREM";
            lens[0] = 4;
            argv[1] = OBJ_DIR_NODES_KEY;
            lens[1] = sizeof(OBJ_DIR_NODES_KEY) - 1;
            for (size_t i = 0; i < names->elements; i++) {
                if (gone[i]) {
                    argv[argc] = names->element[i]->str;
                    lens[argc++] = (size_t)names->element[i]->len;
                }
            }
            if (argc > 2) {
                dirAppend((int)argc, argv, lens);
                redisReply *r = dirRead();
                if (r != NULL)
                    dirAck(r);
            }
            free(argv);
            free(lens);
        }
    }
    free(gone);
    freeReplyObject(names);
}

/* Answers one lookup or listing and frees it: the callback runs exactly once. */
static void dirRunRead(DirOp *op)
{
    DirResult *res = dirResultNew(op->kind == DIR_OP_LOOKUP ? op->id : NULL, op->idLen);
    if (dir.ctx == NULL)
        dirSetUnavailable(res);
    else if (op->kind == DIR_OP_LOOKUP)
        dirDoLookup(op, res);
    else
        dirDoList(res);
    if (op->kind == DIR_OP_LOOKUP)
        dirCountDone(0, 0, 1);
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
            DirResult *res =
                dirResultNew(list->kind == DIR_OP_LOOKUP ? list->id : NULL, list->idLen);
            dirResultSet(res, DIR_UNAVAILABLE, "%s", why);
            list->cb(res, list->arg);
            free(list);
        }
        list = next;
    }
}

/*
 * Runs a batch taken from the queue, in order: runs of writes go out
 * pipelined, reads one at a time (each pipelined inside). When the
 * connection fails, whatever is unfinished goes back to the queue head.
 */
static void dirRunBatch(DirOp *op)
{
    while (op != NULL) {
        DirOp *rest;
        if (dirOpIsWrite(op)) {
            DirOp *last = op;
            while (last->next != NULL && dirOpIsWrite(last->next))
                last = last->next;
            rest = last->next;
            last->next = NULL;
            DirOp *left = dirSendWrites(op);
            if (left != NULL) {
                DirOp *tail = left;
                while (tail->next != NULL)
                    tail = tail->next;
                tail->next = rest;
                dirRequeueFront(left);
                return;
            }
        } else {
            rest = op->next;
            op->next = NULL;
            dirRunRead(op);
            if (dir.ctx == NULL) {
                dirRequeueFront(rest);
                return;
            }
        }
        op = rest;
    }
}

/* ---- the thread ----------------------------------------------------------------------- */

/* Best effort, briefly: remove this node from the directory, so peers stop
 * considering it at once rather than when its key expires. */
static void dirUnregister(void)
{
    if (dir.ctx == NULL)
        return;
    redisSetTimeout(dir.ctx, dirTimeval(OBJ_DIR_STOP_TIMEOUT_MS));
    const char *del[] = {"DEL", dir.nodeKey};
    size_t delLen[] = {3, dir.nodeKeyLen};
    const char *srem[] = {"SREM", OBJ_DIR_NODES_KEY, dir.cfg.nodeName};
    size_t sremLen[] = {4, sizeof(OBJ_DIR_NODES_KEY) - 1, dir.nameLen};
    dirAppend(2, del, delLen);
    dirAppend(3, srem, sremLen);
    for (int i = 0; i < 2; i++) {
        redisReply *r = NULL;
        if (redisGetReply(dir.ctx, (void **)&r) != REDIS_OK)
            break;
        freeReplyObject(r);
    }
    redisFree(dir.ctx);
    dir.ctx = NULL;
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
 * then take the next piece of work -- reads to refuse while disconnected, a
 * batch of the queue, or a re-publish after a queue overflow -- or sleep
 * until the next deadline. On stop: unregister, refuse what is left, exit.
 */
static void *dirThreadMain(void *unused)
{
    (void)unused;
    for (;;) {
        if (dir.ctx == NULL && dirNowMs() >= dir.nextConnectMs)
            dirConnect();
        if (dir.ctx != NULL && dirNowMs() >= dir.nextHeartbeatMs)
            dirHeartbeat();

        DirOp *work = NULL;
        int snapshot = 0, stop = 0;
        pthread_mutex_lock(&dir.lock);
        for (;;) {
            int64_t deadline;
            if (dir.stopping) {
                stop = 1;
                break;
            }
            if (dir.ctx == NULL) {
                if (dir.pendingReads > 0) {
                    work = dirTakeReadsLocked();
                    break;
                }
                deadline = dir.nextConnectMs;
            } else {
                if (dir.head != NULL) {
                    work = dirTakeLocked(OBJ_DIR_PIPELINE);
                    break;
                }
                if (dir.needSnapshot) {
                    dir.needSnapshot = 0;
                    snapshot = 1;
                    break;
                }
                deadline = dir.nextHeartbeatMs;
            }
            if (dirNowMs() >= deadline)
                break;
            dirWaitLocked(deadline);
        }
        pthread_mutex_unlock(&dir.lock);
        if (stop)
            break;

        if (dir.ctx == NULL) {
            dirFailReads(work, dir.lastIoError);
        } else if (work != NULL) {
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
        strnlen(cfg->rdmaAddr, sizeof(cfg->rdmaAddr)) >= sizeof(cfg->rdmaAddr) || cfg->port <= 0 ||
        cfg->port > 65535 || cfg->tcpPort < 0 || cfg->tcpPort > 65535 || cfg->rdmaPort < 0 ||
        cfg->rdmaPort > 65535 || cfg->heartbeatMs <= 0 || cfg->ttlMs <= cfg->heartbeatMs) {
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
    dir.ctx = NULL;
    dir.everConnected = 0;
    dir.backoffMs = OBJ_DIR_BACKOFF_MIN_MS;
    dir.nextConnectMs = 0;
    dir.nextHeartbeatMs = 0;
    snprintf(dir.lastIoError, sizeof(dir.lastIoError), "directory %.64s:%d: not connected yet",
             cfg->host, cfg->port);
    dir.nodeKey = dirNodeKey(cfg->nodeName, nameLen, &dir.nodeKeyLen);

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
        dir.nodeKey = NULL;
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
    dir.nodeKey = NULL;

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
