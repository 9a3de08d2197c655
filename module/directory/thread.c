/*
 * thread.c - the directory thread: it (re)connects when due, renews the
 * heartbeat, and runs the queue in order -- runs of writes pipelined, runs
 * of lookups together (with the writes queued just before them in the same
 * pipeline), listings one at a time -- then sleeps until the next deadline
 * or a signal. On stop it unregisters and refuses what is left.
 */
#include "dirint.h"

#include <stdint.h>
#include <stdio.h>
#include <time.h>

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
        dirBackoff();
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

/* Moves the run of writes at the head of work to the back of out. */
static void dirTakeWriteRun(ObjList *work, ObjList *out)
{
    ObjListLink *l;
    while ((l = objListFirst(work)) != NULL && dirOpIsWrite(dirOpOf(l))) {
        objListUnlink(l);
        objListPushBack(out, l);
    }
}

/* Unlinks the run of lookups at the head of work (at most
 * OBJ_DIR_PIPELINE) into ops, in order. Returns how many. */
static size_t dirTakeLookupRun(ObjList *work, DirOp **ops)
{
    ObjListLink *l;
    size_t n = 0;
    while (n < OBJ_DIR_PIPELINE && (l = objListFirst(work)) != NULL &&
           dirOpOf(l)->kind == DIR_OP_LOOKUP) {
        objListUnlink(l);
        ops[n++] = dirOpOf(l);
    }
    return n;
}

/* Something failed to reach its shard: left (the unfinished writes) and
 * all of work after them go back to the queue head, in order. */
static void dirRequeueRest(ObjList *left, ObjList *work)
{
    objListSpliceBack(left, work);
    dirRequeueFront(left);
}

/*
 * Runs a batch taken from the queue, in order: runs of writes go out
 * pipelined, runs of lookups together (with the writes just before them in
 * the same pipeline), listings and node lookups one at a time (a read whose
 * shard is down answers DIR_UNAVAILABLE by itself). When a write cannot
 * reach its shard, whatever is unfinished goes back to the queue head.
 * work ends empty.
 */
