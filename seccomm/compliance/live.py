"""The compliance report's evidence sections, each from what the ranks ran for this report: the
attacker harness, the wire check, the packet capture, the rotation check, and the measured
overhead of a bench result.  Each section is one function ``(doc, review)``.
"""

from __future__ import annotations

from .config import ReviewConfig, deviations
from .doc import Doc
from .review import Review
from .sections import _verdict


def _ran_with(rv: Review, rec: dict | None, suite: str | None = None) -> str:
    """A row's settings against the configuration: "as configured", its note, or what differs."""
    diffs = deviations(rv.config, rec, suite)
    if not diffs:
        return "as configured"
    return rec["note"] if rec and rec.get("note") else "NOT as configured: " + ", ".join(diffs)


def _attack_evidence(d: Doc, rv: Review) -> None:
    """The attacker harness run for this report, one row per class."""
    attacks, cfg, ev, config = rv.attacks, rv.cfg, rv.ev, rv.config
    d.h(1, "Evidence: attacker harness (run for this report)")
    default = config == ReviewConfig(suite=config.suite)
    again = (
        f"Equivalent command: seccomm attack --np {ev['world_size']} --trials {cfg['trials']} "
        f"--seed {cfg['seed']} --suite {config.suite}"
        if default
        else "seccomm attack runs the same classes with default settings only."
    )
    d.p(
        "An on-path attacker transport sits between SecureComm and MPI on real ranks and alters what "
        f"one rank puts on the wire ({cfg['trials']} trial{'s' * (cfg['trials'] != 1)} per class, "
        f"seed {cfg['seed']}; every class "
        "runs on ranks 0 and 1 except redirect, which needs a rank sealing for two peers, and the "
        f"setup, record, link and insider classes, which run on all {ev['world_size']} ranks; the link "
        f"classes run at most 3 trials). Every trial's "
        f"SecureComm: {config.describe()}; the algorithm is the class's own (redirect: recursive "
        "doubling, swap: ring, others: auto). Detected: the receiving rank raised "
        "AuthenticationError naming the attacking peer and the operation (TransportTimeout naming "
        "it for a drop, FrameError for a pad; for the record classes, every rank raised in the op "
        "whose arguments differed; for the link classes, every rank raised TransportTimeout naming "
        "the link whose messages were dropped or held). Silently accepted: any rank returned a "
        "value different from the honest result (record and link classes: any rank returned). "
        "With none of n trials missed, a class's miss rate is below 1 - 0.05^(1/n) at 95 % "
        "confidence (Clopper-Pearson). Paths covered: each trial is a new SecureComm whose "
        "ops are first calls, so the frames attacked are those of the Python path; the compiled "
        "two-rank swap (a repeated call's plan) is not attacked here, and with an attacker transport "
        "in place it is not used (a wrapper sees every frame). Its checks are the Python path's: "
        f"tests/unit/test_express.py and the express scenario on real ranks. {again}"
    )
    d.table(
        ["attack class", "trials", "detected", "silently accepted", "result", "ran with", "example error"],
        [
            [
                r["class"],
                r["trials"],
                r["detected"],
                r["silently_accepted"],
                _verdict(r["trials"] > 0 and r["detected"] == r["trials"] and r["silently_accepted"] == 0),
                _ran_with(rv, r.get("config")),
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
        "none must show them, which proves the check can fail. Every SecureComm of the check uses the "
        f"configured key exchange ({rv.config.key_exchange}), chunk_bytes ({rv.chunk:,}), rotation "
        f"point and encrypt policy ({rv.config.encrypt}); with encrypt=inter-node, hops between ranks "
        "of one node carry plaintext, and this check finds it."
    )
    d.table(
        [
            "suite",
            "bytes on the wire (all ranks)",
            "plaintext windows searched (per rank)",
            "windows found",
            "expected",
            "result",
            "ran with",
        ],
        [
            [
                r["suite"],
                f"{r['wire_bytes']:,}",
                f"{r['plaintext_windows']:,}",
                f"{r['hits']:,}",
                r["expect"],
                _verdict(r["ok"]),
                _ran_with(rv, r.get("config"), r["suite"]),
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
                "ran with",
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
                    _ran_with(rv, r.get("config"), r["suite"]),
                ]
                for r in cap["rows"]
            ],
        )
    else:
        d.p(f"Not run: {(cap or {}).get('reason', 'not requested')}.")


def _rotation_evidence(d: Doc, rv: Review) -> None:
    """The rotation check run for this report (:mod:`seccomm.compliance.rotation`)."""
    from .rotation import MAX_CHECK_OPS

    rot = rv.rotation
    d.h(1, "Evidence: key rotation (run for this report)")
    d.p(
        "Allreduces on real ranks under the configured settings, at the configured rotation point, or "
        f"at a test-sized point when the configured one would take more than {MAX_CHECK_OPS:,} "
        "operations (the report says so). Checked on every rank: the epoch of every operation is the one "
        "the schedule predicts (a new key before an operation that could take the current key past "
        "the rotation point); results are right; the first frame of an epoch and of the next, sealed "
        "at the same nonce over the same plaintext, differ (equal ciphertexts would mean one key); and "
        "rank 0 replays its first frame of epoch 0 in place of its first frame of a later epoch, which "
        "its receiver must refuse. A rotation point above the suite's usage limit fails without running."
    )
    if not rot:
        d.p("Not run: the evidence holds no rotation check.")
        return
    d.table(["field", "value"], _rotation_rows(rv, rot))
    d.p(rot["detail"])


def _rotation_rows(rv: Review, rot: dict) -> list[list[str]]:
    """The rotation check's table: the points, what ran, each check, the verdict."""

    def yes(v):
        return "n/a" if v is None else "yes" if v else "NO"

    rows = [
        ["configured rotation point", f"{rot['configured']:,} frames per key"],
        [f"{rv.suite.name} usage limit at {rv.chunk:,}-byte frames", f"{rot['limit']:,} frames per key"],
    ]
    if rot["ran"]:
        rec = {
            **(rot.get("config") or {}),
            "rotate_after_frames": rv.config.rotate_after_frames,  # the points are shown above
        }
        rows += [
            [
                "ran at",
                f"{rot['run_point']:,} frames per key" + (" (test-sized)" if rot.get("scaled") else ""),
            ],
            ["operations, epochs", f"{rot['ops']} allreduces, {rot['epochs_seen']} epochs"],
            ["epochs as the schedule predicts", yes(rot.get("epochs_ok"))],
            ["results right", yes(rot.get("results_ok"))],
            ["keys differ between epochs", yes(rot.get("keys_differ"))],
            ["cross-epoch replay refused", yes(rot.get("replay_refused"))],
            ["ran with", _ran_with(rv, rec)],
        ]
    return rows + [["result", _verdict(rot["ok"])]]


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
        f"({(bm.get('cpu') or {}).get('model', '?')}), commit {bm.get('git_commit') or 'unknown'}, "
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
                "N/A" if r["wrong"] is None else r["wrong"],
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
