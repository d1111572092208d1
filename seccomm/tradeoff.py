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
- ``tunnel``: one host-to-host tunnel per node: the node's inter-node bandwidth, which its
  ranks share, is at most the figure;
- ``inline``: NIC or switch crypto at line rate: each NIC's bandwidth is at most the figure
  where one is published, else the network's; where published, each packet of an MTU's payload
  also carries the protocol's bytes (``overhead``, ``mtu``), and each link a message crosses adds
  the protocol's latency (``latency``, ``links``);
- ``factor``: each byte between nodes costs the figure times the network's time per byte (GPU
  confidential computing: traffic between nodes stages through encrypted bounce buffers).

Every row also uses the network figure (``network``: the preset's or the calibration's links).

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
        if m["kind"] == "tunnel" and "rate" not in m or m["kind"] == "factor" and "factor" not in m:
            raise ValueError(f"option {o['name']!r}: a {m['kind']} needs its figure")
        for ref in (m.get("rate"), m.get("factor"), m.get("latency"), m.get("overhead"), m.get("mtu")):
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
    out["origin_gmac"] = Figure(
        "origin_gmac",
        1 / identitycost.RATES.gmac,
        "B/s (AES-GMAC, one core: origin proofs)",
        "measured",
        "identity_rates",
    )
    for suite, (rs, _) in costmodel.CPU_SUITE_RATIOS.items():
        out[f"ratio:{suite}"] = Figure(
            f"ratio:{suite}", rs, "x AES-256-GCM's seal rate", "measured", "suite_ratios"
        )
    return out


@dataclass
class Scenario:
    """The user's job: ``buckets`` [B] in DDP's order, ``compute_s`` of a step (0: communication
    only), ``gpus_per_node``, the network and GPU parameters ``prm``
    (:class:`~seccomm.costmodel.Params`) and ``network``, where they came from (``"BASIS:
    SOURCE"``, e.g. ``"published: preset nvlink4-ndr400 (...)"``; it becomes the figure
    ``network`` every row uses), ``crypto_threads`` per rank for CPU crypto, and the ``figures``
    in force (:func:`figures`, with what ``--measure`` replaced); ``compute_source``: where
    ``compute_s`` came from, when measured; ``nics_per_node``: the network links of a node (the
    cost model shares one link among a node's ranks: with one NIC per GPU, a node has
    ``gpus_per_node`` of them)."""

    buckets: list
    compute_s: float
    gpus_per_node: int
    prm: costmodel.Params
    network: str
    crypto_threads: int = 8
    figures: dict = field(default_factory=figures)
    compute_source: str = ""
    nics_per_node: int = 1

    def __post_init__(self):
        basis, _, source = self.network.partition(": ")
        if basis not in BASES:
            raise ValueError(
                f"network {self.network!r}: give 'BASIS: SOURCE', BASIS one of {', '.join(BASES)}"
            )
        unit = "B/s per link between nodes (the network's)"
        self.figures = {
            **self.figures,
            "network": Figure("network", 1 / self.prm.inter.beta, unit, basis, source),
        }
        if self.nics_per_node > 1:  # (a node's ranks share the node's links: all of them)
            inter = costmodel.Link(self.prm.inter.alpha, self.prm.inter.beta / self.nics_per_node)
            self.prm = replace(self.prm, inter=inter)


def _cpu_rate(sc: Scenario, suite: str) -> tuple[float, float, list]:
    """(seal, open) seconds per byte of one CPU crypto thread for ``suite``, and the figures (the
    suite's own first)."""
    f = sc.figures["cpu_aes_gcm"]
    if suite == "aes-256-gcm":
        return 1 / f.value, 1 / f.value, [f]
    ratio = sc.figures[f"ratio:{suite}"]  # (seal; open in the proportion CPU_SUITE_RATIOS gives)
    rs, ro = costmodel.CPU_SUITE_RATIOS[suite]
    return 1 / (f.value * ratio.value), 1 / (f.value * ratio.value * ro / rs), [ratio, f]


