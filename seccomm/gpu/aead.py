"""Batched seal/open/fused-hop of many chunks per launch on CuPy arrays, with exactly the frames
of the CPU suites (a chunk sealed here opens with ``cryptography`` and vice versa).

A call takes one batch object: :class:`Batch` (seal, open: n chunks from one buffer to another
under their keys, nonces and AAD headers) or :class:`Hop` (the fused ring hop: open, add, seal).
Arrays live on one device; scalars go to kernels as numpy scalars of the kernel's exact types
(CuPy passes Python ints as 64-bit).  Open returns ``ok`` (n,) int32; a chunk whose tag fails is
not written at all.  The kernels and their launch sequence are described in ``kernels/aead.cu``
and ``docs/gpu.md``.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from .kernels import get_module

SUITE_CODES = {"chacha20-poly1305": 0, "aes-256-gcm": 1, "aes-256-gmac": 1}
DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2}
THREADS = 256  # SC_T in kernels/aead.cu: threads per block, one 64-byte unit each
SEGMENT_BYTES = 64 * THREADS  # SC_SEG: bytes of a chunk per block
_PW_SLOTS = 10  # SC_PW: per-chunk MAC powers from sc_mac_prep, 8 words each
_SEAL, _OPEN, _MAC, _MAC_CONCAT, _HOP, _COPY = range(6)
_NULL = np.uint64(0)  # a NULL device pointer argument


def _need(name, a, dtype, shape=None, ndim=None) -> None:
    """Shapes, dtypes and contiguity, on the host (no sync): a wrong one would make the kernels
    read or write out of bounds.  Raises TypeError or ValueError naming the argument."""
    if a.dtype != np.dtype(dtype):
        raise TypeError(f"{name}: dtype {a.dtype}, the kernels take {np.dtype(dtype).name}")
    if shape is not None and tuple(a.shape) != shape:
        raise ValueError(f"{name}: shape {tuple(a.shape)}, expected {shape}")
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name}: {a.ndim}-D, expected {ndim}-D")
    if not a.flags.c_contiguous:
        raise ValueError(f"{name}: not C-contiguous (the kernels index it by row stride)")


def _need_keyed(n: int, keys, nonces, aads, suffix: str = "") -> None:
    _need("keys" + suffix, keys, np.uint8, (n, 32))
    _need("nonces" + suffix, nonces, np.uint8, (n, 12))
    _need("aads" + suffix, aads, np.uint8, ndim=2)
    if aads.shape[0] != n:
        raise ValueError(f"aads{suffix}: {aads.shape[0]} rows for {n} chunks")


def _need_span(n: int, name: str, buf, offs_name: str, offs) -> None:
    _need(name, buf, np.uint8, ndim=1)
    _need(offs_name, offs, np.int64, (n,))


@dataclass(frozen=True)
class Batch:
    """n chunks to seal or open in one call, ``lens`` (n,) int64 bytes each: chunk j is read from
    ``src`` at byte ``src_offs[j]`` and written to ``dst`` at ``dst_offs[j]`` (``src``, ``dst``:
    uint8, 1-D; offsets (n,) int64) under ``keys[j]`` ((n, 32) uint8), ``nonces[j]`` ((n, 12)
    uint8) and the AAD header ``aads[j]`` ((n, A) uint8: the 89-byte headers of the host
    framing).  Seal: ``src`` holds the payloads, ``dst`` the frames (body || 16-byte tag); open:
    the other way round.  ``max_len``: the longest chunk in bytes if the caller knows it (else
    it is read from ``lens``: a device-to-host sync); a chunk longer than it allows never
    verifies."""

    keys: object
    nonces: object
    aads: object
    src: object
    src_offs: object
    lens: object
    dst: object
    dst_offs: object
    max_len: int | None = None

    @property
    def n(self) -> int:
        return self.lens.size

    def check(self, src: str, dst: str) -> None:
        """Raise ``TypeError``/``ValueError`` for a wrong dtype, shape or layout, naming the
        argument (``src``, ``dst``: what the call calls them, e.g. "frames", "out")."""
        _need_keyed(self.n, self.keys, self.nonces, self.aads)
        _need_span(self.n, src, self.src, f"{src}_offs" if src != "frames" else "fr_offs", self.src_offs)
        _need("lens", self.lens, np.int64, (self.n,))
        _need_span(self.n, dst, self.dst, f"{dst}_offs" if dst != "frames" else "fr_offs", self.dst_offs)

    def check_macs(self, tags) -> None:
        """As :meth:`check`, for :meth:`GPUAEAD.macs`: ``src`` and ``tags`` ((n, 16) uint8; the
        argument is called ``tags``); ``dst`` is unused."""
        _need_keyed(self.n, self.keys, self.nonces, self.aads)
        _need_span(self.n, "src", self.src, "src_offs", self.src_offs)
        _need("lens", self.lens, np.int64, (self.n,))
        _need("tags", tags, np.uint8, (self.n, 16))


@dataclass(frozen=True)
class Hop:
    """One ring reduce-scatter hop for n chunks of ``lens`` (n,) int64 bytes: the frames
    ``frames_in`` at ``in_offs`` (sealed under ``keys_in``, ``nonces_in``, ``aads_in``) are
    opened, the caller's own block ``own`` at ``own_offs`` (``dtype``: "float32", "float16" or
    "bfloat16") added, and the sum sealed into ``frames_out`` at ``out_offs`` under
    ``keys_out``, ``nonces_out``, ``aads_out`` (and, if ``acc`` is given, written to it in the
    clear, laid out like ``own``).  Shapes and dtypes as :class:`Batch`'s; ``max_len`` too."""

    keys_in: object
    nonces_in: object
    aads_in: object
    frames_in: object
    in_offs: object
    own: object
    own_offs: object
    keys_out: object
    nonces_out: object
    aads_out: object
    frames_out: object
    out_offs: object
    lens: object
    dtype: str
    acc: object = None
    max_len: int | None = None

    @property
    def n(self) -> int:
        return self.lens.size

    def opened(self) -> Batch:
        """The frames this hop opens (their check; ``dst`` unused: the hop writes ``frames_out``)."""
        return Batch(
            self.keys_in, self.nonces_in, self.aads_in, self.frames_in, self.in_offs, self.lens,
            self.frames_out, self.out_offs, self.max_len,
        )  # fmt: skip

    def check(self) -> None:
        """As :meth:`Batch.check`; also the dtype (``ValueError`` naming the ones it adds)."""
        if self.dtype not in DTYPE_CODES:
            raise ValueError(f"the fused hop adds {', '.join(DTYPE_CODES)}, not {self.dtype!r}")
        n = self.n
        _need_keyed(n, self.keys_in, self.nonces_in, self.aads_in)
        _need_span(n, "frames_in", self.frames_in, "in_offs", self.in_offs)
        _need_span(n, "own", self.own, "own_offs", self.own_offs)
        _need_span(n, "frames_out", self.frames_out, "out_offs", self.out_offs)
        _need("lens", self.lens, np.int64, (n,))
        _need_keyed(n, self.keys_out, self.nonces_out, self.aads_out, "_out")
        if self.acc is not None:
            _need("acc", self.acc, np.uint8, ndim=1)


