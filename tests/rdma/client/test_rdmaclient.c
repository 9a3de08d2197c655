/*
 * test_rdmaclient.c - the RESP-over-RDMA client library (client/rdmaconn.h)
 * and ObjClient over RDMA, against a live server: the module's
 * rdma-client-port, or tests/rdma/client/peer.c before the module had one.
 *
 *   test_rdmaclient ADDR PORT [--module] [--password PW] [--auth-only]
 *                   [--tcp-port P] [--conns N] [--depth N] [--big BYTES]
 *
 * --module: the server is an objstore node (adds the OBJ.* and ObjClient
 * checks); --password: the server wants AUTH (every connection sends it, and
 * --auth-only runs only the AUTH checks); --tcp-port: the node's TCP port,
 * to cross-check what RDMA clients did; --conns: concurrent connections
 * (default 100); --depth: pipeline depth (10000); --big: the large
 * values (1 MiB + 17 to SET and GET, 3 MiB written in pieces). Each check prints one TAP-style
 * line; the first failure prints "not ok" with the connection's error and exits 1. Every wait is
 * bounded: each connection has a 20 s reply timeout, loops are capped.
 * (`test_rdmaclient --flood ADDR PORT [PW]` is the child the kill test
 * starts: it floods a pipeline until it is killed.)
 */
#include "objstore.h"
#include "rdmaconn.h"
#include "rdma/streamproto.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#define REPLY_TIMEOUT_MS 20000
#define CONC_ROUNDS      50
#define FLOOD_VALUE      1024
#define FLOOD_WINDOW     2000 /* SETs in flight in the kill test */
#define FLOOD_TOTAL      200000

extern char **environ;

static const char *addr, *password, *selfPath;
static int port, tcpPort, moduleMode, nConns = 100, pipelineDepth = 10000;
static size_t bigValue = 1024 * 1024 + 17, bigWrite = 3 * 1024 * 1024;
static int checks;
static char tag[32]; /* per-run key prefix */

/* ---- reporting ------------------------------------------------------------------------- */

