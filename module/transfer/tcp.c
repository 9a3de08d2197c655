/*
 * tcp.c - the TCP transport: length-prefixed frames over one socket per
 * peer, non-blocking, driven by the engine's epoll.
 *
 * Object bytes never pass through a user-space buffer: a DATA frame's
 * payload is written with writev straight from the arena, a piece at a
 * time right after the session tagged it (its tag follows its last byte),
 * and on the receiving side recvPayload() points the socket's next bytes
 * straight at the destination object (only the few payload bytes that
 * arrived in the same read as the frame header are copied out of the small
 * frame buffer). An encrypted session (transfer-encrypt) writes each piece
 * from a bounce buffer it was encrypted into.
 * Which bytes are frames and which payload is the framer's business
 * (framer.c, pure and fuzzed); this file does the reads and the calls.
 * Sockets get TCP_NODELAY (frames are small and latency matters) and
 * keepalive (a silent dead peer is noticed).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "framer.h"
#include "streamrx.h"
#include "tcp.h"
#include "common/list.h"
#include "common/util.h"

/* The engine core, as given to tcpTransportInit. */
static const TransportHost *host;
static const TransportOps tcpTransport;

#define TCP_FRAME_MAX OBJ_WIRE_FRAME_MAX
#define TCP_MAX_IOV   32
/* Fairness: after this many reads or bytes per readiness event, go back to
 * epoll, so other sockets and queued work (a cancel) get their turn. */
#define TCP_READS_PER_EV 64
#define TCP_BYTES_PER_EV (4u << 20)
/* Memory the send queue of one connection may take (frames and their
 * bookkeeping; payloads are the arena's, held by pins that engineConnBusy
 * caps). Past it the connection's requests are no longer read, so a peer
 * that sends PINGs or FETCHes without reading the answers queues at most
 * this much before it only fills its own socket. */
#define TCP_TXQ_MAX   (1u << 20)
#define TCP_DRAIN_BUF (64u << 10) /* where a discarded payload is read to */

/* The payload bytes tagged (or encrypted) at a time, just before they are
 * written: the kernel's copy then reads them from the cache. */
#define TCP_PIECE (256u << 10)
/* How far ahead of the socket payload bytes are tagged: what one write may
 * move (the pieces are still in the cache when the kernel copies them). */
#define TCP_AHEAD (2048u << 10)

/* One queued frame, the payload bytes that follow it and the payload's tag.
 * In a session the payload goes out only as far as it was tagged (readyOff:
 * tcpPrepare tags, or encrypts into the connection's bounce buffer, up to
 * TCP_AHEAD bytes ahead of the socket), and its tag after its last byte. */
typedef struct TxItem {
    size_t frameLen, frameOff;
    const uint8_t *payload;
    size_t payloadLen, payloadOff;
    size_t readyOff;           /* payload bytes tagged or encrypted: may be written */
    int64_t paySeq;            /* the sequence number of the payload's tag; -1: none */
    size_t tagLen, tagOff;     /* the tag's bytes (0 or OBJ_WIRE_MAC), and those written */
    int ready;                 /* the whole payload and its tag are ready */
    uint8_t tag[OBJ_WIRE_MAC]; /* valid once ready */
    void *cookie;
    struct TxItem *next;
    uint8_t frame[]; /* frameLen bytes */
} TxItem;

typedef struct TcpConn {
    StreamConn sc; /* must be first: the Conn and its framer */
    int fd;
    int connecting;
    int inHandler; /* close() during a callback defers the free to the handler's end */
    /* Inside tcpFlush: a send from one of its onSendDone callbacks only
     * queues (the running flush writes it), as a nested flush would move
     * the queue under the running one's accounting. */
    int flushing;
    int closed;
    /* A send failed (why in failWhy): nothing more is written, and the
     * connection is closed from its own event, never inside the send, whose
     * caller may hold records the close frees (docs/architecture.md). */
    int failed;
    char failWhy[96];
    int rxPaused; /* requests are not read while the send side is over its caps */
    /* An encrypted session's payload pieces, encrypted from the arena and
     * written from here (TCP_AHEAD bytes, made at first use): the head
     * item's payload bytes [bounceAt, its readyOff). */
    uint8_t *bounce;
    size_t bounceAt;
    TxItem *txHead, *txTail;
    size_t txBytes;  /* memory of the queued TxItems */
    uint32_t events; /* the epoll mask set for fd */
    ObjListLink all; /* in tcpConns, from creation until freed */
} TcpConn;

