/*
 * test_framer.c - unit tests for the stream reassembly of the TCP transport
 * (module/transfer/framer.c).
 *
 * The tests pin down the promises of framer.h: frames come out whole
 * however the bytes were cut, payload bytes go to their destination (the
 * ones buffered with the frame copied, the rest read straight in) and never
 * past its length, a payload thrown away (from the start or half way) keeps
 * the stream in step, bad frames are errors that stay, and the space the
 * framer hands out is never overrun. Destinations are heap buffers of their
 * exact length, so a write one byte too far trips AddressSanitizer. A
 * payload's checksum, taken as it lands, equals a second pass over it. In
 * a session, frames and payloads are delivered only when their tags check
 * out, in sequence.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "transfer/framer.h"
#include "transfer/wire.h"

#define TEST_STREAM_MAX (64 * 1024)

static Framer testF; /* large: not on the stack */

/* ---- helpers ------------------------------------------------------------------ */

/* Append the encoding of m to out at *at. */
static void testPut(uint8_t *out, size_t *at, WireMsg *m)
{
    int n = wireEncode(m, out + *at, TEST_STREAM_MAX - *at);
    assert_true(n > 0);
    *at += (size_t)n;
}

static void testPing(uint8_t *out, size_t *at, uint64_t reqId)
{
    WireMsg m = {.h = {.type = WIRE_PING, .reqId = reqId}};
    testPut(out, at, &m);
}

static void testFetch(uint8_t *out, size_t *at, uint64_t reqId, const char *id)
{
    WireMsg m = {.h = {.type = WIRE_FETCH, .reqId = reqId}};
    m.u.fetch.id = id;
    m.u.fetch.idLen = (uint16_t)strlen(id);
    testPut(out, at, &m);
}

/* A DATA frame announcing len payload bytes, then the payload (byte i is
 * seed + i). */
static void testData(uint8_t *out, size_t *at, uint64_t reqId, size_t len, uint8_t seed)
{
    WireMsg m = {.h = {.type = WIRE_DATA, .reqId = reqId}};
    m.u.data.size = len;
    testPut(out, at, &m);
    for (size_t i = 0; i < len; i++)
        out[(*at)++] = (uint8_t)(seed + i);
}

/* Hand bytes to the framer as a transport would, at most chunk at a time,
 * straight into the payload when it says so. Returns how many it took
 * (less than len only when it had no room). */
static size_t testFeed(Framer *f, const uint8_t *bytes, size_t len, size_t chunk)
{
    size_t off = 0;
    while (off < len) {
        uint8_t *dst;
        size_t room = framerReadSpace(f, &dst);
        if (room == 0)
            break;
        size_t n = len - off < chunk ? len - off : chunk;
        n = n < room ? n : room;
        if (dst)
            memcpy(dst, bytes + off, n);
        assert_int_equal(framerWrote(f, n), 0);
        off += n;
        if (framerFrameWaiting(f) || framerInPayload(f))
            break; /* let the caller take the events */
    }
    return off;
}

/* Every test ends by releasing what the framer allocated (its checksum
 * state), so that the sanitizer build finds no leak. */
static int testTeardown(void **state)
{
    framerDestroy(&testF);
    return 0;
}

/* ---- frames ------------------------------------------------------------------- */

static void test_frame_written_whole_comes_out_whole(void **state)
{
    uint8_t s[TEST_STREAM_MAX];
    size_t len = 0;
    WireMsg m;
    testFetch(s, &len, 42, "obj-1");
    framerInit(&testF);

    assert_int_equal(testFeed(&testF, s, len, len), len);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_FRAME);
    assert_int_equal(m.h.type, WIRE_FETCH);
    assert_int_equal(m.h.reqId, 42);
    assert_int_equal(m.u.fetch.idLen, 5);
    assert_memory_equal(m.u.fetch.id, "obj-1", 5);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_MORE);
}

static void test_frame_written_byte_by_byte_comes_out_at_its_last_byte(void **state)
{
    uint8_t s[TEST_STREAM_MAX];
    size_t len = 0;
    WireMsg m;
    testFetch(s, &len, 7, "abc");
    framerInit(&testF);

    for (size_t i = 0; i < len; i++) {
        assert_int_equal(testFeed(&testF, s + i, 1, 1), 1);
        FramerEvent want = i + 1 == len ? FRAMER_FRAME : FRAMER_MORE;
        assert_int_equal(framerNext(&testF, &m, NULL), want);
    }
    assert_int_equal(m.h.reqId, 7);
}

