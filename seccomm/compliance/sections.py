"""The compliance report's sections that state facts: the header, the summary of every verdict,
the configuration under review, the suites with their algorithm and module status, the key
schedule, the nonce (how it is built, where, and why it cannot repeat), usage limits, the GPU
path, the software in use, the threat model and how the report was produced.  Each section is one
function ``(doc, review)``; :data:`seccomm.compliance.report.SECTIONS` lists them in order.
"""

from __future__ import annotations

from ..framing import AAD_BYTES, MAX_CHUNKS_PER_HOP, MAX_OPS_PER_EPOCH, MAX_RANKS
from ..suites import KEY_BYTES, NONCE_BYTES, SUITES, TAG_BYTES, TARGET_ADVANTAGE_LOG2, CipherSuite
from .doc import Doc
from .review import CHECKS, Review


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


def _header(d: Doc, rv: Review) -> None:
    """The title table: when, what, where, the command, and the overall verdict."""
    m, cfg = rv.machine, rv.cfg
    overall = "PASS: every check passed" if rv.passed else "FAIL: " + "; ".join(rv.failed)
    d.table(
        ["field", "value"],
        [
            ["generated (UTC)", m["utc"]],
            ["seccomm", m["seccomm"]],
            ["commit", m["git_commit"] or "unknown (not run from a git checkout)"],
            ["host", f"{m['host']} ({m['platform']})"],
            ["command", cfg["command"]],
            ["configuration under review", rv.config.describe()],
            ["overall", overall],
        ],
    )


def _summary(d: Doc, rv: Review) -> None:
    """One row per check (:data:`~seccomm.compliance.report.CHECKS`) with its verdict, and the
    FIPS 140-3 status and the measured overhead as information."""
    from .status import module_validated_claim

    d.h(1, "Summary")
    rows = [[CHECKS[k], _verdict(v), _SUMMARY[k](rv)] for k, v in rv.verdicts.items()]
    suite = rv.suite
    fips = (
        module_validated_claim(rv.module)
        if suite.authenticated and suite.fips_140_3.startswith("approved")
        else suite.fips_140_3.split(" (")[0]
    )
    rows.append(["FIPS 140-3 status (information)", fips, _fips_detail(rv)])
    rows.append(
        [
            "measured overhead",
            "given" if rv.bench else "not given",
            rv.bench_name or "pass --bench RESULTS.json (from seccomm bench --json) to include it",
        ]
    )
    d.table(["check", "result", "detail"], rows)


def _fips_detail(rv: Review) -> str:
    from .status import suite_status

    return (
        f"{rv.suite.name}: {suite_status(rv.suite, rv.module)}. The nonce is built outside any module "
        "(FIPS 140-3 IG C.H not met); the GPU path runs seccomm's own unvalidated kernels."
    )


def _suite_detail(rv: Review) -> str:
    suite = rv.suite
    if rv.verdicts["suite"]:
        return f"{suite.name}: encrypts and authenticates every frame"
    return f"{suite.name}: " + (
        "payload travels in the clear (integrity only)" if suite.authenticated else "no protection at all"
    )


def _policy_detail(rv: Review) -> str:
    if rv.config.encrypt == "all":
        return "encrypt=all: every hop is sealed with the suite under review"
    return (
        "encrypt=inter-node: hops between ranks that share a node travel in the clear (suite none), "
        "by configuration; only hops between nodes are protected"
    )


def _rotation_detail(rv: Review) -> str:
    head = f"rotation point {rv.limit:,} frames per key; limit {rv.limit_max:,} at {rv.chunk:,}-byte frames"
    rot = rv.rotation
    return f"{head}; {rot['detail']}" if rot else f"{head}; the rotation check did not run"


def _attacks_detail(rv: Review) -> str:
    attacks = rv.attacks
    return (
        f"{sum(r['trials'] for r in attacks)} attacks in {len(attacks)} classes (ranks 0-1; redirect, "
        f"the setup, record, link and insider classes on all {rv.ev['world_size']} ranks): "
        f"{sum(r['detected'] for r in attacks)} detected, "
        f"{sum(r['silently_accepted'] for r in attacks)} silently accepted"
    )


def _wire_detail(rv: Review) -> str:
    if not rv.wire:
        return rv.ev.get("wire_error") or "not run"
    return "; ".join(
        f"{r['suite']}: {r['hits']:,} plaintext windows (expected {r['expect']})" for r in rv.wire
    )


