/*
 * fetch.c - the requesting side of OBJ.FETCH, on the engine thread.
 *
 * A Transfer pulls one object: directory lookup -> a *created* local object
 * of the published size -> FETCH to one live location -> the payload lands
 * straight in the object (from the connection's stream, or by RDMA reads) ->
 * size and checksum verified -> sealed as a replica and published. Any
 * failure of an attempt moves on to the next location; when none is left,
 * or when every requester has given up (timeout, disconnect), the created
 * object is aborted so nothing partial stays behind. Every OBJ.FETCH asking
 * for an id while its transfer runs waits on that same transfer.
 *
 * With a FROM hint the transfer first asks the hinted node, without a
 * directory lookup: over a connection to it that is already up, or to the
 * address the engine remembers from earlier directory answers (one node
 * lookup when it has none). The object is created when the owner's DATA or
 * RNDV arrives, from the size it carries, and verified against the checksum
 * it carries. Any failure of that attempt gives the object back and turns
 * the transfer into an ordinary one: directory lookup, then the locations.
 *
 * Spreading the load: the locations are tried in a random order, so that
 * many nodes fetching one object do not all ask the first. A fetch with a
 * directory answer says it may go elsewhere or come back (FETCHR with
 * BUSY_OK), and a holder whose upload slots are taken, one of them by this
 * very object, answers BUSY. A BUSY that names a relay ("relay <name>", a
 * node still receiving the object) is followed: the transfer asks that
 * node with PARTIAL_OK and takes its relay stream (PARTs as the relay's
 * bytes land; over RDMA one PART or RPART per request, then it asks
 * again). A stream that brings nothing for FETCH_RELAY_STALL_US loses its
 * connection. Once every holder has answered BUSY without a relay, the
 * transfer waits a tick and asks the directory again. Past
 * FETCH_WAIT_MAX_US of that, or close to a requester's deadline, the
 * holders are asked without the flag.
 *
 * Resuming: an attempt that fails mid-object leaves the bytes that landed
 * in place (a stream's payload, or READ chunks completed in order); the
 * next attempt asks for the rest only (FETCHR with an offset), and the
 * whole object's checksum is then taken in one pass at the end
 * (docs/cluster.md, "Broadcast").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fetch.h"
#include "common/util.h"
#include "store/checksum.h"

typedef enum XferState {
    XFER_LOOKUP = 0, /* waiting for the directory */
    XFER_HINT_NODE,  /* waiting for the directory's address of the hinted node */
    XFER_CONNECTING, /* waiting for conn to be READY, or for room in its window */
    XFER_REQUESTED,  /* FETCH sent */
    XFER_RECEIVING,  /* payload streaming into the object */
    XFER_READING,    /* RDMA reads outstanding */
    XFER_WAITING,    /* every holder was busy: asks the directory again at retryAtUs */
    XFER_RELAY_NODE  /* waiting for the directory's address of the relay a holder named */
} XferState;

/* Relays a transfer follows from one directory answer before it stops
 * following (a broadcast's relays form chains about as long as the number
 * of nodes that started at once), and how long a relay stream may go
 * without a byte before the transfer gives it up and goes on elsewhere. */
#define FETCH_RELAY_HOPS     64
#define FETCH_RELAY_STALL_US (8LL * 1000 * 1000)

/* How long a transfer keeps coming back to busy holders before it insists,
 * and how close to a requester's deadline it stops doing so. */
#define FETCH_WAIT_MAX_US    (30LL * 1000 * 1000)
#define FETCH_WAIT_MARGIN_US (2LL * 1000 * 1000)

/* One requester of a transfer: item idx of req. */
typedef struct XferWaiter {
    FetchReq *req;
    size_t idx;
} XferWaiter;

/* One object being pulled from another node, shared by every OBJ.FETCH that
 * asked for it while it runs. */
typedef struct Transfer {
    uint64_t xid; /* reqId on the wire */
    char *id;
    size_t idLen;
    FetchVia via;
    XferState state;
    DirResult *dir;
    size_t nextLoc;  /* next location in dir to try */
    ObjEntry *entry; /* the created local object, NULL until allocated */
    Conn *conn;      /* the connection of the current attempt */
    int tp;          /* TP_* of the current attempt */
    int attempts;
    /* While RDMA reads are in flight (XFER_READING): the token their
     * completion must carry. A fresh one per attempt, never reused, so a
     * completion from an earlier attempt or another connection cannot
     * finish this one. 0 when no reads are outstanding. */
    uint64_t readToken;
    /* Why the attempt failed while its reads were in flight (an ERROR from
     * the peer): acted on once the NIC has let go of the object. */
    char failAfterReads[160];
    int cancelled; /* no requester left: finish quietly */
    /* Resuming: the payload's first `landed` bytes are in the object; the
     * current attempt asked for the bytes from reqFrom on. */
    uint64_t landed, reqFrom;
    int sawBusy;           /* a holder of this pass over the locations answered BUSY */
    int insist;            /* waited long enough for busy holders: ask without BUSY_OK */
    int64_t retryAtUs;     /* XFER_WAITING: when to ask the directory again */
    uint64_t expect;       /* payload bytes the current answer carries */
    int partial;           /* the attempt is a relay stream: its answers are PARTs */
    int askedPartial;      /* the request on the wire said PARTIAL_OK (a relay may answer) */
    int ranged;            /* the reads in flight are an RPART's range (XFER_READING) */
    int again;             /* the request being sent asks the same peer for the rest */
    int64_t progressUs;    /* relay stream: when a byte last landed */
    uint64_t progressMark; /* relay stream: how far it had got then */
    int relayed;           /* bytes from a relay are in the object */
    int noRelay;           /* a copy through relays failed its checksum: complete holders only */
    int relayHops;         /* relays followed since the last directory answer */
    char relay[OBJ_WIRE_NAME_MAX + 1]; /* XFER_RELAY_NODE: whose address is awaited */
    int64_t startUs;
    uint64_t remoteChecksum;
    /* Why the payload being drained is not taken (the holder sent another
     * generation than the directory's): the attempt fails with it once the
     * payload has been read into nowhere. "" otherwise. */
    char drainWhy[160];
    /* The FROM node while the hinted attempt runs; "" once it is over (or
     * there was none): dir is NULL until then. */
    char hint[OBJ_WIRE_NAME_MAX + 1];
    char lastErr[160];
    XferWaiter *waiters;
    size_t nWaiters, capWaiters;
    ObjListLink link; /* in fs.xfers */
} Transfer;

