"""Waiting: OBJ.GET and OBJ.PIN of objects that are not sealed yet.

README: a created object is waited for until sealed; a missing id is waited
for only with TIMEOUT (0 = forever) and TIMEOUT is answered when the time
runs out; waiting never blocks the server. Each waiter runs on its own
connection in a thread; the test waits for Redis's own blocked-client count
before acting, so the wake-up really comes from a blocked state.
"""

import time

from objhelpers import (
    expect_error,
    info,
    raw_send,
    reply_map,
    start_call,
    stats,
    to_int,
    wait_blocked,
    wait_until,
)


def test_get_of_created_object_returns_data_when_creator_seals(r, r2, uid):
    r.obj("OBJ.CREATE", uid, 5)
    r.obj("OBJ.WRITE", uid, 0, b"he\x00lo")
    waiter = start_call(r2, "OBJ.GET", uid)
    wait_blocked(r, 1)
    time.sleep(0.05)
    assert waiter.is_alive(), "OBJ.GET of a created object answered before the seal"
    assert r.obj("OBJ.SEAL", uid) == b"OK"
    assert waiter.result() == b"he\x00lo"
    r.obj("OBJ.DEL", uid)


def test_get_withmeta_of_created_object_returns_data_and_meta_after_seal(r, r2, uid):
    r.obj("OBJ.CREATE", uid, 2, "META", b"mt")
    r.obj("OBJ.WRITE", uid, 0, b"ok")
    waiter = start_call(r2, "OBJ.GET", uid, "WITHMETA")
    wait_blocked(r, 1)
    r.obj("OBJ.SEAL", uid)
    assert waiter.result() == [b"ok", b"mt"]
    r.obj("OBJ.DEL", uid)


def test_get_with_timeout_of_missing_id_returns_data_when_put_by_another_connection(r, r2, uid):
    # The data (not TIMEOUT) shows the put woke it; the long TIMEOUT only bounds a hang.
    waiter = start_call(r2, "OBJ.GET", uid, "TIMEOUT", 600000)
    wait_blocked(r, 1)
    assert r.obj("OBJ.PUT", uid, b"late\r\n") == b"OK"
    assert waiter.result() == b"late\r\n"
    r.obj("OBJ.DEL", uid)


def test_get_with_timeout_of_missing_id_is_woken_by_create_and_seal(r, r2, uid):
    waiter = start_call(r2, "OBJ.GET", uid, "TIMEOUT", 10000)
    wait_blocked(r, 1)
    r.obj("OBJ.CREATE", uid, 3)
    r.obj("OBJ.WRITE", uid, 0, b"abc")
    time.sleep(0.05)
    assert waiter.is_alive(), "answered before the seal"
    r.obj("OBJ.SEAL", uid)
    assert waiter.result() == b"abc"
    r.obj("OBJ.DEL", uid)


def test_get_timeout_answers_TIMEOUT_when_the_time_runs_out(r, uid):
    t0 = time.monotonic()
    expect_error(r, ("OBJ.GET", uid, "TIMEOUT", 200), "TIMEOUT")
    elapsed = time.monotonic() - t0
    assert elapsed >= 0.15, f"TIMEOUT 200 answered after {elapsed:.3f}s"


def test_get_timeout_of_created_object_answers_TIMEOUT(r, r2, uid):
    r.obj("OBJ.CREATE", uid, 1)
    t0 = time.monotonic()
    expect_error(r2, ("OBJ.GET", uid, "TIMEOUT", 200), "TIMEOUT")
    assert time.monotonic() - t0 >= 0.15
    r.obj("OBJ.ABORT", uid)


def test_pin_timeout_answers_TIMEOUT_when_the_time_runs_out(r, uid):
    before = stats(r)
    t0 = time.monotonic()
    expect_error(r, ("OBJ.PIN", uid, "TIMEOUT", 200), "TIMEOUT")
    elapsed = time.monotonic() - t0
    assert elapsed >= 0.15, f"TIMEOUT 200 answered after {elapsed:.3f}s"
    assert stats(r)["objects_pinned"] == before["objects_pinned"]


def test_timed_out_waiter_is_no_longer_blocked(r, uid):
    expect_error(r, ("OBJ.GET", uid, "TIMEOUT", 100), "TIMEOUT")
    wait_until(lambda: stats(r)["blocked_clients"] == 0, what="blocked_clients back to 0")
    r.obj("OBJ.PUT", uid, b"x")  # a put after the timeout must not trip over a stale waiter
    assert r.obj("OBJ.GET", uid) == b"x"
    r.obj("OBJ.DEL", uid)


def test_blocked_get_does_not_block_the_server(r, r2, uid):
    waiter = start_call(r2, "OBJ.GET", uid, "TIMEOUT", 0)  # 0 = forever
    wait_blocked(r, 1)
    # Answered at all while a waiter blocks forever: the server is not blocked.
    assert r.execute_command("PING") == b"PONG"
    assert r.obj("OBJ.EXISTS", uid) == 0
    time.sleep(0.3)
    assert waiter.is_alive(), "TIMEOUT 0 should wait forever"
    r.obj("OBJ.PUT", uid, b"v")
    assert waiter.result() == b"v"
    r.obj("OBJ.DEL", uid)


