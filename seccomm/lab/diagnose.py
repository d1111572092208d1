"""Where the time of each measured row goes, and what limits scaling at each host count.

For every allreduce row (not native MPI) of a ``seccomm cluster --json`` sweep or a ``seccomm
bench --json`` result, the calibrated model's time is split into its parts
(:func:`seccomm.costmodel.predict_parts`, the one seam with the model): latency (alpha per message),
bandwidth (bytes x beta, of which ``uplink`` is the extra time of an oversubscribed rack uplink),
reduction (gamma) and crypto (sigma).  **Waiting** is what the model does not explain: the
measured time (the median over iterations of the slowest rank's time) minus the model's.  The
results hold no per-rank times, so waiting on the slowest rank (synchronisation, imbalance, ranks
waiting for a core) cannot be told apart from a model error; it is negative where the model is
slower than the measurement.  docs/scaling.md, "Diagnosis".
"""

from __future__ import annotations

import math
from dataclasses import replace

from .. import costmodel as cm
from .. import calibration as calib
from .spec import format_rate

#: parts of a row's measured time, in the order of the tables and plots
PARTS = ("latency", "bandwidth", "reduction", "crypto", "waiting")
#: the columns of a row's breakdown [us]: :data:`PARTS` with the uplink's share of bandwidth
BREAKDOWN = ("latency", "bandwidth", "uplink", "reduction", "crypto", "waiting")
#: what a row is bound by, when that part is the largest share of its measured time
LIMITS = {
    "latency": "latency-bound (per-message cost alpha)",
    "bandwidth": "bandwidth-bound on the links",
    "uplink": "bandwidth-bound on the uplink",
    "reduction": "reduction-bound",
    "crypto": "crypto-bound",
    "waiting": "bound by waiting (time the model does not explain: the slowest rank, CPU sharing, "
    "synchronisation)",
}


def _spec(topo: cm.Topology, spec: dict | None) -> dict:
    """The run's hosts, ranks per host, rates and racks (a bench result: one node, no link)."""
    s = spec or {}
    return {
        "hosts": topo.nodes,
        "ranks_per_host": topo.ranks_per_node,
        "ranks": topo.p,
        "link_bps": s.get("link_bps"),
        "hosts_per_rack": s.get("hosts_per_rack"),
        "oversubscription": topo.oversubscription,
        "uplink_bps": s.get("uplink_bps"),
    }


def row_parts(r: dict, p: int, topo: cm.Topology, cal: dict, encrypt: str) -> dict:
    """One measured row split into :data:`PARTS` [us], plus ``uplink_us`` (part of bandwidth),
    ``model_us``, ``measured_us``, ``error`` ((model - measured) / measured) and ``algorithm``."""
    prm, secure, n = calib.params_for(cal, r["variant"]), r["variant"] != "none", r["size_bytes"]
    alg = calib.row_algorithm(r, p)
    parts = cm.predict_parts("allreduce", alg, n, prm, topo, secure, encrypt)
    flat = cm.predict_parts("allreduce", alg, n, prm, replace(topo, oversubscription=1.0), secure, encrypt)
    model = sum(parts.values())
    meas = r["time_us"]["median"] * 1e-6
    out = {"algorithm": alg, "measured_us": meas * 1e6, "model_us": model * 1e6}
    for k in ("latency", "bandwidth", "reduction", "crypto"):
        out[f"{k}_us"] = parts[k] * 1e6
    out["uplink_us"] = (parts["bandwidth"] - flat["bandwidth"]) * 1e6
    out["waiting_us"] = (meas - model + parts["jitter"]) * 1e6  # the model's own jitter is waiting too
    out["error"] = (model - meas) / meas if meas > 0 else float("nan")
    return out


