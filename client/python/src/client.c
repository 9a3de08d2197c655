/*
 * client.c - the Python package's native core (_objstore): the Client type
 * (client.h), one connection (TCP, unix socket or RDMA) plus one ObjClient
 * wrapped around it. Every method that calls into C goes through clientRun
 * (clientcore.c) and is counted as a call under way (PYOBJ_COUNTED_METHOD),
 * so that close() waits for it. The commands the library has no call for
 * (LOCATE, NODES, LIST, STATS, multi-id FETCH) go out raw through command(),
 * on the very connection that holds the pins.
 */
#include "client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "buffer.h"

#define PYOBJ_MAX_ARGS 4096

/* ---- replies -> Python ------------------------------------------------------------------- */

/* A redisReply as a Python object: bytes, str (status), int, None, list; an
 * error element becomes an exception instance. Returns a new reference or NULL. */
static PyObject *replyToPy(const redisReply *r)
{
    PyObject *list;

    switch (r->type) {
        case REDIS_REPLY_STRING:
            return PyBytes_FromStringAndSize(r->str, (Py_ssize_t)r->len);
        case REDIS_REPLY_STATUS:
            return PyUnicode_DecodeLatin1(r->str, (Py_ssize_t)r->len, NULL);
        case REDIS_REPLY_INTEGER:
            return PyLong_FromLongLong(r->integer);
        case REDIS_REPLY_NIL:
            Py_RETURN_NONE;
        case REDIS_REPLY_ERROR:
            return errInstance(NULL, r->str, r->len);
        case REDIS_REPLY_ARRAY:
            list = PyList_New((Py_ssize_t)r->elements);
            if (list == NULL)
                return NULL;
            for (size_t i = 0; i < r->elements; i++) {
                PyObject *item = replyToPy(r->element[i]);
                if (item == NULL) {
                    Py_DECREF(list);
                    return NULL;
                }
                PyList_SET_ITEM(list, (Py_ssize_t)i, item);
            }
            return list;
        default:
            PyErr_Format(PyExc_RuntimeError, "unexpected reply type %d", r->type);
            return NULL;
    }
}

/* The arguments of one command, as bytes objects that stay alive for the call. */
typedef struct Argv {
    int argc;
    const char **argv;
    size_t *lens;
    PyObject *keep; /* a tuple of the bytes */
} Argv;

/* Convert a sequence of bytes/str/int into Argv. Returns 0, or -1 with an exception set. */
static int argvFromSeq(PyObject *seq, Argv *a)
{
    PyObject *fast = PySequence_Fast(seq, "command arguments must be a sequence");
    Py_ssize_t n;

    memset(a, 0, sizeof(*a));
    if (fast == NULL)
        return -1;
    n = PySequence_Fast_GET_SIZE(fast);
    if (n < 1 || n > PYOBJ_MAX_ARGS) {
        Py_DECREF(fast);
        PyErr_Format(PyExc_ValueError, "a command has 1 to %d arguments, not %zd", PYOBJ_MAX_ARGS,
                     n);
        return -1;
    }
    a->keep = PyTuple_New(n);
    a->argv = calloc((size_t)n, sizeof(*a->argv));
    a->lens = calloc((size_t)n, sizeof(*a->lens));
    if (a->keep == NULL || a->argv == NULL || a->lens == NULL)
        goto out_free;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(fast, i), *b;

        if (PyBytes_Check(item)) {
            b = Py_NewRef(item);
        } else if (PyUnicode_Check(item)) {
            b = PyUnicode_AsUTF8String(item);
        } else if (PyLong_Check(item)) {
            PyObject *s = PyObject_Str(item);
            b = s ? PyUnicode_AsUTF8String(s) : NULL;
            Py_XDECREF(s);
        } else {
            PyErr_Format(PyExc_TypeError, "command argument %zd is %s, not bytes, str or int", i,
                         Py_TYPE(item)->tp_name);
            goto out_free;
        }
        if (b == NULL)
            goto out_free;
        PyTuple_SET_ITEM(a->keep, i, b);
        a->argv[i] = PyBytes_AS_STRING(b);
        a->lens[i] = (size_t)PyBytes_GET_SIZE(b);
    }
    a->argc = (int)n;
    Py_DECREF(fast);
    return 0;

