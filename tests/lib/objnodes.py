"""The one way Python tests start objstore nodes: real redis-server processes.

Every pytest suite (tests/server, tests/rdma) imports this module; its conftest.py
only wraps these classes in fixtures. What it offers:

    free_port(addr)          a TCP port that was free a moment ago (never the same twice)
    free_port_pair(offset)   a Redis port p with p + offset free too (default transfer port)
    ObjstoreServer           one redis-server --loadmodule build/objstore.so ARGS...
    ClusterNode              a node of a cluster (name, directory, secret, timers)
    write_secret_file(...)   a secret in a file of mode 0600, for `*-file` settings
    rdma_environment_problem()  why RDMA nodes cannot run here (None: they can)
    RdmaNode                 a node whose transfer and RDMA listeners use $OBJ_RXE_ADDR
    DirectoryRedis           a plain redis-server (the directory), restartable on its port
    RedisCluster             a real Redis Cluster (3 masters + 3 replicas) as the directory
    key_slot(key)            the Redis Cluster slot of a key (CRC16 of its hash tag)
    registry_key(name)       the directory set that lists node `name` (objstore:nodes:{b<k>})
    Cluster                  nodes "A", "B", ... sharing one directory
    start_nodes(nodes)       start several nodes at once (their arenas register in parallel)
    stop_servers(labelled)   stop servers, the report of those that left problems
    finish(servers)          stop servers, pytest.fail with their logs if any left problems

A node's start() polls PING (bounded), retries on a port taken in between, and fails
the test with the server's log tail when it does not come up. Its stop() shuts it
down and returns what went wrong: it died, it did not exit, it left its arena file,
its output holds a sanitizer or crash report.

Environment:
    OBJSTORE_BUILD    the build directory (default <repo>/build; build/san-address for
                      a sanitizer build): the module and the test programs come from it
    OBJSTORE_MODULE   the module, if not $OBJSTORE_BUILD/objstore.so
    OBJSTORE_PRELOAD  LD_PRELOAD for the servers (libasan for a sanitizer build)
    REDIS_SERVER      the plain redis-server: the directory, the Redis Cluster
                      (default /usr/bin/redis-server)
    OBJSTORE_SERVER   the server that loads the module (default $REDIS_SERVER), e.g.
                      a Redis 8.0 or a valkey-server built by tests/servers/build-server.sh
    OBJSTORE_VALGRIND 1: the servers that load the module run under valgrind (memcheck;
                      make test-server VALGRIND=1); its reports fail the test like a
                      sanitizer's
"""

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

from objhelpers import Client, nodes, stats

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("OBJSTORE_BUILD") or os.path.join(REPO, "build")
MODULE = os.environ.get("OBJSTORE_MODULE") or os.path.join(BUILD, "objstore.so")
REDIS_SERVER = os.environ.get("REDIS_SERVER") or "/usr/bin/redis-server"
OBJSTORE_SERVER = os.environ.get("OBJSTORE_SERVER") or REDIS_SERVER
TRANSFER_OFFSET = 10000  # default transfer-port = Redis port + 10000

SANITIZER_PATTERNS = (
    "ERROR: AddressSanitizer",
    "runtime error:",
    "LeakSanitizer",
    "ERROR: UndefinedBehaviorSanitizer",
)
# What valgrind's memcheck writes (into the server's log) when it finds an error.
VALGRIND_PATTERNS = (
    "Invalid read of size",
    "Invalid write of size",
    "Invalid free()",
    "Mismatched free()",
    "uninitialised value",
    "depends on uninitialised",
    "Source and destination overlap",
)
VALGRIND = os.environ.get("OBJSTORE_VALGRIND") == "1"
# memcheck without leak checking (the module frees at unload, Redis at exit does not);
# an error found makes the server exit 99 at shutdown, which stop() reports too.
VALGRIND_COMMAND = ["valgrind", "--tool=memcheck", "--error-exitcode=99", "--leak-check=no",
                    "--num-callers=30"]
CRASH_PATTERNS = ("REDIS BUG REPORT", "crashed by signal", "Guru Meditation")


def build_path(*parts):
    """A path under the build directory ($OBJSTORE_BUILD), e.g. build_path("bin", "x")."""
    return os.path.join(BUILD, *parts)


