/*
 * wire.c - encoding, decoding and authentication of the frames nodes
 * exchange (wire.h). Decoding is strict (one byte string per message, every
 * field checked), so re-encoding a decoded frame gives back its bytes, which
 * tests/fuzz checks; integers go a byte at a time, independent of the host's
 * byte order and alignment. The frame layout, field by field, and the
 * session handshake: docs/architecture.md, "Wire frames".
 */
#include "ghash.h"
#include "wire.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

/* Fixed parts of the bodies (see the table above). */
#define WIRE_HELLO_FIXED  58
#define WIRE_AUTH_LEN     OBJ_WIRE_PROOF
#define WIRE_FETCH_FIXED  2
#define WIRE_FETCHR_FIXED 14 /* offset u64, flags u32, then as FETCH */
#define WIRE_DATA_LEN     24
#define WIRE_RNDV_LEN     36
#define WIRE_PART_LEN     40
#define WIRE_RPART_LEN    52 /* PART's fields, then addr u64, rkey u32 */
#define WIRE_ERROR_FIXED  4
#define WIRE_REPL_FIXED   18 /* flags u32, want u32, checksum u64, idLen u16, then the id */
#define WIRE_HELD_LEN     8  /* checksum u64 */
/* The message a proof signs: label, role, three length-prefixed names, two
 * feature fields, two nonces (see wireProof in wire.h). */
#define WIRE_PROOF_LABEL "objstore-proof-v2"
/* The session keys' derivation uses a label of the same length. */
#define WIRE_KEY_LABEL "objstore-keys-v3"
#define WIRE_PROOF_MSG_MAX                                                                         \
    (sizeof(WIRE_PROOF_LABEL) - 1 + 1 + 3 * (2 + OBJ_WIRE_NAME_MAX) + 2 * 2 + 2 * OBJ_WIRE_NONCE)
/* IV domains of the session MAC: a frame's header and body, a payload. */
#define WIRE_IV_FRAME   1u
#define WIRE_IV_PAYLOAD 2u

/* The largest body of each type must fit the limit every reader enforces. */
_Static_assert(WIRE_HELLO_FIXED + OBJ_WIRE_NAME_MAX <= OBJ_WIRE_MAX_BODY, "HELLO too long");
_Static_assert(WIRE_FETCH_FIXED + OBJ_WIRE_ID_MAX <= OBJ_WIRE_MAX_BODY, "FETCH too long");
_Static_assert(WIRE_ERROR_FIXED + OBJ_WIRE_TEXT_MAX <= OBJ_WIRE_MAX_BODY, "ERROR too long");
_Static_assert(WIRE_REPL_FIXED + OBJ_WIRE_ID_MAX <= OBJ_WIRE_MAX_BODY, "REPL too long");
_Static_assert(OBJ_WIRE_HDR_LEN + OBJ_WIRE_MAX_BODY <= INT_MAX, "frame length must fit an int");
_Static_assert(OBJ_WIRE_NAME_MAX <= UINT16_MAX && OBJ_WIRE_ID_MAX <= UINT16_MAX &&
                   OBJ_WIRE_TEXT_MAX <= UINT16_MAX,
               "lengths travel as u16");

/* Body length bounds per type, checked as soon as the header is in, so that a
 * reader never waits for (or buffers) a body that cannot be valid. HELLO is
 * only bounded by OBJ_WIRE_MAX_BODY: its length is judged after its version. */
static const struct {
    const char *name;
    uint32_t minBody, maxBody;
} wireTypes[WIRE_TYPE_MAX + 1] = {
    [WIRE_HELLO] = {"HELLO", 0, OBJ_WIRE_MAX_BODY},
    [WIRE_AUTH] = {"AUTH", WIRE_AUTH_LEN, WIRE_AUTH_LEN},
    [WIRE_FETCH] = {"FETCH", WIRE_FETCH_FIXED + 1, WIRE_FETCH_FIXED + OBJ_WIRE_ID_MAX},
    [WIRE_DATA] = {"DATA", WIRE_DATA_LEN, WIRE_DATA_LEN},
    [WIRE_RNDV] = {"RNDV", WIRE_RNDV_LEN, WIRE_RNDV_LEN},
    [WIRE_DONE] = {"DONE", 0, 0},
    [WIRE_ERROR] = {"ERROR", WIRE_ERROR_FIXED, WIRE_ERROR_FIXED + OBJ_WIRE_TEXT_MAX},
    [WIRE_PING] = {"PING", 0, 0},
    [WIRE_PONG] = {"PONG", 0, 0},
    [WIRE_FETCHR] = {"FETCHR", WIRE_FETCHR_FIXED + 1, WIRE_FETCHR_FIXED + OBJ_WIRE_ID_MAX},
    [WIRE_PART] = {"PART", WIRE_PART_LEN, WIRE_PART_LEN},
    [WIRE_RPART] = {"RPART", WIRE_RPART_LEN, WIRE_RPART_LEN},
    [WIRE_REPL] = {"REPL", WIRE_REPL_FIXED + 1, WIRE_REPL_FIXED + OBJ_WIRE_ID_MAX},
    [WIRE_HELD] = {"HELD", WIRE_HELD_LEN, WIRE_HELD_LEN},
};

static const char *const wireErrNames[WIRE_ERR_MAX + 1] = {
    [WIRE_ERR_NOTFOUND] = "NOTFOUND",
    [WIRE_ERR_NOTSEALED] = "NOTSEALED",
    [WIRE_ERR_OOM] = "OOM",
    [WIRE_ERR_AUTH] = "AUTH",
    [WIRE_ERR_PROTO] = "PROTO",
    [WIRE_ERR_INTERNAL] = "INTERNAL",
    [WIRE_ERR_BUSY] = "BUSY",
    [WIRE_ERR_WRONGSTATE] = "WRONGSTATE",
    [WIRE_ERR_NOTSUPPORTED] = "NOTSUPPORTED",
    [WIRE_ERR_UNAVAILABLE] = "UNAVAILABLE",
    [WIRE_ERR_TIMEOUT] = "TIMEOUT",
    [WIRE_ERR_CHECKSUM] = "CHECKSUM",
    [WIRE_ERR_DRAINING] = "DRAINING",
};

