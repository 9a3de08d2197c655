/*
 * door.c - the entry point of objstore-rdma.so, the RDMA door (Redis
 * clients over RDMA on Redis 7.0, which has no RDMA of its own): its
 * settings (objstore-rdma.*), the checks that must pass before anything
 * touches the server's internals (the server's name and version through
 * the module API, then every symbol of serversyms.h), the probe conntype.c
 * compares with struct redisServer, and the start. conntype.c does the
 * rest against Redis's own headers; the two meet only through the plain
 * header conntype.h. docs/rdma.md says how to load it.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "redismodule.h"
#include "common/util.h"
#include "conntype.h"
#include "door.h"

#define DOOR_MODULE_NAME    "objstore-rdma"
#define DOOR_MODULE_VERSION 1
#define DOOR_PORT_OFFSET    30000 /* port -1: the Redis port + this */

/* The settings, as configured (objstore-rdma.* or module arguments). */
static struct {
    char bind[64];
    char device[64];
    long long port;   /* 0: closed; -1: the Redis port + DOOR_PORT_OFFSET */
    long long rxSize; /* RX buffer of an authenticated client */
} doorCfg;

/* ---- settings ---------------------------------------------------------------------------- */

typedef struct DoorConfigDef {
    const char *name;
    int numeric;
    void *dst; /* char[len], or long long */
    size_t len;
    long long def, min, max;
    int memory; /* numeric with a unit (1mb) */
} DoorConfigDef;

static DoorConfigDef doorConfigDefs[] = {
    {"bind", 0, doorCfg.bind, sizeof(doorCfg.bind), 0, 0, 0, 0},
    {"device", 0, doorCfg.device, sizeof(doorCfg.device), 0, 0, 0, 0},
    {"port", 1, &doorCfg.port, 0, 0, -1, 65535, 0},
    {"rx-size", 1, &doorCfg.rxSize, 0, 1LL << 20, 64 * 1024, 16LL << 20, 1},
};
#define DOOR_N_CONFIG (sizeof(doorConfigDefs) / sizeof(doorConfigDefs[0]))

static long long doorGetNumeric(const char *name, void *privdata)
{
    return *(long long *)((DoorConfigDef *)privdata)->dst;
}

static int doorSetNumeric(const char *name, long long val, void *privdata, RedisModuleString **err)
{
    *(long long *)((DoorConfigDef *)privdata)->dst = val;
    return REDISMODULE_OK;
}

static RedisModuleString *doorGetString(const char *name, void *privdata)
{
    /* Redis copies the value and never frees what a getter returns: keep
     * one string per setting and replace it on each call. */
    static RedisModuleString *cached[DOOR_N_CONFIG];
    DoorConfigDef *d = privdata;
    size_t i = (size_t)(d - doorConfigDefs);

    if (cached[i])
        RedisModule_FreeString(NULL, cached[i]);
    cached[i] = RedisModule_CreateString(NULL, d->dst, strlen(d->dst));
    return cached[i];
}

static int doorSetString(const char *name, RedisModuleString *val, void *privdata,
                         RedisModuleString **err)
{
    DoorConfigDef *d = privdata;
    size_t len;
    const char *s = RedisModule_StringPtrLen(val, &len);

    if (len >= d->len) {
        *err = RedisModule_CreateString(NULL, "value too long", 14);
        return REDISMODULE_ERR;
    }
    memcpy(d->dst, s, len);
    ((char *)d->dst)[len] = '\0';
    return REDISMODULE_OK;
}

/* doorParseArgs: apply `name value` module arguments. Returns
 * REDISMODULE_ERR (logged) on an unknown name, a missing value or a bad one. */
