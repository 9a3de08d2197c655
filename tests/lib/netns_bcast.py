"""Rate-limited links for the broadcast tests and bench: N nodes in namespaces of their own.

A hub namespace holds one bridge and the directory Redis; each node gets a namespace
with a veth pair to that bridge, limited in both directions with tc tbf (the node's
side shapes what it sends, the hub's side what it receives). Addresses (10.78.0.0/24)
exist only inside these namespaces. The test process stays in the host namespace and
reaches every server through a unix socket in the server's work directory.

    BcastLab(n, rate="400mbit", ...)   start() / close(); a context manager too
    lab.client(i), lab.stats(i), lab.kill9(i), lab.alive(i), lab.name(i)

Names carry a per-run prefix (ob<pid in hex>), and close() (also at interpreter exit
and on SIGTERM) kills every process and deletes every namespace, which takes its veths
and the bridge with it. Needs root, ip(8) and tc(8). Meant to be folded into the
common namespace harness of tests/lib later; kept small and self-contained until then.
"""

import atexit
import os
import shutil
import signal
import subprocess
import tempfile
import time

import redis

from objhelpers import VerbatimErrorParser, nodes, stats
from objnodes import MODULE, OBJSTORE_SERVER, REDIS_SERVER, shm_base

SUBNET = "10.78.0"
HUB_ADDR = f"{SUBNET}.1"
REDIS_PORT = 6379
TRANSFER_PORT = 16379

_labs = []