/* Monotonic milliseconds. */
static long long nowMs(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Print "ok N - what", or "not ok" with c's error (c may be NULL) and exit(1). */
static void check(int cond, const ObjRdmaConn *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void check(int cond, const ObjRdmaConn *c, const char *fmt, ...)
{
    va_list ap;

    checks++;
    printf("%s %d - ", cond ? "ok" : "not ok", checks);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    if (!cond) {
        if (c)
            printf("# connection error %d: %s\n", objRdmaErr(c), objRdmaErrStr(c));
        fflush(stdout);
        exit(1);
    }
    fflush(stdout);
}

/* ---- helpers ----------------------------------------------------------------------------- */

/* Connect, set the reply timeout and AUTH when the server wants it; any failure fails the run. */
static ObjRdmaConn *connectOk(const char *why)
{
    ObjRdmaConn *c = objRdmaConnect(addr, port, 5000);

    if (c == NULL || objRdmaErr(c)) {
        check(0, c, "connect (%s)", why);
    }
    objRdmaSetTimeout(c, REPLY_TIMEOUT_MS);
    if (password) {
        redisReply *r = objRdmaCommand(c, "AUTH %s", password);
        if (r == NULL || r->type != REDIS_REPLY_STATUS)
            check(0, c, "AUTH (%s)", why);
        freeReplyObject(r);
    }
    return c;
}

/* Whether r is a reply of type t (and, for strings, equal to s when s is given). */
static int isReply(const redisReply *r, int t, const char *s)
{
    if (r == NULL || r->type != t)
        return 0;
    return s == NULL || (r->len == strlen(s) && memcmp(r->str, s, r->len) == 0);
}

/* Fill p with seed's pseudo-random bytes (any byte value, NUL and CR LF included). */
static void fillPattern(char *p, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++) {
        seed = seed * 1103515245u + 12345u;
        p[i] = (char)(seed >> 16);
    }
}

/* ---- tests -------------------------------------------------------------------------------- */

/* A port nobody listens on and a bad address fail fast with a reason. */
static void testConnectFailures(void)
{
    long long t0 = nowMs();
    ObjRdmaConn *c = objRdmaConnect(addr, port == 1 ? 2 : 1, 3000);

    check(c && objRdmaErr(c) && objRdmaErrStr(c)[0], NULL,
          "connect to a closed RDMA port fails with a reason (\"%s\")", c ? objRdmaErrStr(c) : "");
    /* A bound on a hang, not on speed: a loaded machine (an emulated guest beside
     * CI's other lanes) takes seconds over the 3 s timeout for a refused connect. */
    check(nowMs() - t0 < 60000, NULL, "... and gives up (%lld ms; a hang is bounded at 60 s)",
          nowMs() - t0);
    check(objRdmaCommand(c, "PING") == NULL, c, "... and a failed context refuses commands");
    objRdmaFree(c);
    c = objRdmaConnect("not-an-address.invalid", port, 1000);
    check(c && objRdmaErr(c) == OBJ_RDMA_ERR_OTHER, NULL, "an unresolvable name fails (\"%s\")",
          c ? objRdmaErrStr(c) : "");
    objRdmaFree(c);
    objRdmaFree(NULL);
    check(1, NULL, "objRdmaFree(NULL) is a no-op");
}

/* Every RESP2 reply type comes back as the matching redisReply. */
static void testReplyTypes(ObjRdmaConn *c)
{
    char key[64], bin[] = "a\0b\r\nc$*-+:";
    size_t binLen = sizeof(bin) - 1;
    redisReply *r;

    snprintf(key, sizeof(key), "%s:k", tag);
    r = objRdmaCommand(c, "PING");
    check(isReply(r, REDIS_REPLY_STATUS, "PONG"), c, "PING -> status PONG");
    freeReplyObject(r);
    r = objRdmaCommand(c, "SET %s %b", key, bin, binLen);
    check(isReply(r, REDIS_REPLY_STATUS, "OK"), c, "SET -> status OK");
    freeReplyObject(r);
    r = objRdmaCommand(c, "GET %s", key);
    check(r && r->type == REDIS_REPLY_STRING && r->len == binLen && !memcmp(r->str, bin, binLen), c,
          "GET -> the binary bulk string back (NUL, CR LF inside)");
    freeReplyObject(r);
    r = objRdmaCommand(c, "SET %s %b", key, "", (size_t)0);
    freeReplyObject(r);
    r = objRdmaCommand(c, "GET %s", key);
    check(isReply(r, REDIS_REPLY_STRING, ""), c, "empty bulk string");
    freeReplyObject(r);
    r = objRdmaCommand(c, "DEL %s", key);
    check(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1, c, "DEL -> integer 1");
    freeReplyObject(r);
    r = objRdmaCommand(c, "GET %s", key);
    check(r && r->type == REDIS_REPLY_NIL, c, "GET of a missing key -> nil bulk");
    freeReplyObject(r);
    r = objRdmaCommand(c, "INCR %s", key);
    freeReplyObject(r);
    r = objRdmaCommand(c, "INCR %s", key);
    check(r && r->type == REDIS_REPLY_INTEGER && r->integer == 2, c, "INCR -> integer 2");
    freeReplyObject(r);
    r = objRdmaCommand(c, "NOSUCHCOMMAND-%s", tag);
    check(r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "ERR", 3), c,
          "unknown command -> error reply (\"%s\")", r ? r->str : "");
    freeReplyObject(r);
    r = objRdmaCommand(c, "CONFIG GET maxmemory");
    check(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
              isReply(r->element[0], REDIS_REPLY_STRING, "maxmemory"),
          c, "CONFIG GET -> array of 2 bulk strings");
    freeReplyObject(r);
    r = objRdmaCommand(c, "CONFIG GET nosuchparameter-%s", tag);
    check(r && r->type == REDIS_REPLY_ARRAY && r->elements == 0, c, "empty array");
    freeReplyObject(r);
    r = objRdmaCommand(c, "XREAD COUNT 1 STREAMS %s:nostream 0", tag);
    check(r && r->type == REDIS_REPLY_NIL, c, "XREAD on nothing -> nil array");
    freeReplyObject(r);
    r = objRdmaCommand(c, "COMMAND INFO get");
    check(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1 &&
              r->element[0]->type == REDIS_REPLY_ARRAY && r->element[0]->elements >= 3,
          c, "COMMAND INFO -> nested arrays");
    freeReplyObject(r);

    char *big = malloc(bigValue);
    fillPattern(big, bigValue, 7);
    r = objRdmaCommand(c, "SET %s:big %b", tag, big, (size_t)bigValue);
    check(isReply(r, REDIS_REPLY_STATUS, "OK"), c,
          "SET of %zu bytes (a request larger than the receive buffer)", bigValue);
    freeReplyObject(r);
    r = objRdmaCommand(c, "GET %s:big", tag);
    check(r && r->type == REDIS_REPLY_STRING && r->len == bigValue &&
              !memcmp(r->str, big, bigValue),
          c, "GET of %zu bytes (a reply larger than the receive buffer) is intact", bigValue);
    freeReplyObject(r);
    r = objRdmaCommand(c, "DEL %s:big", tag);
    freeReplyObject(r);
    free(big);
}

