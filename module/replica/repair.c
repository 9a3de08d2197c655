/*
 * repair.c - sweeps over this node's objects that ask for copies (a replica
 * count of 2 or more, held here as primary or protected copy): each is
 * looked up, and
 *   - short of live holders, or owned by a dead node: claimed in the
 *     directory (one survivor wins), and the winner takes ownership when
 *     the owner is dead and places the missing copies;
 *   - with more live holders than its count: the holders past the first
 *     `want` (the owner, then names in byte order) release their copies
 *     (they become ordinary, evictable replicas), each deciding alone.
 * A sweep runs when the live node set changes and every repair-interval;
 * repair copies are made repair-concurrency at a time.
 */
#include <stdlib.h>
#include <string.h>

#include "replint.h"
#include "common/util.h"

/* One object of a sweep. */
typedef struct SweepItem {
    ObjListLink link;
    RmObj o;
    DirResult *res; /* its lookup, kept while it waits for a claim */
} SweepItem;

static struct {
    ObjList todo;   /* SweepItem: to look up */
    ObjList claims; /* SweepItem: to claim and repair, as slots free */
    int lookups;    /* in flight */
    int claiming;   /* claims in flight */
    int active;     /* a sweep runs */
    int again;      /* another sweep is wanted after it */
    int64_t lastUs; /* when the last sweep started */
    uint64_t below; /* objects short of their count, this sweep */
    int init;
} sw;

static void sweepInit(void)
{
    if (!sw.init) {
        objListInit(&sw.todo);
        objListInit(&sw.claims);
        sw.init = 1;
    }
}

static void itemFree(SweepItem *it)
{
    if (it->res)
        dirResultFree(it->res);
    rmObjFree(&it->o);
    free(it);
}

/* objTableScan callback: collect the objects a sweep looks at. */
static void sweepCollect(ObjEntry *e, void *arg)
{
    ObjList *l = arg;

    if (e->want < 2 || e->sumPending || objTableCopyOf(e) == OBJ_COPY_REPLICA ||
        utilWallMs() - e->createdMs < REPL_SWEEP_MIN_AGE_MS)
        return;
    SweepItem *it = calloc(1, sizeof(*it));
    if (!it || rmObjFrom(&it->o, e) == -1) {
        free(it);
        return; /* the next sweep sees it */
    }
    objListPushBack(l, &it->link);
}

void repairSweep(void)
{
    uint64_t cursor = 0;

    sweepInit();
    if (sw.active) {
        sw.again = 1;
        return;
    }
    sw.active = 1;
    sw.below = 0;
    sw.lastUs = utilMonoUs();
    do {
        objTableLock(rm.cfg.table);
        cursor = objTableScan(rm.cfg.table, cursor, 256, sweepCollect, &sw.todo);
        objTableUnlock(rm.cfg.table);
    } while (cursor != 0);
}

/* Is a placement of id running here already (its put's, a repair: a claim
 * of ours renews)? */
static int repairRunning(const char *id, size_t idLen)
{
    ObjListLink *l;

    objListForEach(&rm.places, l) {
        const Place *p = objListEntry(l, Place, link);
        if (p->idLen == idLen && !memcmp(p->id, id, idLen))
            return 1;
    }
    return 0;
}

/* Live holders of res whose copies count, this node's own included when
 * it holds one (its publish may still be on its way). */
static uint32_t liveHolders(const DirResult *res, int *meListed)
{
    uint32_t n = 0;

    *meListed = 0;
    for (size_t i = 0; i < res->count; i++) {
        if (!res->nodes[i].prot)
            continue;
        n++;
        if (!strcmp(res->nodes[i].name, rm.cfg.nodeName))
            *meListed = 1;
    }
    return n + !*meListed;
}

static int ownerDead(const DirResult *res)
{
    return res->owner[0] && !res->ownerLive && strcmp(res->owner, rm.cfg.nodeName);
}

/* More live holders than want: does this node come after the first want
 * (the owner first, then names in byte order)? Then it lets its copy go. */
static int isSurplus(const SweepItem *it, const DirResult *res)
{
    uint32_t before = 0;

    if (it->o.copy != OBJ_COPY_PROTECTED || !strcmp(res->owner, rm.cfg.nodeName))
        return 0;
    for (size_t i = 0; i < res->count; i++) {
        const DirNode *n = &res->nodes[i];
        if (!n->prot || !strcmp(n->name, rm.cfg.nodeName))
            continue;
        if (!strcmp(n->name, res->owner) || strcmp(n->name, rm.cfg.nodeName) < 0)
            before++;
    }
    return before >= it->o.want;
}

void repairOnLookup(void *item, DirResult *res)
{
    SweepItem *it = item;
    int meListed;

    sw.lookups--;
    if (res->status != DIR_FOUND || res->checksum != it->o.checksum) {
        if (res->status == DIR_UNAVAILABLE)
            sw.again = 1;
        dirResultFree(res);
        itemFree(it);
        return;
    }
    uint32_t live = liveHolders(res, &meListed);
    if (live < it->o.want)
        sw.below++;
    if ((live < it->o.want || ownerDead(res)) && !repairRunning(it->o.id, it->o.idLen)) {
        it->res = res;
        objListPushBack(&sw.claims, &it->link);
        return;
    }
    if (live > it->o.want && isSurplus(it, res) &&
        rmSetCopy(it->o.id, it->o.idLen, it->o.checksum, OBJ_COPY_REPLICA, it->o.want, NULL) == 0) {
        pthread_mutex_lock(&rm.lock);
        rm.st.trimmed++;
        pthread_mutex_unlock(&rm.lock);
    }
    dirResultFree(res);
    itemFree(it);
}

