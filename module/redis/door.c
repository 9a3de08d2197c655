/*
 * door.c - the module side of the RDMA door (Redis clients over RDMA, on
 * rdma-client-port): reads what conntype.c must check before it opens
 * (the running server's version and a probe of its configuration through
 * the module API), starts and stops it, and lists its counters in OBJ.STATS
 * and INFO. conntype.c does the rest against Redis's own headers; the two
 * meet only through the plain header conntype.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "node.h"
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

void doorStart(RedisModuleCtx *ctx)
{
    long long port = objNode.cfg.rdmaClientPort; /* resolved by settings.c */
    char err[512];

    if (port <= 0)
        return;
    RdmaDoorConfig cfg = {
        .bind = objNode.cfg.rdmaBind,
        .port = (int)port,
        .device = objNode.cfg.rdmaDevice,
        .rxSize = (uint32_t)objNode.cfg.rdmaRxSize,
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
    if (rdmaDoorStart(&cfg, err, sizeof(err)) < 0)
        RedisModule_Log(ctx, "warning", "RDMA clients are off: %s", err);
}

void doorStop(void)
{
    rdmaDoorStop();
}

void doorStats(ObjStatSink *sink)
{
    RdmaDoorStats st;

    rdmaDoorGetStats(&st);
    objStatNum(sink, "rdma_clients_connected", st.connected);
    objStatNum(sink, "rdma_clients_total", st.total);
    objStatNum(sink, "rdma_clients_rejected", st.rejected);
    objStatNum(sink, "rdma_client_stream_errors", st.streamErrors);
}
