"""What the engine offers the compiled two-rank swap (:mod:`seccomm.pairswap`): the swap step of
a sum allreduce on two paired ranks carries a :class:`~seccomm.engine.swap.PairSpec` that
describes that step exactly, and no other step carries one.  The compiled swap itself needs MPI
(tests/mpi_worker.py ``express``); the offer is made in process, so these tests run here, on a
paired world of threads (tests/threadworld.py), where mutation testing sees them."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

from seccomm import pairswap, plans
from seccomm.collectives.allreduce import _rd_schedule
from test_threadworld_ops import ok, world_run


def offers(monkeypatch, size=2, paired=True, suite="aes-256-gcm", op="sum", n=16, calls=3):
    """Run ``calls`` allreduces of ``n`` float32 under ``op`` (recursive doubling: one swap on two
    ranks); return per rank ``(specs the plan table was offered, input, result)``."""
    seen = {}
    real = pairswap.offer

    def offer(steps):
        spec = getattr(steps, "pair", None)
        if spec is not None:
            seen.setdefault(spec.run.rank, []).append((spec, steps))
        return real(steps)

    monkeypatch.setattr(plans.pairswap, "offer", offer)

    def body(sc):
        x = np.arange(n, dtype=np.float32) + 100 * sc.rank
        y = np.zeros_like(x)
        for _ in range(calls):
            sc.allreduce(x, y, op=op)
        return x, y, [p.run for p in sc.plans.values()]

    res = ok(world_run(size, body, paired=paired, suite=suite, algorithm="recursive_doubling"))
    return [(seen.get(r, []), *res[r]) for r in range(size)]


@pytest.mark.parametrize("suite", ["aes-256-gcm", "chacha20-poly1305", "none"])
def test_a_two_rank_sum_offers_its_swap_as_it_is(monkeypatch, suite):
    """One offer per rank (the plan is made once), naming the plan's run, the pair link to the
    peer, the swap's step, the input's bytes, the element count, private memory to decrypt into
    (sealed suites; clear frames are consumed from the receive slot), and a ``consume`` that
    writes ``res = cur + theirs`` into the result, as ``summed`` says."""
    n = 16
    for rank, (specs, x, y, runs) in enumerate(offers(monkeypatch, suite=suite, n=n)):
        assert len(specs) == 1, (rank, specs)
        spec, steps = specs[0]
        assert steps.pair is spec
        assert spec.run in runs and spec.run.rank == rank
        assert spec.link is not None and spec.link.peer == 1 - rank
        assert spec.peer == 1 - rank
        assert spec.step == _rd_schedule(2, rank)[0][2]  # (kind, peer, step, theirs_first)
        assert spec.elems == n
        assert bytes(spec.piece) == x.tobytes()
        if suite == "none":
            assert spec.out is None
        else:
            out = np.asarray(spec.out)  # (private: neither the caller's input nor its result)
            assert out.nbytes == n * 4 and not np.shares_memory(out, x) and not np.shares_memory(out, y)
        cur, res, theirs_first = spec.summed
        assert np.shares_memory(cur, x) and np.shares_memory(res, y) and res.size == cur.size == n
        assert theirs_first == _rd_schedule(2, rank)[0][3]
        theirs = np.full(n, 7, np.float32)
        spec.consume(0, memoryview(theirs.view(np.uint8)))
        np.testing.assert_array_equal(y, x + theirs)


@pytest.mark.parametrize("suite", ["aes-256-gcm", "none"])
@pytest.mark.parametrize("op", ["max", "avg"])
def test_no_offer_where_the_swap_is_not_a_plain_sum(monkeypatch, suite, op):
    """max and avg (a division after the swap) are not a sum the compiled swap can do."""
    for specs, *_ in offers(monkeypatch, suite=suite, op=op):
        assert specs == []


@pytest.mark.parametrize("suite", ["aes-256-gcm", "none"])
def test_no_offer_without_a_pair_link(monkeypatch, suite):
    """Not paired (the transport has no pair link), or more than two ranks: nothing to compile."""
    for specs, *_ in offers(monkeypatch, paired=False, suite=suite):
        assert specs == []
    for specs, *_ in offers(monkeypatch, size=3, paired=True, suite=suite):
        assert specs == []


class StandIn:
    """A stand-in for :mod:`seccomm.pairswap` that the plan table calls as it calls the module:
    ``offer`` what the real one offers (without asking for an MPI link), ``compile`` a swap whose
    ``start`` hands every op back (a negative code), and ``rest`` that runs the plan's steps, as
    the Python path would.  Each call is logged per rank (the spec's run names it) with what it
    was given; ``scs[rank]``: the rank's SecureComm, whose op sequence ``start`` compares with."""

    def __init__(self):
        self.scs, self.none_offered = {}, 0
        self.offers, self.compiles, self.starts = defaultdict(list), defaultdict(list), defaultdict(list)

    def offer(self, steps):
        spec = getattr(steps, "pair", None)
        if spec is None:
            self.none_offered += 1
            return None
        self.offers[spec.run.rank].append(spec)
        return spec, steps

    def compile(self, spec, epoch, agreement, tail):
        rank = spec[0].run.rank
        self.compiles[rank].append((spec, epoch, agreement, tail))
        outer = self

        class Swap:
            steps = staticmethod(spec[1])  # (the plan's steps, run as they are)

            def start(self, seq, op_index, epoch):
                s = outer.scs[rank].sequence
                outer.starts[rank].append(((seq, op_index, epoch), (s.seq, s.epoch_ops - 1, s.epoch)))
                return -1

        return Swap()

    def rest(self, run, sw, got):
        assert got == -1
        sw.steps()


@pytest.mark.parametrize("suite", ["aes-256-gcm", "none"])
def test_the_plan_table_asks_the_compiled_swap_once_per_plan_and_epoch(monkeypatch, suite):
    """A repeated two-rank sum (7 calls, keys rotated every few): the table is offered the swap
    once, as the plan is made, compiles it once per epoch with the plan's record tail and the
    communicator's agreement, and starts it for every repeat with the op's number, index in its
    epoch and epoch; what it hands back runs in the op (``rest``), and every result is right."""
    stand_in = StandIn()
    monkeypatch.setattr(plans, "pairswap", stand_in)
    n = 16

    def body(sc):
        stand_in.scs[sc.rank] = sc
        x = np.arange(n, dtype=np.float32) + 100 * sc.rank
        y = np.zeros_like(x)
        out = []
        for _ in range(7):
            sc.allreduce(x, y)
            out.append(y.copy())
        (plan,) = sc.plans.values()
        return out, plan, sc.agreement, sc.epoch

    kw = {"algorithm": "recursive_doubling", "rotate_after_frames": 50}  # (an op bounds 24: two per epoch)
    res = ok(world_run(2, body, paired=True, suite=suite, **kw))
    want = np.arange(n, dtype=np.float32) * 2 + 100
    assert stand_in.none_offered == 0
    for rank, (out, plan, agreement, epoch) in enumerate(res):
        offers, compiles, starts = stand_in.offers[rank], stand_in.compiles[rank], stand_in.starts[rank]
        assert all(np.array_equal(y, want) for y in out), rank
        assert len(offers) == 1
        assert plan.compiled is not None and plan.compiled[0][0] is offers[0]
        assert epoch >= 2  # (rotated: more than one compile)
        assert [c[1] for c in compiles] == sorted({c[1] for c in compiles})  # once per epoch
        assert compiles[-1][1] == epoch and len(compiles) >= 2
        assert all(c[0] is plan.compiled[0] and c[2] is agreement and c[3] == plan.tail for c in compiles)
        assert len(starts) == 6 and all(got == want_ for got, want_ in starts), starts


def test_no_compiled_swap_where_none_is_offered(monkeypatch):
    """A plan the stand-in is offered nothing for (max: not a sum) keeps no compiled part, and
    its repeats never compile or start one."""
    stand_in = StandIn()
    monkeypatch.setattr(plans, "pairswap", stand_in)

    def body(sc):
        x = np.ones(16, np.float32)
        y = np.zeros_like(x)
        for _ in range(3):
            sc.allreduce(x, y, op="max")
        return [p.compiled for p in sc.plans.values()]

    res = ok(world_run(2, body, paired=True, algorithm="recursive_doubling", crypto_threads=1))
    assert res == [[None], [None]]
    assert (
        stand_in.none_offered == 2 and not stand_in.offers and not stand_in.compiles and not stand_in.starts
    )
