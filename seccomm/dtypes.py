"""Supported element types and reduction operators.

bfloat16 comes from ``ml_dtypes`` (numpy has none).  Reductions run in the element type itself,
as MPI does (float16 and bfloat16 sums round after every addition); ``avg`` is the sum divided by
the world size, allowed for floating-point types only.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

#: name -> wire code bound into the AAD (the names, in this order, everywhere)
CODES = {"float16": 1, "bfloat16": 2, "float32": 3, "float64": 4, "uint8": 5, "int32": 6, "int64": 7}


class _Dtypes(Mapping):
    """name -> (numpy dtype, wire code).  bfloat16's dtype comes from ``ml_dtypes``, imported on
    the first look-up of that entry: ml_dtypes 0.7 takes about 0.7 s to import, which a CLI call
    or a rank that never touches bfloat16 does not pay (an array of that dtype cannot exist
    before ml_dtypes is imported)."""

    def __init__(self):
        self._table = {n: (np.dtype(n), c) for n, c in CODES.items() if n != "bfloat16"}

    def __getitem__(self, name):
        if name == "bfloat16" and name not in self._table:
            import ml_dtypes

            self._table[name] = (np.dtype(ml_dtypes.bfloat16), CODES[name])
        return self._table[name]

    def __iter__(self):
        return iter(CODES)

    def __len__(self):
        return len(CODES)

    def __contains__(self, name):
        return name in CODES


#: name -> (numpy dtype, wire code bound into the AAD)
DTYPES = _Dtypes()
FLOAT_NAMES = ("float16", "bfloat16", "float32", "float64")
_BY_DTYPE = {dt: name for name, (dt, _code) in DTYPES._table.items()}  # all but bfloat16

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
    if name is None and dt.name == "bfloat16" and dt == DTYPES["bfloat16"][0]:
        name = "bfloat16"
    if name is None:
        raise TypeError(f"unsupported dtype {dt}; allowed: {', '.join(DTYPES)}")
    return name


def dtype_code(name: str) -> int:
    return CODES[name]


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
