/*
 * engine.c - the transfer engine's thread: its epoll loop, the queue of work
 * from other threads, the connections and peers, the session handshake and
 * the dispatch of frames to the sides it is started with (EngineSide tables;
 * start.c names them). Transports (tcp.c, rdma.c) plug in below through the
 * operations table of transport.h.
 *
 * Why one thread: every connection, transfer and pin the engine holds is
 * touched only here, so none of them needs a lock; the object table's lock
 * is the single point shared with the Redis main thread.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include "engineint.h"
#include "handshake.h"
#include "rdma.h"
#include "tcp.h"
#include "common/util.h"

#define ENGINE_MAX_EVENTS 64
#define ENGINE_TICK_MS    100
/* A connection must finish its handshake this soon after it came up:
 * unauthenticated peers may not hold a socket and its buffers for free. */
#define ENGINE_HANDSHAKE_DEADLINE_US (5LL * 1000 * 1000)
/* Incoming connections allowed in handshake at once, overall and from one
 * source address; past a cap the oldest of them is closed to make room
 * (an honest node opens one per transport and finishes in a round trip,
 * so idle connections cannot shut it out). */
static const HandshakeCaps engineHandshakeCaps = {
    .max = 256,
    .maxPerSource = 16,
    .whyMax = "too many connections in handshake",
    .whyPerSource = "too many connections in handshake from this address",
};
/* A connection whose queued bytes do not move for this long is closed: its
 * peer stopped reading, and what is queued for it pins objects. */
#define ENGINE_SEND_STALL_US (10LL * 1000 * 1000)

/* ---- work queue (any thread -> engine thread) ----------------------------------- */

typedef enum CmdType {
    CMD_SUBMIT,
    CMD_CANCEL,
    CMD_TIMEOUT,
    CMD_DIR_RESULT,
    CMD_NODE_RESULT,
    CMD_READ_MIN
} CmdType;

/* Node addresses the engine remembers from directory answers, so that a
 * FROM hint reaches its node without a directory round trip. Small: a
 * scheduler's hints name a handful of nodes; the oldest entry makes room. */
#define ENGINE_NODE_CACHE 64

typedef struct EngineCmd {
    CmdType type;
    FetchReq *req;
    uint64_t val; /* seq, xid or bytes */
    DirResult *res;
    struct EngineCmd *next;
} EngineCmd;

/* The engine's state: touched by the engine thread only, except the
 * counters (statLock). */
typedef struct Engine {
    EngineConfig cfg;
    const TransportOps *tp[TP_COUNT]; /* NULL where unavailable */
    int epfd, evfd;
    pthread_t thread;
    int running;
    ObjList conns; /* Conn.link, newest first */
    Peer *peers;
    uint64_t nextConnId;
    pthread_mutex_t statLock;
    EngineStats st;
    DirNode nodeCache[ENGINE_NODE_CACHE]; /* name "" = free slot */
    int nodeCacheNext;                    /* the slot the next newcomer takes */
} Engine;

static Engine eng;

/* ---- the sides: handler tables of the requesting and answering sides ---------- */

#define ENGINE_MAX_SIDES 4
static const EngineSide *sides[ENGINE_MAX_SIDES];
static int nSides;

/* Call the handler `fn` of every side that has one, with the arguments. */
#define ENGINE_EACH_SIDE(fn, ...)                                                                  \
    do {                                                                                           \
        for (int s_ = 0; s_ < nSides; s_++)                                                        \
            if (sides[s_]->fn)                                                                     \
                sides[s_]->fn(__VA_ARGS__);                                                        \
    } while (0)

/* A READY connection's frame of a request type: the one side that handles
 * that type gets it; an ERROR naming a request goes to every side that
 * handles ERROR (each knows its own reqIds and ignores the others). Returns
 * the answer (-1 if any side's is), or -1 (logged) when no side takes it. */
static int engineDispatchFrame(Conn *c, const WireMsg *m)
{
    if (m->h.type == WIRE_ERROR) {
        int rc = 0, taken = 0;
        for (int i = 0; i < nSides && c->state == CONN_READY; i++) {
            if (sides[i]->onFrame[WIRE_ERROR]) {
                taken = 1;
                if (sides[i]->onFrame[WIRE_ERROR](c, m) == -1)
                    rc = -1;
            }
        }
        if (taken)
            return rc;
    }
    for (int i = 0; i < nSides; i++)
        if (sides[i]->onFrame[m->h.type])
            return sides[i]->onFrame[m->h.type](c, m);
    engineLog("warning", "%s: unexpected %s", c->desc, wireTypeName(m->h.type));
    return -1;
}

/* ---- the queue from the Redis thread ------------------------------------------- */

static pthread_mutex_t queueLock = PTHREAD_MUTEX_INITIALIZER;
static EngineCmd *queueHead, *queueTail;
static uint64_t nextSeq = 1;
/* REPLs queued (ReplReq.link): linked in place, so that queueing one cannot
 * fail and its answer always comes on the engine thread. */
static ObjList replQueue = {&replQueue, &replQueue};

/* Queue a command and wake the loop. Can't fail except on OOM, where the
 * command is dropped with a log line (a cancel lost this way only delays
 * cleanup to the transfer's own end). */
