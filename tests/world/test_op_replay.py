"""A frame of one operation replayed into the next, one test body on every world
(tests/worlds.py): in the pytest process on 2 to 5 ranks as threads, and on real ranks under
mpiexec (tests/ranks/test_worlds_on_ranks.py).

Rank 0 records every frame it sends in op k, then in op k+1 (the same allreduce, the same sizes)
sends its first frame to rank 1 as it was in op k: the same hop, step, chunk, size and key; only
the operation's sequence number (in the AAD) and index (in the nonce) differ.  Every
authenticating suite refuses it on rank 1, naming rank 0 and op k+1, before any of it reaches
rank 1's buffer; ``none`` has no tag, and the replay goes through (the test shows it can fail)."""

from __future__ import annotations

import numpy as np
import pytest

from seccomm import AuthenticationError, PeerAbortError, SecCommError
from seccomm.transports import TransportWrapper, host_bytes
from worlds import ok

BIG = 1.0e6  #: op k's inputs are near this; op k+1's are in [-1, 1]: op k's data is recognisable


class ReplayOpK(TransportWrapper):
    """On the attacking rank: in ``record`` mode keeps every frame it sends, per peer in order;
    in ``replay`` mode the ``target = (peer, i)``-th frame to that peer is replaced by the one
    recorded at the same place."""

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


def _inputs(rank: int, count: int):
    """Rank ``rank``'s op k input (near :data:`BIG`) and op k+1 input (in [-1, 1])."""
    rng = np.random.default_rng(rank)
    old = (BIG + rng.uniform(0, 1000, count)).astype(np.float32)
    return old, rng.uniform(-1, 1, count).astype(np.float32)


class BaseOpReplay:
    """The bodies; a subclass names the suite (``SUITE``)."""

    SUITE = "aes-256-gcm"

    @pytest.mark.parametrize("count", [5, 3001])  # one frame (recursive doubling's swap); chunked
    @pytest.mark.parametrize("alg", ["ring", "recursive_doubling"])
    def test_a_frame_of_the_last_op_is_refused_naming_its_sender(self, world, alg, count):
        """Rank 1 raises AuthenticationError naming rank 0, the allreduce, op k+1's sequence
        number and epoch, its buffer as it was before its first receive; every other rank stops
        blaming rank 0, or (needing nothing more from rank 1) finishes with the verified result;
        no rank's buffer ever holds op k's data."""
        if world.size == 1:
            pytest.skip("no peer to replay to")

        def body(sc):
            old, x = _inputs(sc.rank, count)
            y = np.full(count, np.nan, np.float32)
            before = y.copy()  # every algorithm leaves recvbuf alone until its first verified chunk
            t = sc.transport
            if sc.rank == 0:
                t.begin("record")
            sc.allreduce(old, np.empty_like(old))
            if sc.rank == 0:
                t.begin("replay", (1, 0))
            where, err = (sc.sequence.seq + 1, sc.epoch), None
            try:
                sc.allreduce(x, y)
            except SecCommError as e:
                err = e
            return err, y, before, where, t.replaced if sc.rank == 0 else None

        wrap = lambda t: ReplayOpK(t) if t.rank == 0 else t  # noqa: E731
        kw = {
            "algorithm": alg,
            "chunk_bytes": 1024,
            "crypto_threads": 1,
            "timeout": 10,
            "wrap_transport": wrap,
        }
        res = ok(world.run(body, self.SUITE, **kw))
        ref = np.sum([_inputs(r, count)[1] for r in range(world.size)], axis=0, dtype=np.float32)
        assert res[0][4] == [True], "rank 0 replayed one frame of op k"
        if self.SUITE == "none":  # no tag: the replay goes through, and rank 1 holds op k's data
            assert all(err is None for err, *_ in res), res
            assert (np.abs(res[1][1]) > BIG / 2).any()
            return
        for rank, (err, y, before, (seq, epoch), _) in enumerate(res):
            assert not (np.abs(y[~np.isnan(y)]) > BIG / 2).any(), f"rank {rank}'s buffer holds op k's data"
            if rank == 1:
                assert isinstance(err, AuthenticationError), err
                assert (err.peer, err.op, err.seq, err.epoch) == (0, "allreduce", seq, epoch), err
                assert np.array_equal(y.view(np.uint32), before.view(np.uint32))
            elif err is None:  # finished: with the verified result
                np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
            else:
                assert isinstance(err, PeerAbortError) and err.blamed == 0, err


class TestNone(BaseOpReplay):
    SUITE = "none"


class TestAESGCM(BaseOpReplay):
    SUITE = "aes-256-gcm"


class TestChaCha20Poly1305(BaseOpReplay):
    SUITE = "chacha20-poly1305"


class TestAESGMAC(BaseOpReplay):
    SUITE = "aes-256-gmac"
