"""``seccomm report --compliance``: the rendering (strict HTML parse, Markdown), the verdicts, and
an end-to-end run on real ranks with a real bench result."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import html5lib
import pytest

from browser import blank_page_draws_little, screenshot
from helpers import run_cmd
from seccomm import launch
from seccomm.compliance.config import ReviewConfig
from seccomm.compliance.doc import to_html, to_markdown
from seccomm.compliance.report import build
from seccomm.compliance.review import review

MACHINE = {
    "utc": "2026-11-29T12:00:00+00:00",
    "seccomm": "0.1.0",
    "git_commit": "abc123",
    "host": "h",
    "platform": "Linux",
    "python": "3.11",
    "openssl": "OpenSSL 3.x",
    "cryptography": "46",
    "mpi_library": "MPICH 5",
    "mpi4py": "4",
    "numpy": "2",
    "cpu": {"model": "cpu", "cores": 2, "aes": True, "vaes": False, "pclmulqdq": True},
}
CFG = {
    "suite": "aes-256-gcm",
    "chunk_bytes": 1 << 20,
    "rotate_after_frames": None,
    "key_exchange": "psk",
    "encrypt": "all",
    "trials": 5,
    "seed": 0,
    "command": "seccomm report --compliance",
}
MODULE = {"openssl": "OpenSSL 3.x", "cryptography": "46", "fips_provider": False}


def rotation_row(cfg=CFG, ok=True):
    config = ReviewConfig.from_dict(cfg)
    return {
        "configured": config.rotation_point(),
        "limit": config.limit(),
        "bound": 28,
        "refusal": None,
        "run_point": 224,
        "scaled": True,
        "ops": 17,
        "ran": True,
        "epochs_ok": ok,
        "results_ok": True,
        "keys_differ": True,
        "replay_refused": True,
        "epochs_seen": 3,
        "ok": ok,
        "detail": "ran at a test-sized point of 224 frames per key",
        "config": config.record(rotate_after_frames=224),
    }


def evidence(silent=0, wire_hits_gcm=0, cfg=CFG):
    config = ReviewConfig.from_dict(cfg)
    attacks = [
        {
            "class": c,
            "trials": 5,
            "detected": 5,
            "silently_accepted": 0,
            "example": "AuthenticationError: <x>",
            "config": config.record(),
        }
        for c in ("flip-payload", "replay", "drop")
    ]
    attacks[1]["silently_accepted"] = silent
    wire = [
        {
            "suite": s,
            "wire_bytes": 1000,
            "plaintext_windows": 500,
            "hits": h,
            "expect": e,
            "ok": (h == 0) == (e == "absent"),
            "config": config.record(s),
        }
        for s, h, e in (("aes-256-gcm", wire_hits_gcm, "absent"), ("none", 400, "present"))
    ]
    return {
        "attacks": attacks,
        "wire": wire,
        "rotation": rotation_row(cfg),
        "world_size": 3,
        "machine": MACHINE,
        "module": MODULE,
        "capture": {"rows": None, "reason": "--no-capture"},
    }


def strict_parse(text: str):
    """html5lib in strict mode raises on any parse error (unclosed or misnested tags, bad
    entities, a missing doctype)."""
    return html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(text)


def test_verdicts_follow_the_evidence():
    _, ok = build(evidence(), CFG, None, None)
    assert ok
    doc, ok = build(evidence(silent=1), CFG, None, None)
    assert not ok and "| overall | FAIL: attacker harness (live) |" in to_markdown(doc)
    _, ok = build(evidence(wire_hits_gcm=3), CFG, None, None)
    assert not ok  # plaintext found under an encrypting suite
    for cfg, why in (
        (dict(CFG, suite="none"), "suite under review protects confidentiality and integrity"),
        (dict(CFG, suite="aes-256-gmac"), "suite under review protects confidentiality and integrity"),
        (dict(CFG, rotate_after_frames=2**40), "key rotation within the usage limit"),
        (dict(CFG, encrypt="inter-node"), "encrypt policy protects every hop"),
    ):  # no encryption; rotation past the limit; hops in the clear by policy
        doc, ok = build(evidence(cfg=cfg), cfg, None, None)
        md = to_markdown(doc)
        assert not ok and f"| overall | FAIL: {why}" in md, (cfg, md[:1500])
    inter = dict(CFG, encrypt="inter-node")
    md = to_markdown(build(evidence(cfg=inter), inter, None, None)[0])
    assert "encrypt=inter-node: hops between ranks that share a node travel in the clear" in md
    chacha = dict(CFG, suite="chacha20-poly1305")
    assert build(evidence(cfg=chacha), chacha, None, None)[1]
    ev = evidence()
    ev["rotation"] = rotation_row(ok=False)  # the live rotation check failed
    assert not build(ev, CFG, None, None)[1]
    del ev["rotation"]  # or never ran
    assert not build(ev, CFG, None, None)[1]


def capture(cfg=CFG, plaintext=0, missed=0):
    """Packet-capture evidence as ``capture.capture_check`` returns it (two suites)."""
    config = ReviewConfig.from_dict(cfg)
    rows = []
    for s, h, e in (("aes-256-gcm", plaintext, "absent"), ("none", 300, "present")):
        found = 12 - (missed if s == "aes-256-gcm" else 0)
        ok = (h == 0) == (e == "absent") and found == 12
        rows.append(dict(suite=s, packets=40, captured_bytes=90_000, frames_found=found, frames=12, hits=h))
        rows[-1].update(expect=e, ok=ok, config=config.record(s))
    return {"rows": rows, "nranks": 2, "pcap_dir": None}


def test_a_packet_capture_that_ran_decides_its_check():
    """A capture that ran passes when every row did and fails the report when plaintext was
    found under an encrypting suite or the capture missed frames; a capture that could not run
    (no rows) or is absent is "not run" and fails nothing."""
    what = "wire evidence, packet capture (live)"
    for cap, verdict in (
        (capture(), True),
        (capture(plaintext=2), False),
        (capture(missed=1), False),
        ({"rows": None, "reason": "--no-capture"}, None),
        (None, None),
    ):
        ev = evidence()
        if cap is None:
            del ev["capture"]
        else:
            ev["capture"] = cap
        rv = review(ev, CFG, None, None)
        assert rv.verdicts["capture"] is verdict and rv.cap == (cap or None), cap
        assert rv.passed is (verdict is not False) and (what in rv.failed) is (verdict is False)
        md = to_markdown(build(ev, CFG, None, None)[0])
        assert f"| {what} | {'not run' if verdict is None else 'PASS' if verdict else 'FAIL'} |" in md


def test_the_bench_result_reaches_the_report():
    bench = {
        "machine": MACHINE,
        "world_size": 2,
        "rows": [
            dict(collective="allreduce", size_bytes=4096, variant="native", time_us={"median": 10.0}),
            dict(
                collective="allreduce",
                size_bytes=4096,
                variant="aes-256-gcm",
                time_us={"median": 25.0},
                busbw_gbps=0.5,
                overhead_x=2.5,
                wrong=0,
            ),
        ],
    }
    rv = review(evidence(), CFG, bench, "results.json")
    assert rv.bench is bench and rv.bench_name == "results.json"
    md = to_markdown(build(evidence(), CFG, bench, "results.json")[0])
    assert "From results.json: measured 2026-11-29T12:00:00+00:00 on h (cpu), commit abc123, 2 ranks." in md
    assert "| allreduce | 4,096 | aes-256-gcm | 10.0 | 25.0 | 0.500 | 2.50 | 0 |" in md
    # no commit known, and a result of seccomm bench -c 0 (nothing checked): said as elsewhere
    bench["machine"] = {**MACHINE, "git_commit": None}
    bench["rows"][1]["wrong"] = None
    md = to_markdown(build(evidence(), {**CFG, "trials": 1}, bench, "results.json")[0])
    assert "commit unknown, 2 ranks." in md and "commit ?" not in md
    assert "| 2.50 | N/A |" in md and "(1 trial per class," in md


def test_html_is_one_strict_self_contained_file_and_escapes_text():
    ev = evidence()
    ev["attacks"][0]["example"] = "<script>alert(1)</script> & </td>"
    text = to_html(build(ev, CFG, None, None)[0])
    tree = strict_parse(text)
    assert tree.find(".//title").text == "seccomm compliance report"
    assert "<script" not in text and "&lt;script&gt;" in text
    assert not re.search(r"<(link|img|iframe|object)\b|\bsrc=|href=", text)  # nothing external
    cells = [td.text for td in tree.iter("td")]
    assert (
        "PASS" in cells
        and (
            "approved algorithm (NIST SP 800-38D); module: not validated: OpenSSL 3.x in the cryptography 46 "
            "package, no FIPS provider active"
        )
        in cells
    )
    with pytest.raises(Exception):
        strict_parse(text.replace("</table>", "", 1))  # the parser does catch broken markup


def test_markdown_sections_and_rotation_point():
    cfg = dict(CFG, rotate_after_frames=1000, chunk_bytes=65536)
    md = to_markdown(build(evidence(cfg=cfg), cfg, None, None)[0])
    for section in (
        "## Summary",
        "## Cipher suites and FIPS 140-3 status",
        "## Key derivation",
        "## Nonce construction",
        "## Usage limits per key and rotation",
        "## GPU path: seccomm's own kernels",
        "## Evidence: key rotation",
        "## Software in use",
        "## Evidence: attacker harness",
        "## Evidence: no plaintext on the wire",
        "## Measured overhead",
        "## Threat model in brief",
        "## How this report was produced",
    ):
        assert section in md
    assert "Configured rotation point: 1,000 frames per key (aes-256-gcm, 65,536-byte frames)" in md
    assert "| chacha20-poly1305 | yes | yes | not approved" in md
    assert "HKDF" in md and "RFC 5869" in md and "SP 800-38D" in md and "draft-irtf-cfrg-aead-limits" in md


def test_module_status_is_stated_apart_from_the_algorithm(monkeypatch):
    """'approved' is an algorithm status; the module is 'not validated' unless a FIPS provider is
    active, which the report reads at run time (simulated here both ways)."""
    from seccomm.compliance import status

    md = to_markdown(build(evidence(), CFG, None, None)[0])
    gcm = next(ln for ln in md.splitlines() if ln.startswith("| aes-256-gcm | yes | yes |"))
    assert (
        "approved algorithm (NIST SP 800-38D); module: not validated: OpenSSL 3.x in the cryptography "
        "46 package, no FIPS provider active" in gcm
    )
    assert "| FIPS 140-3 status (information) | approved algorithm, module not validated |" in md
    assert not re.search(r"\| approved \|", md)  # never "approved" alone as a claim
    assert "generated outside any cryptographic module" in md and "IG C.H" in md  # the nonce
    assert "T-tables" in md and "GHASH" in md and "cache/bank-timing exposure" in md  # the GPU path
    ev = evidence()
    ev["module"] = dict(MODULE, fips_provider=True)
    md = to_markdown(build(ev, CFG, None, None)[0])
    assert "module: a FIPS provider is active in OpenSSL 3.x" in md and "not validated" not in md
    assert "approved algorithm, FIPS provider active (validation: see its certificate)" in md
    ev["module"] = dict(MODULE, fips_provider=None)  # the state could not be read: said so
    md = to_markdown(build(ev, CFG, None, None)[0])
    assert "approved algorithm, module state unknown (the FIPS state could not be read)" in md
    assert "module not validated" not in md
    assert status.fips_provider_active() is False  # this machine: the wheel's OpenSSL, no provider
    # patch seccomm's probe, not cryptography's: its OpenSSL backend caches the FIPS state when
    # first built, and a patched value would disable X25519 for the rest of this process
    monkeypatch.setattr(status, "fips_provider_active", lambda: True)
    mod = status.crypto_module()
    assert mod["fips_provider"] is True and "a FIPS provider is active" in status.module_status(mod)


def test_evidence_that_ran_under_other_settings_fails_the_report():
    ev = evidence()
    ev["wire"][0]["config"] = dict(ev["wire"][0]["config"], chunk_bytes=65536)
    doc, ok = build(ev, CFG, None, None)
    md = to_markdown(doc)
    assert not ok and "wire check aes-256-gcm: chunk_bytes 65536 (configured 1048576)" in md
    assert "NOT as configured: chunk_bytes 65536" in md
    ev["wire"][0]["config"]["note"] = "ran smaller frames on purpose"  # declared: stated, not failed
    md = to_markdown(build(ev, CFG, None, None)[0])
    assert build(ev, CFG, None, None)[1] and "declared exceptions: wire check aes-256-gcm" in md
    del ev["attacks"][0]["config"]  # a row that records nothing proves nothing
    assert not build(ev, CFG, None, None)[1]


class _Built(Exception):
    pass


def test_every_evidence_run_constructs_its_securecomm_with_the_configuration(monkeypatch):
    """The attacker harness, the wire check, the rotation check and the capture job hand
    SecureComm the configured key exchange, chunk size, rotation point and encrypt policy (caught
    at construction, in process)."""
    from mpi4py import MPI

    import seccomm.comm
    from seccomm.compliance import attack, capture, evidence as wire, rotation

    seen = []

    def fake(comm, suite, **kw):
        seen.append((suite, kw))
        raise _Built

    monkeypatch.setattr(seccomm.comm, "SecureComm", fake)
    config = ReviewConfig("chacha20-poly1305", "psk-dhe", 4096, 500, "inter-node")
    want = {
        "key_exchange": "psk-dhe",
        "chunk_bytes": 4096,
        "rotate_after_frames": 500,
        "encrypt": "inter-node",
    }
    for run in (
        lambda: wire.wire_check(MPI.COMM_SELF, suites=["chacha20-poly1305"], config=config),
        lambda: attack.run_class(MPI.COMM_SELF, "swap", 1, config=config),
        lambda: rotation.rotation_check(MPI.COMM_SELF, config),
        lambda: capture._capture_job("chacha20-poly1305", 64, 0, config.settings()),
    ):
        with pytest.raises(_Built):
            run()
    assert len(seen) == 4
    for suite, kw in seen:
        assert suite == "chacha20-poly1305"
        assert {k: kw[k] for k in want} == want, kw
    seen.clear()
    with pytest.raises(_Built):  # a control suite gets the point lowered to its own limit only
        wire.wire_check(MPI.COMM_SELF, suites=["none"], config=ReviewConfig(rotate_after_frames=2**70))
    assert seen[0][1]["rotate_after_frames"] == 2**63


def test_rotation_schedule_and_plan():
    from seccomm.compliance.rotation import MAX_CHECK_OPS, TEST_OPS_PER_EPOCH, plan, predicted_epochs

    assert predicted_epochs(100, 28, 8) == [0, 0, 0, 1, 1, 1, 2, 2]
    assert predicted_epochs(28, 28, 3) == [0, 1, 2]
    p = plan(ReviewConfig(rotate_after_frames=1000, chunk_bytes=65536), 3)
    assert not p["scaled"] and p["run_point"] == 1000 and p["ops"] == 2 * (1000 // p["bound"]) + 1
    p = plan(ReviewConfig(), 3)  # 11,862,016 frames per key: out of reach, so test-sized
    assert p["scaled"] and p["run_point"] == TEST_OPS_PER_EPOCH * p["bound"] and p["ops"] <= MAX_CHECK_OPS
    p = plan(ReviewConfig(rotate_after_frames=2**40), 3)
    assert "is above aes-256-gcm's usage limit of 11,862,016 frames per key" in p["refusal"]
    assert "below the" in plan(ReviewConfig(rotate_after_frames=3), 3)["refusal"]


def test_usage_errors_exit_2(tmp_path):
    from seccomm import cli

    bad = tmp_path / "b.json"
    bad.write_text('{"rows": []}')
    assert cli.main(["report", "--format", "md"]) == 2  # --compliance missing
    assert cli.main(["report", "--compliance", "--bench", str(bad)]) == 2
    assert cli.main(["report", "--compliance", "--bench", str(tmp_path / "missing.json")]) == 2
    assert cli.main(["report", "--compliance", "--suite", "rot13"]) == 2
    assert cli.main(["report", "--compliance", "--seed", "-1"]) == 2
    assert cli.main(["report", "--compliance", "--np", "2"]) == 2  # redirect needs 3 ranks
    assert cli.main(["report", "--compliance", "-o", str(tmp_path)]) == 2  # a directory
    typed = tmp_path / "t.json"
    typed.write_text(
        json.dumps(
            {
                "rows": [
                    {
                        "collective": "allreduce",
                        "size_bytes": 8,
                        "variant": "x",
                        "time_us": 5,
                        "busbw_gbps": 1.0,
                        "overhead_x": 1.0,
                        "wrong": 0,
                    }
                ]
            }
        )
    )
    assert cli.main(["report", "--compliance", "--bench", str(typed)]) == 2  # time_us is not an object
    assert cli.main(["attack", "--np", "2", "--classes", "redirect"]) == 2
    assert cli.main(["attack", "--seed", "-1"]) == 2


@pytest.mark.mpi
def test_report_end_to_end_html_with_bench(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in launch.LAUNCHER_VARS}
    bench = tmp_path / "bench.json"
    out = run_cmd(
        [
            sys.executable,
            "-m",
            "seccomm",
            "bench",
            "--np",
            "2",
            "-b",
            "4K",
            "-e",
            "64K",
            "-f",
            "16",
            "-n",
            "3",
            "-w",
            "1",
            "--suites",
            "aes-256-gcm",
            "--json",
            str(bench),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    report = tmp_path / "report.html"
    out = run_cmd(
        [
            sys.executable,
            "-m",
            "seccomm",
            "report",
            "--compliance",
            "--format",
            "html",
            "--trials",
            "2",
            "--np",
            "3",
            "--bench",
            str(bench),
            "-o",
            str(report),
            "--pcap",
            str(tmp_path / "pcap"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = report.read_text()
    tree = strict_parse(text)
    rows = [[td.text for td in tr.iter("td")] for tr in tree.iter("tr")]
    attack = {
        r[0]: r
        for r in rows
        if r
        and r[0]
        in ("flip-payload", "flip-tag", "replay", "swap", "truncate", "inject", "redirect", "drop")
        + ("reflect-record", "replay-record")
    }
    assert len(attack) == 10 and all(
        r[1] == r[2] == "2" and r[3] == "0" and r[4] == "PASS" for r in attack.values()
    )
    wire = {
        r[0]: r
        for r in rows
        if r and len(r) == 7 and r[0] in ("aes-256-gcm", "chacha20-poly1305", "aes-256-gmac", "none")
    }
    assert wire["aes-256-gcm"][3] == "0" and wire["chacha20-poly1305"][3] == "0"
    assert int(wire["none"][3].replace(",", "")) > 0 and int(wire["aes-256-gmac"][3].replace(",", "")) > 0
    from cryptography.hazmat.backends.openssl import backend

    assert backend.openssl_version_text() in text
    assert re.search(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", text)  # UTC timestamp
    overhead = [r for r in rows if r and r[0] == "allreduce" and len(r) == 8]
    assert len(overhead) == 2 and all(r[2] == "aes-256-gcm" and float(r[6]) > 0 for r in overhead)
    capture = next(r for r in rows if r and r[0] == "wire evidence, packet capture (live)")
    assert capture[1] in ("PASS", "not run"), capture  # it runs where a packet socket may be opened
    if capture[1] == "PASS":
        assert (tmp_path / "pcap" / "none.pcap").stat().st_size > 24


def _report(tmp_path, *args):
    """``seccomm report --compliance --no-capture -o report.md ARGS`` on 3 local ranks; (process,
    the Markdown written)."""
    env = {k: v for k, v in os.environ.items() if k not in launch.LAUNCHER_VARS}
    out = tmp_path / "report.md"
    cmd = [sys.executable, "-m", "seccomm", "report", "--compliance", "--no-capture", "-o", str(out), *args]
    proc = run_cmd(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    return proc, out.read_text() if out.exists() else ""


def _table_rows(md: str) -> list[list[str]]:
    return [[c.strip() for c in ln.strip("|").split(" | ")] for ln in md.splitlines() if ln.startswith("| ")]


@pytest.mark.mpi
def test_report_evidence_follows_the_configuration_on_real_ranks(tmp_path):
    """--chunk-bytes 4096 --key-exchange psk-dhe --rotate-after-frames 500: every evidence row
    ran with exactly that, and the rotation check ran at the configured point."""
    proc, md = _report(
        tmp_path,
        "--trials",
        "1",
        "--chunk-bytes",
        "4096",
        "--key-exchange",
        "psk-dhe",
        "--rotate-after-frames",
        "500",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    want = "aes-256-gcm, key exchange psk-dhe, chunk_bytes 4,096 B, rotation point 500 frames per key"
    want += ", encrypt all, identity psk"
    assert f"| configuration under review | {want} |" in md
    rows = _table_rows(md)
    attacks = [r for r in rows if r[0] in ("flip-payload", "swap", "replay", "redirect", "drop")]
    wire = [
        r
        for r in rows
        if len(r) == 7 and r[0] in ("none", "aes-256-gcm", "chacha20-poly1305", "aes-256-gmac")
    ]
    assert len(attacks) == 5 and len(wire) == 4
    assert all(r[5] == "as configured" for r in attacks) and all(r[6] == "as configured" for r in wire)
    assert (
        "| every evidence run used the configuration under review | PASS | every SecureComm of the evidence: "
        + want
        in md
    )
    assert "| ran at | 500 frames per key |" in md and "| epochs as the schedule predicts | yes |" in md
    assert "| cross-epoch replay refused | yes |" in md and "| keys differ between epochs | yes |" in md


@pytest.mark.mpi
def test_report_with_a_rotation_point_above_the_limit_fails(tmp_path):
    proc, md = _report(
        tmp_path, "--trials", "1", "--suite", "aes-256-gcm", "--rotate-after-frames", str(2**40)
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (
        "| overall | FAIL: key rotation within the usage limit, run on real ranks |" in md
    )  # the only failure
    assert "| key rotation within the usage limit, run on real ranks | FAIL |" in md
    assert "is above aes-256-gcm's usage limit of 11,862,016 frames per key" in md
    assert "| result | FAIL |" in md and "| attacker harness (live) | PASS |" in md
    # the other evidence ran at the suite's limit, and says so in every row
    lowered = "rotation point lowered to aes-256-gcm's usage limit, 11,862,016 frames per key"
    assert md.count(lowered) >= 9
    assert "| every evidence run used the configuration under review | PASS |" in md


def test_html_renders_in_a_headless_browser(tmp_path):
    """Where Chromium is installed (Debian package 'chromium'), render the report and check the
    screenshot shows content; elsewhere the strict parse above is the check."""
    page = tmp_path / "r.html"
    page.write_text(to_html(build(evidence(), CFG, None, None)[0]))
    size, drawn = screenshot(page, tmp_path, "r")
    assert size == (1280, 1600) and drawn > 100_000, (size, drawn)
    assert blank_page_draws_little(tmp_path)  # the check can fail


def test_statements_about_binding_drops_nonces_and_covered_paths_match_the_code():
    """What the report says about which frames bind a receiver, how a drop surfaces, where
    nonces are written and which paths the attacker harness attacks, each held against the code:
    group frames carry no receiver in their AAD (ANY_RANK), the compiled swap writes its own
    nonces (its source does), and a transport wrapper (the harness) never gets the compiled
    swap's link."""
    from seccomm.compliance.status import nonce_location
    from seccomm.framing import ANY_RANK
    from seccomm.transports import TransportWrapper

    md = " ".join(to_markdown(build(evidence(), CFG, None, None)[0]).split())
    assert "binding of each frame to its sender, receiver" not in md
    assert "group-key frame to its origin, operation, job and communicator (no receiver" in md
    assert "a group-key frame (allgather, bcast, the allgather phase of allreduce) names its origin" in md
    assert ANY_RANK != 0  # group frames' AAD destination: no rank
    assert "Drops surface as TransportTimeout naming the rank to blame" not in md
    assert "lands in the dropped frame's place and fails its tag" in md
    src = (Path(__file__).resolve().parents[2] / "seccomm" / "pairswap" / "_pairswap.c").read_text()
    assert "nonce" in src and "_pairswap.c" in nonce_location()
    assert "the compiled two-rank swap (a repeated call's plan) is not attacked here" in md
    inner = type("Inner", (), {"rank": 0, "size": 2, "pair_link": lambda self, peer: "link"})()
    assert TransportWrapper(inner).pair_link(1) is None


