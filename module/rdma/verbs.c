/*
 * verbs.c - libibverbs/librdmacm helpers shared by rdma.c and respserver.c
 * (see verbs.h). Every call is checked and reported with its status string.
 */
#include "verbs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int verbsCreateRcQp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_comp_channel *comp,
                    void *cqCtx, int cqDepth, uint32_t sendWr, uint32_t recvWr, uint32_t sendSge,
                    struct ibv_cq **cq, char *err, size_t errLen)
{
    struct ibv_qp_init_attr qa = {0};

    *cq = ibv_create_cq(id->verbs, cqDepth, cqCtx, comp, 0);
    if (!*cq) {
        snprintf(err, errLen, "ibv_create_cq: %s", strerror(errno));
        return -1;
    }
    int rc = ibv_req_notify_cq(*cq, 0);
    if (rc) {
        snprintf(err, errLen, "ibv_req_notify_cq: %s", strerror(rc));
        return -1;
    }
    qa.send_cq = *cq;
    qa.recv_cq = *cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = sendWr;
    qa.cap.max_recv_wr = recvWr;
    qa.cap.max_send_sge = sendSge;
    qa.cap.max_recv_sge = 1;
    if (rdma_create_qp(id, pd, &qa)) {
        snprintf(err, errLen, "rdma_create_qp: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* See verbs.h. */
int verbsNextCmEvent(struct rdma_event_channel *ec, VerbsCmEvent *out)
{
    struct rdma_cm_event *ev;

    if (rdma_get_cm_event(ec, &ev) != 0)
        return -1;
    out->id = ev->id;
    out->type = ev->event;
    out->status = ev->status;
    out->privLen = 0;
    if (ev->param.conn.private_data && ev->param.conn.private_data_len) {
        out->privLen = ev->param.conn.private_data_len < sizeof(out->priv)
                           ? ev->param.conn.private_data_len
                           : sizeof(out->priv);
        memcpy(out->priv, ev->param.conn.private_data, out->privLen);
    }
    rdma_ack_cm_event(ev);
    return 0;
}
