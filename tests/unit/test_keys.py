"""Job secret loading and the HKDF key schedule."""

from __future__ import annotations

import base64
import os

import numpy as np
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
    cases.append((str(link), "is a symbolic link, refused .*: point SECCOMM_PSK_FILE at the file itself$"))
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


WORDS40 = b"correct horse battery staple, my secret!"

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
    "a 40-character passphrase": WORDS40,
    "hex digits as text": GOOD[:32].encode(),  # 32 hex characters are 128 bits only at best
    # text judged by its characters, whatever bytes surround it
    "a 33-character passphrase with an accented letter": "correct horse battery staple, mé!".encode(),
    "a 30-character passphrase and two control bytes": b"correct horse battery staple!!\x00\x01",
    "a date and a job number and three control bytes": b"2026-12-04T02:15:30 job 12345\x01\x02\x03",
    "a passphrase between random bytes": bytes.fromhex(GOOD)[:4] + b"my training cluster's secret" + bytes(1),
    "a 40-character passphrase and five random bytes": WORDS40 + bytes.fromhex(GOOD)[:5],
    # text in another encoding, or behind one
    "a passphrase in UTF-16 with its byte-order mark": WORDS40.decode().encode("utf-16"),
    "a passphrase in UTF-16-BE after a random byte": b"\x9d" + WORDS40.decode().encode("utf-16-be"),
    "a passphrase in UTF-32": WORDS40.decode().encode("utf-32"),
    "a passphrase run through base64": base64.b64encode(WORDS40),
    "a 24-character passphrase run through base64 (32 characters)": base64.b64encode(
        b"my training secret 2026!"
    ),
    "a passphrase in URL-safe base64 without padding": base64.urlsafe_b64encode(WORDS40 + b"?>").rstrip(b"="),
    "a passphrase's hex digits as text": WORDS40[:32].hex().encode(),
    # repeats and text behind an encoding: every view judges what the encoding holds
    "one letter 64 times in UTF-32": ("z" * 64).encode("utf-32"),
    "one letter 64 times in UTF-16 with its byte-order mark": ("z" * 64).encode("utf-16"),
    "a word repeated, in UTF-32": ("password" * 8).encode("utf-32"),
    "one letter 64 times run through base64": base64.b64encode(b"z" * 64),
    "a passphrase run through base64 twice": base64.b64encode(base64.b64encode(WORDS40)),
    "the hex of the base64 of a passphrase in UTF-16": base64.b64encode(WORDS40.decode().encode("utf-16"))
    .hex()
    .encode(),
    "a 55-character passphrase in UTF-32": "the quick brown fox jumps over the lazy dog and then ru".encode(
        "utf-32"
    ),
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
    for n in (24, 32):  # ``openssl rand -base64 N``: judged as base64 text, and decoded (32 B)
        assert min(estimate_bits(base64.b64encode(os.urandom(n))).bits for _ in range(20_000)) >= 128


def _stirling2(n, k):
    s = [[0] * (k + 1) for _ in range(n + 1)]
    s[0][0] = 1
    for i in range(1, n + 1):
        for j in range(1, k + 1):
            s[i][j] = j * s[i - 1][j] + s[i - 1][j - 1]
    return s[n][k]


def test_false_rejections_of_random_secrets_are_below_2_to_the_minus_26():
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
    assert 2**-26.1 < false_rejection_bound(32) < 2**-26
    assert _low_entropy_probability(12, 40) > 1e-9  # the sum does count something


@pytest.mark.parametrize("n, need", [(12, 60), (16, 90), (16, 80)])
def test_the_text_views_bound_matches_a_count(n, need, monkeypatch):
    """text_rejection_bound (a chain over UTF-8 characters) against a Monte Carlo count of the
    text view at sizes where rejections are common (runs of 8 characters, so that they are):
    within the count's spread, and never below it by more (it is an upper bound)."""
    from seccomm import entropy
    from seccomm.entropy import text_bits, text_rejection_bound

    monkeypatch.setattr(entropy, "TEXT_RUN", 8)
    rng = np.random.default_rng(n * 1000 + need)
    trials = 40_000
    hits = sum(text_bits(rng.bytes(n)) < need for _ in range(trials))
    bound = text_rejection_bound(n, need) + entropy.unit_rejection_bound(n, need)
    spread = 4 * (bound * trials) ** 0.5  # four standard deviations of the count
    assert hits - spread <= bound * trials <= hits * 1.15 + spread, (hits, bound * trials)


