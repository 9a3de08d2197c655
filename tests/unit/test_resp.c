/*
 * test_resp.c - the request parser of the RDMA front door (resp.h): it reads
 * multibulk and inline requests exactly as redis-server 7.0 does, whether the
 * bytes arrive at once or one at a time, keeps pipelined requests apart,
 * skips empty requests, and answers malformed or oversized input with
 * redis-server's "Protocol error: ..." texts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "redis/resp.h"

/* A caller as the server is one: a stream buffer it appends to and drops
 * from, and the requests seen, each as its arguments joined by '|'. */
typedef struct Stream {
    RespParser p;
    char *buf;
    size_t len;
    char seen[16][256];
    size_t nseen;
    int rc; /* of the last respParse */
} Stream;

static void streamInit(Stream *s)
{
    memset(s, 0, sizeof(*s));
    respParserInit(&s->p);
}

static void streamFree(Stream *s)
{
    respParserFree(&s->p);
    free(s->buf);
}

/* Append n bytes and parse every request they complete. */
static void streamFeed(Stream *s, const char *data, size_t n, int authRequired)
{
    s->buf = realloc(s->buf, s->len + n + 1);
    assert_non_null(s->buf);
    memcpy(s->buf + s->len, data, n);
    s->len += n;
    for (;;) {
        s->rc = respParse(&s->p, s->buf, s->len, authRequired);
        if (s->rc == RESP_DONE) {
            assert_true(s->nseen < 16);
            char *out = s->seen[s->nseen++];
            size_t o = 0, room = sizeof(s->seen[0]) - 1;
            for (size_t i = 0; i < s->p.argc; i++) {
                size_t alen;
                const char *a = respArg(&s->p, s->buf, i, &alen);
                if (i && o < room)
                    out[o++] = '|';
                for (size_t j = 0; j < alen && o < room; j++)
                    out[o++] = a[j];
            }
            out[o] = '\0';
        }
        if (s->rc != RESP_DONE && s->rc != RESP_MORE)
            return;
        memmove(s->buf, s->buf + s->p.consumed, s->len - s->p.consumed);
        s->len -= s->p.consumed;
        respParserConsumed(&s->p);
        if (s->rc == RESP_MORE)
            return;
    }
}

static void feedAll(Stream *s, const char *data, size_t n)
{
    streamFeed(s, data, n, 0);
}

static void feedBytewise(Stream *s, const char *data, size_t n)
{
    for (size_t i = 0; i < n && s->rc >= 0; i++)
        streamFeed(s, data + i, 1, 0);
}

/* ---- requests that parse ------------------------------------------------------------ */

typedef struct GoodCase {
    const char *name;
    const char *in;
    size_t inLen; /* 0: strlen */
    int nreq;
    const char *req[3];
} GoodCase;

static const GoodCase goodCases[] = {
    {"multibulk", "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nhello\r\n", 0, 1, {"SET|k|hello"}},
    {"pipelined", "*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", 0, 2, {"PING", "GET|k"}},
    {"empty bulk", "*2\r\n$4\r\nECHO\r\n$0\r\n\r\n", 0, 1, {"ECHO|"}},
    {"bulk holding CRLF and stars",
     "*2\r\n$4\r\nECHO\r\n$6\r\n*\r\n$\r\n\r\n",
     0,
     1,
     {"ECHO|*\r\n$\r\n"}},
    {"empty multibulks are skipped", "*0\r\n*-1\r\n*1\r\n$4\r\nPING\r\n", 0, 1, {"PING"}},
    {"inline", "SET k v\r\n", 0, 1, {"SET|k|v"}},
    {"inline with bare LF", "PING\nECHO x\n", 0, 2, {"PING", "ECHO|x"}},
    {"blank inline lines are skipped", "\r\n   \n\t\r\nPING\r\n", 0, 1, {"PING"}},
    {"inline double quotes and escapes",
     "SET \"a b\" \"\\x41\\n\\t\\\"z\"\n",
     0,
     1,
     {"SET|a b|A\n\t\"z"}},
    {"inline single quotes", "ECHO 'it\\'s \"x\"'\n", 0, 1, {"ECHO|it's \"x\""}},
    {"inline empty quoted argument", "ECHO \"\"\n", 0, 1, {"ECHO|"}},
    {"inline quote inside a word", "ECHO ab\"c d\"\n", 0, 1, {"ECHO|abc d"}},
    {"inline line ends at NUL", "ECHO a\0b\n", 9, 1, {"ECHO|a"}},
    {"inline then multibulk", "PING\r\n*1\r\n$4\r\nPING\r\n", 0, 2, {"PING", "PING"}},
};

