"""What the give-up notices told a rank, and whom it blames: :class:`Told`.

The :class:`~seccomm.transports.notices.Notices` of an MPI transport collect the other ranks'
authenticated notices (who gave up waiting on whom, in which op; who stopped after an error,
failed, or refused its arguments) into a :class:`Told`; a rank whose wait passed its deadline
reads it (:meth:`Told.verdict`): it follows the chain of notices from the rank it waited on to
the rank that stopped, and names that one, or the link between two ranks that waited on each
other, in the error it raises.
"""

from __future__ import annotations

from ..errors import PeerAbortError, SecCommError, TransportTimeout

#: the blamed rank of an abort notice whose sender could not tell which rank sent the message
#: that failed (a ``FrameError`` with ``peer == "any"``: a record receive that got a larger
#: message); valid with kind ``_ABORT`` only
UNKNOWN_SENDER = -1


class Told:
    """What the notices that reached rank ``rank`` said: ``gave_up`` (rank -> the rank it
    blamed), ``gave_up_in`` (rank -> the op it gave up waiting in, 0: unknown), ``aborted``
    (ranks that stopped after detecting an error), ``failed`` (of those, the ranks whose error
    was their own), ``refused`` (of those, rank -> (op seq, exception)), ``forged_notices``
    (claimed sender -> notices that failed the MAC)."""

    def __init__(self, rank: int):
        self.rank = rank
        self.gave_up: dict[int, int] = {}
        self.gave_up_in: dict[int, int] = {}
        self.aborted: set[int] = set()
        self.failed: set[int] = set()
        self.refused: dict[int, tuple[int, str]] = {}
        self.forged_notices: dict[int, int] = {}

    def note(self) -> str:
        if not self.forged_notices:
            return ""
        n, who = sum(self.forged_notices.values()), sorted(self.forged_notices)
        return f" [{n} forged give-up notice(s) claiming rank(s) {who} failed authentication: ignored]"

    def blame(self, peer: int) -> int:
        """Follow the chain of notices from ``peer`` (who gave up waiting on whom) to its end,
        or to the first rank on it that stopped after detecting an error."""
        return self.walk(peer)[0]

    def walk(self, peer: int) -> tuple[int, bool]:
        """``(end, here)``: the end of the chain of notices from ``peer`` (:meth:`blame`) and
        whether it led back to this rank (the rank before it is then the end)."""
        seen = {self.rank}
        while peer in self.gave_up and peer not in seen and peer not in self.aborted:
            seen.add(peer)
            nxt = self.gave_up[peer]
            if nxt in seen:
                return peer, nxt == self.rank
            peer = nxt
        return peer, False

    def did_its_part(self, peer: int, seq: int) -> bool:
        """Whether ``peer`` gave up waiting on this rank in an op before the one this rank is in
        now (its number ``seq``; 0: none): this rank did that op's part, so what ``peer`` waited
        for was lost or held on the way, and this rank, however briefly it has waited since, did
        not stall."""
        theirs = self.gave_up_in.get(peer, 0)
        return self.gave_up.get(peer) == self.rank and 0 < theirs < seq

    def verdict(self, peer: int, op_label: str, timeout: float, waited: bool) -> SecCommError:
        """The error of this rank, which gave up waiting on ``peer`` in ``op_label`` after
        ``timeout`` seconds (``waited``: past its deadline, see
        :meth:`Notices.give_up <seccomm.transports.notices.Notices.give_up>`), from what the
        notices told: ``PeerAbortError`` when the chain ends at a rank that refused, failed or
        stopped after detecting an error; ``TransportTimeout`` naming the link between two ranks
        that waited on each other, this rank when the others gave up on it, or the rank the
        chain ends at."""
        culprit = self.blame(peer)
        if culprit in self.refused:
            return PeerAbortError(
                self._refused_text(culprit, op_label) + self.note(), peer=culprit, op=op_label, blamed=culprit
            )
        if culprit in self.failed:
            return PeerAbortError(
                f"{op_label}: rank {culprit} stopped this operation after an error of its own (an "
                f"exception raised on that rank inside the operation, not a frame error: see the error "
                f"on rank {culprit})" + self.note(),
                peer=culprit,
                op=op_label,
                blamed=culprit,
            )
        if culprit in self.aborted:
            source = self.gave_up[culprit]
            what = (
                "a message whose sender it could not tell"
                if source == UNKNOWN_SENDER
                else f"a frame from rank {source}"
            )
            return PeerAbortError(
                f"{op_label}: rank {culprit} stopped this operation after it detected an error in "
                f"{what} (see the error on rank {culprit})" + self.note(),
                peer=culprit,
                op=op_label,
                blamed=None if source == UNKNOWN_SENDER else source,
            )
        link = self._link(culprit, waited)
        if link is not None:
            a, b = link
            who = (
                f"this rank (rank {self.rank}) and rank {culprit}"
                if self.rank in link
                else f"ranks {a} and {b}"
            )
            return TransportTimeout(
                f"{op_label}: {who} each waited on the other past the {timeout:g} s deadline: what "
                f"they sent each other was lost on the way (dropped or held), or they disagree on "
                f"the call sequence" + self.note(),
                peer=culprit,
                op=op_label,
                timeout_s=timeout,
                link=link,
            )
        if self.gave_up.get(culprit) == self.rank and culprit in self.gave_up:
            return TransportTimeout(  # the others gave up on this rank: it was the one that stalled
                f"{op_label}: rank {culprit} gave up waiting on this rank (rank {self.rank}): it "
                f"stalled past the {timeout:g} s deadline" + self.note(),
                peer=self.rank,
                op=op_label,
                timeout_s=timeout,
            )
        via = "" if culprit == peer else f" (this rank waited on rank {peer}, itself stuck behind it)"
        if self.gave_up.get(culprit) == culprit:
            via += f" (rank {culprit} reports that it stalled)"
        return TransportTimeout(
            f"{op_label}: rank {culprit} made no progress within {timeout:g} s{via}: it stopped, "
            f"died, or the ranks disagree on the call sequence" + self.note(),
            peer=culprit,
            op=op_label,
            timeout_s=timeout,
        )

    def _link(self, culprit: int, waited: bool):
        """``(a, b)`` when the chain of notices ends in two ranks that gave up on each other
        (``a < b``): neither stalled, both waited; what went between them was lost.  This rank is
        one of them only when its own deadline passed waiting on ``culprit`` (``waited``): a
        rank that stalled elsewhere sees the others' notices as soon as it waits again."""
        other = self.gave_up.get(culprit)
        if other is None or culprit in self.aborted:
            return None
        if other == self.rank:
            return tuple(sorted((self.rank, culprit))) if waited else None
        if other != culprit and self.gave_up.get(other) == culprit and other not in self.aborted:
            return tuple(sorted((culprit, other)))
        return None

    def _refused_text(self, culprit: int, op_label: str) -> str:
        """What a rank waiting in ``op_label`` is told of ``culprit``'s refusal notice."""
        seq, error = self.refused[culprit]
        if op_label.endswith(f" #{seq}"):
            what = f"to {op_label}"
        else:  # this rank is in another op: its own op #seq ended without that rank, or seqs differ
            what = f"to its op #{seq or '?'} (this rank is in {op_label})"
        return (
            f"{op_label}: rank {culprit} refused its arguments {what}: {error} (see the error on rank "
            f"{culprit}); the op cannot complete, and the SecureComm is unusable on every rank: "
            f"build a new one"
        )
