"""Runs under ``mpiexec -disable-auto-cleanup -n 3 python fault_worker.py [DEAD [ALGORITHM [MODE]]]``.

MODE ``die`` (default): rank DEAD dies in the middle of an allreduce (after sending its first
frame); the survivors must raise TransportTimeout within the deadline.  MODE ``tamper``: rank
DEAD flips a bit in its first frame instead; the receiver raises AuthenticationError and the
other ranks PeerAbortError at once, long before the (30 s) deadline.  Each rank that raises
prints one line: RESULT <rank> <error> <peer> <seconds> [<blamed>]."""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

from seccomm import SecCommError, SecureComm
from seccomm.transports import TransportWrapper


class DieAfterFirstFrame(TransportWrapper):
    armed = False
    tamper = False

    def isend(self, buf, peer):
        if self.armed and self.tamper:
            self.armed = False
            buf = np.frombuffer(buf, np.uint8).copy()
            buf[-1] ^= 1
            self.keep = buf
        r = self.inner.isend(buf, peer)
        if self.armed:
            time.sleep(0.05)  # let the frame leave
            os._exit(3)
        return r


c = MPI.COMM_WORLD
dead = int(sys.argv[1]) if len(sys.argv) > 1 else 2
alg = sys.argv[2] if len(sys.argv) > 2 else "ring"
mode = sys.argv[3] if len(sys.argv) > 3 else "die"
sc = SecureComm(
    c,
    "aes-256-gcm",
    psk=bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0"),
    timeout=30.0 if mode == "tamper" else 2.0,
    algorithm=alg,
    chunk_bytes=1 << 16,
    wrap_transport=DieAfterFirstFrame if c.rank == dead else None,
)
x = np.ones(1 << 20, np.float32)
y = np.empty_like(x)
sc.allreduce(x, y)
if c.rank == dead:
    sc.transport.armed = True
    sc.transport.tamper = mode == "tamper"
t0 = time.time()
try:
    sc.allreduce(x, y)
    os.write(1, f"RESULT {c.rank} none -1 {time.time() - t0:.2f} -\n".encode())
except SecCommError as e:
    os.write(
        1,
        f"RESULT {c.rank} {type(e).__name__} {getattr(e, 'peer', None)} {time.time() - t0:.2f} "
        f"{getattr(e, 'blamed', '-')}\n".encode(),
    )  # one write: mpiexec interleaves ranks
if mode == "tamper":
    sc.close()  # tear down together: nobody's transfer is cut by a rank that already left
os._exit(0)
