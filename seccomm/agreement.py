"""Argument agreement: in each op, every rank learns that every other rank called the same op with
the same arguments, or raises naming the argument and the ranks.

The frames' AAD binds the collective, dtype, count and reduction op, so a frame between ranks
that disagree on those fails its tag; but a rank may receive no frame at all (the root of a
bcast, or two ranks that each think they are the root) or wait for one that never comes.  So
each op starts with an exchange of 40-byte *records*, one from each rank to each other rank,
sent before the op's first frame
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

Each rank sends every other rank its own copy of the record: the tag binds the sender and the
receiver.  For ranks ``a < b``, ``d = HMAC-SHA256(k_ab, "seccomm/1 agree|" u32 a | u32 b |
record[:24])``; the record ``a`` sends ``b`` carries ``d[:16]``, the one ``b`` sends ``a``
``d[16:]`` (:mod:`seccomm.control`; ``k_ab``: the pair's control key,
:meth:`~seccomm.keys.KeySchedule.pair_key`).  The sequence number makes a record of another op
fail; the pair key and the halves make a record fail that was reflected to its sender, moved to
another receiver or presented as another rank's.  A rank computes one HMAC per peer and op, and
checks the whole table with one comparison: agreeing records are exactly its own fields with the
tags it computed.  Under suite ``none`` nothing on the wire is authenticated, and the tag is
zero.
"""

from __future__ import annotations

import hmac as _hmac
import struct

import numpy as np

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
_LABEL = b"agree"  # the control label of records (seccomm.control)
_NO_TAG = bytes(TAG_BYTES)
_REFUSAL_REST = (0, 0, NO_ROOT, 0)  # a refusal record's reduction op, algorithm, root, count


class Agreement:
    """One communicator's agreement state: this rank's records (one per receiver), the table of
    the records it received, and the expected table.  ``macs``: the rank's
    :class:`~seccomm.control.PairMacs`, or ``None`` (suite none: no tag).  ``names(code) ->
    (collective name, algorithm names)`` and ``dtypes``/``redops`` (code -> name) turn codes back
    into the names an error shows."""

    def __init__(self, rank: int, size: int, macs, names, dtypes: dict, redops: dict):
        self.rank, self.size = rank, size
        #: row j: the record this rank sends rank j (its own row: the fields and a zero tag)
        self.out = np.zeros((size, RECORD_BYTES), np.uint8)
        #: row j: the record received from rank j (filled by the transport)
        self.table = np.zeros((size, RECORD_BYTES), np.uint8)
        self._out_mv, self._own_row = memoryview(self.out.reshape(-1)), memoryview(self.table[rank])
        self._own_out = memoryview(self.out[rank])
        self._table_mv = memoryview(self.table.reshape(-1))
        self._names, self._dtypes, self._redops = names, dtypes, redops
        self._peers = [j for j in range(size) if j != rank]
        self._macs = macs
        #: peer -> the pair's HMAC with the label and the two ranks in (copied per record)
        self._labelled = {} if macs is None else {j: macs.labelled(_LABEL, j) for j in self._peers}
        self._expect = b""

    def _tags(self, peer: int, desc: bytes) -> tuple[bytes, bytes]:
        """``(sent, received)`` tags of a record of fields ``desc`` with ``peer``."""
        if self._macs is None:
            return _NO_TAG, _NO_TAG
        h = self._labelled[peer].copy()
        h.update(desc)
        return self._macs.split(h.finalize(), peer)

    def record(self, seq: int, code: int, dtype: int, redop: int, alg: int, root: int, count: int) -> None:
        """Write this rank's records for op ``seq`` into :attr:`out` and the table an agreeing
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
        own = desc + _NO_TAG
        if self.size == 2:  # (one op's hot path on two ranks: the loop below, unrolled)
            sent, got = self._tags(1 - self.rank, desc)
            sent, got = desc + sent, desc + got
            self._out_mv[:] = sent + own if self.rank else own + sent
            self._expect = got + own if self.rank else own + got
            return
        outs, wants = [], []
        for j in range(self.size):
            if j == self.rank:
                outs.append(own)
                wants.append(own)
            else:
                sent, got = self._tags(j, desc)
                outs.append(desc + sent)
                wants.append(desc + got)
        self._out_mv[:] = b"".join(outs)
        self._expect = b"".join(wants)

    def pair_mac(self, peer: int):
        """For a compiled record (:mod:`seccomm.pairswap`): ``(labelled, lower)``: the pair's HMAC
        object with the label and ranks in (copied per record; ``None`` under suite none: the tag
        is zero) and whether this rank is the lower of the pair (its records carry the digest's
        first half, the peer's the second), so that the tags are :meth:`record_tail`'s."""
        return self._labelled.get(peer), self.rank < peer

    @property
    def expect(self) -> bytes:
        """The table an agreeing world sends back for this rank's current record (``size`` rows
        of :data:`RECORD_BYTES`), as :meth:`check` compares it."""
        return self._expect

    def refusal(self, seq: int, error: str) -> None:
        """Write a refusal record for op ``seq`` into :attr:`out`: this rank refused its own
        arguments with ``error`` (``"ValueError"`` or ``"TypeError"``, else ``ValueError``)."""
        kind = next((k for k, name in REFUSAL_NAMES.items() if name == error), 1)
        self.record(seq, REFUSED, kind, *_REFUSAL_REST)

    def check(self, op_label: str) -> None:
        """After the exchange: return when every record equals this rank's; else raise
        ``AuthenticationError`` for a record whose tag fails (naming its rank),
        ``PeerAbortError`` for a rank that refused its arguments, ``ArgumentMismatchError``
        naming each argument the ranks disagree on and which rank passed what."""
        self._own_row[:] = self._own_out
        if self._table_mv == self._expect:
            return
        rows = {}
        for j in range(self.size):
            raw = self.table[j].tobytes()
            desc, tag = raw[:DESC_BYTES], raw[DESC_BYTES:]
            if j != self.rank and not _hmac.compare_digest(self._tags(j, desc)[1], tag):
                raise AuthenticationError(
                    peer=j,
                    op=op_label.split(" #")[0],
                    seq=_DESC.unpack(self.out[self.rank, :DESC_BYTES].tobytes())[0],
                    suite="HMAC-SHA256",
                    message="an argument record",
                    detail="its argument record for this op failed authentication: altered, "
                    "replayed, reflected or misdirected",
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
