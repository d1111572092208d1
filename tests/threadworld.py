"""An in-process world of ``size`` ranks, one thread each, for setup tests without mpiexec.

:class:`ThreadTransport` keeps MPI's matching rules: collectives match in call order (a rank
calling another collective than the others raises ``FrameError``), point-to-point messages match
in posting order per (sender, receiver) pair; every wait has a deadline (``TransportTimeout``).
Host keys come from the world (``hosts``), so a test can lay ranks out on simulated hosts.
Every point-to-point call is checked against the transport contract the MPI transport relies on
(peers in range and not itself, the request waited on is one of this transport's for that peer,
deadlines > 0, a label for the error, a send buffer unchanged until its send was waited on): a
breach raises ``AssertionError`` inside the op.
Messages an operation left unreceived (after an error) stay queued: build a new world after one.
A rank that stops an op (``abort``/``fail``, as ``SecureComm`` calls them) makes every wait on it
raise ``PeerAbortError`` naming it at once, as the MPI transport's authenticated notices do.
A send buffer must stay as it was until its send completed or its receiver has the message
(MPI may read it until then): the send's wait, or the receiver's taking of the message,
raises ``AssertionError`` when it changed before.
Receipts (hops of more than ``World.receipt_after`` frames, and clear hops of 1 MiB or more,
as the MPI transport's) travel on a channel of their own.
"""

from __future__ import annotations

import threading
from collections import defaultdict

import numpy as np

from seccomm.errors import FrameError, PeerAbortError, SecCommError, TransportTimeout
from seccomm.transports import Transport, host_bytes


class World:
    """Shared state of the ranks: collective contributions by call index, mailboxes per pair."""

    def __init__(self, size: int, hosts=None, paired: bool = False, receipt_after: int | None = 8):
        self.size = size
        self.paired = paired and size == 2  # (as the MPI transport on two ranks)
        self.receipt_after = receipt_after  # (as the MPI transport's: hops of more frames)
        self.hosts = list(hosts) if hosts is not None else [7] * size
        self.cv = threading.Condition()
        self.colls: dict[int, list] = {}
        self.mail: dict[tuple[int, int], list[bytes]] = defaultdict(list)
        self.stopped: dict[int, int] = {}  # rank that stopped an op -> the rank it blamed
        self.delivered: set = set()  # (mailbox, index) of the messages a receiver has taken
        self.sends: dict = {}  # (mailbox, index) -> the _Sent of a message not taken yet

    def transports(self, timeout: float = 5.0) -> list["ThreadTransport"]:
        return [ThreadTransport(self, r, timeout) for r in range(self.size)]

    def run(self, fn, ranks=None) -> list:
        """``fn(rank)`` on one thread per rank (``ranks``: default all); each rank's return value,
        or the exception it raised."""
        ranks = range(self.size) if ranks is None else ranks
        out: dict[int, object] = {}

        def body(r):
            try:
                out[r] = fn(r)
            except BaseException as e:  # noqa: BLE001 - reported to the test
                out[r] = e

        threads = [threading.Thread(target=body, args=(r,)) for r in ranks]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        return [out.get(r) for r in ranks]


class _Recv:
    __slots__ = ("buf", "index", "peer", "box")

    def __init__(self, buf, index, peer, box):
        self.buf, self.index, self.peer, self.box = buf, index, peer, box


