"""A regression gate that holds on a shared, noisy machine: compare each secure collective with
native MPI *measured in the same run*, not with its own absolute time in another run.

pytest-benchmark's ``--benchmark-compare-fail=median:10%`` compares absolute medians of two runs;
on a 2-core machine shared with other jobs, two runs of unchanged code differed by up to +128 %
(13 of 48 groups flagged, issue 18).  Load slows native MPI and seccomm alike, so their ratio in
one run moves far less; the minimum over rounds drops the rounds that the scheduler delayed.

The gate's number per group (collective, suite, size S) is ``ratio = min secure time / min native
time`` of one run; it fails a group when ``ratio_now / ratio_baseline - 1`` exceeds the tolerance
(default 50 %): a change that makes seccomm's path 2x slower doubles the ratio (+100 %) wherever
seccomm's own time dominates, which is every secure variant (``none`` included) measured here.

Input: pytest-benchmark JSON from ``benchmarks/test_collectives.py`` (the ``collective_bench``
fixture records ``time_us`` and ``native_min_us`` in ``extra_info``) or a ``seccomm bench --json``
result (each size's native row is in the same file).
"""

from __future__ import annotations

import json

#: default tolerance on the growth of a group's ratio to native (0.5 = +50 %)
DEFAULT_TOLERANCE = 0.5


def ratios(doc: dict) -> dict[tuple, float]:
    """``{(collective, variant, size S): min secure / min native}`` of one result document;
    ``ValueError`` naming what is missing when ``doc`` is neither kind of result."""
    if "benchmarks" in doc:
        return _from_pytest_benchmark(doc["benchmarks"])
    if "rows" in doc and "world_size" in doc:
        return _from_bench(doc["rows"])
    raise ValueError(
        "expected a pytest-benchmark JSON (benchmarks/test_collectives.py) or a seccomm bench --json result"
    )


def _from_pytest_benchmark(benchmarks: list) -> dict[tuple, float]:
    out = {}
    for b in benchmarks:
        info = b.get("extra_info", {})
        if "collective" not in info:
            continue  # not a collective_bench benchmark
        if "native_min_us" not in info:
            raise ValueError(
                f"{b.get('name')}: no native_min_us in extra_info (recorded before the gate existed): "
                "run the baseline again"
            )
        out[(info["collective"], info["suite"], info["bytes"])] = (
            info["time_us"]["min"] / info["native_min_us"]
        )
    return out


def _from_bench(rows: list) -> dict[tuple, float]:
    native = {
        (r["collective"], r["size_bytes"]): r["time_us"]["min"] for r in rows if r["variant"] == "native"
    }
    out = {}
    for r in rows:
        nat = native.get((r["collective"], r["size_bytes"]), 0)
        if r["variant"] != "native" and nat > 0:
            out[(r["collective"], r["variant"], r["size_bytes"])] = r["time_us"]["min"] / nat
    return out


def compare(
    base: dict[tuple, float], now: dict[tuple, float], tolerance: float = DEFAULT_TOLERANCE
) -> list[dict]:
    """One record per group in both: key, base and current ratio, growth (now / base - 1) and
    ``failed`` (growth > ``tolerance``), worst growth first."""
    out = []
    for key in sorted(base.keys() & now.keys(), key=str):
        growth = now[key] / base[key] - 1 if base[key] > 0 else 0.0
        out.append(
            {"key": key, "base": base[key], "now": now[key], "growth": growth, "failed": growth > tolerance}
        )
    return sorted(out, key=lambda r: -r["growth"])


def report(records: list[dict], tolerance: float, missing: int = 0) -> list[str]:
    """Lines for the terminal: the verdict, then each failed group and the three worst others."""
    failed = [r for r in records if r["failed"]]
    head = (
        f"seccomm gate: {len(failed)} of {len(records)} groups grew their time relative to native MPI "
        f"by more than {tolerance:.0%} (min over rounds, same run)"
    )
    if missing:
        head += f"; {missing} group(s) of this run are not in the baseline"
    shown = failed + [r for r in records if not r["failed"]][:3]
    return [head] + [
        f"  {'FAIL' if r['failed'] else 'ok  '} {r['key'][0]} {r['key'][1]} {r['key'][2]} B: "
        f"{r['base']:.2f}x -> {r['now']:.2f}x native ({r['growth']:+.0%})"
        for r in shown
    ]


def parse_tolerance(text: str) -> float:
    """``50%`` or ``0.5`` -> 0.5; ``ValueError`` unless a finite number > 0."""
    t = text.strip()
    v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    if not v > 0 or v == float("inf"):
        raise ValueError(f"tolerance must be > 0, got {text!r}")
    return v


def load(path: str) -> dict[tuple, float]:
    """:func:`ratios` of the JSON file at ``path``; ``ValueError`` naming the file otherwise."""
    try:
        with open(path) as f:
            return ratios(json.load(f))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: {e}") from None
