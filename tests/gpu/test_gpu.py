"""GPU kernels on a real device (``-m gpu``): frames interoperate with the CPU suites both ways,
a bad tag writes nothing, the fused hop equals the CPU path.  Skipped where CuPy finds no GPU."""

from __future__ import annotations

import os

import numpy as np
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from seccomm.gpu import available

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not available(), reason="no CUDA device for CuPy")]
CPU = {"chacha20-poly1305": ChaCha20Poly1305, "aes-256-gcm": AESGCM, "aes-256-gmac": AESGCM}
LENS = [0, 1, 15, 16, 17, 63, 64, 65, 4096, (1 << 20) + 3]


def batch(lens, aad_len=89):
    n = len(lens)
    keys = np.frombuffer(os.urandom(32 * n), np.uint8).reshape(n, 32)
    nonces = np.frombuffer(os.urandom(12 * n), np.uint8).reshape(n, 12)
    aads = np.frombuffer(os.urandom(aad_len * n), np.uint8).reshape(n, aad_len)
    offs = np.concatenate([[0], np.cumsum(lens)[:-1]]).astype(np.int64)
    fr_offs = np.concatenate([[0], np.cumsum(np.array(lens) + 16)[:-1]]).astype(np.int64)
    return keys, nonces, aads, offs, fr_offs


@pytest.mark.parametrize("suite", list(CPU))
def test_gpu_seal_opens_on_cpu_and_back(suite):
    import cupy as cp

    from seccomm.gpu import GPUAEAD, Batch

    g = GPUAEAD(suite)
    keys, nonces, aads, offs, fr_offs = batch(LENS)
    src = np.frombuffer(os.urandom(sum(LENS)), np.uint8)
    frames = cp.zeros(sum(LENS) + 16 * len(LENS), cp.uint8)
    d = {
        k: cp.asarray(v)
        for k, v in dict(
            keys=keys, nonces=nonces, aads=aads, offs=offs, fr=fr_offs, lens=np.array(LENS, np.int64)
        ).items()
    }
    g.seal(Batch(d["keys"], d["nonces"], d["aads"], cp.asarray(src), d["offs"], d["lens"], frames, d["fr"]))
    host = cp.asnumpy(frames)
    for j, n in enumerate(LENS):
        pt = src[offs[j] : offs[j] + n].tobytes()
        body_tag = host[fr_offs[j] : fr_offs[j] + n + 16].tobytes()
        aead = CPU[suite](keys[j].tobytes())
        if suite == "aes-256-gmac":
            assert body_tag[:n] == pt
            assert body_tag[n:] == aead.encrypt(nonces[j].tobytes(), b"", aads[j].tobytes() + pt)
        else:
            assert body_tag == aead.encrypt(nonces[j].tobytes(), pt, aads[j].tobytes())
    bad = host.copy()
    bad[fr_offs[3]] ^= 1  # tamper chunk 3
    out = cp.full(sum(LENS), 0x5A, cp.uint8)
    ok = cp.asnumpy(
        g.open(Batch(d["keys"], d["nonces"], d["aads"], cp.asarray(bad), d["fr"], d["lens"], out, d["offs"]))
    )
    outh = cp.asnumpy(out)
    for j, n in enumerate(LENS):
        seg = outh[offs[j] : offs[j] + n]
        if j == 3:
            assert ok[j] == 0 and (seg == 0x5A).all()
        else:
            assert ok[j] == 1 and (seg == src[offs[j] : offs[j] + n]).all()


