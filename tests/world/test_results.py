"""Results of the collectives against numpy, one test body on every world (tests/worlds.py): in
the pytest process on 1 to 5 ranks as threads, and on real ranks when pytest runs under mpiexec
(tests/ranks/test_worlds_on_ranks.py launches this file with ``mpiexec -n 2`` and ``-n 3``).

Inputs are small integers from a seed per rank, exact in every dtype and under any order of
reduction, so every rank computes the whole reference itself and every result must equal it bit
for bit, on every rank.  One base class holds the bodies; each suite is a subclass, as mpi4py's
tests take their communicator from the class."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from worlds import ok

REFS = {"sum": np.add, "max": np.maximum, "min": np.minimum, "prod": np.multiply}


def inputs(dname: str, n: int, rank: int, op: str = "sum") -> np.ndarray:
    """Rank ``rank``'s ``n`` elements: integers, exact in ``dname`` under every op order."""
    rng = np.random.default_rng(1000 * rank + 7 * n)
    if dname == "uint8":
        return rng.integers(0, 256, n, dtype=np.uint8)
    dt = np.dtype(ml_dtypes.bfloat16) if dname == "bfloat16" else np.dtype(dname)
    lo, hi = (1, 3) if op == "prod" else (-4, 5)
    return rng.integers(lo, hi, n).astype(dt)


def reference(dname: str, n: int, p: int, op: str) -> np.ndarray:
    """The allreduce of every rank's :func:`inputs` (``avg``: the sum, divided once in the
    dtype, as the engine divides; uint8 sums wrap)."""
    xs = [inputs(dname, n, r, op) for r in range(p)]
    acc = xs[0].copy()
    for x in xs[1:]:
        acc = REFS["sum" if op == "avg" else op](acc, x)
    if op == "avg":
        acc = np.divide(acc, acc.dtype.type(p)).astype(acc.dtype)
    return acc


class BaseResults:
    """The bodies; a subclass names the suite (``SUITE``)."""

    SUITE = "aes-256-gcm"
    KW: dict = {}  #: more SecureComm arguments (the x509 classes: identity)

    def test_uint8_sums_of_1_to_64_bytes(self, world):
        """Both allreduce algorithms, every length from 1 to 64 bytes (a public MPI bug failed
        exactly at 16)."""

        def body(sc):
            out = []
            for alg in ("ring", "recursive_doubling"):
                sc.algorithm = alg
                for n in range(1, 65):
                    x = inputs("uint8", n, sc.rank)
                    y = np.zeros_like(x)
                    sc.allreduce(x, y)
                    out.append(y)
            return out

        want = [reference("uint8", n, world.size, "sum") for _ in range(2) for n in range(1, 65)]
        for got in ok(world.run(body, self.SUITE, **self.KW)):
            assert all(np.array_equal(y, w) for y, w in zip(got, want, strict=True)), self.SUITE

    def test_both_algorithms_every_op_in_many_frames(self, world):
        """Both allreduce algorithms, every op and dtype, hops of many frames (1 KiB chunks) and
        a crypto pool; every rank's result bitwise equal to the reference."""
        cases = [
            (dname, n, op)
            for dname in ("float32", "int32", "float16", "bfloat16")
            for n in (1, 5, 1001, 10007)
            for op in ("sum", "max", "min", "prod") + (("avg",) if dname != "int32" else ())
        ]

        def body(sc):
            out = []
            for alg in ("ring", "recursive_doubling"):
                sc.algorithm = alg
                for dname, n, op in cases:
                    x = inputs(dname, n, sc.rank, op)
                    y = np.zeros_like(x)
                    sc.allreduce(x, y, op=op)
                    out.append(y.tobytes())
            return out

        want = [reference(d, n, world.size, op).tobytes() for _ in range(2) for d, n, op in cases]
        for got in ok(world.run(body, self.SUITE, chunk_bytes=1024, crypto_threads=2, **self.KW)):
            assert got == want, self.SUITE

    def test_bcast_chain_from_every_root(self, world):
        """The pipelined chain (``bcast_chain_bytes=0``) from every root, in chunks of 512 B."""

        def body(sc):
            out = []
            for root in range(sc.size):
                x = inputs("float32", 3001, root) if sc.rank == root else np.zeros(3001, np.float32)
                sc.bcast(x, root=root)
                out.append(x.tobytes())
            return out

        want = [inputs("float32", 3001, root).tobytes() for root in range(world.size)]
        for got in ok(world.run(body, self.SUITE, bcast_chain_bytes=0, chunk_bytes=512, **self.KW)):
            assert got == want, self.SUITE


class TestNone(BaseResults):
    SUITE = "none"


class TestAESGCM(BaseResults):
    SUITE = "aes-256-gcm"


class TestChaCha20Poly1305(BaseResults):
    SUITE = "chacha20-poly1305"


class TestAESGMAC(BaseResults):
    SUITE = "aes-256-gmac"


class TestAESGCMX509(BaseResults):
    """Each rank known by its certificate (tests/identities.py): the same bits as under psk."""

    SUITE = "aes-256-gcm"
    KW = {"identity": "x509"}


class TestChaCha20Poly1305X509(BaseResults):
    SUITE = "chacha20-poly1305"
    KW = {"identity": "x509"}


class TestAESGMACX509(BaseResults):
    SUITE = "aes-256-gmac"
    KW = {"identity": "x509"}


class TestNoneX509(BaseResults):
    SUITE = "none"
    KW = {"identity": "x509"}