def test_the_utf16_and_utf32_readings_bound_holds_over_a_count(monkeypatch):
    """unit_rejection_bound against a Monte Carlo count of the UTF-16 and UTF-32 readings alone,
    at a size and run length where they reject often (8 bytes, runs of 2, 51 bits): the count
    never exceeds the bound beyond its spread."""
    from seccomm import entropy

    monkeypatch.setattr(entropy, "TEXT_RUN", 2)
    rng = np.random.default_rng(7)
    trials, n, need = 40_000, 8, 51
    hits = 0
    for _ in range(trials):
        data = rng.bytes(n)
        bits = [entropy._reading_bits(ch) for name, ch in entropy._readings(data) if name != "UTF-8"]
        hits += min(bits) < need
    bound = entropy.unit_rejection_bound(n, need)
    assert 0 < hits <= bound * trials + 4 * (bound * trials) ** 0.5, (hits, bound * trials)


def test_text_is_judged_by_its_characters():
    """Runs of 12 or more text characters count 2 bits a character (their class's: hex 4,
    base64 6), accented letters 8 a byte, everything else 8 a byte; shorter runs 8 a byte."""
    from seccomm.entropy import TEXT_RUN, text_bits

    words = b"my secret, a"  # 12 characters of text (not hex, not base64)
    assert TEXT_RUN == len(words) == 12
    assert text_bits(b"\x00" + words) == 8 + 24
    assert text_bits(b"\x00" + words[:11]) == 8 * 12  # too short to be text
    assert text_bits(b"\x00" + words[:11] + "é".encode()) == 8 + 11 * 2 + 16  # é: part of it, 2 bytes
    assert text_bits(b"\xff" + b"0123456789ab") == 8 + 12 * 4  # hex digits: 4 bits
    assert text_bits(b"\xff" + b"x" * 12) == 8 + 12 * 6  # the base64 alphabet: 6 bits
    assert text_bits(b"\xc3" + words) == 8 + 24  # a lead byte without its continuation
    assert text_bits(words + b"\x00" + words) == 24 + 8 + 24


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


def test_secret_file_errors_name_the_file_and_a_fix_that_works(tmp_path, no_env):
    """Each refusal starts with the source (``SECCOMM_PSK_FILE 'path'``) and ends with a command
    for that very path, quoted for the shell (a path with a space): the command that makes a
    file does make one that is accepted, and the chmod fixes the mode."""
    import shlex
    import shutil
    import subprocess

    d = tmp_path / "my dir"
    d.mkdir()
    missing, loose = str(d / "job psk"), secret_file(d, GOOD, mode=0o604, name="loose psk")

    def make_one(path):
        return f"(umask 077 && openssl rand -hex 32 > {shlex.quote(path)})"

    make = make_one(missing)
    cases = [
        (missing, f"cannot be opened: No such file or directory; make one with: {make}"),
        (str(d), f"is not a regular file; make one with: {make_one(str(d))}"),
        (loose, f"is accessible by group or others (mode 604); run: chmod 600 {shlex.quote(loose)}"),
    ]
    for path, tail in cases:
        no_env.setenv("SECCOMM_PSK_FILE", path)
        with pytest.raises(KeyScheduleError) as e:
            load_secret()
        assert str(e.value) == f"SECCOMM_PSK_FILE {path!r} {tail}"
    if shutil.which("openssl"):
        subprocess.run(["sh", "-c", make], check=True)
        subprocess.run(["sh", "-c", f"chmod 600 {shlex.quote(loose)}"], check=True)
        for path in (missing, loose):
            no_env.setenv("SECCOMM_PSK_FILE", path)
            assert len(load_secret()[0]) == 32


@pytest.mark.parametrize("mode", [0o640, 0o620, 0o610, 0o604, 0o602, 0o601, 0o700 | 0o070])
def test_secret_file_with_any_group_or_other_bit_is_refused(tmp_path, mode):
    from seccomm.keys import read_secret_file

    path = secret_file(tmp_path, GOOD, mode=mode)
    with pytest.raises(KeyScheduleError, match=f"accessible by group or others \\(mode {mode:o}\\)"):
        read_secret_file(path)
    os.chmod(path, 0o400)  # read-only for its owner: fine
    assert read_secret_file(path) == bytes.fromhex(GOOD)


