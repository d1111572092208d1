"""``seccomm bench``: arguments, their checks into a :class:`~seccomm.bench.BenchConfig`, and
the start of the ranks (its own ``mpiexec``, or the launcher's ranks).

Every value is checked before any rank starts: numbers by range (their argparse types), names
against the registries, options that do not apply to the run asked for (sweep options with
``--workload``, ``--scale`` without it), and output paths (:func:`check_paths`).
"""

from __future__ import annotations

import os

from ..bench import DEFAULT_SUITES, BenchConfig
from ..collectives import COLLECTIVES
from ..dtypes import DTYPES, FLOAT_NAMES, OPS
from ..suites import SUITES
from .usage import (
    UsageError,
    add_oversubscribe,
    check_cores,
    check_file,
    check_outputs,
    flag,
    float_in,
    given,
    int_in,
    launcher_np,
    plot_suffixes,
    size_in,
)

HELP = "Benchmark secure collectives against native MPI, size by size (nccl-tests style)."
#: the sweep's options: they do not apply to --workload (parsed with default None)
SWEEP = {"minbytes": 8, "maxbytes": 64 << 20, "stepfactor": 2, "collective": "allreduce", "root": 0}
SWEEP_FLAGS = {"minbytes": "-b", "maxbytes": "-e", "stepfactor": "-f", "dtype": "-d", "op": "-o"}
DEFAULT_NP = 2


def add_arguments(p) -> None:
    """The bench's options on parser ``p``."""
    from ..comm import ALGORITHMS, ENCRYPT_POLICIES

    p.add_argument(
        "-b", "--minbytes", type=size_in(1), help="smallest size S in bytes, K/M/G suffixes (default 8)"
    )
    p.add_argument("-e", "--maxbytes", type=size_in(1), help="largest size S in bytes (default 64M)")
    p.add_argument(
        "-f", "--stepfactor", type=int_in(2, 1 << 20), help="multiply the size by this (default 2)"
    )
    p.add_argument(
        "-n",
        "--iters",
        type=int_in(1, 10**6),
        help="timed iterations per size (default: by size, as OSU: 4 MiB / S within [20, 1000]; "
        "a workload step: 20)",
    )
    p.add_argument(
        "-w",
        "--warmup",
        type=int_in(0, 10**6),
        help="warm-up iterations per size (default: iters / 5, at least 5)",
    )
    p.add_argument(
        "-c",
        "--check",
        type=int_in(0, 1),
        default=1,
        help="check results against native MPI: 0/1 (default 1)",
    )
    p.add_argument("-d", "--dtype", help=f"element type: {', '.join(DTYPES)} (default float32)")
    p.add_argument("-o", "--op", help=f"reduction: {', '.join(OPS)} (default sum)")
    p.add_argument("--collective", help=f"{'|'.join(COLLECTIVES)}|all, or a comma list (default allreduce)")
    p.add_argument("--suites", default=DEFAULT_SUITES, help=f"comma list (default {DEFAULT_SUITES})")
    p.add_argument(
        "--algorithm", default="auto", choices=ALGORITHMS, help="allreduce algorithm (default auto)"
    )
    p.add_argument(
        "--encrypt", default="all", choices=ENCRYPT_POLICIES, help="encrypt every hop or inter-node hops only"
    )
    p.add_argument(
        "--chunk-bytes",
        type=size_in(16, (1 << 31) - 65),
        default=1 << 20,
        help="frame payload size (default 1M)",
    )
    p.add_argument(
        "--identity",
        default="psk",
        choices=("psk", "x509"),
        help="x509: also run each suite with per-rank certificates (variant SUITE+x509), beside psk; "
        "without SECCOMM_CERT_FILE/KEY_FILE/CA_FILE a throw-away CA is made for the run (default psk)",
    )
    p.add_argument("--root", type=int_in(0, 1 << 24), help="bcast root (default 0)")
    p.add_argument(
        "--timeout",
        type=float_in(0, 1e6, lo_open=True),
        default=60.0,
        help="seconds any wait may block (default 60)",
    )
    p.add_argument("--json", metavar="PATH", help="write machine info, config and rows as JSON")
    p.add_argument("--csv", metavar="PATH", help="write one line per (collective, size, variant)")
    p.add_argument("--plot", metavar="PATH.png", help="plot overhead and busbw vs size (needs matplotlib)")
    p.add_argument(
        "--np", type=int_in(1), help=f"local ranks when not started by a launcher (default {DEFAULT_NP})"
    )
    add_oversubscribe(p)
    p.add_argument(
        "--workload",
        metavar="NAME",
        help="one training step's DDP gradient traffic: resnet50, bert-large, gpt2-xl, llama2-7b",
    )
    p.add_argument(
        "--scale",
        type=float_in(0, 1, lo_open=True),
        help="with --workload: fraction of every bucket to run (default: up to 256 MiB a step)",
    )
    p.add_argument(
        "--bucket-cap-mb",
        type=float_in(0, 1e6, lo_open=True),
        help="with --workload: DDP bucket cap (default: DDP's, 25 MiB, first bucket 1 MiB)",
    )


