/*
 * rdmaconn.c - Redis protocol over RDMA, client side (rdmaconn.h): one RC
 * queue pair per connection carrying the RESP byte streams exactly as
 * module/rdma/resprdma.h specifies, with the slot and credit arithmetic of
 * module/rdma/ring.c.
 *
 * Receiving: our ring (told to the server in the connect private data) is
 * written by the server with RDMA_WRITE_WITH_IMM; each write consumes one of
 * the receive WRs we keep posted, and its immediate names the slot and the
 * length. Arrived slots are read in place, in order, by objRdmaRead or the
 * hiredis reader of the synchronous layer; a slot is handed back (a credit
 * the next message carries, or a data-less credit message once ring.h's
 * threshold is owed) only when every byte of it has been read, so a client
 * that stops reading stops the server instead of buffering without bound.
 *
 * Sending: request bytes are copied into a registered send buffer behind a
 * RespRdmaHdr and written into the server's next slot. A message needs a
 * send buffer and ring.h's credits; with neither, writes return EAGAIN and
 * the caller retries once objRdmaFd turned readable. Sends complete on a CQ
 * of their own that is polled when needed and armed only while a writer
 * waits for a buffer, so an ordinary round trip costs one wake-up.
 *
 * Events: one epoll descriptor (objRdmaFd) holds the completion channel, the
 * rdma_cm event channel (disconnects) and an eventfd raised while read data
 * is left over, so "readable" means "objRdmaProcess/objRdmaRead have work".
 *
 * Teardown: the QP is disconnected and moved to the error state, and the
 * send CQ is polled until the NIC has given back every send buffer, before
 * any registered memory is released.
 */
#include "rdmaconn.h"

#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "rdma/resprdma.h"
#include "rdma/ring.h"

/* ---- tunables ------------------------------------------------------------------------- */

#define RC_CONNECT_MS_DEFAULT 5000
#define RC_TX_MAX             16          /* send buffers (messages in flight) */
#define RC_TX_SIZE_MAX        (64 * 1024) /* bytes per send buffer, header included */
#define RC_INLINE_WANT        128         /* inline sends up to this, when the device can */
#define RC_FLUSH_MAX_MS       2000
#define RC_HDR_LEN            ((uint32_t)sizeof(RespRdmaHdr))
#define RC_WR_SEND            1u
#define RC_WR_RECV            2u
#define RC_ERRSTR_LEN         256
_Static_assert(RESP_RDMA_SLOT_SIZE <= RING_MAX_LEN, "slot length must fit the immediate");
_Static_assert(RC_TX_MAX <= 32, "the send-buffer bitmap is 32 bits");

/* ---- context ------------------------------------------------------------------------------ */

struct ObjRdmaConn {
    /* errors: err is sticky; a disconnect is held in gone* until read data runs out */
    int err;
    char errstr[RC_ERRSTR_LEN];
    int gone;     /* the peer left or the QP failed */
    int broken;   /* a protocol violation: take nothing more from the ring */
    int goneCode; /* the error to raise once nothing is left to read */
    char goneStr[RC_ERRSTR_LEN];
    int timeoutMs; /* synchronous calls; 0 = forever */

    /* connection manager */
    struct rdma_event_channel *ec;
    struct rdma_cm_id *id;
    int connected; /* ESTABLISHED seen: rdma_disconnect is due at teardown */
    int qpUp;

    /* verbs: the receive CQ is on the completion channel; the send CQ only while needed */
    struct ibv_pd *pd;
    struct ibv_comp_channel *comp;
    struct ibv_cq *recvCq, *sendCq;
    int sendArmed;
    int epfd, kickFd, kicked;
    uint32_t maxInline;

    /* our ring, written by the server */
    uint8_t *rxRing;
    struct ibv_mr *rxMr;
    uint32_t rxSlots, rxSlotSize;
    uint32_t *rxLen;   /* payload bytes per arrived slot */
    RingRx rx;         /* slots handed back (pending credits) */
    uint32_t rxArrive; /* slot the next message must arrive in */
    uint32_t rxUnread; /* arrived slots not yet fully read */
    uint32_t rxHead;   /* the oldest of them */
    uint32_t rxOff;    /* payload bytes of rxHead already read */

    /* the server's ring and our send buffers */
    RingTx tx;
    uint64_t peerAddr;
    uint32_t peerRkey, peerSlots, peerSlotSize;
    uint8_t *txBuf;
    struct ibv_mr *txMr;
    uint32_t txCount, txSize, txBusy; /* txBusy: bitmap of buffers in flight */
    int outstanding;                  /* send WRs posted, not completed */

    /* synchronous layer */
    redisReader *reader;
    char *obuf; /* formatted commands not yet posted: obuf[opos, olen) */
    size_t olen, opos, ocap;
};

static int rdmaPollSend(ObjRdmaConn *c);
static int rdmaArmSend(ObjRdmaConn *c);

/* ---- errors ---------------------------------------------------------------------------- */

/*
 * Set the sticky error (the first one wins: later ones are consequences).
 * Returns -1 so that callers can `return rdmaFail(...)`. Can't fail.
 */
