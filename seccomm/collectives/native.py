"""Plain MPI baselines.  MPI has no float16/bfloat16 reduction type in MPICH, so those reduce
through an MPI user-defined op that runs the same numpy ufunc (marked in reports)."""

from __future__ import annotations

import numpy as np

from ..dtypes import OPS

_MPI_OPS = {"sum": "SUM", "avg": "SUM", "max": "MAX", "min": "MIN", "prod": "PROD"}
_USER_OPS: dict = {}
HALF_TYPES = ("float16", "bfloat16")


def _user_op(dtype, op):
    from mpi4py import MPI

    key = (dtype.name, op)
    if key not in _USER_OPS:
        ufunc = OPS[op]

        def fn(inbuf, inoutbuf, datatype):
            a = np.frombuffer(inbuf, dtype)
            b = np.frombuffer(inoutbuf, dtype)
            ufunc(a, b, out=b)

        _USER_OPS[key] = MPI.Op.Create(fn, commute=True)
    return _USER_OPS[key]


_ARGS: dict = {}


def mpi_args(arr, op):
    """(buffer spec, MPI.Op) for ``arr`` reduced with ``op`` (resolved once per dtype and op)."""
    hit = _ARGS.get((arr.dtype, op))
    if hit is None:
        from mpi4py import MPI

        half = arr.dtype.name in HALF_TYPES
        hit = _ARGS[(arr.dtype, op)] = (
            half,
            _user_op(arr.dtype, op) if half else getattr(MPI, _MPI_OPS[op]),
            MPI.UINT16_T,
        )
    half, mop, u16 = hit
    return ([arr.view(np.uint16), u16] if half else arr), mop


def finish_avg(arr, op, size):
    if op == "avg" and size > 1 and arr.size:
        np.divide(arr, arr.dtype.type(size), out=arr)


def as_bytes_spec(arr):
    from mpi4py import MPI

    return [arr.view(np.uint8), MPI.BYTE]
