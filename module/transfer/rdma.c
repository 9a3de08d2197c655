/*
 * rdma.c - the RDMA transport: the engine's wire frames as the bytes of one
 * RDMA stream per connection (module/rdma/stream.h, Valkey Over RDMA), small
 * payloads gathered inline from the arena, large objects pulled by the
 * requester with RDMA READs through a memory window scoped to one object,
 * one connection and one transfer; behind the same operations table as
 * tcp.c. The READ rendezvous (windows, READ chunks) is rdmaread.c's; what
 * both files share, rdmaint.h. Design (inline vs rendezvous, windows, the
 * handshake gate, events, queues): docs/architecture.md, "RDMA: the stream for control and small
 * objects", "Large objects: the READ rendezvous" and "The RDMA transport
 * before and after the handshake".
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "framer.h"
#include "rdmaint.h"
#include "rdmaproto.h"
#include "common/util.h"
#include "rdma/verbs.h"

static const TransportOps rdmaTransport;

static void rdmaCloseConn(Conn *base, const char *why);

/* The first adopted connection, and the one after c; NULL at the end. */
static RdmaConn *rdmaConnFirst(void)
{
    ObjListLink *l = objListFirst(&rdmaSt.all);
    return l ? objListEntry(l, RdmaConn, all) : NULL;
}

static RdmaConn *rdmaConnNext(const RdmaConn *c)
{
    return c->all.next == &rdmaSt.all ? NULL : objListEntry(c->all.next, RdmaConn, all);
}

static void rdmaAfterProcess(RdmaConn *c);

/* ---- the stream's callbacks: record only -------------------------------------------- */

/* A gather write completed (ok) or was flushed: its payload may be reused. */
static void rdmaOnSent(void *ctx, uint64_t token, int ok)
{
    RdmaConn *c = ctx;

    if (c->nSent == c->capSent) {
        int cap = c->capSent ? c->capSent * 2 : 64;
        Sent *n = realloc(c->sent, (size_t)cap * sizeof(*n));
        if (!n) {
            rdmaFail(c, "%s", "out of memory for send completions");
            return; /* the pin is released by the close */
        }
        c->sent = n;
        c->capSent = cap;
    }
    c->sent[c->nSent++] = (Sent){.token = token, .ok = ok};
    if (!ok)
        rdmaFail(c, "%s", "a stream write failed");
}

/* ---- sending ----------------------------------------------------------------------- */

/* Write queued frames while the peer's buffer has room: a frame with a
 * payload as one gather write when it fits contiguously, else copied.
 * Returns 0, or -1 when c was closed. */
