"""Secure collectives on real ranks (mpiexec -n 1..5) against native MPI.

Each world size is one mpiexec launch running the scenarios of tests/mpi_worker.py; every
scenario checks many cases and reports failures, which these tests assert away.
"""

from __future__ import annotations

import pytest

from helpers import PLAN

CASES = [(n, s) for n, scenarios in PLAN.items() for s in scenarios]
#: minimum cases a scenario must have checked at a world size (guards against a silent no-op)
MIN_CASES = {
    "sweep": 700,
    "wire": 4,
    "wire_policy": 350,  # 714 at 2 ranks, 1630 at 3
    "paired": 80,
    "express": 2000,  # 4384 at 2 ranks
    "setup_downgrade": 7,
    "setup_replay": 4,
    "setup_blame": 8,  # 24 at 3 ranks: forged reports and errors, psk and psk-dhe
    "soak": 2000,
    "device_engine": 400,
    "device_kernels": 20,
}


@pytest.mark.mpi
@pytest.mark.parametrize("n,scenario", CASES, ids=[f"np{n}-{s}" for n, s in CASES])
def test_scenario(mpi_results, n, scenario):
    res = mpi_results(n)[scenario]
    assert not res["failures"], "\n".join(res["failures"][:20])
    assert res["cases"] >= MIN_CASES[scenario] * n
