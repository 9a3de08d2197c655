#!/usr/bin/python3
"""check_errwords.py - fail when a list of error code words disagrees with the one list.

Usage: check_errwords.py [ROOT]   (ROOT defaults to the repository)

The list is ROOT/module/common/errwords.h (its OBJ_ERR_WORDS X-macro: word,
ObjErr code, Python class, origin, meaning). Checked against it:
  - README.md: the paragraph that speaks of the "code word" names, in code
    spans, exactly the words a node answers (origin NODE);
  - docs/commands.md: the table under "Error code words" has one row per
    NODE word, in the header's order, with the header's meaning (code spans
    aside), ObjErr code and Python class;
  - client/python/objstore/__init__.py: every class the list names is
    there and derives from ObjstoreError, and ERROR_CODES is made from the
    extension's ERROR_WORDS (the list, compiled in); a hand-written
    ERROR_CODES must map every word whose class is not the base to that
    class, and nothing else;
  - the module's sources (module/**/*.c): a string literal that starts with
    an uppercase word and a blank (how every error reply and every error
    text kept for a later reply starts) names a word of the list, or one of
    NOT_ERROR_WORDS; the message of objReplyError/objErrFormat, which follows
    its OBJ_EW_ constant, is not such a start.
Prints one line per disagreement and exits 1 if there is any, 0 otherwise.
"""
import ast
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import errwords  # noqa: E402 - tests/lib, after the path is set
from errwords import HEADER  # noqa: E402

PYINIT = os.path.join("client", "python", "objstore", "__init__.py")
BASE_CLASS = "ObjstoreError"
# Uppercase words that start a literal of the module without starting an error
# reply: commands the directory client sends and Redis's redirections
# (directory/), Redis's own ERR (cmdtable.c), the names of the transfer wire's
# messages and errors in its log lines (transfer/wire.c, engine.c; a peer's AUTH
# error ends the session, never a fetch), and the RDMA log prefix.
NOT_ERROR_WORDS = {
    "ASK", "MOVED", "CLUSTER", "CONFIG", "AUTH", "ERR",
    "HELLO", "FETCH", "FETCHR", "DATA", "RNDV", "PART", "RPART", "REPL", "HELD", "ERROR", "RDMA",
}
LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
MESSAGE_ARG = re.compile(r"OBJ_EW_\w+\s*,\s*$")


def read_words(root):
    """[(word, code, pyClass, origin, meaning)] of the header, in its order."""
    try:
        return [tuple(w) for w in errwords.read_words(root)]
    except ValueError as e:
        sys.exit(str(e))


def plain(cell):
    """A Markdown cell without its code-span backticks and outer blanks."""
    return cell.replace("`", "").strip()


def check_readme(root, node_words):
    path = os.path.join(root, "README.md")
    with open(path) as f:
        paragraphs = f.read().split("\n\n")
    para = next((p for p in paragraphs if "code word" in p), None)
    if para is None:
        return [f"README.md: no paragraph speaks of the error \"code word\"s"]
    spans = re.findall(r"`([^`]*)`", para)
    listed = [w for s in spans for w in re.findall(r"\b[A-Z][A-Z_]+\b", s)]
    return compare("README.md", listed, node_words)


def compare(where, listed, words):
    problems = []
    for w in words:
        if w not in listed:
            problems.append(f"{where}: does not list {w} ({HEADER} does)")
    for w in listed:
        if w not in words:
            problems.append(f"{where}: lists {w}, which {HEADER} does not have")
    dups = sorted({w for w in listed if listed.count(w) > 1})
    if dups:
        problems.append(f"{where}: lists {' '.join(dups)} more than once")
    return problems


def check_commands(root, node_rows):
    path = os.path.join(root, "docs", "commands.md")
    with open(path) as f:
        lines = f.read().splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.startswith("#") and "Error code words" in l)
    except StopIteration:
        return ["docs/commands.md: no \"Error code words\" heading"]
    table = []
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            table.append([plain(c) for c in line.strip().strip("|").split("|")])
    rows = table[1:]  # the first row is the header
    where = "docs/commands.md (Error code words)"
    problems = compare(where, [r[0] for r in rows], [r[0] for r in node_rows])
    want = {r[0]: r for r in node_rows}
    for cells in rows:
        if cells[0] not in want:
            continue
        _, code, py, _, meaning = want[cells[0]]
        if cells[1:] != [meaning, code, py]:
            problems.append(f"{where}: the row of {cells[0]} says {cells[1:]}, "
                            f"{HEADER} says {[meaning, code, py]}")
    if not problems and [r[0] for r in rows] != [r[0] for r in node_rows]:
        problems.append(f"{where}: the rows are not in {HEADER}'s order")
    return problems


