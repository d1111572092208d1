"""Transports: move frames (bytes) between ranks.  One registry; MPI over mpi4py is the default.

A transport carries opaque byte buffers and never pickles: ``isend``/``irecv`` take contiguous
uint8 buffers (numpy arrays or memoryviews) and return request handles; every wait has a deadline
and raises :class:`~seccomm.errors.TransportTimeout` naming the peer instead of hanging.
Wrappers (tampering, recording) subclass :class:`TransportWrapper` and override what they need.
"""

from __future__ import annotations

import os
import time

import numpy as np

from ..errors import FrameError, PeerAbortError, TransportTimeout

_SPINS = 2000
_WAITED, _ABORT = 0, 1  # kinds of give-up notice


class Transport:
    """Interface.  ``rank``, ``size``; all buffers are contiguous uint8.

    ``small_bytes_default``: where ``algorithm="auto"`` switches allreduce from recursive doubling
    (lg p messages) to ring (2(p-1) messages); higher for transports with a higher latency.
    """

    rank: int
    size: int
    small_bytes_default = 64 << 10

    def isend(self, buf, peer: int):
        raise NotImplementedError

    def irecv(self, buf, peer: int):
        raise NotImplementedError

    def wait_recv(self, req, timeout: float, peer: int, what: str) -> int:
        """Wait (at most ``timeout`` seconds) for a receive; return the bytes received."""
        raise NotImplementedError

    def wait_sends(self, reqs: list, timeout: float, peers: list, what: str) -> None:
        raise NotImplementedError

    def allgather(self, sendbuf, recvbuf, what: str, timeout: float | None = None) -> None:
        raise NotImplementedError

    def scatter(self, sendbuf, recvbuf, root: int, what: str, timeout: float | None = None) -> None:
        raise NotImplementedError

    def bcast(self, buf, root: int, what: str, timeout: float | None = None) -> None:
        raise NotImplementedError

    def cancel(self, reqs: list) -> None:
        """Best-effort cancel of pending requests after an error (buffers stay referenced)."""

    def node_ids(self) -> tuple[list[int], int]:
        """(node id of every rank, ranks on this rank's node); collective."""
        return list(range(self.size)), 1

    def quiesce(self, timeout: float) -> bool:
        """Collective: let every rank's outstanding transfers finish (at most ``timeout`` s)."""
        return True

    def abort(self, blame) -> None:
        """This rank stops the current operation after an error in a frame from rank ``blame``:
        tell the ranks waiting on it, so they raise now instead of at their deadline."""

    def close(self) -> None:
        pass