static int rdmaFlush(RdmaConn *c)
{
    int moved = 0;

    while (c->txHead && !c->closing) {
        TxItem *it = c->txHead;
        /* Only arena bytes can be gathered (the arena's key); a payload from
         * elsewhere (a spilled object's buffer, serve.c) is copied below. */
        const uint8_t *pa = it->payload;
        int inArena =
            pa >= rdmaSt.arenaBase && pa + it->payloadLen <= rdmaSt.arenaBase + rdmaSt.arenaSize;
        if (it->payloadLen && inArena && it->frameOff == 0 && it->payloadOff == 0) {
            int rc =
                rdmaStreamWriteGather(c->s, it->frame, it->frameLen, it->payload, it->payloadLen,
                                      rdmaSt.arenaMr->lkey, (uint64_t)(uintptr_t)it->cookie);
            if (rc == -1)
                goto out_failed;
            if (rc == 1) {
                it->frameOff = it->frameLen;
                it->payloadOff = it->payloadLen;
                it->cookie = NULL; /* it comes back through onSent */
            } else if (rdmaStreamWritable(c->s) == 0) {
                break; /* a fresh buffer of the peer may take it whole */
            }
        }
        while (it->frameOff < it->frameLen) {
            ssize_t n =
                rdmaStreamWrite(c->s, it->frame + it->frameOff, it->frameLen - it->frameOff);
            if (n < 0)
                goto out_failed;
            if (n == 0)
                break;
            it->frameOff += (size_t)n;
            moved = 1;
        }
        while (it->frameOff == it->frameLen && it->payloadOff < it->payloadLen) {
            ssize_t n = rdmaStreamWrite(c->s, it->payload + it->payloadOff,
                                        it->payloadLen - it->payloadOff);
            if (n < 0)
                goto out_failed;
            if (n == 0)
                break;
            it->payloadOff += (size_t)n;
            moved = 1;
        }
        while (it->payloadOff == it->payloadLen && it->frameOff == it->frameLen &&
               it->tagOff < it->tagLen) {
            ssize_t n = rdmaStreamWrite(c->s, it->tag + it->tagOff, it->tagLen - it->tagOff);
            if (n < 0)
                goto out_failed;
            if (n == 0)
                break;
            it->tagOff += (size_t)n;
            moved = 1;
        }
        if (it->frameOff < it->frameLen || it->payloadOff < it->payloadLen ||
            it->tagOff < it->tagLen)
            break;
        moved = 1;
        c->txHead = it->next;
        if (!c->txHead)
            c->txTail = NULL;
        c->txBytes -= sizeof(*it) + it->frameLen;
        void *cookie = it->cookie;
        free(it);
        if (cookie) /* copied: the payload is free to go */
            rdmaHost->onSendDone(&c->sc.base, cookie);
    }
    if (c->closing)
        return -1;
    /* The engine closes a connection whose queue stops moving. */
    if (!c->txHead)
        c->sc.base.txStallSinceUs = 0;
    else if (moved || !c->sc.base.txStallSinceUs)
        c->sc.base.txStallSinceUs = utilMonoUs();
    return 0;

out_failed : {
    char why[160];
    snprintf(why, sizeof(why), "stream write: %s", rdmaStreamError(c->s));
    rdmaCloseConn(&c->sc.base, why);
    return -1;
}
}

static int rdmaSend(Conn *base, WireMsg *m, const void *payload, size_t payloadLen, void *cookie)
{
    RdmaConn *c = (RdmaConn *)base;
    uint8_t frame[OBJ_WIRE_FRAME_MAX];

    if (c->closing)
        return -1;
    /* A payload outside the registered arena (a spilled object read from its
     * file, serve.c) is never gathered: rdmaFlush copies it into the stream's
     * registered staging ring, which is its bounce buffer. */
    int64_t paySeq = -1;
    uint8_t tag[OBJ_WIRE_MAC];
    int len = wireEncode(m, frame, sizeof(frame));
    /* The session's tags: the stream's payloads are small, so the payload's
     * tag is made here, in one pass, and written after its last byte. RDMA
     * sessions authenticate, never encrypt (docs/security.md). */
    if (len >= 0)
        len = wireSeal(base->txMac, frame, sizeof(frame), len, &paySeq);
    if (len >= 0 && paySeq >= 0 &&
        wireMacPayloadTag(base->txMac, (uint64_t)paySeq, payload, payload ? payloadLen : 0, tag) ==
            -1)
        len = -1;
    if (len < 0) {
        rdmaHost->log("warning", "%s: cannot encode %s", base->desc, wireTypeName(m->h.type));
        return -1;
    }
    if (c->txBytes + sizeof(TxItem) + (size_t)len > RDMA_TXQ_MAX) {
        char why[128];
        snprintf(why, sizeof(why), "over %u bytes of frames wait for a peer that does not read",
                 RDMA_TXQ_MAX);
        rdmaHost->log("warning", "%s: %s", base->desc, why);
        rdmaCloseConn(base, why);
        return -1;
    }
    TxItem *it = calloc(1, sizeof(*it) + (size_t)len);
    if (!it) {
        rdmaCloseConn(base, "out of memory for the send queue");
        return -1;
    }
    memcpy(it->frame, frame, (size_t)len);
    it->frameLen = (size_t)len;
    it->payload = payload;
    it->payloadLen = payload ? payloadLen : 0;
    if (paySeq >= 0) {
        memcpy(it->tag, tag, OBJ_WIRE_MAC);
        it->tagLen = OBJ_WIRE_MAC;
    }
    it->cookie = cookie;
    c->txBytes += sizeof(*it) + it->frameLen;
    if (c->txTail)
        c->txTail->next = it;
    else
        c->txHead = it;
    c->txTail = it;
    if (!c->up)
        return 0; /* written once the stream is open */
    return rdmaFlush(c);
}

