/*
 * test_directory.c - tests for the directory client (module/directory/directory.c)
 * against a real redis-server started by the shared test launcher
 * (tests/lib/objnodes.py) through tests/server/test_directory_client.py.
 *
 * Each test pins down one promise of directory.h: the node registers with a
 * TTL and unregisters on stop; publish, lookup and unpublish keep the key
 * schema; several locations are listed until a peer's key expires; binary
 * ids work; malformed entries are refused without crashing; and when the
 * directory Redis dies, reads fail fast while writes wait, and a restarted
 * (empty) directory is repopulated from the snapshot callback.
 *
 * The launcher passes the server's port in $OBJSTORE_TEST_REDIS_PORT and, in
 * $OBJSTORE_TEST_REDIS_CONTROL ("W,R"), two pipe descriptors: the test writes
 * "stop\n" or "start\n" to W (an outage, a restart on the same port, empty)
 * and reads the launcher's answer, "ok\n" or a reason, from R. Without them
 * the program says how to run it and fails. Peers are faked by writing their
 * keys with hiredis. Every wait is bounded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "directory/directory.h"
#include "directory/slots.h"
#include "transfer/wire.h"

#define TEST_NODE     "node-a"
#define TEST_PEER     "peer-b"
#define TEST_HB_MS    100
#define TEST_TTL_MS   1000
#define TEST_WAIT_MS  3000
#define TEST_PEER_TTL 400
#define TEST_CHECKSUM 0x0123456789abcdefULL

/* ---- the redis-server under test ---------------------------------------------------- */

static int testPort;
static int testCtlWrite = -1; /* requests to the launcher */
static int testCtlRead = -1;  /* its answers */
static int testServerUp;

static int64_t testNowMs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void testSleepMs(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static redisContext *testConnect(void)
{
    struct timeval tv = {0, 500000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", testPort, tv);
    if (c != NULL && c->err == 0 && redisSetTimeout(c, tv) == REDIS_OK)
        return c;
    redisFree(c);
    return NULL;
}

/* Sends one request ("stop" or "start") to the launcher and reads its answer
 * (bounded by the launcher's own timeouts). Returns 0 on "ok", else -1 with
 * the answer on stderr. */
static int testControl(const char *request)
{
    char line[256];
    size_t len = 0;
    if (dprintf(testCtlWrite, "%s\n", request) < 0)
        return -1;
    while (len < sizeof(line) - 1) {
        ssize_t n = read(testCtlRead, line + len, 1);
        if (n <= 0)
            break;
        if (line[len] == '\n')
            break;
        len++;
    }
    line[len] = '\0';
    if (strcmp(line, "ok") == 0)
        return 0;
    fprintf(stderr, "launcher: %s failed: %s\n", request, len > 0 ? line : "no answer");
    return -1;
}

/* Starts the directory's redis-server again on testPort (empty). Returns 0 or -1. */
static int testServerStart(void)
{
    if (testControl("start") != 0)
        return -1;
    testServerUp = 1;
    return 0;
}

/* Stops the directory's redis-server (an outage). Can't fail. */
static void testServerStop(void)
{
    if (testServerUp && testControl("stop") == 0)
        testServerUp = 0;
}

/* Runs one command on a fresh connection; returns the reply or NULL. */
static redisReply *testCmdv(int argc, const char **argv, const size_t *lens)
{
    redisContext *c = testConnect();
    if (c == NULL)
        return NULL;
    redisReply *r = redisCommandArgv(c, argc, argv, lens);
    redisFree(c);
    return r;
}

/* Runs a formatted command (hiredis format, %b for binary); fails the test
 * when there is no reply. */
static redisReply *testCmd(const char *fmt, ...)
{
    redisContext *c = testConnect();
    assert_non_null(c);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    assert_non_null(r);
    return r;
}

static long long testCmdInt(const char *fmt, ...)
{
    redisContext *c = testConnect();
    assert_non_null(c);
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    assert_non_null(r);
    assert_int_equal(r->type, REDIS_REPLY_INTEGER);
    long long v = r->integer;
    freeReplyObject(r);
    return v;
}

/* Waits (bounded) until EXISTS of a binary key reaches want. Returns 0 or -1. */
static int testWaitExists(const char *key, size_t keyLen, int want, int timeoutMs)
{
    for (int64_t deadline = testNowMs() + timeoutMs; testNowMs() < deadline; testSleepMs(20)) {
        const char *argv[] = {"EXISTS", key};
        size_t lens[] = {6, keyLen};
        redisReply *r = testCmdv(2, argv, lens);
        int got = r != NULL && r->type == REDIS_REPLY_INTEGER ? (int)r->integer : -1;
        freeReplyObject(r);
        if (got == want)
            return 0;
    }
    return -1;
}

static char *testObjKey(const char *id, size_t idLen, const char *suffix, size_t *lenOut)
{
    size_t slen = strlen(suffix);
    char *k = malloc(10 + idLen + 1 + slen + 1);
    assert_non_null(k);
    memcpy(k, "objstore:{", 10);
    memcpy(k + 10, id, idLen);
    k[10 + idLen] = '}';
    memcpy(k + 11 + idLen, suffix, slen + 1);
    *lenOut = 11 + idLen + slen;
    return k;
}

/* Fakes a live peer node with a short TTL and, if id is set, as a location of id. */
/* The registry bucket that lists a node: objstore:nodes:{b<k>}, k = CRC16(name) % 16. */
static int testBucketOf(const char *name)
{
    return slotsCrc16(name, strlen(name)) % 16;
}

/* 1 when the registry lists name (in its bucket), else 0. */
static long long testRegistered(const char *name)
{
    return testCmdInt("SISMEMBER objstore:nodes:{b%d} %s", testBucketOf(name), name);
}

static void testAddPeer(const char *name, const char *tcpPort, const char *id, size_t idLen,
                        int ttlMs)
{
    char beat[24];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(beat, sizeof(beat), "%lld", (long long)ts.tv_sec * 1000);
    freeReplyObject(testCmd("HSET objstore:node:%s addr 127.0.0.1 tcp_port %s rdma_addr 127.0.0.1 "
                            "rdma_port 7472 features 3 heartbeat_ms %s",
                            name, tcpPort, beat));
    freeReplyObject(testCmd("PEXPIRE objstore:node:%s %d", name, ttlMs));
    freeReplyObject(testCmd("SADD objstore:nodes:{b%d} %s", testBucketOf(name), name));
    if (id != NULL) {
        size_t locLen;
        char *loc = testObjKey(id, idLen, ":loc", &locLen);
        freeReplyObject(testCmd("SADD %b %s", loc, locLen, name));
        free(loc);
    }
}

/* ---- directory callbacks ------------------------------------------------------------ */

/* What the snapshot callback re-publishes: a fixed set, one with a binary id. */
static const struct {
    const char *id;
    size_t idLen;
    uint64_t size, metaSize, checksum;
} testSnap[] = {
    {"snap-1", 6, 100, 10, 0x1111111111111111ULL},
    {"snap-2", 6, 200, 0, 0x2222222222222222ULL},
    {"snap\0{3}", 8, 300, 30, 0xfedcba9876543210ULL},
};
#define TEST_SNAP_COUNT (sizeof(testSnap) / sizeof(testSnap[0]))

static int testSnapCalls;

static void testSnapshot(DirEmitFn *emit, void *emitArg, void *arg)
{
    (void)arg;
    __atomic_add_fetch(&testSnapCalls, 1, __ATOMIC_SEQ_CST);
    for (size_t i = 0; i < TEST_SNAP_COUNT; i++)
        emit(testSnap[i].id, testSnap[i].idLen, testSnap[i].size, testSnap[i].metaSize,
             testSnap[i].checksum, DIR_COPY_PRIMARY, 1, emitArg);
}

/* A result box a callback fills and the test waits on. */
typedef struct TestBox {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    DirResult *res;
    int calls;
    pthread_t thread;
} TestBox;

static void testBoxInit(TestBox *b)
{
    pthread_mutex_init(&b->lock, NULL);
    pthread_cond_init(&b->cond, NULL);
    b->res = NULL;
    b->calls = 0;
}

static void testBoxFn(DirResult *res, void *arg)
{
    TestBox *b = arg;
    pthread_mutex_lock(&b->lock);
    if (b->res != NULL)
        dirResultFree(b->res);
    b->res = res;
    b->calls++;
    b->thread = pthread_self();
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
}

/* Waits (bounded) for the callback; returns the result (owned by the caller). */
static DirResult *testBoxWait(TestBox *b, int timeoutMs)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeoutMs / 1000;
    ts.tv_nsec += (long)(timeoutMs % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&b->lock);
    while (b->res == NULL) {
        if (pthread_cond_timedwait(&b->cond, &b->lock, &ts) == ETIMEDOUT)
            break;
    }
    DirResult *res = b->res;
    b->res = NULL;
    pthread_mutex_unlock(&b->lock);
    return res;
}

static void testBoxDestroy(TestBox *b)
{
    dirResultFree(b->res);
    pthread_mutex_destroy(&b->lock);
    pthread_cond_destroy(&b->cond);
}

static DirResult *testLookup(const char *id, size_t idLen)
{
    TestBox b;
    testBoxInit(&b);
    dirLookup(id, idLen, testBoxFn, &b);
    DirResult *res = testBoxWait(&b, TEST_WAIT_MS);
    assert_non_null(res);
    assert_int_equal(b.calls, 1);
    assert_false(pthread_equal(b.thread, pthread_self())); /* ran on the directory thread */
    testBoxDestroy(&b);
    return res;
}

static DirResult *testList(void)
{
    TestBox b;
    testBoxInit(&b);
    dirListNodes(testBoxFn, &b);
    DirResult *res = testBoxWait(&b, TEST_WAIT_MS);
    assert_non_null(res);
    testBoxDestroy(&b);
    return res;
}

static const DirNode *testFindNode(const DirResult *res, const char *name)
{
    for (size_t i = 0; i < res->count; i++)
        if (strcmp(res->nodes[i].name, name) == 0)
            return &res->nodes[i];
    return NULL;
}

/* Waits (bounded) until the directory thread has nothing left to send. */
static void testWaitDrained(void)
{
    DirStats st;
    for (int64_t deadline = testNowMs() + TEST_WAIT_MS; testNowMs() < deadline; testSleepMs(10)) {
        dirGetStats(&st);
        if (st.connected && st.queued == 0)
            break;
    }
    dirGetStats(&st);
    assert_true(st.connected);
    assert_int_equal(st.queued, 0);
}

/* What the moved and staleReplica callbacks saw (directory thread). */
static pthread_mutex_t testNoteLock = PTHREAD_MUTEX_INITIALIZER;
static int testMovedCalls, testStaleCalls;
static char testMovedOwner[OBJ_DIR_NAME_MAX];

static void testMoved(const char *id, size_t idLen, uint64_t checksum, const char *owner)
{
    (void)id, (void)idLen, (void)checksum;
    pthread_mutex_lock(&testNoteLock);
    testMovedCalls++;
    snprintf(testMovedOwner, sizeof(testMovedOwner), "%s", owner);
    pthread_mutex_unlock(&testNoteLock);
}

static void testStale(const char *id, size_t idLen, uint64_t checksum)
{
    (void)id, (void)idLen, (void)checksum;
    pthread_mutex_lock(&testNoteLock);
    testStaleCalls++;
    pthread_mutex_unlock(&testNoteLock);
}

static DirConfig testConfig(void)
{
    DirConfig cfg;
    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.host, sizeof(cfg.host), "127.0.0.1");
    cfg.port = testPort;
    snprintf(cfg.nodeName, sizeof(cfg.nodeName), TEST_NODE);
    snprintf(cfg.addr, sizeof(cfg.addr), "127.0.0.1");
    cfg.tcpPort = 7001;
    cfg.features = OBJ_FEAT_TCP;
    cfg.heartbeatMs = TEST_HB_MS;
    cfg.ttlMs = TEST_TTL_MS;
    cfg.moved = testMoved;
    cfg.staleReplica = testStale;
    return cfg;
}

