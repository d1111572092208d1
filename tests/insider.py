"""An insider rank for the tests of origin proofs: one rank of the job, holding the group key,
forges group frames in another origin's name (tests/world/test_x509.py, and on the emulated
kernels tests/gpu/test_gpu_kernels_emulated.py)."""

from __future__ import annotations

import numpy as np


def forge_forwarded_block(monkeypatch, forger: int = 1, pick=None):
    """Rank ``forger`` (an insider, holding the group key, on the CPU engine) forwards, in place
    of the group frames it received, frames it sealed itself in their origin's name (0x41 bytes
    of the same sizes); with ``pick(j, real, forged)``, frame j is what it returns (of the frames
    it received and those it sealed, as uint8 arrays)."""
    from seccomm.collectives import allgather as ag
    from seccomm.engine import Send

    real = ag._forward

    def forward(run, nxt, prev, recv):
        if run.rank != forger:
            return real(run, nxt, prev, recv)
        pieces = [memoryview(np.full(n, 0x41, np.uint8)) for n in prev.sizes]
        forged = Send(dst=nxt, group=True, origin=prev.origin, pieces=pieces, ws="forged")
        if pick is None:
            return run.exchange(forged, recv)
        got = [np.array(f, np.uint8) for f in run.frames_of(prev)]
        made = [np.array(f, np.uint8) for f in run.sealed_frames(forged)]
        send = Send(nxt, frames=[pick(j, got, made) for j in range(len(got))])
        send.sizes, send.clear = prev.sizes, prev.clear
        run.exchange(send, recv)

    monkeypatch.setattr(ag, "_forward", forward)


def flipped(frame, at: int = 3):
    """A copy of ``frame`` (uint8) with one bit of byte ``at`` flipped."""
    frame = frame.copy()
    frame[at] ^= 1
    return frame


def caught(fn, *args):
    """``fn(*args)``, or the SecCommError it raised."""
    from seccomm import SecCommError

    try:
        return fn(*args)
    except SecCommError as e:
        return e


def allgathered(sc, n=40):
    out = np.zeros(sc.size * n, np.float32)
    sc.allgather(np.full(n, sc.rank + 1.0, np.float32), out)
    return out
