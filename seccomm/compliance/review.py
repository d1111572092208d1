"""The verdicts of the compliance report: :class:`Review` holds the evidence, the configuration
under review and one verdict per check of the summary (:data:`CHECKS`); the sections
(:mod:`~seccomm.compliance.sections`, :mod:`~seccomm.compliance.live`) read it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..suites import SUITES, CipherSuite
from .config import ReviewConfig, evidence_deviations
from .insider import NOT_PROTECTED

#: the checks of the summary, in its order: key -> what the check asserts
CHECKS = {
    "suite": "suite under review protects confidentiality and integrity",
    "policy": "encrypt policy protects every hop",
    "rotation": "key rotation within the usage limit, run on real ranks",
    "attacks": "attacker harness (live)",
    "wire": "wire evidence, recording transport (live)",
    "capture": "wire evidence, packet capture (live)",
    "config": "every evidence run used the configuration under review",
}


@dataclass(frozen=True)
class Review:
    """What the sections read: the evidence ``ev``
    (:func:`~seccomm.compliance.report.gather_evidence`, plus ``"capture"``), the command's
    settings ``cfg`` (the configuration under review, ``trials``, ``seed``, ``command``), an
    optional bench result, and the verdicts drawn from them."""

    ev: dict
    cfg: dict
    config: ReviewConfig
    bench: dict | None
    bench_name: str | None
    suite: CipherSuite
    chunk: int  #: frame payload [B]
    limit: int  #: configured rotation point [frames per key]
    limit_max: int  #: the suite's usage limit at ``chunk`` [frames per key]
    verdicts: dict  #: key of :data:`CHECKS` -> True, False, or None (not run)

    @property
    def passed(self) -> bool:
        """Every check passed (a packet capture that did not run does not fail the report)."""
        return all(v is not False for v in self.verdicts.values())

    @property
    def failed(self) -> list[str]:
        """What the failed checks assert."""
        return [CHECKS[k] for k, v in self.verdicts.items() if v is False]

    @property
    def machine(self) -> dict:
        return self.ev["machine"]

    @property
    def module(self) -> dict:
        """The module behind the CPU cryptography (:func:`~seccomm.compliance.status.crypto_module`)."""
        m = self.ev["machine"]
        return self.ev.get("module") or {"openssl": m["openssl"], "cryptography": m["cryptography"]}

    @property
    def attacks(self) -> list[dict]:
        return self.ev["attacks"]

    @property
    def wire(self) -> list[dict]:
        return self.ev["wire"]

    @property
    def rotation(self) -> dict | None:
        return self.ev.get("rotation")

    @property
    def cap(self) -> dict | None:
        return self.ev.get("capture")


def review(ev: dict, cfg: dict, bench: dict | None, bench_name: str | None) -> Review:
    """The verdicts for evidence ``ev`` under the settings ``cfg`` (``suite``, ``chunk_bytes``,
    ``rotate_after_frames``: None for the suite's usage limit; ``key_exchange``, ``encrypt``)."""
    config = ReviewConfig.from_dict(cfg)
    suite, chunk = SUITES[config.suite], config.chunk_bytes
    limit_max, limit = config.limit(), config.rotation_point()
    attacks, wire, cap, rot = ev["attacks"], ev["wire"], ev.get("capture"), ev.get("rotation")
    verdicts = {
        "suite": suite.confidential and suite.authenticated,
        "policy": config.encrypt == "all",
        "rotation": limit <= limit_max and bool(rot) and rot.get("ok") is True,
        "attacks": bool(attacks)
        and all(
            r["detected"] == r["trials"] and r["silently_accepted"] == 0
            for r in attacks
            if r.get("expected") != NOT_PROTECTED  # (identity psk: not run, shown in the trust model)
        ),
        "wire": bool(wire) and all(r["ok"] for r in wire),
        "capture": None if not cap or cap.get("rows") is None else all(r["ok"] for r in cap["rows"]),
        "config": not evidence_deviations(config, ev)[0],
    }
    return Review(ev, cfg, config, bench, bench_name, suite, chunk, limit, limit_max, verdicts)
