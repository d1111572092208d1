"""The setup transcript (seccomm.handshake) on an in-process world of threads (tests/threadworld.py):
fresh keys per SecureComm, every setup message authenticated, failures on every rank at once,
and no (key, nonce) pair sealed by a second SecureComm built with the same secret repeats one of
the first one's, whatever setup messages of the first an attacker replays into the second (the
second then refuses to start, on every rank).

The same attacks on real ranks: tests/mpi_worker.py ``setup_downgrade`` and ``setup_replay``, and
``seccomm attack`` (tests/cli/test_attack.py)."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seccomm import AuthenticationError, ConfigMismatchError, SecCommError, SecureComm, TransportTimeout
from seccomm.compliance.attack import forge_hello
from seccomm.keys import KEY_EXCHANGES
from seccomm.transports import TransportWrapper
from threadworld import World, record_seals

# a random job secret (keys.load_secret refuses patterned ones such as bytes(range(32)))
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")
SETUP_ERRORS = (ConfigMismatchError, AuthenticationError)


class Replayer(TransportWrapper):
    """Records every setup message this rank receives (``seen``); with ``replay`` (an earlier
    session's ``seen``) and ``plan`` (a set of (message index, sender)), puts the earlier
    session's row of that sender in place of this session's.  ``changed``: the indices of the
    messages where a replayed row differed from the one it replaced.  ``edit(index, rows)`` may
    alter any received message in place."""

    def __init__(self, inner, replay=None, plan=(), edit=None):
        super().__init__(inner)
        self.replay, self.plan, self.edit = replay, set(plan), edit
        self.seen, self.changed = [], set()

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        self.inner.allgather(sendbuf, recvbuf, op_label, timeout)
        self._got(np.asarray(recvbuf).reshape(self.size, -1), range(self.size))

    def scatter(self, sendbuf, recvbuf, root, op_label, timeout=None):
        self.inner.scatter(sendbuf, recvbuf, root, op_label, timeout)
        self._got(np.asarray(recvbuf).reshape(1, -1), [root])

    def _got(self, rows, senders):
        i = len(self.seen)
        self.seen.append(rows.copy())
        for row, sender in enumerate(senders):
            if self.replay is not None and (i, sender) in self.plan and sender != self.rank:
                old = self.replay[i][row]
                if not np.array_equal(old, rows[row]):
                    self.changed.add(i)
                rows[row] = old
        if self.edit is not None:
            self.edit(i, rows)


def build(tr, wrap=None, **kw):
    kw = {"psk": PSK, "timeout": 5, "crypto_threads": 1, **kw}
    return SecureComm(tr, kw.pop("suite", "aes-256-gcm"), wrap_transport=wrap, **kw)


def some_ops(sc):
    """Direction-key and group-key frames: ring and recursive-doubling allreduce, allgather."""
    x = np.arange(1000, dtype=np.float32) + sc.rank
    y = np.empty_like(x)
    for alg in ("ring", "recursive_doubling"):
        sc.algorithm = alg
        sc.allreduce(x, y)
    z = np.empty(sum(sc.block_counts(1000)), np.float32)
    sc.allgather(x[: sc.block_counts(1000)[sc.rank]], z)
    return y


@pytest.mark.parametrize("kx", KEY_EXCHANGES)
def test_honest_setup_fresh_per_session(kx):
    world = World(3)
    trs = world.transports()

    def session(r):
        sc = build(trs[r], key_exchange=kx)
        y = some_ops(sc)
        sc.close()
        return sc.session.comm_id, y

    a, b = world.run(session), world.run(session)
    assert all(not isinstance(v, BaseException) for v in a + b), a + b
    assert len({cid for cid, _ in a}) == 1 and len({cid for cid, _ in b}) == 1  # one transcript each
    assert a[0][0] != b[0][0]  # every rank's fresh nonce: another session, other keys
    assert np.array_equal(a[0][1], np.arange(1000, dtype=np.float32) * 3 + 3)


def test_mismatch_and_bad_arguments_raise_on_every_rank():
    world = World(3)
    trs = world.transports()
    res = world.run(lambda r: build(trs[r], chunk_bytes=4096 if r == 2 else 1 << 20))
    assert all(isinstance(e, ConfigMismatchError) and "chunk_bytes" in str(e) for e in res), res
    world = World(3)
    trs = world.transports()
    res = world.run(lambda r: build(trs[r], algorithm="tree" if r == 1 else "auto"))
    assert isinstance(res[1], ValueError) and "unknown algorithm" in str(res[1])
    for e in res[::2]:
        assert isinstance(e, ConfigMismatchError) and e.peer == 1 and e.op == "setup", res
        assert str(e).startswith(f"setup: rank 1 rejected its SecureComm arguments: {res[1]}")
    world = World(3)
    trs = world.transports()
    res = world.run(lambda r: build(trs[r], psk=PSK[::-1] if r == 0 else PSK))
    assert all(isinstance(e, ConfigMismatchError) and "job secret differs" in str(e) for e in res), res
    assert [e.peer for e in res] == [1, 0, 0]
    for r, e in enumerate(res):  # the rank on which it failed, and what to check
        assert f"failed authentication on rank {r} (check SECCOMM_PSK_FILE" in str(e)


def test_numpy_integers_are_the_same_settings():
    world = World(2)
    trs = world.transports()
    res = world.run(lambda r: build(trs[r], chunk_bytes=[4096, np.int64(4096)][r]).chunk_bytes)
    assert res == [4096, 4096], res


def test_a_rank_that_never_joins_times_out_every_survivor():
    world = World(3)
    trs = world.transports(timeout=0.5)
    t0 = time.monotonic()
    res = world.run(lambda r: build(trs[r], timeout=0.5), ranks=[0, 1])
    assert all(isinstance(e, TransportTimeout) for e in res) and time.monotonic() - t0 < 5, res


def test_node_map_from_authenticated_hosts_and_node_ids():
    """node_ids can split a host into nodes, never join two hosts."""
    for hosts, user, want in (
        ([1, 1, 2, 2], None, [0, 0, 2, 2]),
        ([1, 1, 2, 2], [0, 0, 0, 0], [0, 0, 2, 2]),  # the user's claim of one node: not trusted
        ([1, 1, 1, 1], [0, 0, 1, 1], [0, 0, 2, 2]),  # one host split in two nodes
    ):
        world = World(4, hosts)
        trs = world.transports()
        res = world.run(lambda r: build(trs[r], encrypt="inter-node", node_ids=user).node_ids)
        assert res == [want] * 4, (hosts, user, res)


@pytest.mark.parametrize("kx", KEY_EXCHANGES)
def test_forged_host_key_fails_on_every_rank(kx):
    """Rank 3's hello rewritten on its way to rank 0 only, to claim rank 0's host (accepted, it
    would put their hops in the clear under encrypt="inter-node"): every rank raises
    ConfigMismatchError naming rank 3."""
    world = World(4, [1, 1, 2, 2])
    trs = world.transports()

    def edit(i, rows):
        if i == 0:
            rows[3] = forge_hello(rows[3], lambda h: replace(h, host=1))

    wraps = [lambda t: Replayer(t, edit=edit), None, None, None]
    res = world.run(lambda r: build(trs[r], wraps[r], key_exchange=kx))
    assert all(isinstance(e, ConfigMismatchError) and e.peer == 3 and "setup" in str(e) for e in res), res


@pytest.mark.parametrize("kx", KEY_EXCHANGES)
def test_altered_key_delivery_fails_on_every_rank(kx):
    """One bit of rank 0's key delivery to rank 2 flipped (psk-dhe: the sealed group secret; psk:
    the zeros): every rank raises AuthenticationError naming rank 0, the op "setup"."""
    world = World(3)
    trs = world.transports()

    def edit(i, rows):
        if i == 1:
            rows[0, 5] ^= 4

    wraps = [None, None, lambda t: Replayer(t, edit=edit)]
    res = world.run(lambda r: build(trs[r], wraps[r], key_exchange=kx))
    assert all(isinstance(e, AuthenticationError) and e.peer == 0 and e.op == "setup" for e in res), res
    assert all(e.suite == "AES-256-GCM" and e.seq is None for e in res)
    head = "AES-256-GCM authentication failed on a setup message from rank 0 (setup): "
    why = {
        "psk": "psk mode delivers zeros; these were altered in transit",
        "psk-dhe": "the group secret failed authentication (altered or replayed in transit)",
    }
    assert str(res[2]) == head + "key delivery from rank 0: " + why[kx]
    reported = "rank 2 could not authenticate the key delivery from rank 0 (altered or replayed)"
    for e in res[:2]:
        assert str(e) == head + reported


@pytest.mark.parametrize("kx", KEY_EXCHANGES)
def test_replayed_setup_fails_on_every_rank(kx):
    """Session A's hello, key delivery and finished of rank 0 replayed to ranks 1..3
    during session B's setup: every rank raises a setup error, none waits out a deadline."""
    world = World(4)
    trs = world.transports()
    rec = [Replayer(t) for t in trs]
    a = world.run(lambda r: build(trs[r], lambda t: rec[r], key_exchange=kx))
    plan = {(i, 0) for i in range(3)}
    t0 = time.monotonic()
    res = world.run(
        lambda r: build(trs[r], (lambda t: Replayer(t, rec[r].seen, plan)) if r else None, key_exchange=kx)
    )
    assert all(isinstance(e, SETUP_ERRORS) and e.op == "setup" for e in res), res
    assert time.monotonic() - t0 < 4
    assert all(isinstance(s, SecureComm) for s in a)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    size=st.integers(2, 4),
    kx=st.sampled_from(KEY_EXCHANGES),
    suite=st.sampled_from(["aes-256-gcm", "chacha20-poly1305"]),
    plan=st.sets(st.tuples(st.integers(1, 3), st.integers(0, 2), st.integers(0, 3)), max_size=8),
)
def test_no_key_nonce_pair_repeats_across_sessions_with_replayed_setup(size, kx, suite, plan):
    """Two SecureComms on one world with the same secret; ``plan``: (receiving rank, setup
    message index, sender) of session A replayed into session B's setup.  No (key, nonce) pair
    sealed in session B was sealed in session A.  A replay that changes a hello or key delivery
    makes every rank refuse session B.  A replayed finished message (the last message: no rank
    can learn that another rejected it, as in any protocol) makes the ranks that receive it refuse;
    the others, whose transcript every rank matched, then fail in their first operation with
    the refusing rank (here ``TransportTimeout``) instead of returning a result."""
    world = World(size)
    trs = world.transports()
    rec = [Replayer(t) for t in trs]

    def session(r, wrap, timeout):
        sc, log = build(trs[r], lambda t: wrap, suite=suite, key_exchange=kx, timeout=timeout), []
        record_seals(sc, log)
        try:
            some_ops(sc)
        except SecCommError as e:
            return log, e
        return log, None

    logs_a = world.run(lambda r: session(r, rec[r], 5)[0])
    assert all(isinstance(v, list) for v in logs_a), logs_a
    mine = {r: {(i, s) for (rr, i, s) in plan if rr == r and s < size} for r in range(size)}
    wraps = [Replayer(trs[r], rec[r].seen, mine[r]) for r in range(size)]
    res = world.run(lambda r: session(r, wraps[r], 1))
    refused = [isinstance(v, BaseException) for v in res]
    for r, v in enumerate(res):
        if refused[r]:
            assert isinstance(v, SETUP_ERRORS) and v.op == "setup", res
        elif any(refused):  # accepted while another rank refused: its first operation fails
            assert isinstance(v[1], SecCommError), res
    changed = set().union(*(w.changed for w in wraps))
    assert all(refused) or not changed or changed == {2}, (changed, res)  # only finished: partial
    assert any(refused) == bool(changed), (changed, res)  # a replay of what B sent anyway is harmless
    seals_a = {s for log in logs_a for s in log}
    seals_b = [s for v in res if not isinstance(v, BaseException) for s in v[0]]
    assert len(set(seals_b)) == len(seals_b) and not seals_a & set(seals_b)
    assert any(refused) or (seals_b and not changed)


