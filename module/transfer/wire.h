/*
 * wire.h - the messages nodes exchange, identical on every transport.
 *
 * A frame is a 16-byte header followed by `bodyLen` bytes of body. Every
 * integer is little-endian on the wire, whatever the host. Object bytes are
 * NOT part of a body: after a DATA frame the payload (size + metaSize bytes)
 * follows raw on the stream (TCP, or the RDMA stream for small objects), so
 * that it can be received straight into the destination object; a large
 * object on RDMA is read by the requester instead (RNDV).
 *
 * Session: the connecting side sends HELLO (its nonce, name, features); the
 * accepting side answers HELLO with its own nonce and a proof; the
 * connecting side answers AUTH with its proof. Proofs are HMAC-SHA256 under
 * the cluster secret over the whole transcript (see wireProof): both node
 * names, the name the connector dialled, both feature sets, the direction
 * and both nonces. So a node that does not know the secret learns nothing
 * and can ask for nothing, and a proof taken from one session is worth
 * nothing in another (relaying HELLOs between two sessions gets nowhere).
 *
 * Session MAC: from the handshake both sides derive two keys (wireSessionKeys:
 * one per direction, from the secret, the transcript and both proofs). Every
 * frame after the connector's AUTH, in each direction, is followed by a
 * 16-byte tag: AES-256-GMAC under that direction's key over the header and
 * body, with the frame's sequence number (0, 1, ... per direction, never
 * sent) in the IV. A DATA frame whose payload is not empty, and a PART,
 * carry a second tag right after the payload's last byte, over the payload
 * (same sequence number, another IV domain), so that a sender tags the
 * bytes as they go out. So a frame injected, replayed, reordered, dropped
 * or altered by someone on the path fails its tag and closes the
 * connection. The bytes are authenticated, and on TCP encrypted too when
 * either node asks (OBJ_FEAT_ENCRYPT: AES-GCM, same key, IV and tag).
 * Layout and costs: docs/architecture.md, docs/security.md.
 *
 * Decoding validates every field and never reads past the buffer: a frame
 * that fails is a protocol error that closes the connection. Pure C.
 */
#ifndef OBJSTORE_WIRE_H
#define OBJSTORE_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* Version 5: REPL and HELD (a node asks another to hold a counted copy),
 * and the error codes they answer with. Version 4: a payload's tag follows
 * the payload (version 3 put it before, which made the sender pass over the
 * whole payload before its first byte went out); payloads may be encrypted
 * (OBJ_FEAT_ENCRYPT). Version 3 added the session MAC, version 2 the proof
 * over the transcript. */
#define OBJ_WIRE_MAGIC    0x4F424A53u /* "OBJS" */
#define OBJ_WIRE_VERSION  5
#define OBJ_WIRE_HDR_LEN  16
#define OBJ_WIRE_MAX_BODY 4096 /* bodies are small: ids, names, error texts */
#define OBJ_WIRE_NONCE    16
#define OBJ_WIRE_PROOF    32
#define OBJ_WIRE_NAME_MAX 128
#define OBJ_WIRE_ID_MAX   512
#define OBJ_WIRE_TEXT_MAX 256
#define OBJ_WIRE_SIZE_MAX (1ULL << 48) /* size and metaSize in DATA/RNDV, each */
#define OBJ_WIRE_MAC      16           /* a session tag (AES-256-GMAC) */
#define OBJ_WIRE_KEY      32           /* a session key, one per direction */
#define OBJ_WIRE_WANT_MAX 16           /* REPL: the most copies an object may want */
/* The most a sealed frame takes: header, body and its tag. */
#define OBJ_WIRE_FRAME_MAX (OBJ_WIRE_HDR_LEN + OBJ_WIRE_MAX_BODY + OBJ_WIRE_MAC)

/* Feature bits in HELLO. */
#define OBJ_FEAT_TCP  (1u << 0)
#define OBJ_FEAT_RDMA (1u << 1)
/* The node asks for encrypted payloads on TCP (transfer-encrypt yes): a
 * session either side asks it of encrypts its TCP payloads both ways. */
#define OBJ_FEAT_ENCRYPT (1u << 2)