/* ---- receiving --------------------------------------------------------------------- */

/* Deliver every event the framer has (streamRxDeliver). Returns 0, or -1
 * after closing. */
static int rdmaParseFrames(RdmaConn *c)
{
    return streamRxDeliver(rdmaHost, &c->sc.base, &c->sc.rx, NULL);
}

/* Take every ready byte of the stream: into wherever the framer says (a
 * payload's destination or its own buffer), or consumed without a copy
 * when a payload is being thrown away; deliver the events as they come.
 * Consuming lets the stream give its buffer back to the peer. */
static void rdmaRead(RdmaConn *c)
{
    while (!c->closing && rdmaStreamReadable(c->s) > 0) {
        uint8_t *dst;
        size_t room = framerReadSpace(&c->sc.rx, &dst);
        if (room == 0)
            return; /* cannot happen: frames are consumed as they are parsed */
        size_t n;
        if (!dst) {
            size_t avail;
            rdmaStreamPeek(c->s, &avail);
            n = avail < room ? avail : room;
            if (rdmaStreamConsume(c->s, n) == -1) {
                rdmaCloseConn(&c->sc.base, rdmaStreamError(c->s));
                return;
            }
        } else {
            n = rdmaStreamRead(c->s, dst, room);
        }
        if (n == 0)
            return;
        framerWrote(&c->sc.rx, n); /* n <= room: can't fail */
        if (rdmaParseFrames(c) == -1)
            return;
    }
}

/* ---- progress ------------------------------------------------------------------------ */

/* Everything that follows the stream's processing, outside its callbacks:
 * the connection coming up, cookies of finished sends and invalidated
 * windows, finished reads, failures recorded by the callbacks, queued
 * frames and arrived bytes. */
static void rdmaAfterProcess(RdmaConn *c)
{
    if (c->closing)
        return;
    if (!c->up && rdmaStreamGetState(c->s) == RDMA_STREAM_OPEN) {
        c->up = 1;
        rdmaHost->onUp(&c->sc.base);
        if (c->closing)
            return;
    }
    for (int i = 0; i < c->nSent && !c->closing; i++)
        if (c->sent[i].ok && c->sent[i].token)
            rdmaHost->onSendDone(&c->sc.base, (void *)(uintptr_t)c->sent[i].token);
    c->nSent = 0;
    while (c->ready && !c->closing) {
        Window *w = c->ready;
        c->ready = w->nextReady;
        w->nextReady = NULL;
        w->state = WIN_FREE;
        void *cookie = w->cookie;
        w->cookie = NULL;
        if (cookie)
            rdmaHost->onSendDone(&c->sc.base, cookie);
    }
    if (c->closing)
        return;
    if (c->failWhy[0]) {
        char why[128];
        snprintf(why, sizeof(why), "%s", c->failWhy);
        rdmaCloseConn(&c->sc.base, why);
        return;
    }
    rdmaReapReads(c);
    if (c->closing)
        return;
    if (c->readMoved && rdmaHost->onPayloadMoved) { /* a relay here may forward those bytes */
        c->readMoved = 0;
        rdmaHost->onPayloadMoved(&c->sc.base);
        if (c->closing)
            return;
    }
    if (rdmaPumpReads(c) == -1) {
        rdmaCloseConn(&c->sc.base, "cannot post RDMA reads");
        return;
    }
    if (c->up && rdmaFlush(c) == -1)
        return;
    if (c->up)
        rdmaRead(c);
}

/* Process the stream and hand on what it did. */
static void rdmaProgress(RdmaConn *c)
{
    c->inHandler = 1;
    int rc = rdmaStreamProcess(c->s);
    rdmaAfterProcess(c);
    if (rc == -1 && !c->closing) {
        char why[160];
        snprintf(why, sizeof(why), "%s",
                 rdmaStreamGetState(c->s) == RDMA_STREAM_CLOSED ? "peer disconnected"
                                                                : rdmaStreamError(c->s));
        rdmaCloseConn(&c->sc.base, why[0] ? why : "stream failed");
    }
    c->inHandler = 0;
    if (c->closing)
        free(c);
}

