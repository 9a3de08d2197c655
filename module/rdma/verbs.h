/*
 * verbs.h - small librdmacm helpers for the code that owns an rdma_cm
 * listener (the transfer transport, the hostile test peer): taking one
 * event off a channel safely. No Redis headers.
 */
#ifndef OBJSTORE_VERBS_H
#define OBJSTORE_VERBS_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stddef.h>
#include <stdint.h>

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
