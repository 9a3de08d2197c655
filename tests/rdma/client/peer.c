/*
 * peer.c - a tiny RESP-over-RDMA server for testing the client library
 * (client/rdmaconn.c) without the module: it speaks module/rdma/resprdma.h on
 * its own (an independent reading of the wire spec) and answers a handful
 * of commands from an in-memory table, enough for every RESP2 reply type,
 * pipelines, AUTH and redis-benchmark's PING/SET/GET.
 *
 *   peer ADDR PORT [--slots N] [--slot-size N] [--requirepass PW] [--seconds S]
 *
 * Commands: PING [msg], ECHO m, SET k v, GET k, DEL k, INCR k, AUTH pw,
 * CONFIG GET save|appendonly|maxmemory ("0"; other names: empty array),
 * COMMAND INFO name (a nested array), XREAD ... (a nil array), BLOB n (a
 * bulk of n pattern bytes), TYPES (an array holding one reply of every RESP2
 * type), NILARRAY, DBSIZE, QUIT.
 * It exits after --seconds (default 600) or on SIGTERM; every connection is
 * flushed and freed first. Single-threaded: one epoll loop for rdma_cm and
 * the completion channel. Prints "peer: ready" on stdout once listening.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "rdma/resprdma.h"
#include "rdma/ring.h"

#define PEER_TX_MAX   16
#define PEER_TX_SIZE  (64 * 1024)
#define PEER_KEYS_MAX 4096
#define PEER_WR_SEND  1u
#define PEER_WR_RECV  2u

typedef struct PeerConn {
    struct rdma_cm_id *id;
    struct ibv_cq *cq;
    uint8_t *rxRing;
    struct ibv_mr *rxMr;
    RingRx rx;
    RingTx tx;
    uint64_t peerAddr;
    uint32_t peerRkey, peerSlots, peerSlotSize;
    uint8_t *txBuf;
    struct ibv_mr *txMr;
    uint32_t txCount, txSize, txBusy;
    int outstanding, qpUp, up, authed;
    int quitting; /* QUIT answered: close once the reply is out */
    redisReader *reader;
    char *out;
    size_t olen, opos, ocap;
    struct PeerConn *next;
} PeerConn;

static struct {
    struct rdma_event_channel *ec;
    struct rdma_cm_id *listenId;
    struct ibv_pd *pd;
    struct ibv_comp_channel *comp;
    uint32_t slots, slotSize;
    const char *password;
    PeerConn *conns;
    int nconns;
    char *keys[PEER_KEYS_MAX], *vals[PEER_KEYS_MAX];
    size_t keyLens[PEER_KEYS_MAX], valLens[PEER_KEYS_MAX];
    int nkeys;
} pr;

static volatile sig_atomic_t peerStop;

