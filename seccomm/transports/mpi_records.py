"""The argument records of an MPI transport's ops (:mod:`seccomm.agreement`), one of two channels.

Before an op's first frame every rank sends every other its argument record, and the op checks
the table once they are in.  Over MPI the exchange overlaps the op:

- :class:`PairedRecords`, on two ranks: no message of its own: the record after its op number
  rides behind the op's first frame to the peer, in the same message
  (:meth:`~PairedRecords.put_record`, :meth:`~PairedRecords.record_due`,
  :meth:`~PairedRecords.take_record`; copied in and out for a caller that keeps no room after
  its frames); an op without a frame to the peer sends its whole record alone; a rank whose op
  failed sends it once more on a fallback tag;
- :class:`PersistentRecords`, on more ranks: persistent requests on the record and table (made
  on first use, kept across ops) start before the op's first frame; each wait of the op looks at
  them (:meth:`~PersistentRecords.watch`) and :meth:`~PersistentRecords.agree_finish` ends them.

The :class:`~seccomm.transports.mpi.MPITransport` names its channel (``records``, made by
:func:`channel`); the :class:`~seccomm.transports.base.Transport` interface hands it the record
calls."""

from __future__ import annotations

import numpy as np

from ..agreement import RECORD_BYTES, TRAILER_BYTES
from ..errors import FrameError, SecCommError
from .base import Backoff, poll_until
from .records import Records, record_size_error
from .notices import _DRAIN

#: tests of an argument exchange before its waits take over (agree_finish)
_AGREE_SPINS = 200


def channel(t) -> "_Exchange":
    """The record channel of MPI transport ``t``: :class:`PairedRecords` on two ranks
    (``t.paired``), else :class:`PersistentRecords`."""
    return PairedRecords(t) if t.paired else PersistentRecords(t)


class _Exchange(Records):
    """What both channels share: the open exchange's check and op, and the first-message flags
    the transport's ``isend``/``irecv``/``wait_recv`` read (always off on more than two ranks)."""

    pair_out = pair_in = False  # the op's first send / first receive is to come
    pair_first = None  # (request, destination) of a staged first receive

    def __init__(self, t):
        super().__init__(t)
        self._agree_check, self._agree_label = None, ""  # the open exchange's check, op
        self._agree_open = False  # its messages are out and not all in

    def agree(self, record, table):
        """As :meth:`Transport.agree` (the whole exchange, now), by :meth:`agree_start` and
        :meth:`agree_finish`."""
        self.agree_start(record, table, lambda: None)
        self.agree_finish()

    def watch(self) -> None:
        """Inside a wait of the op: run the check as soon as the records are in, so a rank that
        waits for a frame a disagreeing peer never sends raises the disagreement at once."""
        if self._agree_check is not None:
            self._agree_in()

    def agree_settle(self, limit):
        if self._agree_check is None:
            return None
        try:
            poll_until(self._agree_in, limit, lambda: None, Backoff(spins=200, sleep_s=1e-4))
        except SecCommError as e:
            return e
        return None

    def _agree_in(self) -> bool:
        raise NotImplementedError


