/*
 * _objstore.c - the native core of the Python package objstore: a CPython
 * extension over the C client library (libobjstore.a, linked in), so that
 * Python shares the library's mapping of the arena, its pin cache and its
 * RDMA connection. The pure-Python layer (objstore/__init__.py) builds the
 * public API (numpy, torch, pickle, errors) on the two types defined here:
 *
 *   Client  one connection (TCP, unix socket or RDMA) plus one ObjClient
 *           wrapped around it, a mutex that serialises every use of both,
 *           and a queue of pin releases waiting for that mutex;
 *   Buffer  one pinned (or created, or copied) object: it exports the
 *           object's arena bytes through the buffer protocol and DLPack,
 *           and gives its pin back when the last reference to it is gone.
 *
 * Concurrency: every call releases the GIL, then takes the client mutex
 * (never the other way round, so a thread waiting for the mutex never holds
 * the GIL). A Buffer deallocated while another thread holds the mutex (the
 * GC may run anywhere) only queues its release; the holder sends it when it
 * lets the mutex go. After fork the child's copy of a Client refuses every
 * call, and its Buffers never write to the parent's connection.
 * Design notes and the API: client/python/README.md.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <stdarg.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "client/objclient_int.h"
#include "client/objstore.h"
#include "client/rdmaconn.h"

#define PYOBJ_MAX_ARGS   4096
#define PYOBJ_CONNECT_MS 5000

/* ---- errors --------------------------------------------------------------------------- */

/* Set once by the Python layer (_set_errors): the base class, the code-word table and
 * the classes of the local causes. */
static PyObject *errBase, *errTable, *errConnection, *errMap, *errClosed, *errForked;

/*
 * The exception instance for a code word and message: the class registered
 * for the message's first word, else the base class. Returns a new
 * reference, or NULL with a Python error set.
 */
static PyObject *errInstance(PyObject *fallback, const char *msg, size_t len)
{
    PyObject *cls = fallback ? fallback : errBase, *word, *found = NULL, *text, *e;
    size_t wordLen = 0;

    while (wordLen < len && msg[wordLen] != ' ')
        wordLen++;
    if (fallback == NULL && errTable != NULL) {
        word = PyUnicode_DecodeLatin1(msg, (Py_ssize_t)wordLen, NULL);
        if (word == NULL)
            return NULL;
        found = PyDict_GetItemWithError(errTable, word);
        Py_DECREF(word);
        if (found == NULL && PyErr_Occurred())
            return NULL;
        if (found != NULL)
            cls = found;
    }
    if (cls == NULL)
        cls = PyExc_RuntimeError;
    text = PyUnicode_DecodeUTF8(msg, (Py_ssize_t)len, "replace");
    if (text == NULL)
        return NULL;
    e = PyObject_CallOneArg(cls, text);
    Py_DECREF(text);
    return e;
}

/* Raise the exception for a message (see errInstance). Returns NULL. */
static PyObject *errRaise(PyObject *fallback, const char *msg)
{
    PyObject *e = errInstance(fallback, msg, strlen(msg));

    if (e != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(e), e);
        Py_DECREF(e);
    }
    return NULL;
}

/*
 * Raise the error of a layout that a writer's metadata named and that does
 * not fit (printf-style message, "BADMETA ..."): the class registered for
 * BADMETA (objstore.BadMetadata, a ValueError). Returns NULL.
 */
static PyObject *layoutFail(const char *fmt, ...)
{
    char msg[256];
    va_list ap;

    va_start(ap, fmt);
    PyOS_vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return errRaise(NULL, msg);
}

/* A library error saved while the client mutex was held. */
typedef struct SavedErr {
    ObjErr code;
    char msg[512];
} SavedErr;

/* Raise a saved library error: I/O and mapping failures have classes of their
 * own, every other one is found by its code word. Returns NULL. */
static PyObject *errRaiseSaved(const SavedErr *e)
{
    if (e->code == OBJ_ERR_IO)
        return errRaise(errConnection, e->msg);
    if (e->code == OBJ_ERR_MAP)
        return errRaise(errMap, e->msg);
    return errRaise(NULL, e->msg);
}

/* ---- the connection transport ------------------------------------------------------------ */

/*
 * The hiredis connection is made here (not by objClientConnect) so that
 * AUTH can be sent on it before the library wraps it, and so that this
 * module can send the commands the library has no call for (LOCATE, NODES,
 * LIST, STATS, multi-id FETCH) on the very connection that holds the pins.
 */
/* The transport's operations (objclient_int.h) over a hiredis context: thin shims. */
static redisReply *tcpCommand(void *conn, int argc, const char **argv, const size_t *lens)
{
    return redisCommandArgv(conn, argc, argv, lens);
}

static int tcpFailed(const void *conn)
{
    return ((const redisContext *)conn)->err != 0;
}

static const char *tcpErrstr(const void *conn)
{
    return ((const redisContext *)conn)->errstr;
}

/* A unix socket is this machine: report loopback on both ends, which is what
 * the library's same-host check looks for. Returns 0 or -1. */
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

static const ObjClientTransport tcpTransport = {
    .command = tcpCommand,
    .failed = tcpFailed,
    .errstr = tcpErrstr,
    .addrs = tcpAddrs,
    .free = tcpFree,
};

/* The RDMA connection (rdmaconn.h) as a transport: the same shims over objRdma*. */
static redisReply *rdmaCommand(void *conn, int argc, const char **argv, const size_t *lens)
{
    return objRdmaCommandArgv(conn, argc, argv, lens);
}

static int rdmaFailed(const void *conn)
{
    return objRdmaErr(conn) != 0;
}

static const char *rdmaErrstr(const void *conn)
{
    return objRdmaErrStr(conn);
}

static int rdmaAddrs(const void *conn, struct sockaddr_storage *self, struct sockaddr_storage *peer)
{
    return objRdmaAddrs(conn, self, peer);
}

static void rdmaFree(void *conn)
{
    objRdmaFree(conn);
}

static const ObjClientTransport rdmaTransport = {
    .command = rdmaCommand,
    .failed = rdmaFailed,
    .errstr = rdmaErrstr,
    .addrs = rdmaAddrs,
    .free = rdmaFree,
};

/* ---- fork: the arena is not the child's ---------------------------------------------------- */

/*
 * A forked child inherits the parent's mapping of each arena and every view
 * into it, but none of the pins: once the parent lets an object go, its
 * range is reused and an inherited view would show another object's bytes.
 * So the child loses the arenas at fork (forkChild maps inaccessible memory
 * over each) and a touch of an inherited view faults; forkOnFault says why
 * before the fault takes its usual course (faulthandler's traceback, or the
 * default action). forkRanges lists the arenas of this process's clients.
 */
typedef struct ArenaRange {
    void *base;
    size_t size;
} ArenaRange;

static pthread_mutex_t forkLock = PTHREAD_MUTEX_INITIALIZER;
static ArenaRange *forkRanges;
static size_t forkCount, forkCap;
static struct sigaction forkOldSegv, forkOldBus;

/* Remember a client's arena mapping. Returns 0, or -1 when out of memory (then a child
 * keeps that mapping: its views are as before, readable and unpinned). */
static int forkTrack(void *base, size_t size)
{
    int rv = 0;

    pthread_mutex_lock(&forkLock);
    if (forkCount == forkCap) {
        size_t cap = forkCap ? forkCap * 2 : 8;
        ArenaRange *r = realloc(forkRanges, cap * sizeof(*r));
        if (r == NULL) {
            rv = -1;
            goto out_unlock;
        }
        forkRanges = r;
        forkCap = cap;
    }
    forkRanges[forkCount++] = (ArenaRange){base, size};
out_unlock:
    pthread_mutex_unlock(&forkLock);
    return rv;
}

