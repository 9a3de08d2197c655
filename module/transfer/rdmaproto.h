/*
 * rdmaproto.h - the RDMA transport's own rules that need no verbs: how many
 * connections that have not proved the cluster secret it lets in (judged by
 * handshake.h's one verdict). module/transfer/rdma.c does the verbs around
 * them; the unit test tests/unit/test_rdmaproto.c checks them. (The frames
 * themselves are the TCP transport's, over the stream of
 * module/rdma/stream.h.)
 */
#ifndef OBJSTORE_RDMAPROTO_H
#define OBJSTORE_RDMAPROTO_H

#include "handshake.h"

/* Incoming connections that have not proved the secret yet, overall and
 * from one address: more are rejected before anything is allocated. */
#define RDMA_PREAUTH_MAX            64
#define RDMA_PREAUTH_MAX_PER_SOURCE 8

/* Those caps, for handshakeVerdict. */
extern const HandshakeCaps rdmaPreauthCaps;

#endif /* OBJSTORE_RDMAPROTO_H */
