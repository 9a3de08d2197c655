/*
 * respserver.c - the RDMA front door: Redis clients speak RESP to this
 * server over RDMA instead of TCP. The wire is resprdma.h (rdma_cm, RC QP,
 * RDMA_WRITE_WITH_IMM into the peer's ring, credits from ring.h); this file
 * is its server side, on rdma-client-port, bound to the node's rdma-bind
 * address.
 *
 * Threads: none of our own. The rdma_cm event channel and one completion
 * channel (shared by every connection's CQ) are non-blocking fds in Redis's
 * event loop (RedisModule_EventLoopAdd), so every callback runs on the main
 * thread. Verbs resources are independent of the transfer engine (rdma.c):
 * our own PD, and per connection a receive ring (the only memory the client
 * may write) and a few send buffers.
 *
 * Requests: bytes arriving in the ring are appended to the connection's
 * query buffer; resp.c cuts complete requests out of it (multibulk and
 * inline, redis-server's limits and error texts); they run in order with
 * RedisModule_Call(ctx, cmd, "vEC!M", ...) as the connection's ACL user,
 * and RedisModule_CallReplyProto hands back the exact RESP2 bytes the
 * command produced, so replies keep full fidelity (+OK stays a status,
 * $2 OK stays a bulk, nulls and nested arrays are untouched) without being
 * re-encoded. Commands do not run in the fd callbacks but in a 0 ms module
 * timer: Redis flushes what the commands propagate (AOF, replicas) when a
 * module callback's context ends, and only timer callbacks get one.
 *
 * Backpressure: replies go out in slot-sized messages as the client's
 * credits allow. The credits of ring messages that carry requests are
 * withheld until every complete request in the query buffer has run (the
 * bytes are copied out at once, so every slot is free to reuse; only the
 * count is held back), and while more than RS_OUT_HIGH reply bytes wait,
 * the connection runs no further requests. So the query buffer holds about
 * the client's ring window of unexecuted requests, and a client that does
 * not read its replies is stopped by its own credits, like a TCP client by
 * its window. Credits of data-less messages are always returned at once,
 * and withheld ones too as soon as our replies wait for the client's
 * credits: that is what lets two sides with exhausted credits unblock each
 * other (ring.h), whichever way the client reads "nothing to send".
 *
 * Things a RedisModule_Call cannot do are refused with a clear error:
 * commands that block (RedisModule_Call gives the command a client that may
 * not block) and commands that tie state to the Redis connection (the call
 * runs on a pooled temporary client, not one per RDMA connection), see
 * rsRefusal. AUTH, HELLO, SELECT and QUIT are handled here, because their
 * state lives in our connection.
 *
 * Teardown: a QP is moved to the error state and its sends flushed before
 * its memory is freed; a connection that is being served when it must close
 * is only marked, and freed when the code serving it lets go (refs).
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "node.h"
#include "resp.h"
#include "rdma/resprdma.h"
#include "rdma/respring.h"
#include "respserver.h"
#include "rdma/ring.h"
#include "rdma/verbs.h"

/* ---- tunables ---------------------------------------------------------------------------- */

#define RS_SLOTS        RESP_RDMA_SLOTS     /* our receive ring */
#define RS_SLOT_SIZE    RESP_RDMA_SLOT_SIZE /* bytes per slot, header included */
#define RS_HDR          ((uint32_t)sizeof(RespRdmaHdr))
#define RS_TX_BUFS      8                   /* registered send buffers per connection */
#define RS_TX_MAX       RESP_RDMA_SLOT_SIZE /* largest message we send */
#define RS_SEND_WR      (RS_TX_BUFS + 2)
#define RS_CQ_DEPTH     (RS_SEND_WR + RS_SLOTS + 8)
#define RS_OUT_HIGH     (1u << 20)   /* reply bytes waiting that stop request execution */
#define RS_QBUF_DEFAULT (1ULL << 30) /* client-query-buffer-limit until it is read */
#define RS_TURN_CMDS    256          /* requests per connection per timer turn */
#define RS_BACKLOG      128
#define RS_FLUSH_MAX_MS 1000
#define RS_POLL_BATCH   16
#define RS_WR_RECV      1u
#define RS_WR_SEND      2u
/* Admission and the limits of clients that have not authenticated (README,
 * "RDMA front door"). A ring window is what a client can send before the
 * door parses: before AUTH the query buffer may hold one window plus a
 * partial request within redis-server's unauthenticated limits (10
 * arguments of 16 KiB), never more. */
#define RS_WINDOW           ((size_t)RS_SLOTS * RS_SLOT_SIZE)
#define RS_UNAUTH_QBUF_MAX  (RS_WINDOW + 256 * 1024)
#define RS_UNAUTH_MAX       64    /* connections waiting for AUTH, all addresses */
#define RS_UNAUTH_PER_ADDR  16    /* connections waiting for AUTH, one address */
#define RS_REFUSING_MAX     32    /* refused connections still sending their error */
#define RS_HANDSHAKE_MS     10000 /* connect request to established */
#define RS_AUTH_DEADLINE_MS 10000 /* established to AUTH, when a password is required */
#define RS_CLOSE_GRACE_MS   5000  /* a last reply the client does not take */
#define RS_SWEEP_MS         1000
_Static_assert(RS_SLOT_SIZE <= RING_MAX_LEN, "a slot length must fit the immediate");
_Static_assert(RS_TX_BUFS <= 32, "send buffers are tracked in a 32-bit map");
_Static_assert(RS_SLOTS >= 4 && RS_SLOTS <= RING_MAX_SLOTS, "ring size out of the wire's range");

/* ---- context ---------------------------------------------------------------------------- */

/* A byte queue: bytes [head, len) of data are pending. */
typedef struct RsBuf {
    char *data;
    size_t head, len, cap;
} RsBuf;

typedef struct RsConn {
    struct rdma_cm_id *id;
    struct ibv_cq *cq;
    /* RX: our ring, written by the client. */
    uint8_t *ring;
    struct ibv_mr *ringMr;
    RingRx rx;
    uint32_t withheld; /* consumed slots whose requests have not all run yet */
    /* TX: our send buffers, the client's ring. */
    uint8_t *txBuf;
    struct ibv_mr *txMr;
    uint32_t txBufSize, txBusy;
    RingTx tx;
    uint64_t peerAddr;
    uint32_t peerRkey, peerSlotSize;
    int outstanding; /* send WRs posted and not completed */
    /* The completions rsOnComp took off the CQ and has not handled yet: a
     * close in the middle of a batch accounts for them before it waits for
     * the rest (they will never be polled again). */
    struct ibv_wc *batch;
    int batchNext, batchLen;
    /* The RESP streams. */
    RsBuf in, out;
    RespParser parser;
    RedisModuleString *user; /* authenticated ACL user name; NULL before AUTH */
    int db;
    /* State. */
    int refs; /* code running on this connection; it is freed at 0 once closing */
    unsigned established : 1, counted : 1, closing : 1, qpUp : 1;
    unsigned closeAfterReply : 1, stalled : 1, inReady : 1;
    unsigned needAuth : 1; /* the default user has a password: AUTH first */
    unsigned refused : 1;  /* admitted only to be told why it is refused */
    const char *closeWhy;
    char peerIp[48];     /* the client's address, for the per-address limit */
    long long bornMs;    /* connect request, monotonic ms */
    long long closeAtMs; /* closeAfterReply: close by then even if the reply is stuck */
    uint64_t cid;
    char desc[48];
    struct RsConn *prev, *next; /* rs.all */
    struct RsConn *nextReady;
} RsConn;