class MPITransport(Transport):
    """Buffer-based mpi4py point-to-point on a private duplicate of the user's communicator.

    ``comm``: an ``mpi4py.MPI.Intracomm`` (duplicated here; the duplicate is freed on
    ``close``).  ``timeout``: seconds for collective waits during setup.
    """

    def __init__(self, comm, timeout: float = 60.0, tag: int = 7):
        from mpi4py import MPI

        self._MPI = MPI
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self.timeout, self.tag = timeout, tag
        self._status = MPI.Status()
        self._byte = MPI.BYTE
        # Non-blocking duplicate: a rank that never joins ends in TransportTimeout, not a hang.
        self.comm, req = comm.Idup()
        self._nreqs, self._nsent = [], []
        self._poll(req, timeout, None, "any", "communicator setup (MPI_Comm_idup)")
        # Give-up notices (failure propagation): a rank whose wait passed its deadline tells the
        # others which rank it blames, so every survivor names the rank that stopped, not the
        # neighbour that stalled because of it.  One small receive per peer, posted up front.
        self._notice_tag = tag + 1
        self._grace = 5.0
        self.gave_up: dict[int, int] = {}  # rank -> the rank it blamed
        self.aborted: set[int] = set()  # ranks that stopped after detecting an error
        self._nbuf = np.full((max(self.size, 1), 2), -1, np.int64)
        self._nreqs = [MPI.REQUEST_NULL if r == self.rank else
                       self.comm.Irecv([self._nbuf[r], MPI.INT64_T], r, self._notice_tag)
                       for r in range(self.size)]
        self._nsent: list = []

    def isend(self, buf, peer):
        if hasattr(buf, "__cuda_array_interface__"):
            return self._device_isend(buf, peer)
        return self.comm.Isend([buf, self._byte], peer, self.tag)

    def irecv(self, buf, peer):
        if hasattr(buf, "__cuda_array_interface__"):
            return self._device_irecv(buf, peer)
        return self.comm.Irecv([buf, self._byte], peer, self.tag)

    # -- device frames (the device engine over MPI) -------------------------------------------
    def _device_isend(self, buf, peer):
        """A device frame: handed to a CUDA-aware MPI after the producing stream is synchronised,
        else copied to host memory first.  Only point-to-point calls ever see device memory."""
        import cupy

        cupy.cuda.get_current_stream().synchronize()
        if cuda_aware_mpi():
            return self.comm.Isend([buf, self._byte], peer, self.tag)
        host = cupy.asnumpy(buf)
        return _Staged(self.comm.Isend([host, self._byte], peer, self.tag), host, None)

    def _device_irecv(self, buf, peer):
        if cuda_aware_mpi():  # queued kernels may still read this (reused) frame buffer
            import cupy

            cupy.cuda.get_current_stream().synchronize()
            return self.comm.Irecv([buf, self._byte], peer, self.tag)
        host = np.empty(buf.nbytes, np.uint8)
        return _Staged(self.comm.Irecv([host, self._byte], peer, self.tag), host, buf)

    def _poll(self, req, timeout, status, peer, what):
        MPI = self._MPI
        try:
            if req.Test(status):
                return
            n, deadline = 0, time.monotonic() + timeout
            while True:
                if req.Test(status):
                    return
                n += 1
                if n > _SPINS:
                    if n & 255 == 0 and isinstance(peer, int) and self._check_notices() \
                            and peer in self.gave_up:
                        self._give_up(peer, what, timeout, waited=False)
                    if n & 15 == 0 and time.monotonic() > deadline:
                        if not isinstance(peer, int):
                            raise TransportTimeout(
                                f"{what}: no progress within {timeout:g} s (a rank stopped, died, "
                                f"or the ranks disagree on the call sequence)",
                                peer=peer, op=what, timeout_s=timeout)
                        self._give_up(peer, what, timeout, waited=True)
                    if n < 20 * _SPINS:
                        os.sched_yield()
                    else:
                        time.sleep(2e-5)
        except MPI.Exception as e:
            first = e.Get_error_string().splitlines()[0].strip()
            raise FrameError(f"{what}: MPI error with rank {peer} ({first.rstrip(':')}): the peer "
                             f"abandoned the transfer (it failed or closed), or the ranks disagree "
                             f"on this call's sizes", peer=peer) from None

    # -- failure propagation -------------------------------------------------------------------
    def _check_notices(self) -> bool:
        """Collect give-up notices that arrived; True if any rank has given up."""
        MPI = self._MPI
        for r, req in enumerate(self._nreqs):
            if req == MPI.REQUEST_NULL:
                continue
            try:
                done = req.Test()
            except MPI.Exception:  # the link to r failed: r is gone
                self._nreqs[r] = MPI.REQUEST_NULL
                continue
            if done:
                self.gave_up[r] = int(self._nbuf[r, 0])
                if self._nbuf[r, 1] == _ABORT:
                    self.aborted.add(r)
                self._nreqs[r] = MPI.REQUEST_NULL
        return bool(self.gave_up)

    def _blame(self, peer: int) -> int:
        """Follow the chain of notices from ``peer`` (who gave up waiting on whom) to its end,
        or to the first rank on it that stopped after detecting an error."""
        seen = {self.rank}
        while peer in self.gave_up and peer not in seen and peer not in self.aborted:
            seen.add(peer)
            nxt = self.gave_up[peer]
            if nxt in seen:
                break
            peer = nxt
        return peer

    def _notify(self, peer: int, kind: int = _WAITED) -> None:
        """Tell every other rank that this one gave up waiting on ``peer`` (one notice per run:
        each rank names the rank it waited on, and receivers follow the chain), or, with
        ``kind=_ABORT``, that it stopped after detecting an error in a frame from ``peer``."""
        MPI = self._MPI
        if self._nsent:
            return
        msg = np.array([peer, kind], np.int64)
        self._nsent.append(msg)
        for r in range(self.size):
            if r != self.rank:
                try:
                    self._nsent.append(self.comm.Isend([msg, MPI.INT64_T], r, self._notice_tag))
                except MPI.Exception:
                    pass

    def _flush_notices(self, limit: float) -> None:
        """Drive this rank's notices out (a process may exit right after the error); a send to
        a dead rank never completes, so this waits at most ``limit`` seconds."""
        MPI = self._MPI
        pending = [r for r in self._nsent if isinstance(r, MPI.Request)]
        end = time.monotonic() + limit
        while pending and time.monotonic() < end:
            try:
                pending = [r for r in pending if not r.Test()]
            except MPI.Exception:
                return
            time.sleep(1e-4)

    def _give_up(self, peer: int, what: str, timeout: float, waited: bool):
        """Raise ``TransportTimeout`` naming the rank to blame, after telling the others; or
        ``PeerAbortError`` when the chain ends at a rank that stopped after detecting an error.

        ``waited``: this rank's own deadline passed while waiting on ``peer``.  It then waits a
        short grace period (at most ``min(timeout, 5)`` s) for the notice of ``peer`` -- alive
        but itself stuck -- or of every other rank, so the blame lands on the rank that stopped.
        Otherwise ``peer`` already gave up, and the blame follows its notice.
        """
        self._notify(peer)
        if waited:
            end = time.monotonic() + min(timeout, self._grace)
            while time.monotonic() < end:
                self._check_notices()
                culprit = self._blame(peer)
                if peer in self.gave_up or len(set(self.gave_up) - {culprit}) >= self.size - 2:
                    break
                time.sleep(1e-3)
        self._flush_notices(min(timeout, 0.5))
        culprit = self._blame(peer)
        if culprit in self.aborted:
            raise PeerAbortError(
                f"{what}: rank {culprit} stopped this operation after it detected an error in a "
                f"frame from rank {self.gave_up[culprit]} (see the error on rank {culprit})",
                peer=culprit, op=what, blamed=self.gave_up[culprit])
        if self.gave_up.get(culprit) == self.rank and culprit in self.gave_up:
            raise TransportTimeout(  # the others gave up on this rank: it was the one that stalled
                f"{what}: rank {culprit} gave up waiting on this rank (rank {self.rank}): it stalled "
                f"past the {timeout:g} s deadline", peer=self.rank, op=what, timeout_s=timeout)
        via = "" if culprit == peer else f" (this rank waited on rank {peer}, itself stuck behind it)"
        raise TransportTimeout(
            f"{what}: rank {culprit} made no progress within {timeout:g} s{via}: it stopped, died, "
            f"or the ranks disagree on the call sequence", peer=culprit, op=what, timeout_s=timeout)

    def wait_recv(self, req, timeout, peer, what):
        st = self._status
        if isinstance(req, _Staged):
            self._poll(req.req, timeout, st, peer, what)
            req.dev.set(req.host)  # received frame: host -> device
        else:
            self._poll(req, timeout, st, peer, what)
        return st.Get_count(self._byte)

    def wait_sends(self, reqs, timeout, peers, what):
        for req, peer in zip(reqs, peers):
            self._poll(req.req if isinstance(req, _Staged) else req, timeout, None, peer, what)

    def _coll(self, req, what, timeout):
        self._poll(req, self.timeout if timeout is None else timeout, None, "any", what)

    def allgather(self, sendbuf, recvbuf, what, timeout=None):
        self._coll(self.comm.Iallgather([sendbuf, self._byte], [recvbuf, self._byte]), what, timeout)

    def scatter(self, sendbuf, recvbuf, root, what, timeout=None):
        self._coll(self.comm.Iscatter([sendbuf, self._byte], [recvbuf, self._byte], root), what, timeout)

    def bcast(self, buf, root, what, timeout=None):
        self._coll(self.comm.Ibcast([buf, self._byte], root), what, timeout)

    def cancel(self, reqs):
        # Nothing is cancelled: MPICH can crash cancelling a send, or a receive already matched
        # to a rendezvous send.  The caller keeps the requests (and their buffers) referenced,
        # the SecureComm refuses further operations, and close() frees the duplicate.
        pass

    def node_ids(self):
        from ..topology import host_key, node_ids_from_keys

        keys = np.empty(self.size, np.int64)
        self.allgather(np.array([host_key()], np.int64).view(np.uint8), keys.view(np.uint8), what="topology")
        return node_ids_from_keys(keys.tolist(), self.rank)

    def abort(self, blame) -> None:
        if isinstance(blame, (int, np.integer)) and self.comm is not None:
            self._notify(int(blame), _ABORT)
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
            self.comm.Free()
        self.comm = None


