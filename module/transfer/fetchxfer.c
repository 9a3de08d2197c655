/*
 * fetchxfer.c - the requesting side's transfers and their attempts: the list
 * of transfers, the choice of a location and transport, the FETCH on the
 * wire and the window it waits for, failover, the hinted (FROM) attempt,
 * and the end of a transfer (verify, seal, publish, answer). The answers
 * that drive an attempt are fetchanswer.c's; the engine's entry points,
 * fetch.c's. How a fetch runs: docs/architecture.md, "An OBJ.FETCH, hop by
 * hop"; docs/cluster.md, "Broadcast".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fetchint.h"
#include "common/util.h"
#include "store/checksum.h"

/* The transfers (engine thread only). */
static struct {
    ObjList xfers; /* Transfer.link, newest first */
    uint64_t nextXid;
    uint64_t nextReadToken;
    uint64_t rng; /* xorshift state for the order of locations; 0 until seeded */
} fs = {.xfers = {&fs.xfers, &fs.xfers}};

Transfer *xferFirst(void)
{
    ObjListLink *l = objListFirst(&fs.xfers);
    return l ? objListEntry(l, Transfer, link) : NULL;
}

Transfer *xferNext(const Transfer *x)
{
    return x->link.next == &fs.xfers ? NULL : objListEntry(x->link.next, Transfer, link);
}

void xferAdd(Transfer *x)
{
    x->xid = ++fs.nextXid;
    objListPushFront(&fs.xfers, &x->link);
}

uint64_t xferNewReadToken(void)
{
    return ++fs.nextReadToken;
}

void xferAttemptReset(Transfer *x)
{
    memset(&x->at, 0, sizeof(x->at));
}

/* ---- requests ---------------------------------------------------------------------- */

static void reqUnlinkLive(FetchReq *r)
{
    objListUnlink(&r->link);
}

void xferItemDone(FetchReq *r, size_t idx, const char *err)
{
    FetchItem *it = &r->items[idx];

    if (it->done)
        return;
    it->done = 1;
    snprintf(it->err, sizeof(it->err), "%s", err);
    if (--r->remaining == 0) {
        reqUnlinkLive(r);
        engineFetchDone(r);
    }
}

/* ---- transfers ------------------------------------------------------------------------ */

Transfer *xferByXid(uint64_t xid)
{
    for (Transfer *x = xferFirst(); x; x = xferNext(x))
        if (x->xid == xid)
            return x;
    return NULL;
}

Transfer *xferById(const char *id, size_t idLen)
{
    for (Transfer *x = xferFirst(); x; x = xferNext(x))
        if (!x->cancelled && x->idLen == idLen && !memcmp(x->id, id, idLen))
            return x;
    return NULL;
}

int xferAttach(Transfer *x, FetchReq *r, size_t idx)
{
    if (x->nWaiters == x->capWaiters) {
        size_t ncap = x->capWaiters ? x->capWaiters * 2 : 4;
        XferWaiter *nw = realloc(x->waiters, ncap * sizeof(*nw));
        if (!nw)
            return -1;
        x->waiters = nw;
        x->capWaiters = ncap;
    }
    x->waiters[x->nWaiters++] = (XferWaiter){r, idx};
    return 0;
}

void xferUnlink(Transfer *x)
{
    objListUnlink(&x->link);
}

void xferDrop(Transfer *x)
{
    xferUnlink(x);
    xferFree(x);
}

void xferFree(Transfer *x)
{
    if (x->dir)
        dirResultFree(x->dir);
    free(x->waiters);
    free(x->id);
    free(x);
}

void xferAbortEntry(Transfer *x)
{
    if (!x->entry)
        return;
    objTableLock(engineConfig()->table);
    objTableAbort(engineConfig()->table, x->entry, ENGINE_HOLDER_XFER(x->xid));
    objTableUnlock(engineConfig()->table);
    x->entry = NULL;
    if (engineConfig()->onChanged) /* local OBJ.GET waiters on the created object */
        engineConfig()->onChanged(x->id, x->idLen);
}

void xferComplete(Transfer *x, const char *err)
{
    xferUnlink(x);
    for (size_t i = 0; i < x->nWaiters; i++)
        xferItemDone(x->waiters[i].req, x->waiters[i].idx, err);
    xferFree(x);
}

