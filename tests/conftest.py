"""Shared fixtures: launch real MPI ranks once per world size and cache what they report (the
helpers behind them: tests/helpers.py); ``world``: the ranks a test body runs on
(tests/worlds.py)."""

from __future__ import annotations

import shutil
import signal

import pytest

import worlds
from helpers import PLAN, cached_launches

# A shell starts a background job (`cmd &`, no job control) with SIGINT ignored, and an ignored
# signal stays ignored in every child: the tests that send Ctrl-C to a command would then see it
# do nothing.  Python's own handler here is reset to the default in each child at exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def mpi_results(tmp_path_factory):
    return cached_launches(tmp_path_factory, PLAN)


@pytest.fixture(scope="session")
def host_backend(tmp_path_factory):
    """seccomm.gpu.engine's backend over numpy and the host build of the kernel core
    (tests/hostcore.py): the device engine on real or thread ranks without a GPU."""
    if not any(shutil.which(c) for c in ("cc", "gcc", "clang")):
        pytest.skip("no C compiler for the host build of the kernel core")
    from hostcore import HostBackend, build

    return HostBackend(build(tmp_path_factory.mktemp("hostcore")))


def pytest_generate_tests(metafunc):
    """A test that takes ``world`` runs once per world of :func:`worlds.params`: 1 to 5 ranks as
    threads, or under mpiexec the real ranks."""
    if "world" not in metafunc.fixturenames:
        return
    for mark in metafunc.definition.iter_markers("parametrize"):  # (a test's own ``world`` argument)
        names = mark.args[0]
        if "world" in ([n.strip() for n in names.split(",")] if isinstance(names, str) else names):
            return
    values, ids = worlds.params()
    metafunc.parametrize("world", values, ids=ids, indirect=True)


@pytest.fixture
def world(request):
    return worlds.make(request.param)
