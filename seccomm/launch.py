"""Start local ranks with the ``mpiexec`` of the ``mpich`` wheel, or use the launcher's ranks.

Run plainly, ``seccomm bench`` (``train``, ``attack``, ``report``) re-executes itself as
``mpiexec -n N python -m seccomm CMD ...`` (:func:`relaunch`).  The ranks use the job secret the
user set (``SECCOMM_PSK_FILE`` or ``SECCOMM_PSK``, checked here first: a secret that is set but
unusable is an error, never replaced); with none set, a fresh one in a 0600 file (in ``$TMPDIR``
if set, else in ``/dev/shm`` where there is one: memory, not disk), removed when the run ends,
also on Ctrl-C, SIGTERM and SIGHUP, which stop every rank (SIGKILL cannot be caught: the file
then stays).  Run under ``mpiexec``/``mpirun``/``srun``/``torchrun``, a command uses the ranks
it was given: this is how it scales past one machine.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .errors import KeyScheduleError
from .keys import load_secret, new_secret_file

#: environment variables that MPI launchers (and torchrun) set in every rank they start
LAUNCHER_VARS = (
    "PMI_RANK",
    "PMI_SIZE",
    "PMIX_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "MV2_COMM_WORLD_SIZE",
    "SLURM_STEP_NUM_TASKS",
    "MPI_LOCALNRANKS",
    "HYDI_CONTROL_FD",
    "TORCHELASTIC_RUN_ID",
)
_RANK_SIZE = (
    ("RANK", "WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("PMIX_RANK", "PMIX_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("SLURM_PROCID", "SLURM_NTASKS"),
)
#: set (``1``) in the ranks :func:`relaunch` starts when it wrote their job secret itself
FRESH_SECRET_ENV = "SECCOMM_FRESH_SECRET"
#: what the ranks' header says about a secret :func:`relaunch` made
FRESH_SOURCE = "a fresh secret made for this run (0600 file, removed when the run ends)"
#: set (``1``) for ranks whose identity files the command that started them made (a throw-away CA)
FRESH_IDENTITY_ENV = "SECCOMM_FRESH_IDENTITY"
FRESH_IDENTITY_SOURCE = (
    "a throw-away CA and one certificate per rank, made for this run in a private folder (keys "
    "0600), removed when the run ends"
)


class LaunchError(Exception):
    """The local ranks cannot be started: no ``mpiexec``, or the job secret set is unusable."""


def rank_and_size() -> tuple[int, int]:
    """(rank, world size) from the launcher's environment (torchrun, MPI, Slurm); (0, 1) if none."""
    for r, n in _RANK_SIZE:
        if r in os.environ and n in os.environ:
            return int(os.environ[r]), int(os.environ[n])
    return 0, 1


def launcher() -> str | None:
    """Who started this process: ``"torchrun"``, ``"mpi"`` (an MPI launcher, or :func:`relaunch`),
    or None when run plainly."""
    if "TORCHELASTIC_RUN_ID" in os.environ:
        return "torchrun"
    if os.environ.get("SECCOMM_LAUNCHED") or any(v in os.environ for v in LAUNCHER_VARS):
        return "mpi"
    return None


def under_launcher() -> bool:
    """True when this process is a rank started by an MPI launcher, torchrun, or us."""
    return launcher() is not None


def started_by_us() -> bool:
    """True in a rank that :func:`relaunch` started (its parent speaks for it)."""
    return os.environ.get("SECCOMM_LAUNCHED") == "1"


#: the code each started process runs first: put the starting process's package folder first on
#: ``sys.path`` and drop the current directory (``-c`` puts it there), then run the module
_BOOT = (
    "import os, runpy, sys; top = sys.argv.pop(1); mod = sys.argv.pop(1); "
    "sys.path[:] = [top] + [p for p in sys.path if p not in ('', '.', os.getcwd(), top)]; "
    "sys.argv[0] = mod; runpy.run_module(mod, run_name='__main__', alter_sys=True)"
)


def python_argv(module: str = "seccomm", *args: str) -> list[str]:
    """``[sys.executable, ..., *args]`` running ``python -m MODULE ARGS`` on exactly this process's
    seccomm, whatever the current directory: a folder named ``seccomm`` there (the parent of a
    clone) must not replace it.  The folder this ``seccomm`` was imported from comes first on
    ``sys.path``, the current directory is not on it (:data:`_BOOT`)."""
    top = str(Path(__file__).resolve().parent.parent)
    return [sys.executable, "-c", _BOOT, top, module, *args]


