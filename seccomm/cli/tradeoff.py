"""``seccomm tradeoff``: what each way of protecting gradient traffic costs a training step at the
user's scale, and what it protects against (:mod:`seccomm.tradeoff`)."""

from __future__ import annotations

import csv
import json
import sys

from .. import costmodel, gradients, tradeoff
from .project import _load, parse_nodes
from .usage import PLOT_HINT, UsageError, check_file, check_outputs, float_in, int_in

HELP = "Compare ways of protecting gradient traffic: step time at scale and what each protects."
DEFAULT_PRESET = "nvlink4-ndr400"
DEFAULT_NODES = "1,8,64,512"
MAX_RANKS = 1 << 16  #: the most ranks seccomm runs (its collectives' limit)
#: the columns of --csv and of --json's rows, in order (docs/tradeoff.md describes each)
COLUMNS = (
    "option", "family", "where", "nodes", "gpus_per_node", "ranks", "comm_ms", "step_ms",
    "plaintext_step_ms", "increase_pct", "bound", "algorithms", "figures", "bases", "sources",
)  # fmt: skip


def add_arguments(p) -> None:
    names = ", ".join(gradients.workload_names())
    p.add_argument("--workload", help=f"a named model ({names}); or give --parameters")
    p.add_argument("--parameters", type=int_in(1), help="your model's parameter count (float32 gradients)")
    p.add_argument(
        "--bucket-mb",
        type=float_in(0, lo_open=True),
        help="DDP's bucket_cap_mb (default: DDP's, 25 and a first bucket of 1)",
    )
    p.add_argument(
        "--step-ms",
        type=float_in(0),
        help="a step's compute time [ms] (forward and backward); default 0: communication only",
    )
    p.add_argument(
        "--step-from",
        metavar="FILE",
        help="the compute time from a seccomm train --json result (DDP's default hook's median step)",
    )
    p.add_argument("--nodes", help=f"node counts, a comma list or 1,2,4,...,512 (default {DEFAULT_NODES})")
    p.add_argument(
        "--gpus-per-node", type=int_in(1, 1 << 10), default=8, help="ranks (GPUs) per node (default 8)"
    )
    p.add_argument(
        "--preset",
        choices=list(costmodel.PRESETS),
        help=f"network and GPU preset (default {DEFAULT_PRESET}); its link figures are published (vendor)",
    )
    p.add_argument(
        "--calibration", metavar="FILE", help="links from a calibration (seccomm project --calibrate)"
    )
    p.add_argument(
        "--nics-per-node",
        type=int_in(1, 64),
        help="network links of a node (default: one per GPU where the preset's link is per GPU, else 1)",
    )
    p.add_argument(
        "--crypto-threads",
        type=int_in(1, 256),
        default=8,
        help="CPU crypto threads per rank for seccomm (default 8)",
    )
    p.add_argument(
        "--measure",
        action="store_true",
        help="first measure this machine's crypto rates (and, where the lab can run, wireguard-go through "
        "seccomm cluster) and use them in place of the figures they replace",
    )
    p.add_argument("--json", metavar="FILE", help="write the scenario, figures, sources and rows as JSON")
    p.add_argument("--csv", metavar="FILE", help="write one row per option and node count")
    p.add_argument(
        "--html",
        metavar="FILE",
        help="write a self-contained page: the table, a plot against node count, the threat matrix",
    )


