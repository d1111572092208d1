"""Mutation testing of seccomm's security-critical modules with mutmut.

Usage, from the README's test setup (``pip install -e '.[test]'``), in the checkout::

    python tests/mutation.py                       # every module of [tool.mutmut] only_mutate
    python tests/mutation.py seccomm/framing.py    # some of them
    python tests/mutation.py --json mut.json --keep /tmp/mut

mutmut (https://mutmut.readthedocs.io) plants one small change at a time (an operator, a constant,
a condition, an argument dropped ...) in a copy of each function and reruns the tests that reach
that function.  A mutant is *killed* when a test fails, *survives* when all pass, and has *no
tests* when no in-process test reaches it.  The run happens in a copy of the tracked files in a
temporary directory, so the checkout is never mutated; ``--keep DIR`` keeps that copy so that
``cd DIR && mutmut show NAME`` prints a survivor's diff.

Prints, per module: mutants, killed (timeouts count as killed, as in mutmut), survived, no tests,
the survivors written down as equivalent in ``tests/mutation_survivors.csv`` (a header row
``mutant,reason``, then one row per survivor: its name as ``mutmut show`` prints it and why no
test can tell it from the original), and the score = killed / (mutants - equivalent).  Then every
survivor that is not written down, every written-down name that no longer survives (stale), and
every row whose name belongs to no module of ``only_mutate``.  Exit status 1 when a module scores
below ``--target`` (default 95 %).  Takes about 90 minutes for all modules on 2 shared cores
(docs/testing.md has the measured time).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SURVIVORS = ROOT / "tests" / "mutation_survivors.csv"
KILLED = {1, 3, 36, -24, 24, 152, 255}  # mutmut.stats.status_by_exit_code: killed and timeout
NO_TESTS = {5, 33}
MUTANT = re.compile(r"[\w.ǁ]+__mutmut_\d+")


def config() -> dict:
    """``[tool.mutmut]`` of pyproject.toml (tomllib: this script needs Python 3.11+)."""
    import tomllib

    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]


def copy_checkout(dest: Path) -> None:
    """The tracked files (git ls-files), or the tree without caches where there is no git."""
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
        files = [f for f in out.stdout.decode().split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = None
    if files is None:
        skip = shutil.ignore_patterns(".git", "mutants", "__pycache__", "*.egg-info", ".venv", "venv")
        shutil.copytree(ROOT, dest, ignore=skip, dirs_exist_ok=True)
        return
    for f in files:
        if (ROOT / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dest / f)


def set_modules(work: Path, modules: list[str]) -> None:
    """Rewrite the copy's ``only_mutate`` list to ``modules``."""
    p = work / "pyproject.toml"
    text = p.read_text()
    new = "only_mutate = [" + ", ".join(json.dumps(m) for m in modules) + "]"
    text = re.sub(r"only_mutate = \[[^\]]*\]", lambda _: new, text, count=1)
    p.write_text(text)


def run_mutmut(work: Path, children: int, log: Path) -> int:
    """mutmut in ``work``; its exit status.  The MPICH shared-memory files its processes leave
    (a mutant's test process that is killed, or mutmut's own crash at exit, never reaches
    ``MPI_Finalize``) are removed once it is done (:func:`seccomm.launch.drop_orphan_shm`)."""
    from seccomm.launch import _shm_files, drop_orphan_shm

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the copy, not the checkout
    cmd = [sys.executable, "-m", "mutmut", "run", "--max-children", str(children)]
    shm = _shm_files()
    try:
        with open(log, "w") as f:
            return subprocess.run(cmd, cwd=work, env=env, stdout=f, stderr=subprocess.STDOUT).returncode
    finally:
        drop_orphan_shm(shm)


def results(work: Path, modules: list[str]) -> dict[str, dict[str, int]]:
    """{module: {mutant name: mutmut exit code}} from mutmut's ``.meta`` files."""
    out = {}
    for m in modules:
        meta = work / "mutants" / (m + ".meta")
        out[m] = json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}
    return out


def read_rows(path: Path, header: list[str]) -> list[dict[str, str]]:
    """The rows of a survivors file (CSV, first row ``header``) as dicts, each cell stripped.  A
    wrong header, a row with another number of cells, or an empty cell raises ValueError naming
    the file and line."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        got = next(reader, None)
        if got != header:
            raise ValueError(f"{path}: the first row must be {','.join(header)}, not {got}")
        rows = []
        for cells in reader:
            where = f"{path}:{reader.line_num}"
            if len(cells) != len(header):
                raise ValueError(f"{where}: {len(cells)} cells, not {len(header)} ({','.join(header)})")
            row = dict(zip(header, (c.strip() for c in cells)))
            empty = [k for k, v in row.items() if not v]
            if empty:
                raise ValueError(f"{where}: empty {', '.join(empty)}")
            rows.append(row)
    return rows


def equivalents(path: Path = SURVIVORS) -> dict[str, str]:
    """The survivors written down as equivalent: {mutant name: reason}, from ``path``.  A name
    that is not a mutmut mutant's, or one written down twice, raises ValueError."""
    eq = {}
    for row in read_rows(path, ["mutant", "reason"]):
        name = row["mutant"]
        if not MUTANT.fullmatch(name):
            raise ValueError(f"{path}: {name!r} is not a mutant name (module.x_function__mutmut_N)")
        if name in eq:
            raise ValueError(f"{path}: {name} written down twice")
        eq[name] = row["reason"]
    return eq