out_free:
    if (!PyErr_Occurred())
        PyErr_NoMemory();
    Py_DECREF(fast);
    Py_CLEAR(a->keep);
    free(a->argv);
    free(a->lens);
    memset(a, 0, sizeof(*a));
    return -1;
}

/* Drop what argvFromSeq made. Accepts a zeroed Argv. Can't fail. */
static void argvFree(Argv *a)
{
    Py_CLEAR(a->keep);
    free(a->argv);
    free(a->lens);
}

/* ---- Client methods ------------------------------------------------------------------------ */

/*
 * Send one command on the client's connection (mutex held, GIL not).
 * Returns the reply (possibly an error reply), or NULL with *e set when the
 * connection failed.
 */
static redisReply *clientRaw(ClientObject *c, const Argv *a, SavedErr *e)
{
    redisReply *r = NULL;

    if (!c->tr->failed(c->conn))
        r = c->tr->command(c->conn, a->argc, a->argv, a->lens);
    if (r == NULL) {
        const char *why = c->tr->errstr(c->conn);
        e->code = OBJ_ERR_IO;
        snprintf(e->msg, sizeof(e->msg), "%s",
                 why && why[0] ? why : "connection failed (no reply from the server)");
    }
    return r;
}

/* A raw command under way: its arguments and, once sent, its reply. */
typedef struct CommandOp {
    Argv a;
    redisReply *reply;
} CommandOp;

/* clientRaw as a ClientOp. Returns 0 with the reply, or -1. */
static int clientCommandOp(ClientObject *c, void *arg, SavedErr *e)
{
    CommandOp *op = arg;

    op->reply = clientRaw(c, &op->a, e);
    return op->reply != NULL ? 0 : -1;
}

/* command(args): one command on the client's connection. Returns the reply converted by
 * replyToPy, or NULL: the exception of an error reply's code word, ConnectionFailed,
 * ClientClosed/ClientForked, or TypeError for arguments of the wrong type. */
static PyObject *clientCommandIn(ClientObject *c, PyObject *args)
{
    CommandOp op = {.reply = NULL};
    PyObject *out;
    int rv;

    if (clientUsable(c) < 0 || argvFromSeq(args, &op.a) < 0)
        return NULL;
    rv = clientRun(c, clientCommandOp, &op);
    argvFree(&op.a);
    if (rv < 0)
        return NULL;
    if (op.reply->type == REDIS_REPLY_ERROR) {
        out = errInstance(NULL, op.reply->str, op.reply->len);
        freeReplyObject(op.reply);
        if (out != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(out), out);
            Py_DECREF(out);
        }
        return NULL;
    }
    out = replyToPy(op.reply);
    freeReplyObject(op.reply);
    return out;
}

PYOBJ_COUNTED_METHOD(clientCommand, ClientObject, self)

/* OBJ.GET id [TIMEOUT] WITHMETA (mutex held): the copy of remote mode. Returns the
 * reply (an array of data and meta), or NULL with *e set. */
