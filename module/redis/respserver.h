/*
 * respserver.h - the RDMA front door: Redis clients that speak RESP over
 * RDMA (the wire of resprdma.h) to this server, on rdma-client-port. The
 * door is started and stopped from module.c.
 */
#ifndef OBJSTORE_RESPSERVER_H
#define OBJSTORE_RESPSERVER_H

#include <stdint.h>

#include "redismodule.h"
#include "stats.h"

/* Open the door on rdma-bind:rdma-client-port. Never fails the load:
 * without RDMA it logs why and stays off. */
void respServerStart(RedisModuleCtx *ctx);
void respServerStop(void);

typedef struct RespServerStats {
    uint64_t connected;      /* RDMA clients connected now */
    uint64_t total;          /* RDMA clients accepted since start */
    uint64_t commands;       /* requests read from RDMA clients */
    uint64_t protocolErrors; /* clients closed for malformed RESP or ring messages */
} RespServerStats;

/* The door's fields of OBJ.STATS / INFO objstore, all 0 when it is off (an
 * ObjStatsFn). Main thread only. */
void respServerStats(ObjStatSink *sink);

#endif /* OBJSTORE_RESPSERVER_H */
