"""Smoke tests for build/bin/obj-benchmark: every test (put, get, pin, fetch) runs
against two real nodes with tiny counts and prints well-formed CSV, nothing is
left behind on the nodes, and bad arguments or a failing request end with a
non-zero status and a message. And bench/ab-fetch.sh sets the previous
release's module (built from git by bench/release-module.sh, cached by commit
under build/ab-release/) beside this build on small fetches and prints the
ratio into the test output: it fails only if a fetch fails or the bytes are
wrong, never on a speed.

Two objstore nodes (A owns objects, B fetches them, A's Redis is the
directory) are started once for the module by the shared launcher
(tests/lib/objnodes.py) on free 127.0.0.1 ports. The whole file runs in a few
seconds; every subprocess has a timeout.

The tool is make's ($OBJSTORE_BUILD/bin/obj-benchmark); `make test-server` builds it.
Run from the repository root:  /usr/bin/python3 -m pytest -q tests/server/test_benchmark_smoke.py
"""

import csv
import io
import os
import subprocess
import time

import pytest

from objhelpers import nodes as obj_nodes
from objnodes import ClusterNode, build_path, finish, free_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TOOL = build_path("bin", "obj-benchmark")
CSV_HEADER = ["test", "size", "clients", "ops_per_sec", "mb_per_sec", "p50_ms", "p99_ms",
              "p999_ms", "max_ms", "cpu_us_node", "cpu_us_source"]
RUN_TIMEOUT = 30
START_TIMEOUT = 10.0


def bench_node(name, directory=None):
    """A TCP-only node (rdma-port 0) with a 64 MiB arena on free ports."""
    return ClusterNode(name, directory, secret=None, memory="64mb", heartbeat=200,
                       node_ttl=2000, transfer_port=0, extra_args=["rdma-port", "0"])


@pytest.fixture(scope="module")
def tool():
    """make's obj-benchmark (this file does not build it)."""
    if not os.access(TOOL, os.X_OK):
        pytest.fail(f"{TOOL} is missing: build it with make (make test-server does)",
                    pytrace=False)
    return TOOL


@pytest.fixture(scope="module")
def nodes(tool):
    """Nodes A (owner, directory) and B (fetches from A)."""
    a = bench_node("A")
    started = [a]
    try:
        a.start()
        b = bench_node("B", directory=f"127.0.0.1:{a.port}")
        started.insert(0, b)
        b.start()
        c = b.client()
        deadline = time.monotonic() + START_TIMEOUT
        while sorted(obj_nodes(c)) != ["A", "B"]:
            if time.monotonic() > deadline:
                pytest.fail("node B does not list A and B in OBJ.NODES", pytrace=False)
            time.sleep(0.05)
        yield a, b
    finally:
        finish(started)


