"""The setup transcript: how the ranks of a new ``SecureComm`` agree on its settings and derive
fresh keys, as TLS 1.3 does (RFC 8446 §4.4.4: a Finished MAC over the whole handshake; §4.1.3:
what the peers offered is authenticated, so nobody can downgrade it).

Every rank sends the same three messages, whatever its arguments, mode or verdict, so the
sequence of setup collectives is the same on every rank and a failure anywhere becomes an error
on every rank at the same point (never a hang, never a rank left waiting):

1. **hello** (allgather, :data:`HELLO_BYTES` per rank)::

       u32 n | body (n bytes, canonical JSON) | zeros | HMAC-SHA256(K_hello, "seccomm/1 hello" | body)

   body = ``{rank, nonce, host, share, settings, error}``: the sender's rank, 32 fresh random
   bytes, its host key (the node map), its X25519 share (psk-dhe), every setting that shapes
   security, and its argument error if it has one.  K_hello = HKDF(secret, salt = job id,
   "seccomm/1 hello") (:func:`seccomm.keys.hello_key`).  The MAC binds the sender's rank: nobody
   without the secret can alter another rank's hello or move it into another rank's place.
2. **key delivery** (scatter from rank 0, :data:`DELIVERY_BYTES` per rank): with psk-dhe, the
   group secret sealed with AES-256-GCM under the wrap key of rank 0 and the receiver; with psk,
   zeros (anything else fails).
3. **finished** (allgather, :data:`FINISHED_BYTES` per rank)::

       header = u32 status | u32 blamed
       header | HMAC-SHA256(K_finished, "seccomm/1 finished" | th | u32 rank | header)    (OK)
       header | HMAC-SHA256(K_hello, "seccomm/1 report" | u32 rank | nonce | header)   (failure)

   status :data:`OK` when this rank accepted every message so far (blamed 0xFFFFFFFF), else what
   failed here and whose message (``blamed``), a failure report MACed under the hello key with
   this rank's own nonce (zeros from a rank without a secret).  K_finished comes from the new
   session's keys.  A report whose MAC fails blames the rank that sent it (its message was
   altered), never the rank it names.

Derivation: the transcript is every rank's hello block in rank order (this rank's own as it sent
it); th = SHA-256("seccomm/1 transcript" | transcript); the session salt is
SHA-256("seccomm/1 salt" | job id | nonce_0 | ... | nonce_p-1) (RFC 5869 §3.1); every key's info
ends with th (:class:`~seccomm.keys.KeySchedule`); the communicator id in the AAD is th[:16].
A hello altered or replayed on its way to any rank gives that rank another transcript, so other
keys and a finished MAC no other rank accepts: the setup fails on every rank, before any frame.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import struct
from dataclasses import dataclass, replace

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey, X25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from .errors import AuthenticationError, ConfigMismatchError, IdentityError, SecCommError
from .identity import MAX_SIGNATURE_BYTES, signature_bytes, verify_chain, verify_signature
from .keys import KeySchedule, hello_key, hmac_sha256, hmac_verify
from .topology import name_key, node_ids_from_keys

HELLO_BYTES = 4096  #: bytes of one hello block
NONCE_BYTES = 32  #: fresh random bytes per rank and session
DELIVERY_BYTES = 48  #: a sealed 32-byte group secret and its 16-byte tag
FINISHED_BYTES = 8 + MAX_SIGNATURE_BYTES  #: status, blamed rank, MAC or signature, zeros
OK, REJECTED, NO_GROUP_SECRET = 0, 1, 2  #: finished status: accepted, a hello failed, key delivery failed
FORGED = -1  #: (never sent) a failure report whose MAC failed on the receiving rank
OP = "setup"
_MAC = 32
_BODY_MAX = HELLO_BYTES - 4 - _MAC
_ERROR_MAX = 512  # characters of an argument error carried in a hello
_FIELDS = {"rank", "nonce", "host", "share", "settings", "error", "chain", "machine"}
_NOBODY = 0xFFFFFFFF


def job_digest(label: str) -> bytes:
    """The 16-byte job id of the AAD and the salts: SHA-256 of the job label, truncated."""
    return hashlib.sha256(b"seccomm job " + label.encode()).digest()[:16]


def job_label(label: str) -> str:
    """The job label as a hello carries it: itself when it is at most 128 printable ASCII
    characters, else ``sha256:`` and its hex digest (so every hello fits its block)."""
    if len(label) <= 128 and label.isascii() and label.isprintable():
        return label
    return "sha256:" + hashlib.sha256(label.encode()).hexdigest()


def node_ids_digest(node_ids: list[int]) -> str:
    """The user's node ids as the hello's settings carry them (every rank must give the same)."""
    return hashlib.sha256(repr([int(x) for x in node_ids]).encode()).hexdigest()[:16]


# -- message 1: hello ------------------------------------------------------------------------


@dataclass(frozen=True)
class Hello:
    """One rank's hello.  ``nonce``: 32 bytes; ``host``: 63-bit host key; ``share``: 32-byte
    X25519 public key (psk-dhe, x509) or None; ``settings``: JSON-able dict; ``error``: text or
    None; ``chain``: the rank's certificate chain, DER, leaf first (x509) or None; ``machine``
    (x509): the 63-bit host key of the machine the rank runs on, as its transport says (MPI's
    processor name or the host name), which can only split the certificate's host (a certificate
    copied to several machines does not merge them), or None."""

    rank: int
    nonce: bytes
    host: int
    share: bytes | None
    settings: dict
    error: str | None
    chain: tuple | None = None
    machine: int | None = None

    def body(self) -> bytes:
        """The canonical JSON encoding (sorted keys, no spaces): one body per hello."""
        d = {
            "rank": self.rank,
            "nonce": self.nonce.hex(),
            "host": self.host,
            "share": None if self.share is None else self.share.hex(),
            "settings": self.settings,
            "error": self.error,
            "chain": None if self.chain is None else [base64.b64encode(c).decode() for c in self.chain],
            "machine": self.machine,
        }
        return json.dumps(d, sort_keys=True, separators=(",", ":")).encode()


def encode_hello(hello: Hello, key: bytes | None) -> np.ndarray:
    """The hello block (uint8, :data:`HELLO_BYTES`), MACed under ``key`` (zeros when None: a rank
    without a secret, whose hello carries its error).  ``ValueError`` if the body does not fit."""
    body = hello.body()
    if len(body) > _BODY_MAX:
        raise ValueError(f"setup hello of {len(body)} bytes exceeds {_BODY_MAX}")
    block = bytearray(HELLO_BYTES)
    block[:4] = struct.pack(">I", len(body))
    block[4 : 4 + len(body)] = body
    if key is not None:
        block[-_MAC:] = hmac_sha256(key, b"seccomm/1 hello" + body)
    return np.frombuffer(bytes(block), np.uint8).copy()


def split_hello(block: bytes) -> tuple[bytes, bytes] | None:
    """``(body, mac)`` of a hello block, or None unless the length fits and the padding is zero."""
    n = struct.unpack(">I", block[:4])[0]
    if n > _BODY_MAX or any(block[4 + n : HELLO_BYTES - _MAC]):
        return None
    return block[4 : 4 + n], block[HELLO_BYTES - _MAC :]


def decode_hello(block: bytes) -> Hello | None:
    """The :class:`Hello` in ``block``, or None when it is not one canonically encoded hello: a
    JSON object of exactly the hello's fields, settings a flat object of strings, integers and
    nulls.  Whatever the bytes, nothing but None comes out of a bad block (a JSON nesting deeper
    than the interpreter's recursion limit raises ``RecursionError`` inside ``json``: caught)."""
    parts = split_hello(block)
    if parts is None:
        return None
    try:
        d = json.loads(parts[0])
        h = Hello(
            _int(d["rank"]),
            _hex(d["nonce"]),
            _int(d["host"]),
            None if d["share"] is None else _hex(d["share"]),
            _flat(d["settings"]),
            d["error"],
            _chain(d["chain"]),
            None if d["machine"] is None else _int(d["machine"]),
        )
        ok = set(d) == _FIELDS and isinstance(h.error, (str, type(None)))
        return h if ok and h.body() == parts[0] else None
    except (ValueError, TypeError, KeyError, RecursionError, binascii.Error):  # ValueError: JSON, UTF-8
        return None


def _chain(v) -> tuple | None:
    """A hello's chain: None, or a list of base64 strings (each certificate's DER)."""
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(c, str) for c in v):
        raise TypeError("chain is not a list of strings")
    return tuple(base64.b64decode(c, validate=True) for c in v)