def sh(argv, check=True):
    """Run argv; raise RuntimeError with its stderr when check and it fails."""
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def netns_problem():
    """Why namespaces cannot be built here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} not found (iproute2)"
    return None


def _close_all():
    for lab in list(_labs):
        lab.close()


def _on_sigterm(signum, frame):
    _close_all()
    raise SystemExit(128 + signum)


atexit.register(_close_all)
if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
    signal.signal(signal.SIGTERM, _on_sigterm)


class UnixClient(redis.Redis):
    """One connection over a unix socket with raw replies (like objhelpers.Client)."""

    def __init__(self, path, timeout=120.0):
        pool = redis.ConnectionPool(connection_class=redis.UnixDomainSocketConnection,
                                    path=path, socket_timeout=timeout,
                                    parser_class=VerbatimErrorParser, decode_responses=False)
        super().__init__(connection_pool=pool, single_connection_client=True)
        self.response_callbacks = {}


class BcastLab:
    """N nodes (n0..n{N-1}) on rate-limited links to one bridge, and a directory."""

    def __init__(self, n, rate="400mbit", burst="512kb", memory="512mb", secret="s3cret",
                 node_args=(), per_node_args=None):
        assert 1 <= n <= 200
        self.n = n
        self.rate = rate
        self.burst = burst
        self.memory = memory
        self.secret = secret
        self.node_args = list(node_args)
        self.per_node_args = dict(per_node_args or {})
        self.prefix = f"ob{os.getpid():x}"
        self.hub = f"{self.prefix}hub"
        self.workdir = tempfile.mkdtemp(prefix="objstore-bcast-")
        self.arena_dir = tempfile.mkdtemp(prefix="objstore-bcast-arena-", dir=shm_base())
        self.procs = {}  # name -> Popen
        self.namespaces = []
        self.closed = False

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.close()

    def name(self, i):
        return f"n{i}"

    def ns(self, i):
        return f"{self.prefix}n{i}"

    def sock(self, name):
        return os.path.join(self.workdir, name, "redis.sock")

    # ---- building ----------------------------------------------------------------
    def _netns(self, ns):
        sh(["ip", "netns", "add", ns])
        self.namespaces.append(ns)
        sh(["ip", "-n", ns, "link", "set", "lo", "up"])

    def _shape(self, ns, dev):
        sh(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", self.rate,
            "burst", self.burst, "latency", "100ms"])

    def _link(self, i):
        ns, hub_dev = self.ns(i), f"{self.prefix}v{i}"
        self._netns(ns)
        sh(["ip", "-n", self.hub, "link", "add", hub_dev, "type", "veth", "peer", "name", "eth0",
            "netns", ns])
        sh(["ip", "-n", self.hub, "link", "set", hub_dev, "master", "br0", "up"])
        sh(["ip", "-n", ns, "addr", "add", f"{SUBNET}.{10 + i}/24", "dev", "eth0"])
        sh(["ip", "-n", ns, "link", "set", "eth0", "up"])
        if self.rate:
            self._shape(ns, "eth0")
            self._shape(self.hub, hub_dev)

    def _spawn(self, name, ns, argv):
        d = os.path.join(self.workdir, name)
        os.makedirs(d, exist_ok=True)
        env = dict(os.environ)
        if os.environ.get("OBJSTORE_PRELOAD"):  # a sanitizer build's runtime
            env["LD_PRELOAD"] = os.environ["OBJSTORE_PRELOAD"]
        log = open(os.path.join(d, "server.log"), "ab")
        try:
            self.procs[name] = subprocess.Popen(["ip", "netns", "exec", ns, *argv],
                                                stdin=subprocess.DEVNULL, stdout=log,
                                                stderr=subprocess.STDOUT, cwd=d, env=env)
        finally:
            log.close()

    def _redis_argv(self, binary, name, bind):
        return [binary, "--port", str(REDIS_PORT), "--bind", bind, "--save", "",
                "--appendonly", "no", "--protected-mode", "no", "--dir", os.path.join(self.workdir, name),
                "--unixsocket", self.sock(name), "--unixsocketperm", "700"]

    def _secret_file(self):
        path = os.path.join(self.workdir, "secret")
        if not os.path.exists(path):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(self.secret)
        return path

    def _node_argv(self, i):
        name, addr = self.name(i), f"{SUBNET}.{10 + i}"
        return self._redis_argv(OBJSTORE_SERVER, name, addr) + [
            "--loadmodule", MODULE, "memory", self.memory, "arena-dir", self.arena_dir,
            "node-name", name, "directory", f"{HUB_ADDR}:{REDIS_PORT}",
            "cluster-secret-file", self._secret_file(), "transfer-bind", addr,
            "transfer-port", str(TRANSFER_PORT), "heartbeat", "200", "node-ttl", "2000",
            *self.node_args, *self.per_node_args.get(i, ())]

    def _wait_ping(self, name, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            p = self.procs[name]
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited ({p.returncode}): {self.log_tail(name)}")
            try:
                if UnixClient(self.sock(name), timeout=1.0).ping():
                    return
            except (redis.ConnectionError, redis.TimeoutError, FileNotFoundError):
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{name} does not answer PING: {self.log_tail(name)}")

    def start(self):
        _labs.append(self)
        try:
            self._netns(self.hub)
            sh(["ip", "-n", self.hub, "link", "add", "br0", "type", "bridge"])
            sh(["ip", "-n", self.hub, "addr", "add", f"{HUB_ADDR}/24", "dev", "br0"])
            sh(["ip", "-n", self.hub, "link", "set", "br0", "up"])
            for i in range(self.n):
                self._link(i)
            self._spawn("dir", self.hub, self._redis_argv(REDIS_SERVER, "dir", HUB_ADDR))
            self._wait_ping("dir")
            for i in range(self.n):
                self._spawn(self.name(i), self.ns(i), self._node_argv(i))
            for i in range(self.n):
                self._wait_ping(self.name(i))
            self.wait_registered()
        except BaseException:
            self.close()
            raise
        return self

    def wait_registered(self, timeout=30.0):
        want = sorted(self.name(i) for i in range(self.n) if self.alive(i))
        deadline = time.monotonic() + timeout
        seen = []
        while time.monotonic() < deadline:
            i = next(i for i in range(self.n) if self.alive(i))
            try:
                seen = sorted(nodes(self.client(i)))
            except redis.ResponseError:  # UNAVAILABLE while the node connects
                pass
            if seen == want:
                return
            time.sleep(0.1)
        raise RuntimeError(f"registered: {seen}, expected {want}")

    # ---- using ------------------------------------------------------------------
    def client(self, i, timeout=120.0):
        return UnixClient(self.sock(self.name(i)), timeout=timeout)

    def stats(self, i):
        return stats(self.client(i))

    def alive(self, i):
        p = self.procs.get(self.name(i))
        return p is not None and p.poll() is None

    def kill9(self, i):
        """SIGKILL node i (the ip-netns-exec wrapper execs it, so the pid is the server's)."""
        p = self.procs[self.name(i)]
        p.send_signal(signal.SIGKILL)
        p.wait(10)

    def log_tail(self, name, n=40):
        try:
            with open(os.path.join(self.workdir, name, "server.log"), "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode(errors="replace")
        except OSError:
            return ""

    def crashed(self):
        """Names of nodes whose log shows a crash or a sanitizer report."""
        bad = []
        for i in range(self.n):
            text = self.log_tail(self.name(i), n=100000)
            if any(p in text for p in ("REDIS BUG REPORT", "crashed by signal",
                                       "ERROR: AddressSanitizer", "runtime error:")):
                bad.append(self.name(i))
        return bad

    def close(self):
        if self.closed:
            return
        self.closed = True
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in self.procs.values():
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for ns in reversed(self.namespaces):
            sh(["ip", "netns", "del", ns], check=False)
        shutil.rmtree(self.arena_dir, ignore_errors=True)
        if os.environ.get("OBJSTORE_KEEP_LOGS") is None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if self in _labs:
            _labs.remove(self)
