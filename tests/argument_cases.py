"""Buffers and arguments on real ranks, run as scenarios of tests/mpi_worker.py (``layouts``,
``nan_minmax``); tests/ranks/test_arguments_mpi.py launches them.

Every case keeps its correct value as the assertion: native MPI on the same buffers (mpi4py
takes any contiguous buffer, in its memory order), or numpy's reduction over every rank's input.
"""

from __future__ import annotations

import threading
import time

import numpy as np
from mpi4py import MPI

import seccomm
from seccomm import CommClosedError, PeerAbortError, SecureComm

CHUNK = 1024  #: frame payload bytes: the larger cases are several frames per hop


def _fortran(comm, shape, dt, salt):
    """A Fortran-ordered (not C-contiguous) array of ``shape``, this rank's integer values."""
    rng = np.random.default_rng(100 * comm.rank + salt)
    return np.asfortranarray(rng.integers(-50, 50, shape).astype(dt))


def _same_bytes(a, b) -> bool:
    """Equal element by index and in memory (both buffers have one layout)."""
    return a.shape == b.shape and np.array_equal(a, b) and a.tobytes(order="A") == b.tobytes(order="A")


def _layout_cases(comm, sc, rec, dt):
    """Each collective on Fortran-ordered buffers, against native MPI on the same buffers."""
    p, tag = comm.size, f"{sc.algorithm} {np.dtype(dt).name}"
    for shape in ((3, 5), (64, 33), (4, 5, 6)):
        x, y = _fortran(comm, shape, dt, 1), np.asfortranarray(np.zeros(shape, dt))
        rec.run(f"layouts allreduce F {shape} {tag}", lambda: sc.allreduce(x, y))
        ref = np.asfortranarray(np.zeros(shape, dt))
        comm.Allreduce(x, ref, MPI.SUM)
        whole = np.sum(comm.allgather(x), axis=0).astype(dt)
        rec(f"layouts allreduce F {shape} {tag}", _same_bytes(y, ref) and np.array_equal(y, whole))
        z = x.copy(order="F")
        rec.run(f"layouts allreduce F in place {shape} {tag}", lambda: sc.allreduce(z, z))
        rec(f"layouts allreduce F in place {shape} {tag}", _same_bytes(z, ref))
        n = x.size
        counts = sc.block_counts(n)
        mine = np.zeros(counts[comm.rank], dt)
        rec.run(f"layouts reduce_scatter F {shape} {tag}", lambda: sc.reduce_scatter(x, mine))
        rs = np.zeros_like(mine)
        comm.Reduce_scatter(x, rs, counts, MPI.SUM)
        rec(f"layouts reduce_scatter F {shape} {tag}", np.array_equal(mine, rs))
    block = _fortran(comm, (2, 3), dt, 2)  # 6 elements per rank, gathered into (3, 2p) F
    out, ref = np.asfortranarray(np.zeros((3, 2 * p), dt)), np.asfortranarray(np.zeros((3, 2 * p), dt))
    rec.run(f"layouts allgather F {tag}", lambda: sc.allgather(block, out))
    comm.Allgather(block, ref)
    rec(f"layouts allgather F {tag}", _same_bytes(out, ref))
    a2a, got = _fortran(comm, (4, 2 * p), dt, 3), np.zeros((4, 2 * p), dt, order="F")
    rec.run(f"layouts alltoall F {tag}", lambda: sc.alltoall(a2a, got))
    ref = np.zeros((4, 2 * p), dt, order="F")
    comm.Alltoall(a2a, ref)
    rec(f"layouts alltoall F {tag}", _same_bytes(got, ref))
    for root in range(p):
        buf = _fortran(comm, (40, 9), dt, 4)
        ref = buf.copy(order="F")
        rec.run(f"layouts bcast F root={root} {tag}", lambda: sc.bcast(buf, root=root))
        comm.Bcast(ref, root=root)
        rec(f"layouts bcast F root={root} {tag}", _same_bytes(buf, ref))