/* ---- little-endian helpers ------------------------------------------------------- */

static void wirePut16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void wirePut32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void wirePut64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t wireGet16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t wireGet32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t wireGet64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

/* Types whose reqId names a request and therefore may not be 0. */
static int wireNeedsReqId(int type)
{
    return type == WIRE_FETCH || type == WIRE_DATA || type == WIRE_RNDV || type == WIRE_DONE ||
           type == WIRE_FETCHR || type == WIRE_PART || type == WIRE_RPART || type == WIRE_REPL ||
           type == WIRE_HELD;
}

/* ---- decoding ---------------------------------------------------------------------- */

int wireDecodeHdr(const uint8_t *buf, WireHdr *h, const char **why)
{
    const char *dummy;
    if (why == NULL)
        why = &dummy;
    *why = NULL;

    h->type = buf[0];
    h->flags = buf[1];
    h->reserved = wireGet16(buf + 2);
    h->bodyLen = wireGet32(buf + 4);
    h->reqId = wireGet64(buf + 8);

    if (h->type == 0 || h->type > WIRE_TYPE_MAX || !wireTypes[h->type].name) {
        *why = "unknown frame type";
        return -1;
    }
    if (h->flags != 0) {
        *why = "frame flags are not 0";
        return -1;
    }
    if (h->bodyLen > OBJ_WIRE_MAX_BODY) {
        *why = "frame body longer than OBJ_WIRE_MAX_BODY";
        return -1;
    }
    if (h->bodyLen < wireTypes[h->type].minBody || h->bodyLen > wireTypes[h->type].maxBody) {
        *why = "frame body length impossible for its type";
        return -1;
    }
    if (h->reqId == 0 && wireNeedsReqId(h->type)) {
        *why = "frame needs a non-zero reqId";
        return -1;
    }
    return 0;
}

/* Decode a HELLO body of len bytes into m. Returns 0, or -1 with *why set.
 * Magic and version come first (see the top of the file); on a version error
 * m->u.hello.version holds the peer's version so the caller can log it. */
static int wireDecodeHello(const uint8_t *b, uint32_t len, WireMsg *m, const char **why)
{
    if (len < 6) {
        *why = "HELLO body too short for magic and version";
        return -1;
    }
    m->u.hello.magic = wireGet32(b);
    m->u.hello.version = wireGet16(b + 4);
    if (m->u.hello.magic != OBJ_WIRE_MAGIC) {
        *why = "HELLO magic is wrong: peer is not an objstore node";
        return -1;
    }
    if (m->u.hello.version != OBJ_WIRE_VERSION) {
        *why = "HELLO protocol version differs from ours: peer runs an incompatible objstore";
        return -1;
    }
    if (len < WIRE_HELLO_FIXED) {
        *why = "HELLO body too short";
        return -1;
    }
    m->u.hello.features = wireGet16(b + 6);
    memcpy(m->u.hello.nonce, b + 8, OBJ_WIRE_NONCE);
    memcpy(m->u.hello.proof, b + 24, OBJ_WIRE_PROOF);
    uint16_t nameLen = wireGet16(b + 56);
    if (nameLen == 0 || nameLen > OBJ_WIRE_NAME_MAX) {
        *why = "HELLO name length out of range";
        return -1;
    }
    if (len != WIRE_HELLO_FIXED + (uint32_t)nameLen) {
        *why = "HELLO body length does not match its name length";
        return -1;
    }
    m->u.hello.nameLen = nameLen;
    m->u.hello.name = (const char *)(b + WIRE_HELLO_FIXED);
    return 0;
}

/* Decode a FETCH body. Returns 0, or -1 with *why set. */
static int wireDecodeFetch(const uint8_t *b, uint32_t len, WireMsg *m, const char **why)
{
    if (len < WIRE_FETCH_FIXED) {
        *why = "FETCH body too short";
        return -1;
    }
    uint16_t idLen = wireGet16(b);
    if (idLen == 0 || idLen > OBJ_WIRE_ID_MAX) {
        *why = "FETCH id length out of range";
        return -1;
    }
    if (len != WIRE_FETCH_FIXED + (uint32_t)idLen) {
        *why = "FETCH body length does not match its id length";
        return -1;
    }
    m->u.fetch.idLen = idLen;
    m->u.fetch.id = (const char *)(b + WIRE_FETCH_FIXED);
    return 0;
}

/* Decode a FETCHR body: offset, flags, then a FETCH body. Returns 0, or -1
 * with *why set (unknown flags, an offset past any object). */
static int wireDecodeFetchR(const uint8_t *b, uint32_t len, WireMsg *m, const char **why)
{
    if (len < WIRE_FETCHR_FIXED) {
        *why = "FETCHR body too short";
        return -1;
    }
    uint64_t offset = wireGet64(b);
    uint32_t flags = wireGet32(b + 8);
    if (offset > 2 * OBJ_WIRE_SIZE_MAX || (flags & ~WIRE_FETCHR_FLAGS)) {
        *why = "FETCHR offset or flags out of range";
        return -1;
    }
    if (wireDecodeFetch(b + 12, len - 12, m, why) == -1)
        return -1;
    m->u.fetch.offset = offset;
    m->u.fetch.flags = flags;
    return 0;
}

/* Are a REPL's flags and want in range? */
static int wireReplOk(uint32_t flags, uint32_t want)
{
    return (flags & ~WIRE_REPL_FLAGS) == 0 && want >= 1 && want <= OBJ_WIRE_WANT_MAX;
}