def _capture_detail(rv: Review) -> str:
    cap = rv.cap
    if not cap or cap.get("rows") is None:
        return (cap or {}).get("reason", "")
    return "; ".join(
        f"{r['suite']}: {r['hits']:,} windows in {r['captured_bytes']:,} captured bytes" for r in cap["rows"]
    )


def _config_detail(rv: Review) -> str:
    from .config import evidence_deviations

    undeclared, declared = evidence_deviations(rv.config, rv.ev)
    if undeclared:
        return "ran with other settings: " + "; ".join(undeclared)
    return f"every SecureComm of the evidence: {rv.config.describe()}" + (
        "; declared exceptions: " + "; ".join(declared) if declared else ""
    )


_SUMMARY = {
    "suite": _suite_detail,
    "policy": _policy_detail,
    "rotation": _rotation_detail,
    "attacks": _attacks_detail,
    "wire": _wire_detail,
    "capture": _capture_detail,
    "config": _config_detail,
}


def _configuration(d: Doc, rv: Review) -> None:
    """The settings under review: suite, key exchange, encrypt policy, frame size, rotation
    point, field limits."""
    suite, chunk, limit, config = rv.suite, rv.chunk, rv.limit, rv.config
    d.h(1, "Configuration under review")
    d.p(
        "Every evidence run of this report (attacker harness, wire check, packet capture, rotation "
        "check) constructs its SecureComm with these settings, and each row records what it ran "
        "with; the summary checks them."
    )
    d.table(
        ["setting", "value"],
        [
            ["cipher suite", f"{suite.name}: {_protection(suite)}"],
            ["identity", config.identity],
            [
                "key exchange",
                config.key_exchange if config.identity == "psk" else "X25519, signed by each rank",
            ],
            ["encrypt policy", _policy_detail(rv)],
            ["frame payload (chunk_bytes)", _mib(chunk)],
            [
                "rotation point",
                f"a new epoch key before any key seals more than {limit:,} frames"
                + (
                    " (set with --rotate-after-frames)"
                    if config.rotate_after_frames
                    else " (the suite's usage limit at this chunk size)"
                ),
            ],
            ["operations per epoch key", f"at most {MAX_OPS_PER_EPOCH:,} (32-bit op index in the nonce)"],
            ["world size", f"at most {MAX_RANKS:,} ranks (16-bit step field)"],
            ["chunks per hop", f"at most {MAX_CHUNKS_PER_HOP:,} (24-bit chunk field)"],
        ],
    )


def _secret_said(source: str) -> str:
    """What the trust model says of the job secret, from a SecureComm's ``secret_source``."""
    if source.startswith("none"):
        return "none set: the keys come from the signed X25519 exchange alone"
    where = "the one the report's ranks were given" if source == "argument" else f"from {source}"
    return f"{where}, mixed into every key"


