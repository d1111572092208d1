"""Broadcast with encrypt-once: the root seals each chunk once under the group key; every rank
forwards the frames unchanged and opens them.  Binomial tree for small messages
(lg p (alpha + n beta)), pipelined chain for large ones ((p-1+k-1)(alpha + n/k beta) for k chunks)."""

from __future__ import annotations

from functools import partial

import numpy as np

from ..dtypes import as_bytes, check_buffer, flat
from . import Call, Collective, Counts, register
from .common import chunk_views, ring_tree_bound, seeded
from .cost import Cost, Step, rd_steps, whole
from .native import as_bytes_spec


def bcast(self, buf: np.ndarray, root: int = 0) -> None:
    """Broadcast ``buf`` from ``root`` to every rank (same size and dtype everywhere).
    Binomial tree at or below ``bcast_chain_bytes``, pipelined chain above.  The root only
    reads ``buf``: there it may be read-only; every other rank's must be writeable.  Errors as
    for :meth:`allreduce`."""
    self._collective("bcast", buf, buf, root=root)


def _args(sendbuf, buf, rank, size, device, root) -> Call:
    dname = check_buffer(buf, "buf", device=device)
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < size:
        raise ValueError(f"root must be a rank in [0, {size - 1}], got {root!r}")
    if not device and rank != root and not buf.flags.writeable:  # the root's is only read
        raise ValueError(f"buf is read-only; only the root's (rank {root}) may be: this rank's is written")
    root = int(root)
    return Call(dname, buf.size, buf.itemsize, "none", (flat(buf), root), root)  # tree() reads it as bytes


def _choose(tuning, nbytes, count, p) -> str:
    return "binomial" if nbytes <= tuning.bcast_chain_bytes else "chain"


def binomial_links(vr: int, p: int):
    """(parent, children) in relative ranks of a binomial tree rooted at 0, biggest subtree first."""
    if vr == 0:
        parent, low = None, 1 << max(p - 1, 1).bit_length()
    else:
        low = vr & -vr
        parent = vr - low
    children, m = [], low >> 1
    while m:
        if vr + m < p:
            children.append(vr + m)
        m >>= 1
    return parent, children


def chain_links(vr: int, p: int):
    return (None if vr == 0 else vr - 1), ([vr + 1] if vr + 1 < p else [])


def tree(links, run, buf, root) -> None:
    """Broadcast ``buf`` from ``root`` down the tree ``links(vr, p) -> (parent, children)`` in
    ranks relative to the root; the records bind ``links`` with ``functools.partial`` (a function
    of the module, not a closure made at import, so each call runs the code as it is now)."""
    p, r = run.size, run.rank
    if p == 1 or buf.size == 0:
        return
    vr = (r - root) % p
    parent, children = links(vr, p)
    views, elems = chunk_views(as_bytes(buf), 0, buf.size, run.chunk_elems, run.itemsize)
    if run.origins is not None:  # identity x509: the root's MACs to every rank, before its frames
        run.origins.start([] if vr == 0 else [(root, len(views))], views if vr == 0 else None)
    run.relay(
        None if parent is None else (parent + root) % p,
        [(c + root) % p for c in children],
        views,
        elems,
        origin=root,
        fan_in=0 if parent is None else len(links(parent, p)[1]),  # (the parent's sends: receipts)
    )


def _native(comm, send, recv, op, root):  # pragma: no mutate block (the plaintext baseline)
    comm.Bcast(as_bytes_spec(recv), root=root)


def _init(dname, op, n, rank, size, root):
    return seeded(dname, op, n, root, size)  # every rank holds the root's data: the bench check


def _reset(send, buf, rank, root):
    """The root's buffer holds the data, every other rank's starts from zeros."""
    if rank == root:
        np.copyto(buf, send)
    else:
        buf.fill(0)


def _binomial_cost(n, topo):  # pragma: no mutate block (cost model: tests/unit/test_model.py)
    """lg p steps of the whole message, frames forwarded as sealed by the root."""
    return [Step(n, s.inter, 1, s.spine, False, False, True) for s in rd_steps(n, topo, False)]


register(
    Collective(
        "bcast",
        code=4,
        method=bcast,
        args=_args,
        choose=_choose,
        algorithms={"binomial": partial(tree, binomial_links), "chain": partial(tree, chain_links)},
        frame_bound=ring_tree_bound,
        counts=lambda count, p, rank: Counts(count, count, count),
        busbw_factor=lambda n: 1.0,
        native=_native,
        secure=lambda sc, send, recv, op, root: sc.bcast(recv, root=root),
        cost={"binomial": Cost(_binomial_cost, whole)},
        rooted=True,
        init=_init,
        reset=_reset,
        doc="binomial tree (small) or pipelined chain (large), encrypt-once; recv is the buffer",
    )
)