static void repairPlaceDone(Place *p);

void repairOnClaim(void *item, DirResult *res)
{
    SweepItem *it = item;
    int meListed;

    sw.claiming--;
    int won = res->status == DIR_FOUND;
    dirResultFree(res);
    if (!won) { /* another holder repairs it, or the directory is away */
        itemFree(it);
        return;
    }
    if (ownerDead(it->res) && it->o.copy == OBJ_COPY_PROTECTED && !rmDrainingNow() &&
        rmSetCopy(it->o.id, it->o.idLen, it->o.checksum, OBJ_COPY_PRIMARY, it->o.want,
                  it->res->owner) == 0) {
        rmLog("notice", "object '%.*s': its owner '%s' is gone, this node owns it now",
              (int)(it->o.idLen > 64 ? 64 : it->o.idLen), it->o.id, it->res->owner);
        pthread_mutex_lock(&rm.lock);
        rm.st.takeovers++;
        pthread_mutex_unlock(&rm.lock);
        it->o.copy = OBJ_COPY_PRIMARY;
    }
    uint32_t live = liveHolders(it->res, &meListed);
    if (live >= it->o.want) {
        itemFree(it);
        return;
    }
    Place *p = placeNew(PLACE_REPAIR, it->o.id, it->o.idLen, it->o.checksum, it->o.bytes,
                        it->o.want, it->o.want - live, ENGINE_REPL_PROTECT);
    const DirNode *me = rmNode(rm.cfg.nodeName);
    if (!p || placeFromLookup(p, it->res, PLACE_PROT_SKIP) == -1 ||
        placeSkip(p, rm.cfg.nodeName, me ? me->label : NULL) == -1) {
        if (p)
            placeFree(p);
        itemFree(it);
        return;
    }
    p->item = it;
    p->ended = repairPlaceDone;
    placeStart(p);
}

/* A repair placement ended (copies made: held). */
static void repairPlaceDone(Place *p)
{
    if (rm.stop) {
        itemFree(p->item);
        return;
    }
    pthread_mutex_lock(&rm.lock);
    rm.st.repairs += p->held;
    rm.st.repairBytes += (uint64_t)p->held * p->bytes;
    if (p->held < p->need)
        rm.st.repairFailures++;
    pthread_mutex_unlock(&rm.lock);
    if (p->held < p->need)
        sw.again = 1; /* try again with the next sweep's view */
    itemFree(p->item);
}

void repairTick(int64_t now)
{
    sweepInit();
    if (!sw.active && rm.haveNodes &&
        now - sw.lastUs >=
            (int64_t)(rm.cfg.repairIntervalMs > 0 ? rm.cfg.repairIntervalMs : 10000) * 1000)
        repairSweep();
    while (sw.lookups < REPL_LOOKUP_WINDOW && !objListEmpty(&sw.todo)) {
        SweepItem *it = objListEntry(objListPopFront(&sw.todo), SweepItem, link);
        RmEv *ev = rmEvNew(RM_EV_SWEEP, it);
        if (!ev) {
            itemFree(it);
            continue;
        }
        sw.lookups++;
        dirLookup(it->o.id, it->o.idLen, rmDirAnswer, ev);
    }
    int slots = rm.cfg.repairConcurrency > 0 ? rm.cfg.repairConcurrency : 1;
    while (!objListEmpty(&sw.claims) && placeRepairsInFlight() + sw.claiming < slots) {
        SweepItem *it = objListEntry(objListPopFront(&sw.claims), SweepItem, link);
        RmEv *ev = rmEvNew(RM_EV_CLAIM, it);
        if (!ev) {
            itemFree(it);
            continue;
        }
        sw.claiming++;
        dirClaim(it->o.id, it->o.idLen, REPL_CLAIM_TTL_MS, rmDirAnswer, ev);
    }
    int inFlight = placeRepairsInFlight();
    pthread_mutex_lock(&rm.lock);
    rm.st.inFlight = (uint64_t)inFlight;
    pthread_mutex_unlock(&rm.lock);
    if (sw.active && objListEmpty(&sw.todo) && sw.lookups == 0 && objListEmpty(&sw.claims) &&
        sw.claiming == 0) {
        sw.active = 0;
        pthread_mutex_lock(&rm.lock);
        rm.st.below = sw.below;
        rm.st.sweeps++;
        pthread_mutex_unlock(&rm.lock);
        if (sw.again) {
            sw.again = 0;
            /* Not at once: what failed gets the time of a heartbeat. */
            sw.lastUs =
                now -
                (int64_t)(rm.cfg.repairIntervalMs > 0 ? rm.cfg.repairIntervalMs : 10000) * 1000 +
                (int64_t)rm.cfg.heartbeatMs * 1000;
        }
    }
}

void repairDropAll(void)
{
    ObjListLink *l;

    sweepInit();
    while ((l = objListPopFront(&sw.todo)) != NULL)
        itemFree(objListEntry(l, SweepItem, link));
    while ((l = objListPopFront(&sw.claims)) != NULL)
        itemFree(objListEntry(l, SweepItem, link));
    sw.active = 0;
    sw.lookups = sw.claiming = 0;
}
