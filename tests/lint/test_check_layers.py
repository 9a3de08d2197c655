"""The layering check's own tests: it passes the real tree, and it catches an
upward include, Redis's headers outside the Redis layer, a bare include of
another folder's header, an unknown component, a circle in the rules, and
Redis's core headers anywhere but the RDMA connection type (which in turn must
not see the module API); and below the folders, a circle between .c files
through the functions and globals they define, while a one-way use, a static
of the same name, a struct member of the same name, a string or a comment are
no use at all.

Each case builds a small tree in a temporary folder with the real
tests/lint/layers file and runs check_layers.py on it as `make lint` does.
"""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
CHECK = os.path.join(HERE, "check_layers.py")


def run_check(root):
    return subprocess.run([sys.executable, CHECK, root], capture_output=True, text=True)


@pytest.fixture
def tree(tmp_path):
    """A minimal clean tree: store/objtable.h, transfer/engine.c including it."""
    os.makedirs(tmp_path / "tests" / "lint")
    shutil.copy(os.path.join(HERE, "layers"), tmp_path / "tests" / "lint" / "layers")
    files = {
        "module/store/objtable.h": "#include <stdint.h>\n",
        "module/store/objtable.c": '#include "objtable.h"\n',
        "module/transfer/engine.h": '#include "store/objtable.h"\n',
        "module/transfer/engine.c": '#include "engine.h"\n#include "store/objtable.h"\n',
        "module/redis/module.c": '#include "redismodule.h"\n#include "transfer/engine.h"\n',
    }
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def add(root, rel, text):
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_the_real_tree_follows_the_layers():
    r = run_check(REPO)
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_clean_tree_passes(tree):
    r = run_check(str(tree))
    assert r.returncode == 0, r.stdout
    assert "every include follows" in r.stdout


def test_an_upward_include_is_caught(tree):
    add(tree, "module/store/alloc.c", '#include "transfer/engine.h"\n')
    r = run_check(str(tree))
    assert r.returncode == 1
    assert "module/store/alloc.c:1: includes \"transfer/engine.h\": store may not depend on transfer" \
        in r.stdout


def test_a_sideways_include_is_caught(tree):
    add(tree, "module/directory/directory.c", '#include "store/objtable.h"\n')
    r = run_check(str(tree))
    assert r.returncode == 1
    assert "directory may not depend on store" in r.stdout


def test_redismodule_h_below_the_redis_layer_is_caught(tree):
    add(tree, "module/transfer/fetch.c", '#include <stdio.h>\n#include "redismodule.h"\n')
    r = run_check(str(tree))
    assert r.returncode == 1
    assert "module/transfer/fetch.c:2:" in r.stdout and "Redis's headers" in r.stdout


def test_a_bare_include_of_another_folders_header_is_caught(tree):
    add(tree, "module/transfer/serve.c", '#include "objtable.h"\n')
    r = run_check(str(tree))
    assert r.returncode == 1
    assert "not in its own folder" in r.stdout


def test_an_unknown_component_is_caught(tree):
    add(tree, "module/store/x.c", '#include "nowhere/x.h"\n')
    r = run_check(str(tree))
    assert r.returncode == 1
    assert "'nowhere' is not a component" in r.stdout


def test_the_client_may_not_include_the_module_layers(tree):
    add(tree, "client/objstore.c", '#include "transfer/engine.h"\n')
    r = run_check(str(tree))
    assert r.returncode == 1
    assert "client may not depend on transfer" in r.stdout


def test_a_circle_in_the_rules_is_caught(tree):
    layers = tree / "tests" / "lint" / "layers"
    layers.write_text(layers.read_text().replace("store:     common", "store:     common redis"))
    r = run_check(str(tree))
    assert r.returncode == 1
    assert "form a circle" in r.stdout


def test_core_headers_only_in_the_connection_type(tree):
    add(tree, "module/redis/commands.c", '#include "server.h"\n')
    r = run_check(str(tree))
    assert r.returncode == 1
    assert "commands.c:1" in r.stdout and "core" in r.stdout


def test_the_connection_type_does_not_see_the_module_api(tree):
    add(tree, "module/door/door.h", '#include "redismodule.h"\n')
    add(tree, "module/door/conntype.h", "#include <stdint.h>\n")
    add(tree, "module/door/conntype.c",
        '#include "server.h"\n#include "conntype.h"\n#include "door.h"\n')
    r = run_check(str(tree))
    assert r.returncode == 1
    assert "conntype.c:3" in r.stdout and "conntype.c:2" not in r.stdout


# ---- circles between files ----------------------------------------------------

ENGINE_C = """#include "engine.h"
/* engine.c - calls fetchRun (this comment names it: no use) */
static int ticks;
int engineSend(int x) { return x + ticks; }
"""


def test_files_that_use_each_other_are_a_circle(tree):
    add(tree, "module/transfer/engine.c", ENGINE_C + "int engineRun(void) { return fetchRun(); }\n")
    add(tree, "module/transfer/fetch.c",
        '#include "engine.h"\nint fetchRun(void)\n{\n    return engineSend(1);\n}\n')
    r = run_check(str(tree))
    assert r.returncode == 1, r.stdout
    assert "2 files use each other in a circle: module/transfer/engine.c, " \
        "module/transfer/fetch.c" in r.stdout
    assert "module/transfer/engine.c -> module/transfer/fetch.c: fetchRun" in r.stdout
    assert "module/transfer/fetch.c -> module/transfer/engine.c: engineSend" in r.stdout


def test_a_circle_through_a_global_and_a_third_file_is_caught(tree):
    add(tree, "module/redis/module.c", "int objNode;\nvoid start(void) { replyOk(); }\n")
    add(tree, "module/redis/reply.c", "void replyOk(void) { statsAdd(); }\n")
    add(tree, "client/stats.c", "void statsAdd(void) { objNode++; }\n")
    r = run_check(str(tree))
    assert r.returncode == 1, r.stdout
    assert "3 files use each other in a circle" in r.stdout
    assert "client/stats.c -> module/redis/module.c: objNode" in r.stdout


def test_a_one_way_use_passes(tree):
    add(tree, "module/transfer/engine.c", ENGINE_C)
    add(tree, "module/transfer/fetch.c",
        '#include "engine.h"\nint fetchRun(void)\n{\n    return engineSend(1);\n}\n')
    r = run_check(str(tree))
    assert r.returncode == 0, r.stdout
    assert "no circle between files" in r.stdout


def test_statics_members_and_strings_are_no_use(tree):
    add(tree, "module/transfer/engine.c", ENGINE_C +
        "struct S { int (*fetchRun)(void); };\n"
        "int engineCall(struct S *s) { return s->fetchRun() + (*s).fetchRun(); }\n"
        'const char *engineName = "fetchRun";\n')
    add(tree, "module/transfer/fetch.c", "static int engineSend(int x) { return x; }\n"
        "int fetchRun(void) { return engineSend(2); }\n")
    r = run_check(str(tree))
    assert r.returncode == 0, r.stdout
