"""What the lab needs from the kernel, and the unprivileged way in.

``ip netns add`` needs ``CAP_NET_ADMIN`` (links, bridges, ``tc``) and ``CAP_SYS_ADMIN`` (it
bind-mounts the namespace under ``/run/netns``).  Without them, where the kernel allows
unprivileged user namespaces, the lab re-runs itself as root of a new user namespace with its own
network and mount namespaces (``unshare --user --map-root-user --net --mount``): there it has both
capabilities over namespaces it owns, and everything it makes dies with it.
"""

from __future__ import annotations

import os
import shutil
import subprocess

CAP_NET_ADMIN, CAP_SYS_ADMIN = 12, 21
#: set in the re-run inside a user namespace (value ``1``)
USERNS_ENV = "SECCOMM_LAB_USERNS"
NEEDS = (
    "seccomm cluster needs CAP_NET_ADMIN and CAP_SYS_ADMIN (root, or a container started with "
    "--cap-add NET_ADMIN --cap-add SYS_ADMIN) or unprivileged user namespaces "
    "(sysctl kernel.unprivileged_userns_clone=1 / user.max_user_namespaces > 0), and iproute2 (ip, tc)"
)
UNSHARE = ["unshare", "--user", "--map-root-user", "--net", "--mount", "--propagation", "private"]


def capabilities() -> int:
    """This process's effective capability mask (``CapEff`` of /proc/self/status; 0 if unknown)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


def privileged() -> bool:
    """Whether this process may make network namespaces (both capabilities, iproute2 present)."""
    caps = capabilities()
    tools = all(shutil.which(t) for t in ("ip", "tc", "unshare"))
    return tools and all(caps >> c & 1 for c in (CAP_NET_ADMIN, CAP_SYS_ADMIN))


def userns_works() -> bool:
    """Whether an unprivileged user + network + mount namespace can be made and hold a veth."""
    if not shutil.which("unshare") or not shutil.which("ip"):
        return False
    probe = [*UNSHARE, "ip", "link", "add", "slprobe0", "type", "veth", "peer", "name", "slprobe1"]
    try:
        return subprocess.run(probe, capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def in_userns() -> bool:
    return os.environ.get(USERNS_ENV) == "1"


def userns_argv(argv: list[str]) -> list[str]:
    """The command that runs ``argv`` as root of a new user, network and mount namespace."""
    return [*UNSHARE, *argv]


def prepare_userns() -> None:
    """Inside that namespace: a private ``/run`` (a tmpfs that only this process tree sees) for
    ``ip netns`` and ``wireguard-go``'s sockets, which root of a user namespace may not write to
    in the real one; loopback up."""
    subprocess.run(["mount", "-t", "tmpfs", "seccomm-lab", "/run"], check=True, timeout=10)
    os.makedirs("/run/netns")
    subprocess.run(["ip", "link", "set", "dev", "lo", "up"], check=True, timeout=10)
