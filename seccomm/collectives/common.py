"""Helpers shared by the collective records: chunk views and block layout, argument checks,
the bench data init and result check, and the frame bound of the ring and tree algorithms."""

from __future__ import annotations

import functools

import numpy as np

from ..dtypes import DTYPES, check_buffer
from ..framing import block_counts, block_offsets, chunk_counts


def chunk_views(u8: np.ndarray, offset_elems: int, count: int, chunk_elems: int, itemsize: int):
    """uint8 views of ``count`` elements starting at element ``offset_elems``, cut into chunks;
    returns ``(views, elems)``."""
    elems = chunk_counts(count, chunk_elems)
    views, pos = [], offset_elems * itemsize
    for e in elems:
        views.append(u8[pos : pos + e * itemsize])
        pos += e * itemsize
    return views, elems


# -- prepared steps (a repeated call's plan keeps them: Collective.prepare) ---------------------
# A prepared step is a callable without arguments, bound to the op's run (a plan keeps its run
# and restarts it for every op), so that a repeated call costs one call per step.
def exchange_step(run, send, recv):
    """One step of a prepared algorithm: ``step()`` runs ``run.exchange(send, recv)`` (the same
    :class:`~seccomm.engine.Send`/:class:`~seccomm.engine.Recv` every op)."""
    return functools.partial(run.exchange, send, recv)


def in_turn(steps: list):
    """``run()`` running ``steps`` (each ``step()``) in order; the step itself when there is one,
    and nothing to do when there is none."""
    if len(steps) == 1:
        return steps[0]

    def run_steps():
        for step in steps:
            step()

    return run_steps


class Blocks:
    """Balanced block partition of ``count`` elements over ``size`` ranks."""

    def __init__(self, count: int, size: int):
        self.counts = block_counts(count, size)
        self.offsets = block_offsets(self.counts)
        self.max = max(self.counts)  # size >= 1: never an empty partition

    def views(self, u8, b, chunk_elems, itemsize):
        return chunk_views(u8, self.offsets[b], self.counts[b], chunk_elems, itemsize)

    def typed(self, arr, b):
        o = self.offsets[b]
        return arr[o : o + self.counts[b]]


# -- argument checks (before any traffic) -------------------------------------------------------
def writeable(arr, what: str) -> None:
    """``ValueError`` when a host buffer that is written is read-only."""
    if not arr.flags.writeable:
        raise ValueError(f"{what} is read-only")


def check_pair(sendbuf, recvbuf, same_size: bool, device: bool, in_place: bool = False) -> str:
    """Dtype name of a (sendbuf, recvbuf) pair.  ``TypeError`` for a bad buffer or two dtypes;
    ``ValueError`` for a non-contiguous buffer, a read-only ``recvbuf`` (``sendbuf`` is only
    read: it may be read-only), sizes that differ (``same_size``), one shape in two orders
    (:func:`same_layout`) or overlapping buffers (``in_place``: the very same array twice is
    allowed).  C- and Fortran-contiguous buffers are moved in memory order, as MPI does."""
    s = check_buffer(sendbuf, "sendbuf", device)
    r = check_buffer(recvbuf, "recvbuf", device)
    if not device:
        writeable(recvbuf, "recvbuf")
    if s != r:
        raise TypeError(f"sendbuf is {s} but recvbuf is {r}; both must have one dtype")
    if same_size and sendbuf.size != recvbuf.size:
        raise ValueError(f"sendbuf has {sendbuf.size} elements, recvbuf {recvbuf.size}; they must match")
    same_layout(sendbuf, recvbuf)
    if recvbuf.size and sendbuf.size and np.may_share_memory(sendbuf, recvbuf):
        same = in_place and _address(sendbuf) == _address(recvbuf)
        if not same:
            raise ValueError(
                "sendbuf and recvbuf overlap: only allreduce works in place "
                "(pass the same array twice); use separate buffers"
            )
    return s


def same_layout(sendbuf, recvbuf) -> None:
    """``ValueError`` for two buffers of one multi-dimensional shape in different orders (one
    C-, the other Fortran-contiguous): seccomm, like MPI, reads and writes each in its memory
    order, so ``recvbuf[i, j]`` would not be the result of ``sendbuf[i, j]``."""
    if sendbuf.shape != recvbuf.shape or sendbuf.flags.c_contiguous == recvbuf.flags.c_contiguous:
        return
    order = {True: "C", False: "Fortran"}
    raise ValueError(
        f"sendbuf is in {order[sendbuf.flags.c_contiguous]} order and recvbuf in "
        f"{order[recvbuf.flags.c_contiguous]} order (shape {sendbuf.shape}): seccomm, like MPI, "
        f"moves each buffer in its memory order, so the elements would not correspond by index; "
        f"pass both in one order (numpy.ascontiguousarray or numpy.asfortranarray)"
    )


def _address(a) -> int:
    iface = getattr(a, "__array_interface__", None) or a.__cuda_array_interface__
    return iface["data"][0]


# -- bench data init and result check ---------------------------------------------------------------
def seeded(
    dname: str, op: str, count: int, rank: int, size: int, root: int = 0
) -> np.ndarray:  # pragma: no mutate block (bench data)
    """``count`` integer-valued elements of ``dname`` (rank ``rank``'s own data) whose reduction
    over ``size`` ranks is exact in ``dname``, in any order; ``root`` is not used."""
    dt = DTYPES[dname][0]
    rng = np.random.default_rng(12345 + rank)
    if dname == "uint8":
        return rng.integers(0, 256, count, dtype=np.uint8)
    if dname in ("int32", "int64"):
        return rng.integers(-1000, 1001, count).astype(dt)
    if op == "prod":
        return rng.choice(np.array([-1, 1], np.int8), count).astype(dt)
    mant = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}[dname]
    k = int(max(1, min(4, (2**mant) // (4 * size))))
    return rng.integers(-k, k + 1, count).astype(dt)


def no_reset(send, recv, rank: int, root: int) -> None:
    """Nothing to restore before a call: the collective writes all of ``recv``."""


def bitwise_wrong(out: np.ndarray, ref: np.ndarray) -> int:
    """Elements of ``out`` whose bits differ from ``ref`` (the native result)."""
    u = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[out.dtype.itemsize]
    return int(np.count_nonzero(out.view(u) != ref.view(u)))


# -- key usage ----------------------------------------------------------------------------------
def ring_tree_bound(p: int, chunks: int) -> int:
    """Frames any one key may seal in one ring, recursive-doubling or tree operation on ``p``
    ranks, for ``chunks`` = ceil(S / chunk) + 1 (``chunk``: ``chunk_bytes`` in whole elements):
    at most (p-1) blocks of chunks under a direction key (ring reduce-scatter), about 2 chunks + p
    under the group key (encrypt-once allgather, bcast); (2p + 2 bitlen(p) + 4) chunks covers both
    with margin (a fixed formula, kept so that the rotation points of a configuration do not
    change)."""
    return (2 * p + 2 * p.bit_length() + 4) * chunks
