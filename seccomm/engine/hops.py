"""What one step of an algorithm sends and receives: :class:`Send`, :class:`Recv`, :class:`Lend`."""

from __future__ import annotations

import enum


class Lend(enum.Enum):
    """Whether a :class:`Send`'s clear frames (``none``: the payload alone) may go on the wire
    straight from its pieces, without a copy into a slot.

    - ``COPY``: no; they are copied (the pieces may change before the sends complete).
    - ``STEP``: the pieces stay unchanged until this step's sends complete: nothing this step
      receives or reduces is written over them, and a later step of the op waits for these sends
      while the peer is still in the op before anything writes over them.
    - ``OP``: the pieces stay unchanged until the op's end, and these may be its last sends,
      which MPICH may complete only once the peer calls MPI again (waiting for them would blame
      a rank that did its part: docs/design.md, "Completion"): lent only where the hop is
      acknowledged (:meth:`~seccomm.engine.receipts.Receipts.acked`), the op then ending once the
      peer has them.
    """

    COPY = "copy"
    STEP = "step"
    OP = "op"


class Send:
    """Outgoing chunks of one step: ``pieces`` (uint8 plaintext views, sealed here) or
    ``frames`` (already-sealed group frames forwarded unchanged).

    ``lend``: a :class:`Lend`: whether clear frames go on the wire straight from the pieces.
    Should a lent send of an unacknowledged hop still be out at the op's end, the op waits for
    it.  ``clear`` (forwarded ``frames`` only): whether they are clear frames, ``sizes`` then
    their payload bytes.

    ``behind`` (paired transports; both ranks' steps must agree, as recursive doubling's one
    swap on two ranks does): the op's record, where it is due, rides behind this step's first
    clear frame in the same message (the transport stages the two), not alone before it."""

    __slots__ = (
        *("dst", "step", "group", "origin", "pieces", "frames", "ws", "sizes", "lend", "behind"),
        *("clear", "acked"),
    )

    def __init__(
        self,
        dst,
        step=0,
        group=False,
        origin=-1,
        pieces=None,
        frames=None,
        ws="send",
        lend=Lend.COPY,
        behind=False,
    ):
        self.dst, self.step, self.group, self.origin = dst, step, group, origin
        self.pieces, self.frames, self.ws, self.lend, self.behind = pieces, frames, ws, lend, behind
        self.sizes = None if pieces is None else [len(p) for p in pieces]  # chunk bytes
        self.clear = None  # (forwarded frames: set by the caller)
        self.acked = False  # this op's hop is acknowledged (set by exchange)


class Recv:
    """Incoming chunks of one step.  ``origin``: for group frames, the rank that sealed them.

    Without ``consume``, ``outs[j]`` (uint8 view) is where chunk j's verified plaintext is
    copied; it may be the caller's buffer, which is written only after the tag verified.  With
    ``consume(j, pt)`` (called once chunk j verified), ``outs[j]`` is private workspace memory
    (an accumulator, never the caller's buffer) that the chunk is decrypted into and ``pt``
    views.

    ``direct`` (without ``consume``): the frames are not forwarded, so clear frames (``none``:
    the payload alone, nothing to verify) are received straight into ``outs[j]``, not into slots.
    ``behind``: the peer's :class:`Send` of this step has it (its record comes in the first
    frame's message, where due).
    """

    __slots__ = (
        *("src", "elems", "outs", "step", "group", "origin", "consume", "ws", "slots", "sizes"),
        *("direct", "landed", "clear", "behind"),
    )

    def __init__(
        self,
        src,
        elems,
        outs,
        step=0,
        group=False,
        origin=-1,
        consume=None,
        ws="recv",
        direct=False,
        behind=False,
    ):
        self.src, self.elems, self.outs, self.step = src, elems, outs, step
        self.group, self.origin, self.consume, self.ws = group, origin, consume, ws
        self.direct, self.behind = direct and consume is None, behind
        self.slots = None  # filled by exchange (frames to forward)
        self.sizes = None  # chunk bytes, set by the first exchange (it knows the element size)
        self.landed = False  # this op's frames were received in place (set by exchange)
        self.clear = False  # this op's frames are clear (set by exchange)
