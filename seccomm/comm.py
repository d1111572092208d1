"""``SecureComm``: encrypted and authenticated collectives over an MPI communicator."""

from __future__ import annotations

import atexit
import itertools
import functools
import math
import os
import threading
import weakref
from typing import NamedTuple
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from . import collectives as _coll
from .agreement import Agreement
from .control import PairMacs
from .dtypes import CODES
from .engine import OpContext, OpRun
from . import pairswap
from .errors import (
    ArgumentMismatchError,
    AuthenticationError,
    CommClosedError,
    ConcurrentUseError,
    ConfigMismatchError,
    FrameError,
    KeyScheduleError,
    SecCommError,
    shown,
)
from .framing import (
    AAD_BYTES,
    MAX_CHUNKS_PER_HOP,
    MAX_OPS_PER_EPOCH,
    MAX_RANKS,
    REDOPS,
    FrameContext,
    Workspace,
    chunk_elems,
    block_counts,
)
from .handshake import establish, job_digest, job_label, node_ids_digest
from .keys import KEY_EXCHANGES, load_secret, secret_is_set
from .policy import ENCRYPT_POLICIES, EncryptPolicy
from .suites import SUITES, get_suite
from .transports import MPITransport, Transport

ALGORITHMS = ("auto", *_coll.get_collective("allreduce").algorithms)
_OPEN: "weakref.WeakSet[SecureComm]" = weakref.WeakSet()
_BUILT = itertools.count()  # each SecureComm's place in this process's order of construction


def _mark_forked():  # (os.register_at_fork: a flag read per call, not a getpid() system call)
    for sc in list(_OPEN):
        sc._forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_mark_forked)


@atexit.register
def _close_open_comms():  # before mpi4py finalizes MPI (its atexit hook was registered earlier)
    """Close every SecureComm still open, newest first.  ``close()`` is collective (it waits up to
    ``min(timeout, 10)`` s for the other ranks), so every rank must close them in the same order:
    the order of construction, which is collective and so the same on every rank.  (A WeakSet's
    order is its members' addresses, which differ from rank to rank: each rank then waited in
    another close, and 2,046 open ones held the exit for minutes.)"""
    for sc in sorted(_OPEN, key=lambda sc: sc._built, reverse=True):
        try:
            sc.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


DEFAULT_CHUNK_BYTES = 1 << 20
DEFAULT_SMALL_BYTES = _coll.Tuning.small_bytes  # auto: recursive doubling at or below this many bytes
DEFAULT_BCAST_CHAIN_BYTES = _coll.Tuning.bcast_chain_bytes  # bcast: chain above, binomial tree at or below


