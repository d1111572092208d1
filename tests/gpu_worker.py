"""GPU paths of SecureComm on real ranks (run by tests/gpu/test_gpu.py under ``mpiexec -n 2``).

``staged`` (MPI): collectives on CuPy arrays run on the device engine (seccomm's kernels seal and
open on the GPU; frames cross a non-CUDA-aware MPI through host copies), torch bfloat16 CUDA
tensors (DLPack) are staged through pinned host memory -- ranks may share one GPU; then the same
under identity x509 (origin MACs on the device from 3 ranks on).  ``nccl``: the
same over NCCLTransport (one GPU per rank: NCCL refuses two ranks on one device), plus a tampered
frame.  Prints ``OK <n>`` or ``FAIL <what>`` lines from rank 0.
"""

import sys

import numpy as np
from mpi4py import MPI

import cupy as cp
from seccomm import AuthenticationError, SecCommError, SecureComm
from seccomm.transports import TamperTransport

c = MPI.COMM_WORLD
mode = sys.argv[1]
# a random job secret (keys.load_secret refuses patterned ones such as bytes(range(32)))
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")
fails = []


def check(what, ok):
    if not ok:
        fails.append(what)


def collectives(sc, tag):
    rng = np.random.default_rng(c.rank)
    for n in (1, 1000, (1 << 20) + 3):
        x = rng.standard_normal(n).astype(np.float32)
        ref = np.empty_like(x)
        c.Allreduce(x, ref)
        y = cp.empty(n, cp.float32)
        sc.allreduce(cp.asarray(x), y)
        check(f"{tag} allreduce n={n}", np.allclose(cp.asnumpy(y), ref, rtol=1e-5, atol=1e-5))
        z = cp.asarray(x)
        sc.allreduce(z, z)  # in place
        check(f"{tag} in-place allreduce n={n}", np.allclose(cp.asnumpy(z), ref, rtol=1e-5, atol=1e-5))
        blk = sc.block_counts(n)
        rs = cp.empty(blk[c.rank], cp.float32)
        sc.reduce_scatter(cp.asarray(x), rs)
        off = sum(blk[: c.rank])
        check(
            f"{tag} reduce_scatter n={n}",
            np.allclose(cp.asnumpy(rs), ref[off : off + rs.size], rtol=1e-5, atol=1e-5),
        )
        ag = cp.empty(n, cp.float32)
        sc.allgather(rs, ag)
        check(f"{tag} allgather n={n}", np.allclose(cp.asnumpy(ag), ref, rtol=1e-5, atol=1e-5))
        b = cp.asarray(x)
        sc.bcast(b, root=1)
        want = x.copy()
        c.Bcast(want, root=1)
        check(f"{tag} bcast n={n}", np.array_equal(cp.asnumpy(b), want))
    try:
        import torch

        if torch.cuda.is_available():
            t = torch.full((4099,), 1.5, dtype=torch.bfloat16, device=f"cuda:{cp.cuda.Device().id}")
            sc.allreduce(t, t)
            check(f"{tag} torch bfloat16 CUDA tensor (DLPack)", bool((t.float() == 1.5 * c.size).all()))
    except ImportError:
        pass


if mode == "staged":
    cp.cuda.Device(0).use()
    sc = SecureComm(c, "aes-256-gcm", psk=PSK, chunk_bytes=1 << 18)
    collectives(sc, "device engine/MPI")
    from seccomm.gpu.engine import CupyBackend

    check("CuPy arrays ran on the device engine", isinstance(sc.devices.auto, CupyBackend))
    sc.close()
    # identity x509 (one throw-away CA, made by rank 0): CuPy arrays still run on the device
    # engine, which from 3 ranks on computes and checks the group frames' origin MACs
    from identities import rank_identities

    ids = c.bcast(rank_identities(c.size) if c.rank == 0 else None, root=0)
    sc = SecureComm(c, "aes-256-gcm", identity=ids[c.rank], chunk_bytes=1 << 18)
    collectives(sc, "device engine/MPI x509")
    check("x509: CuPy arrays ran on the device engine", isinstance(sc.devices.auto, CupyBackend))
    sc.close()
    c.Barrier()  # (rank 0 removes the identities' folder as it exits)
else:
    from seccomm.transports.nccl import NCCLTransport

    t = NCCLTransport.from_mpi(c, timeout=30)
    sc = SecureComm(t, "chacha20-poly1305", psk=PSK, chunk_bytes=1 << 18)
    collectives(sc, "NCCL")
    sc.close()
    # rank 1 flips a byte of the first frame it sends: the rank that receives it (any world size)
    # raises AuthenticationError naming rank 1; no rank returns a wrong sum
    t2 = NCCLTransport.from_mpi(c, timeout=5)
    wrap = (
        (lambda tr: TamperTransport(tr, lambda i, peer, n: -1 if i == 0 else None)) if c.rank == 1 else None
    )
    sc = SecureComm(t2, "aes-256-gcm", psk=PSK, wrap_transport=wrap)
    x = cp.ones(4096, cp.float32)
    named = False
    try:
        sc.allreduce(x, x)
        check(f"NCCL tamper: rank {c.rank} returned a correct sum", bool((x == c.size).all()))
    except AuthenticationError as e:
        named = e.peer == 1
    except SecCommError:
        pass
    check("NCCL tampered frame: some rank named rank 1", any(c.allgather(named)))
    sc.close()
allf = c.gather(fails, root=0)
if c.rank == 0:
    flat = [f for part in allf for f in part]
    print("\n".join(f"FAIL {f}" for f in flat) or "OK", flush=True)