typedef enum WireType {
    WIRE_HELLO = 1, /* magic, version, features, nonce, proof (acceptor only), name */
    WIRE_AUTH = 2,  /* proof */
    WIRE_FETCH = 3, /* id; reqId (non-zero) names the request */
    WIRE_DATA = 4,  /* size, metaSize, checksum; payload follows (inline) */
    WIRE_RNDV = 5,  /* size, metaSize, checksum, addr, rkey: read it yourself */
    WIRE_DONE = 6,  /* requester finished reading reqId: release the pin */
    WIRE_ERROR = 7, /* code, text: reqId failed (or the session, if reqId is 0) */
    /* 8 and 11 were the RDMA slot ring's CREDIT and RING: no longer valid */
    WIRE_PING = 9,
    WIRE_PONG = 10,
    /* FETCH of the bytes from an offset on (resuming), which may be refused
     * BUSY when the holder's upload slots are taken (flag WIRE_FETCHR_BUSY_OK):
     * offset, flags, id; answered like FETCH, DATA's payload then being the
     * object's bytes from offset to its end. */
    WIRE_FETCHR = 12,
    /* A relay's answer to a FETCHR with PARTIAL_OK for an object it is still
     * receiving: size, metaSize, checksum (the owner's), offset, len; len
     * bytes of the object from offset follow, all of them landed at the
     * relay. A stream of them answers one request: each starts where the
     * one before ended, up to the object's end, unless an ERROR ends it
     * (the requester's DONE stops it). */
    WIRE_PART = 13,
    /* A range rendezvous, the RDMA answer to a FETCHR with an offset or with
     * PARTIAL_OK: size, metaSize, checksum (the owner's), offset, len, addr,
     * rkey. Read len bytes of the object from offset at (addr, rkey), then
     * send DONE; nothing follows in the stream. A relay's key opens only
     * bytes that have landed there. The requester asks again for the rest. */
    WIRE_RPART = 14,
    /* Hold a counted copy of an object (replicas, repair, drain): flags
     * (WIRE_REPL_*), want (1..OBJ_WIRE_WANT_MAX), checksum (the generation
     * asked for), id. The receiver fetches it the ordinary way unless it
     * holds it already, and answers HELD, or ERROR with the same reqId. */
    WIRE_REPL = 15,
    WIRE_HELD = 16, /* checksum: the copy asked for by REPL reqId is held here */
    WIRE_TYPE_MAX = 16
} WireType;

/* FETCHR flags. */
#define WIRE_FETCHR_BUSY_OK    (1u << 0) /* the requester may go elsewhere or come back */
#define WIRE_FETCHR_PARTIAL_OK (1u << 1) /* ... and takes what a relay has landed (PART) */
#define WIRE_FETCHR_FLAGS      (WIRE_FETCHR_BUSY_OK | WIRE_FETCHR_PARTIAL_OK)

/* REPL flags. */
#define WIRE_REPL_PROTECT 1u /* the copy counts toward want (never evicted) */
#define WIRE_REPL_OWN     2u /* the receiver takes ownership from the asker (drain) */
#define WIRE_REPL_FLAGS   (WIRE_REPL_PROTECT | WIRE_REPL_OWN)

/* Error codes carried by WIRE_ERROR (same words as the command errors). */
typedef enum WireErr {
    WIRE_ERR_NOTFOUND = 1,
    WIRE_ERR_NOTSEALED = 2,
    WIRE_ERR_OOM = 3,
    WIRE_ERR_AUTH = 4,
    WIRE_ERR_PROTO = 5,
    WIRE_ERR_INTERNAL = 6,
    /* the connection holds as many pins as it may, or (FETCHR with BUSY_OK)
     * every upload slot of the node is taken: ask another holder */
    WIRE_ERR_BUSY = 7,
    /* Version 5, for REPL's answers: the command error words they carry. */
    WIRE_ERR_WRONGSTATE = 8,
    WIRE_ERR_NOTSUPPORTED = 9,
    WIRE_ERR_UNAVAILABLE = 10,
    WIRE_ERR_TIMEOUT = 11,
    WIRE_ERR_CHECKSUM = 12,
    WIRE_ERR_DRAINING = 13, /* the node is draining: it takes no new copies */
    WIRE_ERR_MAX = 13
} WireErr;

typedef struct WireHdr {
    uint8_t type;      /* WireType */
    uint8_t flags;     /* must be 0 in version 1 */
    uint16_t reserved; /* 0 when sent (was the slot ring's credits); not checked */
    uint32_t bodyLen;  /* <= OBJ_WIRE_MAX_BODY */
    uint64_t reqId;
} WireHdr;

