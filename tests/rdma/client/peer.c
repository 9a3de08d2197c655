/*
 * peer.c - a tiny Redis server over RDMA for testing the client library
 * (client/rdmaconn.c) without the module: connections are accepted as
 * module/rdma/stream.h streams (the Valkey Over RDMA protocol), and a
 * handful of commands are answered from an in-memory table, enough for every
 * RESP2 reply type, pipelines, AUTH and redis-benchmark's PING/SET/GET. Its
 * receive buffer size is a knob (--rx-size, down to the protocol's 64 KiB),
 * which the module's door does not offer: a client's writes then wrap many
 * times within one pipeline.
 *
 *   peer ADDR PORT [--rx-size N] [--requirepass PW] [--seconds S]
 *
 * Commands: PING [msg], ECHO m, SET k v, GET k, DEL k, INCR k, AUTH pw,
 * CONFIG GET save|appendonly|maxmemory ("0"; other names: empty array),
 * COMMAND INFO name (a nested array), XREAD ... (a nil array), BLOB n (a
 * bulk of n pattern bytes), TYPES (an array holding one reply of every RESP2
 * type), NILARRAY, DBSIZE, QUIT.
 * It exits after --seconds (default 600) or on SIGTERM; every connection is
 * freed (the stream flushes its queue pair) first. Single-threaded: one
 * epoll loop for the listener's rdma_cm channel and each stream's
 * descriptor. Prints "peer: ready" on stdout once listening.
 */
#include <arpa/inet.h>
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

#include "rdma/stream.h"
#include "rdma/streamproto.h"

#define PEER_KEYS_MAX 4096

typedef struct PeerConn {
    RdmaStream *s;
    int authed;
    int quitting; /* QUIT answered: close once the reply is out */
    redisReader *reader;
    char *out;
    size_t olen, opos, ocap;
    struct PeerConn *next;
} PeerConn;

static struct {
    struct rdma_event_channel *ec;
    struct rdma_cm_id *listenId;
    int ep;
    uint32_t rxSize;
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

/* Unlink and free a connection (the stream disconnects and flushes first). Can't fail. */
static void peerFree(PeerConn *c)
{
    for (PeerConn **pp = &pr.conns; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            pr.nconns--;
            break;
        }
    }
    if (rdmaStreamFd(c->s) >= 0)
        epoll_ctl(pr.ep, EPOLL_CTL_DEL, rdmaStreamFd(c->s), NULL);
    rdmaStreamFree(c->s);
    if (c->reader)
        redisReaderFree(c->reader);
    free(c->out);
    free(c);
}

