"""Wire framing: chunk plans, the AAD header, the deterministic nonce, and wire workspaces.

A payload is cut into chunks of at most ``chunk_bytes`` (rounded down to whole elements); each
chunk is sealed on its own as ``ciphertext || tag``.  Both ends compute the nonce and AAD header
from what they already know (operation, step, chunk, ranks, dtype, counts), so nothing but the
frame itself is sent, and a frame that arrives anywhere else than where it was meant fails its tag.

Nonce (96 bits, big-endian; NIST SP 800-38D §8.2.1 deterministic construction)::

    epoch-local op index (32) | step (16) | chunk index (24) | sealing rank or origin (24)

Under a direction key (src->dst) only ``src`` seals; under the group key each origin seals only
its own data with its rank in the nonce; steps are unique per op and sender; the op index restarts
only with a fresh epoch key.  Hence no (key, nonce) pair ever repeats.
"""

from __future__ import annotations

import struct
import threading

import numpy as np

from .suites import NONCE_BYTES, TAG_BYTES

PROTOCOL_MAGIC = b"SCM"
PROTOCOL_VERSION = 1

#: AAD header layout (89 bytes, big-endian), bound into every tag.
AAD = struct.Struct(">3sBBBBBB16s16sIQIIIIIQQ")
AAD_BYTES = AAD.size
_NONCE = struct.Struct(">IHHI")

KEY_DIRECTION = 0  #: pairwise key, src -> dst
KEY_GROUP = 1  #: group key, sealed once by the origin and forwarded unchanged
GROUP_STEP = 0xFFFF  #: step value of group-key frames (direction steps stay below it)
ANY_RANK = 0xFFFFFFFF  #: AAD destination of group-key frames (bound to the origin instead)

REDOPS = {"none": 0, "sum": 1, "avg": 2, "max": 3, "min": 4, "prod": 5}

