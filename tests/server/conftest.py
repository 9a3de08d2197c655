"""Fixtures for the objstore integration tests: real redis-server processes.

Each server is a real /usr/bin/redis-server on a free 127.0.0.1 port with the
objstore module loaded (arena in a private directory under /dev/shm). On
teardown the server is shut down and three things are checked: it was still
alive, it removed its arena file, and its output holds no sanitizer or crash
report. Environment overrides:

    OBJSTORE_MODULE   path of objstore.so (e.g. a SAN=address build)
    OBJSTORE_PRELOAD  passed to the server as LD_PRELOAD (libasan for ASan builds)
    REDIS_SERVER      the redis-server binary

Scopes: `server` is shared by a test module (tests use unique ids and leave
nothing behind); `fresh_server` and `make_server` start servers per test for
tests that need exact stats, a small arena or other module arguments.

Multi-node tests (test_cluster_*.py) use `make_cluster` (per test) and
`make_cluster_module` (per test module): a Cluster is a set of ClusterNodes
named "A", "B", ... sharing one directory, either a plain redis-server of its
own (layout "separate", which tests can stop and restart) or the first node's
own Redis (layout "own", the module's default). Nodes use the default transfer
port (Redis port + 10000), so their Redis ports are picked as free pairs.
"""

import itertools
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest
import redis

from objhelpers import ID_SALT, Client, stats

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
MODULE = os.environ.get("OBJSTORE_MODULE") or os.path.join(REPO, "module", "objstore.so")
REDIS_SERVER = os.environ.get("REDIS_SERVER") or "/usr/bin/redis-server"
START_TIMEOUT = 10.0
STOP_TIMEOUT = 20.0  # LeakSanitizer at exit can take a while

SANITIZER_PATTERNS = (
    "ERROR: AddressSanitizer",
    "runtime error:",
    "LeakSanitizer",
    "ERROR: UndefinedBehaviorSanitizer",
)
CRASH_PATTERNS = ("REDIS BUG REPORT", "crashed by signal", "Guru Meditation")


