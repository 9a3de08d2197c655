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
 * Allocation failure aborts, as it does everywhere in Redis. This file holds
 * start, stop and the calls of directory.h; dirint.h lists the other parts.
 */
#include "dirint.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

/* The name length of a config that can work (a node name, ports in range,
 * a heartbeat shorter than the ttl, a boot id in range, every string
 * terminated), or 0. */
static size_t dirConfigCheck(const DirConfig *cfg)
{
    size_t nameLen = strnlen(cfg->nodeName, sizeof(cfg->nodeName));
    if (nameLen == 0 || nameLen >= sizeof(cfg->nodeName) ||
        strnlen(cfg->host, sizeof(cfg->host)) >= sizeof(cfg->host) ||
        strnlen(cfg->password, sizeof(cfg->password)) >= sizeof(cfg->password) ||
        strnlen(cfg->addr, sizeof(cfg->addr)) >= sizeof(cfg->addr) ||
        strnlen(cfg->seeds, sizeof(cfg->seeds)) >= sizeof(cfg->seeds) ||
        strnlen(cfg->rdmaAddr, sizeof(cfg->rdmaAddr)) >= sizeof(cfg->rdmaAddr) ||
        strnlen(cfg->label, sizeof(cfg->label)) >= sizeof(cfg->label) ||
        (cfg->seeds[0] == '\0' && (cfg->port <= 0 || cfg->port > 65535)) || cfg->tcpPort < 0 ||
        cfg->tcpPort > 65535 || cfg->rdmaPort < 0 || cfg->rdmaPort > 65535 ||
        cfg->heartbeatMs <= 0 || cfg->ttlMs <= cfg->heartbeatMs || cfg->boot > OBJ_DIR_BOOT_MAX)
        return 0;
    return nameLen;
}

/* Where the slot map is read first: the seed list, else host:port. Returns
 * how many addresses seeds got, or -1 when there is none or the list is
 * malformed. */
static int dirSeedsOf(const DirConfig *cfg, SlotsAddr *seeds)
{
    if (cfg->seeds[0] != '\0')
        return slotsParseSeeds(cfg->seeds, seeds, OBJ_DIR_SEEDS_MAX);
    if (cfg->host[0] == '\0')
        return -1;
    snprintf(seeds[0].host, sizeof(seeds[0].host), "%s", cfg->host);
    seeds[0].port = cfg->port;
    return 1;
}

/*
 * This process's boot id: drawn at the first call from the kernel's random
 * source (else from the clocks and the pid), then kept until the process
 * exits, so that every start of a node under the same name is a new
 * incarnation and a stop and start inside one process is not. Only dirStart
 * calls it, one at a time. Can't fail; never 0.
 */
static uint64_t dirProcessBoot(void)
{
    static uint64_t boot;
    if (boot == 0) {
        uint64_t r;
        if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
            r = ((uint64_t)dirWallMs() << 20) ^ (uint64_t)dirNowMs() * 0x9e3779b97f4a7c15ULL ^
                (uint64_t)getpid();
        boot = r & OBJ_DIR_BOOT_MAX;
        if (boot == 0)
            boot = 1;
    }
    return boot;
}

/* Sets up the thread's side of the control block for a fresh start (only
 * dirStart and dirStop touch it while no thread runs). Can't fail. */
