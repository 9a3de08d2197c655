/*
 * rdma.c - the RDMA transport: the engine's wire frames as the bytes of one
 * RDMA stream per connection (module/rdma/stream.h, Valkey Over RDMA), small
 * payloads gathered inline from the arena, large objects pulled by the
 * requester with RDMA READs through a memory window scoped to one object,
 * one connection and one transfer; behind the same operations table as
 * tcp.c. Design (inline vs rendezvous, windows, the handshake gate, events,
 * queues): docs/architecture.md, "RDMA: the stream for control and small
 * objects", "Large objects: the READ rendezvous" and "The RDMA transport
 * before and after the handshake".
 */
#include <arpa/inet.h>
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

#include "framer.h"
#include "rdma.h"
#include "rdmaproto.h"
#include "streamrx.h"
#include "rdmareg.h"
#include "common/list.h"
#include "common/util.h"
#include "rdma/stream.h"
#include "rdma/streamproto.h"
#include "rdma/verbs.h"
#include "store/checksum.h" /* XXH3, dispatched where the CPU allows */

/* The engine core, as given to rdmaTransportInit. */
static const TransportHost *host;

/* ---- tunables ---------------------------------------------------------------------- */

#define RDMA_RX_SIZE     (4u << 20) /* our receive buffer once the peer is authenticated */
#define RDMA_TX_SIZE     SP_RX_DEFAULT
#define RDMA_TX_SIZE_IN  SP_RX_MIN  /* staging of an accepted connection (headers, copies) */
#define RDMA_TXQ_MAX     (1u << 20) /* frame bytes waiting for the peer's room */
#define RDMA_READ_CHUNK  (1u << 20)
#define RDMA_READ_WINDOW 16  /* READ chunks in flight per connection */
#define RDMA_WIN_MAX     256 /* windows per connection (= the engine's pin cap) */
/* User send WRs in flight: the READ chunks, and one bind or invalidation
 * per window at most. */
#define RDMA_USER_WR        (RDMA_READ_WINDOW + RDMA_WIN_MAX)
#define RDMA_REG_CACHE_MAX  1024 /* per-object registrations kept */
#define RDMA_LISTEN_BACKLOG 64

/* Low bits of our wr_ids (the stream's own have bit 0 set). */
#define RDMA_WR_READ  2u
#define RDMA_WR_BIND  4u
#define RDMA_WR_INV   6u
#define RDMA_WR_KINDS 7u

_Static_assert(RDMA_TX_SIZE_IN >= SP_RX_MIN && RDMA_RX_SIZE <= SP_RX_MAX, "stream buffer sizes");

/* ---- context -------------------------------------------------------------------------- */

/* One queued frame and the payload that follows it. */
typedef struct TxItem {
    size_t frameLen, frameOff;
    const uint8_t *payload;
    size_t payloadLen, payloadOff;
    size_t tagLen, tagOff; /* the payload's tag, after its last byte (0 or OBJ_WIRE_MAC) */
    uint8_t tag[OBJ_WIRE_MAC];
    void *cookie;
    struct TxItem *next;
    uint8_t frame[]; /* frameLen bytes */
} TxItem;

typedef struct ReadOp {
    void *cookie;
    uint8_t *dst;
    uint64_t raddr, len, posted;
    uint64_t landed;    /* bytes whose READ completed (a QP completes in order) */
    XXH3_state_t *hash; /* checksum of the landed bytes; NULL: none taken */
    uint32_t rkey;
    int inflight, failed;
    ObjListLink link; /* in its connection's reads */
} ReadOp;

/* The length of op's READ chunk that starts at off: chunks are cut the same
 * way when posted and when their completions are counted. */
static uint64_t rdmaReadChunk(const ReadOp *op, uint64_t off)
{
    return op->len - off < RDMA_READ_CHUNK ? op->len - off : RDMA_READ_CHUNK;
}

/* A window's life: FREE -> BINDING -> BOUND -> INVALIDATING -> DONE (its
 * cookie waits to be handed back) -> FREE. */
typedef enum WinState { WIN_FREE = 0, WIN_BINDING, WIN_BOUND, WIN_INVALIDATING, WIN_DONE } WinState;

/* A type-2 memory window of a connection; its pointer is the grant handle. */
typedef struct Window {
    struct ibv_mw *mw; /* NULL in registration-key mode */
    uint32_t rkey;
    WinState state;
    RdmaReg *reg;
    void *cookie;             /* released once invalidated */
    struct Window *next;      /* the connection's list of all windows */
    struct Window *nextReady; /* invalidated, cookie not yet handed back */
} Window;

/* A gather write in flight: its cookie comes back through onSent. */
typedef struct Sent {
    uint64_t token;
    int ok;
} Sent;

typedef struct RdmaConn {
    StreamConn sc; /* must be first: the Conn and its framer */
    RdmaStream *s;
    int fd; /* the stream's descriptor in the engine's epoll, -1 when none */
    TxItem *txHead, *txTail;
    size_t txBytes;
    ObjList reads;     /* ReadOp.link, in order; the head is the one being posted */
    int readMoved;     /* a READ chunk landed since the engine last heard of it */
    ReadOp *reporting; /* the read whose onReadDone runs (readLanded asks it) */
    int readsInflight;
    int userPosted; /* our WRs on the QP not yet completed */
    Window *windows;
    int nWindows;
    Window *ready; /* invalidated windows whose cookies wait to be handed back */
    Sent *sent;    /* onSent reports waiting to be handed on */
    int nSent, capSent;
    char failWhy[128]; /* a completion failed: close with this after processing */
    int up, authed, closing, inHandler;
    uint64_t tickGen; /* the last rdmaTick that progressed it */
    ObjListLink all;  /* in rd.all once adopted; self-linked before and after */
} RdmaConn;

typedef enum RdmaKeyMode {
    RDMA_KEYS_WINDOW = 0, /* a window over the object's registration, per transfer */
    RDMA_KEYS_OBJREG      /* the object registration's own key (no windows on the device) */
} RdmaKeyMode;