/* A decoded message. Pointers point into the decoded buffer (no copies). */
typedef struct WireMsg {
    WireHdr h;
    union {
        struct {
            uint32_t magic;
            uint16_t version;
            uint16_t features;
            uint8_t nonce[OBJ_WIRE_NONCE];
            uint8_t proof[OBJ_WIRE_PROOF]; /* all zero from the connecting side */
            const char *name;
            uint16_t nameLen; /* 1..OBJ_WIRE_NAME_MAX */
        } hello;
        struct {
            uint8_t proof[OBJ_WIRE_PROOF];
        } auth;
        struct {
            const char *id;
            uint16_t idLen;  /* 1..OBJ_WIRE_ID_MAX */
            uint64_t offset; /* FETCHR only: at most OBJ_WIRE_SIZE_MAX * 2 */
            uint32_t flags;  /* FETCHR only: WIRE_FETCHR_* */
        } fetch;
        struct {
            uint64_t size, metaSize, checksum;
            uint64_t addr; /* RNDV and RPART only */
            uint32_t rkey; /* RNDV and RPART only */
            uint64_t offset,
                len; /* PART and RPART only: len >= 1, offset + len <= size + metaSize */
        } data;
        struct {
            uint32_t flags;    /* WIRE_REPL_* */
            uint32_t want;     /* 1..OBJ_WIRE_WANT_MAX */
            uint64_t checksum; /* the generation asked for */
            const char *id;
            uint16_t idLen; /* 1..OBJ_WIRE_ID_MAX */
        } repl;
        struct {
            uint64_t checksum;
        } held;
        struct {
            uint16_t code; /* WireErr */
            const char *text;
            uint16_t textLen; /* 0..OBJ_WIRE_TEXT_MAX */
        } error;
    } u;
} WireMsg;

/* Decode a header from exactly OBJ_WIRE_HDR_LEN bytes. Returns 0, or -1 with
 * a static reason in *why (unknown type, non-zero flags, body too long, a
 * body length no message of that type can have, reqId 0 on FETCH, FETCHR,
 * DATA, RNDV, PART, RPART, DONE, REPL or HELD). Checking the length per type here means a reader
 * never waits for a body that cannot be valid. why may be NULL. */
int wireDecodeHdr(const uint8_t *buf, WireHdr *h, const char **why);
/* Decode the body of a message whose header is m->h (already decoded) from
 * exactly m->h.bodyLen bytes (body may be NULL if that is 0). Returns 0, or
 * -1 with a static reason in *why; m->u is zeroed first, so fields a type
 * does not carry read 0. On failure m->u may be partly filled; after a HELLO
 * version error m->u.hello.version is the peer's version, for the log. */
int wireDecodeBody(const uint8_t *body, WireMsg *m, const char **why);
/* Encode m (header + body) into buf of cap bytes; sets m->h.bodyLen.
 * A HELLO whose magic or version is 0 gets OBJ_WIRE_MAGIC / OBJ_WIRE_VERSION
 * (written back into m); any other value is refused. Encode accepts exactly
 * what the decoders accept. name/id/text may still point where decoding
 * this same buf left them (re-encoding in place is safe). Returns the
 * frame length, or -1 if it does not fit or a field is out of range (which
 * is a bug in the caller). */
int wireEncode(WireMsg *m, uint8_t *buf, size_t cap);

/* Which side a proof speaks for: the two proofs of a session differ, so one
 * side cannot replay the other's. */
typedef enum WireRole { WIRE_ROLE_ACCEPTOR = 1, WIRE_ROLE_CONNECTOR = 2 } WireRole;

/* What a proof covers: the handshake as both sides see it. Names are C
 * strings of 1..OBJ_WIRE_NAME_MAX bytes. The acceptor, which cannot see
 * what the connector dialled, puts its own name as dialled: a connector
 * that dialled someone else then computes another transcript. Features are
 * the HELLO fields as sent, unknown bits included. */
typedef struct WireTranscript {
    const char *connector; /* the connecting node's name (its HELLO) */
    const char *acceptor;  /* the accepting node's name (its HELLO) */
    const char *dialled;   /* the name the connector looked up and dialled */
    uint16_t connectorFeatures, acceptorFeatures;
    const uint8_t *nonceConnector, *nonceAcceptor; /* OBJ_WIRE_NONCE bytes each */
} WireTranscript;

/* proof = HMAC-SHA256(secret, label || role || connector || acceptor ||
 * dialled || connectorFeatures || acceptorFeatures || nonceConnector ||
 * nonceAcceptor), where label is "objstore-proof-v2", role one byte, each
 * name preceded by its length (u16 little-endian) and features u16
 * little-endian: every field has a fixed place, so no two transcripts give
 * the same message. secret may be empty (secretLen 0, secret NULL or not).
 * Can't fail: should libcrypto fail, or t, a name or a nonce be NULL, a name
 * be empty or longer than OBJ_WIRE_NAME_MAX, or role not a WireRole, out
 * gets random bytes, which match no proof, so authentication fails closed. */
void wireProof(const char *secret, size_t secretLen, WireRole role, const WireTranscript *t,
               uint8_t out[OBJ_WIRE_PROOF]);
/* Constant-time comparison of two proofs; 1 if equal. */
int wireProofEqual(const uint8_t a[OBJ_WIRE_PROOF], const uint8_t b[OBJ_WIRE_PROOF]);

