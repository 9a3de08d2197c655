/*
 * rdmaconn.c - the Redis protocol over RDMA, client side (rdmaconn.h): one
 * module/rdma/stream.h stream per connection, which speaks the Valkey Over
 * RDMA protocol, so the same code talks to an objstore node's
 * rdma-client-port and to a Valkey server built with RDMA.
 *
 * The stream owns everything RDMA (the queue pair, its buffers, flow
 * control, keepalives, the flush before teardown); this file adds what a
 * Redis client needs on top: a sticky hiredis-style error, the synchronous
 * API (a send queue of formatted commands and a hiredis reader fed straight
 * from the stream's receive buffer), and the non-blocking byte layer.
 *
 * Events: objRdmaFd is one epoll descriptor holding the stream's descriptor
 * and an eventfd that is raised while arrived bytes are left unread, so
 * "readable" means "objRdmaProcess or objRdmaRead have work" even for a
 * reader that took fewer bytes than were there.
 *
 * The end of a connection is held back until every byte that arrived before
 * it has been read: only then does the error (EOF or I/O) become sticky.
 */
#include "rdmaconn.h"
#include "objalloc.h"

#include <errno.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "rdma/stream.h"
#include "rdma/streamproto.h"

/* ---- tunables ------------------------------------------------------------------------- */

#define RC_CONNECT_MS_DEFAULT 5000
#define RC_WAIT_SLICE_MS      1000 /* a wait without a deadline sleeps in slices of this */
#define RC_ERRSTR_LEN         256

/* ---- context ------------------------------------------------------------------------------ */

struct ObjRdmaConn {
    /* errors: err is sticky; the end of the connection waits in gone* until read data runs out */
    int err;
    char errstr[RC_ERRSTR_LEN];
    int gone;
    int goneCode;
    char goneStr[RC_ERRSTR_LEN];
    int timeoutMs; /* synchronous calls; 0 = forever */

    RdmaStream *s;

    /* objRdmaFd: the stream's descriptor and the leftover-data eventfd */
    int epfd, kickFd, kicked;
    int fresh; /* objRdmaProcess ran since objRdmaRead last found nothing */

    /* synchronous layer */
    redisReader *reader;
    char *obuf; /* formatted commands not yet in the stream: obuf[opos, olen) */
    size_t olen, opos, ocap;
};

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
 * The stream has closed or failed: remember why (the peer's disconnect is
 * EOF, anything else I/O), but let what already arrived be read first.
 * Returns -1. Can't fail.
 */
static int rdmaGone(ObjRdmaConn *c)
{
    if (c->gone)
        return -1;
    c->gone = 1;
    const char *why = rdmaStreamError(c->s);
    if (rdmaStreamGetState(c->s) == RDMA_STREAM_CLOSED) {
        c->goneCode = OBJ_RDMA_ERR_EOF;
        snprintf(c->goneStr, sizeof(c->goneStr), "Server closed the connection%s%s",
                 why[0] ? ": " : "", why);
    } else {
        c->goneCode = OBJ_RDMA_ERR_IO;
        snprintf(c->goneStr, sizeof(c->goneStr), "RDMA connection failed: %s",
                 why[0] ? why : "unknown reason");
    }
    return -1;
}

