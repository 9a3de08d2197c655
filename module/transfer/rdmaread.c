/*
 * rdmaread.c - the RDMA transport's READ rendezvous: on the serving side a
 * memory window bound over one object for one transfer (grantRead,
 * revokeRead), on the fetching side the READ chunks posted into the
 * created object and checksummed as they land (readRemote, readLanded),
 * and the completions of those work requests. The stream, sending and
 * connections are rdma.c's. Design: docs/architecture.md, "Large objects:
 * the READ rendezvous".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdmaint.h"

RdmaState rdmaSt;
const TransportHost *rdmaHost;

/* The oldest read of c, or NULL when it has none. */
ReadOp *rdmaReadFirst(const RdmaConn *c)
{
    ObjListLink *l = objListFirst(&c->reads);
    return l ? objListEntry(l, ReadOp, link) : NULL;
}

/* ---- the stream's callbacks: record only -------------------------------------------- */

void rdmaFail(RdmaConn *c, const char *fmt, const char *what)
{
    if (!c->failWhy[0])
        snprintf(c->failWhy, sizeof(c->failWhy), fmt, what);
}

/* A completion of one of our WRs (READ chunk, bind, invalidation), or its
 * flush at teardown. Bookkeeping, plus the checksum of a READ chunk that
 * just landed (while the NIC fills the next ones, and with the bytes still
 * in the cache: the fetch then needs no second pass); the engine hears of
 * it after the stream's processing returns (rdmaAfterProcess). */
void rdmaOnWc(void *ctx, const struct ibv_wc *wc)
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
                rdmaHost->log("warning", "%s: RDMA read failed: %s", c->sc.base.desc,
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

/* ---- windows ----------------------------------------------------------------------- */

/* Post one of our work requests on the stream's QP. Returns 0 or -1. */
static int rdmaPostUser(RdmaConn *c, struct ibv_send_wr *wr)
{
    if (rdmaStreamPostSend(c->s, wr) == -1) {
        rdmaHost->log("warning", "%s: posting %s: %s", c->sc.base.desc,
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
    if (rdmaSt.keys == RDMA_KEYS_WINDOW) {
        w->mw = ibv_alloc_mw(rdmaSt.pd, IBV_MW_TYPE_2);
        if (!w->mw) {
            rdmaHost->log("warning", "%s: ibv_alloc_mw: %s", c->sc.base.desc, strerror(errno));
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
void *rdmaGrantRead(Conn *base, const void *addr, uint64_t len, uint32_t *rkey)
{
    RdmaConn *c = (RdmaConn *)base;
    const uint8_t *a = addr;

    if (c->closing || !c->authed || a < rdmaSt.arenaBase ||
        a + len > rdmaSt.arenaBase + rdmaSt.arenaSize)
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
    RdmaReg *r = rdmaRegGet(rdmaSt.regs, a, len, err, sizeof(err));
    if (!r) {
        rdmaHost->log("warning", "%s: %s", c->sc.base.desc, err);
        return NULL;
    }
    if (rdmaSt.keys == RDMA_KEYS_OBJREG) {
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
 * comes back through rdmaHost->onSendDone once the peer can no longer read
 * with the key. A closing connection ends every grant itself. */
void rdmaRevokeRead(Conn *base, void *grant, void *cookie)
{
    RdmaConn *c = (RdmaConn *)base;
    Window *w = grant;

    if (c->closing || !w)
        return;
    w->cookie = cookie;
    if (rdmaSt.keys == RDMA_KEYS_OBJREG || !w->reg) { /* no window bound (the key stays the
                                                       * object's, or there was none) */
        if (w->reg)
            rdmaRegPut(w->reg);
        w->reg = NULL;
        w->state = WIN_FREE;
        rdmaHost->onSendDone(base, cookie);
        return;
    }
    /* A bind still in flight is before the invalidation on the same send
     * queue: posting it now is in order. */
    if (rdmaWindowInvalidate(c, w) == -1)
        base->ops->close(base, "cannot invalidate a memory window");
}

/* Kill every window of a closing connection: its QP is moved to the error
 * state first (nothing more is answered or executed on it), then each
 * window is deallocated, which invalidates it at once. Before the QP is
 * destroyed: a bound type-2 window holds a reference on its QP (rxe waits
 * for it). The Window records stay until the flush has passed their
 * completions on (rdmaWindowsFree). */
void rdmaWindowsKill(RdmaConn *c)
{
    struct ibv_qp *qp = c->s ? rdmaStreamQp(c->s) : NULL;

    if (qp && c->windows) {
        struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
        int rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE);
        if (rc)
            rdmaHost->log("warning", "%s: ibv_modify_qp(ERR): %s", c->sc.base.desc, strerror(rc));
    }
    for (Window *w = c->windows; w; w = w->next) {
        if (w->mw) {
            int rc = ibv_dealloc_mw(w->mw);
            if (rc)
                rdmaHost->log("warning", "%s: ibv_dealloc_mw: %s", c->sc.base.desc, strerror(rc));
            w->mw = NULL;
        }
    }
}

/* Free the window records of a closed connection (after the stream's
 * flush), dropping their registrations' references. */
void rdmaWindowsFree(RdmaConn *c)
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

/* ---- one-sided reads ------------------------------------------------------------------ */

/* Post read chunks while the window allows. Returns 0 or -1 (verbs error). */
int rdmaPumpReads(RdmaConn *c)
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
                                  .lkey = rdmaSt.arenaMr->lkey};
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
void rdmaReadReport(RdmaConn *c, ReadOp *op, int ok, const uint64_t *sum)
{
    c->reporting = op;
    rdmaHost->onReadDone(&c->sc.base, op->cookie, ok, sum);
    c->reporting = NULL;
    XXH3_freeState(op->hash);
    free(op);
}

/* TransportOps.readLanded: the landed prefix of the reads posted with
 * cookie (in flight, or being reported); 0 when none has that cookie. */
uint64_t rdmaReadLanded(Conn *base, void *cookie)
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
void rdmaReapReads(RdmaConn *c)
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

int rdmaReadRemote(Conn *base, void *dst, uint64_t len, uint64_t raddr, uint32_t rkey, void *cookie)
{
    RdmaConn *c = (RdmaConn *)base;
    uint8_t *d = dst;

    if (c->closing || d < rdmaSt.arenaBase || d + len > rdmaSt.arenaBase + rdmaSt.arenaSize)
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
        base->ops->close(base, "cannot post RDMA reads");
        return 0; /* the close reported the read as failed */
    }
    if (len == 0)
        rdmaReapReads(c);
    return 0;
}