/* A 10k-deep pipeline: every reply, in order. */
static void testPipeline(ObjRdmaConn *c)
{
    long long t0 = nowMs();
    char key[64];
    int good = 0;
    void *v;

    snprintf(key, sizeof(key), "%s:ctr", tag);
    freeReplyObject(objRdmaCommand(c, "DEL %s", key));
    for (int i = 0; i < pipelineDepth; i++) {
        if (objRdmaAppendCommand(c, "INCR %s", key) == -1)
            check(0, c, "append %d", i);
    }
    check(objRdmaPendingWrite(c) > 0, c, "appended commands wait in the send queue");
    for (int i = 0; i < pipelineDepth; i++) {
        if (objRdmaGetReply(c, &v) == -1)
            check(0, c, "reply %d of the pipeline", i);
        redisReply *r = v;
        good += r->type == REDIS_REPLY_INTEGER && r->integer == i + 1;
        freeReplyObject(r);
    }
    check(good == pipelineDepth, c, "%d pipelined INCRs answered in order (%lld ms)", pipelineDepth,
          nowMs() - t0);
    check(objRdmaPendingWrite(c) == 0, c, "the send queue is empty afterwards");
}

/* Whether objRdmaFd is readable right now. */
static int fdReadable(const ObjRdmaConn *c)
{
    struct pollfd pfd = {.fd = objRdmaFd(c), .events = POLLIN};
    return poll(&pfd, 1, 0) == 1;
}

/* objRdmaFd stays readable while a reader has left arrived bytes unread, and
 * goes quiet once it has taken them all: an event loop neither misses the
 * rest of a reply nor spins. */
static void testLeftoverWakes(void)
{
    ObjRdmaConn *c = connectOk("leftover");
    size_t vlen = 5000, got = 0, want;
    char *val = malloc(vlen), *cmd, buf[6000];
    int cl;

    fillPattern(val, vlen, 5);
    cl = redisFormatCommand(&cmd, "ECHO %b", val, vlen);
    want = (size_t)snprintf(buf, sizeof(buf), "$%zu\r\n", vlen) + vlen + 2;
    check(objRdmaWrite(c, cmd, (size_t)cl) == cl, c, "ECHO of %zu bytes written at once", vlen);
    redisFreeCommand(cmd);
    long long deadline = nowMs() + REPLY_TIMEOUT_MS;
    while (got == 0 && nowMs() < deadline) {
        struct pollfd pfd = {.fd = objRdmaFd(c), .events = POLLIN};
        poll(&pfd, 1, 100);
        objRdmaProcess(c);
        ssize_t n = objRdmaRead(c, buf, 10);
        if (n > 0)
            got += (size_t)n;
    }
    check(got == 10, c, "the first 10 bytes of the reply read");
    check(fdReadable(c), c, "objRdmaFd is readable while the rest waits unread");
    while (got < want && nowMs() < deadline) {
        ssize_t n = objRdmaRead(c, buf, sizeof(buf));
        if (n > 0)
            got += (size_t)n;
        else
            objRdmaProcess(c);
    }
    check(got == want, c, "the rest read (%zu of %zu bytes)", got, want);
    objRdmaProcess(c);
    check(!fdReadable(c), c, "objRdmaFd is quiet once everything was read");
    free(val);
    objRdmaFree(c);
}

