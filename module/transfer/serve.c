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
 * An object on the spill tier is served from its file without taking arena
 * room: read into a heap buffer of the connection's, checked against the
 * object's checksum, and sent inline on either transport (docs/tiers.md).
 */
#include <stdlib.h>
#include <unistd.h>

#include "serve.h"
#include "common/util.h"
#include "store/tier.h"

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

static Rndv *rndvs;

/* The bytes of a spilled object on their way out (engine thread only). Its
 * send cookie is the pointer with the low bit set, which no ObjEntry has. */
typedef struct TierBuf {
    Conn *conn;
    ObjListLink link;
    uint8_t bytes[];
} TierBuf;

static ObjList tierBufs = {&tierBufs, &tierBufs};

/* Serve a spilled object from its tier file (fd, closed here). Returns 0, or
 * -1 when the connection is closing. */
static int serveFromTier(Conn *c, WireMsg *r, int fd, uint64_t total)
{
    TierBuf *b = fd < 0 ? NULL : malloc(sizeof(*b) + total);
    int err = !b ? -1 : tierReadAll(fd, b->bytes, total, r->u.data.checksum);

    if (fd >= 0)
        close(fd);
    if (err) {
        free(b);
        engineLog("warning", "%s: serving a spilled object: %s", c->desc,
                  err == -1 ? "cannot open or buffer its tier file" : tierStrError(err));
        engineSendError(c, r->h.reqId, WIRE_ERR_INTERNAL,
                        "the object's spill tier file cannot be read (see the owner's log)");
        return 0;
    }
    b->conn = c;
    objListPushBack(&tierBufs, &b->link);
    int tp = engineTpIndex(c->ops);
    engineStatsBegin();
    engineTpStats(tp)->served++;
    engineTpStats(tp)->servedBytes += total;
    engineTpStats(tp)->servedInline++;
    engineStatsEnd();
    r->h.type = WIRE_DATA;
    return engineSend(c, r, b->bytes, total, (void *)((uintptr_t)b | 1));
}
static void unpin(Conn *c, ObjEntry *e)
{
    objTableLock(engineConfig()->table);
    objTableUnpin(engineConfig()->table, e, ENGINE_HOLDER_CONN(c->id));
    objTableUnlock(engineConfig()->table);
    if (c->pins > 0)
        c->pins--;
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
    ObjStatus st = !e ? OBJ_ST_NOTFOUND : objTablePin(t, e, ENGINE_HOLDER_CONN(c->id));
    int tierFd = st == OBJ_ST_SPILLED ? objTableTierOpen(t, e) : -1; /* opened before any unlink */
    if (st == OBJ_ST_SPILLED) {
        r.u.data.size = e->dataSize;
        r.u.data.metaSize = e->metaSize;
        r.u.data.checksum = e->checksum;
    }
    objTableUnlock(t);
    if (st == OBJ_ST_SPILLED)
        return serveFromTier(c, &r, tierFd, r.u.data.size + r.u.data.metaSize);
    if (st == OBJ_ST_NOTFOUND) {
        engineSendError(c, m->h.reqId, WIRE_ERR_NOTFOUND, "no such object on this node");
        return 0;
    }
    if (st != OBJ_ST_OK) {
        engineSendError(c, m->h.reqId, WIRE_ERR_NOTSEALED, "the object is not sealed");
        return 0;
    }
    c->pins++; /* capped above (and a stream transport stops reading at the cap) */
    uint64_t total = e->dataSize + e->metaSize;
    const uint8_t *bytes = engineConfig()->arenaBase + e->offset;
    int tp = engineTpIndex(c->ops);
    engineStatsBegin();
    engineTpStats(tp)->served++;
    engineTpStats(tp)->servedBytes += total;
    engineStatsEnd();
    r.u.data.size = e->dataSize;
    r.u.data.metaSize = e->metaSize;
    r.u.data.checksum = e->checksum;

    int inlineOk = !c->ops->grantRead || total < engineConfig()->rdmaReadMin;
    engineStatsBegin();
    if (inlineOk)
        engineTpStats(tp)->servedInline++;
    else
        engineTpStats(tp)->servedRndv++;
    engineStatsEnd();
    if (inlineOk) {
        r.h.type = WIRE_DATA;
        if (engineSend(c, &r, bytes, total, e) == -1)
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
    if ((uintptr_t)cookie & 1) {
        TierBuf *b = (TierBuf *)((uintptr_t)cookie & ~(uintptr_t)1);
        objListUnlink(&b->link);
        free(b);
    } else if (cookie) {
        unpin(c, cookie);
    }
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
    ObjListLink *it, *next;
    objListForEachSafe(&tierBufs, it, next) { /* sends that never completed */
        TierBuf *b = objListEntry(it, TierBuf, link);
        if (b->conn == c) {
            objListUnlink(&b->link);
            free(b);
        }
    }
    objTableLock(engineConfig()->table);
    objTableHolderGone(engineConfig()->table, ENGINE_HOLDER_CONN(c->id));
    objTableUnlock(engineConfig()->table);
    c->pins = 0;
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
    .onFrame = {[WIRE_FETCH] = serveOnFetch, [WIRE_DONE] = serveOnDone},
    .sendDone = serveOnSendDone,
    .connClosed = serveOnConnClosed,
    .tick = serveTick,
};
