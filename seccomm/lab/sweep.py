"""The bench on emulated clusters: one ``seccomm bench`` run per (host count, network), and the
scaling table across host counts.

A *network* is ``plain`` (the shaped links) or ``wireguard`` (native MPI and the suites through a
WireGuard mesh on the same links: :mod:`.tunnel`).  Each run is the bench unchanged, its own table
printed as it goes, its JSON kept; :func:`scaling_rows` then takes one message size from every
run: time, busbw, overhead against plain native MPI on the same hosts, and scaling efficiency.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from ..keys import new_secret_file
from ..launch import python_argv
from . import tunnel
from .cluster import Cluster
from .spec import ClusterSpec, format_rate

NETWORKS = ("plain", "wireguard")
#: row label of native MPI through a tunnel (the bench calls it ``native``)
TUNNEL_LABEL = {"wireguard": "native+wireguard"}


def bench_on(
    cluster: Cluster, bench_args: list[str], network: str, time_limit: float, identity: str | None = None
) -> dict:
    """Run ``seccomm bench BENCH_ARGS`` on every rank of ``cluster`` over ``network``; the run's
    record: network, exit status, wall and CPU seconds, bytes on each link, the bench's JSON.
    ``identity``: a folder of :func:`~seccomm.identity.make_test_identities` (``seccomm
    identity``), whose ``host-<i>`` certificate and key host ``i``'s ranks use."""
    devices = tunnel.up(cluster.spec, cluster.env()) if network == "wireguard" else None
    folder = tempfile.mkdtemp(
        prefix="seccomm-lab-"
    )  # (0700; its hosts see it, not /dev/shm: theirs is their own)
    secret = new_secret_file(folder)
    out = Path(folder, "bench.json")
    header = f"{cluster.spec.describe()}, network {network}"
    try:
        before = cluster.counters()
        argv = python_argv("seccomm", "bench", *bench_args, "--json", str(out))
        host_env = (
            None if identity is None else [host_identity(identity, i) for i in range(cluster.spec.hosts)]
        )
        env = {"SECCOMM_PSK_FILE": secret, "SECCOMM_LAB": header}
        res = cluster.run(argv, time_limit, devices, env=env, host_env=host_env)
        after = cluster.counters()
        doc = json.loads(out.read_text()) if out.exists() else None
    finally:
        os.unlink(secret)
        out.unlink(missing_ok=True)
        os.rmdir(folder)
    link = {k: {d: after[k][d] - before[k][d] for d in ("rx", "tx")} for k in after}
    return {"spec": cluster.spec.as_dict(), "network": network, "returncode": res.returncode,
            "wall_s": res.wall_s, "cpu_s": res.cpu_s, "machine_busy": res.machine_busy,
            "link_bytes": link, "bench": doc}  # fmt: skip


def host_identity(folder: str, i: int) -> dict:
    """Host ``i``'s identity variables from ``folder`` (``seccomm identity --out FOLDER``)."""
    f = os.path.abspath(folder)
    return {
        "SECCOMM_CERT_FILE": f"{f}/host-{i}.pem",
        "SECCOMM_KEY_FILE": f"{f}/host-{i}.key",
        "SECCOMM_CA_FILE": f"{f}/ca.pem",
    }


def sweep(
    specs: list[ClusterSpec], bench_args, networks, time_limit: float, log=print, identity: str | None = None
) -> list[dict]:
    """Build each cluster in turn, run the bench on it over each network, tear it down; the
    runs' records (a run that failed is recorded with its status and no rows)."""
    runs = []
    for spec in specs:
        with Cluster(spec) as c:
            for net in networks:
                log(f"# lab: {spec.describe()}, network {net} (run {spec.prefix})")
                runs.append(bench_on(c, bench_args, net, time_limit, identity))
                log(run_line(runs[-1]))
    return runs


def run_line(run: dict) -> str:
    """One line on a run: status, wall time, the run's share of the machine's CPUs and the whole
    machine's (other users included), the busiest link's average load over the run."""
    s = run["spec"]
    busiest = max(max(v["tx"], v["rx"]) for k, v in run["link_bytes"].items() if not k.startswith("uplink"))
    load = busiest * 8 / (run["wall_s"] * s["link_bps"])
    cpu = run["cpu_s"] / (run["wall_s"] * (os.cpu_count() or 1))
    return (
        f"# run: exit {run['returncode']}, {run['wall_s']:.1f} s; CPU: this run {cpu:.0%}, whole machine "
        f"{run['machine_busy']:.0%} of {os.cpu_count()} cores; busiest host link {busiest / 1e6:.1f} MB "
        f"({load:.0%} of {format_rate(s['link_bps'])} averaged over the run)"
    )


