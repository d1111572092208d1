"""Clear frames, one test body on every world (tests/worlds.py): in the pytest process on 1 to 5
ranks as threads, and on real ranks under mpiexec (tests/ranks/test_worlds_on_ranks.py).

Under the ``none`` suite a frame is the payload alone, no tag.  It is sent straight from the
caller's arrays where nothing the op writes overlaps them and a later step of the op waits for
it (the op's last sends only where their hop is acknowledged: more than 8 frames, or 1 MiB), and
received straight into them where it is not forwarded or reduced.  Under
``encrypt="inter-node"`` a hop between ranks of one node is clear and a hop between nodes is
sealed.  Every result is checked bit for bit against the reference (exact small integers:
:func:`test_results.inputs`); the frames each rank sends and posts are watched."""

from __future__ import annotations

import numpy as np
import pytest

from seccomm import AuthenticationError, SecCommError
from seccomm.framing import block_counts
from seccomm.transports import TransportWrapper
from test_results import inputs, reference
from worlds import ok

CHUNK = 4096
TAG = 16  # bytes of a sealed frame's tag


class Watch(TransportWrapper):
    """Records every frame sent and every receive posted: (bytes, whether the buffer lies inside
    one of ``arrays``: the caller's)."""

    def __init__(self, inner):
        super().__init__(inner)
        self.arrays, self.sent, self.recvd = [], [], []

    def _seen(self, buf) -> tuple:
        a = np.frombuffer(buf, np.uint8)
        lo, hi = a.ctypes.data, a.ctypes.data + a.nbytes
        return a.nbytes, any(x.ctypes.data <= lo and hi <= x.ctypes.data + x.nbytes for x in self.arrays)

    def isend(self, buf, peer):
        self.sent.append(self._seen(buf))
        return self.inner.isend(buf, peer)

    def irecv(self, buf, peer):
        self.recvd.append(self._seen(buf))
        return self.inner.irecv(buf, peer)


class Truncate(TransportWrapper):
    """Sends its ``which``-th frame one byte short."""

    def __init__(self, inner, which):
        super().__init__(inner)
        self.which, self.sent = which, 0

    def isend(self, buf, peer):
        i, self.sent = self.sent, self.sent + 1
        return self.inner.isend(buf[:-1] if i == self.which else buf, peer)


