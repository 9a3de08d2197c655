/*
 * test_client.c - the C client library (client/objstore.h) against a live
 * objstore node: every API call, its error codes and the zero-copy path; the
 * version macros against objVersion(), and the allocator hooks (a counting
 * allocator must see every block the library takes given back).
 *
 * Usage: test_client HOST PORT [UNIX_SOCKET]. The node must run the module
 * with an arena of at least 32 MiB and be on this machine (the zero-copy
 * checks map its arena). Each check prints one TAP-style line ("ok N - ...");
 * the first failure prints "not ok", the error code and message, and exits
 * 1. Ids carry the pid so runs against one node do not collide. Every wait
 * is bounded: server timeouts are short and polling loops stop after 2 s.
 * The pin cache checks read the node's OBJ.STATS counters over a second,
 * plain hiredis connection, so they assume nothing else uses the node.
 *
 * Build (from the repository root):
 *   cc -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -pthread -Iclient -Imodule \
 *      -o build/tests/test_client tests/server/test_client.c client/objstore.c client/alloc.c \
 *      -lhiredis -lxxhash
 */
#include "objstore.h"
#include "common/errwords.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include <hiredis/hiredis.h>

#define BIG_SIZE         (8u * 1024 * 1024)
#define POLL_LIMIT_MS    2000
#define WAITER_DELAY_MS  150
#define WAITER_BUDGET_MS 5000

static const char *testHost;
static int testPort;
static int testChecks;

/* ---- reporting ------------------------------------------------------------------------- */

/*
 * Report one check: print "ok N - what", or "not ok N - what" with the
 * client's error (c may be NULL) and exit(1). Returns only when cond holds.
 */
