/*
 * connection.c - the client library's connections: the TCP transport (a
 * hiredis context, over TCP or a unix socket) as an operations table like
 * the RDMA one (objstore_rdma.c), and the life of an ObjClient around a
 * transport: connect, wrap, the error accessors, free.
 */
#include "objstore.h"
#include "objalloc.h"
#include "objclient_core.h"

#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include <hiredis/hiredis.h>

/* ---- the TCP transport ------------------------------------------------------------------ */

/* The operations of objclient_int.h over a hiredis context: thin shims. */
static redisReply *tcpCommand(void *conn, int argc, const char **argv, const size_t *lens)
{
    return redisCommandArgv(conn, argc, argv, lens);
}

static int tcpAppend(void *conn, int argc, const char **argv, const size_t *lens)
{
    return redisAppendCommandArgv(conn, argc, argv, lens) == REDIS_OK ? 0 : -1;
}

/* Write everything queued. Returns 0, or -1 when the connection failed. */
static int tcpFlush(void *conn)
{
    int done = 0;

    while (!done)
        if (redisBufferWrite(conn, &done) != REDIS_OK)
            return -1;
    return 0;
}

static redisReply *tcpGetReply(void *conn)
{
    redisReply *r = NULL;

    if (redisGetReply(conn, (void **)&r) != REDIS_OK)
        return NULL;
    return r;
}

/* A NULL context is one hiredis could not allocate: failed too. */
static int tcpFailed(const void *conn)
{
    return conn == NULL || ((const redisContext *)conn)->err != 0;
}

static const char *tcpErrstr(const void *conn)
{
    if (conn == NULL)
        return "no connection (out of memory when connecting)";
    return ((const redisContext *)conn)->errstr;
}

/* A unix socket is this machine: it answers loopback on both ends, which the
 * same-host rule (objstore.c) takes for this machine. Returns 0 or -1. */
static int tcpAddrs(const void *conn, struct sockaddr_storage *self, struct sockaddr_storage *peer)
{
    const redisContext *rc = conn;
    socklen_t selfLen = sizeof(*self), peerLen = sizeof(*peer);

    if (rc->connection_type == REDIS_CONN_UNIX) {
        struct sockaddr_in lo = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

        memset(self, 0, sizeof(*self));
        memset(peer, 0, sizeof(*peer));
        memcpy(self, &lo, sizeof(lo));
        memcpy(peer, &lo, sizeof(lo));
        return 0;
    }
    if (getsockname(rc->fd, (struct sockaddr *)self, &selfLen) < 0 ||
        getpeername(rc->fd, (struct sockaddr *)peer, &peerLen) < 0)
        return -1;
    return 0;
}

static void tcpFree(void *conn)
{
    redisFree(conn);
}

const ObjClientTransport objClientTcpTransport = {
    .command = tcpCommand,
    .append = tcpAppend,
    .flush = tcpFlush,
    .getReply = tcpGetReply,
    .failed = tcpFailed,
    .errstr = tcpErrstr,
    .addrs = tcpAddrs,
    .free = tcpFree,
};

/* ---- connection ----------------------------------------------------------------------------- */

/* Connect over TCP (a NULL host is 127.0.0.1). Never fails except out of memory (NULL). */
ObjClient *objClientConnect(const char *host, int port)
{
    return objClientWrapTransport(&objClientTcpTransport,
                                  redisConnect(host ? host : "127.0.0.1", port));
}

/* Connect over a unix socket. Never fails except out of memory (NULL). */
ObjClient *objClientConnectUnix(const char *path)
{
    return objClientWrapTransport(&objClientTcpTransport, redisConnectUnix(path ? path : ""));
}

/*
 * Wrap a connection of a transport (objclient_int.h; NULL: one that could not
 * be allocated); the client owns it from now on. Returns the client with a
 * failed connect recorded, or NULL when out of memory (the connection is
 * freed then).
 */
ObjClient *objClientWrapTransport(const ObjClientTransport *tr, void *conn)
{
    ObjClient *c = objCalloc(1, sizeof(*c));

    if (c == NULL) {
        tr->free(conn);
        return NULL;
    }
    c->tr = tr;
    c->conn = conn;
    if (tr->failed(conn))
        clientFailIo(c);
    else
        clientOk(c);
    return c;
}

/* Give back the pin cache's pins (one pipelined batch), close the
 * connection and unmap the arena. Accepts NULL. Can't fail. */
void objClientFree(ObjClient *c)
{
    if (c == NULL)
        return;
    pinDrop(c); /* the server would drop them at disconnect too, but later */
    if (c->arenaBase != NULL)
        munmap(c->arenaBase, c->arenaSize);
    objFree(c->arenaPath);
    c->tr->free(c->conn);
    objFree(c);
}

/* The last call's error code; OBJ_OK after a success. A NULL client is an I/O error. */
ObjErr objClientErrCode(const ObjClient *c)
{
    return c ? c->err : OBJ_ERR_IO;
}

/* The last call's error message; "" after a success. Never NULL. */
const char *objClientErrMsg(const ObjClient *c)
{
    return c ? c->errstr : "no client (out of memory when connecting)";
}