static struct {
    struct rdma_event_channel *ec;
    struct rdma_cm_id *listenId;
    struct ibv_context *verbs;
    struct ibv_pd *pd;
    struct ibv_mr *arenaMr;
    uint8_t *arenaBase;
    uint64_t arenaSize;
    int rdAtomic;
    RdmaKeyMode keys;
    RdmaRegCache *regs; /* per-object registrations, windows are bound over them */
    ObjList all;        /* RdmaConn.all, newest first */
    uint64_t unlinks;   /* connections taken off all so far (a walk's check) */
    uint64_t tickGen;   /* the current or last rdmaTick */
    char bindAddr[64];  /* rdma-bind: outgoing connections leave from this device */
} rd;

static const TransportOps rdmaTransport;

static void rdmaCloseConn(Conn *base, const char *why);

/* The first adopted connection, and the one after c; NULL at the end. */
static RdmaConn *rdmaConnFirst(void)
{
    ObjListLink *l = objListFirst(&rd.all);
    return l ? objListEntry(l, RdmaConn, all) : NULL;
}

static RdmaConn *rdmaConnNext(const RdmaConn *c)
{
    return c->all.next == &rd.all ? NULL : objListEntry(c->all.next, RdmaConn, all);
}

/* The oldest read of c, or NULL when it has none. */
static ReadOp *rdmaReadFirst(const RdmaConn *c)
{
    ObjListLink *l = objListFirst(&c->reads);
    return l ? objListEntry(l, ReadOp, link) : NULL;
}

static void rdmaAfterProcess(RdmaConn *c);

/* ---- the stream's callbacks: record only -------------------------------------------- */

static void rdmaFail(RdmaConn *c, const char *fmt, const char *what)
{
    if (!c->failWhy[0])
        snprintf(c->failWhy, sizeof(c->failWhy), fmt, what);
}

/* A completion of one of our WRs (READ chunk, bind, invalidation), or its
 * flush at teardown. Bookkeeping, plus the checksum of a READ chunk that
 * just landed (while the NIC fills the next ones, and with the bytes still
 * in the cache: the fetch then needs no second pass); the engine hears of
 * it after the stream's processing returns (rdmaAfterProcess). */
static void rdmaOnWc(void *ctx, const struct ibv_wc *wc)
{
    RdmaConn *c = ctx;
    uint32_t kind = (uint32_t)(wc->wr_id & RDMA_WR_KINDS);
    void *p = (void *)(uintptr_t)(wc->wr_id & ~(uint64_t)RDMA_WR_KINDS);
    int ok = wc->status == IBV_WC_SUCCESS;

    c->userPosted--;
    if (kind == RDMA_WR_READ) {
        ReadOp *op = p;
        op->inflight--;
        c->readsInflight--;
        if (ok && !op->failed) { /* the oldest chunk in flight: chunks complete in order */
            uint64_t n = rdmaReadChunk(op, op->landed);
            if (op->hash && XXH3_64bits_update(op->hash, op->dst + op->landed, n) != XXH_OK) {
                XXH3_freeState(op->hash);
                op->hash = NULL;
            }
            op->landed += n;
            c->readMoved = 1;
        }
        if (!ok) {
            op->failed = 1;
            if (!c->closing)
                host->log("warning", "%s: RDMA read failed: %s", c->sc.base.desc,
                          ibv_wc_status_str(wc->status));
            rdmaFail(c, "RDMA read failed: %s", ibv_wc_status_str(wc->status));
        }
        return;
    }
    Window *w = p;
    if (kind == RDMA_WR_BIND) {
        if (!ok) {
            rdmaFail(c, "binding a memory window failed: %s", ibv_wc_status_str(wc->status));
            return; /* the window stays unusable; close frees it */
        }
        w->state = WIN_BOUND;
        return;
    }
    if (!ok) {
        rdmaFail(c, "invalidating a memory window failed: %s", ibv_wc_status_str(wc->status));
        return; /* close kills the window (QP in error, deallocated) before the pin goes */
    }
    w->state = WIN_DONE;
    rdmaRegPut(w->reg);
    w->reg = NULL;
    w->nextReady = c->ready;
    c->ready = w;
}

/* A gather write completed (ok) or was flushed: its payload may be reused. */
static void rdmaOnSent(void *ctx, uint64_t token, int ok)
{
    RdmaConn *c = ctx;

    if (c->nSent == c->capSent) {
        int cap = c->capSent ? c->capSent * 2 : 64;
        Sent *n = realloc(c->sent, (size_t)cap * sizeof(*n));
        if (!n) {
            rdmaFail(c, "%s", "out of memory for send completions");
            return; /* the pin is released by the close */
        }
        c->sent = n;
        c->capSent = cap;
    }
    c->sent[c->nSent++] = (Sent){.token = token, .ok = ok};
    if (!ok)
        rdmaFail(c, "%s", "a stream write failed");
}

/* ---- windows ----------------------------------------------------------------------- */

/* Post one of our work requests on the stream's QP. Returns 0 or -1. */
static int rdmaPostUser(RdmaConn *c, struct ibv_send_wr *wr)
{
    if (rdmaStreamPostSend(c->s, wr) == -1) {
        host->log("warning", "%s: posting %s: %s", c->sc.base.desc,
                  wr->opcode == IBV_WR_RDMA_READ ? "an RDMA read"
                  : wr->opcode == IBV_WR_BIND_MW ? "a window bind"
                                                 : "a window invalidation",
                  rdmaStreamError(c->s));
        return -1;
    }
    c->userPosted++;
    return 0;
}

/* A free window of c, allocating one while under RDMA_WIN_MAX. NULL when
 * none (logged when the allocation failed). */
