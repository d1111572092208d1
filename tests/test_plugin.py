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


GOOD_HEX = "5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0"  # os.urandom(32).hex()


def run_bench(tmp_path, *extra, env=None):
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
        env={**__import__("os").environ, "SECCOMM_PSK": GOOD_HEX} if env is None else env,
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


@pytest.mark.mpi
def test_plugin_without_a_secret_stops_with_the_fix(tmp_path):
    """No secret on any rank and no opt-in: the session stops (exit 2) and says how to give one;
    with SECCOMM_INSECURE_BENCH_SECRET=1 the fixtures run, and every rank warns."""
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("SECCOMM_PSK", "SECCOMM_PSK_FILE")}
    env.pop("SECCOMM_INSECURE_BENCH_SECRET", None)
    out = run_bench(tmp_path, "-k", "allreduce and 1024 and none", env=env)
    assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-3000:]
    assert "no job secret on any rank" in out.stdout + out.stderr
    assert "SECCOMM_INSECURE_BENCH_SECRET=1" in out.stdout + out.stderr
    env["SECCOMM_INSECURE_BENCH_SECRET"] = "1"
    out = run_bench(tmp_path, "-k", "allreduce and 1024 and none", env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stderr.count("WARNING: rank") == 2 and "broadcast in the clear" in out.stderr
