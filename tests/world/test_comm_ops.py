"""SecureComm's bookkeeping around the ops, on the in-process world of threads (helpers of
tests/world/test_threadworld_ops.py): epochs and rotation, close, an op that failed, ranks that
disagree on a call, the algorithm "auto" picks, inf/NaN arithmetic, the device engine and the
staged route."""

from __future__ import annotations

import gc
import math
import time
import weakref

import numpy as np
import pytest

from seccomm import ArgumentMismatchError, AuthenticationError, PeerAbortError, SecCommError, SecureComm
from seccomm.errors import FrameError
from seccomm.agreement import Agreement
from seccomm.collectives import COLLECTIVES
from seccomm.transports import TransportWrapper
from seccomm.transports.wrappers import RecordingTransport
from test_threadworld_ops import (
    PSK,
    WIRE_ERRORS,
    Swap,
    data,
    flip,
    ok,
    ref_allreduce,
    run_op,
    world_run,
)
from threadworld import World, record_seals


# -- SecureComm: epochs, close, routes, the call every rank must agree on -------------------------
def op_indices(log):
    """The epoch-local op index (nonce bits 95..64, seccomm.framing) of each logged seal."""
    return {int.from_bytes(nonce[:4], "big") for _, nonce in log}


def test_epochs_rotate_when_the_next_op_could_pass_the_limit():
    """docs/design.md, "Epochs": before each op every rank adds the op's frame bound; when the
    total would pass rotate_after_frames, all move to the next epoch (new keys, op index 0).
    With the limit at 3 bounds, epochs change before ops 4 and 7; each epoch numbers its ops
    0, 1, 2 in the nonce and has keys of its own."""
    p, n, chunk_bytes = 2, 200, 64
    bound = COLLECTIVES["allreduce"].frame_bound(p, math.ceil(4 * n / chunk_bytes) + 1)

    def body(sc):
        log, out = [], []
        record_seals(sc, log)
        for k in range(8):
            start = len(log)
            run_op(sc, "allreduce", k)
            out.append((sc.epoch, sc.rotations, op_indices(log[start:]), {key for key, _ in log[start:]}))
        return out

    res = ok(world_run(p, body, chunk_bytes=chunk_bytes, rotate_after_frames=3 * bound))
    for out in res:
        assert [e for e, _, _, _ in out] == [0, 0, 0, 1, 1, 1, 2, 2]
        assert [r for _, r, _, _ in out] == [0, 0, 0, 1, 1, 1, 2, 2]
        assert [i for _, _, i, _ in out] == [{0}, {1}, {2}, {0}, {1}, {2}, {0}, {1}]
        keys = [set().union(*(k for e, _, _, k in out if e == epoch)) for epoch in range(3)]
        assert all(keys) and not (keys[0] & keys[1] or keys[1] & keys[2] or keys[0] & keys[2])


@pytest.mark.parametrize("n", [16, 2])
@pytest.mark.parametrize("p, alg", [(2, "recursive_doubling"), (4, "recursive_doubling"), (3, "ring")])
def test_a_plan_changes_keys_with_the_epoch(p, alg, n):
    """A repeated call (one plan: its run, its prepared steps, the swap's keys and slots kept)
    with the limit at one op's bound: every op after the first starts a new epoch, and each op's
    frames are sealed under that epoch's keys only (none of another op's), with the op index
    restarting at 0; every result exact.  (2 elements: a count equal to an epoch number.)"""
    chunk_bytes = 64
    bound = COLLECTIVES["allreduce"].frame_bound(p, math.ceil(4 * n / chunk_bytes) + 1)

    def body(sc):
        log, out = [], []
        record_seals(sc, log)
        x = data("float32", n, sc.rank)
        y = np.empty_like(x)
        for _ in range(4):
            start = len(log)
            y.fill(-1)
            sc.allreduce(x, y)
            out.append((y.copy(), sc.epoch, op_indices(log[start:]), {key for key, _ in log[start:]}))
        return out, len(sc.plans)

    res = ok(world_run(p, body, algorithm=alg, chunk_bytes=chunk_bytes, rotate_after_frames=bound))
    for out, plans in res:
        assert plans == 1
        assert [e for _, e, _, _ in out] == [0, 1, 2, 3]
        assert all(i == {0} for _, _, i, _ in out)
        keys = [k for _, _, _, k in out]
        assert all(keys) and all(not (a & b) for a in keys for b in keys if a is not b)
        for y, _, _, _ in out:
            assert np.array_equal(y, ref_allreduce("float32", n, p, "sum"))


@pytest.mark.parametrize("p, alg", [(2, "recursive_doubling"), (4, "recursive_doubling"), (3, "ring")])
def test_a_plan_stays_right_after_a_larger_op_grew_the_workspace(p, alg):
    """A repeated call's prepared steps hold views of the wire buffers they were prepared on;
    a larger op in between grows (replaces) those buffers: the next repeat still uses its plan
    (and the buffers it holds) and is exact, in place too."""
    n = 40

    def body(sc):
        x, xi = data("float32", n, sc.rank), data("float32", n, sc.rank)
        y = np.empty_like(x)
        out = []
        for k in range(3):
            if k == 1:
                big = data("float32", 64 * n, sc.rank)
                sc.allreduce(big, np.empty_like(big))
            y.fill(-1)
            sc.allreduce(x, y)
            xi[:] = x
            sc.allreduce(xi, xi)
            out.append((y.copy(), xi.copy()))
        return out, len(sc.plans)

    res = ok(world_run(p, body, algorithm=alg, chunk_bytes=64))
    for out, plans in res:
        assert plans == 3  # the small call, in place, and the larger one's
        for y, yi in out:
            assert np.array_equal(y, ref_allreduce("float32", n, p, "sum"))
            assert np.array_equal(yi, y)


