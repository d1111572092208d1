"""``seccomm train``: the same DDP training run with the default hook and the secure hook."""

from __future__ import annotations

from ..suites import SUITES
from .usage import UsageError

HELP = "Train a small model on the digits set twice, default vs secure DDP hook (needs the torch extra)."


def add_arguments(p) -> None:
    """The training run's options on parser ``p``."""
    p.add_argument("--np", type=int, default=2, help="local ranks when not started by a launcher (default 2)")
    p.add_argument("--steps", type=int, default=200, help="training steps (default 200)")
    p.add_argument("--suite", default="aes-256-gcm", help=f"one of {', '.join(SUITES)} (default aes-256-gcm)")
    p.add_argument(
        "--bucket-cap-mb", type=float, default=25.0, help="DDP bucket size cap in MiB (default 25)"
    )
    p.add_argument("--batch", type=int, default=32, help="samples per rank per step (default 32)")
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the model and its gradient buckets live (default cpu); cuda: one GPU per rank",
    )
    p.add_argument(
        "--backend",
        choices=("gloo", "nccl"),
        help="torch.distributed backend (default: nccl with --device cuda, else gloo)",
    )
    p.add_argument("--json", metavar="PATH", help="write the results as JSON")


def run(args, argv) -> int:
    """Check the arguments and this machine; run plainly, start ``--np`` local ranks (with a
    torch.distributed rendezvous on 127.0.0.1); as a rank, train.  ``UsageError`` on bad values."""
    from ..launch import free_port, relaunch, under_launcher

    if args.suite not in SUITES:
        raise UsageError(f"unknown suite {args.suite!r}; allowed: {', '.join(SUITES)}")
    if args.steps < 1 or args.batch < 1 or args.bucket_cap_mb <= 0:
        raise UsageError("steps and batch must be >= 1 and bucket-cap-mb > 0")
    if not 1 <= args.np <= 64:
        raise UsageError(f"--np {args.np} is not sensible locally: use 1..64")
    try:
        import sklearn  # noqa: F401
        import torch  # noqa: F401
    except ImportError as e:
        raise UsageError(
            f"seccomm train needs the torch extra ({e.name} missing): "
            "pip install torch==2.13.0 && pip install -e '.[torch]'"
        ) from None
    _check_device(args)
    if not under_launcher():
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
        return relaunch(args.np, argv, env)
    from ..torch.train import main_train

    return main_train(args)


def _check_device(args) -> None:
    """--device/--backend against this machine, before any rank starts."""
    import torch

    if args.backend == "nccl" and args.device != "cuda":
        raise UsageError("--backend nccl moves CUDA tensors: add --device cuda")
    if args.device != "cuda":
        return
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0:
        raise UsageError("--device cuda: torch finds no CUDA device (a CPU build of torch, or no GPU)")
    from ..launch import under_launcher

    if (args.backend or "nccl") == "nccl" and not under_launcher() and args.np > gpus:
        raise UsageError(
            f"--backend nccl needs one GPU per rank: --np {args.np} on {gpus} GPU(s); "
            "use --np <= GPUs, or --backend gloo to share them"
        )
