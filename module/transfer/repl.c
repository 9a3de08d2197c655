/*
 * repl.c - REPL, both ends, on the engine thread (replSide). Asking: a
 * REPL queued by engineSubmitRepl goes to its target by name (an open
 * connection, the cached address, or one node lookup), and its HELD or
 * ERROR, its deadline or the loss of the connection answers it. Asked: the
 * node may refuse (mayReplicate); else the object is fetched the ordinary
 * way (an engine-internal fetch: directory, relays) unless that generation
 * is sealed here already, then its node makes the copy count
 * (onReplicated) and HELD goes back. How and why: docs/architecture.md
 * ("Wire frames").
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "repl.h"
#include "common/util.h"

/* The reqId of a REPL sent here: its seq with this bit, which the fetch
 * side's reqIds (a counter from 1) never reach, so that an ERROR, which
 * every side handling ERROR sees, belongs to one side only. */
#define REPL_REQID_TAG (1ULL << 62)
/* REPLs this node answers at once; past it, BUSY (a peer's flood of REPLs
 * must not hold unbounded memory). */
#define REPL_IN_MAX 4096

typedef enum ReplOutState {
    REPL_OUT_NODE = 0,   /* waiting for the directory's address of the target */
    REPL_OUT_CONNECTING, /* conn set, not READY yet */
    REPL_OUT_SENT        /* REPL on the wire: waiting for HELD or ERROR */
} ReplOutState;

/* A REPL this node sent (or is about to). */
typedef struct ReplOut {
    ReplReq *r;
    ReplOutState state;
    Conn *conn;       /* CONNECTING and SENT */
    ObjListLink link; /* in outs */
} ReplOut;

/* A REPL this node is answering: its fetch runs, or it is held already. */
typedef struct ReplIn {
    Conn *conn; /* NULL once the connection closed: nothing is sent then */
    uint64_t reqId;
    char peer[OBJ_WIRE_NAME_MAX + 1];
    char id[OBJ_WIRE_ID_MAX];
    size_t idLen;
    uint32_t flags, want;
    uint64_t checksum;
    FetchReq fetch; /* the engine-internal fetch of id (done: replInFetched) */
    FetchItem item;
    ObjListLink link; /* in ins */
} ReplIn;

static ObjList outs = {&outs, &outs}; /* ReplOut.link */
static ObjList ins = {&ins, &ins};    /* ReplIn.link */
static size_t nIns;

/* ---- asking ------------------------------------------------------------------------ */

/* Answer r with err ("" = HELD): the one place onReplDone is called. */
static void replAnswer(ReplReq *r, const char *err)
{
    r->ok = err[0] == '\0';
    snprintf(r->err, sizeof(r->err), "%s", err);
    if (!r->ok) {
        engineStatsBegin()->replFailed++;
        engineStatsEnd();
    }
    if (engineConfig()->onReplDone)
        engineConfig()->onReplDone(r);
}

/* o is over with err ("" = HELD): forget it and answer its request. */
static void replOutFinish(ReplOut *o, const char *err)
{
    ReplReq *r = o->r;

    objListUnlink(&o->link);
    free(o);
    replAnswer(r, err);
}

/* Send o's REPL on o->conn (READY). */
static void replOutSend(ReplOut *o)
{
    const ReplReq *r = o->r;
    WireMsg m = {.h = {.type = WIRE_REPL, .reqId = REPL_REQID_TAG | r->seq}};
    char err[192];

    m.u.repl.flags = r->flags;
    m.u.repl.want = r->want;
    m.u.repl.checksum = r->checksum;
    m.u.repl.id = r->id;
    m.u.repl.idLen = (uint16_t)r->idLen;
    o->state = REPL_OUT_SENT; /* before the send: a failing transport closes later */
    if (engineSend(o->conn, &m, NULL, 0, NULL) == -1) {
        snprintf(err, sizeof(err), "UNAVAILABLE cannot send REPL to '%.64s'", r->target);
        replOutFinish(o, err);
    }
}

/* Ask on c: now if it is up, else once it is (replOnConnReady). */
static void replOutUse(ReplOut *o, Conn *c)
{
    o->conn = c;
    if (c->state == CONN_READY)
        replOutSend(o);
    else
        o->state = REPL_OUT_CONNECTING;
}

