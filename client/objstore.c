/*
 * objstore.c - the C client library for the objstore module (see objstore.h).
 *
 * Every call is one synchronous OBJ.* command over a hiredis connection,
 * sent with redisCommandArgv so ids, data and metadata are binary-safe. The
 * zero-copy calls (create, pin) additionally need the node's shared-memory
 * arena: on the first such call the library asks OBJ.STATS for the arena
 * file, maps all of it MAP_SHARED, and from then on turns the offsets the
 * server answers into pointers, after checking that they lie inside the
 * mapping. Copying put/get never map anything, so they work from any
 * machine.
 *
 * Transports: hiredis (TCP, unix socket) here, or another one plugged in
 * through objclient_int.h (objstore_rdma.c: Redis protocol over RDMA).
 * Every command goes through clientCall, the only place that tells them
 * apart; keeping RDMA in its own file means a program that never calls
 * objClientConnectRdma links the static library without the RDMA libraries.
 *
 * Errors: a server error reply starts with an uppercase code word that is
 * mapped onto ObjErr, and the whole reply text is kept for objClientErrMsg();
 * hiredis failures become OBJ_ERR_IO. Every call clears the previous error
 * when it succeeds. A context is not thread-safe: use one per thread. As with
 * hiredis, a program that must survive a node vanishing mid-write should
 * ignore SIGPIPE; the library leaves signal dispositions to the program.
 */
#include "objstore.h"
#include "objalloc.h"
#include "objclient_int.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "common/errwords.h"
#include "common/util.h"

#define OBJ_CLIENT_ERRSTR_LEN 512
#define OBJ_CLIENT_MAX_ARGS   8

/* Commands of one pipelined OBJ.RELEASE batch, at most (a longer one is sent in chunks). */
#define OBJ_CLIENT_RELEASE_BATCH 128

/*
 * One id the pin cache holds pinned on the server (exactly one server pin per
 * entry, whatever the program's count). In the hash chain always; in the
 * idle list (oldest first) while users is 0.
 */
typedef struct PinEntry {
    struct PinEntry *hashNext;
    struct PinEntry *idlePrev, *idleNext;
    ObjBuffer view; /* what OBJ.PIN answered, checked against the mapping */
    size_t users;   /* the program's pins of this entry not yet released */
    int stale;      /* deleted through this client: never served again */
    uint64_t hash;
    size_t idLen;
    unsigned char id[]; /* idLen bytes */
} PinEntry;

/* The client-side pin cache: a chained hash of entries plus the idle list. */
typedef struct PinCache {
    PinEntry **buckets;
    size_t nbuckets; /* a power of two; 0 until the first entry */
    size_t count;    /* entries, stale ones included */
    PinEntry *idleHead, *idleTail;
    size_t idle;
    size_t maxIdle; /* 0: off */
    uint64_t hits, misses, batches, released;
} PinCache;

/* One connection to one node, and that node's arena once it is mapped. */
struct ObjClient {
    redisContext *rc; /* hiredis; NULL with a transport, or when hiredis could not allocate it */
    const ObjClientTransport *tr; /* another transport (RDMA), or NULL */
    void *conn;                   /* its connection */
    ObjErr err;                   /* OBJ_OK after every successful call */
    char errstr[OBJ_CLIENT_ERRSTR_LEN];

    /* The arena: mapped on the first create/pin, unmapped by objClientFree. */
    unsigned char *arenaBase; /* NULL until mapped */
    size_t arenaSize;         /* bytes mapped (the whole arena file) */
    char *arenaPath;
    int arenaReadOnly; /* 1: only O_RDONLY was allowed, mapped PROT_READ (clientOpenArena) */

    PinCache pins;      /* off (maxIdle 0) until objClientSetPinCache */
    size_t prefaultMin; /* objClientSetPinPrefault; 0: off */
    int putThreads;     /* objClientSetPutThreads; 0: OBJ_PUT_THREADS_DEFAULT */
    int noArena;        /* the arena could not be mapped: puts go inline */
};

/* ---- errors --------------------------------------------------------------------------- */

/*
 * Record an error with a printf-style message. Can't fail (the message is
 * truncated to the buffer). Returns -1 so callers can `return clientFail(...)`.
 */
static int clientFail(ObjClient *c, ObjErr code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int clientFail(ObjClient *c, ObjErr code, const char *fmt, ...)
{
    va_list ap;

    c->err = code;
    va_start(ap, fmt);
    vsnprintf(c->errstr, sizeof(c->errstr), fmt, ap);
    va_end(ap);
    return -1;
}

/* Forget the previous error: every successful call ends here. Returns 0. */
static int clientOk(ObjClient *c)
{
    c->err = OBJ_OK;
    c->errstr[0] = '\0';
    return 0;
}

/*
 * Map the code word that starts a server error reply onto ObjErr, by the
 * list of words (common/errwords.h). Unknown words (Redis's own "ERR ...",
 * "WRONGTYPE", ...) are OBJ_ERR_OTHER. Can't fail.
 */
static ObjErr clientErrFromReply(const char *msg, size_t len)
{
#define CLIENT_ERR_ROW(word, code, pyClass, origin, meaning) {#word, code},
    static const struct {
        const char *word;
        ObjErr code;
    } table[] = {OBJ_ERR_WORDS(CLIENT_ERR_ROW)};
#undef CLIENT_ERR_ROW
    size_t wordLen = 0;

    while (wordLen < len && msg[wordLen] != ' ')
        wordLen++;
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (strlen(table[i].word) == wordLen && memcmp(table[i].word, msg, wordLen) == 0)
            return table[i].code;
    }
    return OBJ_ERR_OTHER;
}

/* Record a server error reply (code word and full text). Returns -1. */
static int clientFailReply(ObjClient *c, const redisReply *r)
{
    return clientFail(c, clientErrFromReply(r->str, r->len), "%.*s", (int)r->len, r->str);
}

/* Record an I/O error with the transport's description of it. Returns -1. */
static int clientFailIo(ObjClient *c)
{
    if (c->tr != NULL) {
        const char *why = c->tr->errstr(c->conn);
        return clientFail(c, OBJ_ERR_IO, "%s",
                          why && why[0] ? why : "connection failed (no reply from the server)");
    }
    if (c->rc == NULL)
        return clientFail(c, OBJ_ERR_IO, "no connection (out of memory when connecting)");
    if (c->rc->err == 0)
        return clientFail(c, OBJ_ERR_IO, "connection failed (no reply from the server)");
    return clientFail(c, OBJ_ERR_IO, "%s", c->rc->errstr);
}

/* ---- commands --------------------------------------------------------------------------- */

/* The arguments of one command; ids and data are binary-safe (pointer + length). */
typedef struct CmdArgs {
    int argc;
    const char *argv[OBJ_CLIENT_MAX_ARGS];
    size_t lens[OBJ_CLIENT_MAX_ARGS];
} CmdArgs;

/* Append an argument (the caller keeps it alive until the call). Can't fail:
 * callers never add more than OBJ_CLIENT_MAX_ARGS. */
static void argsAdd(CmdArgs *a, const void *p, size_t len)
{
    a->argv[a->argc] = p ? (const char *)p : "";
    a->lens[a->argc] = len;
    a->argc++;
}

/* Append a NUL-terminated argument. Can't fail. */
static void argsAddStr(CmdArgs *a, const char *s)
{
    argsAdd(a, s, strlen(s));
}

/* Whether the connection is usable (no transport error so far). */
static int clientConnected(const ObjClient *c)
{
    if (c->tr != NULL)
        return !c->tr->failed(c->conn);
    return c->rc != NULL && c->rc->err == 0;
}

/*
 * Send one command (argc arguments) and wait for its reply. Returns the
 * reply (free it with freeReplyObject) unless it is an error reply or the
 * transport failed: then NULL, with the error recorded. Why: every API call
 * wants exactly this split.
 */
static redisReply *clientCallArgv(ObjClient *c, int argc, const char **argv, const size_t *lens)
{
    redisReply *r;

    if (!clientConnected(c)) {
        clientFailIo(c);
        return NULL;
    }
    if (c->tr != NULL)
        r = c->tr->command(c->conn, argc, argv, lens);
    else
        r = redisCommandArgv(c->rc, argc, argv, lens);
    if (r == NULL) {
        clientFailIo(c);
        return NULL;
    }
    if (r->type == REDIS_REPLY_ERROR) {
        clientFailReply(c, r);
        freeReplyObject(r);
        return NULL;
    }
    return r;
}

/* clientCall of a CmdArgs. */
static redisReply *clientCall(ObjClient *c, CmdArgs *a)
{
    return clientCallArgv(c, a->argc, a->argv, a->lens);
}

/* Record "the server answered something this library does not understand". Returns -1. */
static int clientFailShape(ObjClient *c, const char *cmd, const redisReply *r)
{
    return clientFail(c, OBJ_ERR_IO, "unexpected reply to %s (reply type %d)", cmd, r->type);
}

/*
 * Judge the reply r (NULL: the call failed, the error is recorded) of a
 * command that answers a status (OK, DEFERRED, ...): any status is success.
 * Frees r. Returns 0, or -1 with the error recorded. clientCallStatus
 * sends the command first.
 */
