/*
 * settings.c - settings derived from the Redis server the node runs in
 * (settings.h): the one place where the Redis port and host turn into the
 * node's name, ports and addresses, so that every subsystem started later
 * reads the same, final values.
 */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "node.h"
#include "settings.h"

/* This server's TCP port (from INFO server), or 0 when it has none. */
static long long settingsRedisPort(RedisModuleCtx *ctx)
{
    int err = 0;
    RedisModuleServerInfoData *info = RedisModule_GetServerInfo(ctx, "server");
    long long port = info ? RedisModule_ServerInfoGetFieldSigned(info, "tcp_port", &err) : 0;

    if (info)
        RedisModule_FreeServerInfo(ctx, info);
    return err ? 0 : port;
}

/* The first non-loopback IPv4 address of this host, or 127.0.0.1. */
static void settingsDefaultAddr(char *out, size_t len)
{
    struct ifaddrs *ifs, *i;

    snprintf(out, len, "127.0.0.1");
    if (getifaddrs(&ifs) == -1)
        return;
    for (i = ifs; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
            continue;
        struct in_addr a = ((struct sockaddr_in *)i->ifa_addr)->sin_addr;
        if ((ntohl(a.s_addr) >> 24) == 127)
            continue;
        inet_ntop(AF_INET, &a, out, (socklen_t)len);
        break;
    }
    freeifaddrs(ifs);
}

/* A port left at -1 becomes the Redis port + offset, or 0 (off, with a log
 * line naming the setting) when there is no Redis port or the sum is out of
 * range. Can't fail. */
static void settingsPort(RedisModuleCtx *ctx, long long *port, long long offset, const char *name)
{
    long long redisPort = objNode.redisPort;

    if (*port != -1)
        return;
    *port = redisPort > 0 && redisPort + offset <= 65535 ? redisPort + offset : 0;
    if (*port == 0)
        RedisModule_Log(ctx, "warning",
                        "%s: the Redis port + %lld is out of range, so it is off; set objstore.%s",
                        name, offset, name);
}

void objSettingsResolve(RedisModuleCtx *ctx)
{
    ObjConfig *cfg = &objNode.cfg;
    char host[256];

    objNode.redisPort = settingsRedisPort(ctx);
    if (!cfg->nodeName[0]) {
        if (gethostname(host, sizeof(host)) != 0)
            snprintf(host, sizeof(host), "node");
        host[64] = '\0';
        snprintf(cfg->nodeName, sizeof(cfg->nodeName), "%.64s:%lld", host, objNode.redisPort);
    }
    settingsPort(ctx, &cfg->transferPort, 10000, "transfer-port");
    settingsPort(ctx, &cfg->rdmaPort, 20000, "rdma-port");
    settingsPort(ctx, &cfg->rdmaClientPort, 30000, "rdma-client-port");
    if (!cfg->announceAddr[0]) {
        if (strcmp(cfg->transferBind, "0.0.0.0"))
            snprintf(cfg->announceAddr, sizeof(cfg->announceAddr), "%s", cfg->transferBind);
        else
            settingsDefaultAddr(cfg->announceAddr, sizeof(cfg->announceAddr));
    }
    if (!cfg->rdmaBind[0])
        snprintf(cfg->rdmaBind, sizeof(cfg->rdmaBind), "%s", cfg->announceAddr);
}
