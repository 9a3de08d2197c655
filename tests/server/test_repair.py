"""Repair and ownership (docs/cluster.md, copies, repair and drain): objects put with
REPLICAS 2 outlive a node.

- The owner of 200 two-copy objects is killed with SIGKILL: every object is fetchable,
  byte-exact, from the survivors; repair then gives each one two live holders again,
  one of them its new owner (the survivor took ownership); killing a second node after
  that loses nothing either.
- The owner is paused (SIGSTOP) past its node-ttl and continued: the survivors took
  ownership and repaired meanwhile; once it is back each object has one owner, its
  count of counting copies and one generation everywhere (the old owner's copy is no
  primary any more).
- A protected holder is paused and continued after the owner repaired around it: the
  surplus copy is trimmed back to the count.
- A returning old owner does not bring back an object deleted or put again while it
  was away.

Waits are bounded far past what a working cluster takes (they stop a hang, they are no
verdict); node-ttl is 1 s and repair-interval 1 s here.
"""

from redis.exceptions import ResponseError

from objhelpers import (
    counting,
    err_code,
    fetch,
    fetch_everything,
    holders_now,
    info,
    locate,
    one_owner_one_generation,
    payload,
    sha256,
    stats,
    to_str,
    wait_copies,
    wait_each,
    wait_nodes,
    wait_until,
)

REPAIR_ARGS = ["repair-interval", "1000"]
HANG = 180.0  # bounds every wait for the whole set of objects


def cluster(make_cluster, names):
    cl = make_cluster(names=names, layout="separate", memory="64mb", extra_args=REPAIR_ARGS)
    return cl, {n: cl[n].client() for n in names}


def put_two_copy_objects(client, uid, count, seed, tag=b"o"):
    """count small objects put through client with REPLICAS 2 (each answers 2)."""
    objs = {}
    for i in range(count):
        oid, data = uid(tag + b"%03d" % i), payload(2000 + 37 * i, seed=seed + i)
        assert client.execute_command("OBJ.PUT", oid, data, "META", b"r",
                                      "REPLICAS", 2) == 2, f"{oid!r}: not two copies"
        objs[oid] = data
    return objs


def listed(client, objs, want, what):
    """Wait until the directory lists want(copies) for every object of objs."""

    def check(oid):
        try:
            d = locate(client, oid)
        except ResponseError as e:
            return False, str(e)
        return want(d), d

    wait_each(list(objs), check, what, HANG)


def two_live_holders(clients, objs, dead, what):
    """Wait until every object has two live protected holders in the directory, none
    of them dead, the owner among them; then check the nodes themselves: exactly two
    counting copies, one of them the owner's primary, both byte-exact."""
    listed(clients[sorted(clients)[0]], objs,
           lambda d: (len(d["protected"]) == 2 and not set(d["protected"]) & set(dead)
                      and d["owner"] in d["protected"]), what)

    def check(oid):
        held = counting(holders_now(clients, oid))
        prim = [n for n, c in held.items() if c[0] == "primary"]
        if len(held) != 2 or len(prim) != 1:
            return False, held
        for n in held:
            assert sha256(clients[n].execute_command("OBJ.GET", oid)) == sha256(objs[oid]), (
                f"{what}: {n}'s copy of {oid!r} differs")
        return True, held

    wait_each(list(objs), check, f"{what} (on the nodes)", HANG)


def test_two_copy_objects_survive_their_owners_death_and_are_repaired(make_cluster, uid):
    cl, clients = cluster(make_cluster, ("A", "B", "C", "D"))
    objs = put_two_copy_objects(clients["A"], uid, 200, seed=1000)
    listed(clients["B"], objs, lambda d: d["owner"] == "A" and len(d["protected"]) == 2,
           "A and one other listed as holders")

    cl["A"].sigkill()
    survivors = {n: clients[n] for n in ("B", "C", "D")}
    fetch_everything(survivors, objs, "fetched from the survivors after A's death")
    two_live_holders(survivors, objs, ["A"], "two live holders after A's death")
    st = {n: stats(c) for n, c in survivors.items()}
    assert sum(s["ownership_takeovers"] for s in st.values()) >= len(objs), st
    assert sum(s["repairs_done"] for s in st.values()) >= len(objs), st
    assert sum(s["repair_bytes"] for s in st.values()) > 0, st
    for n, c in survivors.items():
        wait_until(lambda: stats(c)["replicas_below_target"] == 0, HANG,
                   what=f"{n}: nothing below target")

    # The second death: any node now holds copies that count.
    cl["B"].sigkill()
    last = {n: clients[n] for n in ("C", "D")}
    fetch_everything(last, objs, "fetched after B's death too")
    two_live_holders(last, objs, ["A", "B"], "two live holders after B's death")