static int rdmaFail(ObjRdmaConn *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int rdmaFail(ObjRdmaConn *c, int code, const char *fmt, ...)
{
    va_list ap;

    if (c->err)
        return -1;
    c->err = code;
    va_start(ap, fmt);
    vsnprintf(c->errstr, sizeof(c->errstr), fmt, ap);
    va_end(ap);
    return -1;
}

/*
 * The connection is over (peer disconnect, failed completion, protocol
 * violation): remember why, but let what already arrived be read first.
 * Returns -1. Can't fail.
 */
static int rdmaGone(ObjRdmaConn *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int rdmaGone(ObjRdmaConn *c, int code, const char *fmt, ...)
{
    va_list ap;

    if (code == OBJ_RDMA_ERR_PROTOCOL)
        c->broken = 1;
    if (c->gone)
        return -1;
    c->gone = 1;
    c->goneCode = code;
    va_start(ap, fmt);
    vsnprintf(c->goneStr, sizeof(c->goneStr), fmt, ap);
    va_end(ap);
    return -1;
}

/* Whether arrived bytes are still waiting to be read. */
static int rdmaHasData(const ObjRdmaConn *c)
{
    return c->rxUnread > 0;
}

/*
 * If the connection is gone and nothing is left to read, raise its error.
 * Returns -1 when the error is (now) set, else 0.
 */
static int rdmaSettle(ObjRdmaConn *c)
{
    if (!c->err && c->gone && !rdmaHasData(c))
        rdmaFail(c, c->goneCode, "%s", c->goneStr);
    return c->err ? -1 : 0;
}

/* Teardown problems have nobody to report to but the log. Can't fail. */
static void rdmaLog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void rdmaLog(const char *fmt, ...)
{
    va_list ap;

    fputs("objrdma: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ---- small helpers --------------------------------------------------------------------- */

static long long rdmaNowMs(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds left until deadline (0 = none: -1, "forever"), at least 0. */
static int rdmaLeftMs(long long deadline)
{
    long long left;

    if (deadline == 0)
        return -1;
    left = deadline - rdmaNowMs();
    return left < 0 ? 0 : (int)left;
}

static int rdmaSetNonBlocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    return fl == -1 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/*
 * A ring size from the environment (test knob: OBJSTORE_RDMA_SLOTS,
 * OBJSTORE_RDMA_SLOT_SIZE), else def. Out-of-range values fall back to def.
 */
static uint32_t rdmaEnvSize(const char *name, uint32_t def, uint32_t lo, uint32_t hi)
{
    const char *s = getenv(name);
    char *end;
    unsigned long v;

    if (s == NULL || *s == '\0')
        return def;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || *end != '\0' || v < lo || v > hi)
        return def;
    return (uint32_t)v;
}

/* ---- the eventfd that keeps objRdmaFd readable while data is left over ------------------- */

/*
 * Keep objRdmaFd readable while arrived data waits unread: raise the kick
 * (only objRdmaRead does, when the caller's buffer filled up: after
 * objRdmaProcess the caller reads at once, and a syscall per round trip
 * would be waste) or clear it once everything is read. Can't fail (a failed
 * eventfd write only costs a wake-up).
 */
static void rdmaKick(ObjRdmaConn *c, int mayRaise)
{
    int want = rdmaHasData(c);
    uint64_t v = 1;

    if (c->kickFd < 0 || want == c->kicked || (want && !mayRaise))
        return;
    if (want) {
        if (write(c->kickFd, &v, sizeof(v)) == (ssize_t)sizeof(v))
            c->kicked = 1;
    } else {
        if (read(c->kickFd, &v, sizeof(v)) == (ssize_t)sizeof(v) || errno == EAGAIN)
            c->kicked = 0;
    }
}

/* ---- sending ------------------------------------------------------------------------------ */

/* Whether every send buffer is in flight. */
static int rdmaTxFull(const ObjRdmaConn *c)
{
    return (uint32_t)__builtin_popcount(c->txBusy) >= c->txCount;
}

/*
 * Write one message (len payload bytes, 0 = a pure credit return) into the
 * server's next slot. Returns 1 when posted, 0 when credits or send buffers
 * are short (try later), -1 when posting failed (connection gone).
 */
static int rdmaPostMsg(ObjRdmaConn *c, const void *payload, uint32_t len)
{
    int buf = __builtin_ffs((int)~c->txBusy) - 1;
    struct ibv_send_wr wr = {0}, *bad = NULL;
    struct ibv_sge sge;
    RespRdmaHdr hdr;

    if (buf < 0 || (uint32_t)buf >= c->txCount)
        return 0;
    int slot = ringTxTake(&c->tx, len == 0);
    if (slot < 0)
        return 0;
    uint8_t *frame = c->txBuf + (size_t)buf * c->txSize;
    hdr.credits = htole16((uint16_t)ringRxTakeCredits(&c->rx, 0xFFFF));
    hdr.flags = 0;
    memcpy(frame, &hdr, RC_HDR_LEN);
    if (len)
        memcpy(frame + RC_HDR_LEN, payload, len);

    sge.addr = (uintptr_t)frame;
    sge.length = RC_HDR_LEN + len;
    sge.lkey = c->txMr->lkey;
    wr.wr_id = ((uint64_t)buf << 3) | RC_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED | (sge.length <= c->maxInline ? IBV_SEND_INLINE : 0);
    wr.imm_data = htonl(ringImmEncode((uint32_t)slot, sge.length));
    wr.wr.rdma.remote_addr = c->peerAddr + (uint64_t)slot * c->peerSlotSize;
    wr.wr.rdma.rkey = c->peerRkey;
    int rc = ibv_post_send(c->id->qp, &wr, &bad);
    if (rc) {
        rdmaGone(c, OBJ_RDMA_ERR_IO, "ibv_post_send (ring write): %s", strerror(rc));
        return -1;
    }
    c->txBusy |= 1u << buf;
    c->outstanding++;
    return 1;
}

/*
 * Post as much of buf as credits and send buffers allow, one slot-sized
 * message at a time. Returns the bytes posted (maybe 0), or -1 when the
 * connection is gone.
 */
static ssize_t rdmaPostData(ObjRdmaConn *c, const uint8_t *buf, size_t len)
{
    size_t done = 0, maxPay = c->txSize - RC_HDR_LEN;

    while (done < len) {
        uint32_t n = (uint32_t)(len - done < maxPay ? len - done : maxPay);
        int rc = rdmaPostMsg(c, buf + done, n);
        if (rc < 0)
            return -1;
        if (rc == 0)
            break;
        done += n;
    }
    return (ssize_t)done;
}

/*
 * Return credits with a data-less message when ring.h's threshold is owed
 * and nothing else is queued to carry them. Returns 0, or -1 when the
 * connection is gone. When send buffers are short the send CQ is armed, so
 * the next call (after objRdmaFd turned readable) tries again.
 */
static int rdmaMaybeCredit(ObjRdmaConn *c)
{
    /* Queued request bytes carry the credits themselves, but only while a
     * data message can go out (2 credits): with just the last credit left,
     * that credit exists for exactly this message. */
    if (c->gone || !ringRxWantsCreditMsg(&c->rx) || (c->opos < c->olen && c->tx.credits >= 2))
        return 0;
    int rc = rdmaPostMsg(c, NULL, 0);
    if (rc == 0 && rdmaPollSend(c) == 0)
        rc = rdmaPostMsg(c, NULL, 0);
    if (rc == 0 && !c->gone && rdmaTxFull(c))
        rdmaArmSend(c);
    return c->gone ? -1 : 0;
}

/* Post what the synchronous queue holds, as far as resources allow.
 * Returns 0 (maybe with bytes left), or -1 when the connection is gone. */
static int rdmaFlushOut(ObjRdmaConn *c)
{
    if (c->opos == c->olen)
        return 0;
    ssize_t n = rdmaPostData(c, (const uint8_t *)c->obuf + c->opos, c->olen - c->opos);
    if (n < 0)
        return -1;
    c->opos += (size_t)n;
    if (c->opos == c->olen)
        c->opos = c->olen = 0;
    return 0;
}

/* ---- receiving ------------------------------------------------------------------------------- */

static int rdmaPostRecv(ObjRdmaConn *c)
{
    struct ibv_recv_wr wr = {.wr_id = RC_WR_RECV, .sg_list = NULL, .num_sge = 0}, *bad = NULL;
    int rc = ibv_post_recv(c->id->qp, &wr, &bad);

    if (rc)
        return rdmaGone(c, OBJ_RDMA_ERR_IO, "ibv_post_recv: %s", strerror(rc));
    return 0;
}

/*
 * Hand back the oldest arrived slot (read to the end): it becomes a credit.
 * Can't fail (slots are released in arrival order, which ring.h expects).
 */
static void rdmaReleaseHead(ObjRdmaConn *c)
{
    if (ringRxConsume(&c->rx, c->rxHead) == -1)
        rdmaGone(c, OBJ_RDMA_ERR_PROTOCOL, "internal: ring release out of order");
    c->rxHead = (c->rxHead + 1) % c->rxSlots;
    c->rxUnread--;
    c->rxOff = 0;
}

/* Release leading slots that have nothing (left) to read. Can't fail. */
static void rdmaSkipEmpty(ObjRdmaConn *c)
{
    while (c->rxUnread > 0 && c->rxOff == c->rxLen[c->rxHead])
        rdmaReleaseHead(c);
}

/*
 * A ring write arrived with immediate imm. Returns 0, or -1 on a protocol
 * violation (the connection is then gone).
 */
static int rdmaOnArrival(ObjRdmaConn *c, uint32_t imm)
{
    uint32_t slot, len;
    RespRdmaHdr hdr;

    ringImmDecode(imm, &slot, &len);
    if (slot != c->rxArrive)
        return rdmaGone(c, OBJ_RDMA_ERR_PROTOCOL,
                        "protocol error: message in slot %u, expected slot %u", slot, c->rxArrive);
    if (c->rxUnread + c->rx.pending >= c->rxSlots)
        return rdmaGone(c, OBJ_RDMA_ERR_PROTOCOL, "protocol error: message without a credit");
    if (len < RC_HDR_LEN || len > c->rxSlotSize)
        return rdmaGone(c, OBJ_RDMA_ERR_PROTOCOL,
                        "protocol error: message length %u out of range (%u..%u)", len, RC_HDR_LEN,
                        c->rxSlotSize);
    memcpy(&hdr, c->rxRing + (size_t)slot * c->rxSlotSize, RC_HDR_LEN);
    uint32_t credits = le16toh(hdr.credits);
    if (ringTxGrant(&c->tx, credits) == -1)
        return rdmaGone(c, OBJ_RDMA_ERR_PROTOCOL,
                        "protocol error: %u credits returned, more than outstanding", credits);
    c->rxLen[slot] = len - RC_HDR_LEN;
    c->rxArrive = (c->rxArrive + 1) % c->rxSlots;
    c->rxUnread++;
    rdmaSkipEmpty(c);
    return rdmaPostRecv(c);
}

/*
 * Handle one receive completion. Successful ones are taken even after the
 * disconnect was seen: a server's last replies (QUIT's +OK) are in our CQ
 * before its DISCONNECTED event can be read, and must not be lost. Returns
 * 0, or -1 when the connection is gone.
 */
static int rdmaOnRecvWc(ObjRdmaConn *c, const struct ibv_wc *wc)
{
    if (c->broken)
        return -1;
    if (wc->status != IBV_WC_SUCCESS)
        return rdmaGone(c, wc->status == IBV_WC_WR_FLUSH_ERR ? OBJ_RDMA_ERR_EOF : OBJ_RDMA_ERR_IO,
                        "receive failed: %s (connection lost)", ibv_wc_status_str(wc->status));
    if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc->wc_flags & IBV_WC_WITH_IMM))
        return rdmaGone(c, OBJ_RDMA_ERR_PROTOCOL,
                        "protocol error: a receive without an immediate (opcode %d)",
                        (int)wc->opcode);
    return rdmaOnArrival(c, ntohl(wc->imm_data));
}

/* Handle one send completion. Returns 0, or -1 when it failed. */
static int rdmaOnSendWc(ObjRdmaConn *c, const struct ibv_wc *wc)
{
    uint32_t buf = (uint32_t)(wc->wr_id >> 3);

    if (buf < RC_TX_MAX)
        c->txBusy &= ~(1u << buf);
    c->outstanding--;
    if (wc->status != IBV_WC_SUCCESS && !c->gone)
        return rdmaGone(c, OBJ_RDMA_ERR_IO, "ring write failed: %s", ibv_wc_status_str(wc->status));
    return 0;
}

/* Poll the send CQ dry. Returns 0, or -1 on a failed poll or send. */
static int rdmaPollSend(ObjRdmaConn *c)
{
    struct ibv_wc wcs[RC_TX_MAX];
    int n, rv = 0;

    while ((n = ibv_poll_cq(c->sendCq, RC_TX_MAX, wcs)) > 0) {
        for (int i = 0; i < n; i++)
            rv |= rdmaOnSendWc(c, &wcs[i]);
    }
    if (n < 0)
        return rdmaGone(c, OBJ_RDMA_ERR_IO, "ibv_poll_cq (send): failed");
    return rv ? -1 : 0;
}

/* Poll the receive CQ dry. Returns 0, or -1 when the connection is gone. */
static int rdmaPollRecv(ObjRdmaConn *c)
{
    struct ibv_wc wcs[32];
    int n;

    while ((n = ibv_poll_cq(c->recvCq, 32, wcs)) > 0) {
        for (int i = 0; i < n; i++)
            rdmaOnRecvWc(c, &wcs[i]);
    }
    if (n < 0)
        rdmaGone(c, OBJ_RDMA_ERR_IO, "ibv_poll_cq (receive): failed");
    return c->gone ? -1 : 0;
}

/*
 * Wait for a send buffer from now on: arm the send CQ (once) and poll it
 * again, so that a completion racing the arming is not missed. Returns 0 or
 * -1 (connection gone).
 */
static int rdmaArmSend(ObjRdmaConn *c)
{
    if (!c->sendArmed) {
        int rc = ibv_req_notify_cq(c->sendCq, 0);
        if (rc)
            return rdmaGone(c, OBJ_RDMA_ERR_IO, "ibv_req_notify_cq (send): %s", strerror(rc));
        c->sendArmed = 1;
    }
    return rdmaPollSend(c);
}

/* ---- connection manager events after connect ---------------------------------------------- */

/* Drain rdma_cm events without blocking. Returns 0, or -1 when the connection is gone. */
static int rdmaDrainCm(ObjRdmaConn *c)
{
    struct rdma_cm_event *ev;

    while (rdma_get_cm_event(c->ec, &ev) == 0) {
        enum rdma_cm_event_type type = ev->event;
        int status = ev->status;

        if (rdma_ack_cm_event(ev))
            rdmaGone(c, OBJ_RDMA_ERR_IO, "rdma_ack_cm_event: %s", strerror(errno));
        switch (type) {
            case RDMA_CM_EVENT_DISCONNECTED:
                rdmaGone(c, OBJ_RDMA_ERR_EOF, "Server closed the connection");
                break;
            case RDMA_CM_EVENT_TIMEWAIT_EXIT:
            case RDMA_CM_EVENT_ESTABLISHED:
                break;
            default:
                rdmaGone(c, OBJ_RDMA_ERR_IO, "connection event %s (status %d)",
                         rdma_event_str(type), status);
        }
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK)
        rdmaGone(c, OBJ_RDMA_ERR_IO, "rdma_get_cm_event: %s", strerror(errno));
    return c->gone ? -1 : 0;
}

/*
 * Collect completion-channel events (acking each, re-arming the receive CQ),
 * then poll both CQs dry: no completion is lost between arming and polling.
 * Returns 0, or -1 when the connection is gone.
 */
static int rdmaDrainCq(ObjRdmaConn *c)
{
    struct ibv_cq *cq;
    void *ctx;
    int rearm = 0;

    while (ibv_get_cq_event(c->comp, &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
        if (cq == c->recvCq)
            rearm = 1;
        else
            c->sendArmed = 0;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK)
        return rdmaGone(c, OBJ_RDMA_ERR_IO, "ibv_get_cq_event: %s", strerror(errno));
    if (rearm && !c->gone) {
        int rc = ibv_req_notify_cq(c->recvCq, 0);
        if (rc)
            return rdmaGone(c, OBJ_RDMA_ERR_IO, "ibv_req_notify_cq: %s", strerror(rc));
    }
    rdmaPollSend(c);
    rdmaPollRecv(c);
    return c->gone ? -1 : 0;
}

/* ---- setup ----------------------------------------------------------------------------------- */

/*
 * Wait (until deadline) for the next rdma_cm event, which must be `want`;
 * copy its private data (up to sizeof(RespRdmaPriv)) into priv if given.
 * Returns 0, or -1 with the error set (what the event was, and why).
 */
static int rdmaWaitCm(ObjRdmaConn *c, enum rdma_cm_event_type want, long long deadline,
                      const char *what, RespRdmaPriv *priv, size_t *privLen)
{
    struct rdma_cm_event *ev;
    struct pollfd pfd = {.fd = c->ec->fd, .events = POLLIN};

    for (;;) {
        if (rdma_get_cm_event(c->ec, &ev) == 0)
            break;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return rdmaFail(c, OBJ_RDMA_ERR_IO, "%s: rdma_get_cm_event: %s", what, strerror(errno));
        int left = rdmaLeftMs(deadline);
        if (left == 0)
            return rdmaFail(c, OBJ_RDMA_ERR_TIMEOUT, "%s: timed out", what);
        int rc = poll(&pfd, 1, left);
        if (rc < 0 && errno != EINTR)
            return rdmaFail(c, OBJ_RDMA_ERR_IO, "%s: poll: %s", what, strerror(errno));
    }
    enum rdma_cm_event_type type = ev->event;
    int status = ev->status;
    if (type == want && priv) {
        size_t n = ev->param.conn.private_data ? ev->param.conn.private_data_len : 0;
        *privLen = n;
        memset(priv, 0, sizeof(*priv));
        if (n)
            memcpy(priv, ev->param.conn.private_data, n < sizeof(*priv) ? n : sizeof(*priv));
    }
    if (rdma_ack_cm_event(ev))
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "%s: rdma_ack_cm_event: %s", what, strerror(errno));
    if (type == want)
        return 0;
    if (type == RDMA_CM_EVENT_REJECTED)
        return rdmaFail(c, OBJ_RDMA_ERR_IO,
                        "%s: connection refused (%s, status %d: nothing listens on that RDMA "
                        "port, or the server turned us away)",
                        what, rdma_event_str(type), status);
    return rdmaFail(c, OBJ_RDMA_ERR_IO, "%s: %s (status %d%s%s)", what, rdma_event_str(type),
                    status, status < 0 ? ": " : "", status < 0 ? strerror(-status) : "");
}

/* Resolve addr (IPv4/IPv6 literal or host name) and port into sa.
 * Returns 0, or -1 with the error set. */
static int rdmaResolveName(ObjRdmaConn *c, const char *addr, int port, struct sockaddr_storage *sa)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    char portStr[16];

    if (addr == NULL || *addr == '\0' || port <= 0 || port > 65535)
        return rdmaFail(c, OBJ_RDMA_ERR_OTHER, "bad RDMA address %s:%d", addr ? addr : "(null)",
                        port);
    snprintf(portStr, sizeof(portStr), "%d", port);
    int rc = getaddrinfo(addr, portStr, &hints, &res);
    if (rc)
        return rdmaFail(c, OBJ_RDMA_ERR_OTHER, "cannot resolve %s: %s", addr, gai_strerror(rc));
    memset(sa, 0, sizeof(*sa));
    memcpy(sa, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

/*
 * Create what the QP needs on the resolved device: PD, completion channel,
 * CQs, the QP, our ring (registered for remote writes) with a receive WR per
 * slot. Returns 0, or -1 with the error set (objRdmaFree undoes the rest).
 */
static int rdmaSetupVerbs(ObjRdmaConn *c)
{
    struct ibv_context *verbs = c->id->verbs;
    struct ibv_qp_init_attr qa = {0};
    int rc;

    if (verbs == NULL)
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "no RDMA device behind that route");
    c->pd = ibv_alloc_pd(verbs);
    if (c->pd == NULL)
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "ibv_alloc_pd: %s", strerror(errno));
    c->comp = ibv_create_comp_channel(verbs);
    if (c->comp == NULL)
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "ibv_create_comp_channel: %s", strerror(errno));
    if (rdmaSetNonBlocking(c->comp->fd) == -1)
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "fcntl (completion channel): %s", strerror(errno));
    c->recvCq = ibv_create_cq(verbs, (int)c->rxSlots + 4, c, c->comp, 0);
    c->sendCq = ibv_create_cq(verbs, RC_TX_MAX + 4, c, c->comp, 0);
    if (c->recvCq == NULL || c->sendCq == NULL)
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "ibv_create_cq: %s", strerror(errno));
    rc = ibv_req_notify_cq(c->recvCq, 0);
    if (rc)
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "ibv_req_notify_cq: %s", strerror(rc));

    qa.send_cq = c->sendCq;
    qa.recv_cq = c->recvCq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = RC_TX_MAX;
    qa.cap.max_recv_wr = c->rxSlots;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qa.cap.max_inline_data = RC_INLINE_WANT;
    if (rdma_create_qp(c->id, c->pd, &qa)) {
        /* Some devices take no inline data: try again without. */
        qa.cap.max_inline_data = 0;
        if (rdma_create_qp(c->id, c->pd, &qa))
            return rdmaFail(c, OBJ_RDMA_ERR_IO, "rdma_create_qp: %s", strerror(errno));
    }
    c->qpUp = 1;
    c->maxInline = qa.cap.max_inline_data;

    size_t ringLen = (size_t)c->rxSlots * c->rxSlotSize;
    if (posix_memalign((void **)&c->rxRing, 4096, ringLen) ||
        (c->rxLen = calloc(c->rxSlots, sizeof(*c->rxLen))) == NULL)
        return rdmaFail(c, OBJ_RDMA_ERR_OOM, "out of memory for the receive ring");
    c->rxMr =
        ibv_reg_mr(c->pd, c->rxRing, ringLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (c->rxMr == NULL)
        return rdmaFail(c, OBJ_RDMA_ERR_IO,
                        "ibv_reg_mr (receive ring, %zu bytes): %s (raise ulimit -l?)", ringLen,
                        strerror(errno));
    ringRxInit(&c->rx, c->rxSlots);
    for (uint32_t i = 0; i < c->rxSlots; i++) {
        if (rdmaPostRecv(c) == -1)
            return rdmaFail(c, OBJ_RDMA_ERR_IO, "%s", c->goneStr);
    }
    return 0;
}

