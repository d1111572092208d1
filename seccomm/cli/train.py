"""``seccomm train``: the same DDP training run with the default hook and the secure hook."""

from __future__ import annotations

import importlib.util

from ..suites import SUITES
from .usage import UsageError, check_cores, check_file, check_outputs, float_in, int_in, launcher_np

HELP = "Train a small model on the digits set twice, default vs secure DDP hook (needs the torch extra)."
DEFAULT_NP = 2


def add_arguments(p) -> None:
    """The training run's options on parser ``p``."""
    p.add_argument(
        "--np", type=int_in(1, 64), help=f"local ranks when not started by a launcher (default {DEFAULT_NP})"
    )
    p.add_argument("--steps", type=int_in(1, 10**7), default=200, help="training steps (default 200)")
    p.add_argument(
        "--suite",
        default="aes-256-gcm",
        choices=list(SUITES),
        help="suite of the secure hook (default aes-256-gcm)",
    )
    p.add_argument(
        "--bucket-cap-mb",
        type=float_in(0, 1e6, lo_open=True),
        default=25.0,
        help="DDP bucket size cap in MiB (default 25)",
    )
    p.add_argument("--batch", type=int_in(1, 1437), default=32, help="samples per rank per step (default 32)")
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
    p.add_argument(
        "--transport",
        choices=("auto", "mpi", "torch"),
        default="auto",
        help="what carries the secure hook's frames (default auto: MPI point-to-point where the "
        "ranks are MPI ranks and the backend is gloo, else the backend's own point-to-point)",
    )
    p.add_argument(
        "--identity",
        choices=("psk", "x509"),
        default="psk",
        help="x509: the secure hook's ranks known by their certificates (SECCOMM_CERT_FILE/KEY_FILE/"
        "CA_FILE, or a throw-away CA made for the run); default psk",
    )
    p.add_argument("--json", metavar="PATH", help="write the results as JSON")


def run(args, argv) -> int:
    """Check the arguments and this machine; run plainly, start ``--np`` local ranks (with a
    torch.distributed rendezvous on 127.0.0.1); as a rank, train.  Under an MPI launcher the
    rendezvous comes from MPI (:func:`seccomm.launch.mpi_rendezvous`) unless ``MASTER_ADDR`` and
    ``MASTER_PORT`` are set.  ``UsageError`` on bad values, before any training."""
    from ..launch import free_port, launcher, mpi_rendezvous, rank_and_size, relaunch

    for name in ("sklearn", "torch"):  # found, not imported: torch takes seconds to import
        if importlib.util.find_spec(name) is None:
            raise UsageError(
                f"seccomm train needs the torch extra ({name} missing): pip install torch==2.13.0 && "
                "pip install 'seccomm[torch]' (in a checkout: pip install -e '.[torch]')"
            )
    world = rank_and_size()[1] if launcher() else args.np or DEFAULT_NP
    if args.batch * world > 1437:
        raise UsageError(f"--batch {args.batch} x {world} ranks is more than the 1,437 training images")
    if launcher() is not None:
        launcher_np(args.np)
    check_outputs(lambda: args.json and check_file("--json", args.json))
    _check_device(args)
    if launcher() is None:
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
        check_cores(args.np or DEFAULT_NP, True, "seccomm train")  # a warning: step times only
        return relaunch(args.np or DEFAULT_NP, argv, env, prog="seccomm train", identity=args.identity)
    if launcher() == "mpi":
        mpi_rendezvous()
    from ..torch.train import main_train

    return main_train(args)


def _check_device(args) -> None:
    """--device/--backend against this machine, before any rank starts."""
    if args.backend == "nccl" and args.device != "cuda":
        raise UsageError("--backend nccl moves CUDA tensors: add --device cuda")
    if args.device != "cuda":
        return
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus == 0:
        raise UsageError("--device cuda: torch finds no CUDA device (a CPU build of torch, or no GPU)")
    from ..launch import under_launcher

    if (args.backend or "nccl") == "nccl" and not under_launcher() and (args.np or DEFAULT_NP) > gpus:
        raise UsageError(
            f"--np {args.np or DEFAULT_NP} on {gpus} GPU(s): --backend nccl needs one GPU per rank; "
            "use --np <= GPUs, or --backend gloo to share them"
        )
