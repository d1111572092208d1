"""``seccomm`` command line: a registry of subcommands, each building its own parser.

Each command is a module of this package exposing ``HELP``, ``add_arguments(parser)`` and
``run(args, argv) -> exit status``; :data:`COMMANDS` lists them.  The commands import the tools
(bench runner, cost model, attack harness, compliance report); no tool imports the CLI.
Bad arguments print one line, ``seccomm CMD: error: ...``, and exit with status 2.
"""

from __future__ import annotations

import sys

from . import attack, bench, cluster, project, report, train
from .usage import Parser, UsageError

#: name -> command module, in the order ``seccomm --help`` lists them
COMMANDS = {
    "bench": bench,
    "attack": attack,
    "report": report,
    "project": project,
    "train": train,
    "cluster": cluster,
}


def _parser() -> Parser:
    top = Parser(prog="seccomm", description="Secure collectives: cost and evidence.")
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
    try:
        args = top.parse_args(argv)
        if args.command is None:
            top.print_help()
            return 2
        prog = f"seccomm {args.command}"
        return COMMANDS[args.command].run(args, argv)
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2


__all__ = ["COMMANDS", "Parser", "UsageError", "main"]

if __name__ == "__main__":
    sys.exit(main())
