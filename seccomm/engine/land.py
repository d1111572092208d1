"""The one place a received frame is accepted: :func:`land`.

Every path that receives frames (a step's exchange, the one-chunk swap, a relay, the compiled
swap's fallback, the device engine) describes what it expects as an :class:`Inbox` and hands each
frame to :func:`land`, which, in this order: waits for it (deadline and notices: the transport's
wait), checks the op's argument record where the message carries it (or, before clear frames,
where it came alone), checks the frame's length, forwards it where the hop forwards (a relay),
and then has the inbox verify its tag under the AAD this rank expects and only then hand the
plaintext on (:meth:`Inbox.accept`).  A failure raises :class:`~seccomm.errors.AuthenticationError`
naming the sender, the op, the step and the chunk; nothing unverified reaches a caller's buffer.

A chunk's plaintext is consumed (copied or reduced) only after its tag verified.  Unverified bytes
never touch a caller's buffer, not even for a moment (NIST SP 800-38D §7.2: FAIL returns no
plaintext): ``decrypt_into`` writes the decryption into its output before it checks the tag, so a
chunk bound for the caller's buffer (allgather, bcast, alltoall, the last step of recursive
doubling) is decrypted into this thread's private scratch
(:meth:`~seccomm.framing.Workspace.scratch`) and copied out once it verified.  A chunk that is
reduced (``consume``) is decrypted into a workspace accumulator, which is private already.
Decrypting in place into the slot body is not an option: ``cryptography`` does not document input
and output of ``decrypt_into`` as allowed to alias (its Rust side borrows them as ``&[u8]`` and
``&mut [u8]`` at once), and a group frame is forwarded from that body after (allgather) or while
(bcast) it is opened.  GMAC and ``none`` verify before anything is copied (their ``open`` returns
the slot body), so they need no scratch."""

from __future__ import annotations

import numpy as np
from cryptography.exceptions import InvalidTag

from ..errors import AuthenticationError
from ..framing import GROUP_STEP
from ..suites import SUITES

#: the keyed ``none`` suite: hops left in the clear by the encrypt policy (a clear frame is its
#: payload alone: :mod:`seccomm.suites`)
CLEAR = SUITES["none"].keyed(None)


def copy_out(out, pt) -> None:
    """Copy the plaintext ``pt`` into ``out`` (both uint8 buffers of one size), unless it is there."""
    if pt is not out:
        np.copyto(np.frombuffer(out, np.uint8), np.frombuffer(pt, np.uint8))


class Inbox:
    """The frames one hop receives from ``peer``, as this rank expects them.

    ``step``: the step (:data:`~seccomm.framing.GROUP_STEP` for group frames); ``key``: the keyed
    suite they open under (the ``none`` suite's for clear frames); ``frames[j]``: the buffer frame
    j is received into, as long as the frame must be (a slot's frame, or for clear frames a slot's
    body or the caller's memory); ``slots[j]``: its slot (sealed frames).  Once a frame verified:
    ``consume(j, pt)`` where it is given (``outs[j]``: private memory that the frame is decrypted
    into), else the plaintext is copied to ``outs[j]`` (where ``outs`` is given: the caller's
    buffer, written only after the tag verified).  ``fill``: ``(group, sender, elems)`` where
    :meth:`accept` writes each slot's expected header (AAD) itself, ``None`` where the poster
    wrote it.  ``link``: the pair link the frames come over (``None``: the transport).
    ``forward(j)``: called once frame j is in and its length checked, before it is opened (a
    relay).  ``record``: the buffer of the op's first message where it carries the record too
    (set by whoever posts the receive, per op)."""

    __slots__ = ("peer", "step", "key", "frames", "slots", "outs", "consume", "fill", "link")
    __slots__ += ("forward", "record")

    def __init__(self, peer, step, key, frames, slots=None, outs=None, consume=None, fill=None):
        self.peer, self.step, self.key, self.frames, self.slots = peer, step, key, frames, slots
        self.outs, self.consume, self.fill = outs, consume, fill
        self.link = self.forward = self.record = None

    @property
    def origin(self):
        """The rank that sealed this inbox's frames where they are group frames (whose origin
        proofs :mod:`seccomm.engine.origin` checks), else ``None``."""
        return self.fill[1] if self.fill is not None and self.fill[0] else None

    @property
    def suite(self):
        """The frames' :class:`~seccomm.suites.CipherSuite` (named in errors)."""
        return self.key.suite

    def accept(self, run, j: int) -> None:
        """Frame j, in and of the right length (:func:`land`): verify its tag under the header
        this rank expects and hand the plaintext on; :class:`AuthenticationError` when it fails.
        ``run``: the :class:`~seccomm.engine.run.OpRun` (its frame context and scratch)."""
        key, outs = self.key, self.outs
        if key.suite.clear:
            pt = self.frames[j]
        else:
            slot = self.slots[j]
            if self.fill is not None:
                group, sender, elems = self.fill
                run.fill(slot, key.suite, group, self.step, j, len(self.frames), sender, run.rank, elems[j])
            into = outs[j]
            if self.consume is None and key.suite.confidential:  # (outs: the caller's buffer)
                into = run.ws.scratch(len(slot.body))
            pt = open_frame(run, self, j, into)
            if run.origins is not None and self.origin is not None:
                run.origins.check(self, j, self.origin, pt)
        if self.consume is not None:
            self.consume(j, pt)
        elif outs is not None:
            copy_out(outs[j], pt)


