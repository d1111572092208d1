"""Per-rank identities from X.509 certificates, for ``SecureComm(identity="x509")``: a peer's
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

A rank's own identity (:func:`load_identity`) is its certificate chain, its private key and the CA
certificates it trusts, read from three PEM files under the rules of the job secret's file
(:mod:`seccomm.files`: the key file private, 0600); :class:`~seccomm.SecureComm` uses it under
``identity="x509"`` (:mod:`seccomm.handshake`), where each rank signs the setup transcript with
its key (:meth:`LocalIdentity.sign`).  Signatures have a fixed length per key
(:func:`signature_bytes`): ECDSA as ``r || s`` (as in JWS, RFC 7518 §3.4) with the curve's hash,
Ed25519 and Ed448 as RFC 8032 gives them, RSA as RSASSA-PSS with SHA-256 (as TLS 1.3 signs,
RFC 8446 §4.2.3)."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import PolicyBuilder, Store, VerificationError

from .errors import IdentityError
from .files import FileRule, read_checked

SPIFFE = "spiffe://"
#: the environment variables of an identity's files: certificate chain, private key, CA bundle
CERT_VAR, KEY_VAR, CA_VAR = "SECCOMM_CERT_FILE", "SECCOMM_KEY_FILE", "SECCOMM_CA_FILE"
#: the largest signature a setup message has room for [B] (an RSA key of 4,096 bits)
MAX_SIGNATURE_BYTES = 512
_EC_HASH = {256: hashes.SHA256, 384: hashes.SHA384, 521: hashes.SHA512}


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


# -- this rank's own identity ------------------------------------------------------------------
@dataclass(frozen=True)
class IdentityFiles:
    """The three PEM files of a rank's identity: ``cert_file``, its certificate chain (leaf
    first); ``key_file``, the leaf's private key (unencrypted PKCS #8 or traditional PEM, mode
    0600); ``ca_file``, the CA certificates it trusts.  :meth:`from_env` reads their paths from
    :data:`CERT_VAR`, :data:`KEY_VAR` and :data:`CA_VAR`."""

    cert_file: str
    key_file: str
    ca_file: str

    @classmethod
    def from_env(cls) -> "IdentityFiles":
        """The files named by ``SECCOMM_CERT_FILE``, ``SECCOMM_KEY_FILE`` and
        ``SECCOMM_CA_FILE``; :class:`~seccomm.errors.IdentityError` naming those unset."""
        names = (CERT_VAR, KEY_VAR, CA_VAR)
        missing = [v for v in names if not os.environ.get(v)]
        if missing:
            raise IdentityError(
                f"identity 'x509' needs {', '.join(missing)} set on every rank (PEM files: the rank's "
                f"certificate chain, its private key (chmod 600) and the CA bundle); `seccomm identity` "
                f"makes a test CA and host certificates"
            )
        return cls(*(os.environ[v] for v in names))


@dataclass(frozen=True)
class LocalIdentity:
    """This rank's identity, checked (:func:`load_identity`): ``chain`` (leaf first), ``cas`` (the
    trusted CA certificates), ``me`` (the leaf as :func:`verify_chain` reads it).  Holds the
    private key; its repr shows none of it."""

    chain: tuple
    cas: tuple
    me: PeerIdentity
    _key: object

    def __repr__(self):
        return f"<LocalIdentity {self.me.subject} host={self.me.host} sha256={self.me.fingerprint[:16]}>"

    def chain_der(self) -> list:
        """The chain as DER bytes, leaf first (what this rank's setup hello carries)."""
        return [c.public_bytes(serialization.Encoding.DER) for c in self.chain]

    def sign(self, data: bytes) -> bytes:
        """This rank's signature of ``data``: :func:`signature_bytes` long (see the module)."""
        key = self._key
        if isinstance(key, ec.EllipticCurvePrivateKey):
            r, s = decode_dss_signature(key.sign(data, ec.ECDSA(_EC_HASH[key.curve.key_size]())))
            n = _ec_bytes(key.curve.key_size)
            return r.to_bytes(n, "big") + s.to_bytes(n, "big")
        if isinstance(key, rsa.RSAPrivateKey):
            return key.sign(data, _pss(), hashes.SHA256())
        return key.sign(data)  # Ed25519, Ed448


def _ec_bytes(bits: int) -> int:
    return (bits + 7) // 8


def _pss() -> padding.PSS:
    return padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.DIGEST_LENGTH)


