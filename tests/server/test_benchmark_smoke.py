"""Smoke tests for build/bin/obj-benchmark: it builds, every test (put, get, pin,
fetch) runs against two real nodes with tiny counts and prints well-formed
CSV, nothing is left behind on the nodes, and bad arguments or a failing
request end with a non-zero status and a message.

Two objstore nodes (A owns objects, B fetches them, A's Redis is the
directory) are started once for the module on free 127.0.0.1 ports. The
whole file runs in a few seconds; every subprocess has a timeout.

Run from the repository root:  /usr/bin/python3 -m pytest -q tests/bench
Environment: OBJSTORE_MODULE (path of objstore.so), REDIS_SERVER.
"""

import csv
import io
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest
import redis

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODULE = os.environ.get("OBJSTORE_MODULE") or os.path.join(REPO, "module", "objstore.so")
REDIS_SERVER = os.environ.get("REDIS_SERVER") or "/usr/bin/redis-server"
TOOL = os.path.join(REPO, "bench", "obj-benchmark")
CSV_HEADER = ["test", "size", "clients", "ops_per_sec", "mb_per_sec", "p50_ms", "p99_ms",
              "p999_ms", "max_ms"]
RUN_TIMEOUT = 30
START_TIMEOUT = 10.0


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Node:
    """One redis-server with the module; start() and stop() come in a pair."""

    def __init__(self, name, directory=None):
        self.name = name
        self.directory = directory
        self.workdir = tempfile.mkdtemp(prefix=f"objstore-bench-{name}-")
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self.arena_dir = tempfile.mkdtemp(prefix=f"objstore-bench-arena-{name}-", dir=shm)
        self.proc = None
        self.port = None

    def start(self):
        for _ in range(5):
            self.port = free_port()
            args = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                    "--appendonly", "no", "--dir", self.workdir,
                    "--loadmodule", MODULE, "memory", "64mb", "arena-dir", self.arena_dir,
                    "node-name", self.name, "transfer-port", str(free_port()), "rdma-port", "0",
                    "heartbeat", "200", "node-ttl", "2000"]
            if self.directory:
                args += ["directory", self.directory]
            with open(os.path.join(self.workdir, "server.log"), "ab") as log:
                self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, cwd=self.workdir)
            if self.wait_ready():
                return self
            self.kill()
            if "Address already in use" not in self.log():
                break
        pytest.fail(f"node {self.name} did not start:\n{self.log()[-3000:]}", pytrace=False)

    def wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                if self.client().ping():
                    return True
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
                pass
            time.sleep(0.02)
        return False

    def client(self):
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5,
                           socket_connect_timeout=2)

    def stats(self):
        reply = self.client().execute_command("OBJ.STATS")
        return {k.decode() if isinstance(k, bytes) else k: v
                for k, v in zip(reply[0::2], reply[1::2])}

    def log(self):
        try:
            with open(os.path.join(self.workdir, "server.log"), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self):
        """Shut down; returns the server's exit status (None if it had to be killed)."""
        if self.proc is None:
            return None
        status = None
        if self.proc.poll() is None:
            try:
                self.client().execute_command("SHUTDOWN", "NOSAVE")
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                pass
            try:
                status = self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)
        shutil.rmtree(self.arena_dir, ignore_errors=True)
        return status


@pytest.fixture(scope="module")
def tool():
    """Build build/bin/obj-benchmark with the tree's Makefile; the module must be built already
    (like the integration suite, this file does not rebuild it)."""
    if not os.path.exists(MODULE):
        pytest.fail(f"module not built: {MODULE} is missing (run `make`)", pytrace=False)
    r = subprocess.run(["make", "-s", "build/bin/obj-benchmark"], cwd=REPO, capture_output=True,
                       text=True, timeout=300)
    if r.returncode != 0:
        pytest.fail(f"make build/bin/obj-benchmark failed:\n{r.stdout}\n{r.stderr}", pytrace=False)
    assert os.access(TOOL, os.X_OK), f"{TOOL} was not built"
    return TOOL


@pytest.fixture(scope="module")
def nodes(tool):
    """Nodes A (owner, directory) and B (fetches from A)."""
    a = Node("A").start()
    b = None
    try:
        b = Node("B", directory=f"127.0.0.1:{a.port}").start()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            names = [e[e.index(b"name") + 1] for e in b.client().execute_command("OBJ.NODES")]
            if sorted(names) == [b"A", b"B"]:
                break
            time.sleep(0.05)
        else:
            pytest.fail("node B does not list A and B in OBJ.NODES", pytrace=False)
        yield a, b
    finally:
        statuses = [n.stop() for n in (b, a) if n is not None]
    assert all(s == 0 for s in statuses), f"a node did not shut down cleanly: {statuses}"


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


def assert_empty(*nodes):
    for n in nodes:
        s = n.stats()
        assert int(s["objects"]) == 0, f"node {n.name} still holds {s['objects']} objects"


# ---- every test, CSV -------------------------------------------------------------------------

@pytest.mark.parametrize("test", ["put", "get", "pin"])
def test_local_test_prints_one_csv_row(tool, nodes, test):
    a, b = nodes
    r = run(tool, "-p", a.port, "-t", test, "-n", 60, "-c", 2, "-d", "4k", "--seconds", 5,
            "--csv")
    assert r.returncode == 0, r.stderr
    rows = parse_csv(r.stdout)
    assert len(rows) == 1
    check_row(rows[0], test, 4096, 2)
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
    t0 = time.monotonic()
    r = run(tool, "-p", a.port, "-t", "get", "-n", 10 ** 9, "--keyspace", 16, "-c", 1, "-d", 64,
            "--seconds", 0.5, "--csv")
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 5
    check_row(parse_csv(r.stdout)[0], "get", 64, 1)


def test_help_exits_zero(tool):
    r = run(tool, "--help")
    assert r.returncode == 0
    assert "Usage: obj-benchmark" in r.stdout


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