/* Whether arrived bytes are waiting to be read. */
static int rdmaHasData(const ObjRdmaConn *c)
{
    return rdmaStreamReadable(c->s) > 0;
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

/*
 * One step of the stream: completions, control messages, keepalive. A
 * stream that closed or failed marks the connection gone. Returns 0, or -1
 * when it is gone. Never blocks.
 */
static int rdmaStep(ObjRdmaConn *c)
{
    if (c->gone)
        return -1;
    if (rdmaStreamProcess(c->s) == -1)
        return rdmaGone(c);
    return 0;
}

/* ---- small helpers --------------------------------------------------------------------- */

static long long rdmaNowMs(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Milliseconds left until deadline (0 = none: one slice), at least 1 while
 * it has not passed, 0 once it has. */
static int rdmaLeftMs(long long deadline)
{
    if (deadline == 0)
        return RC_WAIT_SLICE_MS;
    long long left = deadline - rdmaNowMs();
    if (left <= 0)
        return 0;
    return left > RC_WAIT_SLICE_MS ? RC_WAIT_SLICE_MS : (int)left;
}

/*
 * A size from the environment (a test knob), or def when unset. A value
 * outside [lo, hi] or not a number is ignored with a warning. Can't fail.
 */
static uint32_t rdmaEnvSize(const char *name, uint32_t def, uint32_t lo, uint32_t hi)
{
    const char *v = getenv(name);
    char *end;

    if (v == NULL || v[0] == '\0')
        return def;
    unsigned long n = strtoul(v, &end, 10);
    if (*end != '\0' || n < lo || n > hi) {
        fprintf(stderr, "objrdma: ignoring %s=%s (want %u..%u)\n", name, v, lo, hi);
        return def;
    }
    return (uint32_t)n;
}

/*
 * Keep the leftover-data eventfd in step: raised while bytes are unread and
 * raising is allowed (the caller returns to an event loop), cleared
 * otherwise, so that objRdmaFd neither misses leftover data nor spins.
 * Can't fail (the eventfd never overflows: it holds 0 or 1).
 */
static void rdmaKick(ObjRdmaConn *c, int mayRaise)
{
    uint64_t one = 1, v;
    int want = mayRaise && rdmaHasData(c);

    if (c->kickFd < 0 || want == c->kicked)
        return;
    if (want) {
        if (write(c->kickFd, &one, sizeof(one)) == (ssize_t)sizeof(one))
            c->kicked = 1;
    } else if (read(c->kickFd, &v, sizeof(v)) == (ssize_t)sizeof(v) || errno == EAGAIN) {
        c->kicked = 0;
    }
}

/*
 * Move queued synchronous-layer bytes into the stream as far as it takes
 * them. Returns 0 (some may remain: the peer's buffer is full), or -1 when
 * the connection is gone.
 */
static int rdmaFlushOut(ObjRdmaConn *c)
{
    while (c->opos < c->olen) {
        ssize_t n = rdmaStreamWrite(c->s, c->obuf + c->opos, c->olen - c->opos);
        if (n < 0)
            return rdmaGone(c);
        if (n == 0)
            break;
        c->opos += (size_t)n;
    }
    if (c->opos == c->olen)
        c->opos = c->olen = 0;
    return 0;
}

/* ---- connect --------------------------------------------------------------------------- */

/*
 * Resolve addr to a numeric address string, so that an unusable name is
 * told apart from a failed connect. Returns 0, or -1 with the error set.
 */
static int rdmaResolve(ObjRdmaConn *c, const char *addr, char *out, size_t outLen)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;

    if (addr == NULL || addr[0] == '\0')
        return rdmaFail(c, OBJ_RDMA_ERR_OTHER, "no address to connect to");
    int rc = getaddrinfo(addr, NULL, &hints, &res);
    if (rc != 0)
        return rdmaFail(c, OBJ_RDMA_ERR_OTHER, "cannot resolve %s: %s", addr, gai_strerror(rc));
    rc =
        getnameinfo(res->ai_addr, res->ai_addrlen, out, (socklen_t)outLen, NULL, 0, NI_NUMERICHOST);
    freeaddrinfo(res);
    if (rc != 0)
        return rdmaFail(c, OBJ_RDMA_ERR_OTHER, "cannot use the address of %s: %s", addr,
                        gai_strerror(rc));
    return 0;
}

/*
 * objRdmaFd's epoll set: the stream's descriptor and the eventfd. Returns
 * 0, or -1 with the error set (the caller's teardown closes what was made).
 */
static int rdmaSetupEpoll(ObjRdmaConn *c)
{
    struct epoll_event ev = {.events = EPOLLIN};

    c->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (c->epfd < 0)
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "epoll_create1: %s", strerror(errno));
    c->kickFd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->kickFd < 0)
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "eventfd: %s", strerror(errno));
    ev.data.fd = rdmaStreamFd(c->s);
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, ev.data.fd, &ev) == -1)
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "epoll_ctl(stream): %s", strerror(errno));
    ev.data.fd = c->kickFd;
    if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->kickFd, &ev) == -1)
        return rdmaFail(c, OBJ_RDMA_ERR_IO, "epoll_ctl(eventfd): %s", strerror(errno));
    return 0;
}

/*
 * Connect: resolve, open the stream (blocking, bounded by timeoutMs; it
 * returns once the server has told us its receive buffer), then the epoll
 * set and the reply reader. Returns 0, or -1 with the error set. Buffer
 * sizes are the protocol's defaults unless the test knobs
 * OBJSTORE_RDMA_RX_SIZE / OBJSTORE_RDMA_TX_SIZE say otherwise (a small
 * buffer exercises the peer's re-registration and flow-control paths).
 */