static void check(int cond, ObjClient *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void check(int cond, ObjClient *c, const char *fmt, ...)
{
    va_list ap;

    testChecks++;
    printf("%s %d - ", cond ? "ok" : "not ok", testChecks);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    if (!cond) {
        if (c != NULL)
            printf("# last error: code %d, message \"%s\"\n", (int)objClientErrCode(c),
                   objClientErrMsg(c));
        fflush(stdout);
        exit(1);
    }
    fflush(stdout);
}

/* Check that a call succeeded and left no error behind. */
static void expectOk(ObjClient *c, int rv, const char *what)
{
    check(rv == 0 && objClientErrCode(c) == OBJ_OK && objClientErrMsg(c)[0] == '\0', c,
          "%s succeeds", what);
}

/* The one list of code words (common/errwords.h): word and ObjErr. */
#define TEST_WORD_ROW(word, code, pyClass, origin, meaning) {#word, code},
static const struct {
    const char *word;
    ObjErr code;
} errWords[] = {OBJ_ERR_WORDS(TEST_WORD_ROW)};
#undef TEST_WORD_ROW
#define ERR_WORDS_N (sizeof(errWords) / sizeof(errWords[0]))

/* The code word the server puts first for err: NULL for a local-only code
 * and for one that several words share (OBJ_ERR_OTHER, OBJ_ERR_AUTH). */
static const char *codeWord(ObjErr err)
{
    const char *found = NULL;

    for (size_t i = 0; i < ERR_WORDS_N; i++) {
        if (errWords[i].code != err)
            continue;
        if (found != NULL)
            return NULL;
        found = errWords[i].word;
    }
    return found;
}

/* The ObjErr the list gives the code word that starts msg (OBJ_ERR_OTHER
 * for a word it does not have). */
static ObjErr wordCode(const char *msg)
{
    size_t n = strcspn(msg, " ");

    for (size_t i = 0; i < ERR_WORDS_N; i++)
        if (strlen(errWords[i].word) == n && strncmp(errWords[i].word, msg, n) == 0)
            return errWords[i].code;
    return OBJ_ERR_OTHER;
}

/*
 * Check that a call failed with err and a message; for server codes the
 * message must start with the code word.
 */
static void expectErr(ObjClient *c, int rv, ObjErr err, const char *what)
{
    const char *word = codeWord(err);
    const char *msg = objClientErrMsg(c);

    check(rv == -1 && objClientErrCode(c) == err && msg[0] != '\0' &&
              (word == NULL || strncmp(msg, word, strlen(word)) == 0),
          c, "%s fails with %s (\"%s\")", what, word ? word : "a local error", msg);
}

/* ---- helpers ------------------------------------------------------------------------------ */

/* A per-run id for name (eight rotating buffers, enough for one check). */
static const char *tid(const char *name)
{
    static char bufs[8][128];
    static int next;
    char *b = bufs[next++ % 8];

    snprintf(b, sizeof(bufs[0]), "ct:%ld:%s", (long)getpid(), name);
    return b;
}

static long long nowMs(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleepMs(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* Connect to the node under test; a failure ends the run. */
static ObjClient *connectNode(void)
{
    ObjClient *c = objClientConnect(testHost, testPort);

    check(c != NULL && objClientErrCode(c) == OBJ_OK, c, "connect to %s:%d", testHost, testPort);
    return c;
}

/* Deterministic bytes for the zero-copy checks (xorshift64, seeded). */
static void fillPattern(unsigned char *p, size_t n, uint64_t seed)
{
    uint64_t x = seed | 1;

    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        p[i] = (unsigned char)x;
    }
}

/* XXH3-64 of data then metadata: what OBJ.INFO reports as the checksum. */
static uint64_t objectChecksum(const void *data, size_t size, const void *meta, size_t metaSize)
{
    XXH3_state_t *st = XXH3_createState();
    uint64_t h;

    if (st == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, data, size);
    XXH3_64bits_update(st, meta, metaSize);
    h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

/* ---- version and allocator hooks --------------------------------------------------------- */

/* A counting allocator: the C library's, plus how many blocks it handed out
 * and how many of them are still live. Only the main thread runs while it
 * is installed. */
static long countCalls, countLive;

static void *countMalloc(size_t size)
{
    void *p = malloc(size);

    countCalls++;
    countLive += p != NULL;
    return p;
}

static void *countCalloc(size_t nmemb, size_t size)
{
    void *p = calloc(nmemb, size);

    countCalls++;
    countLive += p != NULL;
    return p;
}

static void *countRealloc(void *ptr, size_t size)
{
    void *p = realloc(ptr, size);

    countCalls++;
    countLive += ptr == NULL && p != NULL;
    return p;
}

static void countFree(void *ptr)
{
    countLive -= ptr != NULL;
    free(ptr);
}

static void testVersionMatchesTheHeader(void)
{
    char text[32];

    snprintf(text, sizeof(text), "%d.%d.%d", OBJSTORE_VERSION_MAJOR, OBJSTORE_VERSION_MINOR,
             OBJSTORE_VERSION_PATCH);
    check(strcmp(text, OBJSTORE_VERSION_STRING) == 0, NULL,
          "OBJSTORE_VERSION_STRING \"%s\" spells the version macros (%s)", OBJSTORE_VERSION_STRING,
          text);
    check(objVersion() == OBJSTORE_VERSION, NULL,
          "objVersion() is the header's OBJSTORE_VERSION (0x%06x)", objVersion());
}

static void testIncompleteAllocatorTableIsRefused(void)
{
    ObjAllocFuncs partial = {countMalloc, countCalloc, countRealloc, NULL};
    ObjAllocFuncs old = objSetAllocators(&partial);

    check(old.mallocFn == malloc && old.freeFn == free, NULL,
          "the C library's allocator is in force by default");
    old = objSetAllocators(NULL);
    check(old.mallocFn == malloc && old.callocFn == calloc && old.reallocFn == realloc &&
              old.freeFn == free,
          NULL, "a table without free, and a NULL table, change nothing");
}

/*
 * Every block the library allocates while serving a connection (context,
 * arena path, pin cache, objClientGet's copy) comes from the hooks and goes
 * back to them: none are live once the data and the client are freed.
 */
static void testEveryAllocationGoesThroughTheHooks(void)
{
    ObjAllocFuncs counting = {countMalloc, countCalloc, countRealloc, countFree};
    const char *id = tid("alloc");
    const char text[] = "counted";
    long liveBeforeGet;
    ObjClient *c;
    ObjBuffer buf;
    void *got;
    size_t size;

    countCalls = countLive = 0;
    objSetAllocators(&counting);
    c = connectNode();
    check(countCalls > 0 && countLive > 0, c, "the context comes from the hooks (%ld live)",
          countLive);
    expectOk(c, objClientPut(c, id, strlen(id), text, sizeof(text), NULL, 0), "put");
    liveBeforeGet = countLive;
    expectOk(c, objClientGet(c, id, strlen(id), 0, &got, &size), "get");
    check(countLive == liveBeforeGet + 1, c, "objClientGet's copy comes from the hooks");
    objClientFreeData(got);
    check(countLive == liveBeforeGet, c, "objClientFreeData gives the copy back to the hooks");
    expectOk(c, objClientSetPinCache(c, 4), "enable the pin cache");
    expectOk(c, objClientPin(c, id, strlen(id), 0, &buf), "pin (maps the arena, caches the pin)");
    expectOk(c, objClientRelease(c, id, strlen(id)), "release (kept in the cache)");
    check(countLive > liveBeforeGet, c, "the arena path and the pin cache come from the hooks");
    expectOk(c, objClientFlushReleases(c), "flush");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete");
    objClientFree(c);
    check(countLive == 0, NULL, "no block of the hooks is live after objClientFree (%ld)",
          countLive);
    objResetAllocators();
    check(objSetAllocators(NULL).mallocFn == malloc, NULL,
          "objResetAllocators puts the C library's allocator back");
}

/* ---- connection --------------------------------------------------------------------------- */

static void testConnectSucceedsWithoutError(void)
{
    ObjClient *c = connectNode();

    check(objClientErrMsg(c)[0] == '\0', c, "a fresh connection has an empty error message");
    objClientFree(c);
    objClientFree(NULL);
    check(1, NULL, "objClientFree(NULL) is harmless");
}

/* A port that refuses connections: a bound socket that never listens. */
static void testConnectRefusedIsIoError(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    ObjClient *c;
    int exists;

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    check(fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
              getsockname(fd, (struct sockaddr *)&sa, &len) == 0,
          NULL, "reserve a closed loopback port");
    c = objClientConnect("127.0.0.1", ntohs(sa.sin_port));
    close(fd);
    check(c != NULL, NULL, "connect to a closed port still returns a context");
    check(objClientErrCode(c) == OBJ_ERR_IO && objClientErrMsg(c)[0] != '\0', c,
          "connect to a closed port is OBJ_ERR_IO (\"%s\")", objClientErrMsg(c));
    expectErr(c, objClientExists(c, "k", 1, &exists), OBJ_ERR_IO, "a call on a failed connection");
    objClientFree(c);
}

static void testConnectUnixMissingPathIsIoError(void)
{
    ObjClient *c = objClientConnectUnix("/nonexistent/objstore-test.sock");

    check(c != NULL && objClientErrCode(c) == OBJ_ERR_IO && objClientErrMsg(c)[0] != '\0', c,
          "connect to a missing unix socket is OBJ_ERR_IO");
    objClientFree(c);
}

static void testConnectUnixWorks(const char *path)
{
    ObjClient *c = objClientConnectUnix(path);
    const char *id = tid("unix");
    void *data;
    size_t size;

    check(c != NULL && objClientErrCode(c) == OBJ_OK, c, "connect to unix socket %s", path);
    expectOk(c, objClientPut(c, id, strlen(id), "abc", 3, NULL, 0), "put over a unix socket");
    expectOk(c, objClientGet(c, id, strlen(id), 0, &data, &size), "get over a unix socket");
    check(size == 3 && memcmp(data, "abc", 3) == 0, c, "unix socket get returns the bytes");
    objClientFreeData(data);
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete over a unix socket");
    objClientFree(c);
}

/* ---- copying put / get -------------------------------------------------------------------- */

static void testPutGetRoundTripIsBinarySafe(ObjClient *c)
{
    const char data[] = "bin\0ary\r\n\xff data";
    const char meta[] = "m\0eta";
    const char *id = tid("bin");
    char binId[64];
    size_t binLen = strlen(id) + 3;
    void *got;
    size_t size;

    /* An id with an embedded NUL: "ct:<pid>:bin", NUL, "id". */
    memcpy(binId, id, strlen(id));
    memcpy(binId + strlen(id), "\0id", 3);
    expectOk(c, objClientPut(c, binId, binLen, data, sizeof(data), meta, sizeof(meta)),
             "put of binary data and metadata under a binary id");
    expectOk(c, objClientGet(c, binId, binLen, 0, &got, &size), "get of the binary object");
    check(size == sizeof(data) && memcmp(got, data, size) == 0, c,
          "get returns exactly the bytes that were put (%zu bytes)", size);
    objClientFreeData(got);
    expectErr(c, objClientGet(c, binId, strlen(id), 0, &got, &size), OBJ_ERR_NOTFOUND,
              "get of the id cut at its NUL");
    expectOk(c, objClientDelete(c, binId, binLen), "delete of the binary id");
}

static void testPutOfExistingIdIsExists(ObjClient *c)
{
    const char *id = tid("dup");
    int exists = -1;

    expectOk(c, objClientPut(c, id, strlen(id), "one", 3, NULL, 0), "first put");
    expectErr(c, objClientPut(c, id, strlen(id), "two", 3, NULL, 0), OBJ_ERR_EXISTS,
              "second put of the same id");
    expectOk(c, objClientExists(c, id, strlen(id), &exists), "exists right after an error");
    check(exists == 1, c, "a successful call clears the previous error, and exists says 1");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete");
    expectOk(c, objClientExists(c, id, strlen(id), &exists), "exists after delete");
    check(exists == 0, c, "exists says 0 after delete");
}

static void testGetOfMissingIdIsNotFoundAtOnce(ObjClient *c)
{
    const char *id = tid("missing");
    void *data = NULL;
    size_t size = 0;
    long long t0 = nowMs();

    expectErr(c, objClientGet(c, id, strlen(id), 0, &data, &size), OBJ_ERR_NOTFOUND,
              "get of a missing id without timeout");
    check(nowMs() - t0 < 1000 && data == NULL, c, "it answers at once and leaves *data alone");
}

static void testGetOfMissingIdTimesOut(ObjClient *c)
{
    const char *id = tid("missing");
    void *data;
    size_t size;
    long long t0 = nowMs(), elapsed;

    expectErr(c, objClientGet(c, id, strlen(id), 100, &data, &size), OBJ_ERR_TIMEOUT,
              "get of a missing id with a 100 ms timeout");
    elapsed = nowMs() - t0;
    check(elapsed >= 80 && elapsed < WAITER_BUDGET_MS, c, "it waited about 100 ms (%lld ms)",
          elapsed);
    expectErr(c, objClientGet(c, id, strlen(id), -2, &data, &size), OBJ_ERR_BADARG,
              "get with timeout -2");
}

static void testZeroByteObjectRoundTrips(ObjClient *c)
{
    const char *id = tid("empty");
    void *data = NULL;
    size_t size = 99;
    ObjInfo info;

    expectOk(c, objClientPut(c, id, strlen(id), NULL, 0, NULL, 0), "put of a 0-byte object");
    expectOk(c, objClientGet(c, id, strlen(id), 0, &data, &size), "get of a 0-byte object");
    check(data != NULL && size == 0, c, "a 0-byte get returns a non-NULL buffer and size 0");
    objClientFreeData(data);
    expectOk(c, objClientInfo(c, id, strlen(id), &info), "info of a 0-byte object");
    check(info.sealed && info.size == 0 && info.metaSize == 0, c,
          "info: sealed, size 0, meta_size 0");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete of a 0-byte object");
}

static void testBadIdsAreBadArg(ObjClient *c)
{
    char longId[513];
    void *data;
    size_t size;

    memset(longId, 'x', sizeof(longId));
    expectErr(c, objClientPut(c, "", 0, "x", 1, NULL, 0), OBJ_ERR_BADARG, "put with an empty id");
    expectErr(c, objClientPut(c, longId, 513, "x", 1, NULL, 0), OBJ_ERR_BADARG,
              "put with a 513-byte id");
    memcpy(longId, tid("long"), strlen(tid("long")));
    expectOk(c, objClientPut(c, longId, 512, "x", 1, NULL, 0), "put with a 512-byte id");
    expectOk(c, objClientDelete(c, longId, 512), "delete of the 512-byte id");
    expectErr(c, objClientPut(c, NULL, 3, "x", 1, NULL, 0), OBJ_ERR_BADARG,
              "put with a NULL id and a length");
    expectErr(c, objClientPut(c, "k", 1, NULL, 5, NULL, 0), OBJ_ERR_BADARG,
              "put with NULL data and a length");
    expectErr(c, objClientGet(c, "k", 1, 0, NULL, &size), OBJ_ERR_BADARG,
              "get with a NULL data pointer");
    expectErr(c, objClientGet(c, "k", 1, 0, &data, NULL), OBJ_ERR_BADARG,
              "get with a NULL size pointer");
    expectErr(c, objClientExists(c, "k", 1, NULL), OBJ_ERR_BADARG, "exists with a NULL result");
    expectErr(c, objClientInfo(c, "k", 1, NULL), OBJ_ERR_BADARG, "info with a NULL result");
    expectErr(c, objClientPin(c, "k", 1, 0, NULL), OBJ_ERR_BADARG, "pin with a NULL result");
    expectErr(c, objClientCreate(c, "k", 1, 1, NULL, 0, NULL), OBJ_ERR_BADARG,
              "create with a NULL data pointer");
}

/* ---- copies -------------------------------------------------------------------------------- */

/* A put or seal with the node's default copies (one, here) counts one holder,
 * inline and through the arena. */
static void testDefaultPutCountsOneHolder(ObjClient *c)
{
    const char *small = tid("copies-small"), *big = tid("copies-big"), *sealed = tid("copies-seal");
    size_t bigSize = 2u << 20;
    unsigned char *src = malloc(bigSize);
    int holders = -1;
    void *dst;

    check(src != NULL, NULL, "allocate 2 MiB");
    fillPattern(src, bigSize, 7);
    expectOk(c,
             objClientPutReplicas(c, small, strlen(small), "abc", 3, NULL, 0, 0, OBJ_WAIT_DEFAULT,
                                  &holders),
             "inline put with the node's default copies");
    check(holders == 1, c, "an inline put of one copy counts 1 holder, not %d", holders);
    holders = -1;
    expectOk(c,
             objClientPutReplicas(c, big, strlen(big), src, bigSize, NULL, 0, 0, OBJ_WAIT_DEFAULT,
                                  &holders),
             "2 MiB put with the node's default copies");
    check(holders == 1, c, "a put through the arena of one copy counts 1 holder, not %d", holders);
    expectOk(c, objClientCreate(c, sealed, strlen(sealed), 4, NULL, 0, &dst), "create");
    memcpy(dst, "seal", 4);
    holders = -1;
    expectOk(c, objClientSealReplicas(c, sealed, strlen(sealed), 0, OBJ_WAIT_DEFAULT, &holders),
             "seal with the node's default copies");
    check(holders == 1, c, "a seal of one copy counts 1 holder, not %d", holders);
    expectOk(c, objClientDelete(c, small, strlen(small)), "delete");
    expectOk(c, objClientDelete(c, big, strlen(big)), "delete");
    expectOk(c, objClientDelete(c, sealed, strlen(sealed)), "delete");
    free(src);
}

/* Copy options the library refuses before sending anything. */
static void testBadCopyOptionsAreBadArg(ObjClient *c)
{
    const char *id = tid("copies-bad");
    int exists = 1;

    expectErr(c, objClientPutReplicas(c, id, strlen(id), "x", 1, NULL, 0, -1, 0, NULL),
              OBJ_ERR_BADARG, "put with replicas -1");
    expectErr(c, objClientPutReplicas(c, id, strlen(id), "x", 1, NULL, 0, 2, -2, NULL),
              OBJ_ERR_BADARG, "put with wait -2 ms");
    expectErr(c, objClientSealReplicas(c, id, strlen(id), -3, 0, NULL), OBJ_ERR_BADARG,
              "seal with replicas -3");
    expectErr(c, objClientDrain(c, -1, NULL), OBJ_ERR_BADARG, "drain with wait -1 ms");
    expectErr(c, objClientDrainStatus(c, NULL), OBJ_ERR_BADARG, "drain status into NULL");
    expectOk(c, objClientExists(c, id, strlen(id), &exists), "exists");
    check(!exists, c, "a refused put left nothing behind");
}

/* A node alone: one copy answers OK (1 holder); two answer the count reached, 1, when
 * the wait runs out (not an error: there is no other node to hold it). */
static void testCopiesOnANodeAlone(ObjClient *c)
{
    const char *one = tid("alone-one"), *two = tid("alone-two"), *sealed = tid("alone-seal");
    int holders = -1;
    void *dst;

    expectOk(c, objClientPutReplicas(c, one, strlen(one), "1", 1, NULL, 0, 1, 0, &holders),
             "put of one copy");
    check(holders == 1, c, "one copy: 1 holder, not %d", holders);
    holders = -1;
    expectOk(c, objClientPutReplicas(c, two, strlen(two), "2", 1, NULL, 0, 2, 200, &holders),
             "put of two copies on a node alone");
    check(holders == 1, c, "two copies on a node alone: 1 holder when the wait ran out, not %d",
          holders);
    expectOk(c, objClientCreate(c, sealed, strlen(sealed), 4, NULL, 0, &dst), "create");
    memcpy(dst, "seal", 4);
    holders = -1;
    expectOk(c, objClientSealReplicas(c, sealed, strlen(sealed), 2, 0, &holders),
             "seal of two copies, no wait");
    check(holders == 1, c, "WAIT 0: 1 holder at once, not %d", holders);
    expectErr(c, objClientPutReplicas(c, "x", 1, "x", 1, NULL, 0, 99, 0, NULL), OBJ_ERR_BADARG,
              "put of more copies than replicas-max");
    expectOk(c, objClientDelete(c, one, strlen(one)), "delete");
    expectOk(c, objClientDelete(c, two, strlen(two)), "delete");
    expectOk(c, objClientDelete(c, sealed, strlen(sealed)), "delete");
}

/* A drain makes the node refuse new objects until it is cancelled. */
static void testDrainRefusesNewObjectsUntilCancelled(ObjClient *c)
{
    const char *id = tid("drain-new");
    ObjDrainStatus st;

    expectOk(c, objClientDrainStatus(c, &st), "drain status");
    check(st.state == OBJ_DRAIN_IDLE && st.lastError[0] == '\0', c,
          "a node never drained is idle, with no error");
    expectOk(c, objClientDrain(c, 0, &st), "drain");
    check(st.state != OBJ_DRAIN_IDLE, c, "a drain started: draining or drained");
    expectErr(c, objClientPut(c, id, strlen(id), "x", 1, NULL, 0), OBJ_ERR_DRAINING,
              "put on a draining node");
    expectOk(c, objClientDrainCancel(c, &st), "drain cancel");
    check(st.state == OBJ_DRAIN_IDLE, c, "cancelled: idle again");
    expectOk(c, objClientPut(c, id, strlen(id), "x", 1, NULL, 0), "put after the cancel");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete");
}

/* ---- zero-copy ------------------------------------------------------------------------------ */

/* The 8 MiB round trip: written in place, read in place by two clients and copied. */
static void testBigObjectZeroCopyRoundTrip(ObjClient *c)
{
    const char meta[] = "dtype=u8;shape=8388608";
    const char *id = tid("big");
    unsigned char *expect = malloc(BIG_SIZE);
    ObjClient *other = connectNode();
    ObjBuffer buf, otherBuf;
    void *data, *copy;
    size_t size;
    ObjInfo info;
    int exists, rv;

    check(expect != NULL, NULL, "allocate the reference pattern");
    fillPattern(expect, BIG_SIZE, 42);
    expectOk(c, objClientCreate(c, id, strlen(id), BIG_SIZE, meta, strlen(meta), &data),
             "zero-copy create of 8 MiB with metadata");
    check(data != NULL, c, "create returns a pointer into the arena");
    memcpy(data, expect, BIG_SIZE);

    expectOk(c, objClientInfo(c, id, strlen(id), &info), "info of the created object");
    check(!info.sealed && info.size == BIG_SIZE && info.metaSize == strlen(meta), c,
          "info: not sealed, size 8 MiB, meta_size %zu", strlen(meta));
    expectOk(c, objClientExists(c, id, strlen(id), &exists), "exists of the created object");
    check(exists == 0, c, "a created object does not exist yet");
    expectErr(c, objClientDelete(c, id, strlen(id)), OBJ_ERR_WRONGSTATE,
              "delete of a created object");
    rv = objClientSeal(other, id, strlen(id));
    check(rv == -1 && (objClientErrCode(other) == OBJ_ERR_WRONGSTATE ||
                       objClientErrCode(other) == OBJ_ERR_NOTFOUND),
          other, "another connection cannot seal it: WRONGSTATE or NOTFOUND (\"%s\")",
          objClientErrMsg(other));

    expectOk(c, objClientSeal(c, id, strlen(id)), "seal");
    expectErr(c, objClientSeal(c, id, strlen(id)), OBJ_ERR_WRONGSTATE, "second seal");
    expectErr(c, objClientAbort(c, id, strlen(id)), OBJ_ERR_WRONGSTATE, "abort of a sealed object");
    expectErr(c, objClientCreate(c, id, strlen(id), 10, NULL, 0, &data), OBJ_ERR_EXISTS,
              "create of an existing id");

    expectOk(c, objClientPin(c, id, strlen(id), 0, &buf), "pin");
    check(buf.size == BIG_SIZE && memcmp(buf.data, expect, BIG_SIZE) == 0, c,
          "the pinned view holds the 8 MiB that were written in place");
    check(buf.metaSize == strlen(meta) && memcmp(buf.meta, meta, buf.metaSize) == 0, c,
          "the pinned metadata is \"%s\"", meta);
    expectOk(other, objClientPin(other, id, strlen(id), 0, &otherBuf),
             "pin from a second connection");
    check(otherBuf.size == BIG_SIZE && memcmp(otherBuf.data, expect, BIG_SIZE) == 0, other,
          "the second connection's view holds the same bytes");

    expectOk(c, objClientInfo(c, id, strlen(id), &info), "info of the pinned object");
    check(info.sealed && info.pins == 2, c, "info: sealed, 2 pins (got %llu)",
          (unsigned long long)info.pins);
    check(info.checksum == objectChecksum(expect, BIG_SIZE, meta, strlen(meta)), c,
          "info checksum is XXH3-64 of data then metadata (%016llx)",
          (unsigned long long)info.checksum);

    expectOk(c, objClientGet(c, id, strlen(id), 0, &copy, &size), "copying get of 8 MiB");
    check(size == BIG_SIZE && memcmp(copy, expect, BIG_SIZE) == 0, c,
          "the copy holds the same 8 MiB");
    objClientFreeData(copy);

    expectOk(c, objClientRelease(c, id, strlen(id)), "release");
    expectErr(c, objClientRelease(c, id, strlen(id)), OBJ_ERR_WRONGSTATE, "release without a pin");
    expectOk(other, objClientRelease(other, id, strlen(id)), "release by the second connection");
    expectOk(c, objClientInfo(c, id, strlen(id), &info), "info after the releases");
    check(info.pins == 0, c, "info: 0 pins");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete");
    expectErr(c, objClientInfo(c, id, strlen(id), &info), OBJ_ERR_NOTFOUND,
              "info of a deleted object");
    objClientFree(other);
    free(expect);
}

static void testPinsCountUp(ObjClient *c)
{
    const char *id = tid("pins");
    ObjBuffer a, b;
    ObjInfo info;

    expectOk(c, objClientPut(c, id, strlen(id), "pinned", 6, NULL, 0), "put");
    expectOk(c, objClientPin(c, id, strlen(id), 0, &a), "first pin");
    expectOk(c, objClientPin(c, id, strlen(id), 0, &b), "second pin by the same connection");
    check(a.data == b.data && a.size == 6 && memcmp(a.data, "pinned", 6) == 0 && a.metaSize == 0, c,
          "both pins see the same 6 bytes and no metadata");
    expectOk(c, objClientInfo(c, id, strlen(id), &info), "info");
    check(info.pins == 2, c, "info: 2 pins");
    expectOk(c, objClientRelease(c, id, strlen(id)), "first release");
    expectOk(c, objClientRelease(c, id, strlen(id)), "second release");
    expectErr(c, objClientRelease(c, id, strlen(id)), OBJ_ERR_WRONGSTATE, "third release");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete");
}

static void testPinOfMissingId(ObjClient *c)
{
    const char *id = tid("missing-pin");
    ObjBuffer buf;
    long long t0 = nowMs();

    expectErr(c, objClientPin(c, id, strlen(id), 0, &buf), OBJ_ERR_NOTFOUND,
              "pin of a missing id without timeout");
    check(nowMs() - t0 < 1000, c, "it answers at once");
    expectErr(c, objClientPin(c, id, strlen(id), 50, &buf), OBJ_ERR_TIMEOUT,
              "pin of a missing id with a 50 ms timeout");
    expectErr(c, objClientPin(c, id, strlen(id), -5, &buf), OBJ_ERR_BADARG, "pin with timeout -5");
}

static void testZeroByteZeroCopyObject(ObjClient *c)
{
    const char *id = tid("empty-zc");
    ObjBuffer buf;
    void *data = NULL;

    expectOk(c, objClientCreate(c, id, strlen(id), 0, NULL, 0, &data),
             "zero-copy create of 0 bytes");
    check(data != NULL, c, "the pointer is not NULL");
    expectOk(c, objClientSeal(c, id, strlen(id)), "seal of 0 bytes");
    expectOk(c, objClientPin(c, id, strlen(id), 0, &buf), "pin of 0 bytes");
    check(buf.size == 0 && buf.metaSize == 0 && buf.data != NULL, c,
          "the view has size 0 and a non-NULL pointer");
    expectOk(c, objClientRelease(c, id, strlen(id)), "release");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete");
}

static void testCreatesDoNotOverlap(ObjClient *c)
{
    const char *a = tid("ovl-a"), *b = tid("ovl-b");
    unsigned char *pa, *pb;
    void *va, *vb;

    expectOk(c, objClientCreate(c, a, strlen(a), 1000, NULL, 0, &va), "create a");
    expectOk(c, objClientCreate(c, b, strlen(b), 1000, NULL, 0, &vb), "create b");
    pa = va;
    pb = vb;
    check(pa + 1000 <= pb || pb + 1000 <= pa, c, "the two ranges do not overlap");
    expectOk(c, objClientAbort(c, a, strlen(a)), "abort a");
    expectOk(c, objClientAbort(c, b, strlen(b)), "abort b");
    expectErr(c, objClientAbort(c, a, strlen(a)), OBJ_ERR_NOTFOUND, "abort of an aborted id");
    expectErr(c, objClientSeal(c, a, strlen(a)), OBJ_ERR_NOTFOUND, "seal of an aborted id");
}

static void testCreateLargerThanArenaIsOom(ObjClient *c)
{
    const char *id = tid("huge");
    void *data;

    expectErr(c, objClientCreate(c, id, strlen(id), (size_t)1 << 40, NULL, 0, &data), OBJ_ERR_OOM,
              "create of 1 TiB");
    expectOk(c, objClientPut(c, id, strlen(id), "x", 1, NULL, 0),
             "put of the same id (the failed create changed nothing)");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete");
}

/* ---- delete while pinned --------------------------------------------------------------- */

static void testDeleteOfPinnedObjectIsDeferred(ObjClient *c)
{
    const char *id = tid("deferred");
    unsigned char pattern[4096];
    ObjBuffer buf;
    int exists = -1;

    fillPattern(pattern, sizeof(pattern), 7);
    expectOk(c, objClientPut(c, id, strlen(id), pattern, sizeof(pattern), "m", 1), "put");
    expectOk(c, objClientPin(c, id, strlen(id), 0, &buf), "pin");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete of a pinned object (DEFERRED)");
    expectOk(c, objClientExists(c, id, strlen(id), &exists), "exists");
    check(exists == 0, c, "the id is gone at once");
    check(buf.size == sizeof(pattern) && memcmp(buf.data, pattern, sizeof(pattern)) == 0, c,
          "the pinned bytes stay valid until release");
    expectOk(c, objClientPut(c, id, strlen(id), "new", 3, NULL, 0), "put of the same id again");
    check(memcmp(buf.data, pattern, sizeof(pattern)) == 0, c,
          "the new object did not reuse the pinned memory");
    expectOk(c, objClientRelease(c, id, strlen(id)), "release of the old pin");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete of the new object");
    expectErr(c, objClientDelete(c, id, strlen(id)), OBJ_ERR_NOTFOUND, "delete of a missing id");
}

/* ---- waiting ------------------------------------------------------------------------------- */

/* Work for the helper thread: after a delay, seal id (or put it) on c. */
typedef struct Waker {
    ObjClient *c;
    const char *id;
    int put; /* 1: objClientPut, 0: objClientSeal */
    int rv;
} Waker;

static void *wakerMain(void *arg)
{
    Waker *w = arg;

    sleepMs(WAITER_DELAY_MS);
    if (w->put)
        w->rv = objClientPut(w->c, w->id, strlen(w->id), "late", 4, NULL, 0);
    else
        w->rv = objClientSeal(w->c, w->id, strlen(w->id));
    return NULL;
}

static void testPinWaitsForSeal(ObjClient *c)
{
    const char *id = tid("wait-seal");
    ObjClient *creator = connectNode();
    Waker w = {creator, id, 0, -1};
    long long t0, elapsed;
    pthread_t th;
    ObjBuffer buf;
    void *data;

    expectOk(creator, objClientCreate(creator, id, strlen(id), 5, NULL, 0, &data),
             "create by another connection");
    memcpy(data, "ready", 5);
    check(pthread_create(&th, NULL, wakerMain, &w) == 0, NULL, "start the sealing thread");
    t0 = nowMs();
    expectOk(c, objClientPin(c, id, strlen(id), WAITER_BUDGET_MS, &buf),
             "pin with a timeout while the object is only created");
    elapsed = nowMs() - t0;
    pthread_join(th, NULL);
    check(w.rv == 0, creator, "the other connection sealed it");
    check(elapsed >= WAITER_DELAY_MS / 2 && buf.size == 5 && memcmp(buf.data, "ready", 5) == 0, c,
          "the pin waited for the seal (%lld ms) and sees the bytes", elapsed);
    expectOk(c, objClientRelease(c, id, strlen(id)), "release");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete");
    objClientFree(creator);
}

static void testGetWaitsForPut(ObjClient *c)
{
    const char *id = tid("wait-put");
    ObjClient *writer = connectNode();
    Waker w = {writer, id, 1, -1};
    pthread_t th;
    void *data;
    size_t size;

    check(pthread_create(&th, NULL, wakerMain, &w) == 0, NULL, "start the writing thread");
    expectOk(c, objClientGet(c, id, strlen(id), WAITER_BUDGET_MS, &data, &size),
             "get with a timeout of an id that appears later");
    pthread_join(th, NULL);
    check(w.rv == 0 && size == 4 && memcmp(data, "late", 4) == 0, c,
          "the get waited for the put and returns its bytes");
    objClientFreeData(data);
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete");
    objClientFree(writer);
}

static void testCreatedObjectIsInvisibleToOthers(ObjClient *c)
{
    const char *id = tid("invisible");
    ObjClient *other = connectNode();
    void *data, *got;
    size_t size;
    int exists = -1;

    expectOk(c, objClientCreate(c, id, strlen(id), 8, NULL, 0, &data), "create");
    expectOk(other, objClientExists(other, id, strlen(id), &exists), "exists from another client");
    check(exists == 0, other, "another client does not see a created object");
    expectErr(other, objClientGet(other, id, strlen(id), 100, &got, &size), OBJ_ERR_TIMEOUT,
              "get from another client with a 100 ms timeout");
    expectOk(c, objClientAbort(c, id, strlen(id)), "abort");
    objClientFree(other);
}

/* ---- disconnect ---------------------------------------------------------------------------- */

/*
 * Poll until cond(c, id) holds or POLL_LIMIT_MS pass: the server handles a
 * disconnect asynchronously. Returns 1 if cond held.
 */
static int pollUntil(ObjClient *c, const char *id, int (*cond)(ObjClient *, const char *))
{
    long long deadline = nowMs() + POLL_LIMIT_MS;

    while (nowMs() < deadline) {
        if (cond(c, id))
            return 1;
        sleepMs(10);
    }
    return cond(c, id);
}

/* The id can be created (then aborted again): the old created object is gone. */
static int canCreate(ObjClient *c, const char *id)
{
    void *data;

    if (objClientCreate(c, id, strlen(id), 8, NULL, 0, &data) < 0)
        return 0;
    return objClientAbort(c, id, strlen(id)) == 0;
}

static int hasNoPins(ObjClient *c, const char *id)
{
    ObjInfo info;

    return objClientInfo(c, id, strlen(id), &info) == 0 && info.pins == 0;
}

static void testDisconnectAbortsCreatedAndDropsPins(ObjClient *c)
{
    const char *created = tid("dc-created"), *pinned = tid("dc-pinned");
    ObjClient *gone = connectNode();
    ObjBuffer buf;
    ObjInfo info;
    void *data;

    expectOk(gone, objClientCreate(gone, created, strlen(created), 8, NULL, 0, &data),
             "create by a connection about to close");
    expectOk(c, objClientPut(c, pinned, strlen(pinned), "p", 1, NULL, 0), "put");
    expectOk(gone, objClientPin(gone, pinned, strlen(pinned), 0, &buf),
             "pin by a connection about to close");
    expectOk(c, objClientInfo(c, pinned, strlen(pinned), &info), "info");
    check(info.pins == 1, c, "info: 1 pin");
    objClientFree(gone);
    check(pollUntil(c, created, canCreate), c, "the closed connection's created object is aborted");
    check(pollUntil(c, pinned, hasNoPins), c, "the closed connection's pin is dropped");
    expectOk(c, objClientDelete(c, pinned, strlen(pinned)), "delete");
}

/* ---- pin cache ------------------------------------------------------------------------------ */

/* One numeric OBJ.STATS field of the node, read over a plain hiredis
 * connection (ends the run when it cannot be read). */
static unsigned long long nodeStat(const char *name)
{
    redisContext *rc = redisConnect(testHost, testPort);
    unsigned long long v = 0;
    redisReply *r;
    int found = 0;

    check(rc != NULL && rc->err == 0, NULL, "hiredis connect for OBJ.STATS");
    r = redisCommand(rc, "OBJ.STATS");
    check(r != NULL && r->type == REDIS_REPLY_ARRAY, NULL, "OBJ.STATS answers an array");
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i], *val = r->element[i + 1];
        if (k->str != NULL && strcmp(k->str, name) == 0) {
            found = 1;
            v = val->type == REDIS_REPLY_INTEGER ? (unsigned long long)val->integer
                                                 : strtoull(val->str ? val->str : "0", NULL, 10);
        }
    }
    check(found, NULL, "OBJ.STATS has field %s", name);
    freeReplyObject(r);
    redisFree(rc);
    return v;
}

static ObjPinCacheStats cacheStats(ObjClient *c)
{
    ObjPinCacheStats st;

    check(objClientPinCacheStats(c, &st) == 0, c, "pin cache stats");
    return st;
}

static void testPinCacheIsOffByDefault(ObjClient *c)
{
    ObjPinCacheStats st = cacheStats(c);

    check(st.maxIdle == 0 && st.cached == 0 && st.hits == 0, c, "the pin cache is off by default");
    check(objClientPinCacheStats(NULL, &st) == -1 && objClientPinCacheStats(c, NULL) == -1, c,
          "stats of a NULL client or into NULL fail");
    check(objClientSetPinCache(NULL, 4) == -1 && objClientFlushReleases(NULL) == -1, NULL,
          "set/flush of a NULL client fail");
}

static void testCachedPinMakesNoRoundTrip(void)
{
    const char *id = tid("pc-hit");
    unsigned char pattern[8192];
    ObjClient *c = connectNode();
    unsigned long long pins0, pins1;
    ObjBuffer a, b;
    ObjPinCacheStats st;
    ObjInfo info;

    fillPattern(pattern, sizeof(pattern), 11);
    expectOk(c, objClientPut(c, id, strlen(id), pattern, sizeof(pattern), "mm", 2), "put");
    expectOk(c, objClientSetPinCache(c, 8), "enable the pin cache (8 idle)");
    expectOk(c, objClientPin(c, id, strlen(id), 0, &a), "first pin (a miss)");
    expectOk(c, objClientRelease(c, id, strlen(id)), "lazy release");
    pins0 = nodeStat("pins");
    for (int i = 0; i < 100; i++) {
        if (objClientPin(c, id, strlen(id), 0, &b) < 0 || objClientRelease(c, id, strlen(id)) < 0)
            check(0, c, "cached pin + release %d", i);
    }
    pins1 = nodeStat("pins");
    check(pins1 == pins0, c, "100 cached pins sent no OBJ.PIN (server pins %llu -> %llu)", pins0,
          pins1);
    st = cacheStats(c);
    check(st.hits == 100 && st.misses == 1 && st.cached == 1 && st.idle == 1, c,
          "stats: 100 hits, 1 miss, 1 idle entry");
    check(b.data == a.data && b.size == sizeof(pattern) &&
              memcmp(b.data, pattern, sizeof(pattern)) == 0 && b.metaSize == 2 &&
              memcmp(b.meta, "mm", 2) == 0,
          c, "a cached pin reads the right bytes and metadata");
    expectOk(c, objClientInfo(c, id, strlen(id), &info), "info");
    check(info.pins == 1, c, "the server holds one pin for the cached entry");
    expectOk(c, objClientFlushReleases(c), "flush");
    expectOk(c, objClientInfo(c, id, strlen(id), &info), "info after flush");
    check(info.pins == 0, c, "flush gave the pin back");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete");
    objClientFree(c);
}

static void testLazyReleasesGoInOnePipelinedBatch(void)
{
    enum { MAX_IDLE = 8, OBJECTS = MAX_IDLE + 1 };
    ObjClient *c = connectNode();
    char ids[OBJECTS][64];
    unsigned long long rel0, rel1;
    ObjPinCacheStats st;
    ObjBuffer b;

    expectOk(c, objClientSetPinCache(c, MAX_IDLE), "enable the pin cache (8 idle)");
    for (int i = 0; i < OBJECTS; i++) {
        snprintf(ids[i], sizeof(ids[i]), "%s:%d", tid("pc-batch"), i);
        expectOk(c, objClientPut(c, ids[i], strlen(ids[i]), "v", 1, NULL, 0), "put");
    }
    rel0 = nodeStat("releases");
    for (int i = 0; i < MAX_IDLE; i++) {
        if (objClientPin(c, ids[i], strlen(ids[i]), 0, &b) < 0 ||
            objClientRelease(c, ids[i], strlen(ids[i])) < 0)
            check(0, c, "pin + release %s", ids[i]);
    }
    check(nodeStat("releases") == rel0, c, "8 releases within the bound send nothing");
    st = cacheStats(c);
    check(st.idle == MAX_IDLE && st.batches == 0, c, "8 idle entries, no batch yet");
    expectOk(c, objClientPin(c, ids[MAX_IDLE], strlen(ids[MAX_IDLE]), 0, &b), "ninth pin");
    expectOk(c, objClientRelease(c, ids[MAX_IDLE], strlen(ids[MAX_IDLE])),
             "ninth release (over the bound)");
    rel1 = nodeStat("releases");
    st = cacheStats(c);
    check(st.batches == 1 && st.released == MAX_IDLE / 2 + 1 && rel1 - rel0 == st.released, c,
          "one batch gave back the %d oldest (server releases +%llu)", MAX_IDLE / 2 + 1,
          rel1 - rel0);
    check(st.idle == MAX_IDLE / 2, c, "the %d youngest stay cached", MAX_IDLE / 2);
    expectOk(c, objClientPin(c, ids[0], strlen(ids[0]), 0, &b), "pin of an evicted id");
    check(cacheStats(c).misses == OBJECTS + 1, c, "an evicted id is a miss");
    expectOk(c, objClientRelease(c, ids[0], strlen(ids[0])), "release");
    expectOk(c, objClientFlushReleases(c), "flush");
    st = cacheStats(c);
    check(st.batches == 2 && st.idle == 0 && st.cached == 0, c,
          "flush sent the rest in one more batch");
    check(nodeStat("releases") - rel0 == st.released, c, "the server saw every release");
    for (int i = 0; i < OBJECTS; i++)
        expectOk(c, objClientDelete(c, ids[i], strlen(ids[i])), "delete");
    objClientFree(c);
}

static void testDisconnectReleasesEveryCachedPin(ObjClient *c)
{
    const char *idle = tid("pc-dc-idle"), *used = tid("pc-dc-used");
    ObjClient *gone = connectNode();
    ObjBuffer b;
    ObjInfo info;

    expectOk(c, objClientPut(c, idle, strlen(idle), "i", 1, NULL, 0), "put");
    expectOk(c, objClientPut(c, used, strlen(used), "u", 1, NULL, 0), "put");
    expectOk(gone, objClientSetPinCache(gone, 16), "enable the pin cache");
    expectOk(gone, objClientPin(gone, idle, strlen(idle), 0, &b), "pin");
    expectOk(gone, objClientRelease(gone, idle, strlen(idle)), "lazy release");
    expectOk(gone, objClientPin(gone, used, strlen(used), 0, &b), "pin left unreleased");
    expectOk(c, objClientInfo(c, idle, strlen(idle), &info), "info");
    check(info.pins == 1, c, "the idle entry is still pinned on the server");
    objClientFree(gone);
    check(pollUntil(c, idle, hasNoPins), c, "disconnect gave back the idle entry's pin");
    check(pollUntil(c, used, hasNoPins), c, "and the pin in use");
    expectOk(c, objClientDelete(c, idle, strlen(idle)), "delete");
    expectOk(c, objClientDelete(c, used, strlen(used)), "delete");
}

static void testDeleteOfCachedObjectFreesAfterTheBatch(ObjClient *other)
{
    const char *id = tid("pc-del");
    unsigned char pattern[4096];
    ObjClient *c = connectNode();
    unsigned long long deleting0;
    ObjBuffer b;
    int exists = -1;

    fillPattern(pattern, sizeof(pattern), 23);
    expectOk(c, objClientSetPinCache(c, 4), "enable the pin cache");
    expectOk(c, objClientPut(c, id, strlen(id), pattern, sizeof(pattern), NULL, 0), "put");
    expectOk(c, objClientPin(c, id, strlen(id), 0, &b), "pin");
    expectOk(c, objClientRelease(c, id, strlen(id)), "lazy release");
    deleting0 = nodeStat("objects_deleting");
    expectOk(other, objClientDelete(other, id, strlen(id)),
             "delete by another client (DEFERRED: the cache holds the pin)");
    expectOk(other, objClientExists(other, id, strlen(id), &exists), "exists");
    check(exists == 0, other, "the id is gone at once");
    check(nodeStat("objects_deleting") == deleting0 + 1, c, "the memory is not freed yet");
    check(memcmp(b.data, pattern, sizeof(pattern)) == 0, c, "the cached bytes are intact");
    expectOk(c, objClientFlushReleases(c), "flush (the batch release)");
    check(nodeStat("objects_deleting") == deleting0, c, "the batch release freed it");
    objClientFree(c);
}

static void testOwnDeleteDropsTheCachedEntry(void)
{
    const char *id = tid("pc-owndel");
    unsigned long long deleting0 = nodeStat("objects_deleting");
    ObjClient *c = connectNode();
    ObjBuffer b;

    expectOk(c, objClientSetPinCache(c, 4), "enable the pin cache");
    expectOk(c, objClientPut(c, id, strlen(id), "old", 3, NULL, 0), "put");
    expectOk(c, objClientPin(c, id, strlen(id), 0, &b), "pin");
    expectOk(c, objClientRelease(c, id, strlen(id)), "lazy release");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete through the caching client");
    check(nodeStat("objects_deleting") == deleting0, c, "its idle pin went back first: freed now");
    expectOk(c, objClientPut(c, id, strlen(id), "new", 3, NULL, 0), "put of the same id");
    expectOk(c, objClientPin(c, id, strlen(id), 0, &b), "pin");
    check(b.size == 3 && memcmp(b.data, "new", 3) == 0, c, "the pin sees the new object");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete while pinned (entry marked stale)");
    expectOk(c, objClientRelease(c, id, strlen(id)), "release of the stale entry");
    check(cacheStats(c).cached == 0, c, "a stale entry is given back on its last release");
    check(nodeStat("objects_deleting") == deleting0, c, "and the object is freed");
    objClientFree(c);
}

static void testPinTakenBeforeTheCacheIsReleasedDirectly(ObjClient *c)
{
    const char *id = tid("pc-before");
    ObjBuffer b;
    ObjInfo info;

    expectOk(c, objClientPut(c, id, strlen(id), "x", 1, NULL, 0), "put");
    expectOk(c, objClientPin(c, id, strlen(id), 0, &b), "pin with the cache off");
    expectOk(c, objClientSetPinCache(c, 4), "enable the pin cache");
    expectOk(c, objClientPin(c, id, strlen(id), 0, &b), "pin with the cache on (a miss)");
    expectOk(c, objClientRelease(c, id, strlen(id)), "release: the cached entry goes idle");
    expectOk(c, objClientRelease(c, id, strlen(id)), "release: the uncached pin goes at once");
    expectOk(c, objClientInfo(c, id, strlen(id), &info), "info");
    check(info.pins == 1, c, "only the idle entry's pin is left");
    expectOk(c, objClientSetPinCache(c, 0), "disable the cache (gives idle entries back)");
    expectOk(c, objClientInfo(c, id, strlen(id), &info), "info");
    check(info.pins == 0 && cacheStats(c).cached == 0, c, "no pins left");
    expectErr(c, objClientRelease(c, id, strlen(id)), OBJ_ERR_WRONGSTATE, "one release too many");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete");
}

static void testPrefaultedPinSeesTheSameBytes(void)
{
    const char *id = tid("prefault");
    size_t size = 1u << 20;
    unsigned char *pattern = malloc(size);
    ObjClient *c = connectNode();
    ObjBuffer b;

    check(pattern != NULL, NULL, "allocate 1 MiB");
    fillPattern(pattern, size, 31);
    check(objClientSetPinPrefault(NULL, 1) == -1, NULL, "prefault of a NULL client fails");
    expectOk(c, objClientSetPinPrefault(c, 64 * 1024), "prefault pins of 64 KiB and more");
    expectOk(c, objClientPut(c, id, strlen(id), pattern, size, NULL, 0), "put 1 MiB");
    expectOk(c, objClientPin(c, id, strlen(id), 0, &b), "prefaulted pin");
    check(b.size == size && memcmp(b.data, pattern, size) == 0, c,
          "a prefaulted pin reads the right bytes");
    expectOk(c, objClientRelease(c, id, strlen(id)), "release");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete");
    objClientFree(c);
    free(pattern);
}

/* ---- fetch ---------------------------------------------------------------------------------- */

static void testFetch(ObjClient *c)
{
    const char *local = tid("fetch-local"), *missing = tid("fetch-missing");
    long long t0;
    int rv;

    expectOk(c, objClientPut(c, local, strlen(local), "here", 4, NULL, 0), "put");
    rv = objClientFetch(c, local, strlen(local), 1000);
    if (rv < 0 && objClientErrCode(c) == OBJ_ERR_OTHER && strstr(objClientErrMsg(c), "unknown")) {
        printf("# skip OBJ.FETCH checks: the node has no OBJ.FETCH (\"%s\")\n", objClientErrMsg(c));
        expectOk(c, objClientDelete(c, local, strlen(local)), "delete");
        return;
    }
    expectOk(c, rv, "fetch of an object that is already local");
    t0 = nowMs();
    rv = objClientFetch(c, missing, strlen(missing), 200);
    check(rv == -1 && objClientErrCode(c) != OBJ_OK && objClientErrMsg(c)[0] != '\0', c,
          "fetch of an id no node has fails (\"%s\")", objClientErrMsg(c));
    check(objClientErrCode(c) == wordCode(objClientErrMsg(c)), c,
          "its code is the one its code word has in the list (%d for \"%s\")",
          (int)objClientErrCode(c), objClientErrMsg(c));
    check(nowMs() - t0 < WAITER_BUDGET_MS, c, "within the timeout");
    expectOk(c, objClientDelete(c, local, strlen(local)), "delete");
}

/* ---- releases that name their pin ----------------------------------------------------------- */

/* c pins id, other deletes it (DEFERRED) and puts it again, c pins the new
 * object: *old and *neu are c's two views. Returns objects_deleting before. */
static unsigned long long pinTwoGenerations(ObjClient *c, ObjClient *other, const char *id,
                                            const unsigned char *pattern, size_t size,
                                            ObjBuffer *old, ObjBuffer *neu)
{
    unsigned long long deleting0 = nodeStat("objects_deleting");

    expectOk(c, objClientPut(c, id, strlen(id), pattern, size, NULL, 0), "put");
    expectOk(c, objClientPin(c, id, strlen(id), 0, old), "pin of the first object");
    expectOk(other, objClientDelete(other, id, strlen(id)), "delete while pinned (DEFERRED)");
    expectOk(other, objClientPut(other, id, strlen(id), "new", 3, NULL, 0), "put of the id again");
    expectOk(c, objClientPin(c, id, strlen(id), 0, neu), "pin of the second object");
    check(old->data != neu->data && neu->size == 3 && memcmp(neu->data, "new", 3) == 0, c,
          "the second pin sees the second object");
    check(nodeStat("objects_deleting") == deleting0 + 1, c, "the first object waits for its pin");
    return deleting0;
}

static void testReleaseBufferDropsThePinOfThatObject(ObjClient *other)
{
    const char *id = tid("rb-gen");
    unsigned char pattern[4096];
    ObjClient *c = connectNode();
    unsigned long long deleting0;
    ObjBuffer old, neu, bogus = {.data = pattern, .size = 1};
    ObjInfo info;

    fillPattern(pattern, sizeof(pattern), 31);
    deleting0 = pinTwoGenerations(c, other, id, pattern, sizeof(pattern), &old, &neu);
    expectErr(c, objClientRelease(c, id, strlen(id)), OBJ_ERR_WRONGSTATE,
              "release by id alone while two objects are pinned under it");
    expectErr(c, objClientReleaseBuffer(c, id, strlen(id), &bogus), OBJ_ERR_BADARG,
              "release of a view outside the arena");
    expectErr(c, objClientReleaseBuffer(c, id, strlen(id), NULL), OBJ_ERR_BADARG,
              "release of a NULL view");
    expectOk(c, objClientReleaseBuffer(c, id, strlen(id), &neu), "release of the second view");
    expectOk(c, objClientInfo(c, id, strlen(id), &info), "info");
    check(info.pins == 0, c, "the second object's pin went");
    check(nodeStat("objects_deleting") == deleting0 + 1, c, "the first object is still pinned");
    expectOk(other,
             objClientPut(other, tid("rb-gen-other"), strlen(tid("rb-gen-other")), pattern,
                          sizeof(pattern) / 2, NULL, 0),
             "put of another object");
    check(memcmp(old.data, pattern, sizeof(pattern)) == 0, c,
          "no new object landed under the first view");
    expectOk(c, objClientReleaseBuffer(c, id, strlen(id), &old), "release of the first view");
    check(nodeStat("objects_deleting") == deleting0, c, "the first object is freed");
    expectErr(c, objClientReleaseBuffer(c, id, strlen(id), &old), OBJ_ERR_WRONGSTATE,
              "a second release of the first view");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete");
    expectOk(c, objClientDelete(c, tid("rb-gen-other"), strlen(tid("rb-gen-other"))), "delete");
    objClientFree(c);
}

static void testPinCacheReleasesTheObjectOfTheView(void)
{
    const char *id = tid("pc-gen");
    unsigned char pattern[4096];
    ObjClient *c = connectNode();
    unsigned long long deleting0;
    ObjBuffer old, neu;
    ObjInfo info;

    fillPattern(pattern, sizeof(pattern), 37);
    expectOk(c, objClientSetPinCache(c, 4), "enable the pin cache");
    /* Through c itself: its own delete marks the cached entry stale, so the
     * next pin is a miss that pins the new object. */
    deleting0 = pinTwoGenerations(c, c, id, pattern, sizeof(pattern), &old, &neu);
    check(cacheStats(c).cached == 2, c, "two cache entries for one id");
    expectErr(c, objClientRelease(c, id, strlen(id)), OBJ_ERR_WRONGSTATE,
              "release by id alone while two cached objects are in use under it");
    expectOk(c, objClientReleaseBuffer(c, id, strlen(id), &neu),
             "release of the second view (its entry goes idle)");
    check(nodeStat("objects_deleting") == deleting0 + 1 &&
              memcmp(old.data, pattern, sizeof(pattern)) == 0,
          c, "the first object is still pinned and intact");
    expectOk(c, objClientFlushReleases(c), "flush: the idle entry's pin goes back");
    expectOk(c, objClientInfo(c, id, strlen(id), &info), "info");
    check(info.pins == 0, c, "the batch released the second object's pin");
    check(nodeStat("objects_deleting") == deleting0 + 1, c, "and not the first object's");
    expectOk(c, objClientReleaseBuffer(c, id, strlen(id), &old), "release of the first view");
    check(nodeStat("objects_deleting") == deleting0 && cacheStats(c).cached == 0, c,
          "the stale entry went back at once and the first object is freed");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete");
    objClientFree(c);
}

/* Publishes version v of name with manifest mid and one part, retrying
 * while the directory has not yet learnt of the objects (a put reaches it a
 * moment after it returns); bounded by POLL_LIMIT_MS. Returns the last rv. */
static int publishWhenKnown(ObjClient *c, const char *name, uint64_t v, const char *mid,
                            const char *part, uint64_t retain)
{
    const void *parts[] = {part};
    size_t partLens[] = {strlen(part)};
    long long deadline = nowMs() + POLL_LIMIT_MS;
    int rv;

    while ((rv = objClientVersionPublish(c, name, strlen(name), v, mid, strlen(mid), parts,
                                         partLens, 1, retain)) < 0 &&
           objClientErrCode(c) == OBJ_ERR_NOTFOUND && nowMs() < deadline)
        sleepMs(10);
    return rv;
}

/* A reader blocked in objClientVersionLatest NEWER, on its own connection. */
typedef struct VersionWaiter {
    const char *name;
    long long newer;
    uint64_t version;
    char manifest[128];
    int rv;
} VersionWaiter;

static void *versionWaiterRun(void *arg)
{
    VersionWaiter *w = arg;
    ObjClient *c = objClientConnect(testHost, testPort);
    void *m = NULL;
    size_t mLen = 0;

    w->rv = objClientVersionLatest(c, w->name, strlen(w->name), w->newer, WAITER_BUDGET_MS,
                                   &w->version, &m, &mLen);
    if (w->rv == 0)
        snprintf(w->manifest, sizeof(w->manifest), "%.*s", (int)mLen, (const char *)m);
    objClientFreeData(m);
    objClientFree(c);
    return NULL;
}

static void testVersions(ObjClient *c)
{
    const char *name = tid("model"), *m1 = tid("model-m1"), *m2 = tid("model-m2");
    const char *p1 = tid("model-p1"), *p2 = tid("model-p2");
    VersionWaiter w = {.name = name, .newer = 1};
    uint64_t version = 0;
    void *m = NULL;
    size_t mLen = 0;
    pthread_t t;
    int exists = 1;

    expectOk(c, objClientPut(c, m1, strlen(m1), "manifest 1", 10, NULL, 0), "put manifest 1");
    expectOk(c, objClientPut(c, p1, strlen(p1), "part 1", 6, NULL, 0), "put part 1");
    expectOk(c, publishWhenKnown(c, name, 1, m1, p1, 0), "publish version 1");
    expectOk(c, objClientVersionLatest(c, name, strlen(name), -1, 0, &version, &m, &mLen),
             "latest");
    check(version == 1 && mLen == strlen(m1) && memcmp(m, m1, mLen) == 0, c,
          "latest is version 1 with its manifest");
    objClientFreeData(m);
    expectErr(c,
              objClientVersionPublish(c, name, strlen(name), 1, m1, strlen(m1), NULL, NULL, 0, 0),
              OBJ_ERR_EXISTS, "publish of a version not above the latest");
    expectErr(c, objClientVersionGet(c, name, strlen(name), 2, &m, &mLen), OBJ_ERR_NOTFOUND,
              "get of an unknown version");

    check(pthread_create(&t, NULL, versionWaiterRun, &w) == 0, NULL, "start a waiter");
    sleepMs(WAITER_DELAY_MS);
    expectOk(c, objClientPut(c, m2, strlen(m2), "manifest 2", 10, NULL, 0), "put manifest 2");
    expectOk(c, objClientPut(c, p2, strlen(p2), "part 2", 6, NULL, 0), "put part 2");
    expectOk(c, publishWhenKnown(c, name, 2, m2, p2, 1), "publish version 2, retain 1");
    pthread_join(t, NULL);
    check(w.rv == 0 && w.version == 2 && strcmp(w.manifest, m2) == 0, NULL,
          "a waiter on NEWER 1 wakes with version 2 (rv %d, version %llu)", w.rv,
          (unsigned long long)w.version);
    expectOk(c, objClientVersionGet(c, name, strlen(name), 2, &m, &mLen), "get version 2");
    check(mLen == strlen(m2) && memcmp(m, m2, mLen) == 0, c, "it names manifest 2");
    objClientFreeData(m);
    expectErr(c, objClientVersionGet(c, name, strlen(name), 1, &m, &mLen), OBJ_ERR_NOTFOUND,
              "version 1 is gone (retain 1)");
    for (long long deadline = nowMs() + POLL_LIMIT_MS; exists && nowMs() < deadline; sleepMs(10))
        expectOk(c, objClientExists(c, p1, strlen(p1), &exists), "exists");
    check(!exists, c, "version 1's part is deleted");
    expectErr(c, objClientVersionLatest(c, name, strlen(name), 2, 100, &version, &m, &mLen),
              OBJ_ERR_TIMEOUT, "waiting for a version above the latest");
    expectOk(c, objClientVersionDrop(c, name, strlen(name), 2), "drop version 2");
    expectErr(c, objClientVersionLatest(c, name, strlen(name), -1, 0, &version, &m, &mLen),
              OBJ_ERR_NOTFOUND, "latest of a name without versions");
    expectErr(c, objClientVersionPublish(c, "", 0, 3, m2, strlen(m2), NULL, NULL, 0, 0),
              OBJ_ERR_BADARG, "publish under an empty name");
}

static void testPurge(ObjClient *c)
{
    const char *id = tid("purge"), *never = tid("purge-never");
    const void *ids[] = {id, never};
    size_t lens[] = {strlen(id), strlen(never)}, known = 0;
    long long deadline = nowMs() + POLL_LIMIT_MS;
    int exists = 1;

    expectOk(c, objClientPut(c, id, strlen(id), "gone soon", 9, NULL, 0), "put");
    /* The directory learns of the put a moment later; until then it is unknown. */
    while (objClientPurge(c, ids, lens, 2, &known) == 0 && known == 0 && nowMs() < deadline)
        sleepMs(10);
    check(known == 1, c, "purge knew one of two ids");
    expectOk(c, objClientExists(c, id, strlen(id), &exists), "exists");
    check(!exists, c, "the purged object is gone");
    expectErr(c, objClientPurge(c, ids, lens, 0, &known), OBJ_ERR_BADARG, "purge of no ids");
}

/* ---- puts: every size, one and several copy threads (the --put run) ------------------ */

/* objClientPut of size bytes of src (and one byte of metadata) with
 * `threads` copy threads: the pinned bytes are src's, the checksum is the
 * XXH3-64 of them, and the object goes with its delete. */
static void checkPut(ObjClient *c, const unsigned char *src, size_t size, int threads)
{
    char id[64];
    ObjBuffer buf;
    ObjInfo info;

    snprintf(id, sizeof(id), "%s-%zu-%d", tid("put"), size, threads);
    expectOk(c, objClientSetPutThreads(c, threads), "set the put threads");
    expectOk(c, objClientPut(c, id, strlen(id), src, size, "m", 1), "put");
    expectOk(c, objClientPin(c, id, strlen(id), 0, &buf), "pin of the put");
    check(buf.size == size && memcmp(buf.data, src, size) == 0 && buf.metaSize == 1 &&
              ((const char *)buf.meta)[0] == 'm',
          c, "put of %zu bytes with %d copy thread(s): the object holds them", size, threads);
    expectOk(c, objClientInfo(c, id, strlen(id), &info), "info of the put");
    check(info.sealed && info.checksum == objectChecksum(src, size, "m", 1), c,
          "put of %zu bytes with %d copy thread(s): its checksum is their XXH3-64", size, threads);
    expectOk(c, objClientReleaseBuffer(c, id, strlen(id), &buf), "release");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete");
}

/* objClientPutParts: parts land at their offsets, gaps read as zeros, on
 * both paths (inline under 1 MiB, through the arena above). */
static void checkPutParts(ObjClient *c, size_t size)
{
    const char *id = tid("parts");
    unsigned char *want = calloc(1, size), *a = malloc(size / 4), *b = malloc(size / 4);
    ObjBuffer buf;

    check(want && a && b, NULL, "allocate parts");
    fillPattern(a, size / 4, 7);
    fillPattern(b, size / 4, 8);
    memcpy(want + 64, a, size / 4);
    memcpy(want + size / 2, b, size / 4);
    ObjPart parts[2] = {{a, size / 4, 64}, {b, size / 4, size / 2}};
    expectOk(c, objClientPutParts(c, id, strlen(id), parts, 2, size, NULL, 0), "put of parts");
    expectOk(c, objClientPin(c, id, strlen(id), 0, &buf), "pin of the parts");
    check(buf.size == size && memcmp(buf.data, want, size) == 0, c,
          "put of two parts in %zu bytes: parts at their offsets, zeros between", size);
    expectOk(c, objClientReleaseBuffer(c, id, strlen(id), &buf), "release");
    expectOk(c, objClientDelete(c, id, strlen(id)), "delete");
    ObjPart bad = {a, size, 1};
    expectErr(c, objClientPutParts(c, id, strlen(id), &bad, 1, size, NULL, 0), OBJ_ERR_BADARG,
              "a part past the object's end");
    free(want);
    free(a);
    free(b);
}

/* Every size from 0 to 1 GiB, with one and four copy threads; a put too
 * large for the arena fails OOM and leaves nothing. Needs a node of more
 * than 1 GiB. */
static void testPutsOfEverySize(ObjClient *c)
{
    static const size_t sizes[] = {0,       1,        4095,      4096, 64 * 1024 + 1, (1 << 20) - 1,
                                   1 << 20, 16 << 20, 1ULL << 30};
    const size_t n = sizeof(sizes) / sizeof(sizes[0]);
    unsigned char *src = malloc(1ULL << 30);

    check(src != NULL, NULL, "allocate 1 GiB");
    fillPattern(src, 1ULL << 30, 99);
    for (int threads = 1; threads <= 4; threads += 3)
        for (size_t i = 0; i < n; i++)
            checkPut(c, src, sizes[i], threads);
    expectErr(c, objClientSetPutThreads(c, -1), OBJ_ERR_BADARG, "put threads -1");
    expectErr(c, objClientSetPutThreads(c, 65), OBJ_ERR_BADARG, "put threads 65");
    expectOk(c, objClientSetPutThreads(c, 0), "put threads back to the default");
    checkPutParts(c, 4096);
    checkPutParts(c, 16 << 20);

    unsigned long long objects = nodeStat("objects");
    const char *id = tid("too-big");
    size_t huge = (size_t)nodeStat("arena_size") + 4096;
    unsigned char *big = malloc(huge);
    check(big != NULL, NULL, "allocate more than the arena");
    memset(big, 1, huge);
    expectErr(c, objClientPut(c, id, strlen(id), big, huge, NULL, 0), OBJ_ERR_OOM,
              "put larger than the arena");
    check(nodeStat("objects") == objects && nodeStat("objects_created") == 0, c,
          "the failed put left nothing behind");
    free(big);
    free(src);
}

int main(int argc, char **argv)
{
    ObjClient *c;

    if (argc < 3 || argc > 4 || atoi(argv[2]) <= 0) {
        fprintf(stderr, "usage: %s HOST PORT [UNIX_SOCKET]\n", argv[0]);
        return 2;
    }
    testHost = argv[1];
    testPort = atoi(argv[2]);
    if (argc == 4 && strcmp(argv[3], "--put") == 0) {
        c = connectNode();
        testPutsOfEverySize(c);
        objClientFree(c);
        printf("1..%d\n", testChecks);
        return 0;
    }

    testVersionMatchesTheHeader();
    testIncompleteAllocatorTableIsRefused();
    testEveryAllocationGoesThroughTheHooks();
    testConnectSucceedsWithoutError();
    testConnectRefusedIsIoError();
    testConnectUnixMissingPathIsIoError();
    if (argc == 4)
        testConnectUnixWorks(argv[3]);

    c = connectNode();
    testPutGetRoundTripIsBinarySafe(c);
    testPutOfExistingIdIsExists(c);
    testGetOfMissingIdIsNotFoundAtOnce(c);
    testGetOfMissingIdTimesOut(c);
    testZeroByteObjectRoundTrips(c);
    testBadIdsAreBadArg(c);
    testDefaultPutCountsOneHolder(c);
    testBadCopyOptionsAreBadArg(c);
    testCopiesOnANodeAlone(c);
    testDrainRefusesNewObjectsUntilCancelled(c);
    testBigObjectZeroCopyRoundTrip(c);
    testPinsCountUp(c);
    testPinOfMissingId(c);
    testZeroByteZeroCopyObject(c);
    testCreatesDoNotOverlap(c);
    testCreateLargerThanArenaIsOom(c);
    testDeleteOfPinnedObjectIsDeferred(c);
    testPinWaitsForSeal(c);
    testGetWaitsForPut(c);
    testCreatedObjectIsInvisibleToOthers(c);
    testDisconnectAbortsCreatedAndDropsPins(c);
    testFetch(c);
    testPinCacheIsOffByDefault(c);
    testCachedPinMakesNoRoundTrip();
    testLazyReleasesGoInOnePipelinedBatch();
    testDisconnectReleasesEveryCachedPin(c);
    testDeleteOfCachedObjectFreesAfterTheBatch(c);
    testOwnDeleteDropsTheCachedEntry();
    testPinTakenBeforeTheCacheIsReleasedDirectly(c);
    testPrefaultedPinSeesTheSameBytes();
    testReleaseBufferDropsThePinOfThatObject(c);
    testPinCacheReleasesTheObjectOfTheView();
    testVersions(c);
    testPurge(c);
    objClientFree(c);

    printf("1..%d\n", testChecks);
    return 0;
}
