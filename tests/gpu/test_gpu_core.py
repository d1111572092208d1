"""The GPU kernels' arithmetic core (kernels/sc_crypto.cuh), compiled for the host with the system
C compiler, against RFC 8439, the NIST GCM vectors (FAIL cases included) and `cryptography` on
random keys, nonces, AAD and lengths; and every .cu compiled by nvcc for sm_90 when nvcc exists."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM, ChaCha20Poly1305

from hostcore import KERNELS, HostAEAD, build
from vectors import RFC8439_2_8_2
from vectors import load_chacha, load_nist_gcm

LENGTHS = [0, 1, 15, 16, 17, 63, 64, 65, 1000, (1 << 20) + 3]


@pytest.fixture(scope="module")
def lib(tmp_path_factory):
    return build(tmp_path_factory.mktemp("hostcore"))


@pytest.fixture(scope="module")
def chacha(lib):
    return HostAEAD(lib, "chacha")


@pytest.fixture(scope="module")
def gcm(lib):
    return HostAEAD(lib, "gcm")


def test_rfc8439_2_8_2(chacha):
    v = RFC8439_2_8_2
    assert chacha.seal(v["key"], v["iv"], v["aad"], v["pt"]) == v["ct"] + v["tag"]
    assert chacha.open(v["key"], v["iv"], v["aad"], v["ct"] + v["tag"]) == v["pt"]


def poly1305_edge_vectors(n: int = 64, seed: int = 8439) -> list[tuple[bytes, bytes]]:
    """(key, message) pairs whose accumulator is congruent to 0..4 mod p = 2^130 - 5: a one-block
    message m with (m + 2^128) * r = t (mod p), so that the accumulator may end in [p, 2^130),
    the case the final conditional subtraction of p handles (random inputs reach it with
    probability about 2^-128)."""
    import random

    p, rng, out = (1 << 130) - 5, random.Random(seed), []
    while len(out) < n:
        r = int.from_bytes(rng.randbytes(16), "little") & 0x0FFFFFFC0FFFFFFC0FFFFFFC0FFFFFFF
        m = (rng.randrange(5) * pow(r, -1, p) - (1 << 128)) % p if r else 1 << 128
        if m < 1 << 128:
            out.append((r.to_bytes(16, "little") + rng.randbytes(16), m.to_bytes(16, "little")))
    return out


def test_poly1305_final_reduction_against_cryptography(tmp_path):
    """Accumulators that end in [p, 2^130) (poly1305_edge_vectors) give cryptography's tag; the
    kernel core with the final subtraction of p removed (a mutant) gives another tag on some of
    them, so these vectors would catch that bug (random inputs never do)."""
    from cryptography.hazmat.primitives.poly1305 import Poly1305

    from hostcore import build_poly1305

    tag = build_poly1305(tmp_path)
    source = (KERNELS / "sc_crypto.cuh").read_text()
    line = "uint32_t mask = (g4 >> 31) - 1;"
    assert source.count(line) == 1
    (tmp_path / "mut").mkdir()
    mutant = build_poly1305(tmp_path / "mut", source.replace(line, "uint32_t mask = 0;"))
    vectors = poly1305_edge_vectors()
    for key, msg in vectors:
        assert tag(key, msg) == Poly1305.generate_tag(key, msg), (key.hex(), msg.hex())
    assert sum(mutant(key, msg) != tag(key, msg) for key, msg in vectors) >= 8


@pytest.mark.parametrize("name", ["openssl.txt", "boringssl.txt"])
def test_chacha_vectors(chacha, name):
    for v in load_chacha(name):
        frame = v["ct"] + v["tag"]
        if v["fail"]:
            assert chacha.open(v["key"], v["iv"], v["aad"], frame) is None
        else:
            assert chacha.seal(v["key"], v["iv"], v["aad"], v["pt"]) == frame
            assert chacha.open(v["key"], v["iv"], v["aad"], frame) == v["pt"]


def test_nist_gcm(gcm):
    for v in load_nist_gcm("gcmEncryptExtIV256.rsp"):
        assert gcm.seal(v["key"], v["iv"], v["aad"], v["pt"]) == v["ct"] + v["tag"]
    dec = load_nist_gcm("gcmDecrypt256.rsp")
    assert sum(v["fail"] for v in dec) > 100
    for v in dec:
        got = gcm.open(v["key"], v["iv"], v["aad"], v["ct"] + v["tag"])
        assert got == (None if v["fail"] else v["pt"])


@pytest.mark.parametrize("suite", ["chacha", "gcm"])
@pytest.mark.parametrize("length", LENGTHS)
def test_against_cryptography(suite, length, chacha, gcm):
    host, ref_cls = (chacha, ChaCha20Poly1305) if suite == "chacha" else (gcm, AESGCM)
    for trial in range(3 if length < 4096 else 1):
        key, nonce = os.urandom(32), os.urandom(12)
        aad = os.urandom((length * 7 + trial * 13) % 100)
        pt = os.urandom(length)
        ref = ref_cls(key)
        frame = host.seal(key, nonce, aad, pt)
        assert frame == ref.encrypt(nonce, pt, aad)  # bit-exact with cryptography
        assert host.open(key, nonce, aad, ref.encrypt(nonce, pt, aad)) == pt
        bad = bytearray(frame)
        bad[(trial * 31) % len(bad)] ^= 0x40
        assert host.open(key, nonce, aad, bytes(bad)) is None
        assert host.open(key, nonce, aad + b"x", frame) is None


def test_gmac_is_gcm_over_empty_plaintext(gcm, lib):
    import ctypes

    for length in (0, 1, 17, 4096):
        key, nonce, data = os.urandom(32), os.urandom(12), os.urandom(length)
        assert gcm.seal(key, nonce, data, b"") == AESGCM(key).encrypt(nonce, b"", data)
    # the kernels' GMAC over header || payload from two separate buffers (89-byte header)
    for length in (0, 1, 15, 16, 17, 1000, 65537):
        key, nonce, hdr, body = os.urandom(32), os.urandom(12), os.urandom(89), os.urandom(length)
        tag = ctypes.create_string_buffer(16)
        lib.sc_host_gmac(key, nonce, hdr, ctypes.c_size_t(89), body, ctypes.c_size_t(length), tag)
        assert tag.raw == AESGCM(key).encrypt(nonce, b"", hdr + body)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed")
def test_nvcc_compiles_every_kernel_without_spills(tmp_path):
    sources = sorted(KERNELS.glob("*.cu"))
    assert sources, "no .cu files in kernels/"
    for src in sources:  # with CuPy's -ftz=true; the PTX kept (one compile gives both)
        keep = tmp_path / src.stem
        keep.mkdir()
        out = subprocess.run(
            ["nvcc", "-arch=sm_90", "-ftz=true", "-Xptxas", "-v", "-c", str(src), "-o", str(keep / "k.o"),
             "--keep", "--keep-dir", str(keep)],
            capture_output=True,
            text=True,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-3000:]
        spills = [
            ln
            for ln in out.stderr.splitlines()
            if "spill" in ln and not ln.strip().endswith("0 bytes spill stores, 0 bytes spill loads")
        ]
        assert not spills, "\n".join(spills)
        if src.name == "aead.cu":  # the ChaCha20 unit pass keeps its 64-byte unit in registers
            frame = re.search(
                r"Function properties for sc_units_chacha\s+(\d+) bytes stack frame", out.stderr
            )
            assert frame and int(frame.group(1)) == 0, out.stderr[-3000:]
            # under CuPy's -ftz=true, the fused hop's float32 adds still keep subnormals
            ptx = keep / "aead.ptx"
            adds = re.findall(r"\badd(?:\.\w+)*\.f32\b", ptx.read_text())
            assert adds and all(a == "add.rn.f32" for a in adds), sorted(set(adds))


@pytest.mark.parametrize("suite,ref_cls", [(0, ChaCha20Poly1305), (1, AESGCM)])
@pytest.mark.parametrize("dtype,code", [("float32", 0), ("float16", 1), ("bfloat16", 2)])
def test_fused_hop_matches_cpu_path(lib, suite, ref_cls, dtype, code):
    """open -> add (float32 accumulation, one rounding) -> seal in one function, bit-exact with
    cryptography + numpy/ml_dtypes doing the same steps; a bad tag writes nothing."""
    import ctypes

    import numpy as np

    from seccomm.dtypes import resolve_dtype

    dt = resolve_dtype(dtype)
    rng = np.random.default_rng(code * 10 + suite)
    hop = lib.sc_host_fused_hop
    hop.restype = ctypes.c_int
    for count in (1, 7, 64, 1000, 65537):
        with np.errstate(over="ignore"):
            received = rng.uniform(-7e4 if code == 1 else -1e4, 7e4 if code == 1 else 1e4, count).astype(dt)
        own = rng.uniform(-1e4, 1e4, count).astype(dt)
        if code == 1 and count >= 3:  # include overflow to inf and subnormals for float16
            received[:3] = np.array([65504, 6e-8, -65504], np.float32).astype(dt)
            own[:3] = np.array([32.0, 1e-7, -16.0], np.float32).astype(dt)
        k_in, k_out, n_in, n_out = (os.urandom(32), os.urandom(32), os.urandom(12), os.urandom(12))
        aad_in, aad_out = os.urandom(89), os.urandom(89)
        frame_in = ref_cls(k_in).encrypt(n_in, received.tobytes(), aad_in)
        with np.errstate(over="ignore"):
            want_sum = (own + received).astype(dt)
        want_frame = ref_cls(k_out).encrypt(n_out, want_sum.tobytes(), aad_out)
        nbytes = count * dt.itemsize
        out = ctypes.create_string_buffer(nbytes + 16)
        acc = ctypes.create_string_buffer(nbytes)
        rc = hop(
            suite,
            k_in,
            n_in,
            aad_in,
            frame_in,
            ctypes.c_longlong(nbytes),
            own.tobytes(),
            code,
            k_out,
            n_out,
            aad_out,
            ctypes.c_size_t(89),
            out,
            acc,
        )
        assert rc == 0
        assert acc.raw == want_sum.tobytes(), (dtype, count)
        assert out.raw == want_frame, (dtype, count)
        bad = bytearray(frame_in)
        bad[-1] ^= 1
        out2 = ctypes.create_string_buffer(b"\x5a" * (nbytes + 16), nbytes + 16)
        acc2 = ctypes.create_string_buffer(b"\x5a" * nbytes, nbytes)
        rc = hop(
            suite,
            k_in,
            n_in,
            aad_in,
            bytes(bad),
            ctypes.c_longlong(nbytes),
            own.tobytes(),
            code,
            k_out,
            n_out,
            aad_out,
            ctypes.c_size_t(89),
            out2,
            acc2,
        )
        assert rc == -1 and set(out2.raw) == {0x5A} and set(acc2.raw) == {0x5A}


def test_multi_lane_field_pieces(lib):
    """The pieces of the kernels' multi-lane MACs and T-table AES: Poly1305 products and powers
    against Python integers mod 2^130 - 5 (with unclamped operands, as the lane powers are),
    the 4-bit-table GF(2^128) multiply against the bitwise one, powers against repeated products,
    and T-table AES-256 against `cryptography`."""
    import ctypes

    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    p = (1 << 130) - 5
    rng = __import__("random").Random(5)
    for _ in range(300):
        a, b, key, x, y = (rng.randbytes(n) for n in (16, 16, 32, 16, 16))
        s = int.from_bytes(key[16:], "little")
        out, out2 = ctypes.create_string_buffer(16), ctypes.create_string_buffer(16)
        lib.sc_host_p130_mul(a, b, key, out)
        prod = (int.from_bytes(a, "little") + (1 << 128)) * (int.from_bytes(b, "little") + (1 << 128)) % p
        assert out.raw == ((prod + s) % (1 << 128)).to_bytes(16, "little")
        e = rng.randrange(1, 1 << 20)
        lib.sc_host_p130_pow_tag(key, ctypes.c_ulonglong(e), out)
        r = int.from_bytes(key[:16], "little") & 0x0FFFFFFC0FFFFFFC0FFFFFFC0FFFFFFF
        assert out.raw == ((pow(r, e, p) + s) % (1 << 128)).to_bytes(16, "little"), e
        lib.sc_host_gf(x, y, out, out2)
        assert out.raw == out2.raw
        acc = x
        for _ in range(4):
            lib.sc_host_gf(x, acc, out, out2)
            acc = out.raw
        lib.sc_host_gf_pow(x, ctypes.c_ulonglong(5), out2)
        assert out2.raw == acc
        lib.sc_host_aes_tt(key, x, out)
        assert out.raw == Cipher(algorithms.AES(key), modes.ECB()).encryptor().update(x)


def _libnvrtc():
    """libnvrtc from the nvidia-cuda-nvrtc wheel (the test extra), or None."""
    import ctypes
    import glob
    import importlib

    for pkg, sub in (("nvidia.cuda_nvrtc", "lib"), ("nvidia.cu13", "lib")):
        try:
            mod = importlib.import_module(pkg)
        except ImportError:
            continue
        for base in mod.__path__:
            libs = sorted(glob.glob(os.path.join(base, sub, "libnvrtc.so*")))
            libs = [p for p in libs if "builtins" not in p and ".alt." not in p]
            if libs:
                return ctypes.CDLL(libs[0])
    return None


@pytest.mark.slow
def test_nvrtc_compiles_the_runtime_module_without_spills():
    """What `cupy.RawModule` compiles at run time (seccomm.gpu.kernels.module_source, NVRTC, no libc
    headers) builds for sm_90 with no errors and no spills.  NVRTC predeclares some types that
    nvcc does not (a `size_t` typedef broke this build once)."""
    import ctypes

    from seccomm.gpu.kernels import NVRTC_OPTIONS, module_source

    lib = _libnvrtc()
    if lib is None:
        pytest.skip("NVRTC not installed (nvidia-cuda-nvrtc-cu12, in the test extra on Linux x86_64)")
    prog = ctypes.c_void_p()
    assert (
        lib.nvrtcCreateProgram(ctypes.byref(prog), module_source().encode(), b"aead.cu", 0, None, None) == 0
    )
    # CuPy appends -ftz=true to every NVRTC build (cupy/cuda/compiler.py, _compile_with_cache_cuda)
    opts = [o.encode() for o in NVRTC_OPTIONS] + [b"-ftz=true", b"-arch=sm_90", b"--ptxas-options=-v"]
    rc = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    text = log.value.decode(errors="replace")
    assert rc == 0, text
    kernels = [ln for ln in text.splitlines() if "Compiling entry function" in ln]
    assert len(kernels) == module_source().count("__global__ void"), text
    spills = [
        ln
        for ln in text.splitlines()
        if "spill" in ln and "0 bytes spill stores, 0 bytes spill loads" not in ln
    ]
    assert not spills, "\n".join(spills)


@pytest.mark.slow
def test_the_host_shim_runs_clean_under_asan_and_ubsan(tmp_path):
    """Every host entry point of the GPU core on exact-size buffers, built with AddressSanitizer
    and UndefinedBehaviorSanitizer (any finding stops the run): memory errors that give the right
    bytes by luck (an index one before a table, a read one past a buffer) fail here."""
    cc = shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.skip("no gcc or clang")
    here = Path(__file__).resolve().parents[1]
    exe = tmp_path / "drv"
    flags = ["-std=c99", "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
    build = subprocess.run(
        [
            cc,
            *flags,
            "-I",
            str(KERNELS),
            str(here / "sanitize_driver.c"),
            str(KERNELS / "host_shim.c"),
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
    )
    if build.returncode and "sanitize" in build.stderr:
        pytest.skip(f"this compiler cannot build with the sanitizers: {build.stderr[-300:]}")
    assert build.returncode == 0, build.stderr[-3000:]
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0", UBSAN_OPTIONS="print_stacktrace=1")
    run = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "CLEAN", run.stdout[-2000:] + run.stderr[-3000:]