def _section(md: str, title: str) -> str:
    return md.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]


def test_the_trust_model_says_who_holds_which_key():
    """psk: a rank is whoever holds the job secret, the insider classes not protected (and not
    counted against the attacks verdict); x509: every rank's certificate, the keys a pair holds
    alone, the insider classes' results, and a job secret said as it is (none, or mixed in)."""
    from seccomm.compliance.insider import INSIDER_CLASSES, NOT_PROTECTED

    ev = evidence()
    ev["attacks"] += [
        {**ev["attacks"][0], "class": c, "trials": 0, "detected": 0, "expected": NOT_PROTECTED}
        for c in INSIDER_CLASSES
    ]
    ev["trust"] = {"identity": "psk", "secret_source": "argument", "ranks": []}
    doc, ok = build(ev, CFG, None, None)
    md = to_markdown(doc)
    trust = _section(md, "Trust model")
    assert ok and "Identity psk: a rank is whoever holds the job secret" in trust
    assert "| insider-forge-origin | 0 | 0 | 0 | not protected: shared secret |" in trust
    assert "seccomm report --identity x509 runs them" in trust
    shown = [
        dict(r, trials=50, silently_accepted=50) if r.get("expected") == NOT_PROTECTED else r
        for r in ev["attacks"]
    ]
    assert review({**ev, "attacks": shown}, CFG, None, None).verdicts["attacks"] is True  # (not counted)
    x509 = {**CFG, "identity": "x509"}
    ev = evidence(cfg=x509)
    ev["attacks"] += [{**ev["attacks"][0], "class": c, "expected": "detected"} for c in INSIDER_CLASSES]
    who = {"host": "node-a.example", "subject": "CN=node-a.example", "issuer": "CN=test CA",
           "fingerprint": "ab" * 32, "not_before": "2026-12-06T00:00:00+00:00",
           "not_after": "2026-12-07T00:00:00+00:00"}  # fmt: skip
    ranks = [{"rank": r, **who} for r in range(3)]
    for source, said in (
        (
            "none (identity x509, no PSK mixed in)",
            "Job secret: none set: the keys come from the signed X25519 exchange alone.",
        ),
        ("argument", "Job secret: the one the report's ranks were given, mixed into every key."),
    ):
        ev["trust"] = {"identity": "x509", "secret_source": source, "ranks": ranks}
        trust = _section(to_markdown(build(ev, x509, None, None)[0]), "Trust model")
        assert "Identity x509: each rank is known by its X.509 certificate" in trust and said in trust
        row = f"| 2 | node-a.example | CN=node-a.example | CN=test CA | {'ab' * 32} | 2026-12-06T00:00:00"
        assert row in trust
        assert "| insider-inject | 5 | 5 | 0 | detected |" in trust
        assert "the two ranks of the pair: from their ephemeral X25519 shares" in trust
        assert ("| job secret | none set |" in trust) == source.startswith("none")
