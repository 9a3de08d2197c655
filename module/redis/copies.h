/*
 * copies.h - the Redis side of an object's copies (copies.c): a seal that
 * waits for its replica count (OBJ.PUT / OBJ.SEAL ... REPLICAS k [WAIT ms]),
 * the delete of an object with copies, OBJ.DRAIN and the drain before a
 * shutdown, and the copies' statistics. The work is the replica manager's
 * (module/replica/); how it goes: docs/cluster.md ("Copies, repair and drain").
 */
#ifndef OBJSTORE_COPIES_H
#define OBJSTORE_COPIES_H

#include <stddef.h>
#include <stdint.h>

#include "redismodule.h"
#include "stats.h"
#include "store/objtable.h"

/* Before sealing e (created by this client with e->want >= 2): arrange the
 * reply. Where the client may wait and waitMs > 0, it is blocked until the
 * copies are placed or waitMs ran out, and answered with the number of
 * holders; returns 1. Otherwise (waitMs 0, MULTI, a script) nothing is
 * replied and 0 returned: the caller answers 1 itself; the copies are
 * placed all the same. */
int copiesExpect(RedisModuleCtx *ctx, ObjEntry *e, long long waitMs);
/* e was published as a sealed primary (main thread): place its copies when
 * it asks for some. */
void copiesSealed(const ObjEntry *e);
/* The object id of this node, asking for copies, was deleted here: delete
 * it on every node (a purge of its generation). */
void copiesDeleted(const char *id, size_t idLen);
/* New objects are refused while the node drains: reply DRAINING and return
 * 1, or 0 when the node takes them. */
int copiesRefuseWhileDraining(RedisModuleCtx *ctx);
/* SHUTDOWN with drain-on-shutdown: drain first, up to drain-timeout. */
void copiesDrainBeforeShutdown(void);
/* Register OBJ.DRAIN. REDISMODULE_OK or REDISMODULE_ERR. */
int copiesRegisterCommands(RedisModuleCtx *ctx);
/* The copies' fields of OBJ.STATS / INFO (an ObjStatsFn). */
void copiesStats(ObjStatSink *sink);

#endif /* OBJSTORE_COPIES_H */
