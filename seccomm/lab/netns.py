"""Build and tear down an emulated cluster with ``ip`` and ``tc`` (iproute2).

Every host is a network namespace whose ``eth0`` is one end of a veth pair; the other end is a
port of its rack's bridge in the switch namespace.  With more than one rack, each rack bridge
reaches a spine bridge through an uplink veth pair.  ``tbf`` shapes both ends of every link (full
duplex: each direction at the link rate).  Nothing is made in the caller's namespace.

Every process the lab starts carries ``SECCOMM_LAB_RUN=<prefix>`` in its environment; teardown
ends them by that mark (the ranks, ``mpiexec`` and its proxy, tunnel daemons), then deletes the
run's namespaces, which removes every link and bridge in them.

Every host also has its own ``/dev/shm``: a directory of the run (:func:`shm_dir`) that its ranks
see there (a bind mount in a mount namespace of their own), as separate machines do; MPI's
shared-memory files of ranks that were killed stay in it and teardown deletes it, so nothing of
a run remains in the machine's ``/dev/shm``, however the run ended.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import subprocess
import time
from pathlib import Path

from .spec import ClusterSpec

#: the environment variable that marks every process of a lab run (value: the run's prefix)
RUN_ENV = "SECCOMM_LAB_RUN"
#: tbf queue limit: the time a switch port may buffer at its rate
QUEUE_LATENCY = "10ms"
#: largest segmentation-offload packet [B] on every link: a token bucket must hold one whole
#: packet, and a smaller bucket than the kernel's 64 KiB default cuts the burst a link may send
#: above its rate (measured: 0.86 Gb/s goodput at 1 gbit with 16 KiB and a 32 KiB bucket)
GSO_MAX = 16384
#: the bucket: this many seconds at the link's rate, at least two offload packets
BURST_S = 250e-6


class LabError(RuntimeError):
    """A lab command failed: the command and what it printed."""


def run(cmd: list[str]) -> str:
    """Run ``cmd`` (an iproute2 command); its standard output, or :class:`LabError` with the
    command and its error."""
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise LabError(f"{' '.join(cmd)}: {out.stderr.strip() or f'exit status {out.returncode}'}")
    return out.stdout


def ip(*args: str) -> str:
    return run(["ip", *args])


def tc(*args: str) -> str:
    return run(["tc", *args])


def shape(ns: str, dev: str, bps: int) -> None:
    """Token bucket on ``dev``'s egress: ``bps`` bit/s, a bucket of :data:`BURST_S` at that rate
    (at least two :data:`GSO_MAX` packets), a queue of :data:`QUEUE_LATENCY`."""
    burst = max(int(bps / 8 * BURST_S), 2 * GSO_MAX)
    tc("-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{bps}bit", "burst", str(burst),
       "latency", QUEUE_LATENCY)  # fmt: skip


def _link_up(ns: str, dev: str, mtu: int, master: str | None = None) -> None:
    """MTU, offload packet size, no IPv6 link-local address (no neighbour-discovery chatter),
    bridge port, up."""
    ip(
        "-n",
        ns,
        "link",
        "set",
        "dev",
        dev,
        "mtu",
        str(mtu),
        "addrgenmode",
        "none",
        "gso_max_size",
        str(GSO_MAX),
    )
    if master:
        ip("-n", ns, "link", "set", "dev", dev, "master", master)
    ip("-n", ns, "link", "set", "dev", dev, "up")


def _bridge(ns: str, name: str, mtu: int) -> None:
    ip("-n", ns, "link", "add", name, "type", "bridge", "stp_state", "0")
    _link_up(ns, name, mtu)


def _namespace(name: str) -> None:
    ip("netns", "add", name)
    ip("-n", name, "link", "set", "dev", "lo", "up")


def build(spec: ClusterSpec) -> None:
    """Make the switch namespace, its bridges and uplinks, then every host; :class:`LabError` on
    the first command that fails (the caller tears down what was made)."""
    sw, p = spec.switch_ns, spec.prefix
    _namespace(sw)
    for k in range(spec.racks):
        _bridge(sw, f"{p}r{k}", spec.mtu)
    if spec.racks > 1:
        _bridge(sw, f"{p}sp", spec.mtu)
        for k in range(spec.racks):
            up, down = f"{p}u{k}", f"{p}d{k}"  # rack end, spine end
            ip("-n", sw, "link", "add", up, "type", "veth", "peer", "name", down)
            _link_up(sw, up, spec.mtu, f"{p}r{k}")
            _link_up(sw, down, spec.mtu, f"{p}sp")
            shape(sw, up, spec.uplink_bps)
            shape(sw, down, spec.uplink_bps)
    for i in range(spec.hosts):
        _host(spec, i)


def run_dir(prefix: str) -> Path:
    """The run's own files (every host's ``/dev/shm``), under the temporary directory."""
    return Path(tempfile.gettempdir()) / f"seccomm-lab-{prefix}"


def shm_dir(prefix: str, host: str) -> Path:
    """What the ranks of ``host`` see as ``/dev/shm``."""
    return run_dir(prefix) / host / "shm"


def _host(spec: ClusterSpec, i: int) -> None:
    h, port = spec.host(i), f"{spec.prefix}p{i}"
    _namespace(h)
    shm = shm_dir(spec.prefix, h)
    shm.mkdir(parents=True, exist_ok=True)
    shm.chmod(0o1777)  # (as /dev/shm: every user may create files, each its own)
    ip("-n", spec.switch_ns, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h)
    _link_up(spec.switch_ns, port, spec.mtu, f"{spec.prefix}r{spec.rack_of(i)}")
    ip("-n", h, "addr", "add", f"{spec.address(i)}/16", "dev", "eth0")
    _link_up(h, "eth0", spec.mtu)
    shape(h, "eth0", spec.link_bps)
    shape(spec.switch_ns, port, spec.link_bps)


def counters(ns: str, dev: str = "eth0") -> dict:
    """``{"rx": bytes, "tx": bytes}`` of ``dev`` in namespace ``ns`` (the kernel's link counters)."""
    st = json.loads(ip("-n", ns, "-j", "-s", "link", "show", "dev", dev))[0]["stats64"]
    return {"rx": int(st["rx"]["bytes"]), "tx": int(st["tx"]["bytes"])}


def namespaces(prefix: str) -> list[str]:
    """The namespaces whose names start with ``prefix``."""
    names = [line.split()[0] for line in ip("netns", "list").splitlines() if line.strip()]
    return [n for n in names if n.startswith(prefix)]


def marked_pids(prefix: str) -> list[int]:
    """Processes whose environment holds ``SECCOMM_LAB_RUN=<prefix>`` (this run's processes)."""
    mark, found = f"{RUN_ENV}={prefix}".encode(), []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and int(d.name) != os.getpid():
            try:
                if mark in (d / "environ").read_bytes().split(b"\0") and not _zombie(d):
                    found.append(int(d.name))
            except OSError:
                continue
    return found


def _zombie(d: Path) -> bool:
    return (d / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


def end_processes(prefix: str, grace: float = 2.0) -> None:
    """SIGTERM every process of run ``prefix``, then SIGKILL whatever is left after ``grace`` s;
    returns once none is running (or after 10 s more)."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        for pid in marked_pids(prefix):
            try:
                os.kill(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        deadline = time.monotonic() + wait
        while marked_pids(prefix) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not marked_pids(prefix):
            return


def teardown(prefix: str) -> None:
    """End the run's processes, delete its namespaces (their links and bridges go with them) and
    the tunnel daemons' control sockets; safe to call twice or after a partial build."""
    end_processes(prefix)
    for ns in namespaces(prefix):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
    for sock in Path("/var/run/wireguard").glob(f"{prefix}*.sock"):
        sock.unlink(missing_ok=True)
    shutil.rmtree(run_dir(prefix), ignore_errors=True)  # (every host's /dev/shm)


def leftovers(prefix: str) -> list[str]:
    """What of run ``prefix`` still exists: namespaces, links in this namespace, processes,
    control sockets (empty after a clean teardown)."""
    links = [line for line in ip("-o", "link", "show").splitlines() if f": {prefix}" in line]
    socks = list(Path("/var/run/wireguard").glob(f"{prefix}*.sock"))
    return (
        [f"namespace {n}" for n in namespaces(prefix)]
        + [f"link {line.split(':')[1].strip()}" for line in links]
        + [f"process {pid}" for pid in marked_pids(prefix)]
        + [f"socket {s}" for s in socks]
        + ([f"files {run_dir(prefix)}"] if run_dir(prefix).exists() else [])
    )
