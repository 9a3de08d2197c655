"""Secrets never show: `cluster-secret` and `directory-password` are refused as
module arguments (MODULE LIST and ps would show them), with a message saying where
they go: a redis.conf line, or a file named by `cluster-secret-file` /
`directory-password-file`, read once at start (mode 0600: a file other users can
reach is refused, a group-readable one warned about). However they were set they
read as empty in CONFIG GET, directly or inside MULTI/EXEC, and never appear in
MODULE LIST, INFO, OBJ.STATS or the log. CONFIG REWRITE keeps a redis.conf secret
in redis.conf and never copies a file's secret there, and the secret still works:
two nodes fetch from each other.
"""
import os

import pytest

from objhelpers import wait_locations
from objnodes import OBJSTORE_SERVER, ObjstoreServer, write_secret_file

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
    modules = repr(c.execute_command("MODULE", "LIST")).encode()
    for secret in SECRETS.values():
        assert secret.encode() not in b" ".join(everything)
        assert secret not in (info if isinstance(info, str) else info.decode())
        assert secret.encode() not in b" ".join(str(x).encode() if not isinstance(x, bytes)
                                                 else x for x in stats)
        assert secret.encode() not in modules
        assert secret not in server.log()


def secret_files(directory, mode=0o600):
    """A file per secret (mode), as the module arguments that name them."""
    args = []
    for name, secret in SECRETS.items():
        path = write_secret_file(directory, name, secret)
        os.chmod(path, mode)
        args += [name + "-file", path]
    return args


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_secret_as_module_argument_is_refused_saying_where_it_goes(make_server, name):
    srv = make_server(module_args=(name, SECRETS[name]), start=False)
    ready, log = srv.try_start()
    assert not ready, f"the server started with {name} as a module argument"
    assert f"module argument {name} refused" in log, log[-2000:]
    assert "config file" in log and f"{name}-file" in log, log[-2000:]
    assert SECRETS[name] not in log


def test_secrets_from_files_read_as_empty_and_never_show(make_server, tmp_path):
    srv = make_server(module_args=secret_files(str(tmp_path)))
    c = srv.client()
    for name in SECRETS:
        assert config_value(c, name) == b""
        assert config_value(c, name + "-file") == str(tmp_path / name).encode()
    assert_no_secret_anywhere(srv)


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o620, 0o601])
def test_secret_file_other_users_can_reach_is_refused(make_server, tmp_path, mode):
    srv = make_server(module_args=secret_files(str(tmp_path), mode), start=False)
    ready, log = srv.try_start()
    assert not ready, f"the server started with a secret file of mode {mode:04o}"
    assert "chmod 600" in log and f"{mode:04o}" in log, log[-2000:]
    for secret in SECRETS.values():
        assert secret not in log


def test_group_readable_secret_file_is_used_with_a_warning(make_server, tmp_path):
    srv = make_server(module_args=secret_files(str(tmp_path), 0o640))
    assert "is readable by its group" in srv.log()
    assert_no_secret_anywhere(srv)


@pytest.mark.parametrize("content,why", [(b"", "empty"), (b"\n", "empty"),
                                         (b"x" * 300, "longer than"), (b"a\0b", "NUL")])
def test_unusable_secret_file_is_refused(make_server, tmp_path, content, why):
    path = tmp_path / "cs"
    path.write_bytes(content)
    path.chmod(0o600)
    srv = make_server(module_args=("cluster-secret-file", str(path)), start=False)
    ready, log = srv.try_start()
    assert not ready and why in log, log[-2000:]


def test_missing_secret_file_is_refused(make_server, tmp_path):
    srv = make_server(module_args=("cluster-secret-file", str(tmp_path / "nope")), start=False)
    ready, log = srv.try_start()
    assert not ready and "cannot open" in log, log[-2000:]


def test_secret_and_its_file_together_are_refused(tmp_path):
    (path,) = secret_files(str(tmp_path))[1::2][:1]
    srv = FileConfiguredServer(["objstore.cluster-secret " + SECRETS["cluster-secret"],
                                "objstore.cluster-secret-file " + path], memory="64mb")
    try:
        ready, log = srv.try_start()
        assert not ready and "not both" in log, log[-2000:]
    finally:
        problems = srv.stop()
    assert not problems, problems


def test_secrets_read_as_empty_inside_multi(tmp_path):
    srv = FileConfiguredServer(["objstore.cluster-secret " + SECRETS["cluster-secret"]],
                               memory="64mb")
    try:
        srv.start()
        pipe = srv.client().pipeline(transaction=True)
        pipe.execute_command("CONFIG", "GET", "objstore.cluster-secret")
        (reply,) = pipe.execute()
        assert reply == [b"objstore.cluster-secret", b""]
        assert_no_secret_anywhere(srv)
    finally:
        problems = srv.stop()
    assert not problems, problems


def test_config_rewrite_never_copies_a_file_secret_into_redis_conf(tmp_path):
    args = secret_files(str(tmp_path))
    srv = FileConfiguredServer([f"objstore.{args[i]} {args[i + 1]}"
                                for i in range(0, len(args), 2)], memory="64mb")
    try:
        srv.start()
        c = srv.client()
        assert c.execute_command("CONFIG", "REWRITE") == b"OK"
        with open(srv.conf_path) as f:
            text = f.read()
        for secret in SECRETS.values():
            assert secret not in text, text
        assert f"objstore.cluster-secret-file" in text, text
        assert_no_secret_anywhere(srv)
    finally:
        problems = srv.stop()
    assert not problems, problems


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