static void test_frames_written_together_come_out_one_by_one(void **state)
{
    uint8_t s[TEST_STREAM_MAX];
    size_t len = 0;
    WireMsg m;
    testPing(s, &len, 1);
    testFetch(s, &len, 2, "x");
    testPing(s, &len, 3);
    framerInit(&testF);

    assert_int_equal(testFeed(&testF, s, len, len), len);
    for (uint64_t id = 1; id <= 3; id++) {
        assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_FRAME);
        assert_int_equal(m.h.reqId, id);
    }
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_MORE);
}

static void test_frame_waiting_needs_a_whole_header(void **state)
{
    uint8_t s[TEST_STREAM_MAX];
    size_t len = 0;
    WireMsg m;
    testFetch(s, &len, 2, "xyz");
    framerInit(&testF);

    testFeed(&testF, s, OBJ_WIRE_HDR_LEN - 1, len);
    assert_false(framerFrameWaiting(&testF));
    testFeed(&testF, s + OBJ_WIRE_HDR_LEN - 1, 1, len);
    assert_true(framerFrameWaiting(&testF)); /* the body is not there yet */
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_MORE);
}

static void test_buffer_full_of_unconsumed_frames_offers_no_room(void **state)
{
    uint8_t s[TEST_STREAM_MAX];
    size_t len = 0;
    uint8_t *dst;
    framerInit(&testF);
    while (len < FRAMER_BUF + OBJ_WIRE_HDR_LEN)
        testPing(s, &len, 1 + len);

    size_t off = 0;
    for (size_t room; (room = framerReadSpace(&testF, &dst)) > 0; off += room) {
        memcpy(dst, s + off, room);
        assert_int_equal(framerWrote(&testF, room), 0);
    }
    assert_int_equal(off, FRAMER_BUF);
}

/* ---- payloads ------------------------------------------------------------------ */

static void
test_payload_buffered_with_its_frame_is_copied_and_the_rest_read_straight_in(void **state)
{
    uint8_t s[TEST_STREAM_MAX];
    size_t len = 0, payLen = 1000;
    WireMsg m;
    uint8_t *dst = malloc(payLen), *at;
    testData(s, &len, 9, payLen, 3);
    framerInit(&testF);

    size_t first = OBJ_WIRE_HDR_LEN + 24 + 100; /* the frame and 100 payload bytes */
    assert_int_equal(testFeed(&testF, s, first, first), first);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_FRAME);
    assert_int_equal(m.u.data.size, payLen);
    assert_int_equal(framerExpectPayload(&testF, dst, payLen), 0);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_MORE);
    assert_int_equal(framerReadSpace(&testF, &at), payLen - 100);
    assert_ptr_equal(at, dst + 100);
    memcpy(at, s + first, payLen - 100);
    assert_int_equal(framerWrote(&testF, payLen - 100), 0);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_PAYLOAD_DONE);
    assert_memory_equal(dst, s + first - 100, payLen);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_MORE);
    free(dst);
}

/* What a resuming fetch reads: how much of the payload is in place, counting
 * the bytes copied from the frame buffer and those read straight in, and
 * nothing of what is buffered but not yet copied. */
static void test_payload_left_counts_only_bytes_in_place(void **state)
{
    uint8_t s[TEST_STREAM_MAX];
    size_t len = 0, payLen = 1000;
    WireMsg m;
    uint8_t *dst = malloc(payLen), *at;
    testData(s, &len, 9, payLen, 3);
    framerInit(&testF);

    assert_int_equal(framerPayloadLeft(&testF), 0);
    size_t first = OBJ_WIRE_HDR_LEN + 24 + 100;
    assert_int_equal(testFeed(&testF, s, first, first), first);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_FRAME);
    assert_int_equal(framerExpectPayload(&testF, dst, payLen), 0);
    assert_int_equal(framerPayloadLeft(&testF), payLen); /* 100 buffered, none in place */
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_MORE);
    assert_int_equal(framerPayloadLeft(&testF), payLen - 100);
    assert_int_equal(framerReadSpace(&testF, &at), payLen - 100);
    memcpy(at, s + first, 300);
    assert_int_equal(framerWrote(&testF, 300), 0);
    assert_int_equal(framerPayloadLeft(&testF), payLen - 400);
    free(dst);
}

