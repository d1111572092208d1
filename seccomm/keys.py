"""Job secret and key schedule (HKDF-SHA256, RFC 5869; X25519, RFC 7748).

Secret sources, in order: the ``psk=`` argument, ``SECCOMM_PSK_FILE`` (a file of >= 32 raw bytes
or hex; refused when a symbolic link, another user's, or open to group or others), ``SECCOMM_PSK``
(hex); any secret is refused when short or guessable (:func:`load_secret`).  The local launcher
writes a fresh secret to a 0600 file for each run.

Keys, all 32 bytes, ``HKDF(SHA-256, ikm, salt, info)`` with the salt and the transcript hash
``th`` of the setup (:mod:`seccomm.handshake`: salt = SHA-256 of the job id and every rank's fresh
nonce, RFC 5869 §3.1; ``th`` = SHA-256 of every rank's hello)::

    hello MAC key (setup, every rank)  HKDF(secret, salt = job id, info = "seccomm/1 hello")
    direction key (src->dst, epoch e)  info = "seccomm/1 dir|"   suite "|" e src dst "|" th
    group key (epoch e)                info = "seccomm/1 group|" suite "|" e "|" th
    finished key (setup)               info = "seccomm/1 finished|" suite "||" th
    group-secret wrap (0 <-> j)        info = "seccomm/1 group-wrap|" suite "|" j "|" th
    control (ranks a < b)              info = "seccomm/1 control|" suite "|" a b "|" th

``suite`` is the suite's name in ASCII; ``e``, ``src``, ``dst``, ``j``, ``a`` and ``b`` are unsigned
32-bit big-endian integers.

In ``psk`` mode ikm is the job secret.  In ``psk-dhe`` mode every rank's hello carries an
ephemeral X25519 share (authenticated by the hello MAC and the finished MAC); direction keys use
``ikm = secret || X25519(src, dst)`` (control keys: ``X25519(a, b)``), the group and finished
keys ``ikm = secret || group secret``, a random group secret that rank 0 sends to each rank
sealed under their wrap key.  The ephemeral private key is dropped after the exchange, so
recording the traffic and later learning the PSK does not reveal the keys.
"""

from __future__ import annotations

import os
import shlex
import struct

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .entropy import MIN_SECRET_BITS, estimate_bits
from .errors import KeyScheduleError
from .files import MAX_FILE_BYTES, FileRule, read_checked

MIN_SECRET_BYTES = 32
KEY_EXCHANGES = ("psk", "psk-dhe")
#: how ranks are authenticated: one job secret every rank holds, or a certificate per rank
IDENTITIES = ("psk", "x509")


def load_secret(psk: bytes | str | None = None) -> tuple[bytes, str]:
    """Return ``(secret, source)`` from the first source set: the ``psk`` argument (bytes, or a
    hex string), ``SECCOMM_PSK_FILE`` (:func:`read_secret_file`), ``SECCOMM_PSK`` (hex).

    Every secret must hold at least :data:`MIN_SECRET_BYTES` bytes and pass the entropy estimate
    of :mod:`seccomm.entropy` (at least 128 bits: an observer of the setup can test guesses of the
    secret offline against its MACs).  Raises ``KeyScheduleError`` when no source is set, or when
    the one set is unreadable, unsafe, short or guessable; the message names the source and what
    to do, never the value.
    """
    if psk is not None:
        return check_secret(_as_bytes(psk, "psk argument"), "psk argument"), "argument"
    path = os.environ.get("SECCOMM_PSK_FILE")
    if path:
        return check_secret(read_secret_file(path), f"SECCOMM_PSK_FILE {path!r}"), "SECCOMM_PSK_FILE"
    env = os.environ.get("SECCOMM_PSK")
    if env:
        return check_secret(_as_bytes(env, "SECCOMM_PSK"), "SECCOMM_PSK"), "SECCOMM_PSK"
    raise KeyScheduleError(
        "no job secret: set SECCOMM_PSK_FILE (a 0600 file of >= 32 random bytes, e.g. "
        "openssl rand -hex 32) or SECCOMM_PSK (>= 64 hex digits) on every rank, or pass psk= "
        "(`seccomm bench`/`train` make one for the ranks they start)"
    )