def _refused(comm, rec, psk, label, call, words):
    """Every rank passes the same refused buffers: each raises ValueError naming ``words``."""
    sc = SecureComm(comm, "aes-256-gcm", psk=psk, timeout=20)
    try:
        call(sc)
        got = None
    except ValueError as e:
        got = e
    rec(f"layouts refused: {label}: {got}", got is not None and all(w in str(got) for w in words))
    sc.close()
    comm.Barrier()


def layouts(comm, rec, psk):
    """A Fortran-ordered contiguous array works like its flat buffer, as in MPI: every collective,
    both allreduce algorithms, several frames per hop; one shape in two orders and a strided view
    are refused with the reason."""
    for alg in ("ring", "recursive_doubling"):
        sc = SecureComm(comm, "aes-256-gcm", psk=psk, algorithm=alg, chunk_bytes=CHUNK, timeout=20)
        for dt in (np.int32, np.float64):
            _layout_cases(comm, sc, rec, dt)
        sc.close()
    f, c = np.zeros((3, 4), np.float32, order="F"), np.zeros((3, 4), np.float32)
    words = ["Fortran order", "C order", "memory order"]
    _refused(comm, rec, psk, "allreduce F into C", lambda sc: sc.allreduce(f, c), words)
    _refused(comm, rec, psk, "alltoall C into F", lambda sc: sc.alltoall(c, f), words)
    strided = np.zeros((4, 6), np.float32)[:, ::2]
    _refused(comm, rec, psk, "strided", lambda sc: sc.bcast(strided, root=0), ["contiguous"])


def _with_nan(comm, dname, n, holder, where):
    """Integer-valued data (exact max/min) with a NaN at ``where`` on rank ``holder``."""
    import ml_dtypes

    dt = np.dtype(ml_dtypes.bfloat16) if dname == "bfloat16" else np.dtype(dname)
    rng = np.random.default_rng(31 * comm.rank + n)
    x = rng.integers(-60, 60, n).astype(dt)
    if comm.rank == holder:
        x[where] = np.nan
    return x


