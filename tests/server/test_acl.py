"""ACL key permissions apply to object ids (docs/security.md, "ACLs on objects").

Every command that names ids checks them against the calling user's key patterns:
reading commands need read permission (%R), the others write permission (%W); a
refused command answers NOPERM and changes nothing. On a plain server Redis checks
the ids itself (they are declared as keys), so ACL DRYRUN and COMMAND GETKEYS see
them; on a cluster-enabled server the ids are checked by the module, declared as
no keys, so that Redis never answers MOVED or CROSSSLOT for an object id. OBJ.LIST
shows only the ids the user may read.
"""

import pytest

from objhelpers import err_code, info, to_int
from objnodes import free_port, free_port_pair

PASSWORD = "pw-acl"
TENANT = b"tenantA:"
OTHER = b"tenantB:"

# user: ACL rules (besides "on", its password and +@all)
USERS = {
    "rw": ["~tenantA:*"],
    "ro": ["%R~tenantA:*"],
    "wo": ["%W~tenantA:*"],
}

# Every command that names ids: (name, argv with None for the id, permission it
# needs). The object named already exists, sealed, put by the default user, unless
# the command creates it ("new").
ID_COMMANDS = [
    ("put", ["OBJ.PUT", None, "data"], "write", "new"),
    ("create", ["OBJ.CREATE", None, "4"], "write", "new"),
    ("write", ["OBJ.WRITE", None, "0", "ab"], "write", "sealed"),
    ("seal", ["OBJ.SEAL", None], "write", "sealed"),
    ("abort", ["OBJ.ABORT", None], "write", "sealed"),
    ("del", ["OBJ.DEL", None], "write", "sealed"),
    ("get", ["OBJ.GET", None], "read", "sealed"),
    ("get-timeout", ["OBJ.GET", None, "TIMEOUT", "10", "WITHMETA"], "read", "sealed"),
    ("pin", ["OBJ.PIN", None, "TIMEOUT", "10"], "read", "sealed"),
    ("release", ["OBJ.RELEASE", None], "read", "sealed"),
    ("exists", ["OBJ.EXISTS", None], "read", "sealed"),
    ("info", ["OBJ.INFO", None], "read", "sealed"),
    ("fetch", ["OBJ.FETCH", None, "TIMEOUT", "2000"], "read", "sealed"),
    ("locate", ["OBJ.LOCATE", None], "read", "sealed"),
]


def _allowed(user, perm):
    """Whether user may run a command needing perm on a tenantA id."""
    return user == "rw" or (user == "ro" and perm == "read") or (user == "wo" and perm == "write")


def _make_users(admin):
    for user, rules in USERS.items():
        assert admin.execute_command("ACL", "SETUSER", user, "reset", "on", ">" + PASSWORD,
                                     "+@all", *rules) == b"OK"


def _login(server, user):
    c = server.client()
    assert c.execute_command("AUTH", user, PASSWORD) == b"OK"
    return c


def _run(client, args):
    """The reply, or the error's code word prefixed by '-'."""
    try:
        return client.execute_command(*args)
    except Exception as e:
        return "-" + err_code(e)


def _argv(template, oid):
    return [oid if a is None else a for a in template]


def _check_table(server, admin, uid):
    """Run every command of ID_COMMANDS as every user on a tenantA and a tenantB id;
    returns the mismatches (empty when every answer is right)."""
    wrong = []
    clients = {u: _login(server, u) for u in USERS}
    for name, template, perm, state in ID_COMMANDS:
        for user, c in clients.items():
            for prefix in (TENANT, OTHER):
                oid = prefix + uid(name.encode() + b":" + user.encode())
                if state == "sealed":
                    admin.execute_command("OBJ.PUT", oid, b"payload", "META", b"m")
                reply = _run(c, _argv(template, oid))
                allowed = prefix == TENANT and _allowed(user, perm)
                if allowed and reply == "-NOPERM":
                    wrong.append(f"{user} {name} {oid!r}: refused, should be allowed")
                if not allowed and reply != "-NOPERM":
                    wrong.append(f"{user} {name} {oid!r}: answered {reply!r:.80}, not NOPERM")
                if not allowed and state == "sealed":
                    # Refused: nothing changed.
                    assert admin.execute_command("OBJ.GET", oid) == b"payload", (user, name)
                    assert to_int(info(admin, oid)["pins"]) == 0, (user, name)
                for cmd in ("OBJ.RELEASE", "OBJ.ABORT", "OBJ.DEL"):
                    _run(c, [cmd, oid])
                    _run(admin, [cmd, oid])
    return wrong


@pytest.fixture
def plain(make_server):
    srv = make_server()
    admin = srv.client()
    _make_users(admin)
    return srv, admin


def test_every_id_command_checks_read_or_write_permission(plain, uid):
    srv, admin = plain
    wrong = _check_table(srv, admin, uid)
    assert not wrong, "\n".join(wrong)


def test_fetch_checks_every_id_of_its_list(plain, uid):
    srv, admin = plain
    mine, theirs = TENANT + uid(b"f1"), OTHER + uid(b"f2")
    for oid in (mine, theirs):
        admin.execute_command("OBJ.PUT", oid, b"x")
    c = _login(srv, "rw")
    assert c.execute_command("OBJ.FETCH", mine, "TIMEOUT", 1000) == [b"OK"]
    for ids in ((mine, theirs), (theirs, mine), (mine, mine, theirs)):
        assert _run(c, ["OBJ.FETCH", *ids, "TIMEOUT", 1000]) == "-NOPERM", ids
    # Option words are not ids: an id named like an option value is still checked.
    assert _run(c, ["OBJ.FETCH", mine, "VIA", "tcp", "TIMEOUT", 1000]) == [b"OK"]


