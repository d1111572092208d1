"""The hop engine (seccomm/engine.py) when a frame fails or a rank stops, and its crypto thread
pool, on the in-process world of threads (tests/threadworld.py, helpers of
tests/world/test_threadworld_ops.py): every error names the frame that failed, every request of a
failed op stays referenced, crypto runs on the pool exactly where it pays, and a failed chunk
waits for the jobs still running."""

from __future__ import annotations

import dataclasses
import gc
import re
import threading
import time
import weakref

import numpy as np
import pytest
from threadworld import World

from seccomm import AuthenticationError, SecCommError, SecureComm
from seccomm.engine import ACK_CLEAR_BYTES
from seccomm.transports import TransportWrapper
from test_threadworld_ops import (
    PSK,
    Swap,
    attacked,
    data,
    flip,
    ok,
    ref_allreduce,
    run_op,
    world_run,
)


# -- errors name the frame; what a failed op leaves behind ---------------------------------------
def cut(at):
    return lambda i, peer, f, fs: f[:-1] if i == at else f


#: (case, world size, attacker, collective, settings, edit, index of the attacker's frame (in op
#: 2: op 1 passes), victim, (step, chunk, chunks) the victim's error names).  n = 200 elements
#: of float32, 16 per chunk at chunk_bytes=64: a ring block of 100 is 7 chunks, alltoall's 50 are
#: 4, allgather's 67 (3 ranks) 5, bcast's 200 are 13; recursive doubling on 2 ranks is step 1.
FRAME_CASES = [
    (
        "swap tag",
        2,
        0,
        "allreduce",
        dict(algorithm="recursive_doubling", chunk_bytes=1024),
        flip(5, 1),
        1,
        (1, 0, 1),
    ),
    (
        "swap length",
        2,
        0,
        "allreduce",
        dict(algorithm="recursive_doubling", chunk_bytes=1024),
        cut(1),
        1,
        (1, 0, 1),
    ),
    ("ring reduce tag", 2, 0, "allreduce", dict(), flip(5, 16), 1, (0, 2, 7)),
    ("ring reduce length", 2, 0, "allreduce", dict(), cut(16), 1, (0, 2, 7)),
    ("ring reduce tag, pool", 2, 0, "allreduce", dict(crypto_threads=3), flip(5, 16), 1, (0, 2, 7)),
    ("ring reduce length, pool", 2, 0, "allreduce", dict(crypto_threads=3), cut(16), 1, (0, 2, 7)),
    ("ring gather tag, pool", 2, 0, "allreduce", dict(crypto_threads=3), flip(5, 23), 1, (None, 2, 7)),
    ("alltoall tag", 2, 0, "alltoall", dict(), flip(5, 5), 1, (0, 1, 4)),
    ("alltoall length", 2, 0, "alltoall", dict(), cut(5), 1, (0, 1, 4)),
    ("allgather tag", 3, 0, "allgather", dict(), flip(5, 14), 1, (None, 4, 5)),
    ("allgather length", 3, 0, "allgather", dict(), cut(14), 1, (None, 4, 5)),
    ("bcast chain tag", 3, 1, "bcast", dict(bcast_chain_bytes=0), flip(5, 17), 2, (None, 4, 13)),
    ("bcast chain length", 3, 1, "bcast", dict(bcast_chain_bytes=0), cut(17), 2, (None, 4, 13)),
]


@pytest.mark.parametrize("case", FRAME_CASES, ids=[c[0] for c in FRAME_CASES])
def test_the_error_names_the_frame_that_failed(case):
    """The victim's AuthenticationError names the sender, the op and its sequence number, the
    step (None for group frames, which carry no step), the chunk and the chunk count, the epoch
    and the suite, in its fields and its message; a length error says both lengths."""
    what, p, attacker, name, kw, edit, victim, (step, chunk, chunks) = case
    res = attacked(p, edit, attacker=attacker, name=name, **{"chunk_bytes": 64, **kw})
    err = res[victim][0]
    assert isinstance(err, AuthenticationError), res
    got = (err.peer, err.op, err.seq, err.step, err.chunk, err.chunks, err.epoch, err.suite)
    assert got == (attacker, name, 2, step, chunk, chunks, 0, "aes-256-gcm"), (what, got)
    where = f"{name} #2" + ("" if step is None else f", step {step}") + f", chunk {chunk}/{chunks}, epoch 0"
    assert f"aes-256-gcm authentication failed on a frame from rank {attacker} ({where}): " in str(err)
    if "length" in what:  # (cut: one byte short)
        m = re.search(r"frame has (\d+) bytes, expected (\d+) \(truncated or padded\)$", str(err))
        assert m and int(m[1]) == int(m[2]) - 1, str(err)
    else:
        assert str(err).endswith("op, dtype or count"), str(err)
    assert all(isinstance(v, list) or isinstance(v[0], SecCommError) for v in res), res