/* Forget the mapping at base (its client unmaps it). Can't fail. */
static void forkUntrack(void *base)
{
    pthread_mutex_lock(&forkLock);
    for (size_t i = 0; i < forkCount; i++)
        if (forkRanges[i].base == base) {
            forkRanges[i] = forkRanges[--forkCount];
            break;
        }
    pthread_mutex_unlock(&forkLock);
}

/* Whether addr lies in an arena this process lost at fork (async-signal-safe). */
static int forkLost(const void *addr)
{
    for (size_t i = 0; i < forkCount; i++)
        if ((const char *)addr >= (const char *)forkRanges[i].base &&
            (const char *)addr < (const char *)forkRanges[i].base + forkRanges[i].size)
            return 1;
    return 0;
}

/* SIGSEGV/SIGBUS in a child: name the cause when it is an inherited view, then let the
 * fault repeat under the handler that was there before (async-signal-safe). */
static void forkOnFault(int sig, siginfo_t *si, void *uctx)
{
    static const char msg[] =
        "objstore: this process touched a view (array, memoryview, tensor) of an object that "
        "it inherited across fork: the pins are the parent's, so the memory may hold another "
        "object by now, and the child has no access to it. Get the object again in the child "
        "(objstore.connect() there).\n";
    ssize_t w;

    (void)uctx;
    if (forkLost(si->si_addr))
        w = write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)w;
    sigaction(sig, sig == SIGBUS ? &forkOldBus : &forkOldSegv, NULL);
}

/* pthread_atfork: the list stays whole across fork. */
static void forkPrepare(void)
{
    pthread_mutex_lock(&forkLock);
}

static void forkParent(void)
{
    pthread_mutex_unlock(&forkLock);
}

/* In the child (one thread, before any Python code): inaccessible memory over every
 * arena, and forkOnFault to explain a touch. Only system calls (async-signal-safe). */
static void forkChild(void)
{
    struct sigaction sa;

    for (size_t i = 0; i < forkCount; i++)
        mmap(forkRanges[i].base, forkRanges[i].size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    if (forkCount > 0) {
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = forkOnFault;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &forkOldSegv);
        sigaction(SIGBUS, &sa, &forkOldBus);
    }
    pthread_mutex_unlock(&forkLock);
}

/* ---- Client ------------------------------------------------------------------------------- */

enum { PENDING_RELEASE, PENDING_ABORT };

/* One release (or abort) waiting for the client mutex; singly linked, newest first. */
typedef struct Pending {
    struct Pending *next;
    int op;
    const void *view; /* a release: where the pinned object's bytes start (names the pin) */
    size_t idLen;
    unsigned char id[];
} Pending;

typedef struct ClientObject {
    PyObject_HEAD ObjClient *oc;  /* NULL once freed */
    const ObjClientTransport *tr; /* the transport oc wraps */
    void *conn;                   /* its connection (owned by oc) */
    pthread_mutex_t lock;         /* serialises every use of oc and conn */
    pthread_mutex_t qlock;        /* guards pending; held only for list surgery */
    Pending *pending;
    pid_t pid;              /* the process that connected */
    int closed;             /* close() was called: no new calls */
    int zeroCopy;           /* the arena is mapped: pins and creates work in place */
    Py_ssize_t liveBuffers; /* Buffers that point into the mapping (GIL-guarded) */
    Py_ssize_t inflight;    /* calls under way (GIL-guarded): close() waits for them */
} ClientObject;

static PyTypeObject ClientType;

/* Queue a release of the pin whose view starts at view, or an abort of id.
 * Returns 0, or -1 when out of memory (then the pin stays until the
 * connection closes, which drops it). */
static int clientQueue(ClientObject *c, int op, const void *id, size_t idLen, const void *view)
{
    Pending *p = malloc(sizeof(*p) + idLen);

    if (p == NULL)
        return -1;
    p->op = op;
    p->view = view;
    p->idLen = idLen;
    memcpy(p->id, id, idLen);
    pthread_mutex_lock(&c->qlock);
    p->next = c->pending;
    c->pending = p;
    pthread_mutex_unlock(&c->qlock);
    return 0;
}

/*
 * The one place that gives a pin back to the node (or aborts a creation):
 * called with the client mutex held. Errors are dropped: a failed
 * connection has dropped its pins already.
 */
static void clientDropPin(ClientObject *c, const Pending *p)
{
    if (c->oc == NULL)
        return;
    if (p->op == PENDING_ABORT)
        objClientAbort(c->oc, p->id, p->idLen);
    else /* by the view: the id may name a newer object by now */
        objClientReleaseBuffer(c->oc, p->id, p->idLen, &(ObjBuffer){.data = p->view});
}

/* Send every queued release, oldest first. Called with the client mutex held. */
static void clientFlushPending(ClientObject *c)
{
    Pending *list, *rev = NULL, *next;

    pthread_mutex_lock(&c->qlock);
    list = c->pending;
    c->pending = NULL;
    pthread_mutex_unlock(&c->qlock);
    for (; list != NULL; list = next) {
        next = list->next;
        list->next = rev;
        rev = list;
    }
    for (; rev != NULL; rev = next) {
        next = rev->next;
        clientDropPin(c, rev);
        free(rev);
    }
}

/* Whether releases are queued. */
static int clientHasPending(ClientObject *c)
{
    int any;

    pthread_mutex_lock(&c->qlock);
    any = c->pending != NULL;
    pthread_mutex_unlock(&c->qlock);
    return any;
}

/* Take the client mutex (the caller does not hold the GIL) and send what is queued. */
static void clientLock(ClientObject *c)
{
    pthread_mutex_lock(&c->lock);
    clientFlushPending(c);
}

/*
 * Let the mutex go. A release queued by a thread whose trylock failed while
 * we held it is sent here: the queue is read after the unlock, and the
 * queueing thread queued before its trylock, so nothing is left behind.
 */
static void clientUnlock(ClientObject *c)
{
    clientFlushPending(c);
    pthread_mutex_unlock(&c->lock);
    while (clientHasPending(c) && pthread_mutex_trylock(&c->lock) == 0) {
        clientFlushPending(c);
        pthread_mutex_unlock(&c->lock);
    }
}

/* Free the library's client (its pins go with the connection). Called without the GIL. */
static void clientDestroyLocked(ClientObject *c)
{
    void *base;
    size_t size;

    clientFlushPending(c);
    if (objClientArenaRange(c->oc, &base, &size) == 0)
        forkUntrack(base);
    objClientFree(c->oc);
    c->oc = NULL;
}

/*
 * Check that a call may use the client: not closed, not in a forked child.
 * Returns 0, or -1 with the exception set.
 */
static int clientUsable(ClientObject *c)
{
    if (c->pid != getpid()) {
        PyErr_Format(errForked ? errForked : PyExc_RuntimeError,
                     "this client was connected by process %d and cannot be used after fork: "
                     "call objstore.connect() again in the child (process %d)",
                     (int)c->pid, (int)getpid());
        return -1;
    }
    if (c->closed || c->oc == NULL) {
        PyErr_SetString(errClosed ? errClosed : PyExc_ValueError, "the client is closed");
        return -1;
    }
    return 0;
}

/* Save the library's error (called with the mutex held). */
static void clientSaveErr(ClientObject *c, SavedErr *e)
{
    e->code = objClientErrCode(c->oc);
    snprintf(e->msg, sizeof(e->msg), "%s", objClientErrMsg(c->oc));
}

