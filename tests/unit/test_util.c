/*
 * test_util.c - unit tests for the pure helpers in module/common/util.c.
 *
 * Command arguments go through utilParseU64 and utilParseSize before any
 * state changes, so these tables pin down exactly what is accepted and,
 * more importantly, everything that must be refused: signs, spaces,
 * trailing junk, embedded NULs, values past INT64_MAX and sizes whose
 * multiplication overflows. utilParseHex64 reads the checksums the directory
 * and OBJ.INFO carry as text: exactly 16 hex digits, nothing else. utilGlobMatch backs OBJ.LIST
 * MATCH on binary ids, so its table covers every metacharacter, bytes above 0x7f and NUL, and a
 * pattern that makes naive backtracking take exponential time.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "common/util.h"

#define KIB (1024ULL)
#define MIB (1024ULL * KIB)
#define GIB (1024ULL * MIB)
#define TIB (1024ULL * GIB)

/* A string literal and its length without the terminator, so that literals
 * with embedded NULs keep their full length. */
#define LIT(s) s, sizeof(s) - 1

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* A value the parsers never produce, to prove failure leaves *out alone. */
#define UNTOUCHED 0xdeadbeefULL

typedef struct ParseCase {
    const char *s;
    size_t len;
    uint64_t want;
} ParseCase;

typedef struct BadCase {
    const char *s;
    size_t len;
} BadCase;

typedef int (*ParseFn)(const char *s, size_t len, uint64_t *out);

/* s[0..len) as a C literal body, non-printable bytes as \xHH, for messages. */
static const char *testQuote(char *buf, size_t size, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (size_t i = 0; i < len && o + 5 < size; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            buf[o++] = (char)c;
        } else {
            buf[o++] = '\\';
            buf[o++] = 'x';
            buf[o++] = hex[c >> 4];
            buf[o++] = hex[c & 15];
        }
    }
    buf[o] = '\0';
    return buf;
}

/* Every row must parse to its value; reports all rows that do not. */
static void testExpectParses(ParseFn parse, const char *name, const ParseCase *rows, size_t n)
{
    int failures = 0;
    for (size_t i = 0; i < n; i++) {
        char q[128];
        uint64_t v = UNTOUCHED;
        int rc = parse(rows[i].s, rows[i].len, &v);
        if (rc != 0 || v != rows[i].want) {
            print_error("%s(\"%s\") = %d, %llu; want 0, %llu\n", name,
                        testQuote(q, sizeof(q), rows[i].s, rows[i].len), rc, (unsigned long long)v,
                        (unsigned long long)rows[i].want);
            failures++;
        }
    }
    assert_int_equal(failures, 0);
}

/* Every row must be refused with -1 and leave *out alone; reports all that are not. */
static void testExpectRefuses(ParseFn parse, const char *name, const BadCase *rows, size_t n)
{
    int failures = 0;
    for (size_t i = 0; i < n; i++) {
        char q[128];
        uint64_t v = UNTOUCHED;
        int rc = parse(rows[i].s, rows[i].len, &v);
        if (rc != -1 || v != UNTOUCHED) {
            print_error("%s(\"%s\") = %d, %llu; want -1, *out untouched\n", name,
                        testQuote(q, sizeof(q), rows[i].s, rows[i].len), rc, (unsigned long long)v);
            failures++;
        }
    }
    assert_int_equal(failures, 0);
}

/* ---- utilParseU64 ---------------------------------------------------------------- */

static void testParseU64AcceptsPlainDecimals(void **state)
{
    (void)state;
    static const ParseCase good[] = {
        {LIT("0"), 0},
        {LIT("1"), 1},
        {LIT("42"), 42},
        {LIT("4096"), 4096},
        {LIT("1000000000000000000"), 1000000000000000000ULL}, /* 19 digits */
        {LIT("9223372036854775806"), INT64_MAX - 1},
        {LIT("9223372036854775807"), INT64_MAX},
    };
    testExpectParses(utilParseU64, "utilParseU64", good, ARRAY_LEN(good));
}

