"""How the commands start and stop, run as a user runs them: Ctrl-C, SIGTERM and SIGHUP stop every
rank with one line and leave no job secret behind; under a user's ``mpiexec`` a usage error is
printed once, ``--np`` is checked, and ``seccomm train`` finds its rendezvous without
``MASTER_PORT``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from seccomm import launch

from helpers import kill_tree, mpiexec, run_cmd

SECCOMM = [sys.executable, "-m", "seccomm"]
GOOD_HEX = "5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0"  # os.urandom(32).hex()
#: a bench that runs far longer than any test waits: it must be stopped
LONG_BENCH = ["bench", "-b", "16M", "-e", "64M", "-n", "100000", "--suites", "aes-256-gcm"]


def clean_env(tmp_path, **extra) -> dict:
    """This process's environment without launcher, secret or rendezvous variables; TMPDIR is
    ``tmp_path`` (where a fresh job secret goes)."""
    drop = launch.LAUNCHER_VARS + ("SECCOMM_PSK", "SECCOMM_PSK_FILE", "SECCOMM_INSECURE_BENCH_SECRET")
    env = {k: v for k, v in os.environ.items() if k not in drop + ("MASTER_ADDR", "MASTER_PORT")}
    return {**env, "TMPDIR": str(tmp_path), "PYTHONUNBUFFERED": "1", **extra}


def _processes_with(marker: str) -> list[int]:
    """pids of processes (not zombies) whose command line contains ``marker``."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                zombie = f.read().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            continue
        if marker in cmd and not zombie:
            out.append(int(pid))
    return out


def stop_midway(cmd: list, env: dict, sig: int, marker: str, twice: bool = False) -> tuple[int, str, str]:
    """Start ``cmd`` in a session of its own, wait until rank 0 has printed its header (the ranks
    are timing), send ``sig`` to its process group (as a terminal sends Ctrl-C to the foreground
    group; ``twice``: first to the command, then to its group, as GNU ``timeout`` does), and
    return (exit status, stdout, stderr).  Fails if it does not stop by itself."""
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    reader.start()
    err: list[str] = []
    ereader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
    ereader.start()
    try:
        deadline = time.monotonic() + 120
        while not any(ln.startswith("# time:") for ln in lines):
            assert proc.poll() is None and time.monotonic() < deadline, ("".join(lines), err)
            time.sleep(0.05)
        if twice:  # the second while the first is being handled (ranks still stopping)
            os.kill(proc.pid, sig)
            time.sleep(0.3)
        os.killpg(proc.pid, sig)
        rc = proc.wait(timeout=60)
        reader.join(10)
        ereader.join(10)
    except BaseException:
        kill_tree(proc)
        for pid in _processes_with(marker):
            os.kill(pid, signal.SIGKILL)
        raise
    return rc, "".join(lines), "".join(err)


def _holds(f, data: bytes) -> bool:
    try:
        return data in f.read_bytes()
    except OSError:
        return False


def test_a_rank_that_leaves_unlinks_the_mpich_files_it_maps(tmp_path):
    """launch.drop_own_shm, on a folder of its own (this test process may map MPICH's real
    files: an in-process test's MPI): the files of MPICH's pattern this process maps are
    unlinked (the mapping stays usable); one of the pattern it does not map, and a mapped file
    of the pattern in another folder, are left."""
    import mmap

    shm, elsewhere = tmp_path / "shm", tmp_path / "other"
    shm.mkdir(), elsewhere.mkdir()
    mine, unmapped, outside = shm / "mpich_shm_1_0", shm / "mpich_shm_2_0", elsewhere / "mpich_shm_1_0"
    maps = []
    try:
        for f in (mine, unmapped, outside):
            f.write_bytes(b"x" * 4096)
        for f in (mine, outside):
            with open(f, "r+b") as fh:
                maps.append(mmap.mmap(fh.fileno(), 4096))
        assert launch.drop_own_shm(shm) == [mine]
        assert not mine.exists() and unmapped.exists() and outside.exists()
        assert maps[0][:1] == b"x"
    finally:
        for m in maps:
            m.close()


def _gone(marker: str) -> bool:
    """Whether every process of the run has exited (polled for up to 10 s: exits are asynchronous)."""
    deadline = time.monotonic() + 10
    while _processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return not _processes_with(marker)


