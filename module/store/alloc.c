/*
 * alloc.c - two-level segregated fit (TLSF) allocator over the offsets of
 * one arena.
 *
 * The arena is cut into 64-byte units and every range is a whole number of
 * units, so offsets come out aligned without any per-block padding. Each
 * range, used or free, is a heap-allocated AllocBlock node; the nodes of all
 * ranges form a doubly linked list in address order (the physical list),
 * which is what lets a freed range find and swallow its free neighbours in
 * O(1). Free ranges additionally sit in one of FL x SL size-class lists:
 * the first level is the power of two of the size, the second level splits
 * each power of two into 32 equal steps. One bit per non-empty list, in a
 * first-level word and a second-level word per first level, turns "the
 * smallest non-empty class that can hold n" into two count-trailing-zeros.
 *
 * Nothing is ever stored inside the arena: it is shared with clients, and a
 * buggy client must not be able to corrupt the allocator. Nodes come from a
 * private pool that grows in chunks and recycles nodes released by merges,
 * so steady-state traffic does not call malloc at all.
 */
#include "alloc.h"

#include "common/heap.h"
#include "common/list.h"

#include <string.h>

/* log2 of the unit: every offset and size is a multiple of 64 bytes. */
#define ALLOC_UNIT_SHIFT 6
/* Second level: each power of two is split into 2^5 = 32 classes. */
#define ALLOC_SL_SHIFT 5
#define ALLOC_SL_COUNT (1u << ALLOC_SL_SHIFT)
/* First level: one class row per possible most-significant bit. Sizes are
 * below 2^58 units, so rows above 53 stay empty; 64 keeps the masks simple. */
#define ALLOC_FL_COUNT 64
/* Nodes allocated per pool chunk. */
#define ALLOC_CHUNK_NODES 256

struct AllocBlock {
    uint64_t offset;  /* in units */
    uint64_t size;    /* in units, >= 1 */
    ObjListLink phys; /* in Allocator.phys, in address order */
    ObjListLink free; /* in its size-class list (free blocks), or the pool's spares */
    /* Units at the start of the block that may hold bytes of an earlier
     * object; the rest reads as zeros (the arena file starts zero-filled).
     * An allocated block is dirty all along once it has been handed back. */
    uint64_t dirty;
    ObjListLink dirtyLink; /* in Allocator.dirtyFree while free with dirty > 0 */
    int isFree;
};

typedef struct AllocChunk {
    struct AllocChunk *next;
    AllocBlock nodes[ALLOC_CHUNK_NODES];
} AllocChunk;

struct Allocator {
    uint64_t capacity;                 /* in units */
    uint64_t usedUnits;                /* units in allocated blocks */
    uint64_t usedBlocks;               /* allocated blocks */
    uint64_t freeBlocks;               /* free blocks (all of them are in the lists) */
    ObjList phys;                      /* every block (AllocBlock.phys), offset 0 first */
    uint64_t flBitmap;                 /* bit f set iff slBitmap[f] != 0 */
    uint32_t slBitmap[ALLOC_FL_COUNT]; /* bit s set iff heads[f][s] is not empty */
    ObjList heads[ALLOC_FL_COUNT][ALLOC_SL_COUNT]; /* free blocks (AllocBlock.free) */
    ObjList spare;      /* recycled nodes, linked through AllocBlock.free */
    ObjList dirtyFree;  /* free blocks with a dirty prefix (AllocBlock.dirtyLink) */
    AllocChunk *chunks; /* every chunk ever allocated, for destroy */
};

/* ---- links -------------------------------------------------------------------- */

/* The block holding free link l. */
static AllocBlock *allocFreeEntry(const ObjListLink *l)
{
    return objListEntry(l, AllocBlock, free);
}

/* The first block of a size-class list, or NULL when it is empty. */
static AllocBlock *allocListFirst(const ObjList *head)
{
    ObjListLink *l = objListFirst(head);
    return l ? allocFreeEntry(l) : NULL;
}

/* The block after b in its size-class list, or NULL at the end. */
static AllocBlock *allocListNext(const ObjList *head, const AllocBlock *b)
{
    return b->free.next == head ? NULL : allocFreeEntry(b->free.next);
}