def run(tool, *args, timeout=RUN_TIMEOUT):
    return subprocess.run([tool, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def parse_csv(out):
    """The CSV rows of an obj-benchmark --csv run, checked for shape."""
    rows = list(csv.reader(io.StringIO(out)))
    assert rows, "no CSV output"
    assert rows[0] == CSV_HEADER, f"CSV header: {rows[0]}"
    for row in rows[1:]:
        assert len(row) == len(CSV_HEADER), f"CSV row: {row}"
    return [dict(zip(CSV_HEADER, row)) for row in rows[1:]]


def check_row(row, test, size, clients):
    assert row["test"] == test
    assert int(row["size"]) == size
    assert int(row["clients"]) == clients
    assert float(row["ops_per_sec"]) > 0, row
    assert float(row["mb_per_sec"]) > 0, row
    p50, p99, p999, mx = (float(row[k]) for k in ("p50_ms", "p99_ms", "p999_ms", "max_ms"))
    assert 0 <= p50 <= p99 <= p999 <= mx, row
    # Server CPU per request over the timed phases (INFO cpu): every request
    # costs the node something; only a fetch has a source to read it from.
    if test != "memcpy":  # which involves no node
        assert float(row["cpu_us_node"]) > 0, row
    if test.startswith("fetch"):
        assert float(row["cpu_us_source"]) > 0, row
    else:
        assert row["cpu_us_source"] == "n/a", row


def assert_empty(*nodes):
    for n in nodes:
        s = n.stats()
        assert int(s["objects"]) == 0, f"node {n.name} still holds {s['objects']} objects"


# ---- every test, CSV -------------------------------------------------------------------------

@pytest.mark.parametrize("test", ["put", "get", "pin", "cput", "memcpy"])
def test_local_test_prints_one_csv_row(tool, nodes, test):
    a, b = nodes
    r = run(tool, "-p", a.port, "-t", test, "-n", 60, "-c", 2, "-d", "4k", "--seconds", 5,
            "--csv")
    assert r.returncode == 0, r.stderr
    rows = parse_csv(r.stdout)
    assert len(rows) == 1
    check_row(rows[0], test, 4096, 2)
    assert_empty(a)


def test_cput_with_copy_threads_puts_large_objects_and_leaves_nothing(tool, nodes):
    a, _ = nodes
    r = run(tool, "-p", a.port, "-t", "memcpy,cput", "--put-threads", 3, "-n", 6, "-c", 1,
            "--sizes", "64,16m", "--seconds", 30, "--csv")
    assert r.returncode == 0, r.stderr
    rows = parse_csv(r.stdout)
    assert [(x["test"], x["size"]) for x in rows] == [
        ("memcpy", "64"), ("memcpy", str(16 << 20)), ("cput-3t", "64"), ("cput-3t", str(16 << 20))]
    assert_empty(a)


def test_fetch_over_tcp_moves_every_object(tool, nodes):
    a, b = nodes
    before = int(b.stats()["tcp_fetches"])
    # --keyspace 10 with -n 40: four rounds, each object fetched once per round.
    r = run(tool, "-p", b.port, "--source-port", a.port, "-t", "fetch", "--tcp", "-n", 40,
            "-c", 2, "-d", "32k", "--keyspace", 10, "--seconds", 5, "--csv")
    assert r.returncode == 0, r.stderr
    rows = parse_csv(r.stdout)
    assert len(rows) == 1
    check_row(rows[0], "fetch-tcp", 32768, 2)
    assert int(b.stats()["tcp_fetches"]) - before == 40
    assert_empty(a, b)


def test_size_sweep_with_pipeline_and_shared_threads(tool, nodes):
    a, b = nodes
    r = run(tool, "-p", a.port, "-t", "put,get", "--sizes", "64,4k", "-n", 50, "-c", 3,
            "--threads", 1, "-P", 4, "--seconds", 5, "--csv")
    assert r.returncode == 0, r.stderr
    rows = parse_csv(r.stdout)
    assert [(x["test"], int(x["size"])) for x in rows] == [
        ("put", 64), ("put", 4096), ("get", 64), ("get", 4096)]
    for x in rows:
        check_row(x, x["test"], int(x["size"]), 3)
    assert_empty(a)


def test_quiet_prints_one_line_per_test_and_size(tool, nodes):
    a, b = nodes
    r = run(tool, "-p", a.port, "-t", "put,pin", "--sizes", "1k,2k", "-n", 20, "-c", 1, "-q")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 4, r.stdout
    assert all("requests per second" in line for line in lines), r.stdout


def test_seconds_bounds_the_run(tool, nodes):
    a, b = nodes
    # -n 10**9 would run for hours: ending at all (run's timeout bounds a hang) is the proof.
    r = run(tool, "-p", a.port, "-t", "get", "-n", 10 ** 9, "--keyspace", 16, "-c", 1, "-d", 64,
            "--seconds", 0.5, "--csv")
    assert r.returncode == 0, r.stderr
    check_row(parse_csv(r.stdout)[0], "get", 64, 1)


def test_help_exits_zero(tool):
    r = run(tool, "--help")
    assert r.returncode == 0
    assert "Usage: obj-benchmark" in r.stdout


# ---- against the previous release ---------------------------------------------------------------

# Small: a few sizes, few fetches, two rounds; a release built for the first time
# takes a module build more (then cached).
AB_SIZES, AB_FETCHES, AB_ROUNDS = "64k,1m,4m", 20, 2


def test_ab_fetch_against_the_previous_release_prints_the_ratio(tool, capsys):
    built = subprocess.run([os.path.join(ROOT, "bench", "release-module.sh")], capture_output=True,
                           text=True, timeout=900, stdin=subprocess.DEVNULL, cwd=ROOT)
    if built.returncode == 3:  # no history to build a release from (an export, a shallow clone)
        pytest.skip(built.stderr.strip())
    assert built.returncode == 0, built.stderr
    old = built.stdout.strip()
    r = subprocess.run([os.path.join(ROOT, "bench", "ab-fetch.sh"), old, build_path("objstore.so"),
                        AB_SIZES, str(AB_FETCHES), str(AB_ROUNDS)], capture_output=True, text=True,
                       timeout=300, stdin=subprocess.DEVNULL, cwd=ROOT,
                       env={**os.environ, "AB_OUT": "/dev/null",
                            "AB_OLD_NAME": "the previous release"})
    assert r.returncode == 0, r.stdout + r.stderr
    ratios = [line for line in r.stdout.splitlines() if line.startswith("ratio ")]
    assert len(ratios) == len(AB_SIZES.split(",")), r.stdout
    rows = [line for line in r.stdout.splitlines() if line.startswith(("old ", "new "))]
    assert len(rows) == 2 * AB_ROUNDS * len(AB_SIZES.split(",")), r.stdout
    with capsys.disabled():  # into CI's output, passed or not
        print("\n" + r.stdout, end="")


def test_ab_fetch_fails_when_a_build_cannot_run(tool, tmp_path):
    broken = tmp_path / "broken.so"
    broken.write_bytes(b"not a module")
    broken.chmod(0o755)
    r = subprocess.run([os.path.join(ROOT, "bench", "ab-fetch.sh"), str(broken),
                        build_path("objstore.so"), "64k", "5", "1"], capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL, cwd=ROOT,
                       env={**os.environ, "AB_OUT": "/dev/null"})
    assert r.returncode == 1, r.stdout + r.stderr
    assert "the nodes did not start" in r.stderr, r.stderr
    assert "ratio" not in r.stdout


# ---- failures ----------------------------------------------------------------------------------

BAD_ARGS = [
    (["-c", "0"], "-c"),
    (["-c", "many"], "not an integer"),
    (["-n", "-5"], "-n"),
    (["-d", "0"], "at least 1 byte"),
    (["-d", "12q"], "not a size"),
    (["-d", "2g"], "larger than"),
    (["--sizes", "4k,,x"], "not a size"),
    (["-P", "0"], "-P"),
    (["--threads", "0"], "--threads"),
    (["-p", "70000"], "-p"),
    (["--seconds", "0"], "--seconds"),
    (["--seconds", "soon"], "--seconds"),
    (["-t", "nope"], "unknown test"),
    (["-t", "fetch"], "--source-port"),
    (["--tcp", "--rdma"], "exclude"),
    (["--prefix", "a*b"], "--prefix"),
    (["--keyspace", "0"], "--keyspace"),
    (["--bogus"], "unrecognized option"),
    (["-c"], "needs a value"),
]


@pytest.mark.parametrize("args,message", BAD_ARGS, ids=[" ".join(a) for a, _ in BAD_ARGS])
def test_bad_argument_is_refused_with_a_message(tool, args, message):
    r = run(tool, "-q", *args, timeout=10)
    assert r.returncode != 0
    assert "obj-benchmark:" in r.stderr and message in r.stderr, r.stderr
    assert r.stdout == ""


def test_unreachable_node_fails_with_the_reason(tool):
    r = run(tool, "-p", free_port(), "-t", "get", "-n", 1, "-q", timeout=10)
    assert r.returncode != 0
    assert "cannot connect" in r.stderr, r.stderr


def test_failed_request_exits_nonzero_with_the_first_error(tool, nodes):
    a, b = nodes
    # RDMA is off on these nodes (rdma-port 0): OBJ.FETCH ... VIA rdma must fail.
    r = run(tool, "-p", b.port, "--source-port", a.port, "-t", "fetch", "--rdma", "-n", 5,
            "-c", 1, "-d", "4k", "--seconds", 5, "--csv")
    assert r.returncode != 0
    assert "OBJ.FETCH" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) <= 2, r.stderr
    assert_empty(a, b)


def test_same_node_as_source_is_refused(tool, nodes):
    a, b = nodes
    r = run(tool, "-p", a.port, "--source-port", a.port, "-t", "fetch", "-n", 1, "-q")
    assert r.returncode != 0
    assert "two nodes" in r.stderr, r.stderr