@pytest.mark.mpi
@pytest.mark.parametrize(
    "sig,twice",
    [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGHUP, False), (signal.SIGTERM, True)],
)
def test_plain_bench_stops_every_rank_on_a_signal(tmp_path, sig, twice):
    """Run plainly: Ctrl-C (SIGINT), SIGTERM or SIGHUP ends the run with one line on standard
    error, status 128 + signal, every rank gone, and the fresh job secret removed; SIGTERM sent
    twice (GNU timeout: to the command, then to its group) as well."""
    marker = str(tmp_path / "marker.csv")
    cmd = [*SECCOMM, *LONG_BENCH, "--csv", marker]
    rc, out, err = stop_midway(cmd, clean_env(tmp_path), sig, marker, twice)
    name = "interrupted" if sig == signal.SIGINT else f"stopped by {signal.Signals(sig).name}"
    assert rc == 128 + sig, (rc, out[-1000:], err[-2000:])
    assert [ln for ln in err.splitlines() if ln.strip()] == [f"seccomm bench: {name}; all ranks stopped"], err
    assert "Traceback" not in out + err and "BAD TERMINATION" not in out
    assert _gone(marker), "ranks left running"
    assert not list(tmp_path.glob("seccomm-psk-*")), "the job secret was left on disk"


@pytest.mark.mpi
def test_report_stopped_during_its_capture_leaves_nothing_behind(tmp_path):
    """seccomm report stopped (SIGTERM twice, as GNU timeout sends it) while its packet capture
    runs: one line, status 143, and neither the capture's job secret nor its folder is left."""
    from seccomm.compliance.capture import LoopbackCapture

    try:
        LoopbackCapture().sock.close()
    except (PermissionError, OSError, AttributeError):
        pytest.skip("no packet socket here: the report skips its capture")
    cmd = [*SECCOMM, "report", "--compliance", "--trials", "1"]
    proc = subprocess.Popen(
        cmd, env=clean_env(tmp_path), stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120
        while not list(tmp_path.glob("seccomm-capture-*")):  # the capture job has started
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGTERM)
        os.killpg(proc.pid, signal.SIGTERM)
        rc, err = proc.wait(timeout=60), proc.stderr.read()
    finally:
        kill_tree(proc)
    assert rc == 128 + signal.SIGTERM and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == "seccomm report: stopped by SIGTERM", err
    assert not list(tmp_path.glob("seccomm-*")), list(tmp_path.iterdir())


@pytest.mark.mpi
def test_ctrl_c_under_the_users_mpiexec_prints_one_line(tmp_path):
    """Under the user's mpiexec, Ctrl-C reaches mpiexec, which passes it to the ranks: rank 0
    says so once, no rank prints a traceback, exit status 130."""
    marker = str(tmp_path / "marker.csv")
    cmd = [mpiexec(), "-n", "2", *SECCOMM, *LONG_BENCH, "--csv", marker]
    job = f"ctrl-c-{os.getpid()}-{time.monotonic_ns()}"  # (in the setup hellos MPICH's shm holds)
    before = launch._shm_files()
    env = clean_env(tmp_path, SECCOMM_PSK=GOOD_HEX, SECCOMM_JOB_ID=job)
    rc, out, err = stop_midway(cmd, env, signal.SIGINT, marker)
    left = [f for f in launch._shm_files() - before if _holds(f, job.encode())]
    for f in left:
        f.unlink()
    assert rc == 130, (rc, out[-1000:], err[-2000:])
    assert [ln for ln in err.splitlines() if ln.strip()] == ["seccomm bench: interrupted"], err
    assert not left, left  # the ranks left without MPI_Finalize: they unlinked MPICH's files
    assert "Traceback" not in out + err
    assert _gone(marker)


def _under_mpiexec(tmp_path, n: int, *args, **env_extra):
    env = clean_env(tmp_path, SECCOMM_PSK=GOOD_HEX, **env_extra)
    return run_cmd([mpiexec(), "-n", str(n), *SECCOMM, *args], timeout=300, env=env, cwd=tmp_path)