void xferFail(Transfer *x, const char *err)
{
    xferAbortEntry(x);
    engineStatsBegin();
    engineTpStats(x->tp)->failures++;
    engineStatsEnd();
    xferComplete(x, err);
}

/* The hinted attempt of x failed (why): give back the object it created,
 * forget the node's cached address when forget is set (it led to no
 * session), and carry on as an ordinary fetch with a directory lookup.
 * Only called once nothing of the attempt is in flight. */
void xferHintFallback(Transfer *x, const char *why, int forget)
{
    engineLog("verbose", "fetch '%.*s': FROM '%s' did not work (%s): asking the directory",
              (int)(x->idLen > 64 ? 64 : x->idLen), x->id, x->hint, why);
    if (forget)
        engineNodeForget(x->hint);
    x->hint[0] = '\0';
    xferAttemptReset(x);
    xferAbortEntry(x);
    x->state = XFER_LOOKUP;
    engineStatsBegin()->hintFallbacks++;
    engineStatsEnd();
    engineLookup(x->xid, x->id, x->idLen);
}

/* x's payload was being received on c when its attempt ended: remember how
 * far it got (a later attempt asks for the rest), and count it. */
static void xferNoteLanded(Transfer *x, Conn *c)
{
    uint64_t got = c->ops->payloadLanded ? c->ops->payloadLanded(c, x->at.expect) : 0;

    engineStatsBegin()->downloadedBytes += got;
    engineStatsEnd();
    x->landed = x->at.reqFrom + got;
}

/* The current attempt failed: remember why and try the next location (or,
 * for the hinted attempt, fall back to the directory). */
void xferAttemptFailed(Transfer *x, const char *why)
{
    if (x->at.partial && x->at.conn) /* a relay stream: tell the relay to stop it */
        xferSendDone(x->at.conn, x->xid);
    if (x->hint[0]) {
        x->landed = 0; /* the hinted object is given back */
        xferHintFallback(x, why, x->at.conn && x->at.conn->state == CONN_CLOSED);
        return;
    }
    snprintf(x->lastErr, sizeof(x->lastErr), "%.159s", why);
    engineLog("verbose", "fetch '%.*s': %s", (int)(x->idLen > 64 ? 64 : x->idLen), x->id, why);
    if (x->at.conn && x->state == XFER_RECEIVING && x->entry) /* keep what landed */
        xferNoteLanded(x, x->at.conn);
    xferAttemptReset(x);
    x->state = XFER_LOOKUP;
    xferTryNext(x);
}

/* How many requests of ours are on the wire on c (answer not yet complete). */
static int connOutstanding(const Conn *c)
{
    int n = 0;

    for (const Transfer *x = xferFirst(); x; x = xferNext(x))
        if (x->at.conn == c &&
            (x->state == XFER_REQUESTED || x->state == XFER_RECEIVING || x->state == XFER_READING))
            n++;
    return n;
}

/* Send x's FETCH on x->at.conn, or leave x waiting (XFER_CONNECTING) while
 * the connection's window is full; xferKick sends it when room opens. */
void xferSendFetch(Transfer *x)
{
    WireMsg m = {.h = {.type = WIRE_FETCH, .reqId = x->xid}};

    if (connOutstanding(x->at.conn) >= ENGINE_CONN_FETCH_WINDOW) {
        x->state = XFER_CONNECTING;
        return;
    }
    m.u.fetch.id = x->id;
    m.u.fetch.idLen = (uint16_t)x->idLen;
    /* A resume: the answer is a stream's DATA or PART, or an RPART on RDMA. */
    x->at.reqFrom = x->entry ? x->landed : 0;
    x->at.askedPartial = 0;
    if (x->at.reqFrom > 0 || (!x->insist && x->dir)) {
        m.h.type = WIRE_FETCHR;
        m.u.fetch.offset = x->at.reqFrom;
        /* Asking the peer that is serving it for the rest: no redirect. */
        m.u.fetch.flags = x->insist || x->at.again ? 0 : WIRE_FETCHR_BUSY_OK;
        if (!x->insist && !x->noRelay && x->entry) {
            m.u.fetch.flags |= WIRE_FETCHR_PARTIAL_OK;
            x->at.askedPartial = 1;
        }
    }
    if (x->at.reqFrom > 0 &&
        !x->at.again) { /* a new attempt that goes on from where the last got */
        engineStatsBegin()->rangeResumes++;
        engineStatsEnd();
    }
    x->at.again = 0;
    x->state = XFER_REQUESTED;
    if (engineSend(x->at.conn, &m, NULL, 0, NULL) == -1)
        xferAttemptFailed(x, "UNAVAILABLE cannot send FETCH");
}

