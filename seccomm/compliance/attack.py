"""On-path attacker harness (``seccomm attack``): a transport wrapper between ``SecureComm`` and
the real MPI transport that, on a seeded schedule, alters what one rank puts on the wire or, in
the setup classes, the setup messages a rank receives.

Operation classes (each trial is one fresh ``SecureComm`` and one allreduce on real ranks):

- ``flip-payload``, ``flip-tag``: one bit of a frame's body or tag (a ``none`` frame is its body
  alone: ``flip-tag`` is not applicable there);
- ``replay``: a frame from the previous operation (same size) instead of the current one;
- ``swap``: two chunks of one hop exchanged;
- ``truncate``: the frame shortened by 1..16 bytes;
- ``inject``: a frame with the right nonce and AAD sealed under a key the attacker made up;
- ``redirect``: a frame this rank sealed for another peer delivered in place of this peer's;
- ``drop``: the frame never arrives (detected as a timeout naming the peer);
- ``pad``: the frame lengthened by 1, 7, 16 or 4,096 bytes (detected as ``FrameError`` naming
  the peer: a frame larger than the receive);

Every trial runs under one configuration (:class:`~seccomm.compliance.config.ReviewConfig`: suite,
key exchange, chunk size, rotation point, encrypt policy; the report's own), and each class's row
records what it ran with (:func:`class_setup`).

Each trial ends in exactly one of: *detected* (the receiving rank raises ``AuthenticationError``
naming the attacking peer and the operation, ``TransportTimeout`` naming it for drops, and no rank
returns a wrong result), *silently accepted* (no rank raises: the altered frame was consumed; the
row counts how many of these changed the result), or *not applicable* (the attacker had nothing
different to put on the wire: no earlier frame of that size, or one byte-identical to the honest
frame; the row says why).  A trial in which some rank raised another error is none of these: it
fails the class (``other``).  The honest operation before the attacked one runs on other data, so
that a replayed or redirected frame carries other values even under the ``none`` suite.

What each class should give depends on the suite (:func:`expected`): with an authenticating suite
every trial is detected; with ``none`` the frames carry no tag, so the operation classes are
silently accepted, except ``truncate`` and ``pad`` (the frame length check) and ``drop`` (the
deadline).

Setup classes (each trial is one ``SecureComm`` construction on all ranks, psk and psk-dhe in
turn; :mod:`seccomm.handshake`):

- ``forge-node-map``: ranks on two simulated hosts with ``encrypt="inter-node"``; on its way to
  every rank, every other rank's hello is rewritten to claim this rank's host (a downgrade: if
  accepted, every hop would go in the clear);
- ``replay-setup``: session A is set up and used; the setup of session B then gets session A's
  messages (rank 0's, or every other rank's) in place of B's on ranks 1..p-1 (if accepted:
  forced key and nonce re-use);
- ``forge-config``: one settings field of one rank's hello altered on its way to one rank, or
  to all others (a downgrade of the suite, policy, chunk size, limits...).

Record classes (each trial is one ``SecureComm`` on all ranks, an agreeing ``bcast``, then one
in which rank 1 passes ``root=1`` and the others ``root=0``, of 1,024 elements or of none in
turn; :mod:`seccomm.agreement`): on every rank the attacker rewrites the argument records it
receives in the second op:

- ``reflect-record``: each rank's own record for that peer, its tag XORed with the XOR of the
  two directions' tags seen in the first op (with a fixed pad per rank in the tag, that XOR is
  the pads' difference and the forgery passes);
- ``replay-record``: the record that peer sent in the first op.

Link class ``drop-receipt`` (all ranks, at most :data:`LINK_TRIALS` trials, each a
``SecureComm`` at 4 KiB frames, ring, three allreduces of 9 frames a hop, deadline 1 s): every
receipt rank 1 sends rank 0 is dropped, so rank 0 waits on rank 1 in one op while rank 1 waits
on rank 0 in the next.  *Detected* when
every rank raises ``TransportTimeout`` naming the link ``(0, 1)``; *silently accepted* when a
rank returns from every op.  Link class ``hold-frame`` (same trials and deadline, bcasts of
4 KiB from the last rank ``s``, which sends to rank 0 directly): what ``s`` sends rank 0 in the
second op is held on the way past rank 0's deadline, while ``s``, its part done, works 0.9
deadlines before the third op, where rank 0's notice finds it soon after it began to wait (a
notice of an op it had done: it did not stall).  *Detected* when every
rank raises ``TransportTimeout`` naming the link ``(0, s)``: a rank that names itself as the
one that stalled, or ``s`` as such, is not.

A record trial counts as *detected* when every rank raises a ``SecCommError`` in that op (an
``AuthenticationError`` naming a rank other than itself, or ``ArgumentMismatchError``), and as
*silently accepted* when any rank returns.

A setup trial counts as *detected* when every rank raises ``ConfigMismatchError`` or
``AuthenticationError`` of the op ``"setup"`` naming a rank, and as *silently accepted* when any
rank finishes the construction (then, for ``forge-node-map``, the plaintext windows in frames to
the other host are counted; for ``replay-setup``, the keys shared with session A).
"""

from __future__ import annotations

import os
import time
from dataclasses import replace

import numpy as np

from ..errors import AuthenticationError, ConfigMismatchError, FrameError, SecCommError, TransportTimeout
from ..handshake import HELLO_BYTES, decode_hello, encode_hello
from ..keys import KEY_EXCHANGES
from ..suites import get_suite
from ..transports import RecordingTransport, TransportWrapper, host_bytes
from .config import ReviewConfig
from .insider import INSIDER_CLASSES, NOT_PROTECTED, run_insider_class

OP_CLASSES = ("flip-payload", "flip-tag", "replay", "swap", "truncate", "inject", "redirect", "drop", "pad")
SETUP_CLASSES = ("forge-node-map", "replay-setup", "forge-config")
RECORD_CLASSES = ("reflect-record", "replay-record")
LINK_CLASSES = ("drop-receipt", "hold-frame")
CLASSES = OP_CLASSES + SETUP_CLASSES + RECORD_CLASSES + LINK_CLASSES + INSIDER_CLASSES


