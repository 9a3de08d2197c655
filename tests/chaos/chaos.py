"""The chaos run: objstore nodes in network namespaces (tests/lib/netns.py) under random
faults, driven by clients that check every answer against a model of what must exist.

A run is a sequence of epochs. In each, client threads put, create/write/seal (and
abort), fetch (with and without FROM), get, pin/read/release and delete objects while
the fault injector kills nodes with SIGKILL and restarts them, restarts or FLUSHALLs
the directory, cuts links and pauses nodes with SIGSTOP. Then every fault is healed,
the clients stop, and the quiescent cluster is checked. Invariants (issue 20, "A chaos
test"):

  - never a wrong byte: an object's data derives from its id and generation (its
    metadata names the generation); every read is compared with what it must be;
  - never a partial object: an object being written is invisible to EXISTS, LIST and
    GET (no read ever shows anything but a whole generation);
  - every object whose owner is alive and reachable is fetchable (through the
    directory, without FROM) after faults heal: within a few attempts, once node-ttl
    plus a few seconds have passed (check_fetchable);
  - no client waits past its TIMEOUT (plus slack) while the node it talks to answers
    others: not paused, and answering a PING sent after the deadline (timed);
  - after quiescence: arena_used equals the sum of the listed objects' blocks, no
    object is created, pinned or being deleted, no client is blocked, the Redis
    client count and the transfer sockets are back at their idle levels (every close
    completed), and each node holds exactly the primaries the model says it holds.

Every check is a bound on progress, never on the clock: a busy machine (CI with other
work beside it, the sanitizer build) makes a run slower, never red. The wall-clock
bounds that remain (120 s for a client's operation, quiesce_seconds, the heal check's
hang-stopping bound) only stop a hang, far past what a working node takes.
  - no crash but the inflicted ones (the sanitizer build in CI: OBJSTORE_BUILD,
    OBJSTORE_PRELOAD);
  - no object with two copies is lost when one node at a time dies: a share of the puts
    ask for REPLICAS 2 (ids of their own, never re-used, deleted with OBJ.PURGE); one
    acknowledged with 2 must stay fetchable after the heal whoever dies, unless a death
    took its last counting copy. Before each kill the live nodes are asked (OBJ.INFO)
    which of them hold a primary or protected copy of each such object; one that only
    the victim holds (two deaths before its repair, or its other copy on a paused node)
    is let go, and counted (durable_scan). Their ownership moves, so the per-node
    holdings check leaves them out.

Violations name the issue item they belong to when one is known. The report (counts of
operations and outcomes, faults, violations) is printed and written as JSON.

As a script: tests/chaos/chaos.py [--seconds S] [--seed N] [--json PATH]; the pytest
entry is tests/chaos/test_chaos.py (make test-chaos); bench/chaos.sh runs it long.
"""

import argparse
import json
import os
import random
import shutil
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))

import redis  # noqa: E402
from redis.exceptions import ConnectionError as RedisConnectionError  # noqa: E402
from redis.exceptions import ResponseError  # noqa: E402
from redis.exceptions import TimeoutError as RedisTimeoutError  # noqa: E402

from netns import NetnsCluster, netns_problem  # noqa: E402
from objhelpers import pairs, stats, to_int, to_str  # noqa: E402

ALIGN = 64
# What a fetch may answer under faults. PROTOCOL ("the peer sent a different size than
# the directory") comes from a lookup that read the entry of one generation of a
# re-created id while a holder of another answered; it is counted, and the check after
# the heal judges whether the directory converged (report_unfetchable).
FETCH_ERRORS = {"NOTFOUND", "UNAVAILABLE", "TIMEOUT", "CHECKSUM", "OOM", "PROTOCOL"}
NET_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)


class Config:
    """Everything a run depends on; the environment (CHAOS_*) overrides the defaults."""

    def __init__(self, **kw):
        self.seconds = float(os.environ.get("CHAOS_SECONDS", 180))
        self.seed = int(os.environ.get("CHAOS_SEED") or random.SystemRandom().randrange(1 << 31))
        self.nodes = int(os.environ.get("CHAOS_NODES", 5))
        self.clients = int(os.environ.get("CHAOS_CLIENTS", 5))
        self.ids_per_client = 30
        self.rate = os.environ.get("CHAOS_RATE", "200mbit")
        self.memory = "128mb"
        self.heartbeat = 250
        self.node_ttl = 1500
        self.epoch_seconds = float(os.environ.get("CHAOS_EPOCH_SECONDS", 25))
        self.fault_gap = (0.5, 2.5)  # seconds between fault starts
        self.max_faults = 2  # at once
        self.slack = float(os.environ.get("CHAOS_SLACK", 3.0))  # seconds past a TIMEOUT
        self.heal_slack = float(os.environ.get("CHAOS_HEAL_SLACK", 5.0))  # past node-ttl
        # Hang-stopping bounds of the checks after the heal (never their verdict; see
        # check_fetchable and check_quiescent).
        self.quiesce_seconds = float(os.environ.get("CHAOS_QUIESCE_SECONDS", 150))
        self.heal_tries = 5  # failed fetches of one object before it is reported
        self.heal_fetch_ms = 5000  # TIMEOUT of each of them
        self.heal_hang_seconds = 60.0  # plus 2 s per live object
        self.register_seconds = 60.0
        self.max_ops_per_epoch = 200000  # per client: a bound besides time
        self.json_path = os.environ.get("CHAOS_REPORT")
        # Re-create deleted ids (new generations of one id), as the issue asks. 0: every
        # put takes a fresh id, which keeps generations out of the way of the other
        # invariants (to tell a defect of re-created ids from one of the rest).
        self.reuse_ids = os.environ.get("CHAOS_REUSE_IDS", "1") != "0"
        # The share of puts made with REPLICAS 2 (and WAIT replica_wait_ms), at most
        # durable_per_client of them live per client; repair runs every repair_interval.
        self.replicas_share = float(os.environ.get("CHAOS_REPLICAS_SHARE", 0.3))
        self.durable_per_client = 10
        self.replica_wait_ms = 2000
        self.repair_interval = 1000
        for k, v in kw.items():
            setattr(self, k, v)


# ---- content: derived from id and generation ------------------------------------------

def content(oid, gen, size):
    """The only bytes generation gen of oid may ever hold."""
    return random.Random(b"%s/%d" % (oid, gen)).randbytes(size)


def meta_of(gen):
    return b"g%d" % gen


def gen_of(meta):
    """The generation a metadata value names, or None."""
    if isinstance(meta, bytes) and meta[:1] == b"g" and meta[1:].isdigit():
        return int(meta[1:])
    return None


def block_size(size, meta_size):
    """Arena bytes of one object: data and metadata rounded up to the allocator's unit."""
    need = max(size + meta_size, 1)
    return (need + ALIGN - 1) // ALIGN * ALIGN


def code_of(x):
    """The code word of an error (exception or nested error reply)."""
    words = str(x).split()
    return words[0] if words else "?"


def connected_incarnation(n, client):
    """The incarnation of node n that client talks to: read after its first answer, as
    a restart counts the new incarnation before the new process listens (read before,
    a client made during a restart would be taken for the killed one's)."""
    client.execute_command("PING")
    return n.incarnation


# ---- the model ----------------------------------------------------------------------------

class Obj:
    """A primary the model believes exists: generation, size, owner and its incarnation;
    want, its replica count, and durable: acknowledged with two copies or more (it must
    outlive one death; its owner may then be another node than `node`)."""

    __slots__ = ("oid", "gen", "size", "node", "inc", "since", "want", "durable")

    def __init__(self, oid, gen, size, node, inc, want=1, durable=False):
        self.oid, self.gen, self.size, self.node, self.inc = oid, gen, size, node, inc
        self.want, self.durable = want, durable
        self.since = time.monotonic()


