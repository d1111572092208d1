"""The cost model: hand-computed cases, limits, monotonicity, calibration recovery, bad input."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import pytest

from seccomm import cli
from seccomm import costmodel as m
from seccomm import calibration as calib

from helpers import run_cmd

SECCOMM = [sys.executable, "-m", "seccomm"]
CAL = Path(__file__).resolve().parents[2] / "docs" / "calibration-dev-2ranks.json"

MIB = 1 << 20


def flat(alpha=1e-6, beta=1e-9, gamma=0.0, seal=0.0, opn=0.0, pipelined=True, chunk=1 << 40):
    return m.Params(m.Link(alpha, beta), m.Link(alpha, beta), gamma, seal, opn, 1, chunk, {}, pipelined)


def test_ring_matches_thakur_formula():
    """ring allreduce: 2(p-1) alpha + 2 n (p-1)/p beta + n (p-1)/p gamma (Thakur et al. 2005)."""
    a, b, g, n = 2e-6, 1e-9, 3e-10, 64 * MIB
    for p in (2, 3, 8):
        t = m.predict("allreduce", "ring", n, flat(a, b, g), m.Topology(1, p))
        want = 2 * (p - 1) * a + 2 * n * (p - 1) / p * b + n * (p - 1) / p * g
        assert t == pytest.approx(want, rel=1e-12)


def test_recursive_doubling_and_rabenseifner_formulas():
    a, b, g, n, p = 2e-6, 1e-9, 3e-10, 8 * MIB, 8
    rd = m.predict("allreduce", "recursive_doubling", n, flat(a, b, g), m.Topology(1, p))
    assert rd == pytest.approx(3 * a + 3 * n * b + 3 * n * g)
    rab = m.predict("allreduce", "rabenseifner", n, flat(a, b, g), m.Topology(1, p))
    assert rab == pytest.approx(2 * 3 * a + 2 * n * (p - 1) / p * b + n * (p - 1) / p * g)


def test_alltoall_pairwise_formula():
    """pairwise alltoall: (p-1) alpha + n(p-1)/p beta, seal and open on n(p-1)/p bytes per rank;
    busbw factor (n-1)/n (nccl-tests doc/PERFORMANCE.md); across nodes the NIC is shared by the
    ranks of a node leaving it at once."""
    a, b, sl, op, n = 2e-6, 1e-9, 3e-10, 2e-10, 64 * MIB
    for p in (2, 3, 8):
        topo = m.Topology(1, p)
        plain = m.predict("alltoall", "pairwise", n, flat(a, b), topo)
        assert plain == pytest.approx((p - 1) * a + n * (p - 1) / p * b, rel=1e-12)
        secure = m.predict(
            "alltoall", "pairwise", n, flat(a, b, seal=sl, opn=op, pipelined=False), topo, True
        )
        assert secure - plain == pytest.approx(n * (p - 1) / p * (sl + op), rel=1e-9)
        assert m.busbw("alltoall", n, 1.0, p) == pytest.approx(n / 1e9 * (p - 1) / p)
    inter = m.Link(5e-6, 4e-9)
    prm = m.Params(m.Link(a, b), inter, 0.0, 0.0, 0.0, 1, 1 << 40, {})
    rpn, nodes = 4, 3
    p = rpn * nodes
    flows = [min(s, p - s, rpn) for s in range(1, p)]  # ranks of a node leaving it at step s
    want = sum(inter.alpha + n / p * inter.beta * f for f in flows)
    assert m.predict("alltoall", "pairwise", n, prm, m.Topology(nodes, rpn)) == pytest.approx(want, rel=1e-12)
    assert m.best("alltoall", n, m.get_preset("ib-ndr400"), m.Topology(nodes, rpn), True)[0] == "pairwise"


def test_crypto_stage_pipelining():
    """One step, k chunks: sum of stages + (k-1) x slowest; unpipelined: k x sum."""
    prm = flat(alpha=0.0, beta=1e-9, seal=2e-9, opn=0.5e-9, chunk=MIB)
    topo = m.Topology(1, 2)
    step = m.Step(4 * MIB, False)
    c = MIB
    stages = (c * 2e-9, c * 1e-9, c * 0.5e-9)
    assert m.step_time(step, prm, topo, True, "all") == pytest.approx(sum(stages) + 3 * max(stages))
    unp = m.replace(prm, pipelined=False)
    assert m.step_time(step, unp, topo, True, "all") == pytest.approx(4 * sum(stages))
    assert m.step_time(step, prm, topo, False, "all") == pytest.approx(4 * c * 1e-9)
    lat = m.replace(prm, intra=m.Link(5e-6, 1e-9))  # pipelined: the latency is paid once
    assert m.step_time(step, lat, topo, True, "all") == pytest.approx(5e-6 + sum(stages) + 3 * max(stages))


def test_limits_and_policy():
    prm = m.get_preset("ib-ndr400")
    assert m.predict("allreduce", "ring", 25 * MIB, prm, m.Topology(1, 1), True) == 0.0
    assert m.predict("allreduce", "ring", 0, prm, m.Topology(4, 8), True) == 0.0
    one_node = m.Topology(1, 8)
    # inter-node policy on one node: nothing is encrypted
    assert m.predict("allreduce", "ring", 25 * MIB, prm, one_node, True, "inter-node") == pytest.approx(
        m.predict("allreduce", "ring", 25 * MIB, prm, one_node, False)
    )
    for coll, algos in m.COLLECTIVES.items():
        for alg in algos:
            t = m.Topology(16, 8)
            assert (
                m.predict(coll, alg, 25 * MIB, prm, t, True)
                > m.predict(coll, alg, 25 * MIB, prm, t, False)
                > 0
            )


def test_monotonic_in_bandwidth_and_oversubscription():
    prm = m.get_preset("roce-200")
    faster = m.replace(prm, inter=m.Link(prm.inter.alpha, prm.inter.beta / 2))
    for nodes in (2, 64, 1024):
        for alg in m.ALLREDUCE:
            t = m.Topology(nodes, 8)
            for secure in (False, True):
                assert m.predict("allreduce", alg, 25 * MIB, faster, t, secure) <= m.predict(
                    "allreduce", alg, 25 * MIB, prm, t, secure
                )
        t1, t2 = m.Topology(nodes, 8, 1.0), m.Topology(nodes, 8, 3.0)
        assert (
            m.best("allreduce", 25 * MIB, prm, t2, True)[1] >= m.best("allreduce", 25 * MIB, prm, t1, True)[1]
        )
    j = m.Topology(64, 8, jitter=5e-6)
    assert m.predict("allreduce", "ring", MIB, prm, j, True) > m.predict(
        "allreduce", "ring", MIB, prm, m.Topology(64, 8), True
    )


def test_oversubscribed_uplink_charges_the_flows_that_cross_it():
    """Racks of K nodes whose uplink carries K x link / o (the lab's, docs/scaling.md).  A ring in
    block placement sends one flow over each uplink: it runs at min(link, K x link / o), so beta
    x max(1, o/K) (the lab measured 1.9x for K = 2, o = 4, where the full o predicted 3.45 s
    against 1.94 s); the hierarchical inter-node ring the same, times its R flows per node.
    Recursive doubling across leaves and alltoall send every node's flows at once: beta x o."""
    b, n = 1e-9, 16 * MIB
    prm = flat(0.0, b)
    for k, o, slower in ((2, 4, 2.0), (4, 2, 1.0), (2, 8, 4.0), (4, 8, 2.0), (4, 4, 1.0)):
        for nodes in (2 * k, 4 * k):
            one_switch = m.predict("allreduce", "ring", n, prm, m.Topology(nodes, 1))
            racks = m.predict("allreduce", "ring", n, prm, m.Topology(nodes, 1, o, k))
            assert racks == pytest.approx(one_switch * slower, rel=1e-12), (k, o, nodes)
            for coll in ("allgather", "reduce_scatter"):
                flat_t = m.predict(coll, "ring", n, prm, m.Topology(nodes, 1))
                assert m.predict(coll, "ring", n, prm, m.Topology(nodes, 1, o, k)) == pytest.approx(
                    flat_t * slower, rel=1e-12
                )
    four = m.Topology(4, 1, 4.0, 2)  # 2 racks of 2, 4:1: distance 1 stays in the rack, 2 crosses
    assert m.predict("allreduce", "recursive_doubling", n, prm, four) == pytest.approx(n * b + 4 * n * b)
    assert m.predict("alltoall", "pairwise", n, prm, four) == pytest.approx(
        4 * m.predict("alltoall", "pairwise", n, prm, m.Topology(4, 1))
    )
    rpn, nodes = 4, 4  # hierarchical: each inter-node ring step moves n/rpn/nodes with rpn flows
    inter = 2 * (nodes - 1) * n / rpn / nodes * b * rpn
    hier = [m.predict("allreduce", "hierarchical", n, prm, m.Topology(nodes, rpn, o, 2)) for o in (1, 4)]
    assert hier[1] - hier[0] == pytest.approx(inter * (2.0 - 1.0), rel=1e-9)


def test_calibration_recovers_synthetic_parameters():
    true_alpha, true_beta, gamma, sigma, p = 30e-6, 5e-10, 4e-11, 3e-10, 2
    truth = m.Params(
        m.Link(true_alpha, true_beta), m.Link(true_alpha, true_beta), gamma, sigma, sigma, 1, MIB, {}, False
    )
    rows = []
    for s in [2**k for k in range(10, 27, 2)]:
        for v, sec in (("none", False), ("aes-256-gcm", True)):
            t = m.predict("allreduce", calib.bench_algorithm(s, p), s, truth, m.Topology(1, p), sec)
            rows.append(
                {"collective": "allreduce", "size_bytes": s, "variant": v, "time_us": {"median": t * 1e6}}
            )
    doc = {"world_size": p, "config": {"chunk_bytes": MIB}, "rows": rows}
    cal = calib.calibrate(doc, gamma)
    assert cal["intra"]["alpha"] == pytest.approx(true_alpha, rel=1e-6)
    assert cal["intra"]["beta"] == pytest.approx(true_beta, rel=1e-6)
    assert cal["suites"]["aes-256-gcm"]["seal"] == pytest.approx(sigma, rel=1e-6)
    errs = [abs(r["error"]) for r in calib.validate(doc, cal)]
    assert max(errs) < 1e-6


def test_calibrate_warns_when_a_fit_hits_its_limit(tmp_path, capsys):
    """A noisy run (time not growing with size; the suite no slower than none): beta clamps to
    1e-15, alpha to 0 or not, seal/open to 0; --calibrate says so, one line per value, exit 0."""
    from seccomm import cli

    rows = [
        {"collective": "allreduce", "size_bytes": s, "variant": v, "time_us": {"median": 100.0 - k}}
        for k, s in enumerate(2**i for i in range(10, 24, 2))
        for v in ("none", "aes-256-gcm")
    ]
    bench = tmp_path / "noisy.json"
    bench.write_text(json.dumps({"world_size": 2, "config": {"chunk_bytes": MIB}, "rows": rows}))
    cal = calib.calibrate(json.loads(bench.read_text()), 4e-11)
    assert cal["intra"]["beta"] == calib.BETA_MIN and cal["suites"]["aes-256-gcm"]["seal"] == 0
    assert cli.main(["project", "--calibrate", str(bench), "--out", str(tmp_path / "c.json")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert any(ln.startswith("seccomm project: warning: beta fitted to its limit 1e-15") for ln in err), err
    assert any("aes-256-gcm: seal/open fitted to 0" in ln and "1.00x" in ln for ln in err), err
    assert calib.limit_warnings(json.loads(CAL.read_text())) == []  # the shipped one fits inside
    assert cli.main(["project", "--calibration", str(tmp_path / "c.json"), "--nodes", "1"]) == 0
    err = capsys.readouterr().err  # projecting with it says so too (the table would show 1.00x)
    assert "c.json: beta fitted to its limit" in err and "aes-256-gcm: seal/open fitted to 0" in err, err


def test_sweep_to_16384_gpus_is_fast():
    t0 = time.perf_counter()
    rows = m.sweep(
        m.get_preset("ib-ndr400"), [2**i for i in range(12)], 8, 25 * MIB, "allreduce", "all", 2.0, 1e-6
    )
    assert time.perf_counter() - t0 < 1.0
    assert rows[-1]["ranks"] == 16384 and all(r["overhead_x"] >= 1 for r in rows)
    assert all(0 < r["efficiency_secure"] <= 1.0 + 1e-9 for r in rows)


def project(tmp_path, *args, ok=True):
    """``seccomm project ARGS --json FILE`` as a user runs it; (process, rows) (rows None when
    the command failed, which ``ok`` says it must not)."""
    j = tmp_path / f"p{len(list(tmp_path.iterdir()))}.json"
    proc = run_cmd([*SECCOMM, "project", *args, "--json", str(j)], timeout=120)
    if ok:
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return proc, json.loads(j.read_text())["rows"] if proc.returncode == 0 else None


def test_project_suite_changes_the_rates(tmp_path):
    """--suite: none gives 1.00x (no crypto); the suites differ by the preset's rates (GMAC
    fastest, ChaCha20-Poly1305 slowest on an AES-NI CPU); plaintext is the same for all."""
    base = ("--nodes", "1,8,64")
    rows = {s: project(tmp_path, *base, "--suite", s)[1] for s in ("none", *m.PRESETS["ib-ndr400"].suites)}
    assert all(r["overhead_x"] == pytest.approx(1.0) for r in rows["none"])
    for i in range(3):
        assert len({rs[i]["plain_us"] for rs in rows.values()}) == 1
        secure = {s: rs[i]["secure_us"] for s, rs in rows.items()}
        assert secure["none"] < secure["aes-256-gmac"] < secure["aes-256-gcm"] < secure["chacha20-poly1305"]
    proc, _ = project(tmp_path, "--suite", "foo", ok=False)
    assert proc.returncode == 2 and "invalid choice: 'foo'" in proc.stderr and proc.stderr.count("\n") == 1


def test_project_calibration_supplies_each_suites_rate(tmp_path):
    """--calibration: the suite's fitted sigma applies; a suite the calibration lacks is an error."""
    cal = json.loads(CAL.read_text())
    rows = {
        s: project(tmp_path, "--calibration", str(CAL), "--nodes", "1", "--suite", s)[1][0]
        for s in cal["suites"]
    }
    sigma = {s: cal["suites"][s]["seal"] for s in cal["suites"]}
    by_time = sorted(rows, key=lambda s: rows[s]["secure_us"])
    assert by_time == sorted(sigma, key=sigma.get)  # slower crypto, longer secure time
    thin = tmp_path / "thin.json"
    thin.write_text(json.dumps({**cal, "suites": {"aes-256-gcm": cal["suites"]["aes-256-gcm"]}}))
    proc, _ = project(tmp_path, "--calibration", str(thin), "--suite", "chacha20-poly1305", ok=False)
    assert proc.returncode == 2 and "no seal/open rates for suite 'chacha20-poly1305'" in proc.stderr


def _secure(rows, i=-1):
    return rows[i]["secure_us"]


@pytest.mark.parametrize(
    "option,a,b,check",
    [
        ("--preset", "ib-ndr400", "eth-100", lambda x, y: y[-1]["plain_us"] > x[-1]["plain_us"]),
        ("--nodes", "1,2", "1,2,4,...,64", lambda x, y: [r["nodes"] for r in y] == [1, 2, 4, 8, 16, 32, 64]),
        ("--ranks-per-node", "8", "4", lambda x, y: [r["ranks"] for r in y] == [4 * r["nodes"] for r in y]),
        (
            "--message",
            "25MiB",
            "100MiB",
            lambda x, y: (
                y[-1]["native_us"] > 3 * x[-1]["native_us"] and y[-1]["plain_us"] > x[-1]["plain_us"]
            ),
        ),
        ("--collective", "allreduce", "allgather", lambda x, y: y[-1]["plain_us"] < x[-1]["plain_us"]),
        (
            "--encrypt",
            "all",
            "inter-node",
            lambda x, y: _secure(y, 0) < _secure(x, 0) and y[0]["overhead_x"] == 1.0,
        ),
        ("--oversubscription", "1", "4", lambda x, y: y[-1]["native_us"] > x[-1]["native_us"]),
        ("--jitter-us", "0", "50", lambda x, y: y[-1]["plain_us"] > x[-1]["plain_us"]),
        (
            "--crypto-threads",
            "8",
            "1",
            lambda x, y: _secure(y) > _secure(x) and y[-1]["plain_us"] == x[-1]["plain_us"],
        ),
    ],
)
def test_each_project_option_changes_what_it_claims(tmp_path, option, a, b, check):
    """Every option of the projection, given two values, changes the rows as its help says."""
    nodes = [] if option == "--nodes" else ["--nodes", "1,64"]
    x = project(tmp_path, *nodes, option, a)[1]
    y = project(tmp_path, *nodes, option, b)[1]
    assert check(x, y), (x, y)


def test_oversubscription_within_a_leaf_says_it_does_not_apply(tmp_path):
    proc, rows = project(tmp_path, "--nodes", "1,32", "--oversubscription", "4")
    assert "oversubscription applies above a leaf switch (32 nodes)" in proc.stdout
    assert rows == project(tmp_path, "--nodes", "1,32")[1]


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--nodes", "0,2"], "--nodes must be >= 1"),
        (["--nodes", "a,b"], "comma list of integers or a progression"),
        (["--nodes", "1,2,4,...,2000"], "2000 is not a term of the progression 1,2,4,..."),
        (["--nodes", "1,2,...,8"], "give three terms"),
        (["--nodes", "1,2,5,...,8"], "neither geometric"),
        (["--preset", "myrinet"], "argument --preset: invalid choice: 'myrinet'"),
        (["--collective", "scatter"], "argument --collective: invalid choice: 'scatter'"),
        (["--calibration", "/nonexistent.json"], "cannot read /nonexistent.json"),
        (["--validate", "x.json"], "--validate needs --calibration"),
        (["--message", "0"], "argument --message: must be >= 1, got 0"),
        (["-e", "1"], "unrecognized arguments: -e 1"),
        (["--crypto-threads", "0"], "argument --crypto-threads: must be in [1, 4_096], got 0"),
        (["--crypto-threads=-3"], "argument --crypto-threads: must be in [1, 4_096], got -3"),
        (["--crypto-threads", "-3"], "argument --crypto-threads: must be in [1, 4_096], got -3"),
        (["--jitter-us=-1"], "argument --jitter-us: must be in [0, 1e+09], got -1"),
        (["--oversubscription", "0.5"], "argument --oversubscription: must be in [1, 1e+06], got 0.5"),
        (["--oversubscription", "nan"], "must be a finite number, got 'nan'"),
        (["--ranks-per-node", "0"], "argument --ranks-per-node: must be in [1, 65_536], got 0"),
        (["--calibrate", "x.json", "--nodes", "4"], "--nodes does not apply to --calibrate"),
        (["--validate", "x.json", "--suite", "none"], "--suite does not apply to --validate"),
        (["--out", "c.json"], "--out is where --calibrate writes"),
        (["--calibrate", "a.json", "--validate", "b.json"], "give --calibrate or --validate, not both"),
        (["--preset", "eth-100", "--calibration", str(Path(__file__))], "give --calibration or --preset"),
    ],
)
def test_project_bad_input(capsys, args, msg):
    assert cli.main(["project", *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    "given,kind,found",
    [
        ("bench", "--calibrate", None),
        ("calibration", "--calibrate", "found a calibration (seccomm project --calibrate)"),
        ("projection", "--validate", "found a seccomm project --json result"),
        ("pytest-benchmark", "--calibrate", "found a pytest-benchmark result"),
        ("other", "--validate", "found JSON without the keys config, world_size, rows"),
    ],
)
def test_project_names_the_file_it_expected_and_found(tmp_path, given, kind, found):
    """A JSON file of the wrong kind to --calibrate/--validate (or --calibration): one line saying
    what was expected and what was found, exit 2, no traceback."""
    docs = {
        "bench": {"world_size": 2, "config": {"chunk_bytes": MIB}, "rows": []},
        "calibration": json.loads(CAL.read_text()),
        "projection": {"params": {}, "rows": []},
        "pytest-benchmark": {"benchmarks": []},
        "other": [1, 2],
    }
    f = tmp_path / "f.json"
    f.write_text(json.dumps(docs[given]))
    args = [kind, str(f)] + (["--calibration", str(CAL)] if kind == "--validate" else [])
    proc = run_cmd([*SECCOMM, "project", *args], timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    if found is None:  # the right kind, with no rows: the fit says so
        assert "cannot calibrate from" in proc.stderr and "no allreduce rows" in proc.stderr
    else:
        assert f"expected a seccomm bench --json result, {found}" in proc.stderr, proc.stderr
    bad_cal = (
        run_cmd([*SECCOMM, "project", "--calibration", str(f)], timeout=120)
        if given != "calibration"
        else None
    )
    if bad_cal is not None:
        assert bad_cal.returncode == 2 and "expected a calibration" in bad_cal.stderr


def test_malformed_calibration(tmp_path, capsys):
    bad = tmp_path / "cal.json"
    bad.write_text('{"intra": {"alpha": 1}, "inter": {}, "gamma": 1, "seal": 0, "open": 0}')
    assert cli.main(["project", "--calibration", str(bad)]) == 2
    assert "malformed calibration" in capsys.readouterr().err
    assert math.isfinite(m.get_preset("eth-100").inter.beta)


@pytest.mark.parametrize(
    "args",
    [
        ["--json", "/nonexistent/p.json"],
        ["--csv", "/nonexistent/p.csv"],
        ["--json", "."],
        [
            "--calibrate",
            str(Path(__file__).parents[2] / "docs" / "calibration-dev-2ranks.json"),
            "--out",
            "/x/c.json",
        ],
    ],
)
def test_project_output_paths_checked_before_any_work(tmp_path, args):
    proc = run_cmd([*SECCOMM, "project", *args], timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1


def test_project_cli_outputs(tmp_path, capsys):
    import csv

    j, c = tmp_path / "p.json", tmp_path / "p.csv"
    argv = [
        "project",
        "--nodes",
        "1,4,64",
        "--ranks-per-node",
        "4",
        "--message",
        "8MiB",
        "--encrypt",
        "inter-node",
    ]
    assert cli.main([*argv, "--json", str(j), "--csv", str(c)]) == 0
    out = capsys.readouterr().out
    assert (
        "overhead" in out
        and "busbw plain [GB/s]" in out
        and "busbw secure [GB/s]" in out
        and "algorithm" in out
    )
    assert "plain [us]" in out and "secure [us]" in out
    rows = json.loads(j.read_text())["rows"]
    assert [r["ranks"] for r in rows] == [4, 16, 256]
    assert rows[0]["overhead_x"] == pytest.approx(1.0)  # one node, inter-node policy: no crypto
    assert all(r["secure_us"] >= r["plain_us"] for r in rows)
    assert len(list(csv.DictReader(c.open()))) == 3


def test_calibrate_and_validate_cli(tmp_path, capsys):
    truth = m.Params(m.Link(20e-6, 1e-9), m.Link(20e-6, 1e-9), 1e-10, 4e-10, 4e-10, 1, MIB, {}, False)
    rows = [
        {
            "collective": "allreduce",
            "size_bytes": s,
            "variant": v,
            "time_us": {
                "median": m.predict(
                    "allreduce", calib.bench_algorithm(s, 2), s, truth, m.Topology(1, 2), v != "none"
                )
                * 1e6
            },
        }
        for s in [2**k for k in range(8, 26)]
        for v in ("none", "chacha20-poly1305")
    ]
    res = tmp_path / "bench.json"
    res.write_text(json.dumps({"world_size": 2, "config": {"chunk_bytes": MIB}, "rows": rows}))
    cal = tmp_path / "cal.json"
    assert cli.main(["project", "--calibrate", str(res), "--out", str(cal)]) == 0
    assert "fitted jointly" in json.loads(cal.read_text())["source"]["gamma"]
    assert cli.main(["project", "--validate", str(res), "--calibration", str(cal)]) == 0
    out = capsys.readouterr().out
    assert "|error|  >= 64 KiB: median 0.0%" in out


@pytest.mark.parametrize("collective", list(m.COLLECTIVES))
def test_the_secure_projection_runs_what_securecomm_runs(collective):
    """The secure column projects the algorithm SecureComm's auto rule picks at that size (never
    one it does not implement, as rabenseifner or hierarchical); the plain column may take the
    fastest modelled one, as an MPI library would."""
    from seccomm.collectives import get_collective

    rec = get_collective(collective)
    prm = m.get_preset("ib-ndr400")
    for nbytes in (4096, 256 << 10, 25 * MIB):
        for r in m.sweep(prm, [1, 8, 512], 8, nbytes, collective, "all", 2.0, 2e-6):
            assert r["runs"] in rec.algorithms, r
            assert r["algorithm_secure"] == r["runs"] or r["runs"] not in rec.cost, r
            assert r["algorithm_native"] in rec.cost and r["algorithm_plain"] == r["algorithm_secure"]
            assert r["native_us"] <= r["plain_us"] + 1e-9  # (the fastest modelled: never slower)
    rows = m.sweep(prm, [512], 8, 25 * MIB, "allreduce", "all", 2.0, 2e-6)
    assert rows[0]["algorithm_secure"] == "ring" and rows[0]["algorithm_native"] == "rabenseifner"


def test_identity_costs_follow_their_formulas():
    """seccomm.identitycost: the setup per rank (network + CPU) and the origin proofs per op,
    term by term, at the rates it holds."""
    import math

    from seccomm import identitycost as ic

    r = ic.RATES
    for p in (1, 2, 8, 1024):
        steps = math.ceil(math.log2(p)) if p > 1 else 0
        net = (2 * steps + (p > 1)) * 2e-6 + (p - 1) * (4096 + 520 + 48) * 1e-10
        psk = ic.setup_seconds(p, 2e-6, 1e-10, "psk")
        assert psk["network"] == pytest.approx(net) and psk["cpu"] == pytest.approx(
            p * r.mac + 2 * (p - 1) * r.hkdf
        )
        dhe = ic.setup_seconds(p, 2e-6, 1e-10, "psk-dhe")["cpu"]
        assert dhe == pytest.approx(psk["cpu"] + (p - 1) * r.x25519)
        x = ic.setup_seconds(p, 2e-6, 1e-10, "x509", certs=2)
        want = 2 * r.chain + (p - 1) * (r.parse + r.verify + r.x25519 + 3 * r.hkdf) + r.sign
        assert x["cpu"] == pytest.approx(want) and x["total"] == pytest.approx(x["cpu"] + net)
    with pytest.raises(ValueError, match="unknown identity"):
        ic.setup_seconds(4, 1e-6, 1e-10, "x.509")
    S = 8 << 20
    assert ic.origin_seconds("allgather", "ring", S, 2) == 0.0  # no third rank: nothing sent
    assert ic.origin_seconds("allreduce", "recursive_doubling", S, 8) == 0.0  # no group frames
    assert ic.origin_seconds("alltoall", "pairwise", S, 8) == 0.0
    p = 8
    ag = (p - 1) * (S / p) * r.gmac + S * (p - 1) / p * r.gmac + 2 * (p - 1) * r.message
    assert ic.origin_seconds("allgather", "ring", S, p) == pytest.approx(ag)
    assert ic.origin_seconds("allreduce", "ring", S, p) == pytest.approx(ag)
    root = (p - 1) * S * r.gmac + (p - 1) * r.message
    assert ic.origin_seconds("bcast", "binomial", S, p) == pytest.approx(root)


def test_project_with_identity_adds_setup_and_proofs_to_every_row():
    from seccomm import costmodel, identitycost

    prm = costmodel.get_preset("ib-ndr400")
    rows = costmodel.sweep(prm, [1, 128, 2048], 8, 25 << 20, "allreduce", "all", 1.0, 0.0)
    identitycost.annotate(rows, "allreduce", 25 << 20, "x509", prm)
    for r in rows:
        link = prm.inter if r["nodes"] > 1 else prm.intra
        assert r["setup_ms"] == pytest.approx(
            identitycost.setup_seconds(r["ranks"], link.alpha, link.beta)["total"] * 1e3
        )
        assert r["origin_us"] == pytest.approx(
            identitycost.origin_seconds("allreduce", r["runs"], 25 << 20, r["ranks"]) * 1e6
        )
        assert r["identity_overhead_x"] == pytest.approx((r["secure_us"] + r["origin_us"]) / r["plain_us"])
    assert rows[-1]["ranks"] == 16384 and rows[-1]["setup_ms"] > rows[0]["setup_ms"]
    identitycost.annotate(rows, "allreduce", 25 << 20, "psk", prm)
    assert all(r["origin_us"] == 0 for r in rows)
