"""Which ranks share a node: ``Split_type(COMM_TYPE_SHARED)``, leaders' ranks as node ids."""

from __future__ import annotations

import numpy as np


def node_ids(comm) -> tuple[list[int], int]:
    """Return (node id of every rank, number of ranks on this rank's node).

    The node id is the lowest rank on that node.  Collective over ``comm`` (an mpi4py Intracomm).
    """
    from mpi4py import MPI

    shm = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        leader = np.array([comm.Get_rank()], np.int64)
        shm.Bcast(leader, root=0)
        local = shm.Get_size()
    finally:
        shm.Free()
    allv = np.empty(comm.Get_size(), np.int64)
    comm.Allgather(leader, allv)
    return [int(x) for x in allv], local


def local_rank(comm) -> int:
    """This rank's index among the ranks on its node (collective over ``comm``): the usual
    choice of GPU, ``local_rank % device count``."""
    from mpi4py import MPI

    shm = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return shm.Get_rank()
    finally:
        shm.Free()