/*
 * Free the library's client once nothing needs it: closed, no Buffer points into the
 * mapping, no call is under way (a call that finishes after close() may still hand
 * out a view). With the GIL held; releases it while it waits for the mutex. Can't fail.
 */
static void clientMaybeDestroy(ClientObject *c)
{
    if (!c->closed || c->liveBuffers > 0 || c->inflight > 0 || c->oc == NULL || c->pid != getpid())
        return;
    Py_BEGIN_ALLOW_THREADS;
    pthread_mutex_lock(&c->lock);
    clientDestroyLocked(c);
    pthread_mutex_unlock(&c->lock);
    Py_END_ALLOW_THREADS;
}

/* A method of c starts: close() now waits for it (see clientMaybeDestroy). Accepts NULL. */
static void clientCallBegin(ClientObject *c)
{
    if (c != NULL)
        c->inflight++;
}

/* The method is done, with result r (passed through; NULL keeps its exception). */
static PyObject *clientCallEnd(ClientObject *c, PyObject *r)
{
    if (c != NULL) {
        c->inflight--;
        clientMaybeDestroy(c);
    }
    return r;
}

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

/* ---- Buffer ------------------------------------------------------------------------------- */

enum {
    BUF_PINNED,      /* a pin of a sealed object in the arena */
    BUF_CREATED,     /* a created object in the arena, writable, not sealed yet */
    BUF_COPY,        /* a copy in this process (remote mode); sealed */
    BUF_COPY_CREATE, /* a local buffer for a remote create, written to the node at seal */
    BUF_GONE         /* released, sealed without exports, or aborted: no bytes */
};

#define BUF_MAX_NDIM 32

typedef struct BufferObject {
    PyObject_HEAD ClientObject *client; /* a strong reference while the bytes are the client's */
    PyObject *id;                       /* bytes */
    PyObject *meta;                     /* bytes */
    unsigned char *data;
    Py_ssize_t size;
    int state;
    int arena;          /* counted in client->liveBuffers */
    int pinned;         /* holds a pin of id (released at the end) */
    Py_ssize_t exports; /* buffer-protocol views and DLPack capsules alive */
    redisReply *reply;  /* BUF_COPY: owns the bytes */
    uint64_t gen;       /* BUF_CREATED: the created object's generation (0: unknown) */
    void *own;          /* BUF_COPY_CREATE: malloc'ed bytes */
    /* DLPack layout (set by the Python layer; default uint8, 1-D). */
    uint8_t dlCode, dlBits;
    uint16_t dlLanes;
    int ndim;
    int layoutSet; /* _set_layout was called: else the export is the bytes, 1-D */
    int64_t shape[BUF_MAX_NDIM];
    PyObject *weakrefs;
} BufferObject;

static PyTypeObject BufferType;