def signature_bytes(public_key) -> int | None:
    """The length in bytes of a signature by the key of ``public_key`` (ECDSA: twice the
    curve's size; Ed25519: 64; Ed448: 114; RSA: the modulus), or ``None`` for a key type seccomm
    does not sign with."""
    if isinstance(public_key, ec.EllipticCurvePublicKey):
        return 2 * _ec_bytes(public_key.curve.key_size) if public_key.curve.key_size in _EC_HASH else None
    if isinstance(public_key, rsa.RSAPublicKey):
        return public_key.key_size // 8
    if isinstance(public_key, ed25519.Ed25519PublicKey):
        return 64
    if isinstance(public_key, ed448.Ed448PublicKey):
        return 114
    return None


def verify_signature(public_key, signature: bytes, data: bytes) -> bool:
    """Whether ``signature`` is ``public_key``'s signature of ``data`` as :meth:`LocalIdentity.sign`
    makes them (exactly :func:`signature_bytes` long)."""
    if len(signature) != signature_bytes(public_key):
        return False
    try:
        if isinstance(public_key, ec.EllipticCurvePublicKey):
            n = len(signature) // 2
            der = encode_dss_signature(
                int.from_bytes(signature[:n], "big"), int.from_bytes(signature[n:], "big")
            )
            public_key.verify(der, data, ec.ECDSA(_EC_HASH[public_key.curve.key_size]()))
        elif isinstance(public_key, rsa.RSAPublicKey):
            public_key.verify(signature, data, _pss(), hashes.SHA256())
        else:
            public_key.verify(signature, data)
    except InvalidSignature:
        return False
    return True


def load_identity(files: IdentityFiles | None = None, now: dt.datetime | None = None) -> LocalIdentity:
    """This rank's identity from ``files`` (default: :meth:`IdentityFiles.from_env`): each file
    read under :mod:`seccomm.files`' rules (the key file private), the chain checked with
    :func:`verify_chain` against the CA file at ``now``, the key matched to the leaf's, and its
    type one seccomm signs with whose signature fits a setup message
    (:data:`MAX_SIGNATURE_BYTES`).  Raises :class:`~seccomm.errors.IdentityError` naming the file
    or the check that failed, never a key's content."""
    files = files or IdentityFiles.from_env()
    chain = _certificates(files.cert_file, CERT_VAR, "certificate chain")
    cas = _certificates(files.ca_file, CA_VAR, "CA bundle")
    key = _private_key(files.key_file)
    me = _own_chain(chain, cas, now)
    if key.public_key() != chain[0].public_key():
        raise IdentityError(
            f"{KEY_VAR} {files.key_file!r} is not the key of the certificate in {CERT_VAR} "
            f"{files.cert_file!r} (subject {me.subject}): give the key that certificate was issued for"
        )
    n = signature_bytes(me.public_key)
    if n is None or n > MAX_SIGNATURE_BYTES:
        raise IdentityError(
            f"{CERT_VAR} {files.cert_file!r}: its key ({_key_name(me.public_key)}) is not one seccomm "
            f"signs with; use ECDSA (P-256, P-384, P-521), Ed25519, Ed448 or RSA of at most "
            f"{8 * MAX_SIGNATURE_BYTES} bits"
        )
    return LocalIdentity(tuple(chain), tuple(cas), me, key)


def _key_name(public_key) -> str:
    """``ECDSA secp224r1``, ``RSA-8192``, or the key's class name."""
    if isinstance(public_key, ec.EllipticCurvePublicKey):
        return f"ECDSA {public_key.curve.name}"
    if isinstance(public_key, rsa.RSAPublicKey):
        return f"RSA-{public_key.key_size}"
    return type(public_key).__name__


