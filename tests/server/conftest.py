"""Fixtures of the server suite: real redis-server processes, started through the
shared launcher tests/lib/objnodes.py (see there for the environment it reads:
OBJSTORE_BUILD, OBJSTORE_MODULE, OBJSTORE_PRELOAD, REDIS_SERVER, OBJSTORE_SERVER).

On teardown every server is shut down and three things are checked: it was still
alive, it removed its arena file, and its output holds no sanitizer or crash report.

Scopes: `server` is shared by a test module (tests use unique ids and leave
nothing behind); `fresh_server` and `make_server` start servers per test for
tests that need exact stats, a small arena or other module arguments.

Multi-node tests (test_cluster_*.py) use `make_cluster` (per test) and
`make_cluster_module` (per test module): a Cluster is a set of ClusterNodes
named "A", "B", ... sharing one directory, either a plain redis-server of its
own (layout "separate", which tests can stop and restart) or the first node's
own Redis (layout "own", the module's default). Nodes use the default transfer
port (Redis port + 10000), so their Redis ports are picked as free pairs.
`a`, `b` and `c` are clients of nodes "A", "B" and "C" of the test module's own
`cl` fixture (a module that uses them defines `cl`).
`directory_redis` is a plain redis-server alone (for the directory client's C test).
"""

import itertools

import pytest

from objhelpers import ID_SALT
from objnodes import Cluster, DirectoryRedis, ObjstoreServer, finish, make_uid


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
    return make_uid(request, b"it:", next(_uid_counter), ID_SALT)


def _cluster_factory():
    made = []

    def factory(**kw):
        c = Cluster(**kw)
        made.append(c)
        return c.start()

    return made, factory


def _stop_clusters(made):
    report = [c.stop() for c in made]
    report = [r for r in report if r]
    if report:
        pytest.fail("\n\n".join(report), pytrace=False)


@pytest.fixture
def make_cluster():
    """Factory: make_cluster(names=("A", "B"), layout="separate"|"own", ...) -> Cluster,
    started; everything is stopped and checked at teardown."""
    made, factory = _cluster_factory()
    yield factory
    _stop_clusters(made)


@pytest.fixture(scope="module")
def make_cluster_module():
    """make_cluster for a cluster shared by one test module (tests use unique ids
    and compare stats as deltas)."""
    made, factory = _cluster_factory()
    yield factory
    _stop_clusters(made)


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