static void testParseU64RefusesEverythingElse(void **state)
{
    (void)state;
    static const BadCase bad[] = {
        {LIT("")},
        {LIT("-1")},
        {LIT("-0")},
        {LIT("+1")},
        {LIT(" 1")},
        {LIT("1 ")},
        {LIT("\t1")},
        {LIT("1\n")},
        {LIT("12a")},
        {LIT("a12")},
        {LIT("abc")},
        {LIT("1.0")},
        {LIT("1e3")},
        {LIT("0x10")},
        {LIT("1_000")},
        {LIT("1,000")},
        {LIT("1\0")},                  /* embedded NUL: the length is the truth */
        {LIT("\0001")},                /* NUL, then "1" */
        {LIT("9223372036854775808")},  /* INT64_MAX + 1 */
        {LIT("9999999999999999999")},  /* 19 digits, above INT64_MAX */
        {LIT("10000000000000000000")}, /* 20 digits */
        {LIT("18446744073709551615")}, /* UINT64_MAX */
        {LIT("18446744073709551616")}, /* UINT64_MAX + 1: would wrap */
        {LIT("36893488147419103232")}, /* 2^65: wraps to 0 in 64 bits */
        {LIT("100000000000000000000000000000")},
    };
    testExpectRefuses(utilParseU64, "utilParseU64", bad, ARRAY_LEN(bad));
}

static void testParseU64ReadsOnlyLenBytes(void **state)
{
    (void)state;
    uint64_t v = 0;
    assert_int_equal(utilParseU64("12345", 3, &v), 0);
    assert_int_equal(v, 123);
    assert_int_equal(utilParseU64("7x", 1, &v), 0);
    assert_int_equal(v, 7);
    assert_int_equal(utilParseU64("12345", 0, &v), -1);
}

/* ---- utilParseHex64 ---------------------------------------------------------------- */

static void testParseHex64AcceptsSixteenDigitsOfEitherCase(void **state)
{
    (void)state;
    static const ParseCase good[] = {
        {LIT("0000000000000000"), 0},
        {LIT("0000000000000001"), 1},
        {LIT("00000000000000ff"), 0xff},
        {LIT("00000000000000FF"), 0xff},
        {LIT("0123456789abcdef"), 0x0123456789abcdefULL},
        {LIT("FEDCBA9876543210"), 0xfedcba9876543210ULL},
        {LIT("aBcDeF0123456789"), 0xabcdef0123456789ULL},
        {LIT("ffffffffffffffff"), UINT64_MAX},
    };
    testExpectParses(utilParseHex64, "utilParseHex64", good, ARRAY_LEN(good));
}

static void testParseHex64RefusesEverythingElse(void **state)
{
    (void)state;
    static const BadCase bad[] = {
        {LIT("")},
        {LIT("0")},
        {LIT("ff")},
        {LIT("000000000000000")},   /* 15 digits */
        {LIT("00000000000000000")}, /* 17 digits */
        {LIT("0x00000000000000")},  /* no prefix, even within 16 bytes */
        {LIT("000000000000000g")},
        {LIT("G000000000000000")},
        {LIT(" 000000000000000")},
        {LIT("000000000000000 ")},
        {LIT("-000000000000001")},
        {LIT("+000000000000001")},
        {LIT("0000000"
             "\0"
             "00000000")},         /* embedded NUL, 16 bytes */
        {LIT("0000000000000:00")}, /* the byte after '9' */
        {LIT("0000000000000@00")}, /* the byte before 'A' */
        {LIT("0000000000000`00")}, /* the byte before 'a' */
    };
    testExpectRefuses(utilParseHex64, "utilParseHex64", bad, ARRAY_LEN(bad));
}

static void testParseHex64ReadsOnlyLenBytes(void **state)
{
    (void)state;
    uint64_t v = 0;
    assert_int_equal(utilParseHex64("00000000000000abz", 16, &v), 0);
    assert_int_equal(v, 0xab);
    assert_int_equal(utilParseHex64("0000000000000000", 15, &v), -1);
}

