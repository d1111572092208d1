"""Known-answer tests of every suite's seal/open through the slot layout the wire uses:
RFC 8439 §2.8.2 and Appendix A.5, NIST CAVP GCM vectors (FAIL cases must be rejected), and the
ChaCha20-Poly1305 vectors of OpenSSL and BoringSSL, from the ``cryptography-vectors`` package."""

from __future__ import annotations

from decimal import Decimal, localcontext

import numpy as np
import pytest
from cryptography.exceptions import InvalidTag

from seccomm.framing import AAD_BYTES, Slot
from seccomm.suites import NONCE_BYTES, TAG_BYTES, get_suite
from vectors import RFC8439_2_8_2, load_chacha, load_nist_gcm

# RFC 8439 Appendix A.5: the decryption example (key, nonce, AAD, tag; first ciphertext bytes)
RFC8439_A5 = dict(
    key=bytes.fromhex("1c9240a5eb55d38af333888604f6b5f0473917c1402b80099dca5cbc207075c0"),
    iv=bytes.fromhex("000000000102030405060708"),
    aad=bytes.fromhex("f33388860000000000004e91"),
    tag=bytes.fromhex("eead9d67890cbb22392336fea1851f38"),
    pt_prefix=b"Internet-Drafts are draft documents valid for a maximum of six months",
)


def make_slot(aad: bytes, nbody: int, iv: bytes) -> Slot:
    buf = np.zeros(NONCE_BYTES + len(aad) + nbody + TAG_BYTES, np.uint8)
    slot = Slot(memoryview(buf), len(aad), nbody)
    slot.nonce[:] = iv
    slot.header[:] = aad
    return slot


def seal(suite_name, v):
    suite = get_suite(suite_name)
    slot = make_slot(v["aad"], len(v["pt"]), v["iv"])
    suite.keyed(v["key"]).seal(slot, memoryview(v["pt"]))
    return bytes(slot.frame)


def open_(suite_name, v, ct, tag):
    suite = get_suite(suite_name)
    slot = make_slot(v["aad"], len(ct), v["iv"])
    slot.frame[:] = ct + tag
    out = bytearray(len(ct))
    return bytes(suite.keyed(v["key"]).open(slot, memoryview(out)))


def test_rfc8439_2_8_2():
    v = RFC8439_2_8_2
    assert seal("chacha20-poly1305", v) == v["ct"] + v["tag"]
    assert open_("chacha20-poly1305", v, v["ct"], v["tag"]) == v["pt"]
    bad = bytearray(v["tag"])
    bad[0] ^= 1
    with pytest.raises(InvalidTag):
        open_("chacha20-poly1305", v, v["ct"], bytes(bad))


def test_rfc8439_a5():
    vs = [
        x
        for x in load_chacha("openssl.txt")
        if x["key"] == RFC8439_A5["key"] and x["tag"] == RFC8439_A5["tag"] and x["aad"] == RFC8439_A5["aad"]
    ]
    assert vs, "RFC 8439 A.5 vector not found in cryptography-vectors"
    v = vs[0]
    pt = open_("chacha20-poly1305", v, v["ct"], v["tag"])
    assert pt.startswith(RFC8439_A5["pt_prefix"]) and pt == v["pt"]


@pytest.mark.parametrize("name", ["openssl.txt", "boringssl.txt"])
def test_chacha_vectors(name):
    vs = load_chacha(name)
    assert len(vs) >= 5
    for v in vs:
        if v["fail"]:
            with pytest.raises(InvalidTag):
                open_("chacha20-poly1305", v, v["ct"], v["tag"])
        else:
            assert seal("chacha20-poly1305", v) == v["ct"] + v["tag"]
            assert open_("chacha20-poly1305", v, v["ct"], v["tag"]) == v["pt"]


def test_nist_gcm_encrypt():
    vs = load_nist_gcm("gcmEncryptExtIV256.rsp")
    assert len(vs) >= 300
    for v in vs:
        assert seal("aes-256-gcm", v) == v["ct"] + v["tag"]


