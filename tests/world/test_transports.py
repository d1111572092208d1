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
def _macs(rank, size=3, key=bytes(range(32))):
    """PairMacs of ``rank`` with one key per pair (a stand-in for KeySchedule.pair_key)."""
    import hashlib

    from seccomm.control import PairMacs

    return PairMacs(rank, size, lambda a, b: hashlib.sha256(key + bytes([a, b])).digest())


def test_notice_round_trip_and_every_forgery_rejected():
    """A notice is bound to its sender and its receiver (the pair's MAC): it opens only at the
    receiver it was sealed for, as from the rank that sealed it, in its session."""
    from seccomm.transports.notices import NOTICE_BYTES, open_notice, seal_notice

    m0, m1, m2 = _macs(0), _macs(1), _macs(2)
    msg = seal_notice(m2, 0, 1, 1)  # rank 2 tells rank 0: it gave up on rank 1 (kind 1)
    assert msg.dtype == np.uint8 and msg.size == NOTICE_BYTES == 32
    assert open_notice(m0, 2, msg.tobytes(), 3) == (1, 1)
    assert open_notice(_macs(0, key=b"\1" * 32), 2, msg.tobytes(), 3) is None  # another session's keys
    assert open_notice(m0, 1, msg.tobytes(), 3) is None  # replayed as another rank's notice
    assert open_notice(m1, 2, msg.tobytes(), 3) is None  # delivered to another receiver
    assert open_notice(m2, 0, msg.tobytes(), 3) is None  # reflected to its sender as rank 0's
    for i in range(NOTICE_BYTES):  # any bit of blamed rank, kind or MAC
        bad = msg.copy()
        bad[i] ^= 1
        assert open_notice(m0, 2, bad.tobytes(), 3) is None, i
    assert open_notice(m0, 2, msg.tobytes()[:-1], 3) is None  # truncated
    assert open_notice(m0, 2, msg.tobytes() + b"\0", 3) is None  # padded
    assert open_notice(m0, 2, seal_notice(m2, 0, 5, 1).tobytes(), 3) is None  # no such rank
    # an abort whose sender could not tell which rank sent the failed message: blamed -1, abort only
    assert open_notice(m0, 2, seal_notice(m2, 0, -1, 1).tobytes(), 3) == (-1, 1)
    for blamed, kind in ((-1, 0), (-1, 2), (-2, 1)):
        assert open_notice(m0, 2, seal_notice(m2, 0, blamed, kind).tobytes(), 3) is None, (blamed, kind)
    assert open_notice(m0, 2, seal_notice(m2, 0, 1, 7).tobytes(), 3) is None  # no such kind


def test_refusal_notice_carries_the_exception_and_the_op_number():
    """A rank that refused its arguments to its op #seq says so in the notice's kind; kinds of no
    known exception are not notices."""
    from seccomm.transports.notices import REFUSALS, open_notice, refusal, refusal_kind, seal_notice

    m0, m1 = _macs(0, 2), _macs(1, 2)
    for seq in (1, 3, 2**40):
        for error in REFUSALS:
            kind = refusal_kind(seq, error)
            assert open_notice(m0, 1, seal_notice(m1, 0, 1, kind).tobytes(), 2) == (1, kind)
            assert refusal(kind) == (seq, error)
    for kind in (
        3,
        3 | 3 << 4,
        3 | 15 << 4 | 1 << 8,
        -(1 << 8) | 3 | 1 << 4,
        4,
        1 << 4,
        5 << 8 | 1 << 4,
        -(1 << 8),
    ):
        assert open_notice(m0, 1, seal_notice(m1, 0, 1, kind).tobytes(), 2) is None, kind


def test_a_give_up_notice_carries_the_number_of_the_op_it_gave_up_in():
    from seccomm.transports.notices import open_notice, seal_notice, waited_kind

    m0, m1 = _macs(0, 2), _macs(1, 2)
    for label, seq in (
        ("allreduce #7", 7),
        ("bcast #1", 1),
        ("close", 0),
        ("setup: hello", 0),
        ("x #2**60", 0),
    ):
        kind = waited_kind(label)
        assert kind & 0xFF == 0 and kind >> 8 == seq, label
        assert open_notice(m0, 1, seal_notice(m1, 0, 1, kind).tobytes(), 2) == (1, kind)