def derives_from_base(name, bases):
    """Whether class name (of bases: class -> its base names) derives from BASE_CLASS."""
    seen = set()
    while name not in seen:
        if name == BASE_CLASS:
            return True
        seen.add(name)
        parents = [b for b in bases.get(name, ()) if b in bases]
        if not parents:
            return False
        name = parents[0]
    return False


def check_python(root, rows):
    path = os.path.join(root, PYINIT)
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    bases = {n.name: [b.id for b in n.bases if isinstance(b, ast.Name)]
             for n in tree.body if isinstance(n, ast.ClassDef)}
    problems = []
    for word, _, py, _, _ in rows:
        if py not in bases:
            problems.append(f"{PYINIT}: no class {py} (the class of {word} in {HEADER})")
        elif not derives_from_base(py, bases):
            problems.append(f"{PYINIT}: {py} (the class of {word}) does not derive from "
                            f"{BASE_CLASS}")
    value = next((n.value for n in tree.body if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "ERROR_CODES" for t in n.targets)),
                 None)
    if value is None:
        return problems + [f"{PYINIT}: no ERROR_CODES"]
    if isinstance(value, ast.Dict):
        return problems + check_python_table(value, rows)
    if "ERROR_WORDS" not in ast.unparse(value):
        problems.append(f"{PYINIT}: ERROR_CODES is made neither from _objstore.ERROR_WORDS "
                        f"(the extension's copy of {HEADER}) nor written out as a table")
    return problems


def check_python_table(value, rows):
    """A hand-written ERROR_CODES {word: class} against the header."""
    table = {k.value: v.id for k, v in zip(value.keys, value.values)
             if isinstance(k, ast.Constant) and isinstance(v, ast.Name)}
    problems = []
    for word, _, py, _, _ in rows:
        if py == BASE_CLASS and word in table:
            problems.append(f"{PYINIT}: ERROR_CODES maps {word} to {table[word]}, "
                            f"{HEADER} to the base {BASE_CLASS}")
        elif py != BASE_CLASS and table.get(word) != py:
            problems.append(f"{PYINIT}: ERROR_CODES maps {word} to {table.get(word)}, "
                            f"{HEADER} to {py}")
    known = {r[0] for r in rows}
    for word in table:
        if word not in known:
            problems.append(f"{PYINIT}: ERROR_CODES has {word}, which {HEADER} does not have")
    return problems


def check_sources(root, words):
    """Literals of module/ that start with an uppercase word the list lacks."""
    problems = []
    known = set(words) | NOT_ERROR_WORDS
    for dirpath, _, files in sorted(os.walk(os.path.join(root, "module"))):
        for name in sorted(files):
            if not name.endswith(".c"):
                continue
            path = os.path.join(dirpath, name)
            with open(path, errors="replace") as f:
                text = f.read()
            for m in LITERAL.finditer(text):
                w = re.match(r"([A-Z][A-Z]+) ", m.group(1))
                if not w or w.group(1) in known:
                    continue
                if MESSAGE_ARG.search(text[max(0, m.start() - 80):m.start()]):
                    continue  # the message after objReplyError's word
                line = text.count("\n", 0, m.start()) + 1
                rel = os.path.relpath(path, root)
                problems.append(f"{rel}:{line}: \"{w.group(1)} ...\" starts like an error reply; "
                                f"{w.group(1)} is not in {HEADER} (add it there, with the docs, "
                                f"or to NOT_ERROR_WORDS in tests/lint/check_errwords.py)")
    return problems


def check(root):
    rows = read_words(root)
    node_rows = [r for r in rows if r[3] == "NODE"]
    problems = [f"{HEADER}: origin of {r[0]} is {r[3]}, not NODE, SERVER or CLIENT"
                for r in rows if r[3] not in ("NODE", "SERVER", "CLIENT")]
    words = [r[0] for r in rows]
    problems += [f"{HEADER}: {w} is listed twice" for w in sorted(set(words))
                 if words.count(w) > 1]
    problems += check_readme(root, [r[0] for r in node_rows])
    problems += check_commands(root, node_rows)
    problems += check_python(root, rows)
    if os.path.isdir(os.path.join(root, "module")):
        problems += check_sources(root, words)
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    problems = check(os.path.abspath(root))
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
