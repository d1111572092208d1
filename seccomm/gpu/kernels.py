"""Find, compile (NVRTC via CuPy) and cache the kernel module, once per device."""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

#: the CUDA sources: the checkout's ``kernels/`` folder, installed as the package data of
#: ``seccomm.kernels`` (pyproject.toml maps it), so editable and regular installs find them
#: alike; ``SECCOMM_KERNELS_DIR`` points elsewhere (kernel work)
KERNELS_DIR = Path(os.environ.get("SECCOMM_KERNELS_DIR") or str(files("seccomm.kernels")))
_MODULES: dict = {}


def available() -> bool:
    """True when CuPy imports and finds at least one CUDA device (never raises)."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001 - no CuPy, no driver, no device: all mean "no"
        return False


def get_module(device: int | None = None):
    """The compiled ``cupy.RawModule`` of kernels/aead.cu for ``device`` (default: current).

    Compiled on first use per device (CuPy also caches the binary on disk); kernel names are
    ``extern "C"``.  Raises ``RuntimeError`` when CuPy or a device is missing.
    """
    try:
        import cupy
    except ImportError:
        raise RuntimeError("the GPU path needs CuPy: pip install -e '.[gpu]'") from None
    dev = cupy.cuda.Device(device) if device is not None else cupy.cuda.Device()
    mod = _MODULES.get(dev.id)
    if mod is None:
        with dev:
            mod = cupy.RawModule(code=module_source(), options=NVRTC_OPTIONS)
        _MODULES[dev.id] = mod
    return mod


#: NVRTC options of the module (CuPy adds the device's -arch)
NVRTC_OPTIONS = ("--std=c++17",)


def module_source() -> str:
    """aead.cu with sc_crypto.cuh pasted in place of its #include (:data:`KERNELS_DIR`): what NVRTC
    compiles.  Pasted because CuPy's kernel cache keys on the source text, so an edit of the
    header must change it (an -I include would reuse a stale cubin)."""
    header = (KERNELS_DIR / "sc_crypto.cuh").read_text()
    return (KERNELS_DIR / "aead.cu").read_text().replace('#include "sc_crypto.cuh"', header, 1)
