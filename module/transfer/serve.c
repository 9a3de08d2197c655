/*
 * serve.c - the answering side: another node asked for one of our objects.
 * A FETCH is decided under the table lock (serveDecide) and answered by
 * its sender: the object inline or by READ rendezvous (pinned in the
 * connection's name until sent or DONE), BUSY naming a relay when the
 * upload slots are taken, a relay stream of an object still arriving here,
 * or the spilled object's file (tierserve.c). How and why:
 * docs/architecture.md ("An OBJ.FETCH, hop by hop", "Large objects: the
 * READ rendezvous"), docs/cluster.md ("Broadcast"), docs/tiers.md.
 */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <string.h>

#include "fetch.h"
#include "serve.h"
#include "tierserve.h"
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

/* A relay stream with no byte to send for this long is ended with an
 * ERROR (its requester goes on elsewhere). A PART carries at least
 * SERVE_PART_MIN bytes (fewer only at the object's end, or once the stream
 * has waited SERVE_PART_LINGER_US for more) and at most SERVE_PART_MAX; at
 * most SERVE_PARTS_QUEUED of a stream's PARTs wait in the transport. */
#define SERVE_RELAY_WAIT_US  (5LL * 1000 * 1000)
#define SERVE_PART_MIN       (128u << 10)
#define SERVE_PART_MAX       (512u << 10)
#define SERVE_PART_LINGER_US (20LL * 1000)
#define SERVE_PARTS_QUEUED   4

/* A large object being sent on a connection (serve.c's upload slots): a
 * pinned sealed object until its bytes are sent (relay 0), a relay stream
 * (1), or a spilled object (2, SERVE_UPLOAD_SPILLED), which its serving
 * gives back itself (serveSpilledOver), never uploadDrop for a pin. */
#define SERVE_UPLOAD_SPILLED 2
typedef struct Upload {
    Conn *conn;
    const ObjEntry *e;
    int relay;
    ObjListLink link; /* in uploads */
} Upload;

/* One requester's relay stream: the object's bytes from `next` on go to it
 * in PARTs as they land here. e is held for conn (objTablePinCreated or,
 * once sealed, an ordinary pin) until the stream is freed. */
typedef struct RelayStream {
    Conn *conn;
    uint64_t reqId;
    ObjEntry *e;
    char id[OBJ_WIRE_ID_MAX];
    size_t idLen;
    uint64_t dataSize, metaSize, checksum; /* as the directory has them */
    uint64_t next;                         /* the first byte not yet sent */
    uint64_t landed;                       /* the most the transfer here said had landed */
    int queued;                            /* PARTs in the transport (cookie: the stream | 2) */
    Upload *slot;                          /* its upload slot while it runs, or NULL */
    int ended;                             /* nothing more goes: over once queued is 0 */
    int pushing; /* inside relayPush: a PART it completes does not push again */
    /* Over (its hold released, or its connection closed): every walk skips
     * it, and it is unlinked and freed once no walk is under way. */
    int gone;
    int64_t lastUs;   /* when a PART last went (or the stream began) */
    ObjListLink link; /* in streams */
} RelayStream;

#define SERVE_COOKIE_TIER   TIER_SERVE_COOKIE_TAG
#define SERVE_COOKIE_STREAM 2u

static ObjList streams = {&streams, &streams}; /* RelayStream.link */
/* Walks of streams under way. A send can complete PARTs of any stream on
 * its connection, or close it, at once (tcp flushes inside the send, and
 * the completions re-enter serve.c): so while a walk, a push or an end
 * holds a stream, no stream leaves the list or memory; relayDrop only
 * marks it gone and the outermost relayWalkEnd sweeps (docs/architecture.md,
 * "Lists walked while calling out"). */
static int streamsWalking;

static Rndv *rndvs;
static uint32_t uploadsNow;                    /* large objects being sent, every connection */
static ObjList uploads = {&uploads, &uploads}; /* Upload.link */

/* Record that e is being sent on c. Returns the record, or NULL when out
 * of memory (then the upload is simply not counted). */
