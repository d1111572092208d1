"""``identity="x509"``: each rank known by its certificate (seccomm.handshake, seccomm.identity),
in worlds of threads.  Results are the same bits as under psk for every collective, algorithm and
suite; a bad certificate or key file is an error on every rank at construction that names the
rank and the reason; the setup's signatures bind each rank to its messages; the host comes from
the certificate; the keys of a pair are known to that pair only."""

from __future__ import annotations

import os
import struct
from dataclasses import replace

import numpy as np
import pytest

from identities import rank_identities
from insider import allgathered, caught, flipped, forge_forwarded_block
from seccomm import AuthenticationError, SecureComm
from seccomm.errors import ConfigMismatchError, IdentityError, KeyScheduleError
from seccomm.handshake import FINISHED_BYTES, HELLO_BYTES, decode_hello, encode_hello
from seccomm.identity import IdentityFiles, make_test_identities
from seccomm.keys import KeySchedule
from seccomm.suites import SUITES
from seccomm.transports import TransportWrapper
from threadworld import World
from worlds import PSK, ok

OTHER_PSK = bytes.fromhex("9b1f0c7e2a5d48b3c6e1f07a2d9c4b5e8f3a6d1c0b7e2f5a9d4c8b3e6f1a0d72")


def x509_run(p, body, ids=None, wraps=None, **kw):
    """``body(sc)`` on ``p`` ranks, each with its identity (``ids``, default
    tests/identities.py's) and no PSK unless ``psk`` is given; ``wraps[r]``: rank r's wrapper."""
    ids = ids or rank_identities(p)
    return run(p, body, wraps, ids=ids, **kw)


def run(p, body, wraps=None, ids=None, paired=False, hosts=None, **kw):
    """``body(sc)`` on a SecureComm per rank of a world of ``p`` threads (``ids``: each rank's
    identity, else ``kw``'s; ``hosts``: the host key each rank's transport gives)."""
    world = World(p, hosts=hosts, paired=paired)
    trs = world.transports(timeout=3)
    kw = {"timeout": 2, "crypto_threads": 1, **kw}

    def rank_fn(r):
        w = (wraps or {}).get(r)
        mine = {**kw, "identity": ids[r]} if ids else kw
        return body(SecureComm(trs[r], wrap_transport=w, **mine))

    return world.run(rank_fn)


def every_collective(sc):
    """Every collective and algorithm on small integers: the bytes of every result."""
    r, p, n, out = sc.rank, sc.size, 301, []
    rng = np.random.default_rng(r)
    for alg in ("ring", "recursive_doubling"):
        sc.algorithm = alg
        y = np.zeros(n, np.float32)
        sc.allreduce(rng.integers(-4, 5, n).astype(np.float32), y)
        out.append(y.tobytes())
    counts = sc.block_counts(n)
    rs = np.zeros(counts[r], np.float32)
    sc.reduce_scatter(rng.integers(-4, 5, n).astype(np.float32), rs)
    ag = np.zeros(n, np.int32)
    sc.allgather(rng.integers(-4, 5, counts[r]).astype(np.int32), ag)
    for chain in (0, 1 << 30):
        sc.bcast_chain_bytes = chain
        bc = np.arange(n, dtype=np.float64) * (r + 1)
        sc.bcast(bc, root=p - 1)
        out.append(bc.tobytes())
    a2a = np.zeros(3 * p, np.float32)
    sc.alltoall(np.arange(3 * p, dtype=np.float32) + 10 * r, a2a)
    return [*out, rs.tobytes(), ag.tobytes(), a2a.tobytes()]


@pytest.mark.parametrize("suite", list(SUITES))
@pytest.mark.parametrize("p, paired", [(2, False), (2, True), (3, False), (4, False), (5, False)])
def test_every_collective_gives_the_same_bits_under_x509_as_under_psk(suite, p, paired):
    kw = {"suite": suite, "chunk_bytes": 48, "paired": paired}
    psk = ok(run(p, every_collective, psk=PSK, **kw))
    got = ok(x509_run(p, every_collective, **kw))
    assert got == psk


def test_the_session_says_who_each_rank_is():
    """Every rank holds every rank's verified identity, in rank order; the key schedule's mode is
    x509; no PSK was mixed in, and the source says so."""

    def body(sc):
        return sc.session.identities, sc.session.keys.mode, sc.secret_source

    res = ok(x509_run(3, body))
    for ids, mode, source in res:
        assert [i.rank for i in ids] == [0, 1, 2] and mode == "x509"
        assert [i.host for i in ids] == [f"rank{r}.seccomm.test" for r in range(3)]
        assert [i.fingerprint for i in ids] == [i.fingerprint for i in res[0][0]]
        assert source == "none (identity x509, no PSK mixed in)"


def test_one_certificate_on_several_machines_does_not_merge_them():
    """Every rank holds a certificate for one host (one certificate copied to every machine) but
    the transports say ranks 0 and 1 run on one machine and rank 2 on another: rank 2 is a node
    of its own, so encrypt="inter-node" still encrypts its hops (the machine splits a
    certificate's host, never merges two)."""
    ids = rank_identities(3, ("shared.test",) * 3)
    res = ok(
        x509_run(
            3, lambda sc: (sc.node_ids, sc.context.policy), ids=ids, hosts=[1, 1, 2], encrypt="inter-node"
        )
    )
    for node_ids, policy in res:
        assert node_ids == [0, 0, 2]
        assert (
            not policy.encrypts(0, 1, False) and policy.encrypts(0, 2, False) and policy.encrypts(1, 2, True)
        )


