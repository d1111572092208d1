"""Property tests of the framing: nonce injectivity, chunk and block plans, slot layout, AAD."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from seccomm.framing import (
    AAD,
    AAD_BYTES,
    GROUP_STEP,
    MAX_CHUNKS_PER_HOP,
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
        assert len(s.header) == AAD_BYTES and len(s.nonce) == NONCE_BYTES
        start = np.frombuffer(s.nonce, np.uint8).ctypes.data - base
        spans.append((start, start + NONCE_BYTES + AAD_BYTES + n + TAG_BYTES))
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
