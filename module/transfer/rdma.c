/*
 * rdma.c - the RDMA transport: librdmacm for connections, libibverbs RC
 * queue pairs for data, behind the same operations table as tcp.c.
 *
 * Memory: the whole arena is registered once, at start-up, with remote
 * read access (peers RDMA_READ large objects straight out of it) and local
 * write access (our reads land straight in created objects). Each
 * connection adds a receive ring (the only memory with remote WRITE access)
 * and a few send frame buffers. Nothing is registered on the transfer path.
 *
 * Two rings per direction: until the peer has proved the cluster secret, it
 * may only write into a handshake ring of a few frame-sized slots (about
 * 32 KiB, described in the rdma_cm private data), and connections still in
 * that state are capped, overall and per source address. Once the engine's
 * handshake succeeds (the transport's authenticated op), each side
 * registers its full ring (inline payloads up to 256 KiB per slot) and
 * announces it in a RING message, its last write into the peer's handshake
 * ring. A write into the full ring carries RDMA_IMM_FULL in its immediate:
 * the first one tells the receiver that the peer has switched, so the
 * handshake ring is released; RC delivers in order, so nothing can land in
 * it afterwards. Between sending RING and that first write, credits of the
 * handshake ring are no longer returned: the peer is about to abandon it,
 * and a credit arriving after its switch would be counted against the new
 * ring. The handshake needs at most three writes each way, fewer than the
 * handshake ring's credits, so no credit return is ever needed before it.
 *
 * Control ring: every message is an RDMA_WRITE_WITH_IMM into the peer's next
 * ring slot; the immediate names the slot and the length (ring.h), the
 * peer's posted receive WR tells it a message arrived, and credits come
 * back piggybacked on our next message or in a CREDIT message. A DATA
 * message writes its frame from a send buffer and its payload straight from
 * the arena (two scatter/gather entries): small objects are inline without
 * a copy on the sending side; the receiver copies them out of the ring.
 * Large objects go by rendezvous: RNDV (address, rkey, length), then this
 * side posts chunked RDMA_READs, several in flight, into the created object.
 *
 * Completions: one completion channel for all CQs, non-blocking, in the
 * engine's epoll. Each event is acked at once, the CQ re-armed, then polled
 * dry: no event is lost and an idle node does not spin.
 *
 * Queues: what waits for the peer's credits is capped in bytes
 * (RDMA_PEND_MAX_BYTES; past it the peer is not reading and is dropped),
 * and a queue that does not move is reported to the engine, which closes
 * the connection after its send-stall limit.
 *
 * Teardown: the QP is moved to the error state and its outstanding work is
 * flushed before any memory it may touch is released or reported free.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "rdma.h"
#include "rdmaproto.h"
#include "common/util.h"
#include "rdma/ring.h"
#include "rdma/verbs.h"

/* The engine core, as given to rdmaTransportInit. */
static const TransportHost *host;

/* ---- wire: what rdma_cm private data carries ------------------------------------ */

/* The private data, immediates and receive rules are in rdmaproto.h. */

/* ---- tunables ---------------------------------------------------------------------- */

#define RDMA_SLOTS        16
#define RDMA_SLOT_SIZE    (256 * 1024 + RDMA_FRAME_MAX) /* inline payloads up to 256 KiB */
#define RDMA_HS_SLOTS     8 /* handshake ring: frames only, no payloads */
#define RDMA_HS_SLOT_SIZE RDMA_FRAME_MAX
/* Incoming connections that have not proved the secret yet, overall and
 * from one address: more are rejected before anything is allocated. */
#define RDMA_PREAUTH_MAX            64
#define RDMA_PREAUTH_MAX_PER_SOURCE 8
/* Bytes of frames waiting for the peer's credits; past it the peer is not
 * reading what we owe it (or withholds credits on purpose). */
#define RDMA_PEND_MAX_BYTES (1u << 20)
#define RDMA_READ_CHUNK     (1u << 20)
#define RDMA_READ_WINDOW    16 /* chunks in flight per connection */
#define RDMA_SEND_WR        (RDMA_SLOTS + RDMA_READ_WINDOW + 4)
#define RDMA_CQ_DEPTH       (RDMA_SEND_WR + RDMA_SLOTS + 8)
#define RDMA_RESOLVE_MS     2000
#define RDMA_FLUSH_MAX_MS   2000
#define RDMA_WR_SEND        1u
#define RDMA_WR_READ        2u
#define RDMA_WR_RECV        3u
_Static_assert(RDMA_SLOT_SIZE <= RING_MAX_LEN, "slot length must fit the immediate");
_Static_assert(RDMA_SLOTS <= RDMA_PEER_SLOTS_MAX && RDMA_HS_SLOTS >= 4,
               "ring sizes must fit the immediate and the credit rules");

/* ---- context -------------------------------------------------------------------------- */

typedef struct PendingMsg {
    uint32_t frameLen;
    int creditOnly;
    int isRing; /* our RING announcement */
    const uint8_t *payload;
    uint32_t payloadLen;
    void *cookie;
    struct PendingMsg *next;
    uint8_t frame[]; /* frameLen bytes */
} PendingMsg;

typedef struct ReadOp {
    struct RdmaConn *c;
    void *cookie;
    uint8_t *dst;
    uint64_t raddr, len, posted;
    uint32_t rkey;
    int inflight, failed;
    struct ReadOp *next;
} ReadOp;

