"""The attacker harness on real ranks: every attack class is detected, none silently accepted,
the setup classes (forged node map, replayed setup, forged configuration) included; every trial
ends detected, silently accepted or not applicable (with the reason), and the verdict fits the
suite (``none`` authenticates no frame) and the way the run was started."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from seccomm import launch
from seccomm.compliance import attack

from helpers import mpiexec, run_cmd

OPS = {"flip-payload", "flip-tag", "replay", "swap", "truncate", "inject", "redirect", "drop", "pad"}
GOOD_HEX = "5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0"  # os.urandom(32).hex()


def _table(stdout: str) -> dict[str, dict]:
    """class -> {trials, detected, silent, na, expected, rest} from seccomm attack's table."""
    rows = {}
    for ln in stdout.splitlines():
        if ln.startswith("  "):
            f = ln.split()
            expected = {"detected": "detected", "not": attack.NOT_PROTECTED}.get(f[5], "silently accepted")
            rest = ln.split(expected, 1)[1].split(None, 1)
            rows[f[0]] = dict(
                trials=int(f[1]), detected=int(f[2]), silent=int(f[3]), na=int(f[4]), expected=expected,
                rest=rest[1] if len(rest) > 1 else "",
            )  # fmt: skip
    return rows


def _attack(*args, launcher_n=None):
    env = {k: v for k, v in os.environ.items() if k not in launch.LAUNCHER_VARS}
    cmd = [sys.executable, "-m", "seccomm", "attack", *args]
    if launcher_n:
        cmd = [mpiexec(), "-n", str(launcher_n), *cmd]
        env["SECCOMM_PSK"] = GOOD_HEX
    return run_cmd(cmd, timeout=600, env=env)


@pytest.mark.mpi
def test_seccomm_attack_detects_every_class():
    out = _attack("--trials", "12", "--np", "3")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = _table(out.stdout)
    assert set(rows) == OPS | set(attack.INSIDER_CLASSES) | {
        "forge-node-map",
        "replay-setup",
        "forge-config",
        "reflect-record",
        "replay-record",
        "drop-receipt",
        "hold-frame",
    }
    for cls, r in rows.items():
        if cls in attack.INSIDER_CLASSES:  # identity psk: every rank holds the job secret
            assert (r["trials"], r["expected"]) == (0, attack.NOT_PROTECTED), (cls, r)
            assert r["rest"].startswith("not run: under identity psk every rank holds the job secret")
            continue
        n = 3 if cls in ("drop-receipt", "hold-frame") else 12  # (attack.LINK_TRIALS)
        assert (r["trials"], r["detected"], r["silent"], r["na"]) == (n, n, 0, 0), (cls, r)
        assert r["expected"] == "detected"
    insiders = ", ".join(attack.INSIDER_CLASSES)
    assert (
        f"# OK: 174 attacks: 174 detected, 0 silently accepted, 0 not applicable; {insiders}: not protected: "
        f"shared secret (not run: identity psk)"
    ) in out.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("n", [3, 4])
def test_under_identity_x509_an_insider_is_detected_naming_the_right_rank(n):
    """--identity x509 run plainly (a throw-away CA, one certificate per rank): every insider
    class detected in every trial, on 3 and 4 ranks; each example names the rank the class says
    (forge-origin: the forger, rank 1; inject: the sender of the frame that failed, rank 0;
    claim-host: the claimer, rank 2; forge-notice: refused as forged from rank 1, the rank it
    names)."""
    classes = ",".join(attack.INSIDER_CLASSES)
    out = _attack("--trials", "4", "--np", str(n), "--identity", "x509", "--classes", classes)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = _table(out.stdout)
    assert set(rows) == set(attack.INSIDER_CLASSES)
    for cls, r in rows.items():
        assert (r["trials"], r["detected"], r["silent"], r["na"], r["expected"]) == (
            4,
            4,
            0,
            0,
            "detected",
        ), r
    assert "from rank 1 (allgather #1" in rows["insider-forge-origin"]["rest"]
    assert "from rank 0 (alltoall #1" in rows["insider-inject"]["rest"]
    assert "rank 2 gave a host other than the one its certificate names" in rows["insider-claim-host"]["rest"]
    assert "refused a give-up notice in rank 1's name" in rows["insider-forge-notice"]["rest"]
    assert "identity x509" in out.stdout.splitlines()[0] and "# OK: 20 attacks: 20 detected" in out.stdout


