/*
 * reply.c - replies shared by the command handlers and the waiters: error
 * replies by their code word (common/errwords.h), an object's bytes or
 * zero-copy view once it is sealed (OBJ.GET, OBJ.PIN, directly or after a
 * wait), the error for a table status, and the refusal to wait where Redis
 * cannot block a client.
 */
#include <stdarg.h>
#include <stdio.h>

#include "node.h"
#include "reply.h"

/* Holder of the short pins taken while a reply copies an object's bytes. */
#define OBJ_HOLDER_REPLY (OBJ_HOLDER_INTERNAL | 1)

/* See reply.h. */
const char *objErrWordName(ObjErrWord w)
{
#define REPLY_WORD_NAME(word, code, pyClass, origin, meaning) [OBJ_EW_##word] = #word,
    static const char *const names[OBJ_EW_COUNT] = {OBJ_ERR_WORDS(REPLY_WORD_NAME)};
#undef REPLY_WORD_NAME

    return (unsigned)w < OBJ_EW_COUNT ? names[w] : "ERR";
}

/* "<word> <message>" into buf (size > 16 bytes) from a va_list. Can't fail. */
static void errFormatV(char *buf, size_t size, ObjErrWord word, const char *fmt, va_list ap)
{
    int n = snprintf(buf, size, "%s ", objErrWordName(word));

    vsnprintf(buf + n, size - (size_t)n, fmt, ap);
}

/* See reply.h. */
void objErrFormat(char *buf, size_t size, ObjErrWord word, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    errFormatV(buf, size, word, fmt, ap);
    va_end(ap);
}

/* See reply.h. */
int objReplyError(RedisModuleCtx *ctx, ObjErrWord word, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    errFormatV(msg, sizeof(msg), word, fmt, ap);
    va_end(ap);
    return RedisModule_ReplyWithError(ctx, msg);
}

/* See reply.h. */
int objReplyStatus(RedisModuleCtx *ctx, ObjStatus st, const char *what)
{
    switch (st) {
        case OBJ_ST_OK:
            return RedisModule_ReplyWithSimpleString(ctx, "OK");
        case OBJ_ST_DEFERRED:
            return RedisModule_ReplyWithSimpleString(ctx, "DEFERRED");
        case OBJ_ST_EXISTS:
            return objReplyError(ctx, OBJ_EW_EXISTS, "an object with this id exists");
        case OBJ_ST_NOTFOUND:
            return objReplyError(ctx, OBJ_EW_NOTFOUND, "no such object");
        case OBJ_ST_OOM: {
            AllocStats as;
            objTableAllocStats(objNode.table, &as);
            return objReplyError(ctx, OBJ_EW_OOM,
                                 "arena full: %llu of %llu bytes free, largest free range %llu; "
                                 "delete objects or raise objstore.memory",
                                 (unsigned long long)as.free, (unsigned long long)as.capacity,
                                 (unsigned long long)as.largestFree);
        }
        case OBJ_ST_LIMIT: {
            ObjTableStats ts;
            objTableGetStats(objNode.table, &ts);
            return objReplyError(ctx, OBJ_EW_OOM,
                                 "object limit reached: the node holds %llu objects (max-objects); "
                                 "delete objects or raise objstore.max-objects",
                                 (unsigned long long)ts.maxObjects);
        }
        case OBJ_ST_AMBIGUOUS:
            return objReplyError(ctx, OBJ_EW_WRONGSTATE,
                                 "this connection pins more than one object under this id (it was "
                                 "deleted and made again): name the pin with GEN or OFFSET");
        case OBJ_ST_WRONGSTATE:
        default:
            return objReplyError(ctx, OBJ_EW_WRONGSTATE, "%s", what);
    }
}

int objReplyObject(RedisModuleCtx *ctx, const char *id, size_t idLen, ObjReplyKind kind)
{
    ObjTable *t = objNode.table;
    uint64_t holder = kind == OBJ_REPLY_PIN ? RedisModule_GetClientId(ctx) : OBJ_HOLDER_REPLY;

    objTableLock(t);
    ObjEntry *e = objTableFind(t, id, idLen);
    if (!e) {
        objTableUnlock(t);
        return objReplyStatus(ctx, OBJ_ST_NOTFOUND, "");
    }
    if (e->state != OBJ_SEALED) {
        objTableUnlock(t);
        return objReplyError(ctx, OBJ_EW_NOTSEALED, "the object is not sealed yet");
    }
    ObjStatus st = objTablePin(t, e, holder);
    objTableUnlock(t);
    if (st == OBJ_ST_SPILLED) /* moved out between a waiter's wake-up and its reply */
        return objReplyError(ctx, OBJ_EW_TRYAGAIN,
                             "the object was moved to the spill tier meanwhile; ask again");
    if (st != OBJ_ST_OK)
        return objReplyStatus(ctx, st, "cannot pin the object");
    return objReplyPinned(ctx, e, kind, holder);
}

/* See reply.h. */
int objReplyPinned(RedisModuleCtx *ctx, ObjEntry *e, ObjReplyKind kind, uint64_t holder)
{
    ObjTable *t = objNode.table;
    const char *data = (const char *)objNode.arena.base + e->offset;

    if (kind == OBJ_REPLY_PIN) {
        objNode.cnt.pins++;
        RedisModule_ReplyWithArray(ctx, 8);
        RedisModule_ReplyWithSimpleString(ctx, "offset");
        RedisModule_ReplyWithLongLong(ctx, (long long)e->offset);
        RedisModule_ReplyWithSimpleString(ctx, "size");
        RedisModule_ReplyWithLongLong(ctx, (long long)e->dataSize);
        RedisModule_ReplyWithSimpleString(ctx, "meta");
        RedisModule_ReplyWithStringBuffer(ctx, data + e->dataSize, e->metaSize);
        RedisModule_ReplyWithSimpleString(ctx, "gen");
        RedisModule_ReplyWithLongLong(ctx, (long long)e->gen);
        return REDISMODULE_OK; /* the pin stays: OBJ.RELEASE drops it */
    }
    objNode.cnt.gets++;
    if (kind == OBJ_REPLY_GET_META) {
        RedisModule_ReplyWithArray(ctx, 2);
        RedisModule_ReplyWithStringBuffer(ctx, data, e->dataSize);
        RedisModule_ReplyWithStringBuffer(ctx, data + e->dataSize, e->metaSize);
    } else {
        RedisModule_ReplyWithStringBuffer(ctx, data, e->dataSize);
    }
    objTableLock(t);
    objTableUnpin(t, e, holder);
    objTableUnlock(t);
    return REDISMODULE_OK;
}

/* See reply.h. */
int objReplyIfCannotWait(RedisModuleCtx *ctx, const char *command)
{
    if (!(RedisModule_GetContextFlags(ctx) &
          (REDISMODULE_CTX_FLAGS_MULTI | REDISMODULE_CTX_FLAGS_LUA |
           REDISMODULE_CTX_FLAGS_DENY_BLOCKING)))
        return 0;
    objReplyError(ctx, OBJ_EW_WRONGSTATE, "%s cannot wait inside MULTI or a script", command);
    return 1;
}
