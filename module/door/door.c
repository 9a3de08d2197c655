/*
 * door.c - the module side of the RDMA door (Redis clients over RDMA, on
 * rdma-client-port): reads through the module API what conntype.c must
 * check before it opens (the running server's version and a probe of its
 * configuration), then opens it. conntype.c does the rest against Redis's
 * own headers; the two meet only through the plain header conntype.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redismodule.h"
#include "conntype.h"
#include "door.h"

/* doorConfigNum: one numeric configuration value of the server (yes/no as
 * 1/0), or `fallback` when it cannot be read (the probe then fails). */
static long long doorConfigNum(RedisModuleCtx *ctx, const char *name, long long fallback)
{
    RedisModuleCallReply *r = RedisModule_Call(ctx, "CONFIG", "cc", "GET", name);
    long long v = fallback;
    size_t len = 0;
    const char *s = NULL;

    if (r && RedisModule_CallReplyType(r) == REDISMODULE_REPLY_ARRAY &&
        RedisModule_CallReplyLength(r) == 2)
        s = RedisModule_CallReplyStringPtr(RedisModule_CallReplyArrayElement(r, 1), &len);
    if (s && len == 3 && !strncmp(s, "yes", 3)) {
        v = 1;
    } else if (s && len == 2 && !strncmp(s, "no", 2)) {
        v = 0;
    } else if (s && len > 0 && len < 32) {
        char buf[32], *end;
        memcpy(buf, s, len);
        buf[len] = '\0';
        long long n = strtoll(buf, &end, 10);
        if (*end == '\0')
            v = n;
    }
    if (r)
        RedisModule_FreeCallReply(r);
    return v;
}

void doorStart(RedisModuleCtx *ctx, const DoorSettings *s)
{
    char err[512];

    if (s->port <= 0)
        return;
    DoorTypeConfig cfg = {
        .settings = *s,
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
    if (doorTypeStart(&cfg, err, sizeof(err)) < 0)
        RedisModule_Log(ctx, "warning", "RDMA clients are off: %s", err);
}
