"""The pytest-benchmark plugin under mpiexec -n 2: only rank 0 writes the JSON; extra_info carries
suite, collective, bytes, ranks, busbw and overhead; --benchmark-compare-fail works."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from seccomm.collectives import COLLECTIVES

from conftest import mpiexec

ROOT = Path(__file__).resolve().parents[1]


def run_bench(tmp_path, *extra):
    cmd = [
        mpiexec(),
        "-n",
        "2",
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        str(ROOT / "benchmarks" / "test_collectives.py"),
        "--seccomm-sizes=1K,8K",
        "--seccomm-suites=aes-256-gcm,none",
        "--seccomm-rounds=3",
        "--seccomm-warmup=1",
        f"--benchmark-storage=file://{tmp_path}/store",
        *extra,
    ]
    return subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**__import__("os").environ, "SECCOMM_PSK": "cd" * 32},
    )


@pytest.mark.mpi
def test_plugin_under_mpiexec(tmp_path):
    j = tmp_path / "bench.json"
    out = run_bench(tmp_path, f"--benchmark-json={j}", "--benchmark-autosave")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("passed") == 1  # rank 1 is silent
    doc = json.loads(j.read_text())
    assert len(doc["benchmarks"]) == len(COLLECTIVES) * 2 * 2
    for b in doc["benchmarks"]:
        info = b["extra_info"]
        assert info["ranks"] == 2 and info["suite"] in ("aes-256-gcm", "none")
        assert info["bytes"] in (1024, 8192) and info["busbw_gbps"] > 0 and info["overhead_x"] > 0
        assert b["stats"]["rounds"] == 3
    saved = list((tmp_path / "store").rglob("*.json"))
    assert len(saved) == 1  # autosaved once, by rank 0
    again = run_bench(tmp_path, "--benchmark-compare", "--benchmark-compare-fail=median:100000%")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert "0001" in again.stdout
