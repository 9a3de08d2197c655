/*
 * fetch.c - the requesting side of OBJ.FETCH, on the engine thread: the
 * engine's entry points (fetchSide). A request starts or joins one shared
 * transfer per object; directory and node answers, connections coming up
 * or going away, cancellation and the tick move the transfers on. The
 * transfers themselves are fetchxfer.c's, the peer's answers fetchanswer.c's
 * (their state: fetchint.h). How a fetch runs, hop by hop:
 * docs/architecture.md, "An OBJ.FETCH, hop by hop"; how it resumes and
 * follows relays: docs/cluster.md, "Broadcast".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fetchint.h"
#include "common/util.h"

/* The requests submitted, not yet finished (FetchReq.link), newest first. */
static ObjList liveReqs = {&liveReqs, &liveReqs};

/* ---- entry points from engine.c ------------------------------------------------------- */

/* Start or join the transfer of item idx of r. */
static void submitItem(FetchReq *r, size_t idx)
{
    FetchItem *it = &r->items[idx];
    ObjTable *t = engineConfig()->table;
    Transfer *x = xferById(it->id, it->idLen);

    if (x) {
        engineStatsBegin()->shared++;
        engineStatsEnd();
        if (xferAttach(x, r, idx) == -1)
            xferItemDone(r, idx, "OOM out of memory");
        return;
    }
    objTableLock(t);
    ObjEntry *e = objTableFind(t, it->id, it->idLen);
    int state = e ? (int)e->state : -1;
    objTableUnlock(t);
    if (state == OBJ_SEALED) {
        engineStatsBegin()->localHits++;
        engineStatsEnd();
        xferItemDone(r, idx, "");
        return;
    }
    if (state == OBJ_CREATED) {
        xferItemDone(r, idx, "WRONGSTATE the object is being created on this node");
        return;
    }
    if (r->via == FETCH_VIA_RDMA && !engineTransport(TP_RDMA)) {
        xferItemDone(r, idx, "NOTSUPPORTED RDMA is not enabled on this node");
        return;
    }
    x = calloc(1, sizeof(*x));
    if (!x || !(x->id = malloc(it->idLen)) || xferAttach(x, r, idx) == -1) {
        if (x)
            xferFree(x);
        xferItemDone(r, idx, "OOM out of memory");
        return;
    }
    memcpy(x->id, it->id, it->idLen);
    x->idLen = it->idLen;
    x->via = r->via;
    x->startUs = utilMonoUs();
    x->state = XFER_LOOKUP;
    x->tp = r->via == FETCH_VIA_RDMA ? TP_RDMA : TP_TCP;
    xferAdd(x);
    if (r->from[0] && strcmp(r->from, engineConfig()->nodeName)) {
        snprintf(x->hint, sizeof(x->hint), "%s", r->from);
        xferHintStart(x, 1);
        return;
    }
    engineLookup(x->xid, x->id, x->idLen);
}

static void fetchSubmit(FetchReq *r)
{
    if (!r->done) { /* an engine-internal fetch is no OBJ.FETCH */
        engineStatsBegin()->fetchRequests++;
        engineStatsEnd();
    }
    r->remaining = r->n;
    objListPushFront(&liveReqs, &r->link);
    /* Only the last item can complete r and hand it back: read n first. */
    size_t n = r->n;
    for (size_t i = 0; i < n; i++)
        submitItem(r, i);
}

