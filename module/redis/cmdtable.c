/*
 * cmdtable.c - the one registration loop for OBJ.* commands (cmdtable.h).
 */
#include "cmdtable.h"

int objCommandTableRegister(RedisModuleCtx *ctx, const ObjCommandDef *defs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const ObjCommandDef *d = &defs[i];
        if (RedisModule_CreateCommand(ctx, d->name, d->fn, d->flags, 0, 0, 0) == REDISMODULE_ERR) {
            RedisModule_Log(ctx, "warning", "cannot register %s", d->name);
            return REDISMODULE_ERR;
        }
        RedisModuleCommandInfo info = {
            .version = REDISMODULE_COMMAND_INFO_VERSION,
            .summary = d->summary,
            .complexity = d->complexity,
            .since = "1.0.0",
            .arity = d->arity,
            .args = d->args,
        };
        RedisModuleCommand *cmd = RedisModule_GetCommand(ctx, d->name);
        if (!cmd || RedisModule_SetCommandInfo(cmd, &info) == REDISMODULE_ERR) {
            RedisModule_Log(ctx, "warning", "cannot document %s", d->name);
            return REDISMODULE_ERR;
        }
    }
    return REDISMODULE_OK;
}
