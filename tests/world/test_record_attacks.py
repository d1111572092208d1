"""An on-path attacker without keys against the argument agreement, in process (a world of
threads, tests/threadworld.py), through ``SecureComm`` as a user calls it.

The attacker sits on every rank's link: it sees every record a rank sends and receives, and may
rewrite what a rank receives.  From one agreeing op it learns, for each pair, the XOR of the tags
the two directions carried; in the next op, where rank 1 passes another ``root`` than the
others, it reflects each rank's own record back to it as every other rank's, fixed up by that
XOR.  A tag that is one HMAC XOR a fixed pad per rank gives exactly the pads' difference, and the
reflected records pass: the op returns on every rank with the ranks holding different data.  Each
rank must instead raise, in that op, naming a rank whose record failed."""

from __future__ import annotations

import numpy as np
import pytest

from seccomm import ArgumentMismatchError, AuthenticationError, SecCommError, SecureComm
from seccomm.transports import TransportWrapper
from threadworld import World

PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")


class Reflector(TransportWrapper):
    """Learns each pair's tag XOR in the first op; from the second on, every record this rank
    receives is replaced by the one it sent that peer, its tag XORed with what was learned
    (``mode="reflect"``), or by the record it received in the first op (``mode="replay"``), or
    rank ``j``'s by rank ``k``'s (``mode="swap"``)."""

    def __init__(self, inner, mode):
        super().__init__(inner)
        self.mode, self.ops, self.rel, self.first = mode, 0, {}, {}

    def agree_start(self, record, table, check, expect=None):
        self.ops += 1
        op = self.ops

        def sent(j):
            return record[j] if record.ndim == 2 else record

        def attacked():
            peers = [j for j in range(self.size) if j != self.rank]
            if op == 1:
                for j in peers:
                    self.rel[j] = table[j, 24:] ^ sent(j)[24:]
                    self.first[j] = table[j].copy()
            elif self.mode == "reflect":
                for j in peers:
                    table[j, :24] = sent(j)[:24]
                    table[j, 24:] = sent(j)[24:] ^ self.rel[j]
            elif self.mode == "replay":
                for j in peers:
                    table[j] = self.first[j]
            elif len(peers) > 1:  # swap two peers' records
                a, b = peers[:2]
                table[[a, b]] = table[[b, a]]
            check()

        return self.inner.agree_start(record, table, attacked, expect)


def _run(p, mode, attacked=range(100)):
    world = World(p)
    trs = world.transports(timeout=3)

    def body(r):
        wrap = (lambda t: Reflector(t, mode)) if r in attacked else None
        sc = SecureComm(trs[r], "aes-256-gcm", psk=PSK, timeout=2, crypto_threads=1, wrap_transport=wrap)
        x = np.full(64, 1.0 + r, np.float32)
        sc.bcast(x, root=0)  # agreeing: what the attacker learns from
        y = np.full(64, 10.0 + r, np.float32)
        sc.bcast(y, root=1 if r == 1 else 0)  # rank 1 disagrees on the root
        return y

    return world.run(body)


@pytest.mark.parametrize("p", [2, 3, 4])
@pytest.mark.parametrize("mode", ["reflect", "replay", "swap"])
def test_an_on_path_attacker_cannot_blind_the_agreement(p, mode):
    """Every rank raises in the op whose arguments differ: the rank whose incoming records the
    attacker rewrote names a rank whose record failed (authentication, or an authentic record
    of another op or rank), never one that did its part silently; the others, which got rank 1's
    genuine record, raise the disagreement; none returns."""
    if mode == "swap" and p < 3:
        pytest.skip("a swap needs two peers")
    res = _run(p, mode)
    assert all(isinstance(e, SecCommError) for e in res), res
    for r, e in enumerate(res):
        if isinstance(e, AuthenticationError):
            assert e.peer in range(p) and e.peer != r and "argument record" in str(e), (r, e)
        else:
            assert isinstance(e, (ArgumentMismatchError, SecCommError)), (r, e)
    assert any(isinstance(e, (AuthenticationError, ArgumentMismatchError)) for e in res)


@pytest.mark.parametrize("p", [2, 3])
def test_the_victim_alone_attacked_still_raises_and_the_others_name_the_root(p):
    """Only rank 1's incoming records rewritten: rank 1 raises AuthenticationError naming a rank
    whose record it was handed forged; ranks 0 (and 2) see rank 1's genuine record and raise
    ArgumentMismatchError naming the root."""
    res = _run(p, "reflect", attacked={1})
    assert isinstance(res[1], AuthenticationError) and res[1].peer == 0, res
    for r in range(p):
        if r != 1:
            assert isinstance(res[r], ArgumentMismatchError) and "root" in res[r].arguments, res
