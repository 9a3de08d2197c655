/*
 * resp.h - an incremental parser for Redis requests as they arrive on a byte
 * stream: RESP multibulk (`*N\r\n$len\r\n...`) and inline commands
 * (`SET k "a b"\n`), with the limits and error texts of redis-server 7.0, so
 * that a client sees the same answers over the RDMA front door as over TCP.
 *
 * The caller keeps the stream in one buffer and calls respParse whenever
 * bytes were appended. The parser remembers how far it got, so a request
 * that arrives in many pieces (a 512 MiB bulk, a million arguments) is
 * scanned once, not once per piece. Multibulk arguments are (offset, length)
 * pairs into the caller's buffer: nothing is copied. Inline arguments may
 * contain escapes, so they are unescaped into the parser's own storage.
 * Pure C: no Redis, no I/O; unit-tested by tests/unit/test_resp.c.
 */
#ifndef OBJSTORE_RESP_H
#define OBJSTORE_RESP_H

#include <stddef.h>

#define RESP_MAX_ARGS        (1024 * 1024)         /* arguments of one request */
#define RESP_MAX_BULK        (512LL * 1024 * 1024) /* proto-max-bulk-len */
#define RESP_MAX_INLINE      (64 * 1024)           /* an inline line or a count line */
#define RESP_UNAUTH_MAX_ARGS 10                    /* before AUTH, like redis-server */
#define RESP_UNAUTH_MAX_BULK 16384

/* respParse results. */
#define RESP_MORE  0  /* no complete request yet: append more bytes */
#define RESP_DONE  1  /* p->argc arguments are ready */
#define RESP_ERROR -1 /* protocol error, p->err says which; the stream is unusable */
#define RESP_NOMEM -2 /* out of memory */

typedef struct RespArg {
    size_t off; /* into the caller's buffer, or into the inline storage */
    size_t len;
} RespArg;

typedef struct RespParser {
    /* Filled by respParse. */
    RespArg *argv;
    size_t argc;
    size_t consumed; /* bytes the caller drops from its buffer before the next call */
    int isInline;    /* argv points into the parser's inline storage */
    char err[96];    /* "Protocol error: ..." after RESP_ERROR */
    /* Private state. */
    int inMulti;       /* inside a multibulk request */
    size_t pos;        /* next byte to examine */
    size_t reqStart;   /* first byte of the request being parsed */
    long long want;    /* bulks still expected */
    long long bulkLen; /* length of the next bulk, -1 until its header is read */
    size_t argvCap;
    char *inl; /* unescaped inline arguments */
    size_t inlCap, inlLen;
} RespParser;

void respParserInit(RespParser *p);
/* Free the parser's memory; it may be initialised again. */
void respParserFree(RespParser *p);

/* Parse buf[0..len) from where the last call stopped. authRequired applies
 * the smaller limits redis-server imposes before AUTH. Returns RESP_DONE,
 * RESP_MORE, RESP_ERROR or RESP_NOMEM. After RESP_DONE the arguments are
 * read with respArg; after RESP_DONE or RESP_MORE the caller must drop
 * p->consumed bytes from the front of its buffer (empty requests and the
 * request just returned) and then call respParserConsumed. */
int respParse(RespParser *p, const char *buf, size_t len, int authRequired);
/* The caller dropped p->consumed bytes: rebase the parser on the new buffer
 * start and forget the returned request. Can't fail. */
void respParserConsumed(RespParser *p);
/* Argument i (< p->argc) of the request just returned, given the buffer
 * passed to respParse. */
const char *respArg(const RespParser *p, const char *buf, size_t i, size_t *len);

#endif /* OBJSTORE_RESP_H */
