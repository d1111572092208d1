"""Plots of bench and projection results (matplotlib, the ``plot`` extra; imported only to plot).

Every variant keeps one colour and marker in every panel (:func:`variant_style`: ``native`` black,
``none`` grey, each registered suite its own), one legend for the whole figure sits outside the
axes, sizes are on a log axis labelled in bytes (B, KiB, MiB, GiB), bandwidths on a log axis in
GB/s, overheads (time / native MPI's) on a log axis in x.
"""

from __future__ import annotations

from ..suites import SUITES
from .rows import NATIVE

_MARKERS = "osD^vP*X"


def variant_style(variant: str, others: tuple = ()) -> dict:
    """Line style of ``variant``: the same in every panel and every plot.  ``others``: variant
    names outside the registry, in order (each gets the next free colour)."""
    import matplotlib

    tab = matplotlib.colormaps["tab10"].colors
    if variant == NATIVE:
        return {"color": "black", "marker": "o", "linestyle": "--"}
    if variant == "none":
        return {"color": "0.55", "marker": "s", "linestyle": "-"}
    names = [s for s in SUITES if s != "none"] + [o for o in others if o not in SUITES]
    i = names.index(variant) if variant in names else len(names)
    return {"color": tab[i % len(tab)], "marker": _MARKERS[i % len(_MARKERS)], "linestyle": "-"}


def byte_label(v: float, _pos=None) -> str:
    """``4096`` -> ``4 KiB``: a tick label in binary units."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if v >= scale:
            return f"{v / scale:g} {unit}"
    return f"{v:g} B"


def byte_ticks(lo: float, hi: float, most: int = 7) -> list[int]:
    """Powers of 2 from ``lo`` to ``hi`` [B], every 1, 2, 5 or 10th (10: 1 B, 1 KiB, 1 MiB...),
    the finest step that gives at most ``most`` ticks."""
    import math

    e0, e1 = math.floor(math.log2(max(lo, 1))), math.ceil(math.log2(max(hi, 1)))
    step = next((k for k in (1, 2, 5, 10, 20) if (e1 - e0) // k + 1 <= most), 30)
    return [2**e for e in range(e0, e1 + 1) if e % step == 0]


def linear_ticks(lo: float, hi: float, most: int = 8) -> list[float]:
    """Evenly spaced round values (steps of 1, 2 or 5 times a power of ten) from at or below
    ``lo`` to at or above ``hi``, the finest step that gives at most ``most`` of them: every
    part of a narrow axis labelled."""
    import math

    span = hi - lo if hi > lo else abs(hi) or 1.0
    for e in range(math.floor(math.log10(span)) - 2, math.floor(math.log10(span)) + 2):
        for m in (1, 2, 5):
            step = m * 10.0**e
            a, b = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
            if b - a + 1 <= most:
                return [round(k * step, 12) for k in range(a, b + 1) if k * step > 0]
    return [lo, hi]


def _log_axes(ax, xlabel: str, ylabel: str, bytes_x: bool, times: bool = False) -> None:
    """Log-log axes: x in bytes (``bytes_x``) or plain counts at powers of 2; y labelled in plain
    numbers (with an ``x`` suffix for ``times``), at 1, 2 and 5 of each decade, or, where the
    data span less than a factor of 4 (an overhead of 0.8x to 1.9x), at evenly spaced round
    values across it (:func:`linear_ticks`)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    lo, hi = ax.dataLim.x0, ax.dataLim.x1
    ax.xaxis.set_major_locator(FixedLocator(byte_ticks(lo, hi)))
    ax.xaxis.set_minor_locator(FixedLocator(byte_ticks(lo, hi, most=64)))
    ax.xaxis.set_major_formatter(FuncFormatter(byte_label if bytes_x else lambda v, _p: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())
    unit = "x" if times else ""
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _p: f"{v:g}{unit}"))
    ylo, yhi = ax.dataLim.y0, ax.dataLim.y1
    if 0 < ylo and yhi < 4 * ylo:  # (under a factor of 4: evenly spaced labels across the data)
        from matplotlib.ticker import NullLocator

        ticks = linear_ticks(ylo, yhi)
        ax.yaxis.set_major_locator(FixedLocator(ticks))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.set_ylim(min(ticks[0], ylo) / 1.02, max(ticks[-1], yhi) * 1.02)
    else:

        def minor(v, _p):  # 2 and 5 of each decade; every tick where the axis spans under a decade
            lo, hi = sorted(ax.get_ylim())
            return f"{v:.3g}{unit}" if f"{v:e}"[0] in "25" or 0 < lo and hi < 10 * lo else ""

        ax.yaxis.set_minor_formatter(FuncFormatter(minor))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="both", alpha=0.3)


