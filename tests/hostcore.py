"""Build kernels/host_shim.c (the GPU AEAD core compiled for the host) with the system C compiler
and expose seal/open through ctypes, with the same signatures as the `cryptography` AEADs."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

import numpy as np

KERNELS = Path(__file__).resolve().parents[1] / "kernels"


def build(outdir: Path) -> ctypes.CDLL:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise RuntimeError("no C compiler (cc/gcc/clang) found")
    lib = outdir / "libsc_host.so"
    subprocess.run(
        [
            cc,
            "-O2",
            "-std=c99",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-shared",
            "-fPIC",
            "-I",
            str(KERNELS),
            "-o",
            str(lib),
            str(KERNELS / "host_shim.c"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return ctypes.CDLL(str(lib))


#: raw Poly1305 (RFC 8439 §2.5) over sc_crypto.cuh's state: a test entry point, not in the product
POLY_SHIM = r"""
#include "sc_crypto.cuh"
void sc_host_poly1305(const uint8_t key[32], const uint8_t *m, size_t len, uint8_t tag[16]) {
    sc_poly1305 st;
    sc_poly1305_init(&st, key);
    size_t i = 0;
    for (; i + 16 <= len; i += 16) sc_poly1305_block(&st, m + i, 1u << 24);
    if (i < len) {  /* the last partial block: a 1 byte after it, no 2^128 bit */
        uint8_t b[16] = {0};
        for (size_t j = 0; j < len - i; j++) b[j] = m[i + j];
        b[len - i] = 1;
        sc_poly1305_block(&st, b, 0);
    }
    sc_poly1305_finish(&st, tag);
}
"""


def build_poly1305(outdir: Path, header: str | None = None):
    """``tag(key, msg) -> 16 bytes``: raw Poly1305 of sc_crypto.cuh (or of ``header``, a mutated
    copy of its text) compiled for the host."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise RuntimeError("no C compiler (cc/gcc/clang) found")
    inc = KERNELS
    if header is not None:
        inc = outdir / "include"
        inc.mkdir(exist_ok=True)
        (inc / "sc_crypto.cuh").write_text(header)
    (outdir / "poly_shim.c").write_text(POLY_SHIM)
    lib = outdir / "libsc_poly.so"
    subprocess.run(
        [cc, "-O2", "-std=c99", "-Wall", "-Werror", "-shared", "-fPIC", "-I", str(inc), "-o", str(lib),
         str(outdir / "poly_shim.c")],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    so = ctypes.CDLL(str(lib))

    def tag(key: bytes, msg: bytes) -> bytes:
        out = ctypes.create_string_buffer(16)
        so.sc_host_poly1305(key, msg, ctypes.c_size_t(len(msg)), out)
        return out.raw

    return tag


class HostAEAD:
    """``seal(key, nonce, aad, pt) -> ct || tag``; ``open(key, nonce, aad, ct||tag) -> pt | None``."""

    def __init__(self, lib: ctypes.CDLL, name: str):
        self._seal = getattr(lib, f"sc_host_{name}_seal")
        self._open = getattr(lib, f"sc_host_{name}_open")
        self._open.restype = ctypes.c_int

    def seal(self, key: bytes, nonce: bytes, aad: bytes, pt: bytes) -> bytes:
        ct = ctypes.create_string_buffer(max(len(pt), 1))
        tag = ctypes.create_string_buffer(16)
        self._seal(key, nonce, aad, ctypes.c_size_t(len(aad)), pt, ctypes.c_size_t(len(pt)), ct, tag)
        return ct.raw[: len(pt)] + tag.raw

    def open(self, key: bytes, nonce: bytes, aad: bytes, frame: bytes):
        ct, tag = frame[:-16], frame[-16:]
        sentinel = b"\xa5" * max(len(ct), 1)
        pt = ctypes.create_string_buffer(sentinel, len(sentinel))
        rc = self._open(key, nonce, aad, ctypes.c_size_t(len(aad)), ct, ctypes.c_size_t(len(ct)), tag, pt)
        if rc != 0:
            assert pt.raw == sentinel, "open wrote plaintext before the tag verified"
            return None
        return pt.raw[: len(ct)]


class BatchAEAD:
    """The batch API of ``seccomm.gpu.aead.GPUAEAD`` (seal/open of a ``Batch`` of n chunks, the
    fused ``Hop``) over numpy arrays, one host-core call per chunk: what the kernels
    compute, on the CPU, so the device engine runs here."""

    def __init__(self, lib: ctypes.CDLL, suite: str):
        self.gmac = suite == "aes-256-gmac"
        name = "chacha" if suite == "chacha20-poly1305" else "gcm"
        self.code = 0 if name == "chacha" else 1  # the kernels' suite code
        self._seal = getattr(lib, f"sc_host_{name}_seal")
        self._open = getattr(lib, f"sc_host_{name}_open")
        self._open.restype = ctypes.c_int
        self._gmac = lib.sc_host_gmac
        self._hop = lib.sc_host_fused_hop
        self._hop.restype = ctypes.c_int

    @staticmethod
    def _p(a, off=0):
        return ctypes.c_void_p(a.ctypes.data + int(off))

    def seal(self, b):
        keys, nonces, aads, src, src_offs, lens = b.keys, b.nonces, b.aads, b.src, b.src_offs, b.lens
        frames, fr_offs = b.dst, b.dst_offs
        for j in range(lens.size):
            n, so, fo = int(lens[j]), int(src_offs[j]), int(fr_offs[j])
            k, iv, a = self._p(keys[j]), self._p(nonces[j]), self._p(aads[j])
            if self.gmac:  # body in the clear, tag over header || body
                frames[fo : fo + n] = src[so : so + n]
                self._gmac(
                    k,
                    iv,
                    a,
                    ctypes.c_size_t(aads.shape[1]),
                    self._p(src, so),
                    ctypes.c_size_t(n),
                    self._p(frames, fo + n),
                )
            else:
                self._seal(
                    k,
                    iv,
                    a,
                    ctypes.c_size_t(aads.shape[1]),
                    self._p(src, so),
                    ctypes.c_size_t(n),
                    self._p(frames, fo),
                    self._p(frames, fo + n),
                )

    def open(self, b):
        keys, nonces, aads, frames, fr_offs, lens = b.keys, b.nonces, b.aads, b.src, b.src_offs, b.lens
        out, out_offs = b.dst, b.dst_offs
        ok = np.zeros(lens.size, np.int32)
        for j in range(lens.size):
            n, fo, oo = int(lens[j]), int(fr_offs[j]), int(out_offs[j])
            k, iv, a = self._p(keys[j]), self._p(nonces[j]), self._p(aads[j])
            if self.gmac:
                tag = np.empty(16, np.uint8)
                self._gmac(
                    k,
                    iv,
                    a,
                    ctypes.c_size_t(aads.shape[1]),
                    self._p(frames, fo),
                    ctypes.c_size_t(n),
                    self._p(tag),
                )
                if bytes(tag) == bytes(frames[fo + n : fo + n + 16]):
                    out[oo : oo + n] = frames[fo : fo + n]
                    ok[j] = 1
            else:
                rc = self._open(
                    k,
                    iv,
                    a,
                    ctypes.c_size_t(aads.shape[1]),
                    self._p(frames, fo),
                    ctypes.c_size_t(n),
                    self._p(frames, fo + n),
                    self._p(out, oo),
                )
                ok[j] = rc == 0
        return ok

    def macs(self, b, tags, check=False):
        """:meth:`seccomm.gpu.aead.GPUAEAD.macs` on the host core: the GMAC of each chunk (its
        arguments checked as the kernels' are)."""
        b.check_macs(tags)
        ok = np.zeros(b.lens.size, np.int32)
        for j in range(b.lens.size):
            tag = np.empty(16, np.uint8)
            self._gmac(
                self._p(b.keys[j]),
                self._p(b.nonces[j]),
                self._p(b.aads[j]),
                ctypes.c_size_t(b.aads.shape[1]),
                self._p(b.src, b.src_offs[j]),
                ctypes.c_size_t(int(b.lens[j])),
                self._p(tag),
            )
            if check:
                ok[j] = bytes(tag) == bytes(tags[j])
            else:
                tags[j] = tag
        return ok if check else None

    def fused_hop(self, h):
        keys_in, nonces_in, aads_in = h.keys_in, h.nonces_in, h.aads_in
        frames_in, in_offs = h.frames_in, h.in_offs
        own, own_offs, lens, dtype, acc = h.own, h.own_offs, h.lens, h.dtype, h.acc
        keys_out, nonces_out, aads_out, frames_out, out_offs = (
            h.keys_out, h.nonces_out, h.aads_out, h.frames_out, h.out_offs,
        )  # fmt: skip
        code = {"float32": 0, "float16": 1, "bfloat16": 2}[dtype]
        suite = self.code
        ok = np.zeros(lens.size, np.int32)
        hop = self._hop
        for j in range(lens.size):
            n = int(lens[j])
            rc = hop(
                suite,
                self._p(keys_in[j]),
                self._p(nonces_in[j]),
                self._p(aads_in[j]),
                self._p(frames_in, in_offs[j]),
                ctypes.c_longlong(n),
                self._p(own, own_offs[j]),
                code,
                self._p(keys_out[j]),
                self._p(nonces_out[j]),
                self._p(aads_out[j]),
                ctypes.c_size_t(aads_in.shape[1]),
                self._p(frames_out, out_offs[j]),
                None if acc is None else self._p(acc, own_offs[j]),
            )
            ok[j] = rc == 0
        return ok


class HostBackend:
    """A device-engine backend (``SecureComm(device_backend=...)``) over numpy and the host
    build of the kernel core, for running ``seccomm.gpu.engine`` without a GPU."""

    def __init__(self, lib: ctypes.CDLL):
        self.xp, self.lib, self._aeads = np, lib, {}

    def aead(self, suite):
        if suite not in self._aeads:
            self._aeads[suite] = BatchAEAD(self.lib, suite)
        return self._aeads[suite]

    def asarray(self, host):
        return np.asarray(host)

    def to_host(self, a):
        return np.asarray(a)

    def span(self, views):
        addrs = [v.__array_interface__["data"][0] for v in views]
        lo = min(addrs)
        hi = max(a + v.nbytes for a, v in zip(addrs, views))
        buf = np.ctypeslib.as_array((ctypes.c_uint8 * max(hi - lo, 1)).from_address(lo))[: hi - lo]
        return buf, np.array([a - lo for a in addrs], np.int64)