# ---- ports ------------------------------------------------------------------------------

_taken = set()


def free_port(addr="127.0.0.1"):
    """A TCP port on addr that was free a moment ago and was not handed out before in
    this process (the caller retries on a collision with another process)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((addr, 0))
            p = s.getsockname()[1]
        if p not in _taken and p < 60000:
            _taken.add(p)
            return p
    raise RuntimeError(f"no free port on {addr}")


def port_is_free(port, addr="127.0.0.1"):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((addr, port))
        except OSError:
            return False
        return True


def free_port_pair(offset=TRANSFER_OFFSET):
    """A Redis port p below 65535 - offset such that p and p + offset were both free a
    moment ago (a node's default transfer port is p + 10000)."""
    rng = random.Random()
    for _ in range(500):
        p = rng.randint(20000, 31000)
        if p not in _taken and port_is_free(p) and port_is_free(p + offset):
            _taken.add(p)
            return p
    raise RuntimeError(f"no free pair of ports (p, p + {offset}) found")


def server_pid(port, timeout=5.0):
    """The process id of the Redis that answers on 127.0.0.1:port, None if none does.
    Tells a server we started from another's that took its port in between (suites
    run in several processes at once: pytest-xdist, CI's lanes)."""
    try:
        c = redis.Redis(host="127.0.0.1", port=port, socket_timeout=timeout,
                        socket_connect_timeout=timeout)
        try:
            return int(c.info("server")["process_id"])
        finally:
            c.close()
    except (redis.exceptions.RedisError, OSError, KeyError, ValueError):
        return None


def shm_base():
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def ping(port=None, timeout=1.0, unix_socket_path=None, password=None):
    """Whether a Redis on 127.0.0.1:port (or at unix_socket_path) answers PING (a
    loading one does not)."""
    where = ({"unix_socket_path": unix_socket_path} if unix_socket_path
             else {"host": "127.0.0.1", "port": port})
    try:
        c = redis.Redis(socket_timeout=timeout, socket_connect_timeout=timeout,
                        password=password, **where)
        try:
            return bool(c.ping())
        finally:
            c.close()
    except (redis.exceptions.RedisError, OSError):
        return False


def read_log(path):
    try:
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


# ---- a node: redis-server with the module -----------------------------------------------

class ObjstoreServer:
    """One redis-server with the module; start() / stop() come in a pair.

    memory, module_args: the module's arguments (arena-dir defaults to a private
    directory under /dev/shm). server_args: redis-server options. workdir: where
    its log and files go (default: a fresh temporary directory)."""

    # Bounds on a hang, never a verdict on a loaded machine (a sanitizer or valgrind
    # build beside other suites starts and stops slowly; LeakSanitizer at exit too).
    start_timeout = 60.0
    stop_timeout = 60.0
    client_timeout = 30.0
    ping_timeout = 1.0
    start_attempts = 5
    retry_any_failure = False  # retry only when a port was taken in between

    def __init__(self, memory="64mb", module_args=(), server_args=(), name="srv",
                 workdir=None):
        self.memory = memory
        self.module_args = list(module_args)
        self.server_args = list(server_args)
        if workdir is None:
            workdir = tempfile.mkdtemp(prefix=f"objstore-it-{name}-")
        else:
            os.makedirs(workdir, exist_ok=True)
        self.workdir = workdir
        self.arena_dir = tempfile.mkdtemp(prefix=f"objstore-it-arena-{name}-", dir=shm_base())
        self.log_path = os.path.join(self.workdir, "server.log")
        self.label = f"server {name}"
        self.proc = None
        self.port = None
        self.arena_path = None
        self.clients = []
        self.start_failed = False  # try_start() saw it refuse to come up, as expected
        self.clashed = False  # the last start found another server on its port
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
            OBJSTORE_SERVER,
            "--port", str(port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", self.workdir,
            "--loadmodule", MODULE, *margs,
            *self.server_args,
        ]

    def spawn(self, port):
        """Start the process on port (does not wait)."""
        self.clashed = False
        env = dict(os.environ)
        if os.environ.get("OBJSTORE_PRELOAD"):
            env["LD_PRELOAD"] = os.environ["OBJSTORE_PRELOAD"]
        log = open(self.log_path, "ab")
        try:
            cmd = self.command_line(port)
            if VALGRIND and "--loadmodule" in cmd:
                cmd = VALGRIND_COMMAND + cmd
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=log,
                stderr=subprocess.STDOUT, env=env, cwd=self.workdir,
            )
        finally:
            log.close()
        self.port = port

    def wait_ready(self, deadline=None):
        """Poll PING until it answers; None when ready, else why it is not."""
        if deadline is None:
            deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return f"exited with status {self.proc.returncode}"
            if self.answers_ping(self.ping_timeout):
                return None
            time.sleep(0.02)
        return f"no PING answer within {self.start_timeout:.0f}s"

    def check_started(self):
        """After PING: the server that answers is ours (not another's that took the
        port in between: a clash, retried on fresh ports), then read the arena path;
        None, or why the start failed."""
        pid = self.answering_pid()
        if pid is not None and pid != self.proc.pid:
            self.clashed = True
            return f"another server (pid {pid}) answers on port {self.port}"
        try:
            self.arena_path = self.stats()["arena_path"]
        except Exception as e:
            return f"OBJ.STATS failed right after start: {e!r}"
        return None

    def answering_pid(self):
        """The process id of the server that answers where this one listens (None if
        it cannot be read)."""
        return server_pid(self.port)

    def port_clash(self):
        """Whether the last start attempt failed on a port taken in between."""
        return self.clashed or "Address already in use" in self.log()

    def start(self):
        """Start the server; pytest.fail with its log when it does not come up."""
        start_nodes([self])
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
        """The Redis port for the next start attempt (subclasses pick more ports)."""
        return free_port()

    def sigkill(self):
        """SIGKILL on purpose: stop() then does not report the death as a problem."""
        self.killed = True
        self.kill()

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(self.stop_timeout)

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
            problems.append(f"{self.label} died during the test (status {self.proc.returncode})")
        else:
            try:
                c = self.admin_connection(10)
                c.execute_command("SHUTDOWN", "NOSAVE")
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                pass  # the server closes the connection as it exits
            except redis.exceptions.ResponseError as e:
                problems.append(f"SHUTDOWN NOSAVE failed: {e}")
            try:
                self.proc.wait(self.stop_timeout)
            except subprocess.TimeoutExpired:
                problems.append(f"{self.label} did not exit within {self.stop_timeout:.0f}s "
                                "of SHUTDOWN")
                self.proc.terminate()
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.kill()
            else:
                if self.proc.returncode != 0:
                    problems.append(f"{self.label} exited with status {self.proc.returncode}")
                if self.arena_path and os.path.exists(self.arena_path):
                    problems.append(f"arena file {self.arena_path} left behind after shutdown")
        text = self.log()
        for pat in SANITIZER_PATTERNS:
            if pat in text:
                problems.append(f"sanitizer report in the output of {self.label} ({pat!r})")
        for pat in VALGRIND_PATTERNS if VALGRIND else ():
            if pat in text:
                problems.append(f"valgrind report in the output of {self.label} ({pat!r})")
        for pat in CRASH_PATTERNS:
            if pat in text:
                problems.append(f"crash report in the output of {self.label} ({pat!r})")
        # A close that waits out the flush limit instead of accounting for the completions it
        # already holds (it busy-waits on the engine or main thread while it does).
        if "not flushed in time" in text:
            problems.append(f"{self.label} waited out the RDMA flush limit at a close "
                            "('not flushed in time' in its log)")
        return problems

    def cleanup_dirs(self):
        shutil.rmtree(self.workdir, ignore_errors=True)
        shutil.rmtree(self.arena_dir, ignore_errors=True)

    # ---- access ------------------------------------------------------------------
    # How the test reaches the server: 127.0.0.1:port here; a subclass whose server
    # lives elsewhere (tests/lib/netns.py: a network namespace) overrides these three.
    def answers_ping(self, timeout):
        return ping(self.port, timeout=timeout)

    def admin_connection(self, timeout):
        """A plain redis-py connection (SHUTDOWN at stop)."""
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=timeout)

    def new_client(self, timeout):
        """A dedicated raw-reply Client, not tracked (client() tracks it)."""
        return Client(self.port, timeout=timeout)

    def client(self, timeout=None):
        c = self.new_client(self.client_timeout if timeout is None else timeout)
        self.clients.append(c)
        return c

    def stats(self):
        c = self.new_client(self.client_timeout)
        try:
            return stats(c)
        finally:
            c.close()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def log(self):
        return read_log(self.log_path)

    def log_tail(self, n=60):
        return "\n".join(self.log().splitlines()[-n:])

    def objstore_log(self, n=40):
        """The module's own lines (connection closes, fetch errors) from the log."""
        lines = [ln for ln in self.log().splitlines() if "<objstore>" in ln]
        return "\n".join(lines[-n:])