/* ---- fixtures ----------------------------------------------------------------------- */

static int testGroupSetup(void **state)
{
    (void)state;
    redisContext *c = testConnect();
    redisReply *r = c != NULL ? redisCommand(c, "PING") : NULL;
    int ok = r != NULL && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
    freeReplyObject(r);
    redisFree(c);
    if (!ok) {
        fprintf(stderr, "no redis-server answers PING on 127.0.0.1:%d\n", testPort);
        return -1;
    }
    testServerUp = 1;
    return 0;
}

static int testGroupTeardown(void **state)
{
    (void)state;
    return 0;
}

/* Every test starts with an empty directory and a started, registered client. */
static int testSetup(void **state)
{
    (void)state;
    if (!testServerUp && testServerStart() != 0)
        return -1;
    redisReply *r = testCmd("FLUSHALL");
    freeReplyObject(r);
    __atomic_store_n(&testSnapCalls, 0, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&testNoteLock);
    testMovedCalls = testStaleCalls = 0;
    testMovedOwner[0] = '\0';
    pthread_mutex_unlock(&testNoteLock);
    dirSetDraining(0);
    DirConfig cfg = testConfig();
    if (dirStart(&cfg, testSnapshot, NULL) != 0)
        return -1;
    const char *key = "objstore:node:" TEST_NODE;
    if (testWaitExists(key, strlen(key), 1, TEST_WAIT_MS) != 0) {
        DirStats st;
        dirGetStats(&st);
        fprintf(stderr, "node never registered: %s\n", st.lastError);
        dirStop();
        return -1;
    }
    return 0;
}

static int testTeardown(void **state)
{
    (void)state;
    dirStop();
    return 0;
}

/* ---- tests ----------------------------------------------------------------------------- */

static void test_start_registers_node_with_ttl(void **state)
{
    (void)state;
    redisReply *r = testCmd("HGETALL objstore:node:" TEST_NODE);
    assert_int_equal(r->type, REDIS_REPLY_ARRAY);
    assert_int_equal(r->elements, 18);
    freeReplyObject(r);

    r = testCmd("HMGET objstore:node:" TEST_NODE " addr tcp_port rdma_addr rdma_port features "
                "heartbeat_ms label draining boot");
    assert_string_equal(r->element[0]->str, "127.0.0.1");
    assert_string_equal(r->element[1]->str, "7001");
    assert_string_equal(r->element[2]->str, "");
    assert_string_equal(r->element[3]->str, "0");
    assert_string_equal(r->element[4]->str, "1");
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long beat = atoll(r->element[5]->str), now = (long long)ts.tv_sec * 1000;
    assert_true(beat > now - 5000 && beat < now + 5000);
    assert_string_equal(r->element[6]->str, "");
    assert_string_equal(r->element[7]->str, "0");
    assert_true(dirBootId() >= 1 && dirBootId() <= OBJ_DIR_BOOT_MAX);
    assert_int_equal(strtoull(r->element[8]->str, NULL, 10), dirBootId());
    freeReplyObject(r);

    long long pttl = testCmdInt("PTTL objstore:node:" TEST_NODE);
    assert_true(pttl > 0 && pttl <= TEST_TTL_MS);
    assert_int_equal(testRegistered(TEST_NODE), 1);
}

static void test_heartbeat_keeps_node_alive_past_ttl(void **state)
{
    (void)state;
    testSleepMs(TEST_TTL_MS + 300);
    assert_int_equal(testCmdInt("EXISTS objstore:node:" TEST_NODE), 1);
}

static void test_first_connect_publishes_snapshot(void **state)
{
    (void)state;
    for (size_t i = 0; i < TEST_SNAP_COUNT; i++) {
        DirResult *res = testLookup(testSnap[i].id, testSnap[i].idLen);
        assert_int_equal(res->status, DIR_FOUND);
        assert_int_equal(res->size, testSnap[i].size);
        assert_int_equal(res->metaSize, testSnap[i].metaSize);
        assert_int_equal(res->checksum, testSnap[i].checksum);
        dirResultFree(res);
    }
    assert_int_equal(__atomic_load_n(&testSnapCalls, __ATOMIC_SEQ_CST), 1);
}

