"""Tests of bench/tables.py: docs/benchmarks.md's tables are what
bench/results/ gives; a table edited by hand, a result changed without
rewriting the page, a marker without its end or naming no table are found
by --check; a rewrite brings the page back and keeps the prose.

Each test works on a copy of the files it needs in a temporary root.
Run from the repository root:  /usr/bin/python3 -m pytest -q tests/lint/test_bench_tables.py
"""

import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(ROOT, "bench", "tables.py")


def tables(root, *args):
    return subprocess.run(["/usr/bin/python3", TOOL, "--root", str(root), *args],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def root(tmp_path):
    """A copy of docs/benchmarks.md and bench/results/ under tmp_path."""
    (tmp_path / "docs").mkdir()
    shutil.copy(os.path.join(ROOT, "docs", "benchmarks.md"), tmp_path / "docs")
    shutil.copytree(os.path.join(ROOT, "bench", "results"), tmp_path / "bench" / "results")
    return tmp_path


def doc(root):
    return (root / "docs" / "benchmarks.md").read_text()


def test_the_committed_page_is_what_the_results_give():
    r = tables(ROOT, "--check")
    assert r.returncode == 0, r.stderr


def test_a_table_edited_by_hand_is_found_and_rewritten(root):
    page = doc(root)
    edited = page.replace("| 16 nodes | 1245 | 1.20 |", "| 16 nodes | 9999 | 1.20 |")
    assert edited != page
    (root / "docs" / "benchmarks.md").write_text(edited)
    r = tables(root, "--check")
    assert r.returncode == 1 and "directory-cluster" in r.stderr, r.stderr
    assert tables(root).returncode == 0
    assert doc(root) == page


def test_a_result_changed_without_the_page_is_found(root):
    csv = root / "bench" / "results" / "directory-cluster.csv"
    csv.write_text(csv.read_text().replace("1244.9", "1500.0"))
    r = tables(root, "--check")
    assert r.returncode == 1 and "directory-cluster" in r.stderr, r.stderr
    assert tables(root).returncode == 0
    assert "| 16 nodes | 1500 |" in doc(root)
    assert tables(root, "--check").returncode == 0


def test_the_prose_around_the_tables_is_kept(root):
    page = doc(root).replace("What the numbers say: the keys spread evenly",
                             "What the numbers say, by hand: the keys spread evenly")
    (root / "docs" / "benchmarks.md").write_text(page)
    assert tables(root, "--check").returncode == 0
    assert tables(root).returncode == 0
    assert doc(root) == page


@pytest.mark.parametrize("marker,message", [
    ("<!-- end table directory-cluster -->", "has no"),
    ("<!-- table directory-cluster:", "unknown table"),
])
def test_a_broken_marker_is_refused(root, marker, message):
    page = doc(root)
    broken = (page.replace(marker, "") if "end" in marker else
              page.replace(marker, "<!-- table no-such-table:"))
    (root / "docs" / "benchmarks.md").write_text(broken)
    r = tables(root, "--check")
    assert r.returncode == 1 and message in r.stderr, r.stderr