def test_gpu_macs_are_gmac_and_check_each_tag():
    """The origin MACs' launch on the device: each chunk's GMAC alone (``aads`` of width 0) is
    ``cryptography``'s; with ``check``, ok 0 exactly for an altered chunk or tag."""
    import cupy as cp

    from seccomm.gpu import GPUAEAD, Batch

    keys, nonces, aads, offs, _ = batch(LENS, aad_len=0)
    src = np.frombuffer(os.urandom(sum(LENS)), np.uint8)
    d = [cp.asarray(a) for a in (keys, nonces, aads, src, offs, np.array(LENS, np.int64))]
    tags = cp.zeros((len(LENS), 16), cp.uint8)
    g = GPUAEAD("aes-256-gmac")
    g.macs(Batch(*d, None, None), tags)
    host = cp.asnumpy(tags)
    for j, n in enumerate(LENS):
        want = AESGCM(keys[j].tobytes()).encrypt(
            nonces[j].tobytes(), b"", src[offs[j] : offs[j] + n].tobytes()
        )
        assert host[j].tobytes() == want, n
    host[4, 0] ^= 1  # chunk 4's tag
    bad = src.copy()
    bad[offs[9] + 12345] ^= 2  # chunk 9's data
    d[3] = cp.asarray(bad)
    ok = cp.asnumpy(g.macs(Batch(*d, None, None), cp.asarray(host), check=True))
    assert [j for j in range(len(LENS)) if ok[j] == 0] == [4, 9], ok