static int rdmaDoConnect(ObjRdmaConn *c, const char *addr, int port, int timeoutMs)
{
    RdmaStreamConfig cfg = {0};
    char host[NI_MAXHOST], err[RC_ERRSTR_LEN];

    if (port <= 0 || port > 65535)
        return rdmaFail(c, OBJ_RDMA_ERR_OTHER, "bad port %d", port);
    if (rdmaResolve(c, addr, host, sizeof(host)) == -1)
        return -1;
    cfg.rxSize = rdmaEnvSize("OBJSTORE_RDMA_RX_SIZE", SP_RX_DEFAULT, SP_RX_MIN, SP_RX_MAX);
    cfg.txSize = rdmaEnvSize("OBJSTORE_RDMA_TX_SIZE", SP_RX_DEFAULT, SP_RX_MIN, SP_RX_MAX);
    if (timeoutMs <= 0)
        timeoutMs = RC_CONNECT_MS_DEFAULT;
    err[0] = '\0';
    c->s = rdmaStreamConnectBlocking(host, port, &cfg, timeoutMs, err, sizeof(err));
    if (c->s == NULL) {
        int code = strcasestr(err, "timed out") || strcasestr(err, "timeout") ? OBJ_RDMA_ERR_TIMEOUT
                                                                              : OBJ_RDMA_ERR_IO;
        if (err[0] == '\0')
            snprintf(err, sizeof(err), "connect to %s:%d failed", addr, port);
        return rdmaFail(c, code, "%s", err);
    }
    if (rdmaSetupEpoll(c) == -1)
        return -1;
    c->reader = redisReaderCreate();
    if (c->reader == NULL)
        return rdmaFail(c, OBJ_RDMA_ERR_OOM, "out of memory for the reply reader");
    return 0;
}

/*
 * Public connect. Never returns a half-made context without its error set;
 * NULL only when even the context could not be allocated.
 */
ObjRdmaConn *objRdmaConnect(const char *addr, int port, int timeoutMs)
{
    ObjRdmaConn *c = objCalloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    c->epfd = c->kickFd = -1;
    rdmaDoConnect(c, addr, port, timeoutMs);
    return c;
}

/* ---- teardown ------------------------------------------------------------------------------ */

/*
 * Release everything in reverse order of setup: the stream disconnects and
 * flushes its queue pair before it frees memory. Accepts NULL and contexts
 * of failed connects. Can't fail.
 */
void objRdmaFree(ObjRdmaConn *c)
{
    if (c == NULL)
        return;
    if (c->reader)
        redisReaderFree(c->reader);
    if (c->kickFd >= 0)
        close(c->kickFd);
    if (c->epfd >= 0)
        close(c->epfd);
    rdmaStreamFree(c->s);
    objFree(c->obuf);
    objFree(c);
}

/* ---- errors and settings ----------------------------------------------------------------- */

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

/* Length of a socket address of family fam (IPv4 or IPv6). */
static size_t rdmaSaLen(const struct sockaddr *sa)
{
    return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

/* Copy the connection's addresses. Returns 0, or -1 when never connected. */
int objRdmaAddrs(const ObjRdmaConn *c, struct sockaddr_storage *local,
                 struct sockaddr_storage *peer)
{
    if (c == NULL || c->s == NULL)
        return -1;
    const struct sockaddr *l = rdmaStreamLocalAddr(c->s), *p = rdmaStreamPeerAddr(c->s);
    if (l == NULL || p == NULL)
        return -1;
    memset(local, 0, sizeof(*local));
    memset(peer, 0, sizeof(*peer));
    memcpy(local, l, rdmaSaLen(l));
    memcpy(peer, p, rdmaSaLen(p));
    return 0;
}

/* ---- non-blocking layer ------------------------------------------------------------------- */

/* The epoll descriptor (-1 for NULL or a connect that failed early). */
int objRdmaFd(const ObjRdmaConn *c)
{
    return c ? c->epfd : -1;
}

/*
 * The event-loop step: process the stream (even once the connection is
 * gone there is nothing left to drain: the stream stops signalling), move
 * queued synchronous-layer bytes, keep the eventfd in step. Returns 0, or
 * -1 once the connection is over and nothing is left to read (the error is
 * set then).
 */
int objRdmaProcess(ObjRdmaConn *c)
{
    if (c == NULL || c->err)
        return -1;
    if (rdmaStep(c) == 0)
        rdmaFlushOut(c);
    c->fresh = 1;
    rdmaKick(c, 1);
    return rdmaSettle(c);
}

/*
 * Write request bytes like write(2) on a non-blocking socket: as much as
 * the peer's receive buffer and our staging have room for. With no room it
 * processes the stream once (a re-registered buffer or completed writes may
 * be waiting) and tries again. Returns the bytes taken, or -1 with errno
 * EAGAIN, EPIPE (connection gone) or EIO (failed).
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
    /* Bytes of the synchronous layer go first: the request stream stays in order. */
    if (rdmaFlushOut(c) == -1 || c->opos < c->olen) {
        errno = c->gone ? EPIPE : EAGAIN;
        return -1;
    }
    n = rdmaStreamWrite(c->s, buf, len);
    if (n == 0 && rdmaStep(c) == 0)
        n = rdmaStreamWrite(c->s, buf, len);
    if (n > 0)
        return n;
    if (n < 0)
        rdmaGone(c);
    errno = c->gone ? EPIPE : EAGAIN;
    return -1;
}

