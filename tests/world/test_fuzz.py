"""Fuzzing what a rank reads from the wire: whatever arrives, only ``SecCommError`` subclasses.

Rank 0 is a real ``SecureComm``; its peer, rank 1, is played by :class:`FuzzPeer`, which
answers the setup exchange and then delivers hypothesis-chosen bytes in place of every frame:
random bytes of random lengths (shorter, equal, longer than the frame), or rank 0's own frames
reflected back, with or without flipped bits.  None of these is an authentic frame from rank 1,
so every collective must raise ``AuthenticationError`` or ``FrameError`` naming rank 1 and the
operation -- never another exception, a crash, or a returned value.  Rank 1's setup hello and
finished message (:mod:`seccomm.handshake`) are fuzzed the same way: a fuzzed hello must end in
``ConfigMismatchError``, a fuzzed finished message in ``AuthenticationError`` naming rank 1
(a failure report is MACed too: a forged one blames the rank whose message was altered).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seccomm import SecCommError, SecureComm
from seccomm.errors import AuthenticationError, ConfigMismatchError, FrameError
from seccomm import handshake
from seccomm.handshake import FINISHED_BYTES, HELLO_BYTES
from seccomm.keys import KeySchedule, hello_key, hmac_sha256
from seccomm.suites import get_suite
from seccomm.transports import Transport

BLOCK_BYTES = HELLO_BYTES

# a random job secret (keys.load_secret refuses patterned ones such as bytes(range(32)))
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")
SUITES = ["aes-256-gcm", "chacha20-poly1305", "aes-256-gmac"]


class _Req:
    __slots__ = ("buf",)

    def __init__(self, buf):
        self.buf = buf


class PeerSetup:
    """Rank 1's side of the setup (psk mode), built from :mod:`seccomm.handshake`'s pieces: its
    hello answers rank 0's with the same settings, its finished MAC covers the transcript."""

    def __init__(self):
        self.hello = None

    def answer_hello(self, theirs: bytes) -> bytes:
        h0 = handshake.decode_hello(theirs)
        self.job_id = handshake.job_digest(h0.settings["job_id"])
        self.suite = get_suite(h0.settings["suite"])
        mine = handshake.Hello(1, np.random.bytes(32), 1, None, h0.settings, None)
        self.hello = handshake.encode_hello(mine, hello_key(PSK, self.job_id)).tobytes()
        self.transcript = handshake.Transcript.from_rows(
            np.frombuffer(theirs + self.hello, np.uint8).reshape(2, -1)
        )
        return self.hello

    def answer_finished(self) -> bytes:
        t = self.transcript
        keys = KeySchedule(PSK, self.suite, t.salt(self.job_id), t.digest(), 1)
        header = handshake.OK.to_bytes(4, "big") + b"\xff" * 4
        tag = hmac_sha256(keys.finished_key(), handshake.finished_input(t.digest(), 1, header))
        return (header + tag).ljust(handshake.FINISHED_BYTES, b"\0")


class FuzzPeer(Transport):
    """Rank 0 of 2; rank 1 is this object.  ``deliver(k, frame_len, sent) -> bytes`` makes the
    k-th incoming frame; ``block(honest) -> bytes`` makes rank 1's hello from the one an honest
    rank 1 would send, ``finished(honest) -> bytes`` its finished message."""

    def __init__(self, deliver, block=None, finished=None):
        self.rank, self.size = 0, 2
        self.deliver, self.block, self.finished = deliver, block, finished
        self.peer = PeerSetup()
        self.sent: list[bytes] = []
        self.aborted: list = []
        self.k = 0

    def scatter(self, sendbuf, recvbuf, root, op_label, timeout=None):
        np.copyto(recvbuf, np.asarray(sendbuf)[0])  # rank 0 is the root of the key delivery

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        n = len(sendbuf)
        out = np.frombuffer(recvbuf, np.uint8).reshape(-1)
        out[:n] = np.frombuffer(sendbuf, np.uint8)
        if n == HELLO_BYTES:
            theirs = self.peer.answer_hello(bytes(sendbuf))
            theirs = theirs if self.block is None else self.block(theirs)
        else:
            honest = self.peer.answer_finished()
            theirs = honest if self.finished is None else self.finished(honest)
        out[n : 2 * n] = np.frombuffer(theirs[:n].ljust(n, b"\0"), np.uint8)

    #: rank 0's Agreement (set once the SecureComm exists): what an honest rank 1 sends as its
    #: argument record; ``fuzz_records``: deliver the record through ``deliver`` like a frame
    agreement = None
    fuzz_records = False

    def agree(self, record, table):
        op_label = self.op_label
        self.sent.append(bytes(record))
        if self.fuzz_records:
            got = self.wait_recv(_Req(table[1]), 1)
            if got != len(record):
                raise FrameError(f"{op_label}: record of {got} bytes", peer=1)
            return
        table[1] = np.frombuffer(self.agreement._expect, np.uint8).reshape(2, -1)[1]

    def isend(self, buf, peer):
        self.sent.append(bytes(buf))
        return None

    def abort(self, blame):
        self.aborted.append(blame)

    def irecv(self, buf, peer):
        return _Req(buf)

    def wait_recv(self, req, peer):
        op_label = self.op_label
        dest = np.frombuffer(req.buf, np.uint8)
        data = self.deliver(self.k, dest.size, self.sent)
        self.k += 1
        if len(data) > dest.size:  # what MPI reports for a message longer than the posted buffer
            raise FrameError(f"{op_label}: message from rank {peer} truncated", peer=peer)
        dest[: len(data)] = np.frombuffer(data, np.uint8)
        return len(data)

    def wait_sends(self, reqs, peers):
        pass


delivery = st.one_of(
    st.tuples(st.just("random"), st.binary(max_size=600)),
    st.tuples(st.just("exact"), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("reflect"), st.lists(st.tuples(st.integers(0, 10**6), st.integers(0, 7)), max_size=3)),
)


def make_deliver(plan):
    def deliver(k, frame_len, sent):
        kind, arg = plan[k % len(plan)]
        if kind == "random":
            return arg
        if kind == "exact":  # random bytes of exactly the expected length
            return np.random.default_rng(arg).integers(0, 256, frame_len, dtype=np.uint8).tobytes()
        frame = bytearray(sent[-1] if sent else b"")
        for off, bit in arg:  # reflected frame, some bits flipped (possibly none)
            if frame:
                frame[off % len(frame)] ^= 1 << bit
        return bytes(frame)

    return deliver


@pytest.mark.parametrize("suite", SUITES)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=st.lists(delivery, min_size=1, max_size=4),
    coll=st.sampled_from(
        ["allreduce_rd", "allreduce_ring", "reduce_scatter", "allgather", "bcast", "alltoall"]
    ),
    dtype=st.sampled_from(["float32", "float16", "int64", "uint8"]),
    count=st.integers(2, 300),
    chunk=st.sampled_from([16, 64, 1 << 20]),
)
def test_fuzzed_frames_raise_only_seccomm_errors(suite, plan, coll, dtype, count, chunk):
    peer = FuzzPeer(make_deliver(plan))
    alg = "ring" if coll == "allreduce_ring" else "recursive_doubling"
    sc = SecureComm(peer, suite, psk=PSK, timeout=1, chunk_bytes=chunk, algorithm=alg, crypto_threads=1)
    peer.agreement = sc.agreement  # rank 1 agrees on the arguments: the frames are fuzzed
    count -= count % 2 if coll == "alltoall" else 0  # two blocks of count/2
    x = np.arange(count).astype(dtype)
    sentinel = np.full(count, 7, dtype)
    y = sentinel.copy()
    _never_into(sc, y)
    with pytest.raises(SecCommError) as ei:
        if coll.startswith("allreduce"):
            sc.allreduce(x, y)
        elif coll == "reduce_scatter":
            y = np.empty(sc.block_counts(count)[0], dtype)
            sc.reduce_scatter(x, y)
        elif coll == "allgather":
            sc.allgather(x[: sc.block_counts(count)[0]], y)
        elif coll == "alltoall":
            sc.alltoall(x, y)
        else:
            sc.bcast(y, root=1)
    err = ei.value
    assert isinstance(err, (AuthenticationError, FrameError)), repr(err)
    assert err.peer == 1
    if isinstance(err, AuthenticationError):
        assert err.op in ("allreduce", "reduce_scatter", "allgather", "bcast", "alltoall")
    if coll in ("bcast", "allgather", "alltoall"):  # no unverified byte ever reached the caller:
        if coll != "bcast":  # only this rank's own block (copied, not received) is data
            own = sc.block_counts(count)[0] if coll == "allgather" else count // 2
            assert np.array_equal(y[:own], x[:own])
            y = y[own:]
        assert np.all(y == 7), y  # untouched: not the forged decryption, not wiped to zeros


