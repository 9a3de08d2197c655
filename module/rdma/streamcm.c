/*
 * streamcm.c - setting an RDMA stream up (stream.h): its verbs resources,
 * the rdma_cm events of a connecting or accepted stream, connect (plain
 * and blocking) and accept, and the progress of a connecting stream's own
 * event channel. The stream itself (buffers, completions, bytes,
 * teardown) is stream.c's; what both share, streamint.h. Why the QP is set
 * up as it is: docs/architecture.md, "The RDMA stream endpoint".
 */
#include "streamint.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

/* ---- setup ------------------------------------------------------------------------- */

/* nonBlock: make fd non-blocking. Returns 0 or -1. */
static int nonBlock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -1 : 0;
}

/* applyDefaults: fill the config's zero fields. */
static void applyDefaults(RdmaStreamConfig *c)
{
    if (!c->rxSize)
        c->rxSize = SP_RX_DEFAULT;
    if (!c->txSize)
        c->txSize = SP_RX_DEFAULT;
    if (!c->recvWr)
        c->recvWr = SP_RECV_DEFAULT;
    if (!c->userSendSge)
        c->userSendSge = 2;
    if (!c->keepaliveMs)
        c->keepaliveMs = SP_KEEPALIVE_MS;
}

/* streamNew: a zeroed control block with the config applied, or NULL with
 * a reason in err (bad sizes, out of memory). */
static RdmaStream *streamNew(const RdmaStreamConfig *cfg, char *err, size_t errLen)
{
    RdmaStreamConfig c = cfg ? *cfg : (RdmaStreamConfig){0};
    applyDefaults(&c);
    if (c.rxSize < SP_RX_MIN || c.rxSize > SP_RX_MAX || c.txSize < SP_RX_MIN ||
        c.txSize > SP_RX_MAX) {
        snprintf(err, errLen, "RX/TX buffer sizes must be %u..%u bytes", SP_RX_MIN, SP_RX_MAX);
        return NULL;
    }
    RdmaStream *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errLen, "out of memory");
        return NULL;
    }
    s->cfg = c;
    s->epfd = -1;
    s->sendSlotFree = SP_SEND_SLOTS_ALL;
    s->txSize = c.txSize;
    return s;
}

/* createResources: PD (unless given), completion channel (unless shared),
 * CQ, QP, control buffers and the RX buffer, and the posted receives, on
 * s->id (whose verbs context is known by now). Returns 0, or -1 with the
 * stream failed (what was made is released by rdmaStreamFree). */