@pytest.mark.parametrize("op", ["sum", "avg", "max"])
@pytest.mark.parametrize("p", [2, 3])
def test_repeated_reduce_scatter_and_ring_allreduce_run_from_their_plans(p, op):
    """The prepared steps of reduce-scatter and of the ring allreduce (avg's division included)
    are exact on every repeat, with new values written into the same arrays between calls."""
    n = 40

    def body(sc):
        me = sc.rank
        x = np.empty(n, np.float32)
        rs = np.empty(sc.block_counts(n)[me], np.float32)
        ar = np.empty_like(x)
        out = []
        for k in range(3):
            x[:] = data("float32", n, me, salt=k)
            sc.reduce_scatter(x, rs, op=op)
            sc.allreduce(x, ar, op=op)
            out.append((rs.copy(), ar.copy()))
        return out, len(sc.plans)

    res = ok(world_run(p, body, algorithm="ring", chunk_bytes=64))
    for me, (out, plans) in enumerate(res):
        assert plans == 2
        lo = sum(COLLECTIVES["reduce_scatter"].counts(n, p, r).recv for r in range(me))
        for k, (rs, ar) in enumerate(out):
            xs = [data("float32", n, r, salt=k).astype(np.float64) for r in range(p)]
            ref = np.maximum.reduce(xs) if op == "max" else np.add.reduce(xs)
            if op == "avg":
                ref = np.divide(ref.astype(np.float32), np.float32(p))
            assert np.array_equal(ar, ref), (me, k)
            assert np.array_equal(rs, ref[lo : lo + rs.size]), (me, k)


def test_an_epoch_holds_at_most_max_ops_per_epoch_ops():
    """framing.MAX_OPS_PER_EPOCH ops (op indices 0 .. 2**32 - 2) per epoch key, then the next
    epoch (as if 2**32 - 2 ops had run: the counter is set directly)."""
    from seccomm.framing import MAX_OPS_PER_EPOCH

    def body(sc):
        log, out = [], []
        record_seals(sc, log)
        sc.sequence.epoch_ops = MAX_OPS_PER_EPOCH - 1
        for k in range(2):
            start = len(log)
            run_op(sc, "allreduce", k)
            out.append((sc.epoch, op_indices(log[start:])))
        return out

    for out in ok(world_run(2, body)):
        assert out == [(0, {MAX_OPS_PER_EPOCH - 1}), (1, {0})]


class Closing(TransportWrapper):
    """Records quiesce timeouts and close calls."""

    def __init__(self, inner):
        super().__init__(inner)
        self.quiesced, self.closed = [], 0

    def quiesce(self, timeout):
        self.quiesced.append(timeout)
        return self.inner.quiesce(timeout)

    def close(self):
        self.closed += 1
        return self.inner.close()


@pytest.mark.parametrize("timeout, wait", [(2, 2.0), (30, 10.0)])
def test_close_waits_for_peers_and_crypto_then_drops_keys(timeout, wait):
    """close(): lets the crypto jobs still running finish and ends the pool's threads, waits for
    the peers at most min(timeout, 10) s, closes the transport once however often it is called,
    keeps no key schedule, and every later call raises CommClosedError saying so."""
    from seccomm import CommClosedError

    def body(sc):
        pool, done = sc.context.pool, []
        pool.submit(lambda: (time.sleep(0.2), done.append(1)))
        keys = weakref.ref(sc.session.keys)
        sc.close()
        sc.close()
        gc.collect()
        with pytest.raises(CommClosedError, match=r"^SecureComm is unusable: closed; create a new one$"):
            run_op(sc, "allreduce", 0)
        return sc.transport, done, [t.is_alive() for t in pool._threads], keys()

    res = ok(world_run(2, body, wrap=lambda r, t: Closing(t), timeout=timeout, crypto_threads=3))
    for tr, done, alive, keys in res:
        assert tr.quiesced == [wait] and tr.closed == 1
        assert done == [1] and alive and not any(alive) and keys is None


def test_an_op_that_failed_leaves_the_comm_unusable_saying_why():
    """After an op failed on a rank (a frame refused, a peer that stopped, an error of its
    own), every later call raises CommClosedError naming the op and the error."""

    def body(sc):
        for k in range(2):
            try:
                run_op(sc, "allreduce", k)
            except SecCommError:
                pass
        try:
            run_op(sc, "allreduce", 2)
        except SecCommError as e:
            return str(e)

    wrap = lambda r, t: Swap(t, flip(5, 16)) if r == 0 else t  # noqa: E731 - op 2, ring step 0
    msgs = world_run(2, body, wrap=wrap, algorithm="ring", chunk_bytes=64)
    assert msgs == [
        "SecureComm is unusable: allreduce #2 failed (PeerAbortError); create a new one",
        "SecureComm is unusable: allreduce #2 failed (AuthenticationError); create a new one",
    ]

    class Boom(TransportWrapper):
        def isend(self, buf, peer):
            raise RuntimeError("a wrapper's own error")

    def body2(sc):
        try:
            run_op(sc, "allreduce", 0)
        except RuntimeError:
            pass
        with pytest.raises(
            SecCommError, match=r"^SecureComm is unusable: allreduce #1 failed \(RuntimeError\)"
        ):
            run_op(sc, "allreduce", 1)

    ok(world_run(2, body2, wrap=lambda r, t: Boom(t)))


def _disagreeing(what):
    def body(sc):
        r = sc.rank
        x = np.ones(
            64 + (16 if what == "count" and r else 0), np.int32 if what == "dtype" and r else np.float32
        )
        y = np.empty_like(x)
        try:
            sc.allreduce(x, y, op="max" if what == "op" and r else "sum")
        except SecCommError as e:
            return e
        return y

    return body


@pytest.mark.parametrize("paired", [False, True])
def test_a_clear_frame_of_another_collective_is_a_disagreement(paired):
    """``none`` (nothing authenticates a frame): rank 0 calls a ring allreduce, rank 1 an
    alltoall whose frame to rank 0 has the very size of the reduce-scatter's: both raise
    ArgumentMismatchError.  Paired, rank 0 reads rank 1's record (alone, just before the frame)
    before it looks at the frame, so its output holds nothing of it.  (Over more ranks, or a
    transport that is not paired, the records are checked once all are in, which may be after
    a clear frame was reduced: the op fails all the same.)"""

    def body(sc):
        x, y = np.full(2048, sc.rank + 1.0, np.float32), np.full(2048, np.nan, np.float32)
        try:
            sc.allreduce(x, y) if sc.rank == 0 else sc.alltoall(x, y)
        except SecCommError as e:
            return e, bool(np.isnan(y).all())
        return None, False

    res = world_run(2, body, suite="none", algorithm="ring", chunk_bytes=4096, paired=paired)
    for e, untouched in res:
        assert isinstance(e, ArgumentMismatchError) and "collective" in e.arguments, res
    assert res[0][1] or not paired, "rank 0's output was written"


