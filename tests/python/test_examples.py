"""The examples of client/python/examples run as the README shows, against three
real nodes (named and placed through OBJSTORE_EXAMPLE_NODES instead of the fixed
ports of conf/cluster-node*.conf, so that the suite never collides with them)."""

import os
import subprocess
import sys

import pytest

EXAMPLES = os.path.join(os.path.dirname(__file__), "..", "..", "client", "python", "examples")


@pytest.fixture(scope="module")
def three_nodes(make_cluster_module):
    return make_cluster_module(names=("A", "B", "C"), layout="own")


@pytest.mark.parametrize("script,expect", [
    ("pipeline.py", "every partial sum matched"),
    ("broadcast.py", "forward pass matches"),
    ("rl_loop.py", "every worker ran only whole published versions"),
])
def test_example_runs(three_nodes, script, expect):
    env = dict(os.environ)
    env["OBJSTORE_EXAMPLE_NODES"] = ",".join(f"{n}={three_nodes[n].port}" for n in "ABC")
    p = subprocess.run([sys.executable, os.path.join(EXAMPLES, script)], capture_output=True,
                       text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert expect in p.stdout