def _flat(v) -> dict:
    """``v`` when it is a dict of str/int/None values (what every rank's settings are), else
    ``TypeError``: no nested value reaches the settings comparison or an error message."""
    if not isinstance(v, dict) or not all(isinstance(x, (str, int, type(None))) for x in v.values()):
        raise TypeError("settings are not a flat object")
    return v


def _int(v) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError("not an integer")
    return v


def _hex(v) -> bytes:
    b = bytes.fromhex(v)
    if len(b) != 32:
        raise ValueError("not 32 bytes")
    return b


@dataclass(frozen=True)
class Transcript:
    """Every rank's hello block in rank order, as this rank holds them, and their hellos
    (None where a block is not a readable hello)."""

    blocks: tuple[bytes, ...]
    hellos: tuple[Hello | None, ...]

    @classmethod
    def from_rows(cls, rows: np.ndarray) -> "Transcript":
        blocks = tuple(bytes(r) for r in rows)
        return cls(blocks, tuple(decode_hello(b) for b in blocks))

    def digest(self) -> bytes:
        """th = SHA-256("seccomm/1 transcript" | every block): what every key and finished MAC binds."""
        return hashlib.sha256(b"seccomm/1 transcript" + b"".join(self.blocks)).digest()

    def salt(self, job_id: bytes) -> bytes:
        """The session salt, SHA-256("seccomm/1 salt" | job id | every rank's nonce) (RFC 5869
        §3.1: nonces exchanged and authenticated); only after :func:`check_hellos` passed."""
        return hashlib.sha256(b"seccomm/1 salt" + job_id + b"".join(h.nonce for h in self.hellos)).digest()

    def node_map(self, user_node_ids, rank: int) -> tuple[list[int], int]:
        """(node id of every rank, ranks on ``rank``'s node) from the authenticated host keys: two
        ranks share a node only when their hosts agree, their machines agree where the hellos
        carry them (x509: the certificate's host and the machine the rank runs on), and, if
        ``user_node_ids`` is given, the user's node ids agree too (they can split nodes, never
        merge hosts)."""
        keys = [h.host if h.machine is None else (h.host, h.machine) for h in self.hellos]
        if user_node_ids is not None:
            keys = list(zip(user_node_ids, keys))
        return node_ids_from_keys(keys, rank)


