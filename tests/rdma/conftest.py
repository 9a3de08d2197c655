"""Fixtures for the RDMA suite: real redis-server nodes talking over an RDMA device.

The suite runs where an RDMA device exists: inside the Soft-RoCE QEMU guest
(tests/softroce/run.sh tests/rdma/run-in-guest.sh) or natively on a host with a
device. $OBJ_RXE_ADDR names the IPv4 address bound to that device; every node
binds its TCP transfer listener and its rdma_cm listener there, while Redis itself
and the directory stay on 127.0.0.1. Without OBJ_RXE_ADDR, without a device, or
with an address this host does not own, the session stops at once with exit status
1 and a banner saying why: an RDMA suite never passes without having run.

One cluster serves the whole session (starting a node registers its whole arena,
which takes seconds under emulation):

    directory  a plain redis-server the nodes share
    A, B, C    RDMA nodes (A and C are sources, B fetches; C is also the second
               holder in the fault test, which runs last)
    D          an RDMA node with another cluster-secret
    E          a node started with rdma-port 0 (TCP only)

Tests use unique ids and compare statistics as deltas. Every wait is bounded.
When a test fails, the objstore lines of every node's log are attached to the
report. Environment: OBJSTORE_MODULE (the module to load; pass it into the guest
with OBJ_VM_ENV=OBJSTORE_MODULE), REDIS_SERVER, OBJ_RDMA_WORKDIR (where node
directories go; default: a fresh temporary directory, removed after a clean run).
"""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import redis

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

from objhelpers import Client, nodes, stats  # noqa: E402  (path set just above)

MODULE = os.environ.get("OBJSTORE_MODULE") or os.path.join(REPO, "module", "objstore.so")
REDIS_SERVER = os.environ.get("REDIS_SERVER") or "/usr/bin/redis-server"
SECRET = "rdma-suite-secret"
START_TIMEOUT = 120.0  # registering an arena under TCG, on a busy host, is slow
STOP_TIMEOUT = 30.0
CLIENT_TIMEOUT = 180.0
CRASH_PATTERNS = ("REDIS BUG REPORT", "crashed by signal", "Guru Meditation",
                  "ERROR: AddressSanitizer", "runtime error:")


def rxe_addr():
    return os.environ.get("OBJ_RXE_ADDR", "").split("/")[0]


def environment_problem():
    """Why RDMA tests cannot run here, or None when they can."""
    addr = rxe_addr()
    if not addr:
        return ("OBJ_RXE_ADDR is not set: run the suite through "
                "`tests/softroce/run.sh tests/rdma/run-in-guest.sh`, or set OBJ_RXE_ADDR to the "
                "IPv4 address bound to this host's RDMA device")
    ib = "/sys/class/infiniband"
    devs = sorted(os.listdir(ib)) if os.path.isdir(ib) else []
    if not devs:
        return f"no RDMA device on this host ({ib} is empty or absent)"
    want = os.environ.get("OBJ_RXE_DEV")
    if want and want not in devs:
        return f"OBJ_RXE_DEV={want} is not among the RDMA devices {devs}"
    active = []
    for d in devs:
        pdir = os.path.join(ib, d, "ports")
        for p in (os.listdir(pdir) if os.path.isdir(pdir) else []):
            try:
                with open(os.path.join(pdir, p, "state")) as f:
                    if "ACTIVE" in f.read():
                        active.append(f"{d}/{p}")
            except OSError:
                pass
    if not active:
        return f"no RDMA port is ACTIVE (devices {devs})"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((addr, 0))
    except OSError as e:
        return f"OBJ_RXE_ADDR={addr} is not an address of this host ({e})"
    if not os.path.exists(MODULE):
        return f"module not built: {MODULE} is missing (run `make all` first)"
    if not os.access(REDIS_SERVER, os.X_OK):
        return f"{REDIS_SERVER} not found"
    return None


def pytest_sessionstart(session):
    if session.config.option.collectonly:
        return
    why = environment_problem()
    if why:
        banner = "*" * 76
        sys.stderr.write(f"\n{banner}\nRDMA SUITE CANNOT RUN: {why}\n{banner}\n\n")
        pytest.exit(f"RDMA SUITE CANNOT RUN: {why}", returncode=1)


# ---- ports --------------------------------------------------------------------------

_taken = set()


