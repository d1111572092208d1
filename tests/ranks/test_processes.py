"""What a job's processes do around a ``SecureComm``: communicators it cannot use, on real ranks
(``mpiexec``), and a TypeError that comes at once on every rank."""

from __future__ import annotations

import sys

import pytest

from helpers import rank_results, run_cmd

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
"""


@pytest.mark.mpi
def test_an_intercommunicator_is_refused_at_once_on_every_rank():
    """4 ranks, two groups joined by an intercommunicator: every rank raises TypeError naming
    Intracomm and the fix at once (before: the setup ran out its 10 s deadline)."""
    results, _ = rank_results(_INTERCOMM, 4)
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


_INTERRUPT = """
import os, signal, sys, threading, time
import numpy as np
from mpi4py import MPI
from seccomm import SecCommError, SecureComm
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")
KIND = sys.argv[1]
c = MPI.COMM_WORLD
sc = SecureComm(c, "aes-256-gcm", psk=PSK, timeout=30)
x = np.ones(8 << 20, np.float32)  # 32 MiB: each allreduce takes a while
y = np.empty_like(x)
sc.allreduce(x, y)
c.Barrier()
if c.rank == 1:
    if KIND == "sigint":  # Ctrl-C: SIGINT while inside an op
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    else:  # sys.exit() from a thread the op calls back into: SystemExit inside the op
        import seccomm.sequence as m
        real = m._quiet
        m._quiet = lambda steps: (time.sleep(0.3), sys.exit(3))
t0 = time.monotonic()
try:
    for _ in range(100):
        sc.allreduce(x, y)
    res = "RETURNED"
except SecCommError as e:
    res = f"{type(e).__name__} {e.peer} {time.monotonic() - t0:.2f} {e}"
except BaseException as e:
    res = f"{type(e).__name__} - {time.monotonic() - t0:.2f} {e!r}"
"""


@pytest.mark.mpi
@pytest.mark.parametrize("kind", ["sigint", "systemexit"])
def test_keyboardinterrupt_or_systemexit_inside_an_op_stops_the_peer_at_once(kind):
    """Rank 1 gets Ctrl-C (SIGINT) or raises SystemExit inside a 32 MiB allreduce (deadline
    30 s): it sees its own exception, and rank 0 raises PeerAbortError naming rank 1 within a
    few seconds, not TransportTimeout at the deadline (before: 30 s, 'rank 1 made no progress')."""
    results, _ = rank_results(_INTERRUPT, 2, kind)
    err, peer, secs, msg = results["0"].split(" ", 3)
    assert (err, peer) == ("PeerAbortError", "1") and float(secs) < 10, results
    assert "rank 1 stopped this operation after an error of its own" in msg, results
    own = "KeyboardInterrupt" if kind == "sigint" else "SystemExit"
    assert results["1"].startswith(own), results


_FORK = """
import os, time
import numpy as np
from mpi4py import MPI
import seccomm.comm
from seccomm import SecCommError, SecureComm
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")
c = MPI.COMM_WORLD
sc = SecureComm(c, "aes-256-gcm", psk=PSK, timeout=5)
x = np.ones(1024, np.float32)
y = np.empty_like(x)
sc.allreduce(x, y)
if c.rank == 0:
    pid = os.fork()
    if pid == 0:  # the child: every call refused at once, close() and the exit hook touch nothing
        t0 = time.monotonic()
        try:
            sc.allreduce(x, y)
            print("CHILD RETURNED", flush=True)
        except SecCommError as e:
            print(f"CHILD {type(e).__name__} {time.monotonic() - t0:.2f} {e}", flush=True)
        sc.close()
        seccomm.comm._close_open_comms()  # (seccomm's atexit hook)
        os._exit(0)  # (sys.exit would also run mpi4py's MPI_Finalize, which MPI forbids in a child)
    os.waitpid(pid, 0)
try:
    for _ in range(3):
        sc.allreduce(x, y)
    res = f"OK {y[0]:g}"
except SecCommError as e:
    res = f"{type(e).__name__} {e}"
"""


@pytest.mark.mpi
def test_a_forked_child_refuses_every_call_and_leaves_the_parents_communicator_alone():
    """Rank 0 forks after building a SecureComm.  The child's allreduce raises CommClosedError
    at once naming the fork (before: it sent traffic as rank 0 and both ranks then timed out),
    its close() and seccomm's exit hook do nothing to the parent's communicator, and the
    parents' next allreduces return the right sum."""
    results, stdout = rank_results(_FORK, 2)
    child = next(ln for ln in stdout.splitlines() if ln.startswith("CHILD "))
    _, err, secs, msg = child.split(" ", 3)
    assert err == "CommClosedError" and float(secs) < 0.5, child
    assert "is a fork of the one that built this SecureComm" in msg, child
    assert results == {"0": "OK 2", "1": "OK 2"}, stdout