/* An open connection to node name (RDMA first), or NULL. */
static Conn *replOpenConn(const char *name)
{
    static const int order[] = {TP_RDMA, TP_TCP};

    for (int i = 0; i < 2; i++) {
        Conn *c = engineTransport(order[i]) ? engineConnExisting(name, order[i]) : NULL;
        if (c && c->state != CONN_CLOSED)
            return c;
    }
    return NULL;
}

/* Reach o's target as a FROM hint does: an open connection, one to its
 * cached address, or (mayAsk) after asking the directory for it. */
static void replOutStart(ReplOut *o, int mayAsk)
{
    const char *target = o->r->target;
    const DirNode *n = engineNodeCached(target);
    Conn *c = replOpenConn(target);
    char why[160], err[192];

    if (!c && n) {
        int tp = engineTransportFor(n, FETCH_VIA_AUTO, why, sizeof(why));
        if (tp < 0) {
            replOutFinish(o, why); /* "NOTSUPPORTED ..." */
            return;
        }
        c = engineConnFor(n, tp, why, sizeof(why));
        if (!c) {
            engineNodeForget(target);
            snprintf(err, sizeof(err), "UNAVAILABLE cannot reach '%.64s': %.90s", target, why);
            replOutFinish(o, err);
            return;
        }
    }
    if (c) {
        replOutUse(o, c);
        return;
    }
    if (!mayAsk) {
        snprintf(err, sizeof(err), "UNAVAILABLE no address for node '%.64s'", target);
        replOutFinish(o, err);
        return;
    }
    o->state = REPL_OUT_NODE;
    engineLookupNode(target);
}

/* Is r a REPL that can be sent? Returns 0, or -1 with err "BADARG ...". */
static int replValid(const ReplReq *r, char *err, size_t errLen)
{
    const char *why = NULL;

    if (!r->target[0] || memchr(r->target, '\0', sizeof(r->target)) == NULL)
        why = "no target node";
    else if (!strcmp(r->target, engineConfig()->nodeName))
        why = "the target is this node";
    else if (r->idLen == 0 || r->idLen > OBJ_WIRE_ID_MAX)
        why = "id length out of range";
    else if (r->want < 1 || r->want > OBJ_WIRE_WANT_MAX)
        why = "want out of range";
    else if (r->flags & ~WIRE_REPL_FLAGS)
        why = "unknown flags";
    if (!why)
        return 0;
    snprintf(err, errLen, "BADARG REPL: %s", why);
    return -1;
}

static void replSubmit(ReplReq *r)
{
    char err[192];
    ReplOut *o;

    engineStatsBegin()->replRequests++;
    engineStatsEnd();
    if (replValid(r, err, sizeof(err)) == -1) {
        replAnswer(r, err);
        return;
    }
    if (r->deadlineUs && utilMonoUs() >= r->deadlineUs) {
        replAnswer(r, "TIMEOUT the REPL's time ran out before it was sent");
        return;
    }
    if (!(o = calloc(1, sizeof(*o)))) {
        replAnswer(r, "OOM out of memory");
        return;
    }
    o->r = r;
    objListPushBack(&outs, &o->link);
    replOutStart(o, 1);
}

/* The REPL of ours on c that reqId names, or NULL. */
static ReplOut *replOutByReqId(const Conn *c, uint64_t reqId)
{
    ObjListLink *l;

    if (!(reqId & REPL_REQID_TAG))
        return NULL;
    objListForEach(&outs, l) {
        ReplOut *o = objListEntry(l, ReplOut, link);
        if (o->state == REPL_OUT_SENT && o->conn == c && (REPL_REQID_TAG | o->r->seq) == reqId)
            return o;
    }
    return NULL;
}

/* HELD: the target holds the copy. One for a REPL already over (its
 * deadline passed) is dropped. */
static int replOnHeld(Conn *c, const WireMsg *m)
{
    ReplOut *o = replOutByReqId(c, m->h.reqId);
    char err[192];

    if (!o)
        return 0;
    if (m->u.held.checksum != o->r->checksum) {
        snprintf(err, sizeof(err), "PROTOCOL '%.64s' holds another generation than asked for",
                 c->peerName);
        replOutFinish(o, err);
        return 0;
    }
    replOutFinish(o, "");
    return 0;
}

/* ERROR: the target refused, or its fetch failed. Others' ERRORs (the
 * fetch side's) are not ours. */
