/*
 * serve.c - the answering side: another node asked for one of our objects.
 *
 * The object is pinned for as long as its bytes may still be read: inline
 * until the transport has sent them (engineOnSendDone), and for an RDMA
 * read rendezvous until the requester says DONE and the transport has
 * closed the key it was given (grantRead / revokeRead: the key opens that
 * object only, on that connection only), or its connection goes away. Pins
 * are held in the connection's name (ENGINE_HOLDER_CONN), so a vanished
 * peer releases all of them at once and memory is never freed under the
 * NIC or a send.
 *
 * Upload slots: while upload-slots large objects are being sent and one of
 * them is the object asked for, a FETCHR whose requester may go elsewhere
 * or come back (BUSY_OK) is answered BUSY: the nodes this one is sending
 * the object to will hold it soon and serve it in turn, so a broadcast
 * spreads as a doubling wave instead of splitting one link N ways
 * (docs/cluster.md, "Broadcast"). A FETCHR may also ask for the bytes from
 * an offset on: a fetch resuming after its source failed.
 */
#include <stdlib.h>

#include "serve.h"
#include "common/list.h"
#include "common/util.h"

/* A requester that neither reads nor says DONE within this long is gone or
 * stuck: its connection is closed, which both stops any late read by its NIC
 * and releases the pin. */
#define SERVE_RNDV_TIMEOUT_US (60LL * 1000 * 1000)

/* A read rendezvous waiting for the requester's DONE. */
typedef struct Rndv {
    Conn *conn;
    uint64_t reqId;
    ObjEntry *e;
    void *grant; /* the transport's key for it (revokeRead at DONE) */
    int64_t sinceUs;
    struct Rndv *next;
} Rndv;

/* Objects of at least this many bytes take an upload slot: smaller ones
 * are sent in less time than a redirect costs. */
#define SERVE_LARGE (1u << 20)

/* A large object being sent on a connection (serve.c's upload slots). */
typedef struct Upload {
    Conn *conn;
    const ObjEntry *e;
    ObjListLink link; /* in uploads */
} Upload;

static Rndv *rndvs;
static uint32_t uploadsNow;                    /* large objects being sent, every connection */
static ObjList uploads = {&uploads, &uploads}; /* Upload.link */

/* Record that e is being sent on c. Returns 0, or -1 when out of memory
 * (then the upload is simply not counted). */
static int uploadAdd(Conn *c, const ObjEntry *e)
{
    Upload *u = malloc(sizeof(*u));

    if (!u)
        return -1;
    u->conn = c;
    u->e = e;
    objListPushFront(&uploads, &u->link);
    c->uploads++;
    uploadsNow++;
    return 0;
}

/* Forget one upload of e on c (or, e NULL, every upload on c). */
static void uploadDrop(Conn *c, const ObjEntry *e)
{
    ObjListLink *l = objListFirst(&uploads);

    while (l) {
        Upload *u = objListEntry(l, Upload, link);
        l = l->next == &uploads ? NULL : l->next;
        if (u->conn != c || (e && u->e != e))
            continue;
        objListUnlink(&u->link);
        free(u);
        c->uploads--;
        uploadsNow--;
        if (e)
            return;
    }
}

/* Is e being sent to some node right now? */
static int uploadOf(const ObjEntry *e)
{
    ObjListLink *l;

    objListForEach(&uploads, l) {
        if (objListEntry(l, Upload, link)->e == e)
            return 1;
    }
    return 0;
}

static int serveIsLarge(const ObjEntry *e)
{
    return e->dataSize + e->metaSize >= SERVE_LARGE;
}

/* Release c's pin of e (and its upload slot). The entry is read before the
 * pin goes: after it, an eviction may free it. */
static void unpin(Conn *c, ObjEntry *e)
{
    int large = serveIsLarge(e);

    objTableLock(engineConfig()->table);
    objTableUnpin(engineConfig()->table, e, ENGINE_HOLDER_CONN(c->id));
    objTableUnlock(engineConfig()->table);
    if (c->pins > 0)
        c->pins--;
    if (large)
        uploadDrop(c, e);
}

/* Must a FETCHR for e be sent elsewhere? Only a requester that said it may
 * go elsewhere or come back is, only for a large object while every slot is
 * taken, and only while one of those uploads is e itself: its receiver will
 * be another holder soon. */
static int serveRedirect(const WireMsg *m, const ObjEntry *e)
{
    int slots = engineConfig()->uploadSlots;

    return m->h.type == WIRE_FETCHR && (m->u.fetch.flags & WIRE_FETCHR_BUSY_OK) && slots > 0 &&
           serveIsLarge(e) && uploadsNow >= (uint32_t)slots && uploadOf(e);
}

