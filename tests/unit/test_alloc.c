/*
 * test_alloc.c - unit tests for the arena allocator (module/store/alloc.c).
 *
 * Each test pins down one promise of alloc.h: alignment, filling to the
 * last byte, failing cleanly and recovering, merging with neighbours,
 * zero-size requests, very large (offset-only) arenas, a long randomized
 * run that keeps every invariant, bounded fragmentation, and a truthful
 * largestFree. The allocator only hands out offsets, so a 64 GiB arena costs
 * no memory here. Random tests use a fixed seed so a failure reproduces.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "store/alloc.h"

#define KIB  (1024ULL)
#define MIB  (1024ULL * KIB)
#define GIB  (1024ULL * MIB)
#define UNIT OBJ_ALLOC_ALIGN

/* ---- helpers ------------------------------------------------------------------ */

/* splitmix64: small, fast and good enough to drive workloads. */
static uint64_t testRand(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A log-uniform size in [0, 2^maxBits): many small requests, some large. */
static uint64_t testRandSize(uint64_t *state, unsigned maxBits)
{
    unsigned bits = (unsigned)(testRand(state) % (maxBits + 1));
    return bits == 0 ? 0 : testRand(state) & ((1ULL << bits) - 1);
}

static uint64_t testRoundUp(uint64_t size)
{
    return size == 0 ? UNIT : (size + UNIT - 1) / UNIT * UNIT;
}

static AllocStats testStats(const Allocator *a)
{
    AllocStats st;
    allocGetStats(a, &st);
    return st;
}

typedef struct TestRange {
    uint64_t offset;
    uint64_t size;
} TestRange;

static int testRangeCmp(const void *x, const void *y)
{
    const TestRange *p = x, *q = y;
    return p->offset < q->offset ? -1 : p->offset > q->offset;
}

/* Fail the test if any two live blocks overlap or one leaves [0, capacity). */
static void testAssertDisjoint(AllocBlock **live, size_t n, uint64_t capacity)
{
    TestRange *r = malloc(n * sizeof(*r) + 1);
    assert_non_null(r);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (live[i] == NULL)
            continue;
        r[k].offset = allocBlockOffset(live[i]);
        r[k].size = allocBlockSize(live[i]);
        k++;
    }
    qsort(r, k, sizeof(*r), testRangeCmp);
    for (size_t i = 0; i < k; i++) {
        assert_true(r[i].size <= capacity && r[i].offset <= capacity - r[i].size);
        if (i > 0)
            assert_true(r[i - 1].offset + r[i - 1].size <= r[i].offset);
    }
    free(r);
}

/* Put every non-NULL block of live[0..n) and clear the slots. */
static void testPutAll(Allocator *a, AllocBlock **live, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        allocPut(a, live[i]);
        live[i] = NULL;
    }
}

/*
 * Run ops random gets and puts against live[0..slots), steering the number
 * of live blocks up and down in waves so the arena fragments. Checks every
 * invariant each checkEvery ops (0: never).
 */
static void testRandomWorkload(Allocator *a, AllocBlock **live, size_t slots, uint64_t *seed,
                               unsigned ops, unsigned maxBits, unsigned checkEvery)
{
    uint64_t capacity = testStats(a).capacity;
    for (unsigned op = 0; op < ops; op++) {
        size_t i = (size_t)(testRand(seed) % slots);
        /* Bias toward getting in the first half of each wave, putting in the second. */
        int wantGet = (testRand(seed) % 100) < ((op / 4096) % 2 ? 35u : 65u);
        if (live[i] == NULL && wantGet) {
            uint64_t size = testRandSize(seed, maxBits);
            live[i] = allocGet(a, size);
            if (live[i] == NULL) {
                /* Failing is only allowed when nothing large enough is free. */
                assert_true(testRoundUp(size) > testStats(a).largestFree);
            } else {
                assert_int_equal(allocBlockOffset(live[i]) % UNIT, 0);
                assert_int_equal(allocBlockSize(live[i]), testRoundUp(size));
            }
        } else if (live[i] != NULL && !wantGet) {
            allocPut(a, live[i]);
            live[i] = NULL;
        }
        if (checkEvery && op % checkEvery == 0) {
            assert_int_equal(allocCheck(a), 0);
            testAssertDisjoint(live, slots, capacity);
        }
    }
}

