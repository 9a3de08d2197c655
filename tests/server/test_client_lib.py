"""The C client library's own test program, run against a real server.

tests/server/test_client.c is built against build/client/libobjstore.a (after
`make build/client/libobjstore.a`) and run with the server's host, port and unix
socket; it must exit 0. A missing source file is a failure, not a
skip: the library must come with its test. Extra compiler flags (e.g.
sanitizer flags when the library was built with SAN=address) can be given in
OBJSTORE_CLIENT_CFLAGS.
"""

import os
import shlex
import subprocess

import pytest


REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SOURCE = os.path.join("tests", "clienttest", "test_client.c")
BINARY = os.path.join("build", "tests", "test_client")


def _run(cmd, timeout):
    return subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=timeout, text=True, errors="replace")


@pytest.fixture(scope="module")
def client_test_binary():
    if not os.path.exists(os.path.join(REPO, SOURCE)):
        pytest.fail(f"{SOURCE} does not exist: the client library has no test program yet",
                    pytrace=False)
    made = _run(["make", "build/client/libobjstore.a"], timeout=300)
    if made.returncode != 0:
        pytest.fail(f"`make build/client/libobjstore.a` failed:\n{made.stdout[-4000:]}", pytrace=False)
    os.makedirs(os.path.join(REPO, "build", "tests"), exist_ok=True)
    # The brief's command plus what test_client.c itself needs (it says so in its
    # header): -pthread, and -lxxhash for checking OBJ.INFO checksums.
    cmd = ["cc", "-std=gnu11", "-O2", "-D_GNU_SOURCE", "-pthread", "-Iclient", SOURCE,
           "build/client/libobjstore.a", "-lhiredis", "-lxxhash", "-o", BINARY]
    extra = shlex.split(os.environ.get("OBJSTORE_CLIENT_CFLAGS", ""))
    cmd[1:1] = extra
    built = _run(cmd, timeout=120)
    if built.returncode != 0:
        pytest.fail(f"`{' '.join(cmd)}` failed:\n{built.stdout[-4000:]}", pytrace=False)
    return os.path.join(REPO, BINARY)


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
