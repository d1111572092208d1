"""``seccomm cluster``: build emulated clusters on this machine (one network namespace per host,
shaped links, racks with oversubscribed uplinks), run ``seccomm bench`` on each, tear them down.

    seccomm cluster --hosts 1,2,4,8 --link 1gbit [--tunnel wireguard] -- BENCH OPTIONS

Everything after ``--`` goes to ``seccomm bench`` unchanged (checked here first, before anything
is built); the ranks come from ``--hosts`` x ``--ranks-per-host``.  docs/scaling.md.
"""

from __future__ import annotations

import json
import os
import sys

from ..launch import python_argv
from .usage import Parser, UsageError, check_file, float_in, int_in, size_arg

HELP = "Emulate a cluster of hosts on this machine (namespaces, shaped links) and bench on it."
#: the bench options used when none are given after ``--`` (bounded: a few iterations per size)
DEFAULT_BENCH = ["-b", "64K", "-e", "16M", "-n", "5", "-w", "1"]
#: bench options the lab sets itself
_OWN = ("--np", "--json", "--csv", "--plot")


def add_arguments(p) -> None:
    """The lab's options on parser ``p``; the bench's follow ``--``."""
    p.add_argument("--hosts", default="2", help="host counts, comma list: one cluster each (default 2)")
    p.add_argument("--ranks-per-host", type=int_in(1, 64), default=1, help="ranks on each host (default 1)")
    p.add_argument(
        "--link", default="1gbit", help="each host's link rate, e.g. 500mbit, 10gbit (default 1gbit)"
    )
    p.add_argument(
        "--hosts-per-rack", type=int_in(0), default=0, help="hosts per rack switch (default 0: one switch)"
    )
    p.add_argument(
        "--oversubscription",
        type=float_in(1.0),
        default=1.0,
        help="rack uplink = hosts per rack x link / this (default 1)",
    )
    p.add_argument(
        "--mtu", type=int_in(1280, 9000), default=1500, help="MTU of every link [B] (default 1500)"
    )
    p.add_argument("--tunnel", choices=("wireguard",), help="also run native MPI through this tunnel")
    p.add_argument("--at", help="message size of the scaling table (default: the largest benched)")
    p.add_argument(
        "--time-limit",
        type=float_in(0.0, lo_open=True),
        default=900.0,
        help="seconds one bench run may take (default 900)",
    )
    p.add_argument("--json", metavar="PATH", help="write the clusters, every run's bench JSON and the table")
    p.add_argument(
        "--identity",
        metavar="DIR",
        help="a folder from seccomm identity: host i's ranks use its host-<i> certificate and key "
        "(and the bench runs --identity x509)",
    )
    p.add_argument(
        "bench_args", nargs="*", metavar="-- BENCH OPTIONS", help=f"default: {' '.join(DEFAULT_BENCH)}"
    )


def run(args, argv) -> int:
    """Check everything, get the privileges (or say in one line what is missing), run the sweep
    and print the scaling table; returns 0 when every run passed its check, else 1."""
    from ..lab import privilege

    specs, bench_args = _specs(args), _bench_args(args)
    if args.identity:
        _check_identity(args.identity, max(s.hosts for s in specs))
        if "--identity" not in bench_args:
            bench_args += ["--identity", "x509"]
    _check_oversubscription(specs)
    cfg = _bench_config(bench_args)
    at = size_arg(args.at) if args.at else cfg.sizes()[-1]
    if at not in cfg.sizes():
        raise UsageError(f"--at {at} is not a benched size ({', '.join(map(str, cfg.sizes()))})")
    if args.json:
        check_file("--json", args.json)
    if args.tunnel:  # asked for: without it the run would not answer the question (exit 2)
        from ..lab import tunnel

        why = tunnel.missing()
        if why:
            raise UsageError(f"--tunnel {args.tunnel}: {why}; install it, or leave --tunnel out")
    if not privilege.privileged():
        if privilege.in_userns() or not privilege.userns_works():
            raise UsageError(privilege.NEEDS)
        env = dict(os.environ, **{privilege.USERNS_ENV: "1"})
        return _call(privilege.userns_argv(python_argv("seccomm", *argv)), env)
    if privilege.in_userns():
        privilege.prepare_userns()
    return _sweep(args, specs, bench_args, cfg, at)


def _call(cmd, env) -> int:
    """Run ``cmd`` (the lab inside a user namespace) in a session of its own and wait; SIGINT,
    SIGTERM and SIGHUP sent to this process are passed on to it, once, and it tears down."""
    import signal
    import subprocess

    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, lambda signum, _frame: proc.send_signal(signum))
    return proc.wait()