/* ---- utilParseSize ------------------------------------------------------------------ */

static void testParseSizeAcceptsUnitsCaseInsensitively(void **state)
{
    (void)state;
    static const ParseCase good[] = {
        {LIT("0"), 0},
        {LIT("4096"), 4096},
        {LIT("1b"), 1},
        {LIT("1B"), 1},
        {LIT("64k"), 64 * KIB},
        {LIT("64kb"), 64 * KIB},
        {LIT("64KB"), 64 * KIB},
        {LIT("64Kb"), 64 * KIB},
        {LIT("512m"), 512 * MIB},
        {LIT("512mb"), 512 * MIB},
        {LIT("512MB"), 512 * MIB},
        {LIT("1g"), GIB},
        {LIT("1G"), GIB},
        {LIT("1gb"), GIB},
        {LIT("1GB"), GIB},
        {LIT("1gB"), GIB},
        {LIT("1t"), TIB},
        {LIT("1tb"), TIB},
        {LIT("0gb"), 0},
        {LIT("3g"), 3 * GIB},
        {LIT("8388607t"), 8388607 * TIB}, /* the largest whole number of TiB */
        {LIT("9223372036854775807"), INT64_MAX},
        {LIT("9223372036854775807b"), INT64_MAX},
        {LIT("8589934591g"), 8589934591ULL * GIB},
    };
    testExpectParses(utilParseSize, "utilParseSize", good, ARRAY_LEN(good));
}

static void testParseSizeRefusesEverythingElse(void **state)
{
    (void)state;
    static const BadCase bad[] = {
        {LIT("")},
        {LIT("gb")},
        {LIT("b")},
        {LIT("k")},
        {LIT("1x")},
        {LIT("1gbb")},
        {LIT("1bb")}, /* only k, m, g and t take an optional "b" */
        {LIT("1kk")},
        {LIT("1mg")},
        {LIT("1kib")},
        {LIT("1gib")},
        {LIT("1 gb")},
        {LIT(" 1gb")},
        {LIT("1gb ")},
        {LIT("-1")},
        {LIT("-1g")},
        {LIT("+1g")},
        {LIT("1.5g")},
        {LIT("0x10")},
        {LIT("1g\0")},
        {LIT("1\0g")},
        {LIT("99999999999t")},        /* overflows 64 bits */
        {LIT("8388608t")},            /* exactly 2^63: one past INT64_MAX */
        {LIT("8589934592g")},         /* exactly 2^63 */
        {LIT("9223372036854775808")}, /* INT64_MAX + 1 */
        {LIT("18446744073709551616b")},
        {LIT("9007199254740992k")}, /* 2^53 KiB = 2^63 */
    };
    testExpectRefuses(utilParseSize, "utilParseSize", bad, ARRAY_LEN(bad));
}

/* ---- utilGlobMatch -------------------------------------------------------------------- */

typedef struct GlobCase {
    const char *pat;
    size_t patLen;
    const char *str;
    size_t strLen;
    int want;
} GlobCase;

