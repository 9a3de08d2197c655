/*
 * remote.h - the store's reach beyond this node, seen from Redis (remote.c):
 * the transfer engine and the directory client started and stopped,
 * OBJ.FETCH, OBJ.LOCATE and OBJ.NODES, publishing local objects, and the
 * transfer and directory statistics.
 */
#ifndef OBJSTORE_REMOTE_H
#define OBJSTORE_REMOTE_H

#include <stddef.h>
#include "redismodule.h"
#include "stats.h"
#include "directory/directory.h"
#include "store/objtable.h"

/* Start the engine and the directory client. Returns REDISMODULE_OK or
 * REDISMODULE_ERR (logged). */
int objRemoteStart(RedisModuleCtx *ctx);
/* Stop both (the directory first); harmless when not started. */
void objRemoteStop(void);
/* Register OBJ.FETCH, OBJ.LOCATE and OBJ.NODES. Returns REDISMODULE_OK, or
 * REDISMODULE_ERR (logged). */
int objRemoteRegisterCommands(RedisModuleCtx *ctx);
/* A run-time setting changed (rdma-read-min): pass it on. */
void objRemoteConfigChanged(void);
/* The kind of copy e is, as the directory is told. */
DirCopy objRemoteCopyKind(const ObjEntry *e);
/* Tell the directory that this node holds / no longer holds an object. */
void objRemotePublish(const ObjEntry *e);
void objRemoteUnpublish(const char *id, size_t idLen);
/* Whether the directory client runs (requests to it get answered). */
int objRemoteDirRunning(void);
/* The transfer and directory fields of OBJ.STATS / INFO (an ObjStatsFn). */
void objRemoteStats(ObjStatSink *sink);

#endif /* OBJSTORE_REMOTE_H */
