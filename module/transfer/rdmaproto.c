/*
 * rdmaproto.c - the RDMA transport's pure rules (rdmaproto.h): the caps on
 * connections still in their handshake.
 */
#include "rdmaproto.h"

const HandshakeCaps rdmaPreauthCaps = {
    .max = RDMA_PREAUTH_MAX,
    .maxPerSource = RDMA_PREAUTH_MAX_PER_SOURCE,
    .whyMax = "too many RDMA connections in handshake",
    .whyPerSource = "too many RDMA connections in handshake from this address",
};
