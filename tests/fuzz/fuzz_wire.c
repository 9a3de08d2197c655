/*
 * fuzz_wire.c - fuzz target for the node-to-node frame format (module/transfer/wire.c).
 *
 * Frames come from peers, so the decoders must survive any bytes at all.
 * Each input is used three ways:
 *   1. as a stream: header from the first 16 bytes, then the body that
 *      follows; a frame that decodes must re-encode to exactly the same
 *      bytes (decoding is strict, so encoding is canonical) and decode again
 *      to the same message;
 *   2. as a bare body behind the raw header bytes, handed to wireDecodeBody
 *      without wireDecodeHdr in front, so its own checks are exercised too;
 *   3. as the fields of a message given to wireEncode: whatever wireEncode
 *      accepts, the decoders must accept and give back unchanged.
 * Every buffer handed to the code under test is a heap copy of its exact
 * length, so a read one byte too far is caught by AddressSanitizer. A broken
 * invariant prints what broke and aborts, which both libFuzzer and the
 * standalone driver (fuzz_main.c) report as a crash.
 */
#include "fuzz_wire.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transfer/wire.h"

#define FUZZ_FRAME_MAX (OBJ_WIRE_HDR_LEN + OBJ_WIRE_MAX_BODY)

FuzzWireStats fuzzWireStats;

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_wire: invariant broken at %s:%d: %s\n", __FILE__, __LINE__,      \
                    #cond);                                                                        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* A heap copy of exactly n bytes (NULL when n is 0). Aborts on OOM. */
static uint8_t *fuzzCopy(const uint8_t *p, size_t n)
{
    if (n == 0)
        return NULL;
    uint8_t *c = malloc(n);
    if (c == NULL)
        abort();
    memcpy(c, p, n);
    return c;
}

/* Abort unless a and b are the same message (contents, not pointers). */
static void fuzzCheckEqual(const WireMsg *a, const WireMsg *b)
{
    FUZZ_CHECK(a->h.type == b->h.type && a->h.flags == b->h.flags);
    FUZZ_CHECK(a->h.reserved == b->h.reserved && a->h.bodyLen == b->h.bodyLen);
    FUZZ_CHECK(a->h.reqId == b->h.reqId);
    switch (a->h.type) {
        case WIRE_HELLO:
            FUZZ_CHECK(a->u.hello.magic == b->u.hello.magic);
            FUZZ_CHECK(a->u.hello.version == b->u.hello.version);
            FUZZ_CHECK(a->u.hello.features == b->u.hello.features);
            FUZZ_CHECK(memcmp(a->u.hello.nonce, b->u.hello.nonce, OBJ_WIRE_NONCE) == 0);
            FUZZ_CHECK(memcmp(a->u.hello.proof, b->u.hello.proof, OBJ_WIRE_PROOF) == 0);
            FUZZ_CHECK(a->u.hello.nameLen == b->u.hello.nameLen);
            FUZZ_CHECK(memcmp(a->u.hello.name, b->u.hello.name, a->u.hello.nameLen) == 0);
            break;
        case WIRE_AUTH:
            FUZZ_CHECK(memcmp(a->u.auth.proof, b->u.auth.proof, OBJ_WIRE_PROOF) == 0);
            break;
        case WIRE_FETCH:
        case WIRE_FETCHR:
            FUZZ_CHECK(a->u.fetch.idLen == b->u.fetch.idLen);
            FUZZ_CHECK(memcmp(a->u.fetch.id, b->u.fetch.id, a->u.fetch.idLen) == 0);
            FUZZ_CHECK(a->u.fetch.offset == b->u.fetch.offset);
            FUZZ_CHECK(a->u.fetch.flags == b->u.fetch.flags);
            break;
        case WIRE_DATA:
        case WIRE_RNDV:
            FUZZ_CHECK(a->u.data.size == b->u.data.size);
            FUZZ_CHECK(a->u.data.metaSize == b->u.data.metaSize);
            FUZZ_CHECK(a->u.data.checksum == b->u.data.checksum);
            if (a->h.type == WIRE_RNDV)
                FUZZ_CHECK(a->u.data.addr == b->u.data.addr && a->u.data.rkey == b->u.data.rkey);
            break;
        case WIRE_PART:
        case WIRE_RPART:
            FUZZ_CHECK(a->u.data.size == b->u.data.size);
            FUZZ_CHECK(a->u.data.metaSize == b->u.data.metaSize);
            FUZZ_CHECK(a->u.data.checksum == b->u.data.checksum);
            FUZZ_CHECK(a->u.data.offset == b->u.data.offset && a->u.data.len == b->u.data.len);
            if (a->h.type == WIRE_RPART)
                FUZZ_CHECK(a->u.data.addr == b->u.data.addr && a->u.data.rkey == b->u.data.rkey);
            break;
        case WIRE_ERROR:
            FUZZ_CHECK(a->u.error.code == b->u.error.code);
            FUZZ_CHECK(a->u.error.textLen == b->u.error.textLen);
            if (a->u.error.textLen > 0)
                FUZZ_CHECK(memcmp(a->u.error.text, b->u.error.text, a->u.error.textLen) == 0);
            break;
        case WIRE_REPL:
            FUZZ_CHECK(a->u.repl.flags == b->u.repl.flags && a->u.repl.want == b->u.repl.want);
            FUZZ_CHECK(a->u.repl.checksum == b->u.repl.checksum);
            FUZZ_CHECK(a->u.repl.idLen == b->u.repl.idLen);
            FUZZ_CHECK(memcmp(a->u.repl.id, b->u.repl.id, a->u.repl.idLen) == 0);
            break;
        case WIRE_HELD:
            FUZZ_CHECK(a->u.held.checksum == b->u.held.checksum);
            break;
        default:
            break;
    }
}

