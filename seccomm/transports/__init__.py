"""Transports: move frames (opaque uint8 buffers) between ranks.

- :mod:`.base`: the interface, :class:`TransportWrapper`, ``host_bytes``.
- :mod:`.mpi`: mpi4py point-to-point (the default).
- :mod:`.nccl`: NCCL point-to-point through CuPy (device frames).
- :mod:`.torch`: ``torch.distributed`` point-to-point (gloo, nccl).
- :mod:`.wrappers`: transports that observe or alter frames (tampering, recording).

Only :mod:`.base` and :mod:`.mpi` load with this package; NCCL and torch load on first use.
"""

from .base import MPITransport, Transport, TransportWrapper, host_bytes

__all__ = ["Transport", "TransportWrapper", "MPITransport", "host_bytes"]