/* The event-loop layer: objRdmaWrite/objRdmaRead/objRdmaProcess around poll(objRdmaFd). */
static void testNonBlocking(void)
{
    ObjRdmaConn *c = connectOk("non-blocking");
    redisReader *rd = redisReaderCreate();
    const int n = 3000;
    char *cmds = NULL, buf[1000];
    size_t len = 0, sent = 0;
    int got = 0, eagain = 0, loops = 0;
    long long deadline = nowMs() + REPLY_TIMEOUT_MS;

    for (int i = 0; i < n; i++) {
        char *one;
        int l = redisFormatCommand(&one, "ECHO %d", i);
        cmds = realloc(cmds, len + (size_t)l);
        memcpy(cmds + len, one, (size_t)l);
        len += (size_t)l;
        redisFreeCommand(one);
    }
    check(objRdmaFd(c) >= 0, c, "objRdmaFd gives a descriptor");
    while (got < n && nowMs() < deadline && loops++ < 1000000) {
        while (sent < len) {
            ssize_t w = objRdmaWrite(c, cmds + sent, len - sent);
            if (w < 0) {
                if (errno != EAGAIN)
                    check(0, c, "objRdmaWrite fails only with EAGAIN (errno %d)", errno);
                eagain++;
                break;
            }
            sent += (size_t)w;
        }
        for (;;) {
            ssize_t rn = objRdmaRead(c, buf, sizeof(buf)); /* small: leaves data behind */
            if (rn < 0)
                check(0, c, "objRdmaRead");
            if (rn == 0) {
                if (errno != EAGAIN)
                    check(0, c, "objRdmaRead returns 0 only with EAGAIN");
                break;
            }
            redisReaderFeed(rd, buf, (size_t)rn);
            void *rep;
            while (redisReaderGetReply(rd, &rep) == REDIS_OK && rep) {
                redisReply *r = rep;
                char want[16];
                snprintf(want, sizeof(want), "%d", got);
                if (!isReply(r, REDIS_REPLY_STRING, want))
                    check(0, c, "reply %d is ECHO's argument", got);
                got++;
                freeReplyObject(r);
            }
        }
        if (got == n)
            break;
        struct pollfd pfd = {.fd = objRdmaFd(c), .events = POLLIN};
        poll(&pfd, 1, 1000);
        if (objRdmaProcess(c) == -1)
            check(0, c, "objRdmaProcess");
    }
    check(got == n && sent == len, c,
          "%d commands (%zu bytes) through objRdmaWrite/objRdmaRead (%d EAGAINs, %d loops)", n, len,
          eagain, loops);
    free(cmds);

    /* One big command written in pieces as the server's receive buffer frees up. */
    size_t bigLen = bigWrite;
    char *val = malloc(bigLen), *cmd;
    fillPattern(val, bigLen, 11);
    int cl = redisFormatCommand(&cmd, "SET %s:nb %b", tag, val, bigLen);
    size_t off = 0;
    int writes = 0;
    deadline = nowMs() + REPLY_TIMEOUT_MS;
    while (off < (size_t)cl && nowMs() < deadline) {
        ssize_t w = objRdmaWrite(c, cmd + off, (size_t)cl - off);
        if (w > 0) {
            off += (size_t)w;
            writes++;
            continue;
        }
        if (errno != EAGAIN)
            check(0, c, "big write: only EAGAIN");
        struct pollfd pfd = {.fd = objRdmaFd(c), .events = POLLIN};
        poll(&pfd, 1, 1000);
        objRdmaProcess(c);
        /* Drain replies meanwhile (there are none yet, but the buffer comes back). */
        ssize_t rn = objRdmaRead(c, buf, sizeof(buf));
        if (rn > 0)
            redisReaderFeed(rd, buf, (size_t)rn);
    }
    /* The server's receive buffer is at most 16 MiB: a bigger command needs several writes. */
    check(off == (size_t)cl && (writes > 1 || (size_t)cl <= SP_RX_MAX), c,
          "a %zu-byte command accepted in %d partial writes", (size_t)cl, writes);
    redisFreeCommand(cmd);
    void *rep = NULL;
    deadline = nowMs() + REPLY_TIMEOUT_MS;
    while (rep == NULL && nowMs() < deadline) {
        ssize_t rn = objRdmaRead(c, buf, sizeof(buf));
        if (rn > 0) {
            redisReaderFeed(rd, buf, (size_t)rn);
            redisReaderGetReply(rd, &rep);
            continue;
        }
        if (rn != 0)
            check(0, c, "read while waiting for +OK");
        struct pollfd pfd = {.fd = objRdmaFd(c), .events = POLLIN};
        poll(&pfd, 1, 1000);
        objRdmaProcess(c);
    }
    check(isReply(rep, REDIS_REPLY_STATUS, "OK"), c, "... and answered +OK");
    freeReplyObject(rep);
    redisReply *r = objRdmaCommand(c, "GET %s:nb", tag);
    check(r && r->type == REDIS_REPLY_STRING && r->len == bigLen && !memcmp(r->str, val, bigLen), c,
          "... and stored intact (read back through the synchronous API)");
    freeReplyObject(r);
    freeReplyObject(objRdmaCommand(c, "DEL %s:nb", tag));
    free(val);
    redisReaderFree(rd);
    objRdmaFree(c);
}

typedef struct ConcArg {
    int index, ok;
    long long connectMs;
    char err[160];
    pthread_barrier_t *barrier;
} ConcArg;

/* One of the concurrent clients: connect together, then CONC_ROUNDS INCRs. */
static void *concThread(void *p)
{
    ConcArg *a = p;
    char key[80];

    pthread_barrier_wait(a->barrier);
    long long t0 = nowMs();
    ObjRdmaConn *c = objRdmaConnect(addr, port, 20000);
    a->connectMs = nowMs() - t0;
    if (c == NULL || objRdmaErr(c)) {
        snprintf(a->err, sizeof(a->err), "connect: %s", c ? objRdmaErrStr(c) : "OOM");
        objRdmaFree(c);
        return NULL;
    }
    objRdmaSetTimeout(c, REPLY_TIMEOUT_MS);
    if (password)
        freeReplyObject(objRdmaCommand(c, "AUTH %s", password));
    snprintf(key, sizeof(key), "%s:conc:%d", tag, a->index);
    for (int i = 0; i < CONC_ROUNDS; i++) {
        redisReply *r = objRdmaCommand(c, "INCR %s", key);
        if (r == NULL || r->type != REDIS_REPLY_INTEGER || r->integer != i + 1) {
            snprintf(a->err, sizeof(a->err), "INCR %d: %s", i,
                     r ? (r->type == REDIS_REPLY_ERROR ? r->str : "wrong reply")
                       : objRdmaErrStr(c));
            freeReplyObject(r);
            objRdmaFree(c);
            return NULL;
        }
        freeReplyObject(r);
    }
    freeReplyObject(objRdmaCommand(c, "DEL %s", key));
    a->ok = 1;
    objRdmaFree(c);
    return NULL;
}

