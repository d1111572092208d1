"""Runs under mpiexec (ranks from PMI, gloo rendezvous on MASTER_ADDR/PORT): checks the secure
DDP hook against DDP's default allreduce and a numpy fp16 reference.  Each rank writes
OUT.rank<r> (JSON list of checks)."""

from __future__ import annotations

import copy
import json
import os
import sys

import ml_dtypes
import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

from seccomm.launch import rank_and_size
from seccomm.torch import SecureHookState, secure_allreduce_hook
from seccomm.torch.hook import as_numpy

# a random job secret (keys.load_secret refuses patterned ones such as bytes(range(32)))
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")


def grads_match(rank, world, rec, device="cpu", **transport):
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(40, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 3)).to(
        device
    )
    ids = [torch.device(device).index or 0] if device != "cpu" else None
    ref = DDP(copy.deepcopy(base), bucket_cap_mb=0.01, device_ids=ids)  # several buckets
    sec = DDP(copy.deepcopy(base), bucket_cap_mb=0.01, device_ids=ids)
    state = SecureHookState(None, "aes-256-gcm", psk=PSK, chunk_bytes=4096, **transport)
    sec.register_comm_hook(state, secure_allreduce_hook)
    tag = " (grouped p2p, staged frames)" if transport else ""
    tag += " (CUDA buckets)" if device != "cpu" else ""
    opt_r = torch.optim.SGD(ref.parameters(), lr=0.1)
    opt_s = torch.optim.SGD(sec.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)
    worst_grad = 0.0
    for step in range(5):
        x = torch.randn(16, 40, generator=g).to(device)
        y = torch.randint(0, 3, (16,), generator=g).to(device)
        for m, o in ((ref, opt_r), (sec, opt_s)):
            o.zero_grad()
            nn.functional.cross_entropy(m(x), y).backward()
        for pr, ps in zip(ref.parameters(), sec.parameters()):
            worst_grad = max(worst_grad, float((pr.grad - ps.grad).abs().max()))
        opt_r.step()
        opt_s.step()
    worst_param = max(
        float((a.detach() - b.detach()).abs().max()) for a, b in zip(ref.parameters(), sec.parameters())
    )
    # float32, sums of `world` terms in another order: a few ulp of the gradient scale
    rec(f"averaged gradients equal the default hook's (|diff| <= 1e-6){tag}", worst_grad <= 1e-6, worst_grad)
    rec(f"parameters after 5 steps match (|diff| <= 1e-5){tag}", worst_param <= 1e-5, worst_param)
    rec(f"hook ran on several buckets per step{tag}", state.buckets > 5, state.buckets)


def x509_hook(rank, world, rec):
    """The hook with identity x509 (each rank's certificate from $SECCOMM_TEST_PKI, as
    seccomm.identity.make_test_identities writes them): the same gradients as DDP's own hook,
    over the torch transport (on 3 ranks, the group frames with their origin proofs)."""
    from seccomm.identity import IdentityFiles

    pki = os.environ["SECCOMM_TEST_PKI"]
    me = IdentityFiles(f"{pki}/host-{rank}.pem", f"{pki}/host-{rank}.key", f"{pki}/ca.pem")
    grads_match(rank, world, rec, identity=me, algorithm="ring")
    state = SecureHookState(None, "aes-256-gcm", psk=PSK, identity=me)
    hosts = [p.host for p in state.sc.session.identities]
    rec(
        "x509: every rank's certificate verified, in rank order",
        hosts == [f"r{r}.test" for r in range(world)],
        hosts,
    )


def grouped_staged(rank, world, rec):
    """The nccl code path on gloo: operations held and launched with batch_isend_irecv, every
    frame staged through a separate tensor (device "cpu" here, the CUDA device under nccl)."""
    grads_match(rank, world, rec, batch_p2p=True, device="cpu")
    state = SecureHookState(
        None, "chacha20-poly1305", psk=PSK, chunk_bytes=1024, batch_p2p=True, device="cpu", algorithm="ring"
    )
    x = torch.arange(5000, dtype=torch.float32) * (rank + 1)
    fut = secure_allreduce_hook(state, Bucket(x.clone()))
    got = fut.wait()
    want = torch.arange(5000, dtype=torch.float32) * sum(range(1, world + 1)) / world
    rec(
        "grouped+staged ring allreduce of 5000 floats (5 chunks/hop)",
        torch.allclose(got, want, rtol=1e-6),
        float((got - want).abs().max()),
    )


