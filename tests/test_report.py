"""``seccomm report --compliance``: the rendering (strict HTML parse, Markdown), the verdicts, and
an end-to-end run on real ranks with a real bench result."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import html5lib
import pytest

from seccomm import launch
from seccomm.compliance.doc import to_html, to_markdown
from seccomm.compliance.report import build

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
    "trials": 5,
    "seed": 0,
    "command": "seccomm report --compliance",
}


def evidence(silent=0, wire_hits_gcm=0):
    attacks = [
        {
            "class": c,
            "trials": 5,
            "detected": 5,
            "silently_accepted": 0,
            "example": "AuthenticationError: <x>",
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
        }
        for s, h, e in (("aes-256-gcm", wire_hits_gcm, "absent"), ("none", 400, "present"))
    ]
    return {
        "attacks": attacks,
        "wire": wire,
        "world_size": 3,
        "machine": MACHINE,
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
    assert not ok and "FAIL: see the summary" in to_markdown(doc)
    _, ok = build(evidence(wire_hits_gcm=3), CFG, None, None)
    assert not ok  # plaintext found under an encrypting suite
    for cfg in (
        dict(CFG, suite="none"),
        dict(CFG, suite="aes-256-gmac"),
        dict(CFG, rotate_after_frames=2**40),
    ):  # no encryption; rotation past the limit
        doc, ok = build(evidence(), cfg, None, None)
        assert not ok and "FAIL" in to_markdown(doc), cfg
    assert build(evidence(), dict(CFG, suite="chacha20-poly1305"), None, None)[1]


def test_html_is_one_strict_self_contained_file_and_escapes_text():
    ev = evidence()
    ev["attacks"][0]["example"] = "<script>alert(1)</script> & </td>"
    text = to_html(build(ev, CFG, None, None)[0])
    tree = strict_parse(text)
    assert tree.find(".//title").text == "seccomm compliance report"
    assert "<script" not in text and "&lt;script&gt;" in text
    assert not re.search(r"<(link|img|iframe|object)\b|\bsrc=|href=", text)  # nothing external
    cells = [td.text for td in tree.iter("td")]
    assert "PASS" in cells and "approved (NIST SP 800-38D; FIPS 140-3 IG C.H deterministic IV)" in cells
    with pytest.raises(Exception):
        strict_parse(text.replace("</table>", "", 1))  # the parser does catch broken markup


def test_markdown_sections_and_rotation_point():
    cfg = dict(CFG, rotate_after_frames=1000, chunk_bytes=65536)
    md = to_markdown(build(evidence(), cfg, None, None)[0])
    for section in (
        "## Summary",
        "## Cipher suites and FIPS 140-3 status",
        "## Key derivation",
        "## Nonce construction",
        "## Usage limits per key and rotation",
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
    out = subprocess.run(
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
    out = subprocess.run(
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
        and r[0] in ("flip-payload", "flip-tag", "replay", "swap", "truncate", "inject", "redirect", "drop")
    }
    assert len(attack) == 8 and all(
        r[1] == r[2] == "2" and r[3] == "0" and r[4] == "PASS" for r in attack.values()
    )
    wire = {
        r[0]: r
        for r in rows
        if r and len(r) == 6 and r[0] in ("aes-256-gcm", "chacha20-poly1305", "aes-256-gmac", "none")
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


def _png_size_and_drawn_bytes(png: bytes):
    """(width, height) and the compressed image-data size of a PNG: a blank page compresses to
    a few KiB, a page of tables and text to hundreds."""
    import struct

    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, 0
    while pos < len(png):
        n, kind = struct.unpack(">I4s", png[pos : pos + 8])
        idat += n if kind == b"IDAT" else 0
        pos += 12 + n
    return struct.unpack(">II", png[16:24]), idat


def test_html_renders_in_a_headless_browser(tmp_path):
    """Where Chromium is installed (Debian package 'chromium'), render the report and check the
    screenshot shows content; elsewhere the strict parse above is the check."""
    import shutil

    chromium = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chromium is None:
        pytest.skip("no headless Chromium on this machine")
    page = tmp_path / "r.html"
    page.write_text(to_html(build(evidence(), CFG, None, None)[0]))
    shot = tmp_path / "r.png"
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--window-size=1280,1600",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
    )
    size, drawn = _png_size_and_drawn_bytes(shot.read_bytes())
    assert size == (1280, 1600) and drawn > 100_000, (size, drawn)
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><html><head><title>x</title></head><body></body></html>")
    subprocess.run(
        [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={tmp_path / 'p2'}",
            "--window-size=1280,1600",
            f"--screenshot={tmp_path / 'b.png'}",
            blank.as_uri(),
        ],
        capture_output=True,
        timeout=120,
    )
    assert _png_size_and_drawn_bytes((tmp_path / "b.png").read_bytes())[1] < 20_000  # the check can fail