class Model:
    """What must exist. gens: every generation ever written per id (a read may show any of
    them: replicas outlive deletes); live: the primaries that exist now."""

    def __init__(self, is_current):
        self.lock = threading.Lock()
        self.gens = {}  # oid -> {gen: size}
        self.live = {}  # oid -> Obj
        self.is_current = is_current  # (node, incarnation) -> whether it still runs

    def new_gen(self, oid, size):
        with self.lock:
            g = self.gens.setdefault(oid, {})
            gen = max(g, default=0) + 1
            g[gen] = size
            return gen

    def size_of(self, oid, gen):
        with self.lock:
            return self.gens.get(oid, {}).get(gen)

    def add(self, obj):
        """obj exists now, unless its node was killed since (node_lost has run, or will
        and removes it)."""
        with self.lock:
            if self.is_current(obj.node, obj.inc):
                self.live[obj.oid] = obj

    def drop(self, oid):
        with self.lock:
            return self.live.pop(oid, None)

    def get(self, oid):
        with self.lock:
            return self.live.get(oid)

    def snapshot(self):
        with self.lock:
            return list(self.live.values())

    def node_lost(self, node, exempt=()):
        """A node died: its primaries are gone, but for the durable objects (kept: they
        live on elsewhere), except those of exempt (ids: their last copy was there).
        Returns how many went."""
        exempt = set(exempt)
        with self.lock:
            gone = [o for o, v in self.live.items()
                    if (v.node == node and not v.durable) or o in exempt]
            for o in gone:
                del self.live[o]
            return len(gone)


# ---- the run ------------------------------------------------------------------------------

class Pulse:
    """A thread that PINGs every node in turn on connections of its own while the clients
    run, and keeps when each PING was sent and answered: the evidence that a node was
    answering at a moment (ChaosClient.timed). Stopped before the checks after the heal
    (its connections would count against the idle client levels)."""

    def __init__(self, chaos):
        self.chaos = chaos
        self.lock = threading.Lock()
        self.seen = {}  # node -> [(sent, answered)], oldest first
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        conns = {}  # node -> (client, incarnation)
        try:
            while not self.stopping.is_set():
                for name in self.chaos.cluster.names:
                    self.ping(name, conns)
                self.stopping.wait(0.1)
        finally:
            for c, _ in conns.values():
                c.close()

    def ping(self, name, conns):
        n = self.chaos.node(name)
        if n.killed or n.paused:
            return
        c = conns.get(name)
        try:
            if c is None or c[1] != n.incarnation:
                if c is not None:
                    c[0].close()
                c = conns[name] = (n.new_client(2.0), n.incarnation)
            sent = time.monotonic()
            c[0].execute_command("PING")
            answered = time.monotonic()
        except Exception:  # killed, paused or restarting meanwhile: no evidence either way
            if c is not None:
                c[0].close()
            conns.pop(name, None)
            return
        with self.lock:
            seen = self.seen.setdefault(name, [])
            seen.append((sent, answered))
            del seen[:-2000]

    def answered_between(self, name, t0, t1):
        """The first PING to node name sent at t0 or later and answered by t1, as (sent,
        answered), or None."""
        with self.lock:
            seen = list(self.seen.get(name, ()))
        return next(((s, a) for s, a in seen if s >= t0 and a <= t1), None)

    def stop(self):
        self.stopping.set()
        self.thread.join(30)


