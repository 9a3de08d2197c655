/*
 * slots.h - the Redis Cluster slot router of the directory client, as pure
 * data and functions (no sockets, no hiredis): the CRC16 key hash and the
 * hash-tag rule of the Redis Cluster specification, a slot -> master map
 * filled from a CLUSTER SLOTS reply by a thin adapter in conn.c, the
 * parser of MOVED/ASK redirections, the parser of the `directory` seed
 * list ("host:port[,host:port...]"), and the object key schema, whose whole
 * point is which slot a key lands in (docs/cluster.md).
 *
 * A single Redis without cluster support is a map with one master that owns
 * every slot, so the directory client has one code path for both.
 */
#ifndef OBJSTORE_SLOTS_H
#define OBJSTORE_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#define SLOTS_COUNT    16384
#define SLOTS_HOST_MAX 256 /* with the NUL */

typedef struct SlotsAddr {
    char host[SLOTS_HOST_MAX];
    int port;
} SlotsAddr;

/* Which master serves each slot. masters grows as ranges name new ones;
 * owner[s] is an index into masters, or -1 when no master covers s. */
typedef struct SlotsMap {
    SlotsAddr *masters;
    int nMasters, capMasters;
    int16_t owner[SLOTS_COUNT];
} SlotsMap;

typedef enum SlotsRedirectKind {
    SLOTS_REDIRECT_MOVED = 1, /* the slot lives elsewhere now: update the map */
    SLOTS_REDIRECT_ASK = 2    /* this one command goes elsewhere, after ASKING */
} SlotsRedirectKind;

typedef struct SlotsRedirect {
    SlotsRedirectKind kind;
    int slot;
    SlotsAddr to; /* host "" means the host of the server that answered */
} SlotsRedirect;

/* CRC16-CCITT (XMODEM: polynomial 0x1021, initial value 0), as Redis Cluster
 * hashes keys. Can't fail. */
uint16_t slotsCrc16(const void *buf, size_t len);
/* The slot of a key: CRC16 of its hash tag (the bytes between the first '{'
 * and the first '}' after it, when there are any) or of the whole key,
 * modulo 16384. Can't fail. */
int slotsKeySlot(const void *key, size_t len);

/* Bytes an object key takes beyond its id and suffix (see slotsObjKey). */
#define SLOTS_OBJ_KEY_EXTRA 17

/* Writes the directory key of object id (idLen bytes, any bytes) with the
 * given suffix (":meta", ":loc") to out, which holds at least
 * idLen + strlen(suffix) + SLOTS_OBJ_KEY_EXTRA + 1 bytes, NUL-terminated;
 * returns its length. An id that is a usable hash tag of its own (not
 * empty, not starting with '}') gives objstore:{<id>}<suffix>; any other
 * gives objstore:h{<4 hex digits of CRC16(id)>}:<id><suffix>. Either way
 * every key of one id hashes to one slot, and no two ids (nor an object
 * key and a node key) share a key. Can't fail. */
size_t slotsObjKey(char *out, const void *id, size_t idLen, const char *suffix);

/* Parses "host:port" (the port after the last ':', 1..65535, the host
 * non-empty and shorter than SLOTS_HOST_MAX). Returns 0, or -1. */
int slotsParseAddr(const char *s, size_t len, SlotsAddr *out);
/* Parses a seed list "host:port[,host:port...]" (spaces around entries are
 * allowed) into out[0..max). Returns the number of seeds (>= 1), or -1 when
 * an entry is malformed, the list is empty or holds more than max seeds. */
int slotsParseSeeds(const char *list, SlotsAddr *out, int max);
/* Parses an error reply "MOVED <slot> <host>:<port>" or "ASK <slot>
 * <host>:<port>" (len bytes, no NUL needed). Returns 0, or -1 when msg is
 * not a well-formed redirection. */
int slotsParseRedirect(const char *msg, size_t len, SlotsRedirect *out);

/* An empty map: no master, no slot covered. Can't fail. */
void slotsMapInit(SlotsMap *m);
/* Frees what the map holds and empties it; the map may be reused. */
void slotsMapReset(SlotsMap *m);
/* The index of master host:port, or -1 when the map has no such master. */
int slotsMapFind(const SlotsMap *m, const char *host, int port);
/* The index of master host:port, added when new. Returns -1 only when the
 * host does not fit or the map holds INT16_MAX masters already. */
int slotsMapAddMaster(SlotsMap *m, const char *host, int port);
/* Slots first..last belong to master host:port (added when new). Returns the
 * master's index, or -1 for a range outside 0..16383 or first > last, or
 * when slotsMapAddMaster fails. */
int slotsMapAssign(SlotsMap *m, int first, int last, const char *host, int port);
/* The master serving slot, or -1. */
int slotsMapOwner(const SlotsMap *m, int slot);
/* How many slots have a master. */
int slotsMapCovered(const SlotsMap *m);

#endif /* OBJSTORE_SLOTS_H */
