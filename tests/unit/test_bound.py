"""The bound printed per bench row (seccomm.bench.bound; docs/bench.md, "The bound")."""

from __future__ import annotations

import math

import pytest

from seccomm.bench.bound import CryptoRate, bounds, crypto_seconds, measure_rate
from seccomm.collectives import get_collective

MIB = 1 << 20
RATE = CryptoRate("aes-256-gcm", MIB, 2e-6, 1e-10, 4e-6, 3e-10)  # frame costs [s], byte costs [s/B]
FRAME = (RATE.seal_frame_s + RATE.open_frame_s) / 2


def test_ring_allreduce_on_two_ranks_seals_and_opens_what_the_algorithm_does():
    """Ring allreduce, p = 2, S = 1 MiB: the reduce-scatter step seals and opens S/2, the
    allgather step opens S/2 sealed once by its origin: seal S, open S, three frames with a
    per-frame cost (the origin's encrypt-once seal is counted per byte)."""
    s = crypto_seconds(get_collective("allreduce"), "ring", MIB, 2, 1, "all", RATE)
    assert s == pytest.approx(MIB * 1e-10 + MIB * 3e-10 + 3 * FRAME)


def test_recursive_doubling_and_chunks():
    """Recursive doubling on 4 ranks: 2 steps of the whole vector, each sealed and opened in
    chunks of 1 MiB: 3 MiB -> 3 frames a step."""
    s = crypto_seconds(get_collective("allreduce"), "recursive_doubling", 3 * MIB, 4, 1, "all", RATE)
    assert s == pytest.approx(2 * (3 * MIB * 4e-10 + 3 * 2 * FRAME))


def test_policy_and_trivial_cases_cost_no_crypto():
    coll = get_collective("allreduce")
    assert crypto_seconds(coll, "ring", MIB, 2, 1, "inter-node", RATE) == 0.0  # one node: clear
    assert crypto_seconds(coll, "ring", MIB, 2, 2, "inter-node", RATE) > 0.0  # a node per rank
    assert crypto_seconds(coll, "ring", MIB, 1, 1, "all", RATE) == 0.0
    assert crypto_seconds(coll, "ring", 0, 2, 1, "all", RATE) == 0.0
    # ranks that do not fill their nodes evenly: counted as one node (inter-node: no crypto)
    assert crypto_seconds(coll, "ring", MIB, 3, 2, "inter-node", RATE) == 0.0
    # an algorithm the model does not describe: the record's first one (bcast chain -> binomial)
    bc = get_collective("bcast")
    assert crypto_seconds(bc, "chain", MIB, 2, 1, "all", RATE) == crypto_seconds(
        bc, "binomial", MIB, 2, 1, "all", RATE
    )


def test_bounds():
    assert bounds(3.0, 1.0) == (4.0, 3.0)
    assert bounds(1.0, 3.0) == (4.0, 3.0)


@pytest.mark.parametrize("suite", ["aes-256-gcm", "chacha20-poly1305", "aes-256-gmac"])
def test_measured_rates_are_plausible(suite):
    """Costs are non-negative and finite; a 64 KiB frame costs more than a 1 KiB one."""
    r = measure_rate(suite, 64 << 10)
    for v in (r.seal_frame_s, r.seal_byte_s, r.open_frame_s, r.open_byte_s):
        assert 0.0 <= v < 1.0
    assert r.seal_byte_s > 0 and r.open_byte_s > 0
    assert 0 < r.gbps("seal") < math.inf and 0 < r.gbps("open") < math.inf
    assert measure_rate(suite, 16).chunk_bytes == 16  # a tiny chunk: one point, per byte


def test_a_batch_has_at_least_one_call_however_slow_the_clock(monkeypatch):
    """A rank descheduled right after reading the clock made no call in the sizing window and
    divided by zero (seen under load): every batch makes at least one call."""
    from types import SimpleNamespace

    import seccomm.bench.bound as b

    ticks = iter(range(10**6))
    monkeypatch.setattr(b, "time", SimpleNamespace(perf_counter=lambda: next(ticks) * 0.01))  # 10 ms a read
    calls = []
    assert b._per_call(lambda: calls.append(1)) > 0 and calls


def test_gbps_at_the_chunk_size():
    c = RATE.chunk_bytes
    assert RATE.gbps("seal") == pytest.approx(c / (2e-6 + c * 1e-10) / 1e9)
    assert RATE.gbps("seal", per_byte=True) == pytest.approx(1 / 1e-10 / 1e9)
    assert CryptoRate("x", c, 0, 0, 0, 0).gbps("open") == math.inf
    with pytest.raises(ValueError):
        measure_rate("rot13", MIB)


def test_points_that_do_not_fit_keep_the_chunks_time_as_per_byte(monkeypatch):
    """Under load a small-frame batch can take longer than a whole chunk (seen on CI: per-byte
    0.0 for aes-256-gmac): the chunk's own time then counts as per-byte, never as nothing."""
    import seccomm.bench.bound as b

    times = {65536: (3e-6, 4e-6), b.SMALL_FRAME: (5e-6, 1e-6)}  # seal slower small than big
    monkeypatch.setattr(b, "_frame_times", lambda key, ws, n: times[n])
    r = b.measure_rate("aes-256-gmac", 65536)
    assert (r.seal_frame_s, r.seal_byte_s) == (0.0, 3e-6 / 65536)
    assert r.open_byte_s == pytest.approx(3e-6 / (65536 - b.SMALL_FRAME)) and r.open_frame_s > 0
