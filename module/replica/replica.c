/*
 * replica.c - the replica manager's thread and its public face
 * (replica.h): the loop that acts on the queued answers and ticks the
 * parts, the live node set it reads every heartbeat (a change starts a
 * repair sweep), the engine's and the directory's callbacks, the drain's
 * switch and the statistics. Placement, repair and drain are place.c,
 * repair.c and drain.c; what they share, core.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "replint.h"
#include "common/util.h"

/* How long the thread sleeps when nothing happens (every answer wakes it at
 * once; the tick only serves deadlines and the periodic work): a node at
 * rest wakes 10 times a second, not 50, which a slow host (an emulated
 * guest, a sanitizer build) feels in its heartbeats. */
#define RM_TICK_MS 100

/* A hash of the set of names and incarnations (order does not matter): a
 * node restarted under its name changes it too. */
static uint64_t rmNamesHash(const DirNode *nodes, size_t n)
{
    uint64_t h = n;

    for (size_t i = 0; i < n; i++) {
        uint64_t x = 1469598103934665603ULL;
        for (const char *c = nodes[i].name; *c; c++)
            x = (x ^ (uint8_t)*c) * 1099511628211ULL;
        h += (x ^ nodes[i].boot) * 0x9E3779B97F4A7C15ULL;
    }
    return h;
}

/* The live node set arrived: keep it; a change (a node died, came, or
 * came back) starts a sweep and wakes placements waiting for a target. */
static void rmOnNodes(DirResult *res)
{
    rm.nodesAsked = 0;
    rm.nodesAtUs = utilMonoUs();
    if (res->status != DIR_FOUND) {
        dirResultFree(res);
        return;
    }
    uint64_t h = rmNamesHash(res->nodes, res->count);
    int changed = !rm.haveNodes || h != rm.nodesHash;
    free(rm.nodes);
    rm.nodes = res->nodes;
    rm.nNodes = res->count;
    res->nodes = NULL;
    res->count = 0;
    dirResultFree(res);
    rm.nodesHash = h;
    rm.haveNodes = 1;
    if (changed) {
        placeNodesChanged();
        repairSweep();
    }
}

/* ---- the engine's and the directory's callbacks (their threads) ----------------------- */

void replicaOnReplDone(ReplReq *r)
{
    rmEvPost(r->owner);
}

int replicaMayReplicate(char *err, size_t errLen)
{
    if (replicaDraining()) {
        snprintf(err, errLen, "DRAINING the node is draining: it takes no copies");
        return -1;
    }
    return 0;
}

int replicaOnReplicated(const char *peer, const char *id, size_t idLen, uint64_t checksum,
                        uint32_t flags, uint32_t want, char *err, size_t errLen)
{
    ObjTable *t = rm.cfg.table;

    if (replicaMayReplicate(err, errLen) == -1)
        return -1;
    objTableLock(t);
    ObjEntry *e = rmLocal(id, idLen, checksum);
    ObjCopy now = e ? objTableCopyOf(e) : OBJ_COPY_REPLICA;
    objTableUnlock(t);
    if (!e) {
        snprintf(err, errLen, "NOTFOUND the copy is gone");
        return -1;
    }
    ObjCopy c = (flags & ENGINE_REPL_OWN) || now == OBJ_COPY_PRIMARY ? OBJ_COPY_PRIMARY
                                                                     : OBJ_COPY_PROTECTED;
    if (rmSetCopy(id, idLen, checksum, c, want,
                  (flags & ENGINE_REPL_OWN) && now != OBJ_COPY_PRIMARY ? peer : NULL) == -1) {
        snprintf(err, errLen, "NOTFOUND the copy is gone");
        return -1;
    }
    if ((flags & ENGINE_REPL_OWN) && now != OBJ_COPY_PRIMARY) {
        pthread_mutex_lock(&rm.lock);
        rm.st.takeovers++;
        pthread_mutex_unlock(&rm.lock);
    }
    return 0;
}

