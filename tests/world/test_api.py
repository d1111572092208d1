"""Public API contract, argument errors before any traffic, and import hygiene (in-process,
world size 1 on COMM_SELF)."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

import seccomm
from seccomm import (
    AuthenticationError,
    CommClosedError,
    ConfigMismatchError,
    KeyScheduleError,
    SecCommError,
    SecureComm,
)

# a random job secret (keys.load_secret refuses patterned ones such as bytes(range(32)))
PSK = bytes.fromhex("5acce60d79575cfbee4c48d281e8a927ba3dd9934283527a722c077169fb85d0")


@pytest.fixture(scope="module")
def sc():
    from mpi4py import MPI

    with SecureComm(MPI.COMM_SELF, "aes-256-gcm", psk=PSK) as s:
        yield s


@pytest.fixture
def fresh():
    """A SecureComm of its own, for a test whose argument errors leave it unusable."""
    from mpi4py import MPI

    with SecureComm(MPI.COMM_SELF, "aes-256-gcm", psk=PSK) as s:
        yield s


def self_comm():
    from mpi4py import MPI

    return MPI.COMM_SELF


def test_import_needs_no_torch_cupy_or_mpi():
    code = (
        "import sys; sys.modules['torch'] = None; sys.modules['cupy'] = None\n"
        "import seccomm\n"
        "assert 'mpi4py.MPI' not in sys.modules, 'mpi4py imported eagerly'\n"
        "print(seccomm.__version__, sorted(seccomm.SUITES))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "aes-256-gcm" in out.stdout


def test_error_hierarchy():
    for cls in (
        AuthenticationError,
        ConfigMismatchError,
        KeyScheduleError,
        seccomm.FrameError,
        seccomm.TransportTimeout,
        seccomm.CommClosedError,
    ):
        assert issubclass(cls, SecCommError)
    e = AuthenticationError(
        peer=3, op="allreduce", seq=7, step=1, chunk=2, chunks=5, epoch=0, suite="aes-256-gcm"
    )
    assert "rank 3" in str(e) and "allreduce #7" in str(e) and "chunk 2/5" in str(e)


def test_suite_registry():
    assert list(seccomm.SUITES) == ["none", "aes-256-gcm", "chacha20-poly1305", "aes-256-gmac"]
    gcm = seccomm.get_suite("aes-256-gcm")
    assert gcm.fips_140_3.startswith("approved")
    assert seccomm.get_suite("chacha20-poly1305").fips_140_3.startswith("not approved")
    # CFRG draft-irtf-cfrg-aead-limits worked example: 1 MiB messages, p = 2^-50 -> ~2^23.5
    limit = gcm.usage_limit(1 << 20, 0)
    assert 2**23.4 < limit < 2**23.6
    with pytest.raises(ValueError, match="allowed: none, aes-256-gcm"):
        seccomm.get_suite("aes-128-cbc")


def test_suite_registration_refuses_a_taken_name_or_id(monkeypatch):
    """``suites.register`` on a scratch registry: a second suite of an existing name or AAD
    suite id is refused (two suites must never share the byte bound into the AAD), and nothing
    is added; a new one is added and returned.  ``get_suite`` refuses any other key, hashable or
    not, with ``ValueError`` listing the names."""
    import dataclasses

    from seccomm import suites

    reg, before = dict(suites.SUITES), dict(suites.SUITES)
    monkeypatch.setattr(suites, "SUITES", reg)
    gcm = reg["aes-256-gcm"]
    for name, sid in (("aes-256-gcm", 9), ("aes-999", 1), ("none", 0)):
        with pytest.raises(ValueError, match=f"^suite '{name}' or id {sid} already registered$"):
            suites.register(dataclasses.replace(gcm, name=name, suite_id=sid))
    assert reg == before and list(reg) == list(before)
    new = dataclasses.replace(gcm, name="aes-999", suite_id=9)
    assert suites.register(new) is new and suites.get_suite("aes-999") is new
    assert list(reg)[-1] == "aes-999"
    allowed = "allowed: none, aes-256-gcm, chacha20-poly1305, aes-256-gmac, aes-999$"
    for bad in ("AES-256-GCM", ["aes-256-gcm"], None):
        with pytest.raises(ValueError, match=f"^unknown suite {re.escape(repr(bad))}; {allowed}"):
            suites.get_suite(bad)


def test_collective_registration_checks_name_and_wire_code(monkeypatch):
    """``collectives.register`` on a scratch registry: a wire code outside the AAD's op kind byte
    (1..255), or a name or code already taken, is refused and nothing is added; new records are
    kept in wire-code order whatever order they register in.  ``get_collective`` refuses any
    other key with ``ValueError`` listing the registered names."""
    import dataclasses

    from seccomm import collectives

    reg, before = dict(collectives.COLLECTIVES), dict(collectives.COLLECTIVES)
    monkeypatch.setattr(collectives, "COLLECTIVES", reg)
    base = reg["alltoall"]

    def rec(name, code):
        return dataclasses.replace(base, name=name, code=code)

    for code in (0, -1, 256, 1000):
        msg = f"wire code {code} of 'x' does not fit the AAD's op kind byte (1..255)"
        with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
            collectives.register(rec("x", code))
    for name, code in (("alltoall", 200), ("x", 1), ("x", 5), ("bcast", 4)):
        with pytest.raises(ValueError, match=f"^collective '{name}' or wire code {code} already registered$"):
            collectives.register(rec(name, code))
    builtin = ["allreduce", "reduce_scatter", "allgather", "bcast", "alltoall"]
    assert list(reg) == builtin and reg == before
    hi, lo = rec("hi", 255), rec("lo", 6)
    assert collectives.register(hi) is hi and collectives.register(lo) is lo
    assert list(reg) == builtin + ["lo", "hi"]
    assert collectives.get_collective("hi") is hi and collectives.get_collective("lo") is lo
    assert collectives.get_collective("bcast") is reg["bcast"]
    for bad in ("gather", ["bcast"], None):
        msg = f"unknown collective {bad!r}; allowed: {', '.join(builtin + ['lo', 'hi'])}"
        with pytest.raises(ValueError, match=f"^{re.escape(msg)}$"):
            collectives.get_collective(bad)


@pytest.mark.parametrize(
    "kw,match",
    [
        (dict(suite="rot13"), "unknown suite 'rot13'; allowed"),
        (dict(algorithm="tree"), "unknown algorithm 'tree'; allowed: auto, ring"),
        (dict(encrypt="some"), "unknown encrypt 'some'; allowed: all, inter-node"),
        (dict(key_exchange="rsa"), "unknown key_exchange 'rsa'; allowed: psk, psk-dhe"),
        (dict(identity="tls"), "unknown identity 'tls'; allowed: psk, x509"),
        (dict(chunk_bytes=8), r"chunk_bytes must be an integer in \[16"),
        (dict(timeout=0), "timeout must be a number of seconds > 0"),
        (dict(rotate_after_frames=2**40), "above aes-256-gcm's usage limit of 11862016 frames"),
    ],
)
def test_bad_construction_args(kw, match):
    kw = dict(kw)  # the parameter itself stays as it is for a second run in this process (mutmut)
    suite = kw.pop("suite", "aes-256-gcm")
    with pytest.raises(ValueError, match=match):
        SecureComm(self_comm(), suite, psk=PSK, **kw)


def test_missing_secret(monkeypatch):
    monkeypatch.delenv("SECCOMM_PSK_FILE", raising=False)
    monkeypatch.delenv("SECCOMM_PSK", raising=False)
    with pytest.raises(KeyScheduleError, match="no job secret"):
        SecureComm(self_comm(), "aes-256-gcm")
    SecureComm(self_comm(), "none").close()  # the baseline needs no key


def test_bad_buffers(fresh):
    sc = fresh
    x = np.ones(8, np.float32)
    cases = [
        (
            lambda: sc.allreduce(x.astype(np.complex64), x.astype(np.complex64)),
            TypeError,
            "unsupported dtype complex64; allowed: float16, bfloat16",
        ),
        (lambda: sc.allreduce(x, np.ones(8, np.float64)), TypeError, "one dtype"),
        (lambda: sc.allreduce(x, np.ones(9, np.float32)), ValueError, "must match"),
        (lambda: sc.allreduce(np.ones(16, np.float32)[::2], x.copy()), ValueError, "contiguous"),
        (lambda: sc.allreduce(x, x.copy(), op="xor"), ValueError, "unknown op 'xor'; allowed"),
        (
            lambda: sc.allreduce(np.ones(4, np.int32), np.ones(4, np.int32), op="avg"),
            ValueError,
            "needs a floating-point dtype",
        ),
        (lambda: sc.allreduce([1.0, 2.0], x), TypeError, "numpy.ndarray"),
        (lambda: sc.reduce_scatter(x, np.ones(3, np.float32)), ValueError, "block_counts"),
        (lambda: sc.allgather(np.ones(3, np.float32), x.copy()), ValueError, "block_counts"),
        (lambda: sc.bcast(x.copy(), root=1), ValueError, r"root must be a rank in \[0, 0\]"),
    ]
    ro = x.copy()
    ro.flags.writeable = False
    cases.append((lambda: sc.allreduce(x, ro), ValueError, "read-only"))
    big = np.ones(16, np.float32)
    cases.append((lambda: sc.allreduce(big[:8], big[4:12]), ValueError, "overlap"))
    seq = sc.sequence.seq
    for fn, exc, match in cases:
        with pytest.raises(exc, match=match):
            fn()
    assert sc.sequence.seq == seq  # rejected before an operation began (no frame, no sequence number)
    with pytest.raises(CommClosedError, match="allreduce #1 refused its arguments on this rank"):
        sc.allreduce(x, x.copy())  # the other ranks' op took that number; build a new one


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "uint8", "int32", "int64"])
def test_world_size_one(sc, dtype):
    dt = seccomm.dtypes.resolve_dtype(dtype)
    x = (np.arange(11) % 7).astype(dt)
    y = np.zeros_like(x)
    sc.allreduce(x, y)
    assert np.array_equal(y, x)
    sc.allreduce(y, y, op="max")  # in place
    assert np.array_equal(y, x)
    z = np.zeros_like(x)
    sc.reduce_scatter(x, z)
    assert np.array_equal(z, x)
    sc.allgather(x, z)
    assert np.array_equal(z, x)
    sc.bcast(z)
    assert np.array_equal(z, x)
    z = np.zeros_like(x)
    sc.alltoall(x, z)
    assert np.array_equal(z, x)


def test_repr_hides_keys(sc):
    text = repr(sc) + repr(sc.session.keys) + str(vars(sc))
    assert PSK.hex() not in text and "secret" not in repr(sc).lower()


def test_route_is_decided_per_call(sc):
    """numpy buffers stay on the CPU engine; a device buffer beside a host one is staged (the
    host buffer is written in place); the decision is made on every call."""

    class FakeDevice:  # what CuPy and torch CUDA tensors expose
        __cuda_array_interface__ = {"shape": (4,), "typestr": "<f4", "data": (0, False), "version": 3}

    x = np.zeros(4, np.float32)
    assert sc.devices.route(sc, x, x)[0] == "host"
    assert sc.devices.route(sc, FakeDevice(), x)[0] == "staged"
    assert sc.devices.route(sc, x, FakeDevice())[0] == "staged"
    assert sc.devices.route(sc, x, x)[0] == "host"


def test_collective_methods_come_from_the_records():
    """Each public collective is its record's method, installed on SecureComm with the
    signature and docstring it always had."""
    import inspect

    from seccomm.collectives import COLLECTIVES

    for name, coll in COLLECTIVES.items():
        method = getattr(SecureComm, name)
        assert method is coll.method and method.__doc__ and method.__qualname__ == f"SecureComm.{name}"

    def params(name):
        return [(p.name, p.default) for p in inspect.signature(getattr(SecureComm, name)).parameters.values()]

    empty = inspect.Parameter.empty
    assert params("allreduce") == [("self", empty), ("sendbuf", empty), ("recvbuf", empty), ("op", "sum")]
    assert params("reduce_scatter") == params("allreduce")
    assert params("allgather") == [("self", empty), ("sendbuf", empty), ("recvbuf", empty)]
    assert params("bcast") == [("self", empty), ("buf", empty), ("root", 0)]
    assert params("alltoall") == params("allgather")


def test_alltoall_bad_arguments(fresh):
    """sizes that are not p*m (checked by the record for any world size), two dtypes, sizes that
    differ, in place: refused before an operation begins"""
    from seccomm.collectives import get_collective

    x = np.ones(8, np.float32)
    with pytest.raises(
        ValueError, match="alltoall: sendbuf has 8 elements, not a multiple of the world size 3"
    ):
        get_collective("alltoall").args(x, x.copy(), 0, 3, False)
    sc = fresh
    seq = sc.sequence.seq
    for fn, exc, match in [
        (lambda: sc.alltoall(x, np.ones(8, np.float64)), TypeError, "one dtype"),
        (lambda: sc.alltoall(x, np.ones(4, np.float32)), ValueError, "must match"),
        (lambda: sc.alltoall(x, x), ValueError, "overlap"),
        (lambda: sc.alltoall(x.astype(np.complex64), x), TypeError, "unsupported dtype"),
    ]:
        with pytest.raises(exc, match=match):
            fn()
    assert sc.sequence.seq == seq


def test_long_labels_and_errors_fit_the_setup():
    """A job label of any length and a bad argument with a huge repr still give one setup hello
    each (a label too long for it travels as its digest; an error is cut), never a failure on
    one rank alone."""
    with SecureComm(self_comm(), "aes-256-gcm", psk=PSK, job_id="\u00e9x" * 5000) as s:
        assert s.job_id == "\u00e9x" * 5000
    with pytest.raises(ValueError, match="unknown algorithm"):
        SecureComm(self_comm(), "aes-256-gcm", psk=PSK, algorithm="\u0001" * 100000)


def test_argument_errors_name_the_buffer(fresh):
    """Each refusal names the buffer at fault (sendbuf, recvbuf, or bcast's buf) in full."""
    sc = fresh
    x = np.ones(8, np.float32)
    ro = x.copy()
    ro.flags.writeable = False
    big = np.ones(16, np.float32)
    cases = [
        (lambda: sc.allreduce([1.0] * 8, x), TypeError, "sendbuf must be a numpy.ndarray, got list"),
        (lambda: sc.allreduce(x, [1.0] * 8), TypeError, "recvbuf must be a numpy.ndarray, got list"),
        (lambda: sc.allreduce(big[::2], x.copy()), ValueError, "sendbuf must be contiguous, C or"),
        (lambda: sc.allreduce(x, big[::2]), ValueError, "recvbuf must be contiguous, C or"),
        (lambda: sc.alltoall(x, ro), ValueError, "recvbuf is read-only"),
        (lambda: sc.bcast([1.0]), TypeError, "buf must be a numpy.ndarray, got list"),
        (lambda: sc.bcast(big[::2]), ValueError, "buf must be contiguous, C or"),
        (
            lambda: seccomm.collectives.get_collective("bcast").args(None, ro, 1, 2, False, root=0),
            ValueError,
            "buf is read-only; only the root's (rank 0) may be: this rank's is written",
        ),
        (
            lambda: sc.allgather(big[:8], big[4:12]),
            ValueError,
            "sendbuf and recvbuf overlap: only allreduce works in place (pass the same array twice); "
            "use separate buffers",
        ),
        (
            lambda: sc.reduce_scatter(np.ones(4, np.int32), np.ones(4, np.int32), op="avg"),
            ValueError,
            "op 'avg' needs a floating-point dtype",
        ),
    ]
    for fn, exc, msg in cases:
        with pytest.raises(exc, match=f"^{re.escape(msg)}"):
            fn()

    with SecureComm(self_comm(), "aes-256-gcm", psk=PSK) as root:
        root.bcast(ro)  # the root only reads its buffer: read-only is fine there


class DeviceArray:
    """A device array as the device engine hands it to the records (CuPy's interface, emulated
    on host memory): dtype, flags, shape, size, itemsize, reshape and ``__cuda_array_interface__``,
    never a numpy.ndarray; ``numpy.may_share_memory`` dispatches to it (NEP 18), as it does to CuPy."""

    def __init__(self, a):
        self.a, self.dtype, self.flags, self.size, self.itemsize = a, a.dtype, a.flags, a.size, a.itemsize
        self.shape = a.shape

    def reshape(self, *shape):
        return DeviceArray(self.a.reshape(*shape))

    @property
    def __cuda_array_interface__(self):
        return {
            "shape": self.a.shape,
            "typestr": self.a.dtype.str,
            "data": (self.a.ctypes.data, False),
            "version": 3,
        }

    def __array_function__(self, func, types, args, kwargs):
        if func is not np.may_share_memory:
            return NotImplemented
        return func(*(x.a if isinstance(x, DeviceArray) else x for x in args), **kwargs)


def test_records_take_device_arrays_on_the_device_engine():
    """With ``device=True`` (the device engine) the records check device arrays as they check
    numpy ones (dtype, contiguity, sizes, overlap; the buffer named) and hand them on to the
    algorithms; allreduce in place (the same memory twice) passes, a partial overlap does not."""
    from seccomm.collectives import get_collective

    def dev(shape, dtype=np.float32):
        return DeviceArray(np.zeros(shape, dtype))

    x = dev((3, 4))
    calls = {
        "allreduce": get_collective("allreduce").args(x, DeviceArray(x.a), 0, 2, True, op="max"),
        "reduce_scatter": get_collective("reduce_scatter").args(x, dev(6), 1, 2, True, op="sum"),
        "allgather": get_collective("allgather").args(dev(6), x, 1, 2, True),
        "bcast": get_collective("bcast").args(x, x, 0, 2, True, root=1),
        "alltoall": get_collective("alltoall").args(x, dev((2, 6)), 0, 2, True),
    }
    for name, call in calls.items():
        assert call.dtype == "float32" and call.itemsize == 4, name
        assert any(isinstance(b, DeviceArray) for b in call.args), name  # taken as they are
    assert calls["allreduce"].redop == "max" and calls["allreduce"].count == 12
    big = np.zeros(16, np.float32)
    for fn, exc, msg in [
        (
            lambda: get_collective("allreduce").args(
                DeviceArray(big[:8]), DeviceArray(big[4:12]), 0, 2, True, op="sum"
            ),
            ValueError,
            "sendbuf and recvbuf overlap",
        ),
        (
            lambda: get_collective("alltoall").args(DeviceArray(big[::2]), dev(8), 0, 2, True),
            ValueError,
            "sendbuf must be C-contiguous",
        ),
        (
            lambda: get_collective("alltoall").args(dev(8), DeviceArray(big[::2]), 0, 2, True),
            ValueError,
            "recvbuf must be C-contiguous",
        ),
        (
            lambda: get_collective("bcast").args(None, DeviceArray(big[::2]), 0, 2, True, root=0),
            ValueError,
            "buf must be C-contiguous",
        ),
        (
            lambda: get_collective("bcast").args(None, DeviceArray(np.zeros((3, 4), order="F")), 0, 2, 1, 0),
            ValueError,
            "buf must be C-contiguous: the device engine takes device buffers in C order only",
        ),
        (
            lambda: get_collective("allgather").args(dev(8), dev(16, np.float64), 0, 2, True),
            TypeError,
            "sendbuf is float32 but recvbuf is float64",
        ),
    ]:
        with pytest.raises(exc, match=f"^{re.escape(msg)}"):
            fn()


def test_a_world_of_one_returns_its_input_bit_for_bit(sc):
    """On one rank nothing is reduced and nothing divided: every op, avg included, returns the
    input bit for bit, signaling NaNs and signed zeros too (as MPI does on one rank)."""
    x = np.array([1.5, -0.0, 0.0, np.nan, 3.0], np.float32)
    x.view(np.uint32)[3] = 0x7F800001  # a signaling NaN: any arithmetic would quiet it
    for alg in ("ring", "recursive_doubling"):
        sc.algorithm = alg
        for op in ("avg", "sum", "max"):
            y = np.zeros_like(x)
            sc.allreduce(x, y, op=op)
            assert y.tobytes() == x.tobytes(), (alg, op)
    sc.algorithm = "auto"
    z = np.zeros_like(x)
    sc.reduce_scatter(x, z, op="avg")
    assert z.tobytes() == x.tobytes()


def test_auto_rules_at_their_thresholds():
    """allreduce: recursive doubling at or below ``small_bytes`` or for fewer elements than
    ranks, else ring, unless an algorithm is set; bcast: binomial tree at or below
    ``bcast_chain_bytes``, pipelined chain above."""
    from seccomm.collectives import Tuning, get_collective

    ar, bc, t = get_collective("allreduce"), get_collective("bcast"), Tuning()
    assert ar.pick(t, t.small_bytes, 10**6, 4) == "recursive_doubling"
    assert ar.pick(t, t.small_bytes + 1, 10**6, 4) == "ring"
    assert ar.pick(t, 10**9, 3, 4) == "recursive_doubling"
    assert ar.pick(t, 10**9, 4, 4) == "ring"
    assert ar.pick(Tuning(algorithm="ring"), 8, 1, 4) == "ring"
    assert ar.pick(Tuning(algorithm="recursive_doubling"), 10**9, 10**8, 4) == "recursive_doubling"
    assert bc.pick(t, t.bcast_chain_bytes, 10**6, 4) == "binomial"
    assert bc.pick(t, t.bcast_chain_bytes + 1, 10**6, 4) == "chain"
    assert bc.pick(Tuning(bcast_chain_bytes=0), 1, 1, 4) == "chain"


def test_auto_on_two_ranks_runs_recursive_doubling_up_to_the_chunk():
    """Two ranks: recursive doubling up to ``chunk_bytes`` (one frame each way instead of the
    ring's two steps), ring above it; more ranks keep the ring above ``small_bytes``; a tuning
    with ``chunk_bytes`` 0 (the rule bench results made before it were run with) never applies
    it; the model's reading of a bench row takes the algorithm the row names."""
    from seccomm import calibration as calib
    from seccomm.collectives import Tuning, get_collective

    ar, t = get_collective("allreduce"), Tuning()
    assert t.chunk_bytes == 1 << 20
    assert ar.pick(t, t.chunk_bytes, 10**6, 2) == "recursive_doubling"
    assert ar.pick(t, t.chunk_bytes + 1, 10**6, 2) == "ring"
    assert ar.pick(t, t.chunk_bytes, 10**6, 3) == "ring"
    assert ar.pick(t, t.chunk_bytes, 10**6, 4) == "ring"
    assert ar.pick(Tuning(chunk_bytes=0), t.small_bytes + 1, 10**6, 2) == "ring"
    assert calib.bench_algorithm(1 << 20, 2) == "ring"  # (rows that do not name one: the old rule)
    assert calib.bench_algorithm(1 << 20, 2, chunk_bytes=1 << 20) == "recursive_doubling"
    assert calib.row_algorithm({"size_bytes": 1 << 20}, 2) == "ring"
    named = {"size_bytes": 1 << 20, "algorithm": "recursive_doubling"}
    assert calib.row_algorithm(named, 2) == "recursive_doubling"


def test_bcast_routes_its_one_buffer_as_both(sc, monkeypatch):
    """bcast's buffer is routed as its send and its receive buffer, as allreduce's in-place
    buffer is: a device buffer then takes the device engine like the other collectives' (a
    device buffer beside anything else would be staged through the host)."""
    seen, route = [], sc.devices.route
    monkeypatch.setattr(sc.devices, "route", lambda c, a, b: seen.append((a, b)) or route(c, a, b))
    x = np.ones(4, np.float32)
    sc.bcast(x)
    sc.allreduce(x, x)
    assert [(a is x, b is x) for a, b in seen] == [(True, True)] * 2


def test_collectives_are_installed_on_a_class_without_replacing_its_methods():
    """comm._install_collectives (run once, at import, on SecureComm), here on scratch classes:
    every record's method under its name, named after the class; a class that already has a
    method of that name is refused, naming it."""
    from seccomm import comm
    from seccomm.collectives import COLLECTIVES

    saved = {name: c.method.__qualname__ for name, c in COLLECTIVES.items()}
    try:

        class Scratch:
            pass

        comm._install_collectives(Scratch)
        for name, c in COLLECTIVES.items():
            assert vars(Scratch)[name] is c.method and c.method.__qualname__ == f"Scratch.{name}"

        class Taken:
            def bcast(self):
                return "mine"

        with pytest.raises(ValueError, match=r"^collective 'bcast' would replace SecureComm\.bcast$"):
            comm._install_collectives(Taken)
        assert Taken().bcast() == "mine"
    finally:
        for name, c in COLLECTIVES.items():
            c.method.__qualname__ = saved[name]


def test_block_counts_and_node_ids_take_integers_only(sc):
    assert sc.block_counts(np.int64(5)) == [5] and sc.block_counts(0) == [0]
    for bad in (True, 2.5, -1, "3", None):
        with pytest.raises(ValueError, match=rf"^count must be an integer >= 0, got {re.escape(repr(bad))}$"):
            sc.block_counts(bad)
    with SecureComm(self_comm(), "aes-256-gcm", psk=PSK, node_ids=[np.int64(4)]) as s:
        assert s.node_ids == [0]
    for bad in (True, 1.0, "0", None):
        msg = rf"node_ids entry must be an integer, got {re.escape(repr(bad))}"
        with pytest.raises(ValueError, match=msg):
            SecureComm(self_comm(), "aes-256-gcm", psk=PSK, node_ids=[bad])


def test_limits_per_op_are_checked_before_it_begins():
    """At most MAX_CHUNKS_PER_HOP (2**24) chunks per hop, counting ceil(bytes / chunk_bytes) + 1;
    at most the per-key frame limit for the op's frame bound, with the fix that applies (a
    forced rotate_after_frames, else chunk_bytes).  Checked from the call's count alone (no
    buffer of that size is needed), before a sequence number is taken."""
    from seccomm.collectives import COLLECTIVES
    from seccomm.framing import MAX_CHUNKS_PER_HOP

    ar = COLLECTIVES["allreduce"]
    with SecureComm(self_comm(), "aes-256-gcm", psk=PSK, chunk_bytes=16) as s:
        most = 16 * (MAX_CHUNKS_PER_HOP - 1) // 4  # float32 elements: exactly 2**24 chunks
        s.sequence.bound(ar, 4 * most)
        seq = s.sequence.seq
        with pytest.raises(
            ValueError,
            match=rf"^allreduce of {4 * most + 4} bytes needs {MAX_CHUNKS_PER_HOP + 1} chunks per hop; "
            rf"at most {MAX_CHUNKS_PER_HOP}: raise chunk_bytes$",
        ):
            s.sequence.bound(ar, 4 * (most + 1))
        assert s.sequence.seq == seq
    with SecureComm(self_comm(), "aes-256-gcm", psk=PSK, chunk_bytes=17) as s:
        # a chunk holds whole elements: 17 bytes carry 4 float32 (16 B), so count with 16
        most = 16 * (MAX_CHUNKS_PER_HOP - 1) // 4
        s.sequence.bound(ar, 4 * most, 4)
        with pytest.raises(ValueError, match=rf"needs {MAX_CHUNKS_PER_HOP + 1} chunks per hop"):
            s.sequence.bound(ar, 4 * (most + 1), 4)
    big = (1 << 31) - 64
    with SecureComm(self_comm(), "aes-256-gcm", psk=PSK, chunk_bytes=big) as s:
        chunks = s.usage_limit // ar.frame_bound(1, 1) + 1
        count = (chunks - 1) * big // 8
        bound = ar.frame_bound(1, chunks)
        assert bound > s.usage_limit
        with pytest.raises(
            ValueError,
            match=rf"^allreduce of {count * 8} bytes may seal up to {bound} frames under one key, "
            rf"over the per-key limit of {s.usage_limit}: raise chunk_bytes$",
        ):
            s.sequence.bound(ar, 8 * count)
    x = np.ones(64, np.float32)  # 256 bytes at chunk_bytes=16: 17 chunks
    bound = ar.frame_bound(1, 17)
    with SecureComm(self_comm(), "aes-256-gcm", psk=PSK, chunk_bytes=16, rotate_after_frames=bound) as s:
        s.allreduce(x, x.copy())  # exactly at the limit
    with SecureComm(self_comm(), "aes-256-gcm", psk=PSK, chunk_bytes=16, rotate_after_frames=bound - 1) as s:
        fix = rf"over the per-key limit of {bound - 1}: raise rotate_after_frames$"
        with pytest.raises(ValueError, match=fix):
            s.allreduce(x, x.copy())


HI_BYTES, HI_FRAMES = 1 << 62, 1 << 63
BOUNDS = [  # (argument, refused values, accepted values, "[lo, hi]" of the message)
    ("chunk_bytes", [15, (1 << 31) - 63, True, 64.0], [16, (1 << 31) - 64], "[16, 2147483584]"),
    ("small_bytes", [-1, HI_BYTES + 1, False], [0, HI_BYTES], f"[0, {HI_BYTES}]"),
    ("bcast_chain_bytes", [-1, HI_BYTES + 1, 1.5], [0, HI_BYTES], f"[0, {HI_BYTES}]"),
    ("rotate_after_frames", [0, HI_FRAMES + 1, True], [1], f"[1, {HI_FRAMES}]"),
    ("crypto_threads", [0, 1025, 2.0], [1, 2, 1024], "[1, 1024]"),
]


@pytest.mark.parametrize("arg, bad, good, bounds", BOUNDS, ids=[b[0] for b in BOUNDS])
def test_integer_arguments_are_checked_at_their_bounds(arg, bad, good, bounds):
    """Each integer argument: its documented range, both ends accepted, the values just outside
    (and bools, floats) refused before any traffic, the message naming the argument, the range
    and the value."""
    for v in bad:
        with pytest.raises(
            ValueError, match=rf"^{arg} must be an integer in {re.escape(bounds)}, got {v!r}$"
        ):
            SecureComm(self_comm(), "aes-256-gcm", psk=PSK, **{arg: v})
    for v in good:
        with SecureComm(self_comm(), "aes-256-gcm", psk=PSK, **{arg: v}) as s:
            assert getattr(s, arg if arg != "rotate_after_frames" else "usage_limit") == v


def test_timeout_rotation_limit_and_node_ids_are_checked():
    cap = seccomm.get_suite("aes-256-gcm").usage_limit(1 << 20, seccomm.framing.AAD_BYTES)
    with SecureComm(self_comm(), "aes-256-gcm", psk=PSK, rotate_after_frames=cap) as s:
        assert s.usage_limit == cap
    src = seccomm.get_suite("aes-256-gcm").limit_source
    above = (
        f"rotate_after_frames {cap + 1} is above aes-256-gcm's usage limit of {cap} frames per key at "
        f"chunk_bytes=1048576 ({src}); it may only lower the rotation point"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(above)}$"):
        SecureComm(self_comm(), "aes-256-gcm", psk=PSK, rotate_after_frames=cap + 1)
    for bad in (0, -1, "soon", float("nan"), "0"):
        with pytest.raises(
            ValueError, match=rf"^timeout must be a number of seconds > 0, got {re.escape(repr(bad))}$"
        ):
            SecureComm(self_comm(), "aes-256-gcm", psk=PSK, timeout=bad)
    for good, want in ((0.5, 0.5), (1, 1.0), ("2.5", 2.5)):
        with SecureComm(self_comm(), "aes-256-gcm", psk=PSK, timeout=good) as s:
            assert s.timeout == want
    for bad in ([0, 1], "0", b"\0", []):
        with pytest.raises(ValueError, match=r"^node_ids must list one node id per rank \(1 entries\)$"):
            SecureComm(self_comm(), "aes-256-gcm", psk=PSK, node_ids=bad)


def test_defaults_and_environment(monkeypatch):
    """Defaults: suite aes-256-gcm, timeout SECCOMM_TIMEOUT or 60 s, job id SECCOMM_JOB_ID, else
    SLURM_JOB_ID, else empty; crypto threads SECCOMM_CRYPTO_THREADS, else the cores per rank of
    this node, 1 to 8 (1: no pool, crypto on the calling thread; never a pool for suite none);
    an argument given wins over the environment."""
    from seccomm import comm

    for var in ("SECCOMM_TIMEOUT", "SECCOMM_JOB_ID", "SLURM_JOB_ID", "SECCOMM_CRYPTO_THREADS"):
        monkeypatch.delenv(var, raising=False)

    def made(suite="aes-256-gcm", **kw):
        with SecureComm(self_comm(), suite, psk=PSK, **kw) as s:
            pool = None if s.context.pool is None else s.context.pool._max_workers
            return s.suite.name, s.timeout, s.job_id, s.crypto_threads, pool

    monkeypatch.setattr(comm.os, "cpu_count", lambda: 6)
    with SecureComm(self_comm(), psk=PSK) as s:
        assert (s.suite.name, s.timeout, s.job_id, s.crypto_threads) == ("aes-256-gcm", 60.0, "", 6)
    for cores, threads in ((20, 8), (6, 6), (2, 2), (1, 1), (None, 1)):
        monkeypatch.setattr(comm.os, "cpu_count", lambda c=cores: c)
        assert made()[3:] == (threads, None if threads == 1 else threads), cores
    monkeypatch.setattr(comm.os, "cpu_count", lambda: 6)
    assert made("none")[3:] == (6, None)  # suite none: no crypto, no pool
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SECCOMM_TIMEOUT", "7.5")
    monkeypatch.setenv("SECCOMM_CRYPTO_THREADS", "3")
    assert made() == ("aes-256-gcm", 7.5, "4242", 3, 3)
    monkeypatch.setenv("SECCOMM_JOB_ID", "mine")
    assert made()[2] == "mine"
    assert made(job_id="arg", timeout=3, crypto_threads=2) == ("aes-256-gcm", 3.0, "arg", 2, 2)
    monkeypatch.delenv("SECCOMM_CRYPTO_THREADS")
    monkeypatch.delenv("SECCOMM_PSK_FILE", raising=False)
    monkeypatch.delenv("SECCOMM_PSK", raising=False)
    with SecureComm(self_comm(), "none") as s:
        assert s.secret_source == "none (suite 'none' uses no key)"
    with SecureComm(self_comm(), "none", psk=PSK) as s:
        assert s.secret_source == "argument"


def test_the_setup_waits_with_the_timeout_or_60_s_to_report_a_bad_one(monkeypatch):
    """The MPI transport made for an MPI communicator waits ``timeout`` seconds during the setup;
    when the timeout itself is refused, 60 s, so that every rank still learns the error; after a
    failed setup that transport is closed (its communicator freed)."""
    from seccomm import comm

    made = []

    class Recording(comm.MPITransport):
        def __init__(self, c, **kw):
            super().__init__(c, **kw)
            self.closed = False
            made.append(self)

        def close(self):
            self.closed = True
            super().close()

    monkeypatch.setattr(comm, "MPITransport", Recording)
    for timeout, want in ((0.5, 0.5), (1, 1.0), (30, 30.0)):
        SecureComm(self_comm(), "aes-256-gcm", psk=PSK, timeout=timeout).close()
        assert made[-1].timeout == want
    for bad in (0, -2, "soon"):
        with pytest.raises(ValueError, match="timeout must be"):
            SecureComm(self_comm(), "aes-256-gcm", psk=PSK, timeout=bad)
        assert made[-1].timeout == 60.0 and made[-1].closed