/* A new Buffer over bytes of c (client may be NULL for copies). Returns it or NULL. */
static BufferObject *bufferNew(ClientObject *c, const void *id, size_t idLen, int state)
{
    BufferObject *b = PyObject_New(BufferObject, &BufferType);

    if (b == NULL)
        return NULL;
    b->client = NULL;
    b->meta = NULL;
    b->data = NULL;
    b->size = 0;
    b->state = state;
    b->arena = 0;
    b->pinned = 0;
    b->exports = 0;
    b->reply = NULL;
    b->gen = 0;
    b->own = NULL;
    b->dlCode = 1;
    b->dlBits = 8;
    b->dlLanes = 1;
    b->ndim = 1;
    b->layoutSet = 0;
    b->shape[0] = 0;
    b->weakrefs = NULL;
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
    if (pthread_mutex_trylock(&c->lock) == 0)
        clientUnlock(c);
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

/* Called between the seal and the pin of bufferSealLocked, with the GIL: the one way a
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

/*
 * Run a sealing step under the client mutex: objClientSeal, then, when views
 * of the created bytes are still alive, a pin so that their memory outlives
 * a delete: objClientPinCreated, which takes the pin only on this very
 * object (its offset and generation), never on one made under the id after
 * the seal. Returns 0, or -1 with *e set; *sealed is set once the seal
 * succeeded (a failing pin after it still leaves the object sealed, and the
 * live views without memory of their own: the caller tells the program).
 */
static int bufferSealLocked(BufferObject *b, int pinAfter, SavedErr *e, int *sealed)
{
    ClientObject *c = b->client;
    const char *id = PyBytes_AS_STRING(b->id);
    size_t idLen = (size_t)PyBytes_GET_SIZE(b->id);
    ObjBuffer view;

    if (objClientSeal(c->oc, id, idLen) < 0) {
        clientSaveErr(c, e);
        return -1;
    }
    *sealed = 1;
    if (pinAfter) {
        bufferRunSealHook();
        if (objClientPinCreated(c->oc, id, idLen, b->data, b->gen, &view) < 0) {
            clientSaveErr(c, e);
            if (e->code == OBJ_ERR_NOTFOUND || e->code == OBJ_ERR_WRONGSTATE)
                snprintf(e->msg, sizeof(e->msg),
                         "WRONGSTATE sealed, but the object was deleted before it could be "
                         "pinned for the views still alive: they no longer show it and must "
                         "not be used (%s)",
                         objClientErrMsg(c->oc));
            return -1;
        }
        b->pinned = 1;
    }
    return 0;
}

/* OBJ.PUT of a remote creation's bytes. Returns 0 (*sealed set), or -1 with *e set. */
static int bufferPutCopyLocked(BufferObject *b, SavedErr *e, int *sealed)
{
    ClientObject *c = b->client;

    if (objClientPut(c->oc, PyBytes_AS_STRING(b->id), (size_t)PyBytes_GET_SIZE(b->id), b->data,
                     (size_t)b->size, PyBytes_AS_STRING(b->meta),
                     (size_t)PyBytes_GET_SIZE(b->meta)) < 0) {
        clientSaveErr(c, e);
        return -1;
    }
    *sealed = 1;
    return 0;
}

PyDoc_STRVAR(bufferSealDoc, "seal()\n--\n\n"
                            "Seal a created object: it becomes immutable and visible. Views\n"
                            "still alive keep it pinned (and stay writable: do not write).");

/* seal(): see bufferSealDoc. Returns None, or NULL with the exception set (an object
 * whose seal failed stays created, so that the caller can abort it). */
static PyObject *bufferSealIn(BufferObject *b, PyObject *unused)
{
    ClientObject *c = b->client;
    int rv, sealed = 0, remote = b->state == BUF_COPY_CREATE, pinAfter = b->exports > 0;
    SavedErr e;

    if (b->state != BUF_CREATED && !remote)
        return PyErr_Format(PyExc_ValueError, "only a created object can be sealed");
    if (clientUsable(c) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    clientLock(c);
    rv = remote ? bufferPutCopyLocked(b, &e, &sealed) : bufferSealLocked(b, pinAfter, &e, &sealed);
    clientUnlock(c);
    Py_END_ALLOW_THREADS;
    if (rv < 0 && !sealed)
        return errRaiseSaved(&e); /* still created: the caller may abort */
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
        return errRaiseSaved(&e); /* sealed, but the views' object is gone: no new views */
    Py_RETURN_NONE;
}

/* bufferSealIn, counted as a call under way of its client. */
static PyObject *bufferSeal(BufferObject *b, PyObject *unused)
{
    ClientObject *owner = b->client;

    clientCallBegin(owner);
    return clientCallEnd(owner, bufferSealIn(b, unused));
}

PyDoc_STRVAR(bufferAbortDoc, "abort()\n--\n\nFree a created object without sealing it.");

/* abort(): free a created object (remote mode: send nothing). Returns None or NULL. */
static PyObject *bufferAbortIn(BufferObject *b, PyObject *unused)
{
    ClientObject *c = b->client;
    const char *id = PyBytes_AS_STRING(b->id);
    size_t idLen = (size_t)PyBytes_GET_SIZE(b->id);
    int rv = 0;
    SavedErr e;

    if (b->state == BUF_COPY_CREATE) {
        b->state = BUF_COPY; /* nothing was sent; the bytes stay for live views */
        Py_RETURN_NONE;
    }
    if (b->state != BUF_CREATED)
        return PyErr_Format(PyExc_ValueError, "only a created object can be aborted");
    if (clientUsable(c) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    clientLock(c);
    if (objClientAbort(c->oc, id, idLen) < 0) {
        clientSaveErr(c, &e);
        rv = -1;
    }
    clientUnlock(c);
    Py_END_ALLOW_THREADS;
    b->state = BUF_GONE;
    bufferDetach(b);
    b->data = NULL;
    b->size = 0;
    if (rv < 0)
        return errRaiseSaved(&e);
    Py_RETURN_NONE;
}

/* bufferAbortIn, counted as a call under way of its client. */
static PyObject *bufferAbort(BufferObject *b, PyObject *unused)
{
    ClientObject *owner = b->client;

    clientCallBegin(owner);
    return clientCallEnd(owner, bufferAbortIn(b, unused));
}

PyDoc_STRVAR(bufferLayoutDoc,
             "_set_layout(code, bits, lanes, shape)\n--\n\n"
             "The DLPack dtype (code, bits, lanes) and shape that __dlpack__ exports.\n"
             "Refused (ValueError) unless it describes at most the object's bytes.");

/*
 * The bytes a compact row-major layout of ndim extents (each read from the
 * sequence fast) of elemBytes-byte elements covers, computed without
 * overflow: the extents go to shp. Returns 0 with *total set, or -1 with
 * ValueError (a negative extent, more than fits in 63 bits) or the
 * conversion's error set. The one check of every extent a writer's
 * metadata can name (bufferSetLayout, dlpackExportOf).
 */
static int layoutBytes(PyObject *fast, Py_ssize_t ndim, int64_t elemBytes, int64_t *shp,
                       int64_t *total)
{
    int64_t bytes = elemBytes;

    for (Py_ssize_t i = 0; i < ndim; i++) {
        long long v = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fast, i));

        if (v == -1 && PyErr_Occurred())
            return -1;
        if (v < 0) {
            layoutFail("BADMETA extent %lld of dimension %zd is negative", v, i);
            return -1;
        }
        shp[i] = v;
    }
    for (Py_ssize_t i = 0; i < ndim; i++)
        if (shp[i] == 0)
            bytes = 0; /* an empty tensor covers no bytes, whatever its other extents */
    for (Py_ssize_t i = 0; i < ndim && bytes > 0; i++)
        if (__builtin_mul_overflow(bytes, shp[i], &bytes)) {
            layoutFail("BADMETA the layout's extents multiply to more than 2**63 bytes");
            return -1;
        }
    *total = bytes;
    return 0;
}

/* _set_layout(code, bits, lanes, shape): what __dlpack__ exports. Returns None, or NULL
 * (ValueError, BADMETA) for a layout that names more bytes than the object holds, more
 * than BUF_MAX_NDIM dimensions or a dtype DLPack cannot carry. */
static PyObject *bufferSetLayout(BufferObject *b, PyObject *args)
{
    int code, bits, lanes;
    PyObject *shape, *fast;
    Py_ssize_t n;
    int64_t bytes, shp[BUF_MAX_NDIM];

    if (!PyArg_ParseTuple(args, "iiiO", &code, &bits, &lanes, &shape))
        return NULL;
    fast = PySequence_Fast(shape, "shape must be a sequence");
    if (fast == NULL)
        return NULL;
    n = PySequence_Fast_GET_SIZE(fast);
    if (n > BUF_MAX_NDIM || code < 0 || code > 255 || bits <= 0 || bits > 255 || bits % 8 ||
        lanes <= 0 || lanes > 65535) {
        Py_DECREF(fast);
        return layoutFail("BADMETA unsupported DLPack layout (%zd dimensions, at most %d; "
                          "code %d, bits %d, lanes %d)",
                          n, BUF_MAX_NDIM, code, bits, lanes);
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

/* ---- DLPack (the structures of dlpack.h, version 0.x ABI) ---------------------------- */

typedef struct {
    int32_t device_type; /* kDLCPU = 1 */
    int32_t device_id;
} DLDevice;

typedef struct {
    uint8_t code;
    uint8_t bits;
    uint16_t lanes;
} DLDataType;

typedef struct {
    void *data;
    DLDevice device;
    int32_t ndim;
    DLDataType dtype;
    int64_t *shape;
    int64_t *strides; /* NULL: compact row-major */
    uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
    DLTensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

/*
 * A DLManagedTensor with its own copy of the shape, and the two ends of its
 * life: the consumer's (it calls the deleter once it is done with the
 * tensor) and the capsule's (it is destroyed, consumed or not). The memory
 * goes when both have ended, so that a deleter that a consumer ran before
 * refusing the capsule (leaving it named "dltensor") is not run again by the
 * capsule's destructor, and a deleter is never run on freed memory. Both
 * flags change under the GIL.
 */
typedef struct DlExport {
    DLManagedTensor m;
    PyObject *owner;       /* the reference that keeps the bytes alive */
    BufferObject *counted; /* the Buffer whose exports count this tensor, or NULL */
    int consumerDone;      /* the deleter ran: owner and count are dropped */
    int capsuleGone;       /* the capsule was destroyed */
    int64_t shape[BUF_MAX_NDIM];
    int64_t strides[BUF_MAX_NDIM]; /* in elements; used by dlpackExportOf only */
} DlExport;

/* End the consumer's share (with the GIL held): the first call drops the owner and the
 * export count, any later one does nothing. Frees x once the capsule is gone too. */
static void dlConsumerDone(DlExport *x)
{
    if (!x->consumerDone) {
        x->consumerDone = 1;
        if (x->counted != NULL)
            x->counted->exports--;
        Py_DECREF(x->owner);
    }
    if (x->capsuleGone)
        free(x);
}

/*
 * The consumer is done with the tensor (any thread, with or without the
 * GIL). Runs its effect once however often a consumer calls it. At
 * interpreter shutdown the reference is leaked: the process is going away.
 */
static void dlDeleter(DLManagedTensor *m)
{
    PyGILState_STATE g;

    if (!Py_IsInitialized())
        return;
    g = PyGILState_Ensure();
    dlConsumerDone((DlExport *)m);
    PyGILState_Release(g);
}

/* The capsule goes. Unconsumed (still named "dltensor") it ends the consumer's share too
 * (dlConsumerDone: nothing twice); consumed, the consumer's deleter ends it later. */
static void dlCapsuleDestructor(PyObject *cap)
{
    const char *name = PyCapsule_GetName(cap);
    DlExport *x = PyCapsule_GetPointer(cap, name);

    if (x == NULL) {
        PyErr_Clear();
        return;
    }
    x->capsuleGone = 1;
    if (name != NULL && strcmp(name, "dltensor") == 0)
        dlConsumerDone(x); /* nobody consumed it, or a consumer ran the deleter and refused */
    else if (x->consumerDone)
        free(x);
}

/* Wrap a filled DlExport in a "dltensor" capsule that holds a reference to owner (and,
 * when counted is set, one export of it). Returns the capsule, or NULL (x is freed). */
static PyObject *dlCapsule(DlExport *x, PyObject *owner, BufferObject *counted)
{
    PyObject *cap;

    x->m.manager_ctx = x;
    x->m.deleter = dlDeleter;
    x->owner = owner;
    x->counted = counted;
    cap = PyCapsule_New(&x->m, "dltensor", dlCapsuleDestructor);
    if (cap == NULL) {
        free(x);
        return NULL;
    }
    Py_INCREF(owner);
    if (counted != NULL)
        counted->exports++;
    return cap;
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
    return dlCapsule(x, (PyObject *)b, b);
}

/* __dlpack_device__, `with`, and the read-only attributes: trivial accessors. */
static PyObject *bufferDlpackDevice(BufferObject *b, PyObject *unused)
{
    return Py_BuildValue("(ii)", 1, 0);
}

/*
 * The bytes from the first element that a strided layout (extents shp,
 * strides st >= 0 in elements, elem bytes each) reaches, in checked
 * arithmetic, into *hi. Returns 0, or -1 with BADMETA set when a product or
 * sum leaves 63 bits.
 */
static int layoutReach(Py_ssize_t ndim, const int64_t *shp, const int64_t *st, int64_t elem,
                       int64_t *hi)
{
    int64_t last = 0, reach;

    for (Py_ssize_t i = 0; i < ndim; i++)
        if (shp[i] == 0) {
            *hi = 0; /* empty: no element is ever read */
            return 0;
        }
    for (Py_ssize_t i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(st[i], shp[i] - 1, &reach) ||
            __builtin_add_overflow(last, reach, &last))
            goto out_overflow;
    if (__builtin_add_overflow(last, 1, &last) || __builtin_mul_overflow(last, elem, hi))
        goto out_overflow;
    return 0;

out_overflow:
    layoutFail("BADMETA the layout's strides reach beyond 2**63 bytes");
    return -1;
}

/*
 * _dlpack_export(owner, address, low, high, shape, strides, code, bits, lanes): a
 * "dltensor" capsule of memory that owner keeps alive (an array of a get: its base
 * holds the pin); strides in elements, or None for compact row-major. Every element
 * the layout names must lie in [low, high) (checked arithmetic). Why: numpy refuses
 * to export read-only arrays through DLPack, and every view of a get is read-only.
 * Negative strides are refused: torch 1.13 aborts the process on them. Returns the
 * capsule, or NULL (BufferError for a negative stride; ValueError, BADMETA, for a
 * layout out of bounds or of more than 32 dimensions).
 */
static PyObject *modDlpackExport(PyObject *mod, PyObject *args)
{
    PyObject *owner, *addrObj, *shape, *strides, *fast = NULL;
    unsigned long long low, high, addr;
    int code, bits, lanes;
    int64_t bytes, hi, elem;
    DlExport *x;
    Py_ssize_t n;

    if (!PyArg_ParseTuple(args, "OOKKO!Oiii", &owner, &addrObj, &low, &high, &PyTuple_Type, &shape,
                          &strides, &code, &bits, &lanes))
        return NULL;
    addr = (unsigned long long)(uintptr_t)PyLong_AsVoidPtr(addrObj);
    if (PyErr_Occurred())
        return NULL;
    n = PyTuple_GET_SIZE(shape);
    if (n > BUF_MAX_NDIM || code < 0 || code > 255 || bits <= 0 || bits > 255 || bits % 8 ||
        lanes <= 0 || lanes > 65535 || addr < low || addr > high ||
        (strides != Py_None && (!PyTuple_Check(strides) || PyTuple_GET_SIZE(strides) != n)))
        return layoutFail("BADMETA unsupported shape or strides for DLPack");
    x = calloc(1, sizeof(*x));
    if (x == NULL)
        return PyErr_NoMemory();
    elem = (int64_t)(bits / 8) * lanes;
    fast = PySequence_Fast(shape, "shape must be a tuple");
    if (fast == NULL || layoutBytes(fast, n, elem, x->shape, &bytes) < 0)
        goto out_free;
    hi = bytes;
    if (strides != Py_None) {
        for (Py_ssize_t i = 0; i < n; i++) {
            long long st = PyLong_AsLongLong(PyTuple_GET_ITEM(strides, i));
            if (st == -1 && PyErr_Occurred())
                goto out_free;
            if (st < 0) {
                PyErr_SetString(PyExc_BufferError,
                                "DLPack export of negative strides is refused (consumers such "
                                "as torch cannot take them): export a copy");
                goto out_free;
            }
            x->strides[i] = st;
        }
        if (layoutReach(n, x->shape, x->strides, elem, &hi) < 0)
            goto out_free;
    }
    if (hi > 0 && (unsigned long long)hi > high - addr) {
        layoutFail("BADMETA the layout reaches %lld bytes from its first element; the "
                   "memory has %llu",
                   (long long)hi, high - addr);
        goto out_free;
    }
    Py_DECREF(fast);
    x->m.dl_tensor.data = (void *)(uintptr_t)addr;
    x->m.dl_tensor.device.device_type = 1;
    x->m.dl_tensor.ndim = (int32_t)n;
    x->m.dl_tensor.dtype.code = (uint8_t)code;
    x->m.dl_tensor.dtype.bits = (uint8_t)bits;
    x->m.dl_tensor.dtype.lanes = (uint16_t)lanes;
    x->m.dl_tensor.shape = x->shape;
    x->m.dl_tensor.strides = strides == Py_None ? NULL : x->strides;
    return dlCapsule(x, owner, NULL);

out_free:
    Py_XDECREF(fast);
    free(x);
    return NULL;
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
    {"seal", (PyCFunction)bufferSeal, METH_NOARGS, bufferSealDoc},
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

static PyTypeObject BufferType = {
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

/* ---- Client methods ------------------------------------------------------------------------ */

/* Parse an id argument: bytes of 1 to 512 bytes (the Python layer encodes str). */
static int idArg(PyObject *o, const char **id, size_t *len)
{
    if (!PyBytes_Check(o)) {
        PyErr_Format(PyExc_TypeError, "id must be bytes or str, not %s", Py_TYPE(o)->tp_name);
        return -1;
    }
    *id = PyBytes_AS_STRING(o);
    *len = (size_t)PyBytes_GET_SIZE(o);
    if (*len < 1 || *len > 512) {
        PyErr_Format(PyExc_ValueError, "an id has 1 to 512 bytes, not %zu", *len);
        return -1;
    }
    return 0;
}

/* command(args): one command on the client's connection. Returns the reply converted by
 * replyToPy, or NULL: the exception of an error reply's code word, ConnectionFailed,
 * ClientClosed/ClientForked, or TypeError for arguments of the wrong type. */
static PyObject *clientCommandIn(ClientObject *c, PyObject *args)
{
    redisReply *r;
    PyObject *out;
    SavedErr e;
    Argv a;

    if (clientUsable(c) < 0 || argvFromSeq(args, &a) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    clientLock(c);
    r = clientRaw(c, &a, &e);
    clientUnlock(c);
    Py_END_ALLOW_THREADS;
    argvFree(&a);
    if (r == NULL)
        return errRaiseSaved(&e);
    if (r->type == REDIS_REPLY_ERROR) {
        out = errInstance(NULL, r->str, r->len);
        freeReplyObject(r);
        if (out != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(out), out);
            Py_DECREF(out);
        }
        return NULL;
    }
    out = replyToPy(r);
    freeReplyObject(r);
    return out;
}

/* clientCommandIn, counted as a call under way of its client. */
static PyObject *clientCommand(ClientObject *c, PyObject *args)
{
    ClientObject *owner = c;

    clientCallBegin(owner);
    return clientCallEnd(owner, clientCommandIn(c, args));
}

/* Pin in the arena (mutex held). Returns 0, or -1 with *e set. */
static int clientPinLocked(ClientObject *c, const char *id, size_t idLen, long long timeoutMs,
                           ObjBuffer *view, SavedErr *e)
{
    if (objClientPin(c->oc, id, idLen, timeoutMs, view) < 0) {
        clientSaveErr(c, e);
        return -1;
    }
    return 0;
}

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

/* pin(id, timeout_ms): a Buffer holding a pin of the sealed object (OBJ.PIN through the
 * library), or in remote mode a copy (OBJ.GET WITHMETA, no pin). Returns it or NULL. */
static PyObject *clientPinIn(ClientObject *c, PyObject *args)
{
    PyObject *idObj;
    long long timeoutMs = 0;
    const char *id;
    size_t idLen;
    ObjBuffer view;
    redisReply *r = NULL;
    BufferObject *b;
    SavedErr e;
    int rv = 0;

    if (!PyArg_ParseTuple(args, "O|L", &idObj, &timeoutMs) || idArg(idObj, &id, &idLen) < 0)
        return NULL;
    if (timeoutMs < -1)
        return PyErr_Format(PyExc_ValueError, "timeout must be >= 0 (or -1: forever)");
    if (clientUsable(c) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    clientLock(c);
    if (c->zeroCopy)
        rv = clientPinLocked(c, id, idLen, timeoutMs, &view, &e);
    else
        rv = (r = clientGetCopyLocked(c, id, idLen, timeoutMs, &e)) ? 0 : -1;
    clientUnlock(c);
    Py_END_ALLOW_THREADS;
    if (rv < 0)
        return errRaiseSaved(&e);
    b = bufferNew(c, id, idLen, c->zeroCopy ? BUF_PINNED : BUF_COPY);
    if (b == NULL) {
        if (r != NULL) {
            freeReplyObject(r);
        } else {
            clientQueue(c, PENDING_RELEASE, id, idLen, view.data);
            if (pthread_mutex_trylock(&c->lock) == 0)
                clientUnlock(c);
        }
        return NULL;
    }
    if (c->zeroCopy) {
        b->pinned = 1;
        b->data = (unsigned char *)view.data;
        b->size = (Py_ssize_t)view.size;
        b->meta = PyBytes_FromStringAndSize(view.meta, (Py_ssize_t)view.metaSize);
    } else {
        b->reply = r;
        b->data = (unsigned char *)r->element[0]->str;
        b->size = (Py_ssize_t)r->element[0]->len;
        b->meta = PyBytes_FromStringAndSize(r->element[1]->str, (Py_ssize_t)r->element[1]->len);
    }
    if (b->meta == NULL) {
        Py_DECREF(b);
        return NULL;
    }
    return (PyObject *)b;
}

/* clientPinIn, counted as a call under way of its client. */
static PyObject *clientPin(ClientObject *c, PyObject *args)
{
    ClientObject *owner = c;

    clientCallBegin(owner);
    return clientCallEnd(owner, clientPinIn(c, args));
}

/* create(id, size, meta): a writable Buffer of a created object in the arena (remote
 * mode: of a local buffer sent at seal). Returns it or NULL. */
static PyObject *clientCreateIn(ClientObject *c, PyObject *args)
{
    PyObject *idObj;
    Py_ssize_t size;
    const char *id, *meta = NULL;
    Py_ssize_t metaLen = 0;
    size_t idLen;
    void *data = NULL;
    uint64_t gen = 0;
    BufferObject *b;
    SavedErr e;
    int rv = 0;

    if (!PyArg_ParseTuple(args, "On|y#", &idObj, &size, &meta, &metaLen) ||
        idArg(idObj, &id, &idLen) < 0)
        return NULL;
    if (size < 0)
        return PyErr_Format(PyExc_ValueError, "size must be >= 0, not %zd", size);
    if (clientUsable(c) < 0)
        return NULL;
    if (!c->zeroCopy) {
        b = bufferNew(c, id, idLen, BUF_COPY_CREATE);
        if (b == NULL)
            return NULL;
        b->own = malloc(size > 0 ? (size_t)size : 1);
        b->meta = PyBytes_FromStringAndSize(meta, metaLen);
        if (b->own == NULL || b->meta == NULL) {
            Py_DECREF(b);
            return PyErr_NoMemory();
        }
        b->data = b->own;
        b->size = size;
        return (PyObject *)b;
    }
    Py_BEGIN_ALLOW_THREADS;
    clientLock(c);
    if (objClientCreateGen(c->oc, id, idLen, (size_t)size, meta, (size_t)metaLen, &data, &gen) <
        0) {
        clientSaveErr(c, &e);
        rv = -1;
    }
    clientUnlock(c);
    Py_END_ALLOW_THREADS;
    if (rv < 0)
        return errRaiseSaved(&e);
    b = bufferNew(c, id, idLen, BUF_CREATED);
    if (b == NULL) {
        clientQueue(c, PENDING_ABORT, id, idLen, NULL);
        return NULL;
    }
    b->data = data;
    b->size = size;
    b->gen = gen;
    b->meta = PyBytes_FromStringAndSize(meta, metaLen);
    if (b->meta == NULL) {
        Py_DECREF(b);
        return NULL;
    }
    return (PyObject *)b;
}

/* clientCreateIn, counted as a call under way of its client. */
static PyObject *clientCreate(ClientObject *c, PyObject *args)
{
    ClientObject *owner = c;

    clientCallBegin(owner);
    return clientCallEnd(owner, clientCreateIn(c, args));
}

/* The parts of one put: contiguous views of the caller's buffers and where they go. */
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

/* The put (mutex held): objClientPutParts, which sends a small object inline in one
 * OBJ.PUT and copies a large one into the arena with the library's copy threads (a
 * client in copying mode always goes inline). Returns 0, or -1 with *e set. */
static int clientPutLocked(ClientObject *c, const char *id, size_t idLen, const Parts *p,
                           const char *meta, size_t metaLen, SavedErr *e)
{
    ObjPart one, *parts = p->n <= 1 ? &one : malloc((size_t)p->n * sizeof(*parts));

    if (parts == NULL) {
        e->code = OBJ_ERR_OTHER;
        snprintf(e->msg, sizeof(e->msg), "OOM out of memory for %zd parts", p->n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < p->n; i++)
        parts[i] = (ObjPart){p->views[i].buf, (size_t)p->views[i].len, p->offsets[i]};
    if (!c->zeroCopy)
        objClientPutInline(c->oc);
    int rv = objClientPutParts(c->oc, id, idLen, parts, (size_t)p->n, p->total, meta, metaLen);
    if (rv < 0)
        clientSaveErr(c, e);
    if (parts != &one)
        free(parts);
    return rv;
}

/* put(id, parts, offsets, size, meta): one object of size bytes made of the parts at
 * their offsets, sealed. Returns None, or NULL with the exception set (nothing left). */
static PyObject *clientPutIn(ClientObject *c, PyObject *args)
{
    PyObject *idObj, *bufs, *offs;
    Py_ssize_t total, metaLen = 0;
    const char *id, *meta = NULL;
    size_t idLen;
    SavedErr e;
    Parts p;
    int rv;

    if (!PyArg_ParseTuple(args, "OO!O!n|y#", &idObj, &PyList_Type, &bufs, &PyList_Type, &offs,
                          &total, &meta, &metaLen) ||
        idArg(idObj, &id, &idLen) < 0)
        return NULL;
    if (clientUsable(c) < 0 || partsGet(bufs, offs, total, &p) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    clientLock(c);
    rv = clientPutLocked(c, id, idLen, &p, meta, (size_t)metaLen, &e);
    clientUnlock(c);
    Py_END_ALLOW_THREADS;
    partsFree(&p);
    if (rv < 0)
        return errRaiseSaved(&e);
    Py_RETURN_NONE;
}

/* clientPutIn, counted as a call under way of its client. */
static PyObject *clientPut(ClientObject *c, PyObject *args)
{
    ClientObject *owner = c;

    clientCallBegin(owner);
    return clientCallEnd(owner, clientPutIn(c, args));
}

/* The pin cache and prefault of the library, under the client lock. Return None or NULL. */
static PyObject *clientSetPinCacheIn(ClientObject *c, PyObject *args)
{
    Py_ssize_t maxIdle;
    SavedErr e;
    int rv = 0;

    if (!PyArg_ParseTuple(args, "n", &maxIdle))
        return NULL;
    if (maxIdle < 0)
        return PyErr_Format(PyExc_ValueError, "pin cache size must be >= 0");
    if (clientUsable(c) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    clientLock(c);
    if (objClientSetPinCache(c->oc, (size_t)maxIdle) < 0) {
        clientSaveErr(c, &e);
        rv = -1;
    }
    clientUnlock(c);
    Py_END_ALLOW_THREADS;
    if (rv < 0)
        return errRaiseSaved(&e);
    Py_RETURN_NONE;
}

/* clientSetPinCacheIn, counted as a call under way of its client. */
static PyObject *clientSetPinCache(ClientObject *c, PyObject *args)
{
    ClientObject *owner = c;

    clientCallBegin(owner);
    return clientCallEnd(owner, clientSetPinCacheIn(c, args));
}

static PyObject *clientFlushReleasesIn(ClientObject *c, PyObject *unused)
{
    SavedErr e;
    int rv = 0;

    if (clientUsable(c) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    clientLock(c);
    if (objClientFlushReleases(c->oc) < 0) {
        clientSaveErr(c, &e);
        rv = -1;
    }
    clientUnlock(c);
    Py_END_ALLOW_THREADS;
    if (rv < 0)
        return errRaiseSaved(&e);
    Py_RETURN_NONE;
}

/* clientFlushReleasesIn, counted as a call under way of its client. */
static PyObject *clientFlushReleases(ClientObject *c, PyObject *unused)
{
    ClientObject *owner = c;

    clientCallBegin(owner);
    return clientCallEnd(owner, clientFlushReleasesIn(c, unused));
}

static PyObject *clientPinCacheStatsIn(ClientObject *c, PyObject *unused)
{
    ObjPinCacheStats st;

    if (clientUsable(c) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    pthread_mutex_lock(&c->lock);
    objClientPinCacheStats(c->oc, &st);
    pthread_mutex_unlock(&c->lock);
    Py_END_ALLOW_THREADS;
    return Py_BuildValue("{sKsKsKsKsnsnsn}", "hits", (unsigned long long)st.hits, "misses",
                         (unsigned long long)st.misses, "batches", (unsigned long long)st.batches,
                         "released", (unsigned long long)st.released, "cached",
                         (Py_ssize_t)st.cached, "idle", (Py_ssize_t)st.idle, "max_idle",
                         (Py_ssize_t)st.maxIdle);
}

/* clientPinCacheStatsIn, counted as a call under way of its client. */
static PyObject *clientPinCacheStats(ClientObject *c, PyObject *unused)
{
    ClientObject *owner = c;

    clientCallBegin(owner);
    return clientCallEnd(owner, clientPinCacheStatsIn(c, unused));
}

static PyObject *clientSetPrefaultIn(ClientObject *c, PyObject *args)
{
    Py_ssize_t minBytes;

    if (!PyArg_ParseTuple(args, "n", &minBytes))
        return NULL;
    if (minBytes < 0)
        return PyErr_Format(PyExc_ValueError, "prefault size must be >= 0");
    if (clientUsable(c) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    pthread_mutex_lock(&c->lock);
    objClientSetPinPrefault(c->oc, (size_t)minBytes);
    pthread_mutex_unlock(&c->lock);
    Py_END_ALLOW_THREADS;
    Py_RETURN_NONE;
}

/* clientSetPrefaultIn, counted as a call under way of its client. */
static PyObject *clientSetPrefault(ClientObject *c, PyObject *args)
{
    ClientObject *owner = c;

    clientCallBegin(owner);
    return clientCallEnd(owner, clientSetPrefaultIn(c, args));
}

/* set_put_threads(n): the library's copy threads of a large put (0: its default). */
static PyObject *clientSetPutThreadsIn(ClientObject *c, PyObject *args)
{
    int threads;

    if (!PyArg_ParseTuple(args, "i", &threads))
        return NULL;
    if (threads < 0 || threads > 64)
        return PyErr_Format(PyExc_ValueError, "put threads must be 0 to 64, not %d", threads);
    if (clientUsable(c) < 0)
        return NULL;
    Py_BEGIN_ALLOW_THREADS;
    pthread_mutex_lock(&c->lock);
    objClientSetPutThreads(c->oc, threads);
    pthread_mutex_unlock(&c->lock);
    Py_END_ALLOW_THREADS;
    Py_RETURN_NONE;
}

/* clientSetPutThreadsIn, counted as a call under way of its client. */
static PyObject *clientSetPutThreads(ClientObject *c, PyObject *args)
{
    ClientObject *owner = c;

    clientCallBegin(owner);
    return clientCallEnd(owner, clientSetPutThreadsIn(c, args));
}

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
    if (c->oc != NULL && c->pid == getpid()) {
        Py_BEGIN_ALLOW_THREADS;
        pthread_mutex_lock(&c->lock);
        clientDestroyLocked(c);
        pthread_mutex_unlock(&c->lock);
        Py_END_ALLOW_THREADS;
    }
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
     "put(id, parts, offsets, size, meta=b'')\n--\n\n"
     "One object of the parts at their offsets, sealed: one OBJ.PUT under 1 MiB (and in "
     "remote mode), else create, copy with the copy threads, seal."},
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

static PyTypeObject ClientType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "objstore._objstore.Client",
    .tp_basicsize = sizeof(ClientObject),
    .tp_dealloc = (destructor)clientDealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One connection to one node (made by connect()).",
    .tp_methods = clientMethods,
    .tp_getset = clientGetSet,
};

/* ---- broadcast --------------------------------------------------------------------------- */

/* One node of a broadcast: its client, the library's record of its outcome, the id. */
typedef struct BcastNode {
    ClientObject *c;
    ObjBroadcastDest dest;
    const char *id;
    size_t idLen;
    long long timeoutMs;
    pthread_t thread;
    int started; /* thread runs bcastNodeRun */
} BcastNode;

/* Ask one node (GIL not held): objClientBroadcast on its client, under its mutex. */
static void *bcastNodeRun(void *arg)
{
    BcastNode *b = arg;

    clientLock(b->c);
    b->dest.client = b->c->oc;
    objClientBroadcast(&b->dest, 1, b->id, b->idLen, b->timeoutMs);
    clientUnlock(b->c);
    return NULL;
}

/*
 * Ask every node at once (GIL not held): one thread per node, so that all
 * of them fetch together and relay among themselves. The library asks the
 * destinations of one objClientBroadcast call in turn when they are
 * connections it did not make (as every connection of this module is), so
 * each node gets its own call. A node whose thread cannot start is asked
 * here, after the others have started. Can't fail.
 */
static void bcastRunAll(BcastNode *nodes, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++)
        nodes[i].started = pthread_create(&nodes[i].thread, NULL, bcastNodeRun, &nodes[i]) == 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!nodes[i].started)
            bcastNodeRun(&nodes[i]);
    for (Py_ssize_t i = 0; i < n; i++)
        if (nodes[i].started)
            pthread_join(nodes[i].thread, NULL);
}

/* A node's outcome: None when it holds the object, else its exception instance
 * (ConnectionFailed for a broken connection, else the class of the code word).
 * Returns a new reference or NULL. */
static PyObject *bcastOutcome(const BcastNode *b)
{
    const ObjBroadcastDest *d = &b->dest;

    if (d->err == OBJ_OK)
        Py_RETURN_NONE;
    return errInstance(d->err == OBJ_ERR_IO ? errConnection : NULL, d->errMsg, strlen(d->errMsg));
}

/*
 * broadcast(clients, id, timeout_ms): place id on the node of every client
 * (OBJ.FETCH on each, all under way at once; timeout_ms <= 0: each node's
 * fetch-timeout). Returns a list, per client in order, of None (the node
 * holds the object) or the exception of its failure; NULL with TypeError,
 * ValueError (a client twice), ClientClosed or ClientForked before anything
 * is sent.
 */
static PyObject *modBroadcast(PyObject *mod, PyObject *args)
{
    PyObject *seq, *idObj, *clients, *out = NULL;
    long long timeoutMs = 0;
    BcastNode *nodes = NULL;
    const char *id;
    size_t idLen;
    Py_ssize_t n, begun = 0;

    if (!PyArg_ParseTuple(args, "OO|L", &seq, &idObj, &timeoutMs) || idArg(idObj, &id, &idLen) < 0)
        return NULL;
    clients = PySequence_Tuple(seq); /* holds every client for the call */
    if (clients == NULL)
        return NULL;
    n = PyTuple_GET_SIZE(clients);
    nodes = calloc(n > 0 ? (size_t)n : 1, sizeof(*nodes));
    if (nodes == NULL) {
        PyErr_NoMemory();
        goto out_clients;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *c = PyTuple_GET_ITEM(clients, i);
        if (!PyObject_TypeCheck(c, &ClientType)) {
            PyErr_Format(PyExc_TypeError, "broadcast takes Clients, not %s", Py_TYPE(c)->tp_name);
            goto out_nodes;
        }
        for (Py_ssize_t j = 0; j < i; j++)
            if (nodes[j].c == (ClientObject *)c) {
                PyErr_SetString(PyExc_ValueError, "one client is given twice");
                goto out_nodes;
            }
        if (clientUsable((ClientObject *)c) < 0)
            goto out_nodes;
        nodes[i] = (BcastNode){.c = (ClientObject *)c,
                               .id = id,
                               .idLen = idLen,
                               .timeoutMs = timeoutMs,
                               .dest = {.name = ""}};
    }
    for (; begun < n; begun++)
        clientCallBegin(nodes[begun].c);
    Py_BEGIN_ALLOW_THREADS;
    bcastRunAll(nodes, n);
    Py_END_ALLOW_THREADS;
    out = PyList_New(n);
    for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
        PyObject *o = bcastOutcome(&nodes[i]);
        if (o == NULL)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, o);
    }
out_nodes:
    for (Py_ssize_t i = 0; i < begun; i++)
        clientCallEnd(nodes[i].c, NULL);
    free(nodes);
out_clients:
    Py_DECREF(clients);
    return out;
}

/* ---- connect ----------------------------------------------------------------------------- */

/* Make the raw connection (GIL released by the caller). Returns it (possibly failed:
 * check with tr->failed), or NULL when out of memory. */
static void *connectRaw(const char *host, int port, const char *unixPath, int rdma,
                        const ObjClientTransport **tr)
{
    struct timeval tv = {PYOBJ_CONNECT_MS / 1000, (PYOBJ_CONNECT_MS % 1000) * 1000};
    ObjRdmaConn *rc;

    if (rdma) {
        *tr = &rdmaTransport;
        rc = objRdmaConnect(host, port, PYOBJ_CONNECT_MS);
        if (rc != NULL && objRdmaErr(rc) == 0)
            objRdmaSetTimeout(rc, 0); /* a blocking OBJ.PIN may wait as long as it was told */
        return rc;
    }
    *tr = &tcpTransport;
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
static PyObject *modConnect(PyObject *mod, PyObject *args, PyObject *kw)
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

/* _set_errors(base, {word: class}, connection, map, closed, forked): the exception
 * classes, from the Python layer. Returns None or NULL (TypeError). */
static PyObject *modSetErrors(PyObject *mod, PyObject *args)
{
    PyObject *base, *table, *conn, *map, *closed, *forked;

    if (!PyArg_ParseTuple(args, "OO!OOOO", &base, &PyDict_Type, &table, &conn, &map, &closed,
                          &forked))
        return NULL;
    Py_XSETREF(errBase, Py_NewRef(base));
    Py_XSETREF(errTable, Py_NewRef(table));
    Py_XSETREF(errConnection, Py_NewRef(conn));
    Py_XSETREF(errMap, Py_NewRef(map));
    Py_XSETREF(errClosed, Py_NewRef(closed));
    Py_XSETREF(errForked, Py_NewRef(forked));
    Py_RETURN_NONE;
}

/* _set_after_seal_hook(fn or None): see afterSealHook (tests only). Returns None. */
static PyObject *modSetAfterSealHook(PyObject *mod, PyObject *fn)
{
    if (fn != Py_None && !PyCallable_Check(fn))
        return PyErr_Format(PyExc_TypeError, "the hook is a callable or None");
    Py_XSETREF(afterSealHook, fn == Py_None ? NULL : Py_NewRef(fn));
    Py_RETURN_NONE;
}

static PyMethodDef modMethods[] = {
    {"connect", (PyCFunction)(void (*)(void))modConnect, METH_VARARGS | METH_KEYWORDS,
     "connect(host='127.0.0.1', port=6379, unix_socket=None, rdma=False, username=None,\n"
     "        password=None, zero_copy=-1)\n--\n\n"
     "A Client. zero_copy: -1 map the arena when possible, 1 require it, 0 copies only."},
    {"broadcast", modBroadcast, METH_VARARGS,
     "broadcast(clients, id, timeout_ms=0)\n--\n\n"
     "Place id on the node of every client at once (OBJ.FETCH on each, objClientBroadcast).\n"
     "Returns, per client, None (the node holds it) or the exception of its failure."},
    {"_set_errors", modSetErrors, METH_VARARGS, NULL},
    {"_dlpack_export", modDlpackExport, METH_VARARGS, NULL},
    {"_set_after_seal_hook", modSetAfterSealHook, METH_O, NULL},
    {NULL},
};

static struct PyModuleDef objstoreModule = {
    PyModuleDef_HEAD_INIT,
    .m_name = "objstore._objstore",
    .m_doc = "Native core of objstore: the C client library's connection, arena and pins.",
    .m_size = -1,
    .m_methods = modMethods,
};

/* The module: its two types and its functions. Returns it or NULL. */
PyMODINIT_FUNC PyInit__objstore(void)
{
    PyObject *m;

    if (PyType_Ready(&ClientType) < 0 || PyType_Ready(&BufferType) < 0)
        return NULL;
    static int forkHandlers; /* once per process, however often the module is loaded */
    if (!forkHandlers && pthread_atfork(forkPrepare, forkParent, forkChild) != 0)
        return PyErr_Format(PyExc_RuntimeError, "pthread_atfork failed");
    forkHandlers = 1;
    m = PyModule_Create(&objstoreModule);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Client", (PyObject *)&ClientType) < 0 ||
        PyModule_AddObjectRef(m, "Buffer", (PyObject *)&BufferType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