class Handle:
    """A request of :class:`Held`, weakly referenceable."""

    __slots__ = ("inner", "__weakref__")

    def __init__(self, inner):
        self.inner = inner


class Held(TransportWrapper):
    """Hands out :class:`Handle` requests and keeps only weak references to them (``refs``, in
    posting order) and the indices of those that completed (``done``), so that after a failed
    op the handles still alive are the ones the SecureComm keeps; records the ids that
    ``cancel`` got.  ``fail``: ``("send" | "recv", i)``, the i-th send or receive raises (an
    error of this rank)."""

    def __init__(self, inner, fail=None):
        super().__init__(inner)
        self.refs, self.done, self.fail_at = [], set(), fail
        self.posted = {"send": 0, "recv": 0}
        self.cancelled: list[set] = []
        self._index: dict[int, int] = {}

    def _hold(self, req):
        h = Handle(req)
        self._index[id(h)] = len(self.refs)
        self.refs.append(weakref.ref(h))
        return h

    def _post(self, kind):
        self.posted[kind] += 1
        if self.fail_at == (kind, self.posted[kind] - 1):
            raise RuntimeError("this rank fails here")

    def isend(self, buf, peer):
        self._post("send")
        return self._hold(self.inner.isend(buf, peer))

    def irecv(self, buf, peer):
        self._post("recv")
        return self._hold(self.inner.irecv(buf, peer))

    def isend_receipt(self, buf, peer):
        return self._hold(self.inner.isend_receipt(buf, peer))

    def irecv_receipt(self, buf, peer):
        return self._hold(self.inner.irecv_receipt(buf, peer))

    def wait_recv(self, req, peer):
        got = self.inner.wait_recv(req.inner, peer)
        self.done.add(self._index[id(req)])
        return got

    def wait_sends(self, reqs, peers):
        self.inner.wait_sends([r.inner for r in reqs], peers)
        self.done.update(self._index[id(r)] for r in reqs)

    def cancel(self, reqs):
        assert all(isinstance(r, Handle) for r in reqs), reqs
        self.cancelled.append({id(r) for r in reqs})
        self.inner.cancel([r.inner for r in reqs])


RD = dict(algorithm="recursive_doubling")


@pytest.mark.parametrize(
    "what, p, kw, edit, fail",
    [
        ("tag fails mid-hop (exchange)", 2, dict(chunk_bytes=64), flip(5, 16), {}),
        # the swap posts its send first: a receive that fails leaves the send outstanding
        ("a rank fails after its send (swap)", 2, RD, None, {1: ("recv", 1)}),
        # ... and one that fails before it: the peer's receive (and send) stay outstanding
        ("a rank fails before its send (swap)", 2, RD, None, {1: ("send", 1)}),
        ("tag fails mid-relay (bcast)", 3, dict(chunk_bytes=64, bcast_chain_bytes=0), flip(5, 17), {}),
    ],
)
def test_requests_of_a_failed_op_stay_referenced_and_are_cancelled(what, p, kw, edit, fail):
    """After an op fails on a rank (a frame refused, an error of its own, or a peer that
    stopped), every request the op posted and that did not complete is handed to the
    transport's ``cancel`` and stays referenced by the SecureComm (MPI may still write into a
    receive buffer or read a send buffer)."""
    name = "bcast" if "bcast" in what else "allreduce"
    attacker = 1 if name == "bcast" else 0

    def wrap(r, t):
        inner = Swap(t, edit) if edit is not None and r == attacker else t
        return Held(inner, fail=fail.get(r))

    def body(sc):
        failed = None
        for k in range(2):
            try:
                run_op(sc, name, k)
            except Exception as e:  # noqa: BLE001 - the error's traceback must not keep requests
                failed = type(e).__name__
                break
        return failed, sc

    res = world_run(p, body, wrap=wrap, **{"algorithm": "ring", **kw})
    failed = [r for r, (f, _) in enumerate(res) if f is not None]
    assert len(failed) >= (1 if fail else 2), res  # a rank that fails after its send: the peer may finish
    gc.collect()
    holders = 0  # failed ranks with requests outstanding (a rank that failed before posting any has none)
    for r in failed:
        held = res[r][1].transport
        outstanding = [i for i in range(len(held.refs)) if i not in held.done]
        assert outstanding or fail, (what, r)
        holders += bool(outstanding)
        for i in outstanding:
            h = held.refs[i]()
            assert held.cancelled and h is not None and id(h) in held.cancelled[-1], (what, r, i)
    assert holders, what


