"""``seccomm report --compliance``: a file a security or compliance reviewer can read and keep.

It states what protects the traffic (the suites with the FIPS 140-3 status of each algorithm and,
apart, of the module that runs it; key sizes, the KDF and its parameters, the nonce construction,
where it is made and why it cannot repeat, the usage limits per key and the configured rotation
point, the GPU path and its limits, the library versions in use) and attaches evidence produced
at report time on real ranks under the configuration under review
(:class:`~seccomm.compliance.config.ReviewConfig`: suite, key exchange, chunk size, rotation
point, encrypt policy): the attacker harness (:mod:`seccomm.compliance.attack`), the wire check
of the recording transport (:mod:`seccomm.compliance.evidence`), the rotation check
(:mod:`seccomm.compliance.rotation`), and, where the process may open a packet socket, the same
wire check on a packet capture of ranks talking TCP over loopback
(:mod:`seccomm.compliance.capture`).  Every evidence row records the settings it ran with, and
the report checks them against the configuration.  Given a ``seccomm bench --json`` result, it
adds the measured overhead.

:func:`build` writes the report as a :class:`~seccomm.compliance.doc.Doc`, one function per
section in :data:`SECTIONS` (:mod:`~seccomm.compliance.sections`, :mod:`~seccomm.compliance.live`);
the command (:mod:`seccomm.cli.report`) renders it as Markdown or as one self-contained HTML file.
"""

from __future__ import annotations

import json

from ..suites import SUITES
from . import live, sections
from .config import DEFAULT_CHUNK_BYTES, ReviewConfig
from .doc import Doc
from .review import Review, review

__all__ = ["DEFAULT_CHUNK_BYTES", "Review", "SECTIONS", "build", "gather_evidence", "load_bench", "review"]


def build(ev: dict, cfg: dict, bench: dict | None, bench_name: str | None) -> tuple[Doc, bool]:
    """The report for evidence ``ev`` (from :func:`gather_evidence`, plus ``"capture"``) and
    settings ``cfg``, with a bench result ``bench`` read from ``bench_name`` if given;
    returns ``(doc, every_check_passed)``."""
    rv = review(ev, cfg, bench, bench_name)
    d = Doc("seccomm compliance report")
    for section in SECTIONS:
        section(d, rv)
    return d, rv.passed


SECTIONS = (
    sections._header,
    sections._summary,
    sections._configuration,
    sections._suites,
    sections._key_derivation,
    sections._nonces,
    sections._usage_limits,
    sections._trust_model,
    sections._gpu,
    sections._software,
    live._attack_evidence,
    live._wire_evidence,
    live._packet_capture,
    live._rotation_evidence,
    live._overhead,
    sections._threat_model,
    sections._provenance,
)


def trust_evidence(comm, config: ReviewConfig, psk: bytes | None) -> dict:
    """Collective: the trust model in force, from one ``SecureComm`` built under ``config``: the
    identity mode, where the job secret came from, and under x509 every rank's verified
    certificate (rank, host, subject, issuer, SHA-256 fingerprint, validity in ISO 8601 UTC)."""
    from ..comm import SecureComm

    with SecureComm(comm, config.suite, psk=psk, **config.settings()) as sc:
        ids = sc.session.identities or ()
        return {
            "identity": config.identity,
            "secret_source": sc.secret_source,
            "ranks": [
                {
                    "rank": p.rank,
                    "host": p.host,
                    "subject": p.subject,
                    "issuer": p.issuer,
                    "fingerprint": p.fingerprint,
                    "not_before": p.not_before.isoformat(),
                    "not_after": p.not_after.isoformat(),
                }
                for p in ids
            ],
        }


def load_bench(path: str) -> dict:
    """A ``seccomm bench --json`` document; ``ValueError`` naming what is wrong."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except IsADirectoryError:
        raise ValueError(f"--bench {path} is a directory") from None
    except OSError as e:
        raise ValueError(f"--bench {path}: {e.strerror}") from None
    except ValueError:
        raise ValueError(f"--bench {path}: not JSON") from None
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"--bench {path}: not a seccomm bench --json result (no rows)")
    num = (int, float)
    for i, r in enumerate(rows):
        ok = (
            isinstance(r, dict)
            and isinstance(r.get("collective"), str)
            and isinstance(r.get("variant"), str)
            and isinstance(r.get("size_bytes"), int)
            and (r.get("wrong") is None or isinstance(r.get("wrong"), int))
            and all(
                isinstance(r.get(k), num) and not isinstance(r.get(k), bool)
                for k in ("busbw_gbps", "overhead_x")
            )
            and isinstance(r.get("time_us"), dict)
            and isinstance(r["time_us"].get("median"), num)
        )
        if not ok:
            raise ValueError(
                f"--bench {path}: row {i} is not a seccomm bench row (collective, size_bytes, "
                f"variant, time_us.median, busbw_gbps, overhead_x, wrong)"
            )
    for key in ("machine", "config"):
        if not isinstance(doc.get(key, {}), dict):
            raise ValueError(f"--bench {path}: '{key}' is not an object")
    return doc


# -- running -------------------------------------------------------------------------------------
def gather_evidence(
    comm,
    trials: int,
    seed: int,
    log,
    suite: str = "aes-256-gcm",
    config: ReviewConfig | None = None,
    psk: bytes | None = None,
) -> dict:
    """Collective: the attacker harness, the wire check and the rotation check on ``comm``, each
    under ``config`` (default: ``suite`` with default settings) and the job secret (or ``psk``);
    the result on every rank, with the machine and the module behind the CPU cryptography."""
    from ..bench.machine import machine_info
    from .attack import CLASSES, run_classes
    from .evidence import wire_check
    from .rotation import rotation_check
    from .status import crypto_module

    config = config or ReviewConfig(suite=suite)
    attacks = run_classes(comm, CLASSES, trials, seed, log=log, config=config, psk=psk)
    if comm.Get_rank() == 0:
        log(f"# wire check: recording transport, {len(SUITES)} suites; {config.describe()}")
    try:
        wire, wire_error = wire_check(comm, config=config, psk=psk), None
    except ValueError as e:  # the same on every rank, before any traffic: a point no op fits under
        wire, wire_error = [], f"not run: {e}"
    if comm.Get_rank() == 0:
        log("# rotation check")
    rotation = rotation_check(comm, config, psk)
    trust = trust_evidence(comm, config, psk)
    return {
        "trust": trust,
        "attacks": attacks,
        "wire": wire,
        "wire_error": wire_error,
        "rotation": rotation,
        "config": config.as_dict(),
        "world_size": comm.Get_size(),
        "machine": machine_info(),
        "module": crypto_module(),
    }