static int clientStatusVerdict(ObjClient *c, const char *cmd, redisReply *r)
{
    int rv;

    if (r == NULL)
        return -1;
    rv = r->type == REDIS_REPLY_STATUS ? clientOk(c) : clientFailShape(c, cmd, r);
    freeReplyObject(r);
    return rv;
}

static int clientCallStatus(ObjClient *c, CmdArgs *a)
{
    return clientStatusVerdict(c, a->argv[0], clientCall(c, a));
}

/*
 * Send n commands that answer a status reply in one pipeline (hiredis: all
 * are buffered and written together, then the n replies read in order;
 * another transport has no pipelining and sends them one by one). Every
 * reply is read even after an error reply, so the connection stays in step.
 * Returns 0, or -1 with the first error recorded.
 */
static int clientCallPipeline(ObjClient *c, CmdArgs *cmds, int n)
{
    int appended = 0, rv = 0;
    redisReply *r;

    if (!clientConnected(c))
        return clientFailIo(c);
    if (c->tr != NULL) {
        for (int i = 0; i < n; i++)
            if (clientCallStatus(c, &cmds[i]) < 0 && rv == 0) {
                rv = -1;
                if (!clientConnected(c))
                    break;
            }
        return rv;
    }
    for (; appended < n; appended++)
        if (redisAppendCommandArgv(c->rc, cmds[appended].argc, cmds[appended].argv,
                                   cmds[appended].lens) != REDIS_OK)
            break;
    if (appended < n)
        rv = clientFail(c, OBJ_ERR_OTHER, "out of memory queueing %d pipelined commands", n);
    for (int i = 0; i < appended; i++) {
        if (redisGetReply(c->rc, (void **)&r) != REDIS_OK || r == NULL)
            return clientFailIo(c);
        if (rv == 0 && r->type == REDIS_REPLY_ERROR)
            rv = clientFailReply(c, r);
        else if (rv == 0 && r->type != REDIS_REPLY_STATUS)
            rv = clientFailShape(c, cmds[i].argv[0], r);
        freeReplyObject(r);
    }
    return rv;
}

/*
 * Start the arguments of `cmd id ...`. A NULL id with a length is a local
 * BADARG; an empty id goes to the server, which owns the rules for ids.
 * Returns 0, or -1 with the error recorded (also for a NULL client).
 */
static int clientIdCommand(ObjClient *c, const char *cmd, const void *id, size_t idLen, CmdArgs *a)
{
    if (c == NULL)
        return -1;
    if (id == NULL && idLen > 0)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG %s: id is NULL but idLen is %zu", cmd, idLen);
    a->argc = 0;
    argsAddStr(a, cmd);
    argsAdd(a, id, idLen);
    return 0;
}

/*
 * Add the TIMEOUT option for the API's convention: 0 adds nothing, > 0 that
 * many ms, -1 adds 0 (forever). buf holds the number and must outlive the
 * call. Returns 0, or -1 (BADARG) for other negative values.
 */
static int clientAddTimeout(ObjClient *c, CmdArgs *a, long long timeoutMs, char *buf, size_t bufLen)
{
    if (timeoutMs < -1)
        return clientFail(c, OBJ_ERR_BADARG,
                          "BADARG timeout %lld ms (use > 0, 0 = do not wait, -1 = forever)",
                          timeoutMs);
    if (timeoutMs == 0)
        return 0;
    snprintf(buf, bufLen, "%lld", timeoutMs < 0 ? 0LL : timeoutMs);
    argsAddStr(a, "TIMEOUT");
    argsAddStr(a, buf);
    return 0;
}

/* ---- replies ------------------------------------------------------------------------------ */

/*
 * Find the value of field `name` in a flat field/value array reply. Returns
 * it, or NULL if the reply is not such an array or lacks the field.
 */
static const redisReply *replyField(const redisReply *r, const char *name)
{
    size_t nameLen = strlen(name);

    if (r->type != REDIS_REPLY_ARRAY)
        return NULL;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i];
        if ((k->type == REDIS_REPLY_STRING || k->type == REDIS_REPLY_STATUS) && k->len == nameLen &&
            memcmp(k->str, name, nameLen) == 0)
            return r->element[i + 1];
    }
    return NULL;
}

/*
 * Read a non-negative integer from an integer reply or a decimal string
 * reply (INFO-style fields may come either way). Returns 0, or -1 if v is
 * NULL, negative, not a number or does not fit.
 */
static int replyToU64(const redisReply *v, uint64_t *out)
{
    char buf[32], *end;
    unsigned long long n;

    if (v == NULL)
        return -1;
    if (v->type == REDIS_REPLY_INTEGER) {
        if (v->integer < 0)
            return -1;
        *out = (uint64_t)v->integer;
        return 0;
    }
    if (v->type != REDIS_REPLY_STRING && v->type != REDIS_REPLY_STATUS)
        return -1;
    if (v->len == 0 || v->len >= sizeof(buf) || v->str[0] < '0' || v->str[0] > '9')
        return -1;
    memcpy(buf, v->str, v->len);
    buf[v->len] = '\0';
    errno = 0;
    n = strtoull(buf, &end, 10);
    if (errno || *end != '\0')
        return -1;
    *out = n;
    return 0;
}

/* Read field `name` of a field/value reply as a number. Returns 0, or -1 (error recorded). */
static int clientField(ObjClient *c, const char *cmd, const redisReply *r, const char *name,
                       uint64_t *out)
{
    if (replyToU64(replyField(r, name), out) < 0)
        return clientFail(c, OBJ_ERR_IO, "unexpected reply to %s: no numeric field '%s'", cmd,
                          name);
    return 0;
}

/* ---- the arena -------------------------------------------------------------------------- */

/*
 * Whether the connection goes to this machine: a unix socket, a loopback
 * peer, or a peer address equal to the socket's own local address (the
 * kernel picks the destination itself as source for a local address).
 * Why: arena file names are only unique per machine, so a remote node's
 * arena_path may name a different local node's arena, and writing through
 * that mapping would corrupt it. Returns 1 or 0; 0 when unsure.
 */
static int clientSameHost(const ObjClient *c)
{
    struct sockaddr_storage peer, self;
    socklen_t peerLen = sizeof(peer), selfLen = sizeof(self);

    if (c->tr != NULL) {
        if (c->tr->addrs(c->conn, &self, &peer) < 0 || peer.ss_family != self.ss_family)
            return 0;
    } else if (c->rc->connection_type == REDIS_CONN_UNIX) {
        return 1;
    } else if (getpeername(c->rc->fd, (struct sockaddr *)&peer, &peerLen) < 0 ||
               getsockname(c->rc->fd, (struct sockaddr *)&self, &selfLen) < 0 ||
               peer.ss_family != self.ss_family) {
        return 0;
    }
    if (peer.ss_family == AF_INET) {
        const struct sockaddr_in *p = (const struct sockaddr_in *)&peer;
        const struct sockaddr_in *s = (const struct sockaddr_in *)&self;

        return (ntohl(p->sin_addr.s_addr) >> 24) == 127 || p->sin_addr.s_addr == s->sin_addr.s_addr;
    }
    if (peer.ss_family == AF_INET6) {
        const struct sockaddr_in6 *p = (const struct sockaddr_in6 *)&peer;
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)&self;

        return IN6_IS_ADDR_LOOPBACK(&p->sin6_addr) ||
               (IN6_IS_ADDR_V4MAPPED(&p->sin6_addr) && p->sin6_addr.s6_addr[12] == 127) ||
               memcmp(&p->sin6_addr, &s->sin6_addr, sizeof(p->sin6_addr)) == 0;
    }
    return 0;
}

/*
 * Open the arena file for mapping: read-write if this user may write it, else
 * read-only (a reader: the file's group, or the directory's ACL, grants read
 * only; docs/security.md). Sets *prot to the matching mmap protection and
 * c->arenaReadOnly. Returns the descriptor, or -1 with errno of the read-write
 * attempt when neither is allowed.
 */
static int clientOpenArena(ObjClient *c, const char *path, int *prot)
{
    int fd = open(path, O_RDWR | O_CLOEXEC), rwErrno;

    *prot = PROT_READ | PROT_WRITE;
    c->arenaReadOnly = 0;
    if (fd >= 0 || (errno != EACCES && errno != EROFS && errno != EPERM))
        return fd;
    rwErrno = errno;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        errno = rwErrno;
        return -1;
    }
    *prot = PROT_READ;
    c->arenaReadOnly = 1;
    return fd;
}

/*
 * Map the node's arena if it is not mapped yet: OBJ.STATS names the file and
 * its size; the whole file is mapped shared, read-write because creators
 * write object bytes in place, or read-only for a user who may only read it. Returns 0, or -1 with
 * OBJ_ERR_MAP (or the error of OBJ.STATS) recorded. Why lazily: copying-only clients (possibly on
 * another machine) must never need the file.
 */
