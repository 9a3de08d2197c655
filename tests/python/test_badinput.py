"""Bad arguments raise TypeError/ValueError before anything is sent (the node's
command counters do not move), and every error code word maps to its exception."""

import numpy as np
import pytest

import objstore
from errwords import read_words


def obj_calls(rc):
    """Calls of OBJ.* commands the node has seen (INFO commandstats), failed ones too."""
    total = 0
    for line in rc.execute_command("INFO", "commandstats").decode().splitlines():
        if line.startswith("cmdstat_obj."):
            fields = dict(kv.split("=") for kv in line.split(":", 1)[1].split(","))
            total += sum(int(fields.get(k, 0)) for k in ("calls", "rejected_calls",
                                                          "failed_calls"))
    return total


BIG_ID = b"x" * 513

BAD_CALLS = [
    ("put int id", lambda c: c.put(5, b"x"), TypeError),
    ("put None id", lambda c: c.put(None, b"x"), TypeError),
    ("put list id", lambda c: c.put([b"a"], b"x"), TypeError),
    ("put empty id", lambda c: c.put(b"", b"x"), ValueError),
    ("put 513-byte id", lambda c: c.put(BIG_ID, b"x"), ValueError),
    ("put 513-byte str id", lambda c: c.put("é" * 257, b"x"), ValueError),
    ("put a dict", lambda c: c.put(b"k", {"a": 1}), TypeError),
    ("put an int", lambda c: c.put(b"k", 7), TypeError),
    ("put object array", lambda c: c.put(b"k", np.array([object()])), TypeError),
    ("put int meta", lambda c: c.put(b"k", b"x", meta=3), TypeError),
    ("put 0 replicas", lambda c: c.put(b"k", b"x", replicas=0), ValueError),
    ("put negative replicas", lambda c: c.put(b"k", b"x", replicas=-1), ValueError),
    ("put 17 replicas", lambda c: c.put(b"k", b"x", replicas=17), ValueError),
    ("put float replicas", lambda c: c.put(b"k", b"x", replicas=2.0), TypeError),
    ("put bool replicas", lambda c: c.put(b"k", b"x", replicas=True), TypeError),
    ("put negative wait_ms", lambda c: c.put(b"k", b"x", replicas=2, wait_ms=-1), ValueError),
    ("put float wait_ms", lambda c: c.put(b"k", b"x", replicas=2, wait_ms=0.5), TypeError),
    ("put_object 0 replicas", lambda c: c.put_object(b"k", [1], replicas=0), ValueError),
    ("create 0 replicas", lambda c: c.create(b"k", 1, replicas=0), ValueError),
    ("create negative wait_ms", lambda c: c.create(b"k", 1, wait_ms=-5), ValueError),
    ("publish 0 replicas", lambda c: objstore.models.publish(c, "m", {}, replicas=0), ValueError),
    ("drain negative wait_ms", lambda c: c.drain(wait_ms=-1), ValueError),
    ("create negative size", lambda c: c.create(b"k", -1), ValueError),
    ("create huge size", lambda c: c.create(b"k", 2**64), ValueError),
    ("create float size", lambda c: c.create(b"k", 1.5), TypeError),
    ("create str size", lambda c: c.create(b"k", "10"), TypeError),
    ("create 513-byte id", lambda c: c.create(BIG_ID, 1), ValueError),
    ("get int id", lambda c: c.get(1), TypeError),
    ("get 513-byte id", lambda c: c.get(BIG_ID), ValueError),
    ("get negative timeout", lambda c: c.get(b"k", timeout=-1), ValueError),
    ("get nan timeout", lambda c: c.get(b"k", timeout=float("nan")), ValueError),
    ("get str timeout", lambda c: c.get(b"k", timeout="1"), TypeError),
    ("get bad kind", lambda c: c.get(b"k", kind="pandas"), ValueError),
    ("fetch no ids", lambda c: c.fetch([]), ValueError),
    ("fetch bad via", lambda c: c.fetch([b"k"], via="udp"), ValueError),
    ("fetch int id", lambda c: c.fetch([1]), TypeError),
    ("fetch 129-byte node", lambda c: c.fetch([b"k"], from_=b"n" * 129), ValueError),
    ("list zero count", lambda c: c.list(count=0), ValueError),
    ("delete 513-byte id", lambda c: c.delete(BIG_ID), ValueError),
    ("exists bytes-like junk", lambda c: c.exists(3.0), TypeError),
    ("info empty id", lambda c: c.info(""), ValueError),
    ("put_object 513-byte id", lambda c: c.put_object(BIG_ID, [1]), ValueError),
    ("pin cache negative", lambda c: c.set_pin_cache(-1), ValueError),
    ("raw command of a dict", lambda c: c.command({"a": 1}), TypeError),
]


