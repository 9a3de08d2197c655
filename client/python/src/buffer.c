/*
 * buffer.c - the Python package's native core (_objstore): the Buffer type
 * (buffer.h). A Buffer gives its hold on the node back (a pin released, an
 * unsealed creation aborted) without ever blocking on the client mutex: a
 * busy mutex means its holder sends the queued release when it lets go.
 */
#include "buffer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A new Buffer over bytes of c (client may be NULL for copies). Returns it or NULL. */
BufferObject *bufferNew(ClientObject *c, const void *id, size_t idLen, int state)
{
    BufferObject *b = PyObject_New(BufferObject, &BufferType);

    if (b == NULL)
        return NULL;
    /* Everything after the object header starts at zero (NULL, no exports, no pin). */
    memset((char *)b + offsetof(BufferObject, client), 0,
           sizeof(*b) - offsetof(BufferObject, client));
    b->state = state;
    b->dlCode = 1; /* uint8, one lane, 1-D: the bytes as they are */
    b->dlBits = 8;
    b->dlLanes = 1;
    b->ndim = 1;
    b->id = PyBytes_FromStringAndSize(id, (Py_ssize_t)idLen);
    if (b->id == NULL) {
        Py_DECREF(b);
        return NULL;
    }
    if (c != NULL) {
        b->client = (ClientObject *)Py_NewRef((PyObject *)c);
        if (state == BUF_PINNED || state == BUF_CREATED) {
            b->arena = 1;
            c->liveBuffers++;
        }
    }
    return b;
}

/* See buffer.h. */
PyObject *bufferFill(BufferObject *b, void *data, Py_ssize_t size, const char *meta,
                     Py_ssize_t metaLen)
{
    b->data = data;
    b->size = size;
    b->meta = PyBytes_FromStringAndSize(meta, metaLen);
    if (b->meta == NULL) {
        Py_DECREF(b);
        return NULL;
    }
    return (PyObject *)b;
}

/*
 * Give the Buffer's hold on the node back: a pin is released, an unsealed
 * creation aborted. With the GIL held; never blocks on the client mutex (a
 * busy mutex means its holder sends the queued release when it lets go).
 * In a forked child nothing is sent: the connection is the parent's.
 */
static void bufferLetGo(BufferObject *b)
{
    ClientObject *c = b->client;
    int op = b->state == BUF_CREATED ? PENDING_ABORT : PENDING_RELEASE;

    if (c == NULL || !(b->pinned || b->state == BUF_CREATED))
        return;
    b->pinned = 0;
    if (c->pid != getpid() || c->oc == NULL)
        return;
    if (clientQueue(c, op, PyBytes_AS_STRING(b->id), (size_t)PyBytes_GET_SIZE(b->id), b->data) < 0)
        return;
    clientKick(c);
}

/* Drop the Buffer's share of the client; the last arena Buffer of a closed client frees it. */
static void bufferDetach(BufferObject *b)
{
    ClientObject *c = b->client;

    if (c == NULL)
        return;
    if (b->arena) {
        b->arena = 0;
        c->liveBuffers--;
        clientMaybeDestroy(c);
    }
}

/* The last reference is gone: give the pin back (or abort an unsealed creation), drop
 * the share of the client, free the copy. Can't fail. */
static void bufferDealloc(BufferObject *b)
{
    if (b->weakrefs != NULL)
        PyObject_ClearWeakRefs((PyObject *)b);
    bufferLetGo(b);
    bufferDetach(b);
    if (b->reply != NULL)
        freeReplyObject(b->reply);
    free(b->own);
    Py_XDECREF(b->id);
    Py_XDECREF(b->meta);
    Py_XDECREF(b->client);
    PyObject_Free(b);
}

/* Refuse a Buffer of the arena in a forked child: the pin is the parent's and the child
 * has no access to the arena (see forkChild). Returns 0, or -1 with ClientForked set. */
static int bufferForked(BufferObject *b)
{
    if (!b->arena || b->client == NULL || b->client->pid == getpid())
        return 0;
    PyErr_Format(errForked ? errForked : PyExc_BufferError,
                 "this object was pinned by process %d: its memory is not this process's after "
                 "fork; get it again in this process (objstore.connect() here)",
                 (int)b->client->pid);
    return -1;
}