/* Decode a REPL body: flags, want, checksum, then an id as FETCH's. Returns
 * 0, or -1 with *why set (unknown flags, want out of range, a bad id). */
static int wireDecodeRepl(const uint8_t *b, uint32_t len, WireMsg *m, const char **why)
{
    if (len < WIRE_REPL_FIXED) {
        *why = "REPL body too short";
        return -1;
    }
    uint32_t flags = wireGet32(b), want = wireGet32(b + 4);
    if (!wireReplOk(flags, want)) {
        *why = "REPL flags or want out of range";
        return -1;
    }
    uint16_t idLen = wireGet16(b + 16);
    if (idLen == 0 || idLen > OBJ_WIRE_ID_MAX) {
        *why = "REPL id length out of range";
        return -1;
    }
    if (len != WIRE_REPL_FIXED + (uint32_t)idLen) {
        *why = "REPL body length does not match its id length";
        return -1;
    }
    m->u.repl.flags = flags;
    m->u.repl.want = want;
    m->u.repl.checksum = wireGet64(b + 8);
    m->u.repl.idLen = idLen;
    m->u.repl.id = (const char *)(b + WIRE_REPL_FIXED);
    return 0;
}

/* Is a PART's range within its object (sizes already in range)? */
static int wirePartOk(uint64_t size, uint64_t metaSize, uint64_t offset, uint64_t len)
{
    return len >= 1 && offset < size + metaSize && len <= size + metaSize - offset;
}

/* Decode a PART (rpart == 0) or RPART (rpart == 1) body. Returns 0, or -1
 * with *why set. */
static int wireDecodePart(const uint8_t *b, uint32_t len, int rpart, WireMsg *m, const char **why)
{
    if (len != (rpart ? WIRE_RPART_LEN : WIRE_PART_LEN)) {
        *why = rpart ? "RPART body length is not 52" : "PART body length is not 40";
        return -1;
    }
    m->u.data.size = wireGet64(b);
    m->u.data.metaSize = wireGet64(b + 8);
    m->u.data.checksum = wireGet64(b + 16);
    m->u.data.offset = wireGet64(b + 24);
    m->u.data.len = wireGet64(b + 32);
    if (rpart) {
        m->u.data.addr = wireGet64(b + 40);
        m->u.data.rkey = wireGet32(b + 48);
    }
    if (m->u.data.size > OBJ_WIRE_SIZE_MAX || m->u.data.metaSize > OBJ_WIRE_SIZE_MAX ||
        !wirePartOk(m->u.data.size, m->u.data.metaSize, m->u.data.offset, m->u.data.len)) {
        *why = rpart ? "RPART sizes or range out of range" : "PART sizes or range out of range";
        return -1;
    }
    return 0;
}

/* Decode a DATA (rndv == 0) or RNDV (rndv == 1) body. Returns 0, or -1. */
static int wireDecodeData(const uint8_t *b, uint32_t len, int rndv, WireMsg *m, const char **why)
{
    if (len != (rndv ? WIRE_RNDV_LEN : WIRE_DATA_LEN)) {
        *why = rndv ? "RNDV body length is not 36" : "DATA body length is not 24";
        return -1;
    }
    m->u.data.size = wireGet64(b);
    m->u.data.metaSize = wireGet64(b + 8);
    m->u.data.checksum = wireGet64(b + 16);
    if (rndv) {
        m->u.data.addr = wireGet64(b + 24);
        m->u.data.rkey = wireGet32(b + 32);
    }
    if (m->u.data.size > OBJ_WIRE_SIZE_MAX || m->u.data.metaSize > OBJ_WIRE_SIZE_MAX) {
        *why = "object size in DATA/RNDV exceeds OBJ_WIRE_SIZE_MAX";
        return -1;
    }
    return 0;
}

/* Decode an ERROR body. Returns 0, or -1 with *why set. */
static int wireDecodeError(const uint8_t *b, uint32_t len, WireMsg *m, const char **why)
{
    if (len < WIRE_ERROR_FIXED) {
        *why = "ERROR body too short";
        return -1;
    }
    uint16_t code = wireGet16(b);
    uint16_t textLen = wireGet16(b + 2);
    if (code == 0 || code > WIRE_ERR_MAX) {
        *why = "ERROR code unknown";
        return -1;
    }
    if (textLen > OBJ_WIRE_TEXT_MAX) {
        *why = "ERROR text longer than OBJ_WIRE_TEXT_MAX";
        return -1;
    }
    if (len != WIRE_ERROR_FIXED + (uint32_t)textLen) {
        *why = "ERROR body length does not match its text length";
        return -1;
    }
    m->u.error.code = code;
    m->u.error.textLen = textLen;
    m->u.error.text = (const char *)(b + WIRE_ERROR_FIXED);
    return 0;
}