def write_secret_file(directory, name, secret):
    """Write secret to directory/name, mode 0600, and return its path: the module
    refuses secrets as module arguments (MODULE LIST and ps would show them), so
    launchers pass `cluster-secret-file` / `directory-password-file` instead."""
    path = os.path.join(directory, name)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret + "\n")
    os.chmod(path, 0o600)
    return path


def start_nodes(servers):
    """Start servers at once (each registers its arena while the others do), wait for
    all of them, and retry one that failed on fresh ports (a port taken in between);
    pytest.fail with the log of any that does not come up."""
    pending = list(servers)
    attempt = 0
    while pending:
        attempt += 1
        for s in pending:
            s.spawn(s.pick_port())
        deadline = time.monotonic() + max(s.start_timeout for s in pending)
        failed = []
        for s in pending:
            why = s.wait_ready(deadline) or s.check_started()
            if why is not None:
                s.kill()
                failed.append((s, why))
        pending = []
        for s, why in failed:
            if attempt < s.start_attempts and (s.retry_any_failure or s.port_clash()):
                pending.append(s)
                continue
            pytest.fail(f"{s.label} did not start: {why}\n"
                        f"command: {' '.join(map(repr, s.command_line(s.port)))}\n"
                        f"--- server log ---\n{s.log_tail()}", pytrace=False)


