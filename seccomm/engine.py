"""The hop engine shared by every collective: seal, send, receive, open, consume — chunk by chunk.

One :class:`OpRun` per collective call holds the frame context (AAD constants) and an
:class:`OpContext`: what the call needs from its ``SecureComm`` (transport, workspace, keys, crypto
pool, encrypt policy), passed down explicitly.  :meth:`OpRun.exchange` runs one step of an algorithm: it posts
every receive of the step first, seals and sends each outgoing chunk as soon as it is sealed, and
opens and consumes (copies or reduces) each incoming chunk as soon as it has arrived.  With a
crypto thread pool and more than one chunk, sealing of chunk j+1 overlaps the transfer of chunk j
and opening of chunk j-1 (``cryptography`` releases the GIL).  Frames are written into reusable
workspaces: no allocation per chunk.

A chunk's plaintext is consumed (copied or reduced) only after its tag verified; a failure raises
:class:`~seccomm.errors.AuthenticationError`.  Unverified bytes never touch a caller's buffer, not
even for a moment (NIST SP 800-38D §7.2: FAIL returns no plaintext): ``decrypt_into`` writes the
decryption into its output before it checks the tag, so a chunk bound for the caller's buffer
(allgather, bcast, alltoall, the last step of recursive doubling) is decrypted into this thread's
private scratch (:meth:`~seccomm.framing.Workspace.scratch`) and copied out once it verified.  A
chunk that is reduced (``Recv.consume``) is decrypted into a workspace accumulator, which is
private already: no extra copy there.  Decrypting in place into the slot body is not an option:
``cryptography`` does not document input and output of ``decrypt_into`` as allowed to alias (its
Rust side borrows them as ``&[u8]`` and ``&mut [u8]`` at once), and a group frame is forwarded
from that body after (allgather) or while (bcast) it is opened.  GMAC and ``none`` verify before
anything is copied (their ``open`` returns the slot body), so they need no scratch.
"""

from __future__ import annotations

import enum
import hmac
import weakref
from dataclasses import dataclass

import numpy as np
from cryptography.exceptions import InvalidTag

from . import express
from .errors import AuthenticationError, FrameError
from .framing import (
    ANY_RANK,
    GROUP_STEP,
    KEY_DIRECTION,
    KEY_GROUP,
    RECORD_ROOM,
    FrameContext,
    Workspace,
    chunk_elems,
)
from .policy import EncryptPolicy
from .suites import SUITES, AEADKey, CipherSuite


@dataclass(frozen=True)
class OpContext:
    """What a collective call needs from its communicator, and nothing more.

    ``rank``, ``size``: this rank and the world size; ``transport``: moves the frames
    (:class:`~seccomm.transports.base.Transport`); ``workspace``: reusable wire buffers
    (:class:`~seccomm.framing.Workspace`, or the device engine's); ``keys``: the
    :class:`~seccomm.keys.KeySchedule`; ``pool``: crypto thread pool or ``None`` (crypto on the
    calling thread); ``policy``: which hops are encrypted (:class:`~seccomm.policy.EncryptPolicy`);
    ``suite``: the communicator's suite; ``chunk_bytes``: frame payload bytes; ``timeout``: seconds
    any single wait may block; ``control``: the rank's :class:`~seccomm.control.PairMacs`
    (receipts).
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
    timeout: float
    control: object = None


#: the keyed ``none`` suite: hops left in the clear by the encrypt policy (a clear frame is its
#: payload alone: :mod:`seccomm.suites`)
CLEAR = SUITES["none"].keyed(None)


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
      acknowledged (:meth:`OpRun.acked`), the op then ending once the peer has them.
    """

    COPY = "copy"
    STEP = "step"
    OP = "op"


#: bytes of a receipt: the op's number and the pair's tag (:meth:`OpRun._give_receipt`)
RECEIPT_BYTES = 24
RECEIPT_LABEL = b"receipt"  # its control label (seccomm.control)
#: a clear hop of at least this many payload bytes is acknowledged (on a transport with
#: receipts), so that it may go from the caller's memory even as the op's last sends: a copy
#: of it costs more than a receipt and the record sent alone (at 256-512 KiB the two were
#: within a 2-core machine's noise, measured with benchmarks/lean_path.py --against)
ACK_CLEAR_BYTES = 1 << 20