static Window *rdmaWindowTake(RdmaConn *c)
{
    for (Window *w = c->windows; w; w = w->next)
        if (w->state == WIN_FREE)
            return w;
    if (c->nWindows >= RDMA_WIN_MAX)
        return NULL;
    Window *w = calloc(1, sizeof(*w));
    if (!w)
        return NULL;
    if (rd.keys == RDMA_KEYS_WINDOW) {
        w->mw = ibv_alloc_mw(rd.pd, IBV_MW_TYPE_2);
        if (!w->mw) {
            host->log("warning", "%s: ibv_alloc_mw: %s", c->sc.base.desc, strerror(errno));
            free(w);
            return NULL;
        }
        w->rkey = w->mw->rkey;
    }
    w->next = c->windows;
    c->windows = w;
    c->nWindows++;
    return w;
}

/* Open len bytes at addr to remote reads by c's peer: bind a window over
 * the object's registration (posted now; the RNDV the caller sends next is
 * written after it on the same send queue). Returns the grant and *rkey,
 * or NULL: no window free (the caller answers BUSY) or a verbs error. */
static void *rdmaGrantRead(Conn *base, const void *addr, uint64_t len, uint32_t *rkey)
{
    RdmaConn *c = (RdmaConn *)base;
    const uint8_t *a = addr;

    if (c->closing || !c->authed || a < rd.arenaBase || a + len > rd.arenaBase + rd.arenaSize)
        return NULL;
    Window *w = rdmaWindowTake(c);
    if (!w)
        return NULL;
    if (len == 0) { /* nothing to read: no key at all */
        w->state = WIN_BOUND;
        *rkey = 0;
        return w;
    }
    char err[160];
    RdmaReg *r = rdmaRegGet(rd.regs, a, len, err, sizeof(err));
    if (!r) {
        host->log("warning", "%s: %s", c->sc.base.desc, err);
        return NULL;
    }
    if (rd.keys == RDMA_KEYS_OBJREG) {
        w->reg = r;
        w->state = WIN_BOUND;
        w->rkey = r->mr->rkey;
        *rkey = w->rkey;
        return w;
    }
    uint32_t key = ibv_inc_rkey(w->rkey);
    struct ibv_send_wr wr = {.wr_id = (uint64_t)(uintptr_t)w | RDMA_WR_BIND,
                             .opcode = IBV_WR_BIND_MW,
                             .send_flags = IBV_SEND_SIGNALED};
    wr.bind_mw.mw = w->mw;
    wr.bind_mw.rkey = key;
    wr.bind_mw.bind_info.mr = r->mr;
    wr.bind_mw.bind_info.addr = (uint64_t)(uintptr_t)a;
    wr.bind_mw.bind_info.length = len;
    wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
    if (rdmaPostUser(c, &wr) == -1) {
        rdmaRegPut(r);
        return NULL;
    }
    /* The provider names the window by mw->rkey, its current key (rxe
     * checks it): after this bind that is the new one. */
    w->mw->rkey = key;
    w->rkey = key;
    w->reg = r;
    w->state = WIN_BINDING;
    *rkey = key;
    return w;
}

/* Post the invalidation of a bound window. Returns 0 or -1. */
static int rdmaWindowInvalidate(RdmaConn *c, Window *w)
{
    struct ibv_send_wr wr = {.wr_id = (uint64_t)(uintptr_t)w | RDMA_WR_INV,
                             .opcode = IBV_WR_LOCAL_INV,
                             .send_flags = IBV_SEND_SIGNALED};
    wr.invalidate_rkey = w->rkey;
    if (rdmaPostUser(c, &wr) == -1)
        return -1;
    w->state = WIN_INVALIDATING;
    return 0;
}

/* The grant's transfer is over (DONE): invalidate its window; the cookie
 * comes back through host->onSendDone once the peer can no longer read
 * with the key. A closing connection ends every grant itself. */
static void rdmaRevokeRead(Conn *base, void *grant, void *cookie)
{
    RdmaConn *c = (RdmaConn *)base;
    Window *w = grant;

    if (c->closing || !w)
        return;
    w->cookie = cookie;
    if (rd.keys == RDMA_KEYS_OBJREG || !w->reg) { /* no window bound (the key stays the
                                                   * object's, or there was none) */
        if (w->reg)
            rdmaRegPut(w->reg);
        w->reg = NULL;
        w->state = WIN_FREE;
        host->onSendDone(base, cookie);
        return;
    }
    /* A bind still in flight is before the invalidation on the same send
     * queue: posting it now is in order. */
    if (rdmaWindowInvalidate(c, w) == -1)
        rdmaCloseConn(base, "cannot invalidate a memory window");
}

/* Kill every window of a closing connection: its QP is moved to the error
 * state first (nothing more is answered or executed on it), then each
 * window is deallocated, which invalidates it at once. Before the QP is
 * destroyed: a bound type-2 window holds a reference on its QP (rxe waits
 * for it). The Window records stay until the flush has passed their
 * completions on (rdmaWindowsFree). */
static void rdmaWindowsKill(RdmaConn *c)
{
    struct ibv_qp *qp = c->s ? rdmaStreamQp(c->s) : NULL;

    if (qp && c->windows) {
        struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
        int rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE);
        if (rc)
            host->log("warning", "%s: ibv_modify_qp(ERR): %s", c->sc.base.desc, strerror(rc));
    }
    for (Window *w = c->windows; w; w = w->next) {
        if (w->mw) {
            int rc = ibv_dealloc_mw(w->mw);
            if (rc)
                host->log("warning", "%s: ibv_dealloc_mw: %s", c->sc.base.desc, strerror(rc));
            w->mw = NULL;
        }
    }
}

/* Free the window records of a closed connection (after the stream's
 * flush), dropping their registrations' references. */
static void rdmaWindowsFree(RdmaConn *c)
{
    while (c->windows) {
        Window *w = c->windows;
        c->windows = w->next;
        if (w->reg)
            rdmaRegPut(w->reg);
        free(w);
    }
    c->ready = NULL;
    c->nWindows = 0;
}

/* ---- sending ----------------------------------------------------------------------- */

/* Write queued frames while the peer's buffer has room: a frame with a
 * payload as one gather write when it fits contiguously, else copied.
 * Returns 0, or -1 when c was closed. */