static int createResources(RdmaStream *s)
{
    struct ibv_context *vctx = s->id->verbs;
    if (s->cfg.pd) {
        s->pd = s->cfg.pd;
    } else {
        s->pd = ibv_alloc_pd(vctx);
        if (!s->pd)
            return streamFail(s, "ibv_alloc_pd: %s", strerror(errno));
        s->ownPd = 1;
    }
    if (s->cfg.channel) {
        s->cc = s->cfg.channel;
    } else {
        s->cc = ibv_create_comp_channel(vctx);
        if (!s->cc)
            return streamFail(s, "ibv_create_comp_channel: %s", strerror(errno));
        s->ownCc = 1;
        if (nonBlock(s->cc->fd) < 0)
            return streamFail(s, "fcntl(O_NONBLOCK) on the completion channel: %s",
                              strerror(errno));
    }
    uint32_t sendWr = SP_SEND_SLOTS + SP_WRITES_MAX + s->cfg.userSendWr;
    s->cq = ibv_create_cq(vctx, (int)s->cfg.recvWr, s, s->cc, 0);
    if (!s->cq)
        return streamFail(s, "ibv_create_cq (receives): %s", strerror(errno));
    s->scq = ibv_create_cq(vctx, (int)sendWr, s, s->cc, 0);
    if (!s->scq)
        return streamFail(s, "ibv_create_cq (sends): %s", strerror(errno));
    int rc = ibv_req_notify_cq(s->cq, 0);
    if (rc)
        return streamFail(s, "ibv_req_notify_cq: %s", strerror(rc));
    struct ibv_qp_init_attr qa = {0};
    qa.send_cq = s->scq;
    qa.recv_cq = s->cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = sendWr;
    qa.cap.max_recv_wr = s->cfg.recvWr;
    qa.cap.max_send_sge = s->cfg.userSendSge > 2 ? s->cfg.userSendSge : 2;
    qa.cap.max_recv_sge = 1;
    if (s->accepted) {
        if (rdma_create_qp(s->id, s->pd, &qa))
            return streamFail(s, "rdma_create_qp: %s", strerror(errno));
        s->qp = s->id->qp;
    } else {
        /* Our own QP, moved to RTR/RTS on CONNECT_RESPONSE (qpToRts): the
         * RTS step is where we set how often it retries a write the peer
         * has no receive posted for, which rdma_cm would otherwise take
         * from the peer's accept (0 from the reference server). */
        s->qp = ibv_create_qp(s->pd, &qa);
        if (!s->qp)
            return streamFail(s, "ibv_create_qp: %s", strerror(errno));
        s->ownQp = 1;
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT};
        int mask;
        if (rdma_init_qp_attr(s->id, &a, &mask))
            return streamFail(s, "rdma_init_qp_attr (INIT): %s", strerror(errno));
        a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
        rc = ibv_modify_qp(s->qp, &a, mask);
        if (rc)
            return streamFail(s, "ibv_modify_qp (INIT): %s", strerror(rc));
    }
    s->qpReady = 1;
    /* In INIT now: no remote READ until granted (the RTR/RTS steps keep
     * these flags). */
    if (streamSetQpAccess(s) < 0)
        return -1;
    s->cmdLen = (size_t)(s->cfg.recvWr + SP_SEND_SLOTS) * SP_CMD_SIZE;
    if (streamMapRegister(s, s->cmdLen, IBV_ACCESS_LOCAL_WRITE, &s->cmdBuf, &s->cmdLen, &s->cmdMr) <
        0)
        return -1;
    s->rx.length = s->cfg.rxSize;
    if (streamMapRegister(s, s->rx.length, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
                          &s->rxBuf, &s->rxMapLen, &s->rxMr) < 0)
        return -1;
    for (uint32_t i = 0; i < s->cfg.recvWr; i++)
        if (streamPostRecv(s, i) < 0)
            return -1;
    return 0;
}

/* connParam: our rdma_cm connection parameters. */
static struct rdma_conn_param connParam(const RdmaStream *s)
{
    struct rdma_conn_param p = {0};
    p.responder_resources = (uint8_t)s->cfg.responderResources;
    p.initiator_depth = (uint8_t)s->cfg.initiatorDepth;
    p.retry_count = 7;
    /* These two configure the peer's QP: how often it retries a write we
     * cannot take yet (7: for ever, until our receives are posted again). A
     * reference server accepts with 0, so our client then fails a write
     * when that server has not reposted its receives (after about 1024
     * writes it has not processed). */
    p.rnr_retry_count = 7;
    return p;
}

/* qpToRts: the connecting side's own QP through RTR to RTS with the
 * attributes rdma_cm negotiated, except the RNR retry count: 7 (for ever),
 * so a write waits for the peer to post receives instead of failing the
 * connection. Returns 0 or -1 (stream failed). */
static int qpToRts(RdmaStream *s)
{
    static const enum ibv_qp_state steps[] = {IBV_QPS_RTR, IBV_QPS_RTS};
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        struct ibv_qp_attr a = {.qp_state = steps[i]};
        int mask;
        if (rdma_init_qp_attr(s->id, &a, &mask))
            return streamFail(s, "rdma_init_qp_attr (%s): %s", i ? "RTS" : "RTR", strerror(errno));
        if (steps[i] == IBV_QPS_RTS) {
            a.rnr_retry = 7;
            mask |= IBV_QP_RNR_RETRY;
        }
        int rc = ibv_modify_qp(s->qp, &a, mask);
        if (rc)
            return streamFail(s, "ibv_modify_qp (%s): %s", i ? "RTS" : "RTR", strerror(rc));
    }
    return 0;
}

/* onEstablished: the connection is up: make sure the QP's access flags are
 * ours, then (client side) ask for features and (both) register our RX
 * buffer. Returns 0 or -1. */
static int onEstablished(RdmaStream *s)
{
    s->state = RDMA_STREAM_OPEN;
    if (streamSetQpAccess(s) < 0)
        return -1;
    if (!s->accepted) {
        SpCmd get = {.opcode = SP_OP_GET_SERVER_FEATURE};
        SpCmd set = {.opcode = SP_OP_SET_CLIENT_FEATURE};
        if (streamSendCmd(s, &get) < 0 || streamSendCmd(s, &set) < 0)
            return -1;
    }
    return streamRegisterRx(s);
}