class Chaos:
    """One chaos run over a NetnsCluster; run() returns the report (a dict)."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)
        self.model = Model(self.node_is_current)
        self.cluster = None
        self.lock = threading.Lock()
        self.ops = {}  # op -> outcome -> count
        self.faults = {}  # kind -> count
        self.violations = []
        self.violation_count = 0
        self.relays = []  # per epoch: the transfer counters of note_relays
        self.pulse = None  # the epoch's Pulse
        self.settling = []  # per epoch: how long the checks after the heal waited
        self.pauses = {}  # node -> [[start, end or None]]
        self.kills = {}  # node -> [time of each inflicted kill]
        self.dead = set()  # (node, incarnation) killed or crashed
        self.epoch = 0
        self.epoch_faults = []
        self.missing_serial = 0
        # Objects put with REPLICAS 2: acknowledged with 2, and let go at a kill (their
        # last copy was on the victim), per durable_scan.
        self.durable = {"acknowledged": 0, "exempt at a kill": 0, "kills scanned": 0}
        self.baseline_clients = {}
        self.t0 = time.monotonic()
        self.log_lines = []

    # ---- bookkeeping ------------------------------------------------------------------
    def count(self, op, outcome):
        with self.lock:
            d = self.ops.setdefault(op, {})
            d[outcome] = d.get(outcome, 0) + 1

    def violate(self, kind, detail, item=None):
        with self.lock:
            self.violation_count += 1
            v = {"t": round(time.monotonic() - self.t0, 3), "epoch": self.epoch,
                 "kind": kind, "detail": detail}
            if item:
                v["issue_item"] = item
            if len(self.violations) < 300:
                self.violations.append(v)
        self.say(f"VIOLATION {kind}: {detail}" + (f" [issue 20 item {item}]" if item else ""))

    def say(self, text):
        line = f"[chaos {time.monotonic() - self.t0:7.1f}s] {text}"
        print(line, flush=True)
        with self.lock:
            self.log_lines.append(line)

    def paused_during(self, node, t0, t1):
        for start, end in self.pauses.get(node, []):
            if start <= t1 and (end is None or end >= t0):
                return True
        return False

    def node(self, name):
        return self.cluster[name]

    def node_is_current(self, name, inc):
        """Whether incarnation inc of node name runs (it may still be starting)."""
        return (name, inc) not in self.dead and self.cluster[name].incarnation == inc

    def verify(self, oid, data, meta, where, item=None):
        """data and meta read at `where` must be a whole generation of oid; item: the
        issue item a failure belongs to."""
        gen = gen_of(meta)
        size = self.model.size_of(oid, gen) if gen is not None else None
        if size is None:
            self.violate("wrong bytes", f"{where}: {oid!r} has metadata {meta!r:.40}, not a "
                         "generation ever written", item)
            return False
        if len(data) != size:
            self.violate("partial object" if len(data) < size else "wrong bytes",
                         f"{where}: {oid!r} generation {gen} is {len(data)} bytes, "
                         f"written {size}", item)
            return False
        want = content(oid, gen, size)
        if data != want:
            at = next(i for i in range(size) if data[i] != want[i])
            self.violate("wrong bytes", f"{where}: {oid!r} generation {gen} ({size} bytes) "
                         f"differs from byte {at} on", item)
            return False
        return True

    # ---- the run ------------------------------------------------------------------------
    def run(self):
        cfg = self.cfg
        self.say(f"seed {cfg.seed}: {cfg.nodes} nodes, {cfg.clients} clients, "
                 f"{cfg.seconds:.0f} s, links {cfg.rate or 'unlimited'}")
        self.cluster = NetnsCluster(cfg.nodes, rate=cfg.rate, memory=cfg.memory,
                                    heartbeat=cfg.heartbeat, node_ttl=cfg.node_ttl,
                                    extra_args=["repair-interval", str(cfg.repair_interval)])
        stop_report = ""
        error = None
        try:
            self.cluster.start()
            for name in self.cluster.names:
                self.baseline_clients[name] = self.redis_clients(name)
            clients = [ChaosClient(self, k) for k in range(cfg.clients)]
            end = self.t0 + cfg.seconds
            while True:
                self.epoch += 1
                left = end - time.monotonic()
                chaos_time = min(cfg.epoch_seconds, max(left, 3.0))
                self.run_epoch(clients, chaos_time)
                if time.monotonic() >= end - 2:
                    break
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException:  # also the launcher's pytest.fail (a node that did not start)
            error = traceback.format_exc()
            self.violate("harness error", error.splitlines()[-1])
            self.say(error)
        finally:
            self.keep_logs()
            stop_report = self.cluster.stop()
        if stop_report:
            self.violate("crash or sanitizer report", stop_report[:4000])
        return self.report(error)

    def run_epoch(self, clients, chaos_time):
        """Clients and faults for chaos_time seconds, then heal, stop and check."""
        self.epoch_faults = []
        stop = threading.Event()
        self.pulse = Pulse(self)
        threads = [threading.Thread(target=c.run_epoch, args=(stop, self.epoch), daemon=True)
                   for c in clients]
        for t in threads:
            t.start()
        self.inject_faults(time.monotonic() + chaos_time)
        stop.set()
        healed = self.heal_all()
        deadline = time.monotonic() + 120
        for c, t in zip(clients, threads):
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                self.violate("client stuck", f"client {c.k} did not finish its operation "
                             "within 120 s of the end of the epoch")
        self.pulse.stop()
        self.check_crashes()
        self.check_fetchable(healed)
        self.check_quiescent()
        self.note_relays()
        self.say(f"epoch {self.epoch} done: faults {self.epoch_faults}, "
                 f"live objects {len(self.model.snapshot())}, violations "
                 f"{self.violation_count}")

    def note_relays(self):
        """The broadcast machinery the epoch used, summed over the live nodes (since each
        one's last start): the report shows that relays ran under the faults."""
        keys = ("transfer_redirects", "transfer_relay_follows", "transfer_relayed",
                "transfer_range_resumes")
        try:
            per_node = self.cluster.all_stats().values()
        except Exception as e:  # a node that went away meanwhile: noted, not fatal
            self.say(f"transfer counters not read: {e}")
            return
        self.relays.append({k: sum(int(st.get(k, 0)) for st in per_node) for k in keys})

    # ---- faults --------------------------------------------------------------------------
    def inject_faults(self, until):
        """Start faults at random gaps and end each after its duration, until `until`;
        also watch for deaths nobody inflicted."""
        active = []  # (end time, kind, target)
        next_start = time.monotonic() + self.rng.uniform(*self.cfg.fault_gap)
        while time.monotonic() < until:
            now = time.monotonic()
            for f in [f for f in active if f[0] <= now]:
                active.remove(f)
                self.end_fault(f[1], f[2])
            if now >= next_start and len(active) < self.cfg.max_faults:
                busy = {f[2] for f in active}
                f = self.start_fault(busy)
                if f is not None:
                    active.append(f)
                next_start = now + self.rng.uniform(*self.cfg.fault_gap)
            self.check_crashes()
            time.sleep(0.05)
        for f in active:
            self.end_fault(f[1], f[2])

    def start_fault(self, busy):
        kinds = [("kill9", 3), ("cut", 3), ("pause", 3), ("dir_restart", 1),
                 ("dir_flushall", 1)]
        kind = self.rng.choices([k for k, _ in kinds], [w for _, w in kinds])[0]
        if kind.startswith("dir"):
            if "dir" in busy:
                return None
            target = "dir"
        else:
            free = [n for n in self.cluster.names if n not in busy]
            if not free:
                return None
            target = self.rng.choice(free)
        with self.lock:
            self.faults[kind] = self.faults.get(kind, 0) + 1
        self.epoch_faults.append(f"{kind}:{target}")
        self.say(f"fault {kind} {target}")
        if kind == "kill9":
            n = self.node(target)
            exempt = self.durable_scan(target)
            self.kills.setdefault(target, []).append(time.monotonic())
            self.dead.add((target, n.incarnation))
            n.kill9()
            lost = self.model.node_lost(target, exempt)
            self.say(f"  {target} killed: {lost} primaries gone with it ({len(exempt)} of "
                     "them with two copies, whose other copy no live node held)")
            return (time.monotonic() + self.rng.uniform(0.3, 3.0), kind, target)
        if kind == "cut":
            self.cluster.lab.cut(self.node(target).link)
            return (time.monotonic() + self.rng.uniform(0.5, 5.0), kind, target)
        if kind == "pause":
            self.pauses.setdefault(target, []).append([time.monotonic(), None])
            self.node(target).pause()
            return (time.monotonic() + self.rng.uniform(0.3, 3.0), kind, target)
        if kind == "dir_restart":
            self.cluster.directory.stop()
            return (time.monotonic() + self.rng.uniform(0.3, 3.0), kind, target)
        self.cluster.directory.flushall()
        return (time.monotonic() + 0.5, kind, target)

    def end_fault(self, kind, target):
        if kind == "kill9":
            self.node(target).restart()
            self.say(f"  {target} restarted (incarnation {self.node(target).incarnation})")
        elif kind == "cut":
            self.cluster.lab.heal(self.node(target).link)
        elif kind == "pause":
            self.node(target).cont()
            self.pauses[target][-1][1] = time.monotonic()
        elif kind == "dir_restart":
            self.cluster.directory.start()

    def heal_all(self):
        """Every fault is over (they were ended by inject_faults); returns the time."""
        for name in self.cluster.names:
            n = self.node(name)
            if n.link.cut:
                self.cluster.lab.heal(n.link)
            if n.paused:
                n.cont()
        if not self.cluster.directory.alive():
            self.cluster.directory.start()
        return time.monotonic()

    def durable_scan(self, victim):
        """Before victim dies (or after it crashed): the ids of the durable objects no
        other live, running node holds a counting copy (primary or protected) of, as
        their OBJ.INFO says. Their last copy goes with victim: they are let go (counted),
        while every other durable object must survive this death. A node that does not
        answer (paused, or too slow for 10 s) holds nothing here, so its copies never
        make an object look safer than it is. Can't fail."""
        objs = [o for o in self.model.snapshot() if o.durable]
        if not objs:
            return []
        held = set()
        for name in self.cluster.names:
            n = self.node(name)
            if name == victim or n.killed or n.paused or not n.alive():
                continue
            try:
                c = n.new_client(10.0)
                try:
                    p = c.pipeline(transaction=False)
                    for o in objs:
                        p.execute_command("OBJ.INFO", o.oid)
                    replies = p.execute(raise_on_error=False)
                finally:
                    c.close()
            except NET_ERRORS:
                continue
            for o, r in zip(objs, replies):
                if isinstance(r, Exception):
                    continue
                d = pairs(r)
                if (to_str(d.get("state")) == "sealed"
                        and to_str(d.get("copy")) in ("primary", "protected")):
                    held.add(o.oid)
        exempt = [o.oid for o in objs if o.oid not in held]
        with self.lock:
            self.durable["kills scanned"] += 1
            self.durable["exempt at a kill"] += len(exempt)
        return exempt

    def check_crashes(self):
        """A node that died without being killed is a crash: report it and restart it."""
        for name in self.cluster.names:
            n = self.node(name)
            if not n.killed and n.proc is not None and n.proc.poll() is not None:
                self.violate("crash", f"{name} died with status {n.proc.returncode}; log:\n"
                             f"{n.log_tail(40)}")
                self.dead.add((name, n.incarnation))
                n.killed = True
                self.model.node_lost(name, self.durable_scan(name))
                n.restart()

    # ---- checks after healing ----------------------------------------------------------
    def check_fetchable(self, healed):
        """Every live primary is fetchable through the directory (no FROM) from another
        node once the faults are healed. A bound on attempts, not on the clock: round
        after round every object not fetched yet is fetched once more (OBJ.FETCH TIMEOUT
        heal_fetch_ms) from a node picked at random, and one is reported only after it
        has failed heal_tries attempts, at least node-ttl + heal_slack seconds of this
        check have passed (the time the directory is given to converge, on the check's
        own clock: a busy machine makes the check longer, never failing), and a whole
        round fetched nothing (while objects still come in, it is converging). A
        hang-stopping bound scaled to the work (heal_hang_seconds + 2 s per object)
        ends a check that is stuck; what is left then is reported with its attempts."""
        cfg = self.cfg
        why = self.cluster.wait_registered(timeout=cfg.register_seconds)
        if why is not None:
            self.violate("node not registered", f"OBJ.NODES lists {why} after the heal")
        pending = {o.oid: o for o in self.model.snapshot()}
        t0 = time.monotonic()
        settled = t0 + cfg.node_ttl / 1000.0 + cfg.heal_slack
        hang = t0 + cfg.heal_hang_seconds + 2.0 * len(pending)
        tries = dict.fromkeys(pending, 0)
        last = {}
        progress = True  # the last round fetched something: the cluster is converging

        def done():
            now = time.monotonic()
            return now >= hang or (now >= settled and not progress and
                                   all(tries[oid] >= cfg.heal_tries for oid in pending))

        while pending and not done():
            before = len(pending)
            by_node = {}
            for o in pending.values():
                others = [n for n in self.cluster.names if n != o.node]
                by_node.setdefault(self.rng.choice(others), []).append(o)
            for name, objs in by_node.items():
                c = self.node(name).new_client(cfg.heal_fetch_ms / 1000.0 + 60.0)
                try:
                    for o in objs:
                        if time.monotonic() >= hang:
                            break
                        tries[o.oid] += 1
                        self.fetch_after_heal(c, name, o, pending, last)
                finally:
                    c.close()
            progress = len(pending) < before
            if pending:
                time.sleep(0.2)
        self.settling.append({"epoch": self.epoch, "objects": len(tries),
                              "heal_check_s": round(time.monotonic() - t0, 1),
                              "most_tries": max(tries.values(), default=0)})
        if pending:
            if time.monotonic() >= hang:
                for oid in pending:
                    last[oid] = (f"{last.get(oid, '?')} (stuck: {tries[oid]} attempts in the "
                                 f"hang-stopping bound of {hang - t0:.0f} s)")
            durable = {oid: o for oid, o in pending.items() if o.durable}
            for oid, o in durable.items():
                self.violate("lost object with two copies",
                             f"{oid!r} generation {o.gen}, put with REPLICAS 2 and "
                             f"acknowledged with two copies, not fetchable after the heal "
                             f"({tries[oid]} attempts: {last.get(oid, '?')}; epoch faults: "
                             f"{self.epoch_faults})")
            rest = {oid: o for oid, o in pending.items() if not o.durable}
            if rest:
                self.report_unfetchable(rest, last, tries)

    def fetch_after_heal(self, c, name, o, pending, last, again=True):
        """One id per OBJ.FETCH: a batch shares its fate when one transfer's failure
        closes the connection the others ride on (see the report of this suite). A
        stale replica found on the fetching node is dropped and the fetch made again
        at once (again), as a client would."""
        try:
            r = c.execute_command("OBJ.FETCH", o.oid, "TIMEOUT", self.cfg.heal_fetch_ms)[0]
        except ResponseError as e:
            r = e
        if isinstance(r, Exception):
            last[o.oid] = f"{name}: {r}"
            return
        try:
            data, meta = c.execute_command("OBJ.GET", o.oid, "WITHMETA")
        except ResponseError as e:
            # The copy went between the fetch and the read (a replica the node dropped
            # as stale once the directory answered again, late on a busy machine): not
            # fetched yet, so the object stays pending and the check tries again.
            last[o.oid] = f"{name}: fetched, then gone before the read ({e})"
            return
        if not self.verify(o.oid, data, meta, f"fetch after heal on {name}"):
            pending.pop(o.oid, None)
        elif gen_of(meta) != o.gen:
            # A replica of an earlier generation of the id (made before a delete and a
            # new put): not a copy of this primary. Drop it and fetch again.
            self.count("fetch after heal", "stale replica dropped")
            c.execute_command("OBJ.DEL", o.oid)
            last[o.oid] = f"{name}: held generation {gen_of(meta)}"
            if again:
                self.fetch_after_heal(c, name, o, pending, last, again=False)
        else:
            self.count("fetch after heal", "OK")
            pending.pop(o.oid, None)

    def report_unfetchable(self, pending, last, tries):
        """One violation per cause of the objects still not fetchable, tagged with the
        issue item (or the new defect) it belongs to where the cause is known."""
        lost = any(f.startswith(("dir_flushall", "dir_restart")) for f in self.epoch_faults)
        groups = {}
        for oid in pending:
            why = last.get(oid, "?")
            if "held generation" in why:
                cause = ("the fetching node kept answering with its replica of an earlier "
                         "generation of the id", None)
            elif "different size than the directory" in why or "CHECKSUM" in why:
                cause = ("the directory's size or checksum for the id is not its live "
                         "primary's (another generation's entry)", None)
            elif "not in the directory" in why:
                cause = ("the directory has no entry for the id while its owner holds it: "
                         "lost " + ("in a FLUSHALL or a directory restart and not published "
                                    "again, or " if lost else "")
                         + "removed by a late write for another copy of the id",
                         7 if lost else None)
            else:
                cause = (why.split(":", 1)[-1].strip()[:80], None)
            groups.setdefault(cause, []).append(oid)
        for (cause, item), oids in groups.items():
            sample = "; ".join(f"{o!r} ({last.get(o, '?')}; {self.where_is(pending[o])})"
                               for o in oids[:4])
            self.violate("not fetchable after heal",
                         f"{len(oids)} live primaries not fetchable after the heal, in at "
                         f"least {min(tries[o] for o in oids)} attempts of TIMEOUT "
                         f"{self.cfg.heal_fetch_ms} ms over at least {self.cfg.node_ttl} ms + "
                         f"{self.cfg.heal_slack:.0f} s: {cause} "
                         f"(epoch faults: {self.epoch_faults}); e.g. {sample}", item=item)

    def where_is(self, o):
        """What the owner and the directory say of an unfetchable primary, for the
        report: the owner's copy, its directory counters, the directory's keys."""
        parts = [f"owner {o.node} incarnation {o.inc}, put "
                 f"{time.monotonic() - o.since:.1f} s ago"]
        try:
            c = self.node(o.node).new_client(10.0)
            try:
                try:
                    inf = pairs(c.execute_command("OBJ.INFO", o.oid))
                    parts.append(f"owner holds it (replica {to_int(inf['replica'])})")
                except ResponseError as e:
                    parts.append(f"owner: OBJ.INFO {e}")
                st = stats(c)
                parts.append(", ".join(f"{k[len('directory_'):]} {v}" for k, v in st.items()
                                       if k.startswith("directory_")))
            finally:
                c.close()
        except NET_ERRORS as e:
            parts.append(f"owner unreachable: {e!r:.60}")
        try:
            d = self.cluster.directory.client()
            try:
                key = b"objstore:{" + o.oid + b"}"
                meta = d.hgetall(key + b":meta")
                locs = sorted(d.smembers(key + b":loc"))
                reg = d.exists(b"objstore:node:" + o.node.encode())
                parts.append(f"directory: meta {meta or 'none'}, locations {locs}, "
                             f"{o.node} registered {bool(reg)}")
            finally:
                d.close()
        except NET_ERRORS as e:
            parts.append(f"directory unreachable: {e!r:.60}")
        return "; ".join(parts)

    def redis_clients(self, name):
        c = self.node(name).admin_connection(10)
        try:
            return int(c.info("clients")["connected_clients"])
        finally:
            c.close()

    def node_accounting(self, name):
        """(problems, listed objects {oid: (gen, replica)}) of node name, quiescent."""
        n = self.node(name)
        c = n.new_client(60.0)
        try:
            st = stats(c)
            listed = {}
            expected_used = 0
            cursor = b"0"
            for _ in range(100000):
                cursor, ids = c.execute_command("OBJ.LIST", cursor, "COUNT", 500)
                for oid in ids:
                    try:
                        inf = pairs(c.execute_command("OBJ.INFO", oid))
                    except ResponseError:
                        continue  # deleted since (no client runs: should not happen)
                    size, msize = to_int(inf["size"]), to_int(inf["meta_size"])
                    expected_used += block_size(size, msize)
                    # want: the replica count (their ownership moves: no holdings check)
                    listed[oid] = (size, to_int(inf["replica"]), to_int(inf["replicas"]))
                if cursor in (b"0", 0):
                    break
            problems = []
            for f in ("objects_created", "objects_pinned", "objects_deleting",
                      "blocked_clients"):
                if st[f] != 0:
                    problems.append(f"{f} {st[f]}")
            if st["objects"] != len(listed):
                problems.append(f"objects {st['objects']} but OBJ.LIST lists {len(listed)}")
            if st["arena_used"] != expected_used:
                problems.append(f"arena_used {st['arena_used']} but the listed objects take "
                                f"{expected_used}")
            clients = int(n.admin_connection(10).info("clients")["connected_clients"])
            # the admin connection itself and the stats client are counted too
            if clients > self.baseline_clients[name] + 1:
                problems.append(f"connected_clients {clients}, idle level "
                                f"{self.baseline_clients[name]} (+1: this check)")
            problems += self.socket_problems(n)
            return problems, listed
        finally:
            c.close()

    def socket_problems(self, n):
        """What keeps node n's transfer sockets from idle: more established than one
        session each way per peer; sockets the node still holds in another state (its
        peer closed, it did not: CLOSE-WAIT); and closes not completed yet (orphans the
        node closed and the kernel is finishing: FIN-WAIT-1/2, CLOSING, LAST-ACK). The
        last settle on the kernel's clock (a FIN lost in a cut is sent again after a
        backed-off timeout; FIN-WAIT-2 lasts up to tcp_fin_timeout), so they are a
        problem only if they outlast check_quiescent's generous bound."""
        xfer = [s for s in n.link.tcp_sockets(owners=True)
                if s[1].endswith(":16379") or s[2].endswith(":16379")]
        est = [s[:3] for s in xfer if s[0] == "ESTAB"]
        held = [s[:3] for s in xfer if s[3] and s[0] not in ("ESTAB", "LISTEN")]
        closing = [s[:3] for s in xfer if not s[3] and s[0] not in ("ESTAB", "LISTEN",
                                                                    "TIME-WAIT")]
        problems = []
        if len(est) > 2 * (self.cfg.nodes - 1):
            problems.append(f"transfer sockets not idle: {len(est)} established (at most "
                            f"{2 * (self.cfg.nodes - 1)}): {est[:8]}")
        if held:
            problems.append(f"transfer sockets the node holds after its peer closed them: "
                            f"{held[:6]}")
        if closing:
            problems.append(f"transfer sockets whose close never completed: {closing[:6]}")
        return problems

    def check_quiescent(self):
        """Idle levels and accounting on every node, then each node's primaries against
        the model, and every listed object's bytes. The levels are polled until they are
        reached: the engine may still be closing what the faults broke, and the kernel
        finishing the closes (socket_problems). quiesce_seconds only stops a hang: it
        is far past what any of them takes when nothing is stuck (tcp_fin_timeout,
        keepalive, a backed-off retransmission), so load cannot fail the check, and a
        level never reached still does."""
        t0 = time.monotonic()
        deadline = t0 + self.cfg.quiesce_seconds
        for name in self.cluster.names:
            while True:
                problems, listed = self.node_accounting(name)
                if not problems or time.monotonic() >= deadline:
                    break
                time.sleep(0.25)
            for p in problems:
                self.violate("not idle after quiescence", f"{name}: {p}")
            self.check_holdings(name, listed)
        if self.settling and self.settling[-1]["epoch"] == self.epoch:
            self.settling[-1]["quiesce_s"] = round(time.monotonic() - t0, 1)

    def check_holdings(self, name, listed):
        n = self.node(name)
        mine = {o.oid: o for o in self.model.snapshot() if o.node == name and o.want == 1}
        c = n.new_client(60.0)
        try:
            for oid, o in mine.items():
                if oid not in listed:
                    self.violate("lost object", f"{name} does not list its primary {oid!r} "
                                 f"generation {o.gen} (put {time.monotonic() - o.since:.1f} s "
                                 "ago)")
                elif listed[oid][1]:
                    self.violate("lost object", f"{name} lists {oid!r} as a replica, the model "
                                 f"has it as its primary generation {o.gen}")
            for oid, (size, replica, want) in listed.items():
                if not replica and oid not in mine and want == 1:
                    self.violate("ghost object", f"{name} holds primary {oid!r} ({size} bytes) "
                                 "that was deleted or never written there")
                try:
                    data, meta = c.execute_command("OBJ.GET", oid, "WITHMETA")
                except ResponseError as e:
                    # A replica may go between the listing and the read (evictable; its
                    # owner's death seen late on a busy machine): lost only if a primary.
                    if replica and str(e).startswith("NOTFOUND") and \
                            c.execute_command("OBJ.EXISTS", oid) == 0:
                        continue
                    kind = "replica" if replica else "primary"
                    self.violate("lost object", f"{name}: OBJ.GET {oid!r} listed ({kind}): {e}")
                    continue
                if self.verify(oid, data, meta, f"quiescent {name}") and oid in mine:
                    if gen_of(meta) != mine[oid].gen:
                        self.violate("wrong bytes", f"{name}: primary {oid!r} is generation "
                                     f"{gen_of(meta)}, the model's is {mine[oid].gen}")
        finally:
            c.close()

    def keep_logs(self):
        """After violations: copy every server's log next to the JSON report."""
        if not self.violation_count or not self.cfg.json_path or self.cluster is None:
            return
        dest = os.path.splitext(self.cfg.json_path)[0] + "-logs"
        os.makedirs(dest, exist_ok=True)
        servers = [(n, self.cluster[n].log_path) for n in self.cluster.names
                   if n in self.cluster.nodes]
        if self.cluster.directory is not None:
            servers.append(("directory", self.cluster.directory.log_path))
        for name, path in servers:
            try:
                shutil.copy(path, os.path.join(dest, f"{name}.log"))
            except OSError:
                pass
        self.say(f"server logs copied to {dest}")

    # ---- report -------------------------------------------------------------------------
    def report(self, error):
        total = sum(sum(d.values()) for d in self.ops.values())
        rep = {
            "seed": self.cfg.seed,
            "seconds": round(time.monotonic() - self.t0, 1),
            "nodes": self.cfg.nodes,
            "clients": self.cfg.clients,
            "rate": self.cfg.rate,
            "epochs": self.epoch,
            "operations": total,
            "operations_by_kind": self.ops,
            "faults": sum(self.faults.values()),
            "faults_by_kind": self.faults,
            "relays_by_epoch": self.relays,
            "settling_by_epoch": self.settling,
            "two_copy_objects": self.durable,
            "violation_count": self.violation_count,
            "violations": self.violations,
            "build": os.environ.get("OBJSTORE_BUILD", ""),
            "preload": os.environ.get("OBJSTORE_PRELOAD", ""),
        }
        if error:
            rep["error"] = error
        return rep


class ChaosClient:
    """One client: owns ids c<k>:<j> (it alone puts, creates and deletes them), reads
    everybody's. One connection per node, re-made after the node restarts."""

    def __init__(self, chaos, k):
        self.chaos = chaos
        self.k = k
        self.own = [b"c%d:%d" % (k, j) for j in range(chaos.cfg.ids_per_client)]
        self.prefix = b"c%d:" % k
        self.fresh = 0
        self.durable_serial = 0  # ids c<k>:r<serial> of the puts with REPLICAS 2
        self.conns = {}  # node -> (client, incarnation)
        self.rng = None

    # ---- connections -------------------------------------------------------------------
    def conn(self, name):
        """(client, the incarnation it talks to) for node name, made again after a
        restart."""
        n = self.chaos.node(name)
        c = self.conns.get(name)
        if c is not None and c[1] == n.incarnation:
            return c
        if c is not None:
            c[0].close()
            del self.conns[name]
        cl = n.new_client(120.0)
        self.conns[name] = (cl, connected_incarnation(n, cl))
        return self.conns[name]

    def close_all(self):
        for cl, _ in self.conns.values():
            try:
                cl.close()
            except Exception:
                pass
        self.conns = {}

    def lost_conn(self, name, inc, op, exc):
        """A connection error: expected when the node was killed since inc; else a
        violation (the node's death is reported by the crash check too)."""
        n = self.chaos.node(name)
        self.close_all_for(name)
        if n.incarnation != inc or n.killed or not n.alive():
            self.chaos.count(op, "node killed")
        else:
            self.chaos.violate("connection lost", f"{op} on {name}: {exc!r}")

    def close_all_for(self, name):
        c = self.conns.pop(name, None)
        if c is not None:
            try:
                c[0].close()
            except Exception:
                pass

    def live_nodes(self):
        return [n for n in self.chaos.cluster.names if not self.chaos.node(n).killed]

    def timed(self, name, op, limit_ms, fn):
        """fn() on node name; checks that its TIMEOUT of limit_ms ended the wait: an
        answer later than limit_ms + slack is a violation only if the node was not paused
        meanwhile and answered a PING sent after the deadline at least slack seconds
        before this answer (Pulse): it was running, and its timer had fired, while this
        client still waited. A late answer with no such PING (the machine too busy to
        run the node) is counted ("late, node not answering either"), never a
        violation. Returns fn's value; raises what fn raised."""
        t0 = time.monotonic()
        try:
            return fn()
        finally:
            t1 = time.monotonic()
            due = t0 + limit_ms / 1000.0
            slack = self.chaos.cfg.slack
            if t1 - due > slack and not self.chaos.paused_during(name, t0, t1):
                ping = self.chaos.pulse.answered_between(name, due, t1 - slack)
                if ping is None:
                    self.chaos.count(op, "late, node not answering either")
                else:
                    self.chaos.violate("waited past TIMEOUT", f"{op} on {name}: TIMEOUT "
                                       f"{limit_ms} ms, answered after {t1 - t0:.2f} s, "
                                       f"while a PING sent {ping[0] - due:.2f} s after the "
                                       f"deadline was answered {t1 - ping[1]:.2f} s before")

    # ---- the loop ------------------------------------------------------------------------
    def run_epoch(self, stop, epoch):
        self.rng = random.Random(self.chaos.cfg.seed * 7919 + epoch * 131 + self.k)
        ops = [(self.op_put, 25), (self.op_create, 10), (self.op_fetch, 30), (self.op_broadcast, 4),
               (self.op_get, 6), (self.op_pin, 10), (self.op_delete, 12),
               (self.op_wait_missing, 3), (self.op_pin_two_generations, 1)]
        fns, weights = [f for f, _ in ops], [w for _, w in ops]
        n = 0
        try:
            while not stop.is_set() and n < self.chaos.cfg.max_ops_per_epoch:
                n += 1
                self.rng.choices(fns, weights)[0]()
        except Exception:
            self.chaos.violate("harness error", f"client {self.k}: "
                               + traceback.format_exc().splitlines()[-1])
            self.chaos.say(traceback.format_exc())
        finally:
            self.close_all()

    def pick_size(self):
        r = self.rng.random()
        if r < 0.05:
            return 0
        if r < 0.5:
            return self.rng.randint(1, 4096)
        if r < 0.85:
            return self.rng.randint(4097, 128 << 10)
        if r < 0.97:
            return self.rng.randint(128 << 10, 1 << 20)
        return self.rng.randint(1 << 20, 3 << 20)

    def free_own_id(self):
        """One of this client's ids that holds no primary now (None: all do)."""
        free = [j for j, o in enumerate(self.own) if self.chaos.model.get(o) is None]
        if not free:
            return None
        j = self.rng.choice(free)
        if not self.chaos.cfg.reuse_ids:
            self.fresh += 1
            self.own[j] = b"c%d:%d.%d" % (self.k, j, self.fresh)
        return self.own[j]

    def is_mine(self, oid):
        return oid.startswith(self.prefix)

    def run_op(self, name, op, fn):
        """fn(client, incarnation) against node name, with connection errors sorted out;
        returns fn's value or None after a connection error."""
        n = self.chaos.node(name)
        inc = n.incarnation
        try:
            c, inc = self.conn(name)
            return fn(c, inc)
        except NET_ERRORS as e:
            self.lost_conn(name, inc, op, e)
            return None

    # ---- operations -----------------------------------------------------------------------
    def op_put(self):
        cfg = self.chaos.cfg
        if self.rng.random() < cfg.replicas_share and sum(
                1 for o in self.chaos.model.snapshot()
                if o.want > 1 and self.is_mine(o.oid)) < cfg.durable_per_client:
            return self.op_put_replicated()
        oid = self.free_own_id()
        nodes = self.live_nodes()
        if oid is None or not nodes:
            return self.op_delete()
        name = self.rng.choice(nodes)
        size = self.pick_size()
        gen = self.chaos.model.new_gen(oid, size)

        def go(c, inc):
            try:
                c.execute_command("OBJ.PUT", oid, content(oid, gen, size), "META", meta_of(gen))
            except ResponseError as e:
                self.put_refused(c, name, oid, e, "put")
                return
            self.chaos.model.add(Obj(oid, gen, size, name, inc))
            self.chaos.count("put", "OK")
        self.run_op(name, "put", go)

    def op_put_replicated(self):
        """PUT with REPLICAS 2 WAIT w of a fresh id (never re-used): answered within its
        WAIT (plus slack) with 1 or 2 copies; acknowledged with 2, the object must outlive
        any one death."""
        nodes = self.live_nodes()
        if not nodes:
            return
        self.durable_serial += 1
        oid = b"c%d:r%d" % (self.k, self.durable_serial)
        name = self.rng.choice(nodes)
        size = self.pick_size()
        gen = self.chaos.model.new_gen(oid, size)
        wait = self.chaos.cfg.replica_wait_ms
        op = "put replicas 2"

        def go(c, inc):
            try:
                n = self.timed(name, op, wait, lambda: c.execute_command(
                    "OBJ.PUT", oid, content(oid, gen, size), "META", meta_of(gen),
                    "REPLICAS", 2, "WAIT", wait))
            except ResponseError as e:
                self.chaos.count(op, code_of(e))
                if code_of(e) not in ("OOM", "UNAVAILABLE"):
                    self.chaos.violate("unexpected reply", f"{op} {oid!r} on {name}: {e}")
                return
            if n not in (1, 2):
                self.chaos.violate("unexpected reply", f"{op} {oid!r} on {name}: {n!r}")
                return
            self.chaos.model.add(Obj(oid, gen, size, name, inc, want=2, durable=n == 2))
            if n == 2:
                with self.chaos.lock:
                    self.chaos.durable["acknowledged"] += 1
            self.chaos.count(op, f"{n} copies")
        self.run_op(name, op, go)

    def op_purge(self, o):
        """OBJ.PURGE of a two-copy object from any live node (a holder's delete would do
        too, but its owner may have moved): gone from the model once the directory knew
        it; kept when the directory did not (flushed, the copies not published again)."""
        nodes = self.live_nodes()
        if not nodes:
            return
        name = self.rng.choice(nodes)

        def go(c, inc):
            try:
                r = c.execute_command("OBJ.PURGE", o.oid)
            except ResponseError as e:
                self.chaos.count("purge", code_of(e))  # the directory is away: kept
                return
            self.chaos.count("purge", str(to_int(r)))
            if to_int(r) >= 1:
                self.chaos.model.drop(o.oid)
        self.run_op(name, "purge", go)

    def put_refused(self, c, name, oid, e, op):
        """A put or create answered an error: EXISTS is fine for a replica there."""
        code = code_of(e)
        self.chaos.count(op, code)
        if code == "EXISTS":
            try:
                inf = pairs(c.execute_command("OBJ.INFO", oid))
            except ResponseError:
                return  # gone again (evicted)
            # a replica being fetched is "created" and not yet marked a replica; only
            # this client creates its ids
            if not to_int(inf["replica"]) and inf["state"] not in (b"created", "created"):
                self.chaos.violate("ghost object", f"{op} {oid!r} on {name}: EXISTS, and it is "
                                   "a primary the model does not have")
        elif code != "OOM":
            self.chaos.violate("unexpected reply", f"{op} {oid!r} on {name}: {e}")

    def op_create(self):
        """CREATE, WRITE in pieces (some through the arena file), probing from a second
        connection that nothing of it is visible, then SEAL, or ABORT, or disconnect."""
        oid = self.free_own_id()
        nodes = self.live_nodes()
        if oid is None or not nodes:
            return self.op_fetch()
        name = self.rng.choice(nodes)
        size = self.pick_size()
        gen = self.chaos.model.new_gen(oid, size)
        data = content(oid, gen, size)
        ending = self.rng.choices(["seal", "abort", "disconnect"], [8, 1, 1])[0]
        n = self.chaos.node(name)
        inc = n.incarnation
        c = probe = None
        try:
            c = n.new_client(120.0)  # the node may be killed right now: lost_conn sorts it out
            inc = connected_incarnation(n, c)
            try:
                r = pairs(c.execute_command("OBJ.CREATE", oid, size, "META", meta_of(gen)))
            except ResponseError as e:
                self.put_refused(c, name, oid, e, "create")
                return
            offset = to_int(r["offset"])
            probe = n.new_client(120.0)
            cuts = sorted(self.rng.sample(range(size + 1), min(2, size + 1)))
            pieces = [(a, b) for a, b in zip([0] + cuts, cuts + [size]) if b > a]
            for i, (a, b) in enumerate(pieces):
                if self.rng.random() < 0.3 and n.arena_path:
                    with open(n.arena_path, "r+b") as f:
                        f.seek(offset + a)
                        f.write(data[a:b])
                else:
                    c.execute_command("OBJ.WRITE", oid, a, data[a:b])
                self.probe_invisible(probe, name, oid)
                if ending != "seal" and i == len(pieces) // 2:
                    break
            if ending == "seal":
                c.execute_command("OBJ.SEAL", oid)
                self.chaos.model.add(Obj(oid, gen, size, name, inc))
            elif ending == "abort":
                c.execute_command("OBJ.ABORT", oid)
            self.chaos.count("create", ending)
        except ResponseError as e:
            self.chaos.violate("unexpected reply", f"create/write/seal {oid!r} on {name}: {e}")
        except NET_ERRORS as e:
            self.lost_conn(name, inc, "create", e)
        finally:
            if c is not None:
                c.close()
            if probe is not None:
                probe.close()

    def probe_invisible(self, probe, name, oid):
        """An object being written: EXISTS 0, not listed, GET waits (answers TIMEOUT)."""
        if probe.execute_command("OBJ.EXISTS", oid) != 0:
            self.chaos.violate("partial object", f"{name}: OBJ.EXISTS {oid!r} is 1 while it "
                               "is being written")
        _, ids = probe.execute_command("OBJ.LIST", 0, "MATCH", oid, "COUNT", 1000)
        if oid in ids:
            self.chaos.violate("partial object", f"{name}: OBJ.LIST lists {oid!r} while it "
                               "is being written")
        try:
            got = probe.execute_command("OBJ.GET", oid, "TIMEOUT", 20)
            self.chaos.violate("partial object", f"{name}: OBJ.GET {oid!r} answered "
                               f"{len(got)} bytes while it is being written")
        except ResponseError as e:
            if code_of(e) != "TIMEOUT":
                self.chaos.violate("unexpected reply", f"{name}: OBJ.GET {oid!r} TIMEOUT 20 of "
                                   f"an object being written: {e}")

    def op_fetch(self):
        objs = self.chaos.model.snapshot()
        nodes = self.live_nodes()
        if not objs or len(nodes) < 2:
            return
        o = self.rng.choice(objs)
        name = self.rng.choice([n for n in nodes if n != o.node] or nodes)
        timeout = self.rng.choice([300, 1000, 2000, 4000])
        args = ["OBJ.FETCH", o.oid, "TIMEOUT", timeout]
        how = self.rng.random()
        if how < 0.4:
            args += ["FROM", o.node]
        elif how < 0.5:
            args += ["FROM", self.rng.choice(self.chaos.cluster.names)]
        op = "fetch FROM" if "FROM" in args else "fetch"
        self.run_op(name, op, lambda c, inc: self.fetch_and_verify(c, name, o, op, args, timeout))

    def fetch_and_verify(self, c, name, o, op, args, timeout):
        """Run OBJ.FETCH args on node name through client c (answering within TIMEOUT
        plus slack), then read the copy and check it against the model."""
        try:
            r = self.timed(name, op, timeout, lambda: c.execute_command(*args))[0]
        except ResponseError as e:
            r = e  # TIMEOUT (and argument errors) answer for the whole command
        if isinstance(r, Exception):
            code = code_of(r)
            self.chaos.count(op, code)
            # WRONGSTATE: its owner deleted it and is creating the id again right
            # here (documented: a fetch does not wait for a local creation)
            creating = code == "WRONGSTATE" and "being created on this node" in str(r)
            if code not in FETCH_ERRORS and not creating:
                self.chaos.violate("unexpected reply", f"{op} {o.oid!r} on {name}: {r}")
            return
        self.chaos.count(op, "OK")
        try:
            data, meta = c.execute_command("OBJ.GET", o.oid, "WITHMETA")
        except ResponseError as e:
            self.chaos.count(op, f"then GET {code_of(e)}")  # evicted meanwhile
            return
        self.chaos.verify(o.oid, data, meta, f"{op} on {name}")

    def op_broadcast(self):
        """Several nodes fetch one large object at the same moment (1 MiB and up: upload
        slots, BUSY redirects and relay streams), under whatever fault is running."""
        objs = [o for o in self.chaos.model.snapshot() if o.size >= 1 << 20]
        nodes = self.live_nodes()
        if not objs or len(nodes) < 3:
            return self.op_fetch()
        o = self.rng.choice(objs)
        targets = self.rng.sample([n for n in nodes if n != o.node] or nodes,
                                  min(3, len(nodes) - 1))
        timeout = self.rng.choice([1000, 2000, 4000])
        args = ["OBJ.FETCH", o.oid, "TIMEOUT", timeout]
        got, lost = {}, []
        for name in targets:  # connections made here: self.conns is this thread's
            inc = self.chaos.node(name).incarnation
            try:
                got[name] = self.conn(name)
            except NET_ERRORS as e:
                lost.append((name, inc, e))

        def one(name, c, inc):
            try:
                self.fetch_and_verify(c, name, o, "broadcast", args, timeout)
            except NET_ERRORS as e:
                lost.append((name, inc, e))

        threads = [threading.Thread(target=one, args=(name, c, inc))
                   for name, (c, inc) in got.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for name, inc, e in lost:
            self.lost_conn(name, inc, "broadcast", e)

    def op_get(self):
        objs = self.chaos.model.snapshot()
        if not objs:
            return
        o = self.rng.choice(objs)
        if self.chaos.node(o.node).killed:
            return

        def go(c, inc):
            try:
                data, meta = c.execute_command("OBJ.GET", o.oid, "WITHMETA")
            except ResponseError as e:
                self.chaos.count("get", code_of(e))  # deleted or re-made meanwhile
                return
            self.chaos.count("get", "OK")
            self.chaos.verify(o.oid, data, meta, f"get on {o.node}")
        self.run_op(o.node, "get", go)

    def read_pinned(self, n, inc, oid, r, where, item=None):
        """Read a pinned object through the arena file and verify it."""
        if n.incarnation != inc or not n.arena_path:
            return
        offset, size = to_int(r["offset"]), to_int(r["size"])
        try:
            with open(n.arena_path, "rb") as f:
                f.seek(offset)
                data = f.read(size)
        except OSError:
            return  # the node was killed and its arena removed meanwhile
        if n.incarnation == inc:
            self.chaos.verify(oid, data, r["meta"], where, item)

    def op_pin(self):
        """PIN (waiting a little), read the bytes in place, hold, read again, RELEASE."""
        objs = self.chaos.model.snapshot()
        if not objs:
            return
        o = self.rng.choice(objs)
        n = self.chaos.node(o.node)
        if n.killed:
            return

        def go(c, inc):
            try:
                r = pairs(self.timed(o.node, "pin", 200, lambda: c.execute_command(
                    "OBJ.PIN", o.oid, "TIMEOUT", 200)))
            except ResponseError as e:
                self.chaos.count("pin", code_of(e))
                if code_of(e) not in ("TIMEOUT", "NOTFOUND"):
                    self.chaos.violate("unexpected reply", f"pin {o.oid!r} on {o.node}: {e}")
                return
            self.chaos.count("pin", "OK")
            self.read_pinned(n, inc, o.oid, r, f"pinned on {o.node}")
            time.sleep(self.rng.uniform(0, 0.3))
            self.read_pinned(n, inc, o.oid, r, f"pinned on {o.node}, read again")
            self.release(c, o.node, o.oid, r, "pin")
        self.run_op(o.node, "pin", go)

    def release(self, c, name, oid, r, op):
        """Drop the pin whose OBJ.PIN answered r, naming it by its generation (issue 20
        item 10): the connection may pin two generations of the id. A failed release is
        a violation: the pin was this connection's."""
        try:
            c.execute_command("OBJ.RELEASE", oid, "GEN", to_int(r["gen"]))
        except ResponseError as e:
            self.chaos.violate("unexpected reply", f"{op}: OBJ.RELEASE {oid!r} GEN "
                               f"{to_int(r['gen'])} on {name}: {e}", item=10)

    def op_pin_two_generations(self):
        """Issue 20 item 10: pin a generation, delete it (DEFERRED: still pinned), put the
        next generation of the id, pin that too, and release the newer pin by its
        generation; after another object of the same size lands, the first pin's view
        must still hold what it held."""
        mine = [o for o in self.chaos.model.snapshot()
                if self.is_mine(o.oid) and o.want == 1 and not self.chaos.node(o.node).killed]
        spare = self.free_own_id()
        if not mine or spare is None:
            return
        o = self.rng.choice(mine)
        n = self.chaos.node(o.node)
        op = "pin two generations"

        def go(c, inc):
            try:
                r1 = pairs(c.execute_command("OBJ.PIN", o.oid))
            except ResponseError as e:
                self.chaos.count(op, f"PIN {code_of(e)}")
                return
            r2 = None
            try:
                c.execute_command("OBJ.DEL", o.oid)
                self.chaos.model.drop(o.oid)
                gen2 = self.chaos.model.new_gen(o.oid, o.size)
                c.execute_command("OBJ.PUT", o.oid, content(o.oid, gen2, o.size),
                                  "META", meta_of(gen2))
                self.chaos.model.add(Obj(o.oid, gen2, o.size, o.node, inc))
                r2 = pairs(c.execute_command("OBJ.PIN", o.oid))
                if to_int(r2["gen"]) == to_int(r1["gen"]):
                    self.chaos.violate("wrong bytes", f"{op} {o.oid!r} on {o.node}: both "
                                       f"pins answered gen {to_int(r1['gen'])}", item=10)
                self.release(c, o.node, o.oid, r2, op)
                r2 = None
                gen3 = self.chaos.model.new_gen(spare, o.size)
                c.execute_command("OBJ.PUT", spare, content(spare, gen3, o.size),
                                  "META", meta_of(gen3))
                self.chaos.model.add(Obj(spare, gen3, o.size, o.node, inc))
            except ResponseError as e:
                # e.g. EXISTS: a replica of an earlier generation is on this node
                self.chaos.count(op, code_of(e))
                for r in (r2, r1):
                    if r is not None:
                        self.release(c, o.node, o.oid, r, op)
                return
            self.read_pinned(n, inc, o.oid, r1, f"{o.node}: the first pin's view after the "
                             "newer pin was released and another object landed", item=10)
            self.release(c, o.node, o.oid, r1, op)
            self.chaos.count(op, "done")
        self.run_op(o.node, op, go)

    def op_delete(self):
        mine = [o for o in self.chaos.model.snapshot() if self.is_mine(o.oid)]
        if not mine:
            return self.op_put()
        o = self.rng.choice(mine)
        if o.want > 1:
            return self.op_purge(o)
        n = self.chaos.node(o.node)
        if n.killed:
            return

        def go(c, inc):
            try:
                r = c.execute_command("OBJ.DEL", o.oid)
            except ResponseError as e:
                self.chaos.count("delete", code_of(e))
                cur = self.chaos.model.get(o.oid)
                if cur is o and n.incarnation == o.inc:
                    self.chaos.violate("lost object", f"delete {o.oid!r} on {o.node}: {e}, "
                                       f"the model has generation {o.gen} there")
                self.chaos.model.drop(o.oid)
                return
            self.chaos.model.drop(o.oid)
            self.chaos.count("delete", r.decode() if isinstance(r, bytes) else str(r))
        self.run_op(o.node, "delete", go)

    def op_wait_missing(self):
        """GET or FETCH of an id nobody writes, with a TIMEOUT: answered in time."""
        nodes = self.live_nodes()
        if not nodes:
            return
        name = self.rng.choice(nodes)
        with self.chaos.lock:
            self.chaos.missing_serial += 1
            oid = b"missing:%d" % self.chaos.missing_serial
        timeout = self.rng.choice([100, 500, 1500])
        cmd = self.rng.choice(["OBJ.GET", "OBJ.FETCH"])
        op = f"{cmd.lower()} missing"

        def go(c, inc):
            try:
                r = self.timed(name, op, timeout, lambda: c.execute_command(
                    cmd, oid, "TIMEOUT", timeout))
            except ResponseError as e:
                self.chaos.count(op, code_of(e))
                return
            if cmd == "OBJ.FETCH" and isinstance(r[0], Exception):
                self.chaos.count(op, code_of(r[0]))
                return
            self.chaos.violate("ghost object", f"{op} {oid!r} on {name} answered {r!r:.80}")
        self.run_op(name, op, go)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--json", help="write the report here")
    args = ap.parse_args(argv)
    why = netns_problem()
    if why is not None:
        print(f"chaos: {why}", file=sys.stderr)
        return 2
    cfg = Config()
    if args.seconds is not None:
        cfg.seconds = args.seconds
    if args.seed is not None:
        cfg.seed = args.seed
    if args.json:
        cfg.json_path = args.json
    rep = Chaos(cfg).run()
    print_report(rep, cfg.json_path)
    return 0 if rep["violation_count"] == 0 else 1


def print_report(rep, path):
    text = json.dumps(rep, indent=2, default=str)
    print(text)
    if path:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        with open(path, "w") as f:
            f.write(text + "\n")
        print(f"chaos: report written to {path}")


if __name__ == "__main__":
    sys.exit(main())
