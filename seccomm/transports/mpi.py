"""MPI transport: buffer-based mpi4py point-to-point, the default transport.

Frames are host buffers, or device frames of the device engine (handed to a CUDA-aware MPI as
they are, else copied through host memory: :class:`_HostCopyRequest`).  Every wait polls its
request with :func:`~seccomm.transports.base.poll_until` and, while waiting, collects give-up
notices: a rank whose deadline passed tells the others whom it blames, so every survivor names
the rank that stopped (failure propagation).

Give-up notices (:mod:`seccomm.transports.notices`) are an object the transport owns
(``notices``): authenticated, bound to their sender and receiver, looked at while it waits.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ..agreement import RECORD_BYTES, TRAILER_BYTES
from ..errors import FrameError, SecCommError, TransportTimeout
from .base import Backoff, Transport, poll_until, record_size_error
from .notices import _DRAIN, _MUTUAL_WAIT, Notices

#: spin 2000 polls, yield the CPU up to poll 40000, then sleep 20 us between polls
_BACKOFF = Backoff(spins=2000, yield_until=40000, sleep_s=2e-5)
_NOTICE_EVERY = 256  # polls between two looks at the give-up notices


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
        self.notices = Notices(self.comm, MPI, self.rank, self.size, tag + 1)

    def authenticate_notices(self, macs) -> None:
        """:meth:`Notices.authenticate <seccomm.transports.notices.Notices.authenticate>`."""
        self.notices.authenticate(macs)

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
        one_peer = isinstance(peer, int)  # (a wait for one rank looks at the notices)
        start = time.monotonic()

        def notices():  # a rank already gave up on the one this rank waits on
            self._agree_watch()
            n = self.notices
            if n.check() and peer in n.gave_up:
                # waiting for a good part of the deadline already: this rank did not stall
                # while peer waited on it (a mutual wait: what they sent each other was lost)
                long = time.monotonic() - start >= _MUTUAL_WAIT * timeout
                n.give_up(peer, op_label, timeout, waited=long)

        def expired():
            if not one_peer:
                raise TransportTimeout(
                    f"{op_label}: no progress within {timeout:g} s (a rank stopped, died, "
                    f"or the ranks disagree on the call sequence)",
                    peer=peer,
                    op=op_label,
                    timeout_s=timeout,
                )
            self.notices.give_up(peer, op_label, timeout, waited=True)

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
        if self.comm is not None:
            self.notices.abort(blame)

    def fail(self) -> None:
        if self.comm is not None:
            self.notices.fail()

    def refuse(self, seq: int, error: str) -> None:
        if self.comm is not None:
            self.notices.refuse(seq, error)

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
            self.notices.close()  # (its pair keys go with the communicator)
            if self._fb is not None and self._fb[0] != MPI.REQUEST_NULL:  # (unmatched: safe to cancel)
                try:
                    self._fb[0].Cancel()
                    self._fb[0].Wait()
                except MPI.Exception:
                    pass
            self._fb = None
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