/* The requesting side's state (engine thread only). */
static struct {
    ObjList xfers; /* Transfer.link, newest first */
    ObjList live;  /* FetchReq.link: submitted, not yet finished, newest first */
    uint64_t nextXid;
    uint64_t nextReadToken;
    uint64_t rng; /* xorshift state for the order of locations; 0 until seeded */
} fs = {.xfers = {&fs.xfers, &fs.xfers}, .live = {&fs.live, &fs.live}};

/* The first transfer, and the one after x; NULL at the end. A walk that
 * changes the list stops (or starts again) right after. */
static Transfer *xferFirst(void)
{
    ObjListLink *l = objListFirst(&fs.xfers);
    return l ? objListEntry(l, Transfer, link) : NULL;
}

static Transfer *xferNext(const Transfer *x)
{
    return x->link.next == &fs.xfers ? NULL : objListEntry(x->link.next, Transfer, link);
}

/* ---- requests ---------------------------------------------------------------------- */

static void reqUnlinkLive(FetchReq *r)
{
    objListUnlink(&r->link);
}

/* Record the outcome of item idx; the request is handed back when it was
 * the last one. After that the engine never touches r again. */
static void reqItemDone(FetchReq *r, size_t idx, const char *err)
{
    FetchItem *it = &r->items[idx];

    if (it->done)
        return;
    it->done = 1;
    snprintf(it->err, sizeof(it->err), "%s", err);
    if (--r->remaining == 0) {
        reqUnlinkLive(r);
        engineConfig()->onFetchDone(r);
    }
}

/* ---- transfers ------------------------------------------------------------------------ */

static Transfer *xferByXid(uint64_t xid)
{
    for (Transfer *x = xferFirst(); x; x = xferNext(x))
        if (x->xid == xid)
            return x;
    return NULL;
}

static Transfer *xferById(const char *id, size_t idLen)
{
    for (Transfer *x = xferFirst(); x; x = xferNext(x))
        if (!x->cancelled && x->idLen == idLen && !memcmp(x->id, id, idLen))
            return x;
    return NULL;
}

static int xferAttach(Transfer *x, FetchReq *r, size_t idx)
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

static void xferUnlink(Transfer *x)
{
    objListUnlink(&x->link);
}

static void xferFree(Transfer *x);

/* Forget a cancelled transfer whose answer has been drained (or will never
 * come): its object was aborted when it was cancelled. */
static void xferDrop(Transfer *x)
{
    xferUnlink(x);
    xferFree(x);
}

static void xferFree(Transfer *x)
{
    if (x->dir)
        dirResultFree(x->dir);
    free(x->waiters);
    free(x->id);
    free(x);
}

/* Give back the created object of x, if it still has one. */
static void xferAbortEntry(Transfer *x)
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

/* Finish x: tell every waiter (err "" = success), unlink and free it. */
static void xferComplete(Transfer *x, const char *err)
{
    xferUnlink(x);
    for (size_t i = 0; i < x->nWaiters; i++)
        reqItemDone(x->waiters[i].req, x->waiters[i].idx, err);
    xferFree(x);
}

static void xferFail(Transfer *x, const char *err)
{
    xferAbortEntry(x);
    engineStatsBegin();
    engineTpStats(x->tp)->failures++;
    engineStatsEnd();
    xferComplete(x, err);
}

static void xferTryNext(Transfer *x);

/* The hinted attempt of x failed (why): give back the object it created,
 * forget the node's cached address when forget is set (it led to no
 * session), and carry on as an ordinary fetch with a directory lookup.
 * Only called once nothing of the attempt is in flight. */
static void hintFallback(Transfer *x, const char *why, int forget)
{
    engineLog("verbose", "fetch '%.*s': FROM '%s' did not work (%s): asking the directory",
              (int)(x->idLen > 64 ? 64 : x->idLen), x->id, x->hint, why);
    if (forget)
        engineNodeForget(x->hint);
    x->hint[0] = '\0';
    x->conn = NULL;
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
    uint64_t got = c->ops->payloadLanded ? c->ops->payloadLanded(c, x->expect) : 0;

    engineStatsBegin()->downloadedBytes += got;
    engineStatsEnd();
    x->landed = x->reqFrom + got;
}

static void sendDone(Conn *c, uint64_t reqId);

/* The current attempt failed: remember why and try the next location (or,
 * for the hinted attempt, fall back to the directory). */