/* Send the FETCHes waiting for c, as far as its window allows: when c comes
 * up, and whenever one of its requests ends. */
void xferKick(Conn *c)
{
    int again = 1;

    /* xferSendFetch may fail over and change the list: restart the walk each time. */
    while (again && c->state == CONN_READY && connOutstanding(c) < ENGINE_CONN_FETCH_WINDOW) {
        again = 0;
        for (Transfer *x = xferFirst(); x; x = xferNext(x)) {
            if (x->at.conn == c && x->state == XFER_CONNECTING) {
                xferSendFetch(x);
                again = 1;
                break;
            }
        }
    }
}

/* Which transport reaches node for x->via? Returns TP_* or -1 (why in err). */
static int pickTransport(const Transfer *x, const DirNode *n, char *err, size_t errLen)
{
    return engineTransportFor(n, x->via, err, errLen);
}

void xferUseConn(Transfer *x, Conn *c, int tp)
{
    x->at.conn = c;
    x->tp = tp;
    if (c->state == CONN_READY)
        xferSendFetch(x);
    else
        x->state = XFER_CONNECTING;
}

static int xferMayWait(const Transfer *x);

void xferTryNext(Transfer *x)
{
    char err[160];

    while (x->nextLoc < x->dir->count) {
        const DirNode *n = &x->dir->nodes[x->nextLoc++];
        if (!strcmp(n->name, engineConfig()->nodeName))
            continue;
        int tp = pickTransport(x, n, err, sizeof(err));
        Conn *c = tp < 0 ? NULL : engineConnFor(n, tp, err, sizeof(err));
        if (!c) {
            snprintf(x->lastErr, sizeof(x->lastErr), "%.159s", err);
            continue;
        }
        engineStatsBegin();
        if (x->attempts++ > 0)
            engineTpStats(tp)->failovers++;
        engineStatsEnd();
        xferUseConn(x, c, tp);
        return;
    }
    if (x->sawBusy && !x->insist) { /* every holder is busy: wait, or make one serve */
        if (xferMayWait(x)) {
            x->state = XFER_WAITING;
            x->retryAtUs = utilMonoUs() + 50 * 1000;
            return;
        }
        x->insist = 1;
        x->nextLoc = 0;
        xferTryNext(x);
        return;
    }
    xferFail(x, x->lastErr[0] ? x->lastErr : "NOTFOUND no live node holds the object");
}

/* May x wait for busy holders a while longer? Not past FETCH_WAIT_MAX_US
 * since it started, nor when a requester's deadline is near. */
static int xferMayWait(const Transfer *x)
{
    int64_t now = utilMonoUs();

    if (now - x->startUs > FETCH_WAIT_MAX_US)
        return 0;
    for (size_t i = 0; i < x->nWaiters; i++) {
        const FetchReq *r = x->waiters[i].req;
        if (r->deadlineUs && r->deadlineUs - now < FETCH_WAIT_MARGIN_US)
            return 0;
    }
    return 1;
}

/* A random number for the order of locations (engine thread only). */
static uint64_t fetchRandom(void)
{
    if (!fs.rng)
        fs.rng = (uint64_t)utilMonoUs() * 0x9E3779B97F4A7C15ULL ^ (uint64_t)utilWallMs() ^
                 ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&fs;
    if (!fs.rng)
        fs.rng = 1;
    fs.rng ^= fs.rng << 13;
    fs.rng ^= fs.rng >> 7;
    fs.rng ^= fs.rng << 17;
    return fs.rng;
}

/* Put the locations of res in a random order (Fisher-Yates), so that the
 * nodes fetching one object at once ask different holders first. */
void xferShuffle(DirResult *res)
{
    for (size_t i = res->count; i > 1; i--) {
        size_t j = (size_t)(fetchRandom() % i);
        DirNode tmp = res->nodes[i - 1];
        res->nodes[i - 1] = res->nodes[j];
        res->nodes[j] = tmp;
    }
}

