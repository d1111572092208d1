"""The bookkeeping of tests/mutation.py and tests/mutation_c.py: the score per module, the
survivors written down in tests/mutation_survivors.csv and tests/mutation_survivors_c.csv, stale
rows (mutmut and universalmutator themselves are run by the scripts, not here: minutes)."""

from __future__ import annotations

import csv
import subprocess

import mutation
import mutation_c
import pytest


def test_score_counts_every_status_and_leaves_out_only_written_down_survivors():
    codes = {
        "seccomm.framing.x_f__mutmut_1": 1,  # killed
        "seccomm.framing.x_f__mutmut_2": 36,  # timeout: killed, as in mutmut
        "seccomm.framing.x_f__mutmut_3": 0,  # survived, written down
        "seccomm.framing.x_f__mutmut_4": 0,  # survived
        "seccomm.framing.x_f__mutmut_5": 33,  # no tests
        "seccomm.framing.x_f__mutmut_6": None,  # not run (mutmut stopped)
    }
    eq = {"seccomm.framing.x_f__mutmut_3": "why", "seccomm.framing.x_g__mutmut_1": "gone"}
    s = mutation.score("seccomm/framing.py", codes, eq)
    assert (s["mutants"], s["killed"], s["survived"], s["no_tests"], s["not_run"]) == (6, 2, 2, 1, 1)
    assert s["equivalent"] == 1 and s["score"] == 2 / 5
    assert s["unexplained"] == [f"seccomm.framing.x_f__mutmut_{i}" for i in (4, 5, 6)]
    assert s["stale"] == ["seccomm.framing.x_g__mutmut_1"]


def test_mutants_belong_to_their_module_only():
    assert mutation.dotted("seccomm/collectives/__init__.py") == "seccomm.collectives"
    eq = {"seccomm.collectives.common.x_f__mutmut_1": "r", "seccomm.collectives.x_register__mutmut_2": "r"}
    assert mutation.score("seccomm/collectives/__init__.py", {}, eq)["stale"] == [
        "seccomm.collectives.x_register__mutmut_2"
    ]
    eq["seccomm.gone.x_f__mutmut_1"] = "r"
    assert mutation.orphans(eq, ["seccomm/collectives/__init__.py", "seccomm/collectives/common.py"]) == [
        "seccomm.gone.x_f__mutmut_1"
    ]


def data_rows(path):
    """The rows of a CSV file after its header, as the csv module reads them."""
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))[1:]


def test_every_python_survivor_row_is_read():
    eq = mutation.equivalents()
    assert len(eq) == len(data_rows(mutation.SURVIVORS)) > 0  # no row dropped, none twice
    assert all(mutation.MUTANT.fullmatch(k) and v for k, v in eq.items())


def test_every_in_process_test_file_is_one_mutmut_runs():
    """mutmut runs only the files of ``pytest_add_cli_args_test_selection``: a test file of
    tests/unit or tests/world left out of it kills no mutant in a run, however good it is (six
    world files and three unit files once were)."""
    pytest.importorskip("tomllib")
    picked = set(mutation.config()["pytest_add_cli_args_test_selection"])
    root = mutation.ROOT
    files = sorted(
        str(p.relative_to(root)) for d in ("unit", "world") for p in (root / "tests" / d).glob("test_*.py")
    )
    assert [f for f in files if f not in picked] == []
    assert all((root / f).is_file() for f in picked)  # (and none that is gone)


def test_every_python_survivor_row_names_a_mutated_module():
    pytest.importorskip("tomllib")  # (mutation.config reads pyproject.toml with it: Python 3.11+)
    assert mutation.orphans(mutation.equivalents(), mutation.config()["only_mutate"]) == []


def test_every_c_survivor_row_is_read_and_names_a_line_of_a_target():
    rows = mutation_c.survivors()
    assert len(rows) == len(data_rows(mutation_c.SURVIVORS_C)) > 0
    assert mutation_c.stale(rows) == []
    assert {r["equivalent"] for r in rows} <= {"yes", "no"}


def write(tmp_path, text):
    p = tmp_path / "survivors.csv"
    p.write_text(text, encoding="utf-8")
    return p


@pytest.mark.parametrize(
    "text, error",
    [
        ("mutant,reason\nseccomm.framing.x_f__mutmut_1,\n", "empty reason"),
        ("mutant,reason\nseccomm.framing.x_f__mutmut_1\n", "1 cells, not 2"),
        ("mutant,reason\nseccomm.framing.x_f__mutmut_1,a,b\n", "3 cells, not 2"),
        ("mutant,reason\nseccomm.framing.x_f,why\n", "not a mutant name"),
        ("mutant,reason\nseccomm.framing.x_f__mutmut_1,why\nseccomm.framing.x_f__mutmut_1,why\n", "twice"),
        ("name,reason\nseccomm.framing.x_f__mutmut_1,why\n", "the first row must be mutant,reason"),
        ("", "the first row must be"),
    ],
)
def test_a_malformed_python_row_is_refused_naming_what_is_wrong(tmp_path, text, error):
    with pytest.raises(ValueError, match=error):
        mutation.equivalents(write(tmp_path, text))