def _own_chain(chain, cas, now) -> PeerIdentity:
    try:
        return verify_chain(chain, cas, -1, now)
    except IdentityError as e:
        raise IdentityError(str(e).replace("rank -1's certificate", "this rank's own certificate")) from None


def _rule(path: str, variable: str, kind: str, private: bool) -> FileRule:
    make = "seccomm identity --out DIR HOST... (a test CA), or your CA's tools"
    return FileRule(f"{variable} {path!r}", variable, make, kind, private, IdentityError)


def _certificates(path: str, variable: str, kind: str) -> list:
    raw = read_checked(path, _rule(path, variable, kind, private=False))
    try:
        certs = x509.load_pem_x509_certificates(raw)
    except ValueError:
        certs = []
    if not certs:
        raise IdentityError(f"{variable} {path!r} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    return certs


def _private_key(path: str):
    raw = read_checked(path, _rule(path, KEY_VAR, "private key", private=True))
    try:
        return serialization.load_pem_private_key(raw, password=None)
    except TypeError:
        raise IdentityError(
            f"{KEY_VAR} {path!r} is encrypted: give the key unencrypted (mode 0600)"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise IdentityError(f"{KEY_VAR} {path!r} holds no PEM private key this version can read") from None


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
    ``days``, written into ``folder``: ``ca.pem``, ``host-<i>.pem``, ``host-<i>.key`` (0600),
    each created exclusively (:class:`FileExistsError` where one exists: nothing is written
    over).  For tests and a first try: a real job's certificates come from its own CA.  The CA's
    private key is not kept."""
    folder = Path(folder)
    ca = TestCA(days)
    ca_file = folder / "ca.pem"
    _write_new(ca_file, ca.cert.public_bytes(serialization.Encoding.PEM), 0o644)
    certs, keys = [], []
    for i, host in enumerate(hosts):
        key = ec.generate_private_key(ec.SECP256R1())
        leaf = ca.issue(host, key.public_key())
        cert_file, key_file = folder / f"host-{i}.pem", folder / f"host-{i}.key"
        _write_new(cert_file, leaf.public_bytes(serialization.Encoding.PEM), 0o644)
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        _write_new(key_file, pem, 0o600)
        certs.append(cert_file)
        keys.append(key_file)
    return TestPKI(ca_file, certs, keys)


def _write_new(path: Path, data: bytes, mode: int) -> None:
    """Create ``path`` with ``mode`` (less the umask) and write ``data``; it must not exist."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


class TestCA:
    """A throw-away CA (ECDSA P-256, self-signed, ``cert``), valid from five minutes ago for
    ``days``: :meth:`issue` signs a host certificate for any public key.  The private key lives
    only in this object."""

    __test__ = False  # (not a pytest test class)

    def __init__(self, days: float = 1.0):
        now = dt.datetime.now(dt.timezone.utc)
        self.start, self.end = now - dt.timedelta(minutes=5), now + dt.timedelta(days=days)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self.name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "seccomm throw-away CA")])
        self.cert = (
            _builder(self.name, self.name, self._key.public_key(), self.start, self.end)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_usage(cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False)
            .sign(self._key, hashes.SHA256())
        )

    def __repr__(self):
        return f"<TestCA until {self.end:%Y-%m-%d %H:%M}Z>"

    def issue(self, host: str, public_key) -> x509.Certificate:
        """A leaf for ``public_key`` naming ``host`` (a DNS name, or a ``spiffe://`` ID),
        ``digitalSignature``, client and server auth."""
        alt = x509.UniformResourceIdentifier(host) if host.startswith(SPIFFE) else x509.DNSName(host)
        return (
            _builder(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]), self.name, public_key,
                     self.start, self.end)
            .add_extension(x509.SubjectAlternativeName([alt]), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(sign=True), critical=True)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )  # fmt: skip


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