static int doorParseArgs(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    for (int i = 0; i < argc; i += 2) {
        const char *name = RedisModule_StringPtrLen(argv[i], NULL);
        DoorConfigDef *d = NULL;
        for (size_t j = 0; j < DOOR_N_CONFIG; j++)
            if (!strcasecmp(doorConfigDefs[j].name, name))
                d = &doorConfigDefs[j];
        if (!d) {
            RedisModule_Log(ctx, "warning", "unknown module argument '%s'", name);
            return REDISMODULE_ERR;
        }
        if (i + 1 >= argc) {
            RedisModule_Log(ctx, "warning", "module argument '%s' has no value", name);
            return REDISMODULE_ERR;
        }
        size_t vlen;
        const char *val = RedisModule_StringPtrLen(argv[i + 1], &vlen);
        if (!d->numeric) {
            if (vlen >= d->len) {
                RedisModule_Log(ctx, "warning", "module argument %s: value too long", name);
                return REDISMODULE_ERR;
            }
            memcpy(d->dst, val, vlen);
            ((char *)d->dst)[vlen] = '\0';
            continue;
        }
        uint64_t v;
        int neg = vlen > 1 && val[0] == '-';
        int bad = d->memory ? utilParseSize(val + neg, vlen - neg, &v)
                            : utilParseU64(val + neg, vlen - neg, &v);
        long long sv = neg ? -(long long)v : (long long)v;
        if (bad || v > (1ULL << 62) || sv < d->min || sv > d->max) {
            RedisModule_Log(ctx, "warning", "module argument %s '%s' must be from %lld to %lld",
                            name, val, d->min, d->max);
            return REDISMODULE_ERR;
        }
        *(long long *)d->dst = sv;
    }
    return REDISMODULE_OK;
}

/* doorConfigInit: defaults, then module arguments, then objstore-rdma.*
 * lines of the config file. Every setting is immutable (the listener and
 * the RX buffers are made once). Returns REDISMODULE_OK or _ERR (logged). */
static int doorConfigInit(RedisModuleCtx *ctx, RedisModuleString **argv, int argc)
{
    doorCfg.bind[0] = doorCfg.device[0] = '\0';
    doorCfg.port = 0;
    doorCfg.rxSize = 1LL << 20;
    if (doorParseArgs(ctx, argv, argc) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    for (size_t i = 0; i < DOOR_N_CONFIG; i++) {
        DoorConfigDef *d = &doorConfigDefs[i];
        unsigned int flags = REDISMODULE_CONFIG_IMMUTABLE;
        int rc;
        if (d->numeric) {
            flags |= d->memory ? REDISMODULE_CONFIG_MEMORY : 0;
            rc =
                RedisModule_RegisterNumericConfig(ctx, d->name, *(long long *)d->dst, flags, d->min,
                                                  d->max, doorGetNumeric, doorSetNumeric, NULL, d);
        } else {
            rc = RedisModule_RegisterStringConfig(ctx, d->name, d->dst, flags, doorGetString,
                                                  doorSetString, NULL, d);
        }
        if (rc == REDISMODULE_ERR) {
            RedisModule_Log(ctx, "warning", "cannot register config %s.%s", DOOR_MODULE_NAME,
                            d->name);
            return REDISMODULE_ERR;
        }
    }
    if (RedisModule_LoadConfigs(ctx) == REDISMODULE_ERR) {
        RedisModule_Log(ctx, "warning", "invalid %s.* setting in the config file",
                        DOOR_MODULE_NAME);
        return REDISMODULE_ERR;
    }
    return REDISMODULE_OK;
}

/* ---- what the module API says of the running server -------------------------------------- */

/* doorConfigReply: CONFIG GET name's value as a C string in buf (""
 * when the server has no such setting). Can't fail. */
static void doorConfigReply(RedisModuleCtx *ctx, const char *name, char *buf, size_t bufLen)
{
    RedisModuleCallReply *r = RedisModule_Call(ctx, "CONFIG", "cc", "GET", name);
    size_t len = 0;
    const char *s = NULL;

    buf[0] = '\0';
    if (r && RedisModule_CallReplyType(r) == REDISMODULE_REPLY_ARRAY &&
        RedisModule_CallReplyLength(r) == 2)
        s = RedisModule_CallReplyStringPtr(RedisModule_CallReplyArrayElement(r, 1), &len);
    if (s && len < bufLen) {
        memcpy(buf, s, len);
        buf[len] = '\0';
    }
    if (r)
        RedisModule_FreeCallReply(r);
}

/* doorConfigNum: one numeric configuration value of the server (yes/no as
 * 1/0), or `fallback` when it cannot be read (the probe then fails). */
static long long doorConfigNum(RedisModuleCtx *ctx, const char *name, long long fallback)
{
    char buf[32], *end;

    doorConfigReply(ctx, name, buf, sizeof(buf));
    if (!strcmp(buf, "yes"))
        return 1;
    if (!strcmp(buf, "no"))
        return 0;
    if (!buf[0])
        return fallback;
    long long n = strtoll(buf, &end, 10);
    return *end == '\0' ? n : fallback;
}

/* doorCheckIdentity: the running server is Redis of the version
 * conntype.c was built against, and exports every symbol of serversyms.h.
 * Reads only through the module API and dlsym: nothing of the server's
 * internals is touched before this passes. Returns 0, or -1 with the
 * reason in err. */
static int doorCheckIdentity(RedisModuleCtx *ctx, char *err, size_t errLen)
{
    static const char *const syms[] = {
#define DOOR_SERVER_SYM(name) #name,
#include "serversyms.h"
#undef DOOR_SERVER_SYM
    };
    char name[32] = "redis", version[32] = "?";
    RedisModuleServerInfoData *info = RedisModule_GetServerInfo(ctx, "server");

    if (info) {
        /* Valkey names itself (server_name, valkey_version); Redis does not. */
        const char *n = RedisModule_ServerInfoGetFieldC(info, "server_name");
        const char *vv = RedisModule_ServerInfoGetFieldC(info, "valkey_version");
        const char *rv = RedisModule_ServerInfoGetFieldC(info, "redis_version");
        if (n)
            snprintf(name, sizeof(name), "%s", n);
        else if (vv)
            snprintf(name, sizeof(name), "valkey");
        snprintf(version, sizeof(version), "%s", vv ? vv : rv ? rv : "?");
        RedisModule_FreeServerInfo(ctx, info);
    }
    if (strcasecmp(name, "redis") || strcmp(version, doorTypeBuiltFor())) {
        snprintf(err, errLen,
                 "this server is %s %s; objstore-rdma.so was built against the internals of "
                 "Redis %s and runs in no other server (rebuild it against this server's "
                 "source, or use the server's built-in RDMA: docs/rdma.md)",
                 name, version, doorTypeBuiltFor());
        return -1;
    }
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        if (!dlsym(RTLD_DEFAULT, syms[i])) {
            snprintf(err, errLen,
                     "this Redis %s does not export %s, which the RDMA door needs (a server "
                     "built without -rdynamic?)",
                     version, syms[i]);
            return -1;
        }
    }
    return 0;
}

