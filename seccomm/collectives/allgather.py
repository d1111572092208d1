"""Ring allgather with encrypt-once forwarding: each origin seals its block once under the group
key; every rank forwards the frames unchanged and opens them into its output.  Seal cost n/p per
rank, open cost n(p-1)/p; transfer (p-1) alpha + n(p-1)/p beta (Thakur, Rabenseifner & Gropp
2005, ring allgather; encrypt-once as in CryptMPI, arXiv 2010.06471)."""

from __future__ import annotations

import functools

import numpy as np

from ..dtypes import as_bytes, flat
from ..engine import Lend, Recv, Send
from ..framing import block_counts
from . import Call, Collective, Counts, register
from .common import Blocks, check_pair, chunk_views, exchange_step, in_turn, ring_tree_bound
from .cost import Cost, per_rank, ring_steps
from .native import as_bytes_spec


def allgather(self, sendbuf: np.ndarray, recvbuf: np.ndarray) -> None:
    """Gather every rank's ``sendbuf`` into ``recvbuf`` (N elements on every rank) in rank
    order; ``sendbuf`` holds ``block_counts(N)[rank]`` elements (equal blocks when N is a
    multiple of the world size).  Errors as for :meth:`allreduce`."""
    self._collective("allgather", sendbuf, recvbuf)


def _args(sendbuf, recvbuf, rank, size, device) -> Call:
    dname = check_pair(sendbuf, recvbuf, same_size=False, device=device)
    want = block_counts(recvbuf.size, size)[rank]
    if sendbuf.size != want:
        raise ValueError(
            f"allgather: sendbuf has {sendbuf.size} elements; rank {rank}'s "
            f"block of {recvbuf.size} over {size} ranks has {want} "
            f"(see SecureComm.block_counts)"
        )
    return Call(dname, recvbuf.size, recvbuf.itemsize, "none", (sendbuf, recvbuf))


def ring_allgather(run, own: np.ndarray, out: np.ndarray, blocks: Blocks) -> None:
    """Gather every rank's ``own`` block into ``out`` (flat, blocks in rank order)."""
    for step in ag_steps(run, own, out, blocks):
        step()


def ag_steps(run, own: np.ndarray, out: np.ndarray, blocks: Blocks) -> list:
    """The steps of :func:`ring_allgather` on ``run``, each ``step()``: worked out once for a
    repeated call's plan."""
    p, r, isz, ce = run.size, run.rank, run.itemsize, run.chunk_elems
    mine = blocks.typed(out, r)
    steps = [] if np.may_share_memory(mine, own) else [functools.partial(np.copyto, mine, own)]
    if p == 1:
        return steps
    nxt, prv = (r + 1) % p, (r - 1) % p
    out_u8, own_u8 = as_bytes(out), as_bytes(own)
    if run.origins is not None:  # identity x509: each origin's MACs to every rank, before its frames
        origins = [
            (o, len(blocks.views(out_u8, o, ce, isz)[1])) for o in range(p) if o != r and blocks.counts[o]
        ]
        pieces = chunk_views(own_u8, 0, own.size, ce, isz)[0] if blocks.counts[r] else None
        steps.append(functools.partial(run.origins.start, origins, pieces))
    prev = None
    for s in range(p - 1):
        sb, rb = (r - s) % p, (r - s - 1) % p
        recv = None
        if blocks.counts[rb]:
            outs, elems = blocks.views(out_u8, rb, ce, isz)
            # the last step's frames are not forwarded: clear ones land in place (Recv.direct)
            ws, last = f"fwd{s % 2}", s == p - 2
            recv = Recv(src=prv, group=True, origin=rb, elems=elems, outs=outs, ws=ws, direct=last)
        if not blocks.counts[sb]:
            steps.append(exchange_step(run, None, recv))
        elif s == 0:
            pieces = chunk_views(own_u8, 0, own.size, ce, isz)[0]
            # (own: never written by this op, so lent to clear frames: on two ranks these are
            # the op's last sends, lent only where the hop is acknowledged)
            lend = Lend.STEP if p > 2 else Lend.OP
            first = Send(dst=nxt, group=True, origin=r, pieces=pieces, ws="fwd1", lend=lend)
            steps.append(exchange_step(run, first, recv))
        else:  # origin sb's group frames, forwarded as they arrived (nothing is sealed here)
            steps.append(functools.partial(_forward, run, nxt, prev, recv))
        prev = recv
    return steps


def _forward(run, nxt, prev, recv):
    run.exchange(run.forward(nxt, prev), recv)


def _prepare(run, sendbuf, recvbuf):
    return in_turn(ag_steps(run, flat(sendbuf), flat(recvbuf), Blocks(recvbuf.size, run.size)))


def _run(run, sendbuf, recvbuf):
    _prepare(run, sendbuf, recvbuf)()


def _native(comm, send, recv, op, root):  # pragma: no mutate block (the plaintext baseline)
    from mpi4py import MPI

    size = comm.Get_size()
    if recv.size % size == 0:
        comm.Allgather(as_bytes_spec(send), as_bytes_spec(recv))
        return
    counts = [c * recv.itemsize for c in block_counts(recv.size, size)]
    comm.Allgatherv(as_bytes_spec(send), [recv.view(np.uint8), counts, None, MPI.BYTE])


def _counts(count, p, rank):
    return Counts(block_counts(count, p)[rank], count, count)


register(
    Collective(
        "allgather",
        code=3,
        method=allgather,
        args=_args,
        algorithms={"ring": _run},
        prepare={"ring": _prepare},
        frame_bound=ring_tree_bound,
        counts=_counts,
        busbw_factor=lambda n: (n - 1) / n,
        native=_native,
        secure=lambda sc, send, recv, op, root: sc.allgather(send, recv),
        cost={"ring": Cost(lambda n, t: ring_steps(n, t, False, True), per_rank)},
        doc="ring, encrypt-once under the group key, frames forwarded unchanged",
    )
)
