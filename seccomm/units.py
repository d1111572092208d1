"""Byte sizes as people type them: ``8``, ``64K``, ``64M``, ``1G`` (binary units, as nccl-tests
reads them).  A leaf module: the bench, the cost model's command, the pytest plugin and the
benchmarks all parse sizes with it."""

from __future__ import annotations

import re

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """Bytes from ``8``, ``64K``, ``64M``, ``1G`` (also ``64MiB``/``64MB``; K = 2**10 bytes).

    Raises ``ValueError`` with a one-line message naming the text otherwise (a fraction, a sign,
    a ``T`` suffix, an empty string)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"bad size {text!r}: use bytes with an optional K, M or G suffix (e.g. 64M)")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]
