/*
 * objstore.c - the command layer of the C client library (see objstore.h):
 * what every call of the library is built on (objclient_core.h).
 *
 * Every call is one synchronous OBJ.* command over the client's transport
 * (objclient_int.h: hiredis for TCP and unix sockets, or Redis protocol over
 * RDMA), sent as an argv so ids, data and metadata are binary-safe. The
 * zero-copy calls (create, pin) additionally need the node's shared-memory
 * arena: on the first such call the library asks OBJ.STATS for the arena
 * file, maps all of it MAP_SHARED, and from then on turns the offsets the
 * server answers into pointers, after checking that they lie inside the
 * mapping. Copying put/get never map anything, so they work from any
 * machine. The calls themselves: connection.c, objects.c, pins.c,
 * broadcast.c, versions.c.
 *
 * Errors: a server error reply starts with an uppercase code word that is
 * mapped onto ObjErr, and the whole reply text is kept for objClientErrMsg();
 * transport failures become OBJ_ERR_IO. Every call clears the previous error
 * when it succeeds. A context is not thread-safe: use one per thread. As with
 * hiredis, a program that must survive a node vanishing mid-write should
 * ignore SIGPIPE; the library leaves signal dispositions to the program.
 */
#include "objstore.h"
#include "objalloc.h"
#include "objclient_core.h"

#include <errno.h>
#include <fcntl.h>
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

/* ---- errors --------------------------------------------------------------------------- */

/*
 * Record an error with a printf-style message. Can't fail (the message is
 * truncated to the buffer). Returns -1 so callers can `return clientFail(...)`.
 */
int clientFail(ObjClient *c, ObjErr code, const char *fmt, ...)
{
    va_list ap;

    c->err = code;
    va_start(ap, fmt);
    vsnprintf(c->errstr, sizeof(c->errstr), fmt, ap);
    va_end(ap);
    return -1;
}

/* Forget the previous error: every successful call ends here. Returns 0. */
int clientOk(ObjClient *c)
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
int clientFailReply(ObjClient *c, const redisReply *r)
{
    return clientFail(c, clientErrFromReply(r->str, r->len), "%.*s", (int)r->len, r->str);
}

/* Record an I/O error with the transport's description of it. Returns -1. */
int clientFailIo(ObjClient *c)
{
    const char *why = c->tr->errstr(c->conn);

    return clientFail(c, OBJ_ERR_IO, "%s",
                      why && why[0] ? why : "connection failed (no reply from the server)");
}

/* ---- commands --------------------------------------------------------------------------- */

/* Append an argument (the caller keeps it alive until the call). Can't fail:
 * callers never add more than OBJ_CLIENT_MAX_ARGS. */
void argsAdd(CmdArgs *a, const void *p, size_t len)
{
    a->argv[a->argc] = p ? (const char *)p : "";
    a->lens[a->argc] = len;
    a->argc++;
}

/* Append a NUL-terminated argument. Can't fail. */
void argsAddStr(CmdArgs *a, const char *s)
{
    argsAdd(a, s, strlen(s));
}

/* Whether the connection is usable (no transport error so far). */
int clientConnected(const ObjClient *c)
{
    return !c->tr->failed(c->conn);
}

/*
 * Send one command (argc arguments) and wait for its reply. Returns the
 * reply (free it with freeReplyObject) unless it is an error reply or the
 * transport failed: then NULL, with the error recorded. Why: every API call
 * wants exactly this split.
 */