def test_nist_gcm_decrypt_including_fail():
    vs = load_nist_gcm("gcmDecrypt256.rsp")
    assert sum(v["fail"] for v in vs) >= 100
    for v in vs:
        if v["fail"]:
            with pytest.raises(InvalidTag):
                open_("aes-256-gcm", v, v["ct"], v["tag"])
        else:
            assert open_("aes-256-gcm", v, v["ct"], v["tag"]) == v["pt"]


@pytest.mark.parametrize("name", ["gcmEncryptExtIV256.rsp", "gcmDecrypt256.rsp"])
def test_nist_gmac(name):
    """aes-256-gmac = GCM over an empty plaintext with header || payload as AAD: the NIST
    vectors with no plaintext are GMAC vectors, whatever split of the AAD is the payload."""
    vs = [v for v in load_nist_gcm(name) if not v["ct"] and v["aad"]]
    assert len(vs) >= 50
    suite = get_suite("aes-256-gmac")
    for v in vs:
        k = len(v["aad"]) // 3
        slot = make_slot(v["aad"][:k], len(v["aad"]) - k, v["iv"])
        payload = v["aad"][k:]
        aead = suite.keyed(v["key"])
        if v["fail"]:
            slot.body[:] = payload
            slot.tag[:] = v["tag"]
            with pytest.raises(InvalidTag):
                aead.open(slot, None)
            continue
        aead.seal(slot, memoryview(payload))
        assert bytes(slot.tag) == v["tag"] and bytes(slot.body) == payload
        assert bytes(aead.open(slot, None)) == payload
        slot.body[0] ^= 1 if len(payload) else 0
        if payload:
            with pytest.raises(InvalidTag):
                aead.open(slot, None)


def test_none_suite_is_identity():
    v = RFC8439_2_8_2
    suite = get_suite("none")
    slot = make_slot(v["aad"], len(v["pt"]), v["iv"])
    suite.keyed(None).seal(slot, memoryview(v["pt"]))
    assert bytes(slot.body) == v["pt"]
    assert bytes(suite.keyed(None).open(slot, None)) == v["pt"]


def cfrg_gcm_limit(blocks: int) -> int:
    """draft-irtf-cfrg-aead-limits §5.1, AES-GCM confidentiality: q <= (sqrt(p) * 2^64.5 - 1) /
    (L + 1) with p = 2^-50 (so sqrt(p) * 2^64.5 = sqrt(2^79)), in exact decimal arithmetic,
    capped at 2^32 invocations (NIST SP 800-38D §8.3)."""
    with localcontext() as ctx:
        ctx.prec = 60
        q = ((Decimal(2) ** 79).sqrt() - 1) / (blocks + 1)
    return min(int(q), 2**32)


#: chunk sizes [B]: the 2^32 cap, the defaults, and L + 1 = 259 and 1301 (where the bound is an
#: integer plus under 1: a term off by one changes it)
CHUNKS = (16, 4030, 4032, 20700, 20704, 1 << 16, 1 << 20, 1 << 24)


@pytest.mark.parametrize("chunk", CHUNKS)
def test_usage_limits_follow_the_cfrg_draft(chunk):
    """Frames per key: AES-GCM with L = the 16-byte blocks of payload plus AAD header; GMAC with
    L = the blocks of header plus payload, all AAD; ChaCha20-Poly1305 the 2^48 cap (no
    confidentiality limit below 2^96 nonces, §5.2); ``none`` 2^63 (no key)."""
    blocks = -(-chunk // 16) + -(-AAD_BYTES // 16)
    assert get_suite("aes-256-gcm").usage_limit(chunk, AAD_BYTES) == cfrg_gcm_limit(blocks)
    assert get_suite("aes-256-gmac").usage_limit(chunk, AAD_BYTES) == cfrg_gcm_limit(
        -(-(chunk + AAD_BYTES) // 16)
    )
    assert get_suite("chacha20-poly1305").usage_limit(chunk, AAD_BYTES) == 2**48
    assert get_suite("none").usage_limit(chunk, AAD_BYTES) == 2**63
    assert get_suite("aes-256-gcm").usage_limit(chunk, 1000) == cfrg_gcm_limit(-(-chunk // 16) + 63)