/* b's address-order neighbours, or NULL at either end of the arena. */
static AllocBlock *allocPhysPrev(const Allocator *a, const AllocBlock *b)
{
    return b->phys.prev == &a->phys ? NULL : objListEntry(b->phys.prev, AllocBlock, phys);
}

static AllocBlock *allocPhysNext(const Allocator *a, const AllocBlock *b)
{
    return b->phys.next == &a->phys ? NULL : objListEntry(b->phys.next, AllocBlock, phys);
}

/* ---- size classes ------------------------------------------------------------ */

/*
 * Index of the most significant set bit of x. x must be non-zero (callers
 * only pass sizes, which are >= 1 unit). Can't fail.
 */
static unsigned allocMsb(uint64_t x)
{
    return 63u - (unsigned)__builtin_clzll(x);
}

/*
 * Size class of a block of units units: sizes below 32 get one exact class
 * each in row 0; above that, row = msb - 4 and the column is the next five
 * bits below the msb. Every size maps to exactly one class. Can't fail.
 */
static void allocMapping(uint64_t units, unsigned *fl, unsigned *sl)
{
    if (units < ALLOC_SL_COUNT) {
        *fl = 0;
        *sl = (unsigned)units;
        return;
    }
    unsigned msb = allocMsb(units);
    *fl = msb - (ALLOC_SL_SHIFT - 1);
    *sl = (unsigned)(units >> (msb - ALLOC_SL_SHIFT)) - ALLOC_SL_COUNT;
}

/*
 * Round units up to the start of the next class unless it already is one,
 * so that every block in the class found for the result is big enough
 * ("good fit"). Inputs are below 2^58, so this cannot overflow. Can't fail.
 */
static uint64_t allocRoundUp(uint64_t units)
{
    if (units < ALLOC_SL_COUNT)
        return units;
    uint64_t step = 1ULL << (allocMsb(units) - ALLOC_SL_SHIFT);
    return units + step - 1;
}

/*
 * Smallest non-empty class at or above (fl, sl): the second-level word of
 * row fl masked to columns >= sl, else the lowest non-empty row above fl.
 * Returns that class's head, or NULL when every such class is empty.
 */
static AllocBlock *allocFindClass(const Allocator *a, unsigned fl, unsigned sl)
{
    if (fl >= ALLOC_FL_COUNT)
        return NULL;
    uint32_t slBits = a->slBitmap[fl] & (~0u << sl);
    if (slBits == 0) {
        uint64_t flBits = fl + 1 < ALLOC_FL_COUNT ? a->flBitmap & (~0ULL << (fl + 1)) : 0;
        if (flBits == 0)
            return NULL;
        fl = (unsigned)__builtin_ctzll(flBits);
        slBits = a->slBitmap[fl];
    }
    sl = (unsigned)__builtin_ctz(slBits);
    return allocListFirst(&a->heads[fl][sl]);
}

/* ---- free lists -------------------------------------------------------------- */

/* Push free block b on the head of its class list and set the bits. Can't fail. */
static void allocListInsert(Allocator *a, AllocBlock *b)
{
    unsigned fl, sl;
    allocMapping(b->size, &fl, &sl);
    objListPushFront(&a->heads[fl][sl], &b->free);
    a->slBitmap[fl] |= 1u << sl;
    a->flBitmap |= 1ULL << fl;
    if (b->dirty)
        objListPushBack(&a->dirtyFree, &b->dirtyLink);
}

/* Unlink free block b from its class list, clearing bits that go empty. Can't fail. */
static void allocListRemove(Allocator *a, AllocBlock *b)
{
    unsigned fl, sl;
    allocMapping(b->size, &fl, &sl);
    objListUnlink(&b->free);
    objListUnlink(&b->dirtyLink);
    if (objListEmpty(&a->heads[fl][sl])) {
        a->slBitmap[fl] &= ~(1u << sl);
        if (a->slBitmap[fl] == 0)
            a->flBitmap &= ~(1ULL << fl);
    }
}

/* ---- node pool --------------------------------------------------------------- */

/*
 * Take a node from the pool, growing it by one chunk when it is empty.
 * Returns NULL when malloc fails; the allocator is unchanged then.
 */
