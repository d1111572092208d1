"""Gradient traffic of one training step without PyTorch: DDP's bucket plan over tensor sizes, and
the tensor sizes of the named workloads.

:data:`WORKLOAD_FILE` (``seccomm/data/workloads.json``) holds, per workload of
:mod:`seccomm.torch.workloads` (ResNet-50, BERT-large, GPT-2 XL, Llama-2-7B), the element count
of every parameter tensor in the order ``model.parameters()`` gives them, written from the
models that module builds (``tests/cli/test_torch.py`` checks the file against them where
PyTorch is installed).  :func:`plan_buckets` is the one bucket plan: the PyTorch path
(:func:`seccomm.torch.workloads.bucket_plan`) calls it with the model's tensors.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

MIB = 1 << 20
#: the tensor sizes of the named workloads (see the module's docstring)
WORKLOAD_FILE = Path(__file__).with_name("data") / "workloads.json"
#: DDP's default bucket cap [MiB] (torch 2.x ``bucket_cap_mb``) and the cap of its first bucket
DEFAULT_BUCKET_MB, FIRST_BUCKET_BYTES = 25.0, MIB


def plan_buckets(tensors, bucket_cap_mb: float | None = None) -> list[int]:
    """Bucket sizes in bytes, in the order DDP allreduces them after its first iteration.

    ``tensors``: ``(kind, bytes)`` of each trainable parameter in ``model.parameters()`` order
    (``kind``: its dtype; one dtype per bucket).  As DDP's rebuilt buckets (torch 2.x
    ``BucketCapacityConfig``, reducer.cpp ``compute_bucket_assignment_by_size``): parameters in
    reverse order; with the default cap (``bucket_cap_mb=None``: 25 MiB) the first bucket closes
    at 1 MiB, with an explicit cap every bucket closes at that cap; a bucket closes as soon as it
    reaches its cap; what is left of each dtype makes a last bucket."""
    cap = int((DEFAULT_BUCKET_MB if bucket_cap_mb is None else bucket_cap_mb) * MIB)
    caps = [FIRST_BUCKET_BYTES if bucket_cap_mb is None else cap, cap]
    buckets: list[int] = []
    open_by_kind: dict = {}  # kind -> [bytes so far, buckets closed for this kind]
    for kind, nbytes in reversed(list(tensors)):
        cur = open_by_kind.setdefault(kind, [0, 0])
        cur[0] += nbytes
        if cur[0] >= caps[min(cur[1], 1)]:
            buckets.append(cur[0])
            cur[0], cur[1] = 0, cur[1] + 1
    buckets += [c[0] for c in open_by_kind.values() if c[0]]
    return buckets


@cache
def _table() -> dict:
    return json.loads(WORKLOAD_FILE.read_text())


def workload_names() -> list[str]:
    """The named workloads, smallest first."""
    return list(_table())


def workload_buckets(name: str, bucket_cap_mb: float | None = None, element_bytes: int = 4) -> dict:
    """``{"name", "parameters", "gradient_bytes", "buckets"}`` of workload ``name`` with
    ``element_bytes`` per gradient element (4: float32) and DDP's buckets (:func:`plan_buckets`).
    ``ValueError`` naming the workloads when ``name`` is not one."""
    table = _table()
    if name not in table:
        raise ValueError(f"unknown workload {name!r}; allowed: {', '.join(table)}")
    sizes = table[name]["tensor_elements"]
    return {
        "name": name,
        "parameters": sum(sizes),
        "gradient_bytes": sum(sizes) * element_bytes,
        "buckets": plan_buckets([(0, n * element_bytes) for n in sizes], bucket_cap_mb),
    }


def uniform_buckets(parameters: int, bucket_cap_mb: float | None = None, element_bytes: int = 4) -> dict:
    """The same for a model known only by its parameter count: its gradient in buckets of the cap
    (the first of 1 MiB under the default cap) and what is left, as DDP's plan gives for tensors
    much smaller than the cap.  ``ValueError`` for fewer than 1 parameter."""
    if parameters < 1:
        raise ValueError(f"parameters must be >= 1, got {parameters}")
    total = parameters * element_bytes
    cap = int((DEFAULT_BUCKET_MB if bucket_cap_mb is None else bucket_cap_mb) * MIB)
    first = FIRST_BUCKET_BYTES if bucket_cap_mb is None else cap
    buckets = [min(first, total)]
    rest = total - buckets[0]
    full = rest // cap
    buckets += [cap] * full + ([rest - full * cap] if rest - full * cap else [])
    return {
        "name": "your model",
        "parameters": parameters,
        "gradient_bytes": total,
        "buckets": buckets,
        "approximate": True,  # (no tensor sizes: buckets of exactly the cap)
    }
