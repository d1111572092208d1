"""Job secret and key schedule (HKDF-SHA256, RFC 5869; X25519, RFC 7748).

Secret sources, in order: the ``psk=`` argument, ``SECCOMM_PSK_FILE`` (a file of >= 32 raw bytes
or hex; refused when readable or writable by group or others), ``SECCOMM_PSK`` (hex).  The local
launcher writes a fresh secret to a 0600 file for each run.

Keys, all 32 bytes, ``HKDF(SHA-256, ikm, salt, info)`` with the salt and the transcript hash
``th`` of the setup (:mod:`seccomm.handshake`: salt = SHA-256 of the job id and every rank's fresh
nonce, RFC 5869 §3.1; ``th`` = SHA-256 of every rank's hello)::

    hello MAC key (setup, every rank)  HKDF(secret, salt = job id, info = "seccomm/1 hello")
    direction key (src->dst, epoch e)  info = "seccomm/1 dir|"   suite "|" e src dst "|" th
    group key (epoch e)                info = "seccomm/1 group|" suite "|" e "|" th
    finished key (setup)               info = "seccomm/1 finished|" suite "||" th
    group-secret wrap (0 <-> j)        info = "seccomm/1 group-wrap|" suite "|" j "|" th

In ``psk`` mode ikm is the job secret.  In ``psk-dhe`` mode every rank's hello carries an
ephemeral X25519 share (authenticated by the hello MAC and the finished MAC); direction keys use
``ikm = secret || X25519(src, dst)``, the group and finished keys ``ikm = secret || group secret``,
a random group secret that rank 0 sends to each rank sealed under their wrap key.  The ephemeral
private key is dropped after the exchange, so recording the traffic and later learning the PSK
does not reveal the keys.
"""

from __future__ import annotations

import os
import stat
import struct

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import KeyScheduleError

MIN_SECRET_BYTES = 32
KEY_EXCHANGES = ("psk", "psk-dhe")


def load_secret(psk: bytes | str | None = None) -> tuple[bytes, str]:
    """Return ``(secret, source)``; ``KeyScheduleError`` when missing, short or unsafe.

    ``psk`` may be bytes or a hex string.  The error message names the source, never the value.
    """
    if psk is not None:
        return _check_len(_as_bytes(psk, "psk argument"), "psk argument"), "argument"
    path = os.environ.get("SECCOMM_PSK_FILE")
    if path:
        try:
            st = os.stat(path)
        except OSError as e:
            raise KeyScheduleError(f"SECCOMM_PSK_FILE {path!r} cannot be read: {e.strerror}") from None
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise KeyScheduleError(
                f"SECCOMM_PSK_FILE {path!r} is accessible by group or others "
                f"(mode {stat.S_IMODE(st.st_mode):o}); run: chmod 600 {path}"
            )
        with open(path, "rb") as f:
            raw = f.read()
        data = raw.strip()
        try:
            data = bytes.fromhex(data.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            data = raw  # raw binary secret
        return _check_len(data, "SECCOMM_PSK_FILE"), "SECCOMM_PSK_FILE"
    env = os.environ.get("SECCOMM_PSK")
    if env:
        return _check_len(_as_bytes(env, "SECCOMM_PSK"), "SECCOMM_PSK"), "SECCOMM_PSK"
    raise KeyScheduleError(
        "no job secret: set SECCOMM_PSK_FILE (a 0600 file of >= 32 bytes) or SECCOMM_PSK "
        "(>= 64 hex digits) on every rank, or pass psk= (`seccomm bench`/`train` make one for "
        "the ranks they start)"
    )


def _as_bytes(v, what):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        try:
            return bytes.fromhex(v.strip())
        except ValueError:
            raise KeyScheduleError(f"{what} is not valid hex") from None
    raise KeyScheduleError(f"{what} must be bytes or a hex string, got {type(v).__name__}")


def _check_len(data, what):
    if len(data) < MIN_SECRET_BYTES:
        raise KeyScheduleError(f"{what} holds {len(data)} bytes; at least {MIN_SECRET_BYTES} needed")
    return data


def new_secret_file(directory: str | None = None) -> str:
    """Write 32 random bytes (hex) to a new 0600 file and return its path (local launcher)."""
    import tempfile

    fd, path = tempfile.mkstemp(prefix="seccomm-psk-", dir=directory)
    with os.fdopen(fd, "w") as f:
        f.write(os.urandom(32).hex())
    os.chmod(path, 0o600)
    return path


def hkdf(ikm: bytes, salt: bytes, info: bytes, length: int = 32) -> bytes:
    """HKDF-SHA256 (RFC 5869) through ``cryptography``."""
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt, info=info).derive(ikm)


def hmac_sha256(key: bytes, msg: bytes) -> bytes:
    h = hmac.HMAC(key, hashes.SHA256())
    h.update(msg)
    return h.finalize()


def hmac_verify(key: bytes, msg: bytes, tag: bytes) -> bool:
    h = hmac.HMAC(key, hashes.SHA256())
    h.update(msg)
    try:
        h.verify(tag)
        return True
    except InvalidSignature:
        return False


