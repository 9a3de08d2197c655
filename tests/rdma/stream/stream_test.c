/*
 * stream_test.c - the RDMA stream endpoint (module/rdma/stream.h) against
 * itself on a real device: a listener process accepts with the same code a
 * server uses, a client process connects, and each case checks what one
 * side sees. It runs where an RDMA device is (the Soft-RoCE guest:
 * tests/rdma/stream/run-in-guest.sh).
 *
 *   stream_test -a ADDR [-p PORT] [-k CASE]
 *
 * Cases (each a fresh connection; the server runs the same case):
 *   echo       bytes of many sizes, 1 B to 3 MiB, through 64 KiB RX buffers
 *              on both sides (hundreds of re-registrations), echoed back
 *              and compared
 *   gather     rdmaStreamWriteGather: header + registered payload arrive as
 *              one contiguous piece of the stream; onSent reports the token
 *   features   the client's GetServerFeature is answered; keepalives flow
 *   close      the client frees its stream: the server sees CLOSED, and the
 *              bytes sent before the close are still readable
 *   garbage    an unknown opcode, a short SEND and a RegisterXferMemory of a
 *              bad size each fail the receiving stream with a reason
 *   overrun    an immediate claiming more bytes than the RX buffer has left
 *              fails the receiving stream ("past its RX buffer")
 *   noread     a READ of server memory registered for remote read fails
 *              while the server has not called rdmaStreamAllowRemoteRead
 *   granted    the same READ succeeds once it has (the control case)
 * Prints "ok CASE" or "FAIL CASE: why" per case; exit status 0 when all passed.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rdma/stream.h"
#include "rdma/streamproto.h"

static const char *addr;
static int port = 7479;
static char failWhy[512];

/* fail: record why the case failed; returns -1. */
static int fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(failWhy, sizeof(failWhy), fmt, ap);
    va_end(ap);
    return -1;
}

static uint64_t nowMs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* pattern: the byte at stream position i. */
static uint8_t pattern(uint64_t i)
{
    return (uint8_t)(i * 131 + (i >> 11));
}

static const RdmaStreamConfig smallCfg = {.rxSize = SP_RX_MIN, .txSize = SP_RX_MIN};

/* ---- server side ---- */

/* acceptOne: listen on addr:port, accept one connection with cfg and wait
 * until it is OPEN. Returns the stream (the listener is kept in *ecOut /
 * *listenOut for its later events) or NULL. */
static RdmaStream *acceptOne(const RdmaStreamConfig *cfg, struct rdma_event_channel **ecOut,
                             struct rdma_cm_id **listenOut)
{
    struct rdma_event_channel *ec = rdma_create_event_channel();
    struct rdma_cm_id *lid;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, addr, &sa.sin_addr);
    if (!ec || rdma_create_id(ec, &lid, NULL, RDMA_PS_TCP) ||
        rdma_bind_addr(lid, (struct sockaddr *)&sa) || rdma_listen(lid, 4)) {
        fprintf(stderr, "server: listen %s:%d: %s\n", addr, port, strerror(errno));
        return NULL;
    }
    *ecOut = ec;
    *listenOut = lid;
    RdmaStream *s = NULL;
    char err[256];
    for (;;) {
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(ec, &ev))
            return NULL;
        struct rdma_cm_id *id = ev->id;
        enum rdma_cm_event_type t = ev->event;
        int st = ev->status;
        rdma_ack_cm_event(ev);
        if (t == RDMA_CM_EVENT_CONNECT_REQUEST) {
            s = rdmaStreamAccept(id, cfg, err, sizeof(err));
            if (!s) {
                fprintf(stderr, "server: accept: %s\n", err);
                return NULL;
            }
        } else if (s && id == rdmaStreamId(s)) {
            rdmaStreamCmEvent(s, t, st);
            if (rdmaStreamGetState(s) == RDMA_STREAM_OPEN)
                return s;
        }
    }
}

