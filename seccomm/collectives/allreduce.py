"""Allreduce: ring (reduce-scatter + encrypt-once allgather) for large messages, recursive
doubling for small ones (Thakur, Rabenseifner & Gropp, IJHPCA 19(1) 2005).

ring:  2(p-1) alpha + 2n(p-1)/p beta + n(p-1)/p gamma; crypto on 2n(p-1)/p bytes per rank.
recursive doubling: lg p alpha + n lg p (beta + gamma + seal + open); non-powers of two fold the
first 2r ranks pairwise before and after (MPICH's scheme).  Every pairwise reduction puts the
lower-ranked operand first, so all ranks end bitwise identical.
"""

from __future__ import annotations

import functools

import numpy as np

from ..dtypes import as_bytes, check_op, flat, typed
from ..engine import Lend, Recv, Send
from . import Call, Collective, Counts, register
from .allgather import ag_steps, ring_allgather
from .common import Blocks, check_pair, chunk_views, exchange_step, in_turn, ring_tree_bound
from .cost import Cost, hier_steps, per_rank, rd_steps, ring_steps
from .native import finish_avg, mpi_args
from .reduce_scatter import ring_reduce_scatter, rs_steps


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
    elements than ranks, and on two ranks at or below ``chunk_bytes`` (one frame each way: the
    same bytes, crypto and reduction as the ring's two steps, in one step: 0.74-0.93x the ring's
    time at 128 KiB-1 MiB with AES-GCM; compare with ``seccomm bench --algorithm``); else ring."""
    if tuning.algorithm != "auto":
        return tuning.algorithm
    if nbytes <= tuning.small_bytes or count < p or (p == 2 and nbytes <= tuning.chunk_bytes):
        return "recursive_doubling"
    return "ring"


def _divide(arr: np.ndarray, p: int) -> None:
    if p > 1 and arr.size:
        np.divide(arr, arr.dtype.type(p), out=arr)


def ring(run, send, recv, ufunc, avg):
    blocks = Blocks(recv.size, run.size)
    mine = blocks.typed(recv, run.rank)
    ring_reduce_scatter(run, send, mine, ufunc, blocks, more=True)
    if avg:
        _divide(mine, run.size)
    ring_allgather(run, mine, recv, blocks)


def _ring_prepare(run, send, recv, ufunc, avg):
    """:func:`ring`'s steps for these arrays on ``run``, worked out once (a repeated call's plan keeps
    them; host buffers only: the device engine's fused hop is chosen per call)."""
    blocks = Blocks(recv.size, run.size)
    mine = blocks.typed(recv, run.rank)
    steps = rs_steps(run, send, mine, ufunc, blocks, more=True)
    if avg:
        steps.append(functools.partial(_divide, mine, run.size))
    return in_turn(steps + ag_steps(run, mine, recv, blocks))


#: steps of recursive doubling (_rd_schedule): fold (give my data / take and reduce), swap with
#: a partner, unfold (return the result / get it)
GIVE, TAKE, SWAP, RETURN, GET = range(5)


@functools.lru_cache(maxsize=64)
def _rd_schedule(p: int, r: int) -> tuple:
    """Rank ``r``'s steps of recursive doubling on ``p`` ranks: ``(kind, peer, step,
    theirs_first)``, where ``theirs_first`` puts the peer's operand first (it is the lower
    rank).  Non-powers of two fold the first 2r ranks pairwise before and after (MPICH's
    scheme); cached: a repeated call costs a lookup."""
    pof2 = 1 << (p.bit_length() - 1)
    rem = p - pof2
    out = []
    newrank = r - rem
    if r < 2 * rem:  # fold: even ranks hand their data to the next odd rank
        newrank = r // 2 if r % 2 else -1
        out.append((TAKE, r - 1, 0, True) if r % 2 else (GIVE, r + 1, 0, False))
    mask, step = 1, 1
    while newrank >= 0 and mask < pof2:
        newdst = newrank ^ mask
        dst = newdst * 2 + 1 if newdst < rem else newdst + rem
        out.append((SWAP, dst, step, newdst < newrank))
        mask <<= 1
        step += 1
    step = pof2.bit_length()
    if r < 2 * rem:  # unfold: odd ranks return the result
        out.append((RETURN, r - 1, step, False) if r % 2 else (GET, r + 1, step, False))
    return tuple(out)


