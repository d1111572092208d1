"""Which ranks share a node: every rank's host key (a hash of its host name), carried in its
authenticated setup hello (:mod:`seccomm.handshake`), and the lowest rank on each host as its
node id."""

from __future__ import annotations

import hashlib
import socket
import sys


def host_key() -> int:
    """A 63-bit key of this host's name: MPI's processor name when MPI is already loaded (never
    loaded here: that would initialise MPI in a torch.distributed job), else the host name."""
    mpi = sys.modules.get("mpi4py.MPI")
    return name_key(mpi.Get_processor_name() if mpi is not None else socket.gethostname())


def name_key(name: str) -> int:
    """The 63-bit host key of the host name ``name``: the first 8 bytes of its SHA-256, shifted
    right by one (a rank's :func:`host_key`, or under ``identity="x509"`` the name its
    certificate gives)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") >> 1


def node_ids_from_keys(keys: list[int], rank: int) -> tuple[list[int], int]:
    """(node id of every rank, ranks on ``rank``'s node) from every rank's host key; the node id
    is the lowest rank on that host."""
    first: dict[int, int] = {}
    for r, k in enumerate(keys):
        first.setdefault(k, r)
    ids = [first[k] for k in keys]
    return ids, sum(1 for x in ids if x == ids[rank])


def local_rank(comm) -> int:
    """This rank's index among the ranks on its node (collective over ``comm``, an mpi4py
    communicator): the usual choice of GPU, ``local_rank % device count``."""
    import numpy as np

    keys = np.empty(comm.Get_size(), np.int64)
    comm.Allgather(np.array([host_key()], np.int64), keys)
    mine = keys[comm.Get_rank()]
    return int((keys[: comm.Get_rank()] == mine).sum())
