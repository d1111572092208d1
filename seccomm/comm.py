"""``SecureComm``: encrypted and authenticated collectives over an MPI communicator.

A façade over named parts: :class:`~seccomm.options.Options` (the settings), the setup
(:mod:`seccomm.handshake`), :class:`~seccomm.sequence.OpSequence` (numbering, epochs, failures),
:class:`~seccomm.plans.PlanTable` (repeated calls), :class:`~seccomm.gpu.route.Devices` (where
buffers run) and the engine (:mod:`seccomm.engine`)."""

from __future__ import annotations

import atexit
import functools
import itertools
import os
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np

from . import collectives as _coll
from .agreement import Agreement
from .control import PairMacs
from .dtypes import CODES
from .engine import OpContext, OpRun
from .errors import CommClosedError, ConcurrentUseError, ConfigMismatchError, IdentityError, KeyScheduleError
from .framing import REDOPS, FrameContext, Workspace, block_counts
from .gpu.route import Devices
from .handshake import establish, job_digest
from .identity import IdentityFiles, load_identity
from .keys import load_secret, secret_is_set
from .options import (  # noqa: F401 - ALGORITHMS and the defaults: read from here by the CLI
    ALGORITHMS,
    DEFAULT_BCAST_CHAIN_BYTES,
    DEFAULT_CHUNK_BYTES,
    DEFAULT_SMALL_BYTES,
    Options,
    read_timeout,
)
from .plans import PlanTable
from .policy import ENCRYPT_POLICIES, EncryptPolicy  # noqa: F401 - ENCRYPT_POLICIES: the CLI's
from .sequence import OpSequence
from .suites import SUITES
from .topology import name_key
from .transports import MPITransport, Transport

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
    for sc in sorted(_OPEN, key=lambda sc: sc.built, reverse=True):
        try:
            sc.close()
        except Exception:  # noqa: BLE001 - exiting anyway
            pass


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
    - ``identity``: ``"psk"`` (default: every rank is known by the job secret) or ``"x509"``:
      each rank by its certificate (files from ``SECCOMM_CERT_FILE``, ``SECCOMM_KEY_FILE``,
      ``SECCOMM_CA_FILE``, or given as a :class:`~seccomm.identity.IdentityFiles`), which
      signs its setup messages; keys from ephemeral X25519 shares those signatures
      authenticate, a PSK mixed in where one is set; the host of a rank is the one its
      certificate names (:mod:`seccomm.handshake`).
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

    Its parts, each an object of its own (for tests, tools and the curious; what they hold is
    the communicator's state, so change nothing through them): ``options``
    (:class:`~seccomm.options.Options`, the checked settings), ``session``
    (:class:`~seccomm.handshake.Session`: the key schedule, the communicator id, the node map),
    ``agreement`` (:class:`~seccomm.agreement.Agreement`: argument records), ``sequence``
    (:class:`~seccomm.sequence.OpSequence`: op numbers, epochs, the last op's sends, whether it
    is unusable), ``plans`` (:class:`~seccomm.plans.PlanTable`: repeated calls), ``devices``
    (:class:`~seccomm.gpu.route.Devices`: where each call's buffers run), ``context``
    (:class:`~seccomm.engine.OpContext`: what each op's engine gets) and ``transport``.

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
        identity="psk",
    ):
        # Nothing may raise before the setup below: a rank that stopped here would leave the
        # others waiting in a collective.  A bad value is sent in place of this rank's settings.
        self._pid = os.getpid()  # (a forked child refuses every call and closes nothing)
        self._forked = False  # set in a forked child (_mark_forked), read on every call
        wait = read_timeout(timeout)
        setup_timeout = wait if wait > 0 else 60.0
        transport = comm if isinstance(comm, Transport) else MPITransport(comm, timeout=setup_timeout)
        self._transport = wrap_transport(transport) if wrap_transport else transport
        self.rank, self.size = transport.rank, transport.size
        self._busy = threading.RLock()  # held by the thread inside a collective call
        self._pool = None
        opts, local_error = Options.read(
            self.size, transport.small_bytes_default, suite=suite, algorithm=algorithm, encrypt=encrypt,
            chunk_bytes=chunk_bytes, key_exchange=key_exchange, job_id=job_id, timeout=timeout,
            crypto_threads=crypto_threads, rotate_after_frames=rotate_after_frames,
            small_bytes=small_bytes, bcast_chain_bytes=bcast_chain_bytes, node_ids=node_ids,
            identity="x509" if isinstance(identity, IdentityFiles) else identity,
        )  # fmt: skip
        secret, me = None, None
        if local_error is not None:
            secret = _secret_or_none(psk)  # the error's hello is then MACed: others can trust it
        elif opts.identity == "x509":
            secret, me, local_error = self._x509(psk, identity)
        else:
            try:
                secret, self.secret_source = load_secret(psk)
            except KeyScheduleError as e:
                if suite != "none" or secret_is_set(psk):  # (none needs no key, but one that is
                    local_error = e  # given and unusable is an error, as under every suite)
                else:
                    secret, self.secret_source = bytes(32), "none (suite 'none' uses no key)"
        if local_error is not None:  # (its hello carries the error in place of the settings)
            opts = replace(opts, suite=SUITES["none"], node_ids=None)
        self.options = opts
        self.suite, self.algorithm, self.encrypt, self.chunk_bytes = (
            opts.suite, opts.algorithm, opts.encrypt, opts.chunk_bytes,
        )  # fmt: skip
        self.key_exchange, self.small_bytes, self.bcast_chain_bytes = (
            opts.key_exchange, opts.small_bytes, opts.bcast_chain_bytes,
        )  # fmt: skip
        self.job_id, self.timeout = opts.job_id, opts.timeout
        try:
            self.session = establish(
                self._transport,
                opts.settings(self.size, local_error),
                secret,
                opts.suite,
                job_digest(self.job_id),
                self._transport.host_key() if me is None else name_key(me.me.host),
                opts.node_ids,
                local_error,
                me,
                self._transport.host_key(),
            )
        except BaseException:
            if not isinstance(comm, Transport):  # the MPITransport made here: free its communicator
                self._transport.close()
            raise
        finally:
            del secret
        self._parts(opts, device_backend)
        self.built = next(_BUILT)  # its place in this process's order of construction
        _OPEN.add(self)

    def _x509(self, psk, identity) -> tuple:
        """``(secret, identity, error)`` under identity x509: the PSK to mix in (``b""`` where
        none is set), this rank's :class:`~seccomm.identity.LocalIdentity`, or the error that
        stops its setup."""
        try:
            me = load_identity(identity if isinstance(identity, IdentityFiles) else None)
            self.secret_source = "none (identity x509, no PSK mixed in)"
            secret = b""
            if secret_is_set(psk):
                secret, self.secret_source = load_secret(psk)
            return secret, me, None
        except (IdentityError, KeyScheduleError) as e:
            return _secret_or_none(psk) if secret_is_set(psk) else None, None, e

    def _parts(self, opts: Options, device_backend) -> None:
        """The communicator's parts, once the setup gave it a session."""
        keys, local = self.session.keys, self.session.local
        self.usage_limit, self._job = opts.usage_limit, job_digest(self.job_id)
        self.node_ids = self.session.node_ids
        control = PairMacs(self.rank, self.size, keys.pair_key)  # control messages' MACs
        self._transport.authenticate_notices(control)  # from here on: notices MACed
        self.agreement = Agreement(
            self.rank,
            self.size,
            None if self.suite.name == "none" else control,
            _names,
            {c: n for n, c in CODES.items()},
            {c: n for n, c in REDOPS.items()},
        )
        self.sequence = OpSequence(self._transport, self.agreement, keys, opts, self.size)
        self.plans = PlanTable()
        self.devices = Devices(device_backend)
        threads = opts.crypto_threads
        if threads is None:
            cores = min(8, max(1, (os.cpu_count() or 1) // local))  # (per local rank, at most 8)
            threads = int(os.environ.get("SECCOMM_CRYPTO_THREADS", 0)) or cores
        self.crypto_threads = threads
        if threads > 1 and self.suite.name != "none":
            self._pool = ThreadPoolExecutor(threads, thread_name_prefix="seccomm-crypto")
        self.context = OpContext(
            self.rank,
            self.size,
            self._transport,
            Workspace(),
            keys,
            self._pool,
            EncryptPolicy(self.encrypt, self.node_ids),
            self.suite,
            self.chunk_bytes,
            control,
        )

    # -- bookkeeping ---------------------------------------------------------------------------
    def __repr__(self):
        return (
            f"<SecureComm rank={self.rank} size={self.size} suite={self.suite.name} "
            f"algorithm={self.algorithm} encrypt={self.encrypt} epoch={self.epoch}>"
        )

    @property
    def epoch(self) -> int:
        """The key epoch in use (0 at first; one more at each rotation)."""
        return self.sequence.epoch

    @property
    def rotations(self) -> int:
        """Key rotations so far."""
        return self.sequence.rotations

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
        seq = self.sequence
        if self._forked:
            seq.broken, self._pool = "closed", None
        else:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
            if seq.broken != "closed":
                self._transport.quiesce(min(self.timeout, 10.0))  # also after an error: peers wait here
                if seq.unsent:  # the last op's sends: MPI progressed them during the wait above
                    seq.stale, seq.unsent = list(seq.unsent[0]), None
                seq.broken = "closed"
                self._transport.close()
        if self.session is not None:  # (the key schedule dropped; the communicator id stays)
            self.session = replace(self.session, keys=None)
        self.context = self.agreement = seq.keys = seq.agreement = None
        self.devices.clear()
        self.plans.clear()

    def block_counts(self, count: int) -> list[int]:
        """Elements of each rank's block when ``count`` elements are split for reduce-scatter or
        allgather (balanced: the first ``count % size`` ranks hold one more)."""
        if isinstance(count, bool) or not isinstance(count, (int, np.integer)) or count < 0:
            raise ValueError(f"count must be an integer >= 0, got {count!r}")
        return block_counts(int(count), self.size)

    # -- one call ------------------------------------------------------------------------------
    def _begin(self, coll: _coll.Collective, call: _coll.Call, bound: int, device: bool) -> OpRun:
        """The op's :class:`OpRun`: a fresh sequence number and frame context, after rotating to
        the next epoch when ``bound`` more frames would pass the per-key limit."""
        seq = self.sequence
        op_index = seq.next_op(bound)
        frame = FrameContext(
            self.suite.suite_id,
            coll.code,
            CODES[call.dtype],
            self._job,
            self.session.comm_id,
            seq.epoch,
            seq.seq,
            op_index,
            call.count,
            call.redop,
        )
        if device:
            return self.devices.op_run(self.context, frame, call.itemsize, coll.name)
        return OpRun(self.context, frame, call.itemsize, coll.name)

    def _tail(self, coll: _coll.Collective, call: _coll.Call, alg: str) -> bytes:
        """The argument record of this call after its op number (:meth:`Agreement.tail`)."""
        return self.agreement.tail(
            coll.code, CODES[call.dtype], REDOPS[call.redop], _ALG[coll.name][alg], call.root, call.count
        )

    def _collective(self, name: str, sendbuf, recvbuf, **kw) -> None:
        """The one path of every public collective (each record's ``method`` calls it): route
        the buffers, check the arguments (the record's ``args``), begin the op, run the
        algorithm the record chooses.  Device buffers the engine cannot take are staged.  One
        call at a time: ``ConcurrentUseError`` while another thread is inside one.  A repeat
        call with the very same numpy arrays, arguments and :attr:`algorithm` skips the checks
        and runs its plan (:mod:`seccomm.plans`).  The first call runs the algorithm as
        registered."""
        if self._forked:
            raise CommClosedError(_forked(name, self._pid))
        if not self._busy.acquire(False):  # (reentrant: the staged call below re-enters)
            raise ConcurrentUseError(_concurrent_use(name, self.rank))
        try:
            key = None
            if type(sendbuf) is np.ndarray and type(recvbuf) is np.ndarray and self.devices.backend is None:
                key, plan = self.plans.find(name, sendbuf, recvbuf, self.algorithm, kw)
                if plan is not None:
                    self.plans.repeat(plan, self.sequence)
                    return
            coll = _coll.COLLECTIVES[name]
            route, sendbuf, recvbuf = self.devices.route(self, sendbuf, recvbuf)
            if route == "staged":
                staged = functools.partial(self._collective, name)
                return self.devices.staged(staged, sendbuf, recvbuf, **kw)
            device = route == "device"
            try:
                call = coll.args(sendbuf, recvbuf, self.rank, self.size, device, **kw)
                nbytes = call.count * call.itemsize
                alg = coll.pick(self, nbytes, call.count, self.size)
                bound = self.sequence.bound(coll, nbytes, call.itemsize)
                run = self._begin(coll, call, bound, device)
            except (TypeError, ValueError) as e:
                self.sequence.refuse(name, e)
                raise
            tail = self._tail(coll, call, alg)
            steps = functools.partial(coll.algorithms[alg], run, *call.args)  # this op: as registered
            check = _checker(self.agreement, run)
            if key is not None:
                prepare = coll.prepare.get(alg)  # the repeats: prepared once (host buffers only)
                again = steps if prepare is None else prepare(run, *call.args)
                self.plans.keep(key, sendbuf, recvbuf, bound, tail, run, again, check)
            self.sequence.run(run, steps, tail, check)
        except BaseException as e:
            if not isinstance(e, Exception):  # (KeyboardInterrupt, SystemExit ... anywhere in the call)
                self.sequence.interrupted(name, e)
            raise
        finally:
            self._busy.release()


def _checker(agreement: Agreement, run: OpRun):
    """``check()``: ``agreement``'s check of the op ``run`` is in (its label at the time)."""
    return lambda: agreement.check(run.op_label)


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


def _secret_or_none(psk):
    """The job secret, or None when there is none (only to MAC a hello that carries an error)."""
    try:
        return load_secret(psk)[0]
    except KeyScheduleError:
        return None


_install_collectives(SecureComm)

__all__ = ["SecureComm", "ConfigMismatchError"]
