"""``seccomm attack``: the on-path attacker harness (:mod:`seccomm.compliance.attack`) on real
ranks; every attack must give what the suite promises (detected, for an authenticating suite)."""

from __future__ import annotations

import sys

from ..compliance.attack import CLASSES
from ..suites import SUITES
from .usage import UsageError, check_cores, int_in, launcher_np

HELP = (
    "Run the on-path attacker harness on real ranks: every attack detected, or, for a suite that "
    "authenticates nothing (none), what it should give."
)
DEFAULT_NP = 3
#: trials per class by default: about a minute on 2 ranks (a miss rate below 5.8 % at 95 %
#: confidence per class when none is missed: seccomm.compliance.attack.miss_bound)
DEFAULT_TRIALS = 50


def add_arguments(p) -> None:
    """The harness's options on parser ``p``."""
    p.add_argument(
        "--np", type=int_in(2, 64), help=f"local ranks when not under a launcher (default {DEFAULT_NP})"
    )
    p.add_argument(
        "--trials",
        type=int_in(1, 10**6),
        default=DEFAULT_TRIALS,
        help=f"trials per attack class (default {DEFAULT_TRIALS}; the link classes run at most 3)",
    )
    p.add_argument(
        "--classes",
        help=f"comma list of {', '.join(CLASSES)} (default all; on 2 ranks redirect, which needs 3, is n/a)",
    )
    p.add_argument(
        "--seed", type=int_in(0, 2**32 - 1), default=0, help="seed of the attack schedule (default 0)"
    )
    p.add_argument(
        "--suite",
        default="aes-256-gcm",
        choices=list(SUITES),
        help="suite under attack (default aes-256-gcm)",
    )
    p.add_argument(
        "--identity",
        default="psk",
        choices=("psk", "x509"),
        help="x509: every rank known by its certificate (SECCOMM_CERT_FILE/KEY_FILE/CA_FILE, or a "
        "throw-away CA made for the run); the insider classes run only under x509 (default psk)",
    )


def run(args, argv) -> int:
    """Check the arguments; run plainly, start ``--np`` local ranks; as a rank, run the harness.
    Returns the exit status (1 when an outcome does not fit the suite); ``UsageError`` on bad
    values."""
    from ..compliance.attack import main_ranks
    from ..launch import relaunch, under_launcher

    classes = _classes(args)
    if not under_launcher():
        check_cores(args.np or DEFAULT_NP, True, "seccomm attack")  # a warning: idle ranks yield
        return relaunch(args.np or DEFAULT_NP, argv, prog="seccomm attack", identity=args.identity)
    launcher_np(args.np)
    from mpi4py import MPI

    from ..bench.secret import identity_missing, ranks_secret

    secret = ranks_secret("seccomm attack")  # every rank decides it before any other traffic
    if secret is None:
        return 2
    missing = identity_missing(MPI.COMM_WORLD) if args.identity == "x509" else None
    if missing is not None:
        if MPI.COMM_WORLD.Get_rank() == 0:
            print(f"seccomm attack: error: {missing}", file=sys.stderr, flush=True)
        return 2
    return main_ranks(classes, args.trials, args.seed, args.suite, psk=secret, identity=args.identity)


def _classes(args) -> list[str]:
    """The attack classes asked for, after checking them against the ranks there will be."""
    from ..launch import rank_and_size, under_launcher

    given = args.classes is not None
    classes = [c.strip() for c in (args.classes or ",".join(CLASSES)).split(",") if c.strip()]
    bad = [c for c in classes if c not in CLASSES]
    if bad or not classes:
        raise UsageError(
            f"unknown attack class {','.join(bad) or args.classes!r}; allowed: {', '.join(CLASSES)}"
        )
    ranks = rank_and_size()[1] if under_launcher() else args.np or DEFAULT_NP
    if "redirect" in classes and ranks < 3 and given:
        start = "start 3 or more ranks (mpiexec -n 3 ...)" if under_launcher() else "--np 3 or more"
        raise UsageError(
            f"the redirect class needs a rank that seals for two peers, so 3 ranks; this run has {ranks}: "
            f"{start}, or leave redirect out of --classes"
        )
    if ranks < 2:
        raise UsageError(
            f"seccomm attack needs 2 ranks or more (an attacker and a victim); this run has {ranks}"
        )
    return classes
