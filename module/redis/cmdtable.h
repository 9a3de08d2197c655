/*
 * cmdtable.h - how the module's commands are described and registered: one
 * row type for every OBJ.* command (whichever file handles it) and one loop
 * that creates each command and documents it for COMMAND DOCS.
 */
#ifndef OBJSTORE_CMDTABLE_H
#define OBJSTORE_CMDTABLE_H

#include <stddef.h>

#include "redismodule.h"

typedef struct ObjCommandDef {
    const char *name;
    RedisModuleCmdFunc fn;
    const char *flags; /* RedisModule_CreateCommand flags */
    int arity;
    const char *summary;
    const char *complexity;
    RedisModuleCommandArg *args;
} ObjCommandDef;

/* Create and document the n commands of defs. Returns REDISMODULE_OK, or
 * REDISMODULE_ERR after logging which command failed. */
int objCommandTableRegister(RedisModuleCtx *ctx, const ObjCommandDef *defs, size_t n);

#endif /* OBJSTORE_CMDTABLE_H */