/* Abort unless a message that decoded is also one the encoder accepts: the
 * ranges decode enforces must be exactly the ranges encode enforces. */
static void fuzzCheckDecodedIsValid(const WireMsg *m)
{
    FUZZ_CHECK(m->h.type >= 1 && m->h.type <= WIRE_TYPE_MAX && m->h.flags == 0);
    FUZZ_CHECK(m->h.bodyLen <= OBJ_WIRE_MAX_BODY);
    switch (m->h.type) {
        case WIRE_HELLO:
            FUZZ_CHECK(m->u.hello.magic == OBJ_WIRE_MAGIC);
            FUZZ_CHECK(m->u.hello.version == OBJ_WIRE_VERSION);
            FUZZ_CHECK(m->u.hello.nameLen >= 1 && m->u.hello.nameLen <= OBJ_WIRE_NAME_MAX);
            break;
        case WIRE_FETCH:
            FUZZ_CHECK(m->h.reqId != 0);
            FUZZ_CHECK(m->u.fetch.idLen >= 1 && m->u.fetch.idLen <= OBJ_WIRE_ID_MAX);
            break;
        case WIRE_FETCHR:
            FUZZ_CHECK(m->h.reqId != 0);
            FUZZ_CHECK(m->u.fetch.idLen >= 1 && m->u.fetch.idLen <= OBJ_WIRE_ID_MAX);
            FUZZ_CHECK(m->u.fetch.offset <= 2 * OBJ_WIRE_SIZE_MAX);
            FUZZ_CHECK((m->u.fetch.flags & ~WIRE_FETCHR_FLAGS) == 0);
            break;
        case WIRE_DATA:
        case WIRE_RNDV:
            FUZZ_CHECK(m->h.reqId != 0);
            FUZZ_CHECK(m->u.data.size <= OBJ_WIRE_SIZE_MAX);
            FUZZ_CHECK(m->u.data.metaSize <= OBJ_WIRE_SIZE_MAX);
            break;
        case WIRE_DONE:
            FUZZ_CHECK(m->h.reqId != 0);
            break;
        case WIRE_PART:
        case WIRE_RPART:
            FUZZ_CHECK(m->h.reqId != 0);
            FUZZ_CHECK(m->u.data.size <= OBJ_WIRE_SIZE_MAX);
            FUZZ_CHECK(m->u.data.metaSize <= OBJ_WIRE_SIZE_MAX);
            FUZZ_CHECK(m->u.data.len >= 1 &&
                       m->u.data.offset < m->u.data.size + m->u.data.metaSize &&
                       m->u.data.len <= m->u.data.size + m->u.data.metaSize - m->u.data.offset);
            break;
        case WIRE_ERROR:
            FUZZ_CHECK(m->u.error.code >= 1 && m->u.error.code <= WIRE_ERR_MAX);
            FUZZ_CHECK(m->u.error.textLen <= OBJ_WIRE_TEXT_MAX);
            break;
        case WIRE_REPL:
            FUZZ_CHECK(m->h.reqId != 0);
            FUZZ_CHECK((m->u.repl.flags & ~WIRE_REPL_FLAGS) == 0);
            FUZZ_CHECK(m->u.repl.want >= 1 && m->u.repl.want <= OBJ_WIRE_WANT_MAX);
            FUZZ_CHECK(m->u.repl.idLen >= 1 && m->u.repl.idLen <= OBJ_WIRE_ID_MAX);
            break;
        case WIRE_HELD:
            FUZZ_CHECK(m->h.reqId != 0);
            break;
        default:
            break;
    }
}

