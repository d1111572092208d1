"""``seccomm report --compliance``: a file a security or compliance reviewer can read and keep.

It states what protects the traffic (suites and their FIPS 140-3 status, key sizes, the KDF and
its parameters, the nonce construction and why it cannot repeat, the usage limits per key and
the configured rotation point, the library versions in use) and attaches evidence produced at
report time on real ranks: the attacker harness (:mod:`seccomm.compliance.attack`), the wire check of the
recording transport, and, where the process may open a packet socket, the same check on a packet
capture of ranks talking TCP over loopback (:mod:`seccomm.compliance.evidence`).  Given a ``seccomm bench
--json`` result, it adds the measured overhead.

The report is one document model rendered as Markdown or as a single self-contained HTML file
(inline CSS, no scripts, no external resources).
"""

from __future__ import annotations

import html
import json
import os
import shlex
import sys
import tempfile

from ..framing import (AAD_BYTES, MAX_CHUNKS_PER_HOP, MAX_OPS_PER_EPOCH, MAX_RANKS)
from ..suites import KEY_BYTES, NONCE_BYTES, SUITES, TAG_BYTES, TARGET_ADVANTAGE_LOG2

DEFAULT_CHUNK_BYTES = 1 << 20


# -- document model ------------------------------------------------------------------------------
class Doc:
    """Blocks: ``("h", level, text)``, ``("p", text)``, ``("list", [text])``,
    ``("table", headers, rows)``, ``("code", text)``.  Text is plain; renderers escape it."""

    def __init__(self, title: str):
        self.title, self.blocks = title, []

    def h(self, level, text):
        self.blocks.append(("h", level, text))

    def p(self, text):
        self.blocks.append(("p", text))

    def items(self, items):
        self.blocks.append(("list", list(items)))

    def table(self, headers, rows):
        self.blocks.append(("table", list(headers), [[str(c) for c in r] for r in rows]))

    def code(self, text):
        self.blocks.append(("code", text))