def check_hellos(t: Transcript, key: bytes | None, rank: int, signed: bool = False) -> None:
    """The checks on every hello, in order, each naming the rank whose hello failed (the same
    error on every rank that holds the same transcript).  ``signed`` (identity x509): the hellos
    are authenticated by each rank's signature over the transcript in its finished message, and
    by their MACs only where ``key`` (a PSK mixed in) is given.  Raises ``ConfigMismatchError``."""
    for j, h in enumerate(t.hellos):
        if h is not None and h.error:
            if _authentic(t, j, key):
                msg = f"setup: rank {j} rejected its SecureComm arguments: {h.error}"
                raise ConfigMismatchError(msg, peer=j)
            raise ConfigMismatchError(
                f"setup: the hello from rank {j} reports an argument error that is not authenticated "
                f"(rank {j} has no job secret, or its hello was altered in transit); its text, "
                f"unauthenticated: {unauthenticated_excerpt(h.error)}",
                peer=j,
            )
    bad = [j for j, h in enumerate(t.hellos) if h is None]
    if bad:
        raise ConfigMismatchError(
            f"setup: the hello from rank {bad[0]} is unreadable on rank {rank}: altered in transit, "
            f"or another seccomm version",
            peer=bad[0],
        )
    _check_identity_setting(t)
    moved = [j for j, h in enumerate(t.hellos) if h.rank != j]
    if signed and moved:
        j = moved[0]
        raise ConfigMismatchError(
            f"setup: the hello in rank {j}'s place was sent as rank {t.hellos[j].rank}", peer=j
        )
    failed = (
        [j for j in range(len(t.blocks)) if not _authentic(t, j, key)]
        if key is not None or not signed
        else []
    )
    if failed:
        raise ConfigMismatchError(
            f"setup: job secret differs across ranks, or a hello was altered in transit: the hello "
            f"from rank(s) {failed[:8]} failed authentication on rank {rank} (check "
            f"SECCOMM_PSK_FILE / SECCOMM_PSK on every node)",
            peer=failed[0],
        )
    _check_settings(t)


