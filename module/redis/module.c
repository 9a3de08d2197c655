/*
 * module.c - the entry point of objstore.so: RedisModule_OnLoad wires the
 * node together (settings, arena, object table, commands, INFO section) and
 * subscribes to the server events that keep the store clean: a client that
 * disconnects gives up its created objects and pins; a shutdown removes the
 * arena file.
 *
 * Map of the module (one folder per component; each may include only the
 * ones below it, as tests/lint/layers says; every file's one line:
 * docs/architecture.md, "Components"):
 *   redis/      this layer, the commands and the node's start-up:
 *               module.c (entry, events; calls the others, nothing calls it),
 *               node.c (the node's state), settings.c, config.c (CONFIG),
 *               cmdtable.c, commands.c (the store's OBJ.*), acl.c,
 *               remote.c (OBJ.FETCH/LOCATE/NODES; starts the engine),
 *               versions.c (OBJ.VPUBLISH .. OBJ.PURGE), spill.c (waits on
 *               the spill tier), sealer.c (background checksum and scrub),
 *               copies.c (a seal's wait for its copies, OBJ.DRAIN),
 *               args.c (shared argument checks), reply.c, waiters.c,
 *               stats.c, limits.c, strdup.c
 *   replica/    the replica manager thread (copies, repair, ownership,
 *               drain): replica.c (thread, callbacks), place.c, repair.c,
 *               drain.c
 *   door/       not part of objstore.so: objstore-rdma.so (Redis clients
 *               over RDMA): door.c, conntype.c; door.h names the counters
 *               it shares
 *   transfer/   the transfer engine thread: engine.c (core), start.c; the
 *               requesting side fetch.c, fetchxfer.c, fetchanswer.c; the
 *               answering side serve.c, tierserve.c; the transports tcp.c,
 *               rdma.c, rdmaread.c (transport.h) with framer.c, streamrx.c,
 *               handshake.c, rdmaproto.c, rdmareg.c; frames in wire.c
 *   directory/  the directory client thread (hiredis): directory.c,
 *               thread.c, lookup.c, publish.c, versions.c, tomb.c,
 *               batch.c, conn.c, slots.c, queue.c, keys.c, state.c
 *   rdma/       the RDMA stream endpoint: stream.c, streamcm.c (set-up),
 *               streamproto.c (its rules); verbs.c
 *   store/      arena.c, alloc.c (TLSF), objtable.c, tier.c (spill tier),
 *               checksum.c
 *   common/     util.c (parsing, glob, clocks), heap.c (counted heap), list.h,
 *               errwords.h (the error code words)
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "door/door.h"
#include "node.h"
#include "config.h"
#include "remote.h"
#include "copies.h"
#include "commands.h"
#include "versions.h"
#include "waiters.h"
#include "settings.h"
#include "spill.h"
#include "sealer.h"
#include "stats.h"
#include "limits.h"

/* A client disconnected: abort what it was creating, drop its pins, and let
 * waiters for the aborted ids see that they are gone. */
static void onClientChange(RedisModuleCtx *ctx, RedisModuleEvent e, uint64_t sub, void *data)
{
    RedisModuleClientInfo *ci = data;

    if (sub != REDISMODULE_SUBEVENT_CLIENT_CHANGE_DISCONNECTED)
        return;
    objTableLock(objNode.table);
    int aborted = objTableHolderGone(objNode.table, ci->id);
    objTableUnlock(objNode.table);
    if (aborted)
        waitersRecheck(NULL, 0);
}

static void onShutdown(RedisModuleCtx *ctx, RedisModuleEvent e, uint64_t sub, void *data)
{
    copiesDrainBeforeShutdown();
    objRemoteStop();
    sealerStop();
    spillStop();
    arenaClose(&objNode.arena);
}

/* The door's fields of OBJ.STATS / INFO objstore (an ObjStatsFn): the
 * counters objstore-rdma.so shares when it is loaded, zeros otherwise. */
static void moduleDoorStats(ObjStatSink *sink)
{
    DoorStats st = {0};
    DoorStatsFn *fn = (DoorStatsFn *)RedisModule_GetSharedAPI(objNode.ctx, DOOR_STATS_API);

    if (fn)
        fn(&st);
    objStatNum(sink, "rdma_clients_connected", st.connected);
    objStatNum(sink, "rdma_clients_total", st.total);
    objStatNum(sink, "rdma_clients_rejected", st.rejected);
    objStatNum(sink, "rdma_client_stream_errors", st.streamErrors);
}

