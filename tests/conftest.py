"""Shared fixtures: launch real MPI ranks once per world size and cache what they report (the
helpers behind them: tests/helpers.py)."""

from __future__ import annotations

import signal

import pytest

from helpers import PLAN, cached_launches

# A shell starts a background job (`cmd &`, no job control) with SIGINT ignored, and an ignored
# signal stays ignored in every child: the tests that send Ctrl-C to a command would then see it
# do nothing.  Python's own handler here is reset to the default in each child at exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def mpi_results(tmp_path_factory):
    return cached_launches(tmp_path_factory, PLAN)