def nan_minmax(comm, rec, psk):
    """Max/min with a NaN on one rank give NaN there on every rank (numpy semantics, kept on
    purpose: MPICH's MPI_MAX/MPI_MIN keep or drop it depending on which rank holds it); every other
    element is the exact max/min.  Both allreduce algorithms, one frame and several, the NaN on the
    first and on the last rank; reduce_scatter too."""
    for alg in ("ring", "recursive_doubling"):
        sc = SecureComm(comm, "aes-256-gcm", psk=psk, algorithm=alg, chunk_bytes=CHUNK, timeout=20)
        for dname in ("float16", "bfloat16", "float32", "float64"):
            for n in (7, 3001):
                where = np.array(sorted({0, n // 2, n - 1}))
                for holder in sorted({0, comm.size - 1}):
                    for op in ("max", "min"):
                        x = _with_nan(comm, dname, n, holder, where)
                        y = np.zeros_like(x)
                        label = f"nan {alg} allreduce {op} {dname} n={n} NaN on rank {holder}"
                        rec.run(label, lambda: sc.allreduce(x, y, op=op))
                        rec(label, _nan_ok(comm, x, y, where, op, 0))
                        counts = sc.block_counts(n)
                        lo = sum(counts[: comm.rank])
                        mine = np.zeros(counts[comm.rank], x.dtype)
                        label = label.replace("allreduce", "reduce_scatter")
                        rec.run(label, lambda: sc.reduce_scatter(x, mine, op=op))
                        rec(label, _nan_ok(comm, x, mine, where, op, lo))
        sc.close()


def _nan_ok(comm, x, got, where, op, lo) -> bool:
    """``got`` (elements lo.. of the reduction) is NaN exactly at ``where``, elsewhere the exact
    max/min over every rank's ``x``."""
    allx = np.array(comm.allgather(x.astype(np.float64)))
    ref = (np.fmax if op == "max" else np.fmin).reduce(allx, axis=0)[lo : lo + got.size]
    nan = np.zeros(x.size, bool)
    nan[where] = True
    nan = nan[lo : lo + got.size]
    g = got.astype(np.float64)
    return bool(np.array_equal(np.isnan(g), nan) and np.array_equal(g[~nan], ref[~nan]))


def _read_only(comm, dt, n, salt):
    """(array, bytes): this rank's data as ``np.frombuffer`` of a bytes object (read-only), and a
    separate copy of those bytes to prove afterwards that nothing wrote into them."""
    rng = np.random.default_rng(7 * comm.rank + salt)
    raw = rng.integers(-50, 50, n).astype(dt).tobytes()
    return np.frombuffer(raw, dt), bytes(bytearray(raw))


def _unchanged(arr, saved) -> bool:
    return not arr.flags.writeable and arr.tobytes() == saved


def readonly_send(comm, rec, psk):
    """A send-only input may be read-only, as in native MPI: bcast's root buffer,
    allreduce/reduce_scatter/allgather/alltoall ``sendbuf``; the results equal native MPI's, and
    the read-only memory is unchanged afterwards (no copy-in-place into it).  Every suite, both
    bcast trees and allreduce algorithms, one frame and several, a crypto pool."""
    p, dt = comm.size, np.float32
    for suite in ("none", "aes-256-gcm", "chacha20-poly1305", "aes-256-gmac"):
        for alg, chain in (("ring", 0), ("recursive_doubling", 1 << 20)):
            sc = SecureComm(
                comm,
                suite,
                psk=psk,
                algorithm=alg,
                chunk_bytes=CHUNK,
                bcast_chain_bytes=chain,
                crypto_threads=2,
                timeout=20,
            )
            tag = f"{suite} {alg}"
            for n in (7, 3001):
                for root in range(p):
                    mine, saved = _read_only(comm, dt, n, root)
                    buf = mine if comm.rank == root else np.zeros(n, dt)
                    ref = mine.copy() if comm.rank == root else np.zeros(n, dt)
                    label = f"readonly bcast root={root} n={n} {tag}"
                    rec.run(label, lambda: sc.bcast(buf, root=root))
                    comm.Bcast(ref, root=root)
                    ok = np.array_equal(buf, ref) and (comm.rank != root or _unchanged(mine, saved))
                    rec(label, ok)
                x, saved = _read_only(comm, dt, n, 1)
                y, ref = np.zeros(n, dt), np.zeros(n, dt)
                rec.run(f"readonly allreduce n={n} {tag}", lambda: sc.allreduce(x, y))
                comm.Allreduce(x, ref, MPI.SUM)
                rec(f"readonly allreduce n={n} {tag}", np.array_equal(y, ref) and _unchanged(x, saved))
                counts = sc.block_counts(n)
                mine, rs = np.zeros(counts[comm.rank], dt), np.zeros(counts[comm.rank], dt)
                rec.run(f"readonly reduce_scatter n={n} {tag}", lambda: sc.reduce_scatter(x, mine))
                comm.Reduce_scatter(x, rs, counts, MPI.SUM)
                rec(f"readonly reduce_scatter n={n} {tag}", np.array_equal(mine, rs) and _unchanged(x, saved))
                block, bsaved = _read_only(comm, dt, 5 * n, 2)
                out, ref = np.zeros(5 * n * p, dt), np.zeros(5 * n * p, dt)
                rec.run(f"readonly allgather n={5 * n} {tag}", lambda: sc.allgather(block, out))
                comm.Allgather(block, ref)
                ok = np.array_equal(out, ref) and _unchanged(block, bsaved)
                rec(f"readonly allgather n={5 * n} {tag}", ok)
                a2a, asaved = _read_only(comm, dt, n * p, 3)
                got, ref = np.zeros(n * p, dt), np.zeros(n * p, dt)
                rec.run(f"readonly alltoall m={n} {tag}", lambda: sc.alltoall(a2a, got))
                comm.Alltoall(a2a, ref)
                rec(f"readonly alltoall m={n} {tag}", np.array_equal(got, ref) and _unchanged(a2a, asaved))
            sc.close()


def _refusal_cases(p, r, bad):
    """(name, expected exception, call(sc)): rank ``bad`` passes a refused argument, the others a
    correct call of the same collective.  ``r``: this rank."""
    f32, me = np.float32, r == bad
    ro = np.frombuffer(np.ones(8, f32).tobytes(), f32)
    big = 100_000  # 400 KB: the other ranks' sends are rendezvous transfers, not eager ones
    root = (bad + 1) % p
    return [
        (
            "bcast read-only non-root buf",
            ValueError,
            lambda sc: sc.bcast(ro if me else np.ones(8, f32), root),
        ),
        ("bcast root out of range", ValueError, lambda sc: sc.bcast(np.ones(8, f32), p if me else 0)),
        ("bcast buf not an array", TypeError, lambda sc: sc.bcast([1.0] * 8 if me else np.ones(8, f32), 0)),
        (
            "allreduce two dtypes",
            TypeError,
            lambda sc: sc.allreduce(np.ones(8, f32), np.ones(8, np.float64 if me else f32)),
        ),
        (
            "allreduce unknown op",
            ValueError,
            lambda sc: sc.allreduce(np.ones(8, f32), np.ones(8, f32), op="x" if me else "sum"),
        ),
        (
            "allreduce ring, rendezvous sizes",
            ValueError,
            lambda sc: sc.allreduce(np.ones(big, f32), np.ones(big + me, f32)),
        ),
        (
            "reduce_scatter recvbuf size",
            ValueError,
            lambda sc: sc.reduce_scatter(np.ones(4 * p, f32), np.ones(4 + me, f32)),
        ),
        (
            "allgather sendbuf size",
            ValueError,
            lambda sc: sc.allgather(np.ones(4 + me, f32), np.ones(4 * p, f32)),
        ),
        (
            "alltoall not p blocks",
            ValueError,
            lambda sc: sc.alltoall(np.ones(4 * p + me, f32), np.ones(4 * p + me, f32)),
        ),
    ]


def refusal(comm, rec, psk):
    """One rank refuses its own arguments (ValueError/TypeError) while the others may already wait
    on it: it raises its own exception, and every other rank raises PeerAbortError naming it, the
    op and the exception, at once (a timeout of 20 s, checked under 5 s), in that op (its refusal
    record stands in for its argument record); then the SecureComm is unusable on every rank
    (CommClosedError on the refusing one)."""
    p, r = comm.size, comm.rank
    for bad in sorted({0, p - 1}):
        for name, exc, call in _refusal_cases(p, r, bad):
            label = f"refusal by rank {bad}: {name}"
            sc = SecureComm(comm, "aes-256-gcm", psk=psk, timeout=20)
            rec.start(label)
            t0 = time.monotonic()
            first, where = None, None
            for step, fn in (
                (1, call),
                (2, lambda sc: sc.allreduce(np.ones(4, np.float32), np.ones(4, np.float32))),
            ):
                try:
                    fn(sc)
                except Exception as e:  # noqa: BLE001 - what was raised is the case's result
                    if first is None:
                        first, where = e, step
                        continue
                    follow = e
                    break
            else:
                follow = None
            secs = time.monotonic() - t0
            if r == bad:
                ok = type(first) is exc and where == 1 and isinstance(follow, CommClosedError)
            else:
                msg = str(first)
                ok = (
                    isinstance(first, PeerAbortError)
                    and first.peer == bad
                    and f"rank {bad} refused its arguments" in msg
                    and exc.__name__ in msg
                    and where == 1  # in that op: its refusal record takes its argument record's place
                    and f"refused its arguments to {name.split()[0]} #1: {exc.__name__}" in msg
                )
            rec(f"{label}: step {where} {type(first).__name__}: {first} ({secs:.1f} s)", ok and secs < 5)
            sc.close()
            comm.Barrier()


def _calls(comm, n=1000, root=0):
    """name -> (run(sc), check()): one call of each collective on fresh buffers, and whether its
    result equals native MPI's (checked after every rank has run it); ``root``: bcast's."""
    p, r, f32 = comm.size, comm.rank, np.float32
    x = np.arange(n, dtype=f32) + r
    y, blk, out = np.zeros(n, f32), np.zeros(n // p, f32), np.zeros(n // p * p, f32)
    buf = x.copy()
    a2a, got = np.arange(4 * p, dtype=f32) + 10 * r, np.zeros(4 * p, f32)

    def native(fn, *args):
        ref = np.zeros_like(args[-1])
        fn(*args[:-1], ref)
        return ref

    def same(a, b):
        return bool(np.array_equal(a, b))

    return {
        "allreduce": (lambda sc: sc.allreduce(x, y), lambda: same(y, native(comm.Allreduce, x, y))),
        "reduce_scatter": (
            lambda sc: sc.reduce_scatter(x[: n // p * p], blk),
            lambda: same(blk, native(comm.Reduce_scatter_block, x[: n // p * p], blk)),
        ),
        "allgather": (
            lambda sc: sc.allgather(blk + r, out),
            lambda: same(out, native(comm.Allgather, blk + r, out)),
        ),
        "bcast": (lambda sc: sc.bcast(buf, root=root), lambda: same(buf, comm.bcast(x, root=root))),
        "alltoall": (lambda sc: sc.alltoall(a2a, got), lambda: same(got, native(comm.Alltoall, a2a, got))),
    }


def threads(comm, rec, psk):
    """A second thread calling a collective on a SecureComm while a first is inside one gets
    ConcurrentUseError at once, saying what to do; it sends nothing, so the call in progress
    completes with the right result and the SecureComm stays usable.  One SecureComm per thread on
    one MPI communicator, used at once, works."""
    err_cls = getattr(seccomm, "ConcurrentUseError", None)
    pairs = [("allreduce", i) for i in ("allreduce", "reduce_scatter", "allgather", "bcast", "alltoall")]
    pairs += [("bcast", "allreduce"), ("alltoall", "bcast")]
    for busy, intruder in pairs:
        label = f"threads: {intruder} while {busy} runs in another thread"
        rec.start(label)
        sc = SecureComm(comm, "aes-256-gcm", psk=psk, timeout=20, crypto_threads=1)
        # the busy call must wait for the others on rank 0: a bcast rank 0 roots could finish
        # (eager sends) before the intruder is called, which would then run alone
        calls, spare = _calls(comm, root=comm.size - 1), _calls(comm)
        comm.Barrier()
        got, seq = {}, sc.sequence.seq

        def first():
            try:
                calls[busy][0](sc)
            except Exception as e:  # noqa: BLE001 - reported below
                got["first"] = e

        t = threading.Thread(target=first)
        if comm.rank == 0:
            t.start()  # the others join the op 0.5 s later: rank 0's thread waits inside it
            deadline = time.monotonic() + 5
            while sc.sequence.seq == seq and time.monotonic() < deadline:
                time.sleep(0.001)
            t0 = time.monotonic()
            try:
                spare[intruder][0](sc)
            except Exception as e:  # noqa: BLE001 - the case's result
                got["second"] = e
            got["secs"] = time.monotonic() - t0
            t.join()
        else:
            time.sleep(0.5)
            first()
        right = calls[busy][1]()
        second = got.get("second")
        if comm.rank == 0:
            ok = (
                err_cls is not None
                and type(second) is err_cls
                and "one SecureComm per thread" in str(second)
                and got["secs"] < 0.5
            )
        else:
            ok = True
        ok = ok and "first" not in got and right
        check = _calls(comm)["allreduce"]
        try:
            check[0](sc)
            usable = check[1]()
        except Exception:  # noqa: BLE001 - a failed case
            usable = False
        rec(f"{label}: {type(second).__name__}: {second}; first {got.get('first')!r}", ok and usable)
        sc.close()
        comm.Barrier()
    _one_per_thread(comm, rec, psk)


def _one_per_thread(comm, rec, psk):
    """Two threads, each with its own SecureComm on the same MPI communicator, 40 ops each at once."""
    comms = [SecureComm(comm, "aes-256-gcm", psk=psk, timeout=20, crypto_threads=1) for _ in range(2)]
    results = [[], []]

    def work(i, sc):
        for k in range(40):
            c = _calls(comm, 1000 + k)["allreduce" if i == 0 else "allgather"]
            try:
                c[0](sc)
                results[i].append(c)
            except Exception as e:  # noqa: BLE001 - a failed case
                results[i].append(e)

    ts = [threading.Thread(target=work, args=(i, sc)) for i, sc in enumerate(comms)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for i in range(2):  # the native checks, in one order on every rank
        for k, c in enumerate(results[i]):
            ok = not isinstance(c, Exception) and c[1]()
            rec(f"threads: one SecureComm per thread, thread {i} op {k}: {c if not ok else 'ok'}", ok)
    for sc in comms:
        sc.close()


#: (label, collective, bytes, chunk_bytes): sends large enough for MPICH's rendezvous protocol;
#: without receipts the root of this bcast would wait on its held sends and raise TransportTimeout
#: (docs/design.md, "Completion")
COMPLETION = [
    ("bcast 64 MiB, 64 KiB frames", "bcast", 64 << 20, 64 << 10, "aes-256-gcm"),
    # clear frames go from the caller's memory where a later step waits for them, never the op's
    # last sends (the op would wait for them): the root's, and the allgather's of an allreduce
    ("bcast 64 MiB none, 64 KiB frames", "bcast", 64 << 20, 64 << 10, "none"),
    ("allreduce 16 MiB none, 64 KiB frames", "allreduce", 16 << 20, 64 << 10, "none"),
    # more frames per hop than MPICH delivers from a rank that stopped calling MPI (about 64):
    # the receivers' receipts hold every sender in the op until they are in
    ("allgather 16 MiB, 64 KiB frames", "allgather", 16 << 20, 64 << 10, "aes-256-gcm"),
    ("alltoall 16 MiB none, 64 KiB frames", "alltoall", 16 << 20, 64 << 10, "none"),
    ("reduce_scatter 16 MiB, 64 KiB frames", "reduce_scatter", 16 << 20, 64 << 10, "aes-256-gcm"),
]
#: who stops calling MPI after the op: every rank but the root, or the root alone
PAUSERS = {"the others pause": lambda r: r != 0, "rank 0 pauses": lambda r: r == 0}


def completion(comm, rec, psk):
    """A collective that has delivered everything completes on every rank at once, even when the
    others then stop calling MPI for longer than the deadline (a checkpoint write): every rank
    returns with the right result, none raises TransportTimeout, and the next op, once every rank
    is back, runs as usual.  MPICH may hold a rank's last large sends until the receivers call MPI
    again; the receipts let the root return once the receivers have them, instead of blaming the
    receivers after the deadline."""
    p, r = comm.size, comm.rank
    cases = [(f"{c[0]}, {who}", *c[1:], pauses) for c in COMPLETION for who, pauses in PAUSERS.items()]
    for label, name, nbytes, chunk, suite, pauses in cases:
        timeout, pause = 4.0, 5.0  # the others pause longer than the deadline
        sc = SecureComm(comm, suite, psk=psk, timeout=timeout, chunk_bytes=chunk)
        n = nbytes // 4 // p * p
        x = (np.arange(n, dtype=np.float32) % 251) + r
        if name == "bcast":
            buf = x.copy() if r == 0 else np.zeros(n, np.float32)
            call, out = (lambda: sc.bcast(buf, root=0)), buf
            want = np.arange(n, dtype=np.float32) % 251
        elif name == "allreduce":
            out = np.empty_like(x)
            call = lambda: sc.allreduce(x, out)  # noqa: E731
            want = (np.arange(n, dtype=np.float32) % 251) * p + p * (p - 1) / 2
        elif name == "allgather":
            mine = x[: n // p]
            out = np.empty(n // p * p, np.float32)
            call = lambda: sc.allgather(mine, out)  # noqa: E731
            want = np.concatenate([x[: n // p] - r + q for q in range(p)])
        elif name == "alltoall":  # block q of the result: rank q's block r
            out = np.empty_like(x)
            call = lambda: sc.alltoall(x, out)  # noqa: E731
            b = n // p
            want = np.concatenate([x[r * b : (r + 1) * b] - r + q for q in range(p)])
        else:
            out = np.empty(n // p, np.float32)
            call = lambda: sc.reduce_scatter(x, out)  # noqa: E731
            b = n // p
            want = ((np.arange(n, dtype=np.float32) % 251) * p + p * (p - 1) / 2)[r * b : (r + 1) * b]
        comm.Barrier()
        t0 = time.monotonic()
        err = None
        try:
            call()
        except Exception as e:  # noqa: BLE001 - the case's result
            err = e
        secs = time.monotonic() - t0
        if pauses(r):
            time.sleep(pause)  # no MPI call for longer than the deadline
        ok = err is None and bool(np.array_equal(out, want)) and secs < timeout
        got = f"{type(err).__name__}: {err}" if err else "ok"
        rec(f"completion {label} rank {r}: {got} in {secs:.2f} s", ok)
        comm.Barrier()  # everyone back (a rank pausing past the deadline inside an op would be blamed)
        try:  # the next op runs as usual (it waits for the last op's sends first)
            y = np.empty(4, np.float32)
            sc.allreduce(np.ones(4, np.float32), y)
            nxt = bool(np.all(y == p))
        except Exception as e:  # noqa: BLE001 - a failed case
            nxt = False
            rec(f"completion {label} rank {r}: next op: {type(e).__name__}: {e}", False)
        rec(f"completion {label} rank {r}: the next op", nxt)
        sc.close()
        comm.Barrier()


def _disagreement_cases(p, r, bad, n):
    """(name, argument, {rank: value shown}, call(sc)): rank ``bad`` passes another value of one
    argument than the others, to an op of ``n`` float32 elements.  ``r``: this rank."""
    f32, me = np.float32, r == bad
    others = [q for q in range(p) if q != bad]

    def shown(mine, theirs):
        return {q: (mine if q == bad else theirs) for q in range(p)}

    m = n + 1 if me else n  # one element more on the bad rank
    cases = [
        ("allreduce op", "op", shown("max", "sum"), lambda sc: sc.allreduce(
            np.ones(n, f32), np.zeros(n, f32), op="max" if me else "sum")),
        ("allreduce dtype", "dtype", shown("int32", "float32"), lambda sc: sc.allreduce(
            np.ones(n, np.int32 if me else f32), np.zeros(n, np.int32 if me else f32))),
        ("allreduce count", "count", shown(n + 1, n), lambda sc: sc.allreduce(
            np.ones(m, f32), np.zeros(m, f32))),
        ("reduce_scatter op", "op", shown("min", "sum"), lambda sc: sc.reduce_scatter(
            np.ones(n * p, f32), np.zeros(n, f32), op="min" if me else "sum")),
        ("reduce_scatter count", "count", shown(n * p + p, n * p), lambda sc: sc.reduce_scatter(
            np.ones(m * p, f32), np.zeros(m, f32))),
        ("reduce_scatter dtype", "dtype", shown("int32", "float32"), lambda sc: sc.reduce_scatter(
            np.ones(n * p, np.int32 if me else f32), np.zeros(n, np.int32 if me else f32))),
        ("allgather count", "count", shown((n + 1) * p, n * p), lambda sc: sc.allgather(
            np.ones(m, f32), np.zeros(m * p, f32))),
        ("allgather dtype", "dtype", shown("int32", "float32"), lambda sc: sc.allgather(
            np.ones(n, np.int32 if me else f32), np.zeros(n * p, np.int32 if me else f32))),
        ("alltoall count", "count", shown((n + 1) * p, n * p), lambda sc: sc.alltoall(
            np.ones(m * p, f32), np.zeros(m * p, f32))),
        ("alltoall dtype", "dtype", shown("int32", "float32"), lambda sc: sc.alltoall(
            np.ones(n * p, np.int32 if me else f32), np.zeros(n * p, np.int32 if me else f32))),
        ("bcast root", "root", shown(bad, others[0]), lambda sc: sc.bcast(
            np.full(n, float(r), f32), root=bad if me else others[0])),
        ("bcast count", "count", shown(n + 1, n), lambda sc: sc.bcast(np.full(m, float(r), f32), root=0)),
        ("bcast dtype", "dtype", shown("int32", "float32"), lambda sc: sc.bcast(
            np.full(n, r, np.int32 if me else f32), root=0)),
        ("collective", "collective", shown("bcast", "allreduce"), lambda sc: sc.bcast(
            np.ones(n, f32), root=0) if me else sc.allreduce(np.ones(n, f32), np.zeros(n, f32))),
    ]  # fmt: skip
    return cases


def _tuned(sc, bad, r):
    """The bad rank changed its tuning after construction: another algorithm for the same call."""
    if r == bad:
        sc.algorithm = "ring"
    return sc.allreduce(np.ones(16, np.float32), np.zeros(16, np.float32))


def agreement(comm, rec, psk):
    """One rank passes another root, op, dtype, count, collective or algorithm than the others, to
    each collective, at 64 B (one eager frame) and at 256 KiB (rendezvous transfers, the chain
    bcast, several frames per hop): every rank raises ArgumentMismatchError in that op, at once (a
    timeout of 20 s, checked under 5 s), with the same message naming the argument and which rank
    passed what; the SecureComm is then unusable."""
    p, r = comm.size, comm.rank
    bad = p - 1
    for n in (16, 65536):
        cases = _disagreement_cases(p, r, bad, n)
        cases.append(("allreduce algorithm", "algorithm", None, lambda sc: _tuned(sc, bad, r)))
        for name, arg, values, call in cases:
            if n > 16 and arg == "algorithm":
                continue
            label = f"agreement n={n}: {name}"
            sc = SecureComm(comm, "aes-256-gcm", psk=psk, timeout=20, chunk_bytes=64 << 10)
            rec.start(label)
            t0 = time.monotonic()
            try:
                call(sc)
                got = None
            except Exception as e:  # noqa: BLE001 - what was raised is the case's result
                got = e
            secs = time.monotonic() - t0
            msgs = comm.allgather(str(got))
            try:
                sc.allreduce(np.ones(4, np.float32), np.zeros(4, np.float32))
                after = None
            except Exception as e:  # noqa: BLE001
                after = e
            ok = (
                isinstance(got, seccomm.ArgumentMismatchError)
                and len({m.split(": ", 1)[1] for m in msgs}) == 1  # (after each rank's op label)
                and list(got.arguments) == [arg]
                and (values is None or got.arguments[arg] == values)
                and isinstance(after, CommClosedError)
            )
            rec(f"{label}: {type(got).__name__}: {got} ({secs:.1f} s)", ok and secs < 5)
            sc.close()
            comm.Barrier()
