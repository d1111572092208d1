"""Shared fixtures: launch real MPI ranks once per world size and cache what they report."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("mpi_worker.py")
#: scenarios of tests/mpi_worker.py run at each world size (one mpiexec launch per size)
PLAN = {
    1: ["sweep", "algorithms", "uint8_sweep", "rotation", "nonce_unique"],
    2: [
        "sweep",
        "algorithms",
        "uint8_sweep",
        "rotation",
        "nonce_unique",
        "tamper",
        "mismatch",
        "call_mismatch",
        "wire",
        "setup_downgrade",
        "setup_replay",
        "device_engine",
        "device_kernels",
    ],
    3: [
        "sweep",
        "algorithms",
        "uint8_sweep",
        "rotation",
        "nonce_unique",
        "tamper",
        "mismatch",
        "call_mismatch",
        "wire",
        "setup_downgrade",
        "setup_replay",
        "setup_blame",
        "soak",
        "device_engine",
        "device_kernels",
    ],
    4: [
        "sweep",
        "algorithms",
        "uint8_sweep",
        "nonce_unique",
        "policy",
        "setup_downgrade",
        "setup_replay",
        "setup_blame",
        "device_engine",
    ],
    5: ["sweep", "algorithms", "uint8_sweep", "rotation"],
}


def mpiexec() -> str:
    """The mpiexec installed beside this interpreter (the ``mpich`` wheel), else on PATH."""
    here = Path(sys.executable).with_name("mpiexec")
    found = str(here) if here.exists() else shutil.which("mpiexec")
    if not found:
        pytest.fail("no mpiexec: install the 'mpich' wheel (pip install -e .)")
    return found


def run_torch_worker(tmp_path: Path, world: int, *args: str) -> list[dict]:
    """tests/torch_worker.py on ``world`` ranks under mpiexec (gloo rendezvous on a free port);
    every rank's result records, after asserting that all ranks finished and wrote them."""
    from seccomm import launch

    out = tmp_path / "r.json"
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(launch.free_port()))
    proc = subprocess.run(
        [
            mpiexec(),
            "-n",
            str(world),
            sys.executable,
            str(WORKER.with_name("torch_worker.py")),
            str(out),
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    files = [Path(f"{out}.rank{r}") for r in range(world)]
    assert proc.returncode == 0 and all(f.exists() for f in files), proc.stdout[-3000:] + proc.stderr[-3000:]
    return [r for f in files for r in json.loads(f.read_text())]


def run_train(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """``seccomm train --np 2 --json ... *args`` outside any launcher; (process, its JSON)."""
    from seccomm import launch

    j = tmp_path / "train.json"
    env = {k: v for k, v in os.environ.items() if k not in launch.LAUNCHER_VARS}
    proc = subprocess.run(
        [sys.executable, "-m", "seccomm", "train", "--np", "2", "--json", str(j), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(j.read_text())


def run_worker(n: int, scenarios: list[str], out: Path, timeout: float = 900) -> dict:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [mpiexec(), "-n", str(n), sys.executable, str(WORKER), str(out), *scenarios]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0 or not out.exists():
        pytest.fail(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


@pytest.fixture(scope="session")
def mpi_results(tmp_path_factory):
    cache: dict[int, dict] = {}

    def get(n: int) -> dict:
        if n not in cache:
            cache[n] = run_worker(n, PLAN[n], tmp_path_factory.mktemp(f"np{n}") / "results.json")
        return cache[n]

    return get
