"""The diagnosis of measured rows (seccomm.lab.diagnose), the scaling report and its rows for BI
tools (seccomm.lab.report), built from the lab's own measured sweeps in docs/scaling-data (no lab
run here) and from sweeps the model makes itself, where the right answer is known."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from browser import blank_page_draws_little, screenshot
from seccomm import cli
from seccomm import costmodel as m
from seccomm import calibration as calib
from seccomm.lab import ClusterSpec, diagnose, report

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "scaling-data"
SIZES = [2**k for k in range(16, 25)]  # 64 KiB .. 16 MiB, as the lab's sweeps


def _truth(alpha=40e-6, beta=8e-9, gamma=2e-10, sigma=3e-10) -> dict:
    """A calibration (the JSON ``--calibrate`` writes) with these parameters, aes-256-gcm's sigma."""
    prm = m.Params(m.Link(alpha, beta), m.Link(alpha, beta), gamma, 0.0, 0.0, 1, 1 << 20, {}, False)
    return {**prm.to_json(), "suites": {"aes-256-gcm": {"seal": sigma, "open": sigma}}}


def _sweep(cal: dict, hosts=(2, 4), per_rack=0, o=1.0, slower=None, variants=("none", "aes-256-gcm")):
    """A ``seccomm cluster --json`` document whose times are ``cal``'s model's, times
    ``slower[hosts]`` (default 1): what a lab run would measure if the model were exact."""
    runs = []
    for h in hosts:
        spec = ClusterSpec(h, hosts_per_rack=per_rack, oversubscription=o).as_dict()
        topo = m.Topology(h, 1, o if spec["racks"] > 1 else 1.0, spec["hosts_per_rack"])
        rows = []
        for s in SIZES:
            for v in variants:
                t = m.predict(
                    "allreduce", calib.bench_algorithm(s, h), s, calib.params_for(cal, v), topo, v != "none"
                )
                t *= (slower or {}).get(h, 1.0)
                rows.append({"collective": "allreduce", "size_bytes": s, "variant": v,
                             "time_us": {"median": t * 1e6}, "busbw_gbps": m.busbw("allreduce", s, t, h),
                             "overhead_x": 1.0})  # fmt: skip
        bench = {"world_size": h, "config": {"chunk_bytes": 1 << 20}, "rows": rows}
        runs.append({"spec": spec, "network": "plain", "bench": bench})
    return {"runs": runs}


def test_parts_add_up_to_the_measured_time_and_waiting_is_what_the_model_leaves():
    cal = _truth()
    rows = diagnose.diagnose(_sweep(cal, slower={4: 1.5}), cal)
    assert len(rows) == 2 * 2 * len(SIZES)
    for r in rows:
        total = sum(r[f"{k}_us"] for k in diagnose.PARTS)
        assert total == pytest.approx(r["measured_us"], rel=1e-9)
        want = 0.5 * r["model_us"] if r["hosts"] == 4 else 0.0
        assert r["waiting_us"] == pytest.approx(want, rel=1e-9, abs=1e-6)
        assert r["uplink_us"] == 0.0  # one switch
        assert (r["crypto_us"] > 0) == (r["variant"] != "none")


@pytest.mark.parametrize(
    "cal, sweep, limit",
    [
        (_truth(alpha=0.5), {}, "latency"),
        (_truth(), {}, "bandwidth"),
        (_truth(beta=1e-10, gamma=5e-9), {}, "reduction"),
        (_truth(beta=1e-10, sigma=5e-9), {"variants": ("aes-256-gcm",)}, "crypto"),
        (_truth(), {"slower": {2: 3.0, 4: 3.0}}, "waiting"),
        (_truth(), {"hosts": (4, 8), "per_rack": 2, "o": 8.0}, "uplink"),  # ring at 4x, doubling at 8x
        (_truth(), {"hosts": (8,), "per_rack": 4, "o": 2.0}, "bandwidth"),  # the ring fits the 2:1 uplink
    ],
)
def test_each_limit_is_named_where_its_part_dominates(cal, sweep, limit):
    rows = diagnose.diagnose(_sweep(cal, **sweep), cal)
    verdicts = diagnose.verdicts(rows)
    assert verdicts and {v["limit"] for v in verdicts} == {limit}, [v["line"] for v in verdicts]
    assert all(diagnose.LIMITS[limit] in v["line"] for v in verdicts)


def _calibration(name: str) -> dict:
    """The calibration ``seccomm project --calibrate`` makes from a measured sweep (its 2-host run)."""
    bench, topo = calib.calibration_case(json.loads((DATA / name).read_text()))
    return calib.calibrate(bench, gamma=1e-10, topo=topo)