static void test_publish_then_lookup_finds_this_node(void **state)
{
    (void)state;
    dirPublish("obj-1", 5, 4096, 16, TEST_CHECKSUM, DIR_COPY_PRIMARY, 1, NULL);
    DirResult *res = testLookup("obj-1", 5);
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->size, 4096);
    assert_int_equal(res->metaSize, 16);
    assert_int_equal(res->checksum, TEST_CHECKSUM);
    assert_int_equal(res->idLen, 5);
    assert_memory_equal(res->id, "obj-1", 5);
    assert_int_equal(res->count, 1);
    assert_string_equal(res->nodes[0].name, TEST_NODE);
    assert_string_equal(res->nodes[0].addr, "127.0.0.1");
    assert_int_equal(res->nodes[0].tcpPort, 7001);
    assert_int_equal(res->nodes[0].features, OBJ_FEAT_TCP);
    assert_true(res->nodes[0].heartbeatMs > 0);
    dirResultFree(res);

    redisReply *r = testCmd("HGET objstore:{obj-1}:meta checksum");
    assert_string_equal(r->str, "0123456789abcdef");
    freeReplyObject(r);
    assert_int_equal(testCmdInt("SISMEMBER objstore:{obj-1}:loc " TEST_NODE), 1);
}

static void test_lookup_of_unknown_id_is_notfound(void **state)
{
    (void)state;
    DirResult *res = testLookup("nope", 4);
    assert_int_equal(res->status, DIR_NOTFOUND);
    assert_true(res->err[0] != '\0');
    assert_int_equal(res->count, 0);
    dirResultFree(res);
}

static void test_unpublish_last_location_deletes_meta(void **state)
{
    (void)state;
    dirPublish("obj-2", 5, 1, 0, 1, DIR_COPY_PRIMARY, 1, NULL);
    dirUnpublish("obj-2", 5);
    DirResult *res = testLookup("obj-2", 5);
    assert_int_equal(res->status, DIR_NOTFOUND);
    dirResultFree(res);
    assert_int_equal(testCmdInt("EXISTS objstore:{obj-2}:meta objstore:{obj-2}:loc"), 0);
}

static void test_unpublish_keeps_meta_while_peer_holds_it(void **state)
{
    (void)state;
    dirPublish("obj-3", 5, 10, 0, 2, DIR_COPY_PRIMARY, 1, NULL);
    testWaitDrained();
    testAddPeer(TEST_PEER, "7002", "obj-3", 5, 5000);
    dirUnpublish("obj-3", 5);
    DirResult *res = testLookup("obj-3", 5);
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->count, 1);
    assert_string_equal(res->nodes[0].name, TEST_PEER);
    dirResultFree(res);
    assert_int_equal(testCmdInt("EXISTS objstore:{obj-3}:meta"), 1);
}

static void test_lookup_lists_both_locations_until_peer_expires(void **state)
{
    (void)state;
    dirPublish("obj-4", 5, 10, 0, 3, DIR_COPY_PRIMARY, 1, NULL);
    testWaitDrained();
    testAddPeer(TEST_PEER, "7002", "obj-4", 5, TEST_PEER_TTL);
    DirResult *res = testLookup("obj-4", 5);
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->count, 2);
    assert_non_null(testFindNode(res, TEST_NODE));
    const DirNode *peer = testFindNode(res, TEST_PEER);
    assert_non_null(peer);
    assert_int_equal(peer->tcpPort, 7002);
    assert_string_equal(peer->rdmaAddr, "127.0.0.1");
    assert_int_equal(peer->rdmaPort, 7472);
    assert_int_equal(peer->features, OBJ_FEAT_TCP | OBJ_FEAT_RDMA);
    dirResultFree(res);

    size_t count = 0;
    for (int64_t deadline = testNowMs() + TEST_WAIT_MS; testNowMs() < deadline; testSleepMs(50)) {
        res = testLookup("obj-4", 5);
        count = res->count;
        if (count == 1)
            assert_string_equal(res->nodes[0].name, TEST_NODE);
        dirResultFree(res);
        if (count == 1)
            break;
    }
    assert_int_equal(count, 1);
}

static void test_lookup_with_only_dead_locations_is_notfound(void **state)
{
    (void)state;
    freeReplyObject(testCmd("HSET objstore:{obj-5}:meta size 1 meta_size 0 checksum "
                            "0000000000000001"));
    freeReplyObject(testCmd("SADD objstore:{obj-5}:loc gone-node"));
    DirResult *res = testLookup("obj-5", 5);
    assert_int_equal(res->status, DIR_NOTFOUND);
    assert_non_null(strstr(res->err, "live"));
    dirResultFree(res);
}

static void test_list_nodes_drops_expired_nodes(void **state)
{
    (void)state;
    testAddPeer(TEST_PEER, "7002", NULL, 0, TEST_PEER_TTL);
    DirResult *res = testList();
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->count, 2);
    assert_non_null(testFindNode(res, TEST_NODE));
    assert_non_null(testFindNode(res, TEST_PEER));
    assert_null(res->id);
    dirResultFree(res);

    const char *key = "objstore:node:" TEST_PEER;
    assert_int_equal(testWaitExists(key, strlen(key), 0, TEST_WAIT_MS), 0);
    res = testList();
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->count, 1);
    assert_string_equal(res->nodes[0].name, TEST_NODE);
    dirResultFree(res);
    assert_int_equal(testRegistered(TEST_PEER), 0);
}

static void test_binary_id_with_nul_and_braces(void **state)
{
    (void)state;
    static const char id[] = {'a', '\0', '{', 'b', '}', 'c', '\xff'};
    dirPublish(id, sizeof(id), 77, 7, TEST_CHECKSUM, DIR_COPY_PRIMARY, 1, NULL);
    DirResult *res = testLookup(id, sizeof(id));
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->size, 77);
    assert_int_equal(res->idLen, sizeof(id));
    assert_memory_equal(res->id, id, sizeof(id));
    dirResultFree(res);

    size_t metaLen;
    char *meta = testObjKey(id, sizeof(id), ":meta", &metaLen);
    assert_int_equal(testWaitExists(meta, metaLen, 1, 100), 0);
    /* A prefix of the id must be a different object. */
    res = testLookup(id, 1);
    assert_int_equal(res->status, DIR_NOTFOUND);
    dirResultFree(res);

    dirUnpublish(id, sizeof(id));
    res = testLookup(id, sizeof(id));
    assert_int_equal(res->status, DIR_NOTFOUND);
    dirResultFree(res);
    assert_int_equal(testWaitExists(meta, metaLen, 0, 100), 0);
    free(meta);
}

