"""Supported element types and reduction operators.

bfloat16 comes from ``ml_dtypes`` (numpy has none).  Reductions run in the element type itself,
as MPI does (float16 and bfloat16 sums round after every addition); ``avg`` is the sum divided by
the world size, allowed for floating-point types only.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

#: name -> (numpy dtype, wire code bound into the AAD)
DTYPES = {
    "float16": (np.dtype(np.float16), 1),
    "bfloat16": (np.dtype(ml_dtypes.bfloat16), 2),
    "float32": (np.dtype(np.float32), 3),
    "float64": (np.dtype(np.float64), 4),
    "uint8": (np.dtype(np.uint8), 5),
    "int32": (np.dtype(np.int32), 6),
    "int64": (np.dtype(np.int64), 7),
}
FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")
_BY_DTYPE = {dt: name for name, (dt, _code) in DTYPES.items()}

#: op name -> numpy ufunc (``avg`` reduces with ``add`` and divides by the world size)
OPS = {
    "sum": np.add,
    "avg": np.add,
    "max": np.maximum,
    "min": np.minimum,
    "prod": np.multiply,
}


def dtype_name(dt) -> str:
    """Return the seccomm name of numpy dtype ``dt``; ``TypeError`` listing the allowed ones."""
    dt = np.dtype(dt)
    name = _BY_DTYPE.get(dt) if dt.isnative else None
    if name is None:
        raise TypeError(f"unsupported dtype {dt}; allowed: {', '.join(DTYPES)}")
    return name


def dtype_code(name: str) -> int:
    return DTYPES[name][1]


def resolve_dtype(name_or_dtype) -> np.dtype:
    """Map a name (``"bfloat16"``) or numpy dtype to the numpy dtype; ``TypeError`` if unsupported."""
    if isinstance(name_or_dtype, str) and name_or_dtype in DTYPES:
        return DTYPES[name_or_dtype][0]
    try:
        dt = np.dtype(name_or_dtype)
    except TypeError:
        raise TypeError(f"unsupported dtype {name_or_dtype!r}; allowed: {', '.join(DTYPES)}") from None
    dtype_name(dt)
    return dt


def check_op(op: str, dt: np.dtype) -> np.ufunc:
    """Return the ufunc for ``op``; ``ValueError`` naming the allowed ops for this dtype."""
    if not isinstance(op, str) or op not in OPS:  # (an unhashable op is not a dict key either)
        raise ValueError(f"unknown op {op!r}; allowed: {', '.join(OPS)}")
    if op == "avg" and dtype_name(dt) not in FLOAT_NAMES:
        raise ValueError(f"op 'avg' needs a floating-point dtype ({', '.join(FLOAT_NAMES)}), got {dt}")
    return OPS[op]


def typed(buf, dtype):
    """``buf`` (bytes-like, or a uint8 numpy/CuPy array) seen as ``dtype`` elements, no copy."""
    if isinstance(buf, (memoryview, bytes, bytearray)):
        return np.frombuffer(buf, dtype)
    return buf.view(dtype)


def as_bytes(arr: np.ndarray) -> np.ndarray:
    """A flat uint8 view of a C-contiguous array (no copy)."""
    return arr.reshape(-1).view(np.uint8)


def flat(arr):
    """A 1-D view (no copy) of a contiguous array in its memory order: C order, or Fortran order
    for an array that is only Fortran-contiguous; what MPI sees of the buffer."""
    return (arr if arr.flags.c_contiguous else arr.T).reshape(-1)


def check_buffer(arr, what: str, device: bool = False) -> str:
    """Validate a user buffer before any traffic and return its dtype name.

    ``device``: ``arr`` is an array of the device engine's array module (CuPy), not numpy.
    A host buffer may be C- or Fortran-contiguous: seccomm, like MPI, moves its memory in the
    order it is laid out (:func:`flat`).  Raises ``TypeError`` for a non-numpy object or an
    unsupported dtype and ``ValueError`` for a non-contiguous buffer, or a device buffer that is
    not C-contiguous (the device engine takes C order only).
    """
    if not device and not isinstance(arr, np.ndarray):
        raise TypeError(f"{what} must be a numpy.ndarray, got {type(arr).__name__}")
    name = dtype_name(arr.dtype)
    if arr.flags.c_contiguous:
        return name
    if device:
        raise ValueError(
            f"{what} must be C-contiguous: the device engine takes device buffers in C order only "
            f"(use cupy.ascontiguousarray)"
        )
    if not arr.flags.f_contiguous:
        raise ValueError(f"{what} must be contiguous, C or Fortran order (use numpy.ascontiguousarray)")
    return name