def _check_wait(timeout, op_label) -> None:
    """The transport contract the engine must keep (the MPI transport relies on it too): a
    deadline in seconds > 0, and a label naming the op for the error messages."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise AssertionError(f"wait with timeout {timeout!r}")
    if not isinstance(op_label, str) or not op_label:
        raise AssertionError(f"wait with op_label {op_label!r}")


class _Sent:
    """A posted send: the buffer and the bytes it held when posted; ``where``: (mailbox, index)
    of its message."""

    __slots__ = ("buf", "data", "peer", "where")

    def __init__(self, buf, data, peer, where=None):
        self.buf, self.data, self.peer, self.where = buf, data, peer, where


def _where(buf) -> tuple:
    """(address, bytes) of a host buffer."""
    a = np.frombuffer(buf, np.uint8)
    return a.ctypes.data, a.nbytes


class ThreadTransport(Transport):
    """Rank ``rank`` of ``world``; ``timeout``: seconds for the setup collectives."""

    defer_last_sends = True  # as MPI: an op's last sends are waited for by the next op

    def __init__(self, world: World, rank: int, timeout: float = 5.0):
        self.world, self.rank, self.size, self.timeout = world, rank, world.size, timeout
        self._agreeing = None  # [recvs, sends, peers, check (None once run), op label]
        # paired (World(paired=True), two ranks): the MPI transport's protocol, in-process: the
        # op's record behind its first frame, alone at the end of an op without one, once more
        # on a fallback box after a failed op (seccomm.transports.mpi, agree_start)
        self.paired = world.paired
        self._pair = None  # [record, table, check (None once run), label, the peer's trailer]
        self._pair_out = self._pair_in = False
        self._pair_sends: list = []  # the record sent alone before a wait
        self._first = None  # a first receive this transport posted itself (staged): its request
        self._record = None  # the receive of the peer's record alone before a clear frame
        self._fb_sent = False
        self.calls = 0
        self.posted: dict[int, int] = defaultdict(int)
        self.receipt_after = world.receipt_after
        self.receipts_posted: dict[int, int] = defaultdict(int)
        self.receipts_sent: list = []  # (peer, bytes) of every receipt this rank sent
        self.sent: list = []  # every frame send (_Sent) this rank posted
        self.io: list = []  # ("send" or "recv", address, bytes) of every frame buffer handed over

    def host_key(self):
        return self.world.hosts[self.rank]

    def _collective(self, kind, data, op_label, timeout) -> list:
        w, i = self.world, self.calls
        self.calls += 1
        timeout = self.timeout if timeout is None else timeout
        with w.cv:
            slot = w.colls.setdefault(i, [None] * w.size)
            slot[self.rank] = (kind, data)
            w.cv.notify_all()
            if not w.cv.wait_for(lambda: all(c is not None for c in slot), timeout):
                msg = f"{op_label}: no progress within {timeout:g} s"
                raise TransportTimeout(msg, peer="any", op=op_label, timeout_s=timeout)
        if len({c[0] for c in slot}) > 1:
            raise FrameError(f"{op_label}: the ranks called different collectives", peer="any")
        return [c[1] for c in slot]

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        rows = self._collective("allgather", bytes(host_bytes(sendbuf)), op_label, timeout)
        np.asarray(recvbuf).reshape(-1).view(np.uint8)[:] = np.frombuffer(b"".join(rows), np.uint8)

    def scatter(self, sendbuf, recvbuf, root, op_label, timeout=None):
        data = bytes(host_bytes(sendbuf)) if self.rank == root else None
        whole = self._collective(("scatter", root), data, op_label, timeout)[root]
        out = np.asarray(recvbuf).reshape(-1).view(np.uint8)
        out[:] = np.frombuffer(whole[self.rank * out.size : (self.rank + 1) * out.size], np.uint8)

    def bcast(self, buf, root, op_label, timeout=None):
        data = bytes(host_bytes(buf)) if self.rank == root else None
        whole = self._collective(("bcast", root), data, op_label, timeout)[root]
        np.asarray(buf).reshape(-1).view(np.uint8)[:] = np.frombuffer(whole, np.uint8)

    def _check_peer(self, peer) -> None:
        if (
            isinstance(peer, bool)
            or not isinstance(peer, int)
            or not 0 <= peer < self.size
            or peer == self.rank
        ):
            raise AssertionError(f"rank {self.rank}: transfer with peer {peer!r}")

    def isend(self, buf, peer):
        if self._pair_out:  # the op's first message from a caller without room: the record behind
            self._pair_out = False
            return self._post_send(buf, peer, bytes(self._pair[0][8:]))
        return self._post_send(buf, peer)

    def _post_send(self, buf, peer, record=b""):
        """Post ``buf`` (and ``record`` behind it, on the wire only) to ``peer``."""
        self._check_peer(peer)
        w, data = self.world, bytes(host_bytes(buf))
        self.io.append(("send", *_where(buf)))
        wire = data + record
        with w.cv:
            box = w.mail[(self.rank, peer)]
            box.append(wire)
            w.cv.notify_all()
            req = _Sent(buf, data, peer, ((self.rank, peer), len(box) - 1))
            w.sends[req.where] = req
        self.sent.append(req)
        return req

    def irecv(self, buf, peer):
        req = self._post_recv(buf, peer)
        if self._pair_in:  # (staged: wait_recv takes the record off)
            self._pair_in = False
            req.buf = np.empty(len(host_bytes(buf)) + 32, np.uint8)
            self._first = (req, buf)
        return req

    def _post_recv(self, buf, peer):
        self._check_peer(peer)
        self.io.append(("recv", *_where(buf)))
        req = _Recv(buf, self.posted[peer], peer, (peer, self.rank))
        self.posted[peer] += 1
        return req

    # -- receipts (a channel of their own, as the MPI transport's tag) -------------------------
    def isend_receipt(self, buf, peer):
        self._check_peer(peer)
        w, data = self.world, bytes(host_bytes(buf))
        self.receipts_sent.append((peer, data))
        with w.cv:
            w.mail[(self.rank, peer, "receipt")].append(data)
            w.cv.notify_all()
        return _Sent(buf, data, peer)

    def irecv_receipt(self, buf, peer):
        self._check_peer(peer)
        req = _Recv(buf, self.receipts_posted[peer], peer, (peer, self.rank, "receipt"))
        self.receipts_posted[peer] += 1
        return req

    # -- paired ----------------------------------------------------------------------------
    def pair_link(self, peer):
        """Paired: a link to ``peer`` that posts frames as they are, as MPI's pair link hands them
        straight to mpi4py (the record behind the op's first frame is the caller's to place:
        ``put_record``/``record_due``)."""
        if not self.paired:
            return None
        t = self

        class Link:
            def send(self, frame):
                return t._post_send(frame, peer)

            def recv(self, frame):
                return t._post_recv(frame, peer)

            def wait(self, rreq):
                return t.wait_recv(rreq, peer)

        link = Link()
        link.peer = peer  # (as the MPI pair link's)
        return link

    def discard(self, buf, peer):
        self._pair_out = False  # (the record the first message carried is dropped with it)

    def send_record(self):
        if self._pair_out:
            self._pair_out = False
            self._pair_sends.append(self.isend(self._pair[0], 1 - self.rank))

    def expect_record(self, peer):
        if not self._pair_in:
            return None
        self._pair_in = False
        self._record = self.irecv(np.empty(64, np.uint8), peer)
        return self._record

    def wait_record(self, peer):
        op_label = self.op_label
        req, self._record = self._record, None
        if req is not None:
            self._record_alone(req.buf, self.wait_recv(req, peer), peer, op_label)

    def _record_alone(self, buf, got, peer, op_label):
        if got != 40:  # (a record alone is whole: RECORD_BYTES)
            self._pair[2] = None
            msg = f"{op_label}: argument record of {got} bytes from rank {peer}"
            raise FrameError(msg, peer=peer, op=op_label)
        self.take_record(buf, got, peer)

    def put_record(self, trailer):
        if not self._pair_out:
            return False
        self._pair_out = False
        trailer[:] = self._pair[0][8:]
        return True

    def record_due(self):
        if not self._pair_in:
            return False
        self._pair_in = False
        return True

    def take_record(self, wire, got, peer):
        op_label = self.op_label
        if got < 32:
            self._pair[2] = None
            msg = f"{op_label}: argument record of {got} bytes from rank {peer}"
            raise FrameError(msg, peer=peer, op=op_label)
        tr = bytes(wire[got - 32 : got])
        if tr == self._pair[4]:
            self._pair[2] = None
        else:
            self._record_in(tr)
        return got - 32

    def _record_in(self, tr) -> None:
        record, table, check = self._pair[:3]
        self._pair[2] = None
        row = table[1 - self.rank]
        row[:8] = record[:8]
        row[8:] = np.frombuffer(tr, np.uint8)
        if check is not None:
            check()

    def _fallback(self) -> bool:
        """Whether the peer's fallback record of this op is in (then checked: may raise)."""
        box = self.world.mail[(1 - self.rank, self.rank, "fallback")]
        if not box or self._pair is None or self._pair[2] is None:
            return False
        rec = box[0]
        if len(rec) != 40 or rec[:8] != bytes(self._pair[0][:8]):
            return False
        self._record_in(rec[8:])
        return True

    # -- the argument exchange, overlapped with the op as the MPI transport does ---------------
    def agree_start(self, record, table, check, expect=None):
        timeout, op_label = self.op_timeout, self.op_label
        _check_wait(timeout, op_label)
        if self.paired:
            i = 40 * (1 - self.rank) + 8  # (record: a row per receiver; the peer's is sent)
            rec = record[1 - self.rank]
            self._pair = [rec, table, check, op_label, None if expect is None else expect[i : i + 32]]
            self._pair_out = self._pair_in = True
            self._first = self._record = None
            return
        peers = [r for r in range(self.size) if r != self.rank]
        recvs = [self.irecv(table[r], r) for r in peers]
        sends = [self.isend(record[r], r) for r in peers]
        self._agreeing = [recvs, sends, peers, check, op_label]

    def _records_in(self) -> bool:
        recvs, _, peers, check, _ = self._agreeing
        w = self.world
        return check is not None and all(len(w.mail[(r, self.rank)]) > q.index for q, r in zip(recvs, peers))

    def _agree_now(self, timeout) -> None:
        """Read the records (waits that name their rank) and run the check once."""
        recvs, _, peers, check, label = self._agreeing
        self._agreeing[3] = None  # (the waits below must not run it)
        for q, r in zip(recvs, peers):
            got = self.wait_recv(q, r)
            if got != len(q.buf):
                raise FrameError(f"{label}: argument record of {got} bytes from rank {r}", peer=r, op=label)
        check()

    def agree_finish(self):
        timeout, op_label = self.op_timeout, self.op_label
        if self._pair is not None:
            peer, sends, self._pair_sends = 1 - self.rank, self._pair_sends, []
            if self._pair_out:  # no frame went to the peer: the record alone
                self._pair_out = False
                sends.append(self.isend(self._pair[0], peer))
            if self._pair_in:  # none came: the record alone
                self._pair_in = False
                req = self.irecv(np.empty(64, np.uint8), peer)
                self._record_alone(req.buf, self.wait_recv(req, peer), peer, op_label)
            elif self._first is not None:
                self.wait_recv(self._first[0], peer)
            elif self._record is not None:
                self.wait_record(peer)
            self._pair = None
            self.wait_sends(sends, [peer] * len(sends))
            return
        if self._agreeing is None:
            return
        if self._agreeing[3] is not None:
            self._agree_now(timeout)
        _, sends, peers, _, _ = self._agreeing
        self._agreeing = None
        self.wait_sends(sends, peers)

    def agree_settle(self, limit):
        if self._pair is not None:
            self._pair_out = self._pair_in = False
            if not self._fb_sent:  # this rank's record, once, for a peer that could not read it
                self._fb_sent = True
                with self.world.cv:
                    self.world.mail[(self.rank, 1 - self.rank, "fallback")].append(bytes(self._pair[0]))
                    self.world.cv.notify_all()
            if self._pair[2] is None:
                return None
            with self.world.cv:
                self.world.cv.wait_for(lambda: self._fallback_ready(), limit)
            try:
                self._fallback()
            except SecCommError as e:
                return e
            return None
        if self._agreeing is None or self._agreeing[3] is None:
            return None
        with self.world.cv:
            if not self.world.cv.wait_for(self._records_in, limit):
                return None
        try:
            self._agree_now(limit)
        except SecCommError as e:
            return e
        return None

    def _fallback_ready(self) -> bool:
        box = self.world.mail[(1 - self.rank, self.rank, "fallback")]
        return bool(box) and len(box[0]) == 40 and box[0][:8] == bytes(self._pair[0][:8])

    def wait_recv(self, req, peer):
        timeout, op_label = self.op_timeout, self.op_label
        _check_wait(timeout, op_label)
        if not isinstance(req, _Recv) or req.peer != peer:
            raise AssertionError(f"rank {self.rank}: wait_recv({req!r}, peer={peer!r})")
        if self._first is not None and req is self._first[0]:  # staged: the record off, then the frame
            dest = self._first[1]
            self._first = None
            got = self.take_record(req.buf, self.wait_recv(req, peer), peer)
            np.frombuffer(dest, np.uint8)[:got] = req.buf[:got]
            return got
        w, box = self.world, self.world.mail[req.box]
        watch = self._agreeing is not None and self._agreeing[3] is not None
        fb = self._pair is not None and self._pair[2] is not None  # paired: watch the fallback box
        with w.cv:
            if not w.cv.wait_for(
                lambda: (
                    len(box) > req.index
                    or peer in w.stopped
                    or (watch and self._records_in())
                    or (fb and self._fallback_ready())
                ),
                timeout,
            ):
                raise TransportTimeout(
                    f"{op_label}: rank {peer} made no progress within {timeout:g} s",
                    peer=peer,
                    op=op_label,
                    timeout_s=timeout,
                )
            watched = len(box) <= req.index and watch and self._records_in()
            fb = fb and len(box) <= req.index and self._fallback_ready()
        if fb and self._fallback():  # (it raises on a disagreement)
            return self.wait_recv(req, peer)
        if watched:  # every record is in while this rank waits: the check runs (it may raise)
            self._agree_now(timeout)
            return self.wait_recv(req, peer)
        with w.cv:
            if len(box) <= req.index:  # and the ranks waiting on this one stop too
                w.stopped.setdefault(self.rank, w.stopped[peer])
                w.cv.notify_all()
                raise PeerAbortError(
                    f"{op_label}: rank {peer} stopped this operation (blaming rank {w.stopped[peer]})",
                    peer=peer,
                    op=op_label,
                    blamed=w.stopped[peer],
                )
            data = box[req.index]
            w.delivered.add((req.box, req.index))
            # (under the lock: a send not waited for yet may not change; once its sender waited
            # for it, which takes the lock, the buffer is the sender's again)
            sent = w.sends.pop((req.box, req.index), None)
            changed = sent is not None and bytes(host_bytes(sent.buf)) != sent.data
        if changed:  # (MPI may read it until now)
            raise AssertionError(
                f"{op_label}: a send buffer changed before rank {self.rank} took its message"
            )
        dest = np.frombuffer(req.buf, np.uint8)
        if len(data) > dest.size:
            raise FrameError(f"{op_label}: message from rank {peer} truncated", peer=peer, op=op_label)
        dest[: len(data)] = np.frombuffer(data, np.uint8)
        return len(data)

    def wait_sends(self, reqs, peers):
        timeout, op_label = self.op_timeout, self.op_label
        _check_wait(timeout, op_label)
        if len(reqs) != len(peers) or any(
            not isinstance(q, _Sent) or q.peer != peer for q, peer in zip(reqs, peers)
        ):
            raise AssertionError(f"rank {self.rank}: wait_sends of {reqs!r} to peers {peers!r}")
        for req in reqs:
            with self.world.cv:  # (completed: the buffer is the sender's again)
                self.world.sends.pop(req.where, None)
            if req.where in self.world.delivered:  # (the receiver has it: MPI reads it no more)
                continue
            if isinstance(req, _Sent) and bytes(host_bytes(req.buf)) != req.data:
                raise AssertionError(
                    f"{op_label}: a send buffer to rank {req.peer} changed before its send completed"
                )

    def abort(self, blame):
        with self.world.cv:
            self.world.stopped.setdefault(self.rank, blame)
            self.world.cv.notify_all()

    def fail(self):
        self.abort(self.rank)


def record_seals(sc, log):
    """Log (key bytes, nonce) of every frame ``sc`` seals from now on."""
    keys = sc.session.keys

    class Logged:
        def __init__(self, inner, key):
            self.inner, self.key = inner, key

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def seal(self, slot, pt):
            log.append((self.key, bytes(slot.nonce)))
            return self.inner.seal(slot, pt)

    direction, group = keys.direction, keys.group
    keys.direction = lambda e, a, b: Logged(direction(e, a, b), keys.direction_key(e, a, b))
    keys.group = lambda e: Logged(group(e), keys.group_key(e))