typedef struct RdmaConn {
    Conn base; /* must be first */
    struct rdma_cm_id *id;
    struct ibv_cq *cq;
    uint8_t *rxRing; /* the ring the peer writes now: handshake, then full */
    struct ibv_mr *rxMr;
    uint8_t *fullRing; /* announced in our RING, not yet written by the peer */
    struct ibv_mr *fullMr;
    int authed;   /* the engine's handshake succeeded */
    int peerFull; /* the peer's RING arrived: we write into its full ring */
    size_t pendBytes;
    uint8_t *txBuf; /* RDMA_SLOTS frame buffers */
    struct ibv_mr *txMr;
    void *txCookie[RDMA_SLOTS];
    uint32_t txBusy; /* bitmap of frame buffers in flight */
    RingTx tx;
    RdmaRx rx; /* which of our rings the peer writes, slot order, credits owed */
    uint64_t peerAddr;
    uint32_t peerRkey, peerSlotSize, peerSlots;
    PendingMsg *pendHead, *pendTail;
    ReadOp *reads; /* in order; the head is the one being posted */
    int readsInflight;
    int outstanding; /* send-queue WRs posted and not completed */
    /* The completions rdmaPollCq took off the CQ and has not handled yet: a
     * close in the middle of a batch accounts for them before it waits for
     * the rest (they will never be polled again). */
    struct ibv_wc *batch;
    int batchNext, batchLen;
    int established, closing, inHandler, qpUp;
    struct RdmaConn *nextAll;
} RdmaConn;

static struct {
    struct rdma_event_channel *ec;
    struct rdma_cm_id *listenId;
    struct ibv_context *verbs;
    struct ibv_pd *pd;
    struct ibv_comp_channel *comp;
    struct ibv_mr *arenaMr;
    uint8_t *arenaBase;
    uint64_t arenaSize;
    int rdAtomic;
    RdmaConn *all;
} rd;

extern const TransportOps rdmaTransport;

static void rdmaCloseConn(Conn *base, const char *why);
static void rdmaReapReads(struct RdmaConn *c);

/* ---- verbs helpers ----------------------------------------------------------------- */

static int setNonBlocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl == -1 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void rdmaFillPriv(RdmaConn *c, uint8_t priv[RDMA_PRIV_LEN])
{
    RdmaRingDesc r = {.addr = (uint64_t)(uintptr_t)c->rxRing,
                      .rkey = c->rxMr->rkey,
                      .slots = RDMA_HS_SLOTS,
                      .slotSize = RDMA_HS_SLOT_SIZE};
    rdmaPrivEncode(&r, priv);
}

/* Take the peer's handshake ring from its private data. Returns 0, or -1
 * with a reason. */
static int rdmaParsePriv(RdmaConn *c, const void *data, size_t len, const char **why)
{
    RdmaRingDesc r;

    if (rdmaPrivDecode(data, len, &r, why) == -1)
        return -1;
    c->peerSlots = r.slots;
    c->peerSlotSize = r.slotSize;
    c->peerRkey = r.rkey;
    c->peerAddr = r.addr;
    ringTxInit(&c->tx, c->peerSlots);
    return 0;
}

static int rdmaPostRecv(RdmaConn *c)
{
    struct ibv_recv_wr wr = {.wr_id = RDMA_WR_RECV, .sg_list = NULL, .num_sge = 0}, *bad;
    int rc = ibv_post_recv(c->id->qp, &wr, &bad);

    if (rc)
        host->log("warning", "%s: ibv_post_recv: %s", c->base.desc, strerror(rc));
    return rc ? -1 : 0;
}

/* Allocate and register a receive ring of len bytes the peer may write.
 * Returns 0, or -1 with a reason. */
static int rdmaRingAlloc(size_t len, uint8_t **ring, struct ibv_mr **mr, char *err, size_t errLen)
{
    /* Page-aligned so that MADV_DONTFORK (ibv_fork_init) covers whole pages. */
    if (posix_memalign((void **)ring, 4096, len)) {
        *ring = NULL;
        snprintf(err, errLen, "out of memory for a %zu-byte ring", len);
        return -1;
    }
    *mr = ibv_reg_mr(rd.pd, *ring, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!*mr) {
        snprintf(err, errLen, "ibv_reg_mr (ring): %s", strerror(errno));
        free(*ring);
        *ring = NULL;
        return -1;
    }
    return 0;
}

static void rdmaRingFree(RdmaConn *c, uint8_t **ring, struct ibv_mr **mr)
{
    if (*mr) {
        int rc = ibv_dereg_mr(*mr);
        if (rc)
            host->log("warning", "%s: ibv_dereg_mr (ring): %s", c->base.desc, strerror(rc));
    }
    free(*ring);
    *ring = NULL;
    *mr = NULL;
}

/* Allocate the CQ, QP, handshake ring and send buffers of a connection, and
 * post its receives. Returns 0, or -1 with a reason (what was set up is
 * undone by rdmaCloseConn, which checks each resource). */
static int rdmaSetupConn(RdmaConn *c, char *err, size_t errLen)
{
    if (c->id->verbs != rd.verbs) {
        snprintf(err, errLen, "connection on another RDMA device than the arena's");
        return -1;
    }
    if (verbsCreateRcQp(c->id, rd.pd, rd.comp, c, RDMA_CQ_DEPTH, RDMA_SEND_WR, RDMA_SLOTS, 2,
                        &c->cq, err, errLen) == -1)
        return -1;
    c->qpUp = 1;
    if (rdmaRingAlloc((size_t)RDMA_HS_SLOTS * RDMA_HS_SLOT_SIZE, &c->rxRing, &c->rxMr, err,
                      errLen) == -1)
        return -1;
    size_t txLen = (size_t)RDMA_SLOTS * RDMA_FRAME_MAX;
    if (posix_memalign((void **)&c->txBuf, 4096, txLen)) {
        c->txBuf = NULL;
        snprintf(err, errLen, "out of memory for the send buffers");
        return -1;
    }
    c->txMr = ibv_reg_mr(rd.pd, c->txBuf, txLen, IBV_ACCESS_LOCAL_WRITE);
    if (!c->txMr) {
        snprintf(err, errLen, "ibv_reg_mr (send buffers): %s", strerror(errno));
        return -1;
    }
    rdmaRxInit(&c->rx, RDMA_HS_SLOTS, RDMA_HS_SLOT_SIZE, RDMA_SLOTS, RDMA_SLOT_SIZE);
    /* Receive WRs carry no buffer: one per slot of the larger ring, so the
     * count never has to change when the rings do. */
    for (int i = 0; i < RDMA_SLOTS; i++) {
        if (rdmaPostRecv(c) == -1) {
            snprintf(err, errLen, "cannot post receives");
            return -1;
        }
    }
    return 0;
}

