/*
 * rdma_hostile.c - a misbehaving node on the RDMA transfer transport, for the
 * hardening tests of tests/rdma/test_6_hostile.py. It speaks the transport's
 * ring protocol (module/transfer/rdma.c: private data naming a handshake
 * ring, WRITE_WITH_IMM into ring slots with credits, RING after the
 * handshake) and the wire frames (module/transfer/wire.h) with the project's
 * own encoder and proof, and then breaks the rules a test names:
 *
 *   rdma_hostile ADDR PORT --mode MODE --secret S --name N [options]
 *
 *   rndv-error    listen on ADDR:PORT as node N: answer every FETCH with an
 *                 RNDV over --size bytes of 0xEE, then at once an ERROR for
 *                 the same request (the requester must not free the object
 *                 its READs are landing in)
 *   silent        connect --count times to the node at ADDR:PORT and send
 *                 nothing; report how many the node accepted, rejected and
 *                 later disconnected (within --seconds)
 *   ping-credit   connect as N, authenticate (dialling --dial), announce a
 *                 full ring, then send PINGs while returning at most
 *                 --credits credits per message the node writes (0: none at
 *                 all); report whether and when the node closed the session
 *   rndv-flood    connect as N, authenticate, and send --count FETCHes of
 *                 object --id without ever sending DONE; report how many
 *                 RNDV and how many BUSY errors came back
 *
 * Output: lines "hostile: key=value ..." on stdout, the last one a summary
 * the test parses. Bounded by --seconds (default 60). A test tool: one
 * thread, a busy-polled CQ per connection, no completion channel.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "rdma/ring.h"
#include "rdma/verbs.h"
#include "transfer/wire.h"

/* What module/transfer/rdma.c puts in its private data and immediates. */
#define H_PRIV_MAGIC   0x4F424A52u
#define H_PRIV_VERSION 3
#define H_FRAME_MAX    (OBJ_WIRE_HDR_LEN + OBJ_WIRE_MAX_BODY)
#define H_HS_SLOTS     8
#define H_FULL_SLOTS   4
#define H_IMM_FULL     (1u << 31)
#define H_RECV_WR      32
#define H_TX_BUFS      32
#define H_MAX_CONNS    64

typedef struct __attribute__((packed)) HPriv {
    uint32_t magic;
    uint16_t version, slots;
    uint32_t slotSize, rkey;
    uint64_t addr;
} HPriv;

typedef struct HConn {
    struct rdma_cm_id *id;
    struct ibv_cq *cq;
    uint8_t *rx; /* our ring the node writes: handshake ring, then full */
    struct ibv_mr *rxMr;
    uint8_t *full; /* our full ring, once announced */
    struct ibv_mr *fullMr;
    int rxFull;
    int ringSent; /* our RING is out: handshake-ring credits are no longer returned */
    uint8_t *tx;  /* H_TX_BUFS frame buffers */
    struct ibv_mr *txMr;
    int txNext;
    RingTx t;
    RingRx r;
    uint64_t peerAddr;
    uint32_t peerRkey, peerSlotSize;
    int peerFull;
    int established, closed, authed;
    uint8_t nonce[OBJ_WIRE_NONCE], peerNonce[OBJ_WIRE_NONCE];
    char peerName[OBJ_WIRE_NAME_MAX + 1];
    uint16_t peerFeatures;
    uint32_t creditAllowance; /* ping-credit: credits we may still return */
} HConn;

static struct {
    const char *mode, *secret, *name, *dial, *id;
    uint64_t size;
    int count, seconds;
    uint32_t creditsPerMsg;
    struct rdma_event_channel *ec;
    struct ibv_pd *pd;
    uint8_t *obj; /* rndv-error: the bytes an RNDV points at */
    struct ibv_mr *objMr;
    HConn conns[H_MAX_CONNS];
    int nConns;
    /* counters for the summary */
    int accepted, rejected, disconnected, rndvs, busy, errors, pongs, pings;
} h;