static Upload *uploadAdd(Conn *c, const ObjEntry *e)
{
    Upload *u = malloc(sizeof(*u));

    if (!u)
        return NULL;
    u->conn = c;
    u->e = e;
    u->relay = 0;
    objListPushFront(&uploads, &u->link);
    c->uploads++;
    uploadsNow++;
    return u;
}

/* Forget upload u. */
static void uploadRemove(Upload *u)
{
    objListUnlink(&u->link);
    u->conn->uploads--;
    uploadsNow--;
    free(u);
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
        uploadRemove(u);
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
           serveIsLarge(e) && uploadsNow >= (uint32_t)slots && uploadOf(e);
}

/* The requesters this node sent on most recently, per object (a ring): the
 * newest is about to receive the object from someone, the end of the chain
 * of relays a broadcast grows, so the next requester is sent there in one
 * step instead of walking the chain. Entries are hints: a stale one costs
 * the requester one refusal. */
#define SERVE_RECENT 16
static struct {
    const ObjEntry *e;
    char peer[OBJ_WIRE_NAME_MAX + 1];
} recent[SERVE_RECENT];
static unsigned recentNext;

/* The node to name in a BUSY for e to c: the requester sent on last, else
 * the node e has been sent to longest; never c itself; NULL when none. */
static const char *busyRelay(const Conn *c, const ObjEntry *e)
{
    for (unsigned i = 1; i <= SERVE_RECENT; i++) {
        unsigned k = (recentNext + SERVE_RECENT - i) % SERVE_RECENT;
        if (recent[k].e == e && strcmp(recent[k].peer, c->peerName) != 0)
            return recent[k].peer;
    }
    const char *oldest = uploadOldestPeer(e);
    return oldest && strcmp(oldest, c->peerName) != 0 ? oldest : NULL;
}

/* Answer BUSY for e, naming a relay (busyRelay) when the requester takes
 * relays, and remember the requester as the newest one sent on. */
static void serveBusy(Conn *c, const WireMsg *m, const ObjEntry *e)
{
    const char *peer = (m->u.fetch.flags & WIRE_FETCHR_PARTIAL_OK) ? busyRelay(c, e) : NULL;
    char text[OBJ_WIRE_TEXT_MAX + 1];

    if (peer && strlen(peer) + 6 <= OBJ_WIRE_TEXT_MAX)
        snprintf(text, sizeof(text), "relay %s", peer);
    else
        snprintf(text, sizeof(text), "every upload slot is taken: ask another");
    if (peer && c->peerName[0]) {
        recent[recentNext].e = e;
        snprintf(recent[recentNext].peer, sizeof(recent[recentNext].peer), "%s", c->peerName);
        recentNext = (recentNext + 1) % SERVE_RECENT;
    }
    engineStatsBegin()->redirects++;
    engineStatsEnd();
    engineSendError(c, m->h.reqId, WIRE_ERR_BUSY, text);
}

/* A PART or RPART header (type) for reqId: len bytes from offset of an
 * object of these sizes and (the owner's) checksum. addr and rkey are left
 * for an RPART's caller. */
static WireMsg partMsg(WireType type, uint64_t reqId, uint64_t dataSize, uint64_t metaSize,
                       uint64_t checksum, uint64_t offset, uint64_t len)
{
    WireMsg r = {.h = {.type = (uint8_t)type, .reqId = reqId}};

    r.u.data.size = dataSize;
    r.u.data.metaSize = metaSize;
    r.u.data.checksum = checksum;
    r.u.data.offset = offset;
    r.u.data.len = len;
    return r;
}

/* A walk of streams begins: no stream is unlinked or freed until it ends. */
static void relayWalkBegin(void)
{
    streamsWalking++;
}

/* A walk ends; the outermost frees the streams that went meanwhile. Only
 * unlinks and frees (never calls out), so it cannot re-enter a walk. */
static void relayWalkEnd(void)
{
    ObjListLink *l, *next;

    if (--streamsWalking > 0)
        return;
    objListForEachSafe(&streams, l, next) {
        RelayStream *s = objListEntry(l, RelayStream, link);
        if (s->gone) {
            objListUnlink(&s->link);
            free(s);
        }
    }
}

/* s is over: nothing touches it again (its connection may be freed). It
 * is freed now, or by the sweep at the end of the walks under way. */