static int rdmaFlush(RdmaConn *c)
{
    int moved = 0;

    while (c->txHead && !c->closing) {
        TxItem *it = c->txHead;
        /* Only arena bytes can be gathered (the arena's key); a payload from
         * elsewhere (a spilled object's buffer, serve.c) is copied below. */
        const uint8_t *pa = it->payload;
        int inArena = pa >= rd.arenaBase && pa + it->payloadLen <= rd.arenaBase + rd.arenaSize;
        if (it->payloadLen && inArena && it->frameOff == 0 && it->payloadOff == 0) {
            int rc =
                rdmaStreamWriteGather(c->s, it->frame, it->frameLen, it->payload, it->payloadLen,
                                      rd.arenaMr->lkey, (uint64_t)(uintptr_t)it->cookie);
            if (rc == -1)
                goto out_failed;
            if (rc == 1) {
                it->frameOff = it->frameLen;
                it->payloadOff = it->payloadLen;
                it->cookie = NULL; /* it comes back through onSent */
            } else if (rdmaStreamWritable(c->s) == 0) {
                break; /* a fresh buffer of the peer may take it whole */
            }
        }
        while (it->frameOff < it->frameLen) {
            ssize_t n =
                rdmaStreamWrite(c->s, it->frame + it->frameOff, it->frameLen - it->frameOff);
            if (n < 0)
                goto out_failed;
            if (n == 0)
                break;
            it->frameOff += (size_t)n;
            moved = 1;
        }
        while (it->frameOff == it->frameLen && it->payloadOff < it->payloadLen) {
            ssize_t n = rdmaStreamWrite(c->s, it->payload + it->payloadOff,
                                        it->payloadLen - it->payloadOff);
            if (n < 0)
                goto out_failed;
            if (n == 0)
                break;
            it->payloadOff += (size_t)n;
            moved = 1;
        }
        while (it->payloadOff == it->payloadLen && it->frameOff == it->frameLen &&
               it->tagOff < it->tagLen) {
            ssize_t n = rdmaStreamWrite(c->s, it->tag + it->tagOff, it->tagLen - it->tagOff);
            if (n < 0)
                goto out_failed;
            if (n == 0)
                break;
            it->tagOff += (size_t)n;
            moved = 1;
        }
        if (it->frameOff < it->frameLen || it->payloadOff < it->payloadLen ||
            it->tagOff < it->tagLen)
            break;
        moved = 1;
        c->txHead = it->next;
        if (!c->txHead)
            c->txTail = NULL;
        c->txBytes -= sizeof(*it) + it->frameLen;
        void *cookie = it->cookie;
        free(it);
        if (cookie) /* copied: the payload is free to go */
            host->onSendDone(&c->sc.base, cookie);
    }
    if (c->closing)
        return -1;
    /* The engine closes a connection whose queue stops moving. */
    if (!c->txHead)
        c->sc.base.txStallSinceUs = 0;
    else if (moved || !c->sc.base.txStallSinceUs)
        c->sc.base.txStallSinceUs = utilMonoUs();
    return 0;

out_failed : {
    char why[160];
    snprintf(why, sizeof(why), "stream write: %s", rdmaStreamError(c->s));
    rdmaCloseConn(&c->sc.base, why);
    return -1;
}
}

static int rdmaSend(Conn *base, WireMsg *m, const void *payload, size_t payloadLen, void *cookie)
{
    RdmaConn *c = (RdmaConn *)base;
    uint8_t frame[OBJ_WIRE_FRAME_MAX];

    if (c->closing)
        return -1;
    /* A payload outside the registered arena (a spilled object read from its
     * file, serve.c) is never gathered: rdmaFlush copies it into the stream's
     * registered staging ring, which is its bounce buffer. */
    int64_t paySeq = -1;
    uint8_t tag[OBJ_WIRE_MAC];
    int len = wireEncode(m, frame, sizeof(frame));
    /* The session's tags: the stream's payloads are small, so the payload's
     * tag is made here, in one pass, and written after its last byte. RDMA
     * sessions authenticate, never encrypt (docs/security.md). */
    if (len >= 0)
        len = wireSeal(base->txMac, frame, sizeof(frame), len, &paySeq);
    if (len >= 0 && paySeq >= 0 &&
        wireMacPayloadTag(base->txMac, (uint64_t)paySeq, payload, payload ? payloadLen : 0, tag) ==
            -1)
        len = -1;
    if (len < 0) {
        host->log("warning", "%s: cannot encode %s", base->desc, wireTypeName(m->h.type));
        return -1;
    }
    if (c->txBytes + sizeof(TxItem) + (size_t)len > RDMA_TXQ_MAX) {
        char why[128];
        snprintf(why, sizeof(why), "over %u bytes of frames wait for a peer that does not read",
                 RDMA_TXQ_MAX);
        host->log("warning", "%s: %s", base->desc, why);
        rdmaCloseConn(base, why);
        return -1;
    }
    TxItem *it = calloc(1, sizeof(*it) + (size_t)len);
    if (!it) {
        rdmaCloseConn(base, "out of memory for the send queue");
        return -1;
    }
    memcpy(it->frame, frame, (size_t)len);
    it->frameLen = (size_t)len;
    it->payload = payload;
    it->payloadLen = payload ? payloadLen : 0;
    if (paySeq >= 0) {
        memcpy(it->tag, tag, OBJ_WIRE_MAC);
        it->tagLen = OBJ_WIRE_MAC;
    }
    it->cookie = cookie;
    c->txBytes += sizeof(*it) + it->frameLen;
    if (c->txTail)
        c->txTail->next = it;
    else
        c->txHead = it;
    c->txTail = it;
    if (!c->up)
        return 0; /* written once the stream is open */
    return rdmaFlush(c);
}

/* ---- one-sided reads ------------------------------------------------------------------ */

