"""Every collective on an in-process world of threads (tests/threadworld.py): results equal to a
numpy reference, frames that never carry plaintext where the policy encrypts, and every altered,
replayed, reordered, truncated or misdirected frame refused, naming the sender and the op.

The same properties are checked on real ranks (tests/mpi_worker.py, tests/ranks/test_faults.py); these
run in the test process, so that mutation testing (tests/mutation.py, docs/testing.md) learns
which tests reach each function of the engine, the framing and the collectives, and they run in
seconds.  Small ``chunk_bytes`` make every hop many frames.
"""

from __future__ import annotations

import time

import ml_dtypes
import numpy as np
import pytest

from seccomm import AuthenticationError, FrameError, SecCommError, SecureComm
from seccomm.errors import PeerAbortError
from seccomm.collectives import COLLECTIVES
from seccomm.compliance.evidence import WindowIndex
from seccomm.transports import TransportWrapper, host_bytes
from seccomm.transports.wrappers import RecordingTransport
from threadworld import World, record_seals

PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")
SUITES = ("none", "aes-256-gcm", "chacha20-poly1305", "aes-256-gmac")
WIRE_ERRORS = (AuthenticationError, FrameError)
REFS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


def data(dname: str, n: int, rank: int, salt: int = 0) -> np.ndarray:
    """Small integers (exact in every dtype and under every op order) from a seed per rank."""
    rng = np.random.default_rng(1000 * rank + 7 * n + salt)
    vals = rng.integers(-4, 5, n)
    dt = np.dtype(ml_dtypes.bfloat16) if dname == "bfloat16" else np.dtype(dname)
    if dname == "uint8":
        vals = rng.integers(0, 4, n)
    return vals.astype(dt)


def world_run(size, body, hosts=None, wrap=None, suite="aes-256-gcm", paired=False, **kw):
    """``body(sc)`` on a SecureComm per rank of a fresh world; ``wrap(rank, transport)``;
    ``paired``: two ranks carry the op's record in its first frame (as MPI does)."""
    world = World(size, hosts, paired=paired)
    trs = world.transports(timeout=3)
    kw = {"psk": PSK, "timeout": 2, "crypto_threads": 1, **kw}

    def rank_fn(r):
        w = (lambda t: wrap(r, t)) if wrap else None
        return body(SecureComm(trs[r], suite, wrap_transport=w, **kw))

    return world.run(rank_fn)


def ok(results):
    bad = [r for r in results if isinstance(r, BaseException)]
    assert not bad, bad
    return results


# -- results ------------------------------------------------------------------------------------
def ref_allreduce(dname, n, p, op):
    xs = [data(dname, n, r).astype(np.float64) for r in range(p)]
    acc = xs[0]
    for x in xs[1:]:
        acc = REFS["sum" if op == "avg" else op](acc, x)
    if op != "avg":
        return acc
    dt = data(dname, 0, 0).dtype  # the division as the engine does it: in the dtype, once
    return np.divide(acc.astype(dt), dt.type(p)).astype(np.float64)


def allreduce_body(dname, n, op, alg):
    def body(sc):
        sc.algorithm = alg
        x = data(dname, n, sc.rank)
        y = np.full_like(x, 7)
        sc.allreduce(x, y, op=op)
        z = x.copy()
        sc.allreduce(z, z, op=op)  # in place
        return y, z

    return body


@pytest.mark.parametrize("p, paired", [(1, False), (2, False), (2, True), (3, False), (4, False), (5, False)])
@pytest.mark.parametrize("alg", ["ring", "recursive_doubling"])
def test_allreduce_every_op_and_dtype(p, alg, paired):
    cases = [
        ("float32", 1001, "sum"),
        ("float32", 5, "max"),
        ("int32", 37, "min"),
        ("float16", 64, "prod"),
        ("bfloat16", 33, "avg"),
        ("float64", 0, "sum"),
        ("uint8", p - 1, "sum"),
        ("int64", 3, "sum"),
    ]
    for dname, n, op in cases:
        res = ok(world_run(p, allreduce_body(dname, n, op, alg), chunk_bytes=64, paired=paired))
        ref = ref_allreduce(dname, n, p, op)
        for y, z in res:
            assert np.array_equal(y.astype(np.float64), ref), (dname, n, op, y, ref)
            assert y.tobytes() == res[0][0].tobytes() == z.tobytes()


@pytest.mark.parametrize("suite", SUITES)
@pytest.mark.parametrize(
    "p, threads, paired", [(2, 1, False), (2, 1, True), (2, 3, True), (3, 1, False), (3, 3, False)]
)
def test_every_collective_every_suite(suite, p, threads, paired):
    """Every collective and algorithm, crypto on the calling thread and on a pool of threads;
    two ranks also paired (the op's record in its first frame, as over MPI)."""
    n = 301

    def body(sc):
        r, out = sc.rank, {}
        for alg in ("ring", "recursive_doubling"):
            sc.algorithm = alg
            y = np.zeros(n, np.float32)
            sc.allreduce(data("float32", n, r), y)
            out[alg] = y
        counts = sc.block_counts(n)
        rs = np.zeros(counts[r], np.float32)
        sc.reduce_scatter(data("float32", n, r, 1), rs)
        ag = np.zeros(n, np.int32)
        sc.allgather(data("int32", counts[r], r, 2), ag)
        bc = [data("float64", n, r, 3) for _ in range(2)]
        sc.bcast_chain_bytes = 0
        sc.bcast(bc[0], root=p - 1)
        sc.bcast_chain_bytes = 1 << 30
        sc.bcast(bc[1], root=0)
        a2a = np.zeros(3 * p, np.float32)
        sc.alltoall(data("float32", 3 * p, r, 4), a2a)
        return out, rs, ag, bc, a2a

    res = ok(world_run(p, body, suite=suite, chunk_bytes=48, crypto_threads=threads, paired=paired))
    full = ref_allreduce("float32", n, p, "sum")
    rs_full = ref_allreduce("float32", n, p, "sum") * 0
    for q in range(p):
        rs_full += data("float32", n, q, 1)
    counts = [len(v) for v in np.array_split(np.arange(n), p)]
    offs = np.cumsum([0] + counts)
    ag = np.concatenate([data("int32", counts[q], q, 2) for q in range(p)])
    sends = [data("float32", 3 * p, q, 4).reshape(p, 3) for q in range(p)]
    for r, (out, rs, got_ag, bc, a2a) in enumerate(res):
        assert all(np.array_equal(v, full) for v in out.values())
        assert np.array_equal(rs, rs_full[offs[r] : offs[r + 1]])
        assert np.array_equal(got_ag, ag)
        assert np.array_equal(bc[0], data("float64", n, p - 1, 3))
        assert np.array_equal(bc[1], data("float64", n, 0, 3))
        assert np.array_equal(a2a.reshape(p, 3), np.stack([sends[q][r] for q in range(p)]))


