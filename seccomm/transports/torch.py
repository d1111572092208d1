"""Transport over ``torch.distributed`` point-to-point (gloo on CPU; nccl for CUDA tensors).

Frames are numpy/memoryview byte buffers wrapped as uint8 tensors without copying
(``torch.from_numpy``).  Ranks are the process group's ranks, mapped to global ranks for
``isend``/``irecv`` (torch.distributed addresses peers globally).

Under ``nccl`` two things change (both selectable for tests with ``batch_p2p``/``device``):

- **Grouped point-to-point.** NCCL runs a rank's sends and receives to one peer in order on one
  stream, and a send completes only once the peer's matching receive runs: two ranks that each
  post a receive and then a send would wait on each other forever.  So operations are held
  until the first wait of a step and then launched together with ``batch_isend_irecv`` (one
  ``ncclGroupStart``/``ncclGroupEnd``), as NCCL's own documentation prescribes for exchanges.
- **Device staging.** NCCL moves device memory only: each frame is copied to a tensor on
  ``device`` before sending, and received frames are copied back to the host buffer the engine
  opens (two copies per frame, over PCIe), unless the frames are already on the device (the
  device engine seals them there).

Every wait has a deadline: gloo's ``Work.wait(timeout)``, or polling ``Work.is_completed()``
(NCCL completion is a CUDA event query) until the deadline.  A silent peer gives
``TransportTimeout`` instead of a hang.  No give-up or abort notices travel here (the base's
``notices``: none, so there is nothing to forge): a rank that times out names
the peer it waited on, and ranks waiting on one that stopped after an error wait out their own
deadline.
"""

from __future__ import annotations

import datetime
import os

import numpy as np
import torch
import torch.distributed as dist

from ..errors import FrameError, TransportTimeout
from .base import Backoff, Transport, poll_until
from .records import Records

_BACKOFF = Backoff(sleep_s=5e-5)  # Work.is_completed() queries a CUDA event: every 50 us


def _tensor(buf) -> torch.Tensor:
    """A uint8 tensor over ``buf`` without copying: host buffers through numpy, device frames
    of the device engine (CuPy) through ``__cuda_array_interface__``."""
    if hasattr(buf, "__cuda_array_interface__"):
        return torch.as_tensor(buf, device="cuda").reshape(-1)
    arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
    if not arr.flags.writeable:  # torch takes only writable arrays; only send-only setup blobs
        arr = arr.copy()  # (a few dozen bytes) are read-only here: frames live in workspaces
    return torch.from_numpy(arr.reshape(-1).view(np.uint8))


class _P2P:
    """A point-to-point operation held until the step's first wait, with its staged tensor."""

    __slots__ = ("send", "host", "dev", "peer", "work")

    def __init__(self, send, host, dev, peer):
        self.send, self.host, self.dev, self.peer, self.work = send, host, dev, peer, None


