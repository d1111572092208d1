"""Error hierarchy: every failure of a secure collective derives from :class:`SecCommError`.

Bad arguments are reported with the built-in ``TypeError``/``ValueError`` (naming the allowed
values) before any traffic; what goes wrong on the wire or across ranks is a ``SecCommError``.
No exception ever carries key material: messages name ranks, operations, sequence numbers and
chunk indices only.
"""

from __future__ import annotations


def shown(value) -> str:
    """How an argument error shows a value it refuses: its ``repr``, unless the value could be a
    job secret passed by mistake (bytes-like, or a ``repr`` of 64 characters or more, as long as a
    32-byte secret in hex), then only its type and length.  A rank's argument error travels in its
    setup hello, in the clear, and into every rank's exception."""
    text = repr(value)
    if isinstance(value, (bytes, bytearray, memoryview)) or len(text) >= 64:
        n = len(value) if hasattr(value, "__len__") else len(text)
        return f"<{type(value).__name__} of length {n}, not shown>"
    return text


class SecCommError(Exception):
    """Base class of every seccomm runtime error (authentication, framing, transport, config).

    Every subclass pickles with its message and attributes (``peer``, ``op``, ...) whatever its
    constructor takes, so an error crosses processes whole: ``comm.allgather(err)`` in mpi4py,
    ``multiprocessing``, ``concurrent.futures``.  (Python's default rebuilds an exception by
    calling its class with ``args``, which fails for keyword-only constructors.)"""

    def __reduce__(self):
        return _rebuilt, (type(self), self.args, self.__dict__)


def _rebuilt(cls, args: tuple, state: dict) -> SecCommError:
    """An error of ``cls`` with ``args`` and attributes ``state``, its constructor not called
    (:meth:`SecCommError.__reduce__`)."""
    err = cls.__new__(cls, *args)
    err.args = args
    err.__dict__.update(state)
    return err


class AuthenticationError(SecCommError):
    """A frame failed AEAD verification: tampered, replayed, reordered, misdirected or foreign;
    or, with ``op == "setup"``, a setup message failed its MAC or AEAD tag (altered or replayed).

    Attributes name where it happened, never what the key was:
    ``peer`` (rank the frame came from), ``op`` (operation kind), ``seq`` (operation sequence
    number on this communicator; None for the setup), ``step`` (hop index), ``chunk`` and
    ``chunks`` (chunk index and count), ``epoch`` (key epoch), ``suite`` (or the MAC that
    failed); ``message``: what failed, when not a frame or a setup message (an argument record).
    """

    def __init__(
        self, *, peer, op, seq, step=None, chunk=None, chunks=None, epoch=None, suite=None, detail="",
        message=None,
    ):  # fmt: skip
        self.peer, self.op, self.seq, self.step = peer, op, seq, step
        self.chunk, self.chunks, self.epoch, self.suite = chunk, chunks, epoch, suite
        where = op if seq is None else f"{op} #{seq}"
        if step is not None:
            where += f", step {step}"
        if chunk is not None:
            where += f", chunk {chunk}/{chunks}"
        if epoch is not None:
            where += f", epoch {epoch}"
        what = message or ("a setup message" if op == "setup" else "a frame")
        check = f"{suite or 'AEAD'} authentication"
        if suite == "none":  # no tag: only the frame's length and header checks can fail
            check = "the frame check (suite none has no tag)"
        msg = f"{check} failed on {what} from rank {peer} ({where})"
        msg += (
            f": {detail}"
            if detail
            else (
                ": the frame was altered, replayed, reordered or "
                "misdirected, or the ranks disagree on this call's "
                "op, dtype or count"
            )
        )
        super().__init__(msg)


class FrameError(SecCommError):
    """A message could not be taken as what it should be: larger than the frame or record the
    receiving rank posted for (a padded or altered frame, or ranks that disagree on the call's
    sizes), a receipt that is not this op's, or a transfer the peer abandoned.  ``peer`` is the
    rank it came from (``"any"`` where MPI could not say), ``op`` and ``seq`` the operation.  A
    frame that arrives shorter than it should be (truncated) is an :class:`AuthenticationError`
    instead: a frame of the wrong length cannot be authentic."""

    def __init__(self, msg, *, peer=None, op=None, seq=None):
        self.peer, self.op, self.seq = peer, op, seq
        super().__init__(msg)


class TransportTimeout(SecCommError):
    """A blocking wait passed its deadline: the named peer stopped sending or receiving; or,
    with ``link = (a, b)``, ranks ``a`` and ``b`` each waited on the other past the deadline
    (what they sent each other was lost on the way, or they disagree on the call sequence):
    ``peer`` is then the end of that link this rank waited on."""

    def __init__(self, msg, *, peer=None, op=None, seq=None, timeout_s=None, link=None):
        self.peer, self.op, self.seq, self.timeout_s, self.link = peer, op, seq, timeout_s, link
        super().__init__(msg)


class PeerAbortError(SecCommError):
    """The peer this rank waited on stopped the operation because it detected an error (for
    example a frame that failed authentication), because an exception of its own was raised
    inside the operation, or because it refused its own arguments to the operation
    (``ValueError``/``TypeError``, named in the message with the op it refused): ``peer`` is that
    rank, ``blamed`` the rank it named (itself for an error or refusal of its own; None when it
    could not tell which rank sent the message that failed, as for a ``FrameError`` whose
    ``peer`` is ``"any"``).  Raised at once instead of after the deadline."""

    def __init__(self, msg, *, peer=None, op=None, blamed=None):
        self.peer, self.op, self.blamed = peer, op, blamed
        super().__init__(msg)


class ArgumentMismatchError(SecCommError):
    """The ranks called an op with arguments that must agree and do not: another collective, or
    another root, op, dtype, count or algorithm, or another place in the call sequence.  Found
    by the records every rank sends before an op's first frame (:mod:`seccomm.agreement`), so
    it is raised on every rank, in that op, at every size, with the same message.  ``op``: the
    op (``"bcast #3"``); ``arguments``: argument name -> {rank: value} for each argument that
    differs."""

    def __init__(self, msg, *, op=None, arguments=None):
        self.op, self.arguments = op, arguments or {}
        self.peer = None
        super().__init__(msg)


class ConcurrentUseError(SecCommError):
    """A collective was called on a ``SecureComm`` while another thread was inside a collective
    call on it.  A ``SecureComm`` runs one call at a time: this call was refused before it did
    anything (nothing sent, no sequence number taken; the call in progress is unaffected)."""


class ConfigMismatchError(SecCommError):
    """Ranks disagree on suite, key, or settings, or a setup message failed its checks; raised on
    every rank at construction.  ``peer``: the rank whose arguments or setup message failed (None
    when unknown); ``op``: ``"setup"``."""

    def __init__(self, msg, *, peer=None, op="setup"):
        self.peer, self.op = peer, op
        super().__init__(msg)


class IdentityError(SecCommError):
    """A rank's X.509 identity cannot be used: its certificate chain did not verify against the
    trusted CAs (path, validity, key usage), names no host, or was not given.  ``peer``: the rank
    whose certificate failed."""

    def __init__(self, msg, *, peer=None):
        self.peer = peer
        super().__init__(msg)


class KeyScheduleError(SecCommError):
    """The job secret is missing, too short, unreadable, or stored with unsafe permissions."""


class CommClosedError(SecCommError):
    """The communicator was closed, or an earlier error left it unusable."""
