"""Cipher suites: one registry, one seal/open interface, all CPU crypto through ``cryptography``.

A suite bound to a key (:meth:`CipherSuite.keyed`, a :class:`SuiteKey`) seals and opens one
frame in place, in a *slot* (:class:`seccomm.framing.Slot`: views of one chunk's nonce, AAD
header, body and tag in a wire buffer), zero-copy (``encrypt_into``/``decrypt_into``).  Only
``body || tag`` (the *frame*) crosses the wire; the receiver writes its own expected nonce and
header into its slot before opening, so nothing it did not expect can verify.  ``aes-256-gmac``
copies the payload into the body once, since it travels in the clear.  A ``none`` frame
(:attr:`CipherSuite.clear`) is the payload alone, with no tag: it needs no slot, and goes from and
into the caller's memory where the algorithm allows.

Usage limits (frames per key) follow CFRG draft-irtf-cfrg-aead-limits (target advantage
p = 2^-50, L = 16-byte blocks per frame including AAD) and NIST SP 800-38D §8.3.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from .errors import shown

NONCE_BYTES = 12
TAG_BYTES = 16
KEY_BYTES = 32
_EMPTY = bytearray(0)

#: CFRG draft-irtf-cfrg-aead-limits target advantage (TLS 1.3 uses 2^-60/2^-57; 2^-50 is the
#: draft's worked example for 1 MiB messages, giving about 2^23.5 AES-GCM messages per key).
TARGET_ADVANTAGE_LOG2 = -50


def _gcm_limit(frame_bytes: int, aad_bytes: int) -> int:
    """AES-GCM confidentiality limit q <= (p^0.5 * 2^64.5 - 1) / (L + 1), capped at 2^32.

    Source: draft-irtf-cfrg-aead-limits §5.1 (AEAD_AES_128_GCM/256 confidentiality), and
    NIST SP 800-38D §8.3 (2^32 invocations; binding only for random IVs, kept as a cap).
    """
    blocks = math.ceil(frame_bytes / 16) + math.ceil(aad_bytes / 16)
    q = (2.0 ** (TARGET_ADVANTAGE_LOG2 / 2 + 64.5) - 1) / (blocks + 1)
    return int(min(q, 2**32))


class SuiteKey:
    """A suite bound to one key, in the style of pyca's AEAD classes (``AESGCM(key)``): every
    suite's keyed object has the same two methods, so the engine holds one object per hop.

    ``suite``: the :class:`CipherSuite` (its ``suite_id`` goes into the AAD).  Never shows the key.
    """

    __slots__ = ("suite", "_aead")

    def __init__(self, suite: "CipherSuite", aead):
        self.suite, self._aead = suite, aead

    def seal(self, slot, plaintext) -> None:
        """Write the frame for ``plaintext`` (uint8 view, ``len == len(slot.body)``) into
        ``slot`` (a :class:`seccomm.framing.Slot`); ``slot.nonce`` and ``slot.header`` must
        already hold the nonce and AAD header."""
        raise NotImplementedError

    def open(self, slot, out):
        """Verify the frame in ``slot`` and return a uint8 view of its plaintext.

        Decrypting suites write into ``out`` (``len == len(slot.body)``) and return it; they
        write it before the tag is checked (``decrypt_into``), so ``out`` must be memory no caller
        sees (the engine's scratch or accumulators).  Clear-text suites verify first and return
        ``slot.body`` without copying (``out`` untouched).  Raises ``cryptography.exceptions.InvalidTag``
        on a bad tag (the engine turns it into ``AuthenticationError`` with the context).
        """
        raise NotImplementedError

    @property
    def aead(self):
        """The ``cryptography`` AEAD object this key seals and opens with (``AESGCM``,
        ``ChaCha20Poly1305``; ``None`` for ``none``): :mod:`seccomm.pairswap` calls its
        ``encrypt_into`` and ``decrypt_into`` as :class:`AEADKey` does."""
        return self._aead

    def __repr__(self):
        return f"<SuiteKey {self.suite.name}>"


class AEADKey(SuiteKey):
    """AES-256-GCM or ChaCha20-Poly1305: ``body || tag`` = AEAD(nonce, payload, AAD header)."""

    __slots__ = ()

    def seal(self, slot, plaintext):
        self._aead.encrypt_into(slot.nonce, plaintext, slot.header, slot.frame)

    def open(self, slot, out):
        self._aead.decrypt_into(slot.nonce, slot.frame, slot.header, out)
        return out


class _GMACKey(SuiteKey):
    """AES-256-GCM over an empty plaintext with ``header || payload`` as AAD (NIST SP 800-38D)."""

    __slots__ = ()

    def seal(self, slot, plaintext):
        np.copyto(np.frombuffer(slot.body, np.uint8), np.frombuffer(plaintext, np.uint8))
        self._aead.encrypt_into(slot.nonce, _EMPTY, slot.header_body, slot.tag)

    def open(self, slot, out):
        self._aead.decrypt_into(slot.nonce, slot.tag, slot.header_body, _EMPTY)
        return slot.body


class _ClearKey(SuiteKey):
    """The ``none`` suite: the same framing without cryptography (the payload is the body)."""

    __slots__ = ()

    def seal(self, slot, plaintext):
        np.copyto(np.frombuffer(slot.body, np.uint8), np.frombuffer(plaintext, np.uint8))

    def open(self, slot, out):
        return slot.body


@dataclass(frozen=True)
class CipherSuite:
    """A named protection level for frames.

    ``name``: registry name; ``suite_id``: byte bound into the AAD; ``confidential``: payload is
    encrypted; ``authenticated``: frames carry a verified tag; ``fips_140_3``: the FIPS 140-3
    status of the *algorithm* only (approved or not, NIST SP 800-140C) — whether the module that
    runs it is validated is another matter (:mod:`seccomm.compliance.status`); ``limit_source``:
    where the usage limit comes from.

    ``clear`` (class attribute): a frame is its payload alone, with no tag on the wire, and
    nothing is sealed or opened: the engine sends it straight from the caller's memory and
    receives it straight into it where the algorithm allows (the ``none`` suite).  A suite that is
    not ``clear`` is framed in slots and goes through its key's ``seal`` and ``open``.
    """

    name: str
    suite_id: int
    confidential: bool
    authenticated: bool
    fips_140_3: str
    limit_source: str

    #: frames are the payload alone, never sealed or opened (see the class docstring)
    clear = False
    #: the SuiteKey subclass that `keyed` returns
    key_class = SuiteKey
    #: the `cryptography` AEAD class keyed by `keyed` (None for `none`)
    aead_class = None

    def keyed(self, key: bytes | None) -> SuiteKey:
        """This suite bound to a 32-byte ``key`` (``None`` for ``none``): the object that seals
        and opens frames (:class:`SuiteKey`)."""
        return self.key_class(self, None if self.aead_class is None else self.aead_class(key))

    def usage_limit(self, chunk_bytes: int, aad_bytes: int) -> int:
        """Maximum frames sealed under one key before the key must be rotated."""
        raise NotImplementedError

    def __repr__(self):
        return f"<CipherSuite {self.name}>"


class AESGCMSuite(CipherSuite):
    key_class, aead_class = AEADKey, AESGCM

    def usage_limit(self, chunk_bytes, aad_bytes):
        return _gcm_limit(chunk_bytes, aad_bytes)


class ChaChaSuite(CipherSuite):
    key_class, aead_class = AEADKey, ChaCha20Poly1305

    def usage_limit(self, chunk_bytes, aad_bytes):
        # draft-irtf-cfrg-aead-limits §5.2: no confidentiality limit below 2^96 nonces; the cap
        # keeps every nonce field far from wrapping.
        return 2**48


class GMACSuite(CipherSuite):
    """AES-256-GCM over an empty plaintext with ``header || payload`` as AAD (NIST SP 800-38D)."""

    key_class, aead_class = _GMACKey, AESGCM

    def usage_limit(self, chunk_bytes, aad_bytes):
        return _gcm_limit(0, chunk_bytes + aad_bytes)


class NoneSuite(CipherSuite):
    """The same algorithms without cryptography: isolates the algorithm's own cost.  Its frames
    are the payload alone (``clear``): no tag, no copy into a slot where the algorithm allows."""

    clear = True
    key_class = _ClearKey

    def usage_limit(self, chunk_bytes, aad_bytes):
        return 2**63


#: The registered cipher suites by name: ``"none"``, ``"aes-256-gcm"``, ``"chacha20-poly1305"``,
#: ``"aes-256-gmac"`` (each a :class:`CipherSuite`; :func:`get_suite` looks one up).
SUITES: dict[str, CipherSuite] = {}


def register(suite: CipherSuite) -> CipherSuite:
    """Add ``suite`` to the registry (name and suite_id must be unique)."""
    if suite.name in SUITES or any(s.suite_id == suite.suite_id for s in SUITES.values()):
        raise ValueError(f"suite {suite.name!r} or id {suite.suite_id} already registered")
    SUITES[suite.name] = suite
    return suite


def get_suite(name: str) -> CipherSuite:
    """Look up a suite by name; ``ValueError`` listing the registered names."""
    try:
        return SUITES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown suite {shown(name)}; allowed: {', '.join(SUITES)}") from None


register(NoneSuite("none", 0, False, False, "not applicable (no cryptography)", "none: no key is used"))
register(
    AESGCMSuite(
        "aes-256-gcm",
        1,
        True,
        True,
        "approved algorithm (NIST SP 800-38D)",
        "CFRG draft-irtf-cfrg-aead-limits §5.1, p=2^-50; SP 800-38D §8.3 cap 2^32",
    )
)
register(
    ChaChaSuite(
        "chacha20-poly1305",
        2,
        True,
        True,
        "not approved (ChaCha20-Poly1305 is not a NIST-approved algorithm)",
        "CFRG draft-irtf-cfrg-aead-limits §5.2: no confidentiality limit; cap 2^48",
    )
)
register(
    GMACSuite(
        "aes-256-gmac",
        3,
        False,
        True,
        "approved algorithm (GMAC, NIST SP 800-38D)",
        "CFRG draft-irtf-cfrg-aead-limits §5.1 over AAD blocks, p=2^-50; cap 2^32",
    )
)