class _Done:
    """A completed send request stand-in (for dropped frames)."""

    def Test(self, *a):  # noqa: N802 - mpi4py naming
        return True


class AttackTransport(TransportWrapper):
    """Operation classes: once ``armed``, alters the ``target``-th frame this rank sends
    (0-based).  Frames sent before (the trial's first, honest operation) are kept as replay and
    redirect material.

    Setup classes alter the setup messages this rank receives (``seen``: every one received, as
    it arrived): ``forge-node-map`` rewrites the host key of every other rank's hello to this
    rank's; ``replay-setup`` puts the messages of ``senders`` recorded in an earlier session
    (``replay``: that session's ``seen``) in place of this session's; ``forge-config``
    (``forge = (sender, field index)``) alters one settings field of ``sender``'s hello.  Forged
    hellos keep their MAC: the attacker has no key.  ``tagless``: the frames are clear (suite
    ``none``: no tag on the wire), so ``flip-tag`` has nothing to flip."""

    def __init__(
        self, inner, cls: str, target: int = 0, rng=None, *, replay=None, senders=(), forge=None,
        tagless=False,
    ):  # fmt: skip
        super().__init__(inner)
        self.cls, self.target, self.rng, self.tagless = cls, target, rng, tagless
        self.armed, self.sent, self.fired, self.victim = False, 0, False, None
        self.altered, self.na_reason = False, ""  # whether the frame put in differs from the honest one
        self.history: dict = {}  # (peer, nbytes) -> [frames], in sending order
        self._held = None
        self.replay, self.senders, self.forge = replay, set(senders), forge
        self.seen: list[np.ndarray] = []

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        self.inner.allgather(sendbuf, recvbuf, op_label, timeout)
        self._received(np.asarray(recvbuf).reshape(self.size, -1), None)

    def scatter(self, sendbuf, recvbuf, root, op_label, timeout=None):
        self.inner.scatter(sendbuf, recvbuf, root, op_label, timeout)
        self._received(np.asarray(recvbuf).reshape(1, -1), root)

    def _received(self, rows: np.ndarray, root) -> None:
        """Record, then alter (in place) the setup message just received: ``rows`` holds one row
        per sender (allgather) or the one row from ``root`` (scatter)."""
        i = len(self.seen)
        self.seen.append(rows.copy())
        hello = rows.shape[1] == HELLO_BYTES and root is None
        if self.cls == "replay-setup" and self.replay is not None and i < len(self.replay):
            for j in self.senders if root is None else ({0} if root in self.senders else ()):
                rows[j] = self.replay[i][j]
        elif self.cls == "forge-node-map" and hello:
            for j in range(self.size):
                if j != self.rank:
                    rows[j] = forge_hello(rows[j], lambda h: replace(h, host=self.host_key()))
        elif self.cls == "forge-config" and hello and self.forge is not None:
            sender, k = self.forge
            rows[sender] = forge_hello(rows[sender], lambda h: _alter_setting(h, k))

    def isend(self, buf, peer):
        frame = host_bytes(buf)
        mine = self.history.setdefault((peer, frame.size), [])
        if not self.armed:
            mine.append(frame.copy())
            return self.inner.isend(buf, peer)
        i, self.sent = self.sent, self.sent + 1
        if i != self.target or self.fired:
            r = self.inner.isend(buf, peer)
            if self._held is not None:  # swap: the held frame follows the next one
                held_peer, held = self._held
                self._held = None
                self.send_own(held, held_peer)
            return r
        self.fired, self.victim, self.altered = True, peer, True
        out = frame.copy()
        if self.cls == "flip-payload":
            out[self.rng.integers(0, max(1, out.size - 16))] ^= 1 << int(self.rng.integers(0, 8))
        elif self.cls == "flip-tag" and self.tagless:
            self.altered, self.na_reason = False, "a none frame carries no tag (its payload alone)"
        elif self.cls == "flip-tag":
            out[out.size - 16 + int(self.rng.integers(0, 16))] ^= 1 << int(self.rng.integers(0, 8))
        elif self.cls == "replay":  # the same hop's frame of the previous operation
            out = self._substitute(frame, mine[:1], "to this peer")
        elif self.cls == "truncate":
            out = out[: max(0, out.size - int(self.rng.integers(1, 17)))].copy()
        elif self.cls == "pad":
            extra = int(self.rng.choice([1, 7, 16, 4096]))  # (larger: tests/ranks/test_transports_on_ranks)
            out = np.concatenate([out, np.frombuffer(os.urandom(extra), np.uint8)])
        elif self.cls == "inject":
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            body = os.urandom(out.size - 16)
            out = np.frombuffer(AESGCM(os.urandom(32)).encrypt(os.urandom(12), body, b""), np.uint8).copy()
        elif self.cls == "redirect":  # a frame sealed for another peer, delivered here
            other = [f for (p, n), fs in self.history.items() if p != peer and n == frame.size for f in fs]
            out = self._substitute(frame, other[-1:], "for another peer")
        elif self.cls == "swap":
            self._held = (peer, out)
            return _Done()
        elif self.cls == "drop":
            self.inner.discard(buf, peer)  # (what rides with the frame is dropped with it)
            return _Done()
        return self.send_own(out, peer)

    def _substitute(self, frame: np.ndarray, material: list, where: str) -> np.ndarray:
        """The earlier frame in ``material`` in place of ``frame``; without one, or when it is
        byte-identical, the honest frame, and the trial is not applicable (``na_reason``)."""
        if not material:
            self.altered, self.na_reason = False, f"no earlier frame of {frame.size} bytes {where}"
            return frame.copy()
        if np.array_equal(material[0], frame):
            self.altered, self.na_reason = False, "the earlier frame is byte-identical to the honest one"
        return material[0].copy()


