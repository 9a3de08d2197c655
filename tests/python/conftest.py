"""Fixtures of the Python package's suite: real nodes from tests/lib/objnodes.py and
clients of the installed objstore package (`make python` installs it into
build/python-venv, whose interpreter runs this suite).

`server` is shared by a test module (tests use unique ids); `make_server` starts
nodes per test; `oc` is an objstore client of `server`, `rc` a raw redis-py client
that checks what the node says (OBJ.INFO pins, ...) independently of the package.
"""

import itertools

import pytest

import objstore
from objhelpers import ID_SALT
from objnodes import Cluster, ObjstoreServer, finish, make_uid


@pytest.fixture(scope="module")
def server():
    """A 256 MiB node shared by one test module."""
    s = ObjstoreServer(memory="256mb", name="py")
    try:
        s.start()
        yield s
    finally:
        finish([s])


@pytest.fixture
def make_server():
    """Factory: make_server(memory='64mb', module_args=(...), server_args=(...))."""
    started = []

    def factory(memory="64mb", module_args=(), server_args=()):
        s = ObjstoreServer(memory=memory, module_args=module_args, server_args=server_args,
                           name="pyfn")
        started.append(s)
        return s.start()

    yield factory
    finish(started)


@pytest.fixture
def oc(server):
    c = objstore.connect("127.0.0.1", server.port)
    yield c
    c.close()


@pytest.fixture
def rc(server):
    c = server.client()
    yield c
    c.close()


_uid_counter = itertools.count()


@pytest.fixture
def uid(request):
    """Binary id unique to this test; uid(b'x') derives more ids from it."""
    return make_uid(request, b"py:", next(_uid_counter), ID_SALT)


@pytest.fixture(scope="module")
def make_cluster_module():
    """Factory: make_cluster_module(names=("A", "B", "C"), layout="own") -> a started
    Cluster shared by one test module; stopped and checked at its end."""
    made = []

    def factory(**kw):
        c = Cluster(**kw)
        made.append(c)
        return c.start()

    yield factory
    report = [r for r in (c.stop() for c in made) if r]
    if report:
        pytest.fail("\n\n".join(report), pytrace=False)
