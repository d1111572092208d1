"""Build kernels/host_shim.c (the GPU AEAD core compiled for the host) with the system C compiler
and expose seal/open through ctypes, with the same signatures as the `cryptography` AEADs."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
from pathlib import Path

KERNELS = Path(__file__).resolve().parents[1] / "kernels"


def build(outdir: Path) -> ctypes.CDLL:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        raise RuntimeError("no C compiler (cc/gcc/clang) found")
    lib = outdir / "libsc_host.so"
    subprocess.run([cc, "-O2", "-std=c99", "-Wall", "-Wextra", "-Werror", "-shared", "-fPIC",
                    "-I", str(KERNELS), "-o", str(lib), str(KERNELS / "host_shim.c")],
                   check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(lib))


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
        return ct.raw[:len(pt)] + tag.raw

    def open(self, key: bytes, nonce: bytes, aad: bytes, frame: bytes):
        ct, tag = frame[:-16], frame[-16:]
        sentinel = b"\xa5" * max(len(ct), 1)
        pt = ctypes.create_string_buffer(sentinel, len(sentinel))
        rc = self._open(key, nonce, aad, ctypes.c_size_t(len(aad)), ct, ctypes.c_size_t(len(ct)), tag, pt)
        if rc != 0:
            assert pt.raw == sentinel, "open wrote plaintext before the tag verified"
            return None
        return pt.raw[:len(ct)]