static void rdmaConnParam(struct rdma_conn_param *cp, const uint8_t priv[RDMA_PRIV_LEN])
{
    memset(cp, 0, sizeof(*cp));
    cp->private_data = priv;
    cp->private_data_len = RDMA_PRIV_LEN;
    cp->initiator_depth = (uint8_t)rd.rdAtomic;
    cp->responder_resources = (uint8_t)rd.rdAtomic;
    cp->retry_count = 7;
    cp->rnr_retry_count = 7; /* infinite: receives are always reposted */
}

/* ---- sending ---------------------------------------------------------------------- */

/* Post one message into the peer's next slot. Returns 0, 1 when resources
 * (credits, frame buffers) are short (try later), or -1 on a verbs error. */
static int rdmaPostMsg(RdmaConn *c, PendingMsg *pm)
{
    int buf = __builtin_ffs((int)~c->txBusy) - 1;

    if (buf < 0 || buf >= RDMA_SLOTS)
        return 1;
    int slot = ringTxTake(&c->tx, pm->creditOnly);
    if (slot < 0)
        return 1;
    uint8_t *frame = c->txBuf + (size_t)buf * RDMA_FRAME_MAX;
    memcpy(frame, pm->frame, pm->frameLen);
    /* Piggyback every credit we owe (header bytes 2..3, little-endian), but
     * none of a handshake ring we have told the peer to leave. */
    uint32_t cr = rdmaRxTakeCredits(&c->rx, 0xFFFF);
    frame[2] = (uint8_t)(cr & 0xFF);
    frame[3] = (uint8_t)(cr >> 8);

    struct ibv_sge sge[2] = {
        {.addr = (uintptr_t)frame, .length = pm->frameLen, .lkey = c->txMr->lkey},
        {.addr = (uintptr_t)pm->payload, .length = pm->payloadLen, .lkey = rd.arenaMr->lkey},
    };
    struct ibv_send_wr wr = {0}, *bad;
    wr.wr_id = ((uint64_t)buf << 3) | RDMA_WR_SEND;
    wr.sg_list = sge;
    wr.num_sge = pm->payloadLen ? 2 : 1;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(rdmaImmEncode((uint32_t)slot, pm->frameLen + pm->payloadLen, c->peerFull));
    wr.wr.rdma.remote_addr = c->peerAddr + (uint64_t)slot * c->peerSlotSize;
    wr.wr.rdma.rkey = c->peerRkey;
    int rc = ibv_post_send(c->id->qp, &wr, &bad);
    if (rc) {
        host->log("warning", "%s: ibv_post_send (ring write): %s", c->base.desc, strerror(rc));
        return -1;
    }
    c->txBusy |= 1u << buf;
    c->txCookie[buf] = pm->cookie;
    c->outstanding++;
    if (pm->isRing)
        c->rx.announced = 1;
    return 0;
}

/* Queue a CREDIT message if we owe many credits and have nothing else to
 * carry them. */
static void rdmaMaybeCredit(RdmaConn *c)
{
    if (c->pendHead || (c->rx.announced && !c->rx.full) || !ringRxWantsCreditMsg(&c->rx.ring))
        return;
    PendingMsg *pm = calloc(1, sizeof(*pm) + RDMA_FRAME_MAX);
    if (!pm)
        return;
    WireMsg m = {.h = {.type = WIRE_CREDIT}};
    m.u.credit.credits = 0; /* the header's piggyback field carries them */
    int len = wireEncode(&m, pm->frame, RDMA_FRAME_MAX);
    pm->frameLen = (uint32_t)len;
    pm->creditOnly = 1;
    c->pendHead = c->pendTail = pm;
    c->pendBytes += sizeof(*pm) + pm->frameLen;
}

/* Post queued messages while credits and buffers last. Returns 0 or -1
 * (the conn was closed). */
static int rdmaPump(RdmaConn *c)
{
    if (!c->established || c->closing)
        return 0;
    rdmaMaybeCredit(c);
    int moved = 0;
    while (c->pendHead) {
        int rc = rdmaPostMsg(c, c->pendHead);
        if (rc == 1)
            break;
        if (rc == -1) {
            rdmaCloseConn(&c->base, "cannot post a ring write");
            return -1;
        }
        PendingMsg *pm = c->pendHead;
        c->pendHead = pm->next;
        if (!c->pendHead)
            c->pendTail = NULL;
        c->pendBytes -= sizeof(*pm) + pm->frameLen;
        free(pm);
        moved = 1;
    }
    /* The engine closes a connection whose queue stops moving. */
    if (!c->pendHead)
        c->base.txStallSinceUs = 0;
    else if (moved || !c->base.txStallSinceUs)
        c->base.txStallSinceUs = utilMonoUs();
    return 0;
}

/* Queue a frame (and its inline payload) for the peer; rdmaPump posts it
 * when credits allow. Returns 0, or -1 when c was closed (out of memory, a
 * frame that cannot fit, or a peer that lets too much pile up). */
