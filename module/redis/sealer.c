/*
 * sealer.c - the background checksum and the background scrub (see
 * sealer.h for the contract).
 *
 * The checksum worker: OBJ.SEAL of a large object seals it at once with its
 * checksum pending (objTableSealPending) and queues it here. The worker
 * thread hashes the bytes, immutable by then, without the table lock, a
 * slice at a time, and hands the result to the main thread through an
 * eventfd; the main thread records it and only then publishes the object to
 * the directory. Until then the transfer engine makes a FETCH for it wait
 * (serve.c), so no copy leaves the node without its checksum; local readers
 * need no checksum and do not wait. An object deleted meanwhile is freed at
 * once, as any other: the table calls sealerCancel first, which takes the
 * job off the queue, or stops the worker at the end of its slice and waits
 * for that, so nothing reads a freed range.
 *
 * The scrub worker: a low-priority thread that zeroes, a slice at a time
 * under the table lock, the bytes deleted objects left in free ranges
 * (objTableScrub). A slice is small, so a command waits for the lock no
 * longer than a slice's memset; a create then finds the range it gets
 * already clear, and clears only what the scrub has not reached yet.
 */
#include "sealer.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "node.h"
#include "remote.h"
#include "copies.h"
#include "common/list.h"
#include "store/checksum.h"

/* Bytes the scrub clears per hold of the table lock (about 25 us). */
#define SEALER_SCRUB_SLICE (256ULL << 10)
/* How long the scrub sleeps when nothing is left to clear. */
#define SEALER_SCRUB_IDLE_MS 20
/* Bytes the checksum worker hashes between looks at a cancel. */
#define SEALER_SUM_SLICE (4ULL << 20)

/* One object whose checksum is to be taken (then has been). */
typedef struct SumJob {
    ObjListLink link;
    const ObjEntry *e;
    uint64_t sum;
} SumJob;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;     /* a job was queued, or stop */
    pthread_cond_t left;     /* the worker let go of `current` */
    ObjList todo, done;      /* SumJob.link: queued; hashed, for the main thread */
    const ObjEntry *current; /* what the worker hashes now, or NULL */
    int cancel;              /* the worker is to drop `current` */
    int stop;
    int running;
    int evFd;                /* readable when done is not empty, or a job was dropped */
    void (*onSettled)(void); /* sealerOnSettled's callback, main thread only */
    pthread_t sumThread, scrubThread;
    uint64_t deferred, pending, scrubbed; /* counters (under lock) */
} sl = {.lock = PTHREAD_MUTEX_INITIALIZER,
        .wake = PTHREAD_COND_INITIALIZER,
        .left = PTHREAD_COND_INITIALIZER,
        .evFd = -1};

/* The checksum of e's bytes, a slice at a time; -1 when a cancel came
 * (sl.cancel, read without the lock between slices). */
static int sealerHash(const ObjEntry *e, uint64_t *sum)
{
    const uint8_t *p = objNode.arena.base + e->offset;
    uint64_t left = e->dataSize + e->metaSize;
    XXH3_state_t *st;

    if (left <= SEALER_SUM_SLICE) {
        *sum = XXH3_64bits(p, left);
        return 0;
    }
    st = XXH3_createState();
    if (!st || XXH3_64bits_reset(st) != XXH_OK) {
        XXH3_freeState(st);
        *sum = XXH3_64bits(p, left); /* no state: in one go, not cancellable */
        return 0;
    }
    while (left) {
        if (__atomic_load_n(&sl.cancel, __ATOMIC_ACQUIRE)) {
            XXH3_freeState(st);
            return -1;
        }
        uint64_t n = left < SEALER_SUM_SLICE ? left : SEALER_SUM_SLICE;
        XXH3_64bits_update(st, p, n);
        p += n;
        left -= n;
    }
    *sum = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return 0;
}

/* The checksum thread: hash each queued object, hand it to the main thread. */
static void *sealerSumMain(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "obj-checksum");
    pthread_mutex_lock(&sl.lock);
    for (;;) {
        while (!sl.stop && objListEmpty(&sl.todo))
            pthread_cond_wait(&sl.wake, &sl.lock);
        if (sl.stop)
            break;
        SumJob *j = objListEntry(objListPopFront(&sl.todo), SumJob, link);
        sl.current = j->e;
        sl.cancel = 0;
        pthread_mutex_unlock(&sl.lock);
        int rc = sealerHash(j->e, &j->sum); /* sealed: immutable; freed only after a cancel */
        pthread_mutex_lock(&sl.lock);
        sl.current = NULL;
        pthread_cond_broadcast(&sl.left);
        if (rc == -1 || sl.cancel) {
            free(j);
            continue;
        }
        objListPushBack(&sl.done, &j->link);
        uint64_t one = 1;
        if (write(sl.evFd, &one, sizeof(one)) == -1 && errno != EAGAIN)
            break;
    }
    pthread_mutex_unlock(&sl.lock);
    return NULL;
}

