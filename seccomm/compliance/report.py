"""``seccomm report --compliance``: a file a security or compliance reviewer can read and keep.

It states what protects the traffic (suites and their FIPS 140-3 status, key sizes, the KDF and
its parameters, the nonce construction and why it cannot repeat, the usage limits per key and
the configured rotation point, the library versions in use) and attaches evidence produced at
report time on real ranks: the attacker harness (:mod:`seccomm.compliance.attack`), the wire check of the
recording transport, and, where the process may open a packet socket, the same check on a packet
capture of ranks talking TCP over loopback (:mod:`seccomm.compliance.evidence`,
:mod:`seccomm.compliance.capture`).  Given a ``seccomm bench --json`` result, it adds the
measured overhead.

:func:`build` writes the report as a :class:`~seccomm.compliance.doc.Doc`, one function per
section in :data:`SECTIONS`; the command (:mod:`seccomm.cli.report`) renders it as Markdown or as
one self-contained HTML file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..framing import AAD_BYTES, MAX_CHUNKS_PER_HOP, MAX_OPS_PER_EPOCH, MAX_RANKS
from ..suites import KEY_BYTES, NONCE_BYTES, SUITES, TAG_BYTES, TARGET_ADVANTAGE_LOG2, CipherSuite
from .doc import Doc

DEFAULT_CHUNK_BYTES = 1 << 20


# -- facts -----------------------------------------------------------------------------------------
def fips_mode() -> str:
    """Whether the OpenSSL behind ``cryptography`` runs its FIPS provider."""
    try:
        from cryptography.hazmat.bindings._rust import openssl as rust_openssl

        return "enabled" if rust_openssl.is_fips_enabled() else "not enabled"
    except Exception:  # noqa: BLE001 - private API moved: say so rather than guess
        return "unknown"


def _protection(suite: CipherSuite) -> str:
    if suite.confidential:
        return "encrypts and authenticates"
    return "authenticates only, payload in the clear" if suite.authenticated else "no protection"


def _verdict(ok: bool | None) -> str:
    return "not run" if ok is None else "PASS" if ok else "FAIL"


def _mib(n: int) -> str:
    return f"{n:,} bytes" + (
        f" ({n / (1 << 20):g} MiB)" if n >= 1 << 20 else f" ({n / 1024:g} KiB)" if n >= 1024 else ""
    )


@dataclass(frozen=True)
class Review:
    """What the sections read: the evidence ``ev`` (:func:`gather_evidence`, plus ``"capture"``),
    the configuration ``cfg``, an optional bench result, and the verdicts drawn from them."""

    ev: dict
    cfg: dict
    bench: dict | None
    bench_name: str | None
    suite: CipherSuite
    chunk: int  #: frame payload [B]
    limit: int  #: configured rotation point [frames per key]
    limit_max: int  #: the suite's usage limit at ``chunk`` [frames per key]
    suite_ok: bool  #: the suite encrypts and authenticates
    rotation_ok: bool
    attack_ok: bool
    wire_ok: bool
    cap_ok: bool | None  #: None: the packet capture did not run

    @property
    def passed(self) -> bool:
        """Every evidence check passed (a capture that did not run does not fail the report)."""
        return (
            self.attack_ok
            and self.wire_ok
            and self.cap_ok is not False
            and self.suite_ok
            and self.rotation_ok
        )

    @property
    def machine(self) -> dict:
        return self.ev["machine"]

    @property
    def attacks(self) -> list[dict]:
        return self.ev["attacks"]

    @property
    def wire(self) -> list[dict]:
        return self.ev["wire"]

    @property
    def cap(self) -> dict | None:
        return self.ev.get("capture")


def review(ev: dict, cfg: dict, bench: dict | None, bench_name: str | None) -> Review:
    """The verdicts for evidence ``ev`` under configuration ``cfg`` (``suite``, ``chunk_bytes``,
    ``rotate_after_frames``: None for the suite's usage limit)."""
    suite, chunk = SUITES[cfg["suite"]], cfg["chunk_bytes"]
    limit_max = suite.usage_limit(chunk, AAD_BYTES)
    limit = cfg["rotate_after_frames"] or limit_max
    attacks, wire, cap = ev["attacks"], ev["wire"], ev.get("capture")
    return Review(
        ev,
        cfg,
        bench,
        bench_name,
        suite,
        chunk,
        limit,
        limit_max,
        suite_ok=suite.confidential and suite.authenticated,
        rotation_ok=limit <= limit_max,
        attack_ok=bool(attacks)
        and all(r["detected"] == r["trials"] and r["silently_accepted"] == 0 for r in attacks),
        wire_ok=bool(wire) and all(r["ok"] for r in wire),
        cap_ok=None if not cap or cap.get("rows") is None else all(r["ok"] for r in cap["rows"]),
    )


def build(ev: dict, cfg: dict, bench: dict | None, bench_name: str | None) -> tuple[Doc, bool]:
    """The report for evidence ``ev`` (from :func:`gather_evidence`, plus ``"capture"``) and
    configuration ``cfg``, with a bench result ``bench`` read from ``bench_name`` if given;
    returns ``(doc, all_evidence_passed)``."""
    rv = review(ev, cfg, bench, bench_name)
    d = Doc("seccomm compliance report")
    for section in SECTIONS:
        section(d, rv)
    return d, rv.passed


# -- sections, in the order they appear ------------------------------------------------------------
def _header(d: Doc, rv: Review) -> None:
    """The title table: when, what, where, the command, and the overall verdict."""
    m, passed, cfg = rv.machine, rv.passed, rv.cfg
    d.table(
        ["field", "value"],
        [
            ["generated (UTC)", m["utc"]],
            ["seccomm", m["seccomm"]],
            ["commit", m["git_commit"] or "unknown (not run from a git checkout)"],
            ["host", f"{m['host']} ({m['platform']})"],
            ["command", cfg["command"]],
            ["overall", "PASS: all evidence checks passed" if passed else "FAIL: see the summary"],
        ],
    )


def _summary(d: Doc, rv: Review) -> None:
    """One row per check with its verdict."""
    suite, chunk, limit, limit_max = rv.suite, rv.chunk, rv.limit, rv.limit_max
    attacks, wire, cap = rv.attacks, rv.wire, rv.cap
    d.h(1, "Summary")
    n_att = sum(r["trials"] for r in attacks)
    d.table(
        ["check", "result", "detail"],
        [
            [
                "suite under review protects confidentiality and integrity",
                _verdict(rv.suite_ok),
                f"{suite.name}: "
                + (
                    "encrypts and authenticates every frame"
                    if rv.suite_ok
                    else "payload travels in the clear (integrity only)"
                    if suite.authenticated
                    else "no protection at all"
                ),
            ],
            [
                "rotation point within the suite's usage limit",
                _verdict(rv.rotation_ok),
                f"{limit:,} frames per key; limit {limit_max:,} at {chunk:,}-byte frames",
            ],
            [
                "FIPS 140-3 status of the suite (information)",
                "approved" if suite.fips_140_3.startswith("approved") else "not approved",
                suite.fips_140_3,
            ],
            [
                "attacker harness (live)",
                _verdict(rv.attack_ok),
                f"{n_att} attacks in {len(attacks)} classes ({suite.name}; ranks 0-1, redirect on all "
                f"{rv.ev['world_size']} ranks): "
                f"{sum(r['detected'] for r in attacks)} detected, "
                f"{sum(r['silently_accepted'] for r in attacks)} silently accepted",
            ],
            [
                "wire evidence, recording transport (live)",
                _verdict(rv.wire_ok),
                "; ".join(
                    f"{r['suite']}: {r['hits']:,} plaintext windows (expected {r['expect']})" for r in wire
                ),
            ],
            [
                "wire evidence, packet capture (live)",
                _verdict(rv.cap_ok),
                cap.get("reason", "")
                if cap and cap.get("rows") is None
                else "; ".join(
                    f"{r['suite']}: {r['hits']:,} windows in {r['captured_bytes']:,} captured bytes"
                    for r in (cap or {}).get("rows") or []
                ),
            ],
            [
                "measured overhead",
                "given" if rv.bench else "not given",
                rv.bench_name or "pass --bench RESULTS.json (from seccomm bench --json) to include it",
            ],
        ],
    )


def _configuration(d: Doc, rv: Review) -> None:
    """The settings under review: suite, key exchange, frame size, rotation point, field limits."""
    suite, chunk, limit, cfg = rv.suite, rv.chunk, rv.limit, rv.cfg
    d.h(1, "Configuration under review")
    d.table(
        ["setting", "value"],
        [
            [
                "cipher suite",
                f"{suite.name}: {_protection(suite)}",
            ],
            ["key exchange", cfg["key_exchange"]],
            ["frame payload (chunk_bytes)", _mib(chunk)],
            [
                "rotation point",
                f"a new epoch key before any key seals more than {limit:,} frames"
                + (
                    " (set with --rotate-after-frames)"
                    if cfg["rotate_after_frames"]
                    else " (the suite's usage limit at this chunk size)"
                ),
            ],
            ["operations per epoch key", f"at most {MAX_OPS_PER_EPOCH:,} (32-bit op index in the nonce)"],
            ["world size", f"at most {MAX_RANKS:,} ranks (16-bit step field)"],
            ["chunks per hop", f"at most {MAX_CHUNKS_PER_HOP:,} (24-bit chunk field)"],
        ],
    )


def _suites(d: Doc, rv: Review) -> None:
    """Every suite: protection, FIPS 140-3 status, key/nonce/tag sizes, usage limit."""
    chunk = rv.chunk
    d.h(1, "Cipher suites and FIPS 140-3 status")
    d.p(
        "All CPU cryptography is done by the Python 'cryptography' package on OpenSSL; seccomm "
        "implements none of these primitives itself on the CPU. FIPS 140-3 applies to the "
        "cryptographic module: an approved algorithm is FIPS 140-3 compliant only when the "
        f"OpenSSL in use runs a validated FIPS provider. FIPS provider in this run: {fips_mode()}."
    )
    rows = []
    for s in SUITES.values():
        keyed = s.name != "none"
        rows.append(
            [
                s.name,
                "yes" if s.confidential else "no",
                "yes" if s.authenticated else "no",
                s.fips_140_3,
                f"{KEY_BYTES * 8}" if keyed else "-",
                f"{NONCE_BYTES * 8}" if keyed else "-",
                f"{TAG_BYTES * 8}" if s.authenticated else "-",
                f"{s.usage_limit(chunk, AAD_BYTES):,}" if keyed else "-",
                s.limit_source,
            ]
        )
    d.table(
        [
            "suite",
            "confidentiality",
            "integrity",
            "FIPS 140-3",
            "key [bits]",
            "nonce [bits]",
            "tag [bits]",
            f"frames per key at {chunk:,} B",
            "limit source",
        ],
        rows,
    )


def _key_derivation(d: Doc, rv: Review) -> None:
    """The HKDF key schedule, one row per key."""
    d.h(1, "Key derivation")
    d.p(
        "Every key is 32 bytes from HKDF with SHA-256 (RFC 5869, via cryptography): "
        "HKDF(SHA-256, ikm, salt = job id || communicator id, info). The job id is the first 16 bytes "
        "of SHA-256('seccomm job ' || label) where the label is SECCOMM_JOB_ID or SLURM_JOB_ID; the "
        "communicator id is 16 random bytes drawn by rank 0 for each communicator and bound into "
        "the salt and every AAD."
    )
    d.table(
        ["key", "ikm", "info"],
        [
            [
                "direction key src->dst, epoch e",
                "job secret (|| X25519(src, dst) with psk-dhe)",
                "'seccomm/1 dir|' || suite || '|' || e || src || dst (32-bit big-endian fields)",
            ],
            [
                "group key, epoch e (encrypt-once forwarding)",
                "job secret (|| group secret with psk-dhe)",
                "'seccomm/1 group|' || suite || '|' || e",
            ],
            [
                "psk-dhe group-secret wrap (rank 0 to rank j, AES-256-GCM)",
                "job secret || X25519(0, j)",
                "'seccomm/1 group-wrap'",
            ],
            [
                "key confirmation (setup)",
                "job secret",
                "'seccomm/1 confirm': HMAC-SHA256 over every rank's settings",
            ],
            [
                "psk-dhe share authentication",
                "job secret",
                "'seccomm/1 dhe-auth': HMAC-SHA256 over each X25519 share",
            ],
        ],
    )
    d.items(
        [
            "Job secret: at least 32 bytes, from the psk argument, a file named by SECCOMM_PSK_FILE (refused "
            "when group or others may read or write it) or SECCOMM_PSK (hex). Local runs write a fresh "
            "secret to a 0600 file per run and delete it afterwards.",
            "psk-dhe: each rank contributes an ephemeral X25519 share (RFC 7748) authenticated with the "
            "PSK; the private keys are dropped after the exchange (forward secrecy against a later PSK "
            "leak).",
            "Key material never appears in logs, exceptions or this report; errors name ranks, "
            "operations, sequence numbers and chunk indices only.",
        ]
    )


def _nonces(d: Doc, rv: Review) -> None:
    """The nonce layout and why a nonce cannot repeat under one key."""
    d.h(1, "Nonce construction: why a nonce cannot repeat under one key")
    d.p(
        "Deterministic 96-bit nonces (NIST SP 800-38D section 8.2.1), big-endian fields, built by "
        "both ends from what they already know; nothing but the frame (ciphertext || 16-byte tag) "
        "crosses the wire:"
    )
    d.table(
        ["bits", "field"],
        [
            ["32", "epoch-local operation index"],
            ["16", "step of the algorithm"],
            ["24", "chunk index within the hop"],
            ["24", "sealing rank (or origin rank)"],
        ],
    )
    d.items(
        [
            "A direction key (src->dst, epoch) is used only by src; within one operation each (step, chunk) "
            "is sealed once; the operation index grows by one per operation and restarts only with a new "
            "epoch, which has a new key.",
            "The group key (epoch) is used by every origin, each only for its own data, with its rank in the "
            "nonce; forwarded frames are never re-sealed.",
            "Field overflow is refused before any traffic: at most 2^32 - 1 operations per epoch, 2^24 "
            "chunks per hop, 2^16 ranks.",
            f"Every tag also binds an {AAD_BYTES}-byte AAD header the receiver builds itself: protocol "
            "version, suite, operation, reduction op, key kind, dtype, job id, communicator id, epoch, "
            "sequence number, step, chunk index and count, source, destination, total and chunk element "
            "counts. A frame replayed, reordered, redirected or from another job fails its tag.",
            "Tested: tests/mpi_worker.py 'nonce_unique' records every (key, nonce) pair sealed on real "
            "ranks across rotations and finds no repeat.",
        ]
    )


def _usage_limits(d: Doc, rv: Review) -> None:
    """Frames per key by suite and frame size; the configured rotation point."""
    suite, chunk, limit = rv.suite, rv.chunk, rv.limit
    d.h(1, "Usage limits per key and rotation")
    d.p(
        "Limits follow CFRG draft-irtf-cfrg-aead-limits with a target advantage "
        f"p = 2^{TARGET_ADVANTAGE_LOG2}: "
        "for AES-GCM, q <= (p^(1/2) * 2^64.5 - 1) / (L + 1) frames per key, with L the 16-byte blocks "
        "per frame including the AAD, capped at 2^32 (NIST SP 800-38D section 8.3); ChaCha20-Poly1305 "
        "has no confidentiality limit below 2^96 nonces (capped at 2^48). Rotation is deterministic: "
        "before each operation every rank computes the same upper bound of frames it may seal under "
        "one key and moves to the next epoch when the bound would pass the limit; no message is needed."
    )
    sizes = sorted({64 << 10, 1 << 20, 16 << 20, chunk})
    d.table(
        ["suite"] + [f"frames per key at {s:,} B" for s in sizes],
        [
            [s.name] + [f"{s.usage_limit(c, AAD_BYTES):,}" for c in sizes]
            for s in SUITES.values()
            if s.name != "none"
        ],
    )
    d.p(f"Configured rotation point: {limit:,} frames per key ({suite.name}, {chunk:,}-byte frames).")


def _software(d: Doc, rv: Review) -> None:
    """Versions of everything in the data path, and the CPU's crypto instructions."""
    m = rv.machine
    d.h(1, "Software in use")
    cpu = m["cpu"]
    d.table(
        ["component", "version"],
        [
            ["Python", m["python"]],
            ["OpenSSL (behind cryptography)", m["openssl"]],
            ["OpenSSL FIPS provider", fips_mode()],
            ["cryptography", m["cryptography"]],
            ["MPI library", m["mpi_library"]],
            ["mpi4py", m["mpi4py"]],
            ["numpy", m["numpy"]],
            ["seccomm", f"{m['seccomm']} (commit {m['git_commit'] or 'unknown'})"],
            [
                "CPU",
                f"{cpu['model']}, {cpu['cores']} cores, AES-NI {'yes' if cpu['aes'] else 'no'}, "
                f"VAES {'yes' if cpu['vaes'] else 'no'}, PCLMULQDQ {'yes' if cpu['pclmulqdq'] else 'no'}",
            ],
        ],
    )


def _attack_evidence(d: Doc, rv: Review) -> None:
    """The attacker harness run for this report, one row per class."""
    suite, attacks, cfg, ev = rv.suite, rv.attacks, rv.cfg, rv.ev
    d.h(1, "Evidence: attacker harness (run for this report)")
    d.p(
        f"An on-path attacker transport sits between SecureComm and MPI on real ranks ({suite.name}, "
        f"{cfg['trials']} trials per class, seed {cfg['seed']}; every class runs on ranks 0 and 1 except "
        f"redirect, which needs a rank sealing for two peers and runs on all {ev['world_size']} ranks; the "
        "harness picks its own chunk sizes and algorithms per class) and alters what one rank "
        "puts on the wire. Detected: the receiving rank raised AuthenticationError naming the attacking "
        "peer and the operation (TransportTimeout naming it for a drop). Silently accepted: any rank "
        "returned a value different from the honest result. Equivalent command: "
        f"seccomm attack --np {ev['world_size']} --trials {cfg['trials']} --seed {cfg['seed']} "
        f"--suite {suite.name}"
    )
    d.table(
        ["attack class", "trials", "detected", "silently accepted", "result", "example error"],
        [
            [
                r["class"],
                r["trials"],
                r["detected"],
                r["silently_accepted"],
                _verdict(r["detected"] == r["trials"] and r["silently_accepted"] == 0),
                r["example"][:160],
            ]
            for r in attacks
        ],
    )


def _every_algorithm() -> str:
    """The collectives and algorithms the wire check runs, from the registry."""
    from ..collectives import COLLECTIVES

    return "; ".join(f"{c.name} by {' and '.join(c.algorithms)}" for c in COLLECTIVES.values())


def _wire_evidence(d: Doc, rv: Review) -> None:
    """The recording-transport wire check run for this report, one row per suite."""
    wire = rv.wire
    d.h(1, "Evidence: no plaintext on the wire (run for this report)")
    d.p(
        "A recording transport keeps a copy of every buffer each rank hands to MPI (frames and setup "
        f"messages) while every collective ({_every_algorithm()}) runs on random float32 gradients. "
        "Every 16-byte window of every rank's inputs and of "
        "every result, at every byte offset, is searched for at every offset of the recording; each "
        "candidate is confirmed byte for byte. The encrypting suites must show none; aes-256-gmac and "
        "none must show them, which proves the check can fail."
    )
    d.table(
        [
            "suite",
            "bytes on the wire (all ranks)",
            "plaintext windows searched (per rank)",
            "windows found",
            "expected",
            "result",
        ],
        [
            [
                r["suite"],
                f"{r['wire_bytes']:,}",
                f"{r['plaintext_windows']:,}",
                f"{r['hits']:,}",
                r["expect"],
                _verdict(r["ok"]),
            ]
            for r in wire
        ],
    )


def _packet_capture(d: Doc, rv: Review) -> None:
    """The same check on a loopback packet capture, or why it did not run."""
    cap = rv.cap
    d.h(2, "Packet capture")
    if cap and cap.get("rows") is not None:
        d.p(
            "The same search on every packet captured on the loopback interface (AF_PACKET socket) while "
            f"{cap['nranks']} local ranks ran allreduce and allgather over TCP "
            "(MPIR_CVAR_NOLOCAL=1: no shared memory, as between nodes). The ranks also save every frame "
            "they handed to MPI, and each must be found in the capture: a capture that missed traffic "
            "counts as FAIL." + (f" pcap files: {cap['pcap_dir']}" if cap.get("pcap_dir") else "")
        )
        d.table(
            [
                "suite",
                "packets",
                "captured bytes",
                "frames found / sent",
                "plaintext windows found",
                "expected",
                "result",
            ],
            [
                [
                    r["suite"],
                    r["packets"],
                    f"{r['captured_bytes']:,}",
                    f"{r['frames_found']} / {r['frames']}",
                    f"{r['hits']:,}",
                    r["expect"],
                    _verdict(r["ok"]),
                ]
                for r in cap["rows"]
            ],
        )
    else:
        d.p(f"Not run: {(cap or {}).get('reason', 'not requested')}.")


def _overhead(d: Doc, rv: Review) -> None:
    """The measured overhead from a ``seccomm bench --json`` result, if given."""
    bench, bench_name = rv.bench, rv.bench_name
    d.h(1, "Measured overhead")
    if bench:
        _bench_section(d, bench, bench_name)
    else:
        d.p(
            "No benchmark result given. Run seccomm bench --json RESULTS.json on the target system and "
            "pass --bench RESULTS.json."
        )


def _bench_section(d: Doc, bench: dict, name: str | None) -> None:
    """Where the bench ran, and one row per (collective, size, suite) against native MPI."""
    bm = bench.get("machine", {})
    d.p(
        f"From {name}: measured {bm.get('utc', '?')} on {bm.get('host', '?')} "
        f"({(bm.get('cpu') or {}).get('model', '?')}), commit {bm.get('git_commit') or '?'}, "
        f"{bench.get('world_size', '?')} ranks. Native MPI and each suite ran interleaved in one run; the "
        "overhead is the suite's median time divided by native MPI's at the same size."
    )
    rows = bench["rows"]
    native = {(r["collective"], r["size_bytes"]): r for r in rows if r["variant"] == "native"}
    out = []
    for r in rows:
        if r["variant"] == "native":
            continue
        n = native.get((r["collective"], r["size_bytes"]))
        out.append(
            [
                r["collective"],
                f"{r['size_bytes']:,}",
                r["variant"],
                f"{n['time_us']['median']:.1f}" if n else "-",
                f"{r['time_us']['median']:.1f}",
                f"{r['busbw_gbps']:.3f}",
                f"{r['overhead_x']:.2f}",
                r["wrong"],
            ]
        )
    d.table(
        [
            "collective",
            "size [bytes]",
            "suite",
            "native [us]",
            "secure [us]",
            "busbw [GB/s]",
            "overhead [x]",
            "#wrong",
        ],
        out,
    )
    w = bench.get("workload")
    if isinstance(w, dict):
        d.p(
            f"Workload: {w.get('name', '?')}, {w.get('parameters', '?')} parameters, "
            f"{len(w.get('buckets') or [])} DDP buckets."
        )


def _threat_model(d: Doc, rv: Review) -> None:
    """The threat model in brief."""
    d.h(1, "Threat model in brief")
    d.items(
        [
            "Attacker: on-path on the links between nodes; can read, modify, inject, replay, reorder, drop, "
            "truncate and redirect frames.",
            "Guaranteed with aes-256-gcm and chacha20-poly1305: confidentiality of the payload, integrity, "
            "replay and reorder detection, binding of each frame to its sender, receiver, operation, job "
            "and communicator. aes-256-gmac gives the same integrity without confidentiality.",
            "Drops surface as TransportTimeout naming the rank to blame after the configured deadline; "
            "no wait blocks forever.",
            "Out of scope: a compromised rank or host (it holds the keys), side channels, and traffic "
            "analysis. Sizes and timing leak: a frame is the payload plus 16 bytes and the message pattern "
            "reveals the collective, algorithm and message sizes; nothing is padded.",
            "Full text: docs/threat-model.md in the seccomm source tree.",
        ]
    )


def _provenance(d: Doc, rv: Review) -> None:
    """How this report was produced and how to reproduce it."""
    cfg = rv.cfg
    d.h(1, "How this report was produced")
    d.items(
        [
            f"Command: {cfg['command']}",
            "Live, at report time: the attacker harness (seccomm.compliance.attack.run_classes), the "
            "recording-transport wire check (seccomm.compliance.evidence.wire_check) and the packet capture "
            "(seccomm.compliance.capture.capture_check), on the ranks and software listed above.",
            "From the code in use: the suite table, FIPS status and usage limits come from the suite "
            "registry (seccomm.suites); the nonce layout and field limits from seccomm.framing; the key "
            "schedule from seccomm.keys.",
            "From the file given with --bench: the measured overhead, with that file's own machine, commit "
            "and time.",
            "The run exits with status 1 when any evidence check fails; the report is still written.",
            "Reproduce: the same command on the same commit; compare the tables (timings differ, counts "
            "must not).",
        ]
    )


SECTIONS = (
    _header,
    _summary,
    _configuration,
    _suites,
    _key_derivation,
    _nonces,
    _usage_limits,
    _software,
    _attack_evidence,
    _wire_evidence,
    _packet_capture,
    _overhead,
    _threat_model,
    _provenance,
)


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
            and isinstance(r.get("wrong"), int)
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
def gather_evidence(comm, trials: int, seed: int, log, suite: str = "aes-256-gcm") -> dict:
    """Collective: the attacker harness and the wire check on ``comm``; the result on rank 0."""
    from ..bench.machine import machine_info
    from .attack import CLASSES, run_classes
    from .evidence import wire_check

    attacks = run_classes(comm, CLASSES, trials, seed, log=log, suite=suite)
    if comm.Get_rank() == 0:
        log("# wire check: recording transport, 4 suites")
    wire = wire_check(comm)
    return {"attacks": attacks, "wire": wire, "world_size": comm.Get_size(), "machine": machine_info()}
