"""``seccomm project``: predicted cost of secure collectives at scale, calibration and validation."""

from __future__ import annotations

import csv
import json

from .usage import UsageError, size_arg

HELP = "Project the cost of secure collectives to many nodes (alpha-beta-gamma model)."
NODES_DEFAULT = ",".join(str(2**i) for i in range(12))  # 1 .. 2048 nodes


def add_arguments(p) -> None:
    """The projection's options on parser ``p``."""
    p.add_argument("--preset", help="hardware preset (see docs/model.md); default ib-ndr400")
    p.add_argument("--calibration", metavar="FILE", help="calibration JSON (from --calibrate)")
    p.add_argument("--nodes", default=NODES_DEFAULT, help="node counts, comma list (default 1..2048)")
    p.add_argument("--ranks-per-node", type=int, default=8)
    p.add_argument("--message", default="25MiB", help="S in bytes (K/M/G suffixes; default 25MiB)")
    p.add_argument("--collective", default="allreduce")
    p.add_argument("--suite", default="aes-256-gcm")
    p.add_argument("--encrypt", default="all", choices=("all", "inter-node"))
    p.add_argument("--oversubscription", type=float, default=1.0, help="fat-tree taper (1 = full bisection)")
    p.add_argument("--jitter-us", type=float, default=0.0, help="per-step std deviation of a rank's delay")
    p.add_argument("--crypto-threads", type=int, help="override the preset's crypto threads per rank")
    p.add_argument("--json", metavar="PATH")
    p.add_argument("--csv", metavar="PATH")
    p.add_argument("--plot", metavar="PATH.png")
    p.add_argument("--calibrate", metavar="RESULTS.json", help="fit a calibration from seccomm bench --json")
    p.add_argument("--out", metavar="CAL.json", help="where --calibrate writes (default stdout)")
    p.add_argument("--validate", metavar="RESULTS.json", help="compare predictions with a bench result")


def _load(path: str) -> dict:
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        raise UsageError(f"cannot read {path}: {e}") from None


