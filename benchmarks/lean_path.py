"""seccomm's own per-call path at small and mid sizes, side by side with native MPI.

    mpiexec -bind-to core -n 2 python benchmarks/lean_path.py [--against CHECKOUT] [--sizes 4K,64K]

Allreduce of float32 (sum) at 4 KiB to 1 MiB: native ``MPI_Allreduce``, seccomm ``none`` and
``aes-256-gcm`` on the same buffers, a barrier before every call (as ``seccomm bench``), the
variants rotated every iteration; prints the median of the slowest rank (µs) and the ratios to
native.

``--python-path``: also run each suite with the compiled two-rank swap off (seccomm.pairswap:
its plans made with ``SECCOMM_EXPRESS=0``), side by side with it on.

``--against CHECKOUT``: also run the ``seccomm`` package of another checkout (a git worktree of an
older commit), loaded in the same processes under the name ``seccomm_base``, so both are measured
side by side in one run.  Each version gets two communicators per suite, built in the order new,
base, base, new, and its time is the mean of the two: on a 2-core machine the communicator built
first was up to 1.4x slower in some runs, whichever version it was.  Even so, the checkout measured
against a copy of itself came out 1.03-1.12x slower than the copy: read a ratio against that
spread, measured on the same machine just before or after (``--against`` a plain copy of this
checkout's ``seccomm`` folder).  The secret below is a fixed benchmark key, not a job secret."""

import argparse
import importlib.util
import os
import shutil
import sys
import tempfile
import time

import numpy as np
from mpi4py import MPI

import seccomm
from seccomm.units import parse_size

SUITES = ("none", "aes-256-gcm")
PSK = bytes.fromhex("9f1c2a7b44e05d3c8a61f0e2b7d94c15a3e8f6027bd15c9e4f0a83d26c7e15b9")