/* ---- creation ------------------------------------------------------------------- */

static void testCreateRejectsCapacityBelowOneUnit(void **state)
{
    (void)state;
    assert_null(allocCreate(0));
    assert_null(allocCreate(UNIT - 1));
    Allocator *a = allocCreate(UNIT);
    assert_non_null(a);
    allocDestroy(a);
}

static void testCapacityIsRoundedDownToAlignment(void **state)
{
    (void)state;
    Allocator *a = allocCreate(10 * UNIT + 63);
    assert_non_null(a);
    AllocStats st = testStats(a);
    assert_int_equal(st.capacity, 10 * UNIT);
    assert_int_equal(st.free, 10 * UNIT);
    assert_int_equal(st.largestFree, 10 * UNIT);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.blocks, 0);
    assert_int_equal(st.freeBlocks, 1);
    assert_int_equal(allocCheck(a), 0);
    allocDestroy(a);
}

static void testDestroyAndPutAcceptNull(void **state)
{
    (void)state;
    allocDestroy(NULL);
    Allocator *a = allocCreate(MIB);
    allocPut(a, NULL);
    assert_int_equal(allocCheck(a), 0);
    allocDestroy(a);
}

/* ---- basic get/put ------------------------------------------------------------- */

static void testEveryOffsetIsAligned(void **state)
{
    (void)state;
    Allocator *a = allocCreate(64 * MIB);
    AllocBlock *live[1000] = {0};
    for (uint64_t i = 0; i < 1000; i++) {
        uint64_t size = i * 37 + (i % 7); /* odd sizes, none a multiple of 64 by design */
        live[i] = allocGet(a, size);
        assert_non_null(live[i]);
        assert_int_equal(allocBlockOffset(live[i]) % UNIT, 0);
        assert_int_equal(allocBlockSize(live[i]) % UNIT, 0);
        assert_true(allocBlockSize(live[i]) >= size);
        assert_true(allocBlockSize(live[i]) < size + UNIT || size == 0);
    }
    testAssertDisjoint(live, 1000, 64 * MIB);
    assert_int_equal(allocCheck(a), 0);
    testPutAll(a, live, 1000);
    allocDestroy(a);
}

static void testExactFillToCapacityThenNull(void **state)
{
    (void)state;
    /* 1 + 2 + ... + 40 units = 820 units: fill with growing blocks to the last byte. */
    const uint64_t capUnits = 820;
    Allocator *a = allocCreate(capUnits * UNIT);
    AllocBlock *live[40];
    for (uint64_t i = 0; i < 40; i++) {
        live[i] = allocGet(a, (i + 1) * UNIT);
        assert_non_null(live[i]);
    }
    AllocStats st = testStats(a);
    assert_int_equal(st.used, capUnits * UNIT);
    assert_int_equal(st.free, 0);
    assert_int_equal(st.largestFree, 0);
    assert_int_equal(st.freeBlocks, 0);
    assert_int_equal(st.blocks, 40);
    assert_null(allocGet(a, 0));
    assert_null(allocGet(a, 1));
    assert_int_equal(allocCheck(a), 0);
    testAssertDisjoint(live, 40, capUnits * UNIT);
    testPutAll(a, live, 40);
    allocDestroy(a);
}

