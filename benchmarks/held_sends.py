"""How many messages MPICH delivers from a rank that stopped calling MPI (docs/design.md,
"Completion": what seccomm's receipts are for).

    mpiexec -n P python benchmarks/held_sends.py [--each 40] [--bytes 1024]

Plain mpi4py, no seccomm.  Rank 0 posts ``--each`` sends of ``--bytes`` to every other rank (to
rank 1 first, then rank 2, ...), then sleeps 4 s without calling MPI; every other rank posts its
receives and, while rank 0 sleeps, counts for 3 s how many have arrived.  Each receiver prints
its count; after the sleep rank 0 completes everything.  With MPICH 5.0 (the ``mpich`` wheel,
shared memory) the count is per sender, over all its receivers: on 3 ranks, 40 each gave 40 and
21-24 (1 KiB and 1 MiB messages), 64 each gave 64 and 4; on 2 ranks, 64 of 64 and 63 of 65.
"""

import argparse
import time

import numpy as np
from mpi4py import MPI


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--each", type=int, default=40, help="sends to each receiver (default 40)")
    ap.add_argument("--bytes", type=int, default=1024, help="bytes a message (default 1024)")
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    r, p = comm.Get_rank(), comm.Get_size()
    if p < 2:
        raise SystemExit("held_sends.py: run on 2 or more ranks")
    comm.Barrier()
    if r == 0:
        bufs = [np.ones(a.bytes, np.uint8) for _ in range(a.each)]
        reqs = [comm.Isend(b, dst, 5) for dst in range(1, p) for b in bufs]
        time.sleep(4.0)  # no MPI call meanwhile
        MPI.Request.Waitall(reqs)
    else:
        bufs = [np.empty(a.bytes, np.uint8) for _ in range(a.each)]
        reqs = [comm.Irecv(b, 0, 5) for b in bufs]
        t0, got = time.monotonic(), 0
        while time.monotonic() - t0 < 3.0 and got < a.each:
            got = sum(1 for q in reqs if q.Test())  # (a completed request tests true again)
            time.sleep(0.01)
        msg = f"rank {r}: {got} of {a.each} messages of {a.bytes} B in while rank 0 did not call MPI"
        print(msg, flush=True)
        MPI.Request.Waitall(reqs)
    comm.Barrier()


if __name__ == "__main__":
    main()