def option_params(sc: Scenario, option: dict) -> tuple[costmodel.Params, bool, list]:
    """(parameters, secure, the figures used) of one option for the cost model."""
    m, prm = option["model"], sc.prm
    if m["kind"] == "seccomm":
        if m["crypto"] == "gpu":
            f = sc.figures["gpu_aes"]
            p = replace(prm, seal=1 / f.value, open=1 / f.value, crypto_threads=1)
            return p, True, [f]
        seal, open_, used = _cpu_rate(sc, m["suite"])
        if m["identity"] == "x509":
            used.append(sc.figures["origin_gmac"])
        return replace(prm, seal=seal, open=open_, crypto_threads=sc.crypto_threads), True, used
    if m["kind"] == "inline" and "rate" not in m:  # (no published rate: the network's)
        return prm, False, []
    if m["kind"] in ("tunnel", "inline"):
        f = sc.figures[m["rate"]]
        links = sc.nics_per_node if m["kind"] == "inline" else 1  # (a host's one tunnel; a port per NIC)
        beta = max(prm.inter.beta, 1 / (f.value * links))  # (per node: its ranks share it)
        alpha, used = prm.inter.alpha, [f]
        if "overhead" in m:  # (each packet of mtu bytes carries the protocol's bytes too)
            over, mtu = sc.figures[m["overhead"]], sc.figures[m["mtu"]]
            beta *= (mtu.value + over.value) / mtu.value
            used += [over, mtu]
        if "latency" in m:  # (added on each link a message crosses)
            lat = sc.figures[m["latency"]]
            alpha += lat.value * m["links"]
            used.append(lat)
        return replace(prm, inter=costmodel.Link(alpha, beta)), False, used
    if m["kind"] == "factor":
        f = sc.figures[m["factor"]]
        return replace(prm, inter=costmodel.Link(prm.inter.alpha, prm.inter.beta * f.value)), False, [f]
    return prm, False, []


def allreduce_seconds(sc: Scenario, option: dict, nbytes: float, topo: costmodel.Topology, prm, secure):
    """``(seconds, parts, algorithm)`` of one allreduce of ``nbytes`` under ``option``: the
    fastest modelled algorithm (as a tuned library picks it; for seccomm, ``algorithm=`` picks
    it), parts: the model's :data:`~seccomm.costmodel.PARTS`, plus ``origin`` for x509's proofs."""
    m = option["model"]
    x509 = m["kind"] == "seccomm" and m["identity"] == "x509" and topo.nodes > 1
    found = None
    for alg in get_collective("allreduce").cost:
        parts = costmodel.predict_parts("allreduce", alg, nbytes, prm, topo, secure, "inter-node")
        if x509:  # (the group frames cross nodes: encrypted, with origin proofs)
            rates = replace(identitycost.RATES, gmac=1 / sc.figures["origin_gmac"].value)
            parts["origin"] = identitycost.origin_seconds("allreduce", alg, nbytes, topo.p, rates)
        total = sum(parts.values())
        if found is None or total < found[0]:
            found = (total, parts, alg)
    return found


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


