"""Device check for one GPU: build the kernels, check them against the CPU suites, time them.

    python benchmarks/gpu_check.py [--sizes 1M,16M,256M,1G] [--repeats 5] [--out DIR]

Prints one table (and writes gpu_check.json to --out or $OUT): per suite and size, seal and open
throughput [GB/s] (CUDA events, warm-up, median of repeats, random data, output poisoned before
every run), correctness against `cryptography` on the CPU (every chunk up to 256 MiB, a sample of
64 chunks above), the fused ring hop's throughput, and the device-to-device copy bandwidth measured
in the same run with the ratio to it; "correct" covers seal, open and the hop (sum and frame; the
random data holds NaNs, so the hop's NaN rules are checked too).  Chunks are 1 MiB, as the CPU
default.  Designed to finish in under 4 minutes on one H200.  Targets: ChaCha20-Poly1305 >= 1 TB/s,
AES-256-GCM >= 0.4 TB/s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

CHUNK = 1 << 20
AAD = 89


def parse_size(s: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * units[s[-1].upper()] if s[-1].upper() in units else int(s)


def timed(cp, fn, repeats: int, poison=None) -> float:
    """Median seconds of fn() over repeats, CUDA events, after one warm-up."""
    fn()
    cp.cuda.Device().synchronize()
    ts = []
    for _ in range(repeats):
        if poison is not None:
            poison.fill(0xA5)
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        ts.append(cp.cuda.get_elapsed_time(start, stop) / 1e3)
    return float(np.median(ts))


def main() -> int:
    ap = argparse.ArgumentParser(description="seccomm GPU kernel check")
    ap.add_argument("--sizes", default="1M,16M,256M,1G")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    a = ap.parse_args()
    from seccomm.gpu import GPUAEAD, Batch, Hop, available

    if not available():
        print(
            "gpu_check: no CUDA device found by CuPy (pip install -e '.[gpu]' on a GPU machine)",
            file=sys.stderr,
        )
        return 2
    import cupy as cp
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

    t0 = time.time()
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    big = parse_size(a.sizes.split(",")[-1])
    src, dst = cp.empty(big, cp.uint8), cp.empty(big, cp.uint8)
    t_copy = timed(cp, lambda: cp.copyto(dst, src), a.repeats)
    copy_gbps = 2 * big / t_copy / 1e9  # read + write
    src = dst = None  # free the copy buffers before the AEAD runs
    cpu = {"chacha20-poly1305": ChaCha20Poly1305, "aes-256-gcm": AESGCM, "aes-256-gmac": AESGCM}
    rows, rng = [], np.random.default_rng(0)
    print(f"# {name}, d2d copy {copy_gbps:.0f} GB/s (read+write), chunk {CHUNK} B, {a.repeats} repeats")
    print(
        f"# {'suite':>18} {'size [B]':>12} {'seal [GB/s]':>12} {'open [GB/s]':>12} {'hop [GB/s]':>11} "
        f"{'seal/copy':>10} {'correct':>8}"
    )
    for suite in cpu:
        g = GPUAEAD(suite)
        for size in (parse_size(s) for s in a.sizes.split(",")):
            n = max(1, size // CHUNK)
            lens = np.full(n, min(CHUNK, size), np.int64)
            offs = np.arange(n, dtype=np.int64) * lens[0]
            fr_offs = np.arange(n, dtype=np.int64) * (lens[0] + 16)
            keys = cp.asarray(rng.integers(0, 256, (n, 32), dtype=np.uint8))
            nonces = cp.asarray(rng.integers(0, 256, (n, 12), dtype=np.uint8))
            aads = cp.asarray(rng.integers(0, 256, (n, AAD), dtype=np.uint8))
            src = cp.asarray(rng.integers(0, 256, int(lens.sum()), dtype=np.uint8))
            frames = cp.empty(int(lens.sum()) + 16 * n, cp.uint8)
            out = cp.empty_like(src)
            dl, do, df = cp.asarray(lens), cp.asarray(offs), cp.asarray(fr_offs)
            ml = int(lens.max())  # known on the host: no sync inside the timed calls
            t_seal = timed(
                cp,
                lambda: g.seal(Batch(keys, nonces, aads, src, do, dl, frames, df, max_len=ml)),
                a.repeats,
                frames,
            )
            g.seal(Batch(keys, nonces, aads, src, do, dl, frames, df, max_len=ml))
            t_open = timed(
                cp,
                lambda: g.open(Batch(keys, nonces, aads, frames, df, dl, out, do, max_len=ml)),
                a.repeats,
                out,
            )
            ok = cp.asnumpy(g.open(Batch(keys, nonces, aads, frames, df, dl, out, do, max_len=ml)))
            fh, kh, nh, ah, sh = (cp.asnumpy(v) for v in (frames, keys, nonces, aads, src))
            check = range(n) if size <= (256 << 20) else rng.choice(n, min(n, 64), replace=False)
            correct = bool(ok.all()) and bool((cp.asnumpy(out) == sh).all())
            for j in check:
                pt = sh[offs[j] : offs[j] + lens[j]].tobytes()
                fr = fh[fr_offs[j] : fr_offs[j] + lens[j] + 16].tobytes()
                if suite == "aes-256-gmac":
                    want = pt + cpu[suite](kh[j].tobytes()).encrypt(
                        nh[j].tobytes(), b"", ah[j].tobytes() + pt
                    )
                else:
                    want = cpu[suite](kh[j].tobytes()).encrypt(nh[j].tobytes(), pt, ah[j].tobytes())
                correct = correct and fr == want
            t_hop = float("nan")
            if suite != "aes-256-gmac":
                frames2, acc = cp.empty_like(frames), cp.empty_like(src)
                t_hop = timed(
                    cp,
                    lambda: g.fused_hop(
                        Hop(
                            keys,
                            nonces,
                            aads,
                            frames,
                            df,
                            src,
                            do,
                            keys,
                            nonces,
                            aads,
                            frames2,
                            df,
                            dl,
                            "float32",
                            acc,
                            max_len=ml,
                        ),
                    ),
                    a.repeats,
                    frames2,
                )
                # the hop opened src's frames and added src: sum = src + src (float32), sealed again
                f2, acch = cp.asnumpy(frames2), cp.asnumpy(acc)
                for j in check:
                    x = sh[offs[j] : offs[j] + lens[j]].view(np.float32)
                    with np.errstate(all="ignore"):
                        want_sum = (x + x).tobytes()
                    want = cpu[suite](kh[j].tobytes()).encrypt(nh[j].tobytes(), want_sum, ah[j].tobytes())
                    correct = (
                        correct
                        and acch[offs[j] : offs[j] + lens[j]].tobytes() == want_sum
                        and f2[fr_offs[j] : fr_offs[j] + lens[j] + 16].tobytes() == want
                    )
            nbytes = int(lens.sum())
            row = {
                "suite": suite,
                "size_bytes": nbytes,
                "seal_gbps": nbytes / t_seal / 1e9,
                "open_gbps": nbytes / t_open / 1e9,
                "hop_gbps": nbytes / t_hop / 1e9,
                "copy_gbps": copy_gbps,
                "correct": correct,
            }
            rows.append(row)
            print(
                f"  {suite:>18} {nbytes:>12} {row['seal_gbps']:12.1f} {row['open_gbps']:12.1f} "
                f"{row['hop_gbps']:11.1f} {row['seal_gbps'] / copy_gbps:10.3f} {str(correct):>8}",
                flush=True,
            )
    doc = {
        "device": name,
        "copy_gbps": copy_gbps,
        "chunk_bytes": CHUNK,
        "repeats": a.repeats,
        "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seconds": time.time() - t0,
        "rows": rows,
    }
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "gpu_check.json"), "w") as f:
        json.dump(doc, f, indent=1)
    bad = [r for r in rows if not r["correct"]]
    print(f"# {'OK' if not bad else f'FAILED ({len(bad)} rows wrong)'} in {time.time() - t0:.0f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
