/*
 * framer.c - stream reassembly for the TCP transport (framer.h): frames
 * out of a buffer, payloads straight into their destination.
 *
 * The buffer holds at most one whole largest frame plus what came with it;
 * consumed bytes are dropped (the rest moved down) only when more space is
 * asked for, so a decoded frame's pointers stay valid while its receiver
 * looks at it. Payload bytes that arrived in the buffer with their frame
 * are copied out (the few); the rest is read straight into the destination,
 * at most FRAMER_PIECE bytes a read, and each piece is checked (decrypted,
 * tagged and checksummed) right after it landed, while it is in the cache:
 * the bytes make no pass over the object after the copy that brought them.
 */
#include <string.h>

#include "framer.h"
#include "store/checksum.h" /* XXH3, dispatched where the CPU allows */

void framerInit(Framer *f)
{
    memset(f, 0, sizeof(*f));
}

void framerDestroy(Framer *f)
{
    XXH3_freeState(f->hash);
    f->hash = NULL;
}

void framerSetMac(Framer *f, WireMac *mac)
{
    f->mac = mac;
}

/* Feed n bytes that just landed in the payload's destination to its tag
 * (decrypting them in place first, in an encrypted session) and its
 * checksum, while they are in the cache. */
static void framerHash(Framer *f, uint8_t *p, size_t n)
{
    if (f->payMacing && n > 0)
        wireMacPayloadCrypt(f->mac, p, p, n); /* a failure fails the check at the end */
    if (f->hashing && n > 0)
        XXH3_64bits_update(f->hash, p, n);
}

/* With a session: is the whole frame whose header is m->h (and body
 * decoded) in, with its tag, and does it check out? Returns 1 (the tag is
 * consumed), 0 (wait for more), or -1 with *why. */
static int framerTagsIn(Framer *f, const WireMsg *m, size_t have, const char **why)
{
    size_t len = OBJ_WIRE_HDR_LEN + m->h.bodyLen;
    uint8_t tag[OBJ_WIRE_MAC];

    if (have < len + OBJ_WIRE_MAC)
        return 0;
    const uint8_t *frame = f->buf + f->start;
    if (wireMacFrame(f->mac, frame, len, tag) == -1 || !wireMacEqual(tag, frame + len)) {
        *why = "frame MAC mismatch: altered, injected, replayed or out of order";
        return -1;
    }
    f->payTagDue = wirePayloadTagged(m);
    return 1;
}

/* The payload's bytes are all in: take its tag (when one follows it) from
 * the buffer and check it against what landed. Returns 1 (done: checked,
 * or not to be), 0 (the tag is not in yet), or -1 (it does not match). */
static int framerPayloadTagIn(Framer *f)
{
    if (!f->tagDue)
        return 1;
    if (f->end - f->start < OBJ_WIRE_MAC)
        return 0;
    const uint8_t *tag = f->buf + f->start;
    f->start += OBJ_WIRE_MAC;
    f->tagDue = 0;
    if (!f->payMacing)
        return 1;
    f->payMacing = 0;
    return wireMacPayloadCheck(f->mac, tag) == 0 ? 1 : -1;
}

/* Copy or throw away as many buffered bytes as the payload still wants.
 * Returns how many it took. */
static size_t framerFeedPayload(Framer *f)
{
    size_t have = f->end - f->start;
    size_t take = have < f->payLeft ? have : f->payLeft;

    if (f->payDst && take > 0) {
        memcpy(f->payDst, f->buf + f->start, take);
        framerHash(f, f->payDst, take);
        f->payDst += take;
    }
    f->start += take;
    f->payLeft -= take;
    return take;
}

size_t framerReadSpace(Framer *f, uint8_t **dst)
{
    if (f->inPayload && f->payLeft > 0 && f->start == f->end) {
        f->spaceDirect = 1;
        f->spaceOpen = 1;
        f->spaceCap = f->payLeft < FRAMER_PIECE ? f->payLeft : FRAMER_PIECE;
        *dst = f->payDst;
        return f->spaceCap;
    }
    if (f->start > 0) {
        memmove(f->buf, f->buf + f->start, f->end - f->start);
        f->end -= f->start;
        f->start = 0;
    }
    f->spaceDirect = 0;
    f->spaceOpen = 1;
    f->spaceCap = sizeof(f->buf) - f->end;
    *dst = f->buf + f->end;
    return f->spaceCap;
}