static struct {
    int running, stopping, inTurn;
    RedisModuleCtx *ctx; /* detached: RedisModule_Call, timers, logging */
    struct rdma_event_channel *ec;
    struct rdma_cm_id *listenId;
    struct ibv_context *verbs;
    struct ibv_pd *pd;
    struct ibv_comp_channel *comp;
    int ecWatched, compWatched;
    RedisModuleTimerID timer, sweep;
    int timerArmed, sweepArmed;
    unsigned long long qbufLimit; /* client-query-buffer-limit, re-read every sweep */
    int refusing;                 /* refused connections not yet freed */
    RsConn *all;
    RsConn *readyHead, *readyTail;
    uint64_t nextCid;
    RespServerStats st;
} rs;

static void rsClose(RsConn *c, const char *why);
static int rsPump(RsConn *c);

/* ---- small helpers ------------------------------------------------------------------------ */

static void rsLog(const char *level, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    RedisModule_Log(rs.ctx, level, "rdma-clients: %s", msg);
}

static long long rsNowMs(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int rsSetNonBlocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl == -1 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static size_t rsBufPending(const RsBuf *b)
{
    return b->len - b->head;
}

/* Append n bytes; the pending bytes may move (offsets from head do not).
 * Returns 0, or -1 when out of memory. */
static int rsBufAppend(RsBuf *b, const void *p, size_t n)
{
    if (n == 0)
        return 0;
    if (b->len + n > b->cap && b->head > 0) {
        memmove(b->data, b->data + b->head, b->len - b->head);
        b->len -= b->head;
        b->head = 0;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        char *d = realloc(b->data, cap);
        if (!d)
            return -1;
        b->data = d;
        b->cap = cap;
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    return 0;
}

static void rsBufDrop(RsBuf *b, size_t n)
{
    b->head += n;
    if (b->head == b->len)
        b->head = b->len = 0;
}

static void rsBufFree(RsBuf *b)
{
    free(b->data);
    memset(b, 0, sizeof(*b));
}

/* Is this connection's reply backlog so large that requests must wait? */
static int rsPaused(const RsConn *c)
{
    return rsBufPending(&c->out) >= RS_OUT_HIGH;
}

/* Ring slots consumed, not withheld, and not yet returned to the client. */
static uint32_t rsReturnable(const RsConn *c)
{
    return c->rx.pending - c->withheld;
}

/* ---- the run queue -------------------------------------------------------------------------- */

static void rsRunTimer(RedisModuleCtx *ctx, void *data);

static void rsArmTimer(void)
{
    if (rs.timerArmed || !rs.readyHead || rs.stopping)
        return;
    rs.timer = RedisModule_CreateTimer(rs.ctx, 0, rsRunTimer, NULL);
    rs.timerArmed = 1;
}

/* Queue c to have its requests run in the next timer turn. */
static void rsReadyPush(RsConn *c)
{
    if (c->inReady || c->closing)
        return;
    c->inReady = 1;
    c->nextReady = NULL;
    if (rs.readyTail)
        rs.readyTail->nextReady = c;
    else
        rs.readyHead = c;
    rs.readyTail = c;
    rsArmTimer();
}

static RsConn *rsReadyPop(void)
{
    RsConn *c = rs.readyHead;

    if (!c)
        return NULL;
    rs.readyHead = c->nextReady;
    if (!rs.readyHead)
        rs.readyTail = NULL;
    c->inReady = 0;
    c->nextReady = NULL;
    return c;
}

static void rsReadyRemove(RsConn *c)
{
    RsConn *prev = NULL;

    if (!c->inReady)
        return;
    for (RsConn *i = rs.readyHead; i; prev = i, i = i->nextReady) {
        if (i != c)
            continue;
        if (prev)
            prev->nextReady = c->nextReady;
        else
            rs.readyHead = c->nextReady;
        if (rs.readyTail == c)
            rs.readyTail = prev;
        break;
    }
    c->inReady = 0;
    c->nextReady = NULL;
}

/* ---- verbs: setup ------------------------------------------------------------------------- */

static int rsPostRecv(RsConn *c)
{
    struct ibv_recv_wr wr = {.wr_id = RS_WR_RECV, .sg_list = NULL, .num_sge = 0}, *bad;
    int rc = ibv_post_recv(c->id->qp, &wr, &bad);

    if (rc)
        rsLog("warning", "%s: ibv_post_recv: %s", c->desc, strerror(rc));
    return rc ? -1 : 0;
}

/* Take the client's ring from its private data. Returns 0, or -1 with a
 * reason in *why. */
static int rsParsePriv(RsConn *c, const void *data, size_t len, const char **why)
{
    RespRingPeer peer;

    if (respRingParsePriv(data, len, &peer, why) == -1)
        return -1;
    c->peerSlotSize = peer.slotSize;
    c->peerRkey = peer.rkey;
    c->peerAddr = peer.addr;
    ringTxInit(&c->tx, peer.slots);
    c->txBufSize = peer.slotSize < RS_TX_MAX ? peer.slotSize : RS_TX_MAX;
    return 0;
}

static void rsFillPriv(RsConn *c, RespRdmaPriv *p)
{
    p->magic = htole32(RESP_RDMA_MAGIC);
    p->version = htole16(RESP_RDMA_VERSION);
    p->slots = htole16(RS_SLOTS);
    p->slotSize = htole32(RS_SLOT_SIZE);
    p->rkey = htole32(c->ringMr->rkey);
    p->addr = htole64((uint64_t)(uintptr_t)c->ring);
}

/* Create the CQ, QP, ring and send buffers of a connection and post its
 * receives. Returns 0, or -1 with a reason in err; whatever was set up is
 * undone by rsFree, which checks each resource. */
static int rsSetupConn(RsConn *c, char *err, size_t errLen)
{
    if (c->id->verbs != rs.verbs) {
        snprintf(err, errLen, "connection arrived on another RDMA device");
        return -1;
    }
    if (verbsCreateRcQp(c->id, rs.pd, rs.comp, c, RS_CQ_DEPTH, RS_SEND_WR, RS_SLOTS, 1, &c->cq, err,
                        errLen) == -1)
        return -1;
    c->qpUp = 1;
    /* Page-aligned so that MADV_DONTFORK (ibv_fork_init) covers whole pages. */
    size_t ringLen = (size_t)RS_SLOTS * RS_SLOT_SIZE, txLen = (size_t)RS_TX_BUFS * c->txBufSize;
    if (posix_memalign((void **)&c->ring, 4096, ringLen) ||
        posix_memalign((void **)&c->txBuf, 4096, txLen)) {
        snprintf(err, errLen, "out of memory for the ring");
        return -1;
    }
    c->ringMr =
        ibv_reg_mr(rs.pd, c->ring, ringLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!c->ringMr) {
        snprintf(err, errLen, "ibv_reg_mr (ring): %s", strerror(errno));
        return -1;
    }
    c->txMr = ibv_reg_mr(rs.pd, c->txBuf, txLen, IBV_ACCESS_LOCAL_WRITE);
    if (!c->txMr) {
        snprintf(err, errLen, "ibv_reg_mr (send buffers): %s", strerror(errno));
        return -1;
    }
    ringRxInit(&c->rx, RS_SLOTS);
    for (int i = 0; i < RS_SLOTS; i++) {
        if (rsPostRecv(c) == -1) {
            snprintf(err, errLen, "cannot post receives");
            return -1;
        }
    }
    return 0;
}

/* ---- teardown ------------------------------------------------------------------------------ */

static void rsFree(RsConn *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else if (rs.all == c)
        rs.all = c->next;
    if (c->next)
        c->next->prev = c->prev;
    rsReadyRemove(c);
    if (c->qpUp)
        rdma_destroy_qp(c->id);
    if (c->cq) {
        int rc = ibv_destroy_cq(c->cq);
        if (rc)
            rsLog("warning", "%s: ibv_destroy_cq: %s", c->desc, strerror(rc));
    }
    if (c->ringMr)
        ibv_dereg_mr(c->ringMr);
    if (c->txMr)
        ibv_dereg_mr(c->txMr);
    free(c->ring);
    free(c->txBuf);
    if (c->id)
        rdma_destroy_id(c->id);
    rsBufFree(&c->in);
    rsBufFree(&c->out);
    respParserFree(&c->parser);
    if (c->user)
        RedisModule_FreeString(NULL, c->user);
    if (c->counted)
        rs.st.connected--;
    if (c->refused)
        rs.refusing--;
    free(c);
}

/* Code that took a reference on c is done with it: free it if it was
 * closed meanwhile. Returns 0, or -1 if c is gone. */
static int rsRelease(RsConn *c)
{
    if (--c->refs > 0 || !c->closing)
        return 0;
    rsFree(c);
    return -1;
}

/* Move the QP to error and wait (bounded) until every send WR came back:
 * only then may the send buffers be freed. */
static void rsFlush(RsConn *c)
{
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
    struct timespec t0, now;
    struct ibv_wc wc;

    if (!c->qpUp)
        return;
    int rc = ibv_modify_qp(c->id->qp, &attr, IBV_QP_STATE);
    if (rc)
        rsLog("warning", "%s: ibv_modify_qp(ERR): %s", c->desc, strerror(rc));
    /* Completions already taken off the CQ by the batch being handled count
     * as outstanding but will never be polled again. */
    while (c->batch && c->batchNext < c->batchLen) {
        const struct ibv_wc *done = &c->batch[c->batchNext++];
        if ((done->wr_id & 7) == RS_WR_SEND) {
            c->txBusy &= ~(1u << (done->wr_id >> 3));
            c->outstanding--;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (c->outstanding > 0) {
        int n = ibv_poll_cq(c->cq, 1, &wc);
        if (n > 0) {
            if ((wc.wr_id & 7) == RS_WR_SEND)
                c->outstanding--;
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - t0.tv_sec) * 1000 + (now.tv_nsec - t0.tv_nsec) / 1000000 >
            RS_FLUSH_MAX_MS) {
            rsLog("warning", "%s: %d sends not flushed in time", c->desc, c->outstanding);
            break;
        }
        usleep(100);
    }
}

/* Close c: stop its QP, tell the client, and free it now or, if code is
 * running on it, when that code lets go. Can't fail; idempotent. */
static void rsClose(RsConn *c, const char *why)
{
    if (c->closing)
        return;
    c->closing = 1;
    rsLog("verbose", "%s: closed: %s", c->desc, why);
    rsReadyRemove(c);
    rsFlush(c);
    if (c->established)
        rdma_disconnect(c->id);
    if (c->refs == 0)
        rsFree(c);
}

/* Send what is queued, then close (QUIT, protocol errors, refusals). A
 * client that does not take that last reply is closed by the sweep after
 * RS_CLOSE_GRACE_MS. Can't fail. */
static void rsCloseAfterReply(RsConn *c, const char *why)
{
    if (c->closeAfterReply)
        return;
    c->closeAfterReply = 1;
    c->closeWhy = why;
    c->closeAtMs = rsNowMs() + RS_CLOSE_GRACE_MS;
}

/* A malformed ring message or request: close this client only. */
static void rsGarbage(RsConn *c, const char *why)
{
    rs.st.protocolErrors++;
    rsLog("warning", "%s: bad message from the client: %s", c->desc, why);
    rsClose(c, why);
}

/* ---- sending ------------------------------------------------------------------------------- */

/* Post one message: the header with every credit we may return, then up to
 * a buffer's worth of pending reply bytes (none for a credit return).
 * Returns 1 if one was posted, 0 if credits or buffers are short, -1 if the
 * connection was closed. */
static int rsPostOne(RsConn *c, int creditOnly)
{
    uint32_t full = (RS_TX_BUFS == 32) ? 0xFFFFFFFFu : ((1u << RS_TX_BUFS) - 1);

    if ((c->txBusy & full) == full)
        return 0;
    int slot = ringTxTake(&c->tx, creditOnly);
    if (slot < 0)
        return 0;
    int buf = __builtin_ctz(~c->txBusy);
    uint8_t *f = c->txBuf + (size_t)buf * c->txBufSize;
    size_t n = creditOnly ? 0 : rsBufPending(&c->out);
    if (n > c->txBufSize - RS_HDR)
        n = c->txBufSize - RS_HDR;
    uint32_t owe = rsReturnable(c);
    uint32_t cr = ringRxTakeCredits(&c->rx, owe < 0xFFFF ? owe : 0xFFFF);
    RespRdmaHdr h = {.credits = htole16((uint16_t)cr), .flags = 0};
    memcpy(f, &h, sizeof(h));
    if (n) {
        memcpy(f + RS_HDR, c->out.data + c->out.head, n);
        rsBufDrop(&c->out, n);
    }

    struct ibv_sge sge = {
        .addr = (uintptr_t)f, .length = RS_HDR + (uint32_t)n, .lkey = c->txMr->lkey};
    struct ibv_send_wr wr = {0}, *bad;
    wr.wr_id = ((uint64_t)buf << 3) | RS_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(ringImmEncode((uint32_t)slot, RS_HDR + (uint32_t)n));
    wr.wr.rdma.remote_addr = c->peerAddr + (uint64_t)slot * c->peerSlotSize;
    wr.wr.rdma.rkey = c->peerRkey;
    int rc = ibv_post_send(c->id->qp, &wr, &bad);
    if (rc) {
        rsLog("warning", "%s: ibv_post_send: %s", c->desc, strerror(rc));
        rsClose(c, "cannot post a ring write");
        return -1;
    }
    c->txBusy |= 1u << buf;
    c->outstanding++;
    return 1;
}

/* Send pending replies while credits and buffers last; when no reply can
 * go (none left, or only the last credit) and ring.h's threshold of credits
 * is owed, return them in a data-less message: the client may be waiting
 * for them to send the credits we wait for. Replies stuck on the client's
 * credits also end the withholding of its own: a client may return credits
 * only on its next request, which it cannot send without them. Close after
 * the last reply if asked. Returns 0, or -1 if the connection was closed. */
static int rsPump(RsConn *c)
{
    if (!c->established || c->closing)
        return 0;
    for (;;) {
        int rc = 0;
        if (rsBufPending(&c->out)) {
            rc = rsPostOne(c, 0);
            if (rc == 0 && c->tx.credits < 2)
                c->withheld = 0;
        }
        if (rc == 0 && rsReturnable(c) >= c->rx.threshold)
            rc = rsPostOne(c, 1);
        if (rc < 0)
            return -1;
        if (rc == 0)
            break;
    }
    if (c->closeAfterReply && rsBufPending(&c->out) == 0 && c->outstanding == 0) {
        rsClose(c, c->closeWhy);
        return -1;
    }
    return 0;
}

/* Queue reply bytes. Closes the connection when out of memory. */
static void rsReply(RsConn *c, const char *p, size_t n)
{
    if (c->closing)
        return;
    if (rsBufAppend(&c->out, p, n) == -1)
        rsClose(c, "out of memory for a reply");
}

/* Queue an error reply "-<text>\r\n"; CR and LF in text become spaces. */
static void rsReplyError(RsConn *c, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    int n = vsnprintf(msg + 1, sizeof(msg) - 3, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n > sizeof(msg) - 4)
        n = (int)sizeof(msg) - 4;
    msg[0] = '-';
    for (int i = 1; i <= n; i++)
        if (msg[i] == '\r' || msg[i] == '\n')
            msg[i] = ' ';
    memcpy(msg + 1 + n, "\r\n", 2);
    rsReply(c, msg, (size_t)n + 3);
}

/* ---- receiving ------------------------------------------------------------------------------ */

/* Append request bytes to the query buffer. Returns 0, or -1 if the
 * connection was closed (buffer limit, memory). */
static int rsAppendInput(RsConn *c, const uint8_t *p, size_t n)
{
    size_t have = rsBufPending(&c->in);

    if (c->needAuth && !c->user && have + n > RS_UNAUTH_QBUF_MAX) {
        rsGarbage(c, "unauthenticated client sent more than the door holds before AUTH");
        return -1;
    }
    if (have + n > rs.qbufLimit) {
        rsGarbage(c, "query buffer limit reached (client-query-buffer-limit)");
        return -1;
    }
    if (rsBufAppend(&c->in, p, n) == -1) {
        rsClose(c, "out of memory for the query buffer");
        return -1;
    }
    return 0;
}

/* A ring write arrived. Returns 0, or -1 if the connection was closed. */
static int rsOnRingMsg(RsConn *c, uint32_t imm)
{
    RespRingMsg m;
    const char *why;

    if (respRingOnMsg(&c->rx, &c->tx, c->ring, RS_SLOT_SIZE, imm, &m, &why) == -1) {
        rsGarbage(c, why);
        return -1;
    }
    if (rsPostRecv(c) == -1) {
        rsClose(c, "cannot repost a receive");
        return -1;
    }
    if (m.payloadLen > 0 && !c->closeAfterReply) {
        if (rsAppendInput(c, m.payload, m.payloadLen) == -1)
            return -1;
        c->withheld++; /* returned once its requests have run */
        if (!rsPaused(c))
            rsReadyPush(c);
    }
    return rsPump(c);
}

/* Sends completed: send more, and let a stalled connection run requests
 * again once its backlog is small. Returns 0, or -1 if it was closed. */
static int rsAfterSend(RsConn *c)
{
    if (rsPump(c) == -1)
        return -1;
    if (c->stalled && !rsPaused(c)) {
        c->stalled = 0;
        rsReadyPush(c);
    }
    return 0;
}

/* One work completion. Returns 0, or -1 if the connection was closed. */
static int rsOnWc(RsConn *c, const struct ibv_wc *wc)
{
    char why[128];

    if ((wc->wr_id & 7) == RS_WR_SEND) {
        c->txBusy &= ~(1u << (wc->wr_id >> 3));
        c->outstanding--;
        if (c->closing)
            return -1;
        if (wc->status != IBV_WC_SUCCESS) {
            snprintf(why, sizeof(why), "ring write failed: %s", ibv_wc_status_str(wc->status));
            rsClose(c, why);
            return -1;
        }
        return rsAfterSend(c);
    }
    if (c->closing)
        return -1;
    if (wc->status != IBV_WC_SUCCESS) {
        snprintf(why, sizeof(why), "receive failed: %s", ibv_wc_status_str(wc->status));
        rsClose(c, why);
        return -1;
    }
    if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc->wc_flags & IBV_WC_WITH_IMM)) {
        rsGarbage(c, "a message without an immediate");
        return -1;
    }
    return rsOnRingMsg(c, ntohl(wc->imm_data));
}

/* The completion channel is readable: for each CQ with an event, ack it,
 * re-arm it, then poll it dry in batches (a close in the middle of a batch
 * accounts for the rest of it in rsFlush, through c->batch). */
static void rsOnComp(int fd, void *user, int mask)
{
    struct ibv_cq *cq;
    void *cqCtx;

    while (rs.comp && ibv_get_cq_event(rs.comp, &cq, &cqCtx) == 0) {
        RsConn *c = cqCtx;
        struct ibv_wc wcs[RS_POLL_BATCH];
        int n = 0;
        ibv_ack_cq_events(cq, 1);
        if (c->closing)
            continue;
        int rc = ibv_req_notify_cq(cq, 0);
        if (rc) {
            rsLog("warning", "%s: ibv_req_notify_cq: %s", c->desc, strerror(rc));
            rsClose(c, "cannot re-arm the CQ");
            continue;
        }
        c->refs++;
        while (!c->closing && (n = ibv_poll_cq(c->cq, RS_POLL_BATCH, wcs)) > 0) {
            c->batch = wcs;
            c->batchLen = n;
            for (c->batchNext = 0; c->batchNext < c->batchLen && !c->closing;)
                rsOnWc(c, &wcs[c->batchNext++]);
            c->batch = NULL;
        }
        if (!c->closing && n < 0)
            rsClose(c, "ibv_poll_cq failed");
        rsRelease(c);
    }
}

/* ---- connection manager ------------------------------------------------------------------- */

static int rsDefaultNoPass(void);

/* redis-server's text for a client refused by protected mode (networking.c). */
static const char rsDenied[] =
    "-DENIED Redis is running in protected mode because protected "
    "mode is enabled and no password is set for the default user. "
    "In this mode connections are only accepted from the loopback interface. "
    "If you want to connect from external computers to Redis you "
    "may adopt one of the following solutions: "
    "1) Just disable protected mode sending the command "
    "'CONFIG SET protected-mode no' from the loopback interface "
    "by connecting to Redis from the same host the server is "
    "running, however MAKE SURE Redis is not publicly accessible "
    "from internet if you do so. Use CONFIG REWRITE to make this "
    "change permanent. "
    "2) Alternatively you can just disable the protected mode by "
    "editing the Redis configuration file, and setting the protected "
    "mode option to 'no', and then restarting the server. "
    "3) If you started the server manually just for testing, restart "
    "it with the '--protected-mode no' option. "
    "4) Setup a an authentication password for the default user. "
    "NOTE: You only need to do one of the above things in order for "
    "the server to start accepting connections from the outside.\r\n";

/* One configuration value as a string into out ("" if it cannot be read). */
static void rsConfigGet(const char *name, char *out, size_t outLen)
{
    RedisModuleCallReply *r = RedisModule_Call(rs.ctx, "CONFIG", "cc", "GET", name);
    size_t len = 0;
    const char *v = NULL;

    out[0] = '\0';
    if (r && RedisModule_CallReplyType(r) == REDISMODULE_REPLY_ARRAY &&
        RedisModule_CallReplyLength(r) == 2)
        v = RedisModule_CallReplyStringPtr(RedisModule_CallReplyArrayElement(r, 1), &len);
    if (v && len < outLen) {
        memcpy(out, v, len);
        out[len] = '\0';
    }
    if (r)
        RedisModule_FreeCallReply(r);
}

/* Re-read client-query-buffer-limit (the door's limit follows CONFIG SET
 * within a sweep). Keeps the last value if it cannot be read. */
static void rsReadQbufLimit(void)
{
    char v[32];
    char *end;

    rsConfigGet("client-query-buffer-limit", v, sizeof(v));
    unsigned long long n = strtoull(v, &end, 10);
    if (v[0] && *end == '\0' && n > 0)
        rs.qbufLimit = n;
}

/* Is this connection over redis-server's maxclients, counting Redis's own
 * clients and cluster connections and every door connection admitted? */
static int rsOverMaxClients(void)
{
    RedisModuleServerInfoData *si = RedisModule_GetServerInfo(rs.ctx, "clients");
    long long have = 0, max = 0;

    if (!si)
        return 0;
    have = RedisModule_ServerInfoGetFieldSigned(si, "connected_clients", NULL) +
           RedisModule_ServerInfoGetFieldSigned(si, "cluster_connections", NULL);
    max = RedisModule_ServerInfoGetFieldSigned(si, "maxclients", NULL);
    RedisModule_FreeServerInfo(rs.ctx, si);
    for (RsConn *c = rs.all; c; c = c->next)
        if (!c->closing && !c->refused)
            have++;
    return max > 0 && have >= max;
}

/* Decide whether a new connection from peerIp may in. Returns NULL, or the
 * RESP error to send it before closing (and sets *why for the log). Sets
 * *needAuth when the default user has a password. */
static const char *rsAdmission(const char *peerIp, int *needAuth, const char **why)
{
    char pm[8];
    int unauth = 0, unauthHere = 0;

    *needAuth = !rsDefaultNoPass();
    rsReadQbufLimit();
    rsConfigGet("protected-mode", pm, sizeof(pm));
    /* redis-server's rule (islocalClient): only these two are local. */
    int local = !strcmp(peerIp, "127.0.0.1") || !strcmp(peerIp, "::1");
    if (!*needAuth && strcmp(pm, "no") != 0 && !local) {
        *why = "protected mode: no password and not a loopback client";
        return rsDenied;
    }
    if (rsOverMaxClients()) {
        *why = "maxclients reached";
        return "-ERR max number of clients reached\r\n";
    }
    if (!*needAuth)
        return NULL;
    for (RsConn *c = rs.all; c; c = c->next) {
        if (c->closing || c->refused || !c->needAuth || c->user)
            continue;
        unauth++;
        unauthHere += !strcmp(c->peerIp, peerIp);
    }
    if (unauth >= RS_UNAUTH_MAX || unauthHere >= RS_UNAUTH_PER_ADDR) {
        *why = "too many connections waiting for AUTH";
        return "-ERR max number of unauthenticated RDMA clients reached\r\n";
    }
    return NULL;
}

static void rsOnConnectRequest(struct rdma_cm_id *id, const void *priv, size_t privLen)
{
    struct sockaddr *peer = rdma_get_peer_addr(id);
    struct rdma_conn_param cp = {0};
    RespRdmaPriv mine;
    char err[160], ip[48] = "?";
    const char *why, *refusal;
    int port = 0, needAuth = 0;

    if (rs.stopping) {
        rdma_reject(id, NULL, 0);
        rdma_destroy_id(id);
        return;
    }
    RsConn *c = calloc(1, sizeof(*c));
    if (!c) {
        rdma_reject(id, NULL, 0);
        rdma_destroy_id(id);
        return;
    }
    if (peer->sa_family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)peer;
        inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
        port = ntohs(s6->sin6_port);
    } else if (peer->sa_family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)peer;
        inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
        port = ntohs(s4->sin_port);
    }
    refusal = rsAdmission(ip, &needAuth, &why);
    if (refusal && rs.refusing >= RS_REFUSING_MAX) {
        /* Too many refusals still being delivered: do not spend a ring on
         * one more, reject it at the connection manager. */
        rsLog("verbose", "%s:%d: rejected: %s", ip, port, why);
        rdma_reject(id, NULL, 0);
        rdma_destroy_id(id);
        free(c);
        return;
    }
    c->id = id;
    id->context = c;
    c->cid = ++rs.nextCid;
    c->bornMs = rsNowMs();
    c->needAuth = (unsigned)needAuth;
    snprintf(c->peerIp, sizeof(c->peerIp), "%s", ip);
    respParserInit(&c->parser);
    snprintf(c->desc, sizeof(c->desc), "%s:%d", ip, port);
    c->next = rs.all;
    if (rs.all)
        rs.all->prev = c;
    rs.all = c;
    if (refusal) {
        /* Like redis-server: admit, send the error, close. */
        c->refused = 1;
        rs.refusing++;
        rsLog("verbose", "%s: refused: %s", c->desc, why);
        rsReply(c, refusal, strlen(refusal));
        rsCloseAfterReply(c, why);
    } else if (!needAuth) {
        c->user = RedisModule_CreateString(NULL, "default", 7);
    }
    if (rsParsePriv(c, priv, privLen, &why) == -1) {
        rsLog("warning", "%s: refused: %s", c->desc, why);
        goto out_reject;
    }
    if (rsSetupConn(c, err, sizeof(err)) == -1) {
        rsLog("warning", "%s: refused: %s", c->desc, err);
        goto out_reject;
    }
    rsFillPriv(c, &mine);
    cp.private_data = &mine;
    cp.private_data_len = sizeof(mine);
    cp.retry_count = 7;
    cp.rnr_retry_count = 7; /* receives are always reposted */
    if (rdma_accept(id, &cp)) {
        rsLog("warning", "%s: rdma_accept: %s", c->desc, strerror(errno));
        goto out_reject;
    }
    return;

