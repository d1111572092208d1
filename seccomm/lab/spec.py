"""What an emulated cluster is: hosts, ranks per host, link rate, racks and their uplinks, MTU;
the names and addresses of everything the lab makes.

Addresses come only from 198.18.0.0/15, the range RFC 2544 (§C.2.2) reserves for benchmarking:
host ``i`` is ``198.18.0.0/16``'s address ``i + 1`` on the links and ``198.19.0.0/16``'s address
``i + 1`` inside a tunnel.  Every name starts with the run's prefix (``sl`` + 5 random hex
digits), so two runs never collide and a teardown finds all that its run made.
"""

from __future__ import annotations

import ipaddress
import re
import secrets
from dataclasses import dataclass, field

#: the RFC 2544 benchmarking range; nothing the lab makes has an address outside it
BENCH_NET = ipaddress.ip_network("198.18.0.0/15")
LINK_NET = ipaddress.ip_network("198.18.0.0/16")
TUNNEL_NET = ipaddress.ip_network("198.19.0.0/16")
#: the most hosts one cluster may have (each is a namespace, a veth pair and R Python ranks)
MAX_HOSTS = 64
PREFIX_RE = re.compile(r"^sl[0-9a-f]{5}$")
_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_RATE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)(?:bit|b/s|bps)?\s*$", re.IGNORECASE)


def parse_rate(text: str) -> int:
    """Bits per second from ``10gbit``, ``1Gbit``, ``500mbit``, ``100M`` or ``2500000`` (SI
    prefixes, as ``tc`` reads them); ``ValueError`` naming the forms allowed."""
    m = _RATE_RE.match(str(text))
    if not m:
        raise ValueError(f"bad link rate {text!r}: use a number with kbit/mbit/gbit, e.g. 1gbit or 500mbit")
    bps = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    if not 10**6 <= bps <= 10**11:
        raise ValueError(f"link rate {text!r} is outside 1mbit..100gbit")
    return bps


def format_rate(bps: float) -> str:
    """``1gbit``, ``2.5gbit``, ``500mbit``: the shortest SI form of ``bps`` bits per second."""
    for unit, scale in (("gbit", 10**9), ("mbit", 10**6), ("kbit", 10**3)):
        if bps >= scale:
            return f"{bps / scale:g}{unit}"
    return f"{bps:g}bit"


def new_prefix() -> str:
    """A fresh run prefix: ``sl`` and 5 random hex digits (names stay within 15 characters)."""
    return "sl" + secrets.token_hex(3)[:5]


@dataclass(frozen=True)
class ClusterSpec:
    """``hosts`` x ``ranks_per_host`` ranks; each host has one link of ``link_bps`` [bit/s] to
    its rack's switch; racks of ``hosts_per_rack`` hosts (0: one rack of all hosts) reach a spine
    switch through one uplink of ``hosts_per_rack * link_bps / oversubscription``; ``mtu`` [B]
    on every link.  ``ValueError`` on values outside the lab's range."""

    hosts: int
    ranks_per_host: int = 1
    link_bps: int = 10**9
    hosts_per_rack: int = 0
    oversubscription: float = 1.0
    mtu: int = 1500
    prefix: str = field(default_factory=new_prefix)

    def __post_init__(self):
        if not 1 <= self.hosts <= MAX_HOSTS:
            raise ValueError(f"hosts must be in 1..{MAX_HOSTS}, got {self.hosts}")
        if not 1 <= self.ranks_per_host <= 64:
            raise ValueError(f"ranks per host must be in 1..64, got {self.ranks_per_host}")
        if self.hosts_per_rack < 0 or self.oversubscription < 1:
            raise ValueError("hosts per rack must be >= 0 and oversubscription >= 1 (1 = full bisection)")
        if not 1280 <= self.mtu <= 9000:
            raise ValueError(f"mtu must be in 1280..9000 bytes, got {self.mtu}")
        if not PREFIX_RE.match(self.prefix):
            raise ValueError(f"prefix must match {PREFIX_RE.pattern}, got {self.prefix!r}")

    @property
    def ranks(self) -> int:
        return self.hosts * self.ranks_per_host

    @property
    def rack_size(self) -> int:
        """Hosts per rack (all hosts when ``hosts_per_rack`` is 0 or larger than ``hosts``)."""
        return self.hosts if not self.hosts_per_rack else min(self.hosts_per_rack, self.hosts)

    @property
    def racks(self) -> int:
        return -(-self.hosts // self.rack_size)

    @property
    def uplink_bps(self) -> int:
        """A rack's uplink rate [bit/s]: a full rack's links over the oversubscription (sized for
        ``hosts_per_rack`` hosts even when the last rack has fewer)."""
        per_rack = self.hosts_per_rack or self.hosts
        return int(per_rack * self.link_bps / self.oversubscription)

    def host(self, i: int) -> str:
        """Host ``i``'s namespace, which is also its host name (what seccomm's topology sees)."""
        return f"{self.prefix}h{i}"

    def rack_of(self, i: int) -> int:
        return i // self.rack_size

    @property
    def switch_ns(self) -> str:
        """The namespace holding every switch (bridge) and the switch end of every link."""
        return f"{self.prefix}sw"

    def namespaces(self) -> list[str]:
        return [self.host(i) for i in range(self.hosts)] + [self.switch_ns]

    def address(self, i: int, tunnel: bool = False) -> ipaddress.IPv4Address:
        """Host ``i``'s address on the links (or inside a tunnel), in 198.18.0.0/15."""
        return (TUNNEL_NET if tunnel else LINK_NET)[i + 1]

    def describe(self) -> str:
        """One line for table headers: hosts, ranks per host, link rate, racks, uplink, MTU."""
        racks = (
            f"{self.racks} racks of {self.rack_size}, uplink {format_rate(self.uplink_bps)} "
            f"(oversubscription {self.oversubscription:g}:1)"
            if self.racks > 1
            else "1 switch"
        )
        return (
            f"hosts {self.hosts} x ranks/host {self.ranks_per_host}, link {format_rate(self.link_bps)}, "
            f"{racks}, mtu {self.mtu}"
        )

    def as_dict(self) -> dict:
        return {
            "hosts": self.hosts,
            "ranks_per_host": self.ranks_per_host,
            "link_bps": self.link_bps,
            "hosts_per_rack": self.rack_size,
            "racks": self.racks,
            "oversubscription": self.oversubscription,
            "uplink_bps": self.uplink_bps if self.racks > 1 else None,
            "mtu": self.mtu,
        }