static void test_malformed_entries_are_notfound(void **state)
{
    (void)state;
    static const struct {
        const char *setup; /* makes objstore:{bad}:meta malformed */
        const char *why;   /* expected in err */
    } cases[] = {
        {"HSET objstore:{bad}:meta size 1 meta_size 0 checksum xyz", "checksum"},
        {"HSET objstore:{bad}:meta size 1 meta_size 0 checksum 0123456789abcdeg", "checksum"},
        {"HSET objstore:{bad}:meta size -1 meta_size 0 checksum 0123456789abcdef", "size"},
        {"HSET objstore:{bad}:meta size 1x meta_size 0 checksum 0123456789abcdef", "size"},
        {"HSET objstore:{bad}:meta size 99999999999999999999 meta_size 0 checksum "
         "0123456789abcdef",
         "size"},
        {"HSET objstore:{bad}:meta size 1 checksum 0123456789abcdef", "meta_size"},
        {"SET objstore:{bad}:meta hello", "wrong type"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        freeReplyObject(testCmd("DEL objstore:{bad}:meta"));
        freeReplyObject(testCmd(cases[i].setup));
        freeReplyObject(testCmd("SADD objstore:{bad}:loc " TEST_NODE));
        DirResult *res = testLookup("bad", 3);
        assert_int_equal(res->status, DIR_NOTFOUND);
        assert_non_null(strstr(res->err, "malformed"));
        assert_non_null(strstr(res->err, cases[i].why));
        dirResultFree(res);
    }
}

static void test_malformed_node_entry_is_skipped(void **state)
{
    (void)state;
    dirPublish("obj-6", 5, 10, 0, 3, DIR_COPY_PRIMARY, 1, NULL);
    testWaitDrained(); /* a publish that creates the meta resets the location set */
    testAddPeer(TEST_PEER, "notaport", "obj-6", 5, 5000);
    DirResult *res = testLookup("obj-6", 5);
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->count, 1);
    assert_string_equal(res->nodes[0].name, TEST_NODE);
    dirResultFree(res);

    /* With this node gone and a second bad peer, nothing usable is left. */
    dirUnpublish("obj-6", 5);
    testAddPeer("peer-c", "65536", "obj-6", 5, 5000);
    res = testLookup("obj-6", 5);
    assert_int_equal(res->status, DIR_NOTFOUND);
    assert_non_null(strstr(res->err, "2 malformed"));
    dirResultFree(res);
}

/* How often the directory Redis has run HGETALL (INFO commandstats). */
static long long testHgetallCalls(void)
{
    redisReply *r = testCmd("INFO commandstats");
    const char *p = r != NULL && r->type == REDIS_REPLY_STRING
                        ? strstr(r->str, "cmdstat_hgetall:calls=")
                        : NULL;
    long long n = p != NULL ? strtoll(p + strlen("cmdstat_hgetall:calls="), NULL, 10) : 0;
    freeReplyObject(r);
    return n;
}

/* An object lookup reads a node's entry at most once per heartbeat interval:
 * the second lookup of an object on the same node is its meta and locations
 * only (one round trip), while a node listing still reads every entry. */
static void test_lookup_reads_node_entries_once_per_heartbeat(void **state)
{
    (void)state;
    dirStop();
    DirConfig cfg = testConfig();
    cfg.heartbeatMs = 20000; /* the test runs well within one interval */
    cfg.ttlMs = 60000;
    assert_int_equal(dirStart(&cfg, testSnapshot, NULL), 0);
    for (int i = 7; i <= 8; i++) {
        freeReplyObject(testCmd("HSET objstore:{obj-%d}:meta size 10 meta_size 0 checksum "
                                "0000000000000003",
                                i));
        freeReplyObject(testCmd("SADD objstore:{obj-%d}:loc %s", i, TEST_PEER));
    }
    testAddPeer(TEST_PEER, "7002", NULL, 0, 60000);

    DirResult *res = testLookup("obj-7", 5);
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->count, 1);
    dirResultFree(res);
    long long before = testHgetallCalls();
    res = testLookup("obj-8", 5);
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->count, 1);
    assert_string_equal(res->nodes[0].name, TEST_PEER);
    assert_int_equal(res->nodes[0].tcpPort, 7002);
    assert_int_equal(res->nodes[0].rdmaPort, 7472);
    dirResultFree(res);
    assert_int_equal(testHgetallCalls() - before, 1); /* obj-8's meta, no node entry */

    before = testHgetallCalls();
    res = testList();
    assert_int_equal(res->status, DIR_FOUND);
    dirResultFree(res);
    assert_true(testHgetallCalls() - before >= 2); /* both nodes' entries, read again */
}

/* Writes queued before a lookup travel in the lookup's own pipeline: the
 * lookup still sees every one of them, in the order they were queued. */
static void test_lookup_sees_the_writes_queued_before_it(void **state)
{
    (void)state;
    dirPublish("obj-9", 5, 10, 0, 3, DIR_COPY_PRIMARY, 1, NULL);
    dirPublish("obj-a", 5, 20, 0, 4, DIR_COPY_PRIMARY, 1, NULL);
    dirUnpublish("obj-9", 5);
    DirResult *res = testLookup("obj-9", 5);
    assert_int_equal(res->status, DIR_NOTFOUND);
    dirResultFree(res);
    res = testLookup("obj-a", 5);
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->size, 20);
    assert_int_equal(res->count, 1);
    dirResultFree(res);
    dirUnpublish("obj-a", 5);
    dirPublish("obj-a", 5, 30, 0, 5, DIR_COPY_PRIMARY, 1, NULL);
    res = testLookup("obj-a", 5);
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->size, 30);
    dirResultFree(res);
}

static void test_many_publishes_are_pipelined_in_order(void **state)
{
    (void)state;
#if defined(OBJ_DIR_QUEUE_MAX) && OBJ_DIR_QUEUE_MAX < 3000
    skip(); /* the small-queue build would drop most of them */
#endif
    char id[32];
    for (int i = 0; i < 2000; i++) {
        int n = snprintf(id, sizeof(id), "many-%d", i);
        dirPublish(id, (size_t)n, (uint64_t)i, 0, (uint64_t)i, DIR_COPY_PRIMARY, 1, NULL);
        if (i % 2 == 1)
            dirUnpublish(id, (size_t)n);
    }
    DirResult *res = testLookup("many-1998", 9);
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->size, 1998);
    dirResultFree(res);
    res = testLookup("many-1999", 9);
    assert_int_equal(res->status, DIR_NOTFOUND);
    dirResultFree(res);
    testWaitDrained();
    DirStats st;
    dirGetStats(&st);
    assert_true(st.publishes >= 2000 + TEST_SNAP_COUNT);
    assert_true(st.unpublishes >= 1000);
    assert_int_equal(st.lookups, 2);
}

static void test_stop_unregisters_node(void **state)
{
    (void)state;
    dirStop();
    assert_int_equal(testCmdInt("EXISTS objstore:node:" TEST_NODE), 0);
    assert_int_equal(testRegistered(TEST_NODE), 0);
}

static void test_lookup_while_stopped_answers_unavailable_at_once(void **state)
{
    (void)state;
    dirStop();
    TestBox b;
    testBoxInit(&b);
    dirLookup("x", 1, testBoxFn, &b);
    assert_int_equal(b.calls, 1); /* synchronously */
    assert_non_null(b.res);
    assert_int_equal(b.res->status, DIR_UNAVAILABLE);
    dirListNodes(testBoxFn, &b);
    assert_int_equal(b.calls, 2);
    assert_int_equal(b.res->status, DIR_UNAVAILABLE);
    testBoxDestroy(&b);
    dirPublish("x", 1, 1, 0, 0, DIR_COPY_PRIMARY, 1, NULL); /* dropped without effect */
    dirStop();                                              /* idempotent */
}

static void test_start_rejects_bad_config(void **state)
{
    (void)state;
    DirConfig good = testConfig();
    DirConfig cases[6];
    for (int i = 0; i < 6; i++)
        cases[i] = good;
    cases[0].nodeName[0] = '\0';
    cases[1].port = 0;
    cases[2].port = 70000;
    cases[3].heartbeatMs = 0;
    cases[4].ttlMs = cases[4].heartbeatMs;
    cases[5].boot = OBJ_DIR_BOOT_MAX + 1;
    dirStop();
    for (int i = 0; i < 6; i++) {
        errno = 0;
        assert_int_equal(dirStart(&cases[i], NULL, NULL), -1);
        assert_int_equal(errno, EINVAL);
    }
    assert_int_equal(dirStart(&good, NULL, NULL), 0);
    errno = 0;
    assert_int_equal(dirStart(&good, NULL, NULL), -1);
    assert_int_equal(errno, EBUSY);
}