def secret_is_set(psk: bytes | str | None = None) -> bool:
    """Whether any source of :func:`load_secret` is set (the argument, ``SECCOMM_PSK_FILE`` or
    ``SECCOMM_PSK``), usable or not."""
    return psk is not None or bool(os.environ.get("SECCOMM_PSK_FILE") or os.environ.get("SECCOMM_PSK"))


#: larger than any secret file could sensibly be [B]
MAX_SECRET_FILE_BYTES = MAX_FILE_BYTES


def _make_one(path: str) -> str:
    """The shell command that writes a good secret file at ``path``."""
    q = shlex.quote(path)
    return f"(umask 077 && openssl rand -hex 32 > {q})"


def read_secret_file(path: str) -> bytes:
    """The secret in the file ``path``: its hex digits decoded when it holds nothing else (and
    whitespace), else its raw bytes.  The file must pass :func:`seccomm.files.read_checked` as a
    private file: not a symbolic link, a regular file owned by this process's effective user,
    with no permission bits for group or others, checked on the open descriptor.

    Raises ``KeyScheduleError`` naming the file and the fix, never the content.
    """
    what = f"SECCOMM_PSK_FILE {path!r}"
    rule = FileRule(what, "SECCOMM_PSK_FILE", _make_one(path), "secret", True, KeyScheduleError)
    raw = read_checked(path, rule)
    text = raw.strip()
    if text and not text.translate(None, b"0123456789abcdefABCDEF \t\r\n"):  # meant as hex
        try:
            return bytes.fromhex(text.decode("ascii"))
        except ValueError:
            raise KeyScheduleError(f"{what} is not valid hex (an odd number of digits?)") from None
    return raw  # a raw binary (or text) secret


def _as_bytes(v, what):
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    if isinstance(v, str):
        try:
            return bytes.fromhex(v.strip())
        except ValueError:
            raw = "; pass bytes for a secret's raw bytes" if what == "psk argument" else ""
            raise KeyScheduleError(
                f"{what} is not valid hex (read as hex digits, e.g. from openssl rand -hex 32{raw})"
            ) from None
    raise KeyScheduleError(f"{what} must be bytes or a hex string, got {type(v).__name__}")


def check_secret(data: bytes, what: str) -> bytes:
    """``data`` when it holds >= :data:`MIN_SECRET_BYTES` bytes and the estimate of
    :func:`seccomm.entropy.estimate_bits` reaches :data:`~seccomm.entropy.MIN_SECRET_BITS`;
    else ``KeyScheduleError`` naming ``what`` (the source) and the fix, never the value."""
    if len(data) < MIN_SECRET_BYTES:
        raise KeyScheduleError(f"{what} holds {len(data)} bytes; at least {MIN_SECRET_BYTES} needed")
    est = estimate_bits(data)
    if est.bits < MIN_SECRET_BITS:
        raise KeyScheduleError(
            f"{what} is too easy to guess offline: estimated {est.bits:.0f} bits ({est.kind}, "
            f"judged by its {est.view}), at least {MIN_SECRET_BITS} needed; use 32 random bytes, "
            f"e.g. openssl rand -hex 32 (see docs/threat-model.md, 'Job secret')"
        )
    return data


def random_secret() -> bytes:
    """32 random bytes (``os.urandom``) that pass :func:`check_secret`: a draw the entropy
    estimate would refuse (probability below 2**-26, :mod:`seccomm.entropy`) is drawn again."""
    secret = os.urandom(32)
    while estimate_bits(secret).bits < MIN_SECRET_BITS:
        secret = os.urandom(32)
    return secret