static redisReply *clientGetCopyLocked(ClientObject *c, const char *id, size_t idLen,
                                       long long timeoutMs, SavedErr *e)
{
    const char *argv[5] = {"OBJ.GET", id, "TIMEOUT", NULL, "WITHMETA"};
    size_t lens[5] = {7, idLen, 7, 0, 8};
    char tbuf[32];
    Argv a = {.argv = argv, .lens = lens};
    redisReply *r;

    if (timeoutMs != 0) {
        snprintf(tbuf, sizeof(tbuf), "%lld", timeoutMs < 0 ? 0LL : timeoutMs);
        argv[3] = tbuf;
        lens[3] = strlen(tbuf);
        a.argc = 5;
    } else {
        argv[2] = "WITHMETA";
        lens[2] = 8;
        a.argc = 3;
    }
    r = clientRaw(c, &a, e);
    if (r == NULL)
        return NULL;
    if (r->type == REDIS_REPLY_ERROR) {
        e->code = OBJ_ERR_OTHER;
        snprintf(e->msg, sizeof(e->msg), "%.*s", (int)r->len, r->str);
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
               r->element[0]->type != REDIS_REPLY_STRING ||
               r->element[1]->type != REDIS_REPLY_STRING) {
        e->code = OBJ_ERR_IO;
        snprintf(e->msg, sizeof(e->msg), "unexpected reply to OBJ.GET WITHMETA");
    } else {
        return r;
    }
    freeReplyObject(r);
    return NULL;
}

/* A pin under way: the id and timeout, and what it got (a view of the arena, or in
 * remote mode a copy). */
typedef struct PinOp {
    const char *id;
    size_t idLen;
    long long timeoutMs;
    ObjBuffer view;
    redisReply *copy;
} PinOp;

/* Pin in the arena, or get a copy in remote mode (a ClientOp). Returns 0 or -1. */
static int clientPinOp(ClientObject *c, void *arg, SavedErr *e)
{
    PinOp *p = arg;

    if (c->zeroCopy)
        return objClientPin(c->oc, p->id, p->idLen, p->timeoutMs, &p->view);
    p->copy = clientGetCopyLocked(c, p->id, p->idLen, p->timeoutMs, e);
    return p->copy != NULL ? 0 : -1;
}

/* pin(id, timeout_ms): a Buffer holding a pin of the sealed object (OBJ.PIN through the
 * library), or in remote mode a copy (OBJ.GET WITHMETA, no pin). Returns it or NULL. */
static PyObject *clientPinIn(ClientObject *c, PyObject *args)
{
    PyObject *idObj;
    PinOp p = {.timeoutMs = 0};
    BufferObject *b;

    if (!PyArg_ParseTuple(args, "O|L", &idObj, &p.timeoutMs) || idArg(idObj, &p.id, &p.idLen) < 0)
        return NULL;
    if (p.timeoutMs < -1)
        return PyErr_Format(PyExc_ValueError, "timeout must be >= 0 (or -1: forever)");
    if (clientRun(c, clientPinOp, &p) < 0)
        return NULL;
    b = bufferNew(c, p.id, p.idLen, c->zeroCopy ? BUF_PINNED : BUF_COPY);
    if (b == NULL) {
        if (p.copy != NULL) {
            freeReplyObject(p.copy);
        } else {
            clientQueue(c, PENDING_RELEASE, p.id, p.idLen, p.view.data);
            clientKick(c);
        }
        return NULL;
    }
    if (c->zeroCopy) {
        b->pinned = 1;
        return bufferFill(b, (void *)p.view.data, (Py_ssize_t)p.view.size, p.view.meta,
                          (Py_ssize_t)p.view.metaSize);
    }
    b->reply = p.copy;
    return bufferFill(b, p.copy->element[0]->str, (Py_ssize_t)p.copy->element[0]->len,
                      p.copy->element[1]->str, (Py_ssize_t)p.copy->element[1]->len);
}

PYOBJ_COUNTED_METHOD(clientPin, ClientObject, self)

/* A creation under way: its arguments, and where and with which generation it was made. */
typedef struct CreateOp {
    const char *id, *meta;
    size_t idLen, size, metaLen;
    void *data;
    uint64_t gen;
} CreateOp;

/* objClientCreateGen (a ClientOp). Returns 0 or -1. */
static int clientCreateOp(ClientObject *c, void *arg, SavedErr *e)
{
    CreateOp *o = arg;

    return objClientCreateGen(c->oc, o->id, o->idLen, o->size, o->meta, o->metaLen, &o->data,
                              &o->gen);
}