void replicaOnMoved(const char *id, size_t idLen, uint64_t checksum, const char *owner)
{
    RmEv *ev = idLen <= sizeof(ev->repl.id) ? rmEvNew(RM_EV_MOVED, NULL) : NULL;

    if (!ev)
        return; /* the next re-publish is refused again and comes back here */
    memcpy(ev->repl.id, id, idLen);
    ev->repl.idLen = idLen;
    ev->repl.checksum = checksum;
    snprintf(ev->repl.target, sizeof(ev->repl.target), "%s", owner);
    rmEvPost(ev);
}

/* The directory names another owner of this node's primary id (this node
 * was away and its ownership moved). A live owner keeps it: this copy
 * becomes a replica. A dead one (it took over, then died before anyone
 * repaired): this node takes the ownership back, so the object keeps a
 * holder that counts. */
static void rmOnMoved(const ReplReq *m)
{
    ObjTable *t = rm.cfg.table;

    objTableLock(t);
    ObjEntry *e = rmLocal(m->id, m->idLen, m->checksum);
    int primary = e && objTableCopyOf(e) == OBJ_COPY_PRIMARY;
    uint32_t want = e ? e->want : 1;
    objTableUnlock(t);
    if (!primary)
        return;
    int idLen = (int)(m->idLen > 64 ? 64 : m->idLen);
    if (rm.haveNodes && !rmNode(m->target)) {
        rmLog("notice", "object '%.*s' is owned by '%s', which is gone: this node takes it back",
              idLen, m->id, m->target);
        rmSetCopy(m->id, m->idLen, m->checksum, OBJ_COPY_PRIMARY, want, m->target);
        return;
    }
    rmLog("notice", "object '%.*s' is owned by '%s' now: this node's copy becomes a replica", idLen,
          m->id, m->target);
    rmSetCopy(m->id, m->idLen, m->checksum, OBJ_COPY_REPLICA, want, NULL);
}

/* ---- drain's switch (any thread) ------------------------------------------------------- */

void replicaDrainStart(void)
{
    pthread_mutex_lock(&rm.lock);
    if (rm.drain.state == REPLICA_DRAIN_IDLE) {
        rm.drain.state = REPLICA_DRAIN_DRAINING;
        rm.drainWanted = 1;
        rm.drainFlagged = 1;
        pthread_cond_signal(&rm.wake);
    }
    pthread_mutex_unlock(&rm.lock);
}

void replicaDrainCancel(void)
{
    pthread_mutex_lock(&rm.lock);
    if (rm.drain.state != REPLICA_DRAIN_IDLE) {
        rm.drain.state = REPLICA_DRAIN_IDLE;
        rm.drainWanted = 0;
        rm.drainFlagged = 1;
        pthread_cond_signal(&rm.wake);
    }
    pthread_mutex_unlock(&rm.lock);
}

void replicaDrainGet(ReplicaDrainStatus *st)
{
    pthread_mutex_lock(&rm.lock);
    *st = rm.drain;
    pthread_mutex_unlock(&rm.lock);
}

int replicaDraining(void)
{
    return rmDrainingNow();
}

void replicaGetStats(ReplicaStats *st)
{
    pthread_mutex_lock(&rm.lock);
    *st = rm.st;
    pthread_mutex_unlock(&rm.lock);
}

/* ---- the thread -------------------------------------------------------------------------- */

void replicaPlace(const char *id, size_t idLen, uint64_t checksum, uint64_t bytes, uint32_t want,
                  int64_t replyAtUs, ReplicaDoneFn *done, void *arg)
{
    Place *p = placeNew(PLACE_PUT, id, idLen, checksum, bytes, want, want > 1 ? want - 1 : 0,
                        ENGINE_REPL_PROTECT);
    RmEv *ev = p ? rmEvNew(RM_EV_PLACE, p) : NULL;

    if (!ev || !rm.running) {
        free(ev);
        if (p) {
            p->finished = 1;
            free(p->id);
            free(p);
        }
        if (done)
            done(arg, 1);
        return;
    }
    p->base = 1;
    p->replyAtUs = replyAtUs;
    p->done = done;
    p->arg = arg;
    rmEvPost(ev);
}

