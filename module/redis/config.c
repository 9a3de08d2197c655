/*
 * config.c - the node's settings, from module arguments and module configs.
 *
 * `--loadmodule objstore.so memory 1gb transfer-port 17001` sets the
 * defaults; `objstore.<name>` lines in redis.conf (applied by
 * RedisModule_LoadConfigs) override them; `CONFIG GET objstore.*` shows the
 * result, except for secrets (see configGetString). One table describes every setting, so module
 * arguments and configs can never disagree. Settings that size the arena or identify the node are
 * immutable: changing them at run time would mean moving every object or re-registering under
 * another name.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "node.h"
#include "remote.h"
#include "config.h"
#include "common/util.h"

#define CFG_STRING  1
#define CFG_NUMERIC 2
#define CFG_BOOL    3 /* yes/no, kept as 0/1 in a long long */

typedef struct ConfigDef {
    const char *name;
    int kind;
    unsigned int flags; /* REDISMODULE_CONFIG_* */
    void *dst;          /* char[len], or long long (numeric, bool) */
    size_t len;
    long long def, min, max; /* numeric */
    const char *sdef;        /* string default */
    void (*apply)(void);     /* after a run-time change, or NULL */
} ConfigDef;

static void applyReadMin(void)
{
    objRemoteConfigChanged();
}

#define IMM REDISMODULE_CONFIG_IMMUTABLE
#define MEM REDISMODULE_CONFIG_MEMORY
#define STR(n, field, fl, d)                                                                       \
    {                                                                                              \
        n, CFG_STRING, fl, objNode.cfg.field, sizeof(objNode.cfg.field), 0, 0, 0, d, NULL          \
    }
#define NUM(n, field, fl, d, lo, hi, ap)                                                           \
    {                                                                                              \
        n, CFG_NUMERIC, fl, &objNode.cfg.field, 0, d, lo, hi, NULL, ap                             \
    }
#define BOOL(n, field, fl, d)                                                                      \
    {                                                                                              \
        n, CFG_BOOL, fl, &objNode.cfg.field, 0, d, 0, 1, NULL, NULL                                \
    }

static ConfigDef configDefs[] = {
    NUM("memory", memory, IMM | MEM, 1LL << 30, 1LL << 20, 1LL << 42, NULL),
    STR("arena-dir", arenaDir, IMM, "/dev/shm"),
    BOOL("prefault", prefault, IMM, 0),
    STR("node-name", nodeName, IMM, ""),
    STR("directory", directory, IMM, ""),
    STR("directory-password", directoryPassword, IMM | REDISMODULE_CONFIG_SENSITIVE, ""),
    STR("transfer-bind", transferBind, IMM, "127.0.0.1"),
    NUM("transfer-port", transferPort, IMM, -1, -1, 65535, NULL),
    STR("announce-addr", announceAddr, IMM, ""),
    STR("cluster-secret", clusterSecret, IMM | REDISMODULE_CONFIG_SENSITIVE, ""),
    NUM("fetch-timeout", fetchTimeoutMs, 0, 30000, 1, 3600000, NULL),
    NUM("heartbeat", heartbeatMs, IMM, 1000, 50, 60000, NULL),
    NUM("node-ttl", nodeTtlMs, IMM, 5000, 200, 600000, NULL),
    STR("rdma-bind", rdmaBind, IMM, ""),
    NUM("rdma-port", rdmaPort, IMM, 0, -1, 65535, NULL),
    STR("rdma-device", rdmaDevice, IMM, ""),
    NUM("rdma-read-min", rdmaReadMin, MEM, 32 * 1024, 0, 1LL << 30, applyReadMin),
    NUM("upload-slots", uploadSlots, IMM, 1, 0, 4096, NULL),
    NUM("rdma-client-port", rdmaClientPort, IMM, 0, -1, 65535, NULL),
    NUM("rdma-rx-size", rdmaRxSize, IMM | MEM, 1LL << 20, 64 * 1024, 16LL << 20, NULL),
};
#define N_CONFIG (sizeof(configDefs) / sizeof(configDefs[0]))

