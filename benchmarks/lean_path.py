"""seccomm's own per-call path at small and mid sizes, side by side with native MPI (issue 15).

    mpiexec -n 2 python benchmarks/lean_path.py

Allreduce of float32 (sum) at 4 KiB to 1 MiB: native ``MPI_Allreduce``, seccomm ``none`` and
``aes-256-gcm`` on the same buffers, a barrier before every call (as ``seccomm bench``), the
variants rotated every iteration; prints the median of the slowest rank (µs) and the ratios to
native.  Run it with ``PYTHONPATH`` set to two checkouts, one after the other, to compare them
(docs/performance.md, section 1f).  The secret below is a fixed benchmark key, not a job secret."""

import time
import numpy as np
from mpi4py import MPI
import seccomm
from seccomm import SecureComm

comm = MPI.COMM_WORLD
psk = bytes.fromhex("9f1c2a7b44e05d3c8a61f0e2b7d94c15a3e8f6027bd15c9e4f0a83d26c7e15b9")
scs = {s: SecureComm(comm, s, psk=psk) for s in ("none", "aes-256-gcm")}
out = []
for nbytes in (4096, 16384, 65536, 262144, 1048576):
    x = np.ones(nbytes // 4, np.float32)
    y = np.empty_like(x)
    fs = {"native": lambda: comm.Allreduce(x, y)}
    for s, sc in scs.items():
        fs[s] = (lambda sc: lambda: sc.allreduce(x, y))(sc)
    iters = 2000 if nbytes <= 65536 else 300
    ts = {k: np.zeros(iters) for k in fs}
    for f in fs.values():
        for _ in range(50):
            f()
    for i in range(iters):
        for k in list(fs)[i % 3 :] + list(fs)[: i % 3]:
            comm.Barrier()
            t0 = time.perf_counter()
            fs[k]()
            ts[k][i] = time.perf_counter() - t0
    row = [nbytes]
    for k in fs:
        m = ts[k].copy()
        comm.Allreduce(MPI.IN_PLACE, m, MPI.MAX)
        row.append(np.median(m) * 1e6)
    out.append(row)
if comm.rank == 0:
    print("# seccomm from", seccomm.__file__, "(µs, median of the slowest rank)")
    print(f"{'bytes':>9} {'native':>8} {'none':>8} {'aes':>8} {'none/nat':>8} {'aes/nat':>8}")
    for b, n, z, a in out:
        print(f"{b:>9} {n:8.1f} {z:8.1f} {a:8.1f} {z / n:8.2f} {a / n:8.2f}")
for sc in scs.values():
    sc.close()
