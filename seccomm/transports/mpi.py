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

from ..errors import FrameError, SecCommError, TransportTimeout
from .base import Backoff, Transport, poll_until
from .mpi_records import channel
from .notices import _MUTUAL_WAIT, Notices

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
        self.paired = self.size == 2  # (two ranks: an op's record rides in its first message)
        self.records = channel(self)
        try:
            self._poll(req, timeout, None, "any", "communicator setup (MPI_Comm_idup)")
        except FrameError as e:  # (MPI failed the duplicate: _mpi_error's text does not fit)
            raise _no_communicator(e.__context__ or e) from None
        _LIVE[0] += 1
        # Give-up notices (failure propagation): a rank whose wait passed its deadline tells the
        # others which rank it blames, so every survivor names the rank that stopped, not the
        # neighbour that stalled because of it.  One small receive per peer, posted up front.
        self.notices = Notices(self.comm, MPI, self.rank, self.size, tag + 1)

    def isend(self, buf, peer):
        if self.records.pair_out:  # (paired: the op's first message, from a caller without room)
            return self.records.isend_first(buf, peer)
        if type(buf) is not memoryview and hasattr(buf, "__cuda_array_interface__"):
            return self._device_isend(buf, peer)
        return self.comm.Isend([buf, self._byte], peer, self.tag)

    def irecv(self, buf, peer):
        if self.records.pair_in:
            return self.records.irecv_first(buf, peer)
        if type(buf) is not memoryview and hasattr(buf, "__cuda_array_interface__"):
            return self._device_irecv(buf, peer)
        return self.comm.Irecv([buf, self._byte], peer, self.tag)

    def isend_receipt(self, buf, peer):
        return self.comm.Isend([buf, self._byte], peer, self.tag + 3)

    def irecv_receipt(self, buf, peer):
        return self.comm.Irecv([buf, self._byte], peer, self.tag + 3)

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
            self.records.watch()
            n = self.notices
            if n.check() and peer in n.told.gave_up:
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

    def wait_recv(self, req, peer):
        first = self.records.pair_first
        if first is not None and req is first[0]:
            return self.records.recv_first(req, peer)
        st = self._status
        if type(req) is _HostCopyRequest:
            self._poll(req.req, self.op_timeout, st, peer, self.op_label)
            req.dev.set(req.host)  # received frame: host -> device
            return st.Get_count(self._byte)
        try:
            if req.Test(st):  # (the usual case on the hot path: in at the first look)
                return st.Get_count(self._byte)
        except self._MPI.Exception as e:
            raise _mpi_error(e, peer, self.op_label) from None
        self._poll(req, self.op_timeout, st, peer, self.op_label)
        return st.Get_count(self._byte)

    def wait_sends(self, reqs, peers):
        for req, peer in zip(reqs, peers):
            if type(req) is _HostCopyRequest:
                req = req.req
            try:
                if req.Test():  # (the usual case: done at the first look)
                    continue
            except self._MPI.Exception as e:
                raise _mpi_error(e, peer, self.op_label) from None
            self._poll(req, self.op_timeout, None, peer, self.op_label)

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
            self.records.close()
            self._drain()
            self.comm.Free()
            _LIVE[0] -= 1
        self.comm = None

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
        first receive is posted for frame and record (as
        :meth:`~seccomm.transports.base.Transport.put_record` and
        :meth:`~seccomm.transports.base.Transport.record_due` record it)."""
        self.t.records.pair_out = self.t.records.pair_in = False

    def send(self, frame):
        """:meth:`MPITransport.isend` of a host ``frame`` to the peer."""
        return self.isend([frame, self.byte], self.peer, self.tag)

    def recv(self, frame):
        """:meth:`MPITransport.irecv` of a host ``frame`` from the peer."""
        return self.irecv([frame, self.byte], self.peer, self.tag)

    def wait(self, rreq) -> int:
        """:meth:`MPITransport.wait_recv` of ``rreq``: the bytes received."""
        return self.t.wait_recv(rreq, self.peer)


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
