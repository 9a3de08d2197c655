/*
 * objclient_int.h - private to the client library and the Python package:
 * the transports an ObjClient runs over, one operations table each: TCP and
 * unix sockets through hiredis (connection.c) and Redis protocol over RDMA
 * (objstore_rdma.c). Not installed; programs use objstore.h.
 */
#ifndef OBJSTORE_OBJCLIENT_INT_H
#define OBJSTORE_OBJCLIENT_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include <hiredis/hiredis.h>

#include "objstore.h"

typedef struct ObjClientTransport {
    /* One command, one reply (NULL when the transport failed: see errstr). */
    redisReply *(*command)(void *conn, int argc, const char **argv, const size_t *lens);
    /* Pipelining; all three NULL when the transport has none (its commands then go one
     * by one). append queues one command (0, or -1 when out of memory); flush writes
     * what is queued (0, or -1 when the transport failed); getReply reads the next
     * reply, writing what is queued first (NULL when the transport failed). */
    int (*append)(void *conn, int argc, const char **argv, const size_t *lens);
    int (*flush)(void *conn);
    redisReply *(*getReply)(void *conn);
    /* Nonzero once the connection can carry no more commands (also for a NULL conn). */
    int (*failed)(const void *conn);
    /* Why it failed ("" or NULL when it did not). */
    const char *(*errstr)(const void *conn);
    /* Local and peer address, for the same-host check of the zero-copy calls
     * (objstore.c's clientSameHost): a transport on a channel with no address
     * that stays on this machine (a unix socket) answers loopback on both ends.
     * Returns 0, or -1 when unknown. */
    int (*addrs)(const void *conn, struct sockaddr_storage *self, struct sockaddr_storage *peer);
    /* Close the connection. Accepts NULL. */
    void (*free)(void *conn);
} ObjClientTransport;

/* The transports: conn is a hiredis redisContext (TCP or unix socket), or an
 * rdmaconn.h ObjRdmaConn. */
extern const ObjClientTransport objClientTcpTransport __attribute__((visibility("hidden")));
extern const ObjClientTransport objClientRdmaTransport __attribute__((visibility("hidden")));

/* Wrap conn (owned by the client from now on, also on failure). Returns
 * the client, with a failed connection recorded as OBJ_ERR_IO, or NULL
 * when out of memory. */
__attribute__((visibility("hidden"))) ObjClient *
objClientWrapTransport(const ObjClientTransport *tr, void *conn);

/* Puts of c never map the arena: every put travels inline in OBJ.PUT (the
 * Python package's copying mode). */
__attribute__((visibility("hidden"))) void objClientPutInline(ObjClient *c);

/* objClientCreate that also sets *gen (when not NULL) to the created object's
 * generation, 0 from a node that does not answer one. Returns 0 or -1. */
__attribute__((visibility("hidden"))) int objClientCreateGen(ObjClient *c, const void *id,
                                                             size_t idLen, size_t size,
                                                             const void *meta, size_t metaLen,
                                                             void **data, uint64_t *gen);

/* objClientSealReplicas and objClientPutPartsReplicas that also tell whether the node
 * counted the holders: *counted (may be NULL) 1 when it answered a count (an object of
 * several copies), 0 when it answered OK (one copy; *holders is then 1). Returns 0 or -1. */
__attribute__((visibility("hidden"))) int objClientSealCounted(ObjClient *c, const void *id,
                                                               size_t idLen, int replicas,
                                                               long long waitMs, int *holders,
                                                               int *counted);
__attribute__((visibility("hidden"))) int
objClientPutPartsCounted(ObjClient *c, const void *id, size_t idLen, const ObjPart *parts, size_t n,
                         size_t size, const void *meta, size_t metaLen, int replicas,
                         long long waitMs, int *holders, int *counted);

/* After objClientSeal: pin the object this client created at data with generation gen,
 * and only it (a pin of another object under id is given back: OBJ_ERR_WRONGSTATE).
 * Returns 0 with *out set, or -1 with the error recorded. */
__attribute__((visibility("hidden"))) int objClientPinCreated(ObjClient *c, const void *id,
                                                              size_t idLen, const void *data,
                                                              uint64_t gen, ObjBuffer *out);

/* Where this client maps the arena (the whole file). Returns 0, or -1 when it is not
 * mapped (yet). */
__attribute__((visibility("hidden"))) int objClientArenaRange(const ObjClient *c, void **base,
                                                              size_t *size);

#endif /* OBJSTORE_OBJCLIENT_INT_H */
