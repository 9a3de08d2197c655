/*
 * rdmaproto.h - the RDMA transport's own rules that need no verbs, as pure
 * functions: how many connections that have not proved the cluster secret
 * it lets in. module/transfer/rdma.c does the verbs around them; the unit
 * test tests/unit/test_rdmaproto.c checks them. (The frames themselves are
 * the TCP transport's, over the stream of module/rdma/stream.h.)
 */
#ifndef OBJSTORE_RDMAPROTO_H
#define OBJSTORE_RDMAPROTO_H

/* Incoming connections that have not proved the secret yet, overall and
 * from one address: more are rejected before anything is allocated. */
#define RDMA_PREAUTH_MAX            64
#define RDMA_PREAUTH_MAX_PER_SOURCE 8

/* May one more connection start its handshake, with `all` unproved
 * incoming connections in total and `same` of them from its address?
 * Returns NULL, or why not (a static string). */
const char *rdmaPreauthVerdict(int all, int same);

#endif /* OBJSTORE_RDMAPROTO_H */
