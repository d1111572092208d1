"""The hop engine on device buffers: every step seals and opens its chunks in one batched launch
of seccomm's own kernels (:class:`~seccomm.gpu.aead.GPUAEAD`), with exactly the frames of the CPU
engine.

:class:`DeviceOpRun` is an :class:`~seccomm.engine.OpRun` whose workspaces, frames and
plaintext live on the device.  The collectives are the same code: they cut the caller's array
into chunk views, and the consume callbacks reduce with numpy ufuncs, which dispatch to CuPy.
Per step the host builds the nonces and AAD headers (the same :class:`~seccomm.framing.FrameContext`
as the CPU engine), uploads them with the step's key, and launches one seal or open for all
chunks.  A receive opens only after all its chunks arrived (one batched call), and the step raises
``AuthenticationError`` for the first chunk whose tag fails.

Unverified bytes never reach a caller's buffer here either, without the CPU engine's scratch: an
open is two passes on one stream, the MAC pass that sets ``ok[j]`` and then the decrypt (or GMAC
copy) pass, whose kernels return at once for a chunk with ``ok[j] == 0``
(``sc_units_*`` in ``kernels/aead.cu``: "OPEN and HOP skip a chunk whose ok[j] is 0"), so a failed
chunk's output region is not written at all; the fused reduce-scatter hop is gated the same way.
Only the ``none`` suite copies its (unauthenticated) frames straight out.

A *backend* supplies the array module and the batch AEAD: :class:`CupyBackend` (CuPy and the
kernels) on GPUs; the tests plug in the same kernel core compiled for the host, over numpy, so
this engine runs here on real ranks without a GPU and interoperates with the CPU engine frame for
frame (``tests/mpi_worker.py::device_engine``).
"""

from __future__ import annotations

import functools

import numpy as np

from ..engine import Inbox, Lend, OpRun, Recv, Send, land
from ..engine.land import frame_error
from ..suites import SUITES
from ..framing import AAD_BYTES, ANY_RANK, GROUP_STEP, SLOT_ALIGN, Slot
from .aead import Batch, Hop
from .origin import DeviceOriginProofs
from ..suites import NONCE_BYTES, TAG_BYTES

_ROW = NONCE_BYTES + AAD_BYTES + TAG_BYTES


class CupyBackend:
    """CuPy arrays and :class:`~seccomm.gpu.aead.GPUAEAD` on the current device."""

    def __init__(self):
        import cupy

        self.xp = cupy
        self._aeads = {}

    def aead(self, suite: str):
        from .aead import GPUAEAD

        if suite not in self._aeads:
            self._aeads[suite] = GPUAEAD(suite)
        return self._aeads[suite]

    def asarray(self, host: np.ndarray):
        return self.xp.asarray(host)

    def to_host(self, a) -> np.ndarray:
        return self.xp.asnumpy(a)

    def span(self, views):
        """One uint8 array covering ``views`` (all in one allocation) and each view's offset."""
        cupy = self.xp
        ptrs = [v.data.ptr for v in views]
        lo, hi = min(ptrs), max(p + v.nbytes for p, v in zip(ptrs, views))
        mem = views[0].data.mem
        if any(v.data.mem is not mem for v in views):
            raise ValueError("span: the views are not in one allocation")
        buf = cupy.ndarray((hi - lo,), cupy.uint8, cupy.cuda.MemoryPointer(mem, lo - mem.ptr))
        return buf, np.array([p - lo for p in ptrs], np.int64)


def device_ready(sc, *bufs, probe: bool = True):
    """A :class:`CupyBackend` (``probe``) or True when the device engine can take ``bufs`` on
    ``sc``: CuPy finds a device, the suite has kernels or is ``none``, and the dtypes exist in
    CuPy (not bfloat16); else ``None`` (the call is staged)."""
    from .aead import SUITE_CODES
    from .kernels import available
    from .staging import _as_cupy

    if probe and not available():
        return None
    if sc.suite.name not in SUITE_CODES and sc.suite.name != "none":
        return None
    for b in bufs:
        try:
            if _as_cupy(b)[1] is not None:  # bfloat16: staged (CuPy has no such dtype)
                return None
        except Exception:  # noqa: BLE001 - not a buffer CuPy can view
            return None
    return CupyBackend() if probe else True


