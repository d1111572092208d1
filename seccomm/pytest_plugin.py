"""pytest-benchmark plugin for secure collectives (entry point ``pytest11: seccomm``).

Fixtures:

- ``secure_comm(suite, **kw)``: a cached :class:`~seccomm.comm.SecureComm` on ``COMM_WORLD``.
- ``collective_bench(collective, suite, nbytes, dtype="float32", op="sum")``: times one secure
  collective with ``benchmark.pedantic`` (warm-up rounds, a barrier before each round and after the
  call, so a round lasts until the slowest rank is done: the time is the max over ranks), measures
  native MPI the same way in rounds that alternate with the secure ones, and records
  ``extra_info``: suite, collective, bytes, ranks, dtype, algbw/busbw [GB/s] (nccl-tests
  factors) and overhead vs native [x].

Under ``mpiexec -n K python -m pytest ...`` every rank runs the same rounds; only rank 0 keeps
timings, prints and writes ``--benchmark-json``/``--benchmark-save`` (ranks > 0 run silently; set
``SECCOMM_BENCH_ALL_RANKS=1`` to see them).  Options: ``--seccomm-sizes`` (e.g. ``4K,1M,64M``),
``--seccomm-suites``, ``--seccomm-rounds``, ``--seccomm-warmup``; suites in ``benchmarks/`` read
them through ``pytest_generate_tests``.  Nothing here imports mpi4py until a fixture is used.
The fixtures use the ranks' job secret (:mod:`seccomm.bench.secret`): with none on any rank the
session stops with exit status 2, unless every rank opts in to a clear-text benchmark secret
with ``SECCOMM_INSECURE_BENCH_SECRET=1``.  Bad option values stop the session before any test
(``pytest.UsageError``, exit status 4).

Regression gate (:mod:`seccomm.bench.gate`): ``--seccomm-gate=BASELINE.json`` compares every
``collective_bench`` group's time relative to native MPI (median over rounds of each secure round
against the native round before it) with the baseline's (a ``--benchmark-json`` file of an earlier
run) and fails the session (exit status 1, rank 0) when the median growth of a suite's groups or
of a collective's groups is more than ``--seccomm-gate-tolerance`` (default 40%); when native
MPI's own times in a family's groups moved by more than 30 %, the verdict is INCONCLUSIVE (other
load on the machine, which can hide a regression as well as fake one; exit status 1: rerun).
When no group of the run is in the baseline (another benchmark, other sizes or suites), the gate
says NOTHING COMPARED and fails the session (exit status 1): it showed nothing.
"""

from __future__ import annotations

import os
import time

import pytest

from .suites import SUITES

_RANK_VARS = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID")


def launcher_rank() -> int:
    """This process's rank as the launcher told it (0 when not under a launcher)."""
    for v in _RANK_VARS:
        if v in os.environ:
            try:
                return int(os.environ[v])
            except ValueError:
                pass
    return 0


def pytest_addoption(parser):
    g = parser.getgroup("seccomm", "seccomm secure-collective benchmarks")
    g.addoption("--seccomm-sizes", default="4K,1M,16M", help="sizes S in bytes (K/M/G suffixes)")
    g.addoption(
        "--seccomm-suites", default=",".join(SUITES), help="comma list (default: every registered suite)"
    )
    g.addoption("--seccomm-rounds", type=int, default=20, help="timed rounds per benchmark (>= 1)")
    g.addoption("--seccomm-warmup", type=int, default=3, help="warm-up rounds per benchmark (>= 0)")
    g.addoption(
        "--seccomm-gate",
        metavar="BASELINE.json",
        help="fail when a group's time relative to native MPI grew past the tolerance vs this baseline",
    )
    g.addoption(
        "--seccomm-gate-tolerance",
        default="40%",
        help="allowed median growth of that ratio per suite and per collective (default 40%%)",
    )


