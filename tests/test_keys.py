"""Job secret loading and the HKDF key schedule."""

from __future__ import annotations

import os

import pytest

from seccomm.entropy import MIN_SECRET_BITS, estimate_bits
from seccomm.errors import KeyScheduleError
from seccomm.framing import Workspace
from seccomm.keys import KeySchedule, hello_key, hkdf, load_secret, new_secret_file
from seccomm.suites import get_suite


def test_rfc5869_case1():
    """HKDF-SHA256 test case 1 of RFC 5869 (through cryptography)."""
    okm = hkdf(bytes([0x0B] * 22), bytes(range(13)), bytes(range(0xF0, 0xFA)), 42)
    assert okm.hex() == (
        "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865"
    )


GOOD = "5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0"  # os.urandom(32).hex()


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv("SECCOMM_PSK_FILE", raising=False)
    monkeypatch.delenv("SECCOMM_PSK", raising=False)
    return monkeypatch


def secret_file(tmp_path, content, mode=0o600, name="psk"):
    p = tmp_path / name
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    os.chmod(p, mode)
    return str(p)


def test_secret_sources(tmp_path, no_env):
    monkeypatch = no_env
    with pytest.raises(KeyScheduleError, match="no job secret"):
        load_secret()
    monkeypatch.setenv("SECCOMM_PSK", GOOD)
    assert load_secret() == (bytes.fromhex(GOOD), "SECCOMM_PSK")
    monkeypatch.setenv("SECCOMM_PSK", GOOD[:16])
    with pytest.raises(KeyScheduleError, match="at least 32"):
        load_secret()
    path = new_secret_file(str(tmp_path))
    assert os.stat(path).st_mode & 0o777 == 0o600
    monkeypatch.setenv("SECCOMM_PSK_FILE", path)
    secret, source = load_secret()
    assert len(secret) == 32 and source == "SECCOMM_PSK_FILE"
    os.chmod(path, 0o640)
    with pytest.raises(KeyScheduleError, match="group or others") as e:
        load_secret()
    assert open(path).read() not in str(e.value) and path in str(e.value)
    raw = bytes.fromhex(GOOD) + bytes(range(200, 208))
    monkeypatch.setenv("SECCOMM_PSK_FILE", secret_file(tmp_path, raw, name="raw"))
    assert load_secret()[0] == raw  # not hex: the raw bytes
    spaced = secret_file(tmp_path, " ".join(GOOD[i : i + 2] for i in range(0, 64, 2)) + "\n", name="sp")
    monkeypatch.setenv("SECCOMM_PSK_FILE", spaced)
    assert load_secret()[0] == bytes.fromhex(GOOD)
    assert load_secret(bytes.fromhex(GOOD))[1] == "argument" and load_secret(GOOD)[0] == bytes.fromhex(GOOD)


@pytest.mark.parametrize(
    "content,match",
    [
        (GOOD[:-1], "is not valid hex"),  # 63 digits: a hex secret typed wrong, not a raw one
        ("ab" * 32, "too easy to guess offline: estimated 0 bits"),
        ("", "holds 0 bytes"),
        ("x" * (1 << 17), "larger than 65536 bytes"),
    ],
)
def test_secret_file_content_errors(tmp_path, no_env, content, match):
    no_env.setenv("SECCOMM_PSK_FILE", secret_file(tmp_path, content))
    with pytest.raises(KeyScheduleError, match=match) as e:
        load_secret()
    assert "SECCOMM_PSK_FILE" in str(e.value) and (not content or content[:20] not in str(e.value))


def test_secret_file_is_checked_on_the_open_descriptor(tmp_path, no_env, monkeypatch):
    """A symbolic link, a FIFO, a directory, a missing file and another user's file are refused,
    with the file's name and the fix; the checks use fstat of the descriptor that is read (a
    stat of the path would be a time-of-check/time-of-use race)."""
    good = secret_file(tmp_path, GOOD)
    cases = []
    link = tmp_path / "link"
    link.symlink_to(good)
    cases.append((str(link), "is a symbolic link, refused"))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)  # opening it for reading must not block
    cases.append((str(fifo), "is not a regular file"))
    cases.append((str(tmp_path), "is not a regular file"))
    cases.append((str(tmp_path / "missing"), "cannot be opened: No such file.*openssl rand -hex 32"))
    for path, match in cases:
        no_env.setenv("SECCOMM_PSK_FILE", path)
        with pytest.raises(KeyScheduleError, match=match) as e:
            load_secret()
        assert path in str(e.value)
    no_env.setenv("SECCOMM_PSK_FILE", good)

    def no_path_stat(*a, **k):
        raise AssertionError("the path was stat'ed: check the open descriptor instead")

    monkeypatch.setattr(os, "stat", no_path_stat)
    monkeypatch.setattr(os, "lstat", no_path_stat)
    assert load_secret()[0] == bytes.fromhex(GOOD)
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)  # as if another user ran us
    with pytest.raises(KeyScheduleError, match="is owned by uid .* not by this process's user"):
        load_secret()
    monkeypatch.undo()
    if os.geteuid() == 0:  # root can make the file really belong to someone else
        os.chown(good, 65534, 65534)
        no_env.setenv("SECCOMM_PSK_FILE", good)
        with pytest.raises(KeyScheduleError, match="owned by uid 65534"):
            load_secret()


