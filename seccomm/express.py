"""The compiled path of a repeated small allreduce on two ranks.

A repeated ``allreduce`` (sum) of one frame each way on two ranks over MPI (recursive doubling's
one swap, on a plan a repeated call keeps) spends most of its time in Python glue: about 56
Python-level calls per op, against seal, post, wait, open and add (a py-spy profile; the two paths
side by side: ``benchmarks/lean_path.py --python-path``).
:class:`seccomm._pairswap.Swap`, built from ``seccomm/_pairswap.c`` at install, does the whole
usual case of one such op in C: the op's number into nonce and AAD header, the argument record's
tag (the agreement's HMAC object), seal (``cryptography``'s ``encrypt_into``), the two MPI calls,
the poll, the record check, open (``decrypt_into``) and the sum.  Every cryptographic operation
is a call of a ``cryptography`` object; the frames on the wire are the Python path's, bit for bit.
Anything else (a receive not in after :data:`~seccomm.transports.mpi.MPITransport`'s spin, a
frame or record that fails, an MPI error) goes back to the Python path's code on the same state
(:meth:`seccomm.engine.OpRun.express_rest`), which waits with its deadline and notices and
raises as it always does.

It applies where all of these hold (else the Python path runs, unchanged):
the module was built (:func:`built`; ``pip install`` compiles it with the ``mpich`` wheel's
``mpi.h``, and falls back to the Python path where that fails: :func:`status` says which), the
suite is an AEAD (aes-256-gcm, chacha20-poly1305) and both ranks seal the hop, or the hop is
clear on both ranks (``none``, or a hop the encrypt policy leaves clear), the transport is
MPI itself (no wrapper: a wrapper sees every frame), the op is ``sum`` of float32, float64,
int32, int64 or uint8, and the call repeats with the same arrays (a plan). ``SECCOMM_EXPRESS=0``
turns it off (to measure the Python path side by side).
"""

from __future__ import annotations

import os

import numpy as np

_pairswap, _WHY = None, ""  # the module once loaded (load()), or why it could not be
#: dtype -> the module's reduction code (sum; the lower rank's operand first, as the Python path)
SUM_CODES = {np.dtype(np.float32): 1, np.dtype(np.float64): 2, np.dtype(np.int32): 3,
             np.dtype(np.int64): 4, np.dtype(np.uint8): 5}  # fmt: skip


def built() -> bool:
    """Whether the compiled module imports.  It links ``libmpi.so.12`` by its soname, so it is
    imported after ``mpi4py.MPI`` (which loads that library; importing it initialises MPI, as
    any ``SecureComm`` does), on first use."""
    global _pairswap, _WHY  # (and the module's MPI library is mpi4py's: same version text, same
    # MPI_COMM_WORLD handle)
    if _pairswap is None and not _WHY:
        try:
            from mpi4py import MPI

            from . import _pairswap as mod
        except ImportError as e:  # not built (no compiler or no mpi.h at install)
            _WHY = f"{type(e).__name__}: {e}"
        else:
            text, world = mod.library()
            if (text.strip(), world) != (MPI.Get_library_version().strip(), MPI.COMM_WORLD.handle):
                _WHY = "built against another MPI library or handle ABI than mpi4py's"
            else:
                _pairswap = mod
    return _pairswap is not None


def enabled() -> bool:
    """Whether the compiled path is built and not turned off (``SECCOMM_EXPRESS=0``)."""
    return os.environ.get("SECCOMM_EXPRESS", "1") != "0" and built()


def status() -> str:
    """One line for a benchmark header: which path a repeated small two-rank allreduce takes."""
    if not built():
        return f"compiled pair path not built ({_WHY}): Python path"
    if not enabled():
        return "compiled pair path off (SECCOMM_EXPRESS=0): Python path"
    return "compiled pair path (seccomm._pairswap)"


def swap(**kw):
    """A :class:`seccomm._pairswap.Swap` (see ``seccomm/_pairswap.c`` for its arguments)."""
    return _pairswap.Swap(
        kw["comm"], kw["peer"], kw["tag"], kw["spins"], kw["red"], kw["theirs_first"],
        kw["snonce"], kw["shdr"], kw["piece"], kw["sframe"], kw["swire"],
        kw["rnonce"], kw["rhdr"], kw["rframe"], kw["rwire"], kw["out"], kw["cur"], kw["res"],
        kw["seal"], kw["open"], kw["mac"], kw["tail"], kw["lower"],
    )  # fmt: skip


PENDING = -1
MPIERR = -5
