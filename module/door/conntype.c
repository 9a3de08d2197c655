/*
 * conntype.c - Redis clients over RDMA as real Redis clients: Redis 7.0's
 * ConnectionType on the RDMA stream endpoint (rdma/stream.h), and the
 * accept path that turns every accepted stream into a client made by
 * Redis's own createClient. The one file compiled against Redis's server.h
 * (build/redis-server-src), so it never sees the module API. Why it must,
 * how readiness is kept level-triggered in Redis's event loop, and the
 * lifetimes of links and connections: docs/rdma.md.
 */
/* server.h defines _GNU_SOURCE itself (fmacros.h), before any system header. */
#undef _GNU_SOURCE
#include "server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/list.h"
#include "rdma/stream.h"
#include "rdma/streamproto.h"
#include "conntype.h"

/* From Redis's cluster.h, which the layering check keeps out: the one
 * function needed. */
unsigned long getClusterConnectionsCount(void);

/* ---- tunables ---------------------------------------------------------------------------- */

#define DOOR_RX_UNAUTH SP_RX_MIN /* RX buffer until the client is authenticated */
#define DOOR_HANDSHAKE_MIN                                                                         \
    64 /* accepted streams not yet Redis clients: tcp-backlog, at least this */
#define DOOR_HANDSHAKE_MS   10000 /* connect request to a Redis client */
#define DOOR_LINGER_MS      2000  /* a closed connection's last bytes */
#define DOOR_LINGER_READ_MS 100   /* ... and the peer's time to read them */
#define DOOR_SWEEP_MS       1000  /* keepalives, deadlines */
#define DOOR_CM_BATCH       64    /* rdma_cm events per loop iteration */
#define DOOR_CONN_TYPE      3     /* connGetType: neither socket (1) nor TLS (2) */

/* ---- context ---------------------------------------------------------------------------- */

typedef enum DoorPhase {
    DOOR_HANDSHAKE = 0, /* accepted; waiting for ESTABLISHED and the peer's RX buffer */
    DOOR_CLIENT = 1,    /* a Redis client holds it */
    DOOR_LINGER = 2     /* closed by Redis or refused; last bytes on their way */
} DoorPhase;

typedef struct DoorConn DoorConn;

typedef struct DoorLink {
    RdmaStream *s;
    int fd; /* the stream's completion channel, watched in server.el */
    DoorPhase phase;
    DoorConn *conn;        /* DOOR_CLIENT: the Redis connection */
    uint64_t deadlineMs;   /* handshake or linger deadline */
    uint64_t sweepGen;     /* the last doorSweep that served it */
    uint64_t sentMs;       /* linger: when the last byte was acknowledged */
    int grown;             /* RX buffer grown after authentication */
    int deadLogged;        /* the stream's end was logged and counted */
    char addr[64];         /* the peer, "ip:port", for logs */
    ObjListLink link;      /* door.links */
    ObjListLink readyLink; /* door.ready; self-linked when not ready */
} DoorLink;

/* The connection Redis sees. `c` must stay first: Redis holds &c. */
struct DoorConn {
    connection c;
    DoorLink *link; /* NULL once Redis closed it */
    int eofSeen;    /* connRead reported the end: never report it twice */
    char err[160];  /* connGetLastError once the stream ended */
};

static struct {
    int running;
    struct rdma_event_channel *ec;
    struct rdma_cm_id *listenId;
    uint32_t rxSize;
    ObjList links; /* every DoorLink */
    ObjList ready; /* links to serve from the kick timer, in order */
    unsigned readyCount, handshakes;
    unsigned linkCount; /* door.links: a descriptor each (the completion channel) */
    uint64_t linkFrees; /* links freed so far: a walk's check */
    uint64_t sweepGen;  /* the current or last doorSweep */
    long long kickId, sweepId;
    int kickArmed, sweepArmed;
    DoorStats st;
} door;

static ConnectionType doorType;

/* ---- small helpers ----------------------------------------------------------------------- */

/* doorNowMs: a monotonic clock in ms. Can't fail. */
static uint64_t doorNowMs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* doorFormatAddr: "ip:port" of sa into out ("?:0" when unknown). */
static void doorFormatAddr(const struct sockaddr *sa, char *out, size_t outLen)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
        port = ntohs(in->sin_port);
    } else if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
        port = ntohs(in6->sin6_port);
    }
    snprintf(out, outLen, "%s:%d", ip, port);
}

/* doorPeerIsLoopback: Redis's islocalClient rule for our peer: the address
 * is exactly 127.0.0.1 or ::1. */
static int doorPeerIsLoopback(const RdmaStream *s)
{
    const struct sockaddr *sa = rdmaStreamPeerAddr(s);
    char ip[INET6_ADDRSTRLEN] = "";
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, ip, sizeof(ip));
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, ip, sizeof(ip));
    return !strcmp(ip, "127.0.0.1") || !strcmp(ip, "::1");
}

/* doorAddrSocket: the descriptor that stands for the connection in Redis
 * (conn->fd). Redis reads a client's addresses with getpeername and
 * getsockname on conn->fd (CLIENT LIST addr/laddr, CLIENT KILL ADDR, the
 * module API's client info, replica names), and applies socket options to
 * it (TCP_NODELAY, keepalive). A UDP socket bound to our RDMA address and
 * port and connected to the peer's RDMA address answers both calls with the
 * RDMA addresses, and takes or harmlessly refuses the options; it never
 * carries a byte and is never watched (SO_REUSEADDR lets every client bind
 * the door's port; if that fails, an ephemeral port). Returns the
 * descriptor, or -1 with errno (out of descriptors). */
