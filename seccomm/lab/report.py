"""The scaling report: one self-contained HTML file (plots inline as PNG data URIs; no script,
no style sheet or font from elsewhere, so it opens offline) and the diagnosis rows as CSV or JSON
for BI tools (Power BI, Grafana).  Built from :func:`.diagnose.diagnose` rows; docs/scaling.md,
"The report" (every column, its unit and type).

Three figures: overhead against native MPI [x] vs message size, one panel per cluster shape, one
line per suite; scaling efficiency vs hosts, measured (solid) and the calibrated model's (dotted);
the time breakdown at the largest size (the parts of :data:`.diagnose.PARTS`, the uplink apart).
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math

from ..bench.plot import _log_axes, byte_label, variant_style
from .diagnose import BREAKDOWN, SHAPE, calibration_line, describe, shape_of

#: the CSV/JSON columns, in order (docs/scaling.md documents each: unit and type)
COLUMNS = (
    "utc", "git_commit", "hosts", "ranks_per_host", "ranks", "link_bps", "hosts_per_rack",
    "oversubscription", "uplink_bps", "collective", "algorithm", "variant", "size_bytes",
    "measured_us", "model_us", "error", "latency_us", "bandwidth_us", "uplink_us", "reduction_us",
    "crypto_us", "waiting_us", "busbw_gbps", "overhead_x", "efficiency", "efficiency_model", "limit",
)  # fmt: skip
#: colours of the breakdown's parts (the uplink is bandwidth's darker share)
_PART_COLOURS = {"latency": "#4e79a7", "bandwidth": "#59a14f", "uplink": "#1b5e20", "reduction": "#edc948",
                 "crypto": "#e15759", "waiting": "#bab0ac"}  # fmt: skip


def with_efficiency(rows: list[dict], verdicts: list[dict]) -> list[dict]:
    """``rows`` with ``efficiency`` (busbw / busbw of the same variant and size at the smallest
    host count above one rank, as ``seccomm cluster``'s table), ``efficiency_model`` (the same
    from the model's times) and ``limit`` (the host count's verdict)."""
    ref: dict = {}
    for r in sorted(rows, key=lambda r: r["ranks"]):
        ref.setdefault((r["variant"], r["size_bytes"]), r)
    limits = {tuple(v[k] for k in SHAPE): v["limit"] for v in verdicts}
    out = []
    for r in rows:
        b = ref[(r["variant"], r["size_bytes"])]
        model_bw = _busbw(r, r["model_us"]) / _busbw(b, b["model_us"])
        out.append({**r, "efficiency": r["busbw_gbps"] / b["busbw_gbps"], "efficiency_model": model_bw,
                    "limit": limits.get(shape_of(r))})  # fmt: skip
    return out


def _busbw(r: dict, t_us: float) -> float:
    """Allreduce busbw [GB/s] of ``r``'s size in ``t_us`` (nccl-tests: algbw x 2(p-1)/p)."""
    return r["size_bytes"] / (t_us * 1e-6) / 1e9 * 2 * (r["ranks"] - 1) / r["ranks"]


def write_rows(path: str, rows: list[dict], fmt: str) -> None:
    """``fmt`` "json": a JSON array of objects (NaN as null); "csv": a header line, then one line
    per row (NaN as an empty field).  Columns: :data:`COLUMNS`."""
    flat = [{k: _plain(r.get(k)) for k in COLUMNS} for r in rows]
    with open(path, "w", newline="") as f:
        if fmt == "json":
            json.dump(flat, f, indent=1, allow_nan=False)
        else:
            w = csv.DictWriter(f, fieldnames=list(COLUMNS))
            w.writeheader()
            w.writerows(flat)


def _plain(v):
    return None if isinstance(v, float) and math.isnan(v) else v


# -- figures --------------------------------------------------------------------------------------
def _figure(ncols: int, nrows: int = 1, w: float = 4.2, h: float = 3.4):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), squeeze=False)


