"""Construction-time agreement: one authenticated exchange proves that every rank runs the same
suite, settings and job secret, and turns any disagreement into the same clear error on every rank
(never a hang, never a silent mix of settings).

Each rank contributes a fixed-size block: its settings as canonical JSON, the text of any local
argument error, and HMAC-SHA256 over the JSON under the key-confirmation key (RFC 2104, via
``cryptography``).  The blocks are allgathered; every rank evaluates all of them identically.
"""

from __future__ import annotations

import json
import struct

import numpy as np

from .errors import ConfigMismatchError
from .keys import hmac_sha256, hmac_verify

BLOCK_BYTES = 2048
_MAC = 32


def _encode(settings: dict, local_error: str | None, confirm_key: bytes | None) -> np.ndarray:
    body = json.dumps(
        {"settings": settings, "error": local_error, "has_secret": confirm_key is not None}, sort_keys=True
    ).encode()
    if len(body) > BLOCK_BYTES - _MAC - 4:
        raise ValueError("settings too large for the configuration check")
    buf = np.zeros(BLOCK_BYTES, np.uint8)
    buf[:4] = np.frombuffer(struct.pack(">I", len(body)), np.uint8)
    buf[4 : 4 + len(body)] = np.frombuffer(body, np.uint8)
    if confirm_key is not None:
        buf[-_MAC:] = np.frombuffer(hmac_sha256(confirm_key, body), np.uint8)
    return buf


_UNREADABLE = {"settings": {}, "error": "unreadable configuration block", "has_secret": False}


def _parse(body: bytes) -> dict:
    """A peer's block as ``{"settings": dict, "error": str | None, "has_secret": bool}``; any
    other content (not UTF-8, not JSON, another shape) reads as an unreadable block."""
    try:
        d = json.loads(body)
    except ValueError:  # includes UnicodeDecodeError
        return _UNREADABLE
    if (
        not isinstance(d, dict)
        or not isinstance(d.get("settings"), dict)
        or not isinstance(d.get("error"), (str, type(None)))
        or not isinstance(d.get("has_secret"), bool)
    ):
        return _UNREADABLE
    return d


def verify_settings(
    transport, settings: dict, confirm_key: bytes | None, local_error: BaseException | None
) -> None:
    """Allgather and compare; raise on every rank if anything differs.

    The rank whose own arguments were bad re-raises its ``local_error`` (a ``ValueError``,
    ``TypeError`` or ``KeyScheduleError``); the others raise ``ConfigMismatchError`` naming it.
    """
    size, rank = transport.size, transport.rank
    mine = _encode(settings, None if local_error is None else str(local_error), confirm_key)
    allv = np.empty((size, BLOCK_BYTES), np.uint8)
    transport.allgather(mine, allv, op_label="configuration check")
    bodies, parsed = [], []
    for j in range(size):
        n = struct.unpack(">I", allv[j, :4].tobytes())[0]
        body = allv[j, 4 : 4 + min(n, BLOCK_BYTES - _MAC - 4)].tobytes()
        bodies.append(body)
        canonical = n <= BLOCK_BYTES - _MAC - 4 and not allv[j, 4 + n : BLOCK_BYTES - _MAC].any()
        parsed.append(_parse(body) if canonical else _UNREADABLE)  # padding must be zero
    bad = [(j, d["error"]) for j, d in enumerate(parsed) if d.get("error")]
    if bad:
        if local_error is not None:
            raise local_error
        j, err = bad[0]
        raise ConfigMismatchError(f"rank {j} rejected its SecureComm arguments: {err}")
    diffs = []
    ref = parsed[0]["settings"]
    for key in sorted(set().union(*(d["settings"].keys() for d in parsed))):
        vals = {j: d["settings"].get(key) for j, d in enumerate(parsed)}
        odd = [j for j, v in vals.items() if v != ref.get(key)]
        if odd:
            diffs.append(f"{key}: rank 0 {ref.get(key)!r}, rank {odd[0]} {vals[odd[0]]!r}")
    if diffs:
        raise ConfigMismatchError("SecureComm settings differ across ranks: " + "; ".join(diffs))
    failed = [j for j in range(size) if not hmac_verify(confirm_key, bodies[j], allv[j, -_MAC:].tobytes())]
    if failed:
        raise ConfigMismatchError(
            f"job secret differs across ranks: key confirmation from rank(s) {failed[:8]} failed "
            f"on rank {rank} (check SECCOMM_PSK_FILE / SECCOMM_PSK on every node)"
        )
