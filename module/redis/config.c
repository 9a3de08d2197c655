/*
 * config.c - the node's settings, from module arguments and module configs.
 *
 * `--loadmodule objstore.so memory 1gb transfer-port 17001` sets the
 * defaults; `objstore.<name>` lines in redis.conf (applied by
 * RedisModule_LoadConfigs) override them; `CONFIG GET objstore.*` shows the
 * result, except for secrets (see configGetString). Secrets are refused as module arguments, which
 * MODULE LIST and ps show: they come from redis.conf, or from a file named by a `*-file` setting
 * and read once at load (configLoadSecretFiles). One table describes every setting, so module
 * arguments and configs can never disagree. Settings that size the arena or identify the node are
 * immutable: changing them at run time would mean moving every object or re-registering under
 * another name.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "node.h"
#include "remote.h"
#include "config.h"
#include "limits.h"
#include "common/util.h"
#include "replica/replica.h"

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

/* A secret that can come from a file: the `<secret>-file` setting names it. */
typedef struct SecretFile {
    const char *secret; /* the setting the file fills */
    char path[512];
    int used; /* the secret came from the file: never shown, not even to CONFIG REWRITE */
} SecretFile;

static SecretFile secretFiles[] = {{"cluster-secret", "", 0}, {"directory-password", "", 0}};
#define N_SECRET_FILES (sizeof(secretFiles) / sizeof(secretFiles[0]))

static void applyReadMin(void)
{
    objRemoteConfigChanged();
}

static void applyMaxObjects(void)
{
    objLimitsApply();
}

static void applyRepair(void)
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

#define FILESTR(n, i)                                                                              \
    {                                                                                              \
        n, CFG_STRING, IMM, secretFiles[i].path, sizeof(secretFiles[i].path), 0, 0, 0, "", NULL    \
    }

static ConfigDef configDefs[] = {
    NUM("memory", memory, IMM | MEM, 1LL << 30, 1LL << 20, 1LL << 42, NULL),
    STR("arena-dir", arenaDir, IMM, "/dev/shm"),
    STR("arena-mode", arenaMode, IMM, "0600"),
    BOOL("prefault", prefault, IMM, 0),
    BOOL("scrub", scrub, 0, 1),
    STR("node-name", nodeName, IMM, ""),
    STR("directory", directory, IMM, ""),
    STR("directory-password", directoryPassword, IMM | REDISMODULE_CONFIG_SENSITIVE, ""),
    STR("transfer-bind", transferBind, IMM, "127.0.0.1"),
    NUM("transfer-port", transferPort, IMM, -1, -1, 65535, NULL),
    STR("announce-addr", announceAddr, IMM, ""),
    STR("cluster-secret", clusterSecret, IMM | REDISMODULE_CONFIG_SENSITIVE, ""),
    BOOL("transfer-encrypt", transferEncrypt, IMM, 0),
    FILESTR("cluster-secret-file", 0),
    FILESTR("directory-password-file", 1),
    NUM("fetch-timeout", fetchTimeoutMs, 0, 30000, 1, 3600000, NULL),
    NUM("heartbeat", heartbeatMs, IMM, 1000, 50, 60000, NULL),
    NUM("node-ttl", nodeTtlMs, IMM, 5000, 200, 600000, NULL),
    NUM("purge-tombstone-ttl", purgeTombstoneTtlS, IMM, 86400, 60, 30 * 86400, NULL),
    STR("rdma-bind", rdmaBind, IMM, ""),
    NUM("rdma-port", rdmaPort, IMM, 0, -1, 65535, NULL),
    STR("rdma-device", rdmaDevice, IMM, ""),
    NUM("rdma-read-min", rdmaReadMin, MEM, 32 * 1024, 0, 1LL << 30, applyReadMin),
    NUM("upload-slots", uploadSlots, IMM, 1, 0, 4096, NULL),
    NUM("rdma-client-port", rdmaClientPort, IMM, 0, -1, 65535, NULL),
    NUM("rdma-rx-size", rdmaRxSize, IMM | MEM, 1LL << 20, 64 * 1024, 16LL << 20, NULL),
    NUM("max-objects", maxObjects, 0, -1, -1, 1LL << 40, applyMaxObjects),
    STR("spill-dir", spillDir, IMM, ""),
    NUM("spill-max", spillMax, IMM | MEM, 0, 0, 1LL << 50, NULL),
    STR("spill-policy", spillPolicy, IMM, "hot"),
    NUM("spill-serve-budget", spillServe, IMM | MEM, 64LL << 20, 1LL << 20, 1LL << 42, NULL),
    NUM("replicas", replicas, 0, 1, 1, OBJ_REPLICAS_MAX, NULL),
    NUM("replicas-max", replicasMax, 0, 8, 1, OBJ_REPLICAS_MAX, NULL),
    NUM("replica-timeout", replicaTimeoutMs, 0, 5000, 0, 3600000, NULL),
    STR("node-label", nodeLabel, IMM, ""),
    NUM("repair-concurrency", repairConcurrency, 0, 2, 1, 64, applyRepair),
    NUM("repair-interval", repairIntervalMs, 0, 10000, 100, 3600000, applyRepair),
    BOOL("drain-on-shutdown", drainOnShutdown, 0, 0),
    NUM("drain-timeout", drainTimeoutMs, 0, 60000, 0, 3600000, NULL),
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

/* Did secret setting `name` come from its file? (Then CONFIG REWRITE must not
 * copy it into redis.conf: it stays in the file.) */
static int configFromFile(const char *name)
{
    for (size_t i = 0; i < N_SECRET_FILES; i++)
        if (secretFiles[i].used && !strcmp(secretFiles[i].secret, name))
            return 1;
    return 0;
}

static RedisModuleString *configGetString(const char *name, void *privdata)
{
    /* Redis copies the value and never frees what a getter returns: keep
     * one string per setting and replace it on each call. */
    static RedisModuleString *cached[N_CONFIG];
    ConfigDef *d = privdata;
    size_t i = (size_t)(d - configDefs);
    int hide = (d->flags & REDISMODULE_CONFIG_SENSITIVE) &&
               (!configRevealSecrets || configFromFile(d->name));
    const char *v = hide ? "" : d->dst;

    if (cached[i])
        RedisModule_FreeString(NULL, cached[i]);
    cached[i] = RedisModule_CreateString(NULL, v, strlen(v));
    return cached[i];
}

/*
 * Whether s (len bytes) is an arena-mode: octal, the owner's read-write bits set,
 * nothing for others and nothing executable (0600, 0640 or 0660). Why so few: the
 * arena is every object of every client; the group bits are the ACL mask of a
 * directory with a default ACL (docs/security.md).
 */
static int configArenaModeValid(const char *s, size_t len)
{
    unsigned mode = 0;

    if (len < 3 || len > 4)
        return 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '7')
            return 0;
        mode = mode * 8 + (unsigned)(s[i] - '0');
    }
    return (mode & 0700) == 0600 && (mode & ~0660u) == 0 && (mode & 0060) != 0020;
}

