"""MPI transport: buffer-based mpi4py point-to-point, the default transport.

Frames are host buffers, or device frames of the device engine (handed to a CUDA-aware MPI as
they are, else copied through host memory: :class:`_HostCopyRequest`).  Every wait polls its
request with :func:`~seccomm.transports.base.poll_until` and, while waiting, collects give-up
notices: a rank whose deadline passed tells the others whom it blames, so every survivor names
the rank that stopped (failure propagation).

Notices are authenticated and bound to their sender and receiver (:func:`seal_notice`): 32
bytes, ``blamed rank (int64) | kind (int64) | tag`` with the tag of the pair's control MAC
(:mod:`seccomm.control`, label "notice": HMAC-SHA256 under the key of the sender and receiver,
whose input names both; handed over by :meth:`MPITransport.authenticate_notices` once the session
keys exist).  The key is derived with the session's salt, so it binds the communicator
(session); the MAC binds the sender (the source rank the receive was posted for), the receiver,
the blamed rank and the kind.  A notice whose MAC fails, or of the wrong size, is ignored,
counted in ``forged_notices`` and named in the error this rank raises; the receive from that rank
is posted again, so a forgery cannot block the genuine notice.  Before the keys are handed over
(during setup) no notice is sent or read: a rank whose setup wait expires blames the rank (or,
for a setup collective, the collective) it waited on, within its deadline.  Under psk an insider
rank can derive every pair's key and forge a notice in another rank's name, as it can forge
group frames; under psk-dhe the pair key needs the pair's X25519 secret.  An on-path attacker
can still drop or garble notices, which only leaves the survivors to their own deadlines.
"""

from __future__ import annotations

import hmac
import os
import struct
import time

import numpy as np

from ..agreement import RECORD_BYTES, TRAILER_BYTES
from ..errors import FrameError, PeerAbortError, SecCommError, TransportTimeout
from .base import Backoff, Transport, poll_until, record_size_error

#: spin 2000 polls, yield the CPU up to poll 40000, then sleep 20 us between polls
_BACKOFF = Backoff(spins=2000, yield_until=40000, sleep_s=2e-5)
_NOTICE_EVERY = 256  # polls between two looks at the give-up notices
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
#: the blamed rank of an abort notice whose sender could not tell which rank sent the message
#: that failed (a ``FrameError`` with ``peer == "any"``: a record receive that got a larger
#: message); valid with kind ``_ABORT`` only
UNKNOWN_SENDER = -1
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


