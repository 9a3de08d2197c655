/*
 * config.h - the node's settings: module arguments and CONFIG objstore.* (config.c).
 */
#ifndef OBJSTORE_CONFIG_H
#define OBJSTORE_CONFIG_H

#include "redismodule.h"

/* Parse module arguments, register module configs, load them.
 * Returns REDISMODULE_OK, or REDISMODULE_ERR after logging why. */
int objConfigInit(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

#endif /* OBJSTORE_CONFIG_H */
