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
    iters: int | None = None  # None: by size (:meth:`loop`)
    warmup: int | None = None
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
    identity: str = "psk"  # x509: each suite also as SUITE+x509 (seccomm.bench.runner.X509)

    def sizes(self) -> list[int]:
        out, s = [], self.minbytes
        while s <= self.maxbytes:
            out.append(s)
            s *= self.stepfactor
        return out

    def loop(self, nbytes: int | None) -> tuple[int, int]:
        """``(iters, warmup)`` for a size of ``nbytes`` bytes (``None``: a workload step).  Given
        values are used as they are; by default, as OSU's micro-benchmarks do, small messages get
        more: iters = 4 MiB / S within [20, 1000] (1000 up to 4 KiB, 20 from 256 KiB), warmup =
        iters / 5, at least 5.  Small-message times on a CPU settle only after many calls: with 5
        warm-up calls, a 4 KiB median here came out 1.5 to 40 times the settled value."""
        iters = self.iters
        if iters is None:
            iters = 20 if nbytes is None else max(20, min(1000, (4 << 20) // max(nbytes, 1)))
        warmup = self.warmup if self.warmup is not None else max(5, iters // 5)
        return iters, warmup

    def loop_text(self) -> str:
        """The header's description of the loop."""
        if self.workload:  # (one step's buckets: loop(None))
            iters, warmup = self.loop(None)
            return f"warmup iters: {warmup} iters: {iters}"
        iters = "by size (4 MiB / S in [20, 1000])" if self.iters is None else str(self.iters)
        warmup = "by size (iters / 5, at least 5)" if self.warmup is None else str(self.warmup)
        return f"warmup iters: {warmup} iters: {iters}"

    def as_dict(self):
        return asdict(self)


__all__ = ["BenchConfig", "DEFAULT_SUITES"]
