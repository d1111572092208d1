"""Give-up notices: how the ranks of an MPI job learn which rank to blame when one stops.

A rank whose wait passed its deadline, or that stopped after an error, tells the others whom it
blames, so every survivor names the rank that stopped, not the neighbour that stalled because of
it (failure propagation).  :class:`Notices` is that mechanism for one
:class:`~seccomm.transports.mpi.MPITransport`, which owns it: one small receive per peer, posted
up front, looked at while the transport waits.

Notices are authenticated and bound to their sender and receiver (:func:`seal_notice`): 32
bytes, ``blamed rank (int64) | kind (int64) | tag`` with the tag of the pair's control MAC
(:mod:`seccomm.control`, label "notice": HMAC-SHA256 under the key of the sender and receiver,
whose input names both; handed over by :meth:`Notices.authenticate` once the session keys
exist).  The key is derived with the session's salt, so it binds the communicator (session); the
MAC binds the sender (the source rank the receive was posted for), the receiver, the blamed rank
and the kind.  A notice whose MAC fails, or of the wrong size, is ignored, counted in
``forged_notices`` (:class:`~seccomm.transports.blame.Told`) and named in the error this
rank raises; the receive from that rank is posted
again, so a forgery cannot block the genuine notice.  Before the keys are handed over (during
setup) no notice is sent or read: a rank whose setup wait expires blames the rank (or, for a
setup collective, the collective) it waited on, within its deadline.  Under psk an insider rank
can derive every pair's key and forge a notice in another rank's name, as it can forge group
frames; under psk-dhe the pair key needs the pair's X25519 secret, and under identity x509 those
secrets come from shares each rank signed, so no third rank holds them.  An on-path attacker can still
drop or garble notices, which only leaves the survivors to their own deadlines.
"""

from __future__ import annotations

import hmac
import struct

import numpy as np

from .base import Backoff, poll_until
from .blame import UNKNOWN_SENDER, Told

_DRAIN = 1024  # messages on the notice tag that are not notices, taken per peer in one look
#: a rank that has waited this share of the deadline on a peer that gave up on it did not stall:
#: the two waited on each other (a rank that stalled elsewhere sees the notice at its first look)
_MUTUAL_WAIT = 0.25
#: kinds of give-up notice: gave up waiting on the blamed rank (the kind's low 8 bits are _WAITED,
#: the bits above the number of the op it gave up in, 0 outside an op: :func:`waited_kind`);
#: stopped after a bad frame from the blamed rank; stopped after an error of its own (the blamed
#: rank is the sender); refused its own arguments to an op (the blamed rank is the sender; the
#: kind's low 4 bits are _REFUSED, the next 4 the exception, :data:`REFUSALS`, the bits above the
#: op sequence number it refused)
_WAITED, _ABORT, _FAILED, _REFUSED = 0, 1, 2, 3
#: exceptions a refusal notice can name, by code (1, 2)
REFUSALS = ("ValueError", "TypeError")
_NOTICE = struct.Struct(">qq")  # blamed rank, kind
NOTICE_BYTES = _NOTICE.size + 16  # and the tag (seccomm.control)
_NOTICE_LABEL = b"notice"


def seal_notice(macs, receiver: int, blamed: int, kind: int) -> np.ndarray:
    """The notice this rank sends ``receiver``: ``blamed | kind | tag`` (:data:`NOTICE_BYTES`
    uint8; ``macs``: this rank's :class:`~seccomm.control.PairMacs`)."""
    body = _NOTICE.pack(blamed, kind)
    return np.frombuffer(body + macs.tags(_NOTICE_LABEL, receiver, body)[0], np.uint8).copy()


def open_notice(macs, sender: int, msg: bytes, size: int):
    """``(blamed, kind)`` of a notice this rank received from ``sender``, or ``None`` when it is
    not authentic (wrong tag, wrong length) or names no rank of ``size`` / no known kind."""
    if len(msg) != NOTICE_BYTES:
        return None
    body, tag = msg[: _NOTICE.size], msg[_NOTICE.size :]
    if not hmac.compare_digest(macs.tags(_NOTICE_LABEL, sender, body)[1], tag):
        return None
    blamed, kind = _NOTICE.unpack(body)
    if blamed == UNKNOWN_SENDER and kind == _ABORT:
        return blamed, kind
    return (blamed, kind) if 0 <= blamed < size and _known_kind(kind) else None


def refusal_kind(seq: int, error: str) -> int:
    """The notice kind of a rank that refused its own arguments to its op ``seq`` with the
    exception named ``error`` (one of :data:`REFUSALS`)."""
    return _REFUSED | (REFUSALS.index(error) + 1) << 4 | (seq if 0 < seq < 1 << 55 else 0) << 8


