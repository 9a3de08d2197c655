"""The error-word check's own tests: it passes the real tree, and it catches a
word the README or docs/commands.md leaves out or adds, a table row that says
another meaning, code or class than the header, a Python class that is missing
or not an ObjstoreError, an ERROR_CODES not made from the extension's list, a
hand-written one that maps a word elsewhere or knows a word the header lacks,
and a literal of the module that starts like an error reply with a word the
header lacks.

Each case copies the four files the check reads into a temporary folder,
spoils one of them and runs check_errwords.py on it as `make lint` does.
"""
import os
import shutil
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
CHECK = os.path.join(HERE, "check_errwords.py")
FILES = ["module/common/errwords.h", "README.md", "docs/commands.md",
         "client/python/objstore/__init__.py"]


def run_check(root):
    return subprocess.run([sys.executable, CHECK, str(root)], capture_output=True, text=True)


@pytest.fixture
def tree(tmp_path):
    for f in FILES:
        os.makedirs(tmp_path / os.path.dirname(f), exist_ok=True)
        shutil.copy(os.path.join(REPO, f), tmp_path / f)
    return tmp_path


def spoil(tree, name, old, new):
    path = tree / name
    text = path.read_text()
    assert old in text, f"{name} no longer holds {old!r}: update this test"
    path.write_text(text.replace(old, new, 1))


def test_the_repository_agrees_with_its_list_of_words():
    r = run_check(REPO)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_copied_tree_passes(tree):
    r = run_check(tree)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("name, old, new, says", [
    ("README.md", "TRYAGAIN ", "", "README.md: does not list TRYAGAIN"),
    ("README.md", "`BADARG ", "`BADARG WRONGTYPE ", "README.md: lists WRONGTYPE"),
    ("docs/commands.md", "| `IOERR` |", "| `IOERRS` |", "does not list IOERR"),
    ("docs/commands.md", "| the wait ran out |", "| the wait ended |", "the row of TIMEOUT"),
    ("docs/commands.md", "| `OBJ_ERR_BUSY` |", "| `OBJ_ERR_OTHER` |", "the row of BUSY"),
    ("client/python/objstore/__init__.py", "class Busy(ObjstoreError):",
     "class Busy(Exception):", "Busy (the class of BUSY) does not derive"),
    ("client/python/objstore/__init__.py", "class Busy(ObjstoreError):",
     "class Busier(ObjstoreError):", "no class Busy"),
    ("client/python/objstore/__init__.py", "_objstore.ERROR_WORDS if",
     "SOME_WORDS if", "ERROR_CODES is made neither"),
    ("client/python/objstore/__init__.py", "ERROR_CODES = {word:",
     'ERROR_CODES = {"BUSY": Unavailable, "GONE": Busy}\nX = {word:',
     "ERROR_CODES maps BUSY to Unavailable"),
    ("client/python/objstore/__init__.py", "ERROR_CODES = {word:",
     'ERROR_CODES = {"BUSY": Unavailable, "GONE": Busy}\nX = {word:', "ERROR_CODES has GONE"),
    ("module/common/errwords.h", "X(BUSY, OBJ_ERR_BUSY, Busy, NODE",
     "X(BUSY, OBJ_ERR_BUSY, Busy, CLIENT", "README.md: lists BUSY"),
])
def test_a_disagreement_is_reported(tree, name, old, new, says):
    spoil(tree, name, old, new)
    r = run_check(tree)
    assert r.returncode == 1
    assert says in r.stdout, r.stdout


def write_module_file(tree, body):
    (tree / "module" / "redis").mkdir(parents=True, exist_ok=True)
    (tree / "module" / "redis" / "x.c").write_text(body)


def test_an_error_text_with_a_word_the_list_lacks_is_reported(tree):
    write_module_file(tree, 'static void f(char *err)\n{\n'
                            '    snprintf(err, 64, "GONE the object left");\n}\n')
    r = run_check(tree)
    assert r.returncode == 1
    assert "module/redis/x.c:3: \"GONE ...\"" in r.stdout, r.stdout


def test_the_message_after_a_word_constant_is_not_a_word(tree):
    write_module_file(tree, 'static int f(RedisModuleCtx *ctx)\n{\n'
                            '    objReplyError(ctx, OBJ_EW_BADARG,\n'
                            '                  "FROM must name a node");\n'
                            '    return objReplyError(ctx, OBJ_EW_NOTFOUND, "NOTFOUND twice");\n}\n')
    r = run_check(tree)
    assert r.returncode == 0, r.stdout
