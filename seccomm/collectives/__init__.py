"""Collective registry: one record per collective, as nccl-tests has one file per collective.

Each record gives what the secure algorithms and the benchmark harness need, and nothing more:

- ``busbw_factor(n)``: nccl-tests doc/PERFORMANCE.md — allreduce 2(n-1)/n; reduce-scatter and
  allgather (n-1)/n with S the *total* array; broadcast 1.
- ``buffers(nbytes, itemsize, size, rank)``: element counts ``(send, recv)`` for an operation of
  S = ``nbytes`` bytes (S rounded down to whole elements).
- ``secure(sc, send, recv, op, root)``: the call on a :class:`~seccomm.comm.SecureComm`.
- ``native(comm, send, recv, op, root)``: the plain MPI call users run today (the baseline).
- ``algorithms``: algorithm name -> ``run(op_run, ...)`` used by ``SecureComm``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Collective:
    name: str
    busbw_factor: Callable[[int], float]
    buffers: Callable[[int, int, int, int], tuple[int, int]]
    secure: Callable
    native: Callable
    algorithms: dict
    reduces: bool = True
    doc: str = ""


COLLECTIVES: dict[str, Collective] = {}


def register(c: Collective) -> Collective:
    COLLECTIVES[c.name] = c
    return c


def get_collective(name: str) -> Collective:
    """Record for ``name``; ``ValueError`` listing the registered collectives."""
    try:
        return COLLECTIVES[name]
    except KeyError:
        raise ValueError(f"unknown collective {name!r}; allowed: {', '.join(COLLECTIVES)}") from None


from . import allgather, allreduce, bcast, reduce_scatter  # noqa: E402,F401  (they register)

COLLECTIVES = {k: COLLECTIVES[k] for k in ("allreduce", "reduce_scatter", "allgather", "bcast")}