/*
 * Check the server's ring from its accept private data, then size and
 * register our send buffers for it. Returns 0, or -1 with the error set.
 */
static int rdmaTakePeer(ObjRdmaConn *c, const RespRdmaPriv *p, size_t len)
{
    if (len < sizeof(*p))
        return rdmaFail(c, OBJ_RDMA_ERR_PROTOCOL,
                        "protocol error: the server sent %zu bytes of private data, not a ring "
                        "description (is this the rdma-client-port?)",
                        len);
    if (le32toh(p->magic) != RESP_RDMA_MAGIC || le16toh(p->version) != RESP_RDMA_VERSION)
        return rdmaFail(c, OBJ_RDMA_ERR_PROTOCOL,
                        "protocol error: the server's private data has magic 0x%08x version %u, "
                        "not a RESP-over-RDMA ring (is this the rdma-client-port?)",
                        le32toh(p->magic), le16toh(p->version));
    c->peerSlots = le16toh(p->slots);
    c->peerSlotSize = le32toh(p->slotSize);
    if (c->peerSlots < 4 || c->peerSlots > RING_MAX_SLOTS || c->peerSlotSize < 64 ||
        c->peerSlotSize > RING_MAX_LEN)
        return rdmaFail(c, OBJ_RDMA_ERR_PROTOCOL,
                        "protocol error: server ring of %u slots x %u bytes is out of range",
                        c->peerSlots, c->peerSlotSize);
    c->peerRkey = le32toh(p->rkey);
    c->peerAddr = le64toh(p->addr);
    ringTxInit(&c->tx, c->peerSlots);

    c->txCount = c->peerSlots < RC_TX_MAX ? c->peerSlots : RC_TX_MAX;
    c->txSize = c->peerSlotSize < RC_TX_SIZE_MAX ? c->peerSlotSize : RC_TX_SIZE_MAX;
    size_t txLen = (size_t)c->txCount * c->txSize;
    if (posix_memalign((void **)&c->txBuf, 4096, txLen))
        return rdmaFail(c, OBJ_RDMA_ERR_OOM, "out of memory for send buffers");
    c->txMr = ibv_reg_mr(c->pd, c->txBuf, txLen, IBV_ACCESS_LOCAL_WRITE);
    if (c->txMr == NULL)
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "ibv_reg_mr (send buffers): %s", strerror(errno));
    return 0;
}

