"""What every command's parser shares: the one-line usage error and the parser that raises it.

A leaf of the CLI package (it imports only :mod:`seccomm.units`), so the command modules and
``seccomm.cli`` both import it without a circle.
"""

from __future__ import annotations

import argparse

from ..units import parse_size


class UsageError(Exception):
    """A bad command-line value: reported in one line, ``seccomm CMD: error: ...``, exit status 2."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors raise :class:`UsageError` instead of exiting."""

    def error(self, message):
        raise UsageError(message)


def size_arg(text: str) -> int:
    """Bytes from a size argument (``64K``, ``25MiB``, see :func:`seccomm.units.parse_size`);
    ``UsageError`` with the same one-line message where the text is not a size."""
    try:
        return parse_size(text)
    except ValueError as e:
        raise UsageError(str(e)) from None