static AllocBlock *allocNodeGet(Allocator *a)
{
    if (objListEmpty(&a->spare)) {
        AllocChunk *c = objHeapMalloc(OBJ_HEAP_STORE, sizeof(*c));
        if (c == NULL)
            return NULL;
        c->next = a->chunks;
        a->chunks = c;
        for (int i = 0; i < ALLOC_CHUNK_NODES; i++)
            objListPushBack(&a->spare, &c->nodes[i].free);
    }
    AllocBlock *n = allocFreeEntry(objListPopFront(&a->spare));
    *n = (AllocBlock){0};
    objListInit(&n->phys);
    objListInit(&n->free);
    objListInit(&n->dirtyLink);
    return n;
}

/*
 * Give a node back to the pool (it is only ever freed with its chunk). It is
 * marked free so a stray second allocPut of a merged-away block is ignored
 * until the node is handed out again. Can't fail.
 */
static void allocNodePut(Allocator *a, AllocBlock *n)
{
    *n = (AllocBlock){0};
    n->isFree = 1;
    objListPushFront(&a->spare, &n->free);
}

/* ---- public API -------------------------------------------------------------- */

/*
 * Build an allocator whose single free block spans the whole capacity,
 * rounded down to whole units. Returns NULL when less than one unit remains
 * or when the bookkeeping cannot be allocated.
 */
Allocator *allocCreate(uint64_t capacity)
{
    uint64_t units = capacity >> ALLOC_UNIT_SHIFT;
    if (units == 0)
        return NULL;
    Allocator *a = objHeapCalloc(OBJ_HEAP_STORE, 1, sizeof(*a));
    if (a == NULL)
        return NULL;
    a->capacity = units;
    objListInit(&a->phys);
    objListInit(&a->spare);
    objListInit(&a->dirtyFree);
    for (unsigned fl = 0; fl < ALLOC_FL_COUNT; fl++)
        for (unsigned sl = 0; sl < ALLOC_SL_COUNT; sl++)
            objListInit(&a->heads[fl][sl]);
    AllocBlock *b = allocNodeGet(a);
    if (b == NULL) {
        objHeapFree(OBJ_HEAP_STORE, a);
        return NULL;
    }
    b->offset = 0;
    b->size = units;
    b->isFree = 1;
    objListPushBack(&a->phys, &b->phys);
    a->freeBlocks = 1;
    allocListInsert(a, b);
    return a;
}

/* Free every chunk of nodes and the allocator itself. Accepts NULL; can't fail. */
void allocDestroy(Allocator *a)
{
    if (a == NULL)
        return;
    AllocChunk *c = a->chunks;
    while (c) {
        AllocChunk *next = c->next;
        objHeapFree(OBJ_HEAP_STORE, c);
        c = next;
    }
    objHeapFree(OBJ_HEAP_STORE, a);
}

/*
 * Find a free block of at least size bytes (one unit for 0), split off the
 * tail it does not need and return the head, marked used. The good-fit
 * search rounds the request up to its class boundary; when that finds
 * nothing, the request's own class may still hold a block that is big enough
 * but not big enough for every member of the class, so that one list is
 * scanned. Together the two make any request up to largestFree succeed.
 * Returns NULL when nothing fits or a split needs a node malloc cannot give;
 * the allocator is unchanged then.
 */
AllocBlock *allocGet(Allocator *a, uint64_t size)
{
    if (a == NULL || size > (a->capacity << ALLOC_UNIT_SHIFT))
        return NULL;
    uint64_t units = size == 0 ? 1 : (size + OBJ_ALLOC_ALIGN - 1) >> ALLOC_UNIT_SHIFT;

    unsigned fl, sl;
    allocMapping(allocRoundUp(units), &fl, &sl);
    AllocBlock *b = allocFindClass(a, fl, sl);
    if (b == NULL) {
        allocMapping(units, &fl, &sl);
        const ObjList *head = &a->heads[fl][sl];
        for (b = allocListFirst(head); b && b->size < units; b = allocListNext(head, b))
            ;
        if (b == NULL)
            return NULL;
    }

    if (b->size > units) {
        AllocBlock *rest = allocNodeGet(a);
        if (rest == NULL)
            return NULL;
        allocListRemove(a, b);
        rest->offset = b->offset + units;
        rest->size = b->size - units;
        rest->dirty = b->dirty > units ? b->dirty - units : 0;
        rest->isFree = 1;
        objListInsertBetween(&rest->phys, &b->phys, b->phys.next);
        b->size = units;
        if (b->dirty > units)
            b->dirty = units;
        /* b's old right neighbour was used (free neighbours never touch), so
         * the remainder needs no merging. */
        allocListInsert(a, rest);
    } else {
        allocListRemove(a, b);
        a->freeBlocks--;
    }
    b->isFree = 0;
    a->usedUnits += b->size;
    a->usedBlocks++;
    return b;
}

