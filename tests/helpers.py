"""Helpers the tests share: launching real MPI ranks (``mpiexec``, ``run_cmd``, ``run_worker``,
``rank_results``, ``cached_launches``), the scenario plan per world size (``PLAN``), killing a
launch's process tree.  Import them as ``from helpers import ...``; the fixtures are in conftest.py."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest


TESTS = Path(__file__).resolve().parent  # (tests/: the workers and shared modules)
WORKER = TESTS / "mpi_worker.py"
#: scenarios of tests/mpi_worker.py run at each world size (one mpiexec launch per size)
PLAN = {
    1: ["sweep"],
    2: [
        "sweep",
        "wire",
        "wire_policy",
        "paired",
        "express",
        "setup_downgrade",
        "setup_replay",
        "device_engine",
        "device_kernels",
    ],
    3: [
        "sweep",
        "wire",
        "wire_policy",
        "setup_downgrade",
        "setup_replay",
        "setup_blame",
        "soak",
        "device_engine",
        "device_kernels",
    ],
    4: [
        "sweep",
        "setup_downgrade",
        "setup_replay",
        "setup_blame",
        "device_engine",
    ],
    5: ["sweep"],
}


def mpiexec() -> str:
    """The mpiexec installed beside this interpreter (the ``mpich`` wheel), else on PATH."""
    here = Path(sys.executable).with_name("mpiexec")
    found = str(here) if here.exists() else shutil.which("mpiexec")
    if not found:
        pytest.fail("no mpiexec: install the 'mpich' wheel (pip install -e .)")
    return found


#: seconds each world size's launch of PLAN may take before run_worker kills it and names the hung
#: case: 4-6x what each took on 2 cores shared with other jobs (tests/ranks/test_collectives_mpi.py
#: --durations, progress files on: np1 2 s, np2 23 s, np3 40 s, np4 20 s, np5 22 s)
LAUNCH_LIMIT_S = {1: 60, 2: 120, 3: 180, 4: 120, 5: 120}


def _children() -> dict[int, list[int]]:
    """parent pid -> child pids, of every process in /proc"""
    kids: dict[int, list[int]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(pid))
    return kids


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL ``proc``, its process group and every descendant: mpiexec (hydra) starts its proxy
    and each rank in a session of its own, so killing mpiexec's group alone leaves them to its proxy."""
    kids, todo, tree = _children(), [proc.pid], []
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(kids.get(pid, []))
    for kill, target in [(os.killpg, proc.pid)] + [(os.kill, pid) for pid in tree]:
        try:
            kill(target, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + 10  # SIGKILL is asynchronous: wait until the tree has exited
    while any(_running(pid) for pid in tree) and time.monotonic() < deadline:
        time.sleep(0.05)


def _running(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def run_cmd(
    cmd: list, *, timeout: float, what="", capture_output=True, text=True, **kw
) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, **kw)`` in a new session (a drop-in:
    ``capture_output`` and ``text`` are always on).  Past ``timeout`` seconds, or when the test is
    interrupted (pytest-timeout), the whole process tree is killed (``kill_tree``); on timeout the
    test fails naming the command, what was running (``what``: a string, or a callable giving it
    once the tree is dead) and the output's tail.  MPICH's shared-memory files of ranks that were
    killed (here, or by a fault a test injects) are removed (``launch.drop_orphan_shm``)."""
    from seccomm.launch import _shm_files, drop_orphan_shm

    shm = _shm_files()
    try:
        return _run_cmd(cmd, timeout, what, **kw)
    finally:
        drop_orphan_shm(shm)


#: the end of an inline rank script (:func:`rank_results`): rank 0 prints every rank's ``res``
RESULTS_TAIL = """
from mpi4py import MPI as _MPI
_out = _MPI.COMM_WORLD.gather(res)
if _MPI.COMM_WORLD.rank == 0:
    for _r, _ln in enumerate(_out):
        print(f"RESULT {_r} {_ln}", flush=True)
"""


def rank_results(script: str, n: int, *args, timeout: float = 120, env=None) -> tuple[dict, str]:
    """Run ``script`` (Python source that sets ``res``, a one-line string, on every rank) on
    ``n`` real ranks with ``args``; returns ({rank as str: res}, stdout) after checking that
    the launch succeeded and every rank reported."""
    cmd = [mpiexec(), "-n", str(n), sys.executable, "-c", script + RESULTS_TAIL, *map(str, args)]
    out = run_cmd(cmd, timeout=timeout, env=env)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    results = dict(ln.split(" ", 2)[1:] for ln in out.stdout.splitlines() if ln.startswith("RESULT "))
    assert sorted(results, key=int) == [str(r) for r in range(n)], out.stdout[-2000:]
    return results, out.stdout


def _run_cmd(cmd, timeout, what, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc)
        out, err = _drain(proc)
        said = what() if callable(what) else what
        pytest.fail(
            f"timed out after {timeout:g} s (process tree killed): {' '.join(map(str, cmd))}\n"
            f"{said}\n--- stdout tail\n{out[-2000:]}\n--- stderr tail\n{err[-2000:]}",
            pytrace=False,
        )
    except BaseException:
        kill_tree(proc)
        _drain(proc)
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _drain(proc: subprocess.Popen) -> tuple[str, str]:
    """what a killed process group had written ('' where a stray holder keeps the pipes open)"""
    try:
        return proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        return "", ""


def progress_report(out: Path, n: int) -> str:
    """Where each of ``n`` ranks of tests/mpi_worker.py stood, from its ``OUT.rank{r}.progress``:
    the last line it wrote (``scenario / case``), and the ranks that had not written ``done``."""
    lines, unfinished = [], []
    for r in range(n):
        f = Path(f"{out}.rank{r}.progress")
        last = f.read_text().splitlines()[-1:] if f.exists() else []
        lines.append(f"rank {r}: {last[0] if last else '(no progress written: never started)'}")
        if last != ["done"]:
            unfinished.append(r)
    return f"ranks not finished: {unfinished}\n" + "\n".join(lines)


def run_torch_worker(tmp_path: Path, world: int, *args: str) -> list[dict]:
    """tests/torch_worker.py on ``world`` ranks under mpiexec (gloo rendezvous on a free port);
    every rank's result records, after asserting that all ranks finished and wrote them."""
    from seccomm import launch

    out = tmp_path / "r.json"
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(launch.free_port()))
    cmd = [
        mpiexec(),
        "-n",
        str(world),
        sys.executable,
        str(WORKER.with_name("torch_worker.py")),
        str(out),
        *args,
    ]
    proc = run_cmd(cmd, timeout=600, what=f"torch_worker on {world} ranks: {' '.join(args)}", env=env)
    files = [Path(f"{out}.rank{r}") for r in range(world)]
    assert proc.returncode == 0 and all(f.exists() for f in files), proc.stdout[-3000:] + proc.stderr[-3000:]
    return [r for f in files for r in json.loads(f.read_text())]


