/*
 * stream.c - the one RDMA stream endpoint (stream.h): an RC queue pair
 * carrying a byte stream each way in the Valkey Over RDMA protocol.
 *
 * Layout, top-down: small helpers, buffers, posting, the completion
 * handlers, state, bytes, the engine's accessors, teardown; the control
 * block and tunables are in streamint.h, the set-up with rdma_cm and the
 * progress of a stream's own event channel in streamcm.c. Why the
 * buffers, work request ids, completion queues and QP set-up are as they
 * are: docs/architecture.md, "The RDMA stream endpoint"; the protocol:
 * docs/rdma.md, "The Valkey Over RDMA wire".
 */
#include "streamint.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* ---- small helpers ----------------------------------------------------------------- */

/* streamNowMs: a monotonic clock in milliseconds. Can't fail. */
uint64_t streamNowMs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* streamFail: record why the stream failed (the first reason wins) and
 * mark it FAILED. Returns -1 so callers can `return streamFail(...)`. */
int streamFail(RdmaStream *s, const char *fmt, ...)
{
    if (s->state != RDMA_STREAM_FAILED) {
        va_list ap;
        va_start(ap, fmt);
        if (s->state != RDMA_STREAM_CLOSED || !s->err[0])
            vsnprintf(s->err, sizeof(s->err), fmt, ap);
        va_end(ap);
        s->state = RDMA_STREAM_FAILED;
    }
    return -1;
}

/* pageMap / pageUnmap: a page-aligned private region of len bytes (its own
 * mapping, so registration pins nothing else and fork sees whole pages).
 * pageMap returns NULL when out of memory. */
static void *pageMap(size_t len, size_t *mapLen)
{
    long page = sysconf(_SC_PAGESIZE);
    *mapLen = (len + (size_t)page - 1) & ~((size_t)page - 1);
    void *p = mmap(NULL, *mapLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    madvise(p, *mapLen, MADV_DONTDUMP);
    return p;
}

static void pageUnmap(void *p, size_t mapLen)
{
    if (p)
        munmap(p, mapLen);
}

/* streamMapRegister: map len bytes and register them with access. Returns 0,
 * or -1 with the stream failed (nothing left mapped). */
int streamMapRegister(RdmaStream *s, size_t len, int access, uint8_t **buf, size_t *mapLen,
                      struct ibv_mr **mr)
{
    *buf = pageMap(len, mapLen);
    if (!*buf)
        return streamFail(s, "out of memory mapping %zu bytes", len);
    *mr = ibv_reg_mr(s->pd, *buf, len, access);
    if (!*mr) {
        int e = errno;
        pageUnmap(*buf, *mapLen);
        *buf = NULL;
        return streamFail(s, "ibv_reg_mr of %zu bytes: %s", len, strerror(e));
    }
    return 0;
}

/* unregisterAndUnmap: undo streamMapRegister. Accepts an empty slot. */
static void unregisterAndUnmap(uint8_t **buf, size_t mapLen, struct ibv_mr **mr)
{
    if (*mr)
        ibv_dereg_mr(*mr);
    *mr = NULL;
    pageUnmap(*buf, mapLen);
    *buf = NULL;
}

/* ---- posting ----------------------------------------------------------------------- */

/* streamPostRecv: post receive slot i. Returns 0 or -1 (stream failed). */
int streamPostRecv(RdmaStream *s, uint32_t i)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)(s->cmdBuf + (size_t)i * SP_CMD_SIZE),
        .length = SP_CMD_SIZE,
        .lkey = s->cmdMr->lkey,
    };
    struct ibv_recv_wr wr = {
        .wr_id = ((uint64_t)i << 3) | WRID_RECV, .sg_list = &sge, .num_sge = 1};
    struct ibv_recv_wr *bad;
    int rc = ibv_post_recv(s->qp, &wr, &bad);
    if (rc)
        return streamFail(s, "ibv_post_recv: %s", strerror(rc));
    s->recvPosted++;
    return 0;
}