/* serverPump: process s and its listener events (non-blocking). */
static void serverPump(RdmaStream *s, struct rdma_event_channel *ec)
{
    struct rdma_cm_event *ev;
    int fl = fcntl(ec->fd, F_GETFL);
    fcntl(ec->fd, F_SETFL, fl | O_NONBLOCK);
    while (rdma_get_cm_event(ec, &ev) == 0) {
        enum rdma_cm_event_type t = ev->event;
        int st = ev->status;
        struct rdma_cm_id *id = ev->id;
        rdma_ack_cm_event(ev);
        if (id == rdmaStreamId(s))
            rdmaStreamCmEvent(s, t, st);
    }
    rdmaStreamWait(s, 5);
}

/* serverEcho: echo every byte back until the peer closes (bounded). */
static int serverEcho(RdmaStream *s, struct rdma_event_channel *ec)
{
    uint8_t buf[65536];
    size_t pending = 0, off = 0;
    uint64_t deadline = nowMs() + 120000;
    while (nowMs() < deadline) {
        serverPump(s, ec);
        if (!pending) {
            pending = rdmaStreamRead(s, buf, sizeof(buf));
            off = 0;
        }
        while (pending) {
            ssize_t n = rdmaStreamWrite(s, buf + off, pending);
            if (n < 0)
                return 0;
            if (n == 0)
                break;
            off += (size_t)n;
            pending -= (size_t)n;
        }
        if (rdmaStreamGetState(s) >= RDMA_STREAM_CLOSED && !rdmaStreamReadable(s) && !pending)
            return 0;
    }
    return -1;
}

/* serverUntilDone: pump until the stream closes or fails; print its final
 * state and reason on stdout for the client side's check (via a pipe). */
static void serverUntilDone(RdmaStream *s, struct rdma_event_channel *ec, int outFd)
{
    uint64_t deadline = nowMs() + 30000;
    while (nowMs() < deadline && rdmaStreamGetState(s) < RDMA_STREAM_CLOSED)
        serverPump(s, ec);
    char line[400];
    size_t ready = rdmaStreamReadable(s);
    int n = snprintf(line, sizeof(line), "%d %zu %s\n", (int)rdmaStreamGetState(s), ready,
                     rdmaStreamError(s));
    if (write(outFd, line, (size_t)n) < 0)
        perror("write");
}