#: set by :func:`relaunch` in the ranks it starts: the cores the starting command could use
CORES_ENV = "SECCOMM_LOCAL_CORES"


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity (``os.sched_getaffinity``), else
    ``os.cpu_count()``."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - platforms without affinity (macOS)
        return os.cpu_count() or 1


def node_cores() -> int:
    """Cores of this node for its ranks: what the command that started them could use
    (:data:`CORES_ENV`), else ``os.cpu_count()`` (a launcher may bind each rank to one core, so
    a rank's own affinity says nothing about the node)."""
    return int(os.environ.get(CORES_ENV) or os.cpu_count() or 1)


def oversubscription(nranks: int, cores: int) -> str | None:
    """``"N ranks on C core(s)"`` when ``nranks`` ranks of one node exceed its ``cores``, else None."""
    return f"{nranks} ranks on {cores} core(s)" if nranks > cores else None


def find_mpiexec() -> str | None:
    """The ``mpiexec`` beside this interpreter (installed by the ``mpich`` wheel), else PATH."""
    here = Path(sys.executable).with_name("mpiexec")
    if here.exists():
        return str(here)
    return shutil.which("mpiexec")


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago (for torch.distributed rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def mpi_rendezvous() -> tuple[str, int]:
    """Under an MPI launcher: set ``MASTER_ADDR``/``MASTER_PORT`` for torch.distributed from MPI
    (collective over ``COMM_WORLD``): 127.0.0.1 when every rank is on one host, else rank 0's host
    name; a port free on rank 0.  Values already set are kept.  Returns (address, port)."""
    import socket

    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    local = len(set(comm.allgather(socket.gethostname()))) == 1
    mine = (("127.0.0.1" if local else socket.gethostname()), free_port("127.0.0.1" if local else ""))
    addr, port = comm.bcast(mine if comm.Get_rank() == 0 else None, root=0)
    os.environ.setdefault("MASTER_ADDR", addr)
    os.environ.setdefault("MASTER_PORT", str(port))
    return os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])


def secret_env() -> tuple[dict, str | None]:
    """(environment for the ranks, path of a secret file made here or None).  The user's secret
    when one is set (checked: ``LaunchError`` with the library's message when unusable), else a
    fresh one in a 0600 file: in ``$TMPDIR`` when set, else in ``/dev/shm`` (memory) where it is
    a writable folder, else in the system's temporary folder."""
    if os.environ.get("SECCOMM_PSK_FILE") or os.environ.get("SECCOMM_PSK"):
        try:
            load_secret()
        except KeyScheduleError as e:
            raise LaunchError(str(e)) from None
        return {}, None
    path = fresh_secret_file()
    return {"SECCOMM_PSK_FILE": path, FRESH_SECRET_ENV: "1"}, path


def identity_envs(nranks: int) -> tuple[list | None, str | None]:
    """(per-rank environments, folder made here or None) for ranks of ``identity="x509"``: none
    when the user set any of ``SECCOMM_CERT_FILE``, ``SECCOMM_KEY_FILE``, ``SECCOMM_CA_FILE``
    (theirs are used, and checked by each rank), else a throw-away CA and one certificate per rank
    naming this host (:func:`~seccomm.identity.make_test_identities`, valid for a day) in a new
    private folder (0700; in memory where :func:`fresh_secret_file` would put a secret), which
    the caller removes."""
    import socket
    import tempfile

    from .identity import CA_VAR, CERT_VAR, KEY_VAR, make_test_identities

    if any(os.environ.get(v) for v in (CERT_VAR, KEY_VAR, CA_VAR)):
        return None, None
    folder = tempfile.mkdtemp(prefix="seccomm-pki-", dir=_private_dir())
    try:
        pki = make_test_identities(folder, [socket.gethostname()] * nranks)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    ca = str(pki.ca_file)
    envs = [
        {CERT_VAR: str(c), KEY_VAR: str(k), CA_VAR: ca, FRESH_IDENTITY_ENV: "1"}
        for c, k in zip(pki.cert_files, pki.key_files)
    ]
    return envs, folder


def mpmd(mpiexec: str, nranks: int, argv: list, per_rank: list | None = None) -> list:
    """The ``mpiexec`` line running ``argv`` on ``nranks`` ranks; with ``per_rank`` (one dict per
    rank), one segment per rank with its own environment variables (Hydra's ``-env``)."""
    if not per_rank:
        return [mpiexec, "-n", str(nranks), *argv]
    cmd = [mpiexec]
    for r, env in enumerate(per_rank):
        cmd += [":"] if r else []
        cmd += ["-n", "1", *(x for k, v in env.items() for x in ("-env", k, v)), *argv]
    return cmd