/*
 * Copy arrived reply bytes out like read(2). With nothing there it
 * processes the stream once, to catch what arrived since the last event,
 * unless objRdmaProcess has just done so (an event loop's handler calls
 * Process and then reads until nothing is left: a second pass would only
 * cost system calls; anything newer makes objRdmaFd readable). Data left
 * behind (cap too small) raises the eventfd so that objRdmaFd stays
 * readable. Returns the bytes copied; 0 with errno EAGAIN when none; -1
 * with EPIPE/EIO once the connection is over and everything was read.
 */
ssize_t objRdmaRead(ObjRdmaConn *c, void *buf, size_t cap)
{
    if (c == NULL || c->err) {
        errno = EIO;
        return -1;
    }
    if (!rdmaHasData(c) && !c->fresh)
        rdmaStep(c);
    size_t done = rdmaStreamRead(c->s, buf, cap);
    if (done == 0)
        c->fresh = 0;
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

/* Bytes queued by the synchronous layer and not yet in the stream. Can't fail. */
size_t objRdmaPendingWrite(const ObjRdmaConn *c)
{
    return c ? c->olen - c->opos : 0;
}

/* ---- synchronous layer -------------------------------------------------------------------- */

/* Append bytes to the send queue. Returns 0, or -1 with the error set. */
static int rdmaQueue(ObjRdmaConn *c, const char *p, size_t len)
{
    if (c->olen + len > c->ocap) {
        size_t cap = c->ocap ? c->ocap : 4096;
        while (cap < c->olen + len)
            cap *= 2;
        char *nb = objRealloc(c->obuf, cap);
        if (nb == NULL)
            return rdmaFail(c, OBJ_RDMA_ERR_OOM, "out of memory for the send queue");
        c->obuf = nb;
        c->ocap = cap;
    }
    memcpy(c->obuf + c->olen, p, len);
    c->olen += len;
    return 0;
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

/*
 * Feed every arrived byte to the reply reader straight from the stream's
 * receive buffer (the reader copies; the space goes back to the server as
 * it is consumed, so a long pipeline never stalls on a full buffer).
 * Returns 0, or -1 with the error set.
 */
static int rdmaFeedReader(ObjRdmaConn *c)
{
    size_t len;
    const uint8_t *p;

    while ((p = rdmaStreamPeek(c->s, &len)) != NULL && len > 0) {
        if (redisReaderFeed(c->reader, (const char *)p, len) != REDIS_OK)
            return rdmaFail(c, OBJ_RDMA_ERR_OOM, "out of memory buffering replies");
        if (rdmaStreamConsume(c->s, len) == -1) {
            rdmaGone(c);
            break;
        }
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

/*
 * Sleep on the stream until it has work or deadline (0: none) passes, and
 * process it. Returns 0, or -1 with the error set (timeout), or with the
 * connection marked gone (the caller settles).
 */
static int rdmaWait(ObjRdmaConn *c, long long deadline)
{
    int left = rdmaLeftMs(deadline);

    if (left == 0)
        return rdmaFail(c, OBJ_RDMA_ERR_TIMEOUT, "timed out waiting for the server (%d ms)",
                        c->timeoutMs);
    if (rdmaStreamWait(c->s, left) == -1)
        return rdmaGone(c);
    return 0;
}

/*
 * Send what is queued and return the next reply, waiting (up to the
 * timeout) on the stream. While waiting it keeps both directions moving:
 * queued requests go out as the server's buffer frees up, and replies are
 * fed to the reader as they come. Returns 0 with *reply set, or -1 with the
 * error set (EOF once the server closed and every reply before that was
 * returned).
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
        if (!c->gone)
            rdmaFlushOut(c);
        if (rdmaFeedReader(c) == -1 || rdmaReaderNext(c, reply) == -1)
            return -1;
        if (*reply)
            break;
        if (c->gone) /* everything that arrived is in the reader, and no reply is whole */
            return rdmaFail(c, c->goneCode, "%s", c->goneStr);
        if (rdmaWait(c, deadline) == -1 && c->err)
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

/* One formatted command and its reply (the next one owed). Returns it, or
 * NULL with the error set. */
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