static void test_payload_and_next_frame_in_one_write_give_done_then_the_frame(void **state)
{
    uint8_t s[TEST_STREAM_MAX];
    size_t len = 0, payLen = 50;
    WireMsg m;
    uint8_t *dst = malloc(payLen);
    testData(s, &len, 9, payLen, 0);
    testPing(s, &len, 10);
    framerInit(&testF);

    testFeed(&testF, s, len, len);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_FRAME);
    assert_int_equal(framerExpectPayload(&testF, dst, payLen), 0);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_PAYLOAD_DONE);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_FRAME);
    assert_int_equal(m.h.type, WIRE_PING);
    assert_int_equal(m.h.reqId, 10);
    assert_memory_equal(dst, s + OBJ_WIRE_HDR_LEN + 24, payLen);
    free(dst);
}

static void test_empty_payload_is_done_at_once(void **state)
{
    WireMsg m;
    framerInit(&testF);

    assert_int_equal(framerExpectPayload(&testF, NULL, 0), 0);
    assert_true(framerInPayload(&testF));
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_PAYLOAD_DONE);
    assert_false(framerInPayload(&testF));
}

static void
test_payload_without_destination_is_thrown_away_and_the_stream_stays_in_step(void **state)
{
    uint8_t s[TEST_STREAM_MAX];
    size_t len = 0, payLen = 20000, off;
    WireMsg m;
    testData(s, &len, 9, payLen, 1);
    testPing(s, &len, 11);
    framerInit(&testF);

    off = testFeed(&testF, s, len, 64);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_FRAME);
    assert_int_equal(framerExpectPayload(&testF, NULL, payLen), 0);
    FramerEvent ev;
    int done = 0;
    for (int guard = 0; guard < 100000 && !done; guard++) {
        while ((ev = framerNext(&testF, &m, NULL)) == FRAMER_PAYLOAD_DONE)
            done = 1;
        assert_int_equal(ev, FRAMER_MORE);
        if (!done)
            off += testFeed(&testF, s + off, len - off, 4096);
    }
    assert_true(done);
    off += testFeed(&testF, s + off, len - off, len);
    assert_int_equal(off, len);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_FRAME);
    assert_int_equal(m.h.reqId, 11);
}

static void test_discarded_payload_keeps_what_came_and_writes_nothing_more(void **state)
{
    uint8_t s[TEST_STREAM_MAX];
    size_t len = 0, payLen = 300;
    WireMsg m;
    uint8_t *dst = malloc(payLen);
    memset(dst, 0xEE, payLen);
    testData(s, &len, 9, payLen, 5);
    testPing(s, &len, 12);
    size_t pay = OBJ_WIRE_HDR_LEN + 24;
    framerInit(&testF);

    testFeed(&testF, s, pay, pay);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_FRAME);
    assert_int_equal(framerExpectPayload(&testF, dst, payLen), 0);
    assert_int_equal(testFeed(&testF, s + pay, 100, 100), 100);
    framerDiscardPayload(&testF);
    uint8_t *at;
    assert_int_equal(framerReadSpace(&testF, &at), payLen - 100);
    assert_null(at);
    assert_int_equal(framerWrote(&testF, payLen - 100), 0);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_PAYLOAD_DONE);
    testFeed(&testF, s + pay + payLen, len - pay - payLen, len);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_FRAME);
    assert_int_equal(m.h.reqId, 12);
    assert_memory_equal(dst, s + pay, 100);
    for (size_t i = 100; i < payLen; i++)
        assert_int_equal(dst[i], 0xEE);
    free(dst);
}

