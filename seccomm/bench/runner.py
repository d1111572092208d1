"""The timing harness (runs on every rank; only rank 0 prints and writes files).

For each collective and size S, the native MPI call and every suite run in the same loop,
interleaved (the order rotates each iteration), each iteration preceded by a barrier.  The time of
an iteration is the slowest rank's (elementwise MAX over ranks after the loop); rows report the
median, min and max.  With ``check=1`` every variant's output is compared on every rank, element by
element, with the native result on integer-valued seeded data (exact in every dtype, any order).
"""

from __future__ import annotations

import sys

import numpy as np

from ..collectives import get_collective
from ..dtypes import DTYPES
from ..errors import SecCommError
from ..suites import get_suite
from .bound import bounds, crypto_seconds, measure_rates
from .rows import NATIVE, result_row
from .secret import BenchSecretError, bench_secret, identity_missing
from .table import Report, wrong_total
from .timing import measure


def main_ranks(cfg) -> int:
    from mpi4py import MPI

    from ..comm import SecureComm

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if cfg.root >= size:  # same answer on every rank: no traffic yet
        if rank == 0:
            print(
                f"seccomm bench: error: --root {cfg.root} is not a rank (0..{size - 1})",
                file=sys.stderr,
                flush=True,
            )
        return 2
    too_big = _memory_error(comm, cfg)
    if too_big is not None:  # (every rank alike, before any SecureComm)
        if rank == 0:
            print(f"seccomm bench: error: {too_big}", file=sys.stderr, flush=True)
        return 2
    try:
        secret, source = bench_secret(comm)
    except BenchSecretError as e:  # every rank: no usable common secret; one rank says why
        if e.speaker:
            print(f"seccomm bench: error: {e}", file=sys.stderr, flush=True)
        return 2
    no_files = identity_missing(comm) if cfg.identity == "x509" else None
    if no_files is not None:  # (every rank alike, before any SecureComm)
        if rank == 0:
            print(f"seccomm bench: error: {no_files}", file=sys.stderr, flush=True)
        return 2
    report = Report(cfg, comm) if rank == 0 else None
    kw = {"psk": secret, "algorithm": cfg.algorithm, "encrypt": cfg.encrypt, "chunk_bytes": cfg.chunk_bytes}
    comms = {}
    for s in cfg.suites:
        comms[s] = SecureComm(comm, s, timeout=cfg.timeout, **kw)
        if cfg.identity == "x509":  # (beside its psk variant: side by side in one loop)
            comms[s + X509] = SecureComm(comm, s, timeout=cfg.timeout, identity="x509", **kw)
    del secret, kw
    nodes = len(set(next(iter(comms.values())).node_ids))
    if cfg.encrypt == "inter-node" and nodes == 1:  # the same on every rank: stop together
        for sc in comms.values():
            sc.close()
        if rank == 0:
            print(
                f"seccomm bench: error: --encrypt inter-node: all {size} ranks are on one node, so no hop "
                "would be encrypted; use --encrypt all, or ranks on several nodes",
                file=sys.stderr,
                flush=True,
            )
        return 2
    crypto = [] if cfg.workload else [s for s in cfg.suites if _does_crypto(s)]  # workload rows: no bound
    rates = measure_rates(comm, crypto, cfg.chunk_bytes)
    if report:
        report.header(comms, source, rates)
    total_wrong = 0
    try:
        if cfg.workload:
            from .workload import bench_workload

            desc, rows = bench_workload(comm, comms, cfg)
            total_wrong = wrong_total(rows)
            if report:
                report.workload(desc, rows)
        for cname in [] if cfg.workload else cfg.collectives:
            for nbytes in cfg.sizes():
                rows = bench_one(comm, comms, cfg, cname, nbytes, rates)
                total_wrong += wrong_total(rows)
                if report:
                    report.rows(rows)
    except SecCommError as e:
        print(f"seccomm bench: rank {rank}: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        comm.Abort(1)
    # (not on Ctrl-C or a signal: close() waits up to 10 s for every rank, and a peer may sit in
    # a blocking native MPI call that this rank's leaving ends only when the launcher kills it)
    for sc in comms.values():
        sc.close()
    if report:
        report.footer()
        report.write_files()
    return 1 if total_wrong else 0


def _memory_error(comm, cfg) -> str | None:
    """Under a launcher: the refusal (:func:`~.memory.memory_error`) of the first node where the
    sweep's largest size does not fit its ranks, the same on every rank; None when it fits."""
    from mpi4py import MPI

    from .memory import memory_error

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    local = node.Get_size()
    node.Free()
    mine = None if cfg.workload else memory_error(cfg.maxbytes, cfg.suites, local)
    return next((m for m in comm.allgather(mine) if m is not None), None)


#: the suffix of a variant that runs a suite under identity x509 (``--identity x509``)
X509 = "+x509"


def _does_crypto(suite: str) -> bool:
    s = get_suite(suite)
    return s.confidential or s.authenticated


def bench_one(comm, comms: dict, cfg, cname: str, nbytes: int, rates=None) -> list[dict]:
    """Time and check one (collective, size S) for native and every suite; returns the rows
    (identical on every rank).  Buffers, data and the check come from the collective's record.
    ``rates``: suite -> :class:`~.bound.CryptoRate`; each row gets ``bound_us`` (additive,
    overlapped) and ``vs_bound_x`` = median / additive bound (:mod:`.bound`)."""
    coll = get_collective(cname)
    rank, size = comm.Get_rank(), comm.Get_size()
    dt = DTYPES[cfg.dtype][0]
    n = coll.counts(nbytes // dt.itemsize, size, rank)
    send = coll.init(cfg.dtype, cfg.op, n.send, rank, size, cfg.root)
    variants = [NATIVE] + list(comms)
    shared = np.zeros(n.recv, dt)  # every suite's result, checked right after its call (measure)
    outs = {v: np.zeros(n.recv, dt) if v == NATIVE else shared for v in variants}

    def call(v):
        if v == NATIVE:
            coll.native(comm, send, outs[v], cfg.op, cfg.root)
        else:
            coll.secure(comms[v], send, outs[v], cfg.op, cfg.root)

    def reset():
        for v in variants:
            coll.reset(send, outs[v], rank, cfg.root)

    times, wrong = measure(
        comm,
        variants,
        call,
        reset,
        lambda v: coll.wrong(outs[v], outs[NATIVE]),
        *cfg.loop(nbytes),
        cfg.check,
    )
    native_s = float(np.median(times[0]))
    nodes = len(set(next(iter(comms.values())).node_ids)) if comms else 1
    rows = []
    for i, v in enumerate(variants):
        crypto, named = 0.0, {}
        if v in comms:  # the algorithm seccomm ran (the model and the lab's validation read it)
            alg = coll.pick(comms[v], n.total * dt.itemsize, n.total, size)
            named = {"algorithm": alg}
            rate = (rates or {}).get(v.removesuffix(X509))
            if rate is not None:
                crypto = crypto_seconds(coll, alg, n.total * dt.itemsize, size, nodes, cfg.encrypt, rate)
        add, over = bounds(native_s, crypto)
        med = float(np.median(times[i]))
        rows.append(
            result_row(
                coll,
                v,
                n.total,
                cfg.dtype,
                size,
                times[i],
                native_s,
                wrong[i],
                cfg.op,
                cfg.root,
                bound_us={"additive": add * 1e6, "overlapped": over * 1e6},
                vs_bound_x=med / add if add > 0 else float("nan"),
                **named,
            )
        )
    return rows
