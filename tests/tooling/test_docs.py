"""The project's files describe the current state: no issue numbers, development sessions, run
dates, commit hashes or pointers into a development log; the README stays short.  History lives in
git and CHANGELOG.md.  (docs/install.md, "Building these pages", builds the docs themselves with
``sphinx-build -W`` in .ci/run.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = {".py", ".md", ".c", ".h", ".cu", ".cuh", ".sh", ".csv", ".toml", ".txt"}

_ORDINALS = "first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth"
#: what a development log writes and a current-state file does not
EVERYWHERE = {
    "an issue number": re.compile(r"\bissue ?(#|no\.? ?)?\d+|\bissues #?\d+(,| and| to)", re.I),
    "a development session": re.compile(
        rf"\b(({_ORDINALS}|\d+(st|nd|rd|th)|last|next|previous) (development )?session"
        r"|development session|session of 20\d\d|end of (the|this) session)\b",
        re.I,
    ),
    "a development-log section": re.compile(r"performance\.md,? ?(section |§ ?)?\d", re.I),
}
#: in the prose people read: no run dates, no commit hashes
IN_DOCS = {
    "a date": re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"),
    "a commit hash": re.compile(r"\bcommit `?[0-9a-f]{7,40}\b|`[0-9a-f]{7,12}`"),
}


def _files(*parts: str) -> list[Path]:
    out = []
    for part in parts:
        p = ROOT / part
        found = [p] if p.is_file() else sorted(q for q in p.rglob("*") if q.is_file())
        out += [
            q
            for q in found
            if q.suffix in SUFFIXES and "_build" not in q.parts and q != Path(__file__).resolve()
        ]
    return out


def _hits(files: list[Path], patterns: dict) -> list[str]:
    hits = []
    for f in files:
        for n, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for what, rx in patterns.items():
                m = rx.search(line)
                if m:
                    hits.append(f"{f.relative_to(ROOT)}:{n}: {what}: {m.group(0)!r}")
    return hits


def test_no_file_of_the_project_reads_like_a_development_log():
    files = _files("README.md", "docs", "seccomm", "tests", "benchmarks")
    assert len(files) > 100, "the walk found too few files: the layout changed"
    hits = _hits(files, EVERYWHERE)
    assert not hits, "\n".join(hits)


def test_the_docs_carry_no_run_dates_or_commit_hashes():
    files = _files("README.md", "docs")
    assert any(f.name == "performance.md" for f in files)
    hits = _hits(files, IN_DOCS)
    assert not hits, "\n".join(hits)


def test_the_readme_is_short():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines: move detail into docs/"


# (the sample lines are built from pieces, so that a search of the tree for such mentions does
# not find these examples)
@pytest.mark.parametrize(
    "line, what",
    [
        ("a test of " + "issue" + " 17 item 2", "an issue number"),
        ("(" + "Issue" + " #15)", "an issue number"),
        ("issues" + " 13 and 14", "an issue number"),
        ("measured in the fifth " + "session", "a development session"),
        ("as the last session found", "a development session"),
        ("see docs/performance.md 1h", "a development-log section"),
        ("docs/performance.md, section 3", "a development-log section"),
    ],
)
def test_the_patterns_catch_what_they_are_for(line, what):
    assert EVERYWHERE[what].search(line)


@pytest.mark.parametrize(
    "line",
    [
        "no key of this session was used",  # the cryptographic session of a SecureComm
        "a replayed setup from an earlier SecureComm",
        "pytest's session stops with exit status 2",
        "Hopper issues" + " 64 integer ALU operations per SM per clock",
        'docs/performance.md, "Regression gate"',
    ],
)
def test_the_patterns_leave_current_state_text_alone(line):
    assert not any(rx.search(line) for rx in EVERYWHERE.values())


@pytest.mark.parametrize(
    "line, what",
    [
        ("run on 2026-12-03", "a date"),
        ("at commit `2d3b7f6`", "a commit hash"),
        ("(`c4a4cb5`)", "a commit hash"),
    ],
)
def test_the_doc_patterns_catch_dates_and_hashes(line, what):
    assert IN_DOCS[what].search(line)