def _sweep(args, specs, bench_args, cfg, at) -> int:
    from ..lab import Interrupted, tunnel
    from ..lab.netns import LabError
    from ..lab.sweep import scaling_rows, scaling_table, sweep

    networks = ["plain"]
    if args.tunnel:  # (installed: checked before anything was built)
        print(f"# {args.tunnel}: {tunnel.version()}", flush=True)
        networks.append(args.tunnel)
    try:
        log = lambda s: print(s, flush=True)  # noqa: E731
        runs = sweep(specs, bench_args, networks, args.time_limit, log=log, identity=args.identity)
    except Interrupted as e:
        print(f"seccomm cluster: {e}; everything torn down", file=sys.stderr)
        return 128 + e.signum
    except KeyboardInterrupt:
        print("seccomm cluster: interrupted; everything torn down", file=sys.stderr)
        return 130
    except LabError as e:
        print(f"seccomm cluster: error: {e}; everything torn down", file=sys.stderr)
        return 1
    coll = cfg.collectives[0]
    rows = scaling_rows(runs, at, coll)
    if args.json:  # (before the table: its reader may stop early, as `| head` does)
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "scaling": rows, "bench_args": bench_args}, f, indent=1)
    print("\n".join(scaling_table(rows, at, coll)), flush=True)
    return 0 if runs and all(r["returncode"] == 0 for r in runs) else 1


#: most hosts a run is started with: the names and addresses go to MAX_HOSTS (64), but 64-host
#: runs failed to connect their ranks where 16 and 32 ran
RUN_MAX_HOSTS = 32


def _specs(a) -> list:
    """One :class:`~seccomm.lab.ClusterSpec` per host count (in the order given, each once);
    ``UsageError`` on bad values."""
    from ..lab import ClusterSpec, parse_rate
    from ..lab.spec import MAX_HOSTS

    try:
        counts = list(dict.fromkeys(int(x) for x in a.hosts.split(",") if x.strip()))
    except ValueError:
        raise UsageError(f"bad --hosts {a.hosts!r}: a comma list of host counts, e.g. 1,2,4,8") from None
    if not counts:
        raise UsageError("--hosts: give at least one host count, e.g. 1,2,4,8")
    big = [n for n in counts if n > RUN_MAX_HOSTS]
    if big and all(1 <= n <= MAX_HOSTS for n in counts):
        raise UsageError(
            f"--hosts {','.join(map(str, big))}: the lab runs at most {RUN_MAX_HOSTS} hosts; above that "
            f"MPICH's UCX transport fails to connect every pair of ranks over the emulated switch "
            f"('No route to host', with 64 hosts on a 2-core machine): use {RUN_MAX_HOSTS} or fewer"
        )
    try:
        link = parse_rate(a.link)
        shape = (a.ranks_per_host, link, a.hosts_per_rack, a.oversubscription, a.mtu)
        return [ClusterSpec(n, *shape) for n in counts]
    except ValueError as e:
        raise UsageError(str(e)) from None


def _check_oversubscription(specs) -> None:
    """``--oversubscription`` shapes rack uplinks: ``UsageError`` when no cluster has two racks
    (it would do nothing); a note naming the host counts that have one rack only."""
    if specs[0].oversubscription == 1:
        return
    single = [s.hosts for s in specs if s.racks < 2]
    if len(single) == len(specs):
        raise UsageError(
            f"--oversubscription {specs[0].oversubscription:g} shapes the uplinks between racks, and "
            f"every cluster here is one rack: give --hosts-per-rack below the host count "
            f"(e.g. --hosts-per-rack {max(1, max(s.hosts for s in specs) // 2)})"
        )
    if single:
        print(f"# note: --oversubscription does nothing for {single} host(s): one rack", flush=True)


def _check_identity(folder: str, hosts: int) -> None:
    """Every host's identity in ``folder`` loads and verifies (``UsageError`` naming the file)."""
    from ..errors import IdentityError
    from ..identity import IdentityFiles, load_identity
    from ..lab.sweep import host_identity

    for i in range(hosts):
        env = host_identity(folder, i)
        try:
            load_identity(
                IdentityFiles(env["SECCOMM_CERT_FILE"], env["SECCOMM_KEY_FILE"], env["SECCOMM_CA_FILE"])
            )
        except IdentityError as e:
            raise UsageError(
                f"--identity {folder}: host {i}: {e} (seccomm identity --out DIR NAME... for {hosts} hosts)"
            ) from None


def _bench_args(a) -> list[str]:
    args = list(a.bench_args) or list(DEFAULT_BENCH)
    own = [x for x in args if x.split("=")[0] in _OWN]
    if own:
        raise UsageError(f"{', '.join(own)}: the lab sets these itself (use seccomm cluster --json)")
    return args


def _bench_config(bench_args: list[str]):
    """The bench's own checks on ``bench_args`` (before any cluster is built)."""
    from . import bench

    p = Parser(prog="seccomm bench")
    bench.add_arguments(p)
    cfg = bench.config_from_args(p.parse_args(bench_args))
    if cfg.workload:
        raise UsageError("--workload: use the lab with a size sweep (-b/-e), not a workload")
    return cfg