/* Post read chunks while the window allows. Returns 0 or -1 (verbs error). */
static int rdmaPumpReads(RdmaConn *c)
{
    ObjListLink *l;

    objListForEach(&c->reads, l) {
        ReadOp *op = objListEntry(l, ReadOp, link);
        if (c->readsInflight >= RDMA_READ_WINDOW)
            break;
        while (!op->failed && op->posted < op->len && c->readsInflight < RDMA_READ_WINDOW) {
            uint64_t n = rdmaReadChunk(op, op->posted);
            struct ibv_sge sge = {.addr = (uintptr_t)(op->dst + op->posted),
                                  .length = (uint32_t)n,
                                  .lkey = rd.arenaMr->lkey};
            struct ibv_send_wr wr = {0};
            wr.wr_id = (uint64_t)(uintptr_t)op | RDMA_WR_READ;
            wr.sg_list = &sge;
            wr.num_sge = 1;
            wr.opcode = IBV_WR_RDMA_READ;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr.rdma.remote_addr = op->raddr + op->posted;
            wr.wr.rdma.rkey = op->rkey;
            if (rdmaPostUser(c, &wr) == -1)
                return -1;
            op->posted += n;
            op->inflight++;
            c->readsInflight++;
        }
    }
    return 0;
}

/* Hand op's outcome to the engine and free it: while the engine hears of
 * it, readLanded still tells how far it got. */
static void rdmaReadReport(RdmaConn *c, ReadOp *op, int ok, const uint64_t *sum)
{
    c->reporting = op;
    host->onReadDone(&c->sc.base, op->cookie, ok, sum);
    c->reporting = NULL;
    XXH3_freeState(op->hash);
    free(op);
}

/* TransportOps.readLanded: the landed prefix of the reads posted with
 * cookie (in flight, or being reported); 0 when none has that cookie. */
static uint64_t rdmaReadLanded(Conn *base, void *cookie)
{
    RdmaConn *c = (RdmaConn *)base;
    ObjListLink *l;

    if (c->reporting && c->reporting->cookie == cookie)
        return c->reporting->landed;
    objListForEach(&c->reads, l) {
        ReadOp *op = objListEntry(l, ReadOp, link);
        if (op->cookie == cookie)
            return op->landed;
    }
    return 0;
}

/* Report and drop finished read ops (all chunks back, or failed with none
 * in flight) at the head of the list, in order. */
static void rdmaReapReads(RdmaConn *c)
{
    for (ReadOp *op;
         (op = rdmaReadFirst(c)) && op->inflight == 0 && (op->posted == op->len || op->failed);) {
        objListUnlink(&op->link);
        int ok = !op->failed;
        uint64_t sum = 0;
        int hashed = ok && op->hash && op->landed == op->len;
        if (hashed)
            sum = XXH3_64bits_digest(op->hash);
        rdmaReadReport(c, op, ok, hashed ? &sum : NULL);
        if (c->closing)
            return;
    }
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
    *op = (ReadOp){.cookie = cookie, .dst = d, .raddr = raddr, .len = len, .rkey = rkey};
    /* Without a state (out of memory) the fetch takes the checksum itself. */
    op->hash = XXH3_createState();
    if (op->hash && XXH3_64bits_reset(op->hash) != XXH_OK) {
        XXH3_freeState(op->hash);
        op->hash = NULL;
    }
    objListPushBack(&c->reads, &op->link);
    if (rdmaPumpReads(c) == -1) {
        rdmaCloseConn(base, "cannot post RDMA reads");
        return 0; /* the close reported the read as failed */
    }
    if (len == 0)
        rdmaReapReads(c);
    return 0;
}

/* ---- receiving --------------------------------------------------------------------- */

/* Deliver every event the framer has (streamRxDeliver). Returns 0, or -1
 * after closing. */
static int rdmaParseFrames(RdmaConn *c)
{
    return streamRxDeliver(host, &c->sc.base, &c->sc.rx, NULL);
}

/* Take every ready byte of the stream: into wherever the framer says (a
 * payload's destination or its own buffer), or consumed without a copy
 * when a payload is being thrown away; deliver the events as they come.
 * Consuming lets the stream give its buffer back to the peer. */
static void rdmaRead(RdmaConn *c)
{
    while (!c->closing && rdmaStreamReadable(c->s) > 0) {
        uint8_t *dst;
        size_t room = framerReadSpace(&c->sc.rx, &dst);
        if (room == 0)
            return; /* cannot happen: frames are consumed as they are parsed */
        size_t n;
        if (!dst) {
            size_t avail;
            rdmaStreamPeek(c->s, &avail);
            n = avail < room ? avail : room;
            if (rdmaStreamConsume(c->s, n) == -1) {
                rdmaCloseConn(&c->sc.base, rdmaStreamError(c->s));
                return;
            }
        } else {
            n = rdmaStreamRead(c->s, dst, room);
        }
        if (n == 0)
            return;
        framerWrote(&c->sc.rx, n); /* n <= room: can't fail */
        if (rdmaParseFrames(c) == -1)
            return;
    }
}

/* ---- progress ------------------------------------------------------------------------ */

/* Everything that follows the stream's processing, outside its callbacks:
 * the connection coming up, cookies of finished sends and invalidated
 * windows, finished reads, failures recorded by the callbacks, queued
 * frames and arrived bytes. */
static void rdmaAfterProcess(RdmaConn *c)
{
    if (c->closing)
        return;
    if (!c->up && rdmaStreamGetState(c->s) == RDMA_STREAM_OPEN) {
        c->up = 1;
        host->onUp(&c->sc.base);
        if (c->closing)
            return;
    }
    for (int i = 0; i < c->nSent && !c->closing; i++)
        if (c->sent[i].ok && c->sent[i].token)
            host->onSendDone(&c->sc.base, (void *)(uintptr_t)c->sent[i].token);
    c->nSent = 0;
    while (c->ready && !c->closing) {
        Window *w = c->ready;
        c->ready = w->nextReady;
        w->nextReady = NULL;
        w->state = WIN_FREE;
        void *cookie = w->cookie;
        w->cookie = NULL;
        if (cookie)
            host->onSendDone(&c->sc.base, cookie);
    }
    if (c->closing)
        return;
    if (c->failWhy[0]) {
        char why[128];
        snprintf(why, sizeof(why), "%s", c->failWhy);
        rdmaCloseConn(&c->sc.base, why);
        return;
    }
    rdmaReapReads(c);
    if (c->closing)
        return;
    if (c->readMoved && host->onPayloadMoved) { /* a relay here may forward those bytes */
        c->readMoved = 0;
        host->onPayloadMoved(&c->sc.base);
        if (c->closing)
            return;
    }
    if (rdmaPumpReads(c) == -1) {
        rdmaCloseConn(&c->sc.base, "cannot post RDMA reads");
        return;
    }
    if (c->up && rdmaFlush(c) == -1)
        return;
    if (c->up)
        rdmaRead(c);
}

