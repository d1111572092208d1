"""The argument records of seccomm.agreement, in process: an agreeing table passes with one HMAC,
every differing argument is named with which ranks passed what, and a record that was altered,
reflected, moved to another rank's slot or replayed from another op does not pass as authentic.
The same on real ranks, every collective and argument: tests/argument_cases.py ``agreement``."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from seccomm import ArgumentMismatchError, AuthenticationError, PeerAbortError
from seccomm.agreement import NO_ROOT, RECORD_BYTES, REFUSED, Agreement, _by_value, _ranges
from seccomm.comm import _names
from seccomm.control import PairMacs
from seccomm.dtypes import CODES
from seccomm.framing import REDOPS

KEY = bytes(range(7, 39))
DTYPES = {c: n for n, c in CODES.items()}
OPS = {c: n for n, c in REDOPS.items()}
#: (seq, collective code, dtype code, reduction op code, algorithm index, root, count)
CALL = (5, 1, CODES["float32"], REDOPS["sum"], 1, -1, 1000)


def pair_key(key, a, b):
    """A stand-in for KeySchedule.pair_key: one key per pair of ranks."""
    return hashlib.sha256(key + bytes([a, b])).digest()


def world(p, key=KEY):
    def macs(r):
        return None if key is None else PairMacs(r, p, lambda a, b: pair_key(key, a, b))

    return [Agreement(r, p, macs(r), _names, DTYPES, OPS) for r in range(p)]


def exchange(agreements, calls):
    """Each rank writes its records for its call; every rank's table gets the record each other
    rank wrote for it."""
    for a, call in zip(agreements, calls):
        a.record(*call)
    for a in agreements:
        for j, b in enumerate(agreements):
            a.table[j] = b.out[a.rank]


def with_(call=CALL, **kw):
    names = ("seq", "code", "dtype", "redop", "alg", "root", "count")
    return tuple(kw.get(n, v) for n, v in zip(names, call))


@pytest.mark.parametrize("key", [KEY, None])
@pytest.mark.parametrize("p", [1, 2, 3, 5])
def test_an_agreeing_table_passes(p, key):
    ws = world(p, key)
    exchange(ws, [CALL] * p)
    for a in ws:
        a.check("allreduce #5")
    assert ws[0].out.shape == (p, RECORD_BYTES)
    if p > 1:
        assert (key is None) == (not ws[0].out[1, 24:].any())  # suite none: no tag
    assert not ws[0].out[0, 24:].any()  # (its own row: no tag, never sent)


@pytest.mark.parametrize(
    "field, change, shown",
    [
        ("dtype", dict(dtype=CODES["int32"]), "dtype: ranks 0-1 passed float32, rank 2 passed int32"),
        ("count", dict(count=1001), "count: ranks 0-1 passed 1000, rank 2 passed 1001"),
        ("op", dict(redop=REDOPS["max"]), "op: ranks 0-1 passed sum, rank 2 passed max"),
        ("algorithm", dict(alg=0), "algorithm: ranks 0-1 passed recursive_doubling, rank 2 passed ring"),
        ("collective", dict(code=4), "collective: ranks 0-1 passed allreduce, rank 2 passed bcast"),
        ("op sequence number", dict(seq=6), "op sequence number: ranks 0-1 passed #5, rank 2 passed #6"),
    ],
)
def test_each_differing_argument_is_named_on_every_rank(field, change, shown):
    ws = world(3)
    exchange(ws, [CALL, CALL, with_(**change)])
    msgs = set()
    for a in ws:
        with pytest.raises(ArgumentMismatchError) as ei:
            a.check("allreduce #5")
        assert list(ei.value.arguments) == [field] and ei.value.peer is None
        text = str(ei.value)
        assert f"the ranks disagree on {field} ({shown})" in text and "every rank must" in text
        msgs.add(str(ei.value))
    assert len(msgs) == 1


def test_a_root_that_differs_and_several_arguments_at_once():
    bcast = (3, 4, CODES["float32"], REDOPS["none"], 0, 0, 16)
    ws = world(2)
    exchange(ws, [bcast, with_(bcast, root=1, count=17)])
    with pytest.raises(ArgumentMismatchError) as ei:
        ws[0].check("bcast #3")
    assert ei.value.arguments == {"count": {0: 16, 1: 17}, "root": {0: 0, 1: 1}}
    assert str(ei.value).startswith(
        "bcast #3: the ranks disagree on count, root (count: rank 0 passed 16, rank 1 passed 17; "
        "root: rank 0 passed 0, rank 1 passed 1); "
    )
    exchange(ws, [with_(CALL, root=-1), CALL])
    ws[0].check("allreduce #5")
    assert ws[0].table[1, 12:16].tobytes() == NO_ROOT.to_bytes(4, "big")


def test_a_refusal_record_stops_the_others_naming_the_rank_and_the_exception():
    ws = world(3)
    exchange(ws, [CALL, (5, REFUSED, 2, 0, 0, -1, 0), CALL])
    ws[1].refusal(5, "TypeError")
    assert bytes(ws[1].out[0]) == bytes(ws[0].table[1])  # refusal() writes that very record
    for a in (ws[0], ws[2]):
        with pytest.raises(PeerAbortError) as ei:
            a.check("allreduce #5")
        assert ei.value.peer == 1 and ei.value.blamed == 1 and ei.value.op == "allreduce #5"
        assert "rank 1 refused its arguments to allreduce #5: TypeError" in str(ei.value)
    exchange(ws, [CALL, (5, REFUSED, 9, 0, 0, -1, 0), CALL])
    with pytest.raises(PeerAbortError, match="refused its arguments to allreduce #5: an error"):
        ws[0].check("allreduce #5")


def _tampered(table_edit):
    ws = world(3)
    exchange(ws, [CALL, CALL, with_(count=7)])
    a = ws[0]
    table_edit(a, ws)
    with pytest.raises(AuthenticationError) as ei:
        a.check("allreduce #5")
    return ei.value


def test_a_reflected_record_fails_authentication():
    """Rank 0's own record (for rank 1) sent back to it as rank 1's: the pair's digest halves
    make it fail."""
    err = _tampered(lambda a, ws: a.table.__setitem__(1, a.out[1]))
    assert err.peer == 1 and str(err) == (
        "HMAC-SHA256 authentication failed on an argument record from rank 1 (allreduce #5): its "
        "argument record for this op failed authentication: altered, replayed, reflected or misdirected"
    )


def test_a_record_moved_to_another_ranks_slot_fails_authentication():
    """Rank 1's (agreeing) record in rank 2's slot, hiding rank 2's disagreement."""
    err = _tampered(lambda a, ws: a.table.__setitem__(2, ws[1].out[0]))
    assert err.peer == 2 and err.seq == 5 and err.op == "allreduce"