WEAK = {
    "zeros": bytes(32),
    "counter": bytes(range(32)),
    "ramp by 7": bytes((7 * i) % 256 for i in range(32)),
    "squares": bytes((i * i) % 256 for i in range(32)),
    "gray code": bytes(i ^ (i >> 1) for i in range(32)),
    "a repeated 16-byte value": bytes.fromhex(GOOD)[:16] * 2,
    "12 random bytes and zeros": bytes.fromhex(GOOD)[:12] + bytes(20),
    "big-endian word counter": b"".join(i.to_bytes(4, "big") for i in range(8)),
    "a word repeated": b"password" * 8,
    "a 40-character passphrase": b"correct horse battery staple, my secret!",
    "hex digits as text": GOOD[:32].encode(),  # 32 hex characters are 128 bits only at best
}


@pytest.mark.parametrize("name", list(WEAK))
def test_guessable_secrets_are_refused_from_every_source(tmp_path, no_env, name):
    weak = WEAK[name]
    with pytest.raises(KeyScheduleError, match="too easy to guess offline") as e:
        load_secret(weak)
    assert weak.hex() not in str(e.value) and "openssl rand -hex 32" in str(e.value)
    no_env.setenv("SECCOMM_PSK_FILE", secret_file(tmp_path, weak.hex()))
    with pytest.raises(KeyScheduleError, match="SECCOMM_PSK_FILE .* too easy to guess"):
        load_secret()
    assert estimate_bits(weak).bits < MIN_SECRET_BITS


def test_strong_secrets_pass():
    text = b"the quick brown fox jumps over the lazy dog while seven zebras quietly vex a judge"
    assert len(text) >= 64 and load_secret(text)[0] == text  # text: 2 bits a character
    assert load_secret(bytes.fromhex(GOOD) + bytes(16))[1] == "argument"  # 128 random bits
    for _ in range(200):
        path = new_secret_file()
        try:
            with open(path) as f:
                assert len(f.read()) == 64
        finally:
            os.unlink(path)
    worst = min(estimate_bits(os.urandom(32)).bits for _ in range(20_000))
    assert worst >= 128 + 8  # far from the threshold in practice


def _stirling2(n, k):
    s = [[0] * (k + 1) for _ in range(n + 1)]
    s[0][0] = 1
    for i in range(1, n + 1):
        for j in range(1, k + 1):
            s[i][j] = j * s[i - 1][j] + s[i - 1][j - 1]
    return s[n][k]


def test_false_rejections_of_random_secrets_are_below_2_to_the_minus_44():
    """The bound of seccomm.entropy, checked against an independent formula: P(D = d distinct
    values among m uniform bytes) = C(256, d) S(m, d) d! / 256^m (Stirling numbers of the
    second kind)."""
    from math import comb, factorial, log2

    from seccomm.entropy import _low_entropy_probability, false_rejection_bound

    for m, need in ((32, 128), (31, 120), (30, 112), (12, 40)):
        exact = (
            sum(comb(256, d) * _stirling2(m, d) * factorial(d) for d in range(1, m + 1) if m * log2(d) < need)
            / 256**m
        )
        assert _low_entropy_probability(m, need) == pytest.approx(exact, rel=1e-9)
    assert false_rejection_bound(32) < 2**-44
    assert _low_entropy_probability(12, 40) > 1e-9  # the sum does count something


def test_keys_distinct_and_hidden():
    secret = os.urandom(32)
    suite = get_suite("aes-256-gcm")
    ks = KeySchedule(secret, suite, b"s" * 32, b"t" * 32, rank=0)
    other = KeySchedule(secret, suite, b"s" * 32, b"u" * 32, rank=0)  # another setup transcript
    pt = b"same plaintext!!"
    (slot,) = Workspace().slots("w", [len(pt)])
    slot.nonce[:] = bytes(len(slot.nonce))
    slot.header[:] = bytes(len(slot.header))
    cts = set()
    for keyed in [
        ks.direction(0, 0, 1),
        ks.direction(0, 1, 0),
        ks.direction(1, 0, 1),
        ks.direction(0, 0, 2),
        ks.group(0),
        ks.group(1),
        other.direction(0, 0, 1),
    ]:
        keyed.seal(slot, memoryview(pt))  # same nonce, header and plaintext: only the key differs
        cts.add(bytes(slot.frame))
    assert len(cts) == 7  # every (kind, epoch, direction, communicator) has its own key
    assert ks.direction(0, 0, 1) is ks.direction(0, 0, 1)  # cached
    assert secret.hex() not in repr(ks) and "secret" not in repr(ks).lower()
    ks.forget_before(1)
    assert all(k[1] >= 1 for k in ks._cache)


def test_setup_keys_bind_salt_and_transcript():
    """The finished key and every frame key change with the session salt (every rank's nonce)
    and with the transcript hash; the hello key depends on the secret and job id only."""
    secret, suite = os.urandom(32), get_suite("aes-256-gcm")
    base = KeySchedule(secret, suite, b"s" * 32, b"t" * 32, rank=0)
    for other in (
        KeySchedule(secret, suite, b"S" * 32, b"t" * 32, rank=0),  # another nonce somewhere
        KeySchedule(secret, suite, b"s" * 32, b"T" * 32, rank=0),  # another transcript
        KeySchedule(os.urandom(32), suite, b"s" * 32, b"t" * 32, rank=0),  # another secret
    ):
        assert other.finished_key() != base.finished_key()
        assert other.direction_key(0, 0, 1) != base.direction_key(0, 0, 1)
        assert other.group_key(0) != base.group_key(0)
    assert hello_key(secret, b"j" * 16) == hello_key(secret, b"j" * 16) != hello_key(secret, b"k" * 16)
    assert base.finished_key() not in (base.direction_key(0, 0, 1), base.group_key(0))