static void rdmaOnStreamFd(void *arg, uint32_t events)
{
    rdmaProgress(arg);
}

/* ---- teardown ------------------------------------------------------------------------ */

static void rdmaUnlinkAll(RdmaConn *c)
{
    objListUnlink(&c->all);
    rdmaSt.unlinks++;
}

/* Close: the QP goes to the error state and the windows are deallocated
 * (no READ of the peer is answered any more); the stream disconnects and
 * waits for every posted work request's completion or flush (our READs
 * land nowhere after it); then reads are reported failed, and only then
 * the engine is told (which drops the pins). The RdmaConn itself is freed
 * at once, or when the handler unwinds. */
static void rdmaCloseConn(Conn *base, const char *why)
{
    RdmaConn *c = (RdmaConn *)base;

    if (c->closing)
        return;
    c->closing = 1;
    rdmaUnlinkAll(c);
    if (c->fd != -1)
        rdmaHost->unwatch(c->fd);
    c->fd = -1;
    rdmaWindowsKill(c);
    framerDestroy(&c->sc.rx); /* no payload lands after the close */
    rdmaStreamFree(c->s);     /* onWc / onSent during the flush: bookkeeping only */
    c->s = NULL;
    rdmaWindowsFree(c);
    for (ReadOp *op; (op = rdmaReadFirst(c));) {
        objListUnlink(&op->link);
        rdmaReadReport(c, op, 0, NULL);
    }
    while (c->txHead) {
        TxItem *n = c->txHead->next;
        free(c->txHead);
        c->txHead = n;
    }
    free(c->sent);
    c->sent = NULL;
    rdmaHost->onClosed(base, why);
    if (!c->inHandler)
        free(c);
}

/* ---- connections ------------------------------------------------------------------- */

static void rdmaStreamCfg(RdmaStreamConfig *cfg, RdmaConn *c, int incoming)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->rxSize = SP_RX_MIN; /* until the peer proved the secret */
    cfg->txSize = incoming ? RDMA_TX_SIZE_IN : RDMA_TX_SIZE;
    cfg->userSendWr = RDMA_USER_WR;
    cfg->userSendSge = 2;
    cfg->responderResources = rdmaSt.rdAtomic;
    cfg->initiatorDepth = rdmaSt.rdAtomic;
    cfg->pd = rdmaSt.pd;
    cfg->onWc = rdmaOnWc;
    cfg->onSent = rdmaOnSent;
    cfg->userCtx = c;
}

static RdmaConn *rdmaNew(const char *desc, int outgoing)
{
    RdmaConn *c = calloc(1, sizeof(*c));

    if (!c)
        return NULL;
    c->fd = -1;
    framerInit(&c->sc.rx);
    objListInit(&c->reads);
    objListInit(&c->all);
    c->sc.base.ops = &rdmaTransport;
    c->sc.base.id = rdmaHost->nextConnId();
    c->sc.base.state = CONN_CONNECTING;
    c->sc.base.outgoing = outgoing;
    snprintf(c->sc.base.desc, sizeof(c->sc.base.desc), "rdma %s", desc);
    return c;
}

/* Put c's stream descriptor in the engine's epoll and c on the list.
 * Returns 0 or -1. */
static int rdmaAdopt(RdmaConn *c)
{
    int fd = rdmaStreamFd(c->s);

    if (fd == -1 || rdmaHost->watch(fd, EPOLLIN, rdmaOnStreamFd, c) == -1)
        return -1;
    c->fd = fd;
    objListPushFront(&rdmaSt.all, &c->all);
    return 0;
}

/* May one more connection from source start its handshake? Returns NULL,
 * or why not; then *victim is the unproved incoming connection that gives
 * way for it (the oldest from source, or the oldest of all), or NULL when
 * none can. Counted before anything is allocated for it. */
