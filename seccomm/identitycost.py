"""What per-rank identities cost at scale (``seccomm project --identity x509``): the setup of one
``SecureComm`` and the origin proofs added to an operation with group frames.

Setup (:func:`setup_seconds`), per rank, all ranks in parallel; ``p`` ranks, ``c`` distinct
certificates (``p`` with one per rank), a link of latency ``alpha`` [s] and ``beta`` [s/B]::

    network   2 ceil(log2 p) alpha + (p - 1)(H + F) beta       hello (H = 4,096 B) and finished
                                                               (F = 520 B) allgathers, recursive
                                                               doubling bound; + the 48 B scatter
    psk       p mac + 2 (p - 1) hkdf                           hello MACs; control and direction keys
    psk-dhe   psk + (p - 1) x25519
    x509      c chain + (p - 1)(parse + verify + x25519 + 3 hkdf) + sign

Origin proofs (:func:`origin_seconds`), per operation, on 3 or more ranks, for an origin of
``n_o`` bytes and a receiver of ``n_r`` bytes of group frames (the bytes the collective forwards
unchanged: ring allgather ``S (p-1)/p`` per rank as receiver and ``S/p`` as origin, the ring
allreduce's allgather phase the same, bcast ``S`` at every receiver and at the root)::

    origin_proofs = (p - 1) n_o gmac + n_r gmac + 2 (p - 1) o

``gmac`` [s/B] is one AES-GMAC pass; ``o`` [s] the overhead of one small message at each end (the
origin sends ``p - 1`` of them, a receiver of an allgather gets ``p - 1``).  The proofs are
added to the operation's time as they are computed: after the seal at the origin and before the
copy-out at the receiver, on the calling thread (no overlap is modelled).

The rates (:data:`RATES`) were measured on one core of the development machine (AMD EPYC with
VAES, ``cryptography`` on OpenSSL; ECDSA P-256 certificates from one CA); ``o`` is the 1 µs per
message of a small MPI message over shared memory or a NIC's send queue, an assumption, not a
measurement."""

from __future__ import annotations

import math
from dataclasses import dataclass

HELLO_BYTES, FINISHED_BYTES, DELIVERY_BYTES = 4096, 520, 48  # (seccomm.handshake)


@dataclass(frozen=True)
class Rates:
    """Seconds per operation on one core: ``chain`` (verify one certificate chain), ``parse``
    (read one DER certificate), ``verify`` and ``sign`` (one ECDSA P-256 signature), ``x25519``
    (one exchange), ``hkdf`` (one 32-byte key), ``mac`` (one hello MAC check); ``gmac`` [s/B];
    ``message`` [s] per small message at each end."""

    chain: float
    parse: float
    verify: float
    sign: float
    x25519: float
    hkdf: float
    mac: float
    gmac: float
    message: float
    source: str


#: measured with ``benchmarks/identity_rates.py`` (median of 200 calls each) on the development
#: machine; ``message``: assumed
RATES = Rates(
    chain=122e-6,
    parse=1.4e-6,
    verify=65e-6,
    sign=25e-6,
    x25519=30e-6,
    hkdf=3.1e-6,
    mac=1.9e-6,
    gmac=1 / 23.2e9,
    message=1e-6,
    source="benchmarks/identity_rates.py on AMD EPYC (VAES), 1 core; message overhead assumed 1 us",
)


def setup_seconds(p: int, alpha: float, beta: float, identity: str = "x509", certs: int | None = None,
                  rates: Rates = RATES) -> dict:  # fmt: skip
    """Seconds of one ``SecureComm`` construction on ``p`` ranks under ``identity`` (``psk``,
    ``psk-dhe`` or ``x509``; ``certs``: distinct certificates, default ``p``), split into
    ``network`` and ``cpu`` and their sum ``total`` (see the module for the formulas)."""
    if p < 1:
        raise ValueError(f"p must be >= 1, got {p}")
    r = rates
    steps = math.ceil(math.log2(p)) if p > 1 else 0
    per_rank = HELLO_BYTES + FINISHED_BYTES + DELIVERY_BYTES
    network = (2 * steps + (1 if p > 1 else 0)) * alpha + (p - 1) * per_rank * beta
    cpu = p * r.mac + 2 * (p - 1) * r.hkdf
    if identity == "psk-dhe":
        cpu += (p - 1) * r.x25519
    elif identity == "x509":
        c = p if certs is None else certs
        cpu = c * r.chain + (p - 1) * (r.parse + r.verify + r.x25519 + 3 * r.hkdf) + r.sign
    elif identity != "psk":
        raise ValueError(f"unknown identity {identity!r}; allowed: psk, psk-dhe, x509")
    return {"network": network, "cpu": cpu, "total": network + cpu}


def group_bytes(collective: str, algorithm: str, nbytes: float, p: int) -> tuple[float, float]:
    """``(origin, receiver)`` bytes of group frames per rank in one op of ``collective`` run by
    ``algorithm``, S = ``nbytes`` (nccl-tests' S); ``(0, 0)`` where it has no group frames."""
    if collective == "allgather" or (collective == "allreduce" and algorithm == "ring"):
        return nbytes / p, nbytes * (p - 1) / p  # (allreduce: its ring's allgather phase)
    if collective == "bcast":
        return nbytes, nbytes
    return 0.0, 0.0


def origin_seconds(collective: str, algorithm: str, nbytes: float, p: int, rates: Rates = RATES) -> float:
    """Seconds the origin proofs add to one op of ``collective`` run by ``algorithm``, S =
    ``nbytes``, on ``p`` ranks (0 below 3 ranks, and without group frames): an allgather rank's
    work as origin and receiver; bcast: the slower of the root's and a receiver's."""
    if p < 3:
        return 0.0
    n_o, n_r = group_bytes(collective, algorithm, nbytes, p)
    if not n_o:
        return 0.0
    if collective == "bcast":  # the root seals for p - 1 receivers; a receiver checks what it gets
        return max((p - 1) * n_o * rates.gmac + (p - 1) * rates.message, n_r * rates.gmac + rates.message)
    return (p - 1) * n_o * rates.gmac + n_r * rates.gmac + 2 * (p - 1) * rates.message


def annotate(rows: list, collective: str, nbytes: float, identity: str, prm) -> None:
    """Add to each row of :func:`seccomm.costmodel.sweep` ``setup_ms`` (:func:`setup_seconds`
    over the inter-node link, or the intra-node one on one node), ``origin_us``
    (:func:`origin_seconds`, x509 only, for the algorithm the row runs) and
    ``identity_overhead_x`` = (secure + proofs) / plain."""
    for r in rows:
        link = prm.inter if r["nodes"] > 1 else prm.intra
        r["setup_ms"] = setup_seconds(r["ranks"], link.alpha, link.beta, identity)["total"] * 1e3
        proofs = origin_seconds(collective, r["runs"], nbytes, r["ranks"]) if identity == "x509" else 0.0
        r["origin_us"] = proofs * 1e6
        r["identity_overhead_x"] = (r["secure_us"] + r["origin_us"]) / r["plain_us"] if r["plain_us"] else 1.0
