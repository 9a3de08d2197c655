/*
 * buffer.h - the Python package's native core (_objstore): the Buffer
 * type, one pinned (or created, or copied) object whose bytes it exports
 * through the buffer protocol and DLPack, giving its pin back when the last
 * reference to it is gone.
 */
#ifndef OBJSTORE_PY_BUFFER_H
#define OBJSTORE_PY_BUFFER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <hiredis/hiredis.h>

#include "clientcore.h"
#include "dlpack.h"

enum {
    BUF_PINNED,      /* a pin of a sealed object in the arena */
    BUF_CREATED,     /* a created object in the arena, writable, not sealed yet */
    BUF_COPY,        /* a copy in this process (remote mode); sealed */
    BUF_COPY_CREATE, /* a local buffer for a remote create, written to the node at seal */
    BUF_GONE         /* released, sealed without exports, or aborted: no bytes */
};

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
    int64_t shape[DL_MAX_NDIM];
    PyObject *weakrefs;
} BufferObject;

extern PyTypeObject BufferType;

/* A new Buffer over bytes of c (c may be NULL for copies). Returns it or NULL. */
BufferObject *bufferNew(ClientObject *c, const void *id, size_t idLen, int state);
/* Point a new Buffer at size bytes at data, with a copy of the metadata. Returns b, or
 * NULL when the copy fails (then b is dropped: its pin or creation given back). */
PyObject *bufferFill(BufferObject *b, void *data, Py_ssize_t size, const char *meta,
                     Py_ssize_t metaLen);
/* _set_after_seal_hook(fn or None): a callable run between the seal and the pin of a
 * seal with live views (tests only). Returns None or NULL. */
PyObject *modSetAfterSealHook(PyObject *mod, PyObject *fn);

#endif /* OBJSTORE_PY_BUFFER_H */