static void relayDrop(RelayStream *s)
{
    s->gone = 1;
    if (streamsWalking > 0)
        return;
    objListUnlink(&s->link);
    free(s);
}

/* Drop s once nothing of it is left in the transport: its hold on the
 * object goes (which frees an object given up here meanwhile). */
static void relayFree(RelayStream *s)
{
    Conn *c = s->conn;

    if (s->gone || !s->ended || s->queued > 0 || s->pushing)
        return;
    objTableLock(engineConfig()->table);
    objTableUnpin(engineConfig()->table, s->e, ENGINE_HOLDER_CONN(c->id));
    objTableUnlock(engineConfig()->table);
    if (c->pins > 0)
        c->pins--;
    relayDrop(s);
}

/* End s: nothing more is sent (an ERROR first when why is not NULL), its
 * upload slot is free at once, its hold once its PARTs are out. The ERROR's
 * send may complete or close streams, s among them: a walk holds them. */
static void relayEnd(RelayStream *s, uint16_t code, const char *why)
{
    if (s->ended || s->gone)
        return;
    relayWalkBegin();
    s->ended = 1;
    if (s->slot)
        uploadRemove(s->slot);
    s->slot = NULL;
    if (why)
        engineSendError(s->conn, s->reqId, code, why);
    relayFree(s); /* nothing when its connection closed meanwhile */
    relayWalkEnd();
}

/* How far s's object has landed here: all of it once sealed here, what the
 * transfer says while it runs; -1 when neither (the transfer gave it up, or
 * started it again from a lower offset than what was sent). */
static int relayLanded(RelayStream *s)
{
    ObjEntry *e;
    uint64_t landed, sum;

    objTableLock(engineConfig()->table); /* OBJ.DEL may be deleting it */
    int sealed = s->e->state == OBJ_SEALED && !s->e->deleting;
    int same = sealed && s->e->checksum == s->checksum;
    objTableUnlock(engineConfig()->table);
    if (sealed) {
        s->landed = s->dataSize + s->metaSize;
        return same ? 0 : -1;
    }
    if (fetchPartial(s->id, s->idLen, &e, &landed, &sum) == -1 || e != s->e || sum != s->checksum ||
        landed < s->next)
        return -1;
    s->landed = landed;
    return 0;
}

/* Send s what has landed since its last PART, as far as its queue allows:
 * PARTs of SERVE_PART_MIN..SERVE_PART_MAX bytes (less only at the end, or
 * after SERVE_PART_LINGER_US without more). Ends s at the object's end, and
 * with an ERROR when its bytes can no longer come. */
static void relayPush(RelayStream *s, int64_t now)
{
    uint64_t total = s->dataSize + s->metaSize;

    if (s->ended || s->gone)
        return;
    relayWalkBegin(); /* a send below may complete or close any stream of its connection */
    if (relayLanded(s) == -1) {
        relayEnd(s, WIRE_ERR_NOTSEALED, "the object is no longer received here");
        goto walkEnd;
    }
    s->pushing = 1;
    while (s->queued < SERVE_PARTS_QUEUED && s->next < s->landed) {
        uint64_t len = s->landed - s->next;
        if (len < SERVE_PART_MIN && s->landed < total && now - s->lastUs < SERVE_PART_LINGER_US)
            break;
        if (len > SERVE_PART_MAX)
            len = SERVE_PART_MAX;
        WireMsg r =
            partMsg(WIRE_PART, s->reqId, s->dataSize, s->metaSize, s->checksum, s->next, len);
        EngineStats *es = engineStatsBegin();
        es->uploadedBytes += len;
        engineTpStats(engineTpIndex(s->conn->ops))->servedBytes += len;
        engineStatsEnd();
        const uint8_t *bytes = engineConfig()->arenaBase + s->e->offset + s->next;
        s->next += len;
        s->lastUs = now;
        s->queued++;
        int rc = engineSend(s->conn, &r, bytes, len, (void *)((uintptr_t)s | SERVE_COOKIE_STREAM));
        if (s->gone) /* its connection closed meanwhile */
            goto walkEnd;
        if (rc == -1)
            break;
    }
    s->pushing = 0;
    if (s->next == total)
        relayEnd(s, 0, NULL);
    else if (now - s->lastUs > SERVE_RELAY_WAIT_US)
        relayEnd(s, WIRE_ERR_NOTSEALED, "no new byte of the object landed here in time");
walkEnd:
    relayWalkEnd();
}

