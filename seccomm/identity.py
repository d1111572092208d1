"""Per-rank identities from X.509 certificates, for the ``x509`` trust mode being built: a peer's
certificate chain checked with ``cryptography``'s X.509 verification, and a throw-away CA with one
certificate per host for tests and a first try.

A chain is accepted when it leads to a CA certificate this rank trusts, every certificate is
valid at the time of the check, the leaf is an end-entity certificate whose key may sign
(``digitalSignature``) and whose extended key usage allows client authentication, and it names
a host: its first DNS name (subjectAltName), else its SPIFFE ID (a ``spiffe://`` URI).  That
host is read from the verified certificate, never from what a rank says about itself, so two
ranks share a node only when their certificates name the same host.  The checks are those of
:meth:`cryptography.x509.verification.PolicyBuilder.build_client_verifier` (the web PKI profile
of RFC 5280: path building, validity, basic constraints, key usage of the issuers, the allowed
signature algorithms), plus the two on the leaf named above.

Not wired into :class:`~seccomm.SecureComm` yet: its setup knows the job secret only."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from .errors import IdentityError

SPIFFE = "spiffe://"


@dataclass(frozen=True)
class PeerIdentity:
    """A rank's verified identity (:func:`verify_chain`).  ``host``: the name its certificate gives
    (a DNS name, or a SPIFFE ID); ``subject``/``issuer``: the leaf's, RFC 4514 strings;
    ``fingerprint``: SHA-256 of the leaf's DER encoding, hex; ``not_before``/``not_after``: its
    validity (UTC); ``public_key``: the leaf's key, which verifies the rank's signatures."""

    rank: int
    host: str
    subject: str
    issuer: str
    fingerprint: str
    not_before: dt.datetime
    not_after: dt.datetime
    public_key: object


def verify_chain(chain: list, cas: list, rank: int, now: dt.datetime | None = None) -> PeerIdentity:
    """Verify rank ``rank``'s certificate ``chain`` (leaf first, then any intermediates, as
    :class:`cryptography.x509.Certificate`) against the trusted CA certificates ``cas`` at time
    ``now`` (default: the current time, UTC).  Returns its :class:`PeerIdentity`; raises
    :class:`~seccomm.errors.IdentityError` naming the rank and what failed."""
    if not chain:
        raise IdentityError(f"rank {rank} gave no certificate", peer=rank)
    if not cas:
        raise IdentityError("no CA certificate to verify against (SECCOMM_CA_FILE)", peer=rank)
    leaf = chain[0]
    when = now or dt.datetime.now(dt.timezone.utc)
    verifier = PolicyBuilder().store(Store(list(cas))).time(when).build_client_verifier()
    try:
        subjects = verifier.verify(leaf, list(chain[1:])).subjects or []
    except VerificationError as e:
        raise IdentityError(f"rank {rank}'s certificate did not verify: {e}", peer=rank) from None
    try:
        usage = leaf.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        usage = None
    if usage is not None and not usage.digital_signature:
        raise IdentityError(
            f"rank {rank}'s certificate may not sign (keyUsage without digitalSignature)", peer=rank
        )
    host = host_of(subjects)
    if host is None:
        raise IdentityError(
            f"rank {rank}'s certificate names no host: it needs a DNS name or a SPIFFE ID (spiffe:// URI) "
            f"in its subjectAltName",
            peer=rank,
        )
    return PeerIdentity(
        rank=rank,
        host=host,
        subject=leaf.subject.rfc4514_string(),
        issuer=leaf.issuer.rfc4514_string(),
        fingerprint=hashlib.sha256(leaf.public_bytes(serialization.Encoding.DER)).hexdigest(),
        not_before=leaf.not_valid_before_utc,
        not_after=leaf.not_valid_after_utc,
        public_key=leaf.public_key(),
    )


def host_of(subjects: list) -> str | None:
    """The host a verified certificate's subjectAltName entries ``subjects`` name: the first DNS
    name, else the first SPIFFE ID; ``None`` where there is neither."""
    for s in subjects:
        if isinstance(s, x509.DNSName):
            return s.value
    for s in subjects:
        if isinstance(s, x509.UniformResourceIdentifier) and s.value.startswith(SPIFFE):
            return s.value
    return None


# -- a throw-away CA ---------------------------------------------------------------------------
@dataclass(frozen=True)
class TestPKI:
    """Files :func:`make_test_identities` wrote: the CA certificate (PEM), and per host its
    certificate (PEM) and private key (PKCS #8 PEM, mode 0600)."""

    ca_file: Path
    cert_files: list
    key_files: list


def make_test_identities(folder, hosts: list, days: float = 1.0) -> TestPKI:
    """A new CA (ECDSA P-256, self-signed) and one certificate per name in ``hosts`` (its DNS
    name, or its SPIFFE ID where it starts with ``spiffe://``), valid from five minutes ago for
    ``days``, written into ``folder``: ``ca.pem``, ``host-<i>.pem``, ``host-<i>.key`` (0600,
    created exclusively).  For tests and a first try: a real job's certificates come from its
    own CA.  The CA's private key is not kept."""
    folder = Path(folder)
    now = dt.datetime.now(dt.timezone.utc)
    start, end = now - dt.timedelta(minutes=5), now + dt.timedelta(days=days)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "seccomm throw-away CA")])
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key(), start, end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_file = folder / "ca.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    certs, keys = [], []
    for i, host in enumerate(hosts):
        key = ec.generate_private_key(ec.SECP256R1())
        alt = x509.UniformResourceIdentifier(host) if host.startswith(SPIFFE) else x509.DNSName(host)
        leaf = (
            _builder(
                x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]),
                ca_name,
                key.public_key(),
                start,
                end,
            )
            .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(sign=True), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
            )
            .sign(ca_key, hashes.SHA256())
        )
        cert_file, key_file = folder / f"host-{i}.pem", folder / f"host-{i}.key"
        cert_file.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        certs.append(cert_file)
        keys.append(key_file)
    return TestPKI(ca_file, certs, keys)


def _builder(subject, issuer, public_key, start, end) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
    )


def _usage(sign: bool = False, cert_sign: bool = False) -> x509.KeyUsage:
    """keyUsage with ``digitalSignature`` (``sign``) or ``keyCertSign`` and ``cRLSign``."""
    return x509.KeyUsage(
        digital_signature=sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )
