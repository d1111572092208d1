"""NCCL transport: frames move between GPUs with ``cupy.cuda.nccl`` point-to-point.

Design (NCCL >= 2.7 point-to-point; CuPy's ``NcclCommunicator.send``/``recv``):

- **Grouped launches.** NCCL executes a rank's operations to one peer in order, and a send
  completes only when the peer's matching receive runs.  The engine posts a step's receives,
  then its sends, then waits; launched one by one, two ranks exchanging would each block in a
  receive the other never matches.  So ``isend``/``irecv`` only record the operation; the first
  wait of a step launches everything recorded inside one ``ncclGroupStart``/``ncclGroupEnd``
  (NCCL user guide, "Group Calls": point-to-point exchanges must be grouped).
- **Streams and events.** Transfers run on a communication stream of their own.  Before a
  group launches, that stream waits on an event recorded on the stream that produced the frames
  (the crypto stream), so a frame is never sent before it is sealed.  After the group, an event
  on the communication stream marks completion; ``wait_recv`` polls it until the deadline, then
  makes the crypto stream wait on it (device frames) or copies the frame to its host buffer.
- **Device or host buffers.** Device buffers (anything with ``__cuda_array_interface__``, e.g.
  CuPy arrays, or torch CUDA tensors) go as they are.  Host buffers (the CPU engine's frames) are
  staged through device memory, two copies per frame.
- **Deadlines.** NCCL cannot cancel an operation.  A wait past its deadline raises
  ``TransportTimeout`` naming the peer and aborts the NCCL communicator (``ncclCommAbort``),
  which frees the GPU from the stuck kernels; the transport is unusable afterwards.  Limit: NCCL
  connects a pair of ranks inside the first group that uses it, and ``ncclGroupEnd`` then blocks
  the host until the peer takes part; construction opens the ring neighbours' connections, but a
  peer first reached later (recursive doubling, trees) that is already dead stalls that launch.
- **Sizes.** NCCL transfers exactly the posted count and does not report what arrived; a peer
  that sends another size leaves the transfer stuck, which ends in ``TransportTimeout``.  Frames
  are still authenticated, so no altered content passes.

Setup messages (hello, key delivery, finished: :mod:`seccomm.handshake`) are small host buffers;
they go over a control :class:`~seccomm.transports.base.Transport` (MPI by default), as do the
argument records and the failure notices; it also bootstraps NCCL by broadcasting its unique id.

Needs CuPy with NCCL and a GPU per rank; nothing here is imported by ``import seccomm``.
"""

from __future__ import annotations

import time

import numpy as np

from ..errors import FrameError, TransportTimeout
from .base import Backoff, Transport, poll_until
from .records import Records

_BACKOFF = Backoff(spins=1000, sleep_s=2e-5)  # a CUDA event query is cheap: spin, then sleep


class _Op:
    __slots__ = ("send", "buf", "dev", "host", "peer", "event", "nbytes")

    def __init__(self, send, buf, dev, host, peer, nbytes):
        self.send, self.buf, self.dev, self.host, self.peer = send, buf, dev, host, peer
        self.nbytes, self.event = nbytes, None


def _device_view(buf):
    """A CuPy uint8 view of a device buffer, or ``None`` for a host buffer."""
    import cupy

    if hasattr(buf, "__cuda_array_interface__"):
        a = cupy.asarray(buf)
        if not a.flags.c_contiguous:  # reshape would copy, and a receive into the copy is lost
            raise ValueError("NCCLTransport moves contiguous device buffers only")
        return a.reshape(-1).view(cupy.uint8)
    return None