static void testWholeCapacityInOneRequest(void **state)
{
    (void)state;
    Allocator *a = allocCreate(1000 * UNIT);
    AllocBlock *b = allocGet(a, 1000 * UNIT);
    assert_non_null(b);
    assert_int_equal(allocBlockOffset(b), 0);
    assert_int_equal(allocBlockSize(b), 1000 * UNIT);
    assert_null(allocGet(a, 0));
    allocPut(a, b);
    assert_int_equal(allocCheck(a), 0);
    allocDestroy(a);
}

static void testRequestLargerThanCapacityFails(void **state)
{
    (void)state;
    Allocator *a = allocCreate(MIB);
    assert_null(allocGet(a, MIB + 1));
    assert_null(allocGet(a, UINT64_MAX));
    assert_null(allocGet(a, UINT64_MAX - 62));
    AllocStats st = testStats(a);
    assert_int_equal(st.freeBlocks, 1);
    assert_int_equal(st.largestFree, MIB);
    assert_int_equal(allocCheck(a), 0);
    allocDestroy(a);
}

static void testOutOfSpaceThenRecoveryAfterPut(void **state)
{
    (void)state;
    Allocator *a = allocCreate(MIB);
    AllocBlock *half1 = allocGet(a, MIB / 2);
    AllocBlock *half2 = allocGet(a, MIB / 2);
    assert_non_null(half1);
    assert_non_null(half2);
    assert_null(allocGet(a, 1));
    assert_null(allocGet(a, MIB));
    assert_int_equal(allocCheck(a), 0);

    allocPut(a, half1);
    assert_null(allocGet(a, MIB / 2 + 1));
    AllocBlock *again = allocGet(a, MIB / 2);
    assert_non_null(again);
    assert_int_equal(allocBlockOffset(again), 0);

    allocPut(a, again);
    allocPut(a, half2);
    AllocBlock *all = allocGet(a, MIB);
    assert_non_null(all);
    assert_int_equal(allocCheck(a), 0);
    allocPut(a, all);
    allocDestroy(a);
}

static void testZeroSizeTakesOneUnit(void **state)
{
    (void)state;
    Allocator *a = allocCreate(2 * UNIT);
    AllocBlock *x = allocGet(a, 0);
    AllocBlock *y = allocGet(a, 0);
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(allocBlockSize(x), UNIT);
    assert_int_equal(allocBlockSize(y), UNIT);
    assert_int_not_equal(allocBlockOffset(x), allocBlockOffset(y));
    assert_null(allocGet(a, 0));
    assert_int_equal(testStats(a).used, 2 * UNIT);
    allocPut(a, x);
    allocPut(a, y);
    assert_int_equal(allocCheck(a), 0);
    allocDestroy(a);
}

static void testStatsCountUsedAndBlocks(void **state)
{
    (void)state;
    Allocator *a = allocCreate(MIB);
    AllocBlock *x = allocGet(a, 100);  /* 128 */
    AllocBlock *y = allocGet(a, 1000); /* 1024 */
    AllocStats st = testStats(a);
    assert_int_equal(st.used, 128 + 1024);
    assert_int_equal(st.free, MIB - 128 - 1024);
    assert_int_equal(st.blocks, 2);
    assert_int_equal(st.freeBlocks, 1);
    allocPut(a, x);
    st = testStats(a);
    assert_int_equal(st.used, 1024);
    assert_int_equal(st.blocks, 1);
    assert_int_equal(st.freeBlocks, 2);
    allocPut(a, y);
    st = testStats(a);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.blocks, 0);
    assert_int_equal(st.freeBlocks, 1);
    allocDestroy(a);
}

static void testDoublePutIsIgnored(void **state)
{
    (void)state;
    Allocator *a = allocCreate(4 * UNIT);
    AllocBlock *x = allocGet(a, UNIT);
    AllocBlock *y = allocGet(a, UNIT);
    allocPut(a, y); /* y merges with the free tail; its node stays marked free */
    allocPut(a, y);
    assert_int_equal(allocCheck(a), 0);
    assert_int_equal(testStats(a).blocks, 1);
    allocPut(a, x);
    assert_int_equal(allocCheck(a), 0);
    assert_int_equal(testStats(a).freeBlocks, 1);
    allocDestroy(a);
}