/* A connection to the hinted node that is already open, on a transport
 * x->via allows (RDMA first for auto), or NULL; *tp is set with it. */
static Conn *hintOpenConn(const Transfer *x, int *tp)
{
    static const int order[] = {TP_RDMA, TP_TCP};

    for (int i = 0; i < 2; i++) {
        int t = order[i];
        if ((t == TP_RDMA && x->via == FETCH_VIA_TCP) ||
            (t == TP_TCP && x->via == FETCH_VIA_RDMA) || !engineTransport(t))
            continue;
        Conn *c = engineConnExisting(x->hint, t);
        if (c && c->state != CONN_CLOSED) {
            *tp = t;
            return c;
        }
    }
    return NULL;
}

/* Is a node lookup for x's hint already on its way (asked by another)? */
static int hintNodeAsked(const Transfer *x)
{
    for (const Transfer *y = xferFirst(); y; y = xferNext(y))
        if (y != x && y->state == XFER_HINT_NODE && !strcmp(y->hint, x->hint))
            return 1;
    return 0;
}

/* Start x's hinted attempt: over an open connection to the node, or one to
 * its cached address, or (mayAsk) after asking the directory for that
 * address. Falls back to the directory when none of that works. */
void xferHintStart(Transfer *x, int mayAsk)
{
    const DirNode *n = engineNodeCached(x->hint);
    char err[160];
    int tp = -1;
    Conn *c = hintOpenConn(x, &tp);

    if (!c && n) {
        tp = pickTransport(x, n, err, sizeof(err));
        c = tp < 0 ? NULL : engineConnFor(n, tp, err, sizeof(err));
        if (!c) {
            xferHintFallback(x, err, tp >= 0);
            return;
        }
    }
    if (c) {
        xferUseConn(x, c, tp);
        return;
    }
    if (!mayAsk) {
        xferHintFallback(x, "no address for the node", 0);
        return;
    }
    x->state = XFER_HINT_NODE;
    if (!hintNodeAsked(x))
        engineLookupNode(x->hint);
}

/* The answer of the hinted node arrived (size, metaSize from its DATA or
 * RNDV): create the local object of that size. Returns 0, or -1 when it
 * cannot be created (no room, or an object of that id appeared here); the
 * directory path then sorts it out. */
int xferHintCreate(Transfer *x, uint64_t size, uint64_t metaSize)
{
    ObjTable *t = engineConfig()->table;
    ObjEntry *e;

    objTableLock(t);
    ObjStatus st =
        objTableCreateEntry(t, x->id, x->idLen, size, metaSize, ENGINE_HOLDER_XFER(x->xid), &e);
    objTableUnlock(t);
    if (st != OBJ_ST_OK)
        return -1;
    x->entry = e;
    return 0;
}

/* Have all requesters of x passed their deadlines? Then nobody may be told
 * OK any more, and the copy must not stay behind either. */
static int xferAllExpired(const Transfer *x)
{
    int64_t now = utilMonoUs();

    for (size_t i = 0; i < x->nWaiters; i++) {
        const FetchReq *r = x->waiters[i].req;
        if (!r->deadlineUs || now <= r->deadlineUs)
            return 0;
    }
    return x->nWaiters > 0;
}

/* The payload is in place: verify, seal as a replica, publish, answer.
 * landedSum: the checksum the transport took as the bytes landed, or NULL
 * (then it is computed here, a second pass over the object). */