def run_train(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    """``seccomm train --np 2 --json ... *args`` outside any launcher; (process, its JSON)."""
    from seccomm import launch

    j = tmp_path / "train.json"
    env = {k: v for k, v in os.environ.items() if k not in launch.LAUNCHER_VARS}
    cmd = [*launch.python_argv("seccomm", "train", "--np", "2", "--json", str(j)), *args]
    proc = run_cmd(cmd, timeout=600, what="seccomm train --np 2", env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(j.read_text())


def run_worker(n: int, scenarios: list[str], out: Path, timeout: float | None = None) -> dict:
    """tests/mpi_worker.py's ``scenarios`` on ``n`` ranks; rank 0's results.  Past ``timeout`` s
    (default ``LAUNCH_LIMIT_S[n]``) the launch is killed and the test fails naming the scenario and
    case each rank had reached and the ranks that had not finished."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    cmd = [mpiexec(), "-n", str(n), sys.executable, str(WORKER), str(out), *scenarios]
    limit = LAUNCH_LIMIT_S.get(n, 180) if timeout is None else timeout
    proc = run_cmd(cmd, timeout=limit, what=lambda: progress_report(out, n), env=env)
    if proc.returncode != 0 or not out.exists():
        pytest.fail(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return json.loads(out.read_text())


def cached_launches(tmp_path_factory, plan: dict, prefix: str = "np"):
    """``get(n)``: the results of one launch of ``plan[n]``'s scenarios on n ranks, launched on
    first use and cached."""
    cache: dict[int, dict] = {}

    def get(n: int) -> dict:
        if n not in cache:
            cache[n] = run_worker(n, plan[n], tmp_path_factory.mktemp(f"{prefix}{n}") / "results.json")
        return cache[n]

    return get