class MPITransport(Transport):
    """Buffer-based mpi4py point-to-point on a private duplicate of the user's communicator.

    ``comm``: an ``mpi4py.MPI.Intracomm`` (duplicated here; the duplicate is freed on
    ``close``).  ``timeout``: seconds for collective waits during setup.
    """

    defer_last_sends = True  # MPICH completes a large send only while its receiver progresses
    #: MPICH 5.0 (the ``mpich`` wheel, shared memory) delivers at most about 64 messages from a
    #: rank that stopped calling MPI, over all its receivers; the rest wait in the sender's queue
    #: until it calls MPI again (measured: 64 sends of 1 KiB or 64 KiB arrive, 65 do not, whatever
    #: the size up to 4 MiB; benchmarks/held_sends.py, docs/design.md "Completion").  A hop whose
    #: sender sends more frames than this in the step (a relay: to all its children) is
    #: acknowledged.
    receipt_after = 8

    def __init__(self, comm, timeout: float = 60.0, tag: int = 7):
        from mpi4py import MPI

        if not isinstance(comm, MPI.Intracomm):  # (each rank alike: its own argument's type)
            what = "an intercommunicator" if isinstance(comm, MPI.Intercomm) else f"a {type(comm).__name__}"
            fix = " (merge it first: comm.Merge())" if isinstance(comm, MPI.Intercomm) else ""
            raise TypeError(f"SecureComm needs an mpi4py.MPI.Intracomm, got {what}{fix}")
        self._MPI = MPI
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.timeout, self.tag = timeout, tag
        self._status = MPI.Status()
        self._byte = MPI.BYTE
        # Non-blocking duplicate: a rank that never joins ends in TransportTimeout, not a hang.
        try:
            self.comm, req = comm.Idup()
        except MPI.Exception as e:
            raise _no_communicator(e) from None
        self._nreqs, self._nsent = [], []
        self._agreeing = None  # agree_start()'s persistent requests, made on first use
        self._agree_check, self._agree_label = None, ""  # the open exchange's check, op
        self._agree_open = False  # its requests are started and not all finished
        # Two ranks ("paired"): an op's record rides in its first message to the peer
        # (agree_start); the state of the op's exchange, and the fallback channel
        self.paired = self.size == 2
        self._peer = 1 - self.rank
        self._agree_rec = self._agree_table = None  # this op's record and table
        self._agree_tr = self._agree_want = None  # its trailer, and the trailer the peer must send
        self._pair_out = self._pair_in = False  # the op's first send / first receive is to come
        self._pair_first = None  # (request, destination) of a staged first receive
        self._pair_rec = None  # the receive of the peer's record alone before a clear frame
        self._pair_sends: list = []  # this op's sends of the record alone
        self._stages: dict = {}  # "send"/"recv" -> grow-only staging buffer of first messages
        self._rrec = np.zeros(64, np.uint8)  # a record received alone
        self._fb = None  # (standing receive, its buffer) of the peer's fallback record
        self._fb_sent: list = []  # this rank's fallback record and its send (once)
        try:
            self._poll(req, timeout, None, "any", "communicator setup (MPI_Comm_idup)")
        except FrameError as e:  # (MPI failed the duplicate: _mpi_error's text does not fit)
            raise _no_communicator(e.__context__ or e) from None
        _LIVE[0] += 1
        # Give-up notices (failure propagation): a rank whose wait passed its deadline tells the
        # others which rank it blames, so every survivor names the rank that stopped, not the
        # neighbour that stalled because of it.  One small receive per peer, posted up front.
        self._notice_tag = tag + 1
        self._grace = 5.0
        self._notice_macs = None  # PairMacs, set by authenticate_notices
        self.gave_up: dict[int, int] = {}  # rank -> the rank it blamed
        self.gave_up_in: dict[int, int] = {}  # rank -> the op it gave up waiting in (0: unknown)
        self.aborted: set[int] = set()  # ranks that stopped after detecting an error
        self.failed: set[int] = set()  # of those, the ranks whose error was their own
        self.refused: dict[int, tuple[int, str]] = {}  # of those, rank -> (op seq, exception)
        self.forged_notices: dict[int, int] = {}  # claimed sender -> notices that failed the MAC
        self._nstatus = MPI.Status()
        self._nbuf = np.zeros((max(self.size, 1), NOTICE_BYTES), np.uint8)
        self._nreqs = [MPI.REQUEST_NULL] * self.size
        for r in range(self.size):
            if r != self.rank:
                self._post_notice(r)
        self._nsent: list = []

    def authenticate_notices(self, macs) -> None:
        """From now on send and believe only notices MACed with ``macs`` (this rank's
        :class:`~seccomm.control.PairMacs` of the session); before this, none are sent or read."""
        self._notice_macs = macs

    def _post_notice(self, r: int) -> None:
        self._nreqs[r] = self.comm.Irecv([self._nbuf[r], self._byte], r, self._notice_tag)

    def isend(self, buf, peer):
        if self._pair_out:  # (paired: the op's first message, from a caller without room)
            return self._isend_first(buf, peer)
        if type(buf) is not memoryview and hasattr(buf, "__cuda_array_interface__"):
            return self._device_isend(buf, peer)
        return self.comm.Isend([buf, self._byte], peer, self.tag)

    def irecv(self, buf, peer):
        if self._pair_in:
            return self._irecv_first(buf, peer)
        if type(buf) is not memoryview and hasattr(buf, "__cuda_array_interface__"):
            return self._device_irecv(buf, peer)
        return self.comm.Irecv([buf, self._byte], peer, self.tag)

    def isend_receipt(self, buf, peer):
        return self.comm.Isend([buf, self._byte], peer, self.tag + 3)

    def irecv_receipt(self, buf, peer):
        return self.comm.Irecv([buf, self._byte], peer, self.tag + 3)

    def discard(self, buf, peer):
        self._pair_out = False  # (paired: the record the op's first message carried is gone with it)

    # -- paired: the argument record in the op's first message ---------------------------------
    def put_record(self, trailer) -> bool:
        if not self._pair_out:
            return False
        self._pair_out = False
        trailer[:] = self._agree_tr
        return True

    def record_due(self) -> bool:
        if not self._pair_in:
            return False
        self._pair_in = False
        return True

    def take_record(self, wire, got, peer, op_label):
        n = TRAILER_BYTES
        if got < n:
            self._agree_check = None
            raise record_size_error(op_label, peer, got, n)
        tr = wire[got - n : got]
        if tr == self._agree_want:  # (the usual case: it agrees, nothing else to do)
            self._agree_check = None
        else:
            self._record_in(tr)
        return got - n

    def _record_in(self, tr) -> None:
        """The peer's record trailer ``tr`` (its record after the op number: this op's number is
        implied, and bound by the tag) into the table, then the check (once per op)."""
        check, self._agree_check = self._agree_check, None
        row = self._agree_table[self._peer]
        row[:8] = self._agree_rec[:8]
        row[8:] = tr
        if check is not None:
            check()

    def _stage(self, name: str, nbytes: int) -> np.ndarray:
        buf = self._stages.get(name)
        if buf is None or buf.nbytes < nbytes:
            buf = self._stages[name] = np.empty(max(nbytes, 4096), np.uint8)
        return buf[:nbytes]

    def _isend_first(self, buf, peer):
        """The op's first message to ``peer`` from a caller that keeps no room after its frame
        (the device engine, a wrapper): frame and record copied into one message."""
        self._pair_out = False
        n = buf.nbytes
        st = self._stage("send", n + TRAILER_BYTES)
        if type(buf) is not memoryview and hasattr(buf, "__cuda_array_interface__"):
            import cupy

            cupy.cuda.get_current_stream().synchronize()
            st[:n] = cupy.asnumpy(buf).reshape(-1).view(np.uint8)
        else:
            st[:n] = np.frombuffer(buf, np.uint8)
        st[n:] = self._agree_tr
        return self.comm.Isend([st, self._byte], peer, self.tag)

    def _irecv_first(self, buf, peer):
        """The receive of the op's first message from ``peer`` into a staging buffer (as
        :meth:`_isend_first`); :meth:`wait_recv` checks its record, then copies the frame out."""
        self._pair_in = False
        req = self.comm.Irecv([self._stage("recv", buf.nbytes + TRAILER_BYTES), self._byte], peer, self.tag)
        self._pair_first = (req, buf)
        return req

    def _recv_first(self, req, timeout, peer, op_label) -> int:
        dest = self._pair_first[1]
        self._pair_first = None
        st = self._status
        self._poll(req, timeout, st, peer, op_label)
        stage = self._stages["recv"]
        m = self.take_record(memoryview(stage), st.Get_count(self._byte), peer, op_label)
        if type(dest) is not memoryview and hasattr(dest, "__cuda_array_interface__"):
            dest[:m].set(stage[:m])
        else:
            np.frombuffer(dest, np.uint8)[:m] = stage[:m]
        return m

    def _fallback_in(self) -> bool:
        """Whether the peer's fallback record of this op arrived (then checked: may raise).  A
        rank whose op failed sends its whole record there, so that a peer that could not read
        the record of its first message (a larger message than it expected) still tells the
        disagreement; one of another op (that op failed on the peer: its notice tells) is not
        this op's.  What is not a record of this op (larger, another size, another op number:
        stale or injected) is dropped and the receive posted again, so the genuine record still
        lands; at most :data:`_DRAIN` such messages are taken in one look."""
        MPI, st = self._MPI, self._status
        for _ in range(_DRAIN):
            req, buf = self._fb
            try:
                if req == MPI.REQUEST_NULL or not req.Test(st):
                    return False
            except MPI.Exception as e:
                if e.Get_error_class() != MPI.ERR_TRUNCATE:  # the link to the peer failed
                    self._fb = (MPI.REQUEST_NULL, buf)
                    return False
                self._post_fallback(buf)  # (larger than a record: not one)
                continue
            got = buf[: st.Get_count(self._byte)]
            if len(got) != RECORD_BYTES or bytes(got[:8]) != bytes(self._agree_rec[:8]):
                self._post_fallback(buf)  # (the op number leads the record)
                continue
            self._fb = (MPI.REQUEST_NULL, buf)
            self._record_in(got[8:])
            return True
        return False

    def _post_fallback(self, buf) -> None:
        self._fb = (self.comm.Irecv([buf, self._byte], self._peer, self.tag + 2), buf)

    def _fallback_send(self) -> None:
        """After this rank's op failed: its whole record to the peer on the fallback tag (once)."""
        if self._fb_sent or self._agree_rec is None or self.comm is None:
            return
        msg = np.array(self._agree_rec, np.uint8)
        try:
            self._fb_sent += [msg, self.comm.Isend([msg, self._byte], self._peer, self.tag + 2)]
        except self._MPI.Exception:
            pass

    def pair_link(self, peer):
        return _PairLink(self, peer)

    # -- device frames (the device engine over MPI) -------------------------------------------
    def _device_isend(self, buf, peer):
        """A device frame: handed to a CUDA-aware MPI after the producing stream is synchronised,
        else copied to host memory first.  Only point-to-point calls ever see device memory."""
        import cupy

        cupy.cuda.get_current_stream().synchronize()
        if cuda_aware_mpi():
            return self.comm.Isend([buf, self._byte], peer, self.tag)
        host = cupy.asnumpy(buf)
        return _HostCopyRequest(self.comm.Isend([host, self._byte], peer, self.tag), host, None)

    def _device_irecv(self, buf, peer):
        if cuda_aware_mpi():  # queued kernels may still read this (reused) frame buffer
            import cupy

            cupy.cuda.get_current_stream().synchronize()
            return self.comm.Irecv([buf, self._byte], peer, self.tag)
        host = np.empty(buf.nbytes, np.uint8)
        return _HostCopyRequest(self.comm.Irecv([host, self._byte], peer, self.tag), host, buf)

    # -- waits ---------------------------------------------------------------------------------
    def _poll(self, req, timeout, status, peer, op_label):
        """Wait for ``req`` (at most ``timeout`` s).  ``peer``: the rank waited on, or ``"any"``
        for a collective.  Raises ``TransportTimeout``/``PeerAbortError`` naming the rank to
        blame, ``FrameError`` when MPI reports an error."""
        MPI = self._MPI
        try:
            if req.Test(status):  # (the usual case on the hot path: done at the first look)
                return
        except MPI.Exception as e:
            raise _mpi_error(e, peer, op_label) from None
        one_peer = isinstance(peer, int)
        start = time.monotonic()

        def notices():  # a rank already gave up on the one this rank waits on
            self._agree_watch()
            if self._check_notices() and peer in self.gave_up:
                # waiting for a good part of the deadline already: this rank did not stall
                # while peer waited on it (a mutual wait: what they sent each other was lost)
                long = time.monotonic() - start >= _MUTUAL_WAIT * timeout
                self._give_up(peer, op_label, timeout, waited=long)

        def expired():
            if not one_peer:
                raise TransportTimeout(
                    f"{op_label}: no progress within {timeout:g} s (a rank stopped, died, "
                    f"or the ranks disagree on the call sequence)",
                    peer=peer,
                    op=op_label,
                    timeout_s=timeout,
                )
            self._give_up(peer, op_label, timeout, waited=True)

        try:
            poll_until(
                lambda: req.Test(status),
                timeout,
                expired,
                _BACKOFF,
                check=notices if one_peer else None,
                check_every=_NOTICE_EVERY,
            )
        except MPI.Exception as e:
            raise _mpi_error(e, peer, op_label) from None

    def wait_recv(self, req, timeout, peer, op_label):
        if self._pair_first is not None and req is self._pair_first[0]:
            return self._recv_first(req, timeout, peer, op_label)
        st = self._status
        if type(req) is _HostCopyRequest:
            self._poll(req.req, timeout, st, peer, op_label)
            req.dev.set(req.host)  # received frame: host -> device
            return st.Get_count(self._byte)
        try:
            if req.Test(st):  # (the usual case on the hot path: in at the first look)
                return st.Get_count(self._byte)
        except self._MPI.Exception as e:
            raise _mpi_error(e, peer, op_label) from None
        self._poll(req, timeout, st, peer, op_label)
        return st.Get_count(self._byte)

    def wait_sends(self, reqs, timeout, peers, op_label):
        for req, peer in zip(reqs, peers):
            if type(req) is _HostCopyRequest:
                req = req.req
            try:
                if req.Test():  # (the usual case: done at the first look)
                    continue
            except self._MPI.Exception as e:
                raise _mpi_error(e, peer, op_label) from None
            self._poll(req, timeout, None, peer, op_label)

    def agree(self, record, table, timeout, op_label):
        """As :meth:`Transport.agree` (the whole exchange, now), on the persistent requests of
        :meth:`agree_start`."""
        self.agree_start(record, table, lambda: None, timeout, op_label)
        self.agree_finish(timeout, op_label)

    def agree_start(self, record, table, check, timeout, op_label, expect=None):
        """Overlapped with the op: persistent requests on ``record`` and ``table`` (made on first
        use, kept across ops) are started, every receive with every send, before the op's first
        frame (a pair's messages match in order: records before frames); each wait of the op
        looks at them (:meth:`_agree_watch`) and :meth:`agree_finish` ends them.

        Paired (two ranks): no message of its own.  The record after its op number rides behind
        the op's first frame to the peer, in the same message (:meth:`put_record`,
        :meth:`record_due`, :meth:`take_record`; copied in and out here for a caller that keeps
        no room); an op without a frame to the peer sends its whole record alone (a bcast leaf
        before its first wait: :meth:`send_record`; any other at its end).
        A rank whose op failed sends its record once more, on its own tag (:meth:`agree_settle`):
        a peer that could not read the one in the first message (a larger message than it
        expected) looks for it there in its waits."""
        if self.paired:
            self._agree_rec, self._agree_table = record[self._peer], table
            self._agree_tr = memoryview(self._agree_rec)[RECORD_BYTES - TRAILER_BYTES :]
            i = RECORD_BYTES * (self._peer + 1) - TRAILER_BYTES
            self._agree_want = None if expect is None else expect[i : i + TRAILER_BYTES]
            self._pair_out = self._pair_in = True
            self._pair_first = self._pair_rec = None
            if self._fb is None:  # the fallback channel: one standing receive per communicator
                self._post_fallback(np.zeros(64, np.uint8))
            self._agree_check, self._agree_label, self._agree_open = check, op_label, True
            return
        MPI, B = self._MPI, self._byte
        if self._agreeing is None or self._agreeing[0] is not table or self._agreeing[1] is not record:
            peers = [r for r in range(self.size) if r != self.rank]
            recvs = [self.comm.Recv_init([table[r], B], r, self.tag) for r in peers]
            sends = [self.comm.Send_init([record[r], B], r, self.tag) for r in peers]
            sts = [MPI.Status() for _ in peers + peers]  # (the receives' first)
            self._free_agreeing()
            self._agreeing = (table, record, peers, recvs, sends, recvs + sends, sts[: len(peers)], sts)
        MPI.Prequest.Startall(self._agreeing[5])
        self._agree_check, self._agree_label, self._agree_open = check, op_label, True

    def _agree_in(self) -> bool:
        """Whether every record is in (then checked: sizes, then ``check()``, which may raise)."""
        if self.paired:
            return self._fallback_in()
        _, _, peers, recvs, _, _, sts, _ = self._agreeing
        try:
            if not self._MPI.Request.Testall(recvs, sts):
                return False
        except self._MPI.Exception as e:
            raise self._record_error(e) from None
        self._agree_done(peers, [st.Get_count(self._byte) for st in sts])
        return True

    def _record_error(self, e) -> FrameError:
        """The error of an argument exchange that MPI failed with ``e`` (a larger message where
        a record was expected); the check will not run."""
        self._agree_check = None
        return FrameError(
            f"{self._agree_label}: an argument record could not be received "
            f"({e.Get_error_string().splitlines()[0].strip()}): the ranks disagree on the call "
            f"sequence, or it was altered",
            peer="any",
            op=self._agree_label,
        )

    def _agree_done(self, peers, counts) -> None:
        check, self._agree_check = self._agree_check, None
        n = self._agreeing[1].shape[1]
        for r, got in zip(peers, counts):
            if got != n:
                raise record_size_error(self._agree_label, r, got, n)
        check()

    def _agree_watch(self) -> None:
        """Inside a wait of the op: run the check as soon as the records are in, so a rank that
        waits for a frame a disagreeing peer never sends raises the disagreement at once."""
        if self._agree_check is not None:
            self._agree_in()

    def agree_finish(self, timeout, op_label):
        if not self._agree_open:
            return
        if self.paired:
            return self._pair_finish(timeout, op_label)
        MPI = self._MPI
        _, _, peers, recvs, sends, both, sts, all_sts = self._agreeing
        if self._agree_check is not None:  # (else a wait of the op already had every record in)
            try:
                done = MPI.Request.Testall(both, all_sts)  # (the usual case: every record in, and sent)
            except MPI.Exception as e:
                raise self._record_error(e) from None
            if done:
                self._agree_done(peers, [st.Get_count(self._byte) for st in sts])
                self._agree_open = False
                return
            for _ in range(_AGREE_SPINS):  # (the ranks usually enter an op together)
                if self._agree_in():
                    break
            else:
                check, self._agree_check = self._agree_check, None  # (the waits below must not run it)
                counts = [self.wait_recv(req, timeout, r, op_label) for r, req in zip(peers, recvs)]
                self._agree_check = check
                self._agree_done(peers, counts)
        if not MPI.Request.Testall(sends):
            self.wait_sends(sends, timeout, peers, op_label)
        self._agree_open = False

    def send_record(self) -> None:
        if self._pair_out:
            self._pair_alone()

    def expect_record(self, peer):
        if not self._pair_in:
            return None
        self._pair_in = False
        req = self._pair_rec = self.comm.Irecv([self._rrec, self._byte], peer, self.tag)
        return req

    def wait_record(self, timeout, peer, op_label):
        req, self._pair_rec = self._pair_rec, None
        if req is not None:
            self._record_alone(self.wait_recv(req, timeout, peer, op_label), peer, op_label)

    def _record_alone(self, got, peer, op_label) -> None:
        """The peer's whole record, received alone into ``_rrec`` (``got`` bytes): exactly
        :data:`~seccomm.agreement.RECORD_BYTES` (else ``FrameError`` naming ``peer``: a message
        of another length is not a record, whatever its last bytes), then checked as
        :meth:`take_record` checks one behind a frame."""
        if got != RECORD_BYTES:
            self._agree_check = None
            raise record_size_error(op_label, peer, got, RECORD_BYTES)
        self.take_record(memoryview(self._rrec), got, peer, op_label)

    def _pair_alone(self) -> None:
        """Paired: this rank's whole record to the peer, alone (an op without a frame to it)."""
        self._pair_out = False
        self._pair_sends.append(self.comm.Isend([self._agree_rec, self._byte], self._peer, self.tag))

    def _pair_finish(self, timeout, op_label) -> None:
        """Paired, at the op's end: the whole record alone to a peer that got no frame, and from
        a peer that sent none (bcast's root and leaf, an op of no elements); then those sends."""
        peer, B = self._peer, self._byte
        if self._pair_out:
            self._pair_alone()
        if self._pair_in:
            self._pair_in = False
            req = self.comm.Irecv([self._rrec, B], peer, self.tag)
            self._record_alone(self.wait_recv(req, timeout, peer, op_label), peer, op_label)
        elif self._pair_first is not None:  # (posted by the op, never waited for)
            self.wait_recv(self._pair_first[0], timeout, peer, op_label)
        elif self._pair_rec is not None:  # (the same: a record alone before a clear frame)
            self.wait_record(timeout, peer, op_label)
        sends, self._pair_sends = self._pair_sends, []
        if sends:
            self.wait_sends(sends, timeout, [peer] * len(sends), op_label)
        self._agree_open = False

    def agree_settle(self, limit):
        if self.paired:  # the op failed: the peer may need this rank's record to tell why
            self._pair_out = self._pair_in = False
            self._pair_first = self._pair_rec = None
            self._fallback_send()
        if self._agree_check is None:
            return None
        try:
            poll_until(self._agree_in, limit, lambda: None, Backoff(spins=200, sleep_s=1e-4))
        except SecCommError as e:
            return e
        return None

    # -- failure propagation -------------------------------------------------------------------
    def _check_notices(self) -> bool:
        """Collect authentic give-up notices that arrived (none before
        :meth:`authenticate_notices`); True if any rank has given up."""
        key, st = self._notice_macs, self._nstatus
        if key is None:
            return False
        for r in range(self.size):
            for _ in range(_DRAIN):  # (forgeries in a row from r: drained, up to _DRAIN a look)
                if not self._notice_from(r, key, st):
                    break
        return bool(self.gave_up)

    def _notice_from(self, r: int, key, st) -> bool:
        """Look once at the notice receive from ``r``: True when what came was not a notice
        (counted, the receive posted again: look again), else False (nothing in, or a genuine
        notice taken, or the link gone)."""
        MPI, req = self._MPI, self._nreqs[r]
        if req == MPI.REQUEST_NULL:
            return False
        try:
            done = req.Test(st)
        except MPI.Exception as e:
            if e.Get_error_class() == MPI.ERR_TRUNCATE:  # longer than a notice: not one
                self._forged(r)
                return True
            self._nreqs[r] = MPI.REQUEST_NULL  # the link to r failed: r is gone
            return False
        if not done:
            return False
        got = open_notice(key, r, self._nbuf[r, : st.Get_count(self._byte)].tobytes(), self.size)
        if got is None:
            self._forged(r)
            return True
        self.gave_up[r] = got[0]
        if got[1] & 0xFF == _WAITED:
            self.gave_up_in[r] = got[1] >> 8
        else:
            self.aborted.add(r)
        if got[1] & 0xFF != _WAITED and got[1] != _ABORT:
            self.failed.add(r)
        if got[1] & 0xF == _REFUSED:
            self.refused[r] = refusal(got[1])
        self._nreqs[r] = MPI.REQUEST_NULL
        return False

    def _forged(self, r: int) -> None:
        """A notice claiming to be from ``r`` failed authentication: count it, never use it, and
        listen for ``r``'s genuine notice again."""
        self.forged_notices[r] = self.forged_notices.get(r, 0) + 1
        self._post_notice(r)

    def _forged_note(self) -> str:
        if not self.forged_notices:
            return ""
        n, who = sum(self.forged_notices.values()), sorted(self.forged_notices)
        return f" [{n} forged give-up notice(s) claiming rank(s) {who} failed authentication: ignored]"

    def _blame(self, peer: int) -> int:
        """Follow the chain of notices from ``peer`` (who gave up waiting on whom) to its end,
        or to the first rank on it that stopped after detecting an error."""
        return self._walk(peer)[0]

    def _walk(self, peer: int) -> tuple[int, bool]:
        """``(end, here)``: the end of the chain of notices from ``peer`` (:meth:`_blame`) and
        whether it led back to this rank (the rank before it is then the end)."""
        seen = {self.rank}
        while peer in self.gave_up and peer not in seen and peer not in self.aborted:
            seen.add(peer)
            nxt = self.gave_up[peer]
            if nxt in seen:
                return peer, nxt == self.rank
            peer = nxt
        return peer, False

    def _notify(self, peer: int, kind: int) -> None:
        """Tell every other rank that this one gave up waiting on ``peer`` (one notice per run:
        each rank names the rank it waited on, or itself when it was the one that stalled, and
        receivers follow the chain), or, with
        ``kind=_ABORT``, that it stopped after detecting an error in a frame from ``peer``."""
        MPI = self._MPI
        if self._nsent or self._notice_macs is None:  # before setup ends, nobody could verify it
            return
        self._nsent.append(None)  # (one notice per run, even to a world of one)
        for r in range(self.size):
            if r != self.rank:
                msg = seal_notice(self._notice_macs, r, peer, kind)
                self._nsent.append(msg)
                try:
                    self._nsent.append(self.comm.Isend([msg, self._byte], r, self._notice_tag))
                except MPI.Exception:
                    pass

    def _flush_notices(self, limit: float) -> None:
        """Drive this rank's notices out (a process may exit right after the error); a send to
        a dead rank never completes, so this waits at most ``limit`` seconds."""
        MPI = self._MPI
        pending = [r for r in self._nsent if isinstance(r, MPI.Request)]

        def sent():
            pending[:] = [r for r in pending if not r.Test()]
            return not pending

        try:
            poll_until(sent, limit, lambda: False, Backoff(sleep_s=1e-4))
        except MPI.Exception:
            pass

    def _give_up(self, peer: int, op_label: str, timeout: float, waited: bool):
        """Raise ``TransportTimeout`` naming the rank to blame, after telling the others; or
        ``PeerAbortError`` when the chain ends at a rank that stopped after detecting an error.

        ``waited``: this rank had waited on ``peer`` past its own deadline, or for
        :data:`_MUTUAL_WAIT` of it when ``peer``'s notice came.  A rank that finds that ``peer``
        gave up on it in an earlier op than the one it is in did that op's part
        (:meth:`_did_its_part`) and counts as waiting too.  Otherwise a rank that did not wait
        and finds the chain of notices from ``peer`` leading back to itself was the one that
        stalled: its notice names itself, so that no other rank takes the cycle its late
        notice would close for two ranks waiting on each other.  Then it waits a short grace
        period (at most ``min(timeout, 5)`` s) until the chain from ``peer`` ends at a rank
        whose own notice arrived (:meth:`_notices_settle`: ``peer`` alive but itself stuck, a
        rank at the far end of a lost link, or one that stopped), so the blame lands on the
        rank that stopped.  Two ranks that waited on each other name the link between them
        (:meth:`_link`), never themselves.  Before :meth:`authenticate_notices` no notice is
        sent or awaited: the blame is ``peer``.
        """
        if not waited and self._did_its_part(peer, op_label):
            waited = True  # (peer's wait was for a message of an op this rank had already done)
        kind = waited_kind(op_label)
        self._notify(self.rank if not waited and self._walk(peer)[1] else peer, kind)
        if self._notice_macs is not None:
            poll_until(
                lambda: self._notices_settle(peer),
                min(timeout, self._grace),
                lambda: False,
                Backoff(sleep_s=1e-3),
            )
        self._flush_notices(min(timeout, 0.5))
        culprit = self._blame(peer)
        if culprit in self.refused:
            raise PeerAbortError(
                self._refused_text(culprit, op_label) + self._forged_note(),
                peer=culprit,
                op=op_label,
                blamed=culprit,
            )
        if culprit in self.failed:
            raise PeerAbortError(
                f"{op_label}: rank {culprit} stopped this operation after an error of its own (an "
                f"exception raised on that rank inside the operation, not a frame error: see the error "
                f"on rank {culprit})" + self._forged_note(),
                peer=culprit,
                op=op_label,
                blamed=culprit,
            )
        if culprit in self.aborted:
            source = self.gave_up[culprit]
            what = (
                "a message whose sender it could not tell"
                if source == UNKNOWN_SENDER
                else f"a frame from rank {source}"
            )
            raise PeerAbortError(
                f"{op_label}: rank {culprit} stopped this operation after it detected an error in "
                f"{what} (see the error on rank {culprit})" + self._forged_note(),
                peer=culprit,
                op=op_label,
                blamed=None if source == UNKNOWN_SENDER else source,
            )
        link = self._link(culprit, waited)
        if link is not None:
            a, b = link
            who = (
                f"this rank (rank {self.rank}) and rank {culprit}"
                if self.rank in link
                else f"ranks {a} and {b}"
            )
            raise TransportTimeout(
                f"{op_label}: {who} each waited on the other past the {timeout:g} s deadline: what "
                f"they sent each other was lost on the way (dropped or held), or they disagree on "
                f"the call sequence" + self._forged_note(),
                peer=culprit,
                op=op_label,
                timeout_s=timeout,
                link=link,
            )
        if self.gave_up.get(culprit) == self.rank and culprit in self.gave_up:
            raise TransportTimeout(  # the others gave up on this rank: it was the one that stalled
                f"{op_label}: rank {culprit} gave up waiting on this rank (rank {self.rank}): it "
                f"stalled past the {timeout:g} s deadline" + self._forged_note(),
                peer=self.rank,
                op=op_label,
                timeout_s=timeout,
            )
        via = "" if culprit == peer else f" (this rank waited on rank {peer}, itself stuck behind it)"
        if self.gave_up.get(culprit) == culprit:
            via += f" (rank {culprit} reports that it stalled)"
        raise TransportTimeout(
            f"{op_label}: rank {culprit} made no progress within {timeout:g} s{via}: it stopped, "
            f"died, or the ranks disagree on the call sequence" + self._forged_note(),
            peer=culprit,
            op=op_label,
            timeout_s=timeout,
        )

    def _did_its_part(self, peer: int, op_label: str) -> bool:
        """Whether ``peer`` gave up waiting on this rank in an op before the one this rank is in
        now (``op_label``): this rank did that op's part, so what ``peer`` waited for was lost
        or held on the way, and this rank, however briefly it has waited since, did not stall."""
        theirs, mine = self.gave_up_in.get(peer, 0), waited_kind(op_label) >> 8
        return self.gave_up.get(peer) == self.rank and 0 < theirs < mine

    def _link(self, culprit: int, waited: bool):
        """``(a, b)`` when the chain of notices ends in two ranks that gave up on each other
        (``a < b``): neither stalled, both waited; what went between them was lost.  This rank is
        one of them only when its own deadline passed waiting on ``culprit`` (``waited``): a
        rank that stalled elsewhere sees the others' notices as soon as it waits again."""
        other = self.gave_up.get(culprit)
        if other is None or culprit in self.aborted:
            return None
        if other == self.rank:
            return tuple(sorted((self.rank, culprit))) if waited else None
        if other != culprit and self.gave_up.get(other) == culprit and other not in self.aborted:
            return tuple(sorted((culprit, other)))
        return None

    def _refused_text(self, culprit: int, op_label: str) -> str:
        """What a rank waiting in ``op_label`` is told of ``culprit``'s refusal notice."""
        seq, error = self.refused[culprit]
        if op_label.endswith(f" #{seq}"):
            what = f"to {op_label}"
        else:  # this rank is in another op: its own op #seq ended without that rank, or seqs differ
            what = f"to its op #{seq or '?'} (this rank is in {op_label})"
        return (
            f"{op_label}: rank {culprit} refused its arguments {what}: {error} (see the error on rank "
            f"{culprit}); the op cannot complete, and the SecureComm is unusable on every rank: "
            f"build a new one"
        )

    def _notices_settle(self, peer: int) -> bool:
        """Whether the chain of notices from ``peer`` (the rank this rank waited on) ends at a
        rank whose own notice arrived: only it tells whether that rank is stuck behind another,
        waits on one that waits on it (a lost link), or stopped; a chain that ends at a rank
        that sent none (dead, or its notice still on the way) is not settled.  The others'
        notices do not settle it (a third rank that gave up on ``peer`` is as consistent with a
        dead ``peer`` as with one waiting on this rank)."""
        self._check_notices()
        return self._blame(peer) in self.gave_up

    # -- setup collectives, topology, teardown -------------------------------------------------
    def _coll(self, req, op_label, timeout):
        self._poll(req, self.timeout if timeout is None else timeout, None, "any", op_label)

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        self._coll(self.comm.Iallgather([sendbuf, self._byte], [recvbuf, self._byte]), op_label, timeout)

    def scatter(self, sendbuf, recvbuf, root, op_label, timeout=None):
        self._coll(self.comm.Iscatter([sendbuf, self._byte], [recvbuf, self._byte], root), op_label, timeout)

    def bcast(self, buf, root, op_label, timeout=None):
        self._coll(self.comm.Ibcast([buf, self._byte], root), op_label, timeout)

    def cancel(self, reqs):
        # Nothing is cancelled: MPICH can crash cancelling a send, or a receive already matched
        # to a rendezvous send.  The caller keeps the requests (and their buffers) referenced,
        # the SecureComm refuses further operations, and close() frees the duplicate.
        pass

    def host_key(self):
        from ..topology import host_key

        return host_key()

    def abort(self, blame) -> None:
        if self.comm is not None:  # (blame "any": a message whose sender MPI could not say)
            self._notify(int(blame) if isinstance(blame, (int, np.integer)) else UNKNOWN_SENDER, _ABORT)
            self._flush_notices(0.2)

    def fail(self) -> None:
        if self.comm is not None:
            self._notify(self.rank, _FAILED)
            self._flush_notices(0.2)

    def refuse(self, seq: int, error: str) -> None:
        if self.comm is not None:
            self._notify(self.rank, refusal_kind(seq, error if error in REFUSALS else "ValueError"))
            self._flush_notices(0.2)

    def quiesce(self, timeout):
        # A non-blocking barrier keeps MPI progressing until every rank has arrived: MPICH
        # completes a sender's last rendezvous Isends only while the receiver still progresses.
        try:
            self._poll(self.comm.Ibarrier(), timeout, None, "any", "close")
            return True
        except (TransportTimeout, FrameError):
            return False

    def close(self):
        MPI = self._MPI
        if self.comm is not None and self.comm != MPI.COMM_NULL:
            for r, req in enumerate(self._nreqs):  # unmatched notice receives: safe to cancel
                if req != MPI.REQUEST_NULL:
                    try:
                        req.Cancel()
                        req.Wait()
                    except MPI.Exception:
                        pass
            self._nreqs = []
            if self._fb is not None and self._fb[0] != MPI.REQUEST_NULL:  # (unmatched: safe to cancel)
                try:
                    self._fb[0].Cancel()
                    self._fb[0].Wait()
                except MPI.Exception:
                    pass
            self._fb = None
            self._notice_macs = None  # (the pair keys go with the communicator)
            self._free_agreeing()
            self._drain()
            self.comm.Free()
            _LIVE[0] -= 1
        self.comm = None

    def _free_agreeing(self) -> None:
        """Free agree()'s persistent requests (a receive still active, after a failed op, is
        cancelled first: unmatched, as its peer never sent)."""
        if self._agreeing is None:
            return
        MPI, (_, _, _, recvs, sends, _, _, _) = self._MPI, self._agreeing
        self._agreeing = None
        for req in recvs + sends:
            try:
                if not req.Test() and req in recvs:
                    req.Cancel()
                    req.Wait()
                req.Free()
            except MPI.Exception:
                pass

    def _drain(self) -> None:
        """Receive and drop what arrived and was never received (an op that failed or was
        refused left a peer's argument record, notice or frames unmatched): MPI may give a
        communicator made later this context id, whose receives must not match them.  A message
        that does not complete within :data:`_DRAIN_S` (a large one whose sender no longer
        progresses) is cancelled, and the drain stops there."""
        MPI, st = self._MPI, self._MPI.Status()
        try:
            while self.comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, st):
                buf = np.empty(max(st.Get_count(self._byte), 1), np.uint8)
                req = self.comm.Irecv([buf, self._byte], st.Get_source(), st.Get_tag())
                if not poll_until(req.Test, _DRAIN_S, lambda: False, Backoff(sleep_s=1e-4)):
                    req.Cancel()
                    req.Wait()
                    return
        except MPI.Exception:
            pass