/* Take e's job off list l, if it is there. Caller holds sl.lock. */
static int sealerDrop(ObjList *l, const ObjEntry *e)
{
    ObjListLink *it, *next;

    objListForEachSafe(l, it, next) {
        SumJob *j = objListEntry(it, SumJob, link);
        if (j->e == e) {
            objListUnlink(&j->link);
            free(j);
            return 1;
        }
    }
    return 0;
}

/* The table's hook before an entry whose checksum is pending is freed
 * (under the table lock, which the worker never takes): forget its job,
 * wherever it is, and wait until the worker reads none of its bytes. */
static void sealerCancel(const ObjEntry *e, void *arg)
{
    (void)arg;
    pthread_mutex_lock(&sl.lock);
    int found = sealerDrop(&sl.todo, e) || sealerDrop(&sl.done, e);
    if (!found && sl.current == e) {
        sl.cancel = 1;
        while (sl.current == e)
            pthread_cond_wait(&sl.left, &sl.lock);
        found = 1;
    }
    if (found) {
        sl.pending--;
        /* The main thread's sealerOnDone tells the waiters one checksum fewer
         * is pending (a write can fail only when the counter is full). */
        uint64_t one = 1;
        if (write(sl.evFd, &one, sizeof(one)) == -1 && errno != EAGAIN)
            RedisModule_Log(objNode.ctx, "warning", "sealer: cannot signal a dropped checksum");
    }
    pthread_mutex_unlock(&sl.lock);
}

/* The scrub thread: clear freed bytes a slice at a time, at the lowest
 * priority, and sleep when none are left (or the scrub is off). */
static void *sealerScrubMain(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "obj-scrub");
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19); /* best effort */
    pthread_mutex_lock(&sl.lock);
    while (!sl.stop) {
        pthread_mutex_unlock(&sl.lock);
        uint64_t n = 0;
        if (__atomic_load_n(&objNode.cfg.scrub, __ATOMIC_RELAXED))
            n = objTableScrub(objNode.table, objNode.arena.base, SEALER_SCRUB_SLICE);
        pthread_mutex_lock(&sl.lock);
        sl.scrubbed += n;
        if (n == 0 && !sl.stop) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += SEALER_SCRUB_IDLE_MS * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            pthread_cond_timedwait(&sl.wake, &sl.lock, &ts);
        }
    }
    pthread_mutex_unlock(&sl.lock);
    return NULL;
}

/* Main thread, on the eventfd: record each finished checksum and publish
 * its object. A job is taken off `done` under the table lock, so a delete
 * (which cancels under that lock) either got there first or comes after. */
static void sealerOnDone(int fd, void *user, int mask)
{
    uint64_t n;

    (void)user;
    (void)mask;
    if (read(fd, &n, sizeof(n)) == -1 && errno != EAGAIN)
        return;
    for (;;) {
        objTableLock(objNode.table);
        pthread_mutex_lock(&sl.lock);
        ObjListLink *l = objListPopFront(&sl.done);
        if (l)
            sl.pending--;
        pthread_mutex_unlock(&sl.lock);
        if (!l) {
            objTableUnlock(objNode.table);
            break;
        }
        SumJob *j = objListEntry(l, SumJob, link);
        ObjEntry *e = (ObjEntry *)j->e;
        objTableSumDone(objNode.table, e, j->sum);
        objTableUnlock(objNode.table);
        free(j);
        /* Only this thread frees entries (the engine unpins none that were
         * pending), so e is still the visible, sealed object. */
        objRemotePublish(e);
        copiesSealed(e);
    }
    if (sl.onSettled)
        sl.onSettled();
}