out_reject:
    rdma_reject(id, NULL, 0);
    c->closing = 1;
    rsFree(c);
}

static void rsOnCm(int fd, void *user, int mask)
{
    VerbsCmEvent ev;

    while (rs.ec && verbsNextCmEvent(rs.ec, &ev) == 0) {
        struct rdma_cm_id *id = ev.id;
        enum rdma_cm_event_type type = ev.type;
        int status = ev.status;
        uint8_t *priv = ev.priv;
        size_t privLen = ev.privLen;

        if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
            rsOnConnectRequest(id, privLen ? priv : NULL, privLen);
            continue;
        }
        if (id == rs.listenId) {
            rsLog("warning", "listener: %s (status %d)", rdma_event_str(type), status);
            continue;
        }
        RsConn *c = id->context;
        if (!c || c->closing)
            continue;
        char err[128];
        switch (type) {
            case RDMA_CM_EVENT_ESTABLISHED:
                c->established = 1;
                if (!c->refused) {
                    c->counted = 1;
                    rs.st.connected++;
                    rs.st.total++;
                    rsLog("verbose", "%s: connected", c->desc);
                }
                c->refs++;
                rsPump(c);
                rsRelease(c);
                break;
            case RDMA_CM_EVENT_DISCONNECTED:
                rsClose(c, "client disconnected");
                break;
            case RDMA_CM_EVENT_TIMEWAIT_EXIT:
                break;
            default:
                snprintf(err, sizeof(err), "%s (status %d)", rdma_event_str(type), status);
                rsClose(c, err);
        }
    }
}