class PairedRecords(_Exchange):
    """Two ranks: the record rides behind the op's first frame to the peer (module docstring)."""

    def __init__(self, t):
        super().__init__(t)
        self._peer = 1 - t.rank
        self._agree_rec = self._agree_table = None  # this op's record and table
        self._agree_tr = self._agree_want = None  # its trailer, and the trailer the peer must send
        self._pair_rec = None  # the receive of the peer's record alone before a clear frame
        self._pair_sends: list = []  # this op's sends of the record alone
        self._stages: dict = {}  # "send"/"recv" -> grow-only staging buffer of first messages
        self._rrec = np.zeros(64, np.uint8)  # a record received alone
        self._fb = None  # (standing receive, its buffer) of the peer's fallback record
        self._fb_sent: list = []  # this rank's fallback record and its send (once)

    def close(self) -> None:
        """Cancel the standing fallback receive (unmatched: safe to cancel), before the
        communicator is freed."""
        MPI = self.t._MPI
        if self._fb is not None and self._fb[0] != MPI.REQUEST_NULL:
            try:
                self._fb[0].Cancel()
                self._fb[0].Wait()
            except MPI.Exception:
                pass
        self._fb = None

    def agree_start(self, record, table, check, expect=None):
        """No message of its own: the record after its op number rides behind the op's first
        frame to the peer, in the same message (:meth:`put_record`, :meth:`record_due`,
        :meth:`take_record`; copied in and out here for a caller that keeps no room); an op
        without a frame to the peer sends its whole record alone (a bcast leaf before its first
        wait: :meth:`send_record`; any other at its end).  A rank whose op failed sends its
        record once more, on its own tag (:meth:`agree_settle`): a peer that could not read the
        one in the first message (a larger message than it expected) looks for it there in its
        waits."""
        self._agree_rec, self._agree_table = record[self._peer], table
        self._agree_tr = memoryview(self._agree_rec)[RECORD_BYTES - TRAILER_BYTES :]
        i = RECORD_BYTES * (self._peer + 1) - TRAILER_BYTES
        self._agree_want = None if expect is None else expect[i : i + TRAILER_BYTES]
        self.pair_out = self.pair_in = True
        self.pair_first = self._pair_rec = None
        if self._fb is None:  # the fallback channel: one standing receive per communicator
            self._post_fallback(np.zeros(64, np.uint8))
        self._agree_check, self._agree_label, self._agree_open = check, self.t.op_label, True

    def discard(self, buf, peer) -> None:
        self.pair_out = False  # (paired: the record the op's first message carried is gone)

    def put_record(self, trailer) -> bool:
        if not self.pair_out:
            return False
        self.pair_out = False
        trailer[:] = self._agree_tr
        return True

    def record_due(self) -> bool:
        if not self.pair_in:
            return False
        self.pair_in = False
        return True

    def take_record(self, wire, got, peer):
        n = TRAILER_BYTES
        if got < n:
            self._agree_check = None
            raise record_size_error(self.t.op_label, peer, got, n)
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

    def isend_first(self, buf, peer):
        """The op's first message to ``peer`` from a caller that keeps no room after its frame
        (the device engine, a wrapper): frame and record copied into one message."""
        self.pair_out = False
        n = buf.nbytes
        st = self._stage("send", n + TRAILER_BYTES)
        if type(buf) is not memoryview and hasattr(buf, "__cuda_array_interface__"):
            import cupy

            cupy.cuda.get_current_stream().synchronize()
            st[:n] = cupy.asnumpy(buf).reshape(-1).view(np.uint8)
        else:
            st[:n] = np.frombuffer(buf, np.uint8)
        st[n:] = self._agree_tr
        return self.t.comm.Isend([st, self.t._byte], peer, self.t.tag)

    def irecv_first(self, buf, peer):
        """The receive of the op's first message from ``peer`` into a staging buffer (as
        :meth:`isend_first`); :meth:`recv_first` checks its record, then copies the frame out."""
        self.pair_in = False
        stage = self._stage("recv", buf.nbytes + TRAILER_BYTES)
        req = self.t.comm.Irecv([stage, self.t._byte], peer, self.t.tag)
        self.pair_first = (req, buf)
        return req

    def recv_first(self, req, peer) -> int:
        dest = self.pair_first[1]
        self.pair_first = None
        st = self.t._status
        self.t._poll(req, self.t.op_timeout, st, peer, self.t.op_label)
        stage = self._stages["recv"]
        m = self.take_record(memoryview(stage), st.Get_count(self.t._byte), peer)
        if type(dest) is not memoryview and hasattr(dest, "__cuda_array_interface__"):
            dest[:m].set(stage[:m])
        else:
            np.frombuffer(dest, np.uint8)[:m] = stage[:m]
        return m

    def _agree_in(self) -> bool:
        return self._fallback_in()

    def _fallback_in(self) -> bool:
        """Whether the peer's fallback record of this op arrived (then checked: may raise).  A
        rank whose op failed sends its whole record there, so that a peer that could not read
        the record of its first message (a larger message than it expected) still tells the
        disagreement; one of another op (that op failed on the peer: its notice tells) is not
        this op's.  What is not a record of this op (larger, another size, another op number:
        stale or injected) is dropped and the receive posted again, so the genuine record still
        lands; at most :data:`_DRAIN` such messages are taken in one look."""
        MPI, st = self.t._MPI, self.t._status
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
            got = buf[: st.Get_count(self.t._byte)]
            if len(got) != RECORD_BYTES or bytes(got[:8]) != bytes(self._agree_rec[:8]):
                self._post_fallback(buf)  # (the op number leads the record)
                continue
            self._fb = (MPI.REQUEST_NULL, buf)
            self._record_in(got[8:])
            return True
        return False

    def _post_fallback(self, buf) -> None:
        self._fb = (self.t.comm.Irecv([buf, self.t._byte], self._peer, self.t.tag + 2), buf)

    def _fallback_send(self) -> None:
        """After this rank's op failed: its whole record to the peer on the fallback tag (once)."""
        if self._fb_sent or self._agree_rec is None or self.t.comm is None:
            return
        msg = np.array(self._agree_rec, np.uint8)
        try:
            self._fb_sent += [msg, self.t.comm.Isend([msg, self.t._byte], self._peer, self.t.tag + 2)]
        except self.t._MPI.Exception:
            pass

    def agree_finish(self):
        if self._agree_open:
            self._pair_finish()

    def send_record(self) -> None:
        if self.pair_out:
            self._pair_alone()

    def expect_record(self, peer):
        if not self.pair_in:
            return None
        self.pair_in = False
        req = self._pair_rec = self.t.comm.Irecv([self._rrec, self.t._byte], peer, self.t.tag)
        return req

    def wait_record(self, peer):
        req, self._pair_rec = self._pair_rec, None
        if req is not None:
            self._record_alone(self.t.wait_recv(req, peer), peer)

    def _record_alone(self, got, peer) -> None:
        """The peer's whole record, received alone into ``_rrec`` (``got`` bytes): exactly
        :data:`~seccomm.agreement.RECORD_BYTES` (else ``FrameError`` naming ``peer``: a message
        of another length is not a record, whatever its last bytes), then checked as
        :meth:`take_record` checks one behind a frame."""
        if got != RECORD_BYTES:
            self._agree_check = None
            raise record_size_error(self.t.op_label, peer, got, RECORD_BYTES)
        self.take_record(memoryview(self._rrec), got, peer)

    def _pair_alone(self) -> None:
        """Paired: this rank's whole record to the peer, alone (an op without a frame to it)."""
        self.pair_out = False
        self._pair_sends.append(self.t.comm.Isend([self._agree_rec, self.t._byte], self._peer, self.t.tag))

    def _pair_finish(self) -> None:
        """Paired, at the op's end: the whole record alone to a peer that got no frame, and from
        a peer that sent none (bcast's root and leaf, an op of no elements); then those sends."""
        peer, B = self._peer, self.t._byte
        if self.pair_out:
            self._pair_alone()
        if self.pair_in:
            self.pair_in = False
            req = self.t.comm.Irecv([self._rrec, B], peer, self.t.tag)
            self._record_alone(self.t.wait_recv(req, peer), peer)
        elif self.pair_first is not None:  # (posted by the op, never waited for)
            self.t.wait_recv(self.pair_first[0], peer)
        elif self._pair_rec is not None:  # (the same: a record alone before a clear frame)
            self.wait_record(peer)
        sends, self._pair_sends = self._pair_sends, []
        if sends:
            self.t.wait_sends(sends, [peer] * len(sends))
        self._agree_open = False

    def agree_settle(self, limit):
        # the op failed: the peer may need this rank's record to tell why
        self.pair_out = self.pair_in = False
        self.pair_first = self._pair_rec = None
        self._fallback_send()
        return super().agree_settle(limit)