/* Process the stream and hand on what it did. */
static void rdmaProgress(RdmaConn *c)
{
    c->inHandler = 1;
    int rc = rdmaStreamProcess(c->s);
    rdmaAfterProcess(c);
    if (rc == -1 && !c->closing) {
        char why[160];
        snprintf(why, sizeof(why), "%s",
                 rdmaStreamGetState(c->s) == RDMA_STREAM_CLOSED ? "peer disconnected"
                                                                : rdmaStreamError(c->s));
        rdmaCloseConn(&c->sc.base, why[0] ? why : "stream failed");
    }
    c->inHandler = 0;
    if (c->closing)
        free(c);
}

static void rdmaOnStreamFd(void *arg, uint32_t events)
{
    rdmaProgress(arg);
}

/* ---- teardown ------------------------------------------------------------------------ */

static void rdmaUnlinkAll(RdmaConn *c)
{
    objListUnlink(&c->all);
    rd.unlinks++;
}

/* Close: the QP goes to the error state and the windows are deallocated
 * (no READ of the peer is answered any more); the stream disconnects and
 * waits for every posted work request's completion or flush (our READs
 * land nowhere after it); then reads are reported failed, and only then
 * the engine is told (which drops the pins). The RdmaConn itself is freed
 * at once, or when the handler unwinds. */
static void rdmaCloseConn(Conn *base, const char *why)
{
    RdmaConn *c = (RdmaConn *)base;

    if (c->closing)
        return;
    c->closing = 1;
    rdmaUnlinkAll(c);
    if (c->fd != -1)
        host->unwatch(c->fd);
    c->fd = -1;
    rdmaWindowsKill(c);
    framerDestroy(&c->sc.rx); /* no payload lands after the close */
    rdmaStreamFree(c->s);     /* onWc / onSent during the flush: bookkeeping only */
    c->s = NULL;
    rdmaWindowsFree(c);
    for (ReadOp *op; (op = rdmaReadFirst(c));) {
        objListUnlink(&op->link);
        rdmaReadReport(c, op, 0, NULL);
    }
    while (c->txHead) {
        TxItem *n = c->txHead->next;
        free(c->txHead);
        c->txHead = n;
    }
    free(c->sent);
    c->sent = NULL;
    host->onClosed(base, why);
    if (!c->inHandler)
        free(c);
}

/* ---- connections ------------------------------------------------------------------- */

static void rdmaStreamCfg(RdmaStreamConfig *cfg, RdmaConn *c, int incoming)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->rxSize = SP_RX_MIN; /* until the peer proved the secret */
    cfg->txSize = incoming ? RDMA_TX_SIZE_IN : RDMA_TX_SIZE;
    cfg->userSendWr = RDMA_USER_WR;
    cfg->userSendSge = 2;
    cfg->responderResources = rd.rdAtomic;
    cfg->initiatorDepth = rd.rdAtomic;
    cfg->pd = rd.pd;
    cfg->onWc = rdmaOnWc;
    cfg->onSent = rdmaOnSent;
    cfg->userCtx = c;
}

static RdmaConn *rdmaNew(const char *desc, int outgoing)
{
    RdmaConn *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->fd = -1;
    framerInit(&c->sc.rx);
    objListInit(&c->reads);
    objListInit(&c->all);
    c->sc.base.ops = &rdmaTransport;
    c->sc.base.id = host->nextConnId();
    c->sc.base.state = CONN_CONNECTING;
    c->sc.base.outgoing = outgoing;
    snprintf(c->sc.base.desc, sizeof(c->sc.base.desc), "rdma %s", desc);
    return c;
}

/* Put c's stream descriptor in the engine's epoll and c on the list.
 * Returns 0 or -1. */
static int rdmaAdopt(RdmaConn *c)
{
    int fd = rdmaStreamFd(c->s);

    if (fd == -1 || host->watch(fd, EPOLLIN, rdmaOnStreamFd, c) == -1)
        return -1;
    c->fd = fd;
    objListPushFront(&rd.all, &c->all);
    return 0;
}

/* May one more connection from source start its handshake? Returns NULL,
 * or why not; then *victim is the unproved incoming connection that gives
 * way for it (the oldest from source, or the oldest of all), or NULL when
 * none can. Counted before anything is allocated for it. */
static const char *rdmaPreauthRoom(const char *source, RdmaConn **victim)
{
    int all = 0, same = 0;
    RdmaConn *oldest = NULL, *oldestSame = NULL;

    /* Newest first: the last one seen is the oldest. */
    for (RdmaConn *o = rdmaConnFirst(); o; o = rdmaConnNext(o)) {
        if (o->sc.base.outgoing || o->authed)
            continue;
        all++;
        oldest = o;
        if (!strcmp(o->sc.base.source, source)) {
            same++;
            oldestSame = o;
        }
    }
    HandshakeEvict ev = handshakeEvict(&rdmaPreauthCaps, all, same);
    *victim = ev == HANDSHAKE_EVICT_SAME ? oldestSame : ev == HANDSHAKE_EVICT_ANY ? oldest : NULL;
    return handshakeVerdict(&rdmaPreauthCaps, all, same);
}

/* Reject a connection request and destroy its id (logged when either
 * fails). */
static void rdmaRefuse(struct rdma_cm_id *id, const char *desc)
{
    if (rdma_reject(id, NULL, 0))
        host->log("warning", "%s: rdma_reject: %s", desc, strerror(errno));
    if (rdma_destroy_id(id))
        host->log("warning", "%s: rdma_destroy_id: %s", desc, strerror(errno));
}