static int doorAddrSocket(const RdmaStream *s)
{
    const struct sockaddr *local = rdmaStreamLocalAddr(s), *peer = rdmaStreamPeerAddr(s);
    if (!local || !peer || (peer->sa_family != AF_INET && peer->sa_family != AF_INET6)) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    socklen_t len =
        peer->sa_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    int fd = socket(peer->sa_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    int one = 1, small = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    struct sockaddr_storage bindTo;
    memcpy(&bindTo, local, len);
    if (local->sa_family == peer->sa_family && bind(fd, (struct sockaddr *)&bindTo, len) < 0) {
        if (bindTo.ss_family == AF_INET)
            ((struct sockaddr_in *)&bindTo)->sin_port = 0;
        else
            ((struct sockaddr_in6 *)&bindTo)->sin6_port = 0;
        if (bind(fd, (struct sockaddr *)&bindTo, len) < 0)
            serverLog(LL_VERBOSE, "RDMA clients: cannot bind the address socket: %s",
                      strerror(errno));
    }
    if (connect(fd, peer, len) < 0)
        serverLog(LL_VERBOSE, "RDMA clients: cannot connect the address socket: %s",
                  strerror(errno));
    return fd;
}

/* ---- the ready list ---------------------------------------------------------------------- */

static int doorKick(struct aeEventLoop *el, long long id, void *data);

/* doorReadyAdd / doorReadyRemove: put a link on the ready list (served by
 * the 0 ms kick timer) or take it off. Can't fail (a timer that cannot be
 * created is retried by the sweep). */
static void doorReadyAdd(DoorLink *l)
{
    if (!objListEmpty(&l->readyLink))
        return;
    objListPushBack(&door.ready, &l->readyLink);
    door.readyCount++;
    if (!door.kickArmed) {
        door.kickId = aeCreateTimeEvent(server.el, 0, doorKick, NULL, NULL);
        door.kickArmed = door.kickId != AE_ERR;
    }
}

static void doorReadyRemove(DoorLink *l)
{
    if (objListEmpty(&l->readyLink))
        return;
    objListUnlink(&l->readyLink);
    door.readyCount--;
}

/* doorWantsService: whether a link has something to do without a new
 * event: a Redis handler that a socket's level-triggered poll would call,
 * or a lingering stream to finish. */
static int doorWantsService(const DoorLink *l)
{
    if (l->phase == DOOR_LINGER)
        return 1;
    if (l->phase != DOOR_CLIENT || !l->conn)
        return 0;
    const connection *c = &l->conn->c;
    int dead = rdmaStreamGetState(l->s) >= RDMA_STREAM_CLOSED && !l->conn->eofSeen;
    if (c->read_handler && (rdmaStreamReadable(l->s) || dead))
        return 1;
    return c->write_handler && (rdmaStreamWritable(l->s) || dead);
}

/* ---- links ------------------------------------------------------------------------------- */

/* doorLinkFree: release a link and its stream (rdmaStreamFree disconnects
 * and flushes before freeing). Only for links no connection holds. */
static void doorLinkFree(DoorLink *l)
{
    doorReadyRemove(l);
    objListUnlink(&l->link);
    door.linkCount--;
    door.linkFrees++;
    if (l->phase == DOOR_HANDSHAKE)
        door.handshakes--;
    if (l->fd >= 0)
        aeDeleteFileEvent(server.el, l->fd, AE_READABLE);
    rdmaStreamFree(l->s);
    zfree(l);
}

/* doorLinger: the connection is done (closed by Redis, or refused): let
 * what was written reach the peer, then free the link (doorServe). */
static void doorLinger(DoorLink *l)
{
    if (l->phase == DOOR_HANDSHAKE)
        door.handshakes--;
    l->phase = DOOR_LINGER;
    l->conn = NULL;
    l->deadlineMs = doorNowMs() + DOOR_LINGER_MS;
    doorReadyAdd(l);
}

/* doorNoteEnd: log and count a stream's end once (failures at warning: a
 * peer broke the protocol or the transport failed). */
static void doorNoteEnd(DoorLink *l)
{
    RdmaStreamState st = rdmaStreamGetState(l->s);
    if (l->deadLogged || st < RDMA_STREAM_CLOSED)
        return;
    l->deadLogged = 1;
    if (st == RDMA_STREAM_FAILED) {
        door.st.streamErrors++;
        serverLog(LL_WARNING, "RDMA clients: %s: %s", l->addr, rdmaStreamError(l->s));
    } else {
        serverLog(LL_VERBOSE, "RDMA clients: %s: %s", l->addr, rdmaStreamError(l->s));
    }
}

/* ---- the connection type ----------------------------------------------------------------- */

static void doorConnClose(connection *conn);

/* doorCallHandler: connhelpers.h's callHandler: hold a reference while the
 * handler runs; if it closed the connection, finish the close once the
 * last reference is gone. Returns 1 if the connection is still usable, 0
 * if it was closed (then it must not be touched). */
static int doorCallHandler(connection *conn, ConnectionCallbackFunc handler)
{
    conn->refs++;
    if (handler)
        handler(conn);
    conn->refs--;
    if (conn->flags & CONN_FLAG_CLOSE_SCHEDULED) {
        if (!conn->refs)
            doorConnClose(conn);
        return 0;
    }
    return 1;
}

/* doorConnEnded: the stream can carry nothing more: set the connection's
 * state and keep the reason for connGetLastError. Returns the value a
 * read or write returns then: 0 for a clean close (reads only), else -1. */
static int doorConnEnded(DoorConn *dc, int reading)
{
    RdmaStream *s = dc->link->s;
    snprintf(dc->err, sizeof(dc->err), "%s", rdmaStreamError(s));
    doorNoteEnd(dc->link);
    if (reading && rdmaStreamGetState(s) == RDMA_STREAM_CLOSED) {
        dc->eofSeen = 1;
        dc->c.state = CONN_STATE_CLOSED;
        return 0;
    }
    if (reading)
        dc->eofSeen = 1;
    dc->c.last_errno = ECONNRESET;
    if (dc->c.state == CONN_STATE_CONNECTED)
        dc->c.state = CONN_STATE_ERROR;
    return -1;
}

/* The read(2) of the connection: ready bytes, else -1 with EAGAIN while the
 * stream is open, 0 once the peer closed (after every byte it sent), -1
 * when it failed. */
static int doorConnRead(connection *conn, void *buf, size_t len)
{
    DoorConn *dc = (DoorConn *)conn;
    if (!dc->link) {
        conn->last_errno = EBADF;
        return -1;
    }
    RdmaStream *s = dc->link->s;
    if (rdmaStreamGetState(s) == RDMA_STREAM_FAILED)
        return doorConnEnded(dc, 1);
    if (len > INT_MAX)
        len = INT_MAX;
    size_t n = rdmaStreamRead(s, buf, len);
    if (n)
        return (int)n;
    if (rdmaStreamGetState(s) >= RDMA_STREAM_CLOSED)
        return doorConnEnded(dc, 1);
    conn->last_errno = EAGAIN;
    return -1;
}

/* The write(2) of the connection: what the stream takes now (copied into
 * its staging buffer and posted), -1 with EAGAIN when it has no room (the
 * write handler is called when room comes back), -1 when it ended. */
static int doorConnWrite(connection *conn, const void *data, size_t len)
{
    DoorConn *dc = (DoorConn *)conn;
    if (!dc->link) {
        conn->last_errno = EBADF;
        return -1;
    }
    if (len > INT_MAX)
        len = INT_MAX;
    ssize_t n = rdmaStreamWrite(dc->link->s, data, len);
    if (n < 0)
        return doorConnEnded(dc, 0);
    if (n == 0) {
        conn->last_errno = EAGAIN;
        return -1;
    }
    return (int)n;
}

/* The writev(2) of the connection: the reply blocks are gathered straight
 * into the stream's staging buffer (one copy; one RDMA write per span of
 * room, not one per block), as far as the peer's buffer allows. Returns as
 * doorConnWrite. */
static int doorConnWritev(connection *conn, const struct iovec *iov, int iovcnt)
{
    DoorConn *dc = (DoorConn *)conn;
    if (!dc->link) {
        conn->last_errno = EBADF;
        return -1;
    }
    ssize_t n = rdmaStreamWritev(dc->link->s, iov, iovcnt);
    if (n < 0)
        return doorConnEnded(dc, 0);
    if (n == 0) {
        conn->last_errno = EAGAIN;
        return -1;
    }
    return (int)n;
}

/* connClose: detach the stream (it lingers until its last bytes are
 * delivered) and free the connection, or only mark it while a handler
 * still runs on it (the handler's caller finishes the close). */
static void doorConnClose(connection *conn)
{
    DoorConn *dc = (DoorConn *)conn;
    if (dc->link) {
        DoorLink *l = dc->link;
        dc->link = NULL;
        door.st.connected--;
        doorLinger(l);
    }
    if (conn->fd >= 0) {
        close(conn->fd);
        conn->fd = -1;
    }
    if (conn->refs) {
        conn->flags |= CONN_FLAG_CLOSE_SCHEDULED;
        return;
    }
    zfree(dc);
}

/* connAccept: the stream is already established when Redis gets the
 * connection; run the accept handler at once, as a socket does. Returns
 * C_OK, or C_ERR if the handler closed the connection. */
static int doorConnAccept(connection *conn, ConnectionCallbackFunc handler)
{
    if (conn->state != CONN_STATE_ACCEPTING)
        return C_ERR;
    conn->state = CONN_STATE_CONNECTED;
    conn->refs++;
    int ok = doorCallHandler(conn, handler);
    conn->refs--;
    return ok ? C_OK : C_ERR;
}

/* Handlers: stored; the ready list calls them when the stream is readable
 * or writable (doorWantsService). Can't fail. */
static int doorConnSetWriteHandler(connection *conn, ConnectionCallbackFunc func, int barrier)
{
    DoorConn *dc = (DoorConn *)conn;
    if (func == conn->write_handler)
        return C_OK;
    conn->write_handler = func;
    if (barrier)
        conn->flags |= CONN_FLAG_WRITE_BARRIER;
    else
        conn->flags &= ~CONN_FLAG_WRITE_BARRIER;
    if (dc->link && doorWantsService(dc->link))
        doorReadyAdd(dc->link);
    return C_OK;
}

static int doorConnSetReadHandler(connection *conn, ConnectionCallbackFunc func)
{
    DoorConn *dc = (DoorConn *)conn;
    if (func == conn->read_handler)
        return C_OK;
    conn->read_handler = func;
    if (dc->link && doorWantsService(dc->link))
        doorReadyAdd(dc->link);
    return C_OK;
}

static const char *doorConnGetLastError(connection *conn)
{
    DoorConn *dc = (DoorConn *)conn;
    return dc->err[0] ? dc->err : strerror(conn->last_errno);
}

/* Outgoing connections and the synchronous calls are for replication and
 * cluster links, which never use this type: refused. */
static int doorConnConnect(connection *conn, const char *addr, int port, const char *src,
                           ConnectionCallbackFunc handler)
{
    conn->state = CONN_STATE_ERROR;
    conn->last_errno = ENOTSUP;
    return C_ERR;
}

static int doorConnBlockingConnect(connection *conn, const char *addr, int port, long long timeout)
{
    conn->state = CONN_STATE_ERROR;
    conn->last_errno = ENOTSUP;
    return C_ERR;
}

static ssize_t doorConnSyncIo(connection *conn, char *ptr, ssize_t size, long long timeout)
{
    conn->last_errno = ENOTSUP;
    errno = ENOTSUP;
    return -1;
}

static int doorConnGetType(connection *conn)
{
    return DOOR_CONN_TYPE;
}

static void doorOnStreamEvent(struct aeEventLoop *el, int fd, void *data, int mask);

static ConnectionType doorType = {
    .ae_handler = doorOnStreamEvent,
    .connect = doorConnConnect,
    .write = doorConnWrite,
    .writev = doorConnWritev,
    .read = doorConnRead,
    .close = doorConnClose,
    .accept = doorConnAccept,
    .set_write_handler = doorConnSetWriteHandler,
    .set_read_handler = doorConnSetReadHandler,
    .get_last_error = doorConnGetLastError,
    .blocking_connect = doorConnBlockingConnect,
    .sync_write = doorConnSyncIo,
    .sync_read = doorConnSyncIo,
    .sync_readline = doorConnSyncIo,
    .get_type = doorConnGetType,
};

/* ---- admission: networking.c's acceptCommonHandler and clientAcceptHandler ---------------- */

/* Redis's own text for a non-loopback client in protected mode. */
static const char doorDenied[] =
    "-DENIED Redis is running in protected mode because protected "
    "mode is enabled and no password is set for the default user. "
    "In this mode connections are only accepted from the loopback interface. "
    "If you want to connect from external computers to Redis you "
    "may adopt one of the following solutions: "
    "1) Just disable protected mode sending the command "
    "'CONFIG SET protected-mode no' from the loopback interface "
    "by connecting to Redis from the same host the server is "
    "running, however MAKE SURE Redis is not publicly accessible "
    "from internet if you do so. Use CONFIG REWRITE to make this "
    "change permanent. "
    "2) Alternatively you can just disable the protected mode by "
    "editing the Redis configuration file, and setting the protected "
    "mode option to 'no', and then restarting the server. "
    "3) If you started the server manually just for testing, restart "
    "it with the '--protected-mode no' option. "
    "4) Setup a an authentication password for the default user. "
    "NOTE: You only need to do one of the above things in order for "
    "the server to start accepting connections from the outside.\r\n";

/* doorClientAccepted: the accept handler (clientAcceptHandler's checks):
 * protected mode refuses a non-loopback peer when the default user has no
 * password; otherwise the connection counts and modules hear of it. */
static void doorClientAccepted(connection *conn)
{
    DoorConn *dc = (DoorConn *)conn;
    client *c = connGetPrivateData(conn);

    if (connGetState(conn) != CONN_STATE_CONNECTED) {
        serverLog(LL_WARNING, "Error accepting a client connection: %s", connGetLastError(conn));
        freeClientAsync(c);
        return;
    }
    if (server.protected_mode && (DefaultUser->flags & USER_FLAG_NOPASS) &&
        !doorPeerIsLoopback(dc->link->s)) {
        if (connWrite(conn, doorDenied, strlen(doorDenied)) == -1) {
            /* best effort, as for a socket */
        }
        server.stat_rejected_conn++;
        door.st.rejected++;
        freeClientAsync(c);
        return;
    }
    server.stat_numconnections++;
    moduleFireServerEvent(REDISMODULE_EVENT_CLIENT_CHANGE,
                          REDISMODULE_SUBEVENT_CLIENT_CHANGE_CONNECTED, c);
}

/* doorDescriptors: what maxclients bounds, in descriptors: Redis's clients
 * (an RDMA client's is its address socket) and cluster links, plus one per
 * door link (its completion channel: clients, handshakes and lingering
 * closes alike). An RDMA client so costs two, and a link in its handshake
 * one, as a TCP client costs one. Can't fail. */
static unsigned long doorDescriptors(void)
{
    return listLength(server.clients) + getClusterConnectionsCount() + door.linkCount;
}

/* doorAdmit: the stream is open and the peer's RX buffer known, so a reply
 * can be written: apply maxclients to the descriptors it would hold (its
 * link is counted already; its address socket would be one more: Redis's
 * error text, then close), make the connection and the Redis client, and
 * accept it. */
static void doorAdmit(DoorLink *l)
{
    if (doorDescriptors() + 1 > (unsigned long)server.maxclients) {
        const char *err = server.cluster_enabled
                              ? "-ERR max number of clients + cluster connections reached\r\n"
                              : "-ERR max number of clients reached\r\n";
        if (rdmaStreamWrite(l->s, err, strlen(err)) < 0) {
            /* best effort, as for a socket */
        }
        server.stat_rejected_conn++;
        door.st.rejected++;
        serverLog(LL_VERBOSE, "RDMA clients: %s: refused, maxclients reached", l->addr);
        doorLinger(l);
        return;
    }
    int fd = doorAddrSocket(l->s);
    if (fd < 0) {
        serverLog(LL_WARNING, "RDMA clients: %s: refused, no descriptor for it: %s", l->addr,
                  strerror(errno));
        door.st.rejected++;
        doorLinger(l);
        return;
    }
    DoorConn *dc = zcalloc(sizeof(*dc));
    dc->c.type = &doorType;
    dc->c.state = CONN_STATE_ACCEPTING;
    dc->c.fd = fd;
    dc->link = l;
    door.handshakes--;
    l->phase = DOOR_CLIENT;
    l->conn = dc;
    door.st.connected++;
    door.st.total++;
    client *c = createClient(&dc->c);
    if (!c) {
        serverLog(LL_WARNING, "RDMA clients: %s: cannot create a client", l->addr);
        connClose(&dc->c);
        return;
    }
    if (connAccept(&dc->c, doorClientAccepted) == C_ERR) {
        if (connGetState(&dc->c) == CONN_STATE_ERROR)
            serverLog(LL_WARNING, "Error accepting a client connection: %s",
                      connGetLastError(&dc->c));
        freeClient(connGetPrivateData(&dc->c));
    }
}

/* ---- serving a link ---------------------------------------------------------------------- */

/* doorServeClient: call the Redis handlers the stream's state asks for, in
 * the order a socket would (read then write, reversed under a write
 * barrier); report a dead stream through them (EOF or error from connRead
 * or connWrite, so Redis frees the client as for a socket), or free the
 * client directly when it has no handler installed. */
static void doorServeClient(DoorLink *l)
{
    DoorConn *dc = l->conn;
    connection *conn = &dc->c;
    RdmaStream *s = l->s;
    int dead = rdmaStreamGetState(s) >= RDMA_STREAM_CLOSED;
    size_t readable = rdmaStreamReadable(s), writable = rdmaStreamWritable(s);
    int callRead = conn->read_handler && (readable || (dead && !dc->eofSeen));
    int callWrite = conn->write_handler && (writable || (dead && !dc->eofSeen));
    int invert = conn->flags & CONN_FLAG_WRITE_BARRIER;

    if (dead)
        doorNoteEnd(l);
    if (!invert && callRead && !doorCallHandler(conn, conn->read_handler))
        return;
    if (callWrite && !doorCallHandler(conn, conn->write_handler))
        return;
    if (invert && callRead && !doorCallHandler(conn, conn->read_handler))
        return;
    if (dead && !dc->eofSeen && !conn->read_handler && !conn->write_handler) {
        dc->eofSeen = 1;
        freeClientAsync(connGetPrivateData(conn));
        return;
    }
    client *c = connGetPrivateData(conn);
    if (!l->grown && !dead && c && !authRequired(c) && !(c->flags & CLIENT_CLOSE_ASAP)) {
        /* Authenticated (and not on its way out): the full RX buffer from
         * its next registration, the full TX staging from its next write
         * with nothing in flight. Until then both are small, so a stranger
         * pins little. */
        l->grown = 1;
        if (door.rxSize != DOOR_RX_UNAUTH &&
            (rdmaStreamResizeRx(s, door.rxSize) < 0 || rdmaStreamResizeTx(s, door.rxSize) < 0))
            serverLog(LL_WARNING, "RDMA clients: %s: cannot grow the buffers", l->addr);
    }
    /* Level-triggered readiness, but only after progress: a handler that
     * consumed nothing waits for the next event (or the sweep). */
    int progress = rdmaStreamReadable(s) != readable || rdmaStreamWritable(s) != writable ||
                   (dead && dc->eofSeen);
    if (progress && doorWantsService(l))
        doorReadyAdd(l);
}

/* doorServe: everything a link needs now: progress on its stream
 * (completions, a due keepalive) if process, then what its phase asks.
 * May free the link. */
static void doorServe(DoorLink *l, int process)
{
    if (process)
        rdmaStreamProcess(l->s);
    switch (l->phase) {
        case DOOR_HANDSHAKE: {
            RdmaStreamState st = rdmaStreamGetState(l->s);
            if (st >= RDMA_STREAM_CLOSED) {
                doorNoteEnd(l);
                doorLinkFree(l);
            } else if (st == RDMA_STREAM_OPEN && rdmaStreamWritable(l->s)) {
                doorAdmit(l);
            } else if (doorNowMs() >= l->deadlineMs) {
                serverLog(LL_VERBOSE, "RDMA clients: %s: handshake not completed in %d ms", l->addr,
                          DOOR_HANDSHAKE_MS);
                doorLinkFree(l);
            }
            break;
        }
        case DOOR_CLIENT:
            doorServeClient(l);
            break;
        case DOOR_LINGER: {
            /* Acknowledged is not yet read: a client that handles the
             * disconnect before its completions (libvalkey does) would lose
             * the last reply (QUIT's +OK). So once everything is
             * acknowledged, give the peer DOOR_LINGER_READ_MS to go first. */
            uint64_t now = doorNowMs();
            if (!l->sentMs && rdmaStreamSendsPending(l->s) == 0)
                l->sentMs = now;
            if (rdmaStreamGetState(l->s) >= RDMA_STREAM_CLOSED || now >= l->deadlineMs ||
                (l->sentMs && now - l->sentMs >= DOOR_LINGER_READ_MS))
                doorLinkFree(l);
            break;
        }
    }
}

/* The stream's descriptor is readable: completions (or a keepalive due). */
static void doorOnStreamEvent(struct aeEventLoop *el, int fd, void *data, int mask)
{
    doorServe(data, 1);
}

/* The kick timer: serve the links that were ready when it fired, once
 * each (those that become ready meanwhile wait for the next iteration).
 * Returns 0 (again next iteration) while any is ready, else AE_NOMORE. */
static int doorKick(struct aeEventLoop *el, long long id, void *data)
{
    ObjListLink *first;

    for (unsigned n = door.readyCount; n && (first = objListFirst(&door.ready)); n--) {
        DoorLink *l = objListEntry(first, DoorLink, readyLink);
        doorReadyRemove(l);
        doorServe(l, 0);
    }
    if (!objListEmpty(&door.ready))
        return 0;
    door.kickArmed = 0;
    return AE_NOMORE;
}

/* The sweep timer: keepalives and dead-peer detection for idle streams,
 * handshake and linger deadlines, readiness missed for lack of a timer.
 * Serves every link once. A Redis handler it calls may run file events
 * (processEventsWhileBlocked during a slow script, DEBUG RELOAD) that free
 * any link, so no pointer is kept across doorServe unless no link was
 * freed meanwhile; otherwise the walk starts again from the head, past the
 * links this sweep already served. */
static int doorSweep(struct aeEventLoop *el, long long id, void *data)
{
    uint64_t gen = ++door.sweepGen;
    ObjListLink *it = objListFirst(&door.links);

    while (it) {
        DoorLink *l = objListEntry(it, DoorLink, link);
        if (l->sweepGen != gen) {
            uint64_t frees = door.linkFrees;
            l->sweepGen = gen;
            doorServe(l, 1);
            if (door.linkFrees != frees) {
                it = objListFirst(&door.links);
                continue;
            }
        }
        it = it->next == &door.links ? NULL : it->next;
    }
    return DOOR_SWEEP_MS;
}

/* ---- the listener ------------------------------------------------------------------------ */

/* doorHandshakeMax: how many accepted streams may wait for their
 * handshake (an RX buffer each): Redis's tcp-backlog, the same bound a TCP
 * client burst meets, and at least DOOR_HANDSHAKE_MIN. */
static int doorHandshakeMax(void)
{
    return server.tcp_backlog > DOOR_HANDSHAKE_MIN ? server.tcp_backlog : DOOR_HANDSHAKE_MIN;
}

/* doorOnConnectRequest: a client asks to connect: accept the stream (small
 * RX buffer until authenticated) unless too many are in their handshake. */
static void doorOnConnectRequest(struct rdma_cm_id *id)
{
    char addr[64], err[256];
    doorFormatAddr(rdma_get_peer_addr(id), addr, sizeof(addr));
    if (doorDescriptors() + 1 > (unsigned long)server.maxclients) {
        /* Not even its completion channel fits under maxclients. */
        if (rdma_reject(id, NULL, 0))
            serverLog(LL_VERBOSE, "RDMA clients: rdma_reject: %s", strerror(errno));
        rdma_destroy_id(id);
        door.st.rejected++;
        server.stat_rejected_conn++;
        serverLog(LL_VERBOSE, "RDMA clients: %s: refused, maxclients reached", addr);
        return;
    }
    if (door.handshakes >= (unsigned)doorHandshakeMax()) {
        if (rdma_reject(id, NULL, 0))
            serverLog(LL_VERBOSE, "RDMA clients: rdma_reject: %s", strerror(errno));
        rdma_destroy_id(id);
        door.st.rejected++;
        server.stat_rejected_conn++;
        serverLog(LL_WARNING, "RDMA clients: %s: refused, %d connections in their handshake", addr,
                  doorHandshakeMax());
        return;
    }
    /* Both buffers small until the client is authenticated (doorServeClient
     * grows them): refused, DENIED and NOAUTH-only clients pin little. */
    RdmaStreamConfig cfg = {.rxSize = DOOR_RX_UNAUTH, .txSize = DOOR_RX_UNAUTH};
    RdmaStream *s = rdmaStreamAccept(id, &cfg, err, sizeof(err));
    if (!s) {
        serverLog(LL_WARNING, "RDMA clients: %s: cannot accept: %s", addr, err);
        return;
    }
    DoorLink *l = zcalloc(sizeof(*l));
    l->s = s;
    l->fd = rdmaStreamFd(s);
    l->phase = DOOR_HANDSHAKE;
    l->deadlineMs = doorNowMs() + DOOR_HANDSHAKE_MS;
    snprintf(l->addr, sizeof(l->addr), "%s", addr);
    objListInit(&l->link);
    objListInit(&l->readyLink);
    rdmaStreamSetUserCtx(s, l); /* rdma_cm events find the link through it */
    if (l->fd < 0 ||
        aeCreateFileEvent(server.el, l->fd, AE_READABLE, doorOnStreamEvent, l) == AE_ERR) {
        serverLog(LL_WARNING, "RDMA clients: %s: refused, cannot watch its descriptor: %s", addr,
                  strerror(errno));
        rdmaStreamFree(s);
        zfree(l);
        door.st.rejected++;
        return;
    }
    objListPushFront(&door.links, &l->link);
    door.linkCount++;
    door.handshakes++;
    serverLog(LL_VERBOSE, "Accepted RDMA %s", addr);
}

/* The listener's rdma_cm channel is readable: connect requests and the
 * accepted streams' events (ESTABLISHED, DISCONNECTED, errors). */
static void doorOnCm(struct aeEventLoop *el, int fd, void *data, int mask)
{
    for (int i = 0; i < DOOR_CM_BATCH; i++) {
        struct rdma_cm_event *ev;
        if (rdma_get_cm_event(door.ec, &ev)) {
            if (errno != EAGAIN && errno != EWOULDBLOCK)
                serverLog(LL_WARNING, "RDMA clients: rdma_get_cm_event: %s", strerror(errno));
            return;
        }
        enum rdma_cm_event_type type = ev->event;
        int status = ev->status;
        struct rdma_cm_id *id = ev->id;
        /* Acked first: nothing below needs the event, and destroying an id
         * waits for its events to be acked. */
        rdma_ack_cm_event(ev);
        if (type == RDMA_CM_EVENT_CONNECT_REQUEST) {
            doorOnConnectRequest(id);
            continue;
        }
        if (id == door.listenId) {
            serverLog(LL_WARNING, "RDMA clients: listener: %s (status %d)", rdma_event_str(type),
                      status);
            continue;
        }
        DoorLink *l = id->context ? rdmaStreamUserCtx(id->context) : NULL;
        if (!l)
            continue;
        rdmaStreamCmEvent(l->s, type, status);
        doorServe(l, 1);
    }
}

/* ---- start / stop ------------------------------------------------------------------------ */

/* doorCheckServer: the running server is the one the headers describe:
 * same version, and fields spread over struct redisServer hold what CONFIG
 * GET says. Also refuses I/O threads (they would call a stream from
 * another thread). Returns 0, or -1 with the reason in err. */
static int doorCheckServer(const DoorTypeConfig *cfg, char *err, size_t errLen)
{
    const DoorProbe *p = &cfg->probe;
    if (cfg->serverVersion != REDIS_VERSION_NUM) {
        snprintf(err, errLen,
                 "the running server is Redis %d.%d.%d, the module was built against the "
                 "headers of %s (rebuild it against the installed version)",
                 (cfg->serverVersion >> 16) & 0xff, (cfg->serverVersion >> 8) & 0xff,
                 cfg->serverVersion & 0xff, REDIS_VERSION);
        return -1;
    }
    struct {
        const char *name;
        long long header, running;
    } probe[] = {
        {"hz", server.config_hz, p->hz},
        {"port", server.port, p->port},
        {"io-threads", server.io_threads_num, p->ioThreads},
        {"protected-mode", server.protected_mode, p->protectedMode},
        {"maxclients", server.maxclients, p->maxclients},
        {"lazyfree-lazy-user-flush", server.lazyfree_lazy_user_flush, p->lazyfreeUserFlush},
        {"acllog-max-len", (long long)server.acllog_max_len, p->acllogMaxLen},
        {"cluster-allow-pubsubshard-when-down", server.cluster_allow_pubsubshard_when_down,
         p->pubsubshardWhenDown},
    };
    for (size_t i = 0; i < sizeof(probe) / sizeof(probe[0]); i++) {
        if (probe[i].header != probe[i].running) {
            snprintf(err, errLen,
                     "the running server's memory layout differs from the headers the module "
                     "was built against (%s: %lld in the struct, %lld from CONFIG GET); rebuild "
                     "it against the installed redis-server's source package",
                     probe[i].name, probe[i].header, probe[i].running);
            return -1;
        }
    }
    if (server.io_threads_num > 1) {
        snprintf(err, errLen,
                 "io-threads is %d: RDMA clients need every client's I/O on the main thread",
                 server.io_threads_num);
        return -1;
    }
    return 0;
}

/* doorReset: the door as before any start: closed, no links, zero counters. */
static void doorReset(void)
{
    memset(&door, 0, sizeof(door));
    objListInit(&door.links);
    objListInit(&door.ready);
}

/* doorTeardown: close what doorOpen set up (no links exist yet). */
static void doorTeardown(void)
{
    if (door.ec)
        aeDeleteFileEvent(server.el, door.ec->fd, AE_READABLE);
    if (door.listenId)
        rdma_destroy_id(door.listenId);
    if (door.ec)
        rdma_destroy_event_channel(door.ec);
    doorReset();
}

/* doorOpen: the listener on bind:port, its channel in server.el. Returns 0,
 * or -1 with the reason in err (the caller tears down). */
static int doorOpen(const DoorSettings *cfg, char *err, size_t errLen)
{
    struct sockaddr_storage sa = {0};
    struct sockaddr_in *in = (struct sockaddr_in *)&sa;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&sa;
    if (inet_pton(AF_INET, cfg->bind, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)cfg->port);
    } else if (inet_pton(AF_INET6, cfg->bind, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)cfg->port);
    } else {
        snprintf(err, errLen, "objstore-rdma.bind '%s' is not an IP address", cfg->bind);
        return -1;
    }
    /* Registered memory and fork (BGSAVE): kernels with copy-on-fork for
     * pinned pages need nothing; older ones need MADV_DONTFORK. */
    if (ibv_is_fork_initialized() == IBV_FORK_DISABLED && ibv_fork_init())
        serverLog(LL_WARNING, "RDMA clients: ibv_fork_init failed: BGSAVE may be unsafe");
    door.ec = rdma_create_event_channel();
    if (!door.ec) {
        snprintf(err, errLen, "rdma_create_event_channel: %s (no RDMA support?)", strerror(errno));
        return -1;
    }
    if (anetNonBlock(NULL, door.ec->fd) != ANET_OK) {
        snprintf(err, errLen, "cannot make the rdma_cm channel non-blocking: %s", strerror(errno));
        return -1;
    }
    if (rdma_create_id(door.ec, &door.listenId, NULL, RDMA_PS_TCP)) {
        snprintf(err, errLen, "rdma_create_id: %s", strerror(errno));
        return -1;
    }
    if (rdma_bind_addr(door.listenId, (struct sockaddr *)&sa)) {
        snprintf(err, errLen, "rdma_bind_addr %s:%d: %s", cfg->bind, cfg->port, strerror(errno));
        return -1;
    }
    if (!door.listenId->verbs) {
        snprintf(err, errLen, "no RDMA device has the address %s (set objstore-rdma.bind)",
                 cfg->bind);
        return -1;
    }
    const char *dev = ibv_get_device_name(door.listenId->verbs->device);
    if (cfg->device[0] && strcmp(cfg->device, dev)) {
        snprintf(err, errLen, "%s belongs to device %s, not objstore-rdma.device %s", cfg->bind,
                 dev, cfg->device);
        return -1;
    }
    if (aeCreateFileEvent(server.el, door.ec->fd, AE_READABLE, doorOnCm, NULL) == AE_ERR) {
        snprintf(err, errLen, "cannot watch the rdma_cm channel: %s", strerror(errno));
        return -1;
    }
    if (rdma_listen(door.listenId, doorHandshakeMax())) {
        snprintf(err, errLen, "rdma_listen: %s", strerror(errno));
        return -1;
    }
    serverLog(LL_NOTICE, "RDMA clients: RESP over RDMA on %s (%s:%d)", dev, cfg->bind, cfg->port);
    return 0;
}

