"""Argument agreement: in each op, every rank learns that every other rank called the same op with
the same arguments, or raises naming the argument and the ranks.

The frames' AAD binds the collective, dtype, count and reduction op, so a frame between ranks
that disagree on those fails its tag; but a rank may receive no frame at all (the root of a
bcast, or two ranks that each think they are the root) or wait for one that never comes.  So
each op starts with an exchange of one 40-byte *record* per rank, sent before the op's first frame
(:meth:`Transport.agree_start <seccomm.transports.base.Transport.agree_start>`: over MPI,
point-to-point to every other rank, overlapped with the op and checked at its end, or inside any
of its waits as soon as the records are in; over torch.distributed and NCCL, exchanged and checked
before the op: one all-gather, or the control transport)::

    op sequence number (u64) | collective code (u8) | dtype code (u8) | reduction op (u8)
    | algorithm index (u8) | root (u32; 0xFFFFFFFF when the collective has none)
    | element count (u64) | tag (16 bytes)

big-endian.  A rank that refuses its own arguments sends a record with collective code 0 and the
exception's code (:data:`REFUSAL_NAMES`) in the dtype byte, so the others
stop at once and the ranks stay in step.

On two ranks over MPI (a *paired* transport) the record has no message of its own: its last
:data:`TRAILER_BYTES` (all but the op number, which each rank knows, and which the tag binds) ride
behind the op's first frame to the peer, in the same message, from the room each slot keeps
after its tag; an op that sends the peer no frame sends its whole record alone (a bcast leaf
before its first wait, an op of no elements at its end).  A rank whose op failed sends its whole
record once more on a tag of its own, so that a peer that could not read the one in the first
message (it got a larger message than it expected) can still tell the disagreement.  A first
message of another op, replayed with the same arguments, fails the tag: the op number is that of
the op it arrived in.
Under ``none`` the tag is zero: such a replay, and a rank that skipped an op with the same
arguments, go unnoticed there, as any frame does.

``tag = HMAC-SHA256(k, "seccomm/1 agree" | record[:24])[:16] XOR mask(rank)`` with
``mask(j) = HMAC-SHA256(k, "seccomm/1 agree-rank" | j)[:16]`` and ``k`` the session's agreement
key (:meth:`~seccomm.keys.KeySchedule.agreement_key`).  The sequence number makes a record of
another op fail; the mask binds the sender, so one rank's record cannot stand in for another's
(nor be reflected back to its sender).  A rank checks the whole table with one HMAC: agreeing
records are exactly ``record[:24] | tag XOR mask(own) XOR mask(j)``.  Under suite ``none``
nothing on the wire is authenticated, and the tag is zero.
"""

from __future__ import annotations

import struct

import numpy as np
from cryptography.hazmat.primitives import hashes, hmac

from .errors import ArgumentMismatchError, AuthenticationError, PeerAbortError

_DESC = struct.Struct(">QBBBBIQ")
_SEQ, _TAIL = struct.Struct(">Q"), struct.Struct(">BBBBIQ")  # _DESC: the op number, then the rest
DESC_BYTES = _DESC.size  # 24
TAG_BYTES = 16
RECORD_BYTES = DESC_BYTES + TAG_BYTES  # 40
TRAILER_BYTES = RECORD_BYTES - _SEQ.size  # 32: a record after its op number (paired transports)
NO_ROOT = 0xFFFFFFFF
REFUSED = 0  # collective code of a refusal record
REFUSAL_NAMES = {1: "ValueError", 2: "TypeError"}  # a refusal record's dtype byte -> the exception
_LABEL, _RANK_LABEL = b"seccomm/1 agree", b"seccomm/1 agree-rank"
_REFUSAL_REST = (0, 0, NO_ROOT, 0)  # a refusal record's reduction op, algorithm, root, count