def refusal(kind: int) -> tuple[int, str]:
    """``(seq, error)`` of a refusal notice's kind (see :func:`refusal_kind`)."""
    return kind >> 8, REFUSALS[(kind >> 4 & 0xF) - 1]


def waited_kind(op_label: str) -> int:
    """The notice kind of a rank that gave up waiting in the op ``op_label`` ("allreduce #5":
    its number rides in the kind; 0 for a label without one, such as setup or close)."""
    head, _, num = op_label.rpartition(" #")
    seq = int(num) if head and num.isdigit() else 0
    return _WAITED | (seq if 0 < seq < 1 << 55 else 0) << 8


def _known_kind(kind: int) -> bool:
    if kind in (_ABORT, _FAILED) or (kind >= 0 and kind & 0xFF == _WAITED):
        return True
    return kind >= 0 and kind & 0xF == _REFUSED and 1 <= (kind >> 4 & 0xF) <= len(REFUSALS)


class Notices:
    """The give-up notices of one MPI transport's private communicator ``comm`` (``MPI``: the
    ``mpi4py.MPI`` module; notices on tag ``tag``).  What arrived so far: ``told``
    (:class:`~seccomm.transports.blame.Told`, which also says whom to blame).  ``sent``: this rank's
    notice (one per run: a ``None`` marker, then each message and its send request)."""

    def __init__(self, comm, MPI, rank: int, size: int, tag: int):  # noqa: N803 - the module
        self.comm, self._MPI, self.rank, self.size, self.tag = comm, MPI, rank, size, tag
        self._byte = MPI.BYTE
        self.grace = 5.0  # seconds at most to wait for the chain of notices to settle (give_up)
        self.macs = None  # PairMacs, set by authenticate
        self.told = Told(rank)
        self._status = MPI.Status()
        self.buf = np.zeros((max(size, 1), NOTICE_BYTES), np.uint8)
        self.reqs = [MPI.REQUEST_NULL] * size
        for r in range(size):
            if r != rank:
                self.post(r)
        self.sent: list = []
        self.closed = False  # (close(): the communicator is gone, nothing more is sent)

    def authenticate(self, macs) -> None:
        """From now on send and believe only notices MACed with ``macs`` (this rank's
        :class:`~seccomm.control.PairMacs` of the session); before this, none are sent or read."""
        self.macs = macs

    def post(self, r: int) -> None:
        """Post the receive of rank ``r``'s notice."""
        self.reqs[r] = self.comm.Irecv([self.buf[r], self._byte], r, self.tag)

    def abort(self, blame) -> None:
        """This rank stopped after an error in a frame from ``blame`` (``"any"``: a message
        whose sender MPI could not say): tell the others."""
        self._tell(int(blame) if isinstance(blame, (int, np.integer)) else UNKNOWN_SENDER, _ABORT)

    def fail(self) -> None:
        """This rank stopped after an error of its own: tell the others."""
        self._tell(self.rank, _FAILED)

    def refuse(self, seq: int, error: str) -> None:
        """This rank refused its own arguments to its op ``seq`` (``error``: the exception's
        name): tell the others."""
        self._tell(self.rank, refusal_kind(seq, error if error in REFUSALS else "ValueError"))

    def _tell(self, blamed: int, kind: int) -> None:
        """Send this rank's notice and drive it out for at most 0.2 s; nothing once closed (the
        communicator is gone)."""
        if not self.closed:
            self.notify(blamed, kind)
            self.flush(0.2)

    def close(self) -> None:
        """Cancel the notice receives (unmatched: safe to cancel) and drop the pair keys."""
        MPI = self._MPI
        for req in self.reqs:
            if req != MPI.REQUEST_NULL:
                try:
                    req.Cancel()
                    req.Wait()
                except MPI.Exception:
                    pass
        self.reqs = []
        self.macs = None
        self.closed = True

    def check(self) -> bool:
        """Collect authentic give-up notices that arrived (none before
        :meth:`authenticate`); True if any rank has given up."""
        key, st = self.macs, self._status
        if key is None:
            return False
        for r in range(self.size):
            for _ in range(_DRAIN):  # (forgeries in a row from r: drained, up to _DRAIN a look)
                if not self._take(r, key, st):
                    break
        return bool(self.told.gave_up)

    def _take(self, r: int, key, st) -> bool:
        """Look once at the notice receive from ``r``: True when what came was not a notice
        (counted, the receive posted again: look again), else False (nothing in, or a genuine
        notice taken, or the link gone)."""
        MPI, req = self._MPI, self.reqs[r]
        if req == MPI.REQUEST_NULL:
            return False
        try:
            done = req.Test(st)
        except MPI.Exception as e:
            if e.Get_error_class() == MPI.ERR_TRUNCATE:  # longer than a notice: not one
                self._forged(r)
                return True
            self.reqs[r] = MPI.REQUEST_NULL  # the link to r failed: r is gone
            return False
        if not done:
            return False
        got = open_notice(key, r, self.buf[r, : st.Get_count(self._byte)].tobytes(), self.size)
        if got is None:
            self._forged(r)
            return True
        told = self.told
        told.gave_up[r] = got[0]
        if got[1] & 0xFF == _WAITED:
            told.gave_up_in[r] = got[1] >> 8
        else:
            told.aborted.add(r)
        if got[1] & 0xFF != _WAITED and got[1] != _ABORT:
            told.failed.add(r)
        if got[1] & 0xF == _REFUSED:
            told.refused[r] = refusal(got[1])
        self.reqs[r] = MPI.REQUEST_NULL
        return False

    def _forged(self, r: int) -> None:
        """A notice claiming to be from ``r`` failed authentication: count it, never use it, and
        listen for ``r``'s genuine notice again."""
        self.told.forged_notices[r] = self.told.forged_notices.get(r, 0) + 1
        self.post(r)

    def notify(self, peer: int, kind: int) -> None:
        """Tell every other rank that this one gave up waiting on ``peer`` (one notice per run:
        each rank names the rank it waited on, or itself when it was the one that stalled, and
        receivers follow the chain), or, with
        ``kind=_ABORT``, that it stopped after detecting an error in a frame from ``peer``."""
        MPI = self._MPI
        if self.sent or self.macs is None:  # before setup ends, nobody could verify it
            return
        self.sent.append(None)  # (one notice per run, even to a world of one)
        for r in range(self.size):
            if r != self.rank:
                msg = seal_notice(self.macs, r, peer, kind)
                self.sent.append(msg)
                try:
                    self.sent.append(self.comm.Isend([msg, self._byte], r, self.tag))
                except MPI.Exception:
                    pass

    def flush(self, limit: float) -> None:
        """Drive this rank's notices out (a process may exit right after the error); a send to
        a dead rank never completes, so this waits at most ``limit`` seconds."""
        MPI = self._MPI
        pending = [r for r in self.sent if isinstance(r, MPI.Request)]

        def sent():
            pending[:] = [r for r in pending if not r.Test()]
            return not pending

        try:
            poll_until(sent, limit, lambda: False, Backoff(sleep_s=1e-4))
        except MPI.Exception:
            pass

    def give_up(self, peer: int, op_label: str, timeout: float, waited: bool):
        """Raise ``TransportTimeout`` naming the rank to blame, after telling the others; or
        ``PeerAbortError`` when the chain ends at a rank that stopped after detecting an error.

        ``waited``: this rank had waited on ``peer`` past its own deadline, or for
        :data:`_MUTUAL_WAIT` of it when ``peer``'s notice came.  A rank that finds that ``peer``
        gave up on it in an earlier op than the one it is in did that op's part
        (:meth:`Told.did_its_part <seccomm.transports.blame.Told.did_its_part>`) and counts as
        waiting too.  Otherwise a rank that did not wait and finds the chain of notices from
        ``peer`` leading back to itself was the one that stalled: its notice names itself, so
        that no other rank takes the cycle its late notice would close for two ranks waiting on
        each other.  Then it waits a short grace period (at most ``min(timeout, 5)`` s) until
        the chain from ``peer`` ends at a rank whose own notice arrived (:meth:`settled`:
        ``peer`` alive but itself stuck, a rank at the far end of a lost link, or one that
        stopped), so the blame lands on the rank that stopped.  The error is what the notices
        told (:meth:`Told.verdict <seccomm.transports.blame.Told.verdict>`): two ranks that
        waited on each other name the link between them, never themselves.  Before
        :meth:`authenticate` no notice is sent or awaited: the blame is ``peer``.
        """
        told = self.told
        if not waited and told.did_its_part(peer, waited_kind(op_label) >> 8):
            waited = True  # (peer's wait was for a message of an op this rank had already done)
        kind = waited_kind(op_label)
        self.notify(self.rank if not waited and told.walk(peer)[1] else peer, kind)
        if self.macs is not None:
            poll_until(
                lambda: self.settled(peer),
                min(timeout, self.grace),
                lambda: False,
                Backoff(sleep_s=1e-3),
            )
        self.flush(min(timeout, 0.5))
        raise told.verdict(peer, op_label, timeout, waited)

    def settled(self, peer: int) -> bool:
        """Whether the chain of notices from ``peer`` (the rank this rank waited on) ends at a
        rank whose own notice arrived: only it tells whether that rank is stuck behind another,
        waits on one that waits on it (a lost link), or stopped; a chain that ends at a rank
        that sent none (dead, or its notice still on the way) is not settled.  The others'
        notices do not settle it (a third rank that gave up on ``peer`` is as consistent with a
        dead ``peer`` as with one waiting on this rank)."""
        self.check()
        return self.told.blame(peer) in self.told.gave_up
