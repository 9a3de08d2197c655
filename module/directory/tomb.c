/*
 * tomb.c - an object's generation as a tombstone and the purge log carry it
 * ("size:meta_size:checksum", the checksum in 16 hex digits, as the meta
 * hash holds them), and a purge handed to the node. See versions.c and
 * docs/cluster.md, "Purge".
 */
#include "dirint.h"
#include "common/util.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* Writes the generation text of (size, metaSize, checksum) into out
 * (OBJ_DIR_GEN_MAX bytes) and returns its length. Can't fail. */
size_t dirGenFormat(char *out, uint64_t size, uint64_t metaSize, uint64_t checksum)
{
    int n = snprintf(out, OBJ_DIR_GEN_MAX, "%" PRIu64 ":%" PRIu64 ":%016" PRIx64, size, metaSize,
                     checksum);
    return (size_t)n;
}

/* Parses "size:meta_size:checksum" (decimal, decimal, 16 hex digits).
 * Returns 0 or -1. */
static int dirParseGen(const char *gen, size_t len, uint64_t *size, uint64_t *metaSize,
                       uint64_t *checksum)
{
    const char *c1 = memchr(gen, ':', len);
    const char *c2 = c1 != NULL ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - gen)) : NULL;
    if (c2 == NULL)
        return -1;
    const char *end = gen + len;
    if (utilParseU64(gen, (size_t)(c1 - gen), size) != 0 ||
        utilParseU64(c1 + 1, (size_t)(c2 - c1 - 1), metaSize) != 0 ||
        utilParseHex64(c2 + 1, (size_t)(end - c2 - 1), checksum) != 0)
        return -1;
    return 0;
}

/* Hands one purged copy to the node (DirConfig.purged) when gen parses;
 * counted. Can't fail. */
void dirApplyPurge(const char *id, size_t idLen, const char *gen, size_t genLen)
{
    uint64_t size, metaSize, checksum;
    if (dirParseGen(gen, genLen, &size, &metaSize, &checksum) != 0)
        return;
    pthread_mutex_lock(&dir.lock);
    dir.stats.purgesApplied++;
    pthread_mutex_unlock(&dir.lock);
    if (dir.cfg.purged != NULL)
        dir.cfg.purged(id, idLen, size, metaSize, checksum);
}
