"""The compiled two-rank swap (seccomm.pairswap), in-process.

A swap on ``MPI.COMM_SELF`` that sends to itself: what it puts on the wire is checked byte for
byte against ``cryptography`` (the frame: AES-GCM or ChaCha20-Poly1305 of the payload under the
nonce and AAD header the framing layer writes for that op) and against
:meth:`Agreement.record_tail` (the record behind it), for many op numbers, epochs, dtypes and
sizes; what it received is then altered in place to check each code ``finish`` returns (the
result untouched).  On real ranks: tests/mpi_worker.py ``express`` (results, the cases it hands
back to the Python path, and a peer in the other path)."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305
from hypothesis import given, settings
from hypothesis import strategies as st

from seccomm import pairswap as express
from seccomm.control import PairMacs
from seccomm.agreement import Agreement
from seccomm.comm import _names
from seccomm.dtypes import CODES
from seccomm.framing import AAD, KEY_DIRECTION, RECORD_ROOM, FrameContext, Workspace, nonce_bytes

KEY = bytes.fromhex("8c1f5e0a93d24b7e61a05fc3d8e2917b4a6f03c5e9b1d7280f4c6a3e5b9d1c07")
TAIL = bytes.fromhex("01020100ffffffff0000000000000400")  # allreduce, float32, sum, alg 0, no root, count


def test_status_is_one_line():
    s = express.status()
    assert "\n" not in s and ("compiled pair path" in s)


def test_not_built_falls_back_and_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "seccomm.pairswap._pairswap", None)  # (import fails: ImportError)
    monkeypatch.delattr(express, "_pairswap", raising=False)
    monkeypatch.setattr(express, "_mod", None)
    monkeypatch.setattr(express, "_WHY", "")
    assert not express.built() and not express.enabled()
    assert (
        express.status().startswith("compiled pair path not built (ModuleNotFoundError")
        and "Python path" in express.status()
    )


def test_off_by_environment(monkeypatch):
    monkeypatch.setenv("SECCOMM_EXPRESS", "0")
    assert not express.enabled()
    if express.built():
        assert express.status() == "compiled pair path off (SECCOMM_EXPRESS=0): Python path"


built = pytest.mark.skipif(not express.built(), reason=f"{express.status()}")


def _self_swap(aead, dtype, n, clear=False, agreement=None, **change):
    """A swap on COMM_SELF to itself (peer 0), frames sealed and opened under one key, the
    record's tag that of ``agreement`` (an Agreement of rank 0 with world size 2: the pair's
    HMAC object; rank 0 is the lower) or zero.  The record it expects back is the peer's half of
    the digest, so with a real HMAC its own record sent to itself fails (:class:`Mirror` makes
    both halves equal).  ``change``: arguments to pass instead.  Returns (swap, parts)."""
    from mpi4py import MPI

    comm = MPI.COMM_SELF.Dup()
    x = (np.arange(n) % 97 + 1).astype(dtype)
    res, nbytes = np.empty_like(x), x.nbytes
    ws = Workspace()
    s, r = ws.slots("send", [nbytes])[0], ws.slots("recv", [nbytes])[0]
    frame = FrameContext(1, 1, CODES[np.dtype(dtype).name], b"j" * 16, b"c" * 16, 0, 0, 0, n, "sum")
    for slot in (s, r):
        frame.fill(slot, KEY_DIRECTION, 1, 1, 0, 1, 0, 1, n)
    out = np.empty(nbytes, np.uint8)
    mac, lower = agreement.pair_mac(1) if agreement else (None, True)
    if clear:
        wires = s.wire[: nbytes + RECORD_ROOM], r.wire[: nbytes + RECORD_ROOM]
        frames, out, seal, open_ = (s.body, r.body), r.body, None, None
    else:
        wires, frames = (s.wire, r.wire), (s.frame, r.frame)
        seal, open_ = aead.encrypt_into, aead.decrypt_into
    kw = dict(
        comm=comm.handle, peer=0, tag=7, spins=100000, red=express.SUM_CODES[np.dtype(dtype)], theirs_first=0,
        snonce=s.nonce, shdr=s.header, piece=x.view(np.uint8), sframe=frames[0], swire=wires[0],
        rnonce=r.nonce, rhdr=r.header, rframe=frames[1], rwire=wires[1], out=out, cur=x, res=res,
        seal=seal, open=open_, mac=mac, tail=TAIL, lower=lower,
    )  # fmt: skip
    kw.update(change)
    try:
        sw = express.swap(**kw)
    except Exception:
        comm.Free()
        raise
    return sw, dict(comm=comm, x=x, res=res, s=s, r=r, wires=wires)


class Mirror:
    """An HMAC object's stand-in whose digest has two equal halves: a record sent to oneself is
    then the record expected back (the sum path of a self-swap with a tag)."""

    def __init__(self, h):
        self.h = h

    def copy(self):
        return Mirror(self.h.copy())

    def update(self, data):
        self.h.update(data)

    def finalize(self):
        d = self.h.finalize()
        return d[:16] * 2


def _agreement(suite="aes-256-gcm"):
    """Rank 0's Agreement in a world of 2 (pair key: a fixed one)."""
    macs = None if suite == "none" else PairMacs(0, 2, lambda a, b: KEY)
    return Agreement(0, 2, macs, _names, {}, {})