def test_a_paused_owner_comes_back_to_one_owner_and_one_generation(make_cluster, uid):
    cl, clients = cluster(make_cluster, ("A", "B", "C", "D"))
    objs = put_two_copy_objects(clients["A"], uid, 40, seed=2000)
    listed(clients["B"], objs, lambda d: d["owner"] == "A" and len(d["protected"]) == 2,
           "A and one other listed as holders")

    cl["A"].sigstop()
    try:
        others = {n: clients[n] for n in ("B", "C", "D")}
        wait_nodes(clients["B"], others, timeout=60)
        two_live_holders(others, objs, ["A"], "repaired while A is paused")
    finally:
        cl["A"].sigcont()
    wait_nodes(clients["B"], clients, timeout=60)
    one_owner_one_generation(clients, objs, 2, "one owner once A is back")
    for oid in objs:
        got = clients["A"].execute_command("OBJ.EXISTS", oid) and info(clients["A"], oid)
        assert not got or to_str(got["copy"]) != "primary", (
            f"A still holds {oid!r} as its primary after another node took it over")


def test_a_paused_holder_coming_back_is_trimmed_to_the_count(make_cluster, uid):
    cl, clients = cluster(make_cluster, ("A", "B"))
    objs = put_two_copy_objects(clients["A"], uid, 40, seed=3000)  # every copy on B
    for name in ("C", "D"):
        cl.add_node(name)
        clients[name] = cl[name].client()

    cl["B"].sigstop()
    try:
        others = {n: clients[n] for n in ("A", "C", "D")}
        wait_nodes(clients["A"], others, timeout=60)
        two_live_holders(others, objs, ["B"], "repaired while B is paused")
    finally:
        cl["B"].sigcont()
    wait_nodes(clients["A"], clients, timeout=60)
    one_owner_one_generation(clients, objs, 2, "surplus trimmed once B is back")
    for oid in objs:
        # The copies kept: the owner's first, then by node name (docs/cluster.md).
        d = locate(clients["A"], oid)
        assert d["owner"] == "A" and d["protected"] == ["A", "B"], d


def present(clients, oid):
    """The nodes of clients ({name: client}) where oid is present in any state (sealed,
    or created: a copy being received)."""
    out = []
    for name, c in clients.items():
        try:
            info(c, oid)
            out.append(name)
        except ResponseError as e:
            if err_code(e) != "NOTFOUND":
                raise
    return out


def test_a_returning_owner_does_not_bring_back_a_deleted_or_superseded_object(
        make_cluster, uid):
    cl, clients = cluster(make_cluster, ("A", "B", "C"))
    gone, again = uid(b"deleted"), uid(b"put-again")
    old = {gone: payload(30000, seed=1), again: payload(30000, seed=2)}
    for oid, data in old.items():
        assert clients["A"].execute_command("OBJ.PUT", oid, data, "REPLICAS", 2) == 2
        wait_copies(clients["B"], oid, lambda d: len(d["protected"]) == 2, what="listed")

    cl["A"].sigstop()
    try:
        others = {n: clients[n] for n in ("B", "C")}
        wait_nodes(clients["B"], others, timeout=60)
        owners = {}
        for oid in old:
            d = wait_copies(clients["B"], oid, lambda d: d["owner"] in ("B", "C"),
                            what="a survivor owns it")
            owners[oid] = d["owner"]
        for oid in old:
            assert clients[owners[oid]].execute_command("OBJ.DEL", oid) in (b"OK", b"DEFERRED")
        # Gone on B and C, also a copy still being received there (a repair copy in
        # flight when the delete came is a created object until its fetch ends and
        # the tombstone refuses it: OBJ.PUT of the id answers EXISTS meanwhile).
        wait_until(lambda: not any(present(others, oid) for oid in old), 60,
                   what="both objects deleted on B and C")
        new = payload(30001, seed=3)
        assert clients["C"].execute_command("OBJ.PUT", again, new, "REPLICAS", 2) == 2
    finally:
        cl["A"].sigcont()
    wait_nodes(clients["B"], clients, timeout=60)

    def settled():
        try:
            clients["B"].execute_command("OBJ.LOCATE", gone)
            return False
        except ResponseError as e:
            if err_code(e) != "NOTFOUND":
                raise
        return (clients["A"].execute_command("OBJ.EXISTS", gone) == 0
                and (clients["A"].execute_command("OBJ.EXISTS", again) == 0
                     or sha256(clients["A"].execute_command("OBJ.GET", again)) == sha256(new)))

    wait_until(settled, 60, what="A's old copies dropped")
    one_owner_one_generation(clients, {again: new}, 2, "the new generation only")
    for name in ("A", "B", "C"):
        c = clients[name]
        try:
            code = fetch(c, gone, timeout=2000)[0].split()[0]
        except ResponseError as e:
            code = err_code(e)
        assert code in ("NOTFOUND", "TIMEOUT"), f"{name} fetched the deleted object: {code}"
        assert fetch(c, again, timeout=10000) == ["OK"]
        assert sha256(c.execute_command("OBJ.GET", again)) == sha256(new), (
            f"{name} reads the superseded generation")