static void attemptFailed(Transfer *x, const char *why)
{
    x->drainWhy[0] = '\0';
    if (x->partial && x->conn) /* a relay stream: tell the relay to stop it */
        sendDone(x->conn, x->xid);
    if (x->hint[0]) {
        x->landed = 0; /* the hinted object is given back */
        hintFallback(x, why, x->conn && x->conn->state == CONN_CLOSED);
        return;
    }
    snprintf(x->lastErr, sizeof(x->lastErr), "%.159s", why);
    engineLog("verbose", "fetch '%.*s': %s", (int)(x->idLen > 64 ? 64 : x->idLen), x->id, why);
    if (x->conn && x->state == XFER_RECEIVING && x->entry) /* keep what landed */
        xferNoteLanded(x, x->conn);
    x->conn = NULL;
    x->partial = 0;
    x->again = 0;
    x->state = XFER_LOOKUP;
    xferTryNext(x);
}

/* How many requests of ours are on the wire on c (answer not yet complete). */
static int connOutstanding(const Conn *c)
{
    int n = 0;

    for (const Transfer *x = xferFirst(); x; x = xferNext(x))
        if (x->conn == c &&
            (x->state == XFER_REQUESTED || x->state == XFER_RECEIVING || x->state == XFER_READING))
            n++;
    return n;
}

/* Send x's FETCH on x->conn, or leave x waiting (XFER_CONNECTING) while the
 * connection's window is full; fetchKick sends it when room opens. */
static void sendFetch(Transfer *x)
{
    WireMsg m = {.h = {.type = WIRE_FETCH, .reqId = x->xid}};

    if (connOutstanding(x->conn) >= ENGINE_CONN_FETCH_WINDOW) {
        x->state = XFER_CONNECTING;
        return;
    }
    m.u.fetch.id = x->id;
    m.u.fetch.idLen = (uint16_t)x->idLen;
    /* A resume: the answer is a stream's DATA or PART, or an RPART on RDMA. */
    x->reqFrom = x->entry ? x->landed : 0;
    x->askedPartial = 0;
    if (x->reqFrom > 0 || (!x->insist && x->dir)) {
        m.h.type = WIRE_FETCHR;
        m.u.fetch.offset = x->reqFrom;
        /* Asking the peer that is serving it for the rest: no redirect. */
        m.u.fetch.flags = x->insist || x->again ? 0 : WIRE_FETCHR_BUSY_OK;
        if (!x->insist && !x->noRelay && x->entry) {
            m.u.fetch.flags |= WIRE_FETCHR_PARTIAL_OK;
            x->askedPartial = 1;
        }
    }
    if (x->reqFrom > 0 && !x->again) { /* a new attempt that goes on from where the last got */
        engineStatsBegin()->rangeResumes++;
        engineStatsEnd();
    }
    x->again = 0;
    x->state = XFER_REQUESTED;
    if (engineSend(x->conn, &m, NULL, 0, NULL) == -1)
        attemptFailed(x, "UNAVAILABLE cannot send FETCH");
}

/* Send the FETCHes waiting for c, as far as its window allows: when c comes
 * up, and whenever one of its requests ends. */
static void fetchKick(Conn *c)
{
    int again = 1;

    /* sendFetch may fail over and change the list: restart the walk each time. */
    while (again && c->state == CONN_READY && connOutstanding(c) < ENGINE_CONN_FETCH_WINDOW) {
        again = 0;
        for (Transfer *x = xferFirst(); x; x = xferNext(x)) {
            if (x->conn == c && x->state == XFER_CONNECTING) {
                sendFetch(x);
                again = 1;
                break;
            }
        }
    }
}

/* Which transport reaches node for x->via? Returns TP_* or -1 (why in err). */
static int pickTransport(const Transfer *x, const DirNode *n, char *err, size_t errLen)
{
    int rdmaOk = engineTransport(TP_RDMA) && (n->features & OBJ_FEAT_RDMA) && n->rdmaPort > 0;
    int tcpOk = engineTransport(TP_TCP) && n->tcpPort > 0;

    if (x->via == FETCH_VIA_RDMA) {
        if (rdmaOk)
            return TP_RDMA;
        snprintf(err, errLen, "NOTSUPPORTED node '%.64s' cannot be reached over RDMA", n->name);
        return -1;
    }
    if (x->via == FETCH_VIA_AUTO && rdmaOk)
        return TP_RDMA;
    if (tcpOk)
        return TP_TCP;
    if (!engineTransport(TP_TCP))
        snprintf(err, errLen, "NOTSUPPORTED TCP transfers are off on this node (transfer-port 0)");
    else
        snprintf(err, errLen, "NOTSUPPORTED node '%.64s' has no TCP transfer port", n->name);
    return -1;
}

/* Make c (transport tp) the connection of x's attempt and send its FETCH,
 * now or once c is up. */
static void xferUseConn(Transfer *x, Conn *c, int tp)
{
    x->conn = c;
    x->tp = tp;
    if (c->state == CONN_READY)
        sendFetch(x);
    else
        x->state = XFER_CONNECTING;
}

static int xferMayWait(const Transfer *x);
static int relayConnect(Transfer *x, const DirNode *n);

