"""Repeated calls: a ``SecureComm``'s :class:`PlanTable`.

A call with the very same numpy arrays (same shape, strides, dtype and writeability), arguments
and algorithm as one before skips the argument checks: its :class:`Plan` (the op's frame bound,
its argument record after the op number, its run, and the algorithm's steps prepared for those
arrays) is kept for calls of at most :data:`PLAN_MAX_BYTES` per buffer, :data:`PLAN_SLOTS` plans
per communicator.  A plan holds references to its two arrays and the wire buffers its steps use
until it is dropped (a full table is emptied).  Where the compiled two-rank swap applies
(:mod:`seccomm.pairswap`), the table asks for it once, as the plan is made, and builds it once
per key epoch."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from . import pairswap

#: largest buffer (bytes) whose checked call is kept as a plan; plans per communicator
PLAN_MAX_BYTES, PLAN_SLOTS = 1 << 20, 16


class Plan(NamedTuple):
    """One checked call, kept for its repeats."""

    send: np.ndarray  # the two arrays of the key (kept alive: their ids stay theirs)
    recv: np.ndarray
    layout: tuple  # layout(sendbuf, recvbuf) when the call was checked
    bound: int  # frames one op may seal under one key
    tail: bytes  # its argument record after the op number
    run: object  # the first op's OpRun, restarted for each repeat (its frame context too)
    steps: object  # steps(): the algorithm on run, prepared for these arrays where it can be
    # (the checked call's arguments are in it: views of the two arrays)
    check: object  # check(): the agreement's check of run's op
    compiled: list | None  # [pairswap.offer's spec, the compiled swap, its epoch], or None


class PlanTable:
    """The plans of one communicator, by call: ``len``, :meth:`values`, :meth:`clear`."""

    def __init__(self):
        self._plans: dict = {}  # (name, id(sendbuf), id(recvbuf), algorithm, *kw) -> Plan

    def __len__(self) -> int:
        return len(self._plans)

    def values(self):
        """The plans kept."""
        return self._plans.values()

    def clear(self) -> None:
        """Drop every plan (and with it the arrays and wire buffers it holds)."""
        self._plans.clear()

    def find(self, name: str, send, recv, algorithm: str, kw: dict) -> tuple:
        """``(key, plan)``: the plan of a call of collective ``name`` on numpy arrays ``send``
        and ``recv`` with ``algorithm`` and keyword arguments ``kw``, or ``(key, None)`` where
        there is none (or the arrays changed their layout); ``(None, None)`` where an argument
        cannot be a key (unhashable: the call's checks name it)."""
        try:
            key = (name, id(send), id(recv), algorithm, *kw.values(), *map(type, kw.values()))
            plan = self._plans.get(key)
        except TypeError:
            return None, None
        if plan is not None and plan.send is send and plan.recv is recv and plan.layout == layout(send, recv):
            return key, plan
        return key, None

    def keep(self, key, send, recv, bound: int, tail: bytes, run, steps, check) -> None:
        """Keep the checked call ``key`` (:meth:`find`) as a plan, where its buffers are small
        enough (:data:`PLAN_MAX_BYTES`); a full table is emptied first."""
        if key is None or max(send.nbytes, recv.nbytes) > PLAN_MAX_BYTES:
            return
        if len(self._plans) >= PLAN_SLOTS:
            self._plans.clear()
        spec = pairswap.offer(steps)  # (what a compiled swap could run, if anything)
        compiled = None if spec is None else [spec, None, None]
        self._plans[key] = Plan(send, recv, layout(send, recv), bound, tail, run, steps, check, compiled)

    def repeat(self, plan: Plan, sequence) -> None:
        """Run ``plan`` once more as the next op of ``sequence``
        (:class:`~seccomm.sequence.OpSequence`): in the compiled swap where it applies, else its
        steps."""
        run, op_index = plan.run, sequence.next_op(plan.bound)  # (first: it may rotate)
        if plan.compiled is not None and self._compiled(plan, op_index, sequence):
            return
        run.restart(sequence.epoch, sequence.seq, op_index)
        sequence.run(run, plan.steps, plan.tail, plan.check)

    def _compiled(
        self, plan: Plan, op_index: int, sequence
    ) -> bool:  # pragma: no mutate block (MPI: tests/mpi_worker.py express)
        """Run the op numbered ``sequence.seq`` (index ``op_index`` in the epoch) in the plan's
        compiled swap (:mod:`seccomm.pairswap`; built once per epoch); False where none applies
        (the caller runs the steps).  The usual case ends in the swap; any other runs the rest
        of the op inside :meth:`OpSequence.run <seccomm.sequence.OpSequence.run>`
        (:func:`seccomm.pairswap.rest`), which raises as the Python path does."""
        x, seq, epoch = plan.compiled, sequence.seq, sequence.epoch
        if x[2] != epoch:
            try:
                x[1] = pairswap.compile(x[0], epoch, sequence.agreement, plan.tail)
            except Exception:  # (buffers it refuses: the Python path runs the op, nothing lost; the
                x[1] = None  # op has its number already, so raising here would leave the peer waiting)
            x[2] = epoch
        sw = x[1]
        if sw is None:
            return False
        try:
            got = sw.start(seq, op_index, epoch)
        except Exception as e:  # (before anything was posted: raised in the op, which tells the peer)
            got = e
        else:
            if got >= 0 and not sw.finish(got):
                if not sw.sent():  # (its last send, waited for at the next op's start)
                    link, label = sw.python[0](), f"{plan.run.collective} #{seq}"
                    sequence.unsent = ((link.adopt(sw.requests()[0], sw),), (link.peer,), label)
                return True
        run = plan.run
        run.restart(epoch, seq, op_index)
        sequence.run(run, lambda: pairswap.rest(run, sw, got), plan.tail, plan.check)
        run.pending = run.sends = []  # (complete, or in unsent: the swap's requests need not outlive
        # the op, where they would keep the swap, and through it this run)
        return True


def layout(a: np.ndarray, b: np.ndarray) -> tuple:
    """What a checked call depends on and an array can change in place: shape, strides, dtype,
    writeability (the arrays themselves are the plan's key: their ids, kept alive by the plan)."""
    return (a.shape, a.strides, a.dtype, a.flags.writeable, b.shape, b.strides, b.dtype, b.flags.writeable)
