"""Readers apart from writers (docs/security.md): who may map the arena, and how.

The node makes its arena file with `arena-mode`; the file takes the group of a
set-group-ID arena directory. A client of that group whose mode grants only read
maps the arena read-only (a write through a pinned view faults, creating is
refused with READONLY), a group the directory's default ACL lets write creates in
place (arena-mode 0660; without such an ACL the node refuses 0660), and a user in
neither group cannot map it and works as a remote client (copying get/put).
The clients run as `nobody` with one group (setpriv), through the C library
(tests/lib/arena_role.py); the server runs as root. A bad arena-mode refuses to load.
"""

import os
import shutil
import stat
import struct
import subprocess
import sys
import tempfile

import pytest

from objhelpers import stats
from objnodes import REPO, shm_base

GROUP = 65534  # the clients' group when they should reach the arena
OTHER_GROUP = 65533  # a group the arena directory does not name
ROLE = os.path.join(REPO, "tests", "lib", "arena_role.py")
# The normal build's library: a sanitizer build's would need its runtime preloaded.
LIB = os.path.join(REPO, "build", "client", "libobjstore.so")

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="needs root and setpriv to run clients as another user")


@pytest.fixture
def shared_arena_dir():
    """A set-group-ID arena directory of group GROUP that the group may enter."""
    d = tempfile.mkdtemp(prefix="objstore-it-shared-", dir=shm_base())
    os.chown(d, 0, GROUP)
    os.chmod(d, 0o2750)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def role(port, name, oid, gid):
    """Run arena_role.py as nobody with the one group gid; its (exit code, output)."""
    cmd = ["setpriv", "--reuid=65534", f"--regid={gid}", "--clear-groups", sys.executable, ROLE,
           LIB, "127.0.0.1", str(port), name, oid]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       errors="replace", timeout=60)
    return p.returncode, p.stdout


def test_reader_maps_read_only_writer_creates_and_others_go_remote(make_server, shared_arena_dir):
    d = shared_arena_dir
    s = make_server(module_args=["arena-dir", d, "arena-mode", "0640"])
    c = s.client()
    c.execute_command("OBJ.PUT", "seen-by-reader", b"objstore-reader-check")
    st = os.stat(stats(c)["arena_path"])
    assert stat.S_IMODE(st.st_mode) == 0o640 and st.st_gid == GROUP, (oct(st.st_mode), st.st_gid)

    rc, out = role(s.port, "reader", "seen-by-reader", GROUP)
    assert rc == 0 and "reader-ok" in out, out
    rc, out = role(s.port, "remote", "seen-by-reader", OTHER_GROUP)
    assert rc == 0 and "remote-ok" in out, out
    # The reader's failed write changed nothing the server holds.
    assert c.execute_command("OBJ.GET", "seen-by-reader") == b"objstore-reader-check"


def posix_acl(entries):
    """The system.posix_acl_* xattr value of entries [(tag, perm, id)] (linux/posix_acl_xattr.h)."""
    out = struct.pack("<I", 2)
    for tag, perm, qid in entries:
        out += struct.pack("<HHI", tag, perm, qid)
    return out


USER_OBJ, GROUP_OBJ, NAMED_GROUP, MASK, OTHER = 0x01, 0x04, 0x08, 0x10, 0x20
NO_ID = 0xFFFFFFFF


def test_writer_group_creates_in_place_with_arena_mode_0660_and_a_default_acl(
        make_server, shared_arena_dir):
    """As /usr/lib/tmpfiles.d/redis-objstore.conf sets up /run/objstore: the directory's
    group reads, a named group (here OTHER_GROUP) writes through the default ACL."""
    d = shared_arena_dir
    os.setxattr(d, "system.posix_acl_access", posix_acl([
        (USER_OBJ, 7, NO_ID), (GROUP_OBJ, 5, NO_ID), (NAMED_GROUP, 5, OTHER_GROUP),
        (MASK, 5, NO_ID), (OTHER, 0, NO_ID)]))
    os.setxattr(d, "system.posix_acl_default", posix_acl([
        (USER_OBJ, 6, NO_ID), (GROUP_OBJ, 4, NO_ID), (NAMED_GROUP, 6, OTHER_GROUP),
        (MASK, 6, NO_ID), (OTHER, 0, NO_ID)]))
    old = os.umask(0o007)  # as Debian's redis-server.service (UMask=007): the umask applies
    try:
        s = make_server(module_args=["arena-dir", d, "arena-mode", "0660"])
    finally:
        os.umask(old)
    rc, out = role(s.port, "writer", "made-by-writer", OTHER_GROUP)
    assert rc == 0 and "writer-ok" in out, out
    assert s.client().execute_command("OBJ.GET", "made-by-writer") == b"objstore-reader-check"
    rc, out = role(s.port, "reader", "made-by-writer", GROUP)
    assert rc == 0 and "reader-ok" in out, out


def test_arena_mode_0660_without_a_default_acl_refuses_to_load(make_server, shared_arena_dir):
    """Else the file's whole group, the readers, could write every object."""
    old = os.umask(0o007)
    try:
        s = make_server(module_args=["arena-dir", shared_arena_dir, "arena-mode", "0660"],
                        start=False)
        ready, log = s.try_start()
    finally:
        os.umask(old)
    if ready:
        s.stop()
    assert not ready, "a 0660 arena without an ACL was created"
    assert "no default ACL" in log, log[-2000:]


@pytest.mark.parametrize("mode", ["0644", "0666", "0700", "0620", "640x", "06400"])
def test_bad_arena_mode_refuses_to_load(make_server, mode):
    s = make_server(module_args=["arena-mode", mode], start=False)
    ready, log = s.try_start()
    if ready:
        s.stop()
    assert not ready, f"server started with arena-mode {mode!r}"