def run(args, argv) -> int:
    """Check the arguments; run plainly, start ``--np`` local ranks running ``python -m seccomm
    ARGV``; as a rank, run the sweep.  Returns the exit status; ``UsageError`` on bad values."""
    from ..launch import relaunch, under_launcher

    cfg = config_from_args(args)
    if not under_launcher():
        if cfg.root >= cfg.np:
            raise UsageError(f"--root {cfg.root} is not a rank of --np {cfg.np} (0..{cfg.np - 1})")
        if cfg.encrypt == "inter-node":
            raise UsageError(
                "--encrypt inter-node: the ranks this starts are all on this machine, so no hop would be "
                "encrypted; use --encrypt all, or start ranks on several nodes with your own launcher"
            )
        check_outputs(lambda: check_paths(cfg))
        check_cores(cfg.np, args.oversubscribe, "seccomm bench")
        check_memory(cfg, cfg.np)
        return relaunch(cfg.np, argv, prog="seccomm bench", identity=cfg.identity)
    launcher_np(args.np)
    check_outputs(lambda: check_paths(cfg))
    from ..bench.runner import main_ranks

    return main_ranks(cfg)


def config_from_args(a) -> BenchConfig:
    """Validate parsed arguments into a :class:`BenchConfig`; ``UsageError`` on bad values."""
    _check_applies(a)
    dtype, op = a.dtype or "float32", a.op or "sum"
    _check_dtype_op(dtype, op)
    coll = a.collective or "allreduce"
    colls = (
        list(COLLECTIVES) if coll == "all" else _choice_list(coll, list(COLLECTIVES) + ["all"], "collective")
    )
    cfg = BenchConfig(
        minbytes=SWEEP["minbytes"] if a.minbytes is None else a.minbytes,
        maxbytes=SWEEP["maxbytes"] if a.maxbytes is None else a.maxbytes,
        stepfactor=a.stepfactor or SWEEP["stepfactor"],
        iters=a.iters,
        warmup=a.warmup,
        check=a.check,
        dtype=dtype,
        op=op,
        collectives=colls,
        suites=_choice_list(a.suites, list(SUITES), "suite"),
        algorithm=a.algorithm,
        encrypt=a.encrypt,
        chunk_bytes=a.chunk_bytes,
        root=a.root or 0,
        timeout=a.timeout,
        json=a.json,
        csv=a.csv,
        plot=a.plot,
        np=a.np or DEFAULT_NP,
        workload=a.workload,
        scale=a.scale,
        bucket_cap_mb=a.bucket_cap_mb,
        identity=a.identity,
    )
    for check in (_check_sizes, _check_np, _check_workload, _check_algorithm):
        check(cfg)
    return cfg


def _check_algorithm(cfg: BenchConfig) -> None:
    """``--algorithm`` chooses the allreduce algorithm only (``SecureComm.algorithm``): with any
    other collective asked for it would be ignored, so it is an error."""
    other = [c for c in cfg.collectives if c != "allreduce"]
    if cfg.algorithm != "auto" and other:
        algs = {c: list(COLLECTIVES[c].algorithms) for c in other}
        runs = "; ".join(f"{c} runs {' or '.join(a)}{' by size' * (len(a) > 1)}" for c, a in algs.items())
        raise UsageError(
            f"--algorithm {cfg.algorithm} applies to allreduce only ({runs}): "
            f"use --collective allreduce, or leave --algorithm out"
        )