def fresh_secret_file() -> str:
    """A fresh secret in a new 0600 file (:func:`~seccomm.keys.new_secret_file`): in ``$TMPDIR``
    when set, else in ``/dev/shm`` (memory) where it is a writable folder, else in the system's
    temporary folder.  The caller removes it (see :func:`stop_on_signals`)."""
    return new_secret_file(_private_dir())


def _private_dir() -> str | None:
    """Where a run's secret and throw-away keys go: ``/dev/shm`` (memory) where it is a writable
    folder and ``$TMPDIR`` is not set, else None (the system's temporary folder)."""
    shm = "/dev/shm"
    in_memory = not os.environ.get("TMPDIR") and os.path.isdir(shm) and os.access(shm, os.W_OK | os.X_OK)
    return shm if in_memory else None


class _Stopped(Exception):
    """SIGTERM or SIGHUP (``signum``) arrived: raised so that ``finally`` clauses clean up."""

    def __init__(self, signum: int):
        self.signum = signum


Stopped = _Stopped


def _raise_stopped(signum, frame):
    # Once: a second signal (GNU timeout signals the command, then its process group) must not
    # interrupt the cleanup of the first with a second, chained traceback.
    for s in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)
    raise _Stopped(signum)


@contextlib.contextmanager
def stop_on_signals():
    """In the block, SIGTERM and SIGHUP raise :class:`Stopped` (once; later ones stay ignored:
    the command is ending), as Ctrl-C raises ``KeyboardInterrupt``, so that its ``finally``
    clauses remove what it made; the old handlers after a block that was not stopped."""
    old = {s: signal.signal(s, _raise_stopped) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    except _Stopped:
        old.clear()
        raise
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class _Pump(threading.Thread):
    """Copies one output pipe of ``mpiexec`` to ours until it closes, or drops it once ``mute``."""

    def __init__(self, pipe, out):
        super().__init__(daemon=True)
        self.pipe, self.out, self.mute = pipe, out, False

    def run(self):
        fd = self.pipe.fileno()
        while data := os.read(fd, 1 << 16):
            if not self.mute:
                try:
                    out = getattr(self.out, "buffer", None)
                    out.write(data) if out is not None else self.out.write(data.decode(errors="replace"))
                    self.out.flush()
                except (OSError, ValueError):
                    self.mute = True


def _stop(proc, pumps, sig) -> None:
    """Mute the ranks' output, send ``sig`` to ``mpiexec`` (which passes it to every rank) and wait
    for it; SIGTERM after 10 s, SIGKILL after 5 more."""
    for p in pumps:
        p.mute = True
    for s, wait in ((sig, 10), (signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        if proc.poll() is not None:
            break
        proc.send_signal(s)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            pass


#: where MPICH keeps the shared memory of a node's ranks (a file each, unlinked by MPI_Finalize)
SHM_DIR, SHM_GLOB = Path("/dev/shm"), "mpich_shm_*"


def _shm_files() -> set:
    try:
        return set(SHM_DIR.glob(SHM_GLOB))
    except OSError:
        return set()


def _mapped_by(proc: Path) -> set:
    """The files process ``proc`` (a /proc entry) maps (its ``maps``; empty where unreadable)."""
    with contextlib.suppress(OSError), open(proc / "maps") as maps:
        return {f[5].strip() for f in (line.split(maxsplit=5) for line in maps) if len(f) == 6}
    return set()


def _mapped() -> set:
    """Every file some process of this machine maps or holds open (that this process can see)."""
    seen = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        seen |= _mapped_by(proc)
        with contextlib.suppress(OSError):
            seen.update(os.readlink(fd) for fd in (proc / "fd").iterdir())
    return seen


def drop_orphan_shm(before: set, settle: float = 2.0) -> list:
    """Ranks stopped by a signal never reach ``MPI_Finalize``, which unlinks MPICH's shared-memory
    file: remove each such file that appeared since ``before`` (:func:`_shm_files` at the
    launch), is this user's, and no process maps or holds open any more.  A killed rank lets go
    of its mapping only once it has exited, which may be a moment after its launcher returned
    (more so on a loaded machine): a file still mapped is looked at again every 0.1 s for up to
    ``settle`` seconds, and left alone if it is mapped still (a job of someone else's that
    started meanwhile).  Returns the paths removed."""
    pending = []
    for f in sorted(_shm_files() - before):
        with contextlib.suppress(OSError):
            if f.stat().st_uid == os.getuid():
                pending.append(f)
    gone, deadline = [], time.monotonic() + settle
    while pending:
        mapped, still = _mapped(), []
        for f in pending:
            if str(f) in mapped:
                still.append(f)
                continue
            with contextlib.suppress(OSError):
                f.unlink()
                gone.append(f)
        if not still or time.monotonic() >= deadline:
            break
        pending = still
        time.sleep(0.1)
    return gone


def drop_own_shm(shm_dir: Path = SHM_DIR) -> list:
    """Unlink MPICH's shared-memory files (in ``shm_dir``) that this process maps
    (``/proc/self/maps``), for a rank that leaves without ``MPI_Finalize`` (Ctrl-C under the
    user's ``mpiexec``, whose ranks then leave the files in /dev/shm: 2 MB each, measured).
    The job's other ranks keep their mappings (the memory stays until they exit); only the names
    go, and every local rank of the job maps the same files, so any of them may do it.  Returns
    the paths removed."""
    gone = []
    for name in sorted(_mapped_by(Path("/proc/self"))):
        f = Path(name)
        if f.parent == shm_dir and f.match(SHM_GLOB):
            with contextlib.suppress(OSError):  # (another rank of the job may have been first)
                f.unlink()
                gone.append(f)
    return gone


def relaunch(
    nranks: int, argv: list[str], extra_env: dict | None = None, prog: str = "seccomm", identity: str = "psk"
) -> int:
    """Run ``python -m seccomm ARGV`` on ``nranks`` local ranks (:func:`python_argv`: this
    process's seccomm, whatever the current directory) and return their exit status.
    ``identity="x509"``: each rank gets its identity files (:func:`identity_envs`: the user's, or
    a throw-away CA's, removed at the end).
    Ctrl-C, SIGTERM and SIGHUP stop every rank: one line on standard error (``prog``: interrupted),
    exit status 128 + the signal; these signals then stay ignored (the caller is ending); MPICH's
    shared-memory files the stopped ranks leave are removed (:func:`drop_orphan_shm`), as they
    are after a run that failed (exit status not 0).
    ``LaunchError`` when no ``mpiexec`` is found or the job secret set is unusable (before
    anything starts)."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise LaunchError(
            "no mpiexec found: install the MPI wheel (pip install mpich) or "
            "start the ranks with your own launcher (mpiexec/srun)"
        )
    env_secret, secret = secret_env()
    env = {**os.environ, **env_secret, "SECCOMM_LAUNCHED": "1", "PYTHONUNBUFFERED": "1", **(extra_env or {})}
    env[CORES_ENV] = str(usable_cores())
    if sys.stderr.isatty():  # ranks see a pipe: tell them a person is watching
        env["SECCOMM_PROGRESS"] = "1"
    per_rank, pki = identity_envs(nranks) if identity == "x509" else (None, None)
    cmd = mpmd(mpiexec, nranks, python_argv("seccomm", *argv), per_rank)
    old = {s: signal.signal(s, _raise_stopped) for s in (signal.SIGTERM, signal.SIGHUP)}
    proc = pumps = None
    shm = _shm_files()
    try:
        proc = subprocess.Popen(
            cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            start_new_session=True,  # Ctrl-C reaches us only: we pass it on once
        )  # fmt: skip
        pumps = [_Pump(proc.stdout, sys.stdout), _Pump(proc.stderr, sys.stderr)]
        for p in pumps:
            p.start()
        rc = proc.wait()
        for p in pumps:
            p.join()
        if rc != 0:  # (ranks that failed or were killed may not have reached MPI_Finalize)
            drop_orphan_shm(shm)
        return rc
    except (KeyboardInterrupt, _Stopped) as e:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # stop once: later signals (GNU
            signal.signal(s, signal.SIG_IGN)  # timeout sends two) stay ignored, the command is ending
        old.clear()
        sig = e.signum if isinstance(e, _Stopped) else signal.SIGINT
        if proc is not None:
            _stop(proc, pumps, sig)
            drop_orphan_shm(shm)
        name = "interrupted" if sig == signal.SIGINT else f"stopped by {signal.Signals(sig).name}"
        print(f"\n{prog}: {name}; all ranks stopped", file=sys.stderr, flush=True)
        return 128 + sig
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        if secret:
            os.unlink(secret)
        if pki:
            shutil.rmtree(pki, ignore_errors=True)
