"""Runs under mpiexec: a bench sweep with a deliberately wrong suite plugged into the registry,
to prove that #wrong is counted on every rank and the run exits non-zero (never hangs)."""

import sys

import numpy as np

from seccomm.bench import BenchConfig
from seccomm.bench.runner import main_ranks
from seccomm.suites import NoneSuite, SuiteKey, register


class CorruptOnRank1Key(SuiteKey):
    """The 'none' suite's frames, except that rank 1 receives one element altered in every frame."""

    def seal(self, slot, plaintext):
        np.copyto(np.frombuffer(slot.body, np.uint8), np.frombuffer(plaintext, np.uint8))

    def open(self, slot, out):
        from mpi4py import MPI

        body = slot.body
        if MPI.COMM_WORLD.Get_rank() == 1 and len(body) >= 4:
            np.copyto(np.frombuffer(out, np.uint8), np.frombuffer(body, np.uint8))
            np.frombuffer(out, np.float32)[0] += 1.0
            return out
        return body


class CorruptOnRank1(NoneSuite):
    clear = False  # (framed in slots, so that its key's open runs)
    key_class = CorruptOnRank1Key


register(CorruptOnRank1("test-corrupt", 99, False, False, "n/a", "test only"))
cfg = BenchConfig(
    minbytes=64,
    maxbytes=4096,
    stepfactor=8,
    iters=2,
    warmup=1,
    suites=["none", "test-corrupt"],
    collectives=["allreduce"],
    timeout=20,
)
sys.exit(main_ranks(cfg))