@pytest.mark.parametrize("name,call,exc", BAD_CALLS, ids=[b[0] for b in BAD_CALLS])
def test_bad_arguments_are_refused_before_sending(oc, rc, name, call, exc):
    before = obj_calls(rc)
    with pytest.raises(exc):
        call(oc)
    assert obj_calls(rc) == before, "nothing reached the node"


BAD_CONNECTS = [
    ("port 0", dict(port=0), ValueError),
    ("port too large", dict(port=70000), ValueError),
    ("port as str", dict(port="6379"), ValueError),
    ("transport", dict(transport="udp"), ValueError),
    ("zero_copy junk", dict(zero_copy="yes"), TypeError),
    ("password int", dict(password=5), TypeError),
    ("url scheme", dict(host="http://127.0.0.1:1"), ValueError),
]


@pytest.mark.parametrize("name,kw,exc", BAD_CONNECTS, ids=[b[0] for b in BAD_CONNECTS])
def test_bad_connect_arguments(name, kw, exc):
    with pytest.raises(exc):
        objstore.connect(**kw)


def test_connection_refused_is_connection_failed():
    from objnodes import free_port
    with pytest.raises(objstore.ConnectionFailed) as e:
        objstore.connect("127.0.0.1", free_port())
    assert isinstance(e.value, ConnectionError) and isinstance(e.value, objstore.ObjstoreError)


def test_closed_client_refuses_every_call(server, uid):
    c = objstore.connect("127.0.0.1", server.port)
    c.close()
    c.close()  # twice is fine
    for call in (lambda: c.put(uid, b"x"), lambda: c.get(uid), lambda: c.create(uid, 1),
                 lambda: c.stats(), lambda: c.delete(uid), lambda: list(c.list())):
        with pytest.raises(objstore.ClientClosed):
            call()
    assert c.closed


def test_huge_but_valid_size_is_the_nodes_oom(oc, uid):
    with pytest.raises(objstore.OutOfMemory) as e:
        oc.create(uid, 1 << 50)
    assert e.value.code == "OOM"


# Every code word the node (or Redis) answers, raised by a script on the real node.
CODE_WORDS = [
    ("BADARG", objstore.BadArgument), ("NOTFOUND", objstore.ObjectNotFound),
    ("EXISTS", objstore.ObjectExists), ("OOM", objstore.OutOfMemory),
    ("NOTSEALED", objstore.NotSealed), ("WRONGSTATE", objstore.WrongState),
    ("TIMEOUT", objstore.Timeout), ("UNAVAILABLE", objstore.Unavailable),
    ("NOTSUPPORTED", objstore.NotSupported), ("CHECKSUM", objstore.ChecksumMismatch),
    ("BUSY", objstore.Busy), ("DRAINING", objstore.NodeDraining),
    ("NOAUTH", objstore.AuthError), ("WRONGPASS", objstore.AuthError),
    ("NOPERM", objstore.AuthError), ("ERR", objstore.ObjstoreError),
    ("SOMETHINGNEW", objstore.ObjstoreError),
]


@pytest.mark.parametrize("word,cls", CODE_WORDS, ids=[w for w, _ in CODE_WORDS])
def test_every_code_word_maps_to_its_exception(oc, word, cls):
    with pytest.raises(cls) as e:
        oc.command("EVAL", "return redis.error_reply(ARGV[1])", 0, f"{word} made up reason")
    assert type(e.value) is cls
    assert e.value.code == word and "made up reason" in str(e.value)
    assert isinstance(e.value, objstore.ObjstoreError)


# The one list (module/common/errwords.h): each word, the class it names.
LISTED_WORDS = read_words()


@pytest.mark.parametrize("row", LISTED_WORDS, ids=[w.word for w in LISTED_WORDS])
def test_every_word_of_the_list_raises_the_class_it_names(oc, row):
    cls = getattr(objstore, row.py_class)
    with pytest.raises(cls) as e:
        oc.command("EVAL", "return redis.error_reply(ARGV[1])", 0, f"{row.word} made up reason")
    assert type(e.value) is cls
    assert e.value.code == row.word


def test_real_errors_from_the_node(oc, uid):
    with pytest.raises(objstore.ObjectNotFound):
        oc.get(uid)
    oc.put(uid, b"x")
    with pytest.raises(objstore.ObjectExists):
        oc.put(uid, b"y")
    with pytest.raises(objstore.Timeout) as e:
        oc.get(uid + b"missing", timeout=0.05)
    assert isinstance(e.value, TimeoutError)
    c = oc.create(uid + b"c", 4)
    with pytest.raises(objstore.WrongState):
        oc.delete(uid + b"c")
    c.abort()
    with pytest.raises(objstore.BadArgument):
        oc.command("OBJ.CREATE", uid + b"n", "-5")


def test_fetch_reports_per_id_errors(oc, uid):
    oc.put(uid, b"here")
    res = oc.fetch([uid, uid + b"nowhere"], timeout=2)
    assert res[uid] is None
    assert isinstance(res[uid + b"nowhere"], objstore.ObjstoreError)