_FORGE_NOTICE = """
import sys
from mpi4py import MPI
from seccomm.compliance import insider
from seccomm.compliance.config import ReviewConfig

comm = MPI.COMM_WORLD
side = comm.Dup()
psk = bytes.fromhex(sys.argv[1])
outcome, note = insider._forge_notice(comm, side, ReviewConfig(), psk, int(sys.argv[2]))
got = comm.gather((outcome, note), root=0)
if comm.Get_rank() == 0:
    print(repr(got))
"""


@pytest.mark.mpi
@pytest.mark.parametrize("turn", [0, 1])
def test_the_forged_notice_class_reads_a_taken_notice_as_accepted(turn):
    """insider-forge-notice run under identity psk, which the harness does not run (every rank
    holds the job secret): on the turn where the insider derives the pair key of ranks 0 and 1
    from the job secret, rank 0 takes the notice and stops in rank 1's name, and the class says
    "silent" (accepted), so it would catch a notice key a third rank can make; on the turn
    where it uses its own pair key, rank 0 refuses it."""
    import ast

    env = {k: v for k, v in os.environ.items() if k not in launch.LAUNCHER_VARS}
    cmd = [mpiexec(), "-n", "3", sys.executable, "-c", _FORGE_NOTICE, GOOD_HEX, str(turn)]
    out = run_cmd(cmd, timeout=120, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    got = ast.literal_eval(out.stdout.strip().splitlines()[-1])
    if turn:
        assert got[0][0] == "silent" and "stopped in rank 1's name: PeerAbortError" in got[0][1], got
    else:
        assert got[0] == ("detected", got[0][1]) and "refused a give-up notice" in got[0][1], got
    assert {o for o, _ in got[1:]} <= {"detected"}, got


@pytest.mark.mpi
def test_suite_none_every_trial_has_an_outcome_that_fits():
    """--suite none: the frames carry no tag, so every operation class but truncate (the frame
    length check) and drop (the deadline) is silently accepted, as expected (exit 0), and flip-tag
    has no tag to flip (not applicable, said why); each trial is accounted for, and the row says
    what the accepted frames did; the setup is still detected."""
    out = _attack("--trials", "4", "--np", "3", "--suite", "none")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = _table(out.stdout)
    for cls, r in rows.items():
        n = 3 if cls in ("drop-receipt", "hold-frame") else 4  # (attack.LINK_TRIALS)
        assert r["detected"] + r["silent"] + r["na"] == r["trials"] == n, (cls, r)
        if cls == "flip-tag":
            assert (r["na"], r["expected"]) == (4, "silently accepted"), (cls, r)
            assert "a none frame carries no tag" in r["rest"], r
        elif cls in OPS - {"truncate", "drop", "pad"}:
            assert (r["silent"], r["expected"]) == (4, "silently accepted"), (cls, r)
            assert "4 altered frame(s) consumed without an error" in r["rest"], r
        elif cls in attack.INSIDER_CLASSES:  # not run: any rank forges what carries no tag
            assert (r["na"], r["expected"]) == (4, "silently accepted"), (cls, r)
            assert "suite none authenticates nothing" in r["rest"], r
        elif cls == "reflect-record":  # records carry no tag under none
            assert (r["silent"], r["expected"]) == (4, "silently accepted"), (cls, r)
            assert "4 trial(s) in which a rank returned" in r["rest"], r
        else:
            assert (r["detected"], r["expected"]) == (n, "detected"), (cls, r)
    assert "4 changed the result" in rows["replay"]["rest"]  # the earlier frame carries other values
    assert rows["truncate"]["rest"].startswith("by the frame length check (no tag)")
    assert "none authentication" not in rows["truncate"]["rest"]  # a suite without tags
    assert "# OK: 82 attacks: 34 detected, 24 silently accepted, 24 not applicable; suite none" in out.stdout


@pytest.mark.mpi
def test_under_a_launcher_of_two_ranks():
    """mpiexec -n 2: without redirect the classes run and pass; the redirect advice names the
    launcher (covered with every usage error in test_cli_launch.py)."""
    out = _attack("--trials", "3", "--classes", "flip-payload,replay,drop", launcher_n=2)
    assert out.returncode == 0 and "# OK: 9 attacks: 9 detected" in out.stdout, (
        out.stdout[-2000:] + out.stderr[-2000:]
    )


def test_a_suite_without_tags_is_not_said_to_fail_authentication():
    """A truncated frame under suite none: the frame check failed (it has no tag), not "none
    authentication"; an authenticating suite's message is unchanged."""
    from seccomm.errors import AuthenticationError

    kw = dict(peer=0, op="allreduce", seq=1, detail="frame has 8 bytes, expected 16 (truncated or padded)")
    none, gcm = (
        str(AuthenticationError(suite="none", **kw)),
        str(AuthenticationError(suite="aes-256-gcm", **kw)),
    )
    assert none.startswith("the frame check (suite none has no tag) failed on a frame from rank 0"), none
    assert gcm.startswith("aes-256-gcm authentication failed on a frame from rank 0"), gcm


def test_verdicts_fit_the_suite():
    """_row's pass rule: a silent acceptance fails where the suite should detect, not under none;
    a trial with another error always fails; the verdict line names the failed classes."""
    rec = {"suite": "aes-256-gcm"}
    assert attack._row("replay", 5, 5, 0, "", rec)["passed"]
    assert not attack._row("replay", 5, 4, 1, "", rec)["passed"]
    assert not attack._row("replay", 5, 4, 0, "", rec, other=1)["passed"]
    assert attack._row("replay", 5, 0, 5, "", {"suite": "none"})["passed"]
    assert attack._row("truncate", 5, 0, 5, "", {"suite": "none"})["passed"] is False  # none detects it
    assert attack._row("redirect", 5, 0, 0, "", rec, na=5, reason="needs >= 3 ranks")["passed"]
    assert [attack.expected(c, "none") for c in ("flip-tag", "truncate", "drop", "forge-config")] == [
        "silently accepted", "detected", "detected", "detected"
    ]  # fmt: skip
    rows = [attack._row("replay", 5, 4, 1, "", rec), attack._row("drop", 5, 5, 0, "", rec)]
    assert attack.verdict(rows, "aes-256-gcm", 1.0).startswith(
        "# FAILED (replay): 10 attacks: 9 detected, 1 silently"
    )


def test_a_trial_without_a_different_frame_is_not_applicable():
    """replay/redirect with no earlier frame of that size, or a byte-identical one: the honest
    frame goes out and the trial says why it is not applicable."""
    t = attack.AttackTransport.__new__(attack.AttackTransport)
    frame = np.arange(32, dtype=np.uint8)
    t.altered, t.na_reason = True, ""
    assert np.array_equal(t._substitute(frame, [], "to this peer"), frame) and not t.altered
    assert t.na_reason == "no earlier frame of 32 bytes to this peer"
    t.altered = True
    t._substitute(frame, [frame.copy()], "for another peer")
    assert not t.altered and "byte-identical" in t.na_reason
    t.altered, t.na_reason = True, ""
    other = frame[::-1].copy()
    assert np.array_equal(t._substitute(frame, [other], "x"), other) and t.altered


@pytest.mark.mpi
def test_two_ranks_run_every_class_but_redirect_and_state_the_confidence():
    """The default classes on 2 ranks: redirect (it needs 3) is not applicable, said why, not a
    usage error; the last lines give the miss-rate bound per trial count; the example column is
    cut at a word."""
    out = _attack("--trials", "2", "--np", "2")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    rows = _table(out.stdout)
    assert rows["redirect"]["na"] == 2 and "needs >= 3 ranks" in rows["redirect"]["rest"], rows["redirect"]
    assert "miss rate below 1 - 0.05^(1/n) at 95 % confidence (77.6 % for 2 trials)" in out.stdout
    for r in rows.values():
        assert len(r["rest"]) <= 110 and (r["rest"].endswith("…") or not r["rest"].endswith(" ")), r


def test_the_miss_bound_and_the_cut():
    from seccomm.compliance.attack import _cut, miss_bound

    assert miss_bound(50) == pytest.approx(0.0582, abs=1e-4) and miss_bound(3) == pytest.approx(
        0.632, abs=1e-3
    )
    assert 2.9 / 1000 < miss_bound(1000) < 3.0 / 1000  # the rule of three
    assert _cut("short", 10) == "short"
    assert (
        _cut("TransportTimeout: allreduce #2: rank 1 made no progress", 30) == "TransportTimeout: allreduce…"
    )