def test_the_host_comes_from_the_certificate():
    """Ranks 0 and 1 hold certificates for one host, rank 2 for another: the node map follows the
    certificates, whatever host each rank's transport reports (the thread world says all three
    share one host), and encrypt="inter-node" encrypts the hops to rank 2 only."""
    ids = rank_identities(3, ("node-a.test", "node-a.test", "node-b.test"))
    res = ok(x509_run(3, lambda sc: (sc.node_ids, sc.context.policy), ids=ids, encrypt="inter-node"))
    for node_ids, policy in res:
        assert node_ids == [0, 0, 2]
        assert (
            not policy.encrypts(0, 1, False) and policy.encrypts(0, 2, False) and policy.encrypts(1, 2, True)
        )


class ClaimsHost(TransportWrapper):
    """Rank 1's own transport, run by an insider: its hello says it is on rank 0's host."""

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        if op_label == "setup: hello":
            h = decode_hello(np.asarray(sendbuf).tobytes())
            sendbuf = encode_hello(replace(h, host=self.claim), None)
        return self.inner.allgather(sendbuf, recvbuf, op_label, timeout)


def test_a_rank_that_claims_another_host_is_refused_on_every_rank():
    from seccomm.topology import name_key

    class Claim(ClaimsHost):
        claim = name_key("rank0.seccomm.test")

    res = x509_run(3, lambda sc: sc.node_ids, wraps={1: Claim}, encrypt="inter-node")
    for r in (0, 2):
        assert isinstance(res[r], IdentityError) and res[r].peer == 1, res
        assert "rank 1 gave a host other than the one its certificate names ('rank1.seccomm.test')" in str(
            res[r]
        )
    assert isinstance(res[1], (IdentityError, ConfigMismatchError)) and res[1].peer == 1, res


# -- bad identities: an error on every rank, naming the rank and the reason ---------------------
def bad_identity(tmp_path, case) -> IdentityFiles:
    """Rank 1's identity, made bad in one way."""
    good = rank_identities(3)[1]
    if case == "expired":  # valid from 5 minutes ago until 1 minute ago
        pki = make_test_identities(tmp_path, ["rank1.seccomm.test"], days=-1 / 1440)
        return IdentityFiles(str(pki.cert_files[0]), str(pki.key_files[0]), good.ca_file)
    if case == "another CA":
        pki = make_test_identities(tmp_path, ["rank1.seccomm.test"])
        return replace(good, cert_file=str(pki.cert_files[0]), key_file=str(pki.key_files[0]))
    if case == "a CA certificate as its own":
        pki = make_test_identities(tmp_path, ["rank1.seccomm.test"])
        return replace(good, cert_file=str(pki.ca_file), key_file=str(pki.key_files[0]))
    if case == "key not matching":
        return replace(good, key_file=rank_identities(3)[2].key_file)
    if case == "key readable by others":
        path = tmp_path / "open.key"
        path.write_bytes(open(good.key_file, "rb").read())
        os.chmod(path, 0o644)
        return replace(good, key_file=str(path))
    if case == "key missing":
        return replace(good, key_file=str(tmp_path / "missing.key"))
    if case == "no CA file":
        return replace(good, ca_file=str(tmp_path))
    raise AssertionError(case)


BAD = {
    "expired": "this rank's own certificate did not verify: .*not valid at validation time",
    "another CA": "this rank's own certificate did not verify",
    "a CA certificate as its own": "this rank's own certificate did not verify: .*cA must not be asserted",
    "key not matching": "is not the key of the certificate in SECCOMM_CERT_FILE",
    "key readable by others": "is accessible by group or others \\(mode 644\\); run: chmod 600",
    "key missing": "SECCOMM_KEY_FILE .* cannot be opened: No such file",
    "no CA file": "SECCOMM_CA_FILE .* is not a regular file",
}


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_identity_is_an_error_on_every_rank_naming_the_rank_and_the_reason(tmp_path, case):
    ids = list(rank_identities(3))
    ids[1] = bad_identity(tmp_path, case)
    res = x509_run(3, lambda sc: sc, ids=ids)
    assert isinstance(res[1], IdentityError), res
    assert __import__("re").search(BAD[case], str(res[1])), str(res[1])
    for r in (0, 2):
        assert isinstance(res[r], ConfigMismatchError) and res[r].peer == 1, res
        msg = str(res[r])
        assert "the hello from rank 1 reports an argument error that is not authenticated" in msg, msg


def test_a_rank_whose_certificate_its_peers_do_not_trust_is_named_by_them(tmp_path):
    """Rank 1's certificate and CA file come from another CA: rank 1 trusts itself, nobody else.
    Ranks 0 and 2 name rank 1; rank 1 names rank 0, whose certificate it does not trust."""
    pki = make_test_identities(tmp_path, ["rank1.seccomm.test"])
    ids = list(rank_identities(3))
    ids[1] = IdentityFiles(str(pki.cert_files[0]), str(pki.key_files[0]), str(pki.ca_file))
    res = x509_run(3, lambda sc: sc, ids=ids)
    for r in (0, 2):
        assert isinstance(res[r], IdentityError) and res[r].peer == 1, res
        assert "rank 1's certificate did not verify" in str(res[r])
    assert isinstance(res[1], IdentityError) and res[1].peer == 0, res


