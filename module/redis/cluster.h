/*
 * cluster.h - the distributed half seen from Redis (cluster.c): the directory client
 * and the transfer engine started and stopped, OBJ.FETCH, OBJ.LOCATE and
 * OBJ.NODES, publishing, and the transfer and directory statistics.
 */
#ifndef OBJSTORE_CLUSTER_H
#define OBJSTORE_CLUSTER_H

#include <stddef.h>
#include "redismodule.h"
#include "stats.h"
#include "store/objtable.h"

/* Start the engine and the directory client. Returns REDISMODULE_OK or
 * REDISMODULE_ERR (logged). */
int objClusterStart(RedisModuleCtx *ctx);
/* Stop both (the directory first); harmless when not started. */
void objClusterStop(void);
int objClusterRegisterCommands(RedisModuleCtx *ctx);
/* A run-time setting changed (rdma-read-min): pass it on. */
void objClusterConfigChanged(void);
/* Tell the directory that this node holds / no longer holds an object. */
void objClusterPublish(const ObjEntry *e);
void objClusterUnpublish(const char *id, size_t idLen);
/* The transfer and directory fields of OBJ.STATS / INFO (an ObjStatsFn). */
void objClusterStatsFields(ObjStatSink *sink);

#endif /* OBJSTORE_CLUSTER_H */
