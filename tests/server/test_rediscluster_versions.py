"""Named versions and the cluster-wide delete with the directory on a real Redis
Cluster (3 masters, no replicas) and three objstore nodes whose `directory` names
its seeds: the scenarios of test_versions.py (tests/lib/objversions.py), where a
name's versions live in one hash slot and an object's tombstone in its own, on
whichever master serves them.
"""

import pytest

from objhelpers import wait_nodes
from objnodes import ClusterNode, RedisCluster, finish, start_nodes
from objversions import (killed_writer_leaves_no_version, purge_removes_every_copy,
                         readers_follow_every_whole_version,
                         retention_deletes_old_versions_everywhere)
from test_versions import spawn_writer

NAMES = ("A", "B", "C")


@pytest.fixture(scope="module")
def rc():
    c = RedisCluster(masters=3, replicas=0)
    try:
        yield c.start()
    finally:
        c.cleanup()


@pytest.fixture(scope="module")
def cl(rc):
    nodes = {n: ClusterNode(n, rc.seeds, memory="64mb", heartbeat=200, node_ttl=1000)
             for n in NAMES}
    start_nodes(list(nodes.values()))
    try:
        for n in NAMES:
            wait_nodes(nodes[n].client(), NAMES, timeout=30.0)
        yield nodes
    finally:
        finish(list(nodes.values()))


def test_readers_on_three_nodes_follow_a_fast_writer_through_whole_versions(cl, uid):
    readers_follow_every_whole_version(cl, "B", ["A", "B", "C"], uid(b"follow"))


def test_retention_deletes_old_versions_on_every_node_but_a_pin_keeps_its_bytes(cl, uid):
    retention_deletes_old_versions_everywhere(cl, "C", ["A", "B"], uid(b"retain"))


def test_a_writer_killed_before_it_publishes_leaves_no_version(cl, uid):
    killed_writer_leaves_no_version(cl, "A", "B", uid(b"killed"), spawn_writer)


def test_purge_deletes_every_copy_and_a_stopped_node_does_not_bring_it_back(cl, uid):
    purge_removes_every_copy(cl, "B", ["C"], "A", uid(b"purge"))
