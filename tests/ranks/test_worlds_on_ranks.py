"""The world tests on real ranks: pytest itself under ``mpiexec -n K`` runs the files of
tests/world whose tests take the ``world`` fixture (:data:`FILES`), whose ``world`` is then the
real ranks (tests/worlds.py)."""

from __future__ import annotations

import re
import sys

import pytest

from helpers import TESTS, mpiexec, run_cmd

pytestmark = pytest.mark.mpi

#: the files of tests/world written on the ``world`` fixture: (the tests each holds, the numbers of
#: real ranks it runs on)
FILES = {
    "test_results.py": (24, (2, 3)),
    "test_epochs.py": (6, (2, 3)),
    "test_clear_frames.py": (10, (2, 3, 4)),
    "test_op_replay.py": (16, (2, 3)),
    "test_tamper.py": (46, (2, 3)),
    "test_mismatch.py": (11, (2, 3)),
}


@pytest.mark.parametrize("n", [2, 3, 4])
def test_the_world_tests_pass_on_real_ranks(n):
    """Every rank runs every test (their exit status counts; only rank 0 prints: the seccomm
    plugin), each on the world of the ``n`` real ranks (``[mpiN]``), none on threads.  A test may
    skip where its world has the wrong size (it says why), but every test reports."""
    cmd = [mpiexec(), "-n", str(n), sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider"]
    files = {f: count for f, (count, sizes) in FILES.items() if n in sizes}
    proc = run_cmd([*cmd, *(str(TESTS / "world" / f) for f in files)], timeout=300, cwd=TESTS.parent)
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    ran = re.findall(r"::(\w+(?:::\w+)?)\[(\w+)[^\]]*\] (PASSED|SKIPPED)", proc.stdout)  # (class or not)
    assert len(ran) == sum(files.values()) and {w for _, w, _ in ran} == {f"mpi{n}"}, tail
    assert any(status == "PASSED" for *_, status in ran), tail