int rdmaStreamCmEvent(RdmaStream *s, enum rdma_cm_event_type type, int status)
{
    switch (type) {
        case RDMA_CM_EVENT_ADDR_RESOLVED:
            if (rdma_resolve_route(s->id, SP_RESOLVE_MS))
                return streamFail(s, "rdma_resolve_route: %s", strerror(errno));
            return 0;
        case RDMA_CM_EVENT_ROUTE_RESOLVED: {
            if (createResources(s) < 0)
                return -1;
            if (s->epfd >= 0 && s->ownCc) {
                struct epoll_event ev = {.events = EPOLLIN, .data.fd = s->cc->fd};
                if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->cc->fd, &ev) < 0)
                    return streamFail(s, "epoll_ctl: %s", strerror(errno));
            }
            struct rdma_conn_param p = connParam(s);
            p.qp_num = s->qp->qp_num;
            if (rdma_connect(s->id, &p))
                return streamFail(s, "rdma_connect: %s", strerror(errno));
            return 0;
        }
        case RDMA_CM_EVENT_CONNECT_RESPONSE:
            if (s->state != RDMA_STREAM_CONNECTING || !s->ownQp)
                return 0;
            if (qpToRts(s) < 0)
                return -1;
            if (rdma_establish(s->id))
                return streamFail(s, "rdma_establish: %s", strerror(errno));
            return onEstablished(s);
        case RDMA_CM_EVENT_ESTABLISHED:
            if (s->state != RDMA_STREAM_CONNECTING)
                return 0;
            return onEstablished(s);
        case RDMA_CM_EVENT_DISCONNECTED:
        case RDMA_CM_EVENT_TIMEWAIT_EXIT:
            if (s->state < RDMA_STREAM_CLOSED) {
                s->state = RDMA_STREAM_CLOSED;
                snprintf(s->err, sizeof(s->err), "the peer closed the connection");
            }
            return -1;
        case RDMA_CM_EVENT_REJECTED:
            return streamFail(s, "connection refused (rejected, status %d)", status);
        case RDMA_CM_EVENT_ADDR_ERROR:
        case RDMA_CM_EVENT_ROUTE_ERROR:
        case RDMA_CM_EVENT_UNREACHABLE:
        case RDMA_CM_EVENT_CONNECT_ERROR:
        case RDMA_CM_EVENT_DEVICE_REMOVAL:
            return streamFail(s, "%s (status %d)", rdma_event_str(type), status);
        default:
            return 0;
    }
}

RdmaStream *rdmaStreamConnect(const char *host, int port, const RdmaStreamConfig *cfg, char *err,
                              size_t errLen)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    char portStr[16];
    RdmaStream *s = streamNew(cfg, err, errLen);
    if (!s)
        return NULL;
    snprintf(portStr, sizeof(portStr), "%d", port);
    int gai = getaddrinfo(host, portStr, &hints, &ai);
    if (gai) {
        snprintf(err, errLen, "cannot resolve %s: %s", host, gai_strerror(gai));
        goto out_free;
    }
    s->ec = rdma_create_event_channel();
    if (!s->ec) {
        snprintf(err, errLen, "rdma_create_event_channel: %s", strerror(errno));
        goto out_free_ai;
    }
    if (nonBlock(s->ec->fd) < 0) {
        snprintf(err, errLen, "fcntl(O_NONBLOCK): %s", strerror(errno));
        goto out_free_ai;
    }
    s->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (s->epfd < 0) {
        snprintf(err, errLen, "epoll_create1: %s", strerror(errno));
        goto out_free_ai;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = s->ec->fd};
    if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, s->ec->fd, &ev) < 0) {
        snprintf(err, errLen, "epoll_ctl: %s", strerror(errno));
        goto out_free_ai;
    }
    if (rdma_create_id(s->ec, &s->id, s, RDMA_PS_TCP)) {
        snprintf(err, errLen, "rdma_create_id: %s", strerror(errno));
        goto out_free_ai;
    }
    struct sockaddr_storage src;
    int haveSrc = 0;
    if (s->cfg.bindAddr && s->cfg.bindAddr[0]) {
        struct addrinfo sh = {.ai_family = ai->ai_family, .ai_flags = AI_NUMERICHOST}, *sai;
        if (getaddrinfo(s->cfg.bindAddr, NULL, &sh, &sai)) {
            snprintf(err, errLen, "bad source address %s for %s", s->cfg.bindAddr, host);
            goto out_free_ai;
        }
        memcpy(&src, sai->ai_addr, sai->ai_addrlen);
        freeaddrinfo(sai);
        haveSrc = 1;
    }
    if (rdma_resolve_addr(s->id, haveSrc ? (struct sockaddr *)&src : NULL, ai->ai_addr,
                          SP_RESOLVE_MS)) {
        snprintf(err, errLen, "rdma_resolve_addr %s:%d: %s", host, port, strerror(errno));
        goto out_free_ai;
    }
    freeaddrinfo(ai);
    return s;

