"""GPU path: our own AEAD kernels (kernels/aead.cu in the checkout), compiled lazily with CuPy ``RawModule``.

``import seccomm.gpu`` needs neither CuPy nor a GPU; :func:`available` says whether one is usable.
"""

from .kernels import KERNELS_DIR, available, get_module
from .aead import SUITE_CODES, GPUAEAD, Batch, Hop

__all__ = ["KERNELS_DIR", "available", "get_module", "SUITE_CODES", "GPUAEAD", "Batch", "Hop"]