int wireDecodeBody(const uint8_t *body, WireMsg *m, const char **why)
{
    const char *dummy;
    if (why == NULL)
        why = &dummy;
    *why = NULL;
    memset(&m->u, 0, sizeof(m->u));

    /* m->h normally comes from wireDecodeHdr, but the checks are cheap and
     * keep this function safe on a header built by hand. */
    uint32_t len = m->h.bodyLen;
    if (m->h.type == 0 || m->h.type > WIRE_TYPE_MAX || !wireTypes[m->h.type].name) {
        *why = "unknown frame type";
        return -1;
    }
    if (m->h.flags != 0) {
        *why = "frame flags are not 0";
        return -1;
    }
    if (len > OBJ_WIRE_MAX_BODY) {
        *why = "frame body longer than OBJ_WIRE_MAX_BODY";
        return -1;
    }
    if (len > 0 && body == NULL) {
        *why = "no body buffer";
        return -1;
    }
    if (m->h.reqId == 0 && wireNeedsReqId(m->h.type)) {
        *why = "frame needs a non-zero reqId";
        return -1;
    }

    switch (m->h.type) {
        case WIRE_HELLO:
            return wireDecodeHello(body, len, m, why);
        case WIRE_AUTH:
            if (len != WIRE_AUTH_LEN) {
                *why = "AUTH body length is not 32";
                return -1;
            }
            memcpy(m->u.auth.proof, body, OBJ_WIRE_PROOF);
            return 0;
        case WIRE_FETCH:
            return wireDecodeFetch(body, len, m, why);
        case WIRE_FETCHR:
            return wireDecodeFetchR(body, len, m, why);
        case WIRE_PART:
            return wireDecodePart(body, len, 0, m, why);
        case WIRE_RPART:
            return wireDecodePart(body, len, 1, m, why);
        case WIRE_DATA:
            return wireDecodeData(body, len, 0, m, why);
        case WIRE_RNDV:
            return wireDecodeData(body, len, 1, m, why);
        case WIRE_ERROR:
            return wireDecodeError(body, len, m, why);
        case WIRE_REPL:
            return wireDecodeRepl(body, len, m, why);
        case WIRE_HELD:
            if (len != WIRE_HELD_LEN) {
                *why = "HELD body length is not 8";
                return -1;
            }
            m->u.held.checksum = wireGet64(body);
            return 0;
        default: /* DONE, PING, PONG */
            if (len != 0) {
                *why = "DONE/PING/PONG body is not empty";
                return -1;
            }
            return 0;
    }
}

/* ---- encoding ---------------------------------------------------------------------- */

/* Check m's fields and compute its body length. Returns 0 with *bodyLen set,
 * or -1 if a field is out of range. Fills in a zero HELLO magic/version.
 * The ranges are exactly those the decoders enforce, so anything encoded
 * decodes (the fuzz target checks both directions). */
static int wireEncodeCheck(WireMsg *m, uint32_t *bodyLen)
{
    if (m->h.type == 0 || m->h.type > WIRE_TYPE_MAX || !wireTypes[m->h.type].name ||
        m->h.flags != 0)
        return -1;
    if (m->h.reqId == 0 && wireNeedsReqId(m->h.type))
        return -1;
    switch (m->h.type) {
        case WIRE_HELLO:
            if (m->u.hello.magic == 0)
                m->u.hello.magic = OBJ_WIRE_MAGIC;
            if (m->u.hello.version == 0)
                m->u.hello.version = OBJ_WIRE_VERSION;
            if (m->u.hello.magic != OBJ_WIRE_MAGIC || m->u.hello.version != OBJ_WIRE_VERSION ||
                m->u.hello.nameLen == 0 || m->u.hello.nameLen > OBJ_WIRE_NAME_MAX ||
                m->u.hello.name == NULL)
                return -1;
            *bodyLen = WIRE_HELLO_FIXED + m->u.hello.nameLen;
            return 0;
        case WIRE_AUTH:
            *bodyLen = WIRE_AUTH_LEN;
            return 0;
        case WIRE_FETCH:
            if (m->u.fetch.idLen == 0 || m->u.fetch.idLen > OBJ_WIRE_ID_MAX ||
                m->u.fetch.id == NULL)
                return -1;
            *bodyLen = WIRE_FETCH_FIXED + m->u.fetch.idLen;
            return 0;
        case WIRE_FETCHR:
            if (m->u.fetch.idLen == 0 || m->u.fetch.idLen > OBJ_WIRE_ID_MAX ||
                m->u.fetch.id == NULL || m->u.fetch.offset > 2 * OBJ_WIRE_SIZE_MAX ||
                (m->u.fetch.flags & ~WIRE_FETCHR_FLAGS))
                return -1;
            *bodyLen = WIRE_FETCHR_FIXED + m->u.fetch.idLen;
            return 0;
        case WIRE_PART:
        case WIRE_RPART:
            if (m->u.data.size > OBJ_WIRE_SIZE_MAX || m->u.data.metaSize > OBJ_WIRE_SIZE_MAX ||
                !wirePartOk(m->u.data.size, m->u.data.metaSize, m->u.data.offset, m->u.data.len))
                return -1;
            *bodyLen = m->h.type == WIRE_PART ? WIRE_PART_LEN : WIRE_RPART_LEN;
            return 0;
        case WIRE_DATA:
        case WIRE_RNDV:
            if (m->u.data.size > OBJ_WIRE_SIZE_MAX || m->u.data.metaSize > OBJ_WIRE_SIZE_MAX)
                return -1;
            *bodyLen = m->h.type == WIRE_DATA ? WIRE_DATA_LEN : WIRE_RNDV_LEN;
            return 0;
        case WIRE_ERROR:
            if (m->u.error.code == 0 || m->u.error.code > WIRE_ERR_MAX ||
                m->u.error.textLen > OBJ_WIRE_TEXT_MAX ||
                (m->u.error.textLen > 0 && m->u.error.text == NULL))
                return -1;
            *bodyLen = WIRE_ERROR_FIXED + m->u.error.textLen;
            return 0;
        case WIRE_REPL:
            if (!wireReplOk(m->u.repl.flags, m->u.repl.want) || m->u.repl.idLen == 0 ||
                m->u.repl.idLen > OBJ_WIRE_ID_MAX || m->u.repl.id == NULL)
                return -1;
            *bodyLen = WIRE_REPL_FIXED + m->u.repl.idLen;
            return 0;
        case WIRE_HELD:
            *bodyLen = WIRE_HELD_LEN;
            return 0;
        default: /* DONE, PING, PONG */
            *bodyLen = 0;
            return 0;
    }
}

