"""Receipts: a hop of many frames is acknowledged (docs/design.md, "Completion").

MPICH may complete a rank's queued sends only while their receiver calls MPI; a rank that
returned from an op and stopped calling MPI would leave its peer waiting on them.  So the
receiver of a hop of more than ``receipt_after`` frames (or of a clear hop of at least
:data:`ACK_CLEAR_BYTES`) sends a receipt once every frame is in, and the sender's op ends only
once the receipt came.  Both ends of a hop know its frames, bytes and clear-ness, so both agree
on whether it is acknowledged (:meth:`Receipts.acked`)."""

from __future__ import annotations

import hmac

import numpy as np

from ..errors import FrameError

#: bytes of a receipt: the op's number and the pair's tag (:meth:`Receipts.give`)
RECEIPT_BYTES = 24
RECEIPT_LABEL = b"receipt"  # its control label (seccomm.control)
#: a clear hop of at least this many payload bytes is acknowledged (on a transport with
#: receipts), so that it may go from the caller's memory even as the op's last sends: a copy
#: of it costs more than a receipt and the record sent alone (at 256-512 KiB the two were
#: within a 2-core machine's noise, measured with benchmarks/lean_path.py --against)
ACK_CLEAR_BYTES = 1 << 20


class Receipts:
    """The receipts of one run (reset per op): those this rank waits for and those it gave.
    ``after``: the transport's ``receipt_after`` (``None``: its sends complete without their
    receiver, so no hop is acknowledged); ``control``: the rank's
    :class:`~seccomm.control.PairMacs` (the receipts' tags).  The methods take the
    :class:`~seccomm.engine.run.OpRun` (its transport, op number, deadline, label and pending
    requests)."""

    __slots__ = ("after", "ack_clear", "control", "waiting", "given", "counts")

    def __init__(self, after, control):
        self.after = (1 << 62) if after is None else after  # (hops of more frames)
        self.ack_clear = (1 << 62) if after is None else ACK_CLEAR_BYTES  # (clear hops of more bytes)
        self.control = control
        self.reset()

    def reset(self) -> None:
        """Ready for the run's next op."""
        self.waiting: list = []  # (request, buffer, peer, tag): receipts this rank waits for
        self.given: list = []  # (request, peer, message): receipts this rank sent
        self.counts: dict = {}  # ("in" or "out", peer) -> receipts of this op so far

    def __bool__(self) -> bool:
        """Whether this op has receipts to wait for or to hand over (:meth:`finish`)."""
        return bool(self.waiting or self.given)

    def acked(self, frames: int, nbytes: int, clear: bool) -> bool:
        """Whether a hop of ``frames`` frames of ``nbytes`` payload bytes in all (``clear``: not
        sealed) is acknowledged: more than ``receipt_after`` frames, or a clear hop of at least
        :data:`ACK_CLEAR_BYTES` (never on a transport without receipts)."""
        return frames > self.after or (clear and nbytes >= self.ack_clear)

    def _tags(self, run, way: str, peer: int) -> tuple[bytes, bytes]:
        """The op's number (8 bytes) and the tag of the next receipt ``way`` ("out": this rank
        gives it to ``peer``; "in": ``peer`` gives it to this rank).  Receipts of a pair match in
        order (one channel), so each end numbers them alike; the tag is the pair's
        (:mod:`seccomm.control`) over op number and that count, its direction's half."""
        n = self.counts.get((way, peer), 0)
        self.counts[way, peer] = n + 1
        seq = run.frame.seq.to_bytes(8, "big")
        sent, got = self.control.tags(RECEIPT_LABEL, peer, seq + n.to_bytes(4, "big"))
        return seq, sent if way == "out" else got

    def expect(self, run, peer: int) -> None:
        """After sending an acknowledged hop to ``peer``: post the receive of its receipt
        (waited for by :meth:`finish`)."""
        buf = np.empty(RECEIPT_BYTES + 8, np.uint8)  # (room to tell a longer receipt from one)
        req = run.t.irecv_receipt(buf, peer)
        run.pending.append(req)
        self.waiting.append((req, buf, peer, b"".join(self._tags(run, "in", peer))))

    def give(self, run, peer: int) -> None:
        """Once every frame of an acknowledged hop from ``peer`` is in: the receipt,
        :data:`RECEIPT_BYTES`: the op's sequence number (8 bytes, big-endian) and its tag (16)."""
        msg = np.frombuffer(b"".join(self._tags(run, "out", peer)), np.uint8).copy()
        req = run.t.isend_receipt(msg, peer)
        run.pending.append(req)
        self.given.append((req, peer, msg))

    def finish(self, run) -> None:
        """At the op's end: wait for the receipts of this rank's acknowledged hops, so that it
        returns only once their receivers have every frame, and for its own receipts to be
        handed to MPI (small: they complete without their receiver).  A receipt that does not
        come within the deadline blames its receiver, as any wait; one of another length,
        another op's number or a tag that fails raises :class:`~seccomm.errors.FrameError`
        naming it."""
        t, label = run.t, run.op_label
        for req, buf, peer, want in self.waiting:
            got = t.wait_recv(req, peer)
            if got != RECEIPT_BYTES or not hmac.compare_digest(buf[:RECEIPT_BYTES].tobytes(), want):
                raise FrameError(
                    f"{label}: the receipt from rank {peer} is not this op's ({got} bytes; altered, "
                    f"replayed or of another op)",
                    peer=peer,
                    op=run.collective,
                    seq=run.frame.seq,
                )
        self.waiting = []
        if self.given:
            reqs, peers, _ = zip(*self.given)
            t.wait_sends(reqs, peers)
            self.given = []
