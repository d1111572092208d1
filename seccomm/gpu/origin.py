"""Origin proofs on device buffers: the MACs of :mod:`seccomm.engine.origin`, computed by the GMAC
kernels over device memory.

The MACs, their nonces, keys and messages are the CPU engine's, bit for bit (a device-engine rank
and a CPU-engine rank check each other's).  What differs is where they are computed: an origin
computes the MACs of all its group frames for all ``p - 1`` receivers in one launch
(:meth:`~seccomm.gpu.aead.GPUAEAD.macs`, ``(p - 1) f`` chunks of its plaintext, ``aads`` of
width 0); a receiver opens a step's group frames into private device memory
(:meth:`~seccomm.gpu.engine.DeviceOpRun._open_into`), checks them against the origin's MACs in one
launch and only then copies them to the caller's buffer.  Only the 16-byte tags cross to the
host (the message's own MAC is computed there, over them); the plaintext does not."""

from __future__ import annotations

import numpy as np

from ..engine.origin import _NONCE, _PHASE, TAG_BYTES, OriginProofs
from .aead import Batch


class DeviceOriginProofs(OriginProofs):
    """:class:`~seccomm.engine.origin.OriginProofs` of a
    :class:`~seccomm.gpu.engine.DeviceOpRun` (``run.backend``: its array module and batch AEAD)."""

    __slots__ = ()

    def _batch(self, keys: list, js: list, views: list) -> Batch:
        """The GMACs of ``views`` (uint8 device views in one allocation): chunk i under the raw
        key ``keys[i]`` with the nonce of frame ``js[i]`` of this op."""
        be, op, n = self.run.backend, self.run.frame.op_index, len(views)
        span, offs = be.span(views)
        nonces = np.frombuffer(b"".join(_NONCE.pack(op, j, _PHASE) for j in js), np.uint8).reshape(n, 12)
        rows = np.frombuffer(b"".join(keys), np.uint8).reshape(n, 32)
        lens = np.array([v.nbytes for v in views], np.int64)
        d = [be.asarray(a) for a in (rows, nonces, np.zeros((n, 0), np.uint8), offs, lens)]
        return Batch(d[0], d[1], d[2], span, d[3], d[4], None, None, max_len=int(lens.max()))

    def frame_macs(self, epoch: int, receivers: list, pieces: list) -> list:
        """As :meth:`OriginProofs.frame_macs <seccomm.engine.origin.OriginProofs.frame_macs>`, for
        device ``pieces``: one launch for every receiver and frame."""
        run, f = self.run, len(pieces)
        be = run.backend
        keys = [run.keys.origin_key_bytes(epoch, run.rank, r) for r in receivers for _ in range(f)]
        tags = be.xp.empty((len(keys), TAG_BYTES), be.xp.uint8)
        n = len(receivers)
        be.aead("aes-256-gmac").macs(self._batch(keys, list(range(f)) * n, list(pieces) * n), tags)
        raw = be.to_host(tags).tobytes()
        step = TAG_BYTES * f
        return [raw[step * i : step * (i + 1)] for i in range(n)]

    def check_opened(self, box, origin: int, views: list) -> None:
        """``origin``'s first ``len(views)`` group frames of ``box``, opened into ``views``
        (private device memory, frame j in ``views[j]``): each one's MAC must be the one
        ``origin`` sent this rank (one launch, after :meth:`ready`), else
        :class:`~seccomm.errors.AuthenticationError` for the first that does not
        (:meth:`mismatch`), with ``views`` zeroed first.  Called where the op's group frames
        carry proofs (:attr:`on`), with one view at least."""
        self.ready(origin)
        run, n = self.run, len(views)
        be = run.backend
        key = run.keys.origin_key_bytes(run.frame.epoch, origin, run.rank)
        want = be.asarray(np.frombuffer(self.got[origin], np.uint8)[: TAG_BYTES * n].reshape(n, TAG_BYTES))
        ok = be.aead("aes-256-gmac").macs(self._batch([key] * n, list(range(n)), views), want, check=True)
        bad = np.flatnonzero(np.asarray(be.to_host(ok)) == 0)
        if bad.size:
            if box.key.suite.confidential:
                for v in views:
                    v.fill(0)
            raise self.mismatch(box, int(bad[0]), origin)