int wireEncode(WireMsg *m, uint8_t *buf, size_t cap)
{
    uint32_t bodyLen;

    if (m == NULL || buf == NULL || wireEncodeCheck(m, &bodyLen) == -1)
        return -1;
    if (cap < (size_t)OBJ_WIRE_HDR_LEN + bodyLen)
        return -1;
    m->h.bodyLen = bodyLen;

    buf[0] = m->h.type;
    buf[1] = m->h.flags;
    wirePut16(buf + 2, m->h.reserved);
    wirePut32(buf + 4, m->h.bodyLen);
    wirePut64(buf + 8, m->h.reqId);

    /* memmove for the variable parts: a caller may re-encode a message it
     * decoded from this very buffer, so source and destination can overlap. */
    uint8_t *b = buf + OBJ_WIRE_HDR_LEN;
    switch (m->h.type) {
        case WIRE_HELLO:
            wirePut32(b, m->u.hello.magic);
            wirePut16(b + 4, m->u.hello.version);
            wirePut16(b + 6, m->u.hello.features);
            memmove(b + 8, m->u.hello.nonce, OBJ_WIRE_NONCE);
            memmove(b + 24, m->u.hello.proof, OBJ_WIRE_PROOF);
            wirePut16(b + 56, m->u.hello.nameLen);
            memmove(b + WIRE_HELLO_FIXED, m->u.hello.name, m->u.hello.nameLen);
            break;
        case WIRE_AUTH:
            memmove(b, m->u.auth.proof, OBJ_WIRE_PROOF);
            break;
        case WIRE_FETCH:
            wirePut16(b, m->u.fetch.idLen);
            memmove(b + WIRE_FETCH_FIXED, m->u.fetch.id, m->u.fetch.idLen);
            break;
        case WIRE_FETCHR: /* the id first: it may overlap where offset and flags go */
            memmove(b + WIRE_FETCHR_FIXED, m->u.fetch.id, m->u.fetch.idLen);
            wirePut64(b, m->u.fetch.offset);
            wirePut32(b + 8, m->u.fetch.flags);
            wirePut16(b + 12, m->u.fetch.idLen);
            break;
        case WIRE_PART:
        case WIRE_RPART:
            wirePut64(b, m->u.data.size);
            wirePut64(b + 8, m->u.data.metaSize);
            wirePut64(b + 16, m->u.data.checksum);
            wirePut64(b + 24, m->u.data.offset);
            wirePut64(b + 32, m->u.data.len);
            if (m->h.type == WIRE_RPART) {
                wirePut64(b + 40, m->u.data.addr);
                wirePut32(b + 48, m->u.data.rkey);
            }
            break;
        case WIRE_DATA:
        case WIRE_RNDV:
            wirePut64(b, m->u.data.size);
            wirePut64(b + 8, m->u.data.metaSize);
            wirePut64(b + 16, m->u.data.checksum);
            if (m->h.type == WIRE_RNDV) {
                wirePut64(b + 24, m->u.data.addr);
                wirePut32(b + 32, m->u.data.rkey);
            }
            break;
        case WIRE_ERROR:
            wirePut16(b, m->u.error.code);
            wirePut16(b + 2, m->u.error.textLen);
            if (m->u.error.textLen > 0)
                memmove(b + WIRE_ERROR_FIXED, m->u.error.text, m->u.error.textLen);
            break;
        case WIRE_REPL: /* the id first: it may overlap where the fixed fields go */
            memmove(b + WIRE_REPL_FIXED, m->u.repl.id, m->u.repl.idLen);
            wirePut32(b, m->u.repl.flags);
            wirePut32(b + 4, m->u.repl.want);
            wirePut64(b + 8, m->u.repl.checksum);
            wirePut16(b + 16, m->u.repl.idLen);
            break;
        case WIRE_HELD:
            wirePut64(b, m->u.held.checksum);
            break;
        default:
            break;
    }
    return (int)(OBJ_WIRE_HDR_LEN + bodyLen);
}

/* ---- authentication ---------------------------------------------------------------- */

/* Fill out with bytes nobody can predict, for when a proof cannot be
 * computed: a verifier then compares against garbage and refuses the peer,
 * where a zeroed buffer would have accepted a peer that sent zeros. Can't
 * fail; the last resort mixes clocks and addresses, which is weak but still
 * not a value a peer can send on purpose. */
static void wireProofUnguessable(uint8_t out[OBJ_WIRE_PROOF])
{
    if (RAND_bytes(out, OBJ_WIRE_PROOF) == 1)
        return;
    if (getrandom(out, OBJ_WIRE_PROOF, 0) == OBJ_WIRE_PROOF)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 32) ^ (uint64_t)(uintptr_t)&ts ^
                 (uint64_t)(uintptr_t)out;
    for (int i = 0; i < OBJ_WIRE_PROOF; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out[i] = (uint8_t)(x >> 24);
    }
}

/* Append name (1..OBJ_WIRE_NAME_MAX bytes) with its u16 length at *off.
 * Returns 0, or -1 if it is NULL, empty or too long. */
static int wireProofPutName(uint8_t *msg, size_t *off, const char *name)
{
    if (name == NULL)
        return -1;
    size_t len = strnlen(name, OBJ_WIRE_NAME_MAX + 1);
    if (len == 0 || len > OBJ_WIRE_NAME_MAX)
        return -1;
    wirePut16(msg + *off, (uint16_t)len);
    memcpy(msg + *off + 2, name, len);
    *off += 2 + len;
    return 0;
}

/* Append the transcript under label: label, role (one byte), the three
 * length-prefixed names, both feature fields, both nonces. msg has room for
 * WIRE_PROOF_MSG_MAX bytes. Returns the length, or 0 when t is not a valid
 * transcript (a NULL or out-of-range field). */