def watch_crypto(sc, log, gate=None):
    """Log ("seal" | "open", thread name) of every frame ``sc`` seals or opens from now on;
    with ``gate`` (a dict), an open that verified waits for ``gate["event"]`` while
    ``gate["armed"]`` is set, and counts itself in ``gate["started"]``/``gate["finished"]``."""
    keys = sc.session.keys

    class Watched:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def seal(self, slot, pt):
            log.append(("seal", threading.current_thread().name))
            return self.inner.seal(slot, pt)

        def open(self, slot, out):
            log.append(("open", threading.current_thread().name))
            pt = self.inner.open(slot, out)
            if gate is not None and gate["armed"]:
                gate["started"] += 1
                gate["event"].wait(30)
                gate["finished"] += 1
            return pt

    direction, group = keys.direction, keys.group
    keys.direction = lambda e, a, b: Watched(direction(e, a, b))
    keys.group = lambda e: Watched(group(e))


@pytest.mark.parametrize("chunk_bytes, pool", [(4096, False), (144, True), (64, True)])
def test_crypto_runs_on_the_pool_exactly_for_hops_of_several_chunks(chunk_bytes, pool):
    """crypto_threads=3: a hop of one chunk is sealed and opened on the calling thread (no
    hand-off for nothing), a hop of two chunks or more on the crypto threads (sealing chunk j+1
    overlaps sending chunk j).  Ring allreduce of 200 float32 on 3 ranks: hops of 67 elements,
    one chunk at 4096 bytes, two at 144, five at 64."""

    def body(sc):
        log = []
        watch_crypto(sc, log)
        x = data("float32", 200, sc.rank)
        y = np.empty_like(x)
        sc.allreduce(x, y)
        return log, y

    res = ok(world_run(3, body, algorithm="ring", chunk_bytes=chunk_bytes, crypto_threads=3))
    for log, y in res:
        assert np.array_equal(y, ref_allreduce("float32", 200, 3, "sum"))
        assert {kind for kind, _ in log} == {"seal", "open"}
        assert all(name.startswith("seccomm-crypto") == pool for _, name in log), log


def test_a_failed_chunk_waits_for_the_crypto_jobs_still_running():
    """With a pool of 2, when chunk 0 of a hop fails its tag while the job of chunk 1 (and maybe
    2) is still running and the rest are queued: the queued jobs are cancelled, the running ones
    finish before the op returns (their buffers are reused afterwards), and the error raised is
    the AuthenticationError naming the sender."""
    gate = {"armed": False, "event": threading.Event(), "started": 0, "finished": 0}
    futures = []

    class Spy:
        def __init__(self, pool):
            self.pool = pool

        def submit(self, fn, *a):
            f = self.pool.submit(fn, *a)
            futures.append(f)
            return f

    def release_after_cancel():
        for _ in range(30_000):
            if any(f.cancelled() for f in futures):
                break
            time.sleep(0.001)
        gate["event"].set()

    def body(sc):
        if sc.rank == 1:
            watch_crypto(sc, [], gate)
            sc.context = dataclasses.replace(sc.context, pool=Spy(sc.context.pool))
        run_op(sc, "allreduce", 0)
        if sc.rank == 1:
            gate["armed"] = True
            threading.Thread(target=release_after_cancel, daemon=True).start()
        try:
            run_op(sc, "allreduce", 1)
        except SecCommError as e:
            return e, gate["started"], gate["finished"]
        return None

    res = world_run(  # rank 0's frame 14: op 2, step 0, chunk 0 of 7
        2,
        body,
        wrap=lambda r, t: Swap(t, flip(5, 14)) if r == 0 else t,
        algorithm="ring",
        chunk_bytes=64,
        crypto_threads=2,
    )
    err, started, finished = res[1]
    assert isinstance(err, AuthenticationError) and err.peer == 0 and err.chunk == 0, res
    assert started == finished >= 1, (started, finished)  # 1 or 2: the worker freed by chunk 0 may
    # take chunk 2 before the cancellation, or not
    assert any(f.cancelled() for f in futures)