def free_port():
    """A port that was free a moment ago (the caller retries on collision)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def shm_base():
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class ObjstoreServer:
    """One redis-server with the module; start() / stop() come in a pair."""

    def __init__(self, memory="64mb", module_args=(), server_args=(), name="srv"):
        self.memory = memory
        self.module_args = list(module_args)
        self.server_args = list(server_args)
        self.workdir = tempfile.mkdtemp(prefix=f"objstore-it-{name}-")
        self.arena_dir = tempfile.mkdtemp(prefix=f"objstore-it-arena-{name}-", dir=shm_base())
        self.log_path = os.path.join(self.workdir, "server.log")
        self.proc = None
        self.port = None
        self.arena_path = None
        self.clients = []
        self.start_failed = False  # try_start() saw it refuse to come up, as expected
        self.stopped = False
        self.killed = False  # sigkill() took it down on purpose (fault tests)

    # ---- life cycle -------------------------------------------------------------
    def command_line(self, port):
        margs = []
        if self.memory is not None:
            margs += ["memory", str(self.memory)]
        if "arena-dir" not in self.module_args:
            margs += ["arena-dir", self.arena_dir]
        margs += self.module_args
        return [
            REDIS_SERVER,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", self.workdir,
            "--loadmodule", MODULE, *margs,
            *self.server_args,
        ]

    def spawn(self, port):
        env = dict(os.environ)
        if os.environ.get("OBJSTORE_PRELOAD"):
            env["LD_PRELOAD"] = os.environ["OBJSTORE_PRELOAD"]
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                self.command_line(port), stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env=env, cwd=self.workdir,
            )
        finally:
            log.close()
        self.port = port

    def wait_ready(self):
        """Poll PING until it answers; None when ready, else why it is not."""
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"exited with status {self.proc.returncode}"
            try:
                c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1,
                                socket_connect_timeout=1)
                try:
                    if c.ping():
                        return None
                finally:
                    c.close()
            except redis.exceptions.BusyLoadingError:
                pass
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
                pass
            time.sleep(0.02)
        return f"no PING answer within {START_TIMEOUT}s"

    def start(self):
        """Start the server; pytest.fail with its log when it does not come up."""
        if not os.path.exists(MODULE):
            pytest.fail(f"module not built: {MODULE} is missing (run `make build/objstore.so`)",
                        pytrace=False)
        why = None
        for _ in range(5):
            self.spawn(self.pick_port())
            why = self.wait_ready()
            if why is None:
                break
            self.kill()
            if "Address already in use" not in self.log():
                break
        if why is not None:
            pytest.fail(f"redis-server did not start: {why}\n"
                        f"command: {' '.join(map(repr, self.command_line(self.port)))}\n"
                        f"--- server log ---\n{self.log_tail()}", pytrace=False)
        c = self.client()
        try:
            self.arena_path = stats(c)["arena_path"]
        except Exception as e:
            pytest.fail(f"OBJ.STATS failed right after start: {e!r}\n{self.log_tail()}",
                        pytrace=False)
        return self

    def try_start(self):
        """Start for tests that expect the start to fail: returns (ready, log)."""
        self.spawn(self.pick_port())
        why = self.wait_ready()
        if why is not None:
            self.start_failed = True
            self.kill()
        return why is None, self.log()

    def pick_port(self):
        """The Redis port for the next start attempt (subclasses pick port pairs)."""
        return free_port()

    def sigkill(self):
        """SIGKILL on purpose: stop() then does not report the death as a problem."""
        self.killed = True
        self.kill()

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self):
        """Shut down and check what the server left behind; returns a list of problems."""
        problems = []
        if self.stopped:
            return problems
        self.stopped = True
        for c in self.clients:
            try:
                c.close()
            except Exception:
                pass
        self.clients = []
        if self.proc is None:
            return problems
        if self.start_failed or self.killed:
            pass
        elif self.proc.poll() is not None:
            problems.append(f"server died during the test (status {self.proc.returncode})")
        else:
            try:
                c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)
                c.execute_command("SHUTDOWN", "NOSAVE")
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                pass  # the server closes the connection as it exits
            except redis.exceptions.ResponseError as e:
                problems.append(f"SHUTDOWN NOSAVE failed: {e}")
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                problems.append(f"server did not exit within {STOP_TIMEOUT}s of SHUTDOWN")
                self.proc.terminate()
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.kill()
            else:
                if self.proc.returncode != 0:
                    problems.append(f"server exited with status {self.proc.returncode}")
                if self.arena_path and os.path.exists(self.arena_path):
                    problems.append(f"arena file {self.arena_path} left behind after shutdown")
        text = self.log()
        for pat in SANITIZER_PATTERNS:
            if pat in text:
                problems.append(f"sanitizer report in server output ({pat!r})")
        for pat in CRASH_PATTERNS:
            if pat in text:
                problems.append(f"crash report in server output ({pat!r})")
        return problems

    def cleanup_dirs(self):
        shutil.rmtree(self.workdir, ignore_errors=True)
        shutil.rmtree(self.arena_dir, ignore_errors=True)

    # ---- access ------------------------------------------------------------------
    def client(self, timeout=30.0):
        c = Client(self.port, timeout=timeout)
        self.clients.append(c)
        return c

    def stats(self):
        c = self.client()
        try:
            return stats(c)
        finally:
            c.close()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, n=60):
        return "\n".join(self.log().splitlines()[-n:])


def finish(servers):
    """Stop servers and fail (with their logs) if any left problems behind."""
    report = []
    for s in servers:
        problems = s.stop()
        if problems:
            report.append(f"server on port {s.port}: " + "; ".join(problems)
                          + f"\n--- server log (tail) ---\n{s.log_tail()}")
        else:
            s.cleanup_dirs()
    if report:
        pytest.fail("\n\n".join(report), pytrace=False)


@pytest.fixture(scope="module")
def server():
    """A 64 MiB server shared by one test module."""
    s = ObjstoreServer(memory="64mb", name="shared")
    try:
        s.start()
        yield s
    finally:
        finish([s])


@pytest.fixture
def make_server():
    """Factory: make_server(memory='8mb', module_args=(...), server_args=(...))."""
    started = []

    def factory(memory="64mb", module_args=(), server_args=(), start=True):
        s = ObjstoreServer(memory=memory, module_args=module_args, server_args=server_args,
                           name="fn")
        started.append(s)
        return s.start() if start else s

    yield factory
    finish(started)


@pytest.fixture
def fresh_server(make_server):
    """A 64 MiB server of this test's own (exact stats)."""
    return make_server(memory="64mb")