def _trust_model(d: Doc, rv: Review) -> None:
    """The trust model in force: who holds which key, every rank's certificate (x509), and what
    the insider classes of the attacker harness gave."""
    from .insider import INSIDER_CLASSES, NOT_PROTECTED

    trust = rv.ev.get("trust") or {
        "identity": rv.config.identity,
        "secret_source": "not recorded",
        "ranks": [],
    }
    x509 = trust["identity"] == "x509"
    d.h(1, "Trust model")
    if x509:
        d.p(
            "Identity x509: each rank is known by its X.509 certificate (SECCOMM_CERT_FILE, its private "
            "key in SECCOMM_KEY_FILE, the trusted CAs in SECCOMM_CA_FILE), verified on every rank with "
            "the X.509 verification of the cryptography package (a path to a trusted CA, validity at "
            "setup, basic constraints and key usage, a leaf that may sign and names a host). The host "
            "of a rank is the name in its certificate, so encrypt=inter-node counts two ranks as one "
            "node only when their certificates name one host. Job secret: "
            f"{_secret_said(trust['secret_source'])}."
        )
    else:
        d.p(
            f"Identity psk: a rank is whoever holds the job secret ({trust['secret_source']}). Under "
            "key exchange psk every rank can derive every key of every pair; under psk-dhe the pairwise "
            "keys come from X25519 shares that only the job secret authenticates. A rank of the job (an "
            "insider) can therefore write group frames, argument records, notices and setup messages in "
            "another rank's name: the insider classes below are not protected, and not run."
        )
    mixed = not x509 or trust["secret_source"] != "none (identity x509, no PSK mixed in)"
    pair = (
        "the two ranks of the pair: from their ephemeral X25519 shares, which their signatures authenticate"
        if x509
        else "every rank (psk); under psk-dhe the two ranks, and any rank that replaced their shares at setup"
    )
    group = (
        "every rank; on 3 or more ranks each group frame is also checked against a MAC its origin sent "
        "each receiver under their pair's key"
        if x509
        else "every rank; no rank can tell which rank sealed a group frame"
    )
    holders = [
        [
            "a rank's certificate private key",
            "that rank only; it signs the rank's setup transcript" if x509 else "none",
        ],
        [
            "direction keys, control keys of a pair (records, refusals, receipts, notices), origin MAC keys",
            pair,
        ],
        [
            "group key (frames sealed once and forwarded: allgather, bcast, allreduce's allgather phase)",
            group,
        ],
        ["job secret", "every rank (mixed into every key)" if mixed else "none set"],
    ]
    d.table(["key", "held by"], holders)
    if trust["ranks"]:
        d.table(
            ["rank", "host", "subject", "issuer", "SHA-256 fingerprint", "valid from", "valid until"],
            [
                [
                    r["rank"],
                    r["host"],
                    r["subject"],
                    r["issuer"],
                    r["fingerprint"],
                    r["not_before"],
                    r["not_after"],
                ]
                for r in trust["ranks"]
            ],
        )
    rows = [r for r in rv.attacks if r["class"] in INSIDER_CLASSES]
    if rows:
        d.table(
            ["insider class", "trials", "detected", "silently accepted", "expected"],
            [[r["class"], r["trials"], r["detected"], r["silently_accepted"], r["expected"]] for r in rows],
        )
        if any(r["expected"] == NOT_PROTECTED for r in rows):
            d.p(
                f"{NOT_PROTECTED}: under identity psk every rank holds the secret these classes need; "
                "seccomm report --identity x509 runs them."
            )


def _suites(d: Doc, rv: Review) -> None:
    """Every suite: protection, FIPS 140-3 status of the algorithm and of the module, key/nonce/tag
    sizes, usage limit."""
    from .status import SETUP_ALGORITHMS, module_status, suite_status

    chunk, mod = rv.chunk, rv.module
    d.h(1, "Cipher suites and FIPS 140-3 status")
    d.p(
        "All CPU cryptography is done by the Python 'cryptography' package on the OpenSSL it links; "
        "seccomm implements none of these primitives itself on the CPU. FIPS 140-3 validates "
        "cryptographic modules, not algorithms: an approved algorithm is covered only when it runs "
        "inside a validated module. Module in this run (read at report time): "
        f"{module_status(mod)}. Each row states the algorithm status, then the module status."
    )
    rows = []
    for s in SUITES.values():
        keyed = s.name != "none"
        rows.append(
            [
                s.name,
                "yes" if s.confidential else "no",
                "yes" if s.authenticated else "no",
                suite_status(s, mod),
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
            "FIPS 140-3 status (algorithm; module)",
            "key [bits]",
            "nonce [bits]",
            "tag [bits]",
            f"frames per key at {chunk:,} B",
            "limit source",
        ],
        rows,
    )
    d.p("The setup's algorithms run in the same module:")
    d.table(["algorithm", "FIPS 140-3 algorithm status"], [list(r) for r in SETUP_ALGORITHMS])


