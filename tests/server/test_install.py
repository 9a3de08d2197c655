"""`make install` as a user of the client library meets it.

One module-scoped `make install DESTDIR=<tmp>` (PREFIX /usr/local) of the build
the suite runs against (build/, or build/san-<name>/ when OBJSTORE_BUILD names a
sanitizer build); then the installed tree is checked: the module, the versioned
shared library and its links, the headers, an objstore.pc that names the prefix
and not the staging directory, a shared library that exports exactly the
functions its headers declare, and client/examples/hello.c built with
`pkg-config --cflags --libs objstore` against the staged tree and run against a
node that loads the installed module.
"""

import os
import re
import subprocess

import pytest

from objnodes import BUILD, REPO, ObjstoreServer, finish

PREFIX = "/usr/local"
LIBDIR = PREFIX + "/lib"
HEADERS = ("objstore.h", "rdmaconn.h")


def header_version():
    with open(os.path.join(REPO, "client", "objstore.h")) as f:
        return re.search(r'#define OBJSTORE_VERSION_STRING "([0-9.]+)"', f.read()).group(1)


def run(cmd, env=None, timeout=300):
    """Run cmd; fail the test with its output when it exits non-zero."""
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       errors="replace", env=env, timeout=timeout)
    if p.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-4000:]}", pytrace=False)
    return p.stdout


def staged(root, path):
    return os.path.join(root, path.lstrip("/"))


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """The staging root of `make install DESTDIR=<root> PREFIX=/usr/local`."""
    root = str(tmp_path_factory.mktemp("destdir"))
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    san = os.path.basename(os.path.normpath(BUILD))
    args = [f"SAN={san[len('san-'):]}"] if san.startswith("san-") else []
    run(["make", "-C", REPO, "--no-print-directory", "install", f"DESTDIR={root}",
         f"PREFIX={PREFIX}", *args], env=env)
    return root


def test_install_lays_out_module_library_headers_and_pc(installed):
    version = header_version()
    lib = staged(installed, LIBDIR)
    real = f"libobjstore.so.{version}"
    soname = "libobjstore.so." + version.split(".")[0]
    expected = [f"{LIBDIR}/redis/modules/objstore.so", f"{LIBDIR}/libobjstore.a",
                f"{LIBDIR}/{real}", f"{LIBDIR}/pkgconfig/objstore.pc",
                *(f"{PREFIX}/include/objstore/{h}" for h in HEADERS)]
    missing = [p for p in expected if not os.path.isfile(staged(installed, p))]
    assert not missing, f"make install did not install {missing}"
    assert os.readlink(os.path.join(lib, soname)) == real
    assert os.readlink(os.path.join(lib, "libobjstore.so")) == soname
    dyn = run(["readelf", "-d", os.path.join(lib, real)])
    assert f"Library soname: [{soname}]" in dyn


def test_installed_pc_names_the_prefix_not_the_staging_dir(installed):
    with open(staged(installed, f"{LIBDIR}/pkgconfig/objstore.pc")) as f:
        pc = f.read()
    assert f"prefix={PREFIX}\n" in pc
    assert f"Version: {header_version()}\n" in pc
    assert installed not in pc and REPO not in pc, pc


def test_shared_library_exports_exactly_the_declared_api(installed):
    declared = set()
    for h in HEADERS:
        with open(staged(installed, f"{PREFIX}/include/objstore/{h}")) as f:
            declared |= set(re.findall(r"^[A-Za-z][^\n(]*?\b(obj[A-Z]\w*)\(", f.read(), re.M))
    real = staged(installed, f"{LIBDIR}/libobjstore.so.{header_version()}")
    out = run(["nm", "-D", "--defined-only", real])
    exported = {line.split()[-1].split("@")[0] for line in out.splitlines()
                if line.split()[1] in "TDBRW" and not line.split()[-1].startswith("OBJSTORE_")}
    assert "objClientConnect" in declared and "objSetAllocators" in declared
    assert exported == declared, (f"exported but not declared: {sorted(exported - declared)}; "
                                  f"declared but not exported: {sorted(declared - exported)}")


class InstalledServer(ObjstoreServer):
    """A node that loads the module from the staged install instead of the build tree."""

    def __init__(self, module, **kw):
        super().__init__(**kw)
        self.module = module

    def command_line(self, port):
        cmd = super().command_line(port)
        cmd[cmd.index("--loadmodule") + 1] = self.module
        return cmd


def test_hello_built_with_pkg_config_runs_against_the_installed_node(installed, tmp_path):
    env = dict(os.environ, PKG_CONFIG_SYSROOT_DIR=installed,
               PKG_CONFIG_PATH=staged(installed, f"{LIBDIR}/pkgconfig"))
    flags = run(["pkg-config", "--cflags", "--libs", "objstore"], env=env).split()
    assert f"-I{staged(installed, PREFIX + '/include/objstore')}" in flags, flags
    hello = str(tmp_path / "hello")
    run(["cc", "-o", hello, os.path.join(REPO, "client", "examples", "hello.c"), *flags])
    assert "(NEEDED)             Shared library: [libobjstore.so.0]" in run(["readelf", "-d", hello])

    srv = InstalledServer(staged(installed, f"{LIBDIR}/redis/modules/objstore.so"),
                          memory="16mb", name="installed")
    try:
        srv.start()
        run_env = dict(os.environ, LD_LIBRARY_PATH=staged(installed, LIBDIR))
        if os.environ.get("OBJSTORE_PRELOAD"):  # a sanitizer build's runtime comes first
            run_env["LD_PRELOAD"] = os.environ["OBJSTORE_PRELOAD"]
        ldd = run(["ldd", hello], env=run_env)
        assert f"libobjstore.so.0 => {staged(installed, LIBDIR)}/libobjstore.so.0" in ldd, ldd
        out = run([hello, "127.0.0.1", str(srv.port)], env=run_env, timeout=60)
        assert "all steps worked" in out, out
        assert srv.alive()
    finally:
        finish([srv])
