"""Runs under ``mpiexec -disable-auto-cleanup -n 3 python fault_worker.py [DEAD [ALGORITHM]]``:
rank DEAD (default 2) dies in the middle of an allreduce
(after sending its first frame); the survivors must raise TransportTimeout within the deadline
and exit cleanly.  Each survivor prints one line: RESULT <rank> <error> <peer> <seconds>."""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

from seccomm import SecCommError, SecureComm
from seccomm.transport import TransportWrapper


class DieAfterFirstFrame(TransportWrapper):
    armed = False

    def isend(self, buf, peer):
        r = self.inner.isend(buf, peer)
        if self.armed:
            time.sleep(0.05)  # let the frame leave
            os._exit(3)
        return r


c = MPI.COMM_WORLD
dead = int(sys.argv[1]) if len(sys.argv) > 1 else 2
alg = sys.argv[2] if len(sys.argv) > 2 else "ring"
holder = {}


def wrap(t):
    holder["t"] = DieAfterFirstFrame(t)
    return holder["t"]


sc = SecureComm(c, "aes-256-gcm", psk=bytes(range(32)), timeout=2.0, algorithm=alg, chunk_bytes=1 << 16,
                wrap_transport=wrap if c.rank == dead else None)
x = np.ones(1 << 20, np.float32)
y = np.empty_like(x)
sc.allreduce(x, y)
if c.rank == dead:
    holder["t"].armed = True
t0 = time.time()
try:
    sc.allreduce(x, y)
    print(f"RESULT {c.rank} none -1 {time.time() - t0:.2f}", flush=True)
except SecCommError as e:
    print(f"RESULT {c.rank} {type(e).__name__} {getattr(e, 'peer', None)} {time.time() - t0:.2f}", flush=True)
os._exit(0)