/* rdma-client-port and rdma-rx-size are the settings of the RDMA door
 * from before it became objstore-rdma.so: say where they went. That module,
 * loaded after this one without a port of its own, still takes them. */
static void moduleDoorNotice(RedisModuleCtx *ctx)
{
    if (objNode.cfg.rdmaClientPort != 0)
        RedisModule_Log(ctx, "notice",
                        "objstore.rdma-client-port is deprecated: Redis clients over RDMA are "
                        "the module objstore-rdma.so (objstore-rdma.port, docs/rdma.md); loaded "
                        "after objstore.so without a port of its own, it takes this one");
}

__attribute__((visibility("default"))) int RedisModule_OnLoad(RedisModuleCtx *ctx,
                                                              RedisModuleString **argv, int argc)
{
    char err[512];

    if (RedisModule_Init(ctx, OBJ_MODULE_NAME, OBJ_MODULE_VERSION, REDISMODULE_APIVER_1) ==
        REDISMODULE_ERR)
        return REDISMODULE_ERR;
    objNode.ctx = RedisModule_GetDetachedThreadSafeContext(ctx);
    if (objConfigInit(ctx, argv, argc) == REDISMODULE_ERR)
        return REDISMODULE_ERR;
    objSettingsResolve(ctx); /* before anything starts: they all read the result */
    if (arenaOpen(&objNode.arena, objNode.cfg.arenaDir, (uint64_t)objNode.cfg.memory,
                  (mode_t)strtoul(objNode.cfg.arenaMode, NULL, 8), err, sizeof(err)) == -1) {
        RedisModule_Log(ctx, "warning", "%s", err);
        return REDISMODULE_ERR;
    }
    if (objNode.cfg.prefault && arenaPrefault(&objNode.arena) == -1)
        RedisModule_Log(ctx, "warning", "prefault: the arena's page tables stay lazy: %s",
                        strerror(errno));
    objNode.table = objTableCreate(objNode.arena.size);
    if (!objNode.table) {
        RedisModule_Log(ctx, "warning", "out of memory for the object table");
        goto out_close_arena;
    }
    objLimitsApply();
    /* OBJ.STATS and INFO list the subsystems' fields in this order. */
    if (objStatsAdd(objCommandsStats) == REDISMODULE_ERR ||
        objStatsAdd(objLimitsStats) == REDISMODULE_ERR ||
        objStatsAdd(spillStats) == REDISMODULE_ERR || objStatsAdd(sealerStats) == REDISMODULE_ERR ||
        objStatsAdd(moduleDoorStats) == REDISMODULE_ERR ||
        objStatsAdd(objRemoteStats) == REDISMODULE_ERR ||
        objStatsAdd(copiesStats) == REDISMODULE_ERR ||
        objCommandsRegister(ctx) == REDISMODULE_ERR ||
        objVersionsRegisterCommands(ctx) == REDISMODULE_ERR ||
        RedisModule_RegisterInfoFunc(ctx, objStatsInfo) == REDISMODULE_ERR ||
        RedisModule_SubscribeToServerEvent(ctx, RedisModuleEvent_ClientChange, onClientChange) ==
            REDISMODULE_ERR ||
        RedisModule_SubscribeToServerEvent(ctx, RedisModuleEvent_Shutdown, onShutdown) ==
            REDISMODULE_ERR)
        goto out_destroy_table;
    if (spillStart(ctx) == REDISMODULE_ERR)
        goto out_destroy_table;
    if (sealerStart(ctx) == REDISMODULE_ERR)
        goto out_stop_spill;
    if (objRemoteStart(ctx) == REDISMODULE_ERR)
        goto out_stop_sealer;
    moduleDoorNotice(ctx);
    RedisModule_Log(ctx, "notice", "arena %s, %lld bytes", objNode.arena.path, objNode.cfg.memory);
    return REDISMODULE_OK;

out_stop_sealer:
    sealerStop();
out_stop_spill:
    spillStop();
out_destroy_table:
    objTableDestroy(objNode.table);
    objNode.table = NULL;
out_close_arena:
    arenaClose(&objNode.arena);
    return REDISMODULE_ERR;
}

/* Unloading would leave the engine and directory threads running code that
 * is gone, and clients holding pointers into the arena: refuse. */
__attribute__((visibility("default"))) int RedisModule_OnUnload(RedisModuleCtx *ctx)
{
    RedisModule_Log(ctx, "warning", "objstore cannot be unloaded; restart the server instead");
    return REDISMODULE_ERR;
}