/* Many connections at once, each in its own thread. */
static void testConcurrent(void)
{
    pthread_t *th = calloc((size_t)nConns, sizeof(*th));
    ConcArg *args = calloc((size_t)nConns, sizeof(*args));
    pthread_barrier_t barrier;
    long long t0 = nowMs();
    int ok = 0;
    long long maxConnect = 0;

    pthread_barrier_init(&barrier, NULL, (unsigned)nConns);
    for (int i = 0; i < nConns; i++) {
        args[i].index = i;
        args[i].barrier = &barrier;
        if (pthread_create(&th[i], NULL, concThread, &args[i]))
            check(0, NULL, "pthread_create %d", i);
    }
    for (int i = 0; i < nConns; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < nConns; i++) {
        ok += args[i].ok;
        if (args[i].connectMs > maxConnect)
            maxConnect = args[i].connectMs;
        if (!args[i].ok)
            printf("# client %d: %s\n", i, args[i].err);
    }
    check(ok == nConns, NULL,
          "%d concurrent connections (threads) each ran %d INCRs (%lld ms, slowest connect "
          "%lld ms)",
          nConns, CONC_ROUNDS, nowMs() - t0, maxConnect);
    pthread_barrier_destroy(&barrier);
    free(th);
    free(args);
}

/* The child of the kill test: holds objects (module), then keeps a window of
 * FLOOD_WINDOW SETs in flight while reading replies slowly, until killed. */
static int floodMain(void)
{
    ObjRdmaConn *c = objRdmaConnect(addr, port, 5000);
    char val[FLOOD_VALUE];
    long appended = 0, replied = 0;
    int rv = 0;
    void *v;

    if (c == NULL || objRdmaErr(c)) {
        printf("FLOOD-CONNECT-FAILED %s\n", c ? objRdmaErrStr(c) : "");
        objRdmaFree(c);
        return 1;
    }
    objRdmaSetTimeout(c, REPLY_TIMEOUT_MS);
    if (password)
        freeReplyObject(objRdmaCommand(c, "AUTH %s", password));
    int held = 0;
    if (moduleMode) {
        /* A created object and a pin: the server must drop both when we die. */
        redisReply *r1 = objRdmaCommand(c, "OBJ.CREATE %s:created 100", tag);
        redisReply *r2 = objRdmaCommand(c, "OBJ.PIN %s:pinned", tag);
        held = r1 && r1->type == REDIS_REPLY_ARRAY && r2 && r2->type == REDIS_REPLY_ARRAY;
        freeReplyObject(r1);
        freeReplyObject(r2);
    }
    memset(val, 'f', FLOOD_VALUE);
    /* Read slowly: the pipeline stays full in both directions. */
    while (replied < FLOOD_TOTAL) {
        while (appended - replied < FLOOD_WINDOW) {
            objRdmaAppendCommand(c, "SET %s:flood %b", tag, val, (size_t)FLOOD_VALUE);
            appended++;
        }
        if (objRdmaGetReply(c, &v) == -1) {
            printf("FLOOD-FAILED %s\n", objRdmaErrStr(c));
            rv = 1;
            break;
        }
        freeReplyObject(v);
        if (++replied == 100) {
            printf("FLOODING held=%d\n", held);
            fflush(stdout);
        }
        if (replied > 100)
            usleep(200);
    }
    if (rv == 0)
        printf("FLOOD-DONE\n");
    objRdmaFree(c);
    return rv;
}

/* Kill a client in the middle of a pipeline; the server must carry on (and,
 * for the module, drop what that client held). */
