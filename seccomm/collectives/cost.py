"""Cost steps of the algorithms, read by the cost model (:mod:`seccomm.costmodel`; formulas and
sources in docs/model.md).

Each record's ``cost`` maps a model algorithm name to a :class:`Cost`: the algorithm as a list of
:class:`Step` for S = ``n`` bytes, and the bytes an origin seals once for encrypt-once
forwarding.  The builders below are shared by several records; a record may build its own list.
``topo`` is anything with ``p``, ``nodes``, ``ranks_per_node`` and ``leaf_nodes``
(:class:`seccomm.costmodel.Topology`): ranks placed in blocks of ``ranks_per_node`` per node.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable


@dataclass(frozen=True)
class Step:
    nbytes: float  # bytes each sending rank moves in this step
    inter: bool  # crosses nodes
    flows: int = 1  # ranks of one node sending inter-node at once (share the NIC)
    spine: bool = False  # crosses leaf switches (oversubscription applies)
    reduce: bool = False
    seal: bool = True  # sender seals (False: forwards already-sealed frames)
    open: bool = True  # receiver opens
    count: int = 1  # identical steps in a row
    uplink_nodes: int = 0  # nodes of one leaf whose flows cross its uplink at once (0: all of them)


def _nothing(n: float, p: int) -> float:
    return 0.0


@dataclass(frozen=True)
class Cost:
    """``steps(n, topo)``: the steps of one operation of S = n bytes; ``sealed_once(n, p)``:
    bytes each origin seals once before its frames are forwarded unchanged (encrypt-once),
    paid as seal time on top of the steps."""

    steps: Callable
    sealed_once: Callable[[float, int], float] = _nothing


def log2(p: int) -> int:
    """Steps of a doubling algorithm on p ranks: ceil(lg p)."""
    return max(0, (p - 1).bit_length())


def ring_steps(n: float, topo, reduce_scatter: bool, allgather: bool) -> list[Step]:
    """Ring over all ranks in block placement: a step lasts as long as its slowest hop, the one
    crossing a node boundary (one flow per NIC) when there are several nodes; across leaf
    switches only the leaf's last node sends over its uplink (``uplink_nodes`` 1).
    Reduce-scatter hops open, reduce and re-seal; allgather hops forward frames sealed once by
    their origin."""
    p = topo.p
    if p == 1:
        return []
    inter = topo.nodes > 1
    spine = inter and topo.nodes > topo.leaf_nodes
    steps = []
    if reduce_scatter:
        steps.append(Step(n / p, inter, 1, spine, True, True, True, p - 1, 1))
    if allgather:
        steps.append(Step(n / p, inter, 1, spine, False, False, True, p - 1, 1))
    return steps


def rd_steps(n: float, topo, halving: bool) -> list[Step]:
    """Recursive doubling (full vector each step) or halving/doubling (Rabenseifner)."""
    p, rpn = topo.p, topo.ranks_per_node
    steps = []
    for i in range(log2(p)):
        dist = 1 << i
        inter = dist >= rpn
        spine = inter and dist >= rpn * topo.leaf_nodes
        nb = n / (2 << i) if halving else n
        steps.append(Step(nb, inter, rpn if inter else 1, spine, True))
    if halving:  # allgather by recursive doubling mirrors the reduce-scatter sizes
        steps += [replace(s, reduce=False) for s in reversed(steps)]
    return steps


def hier_steps(n: float, topo) -> list[Step]:
    """Intra-node ring reduce-scatter, inter-node ring allreduce of each rank's shard (all ranks
    of a node at once share the NIC; one node per leaf crosses its uplink), intra-node ring
    allgather."""
    rpn, nodes = topo.ranks_per_node, topo.nodes
    steps = []
    if rpn > 1:
        steps.append(Step(n / rpn, False, 1, False, True, True, True, rpn - 1))
    if nodes > 1:
        shard = n / rpn
        spine = nodes > topo.leaf_nodes
        steps.append(Step(shard / nodes, True, rpn, spine, True, True, True, nodes - 1, 1))
        steps.append(Step(shard / nodes, True, rpn, spine, False, False, True, nodes - 1, 1))
    if rpn > 1:
        steps.append(Step(n / rpn, False, 1, False, False, False, True, rpn - 1))
    return steps


def per_rank(n: float, p: int) -> float:
    """S/p: the block an origin seals once in ring allgather phases."""
    return n / p


def whole(n: float, p: int) -> float:
    """S: what a broadcast root seals once."""
    return n
