"""Wire checks on real ranks, run as scenarios of tests/mpi_worker.py (``wire_policy``,
``op_replay``): what each frame on the wire must look like under every encrypt policy and node
map, and a frame of one operation replayed into the next.

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

from seccomm import AuthenticationError, PeerAbortError, SecCommError, SecureComm
from seccomm.collectives import COLLECTIVES
from seccomm.compliance.evidence import WindowIndex, gradients
from seccomm.framing import block_counts, chunk_counts
from seccomm.policy import ENCRYPT_POLICIES
from seccomm.suites import SUITES
from seccomm.transports import RecordingTransport, TransportWrapper, host_bytes

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


class ReplayOpK(TransportWrapper):
    """On the attacking rank: in ``record`` mode keeps every frame it sends, per peer in order;
    in ``replay`` mode the ``target = (peer, i)``-th frame to that peer is replaced by the one
    recorded at the same place: the same hop, step, chunk, size and key, the operation sequence
    number (AAD) and op index (nonce) of the earlier op."""

    def __init__(self, inner):
        super().__init__(inner)
        self.mode, self.kept, self.sent, self.target, self.replaced = "pass", {}, {}, None, []

    def begin(self, mode: str, target=None) -> None:
        self.mode, self.target, self.sent = mode, target, {}

    def isend(self, buf, peer):
        frame, i = host_bytes(buf), self.sent.get(peer, 0)
        self.sent[peer] = i + 1
        if self.mode == "record":
            self.kept.setdefault(peer, []).append(frame.copy())
        elif self.mode == "replay" and (peer, i) == self.target:
            old = self.kept[peer][i]
            self.replaced.append(old.size == frame.size and not np.array_equal(old, frame))
            return self.send_own(old.copy(), peer)
        return self.inner.isend(buf, peer)


BIG = 1.0e6  #: op k's inputs are near this; op k+1's are in [-1, 1]: op k's data is recognisable


def replay_case(comm, rec, psk, suite, alg, count):
    """Rank 0 replays its first frame to rank 1 of op k into op k+1 (same allreduce, same sizes,
    same hop).  Rank 1 raises AuthenticationError naming rank 0 and op k+1, every other rank
    PeerAbortError blaming rank 0 (or, needing nothing more from rank 1, finishes with the
    verified result: rank 0 of a 2-rank recursive doubling); no rank's recvbuf ever holds op k's
    data, and rank 1's holds exactly what it held before its first receive.  ``none``: the replay
    goes through."""
    r, label = comm.rank, f"op_replay {suite} {alg} n={count}"
    sc = SecureComm(
        comm,
        suite,
        psk=psk,
        algorithm=alg,
        chunk_bytes=1024,
        crypto_threads=1,
        timeout=10,
        wrap_transport=ReplayOpK if r == 0 else None,
    )
    rng = np.random.default_rng(r)
    old = (BIG + rng.uniform(0, 1000, count)).astype(np.float32)
    x, y = rng.uniform(-1, 1, count).astype(np.float32), np.full(count, np.nan, np.float32)
    before = y.copy()  # every algorithm leaves recvbuf alone until its first verified chunk
    if r == 0:
        sc.transport.begin("record")
    sc.allreduce(old, np.empty_like(old))
    if r == 0:
        sc.transport.begin("replay", (1, 0))
    rec.start(label)
    seq, epoch, err = sc.sequence.seq + 1, sc.epoch, None
    try:
        sc.allreduce(x, y)
    except SecCommError as e:
        err = e
    ref = np.empty_like(x)
    comm.Allreduce(x, ref)
    check_replay(comm, rec, label, sc, err, (seq, epoch), y, before, ref)
    sc.close()
    comm.Barrier()


def check_replay(comm, rec, label, sc, err, where, y, before, ref):
    r, (seq, epoch) = comm.rank, where
    leaked = bool((np.abs(y[~np.isnan(y)]) > BIG / 2).any())
    if r == 0:
        rec(f"{label}: rank 0 replayed one frame of op k", sc.transport.replaced == [True])
    if sc.suite.name == "none":
        errs = comm.allgather(err is not None)
        through = not any(errs) and (r != 1 or leaked)
        rec(f"{label}: the replay goes unnoticed without authentication", through)
        return
    rec(f"{label}: rank {r}'s recvbuf holds no data of op k", not leaked)
    if r == 1:
        named = (0, "allreduce", seq, epoch)
        ok = isinstance(err, AuthenticationError) and (err.peer, err.op, err.seq, err.epoch) == named
        rec(f"{label}: rank 1 refuses the replayed frame: {type(err).__name__}: {err}", ok)
        same = np.array_equal(y.view(np.uint32), before.view(np.uint32))
        rec(f"{label}: rank 1's recvbuf holds what it held before its first receive", same)
    else:  # a rank that needs nothing more from rank 1 may finish, with the verified result
        done = err is None and np.allclose(y, ref, rtol=1e-5, atol=1e-6)
        ok = done or isinstance(err, PeerAbortError) and err.blamed == 0
        rec(f"{label}: rank {r} stops at once blaming rank 0, or finished: {type(err).__name__}: {err}", ok)


def op_replay(comm, rec, psk: bytes) -> None:
    """A frame of op k replayed into op k+1 (only the op sequence fields differ), ring and
    recursive doubling, one-frame and chunked hops, every suite."""
    if comm.size < 2:
        return
    for alg in ("ring", "recursive_doubling"):
        for count in (5, 3001):
            for suite in SUITES:
                replay_case(comm, rec, psk, suite, alg, count)
