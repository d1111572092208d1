"""The rules of seccomm.files for the files a rank's keys come from: a private file (a secret, a
private key) must be this user's and closed to group and others; a public one (a certificate, a
CA bundle) may be root's too, and readable by anyone, but not writable by group or others.  The
PSK file's messages are checked in tests/unit/test_keys.py; these are the public rules."""

from __future__ import annotations

import os
import shlex

import pytest

from seccomm.errors import IdentityError
from seccomm.files import FileRule, read_checked


def rule(path, private: bool) -> FileRule:
    return FileRule(
        f"SECCOMM_CA_FILE {str(path)!r}", "SECCOMM_CA_FILE", "make one", "CA bundle", private, IdentityError
    )


def a_file(tmp_path, mode: int, name: str = "f.pem"):
    path = tmp_path / name
    path.write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    os.chmod(path, mode)
    return path


def test_a_public_file_may_be_read_by_anyone_but_written_by_its_owner_only(tmp_path):
    for mode in (0o644, 0o444, 0o600, 0o640):
        path = a_file(tmp_path, mode, f"ok{mode:o}.pem")
        assert read_checked(str(path), rule(path, private=False)).startswith(b"-----BEGIN")
    for mode in (0o664, 0o646, 0o666, 0o622):
        path = a_file(tmp_path, mode, f"w{mode:o}.pem")
        with pytest.raises(IdentityError) as e:
            read_checked(str(path), rule(path, private=False))
        assert str(e.value) == (
            f"SECCOMM_CA_FILE {str(path)!r} is writable by group or others (mode {mode:o}): another user "
            f"could replace it; run: chmod 644 {shlex.quote(str(path))}"
        )
    private = a_file(tmp_path, 0o600, "key.pem")
    assert read_checked(str(private), rule(private, private=True))  # (0600: the private rule's own)


def test_a_public_file_may_be_roots_a_private_one_only_this_users(tmp_path, monkeypatch):
    """As a user other than root (uid 1000) reading files root owns: a CA bundle passes, a key
    file is refused with the owner named."""
    path = a_file(tmp_path, 0o600, "root.pem")
    if os.stat(path).st_uid != 0:
        pytest.skip("needs files owned by root (the tests run as root in CI)")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert read_checked(str(path), rule(path, private=False))
    with pytest.raises(IdentityError) as e:
        read_checked(str(path), rule(path, private=True))
    assert str(e.value) == (
        f"SECCOMM_CA_FILE {str(path)!r} is owned by uid 0, not by this process's user (uid 1000): another "
        f"user could read or replace it; use a file of your own (chmod 600)"
    )
    monkeypatch.setattr(os, "geteuid", lambda: 1)  # uid 1, and a file of root's: public passes
    assert read_checked(str(path), rule(path, private=False))
    other = a_file(tmp_path, 0o644, "other.pem")
    os.chown(other, 1000, 1000)
    monkeypatch.setattr(os, "geteuid", lambda: 1)  # neither this user's nor root's: refused
    with pytest.raises(IdentityError, match="is owned by uid 1000, not by this process's user"):
        read_checked(str(other), rule(other, private=False))