static void enginePost(EngineCmd *cmd)
{
    uint64_t one = 1;

    pthread_mutex_lock(&queueLock);
    cmd->next = NULL;
    if (queueTail)
        queueTail->next = cmd;
    else
        queueHead = cmd;
    queueTail = cmd;
    pthread_mutex_unlock(&queueLock);
    if (write(eng.evfd, &one, sizeof(one)) != sizeof(one) && errno != EAGAIN)
        engineLog("warning", "cannot wake the engine: %s", strerror(errno));
}

static EngineCmd *cmdNew(CmdType type)
{
    EngineCmd *c = calloc(1, sizeof(*c));
    if (c)
        c->type = type;
    else
        engineLog("warning", "out of memory queueing engine work");
    return c;
}

void engineSubmitFetch(FetchReq *req)
{
    EngineCmd *c = cmdNew(CMD_SUBMIT);

    pthread_mutex_lock(&queueLock);
    req->seq = nextSeq++;
    pthread_mutex_unlock(&queueLock);
    if (!c) {
        for (size_t i = 0; i < req->n; i++)
            snprintf(req->items[i].err, sizeof(req->items[i].err), "OOM out of memory");
        engineFetchDone(req);
        return;
    }
    c->req = req;
    enginePost(c);
}

void engineFetchDone(FetchReq *req)
{
    if (req->done)
        req->done(req);
    else
        eng.cfg.onFetchDone(req);
}

void engineSubmitRepl(ReplReq *r)
{
    uint64_t one = 1;

    if (!__atomic_load_n(&eng.running, __ATOMIC_ACQUIRE)) { /* no thread would ever answer */
        pthread_mutex_lock(&queueLock);
        r->seq = nextSeq++;
        pthread_mutex_unlock(&queueLock);
        r->ok = 0;
        snprintf(r->err, sizeof(r->err), "UNAVAILABLE the transfer engine is not running");
        if (eng.cfg.onReplDone)
            eng.cfg.onReplDone(r);
        return;
    }
    pthread_mutex_lock(&queueLock);
    r->seq = nextSeq++;
    objListPushBack(&replQueue, &r->link);
    pthread_mutex_unlock(&queueLock);
    if (write(eng.evfd, &one, sizeof(one)) != sizeof(one) && errno != EAGAIN)
        engineLog("warning", "cannot wake the engine: %s", strerror(errno));
}

void engineCancelFetch(uint64_t seq, int timedOut)
{
    EngineCmd *c = cmdNew(timedOut ? CMD_TIMEOUT : CMD_CANCEL);
    if (c) {
        c->val = seq;
        enginePost(c);
    }
}

void engineSetRdmaReadMin(uint64_t bytes)
{
    EngineCmd *c = cmdNew(CMD_READ_MIN);
    if (c) {
        c->val = bytes;
        enginePost(c);
    }
}

/* Directory callback (directory thread): hand the result to the engine. */
static void engineDirResult(DirResult *res, void *arg)
{
    EngineCmd *c = cmdNew(CMD_DIR_RESULT);

    if (!c) {
        dirResultFree(res);
        return;
    }
    c->val = (uint64_t)(uintptr_t)arg;
    c->res = res;
    enginePost(c);
}

void engineLookup(uint64_t xid, const char *id, size_t idLen)
{
    dirLookup(id, idLen, engineDirResult, (void *)(uintptr_t)xid);
}

/* Directory callback of a node lookup (directory thread): hand it over. */
static void engineDirNodeResult(DirResult *res, void *arg)
{
    EngineCmd *c = cmdNew(CMD_NODE_RESULT);

    (void)arg;
    if (!c) {
        dirResultFree(res);
        return;
    }
    c->res = res;
    enginePost(c);
}

void engineLookupNode(const char *name)
{
    dirLookupNode(name, strlen(name), engineDirNodeResult, NULL);
}

const DirNode *engineNodeCached(const char *name)
{
    for (int i = 0; i < ENGINE_NODE_CACHE; i++)
        if (eng.nodeCache[i].name[0] && !strcmp(eng.nodeCache[i].name, name))
            return &eng.nodeCache[i];
    return NULL;
}

void engineNodeForget(const char *name)
{
    DirNode *n = (DirNode *)engineNodeCached(name);

    if (n)
        n->name[0] = '\0';
}

/* Remember (or refresh) the address of a node a directory answer named. */
static void engineNodeRemember(const DirNode *node)
{
    DirNode *n = (DirNode *)engineNodeCached(node->name);

    if (!node->name[0])
        return;
    if (!n) {
        n = &eng.nodeCache[eng.nodeCacheNext];
        eng.nodeCacheNext = (eng.nodeCacheNext + 1) % ENGINE_NODE_CACHE;
    }
    *n = *node;
}

/* Cache the node addresses a directory answer carries. */
static void engineNodesFromResult(const DirResult *res)
{
    if (res->status != DIR_FOUND)
        return;
    for (size_t i = 0; i < res->count; i++)
        engineNodeRemember(&res->nodes[i]);
}

