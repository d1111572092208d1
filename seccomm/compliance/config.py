"""The configuration under review: the ``SecureComm`` settings that every evidence run of the
compliance report uses, and that each evidence row records.

``seccomm report --compliance`` builds one :class:`ReviewConfig` from its options (``--suite``,
``--key-exchange``, ``--chunk-bytes``, ``--rotate-after-frames``, ``--encrypt``); the attacker
harness (:mod:`~seccomm.compliance.attack`), the wire check (:mod:`~seccomm.compliance.evidence`),
the packet capture (:mod:`~seccomm.compliance.capture`) and the rotation check
(:mod:`~seccomm.compliance.rotation`) construct every ``SecureComm`` from :meth:`ReviewConfig.settings`
and store what they used in their rows (``"config"``), so the report can show, and check, that
the evidence ran under the configuration it names.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..framing import AAD_BYTES
from ..suites import get_suite

DEFAULT_CHUNK_BYTES = 1 << 20
#: the settings each evidence row records and the report compares with the configuration
REVIEWED = ("suite", "key_exchange", "chunk_bytes", "rotate_after_frames", "encrypt", "identity")


@dataclass(frozen=True)
class ReviewConfig:
    """``suite``: the suite under review; ``key_exchange``: ``psk`` or ``psk-dhe``;
    ``chunk_bytes``: frame payload [B]; ``rotate_after_frames``: the configured rotation point
    [frames per key], ``None`` for the suite's usage limit at ``chunk_bytes``; ``encrypt``:
    ``all`` or ``inter-node``; ``identity``: ``psk`` or ``x509`` (each rank's certificate files
    from its environment)."""

    suite: str = "aes-256-gcm"
    key_exchange: str = "psk"
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    rotate_after_frames: int | None = None
    encrypt: str = "all"
    identity: str = "psk"

    @classmethod
    def from_dict(cls, d: dict) -> "ReviewConfig":
        """The configuration from a dict with (some of) the :data:`REVIEWED` keys."""
        return cls(**{k: d[k] for k in REVIEWED if k in d})

    def as_dict(self) -> dict:
        return asdict(self)

    def limit(self, suite: str | None = None) -> int:
        """The usage limit [frames per key] of ``suite`` (default: the one under review) at
        ``chunk_bytes`` (:meth:`~seccomm.suites.CipherSuite.usage_limit`)."""
        return get_suite(suite or self.suite).usage_limit(self.chunk_bytes, AAD_BYTES)

    def rotation_point(self) -> int:
        """The configured rotation point, or the suite's usage limit when none is set."""
        return self.rotate_after_frames or self.limit()

    def settings(self, suite: str | None = None) -> dict:
        """``SecureComm`` keyword arguments for ``suite`` (default: the one under review) under
        this configuration.  The rotation point is lowered to ``suite``'s usage limit where it is
        above it (``SecureComm`` refuses such a value: the report fails it, see
        :mod:`~seccomm.compliance.rotation`), so the other evidence still runs."""
        point = self.rotate_after_frames
        if point is not None:
            point = min(point, self.limit(suite))
        return {
            "key_exchange": self.key_exchange,
            "chunk_bytes": self.chunk_bytes,
            "rotate_after_frames": point,
            "encrypt": self.encrypt,
            "identity": self.identity,
        }

    def record(self, suite: str | None = None, **deviations) -> dict:
        """What an evidence row stores: the suite and :meth:`settings` it ran with, with any
        ``deviations`` (a setting the check had to change; why, under ``note``).  A rotation point
        lowered to ``suite``'s usage limit is noted too."""
        rec = {"suite": suite or self.suite, **self.settings(suite), **deviations}
        notes = [deviations["note"]] if deviations.get("note") else []
        point, limit = self.rotate_after_frames, self.limit(suite)
        if point is not None and point > limit:
            notes.append(
                f"rotation point lowered to {rec['suite']}'s usage limit, {limit:,} frames per key "
                f"(SecureComm refuses the configured {point:,})"
            )
        if notes:
            rec["note"] = "; ".join(notes)
        return rec

    def describe(self) -> str:
        """One line: ``aes-256-gcm, key exchange psk, chunk_bytes 1,048,576 B, ...``."""
        point = (
            f"{self.rotate_after_frames:,} frames per key"
            if self.rotate_after_frames
            else "the suite's usage limit"
        )
        kx = self.key_exchange if self.identity == "psk" else "X25519 signed by each rank's certificate"
        return (
            f"{self.suite}, key exchange {kx}, chunk_bytes {self.chunk_bytes:,} B, "
            f"rotation point {point}, encrypt {self.encrypt}, identity {self.identity}"
        )


def describe_record(rec: dict) -> str:
    """One line for what an evidence row ran with (:meth:`ReviewConfig.record`)."""
    point = rec.get("rotate_after_frames")
    return (
        f"{rec.get('suite')}, key exchange {rec.get('key_exchange')}, chunk_bytes "
        f"{rec.get('chunk_bytes'):,} B, rotation point "
        f"{f'{point:,} frames per key' if point else 'the suite usage limit'}, encrypt {rec.get('encrypt')}, "
        f"identity {rec.get('identity', 'psk')}"
    )


def deviations(cfg: ReviewConfig, rec: dict | None, suite: str | None = None) -> list[str]:
    """The reviewed settings in which an evidence row's record ``rec`` differs from the
    configuration ``cfg`` (for ``suite``: a control suite of the wire check; ``["no configuration
    recorded"]`` when the row has none)."""
    if not rec:
        return ["no configuration recorded"]
    want = {**cfg.as_dict(), "suite": suite or cfg.suite}
    return [f"{k} {rec.get(k)!r} (configured {want[k]!r})" for k in REVIEWED if rec.get(k) != want[k]]


def evidence_deviations(cfg: ReviewConfig, ev: dict) -> tuple[list[str], list[str]]:
    """``(undeclared, declared)``: the evidence rows of ``ev`` (attacks, wire, capture, rotation)
    that did not run with what ``cfg`` prescribes, as text.  A deviation is *declared* when the
    row says why (a record's ``note``, or the rotation check's test-sized point, ``scaled``);
    any other is undeclared, and fails the report's configuration check."""
    undeclared, declared = [], []
    rows = [(f"attack {r['class']}", r.get("config"), None) for r in ev.get("attacks", [])]
    rows += [(f"wire check {r['suite']}", r.get("config"), r["suite"]) for r in ev.get("wire", [])]
    cap = ev.get("capture") or {}
    rows += [(f"packet capture {r['suite']}", r.get("config"), r["suite"]) for r in cap.get("rows") or []]
    rot = ev.get("rotation")
    if rot is not None and rot.get("ran"):
        rec = dict(rot.get("config") or {})
        if rot.get("scaled"):
            rec["note"] = f"ran at a test-sized point of {rot['run_point']:,} frames per key"
        elif rec.get("rotate_after_frames") == cfg.rotation_point() and not cfg.rotate_after_frames:
            rec["rotate_after_frames"] = None  # the suite's limit, set explicitly: as configured
        rows.append(("rotation check", rec, None))
    for what, rec, suite in rows:
        diffs = deviations(cfg, rec, suite)
        if diffs and rec and rec.get("note"):
            declared.append(f"{what}: {rec['note']}")
        elif diffs:
            undeclared.append(f"{what}: {', '.join(diffs)}")
    return undeclared, declared