/* ---- coalescing --------------------------------------------------------------- */

/* Fill a 4-unit arena with four 1-unit blocks a, b, c, d. */
static Allocator *testFourBlocks(AllocBlock *blk[4])
{
    Allocator *a = allocCreate(4 * UNIT);
    assert_non_null(a);
    for (int i = 0; i < 4; i++) {
        blk[i] = allocGet(a, UNIT);
        assert_non_null(blk[i]);
        assert_int_equal(allocBlockOffset(blk[i]), (uint64_t)i * UNIT);
    }
    return a;
}

static void testPutMergesWithFreeLeftNeighbour(void **state)
{
    (void)state;
    AllocBlock *blk[4];
    Allocator *a = testFourBlocks(blk);
    allocPut(a, blk[1]);
    allocPut(a, blk[2]);
    AllocStats st = testStats(a);
    assert_int_equal(st.freeBlocks, 1);
    assert_int_equal(st.largestFree, 2 * UNIT);
    assert_int_equal(allocCheck(a), 0);
    AllocBlock *m = allocGet(a, 2 * UNIT);
    assert_non_null(m);
    assert_int_equal(allocBlockOffset(m), UNIT);
    allocDestroy(a);
}

static void testPutMergesWithFreeRightNeighbour(void **state)
{
    (void)state;
    AllocBlock *blk[4];
    Allocator *a = testFourBlocks(blk);
    allocPut(a, blk[2]);
    allocPut(a, blk[1]);
    AllocStats st = testStats(a);
    assert_int_equal(st.freeBlocks, 1);
    assert_int_equal(st.largestFree, 2 * UNIT);
    assert_int_equal(allocCheck(a), 0);
    AllocBlock *m = allocGet(a, 2 * UNIT);
    assert_non_null(m);
    assert_int_equal(allocBlockOffset(m), UNIT);
    allocDestroy(a);
}

static void testPutMergesWithBothNeighbours(void **state)
{
    (void)state;
    AllocBlock *blk[4];
    Allocator *a = testFourBlocks(blk);
    allocPut(a, blk[0]);
    allocPut(a, blk[2]);
    assert_int_equal(testStats(a).freeBlocks, 2);
    allocPut(a, blk[1]);
    AllocStats st = testStats(a);
    assert_int_equal(st.freeBlocks, 1);
    assert_int_equal(st.largestFree, 3 * UNIT);
    assert_int_equal(allocCheck(a), 0);
    AllocBlock *m = allocGet(a, 3 * UNIT);
    assert_non_null(m);
    assert_int_equal(allocBlockOffset(m), 0);
    allocDestroy(a);
}

static void testNonAdjacentFreesDoNotMerge(void **state)
{
    (void)state;
    AllocBlock *blk[4];
    Allocator *a = testFourBlocks(blk);
    allocPut(a, blk[0]);
    allocPut(a, blk[2]);
    AllocStats st = testStats(a);
    assert_int_equal(st.freeBlocks, 2);
    assert_int_equal(st.largestFree, UNIT);
    assert_null(allocGet(a, 2 * UNIT));
    assert_int_equal(allocCheck(a), 0);
    allocDestroy(a);
}

