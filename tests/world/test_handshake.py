"""The setup messages of :mod:`seccomm.handshake` as docs/design.md ("Setup") specifies them, on
an in-process world of threads (tests/threadworld.py):

- on the wire: every hello, key delivery, finished message and failure report recorded from a
  real setup is checked against the documented layout and formulas, recomputed here with
  hashlib/hmac and ``cryptography`` (not with seccomm's own helpers), so a change of a label, a
  field or its order fails here, and an auditor can check a recorded setup from the doc alone;
- psk-dhe: no key of the session follows from the job secret and the recorded setup;
- a hello is read only in its one canonical encoding: the same content spelled otherwise, or a
  field of another type, is unreadable even under a valid MAC (what an insider, who holds the job
  secret, could send);
- failure reports: an authentic one names the rank it blames (a rank outside the communicator
  becomes the reporting rank); several are raised in the documented order;
- what every error names: the rank, the op "setup", the failed primitive, the setting;
- a rank that stops at any setup message: every other rank times out naming that message.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import struct

import numpy as np
import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from seccomm import AuthenticationError, ConfigMismatchError, SecureComm, TransportTimeout
from seccomm.handshake import (
    FINISHED_BYTES,
    HELLO_BYTES,
    Hello,
    decode_hello,
    encode_hello,
    establish,
    job_label,
)
from seccomm.keys import KEY_EXCHANGES, KeySchedule
from seccomm.suites import get_suite
from seccomm.transports import TransportWrapper
from test_setup import PSK, Replayer, build
from threadworld import World

LABEL = "handshake-test-job"
SUITE = "aes-256-gcm"
NOBODY = 0xFFFFFFFF
BODY_MAX = HELLO_BYTES - 4 - 32  # docs/design.md: u32 length | body | zero padding | 32-byte MAC


def hkdf(ikm: bytes, salt: bytes, info: bytes) -> bytes:
    return HKDF(hashes.SHA256(), 32, salt, info).derive(ikm)


def mac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, "sha256").digest()


JOB_ID = hashlib.sha256(b"seccomm job " + LABEL.encode()).digest()[:16]
K_HELLO = hkdf(PSK, JOB_ID, b"seccomm/1 hello")


def raw_hello(body: bytes) -> np.ndarray:
    """A hello block laid out as documented: u32 length, body, zeros, HMAC-SHA256(K_hello,
    "seccomm/1 hello" | body)."""
    head = struct.pack(">I", len(body)) + body
    tag = mac(K_HELLO, b"seccomm/1 hello" + body)
    return np.frombuffer(head.ljust(HELLO_BYTES - 32, b"\0") + tag, np.uint8).copy()


def body_of(row) -> dict:
    raw = bytes(row)
    return json.loads(raw[4 : 4 + struct.unpack(">I", raw[:4])[0]])


def canonical(d: dict) -> bytes:
    return json.dumps(d, sort_keys=True, separators=(",", ":")).encode()


def run_setup(size, kx="psk", edits=None, per_rank=None, **kw):
    """A setup on a world of ``size`` ranks; ``edits``: {rank: edit(i, rows)} on what that rank
    receives; ``per_rank``: {argument: [value on rank 0, 1, ...]}.  (every rank's result or
    exception, every rank's Replayer)"""
    world = World(size)
    trs = world.transports()
    reps = [Replayer(t, edit=(edits or {}).get(r)) for r, t in enumerate(trs)]

    def one(r):
        mine = {k: v[r] for k, v in (per_rank or {}).items()}
        return build(trs[r], lambda t: reps[r], key_exchange=kx, job_id=LABEL, **{**kw, **mine})

    return world.run(one), reps


# -- on the wire ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kx", KEY_EXCHANGES)
def test_the_setup_on_the_wire_is_as_documented(kx):
    res, reps = run_setup(3, kx)
    assert all(isinstance(s, SecureComm) for s in res), res
    hellos, nonces = reps[0].seen[0], []
    for r in range(3):
        raw = hellos[r].tobytes()
        assert np.array_equal(reps[r].seen[0], hellos)  # every rank holds the same transcript
        d = body_of(raw)
        n = struct.unpack(">I", raw[:4])[0]
        assert raw[4 : 4 + n] == canonical(d) and not any(raw[4 + n : -32])
        assert raw[-32:] == mac(K_HELLO, b"seccomm/1 hello" + raw[4 : 4 + n])
        assert sorted(d) == ["chain", "error", "host", "machine", "nonce", "rank", "settings", "share"]
        assert d["chain"] is None and d["machine"] is None and d["settings"]["identity"] == "psk"
        assert d["rank"] == r and d["error"] is None and d["settings"]["job_id"] == LABEL
        assert (d["share"] is not None) == (kx == "psk-dhe")
        nonces.append(bytes.fromhex(d["nonce"]))
    th = hashlib.sha256(b"seccomm/1 transcript" + hellos.tobytes()).digest()
    salt = hashlib.sha256(b"seccomm/1 salt" + JOB_ID + b"".join(nonces)).digest()
    assert all(s.session.comm_id == th[:16] for s in res)
    group = None
    if kx == "psk-dhe":  # rank 0's group secret, sealed for rank j under their wrap key
        opened = {
            AESGCM(res[j].session.keys.wrap_key(j)).decrypt(
                bytes(12), reps[j].seen[1][0].tobytes(), b"seccomm/1 key delivery" + struct.pack(">I", j)
            )
            for j in (1, 2)
        }
        assert len(opened) == 1
        group = opened.pop()
    else:  # psk: zeros
        assert not any(reps[1].seen[1].tobytes() + reps[2].seen[1].tobytes())
    for r, sc in enumerate(res):
        ks = KeySchedule(PSK, get_suite(SUITE), salt, th, r)  # from the job secret and the recorded setup
        nxt = (r + 1) % 3
        if kx == "psk":  # every key follows from them (as documented)
            assert sc.session.keys.group_key(0) == ks.group_key(0)
            assert sc.session.keys.direction_key(0, r, nxt) == ks.direction_key(0, r, nxt)
        else:  # psk-dhe: none does; the group key is the delivered group secret's
            assert sc.session.keys.group_key(0) != ks.group_key(0)
            assert sc.session.keys.direction_key(0, r, nxt) != ks.direction_key(0, r, nxt)
            ks.use_group_secret(group)
            assert sc.session.keys.group_key(0) == ks.group_key(0)
        header = struct.pack(">II", 0, NOBODY)
        fin = mac(ks.finished_key(), b"seccomm/1 finished" + th + struct.pack(">I", r) + header)
        assert reps[0].seen[2][r].tobytes() == (header + fin).ljust(FINISHED_BYTES, b"\0")


@pytest.mark.parametrize("kx", KEY_EXCHANGES)
def test_failure_reports_on_the_wire_are_as_documented(kx):
    """Rank 2 with a bad argument: ranks 0 and 1 report a rejection of rank 2's hello, rank 2 of
    its own arguments (status 1, blamed 2).  Then rank 0's key delivery to rank 2 altered: rank 2
    reports status 2 blaming rank 0.  Each report MACed under the hello key with its sender's nonce."""

    def flip(i, rows):
        if i == 1:
            rows[0, 3] ^= 1

    for per_rank, edits, want in (
        ({"algorithm": ["auto", "auto", "tree"]}, {}, {0: (1, 2), 1: (1, 2), 2: (1, 2)}),
        ({}, {2: flip}, {0: (0, NOBODY), 1: (0, NOBODY), 2: (2, 0)}),
    ):
        res, reps = run_setup(3, kx, edits, per_rank)
        assert all(isinstance(e, Exception) for e in res), res
        rows = reps[0].seen[2]
        for r, (status, blamed) in want.items():
            header = struct.pack(">II", status, blamed)
            assert rows[r, :8].tobytes() == header, (r, rows[r, :8])
            if status:
                nonce = bytes.fromhex(body_of(reps[0].seen[0][r])["nonce"])
                report = b"seccomm/1 report" + struct.pack(">I", r) + nonce + header
                assert rows[r, 8:].tobytes() == mac(K_HELLO, report).ljust(FINISHED_BYTES - 8, b"\0")


def test_job_label_is_carried_up_to_128_printable_ascii_characters():
    for label in ("a" * 128, "job 42/x", ""):
        assert job_label(label) == label
    for label in ("a" * 129, "b" * 3000, "jöb", "tab\there"):
        assert job_label(label) == "sha256:" + hashlib.sha256(label.encode()).hexdigest()


def test_hello_body_up_to_its_limit_round_trips():
    base = Hello(3, bytes(range(32)), 7, None, {"protocol": 2}, "")
    fill = BODY_MAX - len(base.body())
    at_limit = Hello(3, bytes(range(32)), 7, None, {"protocol": 2}, "e" * fill)
    assert len(at_limit.body()) == BODY_MAX
    assert decode_hello(encode_hello(at_limit, K_HELLO).tobytes()) == at_limit
    over = Hello(3, bytes(range(32)), 7, None, {"protocol": 2}, "e" * (fill + 1))
    with pytest.raises(ValueError, match=f"exceeds {BODY_MAX}"):
        encode_hello(over, K_HELLO)


# -- the one canonical encoding ---------------------------------------------------------------

#: rank 1's hello, its content or spelling changed, re-MACed with the job secret (an insider)
RESPELLED = {
    "spaces": lambda d: json.dumps(d, sort_keys=True).encode(),
    "keys unsorted": lambda d: json.dumps(dict(reversed(list(d.items()))), separators=(",", ":")).encode(),
    "error a number": lambda d: canonical({**d, "error": 5}),
    "error a list": lambda d: canonical({**d, "error": ["x"]}),
    "host as text": lambda d: canonical({**d, "host": str(d["host"])}),
    "host true": lambda d: canonical({**d, "host": True}),
    "rank a float": lambda d: canonical({**d, "rank": 1.0}),
    "extra field": lambda d: canonical({**d, "x": 1}),
    "nested setting": lambda d: canonical({**d, "settings": {**d["settings"], "suite": [SUITE]}}),
    "short nonce": lambda d: canonical({**d, "nonce": d["nonce"][:62]}),
}


@pytest.mark.parametrize("case", [*RESPELLED, "length wraps"])
def test_a_hello_is_read_only_in_its_canonical_encoding(case):
    """Rank 1's hello as ranks 0 and 2 receive it: another spelling of its content, a field of
    another type, or (an attacker) its length field set to 2**32 - (2048 - length), which a
    signed reading would take for the true length.  Ranks 0 and 2 find it unreadable, and every
    rank raises ConfigMismatchError naming rank 1."""

    def edit(i, rows):
        if i == 0:
            d, raw = body_of(rows[1]), rows[1].tobytes()
            if case == "length wraps":
                n = struct.unpack(">I", raw[:4])[0]  # the MAC stays valid: it covers the body only
                rows[1, :4] = np.frombuffer(struct.pack(">I", (n - HELLO_BYTES) % 2**32), np.uint8)
            else:
                rows[1] = raw_hello(RESPELLED[case](d))

    res, _ = run_setup(3, edits={0: edit, 2: edit})
    assert all(isinstance(e, ConfigMismatchError) and e.peer == 1 and e.op == "setup" for e in res), res
    for r in (0, 2):
        assert f"the hello from rank 1 is unreadable on rank {r}" in str(res[r]), res[r]


# -- failure reports ----------------------------------------------------------------------------


def report_from_rank_1(status, blamed):
    """Rank 1's finished message, as ranks 0 and 2 receive it, replaced by a failure report MACed
    as rank 1 would (an insider: it holds the job secret)."""

    def edit(i, rows):
        if i == 2:
            nonce = bytes.fromhex(body_of(edit.hellos[1])["nonce"])
            header = struct.pack(">II", status, blamed)
            tag = mac(K_HELLO, b"seccomm/1 report" + struct.pack(">I", 1) + nonce + header)
            rows[1] = np.frombuffer((header + tag).ljust(FINISHED_BYTES, b"\0"), np.uint8)
        elif i == 0:
            edit.hellos = rows.copy()

    return edit


@pytest.mark.parametrize("kx", KEY_EXCHANGES)
@pytest.mark.parametrize(
    "blamed, peer, whose",
    [
        (2, 2, "the hello from rank 2"),
        (1, 1, "its own arguments"),
        (3, 1, "its own arguments"),  # no rank of this communicator: the reporting rank
        (NOBODY, 1, "its own arguments"),
    ],
)
def test_an_authentic_rejection_names_the_rank_it_blames(kx, blamed, peer, whose):
    edit = report_from_rank_1(1, blamed)
    res, _ = run_setup(3, kx, edits={0: edit, 2: edit})
    want = f"setup: rank 1 rejected the setup because of {whose} (see the error raised on rank 1)"
    for e in res[::2]:
        assert isinstance(e, ConfigMismatchError) and e.peer == peer and e.op == "setup", res
        assert str(e) == want


@pytest.mark.parametrize("kx", KEY_EXCHANGES)
def test_an_authentic_key_delivery_failure_names_rank_0(kx):
    edit = report_from_rank_1(2, 0)
    res, _ = run_setup(3, kx, edits={0: edit, 2: edit})
    for e in res[::2]:
        assert isinstance(e, AuthenticationError) and e.peer == 0 and e.op == "setup", res
        assert e.suite == "AES-256-GCM" and e.seq is None
        assert str(e).endswith(
            ": rank 1 could not authenticate the key delivery from rank 0 (altered or replayed)"
        )


@pytest.mark.parametrize("kx", KEY_EXCHANGES)
def test_reports_are_raised_rejection_first_then_key_delivery_then_forged(kx):
    """Two failures at once.  (a) rank 1's key delivery altered (rank 1 reports it) and rank 3's
    hello altered on its way to rank 2 (rank 2 rejects it): every rank names rank 3's hello.
    (b) rank 2's key delivery altered, and rank 1's finished message rewritten into a report it
    never MACed on its way to rank 0: rank 0 names rank 0's key delivery, before the forgery."""

    def delivery(i, rows):
        if i == 1:
            rows[0, 7] ^= 2

    def hello_3(i, rows):
        if i == 0:
            rows[3, -1] ^= 1

    res, _ = run_setup(4, kx, edits={1: delivery, 2: hello_3})
    assert all(isinstance(e, ConfigMismatchError) and e.peer == 3 for e in res), res
    for r in (0, 3):
        assert "rank 2 rejected the setup because of the hello from rank 3" in str(res[r])

    def forge(i, rows):
        if i == 2:
            rows[1, :8] = np.frombuffer(struct.pack(">II", 1, 1), np.uint8)

    res, _ = run_setup(3, kx, edits={0: forge, 2: delivery})
    assert isinstance(res[0], AuthenticationError) and res[0].peer == 0, res
    assert "could not authenticate the key delivery" in str(res[0])


# -- what the errors name -----------------------------------------------------------------------


def test_differing_settings_name_each_setting_and_the_lowest_rank_that_differs():
    res, _ = run_setup(3, per_rank={"algorithm": ["auto", "ring", "auto"], "bcast_chain_bytes": [0, 0, 64]})
    want = (
        "setup: SecureComm settings differ across ranks: algorithm: rank 0 'auto', rank 1 'ring'; "
        "bcast_chain_bytes: rank 0 0, rank 2 64"
    )
    assert all(isinstance(e, ConfigMismatchError) and e.peer == 1 and str(e) == want for e in res), res
    res, _ = run_setup(3, per_rank={"node_ids": [[0, 0, 1], [0, 1, 1], [0, 0, 1]]})
    assert all(isinstance(e, ConfigMismatchError) and e.peer == 1 for e in res), res
    assert all(str(e).startswith("setup: SecureComm settings differ across ranks: node_ids: ") for e in res)


def test_failed_hellos_and_finished_macs_name_at_most_8_ranks_and_the_receiving_rank():
    """10 ranks.  Rank 0 holds another job secret: it names the first 8 ranks whose hello failed
    on it; the others name rank 0.  Then the finished MACs of ranks 1..9 altered on their way to
    rank 0: rank 0 names the first 8, the primitive HMAC-SHA256, the op "setup"."""
    other = bytes(b ^ 0x5A for b in PSK)
    res, _ = run_setup(10, per_rank={"psk": [other] + [PSK] * 9})
    assert all(isinstance(e, ConfigMismatchError) for e in res), res
    assert res[0].peer == 1 and "rank(s) [1, 2, 3, 4, 5, 6, 7, 8] failed authentication on rank 0" in str(
        res[0]
    )
    for r in range(1, 10):
        assert res[r].peer == 0 and f"rank(s) [0] failed authentication on rank {r}" in str(res[r])

    def macs(i, rows):
        if i == 2:
            rows[1:, -1] ^= 1

    res, _ = run_setup(10, edits={0: macs})
    e = res[0]
    assert isinstance(e, AuthenticationError) and e.peer == 1 and e.op == "setup", res
    assert e.suite == "HMAC-SHA256" and e.seq is None
    assert str(e).endswith(
        ": the finished MAC of rank(s) [1, 2, 3, 4, 5, 6, 7, 8] does not match the setup transcript of "
        "rank 0: a setup message was altered or replayed in transit (no key of this session was used)"
    )


def share_of_rank_2(share):
    """Rank 2's hello, as ranks 0 and 1 receive it, with ``share`` (hex or None), re-MACed as
    rank 2 would (an insider)."""

    def edit(i, rows):
        if i == 0:
            rows[2] = raw_hello(canonical({**body_of(rows[2]), "share": share}))

    return {0: edit, 1: edit}


@pytest.mark.parametrize(
    "kx, share, want",
    [
        ("psk-dhe", None, "the hello from rank 2 has no X25519 share"),
        ("psk", "11" * 32, "the hello from rank 2 carries an X25519 share under key_exchange 'psk'"),
        ("psk-dhe", "00" * 32, "the X25519 share of rank 2 gives no shared secret"),  # a low-order point
    ],
)
def test_a_share_that_does_not_fit_the_key_exchange_names_its_rank(kx, share, want):
    res, _ = run_setup(3, kx, edits=share_of_rank_2(share))
    assert all(isinstance(e, ConfigMismatchError) and e.peer == 2 for e in res), res
    assert str(res[0]) == str(res[1]) == "setup: " + want


class StopsAt(TransportWrapper):
    """Leaves the setup at collective ``index`` (0 hello, 1 key delivery, 2 finished)."""

    def __init__(self, inner, index):
        super().__init__(inner)
        self.index, self.calls = index, 0

    def _step(self):
        self.calls += 1
        if self.calls - 1 == self.index:
            raise RuntimeError("this rank left the setup")

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        self._step()
        self.inner.allgather(sendbuf, recvbuf, op_label, timeout)

    def scatter(self, sendbuf, recvbuf, root, op_label, timeout=None):
        self._step()
        self.inner.scatter(sendbuf, recvbuf, root, op_label, timeout)


@pytest.mark.parametrize(
    "index, label", [(0, "setup: hello"), (1, "setup: key delivery"), (2, "setup: finished")]
)
def test_a_rank_that_leaves_at_a_setup_message_times_out_the_others_naming_it(index, label):
    world = World(3)
    trs = world.transports(timeout=0.3)
    wraps = [None, None, lambda t: StopsAt(t, index)]
    res = world.run(lambda r: build(trs[r], wraps[r], timeout=0.3, key_exchange="psk-dhe"))
    assert isinstance(res[2], RuntimeError), res
    for e in res[:2]:
        assert isinstance(e, TransportTimeout) and e.op == label and str(e).startswith(label + ":"), res


def _long_error(base: int, target: int) -> str:
    """512 characters whose hello body (``base`` bytes without them) is ``target`` bytes: JSON
    writes "\U0001f600" as 12 bytes (a surrogate pair), "é" as 6, a newline as 2, "x" as 1."""
    extra = target - base - 512
    wide, rest = divmod(extra, 11)
    return (
        "\U0001f600" * wide
        + "é" * (rest // 5)
        + "\n" * (rest % 5)
        + "x" * (512 - wide - rest // 5 - rest % 5)
    )


def test_an_argument_error_of_any_text_reaches_every_rank_in_a_hello_that_fits():
    """Rank 1's argument error as the others read it in its hello: whole when the hello fits its
    block (to the last byte), else its first 512 characters, halved until the hello fits
    (docs/design.md); an error without text shows its type.  Rank 1 raises its own error."""
    base = len(Hello(1, bytes(32), 7, None, {"protocol": 2}, "").body())
    exact = _long_error(base, BODY_MAX)
    assert len(Hello(1, bytes(32), 7, None, {"protocol": 2}, exact).body()) == BODY_MAX
    for error, carried in (
        (ValueError(exact), exact),
        (ValueError(exact + "tail"), exact),
        (ValueError("\U0001f600" * 600), "\U0001f600" * 256),  # 512 characters are 6144 bytes: halved once
        (ValueError(), "ValueError"),
        (KeyError(), "KeyError"),
    ):
        world = World(3)
        trs = world.transports()
        suite = get_suite(SUITE)

        def one(r):
            bad = error if r == 1 else None
            return establish(trs[r], {"protocol": 2}, PSK, suite, JOB_ID, 7, None, bad)

        res = world.run(one)
        assert res[1] is error, res
        for e in res[::2]:
            assert isinstance(e, ConfigMismatchError) and e.peer == 1, res
            assert str(e) == f"setup: rank 1 rejected its SecureComm arguments: {carried}"