def stop_servers(labelled):
    """Stop each server of labelled, (label, server) pairs, in that order: one that
    left problems gives a report (its label, the problems, its log tail), the others'
    directories are removed. Returns the reports (an empty list when all went well)."""
    report = []
    for label, s in labelled:
        problems = s.stop()
        if problems:
            report.append(f"{label}: " + "; ".join(problems)
                          + f"\n--- server log (tail) ---\n{s.log_tail()}")
        else:
            s.cleanup_dirs()
    return report


def nodes_log_report(nodes, n=40):
    """The module's last n log lines of each node of nodes ({name: server}), with its
    state and port: what a failing test's report carries."""
    parts = []
    for name, s in nodes.items():
        if s is None:
            continue
        state = "killed" if s.killed else ("alive" if s.alive() else "DEAD")
        try:
            lines = s.objstore_log(n)
        except OSError as e:
            lines = f"(no log: {e})"
        parts.append(f"--- node {name} ({state}, port {s.port}) ---\n{lines}")
    return "\n".join(parts)


def finish(servers):
    """Stop servers and fail (with their logs) if any left problems behind."""
    report = stop_servers((f"server on port {s.port}", s) for s in servers)
    if report:
        pytest.fail("\n\n".join(report), pytrace=False)


# ---- cluster nodes ------------------------------------------------------------------------

