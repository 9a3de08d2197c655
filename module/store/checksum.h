/*
 * checksum.h - the checksum of a sealed object: XXH3-64 over its data then
 * its metadata, which lie back to back in the arena. Computed at seal by the
 * command layer, and by the requesting side of a fetch to check a copy
 * against the owner's and the directory's figure. Pure C.
 */
#ifndef OBJSTORE_CHECKSUM_H
#define OBJSTORE_CHECKSUM_H

#include <stdint.h>

/* XXH3 from libxxhash. On x86-64 through the library's run-time dispatch,
 * which uses the widest vector unit the CPU has (AVX2, AVX-512): twice the
 * plain SSE2 build's speed on the machines we measured, same values. The
 * streaming checksum of a payload as it lands (transfer/framer.c) includes
 * this header too, so every checksum of an object is computed one way. */
#if defined(__x86_64__) && defined(__has_include)
#if __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#define OBJ_XXH3_DISPATCH 1
#endif
#endif
#ifndef OBJ_XXH3_DISPATCH
#include <xxhash.h>
#endif

#include "objtable.h"

/* The checksum of e's bytes in the arena mapped at arenaBase. Can't fail. */
uint64_t objChecksum(const uint8_t *arenaBase, const ObjEntry *e);

#endif /* OBJSTORE_CHECKSUM_H */