static void engineDrainQueue(void)
{
    uint64_t n;
    EngineCmd *c;

    if (read(eng.evfd, &n, sizeof(n)) < 0 && errno != EAGAIN)
        engineLog("warning", "eventfd read: %s", strerror(errno));
    ObjList repls = {&repls, &repls};
    pthread_mutex_lock(&queueLock);
    c = queueHead;
    queueHead = queueTail = NULL;
    objListSpliceBack(&repls, &replQueue);
    pthread_mutex_unlock(&queueLock);
    for (ObjListLink *l; (l = objListPopFront(&repls));)
        ENGINE_EACH_SIDE(submitRepl, objListEntry(l, ReplReq, link));
    while (c) {
        EngineCmd *next = c->next;
        switch (c->type) {
            case CMD_SUBMIT:
                ENGINE_EACH_SIDE(submit, c->req);
                break;
            case CMD_CANCEL:
                ENGINE_EACH_SIDE(cancel, c->val, 0);
                break;
            case CMD_TIMEOUT:
                ENGINE_EACH_SIDE(cancel, c->val, 1);
                break;
            case CMD_DIR_RESULT:
                engineNodesFromResult(c->res);
                ENGINE_EACH_SIDE(dirResult, c->val, c->res);
                break;
            case CMD_NODE_RESULT:
                engineNodesFromResult(c->res);
                ENGINE_EACH_SIDE(nodeResult, c->res);
                dirResultFree(c->res);
                break;
            case CMD_READ_MIN:
                eng.cfg.rdmaReadMin = c->val;
                break;
        }
        free(c);
        c = next;
    }
}

/* ---- epoll registrations ---------------------------------------------------------- */

typedef struct Watch {
    EngineFdFn *fn;
    void *arg;
    int fd;
} Watch;

static Watch **watches; /* indexed by fd */
static int watchCap;

static int watchSet(int fd, uint32_t events, EngineFdFn *fn, void *arg, int op)
{
    if (fd >= watchCap) {
        int ncap = fd + 64;
        Watch **nw = realloc(watches, (size_t)ncap * sizeof(*nw));
        if (!nw)
            return -1;
        memset(nw + watchCap, 0, (size_t)(ncap - watchCap) * sizeof(*nw));
        watches = nw;
        watchCap = ncap;
    }
    Watch *w = watches[fd];
    if (!w && !(w = calloc(1, sizeof(*w))))
        return -1;
    w->fn = fn;
    w->arg = arg;
    w->fd = fd;
    watches[fd] = w;
    struct epoll_event ev = {.events = events, .data.ptr = w};
    if (epoll_ctl(eng.epfd, op, fd, &ev) == -1) {
        engineLog("warning", "epoll_ctl(fd %d): %s", fd, strerror(errno));
        if (op == EPOLL_CTL_ADD) {
            free(w);
            watches[fd] = NULL;
        }
        return -1;
    }
    return 0;
}

int engineWatch(int fd, uint32_t events, EngineFdFn *fn, void *arg)
{
    return watchSet(fd, events, fn, arg, EPOLL_CTL_ADD);
}

int engineModify(int fd, uint32_t events, EngineFdFn *fn, void *arg)
{
    return watchSet(fd, events, fn, arg, EPOLL_CTL_MOD);
}

void engineUnwatch(int fd)
{
    if (fd < 0 || fd >= watchCap || !watches[fd])
        return;
    epoll_ctl(eng.epfd, EPOLL_CTL_DEL, fd, NULL);
    /* The Watch may be among the events of the current epoll_wait batch:
     * keep it allocated but inert; it is reused or freed at shutdown. */
    watches[fd]->fn = NULL;
}

/* ---- logging and stats ------------------------------------------------------------ */

