"""Render a page in headless Chromium (Debian package 'chromium') and measure the screenshot:
shared by the compliance report's test (tests/cli/test_report.py) and the scaling report's
(tests/cli/test_scaling_report.py)."""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest


def chromium() -> str:
    """The Chromium binary; the test skips where there is none."""
    found = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if found is None:
        pytest.skip("no headless Chromium on this machine")
    return found


def png_size_and_drawn_bytes(png: bytes):
    """(width, height) and the compressed image-data size of a PNG: a blank page compresses to
    a few KiB, a page of tables and text to hundreds."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, 0
    while pos < len(png):
        n, kind = struct.unpack(">I4s", png[pos : pos + 8])
        idat += n if kind == b"IDAT" else 0
        pos += 12 + n
    return struct.unpack(">II", png[16:24]), idat


def screenshot(page: Path, folder: Path, name: str, size=(1280, 1600)):
    """Render ``page`` offline (no network services, a fresh profile under ``folder``) into
    ``folder/name.png``; its :func:`png_size_and_drawn_bytes`."""
    shot = folder / f"{name}.png"
    subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={folder / (name + '-profile')}",
            f"--window-size={size[0]},{size[1]}",
            f"--screenshot={shot}",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
    )
    return png_size_and_drawn_bytes(shot.read_bytes())


def blank_page_draws_little(folder: Path) -> bool:
    """An empty page's screenshot is small: the check on a real page can fail."""
    blank = folder / "blank.html"
    blank.write_text("<!DOCTYPE html><html><head><title>x</title></head><body></body></html>")
    return screenshot(blank, folder, "blank")[1] < 20_000
