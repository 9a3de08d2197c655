/*
 * cmdtable.c - the one registration loop for OBJ.* commands (cmdtable.h).
 *
 * Object ids are ACL keys. On a plain server each id-naming command declares
 * its id as a key spec (argv[1]) or, for a list of ids, answers Redis's
 * key-position requests (getkeys-api); Redis then checks the user's key
 * permissions before the command runs, and ACL DRYRUN and COMMAND GETKEYS
 * see the ids. On a cluster-enabled server declared keys would make Redis
 * route every id to its slot's node (MOVED, CROSSSLOT), though objects live
 * on the node that holds them: there the commands declare no keys and a
 * dispatcher checks the ids by hand before the handler runs.
 */
#include <stdio.h>
#include <strings.h>

#include "acl.h"
#include "cmdtable.h"

#define CMD_MAX 32

/* The commands that go through cmdDispatch, found by name. */
static const ObjCommandDef *dispatched[CMD_MAX];
static size_t nDispatched;

/* The ids a command names: argv[1 .. 1+n). */
static int cmdIdCount(const ObjCommandDef *d, RedisModuleString **argv, int argc)
{
    if (d->idCount)
        return d->idCount(argv, argc);
    return argc >= 2 ? 1 : 0;
}

static const ObjCommandDef *cmdFind(RedisModuleString *name)
{
    const char *s = RedisModule_StringPtrLen(name, NULL);

    for (size_t i = 0; i < nDispatched; i++)
        if (!strcasecmp(dispatched[i]->name, s))
            return dispatched[i];
    return NULL;
}

/* Every command whose ids Redis cannot see as fixed key specs runs through
 * here: it answers key-position requests, checks ids by hand where Redis
 * does not, then runs the handler. */
static int cmdDispatch(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    const ObjCommandDef *d = cmdFind(argv[0]);

    if (!d) /* a renamed command: refuse rather than skip the check */
        return RedisModule_ReplyWithError(ctx, "ERR objstore cannot tell which command this is");
    int n = cmdIdCount(d, argv, argc);
    if (RedisModule_IsKeysPositionRequest(ctx)) {
        for (int i = 1; i <= n; i++)
            RedisModule_KeyAtPosWithFlags(ctx, i, d->idFlags);
        return REDISMODULE_OK;
    }
    if (objAclByHand() && objAclCheckIds(ctx, argv, 1, n, d->idFlags) == -1)
        return REDISMODULE_OK;
    return d->fn(ctx, argv, argc);
}

/* Create d's command: the handler itself, or cmdDispatch (with getkeys-api
 * for a list of ids on a plain server). Returns REDISMODULE_OK or _ERR. */
static int cmdCreate(RedisModuleCtx *ctx, const ObjCommandDef *d)
{
    int viaDispatch = d->idFlags && (objAclByHand() || d->idCount);
    char flags[128];

    if (!viaDispatch)
        return RedisModule_CreateCommand(ctx, d->name, d->fn, d->flags, 0, 0, 0);
    if (nDispatched == CMD_MAX)
        return REDISMODULE_ERR;
    snprintf(flags, sizeof(flags), "%s%s", d->flags,
             !objAclByHand() && d->idCount ? " getkeys-api" : "");
    if (RedisModule_CreateCommand(ctx, d->name, cmdDispatch, flags, 0, 0, 0) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    dispatched[nDispatched++] = d;
    return REDISMODULE_OK;
}

int objCommandTableRegister(RedisModuleCtx *ctx, const ObjCommandDef *defs, size_t n)
{
    objAclInit(ctx);
    for (size_t i = 0; i < n; i++) {
        const ObjCommandDef *d = &defs[i];
        if (cmdCreate(ctx, d) == REDISMODULE_ERR) {
            RedisModule_Log(ctx, "warning", "cannot register %s", d->name);
            return REDISMODULE_ERR;
        }
        /* argv[1] as a key: a plain server, one id per command. */
        RedisModuleCommandKeySpec idSpec[] = {
            {.flags = (uint64_t)d->idFlags,
             .begin_search_type = REDISMODULE_KSPEC_BS_INDEX,
             .bs.index.pos = 1,
             .find_keys_type = REDISMODULE_KSPEC_FK_RANGE,
             .fk.range = {.lastkey = 0, .keystep = 1, .limit = 0}},
            {0}};
        RedisModuleCommandInfo info = {
            .version = REDISMODULE_COMMAND_INFO_VERSION,
            .summary = d->summary,
            .complexity = d->complexity,
            .since = "1.0.0",
            .arity = d->arity,
            .args = d->args,
            .key_specs = d->idFlags && !d->idCount && !objAclByHand() ? idSpec : NULL,
        };
        RedisModuleCommand *cmd = RedisModule_GetCommand(ctx, d->name);
        if (!cmd || RedisModule_SetCommandInfo(cmd, &info) == REDISMODULE_ERR) {
            RedisModule_Log(ctx, "warning", "cannot document %s", d->name);
            return REDISMODULE_ERR;
        }
    }
    return REDISMODULE_OK;
}
