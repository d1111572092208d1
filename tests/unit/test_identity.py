"""Peer certificate chains checked as seccomm.identity says: to a trusted CA, valid now, an
end-entity leaf that may sign and names a host; the host read from the certificate.  The CA and
certificates come from seccomm.identity.make_test_identities (and, for the cases it never makes,
from cryptography's builder here)."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
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


def test_the_public_files_are_0644_whatever_the_umask(tmp_path):
    """0644: readable by anyone, writable by the owner only (seccomm.files' rule for public
    files), executable by nobody; with a umask of 0 too."""
    import os

    old = os.umask(0)
    try:
        pki = make_test_identities(tmp_path, ["n1"])
    finally:
        os.umask(old)
    modes = [stat.S_IMODE(f.stat().st_mode) for f in (pki.ca_file, pki.cert_files[0], pki.key_files[0])]
    assert modes == [0o644, 0o644, 0o600]


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
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
    )
    if sign is not None:  # (None: no keyUsage at all)
        usage = x509.KeyUsage(sign, False, not sign, False, False, False, False, False, False)
        b = b.add_extension(usage, critical=True)
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


# -- signatures as LocalIdentity.sign makes them and verify_signature reads them -----------------
def _keys():
    from cryptography.hazmat.primitives.asymmetric import ed448, ed25519, rsa

    return {
        "P-256": ec.generate_private_key(ec.SECP256R1()),
        "P-384": ec.generate_private_key(ec.SECP384R1()),
        "P-521": ec.generate_private_key(ec.SECP521R1()),
        "Ed25519": ed25519.Ed25519PrivateKey.generate(),
        "Ed448": ed448.Ed448PrivateKey.generate(),
        "RSA-2048": rsa.generate_private_key(public_exponent=65537, key_size=2048),
    }


def _independently_valid(pub, sig: bytes, data: bytes) -> None:
    """Check ``sig`` with cryptography alone, in the encodings the module names: ECDSA ``r || s``
    with the curve's hash (JWS, RFC 7518 §3.4), RSASSA-PSS with SHA-256 and a salt as long as the
    digest (TLS 1.3, RFC 8446 §4.2.3), EdDSA as RFC 8032 gives it."""
    from cryptography.hazmat.primitives.asymmetric import padding, rsa
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    if isinstance(pub, ec.EllipticCurvePublicKey):
        n = len(sig) // 2
        h = {256: hashes.SHA256, 384: hashes.SHA384, 521: hashes.SHA512}[pub.curve.key_size]
        der = encode_dss_signature(int.from_bytes(sig[:n], "big"), int.from_bytes(sig[n:], "big"))
        pub.verify(der, data, ec.ECDSA(h()))
    elif isinstance(pub, rsa.RSAPublicKey):
        pub.verify(sig, data, padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=32), hashes.SHA256())
    else:
        pub.verify(sig, data)


def test_signatures_have_the_documented_length_encoding_and_verify_only_as_made():
    from seccomm.identity import LocalIdentity, signature_bytes, verify_signature

    lengths = {"P-256": 64, "P-384": 96, "P-521": 132, "Ed25519": 64, "Ed448": 114, "RSA-2048": 256}
    data = b"setup transcript"
    for name, key in _keys().items():
        pub = key.public_key()
        sig = LocalIdentity((), (), None, key).sign(data)
        assert len(sig) == signature_bytes(pub) == lengths[name] and type(signature_bytes(pub)) is int, name
        _independently_valid(pub, sig, data)
        assert verify_signature(pub, sig, data), name
        assert not verify_signature(pub, sig, data + b"!"), name
        bad = bytearray(sig)
        bad[len(sig) // 3] ^= 0x01
        assert not verify_signature(pub, bytes(bad), data), name
        assert not verify_signature(pub, sig[:-1], data), name  # (never reaches the library)
        assert not verify_signature(pub, sig + b"\0", data), name


def test_a_signature_of_another_length_is_refused_before_any_check():
    from seccomm.identity import verify_signature

    pub = ec.generate_private_key(ec.SECP256R1()).public_key()
    assert not verify_signature(pub, b"", b"x")
    assert not verify_signature(pub, bytes(63), b"x")


def test_the_identity_variables_unset_are_named(monkeypatch):
    from seccomm.identity import IdentityFiles

    for v in ("SECCOMM_CERT_FILE", "SECCOMM_KEY_FILE", "SECCOMM_CA_FILE"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("SECCOMM_KEY_FILE", "/k")
    with pytest.raises(
        IdentityError, match=r"^identity 'x509' needs SECCOMM_CERT_FILE, SECCOMM_CA_FILE set "
    ):
        IdentityFiles.from_env()
    monkeypatch.setenv("SECCOMM_CERT_FILE", "/c")
    monkeypatch.setenv("SECCOMM_CA_FILE", "/a")
    assert IdentityFiles.from_env() == IdentityFiles("/c", "/k", "/a")


# -- the throw-away CA's certificates, extension by extension ------------------------------------
def _ext(cert, cls):
    e = cert.extensions.get_extension_for_class(cls)
    return e.critical, e.value


def _usage_bits(u) -> dict:
    bits = {
        k: getattr(u, k)
        for k in ("digital_signature", "content_commitment", "key_encipherment", "data_encipherment",
                  "key_agreement", "key_cert_sign", "crl_sign")
    }  # fmt: skip
    return {k for k, v in bits.items() if v}


def test_the_throwaway_ca_and_its_leaves_have_the_documented_extensions(tmp_path):
    pki = make_test_identities(tmp_path, ["n1.c", "spiffe://c/r1"])
    assert pki.ca_file == tmp_path / "ca.pem"
    assert pki.cert_files == [tmp_path / "host-0.pem", tmp_path / "host-1.pem"]
    assert pki.key_files == [tmp_path / "host-0.key", tmp_path / "host-1.key"]
    ca = load(pki.ca_file)[0]
    assert _ext(ca, x509.BasicConstraints) == (True, x509.BasicConstraints(ca=True, path_length=0))
    crit, usage = _ext(ca, x509.KeyUsage)
    assert crit and _usage_bits(usage) == {"key_cert_sign", "crl_sign"}
    for cert_file, alt in zip(
        pki.cert_files, [x509.DNSName("n1.c"), x509.UniformResourceIdentifier("spiffe://c/r1")]
    ):
        cert = load(cert_file)[0]
        assert _ext(cert, x509.SubjectAlternativeName) == (False, x509.SubjectAlternativeName([alt]))
        assert _ext(cert, x509.BasicConstraints) == (True, x509.BasicConstraints(ca=False, path_length=None))
        crit, usage = _ext(cert, x509.KeyUsage)
        assert crit and _usage_bits(usage) == {"digital_signature"}
        assert _ext(cert, x509.ExtendedKeyUsage)[1] == x509.ExtendedKeyUsage(
            [ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH]
        )


@pytest.fixture
def far_east(monkeypatch):
    """The local zone UTC+14 for the test: a naive local time would be 14 hours off."""
    import time

    monkeypatch.setenv("TZ", "Etc/GMT-14")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def test_the_throwaway_ca_lasts_a_day_by_default_in_utc_whatever_the_local_zone(far_east):
    from seccomm.identity import TestCA

    t0 = now()
    ca = TestCA()
    five = dt.timedelta(minutes=5)
    start = ca.cert.not_valid_before_utc
    assert t0 - five - dt.timedelta(seconds=1) <= start <= t0 - five + dt.timedelta(seconds=10)
    assert ca.cert.not_valid_after_utc - start == dt.timedelta(days=1) + five


def test_the_throwaway_files_are_never_written_over(tmp_path):
    pki = make_test_identities(tmp_path, ["n1"])
    files = [pki.ca_file, pki.cert_files[0], pki.key_files[0]]
    before = [f.read_bytes() for f in files]
    with pytest.raises(FileExistsError):
        make_test_identities(tmp_path, ["n1"])
    assert [f.read_bytes() for f in files] == before
    for f in files[:2]:  # (then the key file is the one that exists)
        f.unlink()
    with pytest.raises(FileExistsError):
        make_test_identities(tmp_path, ["n1"])
    assert pki.key_files[0].read_bytes() == before[2]


def test_each_identity_file_is_named_with_its_variable_and_what_it_should_hold(tmp_path):
    """The rules of seccomm.files applied to each of the three files, each refusal naming the
    variable that points at the file and what the file should hold."""
    from seccomm.identity import IdentityFiles, load_identity

    pki = make_test_identities(tmp_path, ["n1"])
    good = IdentityFiles(str(pki.cert_files[0]), str(pki.key_files[0]), str(pki.ca_file))
    assert load_identity(good).me.host == "n1"
    big = tmp_path / "big.pem"
    big.write_bytes(b"x" * (1 << 17))
    big.chmod(0o600)
    for field, variable, kind in [
        ("cert_file", "SECCOMM_CERT_FILE", "certificate chain"),
        ("key_file", "SECCOMM_KEY_FILE", "private key"),
        ("ca_file", "SECCOMM_CA_FILE", "CA bundle"),
    ]:
        link = tmp_path / f"link-{field}"
        link.symlink_to(getattr(good, field))
        with pytest.raises(
            IdentityError, match=f"^{variable} '{link}' is a symbolic link, .*: point {variable} at"
        ):
            load_identity(replace(good, **{field: str(link)}))
        with pytest.raises(
            IdentityError, match=f"^{variable} '{big}' is larger than 65536 bytes: not a {kind} file$"
        ):
            load_identity(replace(good, **{field: str(big)}))


def test_a_local_identity_shows_its_name_and_never_its_key(tmp_path):
    from seccomm.identity import IdentityFiles, load_identity

    pki = make_test_identities(tmp_path, ["n1.c"])
    me = load_identity(IdentityFiles(str(pki.cert_files[0]), str(pki.key_files[0]), str(pki.ca_file)))
    assert repr(me) == f"<LocalIdentity CN=n1.c host=n1.c sha256={me.me.fingerprint[:16]}>"
    assert str(me._key.private_numbers().private_value) not in repr(me)


def test_an_own_key_is_taken_only_where_its_signature_fits_a_setup_message(tmp_path):
    """RSA-4096 signs 512 bytes, the most a setup message has room for: taken.  An ECDSA key on
    P-224, a curve seccomm does not sign with, and an X25519 key (agreement only) are refused
    naming the file, the key and the keys it takes."""
    from cryptography.hazmat.primitives.asymmetric import rsa, x25519

    from seccomm.identity import IdentityFiles, TestCA, load_identity

    ca = TestCA()
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(ca.cert.public_bytes(serialization.Encoding.PEM))
    shown = {"p224": "ECDSA secp224r1", "x25519": "X25519PublicKey"}
    for name, key in [
        ("rsa", rsa.generate_private_key(public_exponent=65537, key_size=4096)),
        ("p224", ec.generate_private_key(ec.SECP224R1())),
        ("x25519", x25519.X25519PrivateKey.generate()),
    ]:
        cert, key_file = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
        cert.write_bytes(ca.issue("n1", key.public_key()).public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        key_file.chmod(0o600)
        files = IdentityFiles(str(cert), str(key_file), str(ca_file))
        if name == "rsa":
            assert load_identity(files).sign(b"x") and load_identity(files).me.host == "n1"
        else:
            with pytest.raises(IdentityError) as e:
                load_identity(files)
            assert str(e.value) == (
                f"SECCOMM_CERT_FILE '{cert}': its key ({shown[name]}) is not one seccomm signs with; "
                f"use ECDSA (P-256, P-384, P-521), Ed25519, Ed448 or RSA of at most 4096 bits"
            )


def test_an_own_certificate_is_checked_at_the_time_given(tmp_path):
    from seccomm.identity import IdentityFiles, load_identity

    pki = make_test_identities(tmp_path, ["n1"])
    files = IdentityFiles(str(pki.cert_files[0]), str(pki.key_files[0]), str(pki.ca_file))
    assert load_identity(files, now=now() + dt.timedelta(hours=23)).me.host == "n1"
    with pytest.raises(
        IdentityError, match="^this rank's own certificate did not verify: .*not valid at validation"
    ):
        load_identity(files, now=now() + dt.timedelta(days=2))


def test_an_unreadable_identity_file_is_named_with_the_fix(tmp_path):
    from seccomm.identity import IdentityFiles, load_identity

    pki = make_test_identities(tmp_path, ["n1"])
    good = IdentityFiles(str(pki.cert_files[0]), str(pki.key_files[0]), str(pki.ca_file))
    missing = str(tmp_path / "missing.pem")
    with pytest.raises(IdentityError) as e:
        load_identity(replace(good, ca_file=missing))
    assert str(e.value) == (
        f"SECCOMM_CA_FILE '{missing}' cannot be opened: No such file or directory; make one with: "
        f"seccomm identity --out DIR HOST... (a test CA), or your CA's tools"
    )
    text = tmp_path / "text.pem"
    text.write_text("not PEM\n")
    text.chmod(0o600)
    with pytest.raises(IdentityError) as e:
        load_identity(replace(good, cert_file=str(text)))
    assert (
        str(e.value) == f"SECCOMM_CERT_FILE '{text}' holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
    )
    with pytest.raises(IdentityError) as e:
        load_identity(replace(good, key_file=str(text)))
    assert str(e.value) == f"SECCOMM_KEY_FILE '{text}' holds no PEM private key this version can read"
    key = serialization.load_pem_private_key(pki.key_files[0].read_bytes(), None)
    locked = tmp_path / "locked.key"
    locked.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"passphrase"),
        )
    )
    locked.chmod(0o600)
    with pytest.raises(IdentityError) as e:
        load_identity(replace(good, key_file=str(locked)))
    assert str(e.value) == f"SECCOMM_KEY_FILE '{locked}' is encrypted: give the key unencrypted (mode 0600)"


def test_each_refusal_of_a_chain_names_the_rank(pki, ca):
    cas = load(pki.ca_file)
    with pytest.raises(IdentityError) as e:
        verify_chain([], cas, 5)
    assert (str(e.value), e.value.peer) == ("rank 5 gave no certificate", 5)
    with pytest.raises(IdentityError) as e:
        verify_chain(load(pki.cert_files[0]), [], 6)
    assert (str(e.value), e.value.peer) == ("no CA certificate to verify against (SECCOMM_CA_FILE)", 6)
    with pytest.raises(IdentityError) as e:
        verify_chain([leaf(ca, [x509.DNSName("n1")], sign=False)], [ca[0]], 7)
    assert e.value.peer == 7
    assert str(e.value) == "rank 7's certificate may not sign (keyUsage without digitalSignature)"


def test_a_leaf_without_key_usage_may_sign(ca):
    """RFC 5280 §4.2.1.3: without the extension the key's use is not restricted."""
    assert verify_chain([leaf(ca, [x509.DNSName("bare.c")], sign=None)], [ca[0]], 0).host == "bare.c"


