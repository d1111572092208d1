"""One chunk each way with one peer: the small-message fast path (recursive doubling's swaps).

:func:`swap_step` prepares a step of an :class:`~seccomm.engine.run.OpRun` that seals one chunk
for ``peer`` and receives one from it, with the least work per call: a repeated call's plan keeps
the step, and with it its keys, slots and :class:`~seccomm.engine.land.Inbox` while the epoch
stays.  Received frames are accepted by :func:`~seccomm.engine.land.land`, as every other
path's.  Where the swap is recursive doubling's one swap of a sum on two ranks, the step says
so (its ``pair``: a :class:`PairSpec`), and the plan table may have it compiled
(:mod:`seccomm.pairswap`)."""

from __future__ import annotations

from typing import NamedTuple

from ..framing import KEY_DIRECTION, RECORD_ROOM
from .hops import Lend
from .land import CLEAR, Inbox, copy_out, land


class PairSpec(NamedTuple):
    """A swap step that the compiled swap could run (:func:`seccomm.pairswap.offer`): the
    arguments :func:`swap_step` got, its ``run`` and the pair ``link`` its frames go over."""

    run: object
    link: object
    peer: int
    step: int
    piece: object
    elems: int
    out: object  # (None for clear frames: they are consumed from the receive slot)
    consume: object
    summed: tuple


def swap_step(run, peer: int, step: int, piece, elems: int, out, consume, lend=Lend.COPY, summed=None):
    """``step()``: exchange one chunk with ``peer`` under direction keys: the same frames as
    :meth:`~seccomm.engine.run.OpRun.exchange`.  ``piece``/``out``: uint8 views of ``elems``
    elements, ``out`` private workspace memory (the chunk is decrypted into it);
    ``consume(0, pt)`` gets the verified plaintext.  ``lend``: as
    :class:`~seccomm.engine.hops.Send`'s (``consume`` never writes over ``piece``).  A
    transport that offers a :meth:`pair link <seccomm.transports.base.Transport.pair_link>` to
    ``peer`` moves its frames.  ``summed``: ``(cur, res, theirs_first)`` where ``consume`` writes
    ``res = cur + theirs`` (the sum of recursive doubling's one swap on two ranks): the step then
    carries ``step.pair``, a :class:`PairSpec` (over a pair link)."""
    t, frame, rank, ws = run.t, run.frame, run.rank, run.ws
    nbytes, link, kept = elems * run.itemsize, t.pair_link(peer), [-1]
    if run.protect(False, rank, peer).suite.clear:
        return clear_swap(run, peer, step, piece, elems, out, consume, lend, summed)

    def run_step():
        if run.sends:
            run.settle()
        if kept[0] != frame.epoch:  # (slots kept: a cached slot keeps its buffer alive if it grows)
            skey, rkey = run.protect(False, rank, peer), run.protect(False, peer, rank)
            sslot, rslot = ws.slots("send", [nbytes])[0], ws.slots("recv", [nbytes])[0]
            box = Inbox(peer, step, rkey, [rslot.frame], [rslot], [out], consume)
            box.link = link
            kept[:] = frame.epoch, skey, sslot, rslot, box, skey.suite.suite_id, rkey.suite.suite_id
        _, skey, sslot, rslot, box, sid, rid = kept
        frame.fill(sslot, KEY_DIRECTION, sid, step, 0, 1, rank, peer, elems)
        skey.seal(sslot, piece)
        # first the send (the peer waits on it); each request kept as soon as it is posted;
        # the op's first messages carry its record (paired)
        sent = sslot.wire if t.paired and t.put_record(sslot.trailer) else sslot.frame
        sreq = t.isend(sent, peer) if link is None else link.send(sent)
        run.pending.append(sreq)
        run.sends.append((sreq, peer))
        into = box.record = rslot.wire if t.paired and t.record_due() else None
        into = rslot.frame if into is None else into
        rreq = t.irecv(into, peer) if link is None else link.recv(into)
        run.pending.append(rreq)
        frame.fill(rslot, KEY_DIRECTION, rid, step, 0, 1, peer, rank, elems)
        land(run, box, 0, rreq)

    if summed is not None and link is not None:
        run_step.pair = PairSpec(run, link, peer, step, piece, elems, out, consume, summed)
    return run_step


def clear_swap(run, peer, step, piece, elems, out, consume, lend, summed=None):
    """:func:`swap_step` of clear frames: the payload alone, sent from ``piece`` where it is lent
    (else from a copy in a slot's body), received into a slot's body and consumed from there.
    ``lend``: as :class:`~seccomm.engine.hops.Send`'s.  An acknowledged swap
    (:meth:`~seccomm.engine.receipts.Receipts.acked`: large enough) ends once both receipts are
    in.  On a paired transport (two ranks: recursive doubling's one swap, the op's last send) the
    op's record rides behind the frame in the slot's room, as behind a sealed frame, where the
    swap is not acknowledged (then it is a copy), and goes alone before it where it is
    (``Send.behind``: the peer's step asks :meth:`acked` too, and does the same).  ``summed``: as
    :func:`swap_step`'s (a swap with its record behind the frame may be compiled)."""
    t, nbytes = run.t, elems * run.itemsize
    paired = t.paired
    ack = run.acked(1, nbytes, True)
    lent = lend is not Lend.COPY and run.receives_direct and (ack or (lend is Lend.STEP and not paired))
    behind, alone = paired and not ack, paired and ack
    # (kept: cached slots keep their buffer alive if it grows; clear frames need no key)
    rslot = run.ws.slots("recv", [nbytes])[0]
    rwire = rslot.wire[: nbytes + RECORD_ROOM]
    box = Inbox(peer, step, CLEAR, [rslot.body], consume=consume)
    if not lent:
        sslot = run.ws.slots("send", [nbytes])[0]
        sbody, swire = sslot.body, sslot.wire[: nbytes + RECORD_ROOM]
        strailer = swire[nbytes:]

    def run_step():
        if run.sends:
            run.settle()
        if alone:  # (the record alone, first)
            t.send_record()
        if lent:
            sent = piece
            run.lent = run.lent or not ack  # (acknowledged: the op ends once it is in)
        else:
            copy_out(sbody, piece)
            sent = swire if behind and t.put_record(strailer) else sbody
        sreq = t.isend(sent, peer)
        run.pending.append(sreq)
        run.sends.append((sreq, peer))
        if ack:
            run.receipts.expect(run, peer)
        if alone:
            run.first.expect(peer, run.pending)
        box.record = rwire if behind and t.record_due() else None
        rreq = t.irecv(rslot.body if box.record is None else rwire, peer)
        run.pending.append(rreq)
        land(run, box, 0, rreq)
        if ack:
            run.receipts.give(run, peer)

    link = t.pair_link(peer)
    if summed is not None and behind and link is not None:
        run_step.pair = PairSpec(run, link, peer, step, piece, elems, None, consume, summed)
    return run_step