static void testKilledClient(ObjRdmaConn *keep)
{
    int pipefd[2];
    posix_spawn_file_actions_t fa;
    char portStr[16], *argv[8];
    int ac = 0;
    pid_t pid;
    char line[256] = "";

    if (moduleMode) {
        char id[64];
        snprintf(id, sizeof(id), "%s:pinned", tag);
        redisReply *r = objRdmaCommand(keep, "OBJ.PUT %s data", id);
        check(isReply(r, REDIS_REPLY_STATUS, "OK"), keep, "OBJ.PUT an object for the child to pin");
        freeReplyObject(r);
    }
    snprintf(portStr, sizeof(portStr), "%d", port);
    argv[ac++] = (char *)selfPath;
    argv[ac++] = "--flood";
    argv[ac++] = (char *)addr;
    argv[ac++] = portStr;
    argv[ac++] = tag;
    argv[ac++] = moduleMode ? "module" : "plain";
    argv[ac++] = (char *)(password ? password : "");
    argv[ac] = NULL;
    check(pipe(pipefd) == 0, NULL, "pipe");
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, pipefd[1], 1);
    posix_spawn_file_actions_addclose(&fa, pipefd[0]);
    check(posix_spawn(&pid, selfPath, &fa, NULL, argv, environ) == 0, NULL,
          "start the flooding child");
    posix_spawn_file_actions_destroy(&fa);
    close(pipefd[1]);
    FILE *f = fdopen(pipefd[0], "r");
    struct pollfd pfd = {.fd = pipefd[0], .events = POLLIN};
    if (poll(&pfd, 1, 30000) > 0 && fgets(line, sizeof(line), f) == NULL)
        line[0] = '\0';
    int flooding = strncmp(line, "FLOODING", 8) == 0;
    if (!flooding) {
        kill(pid, SIGKILL); /* do not leave it behind */
        waitpid(pid, NULL, 0);
    }
    check(flooding, NULL, "the child is mid-pipeline (\"%.*s\")", (int)strcspn(line, "\n"), line);
    usleep(300 * 1000);
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    fclose(f);
    check(WIFSIGNALED(status), NULL, "the child was killed mid-pipeline");

    long long t0 = nowMs();
    redisReply *r = objRdmaCommand(keep, "PING");
    check(isReply(r, REDIS_REPLY_STATUS, "PONG"), keep,
          "an existing connection still gets answers (%lld ms)", nowMs() - t0);
    freeReplyObject(r);
    ObjRdmaConn *c = connectOk("after the kill");
    r = objRdmaCommand(c, "GET %s:flood", tag);
    check(r && r->type == REDIS_REPLY_STRING && r->len == FLOOD_VALUE, c,
          "a new connection works, the child's SETs landed");
    freeReplyObject(r);
    freeReplyObject(objRdmaCommand(c, "DEL %s:flood", tag));
    if (moduleMode && strstr(line, "held=1") == NULL) {
        /* The front door refuses OBJ.CREATE/OBJ.PIN (per-connection state). */
        check(1, c, "# SKIP the child could not create or pin over RDMA: nothing to drop");
    } else if (moduleMode) {
        /* The server learns of the death asynchronously: poll, bounded. */
        int pins = -1, created = -1;
        for (int i = 0; i < 50 && (pins != 0 || created != 0); i++) {
            r = objRdmaCommand(c, "OBJ.INFO %s:pinned", tag);
            pins = -1;
            for (size_t j = 0; r && r->type == REDIS_REPLY_ARRAY && j + 1 < r->elements; j += 2) {
                if (isReply(r->element[j], REDIS_REPLY_STRING, "pins") ||
                    isReply(r->element[j], REDIS_REPLY_STATUS, "pins"))
                    pins = (int)r->element[j + 1]->integer;
            }
            freeReplyObject(r);
            r = objRdmaCommand(c, "OBJ.EXISTS %s:created", tag);
            redisReply *r2 = objRdmaCommand(c, "OBJ.INFO %s:created", tag);
            created = (r2 && r2->type == REDIS_REPLY_ERROR) ? 0 : 1;
            freeReplyObject(r);
            freeReplyObject(r2);
            if (pins != 0 || created != 0)
                usleep(100 * 1000);
        }
        check(pins == 0, c, "the killed client's pin was dropped");
        check(created == 0, c, "the killed client's created object was aborted");
        freeReplyObject(objRdmaCommand(c, "OBJ.DEL %s:pinned", tag));
    }
    objRdmaFree(c);
}

/* QUIT: the server answers, then closes; the client reports EOF. */
static void testQuit(void)
{
    ObjRdmaConn *c = connectOk("quit");
    redisReply *r = objRdmaCommand(c, "QUIT");

    check(isReply(r, REDIS_REPLY_STATUS, "OK"), c, "QUIT -> OK");
    freeReplyObject(r);
    long long t0 = nowMs();
    r = objRdmaCommand(c, "PING");
    check(r == NULL && objRdmaErr(c) == OBJ_RDMA_ERR_EOF, c,
          "the next command fails with EOF after the server closed (%lld ms; \"%s\")", nowMs() - t0,
          objRdmaErrStr(c));
    objRdmaFree(c);
}

