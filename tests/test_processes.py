"""What a job's processes do around a ``SecureComm``: communicators it cannot use, on real ranks
(``mpiexec``), and a TypeError that comes at once on every rank."""

from __future__ import annotations

import sys

import pytest

from conftest import mpiexec, run_cmd

_INTERCOMM = """
import time
from mpi4py import MPI
from seccomm import SecureComm
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")
w = MPI.COMM_WORLD
half = w.Split(w.rank % 2, w.rank)
inter = half.Create_intercomm(0, w, 1 - w.rank % 2, tag=5)
t0 = time.monotonic()
try:
    SecureComm(inter, psk=PSK, timeout=10)
    res = "BUILT"
except TypeError as e:
    res = f"TypeError {time.monotonic() - t0:.2f} {e}"
out = w.gather(res)
if w.rank == 0:
    for r, ln in enumerate(out):
        print(f"RESULT {r} {ln}", flush=True)
"""


@pytest.mark.mpi
def test_an_intercommunicator_is_refused_at_once_on_every_rank():
    """4 ranks, two groups joined by an intercommunicator: every rank raises TypeError naming
    Intracomm and the fix at once (before: the setup ran out its 10 s deadline)."""
    out = run_cmd([mpiexec(), "-n", "4", sys.executable, "-c", _INTERCOMM], timeout=120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    results = dict(ln.split(" ", 2)[1:] for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    assert sorted(results) == ["0", "1", "2", "3"], out.stdout
    for r, text in results.items():
        err, secs, msg = text.split(" ", 2)
        assert err == "TypeError" and float(secs) < 1.0, (r, text)
        assert "mpi4py.MPI.Intracomm, got an intercommunicator (merge it first: comm.Merge())" in msg


_EXHAUST = """
from mpi4py import MPI
from seccomm import SecCommError, SecureComm
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")
keep = []
try:
    for _ in range(10_000):
        keep.append(SecureComm(MPI.COMM_WORLD, psk=PSK, timeout=5))
except SecCommError as e:
    print("RAISED", len(keep), type(e).__name__, e, flush=True)
for sc in keep[:10]:
    sc.close()
with SecureComm(MPI.COMM_WORLD, psk=PSK, timeout=5):
    print("AFTER CLOSE: BUILT", flush=True)
"""


def test_too_many_open_securecomms_name_the_cause_and_the_fix():
    """Without close(), MPI runs out of communicators (MPICH: the 2,047th duplicate): the error
    says so, how many are open and what to do, not a frame error blaming a peer; after closing
    some, a new one builds."""
    out = run_cmd([sys.executable, "-c", _EXHAUST], timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("RAISED "))
    _, n, err, msg = line.split(" ", 3)
    assert err == "SecCommError" and int(n) > 100, line
    assert f"this process has {int(n):,} SecureComm objects open" in msg and "close()" in msg, line
    assert "MPI_Comm_idup failed" in msg and "abandoned" not in msg, line
    assert "AFTER CLOSE: BUILT" in out.stdout