class SecureComm:
    """Secure collectives on ``comm``: an ``mpi4py.MPI.Intracomm`` (duplicated inside) or a
    :class:`~seccomm.transports.base.Transport`.  Construction is a collective call.

    Parameters (all ranks must pass the same values; construction verifies this with one
    authenticated exchange and raises ``ConfigMismatchError`` on every rank otherwise):

    - ``suite``: ``"aes-256-gcm"`` (default), ``"chacha20-poly1305"``, ``"aes-256-gmac"``
      (integrity only) or ``"none"`` (same algorithms, no crypto).
    - ``algorithm``: allreduce algorithm, ``"auto"`` (recursive doubling at or below
      ``small_bytes`` bytes — default 64 KiB over MPI, 2 MiB over torch.distributed — or fewer
      elements than ranks, and on two ranks at or below ``chunk_bytes``; else ring), ``"ring"``,
      ``"recursive_doubling"``.
    - ``encrypt``: ``"all"`` or ``"inter-node"`` (hops between two ranks of one node use the
      ``none`` suite; two ranks share a node when the host keys in their authenticated setup
      hellos are equal and, where ``node_ids`` is given, their node ids too: ``node_ids`` can
      split a host into nodes, never join two hosts).
    - ``chunk_bytes``: frame payload size in bytes (default 1 MiB), >= 16, < 2**31 - 64.
    - ``key_exchange``: ``"psk"`` or ``"psk-dhe"`` (ephemeral X25519, forward secrecy).
    - ``psk``: job secret (bytes or hex); default from ``SECCOMM_PSK_FILE``/``SECCOMM_PSK``.
    - ``job_id``: label bound into keys and AAD (default ``SECCOMM_JOB_ID``/``SLURM_JOB_ID``).
    - ``timeout``: seconds any single wait may block before ``TransportTimeout`` (default 60,
      or ``SECCOMM_TIMEOUT``).
    - ``crypto_threads``: crypto thread-pool size (default: cores per local rank, at most 8;
      1 means crypto on the calling thread).
    - ``rotate_after_frames``: frames per key before the next epoch (default: the suite's usage
      limit for ``chunk_bytes``); lower it to force rotations (a value above the limit is refused).
    - ``small_bytes``: bytes; ``algorithm="auto"`` runs recursive doubling at or below it
      (default: the transport's ``small_bytes_default``, 64 KiB over MPI, 2 MiB over
      torch.distributed).
    - ``bcast_chain_bytes``: bytes; bcast runs a binomial tree at or below it and a pipelined
      chain above (default 512 KiB).
    - ``node_ids``: one integer per rank, for ``encrypt="inter-node"``: ranks of one host with
      different node ids count as different nodes (default: one node per host).
    - ``wrap_transport``: callable wrapping the transport (tests, attacker harness, recording).
    - ``device_backend``: the array module and batch AEAD of the device engine
      (:mod:`seccomm.gpu.engine`); with one given, every call runs on that engine.  Default:
      CuPy arrays and torch CUDA tensors run on the device engine with seccomm's GPU kernels when
      CuPy finds a device and the suite and dtype have kernels; otherwise they are staged through
      pinned host memory (:mod:`seccomm.gpu.staging`).

    Attributes (read them, do not set them): ``rank`` and ``size`` (this rank and the world
    size), ``suite`` (the :class:`~seccomm.suites.CipherSuite`), ``algorithm``, ``encrypt``,
    ``chunk_bytes`` (bytes), ``key_exchange``, ``timeout`` (seconds), ``crypto_threads``,
    ``usage_limit`` (frames one key may seal), ``epoch`` (the key epoch in use) and
    ``rotations`` (key rotations so far), ``secret_source`` (where the job secret came from,
    never the secret).  It is a context manager: ``with SecureComm(...) as sc:`` closes it on
    leaving the block.

    Construction runs the setup of :mod:`seccomm.handshake` (hello, key delivery, finished):
    fresh keys from every rank's nonce, every setting and the node map authenticated.

    Raises ``ValueError``/``TypeError`` for bad arguments, ``KeyScheduleError`` for a missing or
    unsafe secret, ``ConfigMismatchError`` when ranks disagree or a hello fails,
    ``AuthenticationError`` (op ``"setup"``) when a setup message was altered or replayed,
    ``TransportTimeout`` when a rank never joins: on every rank.
    """

    def __init__(
        self,
        comm,
        suite: str = "aes-256-gcm",
        *,
        algorithm: str = "auto",
        encrypt: str = "all",
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        key_exchange: str = "psk",
        psk=None,
        job_id: str | None = None,
        timeout: float | None = None,
        crypto_threads: int | None = None,
        rotate_after_frames: int | None = None,
        small_bytes: int | None = None,
        bcast_chain_bytes: int = DEFAULT_BCAST_CHAIN_BYTES,
        node_ids=None,
        wrap_transport=None,
        device_backend=None,
    ):
        # Nothing may raise before the agreement below: a rank that stopped here would leave the
        # others waiting in a collective.  Bad values are collected and reported there.
        self._pid = os.getpid()  # (a forked child refuses every call and closes nothing)
        self._forked = False  # set in a forked child (_mark_forked), read on every call
        timeout_raw = timeout if timeout is not None else os.environ.get("SECCOMM_TIMEOUT", 60)
        try:
            self.timeout = float(timeout_raw)
        except (TypeError, ValueError):
            self.timeout = float("nan")
        setup_timeout = self.timeout if self.timeout > 0 else 60.0
        transport = comm if isinstance(comm, Transport) else MPITransport(comm, timeout=setup_timeout)
        self._transport = wrap_transport(transport) if wrap_transport else transport
        if small_bytes is None:
            small_bytes = transport.small_bytes_default
        self.rank, self.size = transport.rank, transport.size
        self._broken: str | None = None
        self._unsent = None  # (requests, peers, label): the last op's sends, waited for by the next
        self._busy = threading.RLock()  # held by the thread inside a collective call
        self._pool = None
        local_error, secret = None, None
        label = (
            job_id
            if job_id is not None
            else os.environ.get("SECCOMM_JOB_ID", os.environ.get("SLURM_JOB_ID", ""))
        )
        self.job_id = str(label)
        try:
            self.suite = get_suite(suite)
            _check_choice("algorithm", algorithm, ALGORITHMS)
            _check_choice("encrypt", encrypt, ENCRYPT_POLICIES)
            _check_choice("key_exchange", key_exchange, KEY_EXCHANGES)
            _check_int("chunk_bytes", chunk_bytes, 16, (1 << 31) - 64)
            _check_int("small_bytes", small_bytes, 0, 1 << 62)
            _check_int("bcast_chain_bytes", bcast_chain_bytes, 0, 1 << 62)
            if rotate_after_frames is not None:
                _check_int("rotate_after_frames", rotate_after_frames, 1, 1 << 63)
                cap = self.suite.usage_limit(chunk_bytes, AAD_BYTES)
                if rotate_after_frames > cap:
                    raise ValueError(
                        f"rotate_after_frames {rotate_after_frames} is above {self.suite.name}'s "
                        f"usage limit of {cap} frames per key at chunk_bytes={chunk_bytes} "
                        f"({self.suite.limit_source}); it may only lower the rotation point"
                    )
            if crypto_threads is not None:
                _check_int("crypto_threads", crypto_threads, 1, 1024)
            if not self.timeout > 0:
                raise ValueError(f"timeout must be a number of seconds > 0, got {shown(timeout_raw)}")
            if self.size > MAX_RANKS:
                raise ValueError(f"world size {self.size} exceeds {MAX_RANKS} (16-bit step field)")
            if node_ids is not None:
                if isinstance(node_ids, (str, bytes)) or len(node_ids) != self.size:
                    raise ValueError(f"node_ids must list one node id per rank ({self.size} entries)")
                node_ids = [_as_int("node_ids entry", x) for x in node_ids]
            try:
                secret, self.secret_source = load_secret(psk)
            except KeyScheduleError:
                if suite != "none" or secret_is_set(psk):  # (none needs no key, but one that is
                    raise  # given and unusable is an error, as under every suite)
                secret, self.secret_source = bytes(32), "none (suite 'none' uses no key)"
        except (ValueError, TypeError, KeyScheduleError) as e:
            local_error, node_ids = e, None
            self.suite = SUITES["none"]
            if not isinstance(e, KeyScheduleError):  # (secret is None: load_secret comes last)
                secret = _secret_or_none(psk)  # the error's hello is then MACed: others can trust it
        self.algorithm, self.encrypt, self.chunk_bytes = algorithm, encrypt, chunk_bytes
        self.key_exchange, self.small_bytes, self.bcast_chain_bytes = (
            key_exchange,
            small_bytes,
            bcast_chain_bytes,
        )
        self._job_id = job_digest(self.job_id)
        self._limit_forced = rotate_after_frames is not None
        self.usage_limit = (
            rotate_after_frames if self._limit_forced else self.suite.usage_limit(chunk_bytes, AAD_BYTES)
        )
        settings = {"protocol": 2}  # the setup of seccomm.handshake; frames keep version 1
        if local_error is None:  # a rank with bad arguments sends its error instead
            settings.update(
                suite=self.suite.name,
                algorithm=algorithm,
                encrypt=encrypt,
                chunk_bytes=int(chunk_bytes),
                key_exchange=key_exchange,
                job_id=job_label(self.job_id),
                world_size=self.size,
                usage_limit=int(self.usage_limit),
                small_bytes=int(small_bytes),
                bcast_chain_bytes=int(bcast_chain_bytes),
                node_ids=None if node_ids is None else node_ids_digest(node_ids),
            )
        try:
            session = establish(
                self._transport,
                settings,
                secret,
                self.suite,
                self._job_id,
                self._transport.host_key(),
                node_ids,
                local_error,
            )
        except BaseException:
            if not isinstance(comm, Transport):  # the MPITransport made here: free its communicator
                self._transport.close()
            raise
        finally:
            del secret
        self._keys, self._comm_id = session.keys, session.comm_id
        self._control = PairMacs(self.rank, self.size, self._keys.pair_key)  # control messages' MACs
        self._transport.authenticate_notices(self._control)  # from here on: notices MACed
        self._agreement = Agreement(
            self.rank,
            self.size,
            None if self.suite.name == "none" else self._control,
            _names,
            {c: n for n, c in CODES.items()},
            {c: n for n, c in REDOPS.items()},
        )
        self.node_ids, local = session.node_ids, session.local
        self._device_backend, self._auto_backend = device_backend, None
        self._device_ctx: dict = {}  # backend id -> OpContext of the device engine
        self._plans: dict = {}  # (name, id(sendbuf), id(recvbuf), *kw) -> _Plan (small host calls)
        self._seq = 0
        self.epoch, self._epoch_ops, self._epoch_frames = 0, 0, 0
        self.rotations = 0
        threads = (
            crypto_threads
            if crypto_threads is not None
            else int(os.environ.get("SECCOMM_CRYPTO_THREADS", 0))
            or min(8, max(1, (os.cpu_count() or 1) // local))
        )
        self.crypto_threads = threads
        if threads > 1 and self.suite.name != "none":
            self._pool = ThreadPoolExecutor(threads, thread_name_prefix="seccomm-crypto")
        self._ctx = OpContext(
            self.rank,
            self.size,
            self._transport,
            Workspace(),
            self._keys,
            self._pool,
            EncryptPolicy(encrypt, self.node_ids),
            self.suite,
            chunk_bytes,
            self.timeout,
            self._control,
        )
        self._built = next(_BUILT)
        _OPEN.add(self)

    # -- bookkeeping ---------------------------------------------------------------------------
    def __repr__(self):
        return (
            f"<SecureComm rank={self.rank} size={self.size} suite={self.suite.name} "
            f"algorithm={self.algorithm} encrypt={self.encrypt} epoch={self.epoch}>"
        )

    @property
    def transport(self) -> Transport:
        """The transport this communicator sends its frames and setup messages over (read-only):
        what ``wrap_transport`` returned when it was given (a tampering, recording or attacking
        wrapper, reachable here after construction), else the :class:`~seccomm.transports.Transport`
        passed as ``comm``, else the :class:`~seccomm.transports.MPITransport` built on ``comm``.
        :meth:`close` closes it."""
        return self._transport

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Free the private communicator and the crypto threads.

        Collective, like ``MPI_Comm_free``: it first waits (a non-blocking barrier, at most
        ``min(timeout, 10)`` seconds) for every rank to arrive, so that transfers still draining
        to a rank that already returned can finish; past that wait (a rank died or never closes)
        it goes on alone.  Safe to call twice.  In a forked child of the process that built it
        (also at the child's exit) it only drops this object's keys: the communicator, its
        messages and the crypto threads are the parent's.
        """
        if self._forked:
            self._broken, self._pool = "closed", None
            self._keys = self._ctx = self._control = self._agreement = None
            self._device_ctx, self._plans = {}, {}
            return
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        if self._broken != "closed":
            self._transport.quiesce(min(self.timeout, 10.0))  # also after an error: peers wait here
            if self._unsent:  # the last op's sends: MPI progressed them during the wait above
                self._stale, self._unsent = list(self._unsent[0]), None
            self._broken = "closed"
            self._transport.close()
        self._keys = self._ctx = self._control = self._agreement = None
        self._device_ctx = {}
        self._plans = {}

    def _route(self, a, b):
        """("host" | "device" | "staged", a, b), decided on every call: with a ``device_backend``
        given, the device engine; numpy buffers, the CPU engine; device buffers the GPU kernels
        can take (both on the device), the device engine with seccomm's kernels (torch CUDA
        tensors as CuPy views through DLPack); any other mix of device buffers, staged."""
        if self._device_backend is not None:
            return "device", a, b
        if type(a) is np.ndarray and type(b) is np.ndarray:
            return "host", a, b
        from .gpu.staging import is_device

        da, db = is_device(a), is_device(b)
        if not (da or db):
            return "host", a, b
        if not (da and db):  # one buffer on the host: the staged path writes it in place
            return "staged", a, b
        from .gpu.engine import device_ready

        if self._auto_backend is None:
            self._auto_backend = device_ready(self, a, b)
        elif device_ready(self, a, b, probe=False) is None:
            return "staged", a, b
        if self._auto_backend is None:
            return "staged", a, b
        from .gpu.staging import as_cupy

        ca = as_cupy(a)
        return "device", ca, (ca if b is a else as_cupy(b))

    def block_counts(self, count: int) -> list[int]:
        """Elements of each rank's block when ``count`` elements are split for reduce-scatter or
        allgather (balanced: the first ``count % size`` ranks hold one more)."""
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
            raise ValueError(f"count must be an integer >= 0, got {count!r}")
        return block_counts(int(count), self.size)

    def _refuse(self, name: str, err: Exception) -> None:
        """This rank refused its own arguments to ``name`` (``err``, raised by the caller next)
        before any frame was posted.  The other ranks may already wait on it in that op: a refusal
        notice (:meth:`Transport.refuse`) makes them raise ``PeerAbortError`` naming this rank and
        the exception, at once.  The op sequence now differs between this rank (no number taken)
        and those that began the op, so the communicator is unusable here too, as after any failed
        op."""
        seq = self._seq + 1  # the number the op would have had
        if not self._broken:
            self._broken = f"{name} #{seq} refused its arguments on this rank ({type(err).__name__})"
            # a refusal record in place of this rank's argument record: the others stop at once
            self._agreement.refusal(seq, type(err).__name__)
            self._stale = self._transport.announce(self._agreement.out)
        self._transport.refuse(seq, type(err).__name__)

    def _rotate(self) -> None:
        self.epoch += 1
        self._epoch_ops = self._epoch_frames = 0
        self.rotations += 1
        self._keys.forget_before(self.epoch)

    def _bound(self, coll: _coll.Collective, nbytes: int, itemsize: int = 1) -> int:
        """Upper bound of frames one op of ``nbytes`` bytes of ``itemsize``-byte elements seals
        under any one key, identical on every rank; ``ValueError`` when it needs too many chunks
        per hop or more frames than one key may seal.  A chunk holds whole elements (the engine's
        ``chunk_elems``), so it carries ``chunk_bytes`` rounded down to a multiple of
        ``itemsize``: counted with more, an op could pass here and then run out of chunk
        numbers mid-op."""
        chunk = chunk_elems(self.chunk_bytes, itemsize) * itemsize
        chunks = math.ceil(nbytes / chunk) + 1
        if chunks > MAX_CHUNKS_PER_HOP:
            raise ValueError(
                f"{coll.name} of {nbytes} bytes needs {chunks} chunks per hop; at most "
                f"{MAX_CHUNKS_PER_HOP}: raise chunk_bytes"
            )
        bound = coll.frame_bound(self.size, chunks)
        if bound > self.usage_limit:
            fix = "raise rotate_after_frames" if self._limit_forced else "raise chunk_bytes"
            raise ValueError(
                f"{coll.name} of {nbytes} bytes may seal up to {bound} frames under one "
                f"key, over the per-key limit of {self.usage_limit}: {fix}"
            )
        return bound

    def _begin(self, coll: _coll.Collective, call: _coll.Call, bound: int, device: bool) -> OpRun:
        """The op's :class:`OpRun`: a fresh sequence number and frame context, after rotating to
        the next epoch when ``bound`` more frames would pass the per-key limit."""
        op_index = self._next_op(bound)
        frame = FrameContext(
            self.suite.suite_id,
            coll.code,
            CODES[call.dtype],
            self._job_id,
            self._comm_id,
            self.epoch,
            self._seq,
            op_index,
            call.count,
            call.redop,
        )
        if device:
            from .gpu.engine import DeviceOpRun

            return DeviceOpRun(self._device_context(), frame, call.itemsize, coll.name)
        return OpRun(self._ctx, frame, call.itemsize, coll.name)

    def _next_op(self, bound: int) -> int:
        """Number the next op (``_seq``) and count it in the epoch, after waiting for the last
        op's sends and rotating to the next epoch when ``bound`` more frames would pass the
        per-key limit; returns its index in the epoch.  ``CommClosedError`` once unusable."""
        if self._broken:
            raise CommClosedError(f"SecureComm is unusable: {self._broken}; create a new one")
        if self._unsent:
            self._settle_unsent()
        if self._epoch_frames + bound > self.usage_limit or self._epoch_ops >= MAX_OPS_PER_EPOCH:
            self._rotate()
        self._seq += 1
        op_index = self._epoch_ops
        self._epoch_ops += 1
        self._epoch_frames += bound
        return op_index

    def _device_context(self) -> OpContext:  # pragma: no mutate block (GPU: tests/test_gpu.py)
        """The device engine's context: the host context with a device workspace of the backend
        in use (one per backend, kept across calls)."""
        from dataclasses import replace

        from .gpu.engine import DeviceWorkspace

        backend = self._device_backend or self._auto_backend
        ctx = self._device_ctx.get(id(backend))
        if ctx is None:
            ctx = self._device_ctx[id(backend)] = replace(self._ctx, workspace=DeviceWorkspace(backend))
        return ctx

    def _settle_unsent(self) -> None:
        """Wait for the last op's sends (not waited for in that op: its receivers may have
        returned and stopped calling MPI, and MPICH completes a large send only while its
        receiver progresses) before this op reuses the workspace they are read from.  A peer
        that does not come back within ``timeout`` is blamed as in any wait."""
        reqs, peers, label = self._unsent
        self._unsent = None
        try:
            self._transport.wait_sends(reqs, self.timeout, peers, f"{label} (its last sends)")
        except SecCommError as e:
            self._broken = f"{label} failed ({type(e).__name__})"
            self._transport.cancel(list(reqs))
            self._stale = list(reqs)
            raise

    def _tail(self, coll: _coll.Collective, call: _coll.Call, alg: str) -> bytes:
        """The argument record of this call after its op number (:meth:`Agreement.tail`)."""
        return self._agreement.tail(
            coll.code, CODES[call.dtype], REDOPS[call.redop], _ALG[coll.name][alg], call.root, call.count
        )

    def _checker(self, run: OpRun):
        """``check()``: the agreement's check of the op ``run`` is in (its label at the time)."""
        a = self._agreement
        return lambda: a.check(run.op_label)

    def _express(
        self, plan: _Plan, op_index: int
    ) -> bool:  # pragma: no mutate block (MPI: tests/mpi_worker.py express)
        """Run the op numbered ``self._seq`` (index ``op_index`` in the epoch) of a plan whose
        steps offer a compiled swap (:mod:`seccomm.pairswap`; built once per epoch); False where
        none applies (the caller runs the steps).  The usual case ends in the swap; any other
        runs the rest of the op in ``_op`` (:func:`seccomm.pairswap.rest`), which raises as the
        Python path does."""
        x, seq, epoch = plan.express, self._seq, self.epoch
        if x[2] != epoch:
            try:
                x[1] = pairswap.compile(x[0], epoch, self._agreement, plan.tail)
            except Exception:  # (buffers it refuses: the Python path runs the op, nothing lost; the
                x[1] = None  # op has its number already, so raising here would leave the peer waiting)
            x[2] = epoch
        sw = x[1]
        if sw is None:
            return False
        try:
            got = sw.start(seq, op_index, epoch)
        except Exception as e:  # (before anything was posted: raised in _op, which tells the peer)
            got = e
        else:
            if got >= 0 and not sw.finish(got):
                if not sw.sent():  # (its last send, waited for at the next op's start)
                    link, label = sw.python[0](), f"{plan.run.collective} #{seq}"
                    self._unsent = ((link.adopt(sw.requests()[0], sw),), (link.peer,), label)
                return True
        run = plan.run
        run.restart(epoch, seq, op_index)
        self._op(run, lambda: pairswap.rest(run, sw, got), plan.tail, plan.check)
        run.pending = run.sends = []  # (complete, or in _unsent: the swap's requests need not outlive
        # the op, where they would keep the swap, and through it this run)
        return True

    def _op(self, run: OpRun, steps, tail: bytes, check) -> None:
        """Run the op: its argument record (``tail``: :meth:`_tail`; ``check()`` checks the
        table, :mod:`seccomm.agreement`) sent before its first frame, ``steps()`` (its algorithm on
        ``run``), then the end of the agreement (``ArgumentMismatchError`` on every rank when the
        arguments differ); its last sends are left for the next op (transports that defer them;
        not sends that went out from the caller's memory: :attr:`OpRun.lent`).
        Any failure makes the communicator unusable and tells the other ranks at once."""
        a, t = self._agreement, self._transport
        a.record_tail(run.frame.seq, tail)
        try:
            t.agree_start(a.out, a.table, check, self.timeout, run.op_label, a.expect)
            _quiet(steps)
            if run.receipts:
                run.receipts.finish(run)
            t.agree_finish(self.timeout, run.op_label)
            if run.sends:
                if t.defer_last_sends and not run.lent:
                    reqs, peers = zip(*run.sends)
                    self._unsent = (reqs, peers, run.op_label)
                else:  # sends from the caller's memory, or sends that complete without the
                    run.settle()  # receiver: waited for now
        except SecCommError as e:
            # a frame that failed, or a wait that expired, because the ranks disagree on the
            # call: the argument records tell, and that is the error every rank raises
            found = self._transport.agree_settle(min(2.0, self.timeout))  # (None at once when checked)
            err = found if isinstance(found, ArgumentMismatchError) else e
            self._broken = f"{run.op_label} failed ({type(err).__name__})"
            if isinstance(err, (AuthenticationError, FrameError)):
                self._transport.abort(err.peer)  # ranks waiting on this one raise now, not at the deadline
            elif isinstance(err, ArgumentMismatchError):  # every rank reads it from the records,
                self._transport.fail()  # unless one was altered on the wire (under none): told now
            self._transport.cancel(run.pending)
            self._stale = run.pending  # keep buffers referenced while MPI may still touch them
            if err is not e:
                raise err from None
            raise
        except BaseException as e:
            # Any other error on this rank inside the op (a bug, a failed reduction, an error of
            # a wrapper, KeyboardInterrupt, SystemExit): the ranks waiting on it raise
            # PeerAbortError naming this rank at once, never a deadline; the caller here sees the
            # original exception.
            self._broken = f"{run.op_label} failed ({type(e).__name__})"
            self._transport.fail()
            self._transport.cancel(run.pending)
            self._stale = run.pending
            raise

    # -- collectives ---------------------------------------------------------------------------
    def _collective(self, name: str, sendbuf, recvbuf, **kw) -> None:
        """The one path of every public collective (each record's ``method`` calls it): route
        the buffers, check the arguments (the record's ``args``), begin the op, run the
        algorithm the record chooses.  Device buffers the engine cannot take are staged.  One
        call at a time: ``ConcurrentUseError`` while another thread is inside one.

        A repeat call with the very same numpy arrays (same shape, strides, dtype and
        writeability), arguments and :attr:`algorithm` skips the checks: its plan (the op's frame bound, its
        argument record after the op number, its run, and the algorithm's steps prepared for
        those arrays: ``Collective.prepare``) is kept for calls of at most :data:`PLAN_MAX_BYTES`
        per buffer, :data:`PLAN_SLOTS` plans per communicator; a plan holds references to its two
        arrays and the wire buffers its steps use until it is dropped (a full table is emptied;
        :meth:`close` drops all).  The first call runs the algorithm as registered."""
        if self._forked:
            raise CommClosedError(_forked(name, self._pid))
        if not self._busy.acquire(False):  # (reentrant: the staged call below re-enters)
            raise ConcurrentUseError(_concurrent_use(name, self.rank))
        try:
            key = None
            if type(sendbuf) is np.ndarray and type(recvbuf) is np.ndarray and self._device_backend is None:
                try:
                    key = (
                        name,
                        id(sendbuf),
                        id(recvbuf),
                        self.algorithm,
                        *kw.values(),
                        *map(type, kw.values()),
                    )
                    plan = self._plans.get(key)
                except TypeError:  # an unhashable argument: the checks below name it
                    key = plan = None
                if (
                    plan is not None
                    and plan.send is sendbuf
                    and plan.recv is recvbuf
                    and plan.layout == _layout(sendbuf, recvbuf)
                ):
                    run, op_index = plan.run, self._next_op(plan.bound)  # (first: it may rotate)
                    if plan.express is not None and self._express(plan, op_index):
                        return
                    run.restart(self.epoch, self._seq, op_index)
                    self._op(run, plan.steps, plan.tail, plan.check)
                    return
            coll = _coll.COLLECTIVES[name]
            route, sendbuf, recvbuf = self._route(sendbuf, recvbuf)
            if route == "staged":
                return _staged(lambda s, r, **k: self._collective(name, s, r, **k), sendbuf, recvbuf, **kw)
            device = route == "device"
            try:
                call = coll.args(sendbuf, recvbuf, self.rank, self.size, device, **kw)
                nbytes = call.count * call.itemsize
                alg = coll.pick(self, nbytes, call.count, self.size)
                bound = self._bound(coll, nbytes, call.itemsize)
                run = self._begin(coll, call, bound, device)
            except (TypeError, ValueError) as e:
                self._refuse(name, e)
                raise
            tail = self._tail(coll, call, alg)
            steps = functools.partial(coll.algorithms[alg], run, *call.args)  # this op: as registered
            if key is not None and max(sendbuf.nbytes, recvbuf.nbytes) <= PLAN_MAX_BYTES:
                if len(self._plans) >= PLAN_SLOTS:
                    self._plans.clear()
                prepare = coll.prepare.get(alg)  # the repeats: prepared once (host buffers only)
                again = steps if prepare is None else prepare(run, *call.args)
                fast = pairswap.offer(again)  # (what a compiled swap could run, if anything)
                self._plans[key] = _Plan(
                    sendbuf, recvbuf, _layout(sendbuf, recvbuf), bound, tail, run, again, self._checker(run),
                    None if fast is None else [fast, None, None],
                )  # fmt: skip
            self._op(run, steps, tail, self._checker(run))
        except BaseException as e:
            if not isinstance(e, Exception):  # (KeyboardInterrupt, SystemExit ... anywhere in the call)
                self._interrupted(name, e)
            raise
        finally:
            self._busy.release()

    def _interrupted(self, name: str, e: BaseException) -> None:
        """A ``BaseException`` that is no ``Exception`` (``KeyboardInterrupt``, ``SystemExit``)
        left the call ``name`` (in the op, the compiled swap, or before the op began): the others
        may wait on this rank, so they are told at once (:meth:`Transport.fail`: they raise
        ``PeerAbortError`` naming this rank), and the communicator is unusable here."""
        if not self._broken:
            self._broken = f"{name} interrupted on this rank ({type(e).__name__})"
        self._transport.fail()


#: largest buffer (bytes) whose checked call is kept as a plan; plans per communicator
PLAN_MAX_BYTES, PLAN_SLOTS = 1 << 20, 16


class _Plan(NamedTuple):
    send: np.ndarray  # the two arrays of the key (kept alive: their ids stay theirs)
    recv: np.ndarray
    layout: tuple  # _layout(sendbuf, recvbuf) when the call was checked
    bound: int  # frames one op may seal under one key
    tail: bytes  # its argument record after the op number
    run: OpRun  # the first op's run, restarted for each repeat (its frame context too)
    steps: object  # steps(): the algorithm on run, prepared for these arrays where it can be
    # (the checked call's arguments are in it: views of the two arrays)
    check: object  # check(): the agreement's check of run's op (SecureComm._checker)
    express: list | None  # [pairswap.offer's spec, compiled swap, its epoch] (SecureComm._express)


@np.errstate(over="ignore", invalid="ignore")  # (as a decorator: half the cost of a with block)
def _quiet(steps):
    """``steps()`` with inf/NaN arithmetic silent, as MPI's reductions are."""
    steps()


def _layout(a: np.ndarray, b: np.ndarray) -> tuple:
    """What a checked call depends on and an array can change in place: shape, strides, dtype,
    writeability (the arrays themselves are the plan's key: their ids, kept alive by the plan)."""
    return (a.shape, a.strides, a.dtype, a.flags.writeable, b.shape, b.strides, b.dtype, b.flags.writeable)


def _install_collectives(cls) -> None:
    """Make every registered record's ``method`` a method of ``cls`` under the record's name."""
    for name, coll in _coll.COLLECTIVES.items():
        if name in vars(cls):
            raise ValueError(f"collective {name!r} would replace SecureComm.{name}")
        coll.method.__qualname__ = f"{cls.__name__}.{name}"
        setattr(cls, name, coll.method)


#: collective name -> algorithm name -> its index in an argument record
_ALG = {c.name: {a: i for i, a in enumerate(c.algorithms)} for c in _coll.COLLECTIVES.values()}


def _names(code: int) -> tuple:
    """(collective name, algorithm names) of a wire code, as an argument mismatch shows them."""
    for c in _coll.COLLECTIVES.values():
        if c.code == code:
            return c.name, list(c.algorithms)
    return f"collective code {code}", []


def _forked(name: str, pid: int) -> str:
    return (
        f"{name}: this process (pid {os.getpid()}) is a fork of the one that built this SecureComm "
        f"(pid {pid}); a child shares the parent's MPI connections and keys and must not use them "
        f"(its frames would reuse the parent's nonces), so every call is refused, and close() and "
        f"exit leave the parent's communicator alone. Use SecureComm in the process that built it"
    )


def _concurrent_use(name: str, rank: int) -> str:
    return (
        f"{name}: another thread is inside a collective call on this SecureComm (rank {rank}); a "
        f"SecureComm runs one call at a time, so this call was refused before it sent anything (the "
        f"call in progress is unaffected). Use one SecureComm per thread (several may be built on "
        f"one MPI communicator: each construction is collective, in the same order on every rank), "
        f"or serialise the calls with a lock of your own"
    )


def _staged(fn, sendbuf, recvbuf, **kw):  # pragma: no mutate block (GPU: tests/test_gpu.py)
    from .gpu.staging import staged_call

    staged_call(fn, sendbuf, recvbuf, **kw)


def _secret_or_none(psk):
    """The job secret, or None when there is none (only to MAC a hello that carries an error)."""
    try:
        return load_secret(psk)[0]
    except KeyScheduleError:
        return None


def _check_choice(what, value, allowed):
    if value not in allowed:
        raise ValueError(f"unknown {what} {shown(value)}; allowed: {', '.join(allowed)}")


def _check_int(what, value, lo, hi):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ValueError(f"{what} must be an integer in [{lo}, {hi}], got {shown(value)}")


def _as_int(what, v):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise ValueError(f"{what} must be an integer, got {shown(v)}")
    return int(v)


_install_collectives(SecureComm)

__all__ = ["SecureComm", "ConfigMismatchError"]
