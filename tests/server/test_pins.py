"""Pins, deferred deletes and what a disconnect cleans up.

README: OBJ.DEL of a pinned object answers DEFERRED, the id disappears at
once and the memory is freed when the last pin goes; disconnecting aborts the
connection's created objects and drops its pins. Memory is never freed under
a reader: the pinned bytes stay intact in the arena file until released.
Each test has its own server so arena_used can be compared exactly.
"""

from objhelpers import (
    MIB,
    expect_error,
    info,
    read_arena,
    reply_map,
    start_call,
    stats,
    to_int,
    wait_blocked,
    wait_until,
)


def _blob(tag, size=MIB):
    return (tag * (size // len(tag) + 1))[:size]


def test_del_of_pinned_object_answers_deferred_and_the_id_disappears_at_once(fresh_server):
    a, b = fresh_server.client(), fresh_server.client()
    a.obj("OBJ.PUT", b"obj", b"payload")
    a.obj("OBJ.PIN", b"obj")
    assert b.obj("OBJ.DEL", b"obj") == b"DEFERRED"
    assert b.obj("OBJ.EXISTS", b"obj") == 0
    assert a.obj("OBJ.EXISTS", b"obj") == 0
    expect_error(b, ("OBJ.GET", b"obj"), "NOTFOUND")
    expect_error(b, ("OBJ.PIN", b"obj"), "NOTFOUND")
    expect_error(b, ("OBJ.INFO", b"obj"), "NOTFOUND")
    expect_error(b, ("OBJ.DEL", b"obj"), "NOTFOUND")
    cursor, ids = b.obj("OBJ.LIST", 0, "COUNT", 1000)
    assert b"obj" not in ids
    assert a.obj("OBJ.RELEASE", b"obj") == b"OK"


def test_deferred_delete_keeps_memory_and_bytes_until_release(fresh_server):
    a, b = fresh_server.client(), fresh_server.client()
    base = stats(a)
    data = _blob(b"\x00keep\r\n")
    a.obj("OBJ.PUT", b"obj", data)
    pinned = reply_map(a.obj("OBJ.PIN", b"obj"))
    used = stats(a)["arena_used"]
    assert used >= base["arena_used"] + len(data)
    assert b.obj("OBJ.DEL", b"obj") == b"DEFERRED"
    st = stats(a)
    assert st["arena_used"] == used, "memory freed under a pinned reader"
    assert st["deferred_deletes"] == base["deferred_deletes"] + 1
    assert read_arena(st["arena_path"], pinned["offset"], len(data)) == data
    assert a.obj("OBJ.RELEASE", b"obj") == b"OK"
    st = stats(a)
    assert st["arena_used"] == base["arena_used"]
    assert st["objects"] == base["objects"] and st["objects_pinned"] == 0


def test_deferred_delete_waits_for_the_last_pin_of_every_connection(fresh_server):
    a, b, c = fresh_server.client(), fresh_server.client(), fresh_server.client()
    base = stats(a)["arena_used"]
    a.obj("OBJ.PUT", b"obj", _blob(b"x"))
    used = stats(a)["arena_used"]
    a.obj("OBJ.PIN", b"obj")
    b.obj("OBJ.PIN", b"obj")
    b.obj("OBJ.PIN", b"obj")
    assert c.obj("OBJ.DEL", b"obj") == b"DEFERRED"
    a.obj("OBJ.RELEASE", b"obj")
    assert stats(c)["arena_used"] == used
    b.obj("OBJ.RELEASE", b"obj")
    assert stats(c)["arena_used"] == used
    b.obj("OBJ.RELEASE", b"obj")
    assert stats(c)["arena_used"] == base
    expect_error(b, ("OBJ.RELEASE", b"obj"), ("NOTFOUND", "WRONGSTATE"))


def test_put_of_an_id_whose_old_object_is_still_pinned_succeeds(fresh_server):
    a, b = fresh_server.client(), fresh_server.client()
    old, new = _blob(b"old!"), _blob(b"NEW?", 2 * MIB)
    a.obj("OBJ.PUT", b"obj", old)
    pinned = reply_map(a.obj("OBJ.PIN", b"obj"))
    assert b.obj("OBJ.DEL", b"obj") == b"DEFERRED"
    assert b.obj("OBJ.PUT", b"obj", new) == b"OK"
    assert b.obj("OBJ.GET", b"obj") == new
    assert b.obj("OBJ.EXISTS", b"obj") == 1
    st = stats(b)
    # the old bytes are still intact under the pinned reader
    assert read_arena(st["arena_path"], pinned["offset"], len(old)) == old
    assert st["arena_used"] >= len(old) + len(new)
    a.close()  # drops the pin on the old object
    wait_until(lambda: stats(b)["arena_used"] < len(old) + len(new),
               what="the old object to be freed after its pinner disconnected")
    assert b.obj("OBJ.GET", b"obj") == new
    b.obj("OBJ.DEL", b"obj")
    assert stats(b)["arena_used"] == 0


def test_create_of_an_id_whose_old_object_is_still_pinned_succeeds(fresh_server):
    a, b = fresh_server.client(), fresh_server.client()
    a.obj("OBJ.PUT", b"obj", b"old")
    a.obj("OBJ.PIN", b"obj")
    b.obj("OBJ.DEL", b"obj")
    b.obj("OBJ.CREATE", b"obj", 3)
    b.obj("OBJ.WRITE", b"obj", 0, b"new")
    assert b.obj("OBJ.SEAL", b"obj") == b"OK"
    assert a.obj("OBJ.GET", b"obj") == b"new"


def test_creator_disconnect_aborts_its_created_objects(fresh_server):
    a, b = fresh_server.client(), fresh_server.client()
    base = stats(b)
    a.obj("OBJ.CREATE", b"c1", MIB)
    a.obj("OBJ.WRITE", b"c1", 0, b"partial")
    a.obj("OBJ.CREATE", b"c2", 10, "META", b"m")
    st = stats(b)
    assert st["objects_created"] == base["objects_created"] + 2
    assert st["arena_used"] >= base["arena_used"] + MIB
    a.close()
    wait_until(lambda: stats(b)["objects_created"] == base["objects_created"],
               what="created objects to be aborted after the creator disconnected")
    st = stats(b)
    assert st["arena_used"] == base["arena_used"]
    assert st["objects"] == base["objects"]
    assert b.obj("OBJ.EXISTS", b"c1") == 0
    expect_error(b, ("OBJ.INFO", b"c1"), "NOTFOUND")
    # the ids are free again
    b.obj("OBJ.CREATE", b"c1", 1)
    b.obj("OBJ.ABORT", b"c1")


def test_creator_disconnect_keeps_its_sealed_objects(fresh_server):
    a, b = fresh_server.client(), fresh_server.client()
    a.obj("OBJ.PUT", b"kept", b"data")
    a.obj("OBJ.CREATE", b"sealed", 2)
    a.obj("OBJ.WRITE", b"sealed", 0, b"ok")
    a.obj("OBJ.SEAL", b"sealed")
    a.close()
    wait_until(lambda: fresh_server.alive() and stats(b)["blocked_clients"] == 0)
    assert b.obj("OBJ.GET", b"kept") == b"data"
    assert b.obj("OBJ.GET", b"sealed") == b"ok"


def test_creator_disconnect_wakes_a_waiter_on_its_created_object(fresh_server):
    a, b = fresh_server.client(), fresh_server.client()
    a.obj("OBJ.CREATE", b"obj", 4)
    waiter = start_call(b, "OBJ.GET", b"obj")
    wait_blocked(a, 1)
    a.close()
    waiter.join(10)
    assert not waiter.is_alive(), "waiter still blocked after the creator disconnected"
    assert waiter.error is not None and str(waiter.error).split()[0] == "NOTFOUND", (
        f"expected NOTFOUND, got reply {waiter.reply!r} / error {waiter.error!r}"
    )


def test_disconnect_drops_pins_and_completes_a_deferred_delete(fresh_server):
    a, b = fresh_server.client(), fresh_server.client()
    base = stats(b)
    b.obj("OBJ.PUT", b"obj", _blob(b"p"))
    a.obj("OBJ.PIN", b"obj")
    a.obj("OBJ.PIN", b"obj")
    assert stats(b)["objects_pinned"] == base["objects_pinned"] + 1
    assert b.obj("OBJ.DEL", b"obj") == b"DEFERRED"
    a.close()
    wait_until(lambda: stats(b)["arena_used"] == base["arena_used"],
               what="the deferred delete to complete after the pinner disconnected")
    st = stats(b)
    assert st["objects"] == base["objects"] and st["objects_pinned"] == base["objects_pinned"]


def test_disconnect_drops_pins_of_a_live_object(fresh_server):
    a, b = fresh_server.client(), fresh_server.client()
    b.obj("OBJ.PUT", b"obj", b"x")
    a.obj("OBJ.PIN", b"obj")
    a.close()
    wait_until(lambda: to_int(info(b, b"obj")["pins"]) == 0,
               what="pins to drop after the pinner disconnected")
    assert b.obj("OBJ.DEL", b"obj") == b"OK"


# ---- releases that name their pin: an id deleted and made again names two objects ----


def _two_generations(srv):
    """a pins the old object under "obj", b deletes and re-puts it, a pins the new one.
    Returns (a, b, old pin reply, new pin reply, the old bytes)."""
    a, b = srv.client(), srv.client()
    old = _blob(b"OLD!", 4096)
    a.obj("OBJ.PUT", b"obj", old)
    pin1 = reply_map(a.obj("OBJ.PIN", b"obj"))
    assert b.obj("OBJ.DEL", b"obj") == b"DEFERRED"
    b.obj("OBJ.PUT", b"obj", _blob(b"new?", 4096))
    pin2 = reply_map(a.obj("OBJ.PIN", b"obj"))
    assert to_int(pin2["gen"]) != to_int(pin1["gen"])
    assert to_int(pin2["offset"]) != to_int(pin1["offset"])
    return a, b, pin1, pin2, old


def test_pin_answers_the_generation_of_the_object_it_pinned(fresh_server):
    a = fresh_server.client()
    a.obj("OBJ.PUT", b"obj", b"x")
    first = reply_map(a.obj("OBJ.PIN", b"obj"))
    assert reply_map(a.obj("OBJ.PIN", b"obj"))["gen"] == first["gen"]
    a.obj("OBJ.RELEASE", b"obj", "GEN", first["gen"])
    a.obj("OBJ.RELEASE", b"obj", "GEN", first["gen"])
    a.obj("OBJ.DEL", b"obj")
    a.obj("OBJ.PUT", b"obj", b"x")
    assert to_int(reply_map(a.obj("OBJ.PIN", b"obj"))["gen"]) > to_int(first["gen"])


def test_release_by_gen_of_the_new_object_keeps_the_old_one_pinned(fresh_server):
    a, b, pin1, pin2, old = _two_generations(fresh_server)
    used = stats(b)["arena_used"]
    assert a.obj("OBJ.RELEASE", b"obj", "GEN", pin2["gen"]) == b"OK"
    assert to_int(info(b, b"obj")["pins"]) == 0
    st = stats(b)
    assert st["objects_deleting"] == 1, "the old object's pin was dropped instead"
    assert st["arena_used"] == used
    # a new object must not land under the old, still pinned view
    b.obj("OBJ.PUT", b"other", _blob(b"\xee", 4096))
    assert read_arena(st["arena_path"], to_int(pin1["offset"]), len(old)) == old
    assert a.obj("OBJ.RELEASE", b"obj", "GEN", pin1["gen"]) == b"OK"
    assert stats(b)["objects_deleting"] == 0
    expect_error(a, ("OBJ.RELEASE", b"obj", "GEN", pin1["gen"]), "WRONGSTATE")


def test_release_by_offset_drops_the_pin_of_the_object_at_that_offset(fresh_server):
    a, b, pin1, pin2, old = _two_generations(fresh_server)
    assert a.obj("OBJ.RELEASE", b"obj", "OFFSET", pin1["offset"]) == b"OK"
    assert stats(b)["objects_deleting"] == 0
    assert to_int(info(b, b"obj")["pins"]) == 1
    assert a.obj("OBJ.RELEASE", b"obj", "OFFSET", pin2["offset"]) == b"OK"
    assert to_int(info(b, b"obj")["pins"]) == 0


def test_release_naming_no_pin_is_refused_while_two_generations_are_pinned(fresh_server):
    a, b, pin1, pin2, old = _two_generations(fresh_server)
    before = stats(b)
    expect_error(a, ("OBJ.RELEASE", b"obj"), "WRONGSTATE")
    after = stats(b)
    assert after["objects_deleting"] == 1 and after["releases"] == before["releases"]
    assert to_int(info(b, b"obj")["pins"]) == 1
    a.obj("OBJ.RELEASE", b"obj", "GEN", pin1["gen"])
    assert a.obj("OBJ.RELEASE", b"obj") == b"OK"  # one object left: the old form works
    assert to_int(info(b, b"obj")["pins"]) == 0


def test_release_by_gen_of_another_connections_pin_is_refused(fresh_server):
    a, b, pin1, pin2, old = _two_generations(fresh_server)
    expect_error(b, ("OBJ.RELEASE", b"obj", "GEN", pin2["gen"]), "WRONGSTATE")
    assert to_int(info(b, b"obj")["pins"]) == 1
