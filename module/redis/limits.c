/*
 * limits.c - the object cap and the heap counters (limits.h). A zero-byte
 * object takes one 64-byte unit of arena but its table entry, id copy,
 * allocator node and index slot live on the module's heap, where Redis's
 * maxmemory never looks; without a cap, tiny objects could take a node's
 * RAM long before its arena fills. The default cap follows the arena:
 * memory / OBJ_LIMITS_BYTES_PER_OBJECT objects.
 */
#include "node.h"
#include "limits.h"
#include "common/heap.h"

uint64_t objLimitsMaxObjects(void)
{
    long long set = objNode.cfg.maxObjects;
    uint64_t derived = (uint64_t)objNode.cfg.memory / OBJ_LIMITS_BYTES_PER_OBJECT;

    if (set >= 0)
        return (uint64_t)set;
    return derived < OBJ_LIMITS_MIN_OBJECTS ? OBJ_LIMITS_MIN_OBJECTS : derived;
}

void objLimitsApply(void)
{
    if (!objNode.table)
        return; /* at load, before the table exists: module.c applies it then */
    objTableLock(objNode.table);
    objTableSetMaxObjects(objNode.table, objLimitsMaxObjects());
    objTableUnlock(objNode.table);
}

void objLimitsStats(ObjStatSink *sink)
{
    ObjTableStats ts;
    uint64_t store = objHeapBytes(OBJ_HEAP_STORE), directory = objHeapBytes(OBJ_HEAP_DIRECTORY);

    objTableLock(objNode.table);
    objTableGetStats(objNode.table, &ts);
    objTableUnlock(objNode.table);
    objStatNum(sink, "max_objects", ts.maxObjects);
    objStatNum(sink, "object_limit_errors", ts.limitErrors);
    objStatNum(sink, "heap_bytes", store + directory);
    objStatNum(sink, "heap_store_bytes", store);
    objStatNum(sink, "heap_directory_bytes", directory);
}