/* ---- running requests ---------------------------------------------------------------------- */

/* Forward a call reply's RESP2 bytes to the client. */
static void rsReplyCall(RsConn *c, RedisModuleCallReply *r)
{
    size_t len;
    const char *proto = RedisModule_CallReplyProto(r, &len);

    if (!proto || len == 0) {
        /* e.g. CLIENT REPLY OFF: every request must get an answer here. */
        rsReplyError(c, "ERR the command produced no reply");
        return;
    }
    rsReply(c, proto, len);
}

static int rsReplyIs(RedisModuleCallReply *r, const char *want)
{
    size_t len;
    const char *proto = r ? RedisModule_CallReplyProto(r, &len) : NULL;

    return proto && len == strlen(want) && !memcmp(proto, want, len);
}

/* Does the default user let anyone in without a password? Asked anew for
 * every connection (ACL SETUSER may change it at any time): AUTH default
 * with 32 random bytes succeeds only for a nopass user. */
static int rsDefaultNoPass(void)
{
    unsigned char rnd[32];

    if (getrandom(rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd)) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        for (size_t i = 0; i < sizeof(rnd); i++)
            rnd[i] = (unsigned char)((ts.tv_nsec >> (i % 24)) ^ (i * 131) ^ (uintptr_t)&ts);
    }
    RedisModuleCallReply *r =
        RedisModule_Call(rs.ctx, "AUTH", "cbE", "default", (const char *)rnd, sizeof(rnd));
    int ok = rsReplyIs(r, "+OK\r\n");
    if (r)
        RedisModule_FreeCallReply(r);
    return ok;
}