def test_a_reason_with_commas_and_quotes_is_read_whole(tmp_path):
    p = write(tmp_path, 'mutant,reason\nseccomm.framing.x_f__mutmut_1,"`a, b` for ""c"": the same"\n')
    assert mutation.equivalents(p) == {"seccomm.framing.x_f__mutmut_1": '`a, b` for "c": the same'}


HEAD_C = "file,line,code,change,equivalent,reason\n"


@pytest.mark.parametrize(
    "row, error",
    [
        ("seccomm/pairswap/_pairswap.c,12,CODE,`a` -> `b`,yes,\n", "empty reason"),
        ("seccomm/pairswap/_pairswap.c,12,CODE,`a` -> `b`,yes\n", "5 cells, not 6"),
        ("seccomm/pairswap/_pairswap.c,x12,CODE,`a` -> `b`,yes,equivalent\n", "not a line number"),
        ("seccomm/pairswap/_pairswap.c,0,CODE,`a` -> `b`,yes,equivalent\n", "not a line number"),
        ("seccomm/pairswap/_pairswap.c,12,CODE,`a` -> `b`,maybe,equivalent\n", "not yes or no"),
    ],
)
def test_a_malformed_c_row_is_refused_naming_what_is_wrong(tmp_path, row, error):
    with pytest.raises(ValueError, match=error):
        mutation_c.survivors(write(tmp_path, HEAD_C + row))


def test_only_rows_marked_equivalent_make_a_c_survivor_equivalent(tmp_path):
    rows = mutation_c.survivors(
        write(
            tmp_path,
            HEAD_C + "seccomm/pairswap/_pairswap.c,201,CODE,`-1` -> `-2`,yes,equivalent: tested < 0\n"
            "seccomm/pairswap/_pairswap.c,201,CODE,`-1` -> `-0`,no,not equivalent\n"
            "seccomm/pairswap/_pairswap.c,317,CODE,`-1` -> `-2`,no,not equivalent\n",
        )
    )
    eq = mutation_c.equivalents(rows)
    assert list(eq) == ["seccomm/pairswap/_pairswap.c:201"]
    assert eq["seccomm/pairswap/_pairswap.c:201"]["change"] == "`-1` -> `-2`"


def test_c_rows_of_another_file_or_a_line_that_moved_are_stale(tmp_path):
    (tmp_path / "seccomm").mkdir()
    (tmp_path / "seccomm" / "pairswap").mkdir()
    (tmp_path / "seccomm" / "pairswap" / "_pairswap.c").write_text("int a;\n  return -1;  \n")
    rows = mutation_c.survivors(
        write(
            tmp_path,
            HEAD_C + "seccomm/pairswap/_pairswap.c,2,return -1;,a,yes,equivalent\n"  # (blanks aside: same)
            "seccomm/pairswap/_pairswap.c,1,return -1;,a,yes,equivalent\n"
            "seccomm/pairswap/_pairswap.c,3,int a;,a,yes,equivalent\n"
            "seccomm/other.c,1,int a;,a,yes,equivalent\n",
        )
    )
    assert mutation_c.stale(rows, root=tmp_path) == [
        "seccomm/pairswap/_pairswap.c:1 (the line no longer reads 'return -1;')",
        "seccomm/pairswap/_pairswap.c:3 (past the end of the file)",
        "seccomm/other.c:1 (not a file this script mutates)",
    ]


def test_a_mutation_run_leaves_no_mpich_shared_memory(tmp_path, monkeypatch):
    """A mutant's test process killed by mutmut (or mutmut's crash at its exit) never reaches
    MPI_Finalize: the shared-memory file it leaves is removed once mutmut is done, and a file
    from before the run stays."""
    from seccomm import launch

    monkeypatch.setattr(launch, "SHM_DIR", tmp_path)
    old = tmp_path / "mpich_shm_old_0"
    old.write_bytes(b"x")

    def mutmut(cmd, **kw):  # (a run whose process left its file behind, then crashed)
        (tmp_path / "mpich_shm_3_0").write_bytes(b"x")
        return subprocess.CompletedProcess(cmd, -11)

    monkeypatch.setattr(mutation.subprocess, "run", mutmut)
    assert mutation.run_mutmut(tmp_path, 1, tmp_path / "log") == -11
    assert sorted(p.name for p in tmp_path.glob("mpich_shm_*")) == ["mpich_shm_old_0"]
