/*
 * args.h - the argument checks every command layer shares (commands.c,
 * remote.c, versions.c): an id's length, a TIMEOUT value, an option word.
 * Each check that fails replies BADARG itself, so a handler only returns.
 */
#ifndef OBJSTORE_ARGS_H
#define OBJSTORE_ARGS_H

#include <stddef.h>
#include <stdint.h>

#include "redismodule.h"

/* An id or name of 1 to OBJ_ID_MAX bytes (s, len); what names it in the
 * error ("object id", "name"). Returns 0, or -1 after replying "BADARG
 * <what> must be 1 to 512 bytes". */
int objArgIdLen(RedisModuleCtx *ctx, size_t len, const char *what);
/* The id argument arg into *id / *len, checked as objArgIdLen does with
 * "object id". Returns 0, or -1 after replying BADARG. */
int objArgId(RedisModuleCtx *ctx, RedisModuleString *arg, const char **id, size_t *len);
/* A TIMEOUT value in ms (s, len): 0 to OBJ_TIMEOUT_MAX_MS into *out.
 * Returns 0, or -1 after replying BADARG. */
int objArgTimeout(RedisModuleCtx *ctx, const char *s, size_t len, uint64_t *out);
/* Whether arg is the option word (case-insensitive). */
int objArgIs(RedisModuleString *arg, const char *word);

#endif /* OBJSTORE_ARGS_H */
