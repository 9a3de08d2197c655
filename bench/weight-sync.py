"""Weight sync: a model from a trainer to N inference processes, each on its own node,
against one pair and torch.distributed (gloo) on the same links.

For each N: N+1 nodes n0..nN in network namespaces (tests/lib/netns.py), each behind a
tc tbf link of RATE both ways to one bridge. The trainer (this process) publishes on
n0; inference process i (a process of its own, connected to node ni's unix socket)
waits for a newer version (objstore.models.latest), loads it into its module in place
(objstore.models.load) and reports the time. Measured, in one lab and one run:

- pair: the trainer publishes model "pair" v1, one inference process on n1 loads it;
- objstore N: model "m" v1 (full), then v2 with 10 % of the tensors changed (delta),
  to the N inference processes; from the publish call to the last module loaded;
- gloo per tensor / gloo flat: N+1 ranks, rank 0 in n0's namespace and rank i in
  ni's, on a lab of the same links built once the nodes are stopped (memory):
  dist.broadcast of each tensor into the module's own parameters, or of one flat
  bucket copied into the module; from rank 0's first call (after a barrier) to the
  last rank done;
- publish cost: models.publish of the state dict against put_object of it on n0,
  alternated, the median of each.
Appends CSV rows to OUT.csv and a section to OUT.md. Called by bench/weight-sync.sh;
also runs as one inference process (--reader) or one gloo rank (--gloo).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))

import torch  # noqa: E402


class Model(torch.nn.Module):
    """TENSORS parameters of ELEMS float32 each: the shape of the issue's model."""

    def __init__(self, tensors, elems):
        super().__init__()
        self.p = torch.nn.ParameterList(
            [torch.nn.Parameter(torch.zeros(elems), requires_grad=False) for _ in range(tensors)])


def state(tensors, elems, seed):
    g = torch.Generator().manual_seed(seed)
    return {f"p.{i}": torch.randn(elems, generator=g) for i in range(tensors)}