def free_port(addr="127.0.0.1"):
    """A TCP port on addr that was free a moment ago and not handed out before."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((addr, 0))
            p = s.getsockname()[1]
        if p not in _taken and p < 60000:
            _taken.add(p)
            return p
    raise RuntimeError("no free port")


# ---- processes ----------------------------------------------------------------------

ALL_NODES = []  # every node started this session, for failure reports


class Node:
    """One redis-server with objstore, transfer and RDMA listeners on $OBJ_RXE_ADDR.
    rdma=False starts it with rdma-port 0."""

    def __init__(self, name, workroot, directory, memory="32mb", rdma=True, secret=SECRET,
                 heartbeat=300, node_ttl=3000):
        self.name = name
        self.memory = memory
        self.rdma = rdma
        self.secret = secret
        self.directory = directory
        self.heartbeat = heartbeat
        self.node_ttl = node_ttl
        self.workdir = os.path.join(workroot, f"node{name}")
        os.makedirs(self.workdir, exist_ok=True)
        shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
        self.arena_dir = tempfile.mkdtemp(prefix=f"objstore-rdma-{name}-", dir=shm)
        self.log_path = os.path.join(self.workdir, "server.log")
        self.proc = None
        self.port = self.transfer_port = self.rdma_port = None
        self.arena_path = None
        self.killed = False
        self.stopped = False
        self.clients = []
        ALL_NODES.append(self)

    def command_line(self):
        margs = ["memory", self.memory, "arena-dir", self.arena_dir, "node-name", self.name,
                 "transfer-bind", rxe_addr(), "transfer-port", str(self.transfer_port),
                 "rdma-port", str(self.rdma_port if self.rdma else 0),
                 "directory", self.directory, "cluster-secret", self.secret,
                 "heartbeat", str(self.heartbeat), "node-ttl", str(self.node_ttl),
                 "fetch-timeout", "120000"]
        return [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "no", "--dir", self.workdir, "--loglevel", "verbose",
                "--loadmodule", MODULE, *margs]

    def spawn(self):
        """Start the process on fresh ports (does not wait)."""
        self.port = free_port()
        self.transfer_port = free_port(rxe_addr())
        self.rdma_port = free_port(rxe_addr())
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(self.command_line(), stdin=subprocess.DEVNULL,
                                         stdout=log, stderr=subprocess.STDOUT,
                                         cwd=self.workdir)
        finally:
            log.close()

    def wait_ready(self, deadline):
        """Poll PING until deadline; None when ready, else why not."""
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"exited with status {self.proc.returncode}"
            try:
                c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5,
                                socket_connect_timeout=5)
                try:
                    if c.ping():
                        return None
                finally:
                    c.close()
            except (redis.exceptions.RedisError, OSError):
                pass
            time.sleep(0.1)
        return f"no PING answer within {START_TIMEOUT:.0f}s"

    def check_started(self):
        """After PING: the arena path, and RDMA up exactly when asked for."""
        st = self.stats()
        self.arena_path = st["arena_path"]
        want = 1 if self.rdma else 0
        if st.get("rdma_enabled") != want:
            return (f"rdma_enabled is {st.get('rdma_enabled')}, expected {want}\n"
                    f"--- log ---\n{self.log_tail(30)}")
        return None

    def client(self, timeout=CLIENT_TIMEOUT):
        c = Client(self.port, timeout=timeout)
        self.clients.append(c)
        return c

    def stats(self):
        c = Client(self.port, timeout=CLIENT_TIMEOUT)
        try:
            return stats(c)
        finally:
            c.close()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def sigkill(self):
        """SIGKILL on purpose (the fault test); stop() then expects it dead."""
        self.killed = True
        if self.alive():
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT)

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, n=40):
        return "\n".join(self.log().splitlines()[-n:])

    def objstore_log(self, n=40):
        """The module's own lines (connection closes, fetch errors) from the log."""
        lines = [ln for ln in self.log().splitlines() if "<objstore>" in ln]
        return "\n".join(lines[-n:])

    def stop(self):
        """Shut down; returns a list of problems (died, crash report, arena left)."""
        problems = []
        if self.stopped or self.proc is None:
            return problems
        self.stopped = True
        for c in self.clients:
            try:
                c.close()
            except Exception:
                pass
        if self.killed:
            pass
        elif self.proc.poll() is not None:
            problems.append(f"node {self.name} died during the session "
                            f"(status {self.proc.returncode})")
        else:
            try:
                redis.Redis(host="127.0.0.1", port=self.port,
                            socket_timeout=10).execute_command("SHUTDOWN", "NOSAVE")
            except redis.exceptions.ConnectionError:
                pass
            except redis.exceptions.RedisError as e:
                problems.append(f"node {self.name}: SHUTDOWN NOSAVE failed: {e}")
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                problems.append(f"node {self.name} did not exit within {STOP_TIMEOUT:.0f}s")
                self.proc.kill()
                self.proc.wait(STOP_TIMEOUT)
            else:
                if self.proc.returncode != 0:
                    problems.append(f"node {self.name} exited with status "
                                    f"{self.proc.returncode}")
                if self.arena_path and os.path.exists(self.arena_path):
                    problems.append(f"node {self.name} left its arena {self.arena_path}")
        text = self.log()
        for pat in CRASH_PATTERNS:
            if pat in text:
                problems.append(f"node {self.name}: crash report in the log ({pat!r})")
        shutil.rmtree(self.arena_dir, ignore_errors=True)
        return problems


