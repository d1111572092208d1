"""A conservative estimate of how many bits of a job secret an offline guesser must cover.

An observer of the setup traffic sees MACs keyed from the job secret and can test guesses of it
offline at hash speed, so a secret must carry at least :data:`MIN_SECRET_BITS` bits that such a
guesser does not know.  Nothing can measure the entropy of one string; this module *bounds* it
from above by the structure it can see, and :func:`~seccomm.keys.load_secret` refuses a secret
whose bound is below 128 bits.  It rejects what people really write by mistake (a repeated
byte, a repeated word, a counter, a short password, text) and never a random 32-byte secret
(see "False rejections" below).

The estimate of a byte string ``s`` of ``n`` bytes is the minimum over four views of it:

- ``s`` itself, and its first differences ``s[i+1] - s[i]``, second differences and XOR
  differences (mod 256): a counter, a ramp or a Gray code is constant in one of them; each
  difference view first costs ``b`` bits for every leading byte it drops;
- in each view of ``m`` symbols, the bits are ``P * min(b, log2 D)``: ``D`` the number of
  distinct symbols in the view (``m`` symbols from an alphabet of ``D`` carry at most
  ``m log2 D`` bits), ``P`` the shortest period of the view when the view repeats itself at
  least twice (``P <= m / 2``), else ``m``;
- ``b``, the bits a character of ``s`` may carry at most, from the smallest class that holds all
  of ``s``: hex digits 4, the base64 alphabet 6, other printable ASCII text 2 (chosen text, such
  as a passphrase: English carries about 1 to 1.5 bits per character, Shannon 1951; a
  passphrase needs 64 characters), any other bytes 8.

False rejections: for ``n = 32`` uniformly random bytes (``os.urandom(32)``, or the 64 hex
digits of ``openssl rand -hex 32`` decoded), the estimate falls below 128 bits only when (a) all
32 bytes are printable ASCII, probability ``(98/256)**32 < 2**-44.3``, or (b) a view has too
few distinct symbols (16 or fewer of 32) or a period, which :func:`false_rejection_bound`
computes exactly from the distribution of symbol counts (each difference view of uniform bytes
is again uniform and independent): below ``2**-54``.  Together below ``2**-44``.
:func:`~seccomm.keys.new_secret_file` draws again in that case, so the local launcher never fails.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

MIN_SECRET_BITS = 128

_HEX = frozenset(b"0123456789abcdefABCDEF")
_BASE64 = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_=")
_TEXT = frozenset(range(0x20, 0x7F)) | {0x09, 0x0A, 0x0D}
#: (characters, bits per character at most, what the estimate calls them), smallest class first
CLASSES = ((_HEX, 4.0, "hex digits"), (_BASE64, 6.0, "base64 text"), (_TEXT, 2.0, "printable text"))


@dataclass(frozen=True)
class Estimate:
    """``bits``: the estimate (an upper bound of what a guesser must cover); ``kind``: the
    character class (``"binary"``, ``"hex digits"``, ``"base64 text"``, ``"printable text"``);
    ``view``: which view gave the minimum (``"bytes"``, ``"differences"``, ...)."""

    bits: float
    kind: str
    view: str


def char_class(data: bytes) -> tuple[float, str]:
    """(bits per character at most, class name) of the smallest class holding every byte."""
    present = set(data)
    for chars, bits, name in CLASSES:
        if present <= chars:
            return bits, name
    return 8.0, "binary"


def period(seq: bytes) -> int:
    """The shortest ``p <= len(seq) // 2`` with ``seq[i] == seq[i + p]`` for every ``i``, else
    ``len(seq)`` (a view counts as periodic only when it repeats itself at least twice)."""
    n = len(seq)
    for p in range(1, n // 2 + 1):
        if seq[p:] == seq[:-p]:
            return p
    return n


def view_bits(seq: bytes, per_char: float) -> float:
    """``P * min(per_char, log2 D)`` for one view (see the module docstring)."""
    distinct = len(set(seq))
    return period(seq) * min(per_char, math.log2(distinct)) if distinct else 0.0


def _views(data: bytes):
    """(name, leading bytes dropped, view) for the four views of ``data``."""
    d1 = bytes((b - a) & 0xFF for a, b in zip(data, data[1:]))
    yield "bytes", 0, data
    yield "differences", 1, d1
    yield "second differences", 2, bytes((b - a) & 0xFF for a, b in zip(d1, d1[1:]))
    yield "XOR differences", 1, bytes(a ^ b for a, b in zip(data, data[1:]))


def estimate_bits(data: bytes) -> Estimate:
    """The conservative estimate of ``data`` (bytes of the secret itself, hex already decoded)."""
    per_char, kind = char_class(data)
    best = None
    for name, dropped, seq in _views(bytes(data)):
        bits = dropped * per_char + view_bits(seq, per_char)
        if best is None or bits < best.bits:
            best = Estimate(bits, kind, name)
    return best


def false_rejection_bound(n: int = 32, need: float = MIN_SECRET_BITS) -> float:
    """An upper bound of the probability that ``n`` uniformly random bytes estimate below
    ``need`` bits (union over the four views and the text classes, see the module docstring).

    For each view of ``m`` uniform symbols it sums, over every multiset of symbol counts (the
    partitions of ``m``), the exact probability of that pattern when ``m * log2 D`` of it is
    too low (``D``: the number of parts); periods of length ``p <= m / 2`` add
    ``256 ** -(m - p)`` each.
    """
    text = (len(_TEXT) / 256) ** n
    total = text
    for dropped, m in ((0, n), (1, n - 1), (2, n - 2), (1, n - 1)):
        total += _low_entropy_probability(m, need - 8 * dropped)
        total += sum(256.0 ** -(m - p) for p in range(1, m // 2 + 1))
    return total


def _low_entropy_probability(m: int, need: float) -> float:
    """P(m * log2 D < need) for ``m`` uniform bytes, D the number of distinct values."""
    log_total = m * math.log(256)
    prob = 0.0
    for parts in _partitions(m, m):
        if m * math.log2(len(parts)) >= need:
            continue
        mult = Counter(parts)
        d = len(parts)
        log_ways = (
            math.lgamma(257) - math.lgamma(257 - d) - sum(math.lgamma(k + 1) for k in mult.values())
        )  # which byte values take the counts
        log_ways += math.lgamma(m + 1) - sum(math.lgamma(c + 1) for c in parts)  # their positions
        prob += math.exp(log_ways - log_total)
    return prob


def _partitions(m: int, largest: int):
    """Every partition of ``m`` into parts of at most ``largest``, parts in decreasing order."""
    if m == 0:
        yield ()
        return
    for first in range(min(m, largest), 0, -1):
        for rest in _partitions(m - first, first):
            yield (first, *rest)