def _lending_ok(p, rank, alg, clear, n, itemsize, op, sent, recvd, whole) -> bool:
    """Whether the frames one allreduce sent (``sent``) and posted (``recvd``) lent and landed in
    the caller's arrays as the engine's rules say (exactly on two and three ranks)."""
    lent = sum(inside for _, inside in sent)
    landed = sum(inside for _, inside in recvd)
    big = max(b for b, _ in sent)  # (a chunk's payload, or it and a tag)
    most = min(whole * itemsize, CHUNK)  # (a frame's payload, at most)
    if not clear:
        return lent == landed == 0 and big == most + TAG
    if p == 2 and alg == "ring":  # the reduce-scatter's sends lent (the allgather's, the op's
        # last, are not); the allgather's land
        ag = -(-block_counts(n, p)[1 - rank] // (CHUNK // itemsize))
        return lent == len(sent) - ag and landed == ag and big == most
    if p == 2:  # one swap, the op's last: nothing lent; reduced from slots
        return lent == landed == 0 and big == most
    if p == 3:  # (recursive doubling: rank 0 sends from the input before a later step: it gives
        # it to rank 1, then gets the result; ranks 1 and 2 send their last from the caller's
        # arrays where the hop is acknowledged: more than 8 frames; rank 1 returns the result,
        # which avg divides after: not lent then)
        acked = -(-n * itemsize // CHUNK) > 8 and not (rank == 1 and op == "avg")
        return (lent > 0) == (alg == "ring" or rank == 0 or acked) and big == most
    return big == most  # (4 and 5 ranks: the results only, and the frames' size)


class BaseClearFrames:
    """The bodies; a subclass names the suite (``SUITE``: clear or sealed, for comparison)."""

    SUITE = "none"

    @pytest.mark.parametrize("alg", ["ring", "recursive_doubling"])
    def test_allreduce_lends_and_lands_where_it_may(self, world, alg):
        """Allreduce of float32 and float64, three sizes (many chunks a rank, one short of a
        chunk a rank, 101 elements), sum and avg, out of place (watched) and in place: exact on
        every rank, and the frames lent from and landed in the caller's arrays as the rules say."""
        p, clear = world.size, self.SUITE == "none"

        def body(sc):
            w, bad, checked = sc.transport, [], []
            for dname in ("float32", "float64"):
                per = CHUNK // np.dtype(dname).itemsize
                for n in (3 * per * p + 5, per * p - 1, 101):
                    for op in ("sum", "avg"):
                        x = inputs(dname, n, sc.rank, op)
                        y = np.zeros_like(x)
                        w.arrays, w.sent, w.recvd = [x, y], [], []
                        sc.allreduce(x, y, op=op)
                        ref = reference(dname, n, p, op)
                        label = (dname, n, op)
                        if not np.array_equal(y, ref):
                            bad.append((*label, "result"))
                        whole = max(block_counts(n, p)) if alg == "ring" else n
                        checked.append(len(w.sent))
                        if w.sent and not _lending_ok(
                            p, sc.rank, alg, clear, n, x.itemsize, op, w.sent, w.recvd, whole
                        ):
                            bad.append((*label, "frames", w.sent, w.recvd))
                        w.arrays = []
                        x2 = x.copy()
                        sc.allreduce(x2, x2, op=op)
                        if not np.array_equal(x2, ref):
                            bad.append((*label, "in place"))
            return bad, checked

        res = ok(world.run(body, self.SUITE, algorithm=alg, chunk_bytes=CHUNK, wrap_transport=Watch))
        for rank, (bad, checked) in enumerate(res):
            assert bad == [], (self.SUITE, alg, rank, bad[:3])
            assert len(checked) == 12 and (p == 1 or all(checked)), (rank, checked)  # (frames seen)

    def test_the_other_collectives_in_many_chunks(self, world):
        """allgather, reduce_scatter, alltoall and bcast from every root, float32 and uint8, three
        chunks a rank and a partial one: exact on every rank."""
        p = world.size

        def body(sc):
            out = []
            for dname in ("float32", "uint8"):
                n = 3 * (CHUNK // np.dtype(dname).itemsize) * p + 7
                counts = block_counts(n, p)
                off = sum(counts[: sc.rank])
                x = inputs(dname, n, sc.rank)
                y = np.empty(counts[sc.rank], x.dtype)
                sc.reduce_scatter(x, y)
                out.append(y.copy())
                z = np.empty(n, x.dtype)
                sc.allgather(x[off : off + counts[sc.rank]], z)
                out.append(z)
                m = n // p
                a = np.empty(m * p, x.dtype)
                sc.alltoall(x[: m * p], a)
                out.append(a)
                for root in range(p):
                    b = x.copy()
                    sc.bcast(b, root=root)
                    out.append(b)
            return out

        for rank, got in enumerate(ok(world.run(body, self.SUITE, chunk_bytes=CHUNK))):
            want = []
            for dname in ("float32", "uint8"):
                n = 3 * (CHUNK // np.dtype(dname).itemsize) * p + 7
                counts = block_counts(n, p)
                offs = [sum(counts[:r]) for r in range(p)]
                xs = [inputs(dname, n, r) for r in range(p)]
                m = n // p
                want.append(reference(dname, n, p, "sum")[offs[rank] : offs[rank] + counts[rank]])
                want.append(np.concatenate([xs[r][offs[r] : offs[r] + counts[r]] for r in range(p)]))
                want.append(np.concatenate([xs[r][rank * m : (rank + 1) * m] for r in range(p)]))
                want += [xs[root] for root in range(p)]
            assert len(got) == len(want) and all(np.array_equal(g, w) for g, w in zip(got, want)), (
                self.SUITE,
                rank,
            )

    def test_a_frame_one_byte_short_names_its_sender(self, world):
        """Two ranks, ring: rank 1 sends 4 frames (blocks of 2 chunks: reduce-scatter 0 and 1,
        allgather 2 and 3); its last, one byte short, lands in place on rank 0 (clear), or in a
        slot (sealed): rank 0 raises AuthenticationError naming rank 1, "truncated or padded"."""
        if world.size != 2:
            pytest.skip("the frame count is that of two ranks")
        n = 4 * (CHUNK // 4)

        def body(sc):
            x, y = inputs("float32", n, sc.rank), np.zeros(n, np.float32)
            try:
                sc.allreduce(x, y)
            except SecCommError as e:
                return e

        wrap = lambda t: Truncate(t, 3) if t.rank == 1 else t  # noqa: E731
        res = world.run(
            body, self.SUITE, algorithm="ring", chunk_bytes=CHUNK, timeout=10, wrap_transport=wrap
        )
        err = res[0]
        assert isinstance(err, AuthenticationError) and err.peer == 1, res
        assert "truncated or padded" in str(err), err


class TestNone(BaseClearFrames):
    SUITE = "none"


class TestAESGCM(BaseClearFrames):
    SUITE = "aes-256-gcm"


class BasePolicy:
    """``encrypt="inter-node"``: the first half of the ranks on one node, the rest on another."""

    SUITE = "aes-256-gcm"

    def test_hops_within_a_node_are_clear_and_across_nodes_sealed(self, world):
        """A ring reduce-scatter of zeros (every partial sum is zero, so a clear frame is all
        zero and a sealed one is not): each frame clear exactly when its receiver is on the
        sender's node; then an allreduce, exact on every rank."""
        p = world.size
        if p == 1:
            pytest.skip("no hops")
        nodes = [0 if r < p // 2 else 1 for r in range(p)]

        class Record(TransportWrapper):
            def __init__(self, inner):
                super().__init__(inner)
                self.frames = []

            def isend(self, buf, peer):
                self.frames.append((peer, np.frombuffer(buf, np.uint8).copy()))
                return self.inner.isend(buf, peer)

        def body(sc):
            zeros = np.zeros(4096, np.float32)
            sc.reduce_scatter(zeros, np.empty(sc.block_counts(zeros.size)[sc.rank], np.float32))
            seen = [(peer, not frame[:-TAG].any()) for peer, frame in sc.transport.frames]
            x = inputs("float32", 4096, sc.rank)
            y = np.empty_like(x)
            sc.allreduce(x, y)
            return seen, y

        kw = {"encrypt": "inter-node", "node_ids": nodes, "algorithm": "ring", "wrap_transport": Record}
        ref = reference("float32", 4096, p, "sum")
        for rank, (seen, y) in enumerate(ok(world.run(body, self.SUITE, **kw))):
            assert seen and all(clear == (nodes[peer] == nodes[rank]) for peer, clear in seen), (rank, seen)
            np.testing.assert_array_equal(y, ref)


class TestPolicyAESGCM(BasePolicy):
    SUITE = "aes-256-gcm"


class TestPolicyChaCha20Poly1305(BasePolicy):
    SUITE = "chacha20-poly1305"
