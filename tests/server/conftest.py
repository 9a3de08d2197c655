"""Fixtures of the server suite: real redis-server processes, started through the
shared launcher tests/lib/objnodes.py (see there for the environment it reads:
OBJSTORE_BUILD, OBJSTORE_MODULE, OBJSTORE_PRELOAD, REDIS_SERVER, OBJSTORE_SERVER).

The fixtures themselves are the shared plugin tests/lib/objfixtures.py (server,
make_server, fresh_server, small_server, r/r2/r3, uid, make_cluster,
make_cluster_module, a/b/c, directory_redis), with its default profile: a 64 MiB
shared `server`, uids prefixed "it:".

Scopes: `server` is shared by a test module (tests use unique ids and leave
nothing behind); `fresh_server` and `make_server` start servers per test for
tests that need exact stats, a small arena or other module arguments.

Multi-node tests (test_cluster_*.py) use `make_cluster` (per test) and
`make_cluster_module` (per test module): a Cluster is a set of ClusterNodes
named "A", "B", ... sharing one directory, either a plain redis-server of its
own (layout "separate", which tests can stop and restart) or the first node's
own Redis (layout "own", the module's default). Nodes use the default transfer
port (Redis port + 10000), so their Redis ports are picked as free pairs.
`a`, `b` and `c` are clients of nodes "A", "B" and "C" of the test module's own
`cl` fixture (a module that uses them defines `cl`).
`directory_redis` is a plain redis-server alone (for the directory client's C test).
"""

pytest_plugins = ("objfixtures",)