/* Put the channels and the kick eventfd in one epoll set. Returns 0, or -1 with the error set. */
static int rdmaSetupEpoll(ObjRdmaConn *c)
{
    struct epoll_event ev = {.events = EPOLLIN};

    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (c->epfd < 0)
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "epoll_create1: %s", strerror(errno));
    c->kickFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->kickFd < 0)
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "eventfd: %s", strerror(errno));
    int fds[3] = {c->comp->fd, c->ec->fd, c->kickFd};
    for (int i = 0; i < 3; i++) {
        ev.data.fd = fds[i];
        if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, fds[i], &ev) < 0)
            return rdmaFail(c, OBJ_RDMA_ERR_IO, "epoll_ctl: %s", strerror(errno));
    }
    return 0;
}

/* Walk rdma_cm from address resolution to ESTABLISHED. Returns 0, or -1 with the error set. */
static int rdmaDoConnect(ObjRdmaConn *c, const char *addr, int port, int timeoutMs)
{
    long long deadline = rdmaNowMs() + (timeoutMs > 0 ? timeoutMs : RC_CONNECT_MS_DEFAULT);
    struct sockaddr_storage sa;
    struct rdma_conn_param cp;
    RespRdmaPriv mine, theirs;
    size_t theirsLen = 0;
    char what[96];

    if (rdmaResolveName(c, addr, port, &sa) == -1)
        return -1;
    snprintf(what, sizeof(what), "RDMA connect to %s:%d", addr, port);
    c->ec = rdma_create_event_channel();
    if (c->ec == NULL)
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "rdma_create_event_channel: %s (no RDMA support?)",
                        strerror(errno));
    if (rdmaSetNonBlocking(c->ec->fd) == -1)
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "fcntl (rdma_cm channel): %s", strerror(errno));
    if (rdma_create_id(c->ec, &c->id, c, RDMA_PS_TCP))
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "rdma_create_id: %s", strerror(errno));
    if (rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&sa, rdmaLeftMs(deadline)))
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "%s: rdma_resolve_addr: %s", what, strerror(errno));
    if (rdmaWaitCm(c, RDMA_CM_EVENT_ADDR_RESOLVED, deadline, what, NULL, NULL) == -1)
        return -1;
    if (rdma_resolve_route(c->id, rdmaLeftMs(deadline)))
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "%s: rdma_resolve_route: %s", what, strerror(errno));
    if (rdmaWaitCm(c, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, what, NULL, NULL) == -1)
        return -1;
    if (rdmaSetupVerbs(c) == -1)
        return -1;

    mine.magic = htole32(RESP_RDMA_MAGIC);
    mine.version = htole16(RESP_RDMA_VERSION);
    mine.slots = htole16((uint16_t)c->rxSlots);
    mine.slotSize = htole32(c->rxSlotSize);
    mine.rkey = htole32(c->rxMr->rkey);
    mine.addr = htole64((uint64_t)(uintptr_t)c->rxRing);
    memset(&cp, 0, sizeof(cp));
    cp.private_data = &mine;
    cp.private_data_len = sizeof(mine);
    cp.retry_count = 7;
    cp.rnr_retry_count = 7; /* receives are always reposted: wait rather than fail */
    if (rdma_connect(c->id, &cp))
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "%s: rdma_connect: %s", what, strerror(errno));
    if (rdmaWaitCm(c, RDMA_CM_EVENT_ESTABLISHED, deadline, what, &theirs, &theirsLen) == -1)
        return -1;
    c->connected = 1;
    if (rdmaTakePeer(c, &theirs, theirsLen) == -1 || rdmaSetupEpoll(c) == -1)
        return -1;
    c->reader = redisReaderCreate();
    if (c->reader == NULL)
        return rdmaFail(c, OBJ_RDMA_ERR_OOM, "out of memory for the reply reader");
    return 0;
}