/* serverMain: the server half of one case; reports through outFd. */
static int serverMain(const char *kase, int outFd)
{
    struct rdma_event_channel *ec;
    struct rdma_cm_id *lid;
    RdmaStreamConfig cfg = smallCfg;
    if (!strcmp(kase, "noread") || !strcmp(kase, "granted"))
        cfg.responderResources = 4;
    RdmaStream *s = acceptOne(&cfg, &ec, &lid);
    if (!s)
        return 1;
    if (!strcmp(kase, "echo") || !strcmp(kase, "features") || !strcmp(kase, "gather")) {
        serverEcho(s, ec);
    } else if (!strcmp(kase, "noread") || !strcmp(kase, "granted")) {
        /* A buffer with remote read access; its address and key go to the
         * client as text. Only "granted" lets the QP serve reads. */
        static uint8_t secret[4096] __attribute__((aligned(4096)));
        memset(secret, 0x5a, sizeof(secret));
        struct ibv_mr *mr = ibv_reg_mr(rdmaStreamPd(s), secret, sizeof(secret),
                                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
        if (!strcmp(kase, "granted"))
            rdmaStreamAllowRemoteRead(s);
        char line[64];
        int n = snprintf(line, sizeof(line), "%llx %x\n", (unsigned long long)(uintptr_t)secret,
                         mr ? mr->rkey : 0);
        uint64_t deadline = nowMs() + 10000;
        while (rdmaStreamWrite(s, line, (size_t)n) == 0 && nowMs() < deadline)
            serverPump(s, ec);
        serverUntilDone(s, ec, outFd);
        rdmaStreamFree(s);
        s = NULL;
        if (mr)
            ibv_dereg_mr(mr);
    } else {
        serverUntilDone(s, ec, outFd);
    }
    rdmaStreamFree(s); /* accepts NULL */
    rdma_destroy_id(lid);
    rdma_destroy_event_channel(ec);
    return 0;
}

/* ---- client side ---- */

static RdmaStream *connectOrFail(const RdmaStreamConfig *cfg)
{
    char err[256];
    RdmaStream *s = NULL;
    for (int i = 0; i < 150 && !s; i++) { /* the server may not listen yet */
        s = rdmaStreamConnectBlocking(addr, port, cfg, 5000, err, sizeof(err));
        if (!s)
            usleep(100000);
    }
    if (!s)
        fail("connect: %s", err);
    return s;
}

/* caseEcho: send sizes 1 B .. 3 MiB and read them back. */
static int caseEcho(void)
{
    RdmaStream *s = connectOrFail(&smallCfg);
    if (!s)
        return -1;
    static const size_t sizes[] = {1, 7, 100, 4096, 65535, 65536, 65537, 200000, 3 << 20};
    size_t total = 0;
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
        total += sizes[k];
    uint64_t sent = 0, got = 0, deadline = nowMs() + 120000;
    uint8_t buf[70000];
    int rc = 0;
    while (got < total) {
        if (nowMs() > deadline) {
            rc = fail("timed out: sent %llu got %llu of %zu", (unsigned long long)sent,
                      (unsigned long long)got, total);
            break;
        }
        if (sent < total) {
            size_t n = total - sent < sizeof(buf) ? total - sent : sizeof(buf);
            for (size_t i = 0; i < n; i++)
                buf[i] = pattern(sent + i);
            ssize_t w = rdmaStreamWrite(s, buf, n);
            if (w < 0) {
                rc = fail("write: %s", rdmaStreamError(s));
                break;
            }
            sent += (uint64_t)w;
        }
        size_t r = rdmaStreamRead(s, buf, sizeof(buf));
        for (size_t i = 0; i < r; i++)
            if (buf[i] != pattern(got + i)) {
                rc = fail("byte %llu differs", (unsigned long long)(got + i));
                goto out;
            }
        got += r;
        if (!r && rdmaStreamWait(s, 5) < 0) {
            rc = fail("stream ended: %s", rdmaStreamError(s));
            break;
        }
    }
out:
    rdmaStreamFree(s);
    return rc;
}

static uint64_t sentToken;
static int sentOk;
static void onSent(void *ctx, uint64_t token, int ok)
{
    sentToken = token;
    sentOk = ok;
}

/* caseGather: one gather write (header + registered payload) echoes back
 * as the concatenation; onSent reports its token. */
static int caseGather(void)
{
    RdmaStreamConfig cfg = smallCfg;
    cfg.onSent = onSent;
    RdmaStream *s = connectOrFail(&cfg);
    if (!s)
        return -1;
    static uint8_t payload[30000];
    for (size_t i = 0; i < sizeof(payload); i++)
        payload[i] = pattern(i + 5);
    struct ibv_mr *mr =
        ibv_reg_mr(rdmaStreamPd(s), payload, sizeof(payload), IBV_ACCESS_LOCAL_WRITE);
    int rc = -1;
    if (!mr) {
        fail("ibv_reg_mr: %s", strerror(errno));
        goto out;
    }
    /* The server only echoes in "echo" mode: reuse it. */
    if (rdmaStreamWriteGather(s, "HDR:", 4, payload, sizeof(payload), mr->lkey, 42) != 1) {
        fail("gather write not posted: %s", rdmaStreamError(s));
        goto out_mr;
    }
    uint8_t back[4 + sizeof(payload)];
    size_t got = 0;
    uint64_t deadline = nowMs() + 30000;
    while (got < sizeof(back) && nowMs() < deadline) {
        got += rdmaStreamRead(s, back + got, sizeof(back) - got);
        if (got < sizeof(back))
            rdmaStreamWait(s, 5);
    }
    if (got != sizeof(back) || memcmp(back, "HDR:", 4) ||
        memcmp(back + 4, payload, sizeof(payload)))
        fail("echo of the gather write differs (%zu bytes back)", got);
    else if (sentToken != 42 || !sentOk)
        fail("onSent reported token %llu ok %d", (unsigned long long)sentToken, sentOk);
    else
        rc = 0;
out_mr:
    rdmaStreamFree(s); /* flushes before the payload's registration goes */
    ibv_dereg_mr(mr);
    return rc;
out:
    rdmaStreamFree(s);
    return rc;
}

/* readServerReport: the server's "state ready reason" line. */
static int readServerReport(int inFd, int *state, size_t *ready, char *why, size_t whyLen)
{
    char line[512];
    ssize_t n = read(inFd, line, sizeof(line) - 1);
    if (n <= 0)
        return -1;
    line[n] = 0;
    int off = 0;
    if (sscanf(line, "%d %zu %n", state, ready, &off) < 2)
        return -1;
    snprintf(why, whyLen, "%s", line + off);
    return 0;
}

/* postRawSend: post 32 bytes (or len) as a SEND on s's QP, as a peer that
 * does not follow the protocol would. Returns 0 or -1. */
static int postRaw(RdmaStream *s, enum ibv_wr_opcode op, const void *bytes, uint32_t len,
                   uint32_t imm, uint64_t raddr, uint32_t rkey)
{
    static uint8_t buf[4096] __attribute__((aligned(64)));
    static struct ibv_mr *mr;
    if (!mr)
        mr = ibv_reg_mr(rdmaStreamPd(s), buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE);
    if (!mr)
        return fail("ibv_reg_mr: %s", strerror(errno));
    memcpy(buf, bytes, len);
    struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 2,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = op,
                             .send_flags = IBV_SEND_SIGNALED,
                             .imm_data = htonl(imm)};
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    if (rdmaStreamPostSend(s, &wr) < 0)
        return fail("post: %s", rdmaStreamError(s));
    return 0;
}