@pytest.mark.parametrize(
    "what, shown",
    [
        ("op", "op: rank 0 passed sum, rank 1 passed max"),
        ("dtype", "dtype: rank 0 passed float32, rank 1 passed int32"),
        ("count", "count: rank 0 passed 64, rank 1 passed 80"),
    ],
)
@pytest.mark.parametrize("paired", [False, True])
def test_ranks_that_disagree_on_the_call_raise_a_mismatch_on_every_rank(what, shown, paired):
    """Before any frame, every rank raises ``ArgumentMismatchError`` with the same message, naming
    the argument and which rank passed what; none returns a result.  Paired (the record in the
    first frame): also the rank that got a larger message than it expected, which reads the other's
    record on the fallback box."""
    for alg in ("ring", "recursive_doubling"):
        res = world_run(2, _disagreeing(what), algorithm=alg, chunk_bytes=64, paired=paired)
        assert all(isinstance(e, ArgumentMismatchError) for e in res), (what, alg, res)
        assert str(res[0]) == str(res[1]) and list(res[0].arguments) == [what], res
        assert str(res[0]).startswith(f"allreduce #1: the ranks disagree on {what} ({shown}); "), res[0]


@pytest.mark.parametrize("paired", [False, True])
def test_a_repeated_call_from_its_plan_is_checked_against_the_others_too(paired):
    """Rank 1 repeats its call (a plan hit: no argument checks of its own) while rank 0 passes
    another count: both raise the mismatch, in that op."""

    def body(sc):
        x, y = np.ones(16, np.float32), np.zeros(16, np.float32)
        sc.allreduce(x, y)
        try:
            if sc.rank == 0:
                sc.allreduce(np.ones(8, np.float32), np.zeros(8, np.float32))
            else:
                sc.allreduce(x, y)
        except ArgumentMismatchError as e:
            return e, len(sc.plans)

    res = world_run(2, body, paired=paired)
    assert all(isinstance(e, ArgumentMismatchError) for e, _ in res), res
    assert res[0][0].arguments == {"count": {0: 8, 1: 16}} and res[1][1] == 1, res


def test_a_refusal_stops_the_others_in_that_op():
    """The refusing rank's refusal record takes its argument record's place."""

    def body(sc):
        x = np.ones(16, np.float32)
        try:
            sc.bcast(np.frombuffer(x.tobytes(), np.float32) if sc.rank == 1 else x, root=0)
        except Exception as e:  # noqa: BLE001
            return e

    res = world_run(3, body)
    assert isinstance(res[1], ValueError) and "read-only" in str(res[1]), res
    for e in (res[0], res[2]):
        assert isinstance(e, PeerAbortError) and e.peer == 1, res
        assert "rank 1 refused its arguments to bcast #1: ValueError" in str(e)

    def typed(sc):
        try:
            sc.bcast([1.0] * 4 if sc.rank == 0 else np.ones(4, np.float32), root=0)
        except Exception as e:  # noqa: BLE001
            return e

    for paired in (False, True):
        res = world_run(2, typed, paired=paired)
        assert isinstance(res[0], TypeError) and isinstance(res[1], PeerAbortError), res
        assert "rank 0 refused its arguments to bcast #1: TypeError" in str(res[1])


@pytest.mark.parametrize("paired", [False, True])
def test_ranks_that_each_wait_on_the_other_stop_at_the_disagreement_not_the_deadline(paired):
    """Each rank names the other as the bcast root, so each waits for a frame never sent: the
    records, in while they wait, end the wait (timeout 2 s) with the disagreement.  Paired:
    each root sends a frame and its record where the other expects the record alone (too large
    to read), and finds the other's record on the fallback box."""

    def body(sc):
        t0 = time.monotonic()
        try:
            sc.bcast(np.zeros(64, np.float32), root=1 - sc.rank)
        except SecCommError as e:
            return e, time.monotonic() - t0

    res = world_run(2, body, paired=paired)
    for e, secs in res:
        assert isinstance(e, ArgumentMismatchError) and e.arguments == {"root": {0: 1, 1: 0}}, res
        assert secs < 1.5, res
    assert str(res[0][0]) == str(res[1][0])


@pytest.mark.parametrize("paired", [False, True])
def test_a_disagreement_found_by_a_failed_frame_is_raised_as_the_disagreement(paired):
    """The count differs, so a frame fails (tag or length) before the op's end: every rank
    raises the disagreement, not an authentication error, and blames no rank."""
    aborted = []

    class Watch(TransportWrapper):
        def abort(self, blame):
            aborted.append(blame)
            return self.inner.abort(blame)

    res = world_run(
        2, _disagreeing("count"), wrap=lambda r, t: Watch(t), algorithm="recursive_doubling", paired=paired
    )
    assert all(isinstance(e, ArgumentMismatchError) and e.__cause__ is None for e in res), res
    assert not aborted
    for e in res:
        assert e.__context__ is None or isinstance(e.__context__, SecCommError)


@pytest.mark.parametrize("what", ["op", "dtype", "count"])
def test_the_frames_bind_op_dtype_and_count_too(monkeypatch, what):
    """Defence in depth: with the argument check skipped, the op, dtype and count bound into
    every frame (AAD) still make ranks that disagree fail on every rank."""
    monkeypatch.setattr(Agreement, "check", lambda self, op_label: None)
    for alg in ("ring", "recursive_doubling"):
        res = world_run(2, _disagreeing(what), algorithm=alg, chunk_bytes=64)
        assert all(isinstance(e, SecCommError) for e in res), (what, alg, res)
        assert any(isinstance(e, WIRE_ERRORS) for e in res), (what, alg, res)


@pytest.mark.parametrize(
    "small_bytes, n, alg",
    [(64, 16, "recursive_doubling"), (64, 17, "ring"), (0, 2, "recursive_doubling"), (0, 3, "ring")],
)
def test_auto_picks_recursive_doubling_for_small_or_short_calls(small_bytes, n, alg):
    """algorithm="auto": recursive doubling at or below small_bytes bytes or for fewer elements
    than ranks, else ring (float32 on 3 ranks).  Seen on the wire: rank 2 sends to rank 0 in
    the ring, to rank 1 in recursive doubling (its partner after the fold of rank 0 into 1)."""

    def body(sc):
        x = data("float32", n, sc.rank)
        y = np.empty_like(x)
        sc.allreduce(x, y)
        return y, {peer for kind, peer, _ in sc.transport.frames if kind == "frame"}

    res = ok(world_run(3, body, small_bytes=small_bytes, wrap=lambda r, t: RecordingTransport(t)))
    for y, _ in res:
        assert np.array_equal(y, ref_allreduce("float32", n, 3, "sum"))
    assert res[2][1] == ({0} if alg == "ring" else {1}), res[2][1]


