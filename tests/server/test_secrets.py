"""Secrets never come back from CONFIG GET: `cluster-secret` and
`directory-password` read as empty however they were set (module argument
or redis.conf line), directly or inside MULTI/EXEC, and never appear in
INFO, OBJ.STATS or the log. CONFIG REWRITE still keeps the real secret in
redis.conf, and the secret still works: two nodes fetch from each other.
"""

import os

import pytest

from objhelpers import wait_locations
from objnodes import OBJSTORE_SERVER, ObjstoreServer

SECRETS = {"cluster-secret": "sekrit-cs-4411", "directory-password": "sekrit-dp-9923"}


class FileConfiguredServer(ObjstoreServer):
    """A node whose secrets come from a redis.conf file instead of arguments."""

    def __init__(self, conf_lines, **kw):
        super().__init__(**kw)
        self.conf_lines = conf_lines
        self.conf_path = None

    def command_line(self, port):
        cmd = super().command_line(port)
        self.conf_path = os.path.join(self.workdir, "redis.conf")
        with open(self.conf_path, "w") as f:
            f.write("".join(line + "\n" for line in self.conf_lines))
        assert cmd[0] == OBJSTORE_SERVER
        return [cmd[0], self.conf_path, *cmd[1:]]


def config_value(client, name):
    reply = client.execute_command("CONFIG", "GET", "objstore." + name)
    assert reply[0] == ("objstore." + name).encode()
    return reply[1]


def assert_no_secret_anywhere(server):
    c = server.client()
    everything = c.execute_command("CONFIG", "GET", "objstore.*")
    info = c.execute_command("INFO", "objstore")
    stats = c.execute_command("OBJ.STATS")
    for secret in SECRETS.values():
        assert secret.encode() not in b" ".join(everything)
        assert secret not in (info if isinstance(info, str) else info.decode())
        assert secret.encode() not in b" ".join(str(x).encode() if not isinstance(x, bytes)
                                                 else x for x in stats)
        assert secret not in server.log()


def test_secrets_from_module_arguments_read_as_empty(make_server):
    srv = make_server(module_args=("cluster-secret", SECRETS["cluster-secret"],
                                   "directory-password", SECRETS["directory-password"]))
    c = srv.client()
    for name in SECRETS:
        assert config_value(c, name) == b""
    assert_no_secret_anywhere(srv)


def test_secrets_read_as_empty_inside_multi(make_server):
    srv = make_server(module_args=("cluster-secret", SECRETS["cluster-secret"]))
    pipe = srv.client().pipeline(transaction=True)
    pipe.execute_command("CONFIG", "GET", "objstore.cluster-secret")
    (reply,) = pipe.execute()
    assert reply == [b"objstore.cluster-secret", b""]


def test_secret_from_redis_conf_reads_as_empty_and_survives_config_rewrite(tmp_path):
    srv = FileConfiguredServer(["objstore.cluster-secret " + SECRETS["cluster-secret"]],
                               memory="64mb")
    try:
        srv.start()
        c = srv.client()
        assert config_value(c, "cluster-secret") == b""
        assert c.execute_command("CONFIG", "REWRITE") == b"OK"
        with open(srv.conf_path) as f:
            text = f.read()
        assert f'objstore.cluster-secret "{SECRETS["cluster-secret"]}"' in text
        assert config_value(c, "cluster-secret") == b""
    finally:
        problems = srv.stop()
    assert not problems, problems


def test_the_hidden_secret_still_authenticates(make_cluster):
    cl = make_cluster(names=("A", "B"), secret=SECRETS["cluster-secret"])
    a, b = cl["A"].client(), cl["B"].client()
    assert config_value(a, "cluster-secret") == b""
    assert a.execute_command("OBJ.PUT", "sec:1", b"payload") == b"OK"
    wait_locations(b, "sec:1", ["A"])
    assert b.execute_command("OBJ.FETCH", "sec:1", "TIMEOUT", 10000) == [b"OK"]
    assert b.execute_command("OBJ.GET", "sec:1") == b"payload"