@built
@settings(max_examples=40, deadline=None)
@given(
    seq=st.integers(1, 2**64 - 1),
    op_index=st.integers(0, 2**32 - 1),
    epoch=st.integers(0, 2**32 - 1),
    dtype=st.sampled_from(["float32", "float64", "int32", "int64", "uint8"]),
    n=st.sampled_from([1, 3, 1000, 4099]),
    suite=st.sampled_from(["aes-256-gcm", "chacha20-poly1305", "none"]),
)
def test_the_wire_is_the_python_paths(seq, op_index, epoch, dtype, n, suite):
    aead = AESGCM(KEY) if suite == "aes-256-gcm" else ChaCha20Poly1305(KEY)
    agreement = _agreement(suite)
    mac, lower = agreement.pair_mac(1)
    mirrored = dict(mac=None if mac is None else Mirror(mac), lower=lower)
    sw, p = _self_swap(aead, dtype, n, clear=suite == "none", agreement=agreement, **mirrored)
    try:
        got = sw.start(seq, op_index, epoch)
        assert got == len(p["wires"][0])
        s = p["s"]
        nonce, hdr = bytes(s.nonce), bytes(s.header)
        assert nonce == nonce_bytes(op_index, 1, 0, 0)
        fields = AAD.unpack(hdr)
        assert fields[9:11] == (epoch, seq)  # (the header's epoch and op number: the rest as filled)
        wire = bytes(p["wires"][1])
        body = p["x"].tobytes()
        frame = body if suite == "none" else aead.encrypt(nonce, body, hdr)
        desc = seq.to_bytes(8, "big") + TAIL
        if mac is not None:  # (the mirror's tag: the first half of the pair's digest, twice)
            h = mac.copy()
            h.update(desc)
            assert wire == frame + TAIL + h.finalize()[:16]  # frame, then the record after its number
        else:
            assert wire == frame + TAIL + bytes(16)
        assert sw.finish(got) == 0
        assert np.array_equal(p["res"], p["x"] + p["x"])
        assert sw.sent()
    finally:
        sw.requests()
        p["comm"].Free()


@built
@pytest.mark.parametrize("suite", ["aes-256-gcm", "none"])
def test_finish_codes_leave_the_result_alone(suite):
    sw, p = _self_swap(AESGCM(KEY), "float32", 1000, clear=suite == "none")
    try:
        got = sw.start(5, 4, 0)
        wire = np.frombuffer(p["wires"][1], np.uint8)
        p["res"].fill(-1)
        for cut in (got - 1, got + 1, 0, 31):
            assert sw.finish(cut) == 1  # LENGTH
        wire[-1] ^= 1  # the record's last tag byte
        assert sw.finish(got) == 2  # RECORD
        wire[-1] ^= 1
        if suite != "none":
            for i in (0, got - 33):  # the first body byte, the frame's last tag byte
                wire[i] ^= 1
                assert sw.finish(got) == 3  # TAG
                wire[i] ^= 1
        assert np.all(p["res"] == -1) and sw.done == 0
        assert sw.finish(got) == 0 and np.array_equal(p["res"], p["x"] * 2) and sw.done == 1
    finally:
        sw.requests()
        p["comm"].Free()


@built
@pytest.mark.parametrize(
    "change, match",
    [
        (dict(piece=np.zeros(8, np.uint8)), "do not match"),
        (dict(res=np.zeros(3, np.float32)), "do not match"),
        (dict(open=None), "do not match"),  # (a sealed hop that would not open)
        (dict(red=9), "reduction"),
        (dict(tail=bytes(15)), "tail: 15 bytes"),
        (dict(snonce=bytearray(11)), "nonce of 12 bytes"),
        (dict(rnonce=bytearray(13)), "nonce of 12 bytes"),
        (dict(shdr=bytearray(88)), "header of 89"),  # (shorter: the frame's AAD read past it)
        (dict(rhdr=bytearray(90)), "header of 89"),
    ],
)
def test_bad_arguments_are_refused(change, match):
    with pytest.raises(ValueError, match=match):
        _self_swap(AESGCM(KEY), "float32", 16, **change)


@built
@pytest.mark.parametrize("name, size", [("snonce", 12), ("shdr", 89), ("rnonce", 12), ("rhdr", 89)])
def test_buffers_the_swap_writes_must_be_writable(name, size):
    """The swap writes each op's nonces and headers in place: a read-only buffer (bytes) is
    refused, never written through."""
    with pytest.raises(BufferError, match="not writable"):
        _self_swap(AESGCM(KEY), "float32", 10, **{name: bytes(size)})