def hello_key(secret: bytes, job_id: bytes) -> bytes:
    """The key of every rank's hello MAC (:mod:`seccomm.handshake`): from the job secret and the
    16-byte job id only, since no nonce is known before the hellos."""
    return hkdf(secret, job_id, b"seccomm/1 hello")


class KeySchedule:
    """Derives and caches per-epoch keys, as raw bytes (GPU kernels) and as keyed suites
    (:class:`~seccomm.suites.SuiteKey`, the CPU engine).  Holds secrets; its repr shows none.

    ``suite``: a :class:`~seccomm.suites.CipherSuite`; ``salt``: the session salt (32 bytes:
    job id and every rank's nonce, :meth:`seccomm.handshake.Transcript.salt`); ``context``: the
    transcript hash (32 bytes), bound into every key's info as TLS 1.3 binds its transcript
    (RFC 8446 §7.1); ``rank``: this rank.
    """

    def __init__(self, secret: bytes, suite, salt: bytes, context: bytes, rank: int):
        self._secret = secret
        self.suite, self.rank = suite, rank
        self._salt, self._context = salt, context
        self._pair: dict[int, bytes] | None = None  # psk-dhe pairwise secrets
        self._group_secret: bytes | None = None
        self._cache: dict[tuple, object] = {}
        self.mode = "psk"

    def __repr__(self):
        return f"<KeySchedule suite={self.suite.name} mode={self.mode} rank={self.rank}>"

    def _info(self, label: bytes, *fields: int) -> bytes:
        head = b"seccomm/1 " + label + b"|" + self.suite.name.encode() + b"|"
        return head + struct.pack(f">{len(fields)}I", *fields) + b"|" + self._context

    def use_dhe(self, pair: dict[int, bytes]) -> None:
        """psk-dhe: the X25519 secret shared with every other rank (``{rank: 32 bytes}``)."""
        self._pair, self.mode = dict(pair), "psk-dhe"
        self._cache.clear()

    def use_group_secret(self, group_secret: bytes) -> None:
        """psk-dhe: the 32-byte group secret rank 0 drew for this session."""
        self._group_secret = group_secret
        self._cache.clear()

    def wrap_key(self, j: int) -> bytes:
        """psk-dhe: the key that seals the group secret between rank 0 and rank ``j`` (>= 1)."""
        other = j if self.rank == 0 else 0
        return hkdf(self._secret + self._pair[other], self._salt, self._info(b"group-wrap", j))

    def finished_key(self) -> bytes:
        """The key of every rank's finished MAC: from the new session's secrets (psk: the job
        secret; psk-dhe: with the group secret), the salt and the transcript hash."""
        return hkdf(self._secret + (self._group_secret or b""), self._salt, self._info(b"finished"))

    def notice_key(self) -> bytes:
        """Key of the give-up/abort notices (:mod:`seccomm.transports.mpi`): from the session's
        secrets (psk: the job secret; psk-dhe: with the group secret), the salt and the transcript
        hash, label "notice".  Any rank of the session can derive it."""
        return hkdf(self._secret + (self._group_secret or b""), self._salt, self._info(b"notice"))

    def direction_key(self, epoch: int, src: int, dst: int) -> bytes:
        """The 32 key bytes for frames sealed by ``src`` for ``dst`` in ``epoch`` (for the GPU
        kernels, which take raw keys)."""
        k = ("D", epoch, src, dst)
        key = self._cache.get(k)
        if key is None:
            ikm = self._secret
            if self._pair is not None:
                ikm = ikm + self._pair[dst if src == self.rank else src]
            key = self._cache[k] = hkdf(ikm, self._salt, self._info(b"dir", epoch, src, dst))
        return key

    def group_key(self, epoch: int) -> bytes:
        """The 32 key bytes of the group key of ``epoch``."""
        k = ("G", epoch)
        key = self._cache.get(k)
        if key is None:
            ikm = self._secret + (self._group_secret or b"")
            key = self._cache[k] = hkdf(ikm, self._salt, self._info(b"group", epoch))
        return key

    def direction(self, epoch: int, src: int, dst: int):
        """The suite keyed for frames sealed by ``src`` for ``dst`` in ``epoch`` (a
        :class:`~seccomm.suites.SuiteKey`)."""
        k = ("d", epoch, src, dst)
        keyed = self._cache.get(k)
        if keyed is None:
            keyed = self._cache[k] = self.suite.keyed(self.direction_key(epoch, src, dst))
        return keyed

    def group(self, epoch: int):
        """The suite keyed for group-key frames (encrypt-once forwarding) in ``epoch``."""
        k = ("g", epoch)
        keyed = self._cache.get(k)
        if keyed is None:
            keyed = self._cache[k] = self.suite.keyed(self.group_key(epoch))
        return keyed

    def forget_before(self, epoch: int) -> None:
        """Drop cached keys of epochs older than ``epoch`` (after a rotation)."""
        self._cache = {k: v for k, v in self._cache.items() if k[1] >= epoch}
