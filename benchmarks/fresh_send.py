"""Why native MPI's allreduce time at 1 MiB on two ranks of this machine comes in two modes.

    mpiexec -bind-to core -n 2 python benchmarks/fresh_send.py [--bytes 1M]   (several launches)

Plain mpi4py, no seccomm: ``MPI_Allreduce`` of float32 (sum) beside hand-written two-rank
allreduces that move the same bytes over the same MPI, a barrier before every call, median of
the larger of the two ranks' medians over 200 calls (µs):

- ``rd``: each rank sends its whole input and receives the peer's (one ``Isend``/``Irecv``
  pair), then adds;
- ``ring``: reduce-scatter then allgather (two steps of half the bytes), the second step sending
  the half the first one's add has just written;
- ``ring_clean``: the same, the second step sending an input half (not just written);
- ``ring_noadd``: the same steps without the add (the second step sends memory not just written);
- ``step1``: the first step alone.

On a 2-core VM some launches run ``ring`` 3.5-5x slower than
others, and ``MPI_Allreduce`` too in some of them, while ``rd``, ``ring_clean``, ``ring_noadd``
and ``step1`` stay put: what changes between launches is the price of a message whose bytes one
core has just written and the other core then reads (MPICH's single-copy intranode path, CMA,
has the receiver read the sender's memory).
"""

import argparse
import time

import numpy as np
from mpi4py import MPI

from seccomm.units import parse_size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bytes", default="1M", help="allreduce size in bytes (K/M suffixes; default 1M)")
    ap.add_argument("--iters", type=int, default=200)
    a = ap.parse_args()
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        raise SystemExit("fresh_send.py: run on exactly 2 ranks")
    r, peer = comm.Get_rank(), 1 - comm.Get_rank()
    n = parse_size(a.bytes) // 4 // 2 * 2  # float32 elements, even
    h = n // 2
    x = np.random.default_rng(r).random(n, dtype=np.float32)
    out, tmp = np.empty_like(x), np.empty_like(x)
    mine, theirs = (slice(0, h), slice(h, n)) if r == 0 else (slice(h, n), slice(0, h))

    def step1():
        MPI.Request.Waitall([comm.Irecv(tmp[:h], peer, 0), comm.Isend(x[theirs], peer, 0)])

    def ring():
        step1()
        np.add(x[mine], tmp[:h], out=out[mine])
        MPI.Request.Waitall([comm.Irecv(out[theirs], peer, 1), comm.Isend(out[mine], peer, 1)])

    def ring_clean():
        step1()
        np.add(x[mine], tmp[:h], out=out[mine])
        MPI.Request.Waitall([comm.Irecv(out[theirs], peer, 1), comm.Isend(x[mine], peer, 1)])

    def ring_noadd():
        step1()
        MPI.Request.Waitall([comm.Irecv(out[theirs], peer, 1), comm.Isend(out[mine], peer, 1)])

    def rd():
        MPI.Request.Waitall([comm.Irecv(tmp, peer, 0), comm.Isend(x, peer, 0)])
        np.add(x, tmp, out=out)

    def median_us(fn):
        ts = []
        for _ in range(a.iters):
            comm.Barrier()
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
        return comm.allreduce(sorted(ts)[len(ts) // 2], op=MPI.MAX) * 1e6

    cases = {
        "MPI_Allreduce": lambda: comm.Allreduce(x, out),
        "rd": rd,
        "ring": ring,
        "ring_clean": ring_clean,
        "ring_noadd": ring_noadd,
        "step1": step1,
    }
    for fn in cases.values():  # warm-up
        for _ in range(5):
            fn()
    got = {k: median_us(fn) for k, fn in cases.items()}
    if r == 0:
        print(f"{n * 4} B: " + " | ".join(f"{k} {v:.0f}" for k, v in got.items()))


if __name__ == "__main__":
    main()
