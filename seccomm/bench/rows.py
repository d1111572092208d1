"""The one result row, as nccl-tests prints it: built here for the sweep (:mod:`.runner`), the
workload step (:mod:`.workload`) and the pytest plugin (:mod:`seccomm.pytest_plugin`).

Row keys: ``collective``, ``size_bytes`` (S), ``count``, ``dtype``, ``redop`` (``"none"`` for
collectives that do not reduce), ``root`` (-1 for collectives without one), ``variant``,
``ranks``, ``time_us`` (``min``/``median``/``max`` over iterations [us]), ``algbw_gbps`` = S / t
[GB/s], ``busbw_gbps`` = algbw x the record's busbw factor (nccl-tests doc/PERFORMANCE.md),
``overhead_x`` = t / t(native), ``wrong`` (elements that differ from native; None when nothing was
checked: ``seccomm bench -c 0``, the pytest plugin), then any extra keys.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import DTYPES

NATIVE = "native"  #: the variant name of the MPI library's own collective


def result_row(
    coll,
    variant: str,
    count: int,
    dtype: str,
    ranks: int,
    times,
    native_s: float,
    wrong: int | None = None,
    op: str = "sum",
    root: int = 0,
    **extra,
) -> dict:
    """Row of ``variant`` for one collective call of ``count`` elements of ``dtype`` (S =
    count x itemsize) on ``ranks`` ranks.  ``coll``: the collective's record; ``times``: seconds
    of each timed iteration (the slowest rank's); ``native_s``: native MPI's median [s] (NaN
    overhead when not positive); ``op``/``root``: as called (kept where the record takes them)."""
    t = np.asarray(times, float)
    med = float(np.median(t))
    nbytes = count * DTYPES[dtype][0].itemsize
    algbw = nbytes / med / 1e9 if med > 0 else 0.0
    return {
        "collective": coll.name,
        "size_bytes": nbytes,
        "count": count,
        "dtype": dtype,
        "redop": op if coll.reduces else "none",
        "root": root if coll.rooted else -1,
        "variant": variant,
        "ranks": ranks,
        "time_us": {"min": t.min() * 1e6, "median": med * 1e6, "max": t.max() * 1e6},
        "algbw_gbps": algbw,
        "busbw_gbps": algbw * coll.busbw_factor(ranks),
        "overhead_x": med / native_s if native_s > 0 else float("nan"),
        "wrong": None if wrong is None else int(wrong),
        **extra,
    }
