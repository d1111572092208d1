"""Schedules of the collectives on an in-process world of threads (tests/threadworld.py): which
hops and steps each algorithm seals, how many frames it sends, the operand order of its
reductions bit for bit; buffers of any shape, avg, and the device engine's fused hop hand-off.
In process so that mutation testing (tests/mutation.py) learns which tests reach each function."""

from __future__ import annotations

import numpy as np
import pytest

from seccomm.framing import AAD, Workspace
from seccomm.transports.wrappers import RecordingTransport
from test_threadworld_ops import REFS, data, ok, world_run
from threadworld import record_seals


# -- schedules: which hops, which steps, how many frames ----------------------------------------
def record_headers(sc, log):
    """Log the AAD header fields (framing.AAD) of every frame ``sc`` seals from now on."""
    keys = sc.session.keys

    class Logged:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def seal(self, slot, pt):
            log.append(AAD.unpack(bytes(slot.header)))
            return self.inner.seal(slot, pt)

    direction, group = keys.direction, keys.group
    keys.direction = lambda e, a, b: Logged(direction(e, a, b))
    keys.group = lambda e: Logged(group(e))


STEP, CHUNK, CHUNKS, SRC, DST = 11, 12, 13, 14, 15  # indices of AAD header fields


def rd_schedule(p):
    """(sender, receiver, step) of every hop of recursive doubling on ``p`` ranks (MPICH's scheme,
    Thakur, Rabenseifner & Gropp 2005): with pof2 the largest power of two <= p and rem = p - pof2,
    ranks 2i -> 2i+1 (i < rem) fold at step 0; the pof2 remaining ranks (index v: 2v+1 below rem,
    v+rem above) exchange with index v ^ 2^k at step k+1; the odd ranks return the result at step
    lg pof2 + 1."""
    pof2 = 1 << (p.bit_length() - 1)
    rem, lg = p - pof2, pof2.bit_length() - 1

    def real(v):
        return 2 * v + 1 if v < rem else v + rem

    hops = {(2 * i, 2 * i + 1, 0) for i in range(rem)} | {(2 * i + 1, 2 * i, lg + 1) for i in range(rem)}
    for k in range(lg):
        hops |= {(real(v), real(v ^ (1 << k)), k + 1) for v in range(pof2)}
    return hops


def special(n, rank):
    """float32 data of signed zeros, NaNs whose payload names the rank, and small numbers."""
    rng = np.random.default_rng(50 + rank)
    x = rng.choice(np.array([-0.0, 0.0, -0.0, 0.0, -1.0, 2.0, np.nan], np.float32), n)
    x.view(np.uint32)[np.isnan(x)] = 0x7FC00000 | (rank + 1)
    return x


@pytest.mark.parametrize("p", [2, 3, 5, 6, 7])
def test_recursive_doubling_hops_steps_and_operand_order(p):
    """Recursive doubling seals each chunk of each hop of its schedule (:func:`rd_schedule`) once
    and nothing else, one frame per hop for a small message and several for a larger one; every
    pairwise reduction takes the lower-ranked operand first, so every rank holds, bit for bit,
    the reduction in rank order (x0 op x1 op ... op x_p-1), signed zeros and NaN payloads too."""

    def body(sc):
        sc.algorithm, log, outs = "recursive_doubling", [], []
        record_headers(sc, log)
        for n, op in ((3, "max"), (40, "min"), (40, "max")):
            y = np.empty(n, np.float32)
            sc.allreduce(special(n, sc.rank), y, op=op)
            outs.append(y)
        return log, outs

    res = ok(world_run(p, body, chunk_bytes=64))  # 16 float32 per frame: 40 elements are 3 frames
    for k, (n, op) in enumerate(((3, "max"), (40, "min"), (40, "max"))):
        ref = special(n, 0)
        for q in range(1, p):
            ref = REFS[op](ref, special(n, q))
        for r, (_, outs) in enumerate(res):
            assert outs[k].tobytes() == ref.tobytes(), (p, n, op, r)
    frames = [h for log, _ in res for h in log]
    for chunks, ops in ((1, 1), (3, 2)):
        got = sorted((h[SRC], h[DST], h[STEP], h[CHUNK]) for h in frames if h[CHUNKS] == chunks)
        want = sorted((a, b, s, j) for a, b, s in rd_schedule(p) for j in range(chunks) for _ in range(ops))
        assert got == want, (p, chunks)


@pytest.mark.parametrize("p", [2, 3, 4])
def test_ring_allreduce_ranks_agree_bitwise_on_signed_zeros_and_nans(p):
    def body(sc):
        sc.algorithm = "ring"
        y = np.empty(40, np.float32)
        sc.allreduce(special(40, sc.rank), y, op="max")
        return y

    res = ok(world_run(p, body, chunk_bytes=16))
    assert len({y.tobytes() for y in res}) == 1


def frames_sent(tr):
    return sum(1 for kind, _, _ in tr.frames if kind == "frame")