/* Decode frame (len bytes, a whole frame) as a reader would. Returns 0 with
 * *m filled and *keep holding the body its pointers refer to, or -1. */
static int fuzzDecode(const uint8_t *frame, size_t len, WireMsg *m, uint8_t **keep)
{
    const char *why = NULL;
    *keep = NULL;
    FUZZ_CHECK(len >= OBJ_WIRE_HDR_LEN);
    uint8_t *hdr = fuzzCopy(frame, OBJ_WIRE_HDR_LEN);
    int rc = wireDecodeHdr(hdr, &m->h, &why);
    free(hdr);
    FUZZ_CHECK(rc == 0 ? why == NULL : (rc == -1 && why != NULL));
    if (rc == -1 || len - OBJ_WIRE_HDR_LEN != m->h.bodyLen)
        return -1;
    uint8_t *body = fuzzCopy(frame + OBJ_WIRE_HDR_LEN, m->h.bodyLen);
    rc = wireDecodeBody(body, m, &why);
    FUZZ_CHECK(rc == 0 ? why == NULL : (rc == -1 && why != NULL));
    if (rc == -1) {
        free(body);
        return -1;
    }
    *keep = body;
    return 0;
}

/* m decoded from frame (len bytes): it must be in range, re-encode to the
 * same bytes, and decode back to itself. */
static void fuzzCheckRoundTrip(WireMsg *m, const uint8_t *frame, size_t len)
{
    static uint8_t out[FUZZ_FRAME_MAX];

    fuzzCheckDecodedIsValid(m);
    WireMsg copy = *m;
    int n = wireEncode(&copy, out, sizeof(out));
    FUZZ_CHECK(n >= 0 && (size_t)n == len);
    FUZZ_CHECK(memcmp(out, frame, len) == 0);

    WireMsg again;
    uint8_t *keep;
    FUZZ_CHECK(fuzzDecode(out, (size_t)n, &again, &keep) == 0);
    fuzzCheckEqual(m, &again);
    free(keep);
}

/* Path 1: the input as a stream, header first. */
static void fuzzStream(const uint8_t *data, size_t size)
{
    if (size < OBJ_WIRE_HDR_LEN)
        return;
    WireMsg m;
    const char *why = NULL;
    uint8_t *hdr = fuzzCopy(data, OBJ_WIRE_HDR_LEN);
    int rc = wireDecodeHdr(hdr, &m.h, &why);
    free(hdr);
    FUZZ_CHECK(rc == 0 ? why == NULL : (rc == -1 && why != NULL));
    if (rc == -1)
        return;
    fuzzWireStats.hdrOk++;
    FUZZ_CHECK(m.h.bodyLen <= OBJ_WIRE_MAX_BODY);
    if (size - OBJ_WIRE_HDR_LEN < m.h.bodyLen)
        return; /* a reader would wait for more bytes */

    size_t len = OBJ_WIRE_HDR_LEN + m.h.bodyLen;
    uint8_t *keep;
    if (fuzzDecode(data, len, &m, &keep) == -1)
        return;
    fuzzWireStats.frameOk++;
    fuzzCheckRoundTrip(&m, data, len);
    free(keep);
}

