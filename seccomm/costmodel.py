"""Cost model of secure collectives at scale (``seccomm project``); formulas in docs/model.md.

Sources: Thakur, Rabenseifner & Gropp, IJHPCA 19(1) 2005 (alpha-beta-gamma costs of ring,
recursive doubling, Rabenseifner); Patarasuk & Yuan, JPDC 69(2) 2009 (ring optimality); nccl-tests
doc/PERFORMANCE.md (busbw).  Our extensions: per-step crypto stages, chunk pipelining (slowest stage
plus fill/drain), link classes by rank placement, NIC sharing and fat-tree oversubscription, and
per-step synchronisation jitter.

Every algorithm is a list of steps; a step moves ``nbytes`` per sending rank over one link class
with ``flows`` ranks of a node sharing its NIC, and may reduce (gamma) and seal/open (sigma).  The
collectives, their algorithms' steps, busbw factors and the "auto" rule come from the records in
:mod:`seccomm.collectives` (each record's ``cost``); this module times the steps.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from .collectives import COLLECTIVES as _RECORDS
from .collectives import Tuning, get_collective
from .collectives.cost import Step
from .suites import SUITES

MIB = 1 << 20


@dataclass(frozen=True)
class Link:
    """alpha [s] per message, beta [s/byte] per flow at full rate."""

    alpha: float
    beta: float


@dataclass(frozen=True)
class Params:
    """Machine parameters.  ``seal``/``open``: seconds per byte for one crypto thread (or one GPU)
    of the suite in use; ``suites``: suite name -> ``{"seal": s/B, "open": s/B}`` for every suite
    these parameters know (:func:`for_suite` picks one); ``gamma``: reduction seconds per byte.
    ``source``: where each number came from."""

    intra: Link
    inter: Link
    gamma: float
    seal: float
    open: float
    crypto_threads: int = 1
    chunk_bytes: int = MIB
    source: dict = field(default_factory=dict)
    pipelined: bool = True  # False: stages of a chunk run one after another (one core per rank)
    crypto_alpha: float = 0.0  # fixed seconds per sealed or opened chunk (launch, sync, bounce buffer)
    suites: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(d: dict) -> "Params":
        try:
            return Params(
                intra=Link(**d["intra"]),
                inter=Link(**d["inter"]),
                gamma=float(d["gamma"]),
                seal=float(d["seal"]),
                open=float(d["open"]),
                crypto_threads=int(d.get("crypto_threads", 1)),
                chunk_bytes=int(d.get("chunk_bytes", MIB)),
                source=dict(d.get("source", {})),
                pipelined=bool(d.get("pipelined", True)),
                crypto_alpha=float(d.get("crypto_alpha", 0.0)),
                suites={
                    k: {"seal": float(v["seal"]), "open": float(v["open"])}
                    for k, v in d.get("suites", {}).items()
                },
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise ValueError(
                f"malformed calibration: {e!r}; expected keys intra, inter (alpha, beta), gamma, seal, open"
            ) from None


@dataclass(frozen=True)
class Topology:
    """``nodes`` x ``ranks_per_node`` ranks placed in blocks (ranks of a node are consecutive);
    ``oversubscription``: fat-tree taper above a leaf of ``leaf_nodes`` nodes; ``jitter``: std
    deviation [s] of a rank's per-step delay (every step waits for the slowest of its ranks)."""

    nodes: int
    ranks_per_node: int
    oversubscription: float = 1.0
    leaf_nodes: int = 32
    jitter: float = 0.0

    def __post_init__(self):
        if self.nodes < 1 or self.ranks_per_node < 1:
            raise ValueError(
                f"nodes and ranks_per_node must be >= 1, got {self.nodes}, {self.ranks_per_node}"
            )
        if self.oversubscription < 1:
            raise ValueError("oversubscription must be >= 1 (1 = full bisection)")

    @property
    def p(self) -> int:
        return self.nodes * self.ranks_per_node


def _crypto_on(step: Step, encrypt: str, secure: bool) -> bool:
    return secure and (encrypt == "all" or step.inter)


#: what a step's seconds are spent on (:func:`step_parts`); "jitter": waiting for the slowest rank
PARTS = ("latency", "bandwidth", "reduction", "crypto", "jitter")