def test_identity_files_from_the_environment(monkeypatch):
    """identity="x509" reads the three files from SECCOMM_CERT_FILE, SECCOMM_KEY_FILE and
    SECCOMM_CA_FILE; one of them unset is an error naming it."""
    for v in ("SECCOMM_CERT_FILE", "SECCOMM_KEY_FILE", "SECCOMM_CA_FILE", "SECCOMM_PSK", "SECCOMM_PSK_FILE"):
        monkeypatch.delenv(v, raising=False)
    one = rank_identities(1)[0]
    monkeypatch.setenv("SECCOMM_CERT_FILE", one.cert_file)
    monkeypatch.setenv("SECCOMM_KEY_FILE", one.key_file)
    res = ok(World(1).run(lambda r: None))  # (a world to build on)
    tr = World(1).transports(timeout=2)[0]
    with pytest.raises(IdentityError, match="identity 'x509' needs SECCOMM_CA_FILE set on every rank"):
        SecureComm(tr, identity="x509", timeout=2)
    monkeypatch.setenv("SECCOMM_CA_FILE", one.ca_file)
    sc = SecureComm(World(1).transports(timeout=2)[0], identity="x509", timeout=2)
    assert sc.session.identities[0].host == "rank0.seccomm.test" and res == [None]


# -- a PSK mixed in ------------------------------------------------------------------------------
def test_a_psk_is_mixed_in_where_one_is_given_and_must_then_be_the_same():
    res = ok(x509_run(2, lambda sc: (sc.secret_source, sc.session.keys.direction_key(0, 0, 1)), psk=PSK))
    assert res[0] == res[1] and res[0][0] == "argument"
    plain = ok(x509_run(2, lambda sc: sc.session.keys.direction_key(0, 0, 1)))
    assert plain[0] != res[0][1]
    res = x509_run(2, lambda sc: sc, psk=lambda: None)  # (not bytes: an argument error on every rank)
    assert all(isinstance(e, (KeyScheduleError, ConfigMismatchError)) for e in res), res
    world = World(2)
    trs = world.transports(timeout=3)
    ids = rank_identities(2)
    res = world.run(lambda r: SecureComm(trs[r], identity=ids[r], psk=[PSK, OTHER_PSK][r], timeout=2))
    assert all(isinstance(e, ConfigMismatchError) for e in res), res
    assert "job secret differs across ranks" in str(res[0])


def test_ranks_that_disagree_on_the_identity_mode_say_so():
    world = World(2)
    trs = world.transports(timeout=3)
    ids = rank_identities(2)
    res = world.run(lambda r: SecureComm(trs[r], psk=PSK, timeout=2, identity=ids[r] if r else "psk"))
    for e in res:
        assert isinstance(e, ConfigMismatchError) and e.peer == 1, res
        assert "identity: rank 0 'psk', rank 1 'x509'" in str(e)


def test_a_psk_rank_and_an_x509_rank_without_a_psk_disagree_on_the_mode_not_on_a_mac():
    """Rank 1 runs x509 with no PSK, so its hello carries no MAC; rank 0 runs psk.  The modes are
    compared before any hello is authenticated (the mode chooses how): every rank names the
    mode, not a hello that failed its MAC."""
    world = World(2)
    trs = world.transports(timeout=3)
    ids = rank_identities(2)
    res = world.run(lambda r: SecureComm(trs[r], timeout=2, **({"identity": ids[r]} if r else {"psk": PSK})))
    for e in res:
        assert isinstance(e, ConfigMismatchError) and e.peer == 1, res
        assert "setup: SecureComm settings differ across ranks: identity: rank 0 'psk', rank 1 'x509'" in str(
            e
        ), e


class _Moved(TransportWrapper):
    """Hands this rank rank 1's hello in rank 2's place (an on-path attacker)."""

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        out = self.inner.allgather(sendbuf, recvbuf, op_label, timeout)
        if op_label == "setup: hello":
            rows = np.asarray(recvbuf).reshape(self.size, -1)
            rows[2] = rows[1]
        return out


def test_a_hello_moved_to_another_ranks_place_is_named_under_x509_without_a_psk():
    """Without a PSK no MAC binds a hello to its place: the rank it says it was sent as must be
    its place, else rank 0 names the place (before any signature is checked)."""
    res = x509_run(3, lambda sc: sc, wraps={0: _Moved})
    assert isinstance(res[0], ConfigMismatchError) and res[0].peer == 2, res
    assert "setup: the hello in rank 2's place was sent as rank 1" in str(res[0]), res[0]


# -- the keys of a pair, the signatures of a rank -------------------------------------------------
def test_a_pairs_keys_are_known_to_that_pair_only():
    """Ranks 0 and 1 derive the same direction and control keys; rank 2 (an insider, with the
    transcript and the PSK mixed in) derives neither: its schedule refuses the control key and
    gives another direction key (it holds no secret of that pair), and so does the schedule of
    the PSK alone."""

    def body(sc):
        k = sc.session.keys
        if sc.rank == 2:
            with pytest.raises(ValueError, match="a pair of this rank"):
                k.pair_key(0, 1)
        return k.direction_key(0, 0, 1), None if sc.rank == 2 else k.pair_key(0, 1), k._salt, k._context

    res = ok(x509_run(3, body, psk=PSK))
    assert res[0] == res[1] and res[2][0] != res[0][0]
    d, c, salt, th = res[0]
    psk_only = KeySchedule(PSK, SUITES["aes-256-gcm"], salt, th, 2)
    assert psk_only.direction_key(0, 0, 1) != d and psk_only.pair_key(0, 2) != c


class Finished(TransportWrapper):
    """Alters rank ``victim``'s finished message on its way to this rank with ``edit(row)``."""

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        out = self.inner.allgather(sendbuf, recvbuf, op_label, timeout)
        if op_label == "setup: finished":
            row = np.asarray(recvbuf).reshape(-1, FINISHED_BYTES)[self.victim]
            row[:] = np.frombuffer(self.edit(row.tobytes()), np.uint8)
        return out


