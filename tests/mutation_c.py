"""Mutation testing of seccomm's C and CUDA sources with universalmutator.

Usage, from the README's test setup plus ``pip install universalmutator``, in the checkout::

    python tests/mutation_c.py                          # a sample of every target (TARGETS)
    python tests/mutation_c.py --per-file 40 --seed 1   # another sample
    python tests/mutation_c.py kernels/sc_crypto.cuh --json mut_c.json

universalmutator (https://github.com/agroce/universalmutator) rewrites source text with
regular-expression rules for C (operators, constants, conditions, statements deleted ...), one
change per mutant.  The sources here give thousands of mutants each (about 18,000 for
``sc_crypto.cuh`` alone), so this script draws them in a random order (``--seed``) until
``--per-file`` of them compile (a uniform sample of the mutants that compile), and reports the
score with a 95 % Wilson interval for that whole population.  Each mutant is written into a
copy of the tracked files in a temporary directory (the checkout is never mutated), compiled
the way its tests compile it, and, when it compiles, run against the tests that exercise that
source:

- ``kernels/*``: the host-shim known-answer and property tests and the nvcc/NVRTC
  builds (``tests/gpu/test_gpu_core.py``), the emulated kernels (``tests/gpu/test_gpu_kernels_emulated.py``,
  ``tests/gpu/test_cuda_emu.py``);
- ``seccomm/pairswap/_pairswap.c``: rebuilt with ``setup.py build_ext --inplace``, then
  ``tests/unit/test_express.py`` (the compiled swap in process) and the two-rank scenarios of
  ``tests/ranks/test_collectives_mpi.py`` (real ranks: paired, express, tamper ...).

The tests of each source must pass on the unmutated copy first (else the run stops).  A mutant
that does not compile is *stillborn* (left out of the score); one that makes a test
fail, or runs past ``--timeout``, is *killed*; one that passes every test *survives*.  The
survivors found so far are written down in ``tests/mutation_survivors_c.csv`` (a header row
``file,line,code,change,equivalent,reason``, then one row per survivor: the line number, the
source line's text, the change, ``yes`` or ``no``, why); a survivor on the line of a row marked
``equivalent`` ``yes`` counts as equivalent and is left out of the score too.  Prints per file:
sampled, stillborn, killed, survived, equivalent, score and interval; then each survivor's line
and change, and each survivor counted as equivalent beside the row that made it so (check that
the row describes that change: rows name a line, not one change of it).  Rows that name a file
this script does not mutate, or a line that no longer holds their ``code`` (the source moved or
changed: renumber or drop the row), are reported as stale.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation import ROOT, copy_checkout, read_rows  # noqa: E402

SURVIVORS_C = ROOT / "tests" / "mutation_survivors_c.csv"
GPU_TESTS = [
    "tests/gpu/test_gpu_core.py", "tests/gpu/test_gpu_kernels_emulated.py", "tests/gpu/test_cuda_emu.py"
]  # fmt: skip
SWAP_TESTS = [
    "tests/unit/test_express.py", "tests/ranks/test_collectives_mpi.py", "-k", "test_express or np2"
]  # fmt: skip
#: source -> (how its tests compile it, the tests)
TARGETS = {
    "kernels/sc_crypto.cuh": ("gpu", GPU_TESTS),
    "kernels/aead.cu": ("gpu", GPU_TESTS),
    "kernels/host_shim.c": ("gpu", GPU_TESTS),
    "seccomm/pairswap/_pairswap.c": ("ext", SWAP_TESTS),
}


def generate(src: Path, out: Path) -> list[Path]:
    """Every mutant universalmutator makes of ``src`` (C rules, no compile check), in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["mutate", str(src), "c", "--noCheck", "--mutantDir", str(out)],
        check=True,
        capture_output=True,
        text=True,
    )
    return sorted(out.iterdir())


def changed_line(original: list[str], mutant: list[str]) -> tuple[int, str, str]:
    """(line number, original line, mutated line) of the single change."""
    for i, (a, b) in enumerate(zip(original, mutant)):
        if a != b:
            return i + 1, a.strip(), b.strip()
    n = min(len(original), len(mutant))
    was = original[n].strip() if n < len(original) else ""
    return n + 1, was, mutant[n].strip() if n < len(mutant) else ""


_BUILD_GPU = (
    "import sys, tempfile, pathlib; sys.path.insert(0, 'tests'); import hostcore, kernel_emu; "
    "d = pathlib.Path(tempfile.mkdtemp()); hostcore.build(d); hostcore.build_poly1305(d); kernel_emu.build(d)"
)


def compiles(work: Path, how: str, env: dict) -> bool:
    """Whether the mutated copy compiles as its tests compile it (the same compilers and flags,
    ``-Werror`` included: the host shim, the Poly1305 shim and the kernel emulator for the CUDA
    sources, the extension for ``_pairswap.c``)."""
    if how == "ext":  # (optional in setup.py: a failed build exits 0 and leaves no module)
        for old in (work / "seccomm" / "pairswap").glob("_pairswap*.so"):
            old.unlink()
        shutil.rmtree(work / "build", ignore_errors=True)  # (else its last module is copied in)
        cmd = [sys.executable, "setup.py", "build_ext", "--inplace", "--force"]
        subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        return any((work / "seccomm" / "pairswap").glob("_pairswap*.so"))
    cmd = [sys.executable, "-c", _BUILD_GPU]
    return subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True).returncode == 0