def changed(sd, share, seed):
    """sd with round(share * len) tensors changed (spread over the model)."""
    out = dict(sd)
    keys = list(sd)
    n = max(1, round(share * len(keys)))
    for k in keys[::max(1, len(keys) // n)][:n]:
        out[k] = sd[k] + seed
    return out


# ---- an inference process -------------------------------------------------------------------

def reader(a):
    """Connect to a node's unix socket, say "ready", then for each expected version: wait
    for it, load it into the module, print "loaded <version> <monotonic time>"."""
    import objstore
    from objstore import models
    net = Model(a.tensors, a.elems)
    c = objstore.connect(unix_socket=a.sock)
    held = 0
    print("ready", flush=True)
    for _ in range(a.versions):
        models.latest(c, a.name, newer_than=held, timeout=600)
        held = models.load(c, a.name, net, timeout=600)
        print(f"loaded {held} {time.monotonic():.6f}", flush=True)
    c.close()


def start_readers(lab, names, model, a):
    procs = []
    for n in names:
        argv = [sys.executable, __file__, "--reader", "--sock", lab[n].sock_path, "--name",
                model, "--versions", str(a.versions_per_reader), "--tensors", str(a.tensors),
                "--elems", str(a.elems)]
        procs.append(subprocess.Popen(argv, stdout=subprocess.PIPE, text=True))
    for p in procs:
        line = p.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"a reader did not start: {line!r}")
    return procs


def wait_loaded(procs, version):
    ends = []
    for p in procs:
        line = p.stdout.readline().split()
        if len(line) != 3 or line[0] != "loaded" or int(line[1]) != version:
            raise RuntimeError(f"a reader said {line!r}, expected version {version}")
        ends.append(float(line[2]))
    return max(ends)


def sync(c, procs, model, sd, version):
    """Publish sd as version of model; seconds until every reader has loaded it."""
    from objstore import models
    time.sleep(0.3)  # the readers are blocked in OBJ.VLATEST NEWER by now
    t0 = time.monotonic()
    models.publish(c, model, sd, version=version)
    return wait_loaded(procs, version) - t0


# ---- gloo -----------------------------------------------------------------------------------

def gloo_rank(a):
    """One rank of the gloo reference; rank 0 prints "start <t>", every rank "done <t>"."""
    import torch.distributed as dist
    os.environ["GLOO_SOCKET_IFNAME"] = "eth0"
    dist.init_process_group("gloo", init_method=f"tcp://{a.master}:29500", rank=a.rank,
                            world_size=a.world)
    net = Model(a.tensors, a.elems)
    params = list(net.p)
    if a.rank == 0:
        with torch.no_grad():
            for p, t in zip(params, state(a.tensors, a.elems, 1).values()):
                p.copy_(t)
    flat = torch.empty(a.tensors * a.elems) if a.mode == "flat" else None
    dist.barrier()
    t0 = time.monotonic()
    if a.mode == "flat":
        if a.rank == 0:
            torch.cat([p.data for p in params], out=flat)
        dist.broadcast(flat, src=0)
        if a.rank != 0:
            with torch.no_grad():
                for p, t in zip(params, flat.split(a.elems)):
                    p.copy_(t)
    else:
        for p in params:
            dist.broadcast(p.data, src=0)
    t1 = time.monotonic()
    if a.rank == 1:
        g = torch.Generator().manual_seed(1)
        first = torch.randn(a.elems, generator=g)
        assert torch.equal(params[0].data, first), "gloo delivered other bytes"
    print(f"start {t0:.6f}" if a.rank == 0 else "", f"done {t1:.6f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


def gloo(links, mode, a):
    """Seconds of one gloo broadcast of the model over links (rank i in links[i])."""
    world = len(links)
    master = links[0].addr
    procs = []
    for rank, link in enumerate(links):
        argv = [sys.executable, __file__, "--gloo", "--rank", str(rank), "--world", str(world),
                "--master", master, "--mode", mode, "--tensors", str(a.tensors),
                "--elems", str(a.elems)]
        procs.append(link.spawn(argv, stdout=subprocess.PIPE, text=True))
    start, ends = None, []
    for p in procs:
        out, _ = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"a gloo rank failed ({p.returncode}): {out}")
        f = out.split()
        if "start" in f:
            start = float(f[f.index("start") + 1])
        ends.append(float(f[f.index("done") + 1]))
    return max(ends) - start


# ---- the run --------------------------------------------------------------------------------

def publish_cost(c, sd, reps, size):
    """Median seconds of put_object(sd) and of models.publish(sd) as a new model,
    alternated (each deleted after)."""
    from objstore import models
    puts, pubs = [], []
    for r in range(reps):
        t0 = time.monotonic()
        c.put_object(f"cost:{r}", sd)
        puts.append(time.monotonic() - t0)
        c.delete(f"cost:{r}")
        t0 = time.monotonic()
        models.publish(c, f"cost{r}", sd)
        pubs.append(time.monotonic() - t0)
        models.drop(c, f"cost{r}", 1)
        deadline = time.monotonic() + 30
        while c.stats()["arena_used"] > size // 2 and time.monotonic() < deadline:
            time.sleep(0.05)  # the drop frees the parts (purge) before the next put
    return statistics.median(puts), statistics.median(pubs)


def run(n, a):
    import objstore
    from netns import NetnsCluster
    size = a.tensors * a.elems * 4
    names = [f"n{i}" for i in range(n + 1)]
    # Each node holds one version and a delta at a time (the cost and pair models are
    # dropped, on every node, before the next): its arena is sized for that.
    lab = NetnsCluster(n + 1, rate=a.rate, memory=f"{(size + size // 4 >> 20) + 64}mb",
                       burst="512kb", latency="100ms", names=names)
    lab.start()
    procs = []
    row = None
    try:
        c = objstore.connect(unix_socket=lab["n0"].sock_path)
        sd = state(a.tensors, a.elems, 1)
        put_s, pub_s = publish_cost(c, sd, a.cost_reps, size)
        procs = start_readers(lab, ["n1"], "pair", a)
        pair = sync(c, procs, "pair", sd, 1)
        stop(procs)
        drop_everywhere(lab, c, "pair", 1, size)
        procs = start_readers(lab, names[1:], "m", a)
        full = sync(c, procs, "m", sd, 1)
        delta = sync(c, procs, "m", changed(sd, 0.1, 2), 2)
        stop(procs)
        procs = []
        c.close()
        row = {"n": n, "tensors": a.tensors, "size_mib": size >> 20, "rate": a.rate,
               "pair_s": round(pair, 3), "objstore_s": round(full, 3),
               "objstore_over_pair": round(full / pair, 3),
               "delta10_s": round(delta, 3), "delta_over_full": round(delta / full, 3),
               "put_object_s": round(put_s, 3), "publish_s": round(pub_s, 3),
               "publish_over_put_object": round(pub_s / put_s, 3)}
    finally:
        stop(procs)
        report = lab.stop()
        if report:
            print(f"N = {n}: the nodes left problems behind:\n{report}", file=sys.stderr)
    if not a.no_gloo:
        # The nodes and their arenas are gone: gloo runs on a lab of the same links.
        from netns import NetnsLab
        glab = NetnsLab(rate=a.rate, burst="512kb", latency="100ms").create()
        try:
            links = [glab.add(nm) for nm in names]
            per = gloo(links, "tensor", a)
            flat = gloo(links, "flat", a)
        finally:
            glab.close()
        best = min(per, flat)
        row.update({"gloo_per_tensor_s": round(per, 3), "gloo_flat_s": round(flat, 3),
                    "gloo_best_over_objstore": round(best / full, 3)})
    return row


def drop_everywhere(lab, c, model, version, size):
    """Drop a version and wait (bounded) until no node holds its bytes any more."""
    from objstore import models
    models.drop(c, model, version)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if all(lab[n].stats()["arena_used"] < size // 2 for n in lab.names):
            return
        time.sleep(0.1)
    raise RuntimeError(f"{model} v{version} still held somewhere 30 s after OBJ.VDROP")


def stop(procs):
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def write(a, rows):
    cols = list(rows[0])
    new = not os.path.exists(a.out + ".csv")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    with open(a.out + ".csv", "a") as f:
        if new:
            f.write("when," + ",".join(cols) + "\n")
        for r in rows:
            f.write(stamp + "," + ",".join(str(r.get(c, "")) for c in cols) + "\n")
    with open(a.out + ".md", "a") as f:
        if f.tell() == 0:
            f.write("# Weight sync: a model from a trainer to N inference processes\n\n"
                    "Produced by bench/weight-sync.sh (bench/weight-sync.py says what is "
                    "measured). Ratios are taken within one run, on a 2-core VM shared with "
                    "other work: read the ratios, not the seconds.\n")
        f.write(f"\n## {a.label or 'run'} ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})"
                f"\n\nCommand: `{a.command}`\n\n")
        f.write("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
        for r in rows:
            f.write("| " + " | ".join(str(r.get(c, "")) for c in cols) + " |\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", default="4,8")
    ap.add_argument("--tensors", type=int, default=64)
    ap.add_argument("--elems", type=int, default=1 << 20)  # float32: 4 MiB a tensor
    ap.add_argument("--rate", default="400mbit")
    ap.add_argument("--cost-reps", type=int, default=3)
    ap.add_argument("--no-gloo", action="store_true")
    ap.add_argument("--out", default="")
    ap.add_argument("--label", default="")
    ap.add_argument("--command", default="")
    ap.add_argument("--reader", action="store_true")
    ap.add_argument("--sock")
    ap.add_argument("--name")
    ap.add_argument("--versions", type=int, default=1)
    ap.add_argument("--versions-per-reader", type=int, default=2)
    ap.add_argument("--gloo", action="store_true")
    ap.add_argument("--rank", type=int)
    ap.add_argument("--world", type=int)
    ap.add_argument("--master")
    ap.add_argument("--mode")
    a = ap.parse_args()
    if a.reader:
        return reader(a)
    if a.gloo:
        return gloo_rank(a)
    rows = []
    try:
        for n in [int(x) for x in a.nodes.split(",")]:
            row = run(n, a)
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:  # what was measured is kept when a later N fails
        if a.out and rows:
            write(a, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
