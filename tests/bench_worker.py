"""Runs under mpiexec: a bench sweep with a deliberately wrong suite plugged into the registry,
to prove that #wrong is counted on every rank and the run exits non-zero (never hangs)."""

import sys

import numpy as np

from seccomm.bench import BenchConfig
from seccomm.bench.runner import main_ranks
from seccomm.suites import NoneSuite, register


class CorruptOnRank1(NoneSuite):
    """The 'none' suite, except that rank 1 receives one element altered in every frame."""

    def open(self, aead, slot, out):
        from mpi4py import MPI

        body = slot.body
        if MPI.COMM_WORLD.Get_rank() == 1 and len(body) >= 4:
            np.copyto(np.frombuffer(out, np.uint8), np.frombuffer(body, np.uint8))
            np.frombuffer(out, np.float32)[0] += 1.0
            return out
        return body


register(CorruptOnRank1("test-corrupt", 99, False, False, "n/a", "test only"))
cfg = BenchConfig(minbytes=64, maxbytes=4096, stepfactor=8, iters=2, warmup=1,
                  suites=["none", "test-corrupt"], collectives=["allreduce"], timeout=20)
sys.exit(main_ranks(cfg))