static const char *rdmaPreauthRoom(const char *source, RdmaConn **victim)
{
    int all = 0, same = 0;
    RdmaConn *oldest = NULL, *oldestSame = NULL;

    /* Newest first: the last one seen is the oldest. */
    for (RdmaConn *o = rdmaConnFirst(); o; o = rdmaConnNext(o)) {
        if (o->sc.base.outgoing || o->authed)
            continue;
        all++;
        oldest = o;
        if (!strcmp(o->sc.base.source, source)) {
            same++;
            oldestSame = o;
        }
    }
    HandshakeEvict ev = handshakeEvict(&rdmaPreauthCaps, all, same);
    *victim = ev == HANDSHAKE_EVICT_SAME ? oldestSame : ev == HANDSHAKE_EVICT_ANY ? oldest : NULL;
    return handshakeVerdict(&rdmaPreauthCaps, all, same);
}

/* Reject a connection request and destroy its id (logged when either
 * fails). */
static void rdmaRefuse(struct rdma_cm_id *id, const char *desc)
{
    if (rdma_reject(id, NULL, 0))
        rdmaHost->log("warning", "%s: rdma_reject: %s", desc, strerror(errno));
    if (rdma_destroy_id(id))
        rdmaHost->log("warning", "%s: rdma_destroy_id: %s", desc, strerror(errno));
}

static void rdmaOnConnectRequest(struct rdma_cm_id *id)
{
    char err[192], desc[64], source[INET6_ADDRSTRLEN];
    struct sockaddr *sa = rdma_get_peer_addr(id);
    int port = 0;

    if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, source, sizeof(source));
        port = ntohs(s6->sin6_port);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
        if (!inet_ntop(AF_INET, &s4->sin_addr, source, sizeof(source)))
            snprintf(source, sizeof(source), "?");
        port = ntohs(s4->sin_port);
    }
    RdmaConn *victim = NULL;
    const char *full = rdmaPreauthRoom(source, &victim);
    snprintf(desc, sizeof(desc), "rdma %s (in)", source);
    if (full && victim) { /* idle strangers never shut out a newcomer */
        char why[160];
        snprintf(why, sizeof(why), "%s: the oldest gives way to a newcomer", full);
        rdmaHost->refused(victim->sc.base.desc, why);
        rdmaCloseConn(&victim->sc.base, why);
    } else if (full) {
        rdmaHost->refused(desc, full);
        rdmaRefuse(id, desc);
        return;
    }
    snprintf(desc, sizeof(desc), "%s:%d (in)", source, port);
    RdmaConn *c = rdmaNew(desc, 0);
    if (!c) {
        rdmaHost->log("warning", "%s: refused: out of memory", desc);
        rdmaRefuse(id, desc);
        return;
    }
    snprintf(c->sc.base.source, sizeof(c->sc.base.source), "%s", source);
    RdmaStreamConfig cfg;
    rdmaStreamCfg(&cfg, c, 1);
    c->s = rdmaStreamAccept(id, &cfg, err, sizeof(err)); /* destroys id on failure */
    if (!c->s) {
        rdmaHost->log("warning", "%s: refused: %s", c->sc.base.desc, err);
        free(c);
        return;
    }
    if (rdmaAdopt(c) == -1) {
        rdmaHost->log("warning", "%s: cannot watch the stream", c->sc.base.desc);
        rdmaStreamFree(c->s);
        free(c);
    }
}

static RdmaConn *rdmaByStream(const RdmaStream *s)
{
    for (RdmaConn *c = rdmaConnFirst(); c; c = rdmaConnNext(c))
        if (c->s == s)
            return c;
    return NULL;
}

/* The listener's rdma_cm events: new connections, and the events of the
 * accepted ones (their id's context is the stream). */
static void rdmaOnCmEvent(void *arg, uint32_t events)
{
    VerbsCmEvent ev;

    while (verbsNextCmEvent(rdmaSt.ec, &ev) == 0) {
        if (ev.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
            rdmaOnConnectRequest(ev.id);
            continue;
        }
        RdmaConn *c = rdmaByStream(ev.id->context);
        if (!c || c->closing)
            continue;
        c->inHandler = 1;
        if (rdmaStreamCmEvent(c->s, ev.type, ev.status) == -1) {
            char why[160];
            snprintf(why, sizeof(why), "%s (%s)",
                     rdmaStreamError(c->s)[0] ? rdmaStreamError(c->s) : "peer disconnected",
                     rdma_event_str(ev.type));
            rdmaCloseConn(&c->sc.base, why);
        } else {
            rdmaAfterProcess(c);
        }
        c->inHandler = 0;
        if (c->closing)
            free(c);
    }
}

