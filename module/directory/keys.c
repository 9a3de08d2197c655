/*
 * keys.c - the directory's key schema: an object's meta hash and location
 * set (objstore:{<id>}:meta, objstore:{<id>}:loc, one slot per object, built
 * by slotsObjKey), a node's hash (objstore:node:<name>), the node registry's
 * buckets (objstore:nodes:{b<k>}) and a node's marker on each master
 * (objstore:mark:{<tag>}:<name>). Every builder returns a malloc'd,
 * NUL-terminated key and its length; none can fail.
 */
#include "dirint.h"

#include <stdio.h>
#include <string.h>

/* Builds the directory key of object id with suffix (":meta", ":loc"),
 * binary-safe: objstore:{<id>}<suffix>, or for an id that cannot be its own
 * hash tag objstore:h{<hex>}:<id><suffix> (slotsObjKey). Either way all of
 * an id's keys share one slot. */
char *dirObjKey(const char *id, size_t idLen, const char *suffix, size_t *lenOut)
{
    char *k = dirMalloc(idLen + strlen(suffix) + SLOTS_OBJ_KEY_EXTRA + 1);
    *lenOut = slotsObjKey(k, id, idLen, suffix);
    return k;
}

/* Builds objstore:node:<name> for a name of nameLen bytes. */
char *dirNodeKey(const char *name, size_t nameLen, size_t *lenOut)
{
    size_t plen = sizeof(OBJ_DIR_NODE_PREFIX) - 1;
    char *k = dirMalloc(plen + nameLen + 1);
    memcpy(k, OBJ_DIR_NODE_PREFIX, plen);
    memcpy(k + plen, name, nameLen);
    k[plen + nameLen] = '\0';
    *lenOut = plen + nameLen;
    return k;
}

/* Builds objstore:nodes:{b<k>}, the registry bucket of bucket k. */
char *dirBucketKey(int k, size_t *lenOut)
{
    char buf[64];
    int n = snprintf(buf, sizeof(buf), "%s{b%d}", OBJ_DIR_NODES_PREFIX, k);
    char *key = dirMalloc((size_t)n + 1);
    memcpy(key, buf, (size_t)n + 1);
    *lenOut = (size_t)n;
    return key;
}

/* Builds objstore:mark:{<tag>}:<name>, this node's marker key whose slot
 * is the one of the decimal tag (the name may hold braces: it comes after
 * the tag). */
char *dirMarkKey(unsigned tag, size_t *lenOut)
{
    char head[64];
    int n = snprintf(head, sizeof(head), "%s{%u}:", OBJ_DIR_MARK_PREFIX, tag);
    char *key = dirMalloc((size_t)n + dir.nameLen + 1);
    memcpy(key, head, (size_t)n);
    memcpy(key + n, dir.cfg.nodeName, dir.nameLen);
    key[(size_t)n + dir.nameLen] = '\0';
    *lenOut = (size_t)n + dir.nameLen;
    return key;
}

/* The registry bucket of a node: spread by the CRC16 of its name. */
int dirBucketOf(const char *name, size_t nameLen)
{
    return slotsCrc16(name, nameLen) % OBJ_DIR_NODE_BUCKETS;
}