/* Freeing every block, in any order, leaves the arena as one free block. */
static void testFreeAllInAnyOrderLeavesOneBlock(void **state)
{
    (void)state;
    enum { N = 300 };
    uint64_t seed = 7;
    for (int order = 0; order < 6; order++) {
        Allocator *a = allocCreate(N * 4 * KIB);
        AllocBlock *live[N];
        for (int i = 0; i < N; i++) {
            live[i] = allocGet(a, 1 + testRand(&seed) % (4 * KIB));
            assert_non_null(live[i]);
        }
        int idx[N];
        for (int i = 0; i < N; i++)
            idx[i] = i;
        if (order == 1) { /* reverse */
            for (int i = 0; i < N; i++)
                idx[i] = N - 1 - i;
        } else if (order == 2) { /* evens then odds: every put of an odd merges both sides */
            for (int i = 0; i < N; i++)
                idx[i] = i < N / 2 ? 2 * i : 2 * (i - N / 2) + 1;
        } else if (order >= 3) { /* shuffled */
            for (int i = N - 1; i > 0; i--) {
                int j = (int)(testRand(&seed) % (uint64_t)(i + 1));
                int t = idx[i];
                idx[i] = idx[j];
                idx[j] = t;
            }
        }
        for (int i = 0; i < N; i++) {
            allocPut(a, live[idx[i]]);
            if (i % 50 == 0)
                assert_int_equal(allocCheck(a), 0);
        }
        AllocStats st = testStats(a);
        assert_int_equal(st.freeBlocks, 1);
        assert_int_equal(st.blocks, 0);
        assert_int_equal(st.used, 0);
        assert_int_equal(st.largestFree, st.capacity);
        assert_int_equal(allocCheck(a), 0);
        allocDestroy(a);
    }
}

/* ---- large arenas --------------------------------------------------------------- */

static void testHugeCapacity64GiB(void **state)
{
    (void)state;
    Allocator *a = allocCreate(64 * GIB);
    assert_non_null(a);
    assert_int_equal(testStats(a).capacity, 64 * GIB);

    AllocBlock *all = allocGet(a, 64 * GIB);
    assert_non_null(all);
    assert_null(allocGet(a, 0));
    allocPut(a, all);

    AllocBlock *big[4];
    for (int i = 0; i < 4; i++) {
        big[i] = allocGet(a, 16 * GIB - (i == 3 ? UNIT : 0));
        assert_non_null(big[i]);
        assert_int_equal(allocBlockOffset(big[i]), (uint64_t)i * 16 * GIB);
    }
    assert_int_equal(testStats(a).largestFree, UNIT);
    AllocBlock *last = allocGet(a, 1);
    assert_non_null(last);
    assert_int_equal(allocBlockOffset(last), 64 * GIB - UNIT);
    assert_null(allocGet(a, 1));
    assert_int_equal(allocCheck(a), 0);

    allocPut(a, big[1]);
    allocPut(a, big[2]);
    assert_int_equal(testStats(a).largestFree, 32 * GIB);
    AllocBlock *mid = allocGet(a, 32 * GIB);
    assert_non_null(mid);
    assert_int_equal(allocBlockOffset(mid), 16 * GIB);
    assert_int_equal(allocCheck(a), 0);
    allocDestroy(a);
}

static void testMaximumCapacityUsesTopSizeClasses(void **state)
{
    (void)state;
    Allocator *a = allocCreate(UINT64_MAX);
    assert_non_null(a);
    uint64_t cap = testStats(a).capacity;
    assert_int_equal(cap, UINT64_MAX / UNIT * UNIT);
    AllocBlock *x = allocGet(a, cap / 3);
    AllocBlock *y = allocGet(a, cap - allocBlockSize(x));
    assert_non_null(x);
    assert_non_null(y);
    assert_int_equal(testStats(a).free, 0);
    allocPut(a, x);
    assert_int_equal(testStats(a).largestFree, allocBlockSize(x));
    assert_non_null(allocGet(a, allocBlockSize(x)));
    assert_int_equal(allocCheck(a), 0);
    allocDestroy(a);
}

/* ---- randomized ------------------------------------------------------------------ */

