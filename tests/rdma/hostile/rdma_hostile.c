/*
 * rdma_hostile.c - a misbehaving node on the RDMA transfer transport, for the
 * hardening tests of tests/rdma/test_4_hostile.py. It speaks what
 * module/transfer/rdma.c speaks: the RDMA stream of module/rdma/stream.h
 * (linked from the component library) carrying the wire frames of
 * module/transfer/wire.h, parsed with the project's framer, with the
 * project's own proof; then it breaks the rule a test names:
 *
 *   rdma_hostile ADDR PORT --mode MODE --secret S --name N [options]
 *
 *   rndv-error    listen on ADDR:PORT as node N: answer every FETCH with an
 *                 RNDV over --size bytes of 0xEE, then at once an ERROR for
 *                 the same request (the requester must not free the object
 *                 its READs are landing in)
 *   silent        connect --count times to the node at ADDR:PORT and send
 *                 nothing; report how many the node accepted, rejected and
 *                 later disconnected (within --seconds of the last one)
 *   no-read       connect as N, authenticate (dialling --dial), then never
 *                 consume another byte while sending PINGs (--count of them,
 *                 0: until the node closes); report whether and when the
 *                 node closed the session
 *   rndv-flood    connect as N, authenticate, and send 400 FETCHes of
 *                 object --id without ever sending DONE; report how many
 *                 RNDV and how many BUSY errors came back
 *   many-idle     connect --count times as nodes N-0, N-1, ..., authenticate
 *                 each (dialling --dial), then send nothing for --seconds
 *                 (our keepalives off) and report how many of them the
 *                 node kept alive meanwhile: the node's own keepalives come
 *                 only from its periodic pass over every connection
 *   scoped        misuse the read key of object --id: on one connection
 *                 READ inside the object (must work), say DONE, READ again;
 *                 on a second one READ past the object's end; on a third,
 *                 which never does the handshake, READ with the second
 *                 one's live key. Reports each READ's completion status.
 *   slow-owner    listen on ADDR:PORT as node N holding the bytes of --file:
 *                 answer the FETCHRs of node --feed with RPARTs of --piece
 *                 bytes from the offset asked, one every --pace-ms, and
 *                 never past --stall-after bytes (0: no stall; with
 *                 --stall-busy the request there is answered BUSY, without
 *                 a relay, instead of never); answer
 *                 anyone else BUSY "relay <feed>" (a paced owner, so that
 *                 the feed is a relay for as long as a test needs)
 *   rpart         connect as N to a relay (dialling --dial), ask FETCHR with
 *                 PARTIAL_OK for --id from offset 0, and with the RPART's
 *                 key READ inside its range (must work), then across its
 *                 end (past the bytes landed at the relay: must fail).
 *
 * Output: lines "hostile: key=value ..." on stdout, the last one a summary
 * the test parses. Bounded by --seconds (default 60). A test tool: one
 * thread, streams polled in turn.
 */
#include <arpa/inet.h>
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
#include <xxhash.h>

#include "rdma/stream.h"
#include "rdma/streamproto.h"
#include "rdma/verbs.h"
#include "transfer/framer.h"
#include "transfer/wire.h"

#define H_MAX_CONNS 512
#define H_FLOOD     400
#define H_READ_LEN  4096

typedef struct HConn {
    RdmaStream *s;
    Framer f;
    int used, open, closed, authed, noRead, reported;
    char name[OBJ_WIRE_NAME_MAX + 1]; /* many-idle: the node name it claims */
    uint64_t keepalives;              /* many-idle: received before the idle time */
    uint8_t nonce[OBJ_WIRE_NONCE], peerNonce[OBJ_WIRE_NONCE];
    char peerName[OBJ_WIRE_NAME_MAX + 1];
    uint16_t peerFeatures;
    WireMac *tx, *rx; /* the session MAC, once the handshake is done */
    /* the last RNDV (or, rpart mode, RPART) received */
    int haveRndv;
    uint64_t rndvReq, rndvAddr, rndvLen;
    uint32_t rndvKey;
    /* slow-owner: the feed's request waiting for its next piece */
    int pending, stalled;
    uint64_t pendReq, pendOff;
    double nextAt;
    /* scoped: one READ at a time */
    uint8_t *buf;
    struct ibv_mr *bufMr;
    int readDone, readStatus;
} HConn;

