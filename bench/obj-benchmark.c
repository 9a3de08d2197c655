/*
 * obj-benchmark.c - a redis-benchmark-style load generator for objstore nodes.
 *
 * It drives one node (-h/-p or -s) with N parallel connections spread over a
 * few threads and reports, per test and object size, the requests done, the
 * timed duration, requests and megabytes per second and latency percentiles
 * taken from every single request. The tests are:
 *
 *   put    OBJ.PUT of fresh ids; the ids are deleted between rounds (untimed)
 *          so that any request count fits in the arena.
 *   get    OBJ.GET of a pre-made working set: the bytes cross the socket.
 *   pin    objClientPin + reading every byte + objClientRelease through the
 *          client library: the zero-copy local path (--pin-cache: with the
 *          library's pin cache, --no-read: pin + release without reading).
 *   cput   objClientPut through the client library, the way a C program puts:
 *          one OBJ.PUT under 1 MiB, else OBJ.CREATE, a copy into the arena on
 *          --put-threads threads, OBJ.SEAL; ids deleted between rounds, after
 *          which the node's background scrub of them is waited for (untimed).
 *   memcpy the reference for cput: one thread's memcpy of the same bytes into
 *          a warm buffer of the same size (no node involved).
 *   fetch  OBJ.FETCH on the node of a working set that lives on another node
 *          (--source-host/--source-port); every object is fetched once per
 *          round and deleted on the destination between rounds (untimed), so
 *          each request really moves the bytes.
 *
 * Setup (creating working sets, waiting for the directory) and cleanup are
 * never inside the timed region; every run is bounded by -n and --seconds.
 * Server CPU per request is taken the same way: INFO cpu (used_cpu_sys +
 * used_cpu_user, every thread of the server) of the node and, for fetch, of
 * the source, read just before each timed phase and again once it has
 * settled after it, so the setup, the directory waits and the cleanup
 * around it are not counted, while the work a request leaves behind (a
 * fetched replica's publish) is.
 * Requests are written with writev straight from one shared payload buffer,
 * so the tool itself copies no object bytes on the way out. MB means 10^6
 * bytes throughout, like iperf3's MBytes/s divided by 1.048576.
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "objstore.h"

/* ---- tunables ------------------------------------------------------------------------------ */

#define BENCH_MAX_CLIENTS     1024
#define BENCH_MAX_THREADS     256
#define BENCH_DEFAULT_THREADS 8 /* one thread per client up to this many */
#define BENCH_MAX_PIPELINE    1024
#define BENCH_MAX_SIZE        (1ULL << 30)   /* cput and memcpy */
#define BENCH_MAX_INLINE      (512ULL << 20) /* the others: Redis's default proto-max-bulk-len */
#define BENCH_MAX_SIZES       32
#define BENCH_SCRUB_WAIT_MS   60000 /* cput: longest wait for the scrub between rounds */
#define BENCH_MAX_SECONDS     86400.0
#define BENCH_PREFIX_MAX      200
#define BENCH_ID_MAX          (BENCH_PREFIX_MAX + 96)
#define BENCH_FROM_MAX        128 /* a node name, as OBJ.FETCH FROM takes it */
/* One encoded command without payload (OBJ.FETCH id VIA v FROM node at most). */
#define BENCH_CMD_MAX         (BENCH_ID_MAX + 96 + BENCH_FROM_MAX + 16)
#define BENCH_ARENA_SHARE     0.6 /* of a node's free arena a working set may take */
#define BENCH_DEL_BATCH       128
#define BENCH_SETUP_BATCH     32
#define BENCH_LOCATE_WAIT_MS  15000
#define BENCH_LIST_MAX_ROUNDS 100000
#define BENCH_IO_SLACK_S      30 /* socket timeout beyond --seconds */
#define BENCH_PROGRESS_NS     250000000ULL
/* After a timed phase, before the servers' CPU is read: long enough for the
 * work a request leaves behind (a delayed, batched publish) to be done. */
#define BENCH_CPU_SETTLE_MS 20

/* ---- options ------------------------------------------------------------------------------- */

typedef enum TestKind {
    TEST_PUT,
    TEST_GET,
    TEST_PIN,
    TEST_FETCH,
    TEST_CPUT,
    TEST_MEMCPY,
    TEST_COUNT
} TestKind;

static const char *testNames[TEST_COUNT] = {"put", "get", "pin", "fetch", "cput", "memcpy"};

typedef struct Options {
    char host[256];
    int port;
    char socketPath[256]; /* "" = TCP */
    char srcHost[256];
    int srcPort; /* 0 = not given */
    int clients;
    int threads; /* 0 = default */
    int pipeline;
    long long requests;
    uint64_t sizes[BENCH_MAX_SIZES];
    int nsizes;
    int tests[TEST_COUNT]; /* selected, in this order */
    int ntests;
    const char *via;               /* NULL = auto (no VIA argument), "tcp", "rdma" */
    char from[BENCH_FROM_MAX + 1]; /* fetch: OBJ.FETCH ... FROM this node; "" = none */
    long long keyspace;            /* 0 = as many as fit, up to -n */
    char prefix[BENCH_PREFIX_MAX + 1];
    double seconds;
    int quiet;
    int csv;
    int pinCache;   /* pin: objClientSetPinCache(OBJ_PIN_CACHE_DEFAULT_IDLE) */
    int pinNoRead;  /* pin: do not read the bytes (pin + release only) */
    int prefault;   /* pin: objClientSetPinPrefault(64 KiB) */
    int putThreads; /* cput: objClientSetPutThreads (0: the library's default) */
} Options;

/* ---- latency histogram ----------------------------------------------------------------------
 * Log-linear buckets over nanoseconds: exact below 64 ns, then 64 buckets per
 * power of two (under 1.6 % error), so memory stays fixed whatever -n is. */

#define HIST_SUB_BITS 6
#define HIST_SUB      (1 << HIST_SUB_BITS)
#define HIST_BUCKETS  (HIST_SUB + (64 - HIST_SUB_BITS) * HIST_SUB)

typedef struct Hist {
    uint64_t count[HIST_BUCKETS];
    uint64_t n;
    uint64_t min, max;
    double sum;
} Hist;

/* ---- run state ----------------------------------------------------------------------------- */

/* One connection with its encoding buffers; the main thread uses the same
 * struct for setup and cleanup connections. */
typedef struct Client {
    int idx;            /* 0 .. clients-1 */
    redisContext *rc;   /* put/get/fetch (and main-thread work) */
    ObjClient *oc;      /* pin, cput */
    unsigned char *dst; /* memcpy: the destination */
    char *scratch;      /* encoded commands of one batch */
    size_t scratchLen;  /* capacity */
    struct iovec *iov;
    int iovCap;
    long long count;     /* requests of this client in the current round */
    long long sent;      /* issued in the current round (cleanup deletes these) */
    int batch;           /* requests written, replies not yet read */
    uint64_t batchStart; /* ns, when the batch was written */
} Client;

typedef struct Run Run;

typedef struct Worker {
    Run *run;
    pthread_t tid;
    Client **clients;
    int n;
    Hist hist;
    uint64_t tStart, tEnd; /* this worker's timed phase of the round */
} Worker;

struct Run {
    const Options *o;
    TestKind test;
    uint64_t size;
    char name[32]; /* "put", "fetch-tcp", ... */
    char idBase[BENCH_ID_MAX];
    long long keys;  /* working set (get/pin/fetch) or round capacity (put) */
    long long total; /* requests wanted */
    long long roundStart, roundLen;
    int stop;           /* set by the planner, read after a barrier */
    uint64_t deadline;  /* ns, monotonic */
    uint64_t expectSum; /* pin: byte sum of the payload */
    uint64_t timedNs;
    pthread_barrier_t barrier;
    Worker *workers;
    int nworkers;
    _Atomic long long completed;
    _Atomic int failed;
    _Atomic int finished;
    pthread_mutex_t errLock;
    char err[512];
    _Atomic long long cacheHits, cacheMisses, cacheBatches; /* pin --pin-cache */
    /* Server CPU of the timed phases: [0] the node, [1] the source (fetch).
     * cpuRc[i] NULL: not sampled; cpuSec[i] < 0: a sample failed. */
    redisContext *cpuRc[2];
    double cpuMark[2], cpuSec[2];
};

static unsigned char *benchPayload;
static volatile sig_atomic_t benchInterrupted;
static char benchNonce[24];

/* ---- small helpers ------------------------------------------------------------------------- */