static void testGlobMatchTable(void **state)
{
    (void)state;
    static const GlobCase cases[] = {
        /* literals */
        {LIT(""), LIT(""), 1},
        {LIT(""), LIT("a"), 0},
        {LIT("a"), LIT(""), 0},
        {LIT("abc"), LIT("abc"), 1},
        {LIT("abc"), LIT("abd"), 0},
        {LIT("abc"), LIT("ab"), 0},
        {LIT("abc"), LIT("abcd"), 0},
        {LIT("ABC"), LIT("abc"), 0}, /* case sensitive */
        /* star */
        {LIT("*"), LIT(""), 1},
        {LIT("*"), LIT("anything at all"), 1},
        {LIT("**"), LIT(""), 1},
        {LIT("***"), LIT("abc"), 1},
        {LIT("a*"), LIT("a"), 1},
        {LIT("a*"), LIT("abc"), 1},
        {LIT("a*"), LIT("ba"), 0},
        {LIT("*c"), LIT("abc"), 1},
        {LIT("*c"), LIT("abcd"), 0},
        {LIT("a*c"), LIT("ac"), 1},
        {LIT("a*c"), LIT("abbbc"), 1},
        {LIT("a*c"), LIT("abcd"), 0},
        {LIT("*b*"), LIT("abc"), 1},
        {LIT("*b*"), LIT("ac"), 0},
        {LIT("*ab"), LIT("aab"), 1}, /* the star must give back a character */
        {LIT("*aab"), LIT("aaab"), 1},
        {LIT("a*b*c"), LIT("abbbc"), 1},
        {LIT("a*b*c"), LIT("acb"), 0},
        {LIT("obj:*:data"), LIT("obj:42:data"), 1},
        {LIT("obj:*:data"), LIT("obj:42:meta"), 0},
        /* question mark */
        {LIT("?"), LIT("a"), 1},
        {LIT("?"), LIT(""), 0},
        {LIT("?"), LIT("ab"), 0},
        {LIT("a?c"), LIT("abc"), 1},
        {LIT("a?c"), LIT("ac"), 0},
        {LIT("??"), LIT("a"), 0},
        {LIT("*?"), LIT(""), 0},
        {LIT("*?"), LIT("x"), 1},
        /* classes and ranges */
        {LIT("[abc]"), LIT("b"), 1},
        {LIT("[abc]"), LIT("d"), 0},
        {LIT("[abc]"), LIT(""), 0},
        {LIT("[abc]"), LIT("ab"), 0},
        {LIT("[a-c]"), LIT("a"), 1},
        {LIT("[a-c]"), LIT("c"), 1},
        {LIT("[a-c]"), LIT("d"), 0},
        {LIT("[c-a]"), LIT("b"), 1}, /* a reversed range means the same range */
        {LIT("[0-9a-f]"), LIT("e"), 1},
        {LIT("[0-9a-f]"), LIT("g"), 0},
        {LIT("[a-]"), LIT("-"), 1}, /* '-' before ']' is literal */
        {LIT("[a-]"), LIT("b"), 0},
        {LIT("obj:[0-9][0-9]"), LIT("obj:42"), 1},
        {LIT("obj:[0-9][0-9]"), LIT("obj:4x"), 0},
        {LIT("[]"), LIT("a"), 0},   /* an empty class matches nothing */
        {LIT("[abc"), LIT("a"), 0}, /* nor does an unterminated one */
        {LIT("*[abc"), LIT("xa"), 0},
        /* negation */
        {LIT("[^a]"), LIT("b"), 1},
        {LIT("[^a]"), LIT("a"), 0},
        {LIT("[^a]"), LIT(""), 0},
        {LIT("[^a-c]"), LIT("d"), 1},
        {LIT("[^a-c]"), LIT("b"), 0},
        {LIT("x[^0-9]*"), LIT("xa123"), 1},
        {LIT("x[^0-9]*"), LIT("x1abc"), 0},
        /* escapes */
        {LIT("\\*"), LIT("*"), 1},
        {LIT("\\*"), LIT("a"), 0},
        {LIT("\\?"), LIT("?"), 1},
        {LIT("\\?"), LIT("x"), 0},
        {LIT("\\[a]"), LIT("[a]"), 1},
        {LIT("\\[a]"), LIT("a"), 0},
        {LIT("\\\\"), LIT("\\"), 1},
        {LIT("\\a"), LIT("a"), 1},
        {LIT("a\\"), LIT("a\\"), 1}, /* a trailing backslash is literal */
        {LIT("*\\*"), LIT("abc*"), 1},
        {LIT("*\\*"), LIT("abc"), 0},
        {LIT("[\\]]"), LIT("]"), 1},
        {LIT("[\\]]"), LIT("x"), 0},
        {LIT("[\\^x]"), LIT("^"), 1},
        {LIT("[\\-]"), LIT("-"), 1},
        {LIT("[^\\]]"), LIT("]"), 0},
        /* binary: NUL and bytes above 0x7f */
        {LIT("a\0b"), LIT("a\0b"), 1},
        {LIT("a\0b"), LIT("a\0c"), 0},
        {LIT("a\0b"), LIT("a"), 0},
        {LIT("a"), LIT("a\0"), 0},
        {LIT("a?b"), LIT("a\0b"), 1},
        {LIT("*\0*"), LIT("x\0y"), 1},
        {LIT("*\0*"), LIT("xy"), 0},
        {LIT("[\0]"), LIT("\0"), 1},
        {LIT("[^\0]"), LIT("\0"), 0},
        {LIT("\\\0"), LIT("\0"), 1},
        {LIT("\xff*"), LIT("\xff\xfe"), 1},
        {LIT("[\x80-\xff]"), LIT("\xfe"), 1},
        {LIT("[\x80-\xff]"), LIT("\x7f"), 0},
        {LIT("[^\x80-\xff]"), LIT("\x7f"), 1},
    };
    int failures = 0;
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        const GlobCase *c = &cases[i];
        char qp[128], qs[128];
        int got = utilGlobMatch(c->pat, c->patLen, c->str, c->strLen);
        if (got != c->want) {
            print_error("utilGlobMatch(\"%s\", \"%s\") = %d, want %d\n",
                        testQuote(qp, sizeof(qp), c->pat, c->patLen),
                        testQuote(qs, sizeof(qs), c->str, c->strLen), got, c->want);
            failures++;
        }
    }
    assert_int_equal(failures, 0);
}

