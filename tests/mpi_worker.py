"""Runs under ``mpiexec -n K``: executes named scenarios of secure collectives on real ranks and
checks them against native MPI (or a float64 reference where MPI has no such type).

Usage: ``mpiexec -n K python tests/mpi_worker.py OUT.json SCENARIO [SCENARIO ...]``.
Rank 0 writes ``{scenario: {"cases": N, "failures": [...]}}`` to OUT.json.  Each rank r appends
its progress to ``OUT.json.rank{r}.progress`` as it goes (one flushed line per scenario start, case
start where a check helper knows its label, case end, and ``done`` last), so that a launch killed
for a hang can say what each rank was running (tests/helpers.py ``run_worker``).  A check helper's
secure op that raises on one rank makes every rank raise (``Recorder.run``), and a scenario that
raised ends the launch early: the scenarios after it are reported as not run.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import sys
import time
import traceback
import weakref

import numpy as np
from mpi4py import MPI

import argument_cases
import seccomm
import seccomm.engine
import seccomm.pairswap
import wire_cases
from seccomm import AuthenticationError, ConfigMismatchError, SecCommError, SecureComm
from seccomm.transports import TamperTransport, TransportWrapper

# a random job secret (keys.load_secret refuses patterned ones such as bytes(range(32)))
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")
SUITES = list(seccomm.SUITES)
DTYPES = ["float16", "bfloat16", "float32", "float64", "uint8", "int32", "int64"]
#: the sweep's counts; the largest spans several chunks per hop at the sweep's chunk size
BIG = 2**17 + 3
COUNTS = [0, 1, 7, 1001, BIG]
SWEEP_CHUNK = 1 << 16  #: frame payload bytes in the sweep (BIG float64: 8 to 16 frames per hop)
FLOATS = ("float16", "bfloat16", "float32", "float64")
NATIVE_OPS = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}
SCENARIOS = {}


def scenario(fn):
    SCENARIOS[fn.__name__] = fn
    return fn


def npdtype(name):
    return seccomm.dtypes.DTYPES[name][0]  # (bfloat16: imports ml_dtypes on first use)


def make_data(comm, dname, n, salt=0, op="sum"):
    rng = np.random.default_rng(1000 * comm.rank + 7 * n + salt)
    dt = npdtype(dname)
    if dname == "uint8":
        return rng.integers(0, 256, n, dtype=np.uint8)
    if dname == "int32":
        return rng.integers(-1000, 1000, n, dtype=np.int32)
    if dname == "int64":
        return rng.integers(-(2**40), 2**40, n, dtype=np.int64)
    if op == "prod":
        return rng.uniform(0.9, 1.1, n).astype(dt)
    return rng.uniform(-1, 1, n).astype(dt)


def native_has(dname):
    return dname not in ("float16", "bfloat16")


def gather_inputs(comm, x):
    allx = np.empty((comm.size, x.size), x.dtype)
    comm.Allgather(x.view(np.uint8), allx.view(np.uint8))
    return allx


def ref_reduce(comm, x, op):
    """Reference allreduce of ``x`` and its tolerance (None: must be exact).

    Native MPI where it has the type and op, else float64 over all inputs.  Float tolerance:
    (p+1) eps sum|x_i| for sums (any summation order), (p+1) eps |ref| otherwise."""
    dname = x.dtype.name
    allx = gather_inputs(comm, x)
    if native_has(dname) and op in NATIVE_OPS:
        ref = np.empty_like(x)
        comm.Allreduce(x, ref, NATIVE_OPS[op])
    else:
        fn = {"sum": np.sum, "avg": np.sum, "max": np.max, "min": np.min, "prod": np.prod}[op]
        ref = fn(allx.astype(np.float64), axis=0)
        if op == "avg":
            ref = ref / comm.size
    if dname not in FLOATS:
        return ref, None
    import ml_dtypes  # (its finfo knows bfloat16)

    eps = float(ml_dtypes.finfo(x.dtype).eps)
    a64 = allx.astype(np.float64)
    if op in ("sum", "avg"):
        tol = (comm.size + 1) * eps * np.abs(a64).sum(axis=0)
    else:
        tol = (comm.size + 1) * eps * np.abs(np.asarray(ref, np.float64))
    return ref, tol


def close(ours, ref, tol):
    if tol is None:
        return np.array_equal(ours, ref)
    return bool(np.all(np.abs(ours.astype(np.float64) - np.asarray(ref, np.float64)) <= tol + 1e-30))


def identical_on_all(comm, arr):
    allv = gather_inputs(comm, np.ascontiguousarray(arr).reshape(-1))
    return bool((allv.view(np.uint8) == allv[0:1].view(np.uint8)).all())


class CaseFailedElsewhere(Exception):
    """The secure op of this case raised on another rank (``Recorder.run``)."""


class Recorder:
    """Counts a scenario's cases and keeps its failures; ``progress``: this rank's progress file
    (text, line-buffered), to which each case's start and end are written as ``SCENARIO / ...``."""

    def __init__(self, comm, scenario="", progress=None):
        self.comm, self.cases, self.fail = comm, 0, []
        self.scenario, self.progress, self.current, self.last = scenario, progress, None, None
        self.note("scenario started")

    def note(self, text):
        if self.progress is not None:
            self.progress.write(f"{self.scenario} / {text}\n")

    def start(self, name):
        """a case named ``name`` begins (its ops may hang: the progress file then names it; an
        exception that ends the scenario names it too, else the last case finished)"""
        self.current = name
        self.note(f"started: {name}")

    def run(self, name, op):
        """Case ``name`` begins: ``op()`` (its secure collective), then every rank learns whether
        the op raised on any rank, and if so every rank raises (this rank's own error, else
        ``CaseFailedElsewhere`` naming the ranks): no rank goes on alone into the MPI collectives
        of the reference check, out of step with the others (a hang of the launch)."""
        self.start(name)
        err = None
        try:
            op()
        except Exception as e:  # noqa: BLE001 - re-raised below, after the others learn of it
            err = e
        failed = np.array([err is not None], np.int8)
        self.comm.Allreduce(MPI.IN_PLACE, failed, MPI.MAX)  # one small buffer collective per case
        if not failed[0]:
            return
        errs = self.comm.allgather(None if err is None else f"{type(err).__name__}: {err}")
        if err is not None:
            raise err
        bad = [r for r, e in enumerate(errs) if e]
        raise CaseFailedElsewhere(f"the op raised on rank(s) {bad}; rank {bad[0]}: {errs[bad[0]]}")

    def where(self) -> str:
        """the case running now, else the last one finished (an exception names it)"""
        if self.current:
            return f"in case {self.current!r}"
        return f"after case {self.last!r}" if self.last else "before its first case"

    def __call__(self, name, ok, detail=""):
        self.cases += 1
        self.current, self.last = None, name
        self.note(f"finished: {name}")
        if not ok:
            self.fail.append(f"rank {self.comm.rank}: {name} {detail}")


