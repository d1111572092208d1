"""The op's argument record in its first message to the peer, on a paired transport.

On a paired transport (:attr:`Transport.paired <seccomm.transports.base.Transport.paired>`: two
ranks over MPI) the op's argument record (:mod:`seccomm.agreement`) rides in its first message
to the peer, zero-copy: the first frame sealed goes out with the record in its slot's room after
the tag (``slot.wire``), and the first receive is posted for frame and record; the receiver's
:func:`~seccomm.engine.land.land` hands it to the transport's ``take_record`` before the frame is
looked at.  A clear frame (``none``: its payload alone, possibly straight from the caller's
memory) has no room behind it: the record goes alone just before it (``send_record``), and the
receiver posts a receive for it before the frame's (:meth:`FirstMessage.expect`) and checks it
before it waits for the frame (:meth:`FirstMessage.check_alone`)."""

from __future__ import annotations


class FirstMessage:
    """A run's part in carrying its record (module docstring).  ``transport``: the run's;
    ``room``: whether its slots keep room after each frame (the device engine's do not: its
    transport copies)."""

    __slots__ = ("t", "room", "alone")

    def __init__(self, transport, room: bool):
        self.t, self.room = transport, room and transport.paired
        self.alone = False  # the record's receive was posted alone, before clear frames

    def reset(self) -> None:
        """Ready for the run's next op."""
        self.alone = False

    def wire_out(self, slot):
        """What to send of the sealed ``slot``: its frame, or frame and record (the op's first)."""
        if self.room and self.t.put_record(slot.trailer):
            return slot.wire
        return slot.frame

    def posts(self, slots, src) -> tuple[list, object]:
        """Post the receives of ``slots`` from ``src``; returns the requests and the buffer of
        the first message where it carries the record too (else ``None``: the
        :class:`~seccomm.engine.land.Inbox`'s ``record``)."""
        t = self.t
        if slots and self.room and t.record_due():
            wire = slots[0].wire
            return [t.irecv(wire, src)] + [t.irecv(s.frame, src) for s in slots[1:]], wire
        return [t.irecv(s.frame, src) for s in slots], None

    def expect(self, src, pending: list) -> None:
        """Before the receives of clear frames from ``src``: the op's record, if it is due, comes
        alone first (the transport posts its receive now; its request joins ``pending``)."""
        req = self.t.expect_record(src)
        if req is not None:
            pending.append(req)
            self.alone = True

    def check_alone(self, src) -> None:
        """Before the first clear frame from ``src`` is waited for: its record, if it came alone,
        checked (the transport raises on a disagreement)."""
        if self.alone:
            self.alone = False
            self.t.wait_record(src)
