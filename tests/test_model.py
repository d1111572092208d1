"""The cost model: hand-computed cases, limits, monotonicity, calibration recovery, bad input."""

from __future__ import annotations

import math
import time

import pytest

from seccomm import cli
from seccomm import costmodel as m

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


def test_calibration_recovers_synthetic_parameters():
    true_alpha, true_beta, gamma, sigma, p = 30e-6, 5e-10, 4e-11, 3e-10, 2
    truth = m.Params(
        m.Link(true_alpha, true_beta), m.Link(true_alpha, true_beta), gamma, sigma, sigma, 1, MIB, {}, False
    )
    rows = []
    for s in [2**k for k in range(10, 27, 2)]:
        for v, sec in (("none", False), ("aes-256-gcm", True)):
            t = m.predict("allreduce", m.bench_algorithm(s, p), s, truth, m.Topology(1, p), sec)
            rows.append(
                {"collective": "allreduce", "size_bytes": s, "variant": v, "time_us": {"median": t * 1e6}}
            )
    doc = {"world_size": p, "config": {"chunk_bytes": MIB}, "rows": rows}
    cal = m.calibrate(doc, gamma)
    assert cal["intra"]["alpha"] == pytest.approx(true_alpha, rel=1e-6)
    assert cal["intra"]["beta"] == pytest.approx(true_beta, rel=1e-6)
    assert cal["suites"]["aes-256-gcm"]["seal"] == pytest.approx(sigma, rel=1e-6)
    errs = [abs(r["error"]) for r in m.validate(doc, cal)]
    assert max(errs) < 1e-6


def test_sweep_to_16384_gpus_is_fast():
    t0 = time.perf_counter()
    rows = m.sweep(
        m.get_preset("ib-ndr400"), [2**i for i in range(12)], 8, 25 * MIB, "allreduce", "all", 2.0, 1e-6
    )
    assert time.perf_counter() - t0 < 1.0
    assert rows[-1]["ranks"] == 16384 and all(r["overhead_x"] >= 1 for r in rows)
    assert all(0 < r["efficiency_secure"] <= 1.0 + 1e-9 for r in rows)


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--nodes", "0,2"], "must be >= 1"),
        (["--nodes", "a,b"], "comma list of integers"),
        (["--preset", "myrinet"], "unknown preset 'myrinet'; allowed: ib-ndr400"),
        (["--collective", "scatter"], "unknown collective 'scatter'; allowed: allreduce"),
        (["--calibration", "/nonexistent.json"], "cannot read /nonexistent.json"),
        (["--validate", "x.json"], "--validate needs --calibration"),
    ],
)
def test_project_bad_input(capsys, args, msg):
    assert cli.main(["project", *args]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


def test_malformed_calibration(tmp_path, capsys):
    bad = tmp_path / "cal.json"
    bad.write_text('{"intra": {"alpha": 1}}')
    assert cli.main(["project", "--calibration", str(bad)]) == 2
    assert "malformed calibration" in capsys.readouterr().err
    assert math.isfinite(m.get_preset("eth-100").inter.beta)


def test_project_cli_outputs(tmp_path, capsys):
    import csv
    import json

    j, c = tmp_path / "p.json", tmp_path / "p.csv"
    assert (
        cli.main(
            [
                "project",
                "--nodes",
                "1,4,64",
                "--ranks-per-node",
                "4",
                "--message",
                "8MiB",
                "--encrypt",
                "inter-node",
                "--json",
                str(j),
                "--csv",
                str(c),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "overhead" in out and "busbw" in out and "algorithm" in out
    rows = json.loads(j.read_text())["rows"]
    assert [r["ranks"] for r in rows] == [4, 16, 256]
    assert rows[0]["overhead_x"] == pytest.approx(1.0)  # one node, inter-node policy: no crypto
    assert all(r["secure_us"] >= r["plain_us"] for r in rows)
    assert len(list(csv.DictReader(c.open()))) == 3


def test_calibrate_and_validate_cli(tmp_path, capsys):
    import json

    truth = m.Params(m.Link(20e-6, 1e-9), m.Link(20e-6, 1e-9), 1e-10, 4e-10, 4e-10, 1, MIB, {}, False)
    rows = [
        {
            "collective": "allreduce",
            "size_bytes": s,
            "variant": v,
            "time_us": {
                "median": m.predict(
                    "allreduce", m.bench_algorithm(s, 2), s, truth, m.Topology(1, 2), v != "none"
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