/* Verify user/password (user NULL: "default") with AUTH on a temporary
 * client and, on success, make user the connection's ACL user. Returns the
 * reply (OK or the error) for the caller to forward and free, or NULL. */
static RedisModuleCallReply *rsCheckAuth(RsConn *c, RedisModuleString *user,
                                         RedisModuleString *pass)
{
    RedisModuleCallReply *r = user ? RedisModule_Call(rs.ctx, "AUTH", "ssE", user, pass)
                                   : RedisModule_Call(rs.ctx, "AUTH", "sE", pass);

    if (rsReplyIs(r, "+OK\r\n")) {
        size_t len;
        const char *name = user ? RedisModule_StringPtrLen(user, &len) : "default";
        if (!user)
            len = strlen(name);
        if (c->user)
            RedisModule_FreeString(NULL, c->user);
        c->user = RedisModule_CreateString(NULL, name, len);
    }
    return r;
}

/* AUTH [user] password */
static void rsAuth(RsConn *c, RedisModuleString **argv, int argc)
{
    if (argc < 2) {
        rsReplyError(c, "ERR wrong number of arguments for 'auth' command");
        return;
    }
    if (argc > 3) {
        rsReplyError(c, "ERR syntax error");
        return;
    }
    RedisModuleCallReply *r = rsCheckAuth(c, argc == 3 ? argv[1] : NULL, argv[argc - 1]);
    if (!r) {
        rsReplyError(c, "ERR AUTH could not be run");
        return;
    }
    rsReplyCall(c, r);
    RedisModule_FreeCallReply(r);
}