class Agreement:
    """One communicator's agreement state: this rank's record, the table of every rank's, and
    the tag masks.  ``key``: the session's agreement key (32 bytes), or ``None`` (suite none).
    ``names(code) -> (collective name, algorithm names)`` and ``dtypes``/``redops`` (code ->
    name) turn codes back into the names an error shows."""

    def __init__(self, rank: int, size: int, key: bytes | None, names, dtypes: dict, redops: dict):
        self.rank, self.size = rank, size
        self.mine = np.zeros(RECORD_BYTES, np.uint8)
        self.table = np.zeros((size, RECORD_BYTES), np.uint8)
        self._mine_mv, self._own_row = memoryview(self.mine), memoryview(self.table[rank])
        self._table_mv = memoryview(self.table.reshape(-1))
        self._names, self._dtypes, self._redops = names, dtypes, redops
        self._mac = None if key is None else hmac.HMAC(key, hashes.SHA256())
        masks = [self._tag(_RANK_LABEL + j.to_bytes(4, "big")) for j in range(size)]
        self._own = masks[rank]
        self._masks = masks
        self._rel = [m ^ self._own for m in masks]  # mask(own) XOR mask(j): agreeing tags differ by it
        self._labelled = None if key is None else self._mac.copy()  # the HMAC with the label in
        if self._labelled is not None:
            self._labelled.update(_LABEL)
        self._expect = b""

    def _tag(self, msg: bytes) -> int:
        if self._mac is None:
            return 0
        h = self._mac.copy()
        h.update(msg)
        return int.from_bytes(h.finalize()[:TAG_BYTES], "big")

    def record(self, seq: int, code: int, dtype: int, redop: int, alg: int, root: int, count: int) -> None:
        """Write this rank's record for op ``seq`` into :attr:`mine` and the table an agreeing
        world would send back."""
        self.record_tail(seq, self.tail(code, dtype, redop, alg, root, count))

    @staticmethod
    def tail(code: int, dtype: int, redop: int, alg: int, root: int, count: int) -> bytes:
        """A record's fields after its op number (16 bytes; ``root`` < 0: none): what a repeated
        call keeps, so that each of its ops only adds its number (:meth:`record_tail`)."""
        return _TAIL.pack(code, dtype, redop, alg, NO_ROOT if root < 0 else root, count)

    def record_tail(self, seq: int, tail: bytes) -> None:
        """:meth:`record` of op ``seq`` with the fields after the op number given as ``tail``
        (:meth:`tail`)."""
        desc = _SEQ.pack(seq) + tail
        tag = self._own
        if self._labelled is not None:  # (one op's hot path: _tag inlined)
            h = self._labelled.copy()
            h.update(desc)
            tag ^= int.from_bytes(h.finalize()[:TAG_BYTES], "big")
        self._mine_mv[:] = mine = desc + tag.to_bytes(TAG_BYTES, "big")
        if self.size == 2:  # (one op's hot path on two ranks: the list below, unrolled)
            other = desc + (tag ^ self._rel[1 - self.rank]).to_bytes(TAG_BYTES, "big")
            self._expect = other + mine if self.rank else mine + other
        else:
            self._expect = b"".join([desc + (tag ^ m).to_bytes(TAG_BYTES, "big") for m in self._rel])

    def pair_masks(self, peer: int):
        """For a compiled record (:mod:`seccomm.express`): ``(labelled, own, rel)``: the HMAC
        object with the label in (copied per record), ``mask(own rank)`` and ``mask(own) XOR
        mask(peer)`` as 16 bytes each, so that the record's tag is ``HMAC[:16] XOR own`` and the
        peer's ``tag XOR rel`` (as :meth:`record_tail`); under suite ``none`` ``(None, zeros,
        zeros)``: the tag is zero."""
        own, rel = self._own.to_bytes(TAG_BYTES, "big"), self._rel[peer].to_bytes(TAG_BYTES, "big")
        return self._labelled, own, rel

    @property
    def expect(self) -> bytes:
        """The table an agreeing world sends back for this rank's current record (``size`` rows
        of :data:`RECORD_BYTES`), as :meth:`check` compares it."""
        return self._expect

    def refusal(self, seq: int, error: str) -> None:
        """Write a refusal record for op ``seq`` into :attr:`mine`: this rank refused its own
        arguments with ``error`` (``"ValueError"`` or ``"TypeError"``, else ``ValueError``)."""
        kind = next((k for k, name in REFUSAL_NAMES.items() if name == error), 1)
        self.record(seq, REFUSED, kind, *_REFUSAL_REST)

    def check(self, op_label: str) -> None:
        """After the exchange: return when every record equals this rank's; else raise
        ``AuthenticationError`` for a record whose tag fails (naming its rank),
        ``PeerAbortError`` for a rank that refused its arguments, ``ArgumentMismatchError``
        naming each argument the ranks disagree on and which rank passed what."""
        self._own_row[:] = self._mine_mv
        if self._table_mv == self._expect:
            return
        rows = {}
        for j in range(self.size):
            raw = self.table[j].tobytes()
            desc, tag = raw[:DESC_BYTES], int.from_bytes(raw[DESC_BYTES:], "big")
            if j != self.rank and self._tag(_LABEL + desc) ^ self._masks[j] != tag:
                raise AuthenticationError(
                    peer=j,
                    op=op_label.split(" #")[0],
                    seq=_DESC.unpack(self.mine[:DESC_BYTES].tobytes())[0],
                    detail="its argument record for this op failed authentication: altered, "
                    "replayed or misdirected",
                )
            rows[j] = _DESC.unpack(desc)
        seq = rows[self.rank][0]  # a refusal record counts in its own op only, and in its one form
        refused = [j for j, r in rows.items() if r[1] == REFUSED and r[0] == seq and r[3:] == _REFUSAL_REST]
        if refused:
            j = refused[0]
            err = REFUSAL_NAMES.get(rows[j][2], "an error")
            raise PeerAbortError(
                f"{op_label}: rank {j} refused its arguments to {op_label}: {err} (see the error on rank "
                f"{j}); the SecureComm is unusable on every rank: build a new one",
                peer=j,
                op=op_label,
                blamed=j,
            )
        raise self._mismatch(rows, op_label)

    def _mismatch(self, rows: dict, op_label: str) -> ArgumentMismatchError:
        fields = {}
        seqs = {j: r[0] for j, r in rows.items()}
        colls = {j: self._names(r[1])[0] for j, r in rows.items()}
        if len(set(seqs.values())) > 1:
            fields["op sequence number"] = {j: f"#{s}" for j, s in seqs.items()}
        if len(set(colls.values())) > 1:
            fields["collective"] = colls
        else:
            algs = self._names(rows[self.rank][1])[1]
            shown = {
                "dtype": {j: self._dtypes.get(r[2], r[2]) for j, r in rows.items()},
                "count": {j: r[6] for j, r in rows.items()},
                "op": {j: self._redops.get(r[3], r[3]) for j, r in rows.items()},
                "root": {j: (None if r[5] == NO_ROOT else r[5]) for j, r in rows.items()},
                "algorithm": {j: (algs[r[4]] if r[4] < len(algs) else r[4]) for j, r in rows.items()},
            }
            fields.update({k: v for k, v in shown.items() if len(set(map(repr, v.values()))) > 1})
        parts = [f"{name}: {_by_value(values)}" for name, values in fields.items()]
        why = (
            " (a rank skipped or repeated a collective, or a record of another op was replayed)"
            if "op sequence number" in fields
            else ""
        )
        return ArgumentMismatchError(
            f"{op_label}: the ranks disagree on {', '.join(fields)} ({'; '.join(parts)}){why}; every "
            f"rank must call the same collectives in the same order with the same root, op, dtype and "
            f"count. The op did not complete; the SecureComm is unusable on every rank: build a new one",
            op=op_label,
            arguments={k: dict(v) for k, v in fields.items()},
        )


def _by_value(values: dict) -> str:
    """``rank 0 passed 0, rank 1 passed 1``, ranks grouped by value (at most 8 groups shown)."""
    groups: dict = {}
    for j, v in sorted(values.items()):
        groups.setdefault(repr(v), []).append(j)
    out = []
    for text, ranks in list(groups.items())[:8]:
        who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {_ranges(ranks)}"
        out.append(f"{who} passed {text.strip(chr(39))}")
    more = len(groups) - 8
    return ", ".join(out) + (f", and {more} more values" if more > 0 else "")


def _ranges(ranks: list) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'"""
    out, start = [], ranks[0]
    for a, b in zip(ranks, ranks[1:] + [None]):
        if b != a + 1:
            out.append(str(start) if start == a else f"{start}-{a}")
            start = b
    return ", ".join(out)
