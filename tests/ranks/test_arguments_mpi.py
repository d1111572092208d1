"""Buffers and arguments on real ranks: the scenarios of tests/argument_cases.py, run by
tests/mpi_worker.py in one mpiexec launch per world size, many cases each."""

from __future__ import annotations

import pytest

from helpers import cached_launches

SCENARIOS = ["layouts", "nan_minmax", "readonly_send", "refusal", "threads", "agreement"]
#: world size -> its scenarios ("completion" pauses ranks past a deadline: 3 ranks for a relay)
PLAN = {2: [*SCENARIOS, "completion"], 3: [*SCENARIOS, "completion"]}
#: minimum cases a scenario must have checked per rank (guards against a silent no-op)
MIN_CASES = {
    "layouts": 55,
    "nan_minmax": 128,
    "readonly_send": 96,
    "refusal": 18,
    "threads": 87,
    "completion": 24,
    "agreement": 29,
}


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return cached_launches(tmp_path_factory, PLAN, "args-np")


@pytest.mark.mpi
@pytest.mark.parametrize("n,scenario", [(n, s) for n, names in PLAN.items() for s in names])
def test_scenario(results, n, scenario):
    res = results(n)[scenario]
    assert not res["failures"], "\n".join(res["failures"][:20])
    assert res["cases"] >= MIN_CASES[scenario] * n