static double nowSec(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
    printf("hostile: fatal=%s errno=%s\n", what, strerror(errno));
    fflush(stdout);
    exit(2);
}

static int pdFor(struct rdma_cm_id *id)
{
    if (!h.pd) {
        h.pd = ibv_alloc_pd(id->verbs);
        if (!h.pd)
            return -1;
        if (h.size) {
            if (posix_memalign((void **)&h.obj, 4096, h.size))
                return -1;
            memset(h.obj, 0xEE, h.size);
            h.objMr =
                ibv_reg_mr(h.pd, h.obj, h.size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
            if (!h.objMr)
                return -1;
        }
    }
    return 0;
}

static struct ibv_mr *regRing(uint8_t **buf, size_t len)
{
    if (posix_memalign((void **)buf, 4096, len))
        return NULL;
    memset(*buf, 0, len);
    return ibv_reg_mr(h.pd, *buf, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
}

/* QP, CQ, handshake ring, send buffers and receives of c. 0 or -1. */
static int setup(HConn *c)
{
    char err[160];

    if (pdFor(c->id) == -1)
        return -1;
    if (verbsCreateRcQp(c->id, h.pd, NULL, c, 128, H_TX_BUFS + 8, H_RECV_WR, 2, &c->cq, err,
                        sizeof(err)) == -1) {
        printf("hostile: qp-error=%s\n", err);
        return -1;
    }
    c->rxMr = regRing(&c->rx, (size_t)H_HS_SLOTS * H_FRAME_MAX);
    if (!c->rxMr || posix_memalign((void **)&c->tx, 4096, (size_t)H_TX_BUFS * H_FRAME_MAX))
        return -1;
    c->txMr = ibv_reg_mr(h.pd, c->tx, (size_t)H_TX_BUFS * H_FRAME_MAX, IBV_ACCESS_LOCAL_WRITE);
    if (!c->txMr)
        return -1;
    ringRxInit(&c->r, H_HS_SLOTS);
    for (int i = 0; i < H_RECV_WR; i++) {
        struct ibv_recv_wr wr = {.wr_id = 1}, *bad;
        if (ibv_post_recv(c->id->qp, &wr, &bad))
            return -1;
    }
    if (getrandom(c->nonce, sizeof(c->nonce), 0) != sizeof(c->nonce))
        return -1;
    return 0;
}

static void fillPriv(HConn *c, HPriv *p, struct rdma_conn_param *cp)
{
    p->magic = htole32(H_PRIV_MAGIC);
    p->version = htole16(H_PRIV_VERSION);
    p->slots = htole16(H_HS_SLOTS);
    p->slotSize = htole32(H_FRAME_MAX);
    p->rkey = htole32(c->rxMr->rkey);
    p->addr = htole64((uint64_t)(uintptr_t)c->rx);
    memset(cp, 0, sizeof(*cp));
    cp->private_data = p;
    cp->private_data_len = sizeof(*p);
    cp->initiator_depth = cp->responder_resources = 1;
    cp->retry_count = 7;
    cp->rnr_retry_count = 7;
}

static int parsePriv(HConn *c, const uint8_t *data, size_t len)
{
    HPriv p;
    if (len < sizeof(p))
        return -1;
    memcpy(&p, data, sizeof(p));
    if (le32toh(p.magic) != H_PRIV_MAGIC)
        return -1;
    c->peerAddr = le64toh(p.addr);
    c->peerRkey = le32toh(p.rkey);
    c->peerSlotSize = le32toh(p.slotSize);
    ringTxInit(&c->t, le16toh(p.slots));
    return 0;
}

/* Write m into the node's next slot. Returns 0, 1 without credits, -1 on error. */
static int sendMsg(HConn *c, WireMsg *m)
{
    int slot = ringTxTake(&c->t, m->h.type == WIRE_CREDIT);
    if (slot < 0)
        return 1;
    uint32_t give = c->ringSent && !c->rxFull ? 0 : ringRxTakeCredits(&c->r, c->creditAllowance);
    if (c->creditAllowance != UINT32_MAX)
        c->creditAllowance -= give;
    m->h.credits = (uint16_t)give;
    uint8_t *buf = c->tx + (size_t)(c->txNext++ % H_TX_BUFS) * H_FRAME_MAX;
    int len = wireEncode(m, buf, H_FRAME_MAX);
    if (len < 0)
        return -1;
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = (uint32_t)len, .lkey = c->txMr->lkey};
    struct ibv_send_wr wr = {0}, *bad;
    wr.wr_id = 2;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data =
        htonl(ringImmEncode((uint32_t)slot, (uint32_t)len) | (c->peerFull ? H_IMM_FULL : 0));
    wr.wr.rdma.remote_addr = c->peerAddr + (uint64_t)slot * c->peerSlotSize;
    wr.wr.rdma.rkey = c->peerRkey;
    return ibv_post_send(c->id->qp, &wr, &bad) ? -1 : 0;
}

static void sendRing(HConn *c)
{
    size_t len = (size_t)H_FULL_SLOTS * 65536;
    c->fullMr = regRing(&c->full, len);
    if (!c->fullMr)
        die("full ring");
    WireMsg m = {.h = {.type = WIRE_RING}};
    m.u.ring.addr = (uint64_t)(uintptr_t)c->full;
    m.u.ring.rkey = c->fullMr->rkey;
    m.u.ring.slots = H_FULL_SLOTS;
    m.u.ring.slotSize = 65536;
    if (sendMsg(c, &m) != 0)
        die("send RING");
    c->ringSent = 1;
}

static void sendHello(HConn *c, int acceptor)
{
    WireMsg m = {.h = {.type = WIRE_HELLO}};
    m.u.hello.features = OBJ_FEAT_TCP | OBJ_FEAT_RDMA;
    memcpy(m.u.hello.nonce, c->nonce, OBJ_WIRE_NONCE);
    if (acceptor) {
        WireTranscript t = {.connector = c->peerName,
                            .acceptor = h.name,
                            .dialled = h.name,
                            .connectorFeatures = c->peerFeatures,
                            .acceptorFeatures = OBJ_FEAT_TCP | OBJ_FEAT_RDMA,
                            .nonceConnector = c->peerNonce,
                            .nonceAcceptor = c->nonce};
        wireProof(h.secret, strlen(h.secret), WIRE_ROLE_ACCEPTOR, &t, m.u.hello.proof);
    }
    m.u.hello.name = h.name;
    m.u.hello.nameLen = (uint16_t)strlen(h.name);
    if (sendMsg(c, &m) != 0)
        die("send HELLO");
}

/* A frame from the node. */
static void onFrame(HConn *c, WireMsg *m)
{
    if (m->h.type == WIRE_RING) {
        c->peerAddr = m->u.ring.addr;
        c->peerRkey = m->u.ring.rkey;
        c->peerSlotSize = m->u.ring.slotSize;
        ringTxInit(&c->t, m->u.ring.slots);
        c->peerFull = 1;
        return;
    }
    if (m->h.type == WIRE_HELLO && !strcmp(h.mode, "rndv-error")) {
        snprintf(c->peerName, sizeof(c->peerName), "%.*s", (int)m->u.hello.nameLen,
                 m->u.hello.name);
        memcpy(c->peerNonce, m->u.hello.nonce, OBJ_WIRE_NONCE);
        c->peerFeatures = m->u.hello.features;
        sendHello(c, 1);
        return;
    }
    if (m->h.type == WIRE_AUTH) { /* the connector proved itself: our full ring */
        c->authed = 1;
        sendRing(c);
        return;
    }
    if (m->h.type == WIRE_HELLO) { /* we connected: answer with AUTH, then our RING */
        memcpy(c->peerNonce, m->u.hello.nonce, OBJ_WIRE_NONCE);
        WireTranscript t = {.connector = h.name,
                            .acceptor = h.dial,
                            .dialled = h.dial,
                            .connectorFeatures = OBJ_FEAT_TCP | OBJ_FEAT_RDMA,
                            .acceptorFeatures = m->u.hello.features,
                            .nonceConnector = c->nonce,
                            .nonceAcceptor = c->peerNonce};
        WireMsg a = {.h = {.type = WIRE_AUTH}};
        wireProof(h.secret, strlen(h.secret), WIRE_ROLE_CONNECTOR, &t, a.u.auth.proof);
        if (sendMsg(c, &a) != 0)
            die("send AUTH");
        sendRing(c);
        c->authed = 1;
        printf("hostile: authenticated=1\n");
        return;
    }
    if (m->h.type == WIRE_FETCH) {
        WireMsg r = {.h = {.type = WIRE_RNDV, .reqId = m->h.reqId}};
        r.u.data.size = h.size;
        r.u.data.addr = (uint64_t)(uintptr_t)h.obj;
        r.u.data.rkey = h.objMr->rkey;
        WireMsg e = {.h = {.type = WIRE_ERROR, .reqId = m->h.reqId}};
        e.u.error.code = WIRE_ERR_NOTFOUND;
        e.u.error.text = "changed my mind";
        e.u.error.textLen = (uint16_t)strlen(e.u.error.text);
        if (sendMsg(c, &r) != 0 || sendMsg(c, &e) != 0)
            die("send RNDV+ERROR");
        h.rndvs++;
        printf("hostile: rndv-error=%llu\n", (unsigned long long)m->h.reqId);
        fflush(stdout);
        return;
    }
    if (m->h.type == WIRE_RNDV)
        h.rndvs++;
    else if (m->h.type == WIRE_ERROR && m->u.error.code == WIRE_ERR_BUSY)
        h.busy++;
    else if (m->h.type == WIRE_ERROR)
        h.errors++;
    else if (m->h.type == WIRE_PONG)
        h.pongs++;
}

static void onRecv(HConn *c, uint32_t imm)
{
    uint32_t slot, len;
    int full = (imm & H_IMM_FULL) != 0;
    if (full && !c->rxFull) {
        c->rx = c->full;
        c->rxFull = 1;
        ringRxInit(&c->r, H_FULL_SLOTS);
    }
    ringImmDecode(imm & ~H_IMM_FULL, &slot, &len);
    if (ringRxConsume(&c->r, slot) == -1)
        die("node wrote an unexpected slot");
    size_t slotSize = c->rxFull ? 65536 : H_FRAME_MAX;
    const uint8_t *p = c->rx + (size_t)slot * slotSize;
    WireMsg m;
    const char *why;
    if (wireDecodeHdr(p, &m.h, &why) == -1 || wireDecodeBody(p + OBJ_WIRE_HDR_LEN, &m, &why) == -1)
        die(why);
    ringTxGrant(&c->t, m.h.credits);
    struct ibv_recv_wr wr = {.wr_id = 1}, *bad;
    if (ibv_post_recv(c->id->qp, &wr, &bad))
        die("ibv_post_recv");
    if (!strcmp(h.mode, "ping-credit") && c->authed)
        c->creditAllowance = h.creditsPerMsg; /* one round: this many credits back */
    onFrame(c, &m);
}

static void pollConn(HConn *c)
{
    struct ibv_wc wc[16];
    int n;
    while (!c->closed && c->cq && (n = ibv_poll_cq(c->cq, 16, wc)) > 0) {
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS) {
                if (!c->closed)
                    printf("hostile: wc-error=%s\n", ibv_wc_status_str(wc[i].status));
                c->closed = 1;
                break;
            }
            if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM)
                onRecv(c, ntohl(wc[i].imm_data));
        }
    }
}

