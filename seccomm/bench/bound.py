"""The best time a perfect implementation could reach, per bench row: how far seccomm is from the
machine's limit, not only from plaintext (formulas and sources: docs/bench.md, "The bound").

Every rank measures, at the start of ``seccomm bench`` and on one core, what one frame of each
suite costs to seal and to open, at two payload sizes: a small frame and the chunk size in use.  A
straight line through the two gives a fixed cost per frame and a cost per byte,
``t(c) = frame_s + c * byte_s``; the slowest rank's line is kept.  The crypto seconds of a row are
those of the row's algorithm as the cost model counts them (:func:`seccomm.costmodel.predict` with
free links and no reduction: the seals and opens on the algorithm's path, chunk by chunk, with
encrypt-once forwarding and the encrypt policy); then

- additive bound = native + crypto (one core does the transfer and the crypto in turn);
- overlapped bound = max(native, crypto) (crypto on cores to spare, fully hidden behind the
  transfer).

``none`` and every hop the policy leaves clear cost no crypto: their bound is native MPI itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ..framing import NONCE_BYTES, Workspace
from ..suites import get_suite

SMALL_FRAME = 256  #: bytes: the small frame of the two-point fit
_BATCHES = 5  # the fastest batch of each size is kept (the least disturbed)
_BATCH_S = 0.004  # seconds of work per batch, at least


@dataclass(frozen=True)
class CryptoRate:
    """One suite's single-core cost of a frame of ``c`` payload bytes: seal ``seal_frame_s +
    c * seal_byte_s`` seconds, open ``open_frame_s + c * open_byte_s``.  ``chunk_bytes``: the
    frame payload the rates are quoted at."""

    suite: str
    chunk_bytes: int
    seal_frame_s: float
    seal_byte_s: float
    open_frame_s: float
    open_byte_s: float

    def gbps(self, which: str, per_byte: bool = False) -> float:
        """Seal (``which="seal"``) or open rate at ``chunk_bytes`` [GB/s = 1e9 B/s], per-frame
        cost included; ``per_byte``: the rate without the per-frame cost (1 / byte cost).
        ``inf`` for a suite that does no work."""
        c = self.chunk_bytes
        t = c * getattr(self, f"{which}_byte_s") + (0.0 if per_byte else getattr(self, f"{which}_frame_s"))
        return c / t / 1e9 if t > 0 else float("inf")


def _per_call(fn) -> float:
    """Seconds per call of ``fn()``: the fastest of a few timed batches."""
    t0, n = time.perf_counter(), 0
    while n == 0 or time.perf_counter() - t0 < _BATCH_S / 4:  # size a batch: at least one call
        fn()
        n += 1
    best = float("inf")
    for _ in range(_BATCHES):
        t0 = time.perf_counter()
        for _ in range(4 * n):
            fn()
        best = min(best, (time.perf_counter() - t0) / (4 * n))
    return best


def _frame_times(key, ws: Workspace, c: int) -> tuple[float, float]:
    """(seal, open) seconds of one frame of ``c`` payload bytes, through the suite's own
    ``seal``/``open`` on a workspace slot, as the engine calls them."""
    slot = ws.slots(f"bound{c}", [c])[0]
    rng = np.random.default_rng(c)
    np.frombuffer(slot.nonce, np.uint8)[:] = rng.integers(0, 256, NONCE_BYTES, np.uint8)
    np.frombuffer(slot.header, np.uint8)[:] = rng.integers(0, 256, len(slot.header), np.uint8)
    plain = rng.integers(0, 256, c, np.uint8)
    out = np.empty(c, np.uint8)
    seal = _per_call(lambda: key.seal(slot, plain))
    return seal, _per_call(lambda: key.open(slot, out))


def measure_rate(suite: str, chunk_bytes: int) -> CryptoRate:
    """This rank's :class:`CryptoRate` of ``suite`` at ``chunk_bytes`` (a fresh random key; no
    traffic).  ``ValueError`` for an unknown suite."""
    s = get_suite(suite)
    key = s.keyed(None if s.aead_class is None else np.random.bytes(32))
    ws = Workspace()
    big = int(chunk_bytes)
    small = min(SMALL_FRAME, big // 4)
    sb, ob = _frame_times(key, ws, big)
    if small < 16:  # a tiny chunk: no second point, all of it counts as per-byte cost
        return CryptoRate(suite, big, 0.0, sb / big, 0.0, ob / big)
    ss, os_ = _frame_times(key, ws, small)

    def fit(t_small, t_big):
        per_byte = (t_big - t_small) / (big - small)
        if not per_byte > 0:  # the points do not fit (a small-frame batch descheduled under load):
            return 0.0, t_big / big  # all of the chunk's time counts as per-byte, as for a tiny chunk
        return max(0.0, t_big - big * per_byte), per_byte

    return CryptoRate(suite, big, *fit(ss, sb), *fit(os_, ob))


def measure_rates(comm, suites, chunk_bytes: int) -> dict[str, CryptoRate]:
    """Every suite's rate on every rank, the slowest rank's kept (elementwise MAX of the costs
    over ``comm``, an mpi4py communicator); the same dict on every rank."""
    from mpi4py import MPI

    names = list(suites)
    local = [measure_rate(s, chunk_bytes) for s in names]
    costs = np.array([[r.seal_frame_s, r.seal_byte_s, r.open_frame_s, r.open_byte_s] for r in local])
    comm.Allreduce(MPI.IN_PLACE, costs, MPI.MAX)
    return {s: CryptoRate(s, int(chunk_bytes), *map(float, row)) for s, row in zip(names, costs)}


def crypto_seconds(coll, algorithm: str, nbytes: int, p: int, nodes: int, encrypt: str, rate) -> float:
    """Seconds of sealing and opening on the path of one ``coll`` call of S = ``nbytes`` on ``p``
    ranks over ``nodes`` nodes (block placement), as the cost model counts them
    (:mod:`seccomm.collectives.cost`), at ``rate`` (:class:`CryptoRate`).  An algorithm the model
    does not describe is counted as the record's first one; ranks that do not fill their nodes
    evenly are counted as one node (then only ``encrypt="all"`` seals, which is exact for it)."""
    from ..costmodel import Link, Params, Topology, predict

    if p < 2 or nbytes <= 0:
        return 0.0
    alg = algorithm if algorithm in coll.cost else next(iter(coll.cost))
    topo = Topology(nodes, p // nodes) if nodes > 0 and p % nodes == 0 else Topology(1, p)
    free = Link(0.0, 0.0)
    frame = (rate.seal_frame_s + rate.open_frame_s) / 2  # the model has one per-frame term
    prm = Params(free, free, 0.0, rate.seal_byte_s, rate.open_byte_s, 1, rate.chunk_bytes, {}, False, frame)
    return predict(coll.name, alg, nbytes, prm, topo, secure=True, encrypt=encrypt)


def bounds(native_s: float, crypto_s: float) -> tuple[float, float]:
    """(additive, overlapped) bound in seconds: native + crypto, and max(native, crypto)."""
    return native_s + crypto_s, max(native_s, crypto_s)
