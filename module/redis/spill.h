/*
 * spill.h - the spill tier seen from Redis (spill.c): clients that wait
 * while cold objects are moved to disk to make room, or while a spilled
 * object comes back; the tier's settings, start-up and statistics.
 * docs/tiers.md describes the design.
 */
#ifndef OBJSTORE_SPILL_H
#define OBJSTORE_SPILL_H

#include <stdint.h>

#include "redismodule.h"
#include "reply.h"
#include "stats.h"
#include "store/objtable.h"

/* Open the tier when spill-dir is set (and hook it into the object table).
 * REDISMODULE_ERR, logged, when the settings or the directory are unusable. */
int spillStart(RedisModuleCtx *ctx);
/* Stop the worker and remove the tier's files (at shutdown). */
void spillStop(void);
/* How a waiting OBJ.PUT or OBJ.CREATE ends once e is created for its
 * client: the command's own finish (data is NULL for a CREATE, dataLen its
 * size). Returns REDISMODULE_OK. */
typedef int SpillFinish(RedisModuleCtx *ctx, ObjEntry *e, const char *data, size_t dataLen,
                        const char *meta, size_t metaLen, long long waitMs);
/* An OBJ.PUT (data set) or OBJ.CREATE (data NULL) of size bytes found the
 * arena full: block the client while cold objects are spilled, then call
 * finish from the reply (with the object's replica count want set, and
 * waitMs 0: a reply cannot block again). Returns 0 when it took the command over, -1 when it
 * cannot (tier off, or the client cannot wait): the caller answers OOM. */
int spillBlockCreate(RedisModuleCtx *ctx, RedisModuleString *id, RedisModuleString *data,
                     uint64_t size, RedisModuleString *meta, uint32_t want, SpillFinish *finish);
/* OBJ.GET / OBJ.PIN of a spilled object: block the client while it is read
 * back and checked, then reply as kind. Always replies or blocks; returns
 * REDISMODULE_OK. */
int spillBlockRestore(RedisModuleCtx *ctx, const char *id, size_t idLen, ObjReplyKind kind);
/* Count an OBJ.GET / OBJ.PIN of a sealed object: served from memory or not. */
void spillCountRead(int fromMemory);
/* The tier's name for OBJ.INFO: memory, spilling, spilled, restoring. */
const char *spillTierName(ObjTier tier);
/* The tier's fields of OBJ.STATS / INFO objstore (an ObjStatsFn). */
void spillStats(ObjStatSink *sink);

#endif /* OBJSTORE_SPILL_H */
