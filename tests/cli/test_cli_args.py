"""Every option of every ``seccomm`` command, held to the same rules and run as the real command:
numbers are range-checked (out of range, NaN, infinite: exit 2, one line naming the option),
output paths are checked before any work (exit 2, one line, nothing on standard output), every
option is described in ``--help``; ``seccomm --version``; the ``--plot`` hint is the README's."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest

from seccomm import __version__, cli, launch
from seccomm.cli.usage import PLOT_HINT

from helpers import run_cmd

SECCOMM = [sys.executable, "-m", "seccomm"]
README = Path(__file__).resolve().parents[2] / "README.md"


def _actions():
    """(command, action) for every option of every command."""
    top = cli._parser()
    sub = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        for action in parser._actions:
            if not isinstance(action, argparse._HelpAction):
                yield name, action


def _numeric(action) -> bool:
    return (
        action.type in (int, float)
        or getattr(action.type, "range_checked", False)
        or (isinstance(action.default, (int, float)) and not isinstance(action.default, bool))
    )


def test_every_numeric_option_has_a_range_checked_type():
    """A number typed int/float, or any option with a numeric default, must be parsed by
    usage.int_in/float_in/size_in (so out-of-range values fail at parse time, naming the option)."""
    loose = [
        f"{cmd} {a.option_strings[-1]}"
        for cmd, a in _actions()
        if _numeric(a) and not getattr(a.type, "range_checked", False) and a.choices is None
    ]
    assert not loose, loose


def _bad_values(action) -> list[str]:
    """Values just outside the option's bounds, and non-finite ones for real numbers."""
    t = action.type
    out = [str(t.lo - 1) if t.__name__ != "number" else str(t.lo - 0.5)]
    if t.hi is not None:
        out.append(str(t.hi + 1))
    if t.__name__ == "number":
        out += ["nan", "inf"]
    return out


CASES = [
    (cmd, a.option_strings[-1], v)
    for cmd, a in _actions()
    if getattr(a.type, "range_checked", False)
    for v in _bad_values(a)
]


def user_env(tmp_path) -> dict:
    drop = launch.LAUNCHER_VARS + ("SECCOMM_PSK", "SECCOMM_PSK_FILE")
    return {**{k: v for k, v in os.environ.items() if k not in drop}, "TMPDIR": str(tmp_path)}


def _out_of_range_ok(cmd, option, rc, out, err) -> None:
    assert rc == 2 and out == "", (out[-500:], err[-500:])
    assert err.startswith(f"seccomm {cmd}: error: argument ") and option in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize("cmd,option,value", CASES, ids=[f"{c} {o}={v}" for c, o, v in CASES])
def test_out_of_range_numbers_exit_2_naming_the_option(tmp_path, monkeypatch, capsys, cmd, option, value):
    """In process (the check is argparse's, at parse time, before anything runs); the same as
    the real command, which the test below runs for one option of each command."""
    for k in [*launch.LAUNCHER_VARS, "SECCOMM_PSK", "SECCOMM_PSK_FILE"]:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    extra = ["--compliance"] if cmd == "report" else []
    rc = cli.main([cmd, *extra, f"{option}={value}"])
    out, err = capsys.readouterr()
    _out_of_range_ok(cmd, option, rc, out, err)


#: the first out-of-range case of each command, run as the real command
FIRST = list({c: (c, o, v) for c, o, v in reversed(CASES)}.values())


@pytest.mark.parametrize("cmd,option,value", FIRST, ids=[f"{c} {o}={v}" for c, o, v in FIRST])
def test_out_of_range_numbers_exit_2_as_the_real_command(tmp_path, cmd, option, value):
    extra = ["--compliance"] if cmd == "report" else []
    proc = run_cmd(
        [*SECCOMM, cmd, *extra, f"{option}={value}"], timeout=120, env=user_env(tmp_path), cwd=tmp_path
    )
    _out_of_range_ok(cmd, option, proc.returncode, proc.stdout, proc.stderr)


