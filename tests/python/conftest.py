"""Fixtures of the Python package's suite: real nodes from tests/lib/objnodes.py and
clients of the installed objstore package (`make python` installs it into
build/python-venv, whose interpreter runs this suite).

The node fixtures are the shared plugin tests/lib/objfixtures.py, with this suite's
profile: `server` (shared by a test module, 256 MiB; tests use unique ids),
`make_server` (nodes per test), `make_cluster_module`, `uid` (prefixed "py:").
Here: `oc` is an objstore client of `server`, `rc` a raw redis-py client that checks
what the node says (OBJ.INFO pins, ...) independently of the package.
"""

import dataclasses

import pytest

import objstore

pytest_plugins = ("objfixtures",)


@pytest.fixture(scope="session")
def node_profile(node_profile):
    """The plugin's profile, with a 256 MiB shared node and uids prefixed "py:"."""
    return dataclasses.replace(node_profile, shared_memory="256mb", shared_name="py",
                               test_name="pyfn", uid_prefix=b"py:")


@pytest.fixture
def oc(server):
    c = objstore.connect("127.0.0.1", server.port)
    yield c
    c.close()


@pytest.fixture
def rc(r):
    """A raw client of `server`: the plugin's `r`."""
    return r
