"""The chaos run as a test (tests/chaos/chaos.py): CHAOS_SECONDS of random faults against
five nodes in network namespaces; passes when no invariant was violated. The seed is
printed first (CHAOS_SEED repeats the fault schedule and the clients' choices); the
report is printed and written to $CHAOS_REPORT (default <build>/chaos/report.json),
with the servers' logs beside it when something was violated."""

import os

import pytest

from chaos import Chaos, Config, print_report
from netns import netns_problem
from objnodes import BUILD


def summary(rep):
    """One line per kind of violation (and the issue item it belongs to), with a count
    and the first example."""
    groups = {}
    for v in rep["violations"]:
        key = (v["kind"], v.get("issue_item"))
        groups.setdefault(key, []).append(v)
    lines = [f"{rep['violation_count']} invariant violations in {rep['operations']} "
             f"operations and {rep['faults']} faults (seed {rep['seed']}):"]
    for (kind, item), vs in sorted(groups.items(), key=lambda g: -len(g[1])):
        tag = f" [issue 20 item {item}]" if item else ""
        lines.append(f"  {len(vs)} x {kind}{tag}: e.g. {vs[0]['detail'][:400]}")
    return "\n".join(lines)


def test_no_invariant_is_violated_under_random_faults():
    why = netns_problem()
    if why is not None:
        pytest.fail(f"network namespaces cannot be made here: {why}", pytrace=False)
    path = os.environ.get("CHAOS_REPORT") or os.path.join(BUILD, "chaos", "report.json")
    cfg = Config(json_path=path)
    rep = Chaos(cfg).run()
    print_report(rep, path)
    assert rep["operations"] > 0 and rep["faults"] > 0, "the run did nothing"
    if rep["violation_count"]:
        pytest.fail(summary(rep), pytrace=False)
