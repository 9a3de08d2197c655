/*
 * door.h - the RDMA door (Redis clients over RDMA, rdma-client-port) as
 * module.c sees it: start, stop, counters. The connection type itself is
 * conntype.c.
 */
#ifndef OBJSTORE_DOOR_H
#define OBJSTORE_DOOR_H

#include "redismodule.h"
#include "stats.h"

/* Open the door on rdma-bind:rdma-client-port. Never fails the load: when
 * the running server is not the one the headers describe, or RDMA is not
 * available, it logs why ("RDMA clients are off: ...") and stays closed. */
void doorStart(RedisModuleCtx *ctx);
/* Stop accepting and disconnect RDMA clients (server shutdown). */
void doorStop(void);
/* rdma_clients_connected, rdma_clients_total, rdma_clients_rejected,
 * rdma_client_stream_errors (an ObjStatsFn). */
void doorStats(ObjStatSink *sink);

#endif /* OBJSTORE_DOOR_H */
