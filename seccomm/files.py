"""Reading the files a rank's keys come from (the job secret, an identity's key, certificate and
CA bundle), with one set of rules: the file is opened with ``O_NOFOLLOW`` (a symbolic link is
refused: it could point anywhere) and checked on the open descriptor (``fstat``, so what is
checked is what is read): a regular file owned by this process's effective user.  A *private*
file (a secret, a private key) must also have no permission bits for group or others (``chmod
600``); a public one (a certificate, a CA bundle) may be readable by anyone, and may also be
owned by root, but may not be writable by group or others (nobody else could replace it).

Every refusal raises the caller's error class with a message that names the file (``what``) and
the fix, never the content."""

from __future__ import annotations

import errno
import os
import shlex
import stat
from dataclasses import dataclass

#: larger than any key, secret or certificate file could sensibly be [B]
MAX_FILE_BYTES = 1 << 16


@dataclass(frozen=True)
class FileRule:
    """How to read and refuse one kind of file.  ``what``: its name in messages (e.g.
    ``SECCOMM_PSK_FILE '/x'``); ``variable``: the setting that points at it; ``make``: the shell
    command that writes a good one (shown where the file is missing or not a file); ``kind``:
    what the file holds (``secret``, ``private key``, ...); ``private``: whether group and others
    may have no access at all (else: no write access); ``error``: the exception class raised."""

    what: str
    variable: str
    make: str
    kind: str
    private: bool
    error: type


def read_checked(path: str, rule: FileRule) -> bytes:
    """The bytes of the file ``path`` (at most :data:`MAX_FILE_BYTES`), after the checks of this
    module's rules; raises ``rule.error`` naming the file and the fix."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK  # a FIFO must not block us
    try:
        fd = os.open(path, flags)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise rule.error(
                f"{rule.what} is a symbolic link, refused (it could point anywhere): point "
                f"{rule.variable} at the file itself"
            ) from None
        raise rule.error(f"{rule.what} cannot be opened: {e.strerror}; make one with: {rule.make}") from None
    try:
        check_file(os.fstat(fd), path, rule)
        raw = b""
        while len(raw) <= MAX_FILE_BYTES and (part := os.read(fd, 1 << 16)):
            raw += part
    finally:
        os.close(fd)
    if len(raw) > MAX_FILE_BYTES:
        raise rule.error(f"{rule.what} is larger than {MAX_FILE_BYTES} bytes: not a {rule.kind} file")
    return raw


def check_file(st: os.stat_result, path: str, rule: FileRule) -> None:
    """Regular file, owned by the effective user (a public file: or by root), and no group/other
    bits (a public file: no group/other write bit); else ``rule.error``."""
    if not stat.S_ISREG(st.st_mode):
        raise rule.error(f"{rule.what} is not a regular file; make one with: {rule.make}")
    owners = (os.geteuid(),) if rule.private else (os.geteuid(), 0)
    if st.st_uid not in owners:
        raise rule.error(
            f"{rule.what} is owned by uid {st.st_uid}, not by this process's user (uid {os.geteuid()}): "
            f"another user could read or replace it; use a file of your own (chmod 600)"
        )
    if rule.private and st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise rule.error(
            f"{rule.what} is accessible by group or others (mode {stat.S_IMODE(st.st_mode):o}); "
            f"run: chmod 600 {shlex.quote(path)}"
        )
    if not rule.private and st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise rule.error(
            f"{rule.what} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}): another "
            f"user could replace it; run: chmod 644 {shlex.quote(path)}"
        )
