"""The attacker harness on real ranks: every attack class is detected, none silently accepted,
the setup classes (forged node map, replayed setup, forged configuration) included."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from seccomm import launch


@pytest.mark.mpi
def test_seccomm_attack_detects_every_class():
    env = {k: v for k, v in os.environ.items() if k not in launch.LAUNCHER_VARS}
    out = subprocess.run(
        [sys.executable, "-m", "seccomm", "attack", "--trials", "12", "--np", "3"],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = [ln.split() for ln in out.stdout.splitlines() if ln.startswith("  ")]
    classes = {r[0] for r in rows}
    ops = {"flip-payload", "flip-tag", "replay", "swap", "truncate", "inject", "redirect", "drop"}
    assert classes == ops | {"forge-node-map", "replay-setup", "forge-config"}
    for r in rows:
        trials, detected, silent = int(r[1]), int(r[2]), int(r[3])
        assert trials == 12 and detected == 12 and silent == 0, r
    assert "# OK: 132 attacks, 0 silently accepted" in out.stdout
