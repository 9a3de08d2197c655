/*
 * connect.c - the Python package's native core (_objstore): connect(). The
 * connection is made here, on the library's transport tables
 * (objclient_int.h), not by objClientConnect, so that AUTH can be sent on
 * it before the library wraps it; then the arena is probed, and the Client
 * maps it (zero copy) or works on copies (remote mode).
 */
#include "client.h"

#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "client/rdmaconn.h"
#include "forkguard.h"

#define PYOBJ_CONNECT_MS 5000

/* Make the raw connection (GIL released by the caller). Returns it (possibly failed:
 * check with tr->failed), or NULL when out of memory. */
static void *connectRaw(const char *host, int port, const char *unixPath, int rdma,
                        const ObjClientTransport **tr)
{
    struct timeval tv = {PYOBJ_CONNECT_MS / 1000, (PYOBJ_CONNECT_MS % 1000) * 1000};
    ObjRdmaConn *rc;

    if (rdma) {
        *tr = &objClientRdmaTransport;
        rc = objRdmaConnect(host, port, PYOBJ_CONNECT_MS);
        if (rc != NULL && objRdmaErr(rc) == 0)
            objRdmaSetTimeout(rc, 0); /* a blocking OBJ.PIN may wait as long as it was told */
        return rc;
    }
    *tr = &objClientTcpTransport;
    if (unixPath != NULL)
        return redisConnectUnixWithTimeout(unixPath, tv);
    return redisConnectWithTimeout(host, port, tv);
}

/* AUTH [user] password on the raw connection (GIL released). Returns 0, or -1 with *e set. */
static int connectAuth(const ObjClientTransport *tr, void *conn, const char *user,
                       const char *password, SavedErr *e)
{
    const char *argv[3] = {"AUTH", NULL, NULL};
    size_t lens[3] = {4, 0, 0};
    int argc = 1;
    redisReply *r;

    if (user != NULL) {
        argv[argc] = user;
        lens[argc++] = strlen(user);
    }
    argv[argc] = password;
    lens[argc++] = strlen(password);
    r = tr->command(conn, argc, argv, lens);
    if (r == NULL) {
        e->code = OBJ_ERR_IO;
        snprintf(e->msg, sizeof(e->msg), "AUTH: %s", tr->errstr(conn));
        return -1;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        e->code = OBJ_ERR_OTHER;
        snprintf(e->msg, sizeof(e->msg), "%.*s", (int)r->len, r->str);
        freeReplyObject(r);
        return -1;
    }
    freeReplyObject(r);
    return 0;
}

/*
 * Whether the arena can be mapped: a pin with an empty id maps the arena
 * first (the library does so before it sends anything) and is then refused
 * by the node (ids have 1 to 512 bytes), so it never pins. Returns 1 when
 * mapped, 0 when not (OBJ_ERR_MAP), -1 with *e set on any other failure
 * (a connection lost, NOAUTH, ...).
 */
static int connectProbeArena(ObjClient *oc, SavedErr *e)
{
    ObjBuffer view;

    if (objClientPin(oc, "", 0, 0, &view) == 0) {
        objClientRelease(oc, "", 0);
        return 1;
    }
    if (objClientErrCode(oc) == OBJ_ERR_MAP)
        return 0;
    if (objClientErrCode(oc) == OBJ_ERR_BADARG)
        return 1;                   /* mapped, then the empty id was refused */
    e->code = objClientErrCode(oc); /* e.g. NOAUTH from OBJ.STATS */
    snprintf(e->msg, sizeof(e->msg), "%s", objClientErrMsg(oc));
    return -1;
}

/* connect(...): connect, AUTH, wrap in the library's client and probe the arena (see
 * the method's doc). Returns a Client, or NULL: ConnectionFailed, AuthError (by code word),
 * ZeroCopyUnavailable when zero_copy=1 and the arena cannot be mapped, ValueError. */
PyObject *modConnect(PyObject *mod, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"host",     "port",     "unix_socket", "rdma",
                             "username", "password", "zero_copy",   NULL};
    const char *host = "127.0.0.1", *unixPath = NULL, *user = NULL, *password = NULL;
    int port = 6379, rdma = 0, zeroCopy = -1, rv = 0, mapped = 0;
    const ObjClientTransport *tr = NULL;
    ObjClient *oc = NULL;
    ClientObject *c;
    void *conn;
    SavedErr e = {.code = OBJ_OK};

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|sizpzzi", kwlist, &host, &port, &unixPath, &rdma,
                                     &user, &password, &zeroCopy))
        return NULL;
    if (port <= 0 || port > 65535)
        return PyErr_Format(PyExc_ValueError, "port %d is not 1 to 65535", port);
    if (user != NULL && password == NULL)
        return PyErr_Format(PyExc_ValueError, "a username needs a password");
    if (rdma && unixPath != NULL)
        return PyErr_Format(PyExc_ValueError, "RDMA and a unix socket exclude each other");
    c = PyObject_New(ClientObject, &ClientType);
    if (c == NULL)
        return NULL;
    c->oc = NULL;
    c->pending = NULL;
    c->closed = 0;
    c->zeroCopy = 0;
    c->liveBuffers = 0;
    c->inflight = 0;
    c->pid = getpid();
    pthread_mutex_init(&c->lock, NULL);
    pthread_mutex_init(&c->qlock, NULL);

    Py_BEGIN_ALLOW_THREADS;
    conn = connectRaw(host, port, unixPath, rdma, &tr);
    if (conn == NULL) {
        e.code = OBJ_ERR_IO;
        snprintf(e.msg, sizeof(e.msg), "out of memory connecting");
        rv = -1;
    } else if (tr->failed(conn)) {
        e.code = OBJ_ERR_IO;
        snprintf(e.msg, sizeof(e.msg), "cannot connect to %s:%d: %s", unixPath ? unixPath : host,
                 port, tr->errstr(conn));
        tr->free(conn);
        rv = -1;
    } else if (password != NULL && connectAuth(tr, conn, user, password, &e) < 0) {
        tr->free(conn);
        rv = -1;
    } else if ((oc = objClientWrapTransport(tr, conn)) == NULL) {
        e.code = OBJ_ERR_IO;
        snprintf(e.msg, sizeof(e.msg), "out of memory connecting");
        rv = -1;
    } else if (zeroCopy != 0) {
        mapped = connectProbeArena(oc, &e);
        if (mapped < 0 || (mapped == 0 && zeroCopy == 1)) {
            if (mapped == 0) {
                e.code = OBJ_ERR_MAP;
                snprintf(e.msg, sizeof(e.msg), "%s", objClientErrMsg(oc));
            }
            objClientFree(oc);
            oc = NULL;
            rv = -1;
        }
    }
    Py_END_ALLOW_THREADS;
    if (rv < 0) {
        Py_DECREF(c);
        return errRaiseSaved(&e);
    }
    c->oc = oc;
    c->tr = tr;
    c->conn = conn;
    c->zeroCopy = mapped > 0;
    if (c->zeroCopy) {
        void *base;
        size_t size;

        if (objClientArenaRange(oc, &base, &size) == 0)
            forkTrack(base, size); /* out of memory: a child keeps the mapping, as before */
    }
    return (PyObject *)c;
}
