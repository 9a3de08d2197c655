"""One object to N-1 nodes at once, against one pair, on rate-limited links.

For each N: N nodes in namespaces of their own (tests/lib/netns.py), each
behind a tc tbf link of RATE in both directions to one bridge. n0 puts an object of
SIZE; n1 alone fetches it (the pair's time); n0 puts another; n1..n{N-1} fetch it at
the same moment (the broadcast's time: until the last holds it). Reports the ratio,
the spread of uploads over the nodes (max / mean of bytes uploaded during the
broadcast, over all N nodes), the bytes uploaded by n0, and the CPU time of all
nodes per byte received (utime + stime from /proc, both runs). Appends CSV rows to
OUT.csv and rewrites OUT.md. Called by bench/broadcast.sh.
"""

import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "lib"))

from netns import NetnsCluster  # noqa: E402

TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TCK


def lab_cpu(lab):
    return sum(cpu_seconds(node.proc.pid) for node in lab.nodes.values())


def client(lab, i, timeout=120.0):
    return lab[f"n{i}"].new_client(timeout)


def stats(lab, i):
    return lab[f"n{i}"].stats()


def fetch_all(lab, oid, targets):
    done = {}
    start = threading.Barrier(len(targets) + 1)

    def one(i):
        c = client(lab, i, timeout=600)
        start.wait()
        try:  # TIMEOUT 10 min: a star of large objects outlasts the 30 s default
            r = c.execute_command("OBJ.FETCH", oid, "TIMEOUT", 600000)
        except Exception as e:  # reported below, with the node
            r = e
        done[i] = (time.monotonic(), r)

    threads = [threading.Thread(target=one, args=(i,)) for i in targets]
    for t in threads:
        t.start()
    start.wait()
    t0 = time.monotonic()
    for t in threads:
        t.join()
    bad = {i: r for i, (_, r) in done.items() if r != [b"OK"]}
    if bad or len(done) != len(targets):
        raise RuntimeError(f"fetches failed: {bad}")
    return max(t for t, _ in done.values()) - t0


def run(n, size, rate, node_args):
    # tbf burst 512 KiB, latency 100 ms: the links of every earlier run in bench/results.
    lab = NetnsCluster(n, rate=rate, memory=f"{max(256, (2 * size >> 20) + 64)}mb",
                       burst="512kb", latency="100ms", names=[f"n{i}" for i in range(n)],
                       extra_args=node_args)
    lab.start()
    try:
        return measure(lab, n, size, rate)
    finally:
        report = lab.stop()
        if report:
            print(f"N = {n}: the nodes left problems behind:\n{report}", file=sys.stderr)


def measure(lab, n, size, rate):
    """One pair's fetch and one broadcast on a started lab: the row of the results."""
    data = os.urandom(size)
    c0 = client(lab, 0)
    c0.execute_command("OBJ.PUT", "pair", data)
    c0.execute_command("OBJ.PUT", "bcast", data)
    time.sleep(0.5)  # both published
    cpu0 = lab_cpu(lab)
    pair = fetch_all(lab, "pair", [1])
    cpu1 = lab_cpu(lab)
    before = [stats(lab, i) for i in range(n)]
    bcast = fetch_all(lab, "bcast", list(range(1, n)))
    cpu2 = lab_cpu(lab)
    after = [stats(lab, i) for i in range(n)]
    up = [a["transfer_uploaded_bytes"] - b["transfer_uploaded_bytes"]
          for a, b in zip(after, before)]
    down = sum(a["transfer_downloaded_bytes"] - b["transfer_downloaded_bytes"]
               for a, b in zip(after, before))
    mean = sum(up) / n
    return {
        "nodes": n, "size": size, "rate": rate, "pair_s": round(pair, 3),
        "broadcast_s": round(bcast, 3), "ratio": round(bcast / pair, 2),
        "spread_max_over_mean": round(max(up) / mean, 2) if mean else 0,
        "owner_uploaded_share": round(up[0] / sum(up), 3) if sum(up) else 0,
        "uploaders_over_10pct": sum(1 for u in up if u > 0.1 * size),
        "cpu_ns_per_byte_pair": round((cpu1 - cpu0) * 1e9 / size, 3),
        "cpu_ns_per_byte_broadcast": round((cpu2 - cpu1) * 1e9 / max(down, 1), 3),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", default="2,4,8,16")
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--rate", default="400mbit")
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", default="")
    ap.add_argument("--label", default="", help="what was measured (a build, a setting)")
    ap.add_argument("--node-args", default="",
                    help="module arguments for every node, e.g. 'upload-slots 0' (a star)")
    a = ap.parse_args()
    rows = []
    for n in [int(x) for x in a.nodes.split(",")]:
        row = {"label": a.label, **run(n, a.size_mib << 20, a.rate, a.node_args.split())}
        print(row, flush=True)
        rows.append(row)
    cols = list(rows[0])
    new = not os.path.exists(a.out + ".csv")
    with open(a.out + ".csv", "a") as f:
        if new:
            f.write("when," + ",".join(cols) + "\n")
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        for r in rows:
            f.write(stamp + "," + ",".join(str(r[c]) for c in cols) + "\n")
    with open(a.out + ".md", "a" if os.path.exists(a.out + ".md") else "w") as f:
        if f.tell() == 0:
            f.write("# Broadcast: one object to N-1 nodes at once\n")
        f.write(f"\n## {a.label or 'run'}\n\nCommand: `{a.command}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
                "one run; ratios are taken within it).\n\n")
        f.write("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
        for r in rows:
            f.write("| " + " | ".join(str(r[c]) for c in cols) + " |\n")


if __name__ == "__main__":
    main()