static int listenFd = -1;
static uint8_t drainBuf[TCP_DRAIN_BUF]; /* engine thread only */

static ObjList tcpConns = {&tcpConns, &tcpConns}; /* TcpConn.all, newest first */

static void tcpOnEvent(void *arg, uint32_t events);
static void tcpUpdateEvents(TcpConn *c);

static void tcpFree(TcpConn *c)
{
    while (c->txHead) {
        TxItem *n = c->txHead->next;
        free(c->txHead);
        c->txHead = n;
    }
    objListUnlink(&c->all);
    framerDestroy(&c->sc.rx);
    free(c->bounce);
    free(c);
}

/* Close: unregister, report once, free (now, or when the handler unwinds). */
static void tcpCloseConn(Conn *base, const char *why)
{
    TcpConn *c = (TcpConn *)base;

    if (c->closed)
        return;
    c->closed = 1;
    host->unwatch(c->fd);
    close(c->fd);
    c->fd = -1;
    host->onClosed(base, why);
    if (!c->inHandler)
        tcpFree(c);
}

static void tcpSetOptions(int fd)
{
    int one = 1, idle = 10, intvl = 5, cnt = 3;

    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

static TcpConn *tcpNew(int fd, const char *desc)
{
    TcpConn *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->fd = fd;
    framerInit(&c->sc.rx);
    c->sc.base.ops = &tcpTransport;
    c->sc.base.id = host->nextConnId();
    snprintf(c->sc.base.desc, sizeof(c->sc.base.desc), "tcp %s", desc);
    objListPushFront(&tcpConns, &c->all);
    return c;
}

/* ---- flow control ------------------------------------------------------------------ */

/* Is the send side of c over a cap, so that its requests must wait? */
static int tcpBusy(const TcpConn *c)
{
    return c->txBytes > TCP_TXQ_MAX || host->connBusy(&c->sc.base);
}

/* Set the epoll mask c needs: EPOLLIN unless reading is paused, EPOLLOUT
 * while something is queued, or when a paused c may resume (the event then
 * comes at once and tcpOnEvent resumes it). */
static void tcpUpdateEvents(TcpConn *c)
{
    uint32_t ev = (c->rxPaused ? 0 : EPOLLIN) |
                  (c->txHead || c->failed || (c->rxPaused && !tcpBusy(c)) ? EPOLLOUT : 0);

    if (c->closed || c->connecting || ev == c->events)
        return;
    if (host->modify(c->fd, ev, tcpOnEvent, c) == 0)
        c->events = ev;
}

/* ---- sending ----------------------------------------------------------------------- */

/* c cannot send any more (why): mark it failed and make sure its next
 * event comes (EPOLLOUT is reported at once), which closes it. Returns -1. */
static int tcpFail(TcpConn *c, const char *why)
{
    if (!c->failed)
        snprintf(c->failWhy, sizeof(c->failWhy), "%s", why);
    c->failed = 1;
    tcpUpdateEvents(c);
    return -1;
}

/* Make the next piece of it's payload ready to go (it is the first item
 * whose payload is not all ready, so the session's payload context is its):
 * tag it, or encrypt it into the bounce buffer while that has room (it
 * starts over once all it held was written), unless TCP_AHEAD bytes are
 * ready and unwritten already; at the payload's end, finish its tag.
 * Returns 0, or -1 when libcrypto failed (or no memory for the bounce
 * buffer). */
static int tcpPreparePiece(TcpConn *c, TxItem *it)
{
    WireMac *w = c->sc.base.txMac;
    int encrypt = wireMacCrypt(w) == WIRE_CRYPT_ENCRYPT;

    if (it->ready)
        return 0;
    if (!encrypt && it->readyOff - it->payloadOff >= TCP_AHEAD)
        return 0; /* enough is ready */
    size_t n = it->payloadLen - it->readyOff;
    if (n > TCP_PIECE)
        n = TCP_PIECE;
    if (encrypt) {
        if (it->payloadOff == it->readyOff)
            c->bounceAt = it->readyOff; /* all it held went out: start it over */
        if (it->readyOff - c->bounceAt + n > TCP_AHEAD)
            return 0; /* the bounce buffer is full of unwritten bytes */
    }
    if (it->readyOff == 0 && wireMacPayloadBeginAt(w, (uint64_t)it->paySeq) == -1)
        return -1;
    if (encrypt && n > 0) {
        if (!c->bounce && !(c->bounce = malloc(TCP_AHEAD)))
            return -1;
        if (wireMacPayloadCrypt(w, it->payload + it->readyOff,
                                c->bounce + (it->readyOff - c->bounceAt), n) == -1)
            return -1;
    } else if (n > 0 && wireMacPayloadUpdate(w, it->payload + it->readyOff, n) == -1) {
        return -1;
    }
    it->readyOff += n;
    if (it->readyOff == it->payloadLen) {
        if (wireMacPayloadEnd(w, it->tag) == -1)
            return -1;
        it->ready = 1;
    }
    return 0;
}

/* Tag (or encrypt into the bounce buffer) pieces of it's payload until
 * TCP_AHEAD bytes are ready and unwritten, so that one write moves that
 * much: each write costs the loopback or the NIC path its fixed share.
 * Returns 0 or -1 as tcpPreparePiece. */
static int tcpPrepare(TcpConn *c, TxItem *it)
{
    size_t before;

    do {
        before = it->readyOff;
        if (tcpPreparePiece(c, it) == -1)
            return -1;
    } while (!it->ready && it->readyOff != before); /* a piece moved, and room is left */
    return 0;
}

/* Gather what of the queue can be written now into iov (at most max
 * entries): each item's frame, its payload as far as it is ready, its tag,
 * stopping after the first payload that is not all ready (and, encrypting,
 * after one whose last piece in the bounce buffer is not all written: the
 * next payload's first piece would overwrite it). Returns the entries, or
 * -1 when tcpPrepare failed. */
static int tcpGather(TcpConn *c, struct iovec *iov, int max)
{
    int encrypt = wireMacCrypt(c->sc.base.txMac) == WIRE_CRYPT_ENCRYPT;
    int n = 0;

    for (TxItem *it = c->txHead; it && n + 3 <= max; it = it->next) {
        if (it->frameOff < it->frameLen)
            iov[n++] = (struct iovec){it->frame + it->frameOff, it->frameLen - it->frameOff};
        if (tcpPrepare(c, it) == -1)
            return -1;
        if (it->payloadOff < it->readyOff) {
            const uint8_t *from =
                encrypt ? c->bounce + (it->payloadOff - c->bounceAt) : it->payload + it->payloadOff;
            iov[n++] = (struct iovec){(void *)from, it->readyOff - it->payloadOff};
        }
        if (!it->ready)
            break;
        if (it->tagOff < it->tagLen)
            iov[n++] = (struct iovec){it->tag + it->tagOff, it->tagLen - it->tagOff};
        if (encrypt && it->payloadOff < it->payloadLen)
            break;
    }
    return n;
}

/* w bytes went out: move the queue on, reporting engineOnSendDone for the
 * items done. Returns 0, or -1 when a callback closed c. */
static int tcpAdvance(TcpConn *c, size_t left)
{
    while (c->txHead) {
        TxItem *it = c->txHead;
        size_t take = it->frameLen - it->frameOff;
        take = left < take ? left : take;
        it->frameOff += take;
        left -= take;
        take = it->readyOff - it->payloadOff;
        take = left < take ? left : take;
        it->payloadOff += take;
        left -= take;
        if (it->payloadOff == it->payloadLen) {
            take = it->tagLen - it->tagOff;
            take = left < take ? left : take;
            it->tagOff += take;
            left -= take;
        }
        if (it->frameOff < it->frameLen || it->payloadOff < it->payloadLen ||
            it->tagOff < it->tagLen)
            break;
        c->txHead = it->next;
        if (!c->txHead)
            c->txTail = NULL;
        void *cookie = it->cookie;
        c->txBytes -= sizeof(*it) + it->frameLen;
        free(it);
        if (cookie)
            host->onSendDone(&c->sc.base, cookie);
        if (c->closed)
            return -1;
    }
    return 0;
}

/* Write as much of the queue as the socket takes. Returns 0, or -1 when the
 * connection failed (tcpFail: closed later, from its own event). Completed
 * items with a cookie report engineOnSendDone in order. */
static int tcpFlush(TcpConn *c)
{
    if (c->failed)
        return -1;
    c->flushing = 1;
    while (c->txHead) {
        struct iovec iov[TCP_MAX_IOV];
        int n = tcpGather(c, iov, TCP_MAX_IOV);
        if (n < 0) {
            c->flushing = 0;
            return tcpFail(c, "cannot tag or encrypt a payload (libcrypto failed)");
        }
        ssize_t w = n ? writev(c->fd, iov, n) : 0;
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR)
                break;
            char why[96];
            snprintf(why, sizeof(why), "write: %s", strerror(errno));
            c->flushing = 0;
            return tcpFail(c, why);
        }
        if (w > 0)
            c->sc.base.txStallSinceUs = utilMonoUs(); /* it moved */
        if (tcpAdvance(c, (size_t)w) == -1) {
            c->flushing = 0;
            return -1;
        }
        if (n == 0)
            break;
    }
    c->flushing = 0;
    if (!c->txHead)
        c->sc.base.txStallSinceUs = 0;
    tcpUpdateEvents(c);
    return 0;
}

