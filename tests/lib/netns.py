"""Network-namespace clusters for tests: objstore nodes that talk over real links.

Loopback cannot show what links do: a node that vanishes without a FIN, a partition,
many nodes sharing bandwidth. This module puts each node (and the directory Redis) in
a network namespace of its own, with a veth pair to one bridge, optionally rate limited
in both directions (tc tbf), and lets a test cut and heal a link, pause and continue a
node, kill -9 and restart it, flush or restart the directory, and read every node's
stats. Its users: tests/chaos (its own tests in test_netns.py, and the chaos run), the
broadcast tests (tests/server/test_broadcast_netns.py) and bench/broadcast.py.

    netns_problem()        why namespaces cannot be made here (None: they can)
    NetnsLab               the bridge, the namespaces and their links; close() removes all
    NetnsNode              a ClusterNode (tests/lib/objnodes.py) run inside a namespace
    NetnsDirectory         the directory: a plain redis-server in a namespace of its own
    NetnsCluster           N nodes and a directory on one lab, started and stopped together
    UnixClient             a raw-reply Client over a node's unix socket

The test process stays in the host namespace and reaches every server through a unix
socket in the server's work directory, so cutting a link never cuts the test's own
control of the node. Node-to-node and node-to-directory traffic crosses the bridge.

Names carry a per-run prefix (oc<pid in hex><letter>), so runs never collide, and a
lab removes every process, namespace, veth and its bridge at close(), at interpreter
exit, and on SIGTERM / SIGINT / SIGHUP. Needs root, ip(8) and tc(8).
"""

import atexit
import itertools
import os
import shutil
import signal
import subprocess
import threading
import time

import redis

from objhelpers import Client, VerbatimErrorParser, nodes
from objnodes import (
    REDIS_SERVER,
    ClusterNode,
    DirectoryRedis,
    ping,
    read_log,
    start_nodes,
    stop_servers,
)

REDIS_PORT = 6379  # every server has its namespace to itself: the same ports everywhere
TRANSFER_PORT = 16379


class NetnsError(RuntimeError):
    """A namespace, link or qdisc operation failed (message: the command and its stderr)."""


def sh(argv, check=True, timeout=30):
    """Run argv; returns its CompletedProcess (text output). check: raise NetnsError
    with the command's stderr when it fails."""
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def netns_problem():
    """Why this process cannot build namespaces and links, or None when it can."""
    if os.geteuid() != 0:
        return "network namespaces need root (run the suite as root)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} not found (iproute2)"
    probe = f"oc{os.getpid():x}probe"
    r = sh(["ip", "netns", "add", probe], check=False)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    sh(["ip", "netns", "del", probe], check=False)
    return None


# ---- every lab of this process, removed on any way out ------------------------------------

_labs = set()
_labs_lock = threading.Lock()
_handlers_installed = False
_prev_handlers = {}
_letters = itertools.count()


def _close_all():
    """Close every lab still open (atexit and signal handlers). Can't fail."""
    with _labs_lock:
        labs = list(_labs)
    for lab in labs:
        try:
            lab.close()
        except Exception:
            pass


def _on_signal(signum, frame):
    """Remove everything, then let the signal do what it did before (SIGINT: raise
    KeyboardInterrupt so the caller's cleanup runs too; others: the default, i.e.
    die by the signal)."""
    _close_all()
    prev = _prev_handlers.get(signum, signal.SIG_DFL)
    if callable(prev):
        prev(signum, frame)
        return
    if prev == signal.SIG_IGN:
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_handlers():
    """atexit and signal handlers, once per process; signals only from the main thread
    (Python allows no other)."""
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(_close_all)
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        _prev_handlers[signum] = signal.getsignal(signum)
        signal.signal(signum, _on_signal)


# ---- the lab: bridge, namespaces, links ---------------------------------------------------