static void xferTryNext(Transfer *x)
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
static void shuffleLocations(DirResult *res)
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
static void hintStart(Transfer *x, int mayAsk)
{
    const DirNode *n = engineNodeCached(x->hint);
    char err[160];
    int tp = -1;
    Conn *c = hintOpenConn(x, &tp);

    if (!c && n) {
        tp = pickTransport(x, n, err, sizeof(err));
        c = tp < 0 ? NULL : engineConnFor(n, tp, err, sizeof(err));
        if (!c) {
            hintFallback(x, err, tp >= 0);
            return;
        }
    }
    if (c) {
        xferUseConn(x, c, tp);
        return;
    }
    if (!mayAsk) {
        hintFallback(x, "no address for the node", 0);
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
static int hintCreate(Transfer *x, uint64_t size, uint64_t metaSize)
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
static void xferReceived(Transfer *x, const uint64_t *landedSum)
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
    if ((x->dir && sum != x->dir->checksum) || sum != x->remoteChecksum) {
        char why[160];
        snprintf(why, sizeof(why), "CHECKSUM mismatch in the copy from '%.64s'",
                 x->conn ? x->conn->peerName : "?");
        x->landed = 0; /* which bytes are wrong is unknown: all of them go again */
        if (x->relayed)
            x->noRelay = 1; /* a relay chain went wrong: complete holders from now on */
        x->relayed = 0;
        x->state = XFER_LOOKUP; /* the payload is over: nothing to note as landed */
        attemptFailed(x, why);
        return;
    }
    /* Publish under the table lock, as eviction unpublishes under it: once
     * the lock is dropped an eviction or OBJ.DEL may free the sealed replica
     * (so e must not be read after it), and its unpublish must be queued
     * after this publish, not before. */
    objTableLock(t);
    objTableSeal(t, e, ENGINE_HOLDER_XFER(x->xid), sum);
    objTableMarkReplica(t, e);
    dirPublish(x->id, x->idLen, e->dataSize, e->metaSize, sum, DIR_COPY_REPLICA);
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
            reqItemDone(r, idx, "OOM out of memory");
        return;
    }
    objTableLock(t);
    ObjEntry *e = objTableFind(t, it->id, it->idLen);
    int state = e ? (int)e->state : -1;
    objTableUnlock(t);
    if (state == OBJ_SEALED) {
        engineStatsBegin()->localHits++;
        engineStatsEnd();
        reqItemDone(r, idx, "");
        return;
    }
    if (state == OBJ_CREATED) {
        reqItemDone(r, idx, "WRONGSTATE the object is being created on this node");
        return;
    }
    if (r->via == FETCH_VIA_RDMA && !engineTransport(TP_RDMA)) {
        reqItemDone(r, idx, "NOTSUPPORTED RDMA is not enabled on this node");
        return;
    }
    x = calloc(1, sizeof(*x));
    if (!x || !(x->id = malloc(it->idLen)) || xferAttach(x, r, idx) == -1) {
        if (x)
            xferFree(x);
        reqItemDone(r, idx, "OOM out of memory");
        return;
    }
    memcpy(x->id, it->id, it->idLen);
    x->idLen = it->idLen;
    x->xid = ++fs.nextXid;
    x->via = r->via;
    x->startUs = utilMonoUs();
    x->state = XFER_LOOKUP;
    x->tp = r->via == FETCH_VIA_RDMA ? TP_RDMA : TP_TCP;
    objListPushFront(&fs.xfers, &x->link);
    if (r->from[0] && strcmp(r->from, engineConfig()->nodeName)) {
        snprintf(x->hint, sizeof(x->hint), "%s", r->from);
        hintStart(x, 1);
        return;
    }
    engineLookup(x->xid, x->id, x->idLen);
}

static void fetchSubmit(FetchReq *r)
{
    engineStatsBegin()->fetchRequests++;
    engineStatsEnd();
    r->remaining = r->n;
    objListPushFront(&fs.live, &r->link);
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
    shuffleLocations(res);
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
    /* hintStart and hintFallback change x's state: restart the walk each time. */
    while (again) {
        again = 0;
        for (Transfer *x = xferFirst(); x; x = xferNext(x)) {
            if (x->state == XFER_RELAY_NODE && !strcmp(x->relay, res->id)) {
                const DirNode *n = engineNodeCached(x->relay);
                x->relay[0] = '\0';
                x->state = XFER_LOOKUP;
                if (res->status != DIR_FOUND || !n || relayConnect(x, n) == -1)
                    xferTryNext(x); /* the holders it has not asked yet, or wait */
                again = 1;
                break;
            }
            if (x->state != XFER_HINT_NODE || strcmp(x->hint, res->id))
                continue;
            if (res->status == DIR_FOUND)
                hintStart(x, 0);
            else
                hintFallback(x, res->err, 0);
            again = 1;
            break;
        }
    }
}

static void fetchOnConnReady(Conn *c)
{
    fetchKick(c);
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
            if (x->conn == c && x->state != XFER_READING) {
                if (x->cancelled)
                    xferDrop(x); /* its answer will not come now */
                else
                    attemptFailed(x, why);
                again = 1;
                break;
            }
        }
    }
}

/* The payload bytes answer m on c carries: a PART its len (checked against
 * its object by the decoder); a DATA to a request from offset `from` the
 * bytes of an object of m's sizes from there on (a holder answers a FETCHR
 * at o with size + metaSize - o bytes, a FETCH or o = 0 with all). Every
 * read of an answer's payload, kept or drained, takes its length from here,
 * so the stream the connection's fetches share stays in step. Returns 0
 * with *len set, or -1 when a DATA announces less than that offset (no
 * holder answers so: the stream cannot be kept in step). */