def bench_figure(rows: list[dict]):
    """The figure of a bench result: one row of panels per collective, overhead vs native [x]
    and busbw [GB/s] against size S [B]; one legend, outside the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colls = list(dict.fromkeys(r["collective"] for r in rows))
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    others = tuple(v for v in variants if v not in SUITES and v != NATIVE)
    fig, axes = plt.subplots(len(colls), 2, figsize=(11, 3.6 * len(colls)), squeeze=False)
    for (ax_o, ax_b), coll in zip(axes, colls):
        for v in variants:
            rs = sorted(
                (r for r in rows if r["collective"] == coll and r["variant"] == v),
                key=lambda r: r["size_bytes"],
            )
            rs = [r for r in rs if r["size_bytes"] > 0 and r["busbw_gbps"] > 0]
            if not rs:
                continue
            x, style = [r["size_bytes"] for r in rs], variant_style(v, others)
            if v != NATIVE:
                ax_o.plot(x, [r["overhead_x"] for r in rs], ms=4, label=v, **style)
            ax_b.plot(x, [r["busbw_gbps"] for r in rs], ms=4, label=v, **style)
        ax_o.axhline(1.0, color="black", lw=0.8, ls="--")
        _log_axes(ax_o, "size S", "overhead vs native [x]", True, times=True)
        _log_axes(ax_b, "size S", "busbw [GB/s]", True)
        ax_o.set_title(f"{coll}: time / native MPI's", fontsize=10)
        ax_b.set_title(f"{coll}: bus bandwidth", fontsize=10)
    ranks = rows[0]["ranks"] if rows else "?"
    _legend(fig, axes, f"seccomm bench, {ranks} ranks")
    return fig


def projection_figure(rows: list[dict], title: str, suite: str = "aes-256-gcm"):
    """The figure of a projection: overhead [x], busbw [GB/s] (plain and secure, in ``suite``'s
    colour) and scaling efficiency against ranks; one legend, outside the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4), squeeze=False)
    ax_o, ax_b, ax_e = axes[0]
    x = [r["ranks"] for r in rows]
    plain, secure = variant_style(NATIVE), variant_style(suite)
    ax_o.plot(x, [r["overhead_x"] for r in rows], label=f"secure ({suite})", **secure)
    ax_o.axhline(1.0, color="black", lw=0.8, ls="--")
    for key, style, label in (("plain", plain, "plain"), ("secure", secure, f"secure ({suite})")):
        ax_b.plot(x, [r[f"busbw_{key}_gbps"] for r in rows], label=label, **style)
        ax_e.plot(x, [r[f"efficiency_{key}"] for r in rows], label=label, **style)
    _log_axes(ax_o, "ranks (GPUs)", "secure / plain time [x]", False, times=True)
    _log_axes(ax_b, "ranks (GPUs)", "busbw [GB/s]", False)
    _log_axes(ax_e, "ranks (GPUs)", "scaling efficiency (busbw / smallest)", False)
    ax_e.set_yscale("linear")
    _legend(fig, axes, f"seccomm project: {title}")
    return fig


def _legend(fig, axes, title: str) -> None:
    """One legend for the figure, right of the axes (each label once, in plotting order)."""
    seen = {}
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            seen.setdefault(lab, h)
    fig.suptitle(title)
    fig.tight_layout()
    fig.legend(list(seen.values()), list(seen), loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)


def _save(fig, path: str) -> None:
    import matplotlib.pyplot as plt

    fig.savefig(path, dpi=110, bbox_inches="tight")  # "tight" keeps the legend outside the axes
    plt.close(fig)


def plot_bench(path: str, rows: list[dict]) -> None:
    """Write :func:`bench_figure` to ``path`` (any file type matplotlib writes)."""
    _save(bench_figure(rows), path)


def plot_projection(path: str, rows: list[dict], title: str, suite: str = "aes-256-gcm") -> None:
    """Write :func:`projection_figure` to ``path``."""
    _save(projection_figure(rows, title, suite), path)