/*
 * Connect (rdmaconn.h). Returns a context, NULL only when out of memory; a
 * failed connect leaves err set and what was set up for objRdmaFree. Ring
 * sizes come from resprdma.h unless the test knobs OBJSTORE_RDMA_SLOTS /
 * OBJSTORE_RDMA_SLOT_SIZE say otherwise (small rings exercise the servers'
 * credit paths).
 */
ObjRdmaConn *objRdmaConnect(const char *addr, int port, int timeoutMs)
{
    ObjRdmaConn *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->epfd = c->kickFd = -1;
    c->rxSlots = rdmaEnvSize("OBJSTORE_RDMA_SLOTS", RESP_RDMA_SLOTS, 4, 4096);
    c->rxSlotSize = rdmaEnvSize("OBJSTORE_RDMA_SLOT_SIZE", RESP_RDMA_SLOT_SIZE, 64, RING_MAX_LEN);
    rdmaDoConnect(c, addr, port, timeoutMs);
    return c;
}

/* ---- teardown ------------------------------------------------------------------------------ */

/*
 * Move the QP to the error state and poll until every send WR came back
 * (bounded): only then may the send buffers be freed. Can't fail (a bound
 * overrun is logged).
 */
static void rdmaFlush(ObjRdmaConn *c)
{
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
    long long deadline = rdmaNowMs() + RC_FLUSH_MAX_MS;
    struct ibv_wc wcs[32];

    if (!c->qpUp)
        return;
    int rc = ibv_modify_qp(c->id->qp, &attr, IBV_QP_STATE);
    if (rc)
        rdmaLog("ibv_modify_qp(ERR): %s", strerror(rc));
    c->gone = 1;
    while (c->outstanding > 0) {
        int n = ibv_poll_cq(c->sendCq, 32, wcs);
        for (int i = 0; i < n; i++)
            rdmaOnSendWc(c, &wcs[i]);
        if (n > 0)
            continue;
        if (n < 0 || rdmaNowMs() > deadline) {
            rdmaLog("%d send work requests not flushed in time", c->outstanding);
            break;
        }
        usleep(100);
    }
    while (ibv_poll_cq(c->recvCq, 32, wcs) > 0) {
        /* flushed receives: nothing to release */
    }
}

