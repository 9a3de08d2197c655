/*
 * tomb.c - an object's generation as a tombstone and the purge log carry it
 * ("size:meta_size:checksum", the checksum in 16 hex digits, as the meta
 * hash holds them), and a purge handed to the node. See versions.c and
 * docs/cluster.md, "Purge".
 */
#include "dirint.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Writes the generation text of (size, metaSize, checksum) into out
 * (OBJ_DIR_GEN_MAX bytes) and returns its length. Can't fail. */
size_t dirGenFormat(char *out, uint64_t size, uint64_t metaSize, uint64_t checksum)
{
    int n = snprintf(out, OBJ_DIR_GEN_MAX, "%" PRIu64 ":%" PRIu64 ":%016" PRIx64, size, metaSize,
                     checksum);
    return (size_t)n;
}

/* Parses "size:meta_size:checksum" (checksum in hex). Returns 0 or -1. */
static int dirParseGen(const char *gen, size_t len, uint64_t *size, uint64_t *metaSize,
                       uint64_t *checksum)
{
    char buf[80];
    if (len >= sizeof(buf))
        return -1;
    memcpy(buf, gen, len);
    buf[len] = '\0';
    char *end;
    *size = strtoull(buf, &end, 10);
    if (*end != ':')
        return -1;
    *metaSize = strtoull(end + 1, &end, 10);
    if (*end != ':')
        return -1;
    *checksum = strtoull(end + 1, &end, 16);
    return *end == '\0' ? 0 : -1;
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

/* Whether a tombstone names op's generation while no primary re-created
 * it: the tombstone's GET reply equals op's size:meta_size:checksum and the
 * meta's checksum (read in the same round, before the publish) was nil. */
int dirTombNames(const redisReply *tomb, const redisReply *meta, const DirOp *op)
{
    if (tomb == NULL || tomb->type != REDIS_REPLY_STRING || meta == NULL ||
        meta->type != REDIS_REPLY_NIL)
        return 0;
    char gen[OBJ_DIR_GEN_MAX];
    size_t n = dirGenFormat(gen, op->size, op->metaSize, op->checksum);
    return tomb->len == n && memcmp(tomb->str, gen, n) == 0;
}
