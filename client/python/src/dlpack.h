/*
 * dlpack.h - the Python package's native core (_objstore): DLPack export
 * (the structures of dlpack.h, version 0.x ABI) of memory that a Python
 * object keeps alive, and the checks of a layout against the bytes it may
 * cover. A Buffer's __dlpack__ (buffer.c) and _dlpack_export are built on it.
 */
#ifndef OBJSTORE_PY_DLPACK_H
#define OBJSTORE_PY_DLPACK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

/* Dimensions of a layout, at most. */
#define DL_MAX_NDIM 32

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
    PyObject *owner;     /* the reference that keeps the bytes alive */
    Py_ssize_t *counted; /* the export count (a Buffer's) this tensor is in, or NULL */
    int consumerDone;    /* the deleter ran: owner and count are dropped */
    int capsuleGone;     /* the capsule was destroyed */
    int64_t shape[DL_MAX_NDIM];
    int64_t strides[DL_MAX_NDIM]; /* in elements; used by _dlpack_export only */
} DlExport;

/* Wrap a filled DlExport in a "dltensor" capsule that holds a reference to owner (and,
 * when counted is set, one count of it). Returns the capsule, or NULL (x is freed). */
PyObject *dlCapsule(DlExport *x, PyObject *owner, Py_ssize_t *counted);
/* The bytes a compact row-major layout of ndim extents (read from the sequence fast)
 * of elemBytes-byte elements covers, the extents into shp. Returns 0 with *total set,
 * or -1 with ValueError (BADMETA) or the conversion's error set. */
int layoutBytes(PyObject *fast, Py_ssize_t ndim, int64_t elemBytes, int64_t *shp, int64_t *total);
/* _dlpack_export(owner, address, low, high, shape, strides, code, bits, lanes): a
 * capsule of memory owner keeps alive. Returns it or NULL. */
PyObject *modDlpackExport(PyObject *mod, PyObject *args);

#endif /* OBJSTORE_PY_DLPACK_H */