def _bound(
    option: dict, parts: dict, plain: dict, step_s: float, base_s: float, compute_s: float, nodes
) -> str:
    """What limits the option at this scale: where its step is within 1 % of plaintext's, what
    limits plaintext (the compute when the communication hides behind it, else the largest part
    of the largest allreduce); otherwise its crypto (origin proofs where they cost more than the
    AEAD), or, for an option without crypto of its own, the part of the largest allreduce that
    grew most over plaintext's."""
    m = option["model"]
    names = {"crypto": "GPU crypto" if m.get("crypto") == "gpu" else "CPU cores", "origin": "origin proofs",
             "latency": "latency", "reduction": "reduction", "jitter": "jitter"}  # fmt: skip
    if step_s <= base_s * 1.01:
        if compute_s and base_s <= compute_s * 1.01:
            return "compute (comm hidden)"
        top = max(plain, key=plain.get)
        return "link" if top == "bandwidth" else names.get(top, top)
    if parts.get("origin", 0.0) > parts.get("crypto", 0.0):
        return "origin proofs"
    if parts.get("crypto", 0.0) > 0:  # (the crypto slowed it, whichever part an algorithm moved it to)
        return names["crypto"]
    grew = max(parts, key=lambda k: parts[k] - plain.get(k, 0.0))
    if grew == "bandwidth" and nodes > 1:
        kinds = {"tunnel": "tunnel rate", "inline": "link (line rate)", "factor": "CC bounce buffers"}
        return kinds.get(m["kind"], "link")
    return "link" if grew == "bandwidth" else names.get(grew, grew)


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
        base, base_parts = None, None
        for option in [plain, *[o for o in options if o is not plain]]:
            prm, secure, used = option_params(sc, option)
            per = {b: allreduce_seconds(sc, option, b, topo, prm, secure) for b in sizes}
            comm = [per[b][0] for b in sc.buckets]
            algs = sorted({per[b][2] for b in sizes})
            if not any(per[b][1].get("origin", 0.0) for b in sizes):  # (no group frames: no proofs)
                used = [f for f in used if f.key != "origin_gmac"]
            step = step_seconds(sc.buckets, comm, sc.compute_s)
            if base is None:
                base, base_parts = step, per[max(sizes)][1]
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
                    "bound": _bound(option, per[max(sizes)][1], base_parts, step, base, sc.compute_s, n),
                    "algorithms": algs,
                    "figures": ["network", *(f.key for f in used)],
                }
            )
    return rows


def format_increase(pct: float) -> str:
    """An increase over plaintext [%] as the table shows it: +x.x % below 10 %, +xx % below
    100 %, then the factor of the step time (2.5x, 1,120x)."""
    if pct < 0.05:
        return "+0%"
    if pct >= 100:
        return f"{1 + pct / 100:,.3g}x" if pct < 99_900 else f"{1 + pct / 100:,.0f}x"
    return f"+{pct:.0f}%" if pct >= 10 else f"+{pct:.1f}%"


def format_ms(v: float) -> str:
    """A time given in ms: in ms below 10 s, else in s."""
    return f"{v:,.1f} ms" if v < 1e4 else f"{v / 1e3:,.0f} s"


# -- --measure ------------------------------------------------------------------------------------
MEASURED_SUITES = ("aes-256-gcm", "chacha20-poly1305", "aes-256-gmac")


def measure_crypto(figs: dict, chunk_bytes: int = costmodel.MIB) -> tuple[dict, list[str]]:
    """``figs`` with this machine's rates in place of the CPU crypto figures, and one line per
    replaced figure: each suite's seal rate at ``chunk_bytes`` frames as ``seccomm bench`` probes
    it (:func:`seccomm.bench.bound.measure_rate`, one core), and AES-GMAC's rate (origin proofs:
    ``cryptography``'s AESGCM over 1 MiB with no plaintext, the median of 50 calls)."""
    import os
    import statistics
    import time

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    from .bench.bound import measure_rate
    from .bench.machine import cpu_info

    cpu = cpu_info().get("model", "this CPU")
    rate = {}
    for suite in MEASURED_SUITES:
        r = measure_rate(suite, chunk_bytes)
        rate[suite] = chunk_bytes / (r.seal_frame_s + chunk_bytes * r.seal_byte_s)
    where = f"this run: seccomm bench's rate probe, {chunk_bytes:,} B frames, one core of {cpu}"
    out, lines = dict(figs), []
    out["cpu_aes_gcm"] = Figure(
        "cpu_aes_gcm", rate["aes-256-gcm"], "B/s per crypto thread", "measured", where
    )
    for suite in MEASURED_SUITES[1:]:
        key = f"ratio:{suite}"
        out[key] = Figure(
            key, rate[suite] / rate["aes-256-gcm"], "x AES-256-GCM's seal rate", "measured", where
        )
    gmac, data = AESGCM(os.urandom(32)), bytes(costmodel.MIB)
    times = []
    for _ in range(50):
        t0 = time.perf_counter()
        gmac.encrypt(bytes(12), b"", data)
        times.append(time.perf_counter() - t0)
    g = costmodel.MIB / statistics.median(times)
    out["origin_gmac"] = Figure(
        "origin_gmac",
        g,
        "B/s (AES-GMAC, one core: origin proofs)",
        "measured",
        f"this run: AESGCM, one core of {cpu}",
    )
    for key in ("cpu_aes_gcm", *(f"ratio:{s}" for s in MEASURED_SUITES[1:]), "origin_gmac"):
        lines.append(
            f"{key}: {fig_value(vars(figs[key]))} ({figs[key].basis}) -> {fig_value(vars(out[key]))}"
        )
    return out, lines