# -- receipts: a hop of many frames ends only once its receiver has it (docs/design.md) ----------
class Receipts(TransportWrapper):
    """Logs into ``log`` (shared by the ranks, under ``lock``) ("in", receiver, sender) as each
    frame's wait completes (after ``slow`` seconds: a receiver that takes its time); ``edit``:
    this rank's receipts are replaced by ``edit(bytes)`` (``None``: not sent at all)."""

    def __init__(self, inner, log, lock, slow=0.0, edit=None):
        super().__init__(inner)
        self.log, self.lock, self.slow, self.edit = log, lock, slow, edit
        self.receipt_reqs: set = set()

    def irecv_receipt(self, buf, peer):
        req = self.inner.irecv_receipt(buf, peer)
        self.receipt_reqs.add(id(req))
        return req

    def isend_receipt(self, buf, peer):
        if self.edit is None:
            return self.inner.isend_receipt(buf, peer)
        from threadworld import _Sent

        new = self.edit(bytes(buf))
        if new is None:  # dropped: as sent, for the rank that sent it
            return _Sent(buf, bytes(buf), peer)
        return self.send_receipt_own(np.frombuffer(new, np.uint8).copy(), peer)

    def send_receipt_own(self, buf, peer):
        self._own.append(buf)
        return self.inner.isend_receipt(buf, peer)

    def wait_recv(self, req, peer):
        got = self.inner.wait_recv(req, peer)
        if id(req) not in self.receipt_reqs:
            time.sleep(self.slow)
            with self.lock:
                self.log.append(("in", self.rank, peer))
        return got


#: (collective, world size, settings): every hop of more than 8 frames (n = 200 float32, 8 per
#: chunk at chunk_bytes=32: a ring block of 100 is 13 chunks, of 67 on 3 ranks 9; bcast's 25;
#: alltoall's blocks of 50 at 4 per chunk, 13)
RECEIPT_CASES = [
    ("allreduce", 2, dict(algorithm="ring")),
    ("allreduce", 3, dict(algorithm="ring")),
    ("bcast", 3, dict(bcast_chain_bytes=0)),  # a chain 1 -> 2 -> 0: rank 2 relays
    ("bcast", 3, dict()),  # the binomial tree: the root sends to both
    ("allgather", 3, dict()),
    ("alltoall", 2, dict(chunk_bytes=16)),
]


def _receipt_run(p, name, kw, slow=0.0, edit=None, ops=1):
    log, lock = [], threading.Lock()

    def wrap(r, t):
        return Receipts(t, log, lock, slow, edit.get(r) if edit else None)

    def body(sc):
        outs = []
        for k in range(ops):
            try:
                outs.append(run_op(sc, name, k))
            except SecCommError as e:
                return e, sc
            with lock:
                log.append(("returned", sc.rank))
        return outs, sc

    return world_run(p, body, wrap=wrap, **{"chunk_bytes": 32, **kw}), log