static int rdmaQueue(RdmaConn *c, WireMsg *m, const void *payload, size_t payloadLen, void *cookie,
                     int isRing)
{
    uint8_t frame[RDMA_FRAME_MAX];

    m->h.credits = 0;
    int len = wireEncode(m, frame, sizeof(frame));
    if (len < 0 ||
        (uint64_t)len + payloadLen > (c->peerSlotSize ? c->peerSlotSize : RDMA_HS_SLOT_SIZE)) {
        rdmaCloseConn(&c->base, "message does not fit a ring slot");
        return -1;
    }
    if (c->pendBytes + sizeof(PendingMsg) + (size_t)len > RDMA_PEND_MAX_BYTES) {
        char why[128];
        snprintf(why, sizeof(why), "over %u bytes wait for credits the peer does not return",
                 RDMA_PEND_MAX_BYTES);
        host->log("warning", "%s: %s", c->base.desc, why);
        rdmaCloseConn(&c->base, why);
        return -1;
    }
    PendingMsg *pm = calloc(1, sizeof(*pm) + (size_t)len);
    if (!pm) {
        rdmaCloseConn(&c->base, "out of memory for the send queue");
        return -1;
    }
    memcpy(pm->frame, frame, (size_t)len);
    pm->frameLen = (uint32_t)len;
    pm->isRing = isRing;
    pm->payload = payload;
    pm->payloadLen = (uint32_t)payloadLen;
    pm->cookie = cookie;
    c->pendBytes += sizeof(*pm) + pm->frameLen;
    if (c->pendTail)
        c->pendTail->next = pm;
    else
        c->pendHead = pm;
    c->pendTail = pm;
    return rdmaPump(c);
}

static int rdmaSend(Conn *base, WireMsg *m, const void *payload, size_t payloadLen, void *cookie)
{
    RdmaConn *c = (RdmaConn *)base;

    if (c->closing)
        return -1;
    if (payloadLen && ((const uint8_t *)payload < rd.arenaBase ||
                       (const uint8_t *)payload + payloadLen > rd.arenaBase + rd.arenaSize)) {
        rdmaCloseConn(base, "inline payload outside the registered arena");
        return -1;
    }
    return rdmaQueue(c, m, payload, payloadLen, cookie, 0);
}

/* The engine's handshake succeeded: register the full ring and announce it
 * (RING, queued before any request the sides send next). Returns 0 or -1. */
static int rdmaAuthenticated(Conn *base)
{
    RdmaConn *c = (RdmaConn *)base;
    char err[128];

    if (c->closing || c->authed)
        return c->closing ? -1 : 0;
    c->authed = 1;
    if (rdmaRingAlloc((size_t)RDMA_SLOTS * RDMA_SLOT_SIZE, &c->fullRing, &c->fullMr, err,
                      sizeof(err)) == -1) {
        host->log("warning", "%s: %s", c->base.desc, err);
        return -1;
    }
    WireMsg m = {.h = {.type = WIRE_RING}};
    m.u.ring.addr = (uint64_t)(uintptr_t)c->fullRing;
    m.u.ring.rkey = c->fullMr->rkey;
    m.u.ring.slots = RDMA_SLOTS;
    m.u.ring.slotSize = RDMA_SLOT_SIZE;
    return rdmaQueue(c, &m, NULL, 0, NULL, 1);
}

static size_t rdmaMaxInline(Conn *base)
{
    RdmaConn *c = (RdmaConn *)base;
    /* Nothing inline until the peer's full ring is known: a handshake ring
     * holds frames only. */
    return c->peerFull ? c->peerSlotSize - RDMA_FRAME_MAX : 0;
}

static uint32_t rdmaArenaRkey(Conn *base)
{
    return rd.arenaMr->rkey;
}

/* ---- one-sided reads ------------------------------------------------------------------ */

/* Post read chunks while the window allows. Returns 0 or -1 (verbs error). */
static int rdmaPumpReads(RdmaConn *c)
{
    for (ReadOp *op = c->reads; op && c->readsInflight < RDMA_READ_WINDOW; op = op->next) {
        while (op->posted < op->len && c->readsInflight < RDMA_READ_WINDOW) {
            uint64_t n = op->len - op->posted;
            if (n > RDMA_READ_CHUNK)
                n = RDMA_READ_CHUNK;
            struct ibv_sge sge = {.addr = (uintptr_t)(op->dst + op->posted),
                                  .length = (uint32_t)n,
                                  .lkey = rd.arenaMr->lkey};
            struct ibv_send_wr wr = {0}, *bad;
            wr.wr_id = (uint64_t)(uintptr_t)op | RDMA_WR_READ;
            wr.sg_list = &sge;
            wr.num_sge = 1;
            wr.opcode = IBV_WR_RDMA_READ;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr.rdma.remote_addr = op->raddr + op->posted;
            wr.wr.rdma.rkey = op->rkey;
            int rc = ibv_post_send(c->id->qp, &wr, &bad);
            if (rc) {
                host->log("warning", "%s: ibv_post_send (read): %s", c->base.desc, strerror(rc));
                return -1;
            }
            op->posted += n;
            op->inflight++;
            c->readsInflight++;
            c->outstanding++;
        }
    }
    return 0;
}

static int rdmaReadRemote(Conn *base, void *dst, uint64_t len, uint64_t raddr, uint32_t rkey,
                          void *cookie)
{
    RdmaConn *c = (RdmaConn *)base;
    uint8_t *d = dst;

    if (c->closing || d < rd.arenaBase || d + len > rd.arenaBase + rd.arenaSize)
        return -1;
    ReadOp *op = calloc(1, sizeof(*op));
    if (!op)
        return -1;
    *op = (ReadOp){.c = c, .cookie = cookie, .dst = d, .raddr = raddr, .len = len, .rkey = rkey};
    op->failed = 0;
    ReadOp **pp = &c->reads;
    while (*pp)
        pp = &(*pp)->next;
    *pp = op;
    if (rdmaPumpReads(c) == -1) {
        rdmaCloseConn(base, "cannot post RDMA reads");
        return 0; /* the close reported the read as failed */
    }
    if (len == 0)
        rdmaReapReads(c);
    return 0;
}

/* Report and drop finished read ops (all chunks back, or failed with none
 * in flight) at the head of the list, in order. */
static void rdmaReapReads(RdmaConn *c)
{
    while (c->reads && c->reads->inflight == 0 &&
           (c->reads->posted == c->reads->len || c->reads->failed)) {
        ReadOp *op = c->reads;
        c->reads = op->next;
        void *cookie = op->cookie;
        int ok = !op->failed;
        free(op);
        host->onReadDone(&c->base, cookie, ok);
        if (c->closing)
            return;
    }
}

