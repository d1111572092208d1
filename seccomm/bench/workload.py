"""``seccomm bench --workload NAME``: one training step's gradient traffic of a real model, as the
sequence of DDP-bucket allreduces (float32 gradients), native MPI vs each suite, interleaved.

``scale`` runs that fraction of every bucket (so a 2-core machine can run Llama-2-7B's 27 GB
step); the full-step time is projected as measured / scale (communication time is close to linear
in bytes at these sizes; small buckets' latency makes the projection slightly pessimistic).
"""

from __future__ import annotations

import numpy as np

from ..collectives import get_collective
from .runner import NATIVE, interleaved_times, seeded

AUTO_STEP_BYTES = 256 << 20


def bench_workload(comm, comms: dict, cfg) -> tuple[dict, list[dict]]:
    """Returns (workload description, rows); identical on every rank."""
    from mpi4py import MPI

    from ..torch.workloads import workload

    w = workload(cfg.workload, cfg.bucket_cap_mb)
    scale = cfg.scale or min(1.0, AUTO_STEP_BYTES / w["gradient_bytes"])
    counts = [max(1, int(b * scale) // 4) for b in w["buckets"]]
    offs = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    total = int(offs[-1])
    rank, size = comm.Get_rank(), comm.Get_size()
    rec = get_collective("allreduce")
    send = seeded("float32", "sum", total, rank, size)
    variants = [NATIVE] + list(comms)
    outs = {v: np.zeros(total, np.float32) for v in variants}

    def step(v):
        out = outs[v]
        for i in range(len(counts)):
            s, r = send[offs[i]:offs[i + 1]], out[offs[i]:offs[i + 1]]
            if v == NATIVE:
                rec.native(comm, s, r, "sum", 0)
            else:
                rec.secure(comms[v], s, r, "sum", 0)

    wrong = np.zeros(len(variants), np.int64)
    if cfg.check:
        for v in variants:
            step(v)
        for i, v in enumerate(variants[1:], 1):
            wrong[i] = np.count_nonzero(outs[v].view(np.uint32) != outs[NATIVE].view(np.uint32))
        comm.Allreduce(MPI.IN_PLACE, wrong, MPI.SUM)
    times = interleaved_times(comm, variants, step, cfg.iters, cfg.warmup)
    med = np.median(times, axis=1)
    desc = {**w, "scale": scale, "buckets_run_bytes": [c * 4 for c in counts],
            "bucket_cap_mb": cfg.bucket_cap_mb}
    rows = []
    for i, v in enumerate(variants):
        algbw = total * 4 / med[i] / 1e9
        rows.append({
            "collective": "allreduce", "workload": cfg.workload, "size_bytes": total * 4,
            "count": total, "dtype": "float32", "redop": "sum", "root": -1, "variant": v,
            "ranks": size, "buckets": len(counts), "scale": scale,
            "time_us": {"min": times[i].min() * 1e6, "median": med[i] * 1e6, "max": times[i].max() * 1e6},
            "projected_step_ms": med[i] / scale * 1e3,
            "algbw_gbps": algbw, "busbw_gbps": algbw * rec.busbw_factor(size),
            "overhead_x": med[i] / med[0], "wrong": int(wrong[i]),
        })
    return desc, rows
