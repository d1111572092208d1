"""``--identity x509`` from the command line: ``seccomm identity`` makes a test CA whose files a
rank can use as they are, and ``seccomm bench --identity x509`` run plainly makes a throw-away CA
with one certificate per rank, says so in one header line, runs each suite's x509 variant beside
its psk one, and leaves nothing behind."""

from __future__ import annotations

import os
import stat
import sys

import pytest

from helpers import mpiexec, run_cmd
from seccomm import launch
from seccomm.identity import IdentityFiles, load_identity

SECCOMM = [sys.executable, "-m", "seccomm"]


def test_seccomm_identity_writes_a_ca_and_a_certificate_per_host_and_their_settings(tmp_path):
    out = run_cmd(
        [*SECCOMM, "identity", "--out", str(tmp_path / "pki"), "node-a.test", "spiffe://c/r1"], timeout=60
    )
    assert out.returncode == 0, out.stderr
    pki = tmp_path / "pki"
    assert stat.S_IMODE(pki.stat().st_mode) == 0o700
    assert sorted(p.name for p in pki.iterdir()) == [
        "ca.pem",
        "host-0.key",
        "host-0.pem",
        "host-1.key",
        "host-1.pem",
    ]
    exports = [line for line in out.stdout.splitlines() if line.startswith("export ")]
    assert len(exports) == 2
    for i, (line, host) in enumerate(zip(exports, ["node-a.test", "spiffe://c/r1"])):
        env = dict(kv.split("=", 1) for kv in line.split()[1:])
        assert env == {
            "SECCOMM_CERT_FILE": str(pki / f"host-{i}.pem"),
            "SECCOMM_KEY_FILE": str(pki / f"host-{i}.key"),
            "SECCOMM_CA_FILE": str(pki / "ca.pem"),
        }
        me = load_identity(
            IdentityFiles(env["SECCOMM_CERT_FILE"], env["SECCOMM_KEY_FILE"], env["SECCOMM_CA_FILE"])
        )
        assert me.me.host == host
    again = run_cmd([*SECCOMM, "identity", "--out", str(pki), "x"], timeout=60)
    assert again.returncode == 2 and "exists and is not an empty folder" in again.stderr
    bad = run_cmd([*SECCOMM, "identity", "--out", str(tmp_path / "other"), "a b"], timeout=60)
    assert (
        bad.returncode == 2 and "not a host name: 'a b'" in bad.stderr and not (tmp_path / "other").exists()
    )


@pytest.mark.mpi
def test_plain_bench_with_identity_x509_makes_a_throw_away_ca_and_removes_it(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in launch.LAUNCHER_VARS}
    for v in ("SECCOMM_CERT_FILE", "SECCOMM_KEY_FILE", "SECCOMM_CA_FILE"):
        env.pop(v, None)
    cmd = [
        *SECCOMM,
        "bench",
        "--suites",
        "aes-256-gcm",
        "--identity",
        "x509",
        "-b",
        "4K",
        "-e",
        "8K",
        "-n",
        "3",
    ]
    out = run_cmd(cmd, timeout=300, env={**env, "TMPDIR": str(tmp_path)}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert (
        f"# identity: x509 for the SUITE+x509 variants, from {launch.FRESH_IDENTITY_SOURCE}\n" in out.stdout
    )
    rows = [line.split() for line in out.stdout.splitlines() if line.strip() and not line.startswith("#")]
    assert [r[4] for r in rows] == ["native", "aes-256-gcm", "aes-256-gcm+x509"] * 2, out.stdout
    assert all(r[-1] == "0" for r in rows)
    assert not list(tmp_path.glob("seccomm-pki-*")) and not list(tmp_path.glob("seccomm-psk-*"))


@pytest.mark.mpi
def test_bench_with_identity_x509_under_a_launcher_needs_the_files(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SECCOMM_")}
    env["SECCOMM_PSK"] = "5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0"
    cmd = [mpiexec(), "-n", "2", *SECCOMM, "bench", "--identity", "x509", "-b", "4K", "-e", "4K"]
    out = run_cmd(cmd, timeout=120, env=env, cwd=tmp_path)
    assert out.returncode == 2, out.stderr[-1000:]
    assert out.stderr.count("seccomm bench: error: --identity x509: rank 0 has no SECCOMM_CERT_FILE") == 1
