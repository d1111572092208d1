"""Collective registry: one record per collective, as nccl-tests has one file per collective.

Each record names the collective, gives its busbw factor (nccl-tests doc/PERFORMANCE.md: allreduce
2(n-1)/n; reduce-scatter and allgather (n-1)/n with S the total array; broadcast 1), the bytes of
the operation ``S`` for a given per-call element count, and the algorithms that run it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Collective:
    name: str
    busbw_factor: Callable[[int], float]
    algorithms: dict  # name -> run(op_run, ...)
    doc: str = ""


COLLECTIVES: dict[str, Collective] = {}


def register(c: Collective) -> Collective:
    COLLECTIVES[c.name] = c
    return c


def get_collective(name: str) -> Collective:
    try:
        return COLLECTIVES[name]
    except KeyError:
        raise ValueError(f"unknown collective {name!r}; allowed: {', '.join(COLLECTIVES)}") from None


from . import allgather, allreduce, bcast, reduce_scatter  # noqa: E402,F401  (registers)
