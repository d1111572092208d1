"""Rank 0's output: the nccl-tests-style table, its footer, and the JSON / CSV / plot files."""

from __future__ import annotations

import csv
import json
import os
import sys
from dataclasses import asdict

from ..launch import node_cores, oversubscription
from .machine import machine_info

_COLS = (
    "size [B]",
    "count",
    "type",
    "redop",
    "variant",
    "time [us]",
    "algbw [GB/s]",
    "busbw [GB/s]",
    "overhead [x]",
    "bound add [us]",
    "bound ovl [us]",
    "vs bound [x]",
    "#wrong",
)
_FMT = "{:>12} {:>12} {:>9} {:>6} {:>18} {:>11} {:>12} {:>12} {:>12} {:>14} {:>14} {:>12} {:>7}"
CSV_FIELDS = (
    "collective",
    "size_bytes",
    "count",
    "dtype",
    "redop",
    "root",
    "variant",
    "ranks",
    "time_us_min",
    "time_us_median",
    "time_us_max",
    "algbw_gbps",
    "busbw_gbps",
    "overhead_x",
    "bound_us_additive",
    "bound_us_overlapped",
    "vs_bound_x",
    "wrong",
    "algorithm",
)


def summary_line(rows: list[dict], coll: str, variant: str) -> str | None:
    """nccl-tests' closing ``# Avg bus bandwidth`` line for one variant of ``coll`` in ``rows``
    (the mean busbw over its sizes, GB/s), with its overhead at the largest size against native
    MPI and, for a cipher, against ``none`` at that size: native MPI may be slower than
    seccomm's own plaintext path there, and a ratio below 1x against native alone would read as
    encryption making the op faster.  None without rows of that variant."""
    rs = [r for r in rows if r["collective"] == coll and r["variant"] == variant]
    if not rs:
        return None
    avg = sum(r["busbw_gbps"] for r in rs) / len(rs)
    big = max(rs, key=lambda r: r["size_bytes"])
    plain = [
        r["time_us"]["median"]
        for r in rows
        if r["collective"] == coll and r["variant"] == "none" and r["size_bytes"] == big["size_bytes"]
    ]
    vs_none = ""
    if variant not in ("native", "none") and plain and plain[0] > 0:
        vs_none = f", {big['time_us']['median'] / plain[0]:.2f}x vs none"
    return (
        f"# Avg bus bandwidth {coll:>14} {variant:>18} : {avg:8.3f} GB/s   "
        f"overhead at {big['size_bytes']} B: {big['overhead_x']:.2f}x vs native{vs_none}"
    )