static void test_directory_restart_reregisters_and_republishes(void **state)
{
    (void)state;
    dirPublish("before", 6, 5, 0, 5, DIR_COPY_PRIMARY, 1, NULL);
    testWaitDrained();

    testServerStop();
    TestBox b;
    testBoxInit(&b);
    int64_t t0 = testNowMs();
    dirLookup("before", 6, testBoxFn, &b);
    DirResult *res = testBoxWait(&b, 2000);
    assert_non_null(res);
    assert_int_equal(res->status, DIR_UNAVAILABLE);
    assert_true(testNowMs() - t0 < 2000);
    assert_non_null(strstr(res->err, "directory 127.0.0.1:"));
    dirResultFree(res);
    dirListNodes(testBoxFn, &b);
    res = testBoxWait(&b, 2000);
    assert_non_null(res);
    assert_int_equal(res->status, DIR_UNAVAILABLE);
    dirResultFree(res);
    testBoxDestroy(&b);

    /* Writes wait for the directory. */
    dirPublish("during", 6, 6, 0, 6, DIR_COPY_PRIMARY, 1, NULL);
    DirStats st;
    dirGetStats(&st);
    assert_int_equal(st.connected, 0);
    assert_int_equal(st.queued, 1);
    testSleepMs(300); /* a few failed reconnects */
    dirGetStats(&st);
    assert_int_equal(st.queued, 1);
    assert_true(st.errors > 0);
    assert_true(st.lastError[0] != '\0');

    assert_int_equal(testServerStart(), 0);
    const char *node = "objstore:node:" TEST_NODE;
    assert_int_equal(testWaitExists(node, strlen(node), 1, 5000), 0);
    testWaitDrained();
    for (size_t i = 0; i < TEST_SNAP_COUNT; i++) {
        res = testLookup(testSnap[i].id, testSnap[i].idLen);
        assert_int_equal(res->status, DIR_FOUND);
        assert_int_equal(res->checksum, testSnap[i].checksum);
        dirResultFree(res);
    }
    res = testLookup("during", 6);
    assert_int_equal(res->status, DIR_FOUND);
    dirResultFree(res);
    /* Not in the snapshot, and the restarted directory is empty. */
    res = testLookup("before", 6);
    assert_int_equal(res->status, DIR_NOTFOUND);
    dirResultFree(res);
    assert_int_equal(testRegistered(TEST_NODE), 1);
    dirGetStats(&st);
    assert_true(st.reconnects >= 1);
    assert_true(__atomic_load_n(&testSnapCalls, __ATOMIC_SEQ_CST) >= 2);
}

/* Needs a build with -DOBJ_DIR_QUEUE_MAX=5 (for both files); skipped otherwise. */
static void test_queue_overflow_drops_and_republishes(void **state)
{
    (void)state;
#if defined(OBJ_DIR_QUEUE_MAX) && OBJ_DIR_QUEUE_MAX == 5
    testServerStop();
    char id[16];
    for (int i = 0; i < 8; i++) {
        int n = snprintf(id, sizeof(id), "q-%d", i);
        dirPublish(id, (size_t)n, 1, 0, 1, DIR_COPY_PRIMARY, 1, NULL);
    }
    DirStats st;
    dirGetStats(&st);
    assert_int_equal(st.queued, 5);
    assert_non_null(strstr(st.lastError, "queue full"));
    assert_int_equal(testServerStart(), 0);
    const char *node = "objstore:node:" TEST_NODE;
    assert_int_equal(testWaitExists(node, strlen(node), 1, 5000), 0);
    testWaitDrained();
    DirResult *res = testLookup("q-4", 3);
    assert_int_equal(res->status, DIR_FOUND);
    dirResultFree(res);
    res = testLookup(testSnap[0].id, testSnap[0].idLen);
    assert_int_equal(res->status, DIR_FOUND);
    dirResultFree(res);
#else
    skip();
#endif
}

/* ---- copies: want, owner, the prot set, moved, claims, barriers, draining ---------- */

/* Waits (bounded) for a barrier behind everything queued so far. */
static void testBarrier(void)
{
    TestBox b;
    testBoxInit(&b);
    dirBarrier(testBoxFn, &b);
    DirResult *res = testBoxWait(&b, TEST_WAIT_MS);
    assert_non_null(res);
    assert_int_equal(res->status, DIR_FOUND);
    dirResultFree(res);
    testBoxDestroy(&b);
}

/* HGET of one field of a meta hash, "" when absent; the caller frees. */
static char *testMetaField(const char *id, const char *field)
{
    redisReply *r = testCmd("HGET objstore:{%s}:meta %s", id, field);
    char *v = strdup(r->type == REDIS_REPLY_STRING ? r->str : "");
    freeReplyObject(r);
    assert_non_null(v);
    return v;
}

static void testAssertMeta(const char *id, const char *field, const char *want)
{
    char *v = testMetaField(id, field);
    assert_string_equal(v, want);
    free(v);
}

static int testMovedSeen(char *owner, size_t cap)
{
    pthread_mutex_lock(&testNoteLock);
    int n = testMovedCalls;
    snprintf(owner, cap, "%s", testMovedOwner);
    pthread_mutex_unlock(&testNoteLock);
    return n;
}

static int testStaleSeen(void)
{
    pthread_mutex_lock(&testNoteLock);
    int n = testStaleCalls;
    pthread_mutex_unlock(&testNoteLock);
    return n;
}

/* The boot id that scores name's entry in id's prot zset, 0 when it has none. */
static unsigned long long testProtBoot(const char *id, const char *name)
{
    redisReply *r = testCmd("ZSCORE objstore:{%s}:prot %s", id, name);
    unsigned long long boot = r->type == REDIS_REPLY_STRING ? strtoull(r->str, NULL, 10) : 0;
    freeReplyObject(r);
    return boot;
}

/* Whether this node's entry in id's prot zset is its current incarnation's. */
static int testProtIsMine(const char *id)
{
    return testProtBoot(id, TEST_NODE) == dirBootId();
}

/* A fake peer's incarnation: the boot field of its registration. */
#define TEST_PEER_BOOT 7ULL
static void testSetBoot(const char *name, unsigned long long boot)
{
    freeReplyObject(testCmd("HSET objstore:node:%s boot %llu", name, boot));
}

/* Restarts this node's directory client as the incarnation boot and waits
 * (bounded) until its registration says so. */
static void testRestartAs(uint64_t boot)
{
    dirStop();
    DirConfig cfg = testConfig();
    cfg.boot = boot;
    assert_int_equal(dirStart(&cfg, testSnapshot, NULL), 0);
    char want[24];
    snprintf(want, sizeof(want), "%llu", (unsigned long long)boot);
    int seen = 0;
    for (int64_t deadline = testNowMs() + TEST_WAIT_MS; !seen && testNowMs() < deadline;
         testSleepMs(10)) {
        redisReply *r = testCmd("HGET objstore:node:" TEST_NODE " boot");
        seen = r->type == REDIS_REPLY_STRING && strcmp(r->str, want) == 0;
        freeReplyObject(r);
    }
    assert_true(seen);
    assert_int_equal(dirBootId(), boot);
    testWaitDrained();
}

/* A barrier answers once the writes queued before it were: what they wrote
 * is in the directory when its callback runs. */
static void test_barrier_answers_after_the_writes_before_it(void **state)
{
    (void)state;
    for (int i = 0; i < 50; i++) {
        char id[16];
        int n = snprintf(id, sizeof(id), "bar-%d", i);
        dirPublish(id, (size_t)n, 1, 0, 1, DIR_COPY_PRIMARY, 1, NULL);
    }
    testBarrier();
    assert_int_equal(testCmdInt("SISMEMBER objstore:{bar-49}:loc " TEST_NODE), 1);
}

static void test_barrier_while_stopped_answers_unavailable_at_once(void **state)
{
    (void)state;
    dirStop();
    TestBox b;
    testBoxInit(&b);
    dirBarrier(testBoxFn, &b);
    assert_int_equal(b.calls, 1);
    assert_int_equal(b.res->status, DIR_UNAVAILABLE);
    testBoxDestroy(&b);
}

/* A barrier behind a write the directory cannot take fails, it does not
 * pretend the write was answered. */