@built
@pytest.mark.parametrize("bad, error", [(2**70, OverflowError), ("48", TypeError)])
def test_finish_refuses_a_count_that_is_not_an_integer_it_can_read(bad, error):
    sw, p = _self_swap(AESGCM(KEY), "float32", 10)
    try:
        with pytest.raises(error):
            sw.finish(bad)
    finally:
        p["comm"].Free()


@built
def test_an_mpi_error_at_the_start_is_reported_not_lost():
    """A send MPI refuses (peer 5 of a world of one): start() returns MPIERR with MPI's code
    kept, never a count of a receive that was not posted."""
    from mpi4py import MPI

    sw, p = _self_swap(AESGCM(KEY), "float32", 10, peer=5)
    try:
        assert sw.start(1, 0, 0) == express.MPIERR
        assert MPI.Get_error_class(sw.mpi_error) == MPI.ERR_RANK
    finally:
        sw.requests()
        p["comm"].Free()


class ShortMac(Mirror):
    """An HMAC stand-in whose digest is 31 bytes: the swap reads 32."""

    def copy(self):
        return ShortMac(self.h.copy())

    def finalize(self):
        return self.h.finalize()[:31]


class BrokenMac(Mirror):
    """An HMAC stand-in whose copy() fails (as a closed or foreign object would)."""

    def copy(self):
        raise RuntimeError("this MAC cannot be copied")


@built
@pytest.mark.parametrize(
    "mac, error, match",
    [(BrokenMac, RuntimeError, "cannot be copied"), (ShortMac, ValueError, "HMAC too short")],
)
def test_an_error_of_the_pair_mac_is_raised_at_the_op_start(mac, error, match):
    """The record's tag needs a copy of the pair's HMAC and 32 bytes of its digest: a copy that
    fails, or a shorter digest, is the op's error, raised by start(), never a record built on
    nothing or a read past the digest."""
    from cryptography.hazmat.primitives import hashes, hmac

    sw, p = _self_swap(AESGCM(KEY), "float32", 10, mac=mac(hmac.HMAC(KEY, hashes.SHA256())))
    try:
        with pytest.raises(error, match=match):
            sw.start(1, 0, 0)
    finally:
        sw.requests()
        p["comm"].Free()


@built
def test_a_mac_must_be_an_hmac():
    with pytest.raises(TypeError, match="HMAC object or None"):
        _self_swap(AESGCM(KEY), "float32", 16, mac=b"key")


@built
@settings(max_examples=20, deadline=None)
@given(seq=st.integers(1, 2**64 - 1))
def test_the_record_is_the_python_paths_and_the_one_expected_back_is_the_peers(seq):
    """The compiled record is :meth:`Agreement.record_tail`'s (the lower rank's tag is the pair
    digest's first half, the higher's the second), and the record expected back is the other
    half: its own record, sent to itself, fails (RECORD)."""
    for rank in (0, 1):
        macs = PairMacs(rank, 2, lambda a, b: KEY)
        agreement = Agreement(rank, 2, macs, _names, {}, {})
        mac, low = agreement.pair_mac(1 - rank)
        assert low == (rank == 0)
        sw, p = _self_swap(AESGCM(KEY), "float32", 10, mac=mac, lower=low)
        try:
            got = sw.start(seq, 0, 0)
            agreement.record_tail(seq, TAIL)
            assert bytes(p["wires"][1])[-32:] == agreement.out[1 - rank, 8:].tobytes()
            assert sw.finish(got) == 2  # RECORD
        finally:
            sw.requests()
            p["comm"].Free()


@built
def test_an_uninitialised_swap_refuses_every_method():
    sw = express._mod.Swap.__new__(express._mod.Swap)
    for call in (lambda: sw.start(1, 0, 0), lambda: sw.finish(48), sw.sent, sw.requests):
        with pytest.raises(RuntimeError, match="not initialised"):
            call()


@built
@pytest.mark.parametrize("op_index, epoch", [(2**32, 0), (0, 2**32)])
def test_the_op_index_and_epoch_are_32_bit(op_index, epoch):
    sw, p = _self_swap(AESGCM(KEY), "float32", 10)
    try:
        with pytest.raises(OverflowError):
            sw.start(1, op_index, epoch)
    finally:
        p["comm"].Free()


@built
def test_the_module_and_mpi4py_share_one_mpi_library():
    from mpi4py import MPI

    text, world = express._mod.library()
    assert text.strip() == MPI.Get_library_version().strip() and world == MPI.COMM_WORLD.handle


def test_another_mpi_library_is_not_used(monkeypatch):
    class Other:
        @staticmethod
        def library():
            return "Open MPI v5.0.0", 1

    monkeypatch.setitem(sys.modules, "seccomm.pairswap._pairswap", Other)
    monkeypatch.setattr(express, "_pairswap", Other, raising=False)
    monkeypatch.setattr(express, "_mod", None)
    monkeypatch.setattr(express, "_WHY", "")
    assert not express.built()
    assert "another MPI library" in express.status() and express.status().endswith("Python path")
