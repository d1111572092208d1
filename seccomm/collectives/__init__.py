"""Collective registry: one record per collective, one file each, as nccl-tests has.

A :class:`Collective` holds every fact about its collective that the rest of seccomm needs;
``SecureComm``, the bench harness, the pytest plugin and the cost model read them from here.
Adding a collective is one file that registers its record, plus one line in the import below.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from .common import bitwise_wrong, no_reset, seeded


class Call(NamedTuple):
    """What ``args`` returns for one checked call."""

    dtype: str  # dtype name (seccomm.dtypes.DTYPES)
    count: int  # element count bound into the AAD (the op's total)
    itemsize: int  # bytes per element
    redop: str  # reduction op bound into the AAD ("none" when nothing is reduced)
    args: tuple  # what the algorithm gets after its OpRun
    root: int = -1  # the root every rank must agree on (-1: the collective has none)


class Counts(NamedTuple):
    """Element counts of one operation of S bytes (nccl-tests' getCollByteCount)."""

    send: int  # sendbuf elements on this rank
    recv: int  # recvbuf elements on this rank
    total: int  # elements of S as reported (S rounded down to what the collective can move)


@dataclass(frozen=True)
class Tuning:
    """The settings the "auto" rules read, with their defaults; a ``SecureComm`` (attributes of
    the same names) is passed in their place on a real call."""

    algorithm: str = "auto"  # allreduce: auto, ring, recursive_doubling
    small_bytes: int = 64 << 10  # allreduce auto: recursive doubling at or below
    chunk_bytes: int = 1 << 20  # allreduce auto on two ranks: recursive doubling at or below (0: never)
    bcast_chain_bytes: int = 512 << 10  # bcast: pipelined chain above, binomial tree at or below


@dataclass(frozen=True)
class Collective:
    """One collective.  Callables, in the order a call uses them:

    - ``method``: the public ``SecureComm`` method (signature, docstring); ``seccomm.comm``
      installs it under ``name``.  It calls ``self._collective(name, sendbuf, recvbuf, **kw)``.
    - ``args(sendbuf, recvbuf, rank, size, device, **kw) -> Call``: argument checks before any
      traffic (``TypeError``/``ValueError`` naming what is allowed).
    - ``choose(tuning, nbytes, count, p) -> str``: the algorithm of a call (the "auto" rule;
      ``tuning`` as :class:`Tuning`); ``None``: the only entry of ``algorithms``.
    - ``algorithms``: name -> ``run(op_run, *call.args)``.
    - ``prepare``: name -> ``prepare(op_run, *call.args) -> steps`` (optional, per algorithm):
      the work an algorithm does before its first step (schedule, views, reducers), done once
      for a repeated call's plan, whose arrays and arguments are the same every time;
      ``steps()`` (no argument: bound to ``op_run``, which the plan keeps) runs the algorithm.
    - ``frame_bound(p, chunks) -> int``: frames any one key may seal in one op, for
      ``chunks`` = ceil(S / chunk) + 1, ``chunk`` = ``chunk_bytes`` rounded down to whole
      elements (``OpSequence.bound``); identical on every rank and never below what the
      algorithms seal (the key schedule rotates on it).
    - ``counts(count, p, rank) -> Counts``: buffers of an op of ``count`` = S / itemsize elements.
    - ``init(dname, op, n, rank, size, root)``: bench send data (results exact in every dtype);
      ``reset(send, recv, rank, root)``: before each bench call; ``wrong(out, ref) -> int``:
      elements that differ from the native result.
    - ``busbw_factor(n)``: nccl-tests doc/PERFORMANCE.md.
    - ``native(comm, send, recv, op, root)``: the plain MPI call (baseline);
      ``secure(sc, send, recv, op, root)``: the same call on a ``SecureComm``.
    - ``cost``: model algorithm -> :class:`~seccomm.collectives.cost.Cost` (the cost model).

    ``code``: wire code bound into the AAD's op kind byte (1..255, unique; never reuse one).
    ``reduces``: takes a reduction op; ``rooted``: takes a root.
    """

    name: str
    code: int
    method: Callable
    args: Callable
    algorithms: dict
    frame_bound: Callable[[int, int], int]
    counts: Callable[[int, int, int], Counts]
    busbw_factor: Callable[[int], float]
    native: Callable
    secure: Callable
    cost: dict
    choose: Callable | None = None
    reduces: bool = False
    rooted: bool = False
    init: Callable = seeded
    reset: Callable = no_reset
    wrong: Callable = bitwise_wrong
    doc: str = ""
    prepare: dict = field(default_factory=dict)

    def pick(self, tuning, nbytes: int, count: int, p: int) -> str:
        """The algorithm a call of ``count`` elements (``nbytes`` bytes) on ``p`` ranks runs."""
        if self.choose is None:
            return next(iter(self.algorithms))
        return self.choose(tuning, nbytes, count, p)


COLLECTIVES: dict[str, Collective] = {}


def register(c: Collective) -> Collective:
    """Add ``c`` to the registry (kept in wire-code order); ``ValueError`` when its name or wire
    code is taken."""
    if not 1 <= c.code <= 255:
        raise ValueError(f"wire code {c.code} of {c.name!r} does not fit the AAD's op kind byte (1..255)")
    if c.name in COLLECTIVES or any(x.code == c.code for x in COLLECTIVES.values()):
        raise ValueError(f"collective {c.name!r} or wire code {c.code} already registered")
    COLLECTIVES[c.name] = c
    for name in sorted(COLLECTIVES, key=lambda n: COLLECTIVES[n].code):
        COLLECTIVES[name] = COLLECTIVES.pop(name)
    return c


def get_collective(name: str) -> Collective:
    """Record for ``name``; ``ValueError`` listing the registered collectives."""
    try:
        return COLLECTIVES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown collective {name!r}; allowed: {', '.join(COLLECTIVES)}") from None


# the registry: each module registers its record
from . import allgather, allreduce, alltoall, bcast, reduce_scatter  # noqa: E402,F401