static uint64_t nowNs(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void sleepMs(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Print "obj-benchmark: <message>" and exit 1. Never returns. */
static void die(const char *fmt, ...)
{
    va_list ap;

    fputs("obj-benchmark: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

/* "64", "4k", "1m", "2g" for sizes that are whole multiples, else bytes. */
static const char *sizeName(uint64_t size, char *buf, size_t len)
{
    if (size >= (1ULL << 30) && size % (1ULL << 30) == 0)
        snprintf(buf, len, "%" PRIu64 "g", size >> 30);
    else if (size >= (1ULL << 20) && size % (1ULL << 20) == 0)
        snprintf(buf, len, "%" PRIu64 "m", size >> 20);
    else if (size >= 1024 && size % 1024 == 0)
        snprintf(buf, len, "%" PRIu64 "k", size >> 10);
    else
        snprintf(buf, len, "%" PRIu64, size);
    return buf;
}

/* Byte sum of a buffer, 8 bytes at a time: the "touch every byte" of the pin
 * test, and what it is checked against. Can't fail. */
static uint64_t benchSum(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t s = 0, w;
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        memcpy(&w, b + i, 8);
        s += w;
    }
    for (; i < n; i++)
        s += b[i];
    return s;
}

/* ---- histogram ----------------------------------------------------------------------------- */

static int histIndex(uint64_t v)
{
    if (v < HIST_SUB)
        return (int)v;
    int e = 63 - __builtin_clzll(v); /* >= HIST_SUB_BITS */
    int shift = e - HIST_SUB_BITS;
    return HIST_SUB + shift * HIST_SUB + (int)((v >> shift) - HIST_SUB);
}

/* The middle of bucket i (its lower bound for the exact buckets). */
static uint64_t histValue(int i)
{
    if (i < HIST_SUB)
        return (uint64_t)i;
    int shift = (i - HIST_SUB) / HIST_SUB;
    uint64_t sub = (uint64_t)((i - HIST_SUB) % HIST_SUB);
    return ((HIST_SUB + sub) << shift) + ((1ULL << shift) >> 1);
}

static void histInit(Hist *h)
{
    memset(h, 0, sizeof(*h));
    h->min = UINT64_MAX;
}

static void histAdd(Hist *h, uint64_t v)
{
    h->count[histIndex(v)]++;
    h->n++;
    h->sum += (double)v;
    if (v < h->min)
        h->min = v;
    if (v > h->max)
        h->max = v;
}

static void histMerge(Hist *dst, const Hist *src)
{
    for (int i = 0; i < HIST_BUCKETS; i++)
        dst->count[i] += src->count[i];
    dst->n += src->n;
    dst->sum += src->sum;
    if (src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
}

/* The q-quantile (0 < q <= 1) in ns, clamped to [min, max]; 0 when empty. */
static uint64_t histQuantile(const Hist *h, double q)
{
    if (h->n == 0)
        return 0;
    uint64_t want = (uint64_t)ceil(q * (double)h->n), seen = 0;
    if (want < 1)
        want = 1;
    for (int i = 0; i < HIST_BUCKETS; i++) {
        seen += h->count[i];
        if (seen >= want) {
            uint64_t v = histValue(i);
            return v < h->min ? h->min : v > h->max ? h->max : v;
        }
    }
    return h->max;
}

/* ---- argument parsing -------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: obj-benchmark [OPTIONS]\n"
            "\n"
            "Load generator for objstore nodes, in the manner of redis-benchmark.\n"
            "\n"
            " -h <hostname>      Node host (default 127.0.0.1); with no value: this help\n"
            " -p <port>          Node port (default 6379)\n"
            " -s <socket>        Node unix socket (overrides host and port)\n"
            " -c <clients>       Parallel connections (default 4, at most %d)\n"
            " -n <requests>      Requests per test and size (default 10000)\n"
            " -d <size>          Object size, with optional k/m/g suffix (default 4k)\n"
            " --sizes <list>     Comma-separated size sweep, e.g. 64,4k,32k,1m,64m "
            "(overrides -d)\n"
            " -P <numreq>        Pipeline <numreq> requests per connection (default 1; the\n"
            "                    pin test makes library calls and ignores it)\n"
            " -t <tests>         Comma-separated: put,get,pin,fetch,cput,memcpy (default\n"
            "                    put,get,pin, plus fetch when --source-port is given)\n"
            " --threads <num>    Threads the clients are spread over (default: one per\n"
            "                    client, at most %d)\n"
            " --seconds <s>      Time limit of every timed run (default 30)\n"
            " --source-host <h>  fetch: the node that owns the objects (default: -h host)\n"
            " --source-port <p>  fetch: its port (required for fetch); the -h/-p node is\n"
            "                    the destination\n"
            " --tcp | --rdma     fetch: OBJ.FETCH ... VIA tcp / VIA rdma (default: auto)\n"
            " --from <node>      fetch: OBJ.FETCH ... FROM <node>, the source's node name\n"
            "                    (a location hint: no directory lookup)\n"
            " --keyspace <n>     Cap on the working set (get/pin/fetch objects, put ids\n"
            "                    per round; default: as many as fit in 60%% of the arena)\n"
            " --prefix <str>     Object id prefix (default \"objbench:\")\n"
            " -q                 Quiet: one line per test and size\n"
            " --csv              CSV rows: "
            "\"test\",\"size\",\"clients\",\"ops_per_sec\",\"mb_per_sec\",\n"
            "                    \"p50_ms\",\"p99_ms\",\"p999_ms\",\"max_ms\",\"cpu_us_node\",\n"
            "                    \"cpu_us_source\"; test is put, get, pin, fetch (VIA auto),\n"
            "                    fetch-tcp or fetch-rdma, with -from appended under --from\n"
            " --pin-cache        pin: use the client library's pin cache (lazy releases\n"
            "                    sent in pipelined batches, repeated pins served locally);\n"
            "                    the test is named pin-cache\n"
            " --no-read          pin: pin + release without reading the bytes (test name\n"
            "                    gets -noread)\n"
            " --prefault         pin: objClientSetPinPrefault(64k), page tables of a pinned\n"
            "                    object filled by one madvise (test name gets -prefault)\n"
            " --put-threads <n>  cput: objClientSetPutThreads(n), the copy threads of a put\n"
            "                    of 1m or more (default 0: the library's; the test is named\n"
            "                    cput-<n>t when given)\n"
            " --help             This help\n"
            "\n"
            "Timed: put = OBJ.PUT round trips; get = OBJ.GET round trips including the\n"
            "bytes; pin = objClientPin + reading every byte + objClientRelease; fetch =\n"
            "OBJ.FETCH round trips on the destination; cput = objClientPut; memcpy = one\n"
            "thread's memcpy of the bytes into a warm buffer. Creating working sets, deleting\n"
            "between rounds and cleaning up are not timed. MB = 10^6 bytes. Server CPU\n"
            "per request: INFO cpu of the node (and the source) over the timed phases.\n"
            "Exit status is non-zero when any request fails; the first error is printed.\n",
            BENCH_MAX_CLIENTS, BENCH_DEFAULT_THREADS);
}

/* Parse a whole decimal integer in [lo, hi]; dies with a message naming opt. */
static long long parseInt(const char *opt, const char *s, long long lo, long long hi)
{
    char *end;
    long long v;

    errno = 0;
    v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno == ERANGE)
        die("%s: '%s' is not an integer", opt, s);
    if (v < lo || v > hi)
        die("%s: %lld is out of range (%lld to %lld)", opt, v, lo, hi);
    return v;
}

/* Parse "4096", "4k", "4kb", "1m", "1g" (binary multiples). Returns 0 or -1. */
static int parseSize(const char *s, uint64_t *out)
{
    uint64_t v = 0, mul = 1;
    const char *p = s;

    if (*p < '0' || *p > '9')
        return -1;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    switch (*p) {
        case 'k':
        case 'K':
            mul = 1ULL << 10;
            p++;
            break;
        case 'm':
        case 'M':
            mul = 1ULL << 20;
            p++;
            break;
        case 'g':
        case 'G':
            mul = 1ULL << 30;
            p++;
            break;
        default:
            break;
    }
    if (*p == 'b' || *p == 'B')
        p++;
    if (*p != '\0' || (v != 0 && mul > UINT64_MAX / v))
        return -1;
    *out = v * mul;
    return 0;
}

static uint64_t parseSizeOpt(const char *opt, const char *s)
{
    uint64_t v;
    char a[32];

    if (parseSize(s, &v) == -1)
        die("%s: '%s' is not a size (a number with an optional k, m or g suffix)", opt, s);
    if (v == 0)
        die("%s: size must be at least 1 byte", opt);
    if (v > BENCH_MAX_SIZE)
        die("%s: %s is larger than the %s a single Redis argument may have", opt, s,
            sizeName(BENCH_MAX_SIZE, a, sizeof(a)));
    return v;
}

static void parseSizes(const char *opt, const char *list, Options *o)
{
    char buf[1024], *save = NULL;

    if (strlen(list) >= sizeof(buf))
        die("%s: list too long", opt);
    snprintf(buf, sizeof(buf), "%s", list);
    o->nsizes = 0;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        if (o->nsizes == BENCH_MAX_SIZES)
            die("%s: at most %d sizes", opt, BENCH_MAX_SIZES);
        o->sizes[o->nsizes++] = parseSizeOpt(opt, t);
    }
    if (o->nsizes == 0)
        die("%s: empty size list", opt);
}

static void parseTests(const char *list, Options *o)
{
    char buf[256], *save = NULL;
    int seen[TEST_COUNT] = {0};

    if (strlen(list) >= sizeof(buf))
        die("-t: list too long");
    snprintf(buf, sizeof(buf), "%s", list);
    o->ntests = 0;
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int k = -1;
        for (int i = 0; i < TEST_COUNT; i++)
            if (!strcasecmp(t, testNames[i]))
                k = i;
        if (k < 0)
            die("-t: unknown test '%s' (valid: put, get, pin, fetch, cput, memcpy)", t);
        if (!seen[k])
            o->tests[o->ntests++] = k;
        seen[k] = 1;
    }
    if (o->ntests == 0)
        die("-t: empty test list (valid: put, get, pin, fetch, cput, memcpy)");
}

static void copyOpt(const char *opt, char *dst, size_t len, const char *s)
{
    if (*s == '\0')
        die("%s: empty value", opt);
    if (strlen(s) >= len)
        die("%s: value too long (at most %zu characters)", opt, len - 1);
    memcpy(dst, s, strlen(s) + 1);
}

/* Whether a is one of the options that take a value. */
static int optTakesValue(const char *a)
{
    static const char *const withValue[] = {"-h",
                                            "-p",
                                            "-s",
                                            "-c",
                                            "-n",
                                            "-d",
                                            "-P",
                                            "-t",
                                            "--threads",
                                            "--put-threads",
                                            "--sizes",
                                            "--seconds",
                                            "--source-host",
                                            "--source-port",
                                            "--keyspace",
                                            "--prefix",
                                            "--from"};

    for (size_t i = 0; i < sizeof(withValue) / sizeof(withValue[0]); i++)
        if (!strcmp(a, withValue[i]))
            return 1;
    return 0;
}

/*
 * Fill *o from argv; dies with a message on any bad argument, exits 0 after
 * --help. Why so strict: a benchmark that silently ran with a default in
 * place of a mistyped value reports numbers for something else.
 */
static void parseOptions(int argc, char **argv, Options *o)
{
    int sawTests = 0, sawTcp = 0, sawRdma = 0;
    uint64_t dsize = 4096;

    memset(o, 0, sizeof(*o));
    snprintf(o->host, sizeof(o->host), "127.0.0.1");
    o->port = 6379;
    o->clients = 4;
    o->pipeline = 1;
    o->requests = 10000;
    o->seconds = 30.0;
    snprintf(o->prefix, sizeof(o->prefix), "objbench:");

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int last = i + 1 >= argc;
        const char *v = last ? NULL : argv[i + 1];

        if (!strcmp(a, "--help") || (!strcmp(a, "-h") && last)) {
            usage(stdout);
            exit(0);
        } else if (!strcmp(a, "-q")) {
            o->quiet = 1;
            continue;
        } else if (!strcmp(a, "--csv")) {
            o->csv = 1;
            continue;
        } else if (!strcmp(a, "--pin-cache")) {
            o->pinCache = 1;
            continue;
        } else if (!strcmp(a, "--no-read")) {
            o->pinNoRead = 1;
            continue;
        } else if (!strcmp(a, "--prefault")) {
            o->prefault = 1;
            continue;
        } else if (!strcmp(a, "--tcp")) {
            sawTcp = 1;
            continue;
        } else if (!strcmp(a, "--rdma")) {
            sawRdma = 1;
            continue;
        }
        if (!optTakesValue(a))
            die("unrecognized option '%s' (see --help)", a);
        if (last)
            die("option %s needs a value (see --help)", a);
        i++;
        if (!strcmp(a, "-h")) {
            copyOpt(a, o->host, sizeof(o->host), v);
        } else if (!strcmp(a, "-p")) {
            o->port = (int)parseInt(a, v, 1, 65535);
        } else if (!strcmp(a, "-s")) {
            copyOpt(a, o->socketPath, sizeof(o->socketPath), v);
        } else if (!strcmp(a, "-c")) {
            o->clients = (int)parseInt(a, v, 1, BENCH_MAX_CLIENTS);
        } else if (!strcmp(a, "-n")) {
            o->requests = parseInt(a, v, 1, 1000000000000LL);
        } else if (!strcmp(a, "-d")) {
            dsize = parseSizeOpt(a, v);
        } else if (!strcmp(a, "-P")) {
            o->pipeline = (int)parseInt(a, v, 1, BENCH_MAX_PIPELINE);
        } else if (!strcmp(a, "-t")) {
            parseTests(v, o);
            sawTests = 1;
        } else if (!strcmp(a, "--threads")) {
            o->threads = (int)parseInt(a, v, 1, BENCH_MAX_THREADS);
        } else if (!strcmp(a, "--put-threads")) {
            o->putThreads = (int)parseInt(a, v, 0, 64);
        } else if (!strcmp(a, "--sizes")) {
            parseSizes(a, v, o);
        } else if (!strcmp(a, "--source-host")) {
            copyOpt(a, o->srcHost, sizeof(o->srcHost), v);
        } else if (!strcmp(a, "--source-port")) {
            o->srcPort = (int)parseInt(a, v, 1, 65535);
        } else if (!strcmp(a, "--from")) {
            copyOpt(a, o->from, sizeof(o->from), v);
        } else if (!strcmp(a, "--keyspace")) {
            o->keyspace = parseInt(a, v, 1, 1000000000000LL);
        } else if (!strcmp(a, "--prefix")) {
            copyOpt(a, o->prefix, sizeof(o->prefix), v);
            if (strpbrk(o->prefix, "*?[]\\ \t\r\n"))
                die("--prefix: '%s' may not contain spaces or the glob characters *?[]\\", v);
        } else { /* --seconds */
            char *end;
            errno = 0;
            o->seconds = strtod(v, &end);
            if (*v == '\0' || *end != '\0' || errno == ERANGE || !(o->seconds > 0) ||
                o->seconds > BENCH_MAX_SECONDS)
                die("--seconds: '%s' must be a number of seconds above 0 and at most %.0f", v,
                    BENCH_MAX_SECONDS);
        }
    }

    if (sawTcp && sawRdma)
        die("--tcp and --rdma exclude each other");
    o->via = sawTcp ? "tcp" : sawRdma ? "rdma" : NULL;
    if (o->nsizes == 0) {
        o->sizes[0] = dsize;
        o->nsizes = 1;
    }
    if (!sawTests) {
        o->tests[o->ntests++] = TEST_PUT;
        o->tests[o->ntests++] = TEST_GET;
        o->tests[o->ntests++] = TEST_PIN;
        if (o->srcPort)
            o->tests[o->ntests++] = TEST_FETCH;
    }
    for (int i = 0; i < o->ntests; i++) {
        if (o->tests[i] == TEST_FETCH && !o->srcPort)
            die("the fetch test needs --source-port (the node that owns the objects)");
        for (int k = 0; k < o->nsizes; k++)
            if (o->tests[i] != TEST_CPUT && o->tests[i] != TEST_MEMCPY &&
                o->sizes[k] > BENCH_MAX_INLINE)
                die("%s: sizes above 512m are for cput and memcpy only (a Redis argument is at "
                    "most 512m)",
                    testNames[o->tests[i]]);
    }
    if (!o->srcHost[0])
        snprintf(o->srcHost, sizeof(o->srcHost), "%s", o->host);
    if (o->srcPort && !o->socketPath[0] && o->srcPort == o->port && !strcmp(o->srcHost, o->host))
        die("--source-host/--source-port name the -h/-p node itself; fetch needs two nodes");
    if (o->threads == 0)
        o->threads = o->clients < BENCH_DEFAULT_THREADS ? o->clients : BENCH_DEFAULT_THREADS;
    if (o->threads > o->clients)
        o->threads = o->clients;
}

