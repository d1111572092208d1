"""Wire evidence: record every buffer a rank hands to the transport and scan it for plaintext.

:class:`~seccomm.transports.wrappers.RecordingTransport` keeps a private copy of every buffer
passed to ``isend`` (frames) and to the setup collectives (handshake).  :func:`find_plaintext`
looks for every 16-byte window of the plaintext (every offset) in every 16-byte window of the
recording (every offset), so a payload sent in the clear is found wherever it lands in a frame.
:func:`wire_check` runs every collective on random float32 gradients under each suite on real
ranks, with the settings of the configuration under review
(:class:`~seccomm.compliance.config.ReviewConfig`), and reports, per suite, how many plaintext
windows crossed the wire: none for ``aes-256-gcm`` and ``chacha20-poly1305`` (with
``encrypt="all"``); many for ``aes-256-gmac`` (integrity only) and ``none``, which is what shows
the check can fail.  The same search on a packet capture is
:mod:`seccomm.compliance.capture`.
"""

from __future__ import annotations

import numpy as np

from ..suites import SUITES
from ..transports.wrappers import RecordingTransport
from .config import ReviewConfig

WINDOW = 16  #: bytes; a 16-byte window of random float32 data does not occur by chance (2**-128)
ENCRYPTING = tuple(name for name, s in SUITES.items() if s.confidential)
CHECK_SUITES = tuple(SUITES)


def _halves(buf: np.ndarray, window: int = WINDOW):
    """The first and last 8 bytes of every ``window``-byte window of ``buf`` (every offset), as
    two uint64 arrays: unaligned strided views, no copy."""
    n = max(buf.size - window + 1, 0)
    buf = np.ascontiguousarray(buf)
    if n == 0:
        return np.empty(0, np.uint64), np.empty(0, np.uint64)
    return np.ndarray((n,), "<u8", buf, 0, (1,)), np.ndarray((n,), "<u8", buf, window - 8, (1,))