def run(a, argv) -> int:
    """Print the table (and write the files asked for); ``UsageError`` before any work."""
    if bool(a.workload) == bool(a.parameters):
        raise UsageError("give --workload NAME or --parameters N (one of them)")
    if a.calibration and a.preset:
        raise UsageError("give --calibration or --preset, not both")
    if a.step_from and a.step_ms is not None:
        raise UsageError("give --step-ms or --step-from, not both")
    nodes = parse_nodes(a.nodes if a.nodes is not None else DEFAULT_NODES)
    if nodes[-1] * a.gpus_per_node > MAX_RANKS:
        raise UsageError(
            f"--nodes {nodes[-1]} x --gpus-per-node {a.gpus_per_node} is {nodes[-1] * a.gpus_per_node:,} "
            f"ranks; seccomm runs up to {MAX_RANKS:,}"
        )
    step_s, step_said = (a.step_ms or 0.0) / 1e3, ""
    if a.step_from:
        doc = _load(a.step_from, "train")
        try:
            step_s = float(doc["variants"]["default"]["step_ms_median"]) / 1e3
        except (KeyError, TypeError, ValueError):
            raise UsageError(f"--step-from {a.step_from}: no median step of the default hook in it") from None
        step_said = (
            f" (measured: {a.step_from}, the default hook's median step, its own communication included)"
        )
    try:
        if a.workload:
            w = gradients.workload_buckets(a.workload, a.bucket_mb)
        else:
            w = gradients.uniform_buckets(a.parameters, a.bucket_mb)
    except ValueError as e:
        raise UsageError(str(e)) from None
    prm, network = _network(a)
    nics = a.nics_per_node
    if nics is None:
        per_gpu = not a.calibration and "per GPU" in prm.source.get("inter", "")
        nics = min(a.gpus_per_node, 64) if per_gpu else 1
    if nics > a.gpus_per_node:
        raise UsageError(
            f"--nics-per-node {nics} is more than --gpus-per-node {a.gpus_per_node}: a rank drives one link"
        )

    def outputs():
        for opt, path in (("--json", a.json), ("--csv", a.csv), ("--html", a.html)):
            if path:
                check_file(opt, path)
        if a.html:
            try:
                import matplotlib  # noqa: F401
            except ImportError:
                raise UsageError(PLOT_HINT.replace("--plot", "--html")) from None

    check_outputs(outputs)
    figs, said = tradeoff.figures(), []
    if a.calibration:  # (its CPU crypto rate, measured where the calibration's bench ran)
        unit = figs["cpu_aes_gcm"].unit
        source = f"{a.calibration} (seccomm project --calibrate: AES-256-GCM's seal rate of that bench run)"
        figs["cpu_aes_gcm"] = tradeoff.Figure("cpu_aes_gcm", 1 / prm.seal, unit, "calibrated", source)
    if a.measure:
        figs, said = _measure(figs)
    sc = tradeoff.Scenario(
        w["buckets"], step_s, a.gpus_per_node, prm, network, a.crypto_threads, figs, step_said, nics
    )
    rows = tradeoff.evaluate(sc, nodes)
    for r in rows:
        used = [sc.figures[k] for k in r["figures"]]
        r["bases"] = [f.basis for f in used]
        r["sources"] = [f.source for f in used]
    if a.csv:  # (the files first: a reader of the table may stop early, as `| head` does)
        with open(a.csv, "w", newline="") as f:
            out = csv.writer(f)
            out.writerow(COLUMNS)
            for r in rows:
                out.writerow([";".join(v) if isinstance(v, list) else v for v in (r[c] for c in COLUMNS)])
    doc = _document(w, sc, nodes, rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(doc, f, indent=1)
    if a.html:
        with open(a.html, "w", encoding="utf-8") as f:
            f.write(tradeoff.to_html(doc))
    _print(a, w, sc, nodes, rows)
    for line in said:
        print(f"# --measure: {line}")
    for line in _notes(sc):
        print(f"# note: {line}")
    return 0


def _measure(figs: dict) -> tuple[dict, list[str]]:
    """This machine's figures in place of the ones they replace, and what was replaced (said on
    standard error as it goes, and returned for the table's foot)."""
    err = sys.stderr
    print("seccomm tradeoff: measuring this machine's crypto rates ...", file=err, flush=True)
    figs, said = tradeoff.measure_crypto(figs)
    print(
        "seccomm tradeoff: measuring wireguard-go on 2 emulated hosts (seccomm cluster) ...",
        file=err,
        flush=True,
    )
    figs, more, why = tradeoff.measure_tunnel(figs)
    said += [f"replaced {line}" for line in more]
    said = [s if s.startswith("replaced") else f"replaced {s}" for s in said]
    if why:
        said.append(f"not measured: the tunnel rows keep their figures ({why})")
    return figs, said


def _notes(sc) -> list[str]:
    """What a reader must know of this scenario: over InfiniBand links (a preset that says so),
    the tunnels and Ethernet options do not carry the job's RDMA traffic."""
    if "InfiniBand" not in sc.network and " NDR" not in sc.network:
        return []
    return [
        "the host tunnels, IPsec offload, MACsec, PSP and UET TSS protect Ethernet/IP traffic; over this "
        "network's InfiniBand links a job's RDMA traffic bypasses them (their rows show the links' "
        "time): give an Ethernet preset (--preset roce-200, eth-100) or your calibration"
    ]


def _network(a) -> tuple:
    """(parameters, label) of the links: a calibration (calibrated) or a preset (published)."""
    if a.calibration:
        from .. import calibration

        try:
            prm = calibration.params_for(_load(a.calibration, "calibration"), "aes-256-gcm")
        except ValueError as e:
            raise UsageError(f"{a.calibration}: {e}") from None
        return prm, f"calibrated: {a.calibration} (seccomm project --calibrate, docs/model.md)"
    name = a.preset or DEFAULT_PRESET
    prm = costmodel.get_preset(name)
    links = "; ".join(f"{k} {v}" for k, v in prm.source.items() if k in ("intra", "inter"))
    return prm, f"published: preset {name} ({links}; seccomm.costmodel.PRESETS, docs/model.md)"


def _document(w, sc, nodes, rows) -> dict:
    d = tradeoff.data()
    used = sorted({k for r in rows for k in r["figures"]})
    return {
        "scenario": {
            "workload": w["name"],
            "parameters": w["parameters"],
            "gradient_bytes": w["gradient_bytes"],
            "buckets": len(w["buckets"]),
            "buckets_approximate": bool(w.get("approximate")),
            "compute_ms": sc.compute_s * 1e3,
            "compute_source": sc.compute_source,
            "backward_share": tradeoff.BACKWARD_SHARE,
            "backward_source": tradeoff.BACKWARD_SOURCE,
            "gpus_per_node": sc.gpus_per_node,
            "nodes": nodes,
            "network": sc.network,
            "crypto_threads": sc.crypto_threads,
            "nics_per_node": sc.nics_per_node,
        },
        "figures": {k: vars(sc.figures[k]) for k in used},
        "sources": d["sources"],
        "threats": d["threats"],
        "protects": {o["name"]: o["protects"] for o in d["options"]},
        "rows": [{c: r[c] for c in COLUMNS} for r in rows],
        "notes": _notes(sc),
    }


_BOUND = "bound: what limits it at the most nodes"


def _n(k: int, what: str) -> str:
    """``k`` ``what``, plural from 2 (1 GPU, 8 GPUs)."""
    return f"{k:,} {what}{'s' if k != 1 else ''}"


def _print(a, w, sc, nodes, rows) -> None:
    p = print
    approx = " (buckets of the cap: no tensor sizes)" if w.get("approximate") else ""
    compute = (
        f"{sc.compute_s * 1e3:g} ms of compute a step{sc.compute_source}"
        if sc.compute_s
        else "communication only (no --step-ms)"
    )
    p(
        f"# seccomm tradeoff: {w['name']}, {w['parameters']:,} parameters, {w['gradient_bytes']:,} B of "
        f"float32 gradients in {_n(len(w['buckets']), 'DDP bucket')}{approx}; "
        f"{_n(sc.gpus_per_node, 'GPU')} per node; {compute}"
    )
    p(f"# network: {sc.network}; {_n(sc.nics_per_node, 'link')} per node")
    p(f"# per node count: the step's time and its increase over plaintext (a factor from 2x); {_BOUND}")
    fig_ids: dict[str, int] = {}
    head = f"{'option':<38} " + " ".join(f"{f'{n} node' + ('s' if n > 1 else ''):>19}" for n in nodes)
    p(head + f"  {'bound':<22} figures")
    by = {}
    for r in rows:
        by.setdefault(r["option"], []).append(r)
    for name, rs in by.items():
        cells = " ".join(
            f"{tradeoff.format_ms(r['step_ms']):>11} {tradeoff.format_increase(r['increase_pct']):>7}"
            for r in rs
        )
        refs = []
        for k in rs[0]["figures"]:
            fig_ids.setdefault(k, len(fig_ids) + 1)
            refs.append(f"[{fig_ids[k]}]")
        p(f"{name:<38} {cells}  {rs[-1]['bound']:<22} {' '.join(refs) or '-'}")
    p("# figures (measured here / calibrated / published), each with its source:")
    d = tradeoff.data()
    for k, i in fig_ids.items():
        f = sc.figures[k]
        src = d["sources"].get(f.source, {"cite": f.source, "url": ""})
        stated = f' "{f.as_stated}"' if f.as_stated else ""
        p(f"#  [{i}] {f.basis}: {tradeoff.fig_value(vars(f))}{stated}; {src['cite']} {src['url']}".rstrip())
    p(f"#  backward pass: {tradeoff.BACKWARD_SHARE:.3g} of a step's compute ({tradeoff.BACKWARD_SOURCE})")
    _print_threats(d)


def _print_threats(d: dict) -> None:
    short = {"yes": "yes", "not stated": "n/s", "no": "no", "partial": "part"}
    keys = [t["key"] for t in d["threats"]]
    print("# what each option protects against (yes / no / part = partial / n/s = not stated; "
          "--json and --html give every cell's reason and source):")  # fmt: skip
    print(f"{'option':<38} " + " ".join(f"{k:>15}" for k in keys))
    for o in d["options"]:
        cells = []
        for k in keys:
            text = o["protects"][k][0]
            word = next((v for w, v in short.items() if text.startswith(w)), text[:6])
            cells.append(f"{word:>15}")
        print(f"{o['name']:<38} " + " ".join(cells))
    sys.stdout.flush()