/* Every byte value is matched by '?' and '*' and by itself. */
static void testGlobMatchesEveryByteValue(void **state)
{
    (void)state;
    for (int b = 0; b < 256; b++) {
        char c = (char)b;
        assert_int_equal(utilGlobMatch("?", 1, &c, 1), 1);
        assert_int_equal(utilGlobMatch("*", 1, &c, 1), 1);
        if (c != '*' && c != '?' && c != '[' && c != '\\')
            assert_int_equal(utilGlobMatch(&c, 1, &c, 1), 1);
        char esc[2] = {'\\', c};
        assert_int_equal(utilGlobMatch(esc, 2, &c, 1), 1);
    }
}

/* A backtracking matcher that retries every split takes exponential time on
 * these; a linear one finishes at once. */
/* The work count of a match stays within (strLen + 1) * (patLen + strLen), the
 * bound OBJ.LIST's match budget relies on, even for a long bracket class. */
static void testGlobWorkIsCountedAndBounded(void **state)
{
    (void)state;
    enum { PAT = 1024, STR = 512 };
    static char pat[PAT], str[STR];
    pat[0] = '*';
    pat[1] = '[';
    memset(pat + 2, 'q', PAT - 4);
    pat[PAT - 2] = ']';
    pat[PAT - 1] = 'z';
    memset(str, 'q', STR);
    uint64_t work = 0;
    assert_int_equal(utilGlobMatchCounted(pat, PAT, str, STR, &work), 0);
    assert_true(work > (uint64_t)STR * (PAT - 4) / 2); /* the class is scanned at each try */
    assert_true(work <= (uint64_t)(STR + 1) * (PAT + STR));
    uint64_t before = work;
    assert_int_equal(utilGlobMatchCounted("q*", 2, str, STR, &work), 1);
    assert_true(work > before); /* it adds, never resets */
}