#: characters of an unauthenticated text shown in an error (escaped, quoted)
EXCERPT_CHARS = 60


def unauthenticated_excerpt(text: str) -> str:
    """At most :data:`EXCERPT_CHARS` characters of ``text``, which nobody authenticated (anyone on
    the path may have written it), escaped and quoted (``repr``: no control character, no
    newline reaches a log), marked when cut."""
    cut = len(text) > EXCERPT_CHARS
    return repr(text[:EXCERPT_CHARS]) + (f" (first {EXCERPT_CHARS} of {len(text)} characters)" if cut else "")


def _authentic(t: Transcript, j: int, key: bytes | None) -> bool:
    """Hello ``j`` carries a valid MAC and was sent as rank ``j`` (not moved from another place)."""
    body, mac = split_hello(t.blocks[j])
    return key is not None and t.hellos[j].rank == j and hmac_verify(key, b"seccomm/1 hello" + body, mac)


def _check_identity_setting(t: Transcript) -> None:
    """The ranks agree on the identity mode (checked before any authentication, whose keys it
    chooses: a rank of another mode could not be authenticated, and would be blamed for that)."""
    modes = [h.settings.get("identity", "psk") for h in t.hellos]
    odd = [j for j, m in enumerate(modes) if m != modes[0]]
    if odd:
        j = odd[0]
        msg = "setup: SecureComm settings differ across ranks: identity: "
        msg += f"rank 0 {modes[0]!r}, rank {j} {modes[j]!r}"
        raise ConfigMismatchError(msg, peer=j)


def check_identities(t: Transcript, cas, now=None) -> tuple:
    """Every rank's :class:`~seccomm.identity.PeerIdentity` from the chain in its hello, verified
    against ``cas`` (:func:`~seccomm.identity.verify_chain`, once per distinct chain), and its
    host key checked against the name its certificate gives; raises
    :class:`~seccomm.errors.IdentityError` naming the first rank that fails."""
    seen, out = {}, []
    for j, h in enumerate(t.hellos):
        blob = b"".join(h.chain or ())
        if blob not in seen:
            seen[blob] = verify_chain(_certificates(h.chain or (), j), cas, j, now)
        p = replace(seen[blob], rank=j)
        if h.host != name_key(p.host):
            raise IdentityError(
                f"setup: rank {j} gave a host other than the one its certificate names ({p.host!r})", peer=j
            )
        if signature_bytes(p.public_key) is None or signature_bytes(p.public_key) > MAX_SIGNATURE_BYTES:
            raise IdentityError(f"setup: rank {j}'s certificate key is not one seccomm signs with", peer=j)
        out.append(p)
    return tuple(out)