def orphans(eq: dict[str, str], modules: list[str]) -> list[str]:
    """The written-down names that belong to none of ``modules`` (a module removed or renamed)."""
    prefixes = tuple(dotted(m) + ".x" for m in modules)
    return sorted(k for k in eq if not k.startswith(prefixes))


def dotted(module: str) -> str:
    """``seccomm/collectives/__init__.py`` -> ``seccomm.collectives``: the prefix of its mutants."""
    return module[: -len(".py")].replace("/", ".").removesuffix(".__init__")


def score(module: str, codes: dict[str, int], eq: dict[str, str]) -> dict:
    """Counts for one module; the score leaves out the survivors written down as equivalent."""
    kind = Counter(
        "killed"
        if v in KILLED
        else "no tests"
        if v in NO_TESTS
        else "survived"
        if v == 0
        else "not run"
        if v is None
        else "other"
        for v in codes.values()
    )
    alive = sorted(k for k, v in codes.items() if v not in KILLED)
    equiv = [k for k in alive if k in eq]
    judged = len(codes) - len(equiv)
    mine = {k for k in eq if k.startswith(dotted(module) + ".x")}
    return {
        "mutants": len(codes),
        "killed": kind["killed"],
        "survived": kind["survived"],
        "no_tests": kind["no tests"],
        "other": kind["other"],
        "not_run": kind["not run"],
        "equivalent": len(equiv),
        "score": kind["killed"] / judged if judged else 1.0,
        "unexplained": [k for k in alive if k not in eq],
        "stale": sorted(mine - set(alive)),
    }


def report(per: dict[str, dict], target: float) -> int:
    """Print the table and the survivors to look at; 1 when a module is below ``target``."""
    print(f"{'module':<40} {'mutants':>7} {'killed':>7} {'surv':>5} {'no test':>7} {'equiv':>5} {'score':>7}")
    bad = 0
    for m, s in per.items():
        flag = "" if s["score"] >= target else "  < target"
        bad += bool(flag)
        print(
            f"{m:<40} {s['mutants']:>7} {s['killed']:>7} {s['survived']:>5} {s['no_tests']:>7} "
            f"{s['equivalent']:>5} {100 * s['score']:>6.1f}%{flag}"
        )
    tot = {k: sum(s[k] for s in per.values()) for k in ("mutants", "killed", "equivalent")}
    judged = max(tot["mutants"] - tot["equivalent"], 1)
    print(
        f"{'all':<40} {tot['mutants']:>7} {tot['killed']:>7} {'':>13} {tot['equivalent']:>5} "
        f"{100 * tot['killed'] / judged:>6.1f}%"
    )
    for m, s in per.items():
        if s["not_run"]:
            print(f"{m}: {s['not_run']} mutants not run (counted as not killed)")
        for k in s["unexplained"]:
            print(f"not explained: {k}")
        for k in s["stale"]:
            print(f"stale entry in {SURVIVORS.name} (killed now, or no longer generated): {k}")
    return 1 if bad else 0


def main(argv=None) -> int:
    cfg = config()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="*", help=f"default: {' '.join(cfg['only_mutate'])}")
    ap.add_argument("--json", type=Path, help="write the scores and survivors here")
    ap.add_argument("--keep", type=Path, help="run in this directory and keep it (default: a temp dir)")
    ap.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--target", type=float, default=0.95)
    a = ap.parse_args(argv)
    unknown = [m for m in a.modules if m not in cfg["only_mutate"]]
    if unknown:
        ap.error(f"not in [tool.mutmut] only_mutate: {', '.join(unknown)}")
    modules = a.modules or cfg["only_mutate"]
    eq = equivalents()  # (a malformed row stops the script here, not after the run)
    work = a.keep or Path(tempfile.mkdtemp(prefix="seccomm-mutation-"))
    if a.keep and (work / "mutants").exists():
        shutil.rmtree(work / "mutants")
    work.mkdir(parents=True, exist_ok=True)
    copy_checkout(work)
    set_modules(work, modules)
    log = work / "mutmut.log"
    print(f"mutmut in {work} (log: {log}) on {len(modules)} modules ...", flush=True)
    rc = run_mutmut(work, a.max_children, log)
    codes = results(work, modules)
    if not any(codes.values()):
        print(f"mutmut failed (exit {rc}); the end of {log}:\n" + log.read_text()[-3000:])
        return 2
    missing = sum(v is None for c in codes.values() for v in c.values())
    if missing:  # mutmut stopped early: report what it checked; the rest count as not killed
        print(f"WARNING: mutmut exited with {rc} (see {log}); {missing} mutants not run")
    elif rc != 0:  # e.g. MPI finalized in forked workers makes mutmut's own exit crash (UCX, SIGSEGV)
        print(f"note: mutmut exited with {rc} after every mutant had its result")
    per = {m: score(m, c, eq) for m, c in codes.items()}
    rc = report(per, a.target)
    for k in orphans(eq, cfg["only_mutate"]):
        print(f"stale entry in {SURVIVORS.name} (its module is not in only_mutate): {k}")
    if a.json:
        a.json.write_text(json.dumps(per, indent=1))
    if not a.keep:
        shutil.rmtree(work, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
