"""Drain (docs/commands.md, OBJ.DRAIN; docs/cluster.md, copies, repair and drain): a node
hands its primaries and protected copies to other nodes before it leaves.

- OBJ.DRAIN WAIT moves every primary (plain and two-copy) and every protected copy of
  the node; the directory then names other owners and holders, and the drained node
  can die without a loss.
- A draining or drained node answers new puts and creates with DRAINING and is no
  target of other nodes' copies; CANCEL takes it back to idle.
- A second OBJ.DRAIN joins the first and reports it; CANCEL in the middle loses
  nothing.
- With no other live node the drain reports objects left and loses nothing.
- drain-on-shutdown: SHUTDOWN drains first.
- A rolling restart of five nodes, each drained, stopped and started again, under a
  steady bounded load of puts and fetches: no acknowledged object is lost and no read
  shows a wrong byte.

Waits are bounded far past what a working cluster takes (they stop a hang, they are no
verdict).
"""

import itertools
import random
import threading
import time

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from objhelpers import (
    copy_of,
    counting,
    drain,
    err_code,
    expect_error,
    fetch,
    fetch_everything,
    holders_now,
    locate,
    payload,
    sha256,
    stats,
    wait_each,
    wait_nodes,
)

DRAIN_WAIT = 120000  # ms: bounds a hang; a drain here takes a second or two
HANG = 180.0


def cluster(make_cluster, names, **kw):
    cl = make_cluster(names=names, layout="separate", memory="64mb", **kw)
    return cl, {n: cl[n].client() for n in names}


def put_objects(client, uid, tag, count, k=1, seed=0, size=5000):
    """count objects put through client (REPLICAS k when k > 1); {id: data}."""
    objs = {}
    for i in range(count):
        oid, data = uid(tag + b"%03d" % i), payload(size + i, seed=seed + i)
        opts = ["REPLICAS", k] if k > 1 else []
        want = k if k > 1 else b"OK"
        assert client.execute_command("OBJ.PUT", oid, data, *opts) == want, oid
        objs[oid] = data
    return objs


def moved_off(client, objs, gone, want, what):
    """Wait until the directory lists no copy of gone as counting for any of objs, with
    want counting holders and an owner among them."""

    def check(oid):
        try:
            d = locate(client, oid)
        except ResponseError as e:
            return False, str(e)
        ok = (gone not in d["protected"] and d["owner"] not in ("", gone)
              and d["owner"] in d["protected"] and len(d["protected"]) == want)
        return ok, d

    wait_each(list(objs), check, what, HANG)


def test_drain_moves_primaries_and_protected_copies(make_cluster, uid):
    cl, clients = cluster(make_cluster, ("A", "B"))
    one = put_objects(clients["A"], uid, b"a1-", 20, seed=100)
    two = put_objects(clients["A"], uid, b"a2-", 10, k=2, seed=200)  # copies on B
    theirs = put_objects(clients["B"], uid, b"b2-", 10, k=2, seed=300)  # copies on A
    for name in ("C", "D"):
        cl.add_node(name)
        clients[name] = cl[name].client()
    wait_nodes(clients["A"], clients, timeout=60)

    rep = drain(clients["A"], "WAIT", DRAIN_WAIT)
    assert rep["state"] == "drained" and rep["objects_left"] == 0, rep
    assert rep["objects_moved"] == 40, rep
    assert rep["bytes_moved"] >= sum(len(d) for d in one.values()), rep
    st = stats(clients["A"])
    assert (st["drain_state"], st["drain_objects_left"], st["drain_objects_moved"]) == (2, 0, 40)
    assert drain(clients["A"], "STATUS") == rep

    moved_off(clients["B"], one, "A", 1, "A's plain primaries have other owners")
    moved_off(clients["B"], two, "A", 2, "A's two-copy primaries have other owners")
    moved_off(clients["B"], theirs, "A", 2, "A's protected copies moved")
    for oid in theirs:
        assert locate(clients["B"], oid)["owner"] == "B"
    for oid in (*one, *two, *theirs):
        got = copy_of(clients["A"], oid)
        assert got is None or got[0] == "replica", f"A still holds {oid!r} as {got}"

    cl["A"].sigkill()
    rest = {n: clients[n] for n in ("B", "C", "D")}
    fetch_everything(rest, {**one, **two, **theirs}, "fetched after the drained node died")