@pytest.mark.parametrize("n, frames", [(64, 1), (65, 2)])
def test_auto_on_two_ranks_swaps_one_frame_up_to_the_chunk(n, frames):
    """Two ranks, algorithm="auto", small_bytes 0, chunk_bytes 256: a call of at most one chunk
    (64 float32) is recursive doubling, one frame each way; one element more is the ring, two
    frames each way (reduce-scatter, allgather).  Results exact either way."""

    def body(sc):
        x = data("float32", n, sc.rank)
        y = np.empty_like(x)
        sc.allreduce(x, y)
        return y, sum(kind == "frame" for kind, _, _ in sc.transport.frames)

    res = ok(world_run(2, body, small_bytes=0, chunk_bytes=256, wrap=lambda r, t: RecordingTransport(t)))
    for y, sent in res:
        assert np.array_equal(y, ref_allreduce("float32", n, 2, "sum"))
        assert sent == frames


def test_inf_and_nan_arithmetic_raises_nothing_as_in_mpi():
    """Sums that overflow to inf or meet inf - inf give inf and NaN, with no FloatingPointError
    even where the caller made numpy raise on them."""

    def body(sc):
        x = np.array([60000, np.inf if sc.rank == 0 else -np.inf, 1], np.float16)
        y = np.empty_like(x)
        with np.errstate(all="raise"):
            sc.allreduce(x, y)
        return y

    for y in ok(world_run(2, body)):
        assert np.isinf(y[0]) and np.isnan(y[1]) and y[2] == 2


class DevArray:
    """An array of a device engine's array module, as the engine sees one (CuPy's are not
    numpy.ndarray and have no writeable flag), here over a numpy array ``a``."""

    def __init__(self, a):
        self.a = a

    dtype = property(lambda s: s.a.dtype)
    size = property(lambda s: s.a.size)
    shape = property(lambda s: s.a.shape)
    itemsize = property(lambda s: s.a.itemsize)
    flags = property(lambda s: type("Flags", (), {"c_contiguous": s.a.flags.c_contiguous})())
    __array_interface__ = property(lambda s: s.a.__array_interface__)

    def reshape(self, *shape):
        return self.a.reshape(*shape)


class CudaArray(DevArray):
    """A device buffer as seccomm.gpu.staging.is_device recognises one."""

    __cuda_array_interface__ = property(lambda s: s.a.__array_interface__)


class Counted:
    """A device-engine backend that counts the batches it seals or opens."""

    def __init__(self, inner):
        self.inner, self.batches = inner, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def aead(self, suite):
        self.batches += 1
        return self.inner.aead(suite)


def _mixed_engine_comm(tr, **kw) -> SecureComm:
    """A rank of the device/CPU engine tests: AES-GCM, small chunks (several per hop), one
    crypto thread, a short deadline; ``kw``: the rank's own settings."""
    return SecureComm(tr, "aes-256-gcm", psk=PSK, timeout=2, crypto_threads=1, chunk_bytes=256, **kw)


def test_device_engine_ranks_and_cpu_engine_ranks_interoperate(host_backend):
    """device_backend given: every call of that rank runs on the device engine with that
    backend's arrays; its frames open on CPU-engine ranks and the other way round."""
    world = World(3)
    trs = world.transports(timeout=3)

    backends = [Counted(host_backend) for _ in range(3)]

    def body(r):
        dev = r % 2 == 0
        sc = _mixed_engine_comm(trs[r], device_backend=backends[r] if dev else None)
        wrap = DevArray if dev else (lambda a: a)
        out, used = {}, []
        for alg in ("ring", "recursive_doubling"):
            sc.algorithm = alg
            x, y = data("float32", 301, r), np.zeros(301, np.float32)
            before = backends[r].batches
            sc.allreduce(wrap(x), wrap(y), op="max")
            out[alg] = y
            used.append(backends[r].batches > before)
        b = data("int32", 100, r, 3)
        sc.bcast(wrap(b), root=1)
        return out, b, used

    res = ok(world.run(body))
    assert [used for _, _, used in res] == [[True, True], [False, False], [True, True]]
    res = [(out, b) for out, b, _ in res]
    full = np.max([data("float32", 301, q) for q in range(3)], axis=0)
    for out, b in res:
        assert all(np.array_equal(y, full) for y in out.values())
        assert np.array_equal(b, data("int32", 100, 1, 3))


def test_device_buffers_without_the_device_engine_are_staged(monkeypatch):
    """A device buffer beside a host buffer, or device buffers the device engine cannot take
    (here: no CuPy), run the same collective on host copies (seccomm.gpu.staging.staged_call,
    replaced here by a copy-free stand-in) with the same keyword arguments."""
    from seccomm.gpu import staging

    calls = []

    def staged_call(fn, sendbuf, recvbuf, **kw):
        calls.append(kw)
        fn(getattr(sendbuf, "a", sendbuf), getattr(recvbuf, "a", recvbuf), **kw)

    monkeypatch.setattr(staging, "staged_call", staged_call)

    def body(sc):
        r = sc.rank
        y = np.zeros(50, np.float32)
        sc.allreduce(CudaArray(data("float32", 50, r)), y, op="min")
        b = CudaArray(data("int64", 30, r))
        sc.bcast(b, root=1)
        g = CudaArray(np.zeros(60, np.float16))
        sc.allgather(data("float16", 30, r), g)
        return y, b.a, g.a

    res = ok(world_run(2, body))
    assert sorted(map(repr, calls)) == sorted(map(repr, [{"op": "min"}, {"root": 1}, {}] * 2))
    for y, b, g in res:
        assert np.array_equal(y, np.min([data("float32", 50, q) for q in range(2)], axis=0))
        assert np.array_equal(b, data("int64", 30, 1))
        assert np.array_equal(g, np.concatenate([data("float16", 30, q) for q in range(2)]))


class NoKernel(CudaArray):
    """A device buffer the device engine cannot take (as CuPy has no bfloat16)."""