@pytest.mark.parametrize("name, p, kw", RECEIPT_CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}" for c in RECEIPT_CASES])
def test_a_rank_returns_only_once_its_receivers_have_every_frame(name, p, kw):
    """Completion, the sender's side: a sender of a hop of many frames returns only once the
    receiver has them all (its receipt), even when the receiver takes its time: a rank that then
    stops calling MPI cannot leave a receiver waiting on its queued sends.  Every receipt a rank
    sends, its peer waits for, and a hop of few frames has none."""
    res, log = _receipt_run(p, name, kw, slow=0.01)
    assert all(isinstance(out, list) for out, _ in res), res
    senders = {(recv, send) for kind, *who in log if kind == "in" for recv, send in [who]}
    for recv, send in senders:
        last_in = max(i for i, e in enumerate(log) if e == ("in", recv, send))
        assert log.index(("returned", send)) > last_in, (recv, send, log)
    trs = [sc.transport.inner for _, sc in res]
    for a in range(p):
        for b in range(p):
            if a != b:
                sent = sum(1 for peer, _ in trs[a].receipts_sent if peer == b)
                assert sent == trs[b].receipts_posted[a], (a, b)
    assert sum(len(t.receipts_sent) for t in trs) >= len(senders)
    few, _ = _receipt_run(p, name, {**kw, "chunk_bytes": 1024})
    assert not any(sc.transport.inner.receipts_sent for _, sc in few)


@pytest.mark.parametrize(
    "what, edit, error",
    [
        ("dropped", lambda b: None, "TransportTimeout"),
        (
            "another op's",
            lambda b: (int.from_bytes(b[:8], "big") - 1).to_bytes(8, "big") + b[8:],
            "FrameError",
        ),  # noqa: E501
        ("tag altered", lambda b: b[:23] + bytes([b[23] ^ 1]), "FrameError"),
        ("op number alone", lambda b: b[:8], "FrameError"),
        ("cut", lambda b: b[:7], "FrameError"),
        ("padded", lambda b: b + b"\0", "FrameError"),
    ],
)
def test_a_receipt_that_is_missing_or_not_this_ops_blames_its_receiver(what, edit, error):
    """A receipt that does not come makes its sender raise TransportTimeout naming the rank
    that owed it; one of another op's number, another length or a tag that fails (receipts are
    MACed by the pair, seccomm.control), FrameError naming it and the op.  The receiver itself
    had every frame: it returns with the right result."""
    res, _ = _receipt_run(2, "allreduce", dict(algorithm="ring", timeout=0.5), edit={1: edit})
    err = res[0][0]
    assert type(err).__name__ == error, res
    assert err.peer == 1 and "allreduce" in str(err.op), (err.peer, err.op)
    if error == "FrameError":
        assert err.seq == 1 and "the receipt from rank 1 is not this op's" in str(err), str(err)
    out = res[1][0]
    assert isinstance(out, list) and len(out) == 1 and np.all(out[0] == 2.0), res[1]


def test_a_receipt_replayed_within_its_op_blames_its_receiver():
    """Receipts of a pair are numbered within the op (the tag covers the op number and the
    receipt's count): rank 1's first receipt of a ring allreduce, sent again in place of its
    second (the allgather's), is FrameError naming rank 1, not taken as the second."""
    first = []

    def edit(b):
        if not first:
            first.append(b)
            return b
        return first[0]

    res, _ = _receipt_run(2, "allreduce", dict(algorithm="ring", timeout=0.5), edit={1: edit})
    err = res[0][0]
    assert type(err).__name__ == "FrameError" and err.peer == 1 and err.seq == 1, res
    assert "the receipt from rank 1 is not this op's" in str(err), str(err)
    assert len(first) == 1 and res[1][0][0][0] == 2.0, res[1]  # (rank 1 had every frame)