static Conn *rdmaConnect(Peer *peer, const char *addr, int port, char *err, size_t errLen)
{
    char desc[64], serr[192];

    if (port <= 0 || port > 65535) {
        snprintf(err, errLen, "UNAVAILABLE bad RDMA address %s:%d", addr, port);
        return NULL;
    }
    snprintf(desc, sizeof(desc), "%s:%d", addr, port);
    RdmaConn *c = rdmaNew(desc, 1);
    if (!c) {
        snprintf(err, errLen, "OOM out of memory");
        return NULL;
    }
    RdmaStreamConfig cfg;
    rdmaStreamCfg(&cfg, c, 0);
    cfg.bindAddr = rdmaSt.bindAddr; /* the arena's device, not whatever the route picks */
    c->s = rdmaStreamConnect(addr, port, &cfg, serr, sizeof(serr));
    if (!c->s) {
        snprintf(err, errLen, "UNAVAILABLE %s: %s", desc, serr);
        free(c);
        return NULL;
    }
    if (rdmaAdopt(c) == -1) {
        snprintf(err, errLen, "UNAVAILABLE cannot watch the RDMA stream to %s", desc);
        rdmaStreamFree(c->s);
        free(c);
        return NULL;
    }
    return &c->sc.base;
}

/* The engine's handshake succeeded: the peer may now read through the keys
 * it is given, and gets our full-size receive buffer at the next
 * re-registration. Returns 0 or -1 (the engine closes c). */
static int rdmaAuthenticated(Conn *base)
{
    RdmaConn *c = (RdmaConn *)base;

    if (c->closing)
        return -1;
    if (c->authed)
        return 0;
    if (rdmaStreamAllowRemoteRead(c->s) == -1) {
        rdmaHost->log("warning", "%s: cannot enable remote read: %s", base->desc,
                      rdmaStreamError(c->s));
        return -1;
    }
    if (rdmaStreamResizeRx(c->s, RDMA_RX_SIZE) == -1) {
        rdmaHost->log("warning", "%s: cannot grow the receive buffer", base->desc);
        return -1;
    }
    c->authed = 1;
    return 0;
}

/* Every stream, every engine tick: keepalives of idle connections and the
 * dead-peer checks of the stream, however many connections there are. */
static void rdmaTick(void)
{
    uint64_t gen = ++rdmaSt.tickGen;
    RdmaConn *c = rdmaConnFirst();

    /* What one connection's progress tells the engine may close others:
     * while nothing was unlinked, c and its successor are still listed;
     * otherwise start again from the head, past the ones already done. */
    while (c) {
        if (c->tickGen == gen) {
            c = rdmaConnNext(c);
            continue;
        }
        c->tickGen = gen;
        uint64_t unlinks = rdmaSt.unlinks;
        rdmaProgress(c);
        c = rdmaSt.unlinks == unlinks ? rdmaConnNext(c) : rdmaConnFirst();
    }
}

/* ---- start-up and shutdown ----------------------------------------------------------- */

static int rdmaListen(const char *bindAddr, int port, char *err, size_t errLen)
{
    return 0; /* done by rdmaTransportInit, which needs the device first */
}

