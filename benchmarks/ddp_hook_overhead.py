"""Where the secure DDP hook's step overhead comes from: four DDP variants of the digits MLP in
lockstep on the same ranks (interleaved, alternating order), median step time and ratio to
DDP's built-in hook:

- default: DDP's C++ allreduce;
- py_allreduce_hook: torch's own Python allreduce hook (a Python hook, async gloo allreduce);
- secure_none: seccomm's hook with the ``none`` suite (framing and point-to-point, no crypto);
- secure_gcm: seccomm's hook with AES-256-GCM.

    MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 mpiexec -n 2 python benchmarks/ddp_hook_overhead.py [STEPS]
"""

import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from seccomm.launch import rank_and_size
from seccomm.torch import SecureHookState, secure_allreduce_hook
from seccomm.torch.train import digits, model, timed_step

# the same job secret on every rank: random, since keys.load_secret refuses patterned ones
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")

try:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
except ValueError:
    steps = 0
if steps < 1:
    print(f"usage: {sys.argv[0]} [STEPS]: STEPS >= 1 (default 300), got {sys.argv[1]!r}", file=sys.stderr)
    sys.exit(2)
warm = min(20, steps // 2)  # warm-up steps dropped from the medians; at least half the steps are kept
rank, world = rank_and_size()
dist.init_process_group("gloo", rank=rank, world_size=world)
torch.set_num_threads(1)
xtr, ytr, _, _ = digits()
models = {}
for name in ("default", "py_allreduce_hook", "secure_none", "secure_gcm"):
    torch.manual_seed(0)
    ddp = DDP(model())
    if name == "py_allreduce_hook":
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    elif name.startswith("secure"):
        state = SecureHookState(None, "none" if name == "secure_none" else "aes-256-gcm", psk=PSK)
        ddp.register_comm_hook(state, secure_allreduce_hook)
    models[name] = (ddp, torch.optim.SGD(ddp.parameters(), lr=0.05))
times = {k: [] for k in models}
loss_fn = nn.CrossEntropyLoss()
for step in range(steps):
    lo = step * 32 % (len(ytr) - 32)
    xb, yb = xtr[lo : lo + 32], ytr[lo : lo + 32]
    for k in list(models) if step % 2 == 0 else list(models)[::-1]:
        times[k].append(timed_step(*models[k], loss_fn, xb, yb))
if rank == 0:
    base = np.median(times["default"][warm:])
    print(f"# {world} ranks, {steps} steps (first {warm} dropped), median step time")
    for k, v in times.items():
        m = np.median(v[warm:])
        print(f"{k:>18} {m * 1e3:8.3f} ms {m / base:6.2f}x")
