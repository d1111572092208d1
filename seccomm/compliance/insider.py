"""Insider classes of the attacker harness (``seccomm attack``): one rank of the job, holding its
own keys and running seccomm's own code with a change, attacks the others.

Each trial is one ``SecureComm`` on every rank (3 or more) under the configuration under review:

- ``insider-forge-origin``: ring allgather; rank 1, which forwards origin 0's block to rank 2,
  forwards instead frames it sealed itself under the group key in origin 0's name.  Detected
  when rank 2 raises ``AuthenticationError`` naming rank 1, the forger;
- ``insider-inject``: alltoall; rank 2, on the path from rank 0 to rank 1, puts in place of rank
  0's frame to rank 1 one it sealed with the nonce and header that frame has, under its own
  derivation of the 0 -> 1 key.  Detected when rank 1 raises ``AuthenticationError`` naming rank
  0 (the sender of the frame that failed, as for an outsider's injection);
- ``insider-claim-host``: rank 2's own hello says it is on another host (rank 0's, or one
  nobody is on): with ``encrypt="inter-node"``, hops it claims to share a host with would go in
  the clear.  Detected when every rank refuses the setup naming rank 2;
- ``insider-replay-hello``: rank 2, on the path to rank 0, hands rank 0 the hello rank 1 sent in
  the setup before.  Detected when every rank refuses the setup;
- ``insider-forge-notice``: rank 2 seals a give-up notice in rank 1's name ("rank 1 stopped
  after an error of its own") for rank 0 with the best key it has (by turns: its own pair key
  with rank 0, and its derivation of the pair key of ranks 0 and 1), and the link from rank 1 to
  rank 0, which it holds, delivers it while rank 0 waits on rank 1 (a bcast from rank 1).  Taken,
  rank 0 would stop the job in rank 1's name.  Detected when rank 0 refuses the notice (counted
  as forged from rank 1) and every rank finishes the bcast with the root's data.

What the classes show needs per-rank identities (``identity x509``).  Under ``psk`` and
``psk-dhe`` every rank holds a secret from which it can derive or forge what these classes try
(docs/threat-model.md): the rows say *not protected: shared secret*, run nothing, and are
never a pass.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from ..errors import AuthenticationError, ConfigMismatchError, IdentityError, SecCommError, TransportTimeout
from ..handshake import decode_hello, encode_hello
from ..transports import TransportWrapper
from ..transports.base import Backoff, poll_until

INSIDER_CLASSES = (
    "insider-forge-origin",
    "insider-inject",
    "insider-claim-host",
    "insider-replay-hello",
    "insider-forge-notice",
)
#: the expectation of an insider class where every rank holds the job's secret
NOT_PROTECTED = "not protected: shared secret"
_SIDE_TAG = 7411  # the insider's own channel to its on-path position (a tag of the side comm)


def run_insider_class(comm, cls: str, trials: int, config, psk: bytes | None, row) -> dict:
    """Run ``trials`` trials of insider class ``cls`` (collective over ``comm``) under ``config``
    (a :class:`~seccomm.compliance.config.ReviewConfig`) with the job secret or ``psk``; the class's
    row, made by ``row(...)`` (:func:`seccomm.compliance.attack._row`), the same on every rank."""
    from mpi4py import MPI

    from ..suites import get_suite

    record = config.record()
    if not get_suite(config.suite).authenticated:
        why = f"suite {config.suite} authenticates nothing: any rank, inside or out, forges its frames"
        return row(cls, trials, 0, 0, "", record, na=trials, reason=why, suite=config.suite)
    if config.identity != "x509":
        r = row(cls, 0, 0, 0, "", record, suite=config.suite)
        reason = (
            f"not run: under identity {config.identity} every rank holds the job secret, from which it "
            f"derives or forges what this class tries (docs/threat-model.md); run with --identity x509"
        )
        return {**r, "expected": NOT_PROTECTED, "passed": None, "not_applicable_reason": reason}
    if comm.Get_size() < 3:
        why = f"needs >= 3 ranks (an insider besides two honest ranks); this run has {comm.Get_size()}"
        return row(cls, trials, 0, 0, "", record, na=trials, reason=why, suite=config.suite)
    side = comm.Dup()
    detected = silent = other = changed = 0
    examples: list[str] = []
    try:
        for t in range(trials):
            outcome, note = _TRIALS[cls](comm, side, config, psk, t)
            # detected: on every rank; silently accepted: on any rank (a forgery taken there)
            flags = np.array([outcome != "detected", outcome == "silent", note == "changed"], np.int64)
            comm.Allreduce(MPI.IN_PLACE, flags, MPI.MAX)
            silent += int(flags[1])
            changed += int(flags[2])
            detected += int(not flags[0])
            other += int(flags[0] and not flags[1])
            if note and note != "changed" and not examples:
                examples.append(note)
            comm.Barrier()
    finally:
        side.Free()
    ex = next((e for part in comm.allgather(examples) for e in part), "")
    return row(cls, trials, detected, silent, ex, record, other=other, changed=changed, suite=config.suite)


def _comm(comm, config, psk, wrap=None, **kw):
    from ..comm import SecureComm

    return SecureComm(
        comm, config.suite, psk=psk, timeout=2.0, wrap_transport=wrap, **{**config.settings(), **kw}
    )


def _judged(rank: int, err, out, want, victim: int, blamed: int) -> tuple[str, str]:
    """One rank's outcome of an op trial (:func:`_verdict`): ``out`` against ``want``; rank
    ``victim`` must raise ``AuthenticationError`` naming ``blamed``, the others any seccomm error
    or none."""
    wrong = err is None and not np.array_equal(out, want)
    if rank == victim:
        return _verdict(err, isinstance(err, AuthenticationError) and err.peer == blamed, wrong, True)
    return _verdict(err, err is None or isinstance(err, SecCommError), wrong, False)


def _verdict(err, good: bool, wrong: bool, mine: bool) -> tuple[str, str]:
    """``("detected" | "silent" | "other", note)`` of one rank: ``good``: this rank's error is the
    one the class expects of it (or it expects none); ``wrong``: it returned a wrong result;
    ``mine``: this rank is the victim whose error is the note."""
    if err is None and not wrong:
        return ("silent" if mine else "detected"), ""
    if err is None:
        return "silent", "changed"  # (a forgery reached this rank's result)
    note = f"{type(err).__name__}: {err}" if mine else ""
    return ("detected" if good else "other"), note


# -- group frame in another origin's name -------------------------------------------------------
def _forge_origin(comm, side, config, psk, t):
    from ..collectives import allgather as ag
    from ..engine import Send

    rank, size = comm.Get_rank(), comm.Get_size()
    real = ag._forward

    def forward(run, nxt, prev, recv):  # rank 1: origin 0's block, sealed here, in its name
        if prev is None or prev.origin != 0:
            return real(run, nxt, prev, recv)
        pieces = [memoryview(np.full(n, 0x41 + t % 8, np.uint8)) for n in prev.sizes]
        run.exchange(Send(dst=nxt, group=True, origin=0, pieces=pieces, ws="forged"), recv)

    if rank == 1:
        ag._forward = forward
    err, n = None, 64
    out = np.zeros(n * size, np.float32)
    try:
        with _comm(comm, config, psk, algorithm="ring") as sc:
            sc.allgather(np.full(n, rank + 1.0, np.float32), out)
    except SecCommError as e:
        err = e
    finally:
        ag._forward = real
    return _judged(rank, err, out, np.repeat(np.arange(1, size + 1, dtype=np.float32), n), victim=2, blamed=1)


# -- a direction frame on a link between two others ---------------------------------------------
class _OnPath(TransportWrapper):
    """Rank 1's link from rank 0, held by the insider (rank 2): the first frame from rank 0 of
    the op is replaced, once it is in, by the bytes rank 2 sends over ``side``."""

    def __init__(self, inner, side):
        super().__init__(inner)
        self.side, self.armed, self.req = side, False, None

    def irecv(self, buf, peer):
        req = self.inner.irecv(buf, peer)
        if self.armed and peer == 0 and self.req is None:
            self.req, self.buf = req, buf
        return req

    def wait_recv(self, req, peer):
        got = self.inner.wait_recv(req, peer)
        if req is self.req:
            forged = np.empty(len(np.asarray(self.buf)), np.uint8)
            side = self.side.Irecv(forged, source=2, tag=_SIDE_TAG)
            if not poll_until(side.Test, 10.0, lambda: False, Backoff(sleep_s=0.001)):
                side.Cancel()
                side.Wait()
                raise TransportTimeout("attack harness: the insider's frame never came", peer=2, op="attack")
            np.asarray(self.buf)[:] = forged
        return got


def _inject(comm, side, config, psk, t):
    from ..collectives import get_collective

    rank, size = comm.Get_rank(), comm.Get_size()
    m = 16  # float32 elements of each block: one frame
    algorithms = get_collective("alltoall").algorithms  # (the registry's: what a call runs)
    real = algorithms["pairwise"]

    def pairwise(run, send, recv):  # rank 2: rank 0's frame to rank 1, as rank 2 can make it
        slot = run.ws.slots("forged", [m * run.itemsize])[0]
        key = run.protect(False, 0, 1)  # this rank's derivation of the 0 -> 1 direction key
        run.fill(slot, key.suite, False, 0, 0, 1, 0, 1, m)  # step 0, chunk 0 of 1, from 0 to 1
        key.seal(slot, memoryview(np.full(m * run.itemsize, 0x41, np.uint8)))
        side.Send(np.frombuffer(bytes(slot.frame), np.uint8), dest=1, tag=_SIDE_TAG)
        return real(run, send, recv)

    wrap = None
    if rank == 2:
        algorithms["pairwise"] = pairwise
    if rank == 1:
        wrap = lambda tr: _OnPath(tr, side)  # noqa: E731
    err = None
    out = np.zeros(m * size, np.float32)
    x = np.arange(m * size, dtype=np.float32) + 100 * rank
    try:
        with _comm(comm, config, psk, wrap) as sc:
            if rank == 1:
                sc.transport.armed = True
            sc.alltoall(x, out)
    except SecCommError as e:
        err = e
    finally:
        algorithms["pairwise"] = real
    want = np.concatenate(
        [np.arange(m * rank, m * (rank + 1), dtype=np.float32) + 100 * j for j in range(size)]
    )
    return _judged(rank, err, out, want, victim=1, blamed=0)


# -- setup messages ------------------------------------------------------------------------------
class _ClaimsHost(TransportWrapper):
    """This rank's own hello, sent with another host key (``claim``), MACed under ``key`` (the
    hello key of the PSK mixed in, which an insider holds; None where there is none)."""

    claim, key = 0, None

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        if op_label == "setup: hello":
            h = decode_hello(np.asarray(sendbuf).tobytes())
            if h is not None and not h.error:
                sendbuf = encode_hello(replace(h, host=self.claim), self.key)
        return self.inner.allgather(sendbuf, recvbuf, op_label, timeout)


def _setup_refused(err, blamed=None) -> bool:
    """A setup error naming a rank of the job (``blamed``: that rank)."""
    ok = isinstance(err, (ConfigMismatchError, IdentityError)) or (
        isinstance(err, AuthenticationError) and err.op == "setup"
    )
    return ok and (err.peer == blamed if blamed is not None else err.peer is not None)


def _claim_host(comm, side, config, psk, t):
    from ..topology import name_key

    from ..identity import load_identity

    rank = comm.Get_rank()
    hosts = comm.allgather(name_key(load_identity().me.host))  # (the honest keys: the certificates')
    claim = hosts[0] if hosts[0] != hosts[2] else name_key(f"elsewhere-{t}.invalid")

    class Claim(_ClaimsHost):
        pass

    Claim.claim = claim
    if psk:
        from ..handshake import job_digest
        from ..keys import hello_key
        from ..options import job_id_of

        Claim.key = hello_key(psk, job_digest(job_id_of(None)))
    err = None
    try:
        _comm(comm, config, psk, Claim if rank == 2 else None, encrypt="inter-node").close()
    except SecCommError as e:
        err = e
    if err is None:
        return "silent", ""
    return (
        "detected" if _setup_refused(err, 2) else "other"
    ), f"{type(err).__name__}: {err}" if rank == 0 else ""


class _Hellos(TransportWrapper):
    """Keeps every hello block received (``seen``); with ``old`` (rank 1's hello of an earlier
    setup), hands this rank that block in rank 1's place."""

    def __init__(self, inner, old=None):
        super().__init__(inner)
        self.old, self.seen = old, []

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        out = self.inner.allgather(sendbuf, recvbuf, op_label, timeout)
        if op_label == "setup: hello":
            rows = np.asarray(recvbuf).reshape(self.size, -1)
            self.seen.append(rows[1].copy())
            if self.old is not None:
                rows[1] = self.old
        return out