def uplink_factor(step: Step, topo: Topology) -> float:
    """How many times slower a flow of ``step`` is across its leaf's uplink than on its own link.
    The uplink carries ``leaf_nodes`` x link / o (a fat tree's taper o, as the lab builds it:
    docs/scaling.md) and is shared by the flows of ``step.uplink_nodes`` nodes of the leaf (0:
    all of them); each node's flows already share its link (``flows``), so the factor is
    max(1, o x nodes / leaf_nodes): o when the whole leaf crosses (recursive doubling,
    alltoall), max(1, o / leaf_nodes) for a ring's one crossing node.  1 off the spine."""
    if not step.spine:
        return 1.0
    crossing = step.uplink_nodes or topo.leaf_nodes
    return max(1.0, topo.oversubscription * crossing / topo.leaf_nodes)


def _sum(*parts: dict, times: float = 1.0) -> dict:
    out = dict.fromkeys(PARTS, 0.0)
    for d in parts:
        for k, v in d.items():
            out[k] += v * times
    return out


def step_parts(step: Step, prm: Params, topo: Topology, secure: bool, encrypt: str) -> dict:
    """:func:`step_time` split into :data:`PARTS` [s].  Pipelined, the (k-1) chunks paced by the
    slowest stage count for that stage (an open+reduce stage for both, in proportion)."""
    if step.nbytes <= 0:
        return dict.fromkeys(PARTS, 0.0)
    link = prm.inter if step.inter else prm.intra
    beta = link.beta * (step.flows if step.inter else 1) * uplink_factor(step, topo)
    k = max(1, math.ceil(step.nbytes / prm.chunk_bytes))
    c = step.nbytes / k
    crypto = _crypto_on(step, encrypt, secure)
    threads = max(1, prm.crypto_threads)
    seal = {"crypto": prm.crypto_alpha + c * prm.seal / threads if crypto and step.seal else 0.0}
    wire = {"bandwidth": c * beta}
    recv = {
        "crypto": prm.crypto_alpha + c * prm.open / threads if crypto and step.open else 0.0,
        "reduction": c * prm.gamma if step.reduce else 0.0,
    }
    latency = {"latency": link.alpha}
    if prm.pipelined:  # chunks stream back to back: latency once, then the slowest stage paces
        slowest = max((seal, wire, recv), key=lambda d: sum(d.values()))
        parts = _sum(latency, seal, wire, recv, _sum(slowest, times=k - 1))
    else:  # one core does everything in turn, a message per chunk
        parts = _sum(latency, seal, wire, recv, times=k)
    if topo.jitter > 0 and topo.p > 1:  # E[max of p normals] ~ sigma * sqrt(2 ln p)
        parts["jitter"] += topo.jitter * math.sqrt(2 * math.log(topo.p))
    return _sum(parts, times=step.count)


def step_time(step: Step, prm: Params, topo: Topology, secure: bool, encrypt: str) -> float:
    """One step, chunked: seal -> transfer -> open(+reduce).  Pipelined, k chunks take the latency
    once, the stages of one chunk (fill/drain), and (k-1) x the slowest stage; unpipelined, k x
    (all stages + latency).  The transfer's beta is the link's per flow, times the flows sharing
    a node's link, times :func:`uplink_factor` across leaf switches."""
    return sum(step_parts(step, prm, topo, secure, encrypt).values())


#: collective -> model algorithm -> steps(n, topo), from the records
COLLECTIVES = {name: {alg: c.steps for alg, c in rec.cost.items()} for name, rec in _RECORDS.items()}
ALLREDUCE = COLLECTIVES["allreduce"]


def algorithm_cost(collective: str, algorithm: str):
    """The record's :class:`~seccomm.collectives.cost.Cost` of ``algorithm`` (a model algorithm
    name); ``ValueError`` naming the allowed ones."""
    costs = get_collective(collective).cost
    if algorithm not in costs:
        raise ValueError(f"unknown algorithm {algorithm!r} for {collective}; allowed: {', '.join(costs)}")
    return costs[algorithm]


