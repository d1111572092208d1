"""``seccomm attack``: the on-path attacker harness (:mod:`seccomm.compliance.attack`) on real
ranks; every attack must be detected."""

from __future__ import annotations

from ..compliance.attack import CLASSES
from ..suites import SUITES
from .usage import UsageError

HELP = "Run the on-path attacker harness on real ranks: every attack must be detected."


def add_arguments(p) -> None:
    """The harness's options on parser ``p``."""
    p.add_argument("--np", type=int, default=3, help="local ranks when not under a launcher (default 3)")
    p.add_argument("--trials", type=int, default=200, help="trials per attack class (default 200)")
    p.add_argument("--classes", default=",".join(CLASSES), help=f"comma list of {', '.join(CLASSES)}")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--suite", default="aes-256-gcm", help="suite under attack (default aes-256-gcm)")


def run(args, argv) -> int:
    """Check the arguments; run plainly, start ``--np`` local ranks; as a rank, run the harness.
    Returns the exit status (1 when an attack went undetected); ``UsageError`` on bad values."""
    from ..compliance.attack import main_ranks
    from ..launch import relaunch, under_launcher

    classes = _classes(args)
    if not under_launcher():
        try:
            return relaunch(args.np, argv)
        except FileNotFoundError as e:
            raise UsageError(str(e)) from None
    return main_ranks(classes, args.trials, args.seed, args.suite)


def _classes(args) -> list[str]:
    """The attack classes asked for, after checking every argument."""
    from ..launch import under_launcher

    classes = [c.strip() for c in args.classes.split(",") if c.strip()]
    bad = [c for c in classes if c not in CLASSES]
    if bad or not classes:
        raise UsageError(
            f"unknown attack class {','.join(bad) or args.classes!r}; allowed: {', '.join(CLASSES)}"
        )
    if args.trials < 1 or not 2 <= args.np <= 64:
        raise UsageError("--trials must be >= 1 and --np in 2..64")
    if args.seed < 0:
        raise UsageError("--seed must be >= 0")
    if args.suite not in SUITES:
        raise UsageError(f"unknown suite {args.suite!r}; allowed: {', '.join(SUITES)}")
    if "redirect" in classes and args.np < 3 and not under_launcher():
        raise UsageError(
            "the redirect class needs a rank that seals for two peers: --np 3 or more "
            "(or leave redirect out of --classes)"
        )
    return classes