def _certificates(ders, j: int) -> list:
    from cryptography import x509

    try:
        return [x509.load_der_x509_certificate(d) for d in ders]
    except ValueError:
        raise IdentityError(f"setup: rank {j}'s certificate chain is not readable DER", peer=j) from None


def _check_settings(t: Transcript) -> None:
    ref = t.hellos[0].settings
    diffs, peer = [], None
    for name in sorted(set().union(*(h.settings for h in t.hellos))):
        vals = [h.settings.get(name) for h in t.hellos]
        odd = [j for j, v in enumerate(vals) if v != ref.get(name)]
        if odd:
            diffs.append(f"{name}: rank 0 {ref.get(name)!r}, rank {odd[0]} {vals[odd[0]]!r}")
            peer = odd[0] if peer is None else min(peer, odd[0])
    if diffs:
        msg = "setup: SecureComm settings differ across ranks: " + "; ".join(diffs)
        raise ConfigMismatchError(msg, peer=peer)
    signed = ref.get("identity") == "x509"
    dhe = ref.get("key_exchange") == "psk-dhe" or signed
    odd = [j for j, h in enumerate(t.hellos) if (h.share is not None) != dhe]
    if odd:
        what = "has no X25519 share" if dhe else "carries an X25519 share under key_exchange 'psk'"
        raise ConfigMismatchError(f"setup: the hello from rank {odd[0]} {what}", peer=odd[0])
    odd = [j for j, h in enumerate(t.hellos) if (h.chain is not None) != signed]
    if odd:
        what = "has no certificate chain" if signed else "carries a certificate chain under identity 'psk'"
        raise ConfigMismatchError(f"setup: the hello from rank {odd[0]} {what}", peer=odd[0])


# -- the run of one rank -------------------------------------------------------------------


@dataclass(frozen=True)
class Session:
    """What a successful setup gives a rank: its key schedule, the communicator id of the AAD,
    the node map (node id of every rank), the number of ranks on its node, and under identity
    x509 every rank's verified :class:`~seccomm.identity.PeerIdentity` (else None)."""

    keys: KeySchedule
    comm_id: bytes
    node_ids: list
    local: int
    identities: tuple | None = None


def establish(
    transport,
    settings: dict,
    secret,
    suite,
    job_id: bytes,
    host: int,
    node_ids,
    local_error,
    identity=None,
    machine: int | None = None,
) -> Session:
    """Run the three setup messages on ``transport`` (collective) and return this rank's session.

    ``settings``: the values every rank must share (a JSON-able dict; ``key_exchange`` selects
    psk-dhe, ``identity`` "x509" the signed setup); ``secret``: the job secret (None only with a
    ``local_error``; under x509 ``b""`` when no PSK is mixed in); ``suite``: a
    :class:`~seccomm.suites.CipherSuite`; ``job_id``: 16 bytes; ``host``: this rank's host key
    (x509: :func:`~seccomm.topology.name_key` of its certificate's host); ``node_ids``: the
    user's node ids or None; ``local_error``: this rank's argument error; ``identity``: this
    rank's :class:`~seccomm.identity.LocalIdentity` (x509; None where it could not be loaded);
    ``machine``: the host key its transport gives (x509 only: ranks whose certificates name one
    host but that run on different machines are on different nodes).

    Raises, on every rank: this rank's own ``local_error``; ``ConfigMismatchError`` (peer, op
    "setup") when arguments, settings or the secret differ, or a hello failed; and
    ``AuthenticationError`` (op "setup") naming the rank whose key delivery or finished MAC
    failed, when a message was altered or replayed; ``TransportTimeout`` when a rank never joins.
    """
    signed = settings.get("identity") == "x509"
    dhe = settings.get("key_exchange") == "psk-dhe" or signed
    run = _Setup(transport, secret, suite, job_id, local_error, dhe, identity if signed else None, signed)
    t = run.hello(settings, host, machine if signed else None)
    run.check(t, node_ids)
    run.key_delivery()
    return run.finished(t)


