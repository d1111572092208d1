"""Origin proofs: a group frame checked as coming from its origin, not only from the group.

A group frame is sealed once by its origin under the group key and forwarded unchanged (ring
allgather, the allgather phase of ring allreduce, bcast).  Every rank holds the group key, so its
tag proves only that *some* rank of the group sealed it.  Under ``identity="x509"`` on three ranks
or more each origin therefore also sends every other rank, directly and before its frames, one
16-byte MAC per frame::

    tag(o -> r, frame j) = AES-GMAC(K_or, nonce_j, plaintext of frame j)
    nonce_j = u32 op index in the epoch | u32 j | u32 0xFFFFFFFF
    message(o -> r) = tag_0 | ... | tag_f-1 | AES-GMAC(K_or, op index | 0xFFFFFFFF | 0xFFFFFFFE, tags)

under ``K_or`` (:meth:`~seccomm.keys.KeySchedule.origin_key`: from the X25519 secret of the pair
``o, r``, which only those two ranks hold, and the epoch).  The message's own MAC makes one
altered or replayed on its way an error naming the origin; a frame whose MAC then fails was
altered by a rank that holds the group key, and the error names the rank it came from.

A receiver opens each group frame under the group key as before, then computes the same GMAC
over the plaintext in its private scratch and compares it with the origin's MAC *before* the
plaintext is copied out: a frame that a forwarder (or anyone holding the group key) altered or
made up never reaches the caller's buffer.  The MAC is keyed by a key the forwarder does not
hold, and covers the plaintext: the group tag commits to nothing against a holder of the group
key (GHASH is linear in the ciphertext).

Cost per op (``n_o`` bytes of origin ``o``'s data in ``f_o`` frames, ``p`` ranks): the origin
computes ``p - 1`` GMACs over its data and sends ``p - 1`` messages of ``16 (f_o + 1)`` bytes; a
receiver computes one GMAC over every group frame it opens, and receives one such message per
origin (:mod:`seccomm.identitycost` projects it).  The device engine computes the same MACs
with the GMAC kernels, over device memory (:mod:`seccomm.gpu.origin`).  On two ranks there is
no third rank to forge a frame, so nothing is sent; nor under ``psk`` (any rank derives every
pair key) or ``psk-dhe`` (an on-path insider can replace the X25519 shares at setup), nor where
the group frames go in the clear (``encrypt="inter-node"`` inside one node)."""

from __future__ import annotations

import hmac
import struct
import threading

import numpy as np

from .land import frame_error, message_error


TAG_BYTES = 16  #: bytes of one frame's origin MAC
_NONCE = struct.Struct(">III")
_PHASE, _SEAL, _ALL = 0xFFFFFFFF, 0xFFFFFFFE, 0xFFFFFFFF  # a frame's MAC; the message's (j = _ALL)


def needed(keys, size: int) -> bool:
    """Whether group frames carry origin proofs: identity x509 on three ranks or more."""
    return size >= 3 and keys.mode == "x509"