@pytest.mark.parametrize(
    "what, edit",
    [
        ("flipped signature", lambda b: b[:20] + bytes([b[20] ^ 1]) + b[21:]),
        ("bytes after it", lambda b: b[:-1] + b"\x01"),
        ("a MAC in its place", lambda b: b[:8] + bytes(32) + bytes(FINISHED_BYTES - 40)),
    ],
)
def test_a_finished_signature_altered_in_transit_names_its_rank(what, edit):
    class Alter(Finished):
        victim = 1

    Alter.edit = staticmethod(edit)
    res = x509_run(3, lambda sc: sc, wraps={0: Alter})
    assert isinstance(res[0], AuthenticationError) and res[0].peer == 1, (what, res)
    assert "does not match the setup transcript of rank 0" in str(res[0])
    assert res[0].suite == "a signature of its certificate's key", res[0].suite  # (not an HMAC)


def test_a_failure_report_in_another_ranks_name_is_refused():
    """An insider (rank 2, on the path to rank 0) replaces rank 1's finished message with a failure
    report blaming rank 0: it cannot sign in rank 1's name, so rank 0 calls rank 1's message
    altered and blames nobody else."""

    class Forge(Finished):
        victim = 1

        @staticmethod
        def edit(b):
            return (struct.pack(">II", 1, 0) + os.urandom(64)).ljust(FINISHED_BYTES, b"\0")

    res = x509_run(3, lambda sc: sc, wraps={0: Forge})
    assert isinstance(res[0], AuthenticationError) and res[0].peer == 1, res
    assert "the failure report in the finished message of rank 1 failed authentication" in str(res[0])


class Replay(TransportWrapper):
    """Hands this rank the hello rank 1 sent in the world's first setup in place of its new one."""

    seen: dict = {}

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        out = self.inner.allgather(sendbuf, recvbuf, op_label, timeout)
        if op_label == "setup: hello":
            rows = np.asarray(recvbuf).reshape(-1, HELLO_BYTES)
            if "old" in Replay.seen:
                rows[1] = Replay.seen["old"]
            else:
                Replay.seen["old"] = rows[1].copy()
        return out


def test_another_ranks_hello_replayed_from_an_earlier_setup_is_refused():
    """Rank 1's hello of the first setup handed to rank 0 in the second: rank 0 derives its keys
    with rank 1's old share, so the group secret it delivers opens nowhere, and the setup fails
    on every rank (whose keys are then never used)."""
    world = World(3)
    trs = world.transports(timeout=3)
    ids = rank_identities(3)
    Replay.seen = {}

    def two_setups(r):
        wrap = (lambda t: Replay(t)) if r == 0 else None
        SecureComm(trs[r], identity=ids[r], timeout=2, wrap_transport=wrap).close()
        return SecureComm(trs[r], identity=ids[r], timeout=2, wrap_transport=wrap)

    res = world.run(two_setups)
    assert all(isinstance(e, AuthenticationError) and e.op == "setup" for e in res), res


# -- group frames: checked against their origin ---------------------------------------------------
@pytest.mark.parametrize("n", [40, 3])  # (3 float32: a body of 12 bytes, not a multiple of 8)
@pytest.mark.parametrize("suite", ["aes-256-gcm", "chacha20-poly1305", "aes-256-gmac"])
def test_a_group_frame_forged_by_its_forwarder_is_refused_under_x509_only(monkeypatch, suite, n):
    """Ring allgather on 3 ranks: rank 1 forwards origin 0's block to rank 2.  Forged there by
    rank 1 (sealed under the group key in origin 0's name): under psk rank 2 takes it (the group
    key binds no origin: not protected, a shared secret); under x509 rank 2 refuses it, naming
    rank 1 and the chunk, before it reaches rank 2's buffer."""
    forge_forwarded_block(monkeypatch)
    psk = run(3, lambda sc: allgathered(sc, n), suite=suite, psk=PSK)
    assert all(isinstance(r, np.ndarray) for r in psk), psk
    assert (psk[2][:n].view(np.uint8) == 0x41).all() and (psk[0][:n] == 1).all()
    got = x509_run(3, lambda sc: allgathered(sc, n), suite=suite)
    assert isinstance(got[2], AuthenticationError) and got[2].peer == 1, got
    assert str(got[2]) == (
        f"{suite} authentication failed on a frame from rank 1 (allgather #1, chunk 0/1, epoch 0): group "
        f"frame of origin 0 (forwarded by rank 1) does not match the MAC its origin sent this rank: altered "
        f"or made up by a rank that holds the group key, or the origin's MAC was altered"
    )