static int clientMapArena(ObjClient *c)
{
    CmdArgs a = {0};
    const char *hint = "zero-copy create/pin needs the client on the same machine as the "
                       "server and permission to open its arena file; the copying "
                       "objClientPut/objClientGet work from anywhere";
    const redisReply *pathReply;
    redisReply *r;
    uint64_t arenaSize;
    struct stat st;
    void *base;
    char *path;
    int fd, prot;

    if (c->arenaBase != NULL)
        return 0;
    if (!clientConnected(c))
        return clientFailIo(c);
    if (!clientSameHost(c))
        return clientFail(c, OBJ_ERR_MAP,
                          "the node is not on this machine (connection is not "
                          "local); %s",
                          hint);
    argsAddStr(&a, "OBJ.STATS");
    r = clientCall(c, &a);
    if (r == NULL)
        return -1;
    pathReply = replyField(r, "arena_path");
    if (pathReply == NULL || pathReply->type != REDIS_REPLY_STRING || pathReply->len == 0 ||
        strlen(pathReply->str) != pathReply->len) {
        freeReplyObject(r);
        return clientFail(c, OBJ_ERR_IO, "unexpected reply to OBJ.STATS: no arena_path");
    }
    if (clientField(c, "OBJ.STATS", r, "arena_size", &arenaSize) < 0) {
        freeReplyObject(r);
        return -1;
    }
    path = objStrdup(pathReply->str);
    freeReplyObject(r);
    if (path == NULL)
        return clientFail(c, OBJ_ERR_OTHER, "out of memory");

    fd = clientOpenArena(c, path, &prot);
    if (fd < 0) {
        clientFail(c, OBJ_ERR_MAP, "cannot open the arena %s: %s; %s", path, strerror(errno), hint);
        goto out_free_path;
    }
    if (fstat(fd, &st) < 0) {
        clientFail(c, OBJ_ERR_MAP, "cannot stat the arena %s: %s; %s", path, strerror(errno), hint);
        goto out_close;
    }
    if (st.st_size <= 0 || (uint64_t)st.st_size < arenaSize) {
        clientFail(c, OBJ_ERR_MAP,
                   "the arena %s has %lld bytes but the server reports %llu: it is not this "
                   "server's arena; %s",
                   path, (long long)st.st_size, (unsigned long long)arenaSize, hint);
        goto out_close;
    }
    base = mmap(NULL, (size_t)st.st_size, prot, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        clientFail(c, OBJ_ERR_MAP, "cannot map the arena %s: %s; %s", path, strerror(errno), hint);
        goto out_close;
    }
    close(fd);
    c->arenaBase = base;
    c->arenaSize = (size_t)st.st_size;
    c->arenaPath = path;
    return 0;

out_close:
    close(fd);
out_free_path:
    objFree(path);
    return -1;
}

/* See objclient_int.h. */
int objClientArenaRange(const ObjClient *c, void **base, size_t *size)
{
    if (c == NULL || c->arenaBase == NULL)
        return -1;
    *base = c->arenaBase;
    *size = c->arenaSize;
    return 0;
}

/* Whether [offset, offset + len) lies inside the mapped arena. */
static int clientInArena(const ObjClient *c, uint64_t offset, uint64_t len)
{
    return offset <= c->arenaSize && len <= c->arenaSize - offset;
}

/* ---- the pin cache ------------------------------------------------------------------------- */