/* doorResolve: the settings conntype.c gets. A door configured the way
 * it was before it became a module of its own (objstore.rdma-client-port
 * and rdma-rx-size on objstore.so, loaded first) takes those; bind and
 * device default to objstore's rdma-bind and rdma-device. Returns 0, or -1
 * with why the door stays closed in err. */
static int doorResolve(RedisModuleCtx *ctx, DoorSettings *s, char *err, size_t errLen)
{
    char buf[64];

    if (doorCfg.port == 0) {
        long long legacy = doorConfigNum(ctx, "objstore.rdma-client-port", 0);
        if (legacy != 0) {
            doorCfg.port = legacy;
            doorCfg.rxSize = doorConfigNum(ctx, "objstore.rdma-rx-size", doorCfg.rxSize);
            RedisModule_Log(ctx, "notice",
                            "taking port %lld and rx-size %lld from objstore.rdma-client-port "
                            "and objstore.rdma-rx-size (deprecated: set %s.port)",
                            legacy, doorCfg.rxSize, DOOR_MODULE_NAME);
        }
    }
    if (doorCfg.port == -1) {
        long long redisPort = doorConfigNum(ctx, "port", 0);
        doorCfg.port = redisPort > 0 && redisPort + DOOR_PORT_OFFSET <= 65535
                           ? redisPort + DOOR_PORT_OFFSET
                           : 0;
        if (doorCfg.port == 0) {
            snprintf(err, errLen, "port -1: the Redis port + %d is out of range; set %s.port",
                     DOOR_PORT_OFFSET, DOOR_MODULE_NAME);
            return -1;
        }
    }
    if (doorCfg.port == 0) {
        snprintf(err, errLen, "%s.port is 0", DOOR_MODULE_NAME);
        return -1;
    }
    if (!doorCfg.bind[0]) {
        doorConfigReply(ctx, "objstore.rdma-bind", buf, sizeof(buf));
        snprintf(doorCfg.bind, sizeof(doorCfg.bind), "%s", buf);
    }
    if (!doorCfg.bind[0]) {
        snprintf(err, errLen, "set %s.bind to the address of the RDMA device", DOOR_MODULE_NAME);
        return -1;
    }
    if (!doorCfg.device[0]) {
        doorConfigReply(ctx, "objstore.rdma-device", buf, sizeof(buf));
        snprintf(doorCfg.device, sizeof(doorCfg.device), "%s", buf);
    }
    *s = (DoorSettings){.bind = doorCfg.bind,
                        .port = (int)doorCfg.port,
                        .device = doorCfg.device,
                        .rxSize = (uint32_t)doorCfg.rxSize};
    return 0;
}