@pytest.mark.parametrize("suite", ["chacha20-poly1305", "aes-256-gcm"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_fused_hop_equals_cpu(suite, dtype):
    import cupy as cp

    from seccomm.dtypes import resolve_dtype
    from seccomm.gpu import GPUAEAD, Hop

    dt = resolve_dtype(dtype)
    counts = [1, 100, 65536, 300001]
    lens = [c * dt.itemsize for c in counts]
    kin, nin, ain, offs, fr_offs = batch(lens)
    kout, nout, aout, _, _ = batch(lens)
    rng = np.random.default_rng(0)
    recv = [rng.uniform(-100, 100, c).astype(dt) for c in counts]
    own = np.concatenate([rng.uniform(-100, 100, c).astype(dt) for c in counts]).view(np.uint8)
    frames_in = b"".join(
        CPU[suite](kin[j].tobytes()).encrypt(nin[j].tobytes(), recv[j].tobytes(), ain[j].tobytes())
        for j in range(len(counts))
    )
    g = GPUAEAD(suite)
    L = cp.asarray(np.array(lens, np.int64))
    out = cp.zeros(len(frames_in), cp.uint8)
    acc = cp.zeros(own.size, cp.uint8)
    ok = g.fused_hop(
        Hop(
            cp.asarray(kin),
            cp.asarray(nin),
            cp.asarray(ain),
            cp.asarray(np.frombuffer(frames_in, np.uint8)),
            cp.asarray(fr_offs),
            cp.asarray(own),
            cp.asarray(offs),
            cp.asarray(kout),
            cp.asarray(nout),
            cp.asarray(aout),
            out,
            cp.asarray(fr_offs),
            L,
            dtype,
            acc,
        ),
    )
    assert (cp.asnumpy(ok) == 1).all()
    outh, acch = cp.asnumpy(out), cp.asnumpy(acc)
    for j, c in enumerate(counts):
        mine = own[offs[j] : offs[j] + lens[j]].view(dt)
        want = (mine + recv[j]).astype(dt)
        assert acch[offs[j] : offs[j] + lens[j]].tobytes() == want.tobytes()
        frame = CPU[suite](kout[j].tobytes()).encrypt(nout[j].tobytes(), want.tobytes(), aout[j].tobytes())
        assert outh[fr_offs[j] : fr_offs[j] + lens[j] + 16].tobytes() == frame


def _run_worker(mode, ranks=2):
    import subprocess
    import sys
    from helpers import TESTS, mpiexec

    out = subprocess.run(
        [mpiexec(), "-n", str(ranks), sys.executable, str(TESTS / "gpu_worker.py"), mode],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stdout[-3000:] + out.stderr[-3000:]


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_secure_comm_on_device_buffers(ranks):
    """CuPy arrays on the device engine and torch bfloat16 CUDA tensors (staged) in every
    collective, over MPI, ranks sharing the GPU, under psk and under x509; from 3 ranks on, the
    ring allreduce's middle hops run the fused kernel, and under x509 the origin MACs are
    computed and checked on the device."""
    _run_worker("staged", ranks)


@pytest.mark.mpi
def test_nccl_transport_two_gpus():
    """SecureComm over NCCLTransport: every collective, and a tampered frame caught."""
    import cupy

    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("NCCL needs one GPU per rank: 2 GPUs (run on a multi-GPU node, see docs/gpu.md)")
    _run_worker("nccl")


@pytest.mark.mpi
def test_ddp_hook_cuda_buckets_under_gloo(tmp_path):
    """DDP with CUDA buckets on a gloo process group (2 ranks sharing a GPU): the hook's device
    engine frames live in CUDA memory, which gloo's point-to-point cannot read, so TorchTransport
    stages them through host memory; gradients must equal DDP's own allreduce."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    from helpers import run_torch_worker

    res = run_torch_worker(tmp_path, 2, "cuda")
    assert len(res) >= 8 and not [r for r in res if not r["ok"]], res


@pytest.mark.mpi
@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_seccomm_train_on_cuda(tmp_path, backend):
    """`seccomm train --device cuda`: DDP with CUDA buckets, default vs secure hook, 2 ranks
    (gloo: sharing a GPU; nccl: one GPU each)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    if backend == "nccl" and torch.cuda.device_count() < 2:
        pytest.skip(
            "nccl needs one GPU per rank: 2 GPUs (on a node: torchrun --nproc-per-node 8 -m seccomm "
            "train --device cuda)"
        )
    from helpers import run_train

    _, r = run_train(tmp_path, "--steps", "30", "--device", "cuda", "--backend", backend)
    assert r["device"] == "cuda" and r["backend"] == backend
    assert r["max_abs_param_diff"] < 1e-4 and r["variants"]["secure"]["test_accuracy"] > 0.5, r


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_fused_hop_special_values_on_device(dtype):
    """On the device the compiler flushes subnormals (CuPy builds with -ftz=true) and the adder
    returns one canonical NaN; the fused hop must still sum as numpy does (NaN payloads aside for
    float16, see test_gpu_kernels_emulated.py)."""
    import cupy as cp

    from seccomm.dtypes import resolve_dtype
    from seccomm.gpu import GPUAEAD, Hop
    from test_gpu_kernels_emulated import special_pairs

    dt = resolve_dtype(dtype)
    own, recv = special_pairs(dtype)
    with np.errstate(all="ignore"):
        want = (own + recv).astype(dt)
    kin, nin, ain, offs, fr_offs = batch([own.nbytes])
    kout, nout, aout, _, _ = batch([own.nbytes])
    frame = ChaCha20Poly1305(kin[0].tobytes()).encrypt(nin[0].tobytes(), recv.tobytes(), ain[0].tobytes())
    acc = cp.zeros(own.nbytes, cp.uint8)
    out = cp.zeros(own.nbytes + 16, cp.uint8)
    z = cp.zeros(1, cp.int64)
    ok = GPUAEAD("chacha20-poly1305").fused_hop(
        Hop(
            cp.asarray(kin),
            cp.asarray(nin),
            cp.asarray(ain),
            cp.asarray(np.frombuffer(frame, np.uint8)),
            z,
            cp.asarray(np.frombuffer(own.tobytes(), np.uint8)),
            z,
            cp.asarray(kout),
            cp.asarray(nout),
            cp.asarray(aout),
            out,
            z,
            cp.asarray(np.array([own.nbytes], np.int64)),
            dtype,
            acc,
        ),
    )
    assert int(ok[0]) == 1
    got = cp.asnumpy(acc).view(dt)
    ui = np.uint32 if dt.itemsize == 4 else np.uint16
    loose = np.isnan(want) if dtype == "float16" else np.zeros(want.size, bool)
    assert np.isnan(got[loose]).all()
    assert got.view(ui)[~loose].tolist() == want.view(ui)[~loose].tolist()
