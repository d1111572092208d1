"""What SecureComm's construction sends and decides, on the in-process world of threads: the
settings in the setup hello, which transport a failed setup closes, and the defaults it takes
from the transport and the machine."""

from __future__ import annotations


import numpy as np
import pytest

from seccomm import ConfigMismatchError, SecureComm
from seccomm.transports import TransportWrapper
from test_threadworld_ops import (
    PSK,
    ok,
    world_run,
)
from test_comm_ops import Closing
from threadworld import World


class Hellos(TransportWrapper):
    """Keeps the first allgather's rows: every rank's setup hello."""

    def __init__(self, inner):
        super().__init__(inner)
        self.rows = None

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        self.inner.allgather(sendbuf, recvbuf, op_label, timeout)
        if self.rows is None:
            self.rows = np.asarray(recvbuf).reshape(self.size, -1).copy()


def test_the_setup_hello_carries_every_setting():
    """Every rank's hello (docs/design.md, "Setup transcript") carries the setup protocol (4)
    and every setting the ranks must agree on, as the rank set them; a rank with a bad argument
    sends the protocol and its error only."""
    from seccomm.handshake import decode_hello, job_label, node_ids_digest

    kw = dict(
        suite="chacha20-poly1305",
        algorithm="ring",
        encrypt="inter-node",
        chunk_bytes=4096,
        key_exchange="psk-dhe",
        job_id="job 7",
        rotate_after_frames=1000,
        small_bytes=99,
        bcast_chain_bytes=77,
        node_ids=[0, 1],
    )

    def body(sc):
        return [decode_hello(row.tobytes()) for row in sc.transport.rows]

    res = ok(world_run(2, body, wrap=lambda r, t: Hellos(t), **kw))
    want = dict(kw, protocol=4, identity="psk", world_size=2, usage_limit=1000, job_id=job_label("job 7"))
    want["node_ids"] = node_ids_digest([0, 1])
    del want["rotate_after_frames"]
    for hellos in res:
        assert [h.settings for h in hellos] == [want, want] and all(h.error is None for h in hellos)
    wraps = [Hellos(t) for t in World(2).transports(3)]
    world = wraps[0].inner.world
    got = world.run(
        lambda r: SecureComm(
            wraps[r].inner, psk=PSK, algorithm="tree" if r else "auto", wrap_transport=lambda t: wraps[r]
        )
    )
    assert isinstance(got[1], ValueError) and isinstance(got[0], ConfigMismatchError), got
    bad = decode_hello(wraps[0].rows[1].tobytes())
    assert bad.settings == {"protocol": 4} and "unknown algorithm" in bad.error


def test_the_setup_closes_only_the_transport_it_made():
    """A failed setup on a Transport the caller passed leaves it open (it is the caller's)."""
    trs = World(2).transports(3)
    closers = [Closing(t) for t in trs]
    world = trs[0].world
    res = world.run(
        lambda r: SecureComm(trs[r], psk=PSK, chunk_bytes=64 * (r + 1), wrap_transport=lambda t: closers[r])
    )
    assert all(isinstance(e, ConfigMismatchError) for e in res), res
    assert [c.closed for c in closers] == [0, 0]


def test_small_bytes_default_comes_from_the_transport():
    """small_bytes not given: the transport's ``small_bytes_default`` (Transport: 64 KiB;
    torch.distributed: 2 MiB)."""
    from seccomm.transports import Transport
    from threadworld import ThreadTransport

    class Tuned(ThreadTransport):
        small_bytes_default = 12345

    world = World(2)
    tuned = [Tuned(world, r, 3) for r in range(2)]
    assert ok(world.run(lambda r: SecureComm(tuned[r], psk=PSK).small_bytes)) == [12345, 12345]
    assert ok(world_run(2, lambda sc: sc.small_bytes)) == [Transport.small_bytes_default] * 2 == [65536] * 2
    assert ok(world_run(2, lambda sc: sc.small_bytes, small_bytes=5)) == [5, 5]


def test_world_sizes_up_to_max_ranks(monkeypatch):
    """At most framing.MAX_RANKS ranks (the 16-bit step field; lowered to 2 here): a world of
    MAX_RANKS works, one rank more is refused on every rank, saying why."""
    from seccomm import options

    monkeypatch.setattr(options, "MAX_RANKS", 2)
    assert ok(world_run(2, lambda sc: sc.size)) == [2, 2]
    res = world_run(3, lambda sc: sc.size)
    assert isinstance(res[0], ValueError) and str(res[0]) == "world size 3 exceeds 2 (16-bit step field)", res
    assert all(isinstance(e, (ValueError, ConfigMismatchError)) for e in res), res


@pytest.mark.parametrize("cores, threads", [(7, 3), (16, 8), (3, 1)])
def test_crypto_threads_default_to_the_cores_per_rank_of_the_node(monkeypatch, cores, threads):
    """Two ranks on one host: cores // 2, at least 1, at most 8."""
    from seccomm import comm

    monkeypatch.delenv("SECCOMM_CRYPTO_THREADS", raising=False)
    monkeypatch.setattr(comm.os, "cpu_count", lambda: cores)

    def used(sc):
        return sc.crypto_threads, sc.context.pool and sc.context.pool._max_workers

    res = ok(world_run(2, used, crypto_threads=None))
    assert res == [(threads, threads if threads > 1 else None)] * 2