/* create(id, size, meta): a writable Buffer of a created object in the arena (remote
 * mode: of a local buffer sent at seal). Returns it or NULL. */
static PyObject *clientCreateIn(ClientObject *c, PyObject *args)
{
    PyObject *idObj;
    Py_ssize_t size, metaLen = 0;
    CreateOp o = {.meta = NULL};
    BufferObject *b;

    if (!PyArg_ParseTuple(args, "On|y#", &idObj, &size, &o.meta, &metaLen) ||
        idArg(idObj, &o.id, &o.idLen) < 0)
        return NULL;
    if (size < 0)
        return PyErr_Format(PyExc_ValueError, "size must be >= 0, not %zd", size);
    if (clientUsable(c) < 0)
        return NULL;
    o.size = (size_t)size;
    o.metaLen = (size_t)metaLen;
    if (!c->zeroCopy) {
        b = bufferNew(c, o.id, o.idLen, BUF_COPY_CREATE);
        if (b == NULL)
            return NULL;
        b->own = malloc(size > 0 ? (size_t)size : 1);
        if (b->own == NULL) {
            Py_DECREF(b);
            return PyErr_NoMemory();
        }
        return bufferFill(b, b->own, size, o.meta, metaLen);
    }
    if (clientRun(c, clientCreateOp, &o) < 0)
        return NULL;
    b = bufferNew(c, o.id, o.idLen, BUF_CREATED);
    if (b == NULL) {
        clientQueue(c, PENDING_ABORT, o.id, o.idLen, NULL);
        return NULL;
    }
    b->gen = o.gen;
    return bufferFill(b, o.data, size, o.meta, metaLen);
}

PYOBJ_COUNTED_METHOD(clientCreate, ClientObject, self)

typedef struct Parts {
    Py_ssize_t n;
    Py_buffer *views;
    size_t *offsets;
    size_t total;
} Parts;

/* Release the views partsGet took. Can't fail. */
static void partsFree(Parts *p)
{
    for (Py_ssize_t i = 0; i < p->n; i++)
        if (p->views[i].obj != NULL)
            PyBuffer_Release(&p->views[i]);
    free(p->views);
    free(p->offsets);
}

/* Take contiguous views of every part and check that they fit into total bytes at their
 * offsets. Returns 0, or -1 with an exception set. */
static int partsGet(PyObject *bufs, PyObject *offs, Py_ssize_t total, Parts *p)
{
    Py_ssize_t n;

    memset(p, 0, sizeof(*p));
    if (!PyList_Check(bufs) || !PyList_Check(offs) ||
        PyList_GET_SIZE(bufs) != PyList_GET_SIZE(offs))
        return PyErr_SetString(PyExc_TypeError, "parts and offsets: two lists of one length"), -1;
    if (total < 0)
        return PyErr_SetString(PyExc_ValueError, "negative size"), -1;
    n = PyList_GET_SIZE(bufs);
    p->views = calloc((size_t)n + 1, sizeof(*p->views));
    p->offsets = calloc((size_t)n + 1, sizeof(*p->offsets));
    if (p->views == NULL || p->offsets == NULL) {
        partsFree(p);
        PyErr_NoMemory();
        return -1;
    }
    p->total = (size_t)total;
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t off = PyLong_AsSize_t(PyList_GET_ITEM(offs, i));

        if (off == (size_t)-1 && PyErr_Occurred())
            goto out_release;
        if (PyObject_GetBuffer(PyList_GET_ITEM(bufs, i), &p->views[i], PyBUF_C_CONTIGUOUS) < 0)
            goto out_release;
        p->n = i + 1;
        p->offsets[i] = off;
        if (off > p->total || (size_t)p->views[i].len > p->total - off) {
            PyErr_SetString(PyExc_ValueError, "a part does not fit into the object");
            goto out_release;
        }
    }
    return 0;