class Bucket:
    """The two methods of dist.GradBucket that the hook uses."""

    def __init__(self, t):
        self.t = t

    def buffer(self):
        return self.t


def fp16_limits(rank, world, rec):
    state = SecureHookState(None, "chacha20-poly1305", psk=PSK)
    rng = np.random.default_rng(7 + rank)
    vals = rng.uniform(-65504, 65504, 4096).astype(np.float16)
    vals[:4] = [65504, 65504, -65504, 60000]  # near the limit: sums overflow to +/-inf
    t = torch.from_numpy(vals.copy())
    out = secure_allreduce_hook(state, Bucket(t)).wait()
    allv = [torch.empty_like(t) for _ in range(world)]
    dist.all_gather(allv, torch.from_numpy(vals.copy()))
    ref = np.zeros(4096, np.float16)
    for v in allv:  # numpy fp16 reference: divide by world size first, add in rank order
        ref = (ref + (v.numpy() / np.float16(world))).astype(np.float16)
    got = out.numpy()
    finite = np.isfinite(ref)
    ok_inf = np.array_equal(np.isinf(got), np.isinf(ref))
    close = np.allclose(got[finite].astype(np.float64), ref[finite].astype(np.float64), rtol=4e-3, atol=1.0)
    rec(
        "fp16 near +/-65504 (hook: divide, then sum) reduces like the numpy fp16 reference",
        close and ok_inf,
        f"infs ours {int(np.isinf(got).sum())} ref {int(np.isinf(ref).sum())}",
    )
    # a plain sum overflows to +/-inf; small messages reduce in rank order ((x0 + x1) + x2), so
    # the numpy reference in rank order must match bit for bit, infinities included
    summed = np.empty_like(vals)
    state.sc.allreduce(vals, summed, op="sum")
    ref = allv[0].numpy().copy()
    with np.errstate(over="ignore"):
        for v in allv[1:]:
            ref = (ref + v.numpy()).astype(np.float16)
    rec(
        "fp16 sum overflows to inf exactly like numpy fp16",
        np.array_equal(summed, ref, equal_nan=True) and np.isinf(ref).any(),
        f"infs {int(np.isinf(summed).sum())} vs {int(np.isinf(ref).sum())}",
    )


def bf16_bucket(rank, world, rec):
    state = SecureHookState(None, "aes-256-gcm", psk=PSK)
    x = torch.arange(1000, dtype=torch.float32).to(torch.bfloat16) * (rank + 1)
    out = secure_allreduce_hook(state, Bucket(x.clone())).wait()
    want = torch.arange(1000, dtype=torch.float64) * sum(range(1, world + 1)) / world
    err = (out.to(torch.float64) - want).abs() / want.abs().clamp(min=1)
    rec(
        "bfloat16 bucket keeps its dtype and averages",
        out.dtype == torch.bfloat16 and float(err.max()) < 2e-2,
        float(err.max()),
    )
    arr = as_numpy(torch.zeros(3, dtype=torch.bfloat16))
    rec("bfloat16 numpy view is zero-copy ml_dtypes", arr.dtype == np.dtype(ml_dtypes.bfloat16))


def tamper(rank, world, rec):
    from seccomm import AuthenticationError, SecCommError
    from seccomm.transports import TamperTransport

    def wrap(t):  # rank 0 flips byte 5 of its first frame
        return TamperTransport(t, lambda i, peer, n: 5 if rank == 0 and i == 0 else None)

    state = SecureHookState(None, "aes-256-gcm", psk=PSK, timeout=3, wrap_transport=wrap)
    t = torch.ones(3000)
    fut = secure_allreduce_hook(state, Bucket(t))
    result = None
    try:
        result = fut.wait()
        err = None
    except Exception as e:  # torch wraps the hook's exception
        err = e
    text = f"{type(err).__name__}: {err}"
    if rank == 1:
        rec(
            "tampered bucket raises AuthenticationError on the receiver",
            err is not None and "AuthenticationError" in text or "authentication failed" in text,
            text[:200],
        )
    else:  # an error, or a correct result from untampered frames — never a corrupted one
        ok = err is not None or bool(torch.equal(result, torch.ones(3000)))
        rec("other ranks: error or the correct value, never a corrupted one", ok, text[:200])
    del AuthenticationError, SecCommError


