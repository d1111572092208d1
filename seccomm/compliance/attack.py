"""On-path attacker harness (``seccomm attack``): a transport wrapper between ``SecureComm`` and
the real MPI transport that, on a seeded schedule, alters what one rank puts on the wire.

Attack classes (each trial is one fresh ``SecureComm`` and one allreduce on real ranks):

- ``flip-payload``, ``flip-tag``: one bit of a frame's body or tag;
- ``replay``: a frame from the previous operation (same size) instead of the current one;
- ``swap``: two chunks of one hop exchanged;
- ``truncate``: the frame shortened by 1..16 bytes;
- ``inject``: a frame with the right nonce and AAD sealed under a key the attacker made up;
- ``redirect``: a frame this rank sealed for another peer delivered in place of this peer's;
- ``drop``: the frame never arrives (detected as a timeout naming the peer).

A trial counts as *detected* when the receiving rank raises ``AuthenticationError`` naming the
attacking peer and the operation (``TransportTimeout`` naming it for drops), and as *silently
accepted* when any rank returns a value that differs from the honest result.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ..errors import AuthenticationError, SecCommError, TransportTimeout
from ..transports import TransportWrapper, host_bytes

CLASSES = ("flip-payload", "flip-tag", "replay", "swap", "truncate", "inject", "redirect", "drop")


class _Done:
    """A completed send request stand-in (for dropped frames)."""

    def Test(self, *a):  # noqa: N802 - mpi4py naming
        return True


class AttackTransport(TransportWrapper):
    """Once ``armed``, alters the ``target``-th frame this rank sends (0-based).  Frames sent
    before (the trial's first, honest operation) are kept as replay and redirect material."""

    def __init__(self, inner, cls: str, target: int, rng: np.random.Generator):
        super().__init__(inner)
        self.cls, self.target, self.rng = cls, target, rng
        self.armed, self.sent, self.fired, self.victim = False, 0, False, None
        self.history: dict = {}  # (peer, nbytes) -> [frames], in sending order
        self._held = None

    def isend(self, buf, peer):
        frame = host_bytes(buf)
        mine = self.history.setdefault((peer, frame.size), [])
        if not self.armed:
            mine.append(frame.copy())
            return self.inner.isend(buf, peer)
        i, self.sent = self.sent, self.sent + 1
        if i != self.target or self.fired:
            r = self.inner.isend(buf, peer)
            if self._held is not None:  # swap: the held frame follows the next one
                held_peer, held = self._held
                self._held = None
                self.send_own(held, held_peer)
            return r
        self.fired, self.victim = True, peer
        out = frame.copy()
        if self.cls == "flip-payload":
            out[self.rng.integers(0, max(1, out.size - 16))] ^= 1 << int(self.rng.integers(0, 8))
        elif self.cls == "flip-tag":
            out[out.size - 16 + int(self.rng.integers(0, 16))] ^= 1 << int(self.rng.integers(0, 8))
        elif self.cls == "replay":  # the same hop's frame of the previous operation
            out = mine[0].copy() if mine else out
        elif self.cls == "truncate":
            out = out[: max(0, out.size - int(self.rng.integers(1, 17)))].copy()
        elif self.cls == "inject":
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            body = os.urandom(out.size - 16)
            out = np.frombuffer(AESGCM(os.urandom(32)).encrypt(os.urandom(12), body, b""), np.uint8).copy()
        elif self.cls == "redirect":  # a frame sealed for another peer, delivered here
            other = [f for (p, n), fs in self.history.items() if p != peer and n == frame.size for f in fs]
            out = other[-1].copy() if other else out
        elif self.cls == "swap":
            self._held = (peer, out)
            return _Done()
        elif self.cls == "drop":
            return _Done()
        return self.send_own(out, peer)


def run_class(
    comm,
    cls: str,
    trials: int,
    seed: int = 0,
    count: int = 1024,
    timeout: float = 2.0,
    psk: bytes | None = None,
    suite: str = "aes-256-gcm",
) -> dict:
    """Run ``trials`` attacks of class ``cls`` (collective over ``comm``, >= 2 ranks; ``redirect``
    needs >= 3).  Returns, identical on every rank: trials, detected, silently_accepted, examples."""
    from mpi4py import MPI

    from ..comm import SecureComm

    size, rank = comm.Get_size(), comm.Get_rank()
    rng = np.random.default_rng(seed + 7919 * CLASSES.index(cls))
    detected = silent = 0
    examples: list[str] = []
    x = np.arange(count, dtype=np.float32) + rank
    honest = np.empty_like(x)
    comm.Allreduce(x, honest)
    chunk = 1024 if cls == "swap" else 1 << 20  # swap needs >= 2 chunks per hop
    alg = "recursive_doubling" if cls == "redirect" else "ring" if cls == "swap" else "auto"
    for t in range(trials):
        # redirect: rank 1 is the rank that seals frames of one size for two peers (recursive
        # doubling's fold on 3 ranks, or its two partners on 4); elsewhere any rank attacks
        attacker = 1 if cls == "redirect" else int(rng.integers(0, size))
        target = 0  # the first frame of the attacked operation (on 2 ranks the only one)
        if cls == "redirect":
            target = 1  # the second partner's frame is replaced by the first partner's
        wrap = (
            (lambda tr: AttackTransport(tr, cls, target, np.random.default_rng(seed * 1000 + t)))
            if rank == attacker
            else None
        )
        # short deadlines where a rank is left waiting by design (drop; swap's allgather phase)
        wait = 0.15 if cls == "drop" else 0.3 if cls == "swap" else timeout
        sc = SecureComm(
            comm, suite, psk=psk, timeout=wait, chunk_bytes=chunk, algorithm=alg, wrap_transport=wrap
        )
        y = np.empty_like(x)
        sc.allreduce(x, y)  # honest operation: its frames are the attacker's material
        if rank == attacker:
            sc.transport.armed = True
        y.fill(np.nan)
        err = None
        try:
            sc.allreduce(x, y)
        except SecCommError as e:
            err = e
        victim = sc.transport.victim if rank == attacker else None
        sc.close()
        info = np.array([-1 if victim is None else victim], np.int64)
        comm.Allreduce(MPI.IN_PLACE, info, MPI.MAX)
        victim = int(info[0])
        wrong = err is None and not np.array_equal(y, honest)
        if rank == victim:
            want = TransportTimeout if cls == "drop" else AuthenticationError
            ok_here = isinstance(err, want) and err.peer == attacker and "allreduce" in str(err.op)
            if err is not None and not examples:
                examples.append(f"{type(err).__name__}: {err}")
        else:
            ok_here = not wrong and victim >= 0
        flags = np.array([0 if ok_here else 1, 1 if wrong else 0], np.int64)
        comm.Allreduce(MPI.IN_PLACE, flags, MPI.SUM)
        detected += int(flags[0] == 0)
        silent += int(flags[1] > 0)
        comm.Barrier()
    ex = comm.allgather(examples)
    return {
        "class": cls,
        "trials": trials,
        "detected": detected,
        "silently_accepted": silent,
        "example": next((e for part in ex for e in part), ""),
    }


def _polite_barrier(comm) -> None:
    req = comm.Ibarrier()
    while not req.Test():
        time.sleep(0.002)


def run_classes(comm, classes, trials: int, seed: int, log=print, suite: str = "aes-256-gcm") -> list[dict]:
    """Run every attack class in ``classes`` (collective over ``comm``); ``log(line)`` is called
    on rank 0 with the header and one table row per class.  Returns the rows on every rank."""
    from mpi4py import MPI

    rank = comm.Get_rank()
    rows = []
    if rank == 0:
        log(
            f"# seccomm attack: {comm.Get_size()} ranks, {suite}, {trials} trials per class, seed {seed}; "
            f"every class on ranks 0-1 except redirect (all ranks)"
        )
        log(
            f"# {'attack class':>14} {'trials':>7} {'detected':>9} {'silently accepted':>18} "
            f"{'time [s]':>9}  example"
        )
    # Two ranks for every class but redirect (the victim is the attacker's only peer, so no rank
    # is left waiting for a deadline); redirect needs a rank that seals for two peers: 3 or more.
    pair = comm.Split(0 if rank < 2 else MPI.UNDEFINED, rank)
    for cls in classes:
        tc = time.time()
        if cls == "redirect":
            if comm.Get_size() < 3:  # reported as a class with 0 of 0 detected: the run fails
                r = {
                    "class": cls,
                    "trials": 0,
                    "detected": 0,
                    "silently_accepted": 0,
                    "seconds": 0.0,
                    "example": "not run: needs >= 3 ranks",
                }
                rows.append(r)
                if rank == 0:
                    log(f"  {cls:>14} {'-':>7} {'-':>9} {'-':>18}  needs >= 3 ranks (run with --np 3)")
                continue
            r = run_class(comm, cls, trials, seed, suite=suite)
        else:
            r = run_class(pair, cls, trials, seed, suite=suite) if pair != MPI.COMM_NULL else None
            _polite_barrier(comm)  # idle ranks must not spin on the cores the pair is using
            r = comm.bcast(r, root=0)
        r["seconds"] = round(time.time() - tc, 1)
        rows.append(r)
        if rank == 0:
            log(
                f"  {cls:>14} {r['trials']:>7} {r['detected']:>9} {r['silently_accepted']:>18} "
                f"{r['seconds']:9.1f}  {r['example'][:90]}"
            )
    if pair != MPI.COMM_NULL:
        pair.Free()
    return rows


def main_ranks(classes, trials: int, seed: int, suite: str = "aes-256-gcm") -> int:
    """Every rank of ``seccomm attack``: run ``classes`` on ``MPI.COMM_WORLD``, rank 0 prints the
    table and a verdict line.  Exit status 1 when any attack went undetected or a class did not
    run, else 0."""
    from mpi4py import MPI

    t0 = time.time()
    rows = run_classes(MPI.COMM_WORLD, classes, trials, seed, log=lambda s: print(s, flush=True), suite=suite)
    bad = [r for r in rows if r["silently_accepted"] or r["detected"] < r["trials"] or not r["trials"]]
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(
            f"# {'OK' if not bad else 'FAILED'}: {sum(r['trials'] for r in rows)} attacks, "
            f"{sum(r['silently_accepted'] for r in rows)} silently accepted, {time.time() - t0:.0f} s"
        )
    return 1 if bad else 0