@pytest.mark.parametrize("p, paired", [(1, False), (2, True), (4, False), (5, False)])
def test_reduce_scatter_allgather_bcast_alltoall_sizes(p, paired):
    """Uneven blocks (count % p != 0), blocks smaller than a frame and larger, every root."""

    def body(sc):
        r, out = sc.rank, []
        for n in (0, 1, p + 1, 97):
            counts = sc.block_counts(n)
            rs = np.zeros(counts[r], np.int64)
            sc.reduce_scatter(data("int64", n, r), rs, op="max")
            ag = np.zeros(n, np.float16)
            sc.allgather(data("float16", counts[r], r), ag)
            a2a = np.zeros(n * p, np.uint8)
            sc.alltoall(data("uint8", n * p, r), a2a)
            bcs = []
            for root in range(p):
                b = data("int32", n, r, root)
                sc.bcast(b, root=root)
                bcs.append(b)
            out.append((rs, ag, a2a, bcs))
        return out

    res = ok(world_run(p, body, chunk_bytes=16, bcast_chain_bytes=32, paired=paired))
    for i, n in enumerate((0, 1, p + 1, 97)):
        counts = [len(v) for v in np.array_split(np.arange(n), p)]
        offs = np.cumsum([0] + counts)
        mx = np.max([data("int64", n, q) for q in range(p)], axis=0) if n else np.zeros(0)
        ag = np.concatenate([data("float16", counts[q], q) for q in range(p)])
        for r in range(p):
            rs, got_ag, a2a, bcs = res[r][i]
            assert np.array_equal(rs, mx[offs[r] : offs[r + 1]])
            assert np.array_equal(got_ag, ag)
            exp = np.concatenate([data("uint8", n * p, q)[r * n : (r + 1) * n] for q in range(p)])
            assert np.array_equal(a2a, exp)
            for root in range(p):
                assert np.array_equal(bcs[root], data("int32", n, root, root))


# -- the wire ---------------------------------------------------------------------------------
def wire_body(colls=None):
    """Run every collective (both allreduce algorithms, both bcast trees); return the inputs."""

    def body(sc):
        r, p, n, sent = sc.rank, sc.size, 512, []
        for alg in ("ring", "recursive_doubling"):
            sc.algorithm = alg
            x = np.random.default_rng(r + 10 * len(sent)).random(n, np.float32)
            sc.allreduce(x, np.empty_like(x))
            sent.append(x)
        counts = sc.block_counts(n)
        x = np.random.default_rng(100 + r).random(n, np.float32)
        sc.reduce_scatter(x, np.empty(counts[r], np.float32))
        g = np.random.default_rng(200 + r).random(counts[r], np.float32)
        sc.allgather(g, np.empty(n, np.float32))
        a = np.random.default_rng(300 + r).random(p * 64, np.float32)
        sc.alltoall(a, np.empty_like(a))
        for chain in (0, 1 << 30):
            sc.bcast_chain_bytes = chain
            b = np.random.default_rng(400 + chain % 7).random(n, np.float32)
            sc.bcast(b, root=0)
            sent.append(b)
        return sent + [x, g, a], sc.transport

    return body


def plaintext_hops(res, p):
    """{(sender, receiver): True when a frame on that hop carried plaintext of any input}."""
    index = WindowIndex([x for sent, _ in res for x in sent])
    hops = {}
    for s, (_, tr) in enumerate(res):
        for kind, peer, frame in tr.frames:
            if kind == "frame":
                hit = index.matches(frame)[0].size > 0
                hops[(s, peer)] = hops.get((s, peer), False) or hit
    return hops