class _Setup:
    """One rank's run of the setup: one method per message.  ``failure``: the first thing that
    failed on this rank; it goes out in the finished message and is raised after it."""

    def __init__(self, transport, secret, suite, job_id, local_error, dhe: bool, identity, signed: bool):
        self.tr, self.rank, self.size = transport, transport.rank, transport.size
        self.secret, self.suite, self.job_id, self.dhe = secret, suite, job_id, dhe
        self.identity, self.signed, self.peers = identity, signed, None
        self.key = hello_key(secret, job_id) if secret else None  # (x509 without a PSK: no MAC)
        self.failure, self.status, self.blamed = None, OK, _NOBODY
        if local_error is not None:
            self._fail(local_error, REJECTED, self.rank)
        self.keys = self.session = self._eph = None

    def _fail(self, error: BaseException, status: int, blamed: int) -> None:
        if self.failure is None:
            self.failure, self.status, self.blamed = error, status, blamed

    def hello(self, settings: dict, host: int, machine: int | None = None) -> Transcript:
        """Message 1: send this rank's hello, receive every rank's; the transcript."""
        share = None
        if self.dhe:
            self._eph = X25519PrivateKey.generate()
            share = self._eph.public_key().public_bytes_raw()
        error = None
        if self.failure is not None:
            error = str(self.failure)[:_ERROR_MAX] or type(self.failure).__name__
        self.nonce = os.urandom(NONCE_BYTES)
        chain = None if not self.signed else ()  # (a rank whose hello carries its error: no chain)
        if self.identity is not None and error is None:
            chain = tuple(self.identity.chain_der())
        hello = Hello(self.rank, self.nonce, int(host), share, settings, error, chain, machine)
        while len(hello.body()) > _BODY_MAX and hello.error:  # an error too long for the block
            hello = replace(hello, error=hello.error[: len(hello.error) // 2])
        mine = encode_hello(hello, self.key)
        rows = np.empty((self.size, HELLO_BYTES), np.uint8)
        self.tr.allgather(mine, rows, op_label="setup: hello")
        rows[self.rank] = mine  # this rank's own hello as it sent it
        return Transcript.from_rows(rows)

    def check(self, t: Transcript, user_node_ids) -> None:
        """Check every hello; derive the session's keys from the transcript (psk-dhe: with the
        pairwise X25519 secrets, after which the private key is dropped)."""
        try:
            if self.failure is None:
                check_hellos(t, self.key, self.rank, self.signed)
                if self.signed:
                    self.peers = check_identities(t, self.identity.cas)
                ids, local = t.node_map(user_node_ids, self.rank)
                keys = KeySchedule(self.secret, self.suite, t.salt(self.job_id), t.digest(), self.rank)
                if self.dhe:
                    keys.use_dhe(self._pairwise(t), "x509" if self.signed else "psk-dhe")
                self.keys, self.session = keys, Session(keys, t.digest()[:16], ids, local, self.peers)
        except (ConfigMismatchError, IdentityError) as e:  # each names the rank whose hello failed
            self._fail(e, REJECTED, e.peer)
        finally:
            self._eph = None  # the ephemeral private key is never used again

    def _pairwise(self, t: Transcript) -> dict[int, bytes]:
        pair = {}
        for j, h in enumerate(t.hellos):
            if j != self.rank:
                try:
                    pair[j] = self._eph.exchange(X25519PublicKey.from_public_bytes(h.share))
                except ValueError:  # a low-order point: no shared secret
                    raise ConfigMismatchError(
                        f"setup: the X25519 share of rank {j} gives no shared secret", peer=j
                    ) from None
        return pair

    def key_delivery(self) -> None:
        """Message 2: rank 0 sends each rank the group secret sealed under their wrap key
        (psk-dhe); zeros otherwise, and from a rank that already failed."""
        live = self.dhe and self.failure is None
        group = os.urandom(32) if live and self.rank == 0 else None
        blobs = np.zeros((self.size, DELIVERY_BYTES), np.uint8)
        for j in range(1, self.size) if group is not None else ():
            sealed = AESGCM(self.keys.wrap_key(j)).encrypt(bytes(12), group, _delivery_aad(j))
            blobs[j] = np.frombuffer(sealed, np.uint8)
        got = np.zeros(DELIVERY_BYTES, np.uint8)
        self.tr.scatter(blobs, got, root=0, op_label="setup: key delivery")
        if self.failure is None and self.rank != 0:
            group = self._open_delivery(got.tobytes())
        if live and self.failure is None:
            self.keys.use_group_secret(group)

    def _open_delivery(self, blob: bytes) -> bytes | None:
        """The group secret in rank 0's key delivery (psk-dhe; psk: the delivery must be zeros);
        a failure is recorded, naming rank 0."""
        if not self.dhe:
            if any(blob):
                self._fail(
                    _delivery_error("psk mode delivers zeros; these were altered in transit"),
                    NO_GROUP_SECRET,
                    0,
                )
            return None
        try:
            return AESGCM(self.keys.wrap_key(self.rank)).decrypt(bytes(12), blob, _delivery_aad(self.rank))
        except InvalidTag:
            detail = "the group secret failed authentication (altered or replayed in transit)"
            self._fail(_delivery_error(detail), NO_GROUP_SECRET, 0)
            return None

    def finished(self, t: Transcript) -> Session:
        """Message 3: send this rank's verdict and finished MAC, receive every rank's.  Raises, in
        this order: this rank's rejection of a hello (or its own arguments); another rank's
        rejection (rank 0 sends no group secret after one); this rank's failed key delivery;
        another rank's; a finished MAC that does not match this rank's transcript."""
        header = struct.pack(">II", self.status, self.blamed)
        proof = self._prove(header, t)
        mine = np.frombuffer((header + proof).ljust(FINISHED_BYTES, b"\0"), np.uint8)
        rows = np.empty((self.size, FINISHED_BYTES), np.uint8)
        self.tr.allgather(mine, rows, op_label="setup: finished")
        if self.status == REJECTED:
            raise self.failure
        for j, status, blamed in self._reports(t, rows):
            if status == REJECTED or self.failure is None:
                raise _reported(j, status, blamed)
        if self.failure is not None:
            raise self.failure
        self._check_finished_macs(t, rows)
        return self.session

    def _prove(self, header: bytes, t: Transcript) -> bytes:
        """What follows this rank's finished header: its signature (x509) or MAC (psk) of the
        finished input, or of its failure report; nothing from a rank without a key."""
        if self.failure is None:
            msg = finished_input(t.digest(), self.rank, header)
            return self.identity.sign(msg) if self.signed else hmac_sha256(self.keys.finished_key(), msg)
        msg = report_input(self.rank, self.nonce, header)
        if self.signed:
            return self.identity.sign(msg) if self.identity is not None else b""
        return b"" if self.key is None else hmac_sha256(self.key, msg)

    def _proven(self, j: int, row: np.ndarray, msg: bytes, key) -> bool:
        """Whether rank ``j``'s finished ``row`` carries its proof of ``msg`` (x509: the
        signature of the key in its certificate; psk: the MAC under ``key()``), zeros after it."""
        n = signature_bytes(self.peers[j].public_key) if self.signed else _MAC
        raw = row[8:].tobytes()
        if any(raw[n:]):
            return False
        if self.signed:
            return verify_signature(self.peers[j].public_key, raw[:n], msg)
        return hmac_verify(key(), msg, raw[:n])

    def _reports(self, t: Transcript, rows: np.ndarray) -> list[tuple[int, int, int]]:
        """(rank, status, blamed rank) of every other rank that reports a failure: authentic
        rejections, authentic key-delivery failures, then reports that fail their MAC (status
        :data:`FORGED`, blaming the reporting rank, whose message was altered).  A blamed rank
        outside this communicator becomes the reporting rank.  Only called on a rank that accepted
        every hello, so every sender's nonce is known."""
        reports = []
        for j in range(self.size):
            header = rows[j, :8].tobytes()
            status, blamed = struct.unpack(">II", header)
            if j == self.rank or status == OK:
                continue
            if not self._proven(j, rows[j], report_input(j, t.hellos[j].nonce, header), lambda: self.key):
                status, blamed = FORGED, j
            reports.append((j, status, blamed if blamed < self.size else j))
        order = {REJECTED: 0, NO_GROUP_SECRET: 1}
        return sorted(reports, key=lambda r: order.get(r[1], 2))

    def _check_finished_macs(self, t: Transcript, rows: np.ndarray) -> None:
        """Every other rank's finished MAC (x509: signature) over this rank's transcript hash and
        that rank."""
        th = t.digest()
        failed = [
            j
            for j in range(self.size)
            if j != self.rank
            and not self._proven(
                j, rows[j], finished_input(th, j, rows[j, :8].tobytes()), self.keys.finished_key
            )
        ]
        if failed:
            detail = (
                f"the finished MAC of rank(s) {failed[:8]} does not match the setup transcript of rank "
                f"{self.rank}: a setup message was altered or replayed in transit (no key of this "
                f"session was used)"
            )
            suite = "a signature of its certificate's key" if self.signed else "HMAC-SHA256"
            raise AuthenticationError(peer=failed[0], op=OP, seq=None, suite=suite, detail=detail)


def _delivery_error(detail: str) -> AuthenticationError:
    detail = f"key delivery from rank 0: {detail}"
    return AuthenticationError(peer=0, op=OP, seq=None, suite="AES-256-GCM", detail=detail)


def _delivery_aad(j: int) -> bytes:
    return b"seccomm/1 key delivery" + struct.pack(">I", j)


def finished_input(th: bytes, rank: int, header: bytes) -> bytes:
    """What the finished MAC of ``rank`` covers: the label, the transcript hash, the rank and the
    message's 8-byte header (status, blamed), so no bit of an accepting rank's finished message
    is left unauthenticated."""
    return b"seccomm/1 finished" + th + struct.pack(">I", rank) + header


def report_input(rank: int, nonce: bytes, header: bytes) -> bytes:
    """What the MAC of a failure report covers (under the hello key: a rank that failed has no
    session keys): the label, the reporting rank, its nonce of this session and the header."""
    return b"seccomm/1 report" + struct.pack(">I", rank) + nonce + header


def _reported(j: int, status: int, blamed: int) -> SecCommError:
    """The error a rank raises when rank ``j``'s finished message reports a failure there, caused
    by rank ``blamed``'s message (``j`` itself for its own arguments, or when the report names no
    rank of this communicator), or (:data:`FORGED`) when the report failed its MAC."""
    if status == FORGED:
        detail = (
            f"the failure report in the finished message of rank {j} failed authentication: the "
            f"message was altered in transit (no key of this session was used)"
        )
        return AuthenticationError(peer=j, op=OP, seq=None, suite="HMAC-SHA256", detail=detail)
    if status == NO_GROUP_SECRET:
        detail = f"rank {j} could not authenticate the key delivery from rank 0 (altered or replayed)"
        return AuthenticationError(peer=0, op=OP, seq=None, suite="AES-256-GCM", detail=detail)
    whose = "its own arguments" if blamed == j else f"the hello from rank {blamed}"
    return ConfigMismatchError(
        f"setup: rank {j} rejected the setup because of {whose} (see the error raised on rank {j})",
        peer=blamed,
    )
