"""Calibration of the cost model from measured runs, and validation against them
(``seccomm project --calibrate/--validate``; method in docs/model.md, "Calibration").

A ``seccomm bench --json`` result (one node) or a ``seccomm cluster --json`` sweep (hosts as
nodes, racks as leaves) gives the cases; the fit is least squares on the coefficients of
(alpha, beta, gamma, sigma) in the unpipelined time of our allreduce
(:func:`seccomm.costmodel.step_time`'s terms).
"""

from __future__ import annotations

import math

from .collectives import Tuning, get_collective
from .costmodel import MIB, Params, Topology, algorithm_cost, for_suite, predict


def bench_algorithm(
    nbytes: float, p: int, small_bytes: int = Tuning.small_bytes, itemsize: int = 4, chunk_bytes: int = 0
) -> str:
    """The allreduce algorithm SecureComm's ``auto`` picks for ``nbytes`` of ``itemsize``-byte
    elements (the allreduce record's rule).  ``chunk_bytes``: the two-rank rule's limit; 0 (the
    default) leaves it out: the rule of bench results made before it, whose rows do not name
    their algorithm (:func:`row_algorithm`)."""
    tuning = Tuning(small_bytes=small_bytes, chunk_bytes=chunk_bytes)
    return get_collective("allreduce").pick(tuning, nbytes, nbytes // itemsize, p)


def row_algorithm(r: dict, p: int) -> str:
    """The allreduce algorithm a bench row of ``p`` ranks ran: its ``algorithm`` (rows name it
    since the two-rank rule came in), else :func:`bench_algorithm`'s rule without it."""
    return r.get("algorithm") or bench_algorithm(r["size_bytes"], p)


def _features(nbytes, p, prm_chunk, secure_stage: bool, topo: Topology | None = None, alg: str | None = None):
    """Coefficients of (alpha, beta, gamma, sigma) in the unpipelined time of our allreduce
    (``alg``, default :func:`bench_algorithm`'s) on ``topo`` (default one node of p ranks):
    t = a*alpha + b*beta + g*gamma + s*sigma (sigma = seal = open)."""
    cost = algorithm_cost("allreduce", alg or bench_algorithm(nbytes, p))
    a = b = g = sg = 0.0
    for st in cost.steps(float(nbytes), topo or Topology(1, p)):
        k = max(1, math.ceil(st.nbytes / prm_chunk)) if st.nbytes > 0 else 0
        a += k * st.count
        b += st.nbytes * st.count
        g += st.nbytes * st.count if st.reduce else 0.0
        sg += st.nbytes * st.count * ((1 if st.seal else 0) + (1 if st.open else 0))
    sg += cost.sealed_once(nbytes, p)  # encrypt-once seal of the allgather phase
    return a, b, g, sg if secure_stage else 0.0


def cases(doc: dict) -> list[tuple[dict, Topology]]:
    """(bench result, its topology) pairs in a result file: a ``seccomm bench --json`` result
    is one node of ``world_size`` ranks; a ``seccomm cluster --json`` result (key ``runs``,
    docs/scaling.md) gives each run on the plain links, its hosts as nodes and its racks as
    leaves of ``hosts_per_rack`` with the uplinks' oversubscription.  ``KeyError`` when malformed."""
    if "runs" not in doc:
        return [(doc, Topology(1, int(doc["world_size"])))]
    out = []
    for run in doc["runs"]:
        s = run["spec"]
        if run["network"] == "plain" and run.get("bench"):
            oversub = float(s["oversubscription"]) if s["racks"] > 1 else 1.0
            out.append(
                (run["bench"], Topology(s["hosts"], s["ranks_per_host"], oversub, s["hosts_per_rack"]))
            )
    return out


def calibration_case(doc: dict) -> tuple[dict, Topology]:
    """The case of a result file to calibrate on: the one with the fewest ranks above one (of
    a lab sweep: its 2-host run).  ``ValueError`` when there is none."""
    multi = [c for c in cases(doc) if c[1].p > 1]
    if not multi:
        raise ValueError("no bench result with more than one rank to calibrate on")
    return min(multi, key=lambda c: c[1].p)


def calibrate(doc: dict, gamma: float, min_bytes: int = 0, topo: Topology | None = None) -> dict:
    """Fit alpha, beta and gamma (relative least squares over sizes) from the ``none`` rows of a
    ``seccomm bench --json`` allreduce result run on ``topo`` (default: one node) — ``gamma``
    (measured) is the fallback when the sizes cannot separate it from beta — then sigma per
    suite from its rows; returns a calibration dict (``Params`` JSON plus ``suites`` and the
    provenance of every number).  Across nodes with one rank each, every step is inter-node:
    the fitted link is the inter-node one (and is copied to intra)."""
    import numpy as np

    rows = [
        r for r in doc.get("rows", []) if r.get("collective") == "allreduce" and r["size_bytes"] >= min_bytes
    ]
    if not rows:
        raise ValueError("no allreduce rows in the bench result")
    p = int(doc["world_size"])
    chunk = int(doc["config"].get("chunk_bytes", MIB))
    base = [r for r in rows if r["variant"] == "none"]
    if len(base) < 2:
        raise ValueError("need the 'none' variant at two sizes or more to fit alpha and beta")
    F = np.array([_features(r["size_bytes"], p, chunk, False, topo, row_algorithm(r, p))[:3] for r in base])
    t = np.array([r["time_us"]["median"] * 1e-6 for r in base])
    w = 1 / np.maximum(t, 1e-9)  # relative least squares: small and large sizes count alike
    # recursive doubling (beta:gamma = 1:1) and ring (2:1) sizes make gamma identifiable
    (alpha, beta, g_fit), *_ = np.linalg.lstsq(F * w[:, None], t * w, rcond=None)
    gamma_src = "fitted jointly with alpha and beta (recursive doubling and ring sizes)"
    if not (g_fit > 0 and beta > 0):  # not identifiable from these sizes: use the measured add
        y = t - F[:, 2] * gamma
        (alpha, beta), *_ = np.linalg.lstsq(F[:, :2] * w[:, None], y * w, rcond=None)
        g_fit, gamma_src = gamma, "numpy add throughput measured at calibration time"
    alpha, beta, gamma = max(float(alpha), ALPHA_MIN), max(float(beta), BETA_MIN), float(g_fit)
    suites = {}
    for v in sorted({r["variant"] for r in rows} - {"native", "none"}):
        rs = [r for r in rows if r["variant"] == v]
        feats = [_features(r["size_bytes"], p, chunk, True, topo, row_algorithm(r, p)) for r in rs]
        plain = np.array([f[0] * alpha + f[1] * beta + f[2] * gamma for f in feats])
        meas = np.array([r["time_us"]["median"] * 1e-6 for r in rs])
        sg = np.array([f[3] for f in feats])
        ww = 1 / np.maximum(meas, 1e-9)
        sigma = float(np.sum(ww**2 * sg * (meas - plain)) / max(np.sum((ww * sg) ** 2), 1e-300))
        suites[v] = {"seal": max(sigma, 0.0), "open": max(sigma, 0.0)}
    nodes = topo.nodes if topo else 1
    src = f"least squares over {len(base)} sizes of the 'none' variant, {p} ranks, {nodes} node(s)"
    per_node = nodes > 1 and p == nodes  # one rank per node: every step crosses nodes
    fitted, copied = ("inter", "intra") if per_node else ("intra", "inter")
    return {
        "intra": {"alpha": alpha, "beta": beta},
        "inter": {"alpha": alpha, "beta": beta},
        "gamma": gamma,
        "seal": 0.0,
        "open": 0.0,
        "crypto_threads": 1,
        "chunk_bytes": chunk,
        "pipelined": False,
        "suites": suites,
        "source": {
            fitted: src,
            copied: f"copied from {fitted} ({'one rank per node' if per_node else 'placement of the fit'})",
            "gamma": gamma_src,
            "suites": "sigma per suite: least squares of (suite - none model) over sizes",
            "bench": {k: doc.get("machine", {}).get(k) for k in ("host", "utc", "git_commit")},
        },
    }


#: the lower limits :func:`calibrate` clamps a fit to (a fit that wanted less measured nothing)
ALPHA_MIN, BETA_MIN = 0.0, 1e-15
_REMEDY = "rerun the bench with more sizes (-b 8 -e 64M), more iterations (-n 200) on a quieter machine"


def limit_warnings(cal: dict, suite: str | None = None) -> list[str]:
    """One line per fitted value of calibration ``cal`` that sits at its lower limit (alpha 0,
    beta 1e-15 s/B) or per suite (only ``suite`` when given) whose seal/open fitted to zero: what
    it means and what to do.  Empty when every value was fitted inside its limits."""
    link = cal["intra"]
    out = []
    if link["alpha"] <= ALPHA_MIN:
        out.append(
            "alpha fitted to its limit 0 s: the sizes measured do not show a per-message latency above "
            f"the noise, so projections leave latency out; {_REMEDY}"
        )
    if link["beta"] <= BETA_MIN:
        out.append(
            "beta fitted to its limit 1e-15 s/B: the sizes measured do not show a cost per byte above "
            f"the noise, so projections treat the link as free; {_REMEDY}"
        )
    for name, s in sorted(cal.get("suites", {}).items()):
        if s["seal"] <= 0 and s["open"] <= 0 and suite in (None, name):
            out.append(
                f"{name}: seal/open fitted to 0 (it measured no slower than none), so projections show "
                f"1.00x for it; {_REMEDY}, or project with --preset"
            )
    return out


def params_for(cal: dict, suite: str) -> Params:
    """Params of a calibration with the seal/open rates of ``suite`` (:func:`for_suite`)."""
    return for_suite(Params.from_json(cal), suite)


def validate(doc: dict, cal: dict, topo: Topology | None = None) -> list[dict]:
    """Predicted vs measured median for every allreduce row (not native) of a bench result run
    on ``topo`` (default: one node of ``world_size`` ranks), under the result's encrypt policy."""
    p = int(doc["world_size"])
    topo = topo or Topology(1, p)
    encrypt = doc.get("config", {}).get("encrypt", "all")
    out = []
    for r in doc.get("rows", []):
        if r.get("collective") != "allreduce" or r["variant"] == "native":
            continue
        prm = params_for(cal, r["variant"])
        secure = r["variant"] != "none"
        alg = row_algorithm(r, p)
        pred = predict("allreduce", alg, r["size_bytes"], prm, topo, secure, encrypt)
        meas = r["time_us"]["median"] * 1e-6
        out.append(
            {
                "size_bytes": r["size_bytes"],
                "variant": r["variant"],
                "ranks": p,
                "nodes": topo.nodes,
                "measured_us": meas * 1e6,
                "predicted_us": pred * 1e6,
                "error": (pred - meas) / meas if meas > 0 else float("nan"),
            }
        )
    return out