static void testRandomStressKeepsInvariantsAndNoOverlap(void **state)
{
    (void)state;
    enum { SLOTS = 512 };
    static AllocBlock *live[SLOTS];
    memset(live, 0, sizeof(live));
    uint64_t seed = 0x0b1ec7u;
    Allocator *a = allocCreate(64 * MIB);
    /* Sizes up to 4 MiB: hundreds of them outgrow 64 MiB, so failures are exercised. */
    testRandomWorkload(a, live, SLOTS, &seed, 200000, 22, 1000);

    uint64_t used = 0, blocks = 0;
    for (size_t i = 0; i < SLOTS; i++) {
        if (live[i]) {
            used += allocBlockSize(live[i]);
            blocks++;
        }
    }
    AllocStats st = testStats(a);
    assert_int_equal(st.used, used);
    assert_int_equal(st.blocks, blocks);
    assert_int_equal(st.free, st.capacity - used);
    assert_int_equal(allocCheck(a), 0);
    testPutAll(a, live, SLOTS);
    allocDestroy(a);
}

static void testFragmentationVanishesAfterFreeingEverything(void **state)
{
    (void)state;
    enum { SLOTS = 1024 };
    static AllocBlock *live[SLOTS];
    memset(live, 0, sizeof(live));
    uint64_t seed = 12345;
    Allocator *a = allocCreate(64 * MIB);
    testRandomWorkload(a, live, SLOTS, &seed, 50000, 18, 0);
    assert_true(testStats(a).freeBlocks > 1); /* the workload did fragment the arena */
    testPutAll(a, live, SLOTS);
    AllocStats st = testStats(a);
    assert_int_equal(st.freeBlocks, 1);
    assert_int_equal(st.blocks, 0);
    assert_int_equal(st.largestFree, st.capacity);
    assert_int_equal(allocCheck(a), 0);
    allocDestroy(a);
}

/*
 * A free block that is not at the start of its size class is skipped by the
 * rounded-up good-fit search; a request for exactly its size must still get it.
 */
static void testRequestOfExactlyLargestFreeSucceeds(void **state)
{
    (void)state;
    /* 1000 units lies inside a class that starts at 992 units. */
    Allocator *a = allocCreate(1001 * UNIT);
    AllocBlock *x = allocGet(a, 1000 * UNIT);
    AllocBlock *guard = allocGet(a, 1);
    assert_non_null(x);
    assert_non_null(guard);
    allocPut(a, x);
    assert_int_equal(testStats(a).largestFree, 1000 * UNIT);
    assert_null(allocGet(a, 1000 * UNIT + 1));
    AllocBlock *y = allocGet(a, 1000 * UNIT);
    assert_non_null(y);
    assert_int_equal(allocBlockOffset(y), 0);
    assert_int_equal(allocCheck(a), 0);
    allocDestroy(a);
}

/* In many fragmented states, largestFree is exactly the boundary of success. */
static void testLargestFreeIsTruthfulUnderRandomWorkload(void **state)
{
    (void)state;
    enum { SLOTS = 256 };
    static AllocBlock *live[SLOTS];
    memset(live, 0, sizeof(live));
    uint64_t seed = 99;
    Allocator *a = allocCreate(16 * MIB);
    for (int round = 0; round < 300; round++) {
        testRandomWorkload(a, live, SLOTS, &seed, 200, 17, 0);
        AllocStats st = testStats(a);
        if (st.largestFree == 0)
            continue;
        assert_null(allocGet(a, st.largestFree + 1));
        AllocBlock *b = allocGet(a, st.largestFree);
        assert_non_null(b);
        assert_int_equal(allocBlockSize(b), st.largestFree);
        assert_true(testStats(a).largestFree <= st.largestFree);
        allocPut(a, b);
        assert_int_equal(testStats(a).largestFree, st.largestFree);
    }
    assert_int_equal(allocCheck(a), 0);
    testPutAll(a, live, SLOTS);
    allocDestroy(a);
}

/* ---- clean-range tracking (a created object must read as zeros) ---------------- */

