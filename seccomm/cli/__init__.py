"""``seccomm`` command line: a registry of subcommands, each building its own parser.

Each command is a module of this package exposing ``HELP``, ``add_arguments(parser)`` and
``run(args, argv) -> exit status``; :data:`COMMANDS` lists them.  The commands import the tools
(bench runner, cost model, attack harness, compliance report); no tool imports the CLI.
Bad arguments print one line, ``seccomm CMD: error: ...``, and exit with status 2 (under a
launcher, rank 0 prints it and every rank exits).  Ctrl-C prints one line and exits with 130.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from .. import __version__
from ..launch import LaunchError, drop_own_shm, rank_and_size, started_by_us, under_launcher
from . import attack, bench, cluster, identity, project, report, tradeoff, train
from .usage import Parser, UsageError

#: name -> command module, in the order ``seccomm --help`` lists them
COMMANDS = {
    "bench": bench,
    "attack": attack,
    "report": report,
    "project": project,
    "train": train,
    "cluster": cluster,
    "identity": identity,
    "tradeoff": tradeoff,
}


def _parser() -> Parser:
    top = Parser(prog="seccomm", description="Secure collectives: cost and evidence.")
    top.add_argument("--version", action="version", version=f"seccomm {__version__}")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name, cmd in COMMANDS.items():
        cmd.add_arguments(sub.add_parser(name, help=cmd.HELP, description=cmd.HELP))
    return top


def main(argv: list[str] | None = None) -> int:
    """Run ``seccomm ARGV`` (default ``sys.argv[1:]``); returns the exit status: the command's,
    or 2 after one line on standard error for a bad argument (no command: the help, status 2)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    top = _parser()
    prog = f"seccomm {argv[0]}" if argv and argv[0] in COMMANDS else "seccomm"
    if under_launcher() and not started_by_us() and rank_and_size()[0] == 0:
        _say_interrupts(prog)
    try:
        args = top.parse_args(argv)
        if args.command is None:
            top.print_help()
            return 2
        prog = f"seccomm {args.command}"
        return COMMANDS[args.command].run(args, argv)
    except (UsageError, LaunchError) as e:
        if rank_and_size()[0] == 0:  # under a launcher every rank gets here; one says why
            print(f"{prog}: error: {e}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        return _interrupted(prog)
    except BrokenPipeError:  # the reader went away (seccomm project | head): no traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except SystemExit as e:  # --help, --version
        return e.code if isinstance(e.code, int) else 0


_said = threading.Event()  # rank 0 printed the Ctrl-C line


def _say(prog: str) -> None:
    if not _said.is_set():
        _said.set()
        print(f"\n{prog}: interrupted", file=sys.stderr, flush=True)


def _say_interrupts(prog: str) -> None:
    """Rank 0 under the user's launcher: print the Ctrl-C line from a thread woken by the signal
    itself (:func:`signal.set_wakeup_fd`).  mpiexec forwards Ctrl-C to every rank at once; rank 0
    may be inside a blocking MPI call (the native baseline) that only its peers could end, and
    they are leaving: its main thread would never run the handler before mpiexec kills it."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    try:
        signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    except ValueError:  # not the main thread (main() called from a thread): the handler says it
        os.close(r), os.close(w)
        return

    def watch():
        while True:
            got = os.read(r, 64)
            if not got:
                return
            if signal.SIGINT in got:
                _say(prog)

    threading.Thread(target=watch, name="seccomm-ctrl-c", daemon=True).start()


def _interrupted(prog: str) -> int:
    """Ctrl-C: one line (from rank 0; none from ranks that ``seccomm`` started, whose parent
    says it), exit status 130.  A rank leaves at once: MPI's finalize could wait on ranks gone
    (MPICH's shared-memory files it maps are unlinked first: :func:`~seccomm.launch.drop_own_shm`)."""
    if not started_by_us() and rank_and_size()[0] == 0:
        _say(prog)
    if not under_launcher():
        return 130
    if rank_and_size()[0] != 0 and not started_by_us():
        # mpiexec forwards Ctrl-C to every rank at once and kills the job's other ranks as soon
        # as one exits: rank 0, busy or not scheduled yet, would die before saying why
        time.sleep(0.5)
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except (OSError, ValueError):
            pass
    drop_own_shm()  # (no MPI_Finalize here: MPICH's shared-memory files would stay in /dev/shm)
    os._exit(130)


__all__ = ["COMMANDS", "Parser", "UsageError", "main"]

if __name__ == "__main__":
    sys.exit(main())