static void fetchOnDirResult(uint64_t xid, DirResult *res)
{
    Transfer *x = xferByXid(xid);
    ObjTable *t = engineConfig()->table;
    char err[192];

    if (!x || x->state != XFER_LOOKUP || x->dir) {
        dirResultFree(res);
        return;
    }
    if (res->status != DIR_FOUND) {
        snprintf(err, sizeof(err), "%s %s",
                 res->status == DIR_NOTFOUND ? "NOTFOUND" : "UNAVAILABLE", res->err);
        dirResultFree(res);
        xferFail(x, err);
        return;
    }
    x->dir = res;
    x->relayHops = 0;
    xferShuffle(res);
    if (x->entry) { /* asked again after busy holders: the object is there */
        if (x->entry->dataSize != res->size || x->entry->metaSize != res->metaSize) {
            xferFail(x, "WRONGSTATE the object changed size in the directory");
            return;
        }
        xferTryNext(x);
        return;
    }
    objTableLock(t);
    ObjEntry *e;
    ObjStatus st = objTableCreateEntry(t, x->id, x->idLen, res->size, res->metaSize,
                                       ENGINE_HOLDER_XFER(x->xid), &e);
    if (st == OBJ_ST_EXISTS) {
        e = objTableFind(t, x->id, x->idLen);
        int sealed = e && e->state == OBJ_SEALED;
        objTableUnlock(t);
        xferComplete(x, sealed ? "" : "WRONGSTATE the object is being created on this node");
        return;
    }
    objTableUnlock(t);
    if (st == OBJ_ST_LIMIT) {
        snprintf(err, sizeof(err), "OOM object limit reached on this node (max-objects)");
        xferFail(x, err);
        return;
    }
    if (st != OBJ_ST_OK) {
        snprintf(err, sizeof(err), "OOM no room for %llu bytes in the arena",
                 (unsigned long long)(res->size + res->metaSize));
        xferFail(x, err);
        return;
    }
    x->entry = e;
    xferTryNext(x);
}

/* The directory's answer about a hinted node: every transfer waiting for
 * that node's address goes on (the engine has cached it) or falls back. */
static void fetchOnNodeResult(const DirResult *res)
{
    int again = 1;

    if (!res->id)
        return;
    /* xferHintStart and xferHintFallback change x's state: restart the walk each time. */
    while (again) {
        again = 0;
        for (Transfer *x = xferFirst(); x; x = xferNext(x)) {
            if (x->state == XFER_RELAY_NODE && !strcmp(x->relay, res->id)) {
                const DirNode *n = engineNodeCached(x->relay);
                x->relay[0] = '\0';
                x->state = XFER_LOOKUP;
                if (res->status != DIR_FOUND || !n || xferRelayConnect(x, n) == -1)
                    xferTryNext(x); /* the holders it has not asked yet, or wait */
                again = 1;
                break;
            }
            if (x->state != XFER_HINT_NODE || strcmp(x->hint, res->id))
                continue;
            if (res->status == DIR_FOUND)
                xferHintStart(x, 0);
            else
                xferHintFallback(x, res->err, 0);
            again = 1;
            break;
        }
    }
}

static void fetchOnConnReady(Conn *c)
{
    xferKick(c);
}

static void fetchOnConnClosed(Conn *c)
{
    char why[256];
    int again = 1;

    if (c->failWhy[0])
        snprintf(why, sizeof(why), "UNAVAILABLE no session with '%.64s': %.80s", c->peerName,
                 c->failWhy);
    else
        snprintf(why, sizeof(why), "UNAVAILABLE lost the connection to '%.64s'", c->peerName);
    /* A failover may complete or free transfers: restart the walk each time. */
    while (again) {
        again = 0;
        for (Transfer *x = xferFirst(); x; x = xferNext(x)) {
            if (x->at.conn == c && x->state != XFER_READING) {
                if (x->cancelled)
                    xferDrop(x); /* its answer will not come now */
                else
                    xferAttemptFailed(x, why);
                again = 1;
                break;
            }
        }
    }
}

/* Drop r from x's waiters; returns the number left. */
static size_t xferDetach(Transfer *x, FetchReq *r)
{
    size_t j = 0;

    for (size_t i = 0; i < x->nWaiters; i++)
        if (x->waiters[i].req != r)
            x->waiters[j++] = x->waiters[i];
    x->nWaiters = j;
    return j;
}

/* Nobody wants x any more: stop it without leaving anything behind. On a
 * stream whose answer is on its way (or arriving), x stays listed without its
 * object until that answer has been read and thrown away: closing the
 * connection instead would fail every other fetch sharing it, so one
 * client's timeout would cost everyone fetching from that peer. */
static void xferCancel(Transfer *x)
{
    engineStatsBegin()->cancelled++;
    engineStatsEnd();
    x->cancelled = 1;
    if (x->state == XFER_READING)
        return; /* memory is in use by the NIC: fetchOnReadDone finishes it */
    Conn *c = x->at.conn;
    if (c && x->at.partial) /* a relay stream: no more of it; PARTs on their way are drained */
        xferSendDone(c, x->xid);
    int between =
        x->at.partial && x->state == XFER_REQUESTED; /* no payload due: nothing to drain */
    if (!between && c && c->ops->recvPayload &&
        (x->state == XFER_REQUESTED || x->state == XFER_RECEIVING)) {
        if (x->state == XFER_RECEIVING)
            c->ops->discardPayload(c); /* before the object goes away */
        xferAbortEntry(x);
        return; /* fetchOnData/OnRndv/OnPayloadDone/OnError/OnConnClosed finish it */
    }
    xferUnlink(x);
    x->at.conn = NULL;
    xferAbortEntry(x);
    xferFree(x);
    if (c)
        xferKick(c); /* its place in c's window is free */
}