static void testFreshBlocksAreClean(void **state)
{
    Allocator *a = allocCreate(1 * MIB);
    AllocBlock *b1 = allocGet(a, 4 * KIB), *b2 = allocGet(a, 100 * KIB);
    assert_int_equal(allocBlockDirtyBytes(b1), 0);
    assert_int_equal(allocBlockDirtyBytes(b2), 0);
    allocDestroy(a);
}

static void testReusedBlockIsDirtyWhereTheOldOneWas(void **state)
{
    Allocator *a = allocCreate(1 * MIB);
    AllocBlock *b = allocGet(a, 4 * KIB);
    AllocBlock *rest = allocGet(a, 1 * MIB - 4 * KIB); /* the old range is all that is free */
    allocPut(a, b);
    b = allocGet(a, 4 * KIB);
    assert_int_equal(allocBlockOffset(b), 0);
    assert_int_equal(allocBlockDirtyBytes(b), 4 * KIB);
    allocPut(a, b);
    allocPut(a, rest);
    /* A larger block over the same start: only the old objects' part is
     * dirty (the rest's whole range is, as it was handed back). */
    b = allocGet(a, 1 * MIB);
    assert_int_equal(allocBlockOffset(b), 0);
    assert_int_equal(allocBlockDirtyBytes(b), 1 * MIB);
    assert_int_equal(allocCheck(a), 0);
    allocDestroy(a);
}

static void testScrubClearsFreedBytesFromTheEndOfTheDirtyPrefix(void **state)
{
    static uint8_t mem[1 * MIB];
    Allocator *a = allocCreate(sizeof(mem));
    AllocBlock *b = allocGet(a, 8 * KIB);
    AllocBlock *keep = allocGet(a, 4 * KIB);
    memset(mem, 0, sizeof(mem));
    memset(mem + allocBlockOffset(b), 0xab, 8 * KIB);
    memset(mem + allocBlockOffset(keep), 0xcd, 4 * KIB);
    allocPut(a, b);
    assert_int_equal(allocDirtyFreeBytes(a), 8 * KIB);
    assert_int_equal(allocScrub(a, mem, 3 * KIB), 3 * KIB);
    assert_int_equal(allocDirtyFreeBytes(a), 5 * KIB);
    assert_int_equal(mem[5 * KIB - 1], 0xab);
    assert_int_equal(mem[5 * KIB], 0);
    assert_int_equal(allocScrub(a, mem, 1 * MIB), 5 * KIB);
    assert_int_equal(allocScrub(a, mem, 1 * MIB), 0);
    assert_int_equal(allocDirtyFreeBytes(a), 0);
    for (size_t i = 0; i < 8 * KIB; i++)
        assert_int_equal(mem[i], 0);
    assert_int_equal(mem[allocBlockOffset(keep)], 0xcd); /* an allocated block is never touched */
    b = allocGet(a, 8 * KIB);
    assert_int_equal(allocBlockDirtyBytes(b), 0);
    assert_int_equal(allocCheck(a), 0);
    allocDestroy(a);
}

static void testMergedBlockKeepsDirtOfEveryPart(void **state)
{
    Allocator *a = allocCreate(1 * MIB);
    AllocBlock *x = allocGet(a, 4 * KIB), *y = allocGet(a, 4 * KIB), *z = allocGet(a, 4 * KIB);
    allocPut(a, z); /* z merges with the clean tail: dirty up to z's end */
    allocPut(a, x);
    allocPut(a, y); /* one block again */
    assert_int_equal(testStats(a).freeBlocks, 1);
    AllocBlock *b = allocGet(a, 1 * MIB);
    assert_non_null(b);
    assert_int_equal(allocBlockDirtyBytes(b), 12 * KIB);
    assert_int_equal(allocCheck(a), 0);
    allocDestroy(a);
}

/* Real memory under a random workload of gets, puts and scrubs: every
 * allocated block is filled with non-zero bytes, and every byte of a new
 * block past its dirty prefix must read as zero (the allocator may call
 * more dirty than is, never less); a scrub never touches an allocated block. */