static int serveOnFetch(Conn *c, const WireMsg *m)
{
    ObjTable *t = engineConfig()->table;
    WireMsg r = {.h = {.reqId = m->h.reqId}};

    if (m->h.reqId == 0) {
        engineLog("warning", "%s: FETCH without a request id", c->desc);
        return -1;
    }
    if (engineConnBusy(c)) { /* a peer past its window: no pin, no queued bytes */
        engineSendError(c, m->h.reqId, WIRE_ERR_BUSY, "too many requests outstanding");
        return 0;
    }
    objTableLock(t);
    ObjEntry *e = objTableFind(t, m->u.fetch.id, m->u.fetch.idLen);
    int busy = e && e->state == OBJ_SEALED && serveRedirect(m, e);
    ObjStatus st = !e     ? OBJ_ST_NOTFOUND
                   : busy ? OBJ_ST_OK
                          : objTablePin(t, e, ENGINE_HOLDER_CONN(c->id));
    objTableUnlock(t);
    if (busy) {
        engineStatsBegin()->redirects++;
        engineStatsEnd();
        engineSendError(c, m->h.reqId, WIRE_ERR_BUSY, "every upload slot is taken: ask another");
        return 0;
    }
    if (st == OBJ_ST_NOTFOUND) {
        engineSendError(c, m->h.reqId, WIRE_ERR_NOTFOUND, "no such object on this node");
        return 0;
    }
    if (st != OBJ_ST_OK) {
        engineSendError(c, m->h.reqId, WIRE_ERR_NOTSEALED, "the object is not sealed");
        return 0;
    }
    c->pins++; /* capped above (and a stream transport stops reading at the cap) */
    if (serveIsLarge(e))
        uploadAdd(c, e);
    uint64_t total = e->dataSize + e->metaSize;
    uint64_t from = m->h.type == WIRE_FETCHR ? m->u.fetch.offset : 0;
    if (from > total) {
        unpin(c, e);
        engineSendError(c, m->h.reqId, WIRE_ERR_PROTO, "offset past the end of the object");
        return 0;
    }
    const uint8_t *bytes = engineConfig()->arenaBase + e->offset;
    int tp = engineTpIndex(c->ops);
    EngineStats *es = engineStatsBegin();
    es->uploadedBytes += total - from;
    engineTpStats(tp)->served++;
    engineTpStats(tp)->servedBytes += total - from;
    engineStatsEnd();
    r.u.data.size = e->dataSize;
    r.u.data.metaSize = e->metaSize;
    r.u.data.checksum = e->checksum;

    /* A range always rides the stream: a rendezvous opens whole objects. */
    int inlineOk = !c->ops->grantRead || total < engineConfig()->rdmaReadMin || from > 0;
    engineStatsBegin();
    if (inlineOk)
        engineTpStats(tp)->servedInline++;
    else
        engineTpStats(tp)->servedRndv++;
    engineStatsEnd();
    if (inlineOk) {
        r.h.type = WIRE_DATA;
        if (engineSend(c, &r, bytes + from, total - from, e) == -1)
            return -1; /* the conn is closing: its pins go with it */
        return 0;
    }
    Rndv *rv = malloc(sizeof(*rv));
    if (!rv) {
        unpin(c, e);
        engineSendError(c, m->h.reqId, WIRE_ERR_INTERNAL, "out of memory");
        return 0;
    }
    uint32_t rkey = 0;
    void *grant = c->ops->grantRead(c, bytes, total, &rkey);
    if (!grant) { /* the device failed (logged): the pin cap above keeps keys from running out */
        free(rv);
        unpin(c, e);
        engineSendError(c, m->h.reqId, WIRE_ERR_INTERNAL,
                        "cannot open the object to RDMA reads (see the owner's log)");
        return 0;
    }
    *rv = (Rndv){.conn = c,
                 .reqId = m->h.reqId,
                 .e = e,
                 .grant = grant,
                 .sinceUs = utilMonoUs(),
                 .next = rndvs};
    rndvs = rv;
    r.h.type = WIRE_RNDV;
    r.u.data.addr = (uint64_t)(uintptr_t)bytes;
    r.u.data.rkey = rkey;
    return engineSend(c, &r, NULL, 0, NULL);
}

static int serveOnDone(Conn *c, const WireMsg *m)
{
    for (Rndv **pp = &rndvs; *pp; pp = &(*pp)->next) {
        Rndv *rv = *pp;
        if (rv->conn == c && rv->reqId == m->h.reqId) {
            *pp = rv->next;
            /* The pin goes once the key no longer opens the object
             * (serveOnSendDone with the entry as the cookie). */
            c->ops->revokeRead(c, rv->grant, rv->e);
            free(rv);
            return 0;
        }
    }
    return 0; /* a DONE for something already released: harmless */
}

static void serveOnSendDone(Conn *c, void *cookie)
{
    if (cookie)
        unpin(c, cookie);
}

static void serveOnConnClosed(Conn *c)
{
    Rndv **pp = &rndvs;

    while (*pp) {
        Rndv *rv = *pp;
        if (rv->conn == c) {
            *pp = rv->next;
            free(rv);
        } else {
            pp = &rv->next;
        }
    }
    objTableLock(engineConfig()->table);
    objTableHolderGone(engineConfig()->table, ENGINE_HOLDER_CONN(c->id));
    objTableUnlock(engineConfig()->table);
    c->pins = 0;
    uploadDrop(c, NULL);
}

static void serveTick(void)
{
    int64_t now = utilMonoUs();

    for (Rndv *rv = rndvs; rv; rv = rv->next) {
        if (now - rv->sinceUs > SERVE_RNDV_TIMEOUT_US) {
            Conn *c = rv->conn;
            engineLog("warning", "%s: no DONE for a read rendezvous in %lld s: closing", c->desc,
                      (long long)(SERVE_RNDV_TIMEOUT_US / 1000000));
            c->ops->close(c, "read rendezvous timed out"); /* frees c's records */
            return; /* the list changed; the next tick looks again */
        }
    }
}

/* ---- the answering side's handler table ----------------------------------------------- */

const EngineSide serveSide = {
    .name = "serve",
    .onFrame =
        {[WIRE_FETCH] = serveOnFetch, [WIRE_FETCHR] = serveOnFetch, [WIRE_DONE] = serveOnDone},
    .sendDone = serveOnSendDone,
    .connClosed = serveOnConnClosed,
    .tick = serveTick,
};
