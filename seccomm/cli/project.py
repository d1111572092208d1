"""``seccomm project``: predicted cost of secure collectives at scale, calibration and validation.

Four modes: the projection table (default), ``--calibrate`` (fit a calibration to a bench
result), ``--validate`` (compare a calibration's predictions with a bench result) and
``--diagnose`` (where each measured row's time goes, what limits scaling, the HTML report and the
rows for BI tools: :mod:`seccomm.lab.diagnose`, :mod:`seccomm.lab.report`).  Options of
another mode are refused (an option given must change what it claims to change), every file is
checked first (inputs: the right kind of JSON; outputs: writable), all before any work.
"""

from __future__ import annotations

import csv
import json
import sys

from .. import costmodel
from .. import calibration
from ..collectives import COLLECTIVES
from ..suites import SUITES
from .usage import (
    PLOT_HINT,
    UsageError,
    check_file,
    check_outputs,
    flag,
    float_in,
    given,
    int_in,
    plot_suffixes,
    size_in,
)

HELP = "Project the cost of secure collectives to many nodes (alpha-beta-gamma model)."
DEFAULT_PRESET = "ib-ndr400"
NODES_DEFAULT = ",".join(str(2**i) for i in range(12))  # 1 .. 2048 nodes
#: the projection's options and their defaults (parsed with default None: given or not is known)
DEFAULTS = {
    "nodes": NODES_DEFAULT,
    "ranks_per_node": 8,
    "message": 25 << 20,
    "collective": "allreduce",
    "suite": "aes-256-gcm",
    "encrypt": "all",
    "oversubscription": 1.0,
    "jitter_us": 0.0,
}
PROJECTION_ONLY = (*DEFAULTS, "preset", "crypto_threads", "json", "csv", "plot", "identity")
MODES = ("calibrate", "validate", "diagnose")


def add_arguments(p) -> None:
    """The projection's options on parser ``p`` (defaults None: :data:`DEFAULTS` fills them)."""
    presets = "; ".join(costmodel.describe_preset(n) for n in costmodel.PRESETS)
    p.add_argument(
        "--preset",
        choices=list(costmodel.PRESETS),
        help=f"hardware preset (default {DEFAULT_PRESET}): {presets}",
    )
    p.add_argument(
        "--calibration",
        metavar="FILE",
        help="model parameters from a calibration JSON (--calibrate) instead of a preset",
    )
    p.add_argument(
        "--nodes", help="node counts: a comma list, or a progression 1,2,4,...,2048 (default 1,2,4,...,2048)"
    )
    p.add_argument("--ranks-per-node", type=int_in(1, 1 << 16), help="ranks (GPUs) per node (default 8)")
    p.add_argument(
        "--message",
        type=size_in(1),
        help="S in bytes as nccl-tests counts it (each rank's array; the whole gathered or "
        "scattered array for allgather, reduce_scatter, alltoall), K/M/G suffixes (default 25MiB)",
    )
    p.add_argument(
        "--collective", choices=list(COLLECTIVES), help="collective to project (default allreduce)"
    )
    p.add_argument(
        "--suite",
        choices=list(SUITES),
        help="suite whose seal/open rates apply; none: no crypto, 1.00x (default aes-256-gcm)",
    )
    p.add_argument(
        "--encrypt", choices=("all", "inter-node"), help="all hops, or only hops between nodes (default all)"
    )
    p.add_argument(
        "--oversubscription",
        type=float_in(1, 1e6),
        help="fat-tree taper above a leaf switch of 32 nodes; 1 = full bisection (default 1)",
    )
    p.add_argument(
        "--jitter-us",
        type=float_in(0, 1e9),
        help="std deviation of one rank's delay per step [us] (default 0)",
    )
    p.add_argument(
        "--identity",
        choices=("psk", "psk-dhe", "x509"),
        help="also project the setup of a SecureComm under this identity/key exchange, and with x509 "
        "the origin proofs per op (seccomm.identitycost)",
    )
    p.add_argument(
        "--crypto-threads",
        type=int_in(1, 1 << 12),
        help="crypto threads per rank (default: the preset's or calibration's)",
    )
    p.add_argument("--json", metavar="PATH", help="write the parameters and rows as JSON")
    p.add_argument("--csv", metavar="PATH", help="write one line per node count")
    p.add_argument(
        "--plot",
        metavar="PATH.png",
        help="plot overhead, busbw and scaling efficiency vs ranks (needs matplotlib)",
    )
    p.add_argument(
        "--calibrate", metavar="RESULTS.json", help="fit a calibration to a seccomm bench --json result"
    )
    p.add_argument("--out", metavar="CAL.json", help="where --calibrate writes (default standard output)")
    p.add_argument(
        "--validate",
        metavar="RESULTS.json",
        help="compare --calibration's predictions with a seccomm bench --json result",
    )
    p.add_argument(
        "--diagnose",
        metavar="RESULTS.json",
        help="split each measured row of a seccomm cluster (or bench) --json result into latency, "
        "bandwidth, reduction, crypto and waiting with --calibration's model; say what limits "
        "scaling per host count; --html REPORT.html, --csv/--json ROWS for BI tools",
    )
    p.add_argument("--html", metavar="REPORT.html", help="with --diagnose: write the self-contained report")
    # fmt: skip