@dataclass(frozen=True)
class _Mac:
    """A launch's MAC state: ``pw`` the per-chunk key powers (sc_mac_prep), ``parts`` and
    ``tails`` the per-segment and per-chunk partial sums."""

    pw: object
    parts: object
    tails: object


_NO_MAC = _Mac(_NULL, _NULL, _NULL)


class GPUAEAD:
    """One suite on one device.  ``stream``: CuPy stream to launch on (default: current).
    ``module``: the compiled kernels (default: :func:`~seccomm.gpu.kernels.get_module`); anything
    with ``get_function`` and an ``xp`` array module can stand in (tests run the kernel source on
    the CPU this way)."""

    def __init__(self, suite: str, device: int | None = None, stream=None, module=None):
        if suite not in SUITE_CODES:
            raise ValueError(f"no GPU kernels for suite {suite!r}; allowed: {', '.join(SUITE_CODES)}")
        self.suite, self.code, self.gmac = suite, SUITE_CODES[suite], suite == "aes-256-gmac"
        self.mod = module if module is not None else get_module(device)
        xp = getattr(self.mod, "xp", None)
        if xp is None:
            import cupy as xp
        self.xp = xp
        self.device, self.stream = device, stream
        self._units = self.mod.get_function("sc_units_chacha" if self.code == 0 else "sc_units_gcm")
        self._prep = self.mod.get_function("sc_mac_prep")
        self._fin = self.mod.get_function("sc_mac_finish")

    # ---- API -----------------------------------------------------------------------------------
    def seal(self, b: Batch) -> None:
        """Write the frame (body || tag) of every chunk of ``b.src`` into ``b.dst``
        (:class:`Batch`).  A chunk longer than ``b.max_len`` allows gets an all-zero tag, which
        never verifies (open reports it with ``ok`` 0 the same way).  Raises
        TypeError/ValueError for a wrong dtype, shape or layout, before any launch."""
        b.check("src", "frames")
        if b.n == 0:
            return
        with self._on():
            segs = self._segments(b.lens, b.max_len, b.aads.shape[1] if self.gmac else 0)
            mac = self._mac_setup(b.keys, b.nonces, b.n, segs)
            if self.gmac:  # body in the clear; GMAC over header || body
                self._pass(_COPY, b, segs, mac, out=(b.dst, b.dst_offs))
                self._pass(_MAC_CONCAT, b, segs, mac)
            else:
                self._pass(_SEAL, b, segs, mac, out=(b.dst, b.dst_offs))
            self._finish(b.n, segs, b.aads, mac, b.lens, b.dst, b.dst_offs)

    def open(self, b: Batch):
        """Verify every frame of ``b.src``; decrypt (or copy, for GMAC) only the verified ones
        into ``b.dst`` (:class:`Batch`).  Returns ``ok`` (n,) int32 on the device.  Raises
        TypeError/ValueError for a wrong dtype, shape or layout, before any launch."""
        b.check("frames", "out")
        with self._on():
            ok = self.xp.zeros(b.n, self.xp.int32)
            if b.n == 0:
                return ok
            self._verify(b, ok)
            segs = self._segments(b.lens, b.max_len)
            self._pass(_COPY if self.gmac else _OPEN, b, segs, _NO_MAC, out=(b.dst, b.dst_offs), ok=ok)
            return ok

    def fused_hop(self, h: Hop):
        """Ring reduce-scatter hop (:class:`Hop`): open ``h.frames_in``, add ``h.own``, seal into
        ``h.frames_out`` (and the plaintext sum into ``h.acc``, if given) in one pass; unverified
        chunks write nothing.  Returns ``ok``.  ChaCha20-Poly1305 and AES-256-GCM (not GMAC).
        The sum is numpy's on x86 bit for bit (float32 arithmetic, one rounding, subnormals kept),
        also on a GPU whose compiler flushes subnormals; a NaN result is NaN, with SSE's payload
        rule (numpy's float16 loop picks the other operand's payload)."""
        if self.gmac:
            raise ValueError("the fused hop encrypts: use aes-256-gcm or chacha20-poly1305")
        h.check()
        with self._on():
            ok = self.xp.zeros(h.n, self.xp.int32)
            if h.n == 0:
                return ok
            opened = h.opened()
            self._verify(opened, ok)
            segs = self._segments(h.lens, h.max_len)
            mac = self._mac_setup(h.keys_out, h.nonces_out, h.n, segs)
            self._pass(
                _HOP,
                Batch(h.keys_in, h.nonces_in, h.aads_out, h.frames_in, h.in_offs, h.lens, None, None),
                segs,
                mac,
                out=(h.frames_out, h.out_offs),
                ok=ok,
                keyed2=(h.keys_out, h.nonces_out),
                own=(h.own, h.own_offs),
                acc=h.acc if h.acc is not None else _NULL,
                dtype=DTYPE_CODES[h.dtype],
            )
            self._finish(h.n, segs, h.aads_out, mac, h.lens, h.frames_out, h.out_offs, gate=ok)
            return ok

    def macs(self, b: Batch, tags, check: bool = False):
        """AES-GMAC of each chunk of ``b.src`` with its AAD header as the AAD, nothing encrypted
        or copied: with ``aads`` (n, 0), ``AESGCM(keys[j]).encrypt(nonces[j], b"", chunk j)``
        (NIST SP 800-38D GMAC; the origin MACs of :mod:`seccomm.engine.origin`).  Writes chunk
        j's 16-byte tag to ``tags[j]`` (``tags``: (n, 16) uint8), or with ``check`` compares it
        with ``tags[j]`` and returns ``ok`` (n,) int32 on the device, 1 where they are equal
        (``b.dst``, ``b.dst_offs``: unused).  aes-256-gmac only; raises ValueError for another
        suite and TypeError/ValueError for a wrong dtype, shape or layout, before any launch."""
        if not self.gmac:
            raise ValueError(f"macs: the GMAC kernels (aes-256-gmac), not {self.suite}")
        b.check_macs(tags)
        n = b.n
        with self._on():
            ok = self.xp.zeros(n, self.xp.int32) if check else _NULL
            if n:
                segs = self._segments(b.lens, b.max_len, b.aads.shape[1])
                mac = self._mac_setup(b.keys, b.nonces, n, segs)
                self._pass(_MAC_CONCAT, b, segs, mac)
                self._finish(n, segs, b.aads, mac, b.lens, _NULL, _NULL, ok=ok, tags=tags)
            return ok if check else None

    # ---- launches ------------------------------------------------------------------------------
    def _on(self):
        """Run on this object's device and stream: allocations, fills and launches alike."""
        stack = contextlib.ExitStack()
        if self.device is not None:
            import cupy

            stack.enter_context(cupy.cuda.Device(self.device))
        if self.stream is not None:
            stack.enter_context(self.stream)
        return stack

    def _go(self, fn, blocks: int, args) -> None:
        fn((max(1, blocks),), (THREADS,), args, stream=self.stream)

    def _segments(self, lens, max_len, extra: int = 0) -> int:
        """Segments of the longest chunk.  ``max_len`` (host int) saves a device-to-host sync."""
        longest = int(lens.max()) if max_len is None else int(max_len)
        segs = max(1, -(-(longest + extra) // SEGMENT_BYTES))
        if lens.size * segs > 2**31 - 1:
            raise ValueError(
                f"{lens.size} chunks of up to {longest} bytes need {lens.size * segs} blocks, "
                "over CUDA's 2^31 - 1: split the batch"
            )
        return segs

    def _mac_setup(self, keys, nonces, n: int, segs: int) -> _Mac:
        """sc_mac_prep: the per-chunk MAC key powers, and scratch for the partial sums."""
        xp = self.xp
        pw = xp.empty(n * _PW_SLOTS * 8, xp.uint32)
        self._go(self._prep, -(-n // THREADS), (np.int32(self.code), keys, nonces, pw, np.int32(n)))
        return _Mac(pw, xp.empty(n * segs * 8, xp.uint32), xp.empty(n * 8, xp.uint32))

    def _verify(self, b: Batch, ok) -> None:
        """The MAC pass over the frames ``b.src`` and the tag check: ``ok[j]`` 1 where chunk j's
        tag verifies."""
        segs = self._segments(b.lens, b.max_len, b.aads.shape[1] if self.gmac else 0)
        mac = self._mac_setup(b.keys, b.nonces, b.n, segs)
        self._pass(_MAC_CONCAT if self.gmac else _MAC, b, segs, mac)
        self._finish(b.n, segs, b.aads, mac, b.lens, b.src, b.src_offs, ok=ok)

    def _pass(
        self, mode, b: Batch, segs, mac: _Mac, *, out=(_NULL, _NULL), ok=_NULL, keyed2=(_NULL, _NULL),
        own=(_NULL, _NULL), acc=_NULL, dtype=0,
    ):  # fmt: skip
        """sc_units_*: one block per (chunk, 16 KiB segment), reading ``b.src``; ``out``,
        ``own``: (buffer, offsets); ``keyed2``: (keys, nonces) of the hop's sealing side."""
        a = b.aads.shape[1] if b.aads is not _NULL else 0
        self._go(
            self._units,
            b.n * segs,
            (
                np.int32(mode), b.keys, b.nonces, keyed2[0], keyed2[1], b.aads, np.int32(a), np.int32(a),
                b.src, b.src_offs, own[0], own[1], out[0], out[1], acc, b.lens, ok,
                mac.pw, mac.parts, mac.tails, np.int32(dtype), np.int32(b.n), np.int32(segs),
            ),
        )  # fmt: skip

    def _finish(self, n, segs, aads, mac: _Mac, lens, frames, fr_offs, ok=_NULL, gate=_NULL, tags=_NULL):
        """sc_mac_finish: write tags (ok NULL) or set ok; chunks with gate[j] == 0 are skipped;
        ``tags`` given: chunk j's tag is ``tags[j]`` (not after its body in ``frames``)."""
        a = aads.shape[1]
        self._go(
            self._fin,
            -(-n // THREADS),
            (
                np.int32(self.code), np.int32(self.gmac), aads, np.int32(a), np.int32(a),
                mac.pw, mac.parts, mac.tails, lens, frames, fr_offs, tags, ok, gate, np.int32(n),
                np.int32(segs),
            ),
        )  # fmt: skip