def _reducer(ufunc, cur, recv, elems, ce, theirs_first):
    """``consume(j, pt)``: chunk j of ``recv`` = ufunc(ours, theirs), the lower rank's operand
    first; ``cur`` holds this rank's operand (``sendbuf`` before the first reduction, ``recv``
    after)."""
    dt = recv.dtype
    if len(elems) == 1:  # one chunk: whole arrays, no slicing
        seen = [None, None]  # the last plaintext buffer and its typed view (the same each op)

        def whole(j, pt):
            if pt is not seen[0]:
                seen[:] = pt, typed(pt, dt)
            if theirs_first:
                ufunc(seen[1], cur, out=recv)
            else:
                ufunc(cur, seen[1], out=recv)

        return whole

    def consume(j, pt):
        lo, hi = j * ce, j * ce + elems[j]
        if theirs_first:
            ufunc(typed(pt, dt), cur[lo:hi], out=recv[lo:hi])
        else:
            ufunc(cur[lo:hi], typed(pt, dt), out=recv[lo:hi])

    return consume


def recursive_doubling(run, send, recv, ufunc, avg):
    """Recursive doubling (the steps of :func:`_rd_schedule`).  The first step seals straight
    from ``send`` and reduces into ``recv``, later steps work in ``recv``: no copy of the input."""
    _rd_prepare(run, send, recv, ufunc, avg)()


def _rd_prepare(run, send, recv, ufunc, avg):
    """Recursive doubling's steps for these arrays on ``run``, worked out once: ``run_steps()``.
    A repeated call's plan keeps it (the schedule, the chunk views, the reducers and the private
    accumulator in workspace ``rdtmp``, which the plan then holds)."""
    p, isz, ce = run.size, run.itemsize, run.chunk_elems
    if p == 1 or not recv.size:

        def alone():
            if not np.may_share_memory(send, recv):
                np.copyto(recv, send)
            if avg:
                _divide(recv, p)

        return alone
    nbytes = recv.size * isz
    tmp = run.ws.get("rdtmp", nbytes)[:nbytes]
    outs, elems = chunk_views(tmp, 0, recv.size, ce, isz)
    single = len(elems) == 1
    steps = []
    cur = send
    # clear frames go out from the caller's memory (Send.lend) where nothing this op writes
    # overlaps it while they may be in flight: the input before any reduction (unless in place)
    # in a swap, the input given whole (GIVE: GET follows), the result returned (but for avg,
    # whose division writes it after this step).  The op's last
    # sends (the result returned, the last swap) only where their hop is acknowledged
    # (engine.Lend.OP): the op would otherwise have to wait for them, and MPICH may complete them
    # only once the peer calls MPI again (docs/design.md, "Completion")
    apart = not np.may_share_memory(send, recv)
    schedule = _rd_schedule(p, run.rank)
    for i, (kind, peer, step, theirs_first) in enumerate(schedule):
        if kind == GET:
            got = Recv(peer, elems, chunk_views(as_bytes(recv), 0, recv.size, ce, isz)[0], step, direct=True)
            steps.append(exchange_step(run, None, got))
            continue
        mine = [as_bytes(cur)] if single else chunk_views(as_bytes(cur), 0, recv.size, ce, isz)[0]
        if kind in (GIVE, RETURN):
            # (RETURN: the result, which avg divides after this step: not lent then)
            lend = Lend.STEP if kind == GIVE else (Lend.COPY if avg else Lend.OP)
            steps.append(exchange_step(run, Send(peer, step, pieces=mine, lend=lend), None))
            continue
        consume = _reducer(ufunc, cur, recv, elems, ce, theirs_first)
        lend = (Lend.STEP if i < len(schedule) - 1 else Lend.OP) if apart and cur is send else Lend.COPY
        if kind == TAKE:
            steps.append(exchange_step(run, None, Recv(peer, elems, outs, step, consume=consume)))
        elif single:  # small message: one frame each way (on two ranks, its sum may be compiled)
            summed = (cur, recv, theirs_first) if p == 2 and ufunc is np.add and not avg else None
            steps.append(run.swap_step(peer, step, mine[0], elems[0], outs[0], consume, lend, summed))
        else:
            both = Send(peer, step, pieces=mine, lend=lend), Recv(peer, elems, outs, step, consume=consume)
            steps.append(exchange_step(run, *both))
        cur = recv
    if avg:
        steps.append(functools.partial(_divide, recv, p))
    return in_turn(steps)


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
        prepare={"ring": _ring_prepare, "recursive_doubling": _rd_prepare},
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