static ConfigDef *configFind(const char *name)
{
    for (size_t i = 0; i < N_CONFIG; i++)
        if (!strcasecmp(configDefs[i].name, name))
            return &configDefs[i];
    return NULL;
}

static long long configGetNumeric(const char *name, void *privdata)
{
    return *(long long *)((ConfigDef *)privdata)->dst;
}

static int configSetNumeric(const char *name, long long val, void *privdata,
                            RedisModuleString **err)
{
    *(long long *)((ConfigDef *)privdata)->dst = val;
    return REDISMODULE_OK;
}

static int configGetBool(const char *name, void *privdata)
{
    return *(long long *)((ConfigDef *)privdata)->dst != 0;
}

static int configSetBool(const char *name, int val, void *privdata, RedisModuleString **err)
{
    *(long long *)((ConfigDef *)privdata)->dst = val != 0;
    return REDISMODULE_OK;
}

/*
 * Secrets (REDISMODULE_CONFIG_SENSITIVE settings) never come back from
 * CONFIG GET: Redis 7.0's sensitive flag only keeps them out of logs. The
 * getter cannot tell CONFIG GET from CONFIG REWRITE, which must see the real
 * value or it would write an empty secret into redis.conf; so a command
 * filter notes, before each command runs, whether it is a CONFIG REWRITE,
 * and only then does the getter reveal a secret. Everything else (CONFIG GET
 * directly, inside MULTI/EXEC, from a module) sees "". A CONFIG REWRITE
 * queued inside MULTI therefore writes an empty secret line; run it alone.
 */
static int configRevealSecrets; /* main thread only */

/* Command filter: is the command about to run CONFIG REWRITE? Can't fail. */
static void configFilter(RedisModuleCommandFilterCtx *fctx)
{
    size_t l0, l1;

    configRevealSecrets = 0;
    if (RedisModule_CommandFilterArgsCount(fctx) != 2)
        return;
    const char *a0 = RedisModule_StringPtrLen(RedisModule_CommandFilterArgGet(fctx, 0), &l0);
    const char *a1 = RedisModule_StringPtrLen(RedisModule_CommandFilterArgGet(fctx, 1), &l1);
    configRevealSecrets =
        l0 == 6 && !strncasecmp(a0, "config", 6) && l1 == 7 && !strncasecmp(a1, "rewrite", 7);
}

static RedisModuleString *configGetString(const char *name, void *privdata)
{
    /* Redis copies the value and never frees what a getter returns: keep
     * one string per setting and replace it on each call. */
    static RedisModuleString *cached[N_CONFIG];
    ConfigDef *d = privdata;
    size_t i = (size_t)(d - configDefs);
    const char *v = (d->flags & REDISMODULE_CONFIG_SENSITIVE) && !configRevealSecrets ? "" : d->dst;

    if (cached[i])
        RedisModule_FreeString(NULL, cached[i]);
    cached[i] = RedisModule_CreateString(NULL, v, strlen(v));
    return cached[i];
}

/* Store a string setting; arena-dir must be absolute. Returns 0 or -1 with
 * a message in *why. */
static int configStoreString(ConfigDef *d, const char *s, size_t len, const char **why)
{
    if (len >= d->len) {
        *why = "value too long";
        return -1;
    }
    if (d->dst == objNode.cfg.arenaDir && (len == 0 || s[0] != '/')) {
        *why = "arena-dir must be an absolute path";
        return -1;
    }
    memcpy(d->dst, s, len);
    ((char *)d->dst)[len] = '\0';
    return 0;
}

static int configSetString(const char *name, RedisModuleString *val, void *privdata,
                           RedisModuleString **err)
{
    size_t len;
    const char *s = RedisModule_StringPtrLen(val, &len), *why;

    if (configStoreString(privdata, s, len, &why) == -1) {
        *err = RedisModule_CreateString(NULL, why, strlen(why));
        return REDISMODULE_ERR;
    }
    return REDISMODULE_OK;
}

static int configApply(RedisModuleCtx *ctx, void *privdata, RedisModuleString **err)
{
    ConfigDef *d = privdata;
    if (d->apply)
        d->apply();
    return REDISMODULE_OK;
}

