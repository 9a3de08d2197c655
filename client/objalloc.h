/*
 * objalloc.h - private to the client library: the allocator every allocation
 * of libobjstore goes through (objSetAllocators in objstore.h sets it).
 * Not installed.
 *
 * The table is a weak reference: a program that links rdmaconn.c alone (the
 * patched redis-benchmark and redis-cli do) or never calls objSetAllocators
 * (so a static link does not pull alloc.o) allocates with the C library's
 * malloc family, which is what the table would hold anyway.
 */
#ifndef OBJSTORE_OBJALLOC_H
#define OBJSTORE_OBJALLOC_H

#include <stdlib.h>
#include <string.h>

#include "objstore.h"

/* The allocator in force (alloc.c); the C library's until objSetAllocators. */
extern ObjAllocFuncs objAllocFns __attribute__((weak, visibility("hidden")));

static inline void *objMalloc(size_t size)
{
    return &objAllocFns != NULL ? objAllocFns.mallocFn(size) : malloc(size);
}

static inline void *objCalloc(size_t nmemb, size_t size)
{
    return &objAllocFns != NULL ? objAllocFns.callocFn(nmemb, size) : calloc(nmemb, size);
}

static inline void *objRealloc(void *ptr, size_t size)
{
    return &objAllocFns != NULL ? objAllocFns.reallocFn(ptr, size) : realloc(ptr, size);
}

static inline void objFree(void *ptr)
{
    if (&objAllocFns != NULL)
        objAllocFns.freeFn(ptr);
    else
        free(ptr);
}

/* strdup through the library's allocator. Returns NULL when out of memory. */
static inline char *objStrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = objMalloc(n);

    if (p != NULL)
        memcpy(p, s, n);
    return p;
}

#endif /* OBJSTORE_OBJALLOC_H */
