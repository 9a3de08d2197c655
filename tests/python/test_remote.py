"""Remote mode: a client that cannot map the node's arena (here: a process without
permission to open the arena file; or zero_copy=False) works through copies with the
same API, and says so (client.zero_copy is False)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import objstore
from pyhelpers import arena_path, pins

REMOTE_SCRIPT = textwrap.dedent("""
    import sys, numpy as np, objstore
    port, oid = int(sys.argv[1]), bytes.fromhex(sys.argv[2])
    c = objstore.connect("127.0.0.1", port)
    assert c.zero_copy is False, "the arena must not be mappable here"
    try:
        objstore.connect("127.0.0.1", port, zero_copy=True)
        raise SystemExit("zero_copy=True connected without the arena")
    except objstore.ZeroCopyUnavailable as e:
        assert "arena" in str(e)
    c.put(oid, np.arange(10, dtype=np.float64).reshape(2, 5))
    a = c.get(oid)
    assert a.shape == (2, 5) and a[1, 4] == 9 and not a.flags.writeable
    with c.create(oid + b":c", 3) as mv:
        mv[:] = b"abc"
    assert bytes(c.get(oid + b":c")) == b"abc"
    c.put_object(oid + b":o", {"w": np.ones(4)})
    assert c.get_object(oid + b":o")["w"].sum() == 4
    assert c.info(oid)["pins"] == 0, "copies hold no pins"
    assert c.delete(oid + b":c") == "OK"
    print("remote ok", flush=True)
""")


def _demote():
    os.setgid(65534)
    os.setuid(65534)


def _nobody_can_run_python():
    """Whether user nobody can import this interpreter's objstore (the checkout may live
    in a directory only root can enter)."""
    try:
        p = subprocess.run([sys.executable, "-c", "import objstore, numpy"], capture_output=True,
                           timeout=60, preexec_fn=_demote, cwd="/")
    except OSError:
        return False
    return p.returncode == 0


def _client_command(path, script_args):
    """The command line of a client process that cannot open the arena file at path.
    Not root: the file's mode is taken away (by the caller). Root opens any file: the
    client runs as nobody when nobody can run it; else in a mount namespace of its own
    where an empty tmpfs hides the arena's directory."""
    argv = [sys.executable, "-c", REMOTE_SCRIPT, *script_args]
    if os.geteuid() != 0:
        return argv, {}
    assert os.stat(os.path.dirname(path)).st_mode & 0o077 == 0, "the arena dir is private"
    if _nobody_can_run_python():
        return argv, dict(preexec_fn=_demote, cwd="/")
    hide = 'mount -t tmpfs objstore-hidden "$0" && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", hide,
            os.path.dirname(path), *argv], {}


def test_client_without_access_to_the_arena_copies(server, rc, uid):
    path = arena_path(rc)
    argv, run = _client_command(path, [str(server.port), uid.hex()])
    if os.geteuid() != 0:
        os.chmod(path, 0)
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=120, **run)
    finally:
        if os.geteuid() != 0:
            os.chmod(path, 0o600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "remote ok" in p.stdout


def test_forced_copies_have_the_same_api(server, rc, uid):
    with objstore.connect("127.0.0.1", server.port, zero_copy=False) as c:
        assert c.zero_copy is False
        c.put(uid, np.arange(6, dtype=np.int16))
        a = c.get(uid)
        assert a.tolist() == list(range(6)) and not a.flags.writeable
        buf = c.pin(uid)
        assert buf.zero_copy is False and not buf.pinned
        assert pins(rc, uid) == 0
        with pytest.raises(ValueError):
            a[0] = 1
        del a, buf


def test_url_can_force_copies(server):
    with objstore.connect(f"objstore://127.0.0.1:{server.port}?zero_copy=0") as c:
        assert c.zero_copy is False