@pytest.mark.parametrize("p, paired", [(2, False), (2, True), (3, False), (4, False)])
@pytest.mark.parametrize("suite, hosts", [("none", None), ("aes-256-gcm", None), ("aes-256-gcm", "two")])
def test_both_ends_of_every_hop_agree_on_its_receipt(p, paired, suite, hosts):
    """Every collective and algorithm, hops around both thresholds (8 frames of 128 KiB; 1 MiB
    of clear payload, engine.ACK_CLEAR_BYTES) and far below, ``none``, aes-256-gcm and
    encrypt="inter-node" over two hosts (some hops clear): every result right, and on every
    pair as many receipts sent as waited for (a receipt one end expects and the other does not
    send would stall it, or be taken for the next op's)."""
    hosts = None if hosts is None else [5] * (p // 2) + [6] * (p - p // 2)
    world = World(p, hosts=hosts, paired=paired)
    trs = world.transports(timeout=3)
    kw = {"encrypt": "inter-node"} if hosts else {}
    per = ACK_CLEAR_BYTES // 8 // 4  # float32 elements a chunk: 8 chunks are the clear threshold

    def body(r):
        good = []
        for alg in ("ring", "recursive_doubling"):
            sc = SecureComm(
                trs[r], suite, psk=PSK, timeout=5, crypto_threads=1, chunk_bytes=4 * per, algorithm=alg, **kw
            )
            for n in (1000, 8 * per * p - p, 8 * per * p, 9 * per * p, 8 * per * 2):
                x = data("float32", n, r)
                m = n // p * p
                y, g = np.zeros(n, np.float32), np.zeros(n, np.float32)
                sc.allreduce(x, y)
                good.append(bool(np.allclose(y, sum(data("float32", n, q) for q in range(p)), rtol=1e-5)))
                counts = sc.block_counts(n)
                sc.allgather(x[: counts[r]].copy(), g)
                want = np.concatenate([data("float32", n, q)[: counts[q]] for q in range(p)])
                good.append(bool(np.array_equal(g, want)))
                z = np.zeros(counts[r], np.float32)
                sc.reduce_scatter(x, z)
                a = np.zeros(m, np.float32)
                sc.alltoall(x[:m].copy(), a)
                b = x.copy() if r == 0 else np.zeros(n, np.float32)
                sc.bcast(b, root=0)
                good.append(bool(np.array_equal(b, data("float32", n, 0))))
            sc.close()
        return all(good)

    assert ok(world.run(body)) == [True] * p
    for a in range(p):
        for b in range(p):
            if a != b:
                sent = sum(1 for peer, _ in trs[a].receipts_sent if peer == b)
                assert sent == trs[b].receipts_posted[a], (a, b, sent, trs[b].receipts_posted[a])
    assert any(t.receipts_sent for t in trs)


@pytest.mark.parametrize(
    "name, p, kw", [("allreduce", 2, dict(algorithm="ring")), ("bcast", 3, dict(bcast_chain_bytes=0))]
)
def test_a_hop_of_exactly_8_frames_has_no_receipt_and_of_9_has_one(name, p, kw):
    """The frame threshold is strict (more than ``receipt_after`` = 8): n = 200 float32, a ring
    block of 100 on two ranks and a chain bcast's 200 in 8 frames (chunk 52 and 100 bytes: 13
    and 25 elements a chunk) send no receipt; at one element fewer a chunk (9 frames),
    receipts."""
    per = {"allreduce": 13, "bcast": 25}[name]
    counts = []
    for chunk in (4 * per, 4 * (per - 1)):
        res, _ = _receipt_run(p, name, {**kw, "chunk_bytes": chunk})
        assert all(isinstance(out, list) for out, _ in res), res
        counts.append(sum(len(sc.transport.inner.receipts_sent) for _, sc in res))
    assert counts[0] == 0 and counts[1] > 0, counts


@pytest.mark.parametrize(
    "p, receipts",
    [
        (3, ({}, {0: 1, 2: 1})),  # root 1 -> 0, 2: 4 x 2 frames (none), 5 x 2 (one a child)
        (5, ({0: 1, 2: 1, 3: 1},) * 2),  # root 1 -> 0, 3, 2 (12 and 15 frames); 3 -> 4: 4 and 5
    ],
)
def test_a_relay_counts_its_frames_over_all_its_children(p, receipts):
    """MPICH delivers at most about 64 messages from a rank that stopped calling MPI, counted
    over all its receivers (docs/design.md, "Completion"), so a binomial bcast's receipts count
    a rank's frames to all its children: n = 200 float32 from rank 1 in 4 frames (chunk 200
    bytes) and in 5 (160 bytes).  Per chunk size, the receipts each rank sent to the root (rank
    1; none to any other rank): on 3 ranks the root sends 8 frames in all (no receipt), then
    10; on 5 ranks 12, then 15, while rank 3 relays 4, then 5, to its one child (no receipt).
    Every receipt sent is waited for, and every result is right."""
    for chunk, want in zip((200, 160), receipts):
        res, _ = _receipt_run(p, "bcast", {"chunk_bytes": chunk})
        assert all(isinstance(out, list) and np.all(out[0] == 1.0) for out, _ in res), res
        trs = [sc.transport.inner for _, sc in res]
        got = {r: len(t.receipts_sent) for r, t in enumerate(trs) if t.receipts_sent}
        assert got == want, (chunk, got)
        assert all(peer == 1 for t in trs for peer, _ in t.receipts_sent), chunk
        for a in range(p):
            for b in range(p):
                if a != b:
                    sent = sum(1 for peer, _ in trs[a].receipts_sent if peer == b)
                    assert sent == trs[b].receipts_posted[a], (chunk, a, b)


@pytest.mark.parametrize("alg", ["recursive_doubling", "ring"])
def test_a_transport_without_receipts_never_gets_one(alg):
    """A transport whose sends complete without their receiver (``receipt_after = None``:
    torch.distributed, NCCL) is sent no receipt and asked for none, not even for a clear hop of
    1 MiB or more or a hop of many frames (``none`` allreduce of 2 MiB on two ranks: one clear
    swap of 2 MiB, or ring hops of 1 MiB; 64 KiB frames, 16 a hop); every result right."""
    world = World(2, receipt_after=None)
    trs = world.transports(timeout=3)
    n = 2 * ACK_CLEAR_BYTES // 4

    def body(r):
        sc = SecureComm(
            trs[r], "none", psk=PSK, timeout=5, crypto_threads=1, algorithm=alg, chunk_bytes=n * 4
        )
        x, y = data("float32", n, r), np.zeros(n, np.float32)
        sc.allreduce(x, y)
        sc2 = SecureComm(
            trs[r], "none", psk=PSK, timeout=5, crypto_threads=1, algorithm=alg, chunk_bytes=1 << 16
        )
        z = np.zeros(n, np.float32)
        sc2.allreduce(x, z)
        want = data("float32", n, 0) + data("float32", n, 1)
        sc.close()
        sc2.close()
        return bool(np.array_equal(y, want) and np.array_equal(z, want))

    assert ok(world.run(body)) == [True, True]
    assert not any(t.receipts_sent for t in trs) and not any(any(t.receipts_posted) for t in trs)


@pytest.mark.parametrize("where", ["in an op", "between ops"])
@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_an_interrupt_leaves_its_rank_unusable_and_stops_the_other(exc, where):
    """Rank 1 gets ``exc`` (Ctrl-C, ``sys.exit``) in its third send (inside an op), or while its
    next call waits for the last op's sends (before the op is under way): it sees its own
    exception, then every later call on that communicator raises CommClosedError saying what
    failed or was interrupted, and by what; rank 0 stops at once naming rank 1."""
    from seccomm import CommClosedError, PeerAbortError

    class Interrupting(TransportWrapper):
        sent = 0

        def isend(self, buf, peer):
            self.sent += 1
            if where == "in an op" and self.sent == 3:
                raise exc()
            return self.inner.isend(buf, peer)

        def wait_sends(self, reqs, peers):
            if where == "between ops" and self.op_label.endswith("(its last sends)"):
                raise exc()
            return self.inner.wait_sends(reqs, peers)

    def body(sc):
        x, y, seen = np.ones(4096, np.float32), np.zeros(4096, np.float32), []
        for _ in range(3):
            try:
                sc.allreduce(x, y)
                seen.append(None)
            except BaseException as e:  # noqa: BLE001 - what each call raised is the result
                seen.append(e)
        return seen

    wrap = lambda r, t: Interrupting(t) if r == 1 else t  # noqa: E731
    res = world_run(2, body, wrap=wrap, algorithm="ring", chunk_bytes=4096)
    first, *later = [e for e in res[1] if e is not None]
    assert isinstance(first, exc), res[1]
    assert later and all(isinstance(e, CommClosedError) for e in later), res[1]
    why = r"allreduce #\d+ failed" if where == "in an op" else "allreduce interrupted on this rank"
    assert re.search(f"unusable: {why} \\({exc.__name__}\\)", str(later[0])), later[0]
    stop = next(e for e in res[0] if e is not None)
    assert isinstance(stop, PeerAbortError) and stop.peer == 1, res[0]