static void checkGood(const GoodCase *c, int bytewise)
{
    Stream s;
    size_t n = c->inLen ? c->inLen : strlen(c->in);

    streamInit(&s);
    if (bytewise)
        feedBytewise(&s, c->in, n);
    else
        feedAll(&s, c->in, n);
    if (s.rc != RESP_MORE)
        fail_msg("%s: rc %d (%s)", c->name, s.rc, s.p.err);
    if ((int)s.nseen != c->nreq)
        fail_msg("%s: %zu requests, want %d", c->name, s.nseen, c->nreq);
    for (int i = 0; i < c->nreq; i++) {
        if (strcmp(s.seen[i], c->req[i]))
            fail_msg("%s: request %d is '%s', want '%s'", c->name, i, s.seen[i], c->req[i]);
    }
    assert_int_equal(s.len, 0); /* everything consumed */
    streamFree(&s);
}

static void testWellFormedRequestsParseAtOnce(void **state)
{
    for (size_t i = 0; i < sizeof(goodCases) / sizeof(goodCases[0]); i++)
        checkGood(&goodCases[i], 0);
}

static void testWellFormedRequestsParseByteByByte(void **state)
{
    for (size_t i = 0; i < sizeof(goodCases) / sizeof(goodCases[0]); i++)
        checkGood(&goodCases[i], 1);
}

static void testIncompleteRequestWaitsAndKeepsItsBytes(void **state)
{
    Stream s;
    const char *part = "*2\r\n$3\r\nGET\r\n$5\r\nhel";

    streamInit(&s);
    feedAll(&s, part, strlen(part));
    assert_int_equal(s.rc, RESP_MORE);
    assert_int_equal(s.nseen, 0);
    assert_int_equal(s.len, strlen(part)); /* nothing may be dropped yet */
    feedAll(&s, "lo\r\n", 4);
    assert_int_equal(s.nseen, 1);
    assert_string_equal(s.seen[0], "GET|hello");
    streamFree(&s);
}

static void testSkippedEmptyRequestsAreDroppedBeforeAPartialOne(void **state)
{
    Stream s;
    const char *in = "*0\r\n\r\n*1\r\n$4\r\nPI";

    streamInit(&s);
    feedAll(&s, in, strlen(in));
    assert_int_equal(s.rc, RESP_MORE);
    assert_int_equal(s.len, strlen("*1\r\n$4\r\nPI"));
    feedAll(&s, "NG\r\n", 4);
    assert_int_equal(s.nseen, 1);
    assert_string_equal(s.seen[0], "PING");
    streamFree(&s);
}

static void testBulkHeaderOfTheMaximumSizeIsAccepted(void **state)
{
    Stream s;
    const char *in = "*2\r\n$3\r\nSET\r\n$536870912\r\nabc";

    streamInit(&s);
    feedAll(&s, in, strlen(in));
    assert_int_equal(s.rc, RESP_MORE);
    assert_int_equal(s.p.bulkLen, RESP_MAX_BULK);
    streamFree(&s);
}

static void testManyArgumentsGrowTheArgumentArray(void **state)
{
    Stream s;
    char head[32];
    int n = 5000;

    streamInit(&s);
    snprintf(head, sizeof(head), "*%d\r\n", n);
    feedAll(&s, head, strlen(head));
    for (int i = 0; i < n; i++)
        feedAll(&s, "$1\r\nx\r\n", 7);
    assert_int_equal(s.rc, RESP_MORE);
    assert_int_equal(s.nseen, 1);
    streamFree(&s);
}

/* ---- protocol errors ------------------------------------------------------------------ */

typedef struct BadCase {
    const char *name;
    const char *in;
    int authRequired;
    const char *err;
} BadCase;

static char bigInline[RESP_MAX_INLINE + 2];
static char bigCount[RESP_MAX_INLINE + 3];
static char bigBulkCount[RESP_MAX_INLINE + 12];

