/*
 * stats.c - the statistics registry (stats.h): a list of subsystem
 * functions, and two sinks that turn what they emit into an OBJ.STATS reply
 * or an INFO section.
 */
#include <string.h>

#include "stats.h"

#define OBJ_STATS_MAX_SOURCES 8

struct ObjStatSink {
    RedisModuleCtx *reply;    /* OBJ.STATS, or NULL */
    RedisModuleInfoCtx *info; /* INFO, or NULL */
    long elements;            /* replies added (OBJ.STATS) */
};

static ObjStatsFn *statsSources[OBJ_STATS_MAX_SOURCES];
static size_t statsCount;

int objStatsAdd(ObjStatsFn *fn)
{
    if (statsCount == OBJ_STATS_MAX_SOURCES)
        return REDISMODULE_ERR;
    statsSources[statsCount++] = fn;
    return REDISMODULE_OK;
}

void objStatNum(ObjStatSink *sink, const char *name, uint64_t value)
{
    if (sink->reply) {
        RedisModule_ReplyWithSimpleString(sink->reply, name);
        RedisModule_ReplyWithLongLong(sink->reply, (long long)value);
        sink->elements += 2;
    } else {
        RedisModule_InfoAddFieldULongLong(sink->info, (char *)name, value);
    }
}

void objStatStr(ObjStatSink *sink, const char *name, const char *value)
{
    if (sink->reply) {
        RedisModule_ReplyWithSimpleString(sink->reply, name);
        RedisModule_ReplyWithStringBuffer(sink->reply, value, strlen(value));
        sink->elements += 2;
    } else {
        RedisModule_InfoAddFieldCString(sink->info, (char *)name, (char *)value);
    }
}

int ObjStats_RedisCommand(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    ObjStatSink sink = {.reply = ctx};

    if (argc != 1)
        return RedisModule_WrongArity(ctx);
    RedisModule_ReplyWithArray(ctx, REDISMODULE_POSTPONED_ARRAY_LEN);
    for (size_t i = 0; i < statsCount; i++)
        statsSources[i](&sink);
    RedisModule_ReplySetArrayLength(ctx, sink.elements);
    return REDISMODULE_OK;
}

void objStatsInfo(RedisModuleInfoCtx *ctx, int forCrashReport)
{
    ObjStatSink sink = {.info = ctx};

    RedisModule_InfoAddSection(ctx, "");
    for (size_t i = 0; i < statsCount; i++)
        statsSources[i](&sink);
}