def check_options(config) -> None:
    """Every seccomm option's value, before any test; ``pytest.UsageError`` naming the first bad one."""
    from .bench import gate

    try:
        sizes_option(config)
        suites_option(config)
    except ValueError as e:
        raise pytest.UsageError(str(e)) from None
    try:
        gate.parse_tolerance(config.getoption("--seccomm-gate-tolerance"))
    except ValueError as e:
        raise pytest.UsageError(f"--seccomm-gate-tolerance: {e}") from None
    if config.getoption("--seccomm-rounds") < 1 or config.getoption("--seccomm-warmup") < 0:
        raise pytest.UsageError("--seccomm-rounds must be >= 1 and --seccomm-warmup >= 0")
    base = config.getoption("--seccomm-gate")
    if base:
        try:
            gate.load(base)
        except ValueError as e:
            raise pytest.UsageError(f"--seccomm-gate {e}") from None


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    check_options(config)
    config.stash[_GATE_ROWS] = []
    if launcher_rank() != 0 and not os.environ.get("SECCOMM_BENCH_ALL_RANKS"):
        reporter = config.pluginmanager.getplugin("terminalreporter")
        if reporter is not None:  # ranks > 0 print nothing; their exit status still counts
            config.pluginmanager.unregister(reporter)
        opt = config.option
        for name, value in (
            ("benchmark_json", None),
            ("benchmark_save", None),
            ("benchmark_autosave", False),
            ("benchmark_compare", None),
            ("benchmark_compare_fail", None),
            ("benchmark_histogram", None),
        ):
            if hasattr(opt, name):
                setattr(opt, name, value)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)


def sizes_option(config) -> list[int]:
    """``--seccomm-sizes`` in bytes; ``ValueError`` on a bad size or one below 1 byte."""
    from .units import parse_size

    sizes = [parse_size(s) for s in config.getoption("--seccomm-sizes").split(",") if s.strip()]
    if not sizes or min(sizes) < 1:
        raise ValueError(
            f"--seccomm-sizes must list sizes >= 1 byte, got {config.getoption('--seccomm-sizes')!r}"
        )
    return sizes


def suites_option(config) -> list[str]:
    """``--seccomm-suites`` as names; ``ValueError`` naming an unknown one and the allowed."""
    names = [s.strip() for s in config.getoption("--seccomm-suites").split(",") if s.strip()]
    bad = [n for n in names if n not in SUITES]
    if bad or not names:
        raise ValueError(
            f"--seccomm-suites: unknown suite {','.join(bad) or '(none given)'}; allowed: {', '.join(SUITES)}"
        )
    return names


_GATE_ROWS = pytest.StashKey[list]()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    """The regression gate (rank 0): compare this run's groups with ``--seccomm-gate``'s."""
    from .bench import gate

    config = session.config
    base_path = config.getoption("--seccomm-gate")
    rows = config.stash.get(_GATE_ROWS, [])
    if not base_path or launcher_rank() != 0:
        return
    tol = gate.parse_tolerance(config.getoption("--seccomm-gate-tolerance"))
    base, now = gate.load(base_path), gate.points({"benchmarks": [{"extra_info": r} for r in rows]})
    status, config.stash[_GATE_LINES] = gate.report(
        gate.compare(base, now), tol, len(now.keys() - base.keys())
    )
    if status != "OK" and session.exitstatus == 0:
        session.exitstatus = 1


_GATE_LINES = pytest.StashKey[list]()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for line in config.stash.get(_GATE_LINES, []):
        terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def seccomm_world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def _uncaptured(config):
    """A context in which standard error reaches the terminal (the warning of a clear-text
    secret must not sit in a test's captured output)."""
    import contextlib

    capman = config.pluginmanager.getplugin("capturemanager") if config is not None else None
    return capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()