class ClusterNode(ObjstoreServer):
    """One objstore node of a cluster: the module arguments name it, point it at
    the directory and set the cluster secret and the liveness timers.

    directory: "host:port", or None for the module's default (its own Redis).
    transfer_port: None for the default (Redis port + 10000), else an explicit port
    (0 = pick a free one at start). secret None: no cluster secret; else it goes in a
    file of mode 0600 named by cluster-secret-file."""

    def __init__(self, name, directory, secret="s3cret", memory="256mb", heartbeat=200,
                 node_ttl=1000, fetch_timeout=30000, transfer_port=None, extra_args=(),
                 workdir=None):
        super().__init__(memory=memory, name=f"node{name}", workdir=workdir)
        self.name = name
        self.node_name = name
        self.label = f"node {name}"
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

    def node_args(self):
        """The module arguments that make this process a node of its cluster."""
        margs = ["node-name", self.node_name, "heartbeat", str(self.heartbeat),
                 "node-ttl", str(self.node_ttl), "fetch-timeout", str(self.fetch_timeout)]
        if self.secret is not None:
            margs += ["cluster-secret-file", write_secret_file(self.workdir, "cluster-secret",
                                                               self.secret)]
        if self.directory is not None:
            margs += ["directory", self.directory]
        if self.want_transfer_port is not None:
            margs += ["transfer-port", str(self.transfer_port)]
        return margs

    def command_line(self, port):
        self.module_args = self.node_args() + self.extra_args
        return super().command_line(port)

    def sigstop(self):
        os.kill(self.proc.pid, signal.SIGSTOP)

    def restart(self):
        """Start a new process of this node (on fresh ports) after stop() or sigkill();
        returns self. It comes back empty, under the same name; stop() checks it again."""
        assert not self.alive(), f"{self.label} is still running"
        self.stopped = self.killed = False
        start_nodes([self])
        return self

    def sigcont(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self):
        """As ObjstoreServer.stop, after waking the node should a failed test have left
        it stopped (SIGSTOP)."""
        if self.proc is not None and self.proc.poll() is None and not self.stopped:
            os.kill(self.proc.pid, signal.SIGCONT)
        return super().stop()


def rxe_addr():
    """The IPv4 address bound to the RDMA device ($OBJ_RXE_ADDR, without a /prefix)."""
    return os.environ.get("OBJ_RXE_ADDR", "").split("/")[0]


def rdma_environment_problem():
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
    if not os.access(OBJSTORE_SERVER, os.X_OK):
        return f"{OBJSTORE_SERVER} not found"
    return None


class RdmaNode(ClusterNode):
    """A cluster node with its transfer and rdma_cm listeners on $OBJ_RXE_ADDR (Redis
    and the directory stay on 127.0.0.1). rdma=False starts it with rdma-port 0.
    Timeouts are those of an emulated guest: registering an arena under TCG, on a
    busy host, is slow."""

    start_timeout = 120.0
    stop_timeout = 60.0
    client_timeout = 180.0
    ping_timeout = 5.0
    start_attempts = 2
    retry_any_failure = True

    def __init__(self, name, directory, workdir, memory="32mb", rdma=True, secret=None,
                 heartbeat=300, node_ttl=3000, fetch_timeout=120000):
        super().__init__(name, directory, secret=secret, memory=memory, heartbeat=heartbeat,
                         node_ttl=node_ttl, fetch_timeout=fetch_timeout, transfer_port=0,
                         workdir=workdir)
        self.server_args = ["--loglevel", "verbose"]
        self.rdma = rdma
        self.rdma_port = None

    def pick_port(self):
        self.transfer_port = free_port(rxe_addr())
        self.rdma_port = free_port(rxe_addr())
        return free_port()

    def command_line(self, port):
        self.module_args = self.node_args() + [
            "transfer-bind", rxe_addr(), "rdma-port", str(self.rdma_port if self.rdma else 0)]
        return ObjstoreServer.command_line(self, port)

    def check_started(self):
        """After PING: the arena path, and RDMA up exactly when asked for."""
        why = super().check_started()
        if why is not None:
            return why
        st = self.stats()
        want = 1 if self.rdma else 0
        if st.get("rdma_enabled") != want:
            return (f"rdma_enabled is {st.get('rdma_enabled')}, expected {want}\n"
                    f"--- log ---\n{self.log_tail(30)}")
        return None


# ---- the directory: a plain redis-server --------------------------------------------------

class DirectoryRedis:
    """A plain redis-server (no module) used as the shared directory; it can be
    stopped and started again, empty, on the same port."""

    def __init__(self, workdir=None, start_timeout=60.0):
        if workdir is None:
            workdir = tempfile.mkdtemp(prefix="objstore-it-dir-")
        else:
            os.makedirs(workdir, exist_ok=True)
        self.workdir = workdir
        self.start_timeout = start_timeout
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
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if ping(self.port):
                # Ours, not another's that took the port in between.
                return server_pid(self.port) in (self.proc.pid, None)
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

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def client(self):
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)

    def log_tail(self, n=30):
        return "\n".join(read_log(self.log_path).splitlines()[-n:])

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


