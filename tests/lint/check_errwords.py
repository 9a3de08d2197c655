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
  - client/python/objstore/__init__.py: ERROR_CODES maps every word whose
    class is not the base ObjstoreError to that class, and nothing else.
Prints one line per disagreement and exits 1 if there is any, 0 otherwise.
"""
import ast
import os
import re
import sys

HEADER = os.path.join("module", "common", "errwords.h")
PYINIT = os.path.join("client", "python", "objstore", "__init__.py")
BASE_CLASS = "ObjstoreError"
ROW = re.compile(r'X\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\)')


def read_words(root):
    """[(word, code, pyClass, origin, meaning)] of the header, in its order."""
    with open(os.path.join(root, HEADER)) as f:
        text = f.read()
    m = re.search(r"#define OBJ_ERR_WORDS\(X\)((?:.*\\\n)*.*)", text)
    if not m:
        sys.exit(f"{HEADER}: no OBJ_ERR_WORDS(X) macro")
    body = m.group(1).replace("\\\n", " ")
    rows = []
    for r in ROW.finditer(body):
        meaning = "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', r.group(5)))
        rows.append((r.group(1), r.group(2), r.group(3), r.group(4), meaning))
    if not rows:
        sys.exit(f"{HEADER}: OBJ_ERR_WORDS lists no word")
    return rows


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


def check_python(root, rows):
    path = os.path.join(root, PYINIT)
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    classes = {n.name for n in tree.body if isinstance(n, ast.ClassDef)}
    table = None
    for n in tree.body:
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "ERROR_CODES"
                                             for t in n.targets) and isinstance(n.value, ast.Dict):
            table = {k.value: v.id for k, v in zip(n.value.keys, n.value.values)
                     if isinstance(k, ast.Constant) and isinstance(v, ast.Name)}
    if table is None:
        return [f"{PYINIT}: no ERROR_CODES = {{word: class}} dict"]
    problems = []
    for word, _, py, _, _ in rows:
        if py != BASE_CLASS and py not in classes:
            problems.append(f"{PYINIT}: no class {py} (the class of {word} in {HEADER})")
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
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    problems = check(os.path.abspath(root))
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