/* The session keys of a handshake: c2a for what the connector sends, a2c
 * for what the acceptor sends; HMAC-SHA256(secret, label || direction ||
 * transcript (as wireProof) || proofAcceptor || proofConnector). Returns 0,
 * or -1 (libcrypto failed, or t is not a valid transcript). */
int wireSessionKeys(const char *secret, size_t secretLen, const WireTranscript *t,
                    const uint8_t proofAcceptor[OBJ_WIRE_PROOF],
                    const uint8_t proofConnector[OBJ_WIRE_PROOF], uint8_t c2a[OBJ_WIRE_KEY],
                    uint8_t a2c[OBJ_WIRE_KEY]);

/* One direction of an authenticated session: its key (in cipher contexts)
 * and the sequence number of its next frame. */
typedef struct WireMac WireMac;
/* What a direction does to payloads besides their tag: nothing (GMAC over
 * them), or AES-GCM encryption (the sending direction) or decryption (the
 * receiving one) with the same key, IV and tag (transfer-encrypt). */
typedef enum WireCrypt {
    WIRE_CRYPT_NONE = 0,
    WIRE_CRYPT_ENCRYPT = 1,
    WIRE_CRYPT_DECRYPT = 2
} WireCrypt;
/* A direction keyed with key, at sequence 0, payloads tagged only. Returns
 * NULL when libcrypto cannot set it up (or out of memory). */
WireMac *wireMacNew(const uint8_t key[OBJ_WIRE_KEY]);
/* From the next payload on, payloads are encrypted (a sending direction)
 * or decrypted (a receiving one) under key, the key w was made with.
 * Returns 0, or -1 (libcrypto failed; w is unchanged). */
int wireMacSetEncrypt(WireMac *w, const uint8_t key[OBJ_WIRE_KEY], WireCrypt crypt);
/* What w does to payloads; NULL: WIRE_CRYPT_NONE. */
WireCrypt wireMacCrypt(const WireMac *w);
void wireMacFree(WireMac *w); /* NULL is fine */
/* The tag of the next frame (len bytes: header and body); the sequence
 * number moves on. Returns 0, or -1 (libcrypto failed: treat as a mismatch). */
int wireMacFrame(WireMac *w, const uint8_t *frame, size_t len, uint8_t tag[OBJ_WIRE_MAC]);
/* A payload's tag, over its bytes given piece by piece in order: begin
 * (with the sequence number of the frame it follows, or of the frame just
 * tagged), then for each piece update (tagged only) or crypt (encrypted or
 * decrypted into out, which may be in; tagged only when w does neither),
 * then end (the sender's tag) or check (the receiver's: 0 when tag is the
 * payload's). A payload is under way in one direction at a time; frames may
 * be tagged meanwhile. Each returns 0, or -1 (libcrypto failed, or the
 * check failed; end then gives a tag that matches nothing). */
int wireMacPayloadBeginAt(WireMac *w, uint64_t seq);
int wireMacPayloadBegin(WireMac *w);
int wireMacPayloadUpdate(WireMac *w, const void *p, size_t n);
int wireMacPayloadCrypt(WireMac *w, const void *in, void *out, size_t n);
int wireMacPayloadEnd(WireMac *w, uint8_t tag[OBJ_WIRE_MAC]);
int wireMacPayloadCheck(WireMac *w, const uint8_t tag[OBJ_WIRE_MAC]);
/* The whole payload's tag at once (begin at seq, update, end), for senders
 * of small payloads that do not encrypt. Returns 0 or -1 as end. */
int wireMacPayloadTag(WireMac *w, uint64_t seq, const void *p, size_t n, uint8_t tag[OBJ_WIRE_MAC]);
/* Seal the frame of len bytes at buf (cap bytes of room) for sending under
 * w: append its tag; cap need only hold what is added. *paySeq is the
 * sequence number the payload's tag goes by when the frame announces a
 * tagged payload (a DATA frame whose sizes are not both 0, a PART), else
 * -1: that tag follows the payload's last byte. w NULL (no session yet):
 * nothing is added. Returns the new length, or -1 (no room, len not a
 * whole frame, or libcrypto failed). */
int wireSeal(WireMac *w, uint8_t *buf, size_t cap, int len, int64_t *paySeq);
/* In a session, is the payload that follows the decoded frame m followed
 * by its tag (as wireSeal decides)? */
int wirePayloadTagged(const WireMsg *m);
/* Constant-time comparison of two tags; 1 if equal. */
int wireMacEqual(const uint8_t a[OBJ_WIRE_MAC], const uint8_t b[OBJ_WIRE_MAC]);

const char *wireTypeName(int type);
const char *wireErrName(int code); /* "NOTFOUND", ... */
/* The WireErr whose name is the len bytes at word, or 0 when none is. */
int wireErrByName(const char *word, size_t len);

#endif /* OBJSTORE_WIRE_H */