class _DSlot:
    """One chunk's frame (device view) and its host nonce/header row."""

    __slots__ = ("frame", "host", "off", "body")

    def __init__(self, frame, host, off, body):
        self.frame, self.host, self.off, self.body = frame, host, off, body


class DeviceWorkspace:
    """Grow-only device buffers for frames and accumulators, and host rows for nonces and AAD
    headers; slot layouts cached per (buffer, chunk sizes) as in the CPU workspace."""

    def __init__(self, backend):
        self.backend = backend
        self._bufs: dict = {}
        self._rows: dict = {}
        self._layouts: dict = {}

    def get(self, name: str, nbytes: int):
        buf = self._bufs.get(name)
        if buf is None or buf.nbytes < nbytes:
            buf = self.backend.xp.empty(max(nbytes, 64), self.backend.xp.uint8)
            self._bufs[name] = buf
            self._layouts = {k: v for k, v in self._layouts.items() if k[0] != name}
        return buf

    def slots(self, name: str, body_sizes: list[int]) -> list[_DSlot]:
        key = (name, tuple(body_sizes))
        hit = self._layouts.get(key)
        if hit is not None:
            return hit
        sizes = [(b + TAG_BYTES + SLOT_ALIGN - 1) // SLOT_ALIGN * SLOT_ALIGN for b in body_sizes]
        buf = self.get(name, sum(sizes))
        rows = self._rows.get(name)
        if rows is None or rows.shape[0] < len(body_sizes):
            rows = self._rows[name] = np.zeros((max(len(body_sizes), 1), _ROW), np.uint8)
            # cached layouts of this buffer write into the old rows: drop them (else a nonce of
            # an earlier call would be read back and reused)
            self._layouts = {k: v for k, v in self._layouts.items() if k[0] != name}
        out, off = [], 0
        for j, (b, sz) in enumerate(zip(body_sizes, sizes)):
            out.append(
                _DSlot(buf[off : off + b + TAG_BYTES], Slot(memoryview(rows[j]), AAD_BYTES, 0), off, b)
            )
            off += sz
        if len(self._layouts) > 256:
            self._layouts.clear()
        self._layouts[key] = out
        return out

    def batch(self, name: str, slots: list[_DSlot]):
        """(frames buffer, frame offsets, body lengths, nonces, AAD headers) of ``slots``."""
        rows = self._rows[name][: len(slots)]
        return (
            self._bufs[name],
            np.array([s.off for s in slots], np.int64),
            np.array([s.body for s in slots], np.int64),
            rows[:, :NONCE_BYTES],
            rows[:, NONCE_BYTES : NONCE_BYTES + AAD_BYTES],
        )


class DeviceOpRun(OpRun):
    """One collective call whose buffers are device arrays: its context's workspace is a
    :class:`DeviceWorkspace`, whose backend supplies the array module and the batch AEAD."""

    record_room = False  # (device slots keep no room after a frame: the transport copies)
    receives_direct = False  # (device frames always go through device slots)
    origin_proofs = DeviceOriginProofs

    def __init__(self, ctx, frame, itemsize, collective):
        self.backend = ctx.workspace.backend
        super().__init__(ctx, frame, itemsize, collective)

    def _key(self, group: bool, a: int, b: int):
        """(suite, raw 32-byte key or None for the clear ``none`` suite): the kernels take raw keys."""
        if not self.policy.encrypts(a, b, group) or self.suite.name == "none":
            return SUITES["none"], None
        ep = self.frame.epoch
        return self.suite, (self.keys.group_key(ep) if group else self.keys.direction_key(ep, a, b))

    def _crypt(self, seal: bool, suite, key, wsname, slots, data_views):
        """Seal ``data_views`` into ``slots`` or open ``slots`` into ``data_views``: one batched call.
        Returns the per-chunk ``ok`` flags (host int array) for an open."""
        be, n = self.backend, len(slots)
        if n == 0:  # an empty block: nothing to seal or open
            return np.ones(0, np.int32)
        frames, fr_offs, lens, nonces, aads = self.ws.batch(wsname, slots)
        if key is None:  # clear frames: the body is the payload
            for s, v in zip(slots, data_views):
                if seal:
                    s.frame[: s.body] = v
                else:
                    v[...] = s.frame[: s.body]
            return np.ones(n, np.int32)
        xp, aead = be.xp, be.aead(suite.name)
        span, offs = be.span(data_views)
        keys = be.asarray(np.tile(np.frombuffer(key, np.uint8), (n, 1)))
        d = [be.asarray(np.ascontiguousarray(a)) for a in (nonces, aads, offs, fr_offs, lens)]
        if seal:
            aead.seal(Batch(keys, d[0], d[1], span, d[2], d[4], frames, d[3], max_len=int(lens.max())))
            return None
        ok = aead.open(Batch(keys, d[0], d[1], frames, d[3], d[4], span, d[2], max_len=int(lens.max())))
        return be.to_host(ok) if xp is not np else ok

    @staticmethod
    def clear_frame(slot):
        return slot.frame[: slot.body]  # (a clear frame: the body alone, no tag)

    def _fill_all(self, slots, suite, group, step, sender, dst, elems):
        n = len(slots)
        for j, s in enumerate(slots):
            self.fill(s.host, suite, group, step, j, n, sender, dst, elems[j])

    # -- the engine's three entry points -----------------------------------------------------
    def sealed_frames(self, send: Send):
        group, pieces = send.group, send.pieces
        sender = send.origin if group else self.rank
        suite, key = self._key(group, sender, send.dst)
        slots = self.ws.slots(send.ws, [len(p) for p in pieces])
        self._fill_all(
            slots, suite, group, send.step, sender, send.dst, [len(p) // self.itemsize for p in pieces]
        )
        self._crypt(True, suite, key, send.ws, slots, pieces)
        if key is None:  # clear frames: the payload alone; the op's record before them (paired)
            if not send.behind:  # (else the transport stages it behind the first)
                self.t.send_record()
            return [self.clear_frame(s) for s in slots]
        return [s.frame for s in slots]

    def _drain(self, recv: Recv, box, rreqs):
        for j, req in enumerate(rreqs):  # (each checked as it comes; opened together below)
            land(self, box, j, req, defer=_batched)
        sender = recv.origin if recv.group else recv.src
        self._open_into(box, recv.ws, recv.group, sender, recv.elems, recv.outs)
        if recv.consume is not None:
            for j in range(len(recv.slots)):
                recv.consume(j, recv.outs[j])

    def _open_into(self, box, wsname, group, sender, elems, outs):
        """Open ``box``'s frames (each landed: :func:`~seccomm.engine.land.land`) into ``outs``
        in one batched kernel: :class:`~seccomm.errors.AuthenticationError` for the first whose
        tag fails (:func:`~seccomm.engine.land.frame_error`).  Group frames with origin proofs
        are opened into private device memory and copied to ``outs`` only once every one matched
        its origin's MAC (:meth:`~seccomm.gpu.origin.DeviceOriginProofs.check_opened`); the
        error names the first chunk that fails either check, as the CPU engine's does (it checks
        chunk by chunk)."""
        slots = box.slots
        suite, key = self._key(group, sender, self.rank)
        dst = ANY_RANK if group else self.rank
        self._fill_all(slots, suite, group, GROUP_STEP if group else box.step, sender, dst, elems)
        proofs = group and self.origins is not None and self.origins.on
        into = self._private(outs) if proofs else outs
        ok = self._crypt(False, suite, key, wsname, slots, into)
        bad = np.flatnonzero(np.asarray(ok) == 0)
        upto = int(bad[0]) if bad.size else len(slots)
        if proofs and upto:  # (the CPU engine's order: the first chunk that fails either check)
            self.origins.check_opened(box, sender, into[:upto])
        if bad.size:
            raise frame_error(self, box, upto)
        if proofs and outs:
            self._copy_out(outs, into)

    def _copy_out(self, outs, into) -> None:
        """Copy ``into`` (views laid out like ``outs``, one after another) to ``outs``: one copy
        where ``outs`` lie one after another too (a block of the caller's buffer), else one per
        chunk."""
        dst, dst_offs = self.backend.span(outs)
        src, src_offs = self.backend.span(into)
        if dst.nbytes == src.nbytes and np.array_equal(dst_offs, src_offs):
            dst[...] = src
        else:
            for o, v in zip(outs, into):
                o[...] = v

    def _private(self, outs) -> list:
        """Views of private device memory laid out like ``outs`` (uint8 views), one allocation."""
        buf = self.ws.get("origin", sum(o.nbytes for o in outs))
        views, off = [], 0
        for o in outs:
            views.append(buf[off : off + o.nbytes])
            off += o.nbytes
        return views

    # -- ring reduce-scatter with the fused hop ----------------------------------------------
    def ring_rs_fused(self, send, dest, ufunc, blocks) -> bool:
        """Ring reduce-scatter where every hop but the last runs the fused kernel: open the
        incoming chunk, add this rank's chunk, seal the sum for the next rank, in one pass over
        memory; the sum itself is never written out.  Same frames as the unfused ring (the same
        steps, chunks, nonces and AAD).  Returns False (nothing done) where it does not apply:
        not a sum, not float32/float16/bfloat16, GMAC or no encryption, or fewer than 3 ranks."""
        p, r, isz, ce, suite = self.size, self.rank, self.itemsize, self.chunk_elems, self.suite
        dname = str(send.dtype)
        if (
            ufunc is not np.add
            or p < 3
            or self.policy.mode != "all"
            or suite.name not in ("aes-256-gcm", "chacha20-poly1305")
            or dname not in ("float32", "float16", "bfloat16")
        ):
            return False
        from ..collectives.common import chunk_views
        from ..dtypes import as_bytes

        t, be, nxt, prv = self.t, self.backend, (r + 1) % p, (r - 1) % p
        send_u8 = as_bytes(send)
        aead = be.aead(suite.name)
        frames_next = None
        for s in range(p - 1):
            sb, rb = (r - 1 - s) % p, (r - 2 - s) % p
            if s == 0:
                frames = (
                    self.sealed_frames(Send(nxt, 0, pieces=blocks.views(send_u8, sb, ce, isz)[0]))
                    if blocks.counts[sb]
                    else []
                )
            else:
                frames = frames_next
            elems = blocks.views(send_u8, rb, ce, isz)[1]
            inws = f"fin{s % 2}"
            slots = self.ws.slots(inws, [e * isz for e in elems])
            box = Inbox(prv, s, self.protect(False, prv, r), [sl.frame for sl in slots], slots)
            rreqs = [t.irecv(f, prv) for f in box.frames]
            sreqs = [t.isend(f, nxt) for f in frames]
            self.pending += rreqs + sreqs
            for j, req in enumerate(rreqs):  # (each checked as it comes; opened by the fused hop)
                land(self, box, j, req, defer=_batched)
            own = blocks.views(send_u8, rb, ce, isz)[0]
            if s == p - 2:  # last hop: open into scratch, add this rank's share into its block
                nb = dest.size * isz  # (scratch: in place, this rank's block of send IS dest)
                theirs = chunk_views(self.ws.get("flast", nb)[:nb], 0, dest.size, ce, isz)[0]
                self._open_into(box, inws, False, prv, elems, theirs)
                outs = chunk_views(as_bytes(dest), 0, dest.size, ce, isz)[0]
                dt = send.dtype
                for j, o in enumerate(outs):
                    ufunc(own[j].view(dt), theirs[j].view(dt), out=o.view(dt))
            elif slots:
                outws = f"fout{s % 2}"
                oslots = self.ws.slots(outws, [e * isz for e in elems])
                self._fill_all(slots, suite, False, s, prv, r, elems)
                self._fill_all(oslots, suite, False, s + 1, r, nxt, elems)
                fin, in_offs, lens, n_in, a_in = self.ws.batch(inws, slots)
                fout, out_offs, _, n_out, a_out = self.ws.batch(outws, oslots)
                span, own_offs = be.span(own)
                n = len(slots)
                ep = self.frame.epoch
                k_in = be.asarray(
                    np.tile(np.frombuffer(self.keys.direction_key(ep, prv, r), np.uint8), (n, 1))
                )
                k_out = be.asarray(
                    np.tile(np.frombuffer(self.keys.direction_key(ep, r, nxt), np.uint8), (n, 1))
                )
                d = [
                    be.asarray(np.ascontiguousarray(a))
                    for a in (n_in, a_in, in_offs, own_offs, n_out, a_out, out_offs, lens)
                ]
                ok = aead.fused_hop(
                    Hop(
                        k_in,
                        d[0],
                        d[1],
                        fin,
                        d[2],
                        span,
                        d[3],
                        k_out,
                        d[4],
                        d[5],
                        fout,
                        d[6],
                        d[7],
                        dname,
                        max_len=int(lens.max()),
                    ),
                )
                ok = be.to_host(ok) if be.xp is not np else ok
                bad = np.flatnonzero(np.asarray(ok) == 0)
                if bad.size:
                    raise frame_error(self, box, int(bad[0]))
                frames_next = [o.frame for o in oslots]
            else:
                frames_next = []
            if len(rreqs) > self.receipts.after:
                self.receipts.give(self, prv)
            if s < p - 2:  # (the last hop's sends: left to the op's end, as exchange leaves them)
                t.wait_sends(sreqs, [nxt] * len(sreqs))
            else:
                self.sends += [(q, nxt) for q in sreqs]
            if len(sreqs) > self.receipts.after:
                self.receipts.expect(self, nxt)
        return True

    def swap_step(self, peer, step, piece, elems, out, consume, lend=Lend.COPY, summed=None):
        # (paired, clear frames: the record behind the frame, as the CPU engine's swap sends it,
        # unless the swap is acknowledged: then alone before it)
        behind = self.t.paired and not self.acked(1, elems * self.itemsize, True)
        send = Send(peer, step, pieces=[piece], behind=behind)
        recv = Recv(peer, [elems], [out], step, consume=consume, behind=behind)
        return functools.partial(self.exchange, send, recv)

    def relay(self, parent, children, pieces_or_outs, elems, origin, fan_in=1):
        if parent is None:  # the origin seals and sends: the CPU engine's code, on sealed_frames
            return super().relay(parent, children, pieces_or_outs, elems, origin)
        t = self.t
        if not children:  # a leaf: it sends nothing this op (paired: its record goes alone, now)
            t.send_record()
        slots = self.ws.slots("recv", [e * self.itemsize for e in elems])
        key = self.protect(True, origin, self.rank)
        if key.suite.clear:  # (the payload alone; the op's record before it, paired)
            self.first.expect(parent, self.pending)
            frames = [self.clear_frame(s) for s in slots]
        else:
            frames = [s.frame for s in slots]
        fill = None if key.suite.clear else (True, origin, elems)  # (box.origin: land waits for its MACs)
        box = Inbox(parent, GROUP_STEP, key, frames, slots, None, None, fill)
        rreqs = [t.irecv(f, parent) for f in frames]
        self.pending += rreqs

        def forward(j):  # each frame as soon as it arrived (the op's last sends: receipts where due)
            for c in children:
                self._sent([t.isend(frames[j], c)], c)

        box.forward = forward
        for j, req in enumerate(rreqs):
            land(self, box, j, req, defer=_batched)
        self._open_into(box, "recv", True, origin, elems, pieces_or_outs)
        self._relay_receipts(parent, children, len(slots), fan_in)


def _batched(accept, run, j):
    """:func:`~seccomm.engine.land.land`'s ``defer`` on the device: nothing yet; the step opens
    all its frames, checked one by one as they came, in one batched kernel
    (:meth:`DeviceOpRun._open_into`) and consumes them only after every tag verified."""
