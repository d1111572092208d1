"""A rank that dies mid-allreduce makes every survivor raise TransportTimeout within the
configured deadline (no run hangs), and every survivor names the dead rank: the first to give up
tells the others whom it waited on, and they follow that chain (failure propagation).

``MPIR_CVAR_NOLOCAL=1`` makes the local ranks talk through MPICH's network module, as ranks on
different nodes do.  Over MPICH's shared-memory queues a rank that was sending to the dead one can
run out of queue cells and cannot send its notice; it still raises within the deadline.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from helpers import mpiexec, rank_results, run_cmd


def _results(stdout):
    """RESULT records; parsed with a pattern, since mpiexec may merge the ranks' lines."""
    return [list(m) for m in re.findall(r"(RESULT) (\d+) (\w+) (\S+?) (\d+\.\d+) (-|\d+|None)", stdout)]


def _forged(stdout):
    """rank -> give-up notices that failed authentication there (FORGED records)."""
    return {int(r): int(n) for r, n in re.findall(r"FORGED (\d+) (\d+)", stdout)}


def _run_worker(*args, nolocal=True, n=3):
    env = dict(os.environ, MPIR_CVAR_NOLOCAL="1") if nolocal else dict(os.environ)
    return run_cmd(
        [mpiexec(), "-disable-auto-cleanup", "-n", str(n), sys.executable]
        + [str(Path(__file__).resolve().parents[1] / "fault_worker.py"), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


#: (ranks, dead rank, algorithm) -> {survivor: the ranks it may be waiting on when its deadline
#: passes}.  A ring rank receives from its left neighbour and sends to its right one (a send to
#: the dead rank may complete eagerly, leaving its receive to wait on); recursive doubling on 3
#: ranks: rank 0 folds into rank 1, ranks 1 and 2 exchange, rank 1 returns the sum to rank 0.
#: A survivor waiting on a live rank must follow the give-up notices to the dead one: rank 0 of
#: (3, 2, rd), rank 3 of (4, 1, ring).
KILLS = {
    (3, 2, "ring"): {0: {2}, 1: {2, 0}},
    (3, 0, "ring"): {1: {0}, 2: {0, 1}},
    (4, 1, "ring"): {2: {1}, 3: {2}, 0: {1, 3}},
    (3, 2, "recursive_doubling"): {1: {2}, 0: {1}},
    (3, 1, "recursive_doubling"): {0: {1}, 2: {1}},
}


def _waited(stdout):
    """rank -> (the rank it was waiting on when it raised, its error message): WAITED records."""
    return {int(r): (w, m) for r, w, m in re.findall(r"WAITED (\d+) (\S+) MESSAGE ([^\n]*)", stdout)}


@pytest.mark.mpi
@pytest.mark.parametrize("n,dead,algorithm", list(KILLS), ids=[f"np{n}-dead{d}-{a}" for n, d, a in KILLS])
def test_kill_one_rank_mid_allreduce(n, dead, algorithm):
    """Every survivor raises TransportTimeout naming the dead rank, never a live one, whether it
    waited on the dead rank itself or on a live rank stuck behind it (then its message says so)."""
    out = _run_worker(dead, algorithm, n=n)
    results, waited = _results(out.stdout), _waited(out.stdout)
    expect = KILLS[(n, dead, algorithm)]
    assert sorted(int(r[1]) for r in results) == sorted(expect), out.stdout + out.stderr[-2000:]
    for _, rank, err, peer, secs, _ in results:
        on, msg = waited[int(rank)]
        assert err == "TransportTimeout", (rank, err, peer)
        assert peer == str(dead), (rank, peer, out.stdout)  # the dead rank, not a stalled neighbour
        assert int(on) in expect[int(rank)], (rank, on, out.stdout)
        assert f"rank {dead} made no progress" in msg, (rank, msg)
        live = int(on) != dead
        assert live == (f"this rank waited on rank {on}, itself stuck behind it" in msg), (rank, msg)
        assert float(secs) < 2.0 * 3  # a 2 s deadline plus at most a 2 s grace period


@pytest.mark.mpi
def test_tampered_frame_stops_every_rank_at_once():
    """Rank 1 flips a tag bit in its first ring frame (to rank 2): rank 2 raises
    AuthenticationError naming rank 1; ranks 0 and 1, which wait on rank 2 directly or through
    the ring, raise PeerAbortError naming rank 2 and blaming rank 1 -- well before the 30 s
    deadline they would otherwise wait out."""
    out = run_cmd(
        [
            mpiexec(),
            "-n",
            "3",
            sys.executable,
            str(Path(__file__).resolve().parents[1] / "fault_worker.py"),
            "1",
            "ring",
            "tamper",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    results = {int(r[1]): r[2:] for r in _results(out.stdout)}
    assert sorted(results) == [0, 1, 2], out.stdout + out.stderr[-2000:]
    assert results[2][:2] == ["AuthenticationError", "1"], results
    for r in (0, 1):
        err, peer, secs, blamed = results[r]
        assert (err, peer, blamed) == ("PeerAbortError", "2", "1"), results
        assert float(secs) < 10.0, results


@pytest.mark.mpi
@pytest.mark.parametrize("dead,algorithm", [(2, "ring"), (0, "ring"), (1, "recursive_doubling")])
def test_forged_give_up_notice_does_not_move_the_blame(dead, algorithm):
    """Before it dies, the dead rank sends a give-up notice "I gave up waiting on rank dead+1"
    whose MAC is under a wrong key (a raw MPI send on the notice tag).  Believed, it would make
    the survivors blame the innocent rank; they ignore it (each counts one forged notice) and
    still name the dead rank within the deadline, as in the honest run."""
    out = _run_worker(dead, algorithm, "die-forge")
    results, forged = _results(out.stdout), _forged(out.stdout)
    survivors = sorted({0, 1, 2} - {dead})
    assert sorted(int(r[1]) for r in results) == survivors, out.stdout + out.stderr[-2000:]
    for _, rank, err, peer, secs, _ in results:
        assert (err, peer) == ("TransportTimeout", str(dead)), (rank, out.stdout)
        assert float(secs) < 2.0 * 3
        assert forged[int(rank)] == 1, out.stdout  # the forgery arrived and was rejected


@pytest.mark.mpi
def test_forged_abort_notice_before_the_genuine_one():
    """Rank 1 flips a bit in its frame to rank 2; rank 2 first sends a forged abort notice
    (wrong MAC) blaming rank 0, then its genuine one blaming rank 1.  Ranks 0 and 1 reject the
    forgery, listen again, and take the genuine notice: PeerAbortError naming rank 2 and blaming
    rank 1, at once (a lost genuine notice would leave them to the 30 s deadline)."""
    out = _run_worker(1, "ring", "tamper-forge", nolocal=False)
    results, forged = {int(r[1]): r[2:] for r in _results(out.stdout)}, _forged(out.stdout)
    assert sorted(results) == [0, 1, 2], out.stdout + out.stderr[-2000:]
    assert results[2][:2] == ["AuthenticationError", "1"], results
    for r in (0, 1):
        err, peer, secs, blamed = results[r]
        assert (err, peer, blamed) == ("PeerAbortError", "2", "1"), results
        assert float(secs) < 10.0, results
        assert forged[r] == 1, out.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling"])
def test_any_error_inside_an_op_stops_every_rank_at_once(algorithm):
    """Rank 1 raises a plain RuntimeError inside an allreduce (not a SecCommError).  Rank 1 sees
    its RuntimeError; ranks 0 and 2 raise PeerAbortError naming rank 1 (blamed: rank 1 itself) well
    before the 30 s deadline, instead of waiting it out and blaming a rank."""
    out = _run_worker(1, algorithm, "raise", nolocal=False)
    results = {int(r[1]): r[2:] for r in _results(out.stdout)}
    assert sorted(results) == [0, 1, 2], out.stdout + out.stderr[-2000:]
    assert results[1][0] == "RuntimeError", results
    for r in (0, 2):
        err, peer, secs, blamed = results[r]
        assert (err, peer, blamed) == ("PeerAbortError", "1", "1"), results
        assert float(secs) < 10.0, results


@pytest.mark.mpi
def test_an_error_from_an_unknown_sender_stops_every_rank_at_once():
    """Rank 1 fails in an op with a FrameError whose sender MPI could not say (``peer == "any"``:
    a record receive that got a larger message, as when a record is dropped on 3 ranks).  It
    still tells the others: ranks 0 and 2 raise PeerAbortError naming rank 1 (blamed: None, no
    rank accused) long before the 30 s deadline, instead of waiting it out and blaming a rank."""
    out = _run_worker(1, "ring", "unknown-sender", nolocal=False)
    results = {int(r[1]): r[2:] for r in _results(out.stdout)}
    assert sorted(results) == [0, 1, 2], out.stdout + out.stderr[-2000:]
    assert results[1][:2] == ["FrameError", "any"], results
    for r in (0, 2):
        err, peer, secs, blamed = results[r]
        assert (err, peer, blamed) == ("PeerAbortError", "1", "None"), results
        assert float(secs) < 10.0, results
    assert "a message whose sender it could not tell" in out.stdout, out.stdout


_DROP_RECEIPTS = """
import time
import numpy as np
from mpi4py import MPI
from seccomm import SecCommError, SecureComm
from seccomm.transports import TransportWrapper
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")

class Sent:
    def Test(self, *a):
        return True

class DropReceipts(TransportWrapper):  # on-path: rank 1's receipts to rank 0 never arrive
    def isend_receipt(self, buf, peer):
        if self.rank == 1 and peer == 0:
            return Sent()
        return self.inner.isend_receipt(buf, peer)

c = MPI.COMM_WORLD
sc = SecureComm(c, "aes-256-gcm", psk=PSK, timeout=2, chunk_bytes=4096, algorithm="ring",
                wrap_transport=DropReceipts)
x = np.ones(3 * 16 * 1024, np.float32)  # 16 frames a hop: acknowledged
res = "RETURNED"
for k in range(3):
    try:
        sc.allreduce(x, np.empty_like(x))
    except SecCommError as e:
        res = f"{type(e).__name__} {e.peer} {getattr(e, 'link', None)} {e}"
        break
"""


@pytest.mark.mpi
def test_dropped_receipts_name_the_link_not_a_rank_that_did_its_part():
    """Rank 1's receipts to rank 0 dropped on the way (3 ranks, 16 frames a hop): rank 0 waits
    on rank 1 in one op while rank 1 waits on rank 0 in the next.  Every rank raises
    TransportTimeout naming the link 0-1 (``link == (0, 1)``); none names itself as the rank
    that stalled, and rank 2 names no rank of its own links."""
    results, _ = rank_results(_DROP_RECEIPTS, 3)
    for r, text in results.items():
        err, peer, link = text.split(" ")[:3]
        assert err == "TransportTimeout" and link == "(0," and "1)" in text, (r, text)
        assert peer in ("0", "1") and peer != r, (r, text)
        assert "each waited on the other" in text and "stalled" not in text, (r, text)


_STALL = """
import time
import numpy as np
from mpi4py import MPI
from seccomm import SecCommError, SecureComm
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")
c = MPI.COMM_WORLD
sc = SecureComm(c, "aes-256-gcm", psk=PSK, timeout=2, algorithm="ring")
x = np.ones(3 * 1024, np.float32)
res = "RETURNED"
for k in range(4):
    if k == 1 and c.rank == 1:
        time.sleep(STALL_S)  # stalls between two ops, past the others' deadline
    try:
        sc.allreduce(x, np.empty_like(x))
    except SecCommError as e:
        res = f"{type(e).__name__} {e.peer} {getattr(e, 'link', None)} {e}"
        break
"""


@pytest.mark.mpi
@pytest.mark.parametrize("stall_s", [3, 4, 6])
def test_a_rank_that_stalls_between_ops_is_named_by_every_rank_itself_included(stall_s):
    """Rank 1 sleeps 3, 4 or 6 s between two ops (deadline 2 s, so the others' grace period ends
    at 4 s): ranks 0 and 2 name rank 1, and rank 1, which sees their notices as soon as it waits
    again, says that it stalled.  The mutual-wait rule does not take a stalled rank for a lost
    link, and the late notice of a stalled rank (inside the others' grace period at 3 s) names
    itself, so it closes no cycle that would make ranks 0 and 2 name a link."""
    script = f"STALL_S = {stall_s}\n" + _STALL
    results, _ = rank_results(script, 3)
    for r, text in results.items():
        assert text.startswith("TransportTimeout 1 None "), (r, text)
    assert "gave up waiting on this rank (rank 1): it stalled" in results["1"], results


_FALLBACK_JUNK = """
import time
import numpy as np
from mpi4py import MPI
from seccomm import SecCommError, SecureComm
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")
c = MPI.COMM_WORLD
sc = SecureComm(c, "aes-256-gcm", psk=PSK, timeout=3)
t = sc.transport
sc.allreduce(np.ones(4, np.float32), np.zeros(4, np.float32))
if c.rank == 0:  # injected on rank 1's fallback box first: another op number, another size, larger
    for n in (40, 17, 4096):
        t.comm.Send([np.full(n, 0xA5, np.uint8), MPI.BYTE], 1, t.tag + 2)
c.Barrier()
t0 = time.monotonic()
n = 80 if c.rank == 0 else 64  # rank 1 gets a larger first message than it expects
try:
    sc.allreduce(np.ones(n, np.float32), np.zeros(n, np.float32))
    res = "RETURNED"
except SecCommError as e:
    res = f"{type(e).__name__} {time.monotonic() - t0:.2f} {e}"
"""


@pytest.mark.mpi
def test_junk_on_the_fallback_box_does_not_hide_the_genuine_record():
    """Two ranks disagree on the count, so rank 1 cannot read the record behind rank 0's first
    frame (a larger message than it expects) and looks for rank 0's record on the fallback box.
    Three junk messages wait there first (a record of no op, 17 bytes, 4 KiB): each is dropped
    and the receive posted again, and both ranks raise the disagreement at once, not a FrameError
    at the 3 s deadline."""
    results, _ = rank_results(_FALLBACK_JUNK, 2)
    for r, text in results.items():
        err, secs, msg = text.split(" ", 2)
        assert err == "ArgumentMismatchError" and float(secs) < 1.5, (r, text)
        assert "count: rank 0 passed 80, rank 1 passed 64" in msg, (r, text)


_HELD = """
import time
import numpy as np
from mpi4py import MPI
from seccomm import SecCommError, SecureComm
from seccomm.transports import TransportWrapper
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")

class Hold(TransportWrapper):  # on-path: what rank 1 sends rank 0 in op 2 is held past the deadline
    op = 0
    def irecv(self, buf, peer):
        if self.rank == 0 and peer == 1 and Hold.op == 2:
            self.inner.irecv(np.empty(1 << 16, np.uint8), peer)  # (it lands here, never read)
            return self.inner.comm.Irecv([np.empty(16, np.uint8), MPI.BYTE], 1, 999)  # (never done)
        return self.inner.irecv(buf, peer)

c = MPI.COMM_WORLD
sc = SecureComm(c, "aes-256-gcm", psk=PSK, timeout=2, wrap_transport=Hold)
x = np.ones(1024, np.float32)
res = "RETURNED"
for k in range(1, 5):
    Hold.op = k
    try:
        sc.bcast(x, root=1)
    except SecCommError as e:
        res = f"{type(e).__name__} {e.peer} {getattr(e, 'link', None)} {e}"
        break
    if c.rank == 1 and k == 2:
        time.sleep(PAUSE_S)  # its own work between two ops
"""


@pytest.mark.mpi
@pytest.mark.parametrize("pause_s", [0.5, 2.5])
def test_a_rank_whose_message_was_held_is_not_blamed_for_stalling(pause_s):
    """Rank 1, the root of a bcast, sends its frame in op 2 and returns; the frame is held on the
    way past rank 0's 2 s deadline.  Rank 1 then works 0.5 s or 2.5 s and enters op 3, where
    rank 0's give-up notice is waiting: the notice names op 2, which rank 1 has done, so rank 1
    did not stall however briefly it has waited since.  Both ranks name the link (0, 1) (before,
    at 2.5 s, both named rank 1 as the rank that stalled)."""
    script = f"PAUSE_S = {pause_s}\n" + _HELD
    results, _ = rank_results(script, 2)
    for r, text in results.items():
        assert text.startswith(f"TransportTimeout {1 - int(r)} (0, 1) "), (r, text)
        assert "each waited on the other" in text and "stalled" not in text, (r, text)
