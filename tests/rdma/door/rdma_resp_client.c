/*
 * rdma_resp_client.c - the test client of the RDMA door (Redis clients over
 * RDMA, rdma-client-port). It speaks the Valkey Over RDMA protocol through
 * the project's stream endpoint (module/rdma/stream.h), sends RESP requests
 * and parses the replies itself (RESP2 and RESP3, every type), so the suite
 * sees exactly what a client sees. The same script can run over TCP
 * (--tcp), to compare the two byte for byte. With --hostile it drops the
 * stream and speaks raw verbs, to break the protocol on purpose.
 *
 *   rdma_resp_client -h ADDR -p PORT [options] < script
 *
 * The script has one command per line, arguments separated by spaces; an
 * argument @rep:C:N stands for N copies of the character C. Commands are
 * sent as multibulk requests, all at once (a pipeline), and each reply is
 * printed on its own line(s), aggregates with their elements indented:
 *
 *   status:OK  err:ERR ...  int:3  bulk:5:hello  bulk:1048576:fnv=<hex>  nil (a $-1)
 *   nilarray (a *-1)  null (RESP3 _)  double:3.5  bool:t  bignum:123  verb:txt:hello
 *   array:2  map:1  set:2  push:3  attr:1 (the reply it annotates follows)
 *
 * Options:
 *   -n N            send the script N times (default 1)
 *   -c N            open N connections at once, each sending the script
 *   -q              print only "replies=R errors=E" (and connections=N)
 *   -t SECS         give up after SECS seconds (default 60): exit 1
 *   -r N            replies to wait for per connection (default: one per
 *                   command; with --raw: until the server closes)
 *   --raw           send stdin byte for byte
 *   --tcp           use TCP to ADDR:PORT instead of RDMA
 *   --rx-size B     this client's RX buffer (default 1 MiB; 65536 forces
 *                   re-registration for any larger reply)
 *   --read-delay MS     read nothing for MS ms once connected
 *   --send-delay MS     once every connection is up, wait MS ms before sending
 *   --vanish-after K    exit without disconnecting after K replies
 *   --print-addr    print "laddr=IP:PORT" (this client's address) first
 *   --dump FILE     write every byte received (connection 0) to FILE
 *   --hostile KIND  raw verbs: connect, register an RX buffer, then break
 *                   the protocol and wait to be disconnected. KIND: opcode
 *                   (unknown control opcode), short (a 8-byte control
 *                   message), oversized (a 64-byte one), register-twice (a
 *                   second RegisterXferMemory while the first has room),
 *                   bad-length (an RX buffer of 0 bytes), overrun-imm (an
 *                   immediate claiming more than the server's buffer holds),
 *                   overrun-mr (a write past the end of the server's buffer),
 *                   silent (never registers a buffer: the handshake deadline);
 *                   or rx-grow (not hostile: sends the script, then fills the
 *                   server's RX buffer exactly; prints its size before and
 *                   after the server registers it again)
 *
 * Exit status: 0 when every expected reply arrived (with --raw and no -r,
 * or --hostile: when the server closed the connection), 1 otherwise, 2 for
 * bad usage. "disconnected=N" is printed when the server's close is what
 * was expected.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rdma/stream.h"
#include "rdma/streamproto.h"

/* A growable byte buffer. */
typedef struct Buf {
    char *p;
    size_t len, cap;
} Buf;

typedef struct Conn {
    int idx;
    RdmaStream *s; /* RDMA */
    int fd;        /* TCP */
    size_t outOff;
    Buf in; /* received, not yet parsed */
    long replies, errors;
    int open, closed, failed;
} Conn;

static struct {
    const char *addr, *dumpPath, *hostile;
    int port, nconns, repeat, quiet, raw, tcp, timeoutS, readDelayMs, sendDelayMs, printAddr;
    uint32_t rxSize;
    long expect, vanishAfter;
    Buf req;
    FILE *dump;
    Conn *conns;
} g;

/* ---- helpers ----------------------------------------------------------------------------- */

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
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void bufAppend(Buf *b, const void *p, size_t n)
{
    if (!n)
        return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p)
            die("%s", "out of memory");
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
}

