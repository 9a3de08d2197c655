/*
 * verbs.h - small libibverbs/librdmacm helpers shared by the two RDMA users
 * of the module: the transfer transport (rdma.c) and the Redis-protocol
 * front door (respserver.c). No Redis headers.
 */
#ifndef OBJSTORE_VERBS_H
#define OBJSTORE_VERBS_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stddef.h>
#include <stdint.h>

/* Create an RC QP on id with one CQ (depth cqDepth, context cqCtx, events on
 * comp, armed) for both sends and receives. On success *cq is set and 0 is
 * returned; on failure -1 with a reason in err, and *cq may be set (the
 * caller's teardown destroys it, as it does after success). */
int verbsCreateRcQp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_comp_channel *comp,
                    void *cqCtx, int cqDepth, uint32_t sendWr, uint32_t recvWr, uint32_t sendSge,
                    struct ibv_cq **cq, char *err, size_t errLen);

/* One rdma_cm event, copied out so that it can be acknowledged at once
 * (before anything that handles it may destroy its id). */
typedef struct VerbsCmEvent {
    struct rdma_cm_id *id;
    enum rdma_cm_event_type type;
    int status;
    uint8_t priv[64]; /* the connection's private data, cut to 64 bytes */
    size_t privLen;   /* 0 when there was none */
} VerbsCmEvent;

/* Take the next event of ec (non-blocking channels: none pending is -1
 * with errno EAGAIN), copy it into *out and acknowledge it. Returns 0 or -1. */
int verbsNextCmEvent(struct rdma_event_channel *ec, VerbsCmEvent *out);

#endif /* OBJSTORE_VERBS_H */
