/*
 * settings.h - the node's settings that derive from the Redis server it runs
 * in (its port and host): resolved once, after the configuration is loaded
 * and before anything starts; read-only afterwards.
 */
#ifndef OBJSTORE_SETTINGS_H
#define OBJSTORE_SETTINGS_H

#include "redismodule.h"

/* Fill in what the configuration left to defaults, in objNode.cfg and
 * objNode.redisPort: node-name (<host>:<port>), transfer-port,
 * rdma-port and rdma-client-port (-1: the Redis port + 10000, 20000,
 * 30000, or 0 (off, logged) when that is out of range), announce-addr
 * (transfer-bind, or for 0.0.0.0 the first non-loopback IPv4 address) and
 * rdma-bind (announce-addr). Can't fail. */
void objSettingsResolve(RedisModuleCtx *ctx);

#endif /* OBJSTORE_SETTINGS_H */