def _rows_at(run: dict, size: int, collective: str) -> list[dict]:
    rows = (run["bench"] or {}).get("rows", [])
    return [r for r in rows if r["size_bytes"] == size and r["collective"] == collective]


def scaling_rows(runs: list[dict], size: int, collective: str = "allreduce") -> list[dict]:
    """At message size ``size`` [B]: per host count and variant, time [us], busbw [GB/s],
    overhead [x] (vs plain native MPI on the same hosts), the link's share of busbw, and
    efficiency = busbw / busbw at the smallest host count with more than one rank (as
    ``seccomm project``)."""
    out = []
    for run in runs:
        base = {r["variant"]: r for r in _rows_at(run, size, collective)}
        plain = next((x for x in runs if x["spec"] == run["spec"] and x["network"] == "plain"), run)
        native = {r["variant"]: r for r in _rows_at(plain, size, collective)}.get("native")
        for v, r in base.items():
            if run["network"] != "plain" and v != "native":
                continue  # through a tunnel: native MPI only (the suites' rows stay in the JSON)
            out.append(_scaling_row(run, r, TUNNEL_LABEL.get(run["network"], v), native))
    _efficiency(out)
    return out


def _scaling_row(run: dict, r: dict, label: str, native: dict | None) -> dict:
    s, t = run["spec"], r["time_us"]["median"]
    return {
        "hosts": s["hosts"],
        "ranks": r["ranks"],
        "variant": label,
        "size_bytes": r["size_bytes"],
        "time_us": t,
        "busbw_gbps": r["busbw_gbps"],
        "overhead_x": t / native["time_us"]["median"] if native else float("nan"),
        "link_share": r["busbw_gbps"] * 8e9 / s["link_bps"] if s["hosts"] > 1 else float("nan"),
    }


def _efficiency(rows: list[dict]) -> None:
    """efficiency = busbw / busbw of the same variant at the smallest host count with > 1 rank."""
    ref: dict = {}
    for r in sorted(rows, key=lambda r: r["hosts"]):
        if r["ranks"] > 1:
            ref.setdefault(r["variant"], r["busbw_gbps"])
    for r in rows:
        b0 = ref.get(r["variant"])
        r["efficiency"] = r["busbw_gbps"] / b0 if b0 and r["ranks"] > 1 else float("nan")


def scaling_table(rows: list[dict], size: int, collective: str) -> list[str]:
    """The scaling table's lines (units in the header, nccl-tests style)."""
    head = f"# {'hosts':>5} {'ranks':>5} {'variant':>18} {'time [us]':>11} {'busbw [GB/s]':>12} "
    head += f"{'overhead [x]':>12} {'link [%]':>8} {'efficiency':>10}"
    lines = [f"#\n# scaling: {collective} at {size} B (the same bench rows as above)", head]
    over = False
    for r in rows:
        link = "-" if r["link_share"] != r["link_share"] else f"{100 * r['link_share']:.0f}"
        if r["link_share"] > 1.0:
            link, over = link + "*", True
        eff = "-" if r["efficiency"] != r["efficiency"] else f"{r['efficiency']:.2f}"
        lines.append(
            f"  {r['hosts']:>5} {r['ranks']:>5} {r['variant']:>18} {r['time_us']:>11.1f} "
            f"{r['busbw_gbps']:>12.3f} {r['overhead_x']:>12.2f} {link:>8} {eff:>10}"
        )
    lines.append(
        "# link [%] = busbw x 8 / the host link's rate: the share of a link that a ring's traffic "
        "at this busbw would take (busbw counts the bytes a flat ring sends on every hop)"
    )
    if over:
        lines.append(
            "# * above 100: the host links carried fewer bytes than a flat ring's at this busbw "
            "(tbf holds each link to its rate, with a burst of 250 us), so the share overstates "
            "the link's use; the run's line above gives the bytes the links did carry"
        )
    return lines
