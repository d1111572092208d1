"""Batched seal/open/fused-hop of many chunks per launch on CuPy arrays, with exactly the frames
of the CPU suites (a chunk sealed here opens with ``cryptography`` and vice versa).

Per batch of n chunks (arrays on one device): ``keys`` (n, 32) uint8, ``nonces`` (n, 12) uint8,
``aads`` (n, A) uint8 (the 89-byte AAD headers built by the host framing), byte buffers with
int64 offset/length arrays (n,).  Scalars go to kernels as numpy scalars of the kernel's exact
types (CuPy passes Python ints as 64-bit).  Open returns ``ok`` (n,) int32; a chunk whose tag
fails is not written at all.  The kernels and their launch sequence are described in
``kernels/aead.cu`` and ``docs/gpu.md``.
"""

from __future__ import annotations

import contextlib

import numpy as np

from .kernels import get_module

SUITE_CODES = {"chacha20-poly1305": 0, "aes-256-gcm": 1, "aes-256-gmac": 1}
DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2}
THREADS = 256  # SC_T in kernels/aead.cu: threads per block, one 64-byte unit each
SEGMENT_BYTES = 64 * THREADS  # SC_SEG: bytes of a chunk per block
_PW_SLOTS = 10  # SC_PW: per-chunk MAC powers from sc_mac_prep, 8 words each
_SEAL, _OPEN, _MAC, _MAC_CONCAT, _HOP, _COPY = range(6)
_NULL = np.uint64(0)  # a NULL device pointer argument


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

    # ---- checks and launches -------------------------------------------------------------------
    def _on(self):
        """Run on this object's device and stream: allocations, fills and launches alike."""
        stack = contextlib.ExitStack()
        if self.device is not None:
            import cupy

            stack.enter_context(cupy.cuda.Device(self.device))
        if self.stream is not None:
            stack.enter_context(self.stream)
        return stack

    @staticmethod
    def _check(n, keys, nonces, aads, **arrays):
        """Shapes, dtypes and contiguity, on the host (no sync): a wrong one would make the
        kernels read or write out of bounds.  Raises TypeError or ValueError naming the argument."""

        def need(name, a, dtype, shape=None, ndim=None):
            if a.dtype != np.dtype(dtype):
                raise TypeError(f"{name}: dtype {a.dtype}, the kernels take {np.dtype(dtype).name}")
            if shape is not None and tuple(a.shape) != shape:
                raise ValueError(f"{name}: shape {tuple(a.shape)}, expected {shape}")
            if ndim is not None and a.ndim != ndim:
                raise ValueError(f"{name}: {a.ndim}-D, expected {ndim}-D")
            if not a.flags.c_contiguous:
                raise ValueError(f"{name}: not C-contiguous (the kernels index it by row stride)")

        need("keys", keys, np.uint8, (n, 32))
        need("nonces", nonces, np.uint8, (n, 12))
        need("aads", aads, np.uint8, ndim=2)
        if aads.shape[0] != n:
            raise ValueError(f"aads: {aads.shape[0]} rows for {n} chunks")
        for name, a in arrays.items():
            if name.endswith("offs") or name == "lens":
                need(name, a, np.int64, (n,))
            else:
                need(name, a, np.uint8, ndim=1)

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

    def _mac_setup(self, keys, nonces, n: int):
        """sc_mac_prep: the per-chunk MAC key powers."""
        pw = self.xp.empty(n * _PW_SLOTS * 8, self.xp.uint32)
        self._go(self._prep, -(-n // THREADS), (np.int32(self.code), keys, nonces, pw, np.int32(n)))
        return pw

    def _scratch(self, n: int, segs: int):
        return self.xp.empty(n * segs * 8, self.xp.uint32), self.xp.empty(n * 8, self.xp.uint32)

    def _pass(
        self,
        mode,
        n,
        segs,
        keys,
        nonces,
        aads,
        src,
        src_offs,
        lens,
        pw,
        parts,
        tails,
        *,
        out=_NULL,
        out_offs=_NULL,
        ok=_NULL,
        keys2=_NULL,
        nonces2=_NULL,
        own=_NULL,
        own_offs=_NULL,
        acc=_NULL,
        dtype=0,
    ):
        """sc_units_*: one block per (chunk, 16 KiB segment)."""
        a = aads.shape[1] if aads is not _NULL else 0
        self._go(
            self._units,
            n * segs,
            (
                np.int32(mode),
                keys,
                nonces,
                keys2,
                nonces2,
                aads,
                np.int32(a),
                np.int32(a),
                src,
                src_offs,
                own,
                own_offs,
                out,
                out_offs,
                acc,
                lens,
                ok,
                pw,
                parts,
                tails,
                np.int32(dtype),
                np.int32(n),
                np.int32(segs),
            ),
        )

    def _finish(self, n, segs, aads, pw, parts, tails, lens, frames, fr_offs, ok=_NULL, gate=_NULL):
        """sc_mac_finish: write tags (ok NULL) or set ok; chunks with gate[j] == 0 are skipped."""
        a = aads.shape[1]
        self._go(
            self._fin,
            -(-n // THREADS),
            (
                np.int32(self.code),
                np.int32(self.gmac),
                aads,
                np.int32(a),
                np.int32(a),
                pw,
                parts,
                tails,
                lens,
                frames,
                fr_offs,
                ok,
                gate,
                np.int32(n),
                np.int32(segs),
            ),
        )

    # ---- API -----------------------------------------------------------------------------------
    def seal(self, keys, nonces, aads, src, src_offs, lens, frames, fr_offs, max_len=None) -> None:
        """Write the frame (body || tag) of every chunk of ``src`` into ``frames``.  ``max_len``:
        the longest chunk in bytes if the caller knows it (else read from ``lens``: a sync).  A
        chunk longer than ``max_len`` allows gets an all-zero tag, which never verifies (open
        reports it with ``ok`` 0 the same way).  Raises TypeError/ValueError for a wrong dtype,
        shape or layout, before any launch."""
        n = lens.size
        self._check(
            n, keys, nonces, aads, src=src, src_offs=src_offs, lens=lens, frames=frames, fr_offs=fr_offs
        )
        if n == 0:
            return
        with self._on():
            self._seal(keys, nonces, aads, src, src_offs, lens, frames, fr_offs, max_len)

    def _seal(self, keys, nonces, aads, src, src_offs, lens, frames, fr_offs, max_len):
        n = lens.size
        segs = self._segments(lens, max_len, aads.shape[1] if self.gmac else 0)
        pw = self._mac_setup(keys, nonces, n)
        parts, tails = self._scratch(n, segs)
        if self.gmac:  # body in the clear; GMAC over header || body
            self._pass(
                _COPY,
                n,
                segs,
                keys,
                nonces,
                aads,
                src,
                src_offs,
                lens,
                pw,
                parts,
                tails,
                out=frames,
                out_offs=fr_offs,
            )
            self._pass(_MAC_CONCAT, n, segs, keys, nonces, aads, src, src_offs, lens, pw, parts, tails)
        else:
            self._pass(
                _SEAL,
                n,
                segs,
                keys,
                nonces,
                aads,
                src,
                src_offs,
                lens,
                pw,
                parts,
                tails,
                out=frames,
                out_offs=fr_offs,
            )
        self._finish(n, segs, aads, pw, parts, tails, lens, frames, fr_offs)

    def open(self, keys, nonces, aads, frames, fr_offs, lens, out, out_offs, max_len=None):
        """Verify every frame; decrypt (or copy, for GMAC) only the verified ones into ``out``.
        Returns ``ok`` (n,) int32 on the device."""
        n = lens.size
        self._check(
            n, keys, nonces, aads, frames=frames, fr_offs=fr_offs, lens=lens, out=out, out_offs=out_offs
        )
        with self._on():
            ok = self.xp.zeros(n, self.xp.int32)
            if n == 0:
                return ok
            self._verify(keys, nonces, aads, frames, fr_offs, lens, ok, max_len)
            segs = self._segments(lens, max_len)
            self._pass(
                _COPY if self.gmac else _OPEN,
                n,
                segs,
                keys,
                nonces,
                aads,
                frames,
                fr_offs,
                lens,
                _NULL,
                _NULL,
                _NULL,
                out=out,
                out_offs=out_offs,
                ok=ok,
            )
            return ok

    def _verify(self, keys, nonces, aads, frames, fr_offs, lens, ok, max_len):
        n = lens.size
        segs = self._segments(lens, max_len, aads.shape[1] if self.gmac else 0)
        pw = self._mac_setup(keys, nonces, n)
        parts, tails = self._scratch(n, segs)
        self._pass(
            _MAC_CONCAT if self.gmac else _MAC,
            n,
            segs,
            keys,
            nonces,
            aads,
            frames,
            fr_offs,
            lens,
            pw,
            parts,
            tails,
        )
        self._finish(n, segs, aads, pw, parts, tails, lens, frames, fr_offs, ok=ok)
        return ok

    def fused_hop(
        self,
        keys_in,
        nonces_in,
        aads_in,
        frames_in,
        in_offs,
        own,
        own_offs,
        keys_out,
        nonces_out,
        aads_out,
        frames_out,
        out_offs,
        lens,
        dtype: str,
        acc=None,
        max_len=None,
    ):
        """Ring reduce-scatter hop: open ``frames_in``, add ``own``, seal into ``frames_out`` (and
        the plaintext sum into ``acc``, laid out like ``own``, if given) in one pass; unverified
        chunks write nothing.  Returns ``ok``.  ChaCha20-Poly1305 and AES-256-GCM (not GMAC).
        The sum is numpy's on x86 bit for bit (float32 arithmetic, one rounding, subnormals kept),
        also on a GPU whose compiler flushes subnormals; a NaN result is NaN, with SSE's payload
        rule (numpy's float16 loop picks the other operand's payload)."""
        if self.gmac:
            raise ValueError("the fused hop encrypts: use aes-256-gcm or chacha20-poly1305")
        if dtype not in DTYPE_CODES:
            raise ValueError(f"the fused hop adds {', '.join(DTYPE_CODES)}, not {dtype!r}")
        n = lens.size
        self._check(
            n,
            keys_in,
            nonces_in,
            aads_in,
            frames_in=frames_in,
            in_offs=in_offs,
            own=own,
            own_offs=own_offs,
            frames_out=frames_out,
            out_offs=out_offs,
            lens=lens,
        )
        self._check(n, keys_out, nonces_out, aads_out, **({} if acc is None else {"acc": acc}))
        with self._on():
            return self._hop(
                keys_in,
                nonces_in,
                aads_in,
                frames_in,
                in_offs,
                own,
                own_offs,
                keys_out,
                nonces_out,
                aads_out,
                frames_out,
                out_offs,
                lens,
                dtype,
                acc,
                max_len,
            )

    def _hop(
        self,
        keys_in,
        nonces_in,
        aads_in,
        frames_in,
        in_offs,
        own,
        own_offs,
        keys_out,
        nonces_out,
        aads_out,
        frames_out,
        out_offs,
        lens,
        dtype,
        acc,
        max_len,
    ):
        n = lens.size
        ok = self.xp.zeros(n, self.xp.int32)
        if n == 0:
            return ok
        self._verify(keys_in, nonces_in, aads_in, frames_in, in_offs, lens, ok, max_len)
        segs = self._segments(lens, max_len)
        pw = self._mac_setup(keys_out, nonces_out, n)
        parts, tails = self._scratch(n, segs)
        self._pass(
            _HOP,
            n,
            segs,
            keys_in,
            nonces_in,
            aads_out,
            frames_in,
            in_offs,
            lens,
            pw,
            parts,
            tails,
            out=frames_out,
            out_offs=out_offs,
            ok=ok,
            keys2=keys_out,
            nonces2=nonces_out,
            own=own,
            own_offs=own_offs,
            acc=acc if acc is not None else _NULL,
            dtype=DTYPE_CODES[dtype],
        )
        self._finish(n, segs, aads_out, pw, parts, tails, lens, frames_out, out_offs, gate=ok)
        return ok