void engineLog(const char *level, const char *fmt, ...)
{
    char msg[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (eng.cfg.log)
        eng.cfg.log(level, msg);
}

const EngineConfig *engineConfig(void)
{
    return &eng.cfg;
}

const TransportOps *engineTransport(int tp)
{
    return tp >= 0 && tp < TP_COUNT ? eng.tp[tp] : NULL;
}

EngineStats *engineStatsBegin(void)
{
    pthread_mutex_lock(&eng.statLock);
    return &eng.st;
}

void engineStatsEnd(void)
{
    pthread_mutex_unlock(&eng.statLock);
}

EngineTransportStats *engineTpStats(int tp)
{
    return tp == TP_RDMA ? &eng.st.rdma : &eng.st.tcp;
}

int engineTransportFor(const DirNode *n, FetchVia via, char *err, size_t errLen)
{
    int rdmaOk = eng.tp[TP_RDMA] && (n->features & OBJ_FEAT_RDMA) && n->rdmaPort > 0;
    int tcpOk = eng.tp[TP_TCP] && n->tcpPort > 0;

    if (via == FETCH_VIA_RDMA) {
        if (rdmaOk)
            return TP_RDMA;
        snprintf(err, errLen, "NOTSUPPORTED node '%.64s' cannot be reached over RDMA", n->name);
        return -1;
    }
    if (via == FETCH_VIA_AUTO && rdmaOk)
        return TP_RDMA;
    if (tcpOk)
        return TP_TCP;
    if (!eng.tp[TP_TCP])
        snprintf(err, errLen, "NOTSUPPORTED TCP transfers are off on this node (transfer-port 0)");
    else
        snprintf(err, errLen, "NOTSUPPORTED node '%.64s' has no TCP transfer port", n->name);
    return -1;
}

int engineTpIndex(const TransportOps *ops)
{
    return ops == eng.tp[TP_RDMA] && ops ? TP_RDMA : TP_TCP;
}

void engineGetStats(EngineStats *st)
{
    pthread_mutex_lock(&eng.statLock);
    *st = eng.st;
    pthread_mutex_unlock(&eng.statLock);
}

void engineCountBadFrame(void)
{
    pthread_mutex_lock(&eng.statLock);
    eng.st.badFrames++;
    pthread_mutex_unlock(&eng.statLock);
}

int engineConnBusy(const Conn *c)
{
    return c->pins >= ENGINE_CONN_PINS_MAX;
}

int engineRdmaEnabled(void)
{
    return eng.tp[TP_RDMA] != NULL;
}

uint64_t engineNextConnId(void)
{
    return ++eng.nextConnId;
}

/* ---- connections and peers ---------------------------------------------------------- */

int engineSend(Conn *c, WireMsg *m, const void *payload, size_t len, void *cookie)
{
    if (c->state == CONN_CLOSED)
        return -1;
    return c->ops->send(c, m, payload, len, cookie);
}

void engineSendError(Conn *c, uint64_t reqId, WireErr code, const char *text)
{
    WireMsg m = {.h = {.type = WIRE_ERROR, .reqId = reqId}};

    m.u.error.code = (uint16_t)code;
    m.u.error.text = text;
    m.u.error.textLen = (uint16_t)strnlen(text, OBJ_WIRE_TEXT_MAX);
    engineSend(c, &m, NULL, 0, NULL);
}

static Peer *peerGet(const char *name)
{
    Peer *p;

    for (p = eng.peers; p; p = p->next)
        if (!strcmp(p->name, name))
            return p;
    p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    snprintf(p->name, sizeof(p->name), "%s", name);
    p->next = eng.peers;
    eng.peers = p;
    return p;
}

Conn *engineConnExisting(const char *name, int tp)
{
    for (Peer *p = eng.peers; p; p = p->next)
        if (!strcmp(p->name, name))
            return p->conn[tp];
    return NULL;
}

Conn *engineConnFor(const DirNode *node, int tp, char *err, size_t errLen)
{
    const TransportOps *ops = eng.tp[tp];
    Peer *p = peerGet(node->name);

    if (!ops) {
        snprintf(err, errLen, "%s is not enabled on this node", tp == TP_RDMA ? "RDMA" : "TCP");
        return NULL;
    }
    if (!p) {
        snprintf(err, errLen, "out of memory");
        return NULL;
    }
    if (p->conn[tp])
        return p->conn[tp];
    const char *addr = tp == TP_RDMA ? node->rdmaAddr : node->addr;
    int port = tp == TP_RDMA ? node->rdmaPort : node->tcpPort;
    Conn *c = ops->connect(p, addr, port, err, errLen);
    if (!c)
        return NULL;
    c->outgoing = 1;
    c->peer = p;
    snprintf(c->peerName, sizeof(c->peerName), "%s", node->name);
    objListPushFront(&eng.conns, &c->link);
    p->conn[tp] = c;
    pthread_mutex_lock(&eng.statLock);
    eng.st.connections++;
    pthread_mutex_unlock(&eng.statLock);
    return c;
}

/* The feature bits this node puts in its HELLO. */
static uint16_t engineFeatures(void)
{
    return (uint16_t)((eng.tp[TP_TCP] ? OBJ_FEAT_TCP : 0) | (eng.tp[TP_RDMA] ? OBJ_FEAT_RDMA : 0) |
                      (eng.cfg.encrypt ? OBJ_FEAT_ENCRYPT : 0));
}

/* The handshake of c as this node sees it, for wireProof. The connector's
 * peerName is the name it dialled (the acceptor's HELLO must match it); the
 * acceptor knows only that it was dialled as itself. */
static WireTranscript engineTranscript(const Conn *c)
{
    WireTranscript t = {.dialled = c->outgoing ? c->peerName : eng.cfg.nodeName};

    if (c->outgoing) {
        t.connector = eng.cfg.nodeName, t.acceptor = c->peerName;
        t.connectorFeatures = engineFeatures(), t.acceptorFeatures = (uint16_t)c->peerFeatures;
        t.nonceConnector = c->nonce, t.nonceAcceptor = c->peerNonce;
    } else {
        t.connector = c->peerName, t.acceptor = eng.cfg.nodeName;
        t.connectorFeatures = (uint16_t)c->peerFeatures, t.acceptorFeatures = engineFeatures();
        t.nonceConnector = c->peerNonce, t.nonceAcceptor = c->nonce;
    }
    return t;
}

static void engineProof(const Conn *c, WireRole role, uint8_t out[OBJ_WIRE_PROOF])
{
    WireTranscript t = engineTranscript(c);
    wireProof(eng.cfg.secret, strlen(eng.cfg.secret), role, &t, out);
}

/* Key c's session MAC (wire.h) from the handshake that just proved the
 * secret both ways: proofAcceptor from the acceptor's HELLO, proofConnector
 * from the connector's AUTH. From here on everything c sends is sealed and
 * everything it receives must be. Returns 0, or -1 to close the conn. */
static int engineKeySession(Conn *c, const uint8_t proofAcceptor[OBJ_WIRE_PROOF],
                            const uint8_t proofConnector[OBJ_WIRE_PROOF])
{
    WireTranscript t = engineTranscript(c);
    uint8_t c2a[OBJ_WIRE_KEY], a2c[OBJ_WIRE_KEY];

    /* Encrypted payloads when either side asks, on TCP only: the RDMA
     * transport authenticates (its large objects are read by the peer). */
    int encrypt =
        c->ops == eng.tp[TP_TCP] && (eng.cfg.encrypt || (c->peerFeatures & OBJ_FEAT_ENCRYPT) != 0);
    int keyed = -1;

    if (wireSessionKeys(eng.cfg.secret, strlen(eng.cfg.secret), &t, proofAcceptor, proofConnector,
                        c2a, a2c) == 0) {
        const uint8_t *txKey = c->outgoing ? c2a : a2c, *rxKey = c->outgoing ? a2c : c2a;
        c->txMac = wireMacNew(txKey);
        c->rxMac = wireMacNew(rxKey);
        keyed = c->txMac && c->rxMac ? 0 : -1;
        if (keyed == 0 && encrypt &&
            (wireMacSetEncrypt(c->txMac, txKey, WIRE_CRYPT_ENCRYPT) == -1 ||
             wireMacSetEncrypt(c->rxMac, rxKey, WIRE_CRYPT_DECRYPT) == -1))
            keyed = -1;
    }
    OPENSSL_cleanse(c2a, sizeof(c2a));
    OPENSSL_cleanse(a2c, sizeof(a2c));
    if (keyed == 0) {
        if (encrypt) {
            pthread_mutex_lock(&eng.statLock);
            eng.st.encryptedSessions++;
            pthread_mutex_unlock(&eng.statLock);
        }
        return 0;
    }
    engineLog("warning", "%s: cannot key the session MAC (libcrypto failed)", c->desc);
    snprintf(c->failWhy, sizeof(c->failWhy), "cannot key the session MAC");
    return -1;
}

/* Send our HELLO: the connector's carries no proof (it has not seen the
 * acceptor's nonce yet); the acceptor's proves the secret over the transcript. */
static int sendHello(Conn *c)
{
    WireMsg m = {.h = {.type = WIRE_HELLO}};

    m.u.hello.magic = OBJ_WIRE_MAGIC;
    m.u.hello.version = OBJ_WIRE_VERSION;
    m.u.hello.features = engineFeatures();
    memcpy(m.u.hello.nonce, c->nonce, OBJ_WIRE_NONCE);
    if (!c->outgoing)
        engineProof(c, WIRE_ROLE_ACCEPTOR, m.u.hello.proof);
    m.u.hello.name = eng.cfg.nodeName;
    m.u.hello.nameLen = (uint16_t)strlen(eng.cfg.nodeName);
    return engineSend(c, &m, NULL, 0, NULL);
}

/* Log a refused connection (desc: who), at most once a second (a flood must
 * not flood the log too), and count it (transfer_refused_connections: it
 * sent no bad frame, it only came when there was no room or took too
 * long). Transports call it through their host table for what they refuse
 * before a Conn exists. */
static void engineRefused(const char *desc, const char *why)
{
    static int64_t lastUs;
    static uint64_t quiet;
    int64_t now = utilMonoUs();

    pthread_mutex_lock(&eng.statLock);
    eng.st.refusedConnections++;
    pthread_mutex_unlock(&eng.statLock);
    if (lastUs && now - lastUs < 1000000) {
        quiet++;
        return;
    }
    engineLog("warning", "%s: closed: %s (%llu more refused since the last such line)", desc, why,
              (unsigned long long)quiet);
    lastUs = now;
    quiet = 0;
}

static void engineRefuseLog(const Conn *c, const char *why)
{
    engineRefused(c->desc, why);
}

/* Room for one more incoming connection c in its handshake: NULL when it
 * fits; else the unproved incoming connection that gives way for it (the
 * oldest from c's address, or the oldest of all), with why the caps were
 * met in *why. */
static Conn *engineHandshakeVictim(const Conn *c, const char **why)
{
    int all = 0, same = 0;
    Conn *oldest = NULL, *oldestSame = NULL;
    ObjListLink *l;

    /* Newest first: the last one seen is the oldest. */
    objListForEach(&eng.conns, l) {
        Conn *o = objListEntry(l, Conn, link);
        if (o->outgoing || o == c || o->state != CONN_HANDSHAKE)
            continue;
        all++;
        oldest = o;
        if (c->source[0] && !strcmp(o->source, c->source)) {
            same++;
            oldestSame = o;
        }
    }
    *why = handshakeVerdict(&engineHandshakeCaps, all, same);
    switch (handshakeEvict(&engineHandshakeCaps, all, same)) {
        case HANDSHAKE_EVICT_SAME:
            return oldestSame;
        case HANDSHAKE_EVICT_ANY:
            return oldest;
        default:
            return NULL;
    }
}

void engineOnUp(Conn *c)
{
    c->state = CONN_HANDSHAKE;
    c->upUs = utilMonoUs(); /* the deadline counts from here, not from the dial */
    if (getrandom(c->nonce, sizeof(c->nonce), 0) != sizeof(c->nonce)) {
        c->ops->close(c, "no randomness for the handshake nonce");
        return;
    }
    if (!c->outgoing) {
        const char *full = NULL;
        Conn *victim = engineHandshakeVictim(c, &full);
        objListPushFront(&eng.conns, &c->link);
        pthread_mutex_lock(&eng.statLock);
        eng.st.connections++;
        pthread_mutex_unlock(&eng.statLock);
        if (victim) {
            /* Unproved connections never shut out a newcomer: the oldest
             * gives way (a real node's handshake is one round trip). */
            char why[160];
            snprintf(why, sizeof(why), "%s (%s): the oldest gives way to a newcomer", full,
                     victim->source[0] ? victim->source : "?");
            engineRefuseLog(victim, why);
            victim->ops->close(victim, why);
        } else if (full) {
            char why[128];
            snprintf(why, sizeof(why), "%s (%s)", full, c->source[0] ? c->source : "?");
            engineRefuseLog(c, why);
            c->ops->close(c, why);
        }
    } else if (sendHello(c) == -1) {
        c->ops->close(c, "cannot send HELLO");
    }
}

/* Is the HELLO name of m exactly name? */
static int helloNameIs(const WireMsg *m, const char *name)
{
    return strlen(name) == m->u.hello.nameLen && !memcmp(name, m->u.hello.name, m->u.hello.nameLen);
}

/* c's peer proved the secret: let its transport set up what it keeps for
 * authenticated peers only. Returns 0, or -1 to close the connection. */
static int engineAuthenticated(Conn *c)
{
    if (!c->ops->authenticated || c->ops->authenticated(c) == 0)
        return 0;
    snprintf(c->failWhy, sizeof(c->failWhy), "cannot set up the authenticated session");
    return -1;
}

/* The handshake steps; returns 0, or -1 to close the connection. */
static int engineHandshake(Conn *c, const WireMsg *m)
{
    uint8_t proof[OBJ_WIRE_PROOF];

    if (m->h.type == WIRE_HELLO && memchr(m->u.hello.name, '\0', m->u.hello.nameLen)) {
        engineLog("warning", "%s: HELLO name holds a NUL byte", c->desc);
        engineSendError(c, 0, WIRE_ERR_PROTO, "HELLO name holds a NUL byte");
        return -1;
    }
    if (!c->outgoing && m->h.type == WIRE_HELLO && !c->helloSeen) {
        if (helloNameIs(m, eng.cfg.nodeName)) {
            engineLog("warning", "%s: HELLO claims this node's own name '%s': refused", c->desc,
                      eng.cfg.nodeName);
            engineSendError(c, 0, WIRE_ERR_AUTH, "that is this node's own name");
            return -1;
        }
        c->helloSeen = 1;
        memcpy(c->peerNonce, m->u.hello.nonce, OBJ_WIRE_NONCE);
        snprintf(c->peerName, sizeof(c->peerName), "%.*s", (int)m->u.hello.nameLen,
                 m->u.hello.name);
        c->peerFeatures = m->u.hello.features;
        return sendHello(c);
    }
    if (!c->outgoing && m->h.type == WIRE_AUTH && c->helloSeen) {
        engineProof(c, WIRE_ROLE_CONNECTOR, proof);
        if (!wireProofEqual(proof, m->u.auth.proof)) {
            engineLog("warning", "%s: node '%s' failed the cluster-secret proof", c->desc,
                      c->peerName);
            engineSendError(c, 0, WIRE_ERR_AUTH, "cluster secret mismatch");
            return -1;
        }
        uint8_t mine[OBJ_WIRE_PROOF];
        engineProof(c, WIRE_ROLE_ACCEPTOR, mine); /* what our HELLO carried */
        if (engineKeySession(c, mine, m->u.auth.proof) == -1)
            return -1;
        c->state = CONN_READY;
        return engineAuthenticated(c);
    }
    if (c->outgoing && m->h.type == WIRE_HELLO) {
        if (!helloNameIs(m, c->peerName)) {
            engineLog("warning", "%s: dialled '%s' but the peer answered as '%.*s': refused",
                      c->desc, c->peerName, (int)m->u.hello.nameLen, m->u.hello.name);
            snprintf(c->failWhy, sizeof(c->failWhy), "the peer answered under another name");
            engineSendError(c, 0, WIRE_ERR_AUTH, "not the node that was dialled");
            return -1;
        }
        memcpy(c->peerNonce, m->u.hello.nonce, OBJ_WIRE_NONCE);
        c->peerFeatures = m->u.hello.features;
        engineProof(c, WIRE_ROLE_ACCEPTOR, proof);
        if (!wireProofEqual(proof, m->u.hello.proof)) {
            engineLog("warning", "%s: peer '%s' failed the cluster-secret proof", c->desc,
                      c->peerName);
            snprintf(c->failWhy, sizeof(c->failWhy), "cluster secret mismatch");
            engineSendError(c, 0, WIRE_ERR_AUTH, "cluster secret mismatch");
            return -1;
        }
        WireMsg a = {.h = {.type = WIRE_AUTH}};
        engineProof(c, WIRE_ROLE_CONNECTOR, a.u.auth.proof);
        if (engineSend(c, &a, NULL, 0, NULL) == -1 ||
            engineKeySession(c, m->u.hello.proof, a.u.auth.proof) == -1)
            return -1;
        c->state = CONN_READY;
        if (engineAuthenticated(c) == -1)
            return -1;
        ENGINE_EACH_SIDE(connReady, c);
        return 0;
    }
    if (m->h.type == WIRE_ERROR) {
        engineLog("warning", "%s: peer refused the session: %.*s", c->desc, (int)m->u.error.textLen,
                  m->u.error.text);
        return -1;
    }
    engineLog("warning", "%s: unexpected %s during the handshake", c->desc,
              wireTypeName(m->h.type));
    return -1;
}

int engineOnFrame(Conn *c, const WireMsg *m)
{
    int rc = -1;

    if (c->state == CONN_HANDSHAKE)
        rc = engineHandshake(c, m);
    else if (c->state != CONN_READY)
        engineLog("warning", "%s: %s arrived before the connection was up", c->desc,
                  wireTypeName(m->h.type));
    else if (c->state == CONN_READY) {
        switch (m->h.type) {
            case WIRE_ERROR:
                if (m->h.reqId == 0) { /* the session failed, not a request */
                    engineLog("warning", "%s: peer error: %.*s", c->desc, (int)m->u.error.textLen,
                              m->u.error.text);
                    rc = -1;
                    break;
                }
                rc = engineDispatchFrame(c, m);
                break;
            case WIRE_FETCH:
            case WIRE_FETCHR:
            case WIRE_REPL:
            case WIRE_HELD:
            case WIRE_DONE:
            case WIRE_DATA:
            case WIRE_RNDV:
            case WIRE_PART:
            case WIRE_RPART:
                rc = engineDispatchFrame(c, m);
                break;
            case WIRE_PING: {
                WireMsg p = {.h = {.type = WIRE_PONG, .reqId = m->h.reqId}};
                rc = engineSend(c, &p, NULL, 0, NULL);
                break;
            }
            case WIRE_PONG:
                rc = 0;
                break;
            default:
                engineLog("warning", "%s: unexpected %s", c->desc, wireTypeName(m->h.type));
                rc = -1;
        }
    }
    if (rc == -1) {
        pthread_mutex_lock(&eng.statLock);
        eng.st.badFrames++;
        pthread_mutex_unlock(&eng.statLock);
    }
    return rc;
}

void engineOnPayloadDone(Conn *c)
{
    ENGINE_EACH_SIDE(payloadDone, c);
}

static void engineOnPayloadMoved(Conn *c)
{
    ENGINE_EACH_SIDE(payloadMoved, c);
}

void engineOnSendDone(Conn *c, void *cookie)
{
    ENGINE_EACH_SIDE(sendDone, c, cookie);
}

void engineOnReadDone(Conn *c, void *cookie, int ok, const uint64_t *sum)
{
    ENGINE_EACH_SIDE(readDone, c, cookie, ok, sum);
}

void engineOnClosed(Conn *c, const char *why)
{
    if (c->state != CONN_CLOSED && why)
        engineLog(c->state == CONN_READY ? "notice" : "verbose", "%s (%s): closed: %s", c->desc,
                  c->peerName[0] ? c->peerName : "?", why);
    c->state = CONN_CLOSED;
    wireMacFree(c->txMac);
    wireMacFree(c->rxMac);
    c->txMac = c->rxMac = NULL;
    if (c->link.next) /* not before the engine linked it */
        objListUnlink(&c->link);
    if (c->peer) {
        for (int i = 0; i < TP_COUNT; i++)
            if (c->peer->conn[i] == c)
                c->peer->conn[i] = NULL;
    }
    ENGINE_EACH_SIDE(connClosed, c);
}

/* Periodic: close connections that took too long to authenticate, and
 * those whose peer stopped reading what is queued for it (which releases
 * their pins). One close per pass over the list, which it changes. */
static void engineConnTick(void)
{
    int64_t now = utilMonoUs();
    int again = 1;

    while (again) {
        again = 0;
        ObjListLink *l;
        objListForEach(&eng.conns, l) {
            Conn *c = objListEntry(l, Conn, link);
            char why[128];
            if (c->state == CONN_HANDSHAKE && now - c->upUs > ENGINE_HANDSHAKE_DEADLINE_US) {
                snprintf(why, sizeof(why), "handshake not finished within %lld s",
                         ENGINE_HANDSHAKE_DEADLINE_US / 1000000);
                if (!c->outgoing)
                    engineRefuseLog(c, why);
                else
                    snprintf(c->failWhy, sizeof(c->failWhy), "%.95s", why);
            } else if (c->txStallSinceUs && now - c->txStallSinceUs > ENGINE_SEND_STALL_US) {
                snprintf(why, sizeof(why), "peer read nothing of its queued frames in %lld s",
                         ENGINE_SEND_STALL_US / 1000000);
                engineLog("warning", "%s (%s): %s: closing", c->desc,
                          c->peerName[0] ? c->peerName : "?", why);
            } else {
                continue;
            }
            c->ops->close(c, why);
            again = 1;
            break;
        }
    }
}

/* ---- the thread ------------------------------------------------------------------ */

static void *engineMain(void *arg)
{
    struct epoll_event evs[ENGINE_MAX_EVENTS];
    int64_t lastTick = utilMonoUs();

    (void)arg;
    pthread_setname_np(pthread_self(), "obj-engine"); /* top -H, perf */
    while (__atomic_load_n(&eng.running, __ATOMIC_ACQUIRE)) {
        int64_t now = utilMonoUs();
        if (now - lastTick >= ENGINE_TICK_MS * 1000) {
            lastTick = now;
            ENGINE_EACH_SIDE(tick);
            for (int i = 0; i < TP_COUNT; i++)
                if (eng.tp[i] && eng.tp[i]->tick)
                    eng.tp[i]->tick();
            engineConnTick();
        }
        int n = epoll_wait(eng.epfd, evs, ENGINE_MAX_EVENTS, ENGINE_TICK_MS);
        if (n == -1 && errno != EINTR) {
            engineLog("warning", "epoll_wait: %s", strerror(errno));
            break;
        }
        for (int i = 0; i < n; i++) {
            Watch *w = evs[i].data.ptr;
            if (w == NULL)
                engineDrainQueue();
            else if (w->fn)
                w->fn(w->arg, evs[i].events);
        }
    }
    return NULL;
}

/* What the transports may ask of the core: they are given this table and
 * never name the functions behind it. */
static const TransportHost engineHost = {
    .watch = engineWatch,
    .modify = engineModify,
    .unwatch = engineUnwatch,
    .nextConnId = engineNextConnId,
    .countBadFrame = engineCountBadFrame,
    .refused = engineRefused,
    .connBusy = engineConnBusy,
    .onUp = engineOnUp,
    .onFrame = engineOnFrame,
    .onPayloadDone = engineOnPayloadDone,
    .onPayloadMoved = engineOnPayloadMoved,
    .onSendDone = engineOnSendDone,
    .onReadDone = engineOnReadDone,
    .onClosed = engineOnClosed,
    .log = engineLog,
};

int engineStartWith(const EngineConfig *cfg, const EngineSide *const *with, int n, char *err,
                    size_t errLen)
{
    if (n > ENGINE_MAX_SIDES) {
        snprintf(err, errLen, "the engine takes at most %d sides", ENGINE_MAX_SIDES);
        return -1;
    }
    memset(&eng, 0, sizeof(eng));
    objListInit(&eng.conns);
    eng.cfg = *cfg;
    for (nSides = 0; nSides < n; nSides++)
        sides[nSides] = with[nSides];
    pthread_mutex_init(&eng.statLock, NULL);
    eng.epfd = epoll_create1(EPOLL_CLOEXEC);
    eng.evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (eng.epfd == -1 || eng.evfd == -1) {
        snprintf(err, errLen, "cannot create the engine's epoll/eventfd: %s", strerror(errno));
        goto out_close_fds;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(eng.epfd, EPOLL_CTL_ADD, eng.evfd, &ev) == -1) {
        snprintf(err, errLen, "epoll_ctl(eventfd): %s", strerror(errno));
        goto out_close_fds;
    }
    if (cfg->tcpPort > 0) {
        const TransportOps *tcp = tcpTransportInit(&engineHost);
        if (tcp->listen(cfg->tcpBind, cfg->tcpPort, err, errLen) == -1)
            goto out_close_fds;
        eng.tp[TP_TCP] = tcp;
    }
    if (cfg->rdmaPort > 0) {
        char rerr[256];
        RdmaTransportConfig rc = {
            .arenaBase = cfg->arenaBase, .arenaSize = cfg->arenaSize, .rdmaPort = cfg->rdmaPort};
        snprintf(rc.rdmaBind, sizeof(rc.rdmaBind), "%s", cfg->rdmaBind);
        snprintf(rc.rdmaDevice, sizeof(rc.rdmaDevice), "%s", cfg->rdmaDevice);
        eng.tp[TP_RDMA] = rdmaTransportInit(&engineHost, &rc, rerr, sizeof(rerr));
        if (!eng.tp[TP_RDMA])
            engineLog("warning", "RDMA disabled: %s (TCP still works)", rerr);
    }
    eng.running = 1;
    int rc = pthread_create(&eng.thread, NULL, engineMain, NULL);
    if (rc != 0) {
        snprintf(err, errLen, "cannot start the engine thread: %s", strerror(rc));
        eng.running = 0;
        goto out_shutdown_transports;
    }
    return 0;

out_shutdown_transports:
    for (int i = 0; i < TP_COUNT; i++)
        if (eng.tp[i])
            eng.tp[i]->shutdown();
out_close_fds:
    if (eng.epfd != -1)
        close(eng.epfd);
    if (eng.evfd != -1)
        close(eng.evfd);
    eng.epfd = eng.evfd = -1;
    return -1;
}

void engineStop(void)
{
    if (!eng.running)
        return;
    __atomic_store_n(&eng.running, 0, __ATOMIC_RELEASE);
    uint64_t one = 1;
    if (write(eng.evfd, &one, sizeof(one)) < 0)
        engineLog("warning", "cannot wake the engine to stop it: %s", strerror(errno));
    pthread_join(eng.thread, NULL);
    /* From here on this thread plays the engine thread. */
    engineDrainQueue();
    for (int i = 0; i < TP_COUNT; i++)
        if (eng.tp[i])
            eng.tp[i]->shutdown();
    ENGINE_EACH_SIDE(shutdown);
    while (eng.peers) {
        Peer *next = eng.peers->next;
        free(eng.peers);
        eng.peers = next;
    }
    for (int i = 0; i < watchCap; i++)
        free(watches[i]);
    free(watches);
    watches = NULL;
    watchCap = 0;
    close(eng.epfd);
    close(eng.evfd);
    /* A stray post after this fails on -1 instead of writing 8 bytes into
     * whatever descriptor reuses the number. */
    eng.epfd = eng.evfd = -1;
}
