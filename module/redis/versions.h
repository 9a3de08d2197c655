/*
 * versions.h - named versions (OBJ.VPUBLISH, OBJ.VLATEST, OBJ.VGET,
 * OBJ.VLIST, OBJ.VDROP) and the cluster-wide delete (OBJ.PURGE), seen from
 * Redis (versions.c; the directory side is module/directory/versions.c).
 */
#ifndef OBJSTORE_VERSIONS_H
#define OBJSTORE_VERSIONS_H

#include "redismodule.h"

/* Register the version and purge commands. Returns REDISMODULE_OK, or
 * REDISMODULE_ERR (logged). */
int objVersionsRegisterCommands(RedisModuleCtx *ctx);
#endif /* OBJSTORE_VERSIONS_H */