class OriginProofs:
    """The origin proofs of one op of ``run`` (:class:`~seccomm.engine.run.OpRun`): the MACs this
    rank sends as an origin, and those it expects from each origin it receives group frames of.
    :meth:`start` at the op's group phase; :meth:`ready` before the first group frame of an
    origin is opened, :meth:`check` for each one opened."""

    __slots__ = ("run", "want", "reqs", "got", "lock", "on")

    def __init__(self, run):
        self.run = run
        self.reset()

    def reset(self) -> None:
        self.want: dict = {}  # origin -> its MACs for this rank (uint8, 16 per frame), as received
        self.reqs: dict = {}  # origin -> the receive request, until it is in
        self.got: dict = {}  # origin -> the checked MACs (bytes)
        self.lock = threading.Lock()
        self.on = False  # whether this op's group frames carry origin MACs (start)

    def _mac(self, epoch: int, origin: int, receiver: int, j: int, data, phase: int = _PHASE) -> bytes:
        nonce = _NONCE.pack(self.run.frame.op_index, j, phase)
        return self.run.keys.origin_key(epoch, origin, receiver).encrypt(nonce, b"", data)

    def start(self, origins: list, pieces: list | None) -> None:
        """The op's group phase begins: post the receive of the MACs of each origin in
        ``origins`` (``(rank, frames)``: the origins this rank gets group frames of), and where
        this rank is an origin itself (``pieces``: its frames' plaintexts, in order), send each
        other rank its MACs.  Before any group frame is posted or sent (so that on a pair's
        channel the MACs come before the frames)."""
        run = self.run
        if run.protect(True, 0, run.rank).suite.clear:  # group frames in the clear: no proof
            return
        self.on = True
        for o, frames in origins:
            buf = self.want[o] = np.empty(TAG_BYTES * (frames + 1), np.uint8)
            self.reqs[o] = req = run.t.irecv(buf, o)
            run.pending.append(req)
        if pieces:
            epoch = run.frame.epoch
            others = [r for r in range(run.size) if r != run.rank]
            for r, tags in zip(others, self.frame_macs(epoch, others, pieces)):
                seal = self._mac(epoch, run.rank, r, _ALL, tags, _SEAL)
                run.send_control(np.frombuffer(tags + seal, np.uint8).copy(), r)

    def frame_macs(self, epoch: int, receivers: list, pieces: list) -> list:
        """This rank's origin MACs of ``pieces`` (its group frames' plaintexts, in order) for
        each rank of ``receivers``: bytes, 16 per frame, frame 0 first.  (The device engine's
        :class:`~seccomm.gpu.origin.DeviceOriginProofs` computes them in one kernel launch.)"""
        me = self.run.rank
        return [b"".join(self._mac(epoch, me, r, j, p) for j, p in enumerate(pieces)) for r in receivers]

    def ready(self, origin: int) -> None:
        """Wait for ``origin``'s MACs (once per op; on the thread that waits for frames, before a
        frame of ``origin`` is opened) and check their length."""
        with self.lock:
            if not self.on or origin in self.got:
                return
            req = self.reqs.pop(origin)  # (KeyError: a group frame of an origin start() did not name)
            run = self.run
            got = run.t.wait_recv(req, origin)
            raw = self.want.pop(origin).tobytes()
            detail = None
            if got != len(raw):
                detail = f"its origin MACs for this op have {got} bytes, expected {len(raw)}"
            else:
                tags, seal = raw[:-TAG_BYTES], raw[-TAG_BYTES:]
                mine = self._mac(run.frame.epoch, origin, run.rank, _ALL, tags, _SEAL)
                if not hmac.compare_digest(mine, seal):
                    detail = (
                        "its origin MACs for this op failed authentication: altered or replayed in transit"
                    )
            if detail is not None:
                raise message_error(run, origin, "origin MACs", "AES-GMAC", detail)
            self.got[origin] = tags

    def check(self, box, j: int, origin: int, pt) -> None:
        """Frame j of ``origin``'s group frames, opened into ``pt`` (private memory; after
        :meth:`ready`): its origin MAC must match the one ``origin`` sent, else
        :class:`~seccomm.errors.AuthenticationError` naming the rank it came from
        (``box.peer``); ``pt`` is zeroed first."""
        if not self.on:  # (group frames in the clear: no MACs were sent)
            return
        tags = self.got[origin]  # (ready() put them there, or raised)
        mine = self._mac(self.run.frame.epoch, origin, self.run.rank, j, pt)
        if not hmac.compare_digest(mine, tags[TAG_BYTES * j : TAG_BYTES * (j + 1)]):
            if box.key.suite.confidential:
                np.frombuffer(pt, np.uint8).fill(0)
            raise self.mismatch(box, j, origin)

    def mismatch(self, box, j: int, origin: int):
        """The :class:`~seccomm.errors.AuthenticationError` for frame j of ``origin``'s group
        frames in ``box`` whose origin MAC did not match, naming the rank it came from."""
        via = "" if box.peer == origin else f" (forwarded by rank {box.peer})"
        return frame_error(
            self.run,
            box,
            j,
            f"group frame of origin {origin}{via} does not match the MAC its origin sent this rank: "
            f"altered or made up by a rank that holds the group key, or the origin's MAC was altered",
        )