@pytest.mark.mpi
@pytest.mark.parametrize(
    "args,msg",
    [
        (["bench", "-n", "0"], "seccomm bench: error: argument -n/--iters: must be in [1, 1_000_000], got 0"),
        (
            ["bench", "--json", "/nonexistent/r.json"],
            "seccomm bench: error: --json /nonexistent/r.json: folder",
        ),
        (
            ["bench", "--np", "3"],
            "seccomm bench: error: --np 3 does not apply under a launcher, which started 2",
        ),
        (
            ["attack", "--trials", "5", "--classes", "drop,redirect"],
            "start 3 or more ranks (mpiexec -n 3 ...), or leave redirect out",
        ),
        (["bench", "--encrypt", "inter-node", "-e", "8"], "all 2 ranks are on one node, so no hop would be"),
        (["report", "--compliance"], "the evidence needs 3 ranks or more (the redirect attack)"),
        (
            ["report", "--compliance", "--pcap", "/etc/hostname/x", "-n3"],
            "--pcap /etc/hostname/x: /etc/hostname is a file, not a folder",
        ),
        (["report", "--compliance", "-o", "/nonexistent/r.md", "-n3"], "--output /nonexistent/r.md: folder"),
    ],
)
def test_usage_errors_under_mpiexec_are_printed_once(tmp_path, args, msg):
    """Every rank parses the same arguments; one says what is wrong, all exit 2 together."""
    n = 3 if "-n3" in args else 2
    out = _under_mpiexec(tmp_path, n, *[a for a in args if a != "-n3"])
    err = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 2 and len(err) == 1 and msg in err[0], (out.returncode, out.stderr[-2000:])
    assert "Traceback" not in out.stdout + out.stderr