static void test_barrier_behind_an_unsent_write_is_unavailable(void **state)
{
    (void)state;
    testServerStop();
    dirPublish("bar-x", 5, 1, 0, 1, DIR_COPY_PRIMARY, 1, NULL);
    TestBox b;
    testBoxInit(&b);
    dirBarrier(testBoxFn, &b);
    DirResult *res = testBoxWait(&b, TEST_WAIT_MS);
    assert_non_null(res);
    assert_int_equal(res->status, DIR_UNAVAILABLE);
    dirResultFree(res);
    testBoxDestroy(&b);
}

/* A primary's publish names this node the owner, with its want, and lists it
 * as a holder; a lookup answers want, owner, ownerLive and prot. */
static void test_primary_publish_sets_owner_want_and_prot(void **state)
{
    (void)state;
    dirPublish("own-1", 5, 10, 0, 7, DIR_COPY_PRIMARY, 3, NULL);
    testBarrier();
    testAssertMeta("own-1", "owner", TEST_NODE);
    testAssertMeta("own-1", "want", "3");
    assert_true(testProtIsMine("own-1"));

    testAddPeer(TEST_PEER, "7002", "own-1", 5, 5000); /* a plain replica holder */
    DirResult *res = testLookup("own-1", 5);
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->want, 3);
    assert_string_equal(res->owner, TEST_NODE);
    assert_int_equal(res->ownerLive, 1);
    assert_int_equal(res->count, 2);
    assert_int_equal(testFindNode(res, TEST_NODE)->prot, 1);
    assert_int_equal(testFindNode(res, TEST_PEER)->prot, 0);
    dirResultFree(res);
}

/* A meta written before copies existed (no want, no owner) reads as want 1,
 * no owner. */
static void test_lookup_of_an_old_meta_is_want_one_without_owner(void **state)
{
    (void)state;
    freeReplyObject(testCmd("HSET objstore:{old}:meta size 1 meta_size 0 checksum "
                            "0000000000000001"));
    testAddPeer(TEST_PEER, "7002", "old", 3, 5000);
    DirResult *res = testLookup("old", 3);
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->want, 1);
    assert_string_equal(res->owner, "");
    assert_int_equal(res->ownerLive, 0);
    dirResultFree(res);
}

/* The owner named by the meta but not live: ownerLive 0. */
static void test_owner_not_live_is_reported(void **state)
{
    (void)state;
    freeReplyObject(testCmd("HSET objstore:{dead}:meta size 1 meta_size 0 checksum "
                            "0000000000000001 owner gone-node want 2"));
    freeReplyObject(testCmd("SADD objstore:{dead}:loc gone-node"));
    dirPublish("dead", 4, 1, 0, 1, DIR_COPY_PROTECTED, 2, NULL);
    testBarrier();
    DirResult *res = testLookup("dead", 4);
    assert_int_equal(res->status, DIR_FOUND);
    assert_string_equal(res->owner, "gone-node");
    assert_int_equal(res->ownerLive, 0);
    assert_int_equal(res->want, 2);
    assert_int_equal(res->count, 1);
    assert_int_equal(res->nodes[0].prot, 1);
    dirResultFree(res);
}

/* A protected copy joins the prot set (and sets want where the meta has
 * none); demoted to a replica it leaves it; unpublished it leaves both. */
static void test_protected_joins_prot_and_a_replica_leaves_it(void **state)
{
    (void)state;
    dirPublish("pro-1", 5, 10, 0, 7, DIR_COPY_PROTECTED, 2, NULL);
    testBarrier();
    assert_true(testProtIsMine("pro-1"));
    testAssertMeta("pro-1", "want", "2");
    testAssertMeta("pro-1", "owner", ""); /* a protected copy owns nothing */

    dirPublish("pro-1", 5, 10, 0, 7, DIR_COPY_REPLICA, 2, NULL);
    testBarrier();
    assert_int_equal(testProtBoot("pro-1", TEST_NODE), 0);
    assert_int_equal(testCmdInt("SISMEMBER objstore:{pro-1}:loc " TEST_NODE), 1);

    dirPublish("pro-1", 5, 10, 0, 7, DIR_COPY_PROTECTED, 2, NULL);
    testBarrier();
    assert_true(testProtIsMine("pro-1"));
    dirUnpublish("pro-1", 5);
    testBarrier();
    assert_int_equal(
        testCmdInt("EXISTS objstore:{pro-1}:meta objstore:{pro-1}:loc objstore:{pro-1}:prot"), 0);
}

/* A protected copy of another generation than the meta's is refused as a
 * replica's is. */
static void test_protected_of_another_generation_is_refused(void **state)
{
    (void)state;
    freeReplyObject(testCmd("HSET objstore:{pro-2}:meta size 1 meta_size 0 checksum "
                            "0000000000000001 owner " TEST_PEER " want 2"));
    dirPublish("pro-2", 5, 1, 0, 2, DIR_COPY_PROTECTED, 2, NULL);
    testBarrier();
    assert_int_equal(testCmdInt("EXISTS objstore:{pro-2}:prot objstore:{pro-2}:loc"), 0);
    assert_int_equal(testStaleSeen(), 1);
}

/* A takeover from the owner named in the meta moves the ownership here; a
 * re-publish or takeover while another node owns the generation is refused
 * as moved (callback, counted, out of the prot set); of another generation
 * it is refused as stale. A fresh seal always wins. */
static void test_takeover_moved_and_stale_primaries(void **state)
{
    (void)state;
    freeReplyObject(testCmd("HSET objstore:{tk}:meta size 5 meta_size 0 checksum "
                            "0000000000000005 owner " TEST_PEER " want 2"));
    freeReplyObject(testCmd("SADD objstore:{tk}:loc " TEST_PEER " " TEST_NODE));
    freeReplyObject(testCmd("ZADD objstore:{tk}:prot %llu " TEST_PEER " %llu " TEST_NODE,
                            TEST_PEER_BOOT, (unsigned long long)dirBootId()));

    /* Moved: the takeover names some other node than the owner. */
    dirPublish("tk", 2, 5, 0, 5, DIR_COPY_PRIMARY, 2, "someone-else");
    testBarrier();
    char owner[OBJ_DIR_NAME_MAX];
    assert_int_equal(testMovedSeen(owner, sizeof(owner)), 1);
    assert_string_equal(owner, TEST_PEER);
    testAssertMeta("tk", "owner", TEST_PEER);
    assert_int_equal(testProtBoot("tk", TEST_NODE), 0);
    DirStats st;
    dirGetStats(&st);
    assert_int_equal(st.movedPrimaries, 1);

    /* Stale: another generation while the peer owns the id. */
    dirPublish("tk", 2, 6, 0, 6, DIR_COPY_PRIMARY, 2, TEST_PEER);
    testBarrier();
    assert_int_equal(testStaleSeen(), 1);
    testAssertMeta("tk", "size", "5");

    /* Takeover from the owner: ownership moves here, the sets keep the peer. */
    dirPublish("tk", 2, 5, 0, 5, DIR_COPY_PRIMARY, 3, TEST_PEER);
    testBarrier();
    testAssertMeta("tk", "owner", TEST_NODE);
    testAssertMeta("tk", "want", "3");
    assert_true(testProtIsMine("tk"));
    assert_int_equal(testCmdInt("SCARD objstore:{tk}:loc"), 2);

    /* A fresh seal of another generation replaces it all, whoever owned it. */
    freeReplyObject(testCmd("HSET objstore:{tk}:meta owner " TEST_PEER));
    dirPublish("tk", 2, 9, 0, 9, DIR_COPY_PRIMARY, 1, NULL);
    testBarrier();
    testAssertMeta("tk", "owner", TEST_NODE);
    testAssertMeta("tk", "size", "9");
    assert_int_equal(testCmdInt("ZCARD objstore:{tk}:prot"), 1);
    assert_int_equal(testCmdInt("SCARD objstore:{tk}:loc"), 1);
    assert_int_equal(testMovedSeen(owner, sizeof(owner)), 1);
}