MAX_RANKS = 1 << 16  # steps of a ring allreduce must fit the 16-bit step field
MAX_CHUNKS_PER_HOP = 1 << 24  # chunk index field
MAX_OPS_PER_EPOCH = (1 << 32) - 1
SLOT_ALIGN = 64
#: a slot's body starts this many bytes into the slot: a multiple of SLOT_ALIGN, so a body is as
#: aligned as its buffer (Workspace.get aligns it).  A ``none`` or GMAC frame is reduced where it
#: arrived: with its body 101 bytes into a slot, ``none`` allreduce took 1.08-1.18x its aligned
#: time at 64 KiB-1 MiB on two ranks (measured with benchmarks/lean_path.py --against)
BODY_AT = -(-(NONCE_BYTES + AAD_BYTES) // SLOT_ALIGN) * SLOT_ALIGN
_LEAD = BODY_AT - NONCE_BYTES - AAD_BYTES  # unused bytes before the nonce


#: bytes a slot keeps after its tag for the argument record (:data:`seccomm.agreement.TRAILER_BYTES`)
RECORD_ROOM = 32


class Slot:
    """Views into one chunk's slot of a wire buffer, laid out as::

        | (unused) | nonce (12 B) | AAD header (hdr B) | body (nbody B) | tag (16 B) | room (32 B) |

    ``mv``: the slot's memory from the nonce on; ``hdr``: the header's size (:data:`AAD_BYTES`);
    ``nbody``: the body's size in bytes.  :meth:`Workspace.slots` places the body
    :data:`BODY_AT` bytes into the slot, as aligned as its buffer.  The room after the tag
    (:data:`RECORD_ROOM`) carries the argument record of an op's first message on two ranks
    (:mod:`seccomm.agreement`).  A suite's key seals and opens in it
    (:class:`seccomm.suites.SuiteKey`)."""

    __slots__ = ("nonce", "header", "body", "tag", "frame", "header_body", "wire", "trailer")

    def __init__(self, mv: memoryview, hdr: int, nbody: int):
        b0 = NONCE_BYTES + hdr
        end = b0 + nbody + TAG_BYTES
        self.nonce = mv[:NONCE_BYTES]
        self.header = mv[NONCE_BYTES:b0]
        self.body = mv[b0 : b0 + nbody]
        self.tag = mv[b0 + nbody : end]
        self.frame = mv[b0:end]
        self.header_body = mv[NONCE_BYTES : b0 + nbody]
        # the frame and the room after it: an op's first message on a paired transport carries
        # the argument record there, zero-copy (empty when ``mv`` keeps no room)
        self.wire = mv[b0 : end + RECORD_ROOM]
        self.trailer = mv[end : end + RECORD_ROOM]


def make_nonce(out: memoryview, op_index: int, step: int, chunk: int, sender: int) -> None:
    """Write the 12-byte nonce for (epoch-local op index, step, chunk, sender) into ``out``."""
    v = (chunk << 24) | sender
    _NONCE.pack_into(out, 0, op_index, step, v >> 32, v & 0xFFFFFFFF)


def nonce_bytes(op_index: int, step: int, chunk: int, sender: int) -> bytes:
    """The nonce as bytes (for tests and audits)."""
    b = bytearray(NONCE_BYTES)
    make_nonce(memoryview(b), op_index, step, chunk, sender)
    return bytes(b)


def chunk_elems(chunk_bytes: int, itemsize: int) -> int:
    """Elements in one full chunk: ``chunk_bytes`` rounded down to whole elements of
    ``itemsize`` bytes, at least one.  The engine cuts chunks so, and an op's chunk and frame
    bounds count them so."""
    return max(1, chunk_bytes // itemsize)


def chunk_counts(count: int, chunk_elems: int) -> list[int]:
    """Split ``count`` elements into chunks of at most ``chunk_elems`` (empty list for 0)."""
    full, rest = divmod(count, chunk_elems)
    return [chunk_elems] * full + ([rest] if rest else [])


def block_counts(count: int, size: int) -> list[int]:
    """Balanced partition of ``count`` elements over ``size`` ranks (first ranks get one more).

    This is the block each rank owns in reduce-scatter and contributes in allgather.
    """
    q, r = divmod(count, size)
    return [q + (1 if i < r else 0) for i in range(size)]


def block_offsets(counts: list[int]) -> list[int]:
    offs, acc = [], 0
    for c in counts:
        offs.append(acc)
        acc += c
    return offs


class Workspace:
    """Grow-only wire buffers, reused across operations (no allocation per chunk or per op).
    Slot layouts are cached per (buffer, chunk sizes), so a repeated op shape costs a lookup.
    :meth:`scratch` gives each thread its own private plaintext buffer."""

    def __init__(self):
        self._bufs: dict[str, np.ndarray] = {}
        self._layouts: dict[tuple, list[Slot]] = {}
        self._tls = threading.local()  # per thread: the scratch buffer

    def get(self, name: str, nbytes: int) -> np.ndarray:
        """Buffer ``name`` (uint8, at least ``nbytes``, its start aligned to :data:`SLOT_ALIGN`
        bytes), grown when too small."""
        buf = self._bufs.get(name)
        if buf is None or buf.nbytes < nbytes:
            buf = _aligned(max(nbytes, 64))
            self._bufs[name] = buf
            self._layouts = {k: v for k, v in self._layouts.items() if k[0] != name}
        return buf

    def scratch(self, nbytes: int) -> np.ndarray:
        """A uint8 buffer of ``nbytes`` that only the calling thread uses and that no caller of
        seccomm ever sees: where the engine decrypts a chunk before its tag is verified (one per
        thread of the crypto pool, grown to the largest chunk once, then reused: it stays in
        cache between the decryption and the copy out)."""
        buf = getattr(self._tls, "buf", None)
        if buf is None or buf.nbytes < nbytes:
            buf = self._tls.buf = np.empty(max(nbytes, 64), np.uint8)
        return buf[:nbytes]

    def slots(self, name: str, body_sizes: list[int]) -> list[Slot]:
        """Lay out one slot per chunk body size in buffer ``name``; return their views."""
        key = (name, tuple(body_sizes))
        hit = self._layouts.get(key)
        if hit is not None:
            return hit
        room = BODY_AT + TAG_BYTES + RECORD_ROOM + SLOT_ALIGN - 1
        sizes = [(b + room) // SLOT_ALIGN * SLOT_ALIGN for b in body_sizes]
        mv = memoryview(self.get(name, sum(sizes)))
        out, off = [], 0
        for b, s in zip(body_sizes, sizes):
            out.append(Slot(mv[off + _LEAD : off + s], AAD_BYTES, b))
            off += s
        if len(self._layouts) > 256:
            self._layouts.clear()
        self._layouts[key] = out
        return out


def _aligned(nbytes: int) -> np.ndarray:
    """``nbytes`` of uint8 whose start is aligned to :data:`SLOT_ALIGN` bytes."""
    raw = np.empty(nbytes + SLOT_ALIGN, np.uint8)
    skip = -raw.ctypes.data % SLOT_ALIGN
    return raw[skip : skip + nbytes]


class FrameContext:
    """The per-operation constants of the AAD; ``fill`` writes one slot's nonce and header.

    ``op_code``: the collective's wire code (its record's ``code`` in
    :mod:`seccomm.collectives`: 1 allreduce, 2 reduce_scatter, 3 allgather, 4 bcast, ...);
    ``dtype_code``: :data:`seccomm.dtypes.DTYPES`' code; ``redop``: a name of :data:`REDOPS`.
    """

    __slots__ = ("op_code", "epoch", "seq", "op_index", "_head", "_total")

    def __init__(
        self, suite_id, op_code, dtype_code, job_id, comm_id, epoch, seq, op_index, total_count, redop="none"
    ):
        self.op_code, self.epoch, self.seq, self.op_index = op_code, epoch, seq, op_index
        self._head, self._total = (REDOPS[redop], op_code, dtype_code, job_id, comm_id), total_count

    def fill(
        self,
        slot: Slot,
        key_kind: int,
        suite_id: int,
        step: int,
        chunk: int,
        chunks: int,
        src: int,
        dst: int,
        elems: int,
    ) -> None:
        """Write nonce and AAD header for one chunk.  ``src`` is the sealing rank (direction key)
        or the origin rank (group key, with ``dst == ANY_RANK`` and ``step == GROUP_STEP``)."""
        v = (chunk << 24) | src
        _NONCE.pack_into(slot.nonce, 0, self.op_index, step, v >> 32, v & 0xFFFFFFFF)
        redop, op_code, dtype_code, job_id, comm_id = self._head
        AAD.pack_into(
            slot.header,
            0,
            PROTOCOL_MAGIC,
            PROTOCOL_VERSION,
            suite_id,
            op_code,
            redop,
            key_kind,
            dtype_code,
            job_id,
            comm_id,
            self.epoch,
            self.seq,
            step,
            chunk,
            chunks,
            src,
            dst,
            self._total,
            elems,
        )