def _key_derivation(d: Doc, rv: Review) -> None:
    """The HKDF key schedule, one row per key."""
    d.h(1, "Key derivation")
    d.p(
        "Every key is 32 bytes from HKDF with SHA-256 (RFC 5869, via cryptography). The job id is "
        "the first 16 bytes of SHA-256('seccomm job ' || label) where the label is SecureComm's "
        "job_id argument, else SECCOMM_JOB_ID or SLURM_JOB_ID. Each SecureComm runs a setup "
        "transcript (seccomm.handshake): every rank sends a hello with a fresh 32-byte nonce, its "
        "settings, its host and (psk-dhe) its X25519 share, MACed under the hello key and binding "
        "its rank; th is SHA-256 of all hellos in rank order. Every key but the hello MAC key uses "
        "salt = SHA-256('seccomm/1 salt' || job id || every rank's nonce) (RFC 5869 section 3.1: "
        "nonces exchanged and authenticated) and ends its info with th, so no rank alone and no "
        "attacker can bring back an earlier session's keys. The hello MAC key has neither: it is the "
        "same for every session of a job (and of any job with the same secret and job label), so an "
        "earlier setup's hellos and failure reports still pass their MAC; it seals nothing, so no "
        "nonce is reused. The communicator id in every AAD is th[:16]. "
        "Every rank's finished message carries an HMAC over th and its rank under the finished key; "
        "each rank checks all of them before the first frame."
    )
    d.table(
        ["key", "ikm", "salt", "info"],
        [
            ["hello MAC (setup)", "job secret", "job id", "'seccomm/1 hello'"],
            [
                "direction key src->dst, epoch e",
                "job secret (|| X25519(src, dst) with psk-dhe)",
                "session salt",
                "'seccomm/1 dir|' || suite || '|' || e || src || dst || '|' || th",
            ],
            [
                "group key, epoch e (encrypt-once forwarding)",
                "job secret (|| group secret with psk-dhe)",
                "session salt",
                "'seccomm/1 group|' || suite || '|' || e || '|' || th",
            ],
            [
                "finished MAC (setup)",
                "job secret (|| group secret with psk-dhe)",
                "session salt",
                "'seccomm/1 finished|' || suite || '||' || th",
            ],
            [
                "psk-dhe group-secret wrap (rank 0 to rank j, AES-256-GCM)",
                "job secret || X25519(0, j)",
                "session salt",
                "'seccomm/1 group-wrap|' || suite || '|' || j || '|' || th",
            ],
            [
                "control messages of ranks a < b (argument records, receipts, give-up/abort notices; "
                "HMAC-SHA256 over a label, a, b and the message: the lower rank's messages carry the "
                "first 16 bytes, the higher's the last)",
                "job secret (|| X25519(a, b) with psk-dhe)",
                "session salt",
                "'seccomm/1 control|' || suite || '|' || a || b || '|' || th",
            ],
        ],
    )
    d.items(
        [
            "Job secret: from the psk argument, a file named by SECCOMM_PSK_FILE (opened with O_NOFOLLOW "
            "and refused, after fstat of the open descriptor, unless it is a regular file of this user "
            "with no group/other permission bits) or SECCOMM_PSK (hex); at least 32 bytes, and refused "
            "when a conservative entropy estimate is below 128 bits (repeats, counters, short text, also "
            "wrapped in a few other bytes: seccomm.entropy), since an observer of the setup can test "
            "guesses of it offline. Local runs write a fresh random secret to a 0600 file per run and "
            "delete it afterwards; a secret sent in the clear is used only by benchmarks, only with "
            "SECCOMM_INSECURE_BENCH_SECRET=1.",
            "psk-dhe: each rank contributes an ephemeral X25519 share (RFC 7748) in its hello, "
            "authenticated by the hello MAC and every finished MAC; the private keys are dropped after "
            "the exchange (forward secrecy against a later PSK leak). In psk mode any rank of the job can "
            "derive every key; psk-dhe shares are authenticated only by the job secret.",
            "Key material never appears in logs, exceptions or this report; errors name ranks, "
            "operations, sequence numbers and chunk indices only.",
        ]
    )


def _nonces(d: Doc, rv: Review) -> None:
    """The nonce layout, where it is generated, and why a nonce cannot repeat under one key."""
    from .status import nonce_location

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
    d.p(nonce_location())
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
            "counts. A frame replayed, reordered or from another job fails its tag, and so does a "
            "direction-key frame redirected to another rank; a group-key frame (allgather, bcast, the "
            "allgather phase of allreduce) names its origin but no receiver, since every rank is meant "
            "to read it: delivered to another rank it carries data that rank receives anyway.",
            "Tested: tests/world/test_epochs.py records every (key, nonce) pair the Python path seals "
            "on every rank across collectives and rotations (1 to 5 ranks in process, 2 and 3 real "
            "ranks) and finds no repeat. The compiled two-rank swap "
            "seals in C outside that record; its nonce and AAD bytes are checked equal to the Python "
            "path's for the same op index, epoch and op number (tests/unit/test_express.py).",
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