int framerWrote(Framer *f, size_t n)
{
    if (!f->spaceOpen || n > f->spaceCap)
        return -1;
    f->spaceOpen = 0;
    if (!f->spaceDirect) {
        f->end += n;
        return 0;
    }
    if (f->payDst) {
        framerHash(f, f->payDst, n);
        f->payDst += n;
    }
    f->payLeft -= n;
    return 0;
}

FramerEvent framerNext(Framer *f, WireMsg *m, const char **why)
{
    const char *reason = NULL;

    if (f->failed) {
        reason = f->failed;
        goto out_error;
    }
    if (f->inPayload) {
        framerFeedPayload(f);
        if (f->payLeft > 0)
            return FRAMER_MORE;
        int tagIn = framerPayloadTagIn(f);
        if (tagIn == 0)
            return FRAMER_MORE;
        f->inPayload = 0;
        f->payDst = NULL;
        if (tagIn == -1) {
            reason = "payload MAC mismatch: the object's bytes were altered on the way";
            f->hashing = 0;
            goto out_fail;
        }
        if (f->hashing) {
            f->lastHash = XXH3_64bits_digest(f->hash);
            f->hashReady = 1;
            f->hashing = 0;
        }
        return FRAMER_PAYLOAD_DONE;
    }
    size_t have = f->end - f->start;
    if (have < OBJ_WIRE_HDR_LEN)
        return FRAMER_MORE;
    /* The header alone says whether the body can be valid: a bad length
     * fails now instead of being waited for. */
    if (wireDecodeHdr(f->buf + f->start, &m->h, &reason) == -1)
        goto out_fail;
    if (have - OBJ_WIRE_HDR_LEN < m->h.bodyLen)
        return FRAMER_MORE;
    /* The body is decoded (strictly, bounded) before its tag is checked:
     * a DATA frame's sizes say whether a payload's tag follows its payload. */
    if (wireDecodeBody(f->buf + f->start + OBJ_WIRE_HDR_LEN, m, &reason) == -1)
        goto out_fail;
    size_t tags = 0;
    f->payTagDue = 0;
    if (f->mac) {
        int in = framerTagsIn(f, m, have, &reason);
        if (in == 0)
            return FRAMER_MORE;
        if (in == -1)
            goto out_fail;
        tags = OBJ_WIRE_MAC;
    }
    f->start += OBJ_WIRE_HDR_LEN + m->h.bodyLen + tags;
    return FRAMER_FRAME;

out_fail:
    f->failed = reason ? reason : "undecodable frame";
    reason = f->failed;
out_error:
    if (why)
        *why = reason;
    return FRAMER_ERROR;
}

int framerExpectPayload(Framer *f, void *dst, size_t len)
{
    if (f->inPayload)
        return -1;
    f->inPayload = 1;
    f->payDst = dst;
    f->payLeft = len;
    f->hashReady = 0;
    f->hashing = 0;
    f->payMacing = 0;
    /* A tag follows the payload the frame announced, whatever becomes of
     * the bytes: it is taken from the stream in any case. */
    f->tagDue = f->payTagDue;
    if (dst && f->payTagDue) {
        wireMacPayloadBegin(f->mac); /* should it fail, the tag fails at the end */
        f->payMacing = 1;
    }
    f->payTagDue = 0;
    if (dst) {
        if (!f->hash)
            f->hash = XXH3_createState();
        f->hashing = f->hash && XXH3_64bits_reset(f->hash) == XXH_OK;
    }
    return 0;
}

void framerDiscardPayload(Framer *f)
{
    f->payDst = NULL;
    f->hashing = 0;
    f->payMacing = 0;
}

int framerPayloadHash(const Framer *f, uint64_t *sum)
{
    if (!f->hashReady)
        return -1;
    *sum = f->lastHash;
    return 0;
}

size_t framerPayloadLeft(const Framer *f)
{
    return f->inPayload ? f->payLeft : 0;
}

int framerInPayload(const Framer *f)
{
    return f->inPayload;
}

int framerFrameWaiting(const Framer *f)
{
    return !f->inPayload && !f->failed && f->end - f->start >= OBJ_WIRE_HDR_LEN;
}
