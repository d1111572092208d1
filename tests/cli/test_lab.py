"""The scaling lab (`seccomm cluster`, seccomm/lab/): specs, names, addresses and the scaling
table in-process; then real emulated clusters (network namespaces, shaped veth links, MPI ranks
placed in them), checking that traffic crossed the links and that teardown leaves nothing behind:
after a run, after an error inside the block, after SIGTERM and Ctrl-C, in an unprivileged user
namespace, and with the WireGuard variant.  The cluster tests need CAP_NET_ADMIN and
CAP_SYS_ADMIN (root, as in .ci/run) and skip with the reason elsewhere; together they take about
30 s on 2 shared cores.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from seccomm import cli, launch
from seccomm.lab import Cluster, ClusterSpec, netns, parse_rate, privilege, tunnel
from seccomm.lab.spec import BENCH_NET, MAX_HOSTS, format_rate
from seccomm.lab.sweep import scaling_rows, scaling_table

from helpers import kill_tree, run_cmd

SECCOMM = [sys.executable, "-m", "seccomm"]
CAN_BUILD = privilege.privileged() and launch.find_mpiexec() is not None
_skip = pytest.mark.skipif(not CAN_BUILD, reason=f"cannot build namespaces here: {privilege.NEEDS}")


def lab(test):
    """A test that builds clusters: marked ``lab``, skipped with the reason where it cannot."""
    return pytest.mark.lab(_skip(test))


SMALL = ["-b", "256K", "-e", "256K", "-n", "2", "-w", "0"]


def test_rates():
    assert parse_rate("1gbit") == 10**9 and parse_rate("10Gbit") == 10**10
    assert parse_rate("500mbit") == 5 * 10**8 and parse_rate("2.5gbit") == 25 * 10**8
    assert parse_rate("100M") == 10**8 and parse_rate("2000000") == 2 * 10**6
    for bad in ("", "fast", "1gbyte", "-1gbit", "10kbit", "1tbit"):
        with pytest.raises(ValueError, match="link rate"):
            parse_rate(bad)
    assert format_rate(10**9) == "1gbit" and format_rate(25 * 10**8) == "2.5gbit"


def test_spec_checks_and_racks():
    s = ClusterSpec(8, 2, 10**9, hosts_per_rack=4, oversubscription=2)
    assert (s.ranks, s.racks, s.rack_size, s.uplink_bps) == (16, 2, 4, 2 * 10**9)
    assert [s.rack_of(i) for i in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert ClusterSpec(3).racks == 1 and ClusterSpec(5, hosts_per_rack=2).racks == 3
    for bad in ({"hosts": 0}, {"hosts": MAX_HOSTS + 1}, {"hosts": 2, "ranks_per_host": 0},
                {"hosts": 2, "oversubscription": 0.5}, {"hosts": 2, "mtu": 100},
                {"hosts": 2, "prefix": "eth0"}):  # fmt: skip
        with pytest.raises(ValueError):
            ClusterSpec(**bad)


def test_names_and_addresses_stay_in_bounds():
    """Every name fits an interface name (15 characters), every address is in 198.18.0.0/15,
    and two runs never share a prefix."""
    s = ClusterSpec(MAX_HOSTS, hosts_per_rack=1)
    links = [f"{s.prefix}{k}{i}" for k in "rudpw" for i in range(MAX_HOSTS)] + [f"{s.prefix}sp"]
    names = s.namespaces() + links
    assert max(map(len, names)) <= 15 and len(set(names)) == len(names)
    addrs = [s.address(i, t) for i in range(MAX_HOSTS) for t in (False, True)]
    assert all(a in BENCH_NET for a in addrs) and len(set(addrs)) == len(addrs)
    assert ipaddress.ip_network("198.18.0.0/15").num_addresses == BENCH_NET.num_addresses
    assert len({ClusterSpec(2).prefix for _ in range(50)}) > 45


def test_mpmd_line_places_ranks_in_blocks():
    s = ClusterSpec(3, 2)
    cmd = Cluster(s, mpiexec="mpiexec").mpmd(["python", "x.py"], devices=["a", "b", "c"])
    parts = " ".join(cmd).split(" : ")
    assert len(parts) == 3
    for i, part in enumerate(parts):
        assert f"-n 2 ip netns exec {s.host(i)} unshare --uts --mount sh -c" in part
        shm = netns.shm_dir(s.prefix, s.host(i))
        assert part.endswith(f"{s.host(i)} {shm} env UCX_NET_DEVICES={'abc'[i]} python x.py")
    env = Cluster(s).env()
    assert env["UCX_TLS"] == "tcp,self" and env["MPIR_CVAR_NOLOCAL"] == "1" and env[netns.RUN_ENV] == s.prefix


def _row(variant, size, ranks, t, busbw):
    return {"variant": variant, "size_bytes": size, "collective": "allreduce", "ranks": ranks,
            "time_us": {"median": t}, "busbw_gbps": busbw}  # fmt: skip


def _run(hosts, network, rows):
    spec = ClusterSpec(hosts).as_dict()
    return {"spec": spec, "network": network, "bench": {"rows": rows}}


def test_scaling_rows_overhead_efficiency_and_tunnel_label():
    runs = [
        _run(1, "plain", [_row("native", 8, 1, 1.0, 0.0)]),
        _run(2, "plain", [_row("native", 8, 2, 10.0, 0.1), _row("aes-256-gcm", 8, 2, 20.0, 0.05)]),
        _run(2, "wireguard", [_row("native", 8, 2, 40.0, 0.025), _row("none", 8, 2, 50.0, 0.02)]),
        _run(4, "plain", [_row("native", 8, 4, 20.0, 0.075), _row("aes-256-gcm", 8, 4, 30.0, 0.04)]),
    ]
    rows = scaling_rows(runs, 8)
    got = {(r["hosts"], r["variant"]): r for r in rows}
    assert set(got) == {(1, "native"), (2, "native"), (2, "aes-256-gcm"), (2, "native+wireguard"),
                        (4, "native"), (4, "aes-256-gcm")}  # fmt: skip
    assert got[(2, "native+wireguard")]["overhead_x"] == 4.0  # against plain native on the same hosts
    assert got[(4, "aes-256-gcm")]["overhead_x"] == 1.5
    assert got[(4, "native")]["efficiency"] == pytest.approx(0.75)  # busbw / busbw at 2 hosts
    assert got[(4, "aes-256-gcm")]["efficiency"] == pytest.approx(0.8)
    assert got[(1, "native")]["efficiency"] != got[(1, "native")]["efficiency"]  # 1 rank: none
    assert got[(2, "native")]["link_share"] == pytest.approx(0.8)  # 0.1 GB/s of 1 Gb/s
    text = "\n".join(scaling_table(rows, 8, "allreduce"))
    assert "native+wireguard" in text and "efficiency" in text
    assert "link [%] = busbw x 8 / the host link's rate" in text and "* above 100" not in text


def test_a_link_share_above_the_rate_is_marked_and_explained():
    """busbw 0.134 GB/s on a 1 Gb/s link reads 107 %: marked, and the table says why it can
    (busbw counts a flat ring's bytes) instead of reporting a link faster than its rate."""
    runs = [_run(2, "plain", [_row("native", 8, 2, 10.0, 0.134)])]
    text = "\n".join(scaling_table(scaling_rows(runs, 8), 8, "allreduce"))
    assert " 107* " in text and "# * above 100: the host links carried fewer bytes" in text, text


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--hosts", "0"], "hosts must be in 1..64"),
        (["--hosts", "16,64"], "--hosts 64: the lab runs at most 32 hosts"),
        (["--hosts", "2,x"], "bad --hosts '2,x'"),
        (["--hosts", ","], "give at least one host count"),
        (["--link", "fast"], "bad link rate 'fast'"),
        (["--mtu", "100"], "argument --mtu: must be in [1_280, 9_000], got 100"),
        (["--oversubscription", "0.5"], "argument --oversubscription: must be >= 1, got 0.5"),
        (
            ["--hosts", "2", "--oversubscription", "2"],
            "every cluster here is one rack: give --hosts-per-rack",
        ),
        (
            ["--hosts", "2", "--hosts-per-rack", "2", "--oversubscription", "2"],
            "every cluster here is one rack",
        ),
        (["--", "--np", "4"], "--np: the lab sets these itself"),
        (["--", "--json", "x.json"], "--json: the lab sets these itself"),
        (["--", "--suites", "rot13"], "unknown suite rot13"),
        (["--at", "3M", "--", "-b", "1M", "-e", "4M"], "--at 3145728 is not a benched size"),
        (["--json", "/nonexistent/x.json"], "folder /nonexistent does not exist"),
    ],
)
def test_bad_arguments_one_line_before_anything_is_built(capsys, monkeypatch, args, msg):
    def never(*_a, **_k):
        raise AssertionError("a cluster was built (or the command re-run) despite a bad argument")

    monkeypatch.setattr(netns, "build", never)
    monkeypatch.setattr(privilege, "userns_argv", never)
    assert cli.main(["cluster", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("seccomm cluster: error: ") and msg in err and "\n" not in err, err


def test_a_tunnel_asked_for_but_not_installed_is_refused_before_anything_is_built(capsys, monkeypatch):
    """--tunnel wireguard without wireguard-go: exit 2 and the install line, nothing built
    (before: '# wireguard: skipped', the plain runs, exit 0)."""

    def never(*_a, **_k):
        raise AssertionError("a cluster was built although the tunnel asked for cannot run")

    monkeypatch.setattr(netns, "build", never)
    monkeypatch.setattr(privilege, "userns_argv", never)
    monkeypatch.setattr(
        tunnel, "missing", lambda: "wireguard-go not installed (apt-get install wireguard-go)"
    )
    assert cli.main(["cluster", "--hosts", "2", "--tunnel", "wireguard"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "seccomm cluster: error: --tunnel wireguard: wireguard-go not installed (apt-get install "
        "wireguard-go); install it, or leave --tunnel out"
    ), err


def test_without_privileges_one_line_says_what_is_needed(capsys, monkeypatch):
    monkeypatch.setattr(privilege, "privileged", lambda: False)
    monkeypatch.setattr(privilege, "userns_works", lambda: False)
    assert cli.main(["cluster", "--hosts", "2"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "needs CAP_NET_ADMIN and CAP_SYS_ADMIN" in err and "user namespaces" in err


def _prefixes(out: str) -> list[str]:
    return re.findall(r"\(run (sl[0-9a-f]{5})\)", out)


def _cluster(tmp_path, *args, timeout=240, **kw):
    """``seccomm cluster ARGS --json``; (process, its JSON or None, the runs' prefixes)."""
    out = tmp_path / "lab.json"
    proc = run_cmd([*SECCOMM, "cluster", "--json", str(out), *args], timeout=timeout, **kw)
    doc = json.loads(out.read_text()) if out.exists() else None
    return proc, doc, _prefixes(proc.stdout)


@lab
def test_two_hosts_secure_allreduce_crosses_the_links(tmp_path):
    """2 hosts x 1 rank at 1 Gb/s, aes-256-gcm inter-node: seccomm sees 2 nodes, every check
    passes, each host's link carried at least the allreduce's bytes, nothing is left."""
    proc, doc, prefixes = _cluster(tmp_path, "--hosts", "2", "--", *SMALL, "--suites", "aes-256-gcm",
                                   "--encrypt", "inter-node")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 ranks on 2 node(s)" in proc.stdout  # separate host names: inter-node applies
    assert "# lab: hosts 2 x ranks/host 1, link 1gbit" in proc.stdout
    (run,) = doc["runs"]
    assert run["returncode"] == 0 and all(r["wrong"] == 0 for r in run["bench"]["rows"])
    assert {r["variant"] for r in run["bench"]["rows"]} == {"native", "aes-256-gcm"}
    # each of 2 variants x 2 iterations moves >= 256 KiB each way between the two hosts
    for host, n in run["link_bytes"].items():
        assert n["tx"] >= 4 * 256 * 1024 and n["rx"] >= 4 * 256 * 1024, (host, n)
    assert len(prefixes) == 1 and netns.leftovers(prefixes[0]) == []


@lab
def test_two_hosts_with_their_own_certificates_encrypt_between_them(tmp_path):
    """A test CA made as docs/usage.md says (seccomm identity), one certificate per emulated
    host (--identity DIR): the bench runs aes-256-gcm and aes-256-gcm+x509 inter-node on 2
    nodes, every check passes; a folder short of a host's files is refused before anything is
    built."""
    made = run_cmd(
        [*SECCOMM, "identity", "--out", str(tmp_path / "pki"), "node-a.test", "node-b.test"], timeout=60
    )
    assert made.returncode == 0, made.stderr
    proc, doc, prefixes = _cluster(tmp_path, "--hosts", "2", "--identity", str(tmp_path / "pki"), "--",
                                   *SMALL, "--suites", "aes-256-gcm", "--encrypt", "inter-node")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 ranks on 2 node(s)" in proc.stdout
    assert "# identity: x509 for the SUITE+x509 variants, from SECCOMM_CERT_FILE" in proc.stdout
    (run,) = doc["runs"]
    assert {r["variant"] for r in run["bench"]["rows"]} == {"native", "aes-256-gcm", "aes-256-gcm+x509"}
    assert run["returncode"] == 0 and all(r["wrong"] == 0 for r in run["bench"]["rows"])
    assert len(prefixes) == 1 and netns.leftovers(prefixes[0]) == []
    short, _, built = _cluster(tmp_path, "--hosts", "3", "--identity", str(tmp_path / "pki"), "--", *SMALL)
    assert short.returncode == 2 and built == [], short.stdout[-2000:]
    assert "host 2: SECCOMM_CERT_FILE" in short.stderr and "cannot be opened" in short.stderr


@lab
def test_each_host_has_its_own_dev_shm_and_teardown_deletes_it():
    """A rank's /dev/shm is its host's own folder of the run (MPICH's shared-memory files of
    killed ranks stay there, not in the machine's /dev/shm, and go with the teardown; before,
    2 files of 1 MB stayed per interrupted run)."""
    from pathlib import Path

    spec = ClusterSpec(2)
    with Cluster(spec) as c:
        res = c.run(["sh", "-c", 'touch /dev/shm/seccomm-probe-"$(hostname)"'], 60)
        assert res.returncode == 0
        for i in range(2):
            assert (netns.shm_dir(spec.prefix, spec.host(i)) / f"seccomm-probe-{spec.host(i)}").exists()
        assert not list(Path("/dev/shm").glob("seccomm-probe-*"))
        assert f"files {netns.run_dir(spec.prefix)}" in netns.leftovers(spec.prefix)
    assert not netns.run_dir(spec.prefix).exists() and netns.leftovers(spec.prefix) == []


@lab
def test_error_inside_the_block_leaves_nothing():
    spec = ClusterSpec(2)
    with pytest.raises(RuntimeError, match="boom"):
        with Cluster(spec) as c:
            sleeper = subprocess.Popen(["ip", "netns", "exec", spec.host(1), "sleep", "60"], env=c.env())
            assert len(netns.namespaces(spec.prefix)) == 3 and netns.marked_pids(spec.prefix)
            raise RuntimeError("boom")
    assert sleeper.wait(timeout=10) == -signal.SIGTERM
    assert netns.leftovers(spec.prefix) == []


@lab
def test_racks_shape_the_uplink_and_traffic_crosses_it(tmp_path):
    """2 racks of 1 host, oversubscription 2: each uplink end is shaped to 500 Mbit/s and an
    allreduce between the hosts crosses it."""
    spec = ClusterSpec(2, hosts_per_rack=1, oversubscription=2)
    script = tmp_path / "ar.py"
    script.write_text(
        "import numpy as np\nfrom mpi4py import MPI\na = np.ones(1 << 18, np.float32)\n"
        "MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, a)\nassert a[0] == MPI.COMM_WORLD.Get_size()\n"
    )
    with Cluster(spec) as c:
        for end in ("u0", "d0", "u1", "d1"):
            (q,) = json.loads(netns.tc("-n", spec.switch_ns, "-j", "qdisc", "show", "dev", spec.prefix + end))
            assert q["kind"] == "tbf" and q["options"]["rate"] == 500 * 10**6 // 8, q
        res = c.run([sys.executable, str(script)], time_limit=60)
        up = c.counters()["uplink 0"]
    assert res.returncode == 0
    assert up["tx"] >= 1 << 20 and up["rx"] >= 1 << 20, up  # 1 MiB of float32 each way, at least
    assert netns.leftovers(spec.prefix) == []


def _until(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.1)


def _first_prefix(proc) -> str:
    """The prefix of the first run the command announces (on its standard output)."""
    for line in proc.stdout:
        if _prefixes(line):
            return _prefixes(line)[0]
    pytest.fail(f"the command ended without starting a run: {proc.stderr.read()[-2000:]}")


DROP_CAPS = ["setpriv", "--bounding-set=-net_admin,-sys_admin", "--inh-caps=-net_admin,-sys_admin"]
USERNS = pytest.mark.skipif(
    shutil.which("setpriv") is None or not privilege.userns_works(),
    reason="no setpriv (util-linux) or no unprivileged user namespaces here",
)


@lab
@pytest.mark.parametrize(
    "sig,status,drop",
    [
        (signal.SIGTERM, 128 + signal.SIGTERM, []),
        (signal.SIGINT, 130, []),
        pytest.param(signal.SIGTERM, 128 + signal.SIGTERM, DROP_CAPS, marks=USERNS, id="userns-SIGTERM"),
    ],
)
def test_signal_during_a_run_tears_everything_down(sig, status, drop):
    """SIGTERM (and Ctrl-C's SIGINT) to the command while its ranks run, as root and in a user
    namespace (where the command passes it on to its re-run): exit status, and no namespace,
    link, process or socket of the run remains."""
    cmd = [*drop, *SECCOMM, "cluster", "--hosts", "2", "--", "-b", "4M", "-e", "4M", "-n", "500", "-w", "0",
           "--suites", "none"]  # fmt: skip
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    proc = subprocess.Popen(cmd, **pipes, start_new_session=True)
    try:
        prefix = _first_prefix(proc)
        _until(lambda: len(netns.marked_pids(prefix)) >= 3, 60, "the ranks")  # mpiexec, proxy, ranks
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
    finally:
        kill_tree(proc)
    assert proc.returncode == status, err[-2000:]
    assert "torn down" in err and netns.leftovers(prefix) == []


@lab
@USERNS
def test_without_capabilities_runs_in_a_user_namespace(tmp_path):
    """The same command with CAP_NET_ADMIN and CAP_SYS_ADMIN dropped: it re-runs itself in an
    unprivileged user + network + mount namespace."""
    out = tmp_path / "lab.json"
    proc = run_cmd([*DROP_CAPS, *SECCOMM, "cluster", "--hosts", "2", "--json", str(out), "--", *SMALL,
                    "--suites", "none"], timeout=240)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run,) = json.loads(out.read_text())["runs"]
    assert min(n["tx"] for n in run["link_bytes"].values()) >= 4 * 256 * 1024
    assert netns.leftovers(_prefixes(proc.stdout)[0]) == []


@lab
@pytest.mark.skipif(tunnel.missing() is not None, reason=f"WireGuard variant: {tunnel.missing()}")
def test_wireguard_variant_beside_the_suites(tmp_path):
    """--tunnel wireguard: native MPI through a WireGuard mesh on the same links, in the same
    scaling table; its daemons and control sockets are gone afterwards."""
    proc, doc, prefixes = _cluster(tmp_path, "--hosts", "2", "--tunnel", "wireguard", "--", *SMALL,
                                   "--suites", "aes-256-gcm")  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [r["network"] for r in doc["runs"]] == ["plain", "wireguard"]
    assert {r["variant"] for r in doc["scaling"]} == {"native", "aes-256-gcm", "native+wireguard"}
    wg = doc["runs"][1]
    assert min(n["tx"] for n in wg["link_bytes"].values()) >= 4 * 256 * 1024  # encrypted UDP on eth0
    assert prefixes and all(netns.leftovers(p) == [] for p in prefixes)


def _lab_doc(truth) -> dict:
    """A ``seccomm cluster --json`` document whose rows are ``truth``'s predictions: 1, 2, 4 hosts
    on one switch and 8 hosts in racks of 4 with 2:1 uplinks (plus a tunnel run to be ignored)."""
    from seccomm import calibration as calib
    from seccomm import costmodel as m

    runs = []
    for hosts, per_rack, o, net in ((1, 0, 1, "plain"), (2, 0, 1, "plain"), (2, 0, 1, "wireguard"),
                                    (4, 0, 1, "plain"), (8, 4, 2, "plain")):  # fmt: skip
        spec = ClusterSpec(hosts, hosts_per_rack=per_rack, oversubscription=o).as_dict()
        topo = m.Topology(hosts, 1, o if spec["racks"] > 1 else 1.0, spec["hosts_per_rack"])
        rows = [
            {"collective": "allreduce", "size_bytes": s, "variant": v, "time_us": {"median": 1e6 * m.predict(
                "allreduce", calib.bench_algorithm(s, hosts), s, truth, topo, v != "none")}}
            for s in [2**k for k in range(12, 25)] for v in ("none", "aes-256-gcm")
        ]  # fmt: skip
        bench = {"world_size": hosts, "config": {"chunk_bytes": 1 << 20}, "rows": rows}
        runs.append({"spec": spec, "network": net, "bench": bench})
    return {"runs": runs}


def test_project_calibrates_on_2_hosts_and_validates_the_sweep(tmp_path, capsys):
    """``seccomm project --calibrate/--validate`` read a lab sweep: the fit comes from the 2-host
    run (inter-node link), and predictions for 4 hosts and for 8 hosts in oversubscribed racks
    reproduce a sweep made by the model itself (the racks' taper is read from the runs)."""
    from seccomm import costmodel as m

    truth = m.Params(m.Link(40e-6, 8e-9), m.Link(40e-6, 8e-9), 2e-10, 3e-10, 3e-10, 1, 1 << 20, {}, False)
    lab_json, cal_json = tmp_path / "lab.json", tmp_path / "cal.json"
    lab_json.write_text(json.dumps(_lab_doc(truth)))
    assert cli.main(["project", "--calibrate", str(lab_json), "--out", str(cal_json)]) == 0
    cal = json.loads(cal_json.read_text())
    assert cal["inter"]["beta"] == pytest.approx(8e-9, rel=1e-6) and "2 node(s)" in cal["source"]["inter"]
    assert cli.main(["project", "--validate", str(lab_json), "--calibration", str(cal_json)]) == 0
    out = capsys.readouterr().out
    assert "ranks [2, 4, 8]" in out  # the 1-host run (no traffic) and the tunnel run are left out
    for n in (2, 4, 8):
        assert f"|error|    {n} nodes: median 0.0%" in out, out[-1500:]