/* FNV-1a of the id. Can't fail. */
static uint64_t pinHash(const void *id, size_t idLen)
{
    const unsigned char *p = id;
    uint64_t h = 1469598103934665603ULL;

    for (size_t i = 0; i < idLen; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

/* The entry of id that a pin may use (not stale). Returns it or NULL. */
static PinEntry *pinFind(const PinCache *pc, const void *id, size_t idLen, uint64_t h)
{
    if (pc->nbuckets == 0)
        return NULL;
    for (PinEntry *e = pc->buckets[h & (pc->nbuckets - 1)]; e != NULL; e = e->hashNext)
        if (e->hash == h && e->idLen == idLen && (idLen == 0 || memcmp(e->id, id, idLen) == 0) &&
            !e->stale)
            return e;
    return NULL;
}

/*
 * The entry of id with users left that a release drops: the one whose view
 * starts at data, or with data NULL the only one (an id deleted and made
 * again can have a stale entry and a fresh one in use at once: then *many
 * is set and NULL returned). Returns it or NULL.
 */
static PinEntry *pinFindUsed(const PinCache *pc, const void *id, size_t idLen, uint64_t h,
                             const void *data, int *many)
{
    PinEntry *found = NULL;

    *many = 0;
    if (pc->nbuckets == 0)
        return NULL;
    for (PinEntry *e = pc->buckets[h & (pc->nbuckets - 1)]; e != NULL; e = e->hashNext) {
        if (e->hash != h || e->idLen != idLen || (idLen > 0 && memcmp(e->id, id, idLen) != 0) ||
            e->users == 0 || (data != NULL && e->view.data != data))
            continue;
        if (found != NULL) {
            *many = 1;
            return NULL;
        }
        found = e;
    }
    return found;
}

/* Double the buckets (or make the first 64) when the chains would grow
 * long. Returns 0, or -1 when out of memory (the old table stays usable). */
static int pinGrow(PinCache *pc)
{
    size_t n = pc->nbuckets ? pc->nbuckets * 2 : 64;
    PinEntry **b;

    if (pc->count < pc->nbuckets)
        return 0;
    b = objCalloc(n, sizeof(*b));
    if (b == NULL)
        return pc->nbuckets ? 0 : -1;
    for (size_t i = 0; i < pc->nbuckets; i++) {
        PinEntry *e = pc->buckets[i], *next;
        for (; e != NULL; e = next) {
            next = e->hashNext;
            e->hashNext = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
        }
    }
    objFree(pc->buckets);
    pc->buckets = b;
    pc->nbuckets = n;
    return 0;
}

/* Put e at the young end of the idle list. Can't fail. */
static void pinIdleAppend(PinCache *pc, PinEntry *e)
{
    e->idleNext = NULL;
    e->idlePrev = pc->idleTail;
    if (pc->idleTail)
        pc->idleTail->idleNext = e;
    else
        pc->idleHead = e;
    pc->idleTail = e;
    pc->idle++;
}

/* Take e off the idle list. Can't fail. */
static void pinIdleRemove(PinCache *pc, PinEntry *e)
{
    if (e->idlePrev)
        e->idlePrev->idleNext = e->idleNext;
    else
        pc->idleHead = e->idleNext;
    if (e->idleNext)
        e->idleNext->idlePrev = e->idlePrev;
    else
        pc->idleTail = e->idlePrev;
    e->idlePrev = e->idleNext = NULL;
    pc->idle--;
}

/* Take e out of the hash (and the idle list); the caller frees it. Can't fail. */
static void pinUnlink(PinCache *pc, PinEntry *e)
{
    PinEntry **pp = &pc->buckets[e->hash & (pc->nbuckets - 1)];

    while (*pp != e)
        pp = &(*pp)->hashNext;
    *pp = e->hashNext;
    if (e->users == 0)
        pinIdleRemove(pc, e);
    pc->count--;
}

/*
 * Remember a fresh server pin of id (users 1). Returns 0, or -1 when out of
 * memory: then the pin simply stays uncached (its release goes straight to
 * the server), so this is not an error for the caller.
 */
static int pinAdd(PinCache *pc, const void *id, size_t idLen, uint64_t h, const ObjBuffer *view)
{
    PinEntry *e;

    if (pinGrow(pc) < 0 || (e = objMalloc(sizeof(*e) + idLen)) == NULL)
        return -1;
    memset(e, 0, sizeof(*e));
    if (idLen > 0)
        memcpy(e->id, id, idLen);
    e->idLen = idLen;
    e->hash = h;
    e->view = *view;
    e->users = 1;
    e->hashNext = pc->buckets[h & (pc->nbuckets - 1)];
    pc->buckets[h & (pc->nbuckets - 1)] = e;
    pc->count++;
    return 0;
}

/*
 * Give back n unlinked entries' server pins in one pipelined OBJ.RELEASE
 * batch and free them. Returns 0, or -1 with the first error recorded; the
 * entries are freed either way (a failed connection has dropped the pins).
 */
static int pinSendReleases(ObjClient *c, PinEntry **batch, int n)
{
    CmdArgs cmds[OBJ_CLIENT_RELEASE_BATCH];
    char offsets[OBJ_CLIENT_RELEASE_BATCH][24];
    int rv;

    for (int i = 0; i < n; i++) {
        cmds[i].argc = 0;
        argsAddStr(&cmds[i], "OBJ.RELEASE");
        argsAdd(&cmds[i], batch[i]->id, batch[i]->idLen);
        /* The id may name a newer object than the one this entry pinned. */
        snprintf(offsets[i], sizeof(offsets[i]), "%zu",
                 (size_t)((const unsigned char *)batch[i]->view.data - c->arenaBase));
        argsAddStr(&cmds[i], "OFFSET");
        argsAddStr(&cmds[i], offsets[i]);
    }
    rv = n > 0 ? clientCallPipeline(c, cmds, n) : 0;
    if (n > 0) {
        c->pins.batches++;
        c->pins.released += (uint64_t)n;
    }
    for (int i = 0; i < n; i++)
        objFree(batch[i]);
    return rv;
}

/*
 * Give back the oldest idle entries until at most keep are left, in batches
 * of up to OBJ_CLIENT_RELEASE_BATCH. Returns 0, or -1 with the first error
 * recorded (every chosen entry is forgotten anyway).
 */
static int pinTrim(ObjClient *c, size_t keep)
{
    PinEntry *batch[OBJ_CLIENT_RELEASE_BATCH];
    ObjErr err = OBJ_OK;
    char msg[OBJ_CLIENT_ERRSTR_LEN];
    int n;

    while (c->pins.idle > keep) {
        for (n = 0; n < OBJ_CLIENT_RELEASE_BATCH && c->pins.idle > keep; n++) {
            batch[n] = c->pins.idleHead;
            pinUnlink(&c->pins, batch[n]);
        }
        if (pinSendReleases(c, batch, n) < 0 && err == OBJ_OK) {
            err = c->err;
            memcpy(msg, c->errstr, sizeof(msg));
        }
    }
    if (err == OBJ_OK)
        return 0;
    c->err = err;
    memcpy(c->errstr, msg, sizeof(msg));
    return -1;
}

/*
 * At disconnect: give every entry's server pin back (idle or not; the
 * program's views die with the client) and free the table. Returns 0 or -1.
 */
static int pinDrop(ObjClient *c)
{
    PinCache *pc = &c->pins;
    int rv;

    for (size_t i = 0; i < pc->nbuckets; i++)
        for (PinEntry *e = pc->buckets[i]; e != NULL; e = e->hashNext)
            if (e->users > 0) {
                e->users = 0;
                pinIdleAppend(pc, e);
            }
    rv = pinTrim(c, 0);
    objFree(pc->buckets);
    pc->buckets = NULL;
    pc->nbuckets = 0;
    return rv;
}

/* Enable, resize or (maxIdle 0) disable the pin cache. Returns 0 or -1. */
int objClientSetPinCache(ObjClient *c, size_t maxIdle)
{
    if (c == NULL)
        return -1;
    c->pins.maxIdle = maxIdle;
    if (pinTrim(c, maxIdle) < 0)
        return -1;
    return clientOk(c);
}

/* Give back every idle entry now, in one pipelined batch. Returns 0 or -1. */
int objClientFlushReleases(ObjClient *c)
{
    if (c == NULL)
        return -1;
    if (pinTrim(c, 0) < 0)
        return -1;
    return clientOk(c);
}

/* Copy the counters. Returns 0, or -1 for NULL arguments. */
int objClientPinCacheStats(const ObjClient *c, ObjPinCacheStats *st)
{
    if (c == NULL || st == NULL)
        return -1;
    st->hits = c->pins.hits;
    st->misses = c->pins.misses;
    st->batches = c->pins.batches;
    st->released = c->pins.released;
    st->cached = c->pins.count;
    st->idle = c->pins.idle;
    st->maxIdle = c->pins.maxIdle;
    return 0;
}

/* ---- connection ----------------------------------------------------------------------------- */

/*
 * Wrap a hiredis context (possibly NULL or failed) into a client. Returns the
 * client with the connect error recorded, or NULL when out of memory.
 */
static ObjClient *clientWrap(redisContext *rc)
{
    ObjClient *c = objCalloc(1, sizeof(*c));

    if (c == NULL) {
        if (rc != NULL)
            redisFree(rc);
        return NULL;
    }
    c->rc = rc;
    if (rc == NULL || rc->err)
        clientFailIo(c);
    else
        clientOk(c);
    return c;
}

/* Connect over TCP (a NULL host is 127.0.0.1). Never fails except out of memory (NULL). */
ObjClient *objClientConnect(const char *host, int port)
{
    return clientWrap(redisConnect(host ? host : "127.0.0.1", port));
}

/* Connect over a unix socket. Never fails except out of memory (NULL). */
ObjClient *objClientConnectUnix(const char *path)
{
    return clientWrap(redisConnectUnix(path ? path : ""));
}

/*
 * Wrap a connection of another transport (objclient_int.h); the client owns
 * it from now on. Returns the client with a failed connect recorded, or NULL
 * when out of memory (the connection is freed then).
 */
ObjClient *objClientWrapTransport(const ObjClientTransport *tr, void *conn)
{
    ObjClient *c = objCalloc(1, sizeof(*c));

    if (c == NULL) {
        tr->free(conn);
        return NULL;
    }
    c->tr = tr;
    c->conn = conn;
    if (tr->failed(conn))
        clientFailIo(c);
    else
        clientOk(c);
    return c;
}

/* Give back the pin cache's pins (one pipelined batch), close the
 * connection and unmap the arena. Accepts NULL. Can't fail. */
void objClientFree(ObjClient *c)
{
    if (c == NULL)
        return;
    pinDrop(c); /* the server would drop them at disconnect too, but later */
    if (c->arenaBase != NULL)
        munmap(c->arenaBase, c->arenaSize);
    objFree(c->arenaPath);
    if (c->rc != NULL)
        redisFree(c->rc);
    if (c->tr != NULL)
        c->tr->free(c->conn);
    objFree(c);
}

/* The last call's error code; OBJ_OK after a success. A NULL client is an I/O error. */
ObjErr objClientErrCode(const ObjClient *c)
{
    return c ? c->err : OBJ_ERR_IO;
}

/* The last call's error message; "" after a success. Never NULL. */
const char *objClientErrMsg(const ObjClient *c)
{
    return c ? c->errstr : "no client (out of memory when connecting)";
}

/* ---- create / seal / abort ------------------------------------------------------------------ */

/*
 * OBJ.CREATE id size [META m], then point *data at the reserved bytes in the
 * arena (mapped first, so a client that cannot map never leaves a created
 * object behind) and, when gen is not NULL, set *gen to the object's
 * generation (0 from a node that does not answer one). Returns 0, or -1 with
 * the error recorded; an answer that does not fit the mapping aborts the
 * object again (OBJ_ERR_OTHER).
 */
int objClientCreateGen(ObjClient *c, const void *id, size_t idLen, size_t size, const void *meta,
                       size_t metaLen, void **data, uint64_t *gen)
{
    uint64_t offset, gotSize, gotGen = 0;
    char sizeBuf[32];
    redisReply *r;
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.CREATE", id, idLen, &a) < 0)
        return -1;
    if (data == NULL || (meta == NULL && metaLen > 0))
        return clientFail(c, OBJ_ERR_BADARG,
                          "BADARG objClientCreate: data is NULL, or meta is NULL with metaLen > 0");
    if (clientMapArena(c) < 0)
        return -1;
    if (c->arenaReadOnly)
        return clientFail(c, OBJ_ERR_MAP,
                          "READONLY the arena %s is mapped read-only: this user may read "
                          "objects in place but not create them (objClientPut copies)",
                          c->arenaPath);
    snprintf(sizeBuf, sizeof(sizeBuf), "%zu", size);
    argsAddStr(&a, sizeBuf);
    if (metaLen > 0) {
        argsAddStr(&a, "META");
        argsAdd(&a, meta, metaLen);
    }
    r = clientCall(c, &a);
    if (r == NULL)
        return -1;
    if (clientField(c, "OBJ.CREATE", r, "offset", &offset) < 0 ||
        clientField(c, "OBJ.CREATE", r, "size", &gotSize) < 0) {
        freeReplyObject(r);
        objClientAbort(c, id, idLen);
        return clientFail(c, OBJ_ERR_IO, "unexpected reply to OBJ.CREATE (object aborted)");
    }
    if (replyField(r, "gen") != NULL && replyToU64(replyField(r, "gen"), &gotGen) < 0)
        gotGen = 0;
    freeReplyObject(r);
    if (gotSize != size || !clientInArena(c, offset, gotSize)) {
        /* A created object nobody can write would only hold memory until disconnect. */
        objClientAbort(c, id, idLen);
        return clientFail(c, OBJ_ERR_OTHER,
                          "OBJ.CREATE answered offset %llu size %llu, which is not a %zu-byte "
                          "range inside the mapped arena %s (%zu bytes); object aborted",
                          (unsigned long long)offset, (unsigned long long)gotSize, size,
                          c->arenaPath, c->arenaSize);
    }
    *data = c->arenaBase + offset;
    if (gen != NULL)
        *gen = gotGen;
    return clientOk(c);
}

/* OBJ.CREATE without the generation (objClientCreateGen). Returns 0 or -1. */
int objClientCreate(ObjClient *c, const void *id, size_t idLen, size_t size, const void *meta,
                    size_t metaLen, void **data)
{
    return objClientCreateGen(c, id, idLen, size, meta, metaLen, data, NULL);
}

/* OBJ.SEAL id. Returns 0, or -1 with the error recorded. */
int objClientSeal(ObjClient *c, const void *id, size_t idLen)
{
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.SEAL", id, idLen, &a) < 0)
        return -1;
    return clientCallStatus(c, &a);
}

/* OBJ.ABORT id. Returns 0, or -1 with the error recorded. */
int objClientAbort(ObjClient *c, const void *id, size_t idLen)
{
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.ABORT", id, idLen, &a) < 0)
        return -1;
    return clientCallStatus(c, &a);
}

/* ---- pin / release ----------------------------------------------------------------------------
 */

/*
 * Check an OBJ.PIN reply against the mapping and fill *out. The server
 * stores the metadata right after the data, so out->meta is base + offset +
 * size; the copy of the metadata in the reply must equal those arena bytes,
 * which catches a client and server that disagree about the layout.
 * Returns 0, or -1 with the error recorded.
 */
static int clientPinView(ObjClient *c, const redisReply *r, ObjBuffer *out)
{
    const redisReply *meta = replyField(r, "meta");
    uint64_t offset, size;

    if (clientField(c, "OBJ.PIN", r, "offset", &offset) < 0 ||
        clientField(c, "OBJ.PIN", r, "size", &size) < 0)
        return -1;
    if (meta == NULL || meta->type != REDIS_REPLY_STRING)
        return clientFail(c, OBJ_ERR_IO, "unexpected reply to OBJ.PIN: no meta string");
    if (!clientInArena(c, offset, size) || !clientInArena(c, offset + size, meta->len))
        return clientFail(c, OBJ_ERR_OTHER,
                          "OBJ.PIN answered offset %llu size %llu meta %zu bytes, which is not "
                          "inside the mapped arena %s (%zu bytes)",
                          (unsigned long long)offset, (unsigned long long)size, meta->len,
                          c->arenaPath, c->arenaSize);
    if (meta->len > 0 && memcmp(c->arenaBase + offset + size, meta->str, meta->len) != 0)
        return clientFail(c, OBJ_ERR_OTHER,
                          "OBJ.PIN: the metadata is not stored right after the data in the "
                          "arena %s (client and server versions disagree?)",
                          c->arenaPath);
    out->data = c->arenaBase + offset;
    out->size = (size_t)size;
    out->meta = c->arenaBase + offset + size;
    out->metaSize = meta->len;
    return 0;
}

/*
 * Populate this process's page tables for a freshly pinned view of at least
 * prefaultMin bytes with one madvise(MADV_POPULATE_READ), instead of one
 * minor fault per 4 KiB page on first read (256 for 1 MiB). Can't fail: a
 * kernel without it (EINVAL, before 5.14) turns the option off; other
 * errors only cost the faults back. Why opt-in: it makes a pin cost time
 * proportional to the size, which a program reading a few bytes of a large
 * object does not want.
 */
static void clientPrefault(ObjClient *c, const ObjBuffer *view)
{
#ifdef MADV_POPULATE_READ
    long page = sysconf(_SC_PAGESIZE);
    uintptr_t lo, hi;

    if (c->prefaultMin == 0 || view->size < c->prefaultMin || page <= 0)
        return;
    lo = (uintptr_t)view->data & ~((uintptr_t)page - 1);
    hi = (uintptr_t)view->data + view->size;
    if (madvise((void *)lo, hi - lo, MADV_POPULATE_READ) < 0 && errno == EINVAL)
        c->prefaultMin = 0;
#else
    (void)view;
    c->prefaultMin = 0;
#endif
}

/* Prefault pinned views of at least minBytes (0: off). Returns 0, or -1 for
 * a NULL client. */
int objClientSetPinPrefault(ObjClient *c, size_t minBytes)
{
    if (c == NULL)
        return -1;
    c->prefaultMin = minBytes;
    return clientOk(c);
}

/*
 * OBJ.RELEASE id OFFSET offset: the pin of the object at that offset, which
 * stays right when id was deleted and made again. Returns 0, or -1 with the
 * error recorded.
 */
static int clientReleaseOffset(ObjClient *c, const void *id, size_t idLen, uint64_t offset)
{
    char buf[24];
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.RELEASE", id, idLen, &a) < 0)
        return -1;
    snprintf(buf, sizeof(buf), "%llu", (unsigned long long)offset);
    argsAddStr(&a, "OFFSET");
    argsAddStr(&a, buf);
    return clientCallStatus(c, &a);
}

/*
 * Send a built OBJ.PIN and point *out into the arena; *gen (when not NULL)
 * gets the answered generation (0 when none). A reply that cannot be turned
 * into a view releases that pin (and only it) again, keeping the error that
 * explains why. Returns 0, or -1 with the error recorded.
 */
static int clientPinSend(ObjClient *c, const void *id, size_t idLen, CmdArgs *a, ObjBuffer *out,
                         uint64_t *gen)
{
    char msg[OBJ_CLIENT_ERRSTR_LEN];
    uint64_t offset;
    redisReply *r;
    ObjErr err;

    if (clientMapArena(c) < 0)
        return -1;
    r = clientCall(c, a);
    if (r == NULL)
        return -1;
    if (clientPinView(c, r, out) == 0) {
        if (gen != NULL && replyToU64(replyField(r, "gen"), gen) < 0)
            *gen = 0;
        freeReplyObject(r);
        return 0;
    }
    err = c->err;
    memcpy(msg, c->errstr, sizeof(msg));
    if (replyToU64(replyField(r, "offset"), &offset) == 0)
        clientReleaseOffset(c, id, idLen, offset);
    freeReplyObject(r);
    c->err = err;
    memcpy(c->errstr, msg, sizeof(msg));
    return -1;
}

/*
 * OBJ.PIN id [TIMEOUT ms], then point *out into the arena. Returns 0, or -1
 * with the error recorded; a reply that cannot be turned into a view
 * releases the pin again, keeping the error that explains why.
 */
int objClientPin(ObjClient *c, const void *id, size_t idLen, long long timeoutMs, ObjBuffer *out)
{
    char timeoutBuf[32];
    PinEntry *e;
    uint64_t h = 0;
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.PIN", id, idLen, &a) < 0)
        return -1;
    if (out == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientPin: out is NULL");
    if (clientAddTimeout(c, &a, timeoutMs, timeoutBuf, sizeof(timeoutBuf)) < 0)
        return -1;
    if (c->pins.maxIdle > 0) {
        h = pinHash(id, idLen);
        e = pinFind(&c->pins, id, idLen, h);
        if (e != NULL) {
            if (e->users++ == 0)
                pinIdleRemove(&c->pins, e);
            c->pins.hits++;
            *out = e->view;
            return clientOk(c);
        }
    }
    if (clientPinSend(c, id, idLen, &a, out, NULL) < 0)
        return -1;
    clientPrefault(c, out);
    if (c->pins.maxIdle > 0) {
        c->pins.misses++;
        pinAdd(&c->pins, id, idLen, h, out); /* out of memory: stays uncached */
    }
    return clientOk(c);
}

/*
 * Pin the object this client has just sealed: OBJ.PIN id (never served by
 * the pin cache), and check that the pin is on that object, the one created
 * at data with generation gen (0: check the offset only). Between OBJ.SEAL
 * and OBJ.PIN any writer may delete id and make it again, and the pin then
 * holds a stranger: that pin is given back at once and the call fails with
 * OBJ_ERR_WRONGSTATE, as it fails (NOTFOUND) when id was only deleted. So a
 * success means the sealed object's memory stays allocated for the caller.
 * Returns 0 with *out set, or -1 with the error recorded.
 */
int objClientPinCreated(ObjClient *c, const void *id, size_t idLen, const void *data, uint64_t gen,
                        ObjBuffer *out)
{
    uint64_t gotGen = 0;
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.PIN", id, idLen, &a) < 0)
        return -1;
    if (out == NULL || data == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientPinCreated: out or data is NULL");
    if (clientPinSend(c, id, idLen, &a, out, &gotGen) < 0)
        return -1;
    if (out->data == data && (gen == 0 || gotGen == gen))
        return clientOk(c);
    /* By offset, not through the cache: this server pin is not any cache entry's. */
    clientReleaseOffset(c, id, idLen, (uint64_t)((const unsigned char *)out->data - c->arenaBase));
    return clientFail(
        c, OBJ_ERR_WRONGSTATE,
        "WRONGSTATE the object was deleted after its seal and its id made again "
        "(the pin got generation %llu at offset %zu, not %llu at %zu); the "
        "other object's pin was given back",
        (unsigned long long)gotGen, (size_t)((const unsigned char *)out->data - c->arenaBase),
        (unsigned long long)gen, (size_t)((const unsigned char *)data - c->arenaBase));
}

/*
 * Drop one of the program's pins of cached entry e: the last one makes it
 * idle (the server pin stays; a stale entry's goes back at once), and more
 * than maxIdle idle entries send the oldest back in one batch. Returns 0,
 * or -1 with the error recorded.
 */
static int pinUserGone(ObjClient *c, PinEntry *e)
{
    if (--e->users > 0)
        return clientOk(c);
    pinIdleAppend(&c->pins, e);
    if (e->stale) {
        pinUnlink(&c->pins, e);
        if (pinSendReleases(c, &e, 1) < 0)
            return -1;
    } else if (c->pins.idle > c->pins.maxIdle && pinTrim(c, c->pins.maxIdle / 2) < 0) {
        return -1;
    }
    return clientOk(c);
}

/*
 * OBJ.RELEASE id, or with the pin cache: drop a program's pin of the cached
 * entry (pinUserGone). A pin the cache does not know (taken before it was
 * on) is released at once by the server's rule: the one object this
 * connection pins under id. When the client pins two objects under id (it
 * was deleted and made again), nothing is released and the call fails with
 * OBJ_ERR_WRONGSTATE: objClientReleaseBuffer names the one to drop.
 * Returns 0, or -1 with the error recorded.
 */
int objClientRelease(ObjClient *c, const void *id, size_t idLen)
{
    PinEntry *e;
    CmdArgs a;
    int many;

    if (clientIdCommand(c, "OBJ.RELEASE", id, idLen, &a) < 0)
        return -1;
    e = pinFindUsed(&c->pins, id, idLen, pinHash(id, idLen), NULL, &many);
    if (many)
        return clientFail(c, OBJ_ERR_WRONGSTATE,
                          "WRONGSTATE this client pins more than one object under this id (it "
                          "was deleted and made again): release it with objClientReleaseBuffer");
    if (e == NULL)
        return clientCallStatus(c, &a);
    return pinUserGone(c, e);
}

/*
 * Release the pin whose view objClientPin put in *buf: by the view's offset
 * in the arena (OBJ.RELEASE id OFFSET o), or through its cache entry.
 * Returns 0, or -1 with the error recorded (BADARG for a view that is not
 * in this client's mapped arena).
 */
int objClientReleaseBuffer(ObjClient *c, const void *id, size_t idLen, const ObjBuffer *buf)
{
    const unsigned char *data;
    PinEntry *e;
    int many;

    if (c == NULL)
        return -1;
    if (buf == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientReleaseBuffer: buf is NULL");
    data = buf->data;
    if (c->arenaBase == NULL || data < c->arenaBase ||
        !clientInArena(c, (uint64_t)(data - c->arenaBase), 0))
        return clientFail(c, OBJ_ERR_BADARG,
                          "BADARG objClientReleaseBuffer: the view is not one of this client's "
                          "pins (not inside its mapped arena)");
    e = pinFindUsed(&c->pins, id, idLen, pinHash(id, idLen), data, &many);
    if (e != NULL)
        return pinUserGone(c, e);
    return clientReleaseOffset(c, id, idLen, (uint64_t)(data - c->arenaBase));
}

/* ---- copying put / get --------------------------------------------------------------------------
 */

/* A put of at least this many bytes goes through the arena when it can be
 * mapped (create, copy, seal: two round trips and one copy); a smaller one
 * travels inline in one OBJ.PUT (one round trip, the bytes copied through
 * the socket), which costs less up to about here (bench/results/put.md). */
#define OBJ_PUT_ARENA_MIN (1ULL << 20)
/* Each copy thread gets at least this many bytes of a put. */
#define OBJ_PUT_THREAD_MIN (4ULL << 20)
/* Most copy threads objClientSetPutThreads takes. */
#define OBJ_PUT_THREADS_MAX 64

/* One thread's share of a put: the bytes [from, to) of the object. */
typedef struct CopySlice {
    unsigned char *dst; /* the object's first byte in the arena */
    const ObjPart *parts;
    size_t n;
    size_t from, to;
    pthread_t thread;
    int started;
} CopySlice;

/* Copy what falls into s's range of every part. (No MADV_POPULATE_WRITE
 * first: on arena pages this process has mapped before it cost as much as
 * the copy; a page's first touch faults it in, in each thread's slice.) */
static void *copySlice(void *arg)
{
    CopySlice *s = arg;

    for (size_t i = 0; i < s->n; i++) {
        const ObjPart *p = &s->parts[i];
        size_t lo = p->offset > s->from ? p->offset : s->from;
        size_t hi = p->offset + p->len < s->to ? p->offset + p->len : s->to;
        if (lo < hi)
            memcpy(s->dst + lo, (const unsigned char *)p->data + (lo - p->offset), hi - lo);
    }
    return NULL;
}

/* Copy parts into dst (size bytes) with up to `threads` threads, each on a
 * contiguous slice of at least OBJ_PUT_THREAD_MIN; the caller's thread takes
 * the first slice, and the slices of threads that cannot be started. */
static void copyParts(unsigned char *dst, const ObjPart *parts, size_t n, size_t size, int threads)
{
    CopySlice s[OBJ_PUT_THREADS_MAX];
    size_t t = size / OBJ_PUT_THREAD_MIN;

    if (t > (size_t)threads)
        t = (size_t)threads;
    if (t < 1)
        t = 1;
    size_t step = (size / t + 65535) & ~(size_t)65535; /* whole 64 KiB */
    for (size_t i = 0; i < t; i++) {
        size_t from = i * step < size ? i * step : size;
        size_t to = from + step < size && i + 1 < t ? from + step : size;
        s[i] = (CopySlice){.dst = dst, .parts = parts, .n = n, .from = from, .to = to};
    }
    for (size_t i = 1; i < t; i++)
        s[i].started = pthread_create(&s[i].thread, NULL, copySlice, &s[i]) == 0;
    copySlice(&s[0]);
    for (size_t i = 1; i < t; i++) {
        if (s[i].started)
            pthread_join(s[i].thread, NULL);
        else
            copySlice(&s[i]);
    }
}

void objClientPutInline(ObjClient *c)
{
    if (c != NULL)
        c->noArena = 1;
}

int objClientSetPutThreads(ObjClient *c, int threads)
{
    if (c == NULL)
        return -1;
    if (threads < 0 || threads > OBJ_PUT_THREADS_MAX)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG put threads must be 0 to %d, not %d",
                          OBJ_PUT_THREADS_MAX, threads);
    c->putThreads = threads;
    return clientOk(c);
}

/* Whether a put of size bytes goes through the arena: large enough, and
 * the arena maps read-write (tried once; a client that cannot map it, or
 * may only read it, puts inline, and that is not its error). */
static int putViaArena(ObjClient *c, size_t size)
{
    if (size < OBJ_PUT_ARENA_MIN || c->noArena)
        return 0;
    if (clientMapArena(c) == 0)
        return !c->arenaReadOnly;
    if (!clientConnected(c))
        return -1;
    c->noArena = 1;
    clientOk(c);
    return 0;
}

/* OBJ.PUT id data [META m] of parts joined (one round trip). */
static int putInline(ObjClient *c, const void *id, size_t idLen, const ObjPart *parts, size_t n,
                     size_t size, const void *meta, size_t metaLen)
{
    unsigned char *joined = NULL;
    const void *data = "";
    CmdArgs a;
    int rv;

    if (n == 1 && parts[0].offset == 0 && parts[0].len == size) {
        data = size ? parts[0].data : "";
    } else if (size > 0) {
        joined = objCalloc(1, size);
        if (joined == NULL)
            return clientFail(c, OBJ_ERR_OTHER, "OOM out of memory joining %zu bytes", size);
        copyParts(joined, parts, n, size, 1);
        data = joined;
    }
    clientIdCommand(c, "OBJ.PUT", id, idLen, &a);
    argsAdd(&a, data, size);
    if (metaLen > 0) {
        argsAddStr(&a, "META");
        argsAdd(&a, meta, metaLen);
    }
    rv = clientCallStatus(c, &a);
    objFree(joined);
    return rv;
}

int objClientPutParts(ObjClient *c, const void *id, size_t idLen, const ObjPart *parts, size_t n,
                      size_t size, const void *meta, size_t metaLen)
{
    CmdArgs a;
    void *dst;

    if (clientIdCommand(c, "OBJ.PUT", id, idLen, &a) < 0)
        return -1;
    if ((parts == NULL && n > 0) || (meta == NULL && metaLen > 0))
        return clientFail(c, OBJ_ERR_BADARG,
                          "BADARG objClientPut: parts or meta is NULL with a non-zero length");
    for (size_t i = 0; i < n; i++)
        if ((parts[i].data == NULL && parts[i].len > 0) || parts[i].offset > size ||
            parts[i].len > size - parts[i].offset)
            return clientFail(c, OBJ_ERR_BADARG,
                              "BADARG objClientPut: part %zu (%zu bytes at %zu) does not fit "
                              "a %zu-byte object",
                              i, parts[i].len, parts[i].offset, size);
    int arena = putViaArena(c, size);
    if (arena < 0)
        return -1;
    if (!arena)
        return putInline(c, id, idLen, parts, n, size, meta, metaLen);
    if (objClientCreate(c, id, idLen, size, meta, metaLen, &dst) < 0)
        return -1;
    copyParts(dst, parts, n, size, c->putThreads ? c->putThreads : OBJ_PUT_THREADS_DEFAULT);
    if (objClientSeal(c, id, idLen) < 0) {
        ObjErr err = c->err;
        char msg[OBJ_CLIENT_ERRSTR_LEN];
        snprintf(msg, sizeof(msg), "%s", c->errstr);
        objClientAbort(c, id, idLen);
        return clientFail(c, err, "%s", msg);
    }
    return 0;
}

/* OBJ.PUT id data [META m], or create, copy and seal for a large object
 * when the arena maps. Returns 0, or -1 with the error recorded. */
int objClientPut(ObjClient *c, const void *id, size_t idLen, const void *data, size_t size,
                 const void *meta, size_t metaLen)
{
    ObjPart part = {.data = data, .len = size, .offset = 0};

    if (c != NULL && data == NULL && size > 0)
        return clientFail(c, OBJ_ERR_BADARG,
                          "BADARG objClientPut: data or meta is NULL with a non-zero length");
    return objClientPutParts(c, id, idLen, &part, 1, size, meta, metaLen);
}

/*
 * OBJ.GET id [TIMEOUT ms] into a malloc'ed copy (a 1-byte allocation for an
 * empty object, so *data is never NULL on success). Returns 0, or -1 with
 * the error recorded and *data, *size untouched.
 */
int objClientGet(ObjClient *c, const void *id, size_t idLen, long long timeoutMs, void **data,
                 size_t *size)
{
    char timeoutBuf[32];
    redisReply *r;
    void *copy;
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.GET", id, idLen, &a) < 0)
        return -1;
    if (data == NULL || size == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientGet: data or size is NULL");
    if (clientAddTimeout(c, &a, timeoutMs, timeoutBuf, sizeof(timeoutBuf)) < 0)
        return -1;
    r = clientCall(c, &a);
    if (r == NULL)
        return -1;
    if (r->type != REDIS_REPLY_STRING) {
        clientFailShape(c, "OBJ.GET", r);
        freeReplyObject(r);
        return -1;
    }
    copy = objMalloc(r->len > 0 ? r->len : 1);
    if (copy == NULL) {
        clientFail(c, OBJ_ERR_OTHER, "out of memory copying a %zu-byte object", r->len);
        freeReplyObject(r);
        return -1;
    }
    memcpy(copy, r->str, r->len);
    *data = copy;
    *size = r->len;
    freeReplyObject(r);
    return clientOk(c);
}

/* Free a buffer from objClientGet. Accepts NULL. */
void objClientFreeData(void *data)
{
    objFree(data);
}

/* ---- delete / exists / fetch / info ---------------------------------------------------------- */

/*
 * Before this client deletes id: its cached entry must not serve the id
 * again (the id may come back as another object). An idle entry's pin is
 * given back first, so the delete frees at once; one in use is marked stale
 * and goes back on its last release. Returns 0, or -1 with the error recorded.
 */
static int clientDropCached(ObjClient *c, const void *id, size_t idLen)
{
    PinEntry *e = pinFind(&c->pins, id, idLen, pinHash(id, idLen));

    if (e == NULL)
        return 0;
    if (e->users > 0) {
        e->stale = 1;
        return 0;
    }
    pinUnlink(&c->pins, e);
    return pinSendReleases(c, &e, 1);
}

/* OBJ.DEL id: OK (freed now) and DEFERRED (pinned) are both success. Returns 0 or -1. */
int objClientDelete(ObjClient *c, const void *id, size_t idLen)
{
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.DEL", id, idLen, &a) < 0)
        return -1;
    if (clientDropCached(c, id, idLen) < 0)
        return -1;
    return clientCallStatus(c, &a);
}

/* OBJ.EXISTS id into *exists (1 or 0). Returns 0, or -1 with the error recorded. */
int objClientExists(ObjClient *c, const void *id, size_t idLen, int *exists)
{
    redisReply *r;
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.EXISTS", id, idLen, &a) < 0)
        return -1;
    if (exists == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientExists: exists is NULL");
    r = clientCall(c, &a);
    if (r == NULL)
        return -1;
    if (r->type != REDIS_REPLY_INTEGER) {
        clientFailShape(c, "OBJ.EXISTS", r);
        freeReplyObject(r);
        return -1;
    }
    *exists = r->integer != 0;
    freeReplyObject(r);
    return clientOk(c);
}

/*
 * OBJ.FETCH id [TIMEOUT ms] (timeoutMs <= 0: the server's default). The reply
 * has one element per id, each a status or an error; an error element
 * becomes this call's error. Returns 0, or -1 with the error recorded.
 */
/*
 * Judge OBJ.FETCH's answer for one id (r may be NULL: the call failed, the
 * error is already recorded). Frees r. Returns 0, or -1 with the error
 * recorded on c.
 */
static int clientFetchVerdict(ObjClient *c, redisReply *r)
{
    const redisReply *elem;
    int rv;

    if (r == NULL)
        return -1;
    if (r->type == REDIS_REPLY_ERROR) {
        rv = clientFailReply(c, r);
    } else if (r->type == REDIS_REPLY_STATUS) {
        rv = clientOk(c);
    } else if (r->type != REDIS_REPLY_ARRAY || r->elements != 1) {
        rv = clientFailShape(c, "OBJ.FETCH", r);
    } else {
        elem = r->element[0];
        if (elem->type == REDIS_REPLY_ERROR)
            rv = clientFailReply(c, elem);
        else if (elem->type == REDIS_REPLY_STATUS || elem->type == REDIS_REPLY_STRING)
            rv = clientOk(c);
        else
            rv = clientFailShape(c, "OBJ.FETCH", elem);
    }
    freeReplyObject(r);
    return rv;
}

int objClientFetch(ObjClient *c, const void *id, size_t idLen, long long timeoutMs)
{
    char timeoutBuf[32];
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.FETCH", id, idLen, &a) < 0)
        return -1;
    if (timeoutMs > 0 && clientAddTimeout(c, &a, timeoutMs, timeoutBuf, sizeof(timeoutBuf)) < 0)
        return -1;
    return clientFetchVerdict(c, clientCall(c, &a));
}

/*
 * Write OBJ.FETCH id to d's node without waiting for the answer (hiredis
 * contexts; any other transport is asked and answered here, in turn).
 * Returns 1 when the answer is still to be read, 0 when d's outcome is
 * known already (d->err set).
 */
static int broadcastSend(ObjBroadcastDest *d, const void *id, size_t idLen, long long timeoutMs)
{
    ObjClient *c = d->client;
    char timeoutBuf[32];
    int done = 0;
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.FETCH", id, idLen, &a) < 0 ||
        (timeoutMs > 0 && clientAddTimeout(c, &a, timeoutMs, timeoutBuf, sizeof(timeoutBuf)) < 0))
        return 0;
    if (c->tr != NULL || !clientConnected(c)) {
        clientFetchVerdict(c, clientCall(c, &a));
        return 0;
    }
    if (redisAppendCommandArgv(c->rc, a.argc, a.argv, a.lens) != REDIS_OK) {
        clientFailIo(c);
        return 0;
    }
    while (!done)
        if (redisBufferWrite(c->rc, &done) != REDIS_OK) {
            clientFailIo(c);
            return 0;
        }
    return 1;
}

/* Copy c's outcome into d. */
static void broadcastNote(ObjBroadcastDest *d)
{
    ObjClient *c = d->client;

    d->err = c ? c->err : OBJ_ERR_BADARG;
    snprintf(d->errMsg, sizeof(d->errMsg), "%.255s",
             c ? c->errstr : "BADARG no client for the node");
}

/* A node that answers NOTFOUND is asked again every BROADCAST_RETRY_MS for
 * up to BROADCAST_NOTFOUND_MS (never past the call's timeout): a put is in
 * the directory a moment after OBJ.PUT returns, and a broadcast right after
 * a put must not fail on that moment. */
#define BROADCAST_NOTFOUND_MS 1000
#define BROADCAST_RETRY_MS    20

/* One round of objClientBroadcast over the dests whose `pending` is set on
 * entry: every one is asked before any answer is awaited, so the nodes
 * fetch at once; then each dest's outcome is noted. */
static void broadcastRound(ObjBroadcastDest *dests, size_t n, const void *id, size_t idLen,
                           long long timeoutMs)
{
    redisReply *r;

    for (size_t i = 0; i < n; i++) {
        ObjBroadcastDest *d = &dests[i];
        if (d->pending)
            d->pending = d->client != NULL ? 1 + broadcastSend(d, id, idLen, timeoutMs) : 1;
    }
    for (size_t i = 0; i < n; i++) {
        ObjBroadcastDest *d = &dests[i];
        if (!d->pending)
            continue;
        if (d->pending == 2) { /* sent: its answer is due */
            if (redisGetReply(d->client->rc, (void **)&r) != REDIS_OK || r == NULL)
                clientFailIo(d->client);
            else
                clientFetchVerdict(d->client, r);
        }
        d->pending = 0;
        broadcastNote(d);
    }
}

int objClientBroadcast(ObjBroadcastDest *dests, size_t n, const void *id, size_t idLen,
                       long long timeoutMs)
{
    long long window =
        timeoutMs > 0 && timeoutMs < BROADCAST_NOTFOUND_MS ? timeoutMs : BROADCAST_NOTFOUND_MS;
    long long start = utilMonoUs() / 1000, total = timeoutMs;
    size_t failed;

    if (dests == NULL && n > 0)
        return -1;
    for (size_t i = 0; i < n; i++)
        dests[i].pending = 1;
    for (;;) {
        broadcastRound(dests, n, id, idLen, timeoutMs);
        size_t again = 0;
        failed = 0;
        for (size_t i = 0; i < n; i++) {
            if (dests[i].err == OBJ_OK)
                continue;
            failed++;
            if (dests[i].err == OBJ_ERR_NOTFOUND && dests[i].client != NULL) {
                dests[i].pending = 1;
                again++;
            }
        }
        long long elapsed = utilMonoUs() / 1000 - start;
        if (!again || elapsed + BROADCAST_RETRY_MS > window)
            break;
        usleep(BROADCAST_RETRY_MS * 1000);
        if (total > 0) { /* what is left of the call's timeout */
            long long left = total - (utilMonoUs() / 1000 - start);
            timeoutMs = left > 1 ? left : 1;
        }
    }
    for (size_t i = 0; i < n; i++)
        dests[i].pending = 0;
    return failed ? -1 : 0;
}

/*
 * Parse OBJ.INFO's checksum (16 hex digits). Returns 0, or -1 if v is
 * anything else.
 */
static int replyToChecksum(const redisReply *v, uint64_t *out)
{
    if (v == NULL || (v->type != REDIS_REPLY_STRING && v->type != REDIS_REPLY_STATUS))
        return -1;
    return utilParseHex64(v->str, v->len, out);
}

/* How long objClientInfo waits for a pending checksum, in ms. */
#define OBJ_INFO_PENDING_MS 60000

/*
 * OBJ.INFO id into *info. sealed is 1 only in state "sealed" (not "created",
 * not "deleting"). A sealed object must carry a checksum; an unsealed one
 * without a parseable checksum reports 0. Returns 0, or -1 with the error
 * recorded and *info untouched.
 */
int objClientInfo(ObjClient *c, const void *id, size_t idLen, ObjInfo *info)
{
    const redisReply *state, *sum;
    ObjInfo tmp = {0};
    redisReply *r;
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.INFO", id, idLen, &a) < 0)
        return -1;
    if (info == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientInfo: info is NULL");
    /* A large object's checksum is taken just after its seal: ask again
     * until it is known (about 1 ms per 10 MiB). */
    for (long long waitedMs = 0;; waitedMs++) {
        r = clientCall(c, &a);
        if (r == NULL)
            return -1;
        sum = replyField(r, "checksum");
        if (!sum || sum->type != REDIS_REPLY_STATUS || sum->len != 7 ||
            memcmp(sum->str, "pending", 7) != 0 || waitedMs >= OBJ_INFO_PENDING_MS)
            break;
        freeReplyObject(r);
        usleep(1000);
        clientIdCommand(c, "OBJ.INFO", id, idLen, &a);
    }
    state = replyField(r, "state");
    if (state == NULL || (state->type != REDIS_REPLY_STRING && state->type != REDIS_REPLY_STATUS)) {
        clientFail(c, OBJ_ERR_IO, "unexpected reply to OBJ.INFO: no state");
        goto out_free_reply;
    }
    tmp.sealed = state->len == 6 && memcmp(state->str, "sealed", 6) == 0;
    if (clientField(c, "OBJ.INFO", r, "size", &tmp.size) < 0 ||
        clientField(c, "OBJ.INFO", r, "meta_size", &tmp.metaSize) < 0 ||
        clientField(c, "OBJ.INFO", r, "offset", &tmp.offset) < 0 ||
        clientField(c, "OBJ.INFO", r, "pins", &tmp.pins) < 0)
        goto out_free_reply;
    if (replyToChecksum(replyField(r, "checksum"), &tmp.checksum) < 0 && tmp.sealed) {
        clientFail(c, OBJ_ERR_IO, "unexpected reply to OBJ.INFO: checksum is not 16 hex digits");
        goto out_free_reply;
    }
    freeReplyObject(r);
    *info = tmp;
    return clientOk(c);

out_free_reply:
    freeReplyObject(r);
    return -1;
}

/* ---- named versions and the cluster-wide delete (since 0.4) -------------------------------- */

/*
 * Send a command of head arguments followed by n more (ids, parts), built
 * in a heap argv as long as it needs. Returns the reply as clientCall does,
 * or NULL with the error recorded (OOM too).
 */
static redisReply *clientCallList(ObjClient *c, CmdArgs *head, const void *const *more,
                                  const size_t *moreLens, size_t n)
{
    size_t argc = (size_t)head->argc + n;
    const char **argv = objMalloc(argc * sizeof(*argv));
    size_t *lens = objMalloc(argc * sizeof(*lens));
    redisReply *r = NULL;

    if (argv == NULL || lens == NULL) {
        clientFail(c, OBJ_ERR_OOM, "OOM cannot build a command of %zu arguments", argc);
        goto out_free;
    }
    for (int i = 0; i < head->argc; i++) {
        argv[i] = head->argv[i];
        lens[i] = head->lens[i];
    }
    for (size_t i = 0; i < n; i++) {
        if (more[i] == NULL && moreLens[i] > 0) {
            clientFail(c, OBJ_ERR_BADARG, "BADARG %s: id %zu is NULL", head->argv[0], i);
            goto out_free;
        }
        argv[(size_t)head->argc + i] = more[i] != NULL ? more[i] : "";
        lens[(size_t)head->argc + i] = moreLens[i];
    }
    r = clientCallArgv(c, (int)argc, argv, lens);
out_free:
    objFree(argv);
    objFree(lens);
    return r;
}

int objClientVersionPublish(ObjClient *c, const void *name, size_t nameLen, uint64_t version,
                            const void *manifest, size_t manifestLen, const void *const *parts,
                            const size_t *partLens, size_t nParts, uint64_t retain)
{
    char verBuf[24], retainBuf[24];
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.VPUBLISH", name, nameLen, &a) < 0)
        return -1;
    if (manifest == NULL && manifestLen > 0)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG OBJ.VPUBLISH: manifest is NULL");
    if (nParts > 0 && (parts == NULL || partLens == NULL))
        return clientFail(c, OBJ_ERR_BADARG, "BADARG OBJ.VPUBLISH: parts is NULL");
    snprintf(verBuf, sizeof(verBuf), "%" PRIu64, version);
    argsAddStr(&a, verBuf);
    argsAdd(&a, manifest, manifestLen);
    if (retain > 0) {
        snprintf(retainBuf, sizeof(retainBuf), "%" PRIu64, retain);
        argsAddStr(&a, "RETAIN");
        argsAddStr(&a, retainBuf);
    }
    if (nParts > 0)
        argsAddStr(&a, "PARTS");
    return clientStatusVerdict(c, "OBJ.VPUBLISH", clientCallList(c, &a, parts, partLens, nParts));
}

/* Take a [version, manifest-id] reply into the caller's out-parameters
 * (the id malloc'ed: objClientFreeData). Frees r. Returns 0, or -1. */
static int clientVersionPair(ObjClient *c, redisReply *r, uint64_t *version, void **manifest,
                             size_t *manifestLen)
{
    if (r == NULL)
        return -1;
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 ||
        r->element[0]->type != REDIS_REPLY_INTEGER || r->element[1]->type != REDIS_REPLY_STRING) {
        clientFailShape(c, "OBJ.VLATEST", r);
        freeReplyObject(r);
        return -1;
    }
    void *copy = objMalloc(r->element[1]->len > 0 ? r->element[1]->len : 1);
    if (copy == NULL) {
        freeReplyObject(r);
        return clientFail(c, OBJ_ERR_OOM, "OOM cannot copy a manifest id");
    }
    memcpy(copy, r->element[1]->str, r->element[1]->len);
    *version = (uint64_t)r->element[0]->integer;
    *manifest = copy;
    *manifestLen = r->element[1]->len;
    freeReplyObject(r);
    return clientOk(c);
}

int objClientVersionLatest(ObjClient *c, const void *name, size_t nameLen, long long newer,
                           long long timeoutMs, uint64_t *version, void **manifest,
                           size_t *manifestLen)
{
    char newerBuf[24], timeoutBuf[32];
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.VLATEST", name, nameLen, &a) < 0)
        return -1;
    if (version == NULL || manifest == NULL || manifestLen == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientVersionLatest: an output is NULL");
    if (newer >= 0) {
        snprintf(newerBuf, sizeof(newerBuf), "%lld", newer);
        argsAddStr(&a, "NEWER");
        argsAddStr(&a, newerBuf);
        if (clientAddTimeout(c, &a, timeoutMs, timeoutBuf, sizeof(timeoutBuf)) < 0)
            return -1;
    }
    return clientVersionPair(c, clientCall(c, &a), version, manifest, manifestLen);
}

int objClientVersionGet(ObjClient *c, const void *name, size_t nameLen, uint64_t version,
                        void **manifest, size_t *manifestLen)
{
    char verBuf[24];
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.VGET", name, nameLen, &a) < 0)
        return -1;
    if (manifest == NULL || manifestLen == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientVersionGet: an output is NULL");
    snprintf(verBuf, sizeof(verBuf), "%" PRIu64, version);
    argsAddStr(&a, verBuf);
    redisReply *r = clientCall(c, &a);
    if (r == NULL)
        return -1;
    if (r->type != REDIS_REPLY_STRING) {
        clientFailShape(c, "OBJ.VGET", r);
        freeReplyObject(r);
        return -1;
    }
    void *copy = objMalloc(r->len > 0 ? r->len : 1);
    if (copy == NULL) {
        freeReplyObject(r);
        return clientFail(c, OBJ_ERR_OOM, "OOM cannot copy a manifest id");
    }
    memcpy(copy, r->str, r->len);
    *manifest = copy;
    *manifestLen = r->len;
    freeReplyObject(r);
    return clientOk(c);
}

int objClientVersionDrop(ObjClient *c, const void *name, size_t nameLen, uint64_t version)
{
    char verBuf[24];
    CmdArgs a;

    if (clientIdCommand(c, "OBJ.VDROP", name, nameLen, &a) < 0)
        return -1;
    snprintf(verBuf, sizeof(verBuf), "%" PRIu64, version);
    argsAddStr(&a, verBuf);
    return clientCallStatus(c, &a);
}

int objClientPurge(ObjClient *c, const void *const *ids, const size_t *idLens, size_t n,
                   size_t *known)
{
    CmdArgs a;

    if (c == NULL)
        return -1;
    if (n == 0 || ids == NULL || idLens == NULL)
        return clientFail(c, OBJ_ERR_BADARG, "BADARG objClientPurge: no ids");
    a.argc = 0;
    argsAddStr(&a, "OBJ.PURGE");
    redisReply *r = clientCallList(c, &a, ids, idLens, n);
    if (r == NULL)
        return -1;
    if (r->type != REDIS_REPLY_INTEGER) {
        clientFailShape(c, "OBJ.PURGE", r);
        freeReplyObject(r);
        return -1;
    }
    if (known != NULL)
        *known = (size_t)r->integer;
    freeReplyObject(r);
    return clientOk(c);
}
