/*
 * rdma_resp_client.c - a small test client for the module's RDMA front door
 * (RESP over RDMA, module/rdma/resprdma.h). It speaks the ring discipline itself
 * (librdmacm + libibverbs, credits from module/rdma/ring.c), sends RESP bytes and
 * parses the replies with hiredis's redisReader, so the suite can check what
 * a client really sees. It can also misbehave on purpose: send frames the
 * server must refuse, vanish in the middle of a pipeline, read slowly.
 *
 *   rdma_resp_client -h ADDR -p PORT [options] < script
 *
 * The script has one command per line, arguments separated by spaces; an
 * argument @rep:C:N stands for N copies of the character C. Commands are
 * sent as multibulk requests, all at once (a pipeline), and each reply is
 * printed on its own line(s):
 *
 *   status:OK   bulk:5:hello   bulk:1048576:fnv=<hex>   nil   nilarray
 *   int:3       err:ERR ...    array:2 (then the elements, indented)
 *
 * Options:
 *   -n N           send the script N times (default 1)
 *   -c N           open N connections at once, each sending the script
 *   -q             print only "replies=R errors=E" (and connections=N)
 *   -t SECS        give up after SECS seconds (default 60): exit 1
 *   --raw          send stdin byte for byte; read replies until the server
 *                  closes the connection or -r replies arrived
 *   -r N           replies to wait for with --raw
 *   --garbage K    send one bad ring message instead (K: slot, len,
 *                  credits, flags, send) and wait to be disconnected
 *   --vanish-after K   exit without disconnecting after K replies
 *   --read-delay MS    stop reading for MS ms after sending (backpressure)
 *   --lazy-credits     return credits in a data-less message only when no
 *                      request bytes wait (the narrow reading of the spec)
 *   --slots S --slot-size Z    the client's ring (default 16 x 64 KiB)
 *   --send-delay MS    once every connection is up, wait MS ms before sending
 *   --hostile MIB      after the script, stream an endless bulk ('x') of up to
 *                      MIB MiB, return at most one credit per message received
 *                      from the server, never send a data-less message: the
 *                      query buffer attack; use with --raw (waits to be closed)
 *
 * Exit status: 0 when every expected reply arrived (or, with --garbage, the
 * server disconnected us; with --raw and no -r, the server closed after
 * replying), 1 otherwise, 2 for bad usage.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <hiredis/hiredis.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <rdma/rdma_cma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rdma/resprdma.h"
#include "rdma/ring.h"

#define CLI_TX_BUFS 8
#define CLI_WR_RECV 1u
#define CLI_WR_SEND 2u
#define HDR         ((uint32_t)sizeof(RespRdmaHdr))

typedef struct Conn {
    int idx;
    struct rdma_cm_id *id;
    struct ibv_cq *cq;
    uint8_t *ring;
    struct ibv_mr *ringMr;
    uint8_t *tx;
    struct ibv_mr *txMr;
    uint32_t txBufSize, txBusy;
    RingTx t;
    RingRx r;
    uint64_t peerAddr;
    uint32_t peerRkey, peerSlotSize;
    size_t outOff;
    uint64_t streamed; /* --hostile: bytes sent beyond the script */
    int mayReturn;     /* --hostile: a message arrived since credits were last returned */
    redisReader *reader;
    long replies, errors;
    int connected, closed, failed, garbageSent;
} Conn;

static struct {
    const char *addr;
    int port, nconns, repeat, quiet, raw, timeoutS, readDelayMs, lazyCredits;
    int sendDelayMs, sendReady;
    uint64_t hostileMax;
    long rawReplies, vanishAfter;
    const char *garbage;
    uint32_t slots, slotSize;
    char *req;
    size_t reqLen;
    long expect; /* replies per connection, -1: until closed */
    struct rdma_event_channel *ec;
    struct ibv_comp_channel *cc;
    struct ibv_pd *pd;
    struct ibv_context *verbs;
    Conn *conns;
} g;

static redisReplyObjectFunctions nilAwareFns;
static void *(*defaultNil)(const redisReadTask *);

