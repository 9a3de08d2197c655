#!/usr/bin/python3
"""tables.py - the tables of docs/benchmarks.md, made from the committed results.

Every table of figures in docs/benchmarks.md sits between two markers,

    <!-- table NAME: bench/tables.py from bench/results/FILE; do not edit -->
    ...
    <!-- end table NAME -->

and is made here from bench/results/ (the prose around it is written by
hand). `bench/tables.py` rewrites what is between the markers; `--check`
changes nothing and exits 1, naming the stale tables, when the document is
not what the results give (`make lint` runs it). After a benchmark rewrites
its results, run this and commit both.

Usage: tables.py [--check] [--root DIR]
"""

import argparse
import csv
import os
import re
import sys

DOC = os.path.join("docs", "benchmarks.md")
BEGIN = re.compile(r"^<!-- table ([a-z0-9-]+): .* -->$")
END = "<!-- end table {} -->"


def results(root, name):
    return os.path.join(root, "bench", "results", name)


def read_text(root, name):
    with open(results(root, name), encoding="utf-8") as f:
        return f.read()


def rows_of(root, name):
    """The CSV rows of a results file (lines starting with # are comments)."""
    with open(results(root, name), encoding="utf-8", newline="") as f:
        return list(csv.DictReader(line for line in f if not line.startswith("#")))


def md_table(header, align, rows):
    """A Markdown table: header cells, an alignment per column ("l" or "r")."""
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


# ---- make bench (bench/compare-tcp.sh): its own Markdown, by bench/bench_tcp_tables.py ----------

def table_bench_tcp(root):
    return read_text(root, "bench-tcp.md").strip()


# ---- RDMA fetch vs perftest: the two runs of rdma-vs-perftest.txt, "first / second" ---------------

RDMA_ROW = re.compile(r"^\s*(\d+ (?:B|KiB|MiB)) \|(.*)\|(.*)\|(.*)$")


def rdma_runs(text):
    """Each printed table of rdma-vs-perftest.txt: {size: fields} in order."""
    runs, cur = [], None
    for line in text.splitlines():
        if line.startswith("OBJ.FETCH VIA rdma vs perftest"):
            cur = {}
            runs.append(cur)
        m = RDMA_ROW.match(line)
        if m and cur is not None:
            bw, lat = m.group(2).split(), m.group(3).split()
            cur[m.group(1)] = {"read_bw": bw[0], "fetch": bw[1], "ratio": bw[2],
                               "p50": lat[1], "ping": lat[3], "from": lat[4], "from_ping": lat[5]}
    return runs


def sig(v, kind):
    """A printed figure of rdma-vs-perftest.txt rounded as the table shows it."""
    if v == "-":
        return "–"
    x = float(v)
    if kind == "mibs":  # 33.6, 22.3, 0.48, 0.009
        return f"{x:.1f}" if x >= 10 else f"{x:.2f}" if x >= 0.1 else f"{x:.3f}"
    if kind == "ratio":
        return f"{x:.2f}"
    if kind == "ping":  # 5.8, 36
        return f"{x:.0f}" if x >= 10 else f"{x:.1f}"
    return f"{x:.0f}"  # microseconds


def table_rdma_vs_perftest(root):
    runs = rdma_runs(read_text(root, "rdma-vs-perftest.txt"))
    cols = [("read_bw", "mibs"), ("fetch", "mibs"), ("ratio", "ratio"), ("p50", "us"),
            ("ping", "ping"), ("from", "us"), ("from_ping", "ping")]
    rows = []
    for size in runs[0]:
        cells = [size]
        for key, kind in cols:
            vals = [sig(run[size][key], kind) for run in runs if size in run]
            cells.append("–" if all(v == "–" for v in vals) else " / ".join(vals))
        rows.append(cells)
    return md_table(["size", "ib_read_bw", "OBJ.FETCH rdma", "ratio", "fetch p50", "/PING",
                     "FROM A p50", "/PING"], "rrrrrrrr", rows)


