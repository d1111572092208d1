"""``seccomm bench``: arguments, their checks into a :class:`~seccomm.bench.BenchConfig`, and
the start of the ranks (its own ``mpiexec``, or the launcher's ranks)."""

from __future__ import annotations

import os

from ..bench import DEFAULT_SUITES, BenchConfig
from ..collectives import COLLECTIVES
from ..dtypes import DTYPES, FLOAT_NAMES, OPS
from ..suites import SUITES
from .usage import UsageError, size_arg

HELP = "Benchmark secure collectives against native MPI, size by size (nccl-tests style)."


def add_arguments(p) -> None:
    """The bench's options on parser ``p`` (sizes as text: :func:`config_from_args` reads them)."""
    from ..comm import ALGORITHMS, ENCRYPT_POLICIES

    p.add_argument(
        "-b", "--minbytes", default="8", help="smallest size S in bytes (K/M/G suffixes; default 8)"
    )
    p.add_argument("-e", "--maxbytes", default="64M", help="largest size S in bytes (default 64M)")
    p.add_argument("-f", "--stepfactor", type=int, default=2, help="multiply the size by this (default 2)")
    p.add_argument("-n", "--iters", type=int, default=20, help="timed iterations per size (default 20)")
    p.add_argument("-w", "--warmup", type=int, default=5, help="warm-up iterations per size (default 5)")
    p.add_argument(
        "-c", "--check", type=int, default=1, help="check results against native MPI: 0/1 (default 1)"
    )
    p.add_argument(
        "-d", "--dtype", default="float32", help=f"element type: {', '.join(DTYPES)} (default float32)"
    )
    p.add_argument("-o", "--op", default="sum", help=f"reduction: {', '.join(OPS)} (default sum)")
    p.add_argument(
        "--collective",
        default="allreduce",
        help=f"{'|'.join(COLLECTIVES)}|all, or a comma list (default allreduce)",
    )
    p.add_argument("--suites", default=DEFAULT_SUITES, help=f"comma list (default {DEFAULT_SUITES})")
    p.add_argument(
        "--algorithm", default="auto", choices=ALGORITHMS, help="allreduce algorithm (default auto)"
    )
    p.add_argument(
        "--encrypt", default="all", choices=ENCRYPT_POLICIES, help="encrypt every hop or inter-node hops only"
    )
    p.add_argument("--chunk-bytes", default="1M", help="frame payload size (default 1M)")
    p.add_argument("--root", type=int, default=0, help="bcast root (default 0)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds any wait may block (default 60)")
    p.add_argument("--json", metavar="PATH", help="write machine info, config and rows as JSON")
    p.add_argument("--csv", metavar="PATH", help="write one line per (collective, size, variant)")
    p.add_argument("--plot", metavar="PATH.png", help="plot overhead and busbw vs size (needs matplotlib)")
    p.add_argument("--np", type=int, default=2, help="local ranks when not started by a launcher (default 2)")
    p.add_argument(
        "--workload",
        metavar="NAME",
        help="one training step's DDP gradient traffic: resnet50, bert-large, gpt2-xl, llama2-7b",
    )
    p.add_argument(
        "--scale", type=float, help="fraction of every bucket to run (default: up to 256 MiB a step)"
    )
    p.add_argument(
        "--bucket-cap-mb", type=float, help="DDP bucket cap (default: DDP's, 25 MiB, first bucket 1 MiB)"
    )


def run(args, argv) -> int:
    """Check the arguments; run plainly, start ``--np`` local ranks running ``python -m seccomm
    ARGV``; as a rank, run the sweep.  Returns the exit status; ``UsageError`` on bad values."""
    from ..launch import relaunch, under_launcher

    cfg = config_from_args(args)
    if not under_launcher():
        if cfg.root >= cfg.np:
            raise UsageError(f"--root {cfg.root} is not a rank of --np {cfg.np} (0..{cfg.np - 1})")
        try:
            return relaunch(cfg.np, argv)
        except FileNotFoundError as e:
            raise UsageError(str(e)) from None
    from ..bench.runner import main_ranks

    return main_ranks(cfg)


def config_from_args(a) -> BenchConfig:
    """Validate parsed arguments into a :class:`BenchConfig`; ``UsageError`` on bad values."""
    _check_dtype_op(a)
    colls = (
        list(COLLECTIVES)
        if a.collective == "all"
        else _choice_list(a.collective, list(COLLECTIVES) + ["all"], "collective")
    )
    suites = _choice_list(a.suites, list(SUITES), "suite")
    cfg = BenchConfig(
        minbytes=size_arg(a.minbytes),
        maxbytes=size_arg(a.maxbytes),
        stepfactor=a.stepfactor,
        iters=a.iters,
        warmup=a.warmup,
        check=a.check,
        dtype=a.dtype,
        op=a.op,
        collectives=colls,
        suites=suites,
        algorithm=a.algorithm,
        encrypt=a.encrypt,
        chunk_bytes=size_arg(a.chunk_bytes),
        root=a.root,
        timeout=a.timeout,
        json=a.json,
        csv=a.csv,
        plot=a.plot,
        np=a.np,
        workload=a.workload,
        scale=a.scale,
        bucket_cap_mb=a.bucket_cap_mb,
    )
    for check in (_check_sizes, _check_loop, _check_paths, _check_np, _check_workload, _check_plot):
        check(cfg)
    return cfg