def run_tests(work: Path, tests: list[str], timeout: float, env: dict) -> str:
    """``killed`` or ``survived`` (a timeout counts as killed)."""
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *tests]
    try:
        r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return "killed"
    return "survived" if r.returncode == 0 else "killed"


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95 % Wilson score interval of a proportion ``k / n`` (Wilson 1927)."""
    if n == 0:
        return 0.0, 1.0
    p = k / n
    d = 1 + z * z / n
    c = (p + z * z / (2 * n)) / d
    h = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return max(0.0, c - h), min(1.0, c + h)


def survivors(path: Path = SURVIVORS_C) -> list[dict[str, str]]:
    """The rows of ``path``: file, line, code, change, equivalent (``yes`` or ``no``), reason.  A
    malformed row (see ``mutation.read_rows``), a line that is not a positive number, or an
    ``equivalent`` other than yes/no raises ValueError."""
    rows = read_rows(path, ["file", "line", "code", "change", "equivalent", "reason"])
    for r in rows:
        if not r["line"].isdigit() or int(r["line"]) < 1:
            raise ValueError(f"{path}: {r['file']}: line {r['line']!r} is not a line number")
        if r["equivalent"] not in ("yes", "no"):
            where = f"{path}: {r['file']}:{r['line']}"
            raise ValueError(f"{where}: equivalent is {r['equivalent']!r}, not yes or no")
    return rows


def equivalents(rows: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    """``{"FILE:LINE": row}`` of the rows marked equivalent (the first such row of a line)."""
    eq: dict[str, dict[str, str]] = {}
    for r in rows:
        if r["equivalent"] == "yes":
            eq.setdefault(f"{r['file']}:{r['line']}", r)
    return eq


def stale(rows: list[dict[str, str]], root: Path = ROOT) -> list[str]:
    """The rows that name a file not in TARGETS, or a line that does not hold their ``code``
    (leading and trailing blanks aside)."""
    out = []
    for r in rows:
        where = f"{r['file']}:{r['line']}"
        if r["file"] not in TARGETS:
            out.append(f"{where} (not a file this script mutates)")
            continue
        lines = (root / r["file"]).read_text().splitlines()
        n = int(r["line"])
        if n > len(lines):
            out.append(f"{where} (past the end of the file)")
        elif lines[n - 1].strip() != r["code"]:
            out.append(f"{where} (the line no longer reads {r['code']!r})")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", default=list(TARGETS))
    ap.add_argument("--per-file", type=int, default=30, help="mutants that compile, per file (default 30)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant's tests")
    ap.add_argument("--json", help="write every mutant's outcome here")
    args = ap.parse_args(argv)
    if shutil.which("mutate") is None:
        print("universalmutator is not installed: pip install universalmutator", file=sys.stderr)
        return 2
    rows_c = survivors()  # (a malformed row stops the script here, before any build)
    eq = equivalents(rows_c)
    for entry in stale(rows_c):
        print(f"stale entry in {SURVIVORS_C.name}: {entry}")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    rows, total = [], {"killed": 0, "survived": 0, "stillborn": 0, "equivalent": 0}
    with tempfile.TemporaryDirectory(prefix="seccomm-mut-c-") as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        copy_checkout(work)
        env["PYTHONPATH"] = str(work)
        compiles(work, "ext", env)  # (the unmutated extension, for every target's tests)
        for f in args.files:
            how, tests = TARGETS[f]
            original = (ROOT / f).read_text()
            pool = generate(ROOT / f, Path(tmp) / "mutants" / Path(f).name)
            if run_tests(work, tests, args.timeout, env) != "survived":  # (the unmutated source)
                print(f"{f}: its tests fail without any mutant: fix them first", file=sys.stderr)
                return 1
            order = random.Random(f"{args.seed}:{f}").sample(pool, len(pool))
            counts = {"killed": 0, "survived": 0, "stillborn": 0, "equivalent": 0}
            t0 = time.time()
            for m in order:
                if counts["killed"] + counts["survived"] + counts["equivalent"] >= args.per_file:
                    break
                text = m.read_text()
                line, was, now = changed_line(original.splitlines(), text.splitlines())
                (work / f).write_text(text)
                if not compiles(work, how, env):
                    outcome = "stillborn"
                else:
                    outcome = run_tests(work, tests, args.timeout, env)
                    if outcome == "survived" and f"{f}:{line}" in eq:
                        outcome = "equivalent"
                counts[outcome] += 1
                row = dict(file=f, mutant=m.name, line=line, original=was, mutated=now, outcome=outcome)
                rows.append(row)
                print(f"  {f}:{line} {outcome:<10} {was[:60]!r} -> {now[:60]!r}", flush=True)
            (work / f).write_text(original)
            if how == "ext":
                compiles(work, how, env)
            n = counts["killed"] + counts["survived"]
            lo, hi = wilson(counts["killed"], n)
            print(
                f"{f}: {len(pool):,} mutants, {sum(counts.values())} drawn: {counts['stillborn']} stillborn, "
                f"{counts['killed']} killed, {counts['survived']} survived, {counts['equivalent']} "
                f"equivalent; score {counts['killed'] / max(n, 1):.0%} (95 % interval {lo:.0%}-{hi:.0%}), "
                f"{time.time() - t0:.0f} s",
                flush=True,
            )
            for k in total:
                total[k] += counts[k]
    n = total["killed"] + total["survived"]
    lo, hi = wilson(total["killed"], n)
    print(f"all: {total}; score {total['killed'] / max(n, 1):.0%} (95 % interval {lo:.0%}-{hi:.0%})")
    for r in rows:
        if r["outcome"] == "survived":
            print(f"SURVIVED {r['file']}:{r['line']}: {r['original']!r} -> {r['mutated']!r}")
        elif r["outcome"] == "equivalent":
            row = eq[f"{r['file']}:{r['line']}"]
            print(
                f"EQUIVALENT {r['file']}:{r['line']}: {r['original']!r} -> {r['mutated']!r} "
                f"(written down: {row['change']}: {row['reason']})"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