def test_a_draining_node_refuses_new_objects_and_takes_no_copies(make_cluster, uid):
    cl, clients = cluster(make_cluster, ("A", "B", "C", "D"))
    put_objects(clients["A"], uid, b"a-", 5, seed=1)
    rep = drain(clients["A"], "WAIT", DRAIN_WAIT)
    assert rep["state"] == "drained", rep

    a = clients["A"]
    expect_error(a, ["OBJ.PUT", uid(b"new"), b"data"], "DRAINING")
    expect_error(a, ["OBJ.PUT", uid(b"new2"), b"data", "REPLICAS", 2], "DRAINING")
    expect_error(a, ["OBJ.CREATE", uid(b"new3"), 10], "DRAINING")
    assert a.execute_command("OBJ.EXISTS", uid(b"new")) == 0

    for i in range(5):
        oid = uid(b"b%d" % i)
        assert clients["B"].execute_command("OBJ.PUT", oid, b"x" * 3000, "REPLICAS", 4,
                                            "WAIT", 1500) == 3, "A is no target"
        held = counting(holders_now(clients, oid))
        assert sorted(held) == ["B", "C", "D"], held

    rep = drain(a, "CANCEL")
    assert rep["state"] == "idle", rep
    assert stats(a)["drain_state"] == 0
    assert a.execute_command("OBJ.PUT", uid(b"after"), b"data") == b"OK"


def test_a_second_drain_joins_the_first(make_cluster, uid):
    cl, clients = cluster(make_cluster, ("A", "B", "C"))
    objs = put_objects(clients["A"], uid, b"o", 60, seed=5, size=64 * 1024)
    first = drain(clients["A"])
    second = drain(clients["A"])
    assert first["state"] in ("draining", "drained"), first
    assert second["state"] in ("draining", "drained"), second
    done = drain(clients["A"], "WAIT", DRAIN_WAIT)
    assert done["state"] == "drained" and done["objects_left"] == 0, done
    assert done["objects_moved"] == len(objs), f"moved once each: {done}"
    moved_off(clients["B"], objs, "A", 1, "moved off A")


def test_cancel_in_the_middle_of_a_drain_loses_nothing(make_cluster, uid):
    cl, clients = cluster(make_cluster, ("A", "B"))
    objs = put_objects(clients["A"], uid, b"o", 60, seed=6, size=64 * 1024)
    drain(clients["A"])
    rep = drain(clients["A"], "CANCEL")
    assert rep["state"] == "idle", rep
    assert clients["A"].execute_command("OBJ.PUT", uid(b"after"), b"x") == b"OK"
    fetch_everything({"B": clients["B"]}, objs, "every object after a cancelled drain")

    def one_owner(oid):
        d = locate(clients["B"], oid)
        return d["owner"] in ("A", "B") and d["protected"] == [d["owner"]], d

    wait_each(list(objs), one_owner, "one owner each after the cancel", HANG)


def test_a_drain_with_no_other_live_node_reports_objects_left_and_loses_nothing(
        make_cluster, uid):
    cl, clients = cluster(make_cluster, ("A",))
    a = clients["A"]
    objs = put_objects(a, uid, b"one", 5, seed=7)
    for i in range(5):
        oid, data = uid(b"two%d" % i), payload(4000 + i, seed=70 + i)
        assert a.execute_command("OBJ.PUT", oid, data, "REPLICAS", 2, "WAIT", 0) == 1
        objs[oid] = data
    rep = drain(a, "WAIT", 3000)
    assert rep["state"] == "draining", rep
    assert rep["objects_left"] > 0 and rep["objects_moved"] == 0, rep
    expect_error(a, ["OBJ.PUT", uid(b"new"), b"data"], "DRAINING")
    for oid, data in objs.items():
        assert copy_of(a, oid)[0] == "primary", oid
        assert sha256(a.execute_command("OBJ.GET", oid)) == sha256(data)
    assert drain(a, "CANCEL")["state"] == "idle"
    assert a.execute_command("OBJ.PUT", uid(b"new"), b"data") == b"OK"


def test_shutdown_drains_first_when_configured(make_cluster, uid):
    cl, clients = cluster(make_cluster, ("A", "B"))
    cl.add_node("C", extra_args=["drain-on-shutdown", "yes"])
    clients["C"] = cl["C"].client()
    wait_nodes(clients["A"], clients, timeout=60)
    objs = put_objects(clients["C"], uid, b"c", 20, seed=8)
    objs.update(put_objects(clients["C"], uid, b"c2-", 5, k=2, seed=80))
    problems = cl["C"].stop()
    assert not problems, problems
    fetch_everything({"A": clients["A"], "B": clients["B"]}, objs,
                     "fetched after C's drain and shutdown")


