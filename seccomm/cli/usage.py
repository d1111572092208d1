"""What every command's parser shares: the one-line usage error, the parser that raises it, the
range-checked argument types, and the check of output paths before any work starts.

A leaf of the CLI package (it imports only :mod:`seccomm.units` and :mod:`seccomm.launch`), so
the command modules and ``seccomm.cli`` both import it without a circle.

Every numeric option of every command is parsed by :func:`int_in`, :func:`float_in` or
:func:`size_in` (each marked ``range_checked``; ``tests/cli/test_cli_args.py`` holds every command
to it), and every output path goes through :func:`check_outputs` before any rank starts work.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import tempfile

from ..units import parse_size

#: how to get matplotlib for ``--plot``, as the README says it
PLOT_HINT = "--plot needs matplotlib: pip install matplotlib (the 'plot' extra: pip install -e '.[plot]')"


class UsageError(Exception):
    """A bad command-line value: reported in one line, ``seccomm CMD: error: ...``, exit status 2."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors raise :class:`UsageError` instead of exiting, and which
    reads ``-e -1M`` or ``--crypto-threads -3`` as a (bad) value, not as an unknown option."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._negative_number_matcher = re.compile(r"^-\d[\w.]*$|^-\.\d+$|^-(?:inf|nan)$", re.IGNORECASE)

    def error(self, message):
        raise UsageError(message)


def _typed(parse, name: str, lo, hi):
    """``parse`` as an argparse type: named ``name``, marked as range-checked, its bounds kept
    (``lo``, ``hi``: what the tests probe)."""
    parse.__name__ = name
    parse.range_checked, parse.lo, parse.hi = True, lo, hi
    return parse


def _num(v) -> str:
    """``1_048_576`` (a comma would read as a list separator inside ``[lo, hi]``)."""
    return f"{v:_}" if isinstance(v, int) else f"{v:g}"


def _bounds(v, lo, hi, lo_open=False) -> None:
    low_bad = v <= lo if lo_open else v < lo
    if low_bad or (hi is not None and v > hi):
        where = f"> {_num(lo)}" if lo_open else f">= {_num(lo)}"
        if hi is not None:
            where = f"in {'(' if lo_open else '['}{_num(lo)}, {_num(hi)}]"
        raise argparse.ArgumentTypeError(f"must be {where}, got {_num(v)}")