static int replOnError(Conn *c, const WireMsg *m)
{
    ReplOut *o = replOutByReqId(c, m->h.reqId);
    char err[192];

    if (!o)
        return 0;
    snprintf(err, sizeof(err), "%s%s%.*s", wireErrName(m->u.error.code),
             m->u.error.textLen ? " " : "", (int)m->u.error.textLen, m->u.error.text);
    replOutFinish(o, err);
    return 0;
}

static void replOnConnReady(Conn *c)
{
    ObjListLink *l, *next;

    objListForEachSafe(&outs, l, next) {
        ReplOut *o = objListEntry(l, ReplOut, link);
        if (o->state == REPL_OUT_CONNECTING && o->conn == c)
            replOutSend(o);
    }
}

/* The directory's answer about a target's address: every REPL waiting for
 * it goes on or fails. */
static void replOnNodeResult(const DirResult *res)
{
    ObjListLink *l, *next;
    char err[192];

    if (!res->id)
        return;
    objListForEachSafe(&outs, l, next) {
        ReplOut *o = objListEntry(l, ReplOut, link);
        if (o->state != REPL_OUT_NODE || strcmp(o->r->target, res->id))
            continue;
        if (res->status == DIR_FOUND) {
            replOutStart(o, 0);
        } else {
            snprintf(err, sizeof(err), "UNAVAILABLE node '%.64s' cannot be reached: %.80s",
                     o->r->target, res->err);
            replOutFinish(o, err);
        }
    }
}

/* REPLs whose deadline passed fail TIMEOUT (a late answer is dropped). */
static void replOutTick(int64_t now)
{
    ObjListLink *l, *next;
    char err[192];

    objListForEachSafe(&outs, l, next) {
        ReplOut *o = objListEntry(l, ReplOut, link);
        if (o->r->deadlineUs && now >= o->r->deadlineUs) {
            snprintf(err, sizeof(err), "TIMEOUT '%.64s' did not answer the REPL in time",
                     o->r->target);
            replOutFinish(o, err);
        }
    }
}

/* ---- asked ------------------------------------------------------------------------- */

/* Send err (a code word, then the message) as the ERROR answering reqId on c: the code
 * word as the frame's code when the wire has it, else INTERNAL with it all. */
static void replSendError(Conn *c, uint64_t reqId, const char *err)
{
    size_t w = strcspn(err, " ");
    int code = wireErrByName(err, w);
    const char *text = err;

    if (code) {
        text = err + w;
        text += *text == ' ';
    } else {
        code = WIRE_ERR_INTERNAL;
    }
    engineSendError(c, reqId, (WireErr)code, text);
}

/* Is in's object sealed here with the checksum asked for? Returns 1 (with
 * *bytes its size), 0 when it is not here at all or not sealed yet, or -1
 * when this node holds another generation. */
static int replInHeld(const ReplIn *in, uint64_t *bytes)
{
    ObjTable *t = engineConfig()->table;
    int held;

    objTableLock(t);
    ObjEntry *e = objTableFind(t, in->id, in->idLen);
    if (!e || e->state != OBJ_SEALED || e->sumPending) {
        held = 0;
    } else {
        held = e->checksum == in->checksum ? 1 : -1;
        *bytes = e->dataSize + e->metaSize;
    }
    objTableUnlock(t);
    return held;
}

/* in is over with err ("" = the copy is here, checked): make it count and
 * answer HELD, or answer the error; nothing when its connection closed. */
static void replInFinish(ReplIn *in, const char *err)
{
    const EngineConfig *cfg = engineConfig();
    char why[192];

    if (in->conn && !err[0]) {
        why[0] = '\0';
        if (cfg->onReplicated(in->peer, in->id, in->idLen, in->checksum, in->flags, in->want, why,
                              sizeof(why)) == -1)
            err = why[0] ? why : "INTERNAL this node could not make the copy count";
    }
    if (in->conn && !err[0]) {
        WireMsg m = {.h = {.type = WIRE_HELD, .reqId = in->reqId}};
        m.u.held.checksum = in->checksum;
        engineSend(in->conn, &m, NULL, 0, NULL);
        engineStatsBegin()->replServed++;
        engineStatsEnd();
    } else if (in->conn) {
        replSendError(in->conn, in->reqId, err);
    }
    objListUnlink(&in->link);
    nIns--;
    free(in);
}

