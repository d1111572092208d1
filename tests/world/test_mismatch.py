"""Ranks that disagree, one test body on every world (tests/worlds.py): in the pytest process on 2
to 5 ranks as threads, and on real ranks under mpiexec (tests/ranks/test_worlds_on_ranks.py).

The last rank builds its ``SecureComm`` with another suite, secret, frame size or node map, or
with an argument it must refuse: every rank gets a clear error at construction (the odd rank its
own ``ValueError`` for a bad argument, the others ``ConfigMismatchError``), none hangs.  Ranks
that disagree on a call's op, count or dtype never get a silent result."""

from __future__ import annotations

import numpy as np
import pytest

from seccomm import ConfigMismatchError, SecCommError, SecureComm
from worlds import PSK

#: name -> (every other rank's arguments, the last rank's, what the last rank raises); the others
#: raise ConfigMismatchError
CASES = {
    "suite": ({"suite": "aes-256-gcm"}, {"suite": "chacha20-poly1305"}, ConfigMismatchError),
    "psk": ({"psk": PSK}, {"psk": PSK[::-1]}, ConfigMismatchError),
    "chunk": ({"chunk_bytes": 4096}, {"chunk_bytes": 8192}, ConfigMismatchError),
    "bad suite": ({"suite": "aes-256-gcm"}, {"suite": "rot13"}, ValueError),
    "bad node_ids": ({}, {"node_ids": [0]}, ValueError),  # (once hung in MPI_Comm_split_type)
    "bad timeout": ({}, {"timeout": "abc"}, ValueError),  # (once raised before MPI_Comm_dup)
    "bad threads": ({}, {"crypto_threads": "x"}, ValueError),
    "node map": ("one node", "a node each", ConfigMismatchError),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_rank_that_disagrees_at_construction_is_named_on_every_rank(world, case):
    p = world.size
    if p == 1:
        pytest.skip("no other rank")
    base, odd, odd_exc = CASES[case]
    if case == "node map":
        base, odd = {"node_ids": [0] * p}, {"node_ids": list(range(p))}

    def build(comm, rank):
        kw = {"suite": "aes-256-gcm", "psk": PSK, "timeout": 10, **(odd if rank == p - 1 else base)}
        try:
            SecureComm(comm, kw.pop("suite"), **kw).close()
        except (SecCommError, ValueError) as e:
            return e

    res = world.run_ranks(build)
    for rank, got in enumerate(res):
        want = odd_exc if rank == p - 1 else ConfigMismatchError
        assert isinstance(got, want), (case, rank, got)


@pytest.mark.parametrize("odd", ["op", "count", "dtype"])
def test_ranks_that_disagree_on_a_call_get_no_silent_result(world, odd):
    """The last rank calls allreduce with another op, count or dtype: every rank raises a
    SecCommError (the argument records and the AAD bind them)."""
    p = world.size
    if p == 1:
        pytest.skip("no other rank")

    def body(sc):
        args = {"op": "sum", "n": 100, "dt": np.float32}
        if sc.rank == p - 1:
            args.update({"op": {"op": "max"}, "count": {"n": 101}, "dtype": {"dt": np.int32}}[odd])
        x = np.ones(args["n"], args["dt"])
        try:
            sc.allreduce(x, np.zeros_like(x), op=args["op"])
        except SecCommError as e:
            return e

    for rank, err in enumerate(world.run(body, timeout=3)):
        assert isinstance(err, SecCommError), (odd, rank, err)