/*
 * Disconnect, flush the QP, then release everything in reverse order of
 * setup (each resource only if it was made). Accepts NULL and contexts of
 * failed connects. Can't fail: teardown errors are logged to stderr.
 */
void objRdmaFree(ObjRdmaConn *c)
{
    int rc;

    if (c == NULL)
        return;
    if (c->connected && rdma_disconnect(c->id) && errno != EINVAL)
        rdmaLog("rdma_disconnect: %s", strerror(errno));
    rdmaFlush(c);
    if (c->qpUp)
        rdma_destroy_qp(c->id);
    if (c->recvCq && (rc = ibv_destroy_cq(c->recvCq)))
        rdmaLog("ibv_destroy_cq: %s", strerror(rc));
    if (c->sendCq && (rc = ibv_destroy_cq(c->sendCq)))
        rdmaLog("ibv_destroy_cq: %s", strerror(rc));
    if (c->comp && (rc = ibv_destroy_comp_channel(c->comp)))
        rdmaLog("ibv_destroy_comp_channel: %s", strerror(rc));
    if (c->rxMr && (rc = ibv_dereg_mr(c->rxMr)))
        rdmaLog("ibv_dereg_mr: %s", strerror(rc));
    if (c->txMr && (rc = ibv_dereg_mr(c->txMr)))
        rdmaLog("ibv_dereg_mr: %s", strerror(rc));
    if (c->pd && (rc = ibv_dealloc_pd(c->pd)))
        rdmaLog("ibv_dealloc_pd: %s", strerror(rc));
    if (c->id && rdma_destroy_id(c->id))
        rdmaLog("rdma_destroy_id: %s", strerror(errno));
    if (c->ec)
        rdma_destroy_event_channel(c->ec);
    if (c->epfd >= 0)
        close(c->epfd);
    if (c->kickFd >= 0)
        close(c->kickFd);
    free(c->rxRing);
    free(c->rxLen);
    free(c->txBuf);
    if (c->reader)
        redisReaderFree(c->reader);
    free(c->obuf);
    free(c);
}