@pytest.mark.parametrize("kx", KEY_EXCHANGES)
@pytest.mark.parametrize("status, blamed", [(1, 2), (1, 1), (2, 0)])
def test_forged_failure_report_blames_its_sender(kx, status, blamed):
    """Rank 1's finished message rewritten on its way to ranks 0 and 2 into a failure report
    (a rejection blaming rank 2 or itself, or a failed key delivery blaming rank 0): the report is
    not authentic, so ranks 0 and 2 raise AuthenticationError naming rank 1, whose message was
    altered, never the rank the forgery names.  (Rank 1 received every finished message intact:
    the last-message limit of docs/design.md.)"""
    import struct

    world = World(3)
    trs = world.transports()

    def edit(i, rows):
        if i == 2:
            rows[1, :8] = np.frombuffer(struct.pack(">II", status, blamed), np.uint8)

    wraps = [lambda t: Replayer(t, edit=edit), None, lambda t: Replayer(t, edit=edit)]
    res = world.run(lambda r: build(trs[r], wraps[r], key_exchange=kx))
    for e in res[::2]:
        assert isinstance(e, AuthenticationError) and e.peer == 1 and e.op == "setup", res
        assert e.suite == "HMAC-SHA256" and e.seq is None
        assert str(e).endswith(
            ": the failure report in the finished message of rank 1 failed authentication: the "
            "message was altered in transit (no key of this session was used)"
        )