def diagnose(doc: dict, cal: dict, min_bytes: int = 0) -> list[dict]:
    """One row per allreduce row (not native, size >= ``min_bytes``) of every case of a result
    file with more than one rank (:func:`seccomm.costmodel.cases`): the run's shape
    (:func:`_spec`), the row's variant, size, busbw, overhead vs native, and :func:`row_parts`.
    ``KeyError``/``ValueError`` on a malformed file or a suite the calibration has no rates for."""
    specs = {id(run["bench"]): run["spec"] for run in doc.get("runs", []) if run.get("bench")}
    out = []
    for bench, topo in calib.cases(doc):
        p, encrypt = int(bench["world_size"]), bench.get("config", {}).get("encrypt", "all")
        if p < 2:
            continue  # one rank: no traffic, nothing to attribute
        machine = bench.get("machine", {})
        for r in bench.get("rows", []):
            if r.get("collective") != "allreduce" or r["variant"] == "native" or r["size_bytes"] < min_bytes:
                continue
            row = {**_spec(topo, specs.get(id(bench))), "utc": machine.get("utc"),
                   "git_commit": machine.get("git_commit"), "collective": "allreduce",
                   "variant": r["variant"], "size_bytes": r["size_bytes"],
                   "busbw_gbps": r.get("busbw_gbps"), "overhead_x": r.get("overhead_x")}  # fmt: skip
            out.append({**row, **row_parts(r, p, topo, cal, encrypt)})
    return out


def limit_of(rows: list[dict]) -> tuple[str, dict]:
    """(what bounds these rows, the mean share of each part of their measured time).  Each row
    counts alike; bandwidth counts as the uplink's when the uplink's extra time is most of it."""
    shares = {k: _mean([r[f"{k}_us"] / r["measured_us"] for r in rows]) for k in PARTS}
    top = max(PARTS, key=lambda k: shares[k])
    uplink = _mean([r["uplink_us"] / r["measured_us"] for r in rows])
    if top == "bandwidth" and uplink >= shares["bandwidth"] / 2:
        top = "uplink"
    return top, shares


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def verdicts(rows: list[dict]) -> list[dict]:
    """Per (run shape, host count): ``limit`` (a :data:`LIMITS` key), ``line`` (one sentence) and
    the mean ``shares`` of each part, over that host count's rows."""
    out = []
    for key in dict.fromkeys(shape_of(r) for r in rows):
        rs = [r for r in rows if shape_of(r) == key]
        limit, shares = limit_of(rs)
        parts = ", ".join(f"{k} {100 * shares[k]:.0f}%" for k in PARTS)
        where = describe(rs[0])
        line = f"{where}: {LIMITS[limit]}; {parts} of the measured time (mean of {len(rs)} rows)"
        out.append({**dict(zip(SHAPE, key)), "limit": limit, "line": line, "shares": shares})
    return out


#: what tells two runs apart in the verdicts and the report
SHAPE = ("hosts", "ranks_per_host", "link_bps", "hosts_per_rack", "oversubscription")


def shape_of(r: dict) -> tuple:
    """The run a diagnosis row came from, as the values of :data:`SHAPE`."""
    return tuple(r[k] for k in SHAPE)


def describe(r: dict) -> str:
    """The run of a diagnosis row in words: ``4 host(s) x 1 rank(s), 250mbit, racks of 2 at 4:1``."""
    s = f"{r['hosts']} host(s) x {r['ranks_per_host']} rank(s)"
    if r["link_bps"]:
        s += f", {format_rate(r['link_bps'])}"
    if r["oversubscription"] > 1:
        s += f", racks of {r['hosts_per_rack']} at {r['oversubscription']:g}:1"
    return s


def calibration_line(cal: dict) -> str:
    """One sentence: the calibration's inter-node alpha and beta, and where they came from (a
    calibration made on other links than the result's gives parts that do not fit it)."""
    fit = cal["inter"]
    return (
        f"Model: calibrated alpha = {fit['alpha'] * 1e6:.0f} us, 1/beta = {1e-6 / fit['beta']:.1f} MB/s "
        f"({cal.get('source', {}).get('inter', 'source not recorded')})."
    )


def table(rows: list[dict]) -> list[str]:
    """The per-row diagnosis as text lines (units in the header)."""
    head = f"# {'hosts':>5} {'ranks':>5} {'size [B]':>10} {'variant':>12} {'measured [us]':>13} "
    head += " ".join(f"{k + ' [us]':>15}" for k in BREAKDOWN) + f" {'error':>7}"
    lines = [head]
    for r in rows:
        vals = " ".join(f"{r[f'{k}_us']:>15.0f}" for k in BREAKDOWN)
        err = "-" if math.isnan(r["error"]) else f"{100 * r['error']:.1f}%"
        lines.append(
            f"  {r['hosts']:>5} {r['ranks']:>5} {r['size_bytes']:>10} {r['variant']:>12} "
            f"{r['measured_us']:>13.0f} {vals} {err:>7}"
        )
    return lines