def test_secret_file_hex_or_raw(tmp_path):
    """A file of hex digits (either case, with whitespace) is decoded; a file with any other
    character is the raw secret, byte for byte; the size limit is 65536 bytes, inclusive."""
    from seccomm.keys import MAX_SECRET_FILE_BYTES, read_secret_file

    assert MAX_SECRET_FILE_BYTES == 65536
    for text in (GOOD.upper(), " " + GOOD[:32] + "\r\n\t" + GOOD[32:].upper() + "\n"):
        assert read_secret_file(secret_file(tmp_path, text, name="hex")) == bytes.fromhex(GOOD)
    for raw in (
        (GOOD[:40] + "X" + GOOD[40:]).encode(),  # a letter outside the hex digits: raw text
        (GOOD + "g").encode(),
        ("0x" + GOOD).encode(),
        os.urandom(MAX_SECRET_FILE_BYTES),  # exactly at the limit
    ):
        assert read_secret_file(secret_file(tmp_path, raw, name="raw")) == raw
    big = secret_file(tmp_path, os.urandom(MAX_SECRET_FILE_BYTES + 1), name="big")
    with pytest.raises(KeyScheduleError, match="is larger than 65536 bytes: not a secret file"):
        read_secret_file(big)


#: 32 bytes whose entropy estimate is exactly MIN_SECRET_BITS (16 values, each twice)
AT_THRESHOLD = bytes.fromhex("8a03da10bd1dc1f4dabdc38ad9c107a3a3e910f4a107d9e9eded1fc3a11f031d")


def test_random_secret_draws_again_exactly_when_check_secret_would_refuse(monkeypatch):
    """The rule of check_secret: at least MIN_SECRET_BITS passes.  A refused draw is replaced
    by a new 32-byte draw; a draw right at the threshold is kept."""
    from seccomm import keys
    from seccomm.keys import check_secret, random_secret

    assert estimate_bits(AT_THRESHOLD).bits == MIN_SECRET_BITS
    assert check_secret(AT_THRESHOLD, "x") == AT_THRESHOLD
    draws, asked = [bytes(32), bytes(range(32)), AT_THRESHOLD, os.urandom(32)], []

    def urandom(n):
        asked.append(n)
        return draws[len(asked) - 1]

    monkeypatch.setattr(keys.os, "urandom", urandom)
    assert random_secret() == AT_THRESHOLD and asked == [32, 32, 32]


def test_new_secret_file_name_place_and_content(tmp_path):
    path = new_secret_file(str(tmp_path))
    assert os.path.dirname(path) == str(tmp_path)
    assert os.path.basename(path).startswith("seccomm-psk-")
    with open(path) as f:
        text = f.read()
    assert len(text) == 64 and estimate_bits(bytes.fromhex(text)).bits >= MIN_SECRET_BITS
    assert os.stat(path).st_mode & 0o777 == 0o600