@pytest.mark.parametrize(
    "suite, encrypt, hosts, plain_expected",
    [
        ("aes-256-gcm", "all", [1, 1, 2, 2], lambda a, b: False),
        ("chacha20-poly1305", "all", [1, 2, 3], lambda a, b: False),
        ("aes-256-gcm", "inter-node", [1, 1, 2, 2], lambda a, b: a // 2 == b // 2),
        ("chacha20-poly1305", "inter-node", [1, 2, 2], lambda a, b: a > 0 and b > 0),
        ("aes-256-gcm", "inter-node", [5, 5, 5], lambda a, b: True),
        ("aes-256-gmac", "all", [1, 2], lambda a, b: True),
        ("none", "all", [1, 2], lambda a, b: True),
    ],
)
def test_plaintext_crosses_exactly_the_hops_the_policy_leaves_plain(suite, encrypt, hosts, plain_expected):
    p = len(hosts)
    res = ok(
        world_run(
            p,
            wire_body(),
            hosts=hosts,
            suite=suite,
            encrypt=encrypt,
            chunk_bytes=256,
            wrap=lambda r, t: RecordingTransport(t),
        )
    )
    hops = plaintext_hops(res, p)
    assert hops, "no frame recorded"
    for (a, b), plain in hops.items():
        assert plain == plain_expected(a, b), (suite, encrypt, hosts, a, b, plain)


def test_node_ids_split_a_host_into_nodes_that_encrypt():
    res = ok(
        world_run(
            2,
            wire_body(),
            hosts=[9, 9],
            encrypt="inter-node",
            node_ids=[0, 1],
            chunk_bytes=256,
            wrap=lambda r, t: RecordingTransport(t),
        )
    )
    assert not any(plaintext_hops(res, 2).values())


def test_inter_node_policy_protects_group_frames_only_across_nodes():
    """``inter-node``: a direction frame is protected when its two ranks are on different nodes;
    a group frame (forwarded to every rank) whenever the job spans more than one node, and on one
    node never; ``all``: every frame."""
    from seccomm.policy import EncryptPolicy

    one, two = EncryptPolicy("inter-node", [0, 0, 0]), EncryptPolicy("inter-node", [0, 0, 2])
    assert not one.encrypts(0, 1, True) and not one.encrypts(2, 0, False)
    assert two.encrypts(0, 1, True) and two.encrypts(1, 2, False) and not two.encrypts(0, 1, False)
    assert EncryptPolicy("all", [0, 0, 0]).encrypts(0, 1, True) and EncryptPolicy("all", [0]).encrypts(
        0, 0, False
    )


def _inside(io, kind, arrays) -> int:
    """How many of the frame buffers of ``kind`` ("send"/"recv") in a transport's ``io`` log lie
    inside one of ``arrays``."""
    spans = [(x.ctypes.data, x.ctypes.data + x.nbytes) for x in arrays]
    return sum(k == kind and any(lo <= a and a + n <= hi for lo, hi in spans) for k, a, n in io)


@pytest.mark.parametrize(
    "suite,p,paired,hosts",
    [
        ("none", 2, False, None),
        ("none", 2, True, None),
        ("none", 3, False, None),
        ("aes-256-gcm", 2, True, None),
        ("aes-256-gcm", 3, False, None),
        ("aes-256-gcm", 3, False, [5, 5, 5]),  # inter-node, one node: every hop in the clear
        ("aes-256-gcm", 3, False, [5, 5, 6]),  # inter-node, two nodes: only 0 <-> 1 in the clear
    ],
)
def test_clear_frames_go_from_and_land_in_the_callers_memory(suite, p, paired, hosts):
    """Ring allreduce (also in place) and allgather, chunked (a short last chunk too): results
    equal the reference, and exactly these clear frames (suite ``none``, or hops in the clear
    under ``encrypt="inter-node"``) go straight from the caller's arrays: the reduce-scatter's
    first step (from the input) and, on more than two ranks, the allgather's first (this rank's
    block; on two ranks these are the op's last sends, lent only where their hop is acknowledged,
    from 1 MiB: these are smaller); and exactly the allgather's
    last step lands straight in them (it is not forwarded); never a protected frame, and never
    one from or into the caller's memory that the op writes or forwards."""
    per = 1024  # float32 elements a chunk (chunk_bytes 4096)
    sizes = (2 * per * p, 2 * per * p + 5, per * p - 3)

    def clear(a, b):  # whether the hop a -> b is in the clear (b None: group frames)
        if suite == "none" or hosts is None:
            return suite == "none"
        return len(set(hosts)) == 1 if b is None else hosts[a] == hosts[b]

    def body(sc):
        r, t, out = sc.rank, sc.transport, []
        for n in sizes:
            xs = [data("float32", n, q) for q in range(p)]
            counts = sc.block_counts(n)
            chunks = [-(-c // per) for c in counts]
            y = np.zeros(n, np.float32)
            x = xs[r].copy()
            own = xs[r][: counts[r]].copy()
            g = np.zeros(n, np.float32)
            t.io = []
            sc.allreduce(xs[r], y)
            sc.allreduce(x, x)
            sc.allgather(own, g)
            whole = np.concatenate([xs[q][: counts[q]] for q in range(p)])
            good = np.array_equal(y, sum(xs)) and np.array_equal(x, y) and np.array_equal(g, whole)
            rs = chunks[(r - 1) % p] if clear(r, (r + 1) % p) else 0
            ag = chunks[r] if clear(r, None) and p > 2 else 0  # (on 2 ranks: the op's last sends)
            last = chunks[(r + 1) % p] if clear(r, None) else 0
            lent = _inside(t.io, "send", [xs[r], y, x, own])
            landed = _inside(t.io, "recv", [y, x, g])
            out.append((good, lent, 2 * rs + 3 * ag, landed, 3 * last))
        return out

    kw = {"hosts": hosts, "encrypt": "inter-node"} if hosts else {}
    res = ok(world_run(p, body, suite=suite, algorithm="ring", chunk_bytes=4 * per, paired=paired, **kw))
    rows = [row for part in res for row in part]
    assert all(good for good, *_ in rows)
    assert [(a, c) for _, a, b, c, d in rows] == [(b, d) for _, a, b, c, d in rows]
    assert any(b for *_, b, c, d in rows) == (suite == "none" or hosts is not None)


@pytest.mark.parametrize("p", [2, 3, 4])
def test_no_op_ends_with_a_lent_send_out(p, monkeypatch):
    """Every collective and algorithm under ``none`` (chunked, avg and in place too): clear frames
    go from the caller's memory only where a later step of the op waits for them or their hop
    is acknowledged (the op then ends once the receiver has them), so no op ends with an
    unacknowledged lent send still out (the op would have to wait for it, and MPICH may
    complete it only once the peer calls MPI again: a rank that did its part would be blamed,
    docs/design.md "Completion"); some frames are lent all the same."""
    from seccomm.sequence import OpSequence

    ends, op = [], OpSequence.run

    def watched(self, run, steps, tail, check):
        def then():
            steps()
            ends.append(run.lent)

        return op(self, run, then, tail, check)

    monkeypatch.setattr(OpSequence, "run", watched)
    n = 3 * 1024 * p + 5

    def run_all(sc):
        r = sc.rank
        x = data("float32", n, r)
        counts, m = sc.block_counts(n), n // p * p
        y, g, z = np.zeros(n, np.float32), np.zeros(n, np.float32), np.zeros(counts[r], np.float32)
        w, mine, a = x.copy(), x[: counts[r]].copy(), x[:m].copy()
        sc.allreduce(x, y, op="avg")
        sc.allreduce(x, y)
        sc.allreduce(w, w)
        sc.allgather(mine, g)
        sc.reduce_scatter(x, z)
        sc.alltoall(a, np.zeros(m, np.float32))
        roots = [x.copy() if r == root else np.zeros(n, np.float32) for root in range(p)]
        for root in range(p):
            sc.bcast(roots[root], root=root)
        return _inside(sc.transport.io, "send", [x, y, w, mine, a, *roots])

    lent = 0
    for alg in ("ring", "recursive_doubling"):
        lent += sum(ok(world_run(p, run_all, suite="none", algorithm=alg, chunk_bytes=4096, paired=p == 2)))
    assert lent > 0
    assert ends and not any(ends), ends


@pytest.mark.parametrize("paired", [False, True])
@pytest.mark.parametrize(
    "alg, n, in_place, lent, receipts",
    [
        # recursive doubling's one swap of 1 MiB: acknowledged, so it goes from the input
        ("recursive_doubling", 1 << 18, (False, False), (1, 1), (1, 1)),
        ("recursive_doubling", (1 << 18) - 1, (False, False), (0, 0), (0, 0)),  # 4 bytes less: copied
        # in place on one rank: it copies, the other lends; both acknowledge (the rule is the hop's)
        ("recursive_doubling", 1 << 18, (True, False), (0, 1), (1, 1)),
        # ring: the reduce-scatter's hop (lent: the allgather follows) and the allgather's, the
        # op's last (lent: acknowledged), 1 MiB each; both acknowledged
        ("ring", 1 << 19, (False, False), (2, 2), (2, 2)),
        ("ring", (1 << 19) - 2, (False, False), (1, 1), (0, 0)),
    ],
)
def test_an_acknowledged_clear_hop_lends_the_ops_last_sends(paired, alg, n, in_place, lent, receipts):
    """``none`` allreduce on two ranks, three calls: a clear hop of at least 1 MiB
    (engine.ACK_CLEAR_BYTES) is acknowledged, so the op's last sends go from the caller's memory
    too, and every message a rank sent in the op is with its receiver when the op returns on it;
    below 1 MiB, copied and no receipt.  Per rank and call: frames sent from the caller's
    arrays, receipts sent; every result right.  Paired: the record goes alone before an
    acknowledged swap (rides behind a copied one)."""
    world = World(2, paired=paired)
    trs = world.transports(timeout=3)

    def body(r):
        sc = SecureComm(trs[r], "none", psk=PSK, timeout=5, crypto_threads=1, algorithm=alg)
        t, rows = trs[r], []
        x = data("float32", n, r)
        y = x if in_place[r] else np.zeros(n, np.float32)
        want = data("float32", n, 0) + data("float32", n, 1)
        for _ in range(3):
            x[:] = data("float32", n, r)
            t.sent, t.receipts_sent, t.io = [], [], []
            sc.allreduce(x, y)
            delivered = all(q.where in world.delivered for q in t.sent)
            rows.append((bool(np.array_equal(y, want)), delivered or not receipts[r]))
            rows.append((_inside(t.io, "send", [x, y]), len(t.receipts_sent)))
            x[:] = -1  # (the caller's arrays change at once: the frames were delivered)
        sc.close()
        return rows

    res = ok(world.run(body))
    for r in range(2):
        assert res[r] == [(True, True), (lent[r], receipts[r])] * 3, (r, res[r])


@pytest.mark.parametrize("p", [3, 5])
@pytest.mark.parametrize("op", ["avg", "sum"])
def test_an_acknowledged_result_returned_is_not_written_before_its_receiver_has_it(p, op):
    """Recursive doubling on a non-power of two under ``none``, hops of more than 8 frames
    (acknowledged): the rank that returns the result to its folded partner sends it from its
    output, but not under avg, whose division writes that output after the step (the partner,
    slow to take the message, would get the result divided twice; the world checks that a send
    buffer is unchanged until its message is taken).  Every rank gets the reference."""

    class Slow(TransportWrapper):
        def wait_recv(self, req, peer):
            time.sleep(0.002)
            return self.inner.wait_recv(req, peer)

    n = 9 * 1024 + 3  # 10 frames of 4 KiB

    def body(sc):
        y = np.zeros(n, np.float32)
        sc.allreduce(data("float32", n, sc.rank), y, op=op)
        return y

    res = ok(
        world_run(
            p, body, wrap=lambda r, t: Slow(t), suite="none", algorithm="recursive_doubling", chunk_bytes=4096
        )
    )
    want = sum(data("float32", n, r).astype(np.float64) for r in range(p)) / (p if op == "avg" else 1)
    for y in res:
        assert np.allclose(y, want, rtol=1e-5), (op, y[:3], want[:3])


@pytest.mark.parametrize(
    "p, paired, in_place, sends, recvs",
    [
        (2, False, False, [0, 0], [0, 0]),  # the one swap is the op's last send: copied
        (2, True, False, [0, 0], [0, 0]),  # (and its record rides behind the copy)
        (4, False, False, [1] * 4, [0] * 4),  # the first of two swaps goes from the input
        (4, False, True, [0] * 4, [0] * 4),  # in place: the input is the output, never lent
        (3, False, False, [1, 0, 0], [1, 0, 0]),  # GIVE lent; GET lands in place; RETURN copied
        (3, False, True, [1, 0, 0], [1, 0, 0]),  # (GET waits for GIVE's send before writing)
    ],
)
def test_recursive_doubling_lends_clear_frames_exactly_where_a_later_step_waits(
    p, paired, in_place, sends, recvs
):
    """``none`` under recursive doubling, three calls: per rank, how many frames go out from, and
    land in, the caller's arrays (``Send.lend``, ``Recv.direct``), and every result right."""

    def body(sc):
        n = 16
        x = data("float32", n, sc.rank)
        want = sum(data("float32", n, r) for r in range(sc.size))
        good, y = True, x if in_place else np.zeros(n, np.float32)
        for _ in range(3):  # (the same arrays: the later calls run the plan)
            y[:] = np.nan
            x[:] = data("float32", n, sc.rank)  # (in place, after: x is y)
            sc.allreduce(x, y)
            good &= bool(np.array_equal(y, want))
        io = sc.transport.io
        return good, _inside(io, "send", [x, y]) // 3, _inside(io, "recv", [x, y]) // 3

    res = ok(world_run(p, body, suite="none", algorithm="recursive_doubling", paired=paired))
    assert res == [(True, s, r) for s, r in zip(sends, recvs)], res


def test_a_short_none_frame_that_lands_in_place_names_its_sender():
    """rank 1 sends its fourth frame (the allgather's second chunk, which rank 0 receives in
    place) one byte short: rank 0 raises AuthenticationError naming rank 1."""

    class Short(TransportWrapper):
        sent = 0

        def isend(self, buf, peer):
            self.sent += 1
            return self.inner.isend(buf[:-1] if self.sent == 4 else buf, peer)

    n = 1024 * 4  # blocks of two chunks: reduce-scatter 2 frames, allgather 2

    def body(sc):
        sc.allreduce(data("float32", n, sc.rank), np.zeros(n, np.float32))

    wrap = lambda r, t: Short(t) if r else t  # noqa: E731
    res = world_run(2, body, suite="none", algorithm="ring", chunk_bytes=4096, wrap=wrap)
    err = res[0]
    assert isinstance(err, AuthenticationError) and err.peer == 1, res
    assert "truncated or padded" in str(err)


@pytest.mark.parametrize(
    "name, alg, n, step, chunk, chunks",
    [
        ("allreduce", "recursive_doubling", 16, 1, 0, 1),  # the swap's copied frame, consumed from its slot
        ("allreduce", "ring", 4096, 0, 1, 2),  # the reduce-scatter's second frame, reduced from its slot
        ("bcast", None, 4096, None, 1, 4),  # a relayed group frame (no step: GROUP_STEP)
        ("allgather", None, 2048, None, 1, 2),  # a group frame that lands in place
        ("alltoall", None, 4096, 0, 1, 2),  # a direction frame that lands in place
        # aes-256-gcm under encrypt="inter-node" on one node: every hop in the clear
        ("inter-node allreduce", "ring", 4096, 0, 1, 2),
        ("inter-node allreduce", "recursive_doubling", 16, 1, 0, 1),
        ("inter-node bcast", None, 4096, None, 1, 4),
    ],
)
@pytest.mark.parametrize("delta", [-1, 1])
def test_a_clear_frame_of_the_wrong_length_is_refused_naming_its_place(
    name, alg, n, step, chunk, chunks, delta
):
    """``none`` frames (the payload alone): rank 1's second frame (the first in recursive doubling)
    one byte short raises AuthenticationError on rank 0 naming rank 1, the op, step, chunk and
    chunk count, suite ``none`` and both lengths; one byte long, the receive itself fails
    (FrameError naming rank 1, as MPI's truncation)."""
    which = 1 if alg == "recursive_doubling" else 2

    class Edit(TransportWrapper):
        sent = 0

        def isend(self, buf, peer):
            self.sent += 1
            if self.sent == which:
                b = bytes(buf)
                buf = self.kept = np.frombuffer(b[:-1] if delta < 0 else b + b"\0", np.uint8).copy()
            return self.inner.isend(buf, peer)

    op = name.split()[-1]

    def body(sc):
        x = data("float32", n, sc.rank)
        if op == "allreduce":
            sc.allreduce(x, np.zeros(n, np.float32))
        elif op == "bcast":
            sc.bcast(x, root=1)
        elif op == "allgather":
            sc.allgather(x, np.zeros(2 * n, np.float32))
        else:
            sc.alltoall(x, np.zeros(n, np.float32))

    kw = {"algorithm": alg} if alg else {}
    if name.startswith("inter-node"):  # (the error names the hop's suite, none, not the comm's)
        kw.update(suite="aes-256-gcm", encrypt="inter-node")
    kw.setdefault("suite", "none")
    res = world_run(2, body, chunk_bytes=4096, wrap=lambda r, t: Edit(t) if r else t, **kw)
    err, size = res[0], 4 * (16 if alg == "recursive_doubling" else 1024)
    if delta > 0:
        assert isinstance(err, FrameError) and err.peer == 1 and f"{op} #1" in str(err), res
        return
    assert isinstance(err, AuthenticationError) and err.peer == 1, res
    assert (err.op, err.step, err.chunk, err.chunks, err.suite) == (op, step, chunk, chunks, "none"), err
    assert f"frame has {size - 1} bytes, expected {size} (truncated or padded)" in str(err), err


@pytest.mark.parametrize("suite", ["aes-256-gcm", "chacha20-poly1305"])
def test_no_key_nonce_pair_repeats_within_a_session(suite):
    """Every frame sealed by every rank (direction and group keys) over ops of every collective
    and two epochs has a (key, nonce) pair of its own."""

    def body(sc):
        log = []
        record_seals(sc, log)
        wire_body()(sc)
        wire_body()(sc)
        return log, sc.epoch

    res = ok(world_run(3, body, suite=suite, chunk_bytes=64, rotate_after_frames=500))
    assert all(e >= 1 for _, e in res), [e for _, e in res]
    seals = [s for log, _ in res for s in log]
    assert len(seals) > 100 and len(set(seals)) == len(seals)


# -- attacks ----------------------------------------------------------------------------------
class Swap(TransportWrapper):
    """``edit(index, peer, frame bytes) -> bytes | None``: what to deliver instead (None: drop
    it); applied to every outgoing frame; ``frames`` keeps the originals (for replays)."""

    def __init__(self, inner, edit):
        super().__init__(inner)
        self.edit, self.index, self.frames = edit, 0, []

    def isend(self, buf, peer):
        frame = bytes(host_bytes(buf))
        self.frames.append((peer, frame))
        i, self.index = self.index, self.index + 1
        new = self.edit(i, peer, frame, self.frames)
        if new is frame:
            return self.inner.isend(buf, peer)
        if new is None:
            return self.send_own(np.zeros(0, np.uint8), peer)
        return self.send_own(np.frombuffer(new, np.uint8).copy(), peer)


def run_op(sc, name, k):
    """Op ``name`` number ``k`` (values 1 + k on every rank); returns its output buffer."""
    n, r = 200, sc.rank
    x = np.full(n, 1.0 + k, np.float32)
    if name == "allreduce":
        y = np.full(n, -1.0, np.float32)
        sc.allreduce(x, y)
    elif name == "reduce_scatter":
        y = np.full(sc.block_counts(n)[r], -1.0, np.float32)
        sc.reduce_scatter(x, y)
    elif name == "allgather":
        y = np.full(n, -1.0, np.float32)
        sc.allgather(x[: sc.block_counts(n)[r]], y)
    elif name == "bcast":
        y = x if r == 1 else np.full(n, -1.0, np.float32)
        sc.bcast(y, root=1)
    else:
        y = np.full(50 * sc.size, -1.0, np.float32)
        sc.alltoall(np.full(50 * sc.size, 1.0 + k, np.float32), y)
    return y


def attacked(p, edit, attacker=0, ops=2, name="allreduce", **kw):
    """Run ``ops`` ops ``name`` with rank ``attacker``'s frames edited (:class:`Swap`); each
    rank's result: the list of outputs, or (the exception, the output buffer of the failed op)."""

    def wrap(r, t):
        return Swap(t, edit if r == attacker else (lambda i, peer, f, fs: f))

    def body(sc):
        outs = []
        for k in range(ops):
            try:
                outs.append(run_op(sc, name, k))
            except SecCommError as e:
                return e, outs
        return outs

    kw = {"algorithm": "ring", "chunk_bytes": 64, **kw}
    return world_run(p, body, wrap=wrap, **kw)


def frames_per_op(p, **kw):
    """Frames rank 0 sends in one op (from a clean run of two)."""
    log = []

    def edit(i, peer, f, fs):
        log.append(i)
        return f

    ok(attacked(p, edit, **kw))
    return len(log) // 2


def flip(offset, at=3):
    def edit(i, peer, f, fs):
        if i != at:
            return f
        b = bytearray(f)
        b[offset % len(b)] ^= 0x10
        return bytes(b)

    return edit


def receivers_refuse(res, attacker=0, name="allreduce"):
    """Some rank refused a frame from ``attacker``, naming it and the op; every rank that stopped
    blamed ``attacker``; a rank that returned (every frame it got was genuine: the attacker,
    whose peers sent before they read) holds correct results."""
    named = False
    for r, v in enumerate(res):
        if isinstance(v, list):
            assert all(
                np.all(y == (1 + k) * (len(res) if name in ("allreduce", "reduce_scatter") else 1))
                for k, y in enumerate(v)
            ), (r, v)
            continue
        err, outs = v
        assert isinstance(err, WIRE_ERRORS + (PeerAbortError,)), (r, err)
        if isinstance(err, PeerAbortError):
            assert err.blamed == attacker, (r, err)
        else:
            assert err.peer == attacker, (r, err, err.peer)
            assert name in str(err), err
            named = True
    return named


@pytest.mark.parametrize("suite", ["aes-256-gcm", "chacha20-poly1305", "aes-256-gmac"])
@pytest.mark.parametrize("offset", [0, 3, 8, 12, 20, 30, 40, 50, -1, -16, -17])
def test_any_flipped_byte_is_refused(suite, offset):
    assert receivers_refuse(attacked(3, flip(offset), suite=suite))


@pytest.mark.parametrize("paired", [False, True])
def test_truncated_extended_and_dropped_frames_are_refused(paired):
    for edit in (
        lambda i, peer, f, fs: f[:-1] if i == 2 else f,
        lambda i, peer, f, fs: f[:-16] if i == 2 else f,
        lambda i, peer, f, fs: f[:-17] if i == 2 else f,
        lambda i, peer, f, fs: f + b"\0" if i == 2 else f,
        lambda i, peer, f, fs: None if i == 2 else f,
    ):
        assert receivers_refuse(attacked(2, edit, paired=paired))


def test_frames_reordered_within_a_hop_are_refused():
    def edit(i, peer, f, fs):
        return fs[1][1] if i == 2 else f  # frame 1 again in place of frame 2 (same hop)

    assert receivers_refuse(attacked(2, edit))


@pytest.mark.parametrize("alg", ["ring", "recursive_doubling"])
@pytest.mark.parametrize("p, paired", [(2, False), (2, True), (3, False)])
def test_a_frame_of_op_k_replayed_in_op_k_plus_1_is_refused(alg, p, paired):
    """Two allreduces of the same sizes: op 2's first frame is op 1's first frame, byte for byte
    (same hop, step, chunk, sizes: only the op sequence differs)."""
    k = frames_per_op(p, algorithm=alg)

    def edit(i, peer, f, fs):
        return fs[i - k][1] if i == k else f

    assert receivers_refuse(attacked(p, edit, algorithm=alg, paired=paired))


@pytest.mark.parametrize("name, p", [("allreduce", 4), ("alltoall", 3)])
def test_a_frame_sent_to_one_peer_delivered_to_another_is_refused(name, p):
    """Rank 0's first frame to rank 1 is delivered to rank 2 in place of its first frame to 2."""
    first = {}

    def edit(i, peer, f, fs):
        first.setdefault(peer, f)
        return first[1] if peer == 2 and 1 in first else f

    res = attacked(p, edit, name=name, algorithm="recursive_doubling")
    assert receivers_refuse(res, name=name)


@pytest.mark.parametrize(
    "alg, suite",
    [("ring", "aes-256-gcm"), ("recursive_doubling", "aes-256-gcm"), ("recursive_doubling", "none")],
)
def test_a_first_message_too_short_for_its_record_names_the_sender(alg, suite):
    """Paired: rank 0's first message of the op is 8 bytes (its frame and record dropped, 8 bytes
    sent instead): rank 1 raises FrameError naming rank 0 and the op, before opening anything.
    ``none``: recursive doubling's one swap carries the record behind its copied frame too."""

    class Short(TransportWrapper):
        sent = 0

        def isend(self, buf, peer):
            self.sent += 1
            if self.sent > 1:
                return self.inner.isend(buf, peer)
            self.inner.discard(buf, peer)
            return self.send_own(np.zeros(8, np.uint8), peer)

    def body(sc):
        try:
            sc.allreduce(np.ones(16, np.float32), np.zeros(16, np.float32))
        except SecCommError as e:
            return e

    res = world_run(
        2, body, wrap=lambda r, t: Short(t) if r == 0 else t, algorithm=alg, paired=True, suite=suite
    )
    err = res[1]
    assert isinstance(err, FrameError) and err.peer == 0 and "allreduce #1" in str(err), res
    assert "argument record of 8 bytes from rank 0" in str(err), err


@pytest.mark.parametrize("name", sorted(COLLECTIVES))
@pytest.mark.parametrize("paired", [False, True])
def test_tamper_in_each_collective_names_the_sender(name, paired):
    res = attacked(2, flip(-1, at=0), attacker=1, ops=1, name=name, paired=paired)
    assert receivers_refuse(res, attacker=1, name=name)


# -- arguments --------------------------------------------------------------------------------
def test_bad_arguments_raise_before_any_traffic():
    """Each refused call leaves the op sequence where it was: nothing was sent."""

    def body(sc):
        x, errs = np.ones(8, np.float32), []
        calls = [
            lambda: sc.allreduce(x, np.ones(9, np.float32)),
            lambda: sc.allreduce(x, np.ones(8, np.float64)),
            lambda: sc.allreduce(x, np.ones(8, np.float32), op="xor"),
            lambda: sc.allreduce(np.ones(8, np.int32), np.ones(8, np.int32), op="avg"),
            lambda: sc.allreduce(x, x[::2]),
            lambda: sc.allreduce(x[:4], x[2:6]),
            lambda: sc.reduce_scatter(x, np.ones(5, np.float32)),
            lambda: sc.allgather(np.ones(3, np.float32), np.ones(8, np.float32)),
            lambda: sc.bcast(x, root=2),
            lambda: sc.bcast(x, root=-1),
            lambda: sc.bcast(x, root=True),
            lambda: sc.alltoall(np.ones(3, np.float32), np.ones(3, np.float32)),
            lambda: sc.alltoall(x, x),
            lambda: sc.allreduce([1.0] * 8, np.ones(8, np.float32)),
            lambda: sc.allreduce(np.ones(8, np.complex64), np.ones(8, np.complex64)),
        ]
        ro = np.ones(8, np.float32)
        ro.flags.writeable = False
        calls.append(lambda: sc.allreduce(x, ro))
        for c in calls:
            seq = sc.sequence.seq
            try:
                c()
                errs.append(None)
            except (TypeError, ValueError) as e:
                errs.append((type(e).__name__, sc.sequence.seq == seq))
        return errs

    for errs in ok(world_run(2, body)):
        assert all(e is not None and e[1] for e in errs), errs


# -- the bench's records: counts, data, reset and the check, in process --------------------------
def bench_reference(name, sends, op, p, r, n):
    """What rank ``r`` must hold after collective ``name`` of the bench's ``sends`` (one per rank)."""
    if name in ("allreduce", "reduce_scatter"):
        full = sends[0].copy()
        for s in sends[1:]:
            REFS[op](full, s, out=full)
        if name == "allreduce":
            return full
        offs = np.cumsum([0] + [len(b) for b in np.array_split(np.arange(n.total), p)])
        return full[offs[r] : offs[r + 1]]
    if name == "allgather":
        return np.concatenate(sends)
    if name == "bcast":
        return sends[0]
    m = n.total // p
    return np.concatenate([s[r * m : (r + 1) * m] for s in sends])


@pytest.mark.parametrize("name", sorted(COLLECTIVES))
@pytest.mark.parametrize("dname, op", [("float32", "sum"), ("int32", "max"), ("bfloat16", "prod")])
def test_bench_records_count_seed_reset_and_check(name, dname, op):
    """Per record, as ``seccomm bench`` uses it (seccomm/bench/runner.py): ``counts`` sizes the
    buffers, ``init`` seeds data whose reduction is exact, ``reset`` prepares the output,
    ``secure`` runs the op, and ``wrong`` finds no wrong element, and every element altered."""
    coll, p, total = COLLECTIVES[name], 3, 1000
    op = op if coll.reduces else "sum"

    def body(sc):
        r = sc.rank
        n = coll.counts(total, p, r)
        send = coll.init(dname, op, n.send, r, p, 0)
        recv = np.full(n.recv, 9, send.dtype)
        coll.reset(send, recv, r, 0)
        coll.secure(sc, send, recv, op, 0)
        return n, send, recv

    res = ok(world_run(p, body, chunk_bytes=256))
    sends = [s for _, s, _ in res]
    for r, (n, send, recv) in enumerate(res):
        assert n.total <= total and n.total > total - p and send.size == n.send and recv.size == n.recv
        ref = bench_reference(name, sends, op, p, r, n)
        assert coll.wrong(recv, ref) == 0, (name, r)
        bad = recv.copy()
        bad[:: max(1, bad.size // 7)] += bad.dtype.type(1)
        altered = int(np.count_nonzero(bad.astype(np.float64) != recv.astype(np.float64)))
        assert altered > 0 and coll.wrong(bad, ref) == altered


@pytest.mark.parametrize("root, op", [(0, "sum"), (2, "sum"), (1, "prod")])
def test_bench_bcast_data_and_reset_follow_the_root(root, op):
    """bcast's record: every rank's bench data is the root's own (what the other records' ``init``
    gives rank ``root`` for the same dtype and op), so each rank holds the result a correct bcast
    gives; ``reset`` gives the root its data and every other rank zeros (so a bcast that moved
    nothing fails the check)."""
    coll, p, n = COLLECTIVES["bcast"], 3, 100
    root_data = COLLECTIVES["allreduce"].init("float32", op, n, root, p, root)
    assert not np.array_equal(root_data, COLLECTIVES["allreduce"].init("float32", op, n, root - 1, p, root))
    for r in range(p):
        send = coll.init("float32", op, n, r, p, root)
        assert np.array_equal(send, root_data), r
        buf = np.full(n, 9, np.float32)
        coll.reset(send, buf, r, root)
        assert np.array_equal(buf, root_data if r == root else np.zeros(n, np.float32)), r
        assert not np.shares_memory(buf, send)


@pytest.mark.parametrize("dname", ["uint8", "float16", "bfloat16", "int32", "float32", "int64", "float64"])
def test_bench_check_counts_elements_whose_bits_differ(dname):
    """``wrong`` (every record's: ``common.bitwise_wrong``) counts the elements whose bits differ
    from the native result, in every dtype: one element with several bits changed counts once,
    a change in any byte of an element counts, and -0.0 against 0.0 counts."""
    ref = data(dname, 64, 0)
    isz = ref.dtype.itemsize
    for name in sorted(COLLECTIVES):
        assert COLLECTIVES[name].wrong(ref, ref.copy()) == 0
    out = ref.copy()
    u8 = out.view(np.uint8)
    u8[0] ^= 0x01  # element 0: lowest byte (little-endian)
    u8[7 * isz + isz - 1] ^= 0x80  # element 7: highest byte
    u8[20 * isz : 21 * isz] ^= 0xFF  # element 20: every byte
    assert COLLECTIVES["bcast"].wrong(out, ref) == 3
    assert COLLECTIVES["allreduce"].wrong(ref, out) == 3
    if dname in ("float16", "bfloat16", "float32", "float64"):
        zero = np.zeros(4, ref.dtype)
        assert COLLECTIVES["alltoall"].wrong(-zero, zero) == 4


def test_inter_node_recursive_doubling_sends_clear_hops_as_payload_alone():
    """``encrypt="inter-node"`` on two hosts of two ranks, recursive doubling of 16 float32: the
    swap with the rank on the same host is a clear frame (64 bytes, the payload alone), the swap
    across hosts a sealed one (64 + 16 tag bytes): the hop decides, not the group key's policy."""

    def body(sc):
        x = data("float32", 16, sc.rank)
        y = np.zeros(16, np.float32)
        sc.allreduce(x, y)
        good = bool(np.array_equal(y, sum(data("float32", 16, r) for r in range(4))))
        frames = [n for k, _, n in sc.transport.io if k == "send" and n != 40]  # (records aside)
        return good, sorted(frames)

    res = ok(world_run(4, body, hosts=[0, 0, 1, 1], encrypt="inter-node", algorithm="recursive_doubling"))
    assert res == [(True, [64, 80])] * 4, res