def test_unauthenticated_argument_error_is_named_as_such():
    """Rank 2's hello replaced on its way to ranks 0 and 1 by one that reports an argument error,
    without a MAC (the attacker has no key): ranks 0 and 1 name rank 2's hello and say that the
    error is not authenticated, instead of presenting the forged text as rank 2's own error."""
    from seccomm.handshake import decode_hello, encode_hello

    world = World(3)
    trs = world.transports()

    def edit(i, rows):
        if i == 0:
            h = decode_hello(rows[2].tobytes())
            rows[2] = encode_hello(replace(h, settings={"protocol": 2}, error="forged: no PSK here"), None)

    wraps = [lambda t: Replayer(t, edit=edit), lambda t: Replayer(t, edit=edit), None]
    res = world.run(lambda r: build(trs[r], wraps[r]))
    assert all(isinstance(e, ConfigMismatchError) and e.peer == 2 for e in res), res
    for e in res[:2]:
        assert "not authenticated" in str(e) and "rank 2 rejected its SecureComm arguments" not in str(e)


def test_an_unauthenticated_error_text_is_shown_as_a_short_escaped_excerpt():
    """The forged hello's text (512 characters of the attacker's choice, with a newline, escape
    sequences and a fake error line) reaches the others' errors only as a quoted, escaped
    excerpt of 60 characters, marked as unauthenticated and cut."""
    from seccomm.handshake import _ERROR_MAX, decode_hello, encode_hello

    text = ("ok\nERROR: rank 0 leaked its key \x1b[2J" + "A" * 600)[:_ERROR_MAX]
    world = World(3)
    trs = world.transports()

    def edit(i, rows):
        if i == 0:
            h = decode_hello(rows[2].tobytes())
            rows[2] = encode_hello(replace(h, settings={"protocol": 2}, error=text), None)

    wraps = [lambda t: Replayer(t, edit=edit), lambda t: Replayer(t, edit=edit), None]
    res = world.run(lambda r: build(trs[r], wraps[r]))
    for e in res[:2]:
        msg = str(e)
        assert isinstance(e, ConfigMismatchError) and e.peer == 2, e
        assert "\n" not in msg and "\x1b" not in msg and "A" * 61 not in msg, msg
        assert "its text, unauthenticated: 'ok\\nERROR: rank 0 leaked its key \\x1b[2J" in msg, msg
        assert f"(first 60 of {_ERROR_MAX} characters)" in msg, msg