static const BadCase badCases[] = {
    {"count not a number", "*abc\r\n", 0, "Protocol error: invalid multibulk length"},
    {"count with a plus", "*+1\r\n", 0, "Protocol error: invalid multibulk length"},
    {"count with a leading zero", "*01\r\n", 0, "Protocol error: invalid multibulk length"},
    {"count over the argument limit", "*1048577\r\n", 0,
     "Protocol error: invalid multibulk length"},
    {"count overflowing", "*99999999999999999999\r\n", 0,
     "Protocol error: invalid multibulk length"},
    {"bulk without a dollar", "*1\r\n+PING\r\n", 0, "Protocol error: expected '$', got '+'"},
    {"negative bulk length", "*1\r\n$-1\r\n", 0, "Protocol error: invalid bulk length"},
    {"bulk over 512 MiB", "*1\r\n$536870913\r\n", 0, "Protocol error: invalid bulk length"},
    {"bulk length not a number", "*1\r\n$x\r\n", 0, "Protocol error: invalid bulk length"},
    {"unbalanced double quote", "ECHO \"abc\r\n", 0,
     "Protocol error: unbalanced quotes in request"},
    {"unbalanced single quote", "ECHO 'abc\n", 0, "Protocol error: unbalanced quotes in request"},
    {"closing quote followed by a letter", "ECHO \"a\"b\n", 0,
     "Protocol error: unbalanced quotes in request"},
    {"too many arguments before AUTH", "*11\r\n", 1,
     "Protocol error: unauthenticated multibulk length"},
    {"too big a bulk before AUTH", "*2\r\n$4\r\nAUTH\r\n$16385\r\n", 1,
     "Protocol error: unauthenticated bulk length"},
    {"too big inline request", bigInline, 0, "Protocol error: too big inline request"},
    {"too big mbulk count string", bigCount, 0, "Protocol error: too big mbulk count string"},
    {"too big bulk count string", bigBulkCount, 0, "Protocol error: too big bulk count string"},
};

static void testMalformedInputIsAProtocolError(void **state)
{
    memset(bigInline, 'a', sizeof(bigInline) - 1);
    bigCount[0] = '*';
    memset(bigCount + 1, '1', sizeof(bigCount) - 2);
    memcpy(bigBulkCount, "*1\r\n$", 5);
    memset(bigBulkCount + 5, '1', sizeof(bigBulkCount) - 6);
    for (size_t i = 0; i < sizeof(badCases) / sizeof(badCases[0]); i++) {
        const BadCase *c = &badCases[i];
        /* Byte by byte only for short inputs: each step rescans the line. */
        int ways = strlen(c->in) < 1024 ? 2 : 1;
        for (int bytewise = 0; bytewise < ways; bytewise++) {
            Stream s;
            streamInit(&s);
            if (bytewise) {
                for (size_t j = 0; c->in[j] && s.rc >= 0; j++)
                    streamFeed(&s, c->in + j, 1, c->authRequired);
            } else {
                streamFeed(&s, c->in, strlen(c->in), c->authRequired);
            }
            if (s.rc != RESP_ERROR)
                fail_msg("%s: rc %d, want a protocol error", c->name, s.rc);
            if (strcmp(s.p.err, c->err))
                fail_msg("%s: '%s', want '%s'", c->name, s.p.err, c->err);
            streamFree(&s);
        }
    }
}

static void testLimitsBeforeAuthAllowAuthItself(void **state)
{
    Stream s;
    const char *in = "*3\r\n$4\r\nAUTH\r\n$4\r\nuser\r\n$8\r\npassword\r\n";

    streamInit(&s);
    streamFeed(&s, in, strlen(in), 1);
    assert_int_equal(s.rc, RESP_MORE);
    assert_int_equal(s.nseen, 1);
    assert_string_equal(s.seen[0], "AUTH|user|password");
    streamFree(&s);
}

static void testLongInlineLineJustUnderTheLimitParses(void **state)
{
    Stream s;
    static char line[RESP_MAX_INLINE + 1];

    memset(line, 'b', RESP_MAX_INLINE - 1);
    line[0] = 'E';
    line[1] = ' ';
    line[RESP_MAX_INLINE - 1] = '\n';
    streamInit(&s);
    feedAll(&s, line, RESP_MAX_INLINE);
    assert_int_equal(s.rc, RESP_MORE);
    assert_int_equal(s.nseen, 1);
    streamFree(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(testWellFormedRequestsParseAtOnce),
        cmocka_unit_test(testWellFormedRequestsParseByteByByte),
        cmocka_unit_test(testIncompleteRequestWaitsAndKeepsItsBytes),
        cmocka_unit_test(testSkippedEmptyRequestsAreDroppedBeforeAPartialOne),
        cmocka_unit_test(testBulkHeaderOfTheMaximumSizeIsAccepted),
        cmocka_unit_test(testManyArgumentsGrowTheArgumentArray),
        cmocka_unit_test(testMalformedInputIsAProtocolError),
        cmocka_unit_test(testLimitsBeforeAuthAllowAuthItself),
        cmocka_unit_test(testLongInlineLineJustUnderTheLimitParses),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