/* expectServerFailed: the server's stream must have failed with a reason
 * containing want. */
static int expectServerFailed(int inFd, const char *want)
{
    int state;
    size_t ready;
    char why[400];
    if (readServerReport(inFd, &state, &ready, why, sizeof(why)) < 0)
        return fail("no report from the server");
    if (state != RDMA_STREAM_FAILED || !strstr(why, want))
        return fail("server state %d reason \"%s\" (want FAILED, \"%s\")", state, why, want);
    return 0;
}

static int caseGarbage(const char *which, int inFd)
{
    RdmaStream *s = connectOrFail(&smallCfg);
    if (!s)
        return -1;
    uint8_t cmd[SP_CMD_SIZE] = {0};
    int rc = 0;
    const char *want = "bad control message";
    if (!strcmp(which, "opcode")) {
        cmd[1] = 9;
        rc = postRaw(s, IBV_WR_SEND, cmd, SP_CMD_SIZE, 0, 0, 0);
    } else if (!strcmp(which, "short")) {
        rc = postRaw(s, IBV_WR_SEND, cmd, 16, 0, 0, 0);
    } else { /* a RegisterXferMemory of 0 bytes */
        SpCmd c = {.opcode = SP_OP_REGISTER_XFER_MEM, .addr = 4096, .length = 0, .key = 1};
        spEncode(&c, cmd);
        rc = postRaw(s, IBV_WR_SEND, cmd, SP_CMD_SIZE, 0, 0, 0);
    }
    for (int i = 0; i < 20; i++)
        rdmaStreamWait(s, 10);
    if (rc == 0)
        rc = expectServerFailed(inFd, want);
    rdmaStreamFree(s);
    return rc;
}

/* caseOverrun: write 10 bytes at the start of the server's RX buffer but
 * claim 2 MiB in the immediate. */
static int caseOverrun(int inFd)
{
    RdmaStream *s = connectOrFail(&smallCfg);
    if (!s)
        return -1;
    /* The peer's buffer: read it from the stream's TX side via a write of
     * 0 bytes is not possible; use the protocol instead: one ordinary
     * write first (so the address is known to be valid), then the lie. */
    int rc = rdmaStreamWrite(s, "x", 1) == 1 ? 0 : fail("first write failed");
    for (int i = 0; i < 10; i++)
        rdmaStreamWait(s, 5);
    if (rc == 0) {
        /* A zero-length WRITE_WITH_IMM needs no address: only the immediate. */
        rc = postRaw(s, IBV_WR_RDMA_WRITE_WITH_IMM, "", 0, 2u << 20, 0, 0);
    }
    for (int i = 0; i < 20; i++)
        rdmaStreamWait(s, 10);
    if (rc == 0)
        rc = expectServerFailed(inFd, "past its RX buffer");
    rdmaStreamFree(s);
    return rc;
}