/* Path 2: whatever follows the first 16 bytes as the body, header taken raw. */
static void fuzzRawBody(const uint8_t *data, size_t size)
{
    if (size < OBJ_WIRE_HDR_LEN)
        return;
    WireMsg m;
    memset(&m, 0, sizeof(m));
    m.h.type = data[0];
    m.h.flags = data[1];
    m.h.reserved = (uint16_t)(data[2] | data[3] << 8);
    for (int i = 7; i >= 0; i--)
        m.h.reqId = (m.h.reqId << 8) | data[8 + i];
    size_t bodyLen = size - OBJ_WIRE_HDR_LEN;
    m.h.bodyLen = (uint32_t)(bodyLen > UINT32_MAX ? UINT32_MAX : bodyLen);
    if (bodyLen != m.h.bodyLen)
        return;

    uint8_t *body = fuzzCopy(data + OBJ_WIRE_HDR_LEN, bodyLen);
    const char *why = NULL;
    int rc = wireDecodeBody(body, &m, &why);
    FUZZ_CHECK(rc == 0 ? why == NULL : (rc == -1 && why != NULL));
    if (rc == 0) {
        fuzzWireStats.rawBodyOk++;
        /* The frame a sender would have produced: this header, this body. */
        uint8_t *frame = malloc(OBJ_WIRE_HDR_LEN + bodyLen);
        if (frame == NULL)
            abort();
        memcpy(frame, data, OBJ_WIRE_HDR_LEN);
        for (int i = 0; i < 4; i++)
            frame[4 + i] = (uint8_t)(m.h.bodyLen >> (8 * i));
        if (bodyLen > 0)
            memcpy(frame + OBJ_WIRE_HDR_LEN, body, bodyLen);
        fuzzCheckRoundTrip(&m, frame, OBJ_WIRE_HDR_LEN + bodyLen);
        free(frame);
    }
    free(body);
}

/* Reads little-endian integers off the input; missing bytes read as 0. */
typedef struct FuzzReader {
    const uint8_t *p;
    size_t n;
} FuzzReader;

static uint64_t fuzzTake(FuzzReader *r, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) {
        uint64_t b = 0;
        if (r->n > 0) {
            b = *r->p++;
            r->n--;
        }
        v |= b << (8 * i);
    }
    return v;
}

/* A pointer to len bytes of the input, or NULL if not that many are left. */
static const char *fuzzTakeBytes(FuzzReader *r, size_t len)
{
    if (r->n < len)
        return NULL;
    const char *s = (const char *)r->p;
    r->p += len;
    r->n -= len;
    return s;
}

