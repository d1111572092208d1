"""Start local ranks with the ``mpiexec`` of the ``mpich`` wheel, or use the launcher's ranks.

Run plainly, ``seccomm bench`` re-executes itself as ``mpiexec -n N python -m seccomm bench ...``
with a fresh job secret in a 0600 file (``SECCOMM_PSK_FILE``), removed when the run ends.  Run
under ``mpiexec``/``mpirun``/``srun``, it uses the ranks it was given: this is how it scales past
one machine.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .keys import new_secret_file

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


def rank_and_size() -> tuple[int, int]:
    """(rank, world size) from the launcher's environment (torchrun, MPI, Slurm); (0, 1) if none."""
    for r, n in _RANK_SIZE:
        if r in os.environ and n in os.environ:
            return int(os.environ[r]), int(os.environ[n])
    return 0, 1


def under_launcher() -> bool:
    """True when this process is a rank started by an MPI launcher (or by us)."""
    return bool(os.environ.get("SECCOMM_LAUNCHED")) or any(v in os.environ for v in LAUNCHER_VARS)


def find_mpiexec() -> str | None:
    """The ``mpiexec`` beside this interpreter (installed by the ``mpich`` wheel), else PATH."""
    here = Path(sys.executable).with_name("mpiexec")
    if here.exists():
        return str(here)
    return shutil.which("mpiexec")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for torch.distributed rendezvous)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def relaunch(nranks: int, argv: list[str], extra_env: dict | None = None) -> int:
    """Run ``python -m seccomm ARGV`` on ``nranks`` local ranks; return the launcher's exit code."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise FileNotFoundError(
            "no mpiexec found: install the MPI wheel (pip install mpich) or "
            "start the ranks with your own launcher (mpiexec/srun)"
        )
    secret = new_secret_file()
    env = dict(os.environ, SECCOMM_PSK_FILE=secret, SECCOMM_LAUNCHED="1", PYTHONUNBUFFERED="1")
    env.pop("SECCOMM_PSK", None)
    env.update(extra_env or {})
    if sys.stderr.isatty():  # ranks see a pipe from mpiexec: tell them a person is watching
        env["SECCOMM_PROGRESS"] = "1"
    try:
        cmd = [mpiexec, "-n", str(nranks), sys.executable, "-m", "seccomm", *argv]
        return subprocess.call(cmd, env=env)
    except KeyboardInterrupt:
        return 130
    finally:
        os.unlink(secret)