/* Write queued replies as far as the client's buffer takes them. Returns 0 or -1. */
static int peerPump(PeerConn *c)
{
    while (c->opos < c->olen) {
        ssize_t n = rdmaStreamWrite(c->s, c->out + c->opos, c->olen - c->opos);
        if (n < 0)
            return -1;
        if (n == 0)
            break;
        c->opos += (size_t)n;
    }
    if (c->opos == c->olen)
        c->opos = c->olen = 0;
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

/* ---- streams ------------------------------------------------------------------------------ */

/* Feed the arrived requests to the reader and execute them. Returns 0, or -1 to close. */
static int peerOnData(PeerConn *c)
{
    const uint8_t *p;
    size_t len;
    void *req;

    while ((p = rdmaStreamPeek(c->s, &len)) != NULL && len > 0) {
        if (!c->quitting && redisReaderFeed(c->reader, (const char *)p, len) != REDIS_OK)
            return -1;
        if (rdmaStreamConsume(c->s, len) == -1)
            return -1;
    }
    while (!c->quitting) {
        if (redisReaderGetReply(c->reader, &req) != REDIS_OK) {
            peerLog("bad request stream: %s", c->reader->errstr);
            return -1;
        }
        if (req == NULL)
            break;
        if (peerExec(c, req) == -1)
            c->quitting = 1; /* closed once the +OK went out */
        freeReplyObject(req);
    }
    return 0;
}

/* A stream's descriptor is readable: process, serve, write. Returns 0, or -1 to close. */
static int peerOnStream(PeerConn *c)
{
    int rc = rdmaStreamProcess(c->s);

    if (peerOnData(c) == -1 || rc == -1)
        return -1;
    if (peerPump(c) == -1)
        return -1;
    /* Close only once QUIT's reply has left (a bounded wait for its write). */
    if (c->quitting && c->olen == 0) {
        for (int i = 0; i < 20; i++)
            rdmaStreamWait(c->s, 10);
        return -1;
    }
    return 0;
}

/* A client connects: accept it as a stream and watch its descriptor. */
static void peerOnRequest(struct rdma_cm_id *id)
{
    RdmaStreamConfig cfg = {.rxSize = pr.rxSize};
    PeerConn *c = calloc(1, sizeof(*c));
    char err[256];

    if (c == NULL || (c->reader = redisReaderCreate()) == NULL) {
        peerLog("out of memory");
        rdma_reject(id, NULL, 0);
        rdma_destroy_id(id);
        free(c);
        return;
    }
    c->s = rdmaStreamAccept(id, &cfg, err, sizeof(err));
    if (c->s == NULL) {
        peerLog("accept: %s", err);
        redisReaderFree(c->reader);
        free(c);
        return;
    }
    rdmaStreamSetUserCtx(c->s, c);
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (epoll_ctl(pr.ep, EPOLL_CTL_ADD, rdmaStreamFd(c->s), &ev) == -1) {
        peerLog("epoll_ctl: %s", strerror(errno));
        rdmaStreamFree(c->s);
        redisReaderFree(c->reader);
        free(c);
        return;
    }
    c->next = pr.conns;
    pr.conns = c;
    pr.nconns++;
}

/* The PeerConn of an accepted id, or NULL (a request that was refused). */
static PeerConn *peerById(const struct rdma_cm_id *id)
{
    for (PeerConn *c = pr.conns; c; c = c->next) {
        if (rdmaStreamId(c->s) == id)
            return c;
    }
    return NULL;
}

/* Drain the listener's rdma_cm events: requests, established, disconnects. */
static void peerOnCm(void)
{
    struct rdma_cm_event *ev;

    while (rdma_get_cm_event(pr.ec, &ev) == 0) {
        struct rdma_cm_id *id = ev->id;
        enum rdma_cm_event_type type = ev->event;
        int status = ev->status;

        rdma_ack_cm_event(ev);
        if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
            peerOnRequest(id);
            continue;
        }
        PeerConn *c = peerById(id);
        if (c && rdmaStreamCmEvent(c->s, type, status) == -1)
            peerFree(c);
        else if (c && peerOnStream(c) == -1)
            peerFree(c);
    }
}

/* ---- main --------------------------------------------------------------------------------- */

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
        fprintf(stderr, "usage: peer ADDR PORT [--rx-size N] [--requirepass PW] [--seconds S]\n");
        return 2;
    }
    pr.rxSize = SP_RX_DEFAULT;
    for (int i = 3; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rx-size"))
            pr.rxSize = (uint32_t)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--requirepass"))
            pr.password = argv[i + 1];
        else if (!strcmp(argv[i], "--seconds"))
            seconds = atoi(argv[i + 1]);
    }
    if (pr.rxSize < SP_RX_MIN || pr.rxSize > SP_RX_MAX) {
        fprintf(stderr, "peer: --rx-size out of range (%u..%u)\n", SP_RX_MIN, SP_RX_MAX);
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
    if (peerSetNonBlocking(pr.ec->fd) || rdma_listen(pr.listenId, 256)) {
        fprintf(stderr, "peer: listen failed: %s\n", strerror(errno));
        return 1;
    }
    pr.ep = epoll_create1(0);
    struct epoll_event e1 = {.events = EPOLLIN, .data.ptr = NULL};
    if (pr.ep < 0 || epoll_ctl(pr.ep, EPOLL_CTL_ADD, pr.ec->fd, &e1)) {
        fprintf(stderr, "peer: epoll: %s\n", strerror(errno));
        return 1;
    }
    printf("peer: ready on %s:%s (receive buffer %u bytes)\n", argv[1], argv[2], pr.rxSize);
    fflush(stdout);

    time_t end = time(NULL) + seconds;
    while (!peerStop && time(NULL) < end) {
        struct epoll_event evs[16];
        int n = epoll_wait(pr.ep, evs, 16, 200);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.ptr == NULL) {
                peerOnCm();
                break; /* a freed connection may be named by a later entry */
            }
            PeerConn *c = evs[i].data.ptr;
            if (peerOnStream(c) == -1) {
                peerFree(c);
                break;
            }
        }
    }
    while (pr.conns)
        peerFree(pr.conns);
    rdma_destroy_id(pr.listenId);
    rdma_destroy_event_channel(pr.ec);
    printf("peer: stopped\n");
    return 0;
}