static void die(const char *fmt, const char *arg)
{
    fprintf(stderr, "rdma_resp_client: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(1);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- requests ------------------------------------------------------------------------------ */

static void reqAppend(const void *p, size_t n)
{
    static size_t cap;
    if (g.reqLen + n > cap) {
        cap = cap ? cap : 4096;
        while (cap < g.reqLen + n)
            cap *= 2;
        g.req = realloc(g.req, cap);
        if (!g.req)
            die("%s", "out of memory");
    }
    memcpy(g.req + g.reqLen, p, n);
    g.reqLen += n;
}

/* Turn one script line into a multibulk request. Returns 1 if it held a
 * command, 0 for a blank line. */
static int reqFromLine(char *line)
{
    char *args[1024];
    int argc = 0;
    char *save = NULL;

    for (char *tok = strtok_r(line, " \r\n", &save); tok && argc < 1024;
         tok = strtok_r(NULL, " \r\n", &save))
        args[argc++] = tok;
    if (!argc)
        return 0;
    char head[32];
    reqAppend(head, (size_t)snprintf(head, sizeof(head), "*%d\r\n", argc));
    for (int i = 0; i < argc; i++) {
        char ch;
        long n;
        if (sscanf(args[i], "@rep:%c:%ld", &ch, &n) == 2 && n >= 0) {
            reqAppend(head, (size_t)snprintf(head, sizeof(head), "$%ld\r\n", n));
            char chunk[4096];
            memset(chunk, ch, sizeof(chunk));
            for (long done = 0; done < n;) {
                long k = n - done < (long)sizeof(chunk) ? n - done : (long)sizeof(chunk);
                reqAppend(chunk, (size_t)k);
                done += k;
            }
        } else {
            size_t len = strlen(args[i]);
            reqAppend(head, (size_t)snprintf(head, sizeof(head), "$%zu\r\n", len));
            reqAppend(args[i], len);
        }
        reqAppend("\r\n", 2);
    }
    return 1;
}

/* Read stdin into the request stream; returns the number of commands (-1
 * with --raw: the count is not known). */
static long readScript(void)
{
    if (g.raw) {
        char buf[65536];
        ssize_t n;
        while ((n = read(0, buf, sizeof(buf))) > 0)
            reqAppend(buf, (size_t)n);
        return -1;
    }
    char *line = NULL;
    size_t cap = 0;
    long cmds = 0;
    while (getline(&line, &cap, stdin) > 0)
        cmds += reqFromLine(line);
    free(line);
    return cmds;
}

/* ---- replies -------------------------------------------------------------------------------- */

/* Mark nulls that stand for an array (*-1) so that they print apart from
 * null bulks ($-1): hiredis makes both REDIS_REPLY_NIL. */
static void *createNilAware(const redisReadTask *task)
{
    redisReply *r = defaultNil(task);
    if (r)
        r->integer = task->type == REDIS_REPLY_ARRAY;
    return r;
}

static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 1099511628211ULL;
    }
    return h;
}

static void printReply(const redisReply *r, int depth)
{
    printf("%*s", depth * 2, "");
    switch (r->type) {
        case REDIS_REPLY_STATUS:
            printf("status:%s\n", r->str);
            break;
        case REDIS_REPLY_ERROR:
            printf("err:%s\n", r->str);
            break;
        case REDIS_REPLY_INTEGER:
            printf("int:%lld\n", r->integer);
            break;
        case REDIS_REPLY_NIL:
            printf(r->integer ? "nilarray\n" : "nil\n");
            break;
        case REDIS_REPLY_STRING:
            if (r->len > 64) {
                printf("bulk:%zu:fnv=%016llx\n", (size_t)r->len,
                       (unsigned long long)fnv1a(r->str, r->len));
                break;
            }
            printf("bulk:%zu:", (size_t)r->len);
            for (size_t i = 0; i < (size_t)r->len; i++) {
                unsigned char ch = (unsigned char)r->str[i];
                if (ch >= 32 && ch < 127 && ch != '\\')
                    putchar(ch);
                else
                    printf("\\x%02x", ch);
            }
            putchar('\n');
            break;
        case REDIS_REPLY_ARRAY:
            printf("array:%zu\n", (size_t)r->elements);
            for (size_t i = 0; i < r->elements; i++)
                printReply(r->element[i], depth + 1);
            break;
        default:
            printf("unknown:%d\n", r->type);
    }
}

