"""The op sequence of a ``SecureComm``: numbering, key epochs, the last op's sends, and what
every failure does: :class:`OpSequence`."""

from __future__ import annotations

import math

import numpy as np

from .errors import (
    ArgumentMismatchError,
    AuthenticationError,
    CommClosedError,
    FrameError,
    SecCommError,
)
from .framing import MAX_CHUNKS_PER_HOP, MAX_OPS_PER_EPOCH, chunk_elems


class OpSequence:
    """Numbers a communicator's ops and runs each one.

    Every op gets the next sequence number ``seq`` (1, 2, ...: the same on every rank) and an
    index in its key ``epoch``; the keys rotate to the next epoch (``rotations`` counts them)
    when an op's frame bound (:meth:`bound`) would pass ``usage_limit`` frames under one key or
    :data:`~seccomm.framing.MAX_OPS_PER_EPOCH` ops.  An op's last sends are left for the next
    op (``unsent``: requests, peers, label), since their receivers may have returned.

    ``broken``: why the communicator is unusable (``None`` while it is usable; ``"closed"``
    once closed): set by any failure, after which every call raises
    :class:`~seccomm.errors.CommClosedError`.  ``stale``: requests a failed op left with MPI
    (kept referenced, with their buffers, while MPI may still touch them).

    ``transport``, ``agreement``, ``keys``: the communicator's
    :class:`~seccomm.transports.base.Transport`, :class:`~seccomm.agreement.Agreement` and
    :class:`~seccomm.keys.KeySchedule`; ``options``: its :class:`~seccomm.options.Options`
    (``timeout``: seconds any wait may block; ``usage_limit``; ``chunk_bytes``); ``size``: the
    world size."""

    def __init__(self, transport, agreement, keys, options, size: int):
        self.transport, self.agreement, self.keys, self.size = transport, agreement, keys, size
        self.timeout, self.chunk_bytes = options.timeout, options.chunk_bytes
        self.usage_limit, self.limit_forced = options.usage_limit, options.limit_forced
        self.seq = 0
        self.epoch, self.epoch_ops, self.epoch_frames, self.rotations = 0, 0, 0, 0
        self.broken: str | None = None
        self.unsent = None  # (requests, peers, label): the last op's sends, waited for by the next
        self.stale = None

    # -- numbering ---------------------------------------------------------------------------
    def bound(self, coll, nbytes: int, itemsize: int = 1) -> int:
        """Upper bound of frames one op of collective ``coll`` (its
        :class:`~seccomm.collectives.Collective` record) of ``nbytes`` bytes of ``itemsize``-byte
        elements seals under any one key: identical on every rank; ``ValueError`` when it needs
        too many chunks per hop or more frames than one key may seal.  A chunk holds whole elements
        (:func:`~seccomm.framing.chunk_elems`), so it carries ``chunk_bytes`` rounded down to a
        multiple of ``itemsize``: counted with more, an op could pass here and then run out of
        chunk numbers mid-op."""
        chunk = chunk_elems(self.chunk_bytes, itemsize) * itemsize
        chunks = math.ceil(nbytes / chunk) + 1
        if chunks > MAX_CHUNKS_PER_HOP:
            raise ValueError(
                f"{coll.name} of {nbytes} bytes needs {chunks} chunks per hop; at most "
                f"{MAX_CHUNKS_PER_HOP}: raise chunk_bytes"
            )
        bound = coll.frame_bound(self.size, chunks)
        if bound > self.usage_limit:
            fix = "raise rotate_after_frames" if self.limit_forced else "raise chunk_bytes"
            raise ValueError(
                f"{coll.name} of {nbytes} bytes may seal up to {bound} frames under one "
                f"key, over the per-key limit of {self.usage_limit}: {fix}"
            )
        return bound

    def next_op(self, bound: int) -> int:
        """Number the next op (``seq``) and count it in the epoch, after waiting for the last
        op's sends and rotating to the next epoch when ``bound`` more frames would pass the
        per-key limit; returns its index in the epoch.  ``CommClosedError`` once unusable."""
        if self.broken:
            raise CommClosedError(f"SecureComm is unusable: {self.broken}; create a new one")
        if self.unsent:
            self._settle_unsent()
        if self.epoch_frames + bound > self.usage_limit or self.epoch_ops >= MAX_OPS_PER_EPOCH:
            self._rotate()
        self.seq += 1
        op_index = self.epoch_ops
        self.epoch_ops += 1
        self.epoch_frames += bound
        return op_index

    def _rotate(self) -> None:
        self.epoch += 1
        self.epoch_ops = self.epoch_frames = 0
        self.rotations += 1
        self.keys.forget_before(self.epoch)

    def _settle_unsent(self) -> None:
        """Wait for the last op's sends (not waited for in that op: its receivers may have
        returned and stopped calling MPI, and MPICH completes a large send only while its
        receiver progresses) before this op reuses the workspace they are read from.  A peer
        that does not come back within ``timeout`` is blamed as in any wait."""
        reqs, peers, label = self.unsent
        self.unsent = None
        try:
            self.transport.begin_op(f"{label} (its last sends)", self.timeout)
            self.transport.wait_sends(reqs, peers)
        except SecCommError as e:
            self.broken = f"{label} failed ({type(e).__name__})"
            self.transport.cancel(list(reqs))
            self.stale = list(reqs)
            raise

    # -- one op ------------------------------------------------------------------------------
    def run(self, run, steps, tail: bytes, check) -> None:
        """Run the op ``run`` (:class:`~seccomm.engine.run.OpRun`): its argument record
        (``tail``: the record after the op number; ``check()`` checks the table,
        :mod:`seccomm.agreement`) sent before its first frame, ``steps()`` (its algorithm on
        ``run``), then the end of the agreement (``ArgumentMismatchError`` on every rank when the
        arguments differ); its last sends are left for the next op (transports that defer them;
        not sends that went out from the caller's memory: ``run.lent``).  Any failure makes the
        communicator unusable and tells the other ranks at once."""
        a, t = self.agreement, self.transport
        a.record_tail(run.frame.seq, tail)
        t.begin_op(run.op_label, self.timeout)  # (every wait of the op names it)
        try:
            t.agree_start(a.out, a.table, check, a.expect)
            _quiet(steps)
            if run.receipts:
                run.receipts.finish(run)
            t.agree_finish()
            if run.sends:
                if t.defer_last_sends and not run.lent:
                    reqs, peers = zip(*run.sends)
                    self.unsent = (reqs, peers, run.op_label)
                else:  # sends from the caller's memory, or sends that complete without the
                    run.settle()  # receiver: waited for now
        except SecCommError as e:
            # a frame that failed, or a wait that expired, because the ranks disagree on the
            # call: the argument records tell, and that is the error every rank raises
            found = t.agree_settle(min(2.0, self.timeout))  # (None at once when checked)
            err = found if isinstance(found, ArgumentMismatchError) else e
            self.broken = f"{run.op_label} failed ({type(err).__name__})"
            if isinstance(err, (AuthenticationError, FrameError)):
                t.abort(err.peer)  # ranks waiting on this one raise now, not at the deadline
            elif isinstance(err, ArgumentMismatchError):  # every rank reads it from the records,
                t.fail()  # unless one was altered on the wire (under none): told now
            t.cancel(run.pending)
            self.stale = run.pending  # keep buffers referenced while MPI may still touch them
            if err is not e:
                raise err from None
            raise
        except BaseException as e:
            # Any other error on this rank inside the op (a bug, a failed reduction, an error of
            # a wrapper, KeyboardInterrupt, SystemExit): the ranks waiting on it raise
            # PeerAbortError naming this rank at once, never a deadline; the caller here sees the
            # original exception.
            self.broken = f"{run.op_label} failed ({type(e).__name__})"
            t.fail()
            t.cancel(run.pending)
            self.stale = run.pending
            raise

    def refuse(self, name: str, err: Exception) -> None:
        """This rank refused its own arguments to ``name`` (``err``, raised by the caller next)
        before any frame was posted.  The other ranks may already wait on it in that op: a refusal
        notice (:meth:`Transport.refuse <seccomm.transports.base.Transport.refuse>`) makes them
        raise ``PeerAbortError`` naming this rank and the exception, at once.  The op sequence now
        differs between this rank (no number taken) and those that began the op, so the
        communicator is unusable here too, as after any failed op."""
        seq = self.seq + 1  # the number the op would have had
        if not self.broken:
            self.broken = f"{name} #{seq} refused its arguments on this rank ({type(err).__name__})"
            # a refusal record in place of this rank's argument record: the others stop at once
            self.agreement.refusal(seq, type(err).__name__)
            self.stale = self.transport.announce(self.agreement.out)
        self.transport.refuse(seq, type(err).__name__)

    def interrupted(self, name: str, e: BaseException) -> None:
        """A ``BaseException`` that is no ``Exception`` (``KeyboardInterrupt``, ``SystemExit``)
        left the call ``name`` (in the op, the compiled swap, or before the op began): the others
        may wait on this rank, so they are told at once (:meth:`Transport.fail`: they raise
        ``PeerAbortError`` naming this rank), and the communicator is unusable here."""
        if not self.broken:
            self.broken = f"{name} interrupted on this rank ({type(e).__name__})"
        self.transport.fail()


@np.errstate(over="ignore", invalid="ignore")  # (as a decorator: half the cost of a with block)
def _quiet(steps):
    """``steps()`` with inf/NaN arithmetic silent, as MPI's reductions are."""
    steps()