static int answerCarries(const Conn *c, const WireMsg *m, uint64_t from, uint64_t *len)
{
    uint64_t total = m->u.data.size + m->u.data.metaSize;

    if (m->h.type == WIRE_PART) {
        *len = m->u.data.len;
        return 0;
    }
    if (total < from) {
        engineLog("warning", "%s: DATA of %llu bytes for a request from offset %llu", c->desc,
                  (unsigned long long)total, (unsigned long long)from);
        return -1;
    }
    *len = total - from;
    return 0;
}

/* DATA: the payload follows the frame in the connection's stream (both
 * transports are streams; the frame itself never carries it). */
static int fetchOnData(Conn *c, const WireMsg *m)
{
    Transfer *x = xferByXid(m->h.reqId);
    uint64_t carried;

    if (x && x->cancelled && x->conn == c && x->state == XFER_REQUESTED) {
        /* The answer to a cancelled fetch: read its payload into nowhere, so
         * the stream the other fetches share stays in step. */
        if (answerCarries(c, m, x->reqFrom, &carried) == -1)
            return -1;
        if (carried == 0) {
            xferDrop(x);
            return 0;
        }
        x->state = XFER_RECEIVING;
        return c->ops->recvPayload(c, NULL, carried);
    }
    if (!x || x->conn != c || x->state != XFER_REQUESTED || (!x->entry && !x->hint[0])) {
        /* its payload follows in the stream: we cannot skip it safely */
        engineLog("warning", "%s: DATA for an unknown request %llu", c->desc,
                  (unsigned long long)m->h.reqId);
        return -1;
    }
    if (answerCarries(c, m, x->reqFrom, &carried) == -1)
        return -1;
    if (!x->entry && hintCreate(x, m->u.data.size, m->u.data.metaSize) == -1) {
        if (carried > 0) { /* drain it; fetchOnPayloadDone falls back */
            x->state = XFER_RECEIVING;
            return c->ops->recvPayload(c, NULL, carried);
        }
        attemptFailed(x, "OOM cannot create the object the hinted node announced");
        return 0;
    }
    ObjEntry *e = x->entry;
    if (m->u.data.size != e->dataSize || m->u.data.metaSize != e->metaSize ||
        (x->dir && m->u.data.checksum != x->dir->checksum)) {
        /* Another generation than the directory's (a stale copy listed):
         * read its payload into nowhere, so the stream the other fetches
         * share stays in step, and try the next holder. */
        char why[sizeof(x->drainWhy)];
        snprintf(why, sizeof(why), "PROTOCOL '%.64s' sent a different %s than the directory",
                 c->peerName,
                 m->u.data.size != e->dataSize || m->u.data.metaSize != e->metaSize ? "size"
                                                                                    : "checksum");
        if (carried == 0) {
            attemptFailed(x, why);
            return 0;
        }
        memcpy(x->drainWhy, why, sizeof(why));
        x->state = XFER_RECEIVING;
        return c->ops->recvPayload(c, NULL, carried);
    }
    x->remoteChecksum = m->u.data.checksum;
    uint8_t *dst = engineConfig()->arenaBase + e->offset;
    if (carried == 0) {
        xferReceived(x, NULL);
        return 0;
    }
    x->state = XFER_RECEIVING;
    x->expect = carried;
    return c->ops->recvPayload(c, dst + x->reqFrom, x->expect);
}

/* PART: the next piece of a relay stream, from x->landed on (the first
 * from the offset asked). A PART nobody waits for (a stream given up or
 * cancelled while its PARTs were on their way) is read into nowhere. */
static int fetchOnPart(Conn *c, const WireMsg *m)
{
    Transfer *x = xferByXid(m->h.reqId);
    uint64_t carried;

    answerCarries(c, m, 0, &carried); /* a PART: can't fail */
    if (x && x->cancelled && x->conn == c && x->state == XFER_REQUESTED) {
        x->state = XFER_RECEIVING; /* drained, then dropped */
        return c->ops->recvPayload(c, NULL, carried);
    }
    if (!x || x->conn != c || x->state != XFER_REQUESTED || !x->entry)
        return c->ops->recvPayload(c, NULL, carried);
    ObjEntry *e = x->entry;
    uint64_t at = x->partial ? x->landed : x->reqFrom;
    if (m->u.data.size != e->dataSize || m->u.data.metaSize != e->metaSize ||
        m->u.data.offset != at || (x->dir && m->u.data.checksum != x->dir->checksum)) {
        attemptFailed(x, "PROTOCOL the relay sent another object or range than asked for");
        return -1;
    }
    x->remoteChecksum = m->u.data.checksum;
    x->state = XFER_RECEIVING;
    if (!x->partial)
        x->progressUs = utilMonoUs();
    x->partial = 1;
    x->relayed = 1;
    x->reqFrom = at;
    x->expect = carried;
    return c->ops->recvPayload(c, engineConfig()->arenaBase + e->offset + at, x->expect);
}

/* Does a relay answer one request on c with one PART (RDMA, where a
 * round trip is cheap and a large range goes by RPART), rather than with a
 * stream of them? serve.c decides the same way. */
static int relayAnswersOnce(const Conn *c)
{
    return c->ops->readRemote != NULL;
}

