#!/usr/bin/python3
"""check_layers.py - fail when a file includes a header its component must not know.

Usage: check_layers.py [ROOT]   (ROOT defaults to the repository)

Reads ROOT/tests/lint/layers (component: allowed components), then looks at
every #include "..." in module/<component>/ and client/ under ROOT:
  - "other/x.h" names the component `other`: it must be the file's own
    component or one it may include;
  - a bare "x.h" must be a header of the file's own folder, unless it is one
    of Redis's headers (pseudo-component "redismodule");
  - Redis's core headers (server.h, connection.h) only in module/door/conntype.c,
    the RDMA connection type, which in turn must not see the module API
    (redismodule.h, directly or through a header of its folder): server.h
    brings the REDISMODULE_CORE view of it;
  - the allowed edges themselves must not form a circle;
  - no .c file of module/ or client/ may use (call, or name a global of) a
    file that in turn, directly or through others, uses it: a circle between
    files is reported with the symbols on each edge (file_circles.py).
Prints one line per violation (file:line: why; a circle takes a line per
edge) and exits 1 if there is any, 0 otherwise. System headers (<...>) are
not looked at.
"""
import os
import re
import sys

import file_circles

REDIS_HEADERS = {"redismodule.h", "server.h", "connection.h"}
CORE_HEADERS = {"server.h", "connection.h"}
CORE_FILE = os.path.join("module", "door", "conntype.c")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_layers(path):
    """component -> set of components it may include."""
    allowed = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            if ":" not in line:
                sys.exit(f"{path}:{n}: expected 'component: deps...'")
            comp, deps = line.split(":", 1)
            allowed[comp.strip()] = set(deps.split())
    return allowed


def find_cycle(allowed):
    """A list of components forming a circle among the allowed edges, or None."""
    state = {}

    def visit(c, stack):
        state[c] = "open"
        for d in sorted(allowed.get(c, ())):
            if state.get(d) == "open":
                return stack[stack.index(d):] + [d] if d in stack else [c, d]
            if d not in state:
                cyc = visit(d, stack + [d])
                if cyc:
                    return cyc
        state[c] = "done"
        return None

    for c in sorted(allowed):
        if c not in state:
            cyc = visit(c, [c])
            if cyc:
                return cyc
    return None


def component_dirs(root, allowed):
    """(component, folder) for every component folder present under root."""
    for comp in sorted(allowed):
        for base in ("module", ""):
            d = os.path.join(root, base, comp)
            if comp != "redismodule" and os.path.isdir(d):
                yield comp, d
                break


def sees_module_api(header):
    """Whether a header of the connection type's folder includes redismodule.h."""
    if not os.path.exists(header):
        return False
    with open(header, errors="replace") as f:
        return any((m := INCLUDE.match(line)) and m.group(1) == "redismodule.h" for line in f)


def check(root):
    allowed = read_layers(os.path.join(root, "tests", "lint", "layers"))
    problems = []
    cyc = find_cycle(allowed)
    if cyc:
        problems.append("tests/lint/layers: the allowed includes form a circle: " + " -> ".join(cyc))
    known = set(allowed)
    for comp, folder in component_dirs(root, allowed):
        for dirpath, _, files in os.walk(folder):
            for name in sorted(files):
                if not name.endswith((".c", ".h")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        if "/" in inc:
                            target = inc.split("/", 1)[0]
                            if target not in known:
                                problems.append(f"{rel}:{n}: includes \"{inc}\": "
                                                f"'{target}' is not a component in tests/lint/layers")
                            elif target != comp and target not in allowed[comp]:
                                problems.append(f"{rel}:{n}: includes \"{inc}\": "
                                                f"{comp} may not depend on {target}")
                        elif inc in REDIS_HEADERS:
                            if inc in CORE_HEADERS and rel != CORE_FILE:
                                problems.append(f"{rel}:{n}: includes \"{inc}\": Redis's core "
                                                f"headers belong to {CORE_FILE} only")
                            elif inc == "redismodule.h" and rel == CORE_FILE:
                                problems.append(f"{rel}:{n}: includes \"{inc}\": the connection "
                                                f"type sees Redis's core, not the module API")
                            elif "redismodule" not in allowed[comp]:
                                problems.append(f"{rel}:{n}: includes \"{inc}\": only components "
                                                f"allowed 'redismodule' may see Redis's headers")
                        elif rel == CORE_FILE and sees_module_api(os.path.join(dirpath, inc)):
                            problems.append(f"{rel}:{n}: includes \"{inc}\", which includes "
                                            f"redismodule.h: the connection type must not see "
                                            f"the module API")
                        elif not os.path.exists(os.path.join(dirpath, inc)):
                            problems.append(f"{rel}:{n}: includes \"{inc}\", which is not in "
                                            f"its own folder: name the component (\"comp/{inc}\")")
    return problems


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    root = os.path.abspath(root)
    problems = check(root)
    circles = file_circles.check(root)
    for p in problems:
        print("layers: " + p)
    for c in circles:
        print("layers: " + c)
    if problems:
        print(f"layers: {len(problems)} include(s) break the layering (tests/lint/layers)")
    else:
        print("layers: every include follows tests/lint/layers")
    if circles:
        print(f"layers: {len(circles)} circle(s) between files: a file may not, through "
              f"others, use itself")
    else:
        print("layers: no circle between files")
    return 1 if problems or circles else 0


if __name__ == "__main__":
    sys.exit(main())
