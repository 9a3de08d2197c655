/*
 * util.c - strict argument parsing, glob matching and clocks (see util.h).
 * Parsing is strict on purpose: a command must refuse "12abc" or "-1"
 * rather than act on a guess, so that bad input never changes state.
 */
#include "util.h"

#include <ctype.h>
#include <time.h>

int utilParseU64(const char *s, size_t len, uint64_t *out)
{
    uint64_t v = 0;

    if (len == 0 || len > 19)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v > (uint64_t)INT64_MAX)
        return -1;
    *out = v;
    return 0;
}

int utilParseTimeoutMs(const char *s, size_t len, uint64_t *out)
{
    uint64_t v;

    if (utilParseU64(s, len, &v) == -1 || v > OBJ_TIMEOUT_MAX_MS)
        return -1;
    *out = v;
    return 0;
}

int utilParseHex64(const char *s, size_t len, uint64_t *out)
{
    uint64_t v = 0;

    if (len != 16)
        return -1;
    for (size_t i = 0; i < len; i++) {
        unsigned d;
        if (s[i] >= '0' && s[i] <= '9')
            d = (unsigned)(s[i] - '0');
        else if (s[i] >= 'a' && s[i] <= 'f')
            d = (unsigned)(s[i] - 'a' + 10);
        else if (s[i] >= 'A' && s[i] <= 'F')
            d = (unsigned)(s[i] - 'A' + 10);
        else
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

int utilParseSize(const char *s, size_t len, uint64_t *out)
{
    size_t digits = 0;
    uint64_t v, mul = 1;

    while (digits < len && isdigit((unsigned char)s[digits]))
        digits++;
    if (utilParseU64(s, digits, &v) == -1)
        return -1;
    size_t rest = len - digits;
    const char *u = s + digits;
    if (rest == 2 && (u[1] == 'b' || u[1] == 'B') && u[0] != 'b' && u[0] != 'B')
        rest = 1; /* "kb" == "k" (but "bb" is nothing) */
    if (rest == 1) {
        switch (tolower((unsigned char)u[0])) {
            case 'b':
                mul = 1;
                break;
            case 'k':
                mul = 1ULL << 10;
                break;
            case 'm':
                mul = 1ULL << 20;
                break;
            case 'g':
                mul = 1ULL << 30;
                break;
            case 't':
                mul = 1ULL << 40;
                break;
            default:
                return -1;
        }
    } else if (rest != 0) {
        return -1;
    }
    if (v != 0 && mul > (uint64_t)INT64_MAX / v)
        return -1;
    *out = v * mul;
    return 0;
}

/* Match one bracket class at pat[*pi] (just after '['); advances *pi past ']'.
 * Returns 1 if c is in the class. An unterminated class matches nothing. */
static int globClass(const char *pat, size_t patLen, size_t *pi, unsigned char c, uint64_t *work)
{
    size_t i = *pi;
    int negate = 0, match = 0;

    if (i < patLen && pat[i] == '^') {
        negate = 1;
        i++;
    }
    while (i < patLen && pat[i] != ']') {
        if (pat[i] == '\\' && i + 1 < patLen) {
            i++;
            if ((unsigned char)pat[i] == c)
                match = 1;
        } else if (i + 2 < patLen && pat[i + 1] == '-' && pat[i + 2] != ']') {
            unsigned char lo = (unsigned char)pat[i], hi = (unsigned char)pat[i + 2];
            if (lo > hi) {
                unsigned char t = lo;
                lo = hi;
                hi = t;
            }
            if (c >= lo && c <= hi)
                match = 1;
            i += 2;
        } else if ((unsigned char)pat[i] == c) {
            match = 1;
        }
        i++;
    }
    *work += i - *pi;
    if (i >= patLen)
        return 0;
    *pi = i + 1;
    return negate ? !match : match;
}

/* Iterative glob with single-star backtracking: never recursive, so a hostile
 * pattern cannot blow the stack; each restart after a star walks the pattern
 * once, so the cost is bounded by (strLen + 1) restarts of patLen + strLen. */
int utilGlobMatchCounted(const char *pat, size_t patLen, const char *str, size_t strLen,
                         uint64_t *work)
{
    size_t p = 0, s = 0, starP = (size_t)-1, starS = 0;

    while (s < strLen) {
        (*work)++;
        if (p < patLen && pat[p] == '*') {
            starP = ++p;
            starS = s;
            continue;
        }
        if (p < patLen) {
            size_t np = p + 1;
            int ok;
            if (pat[p] == '?') {
                ok = 1;
            } else if (pat[p] == '[') {
                ok = globClass(pat, patLen, &np, (unsigned char)str[s], work);
            } else if (pat[p] == '\\' && p + 1 < patLen) {
                ok = pat[p + 1] == str[s];
                np = p + 2;
            } else {
                ok = pat[p] == str[s];
            }
            if (ok) {
                p = np;
                s++;
                continue;
            }
        }
        if (starP == (size_t)-1)
            return 0;
        p = starP;
        s = ++starS;
    }
    while (p < patLen && pat[p] == '*')
        p++;
    return p == patLen;
}

int utilGlobMatch(const char *pat, size_t patLen, const char *str, size_t strLen)
{
    uint64_t work = 0;

    return utilGlobMatchCounted(pat, patLen, str, strLen, &work);
}

int64_t utilWallMs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t utilMonoUs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