int sealerStart(RedisModuleCtx *ctx)
{
    objListInit(&sl.todo);
    objListInit(&sl.done);
    sl.stop = 0;
    sl.evFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (sl.evFd == -1) {
        RedisModule_Log(ctx, "warning", "sealer: eventfd: %s", strerror(errno));
        return REDISMODULE_ERR;
    }
    if (RedisModule_EventLoopAdd(sl.evFd, REDISMODULE_EVENTLOOP_READABLE, sealerOnDone, NULL) !=
        REDISMODULE_OK) {
        RedisModule_Log(ctx, "warning", "sealer: cannot watch its event fd");
        goto out_close_fd;
    }
    if (pthread_create(&sl.sumThread, NULL, sealerSumMain, NULL) != 0) {
        RedisModule_Log(ctx, "warning", "sealer: cannot start the checksum thread");
        goto out_unwatch;
    }
    if (pthread_create(&sl.scrubThread, NULL, sealerScrubMain, NULL) != 0) {
        RedisModule_Log(ctx, "warning", "sealer: cannot start the scrub thread");
        goto out_stop_sum;
    }
    sl.running = 1;
    objTableLock(objNode.table);
    objTableSetSumCancel(objNode.table, sealerCancel, NULL);
    objTableUnlock(objNode.table);
    return REDISMODULE_OK;

out_stop_sum:
    pthread_mutex_lock(&sl.lock);
    sl.stop = 1;
    pthread_cond_broadcast(&sl.wake);
    pthread_mutex_unlock(&sl.lock);
    pthread_join(sl.sumThread, NULL);
out_unwatch:
    RedisModule_EventLoopDel(sl.evFd, REDISMODULE_EVENTLOOP_READABLE);
out_close_fd:
    close(sl.evFd);
    sl.evFd = -1;
    return REDISMODULE_ERR;
}

void sealerStop(void)
{
    if (!sl.running)
        return;
    objTableLock(objNode.table);
    objTableSetSumCancel(objNode.table, NULL, NULL);
    objTableUnlock(objNode.table);
    pthread_mutex_lock(&sl.lock);
    sl.stop = 1;
    pthread_cond_broadcast(&sl.wake);
    pthread_mutex_unlock(&sl.lock);
    pthread_join(sl.sumThread, NULL);
    pthread_join(sl.scrubThread, NULL);
    RedisModule_EventLoopDel(sl.evFd, REDISMODULE_EVENTLOOP_READABLE);
    close(sl.evFd);
    sl.evFd = -1;
    sl.running = 0;
}

ObjStatus sealerSeal(ObjEntry *e, uint64_t holder)
{
    SumJob *j = NULL;
    ObjStatus st;

    if (sl.running && e->dataSize + e->metaSize >= SEALER_DEFER_MIN)
        j = malloc(sizeof(*j));
    if (j) {
        j->e = e;
        objTableLock(objNode.table); /* before any delete can cancel it */
        st = objTableSealPending(objNode.table, e, holder);
        if (st == OBJ_ST_OK) {
            pthread_mutex_lock(&sl.lock);
            objListPushBack(&sl.todo, &j->link);
            sl.deferred++;
            sl.pending++;
            pthread_cond_broadcast(&sl.wake);
            pthread_mutex_unlock(&sl.lock);
        }
        objTableUnlock(objNode.table);
        if (st != OBJ_ST_OK)
            free(j);
        return st;
    }
    /* Only this client can touch a created e, so the bytes are hashed
     * outside the lock. */
    uint64_t sum = objChecksum(objNode.arena.base, e);
    objTableLock(objNode.table);
    st = objTableSeal(objNode.table, e, holder, sum);
    objTableUnlock(objNode.table);
    if (st == OBJ_ST_OK) {
        objRemotePublish(e);
        copiesSealed(e);
    }
    return st;
}

uint64_t sealerPending(void)
{
    pthread_mutex_lock(&sl.lock);
    uint64_t pending = sl.pending;
    pthread_mutex_unlock(&sl.lock);
    return pending;
}

void sealerOnSettled(void (*fn)(void))
{
    sl.onSettled = fn;
}

void sealerStats(ObjStatSink *sink)
{
    pthread_mutex_lock(&sl.lock);
    uint64_t deferred = sl.deferred, pending = sl.pending, scrubbed = sl.scrubbed;
    pthread_mutex_unlock(&sl.lock);
    objTableLock(objNode.table);
    uint64_t dirty = objTableDirtyFreeBytes(objNode.table);
    objTableUnlock(objNode.table);
    objStatNum(sink, "checksums_deferred", deferred);
    objStatNum(sink, "checksums_pending", pending);
    objStatNum(sink, "scrubbed_bytes", scrubbed);
    objStatNum(sink, "arena_dirty_free_bytes", dirty);
}