class Link:
    """One namespace and its veth: eth0 inside (address addr), `veth` on the bridge."""

    def __init__(self, lab, name, index):
        self.lab = lab
        self.name = name
        self.index = index
        self.ns = f"{lab.prefix}-{name}"
        self.veth = f"{lab.prefix}v{index}"
        self.addr = f"{lab.subnet}.{index}"
        self.cut = False
        self.rate = None

    def exec_argv(self, argv):
        """argv run inside this namespace (ip netns exec execs it: same pid)."""
        return ["ip", "netns", "exec", self.ns, *argv]

    def run(self, argv, check=True, timeout=30):
        return sh(self.exec_argv(argv), check=check, timeout=timeout)

    def spawn(self, argv, **popen_args):
        """Start argv inside this namespace without waiting; returns the Popen (its pid
        becomes argv's). The lab kills it at close() even if it had not yet entered
        the namespace when close() looked (ip(8) enters it after the fork)."""
        p = subprocess.Popen(self.exec_argv(argv), **popen_args)
        with self.lab.lock:
            self.lab.procs.append(p)
        return p

    def pids(self):
        """Processes in this namespace now."""
        r = sh(["ip", "netns", "pids", self.ns], check=False)
        return [int(p) for p in r.stdout.split()] if r.returncode == 0 else []

    def tcp_sockets(self, owners=False):
        """TCP sockets in this namespace: a list of (state, local, peer) strings, and with
        owners a fourth element: whether a process still holds the socket (False: an
        orphan the kernel is finishing to close after its process closed it)."""
        r = self.run(["ss", "-tanH"] + (["-p"] if owners else []), check=False)
        out = []
        for line in r.stdout.splitlines():
            f = line.split()
            if len(f) >= 5:
                out.append((f[0], f[3], f[4]) + (("users:" in line,) if owners else ()))
        return out


class NetnsLab:
    """A bridge and the namespaces on it. add() makes a namespace with a veth to the
    bridge (and a tbf rate limit both ways when rate is set, e.g. "400mbit"); cut() and
    heal() take the host side of a link down and up (the node sees silence, no FIN);
    close() kills what runs in the namespaces and removes namespaces, veths and the
    bridge, and is safe to call twice. Use as a context manager, or call close()."""

    def __init__(self, rate=None, burst="256kb", latency="200ms"):
        letter = "abcdefghijklmnopqrstuvwxyz"[next(_letters) % 26]
        self.prefix = f"oc{os.getpid():x}{letter}"  # <= 9 characters: names stay <= 15
        self.subnet = f"10.77.{(os.getpid() + ord(letter)) % 250 + 1}"
        self.bridge = f"{self.prefix}br"
        self.rate = rate
        self.burst = burst
        self.latency = latency
        self.links = {}
        self.procs = []  # every Popen of Link.spawn
        self.lock = threading.Lock()
        self.created = False
        self.closed = False

    def __enter__(self):
        return self.create()

    def __exit__(self, *exc):
        self.close()

    def create(self):
        """Make the bridge. Raises NetnsError (and removes what it made) on failure."""
        with _labs_lock:
            _labs.add(self)
        _install_handlers()
        self.created = True
        sh(["ip", "link", "add", self.bridge, "type", "bridge"])
        sh(["ip", "link", "set", self.bridge, "up"])
        return self

    def add(self, name, index=None):
        """A namespace `name` with address <subnet>.index (default: the next free one
        from 1) on the bridge; returns its Link."""
        with self.lock:
            if index is None:
                index = next(i for i in itertools.count(1)
                             if i not in {ln.index for ln in self.links.values()})
            assert 1 <= index <= 254 and name not in self.links
            link = Link(self, name, index)
            self.links[name] = link
        sh(["ip", "netns", "add", link.ns])
        sh(["ip", "link", "add", link.veth, "type", "veth", "peer", "name", "eth0",
            "netns", link.ns])
        sh(["ip", "link", "set", link.veth, "master", self.bridge, "up"])
        link.run(["ip", "link", "set", "lo", "up"])
        link.run(["ip", "addr", "add", f"{link.addr}/24", "dev", "eth0"])
        link.run(["ip", "link", "set", "eth0", "up"])
        if self.rate:
            self.set_rate(link, self.rate)
        return link

    def __getitem__(self, name):
        return self.links[name]

    def set_rate(self, link, rate):
        """Limit link to rate both ways (upload: eth0 in the namespace; download: the
        veth on the bridge), or lift the limit (rate None)."""
        link.run(["tc", "qdisc", "del", "dev", "eth0", "root"], check=False)
        sh(["tc", "qdisc", "del", "dev", link.veth, "root"], check=False)
        link.rate = rate
        if rate is None:
            return
        tbf = ["root", "tbf", "rate", rate, "burst", self.burst, "latency", self.latency]
        link.run(["tc", "qdisc", "add", "dev", "eth0", *tbf])
        sh(["tc", "qdisc", "add", "dev", link.veth, *tbf])

    def qdiscs(self, link):
        """tc's view of both ends of link: (inside, bridge side) as text."""
        inside = link.run(["tc", "qdisc", "show", "dev", "eth0"], check=False).stdout
        outside = sh(["tc", "qdisc", "show", "dev", link.veth], check=False).stdout
        return inside, outside

    def cut(self, link):
        """Partition link's namespace from the bridge (silently: no FIN, no RST)."""
        sh(["ip", "link", "set", link.veth, "down"])
        link.cut = True

    def heal(self, link):
        sh(["ip", "link", "set", link.veth, "up"])
        link.cut = False

    def close(self):
        """Kill every process in the namespaces, delete them, their veths and the
        bridge. Returns what could not be removed (a list of strings, empty when all
        went). Can be called again; never raises."""
        if self.closed or not self.created:
            return []
        self.closed = True
        with self.lock:
            links = list(self.links.values())
            procs = list(self.procs)
        pids = {p.pid for p in procs if p.poll() is None}
        for link in links:
            pids.update(link.pids())
        for pid in pids:
            try:
                os.kill(pid, signal.SIGCONT)
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        for link in links:
            deadline = time.monotonic() + 10
            while link.pids() and time.monotonic() < deadline:
                time.sleep(0.05)
            sh(["ip", "netns", "del", link.ns], check=False)
            sh(["ip", "link", "del", link.veth], check=False)
        sh(["ip", "link", "del", self.bridge], check=False)
        with _labs_lock:
            _labs.discard(self)
        left = self.leftovers()
        return [f"left behind: {x}" for x in left]

    def leftovers(self):
        """Namespaces and links of this lab that exist now (empty after close())."""
        return leftovers(self.prefix)


