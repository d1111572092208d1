"""Transports that observe or alter frames on their way to the wire (tests, evidence).

- :class:`TamperTransport` flips one bit in selected outgoing frames (tests).
- :class:`RecordingTransport` keeps a copy of every buffer a rank hands to the transport
  (:mod:`seccomm.compliance.evidence`'s wire check).

The attacker harness's wrapper, :class:`~seccomm.compliance.attack.AttackTransport`, lives with
the harness.  Hand any of them to ``SecureComm(..., wrap_transport=...)`` and reach the wrapped
transport afterwards as ``SecureComm.transport``.
"""

from __future__ import annotations

import numpy as np

from .base import TransportWrapper, host_bytes


class TamperTransport(TransportWrapper):
    """Flips one bit in selected outgoing frames (for tests and the attacker harness).

    ``should_tamper(frame_index, peer, nbytes) -> int | None`` returns the byte offset to flip
    (negative counts from the end, e.g. -1 hits the tag) or ``None`` to pass the frame unchanged.
    The flipped copy is private, so the sender's buffer is untouched.  ``sent``: frames seen;
    ``tampered``: frames altered.
    """

    def __init__(self, inner, should_tamper):
        super().__init__(inner)
        self.should_tamper, self.sent, self.tampered = should_tamper, 0, 0

    def isend(self, buf, peer):
        off = self.should_tamper(
            self.sent, peer, buf.nbytes if hasattr(buf, "nbytes") else len(memoryview(buf))
        )
        self.sent += 1
        if off is None:
            return self.inner.isend(buf, peer)
        buf = host_bytes(buf).copy()
        buf[off] ^= 0x01
        self.tampered += 1
        return self.send_own(buf, peer)


class RecordingTransport(TransportWrapper):
    """Records a copy of every buffer handed to the transport: ``frames`` is a list of
    ``(kind, peer, uint8 array)`` with kind ``"frame"`` (isend) or the setup collective's name
    (peer ``"all"``; broadcast and scatter are recorded on their root only)."""

    def __init__(self, inner):
        super().__init__(inner)
        self.frames: list[tuple[str, object, np.ndarray]] = []

    def _keep(self, kind, peer, buf):
        self.frames.append((kind, peer, host_bytes(buf).copy()))

    def isend(self, buf, peer):
        self._keep("frame", peer, buf)
        return self.inner.isend(buf, peer)

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        self._keep("allgather", "all", sendbuf)
        return self.inner.allgather(sendbuf, recvbuf, op_label, timeout)

    def bcast(self, buf, root, op_label, timeout=None):
        if self.rank == root:
            self._keep("bcast", "all", buf)
        return self.inner.bcast(buf, root, op_label, timeout)

    def scatter(self, sendbuf, recvbuf, root, op_label, timeout=None):
        if self.rank == root:
            self._keep("scatter", "all", sendbuf)
        return self.inner.scatter(sendbuf, recvbuf, root, op_label, timeout)

    def wire_bytes(self) -> int:
        """Bytes recorded, all kinds together."""
        return sum(f.size for _, _, f in self.frames)