/* Act on one event. */
static void rmDispatch(RmEv *ev)
{
    switch (ev->type) {
        case RM_EV_PLACE:
            placeStart(ev->ctx);
            break;
        case RM_EV_REPL:
            placeOnRepl(ev->ctx, &ev->repl);
            break;
        case RM_EV_BARRIER:
            placeOnBarrier(ev->ctx, ev->res);
            break;
        case RM_EV_NODES:
            rmOnNodes(ev->res);
            break;
        case RM_EV_SWEEP:
            repairOnLookup(ev->ctx, ev->res);
            break;
        case RM_EV_CLAIM:
            repairOnClaim(ev->ctx, ev->res);
            break;
        case RM_EV_DRAIN:
            drainOnLookup(ev->ctx, ev->res);
            break;
        case RM_EV_MOVED:
            rmOnMoved(&ev->repl);
            break;
    }
    free(ev);
}

static void *rmMain(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&rm.lock);
    while (!rm.stop) {
        ObjList todo;
        objListInit(&todo);
        objListSpliceBack(&todo, &rm.events);
        pthread_mutex_unlock(&rm.lock);
        ObjListLink *l;
        while ((l = objListPopFront(&todo)) != NULL)
            rmDispatch(objListEntry(l, RmEv, link));
        int64_t now = utilMonoUs();
        if (now - rm.nodesAtUs >= (int64_t)rm.cfg.heartbeatMs * 1000)
            rmAskNodes();
        placeTick(now);
        repairTick(now);
        drainTick(now);
        pthread_mutex_lock(&rm.lock);
        if (!objListEmpty(&rm.events) || rm.stop)
            continue;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += RM_TICK_MS * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&rm.wake, &rm.lock, &ts);
    }
    pthread_mutex_unlock(&rm.lock);
    return NULL;
}

int replicaStart(const ReplicaConfig *cfg)
{
    if (rm.running) {
        errno = EBUSY;
        return -1;
    }
    rm.cfg = *cfg;
    if (rm.cfg.heartbeatMs <= 0)
        rm.cfg.heartbeatMs = 1000;
    objListInit(&rm.events);
    objListInit(&rm.places);
    rm.stop = 0;
    rm.haveNodes = 0;
    rm.nodesAsked = 0;
    rm.nodesAtUs = 0;
    memset(&rm.drain, 0, sizeof(rm.drain));
    if (pthread_create(&rm.thread, NULL, rmMain, NULL) != 0) {
        errno = EAGAIN;
        return -1;
    }
    rm.running = 1;
    return 0;
}

/* Free the events still queued (after the thread has stopped). Answers of
 * requests still out come later to a stopped manager: the directory and
 * the engine stop after it and answer what they hold then (see stop order
 * in module/redis/remote.c), so their events are only freed here. */
static void rmDropEvents(void)
{
    ObjListLink *l;

    while ((l = objListPopFront(&rm.events)) != NULL) {
        RmEv *ev = objListEntry(l, RmEv, link);
        if (ev->res)
            dirResultFree(ev->res);
        free(ev);
    }
}

void replicaStop(void)
{
    if (!rm.running)
        return;
    pthread_mutex_lock(&rm.lock);
    rm.stop = 1;
    pthread_cond_signal(&rm.wake);
    pthread_mutex_unlock(&rm.lock);
    pthread_join(rm.thread, NULL);
    rm.running = 0;
    placeDropAll();
    repairDropAll();
    drainDropAll();
    rmDropEvents();
    free(rm.nodes);
    rm.nodes = NULL;
    rm.nNodes = 0;
}

void replicaConfigure(int repairIntervalMs, int repairConcurrency)
{
    pthread_mutex_lock(&rm.lock);
    rm.cfg.repairIntervalMs = repairIntervalMs;
    rm.cfg.repairConcurrency = repairConcurrency;
    pthread_mutex_unlock(&rm.lock);
}
