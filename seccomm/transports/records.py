"""The argument-record channel every transport has by default: :class:`Records`.

Before an op's first frame every rank sends every other its argument record
(:mod:`seccomm.agreement`), and the op checks the table once they are in.  This default runs the
whole exchange, then the check, before the op's first frame, over the transport's own
point-to-point calls (or, ``gathered``, in one all-gather of every rank's records: fewer
messages where each costs a millisecond).  The MPI transport overlaps the exchange with the op
instead (:mod:`seccomm.transports.mpi_records`).  A transport names its channel in ``records``;
:class:`~seccomm.transports.base.Transport` hands it the record calls of its interface.
"""

from __future__ import annotations

import numpy as np

from ..errors import FrameError, SecCommError


class Records:
    """The argument records of transport ``t``'s ops, exchanged before the op (module docstring).

    ``gathered``: one all-gather of every rank's records (``size x size x n`` bytes in all)
    instead of ``size - 1`` messages each way.  Every method of this class is the default of the
    :class:`~seccomm.transports.base.Transport` method of the same name (see there).
    """

    def __init__(self, t, gathered: bool = False):
        self.t, self.gathered = t, gathered

    def agree(self, record, table) -> None:
        t = self.t
        if self.gathered:  # every rank's whole set of records, of which each keeps its row
            got = np.zeros((t.size,) + record.shape, np.uint8)
            t.allgather(record, got, t.op_label, t.op_timeout)
            table[:] = got[:, t.rank]
            return
        peers = [r for r in range(t.size) if r != t.rank]
        n = record.shape[1]
        recvs = [t.irecv(table[r], r) for r in peers]
        sends = [t.isend(record[r], r) for r in peers]
        for r, req in zip(peers, recvs):
            got = t.wait_recv(req, r)
            if got != n:
                raise record_size_error(t.op_label, r, got, n)
        t.wait_sends(sends, peers)

    def agree_start(self, record, table, check, expect=None) -> None:
        self.t.agree(record, table)  # (the transport's: it may have its own)
        check()

    def agree_finish(self) -> None:
        return None

    def agree_settle(self, limit: float):
        return None

    def announce(self, record) -> list:
        t = self.t
        if self.gathered:  # the others wait in the op's all-gather: join it with the refusal
            got = np.zeros((t.size,) + record.shape, np.uint8)  # records (waiting at most the
            try:  # deadline for them to arrive), so that they stop at once
                t.allgather(record, got, "refusal")
            except SecCommError:
                pass
            return []
        return [t.isend(record[r], r) for r in range(t.size) if r != t.rank]

    # a channel that carries the record in the op's first message (paired) says so here
    def put_record(self, trailer) -> bool:
        return False

    def record_due(self) -> bool:
        return False

    def take_record(self, wire, got: int, peer: int) -> int:
        raise NotImplementedError("only a paired channel carries records behind frames")

    def send_record(self) -> None:
        return None

    def expect_record(self, peer: int):
        return None

    def wait_record(self, peer: int) -> None:
        return None

    def discard(self, buf, peer: int) -> None:
        return None

    def close(self) -> None:
        return None


def record_size_error(op_label: str, peer: int, got: int, n: int) -> FrameError:
    """An argument record of ``got`` bytes, not ``n``, from ``peer``."""
    return FrameError(
        f"{op_label}: the argument record from rank {peer} has {got} bytes, not {n}: the ranks "
        f"disagree on the call sequence, or it was altered",
        peer=peer,
        op=op_label,
    )