@pytest.mark.parametrize("p", [2, 3, 5])
def test_ring_reduce_scatter_and_allgather_send_p_minus_1_blocks(p):
    """The ring sends p-1 blocks per rank and no more (the cost model's (p-1) steps of n/p): rank
    r sends every block but its own in reduce-scatter and every block but r+1's in allgather, each
    cut into frames of ``chunk_bytes``; the allgather's origin seals only its own block."""
    n, ce = 103, 4  # uneven blocks of several 16-byte frames

    def body(sc):
        r, counts, tr = sc.rank, sc.block_counts(n), sc.transport
        log, sent = [], []
        record_seals(sc, log)
        x = data("float32", n, r)
        sc.reduce_scatter(x, np.empty(counts[r], np.float32))
        sent.append((frames_sent(tr), len(log)))
        sc.allgather(x[: counts[r]], np.empty(n, np.float32))
        sent.append((frames_sent(tr), len(log)))
        return sent

    res = ok(world_run(p, body, chunk_bytes=16, wrap=lambda r, t: RecordingTransport(t)))
    frames = [-(-c // ce) for c in [len(b) for b in np.array_split(np.arange(n), p)]]
    for r, ((rs_sent, rs_sealed), (all_sent, all_sealed)) in enumerate(res):
        assert rs_sent == rs_sealed == sum(frames) - frames[r]
        assert all_sent - rs_sent == sum(frames) - frames[(r + 1) % p]
        assert all_sealed - rs_sealed == frames[r]


def test_a_world_of_one_seals_nothing():
    """With no other rank, no collective seals a frame (no key is used for data nobody gets)."""

    def body(sc):
        log = []
        record_seals(sc, log)
        x = data("float32", 50, 0)
        for alg in ("ring", "recursive_doubling"):
            sc.algorithm = alg
            sc.allreduce(x, np.empty_like(x))
        sc.reduce_scatter(x, np.empty_like(x))
        sc.allgather(x, np.empty_like(x))
        for chain in (0, 1 << 30):
            sc.bcast_chain_bytes = chain
            sc.bcast(x.copy(), root=0)
        sc.alltoall(x, np.empty_like(x))
        return log

    assert ok(world_run(1, body, chunk_bytes=16)) == [[]]


# -- buffers of any shape, avg ------------------------------------------------------------------
@pytest.mark.parametrize("p", [2, 3])
def test_multidimensional_buffers_are_taken_flat(p):
    """C-contiguous buffers of any shape are their elements in C order: every collective gives on
    2-D buffers what it gives on their flat views."""
    m = 4

    def body(sc):
        r, out = sc.rank, {}
        x = data("float32", p * m * 3, r).reshape(3, p * m)
        for alg in ("ring", "recursive_doubling"):
            sc.algorithm = alg
            y = np.empty((3, p * m), np.float32)
            sc.allreduce(x, y)
            out[alg] = y
        rs = np.empty((3 * m, 1), np.float32)
        sc.reduce_scatter(x, rs)
        ag = np.empty((p, 3 * m), np.float32)
        sc.allgather(x.reshape(3 * m, p)[:, :1].copy().reshape(3, m) + r, ag)
        bc = x.copy() if r == 0 else np.zeros_like(x)
        sc.bcast(bc, root=0)
        a2a = np.empty((p, 3 * m), np.float32)
        sc.alltoall(x.reshape(p, 3 * m), a2a)
        return out, rs, ag, bc, a2a

    res = ok(world_run(p, body, chunk_bytes=16))
    xs = [data("float32", p * m * 3, q) for q in range(p)]
    full = np.sum(xs, axis=0, dtype=np.float32)
    gathered = np.concatenate([xs[q].reshape(3 * m, p)[:, 0] + q for q in range(p)])
    for r, (out, rs, ag, bc, a2a) in enumerate(res):
        assert all(y.shape == (3, p * m) and np.array_equal(y.reshape(-1), full) for y in out.values())
        assert np.array_equal(rs.reshape(-1), full[r * 3 * m : (r + 1) * 3 * m])
        assert np.array_equal(ag.reshape(-1), gathered)
        assert np.array_equal(bc.reshape(-1), xs[0])
        assert np.array_equal(a2a, np.stack([xs[q].reshape(p, 3 * m)[r] for q in range(p)]))


@pytest.mark.parametrize("p", [2, 3])
def test_reduce_scatter_avg_divides_by_the_world_size(p):
    n = 31

    def body(sc):
        y = np.empty(sc.block_counts(n)[sc.rank], np.float32)
        sc.reduce_scatter(data("float32", n, sc.rank), y, op="avg")
        return y

    res = ok(world_run(p, body, chunk_bytes=16))
    full = np.sum([data("float32", n, q) for q in range(p)], axis=0, dtype=np.float32) / np.float32(p)
    offs = np.cumsum([0] + [len(b) for b in np.array_split(np.arange(n), p)])
    for r, y in enumerate(res):
        assert np.array_equal(y, full[offs[r] : offs[r + 1]]), r


# -- the device engine's fused hop ---------------------------------------------------------------
class FusedRun:
    """An op run that offers ``ring_rs_fused`` (as the device engine does) and no other traffic."""

    size, rank, itemsize, chunk_elems = 3, 1, 4, 4

    def __init__(self, takes):
        self.takes, self.calls, self.ws = takes, [], Workspace()

    def ring_rs_fused(self, send, dest, ufunc, blocks):
        self.calls.append((send, dest, ufunc, blocks))
        return self.takes

    def exchange(self, send, recv):
        raise RuntimeError("the unfused ring ran")


def test_ring_reduce_scatter_hands_the_op_to_a_fused_hop():
    """Where the engine has a fused hop that takes the op, the ring hands it this op's buffers,
    reduction and blocks and does nothing else; where it declines, the ring runs as usual."""
    from seccomm.collectives.common import Blocks
    from seccomm.collectives.reduce_scatter import ring_reduce_scatter

    send, dest, blocks = np.ones(12, np.float32), np.zeros(4, np.float32), Blocks(12, 3)
    run = FusedRun(True)
    ring_reduce_scatter(run, send, dest, np.add, blocks)
    assert len(run.calls) == 1 and all(a is b for a, b in zip(run.calls[0], (send, dest, np.add, blocks)))
    assert not dest.any()
    run = FusedRun(False)
    with pytest.raises(RuntimeError, match="the unfused ring ran"):
        ring_reduce_scatter(run, send, dest, np.add, blocks)
    assert len(run.calls) == 1
