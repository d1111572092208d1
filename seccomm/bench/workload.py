"""``seccomm bench --workload NAME``: one training step's gradient traffic of a real model, as the
sequence of DDP-bucket allreduces (float32 gradients), native MPI vs each suite, interleaved.

``scale`` runs that fraction of every bucket (so a 2-core machine can run Llama-2-7B's 27 GB
step); the full-step time is projected as measured / scale (communication time is close to linear
in bytes at these sizes; small buckets' latency makes the projection slightly pessimistic).
"""

from __future__ import annotations

import numpy as np

from ..collectives import get_collective
from .rows import NATIVE, result_row
from .timing import measure

AUTO_STEP_BYTES = 256 << 20


def bench_workload(comm, comms: dict, cfg) -> tuple[dict, list[dict]]:
    """Returns (workload description, rows); identical on every rank."""
    from ..torch.workloads import workload

    w = workload(cfg.workload, cfg.bucket_cap_mb)
    scale = cfg.scale or min(1.0, AUTO_STEP_BYTES / w["gradient_bytes"])
    counts = [max(1, int(b * scale) // 4) for b in w["buckets"]]
    offs = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    total = int(offs[-1])
    rank, size = comm.Get_rank(), comm.Get_size()
    coll = get_collective("allreduce")
    send = coll.init("float32", "sum", total, rank, size, 0)
    variants = [NATIVE] + list(comms)
    shared = np.zeros(total, np.float32)  # every suite's result, checked right after its step (measure)
    outs = {v: np.zeros(total, np.float32) if v == NATIVE else shared for v in variants}

    def step(v):
        out = outs[v]
        for i in range(len(counts)):
            s, r = send[offs[i] : offs[i + 1]], out[offs[i] : offs[i + 1]]
            if v == NATIVE:
                coll.native(comm, s, r, "sum", 0)
            else:
                coll.secure(comms[v], s, r, "sum", 0)

    times, wrong = measure(
        comm,
        variants,
        step,
        lambda: None,
        lambda v: coll.wrong(outs[v], outs[NATIVE]),
        *cfg.loop(None),
        cfg.check,
    )
    desc = {
        **w,
        "scale": scale,
        "buckets_run_bytes": [c * 4 for c in counts],
        "bucket_cap_mb": cfg.bucket_cap_mb,
    }
    med = np.median(times, axis=1)
    rows = [
        result_row(
            coll,
            v,
            total,
            "float32",
            size,
            times[i],
            med[0],
            wrong[i],
            "sum",
            workload=cfg.workload,
            buckets=len(counts),
            scale=scale,
            projected_step_ms=med[i] / scale * 1e3,
        )
        for i, v in enumerate(variants)
    ]
    return desc, rows
