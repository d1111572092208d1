"""Fuzzing what a rank reads from the wire: whatever arrives, only ``SecCommError`` subclasses.

Rank 0 is a real ``SecureComm``; its peer, rank 1, is played by :class:`FuzzPeer`, which
answers the setup exchange and then delivers hypothesis-chosen bytes in place of every frame:
random bytes of random lengths (shorter, equal, longer than the frame), or rank 0's own frames
reflected back, with or without flipped bits.  None of these is an authentic frame from rank 1,
so every collective must raise ``AuthenticationError`` or ``FrameError`` naming rank 1 and the
operation -- never another exception, a crash, or a returned value.  The configuration block of
the setup exchange is fuzzed the same way: it must end in ``ConfigMismatchError``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seccomm import SecCommError, SecureComm
from seccomm.errors import AuthenticationError, ConfigMismatchError, FrameError
from seccomm.handshake import BLOCK_BYTES
from seccomm.transports import Transport

# a random job secret (keys.load_secret refuses patterned ones such as bytes(range(32)))
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")
SUITES = ["aes-256-gcm", "chacha20-poly1305", "aes-256-gmac"]


class _Req:
    __slots__ = ("buf",)

    def __init__(self, buf):
        self.buf = buf


class FuzzPeer(Transport):
    """Rank 0 of 2; rank 1 is this object.  ``deliver(k, frame_len, sent) -> bytes`` makes the
    k-th incoming frame; ``block(mine) -> bytes`` makes rank 1's configuration block."""

    def __init__(self, deliver, block=None):
        self.rank, self.size = 0, 2
        self.deliver, self.block = deliver, block
        self.sent: list[bytes] = []
        self.k = 0

    def bcast(self, buf, root, op_label, timeout=None):
        pass  # rank 0 is the root of the setup broadcast

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        n = len(sendbuf)
        out = np.frombuffer(recvbuf, np.uint8).reshape(-1)
        out[:n] = np.frombuffer(sendbuf, np.uint8)
        theirs = bytes(sendbuf) if self.block is None else self.block(bytes(sendbuf))
        out[n : 2 * n] = np.frombuffer(theirs[:n].ljust(n, b"\0"), np.uint8)

    def isend(self, buf, peer):
        self.sent.append(bytes(buf))
        return None

    def irecv(self, buf, peer):
        return _Req(buf)

    def wait_recv(self, req, timeout, peer, op_label):
        dest = np.frombuffer(req.buf, np.uint8)
        data = self.deliver(self.k, dest.size, self.sent)
        self.k += 1
        if len(data) > dest.size:  # what MPI reports for a message longer than the posted buffer
            raise FrameError(f"{op_label}: message from rank {peer} truncated", peer=peer)
        dest[: len(data)] = np.frombuffer(data, np.uint8)
        return len(data)

    def wait_sends(self, reqs, timeout, peers, op_label):
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
    coll=st.sampled_from(["allreduce_rd", "allreduce_ring", "reduce_scatter", "allgather", "bcast"]),
    dtype=st.sampled_from(["float32", "float16", "int64", "uint8"]),
    count=st.integers(2, 300),
    chunk=st.sampled_from([16, 64, 1 << 20]),
)
def test_fuzzed_frames_raise_only_seccomm_errors(suite, plan, coll, dtype, count, chunk):
    peer = FuzzPeer(make_deliver(plan))
    alg = "ring" if coll == "allreduce_ring" else "recursive_doubling"
    sc = SecureComm(peer, suite, psk=PSK, timeout=1, chunk_bytes=chunk, algorithm=alg, crypto_threads=1)
    x = np.arange(count).astype(dtype)
    sentinel = np.full(count, 7, dtype)
    y = sentinel.copy()
    with pytest.raises(SecCommError) as ei:
        if coll.startswith("allreduce"):
            sc.allreduce(x, y)
        elif coll == "reduce_scatter":
            y = np.empty(sc.block_counts(count)[0], dtype)
            sc.reduce_scatter(x, y)
        elif coll == "allgather":
            sc.allgather(x[: sc.block_counts(count)[0]], y)
        else:
            sc.bcast(y, root=1)
    err = ei.value
    assert isinstance(err, (AuthenticationError, FrameError)), repr(err)
    assert err.peer == 1
    if isinstance(err, AuthenticationError):
        assert err.op in ("allreduce", "reduce_scatter", "allgather", "bcast")
    if coll in ("bcast", "allgather"):  # no unverified value is left in the caller's buffer:
        if coll == "allgather":  # only this rank's own block (copied, not received) is data
            own = sc.block_counts(count)[0]
            assert np.array_equal(y[:own], x[:own])
            y = y[own:]
        assert np.all((y == 7) | (y == 0)), y  # untouched, or wiped after a failed tag


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
def test_fuzzed_configuration_block_raises_config_mismatch(kind, data, flips, value):
    import json
    import struct

    def block(mine: bytes) -> bytes:
        if kind == "random":
            return data
        if kind == "json":  # well-formed length and JSON of any shape
            body = json.dumps(value).encode()[: BLOCK_BYTES - 36]
            return struct.pack(">I", len(body)) + body
        b = bytearray(mine)  # rank 0's own block with bits flipped (MAC or body)
        for f in flips:
            b[f // 8] ^= 1 << (f % 8)
        return bytes(b)

    with pytest.raises(ConfigMismatchError):
        SecureComm(FuzzPeer(make_deliver([("random", b"")]), block), "aes-256-gcm", psk=PSK, timeout=1)