/* Path 3: the input as the fields of a message to encode. */
static void fuzzEncode(const uint8_t *data, size_t size)
{
    FuzzReader r = {data, size};
    WireMsg m;
    memset(&m, 0, sizeof(m));

    m.h.type = (uint8_t)fuzzTake(&r, 1);
    m.h.flags = (uint8_t)fuzzTake(&r, 1);
    m.h.reserved = (uint16_t)fuzzTake(&r, 2);
    m.h.bodyLen = (uint32_t)fuzzTake(&r, 4); /* wireEncode must overwrite it */
    m.h.reqId = fuzzTake(&r, 8);
    switch (m.h.type) {
        case WIRE_HELLO:
            m.u.hello.magic = (uint32_t)fuzzTake(&r, 4);
            m.u.hello.version = (uint16_t)fuzzTake(&r, 2);
            m.u.hello.features = (uint16_t)fuzzTake(&r, 2);
            for (int i = 0; i < OBJ_WIRE_NONCE; i++)
                m.u.hello.nonce[i] = (uint8_t)fuzzTake(&r, 1);
            for (int i = 0; i < OBJ_WIRE_PROOF; i++)
                m.u.hello.proof[i] = (uint8_t)fuzzTake(&r, 1);
            m.u.hello.nameLen = (uint16_t)fuzzTake(&r, 2);
            m.u.hello.name = fuzzTakeBytes(&r, m.u.hello.nameLen);
            break;
        case WIRE_AUTH:
            for (int i = 0; i < OBJ_WIRE_PROOF; i++)
                m.u.auth.proof[i] = (uint8_t)fuzzTake(&r, 1);
            break;
        case WIRE_FETCH:
            m.u.fetch.idLen = (uint16_t)fuzzTake(&r, 2);
            m.u.fetch.id = fuzzTakeBytes(&r, m.u.fetch.idLen);
            break;
        case WIRE_PART:
        case WIRE_RPART:
            m.u.data.size = fuzzTake(&r, 8);
            m.u.data.metaSize = fuzzTake(&r, 8);
            m.u.data.checksum = fuzzTake(&r, 8);
            m.u.data.offset = fuzzTake(&r, 8);
            m.u.data.len = fuzzTake(&r, 8);
            if (m.h.type == WIRE_RPART) {
                m.u.data.addr = fuzzTake(&r, 8);
                m.u.data.rkey = (uint32_t)fuzzTake(&r, 4);
            }
            break;
        case WIRE_FETCHR:
            m.u.fetch.offset = fuzzTake(&r, 8);
            m.u.fetch.flags = (uint32_t)fuzzTake(&r, 4);
            m.u.fetch.idLen = (uint16_t)fuzzTake(&r, 2);
            m.u.fetch.id = fuzzTakeBytes(&r, m.u.fetch.idLen);
            break;
        case WIRE_DATA:
        case WIRE_RNDV:
            m.u.data.size = fuzzTake(&r, 8);
            m.u.data.metaSize = fuzzTake(&r, 8);
            m.u.data.checksum = fuzzTake(&r, 8);
            m.u.data.addr = fuzzTake(&r, 8);
            m.u.data.rkey = (uint32_t)fuzzTake(&r, 4);
            break;
        case WIRE_ERROR:
            m.u.error.code = (uint16_t)fuzzTake(&r, 2);
            m.u.error.textLen = (uint16_t)fuzzTake(&r, 2);
            m.u.error.text = fuzzTakeBytes(&r, m.u.error.textLen);
            break;
        case WIRE_REPL:
            m.u.repl.flags = (uint32_t)fuzzTake(&r, 4);
            m.u.repl.want = (uint32_t)fuzzTake(&r, 4);
            m.u.repl.checksum = fuzzTake(&r, 8);
            m.u.repl.idLen = (uint16_t)fuzzTake(&r, 2);
            m.u.repl.id = fuzzTakeBytes(&r, m.u.repl.idLen);
            break;
        case WIRE_HELD:
            m.u.held.checksum = fuzzTake(&r, 8);
            break;
        default:
            break;
    }

    /* The output size comes from the input too: short buffers must be refused. */
    size_t cap = (size_t)fuzzTake(&r, 2) % (FUZZ_FRAME_MAX + 1);
    uint8_t *out = malloc(cap > 0 ? cap : 1);
    if (out == NULL)
        abort();
    int n = wireEncode(&m, out, cap);
    FUZZ_CHECK(n == -1 || (n >= OBJ_WIRE_HDR_LEN && (size_t)n <= cap));
    if (n > 0) {
        fuzzWireStats.encodeOk++;
        FUZZ_CHECK((size_t)n == OBJ_WIRE_HDR_LEN + m.h.bodyLen);
        WireMsg back;
        uint8_t *keep;
        FUZZ_CHECK(fuzzDecode(out, (size_t)n, &back, &keep) == 0);
        if (m.h.type == WIRE_DATA) {
            m.u.data.addr = 0; /* not carried by DATA */
            m.u.data.rkey = 0;
        }
        fuzzCheckEqual(&m, &back);
        free(keep);
    }
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzzWireStats.inputs++;
    fuzzStream(data, size);
    fuzzRawBody(data, size);
    fuzzEncode(data, size);
    if (size > 0) {
        FUZZ_CHECK(wireTypeName((int8_t)data[0]) != NULL);
        FUZZ_CHECK(wireErrName((int8_t)data[size - 1]) != NULL);
    }
    return 0;
}