/* A takeover from "" takes an ownerless meta's generation over without
 * resetting its other holders, as a fresh seal would. */
static void test_takeover_from_no_owner_keeps_the_other_holders(void **state)
{
    (void)state;
    freeReplyObject(testCmd("HSET objstore:{tk0}:meta size 5 meta_size 0 checksum "
                            "0000000000000005"));
    freeReplyObject(testCmd("SADD objstore:{tk0}:loc " TEST_PEER));
    freeReplyObject(testCmd("ZADD objstore:{tk0}:prot %llu " TEST_PEER, TEST_PEER_BOOT));
    dirPublish("tk0", 3, 5, 0, 5, DIR_COPY_PRIMARY, 2, "");
    testBarrier();
    testAssertMeta("tk0", "owner", TEST_NODE);
    assert_int_equal(testCmdInt("SCARD objstore:{tk0}:loc"), 2);
    assert_int_equal(testCmdInt("ZCARD objstore:{tk0}:prot"), 2);
    assert_int_equal(testProtBoot("tk0", TEST_PEER), TEST_PEER_BOOT);
}

/* The snapshot's re-publish of a primary whose generation another node owns
 * now is refused as moved (a returning old owner). */
static void test_republish_of_a_moved_primary_is_refused(void **state)
{
    (void)state;
    dirStop();
    freeReplyObject(testCmd("FLUSHALL"));
    /* testSnap[0] is owned by the peer now; this node's re-publish runs at start. */
    freeReplyObject(testCmd("HSET objstore:{snap-1}:meta size 100 meta_size 10 checksum "
                            "1111111111111111 owner " TEST_PEER " want 2"));
    freeReplyObject(testCmd("SADD objstore:{snap-1}:loc " TEST_PEER));
    freeReplyObject(testCmd("ZADD objstore:{snap-1}:prot %llu " TEST_PEER " %llu " TEST_NODE,
                            TEST_PEER_BOOT, (unsigned long long)dirBootId()));
    DirConfig cfg = testConfig();
    assert_int_equal(dirStart(&cfg, testSnapshot, NULL), 0);
    char owner[OBJ_DIR_NAME_MAX];
    for (int64_t deadline = testNowMs() + TEST_WAIT_MS; testNowMs() < deadline; testSleepMs(20))
        if (testMovedSeen(owner, sizeof(owner)) > 0)
            break;
    assert_int_equal(testMovedSeen(owner, sizeof(owner)), 1);
    assert_string_equal(owner, TEST_PEER);
    testAssertMeta("snap-1", "owner", TEST_PEER);
    assert_int_equal(testProtBoot("snap-1", TEST_NODE), 0);
    testAssertMeta("snap-2", "owner", TEST_NODE); /* the others are this node's */
}

/* A holder restarted under the same name is a new incarnation: its entry
 * of the earlier one (it came back empty) does not count, and counts again
 * once the new incarnation publishes its copy. */
static void test_a_restarted_holder_counts_only_once_it_publishes_again(void **state)
{
    (void)state;
    const uint64_t b1 = 1000001, b2 = OBJ_DIR_BOOT_MAX; /* the largest, to check exactness */
    testRestartAs(b1);
    dirPublish("inc", 3, 10, 0, 7, DIR_COPY_PROTECTED, 2, NULL);
    testBarrier();
    assert_int_equal(testProtBoot("inc", TEST_NODE), b1);
    DirResult *res = testLookup("inc", 3);
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->count, 1);
    assert_int_equal(res->nodes[0].boot, b1);
    assert_int_equal(res->nodes[0].prot, 1);
    dirResultFree(res);

    testRestartAs(b2); /* killed and back: listed, but not holding */
    res = testLookup("inc", 3);
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->count, 1);
    assert_int_equal(res->nodes[0].boot, b2);
    assert_int_equal(res->nodes[0].prot, 0);
    dirResultFree(res);

    dirPublish("inc", 3, 10, 0, 7, DIR_COPY_PROTECTED, 2, NULL);
    testBarrier();
    assert_int_equal(testProtBoot("inc", TEST_NODE), b2);
    res = testLookup("inc", 3);
    assert_int_equal(res->nodes[0].prot, 1);
    dirResultFree(res);
}

/* A peer counts while its registration's boot is the one its entry was
 * scored with; without a boot field it never does. */
static void test_a_peer_counts_only_with_the_boot_of_its_entry(void **state)
{
    (void)state;
    testAddPeer(TEST_PEER, "7002", "pb", 2, 5000);
    freeReplyObject(testCmd("HSET objstore:{pb}:meta size 1 meta_size 0 checksum "
                            "0000000000000001 owner " TEST_PEER " want 2"));
    freeReplyObject(testCmd("ZADD objstore:{pb}:prot %llu " TEST_PEER, TEST_PEER_BOOT));
    DirResult *res = testLookup("pb", 2);
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->nodes[0].boot, 0);
    assert_int_equal(res->nodes[0].prot, 0);
    dirResultFree(res);

    testSleepMs(2 * TEST_HB_MS); /* past the node cache */
    testSetBoot(TEST_PEER, TEST_PEER_BOOT);
    res = testLookup("pb", 2);
    assert_int_equal(res->nodes[0].boot, TEST_PEER_BOOT);
    assert_int_equal(res->nodes[0].prot, 1);
    dirResultFree(res);

    testSleepMs(2 * TEST_HB_MS);
    testSetBoot(TEST_PEER, TEST_PEER_BOOT + 1);
    res = testLookup("pb", 2);
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->nodes[0].prot, 0);
    assert_int_equal(res->ownerLive, 1);
    dirResultFree(res);
}

/* A prot key of an earlier build (a plain set) lists no holder, and the
 * scripts replace it instead of failing on it. */
static void test_a_plain_prot_set_is_replaced_not_an_error(void **state)
{
    (void)state;
    freeReplyObject(testCmd("HSET objstore:{old-p}:meta size 1 meta_size 0 checksum "
                            "0000000000000001 want 2"));
    freeReplyObject(testCmd("SADD objstore:{old-p}:loc " TEST_NODE));
    freeReplyObject(testCmd("SADD objstore:{old-p}:prot " TEST_NODE));
    DirResult *res = testLookup("old-p", 5);
    assert_int_equal(res->status, DIR_FOUND);
    assert_int_equal(res->nodes[0].prot, 0);
    dirResultFree(res);

    DirStats before, after;
    dirGetStats(&before);
    dirPublish("old-p", 5, 1, 0, 1, DIR_COPY_PROTECTED, 2, NULL);
    testBarrier();
    redisReply *r = testCmd("TYPE objstore:{old-p}:prot");
    assert_string_equal(r->str, "zset");
    freeReplyObject(r);
    assert_true(testProtIsMine("old-p"));
    res = testLookup("old-p", 5);
    assert_int_equal(res->nodes[0].prot, 1);
    dirResultFree(res);

    freeReplyObject(testCmd("DEL objstore:{old-p}:prot"));
    freeReplyObject(testCmd("SADD objstore:{old-p}:prot " TEST_NODE));
    dirUnpublish("old-p", 5);
    testBarrier();
    assert_int_equal(
        testCmdInt("EXISTS objstore:{old-p}:meta objstore:{old-p}:loc objstore:{old-p}:prot"), 0);
    dirGetStats(&after);
    assert_int_equal(after.errors, before.errors);
}

/* A purge's tombstone takes the holders too. */
static void test_purge_removes_the_prot_set(void **state)
{
    (void)state;
    dirPublish("pg", 2, 1, 0, 1, DIR_COPY_PRIMARY, 2, NULL);
    testBarrier();
    TestBox b;
    testBoxInit(&b);
    const char *ids[] = {"pg"};
    size_t lens[] = {2};
    dirVersionRequest(DIR_V_PURGE, "", 0, 0, 0, 1, ids, lens, testBoxFn, &b);
    DirResult *res = testBoxWait(&b, TEST_WAIT_MS);
    assert_non_null(res);
    assert_int_equal(res->status, DIR_FOUND);
    dirResultFree(res);
    testBoxDestroy(&b);
    assert_int_equal(testCmdInt("EXISTS objstore:{pg}:prot objstore:{pg}:loc"), 0);
}