out_release:
    partsFree(p);
    return -1;
}

/* A put under way: the id, the caller's parts and the metadata. */
typedef struct PutOp {
    const char *id, *meta;
    size_t idLen, metaLen;
    Parts parts;
    CopiesAsk copies;
} PutOp;

/* The put (a ClientOp): objClientPutParts, which sends a small object inline in one
 * OBJ.PUT and copies a large one into the arena with the library's copy threads (a
 * client in copying mode always goes inline). Returns 0, or -1. */
static int clientPutOp(ClientObject *c, void *arg, SavedErr *e)
{
    PutOp *o = arg;
    const Parts *p = &o->parts;
    ObjPart one, *parts = p->n <= 1 ? &one : malloc((size_t)p->n * sizeof(*parts));
    int rv;

    if (parts == NULL) {
        e->code = OBJ_ERR_OTHER;
        snprintf(e->msg, sizeof(e->msg), "OOM out of memory for %zd parts", p->n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < p->n; i++)
        parts[i] = (ObjPart){p->views[i].buf, (size_t)p->views[i].len, p->offsets[i]};
    if (!c->zeroCopy)
        objClientPutInline(c->oc);
    rv = objClientPutPartsCounted(c->oc, o->id, o->idLen, parts, (size_t)p->n, p->total, o->meta,
                                  o->metaLen, o->copies.replicas, o->copies.waitMs,
                                  &o->copies.holders, &o->copies.counted);
    if (parts != &one)
        free(parts);
    return rv;
}

/* put(id, parts, offsets, size, meta, replicas, wait_ms): one object of size bytes made
 * of the parts at their offsets, sealed, with replicas copies (0: the node's default).
 * Returns the node's holder count for an object of several copies, else None; or NULL
 * with the exception set (nothing left). */
static PyObject *clientPutIn(ClientObject *c, PyObject *args)
{
    PyObject *idObj, *bufs, *offs;
    Py_ssize_t total, metaLen = 0;
    PutOp o = {.meta = NULL, .copies = COPIES_ASK_DEFAULT};
    int rv;

    if (!PyArg_ParseTuple(args, "OO!O!n|y#iL", &idObj, &PyList_Type, &bufs, &PyList_Type, &offs,
                          &total, &o.meta, &metaLen, &o.copies.replicas, &o.copies.waitMs) ||
        idArg(idObj, &o.id, &o.idLen) < 0)
        return NULL;
    o.metaLen = (size_t)metaLen;
    if (clientUsable(c) < 0 || partsGet(bufs, offs, total, &o.parts) < 0)
        return NULL;
    rv = clientRun(c, clientPutOp, &o);
    partsFree(&o.parts);
    if (rv < 0)
        return NULL;
    return copiesAskResult(&o.copies);
}

PYOBJ_COUNTED_METHOD(clientPut, ClientObject, self)

/* The library's settings and counters, each a ClientOp on a size (arg) or a struct. */
static int clientSetPinCacheOp(ClientObject *c, void *arg, SavedErr *e)
{
    return objClientSetPinCache(c->oc, *(size_t *)arg);
}

static int clientFlushReleasesOp(ClientObject *c, void *arg, SavedErr *e)
{
    return objClientFlushReleases(c->oc);
}

static int clientPinCacheStatsOp(ClientObject *c, void *arg, SavedErr *e)
{
    objClientPinCacheStats(c->oc, arg);
    return 0;
}

static int clientSetPrefaultOp(ClientObject *c, void *arg, SavedErr *e)
{
    objClientSetPinPrefault(c->oc, *(size_t *)arg);
    return 0;
}

static int clientSetPutThreadsOp(ClientObject *c, void *arg, SavedErr *e)
{
    objClientSetPutThreads(c->oc, *(int *)arg);
    return 0;
}

/*
 * Parse a method's one size argument (what names it for the error) and run
 * op on it. Returns None, or NULL with the exception set (ValueError for a
 * negative size).
 */
static PyObject *clientRunSize(ClientObject *c, PyObject *args, const char *what, ClientOp op)
{
    Py_ssize_t n;
    size_t size;

    if (!PyArg_ParseTuple(args, "n", &n))
        return NULL;
    if (n < 0)
        return PyErr_Format(PyExc_ValueError, "%s must be >= 0", what);
    size = (size_t)n;
    if (clientRun(c, op, &size) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* set_pin_cache(max_idle), set_prefault(min_bytes): the library's pin cache and
 * prefault. Return None or NULL. */
static PyObject *clientSetPinCacheIn(ClientObject *c, PyObject *args)
{
    return clientRunSize(c, args, "pin cache size", clientSetPinCacheOp);
}

PYOBJ_COUNTED_METHOD(clientSetPinCache, ClientObject, self)

static PyObject *clientSetPrefaultIn(ClientObject *c, PyObject *args)
{
    return clientRunSize(c, args, "prefault size", clientSetPrefaultOp);
}

PYOBJ_COUNTED_METHOD(clientSetPrefault, ClientObject, self)

/* flush_releases(): give the pin cache's idle pins back now. Returns None or NULL. */
static PyObject *clientFlushReleasesIn(ClientObject *c, PyObject *unused)
{
    if (clientRun(c, clientFlushReleasesOp, NULL) < 0)
        return NULL;
    Py_RETURN_NONE;
}

PYOBJ_COUNTED_METHOD(clientFlushReleases, ClientObject, self)

/* pin_cache_stats(): the pin cache's counters as a dict. Returns it or NULL. */
static PyObject *clientPinCacheStatsIn(ClientObject *c, PyObject *unused)
{
    ObjPinCacheStats st;

    if (clientRun(c, clientPinCacheStatsOp, &st) < 0)
        return NULL;
    return Py_BuildValue("{sKsKsKsKsnsnsn}", "hits", (unsigned long long)st.hits, "misses",
                         (unsigned long long)st.misses, "batches", (unsigned long long)st.batches,
                         "released", (unsigned long long)st.released, "cached",
                         (Py_ssize_t)st.cached, "idle", (Py_ssize_t)st.idle, "max_idle",
                         (Py_ssize_t)st.maxIdle);
}

PYOBJ_COUNTED_METHOD(clientPinCacheStats, ClientObject, self)

/* set_put_threads(n): the library's copy threads of a large put (0: its default). */
static PyObject *clientSetPutThreadsIn(ClientObject *c, PyObject *args)
{
    int threads;

    if (!PyArg_ParseTuple(args, "i", &threads))
        return NULL;
    if (threads < 0 || threads > 64)
        return PyErr_Format(PyExc_ValueError, "put threads must be 0 to 64, not %d", threads);
    if (clientRun(c, clientSetPutThreadsOp, &threads) < 0)
        return NULL;
    Py_RETURN_NONE;
}

PYOBJ_COUNTED_METHOD(clientSetPutThreads, ClientObject, self)

PyDoc_STRVAR(clientCloseDoc,
             "close()\n--\n\n"
             "No further calls. The connection closes now, or, while Buffers of this\n"
             "client are alive or other threads' calls are under way, when the last of\n"
             "them is done (the memory of live views stays valid).");

/* close(): see clientCloseDoc. Returns None. Can't fail. */
static PyObject *clientClose(ClientObject *c, PyObject *unused)
{
    if (c->closed)
        Py_RETURN_NONE;
    c->closed = 1;
    clientMaybeDestroy(c);
    Py_RETURN_NONE;
}

/* Read-only attributes. */
static PyObject *clientGetZeroCopy(ClientObject *c, void *unused)
{
    return PyBool_FromLong(c->zeroCopy);
}

static PyObject *clientGetClosed(ClientObject *c, void *unused)
{
    return PyBool_FromLong(c->closed);
}

static PyObject *clientGetPid(ClientObject *c, void *unused)
{
    return PyLong_FromLong((long)c->pid);
}

static PyObject *clientGetLiveBuffers(ClientObject *c, void *unused)
{
    return PyLong_FromSsize_t(c->liveBuffers);
}

/* The last reference is gone (so no Buffer of it lives): close the connection, unless
 * this is a forked child, whose copy of it is the parent's. Can't fail. */
static void clientDealloc(ClientObject *c)
{
    /* In a forked child the connection (and any RDMA resources) are the parent's: leave them. */
    clientDestroy(c);
    if (c->pid == getpid()) {
        pthread_mutex_destroy(&c->lock);
        pthread_mutex_destroy(&c->qlock);
    }
    while (c->pending != NULL) {
        Pending *next = c->pending->next;
        free(c->pending);
        c->pending = next;
    }
    PyObject_Free(c);
}

static PyGetSetDef clientGetSet[] = {
    {"zero_copy", (getter)clientGetZeroCopy, NULL, "the arena is mapped (else: copies)", NULL},
    {"closed", (getter)clientGetClosed, NULL, "close() was called", NULL},
    {"pid", (getter)clientGetPid, NULL, "the process that connected", NULL},
    {"live_buffers", (getter)clientGetLiveBuffers, NULL, "Buffers in the arena alive", NULL},
    {NULL},
};

static PyMethodDef clientMethods[] = {
    {"command", (PyCFunction)clientCommand, METH_O,
     "command(args)\n--\n\nSend one command (a sequence of arguments) on this connection; the "
     "reply as Python objects."},
    {"pin", (PyCFunction)clientPin, METH_VARARGS,
     "pin(id, timeout_ms=0)\n--\n\nA Buffer of the sealed object (a copy in remote mode)."},
    {"create", (PyCFunction)clientCreate, METH_VARARGS,
     "create(id, size, meta=b'')\n--\n\nA writable Buffer of a new object; seal() or abort()."},
    {"put", (PyCFunction)clientPut, METH_VARARGS,
     "put(id, parts, offsets, size, meta=b'', replicas=0, wait_ms=-1)\n--\n\n"
     "One object of the parts at their offsets, sealed: one OBJ.PUT under 1 MiB (and in "
     "remote mode), else create, copy with the copy threads, seal. replicas: copies on "
     "distinct nodes (0: the node's default); wait_ms: how long the node waits for them "
     "(-1: its replica-timeout). Returns the holder count for several copies, else None."},
    {"set_put_threads", (PyCFunction)clientSetPutThreads, METH_VARARGS,
     "set_put_threads(n)\n--\n\nCopy threads of a large put (0: the library's default)."},
    {"set_pin_cache", (PyCFunction)clientSetPinCache, METH_VARARGS,
     "set_pin_cache(max_idle)\n--\n\nThe library's pin cache (0: off)."},
    {"flush_releases", (PyCFunction)clientFlushReleases, METH_NOARGS,
     "flush_releases()\n--\n\nGive the pin cache's idle pins back now."},
    {"pin_cache_stats", (PyCFunction)clientPinCacheStats, METH_NOARGS,
     "pin_cache_stats()\n--\n\nThe pin cache's counters."},
    {"set_prefault", (PyCFunction)clientSetPrefault, METH_VARARGS,
     "set_prefault(min_bytes)\n--\n\nPrefault pinned objects this large (0: off)."},
    {"close", (PyCFunction)clientClose, METH_NOARGS, clientCloseDoc},
    {NULL},
};

PyTypeObject ClientType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "objstore._objstore.Client",
    .tp_basicsize = sizeof(ClientObject),
    .tp_dealloc = (destructor)clientDealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One connection to one node (made by connect()).",
    .tp_methods = clientMethods,
    .tp_getset = clientGetSet,
};
