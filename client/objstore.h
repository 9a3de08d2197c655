/*
 * objstore.h - C client library for the objstore Redis module.
 *
 * A program talks to one node (TCP or unix socket, hiredis underneath) and,
 * when it runs on the same machine, maps the node's shared-memory arena so
 * that object bytes are written and read in place: create -> pointer ->
 * seal, pin -> pointer -> release. Copying put/get variants work from any
 * machine. The context is opaque; every call returns 0 on success and -1 on
 * error, and the error is read with objClientErrCode()/objClientErrMsg().
 */
#ifndef OBJSTORE_CLIENT_H
#define OBJSTORE_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes: the first word of the server's error reply, or a local cause. */
typedef enum ObjErr {
    OBJ_OK = 0,
    OBJ_ERR_IO,         /* connection or protocol failure (hiredis) */
    OBJ_ERR_MAP,        /* the arena could not be mapped (remote node, permissions) */
    OBJ_ERR_BADARG,     /* BADARG */
    OBJ_ERR_NOTFOUND,   /* NOTFOUND */
    OBJ_ERR_EXISTS,     /* EXISTS */
    OBJ_ERR_OOM,        /* OOM */
    OBJ_ERR_NOTSEALED,  /* NOTSEALED */
    OBJ_ERR_WRONGSTATE, /* WRONGSTATE */
    OBJ_ERR_TIMEOUT,    /* TIMEOUT */
    OBJ_ERR_OTHER       /* any other server error */
} ObjErr;

typedef struct ObjClient ObjClient;

/* A zero-copy view of a pinned object; valid until objClientRelease(). */
typedef struct ObjBuffer {
    const void *data;
    size_t size;
    const void *meta;
    size_t metaSize;
} ObjBuffer;

/* Connect; always returns a context (NULL only when out of memory). Check
 * objClientErrCode() before use; free it with objClientFree() either way. */
ObjClient *objClientConnect(const char *host, int port);
ObjClient *objClientConnectUnix(const char *path);
/* Over RDMA to the node's rdma-client-port (addr: the node's RDMA address).
 * The copying calls work from anywhere; create/pin only on the node's machine. */
ObjClient *objClientConnectRdma(const char *addr, int port);
void objClientFree(ObjClient *c); /* accepts NULL; unmaps the arena */

ObjErr objClientErrCode(const ObjClient *c);
const char *objClientErrMsg(const ObjClient *c); /* "" when there is no error */

/* Reserve size bytes; *data points at them inside the mapped arena. */
int objClientCreate(ObjClient *c, const void *id, size_t idLen, size_t size, const void *meta,
                    size_t metaLen, void **data);
int objClientSeal(ObjClient *c, const void *id, size_t idLen);
int objClientAbort(ObjClient *c, const void *id, size_t idLen);

/* Pin a sealed object (waiting up to timeoutMs for it; 0 = do not wait for
 * a missing id, -1 = wait forever) and point *out into the arena. */
int objClientPin(ObjClient *c, const void *id, size_t idLen, long long timeoutMs, ObjBuffer *out);
int objClientRelease(ObjClient *c, const void *id, size_t idLen);

/* Copying variants: bytes travel through the Redis connection. */
int objClientPut(ObjClient *c, const void *id, size_t idLen, const void *data, size_t size,
                 const void *meta, size_t metaLen);
/* *data is malloc'ed (free with objClientFreeData); timeout as objClientPin. */
int objClientGet(ObjClient *c, const void *id, size_t idLen, long long timeoutMs, void **data,
                 size_t *size);
void objClientFreeData(void *data);

int objClientDelete(ObjClient *c, const void *id, size_t idLen);
/* *exists is set to 1 when the object is sealed and present, else 0. */
int objClientExists(ObjClient *c, const void *id, size_t idLen, int *exists);

/* Pull remote objects into this node (OBJ.FETCH); timeoutMs <= 0: server default. */
int objClientFetch(ObjClient *c, const void *id, size_t idLen, long long timeoutMs);

/* Object description from OBJ.INFO. */
typedef struct ObjInfo {
    uint64_t size;
    uint64_t metaSize;
    uint64_t offset;
    uint64_t pins;
    uint64_t checksum;
    int sealed;
} ObjInfo;
int objClientInfo(ObjClient *c, const void *id, size_t idLen, ObjInfo *info);

#ifdef __cplusplus
}
#endif

#endif /* OBJSTORE_CLIENT_H */