@pytest.mark.parametrize("p", [3, 4, 5])
@pytest.mark.parametrize("collective", ["allgather", "allreduce", "bcast"])
def test_origin_macs_cover_every_group_frame_and_nothing_else(monkeypatch, p, collective):
    """Every group frame a rank opens is checked against one origin MAC (counted), and each
    origin sends one message of MACs to every other rank: allgather and the ring allreduce's
    allgather phase from every rank, bcast from its root only."""
    from seccomm.engine import origin

    checked, sent = [], []
    real_check, real_start = origin.OriginProofs.check, origin.OriginProofs.start
    monkeypatch.setattr(origin.OriginProofs, "check", lambda s, *a: checked.append(a[2]) or real_check(s, *a))
    monkeypatch.setattr(
        origin.OriginProofs,
        "start",
        lambda s, o, pcs: sent.append((s.run.rank, pcs is not None)) or real_start(s, o, pcs),
    )
    n = 1000  # float32: 4,000 B, in 3 or 4 frames of 1,024 B per block or buffer

    def body(sc):
        x = np.arange(n, dtype=np.float32) + sc.rank
        if collective == "allgather":
            y = np.zeros(n * sc.size, np.float32)
            sc.allgather(x, y)
        elif collective == "allreduce":
            sc.algorithm = "ring"
            y = np.zeros(n, np.float32)
            sc.allreduce(x, y)
        else:
            sc.bcast(x, root=p - 1)
            y = x
        return y.tobytes()

    assert ok(x509_run(p, body, chunk_bytes=1024)) == ok(run(p, body, chunk_bytes=1024, psk=PSK))
    origins = {0: list(range(p))}.get(0) if collective != "bcast" else [p - 1]
    assert sorted(r for r, mine in sent if mine) == origins
    assert len(sent) == p
    per = {"allgather": -(-n * 4 // 1024), "allreduce": None, "bcast": -(-n * 4 // 1024)}[collective]
    if per is not None:
        assert len(checked) == (p - 1) * per * (p if collective == "allgather" else 1)
    assert set(checked) == set(origins)


class OnTheWay(TransportWrapper):
    """Rank 2's receives of rank 0's origin MACs (the messages of ``nbytes``): ``edit(op, buf)``
    alters each in place once it is in (``op``: 0, 1, ... in the order they came)."""

    nbytes = 16 * (1 + 1)  # one frame of 160 B, and the message's own MAC

    def __init__(self, inner):
        super().__init__(inner)
        self.mine, self.seen = {}, []

    def irecv(self, buf, peer):
        req = self.inner.irecv(buf, peer)
        if peer == 0 and len(np.asarray(buf)) == self.nbytes:
            self.mine[id(req)] = buf
        return req

    def wait_recv(self, req, peer):
        got = self.inner.wait_recv(req, peer)
        buf = self.mine.pop(id(req), None)
        if buf is not None:
            self.edit(len(self.seen), buf)
            self.seen.append(np.asarray(buf).copy())
        return got


def two_allgathers(sc):
    for _ in range(2):
        out = allgathered(sc)
    return out


@pytest.mark.parametrize("how", ["flipped", "replayed", "truncated"])
def test_origin_macs_altered_on_their_way_name_their_origin(how):
    class Alter(OnTheWay):
        def edit(self, op, buf):
            a = np.asarray(buf)
            if how == "flipped":
                a[3] ^= 4
            elif how == "replayed" and op == 1:
                a[:] = self.seen[0]

    if how == "truncated":

        class Alter(TransportWrapper):  # noqa: F811 - rank 0's message one byte short
            def isend(self, buf, peer):
                b = np.asarray(buf)
                if peer == 2 and len(b) == OnTheWay.nbytes:
                    return self.send_own(b[:-1].copy(), peer)
                return self.inner.isend(buf, peer)

    wraps = {0: Alter} if how == "truncated" else {2: Alter}
    res = x509_run(3, two_allgathers, wraps=wraps)
    err, seq = res[2], 2 if how == "replayed" else 1
    assert isinstance(err, AuthenticationError) and err.peer == 0 and err.seq == seq, res
    detail = (
        "its origin MACs for this op have 31 bytes, expected 32"
        if how == "truncated"
        else "its origin MACs for this op failed authentication: altered or replayed in transit"
    )
    want = f"AES-GMAC authentication failed on origin MACs from rank 0 (allgather #{seq}, epoch 0): {detail}"
    assert str(err) == want


def device_run(p, body, backends, wraps=None, **kw):
    """``body(r, sc)`` on ``p`` thread ranks under x509, rank r with ``device_backend=backends.get(r)``
    (the device engine there; the CPU engine elsewhere); ``wraps[r]``: rank r's wrapper."""
    ids = rank_identities(p)
    world = World(p)
    trs = world.transports(timeout=3)
    kw = {"timeout": 2, "crypto_threads": 1, **kw}
    return world.run(
        lambda r: body(
            r,
            SecureComm(
                trs[r], identity=ids[r], device_backend=backends.get(r),
                wrap_transport=(wraps or {}).get(r), **kw,
            ),
        )
    )  # fmt: skip


@pytest.mark.parametrize("p", [3, 4])
def test_device_engine_ranks_compute_and_check_origin_macs_with_the_cpu_ranks(host_backend, p):
    """Under x509 the device engine computes and checks the origin MACs itself (the GMAC kernels'
    ``macs``, here their host build): even ranks on the device engine, odd ranks on the CPU
    engine, every collective gives the bits it gives under psk, and the device ranks made their
    MACs as origins and checked others' as receivers with ``macs``."""
    calls = []

    class Gmac:  # the GMAC kernels, their macs launches counted (True: a check, False: a send)
        def __init__(self, inner):
            self.inner = inner

        def macs(self, b, tags, check=False):
            calls.append(check)
            return self.inner.macs(b, tags, check)

    class Backend:
        def __getattr__(self, name):
            return getattr(host_backend, name)

        def aead(self, suite):
            a = host_backend.aead(suite)
            return Gmac(a) if suite == "aes-256-gmac" else a

    kw = {"chunk_bytes": 48, "suite": "aes-256-gcm"}
    psk = ok(run(p, every_collective, psk=PSK, **kw))
    res = device_run(p, lambda r, sc: every_collective(sc), {r: Backend() for r in range(0, p, 2)}, **kw)
    assert ok(res) == psk
    assert True in calls and False in calls, calls  # (checks and sends: both on device ranks)


def test_a_group_frame_forged_by_its_forwarder_is_refused_on_a_device_engine_rank(monkeypatch, host_backend):
    """Rank 2 on the device engine: origin 0's block forged by its forwarder, rank 1, is refused
    with the CPU engine's error, word for word; rank 2's buffer is not written and the private
    device memory it was opened into is zeroed."""
    forge_forwarded_block(monkeypatch)
    kept = {}

    def body(r, sc):
        out = np.zeros(3 * 40, np.float32)
        try:
            sc.allgather(np.full(40, r + 1.0, np.float32), out)
        except AuthenticationError as e:
            if r == 2:
                kept["out"] = out.copy()
                kept["private"] = bytes(sc.devices._ctx[id(host_backend)].workspace.get("origin", 160)[:160])
            return e
        return out

    res = device_run(3, body, {2: host_backend})
    assert isinstance(res[2], AuthenticationError) and res[2].peer == 1, res
    assert str(res[2]) == (
        "aes-256-gcm authentication failed on a frame from rank 1 (allgather #1, chunk 0/1, epoch 0): group "
        "frame of origin 0 (forwarded by rank 1) does not match the MAC its origin sent this rank: altered "
        "or made up by a rank that holds the group key, or the origin's MAC was altered"
    )
    assert (kept["out"][:40] == 0).all() and kept["private"] == bytes(160)


@pytest.mark.parametrize("collective", ["allgather", "bcast"])
def test_a_device_engine_origin_whose_frames_do_not_match_its_macs_is_named(
    monkeypatch, host_backend, collective
):
    """Rank 0 on the device engine makes its MACs over other data than it seals: the CPU ranks
    name rank 0 (and no forwarder where it sent the frames itself); a device rank's MACs are
    what a CPU rank checks."""
    from seccomm.gpu.origin import DeviceOriginProofs

    real = DeviceOriginProofs.frame_macs

    def frame_macs(self, epoch, receivers, pieces):  # (zeros of the pieces' sizes, one allocation)
        zeros = np.zeros(sum(p.nbytes for p in pieces), np.uint8)
        cuts = np.cumsum([0] + [p.nbytes for p in pieces])
        return real(self, epoch, receivers, [zeros[a:b] for a, b in zip(cuts[:-1], cuts[1:])])

    monkeypatch.setattr(DeviceOriginProofs, "frame_macs", frame_macs)

    def body(r, sc):
        x = np.full(40, r + 1.0, np.float32)
        try:
            if collective == "allgather":
                sc.allgather(x, np.zeros(120, np.float32))
            else:
                sc.bcast(x, root=0)
        except AuthenticationError as e:
            return e

    res = device_run(3, body, {0: host_backend})
    assert isinstance(res[1], AuthenticationError) and res[1].peer == 0, res
    assert "group frame of origin 0 does not match the MAC its origin sent this rank" in str(res[1])


def test_device_buffers_under_x509_go_to_the_device_engine(monkeypatch):
    """Device buffers under x509 run on the device engine on any number of ranks (it computes
    the origin MACs), probed once per comm like under psk."""
    from seccomm.gpu import engine, staging

    class Dev:  # a device buffer as seccomm.gpu.staging.is_device recognises one
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "version": 3}

    probes = []
    monkeypatch.setattr(
        engine, "device_ready", lambda sc, *bufs, probe=True: probes.append(sc.size) or "backend"
    )
    monkeypatch.setattr(staging, "as_cupy", lambda buf: buf)

    def routed(sc):
        a = Dev()
        return sc.devices.route(sc, a, a)[0]

    assert ok(x509_run(3, routed)) == ["device"] * 3 and probes == [3, 3, 3]
    assert ok(x509_run(2, routed)) == ["device"] * 2 and probes[3:] == [2, 2]


def test_a_failed_op_cancels_the_origin_macs_it_still_waits_for(monkeypatch):
    """4 ranks: rank 2 refuses origin 0's forged block (step 1) while rank 3's MACs, for the
    block that would come last, are still posted: the op's failure cancels that receive with the
    op's others (no receive is left posted on the frames' channel)."""
    forge_forwarded_block(monkeypatch)
    seen = {}

    class Watch(TransportWrapper):
        def irecv(self, buf, peer):
            req = self.inner.irecv(buf, peer)
            if peer == 3 and len(np.asarray(buf)) == 32:  # rank 3's MACs: one frame, and the seal
                seen["mac"] = req
            return req

        def cancel(self, reqs):
            seen["cancelled"] = list(reqs)
            return self.inner.cancel(reqs)

    res = x509_run(4, allgathered, wraps={2: Watch})
    assert isinstance(res[2], AuthenticationError) and res[2].peer == 1, res
    assert any(r is seen["mac"] for r in seen["cancelled"]), seen


def test_a_refused_group_frame_leaves_no_plaintext_in_scratch(monkeypatch):
    """The forged block that rank 2 opened into its private scratch (it passed the group tag) is
    zeroed there once its origin MAC fails (crypto on the calling thread: the same scratch)."""
    forge_forwarded_block(monkeypatch)

    def body(sc):
        try:
            allgathered(sc)
        except AuthenticationError as e:
            return e, bytes(sc.context.workspace.scratch(160))
        return None

    res = x509_run(3, body)
    err, scratch = res[2]
    assert err.peer == 1 and scratch == bytes(160)


def test_an_origin_whose_frames_do_not_match_its_macs_is_named_without_a_forwarder(monkeypatch):
    """Origin 0's MACs made over other data than it seals (as if its message were altered): rank
    1, which gets origin 0's block straight from it, names rank 0 and no forwarder."""
    from seccomm.engine import origin

    real = origin.OriginProofs.start

    def start(self, origins, pieces):
        if self.run.rank == 0 and pieces:
            pieces = [memoryview(bytes(len(p))) for p in pieces]
        return real(self, origins, pieces)

    monkeypatch.setattr(origin.OriginProofs, "start", start)
    res = x509_run(3, allgathered)
    assert isinstance(res[1], AuthenticationError) and res[1].peer == 0, res
    assert "group frame of origin 0 does not match the MAC its origin sent this rank" in str(res[1])


@pytest.mark.parametrize("identity", ["psk", "x509"])
def test_an_insider_forges_another_ranks_give_up_notice_only_under_psk(identity):
    """Rank 2 makes the best give-up notice in rank 1's name for rank 0 that its own keys allow
    (blaming rank 0, as if rank 1 gave up on it).  Under psk it derives the pair key of ranks 0
    and 1 from the job secret and the setup, and rank 0 takes the notice; under x509 that key
    needs the pair's X25519 secret, rank 2's candidates (its schedule as if it were rank 1, its
    own pair key with rank 0) fail, and rank 0 refuses the notice."""
    from seccomm.control import PairMacs
    from seccomm.transports.notices import open_notice, seal_notice

    def body(sc):
        k = sc.session.keys
        return sc.rank, k, PairMacs(sc.rank, sc.size, k.pair_key)

    kw = {"psk": PSK} if identity == "psk" else {}
    res = ok((x509_run if identity == "x509" else run)(3, body, **kw))
    keys2, macs0 = res[2][1], res[0][2]
    as_rank_1 = KeySchedule(keys2._secret, keys2.suite, keys2._salt, keys2._context, 1)  # noqa: SLF001
    candidates = [PairMacs(1, 3, as_rank_1.pair_key)]  # (x509: from the transcript and no pair secret)
    if identity == "x509":  # and what rank 2 holds: its pair key with rank 0, in rank 1's place
        candidates.append(PairMacs(1, 3, lambda a, b: keys2.pair_key(0, 2)))
    for forger in candidates:
        notice = seal_notice(forger, 0, 0, 0).tobytes()
        got = open_notice(macs0, 1, notice, 3)
        assert (got is not None) == (identity == "psk"), (identity, got)


# -- check_identities on a transcript, one rule at a time ------------------------------------------
def _pki_with(tmp_path, public_keys):
    """A throw-away CA and one leaf per public key in ``public_keys`` (hosts
    rank<i>.seccomm.test), any key type: (CA certificates, DER chains, the end of validity)."""
    from cryptography.hazmat.primitives import serialization

    from seccomm.identity import TestCA

    ca = TestCA()
    chains = [
        (ca.issue(f"rank{i}.seccomm.test", pub).public_bytes(serialization.Encoding.DER),)
        for i, pub in enumerate(public_keys)
    ]
    return [ca.cert], chains, ca.end


def _transcript(chains, hosts=None):
    """The transcript of hellos carrying ``chains`` (each rank's host key its certificate's name
    unless ``hosts`` says otherwise)."""
    from seccomm.handshake import Hello, Transcript
    from seccomm.topology import name_key

    rows = np.stack(
        [
            encode_hello(
                Hello(j, bytes(32), hosts[j] if hosts else name_key(f"rank{j}.seccomm.test"), bytes(32),
                      {"protocol": 4}, None, chain),
                None,
            )
            for j, chain in enumerate(chains)
        ]
    )  # fmt: skip
    return Transcript.from_rows(rows)


def _ec():
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1()).public_key()