/* Feed received stream bytes to the reader and handle complete replies. */
static void onStream(Conn *c, const uint8_t *p, size_t n)
{
    void *rep;

    if (redisReaderFeed(c->reader, (const char *)p, n) != REDIS_OK)
        die("%s", "reader feed failed");
    for (;;) {
        if (redisReaderGetReply(c->reader, &rep) != REDIS_OK) {
            fprintf(stderr, "conn %d: protocol error in replies: %s\n", c->idx, c->reader->errstr);
            c->failed = 1;
            return;
        }
        if (!rep)
            return;
        redisReply *r = rep;
        c->replies++;
        if (r->type == REDIS_REPLY_ERROR)
            c->errors++;
        if (!g.quiet && c->idx == 0)
            printReply(r, 0);
        freeReplyObject(r);
        if (g.vanishAfter >= 0 && c->replies >= g.vanishAfter) {
            fflush(stdout);
            _exit(0); /* no disconnect: the kernel tears the QP down */
        }
    }
}

/* ---- verbs ----------------------------------------------------------------------------------- */

static void postRecv(Conn *c)
{
    struct ibv_recv_wr wr = {.wr_id = CLI_WR_RECV}, *bad;
    if (ibv_post_recv(c->id->qp, &wr, &bad))
        die("%s", "ibv_post_recv failed");
}