static struct {
    const char *mode, *secret, *name, *dial, *id, *file, *feed;
    uint64_t size, piece, stallAfter;
    int paceMs, stallBusy;
    int count, seconds;
    double end;
    struct rdma_event_channel *ec;
    struct ibv_pd *pd; /* rndv-error: the listener's device */
    uint8_t *obj;      /* rndv-error: the bytes an RNDV points at */
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

/* A READ's completion (the only work requests we post ourselves). */
static void onWc(void *ctx, const struct ibv_wc *wc)
{
    HConn *c = ctx;
    c->readDone = 1;
    c->readStatus = (int)wc->status;
}

static void streamCfg(RdmaStreamConfig *cfg, HConn *c)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->rxSize = SP_RX_MIN;
    cfg->txSize = SP_RX_DEFAULT;
    cfg->userSendWr = 4;
    cfg->responderResources = 4;
    cfg->initiatorDepth = 4;
    cfg->pd = h.pd;
    cfg->onWc = onWc;
    cfg->userCtx = c;
}

static HConn *newConn(void)
{
    if (h.nConns == H_MAX_CONNS)
        die("too many connections");
    HConn *c = &h.conns[h.nConns++];
    memset(c, 0, sizeof(*c));
    c->used = 1;
    framerInit(&c->f);
    if (getrandom(c->nonce, sizeof(c->nonce), 0) != sizeof(c->nonce))
        die("getrandom");
    return c;
}

/* Mark c gone (once) and count it. */
static void gone(HConn *c)
{
    if (c->closed)
        return;
    c->closed = 1;
    if (c->open) {
        h.disconnected++;
        printf("hostile: disconnected-at=%.1f why=%s\n", nowSec(), rdmaStreamError(c->s));
        fflush(stdout);
    }
}

/* Write all of buf (bounded by --seconds). Returns 0 or -1. */
static int sendBytes(HConn *c, const uint8_t *buf, size_t len)
{
    size_t off = 0;

    while (off < len && !c->closed && nowSec() < h.end) {
        ssize_t n = rdmaStreamWrite(c->s, buf + off, len - off);
        if (n < 0) {
            gone(c);
            return -1;
        }
        off += (size_t)n;
        if (off < len && rdmaStreamWait(c->s, 10) == -1)
            gone(c);
    }
    return off == len ? 0 : -1;
}

static int sendMsg(HConn *c, WireMsg *m)
{
    uint8_t buf[OBJ_WIRE_FRAME_MAX];
    int64_t paySeq; /* this tool sends no payloads */
    int len = wireEncode(m, buf, sizeof(buf));

    if (len >= 0)
        len = wireSeal(c->tx, buf, sizeof(buf), len, &paySeq);
    if (len < 0)
        die("wireEncode");
    return sendBytes(c, buf, (size_t)len);
}

/* Key c's session MAC as a node does once the handshake proved the secret
 * (this tool knows it: it plays a node that breaks rules after AUTH). */
static void keySession(HConn *c, const WireTranscript *t, const uint8_t *proofAcceptor,
                       const uint8_t *proofConnector, int connector)
{
    uint8_t c2a[OBJ_WIRE_KEY], a2c[OBJ_WIRE_KEY];

    if (wireSessionKeys(h.secret, strlen(h.secret), t, proofAcceptor, proofConnector, c2a, a2c) ==
        -1)
        die("wireSessionKeys");
    c->tx = wireMacNew(connector ? c2a : a2c);
    c->rx = wireMacNew(connector ? a2c : c2a);
    if (!c->tx || !c->rx)
        die("wireMacNew");
    framerSetMac(&c->f, c->rx);
}

/* n PINGs in one write: a peer that does not read can make the node
 * queue fast. Returns 0 or -1. */
