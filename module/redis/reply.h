/*
 * reply.h - replies shared by the command handlers (commands.c, remote.c,
 * versions.c, spill.c) and the waiters (waiters.c): error replies, which
 * start with a code word of common/errwords.h, and an object's bytes.
 */
#ifndef OBJSTORE_REPLY_H
#define OBJSTORE_REPLY_H

#include <stddef.h>

#include "redismodule.h"
#include "common/errwords.h"
#include "store/objtable.h"

/* Reply the error "<word> <message>" (printf-style message; a longer one is
 * cut at 511 bytes). Returns REDISMODULE_OK. */
int objReplyError(RedisModuleCtx *ctx, ObjErrWord word, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The code word of w ("BADARG" for OBJ_EW_BADARG). Can't fail. */
const char *objErrWordName(ObjErrWord w);
/* Write the error "<word> <message>" into buf (size bytes, cut to fit), for
 * an error answered later. Can't fail. */
void objErrFormat(char *buf, size_t size, ObjErrWord word, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

typedef enum ObjReplyKind { OBJ_REPLY_GET, OBJ_REPLY_GET_META, OBJ_REPLY_PIN } ObjReplyKind;

/* Reply for OBJ.GET / OBJ.PIN once the object is sealed; used directly and
 * by waiters after a wake-up. Missing -> NOTFOUND, unsealed -> NOTSEALED.
 * Returns REDISMODULE_OK. */
int objReplyObject(RedisModuleCtx *ctx, const char *id, size_t idLen, ObjReplyKind kind);
/* Reply for OBJ.GET / OBJ.PIN from e, which holder has pinned (in memory):
 * a GET drops that pin after copying, a PIN keeps it. Returns REDISMODULE_OK. */
int objReplyPinned(RedisModuleCtx *ctx, ObjEntry *e, ObjReplyKind kind, uint64_t holder);
/* The reply for a table status: OK, DEFERRED, or the error with its code
 * word (what completes WRONGSTATE). Returns REDISMODULE_OK. */
int objReplyStatus(RedisModuleCtx *ctx, ObjStatus st, const char *what);
/* Where Redis cannot block this client (MULTI, a script, a context that
 * denies blocking), reply "WRONGSTATE <command> cannot wait inside MULTI or
 * a script" and return 1; else reply nothing and return 0. */
int objReplyIfCannotWait(RedisModuleCtx *ctx, const char *command);

#endif /* OBJSTORE_REPLY_H */
