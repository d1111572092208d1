"""The rotation check of the compliance report: key rotation run on real ranks, checked against
the schedule, and able to fail.

``SecureComm`` moves every rank to the next epoch key before an operation whose upper bound of
frames sealed under one key (its collective record's ``frame_bound``) would take the current
key past the rotation point (``rotate_after_frames``, by default the suite's usage limit at the
chunk size).  :func:`rotation_check` (collective):

1. refuses, without constructing anything, a configured rotation point above the suite's usage
   limit (``SecureComm`` itself refuses such a value): the check FAILs;
2. runs allreduces under the configured settings at the configured rotation point, or, when that
   point cannot be reached in a report run (more than :data:`MAX_CHECK_OPS` operations), at a
   test-sized point of :data:`TEST_OPS_PER_EPOCH` operations per key, and says so;
3. checks on every rank that the epoch of each operation is the one the schedule predicts
   (:func:`predicted_epochs`), that results are right, that the first frame of an epoch's first
   operation and of the next epoch's differ (same nonce, same plaintext: equal ciphertexts would
   mean the same key; encrypting suites only), and that the previous epochs' first frame,
   replayed by rank 0 in place of its first frame of a later epoch, is refused by its receiver
   (``AuthenticationError`` naming rank 0).
"""

from __future__ import annotations

import math

import numpy as np

from ..collectives import get_collective
from ..errors import AuthenticationError, SecCommError
from ..framing import chunk_elems
from ..suites import get_suite
from .config import ReviewConfig

#: most operations a rotation check runs (two epochs and one operation)
MAX_CHECK_OPS = 4097
#: operations per key when the configured rotation point is out of reach
TEST_OPS_PER_EPOCH = 8
#: float32 elements per rank and operation (frames of 64 bytes: equal ciphertexts by chance 2^-512)
COUNT = 16


def predicted_epochs(point: int, bound: int, ops: int) -> list[int]:
    """The epoch of each of ``ops`` operations that may each seal ``bound`` frames under one key,
    at rotation point ``point`` [frames per key]: a new epoch before an operation that would take
    the current key past ``point``."""
    epochs, frames, epoch = [], 0, 0
    for _ in range(ops):
        if frames + bound > point:
            epoch, frames = epoch + 1, 0
        frames += bound
        epochs.append(epoch)
    return epochs


