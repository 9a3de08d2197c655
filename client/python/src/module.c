/*
 * module.c - the native core of the Python package objstore: a CPython
 * extension over the C client library (libobjstore.a, linked in), so that
 * Python shares the library's mapping of the arena, its pin cache and its
 * RDMA connection. The pure-Python layer (objstore/__init__.py) builds the
 * public API (numpy, torch, pickle, errors) on the two types of this module:
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
 *
 * The files, lowest first: errors.c (exceptions), forkguard.c (fork),
 * dlpack.c (DLPack capsules), clientcore.c (the mutex, the release queue,
 * clientRun), buffer.c (Buffer), client.c (Client), connect.c, broadcast.c,
 * and this one (the module's table). Design notes and the API:
 * client/python/README.md.
 */
#include "buffer.h"
#include "client.h"
#include "dlpack.h"
#include "errors.h"
#include "forkguard.h"

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
    if (forkInstall() < 0)
        return PyErr_Format(PyExc_RuntimeError, "pthread_atfork failed");
    m = PyModule_Create(&objstoreModule);
    if (m == NULL)
        return NULL;
    PyObject *words = errWordsTuple();
    if (words == NULL || PyModule_AddObjectRef(m, "Client", (PyObject *)&ClientType) < 0 ||
        PyModule_AddObjectRef(m, "Buffer", (PyObject *)&BufferType) < 0 ||
        PyModule_AddObjectRef(m, "ERROR_WORDS", words) < 0) {
        Py_XDECREF(words);
        Py_DECREF(m);
        return NULL;
    }
    Py_DECREF(words);
    return m;
}
