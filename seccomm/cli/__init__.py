"""``seccomm`` command line: a registry of subcommands, each building its own parser.

Bad arguments print one line, ``seccomm CMD: error: ...``, and exit with status 2.
"""

from __future__ import annotations

import argparse
import sys

COMMANDS: dict = {}


def register(name: str, help: str):
    """Decorator: ``fn(parser)`` adds arguments and returns the function that runs the command."""
    def deco(fn):
        COMMANDS[name] = (help, fn)
        return fn
    return deco


class UsageError(Exception):
    """A bad command-line value: reported in one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def main(argv: list[str] | None = None) -> int:
    from .. import bench  # noqa: F401  (the modules register their commands)
    from ..compliance import attack, report  # noqa: F401
    from . import project, train  # noqa: F401

    argv = list(sys.argv[1:] if argv is None else argv)
    top = Parser(prog="seccomm", description="Secure collectives: cost and evidence.")
    sub = top.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    runners = {}
    for name, (help_, fn) in COMMANDS.items():
        runners[name] = fn(sub.add_parser(name, help=help_, description=help_))
    prog = f"seccomm {argv[0]}" if argv and argv[0] in COMMANDS else "seccomm"
    try:
        args = top.parse_args(argv)
        if args.command is None:
            top.print_help()
            return 2
        prog = f"seccomm {args.command}"
        return runners[args.command](args, argv)
    except UsageError as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