def forge_hello(block: np.ndarray, edit) -> np.ndarray:
    """An on-path forgery of a hello block (uint8): its hello changed by ``edit(Hello) -> Hello``,
    re-encoded, with the original MAC (an attacker without the secret cannot make a new one)."""
    hello = decode_hello(block.tobytes())
    if hello is None:
        return block
    forged = encode_hello(edit(hello), None)
    forged[-32:] = block[-32:]
    return forged


#: what a forger puts in place of a setting (the first value that differs from the honest one)
_ALTERNATIVES = {
    "suite": ("none", "aes-256-gmac", "chacha20-poly1305"),
    "encrypt": ("inter-node", "all"),
    "key_exchange": ("psk", "psk-dhe"),
    "algorithm": ("ring", "recursive_doubling"),
}


def _alter_setting(hello, k: int):
    """``hello`` with its ``k``-th settings field (modulo their number, sorted) changed."""
    settings = dict(hello.settings)
    name = sorted(settings)[k % len(settings)]
    v = settings[name]
    if name in _ALTERNATIVES:
        v = next(a for a in _ALTERNATIVES[name] if a != v)
    elif isinstance(v, int):
        v = v + 1 if v < 1 << 40 else v // 2
    else:  # a label, a digest, or None
        v = f"{v}-forged"
    settings[name] = v
    return replace(hello, settings=settings)


class RecordAttack(TransportWrapper):
    """Record classes: the first op's records are seen (what this rank sent each peer, and what an
    agreeing peer sent it: the table the op agreed on); from the second op on, every record
    received is rewritten before the agreement's check sees it (``reflect-record``: the record
    sent to that peer, its tag XORed with the two directions' XOR seen first; ``replay-record``:
    that peer's record of the first op)."""

    def __init__(self, inner, cls: str):
        super().__init__(inner)
        self.cls, self.ops, self.xor, self.first = cls, 0, {}, {}

    def agree_start(self, record, table, check, expect=None):
        self.ops += 1
        peers = [j for j in range(self.size) if j != self.rank]
        n = record.shape[1]
        if self.ops == 1 and expect is not None:
            seen = np.frombuffer(expect, np.uint8).reshape(self.size, n)
            for j in peers:
                self.first[j] = seen[j].copy()
                self.xor[j] = seen[j, 24:] ^ record[j, 24:]
            return self.inner.agree_start(record, table, check, expect)

        def rewritten():
            for j in peers:
                if j not in self.first:
                    continue
                if self.cls == "reflect-record":
                    table[j, :24] = record[j, :24]
                    table[j, 24:] = record[j, 24:] ^ self.xor[j]
                else:
                    table[j] = self.first[j]
            check()

        return self.inner.agree_start(record, table, rewritten, None)


def run_record_class(
    comm, cls: str, trials: int, seed: int = 0, timeout: float = 2.0, psk: bytes | None = None,
    config: ReviewConfig | None = None,
) -> dict:  # fmt: skip
    """Run ``trials`` record attacks of class ``cls`` (collective over ``comm``, >= 2 ranks; see
    the module docstring) under ``config``'s suite and settings.  Returns the class's row
    (:func:`_row`), identical on every rank."""
    from mpi4py import MPI

    from ..comm import SecureComm

    config = config or ReviewConfig()
    rank, size = comm.Get_rank(), comm.Get_size()
    settings = config.settings()
    detected = silent = other = 0
    examples: list[str] = []
    for t in range(trials):
        n = 0 if t % 2 else 1024  # an op with frames, and one without
        sc = SecureComm(
            comm, config.suite, psk=psk, timeout=timeout, wrap_transport=lambda tr: RecordAttack(tr, cls),
            **settings,
        )  # fmt: skip
        err = None
        try:
            sc.bcast(np.full(n, 1.0 + rank, np.float32), root=0)
            sc.bcast(np.full(n, 10.0 + rank, np.float32), root=1 if rank == 1 else 0)
        except SecCommError as e:
            err = e
        except ValueError as e:  # on every rank, before any traffic: the configuration cannot run it
            sc.close()
            return _row(
                cls, trials, 0, 0, "", config.record(), na=trials, reason=f"not run: {e}", suite=config.suite
            )
        sc.close()
        auth_ok = not isinstance(err, AuthenticationError) or err.peer in set(range(size)) - {rank}
        flags = np.array([int(err is None), int(err is not None and not auth_ok)], np.int64)
        comm.Allreduce(MPI.IN_PLACE, flags, MPI.SUM)
        if err is not None and not examples:
            examples.append(f"{type(err).__name__}: {err}")
        silent += int(flags[0] > 0)
        other += int(flags[0] == 0 and flags[1] > 0)
        detected += int(flags[0] == 0 and flags[1] == 0)
        comm.Barrier()
    ex = next((e for part in comm.allgather(examples) for e in part), "")
    return _row(cls, trials, detected, silent, ex, config.record(), other=other, suite=config.suite)


class _SentStandIn:
    """A completed send request stand-in (a receipt the attacker dropped)."""

    def Test(self, *a):  # noqa: N802 - mpi4py naming
        return True


class ReceiptDrop(TransportWrapper):
    """``drop-receipt``: every receipt rank 1 sends rank 0 is dropped on the way."""

    def isend_receipt(self, buf, peer):
        if self.rank == 1 and peer == 0:
            return _SentStandIn()
        return self.inner.isend_receipt(buf, peer)


class FrameHold(TransportWrapper):
    """``hold-frame``: what the last rank sends rank 0 in the second op is held on the way (it
    lands in a receive nobody reads; rank 0's own receive never completes)."""

    def __init__(self, inner):
        super().__init__(inner)
        self.op = 0

    def agree_start(self, *args, **kwargs):
        self.op += 1  # (one agreement per op)
        return self.inner.agree_start(*args, **kwargs)

    def irecv(self, buf, peer):
        if self.rank == 0 and peer == self.size - 1 and self.op == 2:
            from mpi4py import MPI

            comm = self.inner.comm
            self._own.append(held := np.empty(1 << 16, np.uint8))
            self.inner.irecv(held, peer)
            self._own.append(never := np.empty(16, np.uint8))
            return comm.Irecv([never, MPI.BYTE], peer, _NEVER_TAG)
        return self.inner.irecv(buf, peer)


