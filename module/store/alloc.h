/*
 * alloc.h - the arena allocator: hands out 64-byte aligned ranges of one
 * contiguous region (the shared-memory arena) and takes them back.
 *
 * Two-level segregated fit (TLSF): free ranges sit in size-class lists found
 * through two bitmaps, so allocation and release are O(1); freed ranges
 * coalesce with free neighbours at once, so fragmentation stays bounded.
 * The allocator also knows which ranges were never handed out since the
 * region was zero-filled: each block carries a dirty prefix, so a caller
 * that must give out zeroed memory clears only what an earlier object used,
 * and allocScrub clears freed bytes ahead of time (a background worker
 * calls it), shrinking those prefixes.
 * Bookkeeping lives in ordinary heap memory, never inside the arena, so a
 * client that scribbles on the mapped arena cannot corrupt the allocator.
 * Pure C: no Redis headers, no locking (the object table's lock covers it).
 */
#ifndef OBJSTORE_ALLOC_H
#define OBJSTORE_ALLOC_H

#include <stdint.h>

#define OBJ_ALLOC_ALIGN 64

typedef struct Allocator Allocator;
typedef struct AllocBlock AllocBlock;

typedef struct AllocStats {
    uint64_t capacity;    /* bytes managed (rounded down to the alignment) */
    uint64_t used;        /* bytes in allocated blocks (after rounding) */
    uint64_t free;        /* capacity - used */
    uint64_t largestFree; /* the largest single request that would succeed now */
    uint64_t blocks;      /* allocated blocks */
    uint64_t freeBlocks;  /* free ranges (1 when empty: fragmentation measure) */
} AllocStats;

/* Manage [0, capacity). Returns NULL if capacity < OBJ_ALLOC_ALIGN or on OOM. */
Allocator *allocCreate(uint64_t capacity);
/* Frees all bookkeeping; outstanding blocks become invalid. Accepts NULL. */
void allocDestroy(Allocator *a);
/* Reserve size bytes (0 is allowed and takes one aligned unit). Returns NULL
 * when no free range is large enough; never aborts. */
AllocBlock *allocGet(Allocator *a, uint64_t size);
/* Return a block from allocGet; it merges with free neighbours. */
void allocPut(Allocator *a, AllocBlock *b);
uint64_t allocBlockOffset(const AllocBlock *b); /* 64-byte aligned */
uint64_t allocBlockSize(const AllocBlock *b);   /* rounded-up usable size */
/* Bytes at the start of an allocated block that may still hold an earlier
 * object's data; beyond them it reads as zeros (the region starts zeroed). */
uint64_t allocBlockDirtyBytes(const AllocBlock *b);
/* Zero up to maxBytes at the end of some free block's dirty prefix (base:
 * the region's first byte); the bytes cleared, 0 when nothing is dirty. */
uint64_t allocScrub(Allocator *a, uint8_t *base, uint64_t maxBytes);
/* Bytes of free blocks that may still hold an earlier object's data. */
uint64_t allocDirtyFreeBytes(const Allocator *a);
void allocGetStats(const Allocator *a, AllocStats *st);
/* Walk every block and list and check every invariant; 0 if consistent, -1
 * otherwise (for tests and DEBUG builds). */
int allocCheck(const Allocator *a);

#endif /* OBJSTORE_ALLOC_H */
