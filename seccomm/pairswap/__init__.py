"""The compiled swap: a repeated small allreduce on two ranks, in C.

A repeated ``allreduce`` (sum) of one frame each way on two ranks over MPI (recursive doubling's
one swap, on a plan a repeated call keeps) spends most of its time in Python glue: about 56
Python-level calls per op, against seal, post, wait, open and add (a py-spy profile; the two paths
side by side: ``benchmarks/lean_path.py --python-path``).
:class:`seccomm.pairswap._pairswap.Swap`, built from ``seccomm/pairswap/_pairswap.c`` at install,
does the whole usual case of one such op in C: the op's number into nonce and AAD header, the
argument record's tag (the agreement's HMAC object), seal (``cryptography``'s ``encrypt_into``),
the two MPI calls, the poll, the record check, open (``decrypt_into``) and the sum.  Every
cryptographic operation is a call of a ``cryptography`` object; the frames on the wire are the
Python path's, bit for bit.  Anything else (a receive not in after
:data:`~seccomm.transports.mpi.MPITransport`'s spin, a frame or record that fails, an MPI error)
goes back to the Python path's code on the same state (:func:`rest`): the engine's
:func:`~seccomm.engine.land.land` accepts the frame, with the deadline and notices of the
transport's wait, and raises as it always does.

This package is the one seam: the engine's swap step asks :func:`offered` and hands
:func:`compile` to the plan, which calls it once per epoch; nothing else names the C module.

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
import weakref

import numpy as np

from ..engine.land import CLEAR, Inbox, land
from ..framing import KEY_DIRECTION, RECORD_ROOM, Workspace
from ..suites import AEADKey

_mod, _WHY = None, ""  # the compiled module once loaded (built()), or why it could not be
#: dtype -> the module's reduction code (sum; the lower rank's operand first, as the Python path)
SUM_CODES = {np.dtype(np.float32): 1, np.dtype(np.float64): 2, np.dtype(np.int32): 3,
             np.dtype(np.int64): 4, np.dtype(np.uint8): 5}  # fmt: skip


def built() -> bool:
    """Whether the compiled module imports.  It links ``libmpi.so.12`` by its soname, so it is
    imported after ``mpi4py.MPI`` (which loads that library; importing it initialises MPI, as
    any ``SecureComm`` does), on first use."""
    global _mod, _WHY  # (and the module's MPI library is mpi4py's: same version text, same
    # MPI_COMM_WORLD handle)
    if _mod is None and not _WHY:
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
                _mod = mod
    return _mod is not None


def enabled() -> bool:
    """Whether the compiled path is built and not turned off (``SECCOMM_EXPRESS=0``)."""
    return os.environ.get("SECCOMM_EXPRESS", "1") != "0" and built()


def status() -> str:
    """One line for a benchmark header: which path a repeated small two-rank allreduce takes."""
    if not built():
        return f"compiled pair path not built ({_WHY}): Python path"
    if not enabled():
        return "compiled pair path off (SECCOMM_EXPRESS=0): Python path"
    return "compiled pair path (seccomm.pairswap)"


def swap(**kw):
    """A :class:`seccomm.pairswap._pairswap.Swap` (see ``_pairswap.c`` for its arguments)."""
    return _mod.Swap(
        kw["comm"], kw["peer"], kw["tag"], kw["spins"], kw["red"], kw["theirs_first"],
        kw["snonce"], kw["shdr"], kw["piece"], kw["sframe"], kw["swire"],
        kw["rnonce"], kw["rhdr"], kw["rframe"], kw["rwire"], kw["out"], kw["cur"], kw["res"],
        kw["seal"], kw["open"], kw["mac"], kw["tail"], kw["lower"],
    )  # fmt: skip


PENDING = -1
MPIERR = -5


def offer(steps):
    """What of a plan's ``steps`` the compiled swap could run: the engine's swap step's
    :class:`~seccomm.engine.swap.PairSpec` (its ``pair`` attribute: a sum on two ranks, one frame
    each way) where its link offers the swap (an MPI pair link) and the path is
    :func:`enabled` now, as the plan is made; else ``None``."""
    spec = getattr(steps, "pair", None)
    if spec is None or getattr(spec.link, "express", None) is None or not enabled():
        return None
    return spec


def compile(spec, epoch, agreement, tail):  # pragma: no mutate block (MPI: tests/mpi_worker.py express)
    """The compiled swap of ``spec`` (:func:`offer`) under ``epoch``'s keys, in slots of its own
    (their nonce and header written here once; the op's number, per op, by the swap), or
    ``None`` where it does not apply (a hop under GMAC, a dtype it does not sum).
    ``agreement``: the communicator's :class:`~seccomm.agreement.Agreement` (the record's MAC);
    ``tail``: the op's argument record after its number.  Its ``python`` attribute keeps what
    :func:`rest` needs: the link, the peer and ``landed(got)``, which hands a message of ``got``
    bytes in its receive slot to :func:`~seccomm.engine.land.land` (record, length, tag, sum)."""
    run, link, peer, step, piece, elems = spec.run, spec.link, spec.peer, spec.step, spec.piece, spec.elems
    cur, res, theirs_first = spec.summed
    red = SUM_CODES.get(res.dtype)
    run.frame.epoch = epoch
    skey, rkey = run.protect(False, run.rank, peer), run.protect(False, peer, run.rank)
    clear = skey.suite.clear
    if red is None or rkey.suite.clear != clear or not (clear or type(skey) is type(rkey) is AEADKey):
        return None
    mac, lower = agreement.pair_mac(peer)
    nbytes, ws = elems * run.itemsize, Workspace()
    sslot, rslot = ws.slots("send", [nbytes])[0], ws.slots("recv", [nbytes])[0]
    if clear:  # (the payload alone, its record behind it: the clear swap's frames)
        swire, rwire = sslot.wire[: nbytes + RECORD_ROOM], rslot.wire[: nbytes + RECORD_ROOM]
        sframe, rframe, out, seal, open_ = sslot.body, rslot.body, rslot.body, None, None
        box = Inbox(peer, step, CLEAR, [rframe], consume=spec.consume)
    else:
        fill = run.frame.fill
        fill(sslot, KEY_DIRECTION, skey.suite.suite_id, step, 0, 1, run.rank, peer, elems)
        fill(rslot, KEY_DIRECTION, rkey.suite.suite_id, step, 0, 1, peer, run.rank, elems)
        swire, rwire, sframe, rframe = sslot.wire, rslot.wire, sslot.frame, rslot.frame
        out, seal, open_ = spec.out, skey.aead.encrypt_into, rkey.aead.decrypt_into
        box = Inbox(peer, step, rkey, [rframe], [rslot], [out], spec.consume)
    box.record = rwire  # (the op's record always rides behind the frame here)
    # (the swap keeps what follows; the run's requests keep the swap: the run and the link, and
    # through them the transport and its last check of this run, are held weakly: no cycle)
    weak = weakref.ref(run)

    def landed(got):
        land(weak(), box, 0, got=got)

    comm, tag, spins = link.express
    sw = swap(
        comm=comm, peer=peer, tag=tag, spins=spins, red=red, theirs_first=int(theirs_first),
        snonce=sslot.nonce, shdr=sslot.header, piece=piece, sframe=sframe, swire=swire,
        rnonce=rslot.nonce, rhdr=rslot.header, rframe=rframe, rwire=rwire, out=out,
        cur=cur, res=res, seal=seal, open=open_, mac=mac, tail=tail, lower=lower,
    )  # fmt: skip
    sw.python = (weakref.ref(link), peer, landed)
    return sw


def rest(run, sw, got) -> None:  # pragma: no mutate block (MPI: tests/mpi_worker.py express)
    """The rest of an op whose compiled swap ``sw`` (:func:`compile`) did not end in the usual
    case: ``got`` is what its ``start`` returned (the bytes received, or :data:`PENDING`,
    :data:`MPIERR`, or the exception it raised before it posted anything).  Runs inside
    ``OpSequence.run`` after its record and agreement start, on the plan's ``run``
    (:class:`~seccomm.engine.run.OpRun`): the swap's requests become the run's, then the engine
    waits (deadline, notices), checks and raises as on the Python path."""
    link, peer, landed = sw.python
    link = link()  # (alive: the plan's step keeps it)
    link.first_done()  # (the record went out behind the frame; the first receive is posted for both)
    if isinstance(got, BaseException):
        raise got
    sh, rh = sw.requests()
    sreq = link.adopt(sh, sw)
    run.pending.append(sreq)
    run.sends.append((sreq, peer))
    rreq = link.adopt(rh, sw)  # (after an MPI error MPI may have freed it: then a null request)
    run.pending.append(rreq)
    if got == MPIERR:
        raise link.error(sw.mpi_error, run.op_label)
    if got == PENDING:
        got = link.wait(rreq)
        if not sw.finish(got):
            return
    landed(got)