def new_secret_file(directory: str | None = None) -> str:
    """Write :func:`random_secret` (64 hex digits) to a new 0600 file and return its path (the
    local launcher, which removes it afterwards).  The file is created with ``O_EXCL`` in
    ``directory`` (default: :func:`tempfile.gettempdir`) and named ``seccomm-psk-`` followed by
    random characters, so that one left behind by a launcher that was killed can be found."""
    import tempfile

    fd, path = tempfile.mkstemp(prefix="seccomm-psk-", dir=directory)  # O_EXCL, mode 0600
    with os.fdopen(fd, "w") as f:
        f.write(random_secret().hex())
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
        self._group_secret = b""  # psk-dhe: the group secret (use_group_secret); psk: none
        self._cache: dict[tuple, object] = {}
        self.mode = "psk"

    def __repr__(self):
        return f"<KeySchedule suite={self.suite.name} mode={self.mode} rank={self.rank}>"

    def _info(self, label: bytes, *fields: int) -> bytes:
        head = b"seccomm/1 " + label + b"|" + self.suite.name.encode() + b"|"
        return head + struct.pack(f">{len(fields)}I", *fields) + b"|" + self._context

    def use_dhe(self, pair: dict[int, bytes], mode: str = "psk-dhe") -> None:
        """psk-dhe and x509: the X25519 secret shared with every other rank (``{rank: 32
        bytes}``); ``mode``: what :attr:`mode` then says (``psk-dhe``, or ``x509``, whose shares
        each rank's signature over the transcript authenticates)."""
        self._pair, self.mode = dict(pair), mode
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
        return hkdf(self._secret + self._group_secret, self._salt, self._info(b"finished"))

    def pair_key(self, a: int, b: int) -> bytes:
        """Key of the control messages between ranks ``a < b`` (argument records, receipts,
        give-up notices: :class:`seccomm.control.PairMacs`): from the job secret (psk; with the
        X25519 secret of the pair under psk-dhe, which only ``a`` and ``b`` hold), the salt and
        the transcript hash, label "control".  Only ``a`` and ``b`` ask for it."""
        if not 0 <= a < b or self.rank not in (a, b):
            raise ValueError(f"pair_key({a}, {b}): a pair of this rank ({self.rank}), lower first")
        ikm = self._secret
        if self._pair is not None:
            ikm = ikm + self._pair[b if a == self.rank else a]
        return hkdf(ikm, self._salt, self._info(b"control", a, b))

    def origin_key(self, epoch: int, origin: int, receiver: int):
        """The AES-GMAC key (an ``AESGCM`` object) of the origin MACs of group frames from
        ``origin`` to ``receiver`` in ``epoch`` (:mod:`seccomm.engine.origin`), over
        :meth:`origin_key_bytes`."""
        k = ("O", epoch, origin, receiver)
        keyed = self._cache.get(k)
        if keyed is None:
            keyed = self._cache[k] = AESGCM(self.origin_key_bytes(epoch, origin, receiver))
        return keyed

    def origin_key_bytes(self, epoch: int, origin: int, receiver: int) -> bytes:
        """The 32 key bytes of :meth:`origin_key` (for the GPU kernels, which take raw keys): HKDF
        of the job secret (if any) and the pair's X25519 secret, which only those two ranks hold,
        label "origin", the epoch and the two ranks.  Only under psk-dhe or x509, for a pair of
        this rank (``ValueError`` else)."""
        k = ("o", epoch, origin, receiver)
        key = self._cache.get(k)
        if key is None:
            if self.rank not in (origin, receiver) or origin == receiver:
                raise ValueError(f"origin_key({origin}, {receiver}): a pair of this rank ({self.rank})")
            ikm = self._secret + self._pair[receiver if origin == self.rank else origin]
            key = self._cache[k] = hkdf(ikm, self._salt, self._info(b"origin", epoch, origin, receiver))
        return key

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
            ikm = self._secret + self._group_secret
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