/* streamSendCmd: send one control message. Returns 0, or -1 (stream failed: no
 * free slot means the peer has not acknowledged 32 of them, or the post
 * failed). */
int streamSendCmd(RdmaStream *s, const SpCmd *c)
{
    if (!s->sendSlotFree)
        return streamFail(s, "all %d control send slots are in flight", SP_SEND_SLOTS);
    uint32_t slot = (uint32_t)__builtin_ctz(s->sendSlotFree);
    uint8_t *buf = s->cmdBuf + (size_t)(s->cfg.recvWr + slot) * SP_CMD_SIZE;
    spEncode(c, buf);
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = SP_CMD_SIZE, .lkey = s->cmdMr->lkey};
    struct ibv_send_wr wr = {
        .wr_id = ((uint64_t)slot << 3) | WRID_CMDSEND,
        .sg_list = &sge,
        .num_sge = 1,
        .opcode = IBV_WR_SEND,
        .send_flags = IBV_SEND_SIGNALED,
    };
    struct ibv_send_wr *bad;
    int rc = ibv_post_send(s->qp, &wr, &bad);
    if (rc)
        return streamFail(s, "ibv_post_send (control %u): %s", c->opcode, strerror(rc));
    s->sendSlotFree &= ~(1u << slot);
    s->ownSends++;
    s->lastSendMs = streamNowMs();
    return 0;
}

/* streamRegisterRx: tell the peer where to write (our RX buffer, from offset 0),
 * switching to a buffer of the size asked by rdmaStreamResizeRx first.
 * Only called when the old buffer is fully consumed, so no write of the
 * peer can still target it. Returns 0 or -1 (stream failed). */
int streamRegisterRx(RdmaStream *s)
{
    if (s->rxNext && s->rxNext != s->rx.length) {
        uint8_t *nb;
        size_t nl;
        struct ibv_mr *nm;
        if (streamMapRegister(s, s->rxNext, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, &nb,
                              &nl, &nm) < 0)
            return -1;
        unregisterAndUnmap(&s->rxBuf, s->rxMapLen, &s->rxMr);
        s->rxBuf = nb;
        s->rxMapLen = nl;
        s->rxMr = nm;
        s->rx.length = s->rxNext;
    }
    s->rxNext = 0;
    s->rx.written = s->rx.read = 0;
    SpCmd c = {.opcode = SP_OP_REGISTER_XFER_MEM,
               .addr = (uintptr_t)s->rxBuf,
               .length = s->rx.length,
               .key = s->rxMr->rkey};
    return streamSendCmd(s, &c);
}

/* streamSetQpAccess: the QP's remote access: WRITE (the stream) and READ only
 * once granted. Returns 0 or -1 (stream failed). */
int streamSetQpAccess(RdmaStream *s)
{
    struct ibv_qp_attr a = {0};
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | (s->remoteRead ? IBV_ACCESS_REMOTE_READ : 0);
    int rc = ibv_modify_qp(s->qp, &a, IBV_QP_ACCESS_FLAGS);
    if (rc)
        return streamFail(s, "ibv_modify_qp (access flags): %s", strerror(rc));
    return 0;
}

/* ---- completions ------------------------------------------------------------------- */

/* onCmd: a control message arrived in receive slot i. Returns 0 or -1. */
static int onCmd(RdmaStream *s, uint32_t i, uint32_t len)
{
    SpCmd c;
    char why[160];
    if (spDecode(s->cmdBuf + (size_t)i * SP_CMD_SIZE, len, &c, why, sizeof(why)) < 0)
        return streamFail(s, "bad control message from the peer: %s", why);
    switch (c.opcode) {
        case SP_OP_GET_SERVER_FEATURE:
            if (s->accepted) {
                SpCmd r = {.opcode = SP_OP_GET_SERVER_FEATURE, .select = c.select, .features = 0};
                if (streamSendCmd(s, &r) < 0)
                    return -1;
            }
            break;
        case SP_OP_REGISTER_XFER_MEM:
            if (spTxRegister(&s->tx, &c) < 0)
                return streamFail(s,
                                  "the peer registered a new RX buffer while the old one had room");
            break;
        case SP_OP_KEEPALIVE:
            s->keepalivesIn++;
            break;
        default: /* SetClientFeature (no features asked: checked) */
            break;
    }
    return streamPostRecv(s, i);
}

