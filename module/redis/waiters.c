/*
 * waiters.c - clients blocked in OBJ.GET / OBJ.PIN until an object is sealed.
 *
 * Plasma's get waits for an object that is not sealed yet; here that wait
 * is a RedisModule_BlockClient, so the server keeps serving everyone else.
 * Waiters sit in one list (there are few at a time), are re-examined when
 * an id is sealed, aborted or put, and are always released through
 * RedisModule_UnblockClient exactly once: on wake-up, on timeout and on
 * disconnect (Redis frees a thread-less blocked handle only then).
 *
 * Why a module timer and not BlockClient's timeout: in Redis 7.0 a blocked
 * client whose unblock is pending when its timeout fires gets no reply at
 * all. With one unblock path (ours) that case cannot happen: the timer only
 * marks the waiter as timed out and unblocks it; the reply callback answers.
 * Main thread only, except waitersAny: the transfer engine asks it after a
 * seal, so that a fetch nobody waits on costs no wake-up of the main thread.
 * For that to lose no wake-up, a waiter is counted before its object is
 * looked at for the last time (see waitersBlock).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"
#include "waiters.h"
#include "common/list.h"

typedef struct Waiter {
    RedisModuleBlockedClient *bc;
    char *id;
    size_t idLen;
    int waitMissing;
    ObjReplyKind kind;
    int gone;     /* disconnected: nothing to reply */
    int timedOut; /* the timer fired: reply TIMEOUT */
    RedisModuleTimerID timer;
    int hasTimer;
    ObjListLink link; /* waiters */
} Waiter;

static ObjList waiters = {&waiters, &waiters};
static _Atomic uint64_t waitCount; /* seq_cst: see waitersBlock */

/* Take w off the list and out of the count. Can't fail. */
static void waiterUnlink(Waiter *w)
{
    objListUnlink(&w->link);
    waitCount--;
}

/* Unlink w, stop its timer and hand it to Redis; w is freed by waiterFree
 * afterwards. */
static void waiterRelease(Waiter *w)
{
    waiterUnlink(w);
    if (w->hasTimer)
        RedisModule_StopTimer(objNode.ctx, w->timer, NULL);
    w->hasTimer = 0;
    RedisModule_UnblockClient(w->bc, w);
}

/* The listed waiter of blocked client bc, or NULL. */
static Waiter *waiterFind(RedisModuleBlockedClient *bc)
{
    ObjListLink *it;

    objListForEach(&waiters, it) {
        Waiter *w = objListEntry(it, Waiter, link);
        if (w->bc == bc)
            return w;
    }
    return NULL;
}

/* Reply callback: the wait is over, answer from the table as it is now. */
static int waiterReply(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    Waiter *w = RedisModule_GetBlockedClientPrivateData(ctx);

    if (!w || w->gone)
        return REDISMODULE_OK;
    if (w->timedOut)
        return objReplyError(ctx, OBJ_EW_TIMEOUT, "the object was not sealed in time");
    return objReplyObject(ctx, w->id, w->idLen, w->kind);
}

static void waiterTimerFired(RedisModuleCtx *ctx, void *data)
{
    Waiter *w = data; /* still listed: waiterRelease stops the timer */

    w->hasTimer = 0;
    w->timedOut = 1;
    waiterRelease(w);
}

static void waiterDisconnected(RedisModuleCtx *ctx, RedisModuleBlockedClient *bc)
{
    Waiter *w = waiterFind(bc);

    if (w) {
        w->gone = 1;
        waiterRelease(w);
    }
}

static void waiterFree(RedisModuleCtx *ctx, void *privdata)
{
    Waiter *w = privdata;

    free(w->id);
    free(w);
}

/* Is w's wait over, given the table now? Caller holds the table lock. */
static int waiterReady(const Waiter *w)
{
    ObjEntry *e = objTableFind(objNode.table, w->id, w->idLen);

    if (!e)
        return !w->waitMissing;
    return e->state == OBJ_SEALED;
}

int waitersBlock(RedisModuleCtx *ctx, const char *id, size_t idLen, long long timeoutMs,
                 int waitMissing, ObjReplyKind kind)
{
    if (objReplyIfCannotWait(ctx, kind == OBJ_REPLY_PIN ? "OBJ.PIN" : "OBJ.GET"))
        return REDISMODULE_OK;
    Waiter *w = calloc(1, sizeof(*w));
    if (!w || !(w->id = malloc(idLen ? idLen : 1))) {
        free(w);
        return objReplyError(ctx, OBJ_EW_OOM, "out of memory for a waiter");
    }
    memcpy(w->id, id, idLen);
    w->idLen = idLen;
    w->waitMissing = waitMissing;
    w->kind = kind;
    w->bc = RedisModule_BlockClient(ctx, waiterReply, NULL, waiterFree, 0);
    RedisModule_SetDisconnectCallback(w->bc, waiterDisconnected);
    if (timeoutMs > 0) {
        w->timer = RedisModule_CreateTimer(ctx, timeoutMs, waiterTimerFired, w);
        w->hasTimer = 1;
    }
    objListPushFront(&waiters, &w->link);
    waitCount++;
    objNode.cnt.blocked++;
    /* A seal on the engine thread between the caller's look at the object
     * and the count above found no waiter and woke nobody: look again now
     * that this one is counted (the engine seals, then reads the count). */
    objTableLock(objNode.table);
    if (waiterReady(w))
        waiterRelease(w);
    objTableUnlock(objNode.table);
    return REDISMODULE_OK;
}

void waitersRecheck(const char *id, size_t idLen)
{
    ObjListLink *it, *next;

    if (objListEmpty(&waiters))
        return;
    objTableLock(objNode.table);
    objListForEachSafe(&waiters, it, next) {
        Waiter *w = objListEntry(it, Waiter, link);
        int match = !id || (w->idLen == idLen && memcmp(w->id, id, idLen) == 0);
        if (match && waiterReady(w))
            waiterRelease(w);
    }
    objTableUnlock(objNode.table);
}

uint64_t waitersCount(void)
{
    return waitCount;
}

int waitersAny(void)
{
    return waitCount > 0;
}