def leftovers(prefix):
    """Namespaces and network interfaces whose names start with prefix, and processes in
    those namespaces."""
    found = []
    ns = sh(["ip", "netns", "list"], check=False).stdout.split("\n")
    for line in ns:
        name = line.split(" ")[0]
        if name.startswith(prefix):
            pids = sh(["ip", "netns", "pids", name], check=False).stdout.split()
            found.append(f"namespace {name}" + (f" (pids {' '.join(pids)})" if pids else ""))
    links = sh(["ip", "-o", "link", "show"], check=False).stdout.splitlines()
    for line in links:
        f = line.split(": ")
        if len(f) >= 2 and f[1].split("@")[0].startswith(prefix):
            found.append(f"link {f[1].split('@')[0]}")
    return found


# ---- servers in namespaces ----------------------------------------------------------------

class UnixClient(Client):
    """objhelpers.Client (raw replies, verbatim errors, one connection) over a unix
    socket: the test's way into a server that lives in another namespace."""

    def __init__(self, path, timeout=30.0):
        pool = redis.ConnectionPool(
            connection_class=redis.UnixDomainSocketConnection,
            path=path,
            socket_timeout=timeout,
            parser_class=VerbatimErrorParser,
        )
        redis.Redis.__init__(self, connection_pool=pool, single_connection_client=True)
        self.response_callbacks = {}


def _spawn_in(link, argv, log_path, cwd, preload=True):
    """Start argv inside link's namespace; preload: LD_PRELOAD from $OBJSTORE_PRELOAD
    (given to the server only, not to ip(8)). Returns the Popen: its pid is the
    server's."""
    pre = ["env"]
    if preload and os.environ.get("OBJSTORE_PRELOAD"):
        pre.append(f"LD_PRELOAD={os.environ['OBJSTORE_PRELOAD']}")
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    log = open(log_path, "ab")
    try:
        return link.spawn(pre + argv, stdin=subprocess.DEVNULL, stdout=log,
                          stderr=subprocess.STDOUT, env=env, cwd=cwd)
    finally:
        log.close()