/* ---- errors and settings -----------------------------------------------------------------------
 */

/* The sticky error code; a NULL context is what an out-of-memory connect returned. */
int objRdmaErr(const ObjRdmaConn *c)
{
    return c ? c->err : OBJ_RDMA_ERR_OOM;
}

/* The error text, or why the connection ended while data is left to read. Never NULL. */
const char *objRdmaErrStr(const ObjRdmaConn *c)
{
    if (c == NULL)
        return "out of memory";
    return c->err || !c->gone ? c->errstr : c->goneStr;
}

/* Set the synchronous calls' wait bound. Returns 0, or -1 for NULL or a negative value. */
int objRdmaSetTimeout(ObjRdmaConn *c, int timeoutMs)
{
    if (c == NULL || timeoutMs < 0)
        return -1;
    c->timeoutMs = timeoutMs;
    return 0;
}

/* Copy the rdma_cm id's addresses. Returns 0, or -1 when never connected. */
int objRdmaAddrs(const ObjRdmaConn *c, struct sockaddr_storage *local,
                 struct sockaddr_storage *peer)
{
    if (c == NULL || !c->connected || c->id == NULL)
        return -1;
    struct sockaddr *l = rdma_get_local_addr(c->id), *p = rdma_get_peer_addr(c->id);
    size_t len =
        l->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    memset(local, 0, sizeof(*local));
    memset(peer, 0, sizeof(*peer));
    memcpy(local, l, len);
    memcpy(peer, p,
           p->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in));
    return 0;
}

/* ---- non-blocking layer ------------------------------------------------------------------------
 */

/* The epoll descriptor (-1 for NULL or a connect that failed early). */
int objRdmaFd(const ObjRdmaConn *c)
{
    return c ? c->epfd : -1;
}

/*
 * The event-loop step: drain rdma_cm and completion events (even once the
 * connection is gone, so that the descriptor stops being readable), post
 * queued requests and owed credits. Returns 0, or -1 once the connection is
 * over and nothing is left to read (the error is set then).
 */
int objRdmaProcess(ObjRdmaConn *c)
{
    if (c == NULL || c->err)
        return -1;
    /* Drained even when gone: pending events would keep the descriptor readable. */
    rdmaDrainCm(c);
    rdmaDrainCq(c);
    rdmaFlushOut(c);
    rdmaMaybeCredit(c);
    rdmaKick(c, 0);
    return rdmaSettle(c);
}

/*
 * Post request bytes like write(2) on a non-blocking socket. Short of
 * credits or buffers it first reclaims completed sends and takes arrived
 * credits, and arms the send CQ when buffers are what is missing, so that
 * objRdmaFd wakes the caller when a retry can succeed. Returns the bytes
 * taken, or -1 with errno EAGAIN, EPIPE (connection gone) or EIO (failed).
 */
ssize_t objRdmaWrite(ObjRdmaConn *c, const void *buf, size_t len)
{
    ssize_t n;

    if (c == NULL || c->err || c->gone) {
        errno = (c && c->gone && !c->err) ? EPIPE : EIO;
        return -1;
    }
    if (len == 0)
        return 0;
    if (rdmaFlushOut(c) == -1 || c->opos < c->olen) {
        errno = c->gone ? EPIPE : EAGAIN;
        return -1;
    }
    n = rdmaPostData(c, buf, len);
    if (n == 0) {
        /* Short of buffers or credits: reclaim what completed, take what arrived. */
        rdmaPollSend(c);
        rdmaPollRecv(c);
        if (!c->gone)
            n = rdmaPostData(c, buf, len);
        if (n == 0 && !c->gone && rdmaTxFull(c) && rdmaArmSend(c) == 0)
            n = rdmaPostData(c, buf, len);
    }
    if (n > 0)
        return n;
    errno = (n < 0 || c->gone) ? EPIPE : EAGAIN;
    return -1;
}

/*
 * Copy arrived reply bytes out of the ring like read(2); slots read to the
 * end become credits. Data left behind (cap too small) raises the kick so
 * that objRdmaFd stays readable. Returns the bytes copied; 0 with errno
 * EAGAIN when none; -1 with EPIPE/EIO once the connection is over and
 * everything was read.
 */
ssize_t objRdmaRead(ObjRdmaConn *c, void *buf, size_t cap)
{
    size_t done = 0;

    if (c == NULL || c->err) {
        errno = EIO;
        return -1;
    }
    if (!rdmaHasData(c))
        rdmaPollRecv(c); /* cheap: catch what arrived since the last event */
    while (done < cap && c->rxUnread > 0) {
        const uint8_t *p = c->rxRing + (size_t)c->rxHead * c->rxSlotSize + RC_HDR_LEN + c->rxOff;
        uint32_t avail = c->rxLen[c->rxHead] - c->rxOff;
        uint32_t n = (uint32_t)(cap - done < avail ? cap - done : avail);
        memcpy((uint8_t *)buf + done, p, n);
        done += n;
        c->rxOff += n;
        rdmaSkipEmpty(c);
    }
    rdmaMaybeCredit(c);
    rdmaKick(c, 1);
    if (done > 0)
        return (ssize_t)done;
    if (rdmaSettle(c) == -1) {
        errno = c->err == OBJ_RDMA_ERR_EOF ? EPIPE : EIO;
        return -1;
    }
    errno = EAGAIN;
    return 0;
}

/* Bytes queued by the synchronous layer and not yet posted. Can't fail. */
size_t objRdmaPendingWrite(const ObjRdmaConn *c)
{
    return c ? c->olen - c->opos : 0;
}

/* ---- synchronous layer
 * ---------------------------------------------------------------------------- */

/* Append bytes to the send queue. Returns 0, or -1 with the error set. */
static int rdmaQueue(ObjRdmaConn *c, const char *p, size_t len)
{
    if (c->olen + len > c->ocap) {
        size_t cap = c->ocap ? c->ocap : 4096;
        while (cap < c->olen + len)
            cap *= 2;
        char *nb = realloc(c->obuf, cap);
        if (nb == NULL)
            return rdmaFail(c, OBJ_RDMA_ERR_OOM, "out of memory for the send queue");
        c->obuf = nb;
        c->ocap = cap;
    }
    memcpy(c->obuf + c->olen, p, len);
    c->olen += len;
    return 0;
}

