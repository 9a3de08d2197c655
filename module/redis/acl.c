/*
 * acl.c - ACL key permissions on object ids (acl.h). Redis checks key
 * permissions itself for commands whose keys it knows; this file is for
 * where it does not: a cluster-enabled server (whose commands register no
 * keys, so that Redis does not route ids by slot) and OBJ.LIST, whose ids
 * come from the table, not from the arguments.
 */
#include <errno.h>

#include "acl.h"
#include "reply.h"

static int aclByHand; /* set once at load, read on the main thread */

void objAclInit(RedisModuleCtx *ctx)
{
    aclByHand = (RedisModule_GetContextFlags(ctx) & REDISMODULE_CTX_FLAGS_CLUSTER) != 0;
}

int objAclByHand(void)
{
    return aclByHand;
}

/*
 * The caller's user name. A connected client is found by its id. A script's
 * client is not (it is not a connection) but carries its caller's user. A
 * module's RedisModule_Call runs on a client that may have no user at all
 * (the superuser), where RedisModule_GetCurrentUserName would crash; such a
 * caller gets NULL and is not checked.
 */
static RedisModuleString *aclCallerName(RedisModuleCtx *ctx)
{
    RedisModuleString *name = RedisModule_GetClientUserNameById(ctx, RedisModule_GetClientId(ctx));

    if (name || errno != ENOENT)
        return name;
    if (RedisModule_GetContextFlags(ctx) & REDISMODULE_CTX_FLAGS_LUA)
        return RedisModule_GetCurrentUserName(ctx);
    return NULL;
}

void objAclCallerGet(RedisModuleCtx *ctx, ObjAclCaller *c)
{
    RedisModuleString *name = aclCallerName(ctx);

    c->user = NULL;
    c->denied = 0;
    if (!name)
        return;
    c->user = RedisModule_GetModuleUserFromUserName(name);
    c->denied = c->user == NULL;
    RedisModule_FreeString(ctx, name);
}

void objAclCallerFree(ObjAclCaller *c)
{
    if (c->user)
        RedisModule_FreeModuleUser(c->user);
    c->user = NULL;
}

int objAclAllows(const ObjAclCaller *c, RedisModuleString *id, int flags)
{
    if (c->denied)
        return 0;
    /* The check takes only the access flags; RO/RW/RM describe the spec. */
    int access = flags & (REDISMODULE_CMD_KEY_ACCESS | REDISMODULE_CMD_KEY_INSERT |
                          REDISMODULE_CMD_KEY_UPDATE | REDISMODULE_CMD_KEY_DELETE);
    return !c->user || RedisModule_ACLCheckKeyPermissions(c->user, id, access) == REDISMODULE_OK;
}

int objAclCheckIds(RedisModuleCtx *ctx, RedisModuleString **argv, int first, int n, int flags)
{
    ObjAclCaller c;
    int rc = 0;

    objAclCallerGet(ctx, &c);
    for (int i = first; i < first + n && rc == 0; i++) {
        if (objAclAllows(&c, argv[i], flags))
            continue;
        if (c.user)
            RedisModule_ACLAddLogEntry(ctx, c.user, argv[i], REDISMODULE_ACL_LOG_KEY);
        objReplyError(ctx, OBJ_EW_NOPERM, "this user may not %s this object",
                      flags == OBJ_ACL_READ ? "read" : "write");
        rc = -1;
    }
    objAclCallerFree(&c);
    return rc;
}
