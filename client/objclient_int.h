/*
 * objclient_int.h - private to the client library: how a transport other
 * than hiredis (objstore_rdma.c: Redis protocol over RDMA) plugs into
 * ObjClient. Not installed; programs use objstore.h.
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
    /* Nonzero once the connection can carry no more commands. */
    int (*failed)(const void *conn);
    /* Why it failed ("" or NULL when it did not). */
    const char *(*errstr)(const void *conn);
    /* Local and peer address, for the same-host check of the zero-copy
     * calls. Returns 0, or -1 when unknown. */
    int (*addrs)(const void *conn, struct sockaddr_storage *self, struct sockaddr_storage *peer);
    void (*free)(void *conn);
} ObjClientTransport;

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
