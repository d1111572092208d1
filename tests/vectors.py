"""One loader for the known-answer vectors shipped by the ``cryptography-vectors`` package."""

from __future__ import annotations

from pathlib import Path

import cryptography_vectors

ROOT = Path(cryptography_vectors.__file__).parent


def _value(v: str) -> bytes:
    v = v.strip()
    if v.startswith('"') and v.endswith('"'):
        return v[1:-1].encode()
    return bytes.fromhex(v)


def load_nist_gcm(name: str) -> list[dict]:
    """NIST CAVP GCM .rsp (gcmEncryptExtIV256.rsp, gcmDecrypt256.rsp): 96-bit IV, 128-bit tag
    cases; ``fail`` marks vectors whose tag must be rejected."""
    out, params, cur = [], {}, None
    for line in (ROOT / "ciphers/AES/GCM" / name).read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            k, _, v = line.strip("[]").partition("=")
            params[k.strip()] = int(v)
        elif line.startswith("Count"):
            cur = {"ivlen": params.get("IVlen"), "taglen": params.get("Taglen"), "fail": False}
            out.append(cur)
        elif line == "FAIL" and cur is not None:
            cur["fail"] = True
        elif "=" in line and cur is not None:
            k, _, v = line.partition("=")
            cur[k.strip().lower()] = bytes.fromhex(v.strip())
    return [v for v in out if v["ivlen"] == 96 and v["taglen"] == 128]


def load_chacha(name: str) -> list[dict]:
    """ChaCha20-Poly1305 vectors (openssl.txt, boringssl.txt) with 96-bit nonces, normalised to
    key/iv/aad/pt/ct/tag; ``fail`` marks expected tag failures."""
    alias = {
        "key": "key",
        "iv": "iv",
        "nonce": "iv",
        "aad": "aad",
        "ad": "aad",
        "plaintext": "pt",
        "in": "pt",
        "ciphertext": "ct",
        "ct": "ct",
        "tag": "tag",
    }
    out, cur = [], None
    for line in (ROOT / "ciphers/ChaCha20Poly1305" / name).read_text().splitlines():
        line = line.strip()
        if line.upper().startswith("COUNT"):
            cur = {"fail": False}
            out.append(cur)
        elif line.startswith("Result") and cur is not None:
            cur["fail"] = True
        elif "=" in line and cur is not None and not line.startswith("#"):
            k, _, v = line.partition("=")
            k = alias.get(k.strip().lower())
            if k:
                cur[k] = _value(v)
    return [v for v in out if len(v.get("iv", b"")) == 12 and len(v.get("tag", b"")) == 16]


#: RFC 8439 section 2.8.2: the AEAD_CHACHA20_POLY1305 example (the KAT and the GPU core test it)
RFC8439_2_8_2 = dict(
    key=bytes(range(0x80, 0xA0)),
    iv=bytes.fromhex("070000004041424344454647"),
    aad=bytes.fromhex("50515253c0c1c2c3c4c5c6c7"),
    pt=b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the "
    b"future, sunscreen would be it.",
    ct=bytes.fromhex(
        "d31a8d34648e60db7b86afbc53ef7ec2a4aded51296e08fea9e2b5a736ee62d63dbea45e8ca9671282fafb69"
        "da92728b1a71de0a9e060b2905d6a5b67ecd3b3692ddbd7f2d778b8c9803aee328091b58fab324e4fad67594"
        "5585808b4831d7bc3ff4def08e4b7a9de576d26586cec64b6116"
    ),
    tag=bytes.fromhex("1ae10b594f09e26a7e902ecbd0600691"),
)
