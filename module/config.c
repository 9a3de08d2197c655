/*
 * config.c - the node's settings, from module arguments and module configs.
 *
 * `--loadmodule objstore.so memory 1gb arena-dir /dev/shm` sets the
 * defaults; `objstore.memory` lines in redis.conf (applied by
 * RedisModule_LoadConfigs) override them; `CONFIG GET objstore.*` shows the
 * result. Settings that size or place the arena are immutable: changing them
 * at run time would mean moving every object.
 */
#include <stdio.h>
#include <string.h>

#include "node.h"
#include "util.h"

#define OBJ_DEFAULT_MEMORY (1LL << 30)
#define OBJ_MIN_MEMORY     (1LL << 20)
#define OBJ_MAX_MEMORY     (1LL << 42)

static long long configGetMemory(const char *name, void *privdata)
{
    return objNode.cfg.memory;
}

static int configSetMemory(const char *name, long long val, void *privdata, RedisModuleString **err)
{
    objNode.cfg.memory = val;
    return REDISMODULE_OK;
}

static RedisModuleString *configGetArenaDir(const char *name, void *privdata)
{
    static RedisModuleString *cached; /* Redis does not free what a getter returns */
    if (cached)
        RedisModule_FreeString(NULL, cached);
    cached = RedisModule_CreateString(NULL, objNode.cfg.arenaDir, strlen(objNode.cfg.arenaDir));
    return cached;
}

static int configSetArenaDir(const char *name, RedisModuleString *val, void *privdata,
                             RedisModuleString **err)
{
    size_t len;
    const char *s = RedisModule_StringPtrLen(val, &len);

    if (len == 0 || len >= sizeof(objNode.cfg.arenaDir) || s[0] != '/') {
        *err = RedisModule_CreateString(NULL, "arena-dir must be an absolute path", 34);
        return REDISMODULE_ERR;
    }
    memcpy(objNode.cfg.arenaDir, s, len);
    objNode.cfg.arenaDir[len] = '\0';
    return REDISMODULE_OK;
}

/* Apply `name value` module arguments to objNode.cfg. Returns
 * REDISMODULE_ERR (logged) on an unknown name, a missing value or a bad one. */
static int configParseArgs(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    for (int i = 0; i < argc; i += 2) {
        size_t nlen, vlen;
        const char *name = RedisModule_StringPtrLen(argv[i], &nlen);
        if (i + 1 >= argc) {
            RedisModule_Log(ctx, "warning", "module argument '%s' has no value", name);
            return REDISMODULE_ERR;
        }
        const char *val = RedisModule_StringPtrLen(argv[i + 1], &vlen);
        if (!strcasecmp(name, "memory")) {
            uint64_t v;
            if (utilParseSize(val, vlen, &v) == -1 || (long long)v < OBJ_MIN_MEMORY ||
                (long long)v > OBJ_MAX_MEMORY) {
                RedisModule_Log(ctx, "warning", "memory '%s' must be a size from 1mb to 4tb", val);
                return REDISMODULE_ERR;
            }
            objNode.cfg.memory = (long long)v;
        } else if (!strcasecmp(name, "arena-dir")) {
            RedisModuleString *err = NULL;
            if (configSetArenaDir(name, argv[i + 1], NULL, &err) == REDISMODULE_ERR) {
                RedisModule_Log(ctx, "warning", "%s", RedisModule_StringPtrLen(err, NULL));
                RedisModule_FreeString(NULL, err);
                return REDISMODULE_ERR;
            }
        } else {
            RedisModule_Log(ctx, "warning", "unknown module argument '%s'", name);
            return REDISMODULE_ERR;
        }
    }
    return REDISMODULE_OK;
}

int objConfigInit(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    objNode.cfg.memory = OBJ_DEFAULT_MEMORY;
    snprintf(objNode.cfg.arenaDir, sizeof(objNode.cfg.arenaDir), "/dev/shm");
    if (configParseArgs(ctx, argv, argc) == REDISMODULE_ERR)
        return REDISMODULE_ERR;

    char dir[sizeof(objNode.cfg.arenaDir)];
    memcpy(dir, objNode.cfg.arenaDir, sizeof(dir));
    if (RedisModule_RegisterNumericConfig(ctx, "memory", objNode.cfg.memory,
                                          REDISMODULE_CONFIG_IMMUTABLE | REDISMODULE_CONFIG_MEMORY,
                                          OBJ_MIN_MEMORY, OBJ_MAX_MEMORY, configGetMemory,
                                          configSetMemory, NULL, NULL) == REDISMODULE_ERR ||
        RedisModule_RegisterStringConfig(ctx, "arena-dir", dir, REDISMODULE_CONFIG_IMMUTABLE,
                                         configGetArenaDir, configSetArenaDir, NULL,
                                         NULL) == REDISMODULE_ERR) {
        RedisModule_Log(ctx, "warning", "cannot register module configs");
        return REDISMODULE_ERR;
    }
    if (RedisModule_LoadConfigs(ctx) == REDISMODULE_ERR) {
        RedisModule_Log(ctx, "warning", "invalid objstore.* setting in the config");
        return REDISMODULE_ERR;
    }
    return REDISMODULE_OK;
}
