/*
 * drain.c - moving a node's objects away before it leaves (OBJ.DRAIN, and
 * SHUTDOWN when drain-on-shutdown is set). The node says it is draining in
 * its registration (no placement picks it), refuses new objects, and for
 * every primary and protected copy it holds asks another node for a copy
 * that counts (a primary's target takes ownership over from this node);
 * once that node holds it, this node's copy becomes an ordinary replica.
 * A protected copy the others already have enough of is only released.
 * Objects that find no taker are tried again every second; the drain is
 * over when nothing that counts is left here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "replint.h"
#include "common/util.h"

/* How long an object that found no taker waits before it is tried again. */
#define DRAIN_RETRY_US (1000LL * 1000)

typedef struct DrainItem {
    ObjListLink link;
    RmObj o;
    int64_t retryAtUs;
} DrainItem;

static struct {
    int on;
    ObjList todo;
    int busy; /* lookups and placements in flight */
    int init;
} dr;

static void drainInit(void)
{
    if (!dr.init) {
        objListInit(&dr.todo);
        dr.init = 1;
    }
}

static void drainItemFree(DrainItem *it)
{
    rmObjFree(&it->o);
    free(it);
}

static void drainCollect(ObjEntry *e, void *arg)
{
    (void)arg;
    if (e->sumPending || objTableCopyOf(e) == OBJ_COPY_REPLICA)
        return;
    DrainItem *it = calloc(1, sizeof(*it));
    if (!it || rmObjFrom(&it->o, e) == -1) {
        free(it);
        return; /* the drain's last look finds it */
    }
    objListPushBack(&dr.todo, &it->link);
}

/* Queue every object that counts here; returns how many. */
static uint64_t drainScan(void)
{
    uint64_t cursor = 0, n = 0;
    ObjListLink *l;

    do {
        objTableLock(rm.cfg.table);
        cursor = objTableScan(rm.cfg.table, cursor, 256, drainCollect, NULL);
        objTableUnlock(rm.cfg.table);
    } while (cursor != 0);
    objListForEach(&dr.todo, l)
        n++;
    return n;
}

static void drainCount(uint64_t moved, uint64_t bytes, uint64_t failures, const char *why)
{
    pthread_mutex_lock(&rm.lock);
    rm.drain.moved += moved;
    rm.drain.bytes += bytes;
    rm.drain.failures += failures;
    if (why)
        snprintf(rm.drain.lastError, sizeof(rm.drain.lastError), "%s", why);
    pthread_mutex_unlock(&rm.lock);
}

/* This node's copy of it went elsewhere: let it go. */
static void drainMoved(DrainItem *it)
{
    rmSetCopy(it->o.id, it->o.idLen, it->o.checksum, OBJ_COPY_REPLICA, it->o.want, NULL);
    drainCount(1, it->o.bytes, 0, NULL);
    drainItemFree(it);
}

static void drainRetry(DrainItem *it, const char *why)
{
    drainCount(0, 0, 1, why);
    if (!dr.on) {
        drainItemFree(it);
        return;
    }
    it->retryAtUs = utilMonoUs() + DRAIN_RETRY_US;
    objListPushBack(&dr.todo, &it->link);
}

static void drainPlaceDone(Place *p);

void drainOnLookup(void *item, DirResult *res)
{
    DrainItem *it = item;

    dr.busy--;
    objTableLock(rm.cfg.table);
    ObjEntry *e = rmLocal(it->o.id, it->o.idLen, it->o.checksum);
    int counts = e && objTableCopyOf(e) != OBJ_COPY_REPLICA;
    objTableUnlock(rm.cfg.table);
    if (!counts || !dr.on) { /* deleted, replaced, released meanwhile, or cancelled */
        dirResultFree(res);
        drainItemFree(it);
        return;
    }
    if (res->status != DIR_FOUND || res->checksum != it->o.checksum) {
        char why[200];
        snprintf(why, sizeof(why), "'%.64s': %.120s", it->o.id,
                 res->status == DIR_FOUND ? "the directory names another generation" : res->err);
        dirResultFree(res);
        drainRetry(it, why);
        return;
    }
    uint32_t others = 0;
    for (size_t i = 0; i < res->count; i++)
        if (res->nodes[i].prot && strcmp(res->nodes[i].name, rm.cfg.nodeName))
            others++;
    if (it->o.copy == OBJ_COPY_PROTECTED && others >= it->o.want) {
        dirResultFree(res);
        drainMoved(it);
        return;
    }
    /* A primary hands its ownership over with a new copy, or, when the
     * others hold enough (or no other node can take one), to a holder. */
    int primary = it->o.copy == OBJ_COPY_PRIMARY;
    int protClass = !primary               ? PLACE_PROT_SKIP
                    : others >= it->o.want ? PLACE_PROT_FIRST
                                           : PLACE_PROT_LAST;
    uint32_t flags = ENGINE_REPL_PROTECT | (primary ? ENGINE_REPL_OWN : 0);
    Place *p = placeNew(PLACE_DRAIN, it->o.id, it->o.idLen, it->o.checksum, it->o.bytes, it->o.want,
                        1, flags);
    const DirNode *me = rmNode(rm.cfg.nodeName);
    if (!p || placeFromLookup(p, res, protClass) == -1 ||
        placeSkip(p, rm.cfg.nodeName, me ? me->label : NULL) == -1) {
        if (p)
            placeFree(p);
        dirResultFree(res);
        drainRetry(it, "OOM out of memory");
        return;
    }
    dirResultFree(res);
    p->item = it;
    p->ended = drainPlaceDone;
    dr.busy++;
    placeStart(p);
}

