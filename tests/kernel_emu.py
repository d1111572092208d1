"""kernels/aead.cu compiled for the CPU (tests/cuda_emu.h) and loaded as a stand-in for the
``cupy.RawModule`` that ``seccomm.gpu.aead.GPUAEAD`` launches: the same launch code, grid sizes
and kernel source, on numpy arrays.  What it cannot show is speed, or faults a real device
would report (out-of-bounds accesses are caught by the tests' guard bytes instead)."""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np

KERNELS = Path(__file__).resolve().parents[1] / "kernels"
HERE = Path(__file__).resolve().parent


def kernel_names(source: str | None = None) -> list[str]:
    """The ``__global__`` functions of ``source`` (CUDA C++; default: seccomm's aead.cu)."""
    src = source if source is not None else (KERNELS / "aead.cu").read_text()
    return re.findall(r"__global__ void (?:__launch_bounds__\([^)]*\) )?(\w+)\(", src)


def build(outdir: Path, source: str | None = None) -> ctypes.CDLL:
    """Compile ``source`` (CUDA C++; default: seccomm's aead.cu) with tests/cuda_emu.h in ``outdir``."""
    cxx = shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    if cxx is None:
        raise RuntimeError("no C++ compiler (g++/c++/clang++) found")
    names = kernel_names(source)
    included = "aead.cu"
    if source is not None:
        included = "kernels.cu"
        (outdir / included).write_text(source)
    unit = outdir / "aead_emu.cpp"
    unit.write_text(
        f'#include "cuda_emu.h"\n#include "{included}"\n' + "".join(f"EMU_KERNEL({n})\n" for n in names)
    )
    lib = outdir / "libaead_emu.so"
    # -Wno-unknown-pragmas: `#pragma unroll` is nvcc's; g++ spells it `#pragma GCC unroll`
    out = subprocess.run(
        [
            cxx,
            "-std=c++17",
            "-O2",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-Wno-unused-parameter",
            "-Wno-unknown-pragmas",
            # a misaligned vector access (uint4 at an address not a multiple of 16) faults on a
            # GPU; here UBSan's alignment check stops the process instead of passing by luck (its
            # report goes to stderr: run pytest with -s to read it)
            "-fsanitize=alignment",
            "-fno-sanitize-recover=alignment",
            "-shared",
            "-fPIC",
            "-pthread",
            "-I",
            str(HERE),
            "-I",
            str(KERNELS),
            "-o",
            str(lib),
            str(unit),
        ],
        capture_output=True,
        text=True,
    )
    if out.returncode:
        raise RuntimeError(f"building the kernel emulator failed:\n{out.stderr[-4000:]}")
    return ctypes.CDLL(str(lib))


class _Kernel:
    def __init__(self, lib: ctypes.CDLL, name: str):
        self.name = name
        self._launch = getattr(lib, f"emu_launch_{name}")
        self._launch.restype = ctypes.c_int
        sig = getattr(lib, f"emu_sig_{name}")
        sig.restype = ctypes.c_char_p
        self.sizes = [int(x) for x in sig().decode().strip(",").split(",")]
        self._error = lib.emu_error
        self._error.restype = ctypes.c_char_p
        self.launches = 0

    def __call__(self, grid, block, args, stream=None, shared_mem=0):
        """``RawKernel.__call__``: arrays pass their data pointer, numpy scalars their value."""
        if len(grid) != 1 or len(block) != 1:
            raise ValueError(f"{self.name}: only 1-D launches are emulated")
        if len(args) != len(self.sizes):
            raise TypeError(f"{self.name}: {len(args)} arguments for {len(self.sizes)} parameters")
        keep, ptrs = [], (ctypes.c_void_p * len(args))()
        for i, (a, size) in enumerate(zip(args, self.sizes)):
            if isinstance(a, np.ndarray):
                if not a.flags.c_contiguous:
                    raise ValueError(f"{self.name}: argument {i} is not contiguous")
                v, n = ctypes.c_void_p(a.ctypes.data), 8
            elif isinstance(a, np.generic):
                v, n = np.ctypeslib.as_ctypes_type(a.dtype)(a.item()), a.dtype.itemsize
            else:  # CuPy passes a Python int as 64 bits: the kernel would read the wrong width
                raise TypeError(f"{self.name}: argument {i} is {type(a).__name__}; pass a numpy scalar")
            if n != size:
                raise TypeError(f"{self.name}: argument {i} has {n} bytes, the kernel takes {size}")
            keep.append(v)
            ptrs[i] = ctypes.cast(ctypes.pointer(v), ctypes.c_void_p)
        self.launches += 1
        if self._launch(int(grid[0]), int(block[0]), ptrs):
            raise RuntimeError(f"{self.name}: {self._error().decode()}")


class _Host:
    """The few array-module calls GPUAEAD makes, on numpy."""

    uint8, int32, int64, uint32 = np.uint8, np.int32, np.int64, np.uint32
    empty, zeros = staticmethod(np.empty), staticmethod(np.zeros)

    @staticmethod
    def asnumpy(a):
        return np.asarray(a)


class EmulatedModule:
    """``get_function(name)`` like ``cupy.RawModule``; ``xp`` is the array module to allocate with."""

    xp = _Host

    def __init__(self, lib: ctypes.CDLL, source: str | None = None):
        self._kernels = {n: _Kernel(lib, n) for n in kernel_names(source)}

    def get_function(self, name: str) -> _Kernel:
        return self._kernels[name]