static int tcpSend(Conn *base, WireMsg *m, const void *payload, size_t payloadLen, void *cookie)
{
    TcpConn *c = (TcpConn *)base;
    TxItem *it;
    int64_t paySeq = -1;

    uint8_t frame[TCP_FRAME_MAX];

    if (c->closed || c->failed)
        return -1;
    int len = wireEncode(m, frame, sizeof(frame));
    if (len >= 0) /* the frame's tag; the payload's is made as it goes out */
        len = wireSeal(base->txMac, frame, sizeof(frame), len, &paySeq);
    if (len < 0) {
        host->log("warning", "%s: cannot encode %s", base->desc, wireTypeName(m->h.type));
        return -1;
    }
    it = calloc(1, sizeof(*it) + (size_t)len);
    if (!it)
        return tcpFail(c, "out of memory for the send queue");
    memcpy(it->frame, frame, (size_t)len);
    it->frameLen = (size_t)len;
    c->txBytes += sizeof(*it) + (size_t)len;
    if (!c->txHead)
        c->sc.base.txStallSinceUs = utilMonoUs();
    it->payload = payload;
    it->payloadLen = payload ? payloadLen : 0;
    it->paySeq = paySeq;
    it->tagLen = paySeq >= 0 ? OBJ_WIRE_MAC : 0;
    it->readyOff = paySeq >= 0 ? 0 : it->payloadLen; /* no session: all of it, untagged */
    it->ready = paySeq < 0;
    it->cookie = cookie;
    if (c->txTail)
        c->txTail->next = it;
    else
        c->txHead = it;
    c->txTail = it;
    if (c->connecting || c->flushing)
        return 0;
    return tcpFlush(c);
}