def check_allreduce(comm, sc, rec, dname, n, op="sum", tag=""):
    x = make_data(comm, dname, n, op=op)
    y = np.full_like(x, 0)
    label = f"allreduce{tag} {sc.suite.name} {dname} n={n} op={op}"
    rec.run(label, lambda: sc.allreduce(x, y, op=op))
    ref, tol = ref_reduce(comm, x, op)
    rec(label, close(y, ref, tol) and identical_on_all(comm, y))


def check_reduce_scatter(comm, sc, rec, dname, n):
    x = make_data(comm, dname, n, salt=1)
    counts = sc.block_counts(n)
    off = sum(counts[: comm.rank])
    y = np.empty(counts[comm.rank], x.dtype)
    label = f"reduce_scatter {sc.suite.name} {dname} n={n}"
    rec.run(label, lambda: sc.reduce_scatter(x, y))
    full, tol = ref_reduce(comm, x, "sum")
    ok = close(y, full[off : off + y.size], None if tol is None else tol[off : off + y.size])
    if native_has(dname):
        native = np.empty_like(y)
        comm.Reduce_scatter(x, native, counts, MPI.SUM)
        ok = ok and close(y, native, None if tol is None else tol[off : off + y.size])
    rec(label, ok)


def check_allgather(comm, sc, rec, dname, n):
    counts = sc.block_counts(n)
    x = make_data(comm, dname, counts[comm.rank], salt=2)
    y = np.empty(n, x.dtype)
    label = f"allgather {sc.suite.name} {dname} n={n}"
    rec.run(label, lambda: sc.allgather(x, y))
    ref = np.empty(n, x.dtype)
    disp = [sum(counts[:i]) for i in range(comm.size)]
    comm.Allgatherv(
        x.view(np.uint8),
        [ref.view(np.uint8), [c * x.itemsize for c in counts], [d * x.itemsize for d in disp], MPI.BYTE],
    )
    rec(label, np.array_equal(y.view(np.uint8), ref.view(np.uint8)))


def check_bcast(comm, sc, rec, dname, n, root):
    x = make_data(comm, dname, n, salt=3)
    ref = x.copy()
    comm.Bcast(ref.view(np.uint8), root=root)
    label = f"bcast {sc.suite.name} {dname} n={n} root={root}"
    rec.run(label, lambda: sc.bcast(x, root=root))
    rec(label, np.array_equal(x.view(np.uint8), ref.view(np.uint8)))


def check_alltoall(comm, sc, rec, dname, m, tag=""):
    """alltoall of m elements per peer, bitwise equal to native MPI_Alltoall"""
    x = make_data(comm, dname, comm.size * m, salt=4)
    y = np.full_like(x, 0)
    label = f"alltoall{tag} {sc.suite.name} {dname} m={m}"
    rec.run(label, lambda: sc.alltoall(x, y))
    ref = np.empty_like(x)
    comm.Alltoall(x.view(np.uint8), ref.view(np.uint8))
    rec(label, np.array_equal(y.view(np.uint8), ref.view(np.uint8)))