@pytest.fixture
def small_server(make_server):
    """An 8 MiB server of this test's own (arena exhaustion)."""
    return make_server(memory="8mb")


@pytest.fixture
def r(server):
    c = server.client()
    yield c
    c.close()


@pytest.fixture
def r2(server):
    c = server.client()
    yield c
    c.close()


@pytest.fixture
def r3(server):
    c = server.client()
    yield c
    c.close()


_uid_counter = itertools.count()


@pytest.fixture
def uid(request):
    """Binary id unique to this test; uid(b'x') derives more ids from it."""
    base = b"it:" + request.node.name.encode()[:80].replace(b"[", b"(").replace(b"]", b")")
    base = base.replace(b"*", b"_").replace(b"?", b"_").replace(b"\\", b"_")
    n = next(_uid_counter)

    class Uid(bytes):
        def __call__(self, suffix=b""):
            return bytes(self) + b":" + suffix

    return Uid(base + b":%d:" % n + ID_SALT)


# ---- multi-node clusters (tests/server/test_cluster_*.py) ---------------------------

TRANSFER_OFFSET = 10000  # default transfer-port = Redis port + 10000


def port_is_free(port):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port_pair(offset=TRANSFER_OFFSET):
    """A Redis port p below 65535 - offset such that p and p + offset were both free a
    moment ago (the node's default transfer port is p + 10000)."""
    rng = random.Random()
    for _ in range(500):
        p = rng.randint(20000, 31000)
        if port_is_free(p) and port_is_free(p + offset):
            return p
    raise RuntimeError("no free pair of ports (p, p + 10000) found")


