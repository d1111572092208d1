"""seccomm's errors cross processes whole: each pickles and unpickles to the same class, message
and attributes (mpi4py's lowercase calls, multiprocessing and concurrent.futures pickle them)."""

from __future__ import annotations

import pickle

import pytest

from seccomm.bench.secret import BenchSecretError
import seccomm.errors as errors
from seccomm.errors import SecCommError

#: one instance of every error class, built as the code raises it
MADE = {
    errors.AuthenticationError: lambda: errors.AuthenticationError(
        peer=1, op="allreduce", seq=3, step=0, chunk=2, chunks=4, epoch=1, suite="aes-256-gcm", detail="x"
    ),
    errors.FrameError: lambda: errors.FrameError("too long", peer=2, op="bcast", seq=1),
    errors.TransportTimeout: lambda: errors.TransportTimeout(
        "late", peer=0, op="allgather", seq=5, timeout_s=2.5, link=(0, 1)
    ),
    errors.PeerAbortError: lambda: errors.PeerAbortError("stopped", peer=1, op="allreduce #2", blamed=3),
    errors.ArgumentMismatchError: lambda: errors.ArgumentMismatchError(
        "differ", op="bcast #3", arguments={"root": {0: 0, 1: 1}}
    ),
    errors.ConcurrentUseError: lambda: errors.ConcurrentUseError("busy"),
    errors.ConfigMismatchError: lambda: errors.ConfigMismatchError("suite", peer=2),
    errors.IdentityError: lambda: errors.IdentityError("no host", peer=3),
    errors.KeyScheduleError: lambda: errors.KeyScheduleError("no secret"),
    errors.CommClosedError: lambda: errors.CommClosedError("closed"),
    BenchSecretError: lambda: BenchSecretError("none", speaker=True),
    SecCommError: lambda: SecCommError("base"),
}


def _every_class(cls=SecCommError) -> set:
    out = {cls}
    for sub in cls.__subclasses__():
        out |= _every_class(sub)
    return out


def test_every_error_class_is_made_here():
    """A new error class must be added to MADE (and so to the round trip below)."""
    assert {c for c in _every_class() if c.__module__.startswith("seccomm")} == set(MADE)


@pytest.mark.parametrize("cls", sorted(MADE, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_an_error_pickles_whole(cls):
    err = MADE[cls]()
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is cls
    assert str(back) == str(err) and back.args == err.args
    assert vars(back) == vars(err)
