"""The secure DDP hook under real processes (gloo; 2 and 3 ranks via mpiexec) and `seccomm train`.
Skipped where torch is not installed (the `torch` extra)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from helpers import run_torch_worker, run_train  # noqa: E402
from seccomm import launch  # noqa: E402


@pytest.mark.mpi
@pytest.mark.parametrize("world", [2, 3])
def test_hook_on_real_ranks(tmp_path, world):
    res = run_torch_worker(tmp_path, world)
    bad = [r for r in res if not r["ok"]]
    assert not bad, bad
    assert len(res) >= 15 * world


@pytest.mark.mpi
def test_hook_under_identity_x509_on_three_ranks(tmp_path, monkeypatch):
    """SecureHookState(identity=...) over the torch transport: DDP's gradients, every rank's
    certificate verified (3 ranks: group frames carry origin proofs)."""
    from seccomm.identity import make_test_identities

    (tmp_path / "pki").mkdir()
    make_test_identities(tmp_path / "pki", [f"r{r}.test" for r in range(3)])
    monkeypatch.setenv("SECCOMM_TEST_PKI", str(tmp_path / "pki"))
    res = run_torch_worker(tmp_path, 3, "x509")
    bad = [r for r in res if not r["ok"]]
    assert not bad, bad
    assert sum("x509: every rank's certificate verified" in r["name"] for r in res) == 3


@pytest.mark.mpi
def test_seccomm_train_with_identity_x509_makes_its_certificates_and_trains_alike(tmp_path, monkeypatch):
    """seccomm train --identity x509, run plainly: a throw-away CA per run, the secure hook's
    SecureComm under x509, the same parameters as DDP's own hook, nothing left behind."""
    env_tmp = tmp_path / "tmp"
    env_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(env_tmp))  # (where the CA's folder goes: looked at below)
    proc, r = run_train(tmp_path, "--steps", "10", "--identity", "x509")
    assert r["identity"] == "x509" and "identity x509" in proc.stdout
    assert r["bitwise_equal"] and r["max_abs_param_diff"] == 0.0
    assert not list(env_tmp.glob("seccomm-*"))  # (torch leaves its own torchinductor_* folder there)


@pytest.mark.mpi
def test_seccomm_train_end_to_end(tmp_path):
    proc, r = run_train(tmp_path, "--steps", "30")
    assert "overhead (secure / default step time)" in proc.stdout
    assert "Warning" not in proc.stderr, proc.stderr[-2000:]  # e.g. torch's "not writable", once per rank
    assert r["world_size"] == 2 and r["parameters"] == 64 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
    d, s = r["variants"]["default"], r["variants"]["secure"]
    assert d["test_accuracy"] > 0.5 and abs(d["test_accuracy"] - s["test_accuracy"]) < 1e-6
    assert r["bitwise_equal"] and r["max_abs_param_diff"] == 0.0  # 2 ranks: a + b = b + a
    assert r["secure_transport"] == "mpi" and "secure frames over mpi" in proc.stdout  # auto, gloo, MPI ranks


def test_read_only_setup_blobs_become_tensors_without_a_warning():
    """The setup's send-only blobs are read-only numpy arrays (``np.frombuffer(bytes)``); torch
    warns on those and may write through them: the transport hands it a copy."""
    import warnings

    import numpy as np

    from seccomm.transports.torch import _tensor

    blob = np.frombuffer(b"finished-mac", np.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = _tensor(blob)
    assert bytes(t.numpy()) == b"finished-mac"
    frame = np.zeros(8, np.uint8)
    _tensor(frame)[0] = 7  # a writable frame is shared, not copied (zero-copy)
    assert frame[0] == 7


def test_hook_transport_choice_is_checked(monkeypatch):
    """A transport name that does not exist, or MPI where this process is no MPI rank: ValueError
    before anything is built (no launcher variables here)."""
    from seccomm import launch
    from seccomm.torch import SecureHookState

    with pytest.raises(ValueError, match="transport must be one of auto, mpi, torch"):
        SecureHookState(None, transport="gloo-p2p")
    for v in launch.LAUNCHER_VARS + ("SECCOMM_LAUNCHED",):
        monkeypatch.delenv(v, raising=False)
    with pytest.raises(ValueError, match="needs every rank of the DDP group to be the MPI rank"):
        SecureHookState(None, transport="mpi")


def test_workload_parameter_counts_match_published():
    from seccomm.torch.workloads import WORKLOADS, workload

    for name, (_, published) in WORKLOADS.items():
        w = workload(name)
        assert w["parameters"] == published, name
        assert sum(w["buckets"]) == w["gradient_bytes"] == 4 * published
        assert w["buckets"][0] >= 1 << 20  # first bucket closes at 1 MiB with DDP's default cap
        assert all(b >= 25 << 20 for b in w["buckets"][1:-1]), name


def test_the_packaged_tensor_sizes_are_the_models():
    """seccomm/data/workloads.json (what seccomm tradeoff reads without PyTorch) holds every
    model's tensor sizes in parameters() order, and gives DDP's buckets as the models do."""
    from seccomm import gradients
    from seccomm.torch.workloads import WORKLOADS, build, workload

    assert gradients.workload_names() == list(WORKLOADS)
    for name in WORKLOADS:
        sizes = [p.numel() for p in build(name).parameters()]
        assert gradients._table()[name]["tensor_elements"] == sizes, name  # noqa: SLF001
        for cap in (None, 5.0, 100.0):
            assert gradients.workload_buckets(name, cap)["buckets"] == workload(name, cap)["buckets"]


@pytest.mark.mpi
def test_bench_workload(tmp_path):
    j = tmp_path / "w.json"
    env = {k: v for k, v in os.environ.items() if k not in launch.LAUNCHER_VARS}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "seccomm",
            "bench",
            "--workload",
            "resnet50",
            "--scale",
            "0.02",
            "-n",
            "2",
            "-w",
            "1",
            "--suites",
            "none,aes-256-gcm",
            "--json",
            str(j),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "25,557,032 parameters" in proc.stdout
    doc = json.loads(j.read_text())
    assert doc["workload"]["parameters"] == 25_557_032 and len(doc["workload"]["buckets"]) == 5
    rows = doc["rows"]
    assert [r["variant"] for r in rows] == ["native", "none", "aes-256-gcm"]
    for r in rows:
        assert r["wrong"] == 0 and r["buckets"] == 5
        assert r["projected_step_ms"] == pytest.approx(r["time_us"]["median"] / 1e3 / 0.02)


def test_train_device_arguments_are_checked_before_ranks_start():
    import torch

    env = {k: v for k, v in os.environ.items() if k not in launch.LAUNCHER_VARS}
    cases = [(["--backend", "nccl"], "add --device cuda")]
    if not torch.cuda.is_available():
        cases.append((["--device", "cuda"], "no CUDA device"))
    for extra, msg in cases:
        proc = subprocess.run(
            [sys.executable, "-m", "seccomm", "train", "--steps", "2", *extra],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
        )
        assert proc.returncode == 2 and msg in proc.stderr, proc.stderr