@pytest.mark.mpi
def test_train_under_mpiexec_needs_no_master_port(tmp_path):
    """mpiexec -n 2 seccomm train: the torch.distributed rendezvous comes from MPI (no
    MASTER_ADDR/MASTER_PORT set); a bad --json stops every rank before training."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    j = tmp_path / "t.json"
    out = _under_mpiexec(tmp_path, 2, "train", "--steps", "3", "--json", str(j))
    assert out.returncode == 0 and j.exists(), out.stderr[-3000:]
    assert "Traceback" not in out.stderr and "# seccomm train:" in out.stdout
    out = _under_mpiexec(tmp_path, 2, "train", "--steps", "3", "--json", "/nonexistent/t.json")
    err = [
        ln
        for ln in out.stderr.splitlines()
        if ln.strip() and "UserWarning" not in ln and "from_numpy" not in ln
    ]
    assert out.returncode == 2 and len(err) == 1 and "--json /nonexistent/t.json: folder" in err[0], (
        out.stderr
    )
    assert "# seccomm train:" not in out.stdout


BENCH_TINY = ["bench", "-b", "64", "-e", "64", "-n", "1", "-w", "0", "--suites", "none"]


@pytest.mark.mpi
def test_ranks_run_the_seccomm_that_started_them_whatever_the_current_directory(tmp_path):
    """Run from a folder that holds a folder named ``seccomm`` (the parent of a clone), by a
    console script as a user runs it, the ranks bench starts import the seccomm of the command, not
    that folder."""
    cwd = tmp_path / "parent-of-a-clone"
    (cwd / "seccomm").mkdir(parents=True)
    for f in ("__init__.py", "__main__.py"):
        (cwd / "seccomm" / f).write_text("raise ImportError('the seccomm folder of the current directory')\n")
    script = tmp_path / "bin" / "seccomm"  # a console script: its own folder leads sys.path
    script.parent.mkdir()
    script.write_text("import sys\nfrom seccomm.cli import main\nsys.exit(main())\n")
    cmd = [sys.executable, str(script), *BENCH_TINY, "--np", "2"]
    out = run_cmd(cmd, timeout=300, env=clean_env(tmp_path), cwd=cwd)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "# Result: OK" in out.stdout and "current directory" not in out.stderr


def _one_core():
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


@pytest.mark.mpi
def test_bench_refuses_more_ranks_than_cores_unless_oversubscribe(tmp_path):
    """On one core, ``--np 2`` is refused before any rank starts; with ``--oversubscribe`` it runs,
    warns, and the table header says so."""
    env = clean_env(tmp_path)
    cmd = [*SECCOMM, *BENCH_TINY, "--np", "2"]
    refused = run_cmd(cmd, timeout=120, env=env, preexec_fn=_one_core)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "--np 2: 2 ranks on 1 core(s)" in refused.stderr and "--oversubscribe" in refused.stderr
    assert refused.stdout == ""
    out = run_cmd([*cmd, "--oversubscribe"], timeout=300, env=env, preexec_fn=_one_core)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "# OVERSUBSCRIBED: 2 ranks on 1 core(s) on this node" in out.stdout
    assert "warning: oversubscribed, 2 ranks on 1 core(s)" in out.stderr


def test_train_and_attack_warn_when_oversubscribed(monkeypatch, capsys):
    """``seccomm train``/``attack`` (timings are not what they measure) warn, never refuse."""
    from seccomm.cli.usage import check_cores

    monkeypatch.setattr(launch, "usable_cores", lambda: 2)
    check_cores(2, False, "seccomm bench")
    check_cores(3, True, "seccomm attack")
    assert "seccomm attack: warning: oversubscribed, 3 ranks on 2 core(s)" in capsys.readouterr().err


def test_orphan_mpich_shared_memory_is_removed_and_nothing_else(tmp_path, monkeypatch):
    """Ranks stopped by a signal never unlink MPICH's shared-memory file (``/dev/shm/mpich_shm_*``,
    2 MB each, seen after every Ctrl-C of ``seccomm bench`` before): after stopping them,
    ``relaunch`` removes the files that appeared since the launch and that no process maps or
    holds open; a file from before the launch, one still mapped, one still open and any other
    name stay."""
    import mmap

    monkeypatch.setattr(launch, "SHM_DIR", tmp_path)
    old = tmp_path / "mpich_shm_old_0"
    old.write_bytes(b"\0" * 4096)
    before = launch._shm_files()
    names = ("mpich_shm_a_0", "mpich_shm_b_0", "mpich_shm_c_0", "x")
    orphan, mapped, held, other = (tmp_path / n for n in names)
    for f in (orphan, mapped, held, other):
        f.write_bytes(b"\0" * 4096)
    with open(mapped, "r+b") as f:
        m = mmap.mmap(f.fileno(), 4096)  # (mapped after the file is closed, as MPICH's segment)
    with open(held, "rb"):
        gone = launch.drop_orphan_shm(before, settle=0.3)
    m.close()
    assert gone == [orphan] and not orphan.exists()
    assert old.exists() and mapped.exists() and held.exists() and other.exists()


def test_a_file_its_dying_rank_still_maps_is_removed_once_the_rank_is_gone(tmp_path, monkeypatch):
    """A killed rank lets go of MPICH's shared-memory file only once it has exited, which may be
    a moment after its launcher returned (a file left in /dev/shm after a CI run beside another
    job): ``drop_orphan_shm`` looks again for up to ``settle`` seconds and removes it then; without
    that wait (``settle=0``) the file stays."""
    import subprocess
    import sys

    monkeypatch.setattr(launch, "SHM_DIR", tmp_path)
    before = launch._shm_files()
    code = (
        "import mmap, sys, time; f = open(sys.argv[1], 'r+b'); m = mmap.mmap(f.fileno(), 4096); "
        "f.close(); print('mapped', flush=True); time.sleep(float(sys.argv[2]))"
    )
    for settle, kept in ((0.0, True), (5.0, False)):
        shm = tmp_path / f"mpich_shm_dying{settle:g}_0"
        shm.write_bytes(b"\0" * 4096)
        rank = subprocess.Popen(
            [sys.executable, "-c", code, str(shm), "0.5"], stdout=subprocess.PIPE, text=True
        )
        assert rank.stdout.readline() == "mapped\n"
        gone = launch.drop_orphan_shm(before, settle=settle)
        rank.wait()
        assert shm.exists() is kept and (gone == []) is kept, (settle, gone)
        shm.unlink(missing_ok=True)


@pytest.mark.mpi
def test_a_failed_run_leaves_no_shared_memory_files(tmp_path, monkeypatch):
    """Ranks that end without MPI_Finalize (here: each makes an MPICH-named file, as MPICH's
    segment, and exits 3) leave nothing in the shared-memory folder once relaunch returns."""
    monkeypatch.setattr(launch, "SHM_DIR", tmp_path)
    code = (
        "import os, sys; open(os.path.join(sys.argv[1], f'mpich_shm_t{os.getpid()}_0'), 'wb').write(b'x'); "
        "os._exit(3)"
    )
    monkeypatch.setattr(launch, "python_argv", lambda *a: [sys.executable, "-c", code, str(tmp_path)])
    rc = launch.relaunch(2, [], prog="test")
    assert rc != 0 and not list(tmp_path.glob("mpich_shm_*")), list(tmp_path.iterdir())