def _png(fig) -> str:
    """The figure as a ``data:image/png;base64,...`` URI (and closed)."""
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def overhead_figure(rows: list[dict]) -> str:
    """Overhead vs native MPI [x] against size, one panel per cluster shape, one line per suite."""
    shapes = list(dict.fromkeys(shape_of(r) for r in rows))
    cols = min(3, len(shapes))
    fig, axes = _figure(cols, -(-len(shapes) // cols))
    for ax, key in zip(axes.flat, shapes):
        rs = [r for r in rows if shape_of(r) == key]
        for v in dict.fromkeys(r["variant"] for r in rs):
            pts = sorted((r["size_bytes"], r["overhead_x"]) for r in rs if r["variant"] == v)
            ax.plot(*zip(*pts), ms=4, label=v, **variant_style(v))
        ax.axhline(1.0, color="black", lw=0.8, ls="--")
        _log_axes(ax, "size S", "time / native MPI's [x]", True, times=True)
        ax.set_title(describe(rs[0]), fontsize=9)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(shapes) :]:
        ax.set_visible(False)
    return _png(fig)


def efficiency_figure(rows: list[dict], size: int) -> str:
    """Scaling efficiency vs hosts at ``size``: measured (solid) and the model's (dotted)."""
    fig, axes = _figure(1, w=6.0, h=3.8)
    ax = axes[0][0]
    rs = [r for r in rows if r["size_bytes"] == size]
    for v in dict.fromkeys(r["variant"] for r in rs):
        pts = sorted((r["hosts"], r["efficiency"], r["efficiency_model"]) for r in rs if r["variant"] == v)
        x = [p[0] for p in pts]
        ax.plot(x, [p[1] for p in pts], label=f"{v} measured", **variant_style(v))
        ax.plot(x, [p[2] for p in pts], label=f"{v} model", **{**variant_style(v), "linestyle": ":"})
    ax.set_xscale("log", base=2)
    ax.set_xticks(sorted({r["hosts"] for r in rs}), labels=[str(h) for h in sorted({r["hosts"] for r in rs})])
    ax.set_xlabel("hosts")
    ax.set_ylabel("efficiency (busbw / smallest)")
    ax.set_title(f"allreduce of {byte_label(size)}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def breakdown_figure(rows: list[dict], size: int) -> str:
    """Stacked bars at ``size``: each part of the measured time [ms] per (cluster, variant); the
    uplink apart from the links; negative waiting (model above measured) below zero."""
    rs = sorted((r for r in rows if r["size_bytes"] == size), key=lambda r: (shape_of(r), r["variant"]))
    fig, axes = _figure(1, w=max(6.0, 0.55 * len(rs) + 2), h=4.2)
    ax = axes[0][0]
    x = range(len(rs))
    up = [0.0] * len(rs)
    for part in BREAKDOWN:
        ms = [_part_ms(r, part) for r in rs]
        pos = [max(v, 0.0) for v in ms]
        ax.bar(x, pos, bottom=up, color=_PART_COLOURS[part], label=part)
        ax.bar(x, [min(v, 0.0) for v in ms], color=_PART_COLOURS[part], hatch="//")
        up = [a + b for a, b in zip(up, pos)]
    ax.plot(x, [r["measured_us"] / 1e3 for r in rs], "k_", ms=14, mew=2, label="measured")
    ax.set_xticks(list(x), labels=[_bar_label(r) for r in rs], rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("time [ms]")
    ax.set_title(f"where the time goes: allreduce of {byte_label(size)}", fontsize=9)
    ax.axhline(0, color="black", lw=0.6)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    return _png(fig)


def _bar_label(r: dict) -> str:
    """``4h 4:1 none``: hosts, the racks' oversubscription where there is one, variant."""
    o = f"{r['oversubscription']:g}:1 " if r["oversubscription"] > 1 else ""
    return f"{r['hosts']}h {o}{r['variant']}"


def _part_ms(r: dict, part: str) -> float:
    if part == "bandwidth":
        return (r["bandwidth_us"] - r["uplink_us"]) / 1e3
    return r[f"{part}_us"] / 1e3


# -- the page -------------------------------------------------------------------------------------
def to_html(rows: list[dict], verdicts: list[dict], source: str, cal: dict) -> str:
    """The whole report as one HTML string (``rows``: :func:`with_efficiency`'s)."""
    size = max(r["size_bytes"] for r in rows)
    e = html.escape
    figs = [("Overhead vs message size, per suite", overhead_figure(rows)),
            ("Scaling efficiency vs hosts, measured and predicted", efficiency_figure(rows, size)),
            ("Time breakdown", breakdown_figure(rows, size))]  # fmt: skip
    body = [
        "<h1>seccomm scaling report</h1>",
        f"<p>Source: <code>{e(source)}</code>. {e(calibration_line(cal))}</p>",
        "<h2>What limits scaling</h2><ul>" + "".join(f"<li>{e(v['line'])}</li>" for v in verdicts) + "</ul>",
        "<p>Waiting = measured time minus the calibrated model's time (the results hold only the "
        "slowest rank's time, so it is not split per rank); negative where the model is slower.</p>",
        *(f'<h2>{e(t)}</h2><img alt="{e(t)}" src="{uri}">' for t, uri in figs),
        "<h2>Every row</h2>" + _table(rows),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>seccomm scaling report</title>'
        "<style>body{font-family:sans-serif;margin:2em;max-width:1400px}table{border-collapse:collapse;"
        "font-size:12px}td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}img{max-width:100%}"
        "</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def _table(rows: list[dict]) -> str:
    cols = ("hosts", "ranks", "oversubscription", "variant", "size_bytes", "measured_us", "model_us",
            *(f"{p}_us" for p in BREAKDOWN), "error")  # fmt: skip
    head = "".join(f"<th>{html.escape(c.replace('error', 'error [%]'))}</th>" for c in cols)
    return (
        f"<table><tr>{head}</tr>"
        + "".join(
            "<tr>" + "".join(f"<td>{html.escape(_cell(r[c], c))}</td>" for c in cols) + "</tr>" for r in rows
        )
        + "</table>"
    )


def _cell(v, col: str = "") -> str:
    if col == "error":
        return "-" if math.isnan(v) else f"{100 * v:.1f}"
    if isinstance(v, float):
        return "-" if math.isnan(v) else f"{v:,.0f}" if abs(v) >= 10 else f"{v:.3g}"
    return str(v)


def write_html(path: str, rows: list[dict], verdicts: list[dict], source: str, cal: dict) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(to_html(rows, verdicts, source, cal))
