"""Plots of bench and projection results (needs matplotlib, the ``plot`` extra): one colour per
variant in every panel, one legend outside the axes, log-log axes in bytes and GB/s, an overhead
panel; and the real commands writing them."""

from __future__ import annotations

import os
import sys

import pytest

from seccomm import launch
from seccomm.collectives import COLLECTIVES
from seccomm.suites import SUITES

from helpers import run_cmd

matplotlib = pytest.importorskip("matplotlib")

from seccomm.bench import plot  # noqa: E402

SECCOMM = [sys.executable, "-m", "seccomm"]
VARIANTS = ["native", *SUITES]
SIZES = [2**k for k in range(3, 27, 2)]


def rows_of(collectives=tuple(COLLECTIVES), variants=VARIANTS) -> list[dict]:
    """Synthetic bench rows: every collective, variant and size, times growing with size."""
    out = []
    for c in collectives:
        for i, v in enumerate(variants):
            for s in SIZES:
                t = 20 + s / 1e3 * (1 + i)
                out.append(
                    dict(collective=c, variant=v, size_bytes=s, ranks=2, time_us={"median": t},
                         busbw_gbps=s / t / 1e3, overhead_x=1 + i * s / (s + 1e5))
                )  # fmt: skip
    return out


def _lines(ax) -> dict[str, object]:
    return {ln.get_label(): ln.get_color() for ln in ax.get_lines() if not ln.get_label().startswith("_")}


def test_bench_figure_one_colour_per_variant_one_legend_outside():
    fig = plot.bench_figure(rows_of())
    axes = fig.axes
    assert len(axes) == 2 * len(COLLECTIVES)  # a row of (overhead, busbw) per collective
    colours: dict[str, set] = {}
    for ax in axes:
        assert ax.get_legend() is None  # no legend over the data
        for label, colour in _lines(ax).items():
            colours.setdefault(label, set()).add(matplotlib.colors.to_hex(colour))
    assert set(colours) == set(VARIANTS)
    assert all(len(c) == 1 for c in colours.values()), colours  # the same colour in every panel
    assert len({next(iter(c)) for c in colours.values()}) == len(VARIANTS)  # and distinct
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == list(dict.fromkeys(VARIANTS[1:] + VARIANTS[:1]))
    fig.canvas.draw()
    right = max(ax.get_position().x1 for ax in axes)
    box = legend.get_window_extent().transformed(fig.transFigure.inverted())
    assert box.x0 >= right  # outside the axes, on the right


def test_bench_figure_axes_units():
    fig = plot.bench_figure(rows_of(["allreduce"]))
    over, bus = fig.axes
    for ax in (over, bus):
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    fig.canvas.draw()
    ticks = " ".join(t.get_text() for t in bus.get_xticklabels())
    assert "KiB" in ticks and "MiB" in ticks
    assert bus.get_ylabel() == "busbw [GB/s]" and over.get_ylabel() == "overhead vs native [x]"
    assert "native" not in _lines(over)  # its overhead is 1 by definition: the dashed line at 1
    assert (
        plot.byte_label(4096) == "4 KiB"
        and plot.byte_label(3 << 20) == "3 MiB"
        and plot.byte_label(8) == "8 B"
    )


def test_unregistered_variants_get_their_own_colours():
    rows = rows_of(["allreduce"], ["native", "none", "aes-256-gcm", "test-corrupt"])
    colours = _lines(plot.bench_figure(rows).axes[1])
    assert len({matplotlib.colors.to_hex(c) for c in colours.values()}) == 4


def test_projection_figure(tmp_path):
    rows = [
        dict(ranks=8 * n, nodes=n, overhead_x=1.5, busbw_plain_gbps=50 / n**0.1,
             busbw_secure_gbps=30 / n**0.1, efficiency_plain=1 / n**0.1, efficiency_secure=1 / n**0.1)
        for n in (1, 2, 4, 8)
    ]  # fmt: skip
    fig = plot.projection_figure(rows, "allreduce", "chacha20-poly1305")
    assert len(fig.legends) == 1 and all(ax.get_legend() is None for ax in fig.axes)
    secure = {
        matplotlib.colors.to_hex(c) for ax in fig.axes for lab, c in _lines(ax).items() if "secure" in lab
    }
    assert secure == {matplotlib.colors.to_hex(plot.variant_style("chacha20-poly1305")["color"])}
    assert fig.axes[1].get_ylabel() == "busbw [GB/s]"
    fig.canvas.draw()
    assert [t.get_text() for t in fig.axes[1].get_xticklabels()] == ["8", "16", "32", "64"]  # ranks, plainly


def test_project_and_bench_write_their_plots(tmp_path):
    """The real commands: seccomm project --plot, and a tiny seccomm bench --plot on 2 ranks."""
    env = {k: v for k, v in os.environ.items() if k not in launch.LAUNCHER_VARS}
    p = tmp_path / "p.png"
    out = run_cmd([*SECCOMM, "project", "--nodes", "1,2,4,...,64", "--plot", str(p)], timeout=120, env=env)
    assert out.returncode == 0 and p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", out.stderr
    b = tmp_path / "b.svg"
    cmd = [*SECCOMM, "bench", "-e", "1K", "-f", "4", "-n", "2", "-w", "0", "--collective", "allreduce,bcast"]
    out = run_cmd([*cmd, "--plot", str(b)], timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 0 and b.read_text().startswith("<?xml"), out.stderr[-2000:]


@pytest.mark.parametrize("lo, hi", [(0.8, 1.88), (1.10, 1.88), (0.97, 1.04), (1.0, 3.5)])
def test_a_narrow_overhead_axis_is_labelled_across_its_range(lo, hi):
    """Overheads between ``lo`` and ``hi`` (as a bench run's 1.10x-1.88x): labelled ticks in the
    data's range, none more than a quarter of it apart, so no part of a line crosses an
    unlabelled half (before: labels at 0.8x, 0.9x and 1x only)."""
    rows = rows_of(["allreduce"])
    for r in rows:
        f = (r["size_bytes"] - SIZES[0]) / (SIZES[-1] - SIZES[0])
        r["overhead_x"] = 1.0 if r["variant"] == "native" else lo + (hi - lo) * f
    fig = plot.bench_figure(rows)
    over = fig.axes[0]
    fig.canvas.draw()
    ymin, ymax = over.get_ylim()
    shown = sorted(
        float(t.get_text().rstrip("x"))
        for t in over.get_yticklabels()
        if t.get_text() and ymin <= t.get_position()[1] <= ymax
    )
    inside = [v for v in shown if min(lo, 1.0) <= v <= max(hi, 1.0)]
    assert len(inside) >= 3, shown
    a, b = min(lo, 1.0), max(hi, 1.0)  # (the data: native's 1x too)
    gaps = [y - x for x, y in zip([a, *inside], [*inside, b])]
    assert max(gaps) <= (b - a) / 4 + 1e-9, (shown, gaps)