/* Append "$<len>\r\n<s>\r\n". */
static void rsReplyBulk(RsConn *c, const char *s, size_t len)
{
    char head[32];
    int n = snprintf(head, sizeof(head), "$%zu\r\n", len);

    rsReply(c, head, (size_t)n);
    rsReply(c, s, len);
    rsReply(c, "\r\n", 2);
}

/* HELLO [2 [AUTH user pass] [SETNAME name]]: RESP2 only (the door does not
 * speak RESP3). The reply is redis-server's, with this connection's id. */
static void rsHello(RsConn *c, RedisModuleString **argv, int argc)
{
    RedisModuleString *user = NULL, *pass = NULL;
    long long ver = 2;

    if (argc >= 2) {
        if (RedisModule_StringToLongLong(argv[1], &ver) == REDISMODULE_ERR) {
            rsReplyError(c, "ERR Protocol version is not an integer or out of range");
            return;
        }
        if (ver != 2) {
            rsReplyError(c, "NOPROTO unsupported protocol version (RDMA clients speak RESP2)");
            return;
        }
    }
    for (int j = 2; j < argc; j++) {
        const char *opt = RedisModule_StringPtrLen(argv[j], NULL);
        int more = argc - 1 - j;
        if (!strcasecmp(opt, "AUTH") && more >= 2) {
            user = argv[j + 1];
            pass = argv[j + 2];
            j += 2;
        } else if (!strcasecmp(opt, "SETNAME") && more >= 1) {
            j++; /* accepted and ignored: CLIENT SETNAME does not apply here */
        } else {
            rsReplyError(c, "ERR Syntax error in HELLO option '%s'", opt);
            return;
        }
    }
    if (user) {
        RedisModuleCallReply *r = rsCheckAuth(c, user, pass);
        int ok = rsReplyIs(r, "+OK\r\n");
        if (!ok) {
            if (r)
                rsReplyCall(c, r);
            else
                rsReplyError(c, "ERR AUTH could not be run");
        }
        if (r)
            RedisModule_FreeCallReply(r);
        if (!ok)
            return;
    }
    if (!c->user) {
        rsReplyError(c, "NOAUTH HELLO must be called with the client already authenticated, "
                        "otherwise the HELLO <proto> AUTH <user> <pass> option can be used to "
                        "authenticate the client and select the RESP protocol version at the "
                        "same time");
        return;
    }
    const char *version = "", *mode = "standalone", *role = "master";
    RedisModuleServerInfoData *si = RedisModule_GetServerInfo(rs.ctx, "server");
    RedisModuleServerInfoData *ri = RedisModule_GetServerInfo(rs.ctx, "replication");
    if (si) {
        const char *v = RedisModule_ServerInfoGetFieldC(si, "redis_version");
        const char *m = RedisModule_ServerInfoGetFieldC(si, "redis_mode");
        version = v ? v : version;
        mode = m ? m : mode;
    }
    if (ri) {
        const char *r = RedisModule_ServerInfoGetFieldC(ri, "role");
        if (r && !strcmp(r, "slave"))
            role = "replica";
    }
    int sentinel = !strcmp(mode, "sentinel");
    char num[64];
    int n = snprintf(num, sizeof(num), "*%d\r\n", sentinel ? 12 : 14);
    rsReply(c, num, (size_t)n);
    rsReplyBulk(c, "server", 6);
    rsReplyBulk(c, "redis", 5);
    rsReplyBulk(c, "version", 7);
    rsReplyBulk(c, version, strlen(version));
    rsReplyBulk(c, "proto", 5);
    rsReply(c, ":2\r\n", 4);
    rsReplyBulk(c, "id", 2);
    n = snprintf(num, sizeof(num), ":%llu\r\n", (unsigned long long)c->cid);
    rsReply(c, num, (size_t)n);
    rsReplyBulk(c, "mode", 4);
    rsReplyBulk(c, mode, strlen(mode));
    if (!sentinel) {
        rsReplyBulk(c, "role", 4);
        rsReplyBulk(c, role, strlen(role));
    }
    rsReplyBulk(c, "modules", 7);
    RedisModuleCallReply *ml = RedisModule_Call(rs.ctx, "MODULE", "c", "LIST");
    if (ml) {
        rsReplyCall(c, ml);
        RedisModule_FreeCallReply(ml);
    } else {
        rsReply(c, "*0\r\n", 4);
    }
    if (si)
        RedisModule_FreeServerInfo(rs.ctx, si);
    if (ri)
        RedisModule_FreeServerInfo(rs.ctx, ri);
}

static int rsArgIs(RedisModuleString *s, const char *word)
{
    size_t len;
    const char *p = RedisModule_StringPtrLen(s, &len);
    return len == strlen(word) && !strncasecmp(p, word, len);
}

/* Is word (case-insensitive) one of argv[from..argc)? */
static int rsHasArg(RedisModuleString **argv, int argc, int from, const char *word)
{
    for (int i = from; i < argc; i++)
        if (rsArgIs(argv[i], word))
            return 1;
    return 0;
}

/* Commands that wait for something: RedisModule_Call gives commands a
 * client that may not block (Redis's own ones then answer at once with a
 * different meaning; a module's blocking reply would crash the server). */
static const char *const rsBlocking[] = {
    "BLPOP",    "BRPOP",  "BRPOPLPUSH", "BLMOVE",    "BLMPOP",     "BZPOPMIN",
    "BZPOPMAX", "BZMPOP", "WAIT",       "OBJ.FETCH", "OBJ.LOCATE", "OBJ.NODES",
};
/* Commands whose state belongs to the Redis connection: the call runs on a
 * pooled temporary client, so that state would land on the wrong client
 * (subscriptions, transactions, replication, objects created or pinned by a
 * connection and released when it goes away). */
static const char *const rsStateful[] = {
    "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE",
    "MONITOR",   "MULTI",      "EXEC",       "DISCARD",     "WATCH",        "UNWATCH",
    "RESET",     "SYNC",       "PSYNC",      "REPLCONF",    "OBJ.CREATE",   "OBJ.WRITE",
    "OBJ.SEAL",  "OBJ.ABORT",  "OBJ.PIN",    "OBJ.RELEASE",
};

static int rsInList(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strcasecmp(name, list[i]))
            return 1;
    return 0;
}

/* Should this request be refused? Queues the refusal and returns 1, or
 * returns 0. */
static int rsRefusal(RsConn *c, const char *name, RedisModuleString **argv, int argc)
{
    int refuse = rsInList(name, rsBlocking, sizeof(rsBlocking) / sizeof(rsBlocking[0])) ||
                 rsInList(name, rsStateful, sizeof(rsStateful) / sizeof(rsStateful[0]));

    if (!strcasecmp(name, "XREAD") || !strcasecmp(name, "XREADGROUP")) {
        for (int i = 1; i < argc && !rsArgIs(argv[i], "STREAMS"); i++)
            if (rsArgIs(argv[i], "BLOCK"))
                refuse = 1;
    } else if (!strcasecmp(name, "OBJ.GET") && rsHasArg(argv, argc, 2, "TIMEOUT")) {
        refuse = 1;
    } else if (!strcasecmp(name, "CLIENT") && argc >= 2 &&
               (rsArgIs(argv[1], "REPLY") || rsArgIs(argv[1], "TRACKING") ||
                rsArgIs(argv[1], "CACHING"))) {
        refuse = 1;
    }
    if (refuse) {
        char up[64];
        size_t i;
        for (i = 0; name[i] && i < sizeof(up) - 1; i++)
            up[i] = (char)toupper((unsigned char)name[i]);
        up[i] = '\0';
        rsReplyError(c, "ERR %s is not supported over RDMA (blocking or stateful)", up);
        return 1;
    }
    if (!strcasecmp(name, "OBJ.GET") && argc >= 2) {
        /* A created object would be waited for: answer now instead. */
        size_t idLen;
        const char *id = RedisModule_StringPtrLen(argv[1], &idLen);
        objTableLock(objNode.table);
        ObjEntry *e = objTableFind(objNode.table, id, idLen);
        int unsealed = e && e->state != OBJ_SEALED;
        objTableUnlock(objNode.table);
        if (unsealed) {
            rsReplyError(c, "NOTSEALED the object is still being created; OBJ.GET over RDMA "
                            "does not wait (retry when it is sealed)");
            return 1;
        }
    }
    return 0;
}

