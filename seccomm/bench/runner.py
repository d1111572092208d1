"""The timing harness (runs on every rank; only rank 0 prints and writes files).

For each collective and size S, the native MPI call and every suite run in the same loop,
interleaved (the order rotates each iteration), each iteration preceded by a barrier.  The time of
an iteration is the slowest rank's (elementwise MAX over ranks after the loop); rows report the
median, min and max.  With ``check=1`` every variant's output is compared on every rank, element by
element, with the native result on integer-valued seeded data (exact in every dtype, any order).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from ..collectives import get_collective
from ..dtypes import DTYPES
from ..errors import SecCommError
from ..keys import load_secret
from .table import Report

NATIVE = "native"


def seeded(dname: str, op: str, count: int, rank: int, size: int) -> np.ndarray:
    """Integer-valued data whose reduction is exact in ``dname`` for ``size`` ranks."""
    dt = DTYPES[dname][0]
    rng = np.random.default_rng(12345 + rank)
    if dname == "uint8":
        return rng.integers(0, 256, count, dtype=np.uint8)
    if dname in ("int32", "int64"):
        return rng.integers(-1000, 1001, count).astype(dt)
    if op == "prod":
        return rng.choice(np.array([-1, 1], np.int8), count).astype(dt)
    mant = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}[dname]
    k = int(max(1, min(4, (2 ** mant) // (4 * size))))
    return rng.integers(-k, k + 1, count).astype(dt)


def bench_secret(comm) -> tuple[bytes, str]:
    """(secret, where it came from): the job secret; under a launcher without one, a
    benchmark-only secret that rank 0 draws and broadcasts in the clear (synthetic data only —
    never for real traffic).  Collective: every rank takes the same branch."""
    from mpi4py import MPI

    try:
        secret, source = load_secret()
        ok = 1
    except SecCommError:
        secret, source, ok = b"", "", 0
    flags = np.array([ok], np.int32)
    comm.Allreduce(MPI.IN_PLACE, flags, MPI.MIN)
    if flags[0]:
        return secret, source
    buf = np.frombuffer(os.urandom(32), np.uint8).copy()
    comm.Bcast(buf, root=0)
    return buf.tobytes(), "ephemeral benchmark secret (broadcast in the clear; synthetic data only)"



def main_ranks(cfg) -> int:
    from mpi4py import MPI

    from ..comm import SecureComm

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if cfg.root >= size:  # same answer on every rank: no traffic yet
        if rank == 0:
            print(f"seccomm bench: error: --root {cfg.root} is not a rank (0..{size - 1})",
                  file=sys.stderr, flush=True)
        return 2
    secret, source = bench_secret(comm)
    report = Report(cfg, comm) if rank == 0 else None
    comms = {s: SecureComm(comm, s, psk=secret, algorithm=cfg.algorithm, encrypt=cfg.encrypt,
                           chunk_bytes=cfg.chunk_bytes, timeout=cfg.timeout) for s in cfg.suites}
    del secret
    if report:
        report.header(comms, source)
    total_wrong = 0
    try:
        if cfg.workload:
            from .workload import bench_workload

            desc, rows = bench_workload(comm, comms, cfg)
            total_wrong = sum(r["wrong"] for r in rows)
            if report:
                report.workload(desc, rows)
        for cname in ([] if cfg.workload else cfg.collectives):
            for nbytes in cfg.sizes():
                rows = bench_one(comm, comms, cfg, cname, nbytes)
                total_wrong += sum(r["wrong"] for r in rows)
                if report:
                    report.rows(rows)
    except SecCommError as e:
        print(f"seccomm bench: rank {rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        comm.Abort(1)
    finally:
        for sc in comms.values():
            sc.close()
    if report:
        report.footer()
        report.write_files()
    return 1 if total_wrong else 0


def bench_one(comm, comms: dict, cfg, cname: str, nbytes: int) -> list[dict]:
    """Time and check one (collective, size S) for native and every suite; returns the rows
    (identical on every rank)."""
    from mpi4py import MPI

    rec = get_collective(cname)
    rank, size = comm.Get_rank(), comm.Get_size()
    dt = DTYPES[cfg.dtype][0]
    nsend, nrecv = rec.buffers(nbytes, dt.itemsize, size, rank)
    total = nrecv if cname == "allgather" else nsend
    variants = [NATIVE] + list(comms)
    send = seeded(cfg.dtype, cfg.op, nsend, rank, size)
    if cname == "bcast":
        send = seeded(cfg.dtype, cfg.op, nsend, cfg.root, size)
    outs = {v: np.zeros(nrecv, dt) for v in variants}

    def call(v):
        if v == NATIVE:
            rec.native(comm, send, outs[v], cfg.op, cfg.root)
        else:
            rec.secure(comms[v], send, outs[v], cfg.op, cfg.root)

    def prime():  # bcast works in place: every non-root rank starts from poison
        if cname == "bcast":
            for v in variants:
                if rank == cfg.root:
                    np.copyto(outs[v], send)
                else:
                    outs[v].fill(0)

    wrong = {v: 0 for v in variants}
    if cfg.check:
        prime()
        for v in variants:
            call(v)
        ref = outs[NATIVE]
        for v in variants[1:]:
            wrong[v] = int(np.count_nonzero(outs[v].view(_uint(dt)) != ref.view(_uint(dt))))
        counts = np.array([wrong[v] for v in variants], np.int64)
        comm.Allreduce(MPI.IN_PLACE, counts, MPI.SUM)
        wrong = dict(zip(variants, (int(c) for c in counts)))
    prime()
    times = interleaved_times(comm, variants, call, cfg.iters, cfg.warmup)
    med = np.median(times, axis=1)
    nbytes_op = total * dt.itemsize
    rows = []
    for i, v in enumerate(variants):
        algbw = nbytes_op / med[i] / 1e9 if med[i] > 0 else 0.0
        rows.append({
            "collective": cname, "size_bytes": nbytes_op, "count": total, "dtype": cfg.dtype,
            "redop": cfg.op if rec.reduces else "none", "root": cfg.root if cname == "bcast" else -1,
            "variant": v, "ranks": size,
            "time_us": {"min": times[i].min() * 1e6, "median": med[i] * 1e6, "max": times[i].max() * 1e6},
            "algbw_gbps": algbw, "busbw_gbps": algbw * rec.busbw_factor(size),
            "overhead_x": med[i] / med[0] if med[0] > 0 else float("nan"),
            "wrong": wrong[v],
        })
    return rows


def interleaved_times(comm, variants, call, iters: int, warmup: int) -> np.ndarray:
    """``times[v, it]`` in seconds: iteration ``it`` of ``call(variants[v])``, the slowest rank's
    (elementwise MAX over ranks).  Warm-up first; each timed call follows a barrier; the order of
    variants rotates every iteration so that none always runs first."""
    from mpi4py import MPI

    for _ in range(warmup):
        for v in variants:
            call(v)
    k = len(variants)
    times = np.zeros((k, iters))
    for it in range(iters):
        for j in range(k):
            vi = (j + it) % k
            comm.Barrier()
            t0 = time.perf_counter()
            call(variants[vi])
            times[vi, it] = time.perf_counter() - t0
    comm.Allreduce(MPI.IN_PLACE, times, MPI.MAX)
    return times


def _uint(dt):
    return {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[dt.itemsize]
