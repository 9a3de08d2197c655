/*
 * node.h - the state of this node, shared by the Redis-facing files of the
 * module (module.c, config.c, commands.c, waiters.c): its settings, its
 * arena, its object table and its command counters.
 *
 * Only the Redis main thread touches the counters and the waiters; the
 * object table has its own lock because the transfer engine shares it.
 */
#ifndef OBJSTORE_NODE_H
#define OBJSTORE_NODE_H

#include <stdint.h>

#include "store/arena.h"
#include "store/objtable.h"
#include "redismodule.h"
#include "reply.h"

#define OBJ_MODULE_NAME    "objstore"
#define OBJ_MODULE_VERSION 1

/* Holder ids at or above this are not Redis clients (internal pins). */
#define OBJ_HOLDER_INTERNAL (1ULL << 63)

/* Every setting (see the table in config.c for names, defaults, limits). */
typedef struct ObjConfig {
    long long memory;    /* arena bytes */
    char arenaDir[256];  /* where the arena file lives */
    char nodeName[128];  /* "" = <host>:<port> */
    char directory[256]; /* host:port of the directory Redis; "" = this server */
    char directoryPassword[128];
    char transferBind[64];
    long long transferPort; /* -1 = Redis port + 10000, 0 = no TCP transfers */
    char announceAddr[64];  /* address other nodes dial; "" = transfer-bind */
    char clusterSecret[256];
    long long fetchTimeoutMs; /* OBJ.FETCH without TIMEOUT */
    long long heartbeatMs, nodeTtlMs;
    char rdmaBind[64];  /* "" = announce address */
    long long rdmaPort; /* -1 = Redis port + 20000, 0 = no RDMA */
    char rdmaDevice[64];
    long long rdmaReadMin;    /* RDMA inline/rendezvous threshold */
    long long rdmaClientPort; /* RESP over RDMA; -1 = Redis port + 30000, 0 = off */
} ObjConfig;

typedef struct ObjCounters {
    uint64_t puts, gets, pins, releases, blocked;
} ObjCounters;

typedef struct ObjNode {
    RedisModuleCtx *ctx; /* detached: for timers and logs outside commands */
    ObjConfig cfg;
    Arena arena;
    ObjTable *table;
    ObjCounters cnt;
    long long redisPort; /* this server's TCP port, 0 if none (settings.c) */
} ObjNode;

extern ObjNode objNode;

/* config.c: parse module arguments, register module configs, load them.
 * Returns REDISMODULE_OK, or REDISMODULE_ERR after logging why. */
int objConfigInit(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* cluster.c: the distributed half (directory, transfer engine, OBJ.FETCH,
 * OBJ.LOCATE, OBJ.NODES). Start returns REDISMODULE_OK or _ERR (logged). */
int objClusterStart(RedisModuleCtx *ctx);
void objClusterStop(void);
int objClusterRegisterCommands(RedisModuleCtx *ctx);
void objClusterConfigChanged(void);
/* Tell the directory that this node holds / no longer holds an object. */
void objClusterPublish(const ObjEntry *e);
void objClusterUnpublish(const char *id, size_t idLen);
void objClusterInfo(RedisModuleInfoCtx *ctx);
/* Append the transfer statistics to an OBJ.STATS reply; returns the number
 * of replies added. */
long objClusterStats(RedisModuleCtx *ctx);

/* respserver.c: the RDMA front door for Redis clients (rdma-client-port).
 * Start never fails the load: without RDMA it logs why and stays off. */
void respServerStart(RedisModuleCtx *ctx);
void respServerStop(void);

/* commands.c: register every OBJ.* command with its docs. */
int objCommandsRegister(RedisModuleCtx *ctx);
/* commands.c: the field/value pairs of OBJ.STATS and INFO objstore. */
void objInfoSection(RedisModuleInfoCtx *ctx, int forCrashReport);

/* waiters.c: block the client until id is sealed (then reply as kind), or
 * until timeoutMs (0 = forever) passes. waitMissing: keep waiting while the
 * id does not exist (else a vanished id answers NOTFOUND). */
int waitersBlock(RedisModuleCtx *ctx, const char *id, size_t idLen, long long timeoutMs,
                 int waitMissing, ObjReplyKind kind);
/* waiters.c: re-examine waiters of id (or of every id when id is NULL) after
 * a seal, an abort or a put, and wake those whose wait is over. */
void waitersRecheck(const char *id, size_t idLen);
uint64_t waitersCount(void);

#endif /* OBJSTORE_NODE_H */
