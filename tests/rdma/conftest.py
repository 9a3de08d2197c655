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
report. Nodes are started by the shared launcher, tests/lib/objnodes.py.
Environment: OBJSTORE_BUILD or OBJSTORE_MODULE (the module to load; every
OBJSTORE_* variable is copied into the guest), REDIS_SERVER, OBJ_RDMA_WORKDIR
(where node directories go; default: a fresh temporary directory, removed after a
clean run).
"""

import os
import shutil
import sys
import tempfile

import pytest
import redis

from objhelpers import Client
from objnodes import RdmaCluster, make_uid, nodes_log_report, rdma_environment_problem

SECRET = "rdma-suite-secret"
# The session's nodes: (name, memory, RDMA on, cluster-secret).
NODES = [("A", "96mb", True, SECRET), ("B", "96mb", True, SECRET),
         ("C", "80mb", True, SECRET), ("D", "16mb", True, "not-the-cluster-secret"),
         ("E", "16mb", False, SECRET)]


def pytest_sessionstart(session):
    if session.config.option.collectonly:
        return
    why = rdma_environment_problem()
    if why:
        banner = "*" * 76
        sys.stderr.write(f"\n{banner}\nRDMA SUITE CANNOT RUN: {why}\n{banner}\n\n")
        pytest.exit(f"RDMA SUITE CANNOT RUN: {why}", returncode=1)


_clusters = []  # the session's cluster, for failure reports


@pytest.fixture(scope="session")
def cluster():
    keep = os.environ.get("OBJ_RDMA_WORKDIR")
    if keep:
        os.makedirs(keep, exist_ok=True)
        workroot = tempfile.mkdtemp(prefix="rdma-suite-", dir=keep)
    else:
        workroot = tempfile.mkdtemp(prefix="objstore-rdma-suite-")
    cl = RdmaCluster(workroot, NODES)
    _clusters.append(cl)
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
    if rep.failed and _clusters:
        rep.sections.append(("objstore node logs", nodes_log_report(_clusters[0].nodes, 25)))


_uid_counter = [0]


@pytest.fixture
def uid(request):
    """Binary-safe id unique to this test; uid(b'x') derives more ids from it."""
    _uid_counter[0] += 1
    return make_uid(request, b"rdma:", _uid_counter[0], b"\x00\r\n\xff", width=60)