static void rdmaShutdown(void)
{
    for (RdmaConn *c; (c = rdmaConnFirst());)
        rdmaCloseConn(&c->sc.base, "node shutting down");
    if (rdmaSt.listenId && rdma_destroy_id(rdmaSt.listenId))
        rdmaHost->log("warning", "rdma: rdma_destroy_id (listener): %s", strerror(errno));
    if (rdmaSt.ec) {
        rdmaHost->unwatch(rdmaSt.ec->fd);
        rdma_destroy_event_channel(rdmaSt.ec);
    }
    rdmaRegCacheFree(rdmaSt.regs);
    if (rdmaSt.arenaMr) {
        int rc = ibv_dereg_mr(rdmaSt.arenaMr);
        if (rc)
            rdmaHost->log("warning", "rdma: ibv_dereg_mr (arena): %s", strerror(rc));
    }
    if (rdmaSt.pd) {
        int rc = ibv_dealloc_pd(rdmaSt.pd);
        if (rc)
            rdmaHost->log("warning", "rdma: ibv_dealloc_pd: %s", strerror(rc));
    }
    memset(&rdmaSt, 0, sizeof(rdmaSt));
    objListInit(&rdmaSt.all);
}

/* Can this device bind type-2 windows? One allocation tells (freed again). */
static RdmaKeyMode rdmaProbeKeys(void)
{
    struct ibv_mw *mw = ibv_alloc_mw(rdmaSt.pd, IBV_MW_TYPE_2);

    if (!mw) {
        rdmaHost->log("warning",
                      "rdma: no type-2 memory windows on this device (ibv_alloc_mw: %s): read keys "
                      "are per-object registrations, valid until the registration is evicted",
                      strerror(errno));
        return RDMA_KEYS_OBJREG;
    }
    int rc = ibv_dealloc_mw(mw);
    if (rc)
        rdmaHost->log("warning", "rdma: ibv_dealloc_mw: %s", strerror(rc));
    return RDMA_KEYS_WINDOW;
}

