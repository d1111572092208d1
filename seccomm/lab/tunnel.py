"""Network-layer encryption between the hosts: a full mesh of user-space WireGuard tunnels
(``wireguard-go`` + ``wg``, from the OS packages: ``apt-get install wireguard-tools
wireguard-go``), so native MPI can run through them on the same shaped links.

Host ``i``'s tunnel interface is ``<prefix>w<i>`` (unique per run: ``wireguard-go``'s control
socket lives in the shared ``/var/run/wireguard``), address ``198.19.0.0/16``'s ``i + 1``, MTU the
link's less WireGuard's 80 bytes of IPv6 worst-case overhead (as ``wg-quick`` does).  Keys are
X25519 (``cryptography``), one pair per host, made for the run and never written to disk.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import time

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from . import netns
from .spec import ClusterSpec

PORT = 51820
OVERHEAD = 80  # bytes: outer IPv6 40 + UDP 8 + WireGuard data header 16 + tag 16 (wg-quick's figure)
_RAW = (serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def missing() -> str | None:
    """Why the WireGuard variant cannot run here (``None`` when it can)."""
    absent = [t for t in ("wireguard-go", "wg") if shutil.which(t) is None]
    if absent:
        how = "Debian/Ubuntu: apt-get install wireguard-tools wireguard-go"
        return f"{' and '.join(absent)} not installed ({how})"
    if not os.path.exists("/dev/net/tun"):
        return "no /dev/net/tun: user-space WireGuard needs a TUN device"
    return None


def version() -> str:
    """``wireguard-go``'s version line (for the run's header)."""
    out = subprocess.run(["wireguard-go", "--version"], capture_output=True, text=True, timeout=10)
    return (out.stdout.splitlines() or ["wireguard-go (version unknown)"])[0].strip()


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _keypair() -> tuple[str, str]:
    """(private, public) X25519 keys in WireGuard's base64 form."""
    k = X25519PrivateKey.generate()
    priv = k.private_bytes(
        serialization.Encoding.Raw, serialization.PrivateFormat.Raw, serialization.NoEncryption()
    )
    return _b64(priv), _b64(k.public_key().public_bytes(*_RAW))


def iface(spec: ClusterSpec, i: int) -> str:
    return f"{spec.prefix}w{i}"


def up(spec: ClusterSpec, env: dict, wait_s: float = 10.0) -> list[str]:
    """Start one ``wireguard-go`` per host (marked with the run's environment ``env``, so that
    teardown ends it), peer every host with every other, bring the tunnels up; returns each
    host's tunnel interface (for ``UCX_NET_DEVICES``).  :class:`~.netns.LabError` on failure."""
    keys = [_keypair() for _ in range(spec.hosts)]
    for i in range(spec.hosts):
        subprocess.Popen(
            ["ip", "netns", "exec", spec.host(i), "wireguard-go", iface(spec, i)],
            env=dict(env, WG_PROCESS_FOREGROUND="1", LOG_LEVEL="error"),
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
    for i in range(spec.hosts):
        _await(spec, i, wait_s)
        _configure(spec, i, keys)
    return [iface(spec, i) for i in range(spec.hosts)]


def _await(spec: ClusterSpec, i: int, wait_s: float) -> None:
    """Wait until host ``i``'s tunnel interface and control socket exist."""
    sock = f"/var/run/wireguard/{iface(spec, i)}.sock"
    deadline = time.monotonic() + wait_s
    while not os.path.exists(sock):
        if time.monotonic() > deadline:
            raise netns.LabError(f"wireguard-go on {spec.host(i)} did not create {sock} in {wait_s:g} s")
        time.sleep(0.05)


def _configure(spec: ClusterSpec, i: int, keys: list[tuple[str, str]]) -> None:
    """Host ``i``'s key, port and peers (each peer: its tunnel address, at its link address)."""
    h, dev = spec.host(i), iface(spec, i)
    cmd = ["ip", "netns", "exec", h, "wg", "set", dev, "private-key", "/dev/stdin", "listen-port", str(PORT)]
    for j in range(spec.hosts):
        if j != i:
            cmd += ["peer", keys[j][1], "allowed-ips", f"{spec.address(j, tunnel=True)}/32"]
            cmd += ["endpoint", f"{spec.address(j)}:{PORT}"]
    out = subprocess.run(cmd, input=keys[i][0] + "\n", capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        raise netns.LabError(f"wg set {dev} on {h}: {out.stderr.strip()}")
    netns.ip("-n", h, "addr", "add", f"{spec.address(i, tunnel=True)}/16", "dev", dev)
    netns.ip("-n", h, "link", "set", "dev", dev, "mtu", str(spec.mtu - OVERHEAD), "up")
