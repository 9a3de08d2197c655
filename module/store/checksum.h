/*
 * checksum.h - the checksum of a sealed object: XXH3-64 over its data then
 * its metadata, which lie back to back in the arena. Computed at seal by the
 * command layer, and by the requesting side of a fetch to check a copy
 * against the owner's and the directory's figure. Pure C.
 */
#ifndef OBJSTORE_CHECKSUM_H
#define OBJSTORE_CHECKSUM_H

#include <stdint.h>

#include "objtable.h"

/* The checksum of e's bytes in the arena mapped at arenaBase. Can't fail. */
uint64_t objChecksum(const uint8_t *arenaBase, const ObjEntry *e);

#endif /* OBJSTORE_CHECKSUM_H */