/* requirepass: commands need AUTH; a wrong password is refused. */
static void testAuth(void)
{
    ObjRdmaConn *c = objRdmaConnect(addr, port, 5000);
    redisReply *r;

    check(c && !objRdmaErr(c), c, "connect (auth)");
    objRdmaSetTimeout(c, REPLY_TIMEOUT_MS);
    r = objRdmaCommand(c, "PING");
    check(r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "NOAUTH", 6), c,
          "PING before AUTH -> NOAUTH (\"%s\")", r ? r->str : "");
    freeReplyObject(r);
    r = objRdmaCommand(c, "AUTH %s-wrong", password);
    check(r && r->type == REDIS_REPLY_ERROR, c, "AUTH with a wrong password -> error (\"%s\")",
          r ? r->str : "");
    freeReplyObject(r);
    r = objRdmaCommand(c, "AUTH %s", password);
    check(isReply(r, REDIS_REPLY_STATUS, "OK"), c, "AUTH with the password -> OK");
    freeReplyObject(r);
    r = objRdmaCommand(c, "PING");
    check(isReply(r, REDIS_REPLY_STATUS, "PONG"), c, "PING after AUTH -> PONG");
    freeReplyObject(r);
    objRdmaFree(c);
}

/* OBJ.* over RDMA, and ObjClient's copying calls (zero-copy too: same host). */
static void testModule(ObjRdmaConn *c)
{
    char id[64];
    size_t len = 300 * 1024;
    char *data = malloc(len);
    redisReply *r;

    fillPattern(data, len, 3);
    snprintf(id, sizeof(id), "%s:obj", tag);
    r = objRdmaCommand(c, "OBJ.PUT %s %b META m1", id, data, len);
    check(isReply(r, REDIS_REPLY_STATUS, "OK"), c, "OBJ.PUT of %zu bytes over RDMA", len);
    freeReplyObject(r);
    r = objRdmaCommand(c, "OBJ.GET %s", id);
    check(r && r->type == REDIS_REPLY_STRING && r->len == len && !memcmp(r->str, data, len), c,
          "OBJ.GET returns it intact");
    freeReplyObject(r);
    r = objRdmaCommand(c, "OBJ.PUT %s x", id);
    check(r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "EXISTS", 6), c,
          "OBJ.PUT again -> EXISTS");
    freeReplyObject(r);

    /* ObjClient over RDMA. */
    ObjClient *oc = objClientConnectRdma(addr, port);
    check(oc && objClientErrCode(oc) == OBJ_OK, NULL, "objClientConnectRdma (%s)",
          oc ? objClientErrMsg(oc) : "OOM");
    if (password) {
        /* ObjClient has no AUTH call: only the refusal is checked. */
        int ex = 0;
        check(objClientExists(oc, id, strlen(id), &ex) == -1, NULL,
              "ObjClient over RDMA without AUTH is refused (\"%s\")", objClientErrMsg(oc));
        objClientFree(oc);
        free(data);
        return;
    }
    char id2[64];
    void *got = NULL;
    size_t gotLen = 0;
    int exists = -1;
    ObjInfo info;
    snprintf(id2, sizeof(id2), "%s:oc", tag);
    check(objClientPut(oc, id2, strlen(id2), data, len, "meta", 4) == 0, NULL,
          "objClientPut over RDMA (%s)", objClientErrMsg(oc));
    check(objClientGet(oc, id2, strlen(id2), 0, &got, &gotLen) == 0 && gotLen == len &&
              !memcmp(got, data, len),
          NULL, "objClientGet over RDMA returns the bytes (%s)", objClientErrMsg(oc));
    objClientFreeData(got);
    check(objClientExists(oc, id2, strlen(id2), &exists) == 0 && exists == 1, NULL,
          "objClientExists over RDMA");
    check(objClientInfo(oc, id2, strlen(id2), &info) == 0 && info.size == len && info.sealed, NULL,
          "objClientInfo over RDMA (%s)", objClientErrMsg(oc));
    check(objClientGet(oc, "nope-x", 6, 0, &got, &gotLen) == -1 &&
              objClientErrCode(oc) == OBJ_ERR_NOTFOUND,
          NULL, "objClientGet of a missing id -> OBJ_ERR_NOTFOUND over RDMA");

    /* Zero-copy: same host, so the arena maps (OBJ.STATS over this connection). */
    void *p = NULL;
    char id3[64];
    snprintf(id3, sizeof(id3), "%s:zc", tag);
    int rc = objClientCreate(oc, id3, strlen(id3), 4096, NULL, 0, &p);
    if (rc == -1 && strstr(objClientErrMsg(oc), "not supported over RDMA")) {
        /* The front door runs commands on pooled clients: no per-connection objects. */
        printf("# NOTE: the server refuses zero-copy create over RDMA: %s\n", objClientErrMsg(oc));
        check(objClientErrCode(oc) == OBJ_ERR_OTHER, NULL,
              "objClientCreate over RDMA is refused with a clear error");
        ObjBuffer b;
        check(objClientPin(oc, id2, strlen(id2), 0, &b) == -1 &&
                  strstr(objClientErrMsg(oc), "not supported over RDMA"),
              NULL, "objClientPin over RDMA is refused with a clear error");
    } else {
        check(rc == 0 && p, NULL, "objClientCreate over RDMA maps the arena (%s)",
              objClientErrMsg(oc));
        memset(p, 0x5a, 4096);
        check(objClientSeal(oc, id3, strlen(id3)) == 0, NULL, "objClientSeal");
        ObjBuffer b;
        check(objClientPin(oc, id3, strlen(id3), 0, &b) == 0 && b.size == 4096 &&
                  ((const unsigned char *)b.data)[4095] == 0x5a,
              NULL, "objClientPin over RDMA gives the bytes in place");
        check(objClientRelease(oc, id3, strlen(id3)) == 0, NULL, "objClientRelease");
    }

    /* A waiting OBJ.GET over RDMA is woken by a put from another connection. */
    char id4[64];
    snprintf(id4, sizeof(id4), "%s:later", tag);
    check(objRdmaAppendCommand(c, "OBJ.GET %s TIMEOUT 10000", id4) == 0 && objRdmaProcess(c) == 0 &&
              objRdmaPendingWrite(c) == 0,
          c, "send a waiting OBJ.GET (objRdmaProcess posts the queue)");
    usleep(300 * 1000);
    check(objClientPut(oc, id4, strlen(id4), "late", 4, NULL, 0) == 0, NULL,
          "put the awaited object from another connection");
    void *v = NULL;
    check(objRdmaGetReply(c, &v) == 0, c, "reply to the waiting OBJ.GET");
    if (((redisReply *)v)->type == REDIS_REPLY_ERROR &&
        strstr(((redisReply *)v)->str, "not supported over RDMA")) {
        printf("# NOTE: the server refuses waiting OBJ.GET over RDMA: %s\n",
               ((redisReply *)v)->str);
        check(1, c, "a waiting OBJ.GET over RDMA is refused with a clear error");
    } else {
        check(isReply(v, REDIS_REPLY_STRING, "late"), c,
              "the waiting OBJ.GET over RDMA was woken with the data");
    }
    freeReplyObject(v);
    objClientDelete(oc, id2, strlen(id2));
    objClientDelete(oc, id3, strlen(id3));
    objClientDelete(oc, id4, strlen(id4));
    freeReplyObject(objRdmaCommand(c, "OBJ.DEL %s", id));
    objClientFree(oc);
    free(data);
}