static void fetchOnPayloadDone(Conn *c)
{
    for (Transfer *x = xferFirst(); x; x = xferNext(x)) {
        if (x->conn == c && x->state == XFER_RECEIVING) {
            if (x->cancelled)
                xferDrop(x); /* drained */
            else if (x->drainWhy[0]) {
                char why[sizeof(x->drainWhy)];
                memcpy(why, x->drainWhy, sizeof(why));
                attemptFailed(x, why);
            } else if (!x->entry) /* drained: the hinted answer had no room here */
                attemptFailed(x, "OOM cannot create the object the hinted node announced");
            else {
                /* A resumed payload's hash covers its tail only: one pass then. */
                uint64_t sum, total = x->entry->dataSize + x->entry->metaSize;
                int landed =
                    !x->reqFrom && c->ops->payloadHash && c->ops->payloadHash(c, &sum) == 0;
                engineStatsBegin()->downloadedBytes += x->expect;
                engineStatsEnd();
                x->landed = x->reqFrom + x->expect;
                if (x->partial && x->landed < total && relayAnswersOnce(c)) {
                    x->partial = 0; /* ask the relay for more */
                    x->again = 1;
                    sendFetch(x);
                } else if (x->partial && x->landed < total) { /* the relay's next PART follows */
                    x->state = XFER_REQUESTED;
                    x->progressUs = utilMonoUs();
                } else {
                    x->partial = 0;
                    xferReceived(x, landed && x->landed == total ? &sum : NULL);
                }
            }
            break;
        }
    }
    fetchKick(c);
}

/* Tell the owner it may drop the pin of reqId. */
static void sendDone(Conn *c, uint64_t reqId)
{
    WireMsg d = {.h = {.type = WIRE_DONE, .reqId = reqId}};
    if (c && c->state == CONN_READY)
        engineSend(c, &d, NULL, 0, NULL);
}

static int fetchOnRndv(Conn *c, const WireMsg *m)
{
    Transfer *x = xferByXid(m->h.reqId);

    if (x && x->cancelled && x->conn == c && x->state == XFER_REQUESTED) {
        /* The answer to a cancelled fetch: nothing follows an RNDV in the
         * stream, so release the owner's pin and forget the transfer (kept
         * listed, it would hold its place in c's window for good). */
        sendDone(c, m->h.reqId);
        xferDrop(x);
        return 0;
    }
    if (!x || x->conn != c || x->state != XFER_REQUESTED || (!x->entry && !x->hint[0]) ||
        !c->ops->readRemote) {
        sendDone(c, m->h.reqId); /* not ours (any more): release the owner's pin */
        return 0;
    }
    if (!x->entry && hintCreate(x, m->u.data.size, m->u.data.metaSize) == -1) {
        sendDone(c, m->h.reqId);
        attemptFailed(x, "OOM cannot create the object the hinted node announced");
        return 0;
    }
    ObjEntry *e = x->entry;
    if (m->u.data.size != e->dataSize || m->u.data.metaSize != e->metaSize ||
        (x->dir && m->u.data.checksum != x->dir->checksum)) {
        char why[160];
        snprintf(why, sizeof(why), "PROTOCOL '%.64s' sent a different %s than the directory",
                 c->peerName,
                 m->u.data.size != e->dataSize || m->u.data.metaSize != e->metaSize ? "size"
                                                                                    : "checksum");
        sendDone(c, m->h.reqId);
        attemptFailed(x, why);
        return 0;
    }
    x->remoteChecksum = m->u.data.checksum;
    x->state = XFER_READING;
    x->readToken = ++fs.nextReadToken;
    x->failAfterReads[0] = '\0';
    if (c->ops->readRemote(c, engineConfig()->arenaBase + e->offset, e->dataSize + e->metaSize,
                           m->u.data.addr, m->u.data.rkey, (void *)(uintptr_t)x->readToken) == -1) {
        x->readToken = 0;
        sendDone(c, m->h.reqId);
        attemptFailed(x, "UNAVAILABLE cannot post RDMA reads");
    }
    return 0;
}

/* RPART: a range of the object to read by rendezvous (a relay's landed
 * bytes, or an owner's rest of a resumed object): READ it into the object
 * at its offset; readsFinished then says DONE and asks for the rest. */
static int fetchOnRpart(Conn *c, const WireMsg *m)
{
    Transfer *x = xferByXid(m->h.reqId);

    if (x && x->cancelled && x->conn == c && x->state == XFER_REQUESTED) {
        sendDone(c, m->h.reqId); /* nothing follows an RPART: forget the transfer */
        xferDrop(x);
        return 0;
    }
    if (!x || x->conn != c || x->state != XFER_REQUESTED || !x->entry || !c->ops->readRemote) {
        sendDone(c, m->h.reqId); /* not ours (any more): release the peer's key */
        return 0;
    }
    ObjEntry *e = x->entry;
    if (m->u.data.size != e->dataSize || m->u.data.metaSize != e->metaSize ||
        m->u.data.offset != x->reqFrom || (x->dir && m->u.data.checksum != x->dir->checksum)) {
        sendDone(c, m->h.reqId);
        attemptFailed(x, "PROTOCOL the peer offered another object or range than asked for");
        return 0;
    }
    x->remoteChecksum = m->u.data.checksum;
    x->state = XFER_READING;
    x->readToken = ++fs.nextReadToken;
    x->failAfterReads[0] = '\0';
    x->ranged = 1;
    x->relayed = 1; /* the peer may be a relay: a bad chain means complete holders only */
    x->expect = m->u.data.len;
    uint8_t *dst = engineConfig()->arenaBase + e->offset + m->u.data.offset;
    if (c->ops->readRemote(c, dst, m->u.data.len, m->u.data.addr, m->u.data.rkey,
                           (void *)(uintptr_t)x->readToken) == -1) {
        x->readToken = 0;
        x->ranged = 0;
        sendDone(c, m->h.reqId);
        attemptFailed(x, "UNAVAILABLE cannot post RDMA reads");
    }
    return 0;
}