@pytest.mark.parametrize("given", ["psk", "file", "env"])
def test_suite_none_refuses_a_secret_that_is_given_but_unusable(given, monkeypatch, tmp_path):
    """``none`` needs no key and runs without a secret, but a secret that is set and unusable (a
    0644 file, a short one) is an error on every rank, as under every suite: never a silent
    zero key."""
    from seccomm import KeyScheduleError

    for var in ("SECCOMM_PSK_FILE", "SECCOMM_PSK"):
        monkeypatch.delenv(var, raising=False)
    kw = {}
    if given == "psk":
        kw["psk"] = b"short"
    elif given == "file":
        f = tmp_path / "secret"
        f.write_text(PSK.hex() if isinstance(PSK, bytes) else str(PSK))
        f.chmod(0o644)
        monkeypatch.setenv("SECCOMM_PSK_FILE", str(f))
    else:
        monkeypatch.setenv("SECCOMM_PSK", "00" * 8)
    world = World(2)
    trs = world.transports(3)
    res = world.run(lambda r: SecureComm(trs[r], suite="none", **kw))
    assert all(isinstance(e, (KeyScheduleError, ConfigMismatchError)) for e in res), res
    assert any(isinstance(e, KeyScheduleError) for e in res), res
    if given == "psk":  # no source set at all: it runs, with no key
        trs = World(2).transports(3)
        nokey = ok(trs[0].world.run(lambda r: SecureComm(trs[r], suite="none")))
        assert [sc.secret_source for sc in nokey] == ["none (suite 'none' uses no key)"] * 2


def test_the_exit_hook_closes_in_the_order_of_construction(monkeypatch):
    """``close()`` is collective, so the exit hook must close the SecureComms left open in the
    same order on every rank: newest first by construction (the same on every rank), not in a
    WeakSet's order (by address, which differs between ranks: each rank then waited out another
    close, and thousands left open held the exit for minutes)."""
    import random
    import weakref

    from seccomm import comm

    closed = []

    class Fake:
        def __init__(self, built):
            self.built = built

        def close(self):
            closed.append(self.built)

    fakes = [Fake(i) for i in range(50)]
    random.Random(1).shuffle(fakes)
    monkeypatch.setattr(comm, "_OPEN", weakref.WeakSet(fakes))
    comm._close_open_comms()
    assert closed == list(range(49, -1, -1))
    built = ok(world_run(2, lambda sc: sc.built))
    assert built[0] != built[1] and all(isinstance(b, int) for b in built)


def test_a_forked_child_refuses_every_call_and_leaves_the_parent_alone():
    """A child forked after a SecureComm was built shares its keys and connections: every call
    there raises CommClosedError naming the call and both processes, at once and before anything
    is sent, and ``close()`` returns without touching the transport; the parent goes on.  (One
    rank in this process, so no other thread is lost in the fork; the child reports through a
    pipe and leaves with ``os._exit``.)"""
    import json
    import os

    from seccomm import CommClosedError

    class Counting(TransportWrapper):
        calls = 0

        def isend(self, buf, peer):
            Counting.calls += 1
            return self.inner.isend(buf, peer)

        def close(self):
            Counting.calls += 1
            return self.inner.close()

    trs = World(1).transports(3)
    sc = SecureComm(trs[0], "aes-256-gcm", psk=PSK, timeout=2, crypto_threads=1, wrap_transport=Counting)
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    sc.allreduce(x, y)
    parent = os.getpid()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        try:
            out = {}
            try:
                sc.allgather(x, np.zeros(8, np.float32))
            except CommClosedError as e:
                out["error"] = str(e)
            before = Counting.calls
            sc.close()
            out["touched"] = Counting.calls - before
            os.write(w, json.dumps(out).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        got = json.loads(f.read() or "{}")
    os.waitpid(pid, 0)
    child = "allgather: this process (pid {}) is a fork of the one that built this SecureComm (pid {})"
    assert got.get("error", "").startswith(child.format(pid, parent)), got
    assert got.get("touched") == 0, got
    sc.allreduce(x, y)  # the parent's communicator is as it was
    assert np.array_equal(y, x)
    sc.close()


def test_the_options_are_the_communicators():
    """``SecureComm.options``: the checked options it runs under (the suite as its record)."""
    trs = World(1).transports(3)
    sc = SecureComm(trs[0], "chacha20-poly1305", psk=PSK, chunk_bytes=4096, timeout=2, crypto_threads=1)
    o = sc.options
    assert (o.suite.name, o.chunk_bytes, o.timeout, o.crypto_threads) == ("chacha20-poly1305", 4096, 2, 1)
    assert (o.algorithm, o.encrypt, o.key_exchange) == (sc.algorithm, sc.encrypt, sc.key_exchange)
    sc.close()


@pytest.mark.parametrize("dtype", ["float64", "float32", "uint8"])
def test_the_per_key_bound_counts_chunks_of_whole_elements(dtype):
    """A chunk holds whole elements: at ``chunk_bytes=20`` a float64 chunk carries 16 bytes, a
    float32 one 20, a uint8 one 20.  The frame bound an op is refused with counts chunks so (an
    op counted with 20-byte chunks of float64 could pass the per-key limit and then seal more
    frames under one key than it allows)."""
    from seccomm.collectives import COLLECTIVES

    size = 2
    itemsize = np.dtype(dtype).itemsize
    n = 800 // itemsize  # 800 bytes
    chunks = -(-800 // (20 // itemsize * itemsize)) + 1
    want = COLLECTIVES["allreduce"].frame_bound(size, chunks)

    def body(sc):
        try:
            sc.allreduce(np.ones(n, dtype), np.zeros(n, dtype))
        except ValueError as e:
            return str(e)

    res = world_run(size, body, chunk_bytes=20, rotate_after_frames=1, algorithm="ring")
    msg = f"allreduce of 800 bytes may seal up to {want} frames under one key, over the per-key limit of 1"
    assert res == [f"{msg}: raise rotate_after_frames"] * size, res
