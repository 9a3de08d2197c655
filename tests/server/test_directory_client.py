"""The directory client's C test (tests/server/test_directory.c), run against a plain
redis-server started by the shared launcher.

make builds it into $OBJSTORE_BUILD/tests/server/test_directory. It gets the server's
port in $OBJSTORE_TEST_REDIS_PORT and a control channel in
$OBJSTORE_TEST_REDIS_CONTROL ("W,R", two pipe descriptors): for its outage tests
it writes "stop" or "start" (again on the same port, empty) and this file answers
"ok" or why not. It must exit 0 with every cmocka test passed; a missing binary
is a failure, not a skip.
"""

import os
import select
import subprocess
import time

import pytest

from objnodes import build_path

TIMEOUT = 120.0


def serve_control(proc, requests, answers, directory, deadline):
    """Answer the program's stop/start requests until it closes its end (it exited)
    or the deadline passes; returns the requests served."""
    served = []
    buf = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return served
        ready, _, _ = select.select([requests], [], [], min(left, 1.0))
        if not ready:
            if proc.poll() is not None:
                return served
            continue
        chunk = os.read(requests, 256)
        if not chunk:
            return served
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = line.decode(errors="replace")
            served.append(req)
            try:
                if req == "stop":
                    directory.stop()
                elif req == "start":
                    directory.start()
                else:
                    raise ValueError(f"unknown request {req!r}")
                os.write(answers, b"ok\n")
            except BaseException as e:  # pytest.fail from start() included
                os.write(answers, f"{type(e).__name__}: {e}".replace("\n", " ").encode()
                         + b"\n")


def test_directory_client_c_suite_passes(directory_redis, tmp_path):
    binary = build_path("tests", "server", "test_directory")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} is missing: build it with make (make test-server does)",
                    pytrace=False)
    req_r, req_w = os.pipe()  # the program's requests
    ans_r, ans_w = os.pipe()  # our answers
    env = dict(os.environ, OBJSTORE_TEST_REDIS_PORT=str(directory_redis.port),
               OBJSTORE_TEST_REDIS_CONTROL=f"{req_w},{ans_r}")
    out_path = tmp_path / "test_directory.out"
    with open(os.devnull, "rb") as devnull, open(out_path, "wb") as out_file:
        proc = subprocess.Popen([binary], stdin=devnull, stdout=out_file,
                                stderr=subprocess.STDOUT, env=env, pass_fds=(req_w, ans_r))
    os.close(req_w)
    os.close(ans_r)
    try:
        served = serve_control(proc, req_r, ans_w, directory_redis,
                               time.monotonic() + TIMEOUT)
        try:
            proc.wait(timeout=max(1.0, TIMEOUT / 4))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            pytest.fail(f"test_directory did not finish within {TIMEOUT:.0f}s:\n"
                        f"{out_path.read_text(errors='replace')[-4000:]}", pytrace=False)
    finally:
        os.close(req_r)
        os.close(ans_w)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = out_path.read_text(errors="replace")
    assert proc.returncode == 0, f"test_directory exited {proc.returncode}:\n{text[-4000:]}"
    assert "[  PASSED  ]" in text, text[-4000:]
    assert "FAILED" not in text, text[-4000:]
    # The outage test ran for real: the server went away and came back.
    assert "stop" in served and "start" in served, f"control requests: {served}"
    assert directory_redis.alive(), "the directory redis-server is down after the suite"
