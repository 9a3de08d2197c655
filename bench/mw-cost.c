/*
 * mw-cost.c - what a scoped read key costs per transfer (docs/architecture.md,
 * "Large objects: the READ rendezvous"): the transfer engine binds a type-2
 * memory window over the object before RNDV (IBV_WR_BIND_MW) and invalidates
 * it at DONE (IBV_WR_LOCAL_INV), on the connection's QP; the first transfer
 * of an object also registers its range (cached afterwards). This measures,
 * on one RC QP connected to itself:
 *
 *   reg        ibv_reg_mr + ibv_dereg_mr of an object's range (the cache's
 *              miss), per size;
 *   bind+inv   a bind over the object's registration and an invalidation,
 *              each posted and its completion polled: wall and CPU
 *              microseconds per pair, per size;
 *   read       one READ of min(SIZE, 1 MiB) through a plain registration
 *              key vs. bind + the same READ + invalidate (wall per transfer;
 *              a QP looped onto itself on Soft-RoCE stalls on larger ones).
 *
 *   mw-cost [--iters N] [--sizes "1048576 4194304 16777216"] [DEVICE]
 *
 * A header line, then CSV, one row per size. CPU time is
 * the process's user+system time (getrusage), so it includes the busy
 * polling; wall time includes the device's work (Soft-RoCE: kernel threads).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <infiniband/verbs.h>

#define MW_CHUNK (1u << 20)
#define MW_DEPTH 64
#define MW_INFLIGHT                                                                                \
    4 /* READ chunks in flight (the engine allows 16; a QP looped onto itself                      \
       * on Soft-RoCE stalls with that many) */

static struct ibv_cq *cq;
static struct ibv_qp *qp;

static double wallUs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static double cpuUs(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 + ru.ru_utime.tv_usec +
           ru.ru_stime.tv_usec;
}

