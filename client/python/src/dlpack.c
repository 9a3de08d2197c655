/*
 * dlpack.c - the Python package's native core (_objstore): DLPack capsules
 * and the layout checks of dlpack.h.
 */
#include "dlpack.h"

#include <stdlib.h>
#include <string.h>

#include "errors.h"

/* End the consumer's share (with the GIL held): the first call drops the owner and the
 * export count, any later one does nothing. Frees x once the capsule is gone too. */
static void dlConsumerDone(DlExport *x)
{
    if (!x->consumerDone) {
        x->consumerDone = 1;
        if (x->counted != NULL)
            (*x->counted)--;
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

/* See dlpack.h. */
PyObject *dlCapsule(DlExport *x, PyObject *owner, Py_ssize_t *counted)
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
        (*counted)++;
    return cap;
}

/*
 * The bytes a compact row-major layout of ndim extents (each read from the
 * sequence fast) of elemBytes-byte elements covers, computed without
 * overflow: the extents go to shp. Returns 0 with *total set, or -1 with
 * ValueError (a negative extent, more than fits in 63 bits) or the
 * conversion's error set. The one check of every extent a writer's
 * metadata can name (a Buffer's _set_layout, _dlpack_export).
 */
int layoutBytes(PyObject *fast, Py_ssize_t ndim, int64_t elemBytes, int64_t *shp, int64_t *total)
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
PyObject *modDlpackExport(PyObject *mod, PyObject *args)
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
    if (n > DL_MAX_NDIM || code < 0 || code > 255 || bits <= 0 || bits > 255 || bits % 8 ||
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
