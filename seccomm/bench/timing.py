"""The timed loop shared by the sweep (:mod:`.runner`) and the workload step (:mod:`.workload`):
results checked against native MPI first, then every variant timed, interleaved."""

from __future__ import annotations

import time

import numpy as np


def measure(comm, variants: list, call, reset, wrong, iters: int, warmup: int, check: bool):
    """``(times, wrong_counts)``: ``times[v, it]`` as :func:`interleaved_times`; with ``check``,
    ``wrong_counts[v]`` = ``wrong(variants[v])`` (elements that differ from the first variant,
    native MPI) summed over ranks, each taken right after that variant's one checked call (so
    the variants after the first may share one result buffer), else None for each (nothing was
    checked: not 0, which would claim a check).  ``reset()`` runs before the checked calls and
    before the timed loop.  Collective over ``comm``."""
    from mpi4py import MPI

    if not check:
        reset()
        return interleaved_times(comm, variants, call, iters, warmup), [None] * len(variants)
    counts = np.zeros(len(variants), np.int64)
    reset()
    for i, v in enumerate(variants):
        call(v)
        if i:
            counts[i] = wrong(v)
    comm.Allreduce(MPI.IN_PLACE, counts, MPI.SUM)
    reset()
    return interleaved_times(comm, variants, call, iters, warmup), counts


def interleaved_times(comm, variants, call, iters: int, warmup: int) -> np.ndarray:
    """``times[v, it]`` in seconds: iteration ``it`` of ``call(variants[v])``, the slowest rank's
    (elementwise MAX over ranks).  Warm-up first; each timed call follows a barrier; the order of
    variants rotates every iteration so that none always runs first."""
    from mpi4py import MPI

    for _ in range(warmup):
        for v in variants:
            call(v)
    k = len(variants)
    times = np.zeros((k, iters))
    for it in range(iters):
        for j in range(k):
            vi = (j + it) % k
            comm.Barrier()
            t0 = time.perf_counter()
            call(variants[vi])
            times[vi, it] = time.perf_counter() - t0
    comm.Allreduce(MPI.IN_PLACE, times, MPI.MAX)
    return times