def _gamma_here() -> float:
    """Seconds per byte of numpy's float32 add on this machine (the reduction cost)."""
    import time

    import numpy as np

    a, b = np.ones(1 << 20, np.float32), np.ones(1 << 20, np.float32)
    ts = []
    for _ in range(20):
        t0 = time.perf_counter()
        np.add(a, b, out=b)
        ts.append(time.perf_counter() - t0)
    return sorted(ts)[len(ts) // 2] / a.nbytes


def run(a, argv) -> int:
    """Calibrate (``--calibrate``), validate (``--validate``) or print the projection table;
    returns the exit status, ``UsageError`` on bad values."""
    if a.calibrate:
        return _calibrate(a)
    if a.calibration and a.preset:
        raise UsageError("give --calibration or --preset, not both")
    if a.validate:
        if not a.calibration:
            raise UsageError("--validate needs --calibration FILE (make one with --calibrate)")
        return _validate(_load(a.validate), _load(a.calibration))
    return _project(a)


def _calibrate(a) -> int:
    """Fit a calibration to a bench result (of a ``seccomm cluster`` sweep: its run with the
    fewest ranks, on its hosts); write it to ``--out`` or standard output."""
    from .. import costmodel

    try:
        doc, topo = costmodel.calibration_case(_load(a.calibrate))
    except (KeyError, ValueError) as e:
        raise UsageError(f"cannot calibrate on {a.calibrate}: {e}") from None
    cal = costmodel.calibrate(doc, gamma=_gamma_here(), topo=topo)
    text = json.dumps(cal, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        print(text)
    return 0


def _project(a) -> int:
    """The projection table, one row per node count, and the files asked for."""
    from .. import costmodel

    nodes = _nodes(a)
    if a.collective not in costmodel.COLLECTIVES:
        raise UsageError(f"unknown collective {a.collective!r}; allowed: {', '.join(costmodel.COLLECTIVES)}")
    nbytes = size_arg(a.message)
    try:
        prm = _params(a)
        rows = costmodel.sweep(
            prm,
            nodes,
            a.ranks_per_node,
            nbytes,
            a.collective,
            a.encrypt,
            a.oversubscription,
            a.jitter_us * 1e-6,
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    _print_rows(a, nbytes, rows)
    _write(a, prm, rows)
    return 0


def _nodes(a) -> list[int]:
    """``--nodes`` as sorted distinct node counts (and ``--ranks-per-node``), all >= 1."""
    try:
        nodes = sorted({int(x) for x in a.nodes.split(",") if x.strip()})
    except ValueError:
        raise UsageError(f"--nodes must be a comma list of integers, got {a.nodes!r}") from None
    if not nodes or nodes[0] < 1 or a.ranks_per_node < 1:
        raise UsageError("--nodes and --ranks-per-node must be >= 1")
    return nodes


def _params(a):
    """Model parameters from ``--calibration`` or ``--preset``; ``ValueError`` on a bad one."""
    from .. import costmodel

    if a.calibration:
        prm = costmodel.params_for(_load(a.calibration), a.suite)
    else:
        prm = costmodel.get_preset(a.preset or "ib-ndr400")
    if a.crypto_threads:
        prm = costmodel.replace(prm, crypto_threads=a.crypto_threads)
    return prm


def _print_rows(a, nbytes: int, rows: list[dict]) -> None:
    print(
        f"# seccomm project: {a.collective} of {nbytes} B, {a.ranks_per_node} ranks/node, suite {a.suite}, "
        f"encrypt {a.encrypt}, oversubscription {a.oversubscription}, "
        f"{'calibration ' + a.calibration if a.calibration else 'preset ' + (a.preset or 'ib-ndr400')}"
    )
    print(
        f"# {'nodes':>6} {'ranks':>7} {'algorithm':>18} {'plain [us]':>12} {'secure [us]':>12} "
        f"{'overhead':>9} {'busbw plain':>12} {'busbw secure':>13} {'eff plain':>10} {'eff secure':>11}"
    )
    for r in rows:
        print(
            f"  {r['nodes']:>6} {r['ranks']:>7} {r['algorithm_secure']:>18} {r['plain_us']:12.1f} "
            f"{r['secure_us']:12.1f} {r['overhead_x']:8.2f}x {r['busbw_plain_gbps']:12.1f} "
            f"{r['busbw_secure_gbps']:13.1f} {r['efficiency_plain']:10.2f} {r['efficiency_secure']:11.2f}"
        )


def _write(a, prm, rows: list[dict]) -> None:
    """``--json`` (parameters and rows), ``--csv`` (rows), ``--plot`` (PNG)."""
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"params": prm.to_json(), "rows": rows}, f, indent=1)
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    if a.plot:
        _plot(a.plot, rows)


def _validate(doc, cal) -> int:
    import numpy as np

    from .. import costmodel

    try:
        runs = [(d, topo) for d, topo in costmodel.cases(doc) if topo.p > 1 or "runs" not in doc]
        res = [r for d, topo in runs for r in costmodel.validate(d, cal, topo)]  # 1 rank: no traffic
    except (KeyError, ValueError) as e:
        raise UsageError(f"cannot validate: {e}") from None
    print(f"# validation: {len(res)} (size, variant) points, ranks {sorted({r['ranks'] for r in res})}")
    print(
        f"# {'nodes':>5} {'ranks':>5} {'size [B]':>12} {'variant':>18} {'measured [us]':>14} "
        f"{'predicted [us]':>15} {'error':>8}"
    )
    for r in res:
        print(
            f"  {r['nodes']:>5} {r['ranks']:>5} {r['size_bytes']:>12} {r['variant']:>18} "
            f"{r['measured_us']:14.1f} {r['predicted_us']:15.1f} {r['error'] * 100:7.1f}%"
        )
    groups = [("all sizes", res), (">= 64 KiB", [r for r in res if r["size_bytes"] >= 65536])]
    if len({r["nodes"] for r in res}) > 1:  # a lab sweep: each node count on its own too
        big = groups[1][1]
        for n in sorted({r["nodes"] for r in big}):
            groups.append((f"{n} nodes", [r for r in big if r["nodes"] == n]))
    for label, pts in groups:
        e = np.abs([r["error"] for r in pts]) * 100
        if len(e):
            print(
                f"# |error| {label:>10}: median {np.median(e):.1f}%  p90 {np.percentile(e, 90):.1f}%  "
                f"max {e.max():.1f}%  (n={len(e)})"
            )
    return 0


def _plot(path, rows):
    try:
        import matplotlib
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'seccomm[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    x = [r["ranks"] for r in rows]
    a1.plot(x, [r["overhead_x"] for r in rows], marker="o")
    a1.set_ylabel("secure / plain time [x]")
    a2.plot(x, [r["efficiency_plain"] for r in rows], marker="o", label="plain")
    a2.plot(x, [r["efficiency_secure"] for r in rows], marker="o", label="secure")
    a2.set_ylabel("scaling efficiency (busbw / smallest)")
    a2.legend()
    for ax in (a1, a2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks (GPUs)")
        ax.grid(True, alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
