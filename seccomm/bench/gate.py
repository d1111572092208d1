"""A regression gate that holds on a shared, noisy machine: compare each secure collective with
native MPI *measured in the same rounds*, and judge whole families of groups, not single groups.

pytest-benchmark's ``--benchmark-compare-fail=median:10%`` compares absolute medians of two runs;
on a 2-core machine shared with other jobs, two runs of unchanged code differed by up to +128 %
(13 of 48 groups flagged).  Here:

- per group (collective, variant, size S), the *ratio* to native MPI of the same run:
  ``collective_bench`` alternates native and secure rounds, and the ratio is the median over
  rounds of (secure round / the native round just before it); a ``seccomm bench --json`` result
  gives its ``overhead_x`` (the same loop, interleaved);
- per family (every group of one suite, over all collectives and sizes; every group of one
  collective, over all suites and sizes), the median ``growth = ratio_now / ratio_baseline - 1``;
- a family is INCONCLUSIVE when native MPI's own times in its groups moved by more than 30 %
  (median) since the baseline: the machine ran under other load (a change in seccomm does not
  move native MPI), which can make seccomm's ratio grow (load slows its small, Python-driven
  operations more than MPI's) or shrink (hiding a regression); otherwise it FAILS when its median
  growth exceeds the tolerance (default 40 %).  The run is FAILED when a family failed, else
  INCONCLUSIVE when one was, else OK; NOTHING COMPARED when no group is in both runs (a gate
  that compared nothing must not pass); only OK passes.  (30 % keeps a 2x regression visible:
  2 / 1.3 - 1 = +54 % > 40 %.)

A change that makes seccomm's path 2x slower doubles the ratio wherever seccomm's own time
dominates (every secure variant measured here, ``none`` included): about +100 % for the suite or
collective it touches.  Not caught: a regression confined to one (collective, suite) pair, which
moves neither family's median (the worst single groups are listed).  Measurements:
docs/performance.md, "Regression gate"; usage: docs/pytest-plugin.md.
"""

from __future__ import annotations

import json
import statistics

#: default tolerance on a family's median growth of the ratio to native (0.4 = +40 %)
DEFAULT_TOLERANCE = 0.4
#: native MPI's own median change in a family beyond which the baseline's load cannot be assumed
LOAD_SHIFT = 0.3


