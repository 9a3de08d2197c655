"""Fixtures of the chaos suite: a NetnsCluster (tests/lib/netns.py) per test, stopped
and checked (deaths not inflicted, sanitizer and crash reports, leftovers) at teardown.
The suite fails, never skips, where namespaces cannot be made: it is part of CI."""

import pytest

from netns import NetnsCluster, netns_problem


@pytest.fixture
def make_netns_cluster():
    """Factory: make_netns_cluster(n, rate=None, ...) starts a NetnsCluster."""
    why = netns_problem()
    if why is not None:
        pytest.fail(f"network namespaces cannot be made here: {why}", pytrace=False)
    made = []

    def factory(n, **kw):
        c = NetnsCluster(n, **kw)
        made.append(c)
        return c.start()

    yield factory
    report = [r for r in (c.stop() for c in made) if r]
    if report:
        pytest.fail("\n\n".join(report), pytrace=False)