class Directory:
    """The plain redis-server all nodes register in."""

    def __init__(self, workroot):
        self.workdir = os.path.join(workroot, "directory")
        os.makedirs(self.workdir, exist_ok=True)
        self.port = free_port()
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.workdir],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2).ping():
                    return
            except (redis.exceptions.RedisError, OSError):
                time.sleep(0.05)
        self.stop()
        pytest.fail(f"directory redis-server did not start on port {self.port}", pytrace=False)

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(STOP_TIMEOUT)


def start_nodes(nodes_):
    """Start nodes in parallel (their arenas register concurrently); fail with the
    log of any that does not come up, after one retry on fresh ports."""
    for n in nodes_:
        n.spawn()
    deadline = time.monotonic() + START_TIMEOUT
    failed = []
    for n in nodes_:
        why = n.wait_ready(deadline) or n.check_started()
        if why:
            failed.append((n, why))
    for n, why in failed:  # a port taken in between, most likely: once more
        if n.alive():
            n.proc.kill()
            n.proc.wait(STOP_TIMEOUT)
        n.spawn()
        why2 = n.wait_ready(time.monotonic() + START_TIMEOUT) or n.check_started()
        if why2:
            pytest.fail(f"node {n.name} did not start: {why}; retry: {why2}\n"
                        f"command: {' '.join(n.command_line())}\n--- log ---\n"
                        f"{n.log_tail(30)}", pytrace=False)


class Cluster:
    def __init__(self, workroot):
        self.workroot = workroot
        self.dir = None
        self.nodes = {}

    def __getitem__(self, name):
        return self.nodes[name]

    def start(self):
        self.dir = Directory(self.workroot)
        specs = [("A", "96mb", True, SECRET), ("B", "96mb", True, SECRET),
                 ("C", "80mb", True, SECRET), ("D", "16mb", True, "not-the-cluster-secret"),
                 ("E", "16mb", False, SECRET)]
        for name, mem, rdma, secret in specs:
            self.nodes[name] = Node(name, self.workroot, self.dir.addr, memory=mem, rdma=rdma,
                                    secret=secret)
        start_nodes(list(self.nodes.values()))
        # Every node has registered in the directory before any test runs.
        b = self["B"].client()
        want = sorted(self.nodes)
        deadline = time.monotonic() + 30
        seen = []
        while time.monotonic() < deadline:
            seen = sorted(nodes(b))
            if seen == want:
                break
            time.sleep(0.1)
        assert seen == want, f"OBJ.NODES lists {seen}, expected {want}"
        return self

    def stop(self):
        problems = []
        for n in self.nodes.values():
            problems += n.stop()
        if self.dir:
            self.dir.stop()
        return problems


@pytest.fixture(scope="session")
def cluster():
    keep = os.environ.get("OBJ_RDMA_WORKDIR")
    if keep:
        os.makedirs(keep, exist_ok=True)
        workroot = tempfile.mkdtemp(prefix="rdma-suite-", dir=keep)
    else:
        workroot = tempfile.mkdtemp(prefix="objstore-rdma-suite-")
    cl = Cluster(workroot)
    try:
        cl.start()
        yield cl
    finally:
        problems = cl.stop()
    if problems:
        pytest.fail("\n".join(problems) + f"\n(node logs under {workroot})", pytrace=False)
    if not keep:
        shutil.rmtree(workroot, ignore_errors=True)


@pytest.fixture(autouse=True)
def _empty_nodes_after_test(request):
    """After each test, delete whatever objects it left on the live nodes (a test
    that failed half-way must not fill the arenas of the tests after it)."""
    yield
    if "cluster" not in request.fixturenames:
        return
    cl = request.getfixturevalue("cluster")
    for n in cl.nodes.values():
        if not n.alive():
            continue
        c = Client(n.port, timeout=60.0)
        try:
            cursor = b"0"
            for _ in range(1000):
                cursor, ids = c.execute_command("OBJ.LIST", cursor, "COUNT", 1000)
                for oid in ids:
                    try:
                        c.execute_command("OBJ.DEL", oid)
                    except redis.exceptions.ResponseError:
                        pass
                if cursor in (b"0", 0):
                    break
        except redis.exceptions.RedisError:
            pass  # a node that went away mid-test is reported by the test itself
        finally:
            c.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach the module's log lines of every node to a failing test's report."""
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and ALL_NODES:
        parts = []
        for n in ALL_NODES:
            state = "killed" if n.killed else ("alive" if n.alive() else "DEAD")
            parts.append(f"--- node {n.name} ({state}, port {n.port}) ---\n"
                         f"{n.objstore_log(25)}")
        rep.sections.append(("objstore node logs", "\n".join(parts)))


_uid_counter = [0]


@pytest.fixture
def uid(request):
    """Binary-safe id unique to this test; uid(b'x') derives more ids from it."""
    _uid_counter[0] += 1
    base = b"rdma:" + request.node.name.encode()[:60].replace(b"[", b"(").replace(b"]", b")")
    base += b":%d:\x00\r\n\xff" % _uid_counter[0]

    class Uid(bytes):
        def __call__(self, suffix=b""):
            return bytes(self) + b":" + suffix

    return Uid(base)