class Report:
    def __init__(self, cfg, comm, out=None):
        self.cfg, self.comm, self.out = cfg, comm, out or sys.stdout
        self.all_rows: list[dict] = []
        self.machine = machine_info()
        total = 0 if cfg.workload else len(cfg.collectives) * len(cfg.sizes())
        self.bar = None
        if sys.stderr.isatty() or os.environ.get("SECCOMM_PROGRESS") == "1":
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="size", file=sys.stderr, leave=False)
        self._current = None
        self.rates: dict = {}  # suite -> bench.bound.CryptoRate, set by header
        self.crypto_threads = None  # a keyed suite's SecureComm.crypto_threads, set by header

    def line(self, text=""):
        if self.bar is not None:
            self.bar.write(text, file=self.out)
        else:
            print(text, file=self.out, flush=True)

    def header(self, comms, secret_source="", rates=None):
        c, m = self.cfg, self.machine
        sc = next(iter(comms.values()), None)
        nodes = len(set(sc.node_ids)) if sc else "?"
        self.line(
            f"# seccomm bench {m['seccomm']}: {self.comm.Get_size()} ranks on {nodes} node(s), "
            f"{m['mpi_library']}, {m['openssl']}"
        )
        self.line(
            f"# cpu: {m['cpu']['model']} ({m['cpu']['cores']} cores, aes={m['cpu']['aes']} "
            f"vaes={m['cpu']['vaes']} pclmulqdq={m['cpu']['pclmulqdq']})"
        )
        loop = (
            f"{c.loop_text()} check: {c.check} "
            f"algorithm: {c.algorithm} encrypt: {c.encrypt} chunk: {c.chunk_bytes} B"
        )
        if c.workload:
            self.line(f"# workload {c.workload} (float32 sum allreduce per DDP bucket) {loop}")
        else:
            self.line(f"# minBytes {c.minbytes} maxBytes {c.maxbytes} step: {c.stepfactor}(factor) {loop}")
        self.line(f"# job secret: {secret_source}")
        if c.identity == "x509":
            from ..launch import FRESH_IDENTITY_ENV, FRESH_IDENTITY_SOURCE

            mine = "SECCOMM_CERT_FILE, SECCOMM_KEY_FILE, SECCOMM_CA_FILE"
            src = FRESH_IDENTITY_SOURCE if os.environ.get(FRESH_IDENTITY_ENV) == "1" else mine
            self.line(f"# identity: x509 for the SUITE+x509 variants, from {src}")
        if m.get("pair_path"):  # (a repeated small allreduce on two ranks: seccomm.pairswap)
            self.line(f"# two-rank small allreduce: {m['pair_path']}")
        local = sc.node_ids.count(sc.node_ids[sc.rank]) if sc else self.comm.Get_size()
        keyed = [s for s in comms.values() if s.suite.name != "none"]
        if keyed:  # (the crypto pool: what overlaps crypto with the transfer on cores to spare)
            self.crypto_threads = keyed[0].crypto_threads
            how = "a pool" if self.crypto_threads > 1 else "the calling thread: no pool"
            self.line(
                f"# crypto threads: {self.crypto_threads} per rank ({how}; {node_cores()} cores for "
                f"{local} rank{'s' * (local != 1)} on this node; SecureComm crypto_threads, "
                "SECCOMM_CRYPTO_THREADS, default: the node's cores / its ranks, at most 8)"
            )
        over = oversubscription(local, node_cores())
        if over:
            self.line(f"# OVERSUBSCRIBED: {over} on this node: ranks share cores; times mean little")
        if os.environ.get("SECCOMM_LAB"):  # an emulated cluster (seccomm cluster): its hosts and links
            self.line(f"# lab: {os.environ['SECCOMM_LAB']}")
        self.line(
            "# variants: native = the MPI library's own collective; none = seccomm's algorithms "
            "and framing without crypto; the others add that suite's AEAD"
            + (
                "; SUITE+x509: that suite with per-rank certificates (identity x509)"
                if c.identity == "x509"
                else ""
            )
        )
        if c.dtype in ("float16", "bfloat16") and not c.workload:
            self.line(
                f"# native {c.dtype}: MPI user-defined op (numpy ufunc): MPICH has no "
                f"{c.dtype} reduction type"
            )
        self.line(
            "# time: median over iterations of the slowest rank; overhead: vs native at the "
            "same size; busbw per nccl-tests doc/PERFORMANCE.md"
        )
        self.rates = dict(rates or {})
        for r in self.rates.values():
            self.line(
                f"# {r.suite}, one core, worst of all ranks: seal {r.seal_frame_s * 1e6:.2f} us per "
                f"frame + {r.gbps('seal', per_byte=True):.2f} GB/s, open {r.open_frame_s * 1e6:.2f} us "
                f"per frame + {r.gbps('open', per_byte=True):.2f} GB/s; at {r.chunk_bytes} B frames "
                f"seal {r.gbps('seal'):.2f} GB/s, open {r.gbps('open'):.2f} GB/s"
            )
        if self.rates:
            self.line(
                "# bound add: native + the crypto of the row's algorithm at those costs (one core "
                "does both); bound ovl: max(native, crypto) (crypto on spare cores); vs bound: time "
                "/ bound add (below 1: overlapped, or native slower than seccomm's own plaintext "
                "path: compare none); docs/bench.md, 'The bound'"
            )

    def rows(self, rows):
        coll = rows[0]["collective"]
        if coll != self._current:
            self._current = coll
            self.line(f"#\n# {coll}")
            self.line("# " + _FMT.format(*_COLS)[2:])
        for r in rows:
            self.line(
                _FMT.format(
                    r["size_bytes"],
                    r["count"],
                    r["dtype"],
                    r["redop"],
                    r["variant"],
                    f"{r['time_us']['median']:.1f}",
                    f"{r['algbw_gbps']:.3f}",
                    f"{r['busbw_gbps']:.3f}",
                    f"{r['overhead_x']:.2f}",
                    *_bound_cells(r),
                    wrong_cell(r),
                )
            )
        self.all_rows += rows
        if self.bar is not None:
            self.bar.update(1)

    def workload(self, w, rows):
        self.line(
            f"#\n# workload {w['name']}: {w['parameters']:,} parameters (published "
            f"{w['published_parameters']:,}), {w['gradient_bytes']:,} gradient bytes (float32) in "
            f"{len(w['buckets'])} DDP buckets, bucket_cap_mb "
            f"{w['bucket_cap_mb'] or '25 (first bucket 1 MiB)'}"
        )
        self.line(
            f"# run at scale {w['scale']:.4g}: {rows[0]['size_bytes']:,} bytes per step; "
            f"projected full step = measured / scale"
        )
        self.line(
            f"# {'variant':>18} {'step comm [ms]':>15} {'projected [ms]':>15} {'busbw [GB/s]':>13} "
            f"{'overhead [x]':>13} {'#wrong':>7}"
        )
        for r in rows:
            self.line(
                f"  {r['variant']:>18} {r['time_us']['median'] / 1e3:15.3f} "
                f"{r['projected_step_ms']:15.3f} {r['busbw_gbps']:13.3f} {r['overhead_x']:13.2f} "
                f"{wrong_cell(r):>7}"
            )
        self.all_rows += rows
        self.workload_desc = w

    def footer(self):
        if self.bar is not None:
            self.bar.close()
        wrong = wrong_total(self.all_rows)
        checked = not self.all_rows or self.all_rows[0]["wrong"] is not None
        verdict = ("OK" if wrong == 0 else "FAILED") if checked else "(not checked: --check 0)"
        self.line(f"# Out of bounds values : {wrong if checked else 'N/A'} {verdict}")
        for coll in self.cfg.collectives:
            x509 = [s + "+x509" for s in self.cfg.suites] if self.cfg.identity == "x509" else []
            for v in ["native", *self.cfg.suites, *x509]:
                line = summary_line(self.all_rows, coll, v)
                if line:
                    self.line(line)
        result = "OK" if wrong == 0 else f"FAILED ({wrong} wrong elements)"
        self.line(f"# Result: {result}{'' if checked else ' (results not checked: --check 0)'}")

    def document(self) -> dict:
        doc = {
            "machine": self.machine,
            "config": self.cfg.as_dict(),
            "world_size": self.comm.Get_size(),
            "rows": self.all_rows,
        }
        if getattr(self, "workload_desc", None):
            doc["workload"] = self.workload_desc
        if self.crypto_threads:
            doc["crypto_threads"] = self.crypto_threads
        if getattr(self, "rates", None):  # the costs behind every row's bound (bench/bound.py)
            doc["crypto_rates"] = {name: asdict(r) for name, r in self.rates.items()}
        return doc

    def write_files(self):
        c = self.cfg
        if c.json:
            with open(c.json, "w") as f:
                json.dump(self.document(), f, indent=1)
        if c.csv:
            write_csv(c.csv, self.all_rows)
        if c.plot:
            from .plot import plot_bench

            plot_bench(c.plot, self.all_rows)