# ---- the directory on a Redis Cluster ----------------------------------------------------

def crc16(data):
    """CRC16-XMODEM, as Redis Cluster hashes keys."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def key_slot(key):
    """The slot of key (bytes or str): CRC16 of its hash tag, or of the whole key."""
    if isinstance(key, str):
        key = key.encode()
    start = key.find(b"{")
    if start >= 0:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            key = key[start + 1:end]
    return crc16(key) % 16384


REGISTRY_BUCKETS = 16


def registry_key(name):
    """The registry bucket that lists node name: objstore:nodes:{b<CRC16(name) % 16>}."""
    if isinstance(name, str):
        name = name.encode()
    return b"objstore:nodes:{b%d}" % (crc16(name) % REGISTRY_BUCKETS)


# Redis Cluster ports: client ports in [14000, 16999] and bus ports (cluster-port) 3000
# above them, all below the ranges free_port (the kernel's ephemeral range) and
# free_port_pair (20000-41000) hand out, so the two never collide.
CLUSTER_PORT_LO, CLUSTER_PORT_HI, CLUSTER_BUS_OFFSET = 14000, 16999, 3000


def free_cluster_port():
    """A client port for a Redis Cluster node whose bus port (+3000) is free too."""
    rng = random.Random()
    for _ in range(500):
        p = rng.randint(CLUSTER_PORT_LO, CLUSTER_PORT_HI)
        if (p not in _taken and p + CLUSTER_BUS_OFFSET not in _taken and port_is_free(p)
                and port_is_free(p + CLUSTER_BUS_OFFSET)):
            _taken.update((p, p + CLUSTER_BUS_OFFSET))
            return p
    raise RuntimeError("no free Redis Cluster port pair")


class RedisCluster:
    """A real Redis Cluster on loopback as the objstore directory: `masters` masters
    with `replicas` replicas each (Debian's redis-server --cluster-enabled yes, joined
    by `redis-cli --cluster create`). cluster-require-full-coverage is off, so the
    shards that live keep answering while one fails over, as the README recommends.

    seeds: the `directory` setting for the nodes ("host:port,host:port").
    password: requirepass (and masterauth) on every node; the nodes then need it as
    their directory-password. Every wait is bounded; a failure to come up fails the
    test with the logs."""

    node_timeout = 1000  # ms, cluster-node-timeout: how fast a dead master is failed over
    ready_timeout = 30.0

    def __init__(self, masters=3, replicas=1, workdir=None, password=None):
        self.password = password
        if workdir is None:
            workdir = tempfile.mkdtemp(prefix="objstore-it-rcluster-")
        self.workdir = workdir
        self.n = masters * (1 + replicas)
        self.masters_wanted = masters
        self.replicas = replicas
        self.ports = []
        self.procs = {}

    def _spawn(self, port):
        d = os.path.join(self.workdir, str(port))
        os.makedirs(d, exist_ok=True)
        log = open(os.path.join(d, "redis.log"), "ab")
        try:
            self.procs[port] = subprocess.Popen(
                [REDIS_SERVER, "--port", str(port), "--bind", "127.0.0.1",
                 "--cluster-enabled", "yes", "--cluster-port", str(port + CLUSTER_BUS_OFFSET),
                 "--cluster-config-file", "nodes.conf",
                 "--cluster-node-timeout", str(self.node_timeout),
                 "--cluster-require-full-coverage", "no",
                 "--cluster-replica-validity-factor", "0",
                 "--save", "", "--appendonly", "no", "--dir", d,
                 *(["--requirepass", self.password, "--masterauth", self.password]
                   if self.password else [])],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, cwd=d)
        finally:
            log.close()

    def _fail(self, why):
        tails = "\n".join(f"--- {p} ---\n" + "\n".join(
            read_log(os.path.join(self.workdir, str(p), "redis.log")).splitlines()[-15:])
            for p in self.ports)
        self.stop()
        pytest.fail(f"Redis Cluster: {why}\n{tails}", pytrace=False)

    def start(self):
        for attempt in range(3):
            self.ports = [free_cluster_port() for _ in range(self.n)]
            for p in self.ports:
                self._spawn(p)
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline and not all(self._up(p) for p in self.ports):
                if any(pr.poll() is not None for pr in self.procs.values()):
                    break
                time.sleep(0.05)
            if all(self._up(p) for p in self.ports):
                break
            clash = any("Address already in use" in read_log(
                os.path.join(self.workdir, str(p), "redis.log")) for p in self.ports)
            if not clash or attempt == 2:
                self._fail("a node did not start")
            self.stop()
            self.procs = {}
        auth = ["-a", self.password, "--no-auth-warning"] if self.password else []
        cmd = ["redis-cli", *auth, "--cluster", "create",
               *[f"127.0.0.1:{p}" for p in self.ports],
               "--cluster-replicas", str(self.replicas), "--cluster-yes"]
        r = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, timeout=60)
        if r.returncode != 0:
            self._fail(f"{' '.join(cmd)} failed:\n{r.stdout.decode()}{r.stderr.decode()}")
        self.wait_healthy()
        return self

    def _up(self, port):
        return ping(port, 5.0, password=self.password)

    def wait_healthy(self, timeout=None):
        """Wait until every live node says cluster_state:ok, sees `masters` masters
        covering all slots, and every live replica's link to its master is up."""
        deadline = time.monotonic() + (timeout or self.ready_timeout)
        why = "not checked"
        while time.monotonic() < deadline:
            why = self._health()
            if why is None:
                return
            time.sleep(0.1)
        self._fail(f"not healthy within {timeout or self.ready_timeout:.0f}s: {why}")

    def wait_failover(self, dead, timeout=None):
        """After kill(dead): wait until a replica has replaced it, i.e. no live node
        lists dead as the master of any slot, and the cluster is healthy again."""
        deadline = time.monotonic() + (timeout or self.ready_timeout)
        why = "not checked"
        while time.monotonic() < deadline:
            why = self._health(dead)
            if why is None:
                return
            time.sleep(0.1)
        self._fail(f"no replica replaced master {dead} within "
                   f"{timeout or self.ready_timeout:.0f}s: {why}")

    def _health(self, dead=None):
        for p in self.live_ports():
            try:
                c = self.client(p)
                info = c.execute_command("CLUSTER", "INFO").decode()
                if "cluster_state:ok" not in info:
                    return f"{p}: cluster_state is not ok"
                slots = c.execute_command("CLUSTER", "SLOTS")
                covered = sum(int(e[1]) - int(e[0]) + 1 for e in slots)
                owners = {int(e[2][1]) for e in slots}
                if covered != 16384 or len(owners) != self.masters_wanted:
                    return f"{p}: {covered} slots covered by {len(owners)} masters"
                if dead in owners:
                    return f"{p}: still lists {dead} as a master"
                repl = c.info("replication")
                if repl.get("role") == "slave" and repl.get("master_link_status") != "up":
                    return f"{p}: replica link is {repl.get('master_link_status')}"
                c.close()
            except (redis.exceptions.RedisError, OSError) as e:
                return f"{p}: {e!r}"
        return None

    @property
    def seeds(self):
        return ",".join(f"127.0.0.1:{p}" for p in self.live_ports()[:2])

    def live_ports(self):
        return [p for p in self.ports if self.procs[p].poll() is None]

    def client(self, port):
        return redis.Redis(host="127.0.0.1", port=port, socket_timeout=5,
                           socket_connect_timeout=5, password=self.password)

    def master_ports(self):
        """Ports of the masters that serve slots, as a live node sees them."""
        slots = self.client(self.live_ports()[0]).execute_command("CLUSTER", "SLOTS")
        return sorted({int(e[2][1]) for e in slots})

    def master_of(self, key):
        """The port of the master that serves key's slot."""
        slot = key_slot(key)
        for p in self.live_ports():
            try:
                slots = self.client(p).execute_command("CLUSTER", "SLOTS")
                break
            except (redis.exceptions.RedisError, OSError):
                continue
        for e in slots:
            if int(e[0]) <= slot <= int(e[1]):
                return int(e[2][1])
        return None

    def kill(self, port):
        """SIGKILL one node (a crash: its replica must take over)."""
        pr = self.procs[port]
        if pr.poll() is None:
            pr.kill()
            pr.wait(10)

    def stop(self):
        for pr in self.procs.values():
            if pr.poll() is None:
                pr.kill()
                pr.wait(10)

    def cleanup(self):
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