static void dirSetUp(const DirConfig *cfg, size_t nameLen, DirSnapshotFn *snapshot,
                     void *snapshotArg, const SlotsAddr *seeds, int nSeeds)
{
    dir.cfg = *cfg;
    dir.nameLen = nameLen;
    dir.snapshot = snapshot;
    dir.snapshotArg = snapshotArg;
    memcpy(dir.seeds, seeds, (size_t)nSeeds * sizeof(*seeds));
    dir.nSeeds = nSeeds;
    memset(dir.nodeCache, 0, sizeof(dir.nodeCache)); /* entries of an earlier start */
    slotsMapInit(&dir.map);
    dir.haveMap = dir.mapStale = dir.mapCovered = 0;
    dir.markNext = 0;
    dir.conns = NULL;
    dir.nConns = 0;
    dir.everConnected = 0;
    dir.backoffMs = OBJ_DIR_BACKOFF_MIN_MS;
    dir.nextConnectMs = 0;
    dir.nextHeartbeatMs = 0;
    snprintf(dir.lastIoError, sizeof(dir.lastIoError), "directory %.64s:%d: not connected yet",
             seeds[0].host, seeds[0].port);
    uint64_t boot = cfg->boot != 0 ? cfg->boot : dirProcessBoot();
    snprintf(dir.boot, sizeof(dir.boot), "%" PRIu64, boot);
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
    dir.serverUp = 0;
    dir.beatNow = 0; /* draining stays: it is the node's, not this start's */
    dir.bootId = boot;
    dir.accepting = 1;
    pthread_mutex_unlock(&dir.lock);
}

/* Frees what dirSetUp allocated once the thread is gone. */
static void dirTearDown(void)
{
    pthread_cond_destroy(&dir.wake);
    free(dir.nodeKey);
    free(dir.bucketKey);
    dir.nodeKey = dir.bucketKey = NULL;
}

/* Creates the thread with every signal blocked: SIGPIPE from a broken
 * socket must become EPIPE, and the process's signals belong to its main
 * thread. Returns 0 or pthread's error. */
static int dirSpawn(void)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&dir.thread, NULL, dirThreadMain, NULL);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

/*
 * Starts the thread. Returns 0, or -1 with errno: EINVAL for a config that
 * cannot work (no node name, bad port, heartbeat not shorter than the ttl),
 * EBUSY when already started, or pthread's error. Connecting happens later.
 */