/* caseFeatures: the server answers GetServerFeature (seen as a SEND
 * completion on its side and a receive on ours without error); a stream
 * idle longer than its keepalive interval stays OPEN. */
static int caseFeatures(void)
{
    RdmaStreamConfig cfg = smallCfg;
    cfg.keepaliveMs = 200;
    RdmaStream *s = connectOrFail(&cfg);
    if (!s)
        return -1;
    uint64_t until = nowMs() + 1500;
    while (nowMs() < until)
        rdmaStreamWait(s, 50);
    int rc = 0;
    if (rdmaStreamGetState(s) != RDMA_STREAM_OPEN)
        rc = fail("stream not open after idling: %s", rdmaStreamError(s));
    else if (rdmaStreamWrite(s, "ping", 4) != 4)
        rc = fail("write after idling failed");
    rdmaStreamFree(s);
    return rc;
}

/* caseClose: bytes sent right before free are readable by the server,
 * which then sees CLOSED. */
static int caseClose(int inFd)
{
    RdmaStream *s = connectOrFail(&smallCfg);
    if (!s)
        return -1;
    rdmaStreamWrite(s, "bye!", 4);
    for (int i = 0; i < 10; i++)
        rdmaStreamWait(s, 5);
    rdmaStreamFree(s);
    int state;
    size_t ready;
    char why[400];
    if (readServerReport(inFd, &state, &ready, why, sizeof(why)) < 0)
        return fail("no report from the server");
    if (state != RDMA_STREAM_CLOSED || ready != 4)
        return fail("server state %d with %zu bytes ready (%s); want CLOSED with 4", state, ready,
                    why);
    return 0;
}

static int readStatus = -1;
static void onUserWc(void *ctx, const struct ibv_wc *wc)
{
    readStatus = (int)wc->status;
}

/* caseRead: RDMA READ of a server buffer that is registered for remote
 * read: refused while the server's QP has not been granted remote read
 * ("noread"), served once it has ("granted", the control that shows the
 * refusal is the QP's doing). */
static int caseRead(int granted, int inFd)
{
    RdmaStreamConfig cfg = smallCfg;
    cfg.initiatorDepth = 4;
    cfg.userSendWr = 4;
    cfg.onWc = onUserWc;
    RdmaStream *s = connectOrFail(&cfg);
    if (!s)
        return -1;
    char line[64] = {0};
    size_t got = 0;
    uint64_t deadline = nowMs() + 10000;
    while (!memchr(line, '\n', got) && got < sizeof(line) - 1 && nowMs() < deadline) {
        got += rdmaStreamRead(s, line + got, sizeof(line) - 1 - got);
        rdmaStreamWait(s, 5);
    }
    unsigned long long raddr;
    unsigned rkey;
    int rc = 0;
    if (sscanf(line, "%llx %x", &raddr, &rkey) != 2) {
        rc = fail("no buffer address from the server (\"%s\")", line);
        goto out;
    }
    static uint8_t dst[4096] __attribute__((aligned(4096)));
    struct ibv_mr *mr = ibv_reg_mr(rdmaStreamPd(s), dst, sizeof(dst), IBV_ACCESS_LOCAL_WRITE);
    struct ibv_sge sge = {.addr = (uintptr_t)dst, .length = sizeof(dst), .lkey = mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 2,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_RDMA_READ,
                             .send_flags = IBV_SEND_SIGNALED};
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    readStatus = -1;
    if (rdmaStreamPostSend(s, &wr) < 0) {
        rc = fail("post READ: %s", rdmaStreamError(s));
    } else {
        deadline = nowMs() + 15000;
        while (readStatus < 0 && nowMs() < deadline)
            rdmaStreamWait(s, 10);
        if (granted && (readStatus != IBV_WC_SUCCESS || dst[0] != 0x5a))
            rc = fail("granted READ: status %d (%s)", readStatus,
                      readStatus >= 0 ? ibv_wc_status_str(readStatus) : "none");
        if (!granted && (readStatus == IBV_WC_SUCCESS || readStatus < 0))
            rc = fail("READ before the grant: status %d (want a remote access error)", readStatus);
    }
    rdmaStreamFree(s);
    ibv_dereg_mr(mr);
    (void)inFd;
    return rc;
out:
    rdmaStreamFree(s);
    return rc;
}