def to_markdown(doc: Doc) -> str:
    out = [f"# {doc.title}", ""]
    for b in doc.blocks:
        if b[0] == "h":
            out += ["#" * (b[1] + 1) + " " + b[2], ""]
        elif b[0] == "p":
            out += [b[1], ""]
        elif b[0] == "list":
            out += [f"- {i}" for i in b[1]] + [""]
        elif b[0] == "code":
            out += ["```", b[1], "```", ""]
        else:
            cell = lambda c: c.replace("|", "\\|").replace("\n", " ")  # noqa: E731
            out.append("| " + " | ".join(cell(h) for h in b[1]) + " |")
            out.append("|" + "---|" * len(b[1]))
            out += ["| " + " | ".join(cell(c) for c in r) + " |" for r in b[2]]
            out.append("")
    return "\n".join(out).rstrip() + "\n"


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:70rem;margin:2rem auto;
padding:0 1rem;color:#1b1f24;line-height:1.45}
h1{border-bottom:2px solid #1b1f24;padding-bottom:.3rem}h2{margin-top:2rem;border-bottom:1px solid #ccd}
table{border-collapse:collapse;margin:.6rem 0;font-size:.92rem}
th,td{border:1px solid #bbc;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#eef}code,pre{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.88rem}
pre{background:#f4f4f8;padding:.6rem;overflow-x:auto}
td.pass{color:#05631f;font-weight:600}td.fail{color:#a40e0e;font-weight:700}
"""


def to_html(doc: Doc) -> str:
    e = html.escape
    out = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
           f"<title>{e(doc.title)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
           f"<h1>{e(doc.title)}</h1>"]
    for b in doc.blocks:
        if b[0] == "h":
            out.append(f"<h{b[1] + 1}>{e(b[2])}</h{b[1] + 1}>")
        elif b[0] == "p":
            out.append(f"<p>{e(b[1])}</p>")
        elif b[0] == "list":
            out.append("<ul>" + "".join(f"<li>{e(i)}</li>" for i in b[1]) + "</ul>")
        elif b[0] == "code":
            out.append(f"<pre>{e(b[1])}</pre>")
        else:
            def td(c):
                cls = ' class="pass"' if c.startswith("PASS") else ' class="fail"' if c.startswith("FAIL") else ""
                return f"<td{cls}>{e(c)}</td>"
            out.append("<table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in b[1]) + "</tr></thead><tbody>"
                       + "".join("<tr>" + "".join(td(c) for c in r) + "</tr>" for r in b[2])
                       + "</tbody></table>")
    out += ["</body>", "</html>"]
    return "\n".join(out) + "\n"


# -- facts -----------------------------------------------------------------------------------------
def fips_mode() -> str:
    """Whether the OpenSSL behind ``cryptography`` runs its FIPS provider."""
    try:
        from cryptography.hazmat.bindings._rust import openssl as rust_openssl

        return "enabled" if rust_openssl.is_fips_enabled() else "not enabled"
    except Exception:  # noqa: BLE001 - private API moved: say so rather than guess
        return "unknown"


def _verdict(ok: bool | None) -> str:
    return "not run" if ok is None else "PASS" if ok else "FAIL"


def _mib(n: int) -> str:
    return f"{n:,} bytes" + (f" ({n / (1 << 20):g} MiB)" if n >= 1 << 20 else f" ({n / 1024:g} KiB)" if n >= 1024 else "")


def build(ev: dict, cfg: dict, bench: dict | None, bench_name: str | None) -> tuple[Doc, bool]:
    """The report for evidence ``ev`` (from :func:`gather_evidence`) and configuration ``cfg``;
    returns ``(doc, all_evidence_passed)``."""
    m = ev["machine"]
    suite = SUITES[cfg["suite"]]
    chunk = cfg["chunk_bytes"]
    limit = cfg["rotate_after_frames"] or suite.usage_limit(chunk, AAD_BYTES)
    attacks, wire, cap = ev["attacks"], ev["wire"], ev.get("capture")
    attack_ok = bool(attacks) and all(r["detected"] == r["trials"] and r["silently_accepted"] == 0
                                      for r in attacks)
    wire_ok = bool(wire) and all(r["ok"] for r in wire)
    cap_ok = None if not cap or cap.get("rows") is None else all(r["ok"] for r in cap["rows"])
    suite_ok = suite.confidential and suite.authenticated
    limit_max = suite.usage_limit(chunk, AAD_BYTES)
    rotation_ok = limit <= limit_max
    passed = attack_ok and wire_ok and cap_ok is not False and suite_ok and rotation_ok
    d = Doc("seccomm compliance report")
    d.table(["field", "value"], [
        ["generated (UTC)", m["utc"]], ["seccomm", m["seccomm"]],
        ["commit", m["git_commit"] or "unknown (not run from a git checkout)"],
        ["host", f"{m['host']} ({m['platform']})"], ["command", cfg["command"]],
        ["overall", "PASS: all evidence checks passed" if passed else "FAIL: see the summary"]])

    d.h(1, "Summary")
    n_att = sum(r["trials"] for r in attacks)
    d.table(["check", "result", "detail"], [
        ["suite under review protects confidentiality and integrity", _verdict(suite_ok),
         f"{suite.name}: " + ("encrypts and authenticates every frame" if suite_ok else
                              "payload travels in the clear (integrity only)" if suite.authenticated else
                              "no protection at all")],
        ["rotation point within the suite's usage limit", _verdict(rotation_ok),
         f"{limit:,} frames per key; limit {limit_max:,} at {chunk:,}-byte frames"],
        ["FIPS 140-3 status of the suite (information)", "approved" if suite.fips_140_3.startswith("approved")
         else "not approved", suite.fips_140_3],
        ["attacker harness (live)", _verdict(attack_ok),
         f"{n_att} attacks in {len(attacks)} classes ({suite.name}; ranks 0-1, redirect on all {ev['world_size']} ranks): "
         f"{sum(r['detected'] for r in attacks)} detected, "
         f"{sum(r['silently_accepted'] for r in attacks)} silently accepted"],
        ["wire evidence, recording transport (live)", _verdict(wire_ok),
         "; ".join(f"{r['suite']}: {r['hits']:,} plaintext windows (expected {r['expect']})" for r in wire)],
        ["wire evidence, packet capture (live)", _verdict(cap_ok),
         cap.get("reason", "") if cap and cap.get("rows") is None else
         "; ".join(f"{r['suite']}: {r['hits']:,} windows in {r['captured_bytes']:,} captured bytes"
                   for r in (cap or {}).get("rows") or [])],
        ["measured overhead", "given" if bench else "not given",
         bench_name or "pass --bench RESULTS.json (from seccomm bench --json) to include it"]])

    d.h(1, "Configuration under review")
    d.table(["setting", "value"], [
        ["cipher suite", f"{suite.name}: {'encrypts and authenticates' if suite.confidential else 'authenticates only, payload in the clear' if suite.authenticated else 'no protection'}"],
        ["key exchange", cfg["key_exchange"]],
        ["frame payload (chunk_bytes)", _mib(chunk)],
        ["rotation point", f"a new epoch key before any key seals more than {limit:,} frames"
                           + (" (set with --rotate-after-frames)" if cfg["rotate_after_frames"] else
                              " (the suite's usage limit at this chunk size)")],
        ["operations per epoch key", f"at most {MAX_OPS_PER_EPOCH:,} (32-bit op index in the nonce)"],
        ["world size", f"at most {MAX_RANKS:,} ranks (16-bit step field)"],
        ["chunks per hop", f"at most {MAX_CHUNKS_PER_HOP:,} (24-bit chunk field)"]])

    d.h(1, "Cipher suites and FIPS 140-3 status")
    d.p("All CPU cryptography is done by the Python 'cryptography' package on OpenSSL; seccomm "
        "implements none of these primitives itself on the CPU. FIPS 140-3 applies to the "
        "cryptographic module: an approved algorithm is FIPS 140-3 compliant only when the "
        f"OpenSSL in use runs a validated FIPS provider. FIPS provider in this run: {fips_mode()}.")
    rows = []
    for s in SUITES.values():
        keyed = s.name != "none"
        rows.append([s.name, "yes" if s.confidential else "no", "yes" if s.authenticated else "no",
                     s.fips_140_3, f"{KEY_BYTES * 8}" if keyed else "-", f"{NONCE_BYTES * 8}" if keyed else "-",
                     f"{TAG_BYTES * 8}" if s.authenticated else "-",
                     f"{s.usage_limit(chunk, AAD_BYTES):,}" if keyed else "-", s.limit_source])
    d.table(["suite", "confidentiality", "integrity", "FIPS 140-3", "key [bits]", "nonce [bits]", "tag [bits]",
             f"frames per key at {chunk:,} B", "limit source"], rows)

    d.h(1, "Key derivation")
    d.p("Every key is 32 bytes from HKDF with SHA-256 (RFC 5869, via cryptography): "
        "HKDF(SHA-256, ikm, salt = job id || communicator id, info). The job id is the first 16 bytes "
        "of SHA-256('seccomm job ' || label) where the label is SECCOMM_JOB_ID or SLURM_JOB_ID; the "
        "communicator id is 16 random bytes drawn by rank 0 for each communicator and bound into "
        "the salt and every AAD.")
    d.table(["key", "ikm", "info"], [
        ["direction key src->dst, epoch e", "job secret (|| X25519(src, dst) with psk-dhe)",
         "'seccomm/1 dir|' || suite || '|' || e || src || dst (32-bit big-endian fields)"],
        ["group key, epoch e (encrypt-once forwarding)", "job secret (|| group secret with psk-dhe)",
         "'seccomm/1 group|' || suite || '|' || e"],
        ["psk-dhe group-secret wrap (rank 0 to rank j, AES-256-GCM)", "job secret || X25519(0, j)",
         "'seccomm/1 group-wrap'"],
        ["key confirmation (setup)", "job secret", "'seccomm/1 confirm': HMAC-SHA256 over every rank's settings"],
        ["psk-dhe share authentication", "job secret", "'seccomm/1 dhe-auth': HMAC-SHA256 over each X25519 share"]])
    d.items([
        "Job secret: at least 32 bytes, from the psk argument, a file named by SECCOMM_PSK_FILE (refused "
        "when group or others may read or write it) or SECCOMM_PSK (hex). Local runs write a fresh "
        "secret to a 0600 file per run and delete it afterwards.",
        "psk-dhe: each rank contributes an ephemeral X25519 share (RFC 7748) authenticated with the "
        "PSK; the private keys are dropped after the exchange (forward secrecy against a later PSK leak).",
        "Key material never appears in logs, exceptions or this report; errors name ranks, "
        "operations, sequence numbers and chunk indices only."])

    d.h(1, "Nonce construction: why a nonce cannot repeat under one key")
    d.p("Deterministic 96-bit nonces (NIST SP 800-38D section 8.2.1), big-endian fields, built by "
        "both ends from what they already know; nothing but the frame (ciphertext || 16-byte tag) "
        "crosses the wire:")
    d.table(["bits", "field"], [["32", "epoch-local operation index"], ["16", "step of the algorithm"],
                                ["24", "chunk index within the hop"], ["24", "sealing rank (or origin rank)"]])
    d.items([
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
        "ranks across rotations and finds no repeat."])

    d.h(1, "Usage limits per key and rotation")
    d.p(f"Limits follow CFRG draft-irtf-cfrg-aead-limits with a target advantage p = 2^{TARGET_ADVANTAGE_LOG2}: "
        "for AES-GCM, q <= (p^(1/2) * 2^64.5 - 1) / (L + 1) frames per key, with L the 16-byte blocks "
        "per frame including the AAD, capped at 2^32 (NIST SP 800-38D section 8.3); ChaCha20-Poly1305 "
        "has no confidentiality limit below 2^96 nonces (capped at 2^48). Rotation is deterministic: "
        "before each operation every rank computes the same upper bound of frames it may seal under "
        "one key and moves to the next epoch when the bound would pass the limit; no message is needed.")
    sizes = sorted({64 << 10, 1 << 20, 16 << 20, chunk})
    d.table(["suite"] + [f"frames per key at {s:,} B" for s in sizes],
            [[s.name] + [f"{s.usage_limit(c, AAD_BYTES):,}" for c in sizes]
             for s in SUITES.values() if s.name != "none"])
    d.p(f"Configured rotation point: {limit:,} frames per key ({suite.name}, {chunk:,}-byte frames).")

    d.h(1, "Software in use")
    cpu = m["cpu"]
    d.table(["component", "version"], [
        ["Python", m["python"]], ["OpenSSL (behind cryptography)", m["openssl"]],
        ["OpenSSL FIPS provider", fips_mode()], ["cryptography", m["cryptography"]],
        ["MPI library", m["mpi_library"]], ["mpi4py", m["mpi4py"]], ["numpy", m["numpy"]],
        ["seccomm", f"{m['seccomm']} (commit {m['git_commit'] or 'unknown'})"],
        ["CPU", f"{cpu['model']}, {cpu['cores']} cores, AES-NI {'yes' if cpu['aes'] else 'no'}, "
                f"VAES {'yes' if cpu['vaes'] else 'no'}, PCLMULQDQ {'yes' if cpu['pclmulqdq'] else 'no'}"]])

    d.h(1, "Evidence: attacker harness (run for this report)")
    d.p(f"An on-path attacker transport sits between SecureComm and MPI on real ranks ({suite.name}, "
        f"{cfg['trials']} trials per class, seed {cfg['seed']}; every class runs on ranks 0 and 1 except "
        f"redirect, which needs a rank sealing for two peers and runs on all {ev['world_size']} ranks; the "
        "harness picks its own chunk sizes and algorithms per class) and alters what one rank "
        "puts on the wire. Detected: the receiving rank raised AuthenticationError naming the attacking "
        "peer and the operation (TransportTimeout naming it for a drop). Silently accepted: any rank "
        "returned a value different from the honest result. Equivalent command: "
        f"seccomm attack --np {ev['world_size']} --trials {cfg['trials']} --seed {cfg['seed']} --suite {suite.name}")
    d.table(["attack class", "trials", "detected", "silently accepted", "result", "example error"],
            [[r["class"], r["trials"], r["detected"], r["silently_accepted"],
              _verdict(r["detected"] == r["trials"] and r["silently_accepted"] == 0), r["example"][:160]]
             for r in attacks])

    d.h(1, "Evidence: no plaintext on the wire (run for this report)")
    d.p("A recording transport keeps a copy of every buffer each rank hands to MPI (frames and setup "
        "messages) while allreduce (ring and recursive doubling), reduce-scatter, allgather and "
        "broadcast run on random float32 gradients. Every 16-byte window of every rank's inputs and of "
        "every result, at every byte offset, is searched for at every offset of the recording; each "
        "candidate is confirmed byte for byte. The encrypting suites must show none; aes-256-gmac and "
        "none must show them, which proves the check can fail.")
    d.table(["suite", "bytes on the wire (all ranks)", "plaintext windows searched (per rank)",
             "windows found", "expected", "result"],
            [[r["suite"], f"{r['wire_bytes']:,}", f"{r['plaintext_windows']:,}", f"{r['hits']:,}",
              r["expect"], _verdict(r["ok"])] for r in wire])
    d.h(2, "Packet capture")
    if cap and cap.get("rows") is not None:
        d.p("The same search on every packet captured on the loopback interface (AF_PACKET socket) while "
            f"{cap['nranks']} local ranks ran allreduce and allgather over TCP "
            "(MPIR_CVAR_NOLOCAL=1: no shared memory, as between nodes). The ranks also save every frame "
            "they handed to MPI, and each must be found in the capture: a capture that missed traffic "
            "counts as FAIL."
            + (f" pcap files: {cap['pcap_dir']}" if cap.get("pcap_dir") else ""))
        d.table(["suite", "packets", "captured bytes", "frames found / sent", "plaintext windows found",
                 "expected", "result"],
                [[r["suite"], r["packets"], f"{r['captured_bytes']:,}", f"{r['frames_found']} / {r['frames']}",
                  f"{r['hits']:,}", r["expect"], _verdict(r["ok"])] for r in cap["rows"]])
    else:
        d.p(f"Not run: {(cap or {}).get('reason', 'not requested')}.")

    d.h(1, "Measured overhead")
    if bench:
        _bench_section(d, bench, bench_name)
    else:
        d.p("No benchmark result given. Run seccomm bench --json RESULTS.json on the target system and "
            "pass --bench RESULTS.json.")

    d.h(1, "Threat model in brief")
    d.items([
        "Attacker: on-path on the links between nodes; can read, modify, inject, replay, reorder, drop, "
        "truncate and redirect frames.",
        "Guaranteed with aes-256-gcm and chacha20-poly1305: confidentiality of the payload, integrity, "
        "replay and reorder detection, binding of each frame to its sender, receiver, operation, job "
        "and communicator. aes-256-gmac gives the same integrity without confidentiality.",
        "Drops surface as TransportTimeout naming the rank to blame after the configured deadline; no wait "
        "blocks forever.",
        "Out of scope: a compromised rank or host (it holds the keys), side channels, and traffic "
        "analysis. Sizes and timing leak: a frame is the payload plus 16 bytes and the message pattern "
        "reveals the collective, algorithm and message sizes; nothing is padded.",
        "Full text: docs/threat-model.md in the seccomm source tree."])

    d.h(1, "How this report was produced")
    d.items([
        f"Command: {cfg['command']}",
        "Live, at report time: the attacker harness (seccomm.compliance.attack.run_classes), the recording-transport "
        "wire check (seccomm.compliance.evidence.wire_check) and the packet capture (seccomm.compliance.evidence.capture_check), "
        "on the ranks and software listed above.",
        "From the code in use: the suite table, FIPS status and usage limits come from the suite registry "
        "(seccomm.suites); the nonce layout and field limits from seccomm.framing; the key schedule from "
        "seccomm.keys.",
        "From the file given with --bench: the measured overhead, with that file's own machine, commit "
        "and time.",
        "The run exits with status 1 when any evidence check fails; the report is still written.",
        "Reproduce: the same command on the same commit; compare the tables (timings differ, counts must not)."])
    return d, passed


def _bench_section(d: Doc, bench: dict, name: str | None) -> None:
    bm, cfgb = bench.get("machine", {}), bench.get("config", {})
    d.p(f"From {name}: measured {bm.get('utc', '?')} on {bm.get('host', '?')} "
        f"({(bm.get('cpu') or {}).get('model', '?')}), commit {bm.get('git_commit') or '?'}, "
        f"{bench.get('world_size', '?')} ranks. Native MPI and each suite ran interleaved in one run; the "
        "overhead is the suite's median time divided by native MPI's at the same size.")
    rows = bench["rows"]
    native = {(r["collective"], r["size_bytes"]): r for r in rows if r["variant"] == "native"}
    out = []
    for r in rows:
        if r["variant"] == "native":
            continue
        n = native.get((r["collective"], r["size_bytes"]))
        out.append([r["collective"], f"{r['size_bytes']:,}", r["variant"],
                    f"{n['time_us']['median']:.1f}" if n else "-", f"{r['time_us']['median']:.1f}",
                    f"{r['busbw_gbps']:.3f}", f"{r['overhead_x']:.2f}", r["wrong"]])
    d.table(["collective", "size [bytes]", "suite", "native [us]", "secure [us]", "busbw [GB/s]",
             "overhead [x]", "#wrong"], out)
    w = bench.get("workload")
    if isinstance(w, dict):
        d.p(f"Workload: {w.get('name', '?')}, {w.get('parameters', '?')} parameters, "
            f"{len(w.get('buckets') or [])} DDP buckets.")


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
        ok = (isinstance(r, dict) and isinstance(r.get("collective"), str) and isinstance(r.get("variant"), str)
              and isinstance(r.get("size_bytes"), int) and isinstance(r.get("wrong"), int)
              and all(isinstance(r.get(k), num) and not isinstance(r.get(k), bool) for k in ("busbw_gbps", "overhead_x"))
              and isinstance(r.get("time_us"), dict) and isinstance(r["time_us"].get("median"), num))
        if not ok:
            raise ValueError(f"--bench {path}: row {i} is not a seccomm bench row (collective, size_bytes, "
                             f"variant, time_us.median, busbw_gbps, overhead_x, wrong)")
    for key in ("machine", "config"):
        if not isinstance(doc.get(key, {}), dict):
            raise ValueError(f"--bench {path}: '{key}' is not an object")
    return doc


# -- running -------------------------------------------------------------------------------------
def gather_evidence(comm, trials: int, seed: int, log, suite: str = "aes-256-gcm") -> dict:
    """Collective: the attacker harness and the wire check on ``comm``; the result on rank 0."""
    from .attack import CLASSES, run_classes
    from ..bench.machine import machine_info
    from .evidence import wire_check

    attacks = run_classes(comm, CLASSES, trials, seed, log=log, suite=suite)
    if comm.Get_rank() == 0:
        log("# wire check: recording transport, 4 suites")
    wire = wire_check(comm)
    return {"attacks": attacks, "wire": wire, "world_size": comm.Get_size(), "machine": machine_info()}


def main_ranks(args, argv) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if rank == 0 else (lambda s: None)
    ev = gather_evidence(comm, args.trials, args.seed, log, suite=args.suite)
    if rank != 0:
        return 0
    path = os.environ.get("SECCOMM_CAPTURE_RESULT")
    if path:
        with open(path) as f:
            ev["capture"] = json.load(f)
    else:
        ev["capture"] = {"rows": None, "reason": "seccomm report ran under an external launcher; the "
                                                 "packet capture runs only when it starts its own ranks"}
    cfg = {"suite": args.suite, "chunk_bytes": args.chunk_bytes, "rotate_after_frames": args.rotate_after_frames,
           "key_exchange": args.key_exchange, "trials": args.trials, "seed": args.seed,
           "command": os.environ.get("SECCOMM_REPORT_COMMAND") or "seccomm " + shlex.join(argv)}
    bench = load_bench(args.bench) if args.bench else None
    doc, passed = build(ev, cfg, bench, os.path.basename(args.bench) if args.bench else None)
    text = to_html(doc) if args.format == "html" else to_markdown(doc)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
        log(f"# report written to {args.output}: {'PASS' if passed else 'FAIL'}")
    else:
        sys.stdout.write(text)
        sys.stdout.flush()
    return 0 if passed else 1


def _capture(args) -> dict:
    from .evidence import LoopbackCapture, capture_check

    if args.no_capture:
        return {"rows": None, "reason": "--no-capture"}
    try:
        LoopbackCapture().sock.close()
    except (PermissionError, OSError, AttributeError) as e:
        return {"rows": None, "reason": f"no packet socket on this machine ({type(e).__name__}: "
                                        f"needs Linux and root or CAP_NET_RAW)"}
    print("# packet capture on loopback: 2 ranks over TCP, 4 suites", file=sys.stderr, flush=True)
    try:
        rows = capture_check(pcap_dir=args.pcap)
    except (RuntimeError, FileNotFoundError, OSError, ValueError) as e:
        return {"rows": None, "reason": f"capture failed: {e}"}
    return {"rows": rows, "nranks": 2, "pcap_dir": args.pcap}


def _register():
    from ..cli import UsageError, register

    @register("report", "Write a compliance report with live evidence (attacker harness, wire checks).")
    def _report(p):
        p.add_argument("--compliance", action="store_true", help="the compliance report (required)")
        p.add_argument("--format", choices=("md", "html"), default="md", help="md (default) or html")
        p.add_argument("-o", "--output", help="write the report here (default: standard output)")
        p.add_argument("--bench", metavar="RESULTS.json", help="a seccomm bench --json result to include")
        p.add_argument("--np", type=int, default=3, help="local ranks when not under a launcher (default 3)")
        p.add_argument("--trials", type=int, default=200, help="attacker-harness trials per class (default 200)")
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--suite", default="aes-256-gcm", help="the suite under review (default aes-256-gcm)")
        p.add_argument("--chunk-bytes", type=int, default=DEFAULT_CHUNK_BYTES, help="frame payload in bytes")
        p.add_argument("--rotate-after-frames", type=int, default=None, help="configured rotation point")
        p.add_argument("--key-exchange", choices=("psk", "psk-dhe"), default="psk")
        p.add_argument("--no-capture", action="store_true", help="skip the loopback packet capture")
        p.add_argument("--pcap", metavar="DIR", help="also write the captured packets as DIR/<suite>.pcap")
        return _run

    def _run(args, argv):
        from ..launch import relaunch, under_launcher

        if not args.compliance:
            raise UsageError("say which report: --compliance (the only one so far)")
        if args.suite not in SUITES:
            raise UsageError(f"unknown suite {args.suite!r}; allowed: {', '.join(SUITES)}")
        if args.trials < 1 or not 3 <= args.np <= 64:
            raise UsageError("--trials must be >= 1 and --np in 3..64 (the redirect attack needs 3 ranks)")
        if args.seed < 0:
            raise UsageError("--seed must be >= 0")
        if not 16 <= args.chunk_bytes < (1 << 31) - 64:
            raise UsageError("--chunk-bytes must be in [16, 2**31 - 64)")
        if args.rotate_after_frames is not None and args.rotate_after_frames < 1:
            raise UsageError("--rotate-after-frames must be >= 1")
        if args.bench:
            try:
                load_bench(args.bench)
            except ValueError as e:
                raise UsageError(str(e)) from None
        if args.output:
            parent = os.path.dirname(os.path.abspath(args.output))
            if not os.path.isdir(parent):
                raise UsageError(f"--output {args.output}: no such directory {parent}")
            if os.path.isdir(args.output):
                raise UsageError(f"--output {args.output} is a directory; give a file name")
            if not os.access(parent, os.W_OK) or (os.path.exists(args.output) and not os.access(args.output, os.W_OK)):
                raise UsageError(f"--output {args.output}: not writable")
        if under_launcher():
            return main_ranks(args, argv)
        cap = _capture(args)
        fd, path = tempfile.mkstemp(prefix="seccomm-capture-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(cap, f)
        try:
            return relaunch(args.np, argv, extra_env={"SECCOMM_CAPTURE_RESULT": path,
                                                      "SECCOMM_REPORT_COMMAND": "seccomm " + shlex.join(argv)})
        except FileNotFoundError as e:
            raise UsageError(str(e)) from None
        finally:
            os.unlink(path)


_register()