/* ---- connections and the wire ------------------------------------------------------------ */

/* Open a hiredis connection to the -h/-p/-s node, or to the source when src
 * is set. Returns the context or NULL with the reason in err. */
static redisContext *benchConnect(const Options *o, int src, char *err, size_t errLen)
{
    struct timeval ctv = {5, 0};
    struct timeval iotv = {(time_t)o->seconds + BENCH_IO_SLACK_S, 0};
    redisContext *rc;

    if (!src && o->socketPath[0])
        rc = redisConnectUnixWithTimeout(o->socketPath, ctv);
    else
        rc = redisConnectWithTimeout(src ? o->srcHost : o->host, src ? o->srcPort : o->port, ctv);
    if (rc == NULL || rc->err) {
        if (!src && o->socketPath[0])
            snprintf(err, errLen, "cannot connect to %s: %s", o->socketPath,
                     rc ? rc->errstr : "out of memory");
        else
            snprintf(err, errLen, "cannot connect to %s:%d: %s", src ? o->srcHost : o->host,
                     src ? o->srcPort : o->port, rc ? rc->errstr : "out of memory");
        redisFree(rc);
        return NULL;
    }
    /* Keep the reader's buffer between replies: large replies would regrow it each time. */
    rc->reader->maxbuf = 0;
    if (redisSetTimeout(rc, iotv) != REDIS_OK) {
        snprintf(err, errLen, "cannot set the socket timeout: %s", rc->errstr);
        redisFree(rc);
        return NULL;
    }
    return rc;
}

/* Allocate the encoding buffers for batches of up to perBatch commands.
 * Returns 0 or -1 (out of memory). */
static int clientInitBuffers(Client *c, int perBatch)
{
    if (perBatch < BENCH_DEL_BATCH)
        perBatch = BENCH_DEL_BATCH;
    c->scratchLen = (size_t)perBatch * BENCH_CMD_MAX;
    c->scratch = malloc(c->scratchLen);
    c->iovCap = perBatch * 3;
    c->iov = malloc(sizeof(*c->iov) * (size_t)c->iovCap);
    return c->scratch && c->iov ? 0 : -1;
}

static void clientClose(Client *c)
{
    if (c->rc)
        redisFree(c->rc);
    objClientFree(c->oc);
    free(c->dst);
    free(c->scratch);
    free(c->iov);
    memset(c, 0, sizeof(*c));
}

/* Write every byte of iov[0..n) to fd (a blocking socket with a send timeout).
 * Returns 0, or -1 with errno set. Modifies iov. */
