"""The network-namespace harness (tests/lib/netns.py) does what its users rely on: nodes
in namespaces fetch from each other byte-exact over rate-limited links; a cut link
makes a peer unreachable and healing it makes it reachable again; pause, kill -9 and
restart work on the node itself; and nothing (process, namespace, veth, bridge) is
left behind, whether the run ends normally, by an exception, or by SIGTERM / SIGINT.
"""

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from redis.exceptions import ResponseError

from netns import NetnsCluster, NetnsLab, leftovers, netns_problem
from objhelpers import wait_locations, wait_until

MIB = 1 << 20
LIB = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "lib"))


def content(n, seed):
    return bytes((i * 31 + seed) & 0xFF for i in range(256)) * (n // 256)


def fetch_code(client, oid, *args):
    """OBJ.FETCH one id: "OK" or the error's code word."""
    try:
        r = client.obj("OBJ.FETCH", oid, *args)[0]
    except ResponseError as e:
        return str(e).split()[0]
    return r.decode() if isinstance(r, bytes) else str(r).split()[0]


def test_nodes_fetch_byte_exact_over_rate_limited_links(make_netns_cluster):
    c = make_netns_cluster(3, rate="200mbit")
    data = content(4 * MIB, 7)
    assert c["n1"].client().obj("OBJ.PUT", b"blob", data) == b"OK"
    wait_locations(c["n2"].client(), b"blob", ["n1"], timeout=60)  # publishing is asynchronous
    for name in ("n2", "n3"):
        cl = c[name].client()
        assert fetch_code(cl, b"blob") == "OK"
        assert cl.obj("OBJ.GET", b"blob") == data
    for name in c.names:
        inside, outside = c.lab.qdiscs(c[name].link)
        assert "tbf" in inside and "200Mbit" in inside, inside
        assert "tbf" in outside and "200Mbit" in outside, outside
    st = c.all_stats()
    assert sum(s["tcp_served_bytes"] for s in st.values()) >= 2 * len(data)


def test_cut_link_isolates_a_node_and_heal_restores_it(make_netns_cluster):
    c = make_netns_cluster(2, node_ttl=1500)
    assert c["n1"].client().obj("OBJ.PUT", b"o", b"abc") == b"OK"
    cl = c["n2"].client()
    wait_locations(cl, b"o", ["n1"], timeout=60)
    c.lab.cut(c["n2"].link)
    assert fetch_code(cl, b"o", "TIMEOUT", 1500) in ("UNAVAILABLE", "TIMEOUT")
    c.lab.heal(c["n2"].link)
    # Healed: the fetch succeeds once the node's sessions are back (they come back on
    # backed-off timers). Failing takes both 8 attempts and 15 s: a busy machine makes
    # each attempt longer, never the verdict earlier.
    codes, t0 = [], time.monotonic()
    while "OK" not in codes and (len(codes) < 8 or time.monotonic() < t0 + 15):
        codes.append(fetch_code(cl, b"o", "TIMEOUT", 5000))
        time.sleep(0.1)
    assert codes[-1] == "OK", (f"not fetched in {len(codes)} attempts over "
                               f"{time.monotonic() - t0:.1f} s after the heal: {codes}")
    assert cl.obj("OBJ.GET", b"o") == b"abc"


def test_pause_kill9_restart(make_netns_cluster):
    c = make_netns_cluster(2)
    n1 = c["n1"]
    assert n1.client().obj("OBJ.PUT", b"p", b"x" * 1000) == b"OK"
    cl = c["n2"].client()
    wait_locations(cl, b"p", ["n1"], timeout=60)  # published before the node goes silent
    n1.pause()
    assert fetch_code(cl, b"p", "TIMEOUT", 1000) in ("TIMEOUT", "UNAVAILABLE")
    n1.cont()
    assert fetch_code(cl, b"p", "TIMEOUT", 10000) == "OK"
    pid = n1.proc.pid
    n1.kill9()
    assert not n1.alive()
    n1.restart()
    assert n1.proc.pid != pid and n1.incarnation == 2
    assert c.wait_registered() is None
    assert n1.stats()["objects"] == 0
    # The harness's own processes run in the namespaces: the node's and nothing stray.
    assert n1.link.pids() == [n1.proc.pid]


def test_close_removes_everything():
    why = netns_problem()
    if why is not None:
        pytest.fail(why, pytrace=False)
    lab = NetnsLab(rate="100mbit").create()
    a = lab.add("a")
    lab.add("b")
    p = a.spawn(["sleep", "600"])
    assert lab.leftovers(), "the lab made nothing?"
    assert lab.close() == []
    assert p.wait(10) == -signal.SIGKILL
    assert leftovers(lab.prefix) == []


RUNNER = textwrap.dedent("""
    import subprocess, sys, time
    sys.path.insert(0, {lib!r})
    from netns import NetnsLab
    lab = NetnsLab(rate="100mbit").create()
    a = lab.add("a")
    lab.add("b")
    lab.cut(a)
    p = a.spawn(["sleep", "600"])
    print(lab.prefix, p.pid, flush=True)
    if {mode!r} == "raise":
        raise RuntimeError("a test that fails")
    time.sleep(600)
""")


@pytest.mark.parametrize("mode", ["raise", "SIGTERM", "SIGINT", "SIGHUP"])
def test_nothing_left_behind_when_the_run_dies(mode):
    """A harness user that fails, or is told to stop, still removes everything."""
    why = netns_problem()
    if why is not None:
        pytest.fail(why, pytrace=False)
    proc = subprocess.Popen([sys.executable, "-c", RUNNER.format(lib=LIB, mode=mode)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline().split()
        assert len(line) == 2, proc.stderr.read()
        prefix, pid = line[0], int(line[1])
        assert leftovers(prefix)
        if mode != "raise":
            proc.send_signal(getattr(signal, mode))
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode != 0
    assert leftovers(prefix) == []
    assert not os.path.exists(f"/proc/{pid}") or "State:\tZ" in open(f"/proc/{pid}/status").read()


def config_get(client, name):
    reply = client.obj("CONFIG", "GET", name)
    return dict(zip(reply[::2], reply[1::2])).get(name.encode())


def test_cluster_names_links_and_per_node_arguments(make_netns_cluster):
    """What the broadcast tests and bench rely on: names of their own, the tbf's burst
    and latency on both ends of every link, module arguments for one node only."""
    c = make_netns_cluster(2, rate="300mbit", burst="512kb", latency="100ms",
                           names=["n0", "n1"], node_args={"n1": ["upload-slots", "3"]})
    assert c.names == ["n0", "n1"] and c.wait_registered() is None
    for name in c.names:
        for side in c.lab.qdiscs(c[name].link):
            assert "tbf" in side and "300Mbit" in side and "lat 100ms" in side, side
            m = re.search(r"burst (\d+)(b|Kb|Mb)", side)
            burst = int(m.group(1)) * {"b": 1, "Kb": 1024, "Mb": 1 << 20}[m.group(2)]
            assert 500 * 1024 <= burst <= 512 * 1024, side  # tc rounds to its clock
    assert config_get(c.client("n0"), "objstore.upload-slots") == b"1"
    assert config_get(c.client("n1"), "objstore.upload-slots") == b"3"


def test_a_cluster_that_fails_to_start_leaves_nothing_behind():
    why = netns_problem()
    if why is not None:
        pytest.fail(why, pytrace=False)
    c = NetnsCluster(2, node_args={"n2": ["no-such-argument", "1"]})
    with pytest.raises(BaseException) as info:
        c.start()
    assert "n2" in str(info.value), str(info.value)[:500]
    assert leftovers(c.lab.prefix) == []
    assert all(not n.alive() for n in c.nodes.values())


SOCKETS = textwrap.dedent("""
    import socket, sys
    lis = socket.socket()
    lis.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lis.bind(("127.0.0.1", 16379))
    lis.listen(1)
    near = socket.create_connection(("127.0.0.1", 16379))
    far, _ = lis.accept()
    near.close()  # near: an orphan in FIN-WAIT-2; far: held in CLOSE-WAIT
    print("ready", flush=True)
    sys.stdin.readline()
    far.close()  # both closes complete
    print("closed", flush=True)
    sys.stdin.readline()
""")


def test_quiescence_tells_a_socket_left_open_from_a_close_the_kernel_finishes():
    """The chaos run's socket check (Chaos.socket_problems) on a namespace where a
    process holds a transfer-port socket whose peer closed (CLOSE-WAIT: what a node that
    never closes leaves) next to an orphan the kernel is closing (FIN-WAIT-2): it names
    each as what it is, and nothing once both closes have completed."""
    why = netns_problem()
    if why is not None:
        pytest.fail(why, pytrace=False)
    from chaos import Chaos, Config

    class Node:
        pass

    lab = NetnsLab().create()
    try:
        n = Node()
        n.link = lab.add("a")
        p = n.link.spawn([sys.executable, "-c", SOCKETS], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"
        chaos = Chaos(Config(seed=1))
        # (the FIN and its ACK cross loopback in a softirq: polled, bounded)
        problems = wait_until(lambda: len(chaos.socket_problems(n)) == 2 and
                              chaos.socket_problems(n), timeout=30, what="both sockets seen")
        assert "after its peer closed" in problems[0] and "CLOSE-WAIT" in problems[0]
        assert "never completed" in problems[1] and "FIN-WAIT" in problems[1]
        p.stdin.write("\n")
        p.stdin.flush()
        assert p.stdout.readline().strip() == "closed"
        wait_until(lambda: chaos.socket_problems(n) == [], timeout=30,
                   what="both closes completed (TIME-WAIT counts as closed)")
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait(10)
    finally:
        assert lab.close() == []


def test_heal_check_reports_an_object_the_directory_lost_and_passes_a_fetchable_one(
        make_netns_cluster):
    """The chaos run's heal check (Chaos.check_fetchable) bounds attempts, not the clock;
    it must still fail on what is truly stuck: of two primaries on n1, the one whose
    directory entry is gone (and that nothing publishes again) is reported after its
    attempts, the other one is fetched."""
    from chaos import Chaos, Config, Obj, content

    c = make_netns_cluster(2, node_ttl=1500)
    chaos = Chaos(Config(seed=1, nodes=2, heal_slack=1.0))
    chaos.cluster = c
    n1 = c["n1"]
    for oid in (b"kept", b"lost"):
        data = content(oid, 1, 100)
        assert n1.client().obj("OBJ.PUT", oid, data, "META", b"g1") == b"OK"
        chaos.model.new_gen(oid, len(data))
        chaos.model.add(Obj(oid, 1, len(data), "n1", n1.incarnation))
        wait_locations(c["n2"].client(), oid, ["n1"], timeout=60)
    d = c.directory.client()
    d.delete(b"objstore:{lost}:meta", b"objstore:{lost}:loc")
    chaos.check_fetchable(time.monotonic())
    assert [v["kind"] for v in chaos.violations] == ["not fetchable after heal"], (
        chaos.violations)
    detail = chaos.violations[0]["detail"]
    assert detail.startswith("1 live primaries") and "b'lost'" in detail, detail
    assert c["n2"].client().obj("OBJ.EXISTS", b"kept") == 1


def test_a_fetch_is_not_stuck_on_a_connection_a_cut_left_half_open(make_netns_cluster):
    """n2 holds a session to n1; n1 is killed behind a cut (its FIN or RST never reaches
    n2) and comes back: n2's session is half-open. Once healed, a fetch from the new n1
    succeeds within a few attempts: the first request on the dead session is answered
    by a reset (the new n1 has no such socket), not left waiting."""
    c = make_netns_cluster(2, node_ttl=1500)
    n1, cl = c["n1"], c["n2"].client()
    assert n1.client().obj("OBJ.PUT", b"before", b"a" * 4096) == b"OK"
    wait_locations(cl, b"before", ["n1"], timeout=60)
    assert fetch_code(cl, b"before", "TIMEOUT", 30000) == "OK"  # the session is up
    c.lab.cut(n1.link)
    n1.kill9()
    n1.restart()
    c.lab.heal(n1.link)
    assert c.wait_registered(timeout=60) is None
    assert n1.client().obj("OBJ.PUT", b"after", b"b" * 4096) == b"OK"
    wait_locations(cl, b"after", ["n1"], timeout=60)
    # A bound on attempts, not on the clock (as in the heal test above).
    codes, t0 = [], time.monotonic()
    while "OK" not in codes and (len(codes) < 8 or time.monotonic() < t0 + 15):
        codes.append(fetch_code(cl, b"after", "TIMEOUT", 5000))
        time.sleep(0.1)
    assert codes[-1] == "OK", (f"not fetched in {len(codes)} attempts over "
                               f"{time.monotonic() - t0:.1f} s: {codes}")
    assert cl.obj("OBJ.GET", b"after") == b"b" * 4096
