"""The world tests on real ranks: pytest itself under ``mpiexec -n K`` runs the files of
tests/world whose tests take the ``world`` fixture (:data:`FILES`), whose ``world`` is then the
real ranks (tests/worlds.py)."""

from __future__ import annotations

import re
import sys

import pytest

from helpers import TESTS, mpiexec, run_cmd

pytestmark = pytest.mark.mpi

#: the files of tests/world written on the ``world`` fixture, and the tests they hold
FILES = {"test_results.py": 12, "test_epochs.py": 6}


@pytest.mark.parametrize("n", [2, 3])
def test_the_world_tests_pass_on_real_ranks(n):
    """Every rank runs every test (their exit status counts; only rank 0 prints: the seccomm
    plugin), each on the world of the ``n`` real ranks (``[mpiN]``), none on threads."""
    cmd = [mpiexec(), "-n", str(n), sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider"]
    files = [str(TESTS / "world" / f) for f in FILES]
    proc = run_cmd([*cmd, *files], timeout=300, cwd=TESTS.parent)
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    ran = re.findall(r"::(\w+::\w+)\[(\w+(?:-paired)?)\] PASSED", proc.stdout)
    assert len(ran) == sum(FILES.values()) and {w for _, w in ran} == {f"mpi{n}"}, tail
