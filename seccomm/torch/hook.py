"""DDP communication hook: every gradient bucket is allreduced by :class:`SecureComm` (same
framing, key schedule and algorithms as over MPI) through :class:`TorchTransport`.

    state = SecureHookState(process_group=None, suite="aes-256-gcm")
    ddp_model.register_comm_hook(state, secure_allreduce_hook)

Averaging matches DDP's default ``allreduce_hook``: the bucket is divided by the world size,
then summed.  The bucket keeps its dtype (float32, float64, float16, bfloat16 reduce in that
type with numpy/ml_dtypes, as MPI would; no gloo reduction is involved, so bfloat16 works where
gloo's own allreduce refuses it).  CUDA buckets (``nccl`` backend) go to ``SecureComm`` as they
are: float32/float16 buckets run on the device engine (seccomm's kernels seal on the GPU and the
device frames go to NCCL without leaving it); bfloat16 buckets are staged through pinned host
memory (CuPy has no bfloat16); without CuPy, CUDA buckets are staged through host memory by
torch (two copies of the bucket, and two of each frame for NCCL).  A bucket that fails authentication
raises ``AuthenticationError`` from the training step (the future carries the exception): a
tampered gradient never reaches the optimizer.
"""

import ml_dtypes
import numpy as np
import torch

from ..comm import SecureComm
from ..transports.torch import TorchTransport, default_timeout

_NP = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16}


class SecureHookState:
    """State for :func:`secure_allreduce_hook`; a collective call (builds a ``SecureComm``).

    ``process_group``: the DDP process group (``None``: world).  ``batch_p2p``, ``device``: see
    :class:`~seccomm.transports.torch.TorchTransport` (under ``nccl``: grouped point-to-point and
    frames staged through the current CUDA device, by default).  Other keyword arguments go to
    :class:`~seccomm.comm.SecureComm` (``suite``, ``chunk_bytes``, ``psk``, ``algorithm``, ...).
    """

    def __init__(self, process_group=None, suite: str = "aes-256-gcm", *, batch_p2p=None, device=None, **kw):
        kw.setdefault("timeout", default_timeout())
        self.process_group = process_group
        transport = TorchTransport(process_group, timeout=kw["timeout"], batch_p2p=batch_p2p, device=device)
        self.sc = SecureComm(transport, suite, **kw)
        self.buckets = 0

    def __repr__(self):
        return f"<SecureHookState {self.sc!r} buckets={self.buckets}>"


def _cupy():
    try:
        import cupy

        return cupy
    except ImportError:
        return None


def as_numpy(t: torch.Tensor) -> np.ndarray:
    """Zero-copy numpy view of a contiguous CPU tensor (bfloat16 via ``ml_dtypes``)."""
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if t.dtype not in _NP:
        raise TypeError(f"bucket dtype {t.dtype} unsupported; allowed: float32, float64, float16, bfloat16")
    return t.numpy()


def secure_allreduce_hook(state: SecureHookState, bucket) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: divide by world size, secure allreduce (sum), return the bucket tensor."""
    buf = bucket.buffer()
    fut = torch.futures.Future()
    try:
        cupy = _cupy() if buf.device.type == "cuda" else None
        if cupy is not None:  # device engine (GPU kernels) or staged, see SecureComm
            if buf.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
                raise TypeError(
                    f"bucket dtype {buf.dtype} unsupported; allowed: float32, float64, float16, bfloat16"
                )
            buf.div_(state.sc.size)
            # CuPy work goes on torch's current stream, so DDP's later use of the bucket is
            # ordered after it (CuPy would otherwise use its own current stream)
            with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
                state.sc.allreduce(buf, buf, op="sum")
        elif buf.device.type == "cuda":  # no CuPy: stage through host memory with torch
            host = buf.to("cpu")
            arr = as_numpy(host)
            np.divide(arr, arr.dtype.type(state.sc.size), out=arr)
            state.sc.allreduce(arr, arr, op="sum")
            buf.copy_(host)
        else:
            arr = as_numpy(buf)
            np.divide(arr, arr.dtype.type(state.sc.size), out=arr)
            state.sc.allreduce(arr, arr, op="sum")
        state.buckets += 1
        fut.set_result(buf)
    except Exception as e:  # surfaces in the backward pass / optimizer step
        fut.set_exception(e)
    return fut