/* ---- receiving --------------------------------------------------------------------- */

/* The peer wrote into our full ring for the first time: it has left the
 * handshake ring, and nothing can land there any more (RC is in order). */
static void rdmaRxSwitch(RdmaConn *c)
{
    rdmaRingFree(c, &c->rxRing, &c->rxMr);
    c->rxRing = c->fullRing;
    c->rxMr = c->fullMr;
    c->fullRing = NULL;
    c->fullMr = NULL;
}

/* The peer announced its full ring: our next writes go there, with the
 * credits of a ring nobody has written yet. Returns 0, or -1 with a reason. */
static int rdmaTxSwitch(RdmaConn *c, const WireMsg *m, const char **why)
{
    if (!c->authed || c->peerFull) {
        *why = c->peerFull ? "a second RING" : "RING before the handshake succeeded";
        return -1;
    }
    if (!rdmaRingGeometryOk(m->u.ring.slots, m->u.ring.slotSize)) {
        *why = "RING geometry out of range";
        return -1;
    }
    c->peerAddr = m->u.ring.addr;
    c->peerRkey = m->u.ring.rkey;
    c->peerSlots = m->u.ring.slots;
    c->peerSlotSize = m->u.ring.slotSize;
    ringTxInit(&c->tx, c->peerSlots);
    c->peerFull = 1;
    return 0;
}

/* A ring write arrived. Returns 0, or -1 on a protocol violation. */
static int rdmaOnRingMsg(RdmaConn *c, uint32_t imm)
{
    uint32_t slot, len;
    const char *why = "";
    int switched;
    size_t payLen;
    WireMsg m;

    if (rdmaRxAccept(&c->rx, imm, &slot, &len, &switched, &why) == -1)
        goto out_bad;
    if (switched)
        rdmaRxSwitch(c);
    const uint8_t *p = c->rxRing + (size_t)slot * c->rx.slotSize;
    if (rdmaCheckMsg(p, len, &m, &payLen, &why) == -1)
        goto out_bad;
    if (ringTxGrant(&c->tx, m.h.credits) == -1) {
        why = "peer returned more credits than it owes";
        goto out_bad;
    }
    if (m.h.type == WIRE_RING && rdmaTxSwitch(c, &m, &why) == -1)
        goto out_bad;
    if (rdmaPostRecv(c) == -1)
        return -1;
    if (m.h.type == WIRE_CREDIT || m.h.type == WIRE_RING)
        return 0;
    if (host->onFrame(&c->base, &m, p + OBJ_WIRE_HDR_LEN + m.h.bodyLen, payLen) == -1) {
        if (!c->closing)
            rdmaCloseConn(&c->base, "protocol error (see the previous log line)");
        return -1;
    }
    return 0;

out_bad:
    host->countBadFrame();
    host->log("warning", "%s: bad ring message: %s", c->base.desc, why);
    rdmaCloseConn(&c->base, why);
    return -1;
}

/* Handle one work completion. Returns 0, or -1 when the conn was closed. */
static int rdmaOnWc(RdmaConn *c, const struct ibv_wc *wc)
{
    uint32_t kind = (uint32_t)(wc->wr_id & 7);

    if (kind == RDMA_WR_READ) {
        ReadOp *op = (ReadOp *)(uintptr_t)(wc->wr_id & ~7ULL);
        op->inflight--;
        c->readsInflight--;
        c->outstanding--;
        if (wc->status != IBV_WC_SUCCESS) {
            op->failed = 1;
            if (!c->closing)
                host->log("warning", "%s: RDMA read failed: %s", c->base.desc,
                          ibv_wc_status_str(wc->status));
        }
        if (c->closing)
            return 0;
        if (wc->status != IBV_WC_SUCCESS) {
            rdmaCloseConn(&c->base, "RDMA read failed (QP in error)");
            return -1;
        }
        rdmaReapReads(c);
        if (!c->closing && rdmaPumpReads(c) == -1) {
            rdmaCloseConn(&c->base, "cannot post RDMA reads");
            return -1;
        }
        return c->closing ? -1 : 0;
    }
    if (kind == RDMA_WR_SEND) {
        int buf = (int)(wc->wr_id >> 3);
        void *cookie = c->txCookie[buf];
        c->txBusy &= ~(1u << buf);
        c->txCookie[buf] = NULL;
        c->outstanding--;
        if (c->closing)
            return 0;
        if (wc->status != IBV_WC_SUCCESS) {
            char why[128];
            snprintf(why, sizeof(why), "ring write failed: %s", ibv_wc_status_str(wc->status));
            rdmaCloseConn(&c->base, why);
            return -1;
        }
        if (cookie)
            host->onSendDone(&c->base, cookie);
        return c->closing ? -1 : rdmaPump(c);
    }
    /* a receive */
    if (c->closing)
        return 0;
    if (wc->status != IBV_WC_SUCCESS) {
        char why[128];
        snprintf(why, sizeof(why), "receive failed: %s", ibv_wc_status_str(wc->status));
        rdmaCloseConn(&c->base, why);
        return -1;
    }
    if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc->wc_flags & IBV_WC_WITH_IMM)) {
        rdmaCloseConn(&c->base, "a receive without an immediate");
        return -1;
    }
    /* The connector may write its first message before our ESTABLISHED event
     * is delivered: its arrival proves the connection is up. */
    if (!c->established && !c->base.outgoing) {
        c->established = 1;
        host->onUp(&c->base);
        if (c->closing)
            return -1;
    }
    if (rdmaOnRingMsg(c, ntohl(wc->imm_data)) == -1)
        return -1;
    return c->closing ? -1 : rdmaPump(c);
}

