/*
 * limits.h - what the node spends outside its arena, and the cap that keeps
 * it bounded: the max-objects setting (each object costs a few hundred bytes
 * of module heap however small it is) and the heap fields of OBJ.STATS
 * (limits.c; docs/configuration.md, docs/commands.md#statistics).
 */
#ifndef OBJSTORE_LIMITS_H
#define OBJSTORE_LIMITS_H

#include <stdint.h>

#include "stats.h"

/* Arena bytes per object that the default max-objects allows: an arena
 * filled with objects of this average size reaches the cap. */
#define OBJ_LIMITS_BYTES_PER_OBJECT 4096
/* The default cap is never below this, however small the arena. */
#define OBJ_LIMITS_MIN_OBJECTS 1024

/* The object cap that max-objects means now (-1: derived from memory, 0: no
 * limit). Can't fail. */
uint64_t objLimitsMaxObjects(void);
/* Hand the cap to the object table: at start and after CONFIG SET. */
void objLimitsApply(void);
/* The fields max_objects, object_limit_errors, heap_bytes, heap_store_bytes,
 * heap_directory_bytes (an ObjStatsFn). */
void objLimitsStats(ObjStatSink *sink);

#endif /* OBJSTORE_LIMITS_H */