static void die(const char *what)
{
    fprintf(stderr, "mw-cost: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* Poll n completions (bounded); every one must succeed. */
static void reap(int n)
{
    struct ibv_wc wc[16];
    double until = wallUs() + 60e6;

    while (n > 0) {
        int got = ibv_poll_cq(cq, 16, wc);
        if (got < 0)
            die("ibv_poll_cq");
        for (int i = 0; i < got; i++) {
            if (wc[i].status != IBV_WC_SUCCESS) {
                fprintf(stderr, "mw-cost: completion %s (wr %llu)\n",
                        ibv_wc_status_str(wc[i].status), (unsigned long long)wc[i].wr_id);
                exit(1);
            }
        }
        n -= got;
        if (wallUs() > until) {
            fprintf(stderr, "mw-cost: completions did not come\n");
            exit(1);
        }
    }
}

static void post(struct ibv_send_wr *wr)
{
    struct ibv_send_wr *bad;
    int rc = ibv_post_send(qp, wr, &bad);
    if (rc) {
        errno = rc;
        die("ibv_post_send");
    }
}

/* Connect qp to itself (RoCE v2 gid index gidIndex). */
static void selfConnect(struct ibv_context *ctx, int gidIndex)
{
    struct ibv_port_attr pa;
    union ibv_gid gid;
    struct ibv_qp_attr a;

    if (ibv_query_port(ctx, 1, &pa) || ibv_query_gid(ctx, 1, gidIndex, &gid))
        die("query port/gid");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        die("INIT");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = pa.active_mtu;
    a.dest_qp_num = qp->qp_num;
    a.max_dest_rd_atomic = 16;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = gid;
    a.ah_attr.grh.sgid_index = (uint8_t)gidIndex;
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        die("RTR");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 16;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
        die("RTS");
}

static void bindWindow(struct ibv_mw *mw, struct ibv_mr *mr, uint8_t *addr, size_t len,
                       uint32_t *rkey)
{
    struct ibv_send_wr wr = {.wr_id = 1, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};

    *rkey = ibv_inc_rkey(*rkey);
    /* The provider passes mw->rkey as the window's current key (rxe checks
     * it): a type-2 window's key is the last one bound. */
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = *rkey;
    wr.bind_mw.bind_info.mr = mr;
    wr.bind_mw.bind_info.addr = (uintptr_t)addr;
    wr.bind_mw.bind_info.length = len;
    wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
    post(&wr);
    mw->rkey = *rkey;
}

static void invalidate(uint32_t rkey)
{
    struct ibv_send_wr wr = {
        .wr_id = 2, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED};
    wr.invalidate_rkey = rkey;
    post(&wr);
}

/* READ len bytes at src (key rkey) into dst, in 1 MiB chunks, several in
 * flight (MW_INFLIGHT), as the transfer engine does. */
static void readAll(uint8_t *dst, uint32_t lkey, uint8_t *src, uint32_t rkey, size_t len)
{
    size_t posted = 0;
    int inflight = 0;

    while (posted < len || inflight > 0) {
        while (posted < len && inflight < MW_INFLIGHT) {
            uint32_t n = len - posted < MW_CHUNK ? (uint32_t)(len - posted) : MW_CHUNK;
            struct ibv_sge sge = {.addr = (uintptr_t)(dst + posted), .length = n, .lkey = lkey};
            struct ibv_send_wr wr = {.wr_id = 3, .sg_list = &sge, .num_sge = 1};
            wr.opcode = IBV_WR_RDMA_READ;
            wr.send_flags = IBV_SEND_SIGNALED;
            wr.wr.rdma.remote_addr = (uintptr_t)(src + posted);
            wr.wr.rdma.rkey = rkey;
            post(&wr);
            posted += n;
            inflight++;
        }
        reap(1);
        inflight--;
    }
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {{"iters", 1, 0, 'n'}, {"sizes", 1, 0, 's'}, {0, 0, 0, 0}};
    int iters = 2000, o, n;
    const char *sizesArg = "1048576 4194304 16777216";

    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (o == 'n')
            iters = atoi(optarg);
        else if (o == 's')
            sizesArg = optarg;
        else
            return 2;
    }
    struct ibv_device **devs = ibv_get_device_list(&n);
    if (!devs || n == 0)
        die("no RDMA device");
    struct ibv_device *dev = devs[0];
    for (int i = 0; optind < argc && i < n; i++)
        if (!strcmp(ibv_get_device_name(devs[i]), argv[optind]))
            dev = devs[i];
    struct ibv_context *ctx = ibv_open_device(dev);
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    if (!pd)
        die("open device / pd");
    size_t maxSize = 0;
    size_t sizes[16];
    int nSizes = 0;
    for (char *p = (char *)sizesArg; *p && nSizes < 16;) {
        char *e;
        size_t v = strtoull(p, &e, 10);
        if (e == p)
            break;
        sizes[nSizes++] = v;
        maxSize = v > maxSize ? v : maxSize;
        p = e;
    }
    uint8_t *src = aligned_alloc(4096, maxSize + 4096), *dst = aligned_alloc(4096, maxSize + 4096);
    if (!src || !dst)
        die("memory");
    memset(src, 0x5A, maxSize);
    memset(dst, 0, maxSize);
    /* The arena as the engine registers it: local access and window binding. */
    struct ibv_mr *arena =
        ibv_reg_mr(pd, src, maxSize, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
    struct ibv_mr *dstMr = ibv_reg_mr(pd, dst, maxSize, IBV_ACCESS_LOCAL_WRITE);
    if (!arena || !dstMr)
        die("ibv_reg_mr");
    cq = ibv_create_cq(ctx, 4 * MW_DEPTH, NULL, NULL, 0);
    struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC};
    qa.cap.max_send_wr = MW_DEPTH;
    qa.cap.max_recv_wr = 4;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    qp = cq ? ibv_create_qp(pd, &qa) : NULL;
    if (!qp)
        die("create QP");
    selfConnect(ctx, getenv("MW_GID") ? atoi(getenv("MW_GID")) : 1);
    struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
    if (!mw)
        die("ibv_alloc_mw(TYPE_2)");
    uint32_t rkey = mw->rkey;

    printf("mw-cost: device %s, %d iterations\n", ibv_get_device_name(dev), iters);
    printf("size_bytes,reg_dereg_us,bindinv_wall_us,bindinv_cpu_us,read_plain_wall_us,"
           "read_window_wall_us,read_window_extra_wall_us\n");
    for (int si = 0; si < nSizes; si++) {
        size_t size = sizes[si];
        /* the registration cache's miss: register and deregister the object's range */
        int reps = iters / 10 > 5 ? iters / 10 : 5;
        double w0 = wallUs();
        for (int i = 0; i < reps; i++) {
            struct ibv_mr *r = ibv_reg_mr(pd, src, size, IBV_ACCESS_MW_BIND);
            if (!r)
                die("ibv_reg_mr (object)");
            ibv_dereg_mr(r);
        }
        double regUs = (wallUs() - w0) / reps;
        /* per transfer: bind a window over the object's registration, invalidate it */
        struct ibv_mr *obj = ibv_reg_mr(pd, src, size, IBV_ACCESS_MW_BIND);
        if (!obj)
            die("ibv_reg_mr (object)");
        for (int i = 0; i < 50; i++) { /* warm-up */
            bindWindow(mw, obj, src, size, &rkey);
            invalidate(rkey);
            reap(2);
        }
        w0 = wallUs();
        double c0 = cpuUs();
        for (int i = 0; i < iters; i++) {
            bindWindow(mw, obj, src, size, &rkey);
            reap(1);
            invalidate(rkey);
            reap(1);
        }
        double bindWall = (wallUs() - w0) / iters, bindCpu = (cpuUs() - c0) / iters;
        /* one READ of up to 1 MiB through a plain key vs. bind + READ + invalidate (a
         * QP looped onto itself on Soft-RoCE stalls on larger transfers) */
        uint32_t rlen = size < MW_CHUNK ? (uint32_t)size : MW_CHUNK;
        struct ibv_mr *plain = ibv_reg_mr(pd, src, rlen, IBV_ACCESS_REMOTE_READ);
        if (!plain)
            die("ibv_reg_mr (plain)");
        int rreps = 20;
        readAll(dst, dstMr->lkey, src, plain->rkey, rlen); /* warm-up */
        w0 = wallUs();
        for (int i = 0; i < rreps; i++)
            readAll(dst, dstMr->lkey, src, plain->rkey, rlen);
        double pw = (wallUs() - w0) / rreps;
        w0 = wallUs();
        for (int i = 0; i < rreps; i++) {
            bindWindow(mw, obj, src, size, &rkey);
            reap(1);
            readAll(dst, dstMr->lkey, src, rkey, rlen);
            invalidate(rkey);
            reap(1);
        }
        double ww = (wallUs() - w0) / rreps;
        printf("%zu,%.1f,%.2f,%.2f,%.1f,%.1f,%.1f\n", size, regUs, bindWall, bindCpu, pw, ww,
               ww - pw);
        fflush(stdout);
        ibv_dereg_mr(plain);
        ibv_dereg_mr(obj);
    }
    return 0;
}
