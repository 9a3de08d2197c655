/*
 * framer.h - the receiving half of a stream transport without the stream:
 * bytes in, events out. A Framer turns the bytes of one connection, however
 * they were cut by the reads that brought them, into a sequence of events:
 * a whole decoded frame, or "the payload that followed a frame is complete".
 * After a frame, its receiver says where the payload that follows it goes
 * (framerExpectPayload: a destination of exactly its length, or nowhere),
 * and may later give that destination up (framerDiscardPayload: the rest is
 * read and thrown away, the stream stays in step).
 *
 * The framer does no I/O, holds no lock and calls nothing: the transport
 * asks it where the next bytes should go (framerReadSpace: its own buffer,
 * or straight into the payload's destination, or anywhere when they are to
 * be thrown away), reads, reports how many arrived (framerWrote), then
 * takes events (framerNext) until it answers FRAMER_MORE. Payload bytes are
 * never written past the destination's length, and a frame that does not
 * decode is an error that stays: the connection is beyond repair.
 *
 * In an authenticated session (framerSetMac) every frame is followed by its
 * tag, and a DATA or PART payload by the payload's tag (wire.h): a frame is
 * delivered only once its tag checked out, a payload's end only once the
 * bytes that landed in its destination did (an encrypted session's are
 * decrypted in place as they land). A payload thrown away is not checked
 * (nothing reads it), but its tag is still taken from the stream.
 *
 * Pure C: usable (and fuzzed) without sockets, threads or the engine.
 */
#ifndef OBJSTORE_FRAMER_H
#define OBJSTORE_FRAMER_H

#include <stddef.h>
#include <stdint.h>
#include <xxhash.h>

#include "wire.h"

/* A whole largest frame, and room for the start of what follows it. */
#define FRAMER_BUF (OBJ_WIRE_HDR_LEN + OBJ_WIRE_MAX_BODY + 4096)
/* The most payload read straight into its destination at once: small
 * enough that the piece is still in the cache when it is checked. */
#define FRAMER_PIECE (256u << 10)

typedef enum FramerEvent {
    FRAMER_MORE = 0,     /* nothing whole is buffered: read more */
    FRAMER_FRAME,        /* a frame decoded into *m */
    FRAMER_PAYLOAD_DONE, /* the payload framerExpectPayload announced is complete */
    FRAMER_ERROR         /* a frame did not decode; *why says why (for good) */
} FramerEvent;

/* One connection's receive state. Embed it; framerInit before use. */
typedef struct Framer {
    uint8_t buf[FRAMER_BUF];
    size_t start, end;  /* buffered and not yet consumed: buf[start, end) */
    int inPayload;      /* payload bytes are due (or due to be reported done) */
    uint8_t *payDst;    /* where the next payload byte goes; NULL: thrown away */
    size_t payLeft;     /* payload bytes still due */
    int spaceDirect;    /* the last framerReadSpace named the payload, not buf */
    size_t spaceCap;    /* what the last framerReadSpace allowed */
    int spaceOpen;      /* ... and framerWrote has not yet used it */
    const char *failed; /* after FRAMER_ERROR: the reason, returned ever after */
    XXH3_state_t *hash; /* checksum of the payload as it lands (made at first use) */
    int hashing;        /* the payload being received is hashed whole */
    int hashReady;      /* lastHash is the finished payload's checksum */
    uint64_t lastHash;
    WireMac *mac;  /* the session's receiving direction; NULL: none yet */
    int payTagDue; /* the frame just delivered announced a tagged payload */
    int tagDue;    /* the payload due is followed by its tag */
    int payMacing; /* the payload being received is being checked (and decrypted) */
} Framer;

/* An empty framer waiting for a frame. Can't fail. */
void framerInit(Framer *f);
/* Release what the framer allocated (its checksum state). Can't fail. */
void framerDestroy(Framer *f);

/* From the next frame on, frames (and payloads) are tagged under mac (not
 * owned: the caller frees it, after the framer's last use). NULL: none
 * (before the handshake ends). Can't fail. */
void framerSetMac(Framer *f, WireMac *mac);

/* Where the next bytes of the stream go: returns how many may be written
 * at *dst, and *dst, which is NULL when they are to be thrown away (read
 * them anywhere, at most that many). Straight into the payload's
 * destination (at most FRAMER_PIECE) only when nothing is buffered; otherwise into the framer's
 * own buffer (then framerNext copies them on). Returns 0 when the buffer is
 * full, which happens only when whole frames are left unconsumed. */
size_t framerReadSpace(Framer *f, uint8_t **dst);
/* n bytes were written where the last framerReadSpace said. Returns 0, or
 * -1 (nothing changes) when n exceeds what it allowed or none was asked. */
int framerWrote(Framer *f, size_t n);

/* The next event from what is buffered. FRAMER_FRAME fills *m, whose
 * pointers refer to the framer's buffer until the next framerReadSpace.
 * FRAMER_ERROR sets *why (a static string) and repeats on every later call:
 * a frame that does not decode, or whose tag (or payload's tag) is wrong.
 * why may be NULL. */
FramerEvent framerNext(Framer *f, WireMsg *m, const char **why);

/* Right after a FRAMER_FRAME: the next len bytes of the stream are that
 * frame's payload, for dst (len bytes, valid until FRAMER_PAYLOAD_DONE or
 * framerDiscardPayload), or thrown away if dst is NULL. len 0 is reported
 * done at once. Returns 0, or -1 when a payload is already due.
 * A payload with a destination is checksummed (XXH3-64, as
 * store/checksum.h) piece by piece as it lands, while its bytes are still
 * in the cache: framerPayloadHash gives the result at its end. */
int framerExpectPayload(Framer *f, void *dst, size_t len);
/* After FRAMER_PAYLOAD_DONE: the XXH3-64 of the payload's bytes as they
 * were written to its destination. Returns 0 with *sum, or -1 when there is
 * none (the payload was discarded or had no destination, or the hash state
 * could not be allocated: compute it from the destination instead). */
int framerPayloadHash(const Framer *f, uint64_t *sum);
/* The destination of the payload being received is no longer valid: the
 * rest of it is thrown away, FRAMER_PAYLOAD_DONE still comes at its end.
 * Harmless when no payload is due. */
void framerDiscardPayload(Framer *f);

/* Payload bytes still due: not yet written to the destination (0 when no
 * payload is due). Can't fail. */
size_t framerPayloadLeft(const Framer *f);
/* Is a payload due (or its end not yet reported)? */
int framerInPayload(const Framer *f);
/* Is a whole header buffered with no payload due, so that framerNext would
 * decode a frame or fail (the point where a busy transport stops)? */
int framerFrameWaiting(const Framer *f);

#endif /* OBJSTORE_FRAMER_H */