/* The transfer whose reads on c carry token, or NULL (a stale completion:
 * its attempt is over). */
static Transfer *xferByReadToken(const Conn *c, uint64_t token)
{
    for (Transfer *x = xferFirst(); x; x = xferNext(x))
        if (x->readToken == token && x->conn == c && x->state == XFER_READING)
            return x;
    return NULL;
}

/* The reads of x's attempt on c (cookie) ended short: keep the prefix that
 * landed, in order from where they started (a later attempt asks for the
 * rest), and count it. */
static void readsNoteLanded(Transfer *x, Conn *c, void *cookie)
{
    uint64_t got = c->ops->readLanded ? c->ops->readLanded(c, cookie) : 0;

    engineStatsBegin()->downloadedBytes += got;
    engineStatsEnd();
    x->landed = x->reqFrom + got;
    x->ranged = 0;
}

/* An RPART's range is in the object (its DONE is sent): ask the same peer
 * for the rest, or, at the end, take the whole object's checksum in one
 * pass (the reads' own covers their range only) and seal it. */
static void rangeRead(Transfer *x)
{
    uint64_t total = x->entry->dataSize + x->entry->metaSize;

    engineStatsBegin()->downloadedBytes += x->expect;
    engineStatsEnd();
    x->ranged = 0;
    x->landed = x->reqFrom + x->expect;
    if (x->landed < total) {
        x->again = 1; /* the same attempt goes on */
        sendFetch(x);
        return;
    }
    xferReceived(x, NULL);
}

/* Every READ of the attempt has completed or been flushed: only now may the
 * object be verified (against sum, the checksum the transport took as the
 * bytes landed, when it has one), handed on, or given back. */
static void readsFinished(Conn *c, void *cookie, int ok, const uint64_t *sum)
{
    Transfer *x = xferByReadToken(c, (uint64_t)(uintptr_t)cookie);

    if (!x)
        return;
    x->readToken = 0;
    sendDone(c, x->xid);
    if (x->cancelled) { /* every requester left while the NIC was writing */
        xferAbortEntry(x);
        xferUnlink(x);
        xferFree(x);
        return;
    }
    if (x->failAfterReads[0] || !ok) {
        char why[160];
        snprintf(why, sizeof(why), "%s",
                 x->failAfterReads[0] ? x->failAfterReads : "UNAVAILABLE RDMA read failed");
        readsNoteLanded(x, c, cookie);
        attemptFailed(x, why);
        return;
    }
    if (x->ranged) {
        rangeRead(x);
        return;
    }
    engineStatsBegin()->downloadedBytes += x->entry->dataSize + x->entry->metaSize;
    engineStatsEnd();
    xferReceived(x, sum);
}

/* Ask relay node n for the rest of x, over the transport x would use for
 * any holder (RDMA first, unless the fetch says otherwise). Returns 0, or
 * -1 (then x is left as it was, without a connection). */
static int relayConnect(Transfer *x, const DirNode *n)
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

/* A holder answered BUSY, naming in its text ("relay <name>") a node it is
 * sending the object to: ask that node for what it has landed. Returns 1
 * when x goes there (now, or once the node's address is known), 0 when it
 * does not (no relay named, relays ruled out, or too many hops). */
static int relayFollow(Transfer *x, const WireMsg *m)
{
    static const char tag[] = "relay ";
    size_t n = m->u.error.textLen, tl = sizeof(tag) - 1;

    if (x->noRelay || !x->entry || x->relayHops >= FETCH_RELAY_HOPS || n <= tl ||
        n - tl > OBJ_WIRE_NAME_MAX || memcmp(m->u.error.text, tag, tl))
        return 0;
    char name[OBJ_WIRE_NAME_MAX + 1];
    memcpy(name, m->u.error.text + tl, n - tl);
    name[n - tl] = '\0';
    if (!strcmp(name, engineConfig()->nodeName))
        return 0;
    x->relayHops++;
    x->conn = NULL;
    const DirNode *node = engineNodeCached(name);
    if (node)
        return relayConnect(x, node) == 0;
    snprintf(x->relay, sizeof(x->relay), "%s", name);
    x->state = XFER_RELAY_NODE;
    engineLookupNode(name);
    return 1;
}

static int fetchOnError(Conn *c, const WireMsg *m)
{
    Transfer *x = xferByXid(m->h.reqId);
    char why[192];

    if (!x || x->conn != c)
        return 0;
    snprintf(why, sizeof(why), "%s from '%s': %.*s", wireErrName(m->u.error.code), c->peerName,
             (int)m->u.error.textLen, m->u.error.text);
    if (x->state == XFER_READING) {
        /* The NIC may still be writing into the object (cancelled or not):
         * nothing is freed or tried elsewhere until every READ has completed
         * or been flushed; fetchOnReadDone acts on the error then. */
        if (!x->failAfterReads[0])
            snprintf(x->failAfterReads, sizeof(x->failAfterReads), "%.159s", why);
        engineLog("warning", "%s: ERROR for request %llu while its RDMA reads are in flight",
                  c->desc, (unsigned long long)m->h.reqId);
        return 0;
    }
    if (x->cancelled) { /* nothing follows an ERROR: nothing to drain */
        xferDrop(x);
        return 0;
    }
    if (m->u.error.code == WIRE_ERR_BUSY) {
        x->sawBusy = 1;
        engineStatsBegin()->redirected++;
        engineStatsEnd();
        if (relayFollow(x, m))
            return 0;
    } else if (m->u.error.code == WIRE_ERR_NOTSEALED && x->askedPartial) {
        /* A relay ended its stream (its own transfer gave the object up, or
         * stalled): that says nothing of the object, so it is not the
         * fetch's answer. As after a BUSY, the transfer comes back to the
         * holders (waits and asks the directory again, or insists) and goes
         * on from the offset it reached. */
        x->sawBusy = 1;
    }
    attemptFailed(x, why);
    return 0;
}