class PersistentRecords(_Exchange):
    """More than two ranks: persistent requests on the record and table (module docstring)."""

    def __init__(self, t):
        super().__init__(t)
        self._agreeing = None  # agree_start()'s persistent requests, made on first use

    def close(self) -> None:
        """Free the persistent requests, before the communicator is freed."""
        self.free()

    def agree_start(self, record, table, check, expect=None):
        """Overlapped with the op: persistent requests on ``record`` and ``table`` (made on first
        use, kept across ops) are started, every receive with every send, before the op's first
        frame (a pair's messages match in order: records before frames); each wait of the op
        looks at them (:meth:`watch`) and :meth:`agree_finish` ends them."""
        MPI, B = self.t._MPI, self.t._byte
        if self._agreeing is None or self._agreeing[0] is not table or self._agreeing[1] is not record:
            peers = [r for r in range(self.t.size) if r != self.t.rank]
            recvs = [self.t.comm.Recv_init([table[r], B], r, self.t.tag) for r in peers]
            sends = [self.t.comm.Send_init([record[r], B], r, self.t.tag) for r in peers]
            sts = [MPI.Status() for _ in peers + peers]  # (the receives' first)
            self.free()
            self._agreeing = (table, record, peers, recvs, sends, recvs + sends, sts[: len(peers)], sts)
        MPI.Prequest.Startall(self._agreeing[5])
        self._agree_check, self._agree_label, self._agree_open = check, self.t.op_label, True

    def _agree_in(self) -> bool:
        """Whether every record is in (then checked: sizes, then ``check()``, which may raise)."""
        _, _, peers, recvs, _, _, sts, _ = self._agreeing
        try:
            if not self.t._MPI.Request.Testall(recvs, sts):
                return False
        except self.t._MPI.Exception as e:
            raise self._record_error(e) from None
        self._agree_done(peers, [st.Get_count(self.t._byte) for st in sts])
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

    def agree_finish(self):
        if not self._agree_open:
            return
        MPI = self.t._MPI
        _, _, peers, recvs, sends, both, sts, all_sts = self._agreeing
        if self._agree_check is not None:  # (else a wait of the op already had every record in)
            try:
                done = MPI.Request.Testall(both, all_sts)  # (the usual case: every record in, and sent)
            except MPI.Exception as e:
                raise self._record_error(e) from None
            if done:
                self._agree_done(peers, [st.Get_count(self.t._byte) for st in sts])
                self._agree_open = False
                return
            for _ in range(_AGREE_SPINS):  # (the ranks usually enter an op together)
                if self._agree_in():
                    break
            else:
                check, self._agree_check = self._agree_check, None  # (the waits below must not run it)
                counts = [self.t.wait_recv(req, r) for r, req in zip(peers, recvs)]
                self._agree_check = check
                self._agree_done(peers, counts)
        if not MPI.Request.Testall(sends):
            self.t.wait_sends(sends, peers)
        self._agree_open = False

    def free(self) -> None:
        """Free agree()'s persistent requests (a receive still active, after a failed op, is
        cancelled first: unmatched, as its peer never sent)."""
        if self._agreeing is None:
            return
        MPI, (_, _, _, recvs, sends, _, _, _) = self.t._MPI, self._agreeing
        self._agreeing = None
        for req in recvs + sends:
            try:
                if not req.Test() and req in recvs:
                    req.Cancel()
                    req.Wait()
                req.Free()
            except MPI.Exception:
                pass