static void testDirtyPrefixNeverUnderstatesUnderRandomWorkload(void **state)
{
    enum { SLOTS = 64, UNITS = 4096 };
    static uint8_t mem[UNITS * UNIT];
    Allocator *a = allocCreate((uint64_t)UNITS * UNIT);
    AllocBlock *live[SLOTS] = {0};
    uint64_t rng = 42;

    memset(mem, 0, sizeof(mem));
    for (int step = 0; step < 20000; step++) {
        int i = (int)(testRand(&rng) % SLOTS);
        if (testRand(&rng) % 4 == 0)
            allocScrub(a, mem, (testRand(&rng) % 64 + 1) * UNIT);
        if (live[i]) {
            uint64_t off = allocBlockOffset(live[i]), n = allocBlockSize(live[i]);
            for (uint64_t u = 0; u < n; u += UNIT)
                assert_int_equal(mem[off + u], 0xee);
            allocPut(a, live[i]);
            live[i] = NULL;
            continue;
        }
        AllocBlock *b = allocGet(a, testRandSize(&rng, 15));
        if (!b)
            continue;
        uint64_t off = allocBlockOffset(b), n = allocBlockSize(b);
        uint64_t dirty = allocBlockDirtyBytes(b);
        assert_true(dirty <= n);
        for (uint64_t u = dirty; u < n; u++)
            assert_int_equal(mem[off + u], 0);
        memset(mem + off, 0xee, n);
        live[i] = b;
    }
    assert_int_equal(allocCheck(a), 0);
    for (int i = 0; i < SLOTS; i++)
        allocPut(a, live[i]);
    while (allocScrub(a, mem, 1 * MIB))
        ;
    for (size_t u = 0; u < sizeof(mem); u++)
        assert_int_equal(mem[u], 0);
    allocDestroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(testCreateRejectsCapacityBelowOneUnit),
        cmocka_unit_test(testCapacityIsRoundedDownToAlignment),
        cmocka_unit_test(testDestroyAndPutAcceptNull),
        cmocka_unit_test(testEveryOffsetIsAligned),
        cmocka_unit_test(testExactFillToCapacityThenNull),
        cmocka_unit_test(testWholeCapacityInOneRequest),
        cmocka_unit_test(testRequestLargerThanCapacityFails),
        cmocka_unit_test(testOutOfSpaceThenRecoveryAfterPut),
        cmocka_unit_test(testZeroSizeTakesOneUnit),
        cmocka_unit_test(testStatsCountUsedAndBlocks),
        cmocka_unit_test(testDoublePutIsIgnored),
        cmocka_unit_test(testPutMergesWithFreeLeftNeighbour),
        cmocka_unit_test(testPutMergesWithFreeRightNeighbour),
        cmocka_unit_test(testPutMergesWithBothNeighbours),
        cmocka_unit_test(testNonAdjacentFreesDoNotMerge),
        cmocka_unit_test(testFreeAllInAnyOrderLeavesOneBlock),
        cmocka_unit_test(testHugeCapacity64GiB),
        cmocka_unit_test(testMaximumCapacityUsesTopSizeClasses),
        cmocka_unit_test(testRandomStressKeepsInvariantsAndNoOverlap),
        cmocka_unit_test(testFragmentationVanishesAfterFreeingEverything),
        cmocka_unit_test(testRequestOfExactlyLargestFreeSucceeds),
        cmocka_unit_test(testLargestFreeIsTruthfulUnderRandomWorkload),
        cmocka_unit_test(testFreshBlocksAreClean),
        cmocka_unit_test(testReusedBlockIsDirtyWhereTheOldOneWas),
        cmocka_unit_test(testScrubClearsFreedBytesFromTheEndOfTheDirtyPrefix),
        cmocka_unit_test(testMergedBlockKeepsDirtOfEveryPart),
        cmocka_unit_test(testDirtyPrefixNeverUnderstatesUnderRandomWorkload),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