static void bufPrintf(Buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void bufPrintf(Buf *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    bufAppend(b, tmp, n < (int)sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
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

/* ---- requests ---------------------------------------------------------------------------- */

/* Turn one script line into a multibulk request. Returns 1 if it held a
 * command, 0 for a blank line. */
static int reqFromLine(char *line)
{
    char *args[1024], *save = NULL, head[32];
    int argc = 0;

    for (char *tok = strtok_r(line, " \r\n", &save); tok && argc < 1024;
         tok = strtok_r(NULL, " \r\n", &save))
        args[argc++] = tok;
    if (!argc)
        return 0;
    bufAppend(&g.req, head, (size_t)snprintf(head, sizeof(head), "*%d\r\n", argc));
    for (int i = 0; i < argc; i++) {
        char ch;
        long n;
        if (sscanf(args[i], "@rep:%c:%ld", &ch, &n) == 2 && n >= 0) {
            bufAppend(&g.req, head, (size_t)snprintf(head, sizeof(head), "$%ld\r\n", n));
            char chunk[4096];
            memset(chunk, ch, sizeof(chunk));
            for (long done = 0; done < n;) {
                long k = n - done < (long)sizeof(chunk) ? n - done : (long)sizeof(chunk);
                bufAppend(&g.req, chunk, (size_t)k);
                done += k;
            }
        } else {
            size_t len = strlen(args[i]);
            bufAppend(&g.req, head, (size_t)snprintf(head, sizeof(head), "$%zu\r\n", len));
            bufAppend(&g.req, args[i], len);
        }
        bufAppend(&g.req, "\r\n", 2);
    }
    return 1;
}

/* Read stdin into the request stream; returns the number of commands (-1
 * with --raw: not known). */
static long readScript(void)
{
    if (g.raw) {
        char buf[65536];
        ssize_t n;
        while ((n = read(0, buf, sizeof(buf))) > 0)
            bufAppend(&g.req, buf, (size_t)n);
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

/* ---- replies: RESP2 and RESP3 ------------------------------------------------------------ */

/* The line at p (up to \r\n) within n bytes: its length, or -1 if the
 * line is not complete yet. */
static long lineLen(const char *p, size_t n)
{
    for (size_t i = 0; i + 1 < n; i++)
        if (p[i] == '\r' && p[i + 1] == '\n')
            return (long)i;
    return -1;
}

static void printBlob(Buf *o, const char *tag, const char *p, long len)
{
    if (len > 64) {
        bufPrintf(o, "%s:%ld:fnv=%016llx\n", tag, len, (unsigned long long)fnv1a(p, (size_t)len));
        return;
    }
    bufPrintf(o, "%s:%ld:", tag, len);
    for (long i = 0; i < len; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch >= 32 && ch < 127 && ch != '\\')
            bufAppend(o, &p[i], 1);
        else
            bufPrintf(o, "\\x%02x", ch);
    }
    bufAppend(o, "\n", 1);
}

/* Parse one reply at p[0..n) into printable lines at depth. Returns the
 * bytes it took, 0 if incomplete, -1 on a protocol error. *isErr is set
 * for an error reply. */
static long parseReply(const char *p, size_t n, int depth, Buf *o, int *isErr)
{
    long ll = n ? lineLen(p, n) : -1;
    if (ll < 0)
        return 0;
    char line[128];
    long copy = ll - 1 < (long)sizeof(line) - 1 ? ll - 1 : (long)sizeof(line) - 1;
    memcpy(line, p + 1, (size_t)copy);
    line[copy] = '\0';
    long used = ll + 2, count;
    char type = p[0];
    bufPrintf(o, "%*s", depth * 2, "");
    switch (type) {
        case '+':
        case '-':
        case ':':
        case ',':
        case '(':
        case '#': {
            static const char *tags = "+status-err:int,double(bignum#bool";
            const char *t = strchr(tags, type) + 1;
            size_t tl = strcspn(t, "+-:,(#");
            bufAppend(o, t, tl);
            bufAppend(o, ":", 1);
            bufAppend(o, p + 1, (size_t)ll - 1);
            bufAppend(o, "\n", 1);
            if (type == '-' && isErr)
                *isErr = 1;
            return used;
        }
        case '_':
            bufPrintf(o, "null\n");
            return used;
        case '$':
        case '!':
        case '=': {
            long len = atol(line);
            if (len == -1 && type == '$') {
                bufPrintf(o, "nil\n");
                return used;
            }
            if (len < 0)
                return -1;
            if ((size_t)(used + len + 2) > n)
                return 0;
            if (type == '!' && isErr)
                *isErr = 1;
            printBlob(o, type == '$' ? "bulk" : type == '!' ? "err" : "verb", p + used, len);
            return used + len + 2;
        }
        case '*':
        case '%':
        case '~':
        case '>':
        case '|': {
            count = atol(line);
            if (count == -1 && type == '*') {
                bufPrintf(o, "nilarray\n");
                return used;
            }
            if (count < 0)
                return -1;
            const char *tag = type == '*'   ? "array"
                              : type == '%' ? "map"
                              : type == '~' ? "set"
                              : type == '>' ? "push"
                                            : "attr";
            bufPrintf(o, "%s:%ld\n", tag, count);
            long items = type == '%' || type == '|' ? count * 2 : count;
            for (long i = 0; i < items; i++) {
                long k = parseReply(p + used, n - (size_t)used, depth + 1, o, NULL);
                if (k <= 0)
                    return k;
                used += k;
            }
            if (type == '|') { /* the reply it annotates follows */
                long k = parseReply(p + used, n - (size_t)used, depth, o, isErr);
                if (k <= 0)
                    return k;
                used += k;
            }
            return used;
        }
        default:
            return -1;
    }
}

static void connFeed(Conn *c, const void *p, size_t n)
{
    if (g.dump && c->idx == 0)
        fwrite(p, 1, n, g.dump);
    bufAppend(&c->in, p, n);
    size_t off = 0;
    while (off < c->in.len) {
        Buf o = {0};
        int isErr = 0;
        long k = parseReply(c->in.p + off, c->in.len - off, 0, &o, &isErr);
        if (k < 0) {
            fprintf(stderr, "conn %d: protocol error in the replies\n", c->idx);
            c->failed = 1;
            free(o.p);
            return;
        }
        if (k == 0) {
            free(o.p);
            break;
        }
        off += (size_t)k;
        c->replies++;
        c->errors += isErr;
        if (!g.quiet && c->idx == 0)
            fwrite(o.p, 1, o.len, stdout);
        free(o.p);
        if (g.vanishAfter >= 0 && c->replies >= g.vanishAfter) {
            fflush(stdout);
            _exit(0); /* no disconnect: the kernel tears the connection down */
        }
    }
    memmove(c->in.p, c->in.p + off, c->in.len - off);
    c->in.len -= off;
}

/* ---- connections: RDMA stream or TCP ---------------------------------------------------- */

static void connOpen(Conn *c)
{
    char err[256];
    if (g.tcp) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g.port)};
        if (inet_pton(AF_INET, g.addr, &sa.sin_addr) != 1)
            die("bad address %s", g.addr);
        c->fd = socket(AF_INET, SOCK_STREAM, 0);
        if (c->fd < 0 || connect(c->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
            die("tcp connect: %s", strerror(errno));
        int one = 1;
        setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
        c->open = 1;
        return;
    }
    RdmaStreamConfig cfg = {.rxSize = g.rxSize};
    c->s = rdmaStreamConnect(g.addr, g.port, &cfg, err, sizeof(err));
    if (!c->s)
        die("connect: %s", err);
    c->fd = -1;
}

static int connFd(const Conn *c)
{
    return g.tcp ? c->fd : rdmaStreamFd(c->s);
}

/* One round of progress: writes (if sending), reads (if reading). */
static void connPump(Conn *c, int sending, int reading)
{
    char buf[65536];
    if (c->closed || c->failed)
        return;
    if (g.tcp) {
        while (sending && c->outOff < g.req.len) {
            ssize_t n = write(c->fd, g.req.p + c->outOff, g.req.len - c->outOff);
            if (n <= 0)
                break;
            c->outOff += (size_t)n;
        }
        while (reading) {
            ssize_t n = read(c->fd, buf, sizeof(buf));
            if (n > 0) {
                connFeed(c, buf, (size_t)n);
                continue;
            }
            if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK))
                c->closed = 1;
            break;
        }
        return;
    }
    rdmaStreamProcess(c->s);
    RdmaStreamState st = rdmaStreamGetState(c->s);
    if (st == RDMA_STREAM_OPEN && rdmaStreamWritable(c->s) && !c->open) {
        c->open = 1;
        if (g.printAddr && c->idx == 0) {
            const struct sockaddr_in *la = (const struct sockaddr_in *)rdmaStreamLocalAddr(c->s);
            char ip[64] = "?";
            if (la)
                inet_ntop(AF_INET, &la->sin_addr, ip, sizeof(ip));
            printf("laddr=%s:%d\n", ip, la ? ntohs(la->sin_port) : 0);
            fflush(stdout);
        }
    }
    while (sending && c->open && c->outOff < g.req.len) {
        ssize_t n = rdmaStreamWrite(c->s, g.req.p + c->outOff, g.req.len - c->outOff);
        if (n <= 0)
            break;
        c->outOff += (size_t)n;
        rdmaStreamProcess(c->s);
    }
    while (reading) {
        size_t n = rdmaStreamRead(c->s, buf, sizeof(buf));
        if (!n)
            break;
        connFeed(c, buf, n);
    }
    st = rdmaStreamGetState(c->s);
    if (st >= RDMA_STREAM_CLOSED && (!reading || !rdmaStreamReadable(c->s))) {
        if (st == RDMA_STREAM_FAILED && g.expect >= 0 && c->replies < g.expect)
            fprintf(stderr, "conn %d: %s\n", c->idx, rdmaStreamError(c->s));
        c->closed = 1;
    }
}

static void connClose(Conn *c)
{
    if (g.tcp) {
        if (c->fd >= 0)
            close(c->fd);
    } else {
        rdmaStreamFree(c->s);
    }
    free(c->in.p);
}

static int connDone(const Conn *c)
{
    if (c->failed || c->closed)
        return 1;
    return g.expect >= 0 && c->replies >= g.expect;
}

/* ---- hostile: raw verbs --------------------------------------------------------------------- */

/* The raw side of --hostile: one RC QP made by hand, so that every rule of
 * the protocol can be broken. */
static struct {
    struct rdma_event_channel *ec;
    struct rdma_cm_id *id;
    struct ibv_pd *pd;
    struct ibv_cq *cq;
    uint8_t *rx, *cmd;
    struct ibv_mr *rxMr, *cmdMr;
    SpCmd peer; /* the server's RegisterXferMemory */
    int havePeer, registrations;
} h;

#define H_RX     (64u * 1024)
#define H_RECVS  16
#define H_CMDBUF 4096 /* receive slots of 64 bytes, then the send area; one page */

/* Wait for one rdma_cm event of type want (exit 1 on another or timeout). */
static void hWaitCm(enum rdma_cm_event_type want)
{
    struct rdma_cm_event *ev;
    if (rdma_get_cm_event(h.ec, &ev))
        die("rdma_get_cm_event: %s", strerror(errno));
    enum rdma_cm_event_type got = ev->event;
    rdma_ack_cm_event(ev);
    if (got != want)
        die("unexpected rdma_cm event %s", rdma_event_str(got));
}

static void hPostRecv(int i)
{
    struct ibv_sge sge = {.addr = (uintptr_t)(h.cmd + i * 64), .length = 32, .lkey = h.cmdMr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1}, *bad;
    if (ibv_post_recv(h.id->qp, &wr, &bad))
        die("%s", "ibv_post_recv failed");
}

/* Post one work request; len bytes of the command area's send slot. */
static void hPost(enum ibv_wr_opcode op, uint32_t len, uint64_t remote, uint32_t rkey, uint32_t imm)
{
    struct ibv_sge sge = {
        .addr = (uintptr_t)(h.cmd + H_RECVS * 64), .length = len, .lkey = h.cmdMr->lkey};
    struct ibv_send_wr wr = {.wr_id = 1000,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = op,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    wr.imm_data = htonl(imm);
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
    if (ibv_post_send(h.id->qp, &wr, &bad))
        die("%s", "ibv_post_send failed");
}

static void hSendCmd(const SpCmd *c, uint32_t len)
{
    memset(h.cmd + H_RECVS * 64, 0, 256);
    spEncode(c, h.cmd + H_RECVS * 64);
    hPost(IBV_WR_SEND, len, 0, 0, 0);
}

/* Poll completions until deadline; take the server's RegisterXferMemory.
 * Returns 1 when the connection ended (an error completion or
 * DISCONNECTED), 0 at the deadline or once the peer's buffer is known
 * (untilPeer). */
static int hPoll(double deadline, int untilPeer)
{
    while (now() < deadline) {
        struct ibv_wc wc[8];
        int n = ibv_poll_cq(h.cq, 8, wc);
        for (int i = 0; i < n; i++) {
            if (wc[i].status != IBV_WC_SUCCESS)
                return 1;
            if (wc[i].opcode == IBV_WC_RECV) {
                SpCmd c;
                char why[128];
                if (spDecode(h.cmd + wc[i].wr_id * 64, wc[i].byte_len, &c, why, sizeof(why)) == 0 &&
                    c.opcode == SP_OP_REGISTER_XFER_MEM) {
                    h.peer = c;
                    h.havePeer = 1;
                    h.registrations++;
                }
            }
            if (wc[i].opcode == IBV_WC_RECV || wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM)
                hPostRecv((int)wc[i].wr_id);
        }
        if (untilPeer && h.havePeer)
            return 0;
        struct pollfd p = {.fd = h.ec->fd, .events = POLLIN};
        if (poll(&p, 1, n ? 0 : 5) > 0) {
            struct rdma_cm_event *ev;
            if (rdma_get_cm_event(h.ec, &ev) == 0) {
                enum rdma_cm_event_type t = ev->event;
                rdma_ack_cm_event(ev);
                if (t == RDMA_CM_EVENT_DISCONNECTED)
                    return 1;
            }
        }
    }
    return 0;
}

/* rx-grow: print the size of the server's RX buffer, then send the
 * script's requests (AUTH) followed by an ECHO that fills the buffer
 * exactly, so that the server consumes it whole and registers its buffer
 * again, and print the new size: "rx=<before> rx=<after>". Returns 0 when
 * the second registration came, else 1. */
static int hRxGrow(double deadline)
{
    uint32_t first = h.peer.length, n = first;
    char *buf = malloc(n);
    struct ibv_mr *mr = buf ? ibv_reg_mr(h.pd, buf, n, IBV_ACCESS_LOCAL_WRITE) : NULL;
    if (!mr)
        die("%s", "cannot register the request buffer");
    if (g.req.len + 64 > n)
        die("%s", "the script is too long for the server's RX buffer");
    if (g.req.len)
        memcpy(buf, g.req.p, g.req.len);
    /* *2 $4 ECHO $<len> <bytes>: header lengths depend on len's digits. */
    size_t room = n - g.req.len, len = room;
    int hdr = 0;
    for (int i = 0; i < 3; i++) {
        hdr = snprintf(NULL, 0, "*2\r\n$4\r\nECHO\r\n$%zu\r\n", len);
        len = room - (size_t)hdr - 2;
    }
    snprintf(buf + g.req.len, (size_t)hdr + 1, "*2\r\n$4\r\nECHO\r\n$%zu\r\n", len);
    memset(buf + g.req.len + hdr, 'g', len);
    memcpy(buf + n - 2, "\r\n", 2);
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = n, .lkey = mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 1000,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    wr.imm_data = htonl(n);
    wr.wr.rdma.remote_addr = h.peer.addr;
    wr.wr.rdma.rkey = h.peer.key;
    if (ibv_post_send(h.id->qp, &wr, &bad))
        die("%s", "ibv_post_send failed");
    int before = h.registrations;
    while (h.registrations == before && now() < deadline)
        if (hPoll(now() + 0.1, 0))
            break;
    printf("rx=%u rx=%u\n", first, h.registrations > before ? h.peer.length : 0);
    return h.registrations > before ? 0 : 1;
}

static int runHostile(const char *kind)
{
    struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons((uint16_t)g.port)};
    if (inet_pton(AF_INET, g.addr, &dst.sin_addr) != 1)
        die("bad address %s", g.addr);
    h.ec = rdma_create_event_channel();
    if (!h.ec || rdma_create_id(h.ec, &h.id, NULL, RDMA_PS_TCP))
        die("rdma_create_id: %s", strerror(errno));
    if (rdma_resolve_addr(h.id, NULL, (struct sockaddr *)&dst, 5000))
        die("rdma_resolve_addr: %s", strerror(errno));
    hWaitCm(RDMA_CM_EVENT_ADDR_RESOLVED);
    if (rdma_resolve_route(h.id, 5000))
        die("rdma_resolve_route: %s", strerror(errno));
    hWaitCm(RDMA_CM_EVENT_ROUTE_RESOLVED);
    h.pd = ibv_alloc_pd(h.id->verbs);
    h.cq = h.pd ? ibv_create_cq(h.id->verbs, 64, NULL, NULL, 0) : NULL;
    if (!h.cq)
        die("%s", "cannot create the PD / CQ");
    struct ibv_qp_init_attr qa = {.send_cq = h.cq, .recv_cq = h.cq, .qp_type = IBV_QPT_RC};
    qa.cap.max_send_wr = 16;
    qa.cap.max_recv_wr = H_RECVS;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    if (rdma_create_qp(h.id, h.pd, &qa))
        die("rdma_create_qp: %s", strerror(errno));
    h.rx = aligned_alloc(4096, H_RX);
    h.cmd = aligned_alloc(4096, H_CMDBUF);
    h.rxMr = ibv_reg_mr(h.pd, h.rx, H_RX, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    h.cmdMr = ibv_reg_mr(h.pd, h.cmd, H_CMDBUF, IBV_ACCESS_LOCAL_WRITE);
    if (!h.rxMr || !h.cmdMr)
        die("ibv_reg_mr: %s", strerror(errno));
    for (int i = 0; i < H_RECVS; i++)
        hPostRecv(i);
    struct rdma_conn_param cp = {.retry_count = 7, .rnr_retry_count = 7};
    if (rdma_connect(h.id, &cp))
        die("rdma_connect: %s", strerror(errno));
    hWaitCm(RDMA_CM_EVENT_ESTABLISHED);
    fcntl(h.ec->fd, F_SETFL, fcntl(h.ec->fd, F_GETFL) | O_NONBLOCK);

    SpCmd reg = {.opcode = SP_OP_REGISTER_XFER_MEM,
                 .addr = (uintptr_t)h.rx,
                 .length = H_RX,
                 .key = h.rxMr->rkey};
    double deadline = now() + g.timeoutS;
    if (!strcmp(kind, "bad-length")) {
        reg.length = 0;
        hSendCmd(&reg, SP_CMD_SIZE);
    } else if (strcmp(kind, "silent")) {
        hSendCmd(&reg, SP_CMD_SIZE);
    }
    int passive = !strcmp(kind, "silent") || !strcmp(kind, "bad-length");
    int gone = hPoll(now() + 10, 1);
    if (!gone && !h.havePeer && !passive)
        die("%s", "the server never registered its RX buffer");
    SpCmd bad = {.opcode = 0x7777};
    if (gone || passive) {
        /* nothing more to send: wait to be disconnected */
    } else if (!strcmp(kind, "opcode")) {
        hSendCmd(&bad, SP_CMD_SIZE);
    } else if (!strcmp(kind, "short")) {
        hSendCmd(&reg, 8);
    } else if (!strcmp(kind, "oversized")) {
        hSendCmd(&reg, 64);
    } else if (!strcmp(kind, "register-twice")) {
        hSendCmd(&reg, SP_CMD_SIZE);
    } else if (!strcmp(kind, "overrun-imm")) {
        memcpy(h.cmd + H_RECVS * 64, "*1\r\n$4\r\nPING\r\n", 14);
        hPost(IBV_WR_RDMA_WRITE_WITH_IMM, 14, h.peer.addr, h.peer.key, h.peer.length + 1);
    } else if (!strcmp(kind, "rx-grow")) {
        return hRxGrow(deadline);
    } else if (!strcmp(kind, "overrun-mr")) {
        memset(h.cmd + H_RECVS * 64, 'x', 64);
        hPost(IBV_WR_RDMA_WRITE_WITH_IMM, 64, h.peer.addr + h.peer.length - 16, h.peer.key, 64);
    } else {
        die("unknown --hostile kind '%s'", kind);
    }
    if (!gone)
        gone = hPoll(deadline, 0);
    printf("disconnected=%d\n", gone);
    return gone ? 0 : 1;
}

/* ---- main ------------------------------------------------------------------------------------ */

static void usage(void)
{
    fprintf(stderr, "usage: rdma_resp_client -h ADDR -p PORT [-n N] [-c N] [-q] [-t SECS] [-r N] "
                    "[--raw] [--tcp] [--rx-size B] [--read-delay MS] [--send-delay MS] "
                    "[--vanish-after K] [--print-addr] [--dump FILE] [--hostile KIND] "
                    "< script\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"raw", no_argument, NULL, 'R'},
                                         {"tcp", no_argument, NULL, 'T'},
                                         {"rx-size", required_argument, NULL, 'X'},
                                         {"read-delay", required_argument, NULL, 'D'},
                                         {"send-delay", required_argument, NULL, 'W'},
                                         {"vanish-after", required_argument, NULL, 'V'},
                                         {"print-addr", no_argument, NULL, 'A'},
                                         {"dump", required_argument, NULL, 'U'},
                                         {"hostile", required_argument, NULL, 'H'},
                                         {NULL, 0, NULL, 0}};
    int o;
    long replies = -2;

    g.nconns = 1;
    g.repeat = 1;
    g.timeoutS = 60;
    g.vanishAfter = -1;
    g.rxSize = SP_RX_DEFAULT;
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
                replies = atol(optarg);
                break;
            case 'R':
                g.raw = 1;
                break;
            case 'T':
                g.tcp = 1;
                break;
            case 'X':
                g.rxSize = (uint32_t)atol(optarg);
                break;
            case 'D':
                g.readDelayMs = atoi(optarg);
                break;
            case 'W':
                g.sendDelayMs = atoi(optarg);
                break;
            case 'V':
                g.vanishAfter = atol(optarg);
                break;
            case 'A':
                g.printAddr = 1;
                break;
            case 'U':
                g.dumpPath = optarg;
                break;
            case 'H':
                g.hostile = optarg;
                break;
            default:
                usage();
        }
    }
    if (!g.addr || g.port <= 0 || g.nconns < 1 || g.repeat < 1 || g.timeoutS < 1 ||
        g.rxSize < SP_RX_MIN || g.rxSize > SP_RX_MAX)
        usage();
    if (g.hostile) {
        if (!strcmp(g.hostile, "rx-grow"))
            readScript();
        return runHostile(g.hostile);
    }

    long cmds = readScript();
    if (g.repeat > 1) {
        size_t one = g.req.len;
        char *copy = malloc(one ? one : 1);
        if (!copy)
            die("%s", "out of memory");
        memcpy(copy, g.req.p, one);
        for (int i = 1; i < g.repeat; i++)
            bufAppend(&g.req, copy, one);
        free(copy);
    }
    g.expect = replies != -2 ? replies : g.raw ? -1 : cmds * g.repeat;
    if (g.dumpPath && !(g.dump = fopen(g.dumpPath, "wb")))
        die("cannot write %s", g.dumpPath);

    g.conns = calloc((size_t)g.nconns, sizeof(Conn));
    struct pollfd *pfd = calloc((size_t)g.nconns, sizeof(struct pollfd));
    if (!g.conns || !pfd)
        die("%s", "out of memory");
    for (int i = 0; i < g.nconns; i++) {
        g.conns[i].idx = i;
        connOpen(&g.conns[i]);
    }
    double deadline = now() + g.timeoutS, allOpenAt = 0;
    for (;;) {
        int done = 0, open = 0;
        for (int i = 0; i < g.nconns; i++) {
            done += connDone(&g.conns[i]);
            open += g.conns[i].open;
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
        if (open == g.nconns && allOpenAt == 0)
            allOpenAt = now();
        int sending = allOpenAt > 0 && now() >= allOpenAt + g.sendDelayMs / 1000.0;
        int reading = allOpenAt > 0 && now() >= allOpenAt + g.readDelayMs / 1000.0;
        for (int i = 0; i < g.nconns; i++) {
            pfd[i].fd = connFd(&g.conns[i]);
            pfd[i].events = POLLIN | (g.tcp && sending ? POLLOUT : 0);
        }
        poll(pfd, (nfds_t)g.nconns, 10);
        for (int i = 0; i < g.nconns; i++)
            connPump(&g.conns[i], sending, reading || !g.conns[i].open);
    }

    long total = 0, errors = 0;
    int failed = 0, closed = 0;
    for (int i = 0; i < g.nconns; i++) {
        Conn *c = &g.conns[i];
        total += c->replies;
        errors += c->errors;
        failed |= c->failed;
        closed += c->closed;
        if (g.expect >= 0 && c->replies < g.expect) {
            fprintf(stderr, "conn %d: closed after %ld of %ld replies\n", i, c->replies, g.expect);
            failed = 1;
        }
    }
    if (g.quiet || g.nconns > 1) {
        if (g.nconns > 1)
            printf("connections=%d ", g.nconns);
        printf("replies=%ld errors=%ld\n", total, errors);
    }
    if (g.expect < 0)
        printf("disconnected=%d\n", closed);
    fflush(stdout);
    if (g.dump)
        fclose(g.dump);
    for (int i = 0; i < g.nconns; i++)
        connClose(&g.conns[i]);
    free(pfd);
    return failed ? 1 : 0;
}