# ---- the directory: one Redis vs a Redis Cluster (directory-cluster.csv) --------------------------

DIR_ROWS = [("register_s", "16 nodes all registered (s)", "{:.2f}"),
            ("publishes_per_s", "publishes per second", "{:,.0f}"),
            ("lookups_per_s", "lookups per second", "{:,.0f}"),
            ("keys_per_object", "directory keys per object", "{:.2f}"),
            ("dir_bytes_per_object", "directory bytes per object (`used_memory`, masters)",
             "{:.0f}"),
            ("busiest_master_share", "busiest master's share of the directory commands", "{:.2f}")]


def table_directory_cluster(root):
    by = {r["metric"]: r for r in rows_of(root, "directory-cluster.csv")}
    rows = []
    for metric, label, fmt in DIR_ROWS:
        r = by[metric]
        cells = [label] + [fmt.format(float(r[k])) for k in
                           ("single_redis", "redis_cluster_3m3r", "redis_cluster_3m0r")]
        if metric == "busiest_master_share":
            cells += ["", ""]  # a share, not a ratio to one Redis
        else:
            cells += [f"{float(r[k]):.2f}" for k in
                      ("ratio_3m3r_vs_single_or_vs_2_nodes", "ratio_3m0r_vs_single")]
        rows.append(cells)
    first = md_table(["metric", "one Redis", "cluster 3+3", "cluster 3+0", "3+3 / one",
                      "3+0 / one"], "lrrrrr", rows)
    rows = []
    for n in (2, 8, 16):
        r = by[f"all_to_all_{n}_nodes_mib_per_s"]
        rows.append([f"{n} nodes", f"{float(r['redis_cluster_3m3r']):.0f}",
                     f"{float(r['ratio_3m3r_vs_single_or_vs_2_nodes']):.2f}"])
    second = md_table(["all-to-all fetch, 3+3 cluster directory", "aggregate MiB/s",
                       "vs the 2-node pair"], "lrr", rows)
    return first + "\n\n" + second


# ---- the session MAC as the path feeds it (mac-cost-path.csv, bench/mac-cost-path.sh) -------------

def size_name(n):
    n = int(n)
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def table_mac_cost_path(root):
    path = results(root, "mac-cost-path.csv")
    with open(path, encoding="utf-8") as f:
        first = f.readline().strip()
    rows = rows_of(root, "mac-cost-path.csv")
    by = {(r["what"], r["bytes"]): r for r in rows}
    sizes = []
    for r in rows:
        if r["what"] == "tcp-memcpy":
            sizes.append(r["bytes"])
    out = []
    for pattern, name in (("tcp", "TCP reads"), ("relay", "relay PARTs")):
        for s in sizes:
            ways = ("memcpy", "gmac", "xxh3", "gmac-pass", "poly1305")
            g = {w: by[(f"{pattern}-{w}", s)] for w in ways}
            out.append([name, size_name(s)] +
                       [f"{float(g[w]['gb_per_s']):.2f}" for w in ("memcpy", "gmac", "xxh3")] +
                       [f"{float(g[w]['x_memcpy']):.2f}x" for w in ("gmac", "xxh3")] +
                       [f"{float(g['gmac-pass']['gb_per_s']):.2f}",
                        f"{float(g['poly1305']['gb_per_s']):.2f}",
                        f"{float(g['poly1305']['x_memcpy']):.2f}x"])
    table = md_table(["fed as", "object", "memcpy GB/s", "MAC GB/s", "XXH3 GB/s", "MAC / memcpy",
                      "XXH3 / memcpy", "MAC as a separate pass, GB/s", "Poly1305 GB/s",
                      "Poly1305 / memcpy"], "lrrrrrrrrr", out)
    frames = {"16": "a PING (16 bytes)", "56": "a PART (56 bytes)"}
    tags = [f"{frames.get(r['bytes'], r['bytes'] + ' bytes')} {float(r['ns_per_op']):.0f} ns"
            for r in rows if r["what"] == "frame-tag"]
    # "# COMMAND (when, machine, load; runs)" atop the CSV
    command, _, how = first.lstrip("# ").strip().partition(" (")
    return (f"Command: `{command}`; {how.rstrip(')')}.\n\n" + table +
            "\n\nThe frame tag (`wireMacFrame`, best of batches): " + ", ".join(tags) + ".")


