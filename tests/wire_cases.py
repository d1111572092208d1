"""Wire checks on real ranks, run as a scenario of tests/mpi_worker.py (``wire_policy``): what
each frame on the wire must look like under every encrypt policy and node map.

The expected protection of a frame is written out here from the documented policy
(``seccomm/policy.py``'s docstring, the options in docs/usage.md), not read from
``seccomm.policy``: ``encrypt="all"`` seals every frame; ``"inter-node"`` seals a direction-key
frame when its two ranks are on different nodes and a group-key frame (allgather, bcast, the
allgather half of the ring allreduce: sealed once by its origin, forwarded unchanged) when the
job spans more than one node.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from seccomm import SecCommError, SecureComm
from seccomm.collectives import COLLECTIVES
from seccomm.compliance.evidence import WindowIndex, gradients
from seccomm.framing import block_counts, chunk_counts
from seccomm.policy import ENCRYPT_POLICIES
from seccomm.suites import SUITES
from seccomm.transports import RecordingTransport

CHUNK = 4096  #: frame payload bytes: 4099 float32 are several frames per hop, 5 are one
COUNTS = (5, 4099)  #: 5: recursive doubling's one-frame path (swap); 4099: the chunked path
#: suites checked frame by frame: those that encrypt, and ``none`` (every frame in the clear:
#: shows the classification can fail).  aes-256-gmac sends its payload in the clear by design.
CHECKED_SUITES = tuple(n for n, s in SUITES.items() if s.confidential) + ("none",)
#: how the test forces each collective's algorithm (the attributes its ``choose`` rule reads)
KNOBS = {
    "allreduce": lambda sc, alg: setattr(sc, "algorithm", alg),
    "bcast": lambda sc, alg: setattr(sc, "bcast_chain_bytes", 0 if alg == "chain" else 1 << 62),
}
GROUP_KEY_COLLECTIVES = ("allgather", "bcast")  # every frame under the group key
KEYS = {"d": "direction key", "g": "group key"}


def node_maps(p: int) -> dict[str, list[int]]:
    """Node maps of ``p`` ranks on this one host (``node_ids`` splits it): one node, the ranks
    halved over two nodes, a node per rank (duplicates dropped)."""
    maps = {
        "one node": [0] * p,
        "two nodes": [0 if r < (p + 1) // 2 else 1 for r in range(p)],
        "a node per rank": list(range(p)),
    }
    seen: set = set()
    return {k: v for k, v in maps.items() if not (tuple(v) in seen or seen.add(tuple(v)))}


def expected(policy: str, nodes: list[int], suite: str, a: int, b: int, group: bool) -> str:
    """``"sealed"`` or ``"clear"``: the payload of a frame from rank ``a`` to rank ``b``."""
    if not SUITES[suite].confidential:
        return "clear"
    if policy == "all":
        return "sealed"
    if policy != "inter-node":
        raise ValueError(f"tests/wire_cases.py has no rule for encrypt={policy!r}: add one")
    across = len(set(nodes)) > 1 if group else nodes[a] != nodes[b]
    return "sealed" if across else "clear"


def frame_kinds(coll: str, alg: str, rank: int, p: int, count: int, nframes: int) -> str:
    """The key of each frame this rank sends in one op, in sending order: ``d`` direction key,
    ``g`` group key.  The ring allreduce is a reduce-scatter (direction: every block but this
    rank's, chunk by chunk) then an allgather (group)."""
    if coll in GROUP_KEY_COLLECTIVES:
        return "g" * nframes
    if (coll, alg) == ("allreduce", "ring"):
        ce = CHUNK // 4
        rs = sum(len(chunk_counts(c, ce)) for b, c in enumerate(block_counts(count, p)) if b != rank)
        return "d" * rs + "g" * (nframes - rs)
    return "d" * nframes


def force(sc, coll, alg: str, count: int) -> bool:
    """Make ``sc`` run ``coll`` by ``alg``; whether the collective's rule now picks it."""
    KNOBS.get(coll.name, lambda *a: None)(sc, alg)
    return coll.pick(sc, 4 * count, count, sc.size) == alg


def run_op(sc, coll, count: int, data: str, salt: int):
    """One op on float32 ``data`` (``zeros``: every partial result is zero too, so a payload in
    the clear is all zero; ``random``: gradients); (every rank's inputs and this rank's result,
    the frames this rank sent as ``(peer, uint8)``)."""
    p, r = sc.size, sc.rank
    n = [coll.counts(count, p, q) for q in range(p)]
    make = (lambda q: np.zeros(n[q].send, np.float32)) if data == "zeros" else None
    inputs = [make(q) if make else gradients(q, n[q].send, salt) for q in range(p)]
    out = np.empty(n[r].recv, np.float32)
    coll.reset(inputs[r], out, r, 0)
    start = len(sc.transport.frames)
    coll.secure(sc, inputs[r], out, "sum", 0)
    return inputs + [out], [(peer, f) for kind, peer, f in sc.transport.frames[start:] if kind == "frame"]


class Combo:
    """One SecureComm under test: encrypt ``policy``, node map ``nodes`` (named ``mapname``),
    ``suite``; counts of clear frames and the plaintext windows found in them (the search can
    fail)."""

    def __init__(self, comm, rec, policy, mapname, nodes, suite):
        self.comm, self.rec, self.policy, self.nodes, self.suite = comm, rec, policy, nodes, suite
        self.name = f"wire_policy encrypt={policy} nodes={mapname} {nodes} {suite}"
        self.frames = self.clear_frames = self.clear_hits = 0
        self.keystreams: list = []

    def want(self, a, b, kind):
        return expected(self.policy, self.nodes, self.suite, a, b, kind == "g")

    def check_zeros(self, label, frames, kinds):
        """Every frame's payload is all zero exactly when the policy leaves that hop clear."""
        bad = []
        for i, ((peer, f), k) in enumerate(zip(frames, kinds)):
            got = "clear" if not f[:-16].any() else "sealed"
            want = self.want(self.comm.rank, peer, k)
            if got != want:
                bad.append(f"frame {i} to rank {peer} ({KEYS[k]}): {got}, the policy says {want}")
        if len(frames) != len(kinds):
            bad.append(f"{len(frames)} frames sent, {len(kinds)} expected")
        self.frames += len(frames)
        self.rec(label, not bad, "; ".join(bad[:4]))

    def check_random(self, label, frames, kinds, plaintexts):
        """No frame the policy seals carries a 16-byte window of any rank's input or this
        rank's result; windows found in clear frames are counted."""
        index, bad = WindowIndex(plaintexts), []
        for i, ((peer, f), k) in enumerate(zip(frames, kinds)):
            hits = index.matches(f)[0].size
            if self.want(self.comm.rank, peer, k) == "clear":
                self.clear_frames, self.clear_hits = self.clear_frames + 1, self.clear_hits + hits
            elif hits:
                bad.append(f"frame {i} to rank {peer} ({KEYS[k]}) carries {hits} plaintext windows")
        self.rec(label, not bad, "; ".join(bad[:4]))

    def keep_keystream(self, label, frames, kinds, own):
        """allgather: this rank's first frame is its own block's first chunk (origin = this rank,
        group key, chunk 0; within one op the nonces of two origins differ only in the sender
        field).  Kept for :meth:`finish`: its first 16 bytes, the plaintext's, the policy's word."""
        want = self.want(self.comm.rank, frames[0][0], kinds[0])
        self.keystreams.append((label, frames[0][1][:16].copy(), own.view(np.uint8)[:16].copy(), want))

    def finish(self):
        """Across ranks (one collective each, whatever failed before): frames were classified;
        frames in the clear carried plaintext windows (when any were sent); and no two origins'
        sealed allgather frames share a keystream, ct_a ^ ct_b != pt_a ^ pt_b, while in the clear
        they do (the check can fail)."""
        tot = np.array([self.frames, self.clear_frames, self.clear_hits], np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, tot)
        every = self.comm.gather(self.keystreams, root=0)
        if self.comm.rank:
            return
        self.rec(f"{self.name}: {tot[0]} frames of zeros classified", tot[0] > 0)
        if tot[1]:
            self.rec(f"{self.name}: {tot[1]} clear frames hold {tot[2]} plaintext windows", tot[2] > 0)
        for i, (label, *_) in enumerate(every[0]):
            rows = [part[i][1:] for part in every if len(part) > i]
            for a in range(len(rows)):
                for b in range(a + 1, len(rows)):
                    same = np.array_equal(rows[a][0] ^ rows[b][0], rows[a][1] ^ rows[b][1])
                    reuse = rows[a][2] == rows[b][2] == "clear"
                    self.rec(f"{label} keystream of origins {a} and {b}: reused={same}", same == reuse)


def run_combo(combo: Combo, sc, salt: int) -> None:
    """Every registered collective by every algorithm, on zeros then on gradients."""
    comm, p = combo.comm, sc.size
    for coll in COLLECTIVES.values():
        for alg in coll.algorithms:
            for count in COUNTS:
                label = f"{combo.name} {coll.name}/{alg} n={count}"
                if not force(sc, coll, alg, count):
                    combo.rec(f"{label}: cannot force the algorithm", False)
                    continue
                for data in ("zeros", "random"):
                    salt += 1
                    combo.rec.start(f"{label} {data}")
                    plain, frames = run_op(sc, coll, count, data, salt)
                    kinds = frame_kinds(coll.name, alg, comm.rank, p, count, len(frames))
                    if data == "zeros":
                        combo.check_zeros(f"{label} zeros", frames, kinds)
                        continue
                    combo.check_random(f"{label} random", frames, kinds, plain)
                    if coll.name == "allgather" and count == COUNTS[-1]:
                        combo.keep_keystream(f"{label} random", frames, kinds, plain[comm.rank])


def wire_policy(comm, rec, psk: bytes) -> None:
    """Every encrypt policy x node map x suite that encrypts (and ``none``) x collective x
    algorithm on real ranks: each frame recorded on the wire is sealed exactly where the policy
    says (zeros), no sealed frame carries plaintext (gradients), and no two origins' group
    frames share a keystream (a nonce without its sender field would make them)."""
    if comm.size < 2:
        return
    for policy in ENCRYPT_POLICIES:
        for mapname, nodes in node_maps(comm.size).items():
            for suite in CHECKED_SUITES:
                combo = Combo(comm, rec, policy, mapname, nodes, suite)
                sc = SecureComm(
                    comm,
                    suite,
                    psk=psk,
                    encrypt=policy,
                    node_ids=nodes,
                    chunk_bytes=CHUNK,
                    timeout=10,
                    wrap_transport=RecordingTransport,
                )
                same = [[a == b for b in sc.node_ids] for a in sc.node_ids]
                rec(f"{combo.name}: node map {sc.node_ids}", same == [[a == b for b in nodes] for a in nodes])
                try:
                    run_combo(combo, sc, salt=0)
                except SecCommError as e:
                    rec(f"{combo.name}: {type(e).__name__}: {e}", False)
                sc.close()
                combo.finish()
                comm.Barrier()