/* onWriteDone: the oldest data write completed (ok) or was flushed. */
static void onWriteDone(RdmaStream *s, int ok)
{
    if (!s->wCount)
        return;
    StreamWrite *w = &s->writes[(s->wHead + SP_WRITES_MAX - s->wCount) % SP_WRITES_MAX];
    s->wCount--;
    s->txTail = w->stageEnd;
    if (!s->wCount)
        s->txHead = s->txTail = 0;
    if (w->gather) {
        s->gathers--;
        if (s->cfg.onSent)
            s->cfg.onSent(s->cfg.userCtx, w->token, ok);
    }
}

/* onWc: one completion. Returns 0, or -1 when it failed the stream. */
static int onWc(RdmaStream *s, const struct ibv_wc *wc)
{
    uint32_t kind = WRID_KIND(wc->wr_id);
    int ok = wc->status == IBV_WC_SUCCESS;

    if (!(wc->wr_id & 1u)) { /* the user's */
        if (s->userSends)
            s->userSends--;
        if (s->cfg.onWc)
            s->cfg.onWc(s->cfg.userCtx, wc);
        if (!ok && s->state < RDMA_STREAM_CLOSED)
            return streamFail(s, "work request failed: %s", ibv_wc_status_str(wc->status));
        return 0;
    }
    switch (kind) {
        case WRID_RECV:
            s->recvPosted--;
            if (!ok)
                break;
            if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
                uint32_t n = ntohl(wc->imm_data);
                if (spRxArrived(&s->rx, n) < 0)
                    return streamFail(s, "the peer wrote %u bytes past its RX buffer's end", n);
                return streamPostRecv(s, WRID_INDEX(wc->wr_id));
            }
            if (wc->opcode == IBV_WC_RECV)
                return onCmd(s, WRID_INDEX(wc->wr_id), wc->byte_len);
            return streamFail(s, "unexpected receive completion opcode %d", wc->opcode);
        case WRID_CMDSEND:
            s->ownSends--;
            s->sendSlotFree |= 1u << WRID_INDEX(wc->wr_id);
            break;
        case WRID_WRITE:
            s->ownSends--;
            onWriteDone(s, ok);
            break;
        default:
            return streamFail(s, "completion with an unknown work request id");
    }
    if (!ok && s->state < RDMA_STREAM_CLOSED)
        return streamFail(s, "work request failed: %s", ibv_wc_status_str(wc->status));
    return 0;
}

/* pollCq: poll cq dry. Returns 0, or -1 when polling failed. */
static int pollCq(RdmaStream *s, struct ibv_cq *cq)
{
    struct ibv_wc wc[32];
    for (;;) {
        int n = ibv_poll_cq(cq, 32, wc);
        if (n < 0)
            return streamFail(s, "ibv_poll_cq failed");
        for (int i = 0; i < n; i++)
            onWc(s, &wc[i]);
        if (n < 32)
            return 0;
    }
}

/* stagePressure: is the staging ring or the FIFO of writes more than half
 * used (a writer may soon wait for room)? */
static int stagePressure(const RdmaStream *s);

/* sendInterest: does anyone wait on a send completion? The user's own work
 * (READs, binds), gather writes (their payload stays pinned until onSent),
 * a staging ring or control slots running short. Otherwise send
 * completions wake nobody: they are reaped at the next Process, so a plain
 * write costs the peer's wake-up only, not ours too. */
static int sendInterest(const RdmaStream *s)
{
    return s->userSends || s->gathers || stagePressure(s) ||
           __builtin_popcount(~s->sendSlotFree) > SP_SEND_SLOTS / 2;
}

/* armSend: ask for an event at the next send completion (once). Returns 0
 * or -1 (stream failed). */