@pytest.mark.parametrize("suite", [s for s in SUITES if s != "none"])
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plan=st.lists(delivery, min_size=1, max_size=2), coll=st.sampled_from(["allreduce", "bcast"]))
def test_fuzzed_argument_records_raise_before_any_frame(suite, plan, coll):
    """Rank 1's argument record, fuzzed: random, of the right length, or rank 0's own reflected
    with bits flipped (none flipped: a reflection, which the sender mask makes fail).  Rank 0
    raises naming rank 1, sends no frame and leaves its buffer alone."""
    peer = FuzzPeer(make_deliver(plan))
    sc = SecureComm(peer, suite, psk=PSK, timeout=1, crypto_threads=1)
    peer.agreement, peer.fuzz_records = sc.agreement, True
    x, y = np.arange(8, dtype=np.float32), np.full(8, 7, np.float32)
    sent = len(peer.sent)
    with pytest.raises(SecCommError) as ei:
        sc.allreduce(x, y) if coll == "allreduce" else sc.bcast(y, root=1)
    assert isinstance(ei.value, (AuthenticationError, FrameError)), repr(ei.value)
    assert ei.value.peer == 1 and np.all(y == 7)
    assert len(peer.sent) == sent + 1  # its own record only: no frame left this rank
    name = "allreduce" if coll == "allreduce" else "bcast"
    assert sc.sequence.broken == f"{name} #1 failed ({type(ei.value).__name__})"
    assert peer.aborted == [1]  # the ranks waiting on this one stop now