static HConn *connOf(struct rdma_cm_id *id)
{
    for (int i = 0; i < h.nConns; i++)
        if (h.conns[i].id == id)
            return &h.conns[i];
    return NULL;
}

static void onCm(void)
{
    VerbsCmEvent ev;
    while (verbsNextCmEvent(h.ec, &ev) == 0) {
        HConn *c = connOf(ev.id);
        switch (ev.type) {
            case RDMA_CM_EVENT_CONNECT_REQUEST: {
                if (h.nConns == H_MAX_CONNS)
                    die("too many connections");
                c = &h.conns[h.nConns++];
                memset(c, 0, sizeof(*c));
                c->id = ev.id;
                c->creditAllowance = UINT32_MAX;
                HPriv mine;
                struct rdma_conn_param cp;
                if (parsePriv(c, ev.priv, ev.privLen) == -1 || setup(c) == -1)
                    die("accept setup");
                fillPriv(c, &mine, &cp);
                if (rdma_accept(ev.id, &cp))
                    die("rdma_accept");
                break;
            }
            case RDMA_CM_EVENT_ADDR_RESOLVED:
                if (rdma_resolve_route(ev.id, 2000))
                    die("rdma_resolve_route");
                break;
            case RDMA_CM_EVENT_ROUTE_RESOLVED: {
                HPriv mine;
                struct rdma_conn_param cp;
                if (setup(c) == -1)
                    die("connect setup");
                fillPriv(c, &mine, &cp);
                if (rdma_connect(ev.id, &cp))
                    die("rdma_connect");
                break;
            }
            case RDMA_CM_EVENT_ESTABLISHED:
                if (c && !c->established) {
                    c->established = 1;
                    h.accepted++;
                    if (ev.privLen)
                        parsePriv(c, ev.priv, ev.privLen);
                    if (strcmp(h.mode, "silent") && strcmp(h.mode, "rndv-error"))
                        sendHello(c, 0);
                }
                break;
            case RDMA_CM_EVENT_REJECTED:
            case RDMA_CM_EVENT_UNREACHABLE:
            case RDMA_CM_EVENT_CONNECT_ERROR:
                h.rejected++;
                if (c)
                    c->closed = 1;
                break;
            case RDMA_CM_EVENT_DISCONNECTED:
                if (c && !c->closed) {
                    c->closed = 1;
                    h.disconnected++;
                    printf("hostile: disconnected-at=%.1f\n", nowSec());
                }
                break;
            default:
                break;
        }
        fflush(stdout);
    }
}

