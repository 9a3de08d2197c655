"""Views inherited across fork: the child holds none of the parent's pins, so once the
parent lets an object go its range may hold another object. The child must never read
that silently: touching an inherited view faults with a message naming the cause, and
new views of an inherited Buffer raise ClientForked."""

import gc
import os
import signal
import subprocess
import sys

import objstore


def _fork(child):
    """Run child() in a forked process with stderr to a pipe; it must end the process.
    Returns a function that waits: (status, stderr text)."""
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(rd)
            os.dup2(wr, 2)
            child()
        finally:
            os._exit(99)
    os.close(wr)

    def wait():
        _, status = os.waitpid(pid, 0)
        with os.fdopen(rd, "rb") as f:
            return status, f.read().decode(errors="replace")
    return wait


# Run by a child interpreter (without faulthandler, whose report of the child's fault
# would only repeat ours): fork with a view alive, let the object go in the parent and
# put another into its range, then the forked child reads its inherited view.
ALIAS_SCRIPT = r"""
import gc, os, sys
import objstore
port, a, b = int(sys.argv[1]), sys.argv[2].encode(), sys.argv[3].encode()
c = objstore.connect("127.0.0.1", port)
c.put(a, b"A" * 4096)
view = c.get(a)
offset = c.info(a)["offset"]
go_r, go_w = os.pipe()
pid = os.fork()
if pid == 0:
    os.read(go_r, 1)
    first = bytes(view[:4])
    os._exit(3 if first == b"BBBB" else 4 if first == b"AAAA" else 5)
del view
gc.collect()
assert c.delete(a) == "OK", "the parent's pin is gone: the range is free"
c.put(b, b"B" * 4096)
assert c.info(b)["offset"] == offset, "precondition: b reuses a's range"
os.write(go_w, b"x")
_, status = os.waitpid(pid, 0)
assert bytes(c.get(b)) == b"B" * 4096, "the parent's client still works"
print("status", status, flush=True)
"""


def test_inherited_view_never_shows_the_object_that_reused_its_range(make_server):
    node = make_server(memory="16mb")
    p = subprocess.run([sys.executable, "-c", ALIAS_SCRIPT, str(node.port),
                        "fork-a", "fork-b"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    status = int(p.stdout.split("status", 1)[1])
    assert not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 3), \
        "the child read another object's bytes through its inherited view"
    # SIGSEGV; under ASan (libasan preloaded) its report of the SEGV and exit status 1
    faulted = (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSEGV) or (
        os.WIFEXITED(status) and os.WEXITSTATUS(status) not in (0, 3, 4, 5)
        and "AddressSanitizer: SEGV" in p.stderr)
    assert faulted, (status, p.stderr)
    assert "inherited across fork" in p.stderr, p.stderr


def test_new_views_of_an_inherited_buffer_raise_client_forked(oc, uid):
    oc.put(uid, b"x" * 64)
    buf = oc.pin(uid)

    def child():
        codes = 0
        for make in (memoryview, lambda b: b.__dlpack__()):
            try:
                make(buf)
            except objstore.ClientForked as e:
                codes += "after fork" in str(e)
        os._exit(10 + codes)

    status, err = _fork(child)()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 12, (status, err)
    assert bytes(memoryview(buf)) == b"x" * 64, "the parent's Buffer is untouched"
    buf.release()
