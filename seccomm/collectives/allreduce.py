"""Allreduce: ring (reduce-scatter + encrypt-once allgather) for large messages, recursive
doubling for small ones (Thakur, Rabenseifner & Gropp, IJHPCA 19(1) 2005).

ring:  2(p-1) alpha + 2n(p-1)/p beta + n(p-1)/p gamma; crypto on 2n(p-1)/p bytes per rank.
recursive doubling: lg p alpha + n lg p (beta + gamma + seal + open); non-powers of two fold the
first 2r ranks pairwise before and after (MPICH's scheme).  Every pairwise reduction puts the
lower-ranked operand first, so all ranks end bitwise identical.
"""

from __future__ import annotations

import numpy as np

from ..dtypes import as_bytes, check_op, flat, typed
from ..engine import Recv, Send
from . import Call, Collective, Counts, register
from .allgather import ring_allgather
from .common import Blocks, check_pair, chunk_views, ring_tree_bound
from .cost import Cost, hier_steps, per_rank, rd_steps, ring_steps
from .native import finish_avg, mpi_args
from .reduce_scatter import ring_reduce_scatter


def allreduce(self, sendbuf: np.ndarray, recvbuf: np.ndarray, op: str = "sum") -> None:
    """Reduce ``sendbuf`` over all ranks into ``recvbuf`` on every rank.

    ``sendbuf``, ``recvbuf``: contiguous numpy arrays (C or Fortran order, each moved in its
    memory order as MPI does; one shape in two orders is refused) of one dtype (float16,
    bfloat16, float32, float64, uint8, int32, int64) and equal size; ``sendbuf`` may be
    read-only; ``recvbuf is sendbuf`` works in place.  ``op``: sum, avg (floats), max, min, prod;
    ``max``/``min`` propagate a NaN from any rank (numpy semantics; MPICH's MAX/MIN may drop
    it).  Every rank gets bitwise identical results.  Raises ``TypeError``/``ValueError``
    before traffic for bad arguments, ``AuthenticationError``/``FrameError``/``TransportTimeout``
    on the wire, ``ConcurrentUseError`` while another thread is inside a call on this
    ``SecureComm`` (one ``SecureComm`` per thread).
    CuPy arrays and torch CUDA tensors are accepted too (staged through pinned host memory,
    see :mod:`seccomm.gpu.staging`).
    """
    self._collective("allreduce", sendbuf, recvbuf, op=op)


def _args(sendbuf, recvbuf, rank, size, device, op) -> Call:
    dname = check_pair(sendbuf, recvbuf, same_size=True, device=device, in_place=True)
    ufunc = check_op(op, recvbuf.dtype)
    args = (flat(sendbuf), flat(recvbuf), ufunc, op == "avg")
    return Call(dname, recvbuf.size, recvbuf.itemsize, op, args)


def _choose(tuning, nbytes, count, p) -> str:
    """``tuning.algorithm``; "auto": recursive doubling at or below ``small_bytes`` or for fewer
    elements than ranks, else ring."""
    if tuning.algorithm != "auto":
        return tuning.algorithm
    return "recursive_doubling" if nbytes <= tuning.small_bytes or count < p else "ring"


def _divide(arr: np.ndarray, p: int) -> None:
    if p > 1 and arr.size:
        np.divide(arr, arr.dtype.type(p), out=arr)


def ring(run, send, recv, ufunc, avg):
    blocks = Blocks(recv.size, run.size)
    mine = blocks.typed(recv, run.rank)
    ring_reduce_scatter(run, send, mine, ufunc, blocks)
    if avg:
        _divide(mine, run.size)
    ring_allgather(run, mine, recv, blocks)


def recursive_doubling(run, send, recv, ufunc, avg):
    p, r, isz, ce = run.size, run.rank, run.itemsize, run.chunk_elems
    if not np.may_share_memory(send, recv):
        np.copyto(recv, send)
    if p > 1 and recv.size:
        u8 = as_bytes(recv)
        tmp = run.ws.get("rdtmp", u8.size)[: u8.size]
        pieces, elems = chunk_views(u8, 0, recv.size, ce, isz)
        outs, _ = chunk_views(tmp, 0, recv.size, ce, isz)
        pof2 = 1 << (p.bit_length() - 1)
        rem = p - pof2

        def reducer(lower_first):
            def consume(j, pt):
                lo, hi = j * ce, j * ce + elems[j]
                theirs = typed(pt, recv.dtype)
                if lower_first:
                    ufunc(theirs, recv[lo:hi], out=recv[lo:hi])
                else:
                    ufunc(recv[lo:hi], theirs, out=recv[lo:hi])

            return consume

        if r < 2 * rem:  # fold: even ranks hand their data to the next odd rank
            if r % 2 == 0:
                run.exchange(Send(dst=r + 1, step=0, pieces=pieces), None)
                newrank = -1
            else:
                run.exchange(None, Recv(src=r - 1, step=0, elems=elems, outs=outs, consume=reducer(True)))
                newrank = r // 2
        else:
            newrank = r - rem
        step, mask = 1, 1
        single = len(pieces) == 1
        if newrank >= 0:
            while mask < pof2:
                newdst = newrank ^ mask
                dst = newdst * 2 + 1 if newdst < rem else newdst + rem
                consume = reducer(newdst < newrank)
                if single:  # small message: one frame each way
                    run.swap(dst, step, pieces[0], elems[0], outs[0], consume)
                else:
                    run.exchange(
                        Send(dst, step, pieces=pieces), Recv(dst, elems, outs, step, consume=consume)
                    )
                mask <<= 1
                step += 1
        step = 1 + (pof2.bit_length() - 1)
        if r < 2 * rem:  # unfold: odd ranks return the result
            if r % 2:
                run.exchange(Send(dst=r - 1, step=step, pieces=pieces), None)
            else:
                run.exchange(
                    None,
                    Recv(src=r + 1, step=step, elems=elems, outs=chunk_views(u8, 0, recv.size, ce, isz)[0]),
                )
    if avg:
        _divide(recv, p)


def _native(comm, send, recv, op, root):  # pragma: no mutate block (the plaintext baseline)
    sspec, mop = mpi_args(send, op)
    rspec, _ = mpi_args(recv, op)
    comm.Allreduce(sspec, rspec, mop)
    finish_avg(recv, op, comm.Get_size())


register(
    Collective(
        "allreduce",
        code=1,
        method=allreduce,
        args=_args,
        choose=_choose,
        algorithms={"ring": ring, "recursive_doubling": recursive_doubling},
        frame_bound=ring_tree_bound,
        counts=lambda count, p, rank: Counts(count, count, count),
        busbw_factor=lambda n: 2 * (n - 1) / n,
        native=_native,
        secure=lambda sc, send, recv, op, root: sc.allreduce(send, recv, op=op),
        cost={
            "ring": Cost(lambda n, t: ring_steps(n, t, True, True), per_rank),
            "recursive_doubling": Cost(lambda n, t: rd_steps(n, t, False)),
            "rabenseifner": Cost(lambda n, t: rd_steps(n, t, True)),
            "hierarchical": Cost(hier_steps, per_rank),
        },
        reduces=True,
        doc="ring (RS + encrypt-once AG) or recursive doubling",
    )
)
