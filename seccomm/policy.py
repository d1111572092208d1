"""Which hops are encrypted: the ``encrypt`` policy of a :class:`~seccomm.comm.SecureComm`.

``"all"``: every frame is sealed with the communicator's suite.  ``"inter-node"``: frames between
two ranks of one node use the ``none`` suite (same framing, no cryptography); frames between
nodes, and group-key frames whenever the job spans more than one node (they are forwarded across
the whole ring or tree), use the suite.  The node map is every rank's node id (the lowest rank on
its node), from the host keys of the authenticated setup transcript (:mod:`seccomm.handshake`),
so identical on all ranks: two ranks share a node only when their hosts (and the user's
``node_ids``, if given) agree.
"""

from __future__ import annotations

ENCRYPT_POLICIES = ("all", "inter-node")


class EncryptPolicy:
    """``mode``: one of :data:`ENCRYPT_POLICIES`; ``node_ids``: node id of every rank (list of
    ints, one per rank)."""

    __slots__ = ("mode", "node_ids", "multi_node")

    def __init__(self, mode: str, node_ids: list[int]):
        self.mode, self.node_ids = mode, list(node_ids)
        self.multi_node = len(set(self.node_ids)) > 1

    def encrypts(self, a: int, b: int, group: bool) -> bool:
        """Whether a frame sealed by rank ``a`` for rank ``b`` (``group``: a group-key frame of
        origin ``a``, forwarded to every rank) is protected by the suite."""
        if self.mode == "all":
            return True
        if group:
            return self.multi_node
        return self.node_ids[a] != self.node_ids[b]