#: tests of an argument exchange before its waits take over (agree)
_AGREE_SPINS = 200


#: private communicators of this process's MPITransports not yet closed
_LIVE = [0]


def _no_communicator(e) -> SecCommError:
    """The error of a ``SecureComm`` whose private communicator MPI could not make (``e``: the
    MPI error): most often the library's limit on live communicators (MPICH: 2,046 duplicates
    of one communicator, measured), reached by ``SecureComm`` objects never closed."""
    text = e.Get_error_string() if hasattr(e, "Get_error_string") else str(e)
    first = text.splitlines()[0].strip().rstrip(":")
    return SecCommError(
        f"SecureComm: MPI could not make the private communicator this SecureComm needs "
        f"(MPI_Comm_idup failed: {first}); this process has {_LIVE[0]:,} SecureComm objects open, "
        f"and MPI libraries allow a limited number of live communicators (MPICH: about 2,046). "
        f"close() the ones no longer in use, or build them with `with SecureComm(...) as sc:`"
    )


def _mpi_error(e, peer, op_label) -> FrameError:
    """The ``FrameError`` of a wait on ``peer`` that MPI failed with ``e``: a message larger than
    the receive (``MPI_ERR_TRUNCATE``) is an oversized frame from ``peer``; any other error, a
    transfer the peer abandoned."""
    from mpi4py import MPI

    first = e.Get_error_string().splitlines()[0].strip()
    if e.Get_error_class() == MPI.ERR_TRUNCATE:
        return FrameError(
            f"{op_label}: the message from rank {peer} is larger than the frame this rank expected "
            f"({first.rstrip(':')}): a frame padded or altered in transit, or the ranks disagree "
            f"on this call's sizes",
            peer=peer,
            op=op_label,
        )
    return FrameError(
        f"{op_label}: MPI error with rank {peer} ({first.rstrip(':')}): the peer "
        f"abandoned the transfer (it failed or closed), or the ranks disagree "
        f"on this call's sizes",
        peer=peer,
        op=op_label,
    )