static int sendPings(HConn *c, int n, uint64_t *reqId)
{
    static uint8_t buf[256 * (OBJ_WIRE_HDR_LEN + OBJ_WIRE_MAC)];
    size_t at = 0;

    for (int i = 0; i < n && i < 256; i++) {
        WireMsg p = {.h = {.type = WIRE_PING, .reqId = (*reqId)++}};
        int64_t paySeq;
        int len = wireEncode(&p, buf + at, sizeof(buf) - at);
        if (len >= 0)
            len = wireSeal(c->tx, buf + at, sizeof(buf) - at, len, &paySeq);
        if (len < 0)
            die("wireEncode");
        at += (size_t)len;
    }
    return sendBytes(c, buf, at);
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

/* slow-owner: a FETCHR. The feed's waits for its piece (slowServe); anyone
 * else is sent to the feed as a relay. */
static void onSlowFetch(HConn *c, const WireMsg *m)
{
    if (strcmp(c->peerName, h.feed)) {
        char text[OBJ_WIRE_TEXT_MAX + 1];
        snprintf(text, sizeof(text), "relay %s", h.feed);
        WireMsg e = {.h = {.type = WIRE_ERROR, .reqId = m->h.reqId}};
        e.u.error.code = WIRE_ERR_BUSY;
        e.u.error.text = text;
        e.u.error.textLen = (uint16_t)strlen(text);
        if (sendMsg(c, &e) != 0)
            die("send BUSY");
        h.busy++;
        printf("hostile: busy-to=%s\n", c->peerName);
        fflush(stdout);
        return;
    }
    if (m->u.fetch.offset >= h.size)
        die("FETCHR past the end");
    c->pending = 1;
    c->pendReq = m->h.reqId;
    c->pendOff = m->u.fetch.offset;
}

/* slow-owner: send the feed its next piece when it is due (never past
 * --stall-after). */
static void slowServe(HConn *c)
{
    if (!c->pending || nowSec() < c->nextAt)
        return;
    if (h.stallAfter && c->pendOff >= h.stallAfter) {
        if (!c->stalled)
            printf("hostile: stalled offset=%llu\n", (unsigned long long)c->pendOff);
        fflush(stdout);
        c->stalled = 1;
        if (h.stallBusy) { /* the feed goes elsewhere for the rest */
            WireMsg e = {.h = {.type = WIRE_ERROR, .reqId = c->pendReq}};
            e.u.error.code = WIRE_ERR_BUSY;
            e.u.error.text = "stalled";
            e.u.error.textLen = (uint16_t)strlen(e.u.error.text);
            if (sendMsg(c, &e) != 0)
                die("send BUSY");
            c->pending = 0;
        }
        return;
    }
    uint64_t len = h.size - c->pendOff < h.piece ? h.size - c->pendOff : h.piece;
    WireMsg r = {.h = {.type = WIRE_RPART, .reqId = c->pendReq}};
    r.u.data.size = h.size;
    r.u.data.checksum = XXH3_64bits(h.obj, h.size);
    r.u.data.offset = c->pendOff;
    r.u.data.len = len;
    r.u.data.addr = (uint64_t)(uintptr_t)(h.obj + c->pendOff);
    r.u.data.rkey = h.objMr->rkey;
    if (sendMsg(c, &r) != 0)
        die("send RPART");
    h.rndvs++;
    c->pending = 0;
    c->nextAt = nowSec() + h.paceMs / 1000.0;
    printf("hostile: piece offset=%llu len=%llu\n", (unsigned long long)r.u.data.offset,
           (unsigned long long)len);
    fflush(stdout);
}

/* A frame from the node. */
static void onFrame(HConn *c, WireMsg *m)
{
    if (m->h.type == WIRE_HELLO && h.objMr) { /* we listen: answer as the acceptor */
        snprintf(c->peerName, sizeof(c->peerName), "%.*s", (int)m->u.hello.nameLen,
                 m->u.hello.name);
        memcpy(c->peerNonce, m->u.hello.nonce, OBJ_WIRE_NONCE);
        c->peerFeatures = m->u.hello.features;
        sendHello(c, 1);
        return;
    }
    if (m->h.type == WIRE_AUTH) { /* the connector proved itself: it may read our object */
        WireTranscript t = {.connector = c->peerName,
                            .acceptor = h.name,
                            .dialled = h.name,
                            .connectorFeatures = c->peerFeatures,
                            .acceptorFeatures = OBJ_FEAT_TCP | OBJ_FEAT_RDMA,
                            .nonceConnector = c->peerNonce,
                            .nonceAcceptor = c->nonce};
        uint8_t mine[OBJ_WIRE_PROOF];
        wireProof(h.secret, strlen(h.secret), WIRE_ROLE_ACCEPTOR, &t, mine);
        keySession(c, &t, mine, m->u.auth.proof, 0);
        c->authed = 1;
        if (rdmaStreamAllowRemoteRead(c->s) == -1)
            die("rdmaStreamAllowRemoteRead");
        return;
    }
    if (m->h.type == WIRE_HELLO) { /* we connected: answer with AUTH */
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
        keySession(c, &t, m->u.hello.proof, a.u.auth.proof, 1);
        c->authed = 1;
        printf("hostile: authenticated=1\n");
        fflush(stdout);
        return;
    }
    if (m->h.type == WIRE_FETCHR && !strcmp(h.mode, "slow-owner")) {
        onSlowFetch(c, m);
        return;
    }
    if (m->h.type == WIRE_PING) {
        WireMsg p = {.h = {.type = WIRE_PONG, .reqId = m->h.reqId}};
        sendMsg(c, &p);
        return;
    }
    if (m->h.type == WIRE_FETCH || m->h.type == WIRE_FETCHR) { /* rndv-error */
        WireMsg r = {.h = {.type = WIRE_RNDV, .reqId = m->h.reqId}};
        r.u.data.size = h.size;
        /* The checksum of the bytes it points at, as the directory says: the
         * requester then starts its READs (it refuses a mismatch up front). */
        r.u.data.checksum = XXH3_64bits(h.obj, h.size);
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
    if (m->h.type == WIRE_RNDV || m->h.type == WIRE_RPART) {
        h.rndvs++;
        c->haveRndv = 1;
        c->rndvReq = m->h.reqId;
        c->rndvAddr = m->u.data.addr;
        c->rndvLen = m->h.type == WIRE_RPART ? m->u.data.len : m->u.data.size + m->u.data.metaSize;
        c->rndvKey = m->u.data.rkey;
        if (m->h.type == WIRE_RPART) {
            printf("hostile: rpart offset=%llu len=%llu size=%llu\n",
                   (unsigned long long)m->u.data.offset, (unsigned long long)m->u.data.len,
                   (unsigned long long)m->u.data.size);
            fflush(stdout);
        }
    } else if (m->h.type == WIRE_PART) {
        printf("hostile: part offset=%llu len=%llu\n", (unsigned long long)m->u.data.offset,
               (unsigned long long)m->u.data.len);
        fflush(stdout);
        framerExpectPayload(&c->f, NULL, m->u.data.len);
    } else if (m->h.type == WIRE_ERROR && m->u.error.code == WIRE_ERR_BUSY) {
        h.busy++;
    } else if (m->h.type == WIRE_ERROR) {
        h.errors++;
        printf("hostile: error=%.*s\n", (int)m->u.error.textLen, m->u.error.text);
    } else if (m->h.type == WIRE_PONG) {
        h.pongs++;
    } else if (m->h.type == WIRE_DATA) {
        framerExpectPayload(&c->f, NULL, m->u.data.size + m->u.data.metaSize);
    }
}

/* Process c's stream and, unless it stopped reading, its frames. */
static void pollConn(HConn *c)
{
    if (!c->used || c->closed)
        return;
    if (rdmaStreamProcess(c->s) == -1) {
        gone(c);
        return;
    }
    if (!c->open && rdmaStreamGetState(c->s) == RDMA_STREAM_OPEN) {
        c->open = 1;
        h.accepted++;
    }
    while (!c->noRead && rdmaStreamReadable(c->s) > 0) {
        uint8_t *dst;
        size_t room = framerReadSpace(&c->f, &dst), n;
        if (room == 0)
            break;
        if (!dst) {
            size_t avail;
            rdmaStreamPeek(c->s, &avail);
            n = avail < room ? avail : room;
            rdmaStreamConsume(c->s, n);
        } else {
            n = rdmaStreamRead(c->s, dst, room);
        }
        framerWrote(&c->f, n);
        WireMsg m;
        const char *why;
        FramerEvent ev;
        while ((ev = framerNext(&c->f, &m, &why)) != FRAMER_MORE) {
            if (ev == FRAMER_ERROR)
                die(why);
            if (ev == FRAMER_FRAME)
                onFrame(c, &m);
        }
    }
}

/* Poll c until cond(c) holds, c closed, or the time is up. Returns cond. */
static int waitFor(HConn *c, int (*cond)(const HConn *), double seconds)
{
    double until = nowSec() + seconds;
    while (!cond(c) && !c->closed && nowSec() < until && nowSec() < h.end) {
        rdmaStreamWait(c->s, 5);
        pollConn(c);
    }
    return cond(c);
}

static int isAuthed(const HConn *c)
{
    return c->authed;
}
static int hasRndv(const HConn *c)
{
    return c->haveRndv;
}
/* Connect as node --name to --dial and authenticate. */
static HConn *dialAuthed(const char *addr, int port)
{
    char err[192];
    RdmaStreamConfig cfg;
    HConn *c = newConn();

    streamCfg(&cfg, c);
    if (!strcmp(h.mode, "many-idle")) { /* hundreds of them: small, and silent */
        cfg.txSize = SP_RX_MIN;
        cfg.keepaliveMs = -1;
    }
    c->s = rdmaStreamConnectBlocking(addr, port, &cfg, 5000, err, sizeof(err));
    if (!c->s) {
        printf("hostile: connect-error=%s\n", err);
        die("connect");
    }
    pollConn(c);
    sendHello(c, 0);
    if (!waitFor(c, isAuthed, 10))
        die("handshake");
    return c;
}

static void sendFetch(HConn *c, uint64_t reqId)
{
    WireMsg f = {.h = {.type = WIRE_FETCH, .reqId = reqId}};
    f.u.fetch.id = h.id;
    f.u.fetch.idLen = (uint16_t)strlen(h.id);
    if (sendMsg(c, &f) != 0)
        die("send FETCH");
}

/* READ len bytes at raddr with key over c; returns the completion status
 * (-1: none within 5 s). */
static int readWith(HConn *c, uint64_t raddr, uint32_t len, uint32_t rkey)
{
    if (!c->buf) {
        if (posix_memalign((void **)&c->buf, 4096, 2 * H_READ_LEN))
            die("buffer");
        c->bufMr = ibv_reg_mr(rdmaStreamPd(c->s), c->buf, 2 * H_READ_LEN, IBV_ACCESS_LOCAL_WRITE);
        if (!c->bufMr)
            die("ibv_reg_mr");
    }
    struct ibv_sge sge = {.addr = (uintptr_t)c->buf, .length = len, .lkey = c->bufMr->lkey};
    struct ibv_send_wr wr = {.wr_id = 2, .sg_list = &sge, .num_sge = 1};
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    c->readDone = 0;
    if (rdmaStreamPostSend(c->s, &wr) == -1)
        return -1;
    double until = nowSec() + 5;
    while (!c->readDone && nowSec() < until) {
        rdmaStreamWait(c->s, 5);
        if (rdmaStreamGetState(c->s) >= RDMA_STREAM_CLOSED && !c->readDone)
            rdmaStreamProcess(c->s);
    }
    return c->readDone ? c->readStatus : -1;
}

static const char *statusWord(int st)
{
    static char out[4][64];
    static int next;
    char *o = out[next++ % 4];
    snprintf(o, 64, "%s", st < 0 ? "none" : ibv_wc_status_str((enum ibv_wc_status)st));
    for (char *p = o; *p; p++)
        if (*p == ' ')
            *p = '-';
    return o;
}

/* many-idle: --count authenticated connections, one at a time (the node
 * lets few into their handshake from one address), each claiming its own
 * node name; then --seconds of silence from all of them, at the end of
 * which each must have received a keepalive from the node. */
static void runManyIdle(const char *base, int port)
{
    const char *name = h.name;
    int n = h.count < H_MAX_CONNS ? h.count : H_MAX_CONNS, kept = 0, closed = 0;

    h.end = nowSec() + 600; /* dialling hundreds takes a while under emulation */

    for (int i = 0; i < n; i++) {
        char self[OBJ_WIRE_NAME_MAX + 1];
        snprintf(self, sizeof(self), "%s-%d", name, i);
        h.name = self;
        HConn *c = dialAuthed(base, port);
        snprintf(c->name, sizeof(c->name), "%s", self);
        for (int j = 0; j < h.nConns; j++) /* keep the earlier ones' receives posted */
            pollConn(&h.conns[j]);
    }
    h.name = name;
    printf("hostile: connected=%d\n", h.nConns);
    fflush(stdout);
    for (int i = 0; i < h.nConns; i++)
        h.conns[i].keepalives = rdmaStreamKeepalivesIn(h.conns[i].s);
    double until = nowSec() + h.seconds;
    while (nowSec() < until) {
        for (int i = 0; i < h.nConns; i++)
            pollConn(&h.conns[i]);
        usleep(5000);
    }
    for (int i = 0; i < h.nConns; i++) {
        HConn *c = &h.conns[i];
        if (c->closed)
            closed++;
        else if (rdmaStreamKeepalivesIn(c->s) > c->keepalives)
            kept++;
        else
            printf("hostile: no-keepalive=%s\n", c->name);
    }
    printf("hostile: idle connections=%d kept-alive=%d closed=%d\n", h.nConns, kept, closed);
    fflush(stdout);
}

/* The scoped-key misuses, one connection each (a failed READ breaks its
 * connection). */
static void runScoped(const char *addr, int port)
{
    HConn *a = dialAuthed(addr, port);
    sendFetch(a, 1);
    if (!waitFor(a, hasRndv, 10))
        die("no RNDV on the first connection");
    uint32_t len = a->rndvLen < H_READ_LEN ? (uint32_t)a->rndvLen : H_READ_LEN;
    int inside = readWith(a, a->rndvAddr, len, a->rndvKey);
    printf("hostile: read what=inside status=%s first=0x%02x\n", statusWord(inside), a->buf[0]);
    WireMsg d = {.h = {.type = WIRE_DONE, .reqId = a->rndvReq}};
    if (sendMsg(a, &d) != 0)
        die("send DONE");
    double until = nowSec() + 0.5; /* the node invalidates the key after DONE */
    while (nowSec() < until) {
        rdmaStreamWait(a->s, 5);
        pollConn(a);
    }
    int afterDone = readWith(a, a->rndvAddr, len, a->rndvKey);
    printf("hostile: read what=after-done status=%s\n", statusWord(afterDone));

    HConn *b = dialAuthed(addr, port);
    sendFetch(b, 2);
    if (!waitFor(b, hasRndv, 10))
        die("no RNDV on the second connection");
    /* A third connection that never does the handshake tries b's live key. */
    char err[192];
    RdmaStreamConfig cfg;
    HConn *p = newConn();
    streamCfg(&cfg, p);
    p->s = rdmaStreamConnectBlocking(addr, port, &cfg, 5000, err, sizeof(err));
    int preauth = -1;
    if (p->s)
        preauth = readWith(p, b->rndvAddr, len, b->rndvKey);
    printf("hostile: read what=preauth status=%s\n", statusWord(preauth));
    /* Past the object's end: the last bytes and as many after them. */
    uint64_t from = b->rndvAddr + b->rndvLen - len / 2;
    int pastEnd = readWith(b, from, len, b->rndvKey);
    printf("hostile: read what=past-end status=%s\n", statusWord(pastEnd));
    printf("hostile: scoped inside=%s after_done=%s preauth=%s past_end=%s\n", statusWord(inside),
           statusWord(afterDone), statusWord(preauth), statusWord(pastEnd));
    fflush(stdout);
}

/* rpart: a relay's range key opens the landed bytes and nothing past them. */
static void runRpart(const char *addr, int port)
{
    HConn *c = dialAuthed(addr, port);
    WireMsg f = {.h = {.type = WIRE_FETCHR, .reqId = 1}};
    f.u.fetch.id = h.id;
    f.u.fetch.idLen = (uint16_t)strlen(h.id);
    f.u.fetch.flags = WIRE_FETCHR_BUSY_OK | WIRE_FETCHR_PARTIAL_OK;
    if (sendMsg(c, &f) != 0)
        die("send FETCHR");
    if (!waitFor(c, hasRndv, 15))
        die("no RPART from the relay");
    uint32_t len = c->rndvLen < H_READ_LEN ? (uint32_t)c->rndvLen : H_READ_LEN;
    int inside = readWith(c, c->rndvAddr, len, c->rndvKey);
    printf("hostile: read what=inside status=%s first=0x%02x\n", statusWord(inside), c->buf[0]);
    /* The last landed bytes and as many after them. */
    uint64_t from = c->rndvAddr + c->rndvLen - len / 2;
    int past = readWith(c, from, len, c->rndvKey);
    printf("hostile: read what=past-landed status=%s\n", statusWord(past));
    fflush(stdout);
}

static HConn *connOfStream(const RdmaStream *s)
{
    for (int i = 0; i < h.nConns; i++)
        if (h.conns[i].s == s)
            return &h.conns[i];
    return NULL;
}

/* The listener's rdma_cm events (rndv-error). */
static void onCm(void)
{
    VerbsCmEvent ev;
    char err[192];

    while (verbsNextCmEvent(h.ec, &ev) == 0) {
        if (ev.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
            HConn *c = newConn();
            RdmaStreamConfig cfg;
            streamCfg(&cfg, c);
            c->s = rdmaStreamAccept(ev.id, &cfg, err, sizeof(err));
            if (!c->s) {
                printf("hostile: accept-error=%s\n", err);
                c->used = 0;
            }
            continue;
        }
        HConn *c = connOfStream(ev.id->context);
        if (c && !c->closed && rdmaStreamCmEvent(c->s, ev.type, ev.status) == -1)
            gone(c);
    }
}

static void listenOn(const char *addr, int port)
{
    struct rdma_cm_id *lid;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};

    inet_pton(AF_INET, addr, &sa.sin_addr);
    h.ec = rdma_create_event_channel();
    if (!h.ec)
        die("rdma_create_event_channel");
    int fl = fcntl(h.ec->fd, F_GETFL);
    fcntl(h.ec->fd, F_SETFL, fl | O_NONBLOCK);
    if (rdma_create_id(h.ec, &lid, NULL, RDMA_PS_TCP) ||
        rdma_bind_addr(lid, (struct sockaddr *)&sa) || rdma_listen(lid, 8))
        die("listen");
    h.pd = ibv_alloc_pd(lid->verbs);
    if (!h.pd || posix_memalign((void **)&h.obj, 4096, h.size ? h.size : 4096))
        die("pd/object");
    memset(h.obj, 0xEE, h.size);
    if (h.file) { /* slow-owner: the object's bytes */
        FILE *f = fopen(h.file, "rb");
        if (!f || fread(h.obj, 1, h.size, f) != h.size)
            die("--file");
        fclose(f);
    }
    h.objMr = ibv_reg_mr(h.pd, h.obj, h.size ? h.size : 4096,
                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
    if (!h.objMr)
        die("object registration");
    printf("hostile: ready\n");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"mode", 1, 0, 'm'},        {"secret", 1, 0, 's'},     {"name", 1, 0, 'n'},
        {"dial", 1, 0, 'd'},        {"id", 1, 0, 'i'},         {"size", 1, 0, 'z'},
        {"count", 1, 0, 'c'},       {"seconds", 1, 0, 't'},    {"file", 1, 0, 'f'},
        {"feed", 1, 0, 'F'},        {"piece", 1, 0, 'p'},      {"pace-ms", 1, 0, 'P'},
        {"stall-after", 1, 0, 'S'}, {"stall-busy", 0, 0, 'B'}, {0, 0, 0, 0}};
    int o;

    h.mode = "silent";
    h.secret = "";
    h.name = "M";
    h.dial = "A";
    h.id = "x";
    h.count = 1;
    h.seconds = 60;
    h.feed = "B";
    h.piece = 256 * 1024;
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
            case 'f':
                h.file = optarg;
                break;
            case 'F':
                h.feed = optarg;
                break;
            case 'p':
                h.piece = strtoull(optarg, NULL, 10);
                break;
            case 'P':
                h.paceMs = atoi(optarg);
                break;
            case 'S':
                h.stallAfter = strtoull(optarg, NULL, 10);
                break;
            case 'B':
                h.stallBusy = 1;
                break;
            default:
                return 2;
        }
    }
    if (optind + 2 != argc || h.count < 0 || h.count > 1000000) {
        fprintf(stderr, "usage: rdma_hostile ADDR PORT --mode MODE [options] (see the source)\n");
        return 2;
    }
    const char *addr = argv[optind];
    int port = atoi(argv[optind + 1]);
    h.end = nowSec() + h.seconds;
    int fetchesSent = 0, floodReported = 0;

    if (!strcmp(h.mode, "scoped")) {
        runScoped(addr, port);
    } else if (!strcmp(h.mode, "rpart")) {
        runRpart(addr, port);
    } else if (!strcmp(h.mode, "rndv-error") || !strcmp(h.mode, "slow-owner")) {
        if (!strcmp(h.mode, "slow-owner") && (!h.file || !h.size || !h.piece))
            die("slow-owner needs --file, --size and --piece");
        listenOn(addr, port);
        while (nowSec() < h.end) {
            struct pollfd pfd = {.fd = h.ec->fd, .events = POLLIN};
            poll(&pfd, 1, 1);
            onCm();
            for (int i = 0; i < h.nConns; i++) {
                pollConn(&h.conns[i]);
                if (h.conns[i].used && !h.conns[i].closed && h.conns[i].authed)
                    slowServe(&h.conns[i]);
            }
        }
    } else if (!strcmp(h.mode, "silent")) {
        char err[192];
        for (int i = 0; i < h.count && i < H_MAX_CONNS; i++) {
            RdmaStreamConfig cfg;
            HConn *c = newConn();
            streamCfg(&cfg, c);
            c->s = rdmaStreamConnectBlocking(addr, port, &cfg, 3000, err, sizeof(err));
            if (!c->s) {
                h.rejected++;
                c->used = 0;
                continue;
            }
            c->noRead = 1;
            pollConn(c);
        }
        h.end = nowSec() + h.seconds; /* --seconds from the last connection on */
        while (nowSec() < h.end) {
            int open = 0;
            for (int i = 0; i < h.nConns; i++) {
                pollConn(&h.conns[i]);
                open += h.conns[i].used && !h.conns[i].closed;
            }
            if (!open)
                break;
            usleep(2000);
        }
    } else if (!strcmp(h.mode, "many-idle")) {
        runManyIdle(addr, port);
    } else if (!strcmp(h.mode, "no-read") || !strcmp(h.mode, "rndv-flood")) {
        HConn *c = dialAuthed(addr, port);
        uint64_t reqId = 1;
        int flood = !strcmp(h.mode, "rndv-flood");
        if (!flood)
            c->noRead = 1; /* from now on: the node's bytes stay where they landed */
        while (nowSec() < h.end && !c->closed) {
            if (flood && fetchesSent < H_FLOOD) {
                sendFetch(c, reqId++);
                fetchesSent++;
            } else if (!flood && (h.count == 0 || h.pings < h.count)) {
                int batch = h.count == 0 || h.count - h.pings > 256 ? 256 : h.count - h.pings;
                if (sendPings(c, batch, &reqId) == 0)
                    h.pings += batch;
            } else {
                rdmaStreamWait(c->s, 5);
            }
            pollConn(c);
            if (flood && !floodReported && fetchesSent >= H_FLOOD && h.rndvs + h.busy >= H_FLOOD) {
                /* answered: hold the pins until the test has looked, then --seconds ends it */
                printf("hostile: flood-done rndvs=%d busy=%d\n", h.rndvs, h.busy);
                fflush(stdout);
                floodReported = 1;
            }
        }
    } else {
        fprintf(stderr, "rdma_hostile: unknown mode %s\n", h.mode);
        return 2;
    }
    printf("hostile: summary accepted=%d rejected=%d disconnected=%d rndvs=%d busy=%d "
           "errors=%d pings=%d pongs=%d fetches=%d\n",
           h.accepted, h.rejected, h.disconnected, h.rndvs, h.busy, h.errors, h.pings, h.pongs,
           fetchesSent);
    fflush(stdout);
    return 0;
}
