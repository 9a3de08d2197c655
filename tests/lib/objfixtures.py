"""The node fixtures every pytest suite shares (tests/server, tests/python, tests/chaos):
a pytest plugin that each suite's conftest.py loads (`pytest_plugins = ("objfixtures",)`)
and tunes through one fixture, `node_profile`. The nodes come from the shared launcher
(tests/lib/objnodes.py) and the namespace clusters from tests/lib/netns.py.

On teardown every server and cluster is shut down and checked: it was still alive, it
removed its arena file, its output holds no sanitizer or crash report (the launcher's
stop()); a problem fails the test with the server's log tail. A test that fails gets
the module's log lines of every node of its clusters attached to its report (a
failure under load is read from those, not reproduced).

    node_profile          the suite's settings (NodeProfile); a conftest overrides it
    server                one server shared by a test module (tests use unique ids)
    make_server           factory: servers of the test's own (other memory or arguments)
    fresh_server          a 64 MiB server of the test's own (exact stats)
    small_server          an 8 MiB server of the test's own (arena exhaustion)
    r, r2, r3             clients of `server`
    uid                   a binary id unique to the test; uid(b'x') derives more
    make_cluster          factory: a Cluster (objnodes) of the test's own
    make_cluster_module   factory: a Cluster shared by a test module
    a, b, c               clients of nodes "A", "B", "C" of the test module's own `cl`
    directory_redis       a plain redis-server alone, restartable on its port
    make_netns_cluster    factory: a NetnsCluster (netns), failing where namespaces
                          cannot be made
"""

import itertools
from dataclasses import dataclass

import pytest

from netns import NetnsCluster, netns_problem
from objhelpers import ID_SALT
from objnodes import Cluster, DirectoryRedis, ObjstoreServer, finish, make_uid, nodes_log_report


@dataclass(frozen=True)
class NodeProfile:
    """What differs between suites: the memory and log name of the shared `server`,
    the log name of make_server's servers, the prefix of every uid."""
    shared_memory: str = "64mb"
    shared_name: str = "shared"
    test_name: str = "fn"
    uid_prefix: bytes = b"it:"


@pytest.fixture(scope="session")
def node_profile():
    """The suite's NodeProfile (the server suite's; other suites override this)."""
    return NodeProfile()


@pytest.fixture(scope="module")
def server(node_profile):
    """A server shared by one test module (64 MiB in the server suite)."""
    s = ObjstoreServer(memory=node_profile.shared_memory, name=node_profile.shared_name)
    try:
        s.start()
        yield s
    finally:
        finish([s])


@pytest.fixture
def make_server(node_profile):
    """Factory: make_server(memory='64mb', module_args=(...), server_args=(...), start=True)."""
    started = []

    def factory(memory="64mb", module_args=(), server_args=(), start=True):
        s = ObjstoreServer(memory=memory, module_args=module_args, server_args=server_args,
                           name=node_profile.test_name)
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
def uid(request, node_profile):
    """Binary id unique to this test; uid(b'x') derives more ids from it."""
    return make_uid(request, node_profile.uid_prefix, next(_uid_counter), ID_SALT)


# The clusters started and not yet stopped, for failure reports.
_running = []


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Attach the module's last log lines of every node of the running clusters to a
    failing test's report."""
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed or not _running:
        return
    text = "\n".join(t for t in (nodes_log_report(dict(getattr(cl, "nodes", {})))
                                  for cl in _running) if t)
    if text:
        rep.sections.append(("objstore node logs", text))


def stop_all(made):
    """Stop every cluster of made (objnodes.Cluster or netns.NetnsCluster); fail the test
    with their reports if any left problems behind."""
    for c in made:
        if c in _running:
            _running.remove(c)
    report = [r for r in (c.stop() for c in made) if r]
    if report:
        pytest.fail("\n\n".join(report), pytrace=False)


def _started(cls, made):
    """A factory that starts cls(*args, **kw) and remembers it in made."""
    def factory(*args, **kw):
        c = cls(*args, **kw)
        made.append(c)
        _running.append(c)
        return c.start()

    return factory


@pytest.fixture
def make_cluster():
    """Factory: make_cluster(names=("A", "B"), layout="separate"|"own", ...) -> Cluster,
    started; everything is stopped and checked at teardown."""
    made = []
    yield _started(Cluster, made)
    stop_all(made)


@pytest.fixture(scope="module")
def make_cluster_module():
    """make_cluster for a cluster shared by one test module (tests use unique ids
    and compare stats as deltas)."""
    made = []
    yield _started(Cluster, made)
    stop_all(made)


@pytest.fixture
def a(cl):
    return cl["A"].client()


@pytest.fixture
def b(cl):
    return cl["B"].client()


@pytest.fixture
def c(cl):
    return cl["C"].client()


@pytest.fixture
def directory_redis():
    """A plain redis-server of this test's own, restartable on its port."""
    d = DirectoryRedis().start()
    yield d
    d.cleanup()


@pytest.fixture
def make_netns_cluster():
    """Factory: make_netns_cluster(n, rate=None, ...) starts a NetnsCluster. Fails, never
    skips, where namespaces cannot be made (the chaos suite is part of CI)."""
    why = netns_problem()
    if why is not None:
        pytest.fail(f"network namespaces cannot be made here: {why}", pytrace=False)
    made = []
    yield _started(NetnsCluster, made)
    stop_all(made)