static void rdmaPollCq(RdmaConn *c)
{
    struct ibv_wc wcs[32];
    int n;

    while ((n = ibv_poll_cq(c->cq, 32, wcs)) > 0) {
        c->batch = wcs;
        c->batchLen = n;
        for (c->batchNext = 0; c->batchNext < c->batchLen;) {
            if (rdmaOnWc(c, &wcs[c->batchNext++]) == -1 && c->closing) {
                /* teardown already handled the rest of the batch */
                c->batch = NULL;
                return;
            }
        }
        c->batch = NULL;
    }
    if (n < 0)
        rdmaCloseConn(&c->base, "ibv_poll_cq failed");
}

static void rdmaFree(RdmaConn *c);

static void rdmaOnComp(void *arg, uint32_t events)
{
    struct ibv_cq *cq;
    void *ctx;

    while (ibv_get_cq_event(rd.comp, &cq, &ctx) == 0) {
        RdmaConn *c = ctx;
        ibv_ack_cq_events(cq, 1);
        if (c->closing)
            continue;
        int rc = ibv_req_notify_cq(cq, 0);
        if (rc) {
            host->log("warning", "%s: ibv_req_notify_cq: %s", c->base.desc, strerror(rc));
            rdmaCloseConn(&c->base, "cannot re-arm the CQ");
            continue;
        }
        c->inHandler = 1;
        rdmaPollCq(c);
        c->inHandler = 0;
        if (c->closing)
            rdmaFree(c);
    }
}

/* ---- teardown ------------------------------------------------------------------------ */

static void rdmaUnlinkAll(RdmaConn *c)
{
    for (RdmaConn **pp = &rd.all; *pp; pp = &(*pp)->nextAll) {
        if (*pp == c) {
            *pp = c->nextAll;
            return;
        }
    }
}

/* Move the QP to error and poll until the NIC has given back every send-side
 * WR (bounded): only then is memory they point at safe to reuse. */
static void rdmaFlush(RdmaConn *c)
{
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
    struct timespec t0, now;
    struct ibv_wc wcs[32];

    if (!c->qpUp)
        return;
    int rc = ibv_modify_qp(c->id->qp, &attr, IBV_QP_STATE);
    if (rc)
        host->log("warning", "%s: ibv_modify_qp(ERR): %s", c->base.desc, strerror(rc));
    /* Completions already taken off the CQ by the batch being handled: they
     * count as outstanding but will never be polled again. */
    while (c->batch && c->batchNext < c->batchLen)
        rdmaOnWc(c, &c->batch[c->batchNext++]); /* closing: only bookkeeping */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (c->outstanding > 0) {
        int n = ibv_poll_cq(c->cq, 32, wcs);
        for (int i = 0; i < n; i++)
            rdmaOnWc(c, &wcs[i]); /* closing: only bookkeeping */
        if (n > 0)
            continue;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 >
            RDMA_FLUSH_MAX_MS) {
            host->log("warning", "%s: %d work requests not flushed in time", c->base.desc,
                      c->outstanding);
            break;
        }
        usleep(100);
    }
}

static void rdmaFree(RdmaConn *c)
{
    if (c->qpUp)
        rdma_destroy_qp(c->id);
    if (c->cq) {
        int rc = ibv_destroy_cq(c->cq);
        if (rc)
            host->log("warning", "%s: ibv_destroy_cq: %s", c->base.desc, strerror(rc));
    }
    rdmaRingFree(c, &c->rxRing, &c->rxMr);
    rdmaRingFree(c, &c->fullRing, &c->fullMr);
    if (c->txMr)
        ibv_dereg_mr(c->txMr);
    free(c->txBuf);
    if (c->id)
        rdma_destroy_id(c->id);
    while (c->pendHead) {
        PendingMsg *n = c->pendHead->next;
        free(c->pendHead);
        c->pendHead = n;
    }
    free(c);
}

static void rdmaCloseConn(Conn *base, const char *why)
{
    RdmaConn *c = (RdmaConn *)base;

    if (c->closing)
        return;
    c->closing = 1;
    rdmaUnlinkAll(c);
    rdmaFlush(c);
    if (c->id && c->established)
        rdma_disconnect(c->id);
    /* Reads the NIC has let go of: their transfers may now move on. */
    while (c->reads) {
        ReadOp *op = c->reads;
        c->reads = op->next;
        void *cookie = op->cookie;
        free(op);
        host->onReadDone(base, cookie, 0);
    }
    host->onClosed(base, why);
    if (!c->inHandler)
        rdmaFree(c);
}

/* ---- connection manager events ---------------------------------------------------------- */

static RdmaConn *rdmaNew(struct rdma_cm_id *id, const char *desc)
{
    RdmaConn *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->id = id;
    id->context = c;
    c->base.ops = &rdmaTransport;
    c->base.id = host->nextConnId();
    c->base.state = CONN_CONNECTING;
    snprintf(c->base.desc, sizeof(c->base.desc), "rdma %s", desc);
    c->nextAll = rd.all;
    rd.all = c;
    return c;
}

/* May one more connection from source start its handshake? Returns NULL,
 * or why not. Counted before anything is allocated for it. */
static const char *rdmaPreauthRoom(const char *source)
{
    int all = 0, same = 0;

    for (const RdmaConn *o = rd.all; o; o = o->nextAll) {
        if (o->base.outgoing || o->authed)
            continue;
        all++;
        if (!strcmp(o->base.source, source))
            same++;
    }
    if (all >= RDMA_PREAUTH_MAX)
        return "too many RDMA connections in handshake";
    if (same >= RDMA_PREAUTH_MAX_PER_SOURCE)
        return "too many RDMA connections in handshake from this address";
    return NULL;
}