# ---- a large TCP fetch against one-stream iperf3, and its CPU (profile-tcp-fetch.csv, -------------
# encrypt-cost.csv: bench/profile-tcp-fetch.sh, bench/encrypt-cost.sh) ---------------------------

def table_tcp_fetch(root, name):
    rows = []
    for r in rows_of(root, name):
        m = float(r["memcpy_ns_per_b"])
        a, b = float(r["engine_a_ns_per_b"]), float(r["engine_b_ns_per_b"])
        it, ir = float(r["iperf3_tx_ns_per_b"]), float(r["iperf3_rx_ns_per_b"])
        rows.append([r["label"], r["size"], r["fetch_mbs"], r["iperf3_mbs"],
                     f"{float(r['ratio']):.2f}x", f"{a:.3f} / {b:.3f}",
                     f"{it:.3f} / {ir:.3f}", f"{(a + b) / (it + ir):.2f}x", f"{m:.3f}",
                     f"{(a + b) / m:.1f}", r["load"]])
    return md_table(["run", "object", "fetch MB/s", "iperf3 MB/s", "fetch / iperf3",
                     "CPU ns per byte, owner / fetcher (engine threads)",
                     "iperf3 CPU ns per byte, sender / receiver", "CPU per byte / iperf3's",
                     "memcpy ns per byte", "both engines in memcpy passes", "load"],
                    "llrrrrrrrrr", rows)


TABLES = {
    "profile-tcp-fetch": lambda root: table_tcp_fetch(root, "profile-tcp-fetch.csv"),
    "encrypt-cost": lambda root: table_tcp_fetch(root, "encrypt-cost.csv"),
    "bench-tcp": table_bench_tcp,
    "rdma-vs-perftest": table_rdma_vs_perftest,
    "directory-cluster": table_directory_cluster,
    "mac-cost-path": table_mac_cost_path,
}


def regenerate(text, root):
    """text with every marked table made anew, and the names of the tables
    that changed. Raises ValueError on a marker without its end, or naming no
    known table."""
    lines, out, i, changed = text.split("\n"), [], 0, []
    while i < len(lines):
        out.append(lines[i])
        m = BEGIN.match(lines[i])
        i += 1
        if not m:
            continue
        name = m.group(1)
        if name not in TABLES:
            raise ValueError(f"{DOC}: unknown table {name!r} (known: {', '.join(TABLES)})")
        try:
            end = lines.index(END.format(name), i)
        except ValueError:
            raise ValueError(f"{DOC}: table {name!r} has no {END.format(name)!r}") from None
        # Blank lines around the table: a marker never runs into a table or a paragraph.
        block = [""] + TABLES[name](root).split("\n") + [""]
        if block != lines[i:end]:
            changed.append(name)
        out += block
        out.append(lines[end])
        i = end + 1
    return "\n".join(out), changed


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    a = ap.parse_args(argv)
    doc = os.path.join(a.root, DOC)
    with open(doc, encoding="utf-8") as f:
        text = f.read()
    try:
        new, changed = regenerate(text, a.root)
    except (ValueError, OSError, KeyError, IndexError) as e:
        print(f"tables.py: {e}", file=sys.stderr)
        return 1
    if new == text:
        return 0
    if a.check:
        print(f"tables.py: {DOC} is not what bench/results/ gives (tables: {', '.join(changed)}); "
              "run bench/tables.py and commit it", file=sys.stderr)
        return 1
    with open(doc, "w", encoding="utf-8") as f:
        f.write(new)
    print(f"tables.py: rewrote {DOC} ({', '.join(changed)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
