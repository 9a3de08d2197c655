/*
 * rdmaconn.h - the Redis protocol over RDMA, client side: a byte-stream
 * connection in the public Valkey Over RDMA protocol (module/rdma/stream.h
 * carries it), so it talks to an objstore node's rdma-client-port and to a
 * Valkey server with RDMA alike.
 *
 * Two layers share one connection object:
 *   - a synchronous, hiredis-style API (objRdmaCommand, pipelining with
 *     objRdmaAppendCommand + objRdmaGetReply) whose replies are ordinary
 *     hiredis redisReply objects (free them with freeReplyObject);
 *   - a non-blocking byte layer for event loops: objRdmaFd gives one
 *     pollable descriptor (readable when there is RDMA work to look at),
 *     objRdmaProcess drains it, objRdmaWrite/objRdmaRead move RESP bytes
 *     like write(2)/read(2) on a non-blocking socket.
 * The context is opaque; errors are read with objRdmaErr/objRdmaErrStr. A
 * context is not thread-safe: use one per thread (any number per process).
 * Link with -lhiredis -lrdmacm -libverbs.
 */
#ifndef OBJSTORE_RDMACONN_H
#define OBJSTORE_RDMACONN_H

#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <hiredis/hiredis.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes; the values match hiredis' REDIS_ERR_* where the meaning does. */
typedef enum ObjRdmaErrCode {
    OBJ_RDMA_OK = 0,
    OBJ_RDMA_ERR_IO = 1,       /* a verbs or rdma_cm call failed, or a work request did */
    OBJ_RDMA_ERR_OTHER = 2,    /* bad argument, unusable address */
    OBJ_RDMA_ERR_EOF = 3,      /* the server closed the connection */
    OBJ_RDMA_ERR_PROTOCOL = 4, /* the reply stream is not RESP */
    OBJ_RDMA_ERR_OOM = 5,      /* out of memory */
    OBJ_RDMA_ERR_TIMEOUT = 6   /* connect or reply timeout */
} ObjRdmaErrCode;

typedef struct ObjRdmaConn ObjRdmaConn;

/* Connect to addr:port (IPv4 address or host name) within timeoutMs (<= 0:
 * 5000). Returns a context, NULL only when out of memory; check
 * objRdmaErr() before use and free it with objRdmaFree() either way. */
ObjRdmaConn *objRdmaConnect(const char *addr, int port, int timeoutMs);
/* Close the connection (flushing the queue pair first) and free it. Accepts NULL. */
void objRdmaFree(ObjRdmaConn *c);

/* The sticky error: once set, every call fails. 0 / "" when none. While
 * the connection has ended but arrived data is still to be read, the code
 * is 0 and the string says why it ended. */
int objRdmaErr(const ObjRdmaConn *c);
const char *objRdmaErrStr(const ObjRdmaConn *c);

/* How long the synchronous calls wait for progress (ms; 0 = forever, the
 * default). Returns 0, or -1 for a negative value. */
int objRdmaSetTimeout(ObjRdmaConn *c, int timeoutMs);

/* ---- synchronous API (hiredis-style) ---- */

/* Send a command formatted like redisCommand and wait for its reply.
 * Returns the reply, or NULL with the error set. */
redisReply *objRdmaCommand(ObjRdmaConn *c, const char *fmt, ...);
redisReply *objRdmaCommandArgv(ObjRdmaConn *c, int argc, const char **argv, const size_t *argvlen);
/* Queue a command without waiting; replies come back in order from
 * objRdmaGetReply. Return 0, or -1 with the error set. */
int objRdmaAppendCommand(ObjRdmaConn *c, const char *fmt, ...);
int objRdmaAppendCommandArgv(ObjRdmaConn *c, int argc, const char **argv, const size_t *argvlen);
/* Send what is queued and wait for the next reply. Returns 0 with *reply
 * set (free with freeReplyObject), or -1 with the error set. */
int objRdmaGetReply(ObjRdmaConn *c, void **reply);

/* ---- non-blocking layer for event loops ---- */

/* One descriptor that becomes readable when objRdmaProcess or objRdmaRead has
 * work (completions, a disconnect, arrived bytes not yet read). It never
 * signals writability: retry writes after processing. */
int objRdmaFd(const ObjRdmaConn *c);
/* Drain completions and connection events without blocking. Returns 0, or
 * -1 when the connection failed or closed (the error says which). */
int objRdmaProcess(ObjRdmaConn *c);
/* Send up to len bytes of the request stream as the server's receive buffer
 * and our staging buffer allow. Returns the bytes accepted (> 0), or -1 with errno EAGAIN (nothing
 * could be taken now: process and retry) or EIO/EPIPE (connection failed). */
ssize_t objRdmaWrite(ObjRdmaConn *c, const void *buf, size_t len);
/* Copy up to cap bytes of the reply stream that have arrived. Returns the
 * bytes copied (> 0); 0 with errno EAGAIN when none are there yet; -1 with
 * errno EPIPE (closed) or EIO (failed) once everything was read. */
ssize_t objRdmaRead(ObjRdmaConn *c, void *buf, size_t cap);
/* Bytes of the synchronous layer's queue not yet handed to the stream; 0
 * when everything is on its way. */
size_t objRdmaPendingWrite(const ObjRdmaConn *c);

/* The connection's local and peer IPv4/IPv6 addresses (for same-host
 * checks). Returns 0, or -1 when not connected. */
int objRdmaAddrs(const ObjRdmaConn *c, struct sockaddr_storage *local,
                 struct sockaddr_storage *peer);

#ifdef __cplusplus
}
#endif

#endif /* OBJSTORE_RDMACONN_H */