/* TIMEOUT values: 0 to OBJ_TIMEOUT_MAX_MS, nothing above, nothing malformed. */
static void testParseTimeoutStopsAtTheMaximum(void **state)
{
    (void)state;
    char buf[32];
    uint64_t v;
    assert_int_equal(utilParseTimeoutMs("0", 1, &v), 0);
    assert_int_equal(v, 0);
    int n = snprintf(buf, sizeof(buf), "%llu", (unsigned long long)OBJ_TIMEOUT_MAX_MS);
    assert_int_equal(utilParseTimeoutMs(buf, (size_t)n, &v), 0);
    assert_int_equal(v, OBJ_TIMEOUT_MAX_MS);
    n = snprintf(buf, sizeof(buf), "%llu", (unsigned long long)OBJ_TIMEOUT_MAX_MS + 1);
    assert_int_equal(utilParseTimeoutMs(buf, (size_t)n, &v), -1);
    assert_int_equal(utilParseTimeoutMs("9223372036854775807", 19, &v), -1);
    assert_int_equal(utilParseTimeoutMs("-1", 2, &v), -1);
    assert_int_equal(utilParseTimeoutMs("1x", 2, &v), -1);
}

static void testGlobPathologicalPatternsFinishQuickly(void **state)
{
    (void)state;
    enum { LEN = 200000 };
    static char str[LEN + 1];
    memset(str, 'a', LEN);
    static const struct {
        const char *pat;
        int wantAllA;     /* against LEN x 'a' */
        int wantTrailing; /* against LEN x 'a' then 'b' */
    } cases[] = {
        {"a*a*a*a*a*b", 0, 1},
        {"*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*a*b", 0, 1},
        {"a*a*a*a*a*a", 1, 0},
        {"*?*?*?*?*?*?*?*?*?*?c", 0, 0},
        {"[a]*[a]*[a]*[a]*[a]*[b]", 0, 1},
    };
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        size_t patLen = strlen(cases[i].pat);
        str[LEN] = 'b';
        assert_int_equal(utilGlobMatch(cases[i].pat, patLen, str, LEN), cases[i].wantAllA);
        assert_int_equal(utilGlobMatch(cases[i].pat, patLen, str, LEN + 1), cases[i].wantTrailing);
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    /* Linear work is milliseconds; the bound leaves room for sanitizers and Valgrind. */
    if (secs > 5.0)
        fail_msg("pathological globs took %.2f s", secs);
}

/* ---- clocks --------------------------------------------------------------------------- */

static void testWallClockIsMillisecondsSinceTheEpoch(void **state)
{
    (void)state;
    int64_t before = (int64_t)time(NULL) * 1000;
    int64_t ms = utilWallMs();
    int64_t after = (int64_t)time(NULL) * 1000 + 1000;
    assert_true(ms >= before && ms <= after);
}

static void testMonotonicClockNeverGoesBackwards(void **state)
{
    (void)state;
    int64_t prev = utilMonoUs();
    for (int i = 0; i < 100000; i++) {
        int64_t now = utilMonoUs();
        assert_true(now >= prev);
        prev = now;
    }
    struct timespec pause = {.tv_sec = 0, .tv_nsec = 20 * 1000 * 1000};
    int64_t start = utilMonoUs();
    nanosleep(&pause, NULL);
    int64_t waited = utilMonoUs() - start;
    assert_true(waited >= 20000 && waited < 20000 + 5 * 1000 * 1000);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(testParseU64AcceptsPlainDecimals),
        cmocka_unit_test(testParseU64RefusesEverythingElse),
        cmocka_unit_test(testParseU64ReadsOnlyLenBytes),
        cmocka_unit_test(testParseHex64AcceptsSixteenDigitsOfEitherCase),
        cmocka_unit_test(testParseHex64RefusesEverythingElse),
        cmocka_unit_test(testParseHex64ReadsOnlyLenBytes),
        cmocka_unit_test(testParseSizeAcceptsUnitsCaseInsensitively),
        cmocka_unit_test(testParseSizeRefusesEverythingElse),
        cmocka_unit_test(testGlobMatchTable),
        cmocka_unit_test(testGlobMatchesEveryByteValue),
        cmocka_unit_test(testGlobPathologicalPatternsFinishQuickly),
        cmocka_unit_test(testGlobWorkIsCountedAndBounded),
        cmocka_unit_test(testParseTimeoutStopsAtTheMaximum),
        cmocka_unit_test(testWallClockIsMillisecondsSinceTheEpoch),
        cmocka_unit_test(testMonotonicClockNeverGoesBackwards),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