def _never_into(sc, caller):
    """Wrap ``sc``'s keyed suites so that every ``open`` asserts it does not write into
    ``caller`` (an AEAD writes before the tag check; GMAC/none must leave ``out`` alone)."""
    keys = sc.session.keys
    direction, group = keys.direction, keys.group

    class Checked:
        def __init__(self, inner):
            self.inner, self.suite = inner, inner.suite

        def open(self, slot, out):
            out = np.frombuffer(out, np.uint8)
            shared = np.shares_memory(out, caller.view(np.uint8))
            assert not (shared and self.suite.confidential), "decrypting into the caller's buffer"
            was = out.copy()
            try:
                return self.inner.open(slot, out)
            finally:
                assert not shared or np.array_equal(out, was), "open wrote into the caller's buffer"

        def seal(self, slot, pt):
            return self.inner.seal(slot, pt)

    keys.direction = lambda e, a, b: Checked(direction(e, a, b))
    keys.group = lambda e: Checked(group(e))


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(["random", "mutated", "json"]),
    data=st.binary(max_size=BLOCK_BYTES),
    flips=st.lists(st.integers(0, BLOCK_BYTES * 8 - 1), min_size=1, max_size=4, unique=True),
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
        max_leaves=6,
    ),
)
def test_fuzzed_hello_raises_config_mismatch(kind, data, flips, value):
    import json
    import struct

    def block(honest: bytes) -> bytes:
        if kind == "random":
            return data
        if kind == "json":  # well-formed length and JSON of any shape
            body = json.dumps(value).encode()[: BLOCK_BYTES - 36]
            return struct.pack(">I", len(body)) + body
        b = bytearray(honest)  # rank 1's honest hello with bits flipped (length, body, padding or MAC)
        for f in flips:
            b[f // 8] ^= 1 << (f % 8)
        return bytes(b)

    with pytest.raises(ConfigMismatchError) as ei:
        SecureComm(FuzzPeer(make_deliver([("random", b"")]), block), "aes-256-gcm", psk=PSK, timeout=1)
    assert ei.value.peer == 1 and "setup" in str(ei.value)


def _nested(honest: bytes, where: str, depth: int) -> bytes:
    """Rank 1's hello with a JSON array nested ``depth`` deep: as the whole body, or as the value
    of one setting (the rest of the hello well formed)."""
    import json
    import struct

    deep = "[" * depth + "]" * depth
    if where == "body":
        body = deep.encode()
    else:
        d = json.loads(honest[4 : 4 + struct.unpack(">I", honest[:4])[0]])
        d["settings"]["suite"] = "@"
        body = json.dumps(d, sort_keys=True, separators=(",", ":")).replace('"@"', deep).encode()
    return struct.pack(">I", len(body)) + body


@pytest.mark.parametrize("where", ["body", "setting"])
@pytest.mark.parametrize("depth", [2, 990, 1000])
def test_deeply_nested_hello_raises_config_mismatch(where, depth):
    """A hello nested deeper than the recursion limit is unreadable (``ConfigMismatchError``
    naming rank 1), not a ``RecursionError`` on the receiving rank while the others wait out the
    deadline of the next message; a nested setting, whatever its depth, is not a setting."""
    peer = FuzzPeer(make_deliver([("random", b"")]), lambda h: _nested(h, where, depth))
    with pytest.raises(ConfigMismatchError) as ei:
        SecureComm(peer, "aes-256-gcm", psk=PSK, timeout=1)
    assert ei.value.peer == 1 and "unreadable" in str(ei.value)


def test_fuzz_peer_answers_the_setup_honestly():
    """Without fuzzing, the simulated rank 1 completes the setup: the fuzz tests start from a
    setup that works, so what fails is what they fuzz."""
    SecureComm(FuzzPeer(make_deliver([("random", b"")])), "aes-256-gcm", psk=PSK, timeout=1).close()


@settings(max_examples=200, deadline=None)
@given(
    kind=st.sampled_from(["random", "mutated", "status"]),
    data=st.binary(min_size=FINISHED_BYTES, max_size=FINISHED_BYTES),
    flips=st.lists(st.integers(0, FINISHED_BYTES * 8 - 1), min_size=1, max_size=4, unique=True),
    status=st.tuples(st.integers(1, 2**32 - 1), st.integers(0, 2**32 - 1)),
)
def test_fuzzed_finished_raises_a_setup_error(kind, data, flips, status):
    import struct

    def finished(honest: bytes) -> bytes:
        if kind == "random":
            return data
        if kind == "status":  # a failure report rank 1 never sent (its MAC is not the report's)
            return struct.pack(">II", *status) + honest[8:]
        b = bytearray(honest)
        for f in flips:
            b[f // 8] ^= 1 << (f % 8)
        return bytes(b)

    peer = FuzzPeer(make_deliver([("random", b"")]), finished=finished)
    with pytest.raises(AuthenticationError) as ei:
        SecureComm(peer, "aes-256-gcm", psk=PSK, timeout=1)
    assert "setup" in str(ei.value) and ei.value.peer == 1  # the forgery names rank 1's message, never rank 0