/*
 * Mark b free and merge it with a free left and/or right neighbour, so two
 * free blocks are never adjacent. Accepts NULL and ignores a block that is
 * already free (a double put, as long as its node has not been handed out
 * again); can't fail.
 */
void allocPut(Allocator *a, AllocBlock *b)
{
    if (a == NULL || b == NULL || b->isFree)
        return;
    a->usedUnits -= b->size;
    a->usedBlocks--;
    a->freeBlocks++;
    b->isFree = 1;
    b->dirty = b->size; /* whatever the object held is still there */

    /* A merged block's dirty prefix ends where its right part's does: only
     * the clean tail of the rightmost part stays known clean. */
    AllocBlock *left = allocPhysPrev(a, b);
    if (left && left->isFree) {
        allocListRemove(a, left);
        left->dirty = left->size + b->dirty;
        left->size += b->size;
        objListUnlink(&b->phys);
        allocNodePut(a, b);
        a->freeBlocks--;
        b = left;
    }
    AllocBlock *right = allocPhysNext(a, b);
    if (right && right->isFree) {
        allocListRemove(a, right);
        if (right->dirty)
            b->dirty = b->size + right->dirty;
        b->size += right->size;
        objListUnlink(&right->phys);
        allocNodePut(a, right);
        a->freeBlocks--;
    }
    allocListInsert(a, b);
}

/* Bytes at the start of allocated block b that may still hold an earlier
 * object's data (0: the whole block reads as zeros). Can't fail. */
uint64_t allocBlockDirtyBytes(const AllocBlock *b)
{
    return b->dirty << ALLOC_UNIT_SHIFT;
}

/*
 * Clear up to maxBytes (rounded down to whole units, at least one) at the
 * end of the dirty prefix of some free block, so that its prefix shrinks
 * and a later allocation of it has less to clear. base is the region's
 * first byte. Returns the bytes cleared, 0 when no free block is dirty.
 * The caller holds whatever lock covers the allocator: a free block's bytes
 * belong to nobody, and under that lock nobody can be handed them.
 */
uint64_t allocScrub(Allocator *a, uint8_t *base, uint64_t maxBytes)
{
    ObjListLink *l = a ? objListFirst(&a->dirtyFree) : NULL;
    if (l == NULL)
        return 0;
    AllocBlock *b = objListEntry(l, AllocBlock, dirtyLink);
    uint64_t units = maxBytes >> ALLOC_UNIT_SHIFT;
    if (units == 0)
        units = 1;
    if (units > b->dirty)
        units = b->dirty;
    b->dirty -= units;
    memset(base + ((b->offset + b->dirty) << ALLOC_UNIT_SHIFT), 0, units << ALLOC_UNIT_SHIFT);
    if (b->dirty == 0)
        objListUnlink(&b->dirtyLink);
    return units << ALLOC_UNIT_SHIFT;
}

/* Bytes of free blocks that may still hold an earlier object's data. Can't fail. */
uint64_t allocDirtyFreeBytes(const Allocator *a)
{
    uint64_t n = 0;
    const ObjListLink *l;

    if (a == NULL)
        return 0;
    objListForEach(&a->dirtyFree, l)
        n += objListEntry(l, AllocBlock, dirtyLink)->dirty;
    return n << ALLOC_UNIT_SHIFT;
}

/* Byte offset of b in the arena; a multiple of OBJ_ALLOC_ALIGN. Can't fail. */
uint64_t allocBlockOffset(const AllocBlock *b)
{
    return b->offset << ALLOC_UNIT_SHIFT;
}

/* Usable bytes of b: the request rounded up to whole units. Can't fail. */
uint64_t allocBlockSize(const AllocBlock *b)
{
    return b->size << ALLOC_UNIT_SHIFT;
}

/*
 * Fill st from the counters. The largest free block must be in the highest
 * non-empty class, and a larger class never holds a smaller block, so only
 * that one list is scanned. Can't fail.
 */