def test_a_record_for_another_receiver_fails_authentication():
    """Rank 2's record for rank 1 delivered to rank 0 as rank 2's record for it."""
    err = _tampered(lambda a, ws: a.table.__setitem__(2, ws[2].out[1]))
    assert err.peer == 2


@pytest.mark.parametrize("p", [2, 3, 4])
def test_no_relation_between_observed_tags_forges_a_record(p):
    """An on-path attacker without keys, who saw every record of an agreeing op, tries to make
    a rank that disagrees (rank 1, ``root=1``; the others ``root=0``) accept its own arguments as
    everyone's: its own record reflected back, fixed up by the XOR of any two tags seen.  With
    a fixed pad per rank one such relation is the pads' difference, and the disagreement went
    unseen; here every try fails authentication on rank 1, and ranks 0 and 2 (who got rank 1's
    genuine record) raise the disagreement."""
    bcast = (7, 4, CODES["float32"], REDOPS["none"], 0, 0, 16)
    ws = world(p)
    exchange(ws, [with_(bcast, seq=6)] * p)  # an agreeing op, all of it seen on the wire
    seen = [bytes(ws[i].out[j, 24:]) for i in range(p) for j in range(p) if i != j]
    calls = [bcast] * p
    calls[1] = with_(bcast, root=1)
    exchange(ws, calls)
    victim = ws[1]
    own = [bytes(victim.out[j]) for j in range(p) if j != 1]
    for forged_from in [j for j in range(p) if j != 1]:
        tries = 0
        for rec in own:
            for x in seen:
                for y in seen:
                    tag = bytes(a ^ b ^ c for a, b, c in zip(rec[24:], x, y))
                    victim.table[forged_from] = np.frombuffer(rec[:24] + tag, np.uint8)
                    with pytest.raises(AuthenticationError) as ei:
                        victim.check("bcast #7")
                    assert ei.value.peer == forged_from
                    tries += 1
        assert tries == len(own) * len(seen) ** 2
        victim.table[forged_from] = ws[forged_from].out[1]
    for a in ws:
        if a.rank != 1:
            with pytest.raises(ArgumentMismatchError, match="the ranks disagree on root .*rank 1 passed 1"):
                a.check("bcast #7")


def test_a_record_of_another_op_replayed_is_not_taken_for_this_ops():
    """Rank 2's genuine record of op 4, replayed into op 5: authentic, so it shows as a
    disagreement on the op number, never as agreement."""
    ws = world(3)
    exchange(ws, [with_(seq=4)] * 3)
    old = ws[2].out[0].copy()
    exchange(ws, [CALL] * 3)
    ws[0].table[2] = old
    with pytest.raises(ArgumentMismatchError) as ei:
        ws[0].check("allreduce #5")
    assert "op sequence number: ranks 0-1 passed #5, rank 2 passed #4) (a rank skipped or repeated" in str(
        ei.value
    ) and "a record of another op was replayed" in str(ei.value)


