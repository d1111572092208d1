"""DDP communication hook: every gradient bucket is allreduced by :class:`SecureComm` (same
framing, key schedule and algorithms as over MPI) through :class:`TorchTransport`.

    state = SecureHookState(process_group=None, suite="aes-256-gcm")
    ddp_model.register_comm_hook(state, secure_allreduce_hook)

Averaging matches DDP's default ``allreduce_hook``: the bucket is divided by the world size,
then summed.  The bucket keeps its dtype (float32, float64, float16, bfloat16 reduce in that
type with numpy/ml_dtypes, as MPI would; no gloo reduction is involved, so bfloat16 works where
gloo's own allreduce refuses it).  CUDA buckets (``nccl`` backend) go to ``SecureComm`` as they
are: float32, float64 and float16 buckets run on the device engine (seccomm's kernels seal on the GPU and the
device frames go to NCCL without leaving it); bfloat16 buckets are staged through pinned host
memory (CuPy has no bfloat16); without CuPy, CUDA buckets are staged through host memory by
torch (two copies of the bucket, and two of each frame for NCCL).  A bucket that fails authentication
fails the training step: the future carries seccomm's ``AuthenticationError``, which torch (2.13)
raises from the backward pass as a ``RuntimeError`` with seccomm's message.  A tampered gradient
never reaches the optimizer.
"""

import numpy as np
import torch
import torch.distributed as dist

from ..comm import SecureComm
from ..dtypes import DTYPES
from ..transports.torch import TorchTransport, default_timeout

_NP = {torch.float32: np.float32, torch.float64: np.float64, torch.float16: np.float16}


TRANSPORTS = ("auto", "mpi", "torch")


def mpi_world(process_group=None):
    """``MPI.COMM_WORLD`` when the DDP group is the whole world and every rank is the MPI rank of
    the same number (ranks started by ``mpiexec``/``srun`` or ``seccomm train --np``), else
    ``None``.  Collective over the MPI world when there is one (every rank decides the same)."""
    from .. import launch

    if launch.launcher() != "mpi":
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    comm = MPI.COMM_WORLD
    same = process_group is None and (comm.Get_size(), comm.Get_rank()) == (
        dist.get_world_size(),
        dist.get_rank(),
    )
    return comm if comm.allreduce(int(same), op=MPI.MIN) else None


class SecureHookState:
    """State for :func:`secure_allreduce_hook`; a collective call (builds a ``SecureComm``).

    ``process_group``: the DDP process group (``None``: world).  ``transport``: what carries the
    frames: ``"torch"`` (default: :class:`~seccomm.transports.torch.TorchTransport` over the
    group's backend; MPI is never loaded), ``"mpi"`` (MPI point-to-point on ``COMM_WORLD``: the
    ranks must be MPI ranks of the same numbers, :func:`mpi_world`; ``ValueError`` otherwise), or
    ``"auto"``: MPI under gloo when :func:`mpi_world` allows it, else torch (``seccomm train``'s
    default).  Under ``nccl`` "auto" is always torch (frames stay on the GPU).  Why MPI for CPU
    buckets: gloo point-to-point costs ~0.5-1 ms a message on loopback TCP, MPI over shared memory
    microseconds (docs/performance.md, "PyTorch DDP").  With "mpi"/"auto", MPI is initialised in
    this process (``mpi4py``), so the ranks must end normally (``MPI_Finalize`` at exit).
    ``batch_p2p``, ``device``: see :class:`~seccomm.transports.torch.TorchTransport`.  Other
    keyword arguments go to :class:`~seccomm.comm.SecureComm` (``suite``, ``chunk_bytes``,
    ``psk``, ``algorithm``, ...).
    """

    def __init__(
        self,
        process_group=None,
        suite: str = "aes-256-gcm",
        *,
        batch_p2p=None,
        device=None,
        transport: str = "torch",
        **kw,
    ):
        if transport not in TRANSPORTS:
            raise ValueError(f"transport must be one of {', '.join(TRANSPORTS)}, got {transport!r}")
        kw.setdefault("timeout", default_timeout())
        self.process_group = process_group
        comm = None
        if transport == "mpi" or (transport == "auto" and "nccl" not in str(dist.get_backend(process_group))):
            comm = mpi_world(process_group)
            if comm is None and transport == "mpi":
                raise ValueError(
                    "transport='mpi' needs every rank of the DDP group to be the MPI rank of the same "
                    "number (ranks started by mpiexec or srun, whole-world group)"
                )
        if comm is None:
            comm = TorchTransport(process_group, timeout=kw["timeout"], batch_p2p=batch_p2p, device=device)
        self.transport = "torch" if isinstance(comm, TorchTransport) else "mpi"
        self.sc = SecureComm(comm, suite, **kw)
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
        return t.view(torch.int16).numpy().view(DTYPES["bfloat16"][0])
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