def test_acl_dryrun_agrees_with_the_commands(plain, uid):
    srv, admin = plain
    for name, template, perm, _ in ID_COMMANDS:
        for user in USERS:
            for prefix in (TENANT, OTHER):
                argv = _argv(template, prefix + b"dry")
                reply = admin.execute_command("ACL", "DRYRUN", user, *argv)
                ok = prefix == TENANT and _allowed(user, perm)
                assert (reply == b"OK") == ok, (user, name, prefix, reply)
    reply = admin.execute_command("ACL", "DRYRUN", "rw", "OBJ.FETCH", TENANT + b"a",
                                  OTHER + b"b", "TIMEOUT", "5")
    assert reply != b"OK" and b"tenantB:b" in reply


def test_command_getkeys_names_the_ids_and_not_the_options(plain):
    _, admin = plain
    assert admin.execute_command("COMMAND", "GETKEYS", "OBJ.GET", "x", "TIMEOUT", "5") == [b"x"]
    assert admin.execute_command("COMMAND", "GETKEYS", "OBJ.FETCH", "a", "b", "TIMEOUT", "5",
                                 "VIA", "tcp", "FROM", "n1") == [b"a", b"b"]
    assert admin.execute_command("COMMAND", "GETKEYS", "OBJ.PUT", "k", "v", "META", "m") == [b"k"]


def test_list_shows_only_the_ids_the_user_may_read(plain, uid):
    srv, admin = plain
    mine = [TENANT + uid(b"l%d" % i) for i in range(30)]
    theirs = [OTHER + uid(b"l%d" % i) for i in range(30)]
    for oid in mine + theirs:
        admin.execute_command("OBJ.PUT", oid, b"x")

    def listed(client, *opts):
        cursor, seen = b"0", set()
        for _ in range(10000):
            cursor, ids = client.execute_command("OBJ.LIST", cursor, *opts)
            seen.update(ids)
            if to_int(cursor) == 0:
                return seen
        raise AssertionError("OBJ.LIST did not end")

    assert listed(admin) >= set(mine + theirs)
    assert listed(_login(srv, "rw")) == set(mine)
    assert listed(_login(srv, "ro"), "MATCH", "*l1*") == {i for i in mine if b"l1" in i}
    assert listed(_login(srv, "wo")) == set()  # write permission alone does not show ids


def test_a_script_cannot_reach_around_the_check(plain, uid):
    srv, admin = plain
    theirs = OTHER + uid(b"s")
    admin.execute_command("OBJ.PUT", theirs, b"x")
    c = _login(srv, "rw")
    reply = _run(c, ["EVAL", "return redis.call('OBJ.GET', ARGV[1])", 0, theirs])
    assert reply.startswith("-") and reply != "-OK", reply
    reply = c.execute_command("EVAL", "return redis.pcall('OBJ.LIST', 0, 'COUNT', 1000)", 0)
    assert all(i.startswith(TENANT) for i in reply[1]), reply


# ---- a cluster-enabled server ---------------------------------------------------------

@pytest.fixture
def clustered(make_server, tmp_path):
    """A node with cluster-enabled yes and no slots (cluster_state:fail). Its transfer
    port is given: the default (port + 10000) is the cluster bus port."""
    srv = make_server(module_args=("transfer-port", str(free_port())),
                      server_args=("--cluster-enabled", "yes", "--cluster-config-file",
                                   str(tmp_path / "nodes.conf")), start=False)
    # Redis refuses cluster mode above port 55535 (its bus is port + 10000): take a
    # port whose +10000 was free too.
    srv.pick_port = free_port_pair
    srv.start()
    admin = srv.client()
    _make_users(admin)
    return srv, admin


def test_cluster_node_serves_any_id_without_redirection(clustered, uid):
    srv, admin = clustered
    assert b"cluster_enabled:1" in admin.execute_command("INFO", "cluster")
    ids = [uid(b"{slot%d}" % i) for i in range(8)]  # hash tags in many slots
    for oid in ids:
        assert admin.execute_command("OBJ.PUT", oid, b"v") == b"OK"
        assert admin.execute_command("OBJ.GET", oid) == b"v"
    assert admin.execute_command("OBJ.FETCH", *ids, "TIMEOUT", 1000) == [b"OK"] * len(ids)
    for oid in ids:
        assert admin.execute_command("OBJ.DEL", oid) == b"OK"


def test_cluster_node_checks_every_id_command_by_hand(clustered, uid):
    srv, admin = clustered
    wrong = _check_table(srv, admin, uid)
    assert not wrong, "\n".join(wrong)
    log = admin.execute_command("ACL", "LOG")
    assert any(b"tenantB:" in b"".join(x for x in entry if isinstance(x, bytes))
               for entry in log), log


def test_cluster_node_filters_list_and_checks_fetch_lists_and_scripts(clustered, uid):
    srv, admin = clustered
    mine, theirs = TENANT + uid(b"c1"), OTHER + uid(b"c2")
    for oid in (mine, theirs):
        admin.execute_command("OBJ.PUT", oid, b"x")
    c = _login(srv, "rw")
    assert _run(c, ["OBJ.FETCH", mine, theirs, "TIMEOUT", 1000]) == "-NOPERM"
    assert c.execute_command("OBJ.FETCH", mine, "TIMEOUT", 1000) == [b"OK"]
    cursor, ids = c.execute_command("OBJ.LIST", 0, "COUNT", 1000)
    assert to_int(cursor) == 0 and mine in ids and theirs not in ids
    reply = _run(c, ["EVAL", "return redis.call('OBJ.GET', ARGV[1])", 0, theirs])
    assert reply.startswith("-") and reply != "-OK", reply
    assert c.execute_command("EVAL", "return redis.call('OBJ.GET', ARGV[1])", 0, mine) == b"x"