def points(doc: dict) -> dict[tuple, tuple[float, float]]:
    """``{(collective, variant, size S): (ratio to native, native time [us])}`` of one result
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
        if "paired_ratio_median" not in info:
            raise ValueError(
                f"{b.get('name')}: no paired_ratio_median in extra_info (recorded before the gate existed): "
                "run the baseline again"
            )
        out[(info["collective"], info["suite"], info["bytes"])] = (
            info["paired_ratio_median"],
            info["native_min_us"],
        )
    return out


def _from_bench(rows: list) -> dict[tuple, tuple[float, float]]:
    native = {
        (r["collective"], r["size_bytes"]): r["time_us"]["median"] for r in rows if r["variant"] == "native"
    }
    out = {}
    for r in rows:
        where = (r["collective"], r["size_bytes"])
        if r["variant"] != "native" and where in native:
            out[(r["collective"], r["variant"], r["size_bytes"])] = (r["overhead_x"], native[where])
    return out


def compare(base: dict, now: dict) -> list[dict]:
    """One record per group in both (:func:`points`): key, base and current ratio, ``growth``
    (now / base - 1) and ``native`` (native MPI's own change, now / base - 1); worst growth first."""
    out = []
    for k in base.keys() & now.keys():
        (rb, nb), (rn, nn) = base[k], now[k]
        growth = rn / rb - 1 if rb > 0 else 0.0
        out.append(
            {"key": k, "base": rb, "now": rn, "growth": growth, "native": nn / nb - 1 if nb > 0 else 0.0}
        )
    return sorted(out, key=lambda r: -r["growth"])


def families(records: list[dict], tolerance: float = DEFAULT_TOLERANCE) -> list[dict]:
    """Per suite and per collective: the groups' median growth, native MPI's median change, and
    ``status``: ``"LOAD"`` (native moved by more than :data:`LOAD_SHIFT`: inconclusive), else
    ``"FAIL"`` (growth > ``tolerance``) or ``"ok"``; worst growth first."""
    out = []
    for by, idx in (("suite", 1), ("collective", 0)):
        for name in sorted({r["key"][idx] for r in records}):
            mine = [r for r in records if r["key"][idx] == name]
            growth = statistics.median(r["growth"] for r in mine)
            native = statistics.median(r["native"] for r in mine)
            status = "LOAD" if abs(native) > LOAD_SHIFT else "FAIL" if growth > tolerance else "ok"
            out.append(
                {
                    "by": by,
                    "name": name,
                    "groups": len(mine),
                    "median_growth": growth,
                    "native": native,
                    "status": status,
                }
            )
    return sorted(out, key=lambda f: -f["median_growth"])


def verdict(records: list[dict], tolerance: float = DEFAULT_TOLERANCE) -> tuple[str, list[dict]]:
    """(``"NOTHING COMPARED"`` when no group is in both runs, else ``"FAILED"`` when a family
    failed, else ``"INCONCLUSIVE"`` when one was measured under other load, else ``"OK"``; the
    families).  Only OK passes: a gate that compared nothing has shown nothing."""
    fams = families(records, tolerance)
    states = {f["status"] for f in fams}
    if not fams:
        return "NOTHING COMPARED", fams
    return ("FAILED" if "FAIL" in states else "INCONCLUSIVE" if "LOAD" in states else "OK"), fams


def report(records: list[dict], tolerance: float, missing: int = 0) -> tuple[str, list[str]]:
    """(verdict, lines for the terminal): the verdict, every family (worst first) and the five
    groups that grew most; ``missing``: this run's groups that are not in the baseline."""
    status, fams = verdict(records, tolerance)
    if status == "NOTHING COMPARED":
        why = (
            f"none of this run's {missing} group(s) (collective, suite, size) is in the baseline"
            if missing
            else "this run timed no collective_bench group"
        )
        return status, [
            f"seccomm gate: NOTHING COMPARED: {why}, so no regression could be seen; make the baseline "
            "with --benchmark-json from a run of the same benchmarks, sizes and suites"
        ]
    n = {s: sum(f["status"] == s for f in fams) for s in ("FAIL", "LOAD")}
    head = (
        f"seccomm gate: {status}: {n['FAIL']} of {len(fams)} families (per suite, per collective) grew "
        f"their median time relative to native MPI by more than {tolerance:.0%} ({len(records)} groups)"
    )
    if n["LOAD"]:
        head += f"; {n['LOAD']} ran under other load (native MPI itself moved > {LOAD_SHIFT:.0%}): rerun"
    if missing:
        head += f"; {missing} group(s) of this run are not in the baseline"
    lines = [head] + [
        f"  {f['status']:<4} {f['by']} {f['name']}: median {f['median_growth']:+.0%} over {f['groups']} "
        f"groups; native MPI itself {f['native']:+.0%}"
        + (" (other load on the machine: rerun)" if f["status"] == "LOAD" else "")
        for f in fams
    ]
    lines += [
        f"  group {r['key'][0]} {r['key'][1]} {r['key'][2]} B: {r['base']:.2f}x -> {r['now']:.2f}x native "
        f"({r['growth']:+.0%}; native {r['native']:+.0%})"
        for r in records[:5]
    ]
    return status, lines


def parse_tolerance(text: str) -> float:
    """``50%`` or ``0.5`` -> 0.5; ``ValueError`` unless a finite number > 0."""
    t = text.strip()
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise ValueError(f"tolerance must be a number > 0 such as 40% or 0.4, got {text!r}") from None
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