redisReply *clientCallArgv(ObjClient *c, int argc, const char **argv, const size_t *lens)
{
    redisReply *r;

    if (!clientConnected(c)) {
        clientFailIo(c);
        return NULL;
    }
    r = c->tr->command(c->conn, argc, argv, lens);
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
redisReply *clientCall(ObjClient *c, CmdArgs *a)
{
    return clientCallArgv(c, a->argc, a->argv, a->lens);
}

/* Record "the server answered something this library does not understand". Returns -1. */
int clientFailShape(ObjClient *c, const char *cmd, const redisReply *r)
{
    return clientFail(c, OBJ_ERR_IO, "unexpected reply to %s (reply type %d)", cmd, r->type);
}

/*
 * Judge the reply r (NULL: the call failed, the error is recorded) of a
 * command that answers a status (OK, DEFERRED, ...): any status is success.
 * Frees r. Returns 0, or -1 with the error recorded. clientCallStatus
 * sends the command first.
 */
int clientStatusVerdict(ObjClient *c, const char *cmd, redisReply *r)
{
    int rv;

    if (r == NULL)
        return -1;
    rv = r->type == REDIS_REPLY_STATUS ? clientOk(c) : clientFailShape(c, cmd, r);
    freeReplyObject(r);
    return rv;
}

/* See objclient_core.h. */
redisReply *clientExpect(ObjClient *c, const char *cmd, redisReply *r, int type)
{
    if (r == NULL || r->type == type)
        return r;
    clientFailShape(c, cmd, r);
    freeReplyObject(r);
    return NULL;
}

int clientCallStatus(ObjClient *c, CmdArgs *a)
{
    return clientStatusVerdict(c, a->argv[0], clientCall(c, a));
}

/*
 * Send n commands that answer a status reply in one pipeline (all are
 * queued and written together, then the n replies read in order; a
 * transport without pipelining sends them one by one). Every reply is read
 * even after an error reply, so the connection stays in step. Returns 0, or
 * -1 with the first error recorded.
 */
int clientCallPipeline(ObjClient *c, CmdArgs *cmds, int n)
{
    int appended = 0, rv = 0;
    redisReply *r;

    if (!clientConnected(c))
        return clientFailIo(c);
    if (c->tr->append == NULL) {
        for (int i = 0; i < n; i++)
            if (clientCallStatus(c, &cmds[i]) < 0 && rv == 0) {
                rv = -1;
                if (!clientConnected(c))
                    break;
            }
        return rv;
    }
    for (; appended < n; appended++)
        if (c->tr->append(c->conn, cmds[appended].argc, cmds[appended].argv, cmds[appended].lens) <
            0)
            break;
    if (appended < n)
        rv = clientFail(c, OBJ_ERR_OTHER, "out of memory queueing %d pipelined commands", n);
    for (int i = 0; i < appended; i++) {
        if ((r = c->tr->getReply(c->conn)) == NULL)
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
int clientIdCommand(ObjClient *c, const char *cmd, const void *id, size_t idLen, CmdArgs *a)
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
int clientAddTimeout(ObjClient *c, CmdArgs *a, long long timeoutMs, char *buf, size_t bufLen)
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
const redisReply *replyField(const redisReply *r, const char *name)
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
int replyToU64(const redisReply *v, uint64_t *out)
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
int clientField(ObjClient *c, const char *cmd, const redisReply *r, const char *name, uint64_t *out)
{
    if (replyToU64(replyField(r, name), out) < 0)
        return clientFail(c, OBJ_ERR_IO, "unexpected reply to %s: no numeric field '%s'", cmd,
                          name);
    return 0;
}

/* ---- the arena -------------------------------------------------------------------------- */

/*
 * The same-host rule: whether the connection goes to this machine: a
 * loopback peer (a unix socket answers loopback: its transport's addrs), or
 * a peer address equal to the connection's own local address (the kernel
 * picks the destination itself as source for a local address). Why: arena
 * file names are only unique per machine, so a remote node's arena_path may
 * name a different local node's arena, and writing through that mapping
 * would corrupt it. Returns 1 or 0; 0 when unsure.
 */
static int clientSameHost(const ObjClient *c)
{
    struct sockaddr_storage peer, self;

    if (c->tr->addrs(c->conn, &self, &peer) < 0 || peer.ss_family != self.ss_family)
        return 0;
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
int clientMapArena(ObjClient *c)
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
int clientInArena(const ObjClient *c, uint64_t offset, uint64_t len)
{
    return offset <= c->arenaSize && len <= c->arenaSize - offset;
}