def agreement(rank, world, rec):
    """Argument agreement and refusals over torch.distributed: ranks that pass another bcast root
    raise ArgumentMismatchError in that op; a rank that refuses its arguments stops the others in
    that op (its refusal record joins the op's all-gather), not at their deadline."""
    import time

    from seccomm import ArgumentMismatchError, PeerAbortError, SecureComm
    from seccomm.transports.torch import TorchTransport

    last = world - 1
    for n in (16, 65536):
        sc = SecureComm(TorchTransport(timeout=20), "aes-256-gcm", psk=PSK, timeout=20)
        buf = np.full(n, float(rank), np.float32)
        t0 = time.monotonic()
        try:
            sc.bcast(buf, root=last if rank == last else 0)
            err = None
        except Exception as e:  # noqa: BLE001
            err = e
        secs = time.monotonic() - t0
        ok = isinstance(err, ArgumentMismatchError) and list(err.arguments) == ["root"] and secs < 5
        detail = f"{err!r} {secs:.1f} s"
        rec(f"torch transport: bcast roots that differ, n={n}", ok and np.all(buf == rank), detail)
        sc.close()
    sc = SecureComm(TorchTransport(timeout=20), "aes-256-gcm", psk=PSK, timeout=20)
    x = np.ones(64, np.float32)
    t0 = time.monotonic()
    try:
        sc.bcast(np.frombuffer(x.tobytes(), np.float32) if rank == last else x, root=0)
        err = None
    except Exception as e:  # noqa: BLE001
        err = e
    secs = time.monotonic() - t0
    want = ValueError if rank == last else PeerAbortError
    ok = type(err) is want and (rank == last or f"rank {last} refused its arguments to bcast #1" in str(err))
    rec("torch transport: a refusal stops the others in that op", ok and secs < 5, f"{err!r} {secs:.1f} s")
    sc.close()


class Net(nn.Module):
    """Linear layers, a conv and a head: DDP buckets them in gradient-ready order."""

    def __init__(self):
        super().__init__()
        self.lins = nn.ModuleList(nn.Linear(300, 300) for _ in range(8))
        self.conv = nn.Conv2d(3, 8, 3)
        self.head = nn.Linear(300, 10)

    def forward(self, x, img):
        for lin in self.lins:
            x = lin(x)
        return self.head(x).sum() + self.conv(img).sum()


def buckets_like_ddp(rank, world, rec):
    from seccomm.torch.workloads import bucket_plan

    for cap in (None, 0.5, 2.0, 25.0):
        torch.manual_seed(0)
        m = Net()
        d = DDP(m) if cap is None else DDP(m, bucket_cap_mb=cap)
        for _ in range(3):
            d(torch.randn(4, 300), torch.randn(1, 3, 5, 5)).backward()
        got = d._get_ddp_logging_data().get("rebuilt_bucket_sizes", "")
        want = ", ".join(str(b) for b in bucket_plan(list(m.parameters()), cap))
        rec(f"bucket plan equals DDP's rebuilt buckets (cap {cap})", got == want, f"{got} vs {want}")


def main():
    out = sys.argv[1]
    rank, world = rank_and_size()
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    results = []

    def rec(name, ok, detail=""):
        results.append({"name": name, "ok": bool(ok), "detail": str(detail), "rank": rank})

    if sys.argv[2:] == ["cuda"]:  # tests/gpu/test_gpu.py: CUDA buckets under gloo (ranks may share a GPU)
        fns = (lambda r, w, rec: grads_match(r, w, rec, device="cuda:0"),)
    elif sys.argv[2:] == ["x509"]:  # tests/cli/test_torch.py: each rank's certificate
        fns = (x509_hook,)
    else:
        fns = (grads_match, grouped_staged, buckets_like_ddp, fp16_limits, bf16_bucket, agreement, tamper)
    for fn in fns:  # tamper last: it breaks gloo pairs
        try:
            fn(rank, world, rec)
        except Exception as e:  # report instead of hanging the others
            rec(f"{fn.__name__} raised", False, repr(e))
        if fn is not tamper:
            dist.barrier()
    # MPI must stay unloaded: initialising it under mpiexec, then exiting without MPI_Finalize,
    # makes the launcher kill the other ranks
    rec("the hook never loads MPI in a torch.distributed job", "mpi4py.MPI" not in sys.modules)
    with open(f"{out}.rank{rank}", "w") as f:  # no collective after a timeout has closed pairs
        json.dump(results, f)
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