class Send:
    """Outgoing chunks of one step: ``pieces`` (uint8 plaintext views, sealed here) or
    ``frames`` (already-sealed group frames forwarded unchanged).

    ``lend``: a :class:`Lend`: whether clear frames go on the wire straight from the pieces.
    Should a lent send of an unacknowledged hop still be out at the op's end, the op waits for
    it.  ``clear`` (forwarded
    ``frames`` only): whether they are clear frames, ``sizes`` then their payload bytes.

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


def _copy_out(out, pt):
    if pt is not out:
        np.copyto(np.frombuffer(out, np.uint8), np.frombuffer(pt, np.uint8))


class OpRun:
    """State of one collective call: ``ctx`` (:class:`OpContext`), ``frame`` (the call's
    :class:`~seccomm.framing.FrameContext`: AAD constants, epoch, sequence number) and the
    element size in bytes.

    On a paired transport (:attr:`Transport.paired <seccomm.transports.base.Transport.paired>`:
    two ranks over MPI) the op's argument record rides in its first message to the peer,
    zero-copy: the first frame sealed goes out with the record in its slot's room after the tag
    (``slot.wire``), and the first receive is posted for frame and record and handed to the
    transport's ``take_record`` once it arrived, before the frame is opened.  A clear frame
    (``none``: its payload alone, possibly straight from the caller's memory) has no room
    behind it: the record goes alone just before it (``send_record``), and the receiver posts
    a receive for it before the frame's (``expect_record``) and checks it first
    (``wait_record``)."""

    #: slots keep room after each frame (the device engine's do not: its transport copies)
    record_room = True
    #: clear frames may land in the caller's host memory (``Recv.direct``) and go out from it
    #: (``Send.lend``)
    receives_direct = True

    def __init__(self, ctx: OpContext, frame: FrameContext, itemsize: int, collective: str):
        self.t, self.ws, self.rank, self.size = ctx.transport, ctx.workspace, ctx.rank, ctx.size
        self.keys, self.policy, self.pool, self.suite = ctx.keys, ctx.policy, ctx.pool, ctx.suite
        self.collective, self.itemsize, self.timeout = collective, itemsize, ctx.timeout
        self.frame = frame
        self.chunk_elems = chunk_elems(ctx.chunk_bytes, itemsize)
        self.op_label = f"{collective} #{frame.seq}"  # names the operation in transport errors
        self.pending: list = []
        self.sends: list = []  # (request, peer) of sends not yet waited for (see _settle)
        self.lent = False  # a frame from a lending Send's pieces is out, not yet waited for
        self._first = None  # the receive of the op's first message (paired transports)
        self._first_record = False  # the op's record, received alone before a clear first frame
        after = ctx.transport.receipt_after
        self.receipt_after = (1 << 62) if after is None else after  # (hops of more frames: receipts)
        self.ack_clear = (1 << 62) if after is None else ACK_CLEAR_BYTES  # (clear hops of more bytes)
        self.receipts: list = []  # (request, buffer, peer, tag): receipts this rank waits for
        self.given: list = []  # (request, peer, message): receipts this rank sent
        self.control = ctx.control  # PairMacs: the receipts' tags
        self._receipt_n: dict = {}  # ("in" or "out", peer) -> receipts of this op so far

    def restart(self, epoch: int, seq: int, op_index: int) -> None:
        """Ready for the next op of the same call (a repeated call's plan keeps its run): its
        epoch, sequence number and index in the epoch, in its frame context too."""
        f = self.frame
        f.epoch, f.seq, f.op_index = epoch, seq, op_index
        self.op_label = f"{self.collective} #{seq}"
        self.pending = []
        self.sends = []
        self.lent = False
        self._first = None
        self._first_record = False
        self.receipts = []
        self.given = []
        self._receipt_n = {}

    # -- keys and policy ---------------------------------------------------------------------
    def _protect(self, group: bool, a: int, b: int):
        """The keyed suite (:class:`~seccomm.suites.SuiteKey`) for a frame sealed by ``a`` for
        ``b`` (group frames: origin ``a``); hops in the clear under ``encrypt="inter-node"`` use
        the ``none`` suite."""
        if not self.policy.encrypts(a, b, group):
            return CLEAR
        if group:
            return self.keys.group(self.frame.epoch)
        return self.keys.direction(self.frame.epoch, a, b)

    def _fill(self, slot, suite, group, step, j, n, sender, dst, elems):
        if group:
            self.frame.fill(slot, KEY_GROUP, suite.suite_id, GROUP_STEP, j, n, sender, ANY_RANK, elems)
        else:
            self.frame.fill(slot, KEY_DIRECTION, suite.suite_id, step, j, n, sender, dst, elems)

    def _open(self, slot, key, out, peer, step, j, n):
        """Verify the frame in ``slot``; return its plaintext (``out`` for a decrypting suite,
        which must be private memory: scratch or an accumulator; ``slot.body`` for GMAC).
        ``AuthenticationError`` naming ``peer`` and the chunk when the tag fails."""
        try:
            return key.open(slot, out)
        except InvalidTag:
            if key.suite.confidential:  # decrypt_into wrote the unverified decryption into the
                np.frombuffer(out, np.uint8).fill(0)  # private ``out``: do not keep it around
            raise AuthenticationError(
                peer=peer,
                op=self.collective,
                seq=self.frame.seq,
                step=None if step == GROUP_STEP else step,
                chunk=j,
                chunks=n,
                epoch=self.frame.epoch,
                suite=key.suite.name,
            ) from None

    def _check_len(self, got, want, j, n, peer, step=None, suite=None):
        """``AuthenticationError`` naming ``peer`` and the chunk (as :meth:`_open`) when a frame
        of ``got`` bytes arrived where its chunk's frame has ``want`` bytes."""
        if got != want:  # a frame of the wrong length cannot be authentic
            raise AuthenticationError(
                peer=peer,
                op=self.collective,
                seq=self.frame.seq,
                step=None if step == GROUP_STEP else step,
                chunk=j,
                chunks=n,
                epoch=self.frame.epoch,
                suite=(suite or self.suite).name,
                detail=f"frame has {got} bytes, expected {want} (truncated or padded)",
            )

    @staticmethod
    def _clear_frame(slot):
        """A clear frame's place in ``slot``: the body (no tag: :mod:`seccomm.suites`)."""
        return slot.body

    def frames_of(self, recv: Recv) -> list:
        """The frames ``recv``'s last exchange received into its slots, as they came (to forward
        them unchanged)."""
        if recv.clear:
            return [self._clear_frame(s) for s in recv.slots]
        return [s.frame for s in recv.slots]

    def forward(self, dst: int, recv: Recv) -> Send:
        """A :class:`Send` to ``dst`` of the frames ``recv``'s last exchange received
        (:meth:`frames_of`), with their payload sizes and clear-ness (:meth:`acked` asks them)."""
        send = Send(dst, frames=self.frames_of(recv))
        send.sizes, send.clear = recv.sizes, recv.clear
        return send

    # -- the op's first message on a paired transport -----------------------------------------
    def _wire_out(self, slot):
        """What to send of the sealed ``slot``: its frame, or frame and record (the op's first)."""
        if self.t.paired and self.record_room and self.t.put_record(slot.trailer):
            return slot.wire
        return slot.frame

    def _recv_posts(self, slots, src) -> list:
        """Post the receives of ``slots`` from ``src``: the op's first message for frame and
        record (paired)."""
        t = self.t
        if slots and t.paired and self.record_room and t.record_due():
            first = self._first = t.irecv(slots[0].wire, src)
            return [first] + [t.irecv(s.frame, src) for s in slots[1:]]
        return [t.irecv(s.frame, src) for s in slots]

    def _expect_record(self, src) -> None:
        """Before the receives of clear frames from ``src``: the op's record, if it is due, comes
        alone first (the transport posts its receive now)."""
        req = self.t.expect_record(src)
        if req is not None:
            self.pending.append(req)
            self._first_record = True

    def _record_first(self, src) -> None:
        """Before the first clear frame from ``src`` is looked at: its record, checked (raises on
        a disagreement)."""
        if self._first_record:
            self._first_record = False
            self.t.wait_record(self.timeout, src, self.op_label)

    def _got(self, req, slot, src) -> int:
        """Wait for ``req`` into ``slot``; the frame's bytes (the op's first message: once its
        record was checked, which raises on a disagreement)."""
        got = self.t.wait_recv(req, self.timeout, src, self.op_label)
        if req is self._first:
            self._first = None
            got = self.t.take_record(slot.wire, got, src, self.op_label)
        return got

    # -- sealing -----------------------------------------------------------------------------
    def sealed_frames(self, send: Send):
        """Seal ``send.pieces`` into slots of workspace ``send.ws`` and yield each frame as soon
        as it is sealed (in the crypto pool when there is more than one chunk).  Clear frames:
        the pieces themselves where the Send lends them, else copies in slots' bodies; the op's
        record goes alone before them (paired)."""
        group, pieces, n = send.group, send.pieces, len(send.pieces)
        sender = send.origin if group else self.rank
        key = self._protect(group, sender, send.dst)
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
                body = self._clear_frame(body)
                _copy_out(body, piece)
                yield body
            return
        slots = self.ws.slots(send.ws, send.sizes)
        isz, step, dst = self.itemsize, send.step, send.dst

        def job(j):
            self._fill(slots[j], suite, group, step, j, n, sender, dst, len(pieces[j]) // isz)
            key.seal(slots[j], pieces[j])

        pool = self.pool if n > 1 else None
        if pool is None:
            for j in range(n):
                job(j)
                yield self._wire_out(slots[j]) if j == 0 else slots[j].frame
            return
        futs = [pool.submit(job, j) for j in range(n)]
        try:
            for j, (f, slot) in enumerate(zip(futs, slots)):
                f.result()
                yield self._wire_out(slot) if j == 0 else slot.frame
        finally:
            for f in futs:
                f.cancel()

    # -- sends: waited for at the next step, never at the end of the op ---------------------
    def _settle(self) -> None:
        """Wait for the sends of the earlier steps, before this step seals into (or receives
        into) workspace they may still be read from.  The sends of an op's last step are not
        waited for in the op (unless they went out from a lending Send's pieces: ``lent``): a
        peer that received everything may return and stop calling MPI, and MPICH completes a
        large send only while its receiver makes progress; the ``SecureComm`` waits for them
        before its next op reuses the workspace (docs/design.md)."""
        if self.sends:
            reqs, peers = zip(*self.sends)
            self.sends = []
            self.t.wait_sends(reqs, self.timeout, peers, self.op_label)
        self.lent = False

    def _sent(self, reqs, peer) -> None:
        self.pending += reqs
        self.sends += [(r, peer) for r in reqs]

    # -- receipts: a hop of many frames is acknowledged (docs/design.md, "Completion") ---------
    def acked(self, frames: int, nbytes: int, clear: bool) -> bool:
        """Whether a hop of ``frames`` frames of ``nbytes`` payload bytes in all (``clear``: not
        sealed) is acknowledged: more than ``receipt_after`` frames, or a clear hop of at least
        :data:`ACK_CLEAR_BYTES` (never on a transport without receipts).  Both ends of a hop
        know all three, so both ask this and agree."""
        return frames > self.receipt_after or (clear and nbytes >= self.ack_clear)

    def _receipt_tags(self, way: str, peer: int) -> tuple[bytes, bytes]:
        """The op's number (8 bytes) and the tag of the next receipt ``way`` ("out": this rank
        gives it to ``peer``; "in": ``peer`` gives it to this rank).  Receipts of a pair match in
        order (one channel), so each end numbers them alike; the tag is the pair's
        (:mod:`seccomm.control`) over op number and that count, its direction's half."""
        n = self._receipt_n.get((way, peer), 0)
        self._receipt_n[way, peer] = n + 1
        seq = self.frame.seq.to_bytes(8, "big")
        sent, got = self.control.tags(RECEIPT_LABEL, peer, seq + n.to_bytes(4, "big"))
        return seq, sent if way == "out" else got

    def _await_receipt(self, peer: int) -> None:
        """After sending an acknowledged hop (:meth:`acked`) to ``peer``: post the receive of its
        receipt (waited for by :meth:`finish`)."""
        buf = np.empty(RECEIPT_BYTES + 8, np.uint8)  # (room to tell a longer receipt from one)
        req = self.t.irecv_receipt(buf, peer)
        self.pending.append(req)
        self.receipts.append((req, buf, peer, b"".join(self._receipt_tags("in", peer))))

    def _give_receipt(self, peer: int) -> None:
        """Once every frame of an acknowledged hop (:meth:`acked`) from ``peer`` is in: the
        receipt, :data:`RECEIPT_BYTES`: the op's sequence number (8 bytes, big-endian) and its
        tag (16, :meth:`_receipt_tags`)."""
        msg = np.frombuffer(b"".join(self._receipt_tags("out", peer)), np.uint8).copy()
        req = self.t.isend_receipt(msg, peer)
        self.pending.append(req)
        self.given.append((req, peer, msg))

    def finish(self) -> None:
        """At the op's end (:meth:`SecureComm._op <seccomm.comm.SecureComm._op>`): wait for the
        receipts of this rank's acknowledged hops, so that it returns only once their
        receivers have every frame (a rank that returns and stops calling MPI would otherwise
        leave them waiting on its queued sends), and for its own receipts to be handed to MPI
        (small: they complete without their receiver).  A receipt that does not come within the
        deadline blames its receiver, as any wait; one of another length, another op's number or
        a tag that fails raises :class:`~seccomm.errors.FrameError` naming it."""
        t, timeout, label = self.t, self.timeout, self.op_label
        for req, buf, peer, want in self.receipts:
            got = t.wait_recv(req, timeout, peer, label)
            if got != RECEIPT_BYTES or not hmac.compare_digest(buf[:RECEIPT_BYTES].tobytes(), want):
                raise FrameError(
                    f"{label}: the receipt from rank {peer} is not this op's ({got} bytes; altered, "
                    f"replayed or of another op)",
                    peer=peer,
                    op=self.collective,
                    seq=self.frame.seq,
                )
        self.receipts = []
        if self.given:
            reqs, peers, _ = zip(*self.given)
            t.wait_sends(reqs, timeout, peers, label)
            self.given = []

    # -- one step ----------------------------------------------------------------------------
    def exchange(self, send: Send | None = None, recv: Recv | None = None) -> None:
        """Run one step: post receives, seal+send, then open+consume in chunk order."""
        t = self.t
        if self.sends:
            self._settle()
        rreqs = sreqs = key = None
        if recv is not None:
            if recv.sizes is None:
                recv.sizes = [e * self.itemsize for e in recv.elems]
            recv.slots = self.ws.slots(recv.ws, recv.sizes)
            key = self._protect(recv.group, recv.origin if recv.group else recv.src, self.rank)
            recv.clear = key.suite.clear
            if recv.clear:
                rreqs = self._recv_clear(recv)
            else:
                rreqs = self._recv_posts(recv.slots, recv.src)
            self.pending += rreqs
        if send is not None:
            if send.frames is not None:
                frames = send.frames
                send.acked = self.acked(len(frames), sum(send.sizes), send.clear)
            else:
                nbytes = sum(send.sizes)
                # (the hop's clear-ness as the receiver asks it; only where the bytes could matter)
                clear = (
                    nbytes >= self.ack_clear
                    and self._protect(
                        send.group, send.origin if send.group else self.rank, send.dst
                    ).suite.clear
                )
                send.acked = self.acked(len(send.sizes), nbytes, clear)
                frames = self.sealed_frames(send)
            sreqs = [t.isend(f, send.dst) for f in frames]
            self._sent(sreqs, send.dst)
            if send.acked:
                self._await_receipt(send.dst)
        if recv is not None:
            self._drain(recv, rreqs, key)
            if self.acked(len(rreqs), sum(recv.sizes), recv.clear):
                self._give_receipt(recv.src)

    def _recv_clear(self, recv) -> list:
        """Receive requests for ``recv``'s clear frames: straight into ``recv.outs`` where the
        step allows it (``direct``, host engine), else into the slots' bodies; the op's record
        first where it is due."""
        t, src = self.t, recv.src
        if not recv.behind:
            self._expect_record(src)
        recv.landed = recv.direct and self.receives_direct
        if recv.landed:
            return [t.irecv(out, src) for out in recv.outs]
        return [t.irecv(self._clear_frame(s), src) for s in recv.slots]

    def _drain(self, recv: Recv, rreqs, key):
        """Wait for ``recv``'s frames (``rreqs``), each opened under ``key`` (the keyed suite of
        its hop) and consumed or copied out as soon as it is in."""
        src, group, slots, outs = recv.src, recv.group, recv.slots, recv.outs
        step = GROUP_STEP if group else recv.step
        consume, n = recv.consume, len(slots)
        if recv.clear:  # nothing to verify: check the lengths, then reduce or copy out
            self._record_first(src)
            landed, body = recv.landed, self._clear_frame
            for j, req in enumerate(rreqs):
                got = self.t.wait_recv(req, self.timeout, src, self.op_label)
                self._check_len(got, recv.sizes[j], j, n, src, step, CLEAR.suite)
                if consume is not None:
                    consume(j, body(slots[j]))
                elif not landed:
                    _copy_out(outs[j], body(slots[j]))
            return
        sender = recv.origin if group else src
        suite = key.suite
        rank, elems = self.rank, recv.elems
        scratch = self.ws.scratch if consume is None and suite.confidential else None

        def job(j):
            slot = slots[j]
            self._fill(slot, suite, group, step, j, n, sender, rank, elems[j])
            if consume is not None:  # outs[j]: a private accumulator
                consume(j, self._open(slot, key, outs[j], src, step, j, n))
                return
            tmp = outs[j] if scratch is None else scratch(len(slot.body))
            _copy_out(outs[j], self._open(slot, key, tmp, src, step, j, n))

        pool = self.pool if n > 1 else None
        if pool is None:
            for j, req in enumerate(rreqs):
                self._check_len(self._got(req, slots[j], src), len(slots[j].frame), j, n, src, step)
                job(j)
            return
        futs = []
        try:
            for j, req in enumerate(rreqs):
                self._check_len(self._got(req, slots[j], src), len(slots[j].frame), j, n, src, step)
                futs.append(pool.submit(job, j))
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
        """``step()``: exchange one chunk with ``peer`` under direction keys (recursive
        doubling's small messages): the same frames as :meth:`exchange`, with the least work per
        call.  ``piece``/``out``: uint8 views of ``elems`` elements, ``out`` private workspace
        memory (the chunk is decrypted into it); ``consume(0, pt)`` gets the verified plaintext.
        ``lend``: as :class:`Send`'s (``consume`` never writes over ``piece``).
        A prepared step (a repeated call's plan keeps it): its keys and slots are kept while the
        epoch stays (cached slots keep their buffer alive if it grows), and a transport that
        offers a :meth:`pair link <seccomm.transports.base.Transport.pair_link>` to ``peer``
        moves its frames.  ``summed``: ``(cur, res, theirs_first)`` where ``consume`` writes
        ``res = cur + theirs`` (the sum of recursive doubling's one swap on two ranks): the step
        then offers ``step.express(epoch, agreement, tail)``, the op's compiled swap
        (:mod:`seccomm.express`) or ``None`` where it does not apply."""
        t, frame, rank, ws = self.t, self.frame, self.rank, self.ws
        nbytes, link, kept = elems * self.itemsize, t.pair_link(peer), [-1]
        if self._protect(False, rank, peer).suite.clear:
            return self._clear_swap(peer, step, piece, elems, out, consume, lend, summed)

        def run_step():
            if self.sends:
                self._settle()
            if kept[0] != frame.epoch:
                skey, rkey = self._protect(False, rank, peer), self._protect(False, peer, rank)
                sslot, rslot = ws.slots("send", [nbytes])[0], ws.slots("recv", [nbytes])[0]
                kept[:] = frame.epoch, skey, rkey, sslot, rslot, skey.suite.suite_id, rkey.suite.suite_id
            _, skey, rkey, sslot, rslot, sid, rid = kept
            frame.fill(sslot, KEY_DIRECTION, sid, step, 0, 1, rank, peer, elems)
            skey.seal(sslot, piece)
            # first the send (the peer waits on it); each request kept as soon as it is posted;
            # the op's first messages carry its record (paired)
            sent = sslot.wire if t.paired and t.put_record(sslot.trailer) else sslot.frame
            sreq = t.isend(sent, peer) if link is None else link.send(sent)
            self.pending.append(sreq)
            self.sends.append((sreq, peer))
            first = t.paired and t.record_due()
            into = rslot.wire if first else rslot.frame
            rreq = t.irecv(into, peer) if link is None else link.recv(into)
            self.pending.append(rreq)
            frame.fill(rslot, KEY_DIRECTION, rid, step, 0, 1, peer, rank, elems)
            if link is None:
                got = t.wait_recv(rreq, self.timeout, peer, self.op_label)
            else:
                got = link.wait(rreq, self.timeout, self.op_label)
            if first:
                got = t.take_record(into, got, peer, self.op_label)
            if got != len(rslot.frame):
                self._check_len(got, len(rslot.frame), 0, 1, peer, step)
            consume(0, self._open(rslot, rkey, out, peer, step, 0, 1))

        if summed is not None and getattr(link, "express", None) is not None and express.enabled():
            run_step.express = lambda epoch, agreement, tail: self._express(
                link, peer, step, piece, elems, out, consume, summed, epoch, agreement, tail
            )
        return run_step

    def _express(
        self, link, peer, step, piece, elems, out, consume, summed, epoch, agreement, tail
    ):  # pragma: no mutate block (MPI: tests/mpi_worker.py express)
        """:meth:`swap_step`'s (or :meth:`_clear_swap`'s) compiled swap under ``epoch``'s keys
        (:mod:`seccomm.express`), in slots of its own (their nonce and header written here once;
        the op's number, per op, by the swap), or ``None`` where it does not apply (a hop under
        GMAC, a dtype it does not sum).  Its ``python`` attribute keeps what
        :meth:`express_rest` needs: the link, the peer and ``landed(got)``, the step's own
        checks of a message of ``got`` bytes in its receive slot, then the sum."""
        cur, res, theirs_first = summed
        red = express.SUM_CODES.get(res.dtype)
        self.frame.epoch = epoch
        skey, rkey = self._protect(False, self.rank, peer), self._protect(False, peer, self.rank)
        clear = skey.suite.clear
        if red is None or rkey.suite.clear != clear or not (clear or type(skey) is type(rkey) is AEADKey):
            return None
        mac, lower = agreement.pair_mac(peer)
        nbytes, ws = elems * self.itemsize, Workspace()
        # (the swap keeps what follows; the run's requests keep the swap: the run and the link, and
        # through them the transport and its last check of this run, are held weakly: no cycle)
        run = weakref.ref(self)
        sslot, rslot = ws.slots("send", [nbytes])[0], ws.slots("recv", [nbytes])[0]
        if clear:  # (the payload alone, its record behind it: _clear_swap's frames)
            swire, rwire, sframe, rframe = (
                sslot.wire[: nbytes + RECORD_ROOM],
                rslot.wire[: nbytes + RECORD_ROOM],
                sslot.body,
                rslot.body,
            )
            out, seal, open_ = rslot.body, None, None

            def landed(got):
                op = run()
                got = op.t.take_record(rwire, got, peer, op.op_label)
                if got != nbytes:
                    op._check_len(got, nbytes, 0, 1, peer, step, CLEAR.suite)
                consume(0, rframe)
        else:
            frame = self.frame
            frame.fill(sslot, KEY_DIRECTION, skey.suite.suite_id, step, 0, 1, self.rank, peer, elems)
            frame.fill(rslot, KEY_DIRECTION, rkey.suite.suite_id, step, 0, 1, peer, self.rank, elems)
            swire, rwire, sframe, rframe = sslot.wire, rslot.wire, sslot.frame, rslot.frame
            seal, open_ = skey.aead.encrypt_into, rkey.aead.decrypt_into

            def landed(got):
                op = run()
                got = op.t.take_record(rwire, got, peer, op.op_label)
                if got != len(rframe):
                    op._check_len(got, len(rframe), 0, 1, peer, step)
                consume(0, op._open(rslot, rkey, out, peer, step, 0, 1))

        comm, tag, spins = link.express
        sw = express.swap(
            comm=comm, peer=peer, tag=tag, spins=spins, red=red, theirs_first=int(theirs_first),
            snonce=sslot.nonce, shdr=sslot.header, piece=piece, sframe=sframe, swire=swire,
            rnonce=rslot.nonce, rhdr=rslot.header, rframe=rframe, rwire=rwire, out=out,
            cur=cur, res=res, seal=seal, open=open_, mac=mac, tail=tail, lower=lower,
        )  # fmt: skip
        sw.python = (weakref.ref(link), peer, landed)
        return sw

    def express_rest(self, sw, got) -> None:  # pragma: no mutate block (MPI: tests/mpi_worker.py express)
        """The rest of an op whose compiled swap ``sw`` (:meth:`_express`) did not end in the
        usual case: ``got`` is what its ``start`` returned (the bytes received, or
        :data:`~seccomm.express.PENDING`, :data:`~seccomm.express.MPIERR`, or the exception it
        raised before it posted anything).  Runs inside ``SecureComm._op`` after its record and
        agreement start: the swap's requests become this run's, then the Python path's own code
        waits (deadline, notices), checks and raises as in :meth:`swap_step`."""
        link, peer, landed = sw.python
        link = link()  # (alive: the plan's step keeps it)
        link.first_done()  # (the record went out behind the frame; the first receive is posted for both)
        if isinstance(got, BaseException):
            raise got
        sh, rh = sw.requests()
        sreq = link.adopt(sh, sw)
        self.pending.append(sreq)
        self.sends.append((sreq, peer))
        rreq = link.adopt(rh, sw)  # (after an MPI error MPI may have freed it: then a null request)
        self.pending.append(rreq)
        if got == express.MPIERR:
            raise link.error(sw.mpi_error, self.op_label)
        if got == express.PENDING:
            got = link.wait(rreq, self.timeout, self.op_label)
            if not sw.finish(got):
                return
        landed(got)

    def _clear_swap(self, peer, step, piece, elems, out, consume, lend, summed=None):
        """:meth:`swap_step` of clear frames: the payload alone, sent from ``piece`` where it is
        lent (else from a copy in a slot's body), received into a slot's body and consumed from
        there.  ``lend``: as :class:`Send`'s.  An acknowledged swap (:meth:`acked`: large
        enough) ends once both receipts are in.  On a paired transport (two ranks: recursive
        doubling's one swap, the op's last send) the op's record rides behind the frame in the
        slot's room, as behind a sealed frame, where the swap is not acknowledged (then it is a
        copy), and goes alone before it where it is (``Send.behind``: the peer's step asks
        :meth:`acked` too, and does the same).  ``summed``: as :meth:`swap_step`'s (a swap with
        its record behind the frame may be compiled)."""
        t, nbytes = self.t, elems * self.itemsize
        paired = t.paired
        ack = self.acked(1, nbytes, True)
        lent = lend is not Lend.COPY and self.receives_direct and (ack or (lend is Lend.STEP and not paired))
        behind, alone = paired and not ack, paired and ack
        # (kept: cached slots keep their buffer alive if it grows; clear frames need no key)
        rslot = self.ws.slots("recv", [nbytes])[0]
        body, rwire = rslot.body, rslot.wire[: nbytes + RECORD_ROOM]
        if not lent:
            sslot = self.ws.slots("send", [nbytes])[0]
            sbody, swire = sslot.body, sslot.wire[: nbytes + RECORD_ROOM]
            strailer = swire[nbytes:]

        def run_step():
            if self.sends:
                self._settle()
            if alone:  # (the record alone, first)
                t.send_record()
            if lent:
                sent = piece
                self.lent = self.lent or not ack  # (acknowledged: the op ends once it is in)
            else:
                _copy_out(sbody, piece)
                sent = swire if behind and t.put_record(strailer) else sbody
            sreq = t.isend(sent, peer)
            self.pending.append(sreq)
            self.sends.append((sreq, peer))
            if ack:
                self._await_receipt(peer)
            if alone:
                self._expect_record(peer)
            first = behind and t.record_due()
            rreq = t.irecv(rwire if first else body, peer)
            self.pending.append(rreq)
            if alone:
                self._record_first(peer)
            got = t.wait_recv(rreq, self.timeout, peer, self.op_label)
            if first:
                got = t.take_record(rwire, got, peer, self.op_label)
            if got != nbytes:
                self._check_len(got, nbytes, 0, 1, peer, step, CLEAR.suite)
            consume(0, body)
            if ack:
                self._give_receipt(peer)

        link = t.pair_link(peer)
        if summed is not None and behind and getattr(link, "express", None) is not None and express.enabled():
            run_step.express = lambda epoch, agreement, tail: self._express(
                link, peer, step, piece, elems, None, consume, summed, epoch, agreement, tail
            )
        return run_step

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
        self._settle()
        if parent is None:
            for f in self.sealed_frames(Send(ANY_RANK, group=True, origin=origin, pieces=pieces_or_outs)):
                for c in children:
                    self._sent([t.isend(f, c)], c)
            self._relay_receipts(None, children, n)
            return
        if not children:  # a leaf: it sends nothing this op (paired: its record goes alone, now)
            t.send_record()
        slots = self.ws.slots("recv", [e * self.itemsize for e in elems])
        key = self._protect(True, origin, self.rank)
        clear = key.suite.clear
        if clear:
            self._expect_record(parent)
            rreqs = [t.irecv(self._clear_frame(s), parent) for s in slots]
        else:
            rreqs = self._recv_posts(slots, parent)
        self.pending += rreqs
        for j, req in enumerate(rreqs):
            slot = slots[j]
            out = pieces_or_outs[j]
            if clear:
                self._record_first(parent)
                got = t.wait_recv(req, self.timeout, parent, self.op_label)
                self._check_len(got, len(out), j, n, parent, GROUP_STEP, key.suite)
                for c in children:
                    self._sent([t.isend(slot.body, c)], c)
                _copy_out(out, slot.body)
                continue
            self._check_len(self._got(req, slot, parent), len(slot.frame), j, n, parent)
            for c in children:
                self._sent([t.isend(slot.frame, c)], c)
            self._fill(slot, key.suite, True, GROUP_STEP, j, n, origin, self.rank, elems[j])
            tmp = self.ws.scratch(len(slot.body)) if key.suite.confidential else out
            _copy_out(out, self._open(slot, key, tmp, parent, GROUP_STEP, j, n))
        self._relay_receipts(parent, children, n, fan_in)

    def _relay_receipts(self, parent, children, n, fan_in=1) -> None:
        """Receipts of a relay of ``n`` frames, counted per sender over all its children (MPICH
        delivers at most about 64 messages from a rank that stopped calling MPI, over all its
        receivers: docs/design.md, "Completion"): where ``parent`` sent more than
        ``receipt_after`` frames in all (``n`` to each of its ``fan_in`` children), the receipt
        to it once every frame is in; where this rank sends more, the receives of its
        ``children``'s.  Both ends of a hop know the tree, so they agree."""
        if parent is not None and n * fan_in > self.receipt_after:
            self._give_receipt(parent)
        if n * len(children) > self.receipt_after:
            for c in children:
                self._await_receipt(c)
