"""The link check's own tests: it passes the real tree, and it catches a link to
a missing file, an #anchor no heading makes (in another file or the same one),
and a broken reference definition; it makes anchors the way GitHub does
(punctuation dropped, code spans kept as text, repeats numbered) and leaves
external links and code alone.

Each case writes a small tree in a temporary folder (not a git repository, so
only README.md and docs/*.md are read) and runs check_links.py on it as
`make lint` does.
"""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
CHECK = os.path.join(HERE, "check_links.py")

GUIDE = """# Guide

## How a fetch moves bytes

## The `rdma-read-min` sweep

## Notes

## Notes
"""


def run_check(root):
    return subprocess.run([sys.executable, CHECK, str(root)], capture_output=True, text=True)


@pytest.fixture
def tree(tmp_path):
    """README.md and docs/guide.md, every link between them good."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(GUIDE)
    (tmp_path / "LICENSE").write_text("license\n")
    return tmp_path


def write_readme(tree, body):
    (tree / "README.md").write_text("# Project\n\n## Start here\n\n" + body + "\n")


def test_the_repository_has_no_broken_link():
    r = run_check(REPO)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("link", [
    "[guide](docs/guide.md)",
    "[license](LICENSE)",
    "[folder](docs/)",
    "[bytes](docs/guide.md#how-a-fetch-moves-bytes)",
    "[sweep](docs/guide.md#the-rdma-read-min-sweep)",
    "[second notes](docs/guide.md#notes-1)",
    "[here](#start-here)",
    "[web](https://example.org/missing)",
    "[mail](mailto:someone@example.org)",
    "`[not a link](missing.md)`",
    "```\n[not a link](missing.md)\n```",
    '[titled](docs/guide.md "the guide")',
    "[ref]: docs/guide.md#notes",
])
def test_a_good_link_passes(tree, link):
    write_readme(tree, link)
    r = run_check(tree)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("link, why", [
    ("[gone](docs/missing.md)", "no such file docs/missing.md"),
    ("![plot](bench/results/plot.png)", "no such file bench/results/plot.png"),
    ("[bad anchor](docs/guide.md#how-a-fetch-moves-data)", "no heading #how-a-fetch-moves-data"),
    ("[third notes](docs/guide.md#notes-2)", "no heading #notes-2"),
    ("[own anchor](#nowhere)", "no heading #nowhere"),
    ("[ref]: docs/nothing.md", "no such file docs/nothing.md"),
])
def test_a_broken_link_fails(tree, link, why):
    write_readme(tree, "Some text.\n\n" + link)
    r = run_check(tree)
    assert r.returncode == 1
    assert f"README.md:7: broken link" in r.stdout
    assert why in r.stdout


def test_a_broken_link_in_docs_fails_with_its_file(tree):
    write_readme(tree, "[guide](docs/guide.md)")
    (tree / "docs" / "other.md").write_text("# Other\n\n[back](../README.md#start-there)\n")
    r = run_check(tree)
    assert r.returncode == 1
    assert "docs/other.md:3: broken link ../README.md#start-there" in r.stdout
