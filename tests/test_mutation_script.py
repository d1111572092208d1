"""tests/mutation.py's bookkeeping: the score per module, the survivors written down in
docs/testing.md, stale rows (mutmut itself is run by the script, not here: minutes)."""

from __future__ import annotations

import mutation


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


def test_written_down_rows_are_read_from_docs_testing_md():
    eq = mutation.equivalents()
    assert all("__mutmut_" in k and v for k, v in eq.items())
    rows = [ln for ln in mutation.DOC.read_text().splitlines() if ln.startswith("| `seccomm.")]
    assert len(eq) == len(rows)
