"""The ``seccomm train`` run (every rank): one small MLP on scikit-learn's handwritten digits
(``load_digits``, shipped inside the package: no download), trained twice in lockstep — DDP's
default allreduce and the secure hook — from the same seed, on the same data order, so the two
step times are measured under the same machine conditions and the final parameters can be
compared element by element.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ..launch import rank_and_size
from .hook import SecureHookState, secure_allreduce_hook


def digits(seed: int = 0):
    """(x_train, y_train, x_test, y_test): 1,797 8x8 images scaled to [0, 1]; 1,437 train / 360 test."""
    from sklearn.datasets import load_digits

    d = load_digits()
    x = torch.tensor(d.data / 16.0, dtype=torch.float32)
    y = torch.tensor(d.target, dtype=torch.int64)
    perm = torch.from_numpy(np.random.default_rng(seed).permutation(len(y)))
    x, y = x[perm], y[perm]
    n = int(0.8 * len(y))
    return x[:n], y[:n], x[n:], y[n:]


def model() -> nn.Module:
    return nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def _secret(device) -> bytes:
    """The job secret on every rank (collective): the one each rank was given, or, when no rank
    has one and every rank opts in, a benchmark-only secret broadcast in the clear (see
    :mod:`seccomm.bench.secret`).  Raises ``BenchSecretError`` on every rank otherwise."""
    from ..bench.secret import decide, local_secret, opted_in, warn_clear_secret
    from ..keys import random_secret

    mine, rank = local_secret(), dist.get_rank()
    flags = torch.tensor([mine.state, int(opted_in())], dtype=torch.int32, device=device)
    every = [torch.empty_like(flags) for _ in range(dist.get_world_size())]
    dist.all_gather(every, flags)
    if not decide(rank, mine, [int(f[0]) for f in every], [int(f[1]) for f in every]):
        return mine.secret
    t = torch.from_numpy(np.frombuffer(random_secret(), np.uint8).copy()).to(device)
    dist.broadcast(t, 0)
    warn_clear_secret(rank)
    return t.cpu().numpy().tobytes()


def train_device(args, rank: int) -> torch.device:
    """cpu, or this rank's GPU: LOCAL_RANK under torchrun, else rank modulo the GPUs."""
    if getattr(args, "device", "cpu") != "cuda":
        return torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", rank % torch.cuda.device_count()))
    torch.cuda.set_device(local)
    return torch.device("cuda", local)


def main_train(args) -> int:
    rank, world = rank_and_size()
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    device = train_device(args, rank)
    backend = getattr(args, "backend", None) or ("nccl" if device.type == "cuda" else "gloo")
    dist.init_process_group(backend, rank=rank, world_size=world)
    torch.set_num_threads(1)
    from ..bench.secret import BenchSecretError

    try:
        res = train(args, rank, world, device)
        res["device"], res["backend"] = str(device.type), backend
    except BenchSecretError as e:  # every rank: no usable common secret; one rank says why
        if e.speaker:
            print(f"seccomm train: error: {e}", file=sys.stderr, flush=True)
        return 2
    finally:
        dist.destroy_process_group()
    if rank == 0:
        report(res)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(res, f, indent=1)
    return 0