def test_group_secret_and_rotation_in_the_key_schedule():
    """psk-dhe: the group, finished and notice keys depend on the group secret (forward
    secrecy: not on the job secret alone), direction keys on the pairwise X25519 secret;
    forget_before(e) drops every key of older epochs and keeps those of epoch e (the same
    objects: no new derivation)."""
    secret, suite = os.urandom(32), get_suite("aes-256-gcm")

    def schedule(pair=None, group=None):
        ks = KeySchedule(secret, suite, b"s" * 32, b"t" * 32, rank=0)
        if pair is not None:
            ks.use_dhe(pair)
        if group is not None:
            ks.use_group_secret(group)
        return ks

    psk, g1, g2 = schedule(), schedule({1: b"a" * 32}, b"1" * 32), schedule({1: b"b" * 32}, b"2" * 32)
    assert "mode=psk>" not in repr(g1) and "mode=psk-dhe " in repr(g1) and "mode=psk " in repr(psk)
    for key in ("group_key", "finished_key", "pair_key"):
        args = {"group_key": (0,), "pair_key": (0, 1)}.get(key, ())
        vals = [getattr(k, key)(*args) for k in (psk, g1, g2)]
        assert len(set(vals)) == 3, key
    assert len({k.direction_key(0, 0, 1) for k in (psk, g1, g2)}) == 3
    ks = schedule()
    old = [ks.direction(0, 0, 1), ks.group(0)]
    cur = [ks.direction(1, 0, 1), ks.direction(1, 1, 0), ks.group(1), ks.direction(2, 0, 1)]
    raw = [ks.direction_key(1, 0, 1), ks.group_key(1)]
    ks.forget_before(1)
    assert [ks.direction(1, 0, 1), ks.direction(1, 1, 0), ks.group(1), ks.direction(2, 0, 1)] == cur
    assert all(a is b for a, b in zip(cur, [ks.direction(1, 0, 1), ks.direction(1, 1, 0), ks.group(1)]))
    assert {k[1] for k in ks._cache} == {1, 2} and len(ks._cache) == 8  # 4 keyed suites, 4 raw keys
    assert ks.direction(0, 0, 1) is not old[0] and ks.group(0) is not old[1]
    assert [ks.direction_key(1, 0, 1), ks.group_key(1)] == raw


def test_key_schedule_as_documented():
    """Every key recomputed from the table of the module docstring (and docs/design.md, "Key
    schedule") with cryptography's HKDF directly: labels, salt, transcript hash and the u32
    big-endian fields, psk and psk-dhe (pairwise secret of src and dst, group secret)."""
    import struct

    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    secret, salt, th = os.urandom(32), os.urandom(32), os.urandom(32)
    pair, gs = {0: os.urandom(32), 2: os.urandom(32)}, os.urandom(32)

    def ref(ikm, label, *fields):  # no fields: "label|suite||th"
        info = b"seccomm/1 " + label + b"|aes-256-gcm|" + struct.pack(f">{len(fields)}I", *fields)
        return HKDF(hashes.SHA256(), 32, salt, info + b"|" + th).derive(ikm)

    for mode in ("psk", "psk-dhe"):
        ks = KeySchedule(secret, get_suite("aes-256-gcm"), salt, th, rank=1)
        if mode == "psk-dhe":
            ks.use_dhe(pair)
            ks.use_group_secret(gs)
        g = gs if mode == "psk-dhe" else b""
        for e, src, dst in ((0, 1, 2), (3, 2, 1), (7, 1, 0), (1 << 31, 0, 1)):
            peer = dst if src == 1 else src
            ikm = secret + (pair[peer] if mode == "psk-dhe" else b"")
            assert ks.direction_key(e, src, dst) == ref(ikm, b"dir", e, src, dst), (mode, e, src, dst)
        for e in (0, 5):
            assert ks.group_key(e) == ref(secret + g, b"group", e)
        assert ks.finished_key() == ref(secret + g, b"finished")
        for a, b in ((1, 2), (0, 1)):  # rank 1's pairs: the pairwise secret under psk-dhe
            ikm = secret + (pair[b if a == 1 else a] if mode == "psk-dhe" else b"")
            assert ks.pair_key(a, b) == ref(ikm, b"control", a, b), (mode, a, b)
    assert ks.wrap_key(1) == ref(secret + pair[0], b"group-wrap", 1)  # rank 1 with rank 0
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    for e, o, r in ((0, 1, 2), (4, 0, 1), (9, 1, 0)):  # origin MACs: rank 1's pairs, GMAC keys
        key = ref(secret + pair[r if o == 1 else o], b"origin", e, o, r)
        want = AESGCM(key).encrypt(bytes(12), b"", b"m")
        assert ks.origin_key(e, o, r).encrypt(bytes(12), b"", b"m") == want, (e, o, r)
        assert ks.origin_key_bytes(e, o, r) == key, (e, o, r)  # (the device engine's kernels take these)
    for o, r in ((0, 2), (1, 1)):
        with pytest.raises(ValueError, match="a pair of this rank"):
            ks.origin_key(0, o, r)
        with pytest.raises(ValueError, match="a pair of this rank"):
            ks.origin_key_bytes(0, o, r)
    assert ks.origin_key(4, 0, 1) is ks.origin_key(4, 0, 1)  # cached: no HKDF per group frame
    assert ks.origin_key_bytes(4, 0, 1) is ks.origin_key_bytes(4, 0, 1)
    old, old_bytes = ks.origin_key(4, 0, 1), ks.origin_key_bytes(4, 0, 1)
    ks.forget_before(5)  # (a rotation: the keys of epoch 4 are dropped, then made again)
    assert ks.origin_key(4, 0, 1) is not old and ks.origin_key_bytes(4, 0, 1) is not old_bytes
    ks0 = KeySchedule(secret, get_suite("aes-256-gcm"), salt, th, rank=0)
    ks0.use_dhe({2: pair[2]})
    assert ks0.wrap_key(2) == ref(secret + pair[2], b"group-wrap", 2)
    job = os.urandom(16)
    assert hello_key(secret, job) == HKDF(hashes.SHA256(), 32, job, b"seccomm/1 hello").derive(secret)


