"""The one list of error code words, read from module/common/errwords.h (its
OBJ_ERR_WORDS X-macro) for the checks and tests that hold something against it:
tests/lint/check_errwords.py (the docs, the Python client's table, the module's
error texts) and tests/python/test_badinput.py (each word raises its class).
"""
import collections
import os
import re

HEADER = os.path.join("module", "common", "errwords.h")
REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

# One row of the list: the word, the C client's ObjErr, the Python class, where
# it comes from (NODE, SERVER or CLIENT) and what it means.
Word = collections.namedtuple("Word", "word code py_class origin meaning")

_ROW = re.compile(r'X\(\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*(\w+)\s*,\s*((?:"(?:[^"\\]|\\.)*"\s*)+)\)')


def read_words(root=REPO):
    """[Word] of root's header, in its order. Raises ValueError when the header
    has no OBJ_ERR_WORDS macro or the macro no row."""
    with open(os.path.join(root, HEADER)) as f:
        text = f.read()
    m = re.search(r"#define OBJ_ERR_WORDS\(X\)((?:.*\\\n)*.*)", text)
    if not m:
        raise ValueError(f"{HEADER}: no OBJ_ERR_WORDS(X) macro")
    body = m.group(1).replace("\\\n", " ")
    rows = [Word(r.group(1), r.group(2), r.group(3), r.group(4),
                 "".join(re.findall(r'"((?:[^"\\]|\\.)*)"', r.group(5))))
            for r in _ROW.finditer(body)]
    if not rows:
        raise ValueError(f"{HEADER}: OBJ_ERR_WORDS lists no word")
    return rows