class NetnsNode(ClusterNode):
    """A cluster node inside link's namespace: Redis on 127.0.0.1:6379 there and on a
    unix socket in its work directory (the test's way in), transfers on
    <link address>:16379. The cluster secret goes in a config file (never on the
    command line). kill9() and restart() give a new incarnation on the same link."""

    def __init__(self, name, link, directory, secret="s3cret", memory="128mb", heartbeat=250,
                 node_ttl=1500, fetch_timeout=30000, extra_args=(), workdir=None):
        super().__init__(name, directory, secret=None, memory=memory, heartbeat=heartbeat,
                         node_ttl=node_ttl, fetch_timeout=fetch_timeout,
                         transfer_port=TRANSFER_PORT,
                         extra_args=["transfer-bind", link.addr, *extra_args], workdir=workdir)
        self.link = link
        self.label = f"node {name} ({link.ns})"
        self.sock_path = os.path.join(self.workdir, "redis.sock")
        self.conf_path = os.path.join(self.workdir, "secret.conf")
        fd = os.open(self.conf_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            if secret is not None:
                f.write(f"objstore.cluster-secret {secret}\n")
        self.incarnation = 0
        self.paused = False

    def pick_port(self):
        self.transfer_port = TRANSFER_PORT
        return REDIS_PORT

    def command_line(self, port):
        argv = super().command_line(port)
        argv.insert(1, self.conf_path)  # a config file must come first
        return argv + ["--unixsocket", self.sock_path, "--unixsocketperm", "700"]

    def spawn(self, port):
        self.proc = _spawn_in(self.link, self.command_line(port), self.log_path, self.workdir)
        self.port = port
        self.incarnation += 1

    def answering_pid(self):
        """None: the node has its namespace to itself, no other server can take its port."""
        return None

    def answers_ping(self, timeout):
        return ping(timeout=timeout, unix_socket_path=self.sock_path)

    def admin_connection(self, timeout):
        return redis.Redis(unix_socket_path=self.sock_path, socket_timeout=timeout)

    def new_client(self, timeout):
        return UnixClient(self.sock_path, timeout=timeout)

    def pause(self):
        """SIGSTOP: the node goes silent with its sockets open."""
        self.sigstop()
        self.paused = True

    def cont(self):
        self.sigcont()
        self.paused = False

    def kill9(self):
        """SIGKILL on purpose (stop() does not report it); its objects are gone."""
        if self.paused:
            self.cont()
        self.sigkill()

    def restart(self):
        """Start a new incarnation after kill9() (fails the test if it does not come
        up); returns self."""
        assert not self.alive(), f"{self.label} is still running"
        start_nodes([self])
        self.killed = False
        return self


class NetnsDirectory(DirectoryRedis):
    """The directory: a plain redis-server in link's namespace on <address>:6379, and on a
    unix socket for the test. restart() comes back empty, flushall() empties it live."""

    def __init__(self, link, workdir=None, start_timeout=60.0):
        super().__init__(workdir=workdir, start_timeout=start_timeout)
        self.link = link
        self.port = REDIS_PORT
        self.sock_path = os.path.join(self.workdir, "redis.sock")
        self.restarts = 0

    @property
    def addr(self):
        return f"{self.link.addr}:{self.port}"

    def _spawn(self):
        argv = [REDIS_SERVER, "--port", str(self.port), "--bind", f"{self.link.addr} 127.0.0.1",
                "--protected-mode", "no", "--save", "", "--appendonly", "no",
                "--dir", self.workdir, "--unixsocket", self.sock_path,
                "--unixsocketperm", "700"]
        self.proc = _spawn_in(self.link, argv, self.log_path, self.workdir, preload=False)

    def _wait_ready(self):
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            if ping(timeout=1.0, unix_socket_path=self.sock_path):
                return True
            time.sleep(0.02)
        return False

    def client(self):
        return redis.Redis(unix_socket_path=self.sock_path, socket_timeout=5)

    def restart(self):
        """SIGKILL and start again, empty, on the same address."""
        self.stop()
        self.start()
        self.restarts += 1

    def flushall(self):
        c = self.client()
        try:
            c.flushall()
        finally:
            c.close()

    def log_tail(self, n=30):
        return "\n".join(read_log(self.log_path).splitlines()[-n:])


class NetnsCluster:
    """N nodes ("n1" ... "nN") and a directory, each in a namespace of its own on one
    lab. start() builds the lab, starts the directory and the nodes and waits until
    every node is registered; stop() shuts the nodes down, checks what they left
    (NetnsNode.stop: deaths not inflicted, sanitizer and crash reports, arena files)
    and removes the lab. Returns the problems as one report string ("" when none)."""

    def __init__(self, n, rate=None, secret="s3cret", memory="128mb", heartbeat=250,
                 node_ttl=1500, fetch_timeout=30000, extra_args=(), register_timeout=30.0,
                 names=None, burst="256kb", latency="200ms", node_args=None,
                 node_memory=None):
        """rate, burst, latency: each link's tbf (rate None: unlimited). names: the
        nodes' names (default n1..nN). extra_args: module arguments of every node;
        node_args: {name: module arguments} added for some of them; node_memory:
        {name: arena size} for those whose arena is not `memory`."""
        self.n = n
        self.lab = NetnsLab(rate=rate, burst=burst, latency=latency)
        self.secret = secret
        self.memory = memory
        self.heartbeat = heartbeat
        self.node_ttl = node_ttl
        self.fetch_timeout = fetch_timeout
        self.extra_args = list(extra_args)
        self.register_timeout = register_timeout
        self.directory = None
        self.nodes = {}
        self.names = list(names) if names else [f"n{i}" for i in range(1, n + 1)]
        assert len(self.names) == n
        self.node_args = dict(node_args or {})
        self.node_memory = dict(node_memory or {})

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def __getitem__(self, name):
        return self.nodes[name]

    def start(self):
        """Build the lab, start the directory and the nodes, wait until every node is
        registered; returns self. On any failure everything made is removed (stop())
        before the error goes on."""
        try:
            self.lab.create()
            dlink = self.lab.add("dir", index=250)
            self.directory = NetnsDirectory(dlink).start()
            for name in self.names:
                link = self.lab.add(name)
                self.nodes[name] = NetnsNode(
                    name, link, self.directory.addr, secret=self.secret,
                    memory=self.node_memory.get(name, self.memory),
                    heartbeat=self.heartbeat, node_ttl=self.node_ttl,
                    fetch_timeout=self.fetch_timeout,
                    extra_args=self.extra_args + list(self.node_args.get(name, ())))
            start_nodes(list(self.nodes.values()))
            seen = self.wait_registered()
            if seen is not None:
                raise NetnsError(f"nodes not registered within {self.register_timeout:.0f}s: "
                                 f"the directory lists {seen}, expected {sorted(self.names)}")
        except BaseException:
            self.stop()
            raise
        return self

    def wait_registered(self, names=None, timeout=None):
        """Wait (bounded) until OBJ.NODES on the first live node lists names (default:
        every node); returns None, or what it lists instead."""
        want = sorted(names or self.names)
        deadline = time.monotonic() + (timeout or self.register_timeout)
        seen = None
        while time.monotonic() < deadline:
            live = [n for n in self.nodes.values() if n.alive() and not n.paused]
            try:
                c = live[0].new_client(5.0)
                try:
                    seen = sorted(nodes(c))
                finally:
                    c.close()
            except Exception as e:
                seen = repr(e)
            if seen == want:
                return None
            time.sleep(0.1)
        return seen

    def client(self, name, timeout=None):
        """A raw-reply client of node name (closed at stop())."""
        return self.nodes[name].client(timeout)

    def all_stats(self):
        """{node name: OBJ.STATS} of every live, running node."""
        return {name: n.stats() for name, n in self.nodes.items() if n.alive() and not n.paused}

    def stop(self):
        """Stop the nodes and the directory and remove the lab; the report (see class)."""
        report = stop_servers((f"node {name}", self.nodes[name]) for name in reversed(self.names)
                              if self.nodes.get(name) is not None)
        if self.directory is not None:
            self.directory.stop()
        report += self.lab.close()
        if self.directory is not None and not report:
            self.directory.cleanup()
        return "\n\n".join(report)
