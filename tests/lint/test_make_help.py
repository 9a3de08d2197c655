"""`make help` lists every target of the Makefile, one line each: every target a rule
names (not a file under build/, not a pattern) has its `#: NAME  description` line, and
every such line names a real target."""
import os
import re
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
MAKEFILE = os.path.join(REPO, "Makefile")


def makefile_targets():
    """The targets a rule of the Makefile names that are not files it builds: the
    .PHONY ones and every plain lower-case name before a colon."""
    text = open(MAKEFILE).read().replace("\\\n", " ")
    phony = set()
    for m in re.finditer(r"^\.PHONY:(.*)$", text, re.M):
        phony.update(m.group(1).split())
    rules = set(re.findall(r"^([a-z][a-z0-9-]*)\s*:(?!=)", text, re.M))
    return phony | rules


def help_lines():
    """make help's output: {target: description}."""
    out = subprocess.run(["make", "-s", "--no-print-directory", "help"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    listed = {}
    for line in out.splitlines():
        m = re.match(r"^  make (\S+)\s+(\S.*)$", line)
        assert m, f"make help: a line not 'make TARGET  description': {line!r}"
        assert m.group(1) not in listed, f"make help lists {m.group(1)} twice"
        listed[m.group(1)] = m.group(2)
    return listed


def test_every_target_is_in_make_help():
    missing = sorted(makefile_targets() - set(help_lines()))
    assert not missing, f"targets without a '#:' line in the Makefile: {missing}"


def test_make_help_names_only_real_targets():
    unknown = sorted(set(help_lines()) - makefile_targets())
    assert not unknown, f"'#:' lines of targets the Makefile does not have: {unknown}"