/* ---- receiving ------------------------------------------------------------------- */

/* hold for streamRxDeliver: stop before a frame while the send side is over
 * its caps (the rest waits in the framer and the socket; tcpOnEvent
 * resumes once the queue went down). */
static int tcpHold(Conn *base)
{
    TcpConn *c = (TcpConn *)base;

    if (base->state != CONN_READY || !tcpBusy(c))
        return 0;
    c->rxPaused = 1;
    return 1;
}

/* Deliver every event the framer has (streamRxDeliver). Returns 0, or -1
 * after closing the connection. */
static int tcpParseFrames(TcpConn *c)
{
    return streamRxDeliver(host, &c->sc.base, &c->sc.rx, tcpHold);
}

/* Read what the socket has, up to the fairness bounds, into wherever the
 * framer says (a payload's destination, its own buffer, or the drain
 * buffer for a payload thrown away), and deliver the events. */
static void tcpRead(TcpConn *c)
{
    size_t total = 0;

    for (int i = 0; i < TCP_READS_PER_EV && total < TCP_BYTES_PER_EV && !c->closed; i++) {
        uint8_t *dst;
        if (c->rxPaused && !framerInPayload(&c->sc.rx))
            return;
        size_t room = framerReadSpace(&c->sc.rx, &dst);
        if (room == 0)
            return; /* only whole frames are buffered: tcpParseFrames stopped on purpose */
        if (!dst) {
            dst = drainBuf;
            room = room < sizeof(drainBuf) ? room : sizeof(drainBuf);
        }
        ssize_t n = read(c->fd, dst, room);
        if (n == 0) {
            tcpCloseConn(&c->sc.base, "peer closed the connection");
            return;
        }
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            char why[96];
            snprintf(why, sizeof(why), "read: %s", strerror(errno));
            tcpCloseConn(&c->sc.base, why);
            return;
        }
        total += (size_t)n;
        framerWrote(&c->sc.rx, (size_t)n); /* n <= room: can't fail */
        if (tcpParseFrames(c) == -1)
            return;
    }
}

