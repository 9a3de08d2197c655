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
 *
 * Upload slots: while upload-slots large objects are being sent and one of
 * them is the object asked for, a FETCHR whose requester may go elsewhere
 * or come back (BUSY_OK) is answered BUSY: the nodes this one is sending
 * the object to will hold it soon and serve it in turn, so a broadcast
 * spreads as a doubling wave instead of splitting one link N ways
 * (docs/cluster.md, "Broadcast"). A FETCHR may also ask for the bytes from
 * an offset on: a fetch resuming after its source failed.
 *
 * Relays: a BUSY names the node this one has been sending the object to
 * longest ("relay <name>"). Asked with PARTIAL_OK for an object it is still
 * receiving over TCP, a node answers PART: the bytes from the offset asked
 * that have landed here, never more (fetchPartial says how far that is),
 * waiting (bounded, SERVE_RELAY_WAIT_US) when none has. Its requester asks
 * again for the rest; every copy is checked against the owner's checksum
 * at its end. A relay's bytes are not pinned (a created object cannot be):
 * should its own transfer fail while a PART is being sent, the arena range
 * may be reused and the requester's checksum turns the garbage away.
 *
 * An RDMA requester gets one answer per request: PART for a range under
 * rdma-read-min, else RPART, a rendezvous whose key opens exactly the bytes
 * that have landed here (the requester's DONE revokes it); it then asks
 * again from its new offset (serveRelayRdma). An owner resuming an RDMA
 * requester at an offset answers RPART over the rest too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <string.h>

#include "fetch.h"
#include "serve.h"
#include "common/list.h"
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

/* Objects of at least this many bytes take an upload slot: smaller ones
 * are sent in less time than a redirect costs. */
#define SERVE_LARGE (1u << 20)

/* The bytes of a spilled object on their way out (engine thread only). Its
 * send cookie is the pointer with the low bit set, which no ObjEntry has. */
typedef struct TierBuf {
    Conn *conn;
    ObjListLink link;
    uint8_t bytes[];
} TierBuf;

static ObjList tierBufs = {&tierBufs, &tierBufs};

/* Serve a spilled object of total bytes from its tier file (fd, closed
 * here), its bytes from offset from on. Returns 0, or -1 when the
 * connection is closing. */
static int serveFromTier(Conn *c, WireMsg *r, int fd, uint64_t total, uint64_t from)
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
    if (from > total) {
        free(b);
        engineSendError(c, r->h.reqId, WIRE_ERR_PROTO, "offset past the end of the object");
        return 0;
    }
    b->conn = c;
    objListPushBack(&tierBufs, &b->link);
    int tp = engineTpIndex(c->ops);
    engineStatsBegin();
    engineTpStats(tp)->served++;
    engineTpStats(tp)->servedBytes += total - from;
    engineTpStats(tp)->servedInline++;
    engineStatsBegin()->uploadedBytes += total - from;
    engineStatsEnd();
    r->h.type = WIRE_DATA;
    return engineSend(c, r, b->bytes + from, total - from, (void *)((uintptr_t)b | 1));
}

/* A relay waits at most this long for a byte past the offset asked, and
 * sends at most SERVE_PART_MAX bytes in one PART. A relay session with no
 * request for SERVE_RELAY_IDLE_US is over. */
#define SERVE_RELAY_WAIT_US (5LL * 1000 * 1000)
#define SERVE_RELAY_IDLE_US (2LL * 1000 * 1000)
#define SERVE_PART_MAX      (16ULL << 20)

/* A large object being sent on a connection (serve.c's upload slots): a
 * pinned sealed object until its bytes are sent, or a relay session (the
 * PARTs of one requester) until its last byte or SERVE_RELAY_IDLE_US. */
typedef struct Upload {
    Conn *conn;
    const ObjEntry *e;
    int relay;
    int64_t lastUs;   /* relay: the last request */
    ObjListLink link; /* in uploads */
} Upload;