static void rdmaOnConnectRequest(struct rdma_cm_id *id)
{
    char err[192], desc[64], source[INET6_ADDRSTRLEN];
    struct sockaddr *sa = rdma_get_peer_addr(id);
    int port = 0;

    if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, source, sizeof(source));
        port = ntohs(s6->sin6_port);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
        if (!inet_ntop(AF_INET, &s4->sin_addr, source, sizeof(source)))
            snprintf(source, sizeof(source), "?");
        port = ntohs(s4->sin_port);
    }
    RdmaConn *victim = NULL;
    const char *full = rdmaPreauthRoom(source, &victim);
    snprintf(desc, sizeof(desc), "rdma %s (in)", source);
    if (full && victim) { /* idle strangers never shut out a newcomer */
        char why[160];
        snprintf(why, sizeof(why), "%s: the oldest gives way to a newcomer", full);
        host->refused(victim->sc.base.desc, why);
        rdmaCloseConn(&victim->sc.base, why);
    } else if (full) {
        host->refused(desc, full);
        rdmaRefuse(id, desc);
        return;
    }
    snprintf(desc, sizeof(desc), "%s:%d (in)", source, port);
    RdmaConn *c = rdmaNew(desc, 0);
    if (!c) {
        host->log("warning", "%s: refused: out of memory", desc);
        rdmaRefuse(id, desc);
        return;
    }
    snprintf(c->sc.base.source, sizeof(c->sc.base.source), "%s", source);
    RdmaStreamConfig cfg;
    rdmaStreamCfg(&cfg, c, 1);
    c->s = rdmaStreamAccept(id, &cfg, err, sizeof(err)); /* destroys id on failure */
    if (!c->s) {
        host->log("warning", "%s: refused: %s", c->sc.base.desc, err);
        free(c);
        return;
    }
    if (rdmaAdopt(c) == -1) {
        host->log("warning", "%s: cannot watch the stream", c->sc.base.desc);
        rdmaStreamFree(c->s);
        free(c);
    }
}

static RdmaConn *rdmaByStream(const RdmaStream *s)
{
    for (RdmaConn *c = rdmaConnFirst(); c; c = rdmaConnNext(c))
        if (c->s == s)
            return c;
    return NULL;
}

/* The listener's rdma_cm events: new connections, and the events of the
 * accepted ones (their id's context is the stream). */
static void rdmaOnCmEvent(void *arg, uint32_t events)
{
    VerbsCmEvent ev;

    while (verbsNextCmEvent(rd.ec, &ev) == 0) {
        if (ev.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
            rdmaOnConnectRequest(ev.id);
            continue;
        }
        RdmaConn *c = rdmaByStream(ev.id->context);
        if (!c || c->closing)
            continue;
        c->inHandler = 1;
        if (rdmaStreamCmEvent(c->s, ev.type, ev.status) == -1) {
            char why[160];
            snprintf(why, sizeof(why), "%s (%s)",
                     rdmaStreamError(c->s)[0] ? rdmaStreamError(c->s) : "peer disconnected",
                     rdma_event_str(ev.type));
            rdmaCloseConn(&c->sc.base, why);
        } else {
            rdmaAfterProcess(c);
        }
        c->inHandler = 0;
        if (c->closing)
            free(c);
    }
}

static Conn *rdmaConnect(Peer *peer, const char *addr, int port, char *err, size_t errLen)
{
    char desc[64], serr[192];

    if (port <= 0 || port > 65535) {
        snprintf(err, errLen, "UNAVAILABLE bad RDMA address %s:%d", addr, port);
        return NULL;
    }
    snprintf(desc, sizeof(desc), "%s:%d", addr, port);
    RdmaConn *c = rdmaNew(desc, 1);
    if (!c) {
        snprintf(err, errLen, "OOM out of memory");
        return NULL;
    }
    RdmaStreamConfig cfg;
    rdmaStreamCfg(&cfg, c, 0);
    cfg.bindAddr = rd.bindAddr; /* the arena's device, not whatever the route picks */
    c->s = rdmaStreamConnect(addr, port, &cfg, serr, sizeof(serr));
    if (!c->s) {
        snprintf(err, errLen, "UNAVAILABLE %s: %s", desc, serr);
        free(c);
        return NULL;
    }
    if (rdmaAdopt(c) == -1) {
        snprintf(err, errLen, "UNAVAILABLE cannot watch the RDMA stream to %s", desc);
        rdmaStreamFree(c->s);
        free(c);
        return NULL;
    }
    return &c->sc.base;
}

/* The engine's handshake succeeded: the peer may now read through the keys
 * it is given, and gets our full-size receive buffer at the next
 * re-registration. Returns 0 or -1 (the engine closes c). */
static int rdmaAuthenticated(Conn *base)
{
    RdmaConn *c = (RdmaConn *)base;

    if (c->closing)
        return -1;
    if (c->authed)
        return 0;
    if (rdmaStreamAllowRemoteRead(c->s) == -1) {
        host->log("warning", "%s: cannot enable remote read: %s", base->desc,
                  rdmaStreamError(c->s));
        return -1;
    }
    if (rdmaStreamResizeRx(c->s, RDMA_RX_SIZE) == -1) {
        host->log("warning", "%s: cannot grow the receive buffer", base->desc);
        return -1;
    }
    c->authed = 1;
    return 0;
}

/* Every stream, every engine tick: keepalives of idle connections and the
 * dead-peer checks of the stream, however many connections there are. */
static void rdmaTick(void)
{
    uint64_t gen = ++rd.tickGen;
    RdmaConn *c = rdmaConnFirst();

    /* What one connection's progress tells the engine may close others:
     * while nothing was unlinked, c and its successor are still listed;
     * otherwise start again from the head, past the ones already done. */
    while (c) {
        if (c->tickGen == gen) {
            c = rdmaConnNext(c);
            continue;
        }
        c->tickGen = gen;
        uint64_t unlinks = rd.unlinks;
        rdmaProgress(c);
        c = rd.unlinks == unlinks ? rdmaConnNext(c) : rdmaConnFirst();
    }
}

