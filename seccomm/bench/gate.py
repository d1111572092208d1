"""A regression gate that holds on a shared, noisy machine: compare each secure collective with
native MPI *measured in the same run*, and judge whole families of groups, not single groups.

pytest-benchmark's ``--benchmark-compare-fail=median:10%`` compares absolute medians of two runs;
on a 2-core machine shared with other jobs, two runs of unchanged code differed by up to +128 %
(13 of 48 groups flagged, issue 18).  Load slows native MPI and seccomm alike, so their ratio in
one run moves less; the minimum over rounds drops rounds that the scheduler delayed.  Single
groups still moved by up to +52 % run to run (docs/performance.md, "Regression gate"), so the
verdict is on the *median* growth of each family: every group of one suite (all collectives and
sizes), and every group of one collective (all suites and sizes).

Per group (collective, variant, size S): ``ratio = min secure time / min native time`` of one run,
``growth = ratio_now / ratio_baseline - 1``.  The gate fails a family when its median growth
exceeds the tolerance (default 40 %).  A change that makes seccomm's path 2x slower doubles the
ratio where seccomm's own time dominates (every secure variant measured here, ``none`` included):
about +100 % for the suite (or collective) it touches.  Not caught: a regression confined to one
(collective, suite) pair, which moves neither family's median; the worst single groups are listed.
When native MPI's own times moved by more than 30 % since the baseline, the machine ran under
other load, which slows seccomm's small operations (Python, polling) more than MPI's: the verdict
is INCONCLUSIVE, and the session fails all the same (rerun).

Input: pytest-benchmark JSON from ``benchmarks/test_collectives.py`` (the ``collective_bench``
fixture records ``time_us`` and ``native_min_us`` in ``extra_info``) or a ``seccomm bench --json``
result (each size's native row is in the same file).
"""

from __future__ import annotations

import json

#: default tolerance on a family's median growth of the ratio to native (0.4 = +40 %)
DEFAULT_TOLERANCE = 0.4


def points(doc: dict) -> dict[tuple, tuple[float, float]]:
    """``{(collective, variant, size S): (min secure time, min native time)}`` [us] of one result
    document; ``ValueError`` naming what is missing when ``doc`` is neither kind of result."""
    if "benchmarks" in doc:
        return _from_pytest_benchmark(doc["benchmarks"])
    if "rows" in doc and "world_size" in doc:
        return _from_bench(doc["rows"])
    raise ValueError(
        "expected a pytest-benchmark JSON (benchmarks/test_collectives.py) or a seccomm bench --json result"
    )


def _from_pytest_benchmark(benchmarks: list) -> dict[tuple, tuple[float, float]]:
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
            info["time_us"]["min"],
            info["native_min_us"],
        )
    return out


def _from_bench(rows: list) -> dict[tuple, tuple[float, float]]:
    native = {
        (r["collective"], r["size_bytes"]): r["time_us"]["min"] for r in rows if r["variant"] == "native"
    }
    out = {}
    for r in rows:
        nat = native.get((r["collective"], r["size_bytes"]), 0)
        if r["variant"] != "native" and nat > 0:
            out[(r["collective"], r["variant"], r["size_bytes"])] = (r["time_us"]["min"], nat)
    return out


def compare(base: dict, now: dict) -> list[dict]:
    """One record per group in both (:func:`points`): key, base and current ratio (secure /
    native), growth (now / base - 1), native (native MPI's own change, now / base - 1); worst
    growth first."""
    out = []
    for k in base.keys() & now.keys():
        (bs, bn), (ns, nn) = base[k], now[k]
        rb, rn = bs / bn if bn > 0 else 0.0, ns / nn if nn > 0 else 0.0
        out.append(
            {
                "key": k,
                "base": rb,
                "now": rn,
                "growth": rn / rb - 1 if rb > 0 else 0.0,
                "native": nn / bn - 1 if bn > 0 else 0.0,
            }
        )
    return sorted(out, key=lambda r: -r["growth"])


def families(records: list[dict], tolerance: float = DEFAULT_TOLERANCE) -> list[dict]:
    """The verdicts: per suite and per collective, the groups' median growth and ``failed``
    (median growth > ``tolerance``), worst first."""
    import statistics

    out = []
    for by, idx in (("suite", 1), ("collective", 0)):
        for name in sorted({r["key"][idx] for r in records}):
            g = [r["growth"] for r in records if r["key"][idx] == name]
            med = statistics.median(g)
            out.append(
                {"by": by, "name": name, "groups": len(g), "median_growth": med, "failed": med > tolerance}
            )
    return sorted(out, key=lambda f: -f["median_growth"])


#: native MPI's own median change beyond which the baseline's machine load cannot be assumed
LOAD_SHIFT = 0.3


def verdict(records: list[dict], tolerance: float) -> tuple[str, list[dict], float]:
    """(``"OK"``, ``"FAILED"`` or ``"INCONCLUSIVE"``, the families, native MPI's own median
    change).  INCONCLUSIVE when native MPI itself moved by more than :data:`LOAD_SHIFT` since the
    baseline: the machine ran under other load (a change in seccomm does not move it), which
    moves seccomm's small operations more than MPI's; rerun."""
    import statistics

    fams = families(records, tolerance)
    native = statistics.median(r["native"] for r in records) if records else 0.0
    if abs(native) > LOAD_SHIFT:
        return "INCONCLUSIVE", fams, native
    return ("FAILED" if any(f["failed"] for f in fams) else "OK"), fams, native


def report(records: list[dict], tolerance: float, missing: int = 0) -> tuple[str, list[str]]:
    """(verdict, lines for the terminal): the verdict (:func:`verdict`), every family (failed ones
    first), native MPI's own change, and the five groups that grew most."""
    status, fams, native = verdict(records, tolerance)
    bad = [f for f in fams if f["failed"]]
    head = (
        f"seccomm gate: {status}: {len(bad)} of {len(fams)} families (per suite, per collective) grew "
        f"their median time relative to native MPI by more than {tolerance:.0%} ({len(records)} groups, "
        f"min over rounds, same run)"
    )
    if missing:
        head += f"; {missing} group(s) of this run are not in the baseline"
    lines = [head] + [
        f"  {'FAIL' if f['failed'] else 'ok  '} {f['by']} {f['name']}: median {f['median_growth']:+.0%} "
        f"over {f['groups']} groups"
        for f in fams
    ]
    lines.append(f"  native MPI itself: median {native:+.0%} vs the baseline")
    if status == "INCONCLUSIVE":
        lines.append(
            f"  beyond +-{LOAD_SHIFT:.0%}: the machine ran under other load than the baseline's; rerun"
        )
    lines += [
        f"  group {r['key'][0]} {r['key'][1]} {r['key'][2]} B: {r['base']:.2f}x -> {r['now']:.2f}x native "
        f"({r['growth']:+.0%})"
        for r in records[:5]
    ]
    return status, lines


def parse_tolerance(text: str) -> float:
    """``50%`` or ``0.5`` -> 0.5; ``ValueError`` unless a finite number > 0."""
    t = text.strip()
    v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    if not v > 0 or v == float("inf"):
        raise ValueError(f"tolerance must be > 0, got {text!r}")
    return v


def load(path: str) -> dict[tuple, tuple[float, float]]:
    """:func:`points` of the JSON file at ``path``; ``ValueError`` naming the file otherwise."""
    try:
        with open(path) as f:
            return points(json.load(f))
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: {e}") from None