static void tcpOnEvent(void *arg, uint32_t events)
{
    TcpConn *c = arg;

    c->inHandler = 1;
    if (c->connecting && (events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err) {
            char why[96];
            snprintf(why, sizeof(why), "connect: %s", strerror(err));
            tcpCloseConn(&c->sc.base, why);
        } else {
            c->connecting = 0;
            c->events = EPOLLOUT; /* what tcpConnect watched for */
            host->onUp(&c->sc.base);
            if (!c->closed)
                tcpFlush(c);
        }
    } else {
        if (c->rxPaused && (events & (EPOLLERR | EPOLLHUP)))
            tcpCloseConn(&c->sc.base, "connection lost while its requests waited");
        if (!c->closed && (events & (EPOLLIN | EPOLLERR | EPOLLHUP)))
            tcpRead(c);
        if (!c->closed && (events & EPOLLOUT))
            tcpFlush(c);
        if (!c->closed && c->rxPaused && !tcpBusy(c)) {
            c->rxPaused = 0; /* the queue went down: read the waiting requests */
            tcpParseFrames(c);
        }
        if (!c->closed)
            tcpUpdateEvents(c);
    }
    if (!c->closed && c->failed) /* a send failed: whoever sent is done with it now */
        tcpCloseConn(&c->sc.base, c->failWhy);
    c->inHandler = 0;
    if (c->closed)
        tcpFree(c);
}

/* ---- listening and connecting ---------------------------------------------------------- */

