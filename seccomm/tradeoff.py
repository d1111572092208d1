"""What each way of protecting gradient traffic costs a training step at a given scale, and what
it protects against (``seccomm tradeoff``).

The options, their figures and what each protects are data: :data:`DATA_FILE`
(``seccomm/data/protection.json``).  Every figure has a basis, one of :data:`BASES`:

- ``measured``: on this project's development machine (a named file or script), or on the user's
  machine in this run (``seccomm tradeoff --measure``);
- ``calibrated``: from a calibration the user gives (``--calibration``, made by ``seccomm project
  --calibrate`` from their own bench run);
- ``published``: a paper, datasheet or specification, with the figure as stated there.

How an option's figures become the time of one allreduce of ``n`` bytes (the cost model of
:mod:`seccomm.costmodel` on ``nodes`` x ``gpus_per_node`` ranks, the fastest of the modelled
algorithms for each option, as a tuned library picks it and as ``algorithm=`` picks it for
seccomm):

- ``plain``: the model without crypto;
- ``seccomm``: the model with the suite's seal and open rates (CPU: per crypto thread, times the
  threads; GPU: per GPU), ``encrypt="inter-node"``, plus the origin proofs of identity x509
  (:func:`seccomm.identitycost.origin_seconds`);
- ``tunnel``: a host-to-host tunnel whose throughput per node is the figure: each GPU's
  inter-node bandwidth is at most that rate divided by the GPUs per node;
- ``inline``: NIC or switch crypto at line rate: each GPU's inter-node bandwidth is at most the
  figure (no published added latency is modelled);
- ``factor``: the plaintext time times the figure (GPU confidential computing: every byte crosses
  encrypted bounce buffers).

A step (:func:`step_seconds`): DDP allreduces its buckets one after another, each as soon as the
backward pass has produced it and the one before is done; the backward pass is 2/3 of the step's
compute (backward about twice the forward's FLOPs: Kaplan et al., arXiv 2001.08361, section 2.1)
and produces the buckets at an even rate by bytes.  The step ends when the compute and the last
allreduce are both done.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

from . import costmodel, identitycost
from .collectives import get_collective

DATA_FILE = Path(__file__).with_name("data") / "protection.json"
BASES = ("measured", "calibrated", "published")
KINDS = ("plain", "seccomm", "tunnel", "inline", "factor")
#: the share of a step's compute in the backward pass (see the module's docstring)
BACKWARD_SHARE = 2.0 / 3.0
BACKWARD_SOURCE = "Kaplan et al., Scaling Laws for Neural Language Models, arXiv 2001.08361, section 2.1"


@cache
def data() -> dict:
    """The options file, checked (:func:`check_data`); the same object on every call."""
    d = json.loads(DATA_FILE.read_text())
    check_data(d)
    return d


def check_data(d: dict) -> None:
    """``ValueError`` naming the first figure without a basis of :data:`BASES` or a known source,
    a published figure without the figure as stated, a source without a citation, an option of
    an unknown kind or figure, or a threat cell without a source."""
    sources = d["sources"]
    for key, s in sources.items():
        if not s.get("cite") or not s.get("url"):
            raise ValueError(f"source {key!r} has no citation or address")
    for key, f in d["figures"].items():
        if f.get("basis") not in BASES:
            raise ValueError(f"figure {key!r}: basis {f.get('basis')!r} is not one of {', '.join(BASES)}")
        if f.get("source") not in sources:
            raise ValueError(f"figure {key!r}: source {f.get('source')!r} is not in the sources")
        if f["basis"] == "published" and not f.get("as_stated"):
            raise ValueError(f"figure {key!r}: a published figure needs the figure as stated there")
        if not isinstance(f.get("value"), (int, float)) or f["value"] <= 0 or not f.get("unit"):
            raise ValueError(f"figure {key!r}: needs a positive value and a unit")
    threats = [t["key"] for t in d["threats"]]
    for o in d["options"]:
        m = o["model"]
        if m["kind"] not in KINDS:
            raise ValueError(f"option {o['name']!r}: unknown kind {m['kind']!r}")
        for ref in (m.get("rate"), m.get("factor")):
            if ref is not None and ref not in d["figures"]:
                raise ValueError(f"option {o['name']!r}: unknown figure {ref!r}")
        if set(o["protects"]) != set(threats):
            raise ValueError(f"option {o['name']!r}: threat cells {sorted(o['protects'])} != {threats}")
        for t, (cell, src) in o["protects"].items():
            if not cell or src not in sources:
                raise ValueError(f"option {o['name']!r}, threat {t!r}: no cell or an unknown source {src!r}")


@dataclass(frozen=True)
class Figure:
    """One number the model uses: ``value`` in ``unit``, its ``basis`` (:data:`BASES`), its
    ``source`` (a key of the data file's sources, or a file or run for measured and calibrated
    figures) and ``as_stated``."""

    key: str
    value: float
    unit: str
    basis: str
    source: str
    as_stated: str = ""

    def label(self) -> str:
        return f"{self.basis}: {self.source}"


def figures() -> dict[str, Figure]:
    """The data file's figures, and each CPU suite's rate relative to AES-256-GCM's
    (``ratio:SUITE``, measured: :data:`seccomm.costmodel.CPU_SUITE_RATIOS`, seal direction)."""
    out = {k: Figure(k, float(f["value"]), f["unit"], f["basis"], f["source"], f.get("as_stated", ""))
           for k, f in data()["figures"].items()}  # fmt: skip
    for suite, (rs, _) in costmodel.CPU_SUITE_RATIOS.items():
        out[f"ratio:{suite}"] = Figure(
            f"ratio:{suite}", rs, "x AES-256-GCM's seal rate", "measured", "suite_ratios"
        )
    return out


@dataclass
class Scenario:
    """The user's job: ``buckets`` [B] in DDP's order, ``compute_s`` of a step (0: communication
    only), ``gpus_per_node``, the network and GPU parameters ``prm``
    (:class:`~seccomm.costmodel.Params`; its ``source`` says where they came from, with
    ``network`` one :class:`Figure`-like label), ``crypto_threads`` per rank for CPU crypto, and
    the ``figures`` in force (:func:`figures`, with what ``--measure`` or ``--calibration``
    replaced)."""

    buckets: list
    compute_s: float
    gpus_per_node: int
    prm: costmodel.Params
    network: str
    crypto_threads: int = 8
    figures: dict = field(default_factory=figures)


def _cpu_rate(sc: Scenario, suite: str) -> tuple[float, float, list]:
    """(seal, open) seconds per byte of one CPU crypto thread for ``suite``, and the figures."""
    f = sc.figures["cpu_aes_gcm"]
    rs, ro = costmodel.CPU_SUITE_RATIOS[suite]
    used = [f] if suite == "aes-256-gcm" else [f, sc.figures[f"ratio:{suite}"]]
    return 1 / (f.value * rs), 1 / (f.value * ro), used


def option_params(sc: Scenario, option: dict) -> tuple[costmodel.Params, bool, list]:
    """(parameters, secure, the figures used) of one option for the cost model."""
    m, prm = option["model"], sc.prm
    if m["kind"] == "seccomm":
        if m["crypto"] == "gpu":
            f = sc.figures["gpu_aes"]
            p = replace(prm, seal=1 / f.value, open=1 / f.value, crypto_threads=1)
            return p, True, [f]
        seal, open_, used = _cpu_rate(sc, m["suite"])
        return replace(prm, seal=seal, open=open_, crypto_threads=sc.crypto_threads), True, used
    if m["kind"] in ("tunnel", "inline"):
        f = sc.figures[m["rate"]]
        share = sc.gpus_per_node if m["kind"] == "tunnel" else 1  # (a host's tunnel serves its GPUs)
        beta = max(prm.inter.beta, share / f.value)
        return replace(prm, inter=costmodel.Link(prm.inter.alpha, beta)), False, [f]
    if m["kind"] == "factor":
        return prm, False, [sc.figures[m["factor"]]]
    return prm, False, []


def allreduce_seconds(sc: Scenario, option: dict, nbytes: float, topo: costmodel.Topology, prm, secure):
    """``(seconds, parts, algorithm)`` of one allreduce of ``nbytes`` under ``option``: the
    fastest modelled algorithm (as a tuned library picks it; for seccomm, ``algorithm=`` picks
    it), parts: the model's :data:`~seccomm.costmodel.PARTS`, plus ``origin`` for x509's proofs
    and ``factor`` for an option that multiplies the plaintext time."""
    m = option["model"]
    x509 = m["kind"] == "seccomm" and m["identity"] == "x509" and topo.nodes > 1
    found = None
    for alg in get_collective("allreduce").cost:
        parts = costmodel.predict_parts("allreduce", alg, nbytes, prm, topo, secure, "inter-node")
        if x509:  # (the group frames cross nodes: encrypted, with origin proofs)
            parts["origin"] = identitycost.origin_seconds("allreduce", alg, nbytes, topo.p)
        total = sum(parts.values())
        if found is None or total < found[0]:
            found = (total, parts, alg)
    total, parts, alg = found
    if m["kind"] == "factor":
        parts["factor"] = total * (sc.figures[m["factor"]].value - 1)
        total += parts["factor"]
    return total, parts, alg


def step_seconds(
    buckets: list, comm: list, compute_s: float, backward_share: float = BACKWARD_SHARE
) -> float:
    """Seconds of one step: ``compute_s`` of compute, of which ``backward_share`` is the backward
    pass that produces ``buckets`` [B] at an even rate by bytes; each bucket's allreduce
    (``comm`` [s]) starts when its bucket is ready and the allreduce before it is done."""
    fwd, bwd = compute_s * (1 - backward_share), compute_s * backward_share
    total, cum, end = float(sum(buckets)) or 1.0, 0.0, 0.0
    for b, c in zip(buckets, comm):
        cum += b
        end = max(fwd + bwd * cum / total, end) + c
    return max(compute_s, end)


def _bound(option: dict, parts: dict, step_s: float, compute_s: float, nodes: int) -> str:
    """What limits the option at this scale: the largest part of its largest allreduce, or the
    compute when the communication hides behind it."""
    if compute_s and step_s <= compute_s * 1.0001:
        return "compute (comm hidden)"
    m = option["model"]
    if m["kind"] == "factor":
        return "CC bounce buffers"
    top = max(parts, key=parts.get)
    if top == "crypto":
        return "GPU crypto" if m.get("crypto") == "gpu" else "CPU cores"
    if top == "bandwidth" and nodes > 1:
        return {"tunnel": "tunnel (host cores)", "inline": "link (line rate)"}.get(m["kind"], "link")
    if top == "bandwidth":
        return "link"
    return {"origin": "origin proofs", "latency": "latency", "reduction": "reduction"}.get(top, top)


def evaluate(sc: Scenario, nodes: list[int], options: list[dict] | None = None) -> list[dict]:
    """One row per option and node count: ``comm_ms`` (the step's allreduces back to back),
    ``step_ms`` (:func:`step_seconds`), ``plaintext_step_ms``, ``increase_pct`` over plaintext,
    ``bound`` and the figures used (``figures``: keys; their basis and source are in
    :func:`figures`).  ``ValueError`` on a bad topology."""
    options = options if options is not None else data()["options"]
    plain = next(o for o in data()["options"] if o["model"]["kind"] == "plain")
    rows = []
    sizes = sorted(set(sc.buckets))
    for n in nodes:
        topo = costmodel.Topology(n, sc.gpus_per_node)
        base = None
        for option in [plain, *[o for o in options if o is not plain]]:
            prm, secure, used = option_params(sc, option)
            per = {b: allreduce_seconds(sc, option, b, topo, prm, secure) for b in sizes}
            comm = [per[b][0] for b in sc.buckets]
            algs = sorted({per[b][2] for b in sizes})
            step = step_seconds(sc.buckets, comm, sc.compute_s)
            if base is None:
                base = step
            rows.append(
                {
                    "option": option["name"],
                    "family": option["family"],
                    "where": option["where"],
                    "nodes": n,
                    "gpus_per_node": sc.gpus_per_node,
                    "ranks": topo.p,
                    "comm_ms": sum(comm) * 1e3,
                    "step_ms": step * 1e3,
                    "plaintext_step_ms": base * 1e3,
                    "increase_pct": (step / base - 1) * 100 if base else 0.0,
                    "bound": _bound(option, per[max(sizes)][1], step, sc.compute_s, n),
                    "algorithms": algs,
                    "figures": [f.key for f in used],
                }
            )
    return rows