static DirResult *testClaim(const char *id, int ttlMs)
{
    TestBox b;
    testBoxInit(&b);
    dirClaim(id, strlen(id), ttlMs, testBoxFn, &b);
    DirResult *res = testBoxWait(&b, TEST_WAIT_MS);
    assert_non_null(res);
    testBoxDestroy(&b);
    return res;
}

/* A claim is won once, renewed by its holder, refused to others while it
 * lives, and free again once it expired. */
static void test_claim_is_won_renewed_and_refused(void **state)
{
    (void)state;
    DirResult *res = testClaim("cl", 500);
    assert_int_equal(res->status, DIR_FOUND);
    dirResultFree(res);
    redisReply *r = testCmd("GET objstore:{cl}:claim");
    assert_string_equal(r->str, TEST_NODE);
    freeReplyObject(r);
    res = testClaim("cl", 60000); /* already mine: renewed */
    assert_int_equal(res->status, DIR_FOUND);
    dirResultFree(res);
    assert_true(testCmdInt("PTTL objstore:{cl}:claim") > 1000);

    freeReplyObject(testCmd("SET objstore:{cl2}:claim " TEST_PEER " PX 300"));
    res = testClaim("cl2", 1000);
    assert_int_equal(res->status, DIR_REFUSED);
    assert_non_null(strstr(res->err, "BUSY"));
    assert_non_null(strstr(res->err, TEST_PEER));
    dirResultFree(res);
    const char *key = "objstore:{cl2}:claim";
    assert_int_equal(testWaitExists(key, strlen(key), 0, TEST_WAIT_MS), 0);
    res = testClaim("cl2", 1000);
    assert_int_equal(res->status, DIR_FOUND);
    dirResultFree(res);
}

/* The label of the config and the draining flag are registration fields,
 * and node lookups and listings read them. */
static void test_label_and_draining_are_registered(void **state)
{
    (void)state;
    dirStop();
    DirConfig cfg = testConfig();
    snprintf(cfg.label, sizeof(cfg.label), "rack-7");
    assert_int_equal(dirStart(&cfg, testSnapshot, NULL), 0);
    testWaitDrained();
    redisReply *r = testCmd("HMGET objstore:node:" TEST_NODE " label draining");
    assert_string_equal(r->element[0]->str, "rack-7");
    assert_string_equal(r->element[1]->str, "0");
    freeReplyObject(r);

    dirSetDraining(1);
    for (int64_t deadline = testNowMs() + TEST_WAIT_MS; testNowMs() < deadline; testSleepMs(10)) {
        r = testCmd("HGET objstore:node:" TEST_NODE " draining");
        int on = r->type == REDIS_REPLY_STRING && strcmp(r->str, "1") == 0;
        freeReplyObject(r);
        if (on)
            break;
    }
    DirResult *res = testList();
    assert_int_equal(res->status, DIR_FOUND);
    const DirNode *me = testFindNode(res, TEST_NODE);
    assert_non_null(me);
    assert_string_equal(me->label, "rack-7");
    assert_int_equal(me->draining, 1);
    dirResultFree(res);

    testAddPeer(TEST_PEER, "7002", NULL, 0, 5000); /* written without the new fields */
    res = testList();
    const DirNode *peer = testFindNode(res, TEST_PEER);
    assert_non_null(peer);
    assert_string_equal(peer->label, "");
    assert_int_equal(peer->draining, 0);
    dirResultFree(res);

    /* Renewed with every heartbeat: a wiped field comes back. */
    freeReplyObject(testCmd("HSET objstore:node:" TEST_NODE " draining 0"));
    testSleepMs(3 * TEST_HB_MS);
    r = testCmd("HGET objstore:node:" TEST_NODE " draining");
    assert_string_equal(r->str, "1");
    freeReplyObject(r);
    dirSetDraining(0);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    const char *port = getenv("OBJSTORE_TEST_REDIS_PORT");
    const char *ctl = getenv("OBJSTORE_TEST_REDIS_CONTROL");
    if (port == NULL || ctl == NULL || sscanf(port, "%d", &testPort) != 1 ||
        sscanf(ctl, "%d,%d", &testCtlWrite, &testCtlRead) != 2) {
        fprintf(stderr, "test_directory: it needs a redis-server from the test launcher "
                        "($OBJSTORE_TEST_REDIS_PORT, $OBJSTORE_TEST_REDIS_CONTROL); run it with "
                        "`make test-server` or `pytest tests/server/test_directory_client.py`\n");
        return 2;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_start_registers_node_with_ttl, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_heartbeat_keeps_node_alive_past_ttl, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_first_connect_publishes_snapshot, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_publish_then_lookup_finds_this_node, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_lookup_of_unknown_id_is_notfound, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_unpublish_last_location_deletes_meta, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_unpublish_keeps_meta_while_peer_holds_it, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_lookup_lists_both_locations_until_peer_expires,
                                        testSetup, testTeardown),
        cmocka_unit_test_setup_teardown(test_lookup_with_only_dead_locations_is_notfound, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_list_nodes_drops_expired_nodes, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_binary_id_with_nul_and_braces, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_malformed_entries_are_notfound, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_malformed_node_entry_is_skipped, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_lookup_reads_node_entries_once_per_heartbeat,
                                        testSetup, testTeardown),
        cmocka_unit_test_setup_teardown(test_lookup_sees_the_writes_queued_before_it, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_many_publishes_are_pipelined_in_order, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_stop_unregisters_node, testSetup, testTeardown),
        cmocka_unit_test_setup_teardown(test_lookup_while_stopped_answers_unavailable_at_once,
                                        testSetup, testTeardown),
        cmocka_unit_test_setup_teardown(test_start_rejects_bad_config, testSetup, testTeardown),
        cmocka_unit_test_setup_teardown(test_directory_restart_reregisters_and_republishes,
                                        testSetup, testTeardown),
        cmocka_unit_test_setup_teardown(test_queue_overflow_drops_and_republishes, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_barrier_answers_after_the_writes_before_it, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_barrier_while_stopped_answers_unavailable_at_once,
                                        testSetup, testTeardown),
        cmocka_unit_test_setup_teardown(test_barrier_behind_an_unsent_write_is_unavailable,
                                        testSetup, testTeardown),
        cmocka_unit_test_setup_teardown(test_primary_publish_sets_owner_want_and_prot, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_lookup_of_an_old_meta_is_want_one_without_owner,
                                        testSetup, testTeardown),
        cmocka_unit_test_setup_teardown(test_owner_not_live_is_reported, testSetup, testTeardown),
        cmocka_unit_test_setup_teardown(test_protected_joins_prot_and_a_replica_leaves_it,
                                        testSetup, testTeardown),
        cmocka_unit_test_setup_teardown(test_protected_of_another_generation_is_refused, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_takeover_moved_and_stale_primaries, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_takeover_from_no_owner_keeps_the_other_holders,
                                        testSetup, testTeardown),
        cmocka_unit_test_setup_teardown(test_republish_of_a_moved_primary_is_refused, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_a_restarted_holder_counts_only_once_it_publishes_again,
                                        testSetup, testTeardown),
        cmocka_unit_test_setup_teardown(test_a_peer_counts_only_with_the_boot_of_its_entry,
                                        testSetup, testTeardown),
        cmocka_unit_test_setup_teardown(test_a_plain_prot_set_is_replaced_not_an_error, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_purge_removes_the_prot_set, testSetup, testTeardown),
        cmocka_unit_test_setup_teardown(test_claim_is_won_renewed_and_refused, testSetup,
                                        testTeardown),
        cmocka_unit_test_setup_teardown(test_label_and_draining_are_registered, testSetup,
                                        testTeardown),
    };
    return cmocka_run_group_tests_name("directory", tests, testGroupSetup, testGroupTeardown);
}