def run(a, argv) -> int:
    """Calibrate (``--calibrate``), validate (``--validate``) or print the projection table;
    returns the exit status, ``UsageError`` on bad values (before any work)."""
    modes = [m for m in MODES if getattr(a, m)]
    if len(modes) > 1:
        raise UsageError(f"give {' or '.join(map(flag, modes))}, not both")
    if modes:
        mode = modes[0]
        allowed = {"calibrate": ("out",), "validate": ("calibration",),
                   "diagnose": ("calibration", "json", "csv", "html")}[mode]  # fmt: skip
        extra = [x for x in given(a, *PROJECTION_ONLY, "calibration", "out", "html") if x not in allowed]
        if extra:
            raise UsageError(f"{', '.join(map(flag, extra))} does not apply to {flag(mode)}")
    elif a.out:
        raise UsageError("--out is where --calibrate writes; use --json/--csv for the projection")
    elif a.html:
        raise UsageError("--html is the report of --diagnose")
    if a.calibrate:
        return _calibrate(a)
    if a.validate:
        if not a.calibration:
            raise UsageError("--validate needs --calibration FILE (make one with --calibrate)")
        return _validate(_load(a.validate, "bench", "sweep"), _load(a.calibration, "calibration"))
    if a.diagnose:
        return _diagnose(a)
    return _project(a)


# -- input files ------------------------------------------------------------------------------------
#: kind -> (what it is, keys that make it one)
KINDS = {
    "bench": ("a seccomm bench --json result", ("config", "world_size", "rows")),
    "sweep": ("a seccomm cluster --json result", ("runs",)),
    "calibration": (
        "a calibration (seccomm project --calibrate)",
        ("intra", "inter", "gamma", "seal", "open"),
    ),
    "projection": ("a seccomm project --json result", ("params", "rows")),
    "pytest-benchmark": ("a pytest-benchmark result", ("benchmarks",)),
    "train": ("a seccomm train --json result", ("variants", "steps")),
}


def kind_of(doc) -> str | None:
    """Which of :data:`KINDS` a loaded JSON document is, or None."""
    if isinstance(doc, dict):
        for kind, (_, keys) in KINDS.items():
            if all(k in doc for k in keys):
                return kind
    return None


