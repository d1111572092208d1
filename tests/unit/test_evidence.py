"""The plaintext search behind the wire evidence: exact, at every offset, never fooled by equal
64-bit keys, and able to prove a capture holds the frames it is checked for."""

from __future__ import annotations

import numpy as np

from seccomm.compliance.evidence import find_plaintext, frames_found

rng = np.random.default_rng(7)


def noise(n):
    return rng.integers(0, 256, n, dtype=np.uint8)


def colliding_windows():
    """Two different 16-byte windows with the same 64-bit search key (key = lo * C ^ hi)."""
    C = np.uint64(0x9E3779B97F4A7C15)
    lo1, hi1 = np.frombuffer(noise(16).tobytes(), "<u8")
    lo2 = np.uint64(int(lo1) ^ 1)
    with np.errstate(over="ignore"):
        hi2 = (lo1 * C ^ hi1) ^ (lo2 * C)
    return np.array([lo1, hi1], "<u8").view(np.uint8), np.array([lo2, hi2], "<u8").view(np.uint8)


def test_finds_every_offset_and_only_real_matches():
    pt = rng.standard_normal(4096).astype(np.float32)
    raw = pt.view(np.uint8)
    for start, n in ((0, 16), (3, 40), (raw.size - 16, 16), (1001, 333)):
        rec = np.concatenate([noise(7), raw[start : start + n], noise(5)])
        res = find_plaintext([noise(1000), rec], [pt])
        assert res["hits"] == n - 15 and res["first_hit"] == 1000 + 7
    assert find_plaintext([noise(1 << 16)], [pt])["hits"] == 0
    assert find_plaintext([raw[:15]], [pt])["hits"] == 0  # shorter than a window
    assert find_plaintext([raw], [pt[:3]])["plaintext_windows"] == 0  # nothing to search for


def test_equal_keys_with_other_bytes_neither_hide_nor_fake_a_match():
    w1, w2 = colliding_windows()
    assert not np.array_equal(w1, w2)
    for order in ([w1, w2], [w2, w1]):  # the real match is found whichever comes first
        assert find_plaintext([w2.copy()], order)["hits"] == 1
    assert find_plaintext([w2.copy()], [w1])["hits"] == 0  # same key, other bytes: no match


def test_frames_found_counts_duplicates_and_misses():
    frames = [noise(100), noise(5000), noise(16)]
    frames.append(frames[1].copy())  # the same frame sent twice
    capture = [np.concatenate([noise(50), f, noise(9)]) for f in frames[:2]] + [frames[2]]
    assert frames_found(capture, frames) == 4
    assert frames_found(capture[:1], frames) == 1
    assert frames_found([noise(1 << 15)], frames) == 0
