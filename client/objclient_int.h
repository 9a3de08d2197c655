/*
 * objclient_int.h - private to the client library: how a transport other
 * than hiredis (objstore_rdma.c: Redis protocol over RDMA) plugs into
 * ObjClient. Not installed; programs use objstore.h.
 */
#ifndef OBJSTORE_OBJCLIENT_INT_H
#define OBJSTORE_OBJCLIENT_INT_H

#include <stddef.h>
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

#endif /* OBJSTORE_OBJCLIENT_INT_H */