int main(int argc, char **argv)
{
    int authOnly = 0;

    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    selfPath = argv[0];
    if (argc >= 7 && !strcmp(argv[1], "--flood")) {
        addr = argv[2];
        port = atoi(argv[3]);
        snprintf(tag, sizeof(tag), "%s", argv[4]);
        moduleMode = !strcmp(argv[5], "module");
        password = argv[6][0] ? argv[6] : NULL;
        return floodMain();
    }
    if (argc < 3) {
        fprintf(stderr,
                "usage: %s ADDR PORT [--module] [--password PW] [--auth-only] "
                "[--tcp-port P] [--conns N]\n",
                argv[0]);
        return 2;
    }
    addr = argv[1];
    port = atoi(argv[2]);
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--module"))
            moduleMode = 1;
        else if (!strcmp(argv[i], "--auth-only"))
            authOnly = 1;
        else if (!strcmp(argv[i], "--password") && i + 1 < argc)
            password = argv[++i];
        else if (!strcmp(argv[i], "--tcp-port") && i + 1 < argc)
            tcpPort = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--conns") && i + 1 < argc)
            nConns = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--depth") && i + 1 < argc)
            pipelineDepth = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--big") && i + 1 < argc)
            bigValue = bigWrite = strtoul(argv[++i], NULL, 10);
    }
    snprintf(tag, sizeof(tag), "rc%d", (int)getpid());

    if (authOnly) {
        testAuth();
        if (moduleMode) {
            ObjRdmaConn *c = connectOk("module with auth");
            testModule(c);
            objRdmaFree(c);
        }
        printf("1..%d\n", checks);
        return 0;
    }
    testConnectFailures();
    ObjRdmaConn *c = connectOk("main");
    testReplyTypes(c);
    testPipeline(c);
    testNonBlocking();
    testLeftoverWakes();
    if (moduleMode)
        testModule(c);
    testConcurrent();
    testKilledClient(c);
    testQuit();
    if (tcpPort) {
        redisContext *t = redisConnect("127.0.0.1", tcpPort);
        redisReply *r = t && !t->err ? redisCommand(t, "PING") : NULL;
        check(r != NULL, NULL, "the node still answers on TCP port %d", tcpPort);
        freeReplyObject(r);
        redisFree(t);
    }
    objRdmaFree(c);
    printf("1..%d\n", checks);
    return 0;
}