/* clientCase: the client half of one case. Returns 0 or -1 (failWhy). */
static int clientCase(const char *kase, int inFd)
{
    if (!strcmp(kase, "echo"))
        return caseEcho();
    if (!strcmp(kase, "gather"))
        return caseGather();
    if (!strcmp(kase, "features"))
        return caseFeatures();
    if (!strcmp(kase, "close"))
        return caseClose(inFd);
    if (!strncmp(kase, "garbage-", 8))
        return caseGarbage(kase + 8, inFd);
    if (!strcmp(kase, "overrun"))
        return caseOverrun(inFd);
    if (!strcmp(kase, "noread") || !strcmp(kase, "granted"))
        return caseRead(!strcmp(kase, "granted"), inFd);
    return fail("unknown case");
}

/* reap: wait for pid at most ms, then kill it. Returns its exit status or -1. */
static int reap(pid_t pid, int ms)
{
    int status;
    uint64_t deadline = nowMs() + (uint64_t)ms;
    while (waitpid(pid, &status, WNOHANG) == 0) {
        if (nowMs() > deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        usleep(10000);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* runCase: both halves run in child processes, so that every case starts
 * from a process that has never opened a verbs device (a forked child
 * must not inherit one). Returns 0 or -1 with failWhy set. */
static int runCase(const char *kase)
{
    int report[2], result[2];
    if (pipe(report) < 0 || pipe(result) < 0)
        return fail("pipe: %s", strerror(errno));
    pid_t server = fork();
    if (server == 0) {
        close(report[0]);
        alarm(150);
        _exit(serverMain(kase, report[1]));
    }
    close(report[1]);
    pid_t client = fork();
    if (client == 0) {
        alarm(150);
        int rc = clientCase(kase, report[0]);
        if (write(result[1], failWhy, strlen(failWhy)) < 0)
            _exit(3);
        _exit(rc == 0 ? 0 : 1);
    }
    close(result[1]);
    int crc = reap(client, 160000);
    ssize_t n = read(result[0], failWhy, sizeof(failWhy) - 1);
    failWhy[n > 0 ? n : 0] = 0;
    reap(server, 20000);
    close(report[0]);
    close(result[0]);
    port++; /* a fresh port per case: no leftover listener */
    if (crc != 0 && !failWhy[0])
        fail("client half died (status %d)", crc);
    return crc == 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    int opt;
    while ((opt = getopt(argc, argv, "a:p:k:")) != -1) {
        if (opt == 'a')
            addr = optarg;
        else if (opt == 'p')
            port = atoi(optarg);
        else if (opt == 'k')
            only = optarg;
    }
    if (!addr) {
        fprintf(stderr, "usage: stream_test -a ADDR [-p PORT] [-k CASE]\n");
        return 2;
    }
    static const char *cases[] = {"echo",           "gather",        "features",       "close",
                                  "garbage-opcode", "garbage-short", "garbage-memory", "overrun",
                                  "noread",         "granted"};
    int failed = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        if (only && !strstr(cases[i], only))
            continue;
        failWhy[0] = 0;
        if (runCase(cases[i]) == 0) {
            printf("ok %s\n", cases[i]);
        } else {
            printf("FAIL %s: %s\n", cases[i], failWhy);
            failed++;
        }
        fflush(stdout);
    }
    return failed ? 1 : 0;
}
