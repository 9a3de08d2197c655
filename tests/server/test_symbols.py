"""What the two modules import, and where each may load.

objstore.so uses the module API only: every symbol it imports is defined by one of
the libraries it names (DT_NEEDED), never by the server, so it loads into Redis 7.0,
Redis 8.0 and Valkey alike. objstore-rdma.so (the RDMA door) imports the server's
internals, but only weakly and only those listed in module/door/serversyms.h, so that
on another server it loads far enough to refuse with a clear message. The last tests
load the door into the server under test ($OBJSTORE_SERVER): Redis of the version it
was built against keeps it loaded; any other server refuses it and names itself.
"""

import os
import re
import subprocess
import time

import pytest

from objnodes import BUILD, MODULE, OBJSTORE_SERVER, REPO, free_port

DOOR_MODULE = os.environ.get("OBJSTORE_DOOR_MODULE") or os.path.join(BUILD, "objstore-rdma.so")
TOOLCHAIN_WEAK = {"_ITM_deregisterTMCloneTable", "_ITM_registerTMCloneTable", "__gmon_start__",
                  "__cxa_finalize"}


def undefined(path):
    """{name: kind} of the dynamic symbols path imports (kind "U" or "w"), versions cut."""
    out = subprocess.run(["nm", "-D", "--undefined-only", path], check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    syms = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            syms[parts[1].split("@")[0]] = parts[0]
    return syms


def defined_by_needed(path):
    """Every dynamic symbol defined by the libraries path needs (ldd's resolution)."""
    out = subprocess.run(["ldd", path], check=True, stdout=subprocess.PIPE, text=True).stdout
    libs = re.findall(r"=>\s+(/\S+)", out)
    assert libs, f"ldd found no libraries for {path}:\n{out}"
    names = set()
    for lib in libs:
        out = subprocess.run(["nm", "-D", "--defined-only", lib], check=True,
                             stdout=subprocess.PIPE, text=True).stdout
        names.update(line.split()[-1].split("@")[0] for line in out.splitlines() if line.split())
    return names


def server_symbols():
    with open(os.path.join(REPO, "module", "door", "serversyms.h")) as f:
        return set(re.findall(r"^DOOR_SERVER_SYM\((\w+)\)$", f.read(), re.M))


def test_objstore_imports_nothing_from_the_server():
    imports = {n for n, k in undefined(MODULE).items() if k == "U"}
    from_server = sorted(imports - defined_by_needed(MODULE))
    assert from_server == [], f"objstore.so imports symbols no library of its own defines " \
        f"(the server's internals?): {from_server}"


def test_objstore_has_no_weak_server_imports():
    weak = {n for n, k in undefined(MODULE).items() if k == "w"} - TOOLCHAIN_WEAK
    assert weak == set()


def test_door_imports_the_server_only_weakly_and_only_its_list():
    syms = undefined(DOOR_MODULE)
    strong = {n for n, k in syms.items() if k == "U"}
    assert sorted(strong - defined_by_needed(DOOR_MODULE)) == [], \
        "a strong import of objstore-rdma.so that no library defines: add it to " \
        "module/door/serversyms.h"
    weak = {n for n, k in syms.items() if k == "w"} - TOOLCHAIN_WEAK
    assert weak == server_symbols()


def built_for():
    """The Redis version conntype.c was built against (its headers' version.h)."""
    with open(os.path.join(REPO, "build", "redis-server-src", "src", "version.h")) as f:
        return re.search(r'REDIS_VERSION "([^"]+)"', f.read()).group(1)


def server_identity():
    """(name, version) of $OBJSTORE_SERVER from its --version line."""
    out = subprocess.run([OBJSTORE_SERVER, "--version"], check=True, stdout=subprocess.PIPE,
                         text=True).stdout
    m = re.match(r"(\w+) server v=(\S+)", out, re.I)
    assert m, out
    return m.group(1).lower(), m.group(2)


def run_with_door(tmp_path, *door_args):
    """Start $OBJSTORE_SERVER with only the door loaded; stop it once its log says
    whether the module loaded. Returns the log."""
    port = free_port()
    log = tmp_path / "door.log"
    cmd = [OBJSTORE_SERVER, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
           "--dir", str(tmp_path), "--logfile", str(log), "--loadmodule", DOOR_MODULE,
           *door_args]
    env = dict(os.environ)
    if os.environ.get("OBJSTORE_PRELOAD"):  # a sanitizer build's runtime, as the launcher does
        env["LD_PRELOAD"] = os.environ["OBJSTORE_PRELOAD"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        for _ in range(300):
            text = log.read_text(errors="replace") if log.exists() else ""
            if "loaded from" in text or "Module not loaded" in text or p.poll() is not None:
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the server said nothing of the module:\n{text}")
    finally:
        if p.poll() is None:
            p.terminate()
        p.wait(timeout=30)
    return log.read_text(errors="replace")


def test_door_loads_only_into_the_redis_it_was_built_for(tmp_path):
    name, version = server_identity()
    text = run_with_door(tmp_path, "port", "0")
    if name == "redis" and version == built_for():
        assert "Module 'objstore-rdma' loaded" in text, text
        assert "RDMA clients are off: objstore-rdma.port is 0" in text, text
    else:
        assert f"refusing to load: this server is {name} {version}; objstore-rdma.so was " \
            f"built against the internals of Redis {built_for()}" in text, text
        assert "Module not loaded" in text