class ClusterNode(ObjstoreServer):
    """One objstore node of a cluster: the module arguments name it, point it at
    the directory and set the cluster secret and the liveness timers.

    directory: "host:port", or None for the module's default (its own Redis).
    transfer_port: None for the default (Redis port + 10000), else an explicit port
    (0 = pick a free one at start)."""

    def __init__(self, name, directory, secret="s3cret", memory="256mb", heartbeat=200,
                 node_ttl=1000, fetch_timeout=30000, transfer_port=None, extra_args=()):
        super().__init__(memory=memory, name=f"node{name}")
        self.node_name = name
        self.directory = directory
        self.secret = secret
        self.heartbeat = heartbeat
        self.node_ttl = node_ttl
        self.fetch_timeout = fetch_timeout
        self.want_transfer_port = transfer_port
        self.transfer_port = None
        self.extra_args = list(extra_args)

    def pick_port(self):
        if self.want_transfer_port is None:
            port = free_port_pair()
            self.transfer_port = port + TRANSFER_OFFSET
            return port
        if self.want_transfer_port == 0:
            self.transfer_port = free_port()
        else:
            self.transfer_port = self.want_transfer_port
        return free_port()

    def command_line(self, port):
        margs = ["node-name", self.node_name, "heartbeat", str(self.heartbeat),
                 "node-ttl", str(self.node_ttl), "fetch-timeout", str(self.fetch_timeout)]
        if self.secret is not None:
            margs += ["cluster-secret", self.secret]
        if self.directory is not None:
            margs += ["directory", self.directory]
        if self.want_transfer_port is not None:
            margs += ["transfer-port", str(self.transfer_port)]
        self.module_args = margs + self.extra_args
        return super().command_line(port)

    def sigstop(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def stop(self):
        """As ObjstoreServer.stop, after waking the node should a failed test have left
        it stopped (SIGSTOP)."""
        if self.proc is not None and self.proc.poll() is None and not self.stopped:
            os.kill(self.proc.pid, signal.SIGCONT)
        return super().stop()

    def sigcont(self):
        os.kill(self.proc.pid, signal.SIGCONT)


class DirectoryRedis:
    """A plain redis-server (no module) used as the shared directory; it can be
    stopped and started again, empty, on the same port."""

    def __init__(self):
        self.workdir = tempfile.mkdtemp(prefix="objstore-it-dir-")
        self.log_path = os.path.join(self.workdir, "directory.log")
        self.port = None
        self.proc = None

    @property
    def addr(self):
        return f"127.0.0.1:{self.port}"

    def _spawn(self):
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", self.workdir],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=self.workdir)
        finally:
            log.close()

    def _wait_ready(self):
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                c = redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=1,
                                socket_connect_timeout=1)
                try:
                    if c.ping():
                        return True
                finally:
                    c.close()
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError,
                    redis.exceptions.BusyLoadingError, OSError):
                pass
            time.sleep(0.02)
        return False

    def start(self):
        """Start on a new free port, or again on the same port after stop()."""
        fixed = self.port is not None
        for _ in range(5 if not fixed else 50):
            if not fixed:
                self.port = free_port()
            self._spawn()
            if self._wait_ready():
                return self
            if self.proc.poll() is None:
                self.proc.kill()
            self.proc.wait(10)
            time.sleep(0.1 if fixed else 0)
        pytest.fail(f"directory redis-server did not start on {self.port}\n{self.log_tail()}",
                    pytrace=False)

    def stop(self):
        """SIGKILL (an outage: nothing is saved, the restart comes back empty)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def client(self):
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def log_tail(self, n=30):
        try:
            with open(self.log_path, "rb") as f:
                return "\n".join(f.read().decode("utf-8", "replace").splitlines()[-n:])
        except OSError:
            return ""

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


class Cluster:
    """Nodes sharing one directory. layout "separate": a plain directory
    redis-server started first; layout "own": the first node keeps the module's
    default directory (its own Redis) and the others point at it."""

    def __init__(self, names=("A", "B"), layout="separate", secret="s3cret", memory="256mb",
                 heartbeat=200, node_ttl=1000, fetch_timeout=30000, node_memory=None):
        assert layout in ("separate", "own")
        self.layout = layout
        self.secret = secret
        self.memory = memory
        self.heartbeat = heartbeat
        self.node_ttl = node_ttl
        self.fetch_timeout = fetch_timeout
        self.node_memory = dict(node_memory or {})
        self.names = list(names)
        self.dir = None
        self.nodes = {}
        self.order = []

    @property
    def directory_addr(self):
        if self.dir is not None:
            return self.dir.addr
        first = self.nodes[self.order[0]]
        return f"127.0.0.1:{first.port}"

    def start(self):
        if self.layout == "separate":
            self.dir = DirectoryRedis().start()
        for name in self.names:
            self.add_node(name)
        return self

    def add_node(self, name, secret=None, memory=None, transfer_port=None, extra_args=()):
        """Start one more node in this cluster (secret None = the cluster's)."""
        assert name not in self.nodes, f"node {name} already exists"
        own_default = self.layout == "own" and not self.order
        node = ClusterNode(
            name, None if own_default else self.directory_addr,
            secret=self.secret if secret is None else secret,
            memory=memory or self.node_memory.get(name, self.memory),
            heartbeat=self.heartbeat, node_ttl=self.node_ttl,
            fetch_timeout=self.fetch_timeout, transfer_port=transfer_port,
            extra_args=extra_args)
        self.nodes[name] = node
        self.order.append(name)
        node.start()
        return node

    def __getitem__(self, name):
        return self.nodes[name]

    def stop(self):
        """Stop every node (last started first, so the directory node of the "own"
        layout goes last) and the directory; returns a failure report or ""."""
        report = []
        for name in reversed(self.order):
            s = self.nodes[name]
            problems = s.stop()
            if problems:
                report.append(f"node {name} (port {s.port}): " + "; ".join(problems)
                              + f"\n--- server log (tail) ---\n{s.log_tail()}")
            else:
                s.cleanup_dirs()
        if self.dir is not None:
            self.dir.cleanup()
        return "\n\n".join(report)


@pytest.fixture
def make_cluster():
    """Factory: make_cluster(names=("A", "B"), layout="separate"|"own", ...) -> Cluster,
    started; everything is stopped and checked at teardown."""
    made = []

    def factory(**kw):
        c = Cluster(**kw)
        made.append(c)
        return c.start()

    yield factory
    report = [c.stop() for c in made]
    report = [r for r in report if r]
    if report:
        pytest.fail("\n\n".join(report), pytrace=False)


@pytest.fixture(scope="module")
def make_cluster_module():
    """make_cluster for a cluster shared by one test module (tests use unique ids
    and compare stats as deltas)."""
    made = []

    def factory(**kw):
        c = Cluster(**kw)
        made.append(c)
        return c.start()

    yield factory
    report = [c.stop() for c in made]
    report = [r for r in report if r]
    if report:
        pytest.fail("\n\n".join(report), pytrace=False)
