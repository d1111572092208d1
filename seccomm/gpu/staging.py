"""Device buffers in ``SecureComm`` calls: CuPy arrays and torch CUDA tensors (through DLPack).

Device buffers the device engine does not take (bfloat16, which CuPy lacks, or a suite or
dtype without kernels) are staged: the send buffer is copied to pinned host memory, the CPU
engine runs, and the result is copied back (two PCIe copies of the payload).  Frames then travel
over whichever transport the ``SecureComm`` has -- MPI, or
:class:`~seccomm.transports.nccl.NCCLTransport`, which stages them back to the device.  No MPI
call ever sees a device pointer, so this works with MPI libraries that are not CUDA-aware, and
no non-blocking MPI operation is ever posted on device memory.

Nothing here imports CuPy or torch unless a device buffer is passed.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np


def is_device(buf) -> bool:
    """True for CuPy arrays and other ``__cuda_array_interface__`` buffers, and torch CUDA
    tensors (any dtype, bfloat16 included); False for numpy arrays."""
    if isinstance(buf, np.ndarray):
        return False
    try:  # DLPack first: torch raises (not AttributeError) on __cuda_array_interface__ for
        dev = getattr(buf, "__dlpack_device__", None)  # tensors that require grad
        if dev is not None:
            return int(dev()[0]) in (2, 13)  # kDLCUDA, kDLCUDAManaged (DLPack device types)
        return hasattr(buf, "__cuda_array_interface__")
    except Exception:  # noqa: BLE001 - not a device buffer we can read
        return False


def as_cupy(buf):
    """A CuPy view of a device buffer (torch CUDA tensors through DLPack), zero-copy."""
    return _as_cupy(buf)[0]


def _as_cupy(buf):
    """A CuPy view of a device buffer, zero-copy (bfloat16 as its uint16 bit pattern)."""
    import cupy

    mod = type(buf).__module__
    if mod.startswith("torch"):
        import torch

        buf = buf.detach()  # same storage; DLPack refuses tensors that require grad
        if buf.dtype == torch.bfloat16:
            return cupy.from_dlpack(buf.view(torch.int16)).view(cupy.uint16), "bfloat16"
        return cupy.from_dlpack(buf), None
    return cupy.asarray(buf), None


class Staged:
    """Pinned host copy of one device buffer: ``host`` (numpy, the same dtype; bfloat16 via
    ``ml_dtypes``) and ``back()`` to copy the host values into the device buffer."""

    def __init__(self, buf, copy_in: bool = True):
        import cupy

        self.dev, bf16 = _as_cupy(buf)
        if not self.dev.flags.c_contiguous:
            raise ValueError("device buffer must be C-contiguous")
        mem = cupy.cuda.alloc_pinned_memory(max(self.dev.nbytes, 1))
        raw = np.frombuffer(mem, np.uint8, self.dev.nbytes)
        self._mem = mem
        self.host = raw.view(self.dev.dtype).reshape(self.dev.shape)
        if copy_in:
            self.dev.get(out=self.host)
        if bf16:
            self.host = self.host.view(ml_dtypes.bfloat16)

    def back(self) -> None:
        """Copy the host values to the device buffer and wait for the copy: ``set`` runs
        asynchronously, and the pinned block returns to CuPy's pool with this object."""
        import cupy

        self.dev.set(self.host.view(self.dev.dtype))
        cupy.cuda.get_current_stream().synchronize()


def staged_call(fn, sendbuf, recvbuf, **kw) -> None:
    """Run ``fn(send_host, recv_host, **kw)`` on pinned host copies of device buffers and copy
    the result back; in place (``sendbuf is recvbuf``) stays in place."""
    if recvbuf is sendbuf:
        s = Staged(sendbuf)
        fn(s.host, s.host, **kw)
        s.back()
        return
    s = Staged(sendbuf) if is_device(sendbuf) else None
    r = Staged(recvbuf, copy_in=False) if is_device(recvbuf) else None
    fn(s.host if s else sendbuf, r.host if r else recvbuf, **kw)
    if r is not None:
        r.back()