/* Push every stream: bytes may have landed. A push may end or close other
 * streams (relayPush): under the walk they stay linked, marked gone. */
static void relayPushAll(void)
{
    int64_t now = utilMonoUs();
    ObjListLink *l;

    relayWalkBegin();
    objListForEach(&streams, l) {
        RelayStream *s = objListEntry(l, RelayStream, link);
        if (!s->gone)
            relayPush(s, now);
    }
    relayWalkEnd();
}

/* A FETCHR with PARTIAL_OK for e, an object being received here (the table
 * is locked by the caller, who made sure e is created, not sealed): hold
 * e and open a relay stream. Returns the stream, or NULL with *why set. */
static RelayStream *relayOpen(Conn *c, const WireMsg *m, ObjEntry *e, const char **why)
{
    RelayStream *s = calloc(1, sizeof(*s));

    if (!s) {
        *why = "out of memory";
        return NULL;
    }
    if (objTablePinCreated(engineConfig()->table, e, ENGINE_HOLDER_CONN(c->id)) != OBJ_ST_OK) {
        free(s);
        *why = "the object is not being received here";
        return NULL;
    }
    s->conn = c;
    s->reqId = m->h.reqId;
    s->e = e;
    memcpy(s->id, m->u.fetch.id, m->u.fetch.idLen);
    s->idLen = m->u.fetch.idLen;
    s->dataSize = e->dataSize;
    s->metaSize = e->metaSize;
    s->next = m->u.fetch.offset;
    s->lastUs = utilMonoUs();
    c->pins++;
    return s;
}

/* Start a relay stream for c's FETCHR (the table was locked and e held by
 * relayOpen, s its result): check it against the transfer running here
 * and send what has landed. Returns 0 (errors are answered on the wire). */