/* Apply `name value` module arguments. Returns REDISMODULE_ERR (logged) on
 * an unknown name, a missing value or a bad one. */
static int configParseArgs(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    for (int i = 0; i < argc; i += 2) {
        size_t vlen;
        const char *name = RedisModule_StringPtrLen(argv[i], NULL), *why = "";
        ConfigDef *d = configFind(name);
        if (!d) {
            RedisModule_Log(ctx, "warning", "unknown module argument '%s'", name);
            return REDISMODULE_ERR;
        }
        if (i + 1 >= argc) {
            RedisModule_Log(ctx, "warning", "module argument '%s' has no value", name);
            return REDISMODULE_ERR;
        }
        const char *val = RedisModule_StringPtrLen(argv[i + 1], &vlen);
        if (d->kind == CFG_NUMERIC) {
            uint64_t v;
            int neg = vlen > 1 && val[0] == '-';
            int bad = (d->flags & MEM) ? utilParseSize(val + neg, vlen - neg, &v)
                                       : utilParseU64(val + neg, vlen - neg, &v);
            long long sv = neg ? -(long long)v : (long long)v;
            if (bad || sv < d->min || sv > d->max) {
                RedisModule_Log(ctx, "warning", "module argument %s '%s' must be from %lld to %lld",
                                name, val, d->min, d->max);
                return REDISMODULE_ERR;
            }
            *(long long *)d->dst = sv;
        } else if (d->kind == CFG_BOOL) {
            if (!strcasecmp(val, "yes") || !strcasecmp(val, "no")) {
                *(long long *)d->dst = !strcasecmp(val, "yes");
            } else {
                RedisModule_Log(ctx, "warning", "module argument %s '%s' must be yes or no", name,
                                val);
                return REDISMODULE_ERR;
            }
        } else if (configStoreString(d, val, vlen, &why) == -1) {
            RedisModule_Log(ctx, "warning", "module argument %s: %s", name, why);
            return REDISMODULE_ERR;
        }
    }
    return REDISMODULE_OK;
}

int objConfigInit(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    for (size_t i = 0; i < N_CONFIG; i++) {
        ConfigDef *d = &configDefs[i];
        if (d->kind != CFG_STRING)
            *(long long *)d->dst = d->def;
        else
            snprintf(d->dst, d->len, "%s", d->sdef);
    }
    if (configParseArgs(ctx, argv, argc) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    for (size_t i = 0; i < N_CONFIG; i++) {
        ConfigDef *d = &configDefs[i];
        int rc;
        if (d->kind == CFG_NUMERIC) {
            rc = RedisModule_RegisterNumericConfig(ctx, d->name, *(long long *)d->dst, d->flags,
                                                   d->min, d->max, configGetNumeric,
                                                   configSetNumeric, configApply, d);
        } else if (d->kind == CFG_BOOL) {
            rc = RedisModule_RegisterBoolConfig(ctx, d->name, *(long long *)d->dst != 0, d->flags,
                                                configGetBool, configSetBool, configApply, d);
        } else {
            char def[512];
            snprintf(def, sizeof(def), "%s", (char *)d->dst);
            rc = RedisModule_RegisterStringConfig(ctx, d->name, def, d->flags, configGetString,
                                                  configSetString, configApply, d);
        }
        if (rc == REDISMODULE_ERR) {
            RedisModule_Log(ctx, "warning", "cannot register config objstore.%s", d->name);
            return REDISMODULE_ERR;
        }
    }
    if (!RedisModule_RegisterCommandFilter(ctx, configFilter, REDISMODULE_CMDFILTER_NOSELF)) {
        RedisModule_Log(ctx, "warning", "cannot register the command filter that hides secrets");
        return REDISMODULE_ERR;
    }
    if (RedisModule_LoadConfigs(ctx) == REDISMODULE_ERR) {
        RedisModule_Log(ctx, "warning", "invalid objstore.* setting in the config file");
        return REDISMODULE_ERR;
    }
    return REDISMODULE_OK;
}