#: seconds close() waits for one unreceived message it drops (eager ones are in at once)
_DRAIN_S = 0.5


_Adopted = None


def _adopted(MPI):
    """mpi4py's ``Request`` with a reference to what posted it (:meth:`_PairLink.adopt`), made
    on first use (this module imports mpi4py only when a transport is made)."""
    global _Adopted
    if _Adopted is None:

        class Adopted(MPI.Request):
            __slots__ = ("keep",)

        _Adopted = Adopted
    return _Adopted


class _PairLink:
    """:meth:`MPITransport.pair_link`: host frames to and from one peer, straight to mpi4py.
    ``express``: ``(communicator handle, tag, spins)`` for the compiled swap
    (:mod:`seccomm.pairswap`: the same communicator and tag; ``spins`` tests of its receive
    before it hands the wait back, as :meth:`MPITransport.wait_recv` spins before it yields),
    on two ranks."""

    __slots__ = ("t", "isend", "irecv", "peer", "tag", "byte", "express", "__weakref__")

    def __init__(self, t: MPITransport, peer: int):
        self.t, self.isend, self.irecv, self.peer, self.tag = t, t.comm.Isend, t.comm.Irecv, peer, t.tag
        self.byte = t._byte
        self.express = (t.comm.handle, t.tag, _BACKOFF.spins) if t.paired else None

    def adopt(self, handle: int, keep):
        """An MPI request the compiled swap ``keep`` posted (its handle), as an mpi4py request
        that keeps ``keep`` (and so the buffer MPI reads or writes) alive, as mpi4py's own
        requests keep their buffers."""
        MPI = self.t._MPI
        req = _adopted(MPI)(MPI.Request.fromhandle(handle))
        req.keep = keep
        return req

    def error(self, code: int, op_label: str) -> FrameError:
        """The error of an MPI call of the compiled swap that returned ``code``."""
        return _mpi_error(self.t._MPI.Exception(code), self.peer, op_label)

    def first_done(self) -> None:
        """The op's first message went to the peer with its record behind the frame, and the
        first receive is posted for frame and record (as :meth:`MPITransport.put_record` and
        :meth:`MPITransport.record_due` record it)."""
        self.t._pair_out = self.t._pair_in = False

    def send(self, frame):
        """:meth:`MPITransport.isend` of a host ``frame`` to the peer."""
        return self.isend([frame, self.byte], self.peer, self.tag)

    def recv(self, frame):
        """:meth:`MPITransport.irecv` of a host ``frame`` from the peer."""
        return self.irecv([frame, self.byte], self.peer, self.tag)

    def wait(self, rreq, timeout: float, op_label: str) -> int:
        """:meth:`MPITransport.wait_recv` of ``rreq``: the bytes received."""
        return self.t.wait_recv(rreq, timeout, self.peer, op_label)


class _HostCopyRequest:
    """An MPI request on a host copy of a device frame (MPI that is not CUDA-aware): ``req``
    moves ``host``; for a receive, ``dev`` is the device frame the copy goes back to."""

    __slots__ = ("req", "host", "dev")

    def __init__(self, req, host, dev):
        self.req, self.host, self.dev = req, host, dev


_CUDA_AWARE = None


def cuda_aware_mpi() -> bool:
    """Whether the MPI library takes device pointers: ``SECCOMM_CUDA_AWARE_MPI=1``/``0`` if set,
    else ``MPIX_Query_cuda_support()`` (MPICH, Open MPI) where the library exports it, else
    False (device frames are then staged through host memory)."""
    global _CUDA_AWARE
    if _CUDA_AWARE is None:
        env = os.environ.get("SECCOMM_CUDA_AWARE_MPI")
        if env is not None:
            _CUDA_AWARE = env == "1"
        else:
            try:
                import ctypes

                _CUDA_AWARE = bool(ctypes.CDLL(None).MPIX_Query_cuda_support())
            except (AttributeError, OSError):
                _CUDA_AWARE = False
    return _CUDA_AWARE
