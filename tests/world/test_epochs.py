"""Keys through epochs, one test body on every world (tests/worlds.py): in the pytest process on
1 to 5 ranks as threads, and on real ranks under mpiexec (tests/ranks/test_worlds_on_ranks.py).

A forced rotation mid-run changes no result, under either key exchange; and no (key, nonce) pair
repeats across ranks, ops, collectives and epochs (an AEAD's confidentiality and integrity both
rest on that: NIST SP 800-38D, section 8).  Inputs are exact small integers
(:func:`test_results.inputs`), so every result must equal the reference bit for bit."""

from __future__ import annotations

import numpy as np

from seccomm.framing import block_counts
from test_results import inputs, reference
from threadworld import record_seals
from worlds import ok


def _ops(sc, i: int) -> list:
    """Op ``i`` of a run: allreduce (each algorithm), reduce_scatter, allgather, bcast from a
    rank that moves with ``i``, alltoall; the results as bytes."""
    n = 64 * i + 1
    x = inputs("float32", n, sc.rank)
    y = np.empty_like(x)
    out = []
    for alg in ("ring", "recursive_doubling"):
        sc.algorithm = alg
        sc.allreduce(x, y)
        out.append(y.tobytes())
    sc.algorithm = "auto"
    counts = sc.block_counts(n)
    z = np.empty(counts[sc.rank], x.dtype)
    sc.reduce_scatter(x, z)
    out.append(z.tobytes())
    sc.allgather(z, y)
    out.append(y.tobytes())
    sc.bcast(y, root=i % sc.size)
    out.append(y.tobytes())
    whole = n // sc.size * sc.size
    w = np.empty(whole, x.dtype)
    sc.alltoall(x[:whole], w)
    out.append(w.tobytes())
    return out


def _want(i: int, p: int, rank: int) -> list:
    n = 64 * i + 1
    full = reference("float32", n, p, "sum")
    counts = block_counts(n, p)
    off = sum(counts[:rank])
    m = n // p  # (elements each rank sends each rank: alltoall of the whole blocks)
    mine = full[off : off + counts[rank]]
    a2a = np.concatenate([inputs("float32", n, r)[rank * m : (rank + 1) * m] for r in range(p)])
    return [full.tobytes(), full.tobytes(), mine.tobytes(), full.tobytes(), full.tobytes(), a2a.tobytes()]


class BaseEpochs:
    """The bodies; a subclass names the suite (``SUITE``)."""

    SUITE = "aes-256-gcm"

    def test_a_rotation_mid_run_changes_no_result(self, world):
        """Every collective, 12 ops, a new epoch every 300 frame bounds at most (chunks of 256 B),
        under psk and psk-dhe: every result exact on every rank, and the keys rotated (at least
        3 epochs on more than one rank)."""
        for mode in ("psk", "psk-dhe"):

            def body(sc):
                return [_ops(sc, i) for i in range(12)], sc.epoch

            res = ok(world.run(body, self.SUITE, rotate_after_frames=300, chunk_bytes=256, key_exchange=mode))
            for rank, (got, epoch) in enumerate(res):
                assert got == [_want(i, world.size, rank) for i in range(12)], (self.SUITE, mode, rank)
                assert world.size == 1 or epoch >= 3, (mode, epoch)

    def test_no_key_and_nonce_pair_repeats(self, world):
        """Every seal of every rank in the run above, gathered: no (key, nonce) pair twice."""

        def body(sc):
            log = []
            record_seals(sc, log)
            for i in range(12):
                _ops(sc, i)
            return log

        logs = ok(world.run(body, self.SUITE, rotate_after_frames=300, chunk_bytes=256))
        seals = [e for log in logs for e in log]
        assert len(seals) == len(set(seals)), self.SUITE
        assert world.size == 1 or len(seals) > 100


class TestAESGCM(BaseEpochs):
    SUITE = "aes-256-gcm"


class TestChaCha20Poly1305(BaseEpochs):
    SUITE = "chacha20-poly1305"


class TestAESGMAC(BaseEpochs):
    SUITE = "aes-256-gmac"
