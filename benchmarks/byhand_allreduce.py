"""The "by hand" encrypted allreduce beside native MPI and seccomm, timed in one run.

The by-hand allreduce is what a user could write in 30 lines without seccomm: each rank seals its
whole buffer once with ``cryptography``'s AESGCM (one random 96-bit nonce per call, NIST SP
800-38D §8.2.2), the ciphertexts are gathered with ``MPI_Allgather``, and every rank opens all
of them and sums.  It moves p times the data of a ring allreduce and opens p buffers per rank,
so it is the bar seccomm must clear at every size.

Run (2 ranks; sizes as ``seccomm bench``: ``-b``/``-e`` bytes with K/M suffixes, ``-f`` factor)::

    mpiexec -n 2 python benchmarks/byhand_allreduce.py -b 4K -e 64M -f 4

Prints per size: time (µs, median over iterations of the slowest rank) of native ``Allreduce``,
seccomm ``none`` and ``aes-256-gcm``, and the by-hand allreduce, and the ratios aes ÷ native,
aes ÷ none and by-hand ÷ aes.  Variants rotate every iteration (seccomm.bench.timing); results
are checked against native MPI before timing (float32 integers: sums are exact).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from mpi4py import MPI

from seccomm import SecureComm
from seccomm.bench.timing import interleaved_times
from seccomm.units import parse_size

TAG = 16


def byhand(comm, aead, x, out, gathered):
    """Seal ``x`` (float32) once, allgather the nonce || ciphertext || tag of every rank, open
    them all and sum into ``out``."""
    nonce = os.urandom(12)
    sealed = np.frombuffer(nonce + aead.encrypt(nonce, x.tobytes(), None), np.uint8)
    comm.Allgather(sealed, gathered)
    out.fill(0)
    for row in gathered:
        b = row.tobytes()
        out += np.frombuffer(aead.decrypt(b[:12], b[12:], None), np.float32)


def sizes(begin: int, end: int, factor: int) -> list[int]:
    out, s = [], begin
    while s <= end:
        out.append(s)
        s *= factor
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-b", default="4K", help="smallest message, bytes (K/M/G suffixes)")
    ap.add_argument("-e", default="64M", help="largest message, bytes")
    ap.add_argument("-f", type=int, default=4, help="size factor between rows")
    ap.add_argument("--iters", type=int, default=0, help="timed iterations per size (0: by size)")
    a = ap.parse_args(argv)
    comm = MPI.COMM_WORLD
    key = np.zeros(32, np.uint8)
    if comm.rank == 0:
        key[:] = np.frombuffer(AESGCM.generate_key(256), np.uint8)
    comm.Bcast(key, root=0)  # a benchmark key sent in the clear, as a by-hand script would
    aead = AESGCM(key.tobytes())
    psk = key.tobytes()[::-1]  # any random secret; the by-hand key is public anyway
    comms = {s: SecureComm(comm, s, psk=psk) for s in ("none", "aes-256-gcm")}
    if comm.rank == 0:
        print(f"# by-hand vs seccomm, {comm.size} ranks, float32 sum, µs (median, slowest rank)")
        print(
            f"{'bytes':>10} {'native':>10} {'none':>10} {'aes-gcm':>10} {'by hand':>10}"
            f" {'aes/nat':>8} {'aes/none':>8} {'hand/aes':>8}"
        )
    for nbytes in sizes(parse_size(a.b), parse_size(a.e), a.f):
        n = nbytes // 4
        x = np.random.default_rng(comm.rank).integers(-8, 9, n).astype(np.float32)
        outs = {v: np.empty_like(x) for v in ("native", "none", "aes-256-gcm", "byhand")}
        gathered = np.empty((comm.size, 12 + nbytes + TAG), np.uint8)

        def call(v):
            if v == "native":
                comm.Allreduce(x, outs[v], MPI.SUM)
            elif v == "byhand":
                byhand(comm, aead, x, outs[v], gathered)
            else:
                comms[v].allreduce(x, outs[v])

        for v in outs:
            call(v)
        wrong = sum(int(np.count_nonzero(outs[v] != outs["native"])) for v in outs)
        wrong = comm.allreduce(wrong)
        iters = a.iters or max(5, min(200, (64 << 20) // max(nbytes, 1) // 64))
        t = np.median(interleaved_times(comm, list(outs), call, iters, warmup=2), axis=1) * 1e6
        if comm.rank == 0:
            nat, none, aes, hand = t
            print(
                f"{nbytes:>10} {nat:>10.1f} {none:>10.1f} {aes:>10.1f} {hand:>10.1f}"
                f" {aes / nat:>8.2f} {aes / none:>8.2f} {hand / aes:>8.2f}"
                + (f"  {wrong} WRONG" if wrong else "")
            )
    for sc in comms.values():
        sc.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
