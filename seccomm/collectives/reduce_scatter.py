"""Ring reduce-scatter (Patarasuk & Yuan, JPDC 69(2) 2009): p-1 steps; each hop opens the
incoming block under the direction key, reduces it with the local block, and seals the partial
result for the next rank.  Cost: (p-1) alpha + n(p-1)/p (beta + gamma + seal + open)."""

from __future__ import annotations

import functools

import numpy as np

from ..dtypes import as_bytes, check_op, flat, typed
from ..engine import Lend, Recv, Send
from ..framing import block_counts
from . import Call, Collective, Counts, register
from .common import Blocks, check_pair, chunk_views, exchange_step, in_turn, ring_tree_bound
from .cost import Cost, ring_steps
from .native import finish_avg, mpi_args


def reduce_scatter(self, sendbuf: np.ndarray, recvbuf: np.ndarray, op: str = "sum") -> None:
    """Reduce ``sendbuf`` (N elements, same N on every rank) over all ranks; ``recvbuf`` gets
    this rank's block: ``block_counts(N)[rank]`` elements starting at the sum of the earlier
    blocks.  Errors as for :meth:`allreduce`."""
    self._collective("reduce_scatter", sendbuf, recvbuf, op=op)


def _args(sendbuf, recvbuf, rank, size, device, op) -> Call:
    dname = check_pair(sendbuf, recvbuf, same_size=False, device=device)
    ufunc = check_op(op, recvbuf.dtype)
    want = block_counts(sendbuf.size, size)[rank]
    if recvbuf.size != want:
        raise ValueError(
            f"reduce_scatter: recvbuf has {recvbuf.size} elements; rank "
            f"{rank}'s block of {sendbuf.size} over {size} ranks has "
            f"{want} (see SecureComm.block_counts)"
        )
    return Call(dname, sendbuf.size, recvbuf.itemsize, op, (sendbuf, recvbuf, ufunc, op == "avg"))


def ring_reduce_scatter(run, send: np.ndarray, dest: np.ndarray, ufunc, blocks: Blocks, more=False) -> None:
    """Reduce every rank's ``send`` (flat) so that ``dest`` (this rank's block) holds the
    reduction of block ``rank`` over all ranks.  Rank r ends owning block r.  ``more``: steps of
    the op follow (:func:`rs_steps`)."""
    fused = getattr(run, "ring_rs_fused", None)  # the device engine's fused open-add-seal hop
    if run.size > 1 and fused is not None and fused(send, dest, ufunc, blocks):
        return
    for step in rs_steps(run, send, dest, ufunc, blocks, more):
        step()


def rs_steps(run, send: np.ndarray, dest: np.ndarray, ufunc, blocks: Blocks, more=False) -> list:
    """The steps of :func:`ring_reduce_scatter` on ``run`` (host buffers), each ``step()``: worked
    out once for a repeated call's plan (the accumulators ``acc0``/``acc1`` it views are then
    the plan's).  ``more``: steps of the op follow (allreduce's allgather), so the last step's
    pieces may be lent to clear frames too (``Send.lend``: a later step waits for them)."""
    p, r, isz, ce = run.size, run.rank, run.itemsize, run.chunk_elems
    if p == 1:
        return [functools.partial(np.copyto, dest, send[: dest.size])]
    nxt, prv = (r + 1) % p, (r - 1) % p
    send_u8 = as_bytes(send)
    accs = [run.ws.get(f"acc{i}", blocks.max * isz)[: blocks.max * isz] for i in (0, 1)]
    dt = send.dtype
    steps = []
    for s in range(p - 1):
        sb, rb = (r - 1 - s) % p, (r - 2 - s) % p
        if s == 0:
            pieces, _ = blocks.views(send_u8, sb, ce, isz)
        else:
            pieces, _ = chunk_views(accs[(s - 1) % 2], 0, blocks.counts[sb], ce, isz)
        outs, elems = chunk_views(accs[s % 2], 0, blocks.counts[rb], ce, isz)
        own = blocks.typed(send, rb)
        target = dest if s == p - 2 else accs[s % 2].view(dt)

        def consume(j, pt, own=own, target=target):
            lo, hi = j * ce, j * ce + len(pt) // isz
            ufunc(own[lo:hi], typed(pt, dt), out=target[lo:hi])

        steps.append(
            exchange_step(
                run,
                # (pieces: ``send``'s block or the accumulator the step before filled, neither
                # written again before this step's sends are waited for or the op ends: lent to
                # clear frames, the op's last sends only where their hop is acknowledged)
                Send(dst=nxt, step=s, pieces=pieces, lend=Lend.STEP if more or s < p - 2 else Lend.OP)
                if pieces
                else None,
                Recv(src=prv, step=s, elems=elems, outs=outs, consume=consume) if elems else None,
            )
        )
    return steps


def _run(run, sendbuf, recvbuf, ufunc, avg):
    blocks = Blocks(sendbuf.size, run.size)
    ring_reduce_scatter(run, flat(sendbuf), flat(recvbuf), ufunc, blocks)
    if avg and run.size > 1 and recvbuf.size:
        np.divide(recvbuf, recvbuf.dtype.type(run.size), out=recvbuf)


def _prepare(run, sendbuf, recvbuf, ufunc, avg):
    steps = rs_steps(run, flat(sendbuf), flat(recvbuf), ufunc, Blocks(sendbuf.size, run.size))
    if avg and run.size > 1 and recvbuf.size:
        steps.append(functools.partial(np.divide, recvbuf, recvbuf.dtype.type(run.size), out=recvbuf))
    return in_turn(steps)


def _native(comm, send, recv, op, root):  # pragma: no mutate block (the plaintext baseline)
    counts = block_counts(send.size, comm.Get_size())
    sspec, mop = mpi_args(send, op)
    rspec, _ = mpi_args(recv, op)
    comm.Reduce_scatter(sspec, rspec, counts, mop)
    finish_avg(recv, op, comm.Get_size())


def _counts(count, p, rank):
    return Counts(count, block_counts(count, p)[rank], count)


register(
    Collective(
        "reduce_scatter",
        code=2,
        method=reduce_scatter,
        args=_args,
        algorithms={"ring": _run},
        prepare={"ring": _prepare},
        frame_bound=ring_tree_bound,
        counts=_counts,
        busbw_factor=lambda n: (n - 1) / n,
        native=_native,
        secure=lambda sc, send, recv, op, root: sc.reduce_scatter(send, recv, op=op),
        cost={"ring": Cost(lambda n, t: ring_steps(n, t, True, False))},
        reduces=True,
        doc="ring; block r of the balanced partition ends on rank r",
    )
)