static int armSend(RdmaStream *s)
{
    if (s->sendArmed || !s->scq)
        return 0;
    int rc = ibv_req_notify_cq(s->scq, 0);
    if (rc)
        return streamFail(s, "ibv_req_notify_cq (sends): %s", strerror(rc));
    s->sendArmed = 1;
    return 0;
}

/* waitOnSends: someone now waits on a send completion: reap what already
 * completed (nothing woke us for it), then arm the send CQ and reap once
 * more, so that a completion between the two is not missed. Returns 0 or -1
 * (stream failed). */
static int waitOnSends(RdmaStream *s)
{
    if (!s->scq)
        return 0;
    if (pollCq(s, s->scq) < 0 || armSend(s) < 0)
        return -1;
    return pollCq(s, s->scq);
}

/* streamDrainCq: take the completion events (own channel), re-arm, and poll both
 * CQs dry, polling once more after arming so that nothing slips between.
 * The receive CQ is always re-armed, the send CQ only while sendInterest. */
int streamDrainCq(RdmaStream *s)
{
    if (!s->cq)
        return 0;
    if (s->ownCc) {
        struct ibv_cq *evCq;
        void *evCtx;
        while (ibv_get_cq_event(s->cc, &evCq, &evCtx) == 0) {
            ibv_ack_cq_events(evCq, 1);
            if (evCq == s->scq)
                s->sendArmed = 0;
        }
        if (errno != EAGAIN)
            return streamFail(s, "ibv_get_cq_event: %s", strerror(errno));
    } else {
        s->sendArmed = 0; /* the owner took the event, maybe ours: arming again is harmless */
    }
    if (pollCq(s, s->cq) < 0 || pollCq(s, s->scq) < 0)
        return -1;
    int rc = ibv_req_notify_cq(s->cq, 0);
    if (rc)
        return streamFail(s, "ibv_req_notify_cq: %s", strerror(rc));
    if (sendInterest(s) && armSend(s) < 0)
        return -1;
    if (pollCq(s, s->cq) < 0 || pollCq(s, s->scq) < 0)
        return -1;
    return 0;
}

/* ---- state ------------------------------------------------------------------------- */

int rdmaStreamFd(const RdmaStream *s)
{
    if (s->epfd >= 0)
        return s->epfd;
    return s->ownCc ? s->cc->fd : -1;
}

RdmaStreamState rdmaStreamGetState(const RdmaStream *s)
{
    return s->state;
}

const char *rdmaStreamError(const RdmaStream *s)
{
    return s->err;
}

/* ---- bytes ------------------------------------------------------------------------- */

size_t rdmaStreamReadable(const RdmaStream *s)
{
    return s->rxBuf ? spRxReady(&s->rx) : 0;
}

const uint8_t *rdmaStreamPeek(const RdmaStream *s, size_t *len)
{
    *len = rdmaStreamReadable(s);
    return *len ? s->rxBuf + s->rx.read : NULL;
}

int rdmaStreamConsume(RdmaStream *s, size_t n)
{
    if (n > spRxReady(&s->rx))
        n = spRxReady(&s->rx);
    if (!n)
        return 0;
    if (spRxConsume(&s->rx, (uint32_t)n) && s->state == RDMA_STREAM_OPEN)
        return streamRegisterRx(s);
    return 0;
}

size_t rdmaStreamRead(RdmaStream *s, void *buf, size_t cap)
{
    size_t len;
    const uint8_t *p = rdmaStreamPeek(s, &len);
    if (len > cap)
        len = cap;
    if (!len)
        return 0;
    memcpy(buf, p, len);
    rdmaStreamConsume(s, len);
    return len;
}

/* stageRoom: the largest contiguous free span of the staging ring, with
 * its offset in *at. Wraps to the start when the end has no room. */
static uint32_t stageRoom(const RdmaStream *s, uint32_t *at)
{
    if (!s->wCount) {
        *at = 0;
        return s->txSize;
    }
    if (s->txHead > s->txTail) {
        uint32_t end = s->txSize - s->txHead;
        if (end >= s->txTail || end >= 4096) {
            *at = s->txHead;
            return end;
        }
        *at = 0;
        return s->txTail;
    }
    *at = s->txHead;
    return s->txTail - s->txHead; /* wrapped: up to the oldest in flight */
}