/* ---- the module -------------------------------------------------------------------------- */

static void doorOnShutdown(RedisModuleCtx *ctx, RedisModuleEvent e, uint64_t sub, void *data)
{
    doorStop();
}

__attribute__((visibility("default"))) int RedisModule_OnLoad(RedisModuleCtx *ctx,
                                                              RedisModuleString **argv, int argc)
{
    char err[512];
    DoorSettings ds;

    if (RedisModule_Init(ctx, DOOR_MODULE_NAME, DOOR_MODULE_VERSION, REDISMODULE_APIVER_1) ==
        REDISMODULE_ERR)
        return REDISMODULE_ERR;
    /* Before the settings: on another server even registering configs is
     * fine, but the refusal should be the one line the user reads. */
    if (doorCheckIdentity(ctx, err, sizeof(err)) < 0) {
        RedisModule_Log(ctx, "warning", "refusing to load: %s", err);
        return REDISMODULE_ERR;
    }
    if (doorConfigInit(ctx, argv, argc) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    DoorTypeConfig cfg = {
        .serverVersion = RedisModule_GetServerVersion(),
        .probe =
            {
                .hz = doorConfigNum(ctx, "hz", -1),
                .port = doorConfigNum(ctx, "port", -1),
                .ioThreads = doorConfigNum(ctx, "io-threads", -1),
                .protectedMode = doorConfigNum(ctx, "protected-mode", -1),
                .maxclients = doorConfigNum(ctx, "maxclients", -1),
                .lazyfreeUserFlush = doorConfigNum(ctx, "lazyfree-lazy-user-flush", -1),
                .acllogMaxLen = doorConfigNum(ctx, "acllog-max-len", -1),
                .pubsubshardWhenDown =
                    doorConfigNum(ctx, "cluster-allow-pubsubshard-when-down", -1),
            },
    };
    if (doorTypeCheck(&cfg, err, sizeof(err)) < 0) {
        RedisModule_Log(ctx, "warning", "refusing to load: %s", err);
        return REDISMODULE_ERR;
    }
    if (RedisModule_ExportSharedAPI(ctx, DOOR_STATS_API, (void *)doorGetStats) == REDISMODULE_ERR ||
        RedisModule_SubscribeToServerEvent(ctx, RedisModuleEvent_Shutdown, doorOnShutdown) ==
            REDISMODULE_ERR) {
        RedisModule_Log(ctx, "warning", "cannot export the door's counters or watch shutdown");
        return REDISMODULE_ERR;
    }
    /* From here on the module stays loaded: a door that cannot open (no
     * device, port 0) logs why and the server runs on without it. */
    if (doorResolve(ctx, &ds, err, sizeof(err)) < 0) {
        RedisModule_Log(ctx, "warning", "RDMA clients are off: %s", err);
        return REDISMODULE_OK;
    }
    cfg.settings = ds;
    if (doorTypeStart(&cfg, err, sizeof(err)) < 0)
        RedisModule_Log(ctx, "warning", "RDMA clients are off: %s", err);
    return REDISMODULE_OK;
}

/* The connection type's code must stay while a client may hold it: refuse. */
__attribute__((visibility("default"))) int RedisModule_OnUnload(RedisModuleCtx *ctx)
{
    RedisModule_Log(ctx, "warning", "objstore-rdma cannot be unloaded; restart the server");
    return REDISMODULE_ERR;
}
