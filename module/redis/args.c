/*
 * args.c - the argument checks the command layers share (args.h), written
 * once so that every command refuses a bad id or TIMEOUT with the same words.
 */
#include <string.h>
#include <strings.h>

#include "args.h"
#include "reply.h"
#include "common/util.h"
#include "store/objtable.h"

/* See args.h. */
int objArgIdLen(RedisModuleCtx *ctx, size_t len, const char *what)
{
    if (len >= 1 && len <= OBJ_ID_MAX)
        return 0;
    objReplyError(ctx, OBJ_EW_BADARG, "%s must be 1 to %d bytes", what, OBJ_ID_MAX);
    return -1;
}

/* See args.h. */
int objArgId(RedisModuleCtx *ctx, RedisModuleString *arg, const char **id, size_t *len)
{
    *id = RedisModule_StringPtrLen(arg, len);
    return objArgIdLen(ctx, *len, "object id");
}

/* See args.h. */
int objArgTimeout(RedisModuleCtx *ctx, const char *s, size_t len, uint64_t *out)
{
    if (utilParseTimeoutMs(s, len, out) == 0)
        return 0;
    objReplyError(ctx, OBJ_EW_BADARG, "TIMEOUT must be an integer from 0 to %llu (ms)",
                  (unsigned long long)OBJ_TIMEOUT_MAX_MS);
    return -1;
}

/* See args.h. */
int objArgIs(RedisModuleString *arg, const char *word)
{
    size_t len;
    const char *s = RedisModule_StringPtrLen(arg, &len);

    return len == strlen(word) && strncasecmp(s, word, len) == 0;
}