def alltoall_blocks(comm):
    """per-peer counts: empty, odd, and a block of about BIG / p elements (a partial last chunk)"""
    return (0, 1, 7, 1001, BIG // comm.size)


def check_alltoall_args(comm, rec):
    """alltoall arguments refused before traffic: sizes not p*m, two dtypes, in place"""
    sc = SecureComm(comm, "aes-256-gcm", psk=PSK, timeout=10)
    p, seq = comm.size, sc.sequence.seq
    x = np.ones(2 * p, np.float32)
    for send, recv, exc, msg in (
        (
            np.ones(p + 1, np.float32),
            np.ones(p + 1, np.float32),
            ValueError,
            f"not a multiple of the world size {p}",
        ),
        (x, np.ones(2 * p, np.float64), TypeError, "one dtype"),
        (x, np.ones(p, np.float32), ValueError, "must match"),
        (x, x, ValueError, "overlap"),
    ):
        try:
            sc.alltoall(send, recv)
            got = None
        except (TypeError, ValueError) as e:
            got = e
        rec(f"alltoall bad args: {type(got).__name__}: {got}", isinstance(got, exc) and msg in str(got))
    rec("alltoall bad args: no op began", sc.sequence.seq == seq)
    sc.close()


@scenario
def sweep(comm, rec):
    """every collective x suite x dtype x count against native MPI"""
    for suite in SUITES:
        sc = SecureComm(comm, suite, psk=PSK, timeout=60, chunk_bytes=SWEEP_CHUNK)
        for dname in DTYPES:
            for n in COUNTS:
                check_allreduce(comm, sc, rec, dname, n)
                check_reduce_scatter(comm, sc, rec, dname, n)
                check_allgather(comm, sc, rec, dname, n)
                check_bcast(comm, sc, rec, dname, n, root=comm.size - 1)
            for m in alltoall_blocks(comm):
                check_alltoall(comm, sc, rec, dname, m)
        sc.close()
    if comm.size > 1:
        check_alltoall_args(comm, rec)


class _RecordingKey:
    """Wraps a keyed suite to log which key (by derivation parameters) sealed which nonce."""

    def __init__(self, inner, keyid, log):
        self.inner, self.keyid, self.log = inner, keyid, log

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def seal(self, slot, pt):
        self.log.append((self.keyid, bytes(slot.nonce)))
        return self.inner.seal(slot, pt)


@contextlib.contextmanager
def python_path(on=True):
    """Plans made inside take the Python path, not the compiled swap (``SECCOMM_EXPRESS=0``:
    :mod:`seccomm.pairswap`), where ``on``."""
    old = os.environ.get("SECCOMM_EXPRESS")
    if on:
        os.environ["SECCOMM_EXPRESS"] = "0"
    try:
        yield
    finally:
        if on:
            if old is None:
                del os.environ["SECCOMM_EXPRESS"]
            else:
                os.environ["SECCOMM_EXPRESS"] = old


def _close_together(comm, sc):
    sc.close()
    comm.Barrier()


def _setup_error(err) -> bool:
    """A clear setup error: ConfigMismatchError or AuthenticationError of the op "setup", naming a
    rank (never a timeout)."""
    return (
        isinstance(err, (ConfigMismatchError, AuthenticationError))
        and err.op == "setup"
        and err.peer in range(MPI.COMM_WORLD.size)
    )


@scenario
def setup_downgrade(comm, rec):
    """A host downgrade in setup: ranks on two simulated hosts with encrypt='inter-node'.  Honest:
    frames between hosts carry no plaintext window, frames inside a host do (the search can fail).
    Host keys rewritten in transit so that every rank sees every peer on its own host: a setup
    error on every rank and no plaintext window on the wire.  node_ids claiming one node for two
    hosts: still encrypted between the hosts."""
    from seccomm.compliance.attack import AttackTransport, _SimulatedHost, two_hosts
    from seccomm.compliance.evidence import find_plaintext, gradients
    from seccomm.transports import RecordingTransport

    if comm.size < 2:
        return
    hosts = two_hosts(comm.size)
    for kx in ("psk", "psk-dhe"):
        for case, attack, node_ids in (
            ("honest", False, None),
            ("forged host keys", True, None),
            ("node_ids merging hosts", False, [0] * comm.size),
        ):
            made = []

            def wrap(t, attack=attack):
                made.append(RecordingTransport(_SimulatedHost(t, 0x5EC0 + hosts[comm.rank])))
                return AttackTransport(made[0], "forge-node-map") if attack else made[0]

            inputs = [gradients(r, 4099, 17) for r in range(comm.size)]
            y, err = np.zeros(4099, np.float32), None
            try:
                sc = SecureComm(
                    comm,
                    psk=PSK,
                    encrypt="inter-node",
                    algorithm="ring",
                    key_exchange=kx,
                    node_ids=node_ids,
                    timeout=10,
                    wrap_transport=wrap,
                )
                sc.allreduce(inputs[comm.rank], y)
                sc.close()
            except SecCommError as e:
                err = e
            frames = made[0].frames
            cross = [f for kind, peer, f in frames if kind == "frame" and hosts[peer] != hosts[comm.rank]]
            near = [f for kind, peer, f in frames if kind == "frame" and hosts[peer] == hosts[comm.rank]]
            found = [find_plaintext(fs, inputs + [y])["hits"] for fs in (cross, near)]
            tag = f"setup_downgrade[{kx}] {case}: {type(err).__name__}: {err}"
            if attack:  # nothing but setup messages left this rank, and no plaintext among them
                everything = find_plaintext([f for _, _, f in frames], inputs)["hits"]
                rec(tag, _setup_error(err) and not cross and not near and everything == 0)
            else:
                rec(tag, err is None)
            tot = np.array([len(cross), found[0], len(near), found[1]], np.int64)
            comm.Allreduce(MPI.IN_PLACE, tot)
            if comm.rank == 0 and not attack:  # cross-host hops sealed; same-host ones in the clear
                clear = tot[2] == 0 or tot[3] > 0 or node_ids is not None
                rec(
                    f"{tag}: {tot[0]} cross-host frames, {tot[1]} plaintext windows; {tot[2]} same-host "
                    f"frames, {tot[3]} plaintext windows",
                    tot[0] > 0 and tot[1] == 0 and clear,
                )
            comm.Barrier()


@scenario
def setup_replay(comm, rec):
    """A replayed setup: session A is set up and used; session B's setup then receives session A's
    messages (rank 0's, or every other rank's) on ranks 1..p-1: a setup error on every rank, at
    once (no rank waits out its deadline); an honest session B on the same communicator and secret
    seals no (key, nonce) pair that session A sealed"""
    import time

    from seccomm.compliance.attack import AttackTransport

    if comm.size < 2:
        return
    for kx in ("psk", "psk-dhe"):
        for who in ("rank 0", "every other rank"):
            seals_a, seals_b = [], []
            a = SecureComm(comm, psk=PSK, key_exchange=kx, timeout=10, wrap_transport=_recorder)
            _record_key_seals(a.session.keys, seals_a)
            _seal_some(comm, a)
            senders = {0} if who == "rank 0" else set(range(comm.size)) - {comm.rank}

            def replay(t, senders=senders):
                return AttackTransport(t, "replay-setup", replay=a.transport.seen, senders=senders)

            t0, err = time.monotonic(), None
            try:
                wrap = replay if comm.rank else None
                SecureComm(comm, psk=PSK, key_exchange=kx, timeout=10, wrap_transport=wrap)
            except SecCommError as e:
                err = e
            secs = time.monotonic() - t0
            tag = f"setup_replay[{kx}] {who}: {type(err).__name__}: {err} ({secs:.2f} s)"
            rec(tag, _setup_error(err) and secs < 5)
            b = SecureComm(comm, psk=PSK, key_exchange=kx, timeout=10)
            _record_key_seals(b.session.keys, seals_b)
            _seal_some(comm, b)
            both = comm.gather((seals_a, seals_b), root=0)
            if comm.rank == 0:
                sa = {s for part in both for s in part[0]}
                sb = [s for part in both for s in part[1]]
                rec(
                    f"setup_replay[{kx}] honest session B: {len(sb)} seals, none of session A's {len(sa)}",
                    len(sb) >= 4 * comm.size and len(set(sb)) == len(sb) and not sa & set(sb),
                )
            b.close()
            a.close()
            comm.Barrier()


class _SetupEdit(TransportWrapper):
    """Alters the ``index``-th setup allgather this rank receives (0 hello, 1 finished) in place
    with ``edit(rows)``."""

    def __init__(self, inner, index, edit):
        super().__init__(inner)
        self.index, self.edit, self.n = index, edit, 0

    def allgather(self, sendbuf, recvbuf, op_label, timeout=None):
        self.inner.allgather(sendbuf, recvbuf, op_label, timeout)
        if self.n == self.index:
            self.edit(np.asarray(recvbuf).reshape(self.size, -1))
        self.n += 1


def _deep_hello(rows, j):
    import struct

    from seccomm.handshake import HELLO_BYTES

    body = b"[" * 1000 + b"]" * 1000
    block = struct.pack(">I", len(body)) + body
    rows[j] = np.frombuffer(block + bytes(HELLO_BYTES - len(block)), np.uint8)


def _error_hello(rows, j):
    from dataclasses import replace

    from seccomm.handshake import decode_hello, encode_hello

    h = decode_hello(rows[j].tobytes())
    rows[j] = encode_hello(replace(h, settings={"protocol": 2}, error="forged: no PSK on this node"), None)


def _report(rows, j, status, blamed):
    import struct

    rows[j, :8] = np.frombuffer(struct.pack(">II", status, blamed), np.uint8)


@scenario
def setup_blame(comm, rec):
    """Setup messages altered so as to blame an innocent rank or crash one: a setup error naming
    the rank whose message was altered on every rank that refuses, at once (no deadline waited
    out), and never another exception.  Rank 1's finished message rewritten into a failure report
    blaming rank 2 (or rank 0's key delivery) on its way to the others: AuthenticationError naming
    rank 1 there (rank 1, which received every message intact, accepts: the last-message limit).
    Rank 0's hello replaced by a JSON array nested 1000 deep on its way to rank 1: an unreadable
    hello there (not RecursionError), and every rank names rank 0.  Rank 2's hello replaced by an
    unauthenticated argument error on its way to the others: named as not authenticated."""
    import time

    if comm.size < 3:
        return
    r = comm.rank
    cases = [
        ("forged rejection", 1, lambda rows: _report(rows, 1, 1, 2), r != 1, {1}),
        ("forged key-delivery failure", 1, lambda rows: _report(rows, 1, 2, 0), r != 1, {1}),
        ("nested hello", 0, lambda rows: _deep_hello(rows, 0), r == 1, {0}),
        ("unauthenticated error", 0, lambda rows: _error_hello(rows, 2), r != 2, {2}),
    ]
    for kx in ("psk", "psk-dhe"):
        for case, index, edit, mine, blamed in cases:
            wrap = (lambda t, i=index, e=edit: _SetupEdit(t, i, e)) if mine else None
            t0, err, sc = time.monotonic(), None, None
            try:
                sc = SecureComm(comm, psk=PSK, key_exchange=kx, timeout=4, wrap_transport=wrap)
            except Exception as e:  # noqa: BLE001 - any other exception is the failure checked
                err = e
            secs = time.monotonic() - t0
            tag = f"setup_blame[{kx}] {case}: {type(err).__name__}: {err} ({secs:.2f} s)"
            last = case.startswith("forged") and r == 1  # the last-message limit: rank 1 accepts
            ok = sc is not None if last else _setup_error(err) and err.peer in blamed and secs < 3
            if case == "unauthenticated error" and r != 2:
                ok = ok and "not authenticated" in str(err)
            rec(tag, ok)
            if sc is not None:
                sc.timeout = 0.5  # its peers refused: close() waits for them at most this long
                sc.close()
            comm.Barrier()


def _recorder(t):
    from seccomm.compliance.attack import AttackTransport

    return AttackTransport(t, "replay-setup")  # records every setup message received (seen)


def _record_key_seals(keys, log):
    """Make the key schedule ``keys`` hand out keyed suites that log (key bytes, nonce) of every
    seal (sessions have other keys)."""
    direction, group = keys.direction, keys.group
    keys.direction = lambda e, a, b: _RecordingKey(direction(e, a, b), keys.direction_key(e, a, b), log)
    keys.group = lambda e: _RecordingKey(group(e), keys.group_key(e), log)


def _seal_some(comm, sc):
    x = make_data(comm, "float32", 3001)
    y = np.empty_like(x)
    for alg in ("ring", "recursive_doubling"):
        sc.algorithm = alg
        sc.allreduce(x, y)
    sc.allgather(x[: sc.block_counts(x.size)[comm.rank]], np.empty(x.size, x.dtype))


@scenario
def wire(comm, rec):
    """wire evidence: no 16-byte window of plaintext on the wire under encrypting suites; the
    plaintext is found under aes-256-gmac and none (the check can fail)"""
    from seccomm.compliance.evidence import wire_check

    for row in wire_check(comm, count=4096 + 3, psk=PSK):
        rec(
            f"wire {row}",
            row["ok"]
            and row["wire_bytes"] > 0
            and (row["hits"] > 1000 if row["expect"] == "present" else row["hits"] == 0),
        )


@scenario
def wire_policy(comm, rec):
    """Every frame sealed exactly where the encrypt policy says, for every policy, node map
    (node_ids), encrypting suite, collective and algorithm; no plaintext in a sealed frame; no
    keystream shared by two origins (tests/wire_cases.py)"""
    wire_cases.wire_policy(comm, rec, PSK)


#: the buffer and argument scenarios (tests/argument_cases.py), each called with the suite's PSK
ARGUMENT_SCENARIOS = (
    "layouts", "nan_minmax", "readonly_send", "refusal", "threads", "completion", "agreement"
)  # fmt: skip
for _name in ARGUMENT_SCENARIOS:
    SCENARIOS[_name] = functools.partial(getattr(argument_cases, _name), psk=PSK)


def _mismatch_alike(comm, rec, label, arg, call):
    """``call()`` raises ArgumentMismatchError naming only ``arg`` on every rank, with the same
    message (after each rank's op label), within 5 s."""
    t0, got = time.monotonic(), None
    try:
        call()
    except Exception as e:  # noqa: BLE001 - what was raised is the case's result
        got = e
    secs = time.monotonic() - t0
    msgs = comm.allgather(str(got).split(": ", 1)[-1])
    ok = isinstance(got, seccomm.ArgumentMismatchError) and list(got.arguments) == [arg]
    rec(f"{label}: {type(got).__name__}: {got} ({secs:.1f} s)", ok and len(set(msgs)) == 1 and secs < 5)


def _express_used(sc) -> bool:
    """Whether a plan of ``sc`` runs the compiled swap (seccomm.pairswap)."""
    return any(p.compiled is not None and p.compiled[1] is not None for p in sc.plans.values())


def _refused(**kw):
    """In place of seccomm.pairswap.swap: a swap whose buffers are refused."""
    raise ValueError("buffer sizes do not match")


def _express_done(sc, what="done") -> int:
    """Ops of ``sc``'s plans' compiled swaps (their current epoch's) that finished in it (``done``:
    record, open and sum), or that waited for the peer in the Python path (``waits``)."""
    return sum(getattr(p.compiled[1], what) for p in sc.plans.values() if p.compiled and p.compiled[1])


@scenario
def express(comm, rec):
    """The compiled swap of a repeated two-rank allreduce (seccomm.pairswap).  On both ranks, on one
    (the other in the Python path: its frames and records are the compiled ones' and the reverse,
    so each opens what the other sealed) or on neither: every result bitwise native MPI's over
    repeated calls (in place too, NaN and inf included, keys rotated every few ops), the compiled
    swap used exactly where it applies (sum of float32, float64, int32, int64, uint8 under an
    AEAD).  Then the cases it hands back: a peer that comes late (the wait), a frame altered on the
    wire (AuthenticationError naming its sender, the result never written), a peer that stops
    (TransportTimeout naming it), and 1 MiB frames whose last send is left for the next op."""
    if comm.size != 2:
        return
    r, built = comm.rank, seccomm.pairswap.built()  # (not built: the Python path on both ranks, checked
    for mode in ("both", "rank 0", "rank 1", "neither"):  # alike; tests/unit/test_express.py says so)
        mine = built and (mode == "both" or mode == f"rank {r}")
        for suite, enc in [(s, "all") for s in SUITES] + [("aes-256-gcm", "inter-node")]:
            with python_path(not mine):  # (inter-node: one node, every hop in the clear, the
                sc = SecureComm(  # records authenticated)
                    comm, suite, psk=PSK, timeout=20, rotate_after_frames=40, encrypt=enc
                )
                for dname in ("float32", "float64", "int32", "int64", "uint8", "float16"):
                    for n in (1, 1000, 1 << 17):
                        for inplace in (False, True):
                            x0 = make_data(comm, dname, n)
                            x = x0.copy()
                            y = x if inplace else np.empty_like(x)
                            ok, ref = True, np.empty_like(x)
                            for i in range(6):
                                x[:] = x0 + np.asarray(i, x0.dtype)
                                if dname in FLOATS and n > 1:
                                    x[i] = (np.nan, np.inf, -np.inf)[i % 3] if i % 2 else x[i]
                                comm.Allreduce(x, ref) if native_has(dname) else ref.fill(0)
                                sc.allreduce(x, y)
                                if native_has(dname):
                                    ok &= np.array_equal(y, ref, equal_nan=True)
                                ok &= identical_on_all(comm, y)
                            # (a clear hop of 1 MiB or more is acknowledged: its record goes
                            # alone, in the Python path)
                            clear = suite == "none" or enc == "inter-node"
                            big = clear and x.nbytes >= seccomm.engine.ACK_CLEAR_BYTES
                            want = mine and suite != "aes-256-gmac" and dname != "float16" and not big
                            label = f"express {mode} {suite} {enc} {dname} n={n} in place={inplace}"
                            rec(f"{label}: bitwise native", ok)
                            used = _express_used(sc)
                            done = _express_done(sc)  # (5 repeats; keys rotate every few)
                            rec(f"{label}: compiled swap used: {used}, {done} ops", used == want)
                            rec(f"{label}: ended in the compiled swap", not want or done >= 1)
                            sc.plans.clear()
                rec(f"express {mode} {suite} {enc}: keys rotated (epoch {sc.epoch})", sc.epoch >= 3)
                _close_together(comm, sc)
    x = np.full(1000, r + 1.0, np.float32)
    y = np.empty_like(x)
    # a swap that cannot be made on rank 0 (its buffers refused): that rank's repeats take the
    # Python path, the op already numbered goes on, every result right
    sc = SecureComm(comm, "aes-256-gcm", psk=PSK, timeout=20)
    made = seccomm.pairswap.swap
    if r == 0:
        seccomm.pairswap.swap = _refused
    try:
        ok = True
        for _ in range(4):
            y.fill(0)
            sc.allreduce(x, y)
            ok &= bool(np.all(y == 3))
    finally:
        seccomm.pairswap.swap = made
    used = _express_used(sc) == (built and r == 1)
    rec(f"express: no swap made on rank 0: rank {r} right, compiled swap used on rank 1 only", ok and used)
    _close_together(comm, sc)
    # a late peer: the receive is not in within the compiled swap's spin
    sc = SecureComm(comm, "aes-256-gcm", psk=PSK, timeout=20)
    for i in range(6):
        if r == 1 and i in (2, 3):
            time.sleep(0.5)
        y.fill(0)
        sc.allreduce(x, y)
        rec(f"express: a late peer, call {i}: rank {r} right", np.all(y == 3))
    done, waits = _express_done(sc), _express_done(sc, "waits")  # (call 0 makes the plan)
    rec(
        f"express: a late peer: {done} of 5 calls finished in the compiled swap on rank {r}",
        done == 5 * built,
    )
    if r == 0:  # (calls 2 and 3 waited in the Python path, 0.5 s being past the swap's spin; on a
        # busy machine others may too)
        rec(f"express: a late peer: rank 0 waited in the Python path in {waits} calls", waits >= 2 * built)
    rec(f"express: a late peer: compiled swap used on rank {r}", _express_used(sc) == built)
    refs = [weakref.ref(o) for o in (sc, x, y, *(p.run for p in sc.plans.values()))]
    _close_together(comm, sc)
    del sc
    x = y = None  # (the waits left the swap's requests with the run: nothing keeps them after close)
    gc.collect()
    rec(f"express: a late peer: rank {r}: its plans, runs and arrays freed", all(w() is None for w in refs))
    x = np.full(1000, r + 1.0, np.float32)
    y = np.empty_like(x)
    # a frame altered on the wire: rank 0 (Python path, wrapped) flips a bit of its third frame;
    # rank 1 (compiled swap) raises naming rank 0, its result untouched
    for where in (0, -1):
        label = f"express: rank 0's third frame altered at byte {where}"
        rec.start(label)
        flip = lambda i, peer, nbytes, where=where: where if i == 2 else None  # noqa: E731
        wrap = (lambda t: TamperTransport(t, flip)) if r == 0 else None
        sc = SecureComm(comm, "aes-256-gcm", psk=PSK, timeout=5, wrap_transport=wrap)
        got, y = None, np.zeros_like(x)
        try:
            for _ in range(3):
                y.fill(-7)
                sc.allreduce(x, y)
        except SecCommError as e:
            got = e
        if r == 1:
            ok = isinstance(got, AuthenticationError) and got.peer == 0 and got.op == "allreduce"
            used = _express_used(sc) == built
            rec(f"{label}: rank 1: {type(got).__name__}: {got}", ok and np.all(y == -7) and used)
        else:
            rec(f"{label}: rank 0: {type(got).__name__}", got is None or isinstance(got, SecCommError))
        refs = [weakref.ref(o) for o in (sc, y, *(p.run for p in sc.plans.values()))]
        _close_together(comm, sc)
        sc = y = got = None  # (the failed op's requests, kept while MPI may touch their buffers,
        gc.collect()  # go with the closed SecureComm)
        rec(f"{label}: rank {r}: its plans, runs and arrays freed", all(w() is None for w in refs))
    y = np.empty_like(x)
    # a peer that stops: rank 1 skips the third call and waits past rank 0's deadline
    label = "express: rank 1 skips a call"
    rec.start(label)
    sc = SecureComm(comm, "aes-256-gcm", psk=PSK, timeout=2)
    got, t0 = None, 0.0
    try:
        for i in range(3):
            if r == 1 and i == 2:
                time.sleep(4)
                break
            t0 = time.monotonic()
            sc.allreduce(x, y)
    except SecCommError as e:
        got = e
    secs = time.monotonic() - t0
    if r == 0:
        # (past its deadline rank 0 gives rank 1 a grace to tell it something: it ends when rank
        # 1 wakes, as in the Python path)
        ok = isinstance(got, seccomm.TransportTimeout) and got.peer == 1 and 1.5 < secs < 8
        rec(f"{label}: rank 0: {type(got).__name__}: {got} ({secs:.1f} s)", ok)
    sc.close()
    comm.Barrier()
    # 1 MiB frames: the send may still be out when the op returns (left for the next op)
    sc = SecureComm(comm, "aes-256-gcm", psk=PSK, timeout=20)
    xb = make_data(comm, "float32", 1 << 18)
    yb, ref = np.empty_like(xb), np.empty_like(xb)
    comm.Allreduce(xb, ref)
    ok, left = True, 0
    for _ in range(20):
        yb.fill(0)
        sc.allreduce(xb, yb)
        ok &= np.array_equal(yb, ref)
        left += sc.sequence.unsent is not None
    used = _express_used(sc) == built
    label = f"express: 1 MiB, 20 calls ({left} left their send for the next op)"
    rec(f"{label}: bitwise native, compiled swap used on rank {r}", ok and used)
    _close_together(comm, sc)


@scenario
def paired(comm, rec):
    """On two ranks an op's argument record rides in its first message to the peer.  Repeated calls
    (a plan's prepared swap), a ring of several frames, bcast (a record alone one way), an op of no
    elements (alone both ways), and a rank whose transport is wrapped (its record copied in and
    out) with one whose is not: every result as native MPI's.  A disagreement in a repeated call,
    whichever rank gets the larger message, and two ranks that each name the other (or itself) as
    bcast's root, raise the same ArgumentMismatchError on both ranks within 5 s; a record altered,
    or replayed from the op before (same arguments), raises AuthenticationError naming its sender
    on its receiver, under an authenticating suite; under ``none`` (nothing is authenticated) the
    replay goes through and the altered record reads as a disagreement."""
    if comm.size != 2:
        return
    r = comm.rank
    for wrapped in (None, 0, 1):
        wrap = (lambda t: TransportWrapper(t)) if wrapped == r else None
        sc = SecureComm(comm, "aes-256-gcm", psk=PSK, chunk_bytes=4096, timeout=20, wrap_transport=wrap)
        for dname in ("float32", "int64"):
            for n in (0, 1, 1000, 3001):  # (3001 int64: several frames a hop, the ring)
                check_allreduce(comm, sc, rec, dname, n, tag=f" paired wrapped={wrapped}")
                check_bcast(comm, sc, rec, dname, n, root=n % 2)
                check_allgather(comm, sc, rec, dname, n)
        x = (np.arange(1000, dtype=np.float32) + 1) * (r + 1)
        y, ref = np.empty_like(x), np.empty_like(x)
        comm.Allreduce(x, ref)
        same = []
        for _ in range(5):
            y[:] = np.nan
            sc.allreduce(x, y)
            same.append(np.array_equal(y, ref))
        rec(f"paired wrapped={wrapped}: five repeated allreduce calls", all(same))
        _close_together(comm, sc)
    for bigger in (0, 1):
        label = f"paired: a repeated call's disagreement, rank {bigger} passes more"
        rec.start(label)
        sc = SecureComm(comm, "aes-256-gcm", psk=PSK, timeout=20)
        x = np.ones(256, np.float32)
        y = np.empty_like(x)
        for _ in range(3):
            sc.allreduce(x, y)
        xb = np.ones(300, np.float32) if r == bigger else x
        _mismatch_alike(comm, rec, label, "count", lambda: sc.allreduce(xb, np.empty_like(xb)))
        _close_together(comm, sc)
    for roots in ((1, 0), (0, 1)):  # each names the other as the root (both wait), then itself
        label = f"paired: bcast, rank 0 names root {roots[0]}, rank 1 root {roots[1]}"
        rec.start(label)
        sc = SecureComm(comm, "aes-256-gcm", psk=PSK, timeout=20)
        _mismatch_alike(comm, rec, label, "root", lambda: sc.bcast(np.zeros(64, np.float32), root=roots[r]))
        _close_together(comm, sc)
    # (none: 64 elements go in recursive doubling's one swap, the record behind the copied frame;
    # 2**19 in the ring, whose first clear frame goes from the caller's array, the record alone)
    for suite, n in (("aes-256-gcm", 64), ("none", 64), ("none", 1 << 19)):
        for how in ("altered", "replayed"):
            label = f"paired {suite} n={n}: a record {how} by rank 0"
            rec.start(label)
            sc = SecureComm(comm, suite, psk=PSK, timeout=20)
            x = np.full(n, r + 1.0, np.float32)
            y = np.empty_like(x)
            with python_path(r == 0):  # (rank 0 alters its record in the Python path; rank 1 reads
                sc.allreduce(x, y)  # it in the compiled one where that applies: seccomm.pairswap)
            if r == 0:
                t, kept, put, used = sc.transport, [], sc.transport.put_record, []

                def alone(t=t, kept=kept, how=how, used=used):
                    t.records.pair_out = False
                    used.append("alone")
                    msg = np.array(t.records._agree_rec, np.uint8)  # (a copy: this rank's own stays)
                    if how == "altered":
                        msg[8 + 3] ^= 1  # (the record's algorithm byte)
                    elif kept:
                        msg[8:] = np.frombuffer(kept[0], np.uint8)
                    else:
                        kept.append(bytes(msg[8:]))
                    t.records._pair_sends.append(t.comm.Isend([msg, t._byte], t.records._peer, t.tag))
                    kept.append(msg)  # (referenced until the send is done)

                def forged(trailer, put=put, kept=kept, how=how, used=used):
                    if not put(trailer):
                        return False
                    used.append("behind")
                    if how == "altered":
                        trailer[3] ^= 1  # (the record's algorithm byte)
                    elif kept:
                        trailer[:] = kept[0]
                    else:
                        kept.append(bytes(trailer))
                    return True

                t.records._pair_alone, t.put_record = alone, forged
            got, t0 = None, time.monotonic()
            try:
                for _ in range(2):  # (a replay needs an op to replay from)
                    sc.allreduce(x, y)
            except SecCommError as e:
                got = e
            secs = time.monotonic() - t0
            if r == 0:  # the record went where this case means it to go, each call
                want = "alone" if suite == "none" and n > 64 else "behind"
                rec(f"{label}: the record went {want}: {used}", used and set(used) == {want})
            if suite == "none" and how == "replayed":
                ok = got is None and np.all(y == 3)
            elif suite == "none":  # an altered record that nothing authenticates: a disagreement,
                # seen by rank 1 alone; rank 0 is told at once (never waits out its deadline)
                mismatch = isinstance(got, seccomm.ArgumentMismatchError)
                told = got is None or isinstance(got, seccomm.PeerAbortError) and got.peer == 1
                ok = (mismatch if r == 1 else told) and secs < 5
            elif r == 1:
                ok = isinstance(got, AuthenticationError) and got.peer == 0 and "allreduce" in str(got)
            else:  # needing nothing more of rank 1 than its verified frame: finishes, or is told
                ok = got is None or isinstance(got, seccomm.PeerAbortError)
            rec(f"{label}: rank {r}: {type(got).__name__}: {got} ({secs:.1f} s)", ok)
            _close_together(comm, sc)
    # a record sent alone one byte short, one long, 24 long (under none nothing authenticates it,
    # so its length is all that tells): FrameError naming rank 0 on rank 1 at once, never a
    # record read from the wrong bytes; rank 0 is told at once, or had finished its part
    cases = [("allreduce", 1 << 19), ("allreduce", 0), ("bcast", 64), ("alltoall", 2 << 18)]
    for (coll, n), delta in [(c, d) for c in cases for d in (-1, 1, 24)]:
        label = f"paired none {coll} n={n}: rank 0's record alone {40 + delta} bytes"
        rec.start(label)
        sc = SecureComm(comm, "none", psk=PSK, timeout=20)
        if r == 0:
            t, kept = sc.transport, []

            def wrong(t=t, kept=kept, delta=delta):
                t.records.pair_out = False
                rec40 = np.array(t.records._agree_rec, np.uint8)
                pad = np.zeros(max(delta, 0), np.uint8)
                msg = rec40[:delta].copy() if delta < 0 else np.concatenate([rec40, pad])
                kept.append(msg)  # (referenced until the send is done)
                t.records._pair_sends.append(t.comm.Isend([msg, t._byte], t.records._peer, t.tag))

            t.records._pair_alone = wrong
        x = np.full(n, r + 1.0, np.float32)
        y = np.zeros_like(x)
        got, t0 = None, time.monotonic()
        try:
            if coll == "bcast":
                sc.bcast(x, root=1)  # (rank 0, the leaf, sends its record alone)
            elif coll == "alltoall":
                sc.alltoall(x, y)
            else:
                sc.allreduce(x, y)
        except SecCommError as e:
            got = e
        secs = time.monotonic() - t0
        if r == 1:
            said = f"has {40 + delta} bytes" in str(got)
            ok = isinstance(got, seccomm.FrameError) and got.peer == 0 and said
        else:
            ok = got is None or isinstance(got, seccomm.PeerAbortError) and got.peer == 1
        rec(f"{label}: rank {r}: {type(got).__name__}: {got} ({secs:.1f} s)", ok and secs < 5)
        _close_together(comm, sc)


@scenario
def soak(comm, rec):
    """2,000 randomized collectives (collective, suite, algorithm, chunk size, dtype, count, op,
    root), each against its reference and bitwise identical on every rank"""
    rng = np.random.default_rng(2026)  # same seed on every rank: the same op sequence
    comms = []
    for suite in SUITES:
        for alg, chunk in (("auto", 1 << 20), ("ring", 1024), ("recursive_doubling", 4096)):
            comms.append(SecureComm(comm, suite, psk=PSK, algorithm=alg, chunk_bytes=chunk, timeout=60))
    colls = ("allreduce", "reduce_scatter", "allgather", "bcast", "alltoall")
    for i in range(2000):
        sc = comms[int(rng.integers(len(comms)))]
        coll = colls[int(rng.integers(len(colls)))]
        dname = DTYPES[int(rng.integers(len(DTYPES)))]
        n = int(
            rng.choice(
                [rng.integers(0, 16), rng.integers(16, 4096), rng.integers(4096, 1 << 16)], p=[0.2, 0.5, 0.3]
            )
        )
        op = str(rng.choice(["sum", "sum", "max", "min"] + (["avg"] if dname in FLOATS else [])))
        root = int(rng.integers(comm.size))
        if coll == "allreduce":
            check_allreduce(comm, sc, rec, dname, n, op=op, tag=f" soak#{i}")
        elif coll == "reduce_scatter":
            check_reduce_scatter(comm, sc, rec, dname, n)
        elif coll == "allgather":
            check_allgather(comm, sc, rec, dname, n)
        elif coll == "alltoall":
            check_alltoall(comm, sc, rec, dname, n // comm.size, tag=f" soak#{i}")
        else:
            check_bcast(comm, sc, rec, dname, n, root)
    for sc in comms:
        sc.close()


@scenario
def device_engine(comm, rec):
    """the device engine (seccomm.gpu.engine) on the host build of the kernel core: even ranks
    seal and open in batches on it, odd ranks use the CPU engine; every frame must interoperate
    and every result match the reference, under psk and under x509 (origin MACs); a tampered
    frame is caught on a device-engine rank"""
    import tempfile
    from pathlib import Path

    from hostcore import HostBackend, build

    backend = HostBackend(build(Path(tempfile.mkdtemp(prefix=f"sc-host-{comm.rank}-"))))
    mine = backend if comm.rank % 2 == 0 else None
    for suite in SUITES:
        for alg in ("ring", "recursive_doubling"):
            sc = SecureComm(comm, suite, psk=PSK, algorithm=alg, chunk_bytes=4096, device_backend=mine)
            for dname in ("float32", "float16", "bfloat16", "int64"):
                for n in (0, 1, 7, 1001, 2**16 + 3):
                    check_allreduce(comm, sc, rec, dname, n, tag=f" device-engine {alg}")
                    if alg == "ring":
                        check_reduce_scatter(comm, sc, rec, dname, n)
                        check_allgather(comm, sc, rec, dname, n)
                        check_bcast(comm, sc, rec, dname, n, root=comm.size - 1)
                        check_alltoall(comm, sc, rec, dname, n, tag=" device-engine")
            sc.close()
    # in place (the fused ring's last hop must not read this rank's share after overwriting it)
    for dname in ("float32", "float16"):
        sc = SecureComm(comm, "aes-256-gcm", psk=PSK, algorithm="ring", chunk_bytes=1000, device_backend=mine)
        x = make_data(comm, dname, 5003)
        ref, tol = ref_reduce(comm, x, "sum")
        sc.allreduce(x, x)
        rec(
            f"device engine in-place ring allreduce {dname}", close(x, ref, tol) and identical_on_all(comm, x)
        )
        sc.close()
    # calls with more chunks than before on one SecureComm (the header rows grow): every frame
    # keeps a fresh nonce and still opens on the CPU-engine ranks
    sc = SecureComm(
        comm, "aes-256-gcm", psk=PSK, algorithm="recursive_doubling", chunk_bytes=1010, device_backend=mine
    )
    for dname, n in (("uint8", 3030), ("float64", 126), ("float64", 379), ("float64", 126)):
        check_allreduce(comm, sc, rec, dname, n, tag=" device-engine growing rows")
    sc.close()
    # identity x509 (one throw-away CA, made by rank 0): from 3 ranks on, the device-engine ranks
    # make and check the group frames' origin MACs with the kernels' macs, the CPU ranks theirs
    from identities import rank_identities

    ids = comm.bcast(rank_identities(comm.size) if comm.rank == 0 else None, root=0)
    sc = SecureComm(
        comm, "aes-256-gcm", identity=ids[comm.rank], algorithm="ring", chunk_bytes=4096, device_backend=mine
    )
    for dname in ("float32", "int64"):
        for n in (1001, 2**16 + 3):
            check_allreduce(comm, sc, rec, dname, n, tag=" device-engine x509")
            check_allgather(comm, sc, rec, dname, n)
            check_bcast(comm, sc, rec, dname, n, root=comm.size - 1)
    sc.close()
    comm.Barrier()  # (rank 0 removes the identities' folder as it exits)
    check_tamper_caught_on_rank0(comm, rec, "chacha20-poly1305", 4096, 10, mine, "device engine")


def check_tamper_caught_on_rank0(comm, rec, suite, chunk_bytes, timeout, backend, label):
    """A frame from the last rank to rank 0 (a device-engine rank) is tampered on the wire: rank 0
    raises AuthenticationError naming the sender, the others stop with a SecCommError."""
    wrap = (
        (lambda t: TamperTransport(t, lambda i, peer, nb: 3 if (i == 0 and peer == 0) else None))
        if comm.rank == comm.size - 1
        else None
    )
    sc = SecureComm(
        comm,
        suite,
        psk=PSK,
        algorithm="ring",
        chunk_bytes=chunk_bytes,
        timeout=timeout,
        device_backend=backend,
        wrap_transport=wrap,
    )
    x = np.ones(20000, np.float32)
    y = np.full_like(x, 7.0)
    try:
        sc.allreduce(x, y)
        rec(f"{label}: tampered frame raised", comm.rank != 0)
    except AuthenticationError as e:
        rec(f"{label}: tampered frame names its sender", comm.rank == 0 and e.peer == comm.size - 1)
    except SecCommError:
        rec(f"{label}: others stop", comm.rank != 0)
    sc.close()


@scenario
def device_kernels(comm, rec):
    """the device engine driving the GPU kernels themselves (kernels/aead.cu through GPUAEAD, run
    on the CPU by tests/cuda_emu.h) on even ranks, the CPU engine on odd ranks: the frames of the
    real kernels interoperate in every collective, the fused ring hop included, and a tampered
    frame is caught on a kernel rank.  A reduced matrix: the emulator runs every CUDA thread of a block
    on one OS thread (fibers), slowly."""
    import tempfile
    from pathlib import Path

    import kernel_emu
    from hostcore import HostBackend
    from seccomm.gpu.aead import GPUAEAD

    lib = None
    if comm.rank % 2 == 0:
        lib = kernel_emu.build(Path(tempfile.mkdtemp(prefix=f"sc-emu-{comm.rank}-")))

    class KernelBackend(HostBackend):
        def aead(self, suite):
            if suite not in self._aeads:
                self._aeads[suite] = GPUAEAD(suite, module=kernel_emu.EmulatedModule(lib))
            return self._aeads[suite]

    mine = KernelBackend(None) if lib is not None else None
    for suite in SUITES:
        sc = SecureComm(comm, suite, psk=PSK, algorithm="ring", chunk_bytes=20000, device_backend=mine)
        for dname, n in (
            ("float32", 0),
            ("float32", 30011),
            ("float16", 4099),
            ("bfloat16", 4099),
            ("int64", 1001),
        ):
            check_allreduce(comm, sc, rec, dname, n, tag=" device kernels")
            if comm.size == 2:  # from 3 ranks on, only the allreduce: its ring hops are the fused kernel
                check_reduce_scatter(comm, sc, rec, dname, n)
                check_allgather(comm, sc, rec, dname, n)
                check_bcast(comm, sc, rec, dname, n, root=comm.size - 1)
                check_alltoall(comm, sc, rec, dname, n // 2, tag=" device kernels")
        sc.close()
    check_tamper_caught_on_rank0(comm, rec, "aes-256-gcm", 20000, 30, mine, "device kernels")


@scenario
def hang(comm, rec):
    """a deliberate hang, only for tests/ranks/test_timeout.py (not in helpers' PLAN): every rank but
    0 starts a case that never ends; rank 0 finishes its case and waits for them at the gather."""
    if comm.rank == 0:
        rec.start("hang: rank 0's case")
        rec("hang: rank 0's case", True)
        return
    rec.start(f"hang: rank {comm.rank} waits forever")
    end = time.monotonic() + 300  # "forever" for the test; bounded, should a kill ever miss it
    while time.monotonic() < end:
        time.sleep(1)
    os._exit(4)


def run_scenario(comm, name, progress) -> tuple[dict, bool]:
    """Scenario ``name`` on every rank: (its result on rank 0, whether it raised on any rank)."""
    rec, raised = Recorder(comm, name, progress), False
    try:
        SCENARIOS[name](comm, rec)
    except Exception as e:  # report, don't hang the other ranks' parsing
        raised = True
        rec.note(f"exception {type(e).__name__}: {e}")
        rec.fail.append(
            f"rank {comm.rank}: scenario {name} stopped by {type(e).__name__} {rec.where()}: {e}\n"
            f"{traceback.format_exc()}"
        )
    rec.note("waiting for the other ranks' results")
    fails = comm.gather(rec.fail, root=0)
    cases = comm.reduce(rec.cases, op=MPI.SUM, root=0)
    result = {"cases": cases, "failures": [f for part in fails or [] for f in part]}
    return result, comm.allreduce(raised, op=MPI.LOR)


def main():
    """Run the scenarios named on the command line; after one that raised (on any rank) the
    others are reported as not run: the ranks may be out of step, and going on could hang."""
    out, names = sys.argv[1], sys.argv[2:]
    comm = MPI.COMM_WORLD
    results, stopped = {}, None
    with open(f"{out}.rank{comm.rank}.progress", "w", buffering=1) as progress:
        for name in names:
            if stopped:
                results[name] = {"cases": 0, "failures": [f"not run: {stopped} stopped by an exception"]}
                continue
            results[name], raised = run_scenario(comm, name, progress)
            stopped = name if raised else None
        if comm.rank == 0:
            with open(out, "w") as f:
                json.dump(results, f, indent=1)
        progress.write("done\n")


if __name__ == "__main__":
    main()
