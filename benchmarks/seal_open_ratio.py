"""Framing seal/open vs raw `cryptography` encrypt_into/decrypt_into, interleaved call by call so
drift hits both alike; prints the median ratio per suite and chunk size (>= 0.95 is the target).

    python benchmarks/seal_open_ratio.py [--sizes 64K,1M,4M] [--rounds 400]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from seccomm.framing import AAD_BYTES, KEY_DIRECTION, FrameContext, Workspace
from seccomm.suites import get_suite
from seccomm.units import parse_size


def pair(suite_name: str, nbytes: int):
    """(raw_seal, framing_seal, raw_open, framing_open) callables on the same bytes."""
    suite = get_suite(suite_name)
    key = os.urandom(32)
    keyed, aead = suite.keyed(key), suite.aead_class(key)
    (slot,) = Workspace().slots("w", [nbytes])
    pt = np.random.default_rng(1).integers(0, 256, nbytes, dtype=np.uint8)
    ctx = FrameContext(suite.suite_id, 1, 3, b"j" * 16, b"c" * 16, 0, 1, 0, nbytes // 4, "sum")
    fill = lambda: ctx.fill(slot, KEY_DIRECTION, suite.suite_id, 0, 0, 1, 0, 1, nbytes // 4)  # noqa: E731
    out, frame_out = np.empty(nbytes, np.uint8), np.empty(nbytes + 16, np.uint8)
    nonce, aad = bytes(12), bytes(AAD_BYTES)
    if suite_name == "aes-256-gmac":  # raw GMAC needs header || payload contiguous: the copy is part of it
        buf = np.empty(AAD_BYTES + nbytes, np.uint8)

        def raw_seal():
            buf[AAD_BYTES:] = pt
            aead.encrypt_into(nonce, b"", buf, frame_out[:16])

        fill()
        keyed.seal(slot, pt)
        tag, hb = bytes(slot.tag), bytes(slot.header_body)
        raw_open = lambda: aead.decrypt_into(nonce, tag, hb, bytearray(0))  # noqa: E731
    else:
        raw_seal = lambda: aead.encrypt_into(nonce, pt, aad, frame_out)  # noqa: E731
        fill()
        keyed.seal(slot, pt)
        fr, hd = bytes(slot.frame), bytes(slot.header)
        raw_open = lambda: aead.decrypt_into(nonce, fr, hd, out)  # noqa: E731

    def frm_seal():
        fill()
        keyed.seal(slot, pt)

    def frm_open():
        fill()
        keyed.open(slot, out)

    return raw_seal, frm_seal, raw_open, frm_open


def ratio(a, b, rounds: int) -> tuple[float, float, float]:
    """(median seconds of a, of b, median of per-round a/b) with a and b alternating."""
    ta, tb = [], []
    for i in range(rounds):
        for fn, acc in ((a, ta), (b, tb)) if i % 2 == 0 else ((b, tb), (a, ta)):
            t0 = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - t0)
    ta, tb = np.array(ta), np.array(tb)
    return float(np.median(ta)), float(np.median(tb)), float(np.median(ta / tb))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="64K,1M,4M")
    ap.add_argument("--rounds", type=int, default=400)
    a = ap.parse_args()
    print(
        f"# {'suite':>18} {'chunk [B]':>10} {'op':>5} {'raw [GB/s]':>11} {'framing [GB/s]':>15} "
        f"{'framing/raw throughput':>23}"
    )
    for suite in ("aes-256-gcm", "chacha20-poly1305", "aes-256-gmac"):
        for n in (parse_size(s) for s in a.sizes.split(",")):
            rs, fs, ro, fo = pair(suite, n)
            for op, raw, frm in (("seal", rs, fs), ("open", ro, fo)):
                t_raw, t_frm, r = ratio(raw, frm, a.rounds)
                print(
                    f"  {suite:>18} {n:>10} {op:>5} {n / t_raw / 1e9:11.2f} {n / t_frm / 1e9:15.2f} {r:23.3f}"
                )


if __name__ == "__main__":
    main()