def test_device_buffers_go_to_the_device_engine_when_it_takes_them(monkeypatch, host_backend):
    """No device_backend given: a call whose buffers are both on the device runs on the device
    engine when it can take them, probed once per comm until a probe succeeds (later calls
    check the buffers without probing), else staged; a device buffer beside a host one is
    staged (the device engine would write a copy of the host buffer).  Stand-ins here for CuPy:
    ``device_ready`` answers with the host backend (None for what CuPy cannot view: NoKernel
    buffers, None), ``as_cupy`` views a device buffer and copies
    a host one (as cupy.asarray does), ``staged_call`` runs on the host arrays."""
    from seccomm.gpu import engine, staging

    probes, staged, backends = [], [], [Counted(host_backend) for _ in range(2)]

    def device_ready(sc, *bufs, probe=True):
        assert isinstance(sc, SecureComm) and len(bufs) == 2, (sc, bufs)
        probes.append((sc.rank, probe, all(b is bufs[0] for b in bufs)))
        if any(b is None or isinstance(b, NoKernel) for b in bufs):  # CuPy cannot take them
            return None
        return backends[sc.rank] if probe else True

    def as_cupy(buf):
        return DevArray(buf.a) if isinstance(buf, DevArray) else DevArray(np.array(buf))

    def staged_call(fn, sendbuf, recvbuf, **kw):
        staged.append(kw)
        fn(getattr(sendbuf, "a", sendbuf), getattr(recvbuf, "a", recvbuf), **kw)

    monkeypatch.setattr(engine, "device_ready", device_ready)
    monkeypatch.setattr(staging, "as_cupy", as_cupy)
    monkeypatch.setattr(staging, "staged_call", staged_call)
    full = np.sum([data("float32", 40, q) for q in range(2)], axis=0)

    def body(sc):
        r, out, engine_used = sc.rank, [], []
        for send, recv in (
            (CudaArray(data("float32", 40, r)), CudaArray(np.zeros(40, np.float32))),  # probe: device
            (CudaArray(data("float32", 40, r)), CudaArray(np.zeros(40, np.float32))),  # no probe
            (CudaArray(data("float32", 40, r)), np.zeros(40, np.float32)),  # mixed: staged
            (NoKernel(data("float32", 40, r)), NoKernel(np.zeros(40, np.float32))),  # staged
        ):
            before = backends[r].batches
            sc.allreduce(send, recv)
            out.append(getattr(recv, "a", recv))
            engine_used.append(backends[r].batches > before)
        z = CudaArray(data("float32", 40, r))
        sc.allreduce(z, z)  # in place, on the device engine
        return out + [z.a], engine_used

    res = ok(world_run(2, body))
    for outs, used in res:
        assert all(np.array_equal(y, full) for y in outs)
        assert used == [True, True, False, False], used
    assert sorted(map(repr, staged)) == ["{'op': 'sum'}"] * 4  # the mixed and NoKernel calls, 2 ranks
    for r in range(2):
        mine = [(p, same) for rank, p, same in probes if rank == r]
        assert mine == [(True, False), (False, False), (False, False), (False, True)], mine
    probes.clear()

    def fresh(sc):  # the first device call cannot run there: the next call probes again
        r = sc.rank
        sc.allreduce(NoKernel(data("float32", 40, r)), NoKernel(np.zeros(40, np.float32)))
        y = CudaArray(np.zeros(40, np.float32))
        sc.allreduce(CudaArray(data("float32", 40, r)), y)
        return y.a

    assert all(np.array_equal(y, full) for y in ok(world_run(2, fresh)))
    assert sorted(p for _, p, _ in probes) == [True] * 4


def test_a_tampered_frame_is_refused_on_a_device_engine_rank(host_backend):
    """Rank 1 (CPU engine) alters its frames to rank 0 (device engine): rank 0 raises
    AuthenticationError naming rank 1 and the op, the others stop naming rank 0."""
    world = World(2)
    trs = world.transports(timeout=3)

    def body(r):
        wrap = (lambda t: Swap(t, flip(5, 0))) if r == 1 else None
        sc = _mixed_engine_comm(
            trs[r], algorithm="ring", wrap_transport=wrap, device_backend=host_backend if r == 0 else None
        )
        x = data("float32", 301, r)
        try:
            sc.allreduce(DevArray(x) if r == 0 else x, DevArray(x.copy()) if r == 0 else x.copy())
        except SecCommError as e:
            return e

    res = world.run(body)
    assert isinstance(res[0], AuthenticationError) and res[0].peer == 1, res
    assert res[0].op == "allreduce" and "allreduce #1" in str(res[0]), res
    assert isinstance(res[1], SecCommError), res


