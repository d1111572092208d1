"""Transport over ``torch.distributed`` point-to-point (gloo on CPU; nccl for CUDA tensors).

Frames are numpy/memoryview byte buffers wrapped as uint8 tensors without copying
(``torch.from_numpy``).  Every wait is ``Work.wait(timeout)``, so a silent peer gives
``TransportTimeout`` instead of a hang.  Ranks are the process group's ranks, mapped to global
ranks for ``isend``/``irecv`` (torch.distributed addresses peers globally).
"""

from __future__ import annotations

import datetime
import os
import socket
import zlib

import numpy as np
import torch
import torch.distributed as dist

from ..errors import FrameError, TransportTimeout
from ..transport import Transport


def _tensor(buf) -> torch.Tensor:
    arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
    return torch.from_numpy(arr.reshape(-1).view(np.uint8))


class TorchTransport(Transport):
    """``group``: a ``torch.distributed`` process group (default: the world group)."""

    # gloo point-to-point costs ~0.5-1 ms a message on loopback TCP (measured, docs/performance.md):
    # recursive doubling's fewer messages win up to a few MiB
    small_bytes_default = 2 << 20

    def __init__(self, group=None, timeout: float = 60.0):
        if not dist.is_initialized():
            raise RuntimeError("torch.distributed is not initialized (call init_process_group)")
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.timeout = timeout
        self._glob = [dist.get_global_rank(group, r) if group is not None else r
                      for r in range(self.size)]

    def isend(self, buf, peer):
        t = _tensor(buf)
        return (dist.isend(t, self._glob[peer], group=self.group), t)

    def irecv(self, buf, peer):
        t = _tensor(buf)
        return (dist.irecv(t, self._glob[peer], group=self.group), t)

    def _poll(self, work, timeout, peer, what):
        # gloo's point-to-point Work never reports is_completed(); wait(timeout) is the deadline.
        try:
            work.wait(timeout=datetime.timedelta(seconds=timeout))
        except RuntimeError as e:
            if "imed out" in str(e) or "imeout" in str(e):
                raise TransportTimeout(
                    f"{what}: no progress with rank {peer} within {timeout:g} s (the peer "
                    f"stopped, died, or disagrees on the call sequence)",
                    peer=peer, op=what, timeout_s=timeout) from None
            raise FrameError(f"{what}: transport error with rank {peer}: {e}", peer=peer) from None

    def wait_recv(self, req, timeout, peer, what):
        self._poll(req[0], timeout, peer, what)
        return req[1].numel()

    def wait_sends(self, reqs, timeout, peers, what):
        for req, peer in zip(reqs, peers):
            self._poll(req[0], timeout, peer, what)

    def allgather(self, sendbuf, recvbuf, what, timeout=None):
        out = [torch.empty_like(_tensor(sendbuf)) for _ in range(self.size)]
        work = dist.all_gather(out, _tensor(sendbuf), group=self.group, async_op=True)
        self._poll(work, self.timeout if timeout is None else timeout, "any", what)
        np.copyto(np.asarray(recvbuf).reshape(self.size, -1).view(np.uint8),
                  torch.stack(out).numpy())

    def bcast(self, buf, root, what, timeout=None):
        work = dist.broadcast(_tensor(buf), self._glob[root], group=self.group, async_op=True)
        self._poll(work, self.timeout if timeout is None else timeout, root, what)

    def scatter(self, sendbuf, recvbuf, root, what, timeout=None):
        # gloo scatter needs the list on the root only; a broadcast of the rows is simpler and
        # only used once at setup for 48-byte blobs.
        rows = np.ascontiguousarray(sendbuf).reshape(self.size, -1).copy()
        self.bcast(rows, root, what, timeout)
        np.copyto(np.asarray(recvbuf).view(np.uint8).reshape(-1), rows[self.rank].view(np.uint8))

    def node_ids(self):
        host = np.array([zlib.crc32(socket.gethostname().encode()) & 0x7FFFFFFF], np.int64)
        allv = np.empty((self.size, 1), np.int64)
        self.allgather(host.view(np.uint8), allv.view(np.uint8), what="topology")
        ids = [int(x) for x in allv[:, 0]]
        return ids, sum(1 for x in ids if x == ids[self.rank])

    def cancel(self, reqs):
        pass


def default_timeout() -> float:
    return float(os.environ.get("SECCOMM_TIMEOUT", 60))