/* ---- start-up and shutdown ----------------------------------------------------------- */

static int rdmaListen(const char *bindAddr, int port, char *err, size_t errLen)
{
    return 0; /* done by rdmaTransportInit, which needs the device first */
}

static void rdmaShutdown(void)
{
    for (RdmaConn *c; (c = rdmaConnFirst());)
        rdmaCloseConn(&c->sc.base, "node shutting down");
    if (rd.listenId && rdma_destroy_id(rd.listenId))
        host->log("warning", "rdma: rdma_destroy_id (listener): %s", strerror(errno));
    if (rd.ec) {
        host->unwatch(rd.ec->fd);
        rdma_destroy_event_channel(rd.ec);
    }
    rdmaRegCacheFree(rd.regs);
    if (rd.arenaMr) {
        int rc = ibv_dereg_mr(rd.arenaMr);
        if (rc)
            host->log("warning", "rdma: ibv_dereg_mr (arena): %s", strerror(rc));
    }
    if (rd.pd) {
        int rc = ibv_dealloc_pd(rd.pd);
        if (rc)
            host->log("warning", "rdma: ibv_dealloc_pd: %s", strerror(rc));
    }
    memset(&rd, 0, sizeof(rd));
    objListInit(&rd.all);
}

/* Can this device bind type-2 windows? One allocation tells (freed again). */
static RdmaKeyMode rdmaProbeKeys(void)
{
    struct ibv_mw *mw = ibv_alloc_mw(rd.pd, IBV_MW_TYPE_2);

    if (!mw) {
        host->log("warning",
                  "rdma: no type-2 memory windows on this device (ibv_alloc_mw: %s): read keys "
                  "are per-object registrations, valid until the registration is evicted",
                  strerror(errno));
        return RDMA_KEYS_OBJREG;
    }
    int rc = ibv_dealloc_mw(mw);
    if (rc)
        host->log("warning", "rdma: ibv_dealloc_mw: %s", strerror(rc));
    return RDMA_KEYS_WINDOW;
}

const TransportOps *rdmaTransportInit(const TransportHost *h, const RdmaTransportConfig *cfg,
                                      char *err, size_t errLen)
{
    host = h;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->rdmaPort)};
    struct ibv_device_attr da;

    memset(&rd, 0, sizeof(rd));
    objListInit(&rd.all);
    rd.arenaBase = cfg->arenaBase;
    rd.arenaSize = cfg->arenaSize;
    if (inet_pton(AF_INET, cfg->rdmaBind, &sa.sin_addr) != 1) {
        snprintf(err, errLen, "rdma-bind '%s' is not an IPv4 address", cfg->rdmaBind);
        return NULL;
    }
    snprintf(rd.bindAddr, sizeof(rd.bindAddr), "%s", cfg->rdmaBind);
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
    rd.keys = rdmaProbeKeys();
    rd.regs = rdmaRegCacheNew(
        rd.pd, rd.keys == RDMA_KEYS_WINDOW ? IBV_ACCESS_MW_BIND : IBV_ACCESS_REMOTE_READ,
        RDMA_REG_CACHE_MAX, host->log);
    if (!rd.regs) {
        snprintf(err, errLen, "out of memory for the registration cache");
        goto out_shutdown;
    }
    /* Local access (our READs land in it, gather writes send from it) and
     * window binding: no key of the arena opens it to a peer. */
    int access = IBV_ACCESS_LOCAL_WRITE | (rd.keys == RDMA_KEYS_WINDOW ? IBV_ACCESS_MW_BIND : 0);
    rd.arenaMr = ibv_reg_mr(rd.pd, rd.arenaBase, rd.arenaSize, access);
    if (!rd.arenaMr) {
        snprintf(err, errLen,
                 "cannot register the %llu-byte arena with %s: %s (raise the memlock limit: "
                 "ulimit -l unlimited, or LimitMEMLOCK=infinity)",
                 (unsigned long long)rd.arenaSize, dev, strerror(errno));
        goto out_shutdown;
    }
    int fl = fcntl(rd.ec->fd, F_GETFL);
    if (fl == -1 || fcntl(rd.ec->fd, F_SETFL, fl | O_NONBLOCK) == -1 ||
        host->watch(rd.ec->fd, EPOLLIN, rdmaOnCmEvent, NULL) == -1) {
        snprintf(err, errLen, "cannot watch the rdma_cm event channel");
        goto out_shutdown;
    }
    if (rdma_listen(rd.listenId, RDMA_LISTEN_BACKLOG)) {
        snprintf(err, errLen, "rdma_listen: %s", strerror(errno));
        goto out_shutdown;
    }
    host->log("notice",
              "RDMA on %s (%s:%d), arena of %llu bytes registered, %d reads in flight, read keys: "
              "%s",
              dev, cfg->rdmaBind, cfg->rdmaPort, (unsigned long long)rd.arenaSize, rd.rdAtomic,
              rd.keys == RDMA_KEYS_WINDOW ? "a memory window per transfer"
                                          : "a registration per object");
    return &rdmaTransport;

out_shutdown:
    rdmaShutdown();
    return NULL;
}

static const TransportOps rdmaTransport = {
    .name = "rdma",
    .feature = OBJ_FEAT_RDMA,
    .listen = rdmaListen,
    .shutdown = rdmaShutdown,
    .connect = rdmaConnect,
    .send = rdmaSend,
    .recvPayload = streamRecvPayload,
    .discardPayload = streamDiscardPayload,
    .payloadHash = streamPayloadHash,
    .payloadLanded = streamPayloadLanded,
    .readRemote = rdmaReadRemote,
    .readLanded = rdmaReadLanded,
    .grantRead = rdmaGrantRead,
    .revokeRead = rdmaRevokeRead,
    .authenticated = rdmaAuthenticated,
    .tick = rdmaTick,
    .close = rdmaCloseConn,
};