def _replay_hello(comm, side, config, psk, t):
    rank = comm.Get_rank()
    a = _comm(comm, config, psk, _Hellos)
    a.close()
    old = a.transport.seen[0]

    def wrap(tr):
        return _Hellos(tr, old)

    err = None
    try:
        _comm(comm, config, psk, wrap if rank == 0 else None).close()
    except SecCommError as e:
        err = e
    if err is None:
        return "silent", ""
    return (
        "detected" if _setup_refused(err) else "other"
    ), f"{type(err).__name__}: {err}" if rank == 0 else ""


# -- a give-up notice in another rank's name ----------------------------------------------------
def _forge_notice(comm, side, config, psk, t):
    from mpi4py import MPI

    from ..control import PairMacs
    from ..keys import KeySchedule
    from ..transports.notices import _FAILED, NOTICE_BYTES, seal_notice

    rank, size = comm.Get_rank(), comm.Get_size()
    n = 64
    buf = np.full(n, 7.0 + t, np.float32) if rank == 1 else np.zeros(n, np.float32)
    err, forged, wire = None, np.empty(NOTICE_BYTES, np.uint8), None
    sc = None
    try:
        sc = _comm(comm, config, psk)
        if rank == 2:  # the insider: its best key for the pair of ranks 0 and 1
            k = sc.session.keys
            if t % 2:
                as_1 = KeySchedule(k._secret, k.suite, k._salt, k._context, 1)  # noqa: SLF001
                macs = PairMacs(1, size, as_1.pair_key)
            else:
                macs = PairMacs(1, size, lambda a, b: k.pair_key(0, 2))
            side.Send(seal_notice(macs, 0, 1, _FAILED), dest=1, tag=_SIDE_TAG)
        if rank == 1:  # the link from rank 1 to rank 0 (the insider's): its notice goes in
            side.Recv(forged, source=2, tag=_SIDE_TAG)
            notices = sc.transport.notices
            wire = notices.comm.Isend([forged, MPI.BYTE], 0, notices.tag)
            time.sleep(0.2)  # (rank 0 waits on rank 1, looking at the notices)
        sc.bcast(buf, root=1)
    except SecCommError as e:
        err = e
    if wire is not None and not poll_until(wire.Test, 5.0, lambda: False, Backoff(sleep_s=0.001)):
        wire.Cancel()  # (never matched: rank 0 had stopped listening)
        wire.Wait()
    told = None
    if sc is not None:
        if rank == 0 and err is None:
            sc.transport.notices.check()  # (what its next wait would look at)
            told = sc.transport.notices.told
        try:
            sc.close()
        except SecCommError as e:
            err = err or e
    wrong = err is None and not np.array_equal(buf, np.full(n, 7.0 + t, np.float32))
    if rank != 0:
        return _verdict(err, err is None or isinstance(err, SecCommError), wrong, False)
    if err is not None and getattr(err, "peer", None) == 1:
        return "silent", f"accepted: rank 0 stopped in rank 1's name: {type(err).__name__}: {err}"
    if told is not None and 1 in told.gave_up:
        return "silent", "accepted: rank 0 took the notice as rank 1's"
    if told is not None and not wrong and told.forged_notices.get(1, 0) >= 1:
        return "detected", (
            "rank 0 refused a give-up notice in rank 1's name (its MAC failed: counted as forged "
            "from rank 1) and finished the bcast with rank 1's data"
        )
    return _verdict(err, False, wrong, True)


_TRIALS = {
    "insider-forge-origin": _forge_origin,
    "insider-inject": _inject,
    "insider-claim-host": _claim_host,
    "insider-replay-hello": _replay_hello,
    "insider-forge-notice": _forge_notice,
}