/* Buffer protocol: the object's bytes, read-only unless it is being created. */
static int bufferGet(BufferObject *b, Py_buffer *view, int flags)
{
    int readonly = !(b->state == BUF_CREATED || b->state == BUF_COPY_CREATE);

    if (b->state == BUF_GONE) {
        PyErr_SetString(PyExc_BufferError, "the object's memory was released");
        return -1;
    }
    if (bufferForked(b) < 0)
        return -1;
    if ((flags & PyBUF_WRITABLE) && readonly) {
        PyErr_SetString(PyExc_BufferError, "a sealed object is read-only");
        return -1;
    }
    if (PyBuffer_FillInfo(view, (PyObject *)b, b->data, b->size, readonly, flags) < 0)
        return -1;
    b->exports++;
    return 0;
}

/* One view of the bytes is gone. Can't fail. */
static void bufferRelease(BufferObject *b, Py_buffer *view)
{
    b->exports--;
}

static PyBufferProcs bufferAsBuffer = {
    .bf_getbuffer = (getbufferproc)bufferGet,
    .bf_releasebuffer = (releasebufferproc)bufferRelease,
};

PyDoc_STRVAR(bufferReleaseDoc, "release()\n--\n\n"
                               "Give the pin back now. Raises BufferError while views of the\n"
                               "memory (memoryviews, arrays, tensors) are still alive.");

/* release(): the pin goes now. Returns None, or NULL (BufferError) while views live or
 * for an object still being created. */
static PyObject *bufferReleaseMethod(BufferObject *b, PyObject *unused)
{
    if (b->exports > 0)
        return PyErr_Format(PyExc_BufferError,
                            "%zd view(s) of this object are still alive: drop them first",
                            b->exports);
    if (b->state == BUF_CREATED || b->state == BUF_COPY_CREATE)
        return PyErr_Format(PyExc_BufferError, "seal() or abort() a created object");
    bufferLetGo(b);
    bufferDetach(b);
    if (b->reply != NULL)
        freeReplyObject(b->reply);
    b->reply = NULL;
    b->state = BUF_GONE;
    b->data = NULL;
    b->size = 0;
    Py_RETURN_NONE;
}

/* Called between the seal and the pin of bufferSealOp, with the GIL: the one way a
 * test makes another connection delete and remake the id in that window. NULL: none. */
static PyObject *afterSealHook;

/* Run afterSealHook, if set (client mutex held, GIL not). Its errors are printed. */
static void bufferRunSealHook(void)
{
    PyGILState_STATE g;
    PyObject *r;

    if (afterSealHook == NULL)
        return;
    g = PyGILState_Ensure();
    if (afterSealHook != NULL) {
        r = PyObject_CallNoArgs(afterSealHook);
        if (r == NULL)
            PyErr_Print();
        Py_XDECREF(r);
    }
    PyGILState_Release(g);
}

/* A seal under way: the Buffer, whether to pin after it, and whether the seal
 * itself went through. */
typedef struct SealOp {
    BufferObject *b;
    int pinAfter;
    int sealed;
    CopiesAsk copies;
} SealOp;

/*
 * Run a sealing step under the client mutex (a ClientOp): objClientSeal,
 * then, when views of the created bytes are still alive, a pin so that
 * their memory outlives a delete: objClientPinCreated, which takes the pin
 * only on this very object (its offset and generation), never on one made
 * under the id after the seal. Returns 0, or -1 with the error; s->sealed
 * is set once the seal succeeded (a failing pin after it still leaves the
 * object sealed, and the live views without memory of their own: the
 * caller tells the program).
 */
static int bufferSealOp(ClientObject *c, void *arg, SavedErr *e)
{
    SealOp *s = arg;
    BufferObject *b = s->b;
    const char *id = PyBytes_AS_STRING(b->id);
    size_t idLen = (size_t)PyBytes_GET_SIZE(b->id);
    ObjBuffer view;

    if (objClientSealCounted(c->oc, id, idLen, s->copies.replicas, s->copies.waitMs,
                             &s->copies.holders, &s->copies.counted) < 0)
        return -1;
    s->sealed = 1;
    if (s->pinAfter) {
        bufferRunSealHook();
        if (objClientPinCreated(c->oc, id, idLen, b->data, b->gen, &view) < 0) {
            e->code = objClientErrCode(c->oc);
            if (e->code == OBJ_ERR_NOTFOUND || e->code == OBJ_ERR_WRONGSTATE)
                snprintf(e->msg, sizeof(e->msg),
                         "WRONGSTATE sealed, but the object was deleted before it could be "
                         "pinned for the views still alive: they no longer show it and must "
                         "not be used (%s)",
                         objClientErrMsg(c->oc));
            else
                snprintf(e->msg, sizeof(e->msg), "%s", objClientErrMsg(c->oc));
            return -1;
        }
        b->pinned = 1;
    }
    return 0;
}

