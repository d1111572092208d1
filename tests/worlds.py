"""One test body on any world of ranks, as mpi4py's test suite runs each test on COMM_SELF and
COMM_WORLD: a test that takes the ``world`` fixture (tests/conftest.py) runs in the pytest
process on worlds of 1 to 5 ranks as threads (:mod:`threadworld`; two ranks also paired, as over
MPI), and on real ranks when pytest itself runs under mpiexec::

    mpiexec -n 2 python -m pytest -q tests/world/test_results.py

Every rank runs the same test with the same arguments; ``world.run(body, suite, **kw)`` builds a
``SecureComm`` per rank (keyword arguments as its own), runs ``body(sc)`` on each and returns the
list of what each rank returned (or the exception it raised), on every rank.
``world.run_ranks(fn)`` runs ``fn(comm, rank)`` instead, for ranks that build their own.
``identity="x509"`` gives each rank its own certificate (:mod:`identities`), made by rank 0."""

from __future__ import annotations

import os

from identities import rank_identities
from seccomm import SecureComm
from threadworld import World

PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")
#: the in-process worlds: (ranks, paired)
THREAD_WORLDS = ((1, False), (2, False), (2, True), (3, False), (4, False), (5, False))


def under_mpiexec() -> bool:
    """Whether this pytest runs as one rank of several (MPICH's launcher sets ``PMI_SIZE``)."""
    return int(os.environ.get("PMI_SIZE", "1")) > 1


class ThreadWorld:
    """``size`` ranks as threads in this process (``paired``: two ranks carry the op's record in
    its first frame, as over MPI)."""

    def __init__(self, size: int, paired: bool = False):
        self.size, self.paired = size, paired

    def run(self, body, suite: str = "aes-256-gcm", **kw) -> list:
        kw = {"psk": PSK, "timeout": 2, "crypto_threads": 1, **kw}
        ids = rank_identities(self.size) if kw.get("identity") == "x509" else None
        return self.run_ranks(lambda comm, r: body(SecureComm(comm, suite, **_mine(kw, ids, r))))

    def run_ranks(self, fn) -> list:
        """``fn(comm, rank)`` on every rank, ``comm`` what a ``SecureComm`` is built on (for
        tests whose ranks differ in their arguments); each rank's result, or its exception."""
        world = World(self.size, paired=self.paired)
        trs = world.transports(timeout=3)
        return world.run(lambda r: fn(trs[r], r))


class MPIWorld:
    """The real ranks this pytest is one of (``MPI.COMM_WORLD``)."""

    def __init__(self):
        from mpi4py import MPI

        self.comm = MPI.COMM_WORLD
        self.size = self.comm.Get_size()

    def run(self, body, suite: str = "aes-256-gcm", **kw) -> list:
        rank, ids = self.comm.Get_rank(), None
        if kw.get("identity") == "x509":  # rank 0's, for every rank (the ranks share a disk)
            ids = self.comm.bcast(rank_identities(self.size) if rank == 0 else None)
        kw = _mine(kw, ids, rank)
        sc = SecureComm(self.comm, suite, psk=PSK, timeout=kw.pop("timeout", 20), **kw)
        try:
            res = body(sc)
        except Exception as e:  # noqa: BLE001 - reported to every rank, as a thread world's
            res = e
        finally:
            sc.close()
        return self.comm.allgather(res)

    def run_ranks(self, fn) -> list:
        """As :meth:`ThreadWorld.run_ranks`, on ``MPI.COMM_WORLD``."""
        try:
            res = fn(self.comm, self.comm.Get_rank())
        except Exception as e:  # noqa: BLE001 - reported to every rank, as a thread world's
            res = e
        return self.comm.allgather(res)


def _mine(kw: dict, ids, rank: int) -> dict:
    """``kw`` with rank ``rank``'s identity in place of ``identity="x509"`` (``ids``: each rank's)."""
    return kw if ids is None else {**kw, "identity": ids[rank]}


def params() -> tuple[list, list]:
    """The ``world`` fixture's parameters and their ids: this run's real world under mpiexec,
    else the thread worlds."""
    if under_mpiexec():
        return [None], [f"mpi{os.environ['PMI_SIZE']}"]
    return list(THREAD_WORLDS), [f"threads{p}" + ("-paired" if paired else "") for p, paired in THREAD_WORLDS]


def make(param):
    """The world of one of :func:`params`."""
    return MPIWorld() if param is None else ThreadWorld(*param)


def ok(results: list) -> list:
    """``results`` of :meth:`ThreadWorld.run`/:meth:`MPIWorld.run`, failing on any exception."""
    bad = [r for r in results if isinstance(r, BaseException)]
    assert not bad, bad
    return results