static size_t wireTranscriptMsg(const char *label, uint8_t role, const WireTranscript *t,
                                uint8_t msg[WIRE_PROOF_MSG_MAX])
{
    size_t off = strlen(label);

    if (t == NULL || t->nonceConnector == NULL || t->nonceAcceptor == NULL)
        return 0;
    memcpy(msg, label, off);
    msg[off++] = role;
    if (wireProofPutName(msg, &off, t->connector) == -1 ||
        wireProofPutName(msg, &off, t->acceptor) == -1 ||
        wireProofPutName(msg, &off, t->dialled) == -1)
        return 0;
    wirePut16(msg + off, t->connectorFeatures);
    wirePut16(msg + off + 2, t->acceptorFeatures);
    off += 4;
    memcpy(msg + off, t->nonceConnector, OBJ_WIRE_NONCE);
    memcpy(msg + off + OBJ_WIRE_NONCE, t->nonceAcceptor, OBJ_WIRE_NONCE);
    return off + 2 * OBJ_WIRE_NONCE;
}

void wireProof(const char *secret, size_t secretLen, WireRole role, const WireTranscript *t,
               uint8_t out[OBJ_WIRE_PROOF])
{
    uint8_t msg[WIRE_PROOF_MSG_MAX];
    unsigned int outLen = 0;

    if ((role != WIRE_ROLE_ACCEPTOR && role != WIRE_ROLE_CONNECTOR) ||
        (secret == NULL && secretLen > 0) || secretLen > INT_MAX) {
        wireProofUnguessable(out);
        return;
    }
    size_t len = wireTranscriptMsg(WIRE_PROOF_LABEL, (uint8_t)role, t, msg);
    if (len == 0) {
        wireProofUnguessable(out);
        return;
    }
    /* OpenSSL 3 refuses a NULL key even with length 0, and an empty cluster
     * secret is a legal (if weak) configuration on loopback. */
    const void *key = secretLen > 0 ? (const void *)secret : (const void *)"";
    if (HMAC(EVP_sha256(), key, (int)secretLen, msg, len, out, &outLen) == NULL ||
        outLen != OBJ_WIRE_PROOF)
        wireProofUnguessable(out);
}

int wireProofEqual(const uint8_t a[OBJ_WIRE_PROOF], const uint8_t b[OBJ_WIRE_PROOF])
{
    return CRYPTO_memcmp(a, b, OBJ_WIRE_PROOF) == 0;
}

/* ---- the session MAC ------------------------------------------------------------- */

_Static_assert(sizeof(WIRE_KEY_LABEL) <= sizeof(WIRE_PROOF_LABEL), "key label fits the message");

int wireSessionKeys(const char *secret, size_t secretLen, const WireTranscript *t,
                    const uint8_t proofAcceptor[OBJ_WIRE_PROOF],
                    const uint8_t proofConnector[OBJ_WIRE_PROOF], uint8_t c2a[OBJ_WIRE_KEY],
                    uint8_t a2c[OBJ_WIRE_KEY])
{
    uint8_t msg[WIRE_PROOF_MSG_MAX + 2 * OBJ_WIRE_PROOF];
    uint8_t *out[2] = {c2a, a2c};

    if ((secret == NULL && secretLen > 0) || secretLen > INT_MAX || !proofAcceptor ||
        !proofConnector)
        return -1;
    const void *key = secretLen > 0 ? (const void *)secret : (const void *)"";
    for (int dir = 0; dir < 2; dir++) {
        /* direction 1: connector to acceptor, 2: acceptor to connector */
        size_t len = wireTranscriptMsg(WIRE_KEY_LABEL, (uint8_t)(dir + 1), t, msg);
        unsigned int outLen = 0;
        if (len == 0)
            return -1;
        memcpy(msg + len, proofAcceptor, OBJ_WIRE_PROOF);
        memcpy(msg + len + OBJ_WIRE_PROOF, proofConnector, OBJ_WIRE_PROOF);
        len += 2 * OBJ_WIRE_PROOF;
        if (HMAC(EVP_sha256(), key, (int)secretLen, msg, len, out[dir], &outLen) == NULL ||
            outLen != OBJ_WIRE_KEY)
            return -1;
    }
    OPENSSL_cleanse(msg, sizeof(msg));
    return 0;
}

/* GMAC is AES-GCM with everything fed as additional data: a keyed context
 * for frame tags and one for payloads (a payload's tag may still be under
 * way when later frames are tagged: the sender computes it as the bytes go
 * out), a fresh IV (domain, sequence number) per tag. The key schedule and
 * the GHASH tables are made once, at wireMacNew (and wireMacSetEncrypt). */
struct WireMac {
    GhashKey gkey;       /* payload tags where the CPU has the vector GHASH (ghash.h) */
    GhashState gstate;   /* ... the payload under way */
    uint8_t ekj0[16];    /* ... and its AES_K(J0), which masks the tag */
    int fast;            /* payload tags go through ghash.c, not libcrypto */
    EVP_CIPHER_CTX *ctx; /* frame tags */
    EVP_CIPHER_CTX *pay; /* payload tags, or payload encryption (GCM) */
    EVP_CIPHER_CTX *ecb; /* fast: the raw block cipher, for J0 */
    uint64_t seq;        /* the next frame's */
    uint64_t lastSeq;    /* the last frame tagged: its payload's */
    int payloadOk;       /* no libcrypto failure since the payload began */
    int crypt;           /* WIRE_CRYPT_NONE, _ENCRYPT or _DECRYPT: what pay does */
};

/* May payload tags use ghash.c? Yes where the CPU runs it, unless
 * OBJSTORE_GHASH=libcrypto (for comparisons: bench/ab-fetch.sh). */
static int wireFastGhash(void)
{
    static int fast = -1;
    if (fast == -1) {
        const char *env = getenv("OBJSTORE_GHASH");
        fast = ghashAvailable() && !(env && strcmp(env, "libcrypto") == 0);
    }
    return fast;
}

/* Set w up for ghash.c: the raw cipher and the hash key H = AES_K(0).
 * Returns 0, or -1 (libcrypto failed: w keeps using libcrypto). */