static void tcpOnAccept(void *arg, uint32_t events)
{
    for (int i = 0; i < 64; i++) {
        struct sockaddr_in sa;
        socklen_t len = sizeof(sa);
        int fd = accept4(listenFd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd == -1) {
            if (errno != EAGAIN && errno != EINTR)
                host->log("warning", "tcp accept: %s", strerror(errno));
            return;
        }
        tcpSetOptions(fd);
        char desc[64];
        snprintf(desc, sizeof(desc), "%s:%d (in)", inet_ntoa(sa.sin_addr), ntohs(sa.sin_port));
        TcpConn *c = tcpNew(fd, desc);
        if (!c || host->watch(fd, EPOLLIN, tcpOnEvent, c) == -1) {
            if (c)
                tcpFree(c);
            close(fd);
            continue;
        }
        c->events = EPOLLIN;
        snprintf(c->sc.base.source, sizeof(c->sc.base.source), "%s", inet_ntoa(sa.sin_addr));
        host->onUp(&c->sc.base);
    }
}

static int tcpListen(const char *bindAddr, int port, char *err, size_t errLen)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int one = 1;

    if (inet_pton(AF_INET, bindAddr, &sa.sin_addr) != 1) {
        snprintf(err, errLen, "transfer-bind '%s' is not an IPv4 address", bindAddr);
        return -1;
    }
    listenFd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (listenFd == -1) {
        snprintf(err, errLen, "socket: %s", strerror(errno));
        return -1;
    }
    setsockopt(listenFd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(listenFd, (struct sockaddr *)&sa, sizeof(sa)) == -1 || listen(listenFd, 128) == -1) {
        snprintf(err, errLen, "cannot listen on %s:%d for transfers: %s", bindAddr, port,
                 strerror(errno));
        goto out_close;
    }
    if (host->watch(listenFd, EPOLLIN, tcpOnAccept, NULL) == -1) {
        snprintf(err, errLen, "cannot watch the transfer listener");
        goto out_close;
    }
    return 0;

out_close:
    close(listenFd);
    listenFd = -1;
    return -1;
}

static Conn *tcpConnect(Peer *peer, const char *addr, int port, char *err, size_t errLen)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};

    if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1 || port <= 0 || port > 65535) {
        snprintf(err, errLen, "UNAVAILABLE bad transfer address %s:%d", addr, port);
        return NULL;
    }
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd == -1) {
        snprintf(err, errLen, "UNAVAILABLE socket: %s", strerror(errno));
        return NULL;
    }
    tcpSetOptions(fd);
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == -1 && errno != EINPROGRESS) {
        snprintf(err, errLen, "UNAVAILABLE connect %s:%d: %s", addr, port, strerror(errno));
        close(fd);
        return NULL;
    }
    char desc[64];
    snprintf(desc, sizeof(desc), "%s:%d", addr, port);
    TcpConn *c = tcpNew(fd, desc);
    if (!c || host->watch(fd, EPOLLOUT, tcpOnEvent, c) == -1) {
        snprintf(err, errLen, "UNAVAILABLE out of memory");
        if (c)
            tcpFree(c);
        close(fd);
        return NULL;
    }
    c->connecting = 1;
    c->sc.base.state = CONN_CONNECTING;
    return &c->sc.base;
}

static void tcpShutdown(void)
{
    if (listenFd != -1) {
        host->unwatch(listenFd);
        close(listenFd);
        listenFd = -1;
    }
    for (ObjListLink *l; (l = objListFirst(&tcpConns));)
        tcpCloseConn(&objListEntry(l, TcpConn, all)->sc.base, "node shutting down");
}

static const TransportOps tcpTransport = {
    .name = "tcp",
    .feature = OBJ_FEAT_TCP,
    .listen = tcpListen,
    .shutdown = tcpShutdown,
    .connect = tcpConnect,
    .send = tcpSend,
    .recvPayload = streamRecvPayload,
    .discardPayload = streamDiscardPayload,
    .payloadHash = streamPayloadHash,
    .payloadLanded = streamPayloadLanded,
    .readRemote = NULL,
    .grantRead = NULL,
    .revokeRead = NULL,
    .close = tcpCloseConn,
};

const TransportOps *tcpTransportInit(const TransportHost *h)
{
    host = h;
    return &tcpTransport;
}