static void dial(const char *addr, int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, addr, &sa.sin_addr);
    HConn *c = &h.conns[h.nConns++];
    memset(c, 0, sizeof(*c));
    c->creditAllowance = UINT32_MAX;
    if (rdma_create_id(h.ec, &c->id, NULL, RDMA_PS_TCP))
        die("rdma_create_id");
    struct sockaddr_in src = sa;
    src.sin_port = 0;
    if (rdma_resolve_addr(c->id, (struct sockaddr *)&src, (struct sockaddr *)&sa, 2000))
        die("rdma_resolve_addr");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"mode", 1, 0, 'm'},    {"secret", 1, 0, 's'}, {"name", 1, 0, 'n'},  {"dial", 1, 0, 'd'},
        {"id", 1, 0, 'i'},      {"size", 1, 0, 'z'},   {"count", 1, 0, 'c'}, {"seconds", 1, 0, 't'},
        {"credits", 1, 0, 'r'}, {0, 0, 0, 0}};
    int o;

    h.mode = "silent";
    h.secret = "";
    h.name = "M";
    h.dial = "A";
    h.id = "x";
    h.count = 1;
    h.seconds = 60;
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
            case 'm':
                h.mode = optarg;
                break;
            case 's':
                h.secret = optarg;
                break;
            case 'n':
                h.name = optarg;
                break;
            case 'd':
                h.dial = optarg;
                break;
            case 'i':
                h.id = optarg;
                break;
            case 'z':
                h.size = strtoull(optarg, NULL, 10);
                break;
            case 'c':
                h.count = atoi(optarg);
                break;
            case 't':
                h.seconds = atoi(optarg);
                break;
            case 'r':
                h.creditsPerMsg = (uint32_t)atoi(optarg);
                break;
            default:
                return 2;
        }
    }
    if (optind + 2 != argc || h.count < 1 || h.count > H_MAX_CONNS) {
        fprintf(stderr, "usage: rdma_hostile ADDR PORT --mode MODE [options] (see the source)\n");
        return 2;
    }
    const char *addr = argv[optind];
    int port = atoi(argv[optind + 1]);
    h.ec = rdma_create_event_channel();
    if (!h.ec)
        die("rdma_create_event_channel");
    int fl = fcntl(h.ec->fd, F_GETFL);
    fcntl(h.ec->fd, F_SETFL, fl | O_NONBLOCK);
    int listening = !strcmp(h.mode, "rndv-error");
    if (listening) {
        struct rdma_cm_id *lid;
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        inet_pton(AF_INET, addr, &sa.sin_addr);
        if (rdma_create_id(h.ec, &lid, NULL, RDMA_PS_TCP) ||
            rdma_bind_addr(lid, (struct sockaddr *)&sa) || rdma_listen(lid, 8))
            die("listen");
        if (pdFor(lid) == -1)
            die("pd/object registration");
        printf("hostile: ready\n");
    } else {
        for (int i = 0; i < h.count; i++)
            dial(addr, port);
    }
    fflush(stdout);

    double end = nowSec() + h.seconds;
    int fetchesSent = 0;
    uint64_t reqId = 1;
    while (nowSec() < end) {
        struct pollfd pfd = {.fd = h.ec->fd, .events = POLLIN};
        poll(&pfd, 1, 1);
        onCm();
        for (int i = 0; i < h.nConns; i++) {
            HConn *c = &h.conns[i];
            pollConn(c);
            if (c->closed || !c->authed || !c->peerFull)
                continue;
            /* An honest reader returns what it owes even when it has nothing to say
             * (ping-credit is the one that does not). */
            if (strcmp(h.mode, "ping-credit") && !(c->ringSent && !c->rxFull) &&
                ringRxWantsCreditMsg(&c->r)) {
                WireMsg cr = {.h = {.type = WIRE_CREDIT}};
                sendMsg(c, &cr);
            }
            if (!strcmp(h.mode, "ping-credit")) {
                WireMsg p = {.h = {.type = WIRE_PING, .reqId = reqId++}};
                while (sendMsg(c, &p) == 0) {
                    h.pings++;
                    p.h.reqId = reqId++;
                }
            } else if (!strcmp(h.mode, "rndv-flood") && fetchesSent < 400) {
                WireMsg f = {.h = {.type = WIRE_FETCH, .reqId = reqId}};
                f.u.fetch.id = h.id;
                f.u.fetch.idLen = (uint16_t)strlen(h.id);
                while (fetchesSent < 400 && sendMsg(c, &f) == 0) {
                    fetchesSent++;
                    f.h.reqId = ++reqId;
                }
            }
        }
        if (!listening) {
            int open = 0;
            for (int i = 0; i < h.nConns; i++)
                open += !h.conns[i].closed;
            if (!open)
                break;
            static int floodReported;
            if (!strcmp(h.mode, "rndv-flood") && fetchesSent >= 400 && h.rndvs + h.busy >= 400 &&
                !floodReported) {
                /* answered: hold the pins until the test has looked, then --seconds ends it */
                printf("hostile: flood-done rndvs=%d busy=%d\n", h.rndvs, h.busy);
                fflush(stdout);
                floodReported = 1;
            }
        }
    }
    printf("hostile: summary accepted=%d rejected=%d disconnected=%d rndvs=%d busy=%d "
           "errors=%d pings=%d pongs=%d fetches=%d\n",
           h.accepted, h.rejected, h.disconnected, h.rndvs, h.busy, h.errors, h.pings, h.pongs,
           fetchesSent);
    fflush(stdout);
    return 0;
}