# ---- a rolling restart under load ----------------------------------------------------------

NET_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)


class Load:
    """A writer and a reader running against the cluster's nodes, one at a time each:
    the writer puts small objects (every fifth with REPLICAS 2) on a random node that
    is not down, tries another on DRAINING or a closed connection, and records what was
    acknowledged; the reader fetches acknowledged objects on random nodes and compares
    every byte it reads. Bounded: at most `limit` objects, a put every 20 ms."""

    def __init__(self, cl, names, uid, limit=300):
        self.cl, self.names, self.uid, self.limit = cl, list(names), uid, limit
        self.down = None  # the node being restarted
        self.acked = {}
        self.wrong = []
        self.unexpected = []
        self.counts = {}
        self.serials = itertools.count()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(fn, seed), daemon=True)
                        for fn, seed in ((self.put_one, 1), (self.read_one, 2))]

    def count(self, what):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(120)
        assert not any(t.is_alive() for t in self.threads), "a load thread is stuck"

    def run(self, fn, seed):
        rng = random.Random(seed)
        conns = {}  # node -> (port, client)
        try:
            while not self.stop.is_set():
                name = rng.choice([n for n in self.names if n != self.down])
                node = self.cl[name]
                c = conns.get(name)
                if c is None or c[0] != node.port:
                    c = conns[name] = (node.port, node.new_client(30.0))
                try:
                    fn(rng, name, c[1])
                except NET_ERRORS:
                    self.count("connection lost")  # the node is stopping
                    conns.pop(name, None)
                self.stop.wait(0.02)
        except Exception as e:  # reported by the test
            self.unexpected.append(f"load thread: {e!r}")

    def put_one(self, rng, name, c):
        with self.lock:
            if len(self.acked) >= self.limit:
                return
        serial = next(self.serials)
        oid = self.uid(b"w%d" % serial)
        data = payload(rng.randint(1, 32 * 1024), seed=serial)
        opts = ["REPLICAS", 2, "WAIT", 5000] if serial % 5 == 0 else []
        try:
            c.execute_command("OBJ.PUT", oid, data, *opts)
        except ResponseError as e:
            self.count(f"put {err_code(e)}")
            if err_code(e) != "DRAINING":
                self.unexpected.append(f"put on {name}: {e}")
            return
        with self.lock:
            self.acked[oid] = data
        self.count("put ok")

    def read_one(self, rng, name, c):
        with self.lock:
            if not self.acked:
                return
            oid, data = rng.choice(list(self.acked.items()))
        try:
            r = fetch(c, oid, timeout=5000)
        except ResponseError as e:
            r = [str(e)]
        if r != ["OK"]:
            self.count(f"fetch {r[0].split()[0]}")
            return
        try:
            got = c.execute_command("OBJ.GET", oid)
        except ResponseError as e:
            self.count(f"get {err_code(e)}")
            return
        if sha256(got) != sha256(data):
            self.wrong.append(f"{oid!r} read on {name} differs from what was put")
        self.count("read ok")


def test_a_rolling_restart_with_drain_under_load_loses_nothing(make_cluster, uid):
    names = ("A", "B", "C", "D", "E")
    cl, clients = cluster(make_cluster, names)
    load = Load(cl, names, uid).start()
    try:
        time.sleep(1.0)  # pacing only: some objects on every node before the first drain
        for name in names:
            c = cl[name].new_client(float(DRAIN_WAIT) / 1000 + 60)
            try:
                rep = drain(c, "WAIT", DRAIN_WAIT)
            finally:
                c.close()
            assert rep["state"] == "drained" and rep["objects_left"] == 0, f"{name}: {rep}"
            load.down = name
            problems = cl[name].stop()
            assert not problems, f"{name}: {problems}"
            cl[name].restart()
            probe = cl[names[0] if name != names[0] else names[1]].new_client(30.0)
            try:
                wait_nodes(probe, names, timeout=60)
            finally:
                probe.close()
            load.down = None
    finally:
        load.finish()
    assert not load.unexpected, load.unexpected[:10]
    assert not load.wrong, load.wrong[:10]
    assert load.counts.get("put ok", 0) > 0 and load.counts.get("read ok", 0) > 0, load.counts
    live = {n: cl[n].client() for n in names}
    fetch_everything(live, load.acked, f"every acknowledged object ({load.counts})")