class NCCLTransport(Transport):
    """Point-to-point over NCCL on the current CUDA device; setup over ``control``.

    ``control``: a host :class:`~seccomm.transports.base.Transport` on the same ranks (for example
    :class:`~seccomm.transports.mpi.MPITransport`); ``timeout``: seconds per wait.  Collective: every
    rank constructs it together.  Raises ``RuntimeError`` without CuPy/NCCL or a device.
    """

    # one NCCL launch costs ~10-20 us; recursive doubling still wins for small messages
    small_bytes_default = 256 << 10

    def __init__(self, control: Transport, timeout: float = 60.0, device: int | None = None):
        try:
            import cupy
            from cupy.cuda import nccl
        except ImportError:
            raise RuntimeError(
                "the NCCL transport needs CuPy built with NCCL: pip install -e '.[gpu]'"
            ) from None
        self._cupy, self._nccl = cupy, nccl
        self.control = control
        # the argument records go over the control transport, the whole exchange before the
        # op's first frame (NCCL's waits cannot watch an overlapped one), and so do the notices
        self.records, self.notices = Records(control), control.notices
        self.rank, self.size, self.timeout = control.rank, control.size, timeout
        self.device = cupy.cuda.Device(device) if device is not None else cupy.cuda.Device()
        uid = np.zeros(128, np.uint8)  # NCCL_UNIQUE_ID_BYTES, as raw bytes
        if self.rank == 0:
            uid[:] = np.array(nccl.get_unique_id(), np.int64) & 0xFF
        control.bcast(uid, 0, op_label="NCCL setup", timeout=timeout)
        with self.device:
            try:  # CuPy hands the id over as C chars: signed on x86-64, unsigned on aarch64
                self.comm = nccl.NcclCommunicator(
                    self.size, tuple(int(x) for x in uid.view(np.int8)), self.rank
                )
            except OverflowError:
                self.comm = nccl.NcclCommunicator(self.size, tuple(int(x) for x in uid), self.rank)
            self.stream = cupy.cuda.Stream(non_blocking=True)
        self._held: list[_Op] = []
        self._broken = False
        self._warm_up()

    def _warm_up(self) -> None:
        """Open the connections to both ring neighbours now.  NCCL connects a pair inside the
        first ``ncclGroupEnd`` that uses it, and that call blocks the host until the peer takes
        part: done here, a peer that is already gone stalls construction (which, like
        ``ncclCommInitRank``, has no deadline) instead of a later wait that has one."""
        if self.size < 2:
            return
        cupy, nccl = self._cupy, self._nccl
        with self.device:
            b = cupy.zeros(4, cupy.uint8)
            nxt, prv = (self.rank + 1) % self.size, (self.rank - 1) % self.size
            nccl.groupStart()
            try:
                for peer in {nxt, prv}:
                    self.comm.send(b[:1].data.ptr, 1, nccl.NCCL_UINT8, peer, self.stream.ptr)
                    self.comm.recv(
                        b[2:3].data.ptr if peer == nxt else b[3:4].data.ptr,
                        1,
                        nccl.NCCL_UINT8,
                        peer,
                        self.stream.ptr,
                    )
            finally:
                nccl.groupEnd()
            self.stream.synchronize()

    # -- point-to-point ----------------------------------------------------------------------
    def _op(self, send: bool, buf, peer: int) -> _Op:
        if self._broken:
            raise FrameError("NCCL transport was aborted after an earlier timeout", peer=peer)
        dev = _device_view(buf)
        host = None
        if dev is None:  # host frame: stage through the device
            host = np.frombuffer(buf, np.uint8)
            with self.device:
                dev = self._cupy.empty(host.size, self._cupy.uint8)
        op = _Op(send, buf, dev, host, peer, dev.size)
        self._held.append(op)
        return op

    def isend(self, buf, peer):
        op = self._op(True, buf, peer)
        if op.host is not None:
            op.dev.set(op.host, stream=self.stream)  # ordered before the group on this stream
        return op

    def irecv(self, buf, peer):
        return self._op(False, buf, peer)

    def _launch(self) -> None:
        """Launch every held operation in one NCCL group, after the producing stream."""
        ops, self._held = self._held, []
        if not ops:
            return
        cupy, nccl = self._cupy, self._nccl
        with self.device:
            ready = cupy.cuda.get_current_stream().record()
            self.stream.wait_event(ready)  # frames sealed on the crypto stream are complete
            nccl.groupStart()
            try:
                for op in ops:
                    fn = self.comm.send if op.send else self.comm.recv
                    fn(op.dev.data.ptr, op.nbytes, nccl.NCCL_UINT8, op.peer, self.stream.ptr)
            finally:
                nccl.groupEnd()
            done = self.stream.record()
        for op in ops:
            op.event = done

    def _wait(self, op: _Op, timeout: float, peer: int, op_label: str) -> None:
        if op.event is None:
            self._launch()

        def expired():  # NCCL cannot cancel: the communicator is aborted, the transport unusable
            self._abort()
            raise TransportTimeout(
                f"{op_label}: no progress with rank {peer} within {timeout:g} s over NCCL (the "
                f"peer stopped, died, sent another size, or disagrees on the call sequence)",
                peer=peer,
                op=op_label,
                timeout_s=timeout,
            )

        poll_until(lambda: op.event.done, timeout, expired, _BACKOFF)
        if op.host is None:  # later kernels on the crypto stream see the received frame
            self._cupy.cuda.get_current_stream().wait_event(op.event)
        elif not op.send:  # transfer complete: copy the frame to the CPU engine's buffer
            with self.device:
                op.dev.get(out=op.host)

    def wait_recv(self, req, peer):
        self._wait(req, self.op_timeout, peer, self.op_label)
        return req.nbytes

    def wait_sends(self, reqs, peers):
        for req, peer in zip(reqs, peers):
            self._wait(req, self.op_timeout, peer, self.op_label)

    def _abort(self) -> None:
        if not self._broken:
            self._broken = True
            try:
                self.comm.abort()
            except Exception:  # noqa: BLE001 - already failing; the timeout is what we report
                pass

    def cancel(self, reqs):
        # NCCL cannot cancel: held operations are dropped; launched ones are ended by aborting
        # the communicator (a later close() then has nothing left to wait for).
        self._held = []
        if any(getattr(r, "event", None) is not None and not r.event.done for r in reqs):
            self._abort()

    # -- setup, over the control transport ---------------------------------------------------
    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        return self.control.allgather(sendbuf, recvbuf, op_label, timeout)

    def scatter(self, sendbuf, recvbuf, root, op_label, timeout=None):
        return self.control.scatter(sendbuf, recvbuf, root, op_label, timeout)

    def bcast(self, buf, root, op_label, timeout=None):
        return self.control.bcast(buf, root, op_label, timeout)

    def host_key(self):
        return self.control.host_key()

    def begin_op(self, label, timeout):
        super().begin_op(label, timeout)
        self.control.begin_op(label, timeout)  # (the argument records wait there)

    def quiesce(self, timeout):
        """Let launched transfers finish (at most ``timeout`` s), then the control quiesce."""
        if not self._broken:
            self._launch()  # held sends of a finished step still have to reach their peers
        deadline = time.monotonic() + timeout
        if not poll_until(
            lambda: self._broken or self.stream.done, timeout, lambda: False, Backoff(sleep_s=1e-4)
        ):
            self._abort()
            return False
        return self.control.quiesce(max(0.1, deadline - time.monotonic()))

    def close(self):
        if not self._broken:
            try:
                self.comm.destroy()
            except Exception:  # noqa: BLE001
                pass
        self._broken = True
        self.control.close()

    @classmethod
    def from_mpi(cls, comm, timeout: float = 60.0, device: int | None = None) -> "NCCLTransport":
        """NCCL transport on the ranks of ``comm`` (an ``mpi4py`` communicator), with an
        :class:`~seccomm.transports.mpi.MPITransport` on a duplicate of it for setup.  By default
        each rank uses device ``local rank % device count``, and makes it the current device."""
        from .mpi import MPITransport

        control = MPITransport(comm, timeout=timeout)
        if device is None:
            import cupy

            from ..topology import local_rank

            device = local_rank(control.comm) % cupy.cuda.runtime.getDeviceCount()
            cupy.cuda.Device(device).use()
        return cls(control, timeout=timeout, device=device)
