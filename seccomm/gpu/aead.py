"""Batched seal/open/fused-hop of many chunks per launch on CuPy arrays, with exactly the frames
of the CPU suites (a chunk sealed here opens with ``cryptography`` and vice versa).

Per batch of n chunks (CuPy arrays on one device): ``keys`` (n, 32) uint8, ``nonces`` (n, 12)
uint8, ``aads`` (n, A) uint8 (the 89-byte AAD headers built by the host framing), byte buffers with
int64 offset/length arrays.  Scalars go to kernels as numpy scalars of the kernel's exact types
(CuPy passes Python ints as 64-bit).  Open returns ``ok`` (n,) int32; a chunk whose tag fails is
not written at all.
"""

from __future__ import annotations

import numpy as np

from .kernels import get_module

SUITE_CODES = {"chacha20-poly1305": 0, "aes-256-gcm": 1, "aes-256-gmac": 1}
DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2}
_THREADS = 256


def _grid(total: int) -> tuple[int]:
    return (max(1, (total + _THREADS - 1) // _THREADS),)


class GPUAEAD:
    """One suite on one device.  ``stream``: CuPy stream to launch on (default: current)."""

    def __init__(self, suite: str, device: int | None = None, stream=None):
        if suite not in SUITE_CODES:
            raise ValueError(f"no GPU kernels for suite {suite!r}; allowed: {', '.join(SUITE_CODES)}")
        self.suite, self.code, self.gmac = suite, SUITE_CODES[suite], suite == "aes-256-gmac"
        self.mod = get_module(device)
        self.stream = stream
        block = 64 if self.code == 0 else 16
        self._block = block
        prefix = "sc_chacha" if self.code == 0 else "sc_gcm"
        self._xor = self.mod.get_function(f"{prefix}_xor")
        self._tag = self.mod.get_function("sc_chacha_tag" if self.code == 0 else "sc_gcm_tag_k")
        self._hop = self.mod.get_function("sc_fused_hop_xor")

    def _blocks(self, lens) -> int:
        return int((int(lens.max()) + self._block - 1) // self._block) if lens.size else 0

    def _tag_args(self, keys, nonces, aads, frames, fr_offs, lens, tags_out, ok):
        import cupy

        n = np.int32(lens.size)
        args = [keys, nonces, aads, np.int32(aads.shape[1]), np.int32(aads.shape[1]), frames, fr_offs,
                lens, tags_out if tags_out is not None else cupy.empty(0, cupy.uint8),
                ok if ok is not None else _null(), n]
        if self.code == 1:
            args.append(np.int32(self.gmac))
        return tuple(args)

    def seal(self, keys, nonces, aads, src, src_offs, lens, frames, fr_offs) -> None:
        """Write the frame (body || tag) of every chunk of ``src`` into ``frames``."""
        n = lens.size
        if n == 0:
            return
        if self.gmac:  # payload in the clear: copy bodies, then GMAC over header || body
            so, fo, ln = (_host(a) for a in (src_offs, fr_offs, lens))
            for j in range(n):
                frames[fo[j]:fo[j] + ln[j]] = src[so[j]:so[j] + ln[j]]
        elif self._blocks(lens):  # no launch when every chunk is empty
            mb = self._blocks(lens)
            self._xor(_grid(n * mb), (_THREADS,), (keys, nonces, src, frames, src_offs, fr_offs, lens,
                                                    _null(), np.int32(n), np.int64(mb)), stream=self.stream)
        self._tag(_grid(n), (_THREADS,), self._tag_args(keys, nonces, aads, frames, fr_offs, lens,
                                                        frames, None), stream=self.stream)

    def open(self, keys, nonces, aads, frames, fr_offs, lens, out, out_offs):
        """Verify every frame; decrypt (or copy, for GMAC) only the verified ones into ``out``.
        Returns ``ok`` (n,) int32 on the device."""
        import cupy

        n = lens.size
        ok = cupy.zeros(n, cupy.int32)
        if n == 0:
            return ok
        self._tag(_grid(n), (_THREADS,), self._tag_args(keys, nonces, aads, frames, fr_offs, lens, None, ok),
                  stream=self.stream)
        if self.gmac:
            fo, oo, ln = (_host(a) for a in (fr_offs, out_offs, lens))
            for j in np.flatnonzero(cupy.asnumpy(ok)):
                out[oo[j]:oo[j] + ln[j]] = frames[fo[j]:fo[j] + ln[j]]
        elif self._blocks(lens):
            mb = self._blocks(lens)
            self._xor(_grid(n * mb), (_THREADS,), (keys, nonces, frames, out, fr_offs, out_offs, lens, ok,
                                                    np.int32(n), np.int64(mb)), stream=self.stream)
        return ok

    def fused_hop(self, keys_in, nonces_in, aads_in, frames_in, in_offs, own, own_offs, keys_out,
                  nonces_out, aads_out, frames_out, out_offs, lens, dtype: str, acc=None):
        """Ring reduce-scatter hop: open ``frames_in``, add ``own``, seal into ``frames_out`` (and
        the plaintext sum into ``acc`` if given) in one pass; unverified chunks write nothing.
        Returns ``ok``.  ChaCha20-Poly1305 and AES-256-GCM (not GMAC)."""
        import cupy

        if self.gmac:
            raise ValueError("the fused hop encrypts: use aes-256-gcm or chacha20-poly1305")
        n = lens.size
        ok = cupy.zeros(n, cupy.int32)
        if n == 0:
            return ok
        self._tag(_grid(n), (_THREADS,), self._tag_args(keys_in, nonces_in, aads_in, frames_in, in_offs,
                                                        lens, None, ok), stream=self.stream)
        mb = self._blocks(lens)
        if mb:
            self._hop(_grid(n * mb), (_THREADS,),
                      (np.int32(self.code), keys_in, nonces_in, keys_out, nonces_out, frames_in, in_offs,
                       own, own_offs, frames_out, out_offs, acc if acc is not None else _null(), lens, ok,
                       np.int32(DTYPE_CODES[dtype]), np.int32(n), np.int64(mb)),
                      stream=self.stream)
        self._tag(_grid(n), (_THREADS,), self._tag_args(keys_out, nonces_out, aads_out, frames_out, out_offs,
                                                        lens, frames_out, None), stream=self.stream)
        return ok


def _host(a):
    import cupy

    return cupy.asnumpy(a).astype(np.int64)


def _null():
    """A NULL device pointer argument."""
    return np.uint64(0)
