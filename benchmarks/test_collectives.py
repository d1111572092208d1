"""Secure collectives vs native MPI, for pytest-benchmark.  Run on real ranks:

    mpiexec -n 2 python -m pytest benchmarks/test_collectives.py --benchmark-json=bench.json
    mpiexec -n 2 python -m pytest benchmarks/test_collectives.py --benchmark-autosave
    mpiexec -n 2 python -m pytest benchmarks/test_collectives.py --seccomm-gate=bench.json

``--seccomm-gate`` compares each secure collective's ratio to native MPI, measured side by side,
with the baseline's, and says INCONCLUSIVE when native MPI's own time moved (a loaded machine);
``--benchmark-compare-fail=median:10%`` compares absolute medians and fails unchanged code on a
shared machine (docs/performance.md, "Regression gate").

Each benchmark's extra_info holds suite, collective, bytes, ranks, busbw and overhead vs native.
"""

from __future__ import annotations

import pytest

from seccomm.collectives import COLLECTIVES


@pytest.mark.parametrize("collective", list(COLLECTIVES))
def test_collective(collective_bench, collective, suite, nbytes):
    info = collective_bench(collective, suite, nbytes)
    assert info["bytes"] > 0
    if info.get("timed", True):  # (--benchmark-disable: checked once, nothing timed)
        assert info["overhead_x"] > 0