static void fetchCancel(uint64_t seq, int timedOut)
{
    FetchReq *r = NULL;
    ObjListLink *l;

    objListForEach(&liveReqs, l) {
        if (objListEntry(l, FetchReq, link)->seq == seq) {
            r = objListEntry(l, FetchReq, link);
            break;
        }
    }
    if (!r)
        return; /* already finished */
    r->cancelled = 1;
    r->timedOut = timedOut;
    int again = 1;
    while (again) {
        again = 0;
        for (Transfer *x = xferFirst(); x; x = xferNext(x)) {
            size_t before = x->nWaiters;
            if (xferDetach(x, r) == 0 && before > 0 && !x->cancelled) {
                xferCancel(x);
                again = 1;
                break;
            }
        }
    }
    for (size_t i = 0; i < r->n; i++) {
        if (!r->items[i].done) {
            r->items[i].done = 1;
            snprintf(r->items[i].err, sizeof(r->items[i].err), "TIMEOUT the fetch was cancelled");
        }
    }
    r->remaining = 0;
    objListUnlink(&r->link);
    engineFetchDone(r);
}

static void fetchShutdown(void)
{
    for (ObjListLink *l; (l = objListFirst(&liveReqs));)
        fetchCancel(objListEntry(l, FetchReq, link)->seq, 0);
    for (Transfer *x; (x = xferFirst());) {
        xferUnlink(x);
        xferAbortEntry(x);
        xferFree(x);
    }
}

/* Has x's relay stream gone FETCH_RELAY_STALL_US without a byte? (The relay
 * is stopped, or so is everything above it.) */
static int relayStalled(Transfer *x, int64_t now)
{
    if (!x->at.partial || !x->at.conn || (x->state != XFER_REQUESTED && x->state != XFER_RECEIVING))
        return 0;
    uint64_t mark = xferLandedNow(x);
    if (mark != x->at.progressMark) {
        x->at.progressMark = mark;
        x->at.progressUs = now;
        return 0;
    }
    return now - x->at.progressUs > FETCH_RELAY_STALL_US;
}

/* Transfers that waited for busy holders ask the directory again; a relay
 * stream that stalled loses its connection, and every transfer on it goes
 * on elsewhere from where it got. */
static void fetchTick(void)
{
    int64_t now = utilMonoUs();

    for (Transfer *x = xferFirst(); x; x = xferNext(x)) {
        if (relayStalled(x, now)) {
            engineLog("warning", "%s: relay stream stalled for %lld s: closing", x->at.conn->desc,
                      (long long)(FETCH_RELAY_STALL_US / 1000000));
            x->at.conn->ops->close(x->at.conn, "relay stream stalled");
            return; /* the list changed; the next tick looks again */
        }
        if (x->state != XFER_WAITING || now < x->retryAtUs)
            continue;
        if (x->dir)
            dirResultFree(x->dir);
        x->dir = NULL;
        x->nextLoc = 0;
        x->sawBusy = 0;
        x->state = XFER_LOOKUP;
        engineLookup(x->xid, x->id, x->idLen);
    }
}

/* ---- the requesting side's handler table ---------------------------------------------- */

const EngineSide fetchSide = {
    .name = "fetch",
    .submit = fetchSubmit,
    .cancel = fetchCancel,
    .dirResult = fetchOnDirResult,
    .nodeResult = fetchOnNodeResult,
    .onFrame = {[WIRE_DATA] = fetchOnAnswer,
                [WIRE_RNDV] = fetchOnAnswer,
                [WIRE_ERROR] = fetchOnAnswer,
                [WIRE_PART] = fetchOnAnswer,
                [WIRE_RPART] = fetchOnAnswer},
    .connReady = fetchOnConnReady,
    .connClosed = fetchOnConnClosed,
    .payloadDone = fetchOnPayloadDone,
    .readDone = fetchOnReadDone,
    .tick = fetchTick,
    .shutdown = fetchShutdown,
};