def _bound_cells(row: dict) -> tuple[str, str, str]:
    b = row.get("bound_us")
    if not b:
        return "-", "-", "-"
    return f"{b['additive']:.1f}", f"{b['overlapped']:.1f}", f"{row['vs_bound_x']:.2f}"


def flatten(row: dict) -> dict:
    """One CSV line of ``row``: the columns of :data:`CSV_FIELDS` (bound columns empty for rows
    without a bound: workload steps and the pytest plugin's)."""
    flat = {k: v for k, v in row.items() if k not in ("time_us", "bound_us")}
    for k in ("min", "median", "max"):
        flat[f"time_us_{k}"] = row["time_us"][k]
    for k, v in row.get("bound_us", {}).items():
        flat[f"bound_us_{k}"] = v
    return {k: flat.get(k, "") for k in CSV_FIELDS}


def wrong_total(rows: list[dict]) -> int:
    """Wrong elements over ``rows`` (rows that were not checked count none)."""
    return sum(r["wrong"] or 0 for r in rows)


def wrong_cell(r: dict):
    """The ``#wrong`` cell: the count, or ``N/A`` when nothing was checked (as nccl-tests)."""
    return "N/A" if r["wrong"] is None else r["wrong"]


def write_csv(path: str, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow(flatten(r))
