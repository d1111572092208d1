"""Runs under ``mpiexec -disable-auto-cleanup -n 3 python fault_worker.py [DEAD [ALGORITHM [MODE]]]``.

MODE ``die`` (default): rank DEAD dies in the middle of an allreduce (after sending its first
frame); the survivors must raise TransportTimeout within the deadline.  MODE ``tamper``: rank
DEAD flips a bit in its first frame instead; the receiver raises AuthenticationError and the
other ranks PeerAbortError at once, long before the (30 s) deadline.  Each rank that raises
prints one line: RESULT <rank> <error> <peer> <seconds> [<blamed>].

Forged notices (give-up notices are MACed under the session's notice key): MODE ``die-forge``:
before it dies, rank DEAD sends every other rank a give-up notice "rank DEAD gave up waiting on
rank DEAD+1" whose MAC is under a wrong key (a raw MPI send on the notice tag); believed, it would
make the survivors blame the innocent rank DEAD+1.  MODE ``tamper-forge``: as ``tamper``, but the
receiver of the flipped frame first sends a forged abort notice blaming the third rank, then
its genuine one (blaming DEAD).  MODE ``unknown-sender``: rank DEAD's first wait in the op
raises a FrameError whose sender it cannot tell (``peer == "any"``); the others must raise
PeerAbortError naming it at once (blamed: None).  MODE ``raise``: rank DEAD raises a plain RuntimeError inside
the allreduce (from its transport, after its first frame): it must see that RuntimeError, and the
others PeerAbortError naming it at once.  Every rank also prints FORGED <rank> <notices that
failed authentication>, and each rank that raises WAITED <rank> <the rank it was waiting on when
it raised> MESSAGE <the error's text>.  Any world size from 3 works (``mpiexec -n K``)."""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

from seccomm import FrameError, SecCommError, SecureComm
from seccomm.transports import TransportWrapper
from seccomm.control import PairMacs
from seccomm.transports.notices import seal_notice

_WAITED, _ABORT = 0, 1  # the notice kinds of seccomm.transports.notices


def forge_notice(t, blamed, kind):
    """Send every other rank a notice in this rank's name, MACed under wrong keys."""
    wrong = PairMacs(t.rank, t.size, lambda a, b: os.urandom(32))
    for r in range(t.size):
        if r != t.rank:
            t.comm.Send([seal_notice(wrong, r, blamed, kind), MPI.BYTE], r, t.notices.tag)


class Watch(TransportWrapper):
    """Remembers the rank this rank waited on last (``waiting``): the one it was waiting on
    when its deadline passed."""

    waiting = None

    def wait_recv(self, req, peer):
        self.waiting = peer
        return self.inner.wait_recv(req, peer)

    def wait_sends(self, reqs, peers):
        for req, peer in zip(reqs, peers):  # one at a time, in order, as MPITransport waits
            self.waiting = peer
            self.inner.wait_sends([req], [peer])


class ForgeBeforeAbort(Watch):
    """On abort (after detecting a bad frame), first a forged abort notice blaming ``victim``."""

    victim = 0

    def abort(self, blame):
        forge_notice(self.inner, self.victim, _ABORT)
        return self.inner.abort(blame)


class DieAfterFirstFrame(TransportWrapper):
    armed = False
    tamper = False
    forge = False

    def isend(self, buf, peer):
        if self.armed and self.tamper:
            self.armed = False
            buf = np.frombuffer(buf, np.uint8).copy()
            buf[-1] ^= 1
            self.keep = buf
        r = self.inner.isend(buf, peer)
        if self.armed:
            if self.forge:
                forge_notice(self.inner, (self.rank + 1) % self.size, _WAITED)
            deadline = time.monotonic() + 5  # let the frame leave: die once the receiver has it
            while not r.Test() and time.monotonic() < deadline:  # (a survivor's read of a rank
                time.sleep(0.001)  # already gone may fail inside MPI itself: not what this tests)
            os._exit(3)
        return r


class UnknownSender(Watch):
    """In the armed operation, its first wait fails as a record receive that got a larger
    message does: a FrameError whose sender MPI cannot say (``peer == "any"``)."""

    armed = False

    def wait_recv(self, req, peer):
        op_label = self.op_label
        if self.armed:
            self.armed = False
            raise FrameError(f"{op_label}: planted: a message of unknown sender", peer="any", op=op_label)
        return super().wait_recv(req, peer)


class RaiseInOp(TransportWrapper):
    """After its first frame of the armed operation, an error that is not a SecCommError."""

    armed = False

    def isend(self, buf, peer):
        r = self.inner.isend(buf, peer)
        if self.armed:
            raise RuntimeError("planted: an error of this rank's own inside the operation")
        return r


c = MPI.COMM_WORLD
dead = int(sys.argv[1]) if len(sys.argv) > 1 else 2
alg = sys.argv[2] if len(sys.argv) > 2 else "ring"
mode = sys.argv[3] if len(sys.argv) > 3 else "die"
tamper = mode.startswith("tamper")
wrap = None
if c.rank == dead:
    wrap = {"raise": RaiseInOp, "unknown-sender": UnknownSender}.get(mode, DieAfterFirstFrame)
elif mode == "tamper-forge":
    wrap = ForgeBeforeAbort  # only the rank that detects the flipped frame ever aborts
else:
    wrap = Watch
sc = SecureComm(
    c,
    "aes-256-gcm",
    psk=bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0"),
    timeout=30.0 if tamper or mode in ("raise", "unknown-sender") else 2.0,
    algorithm=alg,
    chunk_bytes=1 << 16,
    wrap_transport=wrap,
)
x = np.ones(1 << 20, np.float32)
y = np.empty_like(x)
sc.allreduce(x, y)
if c.rank == dead:
    sc.transport.armed = True
    sc.transport.tamper = tamper  # (RaiseInOp ignores these two)
    sc.transport.forge = mode == "die-forge"
elif wrap is ForgeBeforeAbort:
    sc.transport.victim = next(r for r in range(c.size) if r not in (dead, c.rank))  # innocent
t0 = time.time()
try:
    sc.allreduce(x, y)
    os.write(1, f"RESULT {c.rank} none -1 {time.time() - t0:.2f} -\n".encode())
except (SecCommError, RuntimeError) as e:
    os.write(
        1,
        f"RESULT {c.rank} {type(e).__name__} {getattr(e, 'peer', None)} {time.time() - t0:.2f} "
        f"{getattr(e, 'blamed', '-')}\n".encode(),
    )  # one write: mpiexec interleaves ranks
    os.write(1, f"WAITED {c.rank} {getattr(sc.transport, 'waiting', None)} MESSAGE {e}\n".encode())
os.write(1, f"FORGED {c.rank} {sum(sc.transport.notices.told.forged_notices.values())}\n".encode())
if tamper or mode in ("raise", "unknown-sender"):
    sc.close()  # tear down together: nobody's transfer is cut by a rank that already left
os._exit(0)