def test_abort_wakes_a_waiting_get_with_NOTFOUND(r, r2, uid):
    r.obj("OBJ.CREATE", uid, 4)
    waiter = start_call(r2, "OBJ.GET", uid)
    wait_blocked(r, 1)
    assert r.obj("OBJ.ABORT", uid) == b"OK"
    waiter.join(10)
    assert not waiter.is_alive(), "waiter not woken by OBJ.ABORT"
    assert waiter.error is not None and str(waiter.error).split()[0] == "NOTFOUND", (
        f"expected NOTFOUND, got reply {waiter.reply!r} / error {waiter.error!r}"
    )


def test_abort_wakes_a_waiting_pin_with_NOTFOUND(r, r2, uid):
    r.obj("OBJ.CREATE", uid, 4)
    waiter = start_call(r2, "OBJ.PIN", uid)
    wait_blocked(r, 1)
    r.obj("OBJ.ABORT", uid)
    waiter.join(10)
    assert not waiter.is_alive(), "waiter not woken by OBJ.ABORT"
    assert waiter.error is not None and str(waiter.error).split()[0] == "NOTFOUND", (
        f"expected NOTFOUND, got reply {waiter.reply!r} / error {waiter.error!r}"
    )


def test_pin_of_created_object_waits_for_seal_and_pins(r, r2, uid):
    created = reply_map(r.obj("OBJ.CREATE", uid, 3))
    r.obj("OBJ.WRITE", uid, 0, b"pin")
    waiter = start_call(r2, "OBJ.PIN", uid)
    wait_blocked(r, 1)
    r.obj("OBJ.SEAL", uid)
    pinned = reply_map(waiter.result())
    assert pinned["offset"] == created["offset"] and pinned["size"] == 3
    assert r.obj("OBJ.DEL", uid) == b"DEFERRED"  # r2 holds the pin it waited for
    assert r2.obj("OBJ.RELEASE", uid) == b"OK"


def test_pin_with_timeout_of_missing_id_is_woken_by_put(r, r2, uid):
    waiter = start_call(r2, "OBJ.PIN", uid, "TIMEOUT", 10000)
    wait_blocked(r, 1)
    r.obj("OBJ.PUT", uid, b"abcd", "META", b"z")
    pinned = reply_map(waiter.result())
    assert pinned["size"] == 4 and pinned["meta"] == b"z"
    assert r2.obj("OBJ.RELEASE", uid) == b"OK"
    r.obj("OBJ.DEL", uid)


def test_seal_wakes_every_waiter(server, r, uid):
    r.obj("OBJ.CREATE", uid, 3)
    waiters = [start_call(server.client(), "OBJ.GET", uid) for _ in range(2)]
    waiters += [start_call(server.client(), "OBJ.GET", uid, "TIMEOUT", 10000) for _ in range(2)]
    wait_blocked(r, 4)
    assert stats(r)["blocked_clients"] >= 4
    r.obj("OBJ.WRITE", uid, 0, b"all")
    r.obj("OBJ.SEAL", uid)
    assert [w.result() for w in waiters] == [b"all"] * 4
    r.obj("OBJ.DEL", uid)


def test_waiter_that_disconnects_is_forgotten(server, r, uid):
    sock = raw_send(server.port, "OBJ.GET", uid, "TIMEOUT", 0)
    wait_blocked(r, 1)
    sock.close()  # the waiting connection goes away
    wait_until(lambda: stats(r)["blocked_clients"] == 0, what="blocked_clients back to 0")
    assert r.obj("OBJ.PUT", uid, b"after") == b"OK"
    assert r.execute_command("PING") == b"PONG"
    assert r.obj("OBJ.GET", uid) == b"after"
    r.obj("OBJ.DEL", uid)


def test_pin_waiter_that_disconnects_holds_no_pin(server, r, uid):
    sock = raw_send(server.port, "OBJ.PIN", uid, "TIMEOUT", 0)
    wait_blocked(r, 1)
    sock.close()
    wait_until(lambda: stats(r)["blocked_clients"] == 0, what="blocked_clients back to 0")
    r.obj("OBJ.PUT", uid, b"x")
    assert to_int(info(r, uid)["pins"]) == 0
    assert r.obj("OBJ.DEL", uid) == b"OK"


def test_waiters_on_different_ids_are_woken_separately(r, r2, r3, uid):
    a, b = uid(b"a"), uid(b"b")
    wa = start_call(r2, "OBJ.GET", a, "TIMEOUT", 10000)
    wb = start_call(r3, "OBJ.GET", b, "TIMEOUT", 10000)
    wait_blocked(r, 2)
    r.obj("OBJ.PUT", b, b"B")
    assert wb.result() == b"B"
    time.sleep(0.05)
    assert wa.is_alive(), "waiter for a was woken by a put of b"
    r.obj("OBJ.PUT", a, b"A")
    assert wa.result() == b"A"
    r.obj("OBJ.DEL", a)
    r.obj("OBJ.DEL", b)
