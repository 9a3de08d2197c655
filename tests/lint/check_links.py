#!/usr/bin/python3
"""check_links.py - fail when a Markdown file links to something that is not there.

Usage: check_links.py [ROOT]   (ROOT defaults to the repository)

Looks at README.md and docs/*.md under ROOT, and at every other .md file git
tracks there. Every relative link, inline ([text](target), ![alt](target)) or
by reference ([name]: target), must name a file or folder that exists; a
#anchor on a Markdown target (or a bare #anchor, on the file itself) must be
the slug of one of its headings, made the way GitHub makes them (lower case,
punctuation dropped, spaces to hyphens, -1, -2 ... for repeats), or an
explicit <a id=...>/<a name=...>. Links with a scheme (https:, mailto:) are not
followed. Code blocks and `code spans` are not read. Prints one line per
broken link (file:line: why) and exits 1 if there is any, 0 otherwise.
"""
import glob
import os
import re
import subprocess
import sys
from urllib.parse import unquote

INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+[\"'(][^)]*)?\)")
REFDEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT = re.compile(r"<a\s+(?:[^>]*\s)?(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
FENCE = re.compile(r"^\s{0,3}(```+|~~~+)")
CODESPAN = re.compile(r"(`+)(.+?)\1")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def prose_lines(text):
    """(line number, line) of every line outside fenced code blocks."""
    fence = None
    for n, line in enumerate(text.splitlines(), 1):
        m = FENCE.match(line)
        if m:
            mark = m.group(1)
            if fence is None:
                fence = mark
            elif mark[0] == fence[0] and len(mark) >= len(fence):
                fence = None
            continue
        if fence is None:
            yield n, line


def slugify(heading):
    """GitHub's anchor for a heading's text (before de-duplication)."""
    text = CODESPAN.sub(lambda m: m.group(2), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache):
    """The set of anchors a Markdown file offers; cached by path."""
    if path not in cache:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        found, seen = set(), {}
        for _, line in prose_lines(text):
            found.update(EXPLICIT.findall(line))
            m = HEADING.match(line)
            if not m:
                continue
            slug = slugify(m.group(2))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
        cache[path] = found
    return cache[path]


def targets(text):
    """(line number, target) of every link in the prose of a Markdown text."""
    for n, line in prose_lines(text):
        bare = CODESPAN.sub("", line)
        for m in INLINE.finditer(bare):
            yield n, m.group(1)
        m = REFDEF.match(bare)
        if m:
            yield n, m.group(1)


def check_target(root, src, target, cache):
    """None when target (as written in src) resolves, else why it does not."""
    target = target.strip("<>")
    if not target or SCHEME.match(target):
        return None
    path, _, frag = target.partition("#")
    path = unquote(path)
    if path.startswith("/"):
        dest = os.path.join(root, path.lstrip("/"))
    elif path:
        dest = os.path.join(os.path.dirname(src), path)
    else:
        dest = src
    dest = os.path.normpath(dest)
    if not os.path.exists(dest):
        return f"{target}: no such file {os.path.relpath(dest, root)}"
    if frag and dest.endswith(".md") and os.path.isfile(dest):
        if unquote(frag).lower() not in anchors(dest, cache):
            return f"{target}: no heading #{frag} in {os.path.relpath(dest, root)}"
    return None


def markdown_files(root):
    """README.md, docs/*.md and every tracked .md under root, each once."""
    files = set(glob.glob(os.path.join(root, "README.md")))
    files.update(glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True))
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "*.md"], capture_output=True,
                             check=True).stdout.decode()
        files.update(os.path.join(root, p) for p in out.split("\0") if p)
    except (OSError, subprocess.CalledProcessError):
        pass
    return sorted(f for f in files if os.path.isfile(f))


def main(argv):
    root = os.path.abspath(argv[1] if len(argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    cache, bad, count = {}, 0, 0
    for src in markdown_files(root):
        with open(src, encoding="utf-8") as f:
            text = f.read()
        for n, target in targets(text):
            count += 1
            why = check_target(root, src, target, cache)
            if why:
                print(f"{os.path.relpath(src, root)}:{n}: broken link {why}")
                bad += 1
    if bad:
        print(f"check_links: {bad} broken link(s) of {count}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
