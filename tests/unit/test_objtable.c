/*
 * test_objtable.c - unit tests for the object table (module/store/objtable.c).
 *
 * Each test states one promise of objtable.h: the created -> sealed life of
 * an object and who may move it along, the status every misuse returns,
 * memory coming back to the arena exactly when the last user lets go
 * (deferred deletes, pins from several holders, holders that vanish),
 * eviction of unpinned replicas in least-recently-pinned order and never of
 * anything else, a SCAN-style cursor that misses nothing even while the
 * table grows, and a long randomized workload checked against a model of
 * what should exist. The tests are single-threaded, so they do not take the
 * table lock. Random tests use a fixed seed so a failure reproduces; run
 * under ASan to catch leaks and double frees in objTableDestroy.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/heap.h"
#include "store/objtable.h"

#define KIB  (1024ULL)
#define MIB  (1024ULL * KIB)
#define UNIT OBJ_ALLOC_ALIGN

/* Holder ids, as the command layer would use Redis client ids. */
#define ALICE 1ULL
#define BOB   2ULL
#define CAROL 3ULL

/* ---- helpers ------------------------------------------------------------------ */

/* splitmix64: small, fast and good enough to drive workloads. */
static uint64_t testRand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* What the allocator charges for an object of `bytes` (data + metadata). */
static uint64_t testRoundUp(uint64_t bytes)
{
    return bytes == 0 ? UNIT : (bytes + UNIT - 1) / UNIT * UNIT;
}

/* Tables a test has not destroyed yet: a failing assertion leaves the test
 * early, and the teardown frees what it left so ASan reports only real leaks. */
enum { TEST_MAX_TABLES = 4 };
static ObjTable *testTables[TEST_MAX_TABLES];

static ObjTable *testTable(uint64_t arenaSize)
{
    ObjTable *t = objTableCreate(arenaSize);
    assert_non_null(t);
    for (size_t i = 0; i < TEST_MAX_TABLES; i++) {
        if (testTables[i] == NULL) {
            testTables[i] = t;
            return t;
        }
    }
    fail_msg("more than %d live tables in one test", TEST_MAX_TABLES);
    return NULL;
}

static void testDestroy(ObjTable *t)
{
    for (size_t i = 0; i < TEST_MAX_TABLES; i++)
        if (testTables[i] == t)
            testTables[i] = NULL;
    objTableDestroy(t);
}

static ObjStatus testTryCreate(ObjTable *t, const char *id, uint64_t size, uint64_t holder,
                               ObjEntry **out)
{
    return objTableCreateEntry(t, id, strlen(id), size, 0, holder, out);
}

/* A created (unsealed) object; fails the test if it cannot be made. */
static ObjEntry *testCreate(ObjTable *t, const char *id, uint64_t size, uint64_t holder)
{
    ObjEntry *e = NULL;
    assert_int_equal(testTryCreate(t, id, size, holder, &e), OBJ_ST_OK);
    assert_non_null(e);
    return e;
}

/* A sealed object; fails the test if it cannot be made. */
static ObjEntry *testPut(ObjTable *t, const char *id, uint64_t size, uint64_t holder)
{
    ObjEntry *e = testCreate(t, id, size, holder);
    assert_int_equal(objTableSeal(t, e, holder, 0), OBJ_ST_OK);
    return e;
}

/* A sealed object marked as a replica (evictable while unpinned). */
static ObjEntry *testPutReplica(ObjTable *t, const char *id, uint64_t size)
{
    ObjEntry *e = testPut(t, id, size, ALICE);
    objTableMarkReplica(t, e);
    return e;
}

static ObjEntry *testFind(ObjTable *t, const char *id)
{
    return objTableFind(t, id, strlen(id));
}

static ObjStatus testRelease(ObjTable *t, const char *id, uint64_t holder)
{
    return objTableRelease(t, id, strlen(id), holder, OBJ_PIN_SOLE, 0);
}

static uint64_t testUsed(ObjTable *t)
{
    AllocStats st;
    objTableAllocStats(t, &st);
    return st.used;
}

static ObjTableStats testStats(ObjTable *t)
{
    ObjTableStats st;
    objTableGetStats(t, &st);
    return st;
}

static const char *testId(char *buf, size_t len, char prefix, unsigned n)
{
    snprintf(buf, len, "%c%06u", prefix, n);
    return buf;
}

/* ---- create, find, seal ----------------------------------------------------------- */