def test_control_keys_are_per_session_and_pair_and_handed_to_the_transport():
    from mpi4py import MPI

    from seccomm.keys import KeySchedule
    from seccomm.suites import get_suite

    suite = get_suite("aes-256-gcm")
    a = KeySchedule(PSK, suite, b"j" * 16, b"a" * 16, 0)
    b = KeySchedule(PSK, suite, b"j" * 16, b"b" * 16, 0)
    assert a.pair_key(0, 1) != b.pair_key(0, 1) and len(a.pair_key(0, 1)) == 32
    assert a.pair_key(0, 1) != a.pair_key(0, 2)
    assert a.pair_key(0, 1) not in (a.finished_key(), a.group_key(0), a.direction_key(0, 0, 1))
    for bad in ((1, 0), (1, 2), (0, 0)):  # lower first, and a pair of this rank only
        with pytest.raises(ValueError, match="lower first"):
            a.pair_key(*bad)
    seen = []

    class Spy(TransportWrapper):
        def authenticate_notices(self, macs):
            seen.append(macs)
            return super().authenticate_notices(macs)

    with SecureComm(MPI.COMM_SELF, "aes-256-gcm", psk=PSK, wrap_transport=Spy) as sc:
        assert len(seen) == 1 and seen[0].rank == 0 and seen[0].size == 1
        assert sc.transport.inner.notices.macs is seen[0]  # the wrapper handed it on
    assert sc.transport.inner.notices.macs is None  # close() drops the pair keys with the comm


def test_notices_before_the_key_are_neither_sent_nor_read():
    from mpi4py import MPI

    from seccomm.transports.mpi import MPITransport

    t = MPITransport(MPI.COMM_SELF, timeout=1)
    n = t.notices
    n.notify(0, 0)
    assert n.sent == [] and n.check() is False
    t.authenticate_notices(_macs(0, 1))
    n.notify(0, 0)  # COMM_SELF: nobody else to tell, but it counts as sent (one notice per run)
    assert n.sent == [None]
    n.notify(0, 0)
    assert n.sent == [None]
    t.close()
    assert Transport().authenticate_notices(_macs(0, 1)) is None  # the base: no notices, no-op


def test_junk_on_the_notice_tag_is_drained_and_counted_per_look():
    """Messages on the notice tag that are not notices (any size, any content) are taken and
    counted, up to 1024 a peer in one look, and the receive is posted again each time, so that
    the genuine notice behind them is still read; a flood is consumed as fast as it is looked
    at, never left to pile up behind one receive."""
    from mpi4py import MPI

    from seccomm.transports import notices
    from seccomm.transports.mpi import MPITransport
    from seccomm.transports.notices import seal_notice

    t = MPITransport(MPI.COMM_SELF, timeout=1)
    n = t.notices
    peer = _macs(1, 2)
    queue = [b"\0" * 32] * 3000 + [seal_notice(peer, 0, 1, 1).tobytes()]

    class Arrived:  # a receive that completes with the next message of the queue
        def Test(self, status):  # noqa: N802 - mpi4py naming
            msg = queue.pop(0)
            n.buf[1, : len(msg)] = np.frombuffer(msg, np.uint8)
            status.Set_elements(MPI.BYTE, len(msg))
            return True

    def post(r):
        n.reqs[r] = Arrived() if queue else MPI.REQUEST_NULL

    try:
        n.size, n.buf = 2, np.zeros((2, notices.NOTICE_BYTES), np.uint8)
        n.reqs = [MPI.REQUEST_NULL, Arrived()]
        n.post = post
        t.authenticate_notices(_macs(0, 2))
        assert n.check() is False and n.told.forged_notices == {1: 1024}
        assert n.check() is False and n.told.forged_notices == {1: 2048}
        assert n.check() is True and n.told.forged_notices == {1: 3000}
        assert n.told.gave_up == {1: 1} and 1 in n.told.aborted  # the genuine one, behind 3000 forgeries
    finally:
        n.size = 1
        n.reqs = [MPI.REQUEST_NULL]
        t.close()


def test_an_oversized_frame_is_named_as_such():
    """MPI's truncation error on a receive from a peer (a padded frame, +1 B to +16 MiB) names
    an oversized or altered frame from that peer, not a transfer it abandoned."""
    from mpi4py import MPI

    from seccomm.transports.mpi import _mpi_error

    big = _mpi_error(MPI.Exception(MPI.ERR_TRUNCATE), 1, "allreduce #3")
    assert big.peer == 1 and big.op == "allreduce #3"
    assert "the message from rank 1 is larger than the frame this rank expected" in str(big)
    assert "padded or altered in transit" in str(big) and "abandoned" not in str(big)
    other = _mpi_error(MPI.Exception(MPI.ERR_OTHER), 2, "bcast #1")
    assert other.peer == 2 and "abandoned the transfer" in str(other)