/* OBJ.PUT of a remote creation's bytes (a ClientOp). Returns 0 (s->sealed set), or -1. */
static int bufferPutCopyOp(ClientObject *c, void *arg, SavedErr *e)
{
    SealOp *s = arg;
    BufferObject *b = s->b;
    ObjPart part = {.data = b->data, .len = (size_t)b->size, .offset = 0};

    if (objClientPutPartsCounted(c->oc, PyBytes_AS_STRING(b->id), (size_t)PyBytes_GET_SIZE(b->id),
                                 &part, 1, (size_t)b->size, PyBytes_AS_STRING(b->meta),
                                 (size_t)PyBytes_GET_SIZE(b->meta), s->copies.replicas,
                                 s->copies.waitMs, &s->copies.holders, &s->copies.counted) < 0)
        return -1;
    s->sealed = 1;
    return 0;
}

PyDoc_STRVAR(bufferSealDoc,
             "seal(replicas=0, wait_ms=-1)\n--\n\n"
             "Seal a created object: it becomes immutable and visible. Views\n"
             "still alive keep it pinned (and stay writable: do not write).\n"
             "replicas: copies on distinct nodes (0: the node's default); wait_ms:\n"
             "how long the node waits for them (-1: its replica-timeout). Returns\n"
             "the node's count of holders for an object of several copies, else None.");

/* seal(replicas=0, wait_ms=-1): see bufferSealDoc. Returns the holder count or None, or
 * NULL with the exception set (an object whose seal failed stays created, so that the
 * caller can abort it). */
static PyObject *bufferSealIn(BufferObject *b, PyObject *args)
{
    int remote = b->state == BUF_COPY_CREATE;
    SealOp s = {.b = b, .pinAfter = b->exports > 0, .copies = COPIES_ASK_DEFAULT};
    int rv;

    if (!PyArg_ParseTuple(args, "|iL", &s.copies.replicas, &s.copies.waitMs))
        return NULL;
    if (b->state != BUF_CREATED && !remote)
        return PyErr_Format(PyExc_ValueError, "only a created object can be sealed");
    rv = clientRun(b->client, remote ? bufferPutCopyOp : bufferSealOp, &s);
    if (rv < 0 && !s.sealed)
        return NULL; /* still created: the caller may abort */
    if (remote) {
        b->state = BUF_COPY; /* the local bytes stay valid for live views */
    } else if (b->pinned) {
        b->state = BUF_PINNED;
    } else {
        b->state = BUF_GONE;
        bufferDetach(b);
        b->data = NULL;
        b->size = 0;
    }
    if (rv < 0)
        return NULL; /* sealed, but the views' object is gone: no new views */
    return copiesAskResult(&s.copies);
}

PYOBJ_COUNTED_METHOD(bufferSeal, BufferObject, self->client)

PyDoc_STRVAR(bufferAbortDoc, "abort()\n--\n\nFree a created object without sealing it.");

/* objClientAbort of the Buffer's id (a ClientOp). Returns 0 or -1. */
static int bufferAbortOp(ClientObject *c, void *arg, SavedErr *e)
{
    BufferObject *b = arg;

    return objClientAbort(c->oc, PyBytes_AS_STRING(b->id), (size_t)PyBytes_GET_SIZE(b->id));
}

/* abort(): free a created object (remote mode: send nothing). Returns None or NULL. */
static PyObject *bufferAbortIn(BufferObject *b, PyObject *unused)
{
    int rv;

    if (b->state == BUF_COPY_CREATE) {
        b->state = BUF_COPY; /* nothing was sent; the bytes stay for live views */
        Py_RETURN_NONE;
    }
    if (b->state != BUF_CREATED)
        return PyErr_Format(PyExc_ValueError, "only a created object can be aborted");
    if (clientUsable(b->client) < 0)
        return NULL;
    rv = clientRun(b->client, bufferAbortOp, b);
    b->state = BUF_GONE;
    bufferDetach(b);
    b->data = NULL;
    b->size = 0;
    if (rv < 0)
        return NULL;
    Py_RETURN_NONE;
}