/* Run one command as the connection's user and queue its reply. */
static void rsCall(RsConn *c, const char *name, RedisModuleString **argv, int argc)
{
    RedisModuleUser *u = RedisModule_GetModuleUserFromUserName(c->user);
    char fmt[8] = "vEC!M";

    if (!u) {
        /* Deleted by ACL DELUSER: redis-server disconnects such clients. */
        rsClose(c, "its ACL user was deleted");
        return;
    }
    int flags = RedisModule_GetContextFlags(rs.ctx);
    int readonly =
        (flags & REDISMODULE_CTX_FLAGS_SLAVE) && (flags & REDISMODULE_CTX_FLAGS_READONLY);
    if (readonly)
        strcat(fmt, "W");
    RedisModule_SetContextUser(rs.ctx, u);
    RedisModule_SelectDb(rs.ctx, c->db);
    errno = 0;
    RedisModuleCallReply *r = RedisModule_Call(rs.ctx, name, fmt, argv + 1, (size_t)(argc - 1));
    int err = errno;
    RedisModule_SetContextUser(rs.ctx, NULL);
    RedisModule_FreeModuleUser(u);
    if (!r) {
        rsReplyError(c, "ERR the command could not be run (%s)", strerror(err));
        return;
    }
    size_t len;
    const char *proto = RedisModule_CallReplyProto(r, &len);
    static const char aclPrefix[] = "-ERR acl verification failed";
    static const char roPrefix[] = "-ERR Write command";
    if (err == EACCES && proto && len > sizeof(aclPrefix) &&
        !memcmp(proto, aclPrefix, sizeof(aclPrefix) - 1)) {
        /* Same code word as redis-server's own ACL refusals. */
        rsReply(c, "-NOPERM ", 8);
        rsReply(c, proto + 5, len - 5);
    } else if (readonly && err == ENOSPC && proto && len > sizeof(roPrefix) &&
               !memcmp(proto, roPrefix, sizeof(roPrefix) - 1)) {
        rsReplyError(c, "READONLY You can't write against a read only replica.");
    } else {
        rsReplyCall(c, r);
        if (!strcasecmp(name, "SELECT") && rsReplyIs(r, "+OK\r\n")) {
            long long db;
            if (RedisModule_StringToLongLong(argv[1], &db) == REDISMODULE_OK)
                c->db = (int)db;
        }
    }
    RedisModule_FreeCallReply(r);
}

/* Run the request the parser just returned (its arguments in base). */
static void rsExecute(RsConn *c, const char *base)
{
    int argc = (int)c->parser.argc;
    RedisModuleString **argv = malloc(sizeof(*argv) * (size_t)argc);
    char small[64], *name = small;
    size_t len;

    rs.st.commands++;
    if (!argv) {
        rsClose(c, "out of memory for a request");
        return;
    }
    /* Copy the arguments first: while a command runs, Redis may serve events
     * that append to (and move) the query buffer. */
    for (int i = 0; i < argc; i++) {
        const char *a = respArg(&c->parser, base, (size_t)i, &len);
        argv[i] = RedisModule_CreateString(NULL, a, len);
    }
    /* RedisModule_Call takes the name as a C string. */
    const char *cmd = RedisModule_StringPtrLen(argv[0], &len);
    if (len >= sizeof(small) && !(name = malloc(len + 1))) {
        rsClose(c, "out of memory for a request");
        goto out_free;
    }
    memcpy(name, cmd, len);
    name[len] = '\0';
    if (memchr(cmd, '\0', len)) {
        rsReplyError(c, "ERR unknown command '%s', with args beginning with: ", name);
        goto out_free;
    }

    if (!strcasecmp(name, "QUIT")) {
        rsReply(c, "+OK\r\n", 5);
        rsCloseAfterReply(c, "client sent QUIT");
    } else if (!strcasecmp(name, "AUTH")) {
        rsAuth(c, argv, argc);
    } else if (!strcasecmp(name, "HELLO")) {
        rsHello(c, argv, argc);
    } else if (!c->user) {
        rsReplyError(c, "NOAUTH Authentication required.");
    } else if (!rsRefusal(c, name, argv, argc)) {
        rsCall(c, name, argv, argc);
    }

out_free:
    if (name != small)
        free(name);
    for (int i = 0; i < argc; i++)
        RedisModule_FreeString(NULL, argv[i]);
    free(argv);
}

/* Run up to RS_TURN_CMDS requests of c, in order, until its input is used
 * up, its reply backlog is too large, or it is closing. Once no complete
 * request is left, the withheld credits go back to the client. */
static void rsServe(RsConn *c)
{
    int n, exhausted = 0;

    c->refs++;
    for (n = 0; n < RS_TURN_CMDS && !c->closing && !c->closeAfterReply; n++) {
        if (rsBufPending(&c->in) == 0) {
            exhausted = 1;
            break;
        }
        if (rsPaused(c)) {
            c->stalled = 1;
            break;
        }
        const char *base = c->in.data + c->in.head;
        int rc = respParse(&c->parser, base, rsBufPending(&c->in), c->user == NULL);
        if (rc == RESP_ERROR) {
            rs.st.protocolErrors++;
            rsLog("verbose", "%s: %s", c->desc, c->parser.err);
            rsReplyError(c, "ERR %s", c->parser.err);
            rsCloseAfterReply(c, "protocol error");
            break;
        }
        if (rc == RESP_NOMEM) {
            rsClose(c, "out of memory parsing a request");
            break;
        }
        if (rc == RESP_DONE)
            rsExecute(c, base);
        if (c->closing)
            break;
        rsBufDrop(&c->in, c->parser.consumed);
        respParserConsumed(&c->parser);
        if (rc == RESP_MORE) {
            exhausted = 1;
            break;
        }
    }
    if (n == RS_TURN_CMDS && !c->closing)
        rsReadyPush(c); /* more next turn: let other clients and events in */
    if (exhausted)
        c->withheld = 0; /* the client may send more */
    if (!c->closing)
        rsPump(c);
    rsRelease(c);
}

static void rsTeardown(void);

/* The run timer: serve every connection that was ready when it fired,
 * once. Runs in a module timer so that Redis propagates the commands'
 * effects (AOF, replicas) when it returns. */
static void rsRunTimer(RedisModuleCtx *ctx, void *data)
{
    size_t turns = 0;

    rs.timerArmed = 0;
    for (RsConn *c = rs.readyHead; c; c = c->nextReady)
        turns++;
    rs.inTurn = 1;
    while (turns-- > 0 && !rs.stopping) {
        RsConn *c = rsReadyPop();
        if (!c)
            break;
        rsServe(c);
    }
    rs.inTurn = 0;
    if (rs.stopping) {
        rsTeardown();
        return;
    }
    rsArmTimer();
}

/* The sweep, every RS_SWEEP_MS: re-read client-query-buffer-limit and close
 * the connections that overstay: a handshake that never completes, a
 * client that does not AUTH in time when a password is required, a last
 * reply (refusal, protocol error, QUIT) the client does not take. */
