/*
 * commands.h - the store's OBJ.* commands and their statistics (commands.c).
 */
#ifndef OBJSTORE_COMMANDS_H
#define OBJSTORE_COMMANDS_H

#include "redismodule.h"
#include "stats.h"

/* Register every OBJ.* command (OBJ.FETCH, OBJ.LOCATE and OBJ.NODES too) with its docs. */
int objCommandsRegister(RedisModuleCtx *ctx);
/* The store's fields of OBJ.STATS / INFO objstore (an ObjStatsFn). */
void objCommandsStats(ObjStatSink *sink);

#endif /* OBJSTORE_COMMANDS_H */
