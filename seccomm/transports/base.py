"""The transport interface, the wrapper base, and the one poll-until-deadline loop.

A transport carries opaque byte buffers and never pickles: ``isend``/``irecv`` take contiguous
uint8 buffers (numpy arrays or memoryviews) and return request handles; every wait has a deadline
and raises :class:`~seccomm.errors.TransportTimeout` naming the peer instead of hanging.  Every
wait that polls goes through :func:`poll_until`.  Wrappers (tampering, recording, the attacker
harness) subclass :class:`TransportWrapper` and override what they need.

The transport holds the op its waits belong to (:meth:`Transport.begin_op`: the label error
messages name, e.g. ``"allreduce #3"``, which becomes the ``op`` of the
:class:`~seccomm.errors.SecCommError` raised, and the seconds each wait may block); the setup
collectives take their label and timeout as arguments.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from .records import Records


class NoNotices:
    """The failure notices of a transport that sends none (the default): every call is a no-op,
    so a rank waiting on one that stopped waits out its own deadline and names the rank it
    waited on."""

    def authenticate(self, macs) -> None:
        return None

    def abort(self, blame) -> None:
        return None

    def fail(self) -> None:
        return None

    def refuse(self, seq: int, error: str) -> None:
        return None

    def close(self) -> None:
        return None


#: the notices of every transport that has none of its own
NO_NOTICES = NoNotices()


class Transport:
    """Interface.  ``rank``, ``size``; all buffers are contiguous uint8.

    **The core**, what a transport implements: :meth:`isend`, :meth:`irecv`, :meth:`wait_recv`,
    :meth:`wait_sends` (frames, point-to-point), :meth:`allgather`, :meth:`scatter`,
    :meth:`bcast` (the setup collectives), and where it has something to do there
    :meth:`cancel`, :meth:`quiesce`, :meth:`host_key`, :meth:`close`.

    **Mechanisms with defaults**, each an object the transport names, so a transport that has
    its own replaces one object and the rest stays:

    - ``records``: the argument-record channel (:meth:`agree_start` … :meth:`announce`).
      Default :class:`~seccomm.transports.records.Records`: the whole exchange before the op's
      first frame, over :meth:`isend`/:meth:`irecv`; the MPI transport overlaps it with the op
      (:mod:`seccomm.transports.mpi_records`).
    - ``notices``: failure notices (:meth:`abort`, :meth:`fail`, :meth:`refuse`,
      :meth:`authenticate_notices`).  Default: none travel (a rank waiting on one that stopped
      waits out its deadline and names it); MPI: :class:`~seccomm.transports.notices.Notices`.
    - receipts (:attr:`receipt_after`, :meth:`isend_receipt`): default none are asked for.
    - :meth:`pair_link`: default ``None`` (the engine calls :meth:`isend` and the rest).

    ``small_bytes_default``: where ``algorithm="auto"`` switches allreduce from recursive doubling
    (lg p messages) to ring (2(p-1) messages); higher for transports with a higher latency.
    ``defer_last_sends``: an op returns without waiting for its last sends, which its
    ``SecureComm`` waits for at the next op's start (MPI: a large send completes only while its
    receiver progresses, docs/design.md "Completion"); else they are waited for at the op's end.
    """

    rank: int
    size: int
    small_bytes_default = 64 << 10
    defer_last_sends = False

    #: the op the waits belong to, as their errors name it (``"allreduce #3"``, ``"key
    #: exchange"``: the ``op`` of the :class:`~seccomm.errors.SecCommError` raised), and the
    #: seconds each wait may block before ``TransportTimeout``: set by :meth:`begin_op`
    op_label: str = "setup"
    op_timeout: float = 60.0

    # -- the core ------------------------------------------------------------------------------
    def begin_op(self, label: str, timeout: float) -> None:
        """The waits from now on belong to op ``label`` and each may block at most ``timeout``
        seconds (the op's :class:`~seccomm.sequence.OpSequence` calls this before the op's first
        transfer).  A transport that hands waits to another (NCCL's control) passes it on."""
        self.op_label, self.op_timeout = label, timeout

    def isend(self, buf, peer: int):
        """Post the send of ``buf`` (uint8) to ``peer``; returns a request for :meth:`wait_sends`.
        ``buf`` stays unchanged until that wait returns."""
        raise NotImplementedError

    def irecv(self, buf, peer: int):
        """Post the receive of the next message from ``peer`` into ``buf`` (uint8); returns a
        request for :meth:`wait_recv`."""
        raise NotImplementedError

    def wait_recv(self, req, peer: int) -> int:
        """Wait (at most :attr:`op_timeout` seconds) for a receive; return the bytes received.
        Raises ``TransportTimeout`` naming ``peer`` past the deadline, ``FrameError`` for a message
        larger than the buffer."""
        raise NotImplementedError

    def wait_sends(self, reqs: list, peers: list) -> None:
        """Wait (at most :attr:`op_timeout` seconds each) for sends ``reqs`` to ``peers``."""
        raise NotImplementedError

    def allgather(self, sendbuf, recvbuf, op_label: str, timeout: float | None = None) -> None:
        raise NotImplementedError

    def scatter(self, sendbuf, recvbuf, root: int, op_label: str, timeout: float | None = None) -> None:
        raise NotImplementedError

    def bcast(self, buf, root: int, op_label: str, timeout: float | None = None) -> None:
        raise NotImplementedError

    def cancel(self, reqs: list) -> None:
        """Best-effort cancel of pending requests after an error (buffers stay referenced)."""

    def host_key(self) -> int:
        """A 63-bit key of this rank's host: ranks with equal keys share a node.  Local (no
        traffic); each rank sends it in its authenticated setup hello (:mod:`seccomm.handshake`),
        which makes the node map.  Default: a key of its own per rank (no two ranks share a node,
        so ``encrypt="inter-node"`` encrypts every hop)."""
        return self.rank

    def quiesce(self, timeout: float) -> bool:
        """Collective: let every rank's outstanding transfers finish (at most ``timeout`` s)."""
        return True

    def close(self) -> None:
        pass

    # -- the argument records: the transport's ``records`` channel -----------------------------
    @cached_property
    def records(self) -> Records:
        """The argument-record channel (default :class:`~seccomm.transports.records.Records`
        over this transport's point-to-point calls); a transport with its own assigns it."""
        return Records(self)

    #: the op's argument record rides in its first message to the peer (two ranks over MPI,
    #: :meth:`agree_start`): an engine that keeps room after its frames asks :meth:`put_record`
    #: and :meth:`record_due`, and hands the first message it received to :meth:`take_record`;
    #: a wrapper says False (what it wraps then copies the record in and out: the wrapper's
    #: isend and irecv see the frames as they are)
    paired = False

    def agree(self, record, table) -> None:
        """Exchange each rank's argument record (:mod:`seccomm.agreement`) before an op's first
        frame: ``record`` (uint8, shape (size, n): row j is this rank's record for rank j, whose
        tag names both) goes row by row to every other rank, and the one rank j sent this rank
        lands in ``table[j]`` (``table``: uint8, shape (size, n)).  Default: point-to-point, every
        receive posted first, each waited for naming its rank (``TransportTimeout`` or
        ``PeerAbortError`` as any wait), ``FrameError`` for a record of another length."""
        self.records.agree(record, table)

    def agree_start(self, record, table, check, expect=None) -> None:
        """Begin an op's argument exchange (:meth:`agree`); ``check()`` (raises on a table that
        disagrees) runs once every record is in; ``expect`` (bytes, optional): the table an
        agreeing world sends back (:attr:`Agreement.expect <seccomm.agreement.Agreement.expect>`).
        Default: the whole exchange and the check, now, before the op's first frame;
        :meth:`agree_finish` and :meth:`agree_settle` then have nothing to do.  A transport may
        instead overlap the exchange with the op (MPI): it then runs ``check()`` as soon as the
        records are in, also inside any wait of the op (a rank that waits for a frame its
        disagreeing peer never sends stops there); a :attr:`paired` one carries the record in
        the op's first message to the peer instead of in a message of its own."""
        self.records.agree_start(record, table, check, expect)

    def agree_finish(self) -> None:
        """At the op's end: wait for the records still out and run the check (waits name the
        rank they wait on, as any wait)."""
        self.records.agree_finish()

    def agree_settle(self, limit: float):
        """After the op failed: the check's exception if every record arrives within ``limit``
        seconds and the check fails (the failure was a disagreement), else ``None``."""
        return self.records.agree_settle(limit)

    def announce(self, record) -> list:
        """Send ``record`` (refusal records, one row per receiver as :meth:`agree`'s) to every
        other rank without waiting; returns the send requests, which the caller keeps
        referenced.  Default: point-to-point."""
        return self.records.announce(record)

    def put_record(self, trailer) -> bool:
        """Paired: whether the frame about to be sent is the op's first message to the peer; if
        so, the record (after its op number, :data:`~seccomm.agreement.TRAILER_BYTES`) is written
        into ``trailer``, the room after the frame, and frame and room go as one message."""
        return self.records.put_record(trailer)

    def record_due(self) -> bool:
        """Paired: whether the receive about to be posted is the op's first from the peer; if so,
        it is posted for frame and room, and what arrived goes to :meth:`take_record`."""
        return self.records.record_due()

    def take_record(self, wire, got: int, peer: int) -> int:
        """Paired: the op's first message from ``peer``, ``got`` bytes in ``wire``: its record is
        checked (the agreement's check: raises on a disagreement or a record that is not
        authentic); returns the bytes of the frame before it."""
        return self.records.take_record(wire, got, peer)

    def send_record(self) -> None:
        """Paired: if this op's record has not gone to the peer yet, it goes now, alone: before
        the op's first clear frame (``none``: its payload alone, no room behind it), and when
        this rank sends the peer no frame in this op (a bcast leaf), before its first wait (two
        ranks that each wait for the other, each naming the other as the root, then both read
        the disagreement at once).  Default: nothing."""
        self.records.send_record()

    def expect_record(self, peer: int):
        """Paired: if the op's first message from ``peer`` is still to come, the receive about to
        be posted is for a clear frame, which the peer's record precedes alone
        (:meth:`send_record`): a receive for the record is posted now, ahead of the frame's, and
        its request returned (the caller keeps it with the op's), for :meth:`wait_record`.
        Default: ``None`` (nothing due)."""
        return self.records.expect_record(peer)

    def wait_record(self, peer: int) -> None:
        """Paired: wait for the record :meth:`expect_record` posted a receive for, and check it
        as :meth:`take_record` does (raises on a disagreement).  Default: nothing."""
        self.records.wait_record(peer)

    def discard(self, buf, peer: int) -> None:
        """A wrapper dropped ``buf`` on its way to ``peer`` (the attacker harness): what this
        transport would have sent with it is dropped too.  Default: nothing rides with a frame."""
        self.records.discard(buf, peer)

    # -- failure notices: the transport's ``notices`` --------------------------------------------
    #: the failure notices (default :data:`NO_NOTICES`: none travel); a transport with its own
    #: assigns them (MPI: :class:`~seccomm.transports.notices.Notices`)
    notices: NoNotices = NO_NOTICES

    def abort(self, blame) -> None:
        """This rank stops the current operation after an error in a frame from rank ``blame``:
        tell the ranks waiting on it, so they raise now instead of at their deadline."""
        self.notices.abort(blame)

    def fail(self) -> None:
        """This rank stops the current operation after an error of its own (any exception
        inside the operation that is not a frame error): tell the ranks waiting on it, so they
        raise ``PeerAbortError`` naming this rank now instead of at their deadline."""
        self.notices.fail()

    def refuse(self, seq: int, error: str) -> None:
        """This rank refused its own arguments to its op number ``seq`` (``error``: the
        exception's name, ``"ValueError"`` or ``"TypeError"``) before sending anything: tell the
        ranks that wait, or will wait, on it in that op, so they raise ``PeerAbortError`` naming
        this rank and the refusal now instead of at their deadline."""
        self.notices.refuse(seq, error)

    def authenticate_notices(self, macs) -> None:
        """Authenticate the give-up/abort notices (failure propagation) with ``macs``, this
        rank's :class:`~seccomm.control.PairMacs` of the session (each notice bound to its sender
        and receiver), handed over once the session keys exist."""
        self.notices.authenticate(macs)

    # -- receipts and the pair link (the MPI transport's; defaults: none) ------------------------
    #: a hop of more than this many frames is acknowledged: its receiver sends the sender a
    #: receipt (:meth:`isend_receipt`) once every frame of the hop is in, and the sender's op
    #: ends only once its receipts are in, so no rank returns while a receiver still depends on
    #: its progress (MPI: :attr:`MPITransport.receipt_after`; docs/design.md "Completion").
    #: ``None``: never (sends that complete without the receiver, waited for at the op's end)
    receipt_after: int | None = None

    def isend_receipt(self, buf, peer: int):
        """Send a receipt (``buf``: uint8) to ``peer`` on the receipts' own channel (a channel
        apart from the frames'; asked for only where :attr:`receipt_after` is set)."""
        raise NotImplementedError

    def irecv_receipt(self, buf, peer: int):
        """Post the receive of a receipt from ``peer`` into ``buf`` (waited for with
        :meth:`wait_recv`)."""
        raise NotImplementedError

    def pair_link(self, peer: int):
        """An object that moves host frames to and from ``peer`` with the least work per call
        (``send(frame)``, ``recv(frame)``, ``wait(rreq) -> bytes``: as
        :meth:`isend`, :meth:`irecv` and :meth:`wait_recv` to and from ``peer``), or ``None``: the
        engine then calls those.  Default ``None`` (a wrapper's too: it sees every frame).  A link
        with an ``express`` attribute that is not ``None`` offers the compiled two-rank swap
        (:mod:`seccomm.pairswap`; MPI only)."""
        return None


# -- the one poll-until-deadline loop ----------------------------------------------------------


@dataclass(frozen=True)
class Backoff:
    """How :func:`poll_until` spaces its polls: the first ``spins`` polls back to back (no clock
    read, no periodic check), then polls that yield the CPU (``os.sched_yield``) up to poll number
    ``yield_until``, then polls ``sleep_s`` seconds apart."""

    spins: int = 0
    yield_until: int = 0
    sleep_s: float = 2e-5


_SLEEP = Backoff()


def poll_until(
    done, timeout: float, on_expiry, backoff: Backoff | None = None, check=None, check_every: int = 1
):
    """Poll ``done()`` until it returns true, or until ``timeout`` seconds have passed.

    Returns True once ``done()`` is true; past the deadline, returns what ``on_expiry()`` returns
    (usually it raises, e.g. ``TransportTimeout``).  ``check()``, if given, runs every
    ``check_every``-th poll after the spin phase (e.g. collecting give-up notices; it may raise).
    ``done`` is polled once before the deadline is set, so a finished request costs one call.
    ``backoff``: default ``Backoff()`` (every poll after the first sleeps 20 us).
    """
    backoff = backoff or _SLEEP
    if done():
        return True
    deadline = time.monotonic() + timeout
    n = 0
    while not done():
        n += 1
        if n <= backoff.spins:
            continue
        if check is not None and n % check_every == 0:
            check()
        if time.monotonic() > deadline:
            return on_expiry()
        if n < backoff.yield_until:
            os.sched_yield()
        else:
            time.sleep(backoff.sleep_s)
    return True


# -- wrappers ----------------------------------------------------------------------------------


class TransportWrapper(Transport):
    """Delegates everything to ``inner``; subclass to observe or alter frames on the wire.

    :meth:`send_own` sends a buffer the wrapper made (an altered copy) and keeps it referenced,
    since the transport may read it after ``isend`` returns.
    """

    def __init__(self, inner: Transport):
        self.inner = inner
        self.rank, self.size = inner.rank, inner.size
        self._own: list = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    @property
    def defer_last_sends(self):
        return self.inner.defer_last_sends

    @property
    def receipt_after(self):
        return self.inner.receipt_after

    @property
    def records(self):
        return self.inner.records

    @property
    def op_label(self):
        return self.inner.op_label

    @property
    def op_timeout(self):
        return self.inner.op_timeout

    def begin_op(self, label, timeout):
        return self.inner.begin_op(label, timeout)

    @property
    def notices(self):
        return self.inner.notices

    def isend_receipt(self, buf, peer):
        return self.inner.isend_receipt(buf, peer)

    def irecv_receipt(self, buf, peer):
        return self.inner.irecv_receipt(buf, peer)

    def send_own(self, buf, peer):
        """``isend`` of a buffer this wrapper made; it stays referenced for the wrapper's life."""
        self._own.append(buf)
        return self.inner.isend(buf, peer)

    def isend(self, buf, peer):
        return self.inner.isend(buf, peer)

    def irecv(self, buf, peer):
        return self.inner.irecv(buf, peer)

    def wait_recv(self, req, peer):
        return self.inner.wait_recv(req, peer)

    def wait_sends(self, reqs, peers):
        return self.inner.wait_sends(reqs, peers)

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        return self.inner.allgather(sendbuf, recvbuf, op_label, timeout)

    def scatter(self, sendbuf, recvbuf, root, op_label, timeout=None):
        return self.inner.scatter(sendbuf, recvbuf, root, op_label, timeout)

    def bcast(self, buf, root, op_label, timeout=None):
        return self.inner.bcast(buf, root, op_label, timeout)

    def agree(self, record, table):
        return self.inner.agree(record, table)

    def agree_start(self, record, table, check, expect=None):
        return self.inner.agree_start(record, table, check, expect)

    def agree_finish(self):
        return self.inner.agree_finish()

    def agree_settle(self, limit):
        return self.inner.agree_settle(limit)

    def announce(self, record):
        return self.inner.announce(record)

    def pair_link(self, peer):
        return None  # (the wrapper's isend and irecv see every frame)

    def discard(self, buf, peer):
        return self.inner.discard(buf, peer)

    def send_record(self):
        return self.inner.send_record()

    def expect_record(self, peer):
        return self.inner.expect_record(peer)

    def wait_record(self, peer):
        return self.inner.wait_record(peer)

    def cancel(self, reqs):
        return self.inner.cancel(reqs)

    def host_key(self):
        return self.inner.host_key()

    def quiesce(self, timeout):
        return self.inner.quiesce(timeout)

    def abort(self, blame):
        return self.inner.abort(blame)

    def fail(self):
        return self.inner.fail()

    def refuse(self, seq, error):
        return self.inner.refuse(seq, error)

    def authenticate_notices(self, macs):
        return self.inner.authenticate_notices(macs)

    def close(self):
        return self.inner.close()


def host_bytes(buf) -> np.ndarray:
    """A uint8 numpy view of a host buffer, or a host copy of a device frame (wrappers that
    inspect or alter frames: tampering, recording, the attacker harness)."""
    if hasattr(buf, "__cuda_array_interface__"):
        import cupy

        return cupy.asnumpy(buf).reshape(-1).view(np.uint8)
    return np.frombuffer(buf, np.uint8)