static void rsSweep(RedisModuleCtx *ctx, void *data)
{
    long long now = rsNowMs();
    RsConn *next;

    rs.sweepArmed = 0;
    if (rs.stopping)
        return;
    if (rs.all)
        rsReadQbufLimit();
    for (RsConn *c = rs.all; c; c = next) {
        next = c->next;
        if (c->closing || c->refs > 0)
            continue;
        if (c->closeAfterReply && now >= c->closeAtMs)
            rsClose(c, c->refused ? "refused (the client did not take the error)"
                                  : "the client did not take its last reply");
        else if (!c->established && now - c->bornMs > RS_HANDSHAKE_MS)
            rsClose(c, "connection not established in time");
        else if (c->needAuth && !c->user && now - c->bornMs > RS_AUTH_DEADLINE_MS)
            rsClose(c, "no AUTH within the deadline (password required)");
    }
    rs.sweep = RedisModule_CreateTimer(rs.ctx, RS_SWEEP_MS, rsSweep, NULL);
    rs.sweepArmed = 1;
}

/* ---- start / stop ------------------------------------------------------------------------ */

/* Release everything; connections first. Can't fail. */
static void rsTeardown(void)
{
    if (rs.timerArmed)
        RedisModule_StopTimer(rs.ctx, rs.timer, NULL);
    rs.timerArmed = 0;
    if (rs.sweepArmed)
        RedisModule_StopTimer(rs.ctx, rs.sweep, NULL);
    rs.sweepArmed = 0;
    while (rs.all) {
        RsConn *c = rs.all;
        rsClose(c, "server shutting down");
        if (rs.all == c) { /* still referenced: unlink it and let it go */
            rs.all = c->next;
            if (rs.all)
                rs.all->prev = NULL;
            c->next = c->prev = NULL;
        }
    }
    if (rs.ecWatched)
        RedisModule_EventLoopDel(rs.ec->fd, REDISMODULE_EVENTLOOP_READABLE);
    if (rs.compWatched)
        RedisModule_EventLoopDel(rs.comp->fd, REDISMODULE_EVENTLOOP_READABLE);
    if (rs.listenId)
        rdma_destroy_id(rs.listenId);
    if (rs.ec)
        rdma_destroy_event_channel(rs.ec);
    if (rs.comp && ibv_destroy_comp_channel(rs.comp))
        rsLog("warning", "ibv_destroy_comp_channel: %s", strerror(errno));
    if (rs.pd && ibv_dealloc_pd(rs.pd))
        rsLog("warning", "ibv_dealloc_pd failed");
    if (rs.ctx)
        RedisModule_FreeThreadSafeContext(rs.ctx);
    memset(&rs, 0, sizeof(rs));
}

/* Open the listener on bindAddr:port. Returns 0, or -1 with a reason in
 * err (the caller tears down what was set up). */
static int rsOpen(const char *bindAddr, int port, char *err, size_t errLen)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};

    if (inet_pton(AF_INET, bindAddr, &sa.sin_addr) != 1) {
        snprintf(err, errLen, "rdma-bind '%s' is not an IPv4 address", bindAddr);
        return -1;
    }
    /* Registered memory and fork (BGSAVE): kernels with copy-on-fork for
     * pinned pages need nothing; older ones need MADV_DONTFORK. */
    if (ibv_is_fork_initialized() == IBV_FORK_DISABLED && ibv_fork_init())
        rsLog("warning", "ibv_fork_init failed: BGSAVE may be unsafe with RDMA");
    rs.ec = rdma_create_event_channel();
    if (!rs.ec) {
        snprintf(err, errLen, "rdma_create_event_channel: %s (no RDMA support?)", strerror(errno));
        return -1;
    }
    if (rdma_create_id(rs.ec, &rs.listenId, NULL, RDMA_PS_TCP)) {
        snprintf(err, errLen, "rdma_create_id: %s", strerror(errno));
        return -1;
    }
    if (rdma_bind_addr(rs.listenId, (struct sockaddr *)&sa)) {
        snprintf(err, errLen, "rdma_bind_addr %s:%d: %s", bindAddr, port, strerror(errno));
        return -1;
    }
    rs.verbs = rs.listenId->verbs;
    if (!rs.verbs) {
        snprintf(err, errLen, "no RDMA device has the address %s (set objstore.rdma-bind)",
                 bindAddr);
        return -1;
    }
    const char *dev = ibv_get_device_name(rs.verbs->device);
    if (objNode.cfg.rdmaDevice[0] && strcmp(objNode.cfg.rdmaDevice, dev)) {
        snprintf(err, errLen, "%s belongs to device %s, not rdma-device %s", bindAddr, dev,
                 objNode.cfg.rdmaDevice);
        return -1;
    }
    rs.pd = ibv_alloc_pd(rs.verbs);
    if (!rs.pd) {
        snprintf(err, errLen, "ibv_alloc_pd: %s", strerror(errno));
        return -1;
    }
    rs.comp = ibv_create_comp_channel(rs.verbs);
    if (!rs.comp) {
        snprintf(err, errLen, "ibv_create_comp_channel: %s", strerror(errno));
        return -1;
    }
    if (rsSetNonBlocking(rs.ec->fd) == -1 || rsSetNonBlocking(rs.comp->fd) == -1) {
        snprintf(err, errLen, "cannot make the RDMA channels non-blocking: %s", strerror(errno));
        return -1;
    }
    if (RedisModule_EventLoopAdd(rs.ec->fd, REDISMODULE_EVENTLOOP_READABLE, rsOnCm, NULL) ==
        REDISMODULE_ERR) {
        snprintf(err, errLen, "cannot watch the rdma_cm channel: %s", strerror(errno));
        return -1;
    }
    rs.ecWatched = 1;
    if (RedisModule_EventLoopAdd(rs.comp->fd, REDISMODULE_EVENTLOOP_READABLE, rsOnComp, NULL) ==
        REDISMODULE_ERR) {
        snprintf(err, errLen, "cannot watch the completion channel: %s", strerror(errno));
        return -1;
    }
    rs.compWatched = 1;
    if (rdma_listen(rs.listenId, RS_BACKLOG)) {
        snprintf(err, errLen, "rdma_listen: %s", strerror(errno));
        return -1;
    }
    rsLog("notice", "RESP over RDMA on %s (%s:%d)", dev, bindAddr, port);
    return 0;
}

void respServerStart(RedisModuleCtx *ctx)
{
    long long port = objNode.cfg.rdmaClientPort; /* resolved by settings.c */
    char err[256];

    if (port <= 0)
        return;
    memset(&rs, 0, sizeof(rs));
    rs.ctx = RedisModule_GetDetachedThreadSafeContext(ctx);
    rs.qbufLimit = RS_QBUF_DEFAULT;
    if (rsOpen(objNode.cfg.rdmaBind, (int)port, err, sizeof(err)) == -1) {
        rsLog("warning", "RDMA clients are off: %s", err);
        rsTeardown();
        return;
    }
    rs.running = 1;
    rsSweep(NULL, NULL);
}

void respServerStop(void)
{
    if (!rs.running)
        return;
    rs.stopping = 1;
    if (rs.inTurn) {
        /* A command we run (SHUTDOWN) is stopping the server, which exits
         * right after this: tell the clients, free nothing under our feet. */
        for (RsConn *c = rs.all; c; c = c->next)
            if (c->established && !c->closing)
                rdma_disconnect(c->id);
        return;
    }
    rsTeardown();
}

void respServerStats(ObjStatSink *sink)
{
    objStatNum(sink, "rdma_clients_connected", rs.st.connected);
    objStatNum(sink, "rdma_clients_total", rs.st.total);
    objStatNum(sink, "rdma_client_commands", rs.st.commands);
    objStatNum(sink, "rdma_client_protocol_errors", rs.st.protocolErrors);
}