def _gpu(d: Doc, rv: Review) -> None:
    """The GPU path: seccomm's own kernels, unvalidated, with secret-indexed tables."""
    from .status import gpu_path

    d.h(1, "GPU path: seccomm's own kernels")
    d.items(gpu_path())


def _fips_state(mod: dict) -> str:
    state = mod.get("fips_provider")
    return "active" if state is True else "not active" if state is False else "unknown"


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
            ["OpenSSL FIPS provider", _fips_state(rv.module)],
            ["cryptography", m["cryptography"]],
            ["MPI library", m["mpi_library"]],
            ["mpi4py", m["mpi4py"]],
            ["numpy", m["numpy"]],
            ["seccomm", f"{m['seccomm']} (commit {m['git_commit'] or 'unknown'})"],
            # (C: MPI calls, framing and the sum; its seals, opens and MACs are cryptography's)
            ["seccomm two-rank small allreduce", m.get("pair_path", "not recorded")],
            [
                "CPU",
                f"{cpu['model']}, {cpu['cores']} cores, AES-NI {'yes' if cpu['aes'] else 'no'}, "
                f"VAES {'yes' if cpu['vaes'] else 'no'}, PCLMULQDQ {'yes' if cpu['pclmulqdq'] else 'no'}",
            ],
        ],
    )


def _threat_model(d: Doc, rv: Review) -> None:
    """The threat model in brief."""
    d.h(1, "Threat model in brief")
    d.items(
        [
            "Attacker: on-path on the links between nodes; can read, modify, inject, replay, reorder, drop, "
            "truncate and redirect frames.",
            "Guaranteed with aes-256-gcm and chacha20-poly1305: confidentiality of the payload, integrity, "
            "replay and reorder detection, binding of each direction-key frame to its sender, receiver, "
            "operation, job and communicator, and of each group-key frame to its origin, operation, job "
            "and communicator (no receiver: every rank reads it). Argument records, receipts and "
            "give-up notices carry a tag of the pair of sender and receiver. aes-256-gmac gives the "
            "same integrity without confidentiality.",
            "A dropped message surfaces on the rank that waited for it: TransportTimeout naming the "
            "silent peer when nothing more comes from it (at most the deadline, plus a grace period "
            "of min(deadline, 5 s), plus 2.5 s); when a later "
            "frame of the same hop comes, it lands in the dropped frame's place and fails its tag "
            "(AuthenticationError naming that peer). Where a drop leaves two ranks waiting on each "
            "other (a dropped receipt), or a frame is held past its receiver's deadline while its "
            "sender goes on, every rank names the link between them (TransportTimeout with "
            "link = (a, b)), never itself. On 3 or more ranks records and frames share one MPI tag: "
            "a dropped argument record lets the sender's next frame land in the record's receive "
            "(FrameError, peer 'any'). No wait blocks forever.",
            "Out of scope: a compromised rank or host (it holds the keys), side channels, and traffic "
            "analysis. Sizes and timing leak: a frame is the payload plus 16 bytes and the message pattern "
            "reveals the collective, algorithm and message sizes; nothing is padded.",
            "A side channel to weigh: the GPU kernels' table lookups depend on secrets (cache/bank "
            "timing where a GPU is shared; see the GPU path above).",
            "encrypt=inter-node trusts every node's own links: hops between ranks of one node carry "
            "plaintext.",
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
            "recording-transport wire check (seccomm.compliance.evidence.wire_check), the rotation check "
            "(seccomm.compliance.rotation.rotation_check) and the packet capture "
            "(seccomm.compliance.capture.capture_check), on the ranks and software listed above, each "
            f"under the configuration under review ({rv.config.describe()}); each row records the "
            "settings it ran with.",
            "Read at report time: the OpenSSL version and whether a FIPS provider is active "
            "(seccomm.compliance.status.crypto_module).",
            "From the code in use: the suite table, algorithm status and usage limits come from the suite "
            "registry (seccomm.suites); the nonce layout and field limits from seccomm.framing; the key "
            "schedule from seccomm.keys.",
            "From the file given with --bench: the measured overhead, with that file's own machine, commit "
            "and time.",
            "The run exits with status 1 when any check of the summary fails; the report is still written.",
            "Reproduce: the same command on the same commit; compare the tables (timings differ, counts "
            "must not).",
        ]
    )