/* See conntype.h. */
int doorTypeStart(const DoorTypeConfig *cfg, char *err, size_t errLen)
{
    if (door.running) {
        snprintf(err, errLen, "the RDMA door is already open");
        return -1;
    }
    if (doorCheckServer(cfg, err, errLen) < 0)
        return -1;
    if (cfg->settings.rxSize < SP_RX_MIN || cfg->settings.rxSize > SP_RX_MAX) {
        snprintf(err, errLen, "objstore-rdma.rx-size must be %u..%u bytes", SP_RX_MIN, SP_RX_MAX);
        return -1;
    }
    doorReset();
    door.rxSize = cfg->settings.rxSize;
    if (doorOpen(&cfg->settings, err, errLen) < 0) {
        doorTeardown();
        return -1;
    }
    door.sweepId = aeCreateTimeEvent(server.el, DOOR_SWEEP_MS, doorSweep, NULL, NULL);
    if (door.sweepId == AE_ERR) {
        snprintf(err, errLen, "cannot create the door's timer");
        doorTeardown();
        return -1;
    }
    door.sweepArmed = 1;
    door.running = 1;
    return 0;
}

/* See door.h. */
void doorStop(void)
{
    if (!door.running)
        return;
    /* The server exits right after (this runs from its shutdown, possibly
     * inside a command of an RDMA client): stop accepting and tell every
     * peer, free nothing a client or handler may still hold. */
    aeDeleteFileEvent(server.el, door.ec->fd, AE_READABLE);
    rdma_destroy_id(door.listenId);
    door.listenId = NULL;
    if (door.sweepArmed)
        aeDeleteTimeEvent(server.el, door.sweepId);
    if (door.kickArmed)
        aeDeleteTimeEvent(server.el, door.kickId);
    door.sweepArmed = door.kickArmed = 0;
    ObjListLink *it;
    objListForEach(&door.links, it) {
        DoorLink *l = objListEntry(it, DoorLink, link);
        if (rdmaStreamGetState(l->s) == RDMA_STREAM_OPEN && rdma_disconnect(rdmaStreamId(l->s)))
            serverLog(LL_VERBOSE, "RDMA clients: %s: rdma_disconnect: %s", l->addr,
                      strerror(errno));
    }
    door.running = 0;
}

/* See conntype.h. */
int doorTypeCheck(const DoorTypeConfig *cfg, char *err, size_t errLen)
{
    return doorCheckServer(cfg, err, errLen);
}

/* See conntype.h. */
const char *doorTypeBuiltFor(void)
{
    return REDIS_VERSION;
}

/* See door.h. */
void doorGetStats(DoorStats *st)
{
    *st = door.st;
}