def test_a_chain_through_an_intermediate_ca_verifies_with_the_intermediate_only():
    """Leaf, then the intermediate that issued it, against the root alone; without the
    intermediate there is no path."""
    from seccomm.identity import TestCA, _builder, _usage

    root_key = ec.generate_private_key(ec.SECP256R1())
    root_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "root")])
    inter = TestCA()  # (its self-signed certificate is replaced by one the root issues)
    start, end = now() - dt.timedelta(minutes=5), now() + dt.timedelta(days=1)

    def ca_cert(subject, issuer, public_key, sign_key, path_length):
        return (
            _builder(subject, issuer, public_key, start, end)
            .add_extension(x509.BasicConstraints(ca=True, path_length=path_length), critical=True)
            .add_extension(_usage(cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(sign_key.public_key()), critical=False
            )
            .sign(sign_key, hashes.SHA256())
        )

    root = ca_cert(root_name, root_name, root_key.public_key(), root_key, 1)
    inter_cert = ca_cert(inter.name, root_name, inter._key.public_key(), root_key, 0)
    leaf_cert = inter.issue("n9.c", ec.generate_private_key(ec.SECP256R1()).public_key())
    got = verify_chain([leaf_cert, inter_cert], [root], 9)
    assert (got.host, got.issuer) == ("n9.c", "CN=seccomm throw-away CA")
    with pytest.raises(IdentityError, match="rank 9's certificate did not verify"):
        verify_chain([leaf_cert], [root], 9)


def test_the_check_is_at_the_current_utc_time_whatever_the_local_zone(tmp_path, far_east):
    pki = make_test_identities(tmp_path, ["n1"], days=1 / 24)  # (valid for an hour)
    assert verify_chain(load(pki.cert_files[0]), load(pki.ca_file), 0).host == "n1"