int dirStart(const DirConfig *cfg, DirSnapshotFn *snapshot, void *snapshotArg)
{
    SlotsAddr seeds[OBJ_DIR_SEEDS_MAX];
    size_t nameLen = dirConfigCheck(cfg);
    int nSeeds = nameLen > 0 ? dirSeedsOf(cfg, seeds) : -1;
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

    dirSetUp(cfg, nameLen, snapshot, snapshotArg, seeds, nSeeds);
    int rc = dirSpawn();
    if (rc != 0) {
        ObjList left;
        objListInit(&left);
        pthread_mutex_lock(&dir.lock);
        dir.accepting = 0;
        dirTakeLocked(&left, SIZE_MAX);
        dir.started = 0;
        pthread_mutex_unlock(&dir.lock);
        dirFailReads(&left, "directory thread did not start");
        dirTearDown();
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
    dirTearDown();

    pthread_mutex_lock(&dir.lock);
    dir.stats.connected = 0;
    dir.stats.queued = 0;
    dir.pendingWrites = dir.pendingReads = 0;
    dir.started = 0;
    pthread_mutex_unlock(&dir.lock);
}

/* See directory.h. */
uint64_t dirBootId(void)
{
    pthread_mutex_lock(&dir.lock);
    uint64_t boot = dir.bootId;
    pthread_mutex_unlock(&dir.lock);
    return boot;
}

/* See directory.h. */
void dirServerUp(void)
{
    pthread_mutex_lock(&dir.lock);
    if (dir.accepting) {
        dir.serverUp = 1;
        pthread_cond_signal(&dir.wake);
    }
    pthread_mutex_unlock(&dir.lock);
}

/* Queues a write, or drops it (counted, with a full re-publish scheduled)
 * when the queue is full. Silently ignored while not started. */
static void dirEnqueueWrite(DirOp *op)
{
    pthread_mutex_lock(&dir.lock);
    if (!dir.accepting) {
        pthread_mutex_unlock(&dir.lock);
        dirOpFree(op);
        return;
    }
    if (dir.pendingWrites >= OBJ_DIR_QUEUE_MAX) {
        dir.stats.errors++;
        snprintf(dir.stats.lastError, sizeof(dir.stats.lastError),
                 "directory queue full (%d): update dropped, full re-publish scheduled",
                 OBJ_DIR_QUEUE_MAX);
        dir.needSnapshot = 1;
        pthread_mutex_unlock(&dir.lock);
        dirOpFree(op);
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
    dirFailOne(op, "directory not running");
}

void dirPublish(const char *id, size_t idLen, uint64_t size, uint64_t metaSize, uint64_t checksum,
                DirCopy copy, uint32_t want, const char *takeoverFrom)
{
    DirOp *op = dirOpNew(DIR_OP_PUBLISH, id, idLen);
    op->size = size;
    op->metaSize = metaSize;
    op->checksum = checksum;
    op->copy = copy;
    op->want = want > 0 ? want : 1;
    if (takeoverFrom != NULL && copy == DIR_COPY_PRIMARY) {
        size_t n = strnlen(takeoverFrom, OBJ_DIR_NAME_MAX - 1);
        op->takeover = dirMalloc(n + 1);
        memcpy(op->takeover, takeoverFrom, n);
        op->takeover[n] = '\0';
        op->resync = 1; /* a takeover obeys the re-publish's rules, not a fresh seal's */
    }
    dirEnqueueWrite(op);
}

void dirUnpublish(const char *id, size_t idLen)
{
    dirEnqueueWrite(dirOpNew(DIR_OP_UNPUBLISH, id, idLen));
}

/* See directory.h: the flag is read by every heartbeat, and one is due now. */
void dirSetDraining(int on)
{
    pthread_mutex_lock(&dir.lock);
    dir.draining = on != 0;
    if (dir.accepting) {
        dir.beatNow = 1;
        pthread_cond_signal(&dir.wake);
    }
    pthread_mutex_unlock(&dir.lock);
}

void dirClaim(const char *id, size_t idLen, int ttlMs, DirResultFn *cb, void *arg)
{
    DirOp *op = dirOpNew(DIR_OP_CLAIM, id, idLen);
    op->size = ttlMs > 0 ? (uint64_t)ttlMs : 1;
    op->cb = cb;
    op->arg = arg;
    dirEnqueueRead(op);
}

/* A barrier is a read in the FIFO: the thread answers it only after every
 * write queued before it (see dirRunBarrier). */
void dirBarrier(DirResultFn *cb, void *arg)
{
    DirOp *op = dirOpNew(DIR_OP_BARRIER, NULL, 0);
    op->cb = cb;
    op->arg = arg;
    dirEnqueueRead(op);
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

/* Copies a version request into an op and queues it as a read (answered
 * at once, or DIR_UNAVAILABLE while the directory is down). */
void dirVersionRequest(DirVerKind kind, const char *name, size_t nameLen, uint64_t version,
                       uint64_t retain, size_t nIds, const char *const *ids, const size_t *idLens,
                       DirResultFn *cb, void *arg)
{
    DirOp *op = dirOpNew(DIR_OP_VERSION, name, nameLen);
    DirVerReq *v = dirCalloc(1, sizeof(*v));
    v->kind = kind;
    v->version = version;
    v->retain = retain;
    v->nIds = nIds;
    v->ids = dirCalloc(nIds ? nIds : 1, sizeof(*v->ids));
    v->idLens = dirCalloc(nIds ? nIds : 1, sizeof(*v->idLens));
    for (size_t i = 0; i < nIds; i++) {
        v->ids[i] = dirMalloc(idLens[i] + 1);
        memcpy(v->ids[i], ids[i], idLens[i]);
        v->ids[i][idLens[i]] = '\0';
        v->idLens[i] = idLens[i];
    }
    op->ver = v;
    op->cb = cb;
    op->arg = arg;
    dirEnqueueRead(op);
}

/* A consistent copy of the counters; safe from any thread. */
void dirGetStats(DirStats *st)
{
    pthread_mutex_lock(&dir.lock);
    *st = dir.stats;
    st->queued = dir.pendingWrites + dir.batchWrites; /* until answered */
    pthread_mutex_unlock(&dir.lock);
}
