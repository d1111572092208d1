"""The hop engine shared by every collective: seal, send, receive, open, consume — chunk by chunk.

One :class:`OpRun` per collective call holds the frame context (AAD constants), the keys of the
current epoch and the transport.  :meth:`OpRun.exchange` runs one step of an algorithm: it posts
every receive of the step first, seals and sends each outgoing chunk as soon as it is sealed, and
opens and consumes (copies or reduces) each incoming chunk as soon as it has arrived.  With a
crypto thread pool and more than one chunk, sealing of chunk j+1 overlaps the transfer of chunk j
and opening of chunk j-1 (``cryptography`` releases the GIL).  Frames are written into reusable
workspaces: no allocation per chunk.

A chunk's plaintext reaches the caller's buffer only after its tag verified; a failure raises
:class:`~seccomm.errors.AuthenticationError` and nothing of that chunk is consumed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from cryptography.exceptions import InvalidTag

from .errors import AuthenticationError, FrameError
from .framing import ANY_RANK, GROUP_STEP, KEY_DIRECTION, KEY_GROUP, FrameContext
from .suites import TAG_BYTES


@dataclass
class Send:
    """Outgoing chunks of one step: ``pieces`` (uint8 plaintext views, sealed here) or
    ``frames`` (already-sealed group frames forwarded unchanged)."""

    dst: int
    step: int = 0
    group: bool = False
    origin: int = -1  # group frames: the rank that sealed them
    pieces: list | None = None
    frames: list | None = None
    ws: str = "send"


@dataclass
class Recv:
    """Incoming chunks of one step.  ``outs[j]``: uint8 view where chunk j's plaintext goes;
    ``consume(j, pt)``: called after chunk j verified (default: copy into ``outs[j]``)."""

    src: int
    elems: list
    outs: list
    step: int = 0
    group: bool = False
    origin: int = -1
    consume: Callable | None = None
    ws: str = "recv"
    slots: list = field(default_factory=list)  # filled by exchange (frames to forward)


def _copy_out(out, pt):
    if pt is not out:
        np.copyto(np.frombuffer(out, np.uint8), np.frombuffer(pt, np.uint8))


class OpRun:
    """State of one collective call on a :class:`~seccomm.comm.SecureComm`."""

    def __init__(self, sc, op: str, dtype_code: int, total_count: int, itemsize: int, epoch: int,
                 seq: int, op_index: int):
        self.sc, self.t, self.rank, self.size = sc, sc._transport, sc.rank, sc.size
        self.op, self.itemsize = op, itemsize
        self.ctx = FrameContext(suite_id=sc.suite.suite_id, op=op, dtype_code=dtype_code,
                                job_id=sc._job_id, comm_id=sc._comm_id, epoch=epoch, seq=seq,
                                op_index=op_index, total_count=total_count, itemsize=itemsize)
        self.chunk_elems = max(1, sc.chunk_bytes // itemsize)
        self.what = f"{op} #{seq}"  # names the operation in transport errors
        self.pending: list = []

    # -- keys and policy ---------------------------------------------------------------------
    def _protect(self, group: bool, a: int, b: int):
        """(suite, aead) for a frame; hops in the clear under ``encrypt="inter-node"`` use
        the ``none`` suite with the same framing."""
        sc = self.sc
        if not sc._encrypted_hop(a, b, group):
            return sc._clear_suite, None
        if group:
            return sc.suite, sc._keys.group(self.ctx.epoch)
        return sc.suite, sc._keys.direction(self.ctx.epoch, a, b)

    def _fill(self, slot, suite, group, step, j, n, sender, dst, elems):
        if group:
            self.ctx.fill(slot, key_kind=KEY_GROUP, suite_id=suite.suite_id, step=GROUP_STEP,
                          chunk=j, chunks=n, src=sender, dst=ANY_RANK, elems=elems)
        else:
            self.ctx.fill(slot, key_kind=KEY_DIRECTION, suite_id=suite.suite_id, step=step,
                          chunk=j, chunks=n, src=sender, dst=dst, elems=elems)

    # -- sealing and opening -----------------------------------------------------------------
    def sealed_frames(self, send: Send):
        """Seal ``send.pieces`` into slots of workspace ``send.ws`` and yield each frame as soon
        as it is sealed (sealing runs in the crypto pool when there is more than one chunk)."""
        group, pieces, n = send.group, send.pieces, len(send.pieces)
        sender = send.origin if group else self.rank
        dst = ANY_RANK if group else send.dst
        suite, aead = self._protect(group, sender, send.dst)
        slots = self.sc._ws.slots(send.ws, [len(p) for p in pieces])

        def job(j):
            self._fill(slots[j], suite, group, send.step, j, n, sender, dst,
                       len(pieces[j]) // self.itemsize)
            suite.seal(aead, slots[j], pieces[j])

        pool = self.sc._pool if n > 1 else None
        if pool is None:
            for j in range(n):
                job(j)
                yield slots[j].frame
            return
        futs = [pool.submit(job, j) for j in range(n)]
        try:
            for f, slot in zip(futs, slots):
                f.result()
                yield slot.frame
        finally:
            for f in futs:
                f.cancel()

    def _open(self, slot, suite, aead, out, peer, step, j, n):
        try:
            return suite.open(aead, slot, out)
        except InvalidTag:
            raise AuthenticationError(peer=peer, op=self.op, seq=self.ctx.seq,
                                      step=None if step == GROUP_STEP else step, chunk=j,
                                      chunks=n, epoch=self.ctx.epoch, suite=suite.name) from None

    # -- one step ----------------------------------------------------------------------------
    def exchange(self, send: Send | None = None, recv: Recv | None = None) -> None:
        """Run one step: post receives, seal+send, then open+consume in chunk order."""
        t, sc, timeout = self.t, self.sc, self.sc.timeout
        rreqs = []
        if recv is not None:
            recv.slots = sc._ws.slots(recv.ws, [e * self.itemsize for e in recv.elems])
            for slot in recv.slots:
                rreqs.append(t.irecv(slot.frame, recv.src))
            self.pending += rreqs
        sreqs = []
        if send is not None:
            frames = send.frames if send.frames is not None else self.sealed_frames(send)
            for f in frames:
                sreqs.append(t.isend(f, send.dst))
            self.pending += sreqs
        if recv is not None:
            self._drain(recv, rreqs)
        if sreqs:
            t.wait_sends(sreqs, timeout, [send.dst] * len(sreqs), self.what)

    def _drain(self, recv: Recv, rreqs):
        t, timeout = self.t, self.sc.timeout
        sender = recv.origin if recv.group else recv.src
        suite, aead = self._protect(recv.group, sender, self.rank)
        consume = recv.consume or (lambda j, pt: _copy_out(recv.outs[j], pt))
        n = len(recv.slots)
        pool = self.sc._pool if n > 1 else None

        def job(j):
            slot = recv.slots[j]
            self._fill(slot, suite, recv.group, recv.step, j, n, sender, self.rank, recv.elems[j])
            pt = self._open(slot, suite, aead, recv.outs[j], recv.src, recv.step, j, n)
            consume(j, pt)

        futs = []
        try:
            for j, req in enumerate(rreqs):
                got = t.wait_recv(req, timeout, recv.src, self.what)
                want = len(recv.slots[j].frame)
                if got != want:
                    raise FrameError(f"{self.op} #{self.ctx.seq}: frame {j}/{n} from rank "
                                     f"{recv.src} has {got} bytes, expected {want} (truncated)",
                                     peer=recv.src, op=self.op, seq=self.ctx.seq)
                if pool is None:
                    job(j)
                else:
                    futs.append(pool.submit(job, j))
            for f in futs:
                f.result()
        finally:
            for f in futs:
                f.cancel()
            for f in futs:
                if not f.cancelled():
                    f.exception()  # let running jobs finish before buffers are reused

    # -- tree relay (broadcast) --------------------------------------------------------------
    def relay(self, parent: int | None, children: list, pieces_or_outs: list, elems: list,
              origin: int) -> None:
        """Move group frames down a tree: the origin seals ``pieces``; every other rank receives
        chunk j from ``parent``, forwards the frame to ``children`` as soon as it arrived, then
        opens it into ``outs[j]``.  Pipelined per chunk (a chain overlaps its hops)."""
        t, timeout, n = self.t, self.sc.timeout, len(elems)
        if parent is None:
            sreqs, peers = [], []
            for f in self.sealed_frames(Send(dst=ANY_RANK, group=True, origin=origin,
                                             pieces=pieces_or_outs)):
                for c in children:
                    sreqs.append(t.isend(f, c))
                    peers.append(c)
            self.pending += sreqs
            t.wait_sends(sreqs, timeout, peers, self.what)
            return
        recv = Recv(src=parent, elems=elems, outs=pieces_or_outs, group=True, origin=origin)
        recv.slots = self.sc._ws.slots("recv", [e * self.itemsize for e in elems])
        rreqs = [t.irecv(s.frame, parent) for s in recv.slots]
        self.pending += rreqs
        suite, aead = self._protect(True, origin, self.rank)
        sreqs, peers = [], []
        for j, req in enumerate(rreqs):
            slot = recv.slots[j]
            got = t.wait_recv(req, timeout, parent, self.what)
            if got != len(slot.frame):
                raise FrameError(f"{self.op} #{self.ctx.seq}: frame {j}/{n} from rank {parent} "
                                 f"has {got} bytes, expected {len(slot.frame)} (truncated)",
                                 peer=parent, op=self.op, seq=self.ctx.seq)
            for c in children:
                sreqs.append(t.isend(slot.frame, c))
                peers.append(c)
            self.pending += sreqs[-len(children):] if children else []
            self._fill(slot, suite, True, GROUP_STEP, j, n, origin, self.rank, elems[j])
            _copy_out(pieces_or_outs[j], self._open(slot, suite, aead, pieces_or_outs[j],
                                                    parent, GROUP_STEP, j, n))
        t.wait_sends(sreqs, timeout, peers, self.what)


def frame_bytes(elems: int, itemsize: int) -> int:
    """Bytes on the wire for a chunk of ``elems`` elements: body plus the 16-byte tag."""
    return elems * itemsize + TAG_BYTES