static void rdmaOnConnectRequest(struct rdma_cm_id *id, const void *priv, size_t privLen)
{
    char err[160], desc[64], source[INET_ADDRSTRLEN];
    const char *why;
    struct sockaddr_in *sa = (struct sockaddr_in *)rdma_get_peer_addr(id);
    uint8_t mine[RDMA_PRIV_LEN];
    struct rdma_conn_param cp;

    if (!inet_ntop(AF_INET, &sa->sin_addr, source, sizeof(source)))
        snprintf(source, sizeof(source), "?");
    const char *full = rdmaPreauthRoom(source);
    snprintf(desc, sizeof(desc), "rdma %s (in)", source);
    if (full) {
        host->refused(desc, full);
        if (rdma_reject(id, NULL, 0))
            host->log("warning", "rdma %s: rdma_reject: %s", source, strerror(errno));
        rdma_destroy_id(id);
        return;
    }
    snprintf(desc, sizeof(desc), "%s:%d (in)", source, ntohs(sa->sin_port));
    RdmaConn *c = rdmaNew(id, desc);
    if (!c) {
        rdma_reject(id, NULL, 0);
        rdma_destroy_id(id);
        return;
    }
    snprintf(c->base.source, sizeof(c->base.source), "%s", source);
    if (rdmaParsePriv(c, priv, privLen, &why) == -1) {
        host->log("warning", "%s: refused: %s", c->base.desc, why);
        goto out_reject;
    }
    if (rdmaSetupConn(c, err, sizeof(err)) == -1) {
        host->log("warning", "%s: refused: %s", c->base.desc, err);
        goto out_reject;
    }
    rdmaFillPriv(c, mine);
    rdmaConnParam(&cp, mine);
    if (rdma_accept(id, &cp)) {
        host->log("warning", "%s: rdma_accept: %s", c->base.desc, strerror(errno));
        goto out_reject;
    }
    return;

out_reject:
    rdma_reject(id, NULL, 0);
    c->closing = 1; /* never reported up: free quietly */
    rdmaUnlinkAll(c);
    rdmaFree(c);
}

static void rdmaOnCmEvent(void *arg, uint32_t events)
{
    VerbsCmEvent ev;

    while (verbsNextCmEvent(rd.ec, &ev) == 0) {
        struct rdma_cm_id *id = ev.id;
        enum rdma_cm_event_type type = ev.type;
        int status = ev.status;
        uint8_t *priv = ev.priv;
        size_t privLen = ev.privLen;

        if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
            rdmaOnConnectRequest(id, privLen ? priv : NULL, privLen);
            continue;
        }
        RdmaConn *c = id->context;
        if (!c || c->closing)
            continue;
        char err[192];
        const char *why;
        switch (type) {
            case RDMA_CM_EVENT_ADDR_RESOLVED:
                if (rdma_resolve_route(id, RDMA_RESOLVE_MS)) {
                    snprintf(err, sizeof(err), "rdma_resolve_route: %s", strerror(errno));
                    rdmaCloseConn(&c->base, err);
                }
                break;
            case RDMA_CM_EVENT_ROUTE_RESOLVED: {
                uint8_t mine[RDMA_PRIV_LEN];
                struct rdma_conn_param cp;
                if (rdmaSetupConn(c, err, sizeof(err)) == -1) {
                    rdmaCloseConn(&c->base, err);
                    break;
                }
                rdmaFillPriv(c, mine);
                rdmaConnParam(&cp, mine);
                if (rdma_connect(id, &cp)) {
                    snprintf(err, sizeof(err), "rdma_connect: %s", strerror(errno));
                    rdmaCloseConn(&c->base, err);
                }
                break;
            }
            case RDMA_CM_EVENT_ESTABLISHED:
                if (c->established)
                    break; /* already up: its first message came first */
                if (c->base.outgoing && rdmaParsePriv(c, privLen ? priv : NULL, privLen, &why)) {
                    rdmaCloseConn(&c->base, why);
                    break;
                }
                c->established = 1;
                c->inHandler = 1;
                host->onUp(&c->base);
                if (!c->closing)
                    rdmaPump(c);
                c->inHandler = 0;
                if (c->closing)
                    rdmaFree(c);
                break;
            case RDMA_CM_EVENT_DISCONNECTED:
                rdmaCloseConn(&c->base, "peer disconnected");
                break;
            case RDMA_CM_EVENT_TIMEWAIT_EXIT:
                break;
            default:
                snprintf(err, sizeof(err), "%s (status %d)", rdma_event_str(type), status);
                rdmaCloseConn(&c->base, err);
        }
    }
}

static Conn *rdmaConnect(Peer *peer, const char *addr, int port, char *err, size_t errLen)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct sockaddr_in src = {.sin_family = AF_INET};
    struct rdma_cm_id *id;
    char desc[64];

    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1 || port <= 0 || port > 65535) {
        snprintf(err, errLen, "UNAVAILABLE bad RDMA address %s:%d", addr, port);
        return NULL;
    }
    if (rdma_create_id(rd.ec, &id, NULL, RDMA_PS_TCP)) {
        snprintf(err, errLen, "UNAVAILABLE rdma_create_id: %s", strerror(errno));
        return NULL;
    }
    snprintf(desc, sizeof(desc), "%s:%d", addr, port);
    RdmaConn *c = rdmaNew(id, desc);
    if (!c) {
        rdma_destroy_id(id);
        snprintf(err, errLen, "OOM out of memory");
        return NULL;
    }
    /* Bind the source to our RDMA address so that rdma_cm picks our device. */
    struct sockaddr_in *me = (struct sockaddr_in *)rdma_get_local_addr(rd.listenId);
    src.sin_addr = me->sin_addr;
    if (rdma_resolve_addr(id, (struct sockaddr *)&src, (struct sockaddr *)&sa, RDMA_RESOLVE_MS)) {
        snprintf(err, errLen, "UNAVAILABLE rdma_resolve_addr %s: %s", desc, strerror(errno));
        c->closing = 1;
        rdmaUnlinkAll(c);
        rdmaFree(c);
        return NULL;
    }
    return &c->base;
}

/* ---- start-up and shutdown ----------------------------------------------------------- */

static int rdmaListen(const char *bindAddr, int port, char *err, size_t errLen)
{
    return 0; /* done by rdmaTransportInit, which needs the device first */
}

