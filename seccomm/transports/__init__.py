"""Transports: move frames (opaque uint8 buffers) between ranks.

- :mod:`.base`: the interface, :class:`TransportWrapper`, ``host_bytes`` and ``poll_until``
  (the one poll-until-deadline loop every transport's waits use).
- :mod:`.mpi`: mpi4py point-to-point (the default).
- :mod:`.nccl`: NCCL point-to-point through CuPy (device frames).
- :mod:`.torch`: ``torch.distributed`` point-to-point (gloo, nccl).
- :mod:`.wrappers`: transports that observe or alter frames (tampering, recording).

Importing this package loads neither mpi4py (on first ``MPITransport``), torch nor CuPy: NCCL and
torch transports are imported from their modules.
"""

from .base import Backoff, Transport, TransportWrapper, host_bytes, poll_until
from .mpi import MPITransport, cuda_aware_mpi
from .wrappers import RecordingTransport, TamperTransport

__all__ = [
    "Transport",
    "TransportWrapper",
    "MPITransport",
    "TamperTransport",
    "RecordingTransport",
    "host_bytes",
    "poll_until",
    "Backoff",
    "cuda_aware_mpi",
]