/* txResize: switch to the staging size asked by rdmaStreamResizeTx once
 * no write is in flight from the old buffer (it is released; the next
 * write maps the new one). Can't fail. */
static void txResize(RdmaStream *s)
{
    if (!s->txNext || s->wCount)
        return;
    if (s->txNext != s->txSize) {
        unregisterAndUnmap(&s->txBuf, s->txMapLen, &s->txMr);
        s->txMapLen = 0;
        s->txSize = s->txNext;
    }
    s->txNext = 0;
}

/* txEnsure: map and register the staging buffer at the first write (and
 * at the first after a resize). Returns 0 or -1 (stream failed). */
static int txEnsure(RdmaStream *s)
{
    txResize(s);
    if (s->txBuf)
        return 0;
    return streamMapRegister(s, s->txSize, IBV_ACCESS_LOCAL_WRITE, &s->txBuf, &s->txMapLen,
                             &s->txMr);
}

static int stagePressure(const RdmaStream *s)
{
    uint32_t at;
    return s->wCount >= SP_WRITES_MAX / 2 || (s->txBuf && stageRoom(s, &at) < s->txSize / 2);
}

/* ourRoom: what our side (FIFO of writes, staging) could take now. */
static uint32_t ourRoom(const RdmaStream *s)
{
    uint32_t at;
    if (s->wCount == SP_WRITES_MAX)
        return 0;
    return s->txBuf ? stageRoom(s, &at) : s->txSize;
}

size_t rdmaStreamWritable(RdmaStream *s)
{
    if (s->state != RDMA_STREAM_OPEN)
        return 0;
    txResize(s);
    uint32_t room = ourRoom(s), peer = spTxRoom(&s->tx);
    if (!room && peer) {
        waitOnSends(s); /* our side is full */
        room = ourRoom(s);
    }
    return room < peer ? room : peer;
}

/* postWrite: one WRITE_WITH_IMM of the staging span [at, at + stageLen)
 * followed by an optional payload entry, into the peer's buffer. Returns 0
 * or -1 (stream failed). */
static int postWrite(RdmaStream *s, uint32_t at, uint32_t stageLen, const void *payload,
                     uint32_t payloadLen, uint32_t lkey, uint64_t token, int gather)
{
    struct ibv_sge sge[2];
    int n = 0;
    if (stageLen) {
        sge[n].addr = (uintptr_t)(s->txBuf + at);
        sge[n].length = stageLen;
        sge[n].lkey = s->txMr->lkey;
        n++;
    }
    if (payloadLen) {
        sge[n].addr = (uintptr_t)payload;
        sge[n].length = payloadLen;
        sge[n].lkey = lkey;
        n++;
    }
    uint32_t total = stageLen + payloadLen;
    if (gather && armSend(s) < 0) /* its user waits for onSent: that must wake it */
        return -1;
    struct ibv_send_wr wr = {
        .wr_id = ((uint64_t)s->wHead << 3) | WRID_WRITE,
        .sg_list = sge,
        .num_sge = n,
        .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
        .send_flags = IBV_SEND_SIGNALED,
        .imm_data = htonl(total),
    };
    wr.wr.rdma.rkey = s->tx.key;
    wr.wr.rdma.remote_addr = s->tx.addr + s->tx.offset;
    struct ibv_send_wr *bad;
    int rc = ibv_post_send(s->qp, &wr, &bad);
    if (rc)
        return streamFail(s, "ibv_post_send (stream write of %u bytes): %s", total, strerror(rc));
    spTxTake(&s->tx, total);
    s->txHead = at + stageLen;
    StreamWrite *w = &s->writes[s->wHead];
    w->stageEnd = s->txHead;
    w->token = token;
    w->gather = gather;
    s->gathers += gather ? 1 : 0;
    s->wHead = (s->wHead + 1) % SP_WRITES_MAX;
    s->wCount++;
    s->ownSends++;
    s->lastSendMs = streamNowMs();
    return 0;
}

