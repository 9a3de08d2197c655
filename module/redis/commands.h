/*
 * commands.h - the store's OBJ.* commands and their statistics (commands.c).
 */
#ifndef OBJSTORE_COMMANDS_H
#define OBJSTORE_COMMANDS_H

#include "redismodule.h"

/* Register every OBJ.* command (the cluster's too) with its docs. */
int objCommandsRegister(RedisModuleCtx *ctx);
/* The field/value pairs of INFO objstore (the same as OBJ.STATS). */
void objInfoSection(RedisModuleInfoCtx *ctx, int forCrashReport);

#endif /* OBJSTORE_COMMANDS_H */