def test_the_measured_sweeps_uplink_shows_in_the_diagnosis():
    """docs/scaling-data: 250 Mbit/s links; racks of 2 with 4:1 uplinks (125 Mbit/s) slow the ring
    by max(1, o/K) = 2, so half of its bandwidth time is the uplink's."""
    cal = _calibration("250mbit-hosts-2-4-8.json")
    racks = diagnose.diagnose(json.loads((DATA / "250mbit-hosts-4-8-racks-2-4to1.json").read_text()), cal)
    ring = [r for r in racks if r["algorithm"] == "ring"]
    assert ring and all(r["uplink_us"] == pytest.approx(r["bandwidth_us"] / 2) for r in ring)
    assert {v["hosts"]: v["limit"] for v in diagnose.verdicts(racks)} == {4: "uplink", 8: "uplink"}
    flat = diagnose.diagnose(json.loads((DATA / "250mbit-hosts-2-4-8.json").read_text()), cal)
    assert {r["hosts"] for r in flat} == {2, 4, 8} and all(r["uplink_us"] == 0 for r in flat)


def test_a_bench_result_is_diagnosed_as_one_node():
    cal = _truth()
    bench = _sweep(cal, hosts=(2,))["runs"][0]["bench"]
    rows = diagnose.diagnose(bench, cal)
    assert {(r["hosts"], r["ranks"], r["link_bps"]) for r in rows} == {(1, 2, None)}
    assert all(abs(r["waiting_us"]) < 1e-6 for r in rows)


def _diagnose_cli(tmp_path, sweep="250mbit-hosts-2-4-8.json", *extra):
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps(_calibration(sweep)))
    return cli.main(["project", "--diagnose", str(DATA / sweep), "--calibration", str(cal), *extra])


def test_rows_for_bi_tools_follow_the_documented_schema(tmp_path, capsys):
    out_csv, out_json = tmp_path / "rows.csv", tmp_path / "rows.json"
    assert (
        _diagnose_cli(tmp_path, "250mbit-hosts-2-4-8.json", "--csv", str(out_csv), "--json", str(out_json))
        == 0
    )
    text = capsys.readouterr().out
    assert len(re.findall(r"^# [248] host\(s\) x 1 rank\(s\), 250mbit: ", text, re.M)) == 3
    with open(out_csv, newline="") as f:
        lines = list(csv.DictReader(f))
    rows = json.loads(out_json.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in JSON"))
    assert len(rows) == len(lines) == 3 * 2 * len(SIZES)
    assert list(lines[0]) == list(rows[0]) == list(report.COLUMNS)
    assert {r["hosts"] for r in rows} == {2, 4, 8} and {r["variant"] for r in rows} == {"none", "aes-256-gcm"}
    assert all(r["uplink_bps"] is None and isinstance(r["measured_us"], float) for r in rows)
    assert {r["efficiency"] for r in rows if r["hosts"] == 2} == {1.0}
    documented = re.findall(r"^\| `(\w+)` \|", (ROOT / "docs" / "scaling.md").read_text(), re.M)
    assert set(report.COLUMNS) <= set(documented), set(report.COLUMNS) - set(documented)


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--diagnose", "x.json"], "--diagnose needs --calibration"),
        (
            ["--diagnose", "x.json", "--calibration", "c.json", "--out", "o"],
            "--out does not apply to --diagnose",
        ),
        (["--diagnose", "x.json", "--calibration", "c.json", "--nodes", "4"], "--nodes does not apply"),
        (["--html", "r.html"], "--html is the report of --diagnose"),
        (["--validate", "x.json", "--html", "r.html"], "--html does not apply to --validate"),
        (["--diagnose", "a.json", "--validate", "b.json"], "not both"),
    ],
)
def test_diagnose_usage_errors(capsys, args, msg):
    assert cli.main(["project", *args]) == 2
    assert msg in capsys.readouterr().err


def test_html_report_is_self_contained_and_renders_in_a_headless_browser(tmp_path, capsys):
    """The report of a measured sweep: three inline PNG figures, nothing fetched from elsewhere,
    strict HTML; Chromium draws it (and draws little for an empty page)."""
    pytest.importorskip("matplotlib")
    import html5lib

    page = tmp_path / "report.html"
    assert _diagnose_cli(tmp_path, "250mbit-hosts-4-8-racks-2-4to1.json", "--html", str(page)) == 0
    text = page.read_text()
    tree = html5lib.HTMLParser(strict=True, namespaceHTMLElements=False).parse(text)
    srcs = [img.get("src") for img in tree.iter("img")]
    assert len(srcs) == 3 and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert "<script" not in text and not re.search(r"href=|<link\b|url\(|@import", text)
    assert "bandwidth-bound on the uplink" in text and len(list(tree.iter("tr"))) == 1 + 2 * 2 * len(SIZES)
    size, drawn = screenshot(page, tmp_path, "report")
    assert size == (1280, 1600) and drawn > 100_000, (size, drawn)
    assert blank_page_draws_little(tmp_path)
