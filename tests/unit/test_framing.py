"""Property tests of the framing: nonce injectivity, chunk and block plans, slot layout, AAD."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from seccomm.framing import (
    AAD,
    AAD_BYTES,
    BODY_AT,
    GROUP_STEP,
    MAX_CHUNKS_PER_HOP,
    RECORD_ROOM,
    SLOT_ALIGN,
    FrameContext,
    Workspace,
    block_counts,
    block_offsets,
    chunk_counts,
    nonce_bytes,
)
from seccomm.suites import NONCE_BYTES, TAG_BYTES

fields = st.tuples(
    st.integers(0, 2**32 - 1),
    st.integers(0, GROUP_STEP),
    st.integers(0, MAX_CHUNKS_PER_HOP - 1),
    st.integers(0, 2**24 - 1),
)


@given(fields, fields)
def test_nonce_injective(a, b):
    """Distinct (op index, step, chunk, sender) never give the same 96-bit nonce."""
    assert (nonce_bytes(*a) == nonce_bytes(*b)) == (a == b)


@given(st.lists(fields, min_size=2, max_size=200, unique=True))
def test_nonce_unique_in_batches(batch):
    assert len({nonce_bytes(*f) for f in batch}) == len(batch)


def test_nonce_layout():
    n = nonce_bytes(0x01020304, 0x0506, 0x070809, 0x0A0B0C)
    assert n == bytes(range(1, 13)) and len(n) == NONCE_BYTES


@given(st.integers(0, 10**7), st.integers(1, 10**6))
def test_chunk_counts(count, chunk):
    assume(count // chunk <= 10**5)
    c = chunk_counts(count, chunk)
    assert sum(c) == count and all(0 < x <= chunk for x in c)
    assert len(c) == -(-count // chunk)


@given(st.integers(0, 10**7), st.integers(1, 4096))
def test_block_counts_balanced(count, size):
    b = block_counts(count, size)
    assert len(b) == size and sum(b) == count and max(b) - min(b) <= 1
    assert b == sorted(b, reverse=True)
    offs = block_offsets(b)
    assert offs[0] == 0 and all(
        offs[i] + b[i] == (offs[i + 1] if i + 1 < size else count) for i in range(size)
    )


@settings(max_examples=50)
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=40))
def test_slots_disjoint_and_sized(sizes):
    ws = Workspace()
    slots = ws.slots("w", sizes)
    base = ws.get("w", 0).ctypes.data
    spans = []
    for s, n in zip(slots, sizes):
        assert len(s.body) == n and len(s.tag) == TAG_BYTES and len(s.frame) == n + TAG_BYTES
        assert len(s.wire) == n + TAG_BYTES + RECORD_ROOM and s.wire[: len(s.frame)] == s.frame
        assert len(s.header) == AAD_BYTES and len(s.nonce) == NONCE_BYTES
        start = np.frombuffer(s.nonce, np.uint8).ctypes.data - base
        spans.append((start, start + NONCE_BYTES + AAD_BYTES + n + TAG_BYTES + RECORD_ROOM))
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))


def test_aad_binds_every_field():
    """Changing any one bound field changes the header bytes (so the tag)."""
    ws = Workspace()
    (slot,) = ws.slots("w", [64])
    base = dict(
        suite_id=1,
        op_code=1,
        dtype_code=3,
        job_id=b"j" * 16,
        comm_id=b"c" * 16,
        epoch=2,
        seq=9,
        op_index=4,
        total_count=1000,
    )
    chunk = dict(key_kind=0, suite_id=1, step=3, chunk=1, chunks=4, src=5, dst=6, elems=16)

    def header(b, c):
        FrameContext(**b).fill(slot, **c)
        return bytes(slot.header), bytes(slot.nonce)

    base["redop"] = "sum"
    ref = header(base, chunk)
    assert AAD.unpack(ref[0])[0] == b"SCM"
    for k, v in [
        ("op_code", 4),
        ("redop", "max"),
        ("dtype_code", 4),
        ("job_id", b"k" * 16),
        ("comm_id", b"d" * 16),
        ("epoch", 3),
        ("seq", 10),
        ("total_count", 1001),
    ]:
        assert header({**base, k: v}, chunk)[0] != ref[0], k
    for k in chunk:
        assert header(base, {**chunk, k: chunk[k] + 1})[0] != ref[0], k


#: nonce and AAD header of one frame (suite 1, float32, sum, epoch 2, seq 9, op index 4, step 3,
#: chunk 1/4, 5 -> 6, 1000 elements, 16 in the chunk) as protocol 1 wrote them before the wire
#: codes moved into the collective records; ``{op:02x}`` is the op kind byte
NONCE_V1 = "000000040003000001000005"
HEADER_V1 = (
    "53434d"
    "01"
    "01"
    "{op:02x}"
    "01"
    "00"
    "03" + "6a" * 16 + "63" * 16 + "00000002"
    "0000000000000009"
    "00000003"
    "00000001"
    "00000004"
    "00000005"
    "00000006"
    "00000000000003e8"
    "0000000000000010"
)
WIRE_CODES_V1 = {"allreduce": 1, "reduce_scatter": 2, "allgather": 3, "bcast": 4}


def test_wire_codes_and_header_unchanged():
    """Every record's wire code lands in the op kind byte of the protocol-1 header; the codes
    of protocol 1 never change and no two records share one."""
    from seccomm.collectives import COLLECTIVES

    assert {n: COLLECTIVES[n].code for n in WIRE_CODES_V1} == WIRE_CODES_V1
    assert len({c.code for c in COLLECTIVES.values()}) == len(COLLECTIVES)
    (slot,) = Workspace().slots("w", [64])
    for coll in COLLECTIVES.values():
        FrameContext(1, coll.code, 3, b"j" * 16, b"c" * 16, 2, 9, 4, 1000, "sum").fill(
            slot, 0, 1, 3, 1, 4, 5, 6, 16
        )
        assert bytes(slot.nonce).hex() == NONCE_V1
        assert bytes(slot.header).hex() == HEADER_V1.format(op=coll.code), coll.name


@given(fields, st.integers(0, 2**16 - 1), st.integers(0, 2**32 - 1))
def test_fill_writes_the_nonce_of_its_fields(f, dst, elems):
    """The nonce a frame is sealed with is :func:`nonce_bytes` of (op index, step, chunk,
    sender), for every field value (chunk indices above 2^8 included)."""
    op_index, step, chunk, sender = f
    (slot,) = Workspace().slots("w", [16])
    FrameContext(1, 1, 3, b"j" * 16, b"c" * 16, 0, 1, op_index, 10).fill(
        slot, 0, 1, step, chunk, chunk + 1, sender, dst, elems
    )
    assert bytes(slot.nonce) == nonce_bytes(op_index, step, chunk, sender)


def test_frame_context_without_a_reduction_binds_none():
    (slot,) = Workspace().slots("w", [16])
    args = (1, 3, 3, b"j" * 16, b"c" * 16, 0, 1, 2, 10)
    FrameContext(*args).fill(slot, 1, 1, GROUP_STEP, 0, 1, 2, 0xFFFFFFFF, 4)
    default = bytes(slot.header)
    FrameContext(*args, redop="none").fill(slot, 1, 1, GROUP_STEP, 0, 1, 2, 0xFFFFFFFF, 4)
    assert bytes(slot.header) == default and AAD.unpack(default)[4] == 0


def test_workspace_buffers_are_reused_and_grow():
    """A named buffer is allocated once and reused for any size up to the largest asked for,
    then replaced by a larger one when a larger size is asked; slot layouts are computed once
    per (buffer, sizes), and a buffer that grew gets new layouts inside it."""
    ws = Workspace()
    a = ws.get("w", 100)
    assert a.nbytes >= 100 and ws.get("w", 100) is a and ws.get("w", 10) is a and ws.get("v", 10) is not a
    s1 = ws.slots("w", [10, 20])
    assert ws.slots("w", [10, 20]) is s1 and ws.slots("w", [10, 21]) is not s1
    other = ws.slots("v", [8])
    b = ws.get("w", 100_000)
    assert b.nbytes >= 100_000 and b is not a and ws.get("w", 100_000) is b
    s2 = ws.slots("w", [10, 20])
    base, end = b.ctypes.data, b.ctypes.data + b.nbytes
    for s in s2:
        start = np.frombuffer(s.nonce, np.uint8).ctypes.data
        assert base <= start and start + len(s.nonce) + len(s.header) + len(s.frame) <= end
    assert ws.slots("v", [8]) is other  # another buffer's layouts stay


def test_a_slot_keeps_room_for_the_argument_record_after_its_tag():
    """The room after a frame holds the record's trailer (the op's first message on two ranks)."""
    from seccomm.agreement import TRAILER_BYTES

    assert RECORD_ROOM == TRAILER_BYTES
    (slot,) = Workspace().slots("w", [100])
    end = np.frombuffer(slot.frame, np.uint8).ctypes.data + len(slot.frame)
    assert np.frombuffer(slot.trailer, np.uint8).ctypes.data == end and len(slot.trailer) == RECORD_ROOM


def test_slots_are_aligned_and_packed():
    """Each slot's body starts BODY_AT bytes into the slot, SLOT_ALIGN-aligned in memory (the
    buffer's start is aligned too), the nonce and header right before it; each slot starts right
    after the previous one rounded up to SLOT_ALIGN (BODY_AT + body + tag)."""
    assert BODY_AT % SLOT_ALIGN == 0 and BODY_AT >= NONCE_BYTES + AAD_BYTES > BODY_AT - SLOT_ALIGN
    ws = Workspace()
    for sizes in (
        [0],
        [1, 27, 64, 63, 100],
        [-(BODY_AT + TAG_BYTES + RECORD_ROOM) % SLOT_ALIGN] * 3,  # (a slot that fills its last 64 bytes)
        [-(BODY_AT + TAG_BYTES + RECORD_ROOM) % SLOT_ALIGN + 1] * 3,  # (one byte into the next 64)
    ):
        slots = ws.slots("w", sizes)
        base = ws.get("w", 0).ctypes.data
        assert base % SLOT_ALIGN == 0
        pos = 0
        for s, n in zip(slots, sizes):
            body = np.frombuffer(s.header_body, np.uint8).ctypes.data + AAD_BYTES
            assert body - base == pos + BODY_AT and body % SLOT_ALIGN == 0
            assert np.frombuffer(s.nonce, np.uint8).ctypes.data == body - AAD_BYTES - NONCE_BYTES
            pos += -(-(BODY_AT + n + TAG_BYTES + RECORD_ROOM) // SLOT_ALIGN) * SLOT_ALIGN


def test_scratch_is_one_buffer_per_thread():
    """``scratch`` gives the calling thread its own buffer, reused for any size up to the
    largest asked for, and another thread a different one."""
    import threading

    ws = Workspace()
    a = ws.scratch(100)
    assert len(a) == 100 and np.shares_memory(ws.scratch(100), a) and np.shares_memory(ws.scratch(10), a)
    b = ws.scratch(5000)
    assert len(b) == 5000 and not np.shares_memory(b, a) and np.shares_memory(ws.scratch(100), b)
    other = []
    t = threading.Thread(target=lambda: other.append(ws.scratch(100)))
    t.start()
    t.join()
    assert not np.shares_memory(other[0], b)


#: frames a key may seal in one ring or tree op: (2p + 2 bitlen(p) + 4) * chunks since protocol 1
#: (comm rotates keys on it: ranks of one job must agree on it)
FRAME_BOUNDS_V1 = {(1, 1): 8, (2, 3): 36, (3, 1): 14, (5, 2): 40, (64, 10): 1460, (65536, 7): 917770}


def test_frame_bounds_unchanged():
    from seccomm.collectives import COLLECTIVES

    for name in ("allreduce", "reduce_scatter", "allgather", "bcast"):
        bound = COLLECTIVES[name].frame_bound
        assert {k: bound(*k) for k in FRAME_BOUNDS_V1} == FRAME_BOUNDS_V1, name
        assert all(type(bound(*k)) is int for k in FRAME_BOUNDS_V1)
    assert COLLECTIVES["alltoall"].frame_bound(5, 7) == 7  # one block per direction key