def test_key_schedule_caches_raw_keys_and_keyed_suites_apart(monkeypatch):
    """Raw keys (the GPU kernels) and keyed suites (the CPU engine) of one (epoch, direction) or
    epoch come from one derivation each, in either order of first use, and are cached: a second
    request derives nothing."""
    from seccomm import keys

    calls = []
    real = keys.hkdf
    monkeypatch.setattr(keys, "hkdf", lambda *a, **k: calls.append(a) or real(*a, **k))
    suite = get_suite("chacha20-poly1305")
    (slot,) = Workspace().slots("w", [16])
    for order in ("keyed first", "raw first"):
        ks = KeySchedule(os.urandom(32), suite, b"s" * 32, b"t" * 32, rank=0)
        del calls[:]
        for _ in range(2):
            if order == "raw first":
                raw = [ks.direction_key(0, 0, 1), ks.group_key(0)]
            keyed = [ks.direction(0, 0, 1), ks.group(0)]
            raw = [ks.direction_key(0, 0, 1), ks.group_key(0)]
        assert len(calls) == 2 and all(isinstance(k, bytes) and len(k) == 32 for k in raw)
        assert keyed == [ks.direction(0, 0, 1), ks.group(0)]
        assert all(a is b for a, b in zip(keyed, [ks.direction(0, 0, 1), ks.group(0)]))
        for k, key in zip(keyed, raw):  # each keyed suite holds its raw key
            k.seal(slot, memoryview(bytes(16)))
            assert suite.keyed(key).open(slot, bytearray(16)) is not None


HEX_HINT = " (read as hex digits, e.g. from openssl rand -hex 32"


def test_each_source_names_itself_in_its_errors(no_env):
    """The exact refusals of the psk argument and SECCOMM_PSK (SECCOMM_PSK_FILE: above), and
    the message when no source is set, with every way to set one."""
    cases = [
        (
            lambda: load_secret("zz"),
            "psk argument is not valid hex" + HEX_HINT + "; pass bytes for a secret's raw bytes)",
        ),
        (lambda: load_secret(12), "psk argument must be bytes or a hex string, got int"),
        (lambda: load_secret(b"abc"), "psk argument holds 3 bytes; at least 32 needed"),
    ]
    for fn, msg in cases:
        with pytest.raises(KeyScheduleError) as e:
            fn()
        assert str(e.value) == msg
    for value, msg in (
        ("zz", "SECCOMM_PSK is not valid hex" + HEX_HINT + ")"),
        (GOOD[:16], "SECCOMM_PSK holds 8 bytes; at least 32 needed"),
    ):
        no_env.setenv("SECCOMM_PSK", value)
        with pytest.raises(KeyScheduleError) as e:
            load_secret()
        assert str(e.value) == msg
    no_env.setenv("SECCOMM_PSK", "ab" * 32)
    with pytest.raises(KeyScheduleError, match="^SECCOMM_PSK is too easy to guess offline"):
        load_secret()
    no_env.delenv("SECCOMM_PSK")
    with pytest.raises(KeyScheduleError) as e:
        load_secret()
    assert str(e.value) == (
        "no job secret: set SECCOMM_PSK_FILE (a 0600 file of >= 32 random bytes, e.g. "
        "openssl rand -hex 32) or SECCOMM_PSK (>= 64 hex digits) on every rank, or pass psk= "
        "(`seccomm bench`/`train` make one for the ranks they start)"
    )