/* Queue raw RESP. Returns 0, or -1 (error set, or already failed). */
int objRdmaAppendFormatted(ObjRdmaConn *c, const char *cmd, size_t len)
{
    if (c == NULL || c->err)
        return -1;
    return rdmaQueue(c, cmd, len);
}

/* Format like redisvCommand and queue. Returns 0, or -1 with the error set. */
static int rdmaAppendV(ObjRdmaConn *c, const char *fmt, va_list ap)
{
    char *cmd = NULL;
    int len;

    if (c == NULL || c->err)
        return -1;
    len = redisvFormatCommand(&cmd, fmt, ap);
    if (len == -1)
        return rdmaFail(c, OBJ_RDMA_ERR_OOM, "out of memory formatting the command");
    if (len < 0)
        return rdmaFail(c, OBJ_RDMA_ERR_OTHER, "invalid command format string");
    int rv = rdmaQueue(c, cmd, (size_t)len);
    redisFreeCommand(cmd);
    return rv;
}

/* Format like redisCommand and queue. Returns 0, or -1 with the error set. */
int objRdmaAppendCommand(ObjRdmaConn *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    int rv = rdmaAppendV(c, fmt, ap);
    va_end(ap);
    return rv;
}

/* Format binary-safe arguments and queue. Returns 0, or -1 with the error set. */
int objRdmaAppendCommandArgv(ObjRdmaConn *c, int argc, const char **argv, const size_t *argvlen)
{
    char *cmd = NULL;

    if (c == NULL || c->err)
        return -1;
    long long len = redisFormatCommandArgv(&cmd, argc, argv, argvlen);
    if (len < 0)
        return rdmaFail(c, OBJ_RDMA_ERR_OOM, "out of memory formatting the command");
    int rv = rdmaQueue(c, cmd, (size_t)len);
    redisFreeCommand(cmd);
    return rv;
}

/* Feed every arrived byte to the reply reader, handing the slots back.
 * Returns 0, or -1 with the error set (bad RESP). */
static int rdmaFeedReader(ObjRdmaConn *c)
{
    while (c->rxUnread > 0) {
        const char *p =
            (const char *)c->rxRing + (size_t)c->rxHead * c->rxSlotSize + RC_HDR_LEN + c->rxOff;
        uint32_t avail = c->rxLen[c->rxHead] - c->rxOff;
        if (redisReaderFeed(c->reader, p, avail) != REDIS_OK)
            return rdmaFail(c, OBJ_RDMA_ERR_OOM, "out of memory buffering replies");
        c->rxOff += avail;
        rdmaSkipEmpty(c);
    }
    return 0;
}

/* Take a parsed reply out of the reader if there is one. Returns 0 (*reply
 * may stay NULL), or -1 with the error set (the reply stream is not RESP). */
static int rdmaReaderNext(ObjRdmaConn *c, void **reply)
{
    if (redisReaderGetReply(c->reader, reply) != REDIS_OK) {
        *reply = NULL;
        return rdmaFail(c, OBJ_RDMA_ERR_PROTOCOL, "protocol error in the reply stream: %s",
                        c->reader->errstr[0] ? c->reader->errstr : "unknown");
    }
    return 0;
}

/* Block until objRdmaFd is readable or deadline passes. Returns 0, or -1 with the error set. */
static int rdmaWait(ObjRdmaConn *c, long long deadline)
{
    struct pollfd pfd = {.fd = c->epfd, .events = POLLIN};
    int left = rdmaLeftMs(deadline);

    if (left == 0)
        return rdmaFail(c, OBJ_RDMA_ERR_TIMEOUT, "timed out waiting for the server (%d ms)",
                        c->timeoutMs);
    int rc = poll(&pfd, 1, left);
    if (rc < 0 && errno != EINTR)
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "poll: %s", strerror(errno));
    if (rc == 0 && rdmaLeftMs(deadline) == 0)
        return rdmaFail(c, OBJ_RDMA_ERR_TIMEOUT, "timed out waiting for the server (%d ms)",
                        c->timeoutMs);
    return 0;
}

/*
 * Send what is queued and return the next reply, waiting (up to the
 * timeout) for completions. While waiting it keeps both directions moving:
 * replies are fed to the reader as they come, which returns their slots, so
 * a long pipeline never deadlocks on credits. Returns 0 with *reply set, or
 * -1 with the error set (EOF once the server closed and all replies before
 * that were returned).
 */
int objRdmaGetReply(ObjRdmaConn *c, void **reply)
{
    long long deadline;

    if (reply)
        *reply = NULL;
    if (c == NULL || reply == NULL || c->err)
        return -1;
    deadline = c->timeoutMs > 0 ? rdmaNowMs() + c->timeoutMs : 0;
    for (;;) {
        if (rdmaReaderNext(c, reply) == -1)
            return -1;
        if (*reply)
            break;
        rdmaDrainCm(c);
        rdmaDrainCq(c);
        rdmaFlushOut(c);
        if (rdmaFeedReader(c) == -1)
            return -1;
        rdmaKick(c, 0); /* everything was read: a raised kick would make the wait spin */
        rdmaMaybeCredit(c);
        if (rdmaReaderNext(c, reply) == -1)
            return -1;
        if (*reply)
            break;
        if (rdmaSettle(c) == -1)
            return -1;
        if (c->opos < c->olen && rdmaTxFull(c) && rdmaArmSend(c) == -1)
            continue; /* gone: the settle above reports it */
        if (rdmaWait(c, deadline) == -1)
            return -1;
    }
    rdmaKick(c, 0);
    return 0;
}

/* Send what is queued and wait for the next reply: as with hiredis, that is
 * the reply to the oldest command still unanswered. Returns it, or NULL with
 * the error set. */
static redisReply *rdmaRoundTrip(ObjRdmaConn *c)
{
    void *reply = NULL;

    if (objRdmaGetReply(c, &reply) == -1)
        return NULL;
    return reply;
}

/* One formatted command and its reply (the next one owed). Returns it, or NULL with the error set.
 */
redisReply *objRdmaCommand(ObjRdmaConn *c, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    int rv = rdmaAppendV(c, fmt, ap);
    va_end(ap);
    return rv == -1 ? NULL : rdmaRoundTrip(c);
}

/* One binary-safe command and its reply. Returns it, or NULL with the error set. */
redisReply *objRdmaCommandArgv(ObjRdmaConn *c, int argc, const char **argv, const size_t *argvlen)
{
    if (objRdmaAppendCommandArgv(c, argc, argv, argvlen) == -1)
        return NULL;
    return rdmaRoundTrip(c);
}