static void test_payload_checksum_equals_a_second_pass_however_the_bytes_were_cut(void **state)
{
    static uint8_t s[TEST_STREAM_MAX];
    size_t len = 0, payLen = 40000;
    WireMsg m;
    uint8_t *dst = malloc(payLen);
    uint64_t sum = 0;
    testData(s, &len, 9, payLen, 17);
    framerInit(&testF);

    size_t off = testFeed(&testF, s, OBJ_WIRE_HDR_LEN + 24 + 300, 4096); /* 300 buffered */
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_FRAME);
    assert_int_equal(framerExpectPayload(&testF, dst, payLen), 0);
    assert_int_equal(framerPayloadHash(&testF, &sum), -1); /* not before its end */
    FramerEvent ev = FRAMER_MORE;
    for (int guard = 0; guard < 10000 && ev != FRAMER_PAYLOAD_DONE; guard++) {
        ev = framerNext(&testF, &m, NULL);
        if (ev == FRAMER_MORE)
            off += testFeed(&testF, s + off, len - off, 777);
    }
    assert_int_equal(ev, FRAMER_PAYLOAD_DONE);
    assert_int_equal(framerPayloadHash(&testF, &sum), 0);
    assert_true(sum == XXH3_64bits(dst, payLen));
    assert_true(sum == XXH3_64bits(s + OBJ_WIRE_HDR_LEN + 24, payLen));
    free(dst);
}

static void test_payload_given_up_or_without_destination_has_no_checksum(void **state)
{
    uint8_t s[TEST_STREAM_MAX];
    size_t len = 0, payLen = 300;
    WireMsg m;
    uint8_t *dst = malloc(payLen);
    uint64_t sum;
    testData(s, &len, 9, payLen, 5);
    testData(s, &len, 10, payLen, 6);
    size_t pay = OBJ_WIRE_HDR_LEN + 24;
    framerInit(&testF);

    testFeed(&testF, s, pay, pay);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_FRAME);
    assert_int_equal(framerExpectPayload(&testF, dst, payLen), 0);
    testFeed(&testF, s + pay, 100, 100);
    framerDiscardPayload(&testF);
    size_t off = pay + 100;
    off += testFeed(&testF, s + off, len - off, len);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_PAYLOAD_DONE);
    assert_int_equal(framerPayloadHash(&testF, &sum), -1);
    testFeed(&testF, s + off, len - off, len);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_FRAME);
    assert_int_equal(framerExpectPayload(&testF, NULL, payLen), 0);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_PAYLOAD_DONE);
    assert_int_equal(framerPayloadHash(&testF, &sum), -1);
    free(dst);
}

static void test_second_payload_before_the_first_ends_is_refused(void **state)
{
    uint8_t one;
    framerInit(&testF);

    assert_int_equal(framerExpectPayload(&testF, &one, 1), 0);
    assert_int_equal(framerExpectPayload(&testF, &one, 1), -1);
}

static void test_writes_beyond_the_space_given_are_refused(void **state)
{
    uint8_t *dst;
    uint8_t pay[8];
    framerInit(&testF);

    assert_int_equal(framerWrote(&testF, 1), -1); /* no space asked for */
    size_t room = framerReadSpace(&testF, &dst);
    assert_int_equal(room, FRAMER_BUF);
    assert_int_equal(framerWrote(&testF, room + 1), -1);
    assert_int_equal(framerWrote(&testF, 0), 0);
    assert_int_equal(framerWrote(&testF, 0), -1); /* the space was used up */

    assert_int_equal(framerExpectPayload(&testF, pay, sizeof(pay)), 0);
    assert_int_equal(framerReadSpace(&testF, &dst), sizeof(pay));
    assert_ptr_equal(dst, pay);
    assert_int_equal(framerWrote(&testF, sizeof(pay) + 1), -1);
}

/* ---- bad frames ------------------------------------------------------------------ */

typedef struct BadHdr {
    const char *what;
    uint8_t type, flags;
    uint32_t bodyLen;
    uint64_t reqId;
} BadHdr;

static void test_bad_headers_are_errors_that_stay(void **state)
{
    static const BadHdr bad[] = {
        {"type 0", 0, 0, 0, 1},
        {"unknown type", WIRE_TYPE_MAX + 1, 0, 0, 1},
        {"flags set", WIRE_PING, 1, 0, 1},
        {"body over the maximum", WIRE_ERROR, 0, OBJ_WIRE_MAX_BODY + 1, 1},
        {"body a PING cannot have", WIRE_PING, 0, 1, 1},
        {"FETCH without a request id", WIRE_FETCH, 0, 2, 0},
        {"DATA without a request id", WIRE_DATA, 0, 24, 0},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t h[OBJ_WIRE_HDR_LEN] = {0};
        WireMsg m;
        const char *why = NULL, *again = NULL;
        h[0] = bad[i].type;
        h[1] = bad[i].flags;
        for (int b = 0; b < 4; b++)
            h[4 + b] = (uint8_t)(bad[i].bodyLen >> (8 * b));
        for (int b = 0; b < 8; b++)
            h[8 + b] = (uint8_t)(bad[i].reqId >> (8 * b));
        framerInit(&testF);
        testFeed(&testF, h, sizeof(h), sizeof(h));
        if (framerNext(&testF, &m, &why) != FRAMER_ERROR)
            fail_msg("%s: not refused", bad[i].what);
        assert_non_null(why);
        assert_int_equal(framerNext(&testF, &m, &again), FRAMER_ERROR);
        assert_string_equal(why, again);
        assert_false(framerFrameWaiting(&testF));
    }
}

