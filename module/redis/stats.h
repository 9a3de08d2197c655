/*
 * stats.h - the one registry behind OBJ.STATS and INFO objstore. Each
 * subsystem adds a function that emits its fields (in a fixed order) to a
 * sink; OBJ.STATS replies them as a field/value array and INFO prints them
 * as its section, so the two always list the same fields in the same order.
 */
#ifndef OBJSTORE_STATS_H
#define OBJSTORE_STATS_H

#include <stdint.h>

#include "redismodule.h"

typedef struct ObjStatSink ObjStatSink;
typedef void ObjStatsFn(ObjStatSink *sink);

/* Emit one field. Main thread only, from an ObjStatsFn. */
void objStatNum(ObjStatSink *sink, const char *name, uint64_t value);
void objStatStr(ObjStatSink *sink, const char *name, const char *value);

/* Add a subsystem's fields after those added before. Returns
 * REDISMODULE_OK, or REDISMODULE_ERR when the registry is full. */
int objStatsAdd(ObjStatsFn *fn);

/* OBJ.STATS: every field as a field/value array. */
int ObjStats_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);
/* INFO objstore: every field in the module's section. */
void objStatsInfo(RedisModuleInfoCtx *ctx, int forCrashReport);

#endif /* OBJSTORE_STATS_H */
