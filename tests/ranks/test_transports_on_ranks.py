"""The MPI transport on real ranks (mpiexec): frames a failed op left unreceived never reach a
later communicator; a padded frame is named as an oversized one.  The transport's in-process tests
(one rank on COMM_SELF): tests/world/test_transports.py."""

from __future__ import annotations

import sys

import pytest

_STALE = """
import numpy as np
from mpi4py import MPI
from seccomm import SecCommError, SecureComm
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")
c, bad = MPI.COMM_WORLD, 0
for trial in range(6):
    a = SecureComm(c, "aes-256-gcm", psk=PSK, timeout=2)
    try:  # rank 1 passes another root: its frames (4 KiB and more) are never received
        a.bcast(np.full(1024 << (trial % 3), 1.0, np.float32), root=1 if c.rank == 1 else 0)
    except SecCommError:
        pass
    a.close()
    b = SecureComm(c, "aes-256-gcm", psk=PSK, timeout=2)
    x = np.full(1024, 1.0 + c.rank, np.float32)
    y = np.empty_like(x)
    try:
        b.bcast(x, root=0)
        b.allreduce(x, y)
        bad += not np.all(y == 3.0)
    except Exception as e:
        bad += 1
        print("ERROR", type(e).__name__, e, flush=True)
    b.close()
total = c.allreduce(bad)
if c.rank == 0:
    print("BAD", total, flush=True)
"""


@pytest.mark.mpi
def test_a_failed_ops_unreceived_frames_never_reach_a_later_communicator():
    """Frames of 4 to 16 KiB left unreceived by a failed op (a bcast whose ranks disagree on the
    root) are received and dropped at close: MPI hands a later communicator the same context
    id, and its ops must not take them for their own frames or records."""
    from helpers import mpiexec, run_cmd

    out = run_cmd([mpiexec(), "-n", "3", sys.executable, "-c", _STALE], timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "BAD 0\n" in out.stdout, out.stdout[-2000:]


@pytest.mark.mpi
def test_a_padded_frame_on_real_ranks_is_named_as_an_oversized_frame():
    """Rank 0's frames to rank 1 padded by 1 byte and by 16 MiB on the wire: rank 1 raises
    FrameError naming rank 0 and an oversized frame (rank 0, whose own receive was genuine,
    may return with the right result, or learn of rank 1's error)."""
    from helpers import mpiexec, run_cmd

    code = """
import numpy as np
from mpi4py import MPI
from seccomm import SecCommError, SecureComm
from seccomm.transports import TransportWrapper, host_bytes
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")

class Pad(TransportWrapper):
    extra = 0
    def isend(self, buf, peer):
        if self.rank == 0 and self.extra:
            out = np.concatenate([host_bytes(buf), np.zeros(self.extra, np.uint8)])
            return self.send_own(out, peer)
        return self.inner.isend(buf, peer)

c, lines = MPI.COMM_WORLD, []
for extra in (1, 16 << 20):
    sc = SecureComm(c, "aes-256-gcm", psk=PSK, timeout=5, wrap_transport=Pad)
    sc.transport.extra = extra
    x = np.ones(4096, np.float32)
    try:
        sc.allreduce(x, np.empty_like(x))
        lines.append("RETURNED")
    except SecCommError as e:
        lines.append(f"{type(e).__name__} {e.peer} {e}")
    sc.close()
got = c.gather(lines)
if c.rank == 0:
    for r, ls in enumerate(got):
        for ln in ls:
            print(f"RANK {r} {ln}", flush=True)
"""
    out = run_cmd([mpiexec(), "-n", "2", sys.executable, "-c", code], timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    rank1 = [ln for ln in out.stdout.splitlines() if ln.startswith("RANK 1 ")]
    assert len(rank1) == 2, out.stdout
    for ln in rank1:
        assert ln.startswith("RANK 1 FrameError 0 ") and "larger than the frame this rank expected" in ln, ln
    for ln in out.stdout.splitlines():
        if ln.startswith("RANK 0 "):
            assert ln == "RANK 0 RETURNED" or ln.startswith("RANK 0 PeerAbortError 1 "), ln