ssize_t rdmaStreamWritev(RdmaStream *s, const struct iovec *iov, int iovcnt)
{
    if (s->state >= RDMA_STREAM_CLOSED)
        return -1;
    if (s->state != RDMA_STREAM_OPEN)
        return 0;
    int i = 0;
    size_t off = 0, done = 0; /* iov[i] has off bytes taken */
    while (i < iovcnt && iov[i].iov_len == 0)
        i++;
    if (i == iovcnt)
        return 0;
    if (txEnsure(s) < 0)
        return -1;
    int reaped = 0;
    while (i < iovcnt) {
        uint32_t at, room = s->wCount < SP_WRITES_MAX ? stageRoom(s, &at) : 0;
        uint32_t peer = spTxRoom(&s->tx);
        if (!room && peer && !reaped) { /* our side is full */
            reaped = 1;
            if (waitOnSends(s) < 0)
                return -1;
            continue;
        }
        uint32_t n = room < peer ? room : peer, filled = 0;
        /* Gather straight into the staging span: one copy, one write. */
        while (filled < n && i < iovcnt) {
            size_t k = iov[i].iov_len - off;
            if (k > n - filled)
                k = n - filled;
            memcpy(s->txBuf + at + filled, (const uint8_t *)iov[i].iov_base + off, k);
            filled += (uint32_t)k;
            off += k;
            while (i < iovcnt && off == iov[i].iov_len) {
                i++;
                off = 0;
            }
        }
        if (!filled)
            break;
        if (postWrite(s, at, filled, NULL, 0, 0, 0, 0) < 0)
            return -1;
        done += filled;
    }
    return (ssize_t)done;
}

ssize_t rdmaStreamWrite(RdmaStream *s, const void *buf, size_t len)
{
    struct iovec v = {.iov_base = (void *)buf, .iov_len = len};
    return rdmaStreamWritev(s, &v, 1);
}

int rdmaStreamWriteGather(RdmaStream *s, const void *hdr, size_t hdrLen, const void *payload,
                          size_t len, uint32_t lkey, uint64_t token)
{
    if (s->state >= RDMA_STREAM_CLOSED)
        return -1;
    if (s->state != RDMA_STREAM_OPEN || s->wCount == SP_WRITES_MAX)
        return 0;
    if (txEnsure(s) < 0)
        return -1;
    uint32_t at, room = stageRoom(s, &at);
    if (room < hdrLen || spTxRoom(&s->tx) < hdrLen + len || hdrLen + len > UINT32_MAX)
        return 0;
    memcpy(s->txBuf + at, hdr, hdrLen);
    if (postWrite(s, at, (uint32_t)hdrLen, payload, (uint32_t)len, lkey, token, 1) < 0)
        return -1;
    return 1;
}

/* ---- for the transfer engine ------------------------------------------------------- */

struct ibv_qp *rdmaStreamQp(const RdmaStream *s)
{
    return s->qpReady ? s->qp : NULL;
}

struct ibv_pd *rdmaStreamPd(const RdmaStream *s)
{
    return s->pd;
}

struct rdma_cm_id *rdmaStreamId(const RdmaStream *s)
{
    return s->id;
}

int rdmaStreamAllowRemoteRead(RdmaStream *s)
{
    if (!s->qpReady)
        return streamFail(s, "remote read granted before the queue pair exists");
    s->remoteRead = 1;
    return streamSetQpAccess(s);
}

int rdmaStreamResizeRx(RdmaStream *s, uint32_t rxSize)
{
    if (rxSize < SP_RX_MIN || rxSize > SP_RX_MAX)
        return -1;
    s->rxNext = rxSize;
    return 0;
}

int rdmaStreamResizeTx(RdmaStream *s, uint32_t txSize)
{
    if (txSize < SP_RX_MIN || txSize > SP_RX_MAX)
        return -1;
    s->txNext = txSize;
    txResize(s);
    return 0;
}

