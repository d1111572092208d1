"""Job secret and key schedule (HKDF-SHA256, RFC 5869; X25519, RFC 7748).

Secret sources, in order: the ``psk=`` argument, ``SECCOMM_PSK_FILE`` (a file of >= 32 raw bytes
or hex; refused when readable or writable by group or others), ``SECCOMM_PSK`` (hex).  The local
launcher writes a fresh secret to a 0600 file for each run.

Keys, all 32 bytes, ``HKDF(SHA-256, ikm, salt = job_id || comm_id, info)``::

    direction key (src->dst, epoch e)  info = "seccomm/1 dir"   | suite | e | src | dst
    group key (epoch e)                info = "seccomm/1 group" | suite | e
    key confirmation (handshake)       info = "seccomm/1 confirm"

In ``psk`` mode ikm is the job secret.  In ``psk-dhe`` mode every rank contributes an ephemeral
X25519 share, authenticated with an HMAC under a PSK-derived key; direction keys use
``ikm = secret || X25519(src, dst)`` and the group key a random group secret that rank 0 sends to
each rank sealed under their pairwise key.  The ephemeral private key is dropped after the
exchange, so recording the traffic and later learning the PSK does not reveal the keys.
"""

from __future__ import annotations

import os
import stat
import struct

from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, hmac
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from .errors import AuthenticationError, KeyScheduleError

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


class KeySchedule:
    """Derives and caches per-epoch keys, as raw bytes (GPU kernels) and as keyed suites
    (:class:`~seccomm.suites.SuiteKey`, the CPU engine).  Holds secrets; its repr shows none.

    ``suite``: a :class:`~seccomm.suites.CipherSuite`; ``job_id``, ``comm_id``: 16 bytes each.
    """

    def __init__(self, secret: bytes, suite, job_id: bytes, comm_id: bytes, rank: int):
        self._secret = secret
        self.suite, self.rank = suite, rank
        self._salt = job_id + comm_id
        self._pair: dict[int, bytes] | None = None  # psk-dhe pairwise secrets
        self._group_secret: bytes | None = None
        self._cache: dict[tuple, object] = {}
        self.mode = "psk"

    def __repr__(self):
        return f"<KeySchedule suite={self.suite.name} mode={self.mode} rank={self.rank}>"

    def _info(self, label: bytes, *fields: int) -> bytes:
        return (
            b"seccomm/1 "
            + label
            + b"|"
            + self.suite.name.encode()
            + b"|"
            + struct.pack(f">{len(fields)}I", *fields)
        )

    def confirm_key(self) -> bytes:
        return hkdf(self._secret, self._salt, b"seccomm/1 confirm")

    def notice_key(self) -> bytes:
        """Key of the give-up/abort notices (:mod:`seccomm.transports.mpi`): HKDF(secret [||
        group secret in psk-dhe], the session's salt, "seccomm/1 notice"); a session of its own
        through the salt.  Any rank of the session can derive it."""
        return hkdf(self._secret + (self._group_secret or b""), self._salt, b"seccomm/1 notice")

    def _dhe_auth_key(self) -> bytes:
        return hkdf(self._secret, self._salt, b"seccomm/1 dhe-auth")

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

    def run_dhe(self, transport) -> None:
        """psk-dhe: authenticated ephemeral X25519 exchange over ``transport`` (collective).

        Raises ``AuthenticationError`` naming the rank whose share or group secret fails.
        """
        import numpy as np

        size, rank = transport.size, self.rank
        auth = self._dhe_auth_key()
        eph = X25519PrivateKey.generate()
        pub = eph.public_key().public_bytes_raw()
        mine = np.frombuffer(pub + hmac_sha256(auth, b"share" + struct.pack(">I", rank) + pub), np.uint8)
        allv = np.empty((size, 64), np.uint8)
        transport.allgather(mine, allv, op_label="key exchange")
        pair = {}
        for j in range(size):
            if j == rank:
                continue
            pj = allv[j, :32].tobytes()
            if not hmac_verify(auth, b"share" + struct.pack(">I", j) + pj, allv[j, 32:].tobytes()):
                raise AuthenticationError(
                    peer=j, op="key exchange", seq=0, detail="X25519 share not authenticated by the PSK"
                )
            pair[j] = eph.exchange(X25519PublicKey.from_public_bytes(pj))
        del eph
        wrap_info = b"seccomm/1 group-wrap"
        blobs = np.zeros((size, 48), np.uint8)
        if rank == 0:
            gsecret = os.urandom(32)
            for j in range(1, size):
                k = AESGCM(hkdf(self._secret + pair[j], self._salt, wrap_info))
                blobs[j] = np.frombuffer(k.encrypt(b"\0" * 12, gsecret, struct.pack(">I", j)), np.uint8)
        got = np.empty(48, np.uint8)
        transport.scatter(blobs, got, root=0, op_label="key exchange")
        if rank != 0:
            k = AESGCM(hkdf(self._secret + pair[0], self._salt, wrap_info))
            try:
                gsecret = k.decrypt(b"\0" * 12, got.tobytes(), struct.pack(">I", rank))
            except InvalidTag:
                raise AuthenticationError(
                    peer=0, op="key exchange", seq=0, detail="group secret not authenticated"
                ) from None
        self._pair, self._group_secret, self.mode = pair, gsecret, "psk-dhe"
        self._cache.clear()