/* A drain placement ended: the copy moved (held), or try again later. */
static void drainPlaceDone(Place *p)
{
    DrainItem *it = p->item;

    dr.busy--;
    if (rm.stop) {
        drainItemFree(it);
        return;
    }
    if (p->held > 0) {
        drainMoved(it);
        return;
    }
    char why[200];
    snprintf(why, sizeof(why), "'%.64s': %.120s", it->o.id, p->lastErr);
    drainRetry(it, why);
}

/* Start or stop as the command layer asked. */
static void drainSwitch(void)
{
    pthread_mutex_lock(&rm.lock);
    int flagged = rm.drainFlagged, wanted = rm.drainWanted;
    rm.drainFlagged = 0;
    pthread_mutex_unlock(&rm.lock);
    if (!flagged || wanted == dr.on)
        return;
    dr.on = wanted;
    dirSetDraining(wanted);
    if (wanted) {
        uint64_t n = drainScan();
        rmLog("notice", "draining: %llu objects to move to other nodes", (unsigned long long)n);
        pthread_mutex_lock(&rm.lock);
        rm.drain.moved = rm.drain.bytes = rm.drain.failures = 0;
        rm.drain.lastError[0] = '\0';
        pthread_mutex_unlock(&rm.lock);
        return;
    }
    ObjListLink *l;
    while ((l = objListPopFront(&dr.todo)) != NULL)
        drainItemFree(objListEntry(l, DrainItem, link));
    rmLog("notice", "drain cancelled: the node takes new objects again");
}

void drainTick(int64_t now)
{
    ObjListLink *l, *tmp;
    uint64_t left = 0;

    drainInit();
    drainSwitch();
    if (!dr.on)
        return;
    pthread_mutex_lock(&rm.lock);
    int drained = rm.drain.state == REPLICA_DRAIN_DRAINED;
    pthread_mutex_unlock(&rm.lock);
    if (drained)
        return;
    int slots = rm.cfg.repairConcurrency > 0 ? rm.cfg.repairConcurrency : 1;
    objListForEachSafe(&dr.todo, l, tmp) {
        DrainItem *it = objListEntry(l, DrainItem, link);
        left++;
        if (dr.busy >= slots || it->retryAtUs > now)
            continue;
        RmEv *ev = rmEvNew(RM_EV_DRAIN, it);
        if (!ev)
            break;
        objListUnlink(&it->link);
        dr.busy++;
        dirLookup(it->o.id, it->o.idLen, rmDirAnswer, ev);
    }
    /* Nothing queued or in flight: one last look for objects that came
     * meanwhile (a takeover); none: drained. */
    if (objListEmpty(&dr.todo) && dr.busy == 0 && drainScan() == 0) {
        pthread_mutex_lock(&rm.lock);
        if (rm.drain.state == REPLICA_DRAIN_DRAINING) {
            rm.drain.state = REPLICA_DRAIN_DRAINED;
            rmLog("notice", "drained: %llu objects moved to other nodes",
                  (unsigned long long)rm.drain.moved);
        }
        rm.drain.left = 0;
        pthread_mutex_unlock(&rm.lock);
        return;
    }
    pthread_mutex_lock(&rm.lock);
    rm.drain.left = left + (uint64_t)dr.busy;
    pthread_mutex_unlock(&rm.lock);
}

void drainDropAll(void)
{
    ObjListLink *l;

    drainInit();
    while ((l = objListPopFront(&dr.todo)) != NULL)
        drainItemFree(objListEntry(l, DrainItem, link));
    dr.on = 0;
    dr.busy = 0;
}