static int wireFastInit(WireMac *w, const uint8_t key[OBJ_WIRE_KEY])
{
    uint8_t zero[16] = {0}, h[16];
    int outLen = 0;

    w->ecb = EVP_CIPHER_CTX_new();
    if (!w->ecb)
        return -1;
    if (EVP_EncryptInit_ex(w->ecb, EVP_aes_256_ecb(), NULL, key, NULL) != 1 ||
        EVP_CIPHER_CTX_set_padding(w->ecb, 0) != 1 ||
        EVP_EncryptUpdate(w->ecb, h, &outLen, zero, 16) != 1 || outLen != 16) {
        EVP_CIPHER_CTX_free(w->ecb);
        w->ecb = NULL;
        return -1;
    }
    ghashKeyInit(&w->gkey, h);
    OPENSSL_cleanse(h, sizeof(h));
    w->fast = 1;
    return 0;
}

/* Key a fresh AES-256-GCM context with 12-byte IVs, for encryption (or GMAC)
 * or for decryption. Returns it, or NULL. */
static EVP_CIPHER_CTX *wireGcmNew(const uint8_t key[OBJ_WIRE_KEY], int decrypt)
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();

    if (!ctx)
        return NULL;
    if (EVP_CipherInit_ex(ctx, EVP_aes_256_gcm(), NULL, NULL, NULL, decrypt ? 0 : 1) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, 12, NULL) != 1 ||
        EVP_CipherInit_ex(ctx, NULL, NULL, key, NULL, decrypt ? 0 : 1) != 1) {
        EVP_CIPHER_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

WireMac *wireMacNew(const uint8_t key[OBJ_WIRE_KEY])
{
    WireMac *w = aligned_alloc(64, (sizeof(WireMac) + 63) & ~(size_t)63);

    if (!w)
        return NULL;
    memset(w, 0, sizeof(*w));
    w->ctx = wireGcmNew(key, 0);
    if (!w->ctx)
        goto out_free;
    w->pay = wireGcmNew(key, 0);
    if (!w->pay)
        goto out_free_ctx;
    if (wireFastGhash())
        wireFastInit(w, key); /* should it fail, libcrypto tags the payloads */
    return w;

out_free_ctx:
    EVP_CIPHER_CTX_free(w->ctx);
out_free:
    free(w);
    return NULL;
}

int wireMacSetEncrypt(WireMac *w, const uint8_t key[OBJ_WIRE_KEY], WireCrypt crypt)
{
    if (crypt == WIRE_CRYPT_DECRYPT) {
        EVP_CIPHER_CTX *dec = wireGcmNew(key, 1);
        if (!dec)
            return -1;
        EVP_CIPHER_CTX_free(w->pay);
        w->pay = dec;
    }
    w->crypt = crypt;
    return 0;
}

WireCrypt wireMacCrypt(const WireMac *w)
{
    return w ? (WireCrypt)w->crypt : WIRE_CRYPT_NONE;
}

void wireMacFree(WireMac *w)
{
    if (!w)
        return;
    EVP_CIPHER_CTX_free(w->ctx);
    EVP_CIPHER_CTX_free(w->pay);
    EVP_CIPHER_CTX_free(w->ecb);
    OPENSSL_cleanse(w, sizeof(*w));
    free(w);
}

/* Start a tag in ctx, in domain dom for sequence number seq. Returns 0 or -1. */
static int wireMacStart(EVP_CIPHER_CTX *ctx, uint32_t dom, uint64_t seq)
{
    uint8_t iv[12];

    wirePut32(iv, dom);
    wirePut64(iv + 4, seq);
    return EVP_CipherInit_ex(ctx, NULL, NULL, NULL, iv, -1) == 1 ? 0 : -1;
}

/* Feed n bytes of p to ctx: as additional data (out NULL: a tag only), or
 * to be encrypted or decrypted into out (which may be p). Returns 0 or -1. */
static int wireMacFeed(EVP_CIPHER_CTX *ctx, const uint8_t *p, uint8_t *out, size_t n)
{
    while (n > 0) {
        int chunk = n > (1u << 30) ? (1 << 30) : (int)n, outLen = 0;
        if (EVP_CipherUpdate(ctx, out, &outLen, p, chunk) != 1)
            return -1;
        p += chunk;
        if (out)
            out += chunk;
        n -= (size_t)chunk;
    }
    return 0;
}

/* Finish the tag being computed in the encrypting ctx into tag. Returns 0,
 * or -1 with tag unpredictable (it matches nothing). */
static int wireMacFinish(EVP_CIPHER_CTX *ctx, uint8_t tag[OBJ_WIRE_MAC])
{
    uint8_t none[16];
    int outLen = 0;

    if (EVP_CipherFinal_ex(ctx, none, &outLen) == 1 &&
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, OBJ_WIRE_MAC, tag) == 1)
        return 0;
    uint8_t junk[OBJ_WIRE_PROOF];
    wireProofUnguessable(junk);
    memcpy(tag, junk, OBJ_WIRE_MAC);
    return -1;
}

int wireMacFrame(WireMac *w, const uint8_t *frame, size_t len, uint8_t tag[OBJ_WIRE_MAC])
{
    w->lastSeq = w->seq++;
    if (wireMacStart(w->ctx, WIRE_IV_FRAME, w->lastSeq) == -1 ||
        wireMacFeed(w->ctx, frame, NULL, len) == -1) {
        wireMacFinish(w->ctx, tag);
        return -1;
    }
    return wireMacFinish(w->ctx, tag);
}

/* Is the payload under way tagged by ghash.c (a tag only, on a CPU that
 * runs it)? */
static int wireMacFastPayload(const WireMac *w)
{
    return w->fast && w->crypt == WIRE_CRYPT_NONE;
}