@pytest.mark.parametrize("arg", ["suite", "algorithm", "chunk_bytes", "timeout"])
@pytest.mark.parametrize("form", ["bytes", "hex"])
def test_a_secret_passed_as_another_argument_never_crosses_the_wire(arg, form):
    """The job secret passed by mistake as another argument on rank 1 (``SecureComm(comm, psk)``
    puts it in ``suite``): the argument error travels in rank 1's hello, in the clear, so it shows
    the refused value by type and length only; neither the wire nor any rank's error holds it."""
    from seccomm.transports import RecordingTransport

    world = World(2)
    trs = world.transports()
    secret = PSK if form == "bytes" else PSK.hex()
    recs = [RecordingTransport(t) for t in trs]
    res = world.run(lambda r: build(trs[r], lambda t: recs[r], **({arg: secret} if r == 1 else {})))
    assert isinstance(res[1], ValueError) and isinstance(res[0], ConfigMismatchError), res
    wire = b"".join(f.tobytes() for rec in recs for _, _, f in rec.frames)
    for shown in (repr(PSK), PSK.hex(), repr(PSK)[2:20], PSK.hex()[:32]):
        assert all(shown not in str(e) for e in res), (shown, res)
        assert shown.encode() not in wire and shown.encode().replace(b"\\", b"\\\\") not in wire
