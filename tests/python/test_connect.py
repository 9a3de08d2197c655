"""Connecting: host/port or a URL, password and ACL users, unix sockets, RDMA's
failure without a device, and the client as a context manager."""

import os
import tempfile

import numpy as np
import pytest

import objstore
from objnodes import free_port


def test_password(make_server):
    s = make_server()
    admin = s.client()
    admin.execute_command("CONFIG", "SET", "requirepass", "pa ss")  # set after the start
    try:                                                             # (the launcher pings)
        with objstore.connect("127.0.0.1", s.port, password="pa ss") as c:
            assert c.zero_copy
            c.put("k", np.arange(3))
            assert c.get("k").tolist() == [0, 1, 2]
        with pytest.raises(objstore.AuthError) as e:
            objstore.connect("127.0.0.1", s.port)
        assert e.value.code == "NOAUTH"
        with pytest.raises(objstore.AuthError):
            objstore.connect("127.0.0.1", s.port, password="wrong")
        with objstore.connect(f"redis://:pa%20ss@127.0.0.1:{s.port}") as c:
            assert c.exists("k")
    finally:
        admin.execute_command("CONFIG", "SET", "requirepass", "")


def test_acl_user(make_server):
    s = make_server()
    admin = s.client()
    admin.execute_command("ACL", "SETUSER", "alice", "on", ">secret", "~*", "&*", "+@all")
    admin.execute_command("ACL", "SETUSER", "bob", "on", ">pw", "~*", "&*", "+@all",
                          "-obj.put")
    with objstore.connect("127.0.0.1", s.port, username="alice", password="secret") as c:
        c.put("a", b"1")
    with objstore.connect(f"objstore://alice:secret@127.0.0.1:{s.port}") as c:
        assert bytes(c.get("a")) == b"1"
    with objstore.connect("127.0.0.1", s.port, username="bob", password="pw",
                          zero_copy=False) as c:
        with pytest.raises(objstore.AuthError) as e:
            c.put("b", b"2")  # remote mode sends OBJ.PUT, which bob may not run
        assert e.value.code == "NOPERM"
    with pytest.raises(objstore.AuthError):
        objstore.connect("127.0.0.1", s.port, username="alice", password="nope")


def test_unix_socket(make_server):
    d = tempfile.mkdtemp(prefix="objstore-py-sock-")
    path = os.path.join(d, "node.sock")
    s = make_server(server_args=["--unixsocket", path, "--unixsocketperm", "700"])
    with objstore.connect(unix_socket=path) as c:
        assert c.zero_copy, "a unix socket is this machine: the arena is mapped"
        c.put("u", np.ones(4))
        assert c.get("u").sum() == 4
    with objstore.connect(f"unix://{path}") as c:
        assert c.exists("u")
    assert s.alive()
    os.rmdir(d) if not os.listdir(d) else None


def test_context_manager_closes(server):
    with objstore.connect("127.0.0.1", server.port) as c:
        assert not c.closed
    assert c.closed
    with pytest.raises(objstore.ClientClosed):
        c.stats()


def test_rdma_without_a_listener_fails_cleanly():
    with pytest.raises(objstore.ConnectionFailed):
        objstore.connect(f"rdma://127.0.0.1:{free_port()}")


def test_require_zero_copy_on_a_local_node(server):
    with objstore.connect("127.0.0.1", server.port, zero_copy=True) as c:
        assert c.zero_copy
