"""Alltoall (MPI_Alltoall semantics) by pairwise exchange: block j of rank r's sendbuf ends as
block r of rank j's recvbuf.  Step s = 1..p-1 sends block (r+s) mod p to rank r+s and receives
block (r-s) mod p from rank r-s, each frame sealed under the direction key of its hop; the own
block is copied locally.  Cost (p-1) alpha + n(p-1)/p beta, crypto (seal and open) on n(p-1)/p
bytes per rank (Thakur, Rabenseifner & Gropp, IJHPCA 19(1) 2005, pairwise-exchange alltoall)."""

from __future__ import annotations

import numpy as np

from ..dtypes import as_bytes, flat
from ..engine import Lend, Recv, Send
from . import Call, Collective, Counts, register
from .common import check_pair, chunk_views
from .cost import Cost, Step
from .native import as_bytes_spec


def alltoall(self, sendbuf: np.ndarray, recvbuf: np.ndarray) -> None:
    """Send block j of ``sendbuf`` to rank j and receive block i of ``recvbuf`` from rank i.

    ``sendbuf``, ``recvbuf``: contiguous arrays of one dtype (as for :meth:`allreduce`) and
    p*m elements each, p the world size and m the same on every rank (blocks of m elements in
    rank order); they must not overlap.  Errors as for :meth:`allreduce`."""
    self._collective("alltoall", sendbuf, recvbuf)


def _args(sendbuf, recvbuf, rank, size, device) -> Call:
    dname = check_pair(sendbuf, recvbuf, same_size=True, device=device)
    if sendbuf.size % size:
        raise ValueError(
            f"alltoall: sendbuf has {sendbuf.size} elements, not a multiple of the "
            f"world size {size} (one block of m elements per rank)"
        )
    return Call(dname, sendbuf.size, sendbuf.itemsize, "none", (flat(sendbuf), flat(recvbuf)))


def pairwise(run, send: np.ndarray, recv: np.ndarray) -> None:
    """Pairwise exchange of ``send``'s blocks into ``recv`` (both flat, p blocks of m)."""
    p, r, isz, ce = run.size, run.rank, run.itemsize, run.chunk_elems
    m = send.size // p
    np.copyto(recv[r * m : (r + 1) * m], send[r * m : (r + 1) * m])
    if p == 1 or m == 0:
        return
    send_u8, recv_u8 = as_bytes(send), as_bytes(recv)
    for s in range(1, p):
        dst, src = (r + s) % p, (r - s) % p
        pieces, _ = chunk_views(send_u8, dst * m, m, ce, isz)
        outs, elems = chunk_views(recv_u8, src * m, m, ce, isz)
        run.exchange(
            # (send and recv never overlap: clear frames go from one, the op's last sends only
            # where their hop is acknowledged, and land in the other)
            Send(dst=dst, step=s - 1, pieces=pieces, lend=Lend.STEP if s < p - 1 else Lend.OP),
            Recv(src=src, step=s - 1, elems=elems, outs=outs, direct=True),
        )


def _frame_bound(p: int, chunks: int) -> int:
    """A direction key r -> j seals one block of m elements per op: at most ceil(m / chunk_elems)
    <= ceil(2 m itemsize / chunk_bytes) <= chunks frames for p >= 2 (chunk_elems >= chunk_bytes /
    (2 itemsize)); the group key is not used."""
    return chunks


def _native(comm, send, recv, op, root):  # pragma: no mutate block (the plaintext baseline)
    comm.Alltoall(as_bytes_spec(send), as_bytes_spec(recv))


def _counts(count, p, rank):
    n = count // p * p  # nccl-tests: S rounded down to p blocks
    return Counts(n, n, n)


def _pairwise_cost(n, topo):  # pragma: no mutate block (cost model: tests/unit/test_model.py)
    """p-1 steps of S/p bytes.  Across nodes (block placement) step s takes min(s, p-s, R) of a
    node's R ranks off the node at once, sharing its NIC: steps s and p-s with s < R have s
    flows, the p-2R+1 others R."""
    p, rpn = topo.p, topo.ranks_per_node
    if p == 1:
        return []
    if topo.nodes == 1:
        return [Step(n / p, False, count=p - 1)]
    spine = topo.nodes > topo.leaf_nodes
    edges = [Step(n / p, True, s, spine, count=2) for s in range(1, rpn)]
    return edges + [Step(n / p, True, rpn, spine, count=p - 2 * rpn + 1)]


register(
    Collective(
        "alltoall",
        code=5,
        method=alltoall,
        args=_args,
        algorithms={"pairwise": pairwise},
        frame_bound=_frame_bound,
        counts=_counts,
        busbw_factor=lambda n: (n - 1) / n,
        native=_native,
        secure=lambda sc, send, recv, op, root: sc.alltoall(send, recv),
        cost={"pairwise": Cost(_pairwise_cost)},
        doc="pairwise exchange, every block sealed under the direction key of its hop",
    )
)
