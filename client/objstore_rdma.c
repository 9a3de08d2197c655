/*
 * objstore_rdma.c - ObjClient over Redis protocol over RDMA: plugs an
 * rdmaconn.h connection into the client library as a transport
 * (objclient_int.h), as connection.c plugs in a hiredis one. In a file of
 * its own so that only programs calling objClientConnectRdma (or using this
 * table) pull in rdmaconn.c and need -lrdmacm -libverbs when they link the
 * static library.
 */
#include "objclient_int.h"
#include "rdmaconn.h"

#define OBJ_CLIENT_RDMA_CONNECT_MS 5000

static redisReply *rdmaTrCommand(void *conn, int argc, const char **argv, const size_t *lens)
{
    return objRdmaCommandArgv(conn, argc, argv, lens);
}

static int rdmaTrFailed(const void *conn)
{
    return objRdmaErr(conn) != 0;
}

static const char *rdmaTrErrstr(const void *conn)
{
    return objRdmaErrStr(conn);
}

static int rdmaTrAddrs(const void *conn, struct sockaddr_storage *self,
                       struct sockaddr_storage *peer)
{
    return objRdmaAddrs(conn, self, peer);
}

static void rdmaTrFree(void *conn)
{
    objRdmaFree(conn);
}

/* No pipelining (append, flush, getReply NULL): commands go one by one. */
const ObjClientTransport objClientRdmaTransport = {
    .command = rdmaTrCommand,
    .failed = rdmaTrFailed,
    .errstr = rdmaTrErrstr,
    .addrs = rdmaTrAddrs,
    .free = rdmaTrFree,
};

/*
 * Connect over RDMA to a node's rdma-client-port (addr: its RDMA address).
 * Never fails except out of memory (NULL); a failed connect is recorded as
 * OBJ_ERR_IO with rdma_cm's reason. Zero-copy calls work only when addr is
 * one of this machine's addresses (the arena file must be reachable).
 */
ObjClient *objClientConnectRdma(const char *addr, int port)
{
    ObjRdmaConn *conn = objRdmaConnect(addr, port, OBJ_CLIENT_RDMA_CONNECT_MS);

    if (conn == NULL)
        return NULL;
    return objClientWrapTransport(&objClientRdmaTransport, conn);
}