def _choice_list(text, allowed, what):
    items = list(dict.fromkeys(x.strip() for x in text.split(",") if x.strip()))  # dedupe, keep order
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise UsageError(f"unknown {what} {','.join(bad) or repr(text)}; allowed: {', '.join(allowed)}")
    return items


def _check_dtype_op(a) -> None:
    if a.dtype not in DTYPES:
        raise UsageError(f"unknown dtype {a.dtype!r}; allowed: {', '.join(DTYPES)}")
    if a.op not in OPS:
        raise UsageError(f"unknown op {a.op!r}; allowed: {', '.join(OPS)}")
    if a.op == "avg" and a.dtype not in FLOAT_NAMES:
        raise UsageError(f"op avg needs a floating-point dtype ({', '.join(FLOAT_NAMES)})")


def _check_sizes(cfg: BenchConfig) -> None:
    """Sizes: 1 <= minbytes <= maxbytes, whole elements, a step factor that grows them."""
    isz = DTYPES[cfg.dtype][0].itemsize
    if cfg.minbytes < 1:
        raise UsageError("minbytes must be at least 1 byte")
    if cfg.minbytes > cfg.maxbytes:
        raise UsageError(f"minbytes ({cfg.minbytes}) is larger than maxbytes ({cfg.maxbytes})")
    for flag, v in (("-b/--minbytes", cfg.minbytes), ("-e/--maxbytes", cfg.maxbytes)):
        if v % isz:
            raise UsageError(f"{flag} {v} is not a multiple of the {cfg.dtype} size ({isz} bytes)")
    if cfg.stepfactor < 2:
        raise UsageError(f"stepfactor must be >= 2, got {cfg.stepfactor}")


def _check_loop(cfg: BenchConfig) -> None:
    """Iterations, check flag, frame size [B], deadline [s] and root rank."""
    if cfg.iters < 1 or cfg.warmup < 0:
        raise UsageError("iters must be >= 1 and warmup >= 0")
    if cfg.check not in (0, 1):
        raise UsageError(f"check must be 0 or 1, got {cfg.check}")
    if not 16 <= cfg.chunk_bytes < (1 << 31) - 64:
        raise UsageError(f"chunk-bytes must be in [16, 2G), got {cfg.chunk_bytes}")
    if cfg.timeout <= 0:
        raise UsageError("timeout must be > 0 seconds")
    if cfg.root < 0:
        raise UsageError(f"--root must be a rank >= 0, got {cfg.root}")


def _check_paths(cfg: BenchConfig) -> None:
    """Every output file's folder exists and is writable, before any rank starts."""
    for flag, path in (("--json", cfg.json), ("--csv", cfg.csv), ("--plot", cfg.plot)):
        if path:
            folder = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(folder) or not os.access(folder, os.W_OK):
                raise UsageError(f"{flag} {path}: folder {folder} does not exist or is not writable")


def _check_np(cfg: BenchConfig) -> None:
    cores = os.cpu_count() or 1
    if not 1 <= cfg.np <= max(64, 8 * cores):
        raise UsageError(
            f"--np {cfg.np} is not sensible on {cores} cores: use 1..{max(64, 8 * cores)} "
            f"locally, or your own launcher (mpiexec -n N seccomm bench) across nodes"
        )


def _check_workload(cfg: BenchConfig) -> None:
    """``--workload``: torch installed, a known model, float32 sum (DDP's gradient traffic)."""
    if not cfg.workload:
        return
    try:
        from ..torch.workloads import WORKLOADS
    except ImportError:
        raise UsageError(
            "--workload needs the torch extra: pip install torch==2.13.0 && pip install -e '.[torch]'"
        ) from None
    if cfg.workload not in WORKLOADS:
        raise UsageError(f"unknown workload {cfg.workload!r}; allowed: {', '.join(WORKLOADS)}")
    if cfg.scale is not None and not 0 < cfg.scale <= 1:
        raise UsageError(f"--scale must be in (0, 1], got {cfg.scale}")
    if cfg.bucket_cap_mb is not None and cfg.bucket_cap_mb <= 0:
        raise UsageError("--bucket-cap-mb must be > 0")
    if cfg.dtype != "float32" or cfg.op != "sum":
        raise UsageError("--workload runs float32 sum allreduces (DDP's gradient traffic)")


def _check_plot(cfg: BenchConfig) -> None:
    if cfg.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise UsageError("--plot needs matplotlib: pip install 'seccomm[plot]'") from None
