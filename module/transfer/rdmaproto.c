/*
 * rdmaproto.c - the RDMA transport's pure rules (rdmaproto.h): the caps on
 * connections still in their handshake.
 */
#include <stddef.h>

#include "rdmaproto.h"

const char *rdmaPreauthVerdict(int all, int same)
{
    if (all >= RDMA_PREAUTH_MAX)
        return "too many RDMA connections in handshake";
    if (same >= RDMA_PREAUTH_MAX_PER_SOURCE)
        return "too many RDMA connections in handshake from this address";
    return NULL;
}