/* Store a string setting; arena-dir must be absolute, arena-mode one of the
 * modes configArenaModeValid allows. Returns 0 or -1 with a message in *why. */
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
    if (d->dst == objNode.cfg.arenaMode && !configArenaModeValid(s, len)) {
        *why = "arena-mode must be 0600, 0640 or 0660";
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
        if (d->flags & REDISMODULE_CONFIG_SENSITIVE) {
            RedisModule_Log(ctx, "warning",
                            "module argument %s refused: module arguments show in MODULE LIST "
                            "and in ps. Put `objstore.%s <value>` in the config file, or the "
                            "secret alone in a file of mode 0600 named by `%s-file <path>` (a "
                            "module argument or config file setting)",
                            d->name, d->name, d->name);
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

/* Read the secret in path into out (outLen bytes with its NUL): the whole
 * file but one trailing newline. The file must be a regular file that other
 * users cannot access nor its group write; *groupReadable tells whether its
 * group may read it (worth a warning). Returns 0, or -1 with a message in why. */
static int configReadSecretFile(const char *path, char *out, size_t outLen, int *groupReadable,
                                char *why, size_t whyLen)
{
    struct stat st;
    char buf[1024];
    size_t n = 0;
    ssize_t got = 1;
    int rc = -1, fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd == -1) {
        snprintf(why, whyLen, "cannot open it: %s", strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) == -1 || !S_ISREG(st.st_mode)) {
        snprintf(why, whyLen, "it is not a regular file");
        goto out_close;
    }
    if (st.st_mode & (S_IRWXO | S_IWGRP)) {
        snprintf(why, whyLen, "other users can reach it (mode %04o): chmod 600 it",
                 (unsigned)(st.st_mode & 07777));
        goto out_close;
    }
    *groupReadable = (st.st_mode & S_IRGRP) != 0;
    while (n < sizeof(buf) && (got = read(fd, buf + n, sizeof(buf) - n)) > 0)
        n += (size_t)got;
    if (got < 0) {
        snprintf(why, whyLen, "cannot read it: %s", strerror(errno));
        goto out_close;
    }
    close(fd);
    if (n > 0 && buf[n - 1] == '\n')
        n--;
    if (n > 0 && buf[n - 1] == '\r')
        n--;
    if (n == 0)
        snprintf(why, whyLen, "it is empty");
    else if (n >= outLen)
        snprintf(why, whyLen, "the secret is longer than %zu bytes", outLen - 1);
    else if (memchr(buf, '\0', n))
        snprintf(why, whyLen, "the secret holds a NUL byte");
    else {
        memcpy(out, buf, n);
        out[n] = '\0';
        rc = 0;
    }
    memset(buf, 0, sizeof(buf));
    return rc;

out_close:
    close(fd);
    return -1;
}

/* Fill each secret whose `-file` setting is set from its file, once, at load.
 * Returns REDISMODULE_ERR (logged) when a file is unusable or the secret is
 * also set directly. */
static int configLoadSecretFiles(RedisModuleCtx *ctx)
{
    for (size_t i = 0; i < N_SECRET_FILES; i++) {
        SecretFile *f = &secretFiles[i];
        ConfigDef *d = configFind(f->secret);
        char why[256];
        int groupReadable = 0;
        if (!f->path[0])
            continue;
        if (((char *)d->dst)[0]) {
            RedisModule_Log(ctx, "warning", "set objstore.%s or %s-file, not both", f->secret,
                            f->secret);
            return REDISMODULE_ERR;
        }
        if (configReadSecretFile(f->path, d->dst, d->len, &groupReadable, why, sizeof(why)) == -1) {
            RedisModule_Log(ctx, "warning", "%s-file %s: %s", f->secret, f->path, why);
            return REDISMODULE_ERR;
        }
        f->used = 1;
        if (groupReadable)
            RedisModule_Log(ctx, "warning",
                            "%s-file %s is readable by its group: chmod 600 it unless the group "
                            "is meant to know the secret",
                            f->secret, f->path);
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
    return configLoadSecretFiles(ctx);
}
