"""The bench: nccl-tests-style sweep of native MPI vs each suite, interleaved per size.

:class:`BenchConfig` is what a sweep runs (``seccomm bench`` builds one from its arguments,
:mod:`seccomm.cli.bench`); :func:`seccomm.bench.runner.main_ranks` runs it on the ranks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..suites import SUITES

DEFAULT_SUITES = ",".join(SUITES)  # every registered suite


@dataclass
class BenchConfig:
    minbytes: int = 8
    maxbytes: int = 64 << 20
    stepfactor: int = 2
    iters: int = 20
    warmup: int = 5
    check: int = 1
    dtype: str = "float32"
    op: str = "sum"
    collectives: list = field(default_factory=lambda: ["allreduce"])
    suites: list = field(default_factory=lambda: DEFAULT_SUITES.split(","))
    algorithm: str = "auto"
    encrypt: str = "all"
    chunk_bytes: int = 1 << 20
    root: int = 0
    timeout: float = 60.0
    json: str | None = None
    csv: str | None = None
    plot: str | None = None
    np: int = 2
    workload: str | None = None
    scale: float | None = None
    bucket_cap_mb: float | None = None

    def sizes(self) -> list[int]:
        out, s = [], self.minbytes
        while s <= self.maxbytes:
            out.append(s)
            s *= self.stepfactor
        return out

    def as_dict(self):
        return asdict(self)


__all__ = ["BenchConfig", "DEFAULT_SUITES"]