/* The internal fetch of in's object is over (done hook of its FetchReq). */
static void replInFetched(FetchReq *f)
{
    ReplIn *in = f->doneArg;
    uint64_t bytes = 0;

    if (in->item.err[0]) {
        replInFinish(in, in->item.err);
        return;
    }
    if (replInHeld(in, &bytes) != 1) {
        replInFinish(in, "WRONGSTATE the copy here is another generation than asked for");
        return;
    }
    engineStatsBegin()->replBytes += bytes;
    engineStatsEnd();
    replInFinish(in, "");
}

/* REPL from c (READY: its peer proved the secret): refuse, answer at once
 * (held already), or fetch the object and answer when it is in. */
static int replOnRepl(Conn *c, const WireMsg *m)
{
    const EngineConfig *cfg = engineConfig();
    char err[192];
    uint64_t bytes = 0;
    ReplIn *in;

    err[0] = '\0';
    if (!cfg->onReplicated) {
        replSendError(c, m->h.reqId, "NOTSUPPORTED this node takes no counted copies");
        return 0;
    }
    if (cfg->mayReplicate && cfg->mayReplicate(err, sizeof(err)) == -1) {
        replSendError(c, m->h.reqId, err[0] ? err : "INTERNAL this node takes no copies now");
        return 0;
    }
    if (nIns >= REPL_IN_MAX) {
        engineSendError(c, m->h.reqId, WIRE_ERR_BUSY, "too many copies under way on this node");
        return 0;
    }
    if (!(in = calloc(1, sizeof(*in)))) {
        engineSendError(c, m->h.reqId, WIRE_ERR_OOM, "out of memory");
        return 0;
    }
    *in = (ReplIn){.conn = c,
                   .reqId = m->h.reqId,
                   .idLen = m->u.repl.idLen,
                   .flags = m->u.repl.flags,
                   .want = m->u.repl.want,
                   .checksum = m->u.repl.checksum};
    snprintf(in->peer, sizeof(in->peer), "%s", c->peerName);
    memcpy(in->id, m->u.repl.id, in->idLen);
    objListPushBack(&ins, &in->link);
    nIns++;
    if (replInHeld(in, &bytes) == 1) {
        replInFinish(in, "");
        return 0;
    }
    in->item.id = in->id;
    in->item.idLen = in->idLen;
    in->fetch.via = FETCH_VIA_AUTO;
    in->fetch.n = 1;
    in->fetch.items = &in->item;
    in->fetch.done = replInFetched;
    in->fetch.doneArg = in;
    engineSubmitFetch(&in->fetch);
    return 0;
}

/* ---- both ends ------------------------------------------------------------------- */

static void replOnConnClosed(Conn *c)
{
    ObjListLink *l, *next;
    char err[192];

    objListForEach(&ins, l) { /* their fetches go on; no answer is sent */
        ReplIn *in = objListEntry(l, ReplIn, link);
        if (in->conn == c)
            in->conn = NULL;
    }
    if (c->failWhy[0])
        snprintf(err, sizeof(err), "UNAVAILABLE no session with '%.64s': %.80s", c->peerName,
                 c->failWhy);
    else
        snprintf(err, sizeof(err), "UNAVAILABLE lost the connection to '%.64s'", c->peerName);
    objListForEachSafe(&outs, l, next) {
        ReplOut *o = objListEntry(l, ReplOut, link);
        if (o->conn == c)
            replOutFinish(o, err);
    }
}

static void replTick(void)
{
    replOutTick(utilMonoUs());
}

/* Every REPL still asking fails; those being answered have had their
 * fetches ended by the fetch side's shutdown (which runs first). */
static void replShutdown(void)
{
    for (ObjListLink *l; (l = objListFirst(&outs));)
        replOutFinish(objListEntry(l, ReplOut, link), "UNAVAILABLE the transfer engine stopped");
}

/* ---- the REPL side's handler table --------------------------------------------------- */

const EngineSide replSide = {
    .name = "repl",
    .submitRepl = replSubmit,
    .nodeResult = replOnNodeResult,
    .onFrame = {[WIRE_REPL] = replOnRepl, [WIRE_HELD] = replOnHeld, [WIRE_ERROR] = replOnError},
    .connReady = replOnConnReady,
    .connClosed = replOnConnClosed,
    .tick = replTick,
    .shutdown = replShutdown,
};
