"""A conservative estimate of how many bits of a job secret an offline guesser must cover.

An observer of the setup traffic sees MACs keyed from the job secret and can test guesses of it
offline at hash speed, so a secret must carry at least :data:`MIN_SECRET_BITS` bits that such a
guesser does not know.  Nothing can measure the entropy of one string; this module *bounds* it
from above by the structure it can see, and :func:`~seccomm.keys.load_secret` refuses a secret
whose bound is below 128 bits.  It rejects what people really write by mistake (a repeated
byte, a repeated word, a counter, a short password, text, text wrapped in a few other bytes)
and almost never a random 32-byte secret (see "False rejections" below).

The estimate of a byte string ``s`` of ``n`` bytes is the minimum over these views of it:

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
  passphrase needs 64 characters), any other bytes 8;
- the text inside ``s``, judged by its characters whatever bytes surround it: ``s`` read as
  UTF-8 (a byte that is not part of a valid character is a character of its own, not text), and
  as UTF-16 and UTF-32 in both byte orders at every alignment (a code unit that is no character
  is one of its own); in each reading, every run of at least :data:`TEXT_RUN` text characters
  (printable, tab, newline) counts an ASCII character at its class's bits (2 for text), every
  other byte 8 bits (so an accented letter continues the text without lowering the count); the
  fewest bits of any reading.  A passphrase padded with a few control bytes, with an accented
  letter in it, or saved as "Unicode" with a byte-order mark, is still a passphrase;
- the whole estimate of what ``s`` encodes when it is all hex digits or base64 text that
  decodes (:func:`decoded`) to :data:`DECODED_MIN` bytes or more, or to text only, and of the
  text of a UTF-16 or UTF-32 reading whose characters are nine in ten ASCII text (as UTF-8), up
  to three levels deep: a passphrase or a repeated word run through ``base64`` or saved as
  UTF-16 is still one, and ``openssl rand -base64 24`` (24 random bytes, which hold a run of 12
  text characters about once in 7,700 draws) is judged as base64 text.

What it does not see: text behind any other transform (each byte with its high bit set, a byte
inserted every 11 characters or fewer so that no run reaches :data:`TEXT_RUN`, a passphrase
encrypted or hashed with a known key, a word list's indices), and anything a person chose that
has no structure a program can see.

False rejections: for ``n = 32`` uniformly random bytes (``os.urandom(32)``, or the 64 hex
digits of ``openssl rand -hex 32`` decoded), the estimate falls below 128 bits only when (a) at
least 22 of the 32 bytes lie in runs of text of :data:`TEXT_RUN` characters or more (the text
view; all 32 printable is one such case, ``(98/256)**32 < 2**-44.3``): :func:`text_rejection_bound`
computes it with a chain over the characters a UTF-8 reader sees (every well-formed multi-byte
character counted as text, so an upper bound; within 10 % of a Monte Carlo count at sizes where
one can be made): ``2**-26.07``; or (b) a view has too few
distinct symbols (16 or fewer of 32) or a period, which :func:`false_rejection_bound` computes
exactly from the distribution of symbol counts (each difference view of uniform bytes is again
uniform and independent): below ``2**-54``; or (c) a UTF-16 or UTF-32 reading holds at least
10 ASCII text characters (:func:`unit_rejection_bound`): below ``2**-79``; or (d) every byte is
a base64 character (the decoded view): ``(67/256)**32 < 2**-61``; or (e) a UTF-16 or UTF-32
reading of at least 8 characters is nine in ten ASCII text (the transcoded view): far below
``2**-100`` (:func:`unit_rejection_bound` counts it).  Together below ``2**-26``
(one draw in 67 million): the price of refusing a passphrase wrapped in a few other bytes.
:func:`~seccomm.keys.new_secret_file` draws again in that case, so the local launcher never fails.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections import Counter
from dataclasses import dataclass

MIN_SECRET_BITS = 128
#: the decoded view judges what a hex or base64 secret encodes when it is this long (a random
#: secret's length: :data:`seccomm.keys.MIN_SECRET_BYTES`) or all text (a short passphrase)
DECODED_MIN = 32
#: characters a run of text needs for the text view to count it as text (2 bits a character)
TEXT_RUN = 12
_TEXT_BITS, _BYTE_BITS = 2.0, 8.0

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


def _is_text(ch: str) -> bool:
    return ch.isprintable() or ch in "\t\n\r"


def _run_bits(run: list) -> float:
    """Bits of a run of text characters (``(character, bytes it took)`` pairs): when it is
    :data:`TEXT_RUN` characters or longer, its ASCII characters at their class's bits (hex 4,
    base64 6, other text 2) and the bytes of the others (an accented letter: part of the text,
    no discount) at 8; a shorter run, 8 a byte."""
    nbytes = sum(k for _, k in run)
    if len(run) < TEXT_RUN:
        return _BYTE_BITS * nbytes
    ascii_ = bytes(ord(ch) for ch, _ in run if ord(ch) < 0x80)
    k_ascii = sum(k for ch, k in run if ord(ch) < 0x80)
    return len(ascii_) * char_class(ascii_)[0] + _BYTE_BITS * (nbytes - k_ascii)


def _utf8(data: bytes):
    """``(character, bytes it took)`` as a UTF-8 reader sees ``data`` (``surrogateescape``: a
    byte outside a valid character stands alone as a character that is no text)."""
    for ch in data.decode("utf-8", "surrogateescape"):
        yield ch, len(ch.encode("utf-8", "surrogateescape"))


def _units(data: bytes, size: int, order: str, skip: int):
    """``(character, bytes it took)`` of ``data`` read as UTF-16 (``size`` 2) or UTF-32 (4),
    byte order ``order``, after ``skip`` leading bytes (each a character of its own, no text):
    a code unit that is no character (a lone surrogate, past U+10FFFF) and a cut last unit are
    characters of their own too ("\\udc80", no text)."""
    for _ in range(skip):
        yield "\udc80", 1
    i, n = skip, len(data)
    while i + size <= n:
        u = int.from_bytes(data[i : i + size], order)
        if size == 2 and 0xD800 <= u < 0xDC00 and i + 4 <= n:  # a surrogate pair: one character
            lo = int.from_bytes(data[i + 2 : i + 4], order)
            if 0xDC00 <= lo < 0xE000:
                yield chr(0x10000 + ((u - 0xD800) << 10) + lo - 0xDC00), 4
                i += 4
                continue
        yield (chr(u) if u < 0x110000 and not 0xD800 <= u < 0xE000 else "\udc80"), size
        i += size
    if i < n:
        yield "\udc80", n - i


def _readings(data: bytes):
    """(name, characters) of every way the text view reads ``data``: UTF-8, and UTF-16 and
    UTF-32 in both byte orders at every alignment (a passphrase saved as "Unicode" by an editor,
    with or without its byte-order mark, which counts as one more character)."""
    yield "UTF-8", _utf8(data)
    for size in (2, 4):
        for order in ("little", "big"):
            for skip in range(size):
                yield f"UTF-{8 * size}-{order[0].upper()}E", _units(data, size, order, skip)


def _reading_bits(chars) -> float:
    bits, run = 0.0, []
    for ch, k in chars:
        if _is_text(ch):
            run.append((ch, k))
            continue
        bits += _run_bits(run) + _BYTE_BITS * k
        run = []
    return bits + _run_bits(run)


def text_bits(data: bytes) -> float:
    """The text view (see the module docstring): the fewest bits over the readings of ``data``
    (UTF-8; UTF-16 and UTF-32, both byte orders, every alignment), each counting runs of at
    least :data:`TEXT_RUN` text characters at their class's bits a character, every other byte
    8."""
    data = bytes(data)
    return min(_reading_bits(chars) for _, chars in _readings(data))


def decoded(data: bytes) -> bytes | None:
    """``data`` decoded when it is all hex digits (even length) or base64 text that decodes
    (standard or URL-safe alphabet, padding optional), else ``None``: the text view also judges
    what such an encoding hides (a passphrase run through ``base64``)."""
    data = bytes(data)
    present = set(data)
    if present <= _HEX and len(data) % 2 == 0:
        return bytes.fromhex(data.decode())
    if not present <= _BASE64:
        return None
    body = data.rstrip(b"=")
    if len(body) % 4 == 1:
        return None
    alt = b"-_" if present & set(b"-_") else None
    try:
        return base64.b64decode(body + b"=" * (-len(body) % 4), altchars=alt, validate=True)
    except (binascii.Error, ValueError):
        return None


def estimate_bits(data: bytes, _depth: int = 0) -> Estimate:
    """The conservative estimate of ``data`` (bytes of the secret itself, hex already decoded)."""
    per_char, kind = char_class(data)
    best = None
    for name, dropped, seq in _views(bytes(data)):
        bits = dropped * per_char + view_bits(seq, per_char)
        if best is None or bits < best.bits:
            best = Estimate(bits, kind, name)
    text = text_bits(data)
    if text < best.bits:
        best = Estimate(text, "text among other bytes", "characters")
    if _depth >= _MAX_DEPTH:
        return best
    inner = decoded(data)
    if inner is not None and (len(inner) >= DECODED_MIN or all(_is_text(c) for c, _ in _utf8(inner))):
        got = estimate_bits(inner, _depth + 1)  # (every view of what it encodes: repeats too)
        if got.bits < best.bits:
            best = Estimate(got.bits, "encoded " + got.kind, "decoded " + got.view)
    for name, chars in _readings(bytes(data)):
        wide = _wide_text(name, list(chars))
        if wide is not None:
            got = estimate_bits(wide, _depth + 1)  # (every view of the text: repeats too)
            if got.bits < best.bits:
                best = Estimate(got.bits, f"{name} {got.kind}", got.view)
    return best


#: how deep the decoded and transcoded views look (base64 of base64 of UTF-16 text: 3)
_MAX_DEPTH = 3


def _wide_text(name: str, chars: list) -> bytes | None:
    """A UTF-16 or UTF-32 reading whose characters are ASCII text, all but one in ten (a
    byte-order mark, a byte before it), as UTF-8 bytes: the views then judge the text itself
    (its repeats, its period) as they judge an ASCII secret; else None."""
    if name == "UTF-8" or not chars:
        return None
    text = [c for c, _ in chars if ord(c) < 0x80 and _is_text(c)]
    return "".join(text).encode() if len(text) * 10 >= 9 * len(chars) else None


def false_rejection_bound(n: int = 32, need: float = MIN_SECRET_BITS) -> float:
    """An upper bound of the probability that ``n`` uniformly random bytes estimate below
    ``need`` bits (union over the six views and the text view's readings, see the module
    docstring).

    For each view of ``m`` uniform symbols it sums, over every multiset of symbol counts (the
    partitions of ``m``), the exact probability of that pattern when ``m * log2 D`` of it is
    too low (``D``: the number of parts); periods of length ``p <= m / 2`` add
    ``256 ** -(m - p)`` each.
    """
    total = text_rejection_bound(n, need)  # (all printable is one of its cases)
    total += unit_rejection_bound(n, need)
    total += (len(_BASE64) / 256) ** n  # (the decoded view: every byte a base64 character)
    total += _transcoded_bound(n)
    for dropped, m in ((0, n), (1, n - 1), (2, n - 2), (1, n - 1)):
        total += _low_entropy_probability(m, need - 8 * dropped)
        total += sum(256.0 ** -(m - p) for p in range(1, m // 2 + 1))
    return total


#: byte classes at the start of a character as a UTF-8 reader sees it, (count of byte values,
#: what follows): ASCII text; other ASCII (controls); a continuation or a byte that never starts
#: a character; leads of 2, 3 and 4-byte characters
_STARTS = ((98, "text"), (30, "other"), (64, "cont"), (13, "other"), (30, 2), (16, 3), (5, 4))


def text_rejection_bound(n: int = 32, need: float = MIN_SECRET_BITS) -> float:
    """The probability that ``n`` uniformly random bytes give the text view (:func:`text_bits`)
    fewer than ``need`` bits, upper bound: a Markov chain over the characters a UTF-8 reader
    (maximal subparts, as Python's decoder) finds, every well-formed multi-byte character
    counted as text, every ASCII character of a long run at 2 bits.  A lead byte whose
    continuation fails leaves its bytes as other bytes and the reader restarts at the byte that
    failed, which is then known not to be a continuation (192 values); a character cut by the end
    of the data leaves its bytes as other bytes."""
    cont = 64 / 256
    # at[pos]: (next byte known not a continuation, characters of the open run (TEXT_RUN: a long
    # one, counted as it goes), its bits if it stays short, its bits if it grows long, bits so
    # far) -> probability
    at: list[dict] = [{} for _ in range(n + 1)]
    at[0][False, 0, 0.0, 0.0, 0.0] = 1.0
    for pos in range(n):
        left = n - pos
        for (nc, *run), pr in at[pos].items():
            total = 192 if nc else 256
            for count, what in _STARTS:
                if nc and what == "cont":
                    continue
                p0 = pr * count / total
                if what == "text":
                    _add(at, pos + 1, _text(*run, 1), p0, need)
                elif not isinstance(what, int):
                    _add(at, pos + 1, _other(*run, 1), p0, need)
                elif what > left:  # cut by the end: every byte left is another byte
                    _add(at, n, _other(*run, left), p0, need)
                else:
                    _add(at, pos + what, _text(*run, what), p0 * cont ** (what - 1), need)
                    for j in range(1, what):  # its j-th continuation fails: j other bytes
                        failed = _other(*run, j)
                        _add(at, pos + j, (True, *failed[1:]), p0 * cont ** (j - 1) * (1 - cont), need)
    return sum(pr for (_, *run), pr in at[n].items() if _closed(*run) < need)


def unit_rejection_bound(n: int = 32, need: float = MIN_SECRET_BITS) -> float:
    """An upper bound of the probability that ``n`` uniformly random bytes give one of the
    UTF-16 or UTF-32 readings of the text view fewer than ``need`` bits (union over the
    readings).  Only an ASCII text character in a long run counts fewer bits than its bytes
    (2 of ``8 * size``), and a code unit is one with probability ``98 / 256**size``; a reading
    of ``m`` units needs ``k`` of them for ``8 n - (8 size - 2) k < need``:
    ``P <= C(m, k) (98 / 256**size)**k`` when ``m >= TEXT_RUN``, else 0."""
    total = 0.0
    for size in (2, 4):
        k = math.floor((8 * n - need) / (8 * size - 2)) + 1
        for skip in range(size):
            m = (n - skip) // size
            if m >= TEXT_RUN and k <= m:
                total += 2 * math.comb(m, max(k, 0)) * (98 / 256**size) ** max(k, 0)  # (two byte orders)
    return total


def _transcoded_bound(n: int) -> float:
    """P(some UTF-16 or UTF-32 reading of ``n`` uniform bytes is nine in ten ASCII text), union
    over readings: at least ``ceil(0.9 m)`` of its ``m`` units are, each with ``98 / 256**size``."""
    total = 0.0
    for size in (2, 4):
        for skip in range(size):
            m = (n + size - 1 - skip) // size + (1 if skip else 0)  # (a cut unit and the skipped bytes count)
            k = math.ceil(0.9 * m)
            if m:
                total += 2 * math.comb(m, k) * (98 / 256**size) ** k
    return total


def _closed(run: int, short: float, long: float, bits: float) -> float:
    return bits + (long if run >= TEXT_RUN else short)


def _text(run: int, short: float, long: float, bits: float, k: int) -> tuple:
    """The chain's state after a text character of ``k`` bytes (ASCII: ``k = 1``)."""
    cost = _TEXT_BITS if k == 1 else _BYTE_BITS * k
    if run >= TEXT_RUN:
        return False, run, 0.0, 0.0, bits + cost
    if run + 1 == TEXT_RUN:
        return False, TEXT_RUN, 0.0, 0.0, bits + long + cost
    return False, run + 1, short + _BYTE_BITS * k, long + cost, bits


def _other(run: int, short: float, long: float, bits: float, k: int) -> tuple:
    """The chain's state after ``k`` other bytes (the open run closed)."""
    return False, 0, 0.0, 0.0, _closed(run, short, long, bits) + _BYTE_BITS * k


def _add(at: list, pos: int, state: tuple, pr: float, need: float) -> None:
    if state[4] < need:  # (bits only grow: a state at ``need`` is accepted whatever follows)
        at[pos][state] = at[pos].get(state, 0.0) + pr


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