void xferReceived(Transfer *x, const uint64_t *landedSum)
{
    ObjTable *t = engineConfig()->table;
    ObjEntry *e = x->entry;

    if (xferAllExpired(x)) { /* arrived, but too late for everyone */
        for (size_t i = 0; i < x->nWaiters; i++)
            x->waiters[i].req->timedOut = 1;
        engineStatsBegin()->cancelled++;
        engineStatsEnd();
        xferAbortEntry(x);
        xferComplete(x, "TIMEOUT the fetch did not complete in time");
        return;
    }
    uint64_t total = e->dataSize + e->metaSize;
    uint64_t sum = landedSum ? *landedSum : objChecksum(engineConfig()->arenaBase, e);

    /* Without a directory answer (FROM) the owner's figure is all there is. */
    if ((x->dir && sum != x->dir->checksum) || sum != x->at.remoteChecksum) {
        char why[160];
        snprintf(why, sizeof(why), "CHECKSUM mismatch in the copy from '%.64s'",
                 x->at.conn ? x->at.conn->peerName : "?");
        x->landed = 0; /* which bytes are wrong is unknown: all of them go again */
        if (x->relayed)
            x->noRelay = 1; /* a relay chain went wrong: complete holders from now on */
        x->relayed = 0;
        x->state = XFER_LOOKUP; /* the payload is over: nothing to note as landed */
        xferAttemptFailed(x, why);
        return;
    }
    /* Publish under the table lock, as eviction unpublishes under it: once
     * the lock is dropped an eviction or OBJ.DEL may free the sealed replica
     * (so e must not be read after it), and its unpublish must be queued
     * after this publish, not before. */
    objTableLock(t);
    objTableSeal(t, e, ENGINE_HOLDER_XFER(x->xid), sum);
    objTableMarkReplica(t, e);
    dirPublish(x->id, x->idLen, e->dataSize, e->metaSize, sum, DIR_COPY_REPLICA, 1, NULL);
    objTableUnlock(t);
    x->entry = NULL; /* the table owns it now */
    if (engineConfig()->onChanged)
        engineConfig()->onChanged(x->id, x->idLen);

    uint64_t us = (uint64_t)(utilMonoUs() - x->startUs);
    EngineStats *st = engineStatsBegin();
    EngineTransportStats *ts = engineTpStats(x->tp);
    ts->fetches++;
    ts->bytes += total;
    ts->latencyUsSum += us;
    ts->latencyCount++;
    if (us > ts->latencyUsMax)
        ts->latencyUsMax = us;
    if (x->hint[0])
        st->hintHits++;
    engineStatsEnd();
    xferComplete(x, "");
}

/* Tell the owner it may drop the pin of reqId. */
void xferSendDone(Conn *c, uint64_t reqId)
{
    WireMsg d = {.h = {.type = WIRE_DONE, .reqId = reqId}};
    if (c && c->state == CONN_READY)
        engineSend(c, &d, NULL, 0, NULL);
}

/* Ask relay node n for the rest of x, over the transport x would use for
 * any holder (RDMA first, unless the fetch says otherwise). Returns 0, or
 * -1 (then x is left as it was, without a connection). */
int xferRelayConnect(Transfer *x, const DirNode *n)
{
    char err[160];
    int tp = pickTransport(x, n, err, sizeof(err));
    Conn *c = tp < 0 ? NULL : engineConnFor(n, tp, err, sizeof(err));

    if (!c)
        return -1;
    engineStatsBegin()->relayFollows++;
    engineStatsEnd();
    xferUseConn(x, c, tp);
    return 0;
}

/* How many bytes of x's object have landed, in order from its start: what
 * earlier answers brought, and what has landed of the current one (a
 * stream's payload, or the READ chunks of a rendezvous or an RPART). */
uint64_t xferLandedNow(const Transfer *x)
{
    Conn *c = x->at.conn;

    if (x->state == XFER_RECEIVING && c && c->ops->payloadLanded && !x->at.drainWhy[0])
        return x->at.reqFrom + c->ops->payloadLanded(c, x->at.expect);
    if (x->state == XFER_READING && c && c->ops->readLanded && !x->at.failAfterReads[0])
        return x->at.reqFrom + c->ops->readLanded(c, (void *)(uintptr_t)x->at.readToken);
    return x->landed;
}

int fetchPartial(const char *id, size_t idLen, ObjEntry **e, uint64_t *landed, uint64_t *checksum)
{
    Transfer *x = xferById(id, idLen);

    if (!x || !x->entry || x->hint[0])
        return -1;
    *e = x->entry;
    *landed = xferLandedNow(x);
    *checksum = x->dir ? x->dir->checksum : x->at.remoteChecksum;
    return x->dir ? 0 : -1; /* without the directory's checksum there is nothing to vouch */
}

const char *fetchSource(const char *id, size_t idLen)
{
    Transfer *x = xferById(id, idLen);

    return x && x->at.conn && x->at.conn->peerName[0] ? x->at.conn->peerName : NULL;
}