out_free_ai:
    freeaddrinfo(ai);
out_free:
    rdmaStreamFree(s);
    return NULL;
}

RdmaStream *rdmaStreamConnectBlocking(const char *host, int port, const RdmaStreamConfig *cfg,
                                      int timeoutMs, char *err, size_t errLen)
{
    RdmaStream *s = rdmaStreamConnect(host, port, cfg, err, errLen);
    if (!s)
        return NULL;
    uint64_t deadline = streamNowMs() + (uint64_t)(timeoutMs > 0 ? timeoutMs : SP_CONNECT_DEFAULT);
    while (s->state == RDMA_STREAM_CONNECTING || (s->state == RDMA_STREAM_OPEN && !s->tx.length)) {
        uint64_t now = streamNowMs();
        if (now >= deadline) {
            snprintf(err, errLen, "connect to %s:%d timed out", host, port);
            rdmaStreamFree(s);
            return NULL;
        }
        rdmaStreamWait(s, (int)(deadline - now));
    }
    if (s->state != RDMA_STREAM_OPEN) {
        snprintf(err, errLen, "connect to %s:%d: %s", host, port, s->err);
        rdmaStreamFree(s);
        return NULL;
    }
    return s;
}

RdmaStream *rdmaStreamAccept(struct rdma_cm_id *id, const RdmaStreamConfig *cfg, char *err,
                             size_t errLen)
{
    RdmaStream *s = streamNew(cfg, err, errLen);
    if (!s) {
        rdma_reject(id, NULL, 0);
        rdma_destroy_id(id);
        return NULL;
    }
    s->accepted = 1;
    s->id = id;
    id->context = s;
    if (createResources(s) < 0)
        goto out_reject;
    struct rdma_conn_param p = connParam(s);
    if (rdma_accept(id, &p)) {
        streamFail(s, "rdma_accept: %s", strerror(errno));
        goto out_reject;
    }
    return s;

out_reject:
    snprintf(err, errLen, "%s", s->err);
    rdma_reject(id, NULL, 0);
    rdmaStreamFree(s);
    return NULL;
}

/* ---- progress of a stream's own event channel ---------------------------------------- */

int rdmaStreamProcess(RdmaStream *s)
{
    if (s->ec) {
        struct rdma_cm_event *ev;
        while (rdma_get_cm_event(s->ec, &ev) == 0) {
            enum rdma_cm_event_type type = ev->event;
            int status = ev->status;
            rdma_ack_cm_event(ev);
            rdmaStreamCmEvent(s, type, status);
        }
    }
    if (s->qpReady && s->state != RDMA_STREAM_FAILED)
        streamDrainCq(s);
    /* One keepalive at a time: a peer that is alive but not processing (an
     * idle blocking client) does not repost its receives, so further ones
     * would only wait in the send queue and fill the control slots; a dead
     * one fails the one in flight (retries exhausted). */
    if (s->state == RDMA_STREAM_OPEN && s->tx.length && s->cfg.keepaliveMs > 0 &&
        s->sendSlotFree == SP_SEND_SLOTS_ALL &&
        streamNowMs() - s->lastSendMs >= (uint64_t)s->cfg.keepaliveMs) {
        SpCmd k = {.opcode = SP_OP_KEEPALIVE};
        streamSendCmd(s, &k);
    }
    return s->state >= RDMA_STREAM_CLOSED ? -1 : 0;
}

int rdmaStreamWait(RdmaStream *s, int timeoutMs)
{
    int fd = rdmaStreamFd(s);
    if (fd >= 0 && timeoutMs > 0) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        poll(&p, 1, timeoutMs);
    }
    return rdmaStreamProcess(s);
}