static int sendAll(int fd, struct iovec *iov, int n)
{
    while (n > 0) {
        int chunk = n < IOV_MAX ? n : IOV_MAX;
        ssize_t w = writev(fd, iov, chunk);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                errno = ETIMEDOUT;
            return -1;
        }
        while (n > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            n--;
        }
        if (n > 0 && w > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

/* RESP encoders writing at p; each returns the new end. The caller has
 * checked that BENCH_CMD_MAX bytes are free. */
static char *respArray(char *p, int n)
{
    return p + sprintf(p, "*%d\r\n", n);
}

static char *respBulk(char *p, const void *s, size_t len)
{
    p += sprintf(p, "$%zu\r\n", len);
    memcpy(p, s, len);
    p += len;
    memcpy(p, "\r\n", 2);
    return p + 2;
}

static size_t idFormat(char *buf, const char *base, long long n)
{
    return (size_t)snprintf(buf, BENCH_ID_MAX, "%s%lld", base, n);
}

/* Append "cmd id" (plus VIA via and FROM from for OBJ.FETCH, each when not
 * NULL) at p; returns the new end. */
static char *encodeIdCommand(char *p, const char *cmd, const char *id, size_t idLen,
                             const char *via, const char *from)
{
    p = respArray(p, 2 + (via ? 2 : 0) + (from ? 2 : 0));
    p = respBulk(p, cmd, strlen(cmd));
    p = respBulk(p, id, idLen);
    if (via) {
        p = respBulk(p, "VIA", 3);
        p = respBulk(p, via, strlen(via));
    }
    if (from) {
        p = respBulk(p, "FROM", 4);
        p = respBulk(p, from, strlen(from));
    }
    return p;
}

/* Send OBJ.PUT for ids base+first .. base+first+n-1 (n <= BENCH_DEL_BATCH):
 * the payload goes out by reference. Returns 0 or -1 with err set. */
static int clientSendPuts(Client *c, const char *base, const long long *idx, int n, uint64_t size,
                          char *err, size_t errLen)
{
    static const char crlf[] = "\r\n";
    char *p = c->scratch, id[BENCH_ID_MAX];
    int k = 0;

    for (int i = 0; i < n; i++) {
        size_t idLen = idFormat(id, base, idx[i]);
        char *start = p;
        p = respArray(p, 3);
        p = respBulk(p, "OBJ.PUT", 7);
        p = respBulk(p, id, idLen);
        p += sprintf(p, "$%" PRIu64 "\r\n", size);
        c->iov[k++] = (struct iovec){start, (size_t)(p - start)};
        c->iov[k++] = (struct iovec){benchPayload, (size_t)size};
        c->iov[k++] = (struct iovec){(void *)crlf, 2};
    }
    if (sendAll(c->rc->fd, c->iov, k) == -1) {
        snprintf(err, errLen, "write failed: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* Send `cmd id` for each id index (n <= the batch capacity). Returns 0 or -1. */
static int clientSendIdCommands(Client *c, const char *cmd, const char *base, const long long *idx,
                                int n, const char *via, const char *from, char *err, size_t errLen)
{
    char *p = c->scratch, id[BENCH_ID_MAX];

    for (int i = 0; i < n; i++) {
        size_t idLen = idFormat(id, base, idx[i]);
        p = encodeIdCommand(p, cmd, id, idLen, via, from);
    }
    c->iov[0] = (struct iovec){c->scratch, (size_t)(p - c->scratch)};
    if (sendAll(c->rc->fd, c->iov, 1) == -1) {
        snprintf(err, errLen, "write failed: %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* Read one reply. Returns it, or NULL with err set (connection problem). */
static redisReply *clientRead(Client *c, char *err, size_t errLen)
{
    void *r = NULL;

    if (redisGetReply(c->rc, &r) != REDIS_OK || r == NULL) {
        snprintf(err, errLen, "connection error: %s",
                 c->rc->errstr[0] ? c->rc->errstr : "no reply");
        return NULL;
    }
    return r;
}

/* Whether reply r is a simple status equal to s. */
static int replyIs(const redisReply *r, const char *s)
{
    return r->type == REDIS_REPLY_STATUS && r->len == strlen(s) && !memcmp(r->str, s, r->len);
}

/* Describe an unexpected reply into err. Always returns -1. */
static int replyUnexpected(const char *what, const redisReply *r, char *err, size_t errLen)
{
    if (r->type == REDIS_REPLY_ERROR || r->type == REDIS_REPLY_STATUS)
        snprintf(err, errLen, "%s answered: %.*s", what, (int)(r->len > 300 ? 300 : r->len),
                 r->str);
    else if (r->type == REDIS_REPLY_STRING)
        snprintf(err, errLen, "%s answered a %zu-byte string", what, (size_t)r->len);
    else if (r->type == REDIS_REPLY_ARRAY)
        snprintf(err, errLen, "%s answered an array of %zu elements", what, (size_t)r->elements);
    else if (r->type == REDIS_REPLY_NIL)
        snprintf(err, errLen, "%s answered nil", what);
    else
        snprintf(err, errLen, "%s answered an unexpected reply (type %d)", what, r->type);
    return -1;
}

/*
 * Delete base+idx[i] for n ids through c, in pipelined batches. OK and
 * DEFERRED are fine, and so is NOTFOUND (a replica may have been evicted, an
 * id may never have been created after an error). Returns 0 or -1 with err.
 */
static int clientDeleteIds(Client *c, const char *base, const long long *idx, long long n,
                           char *err, size_t errLen)
{
    for (long long done = 0; done < n;) {
        int b = n - done < BENCH_DEL_BATCH ? (int)(n - done) : BENCH_DEL_BATCH;
        if (clientSendIdCommands(c, "OBJ.DEL", base, idx + done, b, NULL, NULL, err, errLen) == -1)
            return -1;
        int bad = 0;
        for (int i = 0; i < b; i++) {
            redisReply *r = clientRead(c, err, errLen);
            if (!r)
                return -1;
            if (!bad && !replyIs(r, "OK") && !replyIs(r, "DEFERRED") &&
                !(r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "NOTFOUND", 8)))
                bad = replyUnexpected("OBJ.DEL", r, err, errLen);
            freeReplyObject(r);
        }
        if (bad)
            return -1;
        done += b;
    }
    return 0;
}

/* OBJ.PUT ids base+from .. base+to-1 (untimed setup). Returns 0 or -1 with err. */
static int clientPutRange(Client *c, const char *base, long long from, long long to, uint64_t size,
                          char *err, size_t errLen)
{
    long long idx[BENCH_SETUP_BATCH];

    for (long long i = from; i < to;) {
        int b = 0;
        for (; b < BENCH_SETUP_BATCH && i < to; b++, i++)
            idx[b] = i;
        if (clientSendPuts(c, base, idx, b, size, err, errLen) == -1)
            return -1;
        int bad = 0;
        for (int k = 0; k < b; k++) {
            redisReply *r = clientRead(c, err, errLen);
            if (!r)
                return -1;
            if (!bad && !replyIs(r, "OK"))
                bad = replyUnexpected("OBJ.PUT (setup)", r, err, errLen);
            freeReplyObject(r);
        }
        if (bad)
            return -1;
    }
    return 0;
}

/* Read an integer field of OBJ.STATS. Returns 0 or -1 with err. */
static int statsField(redisContext *rc, const char *name, uint64_t *out, char *err, size_t errLen)
{
    redisReply *r = redisCommand(rc, "OBJ.STATS");
    int rv = -1;

    if (r == NULL) {
        snprintf(err, errLen, "OBJ.STATS: %s", rc->errstr);
        return -1;
    }
    if (r->type != REDIS_REPLY_ARRAY) {
        replyUnexpected("OBJ.STATS (is the objstore module loaded?)", r, err, errLen);
        goto out;
    }
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const redisReply *k = r->element[i], *v = r->element[i + 1];
        if (k->type != REDIS_REPLY_STRING && k->type != REDIS_REPLY_STATUS)
            continue;
        if (strcmp(k->str, name))
            continue;
        if (v->type == REDIS_REPLY_INTEGER && v->integer >= 0) {
            *out = (uint64_t)v->integer;
            rv = 0;
        } else if (v->type == REDIS_REPLY_STRING || v->type == REDIS_REPLY_STATUS) {
            char *end;
            *out = strtoull(v->str, &end, 10);
            rv = *end == '\0' && v->len > 0 ? 0 : -1;
        }
        if (rv == -1)
            snprintf(err, errLen, "OBJ.STATS: field %s is not a number", name);
        goto out;
    }
    snprintf(err, errLen, "OBJ.STATS has no field %s", name);
out:
    freeReplyObject(r);
    return rv;
}

/* OBJ.STATS arena_path into buf. Returns 0 or -1 with err. */
static int statsArenaPath(redisContext *rc, char *buf, size_t len, char *err, size_t errLen)
{
    redisReply *r = redisCommand(rc, "OBJ.STATS");
    int rv = -1;

    if (r == NULL) {
        snprintf(err, errLen, "OBJ.STATS: %s", rc->errstr);
        return -1;
    }
    if (r->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i + 1 < r->elements; i += 2) {
            const redisReply *k = r->element[i], *v = r->element[i + 1];
            if (k->str && !strcmp(k->str, "arena_path") && v->str) {
                snprintf(buf, len, "%s", v->str);
                rv = 0;
            }
        }
    }
    if (rv == -1)
        replyUnexpected("OBJ.STATS (is the objstore module loaded?)", r, err, errLen);
    freeReplyObject(r);
    return rv;
}

/*
 * How many objects of `size` bytes fit in BENCH_ARENA_SHARE of the node's
 * free arena (allowing for alignment and a header per object). Returns 0 or
 * -1 with err; *fit may be 0.
 */
static int nodeFit(redisContext *rc, uint64_t size, long long *fit, char *err, size_t errLen)
{
    uint64_t freeB, largest;
    uint64_t per = ((size + 63) & ~63ULL) + 64;

    if (statsField(rc, "arena_free", &freeB, err, errLen) == -1 ||
        statsField(rc, "arena_largest_free", &largest, err, errLen) == -1)
        return -1;
    *fit = largest < per ? 0 : (long long)((double)freeB * BENCH_ARENA_SHARE / (double)per);
    return 0;
}

/*
 * Delete whatever sealed object still matches base* on the node (after an
 * error, or replicas a fetch left behind). Bounded in rounds. Returns 0 or
 * -1 with err.
 */
static int sweepPrefix(redisContext *rc, const char *base, char *err, size_t errLen)
{
    char cursor[32] = "0", pattern[BENCH_ID_MAX + 2];

    snprintf(pattern, sizeof(pattern), "%s*", base);
    for (int round = 0; round < BENCH_LIST_MAX_ROUNDS; round++) {
        redisReply *r = redisCommand(rc, "OBJ.LIST %s MATCH %s COUNT 1000", cursor, pattern);
        if (r == NULL) {
            snprintf(err, errLen, "OBJ.LIST: %s", rc->errstr);
            return -1;
        }
        if (r->type != REDIS_REPLY_ARRAY || r->elements != 2 || !r->element[0]->str ||
            r->element[1]->type != REDIS_REPLY_ARRAY) {
            replyUnexpected("OBJ.LIST", r, err, errLen);
            freeReplyObject(r);
            return -1;
        }
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        /* One pipelined OBJ.DEL per listed id; deleting while listing is fine, as with SCAN. */
        size_t n = r->element[1]->elements;
        for (size_t i = 0; i < n; i++) {
            const redisReply *id = r->element[1]->element[i];
            redisAppendCommand(rc, "OBJ.DEL %b", id->str, (size_t)id->len);
        }
        freeReplyObject(r);
        for (size_t i = 0; i < n; i++) {
            void *d = NULL;
            if (redisGetReply(rc, &d) != REDIS_OK) {
                snprintf(err, errLen, "OBJ.DEL: %s", rc->errstr);
                return -1;
            }
            freeReplyObject(d);
        }
        if (!strcmp(cursor, "0"))
            return 0;
    }
    snprintf(err, errLen, "OBJ.LIST did not finish within %d rounds", BENCH_LIST_MAX_ROUNDS);
    return -1;
}

/*
 * Wait until the directory (asked through the destination node) knows every
 * object base+0 .. base+n-1 with at least one location: OBJ.FETCH of an
 * object it has not heard of yet fails. Bounded by BENCH_LOCATE_WAIT_MS.
 * Returns 0 or -1 with err.
 */
static int waitLocated(Client *c, const char *base, long long n, char *err, size_t errLen)
{
    uint64_t until = nowNs() + (uint64_t)BENCH_LOCATE_WAIT_MS * 1000000ULL;
    long long next = 0; /* everything below is known */
    long long idx[BENCH_DEL_BATCH];

    while (next < n) {
        int b = 0;
        for (long long i = next; b < BENCH_DEL_BATCH && i < n; i++)
            idx[b++] = i;
        if (clientSendIdCommands(c, "OBJ.LOCATE", base, idx, b, NULL, NULL, err, errLen) == -1)
            return -1;
        int known = 0, stillKnown = 1, bad = 0;
        for (int i = 0; i < b; i++) {
            redisReply *r = clientRead(c, err, errLen);
            if (!r)
                return -1;
            int ok = r->type == REDIS_REPLY_ARRAY && r->elements >= 8 &&
                     r->element[7]->type == REDIS_REPLY_ARRAY && r->element[7]->elements > 0;
            if (ok && stillKnown)
                known++;
            else
                stillKnown = 0;
            if (!ok && !bad && !(r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "NOTFOUND", 8)) &&
                r->type != REDIS_REPLY_ARRAY)
                bad = replyUnexpected("OBJ.LOCATE", r, err, errLen);
            freeReplyObject(r);
        }
        if (bad)
            return -1;
        next += known;
        if (next < n && known < b) {
            if (nowNs() > until) {
                snprintf(err, errLen,
                         "the directory did not list object %s%lld within %d ms (do both nodes "
                         "use the same directory?)",
                         base, next, BENCH_LOCATE_WAIT_MS);
                return -1;
            }
            sleepMs(20);
        }
    }
    return 0;
}

/* ---- the timed run ------------------------------------------------------------------------- */

static void runFail(Run *run, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Record the first failure and make everyone stop. Can't fail. */
static void runFail(Run *run, const char *fmt, ...)
{
    va_list ap;

    pthread_mutex_lock(&run->errLock);
    if (!run->err[0]) {
        va_start(ap, fmt);
        vsnprintf(run->err, sizeof(run->err), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&run->errLock);
    atomic_store(&run->failed, 1);
}

static int runShouldStop(Run *run)
{
    return atomic_load(&run->failed) || benchInterrupted || nowNs() >= run->deadline;
}

/* The object a request (global index) touches. */
static long long runObject(const Run *run, long long global)
{
    return run->test == TEST_PUT ? global : global % run->keys;
}

/* Requests of client idx in the current round (round-local indices idx, idx+C, ...). */
static long long runClientCount(const Run *run, int idx)
{
    long long C = run->o->clients;
    return idx < run->roundLen ? (run->roundLen - idx + C - 1) / C : 0;
}

static long long runClientObject(const Run *run, const Client *c, long long k)
{
    return runObject(run, run->roundStart + c->idx + k * run->o->clients);
}

/* Send the next batch of b requests of c. Returns 0 or -1 (run failed). */
static int workerSendBatch(Run *run, Client *c, int b)
{
    long long idx[BENCH_MAX_PIPELINE];
    char err[400];
    int rv;

    for (int i = 0; i < b; i++)
        idx[i] = runClientObject(run, c, c->sent + i);
    c->batchStart = nowNs();
    if (run->test == TEST_PUT)
        rv = clientSendPuts(c, run->idBase, idx, b, run->size, err, sizeof(err));
    else if (run->test == TEST_GET)
        rv = clientSendIdCommands(c, "OBJ.GET", run->idBase, idx, b, NULL, NULL, err, sizeof(err));
    else
        rv = clientSendIdCommands(c, "OBJ.FETCH", run->idBase, idx, b, run->o->via,
                                  run->o->from[0] ? run->o->from : NULL, err, sizeof(err));
    c->sent += b;
    c->batch = b;
    if (rv == -1)
        runFail(run, "client %d: %s", c->idx, err);
    return rv;
}

/* Check one reply of the test; returns 0 or -1 with err. */
static int checkReply(Run *run, const redisReply *r, char *err, size_t errLen)
{
    switch (run->test) {
        case TEST_PUT:
            return replyIs(r, "OK") ? 0 : replyUnexpected("OBJ.PUT", r, err, errLen);
        case TEST_GET:
            if (r->type != REDIS_REPLY_STRING || (uint64_t)r->len != run->size)
                return replyUnexpected("OBJ.GET", r, err, errLen);
            if (r->str[0] != (char)benchPayload[0] ||
                r->str[r->len - 1] != (char)benchPayload[r->len - 1]) {
                snprintf(err, errLen, "OBJ.GET returned bytes that differ from what was put");
                return -1;
            }
            return 0;
        case TEST_FETCH:
            if (r->type != REDIS_REPLY_ARRAY || r->elements != 1)
                return replyUnexpected("OBJ.FETCH", r, err, errLen);
            return replyIs(r->element[0], "OK")
                       ? 0
                       : replyUnexpected("OBJ.FETCH", r->element[0], err, errLen);
        default:
            snprintf(err, errLen, "internal error: no reply check for this test");
            return -1;
    }
}

/* Read the replies of c's outstanding batch into the worker's histogram.
 * Returns 0 or -1 (run failed). */
static int workerReadBatch(Worker *w, Client *c)
{
    Run *run = w->run;
    char err[400];
    int bad = 0, b = c->batch;

    c->batch = 0;
    for (int i = 0; i < b; i++) {
        redisReply *r = clientRead(c, err, sizeof(err));
        if (!r) {
            runFail(run, "client %d: %s", c->idx, err);
            return -1;
        }
        histAdd(&w->hist, nowNs() - c->batchStart);
        if (!bad && checkReply(run, r, err, sizeof(err)) == -1) {
            runFail(run, "%s: %s", run->name, err);
            bad = 1;
        }
        freeReplyObject(r);
    }
    atomic_fetch_add(&run->completed, b);
    return bad ? -1 : 0;
}

/*
 * The timed part of put/get/fetch for one worker: every client writes a
 * batch, then the replies of all of them are read, until the round's
 * requests are done, the time is up or a request failed. Latency of a
 * request is from the write of its batch to its reply, like redis-benchmark.
 */
static void workerNetPhase(Worker *w)
{
    Run *run = w->run;

    for (int i = 0; i < w->n; i++) {
        w->clients[i]->count = runClientCount(run, w->clients[i]->idx);
        w->clients[i]->sent = 0;
        w->clients[i]->batch = 0;
    }
    while (!runShouldStop(run)) {
        int active = 0;
        for (int i = 0; i < w->n; i++) {
            Client *c = w->clients[i];
            long long left = c->count - c->sent;
            if (left <= 0)
                continue;
            if (workerSendBatch(run, c, left < run->o->pipeline ? (int)left : run->o->pipeline))
                return;
            active++;
        }
        if (!active)
            return;
        for (int i = 0; i < w->n; i++) {
            if (w->clients[i]->batch && workerReadBatch(w, w->clients[i]) == -1)
                return;
        }
    }
}

/* The requests of the pin test for one worker: pin, read every byte (unless
 * --no-read), release, one request per client in turn. */
static void workerPinLoop(Worker *w)
{
    Run *run = w->run;
    char id[BENCH_ID_MAX];

    for (int i = 0; i < w->n; i++) {
        w->clients[i]->count = runClientCount(run, w->clients[i]->idx);
        w->clients[i]->sent = 0;
    }
    while (!runShouldStop(run)) {
        int active = 0;
        for (int i = 0; i < w->n; i++) {
            Client *c = w->clients[i];
            ObjBuffer buf;
            if (c->sent >= c->count)
                continue;
            size_t idLen = idFormat(id, run->idBase, runClientObject(run, c, c->sent));
            c->sent++;
            active++;
            uint64_t t0 = nowNs();
            if (objClientPin(c->oc, id, idLen, 0, &buf) == -1) {
                runFail(run, "pin: objClientPin(%s): %s", id, objClientErrMsg(c->oc));
                return;
            }
            uint64_t sum = run->o->pinNoRead ? run->expectSum : benchSum(buf.data, buf.size);
            size_t got = buf.size;
            if (objClientRelease(c->oc, id, idLen) == -1) {
                runFail(run, "pin: objClientRelease(%s): %s", id, objClientErrMsg(c->oc));
                return;
            }
            histAdd(&w->hist, nowNs() - t0);
            atomic_fetch_add(&run->completed, 1);
            if (got != run->size || sum != run->expectSum) {
                runFail(run, "pin: object %s has %zu bytes that differ from what was put", id, got);
                return;
            }
        }
        if (!active)
            return;
    }
}

/* The requests of the cput test for one worker: objClientPut of a fresh id,
 * one request per client in turn (the ids go between rounds). */
static void workerCputLoop(Worker *w)
{
    Run *run = w->run;
    char id[BENCH_ID_MAX];

    for (int i = 0; i < w->n; i++) {
        w->clients[i]->count = runClientCount(run, w->clients[i]->idx);
        w->clients[i]->sent = 0;
    }
    while (!runShouldStop(run)) {
        int active = 0;
        for (int i = 0; i < w->n; i++) {
            Client *c = w->clients[i];
            if (c->sent >= c->count)
                continue;
            size_t idLen = idFormat(id, run->idBase, runClientObject(run, c, c->sent));
            c->sent++;
            active++;
            uint64_t t0 = nowNs();
            if (objClientPut(c->oc, id, idLen, benchPayload, run->size, NULL, 0) == -1) {
                runFail(run, "cput: objClientPut(%s): %s", id, objClientErrMsg(c->oc));
                return;
            }
            histAdd(&w->hist, nowNs() - t0);
            atomic_fetch_add(&run->completed, 1);
        }
        if (!active)
            return;
    }
}

/* The requests of the memcpy test for one worker: memcpy of the payload
 * into each client's own warm buffer, one request per client in turn. */
static void workerMemcpyLoop(Worker *w)
{
    Run *run = w->run;

    for (int i = 0; i < w->n; i++) {
        w->clients[i]->count = runClientCount(run, w->clients[i]->idx);
        w->clients[i]->sent = 0;
    }
    while (!runShouldStop(run)) {
        int active = 0;
        for (int i = 0; i < w->n; i++) {
            Client *c = w->clients[i];
            if (c->sent >= c->count)
                continue;
            c->sent++;
            active++;
            uint64_t t0 = nowNs();
            memcpy(c->dst, benchPayload, run->size);
            __asm__ volatile("" : : "r"(c->dst) : "memory"); /* the copy is not dead */
            histAdd(&w->hist, nowNs() - t0);
            atomic_fetch_add(&run->completed, 1);
        }
        if (!active)
            return;
    }
}

/*
 * The timed part of the pin test for one worker. With --pin-cache the
 * releases still deferred at the end are flushed inside the timed region,
 * so the throughput pays for every release; the cache counters are summed
 * for the report.
 */
static void workerPinPhase(Worker *w)
{
    Run *run = w->run;

    workerPinLoop(w);
    if (!run->o->pinCache)
        return;
    for (int i = 0; i < w->n; i++) {
        Client *c = w->clients[i];
        ObjPinCacheStats st;
        if (objClientFlushReleases(c->oc) == -1)
            runFail(run, "pin: objClientFlushReleases: %s", objClientErrMsg(c->oc));
        if (objClientPinCacheStats(c->oc, &st) == 0) {
            atomic_fetch_add(&run->cacheHits, (long long)st.hits);
            atomic_fetch_add(&run->cacheMisses, (long long)st.misses);
            atomic_fetch_add(&run->cacheBatches, (long long)st.batches);
        }
    }
}

/* CPU seconds the server behind rc has used so far, all threads (INFO cpu:
 * used_cpu_sys + used_cpu_user), or -1 when it cannot be read. */
static double serverCpuSeconds(redisContext *rc)
{
    redisReply *r = redisCommand(rc, "INFO cpu");
    double sys = -1, user = -1;

    if (r && r->type == REDIS_REPLY_STRING && r->str) {
        const char *a = strstr(r->str, "used_cpu_sys:"), *b = strstr(r->str, "used_cpu_user:");
        if (a && b) {
            sys = strtod(a + strlen("used_cpu_sys:"), NULL);
            user = strtod(b + strlen("used_cpu_user:"), NULL);
        }
    }
    freeReplyObject(r);
    return sys < 0 || user < 0 ? -1 : sys + user;
}

/* Serial thread, right before a timed phase: remember each server's CPU. */
static void runCpuMark(Run *run)
{
    for (int i = 0; i < 2; i++)
        if (run->cpuRc[i] && run->cpuSec[i] >= 0)
            run->cpuMark[i] = serverCpuSeconds(run->cpuRc[i]);
}

/* Serial thread, after a timed phase: let the work it left behind finish
 * (a replica's publish waits a few ms for company), then add each server's
 * CPU since runCpuMark. A failed sample makes that figure unknown. */
static void runCpuAdd(Run *run)
{
    if (!run->cpuRc[0] && !run->cpuRc[1])
        return;
    sleepMs(BENCH_CPU_SETTLE_MS);
    for (int i = 0; i < 2; i++) {
        if (!run->cpuRc[i] || run->cpuSec[i] < 0)
            continue;
        double now = serverCpuSeconds(run->cpuRc[i]);
        if (now < 0 || run->cpuMark[i] < 0)
            run->cpuSec[i] = -1;
        else
            run->cpuSec[i] += now - run->cpuMark[i];
    }
}

/* Untimed, between rounds: put deletes what it created, fetch deletes the
 * replicas on the destination so the next round transfers again. */
static void workerCleanup(Worker *w)
{
    Run *run = w->run;
    long long idx[BENCH_DEL_BATCH];
    char err[400];

    for (int i = 0; i < w->n; i++) {
        Client *c = w->clients[i];
        /* A connection with unread replies (its run failed) is out of step: the
         * final sweep deletes what it could not. */
        if (!c->rc || c->rc->err || c->batch)
            continue;
        for (long long k = 0; k < c->sent;) {
            int b = 0;
            for (; b < BENCH_DEL_BATCH && k < c->sent; b++, k++)
                idx[b] = runClientObject(run, c, k);
            if (clientDeleteIds(c, run->idBase, idx, b, err, sizeof(err)) == -1) {
                runFail(run, "%s cleanup: client %d: %s", run->name, c->idx, err);
                break;
            }
        }
        c->sent = 0;
    }
}

/* Untimed, after a cput round's deletes: wait (up to BENCH_SCRUB_WAIT_MS)
 * until the node has zeroed the freed ranges in the background, so that the
 * next round's creates find clean memory, as a writer that deletes an old
 * object a while before its next put does. */
static void runWaitScrubbed(Run *run)
{
    char err[256];
    uint64_t dirty = 1, pending = 1;

    for (int waited = 0; waited < BENCH_SCRUB_WAIT_MS && (dirty || pending); waited += 2) {
        if (statsField(run->cpuRc[0], "arena_dirty_free_bytes", &dirty, err, sizeof(err)) == -1 ||
            statsField(run->cpuRc[0], "checksums_pending", &pending, err, sizeof(err)) == -1)
            return; /* an older node: nothing to wait for */
        if (dirty || pending)
            sleepMs(2);
    }
}

static int benchBarrier(Run *run)
{
    return pthread_barrier_wait(&run->barrier) == PTHREAD_BARRIER_SERIAL_THREAD;
}

/* Plan the next round, or stop. Called by one thread while the others wait. */
static void runPlanNext(Run *run)
{
    run->roundStart += run->roundLen;
    long long left = run->total - run->roundStart;
    run->roundLen = left < run->keys ? left : run->keys;
    if (run->test == TEST_GET || run->test == TEST_PIN || run->test == TEST_MEMCPY)
        run->roundLen = left;
    if (left <= 0 || runShouldStop(run))
        run->stop = 1;
}

/*
 * One worker thread: rounds of (timed phase, untimed cleanup), kept in step
 * with the other workers by a barrier so that a round's timed region is the
 * span from its first request to its last reply across all threads.
 */
static void *workerMain(void *arg)
{
    Worker *w = arg;
    Run *run = w->run;

    for (;;) {
        benchBarrier(run); /* the plan of this round is visible */
        if (run->stop)
            break;
        w->tStart = nowNs();
        if (run->test == TEST_PIN)
            workerPinPhase(w);
        else if (run->test == TEST_CPUT)
            workerCputLoop(w);
        else if (run->test == TEST_MEMCPY)
            workerMemcpyLoop(w);
        else
            workerNetPhase(w);
        w->tEnd = nowNs();
        if (benchBarrier(run)) {
            uint64_t s = UINT64_MAX, e = 0;
            for (int i = 0; i < run->nworkers; i++) {
                if (run->workers[i].tStart < s)
                    s = run->workers[i].tStart;
                if (run->workers[i].tEnd > e)
                    e = run->workers[i].tEnd;
            }
            run->timedNs += e - s;
            runCpuAdd(run);
        }
        if (run->test == TEST_PUT || run->test == TEST_CPUT || run->test == TEST_FETCH)
            workerCleanup(w);
        if (benchBarrier(run)) {
            if (run->test == TEST_CPUT)
                runWaitScrubbed(run);
            runPlanNext(run);
            if (!run->stop)
                runCpuMark(run);
        }
    }
    atomic_fetch_add(&run->finished, 1);
    return NULL;
}

/* ---- one test at one size ------------------------------------------------------------------ */

/* Per-size result kept for the printing. */
typedef struct Result {
    long long requests;
    double seconds;
    double opsPerSec, mbPerSec;
    double avgMs, minMs, p50Ms, p99Ms, p999Ms, maxMs;
    double cpuUs[2]; /* server CPU us per request: node, source; -1 unknown */
    int timeLimited;
} Result;

/* "12.3" or "n/a" for a CPU figure of a Result. */
static const char *cpuText(double us, char *buf, size_t len)
{
    if (us < 0)
        snprintf(buf, len, "n/a");
    else
        snprintf(buf, len, "%.1f", us);
    return buf;
}

static void printResult(const Run *run, const Result *res)
{
    const Options *o = run->o;
    char sz[32];

    char c0[16], c1[16];

    sizeName(run->size, sz, sizeof(sz));
    cpuText(res->cpuUs[0], c0, sizeof(c0));
    cpuText(res->cpuUs[1], c1, sizeof(c1));
    if (o->csv) {
        printf("\"%s\",\"%" PRIu64 "\",\"%d\",\"%.2f\",\"%.2f\",\"%.3f\",\"%.3f\",\"%.3f\","
               "\"%.3f\",\"%s\",\"%s\"\n",
               run->name, run->size, o->clients, res->opsPerSec, res->mbPerSec, res->p50Ms,
               res->p99Ms, res->p999Ms, res->maxMs, c0, c1);
    } else if (o->quiet) {
        printf("%s %s: %.2f requests per second, %.2f MB/s, p50=%.3f msec, server CPU %s",
               run->name, sz, res->opsPerSec, res->mbPerSec, res->p50Ms, c0);
        if (run->test == TEST_FETCH)
            printf(" + source %s", c1);
        printf(" us/request\n");
    } else {
        printf("====== %s %s (%" PRIu64 " bytes) ======\n", run->name, sz, run->size);
        printf("  %lld requests completed in %.3f seconds", res->requests, res->seconds);
        if (res->timeLimited)
            printf(" (stopped by --seconds %.3g before -n %lld)", o->seconds, run->total);
        printf("\n  %d parallel clients on %d threads, pipeline %d, %s %lld objects\n", o->clients,
               run->nworkers, run->test == TEST_PIN ? 1 : o->pipeline,
               run->test == TEST_PUT || run->test == TEST_CPUT ? "rounds of up to" : "working set",
               run->keys);
        printf("  timed: %s\n",
               run->test == TEST_PUT      ? "OBJ.PUT round trips (ids deleted between rounds, "
                                            "untimed)"
               : run->test == TEST_CPUT   ? "objClientPut (ids deleted between rounds, untimed)"
               : run->test == TEST_MEMCPY ? "memcpy of the bytes into a warm buffer, one thread"
               : run->test == TEST_GET    ? "OBJ.GET round trips including the bytes"
               : run->test == TEST_PIN && o->pinNoRead
                   ? "objClientPin + objClientRelease (bytes not read)"
               : run->test == TEST_PIN ? "objClientPin + reading every byte + objClientRelease"
                                       : "OBJ.FETCH round trips on the destination (source "
                                         "PUTs and destination DELs are untimed)");
        if (o->pinCache && run->test == TEST_PIN)
            printf("  pin cache: %lld hits, %lld misses, %lld release batches (bound %d idle)\n",
                   atomic_load(&run->cacheHits), atomic_load(&run->cacheMisses),
                   atomic_load(&run->cacheBatches), OBJ_PIN_CACHE_DEFAULT_IDLE);
        printf("\n  throughput: %.2f requests per second, %.2f MB/s\n", res->opsPerSec,
               res->mbPerSec);
        printf("  server CPU per request (INFO cpu over the timed phases): %s us on the node", c0);
        if (run->test == TEST_FETCH)
            printf(", %s us on the source", c1);
        printf("\n\n");
        printf("  latency summary (msec):\n");
        printf("  %10s %10s %10s %10s %10s %10s\n", "avg", "min", "p50", "p99", "p99.9", "max");
        printf("  %10.3f %10.3f %10.3f %10.3f %10.3f %10.3f\n\n", res->avgMs, res->minMs,
               res->p50Ms, res->p99Ms, res->p999Ms, res->maxMs);
    }
    fflush(stdout);
}

/* Live progress on a terminal until the workers are done. */
static void runMonitor(Run *run, uint64_t t0)
{
    int tty = isatty(STDERR_FILENO) && !run->o->quiet && !run->o->csv;
    uint64_t last = t0;

    while (atomic_load(&run->finished) < run->nworkers) {
        sleepMs(20);
        uint64_t now = nowNs();
        if (!tty || now - last < BENCH_PROGRESS_NS)
            continue;
        last = now;
        long long done = atomic_load(&run->completed);
        double s = (double)(now - t0) / 1e9;
        fprintf(stderr, "\r%s %" PRIu64 " bytes: %.2f ops/s, %lld/%lld done   ", run->name,
                run->size, s > 0 ? (double)done / s : 0.0, done, run->total);
    }
    if (tty)
        fprintf(stderr, "\r%*s\r", 78, "");
}

/* Connect the benchmark clients (and warm the pin mapping). Returns 0 or -1. */
static int runConnect(Run *run, Client *clients, char *err, size_t errLen)
{
    const Options *o = run->o;

    for (int i = 0; i < o->clients; i++) {
        Client *c = &clients[i];
        c->idx = i;
        if (run->test == TEST_PIN) {
            c->oc = o->socketPath[0] ? objClientConnectUnix(o->socketPath)
                                     : objClientConnect(o->host, o->port);
            if (c->oc == NULL || objClientErrCode(c->oc)) {
                snprintf(err, errLen, "client %d: %s", i,
                         c->oc ? objClientErrMsg(c->oc) : "out of memory");
                return -1;
            }
            /* The first pin maps the arena: do it here, outside the timed region. */
            char id[BENCH_ID_MAX];
            size_t idLen = idFormat(id, run->idBase, 0);
            ObjBuffer b;
            if (objClientPin(c->oc, id, idLen, 0, &b) == -1 ||
                objClientRelease(c->oc, id, idLen) == -1) {
                snprintf(err, errLen, "client %d: first pin: %s", i, objClientErrMsg(c->oc));
                return -1;
            }
            if ((o->prefault && objClientSetPinPrefault(c->oc, 64 * 1024) == -1) ||
                (o->pinCache && objClientSetPinCache(c->oc, OBJ_PIN_CACHE_DEFAULT_IDLE) == -1)) {
                snprintf(err, errLen, "client %d: pin cache: %s", i, objClientErrMsg(c->oc));
                return -1;
            }
            continue;
        }
        if (run->test == TEST_MEMCPY) {
            c->dst = malloc(run->size);
            if (!c->dst) {
                snprintf(err, errLen, "out of memory");
                return -1;
            }
            memset(c->dst, 1, run->size); /* warm: its pages exist */
            continue;
        }
        if (run->test == TEST_CPUT) {
            c->oc = o->socketPath[0] ? objClientConnectUnix(o->socketPath)
                                     : objClientConnect(o->host, o->port);
            if (c->oc == NULL || objClientErrCode(c->oc) ||
                objClientSetPutThreads(c->oc, o->putThreads) == -1) {
                snprintf(err, errLen, "client %d: %s", i,
                         c->oc ? objClientErrMsg(c->oc) : "out of memory");
                return -1;
            }
            /* The first large put maps the arena: do it here, untimed. */
            char id[BENCH_ID_MAX];
            size_t idLen = idFormat(id, run->idBase, -1 - i);
            if (objClientPut(c->oc, id, idLen, benchPayload, run->size, NULL, 0) == -1 ||
                objClientDelete(c->oc, id, idLen) == -1) {
                snprintf(err, errLen, "client %d: first put: %s", i, objClientErrMsg(c->oc));
                return -1;
            }
        }
        if (!(c->rc = benchConnect(o, 0, err, errLen)))
            return -1;
        if (clientInitBuffers(c, o->pipeline) == -1) {
            snprintf(err, errLen, "out of memory");
            return -1;
        }
    }
    return 0;
}

/* Merge the workers' histograms into the printed result. */
static void runResult(const Run *run, Result *res)
{
    Hist *h = malloc(sizeof(*h));

    if (!h)
        die("out of memory");
    histInit(h);
    for (int i = 0; i < run->nworkers; i++)
        histMerge(h, &run->workers[i].hist);
    memset(res, 0, sizeof(*res));
    res->requests = atomic_load(&run->completed);
    res->seconds = (double)run->timedNs / 1e9;
    res->opsPerSec = res->seconds > 0 ? (double)res->requests / res->seconds : 0;
    res->mbPerSec = res->opsPerSec * (double)run->size / 1e6;
    res->avgMs = h->n ? h->sum / (double)h->n / 1e6 : 0;
    res->minMs = h->n ? (double)h->min / 1e6 : 0;
    res->p50Ms = (double)histQuantile(h, 0.50) / 1e6;
    res->p99Ms = (double)histQuantile(h, 0.99) / 1e6;
    res->p999Ms = (double)histQuantile(h, 0.999) / 1e6;
    res->maxMs = (double)h->max / 1e6;
    res->timeLimited = res->requests < run->total;
    for (int i = 0; i < 2; i++)
        res->cpuUs[i] = !run->cpuRc[i] || run->cpuSec[i] < 0 || res->requests == 0
                            ? -1
                            : run->cpuSec[i] * 1e6 / (double)res->requests;
    free(h);
}

/*
 * Prepare the working set of the test (untimed): get/pin objects on the
 * node; fetch objects on the source, known to the directory. Sets run->keys.
 * Returns 0 or -1 with err.
 */
static int runSetup(Run *run, Client *mainC, Client *srcC, char *err, size_t errLen)
{
    const Options *o = run->o;
    long long fitDst = 0, fitSrc = LLONG_MAX;

    if (run->test == TEST_MEMCPY) { /* no object at all */
        run->keys = run->total;
        return 0;
    }
    if (nodeFit(mainC->rc, run->size, &fitDst, err, errLen) == -1)
        return -1;
    if (run->test == TEST_FETCH) {
        char pa[1024], pb[1024];
        if (statsArenaPath(mainC->rc, pa, sizeof(pa), err, errLen) == -1 ||
            statsArenaPath(srcC->rc, pb, sizeof(pb), err, errLen) == -1)
            return -1;
        if (!strcmp(pa, pb)) {
            snprintf(err, errLen, "the source and the destination are the same node (arena %.300s)",
                     pa);
            return -1;
        }
        if (nodeFit(srcC->rc, run->size, &fitSrc, err, errLen) == -1)
            return -1;
    }
    run->keys = fitDst < fitSrc ? fitDst : fitSrc;
    if (run->keys < 1) {
        snprintf(err, errLen,
                 "%" PRIu64 "-byte objects do not fit in %.0f%% of the free arena of "
                 "the %s node",
                 run->size, BENCH_ARENA_SHARE * 100, fitDst < 1 ? "destination" : "source");
        return -1;
    }
    if (run->keys > run->total)
        run->keys = run->total;
    if (o->keyspace && run->keys > o->keyspace)
        run->keys = o->keyspace;
    if (run->test == TEST_GET || run->test == TEST_PIN) {
        run->expectSum = benchSum(benchPayload, run->size);
        return clientPutRange(mainC, run->idBase, 0, run->keys, run->size, err, errLen);
    }
    if (run->test == TEST_FETCH) {
        if (clientPutRange(srcC, run->idBase, 0, run->keys, run->size, err, errLen) == -1)
            return -1;
        return waitLocated(mainC, run->idBase, run->keys, err, errLen);
    }
    return 0;
}

/* Delete what the test left (untimed). Returns 0 or -1 with err. */
static int runTeardown(Run *run, Client *mainC, Client *srcC, char *err, size_t errLen)
{
    int rv = 0;

    if (mainC->rc && !mainC->rc->err && sweepPrefix(mainC->rc, run->idBase, err, errLen) == -1)
        rv = -1;
    if (srcC->rc && !srcC->rc->err && sweepPrefix(srcC->rc, run->idBase, err, errLen) == -1)
        rv = -1;
    return rv;
}

/* Start the workers and wait for them; client i runs on thread i % threads. */
static void runWorkers(Run *run, Client *clients)
{
    const Options *o = run->o;

    run->nworkers = o->threads;
    run->workers = calloc((size_t)run->nworkers, sizeof(*run->workers));
    if (!run->workers)
        die("out of memory");
    for (int t = 0; t < run->nworkers; t++) {
        Worker *w = &run->workers[t];
        w->run = run;
        w->clients = calloc((size_t)o->clients, sizeof(*w->clients));
        if (!w->clients)
            die("out of memory");
        histInit(&w->hist);
        for (int i = t; i < o->clients; i += run->nworkers)
            w->clients[w->n++] = &clients[i];
    }
    if (pthread_barrier_init(&run->barrier, NULL, (unsigned)run->nworkers) != 0)
        die("pthread_barrier_init failed");
    run->roundStart = 0;
    run->roundLen = (run->test == TEST_GET || run->test == TEST_PIN || run->test == TEST_MEMCPY)
                        ? run->total
                        : run->keys;

    runCpuMark(run);
    uint64_t t0 = nowNs();
    run->deadline = t0 + (uint64_t)(o->seconds * 1e9);
    for (int t = 0; t < run->nworkers; t++) {
        int e = pthread_create(&run->workers[t].tid, NULL, workerMain, &run->workers[t]);
        if (e != 0)
            die("cannot start thread %d: %s", t, strerror(e)); /* no worker passed a barrier */
    }
    runMonitor(run, t0);
    for (int t = 0; t < run->nworkers; t++)
        pthread_join(run->workers[t].tid, NULL);
    pthread_barrier_destroy(&run->barrier);
}

/*
 * Set up, run and clean up one test at one size, then print its result.
 * Returns 0, or -1 after printing the first error (the caller exits 1).
 */
static int runOne(const Options *o, TestKind test, uint64_t size)
{
    static int runNo;
    Run *run = calloc(1, sizeof(*run));
    Client mainC = {0}, srcC = {0};
    Client *clients = calloc((size_t)o->clients, sizeof(*clients));
    char err[512] = "", cleanupErr[512] = "";
    int rv = -1;
    Result res;

    if (!run || !clients)
        die("out of memory");
    run->o = o;
    run->test = test;
    run->size = size;
    run->total = o->requests;
    pthread_mutex_init(&run->errLock, NULL);
    snprintf(run->name, sizeof(run->name), "%s%s%s%s", testNames[test],
             test == TEST_FETCH && o->via ? "-" : "", test == TEST_FETCH && o->via ? o->via : "",
             test == TEST_FETCH && o->from[0] ? "-from" : "");
    if (test == TEST_PIN)
        snprintf(run->name, sizeof(run->name), "pin%s%s%s", o->pinCache ? "-cache" : "",
                 o->prefault ? "-prefault" : "", o->pinNoRead ? "-noread" : "");
    if (test == TEST_CPUT && o->putThreads)
        snprintf(run->name, sizeof(run->name), "cput-%dt", o->putThreads);
    snprintf(run->idBase, sizeof(run->idBase), "%s%s:%d:%s:%" PRIu64 ":", o->prefix, benchNonce,
             runNo++, testNames[test], size);

    if (!(mainC.rc = benchConnect(o, 0, err, sizeof(err))) ||
        clientInitBuffers(&mainC, BENCH_SETUP_BATCH) == -1)
        goto out;
    if (test == TEST_FETCH && (!(srcC.rc = benchConnect(o, 1, err, sizeof(err))) ||
                               clientInitBuffers(&srcC, BENCH_SETUP_BATCH) == -1))
        goto out;
    if (runSetup(run, &mainC, &srcC, err, sizeof(err)) == -1 ||
        runConnect(run, clients, err, sizeof(err)) == -1)
        goto out;
    run->cpuRc[0] = mainC.rc;
    run->cpuRc[1] = srcC.rc;

    runWorkers(run, clients);
    if (atomic_load(&run->failed)) {
        snprintf(err, sizeof(err), "%s", run->err);
    } else if (benchInterrupted) {
        snprintf(err, sizeof(err), "interrupted");
    } else {
        runResult(run, &res);
        printResult(run, &res);
        rv = 0;
    }

out:
    for (int i = 0; i < o->clients; i++)
        clientClose(&clients[i]);
    if (mainC.rc && runTeardown(run, &mainC, &srcC, cleanupErr, sizeof(cleanupErr)) == -1) {
        fprintf(stderr, "obj-benchmark: %s %" PRIu64 ": cleanup: %s\n", run->name, size,
                cleanupErr);
        if (rv == 0)
            snprintf(err, sizeof(err), "cleanup failed");
        rv = -1;
    }
    if (rv == -1 && err[0])
        fprintf(stderr, "obj-benchmark: %s %" PRIu64 " bytes: %s\n", run->name, size, err);
    clientClose(&mainC);
    clientClose(&srcC);
    if (run->workers) {
        for (int t = 0; t < run->nworkers; t++)
            free(run->workers[t].clients);
        free(run->workers);
    }
    pthread_mutex_destroy(&run->errLock);
    free(run);
    free(clients);
    return rv;
}

static void onSignal(int sig)
{
    (void)sig;
    benchInterrupted = 1;
}

/* Fill the shared payload with a non-repeating pattern (so a misplaced byte
 * shows in the pin test's sum). Dies when out of memory. */
static void payloadInit(const Options *o)
{
    uint64_t max = 0, x = 0x9e3779b97f4a7c15ULL;

    for (int i = 0; i < o->nsizes; i++)
        if (o->sizes[i] > max)
            max = o->sizes[i];
    benchPayload = malloc((size_t)max + 8);
    if (!benchPayload)
        die("cannot allocate a %" PRIu64 "-byte payload", max);
    for (uint64_t i = 0; i < max; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(benchPayload + i, &x, 8);
    }
}

int main(int argc, char **argv)
{
    Options o;
    struct sigaction sa;
    struct timespec ts;

    parseOptions(argc, argv, &o);
    signal(SIGPIPE, SIG_IGN);
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = onSignal;
    sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C ends it at once */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(benchNonce, sizeof(benchNonce), "%x%05lx", (unsigned)getpid() & 0xfffff,
             (unsigned long)(ts.tv_nsec / 1000) & 0xfffff);
    payloadInit(&o);

    if (o.csv)
        printf("\"test\",\"size\",\"clients\",\"ops_per_sec\",\"mb_per_sec\",\"p50_ms\","
               "\"p99_ms\",\"p999_ms\",\"max_ms\",\"cpu_us_node\",\"cpu_us_source\"\n");
    for (int t = 0; t < o.ntests; t++) {
        for (int s = 0; s < o.nsizes; s++) {
            if (runOne(&o, (TestKind)o.tests[t], o.sizes[s]) == -1) {
                free(benchPayload);
                return benchInterrupted ? 130 : 1;
            }
        }
    }
    free(benchPayload);
    return 0;
}
