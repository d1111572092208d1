"""Single-process: the framing layer's seal/open per suite and chunk size against raw
``cryptography`` ``encrypt_into``/``decrypt_into`` on the same bytes, in one benchmark group, so
``--benchmark-group-by=group`` shows the framing's cost as a ratio.

    python -m pytest benchmarks/test_seal_open.py --seccomm-sizes=64K,1M,4M

The suites are those of ``--seccomm-suites`` that have a raw baseline (``none`` has none and is
left out; with only ``none`` every benchmark is skipped: an empty parameter set).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from seccomm.framing import AAD_BYTES, KEY_DIRECTION, FrameContext, Workspace
from seccomm.suites import get_suite


def _setup(suite_name, nbytes):
    suite = get_suite(suite_name)
    key = os.urandom(32)
    keyed, aead = suite.keyed(key), suite.aead_class(key)
    ws = Workspace()
    (slot,) = ws.slots("w", [nbytes])
    pt = np.random.default_rng(1).integers(0, 256, nbytes, dtype=np.uint8)
    ctx = FrameContext(suite.suite_id, 1, 3, b"j" * 16, b"c" * 16, 0, 1, 0, nbytes // 4)
    return suite, keyed, aead, slot, pt, ctx


@pytest.mark.parametrize("path", ["raw", "framing"])
def test_seal(benchmark, crypto_suite, path, nbytes):
    suite_name = crypto_suite
    suite, keyed, aead, slot, pt, ctx = _setup(suite_name, nbytes)
    benchmark.group = f"seal {suite_name} {nbytes} B"
    out = np.empty(nbytes + 16, np.uint8)
    nonce, aad = bytes(12), bytes(AAD_BYTES)
    if path == "raw":
        if suite_name == "aes-256-gmac":
            aad_pt = bytes(AAD_BYTES) + pt.tobytes()
            fn = lambda: aead.encrypt_into(nonce, b"", aad_pt, out[:16])  # noqa: E731
        else:
            fn = lambda: aead.encrypt_into(nonce, pt, aad, out)  # noqa: E731
    else:

        def fn():
            ctx.fill(slot, KEY_DIRECTION, suite.suite_id, 0, 0, 1, 0, 1, nbytes // 4)
            keyed.seal(slot, pt)

    benchmark(fn)
    benchmark.extra_info.update({"suite": suite_name, "bytes": nbytes, "path": path})


@pytest.mark.parametrize("path", ["raw", "framing"])
def test_open(benchmark, crypto_suite, path, nbytes):
    suite_name = crypto_suite
    suite, keyed, aead, slot, pt, ctx = _setup(suite_name, nbytes)
    ctx.fill(slot, KEY_DIRECTION, suite.suite_id, 0, 0, 1, 0, 1, nbytes // 4)
    keyed.seal(slot, pt)
    benchmark.group = f"open {suite_name} {nbytes} B"
    out = np.empty(nbytes, np.uint8)
    nonce, header, frame = bytes(slot.nonce), bytes(slot.header), bytes(slot.frame)
    if path == "raw":
        if suite_name == "aes-256-gmac":
            aad_pt, tag = bytes(slot.header_body), bytes(slot.tag)
            fn = lambda: aead.decrypt_into(nonce, tag, aad_pt, bytearray(0))  # noqa: E731
        else:
            fn = lambda: aead.decrypt_into(nonce, frame, header, out)  # noqa: E731
    else:

        def fn():
            ctx.fill(slot, KEY_DIRECTION, suite.suite_id, 0, 0, 1, 0, 1, nbytes // 4)
            keyed.open(slot, out)

    benchmark(fn)
    benchmark.extra_info.update({"suite": suite_name, "bytes": nbytes, "path": path})
