/*
 * heap.h - the module's counted heap: malloc-family wrappers that keep, per
 * kind of memory, how many bytes the C library handed out (its usable size,
 * rounding included) and how many blocks. The module's per-object structures
 * (the object table, its holders, the arena allocator's nodes, the directory
 * queue) live outside the arena and outside Redis's allocator, where
 * maxmemory never sees them; these counters are how OBJ.STATS shows them
 * (docs/commands.md#statistics). Thread-safe; no Redis headers.
 */
#ifndef OBJSTORE_HEAP_H
#define OBJSTORE_HEAP_H

#include <stddef.h>
#include <stdint.h>

typedef enum ObjHeapKind {
    OBJ_HEAP_STORE,     /* object table, holders, arena allocator nodes */
    OBJ_HEAP_DIRECTORY, /* publishes and unpublishes queued for the directory */
    OBJ_HEAP_KINDS
} ObjHeapKind;

/* malloc, calloc and realloc that count what they return under kind; NULL
 * when the C library has no memory (nothing counted then). A block must be
 * given back with objHeapFree (or objHeapRealloc) of the same kind. */
void *objHeapMalloc(ObjHeapKind kind, size_t size);
void *objHeapCalloc(ObjHeapKind kind, size_t nmemb, size_t size);
void *objHeapRealloc(ObjHeapKind kind, void *ptr, size_t size);
/* free, uncounting the block. Accepts NULL. Can't fail. */
void objHeapFree(ObjHeapKind kind, void *ptr);

/* Bytes and blocks of kind held now. Can't fail. */
uint64_t objHeapBytes(ObjHeapKind kind);
uint64_t objHeapBlocks(ObjHeapKind kind);

#endif /* OBJSTORE_HEAP_H */