#: every output option of every command: (command, option, extra arguments)
OUTPUTS = [
    ("bench", "--json", []),
    ("bench", "--csv", []),
    ("bench", "--plot", []),
    ("train", "--json", []),
    ("project", "--json", []),
    ("project", "--csv", []),
    ("project", "--plot", []),
    ("project", "--out", ["--calibrate", "BENCH"]),
    ("project", "--html", ["--diagnose", "BENCH", "--calibration", "CAL"]),
    ("report", "--output", ["--compliance", "--no-capture"]),
    ("report", "--pcap", ["--compliance"]),
    ("cluster", "--json", ["--hosts", "1"]),
    ("identity", "--out", ["node-a.test"]),
    ("tradeoff", "--json", ["--workload", "resnet50"]),
    ("tradeoff", "--csv", ["--workload", "resnet50"]),
    ("tradeoff", "--html", ["--workload", "resnet50"]),
]


def test_every_output_option_is_in_the_table():
    outputs = {
        (cmd, a.option_strings[-1])
        for cmd, a in _actions()
        if a.dest in ("json", "csv", "plot", "out", "output", "pcap", "html")
    }
    assert outputs == {(c, o) for c, o, _ in OUTPUTS}


@pytest.mark.parametrize("cmd,option,extra", OUTPUTS, ids=[f"{c} {o}" for c, o, _ in OUTPUTS])
@pytest.mark.parametrize("where", ["missing folder", "a folder", "a file as folder"])
def test_bad_output_paths_stop_before_any_work(tmp_path, cmd, option, extra, where):
    """Exit 2 and one line before anything runs: nothing on standard output, no rank started
    (no job secret was made), whatever the path's fault."""
    if cmd == "train":
        pytest.importorskip("torch")
        pytest.importorskip("sklearn")
    (tmp_path / "file").write_text("x")
    bench = tmp_path / "bench.json"  # a bench result for --calibrate (its fit comes after the check)
    bench.write_text('{"config": {}, "world_size": 2, "rows": []}')
    cal = Path(__file__).resolve().parents[2] / "docs" / "calibration-dev-2ranks.json"
    extra = [{"BENCH": str(bench), "CAL": str(cal)}.get(x, x) for x in extra]
    paths = {
        "missing folder": "/nonexistent/out.png",
        "a folder": str(tmp_path),
        "a file as folder": str(tmp_path / "file" / "o.png"),
    }
    if (cmd, option) in (
        ("report", "--pcap"),
        ("identity", "--out"),
    ):  # a folder, made if missing: a file is what it cannot use
        paths.update({"missing folder": str(tmp_path / "file"), "a folder": str(tmp_path / "file" / "sub")})
    path = paths[where]
    proc = run_cmd([*SECCOMM, cmd, *extra, option, path], timeout=120, env=user_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "", (proc.stdout[-500:], proc.stderr[-500:])
    assert proc.stderr.startswith(f"seccomm {cmd}: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert not list(tmp_path.glob("seccomm-psk-*"))


@pytest.mark.parametrize("cmd,option,extra", OUTPUTS, ids=[f"{c} {o}" for c, o, _ in OUTPUTS])
def test_unwritable_output_paths_stop_before_any_work(tmp_path, monkeypatch, capsys, cmd, option, extra):
    """A path in a folder where nothing can be made (``/proc``: even root cannot; ``os.access``
    says yes) is refused before any work: exit 2, one line.  In-process: the check comes first."""
    if cmd == "train":
        pytest.importorskip("torch")
        pytest.importorskip("sklearn")
    for k in [*launch.LAUNCHER_VARS, "SECCOMM_PSK", "SECCOMM_PSK_FILE"]:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bench.json").write_text('{"config": {}, "world_size": 2, "rows": []}')
    cal = str(Path(__file__).resolve().parents[2] / "docs" / "calibration-dev-2ranks.json")
    extra = [{"BENCH": str(tmp_path / "bench.json"), "CAL": cal}.get(x, x) for x in extra]
    path = "/proc/seccomm-pcap/sub" if option == "--pcap" else "/proc/seccomm-out.png"
    assert cli.main([cmd, *extra, option, path]) == 2
    out, err = capsys.readouterr()
    assert (
        out == "" and err.startswith(f"seccomm {cmd}: error: {option} {path}: ") and err.count("\n") == 1
    ), err
    assert "written" in err and not list(tmp_path.glob("seccomm-psk-*"))


def test_output_check_keeps_an_existing_file(tmp_path):
    """The check opens for appending: an existing file keeps its bytes; a file it made is gone."""
    from seccomm.cli.usage import check_file

    (tmp_path / "keep.json").write_text("old")
    check_file("--json", str(tmp_path / "keep.json"))
    check_file("--json", str(tmp_path / "new.json"))
    assert (tmp_path / "keep.json").read_text() == "old" and not (tmp_path / "new.json").exists()


@pytest.mark.parametrize("cmd", ["bench", "project"])
def test_plot_path_of_a_type_matplotlib_cannot_write(tmp_path, cmd):
    proc = run_cmd([*SECCOMM, cmd, "--plot", "out.txt"], timeout=120, env=user_env(tmp_path), cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "" and proc.stderr.count("\n") == 1
    try:
        import matplotlib  # noqa: F401

        assert "--plot out.txt: unknown file type 'txt'; use one of " in proc.stderr and ".png" in proc.stderr
    except ImportError:
        assert PLOT_HINT in proc.stderr


def test_plot_hint_is_the_readmes():
    """The --plot hint names the install command the README gives."""
    assert "pip install -e '.[plot]'" in PLOT_HINT and "pip install -e '.[plot]'" in README.read_text()


def test_every_option_is_described():
    bare = [f"{cmd} {a.option_strings[-1]}" for cmd, a in _actions() if not a.help]
    assert not bare, bare


def test_project_help_lists_the_presets(capsys):
    from seccomm.costmodel import PRESETS

    assert cli.main(["project", "--help"]) == 0
    out = capsys.readouterr().out
    flat = "".join(out.split())  # argparse wraps lines, also at hyphens
    assert all(f"{name}:inter-node" in flat for name in PRESETS)


def test_version():
    proc = run_cmd([*SECCOMM, "--version"], timeout=60)
    assert proc.returncode == 0 and proc.stdout == f"seccomm {__version__}\n"


def test_bench_loop_by_size_unless_given():
    """OSU-style defaults: more calls for small messages; given -n/-w are used as they are."""
    from seccomm.bench import BenchConfig

    by_size = BenchConfig()
    assert [by_size.loop(s) for s in (8, 4096, 16384, 65536, 262144, 64 << 20)] == [
        (1000, 200),
        (1000, 200),
        (256, 51),
        (64, 12),
        (20, 5),
        (20, 5),
    ]
    assert by_size.loop(None) == (20, 5)  # a workload step
    assert BenchConfig(iters=3, warmup=0).loop(4096) == (3, 0)
    assert BenchConfig(iters=100).loop(4096) == (100, 20)
    assert BenchConfig(warmup=7).loop(4096) == (1000, 7)
    assert by_size.loop_text() == (
        "warmup iters: by size (iters / 5, at least 5) iters: by size (4 MiB / S in [20, 1000])"
    )
    assert BenchConfig(iters=20, warmup=5).loop_text() == "warmup iters: 5 iters: 20"


def test_train_without_the_torch_extra_says_how_to_install_it(monkeypatch, capsys, tmp_path):
    """Checked by finding the packages, not importing them (torch takes seconds to import)."""
    import importlib.util

    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "sklearn" else found(n, *a))
    for k in [*launch.LAUNCHER_VARS, "SECCOMM_PSK", "SECCOMM_PSK_FILE"]:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["train", "--steps", "1"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "seccomm train: error: seccomm train needs the torch extra (sklearn missing): pip install "
        "torch==2.13.0 && pip install 'seccomm[torch]' (in a checkout: pip install -e '.[torch]')\n"
    )