# ---- clusters -----------------------------------------------------------------------------

class Cluster:
    """Nodes sharing one directory. layout "separate": a plain directory
    redis-server started first; layout "own": the first node keeps the module's
    default directory (its own Redis) and the others point at it."""

    def __init__(self, names=("A", "B"), layout="separate", secret="s3cret", memory="256mb",
                 heartbeat=200, node_ttl=1000, fetch_timeout=30000, node_memory=None,
                 extra_args=()):
        """extra_args: module arguments of every node (add_node's own come after)."""
        assert layout in ("separate", "own")
        self.layout = layout
        self.secret = secret
        self.memory = memory
        self.heartbeat = heartbeat
        self.node_ttl = node_ttl
        self.fetch_timeout = fetch_timeout
        self.node_memory = dict(node_memory or {})
        self.extra_args = list(extra_args)
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
            extra_args=self.extra_args + list(extra_args))
        self.nodes[name] = node
        self.order.append(name)
        node.start()
        return node

    def __getitem__(self, name):
        return self.nodes[name]

    def stop(self):
        """Stop every node (last started first, so the directory node of the "own"
        layout goes last) and the directory; returns a failure report or ""."""
        report = stop_servers((f"node {name} (port {self.nodes[name].port})", self.nodes[name])
                              for name in reversed(self.order))
        if self.dir is not None:
            self.dir.cleanup()
        return "\n\n".join(report)