def predict(
    collective: str,
    algorithm: str,
    nbytes: float,
    prm: Params,
    topo: Topology,
    secure: bool = False,
    encrypt: str = "all",
) -> float:
    """Seconds for one operation of S = ``nbytes`` (nccl-tests S: total array).  ``ValueError``
    for an unknown collective or algorithm, or ``nbytes`` < 0."""
    return sum(predict_parts(collective, algorithm, nbytes, prm, topo, secure, encrypt).values())


def predict_parts(collective, algorithm, nbytes, prm, topo, secure=False, encrypt="all") -> dict:
    """:func:`predict`'s seconds split into :data:`PARTS` (the steps' :func:`step_parts`, and
    the encrypt-once seal as crypto); the same arguments and errors."""
    cost = algorithm_cost(collective, algorithm)
    if nbytes < 0:
        raise ValueError("nbytes must be >= 0")
    if topo.p == 1 or nbytes == 0:
        return dict.fromkeys(PARTS, 0.0)
    total = _sum(*(step_parts(s, prm, topo, secure, encrypt) for s in cost.steps(float(nbytes), topo)))
    once = cost.sealed_once(nbytes, topo.p)  # encrypt-once: the origin seals, hops forward
    if secure and once and (encrypt == "all" or topo.nodes > 1):
        total["crypto"] += once * prm.seal / max(1, prm.crypto_threads)
    return total


def best(
    collective: str, nbytes: float, prm: Params, topo: Topology, secure: bool, encrypt: str = "all"
) -> tuple[str, float]:
    """(algorithm, seconds) of the fastest algorithm for this case."""
    return min(
        (
            (a, predict(collective, a, nbytes, prm, topo, secure, encrypt))
            for a in get_collective(collective).cost
        ),
        key=lambda x: x[1],
    )


