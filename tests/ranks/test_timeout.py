"""A hung MPI launch fails fast and says where: tests/helpers.py ``run_worker`` kills the whole
process group at its time limit and names the scenario and case each rank had reached and the
ranks that had not finished (from tests/mpi_worker.py's per-rank progress files)."""

from __future__ import annotations

import os
import time

import _pytest.outcomes
import pytest

from helpers import run_worker


def _alive(token: str) -> list[int]:
    """pids of running (not zombie) processes whose command line contains ``token``"""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f, open(f"/proc/{pid}/stat") as st:
                if token.encode() in f.read() and st.read().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(pid))
        except (OSError, IndexError):
            pass
    return found


@pytest.mark.mpi
def test_hung_launch_names_scenario_case_and_ranks(tmp_path):
    out = tmp_path / "hang-results.json"
    t0 = time.monotonic()
    with pytest.raises(_pytest.outcomes.Failed) as info:
        run_worker(3, ["hang"], out, timeout=10)
    msg = str(info.value)
    assert time.monotonic() - t0 < 60, msg
    assert "timed out after 10 s" in msg and "mpi_worker.py" in msg, msg
    assert "ranks not finished: [0, 1, 2]" in msg, msg
    assert "rank 1: hang / started: hang: rank 1 waits forever" in msg, msg
    assert "rank 2: hang / started: hang: rank 2 waits forever" in msg, msg
    assert "rank 0: hang / waiting for the other ranks' results" in msg, msg
    deadline = time.monotonic() + 10  # killed; a loaded machine may take a moment to reap them
    while _alive(str(out)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(str(out)), "processes of the killed launch are still running"
