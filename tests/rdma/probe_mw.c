/*
 * probe_mw.c - how far does this RDMA device honour type-2 memory windows,
 * the way the transfer engine uses them (docs/architecture.md, "Large
 * objects: the READ rendezvous")? One RC QP connected to itself, four
 * checks, each on a fresh window:
 *   1. a window over one page of a larger registration (MW_BIND only, no
 *      remote read): a READ inside it must work; a READ past it but inside
 *      the registration tells whether the device checks the window's range;
 *   2. a window over a registration of that page only: a READ past it must
 *      fail with a remote access error;
 *   3. bind, IBV_WR_LOCAL_INV, READ: must fail;
 *   4. a QP without remote read access: a READ through a bound window must
 *      fail (the gate before a peer's handshake).
 *
 *   probe_mw [DEVICE]     (default: the first device; PROBE_GID: gid index, 1)
 *
 * Prints "probe_mw: ..." lines and a result line. Exit 0 when 2-4 hold (what
 * the transport needs: it binds windows over per-object registrations), 1
 * when not, 2 on setup errors. Soft-RoCE on Linux 6.1 passes 2-4 but not
 * the window-range half of 1 (bench/results/probe-mw-softroce.txt).
 */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#define PROBE_LEN 65536

static struct ibv_cq *cq;
static struct ibv_qp *qp;

/* Wait (bounded) for one completion; returns its status, or -1 on timeout. */
static int probeWait(struct ibv_wc *wc)
{
    for (int i = 0; i < 2000000; i++) {
        int n = ibv_poll_cq(cq, 1, wc);
        if (n < 0)
            return -1;
        if (n == 1)
            return (int)wc->status;
        if (i > 1000) {
            struct timespec ts = {0, 1000};
            nanosleep(&ts, NULL);
        }
    }
    return -1;
}

/* Connect qp to itself (RoCE: the gid of gidIndex). Returns 0 or -1. */
static int probeSelfConnect(struct ibv_context *ctx, int gidIndex, int access)
{
    struct ibv_port_attr pa;
    union ibv_gid gid;
    struct ibv_qp_attr a;

    if (ibv_query_port(ctx, 1, &pa) || ibv_query_gid(ctx, 1, gidIndex, &gid))
        return -1;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = access;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        return -1;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = qp->qp_num;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = gid;
    a.ah_attr.grh.sgid_index = (uint8_t)gidIndex;
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.dlid = pa.lid;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        return -1;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 1;
    a.rnr_retry = 1;
    a.max_rd_atomic = 1;
    return ibv_modify_qp(qp, &a,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                             IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)
               ? -1
               : 0;
}

/* One signalled work request; returns its completion status or -1. */
static int probePost(struct ibv_send_wr *wr)
{
    struct ibv_send_wr *bad;
    struct ibv_wc wc;
    int rc = ibv_post_send(qp, wr, &bad);

    if (rc) {
        printf("probe_mw: ibv_post_send(opcode %d): %s\n", wr->opcode, strerror(rc));
        return -1;
    }
    return probeWait(&wc);
}

static int probeRead(uint8_t *dst, struct ibv_mr *mr, uint64_t raddr, uint32_t len, uint32_t rkey)
{
    struct ibv_sge sge = {.addr = (uintptr_t)dst, .length = len, .lkey = mr->lkey};
    struct ibv_send_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1};

    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    return probePost(&wr);
}

static void probeSay(const char *what, int st)
{
    printf("probe_mw: %s: %s\n", what, st < 0 ? "no completion" : ibv_wc_status_str(st));
}

/* Bind mw over the page at addr of mr (remote read). Returns the new rkey,
 * 0 when the bind failed. */
static uint32_t probeBind(struct ibv_mw *mw, struct ibv_mr *mr, uint8_t *addr)
{
    uint32_t rkey = ibv_inc_rkey(mw->rkey);
    struct ibv_send_wr wr = {.wr_id = 2, .opcode = IBV_WR_BIND_MW, .send_flags = IBV_SEND_SIGNALED};

    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = rkey;
    wr.bind_mw.bind_info.mr = mr;
    wr.bind_mw.bind_info.addr = (uintptr_t)addr;
    wr.bind_mw.bind_info.length = 4096;
    wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
    int st = probePost(&wr);
    probeSay("bind", st);
    return st == IBV_WC_SUCCESS ? rkey : 0;
}

/* Reset the QP (a failed read leaves it in error), reconnect it with
 * access, and give it a fresh window. */
static void probeReset(struct ibv_context *ctx, int gidIndex, int access, struct ibv_mw **mw,
                       struct ibv_pd *pd)
{
    struct ibv_qp_attr ra = {.qp_state = IBV_QPS_RESET};
    struct ibv_wc wc;

    ibv_modify_qp(qp, &ra, IBV_QP_STATE);
    while (ibv_poll_cq(cq, 1, &wc) > 0)
        ;
    if (probeSelfConnect(ctx, gidIndex, access) == -1) {
        printf("probe_mw: reconnect: %s\n", strerror(errno));
        exit(2);
    }
    *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
    if (!*mw) {
        printf("probe_mw: ibv_alloc_mw: %s\n", strerror(errno));
        exit(2);
    }
}

