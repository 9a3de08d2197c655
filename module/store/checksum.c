/*
 * checksum.c - XXH3-64 of an object's data then metadata (see checksum.h).
 */
#include "checksum.h"

uint64_t objChecksum(const uint8_t *arenaBase, const ObjEntry *e)
{
    return XXH3_64bits(arenaBase + e->offset, e->dataSize + e->metaSize);
}