/* A "peer: " line on stderr. Can't fail. */
static void peerLog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void peerLog(const char *fmt, ...)
{
    va_list ap;

    fputs("peer: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ---- connections -------------------------------------------------------------------------- */

/* Move the QP to error, wait (bounded) for the sends, free everything. Can't fail. */
static void peerFree(PeerConn *c)
{
    struct ibv_qp_attr attr = {.qp_state = IBV_QPS_ERR};
    struct ibv_wc wcs[16];

    for (PeerConn **pp = &pr.conns; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            pr.nconns--;
            break;
        }
    }
    if (c->up)
        rdma_disconnect(c->id);
    if (c->qpUp) {
        int rc = ibv_modify_qp(c->id->qp, &attr, IBV_QP_STATE);
        if (rc)
            peerLog("ibv_modify_qp(ERR): %s", strerror(rc));
        for (int spins = 0; c->outstanding > 0 && spins < 20000; spins++) {
            int n = ibv_poll_cq(c->cq, 16, wcs);
            for (int i = 0; i < n; i++) {
                if ((wcs[i].wr_id & 7) == PEER_WR_SEND)
                    c->outstanding--;
            }
            if (n <= 0)
                usleep(100);
        }
        rdma_destroy_qp(c->id);
    }
    if (c->cq && ibv_destroy_cq(c->cq))
        peerLog("ibv_destroy_cq failed");
    if (c->rxMr)
        ibv_dereg_mr(c->rxMr);
    if (c->txMr)
        ibv_dereg_mr(c->txMr);
    free(c->rxRing);
    free(c->txBuf);
    if (c->reader)
        redisReaderFree(c->reader);
    free(c->out);
    rdma_destroy_id(c->id);
    free(c);
}

/* Post one receive WR (no buffer: ring writes carry their data). Returns 0 or -1. */
static int peerPostRecv(PeerConn *c)
{
    struct ibv_recv_wr wr = {.wr_id = PEER_WR_RECV}, *bad;
    int rc = ibv_post_recv(c->id->qp, &wr, &bad);

    if (rc)
        peerLog("ibv_post_recv: %s", strerror(rc));
    return rc ? -1 : 0;
}

/* Post one ring message. Returns 1 posted, 0 no resources, -1 error. */
static int peerPostMsg(PeerConn *c, const char *p, uint32_t len)
{
    int buf = __builtin_ffs((int)~c->txBusy) - 1;

    if (buf < 0 || (uint32_t)buf >= c->txCount)
        return 0;
    int slot = ringTxTake(&c->tx, len == 0);
    if (slot < 0)
        return 0;
    uint8_t *f = c->txBuf + (size_t)buf * c->txSize;
    RespRdmaHdr h = {.credits = htole16((uint16_t)ringRxTakeCredits(&c->rx, 0xFFFF))};
    memcpy(f, &h, sizeof(h));
    memcpy(f + sizeof(h), p, len);
    struct ibv_sge sge = {
        .addr = (uintptr_t)f, .length = (uint32_t)sizeof(h) + len, .lkey = c->txMr->lkey};
    struct ibv_send_wr wr = {0}, *bad;
    wr.wr_id = ((uint64_t)buf << 3) | PEER_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(ringImmEncode((uint32_t)slot, sge.length));
    wr.wr.rdma.remote_addr = c->peerAddr + (uint64_t)slot * c->peerSlotSize;
    wr.wr.rdma.rkey = c->peerRkey;
    int rc = ibv_post_send(c->id->qp, &wr, &bad);
    if (rc) {
        peerLog("ibv_post_send: %s", strerror(rc));
        return -1;
    }
    c->txBusy |= 1u << buf;
    c->outstanding++;
    return 1;
}

/* Send queued replies, then a credit message if one is owed. Returns 0 or -1. */
static int peerPump(PeerConn *c)
{
    uint32_t maxPay = c->txSize - (uint32_t)sizeof(RespRdmaHdr);

    while (c->opos < c->olen) {
        uint32_t n = (uint32_t)(c->olen - c->opos < maxPay ? c->olen - c->opos : maxPay);
        int rc = peerPostMsg(c, c->out + c->opos, n);
        if (rc < 0)
            return -1;
        if (rc == 0)
            break;
        c->opos += n;
    }
    if (c->opos == c->olen)
        c->opos = c->olen = 0;
    if (c->olen == 0 && ringRxWantsCreditMsg(&c->rx) && peerPostMsg(c, NULL, 0) < 0)
        return -1;
    return 0;
}

/* ---- replies and commands ------------------------------------------------------------------- */

/* Queue reply bytes; exits when out of memory (a test server). */
static void outAdd(PeerConn *c, const char *p, size_t len)
{
    if (c->olen + len > c->ocap) {
        size_t cap = c->ocap ? c->ocap : 4096;
        while (cap < c->olen + len)
            cap *= 2;
        c->out = realloc(c->out, cap);
        if (c->out == NULL) {
            peerLog("out of memory");
            exit(2);
        }
        c->ocap = cap;
    }
    memcpy(c->out + c->olen, p, len);
    c->olen += len;
}

/* Queue a short formatted reply (up to 511 bytes). */
static void outFmt(PeerConn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void outFmt(PeerConn *c, const char *fmt, ...)
{
    char buf[512];
    va_list ap;

    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    outAdd(c, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* Queue a bulk string reply. */
static void outBulk(PeerConn *c, const char *p, size_t len)
{
    outFmt(c, "$%zu\r\n", len);
    outAdd(c, p, len);
    outAdd(c, "\r\n", 2);
}

/* The index of key k in the table, or -1. */
static int keyFind(const char *k, size_t len)
{
    for (int i = 0; i < pr.nkeys; i++) {
        if (pr.keyLens[i] == len && memcmp(pr.keys[i], k, len) == 0)
            return i;
    }
    return -1;
}

/* Set k to v (NUL-terminated copy); a full table ignores new keys. */
static void keySet(const char *k, size_t kl, const char *v, size_t vl)
{
    int i = keyFind(k, kl);

    if (i < 0) {
        if (pr.nkeys == PEER_KEYS_MAX)
            return;
        i = pr.nkeys++;
        pr.keys[i] = malloc(kl + 1);
        memcpy(pr.keys[i], k, kl);
        pr.keyLens[i] = kl;
    } else {
        free(pr.vals[i]);
    }
    pr.vals[i] = malloc(vl + 1);
    memcpy(pr.vals[i], v, vl);
    pr.vals[i][vl] = '\0'; /* INCR parses it */
    pr.valLens[i] = vl;
}

/* Whether argument a is the word s (case-insensitive). */
static int argIs(const redisReply *a, const char *s)
{
    return a->len == strlen(s) && strncasecmp(a->str, s, a->len) == 0;
}

/* Execute one request (an array of bulk strings) and queue its reply.
 * Returns 0, or -1 to close the connection (QUIT). */
static int peerExec(PeerConn *c, const redisReply *r)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements == 0) {
        outFmt(c, "-ERR Protocol error: expected an array of bulk strings\r\n");
        return 0;
    }
    for (size_t i = 0; i < r->elements; i++) {
        if (r->element[i]->type != REDIS_REPLY_STRING) {
            outFmt(c, "-ERR Protocol error: expected bulk strings\r\n");
            return 0;
        }
    }
    const redisReply *const *a = (const redisReply *const *)r->element;
    size_t n = r->elements;

    if (argIs(a[0], "AUTH")) {
        if (pr.password == NULL)
            outFmt(c, "-ERR AUTH <password> called without any password configured\r\n");
        else if (n == 2 && a[1]->len == strlen(pr.password) &&
                 memcmp(a[1]->str, pr.password, a[1]->len) == 0) {
            c->authed = 1;
            outFmt(c, "+OK\r\n");
        } else
            outFmt(c, "-WRONGPASS invalid username-password pair or user is disabled.\r\n");
        return 0;
    }
    if (argIs(a[0], "QUIT")) {
        outFmt(c, "+OK\r\n");
        return -1;
    }
    if (pr.password && !c->authed) {
        outFmt(c, "-NOAUTH Authentication required.\r\n");
        return 0;
    }
    if (argIs(a[0], "PING")) {
        if (n > 1)
            outBulk(c, a[1]->str, a[1]->len);
        else
            outFmt(c, "+PONG\r\n");
    } else if (argIs(a[0], "ECHO") && n == 2) {
        outBulk(c, a[1]->str, a[1]->len);
    } else if (argIs(a[0], "SET") && n >= 3) {
        keySet(a[1]->str, a[1]->len, a[2]->str, a[2]->len);
        outFmt(c, "+OK\r\n");
    } else if (argIs(a[0], "GET") && n == 2) {
        int i = keyFind(a[1]->str, a[1]->len);
        if (i < 0)
            outFmt(c, "$-1\r\n");
        else
            outBulk(c, pr.vals[i], pr.valLens[i]);
    } else if (argIs(a[0], "DEL") && n >= 2) {
        int i = keyFind(a[1]->str, a[1]->len);
        if (i >= 0) {
            free(pr.keys[i]);
            free(pr.vals[i]);
            pr.nkeys--;
            pr.keys[i] = pr.keys[pr.nkeys], pr.keyLens[i] = pr.keyLens[pr.nkeys];
            pr.vals[i] = pr.vals[pr.nkeys], pr.valLens[i] = pr.valLens[pr.nkeys];
        }
        outFmt(c, ":%d\r\n", i >= 0);
    } else if (argIs(a[0], "INCR") && n == 2) {
        int i = keyFind(a[1]->str, a[1]->len);
        long long v = 0;
        char buf[32];
        if (i >= 0)
            v = strtoll(pr.vals[i], NULL, 10);
        v++;
        int l = snprintf(buf, sizeof(buf), "%lld", v);
        keySet(a[1]->str, a[1]->len, buf, (size_t)l);
        outFmt(c, ":%lld\r\n", v);
    } else if (argIs(a[0], "CONFIG") && n == 3) {
        if (argIs(a[2], "save") || argIs(a[2], "appendonly") || argIs(a[2], "maxmemory")) {
            outFmt(c, "*2\r\n");
            outBulk(c, a[2]->str, a[2]->len);
            outBulk(c, "0", 1);
        } else {
            outFmt(c, "*0\r\n");
        }
    } else if (argIs(a[0], "XREAD")) {
        outFmt(c, "*-1\r\n");
    } else if (argIs(a[0], "COMMAND") && n == 3) {
        outFmt(c, "*1\r\n*3\r\n");
        outBulk(c, a[2]->str, a[2]->len);
        outFmt(c, ":-1\r\n*1\r\n+fast\r\n");
    } else if (argIs(a[0], "BLOB") && n == 2) {
        size_t len = strtoul(a[1]->str, NULL, 10);
        outFmt(c, "$%zu\r\n", len);
        for (size_t i = 0; i < len; i++) {
            char ch = (char)('a' + i % 23);
            outAdd(c, &ch, 1);
        }
        outAdd(c, "\r\n", 2);
    } else if (argIs(a[0], "TYPES")) {
        outFmt(c, "*8\r\n+status\r\n-ERR an error\r\n:-42\r\n$5\r\nbu\r\nk\r\n$-1\r\n*0\r\n"
                  "*-1\r\n*2\r\n*1\r\n:1\r\n$0\r\n\r\n");
    } else if (argIs(a[0], "NILARRAY")) {
        outFmt(c, "*-1\r\n");
    } else if (argIs(a[0], "DBSIZE")) {
        outFmt(c, ":%d\r\n", pr.nkeys);
    } else {
        outFmt(c, "-ERR unknown command '%.*s'\r\n", (int)a[0]->len, a[0]->str);
    }
    return 0;
}

/* ---- completions ------------------------------------------------------------------------------
 */

/* A ring message arrived. Returns 0, or -1 to close the connection. */
static int peerOnRecv(PeerConn *c, uint32_t imm)
{
    uint32_t slot, len;
    RespRdmaHdr h;
    void *req;

    ringImmDecode(imm, &slot, &len);
    if (ringRxConsume(&c->rx, slot) == -1) {
        peerLog("protocol: message in slot %u, expected %u", slot, c->rx.expect);
        return -1;
    }
    if (len < sizeof(h) || len > pr.slotSize) {
        peerLog("protocol: length %u", len);
        return -1;
    }
    const uint8_t *p = c->rxRing + (size_t)slot * pr.slotSize;
    memcpy(&h, p, sizeof(h));
    if (ringTxGrant(&c->tx, le16toh(h.credits)) == -1) {
        peerLog("protocol: %u credits, more than outstanding", le16toh(h.credits));
        return -1;
    }
    if (c->quitting)
        return peerPostRecv(c);
    if (len > sizeof(h) &&
        redisReaderFeed(c->reader, (const char *)p + sizeof(h), len - sizeof(h)) != REDIS_OK)
        return -1;
    if (peerPostRecv(c) == -1)
        return -1;
    for (;;) {
        if (redisReaderGetReply(c->reader, &req) != REDIS_OK) {
            peerLog("bad request stream: %s", c->reader->errstr);
            return -1;
        }
        if (req == NULL)
            break;
        int rc = peerExec(c, req);
        freeReplyObject(req);
        if (rc == -1) {
            c->quitting = 1; /* peerPoll closes after the +OK went out */
            return 0;
        }
    }
    return 0;
}

/* Poll a connection's CQ dry. Returns 0, or -1 when it must close. */
static int peerPoll(PeerConn *c)
{
    struct ibv_wc wcs[32];
    int n;

    while ((n = ibv_poll_cq(c->cq, 32, wcs)) > 0) {
        for (int i = 0; i < n; i++) {
            const struct ibv_wc *wc = &wcs[i];
            if ((wc->wr_id & 7) == PEER_WR_SEND) {
                c->txBusy &= ~(1u << (wc->wr_id >> 3));
                c->outstanding--;
            }
            if (wc->status != IBV_WC_SUCCESS) {
                if (wc->status != IBV_WC_WR_FLUSH_ERR)
                    peerLog("completion failed: %s", ibv_wc_status_str(wc->status));
                return -1;
            }
            if ((wc->wr_id & 7) == PEER_WR_RECV && peerOnRecv(c, ntohl(wc->imm_data)) == -1)
                return -1;
        }
    }
    if (n < 0 || peerPump(c) == -1)
        return -1;
    /* Disconnect only once QUIT's reply was delivered (its send completed). */
    return c->quitting && c->olen == 0 && c->outstanding == 0 ? -1 : 0;
}

/* The completion channel is readable: per event ack, re-arm, poll dry;
 * a connection that must close is freed here. */
static void peerOnComp(void)
{
    struct ibv_cq *cq;
    void *ctx;

    while (ibv_get_cq_event(pr.comp, &cq, &ctx) == 0) {
        PeerConn *c = ctx;
        ibv_ack_cq_events(cq, 1);
        int rc = ibv_req_notify_cq(cq, 0);
        if (rc)
            peerLog("ibv_req_notify_cq: %s", strerror(rc));
        if (rc || peerPoll(c) == -1)
            peerFree(c);
    }
}

/* ---- connection manager ---------------------------------------------------------------------- */

/* A client connects: check its ring, build ours and its QP, accept with our
 * ring in the private data; anything wrong rejects it. */
static void peerOnRequest(struct rdma_cm_id *id, const RespRdmaPriv *cp, size_t cpLen)
{
    PeerConn *c = calloc(1, sizeof(*c));
    struct ibv_qp_init_attr qa = {0};
    struct rdma_conn_param param = {0};
    RespRdmaPriv mine;

    if (c == NULL || cpLen < sizeof(*cp) || le32toh(cp->magic) != RESP_RDMA_MAGIC ||
        le16toh(cp->version) != RESP_RDMA_VERSION || le16toh(cp->slots) < 4 ||
        le32toh(cp->slotSize) < 64 || le32toh(cp->slotSize) > RING_MAX_LEN) {
        peerLog("refusing a connection: bad private data (%zu bytes)", cpLen);
        rdma_reject(id, NULL, 0);
        rdma_destroy_id(id);
        free(c);
        return;
    }
    c->id = id;
    id->context = c;
    c->next = pr.conns;
    pr.conns = c;
    pr.nconns++;
    c->peerSlots = le16toh(cp->slots);
    c->peerSlotSize = le32toh(cp->slotSize);
    c->peerRkey = le32toh(cp->rkey);
    c->peerAddr = le64toh(cp->addr);
    ringTxInit(&c->tx, c->peerSlots);
    ringRxInit(&c->rx, pr.slots);
    c->txCount = c->peerSlots < PEER_TX_MAX ? c->peerSlots : PEER_TX_MAX;
    c->txSize = c->peerSlotSize < PEER_TX_SIZE ? c->peerSlotSize : PEER_TX_SIZE;
    c->reader = redisReaderCreate();
    c->cq = ibv_create_cq(id->verbs, PEER_TX_MAX + (int)pr.slots + 4, c, pr.comp, 0);
    if (!c->cq || ibv_req_notify_cq(c->cq, 0)) {
        peerLog("ibv_create_cq/notify: %s", strerror(errno));
        goto out_reject;
    }
    qa.send_cq = qa.recv_cq = c->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = PEER_TX_MAX;
    qa.cap.max_recv_wr = pr.slots;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    if (rdma_create_qp(id, pr.pd, &qa)) {
        peerLog("rdma_create_qp: %s", strerror(errno));
        goto out_reject;
    }
    c->qpUp = 1;
    if (posix_memalign((void **)&c->rxRing, 4096, (size_t)pr.slots * pr.slotSize) ||
        posix_memalign((void **)&c->txBuf, 4096, (size_t)c->txCount * c->txSize))
        goto out_reject;
    c->rxMr = ibv_reg_mr(pr.pd, c->rxRing, (size_t)pr.slots * pr.slotSize,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    c->txMr = ibv_reg_mr(pr.pd, c->txBuf, (size_t)c->txCount * c->txSize, IBV_ACCESS_LOCAL_WRITE);
    if (!c->rxMr || !c->txMr) {
        peerLog("ibv_reg_mr: %s", strerror(errno));
        goto out_reject;
    }
    for (uint32_t i = 0; i < pr.slots; i++) {
        if (peerPostRecv(c) == -1)
            goto out_reject;
    }
    mine.magic = htole32(RESP_RDMA_MAGIC);
    mine.version = htole16(RESP_RDMA_VERSION);
    mine.slots = htole16((uint16_t)pr.slots);
    mine.slotSize = htole32(pr.slotSize);
    mine.rkey = htole32(c->rxMr->rkey);
    mine.addr = htole64((uint64_t)(uintptr_t)c->rxRing);
    param.private_data = &mine;
    param.private_data_len = sizeof(mine);
    param.retry_count = 7;
    param.rnr_retry_count = 7;
    if (rdma_accept(id, &param)) {
        peerLog("rdma_accept: %s", strerror(errno));
        goto out_reject;
    }
    return;

out_reject:
    rdma_reject(id, NULL, 0);
    peerFree(c);
}

/* Drain rdma_cm events: connect requests, established, disconnects. */
static void peerOnCm(void)
{
    struct rdma_cm_event *ev;

    while (rdma_get_cm_event(pr.ec, &ev) == 0) {
        struct rdma_cm_id *id = ev->id;
        enum rdma_cm_event_type type = ev->event;
        RespRdmaPriv cp = {0};
        size_t cpLen = ev->param.conn.private_data ? ev->param.conn.private_data_len : 0;

        if (cpLen)
            memcpy(&cp, ev->param.conn.private_data, cpLen < sizeof(cp) ? cpLen : sizeof(cp));
        rdma_ack_cm_event(ev);
        if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
            peerOnRequest(id, &cp, cpLen);
            continue;
        }
        PeerConn *c = id->context;
        if (c == NULL)
            continue;
        if (type == RDMA_CM_EVENT_ESTABLISHED) {
            c->up = 1;
        } else if (type == RDMA_CM_EVENT_DISCONNECTED || type == RDMA_CM_EVENT_REJECTED ||
                   type == RDMA_CM_EVENT_CONNECT_ERROR || type == RDMA_CM_EVENT_UNREACHABLE) {
            c->up = type != RDMA_CM_EVENT_DISCONNECTED ? 0 : 1;
            peerFree(c);
        }
    }
}

/* ---- main
 * ----------------------------------------------------------------------------------------- */

/* SIGTERM/SIGINT: leave the loop, free every connection, exit 0. */
static void peerOnSignal(int sig)
{
    peerStop = 1;
}

/* O_NONBLOCK on fd. Returns 0 or -1. */
static int peerSetNonBlocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl == -1 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

/* Parse the arguments, listen, serve until --seconds or a signal. Exit 0, 1 (setup), 2 (usage). */
int main(int argc, char **argv)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    int seconds = 600;

    if (argc < 3) {
        fprintf(stderr, "usage: peer ADDR PORT [--slots N] [--slot-size N] [--requirepass PW] "
                        "[--seconds S]\n");
        return 2;
    }
    pr.slots = RESP_RDMA_SLOTS;
    pr.slotSize = RESP_RDMA_SLOT_SIZE;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--slots"))
            pr.slots = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--slot-size"))
            pr.slotSize = (uint32_t)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--requirepass"))
            pr.password = argv[i + 1];
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atoi(argv[i + 1]);
    }
    if (pr.slots < 4 || pr.slots > 4096 || pr.slotSize < 64 || pr.slotSize > RING_MAX_LEN) {
        fprintf(stderr, "peer: ring out of range\n");
        return 2;
    }
    if (inet_pton(AF_INET, argv[1], &sa.sin_addr) != 1) {
        fprintf(stderr, "peer: bad address %s\n", argv[1]);
        return 2;
    }
    sa.sin_port = htons((uint16_t)atoi(argv[2]));
    signal(SIGTERM, peerOnSignal);
    signal(SIGINT, peerOnSignal);

    pr.ec = rdma_create_event_channel();
    if (!pr.ec || rdma_create_id(pr.ec, &pr.listenId, NULL, RDMA_PS_TCP) ||
        rdma_bind_addr(pr.listenId, (struct sockaddr *)&sa) || !pr.listenId->verbs) {
        fprintf(stderr, "peer: cannot bind %s:%s: %s\n", argv[1], argv[2], strerror(errno));
        return 1;
    }
    pr.pd = ibv_alloc_pd(pr.listenId->verbs);
    pr.comp = ibv_create_comp_channel(pr.listenId->verbs);
    if (!pr.pd || !pr.comp || peerSetNonBlocking(pr.ec->fd) || peerSetNonBlocking(pr.comp->fd) ||
        rdma_listen(pr.listenId, 256)) {
        fprintf(stderr, "peer: setup failed: %s\n", strerror(errno));
        return 1;
    }
    int ep = epoll_create1(0);
    struct epoll_event e1 = {.events = EPOLLIN, .data.fd = pr.ec->fd};
    struct epoll_event e2 = {.events = EPOLLIN, .data.fd = pr.comp->fd};
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, pr.ec->fd, &e1) ||
        epoll_ctl(ep, EPOLL_CTL_ADD, pr.comp->fd, &e2)) {
        fprintf(stderr, "peer: epoll: %s\n", strerror(errno));
        return 1;
    }
    printf("peer: ready on %s:%s (%u slots x %u bytes)\n", argv[1], argv[2], pr.slots, pr.slotSize);
    fflush(stdout);

    time_t end = time(NULL) + seconds;
    while (!peerStop && time(NULL) < end) {
        struct epoll_event evs[4];
        int n = epoll_wait(ep, evs, 4, 200);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.fd == pr.ec->fd)
                peerOnCm();
            else
                peerOnComp();
        }
    }
    while (pr.conns)
        peerFree(pr.conns);
    rdma_destroy_id(pr.listenId);
    ibv_destroy_comp_channel(pr.comp);
    ibv_dealloc_pd(pr.pd);
    rdma_destroy_event_channel(pr.ec);
    printf("peer: stopped\n");
    return 0;
}