def _keys(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return lo * np.uint64(0x9E3779B97F4A7C15) ^ hi


class WindowIndex:
    """Every ``window``-byte window (every offset) of some byte strings, searchable in bulk.

    :meth:`matches` finds, for every window of a buffer, a window of the index equal to it byte
    for byte: candidates come from sorted 64-bit keys and each is confirmed on the bytes, equal
    keys included, so a result is never a hash collision and no real match is missed.
    """

    def __init__(self, sources: list[np.ndarray], window: int = WINDOW):
        if window < 8 or window > 16:
            raise ValueError("window must be 8..16 bytes")
        self.window = window
        srcs = [np.ascontiguousarray(p).reshape(-1).view(np.uint8) for p in sources]
        halves = [_halves(p, window) for p in srcs]
        self.lo = np.concatenate([h[0] for h in halves]) if halves else np.empty(0, np.uint64)
        self.hi = np.concatenate([h[1] for h in halves]) if halves else np.empty(0, np.uint64)
        keys = _keys(self.lo, self.hi)
        self.order = np.argsort(keys)  # equal keys in any order: matches() tries each
        self.skeys = keys[self.order]
        self.size = int(self.skeys.size)

    def matches(self, buf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(positions in buf, matching window indices)`` of the windows of ``buf`` found."""
        buf = np.ascontiguousarray(buf).reshape(-1).view(np.uint8)
        none = np.empty(0, np.int64)
        if buf.size < self.window or not self.size:
            return none, none
        lo, hi = _halves(buf, self.window)
        k = _keys(lo, hi)
        qo = np.argsort(k)  # searching in key order walks skeys once (cache-friendly): ~10x faster
        left = np.empty(k.size, np.intp)
        left[qo] = np.searchsorted(self.skeys, k[qo], "left")  # one search per window of buf
        cand = np.flatnonzero(self.skeys[np.minimum(left, self.size - 1)] == k)
        src = self.order[left[cand]]
        same = (self.lo[src] == lo[cand]) & (self.hi[src] == hi[cand])
        pos, idx = list(cand[same]), list(src[same])
        rest = cand[~same]  # the key matched, the bytes of its first window did not: rare
        for c, right in zip(rest, np.searchsorted(self.skeys, k[rest], "right")):
            for j in self.order[left[c] + 1 : right]:  # the other windows of an equal key
                if self.lo[j] == lo[c] and self.hi[j] == hi[c]:
                    pos.append(c)
                    idx.append(j)
                    break
        return np.asarray(pos, np.int64), np.asarray(idx, np.int64)


def find_plaintext(recorded: list[np.ndarray], plaintexts: list[np.ndarray], window: int = WINDOW) -> dict:
    """Count the ``window``-byte windows of ``recorded`` buffers (uint8, every offset) that are
    equal to some window of ``plaintexts`` (any dtype, read as bytes, every offset).

    Returns ``hits`` (windows found), ``recorded_bytes``, ``plaintext_windows`` (windows
    searched for; 0 means the search proves nothing) and ``first_hit`` (offset into the
    recording, or -1).  Windows do not span two recorded buffers.
    """
    index = WindowIndex(plaintexts, window)
    recs = [np.ascontiguousarray(r).reshape(-1).view(np.uint8) for r in recorded]
    out = {
        "hits": 0,
        "recorded_bytes": int(sum(r.size for r in recs)),
        "plaintext_windows": index.size,
        "first_hit": -1,
    }
    base = 0
    for r in recs:
        pos, _ = index.matches(r)
        if pos.size and out["first_hit"] < 0:
            out["first_hit"] = int(base + pos.min())
        out["hits"] += int(pos.size)
        base += r.size
    return out


def frames_found(captured: list[np.ndarray], frames: list[np.ndarray]) -> int:
    """How many of ``frames`` (each >= 16 bytes) appear in ``captured``: a frame counts when
    one of three 16-byte windows of it (start, middle, end) is found.  This proves a capture
    holds the traffic it is checked for."""
    owners: dict[bytes, list[int]] = {}  # equal windows (a frame sent twice) share one needle
    for i, f in enumerate(frames):
        f = np.ascontiguousarray(f).reshape(-1).view(np.uint8)
        if f.size >= WINDOW:
            for o in sorted({0, (f.size - WINDOW) // 2, f.size - WINDOW}):
                owners.setdefault(f[o : o + WINDOW].tobytes(), []).append(i)
    needles = list(owners)
    index = WindowIndex([np.frombuffer(n, np.uint8) for n in needles])
    # each needle is one window, so a matching window index is the needle's index
    hit = np.zeros(len(needles), bool)
    for c in captured:
        hit[index.matches(c)[1]] = True
    return len({i for j in np.flatnonzero(hit) for i in owners[needles[j]]})


def gradients(rank: int, count: int, salt: int) -> np.ndarray:
    """``count`` float32 standard-normal values, the same on every rank for (rank, count, salt):
    each rank can rebuild every other rank's inputs to search for them."""
    return np.random.default_rng([rank, count, salt]).standard_normal(count).astype(np.float32)


#: two SecureComm configurations that between them run every algorithm of every collective
PASSES = ({"algorithm": "ring", "bcast_chain_bytes": 0}, {"algorithm": "recursive_doubling"})


def wire_check(
    comm,
    suites=CHECK_SUITES,
    count: int = 1 << 15,
    psk: bytes | None = None,
    timeout: float = 30.0,
    config: ReviewConfig | None = None,
) -> list[dict]:
    """Collective over ``comm`` (an ``mpi4py`` communicator, >= 2 ranks): for each suite, run
    every registered collective (:data:`seccomm.collectives.COLLECTIVES`) under each of
    :data:`PASSES` (allreduce by ring and by recursive doubling, bcast by chain and by binomial
    tree) on random float32 gradients of ``count`` elements (S = 4 * ``count`` bytes, buffers
    from each record's ``counts``), record what this rank hands to the transport, and search it
    for every rank's inputs and every result.  Every ``SecureComm`` uses ``config``'s key
    exchange, chunk size, rotation point and encrypt policy (:meth:`ReviewConfig.settings`;
    default :class:`ReviewConfig`) and the job secret, or ``psk``.

    Returns, identical on every rank, one row per suite: ``suite``, ``wire_bytes`` (all ranks),
    ``plaintext_windows`` (searched for, per rank), ``hits`` (all ranks), ``expect``
    (``"absent"`` for encrypting suites, ``"present"`` otherwise), ``ok`` and ``config`` (what
    it ran with, :meth:`ReviewConfig.record`).
    """
    from mpi4py import MPI

    from ..comm import SecureComm

    config = config or ReviewConfig()
    rows = []
    for si, suite in enumerate(suites):
        plaintexts, recorded = [], []
        for k, passing in enumerate(PASSES):
            sc = SecureComm(
                comm,
                suite,
                psk=psk,
                timeout=timeout,
                wrap_transport=RecordingTransport,
                **config.settings(suite),
                **passing,
            )
            plaintexts += run_every_collective(sc, count, salt=100 * si + 10 * k)
            recorded += [f for _, _, f in sc.transport.frames]
            sc.close()
        res = find_plaintext(recorded, plaintexts)
        tot = np.array([res["hits"], res["recorded_bytes"]], np.int64)
        comm.Allreduce(MPI.IN_PLACE, tot, MPI.SUM)
        expect = "absent" if suite in ENCRYPTING else "present"
        hits = int(tot[0])
        searched = res["plaintext_windows"] > 0 and int(tot[1]) > 0  # else the search proves nothing
        rows.append(
            {
                "suite": suite,
                "wire_bytes": int(tot[1]),
                "plaintext_windows": res["plaintext_windows"],
                "hits": hits,
                "expect": expect,
                "ok": searched and (hits == 0) == (expect == "absent"),
                "config": config.record(suite),
            }
        )
    return rows


def run_every_collective(sc, count: int, salt: int) -> list[np.ndarray]:
    """Run every registered collective once on ``sc`` (root 0, op sum) with float32 gradients;
    return what must not cross the wire in the clear: every rank's inputs (each rank can compute
    them) and this rank's results."""
    from ..collectives import COLLECTIVES

    rank, size = sc.rank, sc.size
    found = []
    for j, coll in enumerate(COLLECTIVES.values()):
        n = [coll.counts(count, size, r) for r in range(size)]
        inputs = [gradients(r, n[r].send, salt + j) for r in range(size)]
        out = np.empty(n[rank].recv, np.float32)
        coll.reset(inputs[rank], out, rank, 0)
        coll.secure(sc, inputs[rank], out, "sum", 0)
        found += inputs + [out]
    return found