def _load(path: str, kind: str, *also: str) -> dict:
    """The JSON document at ``path``; ``UsageError`` when unreadable or not of ``kind`` (or one
    of ``also``)."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise UsageError(f"cannot read {path}: {e}") from None
    except ValueError as e:  # (JSONDecodeError, UnicodeDecodeError)
        raise UsageError(f"{path} is not JSON ({e}): expected {KINDS[kind][0]}") from None
    found = kind_of(doc)
    if found != kind and found not in also:
        what = KINDS[found][0] if found else f"JSON without the keys {', '.join(KINDS[kind][1])}"
        raise UsageError(f"{path}: expected {KINDS[kind][0]}, found {what}")
    return doc


def _calibrate(a) -> int:
    """Fit a calibration to a bench result (of a ``seccomm cluster`` sweep: its run with the
    fewest ranks, on its hosts); write it to ``--out`` or standard output."""
    doc = _load(a.calibrate, "bench", "sweep")
    if a.out:
        check_file("--out", a.out)
    try:
        doc, topo = calibration.calibration_case(doc)
        cal = calibration.calibrate(doc, gamma=_gamma_here(), topo=topo)
    except (KeyError, ValueError) as e:
        raise UsageError(f"cannot calibrate from {a.calibrate}: {e}") from None
    for w in calibration.limit_warnings(cal):
        print(f"seccomm project: warning: {w}", file=sys.stderr, flush=True)
    text = json.dumps(cal, indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
        print(f"# calibration written to {a.out} (use it with --calibration {a.out})")
    else:
        print(text)
    return 0


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


# -- the projection -------------------------------------------------------------------------------
def _project(a) -> int:
    """The projection table, one row per node count, and the files asked for."""
    if a.calibration and a.preset:
        raise UsageError("give --calibration or --preset, not both")
    for k, v in DEFAULTS.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    nodes = parse_nodes(a.nodes)
    prm = _params(a)
    check_outputs(lambda: _check_outputs(a))
    try:
        topo = (a.ranks_per_node, a.message, a.collective, a.encrypt, a.oversubscription, a.jitter_us * 1e-6)
        rows = costmodel.sweep(prm, nodes, *topo)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if a.identity:
        from ..identitycost import annotate

        annotate(rows, a.collective, a.message, a.identity, prm)
    _write(a, prm, rows)  # (the files first: a reader of the table may stop early, as `| head` does)
    _print_rows(a, rows)
    return 0


def _check_outputs(a) -> None:
    for opt, path in (("--json", a.json), ("--csv", a.csv)):
        if path:
            check_file(opt, path)
    if a.plot:
        check_file("--plot", a.plot, plot_suffixes())


def parse_nodes(text: str) -> list[int]:
    """Node counts from ``1,4,64`` or a progression ``1,2,4,...,2048`` / ``8,16,24,...,64`` (three
    terms or more before ``...``, geometric with an integer ratio or arithmetic, ending on a term);
    sorted, distinct, each >= 1.  ``UsageError`` otherwise."""
    parts = [x.strip() for x in text.split(",") if x.strip()]
    try:
        if "..." in parts:
            return _progression(parts)
        nodes = sorted({int(x) for x in parts})
    except ValueError:
        raise UsageError(
            f"--nodes must be a comma list of integers or a progression like 1,2,4,...,2048, got {text!r}"
        ) from None
    if not nodes or nodes[0] < 1:
        raise UsageError(f"--nodes must be >= 1, got {text!r}")
    return nodes


def _progression(parts: list[str]) -> list[int]:
    i = parts.index("...")
    head, last = [int(x) for x in parts[:i]], [int(x) for x in parts[i + 1 :]]
    shown = ",".join(parts)
    if len(head) < 3 or len(last) != 1 or head[0] < 1:
        raise UsageError(f"--nodes {shown}: give three terms (>= 1) or more before '...' and one after")
    steps = {b - a for a, b in zip(head, head[1:])}
    ratios = {b / a for a, b in zip(head, head[1:])}
    if len(ratios) == 1 and (r := ratios.pop()) == int(r) and r > 1:
        nxt = lambda v: v * int(r)  # noqa: E731
    elif len(steps) == 1 and (d := steps.pop()) > 0:
        nxt = lambda v: v + d  # noqa: E731
    else:
        raise UsageError(
            f"--nodes {shown}: the terms before '...' are neither geometric (integer ratio) nor arithmetic"
        )
    out = [head[0]]
    while out[-1] < last[0]:
        out.append(nxt(out[-1]))
    if out[-1] != last[0] or out[: len(head)] != head:
        raise UsageError(
            f"--nodes {shown}: {last[0]} is not a term of the progression {','.join(map(str, head))},..."
        )
    return out


def _params(a) -> costmodel.Params:
    """Model parameters from ``--calibration`` or ``--preset`` with ``--suite``'s rates and
    ``--crypto-threads``; ``UsageError`` on a bad file or a suite it has no rates for."""
    try:
        if a.calibration:
            cal = _load(a.calibration, "calibration")
            prm = calibration.params_for(cal, a.suite)
            for w in calibration.limit_warnings(cal, a.suite):  # the projection would hide them
                print(f"seccomm project: warning: {a.calibration}: {w}", file=sys.stderr, flush=True)
        else:
            prm = costmodel.for_suite(costmodel.get_preset(a.preset or DEFAULT_PRESET), a.suite)
    except ValueError as e:
        raise UsageError(f"{a.calibration + ': ' if a.calibration else ''}{e}") from None
    return costmodel.replace(prm, crypto_threads=a.crypto_threads) if a.crypto_threads else prm


def _print_rows(a, rows: list[dict]) -> None:
    src = f"calibration {a.calibration}" if a.calibration else f"preset {a.preset or DEFAULT_PRESET}"
    print(
        f"# seccomm project: {a.collective} of S = {a.message} B, {a.ranks_per_node} ranks/node, "
        f"suite {a.suite}, encrypt {a.encrypt}, oversubscription {a.oversubscription:g}, "
        f"jitter {a.jitter_us:g} us, {src}"
    )
    leaf = costmodel.Topology(1, 1).leaf_nodes
    if a.oversubscription > 1 and max(r["nodes"] for r in rows) <= leaf:
        print(
            f"# note: oversubscription applies above a leaf switch ({leaf} nodes); "
            "no node count here is above it"
        )
    print(
        "# algorithm: the one SecureComm runs at this size (a~b: the model has no cost of b, which "
        "runs; a stands in); plain: it without crypto; secure: it with crypto; overhead = secure / "
        "plain; eff: busbw / busbw at the first node count; native: the fastest modelled plaintext "
        "algorithm, as an MPI library tunes its choice; vs native = secure / native"
    )
    print(
        f"# {'nodes':>6} {'ranks':>7} {'algorithm':>15} {'plain [us]':>12} {'secure [us]':>12} "
        f"{'overhead':>9} {'busbw plain [GB/s]':>19} {'busbw secure [GB/s]':>20} {'eff plain':>10} "
        f"{'eff secure':>11} {'native':>13} {'native [us]':>12} {'vs native':>10}"
    )
    if a.identity:
        _print_identity(a, rows)
        return
    for r in rows:
        alg = r["algorithm_secure"]
        alg = alg if r["runs"] == alg else f"{alg}~{r['runs']}"
        print(
            f"  {r['nodes']:>6} {r['ranks']:>7} {alg:>15} {r['plain_us']:12.1f} "
            f"{r['secure_us']:12.1f} {r['overhead_x']:8.2f}x {r['busbw_plain_gbps']:19.1f} "
            f"{r['busbw_secure_gbps']:20.1f} {r['efficiency_plain']:10.2f} {r['efficiency_secure']:11.2f} "
            f"{r['algorithm_native']:>13} {r['native_us']:12.1f} {r['vs_native_x']:9.2f}x"
        )


def _print_identity(a, rows: list[dict]) -> None:
    """The rows with ``--identity``: the setup of one SecureComm, and under x509 the origin
    proofs per op (seccomm.identitycost)."""
    from ..identitycost import RATES

    print(
        f"# --identity {a.identity}: setup = one SecureComm's construction (network + CPU, every rank in "
        f"parallel); proofs = what origin proofs add to one op (x509, 3 ranks or more, group frames: "
        f"allgather, ring allreduce, bcast); x509 overhead = (secure + proofs) / plain. Rates: {RATES.source}"
    )
    print(
        f"# {'nodes':>6} {'ranks':>7} {'algorithm':>15} {'plain [us]':>12} {'secure [us]':>12} "
        f"{'overhead':>9} {'setup [ms]':>11} {'proofs [us]':>12} {'x509 overhead':>14}"
    )
    for r in rows:
        alg = (
            r["algorithm_secure"]
            if r["runs"] == r["algorithm_secure"]
            else f"{r['algorithm_secure']}~{r['runs']}"
        )
        print(
            f"  {r['nodes']:>6} {r['ranks']:>7} {alg:>15} {r['plain_us']:12.1f} {r['secure_us']:12.1f} "
            f"{r['overhead_x']:8.2f}x {r['setup_ms']:11.1f} {r['origin_us']:12.1f} "
            f"{r['identity_overhead_x']:13.2f}x"
        )


def _write(a, prm, rows: list[dict]) -> None:
    """``--json`` (parameters and rows), ``--csv`` (rows), ``--plot`` (PNG)."""
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"params": prm.to_json(), "suite": a.suite, "rows": rows}, f, indent=1)
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)
    if a.plot:
        from ..bench.plot import plot_projection

        title = f"{a.collective} of {a.message} B, encrypt {a.encrypt}"
        plot_projection(a.plot, rows, title, a.suite)


def _validate(doc, cal) -> int:
    import numpy as np

    try:
        runs = [(d, topo) for d, topo in calibration.cases(doc) if topo.p > 1 or "runs" not in doc]
        res = [r for d, topo in runs for r in calibration.validate(d, cal, topo)]  # 1 rank: no traffic
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


def _diagnose(a) -> int:
    """Per measured row, the model's parts and the waiting; one line per host count on what
    limits scaling; the files asked for (checked before any work)."""
    from ..lab import diagnose, report

    if not a.calibration:
        raise UsageError("--diagnose needs --calibration FILE (make one with --calibrate)")
    doc, cal = _load(a.diagnose, "bench", "sweep"), _load(a.calibration, "calibration")
    outs = [(opt, path) for opt, path in (("--json", a.json), ("--csv", a.csv), ("--html", a.html)) if path]
    check_outputs(lambda: [check_file(opt, path) for opt, path in outs])
    if a.html:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError(PLOT_HINT.replace("--plot", "--html")) from None
    try:
        rows = diagnose.diagnose(doc, cal)
    except (KeyError, ValueError) as e:
        raise UsageError(f"cannot diagnose {a.diagnose}: {e}") from None
    if not rows:
        raise UsageError(f"{a.diagnose}: no allreduce row with more than one rank to diagnose")
    verdicts = diagnose.verdicts([r for r in rows if r["size_bytes"] >= 65536] or rows)
    files = report.with_efficiency(rows, verdicts)  # (written first: the reader may stop early)
    for path, fmt in ((a.json, "json"), (a.csv, "csv")):
        if path:
            report.write_rows(path, files, fmt)
    if a.html:
        report.write_html(a.html, files, verdicts, a.diagnose, cal)
    print(
        f"# diagnosis of {a.diagnose}: the calibrated model's parts of each row's measured time; waiting "
        f"= measured - model, what the model does not explain (negative where the model is slower than "
        f"the measurement); {diagnose.calibration_line(cal)}"
    )
    print("\n".join(diagnose.table(rows)))
    print("# what limits scaling (rows >= 64 KiB):")
    print("\n".join(f"# {v['line']}" for v in verdicts))
    return 0
