"""Broadcast with encrypt-once: the root seals each chunk once under the group key; every rank
forwards the frames unchanged and opens them.  Binomial tree for small messages
(lg p (alpha + n beta)), pipelined chain for large ones ((p-1+k-1)(alpha + n/k beta) for k chunks)."""

from __future__ import annotations

from ..dtypes import as_bytes
from . import Collective, register
from .common import chunk_views
from .native import as_bytes_spec


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


def _tree(links):
    def run_tree(run, buf, root):
        p, r = run.size, run.rank
        if p == 1 or buf.size == 0:
            return
        vr = (r - root) % p
        parent, children = links(vr, p)
        views, elems = chunk_views(as_bytes(buf), 0, buf.size, run.chunk_elems, run.itemsize)
        run.relay(None if parent is None else (parent + root) % p,
                  [(c + root) % p for c in children], views, elems, origin=root)
    return run_tree


def _native(comm, send, recv, op, root):
    comm.Bcast(as_bytes_spec(recv), root=root)


def _secure(sc, send, recv, op, root):
    sc.bcast(recv, root=root)


register(Collective(
    "bcast", busbw_factor=lambda n: 1.0,
    buffers=lambda nbytes, isz, size, rank: (nbytes // isz, nbytes // isz),
    secure=_secure, native=_native, reduces=False,
    algorithms={"binomial": _tree(binomial_links), "chain": _tree(chain_links)},
    doc="binomial tree (small) or pipelined chain (large), encrypt-once; recv is the buffer"))
