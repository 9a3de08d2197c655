/*
 * cmdtable.h - how the module's commands are described and registered: one
 * row type for every OBJ.* command (whichever file handles it) and one loop
 * that creates each command, documents it for COMMAND DOCS and declares the
 * object ids it names, so that ACL key permissions apply to them (acl.h).
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
    int idFlags; /* OBJ_ACL_* permissions its ids need; 0: it names no object */
    /* How many ids follow the command name (argv[1] on), for a command that
     * takes several; NULL: just argv[1]. Must not reply or fail. */
    int (*idCount)(RedisModuleString **argv, int argc);
} ObjCommandDef;

/* Create and document the n commands of defs (defs must stay valid while the
 * module is loaded). Returns REDISMODULE_OK, or REDISMODULE_ERR after logging
 * which command failed. */
int objCommandTableRegister(RedisModuleCtx *ctx, const ObjCommandDef *defs, size_t n);

#endif /* OBJSTORE_CMDTABLE_H */
