"""The C client library's own test program, run against a real server.

tests/server/test_client.c is built by make into $OBJSTORE_BUILD/tests/server/test_client
(build/ or, for a sanitizer run, build/san-address/) against that build's
libobjstore.a, and run with the server's host, port and unix socket; it must exit 0.
A missing binary is a failure, not a skip: the library must come with its test
(`make test-server` builds it first).
"""

import os
import subprocess

import pytest

from objnodes import build_path


@pytest.fixture(scope="module")
def client_test_binary():
    binary = build_path("tests", "server", "test_client")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is missing: build it with make (make test-server does)",
                    pytrace=False)
    return binary


def test_client_library_test_program_passes(client_test_binary, make_server, tmp_path):
    sock = str(tmp_path / "redis.sock")
    srv = make_server(memory="64mb", server_args=["--unixsocket", sock, "--unixsocketperm", "700"])
    try:
        run = subprocess.run([client_test_binary, "127.0.0.1", str(srv.port), sock],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60,
                             text=True, errors="replace")
    except subprocess.TimeoutExpired:
        pytest.fail("test_client did not finish within 60 s", pytrace=False)
    assert run.returncode == 0, f"test_client exited {run.returncode}:\n{run.stdout[-4000:]}"
    assert srv.alive()


def test_client_library_puts_of_every_size(client_test_binary, make_server):
    """objClientPut from 0 B to 1 GiB with one and four copy threads, parts, and
    a put larger than the arena (test_client --put, testPutsOfEverySize)."""
    srv = make_server(memory="1100mb")
    try:
        run = subprocess.run([client_test_binary, "127.0.0.1", str(srv.port), "--put"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=900,
                             text=True, errors="replace")
    except subprocess.TimeoutExpired:
        pytest.fail("test_client --put did not finish within 900 s", pytrace=False)
    assert run.returncode == 0, f"test_client --put exited {run.returncode}:\n{run.stdout[-4000:]}"
    assert "with 4 copy thread(s): its checksum" in run.stdout
    assert srv.alive()