def plan(config: ReviewConfig, size: int) -> dict:
    """What the check runs on ``size`` ranks: ``configured`` and ``limit`` [frames per key],
    ``bound`` (frames one operation may seal under one key), ``run_point``, ``scaled`` (True when
    ``run_point`` is a test-sized point), ``ops``, and ``refusal`` (why nothing can run, or None)."""
    suite = get_suite(config.suite)
    limit, configured = config.limit(), config.rotation_point()
    chunk = chunk_elems(config.chunk_bytes, 4) * 4  # float32, as OpSequence.bound counts them
    chunks = math.ceil(COUNT * 4 / chunk) + 1
    bound = get_collective("allreduce").frame_bound(size, chunks)
    out = {"configured": configured, "limit": limit, "bound": bound, "refusal": None}
    if configured > limit:
        out["refusal"] = (
            f"the configured rotation point, {configured:,} frames per key, is above {suite.name}'s "
            f"usage limit of {limit:,} frames per key at chunk_bytes {config.chunk_bytes:,} "
            f"({suite.limit_source}); SecureComm refuses it"
        )
    elif configured < bound:
        out["refusal"] = (
            f"the configured rotation point, {configured:,} frames per key, is below the {bound} "
            f"frames one allreduce on {size} ranks may seal under one key: SecureComm refuses "
            "every operation"
        )
    per_epoch = configured // bound
    scaled = 2 * per_epoch + 1 > MAX_CHECK_OPS
    run_point = TEST_OPS_PER_EPOCH * bound if scaled else configured
    ops = 2 * (run_point // bound) + 1
    return {**out, "run_point": run_point, "scaled": scaled, "ops": ops}


def rotation_check(comm, config: ReviewConfig, psk: bytes | None = None, timeout: float = 10.0) -> dict:
    """Run the rotation check (module docstring) on the ``mpi4py`` communicator ``comm`` (>= 2
    ranks) under ``config`` with the job secret (or ``psk``).  Returns, identical on every rank,
    :func:`plan`'s fields plus ``ran``, ``epochs_ok``, ``results_ok``, ``keys_differ`` (None for
    a suite that does not encrypt), ``replay_refused`` (None for a suite without integrity),
    ``ok``, ``detail`` (one line) and ``config`` (what it ran with)."""
    p = plan(config, comm.Get_size())
    row = {**p, "config": config.record(rotate_after_frames=p["run_point"])}
    if p["refusal"]:
        return {**row, "ran": False, "ok": False, "detail": p["refusal"]}
    got = _run(comm, config, p, psk, timeout)
    return {**row, **got, "detail": _detail(p, got)}


def _run(comm, config: ReviewConfig, p: dict, psk, timeout: float) -> dict:
    """The allreduces of the check and the verdicts, agreed over ``comm``."""
    from mpi4py import MPI

    from ..comm import SecureComm
    from .attack import AttackTransport

    rank, size = comm.Get_rank(), comm.Get_size()
    settings = {**config.settings(), "rotate_after_frames": p["run_point"]}
    wrap = lambda t: AttackTransport(t, "replay", 0, np.random.default_rng(0))  # noqa: E731
    sc = SecureComm(comm, config.suite, psk=psk, timeout=timeout, wrap_transport=wrap, **settings)
    x = np.arange(COUNT, dtype=np.float32) + COUNT * rank
    ref = sum(np.arange(COUNT, dtype=np.float32) + COUNT * r for r in range(size))
    epochs, wrong, y = [], 0, np.empty_like(x)
    for _ in range(p["ops"] - 1):
        sc.allreduce(x, y)
        epochs.append(sc.epoch)
        wrong += not np.array_equal(y, ref)
    honest = {k: len(v) for k, v in sc.transport.history.items()}
    per_epoch = p["run_point"] // p["bound"]
    keys_differ = _first_frames_differ(sc.transport.history, honest, p["ops"] - 1, per_epoch)
    sc.transport.armed = rank == 0  # rank 0 replays epoch 0's first frame in the next epoch
    err = None
    try:
        sc.allreduce(x, y)
    except SecCommError as e:
        err = e
    epochs.append(sc.epoch)
    victim = sc.transport.victim if rank == 0 else -1
    sc.close()
    flags = np.array([victim if victim is not None else -1, 0, 0, 0, 0], np.int64)
    comm.Allreduce(MPI.IN_PLACE, flags[:1], MPI.MAX)
    victim = int(flags[0])
    refused = isinstance(err, AuthenticationError) and err.peer == 0
    mine = [epochs != predicted_epochs(p["run_point"], p["bound"], p["ops"]), wrong > 0, keys_differ is False]
    mine.append(rank == victim and not refused)
    flags[1:] = mine
    comm.Allreduce(MPI.IN_PLACE, flags[1:], MPI.SUM)
    suite = get_suite(config.suite)
    out = {
        "ran": True,
        "epochs_ok": flags[1] == 0,
        "results_ok": flags[2] == 0,
        "keys_differ": (flags[3] == 0) if suite.confidential else None,
        "replay_refused": (victim >= 0 and flags[4] == 0) if suite.authenticated else None,
        "epochs_seen": max(epochs) + 1,
    }
    out = {k: (bool(v) if isinstance(v, np.bool_) else v) for k, v in out.items()}
    out["ok"] = all(out[k] is not False for k in ("epochs_ok", "results_ok", "keys_differ", "replay_refused"))
    return out


def _first_frames_differ(history: dict, counts: dict, ops: int, per_epoch: int) -> bool | None:
    """Whether, for every peer this rank sent to, the first frame of operation 0 (epoch 0) and of
    operation ``per_epoch`` (the first of epoch 1) differ in their ciphertext (tag excluded);
    None when this rank sent no frames."""
    verdicts = []
    for key, n in counts.items():
        if n == 0 or n % ops:
            continue
        k = n // ops  # frames per operation to this peer at this size
        first, later = history[key][0], history[key][per_epoch * k]
        verdicts.append(not np.array_equal(first[:-16], later[:-16]))
    return all(verdicts) if verdicts else None


def _detail(p: dict, got: dict) -> str:
    """One line for the report: what ran, and what failed."""
    point = f"{p['run_point']:,} frames per key"
    ran = (
        f"ran at a test-sized point of {point} ({TEST_OPS_PER_EPOCH} operations per key): the configured "
        f"{p['configured']:,} cannot be reached in a report run"
        if p["scaled"]
        else f"ran at the configured point, {point}"
    )
    said = {
        "epochs_ok": ("epochs as scheduled", "the epochs did not follow the schedule"),
        "results_ok": ("results right", "a result was wrong"),
        "keys_differ": (
            "keys differ",
            "two epochs sealed equal ciphertexts at one nonce (one key, or no encryption)",
            "keys not compared (the suite does not encrypt)",
        ),
        "replay_refused": (
            "cross-epoch replay refused",
            "a frame replayed from an earlier epoch was accepted",
            "replay not tried (the suite does not authenticate)",
        ),
    }
    fails = [said[k][1] for k in said if got.get(k) is False]
    passes = [said[k][0] if got.get(k) else said[k][2] for k in said if got.get(k) is not False]
    verdict = "; ".join(fails or passes)
    return f"{ran}; {p['ops']} allreduces, {got['epochs_seen']} epochs; {verdict}"