def seccomm_algorithm(collective: str, nbytes: float, prm: Params, topo: Topology) -> str:
    """The algorithm ``SecureComm``'s "auto" rule runs for S = ``nbytes`` on ``topo.p`` ranks
    (the record's ``pick`` with the default :class:`~seccomm.collectives.Tuning` and
    ``prm.chunk_bytes``, float32 elements)."""
    tuning = Tuning(chunk_bytes=prm.chunk_bytes)
    return get_collective(collective).pick(tuning, int(nbytes), max(1, int(nbytes) // 4), topo.p)


def busbw(collective: str, nbytes: float, seconds: float, p: int) -> float:
    """nccl-tests bus bandwidth [GB/s] (doc/PERFORMANCE.md)."""
    return 0.0 if seconds <= 0 else nbytes / seconds / 1e9 * get_collective(collective).busbw_factor(p)


# -- presets -----------------------------------------------------------------------------------
def _gbps(rate_gbit: float) -> float:
    return 8.0 / (rate_gbit * 1e9)  # seconds per byte at rate Gb/s


#: each suite's seal and open rate relative to AES-256-GCM's, on a CPU with AES-NI but without
#: VAES: the raw ``cryptography`` rates at 1 MiB measured by benchmarks/seal_open_ratio.py on such
#: a host (AES-GCM 2.51/2.54 GB/s, ChaCha20-Poly1305 1.91/2.03, GMAC 5.36/7.22).  On a VAES host
#: AES-GCM runs about 3.8x faster and ChaCha20-Poly1305 at about 0.38 of it (docs/performance.md,
#: "Framing layer vs raw cryptography"): calibrate (seccomm project --calibrate) for your CPU.
CPU_SUITE_RATIOS = {
    "aes-256-gcm": (1.0, 1.0),
    "chacha20-poly1305": (1.91 / 2.51, 2.03 / 2.54),
    "aes-256-gmac": (5.36 / 2.51, 7.22 / 2.54),
}
#: the same on a GPU: ratios of docs/gpu.md's first-principles bounds (AES-256-GCM ~0.13-0.22 TB/s,
#: middle 0.175; ChaCha20-Poly1305 ~0.93; GMAC <= 0.48), not measured
GPU_SUITE_RATIOS = {
    "aes-256-gcm": (1.0, 1.0),
    "chacha20-poly1305": (0.93 / 0.175, 0.93 / 0.175),
    "aes-256-gmac": (0.48 / 0.175, 0.48 / 0.175),
}


def suite_rates(aes_gcm_bytes_per_s: float, ratios: dict) -> dict:
    """``{suite: {"seal": s/B, "open": s/B}}`` from AES-256-GCM's rate [B/s] and each suite's
    (seal, open) rate relative to it."""
    return {
        name: {"seal": 1 / (aes_gcm_bytes_per_s * rs), "open": 1 / (aes_gcm_bytes_per_s * ro)}
        for name, (rs, ro) in ratios.items()
    }


def _preset(intra: Link, inter: Link, gamma, aes_rate, threads, chunk, source, ratios=CPU_SUITE_RATIOS):
    rates = suite_rates(aes_rate, ratios)
    gcm = rates["aes-256-gcm"]
    return Params(intra, inter, gamma, gcm["seal"], gcm["open"], threads, chunk, source, suites=rates)


_CPU_SUITES_SOURCE = (
    "ChaCha20-Poly1305 and AES-256-GMAC: the AES-GCM rate times their measured rate relative to "
    "AES-GCM on an AES-NI CPU (docs/performance.md, 'Framing layer vs raw cryptography')"
)
PRESETS: dict[str, Params] = {
    "ib-ndr400": _preset(
        Link(1.0e-6, 1 / 200e9),
        Link(2.0e-6, _gbps(400)),
        1 / 50e9,
        5.5e9,
        8,
        MIB,
        {
            "inter": "400 Gb/s InfiniBand NDR, ~2 us MPI latency (vendor)",
            "intra": "shared memory ~200 GB/s, 1 us",
            "crypto": "AES-GCM ~5.5 GB/s per thread, 8 threads (CryptMPI, arXiv 2010.06471)",
            "suites": _CPU_SUITES_SOURCE,
        },
    ),
    "roce-200": _preset(
        Link(1.0e-6, 1 / 200e9),
        Link(4.0e-6, _gbps(200)),
        1 / 50e9,
        5.5e9,
        8,
        MIB,
        {
            "inter": "200 Gb/s RoCE, ~4 us",
            "intra": "shared memory ~200 GB/s, 1 us",
            "crypto": "AES-GCM ~5.5 GB/s per thread, 8 threads (CryptMPI, arXiv 2010.06471)",
            "suites": _CPU_SUITES_SOURCE,
        },
    ),
    "eth-100": _preset(
        Link(1.0e-6, 1 / 200e9),
        Link(15e-6, _gbps(100)),
        1 / 50e9,
        5.5e9,
        4,
        MIB,
        {
            "inter": "100 Gb/s Ethernet (TCP), ~15 us",
            "intra": "shared memory ~200 GB/s, 1 us",
            "crypto": "CryptMPI testbed: 100 Gb/s, AES-GCM 5.5 GB/s per thread, 4 threads",
            "suites": _CPU_SUITES_SOURCE,
        },
    ),
    "nvlink4-ndr400": _preset(
        Link(3.0e-6, 1 / 450e9),
        Link(5.0e-6, _gbps(400)),
        1 / 2000e9,
        100e9,
        1,
        4 * MIB,
        {
            "intra": "NVLink 4: 450 GB/s per direction per H200 (vendor)",
            "inter": "400 Gb/s NDR per GPU",
            "crypto": "placeholder: AES-GCM 100 GB/s per GPU until benchmarks/gpu_check.py "
            "is measured on an H200 (docs/gpu.md bounds: 0.13-0.22 TB/s)",
            "suites": "ChaCha20-Poly1305 and AES-256-GMAC: the placeholder times the ratio of "
            "docs/gpu.md's first-principles bounds (0.93 and 0.48 TB/s vs 0.175), not measured",
        },
        GPU_SUITE_RATIOS,
    ),
}


def describe_preset(name: str) -> str:
    """One line: the preset's links and each suite's seal rate per crypto thread (for ``seccomm
    project --help``)."""
    p = PRESETS[name]
    return (
        f"{name}: inter-node {8 / p.inter.beta / 1e9:g} Gb/s, {p.inter.alpha * 1e6:g} us; "
        f"intra-node {1 / p.intra.beta / 1e9:g} GB/s; seal per thread: "
        + ", ".join(f"{k} {1 / v['seal'] / 1e9:.3g} GB/s" for k, v in p.suites.items())
        + f"; {p.crypto_threads} thread(s)"
    )


def for_suite(prm: Params, suite: str) -> Params:
    """``prm`` with the seal and open rates of ``suite`` (``none``: no crypto at all, so secure =
    plain).  ``ValueError`` for an unknown suite, or one ``prm`` has no rates for."""
    if suite == "none":
        return replace(prm, seal=0.0, open=0.0, crypto_alpha=0.0)
    if suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; allowed: {', '.join(SUITES)}")
    rates = prm.suites.get(suite)
    if rates is None:
        raise ValueError(
            f"no seal/open rates for suite {suite!r} in these parameters "
            f"(they have: {', '.join(['none', *prm.suites])})"
        )
    return replace(prm, seal=float(rates["seal"]), open=float(rates["open"]))


def get_preset(name: str) -> Params:
    try:
        return PRESETS[name]
    except KeyError:
        raise ValueError(f"unknown preset {name!r}; allowed: {', '.join(PRESETS)}") from None


# -- calibration ---------------------------------------------------------------------------------
def pingpong(
    nbytes: float, link: Link, seal: float, open_: float, threads: int, chunk: int, crypto_alpha: float = 0.0
) -> tuple[float, float]:
    """(plain, secure) seconds of one point-to-point message, pipelined in chunks, for the
    comparison with published encrypted-MPI ping-pong numbers (docs/model.md)."""
    prm = Params(Link(link.alpha, link.beta), link, 0.0, seal, open_, threads, chunk, {}, True, crypto_alpha)
    topo, step = Topology(2, 1), Step(nbytes, True)
    return link.alpha + nbytes * link.beta, step_time(step, prm, topo, True, "all")


def sweep(prm, nodes, rpn, nbytes, collective, encrypt, oversub, jitter) -> list[dict]:
    """One row per node count in ``nodes`` (``rpn`` ranks per node, ``nbytes`` [B] per rank,
    ``oversub`` fat-tree taper, ``jitter`` [s] per step): the algorithm ``SecureComm`` runs at
    that size (:func:`seccomm_algorithm`; where the model has no cost for it, such as bcast's
    chain, the fastest modelled one stands in, and ``runs`` names what runs), plain (without
    crypto) and secure, their times [us], busbw [GB/s] (nccl-tests' definition) and efficiency
    (busbw relative to the smallest node count of the sweep); and native, the fastest modelled
    plaintext algorithm (as an MPI library tunes its choice: ``algorithm_native``,
    ``native_us``, ``vs_native_x`` = secure / native).  ``ValueError`` on a bad topology (:class:`Topology`)
    or a negative size (:func:`predict`)."""
    rows = []
    for n in nodes:
        topo = Topology(n, rpn, oversub, jitter=jitter)
        an, tn = best(collective, nbytes, prm, topo, False, encrypt)
        runs = seccomm_algorithm(collective, nbytes, prm, topo)
        if runs in get_collective(collective).cost:
            asec, ts = runs, predict(collective, runs, nbytes, prm, topo, True, encrypt)
        else:
            asec, ts = best(collective, nbytes, prm, topo, True, encrypt)
        tp = predict(collective, asec, nbytes, prm, topo, False, encrypt)
        rows.append(
            {
                "nodes": n,
                "ranks": topo.p,
                "algorithm_plain": asec,
                "algorithm_secure": asec,
                "runs": runs,
                "algorithm_native": an,
                "native_us": tn * 1e6,
                "vs_native_x": ts / tn if tn else 1.0,
                "plain_us": tp * 1e6,
                "secure_us": ts * 1e6,
                "overhead_x": ts / tp if tp else 1.0,
                "busbw_plain_gbps": busbw(collective, nbytes, tp, topo.p),
                "busbw_secure_gbps": busbw(collective, nbytes, ts, topo.p),
            }
        )
    b0p = next((r["busbw_plain_gbps"] for r in rows if r["busbw_plain_gbps"] > 0), 0)
    b0s = next((r["busbw_secure_gbps"] for r in rows if r["busbw_secure_gbps"] > 0), 0)
    for r in rows:
        r["efficiency_plain"] = r["busbw_plain_gbps"] / b0p if b0p else 1.0
        r["efficiency_secure"] = r["busbw_secure_gbps"] / b0s if b0s else 1.0
    return rows