PYOBJ_COUNTED_METHOD(bufferAbort, BufferObject, self->client)

PyDoc_STRVAR(bufferLayoutDoc,
             "_set_layout(code, bits, lanes, shape)\n--\n\n"
             "The DLPack dtype (code, bits, lanes) and shape that __dlpack__ exports.\n"
             "Refused (ValueError) unless it describes at most the object's bytes.");

/* _set_layout(code, bits, lanes, shape): what __dlpack__ exports. Returns None, or NULL
 * (ValueError, BADMETA) for a layout that names more bytes than the object holds, more
 * than DL_MAX_NDIM dimensions or a dtype DLPack cannot carry. */
static PyObject *bufferSetLayout(BufferObject *b, PyObject *args)
{
    int code, bits, lanes;
    PyObject *shape, *fast;
    Py_ssize_t n;
    int64_t bytes, shp[DL_MAX_NDIM];

    if (!PyArg_ParseTuple(args, "iiiO", &code, &bits, &lanes, &shape))
        return NULL;
    fast = PySequence_Fast(shape, "shape must be a sequence");
    if (fast == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(fast);
    if (n > DL_MAX_NDIM || code < 0 || code > 255 || bits <= 0 || bits > 255 || bits % 8 ||
        lanes <= 0 || lanes > 65535) {
        Py_DECREF(fast);
        return layoutFail("BADMETA unsupported DLPack layout (%zd dimensions, at most %d; "
                          "code %d, bits %d, lanes %d)",
                          n, DL_MAX_NDIM, code, bits, lanes);
    }
    if (layoutBytes(fast, n, (int64_t)(bits / 8) * lanes, shp, &bytes) < 0) {
        Py_DECREF(fast);
        return NULL;
    }
    Py_DECREF(fast);
    if (bytes > (int64_t)b->size)
        return layoutFail("BADMETA the layout needs %lld bytes; the object holds %zd",
                          (long long)bytes, b->size);
    b->dlCode = (uint8_t)code;
    b->dlBits = (uint8_t)bits;
    b->dlLanes = (uint16_t)lanes;
    b->ndim = (int)n;
    b->layoutSet = 1;
    memcpy(b->shape, shp, sizeof(shp[0]) * (size_t)n);
    Py_RETURN_NONE;
}

/* __dlpack__(stream=None): a "dltensor" capsule of the bytes (CPU, compact row-major,
 * the layout _set_layout checked against the object's size); the tensor holds a
 * reference to the Buffer, so the pin lives as long as it does. Returns the capsule, or
 * NULL (BufferError for a released object or a stream). */
static PyObject *bufferDlpack(BufferObject *b, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"stream", NULL};
    PyObject *stream = Py_None;
    DlExport *x;

    if (!PyArg_ParseTupleAndKeywords(args, kw, "|O", kwlist, &stream))
        return NULL;
    if (stream != Py_None)
        return PyErr_Format(PyExc_BufferError, "a CPU tensor takes no stream");
    if (b->state == BUF_GONE)
        return PyErr_Format(PyExc_BufferError, "the object's memory was released");
    if (bufferForked(b) < 0)
        return NULL;
    x = calloc(1, sizeof(*x));
    if (x == NULL)
        return PyErr_NoMemory();
    if (b->layoutSet) {
        memcpy(x->shape, b->shape, sizeof(x->shape));
        x->m.dl_tensor.ndim = b->ndim;
        x->m.dl_tensor.dtype.code = b->dlCode;
        x->m.dl_tensor.dtype.bits = b->dlBits;
        x->m.dl_tensor.dtype.lanes = b->dlLanes;
    } else {
        x->shape[0] = b->size;
        x->m.dl_tensor.ndim = 1;
        x->m.dl_tensor.dtype.code = 1;
        x->m.dl_tensor.dtype.bits = 8;
        x->m.dl_tensor.dtype.lanes = 1;
    }
    x->m.dl_tensor.data = b->data;
    x->m.dl_tensor.device.device_type = 1;
    x->m.dl_tensor.shape = x->shape;
    return dlCapsule(x, (PyObject *)b, &b->exports);
}

/* __dlpack_device__, `with`, and the read-only attributes: trivial accessors. */
static PyObject *bufferDlpackDevice(BufferObject *b, PyObject *unused)
{
    return Py_BuildValue("(ii)", 1, 0);
}

