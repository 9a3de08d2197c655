/*
 * heap.c - the counted heap (heap.h). The count is the allocator's usable
 * size of each block, read with malloc_usable_size when the block comes and
 * again when it goes, so it is what the process really spends on the block
 * (rounding included, the allocator's own headers not) and it cannot drift:
 * the same call answers the same size for the same live block.
 */
#include "heap.h"

#include <malloc.h>
#include <stdatomic.h>
#include <stdlib.h>

static _Atomic uint64_t heapBytes[OBJ_HEAP_KINDS];
static _Atomic uint64_t heapBlocks[OBJ_HEAP_KINDS];

/* Count block p (non-NULL) in or out of kind. Can't fail. */
static void heapCount(ObjHeapKind kind, void *p, int in)
{
    uint64_t n = malloc_usable_size(p);

    if (in) {
        atomic_fetch_add_explicit(&heapBytes[kind], n, memory_order_relaxed);
        atomic_fetch_add_explicit(&heapBlocks[kind], 1, memory_order_relaxed);
    } else {
        atomic_fetch_sub_explicit(&heapBytes[kind], n, memory_order_relaxed);
        atomic_fetch_sub_explicit(&heapBlocks[kind], 1, memory_order_relaxed);
    }
}

void *objHeapMalloc(ObjHeapKind kind, size_t size)
{
    void *p = malloc(size);

    if (p)
        heapCount(kind, p, 1);
    return p;
}

void *objHeapCalloc(ObjHeapKind kind, size_t nmemb, size_t size)
{
    void *p = calloc(nmemb, size);

    if (p)
        heapCount(kind, p, 1);
    return p;
}

/* The old block is uncounted only once realloc has succeeded: on failure it
 * stays the caller's, counted as before. */
void *objHeapRealloc(ObjHeapKind kind, void *ptr, size_t size)
{
    uint64_t old = ptr ? malloc_usable_size(ptr) : 0;
    void *p = realloc(ptr, size);

    if (!p)
        return NULL;
    if (ptr) {
        atomic_fetch_sub_explicit(&heapBytes[kind], old, memory_order_relaxed);
        atomic_fetch_sub_explicit(&heapBlocks[kind], 1, memory_order_relaxed);
    }
    heapCount(kind, p, 1);
    return p;
}

void objHeapFree(ObjHeapKind kind, void *ptr)
{
    if (!ptr)
        return;
    heapCount(kind, ptr, 0);
    free(ptr);
}

uint64_t objHeapBytes(ObjHeapKind kind)
{
    return atomic_load_explicit(&heapBytes[kind], memory_order_relaxed);
}

uint64_t objHeapBlocks(ObjHeapKind kind)
{
    return atomic_load_explicit(&heapBlocks[kind], memory_order_relaxed);
}