def land(run, box: Inbox, j: int, req=None, got=None, defer=None):
    """Accept frame j of ``box`` (the module docstring says in which order): wait for ``req``
    (unless ``got``, its bytes, says it is in already), check the record and the length, forward
    it where ``box`` forwards, then :meth:`Inbox.accept` it, or ``defer(box.accept, run, j)``
    (a crypto pool's ``submit``, returning what it returns; the device engine opens a step's
    frames in one batched kernel once all are in).  ``run``: the
    :class:`~seccomm.engine.run.OpRun`.  Raises :class:`~seccomm.errors.AuthenticationError`
    (length, tag), and whatever the transport's waits and record checks raise
    (:class:`~seccomm.errors.PeerTimeoutError`, :class:`~seccomm.errors.PeerAbortError`,
    :class:`~seccomm.errors.ArgumentMismatchError`)."""
    t, peer = run.t, box.peer
    if got is None:
        if j == 0:
            run.first.check_alone(peer)
        if box.link is None:
            got = t.wait_recv(req, peer)
        else:
            got = box.link.wait(req)
    if j == 0 and box.record is not None:
        got = t.take_record(box.record, got, peer)
    want = len(box.frames[j])
    if got != want:  # a frame of the wrong length cannot be authentic
        raise frame_error(run, box, j, f"frame has {got} bytes, expected {want} (truncated or padded)")
    if box.forward is not None:
        box.forward(j)
    if run.origins is not None and box.origin is not None:
        run.origins.ready(box.origin)  # (its origin's MACs, waited for here: not in the pool)
    if defer is None:
        return box.accept(run, j)
    return defer(box.accept, run, j)


def open_frame(run, box: Inbox, j: int, out):
    """Verify frame j of ``box`` (in its slot); return its plaintext (``out`` for a decrypting
    suite, which must be private memory: scratch or an accumulator; the slot's body for GMAC).
    :class:`AuthenticationError` naming the sender and the chunk when the tag fails (``out`` is
    zeroed first: it held the unverified decryption)."""
    key = box.key
    try:
        return key.open(box.slots[j], out)
    except InvalidTag:
        if key.suite.confidential:
            np.frombuffer(out, np.uint8).fill(0)
        raise frame_error(run, box, j) from None


def message_error(run, peer: int, message: str, suite: str, detail: str) -> AuthenticationError:
    """The error for a small message of the op from ``peer`` (``message``: what it is, e.g.
    ``"origin MACs"``) that failed its check under ``suite`` (``detail``: how)."""
    f = run.frame
    return AuthenticationError(
        peer=peer, op=run.collective, seq=f.seq, epoch=f.epoch, suite=suite, message=message, detail=detail
    )


def frame_error(run, box: Inbox, j: int, detail: str = "") -> AuthenticationError:
    """The error for frame j of ``box`` (of all the inbox's frames): the tag failed, or
    ``detail`` says what else is wrong with it."""
    f, step = run.frame, box.step
    return AuthenticationError(
        peer=box.peer,
        op=run.collective,
        seq=f.seq,
        step=None if step == GROUP_STEP else step,
        chunk=j,
        chunks=len(box.frames),
        epoch=f.epoch,
        suite=box.suite.name,
        detail=detail,
    )