def measure_tunnel(figs: dict, time_limit: float = 600.0) -> tuple[dict, list[str], str | None]:
    """``figs`` with this machine's wireguard-go throughput in place of the measured one, the
    line that says so, and why it was not measured (None when it was): ``seccomm cluster`` on 2
    emulated hosts with 10 Gbit/s links, native MPI through a WireGuard mesh, a 16 MiB allreduce
    (its busbw, which on 2 ranks is what each host's tunnel carries each way per second).  Needs
    what the lab needs (root or user namespaces, iproute2) and wireguard-go."""
    import json
    import subprocess
    import sys
    import tempfile

    from .lab import privilege, tunnel

    why = tunnel.missing()
    if why is None and not privilege.privileged() and not privilege.userns_works():
        why = privilege.NEEDS
    if why is not None:
        return figs, [], why
    with tempfile.TemporaryDirectory(prefix="seccomm-tradeoff-") as tmp:
        path = f"{tmp}/lab.json"
        lab = ["--hosts", "2", "--link", "10gbit", "--tunnel", "wireguard", "--json", path]
        bench = ["-b", "16M", "-e", "16M", "-n", "3", "-w", "1", "--suites", "none"]
        cmd = [sys.executable, "-m", "seccomm", "cluster", *lab, "--", *bench]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=time_limit)
        except subprocess.TimeoutExpired:
            return figs, [], f"seccomm cluster ran past {time_limit:g} s"
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            return figs, [], f"seccomm cluster failed (exit {done.returncode}): {tail[0]}"
        rows = json.load(open(path))["scaling"]
    got = [r for r in rows if r["variant"] == "native+wireguard" and r["hosts"] == 2]
    if not got or not got[0]["busbw_gbps"] > 0:
        return figs, [], "seccomm cluster gave no native+wireguard row"
    where = "this run: seccomm cluster --hosts 2 --link 10gbit --tunnel wireguard, 16 MiB allreduce, busbw"
    out = dict(figs)
    old = figs["wireguard_go_here"]
    out["wireguard_go_here"] = Figure(old.key, got[0]["busbw_gbps"] * 1e9, old.unit, "measured", where)
    new = out["wireguard_go_here"]
    line = f"wireguard_go_here: {fig_value(vars(old))} ({old.basis}) -> {fig_value(vars(new))}"
    return out, [line], None


# -- the page -------------------------------------------------------------------------------------
#: grey-scale line styles for the plot, one per option in turn (a dash pattern and a marker)
_STYLES = [(ls, m) for m in ("o", "s", "^", "v", "D", "x", "+", "*") for ls in ("-", "--", ":", "-.")]