def test_check_identities_names_the_rank_of_an_unreadable_chain(tmp_path):
    from seccomm.handshake import check_identities

    cas, chains, _ = _pki_with(tmp_path, [_ec(), _ec(), _ec()])
    chains[1] = (b"\x30\x03not DER",)
    with pytest.raises(IdentityError) as e:
        check_identities(_transcript(chains), cas)
    assert e.value.peer == 1 and "setup: rank 1's certificate chain is not readable DER" in str(e.value)


def test_check_identities_judges_validity_at_the_time_it_is_given(tmp_path):
    import datetime as dt

    from seccomm.handshake import check_identities

    cas, chains, end = _pki_with(tmp_path, [_ec(), _ec()])
    assert len(check_identities(_transcript(chains), cas, now=end - dt.timedelta(hours=1))) == 2
    with pytest.raises(IdentityError) as e:
        check_identities(_transcript(chains), cas, now=end + dt.timedelta(days=1))
    assert e.value.peer == 0


def test_ranks_that_share_a_certificate_keep_their_own_rank(tmp_path):
    from seccomm.handshake import check_identities

    cas, chains, _ = _pki_with(tmp_path, [_ec()])
    ids = check_identities(_transcript(chains * 3, hosts=[_name0()] * 3), cas)
    assert [p.rank for p in ids] == [0, 1, 2] and len({p.fingerprint for p in ids}) == 1


