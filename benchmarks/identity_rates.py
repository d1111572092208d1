"""The per-operation costs of per-rank identities that seccomm.identitycost.RATES holds: one
certificate chain verified, one DER certificate read, an ECDSA P-256 signature made and checked,
an X25519 exchange, an HKDF key, a hello MAC check, and AES-GMAC's rate, each the median of
200 calls on one core.

    python benchmarks/identity_rates.py
"""

from __future__ import annotations

import statistics
import tempfile
import time

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.serialization import Encoding

from seccomm.identity import (
    IdentityFiles,
    load_identity,
    make_test_identities,
    verify_chain,
    verify_signature,
)
from seccomm.keys import hkdf, hmac_sha256, hmac_verify


def median_s(fn, n: int = 200) -> float:
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    folder = tempfile.mkdtemp()
    pki = make_test_identities(folder, ["node-a.example"])
    me = load_identity(IdentityFiles(str(pki.cert_files[0]), str(pki.key_files[0]), str(pki.ca_file)))
    cas = x509.load_pem_x509_certificates(pki.ca_file.read_bytes())
    der = me.chain[0].public_bytes(Encoding.DER)
    msg, sig = b"m" * 100, me.sign(b"m" * 100)
    a, b = X25519PrivateKey.generate(), X25519PrivateKey.generate().public_key()
    mac = hmac_sha256(b"k" * 32, b"h" * 400)
    data = bytes(1 << 20)
    gmac = AESGCM(bytes(32))
    rates = {
        "chain": median_s(lambda: verify_chain(list(me.chain), cas, 0)),
        "parse": median_s(lambda: x509.load_der_x509_certificate(der)),
        "verify": median_s(lambda: verify_signature(me.me.public_key, sig, msg)),
        "sign": median_s(lambda: me.sign(msg)),
        "x25519": median_s(lambda: a.exchange(b)),
        "hkdf": median_s(lambda: hkdf(b"k" * 64, b"s" * 32, b"i" * 60)),
        "mac": median_s(lambda: hmac_verify(b"k" * 32, b"h" * 400, mac)),
        "gmac_per_byte": median_s(lambda: gmac.encrypt(bytes(12), b"", data), 50) / len(data),
    }
    for k, v in rates.items():
        print(
            f"{k:>14}: {v * 1e6:10.3f} us" if k != "gmac_per_byte" else f"{k:>14}: {1 / v / 1e9:10.2f} GB/s"
        )


if __name__ == "__main__":
    main()