static void testCreateMakesAFindableCreatedObject(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = NULL;
    assert_int_equal(objTableCreateEntry(t, "obj", 3, 1000, 24, ALICE, &e), OBJ_ST_OK);
    assert_non_null(e);
    assert_ptr_equal(testFind(t, "obj"), e);
    assert_int_equal(e->state, OBJ_CREATED);
    assert_int_equal(e->dataSize, 1000);
    assert_int_equal(e->metaSize, 24);
    assert_int_equal(e->offset % UNIT, 0);
    assert_int_equal(e->creator, ALICE);
    assert_int_equal(e->pins, 0);
    assert_true(e->createdMs > 0);
    assert_int_equal(testUsed(t), testRoundUp(1024));
    ObjTableStats st = testStats(t);
    assert_int_equal(st.objects, 1);
    assert_int_equal(st.created, 1);
    assert_int_equal(st.sealed, 0);
    assert_int_equal(st.creates, 1);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testFindOfUnknownIdIsNull(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    testPut(t, "abc", 10, ALICE);
    assert_null(testFind(t, "abd"));
    assert_null(testFind(t, "ab"));
    assert_null(testFind(t, "abcd"));
    assert_null(objTableFind(t, "abc", 4)); /* the id is binary: length counts */
    testDestroy(t);
}

static void testIdsAreBinarySafe(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *x = NULL, *y = NULL;
    assert_int_equal(objTableCreateEntry(t, "a\0b", 3, 8, 0, ALICE, &x), OBJ_ST_OK);
    assert_int_equal(objTableCreateEntry(t, "a\0c", 3, 8, 0, ALICE, &y), OBJ_ST_OK);
    assert_ptr_not_equal(x, y);
    assert_ptr_equal(objTableFind(t, "a\0b", 3), x);
    assert_ptr_equal(objTableFind(t, "a\0c", 3), y);
    assert_null(objTableFind(t, "a", 1));
    testDestroy(t);
}

static void testSealMakesTheObjectSealedWithItsChecksum(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testCreate(t, "obj", 100, ALICE);
    assert_int_equal(objTableSeal(t, e, ALICE, 0x1234abcdULL), OBJ_ST_OK);
    assert_ptr_equal(testFind(t, "obj"), e);
    assert_int_equal(e->state, OBJ_SEALED);
    assert_int_equal(e->checksum, 0x1234abcdULL);
    ObjTableStats st = testStats(t);
    assert_int_equal(st.objects, 1);
    assert_int_equal(st.created, 0);
    assert_int_equal(st.sealed, 1);
    assert_int_equal(st.seals, 1);
    assert_int_equal(st.bytesSealed, 100);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testZeroSizeObjectTakesOneUnit(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    testPut(t, "empty", 0, ALICE);
    assert_int_equal(testUsed(t), UNIT);
    testDestroy(t);
}

static void testCreateOfACreatedIdIsExists(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *first = testCreate(t, "obj", 100, ALICE);
    ObjEntry *e = NULL;
    uint64_t used = testUsed(t);
    assert_int_equal(testTryCreate(t, "obj", 100, ALICE, &e), OBJ_ST_EXISTS);
    assert_int_equal(testTryCreate(t, "obj", 50, BOB, &e), OBJ_ST_EXISTS);
    assert_ptr_equal(testFind(t, "obj"), first);
    assert_int_equal(testUsed(t), used);
    assert_int_equal(testStats(t).objects, 1);
    assert_int_equal(testStats(t).oomErrors, 0);
    testDestroy(t);
}

static void testCreateOfASealedIdIsExists(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *first = testPut(t, "obj", 100, ALICE);
    ObjEntry *e = NULL;
    uint64_t used = testUsed(t);
    assert_int_equal(testTryCreate(t, "obj", 100, ALICE, &e), OBJ_ST_EXISTS);
    assert_int_equal(testTryCreate(t, "obj", 50, BOB, &e), OBJ_ST_EXISTS);
    assert_ptr_equal(testFind(t, "obj"), first);
    assert_int_equal(first->state, OBJ_SEALED);
    assert_int_equal(testUsed(t), used);
    testDestroy(t);
}

/* ---- out of memory ---------------------------------------------------------------- */

static void testCreateLargerThanArenaIsOom(void **state)
{
    (void)state;
    ObjTable *t = testTable(64 * KIB);
    ObjEntry *e = NULL;
    static const struct {
        uint64_t data, meta;
    } cases[] = {
        {64 * KIB + 1, 0},
        {64 * KIB, 1},
        {0, 64 * KIB + 1},
        {UINT64_MAX, 0},
        {UINT64_MAX, 1}, /* data + meta wraps around */
        {UINT64_MAX / 2 + 1, UINT64_MAX / 2 + 1},
        {1, UINT64_MAX},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        assert_int_equal(objTableCreateEntry(t, "big", 3, cases[i].data, cases[i].meta, ALICE, &e),
                         OBJ_ST_OOM);
        assert_null(testFind(t, "big"));
        assert_int_equal(testStats(t).oomErrors, i + 1);
    }
    assert_int_equal(testUsed(t), 0);
    assert_int_equal(testStats(t).objects, 0);
    assert_int_equal(testStats(t).creates, 0);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testCreateWhenArenaIsFullIsOomAndCounted(void **state)
{
    (void)state;
    ObjTable *t = testTable(4 * KIB);
    testPut(t, "a", 2 * KIB, ALICE);
    testCreate(t, "b", 2 * KIB, ALICE);
    ObjEntry *e = NULL;
    assert_int_equal(testTryCreate(t, "c", 1, ALICE, &e), OBJ_ST_OOM);
    assert_int_equal(testTryCreate(t, "c", 0, BOB, &e), OBJ_ST_OOM);
    ObjTableStats st = testStats(t);
    assert_int_equal(st.oomErrors, 2);
    assert_int_equal(st.objects, 2);
    assert_null(testFind(t, "c"));
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testCreateSucceedsAgainOnceMemoryIsFreed(void **state)
{
    (void)state;
    ObjTable *t = testTable(4 * KIB);
    ObjEntry *a = testPut(t, "a", 4 * KIB, ALICE);
    ObjEntry *e = NULL;
    assert_int_equal(testTryCreate(t, "b", 4 * KIB, ALICE, &e), OBJ_ST_OOM);
    assert_int_equal(objTableDelete(t, a), OBJ_ST_OK);
    assert_int_equal(testTryCreate(t, "b", 4 * KIB, ALICE, &e), OBJ_ST_OK);
    testDestroy(t);
}

/* ---- who may seal and abort, and when ------------------------------------------------ */

static void testSealByNonCreatorIsWrongState(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testCreate(t, "obj", 10, ALICE);
    assert_int_equal(objTableSeal(t, e, BOB, 0), OBJ_ST_WRONGSTATE);
    assert_int_equal(e->state, OBJ_CREATED);
    assert_int_equal(testStats(t).seals, 0);
    assert_int_equal(objTableSeal(t, e, ALICE, 0), OBJ_ST_OK);
    testDestroy(t);
}

static void testAbortByNonCreatorIsWrongState(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testCreate(t, "obj", 10, ALICE);
    assert_int_equal(objTableAbort(t, e, BOB), OBJ_ST_WRONGSTATE);
    assert_ptr_equal(testFind(t, "obj"), e);
    assert_int_equal(testStats(t).aborts, 0);
    testDestroy(t);
}

static void testSealTwiceIsWrongState(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testPut(t, "obj", 10, ALICE);
    assert_int_equal(objTableSeal(t, e, ALICE, 99), OBJ_ST_WRONGSTATE);
    assert_int_equal(e->checksum, 0);
    ObjTableStats st = testStats(t);
    assert_int_equal(st.seals, 1);
    assert_int_equal(st.sealed, 1);
    assert_int_equal(st.bytesSealed, 10);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testAbortOfSealedIsWrongState(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testPut(t, "obj", 10, ALICE);
    assert_int_equal(objTableAbort(t, e, ALICE), OBJ_ST_WRONGSTATE);
    assert_ptr_equal(testFind(t, "obj"), e);
    assert_int_equal(e->state, OBJ_SEALED);
    testDestroy(t);
}

static void testAbortFreesMemoryAndTheId(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testCreate(t, "obj", 1000, ALICE);
    assert_int_equal(objTableAbort(t, e, ALICE), OBJ_ST_OK);
    assert_null(testFind(t, "obj"));
    assert_int_equal(testUsed(t), 0);
    ObjTableStats st = testStats(t);
    assert_int_equal(st.objects, 0);
    assert_int_equal(st.created, 0);
    assert_int_equal(st.aborts, 1);
    testCreate(t, "obj", 10, BOB);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testHeldCreatedObjectOutlivesItsAbortUntilUnpinned(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testCreate(t, "obj", 1000, ALICE);
    assert_int_equal(objTablePinCreated(t, e, BOB), OBJ_ST_OK);
    assert_int_equal(objTablePin(t, e, BOB), OBJ_ST_WRONGSTATE); /* still not a copy */
    assert_int_equal(objTableAbort(t, e, ALICE), OBJ_ST_OK);
    assert_null(testFind(t, "obj"));                  /* the id is gone at once */
    assert_int_equal(testUsed(t), testRoundUp(1000)); /* the bytes are not */
    assert_int_equal(objTablePinCreated(t, e, BOB), OBJ_ST_WRONGSTATE);
    testCreate(t, "obj", 10, ALICE); /* a new one of that id meanwhile */
    assert_int_equal(objTableUnpin(t, e, BOB), OBJ_ST_OK);
    assert_int_equal(testUsed(t), testRoundUp(10));
    assert_int_equal(testStats(t).pinnedObjects, 0);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testHeldCreatedObjectStaysPinnedOnceSealed(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testCreate(t, "obj", 1000, ALICE);
    assert_int_equal(objTablePinCreated(t, e, BOB), OBJ_ST_OK);
    assert_int_equal(objTableSeal(t, e, ALICE, 7), OBJ_ST_OK);
    objTableMarkReplica(t, e);
    assert_int_equal(objTableDelete(t, e), OBJ_ST_DEFERRED); /* pinned: kept */
    assert_int_equal(testUsed(t), testRoundUp(1000));
    assert_int_equal(objTableHolderGone(t, BOB), 0);
    assert_int_equal(testUsed(t), 0);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

/* ---- delete ------------------------------------------------------------------------- */

static void testDeleteOfCreatedIsWrongState(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testCreate(t, "obj", 10, ALICE);
    assert_int_equal(objTableDelete(t, e), OBJ_ST_WRONGSTATE);
    assert_ptr_equal(testFind(t, "obj"), e);
    assert_int_equal(testStats(t).deletes, 0);
    testDestroy(t);
}

static void testDeleteOfUnpinnedFreesMemory(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testPut(t, "obj", 3000, ALICE);
    assert_int_equal(testUsed(t), testRoundUp(3000));
    assert_int_equal(objTableDelete(t, e), OBJ_ST_OK);
    assert_null(testFind(t, "obj"));
    assert_int_equal(testUsed(t), 0);
    ObjTableStats st = testStats(t);
    assert_int_equal(st.objects, 0);
    assert_int_equal(st.sealed, 0);
    assert_int_equal(st.bytesSealed, 0);
    assert_int_equal(st.deletes, 1);
    assert_int_equal(st.deferredDeletes, 0);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

/* ---- pins and deferred delete --------------------------------------------------------- */

static void testPinOfCreatedIsWrongState(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testCreate(t, "obj", 10, ALICE);
    assert_int_equal(objTablePin(t, e, ALICE), OBJ_ST_WRONGSTATE);
    assert_int_equal(objTablePin(t, e, BOB), OBJ_ST_WRONGSTATE);
    assert_int_equal(e->pins, 0);
    testDestroy(t);
}

static void testPinCountsUpAndReleaseCountsDown(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testPut(t, "obj", 10, ALICE);
    for (int i = 0; i < 3; i++)
        assert_int_equal(objTablePin(t, e, BOB), OBJ_ST_OK);
    assert_int_equal(e->pins, 3);
    assert_int_equal(testStats(t).pinnedObjects, 1);
    for (int i = 2; i >= 0; i--) {
        assert_int_equal(testRelease(t, "obj", BOB), OBJ_ST_OK);
        assert_int_equal(e->pins, (unsigned)i);
    }
    assert_int_equal(testStats(t).pinnedObjects, 0);
    assert_int_equal(testRelease(t, "obj", BOB), OBJ_ST_WRONGSTATE);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testDeleteOfPinnedIsDeferredAndHidesTheId(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testPut(t, "obj", 1000, ALICE);
    assert_int_equal(objTablePin(t, e, BOB), OBJ_ST_OK);
    assert_int_equal(objTableDelete(t, e), OBJ_ST_DEFERRED);
    assert_null(testFind(t, "obj"));
    assert_true(e->deleting);
    ObjTableStats st = testStats(t);
    assert_int_equal(st.objects, 0);
    assert_int_equal(st.sealed, 0);
    assert_int_equal(st.deleting, 1);
    assert_int_equal(st.deletes, 1);
    assert_int_equal(st.deferredDeletes, 1);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testDeferredDeleteKeepsMemoryUntilTheLastRelease(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testPut(t, "obj", 1000, ALICE);
    assert_int_equal(objTablePin(t, e, BOB), OBJ_ST_OK);
    assert_int_equal(objTableDelete(t, e), OBJ_ST_DEFERRED);
    assert_int_equal(testUsed(t), testRoundUp(1000));
    assert_int_equal(testRelease(t, "obj", BOB), OBJ_ST_OK);
    assert_int_equal(testUsed(t), 0);
    ObjTableStats st = testStats(t);
    assert_int_equal(st.deleting, 0);
    assert_int_equal(st.pinnedObjects, 0);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testDeletingObjectCannotBePinnedOrDeletedAgain(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testPut(t, "obj", 10, ALICE);
    assert_int_equal(objTablePin(t, e, BOB), OBJ_ST_OK);
    assert_int_equal(objTableDelete(t, e), OBJ_ST_DEFERRED);
    assert_int_equal(objTablePin(t, e, BOB), OBJ_ST_WRONGSTATE);
    assert_int_equal(objTableDelete(t, e), OBJ_ST_WRONGSTATE);
    assert_int_equal(e->pins, 1);
    assert_int_equal(testStats(t).deletes, 1);
    testDestroy(t);
}

static void testIdOfDeferredDeleteCanBeCreatedAgain(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *old = testPut(t, "obj", 1000, ALICE);
    assert_int_equal(objTablePin(t, old, BOB), OBJ_ST_OK);
    assert_int_equal(objTableDelete(t, old), OBJ_ST_DEFERRED);
    ObjEntry *neu = testPut(t, "obj", 2000, CAROL);
    assert_ptr_not_equal(neu, old);
    assert_ptr_equal(testFind(t, "obj"), neu);
    assert_int_not_equal(neu->offset, old->offset);
    assert_int_equal(testUsed(t), testRoundUp(1000) + testRoundUp(2000));
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

/* Release works by id; once the id names a new object, the holder's pin still
 * leads to the deleted one it actually holds. */
static void testReleaseByIdFindsTheDeletedObjectThroughTheHolder(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *old = testPut(t, "obj", 1000, ALICE);
    assert_int_equal(objTablePin(t, old, BOB), OBJ_ST_OK);
    assert_int_equal(objTableDelete(t, old), OBJ_ST_DEFERRED);
    ObjEntry *neu = testPut(t, "obj", 2000, CAROL);
    assert_int_equal(testRelease(t, "obj", BOB), OBJ_ST_OK);
    assert_int_equal(testUsed(t), testRoundUp(2000));
    assert_ptr_equal(testFind(t, "obj"), neu);
    assert_int_equal(neu->pins, 0);
    assert_int_equal(neu->state, OBJ_SEALED);
    ObjTableStats st = testStats(t);
    assert_int_equal(st.deleting, 0);
    assert_int_equal(st.objects, 1);
    assert_int_equal(testRelease(t, "obj", BOB), OBJ_ST_WRONGSTATE);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testPinsFromTwoHoldersAreCountedApart(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testPut(t, "obj", 1000, ALICE);
    assert_int_equal(objTablePin(t, e, ALICE), OBJ_ST_OK);
    assert_int_equal(objTablePin(t, e, BOB), OBJ_ST_OK);
    assert_int_equal(objTablePin(t, e, BOB), OBJ_ST_OK);
    assert_int_equal(e->pins, 3);
    assert_int_equal(testStats(t).pinnedObjects, 1);
    assert_int_equal(objTableDelete(t, e), OBJ_ST_DEFERRED);

    assert_int_equal(testRelease(t, "obj", ALICE), OBJ_ST_OK);
    assert_int_equal(testRelease(t, "obj", ALICE), OBJ_ST_WRONGSTATE); /* Bob's are not hers */
    assert_int_equal(testUsed(t), testRoundUp(1000));
    assert_int_equal(testRelease(t, "obj", BOB), OBJ_ST_OK);
    assert_int_equal(testUsed(t), testRoundUp(1000));
    assert_int_equal(testRelease(t, "obj", BOB), OBJ_ST_OK);
    assert_int_equal(testUsed(t), 0);
    assert_int_equal(testStats(t).deleting, 0);
    assert_int_equal(testStats(t).pinnedObjects, 0);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testReleaseWithoutAPinIsWrongState(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *sealed = testPut(t, "sealed", 10, ALICE);
    testCreate(t, "created", 10, ALICE);
    assert_int_equal(objTablePin(t, sealed, CAROL), OBJ_ST_OK);
    static const struct {
        const char *id;
        uint64_t holder;
    } cases[] = {
        {"sealed", ALICE},  /* the creator, who never pinned it */
        {"sealed", BOB},    /* a holder the table has never seen */
        {"created", ALICE}, /* created objects cannot be pinned */
        {"missing", CAROL}, /* an id that does not exist */
        {"sealed", 0},      {"sealed", UINT64_MAX}, {"seale", CAROL}, {"sealedx", CAROL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        assert_int_equal(testRelease(t, cases[i].id, cases[i].holder), OBJ_ST_WRONGSTATE);
    assert_int_equal(sealed->pins, 1);
    assert_int_equal(testRelease(t, "sealed", CAROL), OBJ_ST_OK);
    assert_int_equal(testRelease(t, "sealed", CAROL), OBJ_ST_WRONGSTATE);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testUnpinDropsAPinOnExactlyThatEntry(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *old = testPut(t, "obj", 100, ALICE);
    assert_int_equal(objTablePin(t, old, BOB), OBJ_ST_OK);
    assert_int_equal(objTableDelete(t, old), OBJ_ST_DEFERRED);
    ObjEntry *neu = testPut(t, "obj", 100, ALICE);
    assert_int_equal(objTablePin(t, neu, BOB), OBJ_ST_OK);
    assert_int_equal(objTableUnpin(t, neu, BOB), OBJ_ST_OK);
    assert_int_equal(neu->pins, 0);
    assert_int_equal(testStats(t).deleting, 1); /* the old one is still held */
    assert_int_equal(objTableUnpin(t, neu, BOB), OBJ_ST_WRONGSTATE);
    assert_int_equal(objTableUnpin(t, neu, ALICE), OBJ_ST_WRONGSTATE);
    assert_int_equal(objTableUnpin(t, old, BOB), OBJ_ST_OK);
    assert_int_equal(testStats(t).deleting, 0);
    assert_int_equal(testUsed(t), testRoundUp(100));
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

/* Pins of two generations of one id (pinned, deleted, made again, pinned):
 * BOB holds the old and the new object, ALICE only the new one. */
static void testTwoGenerations(ObjTable *t, ObjEntry **old, ObjEntry **neu)
{
    *old = testPut(t, "obj", 100, ALICE);
    assert_int_equal(objTablePin(t, *old, BOB), OBJ_ST_OK);
    assert_int_equal(objTableDelete(t, *old), OBJ_ST_DEFERRED);
    *neu = testPut(t, "obj", 100, ALICE);
    assert_int_equal(objTablePin(t, *neu, BOB), OBJ_ST_OK);
    assert_int_equal(objTablePin(t, *neu, ALICE), OBJ_ST_OK);
    assert_true((*neu)->gen > (*old)->gen);
    assert_int_not_equal((*neu)->offset, (*old)->offset);
}

static void testReleaseByGenerationDropsThatObjectsPin(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *old, *neu;
    testTwoGenerations(t, &old, &neu);
    assert_int_equal(objTableRelease(t, "obj", 3, BOB, OBJ_PIN_GEN, neu->gen), OBJ_ST_OK);
    assert_int_equal(neu->pins, 1); /* ALICE's */
    assert_int_equal(old->pins, 1); /* still BOB's: its memory stays */
    assert_int_equal(testStats(t).deleting, 1);
    assert_int_equal(objTableRelease(t, "obj", 3, BOB, OBJ_PIN_GEN, neu->gen), OBJ_ST_WRONGSTATE);
    assert_int_equal(objTableRelease(t, "obj", 3, BOB, OBJ_PIN_GEN, old->gen), OBJ_ST_OK);
    assert_int_equal(testStats(t).deleting, 0);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testReleaseByOffsetDropsThatObjectsPin(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *old, *neu;
    testTwoGenerations(t, &old, &neu);
    uint64_t oldOffset = old->offset;
    assert_int_equal(objTableRelease(t, "obj", 3, BOB, OBJ_PIN_OFFSET, neu->offset), OBJ_ST_OK);
    assert_int_equal(old->pins, 1);
    assert_int_equal(objTableRelease(t, "obj", 3, BOB, OBJ_PIN_OFFSET, oldOffset), OBJ_ST_OK);
    assert_int_equal(testStats(t).deleting, 0);
    assert_int_equal(objTableRelease(t, "obj", 3, BOB, OBJ_PIN_OFFSET, oldOffset),
                     OBJ_ST_WRONGSTATE);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testReleaseNamingNoPinIsRefusedWhileTwoGenerationsArePinned(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *old, *neu;
    testTwoGenerations(t, &old, &neu);
    assert_int_equal(testRelease(t, "obj", BOB), OBJ_ST_AMBIGUOUS);
    assert_int_equal(old->pins, 1);
    assert_int_equal(neu->pins, 2);
    assert_int_equal(testRelease(t, "obj", ALICE), OBJ_ST_OK); /* ALICE pins one object only */
    assert_int_equal(objTableRelease(t, "obj", 3, BOB, OBJ_PIN_GEN, old->gen), OBJ_ST_OK);
    assert_int_equal(testRelease(t, "obj", BOB), OBJ_ST_OK); /* one object left */
    assert_int_equal(testStats(t).pinnedObjects, 0);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testGenerationsAreNeverReused(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    uint64_t last = 0;
    for (int i = 0; i < 100; i++) {
        ObjEntry *e = testPut(t, "obj", 10, ALICE);
        assert_true(e->gen > last);
        last = e->gen;
        assert_int_equal(objTableDelete(t, e), OBJ_ST_OK);
    }
    testDestroy(t);
}

/* ---- the object limit and the counted heap ------------------------------------------------- */

static void testMaxObjectsRefusesTheNextCreateAndLosesNothing(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e;
    char id[32];
    objTableSetMaxObjects(t, 10);
    for (int i = 0; i < 10; i++) {
        snprintf(id, sizeof(id), "o%d", i);
        testPut(t, id, 0, ALICE);
    }
    uint64_t used = testUsed(t);
    assert_int_equal(testTryCreate(t, "one-more", 0, ALICE, &e), OBJ_ST_LIMIT);
    assert_int_equal(testTryCreate(t, "o3", 0, ALICE, &e), OBJ_ST_EXISTS);
    ObjTableStats st = testStats(t);
    assert_int_equal(st.objects, 10);
    assert_int_equal(st.limitErrors, 1);
    assert_int_equal(st.oomErrors, 1);
    assert_int_equal(st.maxObjects, 10);
    assert_int_equal(testUsed(t), used);
    assert_null(testFind(t, "one-more"));
    for (int i = 0; i < 10; i++) {
        snprintf(id, sizeof(id), "o%d", i);
        assert_non_null(testFind(t, id));
    }
    assert_int_equal(objTableDelete(t, testFind(t, "o0")), OBJ_ST_OK);
    testPut(t, "one-more", 0, ALICE);
    objTableSetMaxObjects(t, 0); /* no limit */
    testPut(t, "beyond", 0, ALICE);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testMaxObjectsCountsObjectsDeletedWhilePinned(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e;
    objTableSetMaxObjects(t, 2);
    ObjEntry *a = testPut(t, "a", 0, ALICE);
    testPut(t, "b", 0, ALICE);
    assert_int_equal(objTablePin(t, a, BOB), OBJ_ST_OK);
    assert_int_equal(objTableDelete(t, a), OBJ_ST_DEFERRED);
    assert_int_equal(testTryCreate(t, "c", 0, ALICE, &e), OBJ_ST_LIMIT);
    assert_int_equal(testRelease(t, "a", BOB), OBJ_ST_OK);
    assert_int_equal(testTryCreate(t, "c", 0, ALICE, &e), OBJ_ST_OK);
    testDestroy(t);
}

static void testMaxObjectsEvictsAnUnpinnedReplicaButNeverAPrimary(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e;
    objTableSetMaxObjects(t, 3);
    testPut(t, "primary", 0, ALICE);
    ObjEntry *pinned = testPutReplica(t, "pinned-replica", 0);
    assert_int_equal(objTablePin(t, pinned, BOB), OBJ_ST_OK);
    testPutReplica(t, "replica", 0);
    assert_int_equal(testTryCreate(t, "new", 0, ALICE, &e), OBJ_ST_OK);
    assert_null(testFind(t, "replica"));
    assert_int_equal(testStats(t).evictions, 1);
    assert_int_equal(objTableSeal(t, e, ALICE, 0), OBJ_ST_OK);
    assert_int_equal(testTryCreate(t, "newer", 0, ALICE, &e), OBJ_ST_LIMIT);
    assert_non_null(testFind(t, "primary"));
    assert_non_null(testFind(t, "pinned-replica"));
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

/* Put n zero-byte objects named <prefix><i> by ALICE. */
static void testPutMany(ObjTable *t, const char *prefix, int n)
{
    char id[64];
    for (int i = 0; i < n; i++) {
        snprintf(id, sizeof(id), "%s%d", prefix, i);
        testPut(t, id, 0, ALICE);
    }
}

static void testDeleteMany(ObjTable *t, const char *prefix, int n)
{
    char id[64];
    for (int i = 0; i < n; i++) {
        snprintf(id, sizeof(id), "%s%d", prefix, i);
        assert_int_equal(objTableDelete(t, testFind(t, id)), OBJ_ST_OK);
    }
}

static void testHeapCountsEveryObjectAndComesBackAfterDeletes(void **state)
{
    (void)state;
    enum { N = 4096 };
    uint64_t empty = objHeapBytes(OBJ_HEAP_STORE);
    ObjTable *t = testTable(16 * MIB);
    uint64_t fresh = objHeapBytes(OBJ_HEAP_STORE);
    assert_true(fresh > empty);
    /* A first round grows what never shrinks (the index, the node pool). */
    testPutMany(t, "warm:", N);
    testDeleteMany(t, "warm:", N);
    uint64_t base = objHeapBytes(OBJ_HEAP_STORE), blocks = objHeapBlocks(OBJ_HEAP_STORE);
    testPutMany(t, "obj:", N);
    uint64_t perObject = (objHeapBytes(OBJ_HEAP_STORE) - base) / N;
    /* At least the entry and its id copy (ids of 5 to 8 bytes; ASan's
     * allocator answers exact sizes, glibc's rounds up), at most a few hundred
     * bytes. */
    assert_true(perObject >= sizeof(ObjEntry) + 5);
    assert_true(perObject <= 512);
    assert_int_equal(objHeapBlocks(OBJ_HEAP_STORE) - blocks, 2 * N);
    /* A pin by another holder costs its holder record, given back on release. */
    uint64_t beforePin = objHeapBytes(OBJ_HEAP_STORE);
    assert_int_equal(objTablePin(t, testFind(t, "obj:0"), BOB), OBJ_ST_OK);
    assert_true(objHeapBytes(OBJ_HEAP_STORE) > beforePin);
    assert_int_equal(testRelease(t, "obj:0", BOB), OBJ_ST_OK);
    assert_int_equal(objHeapBytes(OBJ_HEAP_STORE), beforePin);
    testDeleteMany(t, "obj:", N);
    assert_int_equal(objHeapBytes(OBJ_HEAP_STORE), base);
    assert_int_equal(objHeapBlocks(OBJ_HEAP_STORE), blocks);
    testDestroy(t);
    assert_int_equal(objHeapBytes(OBJ_HEAP_STORE), empty);
}

/* ---- holders that go away ---------------------------------------------------------------- */

static void testHolderGoneAbortsWhatItCreated(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    testCreate(t, "a1", 100, ALICE);
    testCreate(t, "a2", 200, ALICE);
    ObjEntry *sealed = testPut(t, "a3", 300, ALICE);
    testCreate(t, "b1", 400, BOB);
    assert_int_equal(objTableHolderGone(t, ALICE), 2);
    assert_null(testFind(t, "a1"));
    assert_null(testFind(t, "a2"));
    assert_ptr_equal(testFind(t, "a3"), sealed); /* sealed objects outlive their creator */
    assert_non_null(testFind(t, "b1"));
    assert_int_equal(testUsed(t), testRoundUp(300) + testRoundUp(400));
    ObjTableStats st = testStats(t);
    assert_int_equal(st.created, 1);
    assert_int_equal(st.aborts, 2);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testHolderGoneDropsEveryPinItHeld(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *x = testPut(t, "x", 10, ALICE);
    ObjEntry *y = testPut(t, "y", 10, ALICE);
    for (int i = 0; i < 3; i++)
        assert_int_equal(objTablePin(t, x, BOB), OBJ_ST_OK);
    assert_int_equal(objTablePin(t, y, BOB), OBJ_ST_OK);
    assert_int_equal(objTablePin(t, y, CAROL), OBJ_ST_OK);
    assert_int_equal(objTableHolderGone(t, BOB), 0);
    assert_int_equal(x->pins, 0);
    assert_int_equal(y->pins, 1);
    assert_int_equal(testStats(t).pinnedObjects, 1);
    assert_int_equal(testRelease(t, "x", BOB), OBJ_ST_WRONGSTATE);
    assert_int_equal(testRelease(t, "y", CAROL), OBJ_ST_OK);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testHolderGoneFinishesDeferredDeletes(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *x = testPut(t, "x", 1000, ALICE);
    ObjEntry *y = testPut(t, "y", 1000, ALICE);
    assert_int_equal(objTablePin(t, x, BOB), OBJ_ST_OK);
    assert_int_equal(objTablePin(t, x, BOB), OBJ_ST_OK);
    assert_int_equal(objTablePin(t, y, BOB), OBJ_ST_OK);
    assert_int_equal(objTablePin(t, y, CAROL), OBJ_ST_OK);
    assert_int_equal(objTableDelete(t, x), OBJ_ST_DEFERRED);
    assert_int_equal(objTableDelete(t, y), OBJ_ST_DEFERRED);
    assert_int_equal(objTableHolderGone(t, BOB), 0);
    assert_int_equal(testUsed(t), testRoundUp(1000)); /* y: Carol still holds it */
    assert_int_equal(testStats(t).deleting, 1);
    assert_int_equal(objTableHolderGone(t, CAROL), 0);
    assert_int_equal(testUsed(t), 0);
    ObjTableStats st = testStats(t);
    assert_int_equal(st.deleting, 0);
    assert_int_equal(st.pinnedObjects, 0);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testHolderGoneOfAnUnknownHolderChangesNothing(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    testCreate(t, "c", 10, ALICE);
    ObjEntry *s = testPut(t, "s", 10, ALICE);
    assert_int_equal(objTablePin(t, s, ALICE), OBJ_ST_OK);
    assert_int_equal(objTableHolderGone(t, BOB), 0);
    assert_int_equal(objTableHolderGone(t, UINT64_MAX), 0);
    assert_int_equal(testStats(t).objects, 2);
    assert_int_equal(s->pins, 1);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testHolderGoneTwiceIsHarmless(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    testCreate(t, "c", 10, ALICE);
    assert_int_equal(objTableHolderGone(t, ALICE), 1);
    assert_int_equal(objTableHolderGone(t, ALICE), 0);
    assert_int_equal(testUsed(t), 0);
    testDestroy(t);
}

/* ---- replicas and eviction ------------------------------------------------------------- */

/* An arena of 8 x 1 KiB slots, filled with replicas r0..r7 in that order. */
static ObjTable *testArenaOfReplicas(ObjEntry *r[8])
{
    ObjTable *t = testTable(8 * KIB);
    char id[16];
    for (unsigned i = 0; i < 8; i++)
        r[i] = testPutReplica(t, testId(id, sizeof(id), 'r', i), KIB);
    assert_int_equal(testUsed(t), 8 * KIB);
    return t;
}

static void testNewCreateEvictsAnUnpinnedReplica(void **state)
{
    (void)state;
    ObjEntry *r[8];
    ObjTable *t = testArenaOfReplicas(r);
    char id[16];
    ObjEntry *e = NULL;
    assert_int_equal(testTryCreate(t, "new", KIB, BOB, &e), OBJ_ST_OK);
    assert_null(testFind(t, testId(id, sizeof(id), 'r', 0)));
    for (unsigned i = 1; i < 8; i++)
        assert_non_null(testFind(t, testId(id, sizeof(id), 'r', i)));
    ObjTableStats st = testStats(t);
    assert_int_equal(st.evictions, 1);
    assert_int_equal(st.oomErrors, 0);
    assert_int_equal(st.objects, 8);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testEvictionTakesAsManyReplicasAsTheCreateNeeds(void **state)
{
    (void)state;
    ObjEntry *r[8];
    ObjTable *t = testArenaOfReplicas(r);
    char id[16];
    ObjEntry *e = NULL;
    assert_int_equal(testTryCreate(t, "new", 3 * KIB, BOB, &e), OBJ_ST_OK);
    for (unsigned i = 0; i < 8; i++)
        assert_true((testFind(t, testId(id, sizeof(id), 'r', i)) == NULL) == (i < 3));
    assert_int_equal(testStats(t).evictions, 3);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testEvictionTakesTheLeastRecentlyPinnedReplicaFirst(void **state)
{
    (void)state;
    ObjEntry *r[8];
    ObjTable *t = testArenaOfReplicas(r);
    char id[16];
    /* Use r0 and r1, in that order: r2 becomes the least recently used. */
    static const unsigned used[] = {0, 1};
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(objTablePin(t, r[used[i]], BOB), OBJ_ST_OK);
        assert_int_equal(testRelease(t, testId(id, sizeof(id), 'r', used[i]), BOB), OBJ_ST_OK);
    }
    static const unsigned expectOrder[] = {2, 3, 4, 5, 6, 7, 0, 1};
    for (unsigned n = 0; n < 8; n++) {
        ObjEntry *e = NULL;
        assert_int_equal(testTryCreate(t, testId(id, sizeof(id), 'n', n), KIB, BOB, &e), OBJ_ST_OK);
        assert_null(testFind(t, testId(id, sizeof(id), 'r', expectOrder[n])));
        for (unsigned k = n + 1; k < 8; k++)
            assert_non_null(testFind(t, testId(id, sizeof(id), 'r', expectOrder[k])));
        assert_int_equal(testStats(t).evictions, n + 1);
        assert_int_equal(objTableCheck(t), 0);
    }
    testDestroy(t);
}

static void testPinnedReplicasAreNeverEvicted(void **state)
{
    (void)state;
    ObjEntry *r[8];
    ObjTable *t = testArenaOfReplicas(r);
    char id[16];
    for (unsigned i = 0; i < 8; i++)
        assert_int_equal(objTablePin(t, r[i], BOB), OBJ_ST_OK);
    ObjEntry *e = NULL;
    assert_int_equal(testTryCreate(t, "new", KIB, CAROL, &e), OBJ_ST_OOM);
    for (unsigned i = 0; i < 8; i++)
        assert_ptr_equal(testFind(t, testId(id, sizeof(id), 'r', i)), r[i]);
    ObjTableStats st = testStats(t);
    assert_int_equal(st.evictions, 0);
    assert_int_equal(st.oomErrors, 1);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testReplicaBecomesEvictableAgainAtItsLastRelease(void **state)
{
    (void)state;
    ObjEntry *r[8];
    ObjTable *t = testArenaOfReplicas(r);
    for (unsigned i = 0; i < 8; i++)
        assert_int_equal(objTablePin(t, r[i], BOB), OBJ_ST_OK);
    assert_int_equal(objTablePin(t, r[5], CAROL), OBJ_ST_OK);
    assert_int_equal(testRelease(t, "r000005", BOB), OBJ_ST_OK);
    ObjEntry *e = NULL;
    assert_int_equal(testTryCreate(t, "new", KIB, ALICE, &e), OBJ_ST_OOM); /* Carol holds it */
    assert_int_equal(testRelease(t, "r000005", CAROL), OBJ_ST_OK);
    assert_int_equal(testTryCreate(t, "new", KIB, ALICE, &e), OBJ_ST_OK);
    assert_null(testFind(t, "r000005"));
    assert_int_equal(testStats(t).evictions, 1);
    testDestroy(t);
}

static void testPrimariesAreNeverEvicted(void **state)
{
    (void)state;
    ObjTable *t = testTable(8 * KIB);
    char id[16];
    for (unsigned i = 0; i < 8; i++)
        testPut(t, testId(id, sizeof(id), 'p', i), KIB, ALICE);
    ObjEntry *e = NULL;
    assert_int_equal(testTryCreate(t, "new", KIB, BOB, &e), OBJ_ST_OOM);
    for (unsigned i = 0; i < 8; i++)
        assert_non_null(testFind(t, testId(id, sizeof(id), 'p', i)));
    ObjTableStats st = testStats(t);
    assert_int_equal(st.evictions, 0);
    assert_int_equal(st.oomErrors, 1);
    testDestroy(t);
}

static void testCreatedObjectsAreNeverEvicted(void **state)
{
    (void)state;
    ObjTable *t = testTable(8 * KIB);
    char id[16];
    for (unsigned i = 0; i < 8; i++)
        testCreate(t, testId(id, sizeof(id), 'c', i), KIB, ALICE);
    ObjEntry *e = NULL;
    assert_int_equal(testTryCreate(t, "new", KIB, BOB, &e), OBJ_ST_OOM);
    assert_int_equal(testStats(t).evictions, 0);
    assert_int_equal(testStats(t).created, 8);
    testDestroy(t);
}

/* Only the unpinned replica among pinned replicas and primaries can go. */
static void testEvictionSkipsPinnedReplicasAndPrimaries(void **state)
{
    (void)state;
    ObjTable *t = testTable(8 * KIB);
    char id[16];
    for (unsigned i = 0; i < 4; i++)
        testPut(t, testId(id, sizeof(id), 'p', i), KIB, ALICE);
    for (unsigned i = 0; i < 4; i++) {
        ObjEntry *r = testPutReplica(t, testId(id, sizeof(id), 'r', i), KIB);
        if (i != 2)
            assert_int_equal(objTablePin(t, r, BOB), OBJ_ST_OK);
    }
    ObjEntry *e = NULL;
    assert_int_equal(testTryCreate(t, "n1", KIB, CAROL, &e), OBJ_ST_OK);
    assert_null(testFind(t, "r000002"));
    assert_int_equal(testTryCreate(t, "n2", KIB, CAROL, &e), OBJ_ST_OOM);
    assert_int_equal(testStats(t).evictions, 1);
    assert_int_equal(testStats(t).objects, 8);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

/* Evicting cannot help a create larger than the whole arena, so it must not
 * throw away cached replicas for nothing ("after evicting unpinned replicas
 * if that makes room"). */
static void testCreateLargerThanArenaEvictsNothing(void **state)
{
    (void)state;
    ObjEntry *r[8];
    ObjTable *t = testArenaOfReplicas(r);
    char id[16];
    ObjEntry *e = NULL;
    assert_int_equal(testTryCreate(t, "huge", 9 * KIB, BOB, &e), OBJ_ST_OOM);
    for (unsigned i = 0; i < 8; i++)
        assert_ptr_equal(testFind(t, testId(id, sizeof(id), 'r', i)), r[i]);
    assert_int_equal(testStats(t).evictions, 0);
    testDestroy(t);
}

/* Same when free space plus every evictable replica is still too little. */
static void testCreateThatEvictionCannotSatisfyEvictsNothing(void **state)
{
    (void)state;
    ObjTable *t = testTable(8 * KIB);
    char id[16];
    for (unsigned i = 0; i < 4; i++)
        testPut(t, testId(id, sizeof(id), 'p', i), KIB, ALICE);
    for (unsigned i = 0; i < 4; i++)
        testPutReplica(t, testId(id, sizeof(id), 'r', i), KIB);
    ObjEntry *e = NULL;
    assert_int_equal(testTryCreate(t, "big", 5 * KIB, BOB, &e), OBJ_ST_OOM);
    for (unsigned i = 0; i < 4; i++)
        assert_non_null(testFind(t, testId(id, sizeof(id), 'r', i)));
    assert_int_equal(testStats(t).evictions, 0);
    testDestroy(t);
}

static void testDeletedReplicaLeavesTheEvictionList(void **state)
{
    (void)state;
    ObjEntry *r[8];
    ObjTable *t = testArenaOfReplicas(r);
    assert_int_equal(objTableDelete(t, r[0]), OBJ_ST_OK);
    assert_int_equal(objTablePin(t, r[1], BOB), OBJ_ST_OK);
    assert_int_equal(objTableDelete(t, r[1]), OBJ_ST_DEFERRED);
    assert_int_equal(objTableCheck(t), 0);
    assert_int_equal(testRelease(t, "r000001", BOB), OBJ_ST_OK); /* frees; must not re-list */
    assert_int_equal(objTableCheck(t), 0);
    ObjEntry *e = NULL;
    assert_int_equal(testTryCreate(t, "new", 3 * KIB, BOB, &e), OBJ_ST_OK);
    assert_null(testFind(t, "r000002"));
    assert_non_null(testFind(t, "r000003"));
    assert_int_equal(testStats(t).evictions, 1);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

/* What the eviction hook saw: the ids, in order, read while the entry lived. */
typedef struct EvictLog {
    char ids[8][16];
    unsigned n;
} EvictLog;

static void testEvictRecord(const ObjEntry *e, void *arg)
{
    EvictLog *log = arg;
    assert_true(log->n < 8);
    assert_true(e->replica && e->pins == 0 && e->state == OBJ_SEALED);
    assert_true(e->idLen < sizeof(log->ids[0]));
    memcpy(log->ids[log->n], e->id, e->idLen);
    log->ids[log->n][e->idLen] = '\0';
    log->n++;
}

static void testEvictHookSeesEachEvictedReplicaInOrder(void **state)
{
    (void)state;
    ObjEntry *r[8];
    ObjTable *t = testArenaOfReplicas(r);
    EvictLog log = {0};
    objTableSetEvictHook(t, testEvictRecord, &log);
    ObjEntry *e = NULL;
    assert_int_equal(testTryCreate(t, "new", 3 * KIB, BOB, &e), OBJ_ST_OK);
    assert_int_equal(log.n, 3);
    assert_string_equal(log.ids[0], "r000000");
    assert_string_equal(log.ids[1], "r000001");
    assert_string_equal(log.ids[2], "r000002");
    assert_int_equal(testStats(t).evictions, log.n);
    testDestroy(t);
}

static void testEvictHookIsNotCalledForDeletesOrRefusedCreates(void **state)
{
    (void)state;
    ObjEntry *r[8];
    ObjTable *t = testArenaOfReplicas(r);
    EvictLog log = {0};
    objTableSetEvictHook(t, testEvictRecord, &log);
    assert_int_equal(objTableDelete(t, r[0]), OBJ_ST_OK);
    ObjEntry *e = NULL;
    assert_int_equal(testTryCreate(t, "huge", 9 * KIB, BOB, &e), OBJ_ST_OOM);
    assert_int_equal(objTableHolderGone(t, ALICE), 0);
    assert_int_equal(log.n, 0);
    testDestroy(t);
}

/* ---- scan ---------------------------------------------------------------------------------- */

enum { SCAN_MAX_IDS = 8192 };

/* How often the scan callback saw each object, by prefix and number. */
typedef struct ScanLog {
    unsigned hits['z' + 1][SCAN_MAX_IDS];
    size_t calls;
    int sawUnsealed;
} ScanLog;

static void testScanRecord(ObjEntry *e, void *arg)
{
    ScanLog *log = arg;
    char buf[32];
    assert_true(e->idLen == 7);
    memcpy(buf, e->id, 7);
    buf[7] = '\0';
    unsigned n = (unsigned)strtoul(buf + 1, NULL, 10);
    assert_true(buf[0] >= 'a' && buf[0] <= 'z' && n < SCAN_MAX_IDS);
    log->hits[(unsigned char)buf[0]][n]++;
    log->calls++;
    if (e->state != OBJ_SEALED)
        log->sawUnsealed = 1;
}

/* A cleared log; one is live at a time, and it is too big for the stack. */
static ScanLog *testScanLog(void)
{
    static ScanLog log;
    memset(&log, 0, sizeof(log));
    return &log;
}

/* Run a whole iteration with this COUNT; returns the number of steps. */
static unsigned testScanAll(ObjTable *t, size_t count, ScanLog *log)
{
    uint64_t cursor = 0;
    unsigned steps = 0;
    do {
        cursor = objTableScan(t, cursor, count, testScanRecord, log);
        steps++;
        assert_true(steps <= 1000000);
    } while (cursor != 0);
    return steps;
}

static void testScanOfEmptyTableEndsAtOnce(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ScanLog *log = testScanLog();
    assert_int_equal(objTableScan(t, 0, 10, testScanRecord, log), 0);
    assert_int_equal(log->calls, 0);
    testDestroy(t);
}

static void testScanVisitsEverySealedObjectForEveryCount(void **state)
{
    (void)state;
    enum { N = 300 };
    ObjTable *t = testTable(MIB);
    char id[16];
    for (unsigned i = 0; i < N; i++)
        testPut(t, testId(id, sizeof(id), 's', i), 10, ALICE);
    static const size_t extraCounts[] = {N - 1, N, N + 1, 10000};
    for (size_t k = 0; k < 40 + sizeof(extraCounts) / sizeof(extraCounts[0]); k++) {
        size_t count = k < 40 ? k + 1 : extraCounts[k - 40];
        ScanLog *log = testScanLog();
        testScanAll(t, count, log);
        for (unsigned i = 0; i < N; i++)
            assert_true(log->hits['s'][i] >= 1);
    }
    testDestroy(t);
}

static void testScanWithCountAboveTableSizeTakesOneStep(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    char id[16];
    for (unsigned i = 0; i < 100; i++)
        testPut(t, testId(id, sizeof(id), 's', i), 10, ALICE);
    ScanLog *log = testScanLog();
    assert_int_equal(testScanAll(t, 1000, log), 1);
    assert_int_equal(log->calls, 100);
    testDestroy(t);
}

static void testScanCountZeroStillMakesProgress(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    char id[16];
    for (unsigned i = 0; i < 50; i++)
        testPut(t, testId(id, sizeof(id), 's', i), 10, ALICE);
    ScanLog *log = testScanLog();
    testScanAll(t, 0, log);
    for (unsigned i = 0; i < 50; i++)
        assert_true(log->hits['s'][i] >= 1);
    testDestroy(t);
}

static void testScanSkipsCreatedObjects(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    char id[16];
    for (unsigned i = 0; i < 100; i++) {
        if (i % 3 == 0)
            testCreate(t, testId(id, sizeof(id), 'c', i), 10, ALICE);
        else
            testPut(t, testId(id, sizeof(id), 's', i), 10, ALICE);
    }
    for (size_t count = 1; count <= 8; count++) {
        ScanLog *log = testScanLog();
        testScanAll(t, count, log);
        assert_false(log->sawUnsealed);
        for (unsigned i = 0; i < 100; i++) {
            assert_int_equal(log->hits['c'][i], 0);
            if (i % 3 != 0)
                assert_true(log->hits['s'][i] >= 1);
        }
    }
    testDestroy(t);
}

/* Objects present for the whole iteration are all seen although the table
 * doubles (several times, or many times at once) between steps. */
static void testScanSeesEveryObjectWhileTheTableGrows(void **state)
{
    (void)state;
    static const struct {
        size_t count;         /* COUNT of each step */
        unsigned initial;     /* objects present throughout */
        unsigned perStep;     /* new objects inserted after each step */
        unsigned maxInserted; /* stop inserting after this many */
    } cases[] = {
        {1, 100, 25, 4000},   {3, 100, 50, 6000},     {7, 40, 10, 2000},
        {16, 200, 100, 8000}, {1, 60, 4000, 4000}, /* one huge jump after the first step */
        {2, 500, 1, 300},     {64, 1000, 7000, 7000},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        ObjTable *t = testTable(64 * MIB);
        ScanLog *log = testScanLog();
        char id[16];
        unsigned inserted = 0, steps = 0;
        for (unsigned i = 0; i < cases[c].initial; i++)
            testPut(t, testId(id, sizeof(id), 'p', i), 0, ALICE);
        uint64_t cursor = 0;
        do {
            cursor = objTableScan(t, cursor, cases[c].count, testScanRecord, log);
            for (unsigned k = 0; k < cases[c].perStep && inserted < cases[c].maxInserted; k++)
                testPut(t, testId(id, sizeof(id), 'g', inserted++), 0, ALICE);
            assert_true(++steps <= 1000000);
        } while (cursor != 0);
        for (unsigned i = 0; i < cases[c].initial; i++)
            assert_true(log->hits['p'][i] >= 1);
        assert_int_equal(objTableCheck(t), 0);
        testDestroy(t);
    }
}

/* ---- randomized workload against a model ------------------------------------------------ */

enum { RW_IDS = 128, RW_HOLDERS = 6, RW_OPS = 50000, RW_VERIFY_EVERY = 97 };

/* What the model believes about one object (visible or deleting). */
typedef struct ModelObj {
    ObjEntry *e;
    unsigned id;
    uint64_t bytes;
    int sealed, deleting;
    uint64_t creator;
    uint32_t pins[RW_HOLDERS + 1]; /* by holder; holders are 1..RW_HOLDERS */
} ModelObj;

typedef struct Model {
    ModelObj *visible[RW_IDS]; /* by id */
    ModelObj **all;            /* visible and deleting */
    size_t n, cap;
} Model;

static uint32_t modelPins(const ModelObj *m)
{
    uint32_t n = 0;
    for (unsigned h = 1; h <= RW_HOLDERS; h++)
        n += m->pins[h];
    return n;
}

static void modelAdd(Model *md, ModelObj *m)
{
    if (md->n == md->cap) {
        md->cap = md->cap ? md->cap * 2 : 64;
        md->all = realloc(md->all, md->cap * sizeof(*md->all));
        assert_non_null(md->all);
    }
    md->all[md->n++] = m;
}

/* Forget m entirely (the table freed it). */
static void modelDrop(Model *md, ModelObj *m)
{
    for (size_t i = 0; i < md->n; i++) {
        if (md->all[i] == m) {
            md->all[i] = md->all[--md->n];
            break;
        }
    }
    if (md->visible[m->id] == m)
        md->visible[m->id] = NULL;
    free(m);
}

/* The model of the running test, freed by the teardown if the test fails. */
static Model *testModel;

static void modelFree(Model *md)
{
    if (!md)
        return;
    for (size_t i = 0; i < md->n; i++)
        free(md->all[i]);
    free(md->all);
    free(md);
}

static void modelFormatId(char *buf, unsigned id)
{
    snprintf(buf, 16, "w%06u", id);
}

/* Every table-visible fact must match the model. */
static void modelVerify(ObjTable *t, const Model *md)
{
    char id[16];
    uint64_t objects = 0, created = 0, sealed = 0, bytes = 0, used = 0, deleting = 0, pinned = 0;
    for (unsigned i = 0; i < RW_IDS; i++) {
        modelFormatId(id, i);
        const ModelObj *m = md->visible[i];
        ObjEntry *e = testFind(t, id);
        assert_ptr_equal(e, m ? m->e : NULL);
    }
    for (size_t i = 0; i < md->n; i++) {
        const ModelObj *m = md->all[i];
        assert_int_equal(m->e->pins, modelPins(m));
        assert_int_equal(m->e->state, m->sealed ? OBJ_SEALED : OBJ_CREATED);
        assert_int_equal(!!m->e->deleting, m->deleting);
        assert_int_equal(m->e->dataSize + m->e->metaSize, m->bytes);
        used += testRoundUp(m->bytes);
        pinned += modelPins(m) > 0;
        if (m->deleting) {
            deleting++;
            continue;
        }
        objects++;
        if (m->sealed) {
            sealed++;
            bytes += m->bytes;
        } else {
            created++;
        }
    }
    ObjTableStats st = testStats(t);
    assert_int_equal(st.objects, objects);
    assert_int_equal(st.created, created);
    assert_int_equal(st.sealed, sealed);
    assert_int_equal(st.bytesSealed, bytes);
    assert_int_equal(st.deleting, deleting);
    assert_int_equal(st.pinnedObjects, pinned);
    assert_int_equal(testUsed(t), used);
}

static void modelCreate(ObjTable *t, Model *md, unsigned id, uint64_t holder, uint64_t *seed)
{
    char buf[16];
    uint64_t data = testRand(seed) % 4097;
    uint64_t meta = testRand(seed) % 3 == 0 ? testRand(seed) % 256 : 0;
    ObjEntry *e = NULL;
    modelFormatId(buf, id);
    ObjStatus st = objTableCreateEntry(t, buf, strlen(buf), data, meta, holder, &e);
    if (md->visible[id]) {
        assert_int_equal(st, OBJ_ST_EXISTS);
        return;
    }
    assert_int_equal(st, OBJ_ST_OK); /* the arena is far larger than the workload */
    ModelObj *m = calloc(1, sizeof(*m));
    assert_non_null(m);
    *m = (ModelObj){.e = e, .id = id, .bytes = data + meta, .creator = holder};
    md->visible[id] = m;
    modelAdd(md, m);
}

static void modelSealOrAbort(ObjTable *t, Model *md, ModelObj *m, uint64_t holder, int abort)
{
    int allowed = !m->sealed && holder == m->creator;
    ObjStatus st = abort ? objTableAbort(t, m->e, holder) : objTableSeal(t, m->e, holder, 7);
    assert_int_equal(st, allowed ? OBJ_ST_OK : OBJ_ST_WRONGSTATE);
    if (!allowed)
        return;
    if (abort)
        modelDrop(md, m);
    else
        m->sealed = 1;
}

static void modelRelease(ObjTable *t, Model *md, unsigned id, uint64_t holder, uint64_t *seed)
{
    char buf[16];
    ModelObj *held[64];
    size_t n = 0;
    modelFormatId(buf, id);
    for (size_t i = 0; i < md->n && n < 64; i++)
        if (md->all[i]->id == id && md->all[i]->pins[holder])
            held[n++] = md->all[i];
    if (n == 0) {
        assert_int_equal(testRelease(t, buf, holder), OBJ_ST_WRONGSTATE);
        return;
    }
    /* By id when that is unambiguous, else by entry. */
    ModelObj *m = held[n == 1 ? 0 : testRand(seed) % n];
    if (n == 1)
        assert_int_equal(testRelease(t, buf, holder), OBJ_ST_OK);
    else
        assert_int_equal(objTableUnpin(t, m->e, holder), OBJ_ST_OK);
    m->pins[holder]--;
    if (m->deleting && modelPins(m) == 0)
        modelDrop(md, m);
}

static void modelDelete(ObjTable *t, Model *md, ModelObj *m)
{
    ObjStatus st = objTableDelete(t, m->e);
    if (!m->sealed) {
        assert_int_equal(st, OBJ_ST_WRONGSTATE);
    } else if (modelPins(m)) {
        assert_int_equal(st, OBJ_ST_DEFERRED);
        m->deleting = 1;
        md->visible[m->id] = NULL;
    } else {
        assert_int_equal(st, OBJ_ST_OK);
        modelDrop(md, m);
    }
}

static void modelHolderGone(ObjTable *t, Model *md, uint64_t holder)
{
    int aborted = 0;
    for (size_t i = 0; i < md->n; i++)
        aborted += !md->all[i]->sealed && md->all[i]->creator == holder;
    assert_int_equal(objTableHolderGone(t, holder), aborted);
    for (size_t i = md->n; i-- > 0;) { /* backwards: modelDrop moves the last one here */
        ModelObj *m = md->all[i];
        m->pins[holder] = 0;
        if ((!m->sealed && m->creator == holder) || (m->deleting && modelPins(m) == 0))
            modelDrop(md, m);
    }
}

static void testRandomWorkloadMatchesModelAndKeepsInvariants(void **state)
{
    (void)state;
    ObjTable *t = testTable(1ULL << 30);
    Model *md = testModel = calloc(1, sizeof(*md));
    assert_non_null(md);
    uint64_t seed = 20240611;
    for (unsigned op = 0; op < RW_OPS; op++) {
        unsigned id = (unsigned)(testRand(&seed) % RW_IDS);
        uint64_t holder = 1 + testRand(&seed) % RW_HOLDERS;
        ModelObj *m = md->visible[id];
        unsigned dice = (unsigned)(testRand(&seed) % 100);
        /* Mostly let the creator act, sometimes a stranger. */
        uint64_t actor = m && testRand(&seed) % 4 ? m->creator : holder;
        if (dice < 25) {
            modelCreate(t, md, id, holder, &seed);
        } else if (dice < 40) {
            if (m)
                modelSealOrAbort(t, md, m, actor, 0);
        } else if (dice < 45) {
            if (m)
                modelSealOrAbort(t, md, m, actor, 1);
        } else if (dice < 65) {
            if (m) {
                assert_int_equal(objTablePin(t, m->e, holder),
                                 m->sealed ? OBJ_ST_OK : OBJ_ST_WRONGSTATE);
                if (m->sealed)
                    m->pins[holder]++;
            }
        } else if (dice < 85) {
            modelRelease(t, md, id, holder, &seed);
        } else if (dice < 93) {
            if (m)
                modelDelete(t, md, m);
        } else if (dice < 95) {
            modelHolderGone(t, md, holder);
        } else if (m && m->sealed) {
            objTableSetCopy(t, m->e, (ObjCopy)(testRand(&seed) % 3));
        }
        assert_int_equal(objTableCheck(t), 0);
        if (op % RW_VERIFY_EVERY == 0)
            modelVerify(t, md);
    }
    modelVerify(t, md);
    ObjTableStats st = testStats(t);
    assert_int_equal(st.oomErrors, 0);
    assert_true(st.deferredDeletes > 0); /* the workload did reach the interesting paths */
    assert_true(st.aborts > 0);
    testDestroy(t); /* with whatever is still pinned, created or deleting */
    modelFree(md);
    testModel = NULL;
}

/* ---- destroy --------------------------------------------------------------------------- */

/* Under ASan this is the real test: no leak, no double free, no use after free. */
static void testDestroyFreesEverythingWithPinsAndDeferredDeletesOutstanding(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    testCreate(t, "created", 10, ALICE);
    ObjEntry *pinned = testPut(t, "pinned", 10, ALICE);
    assert_int_equal(objTablePin(t, pinned, BOB), OBJ_ST_OK);
    assert_int_equal(objTablePin(t, pinned, CAROL), OBJ_ST_OK);
    /* Deleted while pinned by two holders: reachable twice through holders. */
    ObjEntry *gone = testPut(t, "gone", 10, ALICE);
    assert_int_equal(objTablePin(t, gone, BOB), OBJ_ST_OK);
    assert_int_equal(objTablePin(t, gone, CAROL), OBJ_ST_OK);
    assert_int_equal(objTablePin(t, gone, CAROL), OBJ_ST_OK);
    assert_int_equal(objTableDelete(t, gone), OBJ_ST_DEFERRED);
    /* Its id reused, and that one deleted while pinned too. */
    ObjEntry *again = testPut(t, "gone", 10, ALICE);
    assert_int_equal(objTablePin(t, again, BOB), OBJ_ST_OK);
    assert_int_equal(objTableDelete(t, again), OBJ_ST_DEFERRED);
    testPutReplica(t, "replica", 10);
    ObjEntry *pinnedReplica = testPutReplica(t, "replica2", 10);
    assert_int_equal(objTablePin(t, pinnedReplica, CAROL), OBJ_ST_OK);
    char id[16];
    for (unsigned i = 0; i < 200; i++) /* enough to grow the index */
        testPut(t, testId(id, sizeof(id), 'x', i), 1, ALICE);
    assert_int_equal(objTableCheck(t), 0);
    testDestroy(t);
}

static void testDestroyOfAFreshTable(void **state)
{
    (void)state;
    testDestroy(testTable(MIB));
}

/* Free whatever a failed test left behind (a passing one leaves nothing). */
static int testTeardown(void **state)
{
    (void)state;
    for (size_t i = 0; i < TEST_MAX_TABLES; i++) {
        if (testTables[i])
            testDestroy(testTables[i]);
    }
    modelFree(testModel);
    testModel = NULL;
    return 0;
}

/* ---- fresh memory reads as zeros ------------------------------------------------------- */

static void testFreshEntryHasNoStaleBytes(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testCreate(t, "obj", 5000, ALICE);
    assert_int_equal(e->staleBytes, 0);
    testDestroy(t);
}

/* ---- the checksum taken after the seal ---------------------------------------------- */

static int sumCancels;
static const ObjEntry *sumCancelled;

static void testSumCancel(const ObjEntry *e, void *arg)
{
    (void)arg;
    sumCancels++;
    sumCancelled = e;
}

/* A seal with the checksum pending: sealed at once, freed at once by a
 * delete after the hook was told, never a spill victim, and recorded later. */
static void testSealPendingThenDeleteCallsTheCancelHook(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    objTableSetSumCancel(t, testSumCancel, NULL);
    sumCancels = 0;
    ObjEntry *e = testCreate(t, "obj", 5000, ALICE);
    assert_int_equal(objTableSealPending(t, e, BOB), OBJ_ST_WRONGSTATE);
    assert_int_equal(objTableSealPending(t, e, ALICE), OBJ_ST_OK);
    assert_int_equal(e->state, OBJ_SEALED);
    assert_true(e->sumPending);
    ObjEntry *victims[4];
    assert_int_equal(objTableSpillPick(t, 4096, OBJ_HOLDER_TIER, victims, 4), 0);
    assert_int_equal(objTableDelete(t, e), OBJ_ST_OK);
    assert_int_equal(sumCancels, 1);
    assert_ptr_equal(sumCancelled, e);

    ObjEntry *f = testCreate(t, "obj2", 5000, ALICE);
    assert_int_equal(objTableSealPending(t, f, ALICE), OBJ_ST_OK);
    objTableSumDone(t, f, 0x1234);
    assert_false(f->sumPending);
    assert_int_equal(f->checksum, 0x1234);
    assert_int_equal(objTableDelete(t, f), OBJ_ST_OK);
    assert_int_equal(sumCancels, 1); /* known by then: nothing to cancel */
    testDestroy(t);
}

/* objTableScrub zeroes what deleted objects left, and a create after it
 * has nothing stale. */
static void testScrubLeavesNothingStale(void **state)
{
    (void)state;
    static uint8_t arena[MIB];
    ObjTable *t = testTable(MIB);
    ObjEntry *old = testPut(t, "old", 5000, ALICE);
    ObjEntry *rest = testCreate(t, "rest", MIB - 5056, ALICE);
    assert_non_null(rest);
    memset(arena + old->offset, 0xee, 5000);
    assert_int_equal(objTableDelete(t, old), OBJ_ST_OK);
    objTableLock(t);
    assert_int_equal(objTableDirtyFreeBytes(t), 5056);
    objTableUnlock(t);
    assert_int_equal(objTableScrub(t, arena, MIB), 5056);
    assert_int_equal(objTableScrub(t, arena, MIB), 0);
    for (uint64_t i = 0; i < 5000; i++)
        assert_int_equal(arena[i], 0);
    ObjEntry *e = testCreate(t, "new", 3000, ALICE);
    assert_int_equal(e->offset, 0);
    assert_int_equal(e->staleBytes, 0);
    testDestroy(t);
}

static void testEntryOverADeletedOneClearsItsBytes(void **state)
{
    (void)state;
    ObjTable *t = testTable(MIB);
    static uint8_t arena[MIB];
    ObjEntry *old = testPut(t, "old", 5000, ALICE);
    /* The rest of the arena taken, so that "new" can only land on "old". */
    ObjEntry *rest = testCreate(t, "rest", MIB - 5056, ALICE);
    assert_non_null(rest);
    memset(arena + old->offset, 0xee, 5000);
    assert_int_equal(objTableDelete(t, old), OBJ_ST_OK);
    ObjEntry *e = testCreate(t, "new", 3000, ALICE);
    assert_int_equal(e->offset, 0);
    assert_int_equal(e->staleBytes, 3000); /* only its own range counts */
    objTableClearStale(e, arena, e->dataSize);
    for (uint64_t i = 0; i < 3000; i++)
        assert_int_equal(arena[e->offset + i], 0);
    testDestroy(t);
}

/* 2^32 pins from one client cannot wrap a count to zero (which would free
 * the object under the remaining pins). Pinning 2^32 times takes minutes, so
 * this checks the width of the counts the table keeps: the object's, and
 * (through ObjPinCount, which the table's per-holder records use) each
 * holder's. */
static void testPinCountsAreWideEnoughNotToWrap(void **state)
{
    (void)state;
    ObjEntry e = {0};
    e.pins = (ObjPinCount)UINT32_MAX;
    e.pins++;
    assert_true(e.pins > UINT32_MAX);
    assert_int_equal(sizeof(e.pins), 8);
    assert_int_equal(sizeof(ObjPinCount), 8);
}

/* The index hash is keyed per table: the same id hashes differently in two
 * tables (so a client cannot precompute ids that share one chain). */
static void testIndexHashIsSeededPerTable(void **state)
{
    (void)state;
    ObjTable *t1 = testTable(MIB), *t2 = testTable(MIB);
    int differ = 0;
    for (unsigned i = 0; i < 4; i++) {
        char id[16];
        testId(id, sizeof(id), 'h', i);
        ObjEntry *e1 = testCreate(t1, id, 1, ALICE), *e2 = testCreate(t2, id, 1, ALICE);
        differ += e1->hash != e2->hash;
        assert_ptr_equal(testFind(t1, id), e1);
    }
    assert_int_equal(differ, 4);
    testDestroy(t1);
    testDestroy(t2);
}

/* ---- the spill tier's states and the hot set ------------------------------------- */

/* Fake tier callbacks: count discarded files. */
static int testDiscarded;

static void testDiscard(uint64_t fileNo, uint64_t bytes, void *arg)
{
    testDiscarded++;
}

static int testOpenNothing(uint64_t fileNo, void *arg)
{
    return -1;
}

static ObjTable *testTierTable(uint64_t arenaSize, int lruOnly)
{
    ObjTable *t = testTable(arenaSize);
    ObjTierOps ops = {.discard = testDiscard, .open = testOpenNothing};
    objTableSetTier(t, &ops, lruOnly);
    testDiscarded = 0;
    return t;
}

/* Spill e all the way (as spill.c does with a successful write). */
static void testSpill(ObjTable *t, ObjEntry *e, uint64_t fileNo)
{
    assert_int_equal(objTablePin(t, e, OBJ_HOLDER_TIER), OBJ_ST_OK);
    e->tier = OBJ_TIER_SPILLING;
    assert_int_equal(objTableSpillDone(t, e, OBJ_HOLDER_TIER, 1, fileNo), 1);
}

static void testSpillPickTakesColdUnpinnedPrimariesOnly(void **state)
{
    ObjTable *t = testTierTable(8 * MIB, 0);
    ObjEntry *a = testPut(t, "a", MIB, ALICE), *b = testPut(t, "b", MIB, ALICE);
    testPutReplica(t, "r", MIB);
    assert_int_equal(objTablePin(t, a, BOB), OBJ_ST_OK);
    ObjEntry *out[8];
    size_t n = objTableSpillPick(t, MIB, OBJ_HOLDER_TIER, out, 8);
    assert_int_equal(n, 1);
    assert_ptr_equal(out[0], b);
    assert_int_equal(b->tier, OBJ_TIER_SPILLING);
    assert_int_equal(objTableSpillDone(t, b, OBJ_HOLDER_TIER, 1, 7), 1);
    assert_int_equal(b->tier, OBJ_TIER_SPILLED);
    assert_null(b->block);
    assert_int_equal(testStats(t).tierObjects, 1);
    assert_int_equal(testStats(t).tierBytes, MIB);
    assert_int_equal(objTableSpillPick(t, MIB, OBJ_HOLDER_TIER, out, 8), 0); /* a is pinned */
    assert_int_equal(objTableCheck(t), 0);
}

static void testPinOfASpilledObjectIsSpilled(void **state)
{
    ObjTable *t = testTierTable(8 * MIB, 0);
    ObjEntry *a = testPut(t, "a", MIB, ALICE);
    testSpill(t, a, 1);
    assert_int_equal(objTablePin(t, a, BOB), OBJ_ST_SPILLED);
    assert_int_equal(testUsed(t), 0);
}

static void testASpillThatFailsOrIsPinnedMeanwhileKeepsTheObject(void **state)
{
    ObjTable *t = testTierTable(8 * MIB, 0);
    ObjEntry *a = testPut(t, "a", MIB, ALICE), *out[1];
    assert_int_equal(objTableSpillPick(t, MIB, OBJ_HOLDER_TIER, out, 1), 1);
    assert_int_equal(objTableSpillDone(t, a, OBJ_HOLDER_TIER, 0, 3), 0); /* write failed */
    assert_int_equal(a->tier, OBJ_TIER_MEMORY);
    assert_int_equal(a->pins, 0);
    assert_int_equal(objTableSpillPick(t, MIB, OBJ_HOLDER_TIER, out, 1), 1);
    assert_int_equal(objTablePin(t, a, BOB), OBJ_ST_OK); /* readers may pin while spilling */
    assert_int_equal(objTableSpillDone(t, a, OBJ_HOLDER_TIER, 1, 4), 0);
    assert_int_equal(a->tier, OBJ_TIER_MEMORY);
    assert_non_null(a->block);
    assert_int_equal(testStats(t).tierObjects, 0);
    assert_int_equal(objTableCheck(t), 0);
}

static void testRestoreBringsTheObjectBackAndDropsItsFile(void **state)
{
    ObjTable *t = testTierTable(8 * MIB, 0);
    ObjEntry *a = testPut(t, "a", MIB, ALICE);
    testSpill(t, a, 5);
    assert_int_equal(objTableRestoreBegin(t, a, OBJ_HOLDER_TIER), OBJ_ST_OK);
    assert_int_equal(a->tier, OBJ_TIER_RESTORING);
    assert_int_equal(objTablePin(t, a, BOB), OBJ_ST_SPILLED); /* bytes not there yet */
    objTableRestoreDone(t, a, OBJ_HOLDER_TIER, 1);
    assert_int_equal(a->tier, OBJ_TIER_MEMORY);
    assert_int_equal(a->fileNo, 0);
    assert_int_equal(testDiscarded, 1);
    assert_int_equal(objTablePin(t, a, BOB), OBJ_ST_OK);
    assert_int_equal(testStats(t).tierObjects, 0);
    assert_int_equal(objTableCheck(t), 0);
}

static void testAFailedRestoreLeavesTheObjectSpilled(void **state)
{
    ObjTable *t = testTierTable(8 * MIB, 0);
    ObjEntry *a = testPut(t, "a", MIB, ALICE);
    testSpill(t, a, 5);
    assert_int_equal(objTableRestoreBegin(t, a, OBJ_HOLDER_TIER), OBJ_ST_OK);
    objTableRestoreDone(t, a, OBJ_HOLDER_TIER, 0);
    assert_int_equal(a->tier, OBJ_TIER_SPILLED);
    assert_int_equal(a->fileNo, 5);
    assert_int_equal(testUsed(t), 0);
    assert_int_equal(testDiscarded, 0);
    assert_int_equal(objTableCheck(t), 0);
}

static void testDeletingASpilledObjectDropsItsFile(void **state)
{
    ObjTable *t = testTierTable(8 * MIB, 0);
    ObjEntry *a = testPut(t, "a", MIB, ALICE);
    testSpill(t, a, 9);
    assert_int_equal(objTableDelete(t, a), OBJ_ST_OK);
    assert_int_equal(testDiscarded, 1);
    assert_int_equal(testStats(t).tierObjects, 0);
    assert_null(testFind(t, "a"));
}

static void testAnObjectDeletedWhileSpillingIsFreedAtTheEnd(void **state)
{
    ObjTable *t = testTierTable(8 * MIB, 0);
    ObjEntry *a = testPut(t, "a", MIB, ALICE), *out[1];
    assert_int_equal(objTableSpillPick(t, MIB, OBJ_HOLDER_TIER, out, 1), 1);
    assert_int_equal(objTableDelete(t, a), OBJ_ST_DEFERRED);
    assert_int_equal(objTableSpillDone(t, a, OBJ_HOLDER_TIER, 1, 2), 0); /* caller drops file */
    assert_int_equal(testUsed(t), 0);
    assert_int_equal(testStats(t).deleting, 0);
    assert_int_equal(objTableCheck(t), 0);
}

static void testRestoreWithoutRoomIsOom(void **state)
{
    ObjTable *t = testTierTable(2 * MIB, 0);
    ObjEntry *a = testPut(t, "a", MIB, ALICE);
    testSpill(t, a, 1);
    testPut(t, "b", MIB, ALICE);
    testPut(t, "c", MIB, ALICE);
    assert_int_equal(objTableRestoreBegin(t, a, OBJ_HOLDER_TIER), OBJ_ST_OOM);
    assert_int_equal(a->tier, OBJ_TIER_SPILLED);
    assert_int_equal(objTableCheck(t), 0);
}

/* Use every object of ids[from..to) once (pin and unpin, as a GET does). */
static void testUseEach(ObjTable *t, ObjEntry **es, int from, int to)
{
    for (int i = from; i < to; i++) {
        assert_int_equal(objTablePin(t, es[i], BOB), OBJ_ST_OK);
        assert_int_equal(objTableUnpin(t, es[i], BOB), OBJ_ST_OK);
    }
}

static void testAOneTimeScanDoesNotMakeHotObjectsTheVictims(void **state)
{
    ObjTable *t = testTierTable(64 * MIB, 0);
    ObjEntry *es[32], *out[4];
    char id[16];
    for (int i = 0; i < 32; i++)
        es[i] = testPut(t, testId(id, sizeof(id), 'o', (unsigned)i), MIB, ALICE);
    testUseEach(t, es, 0, 4); /* 0..3 hot: used twice */
    testUseEach(t, es, 0, 4);
    testUseEach(t, es, 4, 32); /* a scan of the rest, more recent */
    size_t n = objTableSpillPick(t, 3 * MIB, OBJ_HOLDER_TIER, out, 4);
    assert_true(n >= 1);
    for (size_t i = 0; i < n; i++) {
        assert_true(out[i] != es[0] && out[i] != es[1] && out[i] != es[2] && out[i] != es[3]);
        objTableSpillDone(t, out[i], OBJ_HOLDER_TIER, 0, 0);
    }
}

static void testLruOnlyPicksTheLeastRecentlyUsed(void **state)
{
    ObjTable *t = testTierTable(64 * MIB, 1);
    ObjEntry *es[8], *out[1];
    char id[16];
    for (int i = 0; i < 8; i++)
        es[i] = testPut(t, testId(id, sizeof(id), 'l', (unsigned)i), MIB, ALICE);
    testUseEach(t, es, 0, 1);
    testUseEach(t, es, 0, 1);
    testUseEach(t, es, 1, 8); /* 0 is now the least recently used, however often */
    assert_int_equal(objTableSpillPick(t, MIB / 2, OBJ_HOLDER_TIER, out, 1), 1);
    assert_ptr_equal(out[0], es[0]);
    objTableSpillDone(t, out[0], OBJ_HOLDER_TIER, 0, 0);
}

/* ---- copy kinds: primary, protected, replica ---------------------------------------- */

/* A sealed copy of kind c (fetched, then made what a replica manager would). */
static ObjEntry *testPutCopy(ObjTable *t, const char *id, uint64_t size, ObjCopy c)
{
    ObjEntry *e = testPutReplica(t, id, size);
    objTableSetCopy(t, e, c);
    assert_int_equal(objTableCopyOf(e), c);
    return e;
}

static void testANewObjectWantsOneCopyAndIsAPrimary(void **state)
{
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testPut(t, "a", KIB, ALICE);
    assert_int_equal(e->want, 1);
    assert_int_equal(objTableCopyOf(e), OBJ_COPY_PRIMARY);
    assert_int_equal(objTableCopyOf(testPutReplica(t, "r", KIB)), OBJ_COPY_REPLICA);
    assert_int_equal(testStats(t).protectedObjects, 0);
    assert_int_equal(objTableCheck(t), 0);
}

/* An arena of 8 x 1 KiB filled with protected p0..p3 and replicas r0..r3,
 * interleaved so that each protected copy is older than a replica: a flood
 * of new objects takes every replica and no protected copy. */
static void testProtectedCopiesSurviveAnArenaFloodThatEvictsReplicas(void **state)
{
    ObjTable *t = testTable(8 * KIB);
    char id[16];
    for (unsigned i = 0; i < 4; i++) {
        testPutCopy(t, testId(id, sizeof(id), 'p', i), KIB, OBJ_COPY_PROTECTED);
        testPutReplica(t, testId(id, sizeof(id), 'r', i), KIB);
    }
    ObjEntry *e = NULL;
    for (unsigned i = 0; i < 4; i++) {
        assert_int_equal(testTryCreate(t, testId(id, sizeof(id), 'n', i), KIB, BOB, &e), OBJ_ST_OK);
        assert_null(testFind(t, testId(id, sizeof(id), 'r', i)));
        assert_int_equal(objTableCheck(t), 0);
    }
    assert_int_equal(testTryCreate(t, "one-more", KIB, BOB, &e), OBJ_ST_OOM);
    for (unsigned i = 0; i < 4; i++)
        assert_non_null(testFind(t, testId(id, sizeof(id), 'p', i)));
    ObjTableStats st = testStats(t);
    assert_int_equal(st.evictions, 4);
    assert_int_equal(st.protectedObjects, 4);
    assert_int_equal(objTableCheck(t), 0);
}

static void testMaxObjectsNeverEvictsAProtectedCopy(void **state)
{
    ObjTable *t = testTable(MIB);
    ObjEntry *e;
    objTableSetMaxObjects(t, 2);
    testPutCopy(t, "protected", 0, OBJ_COPY_PROTECTED);
    testPutReplica(t, "replica", 0);
    assert_int_equal(testTryCreate(t, "new", 0, ALICE, &e), OBJ_ST_OK);
    assert_null(testFind(t, "replica"));
    assert_int_equal(objTableSeal(t, e, ALICE, 0), OBJ_ST_OK);
    assert_int_equal(testTryCreate(t, "newer", 0, ALICE, &e), OBJ_ST_LIMIT);
    assert_non_null(testFind(t, "protected"));
    assert_int_equal(objTableCheck(t), 0);
}

static void testADemotedProtectedCopyBecomesEvictable(void **state)
{
    ObjTable *t = testTable(2 * KIB);
    ObjEntry *p = testPutCopy(t, "p", KIB, OBJ_COPY_PROTECTED), *e = NULL;
    testPut(t, "a", KIB, ALICE);
    assert_int_equal(testTryCreate(t, "new", KIB, BOB, &e), OBJ_ST_OOM);
    objTableSetCopy(t, p, OBJ_COPY_REPLICA);
    assert_int_equal(testStats(t).protectedObjects, 0);
    assert_int_equal(objTableCheck(t), 0);
    assert_int_equal(testTryCreate(t, "new", KIB, BOB, &e), OBJ_ST_OK);
    assert_null(testFind(t, "p"));
    assert_int_equal(testStats(t).evictions, 1);
    assert_int_equal(objTableCheck(t), 0);
}

static void testSpillPickTakesProtectedCopiesLikePrimaries(void **state)
{
    ObjTable *t = testTierTable(8 * MIB, 0);
    ObjEntry *p = testPutCopy(t, "p", MIB, OBJ_COPY_PROTECTED);
    testPutReplica(t, "r", MIB);
    ObjEntry *a = testPut(t, "a", MIB, ALICE), *out[8];
    assert_int_equal(objTableSpillPick(t, MIB, OBJ_HOLDER_TIER, out, 1), 1);
    assert_ptr_equal(out[0], p); /* the coldest of the spill candidates */
    assert_int_equal(objTableSpillDone(t, p, OBJ_HOLDER_TIER, 1, 3), 1);
    assert_int_equal(p->tier, OBJ_TIER_SPILLED);
    assert_int_equal(objTableSpillPick(t, 4 * MIB, OBJ_HOLDER_TIER, out, 8), 1);
    assert_ptr_equal(out[0], a); /* never the replica */
    objTableSpillDone(t, a, OBJ_HOLDER_TIER, 0, 0);
    assert_int_equal(objTableRestoreBegin(t, p, OBJ_HOLDER_TIER), OBJ_ST_OK);
    objTableRestoreDone(t, p, OBJ_HOLDER_TIER, 1);
    assert_int_equal(p->tier, OBJ_TIER_MEMORY);
    assert_int_equal(objTableCopyOf(p), OBJ_COPY_PROTECTED);
    assert_int_equal(objTableCheck(t), 0);
}

static void testSetCopyRoundTripsKeepTheInvariants(void **state)
{
    static const ObjCopy kinds[] = {OBJ_COPY_PROTECTED, OBJ_COPY_PRIMARY, OBJ_COPY_REPLICA,
                                    OBJ_COPY_PROTECTED, OBJ_COPY_REPLICA, OBJ_COPY_PRIMARY,
                                    OBJ_COPY_PRIMARY,   OBJ_COPY_REPLICA, OBJ_COPY_REPLICA};
    ObjTable *t = testTierTable(8 * MIB, 0);
    ObjEntry *idle = testPut(t, "unpinned", KIB, ALICE);
    ObjEntry *pinned = testPut(t, "pinned", KIB, ALICE);
    assert_int_equal(objTablePin(t, pinned, BOB), OBJ_ST_OK);
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
        objTableSetCopy(t, idle, kinds[i]);
        objTableSetCopy(t, pinned, kinds[(i + 1) % 9]);
        assert_int_equal(objTableCopyOf(idle), kinds[i]);
        assert_int_equal(objTableCopyOf(pinned), kinds[(i + 1) % 9]);
        assert_int_equal(testStats(t).protectedObjects,
                         (kinds[i] == OBJ_COPY_PROTECTED) +
                             (kinds[(i + 1) % 9] == OBJ_COPY_PROTECTED));
        assert_int_equal(objTableCheck(t), 0);
    }
    assert_int_equal(objTableUnpin(t, pinned, BOB), OBJ_ST_OK);
    assert_int_equal(objTableCheck(t), 0);
}

/* A copy demoted while on the tier stays there (a spilled replica is not
 * evictable: it has no arena block), and is evictable once read back. */
static void testASpilledCopyDemotedToAReplicaIsEvictableOnceRestored(void **state)
{
    ObjTable *t = testTierTable(MIB, 0);
    ObjEntry *p = testPutCopy(t, "p", MIB, OBJ_COPY_PROTECTED), *e = NULL;
    testSpill(t, p, 4);
    objTableSetCopy(t, p, OBJ_COPY_REPLICA);
    assert_int_equal(p->tier, OBJ_TIER_SPILLED);
    assert_int_equal(objTableCheck(t), 0);
    assert_int_equal(objTableRestoreBegin(t, p, OBJ_HOLDER_TIER), OBJ_ST_OK);
    objTableRestoreDone(t, p, OBJ_HOLDER_TIER, 0); /* a failed read: still spilled */
    assert_int_equal(p->tier, OBJ_TIER_SPILLED);
    assert_int_equal(objTableCheck(t), 0);
    assert_int_equal(objTableRestoreBegin(t, p, OBJ_HOLDER_TIER), OBJ_ST_OK);
    objTableRestoreDone(t, p, OBJ_HOLDER_TIER, 1);
    assert_int_equal(objTableCheck(t), 0);
    assert_int_equal(testTryCreate(t, "new", MIB, BOB, &e), OBJ_ST_OK);
    assert_null(testFind(t, "p"));
    assert_int_equal(objTableCheck(t), 0);
}

/* A copy demoted while being spilled or restored lands where its kind says. */
static void testACopyDemotedMidSpillOrRestoreEndsOnTheEvictionList(void **state)
{
    ObjTable *t = testTierTable(2 * MIB, 0);
    ObjEntry *p = testPutCopy(t, "p", MIB, OBJ_COPY_PROTECTED), *out[1], *e = NULL;
    assert_int_equal(objTableSpillPick(t, MIB, OBJ_HOLDER_TIER, out, 1), 1);
    objTableSetCopy(t, p, OBJ_COPY_REPLICA);
    assert_int_equal(objTableCheck(t), 0);
    assert_int_equal(objTableSpillDone(t, p, OBJ_HOLDER_TIER, 0, 1), 0); /* write failed */
    assert_int_equal(objTableCheck(t), 0);
    testPut(t, "a", MIB, ALICE);
    assert_int_equal(testTryCreate(t, "new", MIB, BOB, &e), OBJ_ST_OK);
    assert_null(testFind(t, "p"));
    assert_int_equal(objTableCheck(t), 0);
}

static void testProtectedObjectsCountVisibleProtectedCopies(void **state)
{
    ObjTable *t = testTable(MIB);
    ObjEntry *a = testPutCopy(t, "a", KIB, OBJ_COPY_PROTECTED);
    ObjEntry *b = testPutCopy(t, "b", KIB, OBJ_COPY_PROTECTED);
    testPutCopy(t, "c", KIB, OBJ_COPY_PROTECTED);
    assert_int_equal(testStats(t).protectedObjects, 3);
    objTableSetCopy(t, a, OBJ_COPY_PROTECTED); /* no change: counted once */
    assert_int_equal(testStats(t).protectedObjects, 3);
    objTableSetCopy(t, a, OBJ_COPY_PRIMARY); /* took ownership */
    assert_int_equal(testStats(t).protectedObjects, 2);
    assert_int_equal(objTablePin(t, b, BOB), OBJ_ST_OK);
    assert_int_equal(objTableDelete(t, b), OBJ_ST_DEFERRED); /* gone from view at once */
    assert_int_equal(testStats(t).protectedObjects, 1);
    objTableSetCopy(t, b, OBJ_COPY_REPLICA); /* a deleting entry changes nothing */
    assert_int_equal(testStats(t).protectedObjects, 1);
    assert_int_equal(objTableHolderGone(t, BOB), 0);
    assert_int_equal(objTableDelete(t, testFind(t, "c")), OBJ_ST_OK);
    assert_int_equal(testStats(t).protectedObjects, 0);
    assert_int_equal(objTableCheck(t), 0);
}

static void testSetCopyOfACreatedObjectChangesNothing(void **state)
{
    ObjTable *t = testTable(MIB);
    ObjEntry *e = testCreate(t, "c", KIB, ALICE);
    objTableSetCopy(t, e, OBJ_COPY_PROTECTED);
    assert_int_equal(objTableCopyOf(e), OBJ_COPY_PRIMARY);
    assert_int_equal(testStats(t).protectedObjects, 0);
    assert_int_equal(objTableCheck(t), 0);
}

#define TEST(fn) cmocka_unit_test_teardown(fn, testTeardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(testCreateMakesAFindableCreatedObject),
        TEST(testFindOfUnknownIdIsNull),
        TEST(testIdsAreBinarySafe),
        TEST(testSealMakesTheObjectSealedWithItsChecksum),
        TEST(testZeroSizeObjectTakesOneUnit),
        TEST(testCreateOfACreatedIdIsExists),
        TEST(testCreateOfASealedIdIsExists),
        TEST(testCreateLargerThanArenaIsOom),
        TEST(testCreateWhenArenaIsFullIsOomAndCounted),
        TEST(testCreateSucceedsAgainOnceMemoryIsFreed),
        TEST(testSealByNonCreatorIsWrongState),
        TEST(testAbortByNonCreatorIsWrongState),
        TEST(testSealTwiceIsWrongState),
        TEST(testAbortOfSealedIsWrongState),
        TEST(testAbortFreesMemoryAndTheId),
        TEST(testHeldCreatedObjectOutlivesItsAbortUntilUnpinned),
        TEST(testHeldCreatedObjectStaysPinnedOnceSealed),
        TEST(testDeleteOfCreatedIsWrongState),
        TEST(testDeleteOfUnpinnedFreesMemory),
        TEST(testPinOfCreatedIsWrongState),
        TEST(testPinCountsUpAndReleaseCountsDown),
        TEST(testDeleteOfPinnedIsDeferredAndHidesTheId),
        TEST(testDeferredDeleteKeepsMemoryUntilTheLastRelease),
        TEST(testDeletingObjectCannotBePinnedOrDeletedAgain),
        TEST(testIdOfDeferredDeleteCanBeCreatedAgain),
        TEST(testReleaseByIdFindsTheDeletedObjectThroughTheHolder),
        TEST(testPinsFromTwoHoldersAreCountedApart),
        TEST(testReleaseWithoutAPinIsWrongState),
        TEST(testUnpinDropsAPinOnExactlyThatEntry),
        TEST(testHolderGoneAbortsWhatItCreated),
        TEST(testHolderGoneDropsEveryPinItHeld),
        TEST(testHolderGoneFinishesDeferredDeletes),
        TEST(testHolderGoneOfAnUnknownHolderChangesNothing),
        TEST(testHolderGoneTwiceIsHarmless),
        TEST(testNewCreateEvictsAnUnpinnedReplica),
        TEST(testEvictionTakesAsManyReplicasAsTheCreateNeeds),
        TEST(testEvictionTakesTheLeastRecentlyPinnedReplicaFirst),
        TEST(testPinnedReplicasAreNeverEvicted),
        TEST(testReplicaBecomesEvictableAgainAtItsLastRelease),
        TEST(testPrimariesAreNeverEvicted),
        TEST(testCreatedObjectsAreNeverEvicted),
        TEST(testEvictionSkipsPinnedReplicasAndPrimaries),
        TEST(testCreateLargerThanArenaEvictsNothing),
        TEST(testCreateThatEvictionCannotSatisfyEvictsNothing),
        TEST(testDeletedReplicaLeavesTheEvictionList),
        TEST(testEvictHookSeesEachEvictedReplicaInOrder),
        TEST(testEvictHookIsNotCalledForDeletesOrRefusedCreates),
        TEST(testScanOfEmptyTableEndsAtOnce),
        TEST(testScanVisitsEverySealedObjectForEveryCount),
        TEST(testScanWithCountAboveTableSizeTakesOneStep),
        TEST(testScanCountZeroStillMakesProgress),
        TEST(testScanSkipsCreatedObjects),
        TEST(testScanSeesEveryObjectWhileTheTableGrows),
        TEST(testRandomWorkloadMatchesModelAndKeepsInvariants),
        TEST(testDestroyFreesEverythingWithPinsAndDeferredDeletesOutstanding),
        TEST(testDestroyOfAFreshTable),
        TEST(testFreshEntryHasNoStaleBytes),
        TEST(testEntryOverADeletedOneClearsItsBytes),
        TEST(testScrubLeavesNothingStale),
        TEST(testSealPendingThenDeleteCallsTheCancelHook),
        TEST(testPinCountsAreWideEnoughNotToWrap),
        TEST(testIndexHashIsSeededPerTable),
        TEST(testReleaseByGenerationDropsThatObjectsPin),
        TEST(testReleaseByOffsetDropsThatObjectsPin),
        TEST(testReleaseNamingNoPinIsRefusedWhileTwoGenerationsArePinned),
        TEST(testGenerationsAreNeverReused),
        TEST(testMaxObjectsRefusesTheNextCreateAndLosesNothing),
        TEST(testMaxObjectsCountsObjectsDeletedWhilePinned),
        TEST(testMaxObjectsEvictsAnUnpinnedReplicaButNeverAPrimary),
        TEST(testHeapCountsEveryObjectAndComesBackAfterDeletes),
        TEST(testSpillPickTakesColdUnpinnedPrimariesOnly),
        TEST(testPinOfASpilledObjectIsSpilled),
        TEST(testASpillThatFailsOrIsPinnedMeanwhileKeepsTheObject),
        TEST(testRestoreBringsTheObjectBackAndDropsItsFile),
        TEST(testAFailedRestoreLeavesTheObjectSpilled),
        TEST(testDeletingASpilledObjectDropsItsFile),
        TEST(testAnObjectDeletedWhileSpillingIsFreedAtTheEnd),
        TEST(testRestoreWithoutRoomIsOom),
        TEST(testAOneTimeScanDoesNotMakeHotObjectsTheVictims),
        TEST(testLruOnlyPicksTheLeastRecentlyUsed),
        TEST(testANewObjectWantsOneCopyAndIsAPrimary),
        TEST(testProtectedCopiesSurviveAnArenaFloodThatEvictsReplicas),
        TEST(testMaxObjectsNeverEvictsAProtectedCopy),
        TEST(testADemotedProtectedCopyBecomesEvictable),
        TEST(testSpillPickTakesProtectedCopiesLikePrimaries),
        TEST(testSetCopyRoundTripsKeepTheInvariants),
        TEST(testASpilledCopyDemotedToAReplicaIsEvictableOnceRestored),
        TEST(testACopyDemotedMidSpillOrRestoreEndsOnTheEvictionList),
        TEST(testProtectedObjectsCountVisibleProtectedCopies),
        TEST(testSetCopyOfACreatedObjectChangesNothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