static PyObject *bufferEnter(BufferObject *b, PyObject *unused)
{
    return Py_NewRef((PyObject *)b);
}

static PyObject *bufferExit(BufferObject *b, PyObject *args)
{
    if (b->state == BUF_CREATED || b->state == BUF_COPY_CREATE)
        return PyErr_Format(PyExc_BufferError, "seal() or abort() a created object");
    if (b->state == BUF_GONE)
        Py_RETURN_NONE;
    return bufferReleaseMethod(b, NULL);
}

static PyObject *bufferGetAddress(BufferObject *b, void *unused)
{
    return PyLong_FromVoidPtr(b->data);
}

static PyObject *bufferGetSize(BufferObject *b, void *unused)
{
    return PyLong_FromSsize_t(b->size);
}

static PyObject *bufferGetMeta(BufferObject *b, void *unused)
{
    return Py_NewRef(b->meta ? b->meta : Py_None);
}

static PyObject *bufferGetId(BufferObject *b, void *unused)
{
    return Py_NewRef(b->id);
}

static PyObject *bufferGetZeroCopy(BufferObject *b, void *unused)
{
    return PyBool_FromLong(b->arena);
}

static PyObject *bufferGetPinned(BufferObject *b, void *unused)
{
    return PyBool_FromLong(b->pinned);
}

static PyObject *bufferGetExports(BufferObject *b, void *unused)
{
    return PyLong_FromSsize_t(b->exports);
}

static PyObject *bufferGetReleased(BufferObject *b, void *unused)
{
    return PyBool_FromLong(b->state == BUF_GONE);
}

static PyGetSetDef bufferGetSet[] = {
    {"address", (getter)bufferGetAddress, NULL, "address of the first byte in this process", NULL},
    {"size", (getter)bufferGetSize, NULL, "the object's size in bytes", NULL},
    {"meta", (getter)bufferGetMeta, NULL, "the object's metadata (bytes)", NULL},
    {"id", (getter)bufferGetId, NULL, "the object's id (bytes)", NULL},
    {"zero_copy", (getter)bufferGetZeroCopy, NULL, "the bytes are the arena's, not a copy", NULL},
    {"pinned", (getter)bufferGetPinned, NULL, "this Buffer holds a pin on the node", NULL},
    {"exports", (getter)bufferGetExports, NULL, "views and DLPack tensors alive", NULL},
    {"released", (getter)bufferGetReleased, NULL, "the memory was given back", NULL},
    {NULL},
};

static PyMethodDef bufferMethods[] = {
    {"release", (PyCFunction)bufferReleaseMethod, METH_NOARGS, bufferReleaseDoc},
    {"seal", (PyCFunction)bufferSeal, METH_VARARGS, bufferSealDoc},
    {"abort", (PyCFunction)bufferAbort, METH_NOARGS, bufferAbortDoc},
    {"_set_layout", (PyCFunction)bufferSetLayout, METH_VARARGS, bufferLayoutDoc},
    {"__dlpack__", (PyCFunction)(void (*)(void))bufferDlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(stream=None)\n--\n\nExport the bytes as a DLPack capsule (CPU, zero copy)."},
    {"__dlpack_device__", (PyCFunction)bufferDlpackDevice, METH_NOARGS,
     "__dlpack_device__()\n--\n\n(1, 0): CPU."},
    {"__enter__", (PyCFunction)bufferEnter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)bufferExit, METH_VARARGS, NULL},
    {NULL},
};

PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "objstore._objstore.Buffer",
    .tp_basicsize = sizeof(BufferObject),
    .tp_dealloc = (destructor)bufferDealloc,
    .tp_as_buffer = &bufferAsBuffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The memory of one object: pinned in the arena, being created, or a copy.\n"
              "Exports the bytes through the buffer protocol and DLPack; the pin is\n"
              "given back when the last reference to this Buffer (or its views) goes.",
    .tp_weaklistoffset = offsetof(BufferObject, weakrefs),
    .tp_methods = bufferMethods,
    .tp_getset = bufferGetSet,
};

/* _set_after_seal_hook(fn or None): see afterSealHook (tests only). Returns None. */
PyObject *modSetAfterSealHook(PyObject *mod, PyObject *fn)
{
    if (fn != Py_None && !PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "the hook is a callable or None");
    Py_XSETREF(afterSealHook, fn == Py_None ? NULL : Py_NewRef(fn));
    Py_RETURN_NONE;
}