static void test_bad_body_is_an_error(void **state)
{
    uint8_t s[TEST_STREAM_MAX];
    size_t len = 0;
    WireMsg m;
    const char *why = NULL;
    testFetch(s, &len, 3, "abcd");
    s[OBJ_WIRE_HDR_LEN] = 9; /* idLen 9 in a body that holds 4 */
    framerInit(&testF);

    testFeed(&testF, s, len, len);
    assert_int_equal(framerNext(&testF, &m, &why), FRAMER_ERROR);
    assert_non_null(why);
}

static void test_frame_after_a_bad_one_is_never_delivered(void **state)
{
    uint8_t s[TEST_STREAM_MAX];
    size_t len = 0;
    WireMsg m;
    testPing(s, &len, 1);
    s[1] = 1; /* flags */
    testPing(s, &len, 2);
    framerInit(&testF);

    testFeed(&testF, s, len, len);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_ERROR);
    assert_int_equal(framerNext(&testF, &m, NULL), FRAMER_ERROR);
}

/* ---- the session MAC ---------------------------------------------------------- */

static const uint8_t testKey[OBJ_WIRE_KEY] = {1, 2, 3};

/* Append m sealed under tx, with its payload (len bytes of seed + i, as
 * tx encrypts them or not) and the payload's tag after it when it is a DATA
 * frame. */
static void testSealed(uint8_t *out, size_t *at, WireMac *tx, WireMsg *m, size_t len, uint8_t seed)
{
    uint8_t pay[4096];
    int64_t paySeq;
    assert_true(len <= sizeof(pay));
    for (size_t i = 0; i < len; i++)
        pay[i] = (uint8_t)(seed + i);
    int n = wireEncode(m, out + *at, TEST_STREAM_MAX - *at);
    n = wireSeal(tx, out + *at, TEST_STREAM_MAX - *at, n, &paySeq);
    assert_true(n > 0);
    *at += (size_t)n;
    if (paySeq < 0) {
        assert_int_equal(len, 0);
        return;
    }
    assert_int_equal(wireMacPayloadBeginAt(tx, (uint64_t)paySeq), 0);
    assert_int_equal(wireMacPayloadCrypt(tx, pay, out + *at, len), 0);
    if (wireMacCrypt(tx) == WIRE_CRYPT_NONE)
        memcpy(out + *at, pay, len);
    *at += len;
    assert_int_equal(wireMacPayloadEnd(tx, out + *at), 0);
    *at += OBJ_WIRE_MAC;
}

/* Sessions are encrypted (transfer-encrypt) or not. */
static int testEncrypt;

/* A PING, a DATA with 1000 payload bytes, a FETCH: sealed at sequence 0..2. */
static size_t testSession(uint8_t *s)
{
    WireMac *tx = wireMacNew(testKey);
    if (testEncrypt)
        assert_int_equal(wireMacSetEncrypt(tx, testKey, WIRE_CRYPT_ENCRYPT), 0);
    size_t len = 0;
    WireMsg p = {.h = {.type = WIRE_PING, .reqId = 1}};
    WireMsg d = {.h = {.type = WIRE_DATA, .reqId = 2}};
    WireMsg f = {.h = {.type = WIRE_FETCH, .reqId = 3}};
    d.u.data.size = 1000;
    f.u.fetch.id = "k", f.u.fetch.idLen = 1;
    assert_non_null(tx);
    testSealed(s, &len, tx, &p, 0, 0);
    testSealed(s, &len, tx, &d, 1000, 7);
    testSealed(s, &len, tx, &f, 0, 0);
    wireMacFree(tx);
    return len;
}