int main(int argc, char **argv)
{
    int n, gidIndex = getenv("PROBE_GID") ? atoi(getenv("PROBE_GID")) : 1;
    struct ibv_device **devs = ibv_get_device_list(&n);
    struct ibv_device_attr da;

    if (!devs || n == 0) {
        printf("probe_mw: no RDMA device\n");
        return 2;
    }
    struct ibv_device *dev = devs[0];
    for (int i = 0; argc > 1 && i < n; i++)
        if (!strcmp(ibv_get_device_name(devs[i]), argv[1]))
            dev = devs[i];
    struct ibv_context *ctx = ibv_open_device(dev);
    if (!ctx || ibv_query_device(ctx, &da)) {
        printf("probe_mw: cannot open %s\n", ibv_get_device_name(dev));
        return 2;
    }
    printf("probe_mw: device %s max_mw %d cap_flags 0x%x (MW type2a %d type2b %d)\n",
           ibv_get_device_name(dev), da.max_mw, da.device_cap_flags,
           !!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2A),
           !!(da.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B));
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    uint8_t *buf = aligned_alloc(4096, 2 * PROBE_LEN);
    memset(buf, 0xAB, PROBE_LEN);
    struct ibv_mr *mr =
        ibv_reg_mr(pd, buf, 2 * PROBE_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
    if (!mr) {
        printf("probe_mw: ibv_reg_mr with MW_BIND: %s\n", strerror(errno));
        return 1;
    }
    struct ibv_mw *mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
    if (!mw) {
        printf("probe_mw: ibv_alloc_mw(TYPE_2): %s\n", strerror(errno));
        return 1;
    }
    cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC};
    qa.cap.max_send_wr = 8;
    qa.cap.max_recv_wr = 8;
    qa.cap.max_send_sge = 2;
    qa.cap.max_recv_sge = 1;
    qp = cq ? ibv_create_qp(pd, &qa) : NULL;
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
    if (!qp || probeSelfConnect(ctx, gidIndex, access) == -1) {
        printf("probe_mw: QP setup: %s\n", strerror(errno));
        return 2;
    }
    /* Step 1: a window over page 1 of the arena-like registration. */
    struct ibv_mr *sub = ibv_reg_mr(pd, buf + 4096, 4096, IBV_ACCESS_MW_BIND);
    if (!sub) {
        printf("probe_mw: ibv_reg_mr (one page): %s\n", strerror(errno));
        return 2;
    }
    uint8_t *dst = buf + PROBE_LEN;
    uint32_t rkey = probeBind(mw, mr, buf + 4096);
    int okBind = rkey != 0;
    int st = okBind ? probeRead(dst, mr, (uintptr_t)buf + 4096, 4096, rkey) : -1;
    int okIn = st == IBV_WC_SUCCESS && dst[0] == 0xAB;
    probeSay("read inside the window", st);
    st = okBind ? probeRead(dst, mr, (uintptr_t)buf + 8192, 4096, rkey) : -1;
    probeSay("read past the window, inside its registration", st);
    int winRange = st == IBV_WC_REM_ACCESS_ERR;
    /* Step 2: a window over a registration of that page only. */
    probeReset(ctx, gidIndex, access, &mw, pd);
    rkey = probeBind(mw, sub, buf + 4096);
    st = rkey ? probeRead(dst, mr, (uintptr_t)buf + 4096 + 2048, 4096, rkey) : -1;
    probeSay("read past a window over a one-page registration", st);
    int subRange = st == IBV_WC_REM_ACCESS_ERR;
    /* Step 3: bind, invalidate, read. */
    probeReset(ctx, gidIndex, access, &mw, pd);
    rkey = probeBind(mw, sub, buf + 4096);
    struct ibv_send_wr inv = {
        .wr_id = 3, .opcode = IBV_WR_LOCAL_INV, .send_flags = IBV_SEND_SIGNALED};
    inv.invalidate_rkey = rkey;
    st = rkey ? probePost(&inv) : -1;
    probeSay("local invalidate", st);
    int okInv = st == IBV_WC_SUCCESS;
    st = probeRead(dst, mr, (uintptr_t)buf + 4096, 4096, rkey);
    probeSay("read after invalidate", st);
    int okAfter = st == IBV_WC_REM_ACCESS_ERR;
    /* Step 4: a QP without remote read access. */
    probeReset(ctx, gidIndex, IBV_ACCESS_LOCAL_WRITE, &mw, pd);
    rkey = probeBind(mw, sub, buf + 4096);
    st = rkey ? probeRead(dst, mr, (uintptr_t)buf + 4096, 4096, rkey) : -1;
    probeSay("read on a QP without remote read", st);
    int okNoRead = st != IBV_WC_SUCCESS;
    printf("probe_mw: result bind=%d inside=%d window_range=%d subreg_range=%d invalidate=%d "
           "after_inv=%d qp_gate=%d\n",
           okBind, okIn, winRange, subRange, okInv, okAfter, okNoRead);
    return okBind && okIn && subRange && okInv && okAfter && okNoRead ? 0 : 1;
}