def plot_uri(rows: list[dict]) -> str:
    """Two panels against node count (log-scaled, ticks at the node counts), one line per option in
    black and greys told apart by dash pattern and marker: the step's increase over plaintext
    [%] of the options within twice plaintext's time (linear), and every option's step time
    relative to plaintext's [x] (log); a PNG data URI.  Needs matplotlib."""
    from .lab.report import _figure, _png

    fig, axes = _figure(2, 1, w=7.0, h=5.2)
    near, far = axes[0]
    names = list(dict.fromkeys(r["option"] for r in rows))
    nodes = sorted({r["nodes"] for r in rows})
    for i, name in enumerate(names):
        rs = [r for r in rows if r["option"] == name]
        ls, marker = _STYLES[i % len(_STYLES)]
        style = {"ls": ls, "marker": marker, "color": ("0.0", "0.4", "0.65")[i % 3], "ms": 5, "lw": 1.3}
        far.plot(
            [r["nodes"] for r in rs], [r["step_ms"] / r["plaintext_step_ms"] for r in rs], label=name, **style
        )
        if max(r["increase_pct"] for r in rs) < 100:
            near.plot([r["nodes"] for r in rs], [r["increase_pct"] for r in rs], label=name, **style)
    for ax, ylabel in ((near, "increase over plaintext [%]"), (far, "step time / plaintext's [x]")):
        ax.set_xscale("log")
        ax.set_xticks(nodes, [str(n) for n in nodes])
        ax.minorticks_off()
        ax.set_xlabel("nodes")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="major", color="0.85", lw=0.6)
    far.set_yscale("log")
    near.set_title("options within twice plaintext's time", fontsize=9)
    far.set_title("every option", fontsize=9)
    far.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    return _png(fig)


def _link(text: str, url: str, title: str = "") -> str:
    """``text`` linked to ``url`` (an address), or followed by it (a file of this project's
    docs); ``title``: the citation, shown on hover (a threat cell's, whose source is in small
    type after it)."""
    import html

    e = html.escape
    attr = f' title="{e(title)}"' if title else ""
    if url.startswith("http"):
        return f'<a href="{e(url)}"{attr}>{e(text)}</a>'
    if title:
        return f"<span{attr}>{e(text)} <small>({e(url)})</small></span>"
    return f"{e(text)} ({e(url)})" if url else e(text)


