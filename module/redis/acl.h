/*
 * acl.h - object ids under the calling user's ACL key permissions: the
 * check that OBJ.* commands apply by hand where Redis cannot (on a
 * cluster-enabled server, and for the ids OBJ.LIST shows). How ids map to
 * key patterns, and what differs in cluster mode: docs/security.md.
 */
#ifndef OBJSTORE_ACL_H
#define OBJSTORE_ACL_H

#include "redismodule.h"

/* What a command does to the ids it names, as key-spec flags: reading needs
 * the user's read permission (%R), the others its write permission (%W). */
#define OBJ_ACL_READ   (REDISMODULE_CMD_KEY_RO | REDISMODULE_CMD_KEY_ACCESS)
#define OBJ_ACL_INSERT (REDISMODULE_CMD_KEY_RW | REDISMODULE_CMD_KEY_INSERT)
#define OBJ_ACL_UPDATE (REDISMODULE_CMD_KEY_RW | REDISMODULE_CMD_KEY_UPDATE)
#define OBJ_ACL_DELETE (REDISMODULE_CMD_KEY_RM | REDISMODULE_CMD_KEY_DELETE)

/* Decide, once at load, who enforces key permissions on ids: Redis (through
 * key specs) on a plain server, this module by hand on a cluster-enabled one,
 * where key specs would make Redis route ids to slots. Can't fail. */
void objAclInit(RedisModuleCtx *ctx);
/* 1 when the commands check ids by hand (cluster-enabled server), else 0. */
int objAclByHand(void);

/* Who is calling: a user to check ids against. */
typedef struct ObjAclCaller {
    RedisModuleUser *user; /* NULL: not subject to ACLs (see denied) */
    int denied;            /* 1: the user vanished or was disabled: allow nothing */
} ObjAclCaller;

/* Look up the calling user of ctx. A caller without a user (a module's
 * RedisModule_Call, which runs as the superuser) may access everything.
 * Pair with objAclCallerFree. Can't fail. */
void objAclCallerGet(RedisModuleCtx *ctx, ObjAclCaller *c);
void objAclCallerFree(ObjAclCaller *c);
/* 1 when caller c may access id with the OBJ_ACL_* permissions in flags. */
int objAclAllows(const ObjAclCaller *c, RedisModuleString *id, int flags);

/* Check argv[first .. first+n) as ids needing flags. Returns 0, or -1 after
 * replying NOPERM (and adding an ACL LOG entry) for the first one refused. */
int objAclCheckIds(RedisModuleCtx *ctx, RedisModuleString **argv, int first, int n, int flags);

#endif /* OBJSTORE_ACL_H */
