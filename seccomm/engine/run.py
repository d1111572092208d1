"""One collective call's run: :class:`OpRun` seals and sends, and receives through
:func:`~seccomm.engine.land.land`, step by step."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..framing import ANY_RANK, GROUP_STEP, KEY_DIRECTION, KEY_GROUP, FrameContext, chunk_elems
from ..policy import EncryptPolicy
from ..suites import CipherSuite
from . import swap
from .hops import Lend, Recv, Send
from .land import CLEAR, Inbox, copy_out, land
from .origin import OriginProofs, needed
from .receipts import Receipts
from .record import FirstMessage


@dataclass(frozen=True)
class OpContext:
    """What a collective call needs from its communicator, and nothing more.

    ``rank``, ``size``: this rank and the world size; ``transport``: moves the frames
    (:class:`~seccomm.transports.base.Transport`); ``workspace``: reusable wire buffers
    (:class:`~seccomm.framing.Workspace`, or the device engine's); ``keys``: the
    :class:`~seccomm.keys.KeySchedule`; ``pool``: crypto thread pool or ``None`` (crypto on the
    calling thread); ``policy``: which hops are encrypted (:class:`~seccomm.policy.EncryptPolicy`);
    ``suite``: the communicator's suite; ``chunk_bytes``: frame payload bytes; ``control``: the
    rank's :class:`~seccomm.control.PairMacs` (receipts).  (The seconds a wait may block, and
    the op it names, the transport holds: :meth:`Transport.begin_op
    <seccomm.transports.base.Transport.begin_op>`.)
    """

    rank: int
    size: int
    transport: object
    workspace: object
    keys: object
    pool: object
    policy: EncryptPolicy
    suite: CipherSuite
    chunk_bytes: int
    control: object = None


class OpRun:
    """State of one collective call: ``ctx`` (:class:`OpContext`), ``frame`` (the call's
    :class:`~seccomm.framing.FrameContext`: AAD constants, epoch, sequence number) and the
    element size in bytes.  It owns the op's :class:`~seccomm.engine.receipts.Receipts`
    (``receipts``), its part in carrying the argument record
    (:class:`~seccomm.engine.record.FirstMessage`, ``first``) and, under identity x509 on three
    ranks or more, its group frames' origin proofs (:class:`~seccomm.engine.origin.OriginProofs`,
    ``origins``; else ``None``)."""

    #: slots keep room after each frame (the device engine's do not: its transport copies)
    record_room = True
    #: clear frames may land in the caller's host memory (``Recv.direct``) and go out from it
    #: (``Send.lend``)
    receives_direct = True
    #: the origin proofs' class (the device engine's computes them on the device)
    origin_proofs = OriginProofs

    def __init__(self, ctx: OpContext, frame: FrameContext, itemsize: int, collective: str):
        self.t, self.ws, self.rank, self.size = ctx.transport, ctx.workspace, ctx.rank, ctx.size
        self.keys, self.policy, self.pool, self.suite = ctx.keys, ctx.policy, ctx.pool, ctx.suite
        self.collective, self.itemsize = collective, itemsize
        self.frame = frame
        self.chunk_elems = chunk_elems(ctx.chunk_bytes, itemsize)
        self.op_label = f"{collective} #{frame.seq}"  # names the operation in transport errors
        self.pending: list = []
        self.sends: list = []  # (request, peer) of sends not yet waited for (see settle)
        self.lent = False  # a frame from a lending Send's pieces is out, not yet waited for
        self.first = FirstMessage(ctx.transport, self.record_room)
        self.receipts = Receipts(ctx.transport.receipt_after, ctx.control)
        self.origins = self.origin_proofs(self) if needed(ctx.keys, ctx.size) else None

    def restart(self, epoch: int, seq: int, op_index: int) -> None:
        """Ready for the next op of the same call (a repeated call's plan keeps its run): its
        epoch, sequence number and index in the epoch, in its frame context too."""
        f = self.frame
        f.epoch, f.seq, f.op_index = epoch, seq, op_index
        self.op_label = f"{self.collective} #{seq}"
        self.pending = []
        self.sends = []
        self.lent = False
        self.first.reset()
        self.receipts.reset()
        if self.origins is not None:
            self.origins.reset()

    # -- keys and headers --------------------------------------------------------------------
    def protect(self, group: bool, a: int, b: int):
        """The keyed suite (:class:`~seccomm.suites.SuiteKey`) for a frame sealed by ``a`` for
        ``b`` (group frames: origin ``a``); hops in the clear under ``encrypt="inter-node"`` use
        the ``none`` suite."""
        if not self.policy.encrypts(a, b, group):
            return CLEAR
        if group:
            return self.keys.group(self.frame.epoch)
        return self.keys.direction(self.frame.epoch, a, b)

    def fill(self, slot, suite, group, step, j, n, sender, dst, elems) -> None:
        """Write chunk j (of ``n``) of a frame from ``sender`` to ``dst`` into ``slot``'s nonce
        and header (:meth:`~seccomm.framing.FrameContext.fill`; group frames: any receiver)."""
        if group:
            self.frame.fill(slot, KEY_GROUP, suite.suite_id, GROUP_STEP, j, n, sender, ANY_RANK, elems)
        else:
            self.frame.fill(slot, KEY_DIRECTION, suite.suite_id, step, j, n, sender, dst, elems)

    @staticmethod
    def clear_frame(slot):
        """A clear frame's place in ``slot``: the body (no tag: :mod:`seccomm.suites`)."""
        return slot.body

    def acked(self, frames: int, nbytes: int, clear: bool) -> bool:
        """:meth:`Receipts.acked <seccomm.engine.receipts.Receipts.acked>`."""
        return self.receipts.acked(frames, nbytes, clear)

    def frames_of(self, recv: Recv) -> list:
        """The frames ``recv``'s last exchange received into its slots, as they came (to forward
        them unchanged)."""
        if recv.clear:
            return [self.clear_frame(s) for s in recv.slots]
        return [s.frame for s in recv.slots]

    def forward(self, dst: int, recv: Recv) -> Send:
        """A :class:`Send` to ``dst`` of the frames ``recv``'s last exchange received
        (:meth:`frames_of`), with their payload sizes and clear-ness (:meth:`acked` asks them)."""
        send = Send(dst, frames=self.frames_of(recv))
        send.sizes, send.clear = recv.sizes, recv.clear
        return send

    # -- sealing -----------------------------------------------------------------------------
    def sealed_frames(self, send: Send):
        """Seal ``send.pieces`` into slots of workspace ``send.ws`` and yield each frame as soon
        as it is sealed (in the crypto pool when there is more than one chunk).  Clear frames:
        the pieces themselves where the Send lends them, else copies in slots' bodies; the op's
        record goes alone before them (paired)."""
        group, pieces, n = send.group, send.pieces, len(send.pieces)
        sender = send.origin if group else self.rank
        key = self.protect(group, sender, send.dst)
        suite = key.suite
        if suite.clear:
            if not send.behind:
                self.t.send_record()
            lend = send.lend
            if lend is not Lend.COPY and self.receives_direct and (lend is Lend.STEP or send.acked):
                self.lent = self.lent or not send.acked  # (acknowledged: the op ends once they are in)
                yield from pieces
                return
            for body, piece in zip(self.ws.slots(send.ws, send.sizes), pieces):
                body = self.clear_frame(body)
                copy_out(body, piece)
                yield body
            return
        slots = self.ws.slots(send.ws, send.sizes)
        isz, step, dst, wire_out = self.itemsize, send.step, send.dst, self.first.wire_out

        def job(j):
            self.fill(slots[j], suite, group, step, j, n, sender, dst, len(pieces[j]) // isz)
            key.seal(slots[j], pieces[j])

        pool = self.pool if n > 1 else None
        if pool is None:
            for j in range(n):
                job(j)
                yield wire_out(slots[j]) if j == 0 else slots[j].frame
            return
        futs = [pool.submit(job, j) for j in range(n)]
        try:
            for j, (f, slot) in enumerate(zip(futs, slots)):
                f.result()
                yield wire_out(slot) if j == 0 else slot.frame
        finally:
            for f in futs:
                f.cancel()

    # -- sends: waited for at the next step, never at the end of the op ---------------------
    def settle(self) -> None:
        """Wait for the sends of the earlier steps, before this step seals into (or receives
        into) workspace they may still be read from.  The sends of an op's last step are not
        waited for in the op (unless they went out from a lending Send's pieces: ``lent``): a
        peer that received everything may return and stop calling MPI, and MPICH completes a
        large send only while its receiver makes progress; the ``SecureComm`` waits for them
        before its next op reuses the workspace (docs/design.md)."""
        if self.sends:
            reqs, peers = zip(*self.sends)
            self.sends = []
            self.t.wait_sends(reqs, peers)
        self.lent = False

    def send_control(self, buf: np.ndarray, peer: int) -> None:
        """Send ``buf`` (a small message the op made: origin MACs) to ``peer`` on the frames'
        channel, now; waited for with the step's sends."""
        self._sent([self.t.isend(buf, peer)], peer)

    def _sent(self, reqs, peer) -> None:
        self.pending += reqs
        self.sends += [(r, peer) for r in reqs]

    # -- one step ----------------------------------------------------------------------------
    def exchange(self, send: Send | None = None, recv: Recv | None = None) -> None:
        """Run one step: post receives, seal+send, then open+consume in chunk order."""
        if self.sends:
            self.settle()
        box = rreqs = None
        if recv is not None:
            box, rreqs = self._post(recv)
        if send is not None:
            self._send(send)
        if recv is not None:
            self._drain(recv, box, rreqs)
            if self.acked(len(rreqs), sum(recv.sizes), recv.clear):
                self.receipts.give(self, recv.src)

    def _post(self, recv: Recv) -> tuple[Inbox, list]:
        """Post ``recv``'s receives: its :class:`~seccomm.engine.land.Inbox` and requests.  Clear
        frames land straight in ``recv.outs`` where the step allows it (``direct``, host engine),
        else in the slots' bodies, the op's record first where it is due."""
        if recv.sizes is None:
            recv.sizes = [e * self.itemsize for e in recv.elems]
        slots = recv.slots = self.ws.slots(recv.ws, recv.sizes)
        sender = recv.origin if recv.group else recv.src
        key = self.protect(recv.group, sender, self.rank)
        src, step = recv.src, GROUP_STEP if recv.group else recv.step
        recv.clear = key.suite.clear
        if recv.clear:
            if not recv.behind:
                self.first.expect(src, self.pending)
            recv.landed = recv.direct and self.receives_direct
            frames = recv.outs if recv.landed else [self.clear_frame(s) for s in slots]
            box = Inbox(src, step, key, frames, slots, recv.outs, recv.consume)
            rreqs = [self.t.irecv(f, src) for f in frames]
        else:
            fill = (recv.group, sender, recv.elems)
            box = Inbox(src, step, key, [s.frame for s in slots], slots, recv.outs, recv.consume, fill)
            rreqs, box.record = self.first.posts(slots, src)
        self.pending += rreqs
        return box, rreqs

    def _send(self, send: Send) -> None:
        """Seal (or forward) and send ``send``'s frames; the receipt's receive where the hop is
        acknowledged."""
        if send.frames is not None:
            frames = send.frames
            send.acked = self.acked(len(frames), sum(send.sizes), send.clear)
        else:
            nbytes = sum(send.sizes)
            # (the hop's clear-ness as the receiver asks it; only where the bytes could matter)
            sender = send.origin if send.group else self.rank
            clear = (
                nbytes >= self.receipts.ack_clear and self.protect(send.group, sender, send.dst).suite.clear
            )
            send.acked = self.acked(len(send.sizes), nbytes, clear)
            frames = self.sealed_frames(send)
        self._sent([self.t.isend(f, send.dst) for f in frames], send.dst)
        if send.acked:
            self.receipts.expect(self, send.dst)

    def _drain(self, recv: Recv, box: Inbox, rreqs) -> None:
        """Land ``recv``'s frames (``box``, ``rreqs``: :meth:`_post`) as they come: each opened
        (in the crypto pool where there is one and more than one frame) and consumed or copied
        out."""
        pool = self.pool if len(rreqs) > 1 and not box.suite.clear else None
        if pool is None:
            for j, req in enumerate(rreqs):
                land(self, box, j, req)
            return
        futs = []
        try:
            for j, req in enumerate(rreqs):
                futs.append(land(self, box, j, req, defer=pool.submit))
            for f in futs:
                f.result()
        finally:
            for f in futs:
                f.cancel()
            for f in futs:
                if not f.cancelled():
                    f.exception()  # let running jobs finish before buffers are reused

    # -- one chunk each way (the small-message fast path) ------------------------------------
    def swap_step(self, peer: int, step: int, piece, elems: int, out, consume, lend=Lend.COPY, summed=None):
        """``step()``: exchange one chunk with ``peer`` under direction keys
        (:func:`seccomm.engine.swap.swap_step`, which says what the arguments are)."""
        return swap.swap_step(self, peer, step, piece, elems, out, consume, lend, summed)

    # -- tree relay (broadcast) --------------------------------------------------------------
    def relay(
        self,
        parent: int | None,
        children: list,
        pieces_or_outs: list,
        elems: list,
        origin: int,
        fan_in: int = 1,
    ) -> None:
        """Move group frames down a tree: the origin seals ``pieces``; every other rank receives
        chunk j from ``parent``, forwards the frame to ``children`` as soon as it arrived, then
        opens it into private scratch and copies it to ``outs[j]`` (the caller's buffer) once it
        verified.  Pipelined per chunk (a chain overlaps its hops).  The origin's sends are the
        op's last: never lent (clear frames are copied into slots).  ``fan_in``: how many
        children ``parent`` has (receipts: :meth:`_relay_receipts`)."""
        t, n = self.t, len(elems)
        self.settle()
        if parent is None:
            for f in self.sealed_frames(Send(ANY_RANK, group=True, origin=origin, pieces=pieces_or_outs)):
                for c in children:
                    self._sent([t.isend(f, c)], c)
            self._relay_receipts(None, children, n)
            return
        if not children:  # a leaf: it sends nothing this op (paired: its record goes alone, now)
            t.send_record()
        slots = self.ws.slots("recv", [e * self.itemsize for e in elems])
        key = self.protect(True, origin, self.rank)
        if key.suite.clear:
            frames = [self.clear_frame(s) for s in slots]
            box = Inbox(parent, GROUP_STEP, key, frames, slots, pieces_or_outs)
            self.first.expect(parent, self.pending)
            rreqs = [t.irecv(f, parent) for f in frames]
        else:
            frames = [s.frame for s in slots]
            box = Inbox(parent, GROUP_STEP, key, frames, slots, pieces_or_outs, None, (True, origin, elems))
            rreqs, box.record = self.first.posts(slots, parent)
        self.pending += rreqs

        def forward(j):
            for c in children:
                self._sent([t.isend(frames[j], c)], c)

        box.forward = forward if children else None
        for j, req in enumerate(rreqs):
            land(self, box, j, req)
        self._relay_receipts(parent, children, n, fan_in)

    def _relay_receipts(self, parent, children, n, fan_in=1) -> None:
        """Receipts of a relay of ``n`` frames, counted per sender over all its children (MPICH
        delivers at most about 64 messages from a rank that stopped calling MPI, over all its
        receivers: docs/design.md, "Completion"): where ``parent`` sent more than
        ``receipt_after`` frames in all (``n`` to each of its ``fan_in`` children), the receipt
        to it once every frame is in; where this rank sends more, the receives of its
        ``children``'s.  Both ends of a hop know the tree, so they agree."""
        after = self.receipts.after
        if parent is not None and n * fan_in > after:
            self.receipts.give(self, parent)
        if n * len(children) > after:
            for c in children:
                self.receipts.expect(self, c)