def _check_applies(a) -> None:
    """Options given that the run asked for would ignore: sweep options with ``--workload``,
    workload options without it."""
    if a.workload:
        extra = given(a, *SWEEP)
        if extra:
            names = ", ".join(SWEEP_FLAGS.get(n, flag(n)) for n in extra)
            raise UsageError(
                f"{names}: not used by --workload, which runs the model's DDP buckets (allreduce)"
            )
    else:
        extra = given(a, "scale", "bucket_cap_mb")
        if extra:
            raise UsageError(f"{', '.join(map(flag, extra))} applies to --workload runs only")


def _choice_list(text, allowed, what):
    items = list(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))  # dedupe, keep order
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise UsageError(f"unknown {what} {','.join(bad) or repr(text)}; allowed: {', '.join(allowed)}")
    return items


def _check_dtype_op(dtype: str, op: str) -> None:
    if dtype not in DTYPES:
        raise UsageError(f"unknown dtype {dtype!r}; allowed: {', '.join(DTYPES)}")
    if op not in OPS:
        raise UsageError(f"unknown op {op!r}; allowed: {', '.join(OPS)}")
    if op == "avg" and dtype not in FLOAT_NAMES:
        raise UsageError(f"op avg needs a floating-point dtype ({', '.join(FLOAT_NAMES)})")


def _check_sizes(cfg: BenchConfig) -> None:
    """Sizes: minbytes <= maxbytes, whole elements (the types checked the ranges)."""
    isz = DTYPES[cfg.dtype][0].itemsize
    if cfg.minbytes > cfg.maxbytes:
        raise UsageError(f"minbytes ({cfg.minbytes}) is larger than maxbytes ({cfg.maxbytes})")
    for opt, v in (("-b/--minbytes", cfg.minbytes), ("-e/--maxbytes", cfg.maxbytes)):
        if v % isz:
            raise UsageError(f"{opt} {v} is not a multiple of the {cfg.dtype} size ({isz} bytes)")


def check_paths(cfg: BenchConfig) -> None:
    """Every output file can be written (``--plot``: a type matplotlib writes), before any work."""
    for opt, path in (("--json", cfg.json), ("--csv", cfg.csv)):
        if path:
            check_file(opt, path)
    if cfg.plot:
        check_file("--plot", cfg.plot, plot_suffixes())


def _check_np(cfg: BenchConfig) -> None:
    cores = os.cpu_count() or 1
    if not 1 <= cfg.np <= max(64, 8 * cores):
        raise UsageError(
            f"--np {cfg.np} is not sensible on {cores} cores: use 1..{max(64, 8 * cores)} "
            f"locally, or your own launcher (mpiexec -n N seccomm bench) across nodes"
        )


def check_memory(cfg: BenchConfig, local_ranks: int) -> None:
    """The sweep's largest size fits this node's free memory (:mod:`seccomm.bench.memory`: an
    estimate per rank, times the ranks started here), else ``UsageError`` before any rank
    starts.  A workload run is sized by its model and not checked here."""
    from ..bench.memory import memory_error

    why = None if cfg.workload else memory_error(cfg.maxbytes, cfg.suites, local_ranks)
    if why:
        raise UsageError(why)


def _check_workload(cfg: BenchConfig) -> None:
    """``--workload``: torch installed, a known model, float32 sum (DDP's gradient traffic)."""
    if not cfg.workload:
        return
    try:
        from ..torch.workloads import WORKLOADS
    except ImportError:
        raise UsageError(
            "--workload needs the torch extra: pip install torch==2.13.0 && pip install 'seccomm[torch]' "
            "(in a checkout: pip install -e '.[torch]')"
        ) from None
    if cfg.workload not in WORKLOADS:
        raise UsageError(f"unknown workload {cfg.workload!r}; allowed: {', '.join(WORKLOADS)}")
    if cfg.dtype != "float32" or cfg.op != "sum":
        raise UsageError("--workload runs float32 sum allreduces (DDP's gradient traffic)")
