"""Fixtures of the chaos suite: `make_netns_cluster` of the shared plugin
tests/lib/objfixtures.py, a NetnsCluster (tests/lib/netns.py) per test, stopped and
checked (deaths not inflicted, sanitizer and crash reports, leftovers) at teardown.
The suite fails, never skips, where namespaces cannot be made: it is part of CI."""

pytest_plugins = ("objfixtures",)
