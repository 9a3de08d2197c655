/*
 * resp.c - incremental parser for Redis requests (resp.h).
 *
 * Two request forms, chosen by the first byte as redis-server does: `*`
 * starts a multibulk request, anything else is an inline command line.
 * Empty requests (`*0`, `*-1`, a blank line) are skipped. The limits and the
 * "Protocol error: ..." texts follow redis-server 7.0's networking.c, with
 * one deliberate difference: at most RESP_MAX_ARGS arguments instead of
 * INT_MAX, so a hostile count cannot make us reserve gigabytes.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "resp.h"

void respParserInit(RespParser *p)
{
    memset(p, 0, sizeof(*p));
    p->bulkLen = -1;
}

void respParserFree(RespParser *p)
{
    free(p->argv);
    free(p->inl);
    respParserInit(p);
}

/* Parse s[0..len) as redis-server's string2ll does: optional '-', digits,
 * no '+', no leading zeros, no overflow. Returns 0 or -1. */
static int respToLL(const char *s, size_t len, long long *out)
{
    unsigned long long v = 0;
    size_t i = 0;
    int neg = 0;

    if (len == 0 || len > 20)
        return -1;
    if (len == 1 && s[0] == '0') {
        *out = 0;
        return 0;
    }
    if (s[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i >= len || s[i] < '1' || s[i] > '9')
        return -1;
    for (; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        unsigned long long d = (unsigned long long)(s[i] - '0');
        if (v > (~0ULL - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (neg) {
        if (v > (unsigned long long)9223372036854775807LL + 1)
            return -1;
        *out = (long long)(0 - v);
    } else {
        if (v > 9223372036854775807ULL)
            return -1;
        *out = (long long)v;
    }
    return 0;
}

static int respFail(RespParser *p, const char *what)
{
    snprintf(p->err, sizeof(p->err), "Protocol error: %s", what);
    return RESP_ERROR;
}

/* Append an argument slot. Returns 0, or -1 when out of memory. */
static int respPushArg(RespParser *p, size_t off, size_t len, size_t hint)
{
    if (p->argc == p->argvCap) {
        size_t cap = p->argvCap ? p->argvCap * 2 : (hint < 1024 ? (hint ? hint : 1) : 1024);
        if (hint > p->argc && cap > hint)
            cap = hint; /* never more than the request announced */
        if (cap <= p->argc)
            cap = p->argc + 1;
        RespArg *a = realloc(p->argv, cap * sizeof(*a));
        if (!a)
            return -1;
        p->argv = a;
        p->argvCap = cap;
    }
    p->argv[p->argc].off = off;
    p->argv[p->argc].len = len;
    p->argc++;
    return 0;
}

/* Append one byte to the inline storage. Returns 0 or -1 (out of memory). */
static int respInlPut(RespParser *p, char c)
{
    if (p->inlLen == p->inlCap) {
        size_t cap = p->inlCap ? p->inlCap * 2 : 256;
        char *n = realloc(p->inl, cap);
        if (!n)
            return -1;
        p->inl = n;
        p->inlCap = cap;
    }
    p->inl[p->inlLen++] = c;
    return 0;
}

static int respHex(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)tolower((unsigned char)c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Split one inline line s[0..len) into arguments with redis-server's
 * quoting rules: "double quotes" know \xHH, \n, \r, \t, \b, \a and \<c>;
 * 'single quotes' know \'; a closing quote must be followed by a blank or
 * the end; a NUL byte ends the line. Returns 0, RESP_ERROR (unbalanced
 * quotes) or RESP_NOMEM. */
static int respSplitInline(RespParser *p, const char *s, size_t len)
{
    const char *nul = memchr(s, '\0', len);
    size_t i = 0;

    if (nul)
        len = (size_t)(nul - s);
    p->inlLen = 0;
    for (;;) {
        while (i < len && isspace((unsigned char)s[i]))
            i++;
        if (i >= len)
            return 0;
        size_t start = p->inlLen;
        int dq = 0, sq = 0, done = 0;
        while (!done) {
            char c = i < len ? s[i] : '\0';
            char out = 0;
            int put = 0;
            if (dq) {
                if (c == '\\' && i + 3 < len && s[i + 1] == 'x' && respHex(s[i + 2]) >= 0 &&
                    respHex(s[i + 3]) >= 0) {
                    out = (char)(respHex(s[i + 2]) * 16 + respHex(s[i + 3]));
                    put = 1;
                    i += 3;
                } else if (c == '\\' && i + 1 < len) {
                    i++;
                    switch (s[i]) {
                        case 'n':
                            out = '\n';
                            break;
                        case 'r':
                            out = '\r';
                            break;
                        case 't':
                            out = '\t';
                            break;
                        case 'b':
                            out = '\b';
                            break;
                        case 'a':
                            out = '\a';
                            break;
                        default:
                            out = s[i];
                    }
                    put = 1;
                } else if (c == '"') {
                    if (i + 1 < len && !isspace((unsigned char)s[i + 1]))
                        return respFail(p, "unbalanced quotes in request");
                    done = 1;
                } else if (i >= len) {
                    return respFail(p, "unbalanced quotes in request");
                } else {
                    out = c;
                    put = 1;
                }
            } else if (sq) {
                if (c == '\\' && i + 1 < len && s[i + 1] == '\'') {
                    i++;
                    out = '\'';
                    put = 1;
                } else if (c == '\'') {
                    if (i + 1 < len && !isspace((unsigned char)s[i + 1]))
                        return respFail(p, "unbalanced quotes in request");
                    done = 1;
                } else if (i >= len) {
                    return respFail(p, "unbalanced quotes in request");
                } else {
                    out = c;
                    put = 1;
                }
            } else if (i >= len || c == ' ' || c == '\n' || c == '\r' || c == '\t') {
                done = 1;
            } else if (c == '"') {
                dq = 1;
            } else if (c == '\'') {
                sq = 1;
            } else {
                out = c;
                put = 1;
            }
            if (put && respInlPut(p, out) == -1)
                return RESP_NOMEM;
            if (i < len)
                i++;
        }
        if (respPushArg(p, start, p->inlLen - start, 0) == -1)
            return RESP_NOMEM;
    }
}

/* One inline request starting at p->pos. Returns RESP_DONE, RESP_MORE,
 * RESP_ERROR or RESP_NOMEM; a blank line is consumed and answers RESP_MORE
 * with p->argc == 0 so that the caller's loop goes on. */
static int respParseInline(RespParser *p, const char *buf, size_t len)
{
    const char *start = buf + p->pos;
    size_t avail = len - p->pos;
    const char *nl = memchr(start, '\n', avail);

    if (!nl) {
        if (avail > RESP_MAX_INLINE)
            return respFail(p, "too big inline request");
        return RESP_MORE;
    }
    size_t lineLen = (size_t)(nl - start);
    size_t eat = lineLen + 1;
    if (lineLen > 0 && start[lineLen - 1] == '\r')
        lineLen--;
    p->argc = 0;
    int rc = respSplitInline(p, start, lineLen);
    if (rc != 0)
        return rc;
    p->pos += eat;
    p->isInline = 1;
    return p->argc ? RESP_DONE : RESP_MORE;
}

/* Find the CR ending a count line that starts at p->pos. Returns its
 * offset, or -1 with *rc set: RESP_MORE (line incomplete) or RESP_ERROR
 * (line longer than RESP_MAX_INLINE; tooBig names the error). Like
 * redis-server, one byte after the CR must be present and is not checked. */
static long respCountLine(RespParser *p, const char *buf, size_t len, const char *tooBig, int *rc)
{
    size_t avail = len - p->pos;
    const char *cr = memchr(buf + p->pos, '\r', avail);

    if (!cr) {
        *rc = avail > RESP_MAX_INLINE ? respFail(p, tooBig) : RESP_MORE;
        return -1;
    }
    if ((size_t)(cr - buf) + 2 > len) {
        *rc = RESP_MORE;
        return -1;
    }
    return (long)(cr - buf);
}

/* Continue a multibulk request (its count already read). Returns
 * RESP_DONE, RESP_MORE, RESP_ERROR or RESP_NOMEM. */
static int respParseBulks(RespParser *p, const char *buf, size_t len, int authRequired)
{
    while (p->want > 0) {
        if (p->bulkLen < 0) {
            int rc;
            long cr = respCountLine(p, buf, len, "too big bulk count string", &rc);
            long long ll;
            if (cr < 0)
                return rc;
            if (buf[p->pos] != '$') {
                char what[48];
                unsigned char got = (unsigned char)buf[p->pos];
                snprintf(what, sizeof(what), "expected '$', got '%c'", isprint(got) ? got : ' ');
                return respFail(p, what);
            }
            if (respToLL(buf + p->pos + 1, (size_t)cr - p->pos - 1, &ll) == -1 || ll < 0 ||
                ll > RESP_MAX_BULK)
                return respFail(p, "invalid bulk length");
            if (authRequired && ll > RESP_UNAUTH_MAX_BULK)
                return respFail(p, "unauthenticated bulk length");
            p->pos = (size_t)cr + 2;
            p->bulkLen = ll;
        }
        if (len - p->pos < (size_t)p->bulkLen + 2)
            return RESP_MORE;
        if (respPushArg(p, p->pos, (size_t)p->bulkLen, (size_t)p->want + p->argc) == -1)
            return RESP_NOMEM;
        p->pos += (size_t)p->bulkLen + 2;
        p->bulkLen = -1;
        p->want--;
    }
    p->inMulti = 0;
    return RESP_DONE;
}

int respParse(RespParser *p, const char *buf, size_t len, int authRequired)
{
    int rc = RESP_MORE;

    p->consumed = 0;
    for (;;) {
        if (p->inMulti) {
            rc = respParseBulks(p, buf, len, authRequired);
            break;
        }
        p->reqStart = p->pos;
        p->argc = 0;
        p->isInline = 0;
        if (p->pos >= len) {
            rc = RESP_MORE;
            break;
        }
        if (buf[p->pos] != '*') {
            size_t before = p->pos;
            rc = respParseInline(p, buf, len);
            if (rc == RESP_MORE && p->pos != before)
                continue; /* a blank line */
            break;
        }
        long long ll;
        long cr = respCountLine(p, buf, len, "too big mbulk count string", &rc);
        if (cr < 0)
            break;
        if (respToLL(buf + p->pos + 1, (size_t)cr - p->pos - 1, &ll) == -1 || ll > RESP_MAX_ARGS)
            return respFail(p, "invalid multibulk length");
        if (authRequired && ll > RESP_UNAUTH_MAX_ARGS)
            return respFail(p, "unauthenticated multibulk length");
        p->pos = (size_t)cr + 2;
        if (ll <= 0)
            continue; /* an empty request */
        p->inMulti = 1;
        p->want = ll;
        p->bulkLen = -1;
    }
    if (rc == RESP_DONE)
        p->consumed = p->pos;
    else if (rc == RESP_MORE)
        p->consumed = p->reqStart;
    return rc;
}

void respParserConsumed(RespParser *p)
{
    size_t n = p->consumed;

    p->pos -= n;
    p->reqStart -= n;
    if (p->inMulti) {
        for (size_t i = 0; i < p->argc; i++)
            p->argv[i].off -= n;
    } else {
        p->argc = 0;
        p->isInline = 0;
    }
    p->consumed = 0;
}

const char *respArg(const RespParser *p, const char *buf, size_t i, size_t *len)
{
    *len = p->argv[i].len;
    return (p->isInline ? p->inl : buf) + p->argv[i].off;
}