static void setupConn(Conn *c)
{
    struct ibv_qp_init_attr qa = {0};

    if (!g.pd) {
        g.verbs = c->id->verbs;
        g.pd = ibv_alloc_pd(g.verbs);
        g.cc = ibv_create_comp_channel(g.verbs);
        if (!g.pd || !g.cc)
            die("%s", "cannot allocate the PD / completion channel");
        fcntl(g.cc->fd, F_SETFL, fcntl(g.cc->fd, F_GETFL) | O_NONBLOCK);
    }
    c->cq = ibv_create_cq(g.verbs, (int)g.slots + CLI_TX_BUFS + 8, c, g.cc, 0);
    if (!c->cq || ibv_req_notify_cq(c->cq, 0))
        die("%s", "cannot create the CQ");
    qa.send_cq = qa.recv_cq = c->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = CLI_TX_BUFS + 2;
    qa.cap.max_recv_wr = g.slots;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    if (rdma_create_qp(c->id, g.pd, &qa))
        die("rdma_create_qp: %s", strerror(errno));
    size_t ringLen = (size_t)g.slots * g.slotSize;
    c->ring = aligned_alloc(4096, (ringLen + 4095) / 4096 * 4096);
    c->tx = aligned_alloc(4096, (size_t)CLI_TX_BUFS * RESP_RDMA_SLOT_SIZE);
    if (!c->ring || !c->tx)
        die("%s", "out of memory");
    c->ringMr =
        ibv_reg_mr(g.pd, c->ring, ringLen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    c->txMr =
        ibv_reg_mr(g.pd, c->tx, (size_t)CLI_TX_BUFS * RESP_RDMA_SLOT_SIZE, IBV_ACCESS_LOCAL_WRITE);
    if (!c->ringMr || !c->txMr)
        die("ibv_reg_mr: %s", strerror(errno));
    ringRxInit(&c->r, g.slots);
    for (uint32_t i = 0; i < g.slots; i++)
        postRecv(c);
}

/* Post one ring write: slot and length in the immediate, then the header
 * and up to a buffer of request bytes. op/imm/hdr overrides serve
 * --garbage. Returns 1 if posted, 0 if credits or buffers are short. */
static int postMsg(Conn *c, int creditOnly)
{
    uint32_t full = (1u << CLI_TX_BUFS) - 1;
    if ((c->txBusy & full) == full)
        return 0;
    int slot = ringTxTake(&c->t, creditOnly);
    if (slot < 0)
        return 0;
    int buf = __builtin_ctz(~c->txBusy);
    uint8_t *f = c->tx + (size_t)buf * RESP_RDMA_SLOT_SIZE;
    size_t n = creditOnly ? 0 : g.reqLen - c->outOff;
    size_t room = c->txBufSize - HDR, script = 0;
    uint32_t give = 0xFFFF;
    if (g.hostileMax) {
        give = c->mayReturn ? 1 : 0;
        c->mayReturn = 0;
        if (!creditOnly)
            n = room; /* the script first, then the endless bulk */
    }
    if (n > room)
        n = room;
    RespRdmaHdr h = {.credits = htole16((uint16_t)ringRxTakeCredits(&c->r, give))};
    memcpy(f, &h, HDR);
    if (n) {
        script = c->outOff < g.reqLen ? g.reqLen - c->outOff : 0;
        script = script < n ? script : n;
        memcpy(f + HDR, g.req + c->outOff, script);
        memset(f + HDR + script, 'x', n - script);
        c->streamed += n - script;
    }
    c->outOff += script;
    struct ibv_sge sge = {.addr = (uintptr_t)f, .length = HDR + (uint32_t)n, .lkey = c->txMr->lkey};
    struct ibv_send_wr wr = {0}, *bad;
    wr.wr_id = ((uint64_t)buf << 3) | CLI_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.imm_data = htonl(ringImmEncode((uint32_t)slot, HDR + (uint32_t)n));
    wr.wr.rdma.remote_addr = c->peerAddr + (uint64_t)slot * c->peerSlotSize;
    wr.wr.rdma.rkey = c->peerRkey;
    if (ibv_post_send(c->id->qp, &wr, &bad))
        die("%s", "ibv_post_send failed");
    c->txBusy |= 1u << buf;
    return 1;
}

/* One deliberately bad message (see --garbage). */
static void postGarbage(Conn *c)
{
    uint8_t *f = c->tx;
    RespRdmaHdr h = {0};
    uint32_t slot = 0, len = HDR;
    struct ibv_sge sge = {.addr = (uintptr_t)f, .length = HDR, .lkey = c->txMr->lkey};
    struct ibv_send_wr wr = {0}, *bad;

    if (!strcmp(g.garbage, "slot"))
        slot = 3; /* the server expects slot 0 */
    else if (!strcmp(g.garbage, "len"))
        len = 2; /* shorter than the header */
    else if (!strcmp(g.garbage, "credits"))
        h.credits = htole16(100); /* nothing is outstanding */
    else if (!strcmp(g.garbage, "flags"))
        h.flags = htole16(7);
    else if (strcmp(g.garbage, "send"))
        die("unknown --garbage kind '%s'", g.garbage);
    memcpy(f, &h, HDR);
    wr.wr_id = CLI_WR_SEND;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    if (!strcmp(g.garbage, "send")) {
        wr.opcode = IBV_WR_SEND; /* a receive without an immediate */
        wr.num_sge = 0;
    } else {
        wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        wr.imm_data = htonl(ringImmEncode(slot, len));
        wr.wr.rdma.remote_addr = c->peerAddr + (uint64_t)slot * c->peerSlotSize;
        wr.wr.rdma.rkey = c->peerRkey;
    }
    if (ibv_post_send(c->id->qp, &wr, &bad))
        die("%s", "ibv_post_send (garbage) failed");
    c->garbageSent = 1;
}

/* Send what credits allow; when nothing more can go (no data left, or
 * only the last credit) and ring.h's threshold is owed, return credits in a
 * data-less message: the server may be waiting for them. */
static void pump(Conn *c)
{
    if (!c->connected || c->closed)
        return;
    if (g.garbage) {
        if (!c->garbageSent)
            postGarbage(c);
        return;
    }
    if (!g.sendReady)
        return;
    if (g.hostileMax) {
        while (c->streamed < g.hostileMax && postMsg(c, 0))
            ;
        return;
    }
    for (;;) {
        int posted = c->outOff < g.reqLen && postMsg(c, 0);
        if (!posted && ringRxWantsCreditMsg(&c->r) && (!g.lazyCredits || c->outOff >= g.reqLen))
            posted = postMsg(c, 1);
        if (!posted)
            break;
    }
}

static void onWc(Conn *c, const struct ibv_wc *wc)
{
    if ((wc->wr_id & 7) == CLI_WR_SEND) {
        c->txBusy &= ~(1u << (wc->wr_id >> 3));
        if (wc->status != IBV_WC_SUCCESS && !c->closed) {
            if (!g.garbage)
                fprintf(stderr, "conn %d: send failed: %s\n", c->idx,
                        ibv_wc_status_str(wc->status));
            c->closed = 1;
        }
        return;
    }
    if (wc->status != IBV_WC_SUCCESS) {
        if (!c->closed && !g.garbage)
            fprintf(stderr, "conn %d: receive failed: %s\n", c->idx, ibv_wc_status_str(wc->status));
        c->closed = 1;
        return;
    }
    uint32_t slot, len;
    ringImmDecode(ntohl(wc->imm_data), &slot, &len);
    if (ringRxConsume(&c->r, slot) == -1 || len < HDR || len > g.slotSize)
        die("%s", "the server broke the ring discipline (slot or length)");
    const uint8_t *m = c->ring + (size_t)slot * g.slotSize;
    RespRdmaHdr h;
    memcpy(&h, m, HDR);
    if (ringTxGrant(&c->t, le16toh(h.credits)) == -1)
        die("%s", "the server returned more credits than it owed");
    postRecv(c);
    c->mayReturn = 1;
    if (len > HDR)
        onStream(c, m + HDR, len - HDR);
    pump(c);
}

static void pollComp(void)
{
    struct ibv_cq *cq;
    void *ctx;

    while (g.cc && ibv_get_cq_event(g.cc, &cq, &ctx) == 0) {
        Conn *c = ctx;
        struct ibv_wc wc;
        ibv_ack_cq_events(cq, 1);
        ibv_req_notify_cq(cq, 0);
        while (ibv_poll_cq(cq, 1, &wc) > 0)
            onWc(c, &wc);
    }
}

static void onCmEvent(void)
{
    struct rdma_cm_event *ev;

    while (rdma_get_cm_event(g.ec, &ev) == 0) {
        Conn *c = ev->id->context;
        struct rdma_conn_param cp = {0};
        RespRdmaPriv mine, peer;
        switch (ev->event) {
            case RDMA_CM_EVENT_ADDR_RESOLVED:
                if (rdma_resolve_route(ev->id, 5000))
                    die("rdma_resolve_route: %s", strerror(errno));
                break;
            case RDMA_CM_EVENT_ROUTE_RESOLVED:
                setupConn(c);
                mine.magic = htole32(RESP_RDMA_MAGIC);
                mine.version = htole16(RESP_RDMA_VERSION);
                mine.slots = htole16((uint16_t)g.slots);
                mine.slotSize = htole32(g.slotSize);
                mine.rkey = htole32(c->ringMr->rkey);
                mine.addr = htole64((uint64_t)(uintptr_t)c->ring);
                cp.private_data = &mine;
                cp.private_data_len = sizeof(mine);
                cp.retry_count = 7;
                cp.rnr_retry_count = 7;
                if (rdma_connect(ev->id, &cp))
                    die("rdma_connect: %s", strerror(errno));
                break;
            case RDMA_CM_EVENT_ESTABLISHED:
                if (!ev->param.conn.private_data || ev->param.conn.private_data_len < sizeof(peer))
                    die("%s", "the server sent no ring description");
                memcpy(&peer, ev->param.conn.private_data, sizeof(peer));
                if (le32toh(peer.magic) != RESP_RDMA_MAGIC)
                    die("%s", "the server's private data has a wrong magic");
                c->peerAddr = le64toh(peer.addr);
                c->peerRkey = le32toh(peer.rkey);
                c->peerSlotSize = le32toh(peer.slotSize);
                c->txBufSize =
                    c->peerSlotSize < RESP_RDMA_SLOT_SIZE ? c->peerSlotSize : RESP_RDMA_SLOT_SIZE;
                ringTxInit(&c->t, le16toh(peer.slots));
                c->connected = 1;
                pump(c);
                break;
            case RDMA_CM_EVENT_DISCONNECTED:
                c->closed = 1;
                break;
            default:
                fprintf(stderr, "conn %d: %s (status %d)\n", c ? c->idx : -1,
                        rdma_event_str(ev->event), ev->status);
                if (c) {
                    c->failed = 1;
                    c->closed = 1;
                }
        }
        rdma_ack_cm_event(ev);
    }
}

/* ---- main ---------------------------------------------------------------------------------- */

static int connDone(const Conn *c)
{
    if (c->failed)
        return 1;
    if (g.garbage || g.expect < 0)
        return c->closed;
    return c->replies >= g.expect || c->closed;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: rdma_resp_client -h ADDR -p PORT [-n N] [-c N] [-q] [-t SECS] [--raw "
            "[-r N]] [--garbage KIND] [--vanish-after K] [--read-delay MS] "
            "[--lazy-credits] [--slots S] [--slot-size Z] [--send-delay MS] [--hostile MIB] "
            "< script\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"raw", no_argument, NULL, 'R'},
                                         {"garbage", required_argument, NULL, 'G'},
                                         {"vanish-after", required_argument, NULL, 'V'},
                                         {"read-delay", required_argument, NULL, 'D'},
                                         {"lazy-credits", no_argument, NULL, 'L'},
                                         {"slots", required_argument, NULL, 'S'},
                                         {"slot-size", required_argument, NULL, 'Z'},
                                         {"send-delay", required_argument, NULL, 'W'},
                                         {"hostile", required_argument, NULL, 'H'},
                                         {NULL, 0, NULL, 0}};
    int o;

    g.nconns = 1;
    g.repeat = 1;
    g.timeoutS = 60;
    g.vanishAfter = -1;
    g.slots = RESP_RDMA_SLOTS;
    g.slotSize = RESP_RDMA_SLOT_SIZE;
    while ((o = getopt_long(argc, argv, "h:p:n:c:qt:r:", opts, NULL)) != -1) {
        switch (o) {
            case 'h':
                g.addr = optarg;
                break;
            case 'p':
                g.port = atoi(optarg);
                break;
            case 'n':
                g.repeat = atoi(optarg);
                break;
            case 'c':
                g.nconns = atoi(optarg);
                break;
            case 'q':
                g.quiet = 1;
                break;
            case 't':
                g.timeoutS = atoi(optarg);
                break;
            case 'r':
                g.rawReplies = atol(optarg);
                break;
            case 'R':
                g.raw = 1;
                break;
            case 'G':
                g.garbage = optarg;
                break;
            case 'V':
                g.vanishAfter = atol(optarg);
                break;
            case 'D':
                g.readDelayMs = atoi(optarg);
                break;
            case 'L':
                g.lazyCredits = 1;
                break;
            case 'S':
                g.slots = (uint32_t)atoi(optarg);
                break;
            case 'Z':
                g.slotSize = (uint32_t)atoi(optarg);
                break;
            case 'W':
                g.sendDelayMs = atoi(optarg);
                break;
            case 'H':
                g.hostileMax = (uint64_t)atoi(optarg) << 20;
                break;
            default:
                usage();
        }
    }
    if (!g.addr || g.port <= 0 || g.nconns < 1 || g.repeat < 1 || g.slots < 4 || g.slots > 4096 ||
        g.slotSize < 64 || g.slotSize > RING_MAX_LEN || g.sendDelayMs < 0)
        usage();
    g.sendReady = g.sendDelayMs == 0;

    if (!g.garbage) {
        long cmds = readScript();
        if (g.repeat > 1) {
            size_t one = g.reqLen;
            char *copy = malloc(one ? one : 1);
            if (!copy)
                die("%s", "out of memory");
            memcpy(copy, g.req, one);
            for (int i = 1; i < g.repeat; i++)
                reqAppend(copy, one);
            free(copy);
        }
        g.expect = g.raw ? (g.rawReplies > 0 ? g.rawReplies : -1) : cmds * g.repeat;
    }

    g.ec = rdma_create_event_channel();
    if (!g.ec)
        die("rdma_create_event_channel: %s", strerror(errno));
    fcntl(g.ec->fd, F_SETFL, fcntl(g.ec->fd, F_GETFL) | O_NONBLOCK);
    g.conns = calloc((size_t)g.nconns, sizeof(Conn));
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g.port)};
    if (inet_pton(AF_INET, g.addr, &dst.sin_addr) != 1)
        die("bad address %s", g.addr);
    for (int i = 0; i < g.nconns; i++) {
        Conn *c = &g.conns[i];
        c->idx = i;
        c->reader = redisReaderCreate();
        if (!c->reader)
            die("%s", "redisReaderCreate failed");
        if (!defaultNil) {
            nilAwareFns = *c->reader->fn;
            defaultNil = nilAwareFns.createNil;
            nilAwareFns.createNil = createNilAware;
        }
        c->reader->fn = &nilAwareFns;
        if (rdma_create_id(g.ec, &c->id, c, RDMA_PS_TCP))
            die("rdma_create_id: %s", strerror(errno));
        if (rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&dst, 5000))
            die("rdma_resolve_addr: %s", strerror(errno));
    }

    double t0 = now(), deadline = t0 + g.timeoutS;
    int delayed = g.readDelayMs == 0;
    double sendAt = 0;
    for (;;) {
        int done = 0, connected = 0;
        for (int i = 0; i < g.nconns; i++) {
            done += connDone(&g.conns[i]);
            connected += g.conns[i].connected;
        }
        if (done == g.nconns)
            break;
        if (now() > deadline) {
            long got = 0;
            for (int i = 0; i < g.nconns; i++)
                got += g.conns[i].replies;
            fprintf(stderr, "timeout after %d s: %d/%d connections done, %ld replies\n", g.timeoutS,
                    done, g.nconns, got);
            return 1;
        }
        if (!g.sendReady && connected == g.nconns) {
            if (sendAt == 0)
                sendAt = now() + g.sendDelayMs / 1000.0;
            if (now() >= sendAt) {
                g.sendReady = 1;
                for (int i = 0; i < g.nconns; i++)
                    pump(&g.conns[i]);
            }
        }
        if (!delayed && connected == g.nconns) {
            usleep((useconds_t)g.readDelayMs * 1000);
            delayed = 1;
        }
        struct pollfd pfd[2] = {{.fd = g.ec->fd, .events = POLLIN},
                                {.fd = g.cc ? g.cc->fd : -1, .events = POLLIN}};
        poll(pfd, 2, 100);
        onCmEvent();
        if (delayed)
            pollComp();
    }

    long replies = 0, errors = 0;
    int failed = 0, closed = 0;
    for (int i = 0; i < g.nconns; i++) {
        Conn *c = &g.conns[i];
        replies += c->replies;
        errors += c->errors;
        failed |= c->failed;
        closed += c->closed;
        if (!g.garbage && g.expect >= 0 && c->replies < g.expect) {
            fprintf(stderr, "conn %d: closed after %ld of %ld replies\n", i, c->replies, g.expect);
            failed = 1;
        }
    }
    if (g.quiet || g.nconns > 1) {
        if (g.nconns > 1)
            printf("connections=%d ", g.nconns);
        printf("replies=%ld errors=%ld\n", replies, errors);
    }
    if (g.garbage || g.expect < 0)
        printf("disconnected=%d\n", closed);
    fflush(stdout);
    for (int i = 0; i < g.nconns; i++) {
        Conn *c = &g.conns[i];
        if (c->connected && !c->closed)
            rdma_disconnect(c->id);
        if (c->id && c->id->qp)
            rdma_destroy_qp(c->id);
        if (c->cq)
            ibv_destroy_cq(c->cq);
        if (c->ringMr)
            ibv_dereg_mr(c->ringMr);
        if (c->txMr)
            ibv_dereg_mr(c->txMr);
        if (c->id)
            rdma_destroy_id(c->id);
        redisReaderFree(c->reader);
        free(c->ring);
        free(c->tx);
    }
    return failed ? 1 : 0;
}