#: a tag on which nothing is ever sent (the held receive's stand-in waits there)
_NEVER_TAG = 32000
#: the link trials' frames [B], frames a hop (more than MPI's receipt_after: acknowledged),
#: deadline [s] (each trial waits out two; long enough for loaded cores) and most trials per run
_LINK_CHUNK, _LINK_FRAMES, _LINK_TIMEOUT, LINK_TRIALS = 4096, 9, 1.0, 3


def _link_ops(cls: str, sc, comm, x) -> None:
    """The three ops of one trial of link class ``cls``."""
    if cls == "drop-receipt":
        for _k in range(3):
            sc.allreduce(x, np.empty_like(x))
        return
    y, last = x[: _LINK_CHUNK // 4].copy(), comm.Get_size() - 1
    for k in range(3):
        sc.bcast(y, root=last)  # (binomial tree: rank 0 is the root's first child)
        if k == 1 and comm.Get_rank() == last:
            time.sleep(0.9 * _LINK_TIMEOUT)  # (its own work between two ops, shorter than the deadline)


def run_link_class(
    comm, cls: str, trials: int, seed: int = 0, psk: bytes | None = None, config: ReviewConfig | None = None
) -> dict:
    """Run ``min(trials, LINK_TRIALS)`` trials of link class ``cls`` (``drop-receipt``,
    ``hold-frame``;
    collective over ``comm``, >= 2 ranks; see the module docstring: each trial waits out two
    deadlines) under ``config``'s suite and key exchange.  Returns the class's row (:func:`_row`),
    identical on every rank."""
    from mpi4py import MPI

    from ..comm import SecureComm

    config = config or ReviewConfig()
    rank, size = comm.Get_rank(), comm.Get_size()
    settings = {**config.settings(), "chunk_bytes": _LINK_CHUNK}
    record = config.record(
        chunk_bytes=_LINK_CHUNK,
        note=f"drop-receipt runs at chunk_bytes {_LINK_CHUNK:,}, ring: {_LINK_FRAMES} frames a hop "
        "(acknowledged)"
        if cls == "drop-receipt"
        else f"hold-frame: bcasts of {_LINK_CHUNK:,} B from root {size - 1}",
    )
    detected = silent = other = 0
    examples: list[str] = []
    x = np.ones(size * _LINK_FRAMES * (_LINK_CHUNK // 4), np.float32)
    trials = min(trials, LINK_TRIALS)
    for _ in range(trials):
        sc = SecureComm(
            comm, config.suite, psk=psk, timeout=_LINK_TIMEOUT, algorithm="ring",
            wrap_transport=ReceiptDrop if cls == "drop-receipt" else FrameHold, **settings,
        )  # fmt: skip
        err = None
        try:
            _link_ops(cls, sc, comm, x)
        except SecCommError as e:
            err = e
        except ValueError as e:  # on every rank, before any traffic: the configuration cannot run it
            sc.close()
            return _row(cls, trials, 0, 0, "", record, na=trials, reason=f"not run: {e}", suite=config.suite)
        sc.close()
        link = (0, 1) if cls == "drop-receipt" else (0, size - 1)
        named = isinstance(err, TransportTimeout) and err.link == link and err.peer != rank
        flags = np.array([int(err is None), int(err is not None and not named)], np.int64)
        comm.Allreduce(MPI.IN_PLACE, flags, MPI.SUM)
        if err is not None and (not examples or not named):
            examples[:] = [f"{type(err).__name__}: {err}"]
        silent += int(flags[0] > 0)
        other += int(flags[0] == 0 and flags[1] > 0)
        detected += int(flags[0] == 0 and flags[1] == 0)
        comm.Barrier()
    ex = next((e for part in comm.allgather(examples) for e in part), "")
    return _row(cls, trials, detected, silent, ex, record, other=other, suite=config.suite)


class _SimulatedHost(TransportWrapper):
    """The honest layout of a two-host job on one machine: this rank reports host key ``host``."""

    def __init__(self, inner, host: int):
        super().__init__(inner)
        self.host = host

    def host_key(self):
        return self.host


def two_hosts(size: int) -> list[int]:
    """The simulated host of every rank: the first half of the ranks on host 0, the rest on 1."""
    return [0 if r < (size + 1) // 2 else 1 for r in range(size)]


def _setup_attempt(comm, kx: str, psk: bytes | None, conf: dict, timeout: float, wrap, **kw):
    """(SecureComm, None) when the construction succeeds, else (None, the error).  ``conf``: the
    suite and settings under review (:func:`_setup_settings`); ``kw`` overrides them."""
    from ..comm import SecureComm

    settings = {**conf, **kw}
    suite = settings.pop("suite")
    try:
        sc = SecureComm(
            comm, suite, psk=psk, key_exchange=kx, timeout=timeout, wrap_transport=wrap, **settings
        )
        return sc, None
    except SecCommError as e:
        return None, e


def _trial_forge_node_map(comm, rng, t, kx, psk, conf, timeout):
    """(error, leaks): the forged node map must fail the setup; if it does not, the plaintext
    windows of an allreduce found in frames this rank sent to the other host."""
    from .evidence import find_plaintext, gradients

    rank, size = comm.Get_rank(), comm.Get_size()
    hosts = two_hosts(size)
    layout = 0x5EC0 + 1000 * t  # simulated host keys of this trial

    def wrap(tr):
        return AttackTransport(RecordingTransport(_SimulatedHost(tr, layout + hosts[rank])), "forge-node-map")

    sc, err = _setup_attempt(comm, kx, psk, conf, timeout, wrap, encrypt="inter-node", algorithm="ring")
    if sc is None:
        return err, 0
    x = gradients(rank, 4096, t)
    y = np.empty_like(x)
    try:
        sc.allreduce(x, y)
    except SecCommError:
        pass
    recorded = sc.transport.inner.frames
    sent = [f for kind, peer, f in recorded if kind == "frame" and hosts[peer] != hosts[rank]]
    leaks = find_plaintext(sent, [gradients(r, 4096, t) for r in range(size)] + [y])["hits"]
    sc.close()
    return None, leaks


def _trial_replay_setup(comm, rng, t, kx, psk, conf, timeout):
    """(error, leaks): session B, fed session A's setup messages on ranks 1..p-1, must fail; if it
    does not, how many of this rank's keys (group key, direction keys) equal session A's."""
    rank, size = comm.Get_rank(), comm.Get_size()
    every_other = bool(rng.integers(0, 2))  # the same draw on every rank: rank 0's messages, or all
    a, _ = _setup_attempt(comm, kx, psk, conf, timeout, lambda tr: AttackTransport(tr, "replay-setup"))
    x = np.arange(1024, dtype=np.float32) + rank
    a.allreduce(x, np.empty_like(x))  # session A's keys in use
    senders = set(range(size)) - {rank} if every_other else {0}

    def wrap(tr):
        return AttackTransport(tr, "replay-setup", replay=a.transport.seen, senders=senders)

    b, err = _setup_attempt(comm, kx, psk, conf, timeout, wrap if rank != 0 else None)
    leaks = 0
    if b is not None:
        pairs = [(0, rank, j) for j in range(size) if j != rank]
        leaks = int(b.session.keys.group_key(0) == a.session.keys.group_key(0))
        leaks += sum(b.session.keys.direction_key(*p) == a.session.keys.direction_key(*p) for p in pairs)
        b.close()
    a.close()
    return err, leaks


def _trial_forge_config(comm, rng, t, kx, psk, conf, timeout):
    """(error, 0): one settings field of one rank's hello altered on its way to one rank, or to
    every other rank; the setup must fail on every rank."""
    rank, size = comm.Get_rank(), comm.Get_size()
    sender, victim = (int(v) for v in rng.choice(size, 2, replace=False))
    to_all, k = bool(rng.integers(0, 2)), int(rng.integers(0, 64))
    hit = rank != sender if to_all else rank == victim
    wrap = (lambda tr: AttackTransport(tr, "forge-config", forge=(sender, k))) if hit else None
    sc, err = _setup_attempt(comm, kx, psk, conf, timeout, wrap)
    if sc is not None:
        sc.close()
    return err, 0


_SETUP_TRIALS = {
    "forge-node-map": _trial_forge_node_map,
    "replay-setup": _trial_replay_setup,
    "forge-config": _trial_forge_config,
}


def _setup_settings(cls: str, config: ReviewConfig) -> tuple[dict, dict]:
    """(SecureComm settings, evidence record) of setup class ``cls`` under ``config``: the
    configured suite, chunk size, rotation point and encrypt policy, except what the class must
    set itself (declared in the record): both key exchanges in turn, and ``forge-node-map``'s
    ``encrypt="inter-node"`` (the policy its forgery attacks)."""
    conf = {"suite": config.suite, **config.settings()}
    conf.pop("key_exchange")
    dev = {"key_exchange": "psk and psk-dhe in turn"}
    notes = ["a setup class runs both key exchanges in turn"]
    if cls == "forge-node-map":
        conf["encrypt"] = dev["encrypt"] = "inter-node"
        notes.append("forge-node-map attacks the inter-node policy's node map")
    return conf, config.record(note="; ".join(notes), **dev)


def run_setup_class(
    comm,
    cls: str,
    trials: int,
    seed: int = 0,
    timeout: float = 5.0,
    psk: bytes | None = None,
    suite: str = "aes-256-gcm",
    config: ReviewConfig | None = None,
) -> dict:
    """Run ``trials`` setup attacks of class ``cls`` (collective over ``comm``, >= 2 ranks) under
    ``config`` (default: ``suite`` with default settings; see :func:`_setup_settings`), psk and
    psk-dhe in turn, with the job secret or ``psk``.  Returns, identical on every rank: trials,
    detected, silently_accepted, leaks (plaintext windows to the other host, or keys shared with
    session A, on ranks where a setup was accepted), example, config."""
    from mpi4py import MPI

    size = comm.Get_size()
    conf, record = _setup_settings(cls, config or ReviewConfig(suite=suite))
    rng = np.random.default_rng(seed + 7919 * CLASSES.index(cls))  # the same draws on every rank
    detected = silent = leaks = 0
    examples: list[str] = []
    for t in range(trials):
        err, leaked = _SETUP_TRIALS[cls](comm, rng, t, KEY_EXCHANGES[t % 2], psk, conf, timeout)
        named = getattr(err, "peer", None) in range(size) and getattr(err, "op", None) == "setup"
        ok_here = isinstance(err, (ConfigMismatchError, AuthenticationError)) and named
        if err is not None and not examples:
            examples.append(f"{type(err).__name__}: {err}")
        flags = np.array([0 if ok_here else 1, 1 if err is None else 0, leaked], np.int64)
        comm.Allreduce(MPI.IN_PLACE, flags, MPI.SUM)
        detected += int(flags[0] == 0)
        silent += int(flags[1] > 0)
        leaks += int(flags[2])
        comm.Barrier()
    ex = next((e for part in comm.allgather(examples) for e in part), "")
    if leaks:
        what = "plaintext windows crossed hosts" if cls == "forge-node-map" else "keys equal to session A's"
        ex = f"{leaks} {what}; {ex}"
    row = _row(
        cls, trials, detected, silent, ex, record, other=trials - detected - silent, suite=config.suite
    )
    return {**row, "leaks": leaks}


def expected(cls: str, suite: str) -> str:
    """What class ``cls`` should give under ``suite``: ``"detected"``, or ``"silently accepted"``
    for the operation classes under a suite without authentication (``none``) — but ``truncate``
    and ``pad`` (the frame length checks) and ``drop`` (the deadline), which every suite detects,
    as it detects the setup and link classes.  An insider class (run under identity x509 only,
    :mod:`~seccomm.compliance.insider`) is detected under an authenticating suite."""
    if cls in SETUP_CLASSES + LINK_CLASSES or cls in ("truncate", "drop", "pad"):
        return "detected"
    if get_suite(suite).authenticated:
        return "detected"
    if cls == "replay-record":  # (an authentic record of another op: its number differs)
        return "detected"
    return "silently accepted"


#: largest payload [B] the swap class sizes for the configured chunk (2 full chunks per hop)
SWAP_MAX_BYTES = 64 << 20


def class_setup(cls: str, config: ReviewConfig, count: int) -> tuple[int, str, dict]:
    """(elements per rank, algorithm, what the row records) for class ``cls`` under ``config``.

    Every class runs under the configured suite, key exchange, chunk size, rotation point and
    encrypt policy; the algorithm is the class's own (``redirect`` needs recursive doubling,
    ``swap`` a ring).  ``swap`` needs two full chunks per hop of a 2-rank ring (``count`` =
    ``chunk_bytes`` float32 elements: 4 * ``chunk_bytes`` bytes), up to :data:`SWAP_MAX_BYTES`;
    past that it runs at a smaller chunk size and its record says so (``note``)."""
    alg = "recursive_doubling" if cls == "redirect" else "ring" if cls == "swap" else "auto"
    if cls != "swap":
        return count, alg, config.record()
    if 4 * config.chunk_bytes <= SWAP_MAX_BYTES:
        return max(count, 4 * (config.chunk_bytes // 4)), alg, config.record()
    chunk = SWAP_MAX_BYTES // 4
    note = (
        f"swap ran at chunk_bytes {chunk:,}: two full chunks per hop at the configured "
        f"{config.chunk_bytes:,} would need {4 * config.chunk_bytes:,}-byte payloads"
    )
    return chunk, alg, config.record(chunk_bytes=chunk, note=note)


def run_class(
    comm,
    cls: str,
    trials: int,
    seed: int = 0,
    count: int = 1024,
    timeout: float = 2.0,
    psk: bytes | None = None,
    suite: str = "aes-256-gcm",
    config: ReviewConfig | None = None,
) -> dict:
    """Run ``trials`` attacks of class ``cls`` (collective over ``comm``, >= 2 ranks; ``redirect``
    needs >= 3) under ``config`` (default: ``suite`` with default settings), ``count`` float32
    elements per rank (see :func:`class_setup`), the job secret or ``psk``.  Returns, identical
    on every rank, the class's row (:func:`_row`; every trial not applicable, with the reason, when
    the configuration cannot run it)."""
    from ..comm import SecureComm

    config = config or ReviewConfig(suite=suite)
    size, rank = comm.Get_size(), comm.Get_rank()
    rng = np.random.default_rng(seed + 7919 * CLASSES.index(cls))
    tally = {"detected": 0, "silent": 0, "changed": 0, "na": 0, "other": 0}
    examples: list[str] = []
    na_reasons: list[str] = []
    count, alg, record = class_setup(cls, config, count)
    keys = ("key_exchange", "chunk_bytes", "rotate_after_frames", "encrypt", "identity")
    settings = {k: record[k] for k in keys}
    x = np.arange(count, dtype=np.float32) + rank
    earlier = x * 2 + 1  # the honest operation's data: other values than the attacked one's
    honest = np.empty_like(x)
    comm.Allreduce(x, honest)
    tagless = get_suite(config.suite).clear
    for t in range(trials):
        # redirect: rank 1 is the rank that seals frames of one size for two peers (recursive
        # doubling's fold on 3 ranks, or its two partners on 4); elsewhere any rank attacks
        attacker = 1 if cls == "redirect" else int(rng.integers(0, size))
        target = 1 if cls == "redirect" else 0  # redirect: the second partner gets the first's frame
        wrap = (
            (
                lambda tr: AttackTransport(
                    tr, cls, target, np.random.default_rng(seed * 1000 + t), tagless=tagless
                )
            )
            if rank == attacker
            else None
        )
        # short deadlines where a rank is left waiting by design (drop; pad: the fallback record a
        # sender whose op went well never sends; swap's allgather phase)
        wait = 0.15 if cls in ("drop", "pad") else 0.3 if cls == "swap" else timeout
        sc = SecureComm(
            comm, config.suite, psk=psk, timeout=wait, algorithm=alg, wrap_transport=wrap, **settings
        )
        try:
            sc.allreduce(earlier, np.empty_like(x))  # honest operation: the attacker's material
        except ValueError as e:  # on every rank, before any traffic: the configuration cannot run it
            sc.close()
            return _row(cls, trials, 0, 0, "", record, na=trials, reason=f"not run: {e}", suite=config.suite)
        outcome, note = _attacked_trial(comm, sc, cls, x, honest, attacker, rank == attacker)
        tally[outcome] += 1
        tally["changed"] += outcome == "silent" and note == "changed"
        if outcome == "na" and note not in na_reasons:
            na_reasons.append(note)
        if outcome in ("detected", "other") and note and not examples:
            examples.append(note)
        comm.Barrier()
    ex = next((e for part in comm.allgather(examples) for e in part), "")
    counts = {"na": tally["na"], "changed": tally["changed"], "other": tally["other"]}
    return _row(cls, trials, tally["detected"], tally["silent"], ex, record, reason="; ".join(na_reasons),
                suite=config.suite, **counts)  # fmt: skip


def _attacked_trial(comm, sc, cls: str, x, honest, attacker: int, attacking: bool) -> tuple[str, str]:
    """One attacked allreduce of ``x`` on ``sc`` (the attacker's transport armed); (outcome, note),
    identical on every rank but the note: ``"detected"`` (note: the victim's error),
    ``"silent"`` (note ``"changed"`` when some rank's result differs from ``honest``), ``"na"``
    (note: why), ``"other"`` (note: the unexpected error)."""
    from mpi4py import MPI

    if attacking:
        sc.transport.armed = True
    y = np.full_like(x, np.nan)
    err = None
    try:
        sc.allreduce(x, y)
    except SecCommError as e:
        err = e
    t = sc.transport if attacking else None
    victim, altered = (t.victim if t.victim is not None else -1, int(t.altered)) if t else (-1, 0)
    reason = comm.bcast(t.na_reason if t else None, root=attacker)
    sc.close()
    info = np.array([victim, altered], np.int64)
    comm.Allreduce(MPI.IN_PLACE, info, MPI.MAX)
    victim = int(info[0])
    want = TransportTimeout if cls == "drop" else FrameError if cls == "pad" else AuthenticationError
    named = isinstance(err, want) and err.peer == attacker and "allreduce" in str(err.op)
    wrong = err is None and not np.array_equal(y, honest)
    is_victim = comm.Get_rank() == victim
    flags = np.array([int(is_victim and named), int(err is not None), int(wrong)], np.int64)
    comm.Allreduce(MPI.IN_PLACE, flags, MPI.SUM)
    text = f"{type(err).__name__}: {err}" if err is not None else ""
    if not info[1]:
        return "na", reason or "the attack did not fire"
    if flags[0] == 1 and flags[2] == 0:
        return "detected", text if is_victim else ""
    if flags[1] == 0:
        return "silent", "changed" if flags[2] else ""
    return "other", text


def _row(
    cls: str,
    trials: int,
    detected: int,
    silent: int,
    example: str,
    record: dict,
    *,
    na: int = 0,
    reason: str = "",
    changed: int = 0,
    other: int = 0,
    suite: str | None = None,
) -> dict:
    """One class's result row (identical on every rank): trials, detected, silently_accepted
    (``changed_results`` of them changed a result), not_applicable (``reason``), other (trials
    that raised an unexpected error), expected (:func:`expected`), passed (the outcome fits the
    expectation: nothing silently accepted that should be detected, no other error), example."""
    want = expected(cls, suite or record.get("suite", "aes-256-gcm"))
    passed = other == 0 and (silent == 0 if want == "detected" else detected == 0)
    return {
        "class": cls,
        "trials": trials,
        "detected": detected,
        "silently_accepted": silent,
        "changed_results": changed,
        "not_applicable": na,
        "not_applicable_reason": reason,
        "other": other,
        "expected": want,
        "passed": passed,
        "example": example,
        "config": record,
    }


#: an upper bound on one trial of the pair, seconds (its waits have deadlines of 2 s or less: setup,
#: the honest and the attacked operation, close); an idle rank waits ``60 + trials`` times this
TRIAL_LIMIT_S = 30.0
_ARRIVED_TAG = 7331  # the polite barrier's messages on the caller's communicator


def _polite_barrier(comm, limit_s: float, what: str) -> None:
    """Wait until every rank of ``comm`` has arrived, polling every 2 ms (idle ranks must not spin
    on the cores the pair is using).  Each rank sends every other one a byte; past ``limit_s``
    seconds ``TransportTimeout`` names the rank(s) whose byte did not come (dead or stuck), and
    ``what`` (the step they did not finish)."""
    from mpi4py import MPI

    from ..transports.base import Backoff, poll_until

    rank, size = comm.Get_rank(), comm.Get_size()
    one, got = np.ones(1, np.uint8), np.zeros(size, np.uint8)
    others = [r for r in range(size) if r != rank]
    rreqs = {r: comm.Irecv([got[r : r + 1], MPI.BYTE], r, _ARRIVED_TAG) for r in others}
    sreqs = [comm.Isend([one, MPI.BYTE], r, _ARRIVED_TAG) for r in others]
    missing = list(others)

    def arrived():
        missing[:] = [r for r in missing if not rreqs[r].Test()]
        return not missing

    if poll_until(arrived, limit_s, lambda: False, Backoff(sleep_s=0.002)):
        MPI.Request.Waitall(sreqs)
        return
    for r in missing:  # unmatched receives: safe to cancel
        rreqs[r].Cancel()
        rreqs[r].Wait()
    raise TransportTimeout(
        f"attack harness: rank(s) {missing} did not arrive within {limit_s:g} s after {what} "
        f"(died, or stuck)",
        peer=missing[0],
        op="attack barrier",
        timeout_s=limit_s,
    )


def run_classes(
    comm,
    classes,
    trials: int,
    seed: int,
    log=print,
    suite: str = "aes-256-gcm",
    config: ReviewConfig | None = None,
    psk: bytes | None = None,
) -> list[dict]:
    """Run every attack class in ``classes`` (collective over ``comm``) under ``config`` (default:
    ``suite`` with default settings) and the job secret (or ``psk``); ``log(line)`` is called on
    rank 0 with the header and one table row per class.  Returns the rows (:func:`_row`) on every
    rank; ``redirect`` on fewer than 3 ranks is not applicable (every trial, with the reason)."""
    from mpi4py import MPI

    config = config or ReviewConfig(suite=suite)
    rank = comm.Get_rank()
    rows = []
    if rank == 0:
        log(
            f"# seccomm attack: {comm.Get_size()} ranks, {trials} trial{'s' * (trials != 1)} per class "
            f"(the link classes at most {min(trials, LINK_TRIALS)}), "
            f"seed {seed}; "
            f"every class on ranks 0-1 except redirect, the setup, record, link and insider classes (all "
            f"ranks); "
            f"{config.describe()}"
        )
        log(
            f"# {'attack class':>20} {'trials':>7} {'detected':>9} {'silently accepted':>18} {'n/a':>5} "
            f"{'expected':>28} {'time [s]':>9}  example or reason"
        )
    # Two ranks for every class but redirect (the victim is the attacker's only peer, so no rank
    # is left waiting for a deadline); redirect needs a rank that seals for two peers: 3 or more.
    pair = comm.Split(0 if rank < 2 else MPI.UNDEFINED, rank)
    for cls in classes:
        tc = time.time()
        if cls in SETUP_CLASSES:
            r = run_setup_class(comm, cls, trials, seed, config=config, psk=psk)
        elif cls in RECORD_CLASSES:
            r = run_record_class(comm, cls, trials, seed, config=config, psk=psk)
        elif cls in LINK_CLASSES:
            r = run_link_class(comm, cls, trials, seed, config=config, psk=psk)
        elif cls in INSIDER_CLASSES:
            r = run_insider_class(comm, cls, trials, config, psk, _row)
        elif cls == "redirect" and comm.Get_size() < 3:
            why = f"needs >= 3 ranks (one that seals for two peers); this run has {comm.Get_size()}"
            r = _row(cls, trials, 0, 0, "", config.record(), na=trials, reason=why, suite=config.suite)
        elif cls == "redirect":
            r = run_class(comm, cls, trials, seed, config=config, psk=psk)
        else:
            r = run_class(pair, cls, trials, seed, config=config, psk=psk) if pair != MPI.COMM_NULL else None
            _polite_barrier(comm, 60 + trials * TRIAL_LIMIT_S, f"attack class {cls} on ranks 0-1")
            r = comm.bcast(r, root=0)
        r["seconds"] = round(time.time() - tc, 1)
        rows.append(r)
        if rank == 0:
            log(
                f"  {cls:>20} {r['trials']:>7} {r['detected']:>9} {r['silently_accepted']:>18} "
                f"{r['not_applicable']:>5} {r['expected']:>28} {r['seconds']:9.1f}  {_cut(explain(r), 110)}"
            )
    if pair != MPI.COMM_NULL:
        pair.Free()
    return rows


def _cut(text: str, width: int) -> str:
    """``text`` in at most ``width`` characters, cut at a word with an ellipsis when longer (the
    whole text is in the JSON rows)."""
    if len(text) <= width:
        return text
    head = text[: width - 1]
    return (head.rsplit(" ", 1)[0] if " " in head else head).rstrip(",;:") + "…"


def miss_bound(trials: int, confidence: float = 0.95) -> float:
    """The one-sided upper confidence bound of a class's miss rate when none of ``trials``
    trials was missed: ``1 - (1 - confidence) ** (1 / trials)`` (the exact binomial, Clopper
    and Pearson 1934; about 3 / trials at 95 %, the "rule of three")."""
    return 1.0 - (1.0 - confidence) ** (1.0 / trials) if trials > 0 else 1.0


def explain(r: dict) -> str:
    """The row's last column: what went wrong, why trials were not applicable, what the silently
    accepted trials did, or an example of a detection."""
    if r["expected"] == NOT_PROTECTED:
        return r["not_applicable_reason"]
    parts = []
    if r["other"]:
        parts.append(f"FAILED: {r['other']} trial(s) raised another error: {r['example']}")
    if r["not_applicable"]:
        parts.append(f"n/a: {r['not_applicable_reason']}")
    if r["silently_accepted"] and r["class"] in RECORD_CLASSES:
        parts.append(
            f"{r['silently_accepted']} trial(s) in which a rank returned from the op whose arguments differed"
        )
    elif r["silently_accepted"]:
        parts.append(
            f"{r['silently_accepted']} altered frame(s) consumed without an error, "
            f"{r.get('changed_results', 0)} changed the result"
        )
    if r["detected"] and r["expected"] != "detected":
        parts.append(f"detected although the suite authenticates nothing: {r['example']}")
    elif r["detected"] and not parts:
        how = (
            "by the frame length check (no tag): "
            if r["class"] in ("truncate", "pad")
            and r["expected"] == "detected"
            and not get_suite(r["config"].get("suite", "aes-256-gcm")).authenticated
            else ""
        )
        parts.append(how + r["example"])
    return "; ".join(parts)


def main_ranks(
    classes,
    trials: int,
    seed: int,
    suite: str = "aes-256-gcm",
    psk: bytes | None = None,
    identity: str = "psk",
) -> int:
    """Every rank of ``seccomm attack``: run ``classes`` on ``MPI.COMM_WORLD`` with the job secret
    (or ``psk``) and ``identity`` (``x509``: each rank's certificate files from its environment),
    rank 0 prints the table and a verdict line.  Exit status 1 when a class's outcome does not
    fit what the suite should give (:func:`expected`: an attack silently accepted that should be
    detected, or a trial that raised another error), else 0; an insider class under psk (not
    protected, not run) counts neither way."""
    from mpi4py import MPI

    t0 = time.time()
    log = lambda s: print(s, flush=True)  # noqa: E731
    config = ReviewConfig(suite=suite, identity=identity)
    rows = run_classes(MPI.COMM_WORLD, classes, trials, seed, log=log, config=config, psk=psk)
    if MPI.COMM_WORLD.Get_rank() == 0:
        print(verdict(rows, suite, time.time() - t0), flush=True)
    return 0 if all(r["passed"] is not False for r in rows) else 1


def verdict(rows: list[dict], suite: str, seconds: float) -> str:
    """The last line of ``seccomm attack``: OK or FAILED, the totals, and what was expected."""
    bad = [r["class"] for r in rows if r["passed"] is False]
    na = [r["class"] for r in rows if r["not_applicable"]]
    exposed = [r["class"] for r in rows if r["expected"] == NOT_PROTECTED]
    total = sum(r["trials"] for r in rows)
    counts = (
        f"{total} attacks: {sum(r['detected'] for r in rows)} detected, "
        f"{sum(r['silently_accepted'] for r in rows)} silently accepted, "
        f"{sum(r['not_applicable'] for r in rows)} not applicable"
    )
    head = f"FAILED ({', '.join(bad)})" if bad else "OK"
    if not get_suite(suite).authenticated:
        counts += f"; suite {suite} authenticates no frame: silently accepted is what it should give"
    if exposed:
        counts += f"; {', '.join(exposed)}: {NOT_PROTECTED} (not run: identity psk)"
    line = f"# {head}: {counts}{f' (n/a: {chr(44).join(na)})' if na else ''}, {seconds:.0f} s"
    ran = sorted({r["trials"] for r in rows if r["trials"] and not r["not_applicable"]})
    if ran and get_suite(suite).authenticated:
        bounds = ", ".join(f"{100 * miss_bound(n):.1f} % for {n} trials" for n in ran)
        line += (
            f"\n# confidence: a class with none of n trials missed has a miss rate below "
            f"1 - 0.05^(1/n) at 95 % confidence ({bounds}); --trials for more (the link classes "
            f"run at most {LINK_TRIALS})"
        )
    return line