def load_base(checkout: str, tmp: str):
    """The ``seccomm`` package of ``checkout``, imported as ``seccomm_base`` (its modules import
    each other relatively, so a renamed copy is a separate package)."""
    shutil.copytree(os.path.join(checkout, "seccomm"), os.path.join(tmp, "seccomm_base"))
    spec = importlib.util.spec_from_file_location(
        "seccomm_base", os.path.join(tmp, "seccomm_base", "__init__.py")
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules["seccomm_base"] = mod
    spec.loader.exec_module(mod)
    return mod


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", metavar="CHECKOUT", help="another checkout to measure side by side")
    ap.add_argument("--sizes", default="4K,16K,64K,256K,1M", help="message sizes in bytes (K, M)")
    ap.add_argument("--iters", type=int, default=0, help="timed calls per size (default by size)")
    ap.add_argument("--floor", action="store_true", help="also time floor_call (2 ranks only)")
    ap.add_argument(
        "--python-path",
        action="store_true",
        help="also time each suite's Python path (SECCOMM_EXPRESS=0 while its plans are made)",
    )
    args = ap.parse_args()
    comm = MPI.COMM_WORLD
    tmp = tempfile.mkdtemp(prefix="seccomm-lean-")
    try:
        versions = {"": seccomm}
        if args.against:
            versions[" base"] = load_base(args.against, tmp)
        comms = {}  # variant -> list of SecureComms (two per version with --against)
        for s in SUITES:
            order = ["", " base", " base", ""] if args.against else [""]
            for v in order:
                comms.setdefault(s + v, []).append(versions[v].SecureComm(comm, s, psk=PSK))
            if args.python_path:  # (its plans are made in run_size's warm-up, with the path off)
                comms[s + " py"] = [seccomm.SecureComm(comm, s, psk=PSK)]
        sizes = [parse_size(b) for b in args.sizes.split(",")]
        rows = [run_size(comm, b, comms, args.iters, args.floor) for b in sizes]
        if comm.rank == 0:
            show(rows, [k for k in rows[0][1] if k != "native"], versions)
        for scs in comms.values():
            for sc in scs:
                sc.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def floor_call(comm, x, y, record="own"):
    """The least a Python allreduce with seccomm's guarantees does on 2 ranks: an HMAC'd 40-byte
    argument record each way, one AES-GCM frame each way (sealed from ``x``, opened into private
    memory), the sum.  ``record``: ``"own"`` (a message of its own, on persistent requests, as
    seccomm sends it), ``"in frame"`` (appended to the frame's message) or ``None``.  No plan
    check, no deadline, no key schedule, no error path: a floor for any Python path, not an
    implementation (``--floor``)."""
    from cryptography.hazmat.primitives import hashes, hmac
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    peer, n = 1 - comm.rank, x.nbytes
    aead, mac = AESGCM(PSK), hmac.HMAC(PSK, hashes.SHA256())
    rec, tab = np.zeros(40, np.uint8), np.zeros(40, np.uint8)
    extra = 40 if record == "in frame" else 0
    sf, rf = np.zeros(n + 117 + extra, np.uint8), np.zeros(n + 117 + extra, np.uint8)
    hdr, nonce, tmp = bytes(89), bytes(12), np.empty_like(x)
    xb, tb = memoryview(x).cast("B"), memoryview(tmp).cast("B")
    sbody, rbody = memoryview(sf)[101 : 117 + n], memoryview(rf)[101 : 117 + n]
    reqs = [comm.Recv_init(tab, peer, 9), comm.Send_init(rec, peer, 9)]

    def call():
        if record:
            h = mac.copy()
            h.update(b"seccomm/1 agree" + bytes(24))
            rec[24:] = np.frombuffer(h.finalize()[:16], np.uint8)
        if record == "own":
            MPI.Prequest.Startall(reqs)
        elif record:
            sf[-40:] = rec
        aead.encrypt_into(nonce, xb, hdr, sbody)
        s = comm.Isend(sf, peer, 8)
        r = comm.Irecv(rf, peer, 8)
        r.Wait()
        aead.decrypt_into(nonce, rbody, hdr, tb)
        np.add(x, tmp, out=y)
        s.Wait()
        if record == "own":
            MPI.Request.Waitall(reqs)
        elif record:
            tab[:] = rf[-40:]
        if record and tab.tobytes() != rec.tobytes():
            raise AssertionError("records differ")

    call.requests = reqs  # freed by run_size
    return call


def run_size(comm, nbytes, comms, iters, floor=False):
    x = np.ones(nbytes // 4, np.float32)
    y = np.empty_like(x)
    fs = {"native": [lambda: comm.Allreduce(x, y)]}
    if floor:
        fs["floor aes"] = [floor_call(comm, x, y)]
        fs["floor aes, record in frame"] = [floor_call(comm, x, y, record="in frame")]
        fs["floor aes, no record"] = [floor_call(comm, x, y, record=None)]
    for k, scs in comms.items():
        fs[k] = [(lambda sc: lambda: sc.allreduce(x, y))(sc) for sc in scs]
    calls = [(k, i) for k, f in fs.items() for i in range(len(f))]
    iters = iters or (3000 if nbytes <= 65536 else 400)
    ts = {c: np.zeros(iters) for c in calls}
    for k, i in calls:
        os.environ["SECCOMM_EXPRESS"] = "0" if k.endswith(" py") else "1"  # (read as a plan is made)
        for _ in range(50):
            fs[k][i]()
    os.environ.pop("SECCOMM_EXPRESS")
    for it in range(iters):
        r = it % len(calls)
        for k, i in calls[r:] + calls[:r]:
            comm.Barrier()
            t0 = time.perf_counter()
            fs[k][i]()
            ts[k, i][it] = time.perf_counter() - t0
    for k in ("floor aes", "floor aes, record in frame", "floor aes, no record"):
        for f in fs.get(k, []):
            for req in f.requests:
                req.Free()
    med = {}
    for k, i in calls:
        m = ts[k, i].copy()
        comm.Allreduce(MPI.IN_PLACE, m, MPI.MAX)
        med.setdefault(k, []).append(np.median(m) * 1e6)
    return nbytes, {k: float(np.mean(v)) for k, v in med.items()}


def show(rows, variants, versions):
    for v, mod in versions.items():
        print(f"# seccomm{v or ''} from {os.path.dirname(mod.__file__)}")
    print("# µs: median of the slowest rank (mean of the two communicators of a version)")
    cols = ["native", *variants]
    head = " ".join(f"{c:>16}" for c in cols) + "   " + " ".join(f"{c + ' /nat':>20}" for c in variants)
    print(f"{'bytes':>9} {head}")
    for nbytes, med in rows:
        n = med["native"]
        print(
            f"{nbytes:>9} "
            + " ".join(f"{med[c]:16.1f}" for c in cols)
            + "   "
            + " ".join(f"{med[c] / n:20.2f}" for c in variants)
        )


if __name__ == "__main__":
    main()
