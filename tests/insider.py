"""An insider rank for the tests of origin proofs: one rank of the job, holding the group key,
forges group frames in another origin's name (tests/world/test_x509.py, and on the emulated
kernels tests/gpu/test_gpu_kernels_emulated.py)."""

from __future__ import annotations

import numpy as np


def forge_forwarded_block(monkeypatch, forger: int = 1):
    """Rank ``forger`` (an insider, holding the group key) forwards, in place of the group frames
    it received, frames it sealed itself in their origin's name (0x41 bytes of the same sizes)."""
    from seccomm.collectives import allgather as ag
    from seccomm.engine import Send

    real = ag._forward

    def forward(run, nxt, prev, recv):
        if run.rank != forger:
            return real(run, nxt, prev, recv)
        pieces = [memoryview(np.full(n, 0x41, np.uint8)) for n in prev.sizes]
        run.exchange(Send(dst=nxt, group=True, origin=prev.origin, pieces=pieces, ws="forged"), recv)

    monkeypatch.setattr(ag, "_forward", forward)


def allgathered(sc, n=40):
    out = np.zeros(sc.size * n, np.float32)
    sc.allgather(np.full(n, sc.rank + 1.0, np.float32), out)
    return out