/* A relay request waiting for bytes to land here. */
typedef struct Pending {
    Conn *conn;
    uint64_t reqId, offset;
    char id[OBJ_WIRE_ID_MAX];
    size_t idLen;
    int64_t sinceUs;
    ObjListLink link; /* in pendings */
} Pending;

static ObjList pendings = {&pendings, &pendings}; /* Pending.link */

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
    u->relay = 0;
    u->lastUs = 0;
    objListPushFront(&uploads, &u->link);
    c->uploads++;
    uploadsNow++;
    return 0;
}

/* Forget one upload of e on c of kind relay (or, e NULL, every upload on c). */
static void uploadDrop(Conn *c, const ObjEntry *e, int relay)
{
    ObjListLink *l = objListFirst(&uploads);

    while (l) {
        Upload *u = objListEntry(l, Upload, link);
        l = l->next == &uploads ? NULL : l->next;
        if (u->conn != c || (e && (u->e != e || u->relay != relay)))
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

/* c's relay session of e, or NULL. */
static Upload *relaySession(const Conn *c, const ObjEntry *e)
{
    ObjListLink *l;

    objListForEach(&uploads, l) {
        Upload *u = objListEntry(l, Upload, link);
        if (u->relay && u->conn == c && u->e == e)
            return u;
    }
    return NULL;
}

/* The node e has been sent to longest (the oldest upload of e), or NULL. */
static const char *uploadOldestPeer(const ObjEntry *e)
{
    const char *name = NULL;
    ObjListLink *l;

    objListForEach(&uploads, l) { /* newest first: the last match is the oldest */
        Upload *u = objListEntry(l, Upload, link);
        if (u->e == e && u->conn->peerName[0])
            name = u->conn->peerName;
    }
    return name;
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
        uploadDrop(c, e, 0);
}

/* Must a FETCHR for e be sent elsewhere? Only a requester that said it may
 * go elsewhere or come back is, only for a large object while every slot is
 * taken, and only while one of those uploads is e itself: its receiver will
 * be another holder soon. */
static int serveRedirect(const Conn *c, const WireMsg *m, const ObjEntry *e)
{
    int slots = engineConfig()->uploadSlots;

    return m->h.type == WIRE_FETCHR && (m->u.fetch.flags & WIRE_FETCHR_BUSY_OK) && slots > 0 &&
           serveIsLarge(e) && uploadsNow >= (uint32_t)slots && uploadOf(e) && !relaySession(c, e);
}

/* Answer BUSY for e, naming the node it has been sent to longest when the
 * requester takes relays. */
static void serveBusy(Conn *c, const WireMsg *m, const ObjEntry *e)
{
    const char *peer = (m->u.fetch.flags & WIRE_FETCHR_PARTIAL_OK) ? uploadOldestPeer(e) : NULL;
    char text[OBJ_WIRE_TEXT_MAX + 1];

    if (peer && strlen(peer) + 6 <= OBJ_WIRE_TEXT_MAX)
        snprintf(text, sizeof(text), "relay %s", peer);
    else
        snprintf(text, sizeof(text), "every upload slot is taken: ask another");
    engineStatsBegin()->redirects++;
    engineStatsEnd();
    engineSendError(c, m->h.reqId, WIRE_ERR_BUSY, text);
}

/* c's relay session of e, made when create is set and there is none, with
 * its clock restarted; NULL when there is none (or no memory for it). */
static Upload *relayTouch(Conn *c, const ObjEntry *e, int create)
{
    Upload *u = relaySession(c, e);

    if (!u && create && uploadAdd(c, e) == 0) {
        u = objListEntry(objListFirst(&uploads), Upload, link);
        u->relay = 1;
    }
    if (u)
        u->lastUs = utilMonoUs();
    return u;
}

/* Send what has landed of the object being received here (id) from offset
 * on, as PART to c. Returns 1 when answered (PART, or an error), 0 when no
 * byte past offset has landed yet. */
static int relayAnswer(Conn *c, uint64_t reqId, const char *id, size_t idLen, uint64_t offset)
{
    ObjEntry *e;
    uint64_t landed, sum;

    if (fetchPartial(id, idLen, &e, &landed, &sum) == -1) {
        engineSendError(c, reqId, WIRE_ERR_NOTSEALED, "the object is no longer received here");
        return 1;
    }
    uint64_t total = e->dataSize + e->metaSize;
    if (offset >= total) {
        engineSendError(c, reqId, WIRE_ERR_PROTO, "offset past the end of the object");
        return 1;
    }
    if (landed <= offset)
        return 0;
    uint64_t len = landed - offset > SERVE_PART_MAX ? SERVE_PART_MAX : landed - offset;
    Upload *u = relayTouch(c, e, 0);
    EngineStats *es = engineStatsBegin();
    es->relayed++;
    es->uploadedBytes += len;
    engineTpStats(engineTpIndex(c->ops))->servedBytes += len;
    engineStatsEnd();
    WireMsg r = {.h = {.type = WIRE_PART, .reqId = reqId}};
    r.u.data.size = e->dataSize;
    r.u.data.metaSize = e->metaSize;
    r.u.data.checksum = sum;
    r.u.data.offset = offset;
    r.u.data.len = len;
    const uint8_t *bytes = engineConfig()->arenaBase + e->offset + offset;
    if (offset + len == total && u)
        uploadDrop(c, e, 1); /* the last bytes: the session is over */
    engineSend(c, &r, bytes, len, NULL);
    return 1;
}

/* A FETCHR with PARTIAL_OK for an object being created here: answer from
 * what has landed, or wait for it (serveTick). Returns 0, or -1 (close c). */
static int serveRelay(Conn *c, const WireMsg *m)
{
    if (!c->ops->recvPayload) { /* a stream transport's requester only */
        engineSendError(c, m->h.reqId, WIRE_ERR_NOTSEALED, "the object is not sealed");
        return 0;
    }
    /* The session takes its upload slot from the first request on, also
     * while it waits for bytes: others asking meanwhile are sent on. */
    ObjEntry *e;
    uint64_t landed, sum;
    if (fetchPartial(m->u.fetch.id, m->u.fetch.idLen, &e, &landed, &sum) == 0)
        relayTouch(c, e, 1);
    if (relayAnswer(c, m->h.reqId, m->u.fetch.id, m->u.fetch.idLen, m->u.fetch.offset))
        return 0;
    Pending *p = malloc(sizeof(*p));
    if (!p) {
        engineSendError(c, m->h.reqId, WIRE_ERR_INTERNAL, "out of memory");
        return 0;
    }
    p->conn = c;
    p->reqId = m->h.reqId;
    p->offset = m->u.fetch.offset;
    memcpy(p->id, m->u.fetch.id, m->u.fetch.idLen);
    p->idLen = m->u.fetch.idLen;
    p->sinceUs = utilMonoUs();
    objListPushFront(&pendings, &p->link);
    return 0;
}

/* Answer the relay requests whose bytes have landed; refuse those that
 * waited too long. */
static void relayPoll(void)
{
    int64_t now = utilMonoUs();
    ObjListLink *l = objListFirst(&pendings);

    while (l) {
        Pending *p = objListEntry(l, Pending, link);
        l = l->next == &pendings ? NULL : l->next;
        int done = relayAnswer(p->conn, p->reqId, p->id, p->idLen, p->offset);
        ObjEntry *e;
        uint64_t landed, sum;
        if (!done && fetchPartial(p->id, p->idLen, &e, &landed, &sum) == 0)
            relayTouch(p->conn, e, 0); /* a session waiting for bytes is not idle */
        if (!done && now - p->sinceUs > SERVE_RELAY_WAIT_US) {
            engineSendError(p->conn, p->reqId, WIRE_ERR_NOTSEALED,
                            "no new byte of the object landed here in time");
            done = 1;
        }
        if (done) {
            objListUnlink(&p->link);
            free(p);
        }
    }
}

/* Forget relay sessions nobody has asked anything of for a while. */
static void relayExpire(void)
{
    int64_t now = utilMonoUs();
    ObjListLink *l = objListFirst(&uploads);

    while (l) {
        Upload *u = objListEntry(l, Upload, link);
        l = l->next == &uploads ? NULL : l->next;
        if (u->relay && now - u->lastUs > SERVE_RELAY_IDLE_US) {
            u->conn->uploads--;
            uploadsNow--;
            objListUnlink(&u->link);
            free(u);
        }
    }
}

/* ---- relays for RDMA requesters ---------------------------------------------------- */

/* An RDMA requester's relay request waiting for bytes to land here. */
typedef struct RrWait {
    Conn *conn;
    uint64_t reqId, offset;
    char id[OBJ_WIRE_ID_MAX];
    size_t idLen;
    int64_t sinceUs;
    uint64_t round;   /* the last rrelayPoll that looked at it */
    ObjListLink link; /* in rrWaits */
} RrWait;

static ObjList rrWaits = {&rrWaits, &rrWaits}; /* RrWait.link */
static uint64_t rrRound;                       /* rrelayPoll's passes */
/* The request rrelayPoll is answering (off the list meanwhile), and whether
 * its connection closed under the answer. */
static RrWait *rrAsking;
static int rrAskingGone;

/* A range under rdma-read-min that is not the object's rest waits this long
 * for more bytes before it is sent inline as it is. */
#define SERVE_RRELAY_GATHER_US (200LL * 1000)

/* Count a relayed answer of len bytes on c (rndv: by rendezvous). */
static void rrelayCount(Conn *c, uint64_t len, int rndv)
{
    int tp = engineTpIndex(c->ops);
    EngineStats *es = engineStatsBegin();

    es->relayed++;
    es->uploadedBytes += len;
    engineTpStats(tp)->servedBytes += len;
    if (rndv)
        engineTpStats(tp)->servedRndv++;
    else
        engineTpStats(tp)->servedInline++;
    engineStatsEnd();
}

/* Open [offset, offset + len) of e, all of it landed here, to c's peer and
 * send RPART. The key opens those bytes only; no pin is taken (a created
 * object has none): the requester's DONE revokes it. Returns 0 (an
 * answer, maybe an ERROR, went out) or -1 (c is closing). */
static int rrelaySendRpart(Conn *c, uint64_t reqId, const ObjEntry *e, uint64_t sum,
                           uint64_t offset, uint64_t len)
{
    const uint8_t *bytes = engineConfig()->arenaBase + e->offset + offset;
    Rndv *rv = malloc(sizeof(*rv));
    uint32_t rkey = 0;
    void *grant = rv ? c->ops->grantRead(c, bytes, len, &rkey) : NULL;

    if (!grant) { /* logged by the transport, or out of memory */
        free(rv);
        engineSendError(c, reqId, WIRE_ERR_INTERNAL,
                        "cannot open the landed bytes to RDMA reads (see the relay's log)");
        return 0;
    }
    /* e NULL: the DONE's revocation releases nothing (serveOnSendDone). */
    *rv = (Rndv){.conn = c, .reqId = reqId, .grant = grant, .sinceUs = utilMonoUs(), .next = rndvs};
    rndvs = rv;
    rrelayCount(c, len, 1);
    WireMsg r = {.h = {.type = WIRE_RPART, .reqId = reqId}};
    r.u.data.size = e->dataSize;
    r.u.data.metaSize = e->metaSize;
    r.u.data.checksum = sum;
    r.u.data.offset = offset;
    r.u.data.len = len;
    r.u.data.addr = (uint64_t)(uintptr_t)bytes;
    r.u.data.rkey = rkey;
    return engineSend(c, &r, NULL, 0, NULL);
}

/* Answer an RDMA requester's relay request from what has landed here past
 * offset: RPART over all of it when that is at least rdma-read-min (or it
 * is the object's rest), PART inline when less. waitedUs: how long the
 * request has waited. Returns 1 when answered (maybe with an ERROR), 0
 * when it should wait: nothing past offset has landed, or less than
 * rdma-read-min of a rest still coming, for under SERVE_RRELAY_GATHER_US. */
static int rrelayAnswer(Conn *c, uint64_t reqId, const char *id, size_t idLen, uint64_t offset,
                        int64_t waitedUs)
{
    ObjEntry *e;
    uint64_t landed, sum;

    if (fetchPartial(id, idLen, &e, &landed, &sum) == -1) {
        engineSendError(c, reqId, WIRE_ERR_NOTSEALED, "the object is no longer received here");
        return 1;
    }
    uint64_t total = e->dataSize + e->metaSize, min = engineConfig()->rdmaReadMin;
    if (offset >= total) {
        engineSendError(c, reqId, WIRE_ERR_PROTO, "offset past the end of the object");
        return 1;
    }
    if (landed <= offset)
        return 0;
    uint64_t len = landed - offset;
    if (len < min && landed < total && waitedUs < SERVE_RRELAY_GATHER_US)
        return 0;
    Upload *u = relayTouch(c, e, 0);
    if (landed == total && u)
        uploadDrop(c, e, 1); /* the last bytes: the session is over */
    if (len >= min && len > 0) {
        rrelaySendRpart(c, reqId, e, sum, offset, len);
        return 1;
    }
    rrelayCount(c, len, 0);
    WireMsg r = {.h = {.type = WIRE_PART, .reqId = reqId}};
    r.u.data.size = e->dataSize;
    r.u.data.metaSize = e->metaSize;
    r.u.data.checksum = sum;
    r.u.data.offset = offset;
    r.u.data.len = len;
    engineSend(c, &r, engineConfig()->arenaBase + e->offset + offset, len, NULL);
    return 1;
}

/* A FETCHR with PARTIAL_OK from an RDMA requester for an object being
 * created here: answer from what has landed, or wait for it (rrelayPoll).
 * Returns 0. */
static int serveRelayRdma(Conn *c, const WireMsg *m)
{
    ObjEntry *e;
    uint64_t landed, sum;

    /* The session takes its upload slot from the first request on, also
     * while it waits for bytes: others asking meanwhile are sent on. */
    if (fetchPartial(m->u.fetch.id, m->u.fetch.idLen, &e, &landed, &sum) == 0)
        relayTouch(c, e, 1);
    if (rrelayAnswer(c, m->h.reqId, m->u.fetch.id, m->u.fetch.idLen, m->u.fetch.offset, 0))
        return 0;
    RrWait *w = malloc(sizeof(*w));
    if (!w) {
        engineSendError(c, m->h.reqId, WIRE_ERR_INTERNAL, "out of memory");
        return 0;
    }
    w->conn = c;
    w->reqId = m->h.reqId;
    w->offset = m->u.fetch.offset;
    memcpy(w->id, m->u.fetch.id, m->u.fetch.idLen);
    w->idLen = m->u.fetch.idLen;
    w->sinceUs = utilMonoUs();
    w->round = 0;
    objListPushBack(&rrWaits, &w->link);
    return 0;
}

/* One look at waiting request w (off the list): answered, refused after
 * SERVE_RELAY_WAIT_US without a first byte, or still waiting. Returns 1
 * when it is over (or its connection closed meanwhile). */
static int rrelayStep(RrWait *w, int64_t now)
{
    ObjEntry *e;
    uint64_t landed, sum;

    if (rrelayAnswer(w->conn, w->reqId, w->id, w->idLen, w->offset, now - w->sinceUs) ||
        rrAskingGone)
        return 1;
    if (fetchPartial(w->id, w->idLen, &e, &landed, &sum) == 0)
        relayTouch(w->conn, e, 0); /* a session waiting for bytes is not idle */
    if (now - w->sinceUs <= SERVE_RELAY_WAIT_US)
        return 0;
    engineSendError(w->conn, w->reqId, WIRE_ERR_NOTSEALED,
                    "no new byte of the object landed here in time");
    return 1;
}

/* Answer the waiting RDMA relay requests whose bytes have landed; refuse
 * those that waited too long. An answer may close its connection, which
 * drops that connection's requests: each is taken off the list while it is
 * looked at, and the walk starts again after each. */
static void rrelayPoll(void)
{
    int64_t now = utilMonoUs();
    uint64_t round = ++rrRound;

    for (;;) {
        RrWait *w = NULL;
        ObjListLink *l;
        objListForEach(&rrWaits, l) {
            RrWait *o = objListEntry(l, RrWait, link);
            if (o->round != round) {
                w = o;
                break;
            }
        }
        if (!w)
            return;
        objListUnlink(&w->link);
        w->round = round;
        rrAsking = w;
        rrAskingGone = 0;
        int over = rrelayStep(w, now);
        rrAsking = NULL;
        if (over)
            free(w);
        else
            objListPushBack(&rrWaits, &w->link);
    }
}

/* c is gone: forget its waiting relay requests. */
static void rrelayConnClosed(Conn *c)
{
    ObjListLink *l, *next;

    if (rrAsking && rrAsking->conn == c)
        rrAskingGone = 1;
    objListForEachSafe(&rrWaits, l, next) {
        RrWait *w = objListEntry(l, RrWait, link);
        if (w->conn == c) {
            objListUnlink(&w->link);
            free(w);
        }
    }
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
    int busy = e && serveRedirect(c, m, e);
    int partial = e && e->state != OBJ_SEALED && !busy && m->h.type == WIRE_FETCHR &&
                  (m->u.fetch.flags & WIRE_FETCHR_PARTIAL_OK);
    ObjStatus st = !e                ? OBJ_ST_NOTFOUND
                   : busy || partial ? OBJ_ST_OK
                                     : objTablePin(t, e, ENGINE_HOLDER_CONN(c->id));
    int tierFd = st == OBJ_ST_SPILLED ? objTableTierOpen(t, e) : -1; /* opened before any unlink */
    if (st == OBJ_ST_SPILLED) {
        r.u.data.size = e->dataSize;
        r.u.data.metaSize = e->metaSize;
        r.u.data.checksum = e->checksum;
    }
    objTableUnlock(t);
    if (busy) {
        serveBusy(c, m, e);
        return 0;
    }
    if (partial)
        return c->ops->grantRead ? serveRelayRdma(c, m) : serveRelay(c, m);
    if (st == OBJ_ST_SPILLED)
        return serveFromTier(c, &r, tierFd, r.u.data.size + r.u.data.metaSize,
                             m->h.type == WIRE_FETCHR ? m->u.fetch.offset : 0);
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

    /* A rest under rdma-read-min rides the stream; a larger one is read:
     * RNDV for the whole object, RPART for the bytes from an offset. */
    int inlineOk =
        !c->ops->grantRead || total - from < engineConfig()->rdmaReadMin || (from && from == total);
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
    void *grant = c->ops->grantRead(c, bytes + from, total - from, &rkey);
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
    r.h.type = from ? WIRE_RPART : WIRE_RNDV;
    r.u.data.addr = (uint64_t)(uintptr_t)(bytes + from);
    r.u.data.rkey = rkey;
    r.u.data.offset = from;
    r.u.data.len = from ? total - from : 0;
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
    uploadDrop(c, NULL, 0);
    for (ObjListLink *l = objListFirst(&pendings); l;) {
        Pending *p = objListEntry(l, Pending, link);
        l = l->next == &pendings ? NULL : l->next;
        if (p->conn == c) {
            objListUnlink(&p->link);
            free(p);
        }
    }
    rrelayConnClosed(c);
}

static void serveTick(void)
{
    int64_t now = utilMonoUs();

    relayPoll();
    rrelayPoll();
    relayExpire();
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