@pytest.mark.parametrize("byte", range(RECORD_BYTES))
def test_any_flipped_bit_fails_authentication(byte):
    ws = world(2)
    exchange(ws, [CALL, CALL])
    ws[0].table[1, byte] ^= 0x10
    with pytest.raises(AuthenticationError) as ei:
        ws[0].check("allreduce #5")
    assert ei.value.peer == 1


def test_without_a_key_a_nonzero_tag_is_not_taken_either():
    ws = world(2, None)
    exchange(ws, [CALL, CALL])
    ws[0].table[1, 30] = 1
    with pytest.raises(AuthenticationError):
        ws[0].check("allreduce #5")


def test_rank_lists_are_short():
    assert _ranges([0, 1, 2, 5]) == "0-2, 5" and _ranges([3]) == "3" and _ranges([1, 3, 4]) == "1, 3-4"
    assert _by_value({0: "a", 1: "b", 2: "a"}) == "ranks 0, 2 passed a, rank 1 passed b"
    many = _by_value({r: r for r in range(11)})
    assert many.startswith("rank 0 passed 0, rank 1 passed 1") and many.endswith(
        "rank 7 passed 7, and 3 more values"
    )
    assert np.dtype(np.uint8) == world(1)[0].table.dtype


@pytest.mark.parametrize(
    "record",
    [(4, REFUSED, 1, 0, 0, -1, 0), (5, REFUSED, 1, 1, 0, -1, 0), (5, REFUSED, 1, 0, 1, -1, 0),
     (5, REFUSED, 1, 0, 0, 0, 0), (5, REFUSED, 1, 0, 0, -1, 1)],
)  # fmt: skip
def test_a_refusal_record_counts_in_its_own_op_and_form_only(record):
    """Of another op (replayed), or with any other field set: a disagreement, not a refusal."""
    ws = world(2)
    exchange(ws, [CALL, record])
    with pytest.raises(ArgumentMismatchError):
        ws[0].check("allreduce #5")


def test_refusal_names_its_exception():
    ws = world(2)
    for error, kind in (("ValueError", 1), ("TypeError", 2), ("KeyError", 1)):
        ws[1].refusal(5, error)
        assert ws[1].out[0, 9] == kind and ws[1].out[0, 8] == REFUSED


def test_unknown_codes_and_odd_fields_are_shown_as_they_came():
    """An authentic record of another seccomm (a dtype, op or algorithm code this one does not
    know) or a root on a collective that has none: shown raw, or as none, never misnamed."""
    ws = world(2)
    exchange(ws, [CALL, with_(dtype=99, redop=77, alg=2, root=0)])
    with pytest.raises(ArgumentMismatchError) as ei:
        ws[0].check("allreduce #5")
    assert ei.value.op == "allreduce #5"
    assert ei.value.arguments == {
        "dtype": {0: "float32", 1: 99},
        "op": {0: "sum", 1: 77},
        "root": {0: None, 1: 0},
        "algorithm": {0: "recursive_doubling", 1: 2},
    }


def test_at_most_eight_values_are_listed():
    eight, nine = {r: r for r in range(8)}, {r: r for r in range(9)}
    assert _by_value(eight).endswith("rank 7 passed 7")
    assert _by_value(nine).endswith("rank 7 passed 7, and 1 more values")


def test_the_record_is_the_documented_one():
    """Known answer, computed here from docs/design.md's formula with cryptography's HMAC:
    record = seq (u64) | collective | dtype | op | algorithm (u8 each) | root (u32) | count (u64)
    | tag, big-endian; for ranks a < b, d = HMAC-SHA256(k_ab, "seccomm/1 agree|" | u32 a | u32 b
    | record[:24]); a's record for b carries d[:16], b's for a d[16:]."""
    import struct

    from cryptography.hazmat.primitives import hashes, hmac

    def mac(a, b, msg):
        h = hmac.HMAC(pair_key(KEY, a, b), hashes.SHA256())
        h.update(b"seccomm/1 agree|" + struct.pack(">II", a, b) + msg)
        return h.finalize()

    desc = struct.pack(">QBBBBIQ", 5, 1, CODES["float32"], REDOPS["sum"], 1, 0xFFFFFFFF, 1000)
    ws = world(3)
    for a in ws:
        a.record(*CALL)
        for j in range(3):
            lo, hi = sorted((a.rank, j))
            d = mac(lo, hi, desc)
            want = bytes(16) if j == a.rank else d[:16] if a.rank < j else d[16:]
            assert bytes(a.out[j]) == desc + want, (a.rank, j)