static void dirRunBatch(ObjList *work)
{
    ObjListLink *l;
    while ((l = objListFirst(work)) != NULL) {
        DirOp *op = dirOpOf(l);
        ObjList writes;
        objListInit(&writes);
        if (dirOpIsWrite(op)) {
            dirTakeWriteRun(work, &writes);
            ObjListLink *after = objListFirst(work);
            if (after == NULL || dirOpOf(after)->kind != DIR_OP_LOOKUP || !dir.haveMap) {
                if (dirSendWrites(&writes) != 0) {
                    dirRequeueRest(&writes, work);
                    return;
                }
                continue;
            }
            op = dirOpOf(after); /* the writes go in the lookups' pipeline, below */
        }
        if (op->kind == DIR_OP_LOOKUP) {
            /* Consecutive lookups share their round trips. */
            DirOp *ops[OBJ_DIR_PIPELINE];
            size_t n = dirTakeLookupRun(work, ops);
            if (!dir.haveMap) {
                for (size_t i = 0; i < n; i++)
                    dirFailOne(ops[i], dir.lastIoError);
                continue;
            }
            dirDoLookups(&writes, ops, n);
            if (!objListEmpty(&writes)) { /* as for writes alone: they and all after go back */
                dirRequeueRest(&writes, work);
                return;
            }
        } else {
            objListUnlink(&op->link);
            if (op->kind == DIR_OP_NODE)
                dirRunNode(op);
            else if (op->kind == DIR_OP_VERSION)
                dirRunVersion(op);
            else if (op->kind == DIR_OP_CLAIM)
                dirRunClaim(op);
            else if (op->kind == DIR_OP_BARRIER)
                dirRunBarrier(op);
            else
                dirRunList(op);
        }
    }
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

/* What the thread does next, once the lock is dropped. */
typedef enum DirNext {
    DIR_NEXT_SLEPT,
    DIR_NEXT_WORK,
    DIR_NEXT_SNAPSHOT,
    DIR_NEXT_BEAT, /* renew the registration now (dirSetDraining) */
    DIR_NEXT_STOP
} DirNext;

/*
 * With dir.lock held, picks the next piece of work -- a registration
 * renewal asked for (dirSetDraining), while some shard is down (up == 0)
 * only the reads, else a batch of the queue (writes alone
 * first wait OBJ_DIR_WRITE_DELAY_MS for company), or a re-publish after a
 * queue overflow -- or sleeps until the next deadline and says so. Work is
 * moved to the back of work.
 */
static DirNext dirNextLocked(int up, ObjList *work)
{
    for (;;) {
        int64_t deadline;
        if (dir.stopping)
            return DIR_NEXT_STOP;
        if (dir.serverUp) {
            dir.serverUp = 0;
            if (!up) {
                dir.nextConnectMs = 0;
                dir.backoffMs = OBJ_DIR_BACKOFF_MIN_MS;
                return DIR_NEXT_SLEPT;
            }
        }
        if (dir.beatNow) {
            dir.beatNow = 0;
            if (dir.haveMap)
                return DIR_NEXT_BEAT;
        }
        if (!up) {
            if (dir.pendingReads > 0) {
                dirTakeReadsLocked(work);
                return DIR_NEXT_WORK;
            }
            deadline = dir.nextConnectMs;
            if (dir.haveMap && dir.nextHeartbeatMs < deadline)
                deadline = dir.nextHeartbeatMs;
        } else {
            int64_t writesDue = dir.writesSinceMs + OBJ_DIR_WRITE_DELAY_MS;
            int queued = !objListEmpty(&dir.queue);
            if (queued && (dir.pendingReads > 0 || dir.pendingWrites >= OBJ_DIR_PIPELINE ||
                           dirNowMs() >= writesDue)) {
                dirTakeLocked(work, OBJ_DIR_PIPELINE);
                return DIR_NEXT_WORK;
            }
            if (dir.needSnapshot) {
                dir.needSnapshot = 0;
                return DIR_NEXT_SNAPSHOT;
            }
            deadline = dir.nextHeartbeatMs;
            if (dir.nextPurgeMs < deadline)
                deadline = dir.nextPurgeMs;
            if (queued && writesDue < deadline)
                deadline = writesDue; /* only writes, waiting for company */
        }
        if (dirNowMs() >= deadline)
            return DIR_NEXT_SLEPT;
        dirWaitLocked(deadline);
    }
}

/*
 * The directory thread: (re)connect when due, renew the heartbeat when due,
 * then run the next piece of work (dirNextLocked) or sleep until the next
 * deadline. On stop: unregister, close, refuse what is left, exit.
 */
void *dirThreadMain(void *unused)
{
    (void)unused;
    pthread_setname_np(pthread_self(), "obj-directory"); /* top -H, perf */
    for (;;) {
        if (!dirAllUp() && dirNowMs() >= dir.nextConnectMs)
            dirConnect();
        if (dir.haveMap && dirNowMs() >= dir.nextHeartbeatMs)
            dirHeartbeat();
        int up = dirAllUp();
        if (up && dirNowMs() >= dir.nextPurgeMs)
            dirFollowPurges();

        ObjList work;
        objListInit(&work);
        pthread_mutex_lock(&dir.lock);
        DirNext next = dirNextLocked(up, &work);
        pthread_mutex_unlock(&dir.lock);
        if (next == DIR_NEXT_STOP)
            break;
        if (next == DIR_NEXT_WORK) {
            dirRunBatch(&work);
            pthread_mutex_lock(&dir.lock);
            dir.batchWrites = 0;
            pthread_mutex_unlock(&dir.lock);
        } else if (next == DIR_NEXT_SNAPSHOT)
            dirRepublish();
        else if (next == DIR_NEXT_BEAT)
            dirHeartbeat();
    }

    dirUnregister();
    dirConnsCloseAll();
    ObjList left;
    objListInit(&left);
    pthread_mutex_lock(&dir.lock);
    dirTakeLocked(&left, SIZE_MAX);
    pthread_mutex_unlock(&dir.lock);
    dirFailReads(&left, "directory stopped");
    return NULL;
}