void allocGetStats(const Allocator *a, AllocStats *st)
{
    *st = (AllocStats){0};
    if (a == NULL)
        return;
    uint64_t largest = 0;
    if (a->flBitmap) {
        unsigned fl = allocMsb(a->flBitmap);
        unsigned sl = 31u - (unsigned)__builtin_clz(a->slBitmap[fl]);
        const ObjList *head = &a->heads[fl][sl];
        for (const AllocBlock *b = allocListFirst(head); b; b = allocListNext(head, b))
            if (b->size > largest)
                largest = b->size;
    }
    st->capacity = a->capacity << ALLOC_UNIT_SHIFT;
    st->used = a->usedUnits << ALLOC_UNIT_SHIFT;
    st->free = st->capacity - st->used;
    st->largestFree = largest << ALLOC_UNIT_SHIFT;
    st->blocks = a->usedBlocks;
    st->freeBlocks = a->freeBlocks;
}

/*
 * 0 if free block b is a member of the list of its class, -1 otherwise. The
 * walk is bounded by the number of free blocks so a corrupted, cyclic list
 * cannot hang the check.
 */
static int allocCheckInList(const Allocator *a, const AllocBlock *b, uint64_t bound)
{
    unsigned fl, sl;
    allocMapping(b->size, &fl, &sl);
    const ObjList *head = &a->heads[fl][sl];
    for (const AllocBlock *n = allocListFirst(head); n && bound;
         n = allocListNext(head, n), bound--)
        if (n == b)
            return 0;
    return -1;
}

/*
 * Verify every invariant: the physical list tiles [0, capacity) in order
 * with no gaps or overlaps and consistent back links; no two free blocks are
 * adjacent; no dirty prefix is longer than its block; each free block is in the list of its own
 * class; each list is well linked, holds only free blocks of its class, and its bits match; the
 * lists together hold exactly the free blocks; the counters match the walk.
 * Returns 0 when all hold, -1 at the first violation. Cost is
 * O(blocks + free blocks x list length): for tests and debug builds.
 */
int allocCheck(const Allocator *a)
{
    if (a == NULL || objListEmpty(&a->phys))
        return -1;

    /* Physical walk; it ends because offsets strictly increase up to capacity. */
    uint64_t end = 0, usedUnits = 0, usedBlocks = 0, freeBlocks = 0;
    const AllocBlock *prev = NULL;
    for (const AllocBlock *b = objListEntry(a->phys.next, AllocBlock, phys); b;
         prev = b, b = allocPhysNext(a, b)) {
        if (allocPhysPrev(a, b) != prev || b->offset != end || b->size == 0 ||
            b->size > a->capacity - end || b->dirty > b->size)
            return -1;
        end += b->size;
        if (b->isFree) {
            if (prev && prev->isFree)
                return -1;
            freeBlocks++;
        } else {
            usedUnits += b->size;
            usedBlocks++;
        }
    }
    if (end != a->capacity || usedUnits != a->usedUnits || usedBlocks != a->usedBlocks ||
        freeBlocks != a->freeBlocks)
        return -1;

    /* Lists and bitmaps. */
    uint64_t listed = 0;
    for (unsigned fl = 0; fl < ALLOC_FL_COUNT; fl++) {
        if (((a->flBitmap >> fl) & 1) != (a->slBitmap[fl] != 0))
            return -1;
        for (unsigned sl = 0; sl < ALLOC_SL_COUNT; sl++) {
            const ObjList *head = &a->heads[fl][sl];
            if (((a->slBitmap[fl] >> sl) & 1) != !objListEmpty(head))
                return -1;
            const ObjListLink *p = head;
            for (const AllocBlock *n = allocListFirst(head); n;
                 p = &n->free, n = allocListNext(head, n)) {
                unsigned f, s;
                if (++listed > freeBlocks || !n->isFree || n->free.prev != p || n->size == 0)
                    return -1;
                allocMapping(n->size, &f, &s);
                if (f != fl || s != sl)
                    return -1;
            }
        }
    }
    if (listed != freeBlocks)
        return -1;

    /* Every free block is listed; with the count above, the lists hold
     * exactly the free blocks. */
    for (const AllocBlock *b = objListEntry(a->phys.next, AllocBlock, phys); b;
         b = allocPhysNext(a, b))
        if (b->isFree && allocCheckInList(a, b, freeBlocks) != 0)
            return -1;
    return 0;
}