def _name0():
    from seccomm.topology import name_key

    return name_key("rank0.seccomm.test")


def test_check_identities_takes_a_4096_bit_rsa_key_and_refuses_one_it_cannot_sign_with(tmp_path):
    """RSA-4096 signs 512 bytes, the most a finished message holds: taken.  A key seccomm has no
    signature for (X25519, in a chain the CA signed) is refused naming its rank."""
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    from seccomm.handshake import check_identities

    rsa4096 = rsa.generate_private_key(public_exponent=65537, key_size=4096).public_key()
    x25519 = X25519PrivateKey.generate().public_key()
    cas, chains, _ = _pki_with(tmp_path, [_ec(), rsa4096, x25519])
    assert len(check_identities(_transcript(chains[:2]), cas)) == 2
    with pytest.raises(IdentityError) as e:
        check_identities(_transcript(chains), cas)
    assert e.value.peer == 2 and "setup: rank 2's certificate key is not one seccomm signs with" in str(
        e.value
    )


class _Chain(TransportWrapper):
    """This rank's own hello, re-encoded with ``chain`` in place of its own (MACed with ``key``,
    the hello key of the PSK where one is set)."""

    chain, key = None, None

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        if op_label == "setup: hello":
            h = decode_hello(np.asarray(sendbuf).tobytes())
            sendbuf = encode_hello(replace(h, chain=self.chain), self.key)
        return self.inner.allgather(sendbuf, recvbuf, op_label, timeout)