@pytest.fixture(scope="session")
def secure_comm(seccomm_world, request):
    """Return ``get(suite="aes-256-gcm", **kw)``: a :class:`~seccomm.comm.SecureComm` on
    ``COMM_WORLD`` for that suite and those keyword arguments (any of ``SecureComm``'s but
    ``psk``), built on first use and kept for the pytest session (one per distinct ``(suite,
    kw)``), closed at its end.  Session-scoped; every rank must ask for the same ones in the same
    order (building one is collective).  The job secret is the ranks' (``SECCOMM_PSK_FILE`` or
    ``SECCOMM_PSK``); with none on any rank the session stops with exit status 2 unless every
    rank sets ``SECCOMM_INSECURE_BENCH_SECRET=1``.

    ``identity="x509"`` uses each rank's ``SECCOMM_CERT_FILE``, ``SECCOMM_KEY_FILE`` and
    ``SECCOMM_CA_FILE``; where no rank sets any of them and every rank runs on one host, rank 0
    makes a throw-away CA and one certificate per rank in a private folder (0700; in
    ``/dev/shm`` unless ``$TMPDIR`` is set), says so in one line, and removes it when pytest
    ends (:func:`throwaway_identities`).  Set on some ranks only, or no files with ranks on
    several hosts: the session stops with exit status 2 and says what to set."""
    from .bench.secret import PLUGIN_NO_SECRET, BenchSecretError, bench_secret
    from .comm import SecureComm

    try:
        with _uncaptured(request.config):
            secret = bench_secret(seccomm_world, PLUGIN_NO_SECRET)[0]
    except BenchSecretError as e:  # every rank stops; the rank that knows why says it
        pytest.exit(f"seccomm: {e}" if e.speaker else "seccomm: no usable job secret", returncode=2)
    cache, pki = {}, []

    def get(suite="aes-256-gcm", **kw):
        key = (suite, tuple(sorted(kw.items())))
        if key not in cache:
            made = dict(kw)
            if kw.get("identity") == "x509":
                if not pki:  # (collective: every rank asks for the same comms in the same order)
                    pki.append(throwaway_identities(seccomm_world, request.config))
                made["identity"] = pki[0][0] or "x509"
            cache[key] = SecureComm(seccomm_world, suite, psk=secret, **made)
        return cache[key]

    yield get
    for sc in cache.values():
        sc.close()
    if pki and pki[0][1]:
        import shutil

        shutil.rmtree(pki[0][1], ignore_errors=True)


def throwaway_identities(comm, config=None):
    """Collective over ``comm``: ``(IdentityFiles, folder)`` of this rank, a throw-away CA and
    one certificate per rank that rank 0 made in ``folder`` (which rank 0 removes; ``None`` on
    the other ranks), when no rank sets ``SECCOMM_CERT_FILE``, ``SECCOMM_KEY_FILE`` or
    ``SECCOMM_CA_FILE``; ``(None, None)`` when every rank sets all three (the ranks' own files).
    Only paths cross between ranks: each rank reads its private key from the folder, which
    needs every rank on one host.  Stops the pytest session (exit status 2, said on rank 0) when
    the files are set on some ranks only, or none are set and the ranks run on several hosts."""
    import socket
    import sys

    from .bench.secret import identity_missing
    from .identity import CA_VAR, CERT_VAR, KEY_VAR, IdentityFiles

    missing = identity_missing(comm, "identity='x509'", "or on no rank (a throw-away CA is made)")
    none_set = comm.allgather(not any(os.environ.get(v) for v in (CERT_VAR, KEY_VAR, CA_VAR)))
    rank = comm.Get_rank()
    if missing is None:
        return None, None
    if not all(none_set):
        pytest.exit(f"seccomm: {missing}", returncode=2)
    hosts = comm.allgather(socket.gethostname())
    if len(set(hosts)) > 1:
        pytest.exit(
            f"seccomm: identity='x509' with no SECCOMM_CERT_FILE, SECCOMM_KEY_FILE, SECCOMM_CA_FILE "
            f"on any rank: a throw-away CA needs every rank on one host, these ranks run on "
            f"{len(set(hosts))}; make a CA and one certificate per host (seccomm identity --out DIR "
            f"HOST...) and set the three on every rank",
            returncode=2,
        )
    made = None
    if rank == 0:  # (the launcher's throw-away CA, as seccomm bench makes one: on this host)
        from .launch import identity_envs

        try:
            envs, folder = identity_envs(comm.Get_size())
            made = (folder, [(e[CERT_VAR], e[KEY_VAR], e[CA_VAR]) for e in envs])
        except Exception as e:  # (said on every rank below)
            made = f"could not make a throw-away CA: {type(e).__name__}: {e}"
    made = comm.bcast(made, root=0)
    if isinstance(made, str):
        pytest.exit(f"seccomm: {made}", returncode=2)
    folder, files = made
    if rank == 0:
        with _uncaptured(config):
            sys.stderr.write(
                f"seccomm: identity x509: a throw-away CA and one certificate per rank in {folder} "
                f"(no SECCOMM_CERT_FILE on any rank), removed when pytest ends\n"
            )
            sys.stderr.flush()
    return IdentityFiles(*files[rank]), folder if rank == 0 else None


