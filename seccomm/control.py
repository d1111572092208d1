"""MACs of the small control messages two ranks exchange (argument records, receipts, give-up
notices): each bound to its sender and its receiver by a key of the pair and a MAC input that
names both.

For ranks ``a < b`` the pair key is :meth:`KeySchedule.pair_key(a, b)
<seccomm.keys.KeySchedule.pair_key>` (psk: from the job secret; psk-dhe: with the X25519 secret
of the pair, so no third rank derives it).  A control message ``msg`` of kind ``label`` between
them is authenticated by::

    d = HMAC-SHA256(k_ab, "seccomm/1 " label "|" u32 a | u32 b | msg)
    tag(a -> b) = d[:16],  tag(b -> a) = d[16:]

One HMAC gives both directions' tags, two independent halves of a pseudorandom output: a tag
seen from ``a`` to ``b`` says nothing of the tag from ``b`` to ``a`` or of any other pair's, so
a message can be neither reflected to its sender, nor moved to another receiver, nor presented
in another rank's name, by anyone without the pair key.  (A single tag with a fixed pad per
rank would not do: two ranks' tags of the same message give away the pads' difference.)
"""

from __future__ import annotations

import struct

from cryptography.hazmat.primitives import hashes, hmac

TAG_BYTES = 16  #: bytes of one direction's tag (half of an HMAC-SHA256)


class PairMacs:
    """This rank's MACs with every other rank of ``size``.  ``pair_key(a, b)`` (``a < b``) gives
    the 32-byte key of a pair; every pair of this rank is keyed here, once (the function is not
    kept: dropping this object drops the keys)."""

    def __init__(self, rank: int, size: int, pair_key):
        self.rank, self.size = rank, size
        self._keyed = {
            j: hmac.HMAC(pair_key(min(rank, j), max(rank, j)), hashes.SHA256())
            for j in range(size)
            if j != rank
        }

    def __repr__(self):
        return f"<PairMacs rank={self.rank} size={self.size}>"

    def labelled(self, label: bytes, peer: int) -> hmac.HMAC:
        """A fresh HMAC object of the pair with ``peer``, the MAC input's head (``label`` and the
        two ranks, lower first) already in: :meth:`split` its ``finalize()`` after the message."""
        a, b = sorted((self.rank, peer))
        h = self._keyed[peer].copy()
        h.update(b"seccomm/1 " + label + b"|" + struct.pack(">II", a, b))
        return h

    def split(self, digest: bytes, peer: int) -> tuple[bytes, bytes]:
        """``(sent, received)``: the tags of a message this rank sends to ``peer`` and of one
        ``peer`` sends to this rank, from the pair's digest of it."""
        lo, hi = digest[:TAG_BYTES], digest[TAG_BYTES : 2 * TAG_BYTES]
        return (lo, hi) if self.rank < peer else (hi, lo)

    def tags(self, label: bytes, peer: int, msg: bytes) -> tuple[bytes, bytes]:
        """``(sent, received)`` tags of ``msg`` of kind ``label`` with ``peer`` (:meth:`split`)."""
        h = self.labelled(label, peer)
        h.update(msg)
        return self.split(h.finalize(), peer)