def test_a_hello_without_a_chain_under_x509_or_with_one_under_psk_is_refused_naming_its_rank():
    """The chain is there exactly under identity x509: rank 1's hello without one (x509) or with
    one (psk) is a ConfigMismatchError on every rank naming rank 1, before any chain is read."""
    from seccomm.handshake import job_digest
    from seccomm.keys import hello_key
    from seccomm.options import job_id_of

    class Bare(_Chain):
        chain = None

    res = x509_run(3, lambda sc: sc, wraps={1: Bare})
    assert all(isinstance(r, ConfigMismatchError) and r.peer == 1 for r in res), res
    assert "setup: the hello from rank 1 has no certificate chain" in str(res[0]), res

    class Carried(_Chain):
        chain = (b"\x30\x00",)
        key = hello_key(PSK, job_digest(job_id_of(None)))

    res = run(3, lambda sc: sc, wraps={1: Carried}, psk=PSK)
    assert all(isinstance(r, ConfigMismatchError) and r.peer == 1 for r in res), res
    assert "setup: the hello from rank 1 carries a certificate chain under identity 'psk'" in str(res[0]), res


def test_an_unauthenticated_excerpt_is_marked_only_when_cut():
    from seccomm.handshake import EXCERPT_CHARS, unauthenticated_excerpt

    whole = "e" * EXCERPT_CHARS
    assert unauthenticated_excerpt(whole) == repr(whole)
    longer = whole + "f"
    assert unauthenticated_excerpt(longer) == (
        repr(whole) + f" (first {EXCERPT_CHARS} of {EXCERPT_CHARS + 1} characters)"
    )


@pytest.mark.parametrize("mode", ["psk", "psk-dhe", "x509"])
def test_the_key_schedule_knows_the_mode_that_chooses_the_origin_proofs(mode):
    """Origin proofs follow the schedule's mode (seccomm.engine.origin.needed: x509 only): psk-dhe
    and psk schedules say their own mode, so their group frames carry none."""
    from seccomm.engine.origin import needed

    body = lambda sc: (sc.session.keys.mode, needed(sc.session.keys, sc.size))  # noqa: E731
    if mode == "x509":
        res = ok(x509_run(3, body))
    else:
        res = ok(run(3, body, psk=PSK, key_exchange=mode))
    assert res == [(mode, mode == "x509")] * 3, res


def test_with_a_psk_mixed_in_a_bad_identity_is_reported_authenticated(tmp_path):
    """Under x509 with a PSK set, the hello of a rank whose identity failed carries its error
    under the PSK's MAC: its peers give the reason as authenticated, not as an excerpt."""
    ids = list(rank_identities(3))
    ids[1] = bad_identity(tmp_path, "key readable by others")
    res = x509_run(3, lambda sc: sc, ids=ids, psk=PSK)
    assert isinstance(res[1], IdentityError), res
    for r in (0, 2):
        assert isinstance(res[r], ConfigMismatchError) and res[r].peer == 1, res
        msg = str(res[r])
        assert "not authenticated" not in msg and "(mode 644); run: chmod 600" in msg, msg


@pytest.mark.parametrize("k", [0, 1])
def test_a_device_rank_names_the_first_chunk_that_fails_either_check_as_the_cpu_engine(
    monkeypatch, host_backend, k
):
    """Forwarder rank 1 sends origin 0's block (4 frames) to rank 2 with frame k forged under the
    group key (its origin MAC fails) and frame k + 1 with a bad group tag.  The CPU engine checks
    chunk by chunk and names frame k; a device-engine rank 2, which opens the block in one
    launch, names the same chunk with the same text."""

    def pick(j, got, made):
        return made[j] if j == k else flipped(got[j]) if j == k + 1 else got[j]

    forge_forwarded_block(monkeypatch, pick=pick)

    def rank2(backends):
        return device_run(3, lambda r, sc: caught(allgathered, sc), backends, chunk_bytes=48)[2]

    cpu, dev = rank2({}), rank2({2: host_backend})
    assert isinstance(cpu, AuthenticationError) and cpu.peer == 1, cpu
    assert f"chunk {k}/4" in str(cpu) and "does not match the MAC its origin sent" in str(cpu), cpu
    assert type(dev) is type(cpu) and dev.peer == 1 and str(dev) == str(cpu)


def test_a_device_relay_checks_its_origins_macs_when_the_first_frame_lands_as_the_cpu_engine(host_backend):
    """Binomial bcast from rank 0 on 3 ranks (rank 0 sends to rank 2 itself): on the way to rank
    2, origin 0's MACs and its first frame are both altered.  The CPU engine checks the MACs as
    the first frame lands and names rank 0's MACs; so does a device-engine rank 2 (its relay
    waits for them in the same place), not the frame."""

    class Both(OnTheWay):
        def irecv(self, buf, peer):
            req = super().irecv(buf, peer)
            if peer == 0 and len(np.asarray(buf)) == 160 + 16:  # (its one frame)
                self.mine[id(req)] = buf
            return req

        def edit(self, op, buf):
            np.asarray(buf)[3] ^= 4

    def body(r, sc):
        sc.bcast_chain_bytes = 1 << 30  # (binomial)
        return caught(sc.bcast, np.full(40, 7.0 if r == 0 else 0.0, np.float32), 0)

    cpu, dev = (device_run(3, body, backends, wraps={2: Both})[2] for backends in ({}, {2: host_backend}))
    assert isinstance(cpu, AuthenticationError) and cpu.peer == 0 and "origin MACs" in str(cpu), cpu
    assert type(dev) is type(cpu) and dev.peer == 0 and str(dev) == str(cpu)