class TorchTransport(Transport):
    """``group``: a ``torch.distributed`` process group (default: the world group).

    ``batch_p2p``: hold point-to-point operations and launch them together with
    ``batch_isend_irecv`` at the first wait (default: only under ``nccl``).  ``device``: stage
    frames through tensors on this device (default: the current CUDA device under ``nccl``,
    none otherwise; under other backends, frames in CUDA memory are staged through host memory,
    since gloo's transports read host pointers only).
    """

    # gloo point-to-point costs about 0.5-1 ms a message on loopback TCP (seccomm train
    # --transport torch against --transport mpi: docs/performance.md, "PyTorch DDP"):
    # recursive doubling's fewer messages win up to a few MiB
    small_bytes_default = 2 << 20

    def __init__(self, group=None, timeout: float = 60.0, batch_p2p: bool | None = None, device=None):
        if not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialized (call init_process_group)")
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.timeout = timeout
        self._glob = [dist.get_global_rank(group, r) if group is not None else r for r in range(self.size)]
        nccl = "nccl" in str(dist.get_backend(group))  # also "cpu:gloo,cuda:nccl"
        self.batch_p2p = nccl if batch_p2p is None else bool(batch_p2p)
        if device is None and nccl:
            device = torch.device("cuda", torch.cuda.current_device())
        self.device = None if device is None else torch.device(device)
        self._nccl = nccl
        self._poll_completion = nccl  # gloo's point-to-point Work never reports completion
        self._pending: list[_P2P] = []
        # the argument records in one all-gather (gloo point-to-point costs about 1 ms a message)
        self.records = Records(self, gathered=True)

    # -- point-to-point ----------------------------------------------------------------------
    def _target(self, t: torch.Tensor):
        """The device the backend moves ``t`` on (None: as it is)."""
        if self.device is not None:
            return self.device
        if t.device.type == "cuda" and not self._nccl:  # a device-engine frame under gloo
            return torch.device("cpu")
        return None

    def _stage(self, t: torch.Tensor) -> torch.Tensor:
        """The tensor the backend moves: ``t`` itself when it already lives where it must."""
        dev = self._target(t)
        if dev is None or t.device == dev:
            return t
        return t.to(dev, copy=True)

    def isend(self, buf, peer):
        t = _tensor(buf)
        if not self.batch_p2p and self._target(t) is None:  # gloo, host frame: launch now
            return (dist.isend(t, self._glob[peer], group=self.group), t)
        return self._post(_P2P(True, t, self._stage(t), peer))

    def irecv(self, buf, peer):
        t = _tensor(buf)
        dev = self._target(t)
        if not self.batch_p2p and dev is None:
            return (dist.irecv(t, self._glob[peer], group=self.group), t)
        stage = t if dev is None or t.device == dev else torch.empty_like(t, device=dev)
        return self._post(_P2P(False, t, stage, peer))

    def _post(self, op: _P2P) -> _P2P:
        if self.batch_p2p:
            self._pending.append(op)
        else:
            op.work = (dist.isend if op.send else dist.irecv)(op.dev, self._glob[op.peer], group=self.group)
        return op

    def _flush(self) -> None:
        """Launch every held operation as one group (``ncclGroupStart``/``End`` under nccl)."""
        ops, self._pending = self._pending, []
        if ops:
            works = dist.batch_isend_irecv(
                [
                    dist.P2POp(
                        dist.isend if o.send else dist.irecv, o.dev, self._glob[o.peer], group=self.group
                    )
                    for o in ops
                ]
            )
            if len(works) != len(ops):  # NCCL coalesces the group into one Work for all of them
                works = [works[-1]] * len(ops)
            for o, w in zip(ops, works):
                o.work = w

    def _poll(self, work, timeout, peer, op_label):
        """Wait for ``work`` (at most ``timeout`` s): ``TransportTimeout`` naming ``peer`` past
        the deadline, ``FrameError`` for another backend error."""

        def expired():
            raise _timeout(op_label, peer, timeout)

        try:
            if self._poll_completion:
                poll_until(work.is_completed, timeout, expired, _BACKOFF)
                work.wait()  # orders the current stream after the transfer (no blocking)
                return
            work.wait(timeout=datetime.timedelta(seconds=timeout))
        except RuntimeError as e:
            if "imed out" in str(e) or "imeout" in str(e):
                raise _timeout(op_label, peer, timeout) from None
            msg = f"{op_label}: transport error with rank {peer}: {e}"
            raise FrameError(msg, peer=peer, op=op_label) from None

    def _work(self, req):
        if isinstance(req, _P2P):
            if req.work is None:
                self._flush()
            return req.work
        return req[0]

    def wait_recv(self, req, peer):
        self._poll(self._work(req), self.op_timeout, peer, self.op_label)
        if isinstance(req, _P2P):
            if req.dev is not req.host:
                req.host.copy_(req.dev)  # device -> host (a no-op copy when not staged)
            return req.host.numel()
        return req[1].numel()

    def wait_sends(self, reqs, peers):
        for req, peer in zip(reqs, peers):
            self._poll(self._work(req), self.op_timeout, peer, self.op_label)

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        mine = self._stage(_tensor(sendbuf))
        out = [torch.empty_like(mine) for _ in range(self.size)]
        work = dist.all_gather(out, mine, group=self.group, async_op=True)
        self._poll(work, self.timeout if timeout is None else timeout, "any", op_label)
        np.copyto(np.asarray(recvbuf).reshape(self.size, -1).view(np.uint8), torch.stack(out).cpu().numpy())

    def bcast(self, buf, root, op_label, timeout=None):
        host = _tensor(buf)
        t = self._stage(host)
        work = dist.broadcast(t, self._glob[root], group=self.group, async_op=True)
        self._poll(work, self.timeout if timeout is None else timeout, root, op_label)
        if t is not host:
            host.copy_(t)

    def scatter(self, sendbuf, recvbuf, root, op_label, timeout=None):
        # gloo scatter needs the list on the root only; a broadcast of the rows is simpler and
        # only used once at setup for 48-byte blobs.
        rows = np.ascontiguousarray(sendbuf).reshape(self.size, -1).copy()
        self.bcast(rows, root, op_label, timeout)
        np.copyto(np.asarray(recvbuf).view(np.uint8).reshape(-1), rows[self.rank].view(np.uint8))

    def host_key(self):
        from ..topology import host_key

        return host_key()

    def cancel(self, reqs):
        self._pending = []  # held operations of a failed step are never launched


def _timeout(op_label: str, peer, timeout: float) -> TransportTimeout:
    return TransportTimeout(
        f"{op_label}: no progress with rank {peer} within {timeout:g} s (the peer "
        f"stopped, died, or disagrees on the call sequence)",
        peer=peer,
        op=op_label,
        timeout_s=timeout,
    )


def default_timeout() -> float:
    return float(os.environ.get("SECCOMM_TIMEOUT", 60))