def int_in(lo: int, hi: int | None = None):
    """An argparse type: an integer in ``[lo, hi]`` (no upper bound when ``hi`` is None)."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        _bounds(v, lo, hi)
        return v

    return _typed(parse, "integer", lo, hi)


def float_in(lo: float, hi: float | None = None, lo_open: bool = False):
    """An argparse type: a finite number in ``[lo, hi]`` (``(lo, hi]`` with ``lo_open``)."""

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
        _bounds(v, lo, hi, lo_open)
        return v

    return _typed(parse, "number", lo, hi)


def size_in(lo: int, hi: int | None = None):
    """An argparse type: bytes from ``64K``, ``25MiB`` (:func:`seccomm.units.parse_size`) in
    ``[lo, hi]``."""

    def parse(text: str) -> int:
        try:
            v = parse_size(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        _bounds(v, lo, hi)
        return v

    return _typed(parse, "size", lo, hi)


def size_arg(text: str) -> int:
    """Bytes from a size argument (``64K``, ``25MiB``, see :func:`seccomm.units.parse_size`);
    ``UsageError`` with the same one-line message where the text is not a size."""
    try:
        return parse_size(text)
    except ValueError as e:
        raise UsageError(str(e)) from None


def given(args, *names: str) -> list[str]:
    """The options among ``names`` (dest names) that were given: options whose default is None."""
    return [n for n in names if getattr(args, n, None) is not None]


def flag(dest: str) -> str:
    """``--crypto-threads`` from the dest name ``crypto_threads``."""
    return "--" + dest.replace("_", "-")


# -- output paths ---------------------------------------------------------------------------------
def check_file(option: str, path: str, suffixes=None) -> None:
    """``path`` can be written as a file: its folder exists and is writable, it is not a folder,
    and (``suffixes``) its extension is one of them.  ``UsageError`` naming ``option`` otherwise."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UsageError(f"{option} {path} is a directory; give a file name")
    if not os.path.isdir(folder):
        raise UsageError(f"{option} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise UsageError(f"{option} {path}: not writable")
    ext = os.path.splitext(path)[1].lstrip(".").lower()
    if suffixes is not None and ext not in suffixes:
        raise UsageError(f"{option} {path}: unknown file type {ext!r}; use one of .{', .'.join(suffixes)}")
    _try_write(option, path)


def _try_write(option: str, path: str) -> None:
    """Open ``path`` for appending (an existing file keeps its content; one made here is removed):
    what ``os.access`` cannot tell (``/sys``, ``/proc``, a read-only mount, root).  ``UsageError``."""
    existed = os.path.lexists(path)
    try:
        with open(path, "a"):
            pass
    except OSError as e:
        raise UsageError(f"{option} {path}: cannot be written ({e.strerror or e})") from None
    if not existed:
        os.unlink(path)


def check_dir(option: str, path: str) -> None:
    """``path`` is a writable folder, or can be made: its nearest existing ancestor is a writable
    folder.  ``UsageError`` naming ``option`` otherwise."""
    p = os.path.abspath(path)
    while not os.path.exists(p):
        p = os.path.dirname(p)
    if not os.path.isdir(p):
        raise UsageError(f"{option} {path}: {p} is a file, not a folder")
    if not os.access(p, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {path}: folder {p} is not writable")
    try:  # what os.access cannot tell: /sys, /proc, a read-only mount, root
        fd, probe = tempfile.mkstemp(prefix=".seccomm-probe-", dir=p)
    except OSError as e:
        raise UsageError(f"{option} {path}: nothing can be written in {p} ({e.strerror or e})") from None
    os.close(fd)
    os.unlink(probe)


def plot_suffixes() -> list[str]:
    """The file types matplotlib can write; ``UsageError`` when matplotlib is missing."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise UsageError(PLOT_HINT) from None
    return sorted(Figure().canvas.get_supported_filetypes())


def check_outputs(check) -> None:
    """Run ``check()`` (which raises :class:`UsageError`) where its answer counts, before any work:
    in this process; under an MPI launcher on rank 0 only (which writes the files; its hosts'
    folders may differ from the others'), and every rank then raises rank 0's error, so that all
    stop together (a rank that stopped alone would leave the others waiting in MPI)."""
    from ..launch import launcher

    if launcher() != "mpi":
        check()
        return
    from mpi4py import MPI

    comm, msg = MPI.COMM_WORLD, None
    if comm.Get_rank() == 0:
        try:
            check()
        except UsageError as e:
            msg = str(e)
    msg = comm.bcast(msg, root=0)
    if msg is not None:
        raise UsageError(msg)


def launcher_np(np_given: int | None) -> None:
    """Under a launcher the ranks are the launcher's: a ``--np`` that differs is an error, not
    ignored without a word."""
    from ..launch import rank_and_size, started_by_us

    size = rank_and_size()[1]
    if np_given is not None and not started_by_us() and np_given != size:
        raise UsageError(
            f"--np {np_given} does not apply under a launcher, which started {size} rank(s): "
            f"drop --np, or start {np_given} ranks (mpiexec -n {np_given} ...)"
        )


def check_cores(nranks: int, allowed: bool, prog: str) -> None:
    """Before local ranks start: more ranks than cores is a ``UsageError`` unless ``allowed``
    (``--oversubscribe``, as mpiexec's), which prints one warning line on stderr instead; timings
    of ranks that share cores do not measure the collectives."""
    from ..launch import oversubscription, usable_cores

    over = oversubscription(nranks, usable_cores())
    if over is None:
        return
    if not allowed:
        raise UsageError(
            f"--np {nranks}: {over} would share cores (oversubscribed) and the timings would mean "
            f"little; use --np {usable_cores()} or fewer, or add --oversubscribe to run anyway"
        )
    print(f"{prog}: warning: oversubscribed, {over}: timings mean little", file=sys.stderr, flush=True)


def add_oversubscribe(p) -> None:
    """The ``--oversubscribe`` flag (``check_cores``)."""
    p.add_argument(
        "--oversubscribe",
        action="store_true",
        help="allow --np above this machine's cores (the ranks share cores; timings mean little)",
    )
