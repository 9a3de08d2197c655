/*
 * slots.c - the pure half of the directory's Redis Cluster support: how a
 * key maps to a slot, which master serves a slot, and what a MOVED or ASK
 * redirection says. conn.c and batch.c do the I/O around it; keeping this part
 * free of sockets and hiredis is what lets tests/unit/test_slots.c check it
 * against the vectors of the Redis Cluster specification.
 */
#include "slots.h"

#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* CRC16-XMODEM, bit by bit: keys are short, and one function with no table
 * is easy to check against the specification. */
uint16_t slotsCrc16(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

/* The hash tag rule of the specification: only the first '{' counts, an
 * empty tag ("{}") means the whole key is hashed. */
int slotsKeySlot(const void *key, size_t len)
{
    const char *k = key;
    const char *open = len > 0 ? memchr(k, '{', len) : NULL;
    if (open != NULL) {
        size_t start = (size_t)(open - k) + 1;
        const char *close = memchr(k + start, '}', len - start);
        if (close != NULL && close > k + start)
            return slotsCrc16(k + start, (size_t)(close - (k + start))) & (SLOTS_COUNT - 1);
    }
    return slotsCrc16(k, len) & (SLOTS_COUNT - 1);
}

/*
 * Redis Cluster hashes a key's first "{...}" with something inside, else
 * the whole key. Behind the brace-free prefix "objstore:{" the tag is the id
 * up to its first '}', the same for every suffix -- unless that is nothing
 * (an empty id, or one starting with '}'): then each key hashed whole, and
 * the meta hash and the location set fell in different slots (CROSSSLOT for
 * the unpublish script). Those ids take a tag of our own instead, 4 hex
 * digits that cannot hold a brace, behind a prefix ("objstore:h{") that no
 * key of the first form and no node key ("objstore:node...") starts with,
 * so the two forms never meet; within the second form the tag's length is
 * fixed, so the id is recovered from the key. Every id that worked before
 * keeps its keys.
 */
size_t slotsObjKey(char *out, const void *id, size_t idLen, const char *suffix)
{
    size_t n, slen = strlen(suffix);
    if (idLen > 0 && *(const char *)id != '}') {
        memcpy(out, "objstore:{", 10);
        n = 10;
        memcpy(out + n, id, idLen);
        n += idLen;
        out[n++] = '}';
    } else {
        static const char hex[] = "0123456789abcdef";
        uint16_t crc = slotsCrc16(id, idLen);
        memcpy(out, "objstore:h{", 11);
        n = 11;
        for (int shift = 12; shift >= 0; shift -= 4)
            out[n++] = hex[(crc >> shift) & 0xf];
        out[n++] = '}';
        out[n++] = ':';
        if (idLen > 0)
            memcpy(out + n, id, idLen);
        n += idLen;
    }
    memcpy(out + n, suffix, slen + 1);
    return n + slen;
}

/* Parses a decimal in [lo, hi] that fills exactly len bytes. Returns 0, or -1. */
static int slotsParseInt(const char *s, size_t len, long lo, long hi, long *out)
{
    uint64_t n;
    if (len > 9 || utilParseU64(s, len, &n) != 0 || n < (uint64_t)lo || n > (uint64_t)hi)
        return -1;
    *out = (long)n;
    return 0;
}

/* Splits at the last ':' so that an IPv6 host keeps its colons; the host
 * may be empty here (a redirection's "unknown endpoint"), callers that need
 * one check. Returns 0, or -1. */
static int slotsParseAddrMaybeEmpty(const char *s, size_t len, SlotsAddr *out)
{
    size_t colon = len;
    long port;
    while (colon > 0 && s[colon - 1] != ':')
        colon--;
    if (colon == 0 || colon - 1 >= SLOTS_HOST_MAX ||
        slotsParseInt(s + colon, len - colon, 1, 65535, &port) != 0 ||
        memchr(s, '\0', colon - 1) != NULL)
        return -1;
    memcpy(out->host, s, colon - 1);
    out->host[colon - 1] = '\0';
    out->port = (int)port;
    return 0;
}

int slotsParseAddr(const char *s, size_t len, SlotsAddr *out)
{
    if (slotsParseAddrMaybeEmpty(s, len, out) != 0 || out->host[0] == '\0')
        return -1;
    return 0;
}

int slotsParseSeeds(const char *list, SlotsAddr *out, int max)
{
    int n = 0;
    const char *p = list;
    for (;;) {
        const char *end = strchr(p, ',');
        size_t len = end != NULL ? (size_t)(end - p) : strlen(p);
        while (len > 0 && *p == ' ') {
            p++;
            len--;
        }
        while (len > 0 && p[len - 1] == ' ')
            len--;
        if (n >= max || slotsParseAddr(p, len, &out[n]) != 0)
            return -1;
        n++;
        if (end == NULL)
            return n;
        p = end + 1;
    }
}

int slotsParseRedirect(const char *msg, size_t len, SlotsRedirect *out)
{
    size_t word;
    if (len > 6 && memcmp(msg, "MOVED ", 6) == 0) {
        out->kind = SLOTS_REDIRECT_MOVED;
        word = 6;
    } else if (len > 4 && memcmp(msg, "ASK ", 4) == 0) {
        out->kind = SLOTS_REDIRECT_ASK;
        word = 4;
    } else {
        return -1;
    }
    const char *slot = msg + word;
    const char *space = memchr(slot, ' ', len - word);
    long n;
    if (space == NULL || slotsParseInt(slot, (size_t)(space - slot), 0, SLOTS_COUNT - 1, &n) != 0)
        return -1;
    out->slot = (int)n;
    const char *addr = space + 1;
    return slotsParseAddrMaybeEmpty(addr, len - (size_t)(addr - msg), &out->to);
}

void slotsMapInit(SlotsMap *m)
{
    m->masters = NULL;
    m->nMasters = m->capMasters = 0;
    for (int s = 0; s < SLOTS_COUNT; s++)
        m->owner[s] = -1;
}

void slotsMapReset(SlotsMap *m)
{
    free(m->masters);
    slotsMapInit(m);
}

int slotsMapFind(const SlotsMap *m, const char *host, int port)
{
    for (int i = 0; i < m->nMasters; i++)
        if (m->masters[i].port == port && strcmp(m->masters[i].host, host) == 0)
            return i;
    return -1;
}

int slotsMapAddMaster(SlotsMap *m, const char *host, int port)
{
    int i = slotsMapFind(m, host, port);
    if (i >= 0)
        return i;
    if (strlen(host) >= SLOTS_HOST_MAX || m->nMasters >= INT16_MAX)
        return -1;
    if (m->nMasters == m->capMasters) {
        int cap = m->capMasters ? m->capMasters * 2 : 8;
        SlotsAddr *grown = realloc(m->masters, (size_t)cap * sizeof(*grown));
        if (grown == NULL)
            return -1;
        m->masters = grown;
        m->capMasters = cap;
    }
    SlotsAddr *a = &m->masters[m->nMasters];
    memset(a, 0, sizeof(*a));
    strcpy(a->host, host);
    a->port = port;
    return m->nMasters++;
}

int slotsMapAssign(SlotsMap *m, int first, int last, const char *host, int port)
{
    if (first < 0 || last >= SLOTS_COUNT || first > last)
        return -1;
    int i = slotsMapAddMaster(m, host, port);
    if (i < 0)
        return -1;
    for (int s = first; s <= last; s++)
        m->owner[s] = (int16_t)i;
    return i;
}

int slotsMapOwner(const SlotsMap *m, int slot)
{
    return slot >= 0 && slot < SLOTS_COUNT ? m->owner[slot] : -1;
}

int slotsMapCovered(const SlotsMap *m)
{
    int n = 0;
    for (int s = 0; s < SLOTS_COUNT; s++)
        n += m->owner[s] >= 0;
    return n;
}