def host_bytes(buf) -> np.ndarray:
    """A uint8 numpy view of a host buffer, or a host copy of a device frame (wrappers that
    inspect or alter frames: tampering, recording, the attacker harness)."""
    if hasattr(buf, "__cuda_array_interface__"):
        import cupy

        return cupy.asnumpy(buf).reshape(-1).view(np.uint8)
    return np.frombuffer(buf, np.uint8)


class _Staged:
    """An MPI request on a host copy of a device frame (MPI that is not CUDA-aware)."""

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


class TransportWrapper(Transport):
    """Delegates everything to ``inner``; subclass to observe or alter frames on the wire."""

    def __init__(self, inner: Transport):
        self.inner = inner
        self.rank, self.size = inner.rank, inner.size

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def isend(self, buf, peer):
        return self.inner.isend(buf, peer)

    def irecv(self, buf, peer):
        return self.inner.irecv(buf, peer)

    def wait_recv(self, req, timeout, peer, what):
        return self.inner.wait_recv(req, timeout, peer, what)

    def wait_sends(self, reqs, timeout, peers, what):
        return self.inner.wait_sends(reqs, timeout, peers, what)

    def allgather(self, sendbuf, recvbuf, what, timeout=None):
        return self.inner.allgather(sendbuf, recvbuf, what, timeout)

    def scatter(self, sendbuf, recvbuf, root, what, timeout=None):
        return self.inner.scatter(sendbuf, recvbuf, root, what, timeout)

    def bcast(self, buf, root, what, timeout=None):
        return self.inner.bcast(buf, root, what, timeout)

    def cancel(self, reqs):
        return self.inner.cancel(reqs)

    def node_ids(self):
        return self.inner.node_ids()

    def quiesce(self, timeout):
        return self.inner.quiesce(timeout)

    def abort(self, blame):
        return self.inner.abort(blame)

    def close(self):
        return self.inner.close()


class TamperTransport(TransportWrapper):
    """Flips one bit in selected outgoing frames (for tests and the attacker harness).

    ``should_tamper(frame_index, peer, nbytes) -> int | None`` returns the byte offset to flip
    (negative counts from the end, e.g. -1 hits the tag) or ``None`` to pass the frame unchanged.
    The flipped copy is private, so the sender's buffer is untouched.
    """

    def __init__(self, inner, should_tamper):
        super().__init__(inner)
        self.should_tamper, self.sent, self.tampered = should_tamper, 0, 0
        self._keep = []

    def isend(self, buf, peer):
        off = self.should_tamper(self.sent, peer, buf.nbytes if hasattr(buf, "nbytes") else len(memoryview(buf)))
        self.sent += 1
        if off is not None:
            buf = host_bytes(buf).copy()
            buf[off] ^= 0x01
            self._keep.append(buf)
            self.tampered += 1
        return self.inner.isend(buf, peer)


TRANSPORTS = {"mpi": MPITransport}


def get_transport(name: str):
    try:
        return TRANSPORTS[name]
    except KeyError:
        raise ValueError(f"unknown transport {name!r}; allowed: {', '.join(TRANSPORTS)}") from None