static int serveRelay(Conn *c, const WireMsg *m, RelayStream *s, const char *why)
{
    ObjEntry *e;
    uint64_t landed, sum;

    if (!s) {
        engineSendError(c, m->h.reqId, WIRE_ERR_NOTSEALED, why);
        return 0;
    }
    objListPushFront(&streams, &s->link);
    if (fetchPartial(s->id, s->idLen, &e, &landed, &sum) == -1 || e != s->e) {
        relayEnd(s, WIRE_ERR_NOTSEALED, "the object is not being received here");
        return 0;
    }
    s->checksum = sum;
    const char *source = fetchSource(s->id, s->idLen);
    if (source && !strcmp(source, c->peerName)) { /* it would feed on its own bytes */
        relayEnd(s, WIRE_ERR_BUSY, "the requester is this relay's source: ask another");
        return 0;
    }
    if (s->next >= s->dataSize + s->metaSize) {
        relayEnd(s, WIRE_ERR_PROTO, "offset past the end of the object");
        return 0;
    }
    s->slot = uploadAdd(c, s->e); /* the stream takes its slot while it waits, too */
    if (s->slot)
        s->slot->relay = 1;
    engineStatsBegin()->relayed++;
    engineStatsEnd();
    relayPush(s, utilMonoUs());
    return 0;
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

/* Hold e, an object being received here, for c while an answer from it is
 * out (objTablePinCreated: its memory outlives an abort until unpin), and
 * count it as an upload when large. Returns 0, or -1 when it is no longer
 * a created object. */
static int rrelayHold(Conn *c, ObjEntry *e)
{
    ObjTable *t = engineConfig()->table;

    objTableLock(t);
    ObjStatus st = objTablePinCreated(t, e, ENGINE_HOLDER_CONN(c->id));
    objTableUnlock(t);
    if (st != OBJ_ST_OK)
        return -1;
    c->pins++;
    if (serveIsLarge(e))
        uploadAdd(c, e); /* unpin drops it */
    return 0;
}

/* Open [offset, offset + len) of e (held, all of it landed here) to c's
 * peer and send RPART. The key opens those bytes only; the requester's DONE
 * revokes it, and the hold goes once it no longer opens anything. Returns
 * 0 (an answer, maybe an ERROR, went out) or -1 (c is closing). */
static int rrelaySendRpart(Conn *c, uint64_t reqId, ObjEntry *e, uint64_t sum, uint64_t offset,
                           uint64_t len)
{
    const uint8_t *bytes = engineConfig()->arenaBase + e->offset + offset;
    Rndv *rv = malloc(sizeof(*rv));
    uint32_t rkey = 0;
    void *grant = rv ? c->ops->grantRead(c, bytes, len, &rkey) : NULL;

    if (!grant) { /* logged by the transport, or out of memory */
        free(rv);
        unpin(c, e);
        engineSendError(c, reqId, WIRE_ERR_INTERNAL,
                        "cannot open the landed bytes to RDMA reads (see the relay's log)");
        return 0;
    }
    *rv = (Rndv){
        .conn = c, .reqId = reqId, .e = e, .grant = grant, .sinceUs = utilMonoUs(), .next = rndvs};
    rndvs = rv;
    rrelayCount(c, len, 1);
    WireMsg r = partMsg(WIRE_RPART, reqId, e->dataSize, e->metaSize, sum, offset, len);
    r.u.data.addr = (uint64_t)(uintptr_t)bytes;
    r.u.data.rkey = rkey;
    return engineSend(c, &r, NULL, 0, NULL);
}

static int serveOnFetch(Conn *c, const WireMsg *m);

/* The object of a waiting relay request is no longer being received here:
 * sealed here meanwhile, it is served whole as any holder serves it (from
 * the offset, without a redirect); else the request is refused. */
static void rrelayGone(Conn *c, uint64_t reqId, const char *id, size_t idLen, uint64_t offset)
{
    ObjTable *t = engineConfig()->table;

    objTableLock(t);
    ObjEntry *e = objTableFind(t, id, idLen);
    int sealed = e && e->state == OBJ_SEALED;
    objTableUnlock(t);
    if (!sealed) {
        engineSendError(c, reqId, WIRE_ERR_NOTSEALED, "the object is no longer received here");
        return;
    }
    WireMsg m = {.h = {.type = WIRE_FETCHR, .reqId = reqId}};
    m.u.fetch.id = id;
    m.u.fetch.idLen = (uint16_t)idLen;
    m.u.fetch.offset = offset;
    if (serveOnFetch(c, &m) == -1)
        c->ops->close(c, "cannot answer a relay request");
}

/* Answer an RDMA requester's relay request from what has landed here past
 * offset: RPART over all of it when that is at least rdma-read-min, PART
 * inline when less. waitedUs: how long the request has waited. Returns 1
 * when answered (maybe with an ERROR), 0 when it should wait: nothing past
 * offset has landed, or less than rdma-read-min of a rest still coming, for
 * under SERVE_RRELAY_GATHER_US. */
static int rrelayAnswer(Conn *c, uint64_t reqId, const char *id, size_t idLen, uint64_t offset,
                        int64_t waitedUs)
{
    ObjEntry *e;
    uint64_t landed, sum;

    if (fetchPartial(id, idLen, &e, &landed, &sum) == -1) {
        rrelayGone(c, reqId, id, idLen, offset);
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
    if (rrelayHold(c, e) == -1) {
        rrelayGone(c, reqId, id, idLen, offset);
        return 1;
    }
    if (len >= min) {
        rrelaySendRpart(c, reqId, e, sum, offset, len);
        return 1;
    }
    rrelayCount(c, len, 0);
    WireMsg r = partMsg(WIRE_PART, reqId, e->dataSize, e->metaSize, sum, offset, len);
    /* The hold goes once the bytes are sent (serveOnSendDone). */
    engineSend(c, &r, engineConfig()->arenaBase + e->offset + offset, len, e);
    return 1;
}

/* A FETCHR with PARTIAL_OK from an RDMA requester for an object being
 * received here: answer from what has landed, or wait for it (rrelayPoll,
 * on every landed event and tick). Returns 0. */
static int serveRelayRdma(Conn *c, const WireMsg *m)
{
    const char *source = fetchSource(m->u.fetch.id, m->u.fetch.idLen);

    if (source && !strcmp(source, c->peerName)) { /* it would feed on its own bytes */
        engineSendError(c, m->h.reqId, WIRE_ERR_BUSY,
                        "the requester is this relay's source: ask another");
        return 0;
    }
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
    if (rrelayAnswer(w->conn, w->reqId, w->id, w->idLen, w->offset, now - w->sinceUs) ||
        rrAskingGone)
        return 1;
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

    if (rrAsking) /* an answer being sent got here again: the running pass goes on */
        return;
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

/* A spilled object's serving is over (tierserve.c): its pin of c's cap
 * and its upload slot go. */
static void serveSpilledOver(Conn *c, void *slot)
{
    if (c->pins > 0)
        c->pins--;
    if (slot)
        uploadRemove(slot);
}

/* Serve the spilled object e (sizes and checksum in r, read under the
 * table lock; its file open on fd, taken over here, or -1) as one in
 * memory is served as far as c's cap and the upload slots go, its bytes
 * from tierserve.c's shared read. e is only an upload slot's identity here:
 * no pin holds it. Returns 0, or -1 when c is closing. */
static int serveSpilled(Conn *c, const WireMsg *m, const ObjEntry *e, const WireMsg *r, int fd,
                        uint64_t fileNo)
{
    uint64_t total = r->u.data.size + r->u.data.metaSize;
    uint64_t from = m->h.type == WIRE_FETCHR ? m->u.fetch.offset : 0;

    if (fd < 0) {
        engineLog("warning", "%s: serving a spilled object: cannot open its tier file", c->desc);
        engineSendError(c, m->h.reqId, WIRE_ERR_INTERNAL,
                        "the object's spill tier file cannot be read (see the owner's log)");
        return 0;
    }
    if (from > total) {
        close(fd);
        engineSendError(c, m->h.reqId, WIRE_ERR_PROTO, "offset past the end of the object");
        return 0;
    }
    c->pins++; /* capped in serveOnFetch, as for an object in memory */
    Upload *slot = total >= SERVE_LARGE ? uploadAdd(c, e) : NULL;
    if (slot)
        slot->relay = SERVE_UPLOAD_SPILLED;
    TierServeReq q = {.conn = c,
                      .reqId = m->h.reqId,
                      .slot = slot,
                      .fileNo = fileNo,
                      .fd = fd,
                      .dataSize = r->u.data.size,
                      .metaSize = r->u.data.metaSize,
                      .checksum = r->u.data.checksum,
                      .from = from,
                      .over = serveSpilledOver};
    return tierServeFetch(&q);
}

/* A FETCH that found its object sealed with the checksum still being taken
 * (sealer.c): it waits here, and serveSumPoll hands it to serveOnFetch
 * again once the checksum is known, so no copy leaves without it. */
typedef struct SumWait {
    Conn *conn;
    WireMsg m; /* its id points at id below */
    char id[OBJ_WIRE_ID_MAX];
    ObjListLink link; /* in sumWaits */
} SumWait;

static ObjList sumWaits = {&sumWaits, &sumWaits}; /* SumWait.link */

static int serveOnFetch(Conn *c, const WireMsg *m);

/* Park FETCH m of c until its object's checksum is known. Answers INTERNAL
 * when there is no memory for it. */
static void sumWaitAdd(Conn *c, const WireMsg *m)
{
    SumWait *w = malloc(sizeof(*w));

    if (!w) {
        engineSendError(c, m->h.reqId, WIRE_ERR_INTERNAL, "out of memory");
        return;
    }
    w->conn = c;
    w->m = *m;
    memcpy(w->id, m->u.fetch.id, m->u.fetch.idLen);
    w->m.u.fetch.id = w->id;
    objListPushBack(&sumWaits, &w->link);
    engineStatsBegin()->checksumWaits++;
    engineStatsEnd();
}

/* Hand the waiting FETCHes whose object is no longer pending (its checksum
 * known, or it is gone) back to serveOnFetch. An answer may close its
 * connection, which drops that connection's waits: the walk starts again
 * after each. */
static void sumWaitPoll(void)
{
    ObjTable *t = engineConfig()->table;

    for (;;) {
        SumWait *ready = NULL;
        ObjListLink *l;
        objTableLock(t);
        objListForEach(&sumWaits, l) {
            SumWait *w = objListEntry(l, SumWait, link);
            ObjEntry *e = objTableFind(t, w->id, w->m.u.fetch.idLen);
            if (!e || !e->sumPending) {
                ready = w;
                break;
            }
        }
        objTableUnlock(t);
        if (!ready)
            return;
        objListUnlink(&ready->link);
        int rc = serveOnFetch(ready->conn, &ready->m);
        Conn *c = ready->conn;
        free(ready);
        if (rc == -1)
            c->ops->close(c, "a send failed");
    }
}

/* c is gone: forget its waiting FETCHes. */
static void sumWaitConnClosed(Conn *c)
{
    ObjListLink *l, *next;

    objListForEachSafe(&sumWaits, l, next) {
        SumWait *w = objListEntry(l, SumWait, link);
        if (w->conn == c) {
            objListUnlink(&w->link);
            free(w);
        }
    }
}

/* What serveOnFetch decided about a FETCH under the table lock. */
typedef struct ServeDecision {
    ObjEntry *e;     /* the object asked for, NULL when there is none */
    ObjStatus st;    /* OBJ_ST_OK: pinned (or busy/partial); SPILLED: on the tier; else why not */
    int sumWait;     /* its checksum is still being taken: the FETCH waits (sumWaitAdd) */
    int busy;        /* answer BUSY (serveRedirect) */
    int partial;     /* a relay answer: the object is still being received here */
    RelayStream *rs; /* partial on a stream: the relay stream opened, or NULL */
    const char *relayWhy; /* why rs is NULL */
    WireMsg spilled;      /* SPILLED: its sizes and checksum, read under the lock */
    int tierFd;           /* SPILLED: its tier file, open (or -1) */
    uint64_t tierFileNo;
} ServeDecision;

/* Decide how FETCH m of c is answered, under the table lock: find the
 * object, and take what the answer needs while the object cannot change
 * (the pin, a relay stream's hold, the spilled object's file). Sends
 * nothing. Can't fail (a failure is a decision: d->st). */
static void serveDecide(Conn *c, const WireMsg *m, ServeDecision *d)
{
    ObjTable *t = engineConfig()->table;

    *d = (ServeDecision){.tierFd = -1};
    objTableLock(t);
    ObjEntry *e = objTableFind(t, m->u.fetch.id, m->u.fetch.idLen);
    d->e = e;
    if (e && e->sumPending) {
        objTableUnlock(t);
        d->sumWait = 1;
        return;
    }
    d->busy = e && serveRedirect(c, m, e);
    d->partial = e && e->state != OBJ_SEALED && !d->busy && m->h.type == WIRE_FETCHR &&
                 (m->u.fetch.flags & WIRE_FETCHR_PARTIAL_OK);
    d->st = !e                      ? OBJ_ST_NOTFOUND
            : d->busy || d->partial ? OBJ_ST_OK
                                    : objTablePin(t, e, ENGINE_HOLDER_CONN(c->id));
    if (d->partial && !c->ops->grantRead)
        d->rs = relayOpen(c, m, e, &d->relayWhy);
    if (d->st == OBJ_ST_SPILLED) {
        d->tierFd = objTableTierOpen(t, e); /* opened before any unlink */
        d->spilled.u.data.size = e->dataSize;
        d->spilled.u.data.metaSize = e->metaSize;
        d->spilled.u.data.checksum = e->checksum;
        d->tierFileNo = e->fileNo;
    }
    objTableUnlock(t);
}

/* Send the pinned object e (its pin taken by serveDecide) to c: inline in
 * a DATA, or opened to the requester's reads by RNDV (the whole object) or
 * RPART (the bytes from an offset). Returns 0, or -1 when c is closing. */
static int serveSendPinned(Conn *c, const WireMsg *m, ObjEntry *e)
{
    WireMsg r = {.h = {.reqId = m->h.reqId}};

    c->pins++; /* capped in serveOnFetch (and a stream transport stops reading at the cap) */
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

/* FETCH or FETCHR m from c: decide under the lock (serveDecide), then
 * send what was decided. Returns 0, or -1 when c must close. */
static int serveOnFetch(Conn *c, const WireMsg *m)
{
    ServeDecision d;

    if (m->h.reqId == 0) {
        engineLog("warning", "%s: FETCH without a request id", c->desc);
        return -1;
    }
    if (engineConnBusy(c)) { /* a peer past its window: no pin, no queued bytes */
        engineSendError(c, m->h.reqId, WIRE_ERR_BUSY, "too many requests outstanding");
        return 0;
    }
    serveDecide(c, m, &d);
    if (d.sumWait) {
        sumWaitAdd(c, m);
        return 0;
    }
    if (d.busy) {
        serveBusy(c, m, d.e);
        return 0;
    }
    if (d.partial)
        return c->ops->grantRead ? serveRelayRdma(c, m) : serveRelay(c, m, d.rs, d.relayWhy);
    if (d.st == OBJ_ST_SPILLED)
        return serveSpilled(c, m, d.e, &d.spilled, d.tierFd, d.tierFileNo);
    if (d.st == OBJ_ST_NOTFOUND) {
        engineSendError(c, m->h.reqId, WIRE_ERR_NOTFOUND, "no such object on this node");
        return 0;
    }
    if (d.st != OBJ_ST_OK) {
        engineSendError(c, m->h.reqId, WIRE_ERR_NOTSEALED, "the object is not sealed");
        return 0;
    }
    return serveSendPinned(c, m, d.e);
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
    ObjListLink *l;
    objListForEach(&streams, l) { /* the requester stops a relay stream */
        RelayStream *s = objListEntry(l, RelayStream, link);
        if (!s->gone && s->conn == c && s->reqId == m->h.reqId) {
            relayEnd(s, 0, NULL);
            break;
        }
    }
    return 0; /* a DONE for something already released: harmless */
}

static void serveOnSendDone(Conn *c, void *cookie)
{
    uintptr_t tag = (uintptr_t)cookie & (SERVE_COOKIE_TIER | SERVE_COOKIE_STREAM);
    void *p = (void *)((uintptr_t)cookie & ~(uintptr_t)(SERVE_COOKIE_TIER | SERVE_COOKIE_STREAM));

    if (tag == SERVE_COOKIE_TIER) {
        tierServeSent(c, cookie);
    } else if (tag == SERVE_COOKIE_STREAM) {
        RelayStream *s = p;
        s->queued--;
        if (s->gone || s->pushing) /* over, or inside relayPush: it goes on */
            return;
        if (s->ended)
            relayFree(s);
        else
            relayPush(s, utilMonoUs());
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
    objListForEachSafe(&streams, it, next) { /* their holds go with c's pins below */
        RelayStream *s = objListEntry(it, RelayStream, link);
        if (s->conn == c && !s->gone)
            relayDrop(s); /* freed now, or once the walks under way end */
    }
    tierServeConnClosed(c); /* sends that never completed, reads still awaited */
    objTableLock(engineConfig()->table);
    objTableHolderGone(engineConfig()->table, ENGINE_HOLDER_CONN(c->id));
    objTableUnlock(engineConfig()->table);
    c->pins = 0;
    uploadDrop(c, NULL, 0); /* the streams' slots too */
    rrelayConnClosed(c);
    sumWaitConnClosed(c);
}

/* Bytes landed here (some payload moved, or one is complete): relay
 * streams and waiting RDMA relay requests may have more to send. */
static void serveOnLanded(Conn *c)
{
    (void)c;
    if (objListFirst(&streams))
        relayPushAll();
    if (objListFirst(&rrWaits))
        rrelayPoll();
}

/* RDMA reads finished here: what they brought may be relayed. */
static void serveOnReadDone(Conn *c, void *cookie, int ok, const uint64_t *sum)
{
    (void)cookie;
    (void)ok;
    (void)sum;
    serveOnLanded(c);
}

static void serveTick(void)
{
    int64_t now = utilMonoUs();

    relayPushAll();
    rrelayPoll();
    sumWaitPoll();
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
    .payloadMoved = serveOnLanded,
    .payloadDone = serveOnLanded,
    .readDone = serveOnReadDone,
    .sendDone = serveOnSendDone,
    .connClosed = serveOnConnClosed,
    .tick = serveTick,
    .shutdown = tierServeShutdown,
};
