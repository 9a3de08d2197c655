/*
 * errwords.h - the code words that start objstore's error replies: the one
 * list of them. The module builds its error replies from it
 * (module/redis/reply.c), the C client maps a reply's first word onto
 * ObjErr with it (client/objstore.c), the Python extension hands it to the
 * package as ERROR_WORDS, its table of exception classes
 * (client/python/src/errors.c), and `make lint`
 * (tests/lint/check_errwords.py) checks the README, docs/commands.md, the
 * Python classes and the error texts the module's lower layers write out by
 * hand against it.
 */
#ifndef OBJSTORE_ERRWORDS_H
#define OBJSTORE_ERRWORDS_H

/*
 * X(word, code, pyClass, origin, meaning), one line a word:
 *   word     what the error reply starts with;
 *   code     the C client's ObjErr for it (client/objstore.h; OBJ_ERR_OTHER
 *            for a word without a code of its own);
 *   pyClass  the Python client's exception class (ObjstoreError, the base,
 *            for a word without a class of its own);
 *   origin   NODE: a node answers it (the README and docs/commands.md list
 *            it); SERVER: Redis itself answers it (authentication);
 *            CLIENT: a client raises it, no node sends it;
 *   meaning  one line, for a reader of this list.
 * New words go at the end of their group; a new ObjErr goes at the end of
 * the enum (the library's ABI).
 */
#define OBJ_ERR_WORDS(X)                                                                           \
    X(BADARG, OBJ_ERR_BADARG, BadArgument, NODE, "an argument is malformed or out of range")       \
    X(NOTFOUND, OBJ_ERR_NOTFOUND, ObjectNotFound, NODE, "no such object, version or node")         \
    X(EXISTS, OBJ_ERR_EXISTS, ObjectExists, NODE, "the id (or version) is taken")                  \
    X(OOM, OBJ_ERR_OOM, OutOfMemory, NODE,                                                         \
      "the arena is full, max-objects is reached, or memory ran out")                              \
    X(NOTSEALED, OBJ_ERR_NOTSEALED, NotSealed, NODE, "the object is still being created")          \
    X(WRONGSTATE, OBJ_ERR_WRONGSTATE, WrongState, NODE,                                            \
      "not allowed in the object's state, not this connection's object, or a wait inside MULTI "   \
      "or a script")                                                                               \
    X(TIMEOUT, OBJ_ERR_TIMEOUT, Timeout, NODE, "the wait ran out")                                 \
    X(TRYAGAIN, OBJ_ERR_OTHER, ObjstoreError, NODE,                                                \
      "the object moved to the spill tier between a wait's end and its reply: ask again")          \
    X(IOERR, OBJ_ERR_OTHER, ObjstoreError, NODE, "a spilled object's file cannot be read back")    \
    X(CHECKSUM, OBJ_ERR_CHECKSUM, ChecksumMismatch, NODE,                                          \
      "a fetched copy, or a spilled object read back, does not match its checksum")                \
    X(NOPERM, OBJ_ERR_AUTH, AuthError, NODE, "the user's ACL does not let it name this id")        \
    X(UNAVAILABLE, OBJ_ERR_UNAVAILABLE, Unavailable, NODE,                                         \
      "the directory or a peer node cannot be reached")                                            \
    X(NOTSUPPORTED, OBJ_ERR_NOTSUPPORTED, NotSupported, NODE,                                      \
      "the node cannot do it, e.g. VIA rdma where RDMA is impossible")                             \
    X(BUSY, OBJ_ERR_BUSY, Busy, NODE, "OBJ.FETCH: every holder's upload slots are taken")          \
    X(PROTOCOL, OBJ_ERR_OTHER, ObjstoreError, NODE,                                                \
      "OBJ.FETCH: a peer offered another object or range than asked for")                          \
    X(PROTO, OBJ_ERR_OTHER, ObjstoreError, NODE,                                                   \
      "OBJ.FETCH: a peer refused the request as malformed (e.g. an offset past the end)")          \
    X(INTERNAL, OBJ_ERR_OTHER, ObjstoreError, NODE,                                                \
      "OBJ.FETCH: a peer could not serve the object (out of memory, a spill read failed)")         \
    X(DRAINING, OBJ_ERR_DRAINING, NodeDraining, NODE,                                              \
      "the node is draining (OBJ.DRAIN): it takes no new objects or copies")                       \
    X(NOAUTH, OBJ_ERR_AUTH, AuthError, SERVER, "the connection has not authenticated")             \
    X(WRONGPASS, OBJ_ERR_AUTH, AuthError, SERVER, "wrong user name or password")                   \
    X(BADMETA, OBJ_ERR_OTHER, BadMetadata, CLIENT,                                                 \
      "an object's metadata describes a layout the object cannot hold (Python client)")

/* One constant a word, OBJ_EW_<word>, in the order of the list. */
typedef enum ObjErrWord {
#define OBJ_ERR_WORD_ENUM(word, code, pyClass, origin, meaning) OBJ_EW_##word,
    OBJ_ERR_WORDS(OBJ_ERR_WORD_ENUM)
#undef OBJ_ERR_WORD_ENUM
        OBJ_EW_COUNT
} ObjErrWord;

#endif /* OBJSTORE_ERRWORDS_H */