/* Feed s to testF under a fresh receiving key, chunk bytes at a time, the
 * DATA payload into a buffer (or thrown away); returns the events' types in
 * order as letters (F frame, D payload done, E error) in out. */
static void testRunSession(const uint8_t *s, size_t len, size_t chunk, int discard, char *out)
{
    WireMac *rx = wireMacNew(testKey);
    uint8_t *dst = malloc(1000);
    size_t off = 0;
    int n = 0, done = 0;
    assert_non_null(rx);
    if (testEncrypt)
        assert_int_equal(wireMacSetEncrypt(rx, testKey, WIRE_CRYPT_DECRYPT), 0);
    framerInit(&testF);
    framerSetMac(&testF, rx);
    while (!done) {
        off += testFeed(&testF, s + off, len - off, chunk);
        for (;;) {
            WireMsg m;
            FramerEvent e = framerNext(&testF, &m, NULL);
            if (e == FRAMER_MORE)
                break;
            out[n++] = e == FRAMER_FRAME ? 'F' : e == FRAMER_PAYLOAD_DONE ? 'D' : 'E';
            if (e == FRAMER_PAYLOAD_DONE && !discard) /* the bytes as sent, decrypted */
                for (size_t i = 0; i < 1000; i++)
                    assert_int_equal(dst[i], (uint8_t)(7 + i));
            if (e == FRAMER_ERROR) {
                done = 1;
                break;
            }
            if (e == FRAMER_FRAME && m.h.type == WIRE_DATA)
                assert_int_equal(framerExpectPayload(&testF, discard ? NULL : dst, 1000), 0);
        }
        if (off == len)
            done = 1;
    }
    out[n] = '\0';
    framerDestroy(&testF);
    wireMacFree(rx);
    free(dst);
}

static void test_sealed_frames_and_payload_are_delivered_however_cut(void **state)
{
    uint8_t s[TEST_STREAM_MAX];
    char ev[16];
    for (testEncrypt = 0; testEncrypt < 2; testEncrypt++) {
        size_t len = testSession(s);
        for (size_t chunk = 1; chunk <= len; chunk = chunk * 3 + 1) {
            testRunSession(s, len, chunk, 0, ev);
            assert_string_equal(ev, "FFDF");
        }
    }
    testEncrypt = 0;
}

/* Encrypted, the payload on the wire is not the object's bytes. */
static void test_encrypted_payload_is_not_the_plain_bytes(void **state)
{
    uint8_t s[TEST_STREAM_MAX], t[TEST_STREAM_MAX];
    size_t at = OBJ_WIRE_HDR_LEN + OBJ_WIRE_MAC + OBJ_WIRE_HDR_LEN + 24 + OBJ_WIRE_MAC;
    testEncrypt = 0;
    size_t len = testSession(s);
    testEncrypt = 1;
    assert_int_equal(testSession(t), len);
    testEncrypt = 0;
    size_t same = 0;
    for (size_t i = 0; i < 1000; i++)
        same += s[at + i] == t[at + i];
    assert_true(same < 50);                       /* about 4 of 1000 by chance */
    assert_memory_equal(s, t, at - OBJ_WIRE_MAC); /* frames travel as they are */
}

/* Any byte altered, in a session that encrypts or not: the frame it is in
 * fails (F before it, then E); a payload byte, or the payload's tag (after
 * the payload), fails at the payload's end, before its end is reported. */
static void test_altered_byte_of_a_session_is_an_error(void **state)
{
    uint8_t s[TEST_STREAM_MAX];
    char ev[16];
    for (testEncrypt = 0; testEncrypt < 2; testEncrypt++) {
        size_t len = testSession(s);
        size_t ping = OBJ_WIRE_HDR_LEN + OBJ_WIRE_MAC;
        size_t payStart = ping + OBJ_WIRE_HDR_LEN + 24 + OBJ_WIRE_MAC;
        size_t dataEnd = payStart + 1000 + OBJ_WIRE_MAC;
        for (size_t i = 0; i < len; i++) {
            s[i] ^= 0x10;
            testRunSession(s, len, 4096, 0, ev);
            const char *want = i < ping ? "E" : i < payStart ? "FE" : i < dataEnd ? "FFE" : "FFDE";
            if (strcmp(ev, want) != 0)
                fail_msg("byte %zu altered (encrypt %d): events %s, expected %s", i, testEncrypt,
                         ev, want);
            s[i] ^= 0x10;
        }
    }
    testEncrypt = 0;
}