static void fetchOnReadDone(Conn *c, void *cookie, int ok, const uint64_t *sum)
{
    readsFinished(c, cookie, ok, sum);
    fetchKick(c);
}

/* DATA, RNDV or ERROR: an answer to one of our requests, which may also
 * open room in c's window for a waiting one. */
static int fetchOnAnswer(Conn *c, const WireMsg *m)
{
    int rc;

    if (m->h.type == WIRE_DATA)
        rc = fetchOnData(c, m);
    else if (m->h.type == WIRE_PART)
        rc = fetchOnPart(c, m);
    else if (m->h.type == WIRE_RNDV)
        rc = fetchOnRndv(c, m);
    else if (m->h.type == WIRE_RPART)
        rc = fetchOnRpart(c, m);
    else
        rc = fetchOnError(c, m);
    if (rc == 0)
        fetchKick(c);
    return rc;
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
    Conn *c = x->conn;
    if (c && x->partial) /* a relay stream: no more of it; PARTs on their way are drained */
        sendDone(c, x->xid);
    int between = x->partial && x->state == XFER_REQUESTED; /* no payload due: nothing to drain */
    if (!between && c && c->ops->recvPayload &&
        (x->state == XFER_REQUESTED || x->state == XFER_RECEIVING)) {
        if (x->state == XFER_RECEIVING)
            c->ops->discardPayload(c); /* before the object goes away */
        xferAbortEntry(x);
        return; /* fetchOnData/OnRndv/OnPayloadDone/OnError/OnConnClosed finish it */
    }
    xferUnlink(x);
    x->conn = NULL;
    xferAbortEntry(x);
    xferFree(x);
    if (c)
        fetchKick(c); /* its place in c's window is free */
}

static void fetchCancel(uint64_t seq, int timedOut)
{
    FetchReq *r = NULL;
    ObjListLink *l;

    objListForEach(&fs.live, l) {
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
    reqUnlinkLive(r);
    engineConfig()->onFetchDone(r);
}

static void fetchShutdown(void)
{
    for (ObjListLink *l; (l = objListFirst(&fs.live));)
        fetchCancel(objListEntry(l, FetchReq, link)->seq, 0);
    for (Transfer *x; (x = xferFirst());) {
        xferUnlink(x);
        xferAbortEntry(x);
        xferFree(x);
    }
}

/* How many bytes of x's object have landed, in order from its start: what
 * earlier answers brought, and what has landed of the current one (a
 * stream's payload, or the READ chunks of a rendezvous or an RPART). */
static uint64_t xferLandedNow(const Transfer *x)
{
    Conn *c = x->conn;

    if (x->state == XFER_RECEIVING && c && c->ops->payloadLanded && !x->drainWhy[0])
        return x->reqFrom + c->ops->payloadLanded(c, x->expect);
    if (x->state == XFER_READING && c && c->ops->readLanded && !x->failAfterReads[0])
        return x->reqFrom + c->ops->readLanded(c, (void *)(uintptr_t)x->readToken);
    return x->landed;
}

int fetchPartial(const char *id, size_t idLen, ObjEntry **e, uint64_t *landed, uint64_t *checksum)
{
    Transfer *x = xferById(id, idLen);

    if (!x || !x->entry || x->hint[0])
        return -1;
    *e = x->entry;
    *landed = xferLandedNow(x);
    *checksum = x->dir ? x->dir->checksum : x->remoteChecksum;
    return x->dir ? 0 : -1; /* without the directory's checksum there is nothing to vouch */
}

const char *fetchSource(const char *id, size_t idLen)
{
    Transfer *x = xferById(id, idLen);

    return x && x->conn && x->conn->peerName[0] ? x->conn->peerName : NULL;
}

/* Has x's relay stream gone FETCH_RELAY_STALL_US without a byte? (The relay
 * is stopped, or so is everything above it.) */
static int relayStalled(Transfer *x, int64_t now)
{
    if (!x->partial || !x->conn || (x->state != XFER_REQUESTED && x->state != XFER_RECEIVING))
        return 0;
    uint64_t mark = xferLandedNow(x);
    if (mark != x->progressMark) {
        x->progressMark = mark;
        x->progressUs = now;
        return 0;
    }
    return now - x->progressUs > FETCH_RELAY_STALL_US;
}

/* Transfers that waited for busy holders ask the directory again; a relay
 * stream that stalled loses its connection, and every transfer on it goes
 * on elsewhere from where it got. */
static void fetchTick(void)
{
    int64_t now = utilMonoUs();

    for (Transfer *x = xferFirst(); x; x = xferNext(x)) {
        if (relayStalled(x, now)) {
            engineLog("warning", "%s: relay stream stalled for %lld s: closing", x->conn->desc,
                      (long long)(FETCH_RELAY_STALL_US / 1000000));
            x->conn->ops->close(x->conn, "relay stream stalled");
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