static void rdmaShutdown(void)
{
    while (rd.all)
        rdmaCloseConn(&rd.all->base, "node shutting down");
    if (rd.listenId)
        rdma_destroy_id(rd.listenId);
    if (rd.ec) {
        host->unwatch(rd.ec->fd);
        rdma_destroy_event_channel(rd.ec);
    }
    if (rd.comp) {
        host->unwatch(rd.comp->fd);
        ibv_destroy_comp_channel(rd.comp);
    }
    if (rd.arenaMr)
        ibv_dereg_mr(rd.arenaMr);
    if (rd.pd)
        ibv_dealloc_pd(rd.pd);
    memset(&rd, 0, sizeof(rd));
}

const TransportOps *rdmaTransportInit(const TransportHost *h, const RdmaTransportConfig *cfg,
                                      char *err, size_t errLen)
{
    host = h;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->rdmaPort)};
    struct ibv_device_attr da;

    memset(&rd, 0, sizeof(rd));
    rd.arenaBase = cfg->arenaBase;
    rd.arenaSize = cfg->arenaSize;
    if (inet_pton(AF_INET, cfg->rdmaBind, &sa.sin_addr) != 1) {
        snprintf(err, errLen, "rdma-bind '%s' is not an IPv4 address", cfg->rdmaBind);
        return NULL;
    }
    /* Registered memory and fork (BGSAVE): kernels with copy-on-fork for
     * pinned pages need nothing; older ones need MADV_DONTFORK. */
    if (ibv_is_fork_initialized() == IBV_FORK_DISABLED && ibv_fork_init())
        host->log("warning", "ibv_fork_init failed: BGSAVE may be unsafe with RDMA");
    rd.ec = rdma_create_event_channel();
    if (!rd.ec) {
        snprintf(err, errLen, "rdma_create_event_channel: %s (no RDMA support?)", strerror(errno));
        return NULL;
    }
    if (rdma_create_id(rd.ec, &rd.listenId, NULL, RDMA_PS_TCP)) {
        snprintf(err, errLen, "rdma_create_id: %s", strerror(errno));
        goto out_shutdown;
    }
    if (rdma_bind_addr(rd.listenId, (struct sockaddr *)&sa)) {
        snprintf(err, errLen, "rdma_bind_addr %s:%d: %s", cfg->rdmaBind, cfg->rdmaPort,
                 strerror(errno));
        goto out_shutdown;
    }
    rd.verbs = rd.listenId->verbs;
    if (!rd.verbs) {
        snprintf(err, errLen, "no RDMA device has the address %s (set objstore.rdma-bind)",
                 cfg->rdmaBind);
        goto out_shutdown;
    }
    const char *dev = ibv_get_device_name(rd.verbs->device);
    if (cfg->rdmaDevice[0] && strcmp(cfg->rdmaDevice, dev)) {
        snprintf(err, errLen, "%s belongs to device %s, not rdma-device %s", cfg->rdmaBind, dev,
                 cfg->rdmaDevice);
        goto out_shutdown;
    }
    if (ibv_query_device(rd.verbs, &da)) {
        snprintf(err, errLen, "ibv_query_device: %s", strerror(errno));
        goto out_shutdown;
    }
    rd.rdAtomic =
        da.max_qp_rd_atom < da.max_qp_init_rd_atom ? da.max_qp_rd_atom : da.max_qp_init_rd_atom;
    if (rd.rdAtomic > 16)
        rd.rdAtomic = 16;
    if (rd.rdAtomic < 1)
        rd.rdAtomic = 1;
    rd.pd = ibv_alloc_pd(rd.verbs);
    if (!rd.pd) {
        snprintf(err, errLen, "ibv_alloc_pd: %s", strerror(errno));
        goto out_shutdown;
    }
    rd.arenaMr = ibv_reg_mr(rd.pd, rd.arenaBase, rd.arenaSize,
                            IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    if (!rd.arenaMr) {
        snprintf(err, errLen,
                 "cannot register the %llu-byte arena with %s: %s (raise the memlock limit: "
                 "ulimit -l unlimited, or LimitMEMLOCK=infinity)",
                 (unsigned long long)rd.arenaSize, dev, strerror(errno));
        goto out_shutdown;
    }
    rd.comp = ibv_create_comp_channel(rd.verbs);
    if (!rd.comp) {
        snprintf(err, errLen, "ibv_create_comp_channel: %s", strerror(errno));
        goto out_shutdown;
    }
    if (setNonBlocking(rd.ec->fd) == -1 || setNonBlocking(rd.comp->fd) == -1 ||
        host->watch(rd.ec->fd, EPOLLIN, rdmaOnCmEvent, NULL) == -1 ||
        host->watch(rd.comp->fd, EPOLLIN, rdmaOnComp, NULL) == -1) {
        snprintf(err, errLen, "cannot watch the RDMA event channels");
        goto out_shutdown;
    }
    if (rdma_listen(rd.listenId, 64)) {
        snprintf(err, errLen, "rdma_listen: %s", strerror(errno));
        goto out_shutdown;
    }
    host->log("notice", "RDMA on %s (%s:%d), arena of %llu bytes registered, %d reads in flight",
              dev, cfg->rdmaBind, cfg->rdmaPort, (unsigned long long)rd.arenaSize, rd.rdAtomic);
    return &rdmaTransport;

out_shutdown:
    rdmaShutdown();
    return NULL;
}

const TransportOps rdmaTransport = {
    .name = "rdma",
    .feature = OBJ_FEAT_RDMA,
    .listen = rdmaListen,
    .shutdown = rdmaShutdown,
    .connect = rdmaConnect,
    .send = rdmaSend,
    .recvPayload = NULL,
    .readRemote = rdmaReadRemote,
    .maxInline = rdmaMaxInline,
    .arenaRkey = rdmaArenaRkey,
    .authenticated = rdmaAuthenticated,
    .close = rdmaCloseConn,
};
