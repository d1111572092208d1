"""``seccomm report --compliance``: check the arguments, run the packet capture (before the
ranks start: it starts ranks of its own), start the ranks, and write the report that
:mod:`seccomm.compliance.report` builds from their evidence."""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import tempfile

from ..compliance.config import ReviewConfig
from ..compliance.report import DEFAULT_CHUNK_BYTES, load_bench
from ..suites import SUITES
from .attack import DEFAULT_TRIALS
from .usage import UsageError, check_dir, check_file, check_outputs, int_in, launcher_np

HELP = "Write a compliance report with live evidence (attacker harness, wire checks)."


def add_arguments(p) -> None:
    """The report's options on parser ``p``."""
    p.add_argument("--compliance", action="store_true", help="the compliance report (required)")
    p.add_argument("--format", choices=("md", "html"), default="md", help="md (default) or html")
    p.add_argument("-o", "--output", help="write the report here (default: standard output)")
    p.add_argument("--bench", metavar="RESULTS.json", help="a seccomm bench --json result to include")
    p.add_argument(
        "--np", type=int_in(3, 64), help="local ranks when not under a launcher (default 3; redirect needs 3)"
    )
    p.add_argument(
        "--trials",
        type=int_in(1, 10**6),
        default=DEFAULT_TRIALS,
        help=f"attacker-harness trials per class (default {DEFAULT_TRIALS}; the link classes run 3)",
    )
    p.add_argument(
        "--seed", type=int_in(0, 2**32 - 1), default=0, help="seed of the attack schedule (default 0)"
    )
    p.add_argument(
        "--suite",
        default="aes-256-gcm",
        choices=list(SUITES),
        help="the suite under review (default aes-256-gcm)",
    )
    p.add_argument(
        "--chunk-bytes",
        type=int_in(16, (1 << 31) - 65),
        default=DEFAULT_CHUNK_BYTES,
        help=f"frame payload in bytes (default {DEFAULT_CHUNK_BYTES})",
    )
    p.add_argument(
        "--rotate-after-frames",
        type=int_in(1),
        default=None,
        help="configured rotation point [frames per key] (default: the suite's usage limit; "
        "a point above it fails the report)",
    )
    p.add_argument("--key-exchange", choices=("psk", "psk-dhe"), default="psk", help="default psk")
    p.add_argument(
        "--identity",
        choices=("psk", "x509"),
        default="psk",
        help="x509: every rank known by its certificate (SECCOMM_CERT_FILE/KEY_FILE/CA_FILE, or a "
        "throw-away CA made for the run); default psk",
    )
    p.add_argument(
        "--encrypt",
        choices=("all", "inter-node"),
        default="all",
        help="encrypt policy under review (default all; inter-node leaves hops inside a node in the clear)",
    )
    p.add_argument("--no-capture", action="store_true", help="skip the loopback packet capture")
    p.add_argument("--pcap", metavar="DIR", help="also write the captured packets as DIR/<suite>.pcap")


def run(args, argv) -> int:
    """Check the arguments; run plainly, capture packets, then start ``--np`` local ranks that get
    the capture's result through ``SECCOMM_CAPTURE_RESULT``; as a rank, gather the evidence and
    write the report.  Exit status 1 when any evidence check fails; ``UsageError`` on bad values."""
    from ..launch import Stopped, relaunch, stop_on_signals, under_launcher

    _check(args)
    if under_launcher():
        launcher_np(args.np)
        check_outputs(lambda: _check_outputs(args))
        return _ranks(args, argv)
    _check_outputs(args)
    try:
        with stop_on_signals():  # SIGTERM/SIGHUP: the capture's secret and folder are removed
            cap = _capture(args)
    except Stopped as e:
        print(f"\nseccomm report: stopped by {signal.Signals(e.signum).name}", file=sys.stderr, flush=True)
        return 128 + e.signum
    fd, path = tempfile.mkstemp(prefix="seccomm-capture-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(cap, f)
    try:
        return relaunch(
            args.np or 3,
            argv,
            extra_env={
                "SECCOMM_CAPTURE_RESULT": path,
                "SECCOMM_REPORT_COMMAND": "seccomm " + shlex.join(argv),
            },
            identity=args.identity,
        )
    finally:
        os.unlink(path)


def _check(args) -> None:
    """Every argument but the output paths, before any rank starts; ``UsageError`` naming the
    first bad one (the types checked the numbers' ranges)."""
    from ..launch import rank_and_size, under_launcher

    if not args.compliance:
        raise UsageError("say which report: --compliance (the only one so far)")
    if under_launcher() and rank_and_size()[1] < 3:
        raise UsageError(
            f"the evidence needs 3 ranks or more (the redirect attack); this launcher started "
            f"{rank_and_size()[1]}: start 3 (mpiexec -n 3 ...)"
        )
    if args.bench:
        try:
            load_bench(args.bench)
        except ValueError as e:
            raise UsageError(str(e)) from None


def _check_outputs(args) -> None:
    """``-o PATH`` (a file) and ``--pcap DIR`` (a folder) can be written."""
    if args.output:
        check_file("--output", args.output)
    if args.pcap:
        check_dir("--pcap", args.pcap)


def _capture(args) -> dict:
    """The packet-capture evidence (``{"rows": None, "reason": ...}`` when skipped)."""
    from ..compliance.capture import capture_evidence

    if args.no_capture:
        return {"rows": None, "reason": "--no-capture"}
    log = lambda s: print(s, file=sys.stderr, flush=True)  # noqa: E731
    return capture_evidence(args.pcap, log=log, config=review_config(args))


def review_config(args) -> ReviewConfig:
    """The configuration under review, from the command's options."""
    return ReviewConfig(
        suite=args.suite,
        key_exchange=args.key_exchange,
        chunk_bytes=args.chunk_bytes,
        rotate_after_frames=args.rotate_after_frames,
        encrypt=args.encrypt,
        identity=args.identity,
    )


def _ranks(args, argv) -> int:
    """Every rank: gather the evidence; rank 0 adds the capture's result, builds the report and
    writes it (to ``-o`` or standard output).  Exit status 1 when any check failed."""
    from mpi4py import MPI

    from ..compliance.doc import to_html, to_markdown
    from ..compliance.report import build, gather_evidence

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    log = (lambda s: print(s, file=sys.stderr, flush=True)) if rank == 0 else (lambda s: None)
    config = review_config(args)
    from ..bench.secret import REPORT_NO_SECRET, ranks_secret

    secret = ranks_secret("seccomm report", REPORT_NO_SECRET)  # every rank, before any other traffic
    if secret is None:
        return 2
    from ..bench.secret import identity_missing

    missing = identity_missing(comm) if config.identity == "x509" else None
    if missing is not None:
        log(f"seccomm report: error: {missing}")
        return 2
    ev = gather_evidence(comm, args.trials, args.seed, log, config=config, psk=secret)
    if rank != 0:
        return 0
    ev["capture"] = _capture_result()
    cfg = {
        **config.as_dict(),
        "trials": args.trials,
        "seed": args.seed,
        "command": os.environ.get("SECCOMM_REPORT_COMMAND") or "seccomm " + shlex.join(argv),
    }
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


def _capture_result() -> dict:
    """What the capture before the ranks started found, or why there is none."""
    path = os.environ.get("SECCOMM_CAPTURE_RESULT")
    if path:
        with open(path) as f:
            return json.load(f)
    return {
        "rows": None,
        "reason": "seccomm report ran under an external launcher; the "
        "packet capture runs only when it starts its own ranks",
    }
