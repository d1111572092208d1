"""The GPU kernels' arithmetic core (kernels/sc_crypto.cuh), compiled for the host with the system
C compiler, against RFC 8439, the NIST GCM vectors (FAIL cases included) and `cryptography` on
random keys, nonces, AAD and lengths; and every .cu compiled by nvcc for sm_90 when nvcc exists."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from hostcore import KERNELS, HostAEAD, build
from test_kat import RFC8439_2_8_2
from vectors import load_chacha, load_nist_gcm

LENGTHS = [0, 1, 15, 16, 17, 63, 64, 65, 1000, (1 << 20) + 3]


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build(tmp_path_factory.mktemp("hostcore"))


@pytest.fixture(scope="module")
def chacha(lib):
    return HostAEAD(lib, "chacha")


@pytest.fixture(scope="module")
def gcm(lib):
    return HostAEAD(lib, "gcm")


def test_rfc8439_2_8_2(chacha):
    v = RFC8439_2_8_2
    assert chacha.seal(v["key"], v["iv"], v["aad"], v["pt"]) == v["ct"] + v["tag"]
    assert chacha.open(v["key"], v["iv"], v["aad"], v["ct"] + v["tag"]) == v["pt"]


@pytest.mark.parametrize("name", ["openssl.txt", "boringssl.txt"])
def test_chacha_vectors(chacha, name):
    for v in load_chacha(name):
        frame = v["ct"] + v["tag"]
        if v["fail"]:
            assert chacha.open(v["key"], v["iv"], v["aad"], frame) is None
        else:
            assert chacha.seal(v["key"], v["iv"], v["aad"], v["pt"]) == frame
            assert chacha.open(v["key"], v["iv"], v["aad"], frame) == v["pt"]


def test_nist_gcm(gcm):
    for v in load_nist_gcm("gcmEncryptExtIV256.rsp"):
        assert gcm.seal(v["key"], v["iv"], v["aad"], v["pt"]) == v["ct"] + v["tag"]
    dec = load_nist_gcm("gcmDecrypt256.rsp")
    assert sum(v["fail"] for v in dec) > 100
    for v in dec:
        got = gcm.open(v["key"], v["iv"], v["aad"], v["ct"] + v["tag"])
        assert got == (None if v["fail"] else v["pt"])


@pytest.mark.parametrize("suite", ["chacha", "gcm"])
@pytest.mark.parametrize("length", LENGTHS)
def test_against_cryptography(suite, length, chacha, gcm):
    host, ref_cls = (chacha, ChaCha20Poly1305) if suite == "chacha" else (gcm, AESGCM)
    for trial in range(3 if length < 4096 else 1):
        key, nonce = os.urandom(32), os.urandom(12)
        aad = os.urandom((length * 7 + trial * 13) % 100)
        pt = os.urandom(length)
        ref = ref_cls(key)
        frame = host.seal(key, nonce, aad, pt)
        assert frame == ref.encrypt(nonce, pt, aad)  # bit-exact with cryptography
        assert host.open(key, nonce, aad, ref.encrypt(nonce, pt, aad)) == pt
        bad = bytearray(frame)
        bad[(trial * 31) % len(bad)] ^= 0x40
        assert host.open(key, nonce, aad, bytes(bad)) is None
        assert host.open(key, nonce, aad + b"x", frame) is None


def test_gmac_is_gcm_over_empty_plaintext(gcm):
    for length in (0, 1, 17, 4096):
        key, nonce, data = os.urandom(32), os.urandom(12), os.urandom(length)
        assert gcm.seal(key, nonce, data, b"") == AESGCM(key).encrypt(nonce, b"", data)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_nvcc_compiles_every_kernel_without_spills(tmp_path):
    sources = sorted(KERNELS.glob("*.cu"))
    assert sources, "no .cu files in kernels/"
    for src in sources:
        out = subprocess.run(["nvcc", "-arch=sm_90", "-Xptxas", "-v", "-c", str(src), "-o",
                              str(tmp_path / (src.stem + ".o"))], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr[-3000:]
        spills = [ln for ln in out.stderr.splitlines() if "spill" in ln and not ln.strip().endswith(
            "0 bytes spill stores, 0 bytes spill loads")]
        assert not spills, "\n".join(spills)
