"""The transports package: the shared poll-until-deadline loop, the wrappers, import hygiene and
``SecureComm.transport`` (in-process, world size 1 on COMM_SELF)."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

from seccomm import SecureComm
from seccomm.transports import (
    Backoff,
    RecordingTransport,
    TamperTransport,
    Transport,
    TransportWrapper,
    poll_until,
)

# a random job secret (keys.load_secret refuses patterned ones such as bytes(range(32)))
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")


def test_poll_until_done_expired_and_checked():
    polls = iter([False, False, True])
    assert poll_until(lambda: next(polls), 1.0, lambda: pytest.fail("expired")) is True
    t0 = time.monotonic()
    assert poll_until(lambda: False, 0.05, lambda: "late", Backoff(spins=10, yield_until=50)) == "late"
    assert 0.05 <= time.monotonic() - t0 < 1.0
    seen = []

    def check():  # e.g. a give-up notice arrived: raises before the deadline
        seen.append(1)
        if len(seen) == 2:
            raise RuntimeError("notice")

    with pytest.raises(RuntimeError, match="notice"):
        poll_until(lambda: False, 5.0, lambda: None, Backoff(spins=3), check=check, check_every=4)
    assert len(seen) == 2  # polls 4 and 8: after the spin phase, every 4th


def test_poll_until_done_first_needs_no_clock():
    assert poll_until(lambda: True, -1.0, lambda: pytest.fail("expired")) is True


class _Loop(Transport):
    """Rank 0 of 1: records what the wrappers hand on."""

    rank, size = 0, 1

    def __init__(self):
        self.sent = []

    def isend(self, buf, peer):
        self.sent.append((peer, np.frombuffer(buf, np.uint8).copy()))
        return len(self.sent)

    def bcast(self, buf, root, op_label, timeout=None):
        self.label = op_label


def test_tamper_flips_a_private_copy():
    inner = _Loop()
    t = TamperTransport(inner, lambda i, peer, n: -1 if i == 1 else None)
    frame = np.zeros(32, np.uint8)
    t.isend(frame, 0)
    t.isend(frame, 0)
    assert (t.sent, t.tampered) == (2, 1)
    assert not frame.any() and not inner.sent[0][1].any() and inner.sent[1][1][-1] == 1


def test_recording_keeps_frames_and_setup():
    t = RecordingTransport(_Loop())
    t.isend(np.arange(20, dtype=np.uint8), 0)
    t.bcast(np.ones(4, np.uint8), 0, op_label="setup")
    assert [(k, p) for k, p, _ in t.frames] == [("frame", 0), ("bcast", "all")]
    assert t.wire_bytes() == 24 and t.inner.label == "setup"


def test_wrapper_delegates_and_keeps_own_buffers():
    inner = _Loop()
    inner.extra = "x"
    w = TransportWrapper(inner)
    assert w.extra == "x" and (w.rank, w.size) == (0, 1)
    own = np.ones(8, np.uint8)
    w.send_own(own, 0)
    assert w._own == [own] and inner.sent[0][1].sum() == 8


def test_package_import_needs_no_torch_cupy_or_mpi():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['cupy'] = None\n"
        "import seccomm.transports, seccomm.transports.wrappers\n"
        "assert 'mpi4py.MPI' not in sys.modules, 'mpi4py imported eagerly'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def test_securecomm_transport_is_the_wrapped_one():
    from mpi4py import MPI

    with SecureComm(MPI.COMM_SELF, "aes-256-gcm", psk=PSK, wrap_transport=RecordingTransport) as sc:
        assert isinstance(sc.transport, RecordingTransport)
        # the setup's hello, key delivery (recorded on its root) and finished
        assert [k for k, _, _ in sc.transport.frames][:3] == ["allgather", "scatter", "allgather"]
        with pytest.raises(AttributeError):
            sc.transport = None


# -- authenticated give-up notices (seccomm.transports.mpi) -------------------------------------
def test_notice_round_trip_and_every_forgery_rejected():
    from seccomm.transports.mpi import NOTICE_BYTES, open_notice, seal_notice

    key = bytes(range(32))
    msg = seal_notice(key, 2, 1, 1)
    assert msg.dtype == np.uint8 and msg.size == NOTICE_BYTES
    assert open_notice(key, 2, msg.tobytes(), 3) == (1, 1)
    assert open_notice(b"\1" * 32, 2, msg.tobytes(), 3) is None  # another session's key
    assert open_notice(key, 0, msg.tobytes(), 3) is None  # replayed as another rank's notice
    for i in range(NOTICE_BYTES):  # any bit of blamed rank, kind or MAC
        bad = msg.copy()
        bad[i] ^= 1
        assert open_notice(key, 2, bad.tobytes(), 3) is None, i
    assert open_notice(key, 2, msg.tobytes()[:-1], 3) is None  # truncated
    assert open_notice(key, 2, msg.tobytes() + b"\0", 3) is None  # padded
    assert open_notice(key, 2, seal_notice(key, 2, 5, 1).tobytes(), 3) is None  # no such rank
    assert open_notice(key, 2, seal_notice(key, 2, 1, 7).tobytes(), 3) is None  # no such kind


def test_refusal_notice_carries_the_exception_and_the_op_number():
    """Issue 17: a rank that refused its arguments to its op #seq says so in the notice's kind;
    kinds of no known exception are not notices."""
    from seccomm.transports.mpi import REFUSALS, open_notice, refusal, refusal_kind, seal_notice

    key = bytes(range(32))
    for seq in (1, 3, 2**40):
        for error in REFUSALS:
            kind = refusal_kind(seq, error)
            assert open_notice(key, 1, seal_notice(key, 1, 1, kind).tobytes(), 2) == (1, kind)
            assert refusal(kind) == (seq, error)
    for kind in (3, 3 | 3 << 4, 3 | 15 << 4 | 1 << 8, -(1 << 8) | 3 | 1 << 4, 4, 1 << 8):
        assert open_notice(key, 1, seal_notice(key, 1, 1, kind).tobytes(), 2) is None, kind


def test_notice_key_is_per_session_and_handed_to_the_transport():
    from mpi4py import MPI

    from seccomm.keys import KeySchedule
    from seccomm.suites import get_suite

    suite = get_suite("aes-256-gcm")
    a = KeySchedule(PSK, suite, b"j" * 16, b"a" * 16, 0)
    b = KeySchedule(PSK, suite, b"j" * 16, b"b" * 16, 0)
    assert a.notice_key() != b.notice_key() and len(a.notice_key()) == 32
    assert a.notice_key() not in (a.finished_key(), a.group_key(0), a.direction_key(0, 0, 1))
    seen = []

    class Spy(TransportWrapper):
        def authenticate_notices(self, key):
            seen.append(key)
            return super().authenticate_notices(key)

    with SecureComm(MPI.COMM_SELF, "aes-256-gcm", psk=PSK, wrap_transport=Spy) as sc:
        assert seen == [sc._keys.notice_key()]
        assert sc.transport.inner._notice_key == seen[0]  # the wrapper handed it on


def test_notices_before_the_key_are_neither_sent_nor_read():
    from mpi4py import MPI

    from seccomm.transports.mpi import MPITransport

    t = MPITransport(MPI.COMM_SELF, timeout=1)
    t._notify(0)
    assert t._nsent == [] and t._check_notices() is False
    t.authenticate_notices(bytes(32))
    t._notify(0)  # COMM_SELF: nobody else to tell, but the notice is made
    assert len(t._nsent) == 1 and t._nsent[0].size == 48
    t.close()
    assert Transport().authenticate_notices(b"k") is None  # the base: no notices, no-op
