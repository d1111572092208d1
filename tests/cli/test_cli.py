"""`seccomm bench`: argument parsing and one-line errors (in-process), and end-to-end sweeps on
real ranks (subprocess) checking the table, JSON and CSV schema and busbw factors."""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path

import pytest

from seccomm import cli, launch
from seccomm.collectives import COLLECTIVES
from seccomm.keys import new_secret_file
from seccomm.units import parse_size

from helpers import mpiexec, run_cmd

SECCOMM = [sys.executable, "-m", "seccomm"]
GOOD_HEX = "5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0"  # os.urandom(32).hex()


def test_parse_size():
    assert parse_size("8") == 8
    assert parse_size("64K") == 65536 and parse_size("64k") == 65536
    assert parse_size("64M") == 64 << 20 and parse_size("1G") == 1 << 30
    assert parse_size("64MiB") == 64 << 20 and parse_size("2MB") == 2 << 20
    for bad in ("", "1.5M", "-8", "8T", "M"):
        with pytest.raises(ValueError, match="bad size"):  # a library error; the CLI makes it a usage error
            parse_size(bad)


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--suites", "aes-256-gcm,rot13"], "unknown suite rot13; allowed: none, aes-256-gcm"),
        (["--collective", "scatter"], "unknown collective scatter; allowed: allreduce, reduce_scatter"),
        (["-d", "complex64"], "unknown dtype 'complex64'; allowed: float16, bfloat16"),
        (["-o", "xor"], "unknown op 'xor'; allowed: sum"),
        (["-o", "avg", "-d", "int32"], "op avg needs a floating-point dtype"),
        (["-b", "1M", "-e", "4K"], "minbytes (1048576) is larger than maxbytes (4096)"),
        (["-b", "6"], "-b/--minbytes 6 is not a multiple of the float32 size (4 bytes)"),
        (["-e", "10", "-d", "float64", "-b", "8"], "-e/--maxbytes 10 is not a multiple of the float64 size"),
        (["-b", "12x"], "bad size '12x'"),
        (["-e", "-1M"], "argument -e/--maxbytes: bad size '-1M'"),
        (["-b", "0"], "argument -b/--minbytes: must be >= 1, got 0"),
        (["--np", "100000"], "--np 100000 is not sensible"),
        (["--np", "0"], "argument --np: must be >= 1, got 0"),
        (["-c", "2"], "argument -c/--check: must be in [0, 1], got 2"),
        (["-f", "1"], "argument -f/--stepfactor: must be in [2, 1_048_576], got 1"),
        (["-n", "0"], "argument -n/--iters: must be in [1, 1_000_000], got 0"),
        (["-w", "-1"], "argument -w/--warmup: must be in [0, 1_000_000], got -1"),
        (["--timeout", "0"], "argument --timeout: must be in (0, 1e+06], got 0"),
        (["--timeout", "nan"], "argument --timeout: must be a finite number, got 'nan'"),
        (["--chunk-bytes", "8"], "argument --chunk-bytes: must be in [16, 2_147_483_583], got 8"),
        (["--algorithm", "tree"], "invalid choice: 'tree'"),
        (
            ["--algorithm", "ring", "--collective", "bcast"],
            "--algorithm ring applies to allreduce only (bcast runs binomial or chain by size)",
        ),
        (["--algorithm", "recursive_doubling", "--collective", "all"], "alltoall runs pairwise"),
        (["--root", "-1"], "argument --root: must be in [0, 16_777_216], got -1"),
        (["--root", "2", "--np", "2"], "--root 2 is not a rank of --np 2"),
        (["--scale", "0.5"], "--scale applies to --workload runs only"),
        (["--bucket-cap-mb", "5"], "--bucket-cap-mb applies to --workload runs only"),
        (["--encrypt", "inter-node"], "--encrypt inter-node: the ranks this starts are all on this machine"),
        (["--json", "/nonexistent/x.json"], "--json /nonexistent/x.json: folder /nonexistent does not exist"),
        (["--csv", "."], "--csv . is a directory; give a file name"),
    ],
)
def test_bad_arguments_one_line_exit_2(capsys, args, msg):
    assert cli.main(["bench", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("seccomm bench: error: ") and msg in err, err
    assert "\n" not in err and "Traceback" not in err


def test_workload_arguments(capsys):
    pytest.importorskip("torch")
    for args, msg in (
        (["--workload", "resnet50", "-d", "float16"], "runs float32 sum allreduces"),
        (["--workload", "alexnet"], "unknown workload 'alexnet'; allowed: resnet50"),
        (["--workload", "resnet50", "--scale", "2"], "argument --scale: must be in (0, 1], got 2"),
        (["--workload", "resnet50", "--scale", "0"], "argument --scale: must be in (0, 1], got 0"),
        (
            ["--workload", "resnet50", "-b", "64", "--collective", "bcast"],
            "-b, --collective: not used by --workload",
        ),
        (["--workload", "resnet50", "--root", "1"], "--root: not used by --workload"),
    ):
        assert cli.main(["bench", *args]) == 2
        assert msg in capsys.readouterr().err


def test_no_mpiexec(capsys, monkeypatch):
    for v in launch.LAUNCHER_VARS + ("SECCOMM_LAUNCHED",):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setattr(launch, "find_mpiexec", lambda: None)
    assert cli.main(["bench", "-e", "64"]) == 2
    err = capsys.readouterr().err
    assert "no mpiexec found" in err and "pip install mpich" in err and err.count("\n") == 1


def test_unknown_command(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.mpi
@pytest.mark.parametrize("nranks,how", [(2, "own launcher"), (3, "user's mpiexec")])
def test_bench_end_to_end(tmp_path, nranks, how):
    """Run plainly, bench starts its own ranks (--np); under mpiexec it uses the ranks given."""
    j, c = tmp_path / "r.json", tmp_path / "r.csv"
    env = {k: v for k, v in os.environ.items() if k not in launch.LAUNCHER_VARS}
    args = [
        "bench",
        "-b",
        "8",
        "-e",
        "64K",
        "-f",
        "16",
        "-n",
        "3",
        "-w",
        "1",
        "--collective",
        "all",
        "--chunk-bytes",
        "4K",
        "--json",
        str(j),
        "--csv",
        str(c),
    ]
    if how == "own launcher":
        cmd = [*SECCOMM, *args, "--np", str(nranks)]
    else:  # the user's launcher: the user gives the job secret
        cmd = [mpiexec(), "-n", str(nranks), *SECCOMM, *args]
        env["SECCOMM_PSK_FILE"] = new_secret_file(str(tmp_path))
    out = run_cmd(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    text = out.stdout
    assert "size [B]" in text and "busbw [GB/s]" in text and "# Result: OK" in text
    assert "Traceback" not in out.stderr
    doc = json.loads(j.read_text())
    m = doc["machine"]
    for key in (
        "host",
        "cpu",
        "openssl",
        "cryptography",
        "mpi_library",
        "mpi4py",
        "seccomm",
        "utc",
        "git_commit",
    ):
        assert key in m
    assert {"model", "cores", "aes", "vaes", "pclmulqdq"} <= set(m["cpu"])
    assert doc["config"]["collectives"] == list(COLLECTIVES) and doc["world_size"] == nranks
    variants = ["native", "none", "aes-256-gcm", "chacha20-poly1305", "aes-256-gmac"]
    sizes = [8, 128, 2048, 32768]
    rows = doc["rows"]
    assert len(rows) == len(COLLECTIVES) * len(sizes) * len(variants)
    for r in rows:
        assert {
            "collective",
            "size_bytes",
            "count",
            "dtype",
            "variant",
            "time_us",
            "algbw_gbps",
            "busbw_gbps",
            "overhead_x",
            "wrong",
        } <= set(r)
        assert set(r["time_us"]) == {"min", "median", "max"}
        assert r["time_us"]["min"] <= r["time_us"]["median"] <= r["time_us"]["max"]
        assert r["wrong"] == 0 and r["variant"] in variants
        factor = COLLECTIVES[r["collective"]].busbw_factor(nranks)
        expect = {
            "allreduce": 2 * (nranks - 1) / nranks,
            "reduce_scatter": (nranks - 1) / nranks,
            "allgather": (nranks - 1) / nranks,
            "bcast": 1.0,
            "alltoall": (nranks - 1) / nranks,
        }[r["collective"]]
        assert factor == pytest.approx(expect)
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * expect)
        assert r["algbw_gbps"] == pytest.approx(r["size_bytes"] / (r["time_us"]["median"] * 1e-6) / 1e9)
        if r["variant"] == "native":
            assert r["overhead_x"] == pytest.approx(1.0)
        native = next(
            x
            for x in rows
            if x["variant"] == "native"
            and x["collective"] == r["collective"]
            and x["size_bytes"] == r["size_bytes"]
        )["time_us"]["median"]
        add, over = r["bound_us"]["additive"], r["bound_us"]["overlapped"]
        assert over == pytest.approx(max(native, add - native)) and add >= over >= native
        if r["variant"] in ("native", "none") or r["size_bytes"] == 0:  # no crypto: native MPI
            assert add == pytest.approx(native)
        else:
            assert add > native
        assert r["vs_bound_x"] == pytest.approx(r["time_us"]["median"] / add)
    assert text.count("one core, worst of all ranks") == 3  # a rate line per suite with crypto
    threads = int(env.get("SECCOMM_CRYPTO_THREADS", 0)) or min(8, max(1, (os.cpu_count() or 1) // nranks))
    assert doc["crypto_threads"] == threads  # (SecureComm's default: the node's cores / its ranks)
    assert f"# crypto threads: {threads} per rank (" in text and f"for {nranks} ranks on this node" in text
    assert set(doc["crypto_rates"]) == set(variants) - {"native", "none"}
    ag = [r for r in rows if r["collective"] == "allgather" and r["size_bytes"] == 2048]
    assert all(r["count"] == 512 for r in ag)  # S is the total gathered array
    lines = list(csv.DictReader(c.open()))
    assert len(lines) == len(rows)
    assert {"time_us_median", "busbw_gbps", "overhead_x", "variant", "size_bytes"} <= set(lines[0])
    assert {"bound_us_additive", "bound_us_overlapped", "vs_bound_x"} <= set(lines[0])


@pytest.mark.mpi
def test_bench_alltoall(tmp_path):
    """seccomm bench --collective alltoall on 3 ranks: S rounded down to 3 blocks, results equal
    to native MPI_Alltoall, busbw = algbw x (n-1)/n."""
    j = tmp_path / "a.json"
    env = {k: v for k, v in os.environ.items() if k not in launch.LAUNCHER_VARS}
    out = run_cmd(
        [
            *SECCOMM,
            "bench",
            "--collective",
            "alltoall",
            "-b",
            "8",
            "-e",
            "4K",
            "-f",
            "8",
            "-n",
            "2",
            "-w",
            "1",
            "-d",
            "int64",
            "--chunk-bytes",
            "1K",
            "--np",
            "3",
            "--oversubscribe",  # 3 ranks: refused on fewer cores without it
            "--json",
            str(j),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert "# alltoall" in out.stdout and "# Result: OK" in out.stdout
    rows = json.loads(j.read_text())["rows"]
    assert {r["collective"] for r in rows} == {"alltoall"}
    assert sorted({r["count"] for r in rows}) == [0, 6, 63, 510]  # 1, 8, 64, 512 int64 -> 3 blocks
    for r in rows:
        assert r["wrong"] == 0 and r["redop"] == "none" and r["root"] == -1
        assert r["busbw_gbps"] == pytest.approx(r["algbw_gbps"] * 2 / 3)


@pytest.mark.mpi
def test_bench_wrong_results_fail_the_run():
    out = run_cmd(
        [mpiexec(), "-n", "2", sys.executable, str(Path(__file__).resolve().parents[1] / "bench_worker.py")],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, SECCOMM_PSK=GOOD_HEX),
    )
    assert out.returncode != 0
    assert "FAILED" in out.stdout
    bad = [ln for ln in out.stdout.splitlines() if " test-corrupt " in ln and ln.strip()[0].isdigit()]
    assert bad and all(int(ln.split()[-1]) > 0 for ln in bad)
    good = [ln for ln in out.stdout.splitlines() if " none " in ln and ln.strip()[0].isdigit()]
    assert good and all(int(ln.split()[-1]) == 0 for ln in good)


def test_bench_secret_decision():
    """Every rank takes the same branch: own secrets, the clear-text secret (only with every
    rank's opt-in and no secret anywhere), or an error that one rank explains."""
    from seccomm.bench.secret import (
        BAD, NO_SECRET, NONE, OK, PLUGIN_NO_SECRET, REPORT_NO_SECRET, BenchSecretError, LocalSecret, decide,
    )  # fmt: skip

    ok, none = LocalSecret(OK, b"s", "SECCOMM_PSK"), LocalSecret(NONE)
    assert decide(1, ok, [OK, OK], [0, 0]) is False
    assert decide(0, none, [NONE, NONE], [1, 1]) is True
    for rank in (0, 1):
        with pytest.raises(BenchSecretError) as e:
            decide(rank, none, [NONE, NONE], [0, 0])
        assert str(e.value) == NO_SECRET and e.value.speaker == (rank == 0)
        with pytest.raises(BenchSecretError, match=r"rank\(s\) \[1\] lack SECCOMM_INSECURE_BENCH_SECRET=1"):
            decide(rank, none, [NONE, NONE], [1, 0])  # one rank did not opt in: named
        with pytest.raises(BenchSecretError) as e:  # a report never runs on the clear-text secret
            decide(rank, none, [NONE, NONE], [1, 1], REPORT_NO_SECRET)
        assert str(e.value) == REPORT_NO_SECRET
        with pytest.raises(BenchSecretError, match=r"rank\(s\) \[1\] have no job secret") as e:
            decide(rank, [ok, none][rank], [OK, NONE], [1, 1])  # never replaced, even opted in
        bad = LocalSecret(BAD, text="SECCOMM_PSK_FILE '/x' is accessible by group or others")
        with pytest.raises(BenchSecretError) as e:
            decide(rank, [ok, bad][rank], [OK, BAD], [1, 1])
        assert e.value.speaker == (rank == 1)
        assert str(e.value) == (
            "rank 1: SECCOMM_PSK_FILE '/x' is accessible by group or others"
            if rank == 1
            else "rank 1 has an unusable job secret"
        )
    # the pytest plugin makes no secret: its advice does not say "run without a launcher"
    assert "without a launcher" in NO_SECRET and "without a launcher" not in PLUGIN_NO_SECRET


def _bench_under_mpiexec(tmp_path, **env_extra):
    """``mpiexec -n 2 seccomm bench`` (one tiny size) with the given secret settings."""
    env = {k: v for k, v in os.environ.items() if k not in ("SECCOMM_PSK", "SECCOMM_PSK_FILE")}
    env.pop("SECCOMM_INSECURE_BENCH_SECRET", None)
    env.update(env_extra)
    cmd = [mpiexec(), "-n", "2", *SECCOMM, "bench", "-b", "8", "-e", "8", "-n", "1", "-w", "0"]
    cmd += ["--suites", "aes-256-gcm"]
    return run_cmd(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)


@pytest.mark.mpi
def test_bench_under_a_launcher_needs_a_secret_or_the_opt_in(tmp_path):
    out = _bench_under_mpiexec(tmp_path)
    err = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert len(err) == 1 and err[0].startswith("seccomm bench: error: no job secret on any rank"), err
    assert "SECCOMM_PSK_FILE" in err[0] and "SECCOMM_INSECURE_BENCH_SECRET=1" in err[0]
    assert "# Result" not in out.stdout
    out = _bench_under_mpiexec(tmp_path, SECCOMM_INSECURE_BENCH_SECRET="1")
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    warned = [ln for ln in out.stderr.splitlines() if "WARNING" in ln]
    assert sorted(ln.split()[3] for ln in warned) == ["0", "1"], out.stderr  # every rank, once
    assert all("broadcast in the clear" in ln and "synthetic data only" in ln for ln in warned)
    assert "# Result: OK" in out.stdout and "broadcast in the clear" in out.stdout  # the header says so
    out = _bench_under_mpiexec(tmp_path, SECCOMM_PSK=GOOD_HEX)
    assert out.returncode == 0 and "WARNING" not in out.stderr, out.stderr[-2000:]


@pytest.mark.mpi
def test_every_command_under_a_launcher_decides_the_secret_first(tmp_path):
    """attack and report under mpiexec with no usable secret: every rank learns it before any
    other traffic, one line, exit 2 (was: a traceback on two ranks and a third waiting forever)."""
    env = {k: v for k, v in os.environ.items() if k not in ("SECCOMM_PSK", "SECCOMM_PSK_FILE")}
    env["SECCOMM_INSECURE_BENCH_SECRET"] = "1"  # taken by attack; never by a compliance report
    cases = [
        (
            ["attack", "--trials", "1", "--classes", "flip-tag"],
            {"SECCOMM_PSK": "abcd"},
            "rank 0: SECCOMM_PSK",
        ),
        (["report", "--compliance", "--no-capture", "--trials", "1"], {}, "no job secret on any rank"),
    ]
    for args, extra, msg in cases:
        cmd = [mpiexec(), "-n", "3", *SECCOMM, *args]
        out = run_cmd(cmd, capture_output=True, text=True, timeout=300, env={**env, **extra}, cwd=tmp_path)
        err = [ln for ln in out.stderr.splitlines() if ln.strip()]
        assert out.returncode == 2 and out.stdout == "", (args, out.stdout[-2000:], out.stderr[-2000:])
        assert len(err) == 1 and err[0].startswith(f"seccomm {args[0]}: error: {msg}"), err


@pytest.mark.mpi
def test_bench_never_replaces_a_secret_that_is_set_but_wrong(tmp_path):
    """A secret that is set but unusable ends the run with the library's message (exit 2), with
    or without the opt-in: it is never silently replaced by the clear-text one."""
    for (env, msg), opt_in in zip(_bad_secrets(tmp_path), [True, False] * 4):
        extra = dict(SECCOMM_INSECURE_BENCH_SECRET="1") if opt_in else {}
        out = _bench_under_mpiexec(tmp_path, **extra, **env)
        err = [ln for ln in out.stderr.splitlines() if ln.strip()]
        assert out.returncode == 2, (env, out.stderr[-2000:])
        assert len(err) == 1 and err[0].startswith("seccomm bench: error: rank 0: ") and msg in err[0], err
        assert "WARNING" not in out.stderr and "Traceback" not in out.stderr
        assert "# Result" not in out.stdout


def _bad_secrets(tmp_path) -> list[tuple[dict, str]]:
    """(environment, the library's message) of every kind of secret that is set but unusable."""
    loose = tmp_path / "loose"
    loose.write_text(GOOD_HEX)
    os.chmod(loose, 0o644)
    short = tmp_path / "short"
    short.write_bytes(os.urandom(16))
    os.chmod(short, 0o600)
    return [
        (dict(SECCOMM_PSK_FILE=str(loose)), "is accessible by group or others (mode 644)"),
        (dict(SECCOMM_PSK_FILE=str(short)), "holds 16 bytes; at least 32 needed"),
        (dict(SECCOMM_PSK_FILE=str(tmp_path / "missing")), "cannot be opened: No such file"),
        (dict(SECCOMM_PSK="abcd"), "SECCOMM_PSK holds 2 bytes; at least 32 needed"),
        (dict(SECCOMM_PSK="ab" * 8), "holds 8 bytes; at least 32 needed"),
        (dict(SECCOMM_PSK="xyz"), "SECCOMM_PSK is not valid hex"),
        (dict(SECCOMM_PSK="ab" * 32), "too easy to guess offline"),
    ]


def _plain_bench(tmp_path, **env_extra):
    """``seccomm bench`` run plainly (it starts its own 2 ranks), one tiny size."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in launch.LAUNCHER_VARS + ("SECCOMM_PSK", "SECCOMM_PSK_FILE")
    }
    env.update(env_extra, TMPDIR=str(tmp_path))
    cmd = [*SECCOMM, "bench", "-b", "8", "-e", "8", "-n", "1", "-w", "0", "--suites", "aes-256-gcm"]
    return run_cmd(cmd, timeout=300, env=env, cwd=tmp_path)


@pytest.mark.mpi
def test_plain_bench_uses_the_users_secret_and_never_replaces_it(tmp_path):
    """Run plainly: a secret the user set and got wrong stops the run before any rank starts
    (exit 2, the library's message); a good one is used as it is (the header names it, the file
    is left as it was); with none, a fresh one is made, said so, and removed."""
    for env, msg in _bad_secrets(tmp_path):
        out = _plain_bench(tmp_path, **env)
        assert out.returncode == 2 and out.stdout == "", (env, out.stdout[-500:], out.stderr[-500:])
        assert out.stderr.startswith("seccomm bench: error: ") and msg in out.stderr, out.stderr
        assert out.stderr.count("\n") == 1
    mine = tmp_path / "mine"
    mine.write_text(GOOD_HEX)
    os.chmod(mine, 0o600)
    out = _plain_bench(tmp_path, SECCOMM_PSK_FILE=str(mine))
    assert out.returncode == 0 and "# job secret: SECCOMM_PSK_FILE\n" in out.stdout, out.stderr
    assert mine.read_text() == GOOD_HEX and oct(mine.stat().st_mode & 0o777) == "0o600"
    out = _plain_bench(tmp_path)
    assert out.returncode == 0 and "# job secret: a fresh secret made for this run" in out.stdout
    assert not list(tmp_path.glob("seccomm-psk-*"))  # $TMPDIR: where the fresh secret went


@pytest.mark.mpi
def test_workload_header_shows_only_what_applies(tmp_path):
    """seccomm bench --workload: the header gives the loop settings, not the size sweep's."""
    pytest.importorskip("torch")
    out = _plain_bench_args(tmp_path, "--workload", "resnet50", "--scale", "0.01", "-n", "1", "-w", "0")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "# workload resnet50 (float32 sum allreduce per DDP bucket) warmup iters: 0 iters: 1" in out.stdout
    assert "minBytes" not in out.stdout and "maxBytes" not in out.stdout


def _plain_bench_args(tmp_path, *args):
    env = {k: v for k, v in os.environ.items() if k not in launch.LAUNCHER_VARS}
    cmd = [*SECCOMM, "bench", "--suites", "aes-256-gcm", *args]
    return run_cmd(cmd, timeout=300, env={**env, "TMPDIR": str(tmp_path)}, cwd=tmp_path)


@pytest.mark.mpi
def test_bench_without_the_check_says_not_applicable(tmp_path):
    """-c 0 checks nothing: #wrong N/A in the table and the footer (as nccl-tests), JSON ``wrong``
    null, CSV empty; exit 0 (was: "#wrong 0" and "Out of bounds values : 0 OK")."""
    j, c = tmp_path / "r.json", tmp_path / "r.csv"
    out = _plain_bench_args(
        tmp_path, "-b", "8", "-e", "8", "-n", "1", "-w", "0", "-c", "0", "--json", str(j), "--csv", str(c)
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    rows = [ln.split() for ln in out.stdout.splitlines() if ln.strip()[:1].isdigit()]
    assert rows and all(r[-1] == "N/A" for r in rows), out.stdout
    assert "# Out of bounds values : N/A (not checked: --check 0)" in out.stdout
    assert all(r["wrong"] is None for r in json.loads(j.read_text())["rows"])
    assert all(r["wrong"] == "" for r in csv.DictReader(c.open()))


def test_the_summary_line_gives_a_ciphers_overhead_against_none_too():
    """Where native MPI is slower than seccomm's own plaintext path at the largest size (MPICH
    at 64 MiB on two ranks), the closing line gives the cipher's cost against ``none``
    beside its ratio to native (here 0.84x vs native, 1.31x vs none), never the first alone."""
    from seccomm.bench.table import summary_line

    def row(v, size, us, over, bw):
        return {"collective": "allreduce", "variant": v, "size_bytes": size, "time_us": {"median": us},
                "overhead_x": over, "busbw_gbps": bw}  # fmt: skip

    rows = [row("native", 4096, 8.0, 1.0, 0.5), row("native", 1 << 26, 43889.8, 1.0, 1.529)]
    rows += [row("none", 4096, 16.0, 2.0, 0.25), row("none", 1 << 26, 28228.0, 0.64, 2.377)]
    rows += [row("aes-256-gcm", 4096, 24.0, 3.0, 0.2), row("aes-256-gcm", 1 << 26, 36878.3, 0.84, 1.820)]
    aes = summary_line(rows, "allreduce", "aes-256-gcm")
    assert aes.endswith("overhead at 67108864 B: 0.84x vs native, 1.31x vs none"), aes
    assert "1.010 GB/s" in aes  # (the mean busbw over the sizes)
    assert summary_line(rows, "allreduce", "none").endswith("0.64x vs native")
    assert summary_line(rows, "allreduce", "native").endswith("1.00x vs native")
    assert summary_line(rows, "allgather", "none") is None
    alone = [r for r in rows if r["variant"] != "none"]  # (no none run: no second ratio)
    assert summary_line(alone, "allreduce", "aes-256-gcm").endswith("0.84x vs native")


def test_the_header_says_what_the_run_does():
    """A workload run's header gives its own loop (20 iterations, 5 warm-up), not the sweep's
    by-size rule; one rank is 'rank', not 'ranks'."""
    from seccomm.bench import BenchConfig

    assert BenchConfig(workload="resnet50").loop_text() == "warmup iters: 5 iters: 20"
    assert "by size" in BenchConfig().loop_text()
    out = run_cmd([*SECCOMM, "bench", "--np", "1", "-b", "4K", "-e", "4K"], timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "cores for 1 rank on this node" in out.stdout, out.stdout


def test_every_launcher_example_gives_the_job_secret():
    """Every torchrun line and every DDP hook snippet of the README and the docs says where the
    job secret comes from (every rank needs one under a launcher)."""
    root = Path(__file__).resolve().parents[2]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    snippets = 0
    for page in pages:
        text = page.read_text()
        for line in text.splitlines():
            if "torchrun --nproc" in line:
                assert "SECCOMM_PSK" in line, (page.name, line)
        at = text.find("from seccomm.torch import SecureHookState")
        while at >= 0:
            snippets += 1
            assert "SECCOMM_PSK_FILE" in text[max(0, at - 200) : at + 200], page.name
            at = text.find("from seccomm.torch import SecureHookState", at + 1)
    assert snippets >= 1, "no DDP hook snippet in the README or the docs"


def test_a_sweep_that_does_not_fit_in_memory_is_refused_before_any_rank_starts(monkeypatch, capsys):
    """The largest size's estimate (seccomm.bench.memory: per rank 3.5 S + 2.5 S per keyed suite
    + 0.5 S for none, measured) times the ranks against the node's available memory: one line,
    exit 2, nothing started (before: a traceback per rank, MemoryError)."""
    from seccomm.bench import memory

    monkeypatch.setattr(memory, "available_bytes", lambda: 2 << 30)
    assert cli.main(["bench", "-b", "256M", "-e", "256M", "--suites", "none,aes-256-gcm"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("seccomm bench: error: -e/--maxbytes 268,435,456 B needs about 3.6 GB")
        and "\n" not in err
    )
    assert "2 rank(s) x 1.8 GB" in err and "2.1 GB is available" in err, err
    assert memory.rank_bytes(1 << 20, ["aes-256-gcm"]) == (60 << 20) + 6 * (1 << 20)
    monkeypatch.setattr(memory, "available_bytes", lambda: None)  # (nothing readable: no check)
    assert memory.memory_error(1 << 40, ["aes-256-gcm"], 2) is None


@pytest.mark.mpi
def test_under_a_launcher_a_sweep_that_does_not_fit_is_refused_on_every_rank(tmp_path):
    env = dict(os.environ, SECCOMM_PSK="5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")
    out = run_cmd([mpiexec(), "-n", "2", *SECCOMM, "bench", "-b", "64G", "-e", "64G"], timeout=120, env=env)
    assert out.returncode == 2 and out.stderr.count("needs about") == 1, out.stderr[-2000:]
    assert "Traceback" not in out.stderr