/* A payload thrown away is not checked (nothing reads it), but its tag
 * keeps its place and the next frame's sequence still counts. */
static void test_discarded_payload_is_not_checked_but_keeps_the_sequence(void **state)
{
    uint8_t s[TEST_STREAM_MAX];
    char ev[16];
    size_t len = testSession(s);
    s[OBJ_WIRE_HDR_LEN + OBJ_WIRE_MAC + OBJ_WIRE_HDR_LEN + 24 + OBJ_WIRE_MAC + 5] ^= 1;
    testRunSession(s, len, 4096, 1, ev);
    assert_string_equal(ev, "FFDF");
}

/* Frames replayed, dropped, reordered or sent without a tag fail. */
static void test_replayed_dropped_or_untagged_frames_fail(void **state)
{
    uint8_t s[TEST_STREAM_MAX], t[TEST_STREAM_MAX];
    char ev[16];
    size_t len = testSession(s), ping = OBJ_WIRE_HDR_LEN + OBJ_WIRE_MAC;

    memcpy(t, s, ping); /* the PING twice */
    memcpy(t + ping, s, len);
    testRunSession(t, len + ping, 4096, 0, ev);
    assert_string_equal(ev, "FE");
    testRunSession(s + ping, len - ping, 4096, 0, ev); /* the PING dropped */
    assert_string_equal(ev, "E");
    size_t n = 0; /* an untagged PING first */
    testPing(t, &n, 9);
    memcpy(t + n, s, len);
    testRunSession(t, n + len, 4096, 0, ev);
    assert_string_equal(ev, "E");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_frame_written_whole_comes_out_whole, testTeardown),
        cmocka_unit_test_teardown(test_frame_written_byte_by_byte_comes_out_at_its_last_byte,
                                  testTeardown),
        cmocka_unit_test_teardown(test_frames_written_together_come_out_one_by_one, testTeardown),
        cmocka_unit_test_teardown(test_frame_waiting_needs_a_whole_header, testTeardown),
        cmocka_unit_test_teardown(test_buffer_full_of_unconsumed_frames_offers_no_room,
                                  testTeardown),
        cmocka_unit_test_teardown(
            test_payload_buffered_with_its_frame_is_copied_and_the_rest_read_straight_in,
            testTeardown),
        cmocka_unit_test_teardown(test_payload_left_counts_only_bytes_in_place, testTeardown),
        cmocka_unit_test_teardown(test_payload_and_next_frame_in_one_write_give_done_then_the_frame,
                                  testTeardown),
        cmocka_unit_test_teardown(test_empty_payload_is_done_at_once, testTeardown),
        cmocka_unit_test_teardown(
            test_payload_without_destination_is_thrown_away_and_the_stream_stays_in_step,
            testTeardown),
        cmocka_unit_test_teardown(test_discarded_payload_keeps_what_came_and_writes_nothing_more,
                                  testTeardown),
        cmocka_unit_test_teardown(
            test_payload_checksum_equals_a_second_pass_however_the_bytes_were_cut, testTeardown),
        cmocka_unit_test_teardown(test_payload_given_up_or_without_destination_has_no_checksum,
                                  testTeardown),
        cmocka_unit_test_teardown(test_second_payload_before_the_first_ends_is_refused,
                                  testTeardown),
        cmocka_unit_test_teardown(test_writes_beyond_the_space_given_are_refused, testTeardown),
        cmocka_unit_test_teardown(test_bad_headers_are_errors_that_stay, testTeardown),
        cmocka_unit_test_teardown(test_bad_body_is_an_error, testTeardown),
        cmocka_unit_test_teardown(test_frame_after_a_bad_one_is_never_delivered, testTeardown),
        cmocka_unit_test(test_sealed_frames_and_payload_are_delivered_however_cut),
        cmocka_unit_test(test_altered_byte_of_a_session_is_an_error),
        cmocka_unit_test(test_encrypted_payload_is_not_the_plain_bytes),
        cmocka_unit_test(test_discarded_payload_is_not_checked_but_keeps_the_sequence),
        cmocka_unit_test(test_replayed_dropped_or_untagged_frames_fail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