class _NativeRounds:
    """pytest-benchmark's per-round ``setup``: one native call, timed between barriers, before
    each secure round, so that native and secure rounds alternate under the same machine load."""

    def __init__(self, comm, rec, send, recv, op):
        self.comm, self.call, self.times = comm, lambda: rec.native(comm, send, recv, op, 0), []

    def __call__(self):
        self.comm.Barrier()
        t0 = time.perf_counter()
        self.call()
        self.comm.Barrier()
        self.times.append(time.perf_counter() - t0)


def _checked_once(comm, coll, sc, send, recv, op, suite, nbytes, benchmark) -> dict:
    """Under ``--benchmark-disable``: one native and one secure call, the secure result checked
    against native MPI's on every rank (``AssertionError`` naming the differing elements); no
    times, so the returned ``extra_info`` has none (``timed`` is False)."""
    import numpy as np
    from mpi4py import MPI

    rank = comm.Get_rank()
    ref = np.zeros_like(recv)
    coll.reset(send, ref, rank, 0)
    coll.native(comm, send, ref, op, 0)
    coll.reset(send, recv, rank, 0)
    benchmark.pedantic(coll.secure, (sc, send, recv, op, 0))  # (disabled: runs it once, untimed)
    wrong = comm.allreduce(int(coll.wrong(recv, ref)), MPI.SUM)
    assert wrong == 0, f"{coll.name} under {suite}: {wrong} element(s) differ from native MPI's result"
    info = {"suite": suite, "collective": coll.name, "bytes": nbytes, "size_bytes": nbytes, "wrong": 0}
    info["timed"] = False
    benchmark.extra_info.update(info)
    return benchmark.extra_info


@pytest.fixture
def collective_bench(benchmark, secure_comm, seccomm_world, request):
    """Return ``run(collective, suite, nbytes, dtype="float32", op="sum", **SecureComm kw)``;
    it records the bench row (:func:`seccomm.bench.rows.result_row`) in ``extra_info``, with
    ``suite``, ``bytes`` (= ``size_bytes``), ``native_median_us`` and ``native_min_us`` besides.
    Under pytest-benchmark's ``--benchmark-disable`` it runs each call once, checks its result
    against native MPI's, and records no times (``extra_info["timed"]`` is False)."""
    import numpy as np

    from .bench.rows import result_row
    from .collectives import get_collective
    from .dtypes import resolve_dtype

    rounds = request.config.getoption("--seccomm-rounds")
    warmup = request.config.getoption("--seccomm-warmup")
    comm = seccomm_world

    def run(collective, suite, nbytes, dtype="float32", op="sum", **kw):
        coll = get_collective(collective)
        dt = resolve_dtype(dtype)
        size, rank = comm.Get_size(), comm.Get_rank()
        n = coll.counts(nbytes // dt.itemsize, size, rank)
        send = coll.init(dt.name, op, n.send, rank, size, 0)
        recv = np.zeros(n.recv, dt)
        coll.reset(send, recv, rank, 0)
        sc = secure_comm(suite, **kw)
        native = _NativeRounds(comm, coll, send, recv, op)

        def once():
            coll.secure(sc, send, recv, op, 0)
            comm.Barrier()

        if getattr(benchmark, "disabled", False):
            return _checked_once(comm, coll, sc, send, recv, op, suite, n.total * dt.itemsize, benchmark)
        benchmark.pedantic(once, setup=native, rounds=rounds, warmup_rounds=warmup, iterations=1)
        times = benchmark.stats.stats.data if benchmark.stats else [float("nan")]
        nat = np.array(native.times[-len(times) :])  # the rounds paired with the secure ones
        native_t = float(np.median(nat))
        row = result_row(coll, suite, n.total, dt.name, size, times, native_t, op=op, root=0)
        extra = {"suite": suite, "bytes": row["size_bytes"], "native_median_us": native_t * 1e6}
        paired = float(np.median(np.asarray(times) / nat))  # each round against the native one before it
        benchmark.extra_info.update(
            {**row, **extra, "native_min_us": nat.min() * 1e6, "paired_ratio_median": paired}
        )
        request.config.stash[_GATE_ROWS].append(dict(benchmark.extra_info))
        return benchmark.extra_info

    return run
