"""The GPU kernels themselves (kernels/aead.cu, every launch of seccomm.gpu.aead.GPUAEAD), run on
the CPU by tests/cuda_emu.h: batch indexing, the multi-lane MAC (per-thread Horner, the shared-
memory tree, the segment chain), vector and byte paths, and fail-closed gating, bit for bit
against `cryptography`.  Every output buffer has guard bytes around and between its chunks, which
must come back untouched."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

import kernel_emu
from seccomm.dtypes import resolve_dtype
from seccomm.gpu.aead import SEGMENT_BYTES, GPUAEAD, Batch, Hop

SUITES = ["chacha20-poly1305", "aes-256-gcm", "aes-256-gmac"]
SEG = SEGMENT_BYTES
# Around the edges of a unit (64 B), of a segment (SEG) and of the tree (SEG - 64: a segment whose
# last whole unit is its last thread), and a chunk of several segments with a partial last one.
LENGTHS = [
    0,
    1,
    15,
    16,
    17,
    63,
    64,
    65,
    128,
    1000,
    SEG - 64,
    SEG - 1,
    SEG,
    SEG + 1,
    SEG + 64,
    2 * SEG + 64 * 5 + 7,
]
POISON = 0x5A


@pytest.fixture(scope="module")
def mod(tmp_path_factory):
    return kernel_emu.EmulatedModule(kernel_emu.build(tmp_path_factory.mktemp("emu")))


def reference_seal(suite, key, nonce, aad, pt):
    if suite == "chacha20-poly1305":
        return ChaCha20Poly1305(key).encrypt(nonce, pt, aad)
    if suite == "aes-256-gcm":
        return AESGCM(key).encrypt(nonce, pt, aad)
    return pt + AESGCM(key).encrypt(nonce, b"", aad + pt)  # GMAC: body in the clear


def layout(sizes, gap, base=0):
    """Offsets for chunks of `sizes` with `gap` guard bytes before each; total length."""
    offs, pos = [], base
    for s in sizes:
        pos += gap
        offs.append(pos)
        pos += s
    return np.array(offs, np.int64), pos + gap


def batch(lens, rng):
    n = len(lens)
    keys = rng.integers(0, 256, (n, 32), dtype=np.uint8)
    nonces = rng.integers(0, 256, (n, 12), dtype=np.uint8)
    aads = rng.integers(0, 256, (n, 89), dtype=np.uint8)
    return keys, nonces, aads


def outside(buf, offs, sizes):
    """The bytes of buf outside every [off, off + size)."""
    mask = np.ones(buf.size, bool)
    for o, s in zip(offs, sizes):
        mask[o : o + s] = False
    return buf[mask]


@pytest.mark.parametrize("suite", SUITES)
@pytest.mark.parametrize("gap", [16, 3], ids=["aligned", "unaligned"])
def test_seal_is_bit_exact_with_cryptography(mod, suite, gap):
    rng = np.random.default_rng(len(suite) * 7 + gap)
    lens = np.array(LENGTHS, np.int64)
    keys, nonces, aads = batch(lens, rng)
    src_offs, src_size = layout(lens, gap)
    src = rng.integers(0, 256, src_size, dtype=np.uint8)
    fr_offs, fr_size = layout(lens + 16, gap)
    frames = np.full(fr_size, POISON, np.uint8)
    GPUAEAD(suite, module=mod).seal(Batch(keys, nonces, aads, src, src_offs, lens, frames, fr_offs))
    for j, n in enumerate(lens):
        want = reference_seal(
            suite, bytes(keys[j]), bytes(nonces[j]), bytes(aads[j]), bytes(src[src_offs[j] : src_offs[j] + n])
        )
        assert bytes(frames[fr_offs[j] : fr_offs[j] + n + 16]) == want, (suite, int(n))
    assert (outside(frames, fr_offs, lens + 16) == POISON).all(), "seal wrote outside the frames"


@pytest.mark.parametrize("suite", SUITES)
def test_open_verifies_and_writes_only_verified_chunks(mod, suite):
    """Frames sealed by `cryptography` open on the kernels; a flipped body byte, a flipped tag byte,
    another chunk's nonce or a truncated length fail, and their output stays untouched."""
    rng = np.random.default_rng(len(suite))
    lens = np.array(LENGTHS, np.int64)
    keys, nonces, aads = batch(lens, rng)
    fr_offs, fr_size = layout(lens + 16, 5)
    frames = np.full(fr_size, POISON, np.uint8)
    plain = []
    for j, n in enumerate(lens):
        pt = rng.integers(0, 256, int(n), dtype=np.uint8).tobytes()
        plain.append(pt)
        frames[fr_offs[j] : fr_offs[j] + n + 16] = np.frombuffer(
            reference_seal(suite, bytes(keys[j]), bytes(nonces[j]), bytes(aads[j]), pt), np.uint8
        )
    bad = {2: "body", 9: "tag", 12: "nonce", 15: "body"}
    frames[fr_offs[2] + 7] ^= 1
    frames[fr_offs[9] + lens[9] + 15] ^= 0x80
    nonces_used = nonces.copy()
    nonces_used[12] = nonces[11]
    frames[fr_offs[15] + 3 * SEG // 2] ^= 4  # in the middle segment of a multi-segment chunk
    out_offs, out_size = layout(lens, 7)
    out = np.full(out_size, POISON, np.uint8)
    ok = GPUAEAD(suite, module=mod).open(Batch(keys, nonces_used, aads, frames, fr_offs, lens, out, out_offs))
    assert ok.dtype == np.int32 and ok.shape == (len(lens),)
    for j, n in enumerate(lens):
        got = out[out_offs[j] : out_offs[j] + n]
        if j in bad:
            assert ok[j] == 0, (suite, j, bad[j])
            assert (got == POISON).all(), f"unverified chunk {j} ({bad[j]}) was written"
        else:
            assert ok[j] == 1, (suite, j, int(n))
            assert got.tobytes() == plain[j]
    assert (outside(out, out_offs, lens) == POISON).all(), "open wrote outside the chunks"
    # a frame presented with a shorter length than it was sealed with fails too
    short = lens.copy()
    short[10] -= 1
    before = out.copy()
    ok = GPUAEAD(suite, module=mod).open(Batch(keys, nonces, aads, frames, fr_offs, short, out, out_offs))
    assert ok[10] == 0
    assert (
        out[out_offs[10] : out_offs[10] + lens[10]] == before[out_offs[10] : out_offs[10] + lens[10]]
    ).all()


@pytest.mark.parametrize("suite", ["chacha20-poly1305", "aes-256-gcm"])
def test_one_mebibyte_plus_three(mod, suite):
    """One chunk of 1 MiB + 3 (the CPU default chunk size, 65 segments) both ways."""
    rng = np.random.default_rng(3)
    n = (1 << 20) + 3
    lens = np.array([n], np.int64)
    keys, nonces, aads = batch(lens, rng)
    src = rng.integers(0, 256, n, dtype=np.uint8)
    frames = np.zeros(n + 16, np.uint8)
    zero = np.zeros(1, np.int64)
    g = GPUAEAD(suite, module=mod)
    g.seal(Batch(keys, nonces, aads, src, zero, lens, frames, zero))
    want = reference_seal(suite, bytes(keys[0]), bytes(nonces[0]), bytes(aads[0]), src.tobytes())
    assert frames.tobytes() == want
    out = np.zeros(n, np.uint8)
    assert g.open(Batch(keys, nonces, aads, frames, zero, lens, out, zero))[0] == 1
    assert (out == src).all()


@pytest.mark.parametrize("suite,ref_cls", [("chacha20-poly1305", ChaCha20Poly1305), ("aes-256-gcm", AESGCM)])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_fused_hop_is_bit_exact_and_fails_closed(mod, suite, ref_cls, dtype):
    """open (incoming key) -> add own (float32 accumulation, one rounding) -> seal (outgoing key), in
    one batch, against cryptography + numpy/ml_dtypes; a chunk whose incoming tag fails writes no
    outgoing frame and no sum."""
    dt = resolve_dtype(dtype)
    rng = np.random.default_rng(len(suite) + len(dtype))
    counts = [1, 7, 16, 1000, SEG // dt.itemsize + 5, 3 * SEG // dt.itemsize]
    lens = np.array(counts, np.int64) * dt.itemsize
    k_in, n_in, a_in = batch(lens, rng)
    k_out, n_out, a_out = batch(lens, rng)
    own_offs, own_size = layout(lens, 16)
    own = np.zeros(own_size, np.uint8)
    in_offs, in_size = layout(lens + 16, 16)
    frames_in = np.zeros(in_size, np.uint8)
    want_sum, want_frame = [], []
    for j, c in enumerate(counts):
        with np.errstate(over="ignore"):
            recv = rng.uniform(
                -7e4 if dtype == "float16" else -1e4, 7e4 if dtype == "float16" else 1e4, c
            ).astype(dt)
        mine = rng.uniform(-1e4, 1e4, c).astype(dt)
        if dtype == "float16" and c >= 3:  # overflow to inf and subnormals
            recv[:3] = np.array([65504, 6e-8, -65504], np.float32).astype(dt)
            mine[:3] = np.array([32.0, 1e-7, -16.0], np.float32).astype(dt)
        own[own_offs[j] : own_offs[j] + lens[j]] = np.frombuffer(mine.tobytes(), np.uint8)
        frames_in[in_offs[j] : in_offs[j] + lens[j] + 16] = np.frombuffer(
            ref_cls(bytes(k_in[j])).encrypt(bytes(n_in[j]), recv.tobytes(), bytes(a_in[j])), np.uint8
        )
        with np.errstate(over="ignore"):
            s = (mine + recv).astype(dt).tobytes()
        want_sum.append(s)
        want_frame.append(ref_cls(bytes(k_out[j])).encrypt(bytes(n_out[j]), s, bytes(a_out[j])))
    tampered = 4
    frames_in[in_offs[tampered] + lens[tampered] // 2] ^= 1
    out_offs, out_size = layout(lens + 16, 16)
    frames_out = np.full(out_size, POISON, np.uint8)
    acc = np.full(own_size, POISON, np.uint8)
    ok = GPUAEAD(suite, module=mod).fused_hop(
        Hop(
            k_in,
            n_in,
            a_in,
            frames_in,
            in_offs,
            own,
            own_offs,
            k_out,
            n_out,
            a_out,
            frames_out,
            out_offs,
            lens,
            dtype,
            acc=acc,
        ),
    )
    for j in range(len(counts)):
        fo, ao, n = out_offs[j], own_offs[j], lens[j]
        if j == tampered:
            assert ok[j] == 0
            assert (frames_out[fo : fo + n + 16] == POISON).all() and (acc[ao : ao + n] == POISON).all()
        else:
            assert ok[j] == 1
            assert acc[ao : ao + n].tobytes() == want_sum[j], (dtype, counts[j])
            assert frames_out[fo : fo + n + 16].tobytes() == want_frame[j], (dtype, counts[j])
    assert (outside(frames_out, out_offs, lens + 16) == POISON).all()
    assert (outside(acc, own_offs, lens) == POISON).all()


def test_launch_arguments_match_kernel_parameters(mod):
    """Every launch above went through the size check; a Python int (64 bits in CuPy) is refused."""
    k = mod.get_function("sc_mac_prep")
    with pytest.raises(TypeError, match="numpy scalar"):
        k(
            (1,),
            (256,),
            (0, np.zeros(32, np.uint8), np.zeros(12, np.uint8), np.zeros(80, np.uint32), np.int32(1)),
        )
    with pytest.raises(TypeError, match="8 bytes"):
        k(
            (1,),
            (256,),
            (
                np.int64(0),
                np.zeros(32, np.uint8),
                np.zeros(12, np.uint8),
                np.zeros(80, np.uint32),
                np.int32(1),
            ),
        )


def test_batches_of_more_than_one_block_of_chunks(mod):
    """257 chunks: the per-chunk prep and finish kernels launch two blocks, the second for the last
    chunk alone (their indexing is the same for every suite).  Lengths 0..200."""
    suite, count, bad = "chacha20-poly1305", 257, 256
    rng = np.random.default_rng(count)
    lens = rng.integers(0, 201, count).astype(np.int64)
    keys, nonces, aads = batch(lens, rng)
    src_offs, src_size = layout(lens, 1)
    src = rng.integers(0, 256, src_size, dtype=np.uint8)
    fr_offs, fr_size = layout(lens + 16, 2)
    frames = np.full(fr_size, POISON, np.uint8)
    g = GPUAEAD(suite, module=mod)
    g.seal(Batch(keys, nonces, aads, src, src_offs, lens, frames, fr_offs))
    for j in (0, 1, 255, 256):
        want = reference_seal(
            suite,
            bytes(keys[j]),
            bytes(nonces[j]),
            bytes(aads[j]),
            bytes(src[src_offs[j] : src_offs[j] + lens[j]]),
        )
        assert bytes(frames[fr_offs[j] : fr_offs[j] + lens[j] + 16]) == want, j
    frames[fr_offs[bad] + lens[bad]] ^= 1  # the tag of the chunk in the second block of finish
    out = np.full(src_size, POISON, np.uint8)
    ok = g.open(Batch(keys, nonces, aads, frames, fr_offs, lens, out, src_offs))
    assert ok.tolist() == [int(j != bad) for j in range(count)]
    for j in range(count):
        got = out[src_offs[j] : src_offs[j] + lens[j]]
        assert (
            (got == POISON).all() if j == bad else (got == src[src_offs[j] : src_offs[j] + lens[j]]).all()
        ), j
    assert (outside(out, src_offs, lens) == POISON).all()


def special_pairs(dtype):
    """(own, received) pairs of special values: subnormals, NaNs with payloads (quiet and
    signalling), inf - inf, overflow, signed zeros."""
    if dtype == "float32":
        bits = [
            (0x00000001, 0x00000001),
            (0x80000003, 0x00000001),
            (0x7FC00001, 0x3F800000),
            (0x3F800000, 0xFF800123),
            (0x7F812345, 0xFFC00007),
            (0x7F800000, 0xFF800000),
            (0x7F7FFFFF, 0x7F7FFFFF),
            (0x80000000, 0x00000000),
            (0x00400000, 0x00400000),
        ]
        return [np.array(c, np.uint32).view(np.float32) for c in zip(*bits)]
    bits = [
        (0x0001, 0x0001),
        (0x8001, 0x0002),
        (0x7FC1, 0x3F80),
        (0x7FFF, 0x3F80),
        (0xFFFF, 0x3C00),
        (0x7F81, 0x7E00),
        (0x7C00, 0xFC00),
        (0x7F80, 0xFF80),
        (0x7BFF, 0x7BFF),
        (0x8000, 0x0000),
    ]
    return [np.array(c, np.uint16).view(resolve_dtype(dtype)) for c in zip(*bits)]


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_fused_hop_special_values_match_numpy(mod, dtype):
    """Subnormals, NaN payloads and inf - inf sum as numpy/ml_dtypes do on x86 (a GPU flushes
    subnormals under CuPy's -ftz=true and returns one canonical NaN: the kernels must not)."""
    dt = resolve_dtype(dtype)
    own, recv = special_pairs(dtype)
    with np.errstate(all="ignore"):
        want = (own + recv).astype(dt)
    k_in, n_in, a_in = batch(np.zeros(1), np.random.default_rng(1))
    k_out, n_out, a_out = batch(np.zeros(1), np.random.default_rng(2))
    lens = np.array([own.nbytes], np.int64)
    zero = np.zeros(1, np.int64)
    frame_in = np.frombuffer(
        ChaCha20Poly1305(bytes(k_in[0])).encrypt(bytes(n_in[0]), recv.tobytes(), bytes(a_in[0])), np.uint8
    ).copy()
    frame_out = np.zeros(own.nbytes + 16, np.uint8)
    acc = np.zeros(own.nbytes, np.uint8)
    ok = GPUAEAD("chacha20-poly1305", module=mod).fused_hop(
        Hop(
            k_in,
            n_in,
            a_in,
            frame_in,
            zero,
            np.frombuffer(own.tobytes(), np.uint8).copy(),
            zero,
            k_out,
            n_out,
            a_out,
            frame_out,
            zero,
            lens,
            dtype,
            acc=acc,
        ),
    )
    assert ok[0] == 1
    ui = np.uint32 if dt.itemsize == 4 else np.uint16
    got, ref = acc.view(ui), want.view(ui)
    # NaN payloads: the kernels follow SSE (first NaN operand, quieted), as numpy's float32 and
    # ml_dtypes' bfloat16 loops do; numpy's float16 loop keeps the second operand's. Every other
    # result is bit-exact.
    loose = np.isnan(want) if dtype == "float16" else np.zeros(want.size, bool)
    assert np.isnan(acc.view(dt)[loose]).all()
    assert got[~loose].tolist() == ref[~loose].tolist(), (
        [hex(x) for x in got] + ["vs"] + [hex(x) for x in ref]
    )


@pytest.mark.parametrize("suite", ["chacha20-poly1305", "aes-256-gmac"])
def test_short_max_len_never_verifies(mod, suite):
    """A max_len below a chunk's length: seal writes an all-zero tag and open reports ok 0 without
    writing, even when the scratch memory still holds the partials of an earlier good open."""
    rng = np.random.default_rng(9)
    lens = np.array([2 * SEG + 100], np.int64)
    keys, nonces, aads = batch(lens, rng)
    src = rng.integers(0, 256, int(lens[0]), dtype=np.uint8)
    zero = np.zeros(1, np.int64)
    g = GPUAEAD(suite, module=mod)
    frames = np.zeros(int(lens[0]) + 16, np.uint8)
    g.seal(Batch(keys, nonces, aads, src, zero, lens, frames, zero))
    out = np.full(int(lens[0]), POISON, np.uint8)
    assert g.open(Batch(keys, nonces, aads, frames, zero, lens, out, zero, max_len=int(lens[0])))[0] == 1
    out[:] = POISON
    assert g.open(Batch(keys, nonces, aads, frames, zero, lens, out, zero, max_len=100))[0] == 0
    assert (out == POISON).all()
    short = np.full_like(frames, POISON)
    g.seal(Batch(keys, nonces, aads, src, zero, lens, short, zero, max_len=100))
    assert (short[-16:] == 0).all()  # (written: the buffer held POISON)
    assert g.open(Batch(keys, nonces, aads, short, zero, lens, out, zero))[0] == 0
    if suite == "aes-256-gmac":  # the origin MACs' launch: the same all-zero tag, never equal
        tags = np.full((1, 16), POISON, np.uint8)
        alone = Batch(keys, nonces, aads[:, :0], src, zero, lens, None, None, max_len=100)
        g.macs(alone, tags)
        assert (tags == 0).all()
        good = np.zeros((1, 16), np.uint8)
        g.macs(replace(alone, max_len=None), good)
        assert (good != 0).any() and g.macs(alone, good, check=True)[0] == 0


def test_bad_arguments_are_refused_before_any_launch(mod):
    rng = np.random.default_rng(4)
    lens = np.array([10, 20], np.int64)
    keys, nonces, aads = batch(lens, rng)
    offs = np.array([0, 10], np.int64)
    src, frames, fr = np.zeros(30, np.uint8), np.zeros(62, np.uint8), np.array([0, 26], np.int64)
    g = GPUAEAD("aes-256-gcm", module=mod)
    before = {k: v.launches for k, v in mod._kernels.items()}
    with pytest.raises(TypeError, match="lens: dtype int32"):
        g.seal(Batch(keys, nonces, aads, src, offs, lens.astype(np.int32), frames, fr))
    with pytest.raises(ValueError, match="keys: shape"):
        g.seal(Batch(keys[:1], nonces, aads, src, offs, lens, frames, fr))
    with pytest.raises(ValueError, match="aads: not C-contiguous"):
        wide = np.zeros((2, 100), np.uint8)
        g.open(Batch(keys, nonces, wide[:, :89], frames, fr, lens, src, offs))
    with pytest.raises(TypeError, match="frames: dtype float32"):
        g.open(Batch(keys, nonces, aads, np.zeros(62, np.float32), fr, lens, src, offs))
    with pytest.raises(ValueError, match="adds"):
        g.fused_hop(
            Hop(keys, nonces, aads, frames, fr, src, offs, keys, nonces, aads, frames, fr, lens, "int64")
        )
    assert {k: v.launches for k, v in mod._kernels.items()} == before


@pytest.mark.parametrize("width", [0, 89], ids=["alone", "header"])
def test_macs_are_gmac_bit_exact_and_check_each_tag(mod, width):
    """``macs``: the GMAC of each chunk (with its header as AAD, or alone: the origin MACs) into a
    tags array, bit for bit ``AESGCM(key).encrypt(nonce, b"", header + chunk)``; with ``check``,
    ok 1 exactly where the given tag is the chunk's.  Nothing is written but the tags."""
    rng = np.random.default_rng(31 + width)
    lens = np.array(LENGTHS, np.int64)
    n = len(lens)
    keys, nonces, _ = batch(lens, rng)
    aads = rng.integers(0, 256, (n, width), dtype=np.uint8)
    src_offs, src_size = layout(lens, 3)
    src = rng.integers(0, 256, src_size, dtype=np.uint8)
    before = src.copy()
    tags = np.full((n, 16), POISON, np.uint8)
    g = GPUAEAD("aes-256-gmac", module=mod)
    assert g.macs(Batch(keys, nonces, aads, src, src_offs, lens, None, None), tags) is None
    for j, m in enumerate(lens):
        chunk = bytes(src[src_offs[j] : src_offs[j] + m])
        want = AESGCM(bytes(keys[j])).encrypt(bytes(nonces[j]), b"", bytes(aads[j]) + chunk)
        assert tags[j].tobytes() == want, (width, int(m))
    assert (src == before).all()
    bad = {1: "tag", 6: "tag", 13: "body", 15: "body"}
    given = tags.copy()
    given[1, 0] ^= 1
    given[6, 15] ^= 0x80
    src[src_offs[13]] ^= 2
    src[src_offs[15] + 3 * SEG // 2] ^= 4  # in the middle segment of a multi-segment chunk
    ok = g.macs(Batch(keys, nonces, aads, src, src_offs, lens, None, None), given, check=True)
    assert ok.dtype == np.int32 and ok.shape == (n,)
    assert [j for j in range(n) if ok[j] == 0] == sorted(bad), ok
    assert (
        given[[j for j in range(n) if j not in (1, 6)]] == tags[[j for j in range(n) if j not in (1, 6)]]
    ).all()


def test_macs_take_the_gmac_kernels_and_refuse_bad_arguments_before_any_launch(mod):
    rng = np.random.default_rng(5)
    lens = np.array([10, 20], np.int64)
    keys, nonces, _ = batch(lens, rng)
    aads, src, offs = np.zeros((2, 0), np.uint8), np.zeros(30, np.uint8), np.array([0, 10], np.int64)
    before = {k: v.launches for k, v in mod._kernels.items()}
    with pytest.raises(ValueError, match="macs: the GMAC kernels"):
        GPUAEAD("aes-256-gcm", module=mod).macs(Batch(keys, nonces, aads, src, offs, lens, None, None), None)
    g = GPUAEAD("aes-256-gmac", module=mod)
    with pytest.raises(ValueError, match=r"tags: shape \(2, 8\), expected \(2, 16\)"):
        g.macs(Batch(keys, nonces, aads, src, offs, lens, None, None), np.zeros((2, 8), np.uint8))
    with pytest.raises(TypeError, match="src: dtype float32"):
        g.macs(
            Batch(keys, nonces, aads, np.zeros(30, np.float32), offs, lens, None, None),
            np.zeros((2, 16), np.uint8),
        )
    with pytest.raises(TypeError, match="lens: dtype int32"):
        g.macs(
            Batch(keys, nonces, aads, src, offs, lens.astype(np.int32), None, None),
            np.zeros((2, 16), np.uint8),
        )
    assert {k: v.launches for k, v in mod._kernels.items()} == before
    empty = np.zeros(0, np.int64)
    ok = g.macs(
        Batch(keys[:0], nonces[:0], aads[:0], src, empty, empty, None, None),
        np.zeros((0, 16), np.uint8),
        check=True,
    )
    assert ok.shape == (0,) and {k: v.launches for k, v in mod._kernels.items()} == before


def test_the_device_engine_under_x509_computes_and_checks_origin_macs_on_the_kernels(mod):
    """Three thread ranks under x509, rank 1 on the device engine with the emulated kernels: its
    allgather and bcast give the CPU ranks' bits (its origin MACs, made by ``macs``, check on
    the CPU ranks; theirs check on the kernels), and a block forged by its forwarder is refused
    on the kernel rank."""
    from hostcore import HostBackend
    from identities import rank_identities
    from seccomm import AuthenticationError, SecureComm
    from insider import allgathered, caught, forge_forwarded_block
    from threadworld import World

    class Kernels(HostBackend):
        def aead(self, suite):
            if suite not in self._aeads:
                self._aeads[suite] = GPUAEAD(suite, module=mod)
            return self._aeads[suite]

    ids = rank_identities(3)

    def world_run(body):
        world = World(3)
        trs = world.transports(timeout=5)
        return world.run(
            lambda r: body(
                SecureComm(
                    trs[r], identity=ids[r], timeout=4, crypto_threads=1, chunk_bytes=64,
                    device_backend=Kernels(None) if r == 1 else None,
                ),
            )
        )  # fmt: skip

    def both(sc):
        ag = np.zeros(3 * 40, np.float32)
        sc.allgather(np.arange(40, dtype=np.float32) * (sc.rank + 1), ag)
        bc = np.arange(50, dtype=np.float32) + sc.rank
        sc.bcast(bc, root=1)
        bc2 = np.arange(50, dtype=np.float32) + sc.rank
        sc.bcast(bc2, root=0)
        return ag.tobytes() + bc.tobytes() + bc2.tobytes()

    got = world_run(both)
    assert all(isinstance(g, bytes) for g in got) and got[0] == got[1] == got[2], got
    mp = pytest.MonkeyPatch()
    try:
        forge_forwarded_block(mp, forger=0)  # rank 0 forwards origin 2's block to rank 1
        res = world_run(lambda sc: caught(allgathered, sc))
    finally:
        mp.undo()
    assert isinstance(res[1], AuthenticationError) and res[1].peer == 0, res
    assert "group frame of origin 2 (forwarded by rank 0) does not match the MAC" in str(res[1])