const TransportOps *rdmaTransportInit(const TransportHost *h, const RdmaTransportConfig *cfg,
                                      char *err, size_t errLen)
{
    rdmaHost = h;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->rdmaPort)};
    struct ibv_device_attr da;

    memset(&rdmaSt, 0, sizeof(rdmaSt));
    objListInit(&rdmaSt.all);
    rdmaSt.arenaBase = cfg->arenaBase;
    rdmaSt.arenaSize = cfg->arenaSize;
    if (inet_pton(AF_INET, cfg->rdmaBind, &sa.sin_addr) != 1) {
        snprintf(err, errLen, "rdma-bind '%s' is not an IPv4 address", cfg->rdmaBind);
        return NULL;
    }
    snprintf(rdmaSt.bindAddr, sizeof(rdmaSt.bindAddr), "%s", cfg->rdmaBind);
    /* Registered memory and fork (BGSAVE): kernels with copy-on-fork for
     * pinned pages need nothing; older ones need MADV_DONTFORK. */
    if (ibv_is_fork_initialized() == IBV_FORK_DISABLED && ibv_fork_init())
        rdmaHost->log("warning", "ibv_fork_init failed: BGSAVE may be unsafe with RDMA");
    rdmaSt.ec = rdma_create_event_channel();
    if (!rdmaSt.ec) {
        snprintf(err, errLen, "rdma_create_event_channel: %s (no RDMA support?)", strerror(errno));
        return NULL;
    }
    if (rdma_create_id(rdmaSt.ec, &rdmaSt.listenId, NULL, RDMA_PS_TCP)) {
        snprintf(err, errLen, "rdma_create_id: %s", strerror(errno));
        goto out_shutdown;
    }
    if (rdma_bind_addr(rdmaSt.listenId, (struct sockaddr *)&sa)) {
        snprintf(err, errLen, "rdma_bind_addr %s:%d: %s", cfg->rdmaBind, cfg->rdmaPort,
                 strerror(errno));
        goto out_shutdown;
    }
    rdmaSt.verbs = rdmaSt.listenId->verbs;
    if (!rdmaSt.verbs) {
        snprintf(err, errLen, "no RDMA device has the address %s (set objstore.rdma-bind)",
                 cfg->rdmaBind);
        goto out_shutdown;
    }
    const char *dev = ibv_get_device_name(rdmaSt.verbs->device);
    if (cfg->rdmaDevice[0] && strcmp(cfg->rdmaDevice, dev)) {
        snprintf(err, errLen, "%s belongs to device %s, not rdma-device %s", cfg->rdmaBind, dev,
                 cfg->rdmaDevice);
        goto out_shutdown;
    }
    if (ibv_query_device(rdmaSt.verbs, &da)) {
        snprintf(err, errLen, "ibv_query_device: %s", strerror(errno));
        goto out_shutdown;
    }
    rdmaSt.rdAtomic =
        da.max_qp_rd_atom < da.max_qp_init_rd_atom ? da.max_qp_rd_atom : da.max_qp_init_rd_atom;
    if (rdmaSt.rdAtomic > 16)
        rdmaSt.rdAtomic = 16;
    if (rdmaSt.rdAtomic < 1)
        rdmaSt.rdAtomic = 1;
    rdmaSt.pd = ibv_alloc_pd(rdmaSt.verbs);
    if (!rdmaSt.pd) {
        snprintf(err, errLen, "ibv_alloc_pd: %s", strerror(errno));
        goto out_shutdown;
    }
    rdmaSt.keys = rdmaProbeKeys();
    rdmaSt.regs = rdmaRegCacheNew(
        rdmaSt.pd, rdmaSt.keys == RDMA_KEYS_WINDOW ? IBV_ACCESS_MW_BIND : IBV_ACCESS_REMOTE_READ,
        RDMA_REG_CACHE_MAX, rdmaHost->log);
    if (!rdmaSt.regs) {
        snprintf(err, errLen, "out of memory for the registration cache");
        goto out_shutdown;
    }
    /* Local access (our READs land in it, gather writes send from it) and
     * window binding: no key of the arena opens it to a peer. */
    int access =
        IBV_ACCESS_LOCAL_WRITE | (rdmaSt.keys == RDMA_KEYS_WINDOW ? IBV_ACCESS_MW_BIND : 0);
    rdmaSt.arenaMr = ibv_reg_mr(rdmaSt.pd, rdmaSt.arenaBase, rdmaSt.arenaSize, access);
    if (!rdmaSt.arenaMr) {
        snprintf(err, errLen,
                 "cannot register the %llu-byte arena with %s: %s (raise the memlock limit: "
                 "ulimit -l unlimited, or LimitMEMLOCK=infinity)",
                 (unsigned long long)rdmaSt.arenaSize, dev, strerror(errno));
        goto out_shutdown;
    }
    int fl = fcntl(rdmaSt.ec->fd, F_GETFL);
    if (fl == -1 || fcntl(rdmaSt.ec->fd, F_SETFL, fl | O_NONBLOCK) == -1 ||
        rdmaHost->watch(rdmaSt.ec->fd, EPOLLIN, rdmaOnCmEvent, NULL) == -1) {
        snprintf(err, errLen, "cannot watch the rdma_cm event channel");
        goto out_shutdown;
    }
    if (rdma_listen(rdmaSt.listenId, RDMA_LISTEN_BACKLOG)) {
        snprintf(err, errLen, "rdma_listen: %s", strerror(errno));
        goto out_shutdown;
    }
    rdmaHost->log(
        "notice",
        "RDMA on %s (%s:%d), arena of %llu bytes registered, %d reads in flight, read keys: "
        "%s",
        dev, cfg->rdmaBind, cfg->rdmaPort, (unsigned long long)rdmaSt.arenaSize, rdmaSt.rdAtomic,
        rdmaSt.keys == RDMA_KEYS_WINDOW ? "a memory window per transfer"
                                        : "a registration per object");
    return &rdmaTransport;

out_shutdown:
    rdmaShutdown();
    return NULL;
}

static const TransportOps rdmaTransport = {
    .name = "rdma",
    .feature = OBJ_FEAT_RDMA,
    .listen = rdmaListen,
    .shutdown = rdmaShutdown,
    .connect = rdmaConnect,
    .send = rdmaSend,
    .recvPayload = streamRecvPayload,
    .discardPayload = streamDiscardPayload,
    .payloadHash = streamPayloadHash,
    .payloadLanded = streamPayloadLanded,
    .readRemote = rdmaReadRemote,
    .readLanded = rdmaReadLanded,
    .grantRead = rdmaGrantRead,
    .revokeRead = rdmaRevokeRead,
    .authenticated = rdmaAuthenticated,
    .tick = rdmaTick,
    .close = rdmaCloseConn,
};
