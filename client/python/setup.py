"""Build of the Python package objstore: the pure-Python layer (objstore/) and the
native core objstore._objstore, linked against the client library's static archive
(build/client/libobjstore.a, built by `make`; its objects are -fPIC) so that the
extension carries the library inside and needs only hiredis and rdma-core at run time.

OBJSTORE_ROOT (the source tree) and OBJSTORE_BUILD (its build directory) override
where the headers and the archive are taken from. Usage: client/python/README.md.
"""

import os

from setuptools import Extension, setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.environ.get("OBJSTORE_ROOT") or os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("OBJSTORE_BUILD") or os.path.join(ROOT, "build")
ARCHIVE = os.path.join(BUILD, "client", "libobjstore.a")

if not os.path.exists(ARCHIVE):
    raise SystemExit(f"objstore: {ARCHIVE} is missing: run `make` in {ROOT} first "
                     "(or `make python`, which builds it and then this package)")

# The extension is split by concern (src/module.c names the files); every .c there is one.
SRC_FILES = sorted(os.listdir(os.path.join(HERE, "src")))
SOURCES = [os.path.join("src", f) for f in SRC_FILES if f.endswith(".c")]

core = Extension(
    "objstore._objstore",
    sources=SOURCES,
    include_dirs=[ROOT, os.path.join(ROOT, "module")],  # module/: common/errwords.h
    extra_objects=[ARCHIVE],
    libraries=["hiredis", "rdmacm", "ibverbs"],
    extra_compile_args=["-std=gnu11", "-D_GNU_SOURCE", "-fvisibility=hidden", "-Wall", "-Wextra",
                        "-Wno-unused-parameter", "-Wno-missing-field-initializers",
                        "-Wno-cast-function-type"],
    depends=[ARCHIVE, os.path.join(ROOT, "client", "objstore.h"),
             os.path.join(ROOT, "client", "objclient_int.h"),
             os.path.join(ROOT, "module", "common", "errwords.h")]
    + [os.path.join(HERE, "src", f) for f in SRC_FILES if f.endswith(".h")],
)

setup(
    name="objstore",
    version="0.1.0",
    description="Zero-copy Python client of the objstore Redis module (numpy, torch, pickle 5)",
    packages=["objstore"],
    package_data={"objstore": ["py.typed", "*.pyi"]},
    ext_modules=[core],
    python_requires=">=3.9",
)
