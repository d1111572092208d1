"""Peer certificate chains checked as seccomm.identity says: to a trusted CA, valid now, an
end-entity leaf that may sign and names a host; the host read from the certificate.  The CA and
certificates come from seccomm.identity.make_test_identities (and, for the cases it never makes,
from cryptography's builder here)."""

from __future__ import annotations

import datetime as dt
import stat

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from seccomm.errors import IdentityError
from seccomm.identity import host_of, make_test_identities, verify_chain


def now() -> dt.datetime:
    """The time as a test runs (not at collection: a long run starts tests minutes later)."""
    return dt.datetime.now(dt.timezone.utc)


def load(path):
    return x509.load_pem_x509_certificates(path.read_bytes())


@pytest.fixture
def pki(tmp_path):
    return make_test_identities(
        tmp_path, ["node-a.cluster", "node-b.cluster", "spiffe://cluster/ns/train/r2"]
    )


def test_each_host_certificate_verifies_and_names_its_host(pki):
    cas = load(pki.ca_file)
    got = [verify_chain(load(c), cas, rank) for rank, c in enumerate(pki.cert_files)]
    assert [p.host for p in got] == ["node-a.cluster", "node-b.cluster", "spiffe://cluster/ns/train/r2"]
    assert [p.rank for p in got] == [0, 1, 2]
    assert len({p.fingerprint for p in got}) == 3 and all(len(p.fingerprint) == 64 for p in got)
    assert all(p.issuer == "CN=seccomm throw-away CA" for p in got)
    assert got[0].subject == "CN=node-a.cluster"
    assert all(p.not_before <= now() <= p.not_after for p in got)
    leaf = load(pki.cert_files[1])[0]
    assert got[1].public_key == leaf.public_key()


def test_certificates_are_valid_from_five_minutes_before_they_are_made_for_the_days_asked(tmp_path):
    t0 = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    pki = make_test_identities(tmp_path, ["n1"], days=2)
    p = verify_chain(load(pki.cert_files[0]), load(pki.ca_file), 0)
    five = dt.timedelta(minutes=5)
    assert t0 - five <= p.not_before <= t0 - five + dt.timedelta(seconds=10)  # (made within 10 s)
    assert p.not_after - p.not_before == dt.timedelta(days=2) + five
    ca = load(pki.ca_file)[0]
    assert (ca.not_valid_before_utc, ca.not_valid_after_utc) == (p.not_before, p.not_after)


def test_the_private_keys_are_0600_and_match_their_certificates(pki):
    for cert_file, key_file in zip(pki.cert_files, pki.key_files):
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        key = serialization.load_pem_private_key(key_file.read_bytes(), None)
        assert key.public_key() == load(cert_file)[0].public_key()


def test_a_chain_from_another_ca_is_refused_naming_the_rank(pki, tmp_path):
    (tmp_path / "other").mkdir()
    other = make_test_identities(tmp_path / "other", ["x"])
    with pytest.raises(IdentityError, match="rank 4's certificate did not verify") as e:
        verify_chain(load(other.cert_files[0]), load(pki.ca_file), 4)
    assert e.value.peer == 4


@pytest.mark.parametrize("when", [dt.timedelta(days=2), -dt.timedelta(hours=1)])
def test_a_certificate_outside_its_validity_is_refused(pki, when):
    with pytest.raises(IdentityError, match="not valid at validation time"):
        verify_chain(load(pki.cert_files[0]), load(pki.ca_file), 0, now=now() + when)


def test_nothing_to_verify_or_nothing_to_verify_against(pki):
    with pytest.raises(IdentityError, match="rank 1 gave no certificate"):
        verify_chain([], load(pki.ca_file), 1)
    with pytest.raises(IdentityError, match="no CA certificate"):
        verify_chain(load(pki.cert_files[0]), [], 1)


def test_the_ca_certificate_is_not_a_rank_identity(pki):
    cas = load(pki.ca_file)
    with pytest.raises(IdentityError, match="cA must not be asserted"):
        verify_chain(cas, cas, 0)


# -- leaves make_test_identities never makes -----------------------------------------------------
@pytest.fixture
def ca():
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test CA")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(now() - dt.timedelta(minutes=5))
        .not_valid_after(now() + dt.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def leaf(ca, alt=None, sign=True, eku=(ExtendedKeyUsageOID.CLIENT_AUTH,)):
    cert, ca_key = ca
    key = ec.generate_private_key(ec.SECP256R1())
    b = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "leaf")]))
        .issuer_name(cert.subject)
        .public_key(key.public_key())
        .serial_number(2)
        .not_valid_before(now() - dt.timedelta(minutes=5))
        .not_valid_after(now() + dt.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(sign, False, not sign, False, False, False, False, False, False), critical=True
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if alt is not None:
        b = b.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    if eku:
        b = b.add_extension(x509.ExtendedKeyUsage(list(eku)), critical=False)
    return b.sign(ca_key, hashes.SHA256())


def test_a_leaf_that_may_not_sign_is_refused(ca):
    with pytest.raises(IdentityError, match="may not sign"):
        verify_chain([leaf(ca, [x509.DNSName("n1")], sign=False)], [ca[0]], 2)


def test_a_leaf_for_servers_only_is_refused(ca):
    with pytest.raises(IdentityError, match="did not verify"):
        verify_chain([leaf(ca, [x509.DNSName("n1")], eku=(ExtendedKeyUsageOID.SERVER_AUTH,))], [ca[0]], 2)


def test_a_leaf_that_names_no_host_is_refused(ca):
    alt = [x509.UniformResourceIdentifier("https://example.invalid/r"), x509.RFC822Name("a@b.c")]
    with pytest.raises(IdentityError, match="names no host") as e:
        verify_chain([leaf(ca, alt)], [ca[0]], 3)
    assert e.value.peer == 3


def test_the_host_is_the_first_dns_name_else_the_spiffe_id():
    spiffe, dns = x509.UniformResourceIdentifier("spiffe://c/r1"), x509.DNSName("n1.c")
    assert host_of([spiffe, dns, x509.DNSName("n2.c")]) == "n1.c"
    assert host_of([x509.UniformResourceIdentifier("https://x"), spiffe]) == "spiffe://c/r1"
    assert host_of([]) is None