# -- the plan of a repeated call ------------------------------------------------------------------
def test_a_repeated_call_runs_its_plan_and_rechecks_what_can_change():
    """The same arrays and arguments again: the plan runs (no argument checks, same results as a
    checked call, every algorithm); other arguments, another plan; an array changed in place
    (read-only now, another shape, another dtype) is checked again; a plan keeps its arrays; more
    than PLAN_SLOTS plans empty the table; buffers above PLAN_MAX_BYTES get none; close() drops
    all."""
    from seccomm import plans as plans_mod

    checked = []
    real = {name: c.args for name, c in COLLECTIVES.items()}

    def body(sc):
        p, r = sc.size, sc.rank
        x = np.arange(1000, dtype=np.float32) + r
        y = np.zeros_like(x)
        got = []
        for alg in ("recursive_doubling", "ring", "auto"):
            sc.algorithm = alg  # read on every call: a plan per algorithm
            for _ in range(3):
                x += 1
                sc.allreduce(x, y)
                want = sum(np.arange(1000, dtype=np.float32) + q for q in range(p)) + p * (len(got) + 1)
                got.append(bool(np.array_equal(y, want)))
        sc.algorithm = "auto"
        plans = len(sc.plans)
        sc.allreduce(x, y, op="max")  # other arguments: another plan
        got.append(bool(np.array_equal(y, x - r + p - 1)) and len(sc.plans) == plans + 1)
        sc.allreduce(x, y, op="max")
        got.append(len(sc.plans) == plans + 1)
        sc.bcast(y, root=1)  # root: another plan; a bool root is refused even after root=1
        sc.bcast(y, root=1)
        got.append(len(sc.plans) == plans + 2)
        big = np.zeros((plans_mod.PLAN_MAX_BYTES + 4) // 4, np.float32)
        sc.allreduce(big, big)  # above the limit: no plan
        got.append(len(sc.plans) == plans + 2)
        small = np.zeros(plans_mod.PLAN_MAX_BYTES // 4, np.float32)
        sc.allreduce(small, small)  # at the limit: a plan
        got.append(len(sc.plans) == plans + 3)
        mid = np.ones(32 << 10, np.float32)  # 128 KiB: the ring, chosen from its count on a plan too
        sc.allreduce(mid, mid)
        sc.allreduce(mid, mid)
        got.append(bool(np.all(mid == p * p)))
        keep = [np.zeros(8, np.float32) for _ in range(plans_mod.PLAN_SLOTS)]
        for a in keep:
            sc.allreduce(a, a)
            got.append(0 < len(sc.plans) <= plans_mod.PLAN_SLOTS)  # a full table is emptied
        plan = next(iter(sc.plans.values()))
        got.append(any(plan.send is a for a in keep) and plan.recv is plan.send)
        x.shape = (10, 100)  # another shape, in place: checked again (and fine)
        y.shape = (100, 10)
        sc.allreduce(x, y)
        got.append(bool(np.array_equal(y.reshape(-1), x.reshape(-1) * p - r * p + p * (p - 1) / 2)))
        y.flags.writeable = False  # read-only now: refused, not run from the plan
        try:
            sc.allreduce(x, y)
            got.append(False)
        except ValueError as e:
            got.append("recvbuf is read-only" in str(e))
        sc.close()
        got.append(len(sc.plans) == 0)
        return got, checked.count(r)

    def counting(name):
        def args(sendbuf, recvbuf, rank, size, device, **kw):
            checked.append(rank)
            return real[name](sendbuf, recvbuf, rank, size, device, **kw)

        return args

    try:
        for name in real:
            object.__setattr__(COLLECTIVES[name], "args", counting(name))
        res = ok(world_run(2, body))
    finally:
        for name, fn in real.items():
            object.__setattr__(COLLECTIVES[name], "args", fn)
    for got, n_checked in res:
        assert all(got), got
        # 9 allreduces: the first of each algorithm checked, the others run from its plan; max:
        # once; bcast: once; big: once; small: once; mid: once; 16 fresh arrays; the reshaped
        # call; the read-only call
        assert n_checked == 3 + 1 + 1 + 1 + 1 + 1 + plans_mod.PLAN_SLOTS + 1 + 1, n_checked


def test_a_plan_never_takes_an_argument_of_another_type():
    """root=True equals root=1 as a dict key, but a bool root is refused: the plan's key holds
    the types of the arguments too, and an unhashable argument is checked as usual."""

    def body(sc):
        y = np.zeros(8, np.float32)
        sc.bcast(y, root=1)
        for bad in (True, 1.0):
            try:
                sc.bcast(y, root=bad)
                return "no error"
            except ValueError as e:
                return str(e)

    for msg in ok(world_run(2, body)):
        assert "root" in msg, msg

    def unhashable(sc):
        y = np.zeros(8, np.float32)
        try:
            sc.allreduce(y, y, op=["sum"])
            return "no error"
        except (TypeError, ValueError) as e:
            return str(e)

    for msg in ok(world_run(2, unhashable)):
        assert "op" in msg, msg


# -- buffer layouts and refusals, in process (real ranks: tests/argument_cases.py) ----------------
def test_fortran_order_moves_memory_order_and_two_orders_of_one_shape_are_refused():
    def body(sc):
        p, r = sc.size, sc.rank
        xf = np.asfortranarray((np.arange(60, dtype=np.float32) + r).reshape(6, 10))
        yf = np.asfortranarray(np.zeros((6, 10), np.float32))
        sc.allreduce(xf, yf)  # both Fortran: element for element
        ok_f = bool(np.array_equal(yf, xf * p - r * p + p * (p - 1) / 2))
        flat = np.zeros(60, np.float32)
        sc.allreduce(xf, flat)  # one shape only: memory order, as MPI
        ok_flat = bool(np.array_equal(flat, (xf * p - r * p + p * (p - 1) / 2).ravel(order="F")))
        yc = np.zeros((6, 10), np.float32)
        try:
            sc.allreduce(xf, yc)
            return ok_f, ok_flat, "no error"
        except ValueError as e:
            return ok_f, ok_flat, str(e)

    for ok_f, ok_flat, msg in ok(world_run(2, body)):
        assert ok_f and ok_flat
        assert msg.startswith(
            "sendbuf is in Fortran order and recvbuf in C order (shape (6, 10)): seccomm, like MPI, "
            "moves each buffer in its memory order"
        ), msg


def test_a_refusal_names_the_exception_to_the_transport_and_in_the_broken_state():
    from seccomm.transports import TransportWrapper

    class Told(TransportWrapper):
        told: list = []

        def refuse(self, seq, error):
            self.told.append((self.rank, seq, error))
            return self.inner.refuse(seq, error)

    def body(sc):
        y = np.zeros(8, np.float32)
        sc.allreduce(y, y)
        try:
            sc.allreduce(y, np.zeros(9, np.float32))  # every rank refuses: sizes differ
        except ValueError:
            pass
        return sc.sequence.broken

    res = ok(world_run(2, body, wrap=lambda r, t: Told(t)))
    assert sorted(Told.told) == [(0, 2, "ValueError"), (1, 2, "ValueError")], Told.told
    assert all(b == "allreduce #2 refused its arguments on this rank (ValueError)" for b in res), res


def test_recursive_doubling_of_nothing_and_of_one_rank():
    """Zero elements on 2 ranks (avg included) and any count on 1 rank: recvbuf = sendbuf, no
    frame sent."""

    def body(sc):
        e = np.zeros(0, np.float32)
        sc.allreduce(e, np.zeros(0, np.float32), op="avg")
        return True

    assert ok(world_run(2, body, algorithm="recursive_doubling"))

    def one(sc):
        x = np.arange(5, dtype=np.float32)
        y = np.zeros_like(x)
        sc.allreduce(x, y, op="avg")
        sc.allreduce(x, x, op="avg")  # in place
        return bool(np.array_equal(y, np.arange(5, dtype=np.float32))), bool(np.array_equal(x, y))

    assert ok(world_run(1, one, algorithm="recursive_doubling")) == [(True, True)]


def test_a_second_thread_is_refused_at_once_while_a_call_runs():
    """In process, as tests/argument_cases.py threads on real ranks: rank 0's second thread calls
    while its first waits inside an allreduce (rank 1 joins later): ConcurrentUseError at once,
    naming the call, the rank and what to do; the first call completes."""
    import threading

    from seccomm import ConcurrentUseError

    def body(sc):
        x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
        if sc.rank == 1:
            time.sleep(0.3)
            sc.allreduce(x, y)
            return None
        seq = sc.sequence.seq
        t = threading.Thread(target=sc.allreduce, args=(x, y))
        t.start()
        while sc.sequence.seq == seq:
            time.sleep(0.001)
        t0 = time.monotonic()
        try:
            sc.bcast(np.zeros(4, np.float32), root=0)
            err = None
        except ConcurrentUseError as e:
            err = str(e)
        secs = time.monotonic() - t0
        t.join()
        return err, secs, bool(np.all(y == 2))

    err, secs, done = ok(world_run(2, body))[0]
    assert err is not None and secs < 0.25 and done, (err, secs, done)
    busy = "bcast: another thread is inside a collective call on this SecureComm (rank 0)"
    assert err.startswith(busy), err
    assert "Use one SecureComm per thread" in err, err


def test_the_last_sends_of_an_op_that_never_complete_break_the_next_op():
    """An op's last sends are waited for at the next op's start: when that wait fails, the next
    op raises it, the SecureComm is unusable (naming the op whose sends failed), and the requests
    are handed to the transport's cancel and kept referenced."""
    from seccomm import TransportTimeout
    from seccomm.transports import TransportWrapper

    class LastSendsFail(TransportWrapper):
        cancelled: list = []

        def wait_sends(self, reqs, peers):
            timeout, op_label = self.op_timeout, self.op_label
            if op_label.endswith("(its last sends)"):
                raise TransportTimeout(f"{op_label}: planted", peer=peers[0], op=op_label, timeout_s=timeout)
            return self.inner.wait_sends(reqs, peers)

        def cancel(self, reqs):
            self.cancelled.append((self.rank, list(reqs)))
            return self.inner.cancel(reqs)

    def body(sc):
        x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
        sc.allreduce(x, y)
        unsent = list(sc.sequence.unsent[0])
        try:
            sc.allreduce(x, y)
            return "no error"
        except TransportTimeout as e:
            return str(e), sc.sequence.broken, sc.sequence.stale == unsent, sc.sequence.unsent

    res = ok(world_run(2, body, wrap=lambda r, t: LastSendsFail(t)))
    for msg, broken, stale, unsent in res:
        assert msg == "allreduce #1 (its last sends): planted" and unsent is None, msg
        assert broken == "allreduce #1 failed (TransportTimeout)" and stale, broken
    assert sorted(r for r, reqs in LastSendsFail.cancelled if reqs) == [0, 1], LastSendsFail.cancelled


def test_a_device_engine_comm_runs_every_repeated_call_on_the_device_engine(host_backend):
    """Plans are for the host engine only: with a device_backend, a repeated call of numpy
    buffers still runs on the device engine (its backend seals and opens every time)."""
    world = World(2)
    trs = world.transports(timeout=3)
    backends = [Counted(host_backend) for _ in range(2)]

    def body(r):
        sc = _mixed_engine_comm(trs[r], device_backend=backends[r])
        x, y = np.ones(64, np.float32), np.zeros(64, np.float32)
        seen = []
        for _ in range(3):
            before = backends[r].batches
            sc.allreduce(x, y)
            seen.append(backends[r].batches > before and bool(np.all(y == 2)))
        sc.close()
        return seen, len(sc.plans)

    for seen, plans in ok(world.run(body)):
        assert seen == [True, True, True] and plans == 0, seen


@pytest.mark.parametrize("paired", [False, True])
def test_device_engine_ranks_neither_lend_nor_receive_in_place(host_backend, paired):
    """``none`` frames (the payload alone) in blocks of two chunks: a device-engine rank sends
    every frame from its device slots and receives every frame into them, the CPU-engine rank
    beside it sends its reduce-scatter's two frames from its arrays (its allgather's are the
    op's last sends: copied) and receives its allgather's two in place; both get the sum, paired
    too (the op's record alone before its first frame)."""
    world = World(2, paired=paired)
    trs = world.transports(timeout=3)
    n = 1024 * 4  # blocks of two 4 KiB chunks

    def body(r):
        kw = {"device_backend": host_backend} if r == 0 else {}
        sc = SecureComm(
            trs[r], "none", psk=PSK, timeout=5, crypto_threads=1, chunk_bytes=4096, algorithm="ring", **kw
        )
        x, y = np.arange(n, dtype=np.float32) + r, np.zeros(n, np.float32)
        sc.allreduce(x, y)
        sc.close()
        spans = [(a.ctypes.data, a.ctypes.data + a.nbytes) for a in (x, y)]
        inside = [k for k, at, nb in trs[r].io if any(lo <= at and at + nb <= hi for lo, hi in spans)]
        good = bool(np.array_equal(y, 2 * np.arange(n, dtype=np.float32) + 1))
        return good, inside.count("send"), inside.count("recv")

    assert ok(world.run(body)) == [(True, 0, 0), (True, 2, 2)]


@pytest.mark.parametrize("sizes", [(1, 7, 4096), (1 << 18, (1 << 18) + 3)])
@pytest.mark.parametrize("paired", [False, True])
def test_a_device_engine_rank_and_a_cpu_rank_swap_clear_frames(host_backend, paired, sizes):
    """recursive doubling's one swap of ``none`` frames between a device-engine rank and a
    CPU-engine rank, three repeated calls (the plan's prepared swap) and sizes of 1 to 4096
    elements: both get the sum; paired, the op's record rides behind each rank's frame (the CPU
    rank's in its slot's room, the device rank's staged by the transport), never alone.  From
    1 MiB on the swap is acknowledged (the CPU rank lends its input): the record goes alone
    before the frame on both ranks, and each sends one receipt a call."""
    world = World(2, paired=paired)
    trs = world.transports(timeout=3)

    def body(r):
        kw = {"device_backend": host_backend} if r == 0 else {}
        sc = SecureComm(trs[r], "none", psk=PSK, timeout=5, algorithm="recursive_doubling", **kw)
        alone = []
        if paired:
            send_record = trs[r].send_record

            def watched():
                alone.append(trs[r]._pair_out)
                send_record()

            trs[r].send_record = watched
        good = []
        for n in sizes:
            x, y = np.arange(n, dtype=np.float32) + r, np.zeros(n, np.float32)
            for _ in range(3):
                y[:] = np.nan
                sc.allreduce(x, y)
                good.append(bool(np.array_equal(y, 2 * np.arange(n, dtype=np.float32) + 1)))
        sc.close()
        return all(good), any(alone), len(trs[r].receipts_sent)

    big = sizes[0] >= 1 << 18
    want = (True, paired and big, 3 * len(sizes) if big else 0)
    assert ok(world.run(body)) == [want, want]


def test_close_keeps_the_last_sends_referenced():
    """close() after an op: the op's last sends (never waited for in it) are handed over to the
    requests kept referenced while MPI may still read their frames."""

    def body(sc):
        sc.allreduce(np.ones(8, np.float32), np.zeros(8, np.float32))
        reqs = list(sc.sequence.unsent[0])
        sc.close()
        return bool(reqs) and sc.sequence.stale == reqs and sc.sequence.unsent is None

    assert ok(world_run(2, body)) == [True, True]


@pytest.mark.parametrize("suite", ["none", "aes-256-gcm"])
def test_repeated_calls_leave_their_last_sends_to_the_next_op(suite):
    """A repeated call (its plan's run restarted) defers its last sends as the first call does:
    each op ends with its last sends handed to the SecureComm (``_unsent``), never waited for in
    the op (MPICH may complete them only once the receiver calls MPI again)."""

    def body(sc):
        x, y = np.ones(64, np.float32), np.zeros(64, np.float32)
        left = []
        for _ in range(3):
            sc.allreduce(x, y)
            left.append(bool(sc.sequence.unsent and sc.sequence.unsent[0]))
        return left

    assert ok(world_run(2, body, suite=suite)) == [[True] * 3] * 2


def test_a_transport_that_does_not_defer_has_every_send_waited_for_in_the_op():
    """defer_last_sends False (torch.distributed, NCCL): the op waits for its last sends itself."""
    from seccomm.transports import TransportWrapper

    class NoDefer(TransportWrapper):
        defer_last_sends = False
        waited: list = []

        def wait_sends(self, reqs, peers):
            op_label = self.op_label
            self.waited.append((self.rank, op_label))
            return self.inner.wait_sends(reqs, peers)

    def body(sc):
        sc.allreduce(np.ones(8, np.float32), np.zeros(8, np.float32))
        return sc.sequence.unsent

    assert ok(world_run(2, body, wrap=lambda r, t: NoDefer(t))) == [None, None]
    assert sorted(NoDefer.waited) == [(0, "allreduce #1"), (1, "allreduce #1")], NoDefer.waited


@pytest.mark.parametrize("error", [RuntimeError, FrameError])
def test_an_error_of_its_own_keeps_the_ops_requests_referenced(error):
    """Any exception inside an op (here a wrapper's, at the first wait; one of seccomm's errors
    or another): the requests the op posted stay referenced by the SecureComm (MPI may still
    touch their buffers)."""

    class Boom(TransportWrapper):
        def wait_recv(self, req, peer):
            raise error("this rank fails here", peer=peer) if error is FrameError else error("here")

    def body(sc):
        try:
            run_op(sc, "allreduce", 0)
        except error:
            return list(sc.sequence.stale or [])

    res = world_run(2, body, wrap=lambda r, t: Boom(t), algorithm="ring")
    assert all(len(stale) >= 1 for stale in res), res


@pytest.mark.parametrize(
    "alg, paired", [("recursive_doubling", False), ("recursive_doubling", True), ("ring", True)]
)
def test_a_failed_clear_op_keeps_every_request_it_posted(alg, paired):
    """``none`` (clear frames: recursive doubling's swap; paired, the ring's record received
    alone before its first frame): a wait that fails leaves every request the op posted
    referenced by the SecureComm, none of them a placeholder."""

    class Boom(TransportWrapper):
        def wait_recv(self, req, peer):
            raise FrameError("this rank fails here", peer=peer)

    def body(sc):
        try:
            n = 4096 if alg == "ring" else 1024  # (recursive doubling: one frame each way, the swap)
            sc.allreduce(np.ones(n, np.float32), np.zeros(n, np.float32))
        except FrameError:
            return list(sc.sequence.stale or [])

    res = world_run(
        2, body, wrap=lambda r, t: Boom(t), algorithm=alg, suite="none", chunk_bytes=4096, paired=paired
    )
    want = 3 if alg == "ring" else 2  # (the record's receive, or none; a frame each way)
    assert all(len(stale) >= want and None not in stale for stale in res), res


def test_suite_none_sends_its_argument_records_untagged():
    """Nothing is authenticated under suite none: its records carry a zero tag; others a tag."""

    def body(sc):
        run_op(sc, "allreduce", 0)
        return bytes(sc.agreement.out[1 - sc.rank, 24:])

    assert world_run(2, body, suite="none") == [bytes(16)] * 2
    assert all(t != bytes(16) for t in world_run(2, body))


@pytest.mark.parametrize("p", [2, 3])
def test_a_repeated_call_runs_the_algorithm_set_now_not_the_plans(p):
    """sc.algorithm changed between two calls on the same arrays: the second call runs the
    algorithm now set (its own plan), not the plan the first call made; each op's argument
    record names the algorithm it ran, and the frames each rank sent differ (in number or
    size)."""

    def body(sc):
        x = np.arange(3000, dtype=np.float32) + sc.rank
        y = np.empty_like(x)
        sent = []
        for alg in ("recursive_doubling", "recursive_doubling", "ring", "ring", "recursive_doubling"):
            sc.algorithm = alg
            before = len(sc.transport.frames)
            sc.allreduce(x, y)
            sent.append(sorted(f.size for k, _, f in sc.transport.frames[before:] if k == "frame"))
            assert np.array_equal(y, sum(np.arange(3000, dtype=np.float32) + r for r in range(sc.size)))
        return sent

    for sent in world_run(p, body, wrap=lambda r, t: RecordingTransport(t), chunk_bytes=1024):
        assert sent[0] == sent[1] == sent[4] and sent[2] == sent[3] and sent[2] != sent[0], sent
