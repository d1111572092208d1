"""What group-frame authenticity (origin proofs, identity x509) adds to one rank's work in an
allgather of ``n`` bytes on ``p`` ranks, measured on one core so that no rank waits on another
(on this 2-core machine 3 or 4 ranks share the cores, and their wall times mean little).

Per rank (block ``b = n / p``, ``f`` frames of at most 1 MiB per block; the counts of
``seccomm/engine/origin.py``):

- the op's AEAD work, under psk as under x509: seal its own block and open ``p - 1`` blocks,
  ``n`` bytes of AES-256-GCM in frames;
- what x509 adds: as an origin, ``p - 1`` AES-GMACs over its block and ``p - 1`` GMACs over its
  ``16 f`` bytes of frame MACs; as a receiver, one GMAC over each of the ``p - 1`` blocks it
  opens and one over each origin's MACs; on the wire, ``p - 1`` messages of ``16 (f + 1)`` bytes
  sent and as many received.

The two are timed alternately, each the median of ``--runs`` repeats, with ``cryptography``'s
AESGCM (the primitive seccomm's CPU engine calls).  The ring allreduce's allgather phase does the
same work for its ``n / p`` chunks, so its added work is that of an allgather of ``n``.

    python benchmarks/origin_cost.py [--runs 5]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

CHUNK = 1 << 20  #: the default frame payload (DEFAULT_CHUNK_BYTES)
SIZES = [4096 * 4**i for i in range(7)]  # 4 KiB ... 16 MiB


def frames(nbytes: int) -> list[int]:
    """The payload sizes of one block's frames."""
    full, rest = divmod(nbytes, CHUNK)
    return [CHUNK] * full + ([rest] if rest or not full else [])


def aead_work(aead, p: int, block: memoryview, sealed: list, out: bytearray) -> None:
    """Seal this rank's block, open p - 1 blocks, frame by frame, into buffers made once (as
    seccomm's engine does: ``encrypt_into``/``decrypt_into``)."""
    nonce, aad = bytes(12), b"h" * 89
    for i, s in enumerate(sealed):
        aead.encrypt_into(nonce, block[i * CHUNK : i * CHUNK + len(s) - 16], aad, s)
    for _ in range(p - 1):
        for s in sealed:
            aead.decrypt_into(nonce, s, aad, memoryview(out)[: len(s) - 16])


def origin_work(gmac, p: int, block: bytes) -> None:
    """As an origin: p - 1 GMACs per frame and one over each receiver's MACs; as a receiver:
    one GMAC per frame of each of p - 1 blocks and one over each origin's MACs."""
    sizes = frames(len(block))
    nonce = bytes(12)
    for _ in range(2 * (p - 1)):  # (sending p - 1 receivers, receiving from p - 1 origins)
        pieces = (block[i * CHUNK : i * CHUNK + s] for i, s in enumerate(sizes))
        tags = b"".join(gmac.encrypt(nonce, b"", piece) for piece in pieces)
        gmac.encrypt(nonce, b"", tags)


def _cpu() -> str:
    """The CPU model from /proc/cpuinfo (Linux), else the platform's machine name."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def median_us(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    aead, gmac = AESGCM(os.urandom(32)), AESGCM(os.urandom(32))
    print(f"# {_cpu()}, one core; median of {a.runs} runs per cell")
    print(f"{'ranks':>5} {'size [B]':>12} {'AEAD [us]':>11} {'proofs [us]':>12} {'added':>7} {'wire [B]':>9}")
    for p in (3, 4):
        for n in SIZES:
            block = memoryview(os.urandom(max(n // p, 1)))
            sealed = [bytearray(f + 16) for f in frames(len(block))]
            out = bytearray(CHUNK)
            aead_work(aead, p, block, sealed, out)
            origin_work(gmac, p, block)
            base, extra = [], []
            for _ in range(3):  # (alternating: the same machine load for both)
                base.append(median_us(lambda: aead_work(aead, p, block, sealed, out), a.runs))
                extra.append(median_us(lambda: origin_work(gmac, p, block), a.runs))
            b, e = statistics.median(base), statistics.median(extra)
            wire = 2 * (p - 1) * 16 * (len(frames(len(block))) + 1)
            print(f"{p:>5} {n:>12,} {b:>11.1f} {e:>12.1f} {e / b:>6.0%} {wire:>9,}")


if __name__ == "__main__":
    main()