def wait_registered(client, names, timeout):
    """Wait until OBJ.NODES (through client) lists exactly names; assert it does."""
    want = sorted(names)
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        seen = sorted(nodes(client))
        if seen == want:
            break
        time.sleep(0.1)
    assert seen == want, f"OBJ.NODES lists {seen}, expected {want}"


class RdmaCluster:
    """RDMA nodes sharing one plain directory Redis, started at once.
    specs: (name, memory, rdma, secret) per node; workroot holds every log."""

    def __init__(self, workroot, specs):
        self.workroot = workroot
        self.specs = list(specs)
        self.dir = None
        self.nodes = {}

    def __getitem__(self, name):
        return self.nodes[name]

    def start(self):
        self.dir = DirectoryRedis(workdir=os.path.join(self.workroot, "directory"),
                                  start_timeout=60.0).start()
        for name, mem, rdma, secret in self.specs:
            self.nodes[name] = RdmaNode(name, self.dir.addr, os.path.join(self.workroot,
                                        f"node{name}"), memory=mem, rdma=rdma, secret=secret)
        start_nodes(list(self.nodes.values()))
        # Every node has registered in the directory before any test runs.
        some = next(iter(self.nodes.values()))
        c = some.client()
        wait_registered(c, self.nodes, 30.0)
        return self

    def stop(self):
        """Stop every node and the directory; returns a list of problems."""
        problems = []
        for n in self.nodes.values():
            problems += [f"node {n.name}: {p}" for p in n.stop()]
            shutil.rmtree(n.arena_dir, ignore_errors=True)
        if self.dir:
            self.dir.stop()
        return problems


# ---- test ids -----------------------------------------------------------------------------

class Uid(bytes):
    """A binary id unique to one test; uid(b'x') derives more ids from it."""

    def __call__(self, suffix=b""):
        return bytes(self) + b":" + suffix


def make_uid(request, prefix, n, salt, width=80):
    """The id of test request.node: prefix, its name (brackets and glob characters
    replaced, so that OBJ.LIST MATCH can match it literally), a counter, a salt."""
    base = prefix + request.node.name.encode()[:width].replace(b"[", b"(").replace(b"]", b")")
    base = base.replace(b"*", b"_").replace(b"?", b"_").replace(b"\\", b"_")
    return Uid(base + b":%d:" % n + salt)