int rdmaStreamPostSend(RdmaStream *s, struct ibv_send_wr *wr)
{
    if (armSend(s) < 0) /* the user waits for these completions */
        return -1;
    int n = 0;
    for (struct ibv_send_wr *w = wr; w; w = w->next)
        n++;
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(s->qp, wr, &bad);
    if (rc) {
        int posted = 0;
        for (struct ibv_send_wr *w = wr; w && w != bad; w = w->next)
            posted++;
        s->userSends += (uint32_t)posted;
        return streamFail(s, "ibv_post_send: %s", strerror(rc));
    }
    s->userSends += (uint32_t)n;
    return 0;
}

/* See stream.h. */
unsigned rdmaStreamSendsPending(RdmaStream *s)
{
    if (s->ownSends) /* asking means waiting */
        waitOnSends(s);
    return s->ownSends;
}

uint64_t rdmaStreamKeepalivesIn(const RdmaStream *s)
{
    return s->keepalivesIn;
}

void *rdmaStreamUserCtx(const RdmaStream *s)
{
    return s->cfg.userCtx;
}

void rdmaStreamSetUserCtx(RdmaStream *s, void *userCtx)
{
    s->cfg.userCtx = userCtx;
}

const struct sockaddr *rdmaStreamPeerAddr(const RdmaStream *s)
{
    return s->id ? rdma_get_peer_addr(s->id) : NULL;
}

const struct sockaddr *rdmaStreamLocalAddr(const RdmaStream *s)
{
    return s->id ? rdma_get_local_addr(s->id) : NULL;
}

/* ---- teardown ---------------------------------------------------------------------- */

/* flushQp: move the QP to the error state and poll until every work
 * request we or the user posted has completed or been flushed (at most
 * SP_DRAIN_MS), so that no memory is released while the device may still
 * touch it. */
static void flushQp(RdmaStream *s)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
    int rc = ibv_modify_qp(s->qp, &a, IBV_QP_STATE);
    if (rc)
        snprintf(s->err, sizeof(s->err), "ibv_modify_qp (error state): %s", strerror(rc));
    if (s->state < RDMA_STREAM_CLOSED)
        s->state = RDMA_STREAM_CLOSED;
    uint64_t deadline = streamNowMs() + SP_DRAIN_MS;
    while ((s->ownSends || s->userSends || s->recvPosted) && streamNowMs() < deadline) {
        struct ibv_wc wc[32];
        int n = ibv_poll_cq(s->cq, 32, wc);
        if (n < 0)
            break;
        for (int i = 0; i < n; i++)
            onWc(s, &wc[i]);
        int m = ibv_poll_cq(s->scq, 32, wc);
        if (m < 0)
            break;
        for (int i = 0; i < m; i++)
            onWc(s, &wc[i]);
        if (n == 0 && m == 0) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
    }
    while (s->wCount) /* not flushed in time: the user still gets its tokens back */
        onWriteDone(s, 0);
}

void rdmaStreamFree(RdmaStream *s)
{
    if (!s)
        return;
    if (s->id && s->qpReady) {
        if (s->state == RDMA_STREAM_OPEN)
            rdma_disconnect(s->id);
        flushQp(s);
        if (s->ownQp)
            ibv_destroy_qp(s->qp);
        else
            rdma_destroy_qp(s->id);
    }
    if (s->cq)
        ibv_destroy_cq(s->cq);
    if (s->scq)
        ibv_destroy_cq(s->scq);
    if (s->ownCc && s->cc)
        ibv_destroy_comp_channel(s->cc);
    unregisterAndUnmap(&s->txBuf, s->txMapLen, &s->txMr);
    unregisterAndUnmap(&s->rxBuf, s->rxMapLen, &s->rxMr);
    unregisterAndUnmap(&s->cmdBuf, s->cmdLen, &s->cmdMr);
    if (s->ownPd && s->pd)
        ibv_dealloc_pd(s->pd);
    if (s->id)
        rdma_destroy_id(s->id);
    if (s->ec)
        rdma_destroy_event_channel(s->ec);
    if (s->epfd >= 0)
        close(s->epfd);
    free(s);
}
