"""Job secret loading and the HKDF key schedule."""

from __future__ import annotations

import os

import pytest

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


def test_secret_sources(tmp_path, monkeypatch):
    monkeypatch.delenv("SECCOMM_PSK_FILE", raising=False)
    monkeypatch.delenv("SECCOMM_PSK", raising=False)
    with pytest.raises(KeyScheduleError, match="no job secret"):
        load_secret()
    monkeypatch.setenv("SECCOMM_PSK", "ab" * 32)
    assert load_secret() == (bytes([0xAB] * 32), "SECCOMM_PSK")
    monkeypatch.setenv("SECCOMM_PSK", "ab" * 8)
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
    assert open(path).read() not in str(e.value)
    raw = tmp_path / "raw"
    raw.write_bytes(bytes(range(200, 240)))
    os.chmod(raw, 0o600)
    monkeypatch.setenv("SECCOMM_PSK_FILE", str(raw))
    assert load_secret()[0] == bytes(range(200, 240))
    assert load_secret(b"z" * 40)[1] == "argument"


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