def timed_step(ddp, opt, loss_fn, xb, yb) -> float:
    """One training step after a barrier (all ranks start together); its wall time in seconds
    (on a GPU, until the device has finished it)."""
    dist.barrier()
    if xb.is_cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    loss_fn(ddp(xb), yb).backward()
    opt.step()
    if xb.is_cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def train(args, rank: int, world: int, device=None) -> dict:
    device = torch.device("cpu") if device is None else device
    xtr, ytr, xte, yte = (t.to(device) for t in digits())
    ids = [device.index] if device.type == "cuda" else None
    models = {}
    for name in ("default", "secure"):
        torch.manual_seed(0)
        ddp = DDP(model().to(device), bucket_cap_mb=args.bucket_cap_mb, device_ids=ids)
        if name == "secure":
            state = SecureHookState(
                None,
                args.suite,
                psk=_secret(device),
                transport=getattr(args, "transport", "auto"),
                identity=getattr(args, "identity", "psk"),
            )
            ddp.register_comm_hook(state, secure_allreduce_hook)
        models[name] = (ddp, torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9))
    times = {k: np.zeros(args.steps) for k in models}
    gb = args.batch * world
    order = np.random.default_rng(1234).permutation(len(ytr))
    loss_fn = nn.CrossEntropyLoss()
    for step in range(args.steps):
        lo = (step * gb) % (len(ytr) - gb + 1)
        idx = torch.from_numpy(order[lo + rank * args.batch : lo + (rank + 1) * args.batch]).to(device)
        xb, yb = xtr[idx], ytr[idx]
        for k in ("default", "secure") if step % 2 == 0 else ("secure", "default"):
            times[k][step] = timed_step(*models[k], loss_fn, xb, yb)
    out = {
        "world_size": world,
        "steps": args.steps,
        "suite": args.suite,
        "identity": getattr(args, "identity", "psk"),
        "secure_transport": state.transport,
        "bucket_cap_mb": args.bucket_cap_mb,
        "batch_per_rank": args.batch,
        "variants": {},
    }
    for k, (ddp, _) in models.items():
        t = torch.from_numpy(times[k]).to(device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)  # a step lasts until the slowest rank is done
        t = t.cpu()
        with torch.no_grad():
            m = ddp.module
            loss = float(loss_fn(m(xtr), ytr))
            acc = float((m(xte).argmax(1) == yte).float().mean())
        out["variants"][k] = {
            "step_ms_median": float(np.median(t.numpy()) * 1e3),
            "step_ms_p90": float(np.percentile(t.numpy(), 90) * 1e3),
            "final_train_loss": loss,
            "test_accuracy": acc,
        }
    pa = [p.detach() for p in models["default"][0].module.parameters()]
    pb = [p.detach() for p in models["secure"][0].module.parameters()]
    out["max_abs_param_diff"] = max(float((a - b).abs().max()) for a, b in zip(pa, pb))
    out["bitwise_equal"] = all(torch.equal(a, b) for a, b in zip(pa, pb))
    out["overhead_x"] = (
        out["variants"]["secure"]["step_ms_median"] / out["variants"]["default"]["step_ms_median"]
    )
    out["parameters"] = sum(p.numel() for p in pa)
    return out


def report(r: dict, file=sys.stdout) -> None:
    v = r["variants"]
    print(
        f"# seccomm train: digits MLP ({r['parameters']} parameters), {r['world_size']} ranks, "
        f"{r['steps']} steps, batch {r['batch_per_rank']}/rank, bucket_cap_mb {r['bucket_cap_mb']}, "
        f"suite {r['suite']}, identity {r.get('identity', 'psk')}, {r.get('device', 'cpu')}/"
        f"{r.get('backend', 'gloo')}, secure frames "
        f"over {r.get('secure_transport', 'torch')}",
        file=file,
    )
    print(
        f"# {'hook':>8} {'step median [ms]':>17} {'step p90 [ms]':>14} {'train loss':>11} {'test acc':>9}",
        file=file,
    )
    for k in ("default", "secure"):
        x = v[k]
        print(
            f"  {k:>8} {x['step_ms_median']:17.3f} {x['step_ms_p90']:14.3f} "
            f"{x['final_train_loss']:11.5f} {x['test_accuracy']:9.4f}",
            file=file,
        )
    same = (
        "bitwise equal (same reduction order)"
        if r["bitwise_equal"]
        else "not bitwise equal: the secure hook sums in a different order than gloo"
    )
    print(f"# overhead (secure / default step time): {r['overhead_x']:.2f}x", file=file)
    print(f"# final parameters: max |default - secure| = {r['max_abs_param_diff']:.3g}, {same}", file=file)