def to_html(doc: dict) -> str:
    """The page of ``seccomm tradeoff --html`` from its JSON document: the scenario, the plot, the
    table (each time linked to the option's own figure, each option's figures to their entries,
    each entry to its source), the threat matrix (each cell linked to its source),
    self-contained."""
    import html

    e, sc, rows = html.escape, doc["scenario"], doc["rows"]
    nodes = sc["nodes"]
    names = list(dict.fromkeys(r["option"] for r in rows))
    order = {k: i + 1 for i, k in enumerate(dict.fromkeys(k for r in rows for k in r["figures"]))}
    head = "".join(f"<th>{n} node{'s' if n > 1 else ''}</th>" for n in nodes)
    body = []
    for name in names:
        rs = [r for r in rows if r["option"] == name]
        own = rs[0]["figures"]  # (network first, then the option's own figure: the network's for plaintext)
        main = order[own[1] if len(own) > 1 else own[0]]
        cells = "".join(
            f'<td><a href="#fig-{main}" title="figures: {" ".join(f"[{order[k]}]" for k in r["figures"])}">'
            f"{format_ms(r['step_ms'])}</a><br><small>{format_increase(r['increase_pct'])}</small></td>"
            for r in rs
        )
        refs = " ".join(f'<a href="#fig-{order[k]}">[{order[k]}]</a>' for k in rs[0]["figures"]) or "-"
        body.append(
            f'<tr><th class="l">{e(name)}</th><td class="l">{e(rs[0]["where"])}</td>{cells}'
            f'<td class="l">{e(rs[-1]["bound"])}</td><td class="l">{refs}</td></tr>'
        )
    figs = []
    for k, i in order.items():
        f = doc["figures"][k]
        src = doc["sources"].get(f["source"], {"cite": f["source"], "url": ""})
        stated = f" &ldquo;{e(f['as_stated'])}&rdquo;" if f.get("as_stated") else ""
        figs.append(
            f'<li id="fig-{i}"><b>[{i}] {e(f["basis"])}</b>: {e(fig_value(f))}{stated}; '
            f"{_link(src['cite'], src['url'])}</li>"
        )
    threats = doc["threats"]
    matrix = []
    for name, cells in doc["protects"].items():
        tds = []
        for t in threats:
            text, key = cells[t["key"]]
            src = doc["sources"][key]
            word = text.split(":")[0]
            cls = {"yes": "y", "no": "n"}.get(word, "p")
            tds.append(f'<td class="{cls}">{_link(text, src["url"], src["cite"])}</td>')
        matrix.append(f'<tr><th class="l">{e(name)}</th>{"".join(tds)}</tr>')
    compute = f"{sc['compute_ms']:g} ms of compute a step" if sc["compute_ms"] else "communication only"
    compute += sc.get("compute_source", "")
    if sc["compute_ms"]:
        compute += f"; backward pass {sc['backward_share']:.3g} of it ({sc['backward_source']})"
    approx = " (buckets of the cap: no tensor sizes)" if sc["buckets_approximate"] else ""
    parts = [
        "<h1>seccomm tradeoff</h1>",
        f"<p><b>{e(sc['workload'])}</b>: {sc['parameters']:,} parameters, {sc['gradient_bytes']:,} B of "
        f"float32 gradients in {sc['buckets']} DDP buckets{e(approx)}; {sc['gpus_per_node']} GPUs per "
        f"node; {e(compute)}. Network: {e(sc['network'])}. CPU crypto threads per rank: "
        f"{sc['crypto_threads']}; network links per node: {sc.get('nics_per_node', 1)}.</p>",
        *(f'<p class="note"><b>Note:</b> {e(n)}</p>' for n in doc.get("notes", [])),
        "<h2>Step time against node count</h2>",
        f'<img alt="step time relative to plaintext against node count, per option" src="{plot_uri(rows)}">',
        "<h2>Step time and increase over plaintext</h2>",
        f'<table><tr><th class="l">option</th><th class="l">where the crypto runs</th>{head}'
        f'<th class="l">bound at the most nodes</th><th class="l">figures</th></tr>'
        + "".join(body)
        + "</table>",
        "<h2>Figures and their sources</h2><p>measured: on this project's machine or in this run; "
        "calibrated: from the user's calibration; published: as stated in the source.</p>",
        "<ol class=figs>" + "".join(figs) + "</ol>",
        "<h2>What each option protects against</h2>",
        '<table class="m"><tr><th class="l">option</th>'
        + "".join(f"<th>{e(t['title'])}</th>" for t in threats)
        + "</tr>"
        + "".join(matrix)
        + "</table>",
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>seccomm tradeoff</title>'
        "<style>body{font-family:sans-serif;margin:2em;max-width:1500px;color:#000}"
        "table{border-collapse:collapse;font-size:12px;margin-bottom:1em}td,th{border:1px solid #999;"
        "padding:3px 6px;text-align:right;vertical-align:top}.l{text-align:left}"
        ".m td{text-align:left;max-width:150px}.y{background:#fff}.p{background:#ddd}.n{background:#aaa}"
        "img{max-width:100%}ol.figs{font-size:12px;list-style:none;padding-left:0}"
        "</style></head><body>\n" + "\n".join(parts) + "\n</body></html>\n"
    )


def fig_value(f: dict) -> str:
    """A figure's value in readable units (rates in GB/s or MB/s)."""
    v, unit = f["value"], f["unit"]
    if unit.startswith("B/s"):
        return f"{v / 1e9:.3g} GB/s{unit[3:]}" if v >= 1e9 else f"{v / 1e6:.3g} MB/s{unit[3:]}"
    return f"{v:.4g} {unit}"