int wireMacPayloadBeginAt(WireMac *w, uint64_t seq)
{
    if (wireMacFastPayload(w)) {
        uint8_t j0[16] = {0};
        int outLen = 0;
        wirePut32(j0, WIRE_IV_PAYLOAD); /* the IV, then a counter of 1 (GCM's J0) */
        wirePut64(j0 + 4, seq);
        j0[15] = 1;
        ghashStart(&w->gstate);
        w->payloadOk = EVP_EncryptUpdate(w->ecb, w->ekj0, &outLen, j0, 16) == 1 && outLen == 16;
        return w->payloadOk ? 0 : -1;
    }
    w->payloadOk = wireMacStart(w->pay, WIRE_IV_PAYLOAD, seq) == 0;
    return w->payloadOk ? 0 : -1;
}

int wireMacPayloadBegin(WireMac *w)
{
    return wireMacPayloadBeginAt(w, w->lastSeq);
}

int wireMacPayloadUpdate(WireMac *w, const void *p, size_t n)
{
    if (wireMacFastPayload(w)) {
        if (w->payloadOk)
            ghashUpdate(&w->gstate, &w->gkey, p, n);
    } else if (w->payloadOk && wireMacFeed(w->pay, p, NULL, n) == -1) {
        w->payloadOk = 0;
    }
    return w->payloadOk ? 0 : -1;
}

int wireMacPayloadCrypt(WireMac *w, const void *in, void *out, size_t n)
{
    if (w->crypt == WIRE_CRYPT_NONE)
        return wireMacPayloadUpdate(w, in, n);
    if (w->payloadOk && wireMacFeed(w->pay, in, out, n) == -1)
        w->payloadOk = 0;
    return w->payloadOk ? 0 : -1;
}

int wireMacPayloadEnd(WireMac *w, uint8_t tag[OBJ_WIRE_MAC])
{
    if (w->crypt == WIRE_CRYPT_DECRYPT || !w->payloadOk) {
        uint8_t junk[OBJ_WIRE_PROOF];
        wireProofUnguessable(junk);
        memcpy(tag, junk, OBJ_WIRE_MAC);
        w->payloadOk = 0;
        return -1;
    }
    if (wireMacFastPayload(w)) {
        ghashFinishGmac(&w->gstate, &w->gkey, w->ekj0, tag);
        return 0;
    }
    return wireMacFinish(w->pay, tag);
}

int wireMacPayloadCheck(WireMac *w, const uint8_t tag[OBJ_WIRE_MAC])
{
    uint8_t mine[OBJ_WIRE_MAC], none[16];
    int outLen = 0;

    if (w->crypt != WIRE_CRYPT_DECRYPT)
        return wireMacPayloadEnd(w, mine) == 0 && wireMacEqual(mine, tag) ? 0 : -1;
    /* GCM decryption checks the tag itself, at its end. */
    memcpy(mine, tag, OBJ_WIRE_MAC);
    if (!w->payloadOk ||
        EVP_CIPHER_CTX_ctrl(w->pay, EVP_CTRL_GCM_SET_TAG, OBJ_WIRE_MAC, mine) != 1 ||
        EVP_CipherFinal_ex(w->pay, none, &outLen) != 1)
        return -1;
    return 0;
}

int wireMacPayloadTag(WireMac *w, uint64_t seq, const void *p, size_t n, uint8_t tag[OBJ_WIRE_MAC])
{
    /* A failed begin or update clears payloadOk: end then fails, tag junk. */
    wireMacPayloadBeginAt(w, seq);
    wireMacPayloadUpdate(w, p, n);
    return wireMacPayloadEnd(w, tag);
}

int wirePayloadTagged(const WireMsg *m)
{
    return (m->h.type == WIRE_DATA && (m->u.data.size > 0 || m->u.data.metaSize > 0)) ||
           m->h.type == WIRE_PART; /* a PART always carries len >= 1 bytes */
}

int wireSeal(WireMac *w, uint8_t *buf, size_t cap, int len, int64_t *paySeq)
{
    WireHdr h;

    *paySeq = -1;
    if (w == NULL)
        return len;
    if (len < OBJ_WIRE_HDR_LEN || wireDecodeHdr(buf, &h, NULL) == -1 ||
        (size_t)len < OBJ_WIRE_HDR_LEN + (size_t)h.bodyLen)
        return -1;
    /* A payload's tag follows a DATA frame whose sizes announce one (the
     * receiver can only go by those), and every PART. */
    int withPayload = h.type == WIRE_PART;
    if (h.type == WIRE_DATA && h.bodyLen >= WIRE_DATA_LEN)
        withPayload =
            wireGet64(buf + OBJ_WIRE_HDR_LEN) > 0 || wireGet64(buf + OBJ_WIRE_HDR_LEN + 8) > 0;
    if ((size_t)len + OBJ_WIRE_MAC > cap)
        return -1;
    if (wireMacFrame(w, buf, (size_t)len, buf + len) == -1)
        return -1;
    if (withPayload)
        *paySeq = (int64_t)w->lastSeq;
    return len + OBJ_WIRE_MAC;
}

int wireMacEqual(const uint8_t a[OBJ_WIRE_MAC], const uint8_t b[OBJ_WIRE_MAC])
{
    return CRYPTO_memcmp(a, b, OBJ_WIRE_MAC) == 0;
}

/* ---- names ------------------------------------------------------------------------- */

const char *wireTypeName(int type)
{
    if (type <= 0 || type > WIRE_TYPE_MAX || !wireTypes[type].name)
        return "UNKNOWN";
    return wireTypes[type].name;
}

const char *wireErrName(int code)
{
    if (code <= 0 || code > WIRE_ERR_MAX)
        return "UNKNOWN";
    return wireErrNames[code];
}

int wireErrByName(const char *word, size_t len)
{
    for (int code = 1; code <= WIRE_ERR_MAX; code++)
        if (word && strlen(wireErrNames[code]) == len && !memcmp(wireErrNames[code], word, len))
            return code;
    return 0;
}
