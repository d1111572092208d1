"""tests/cuda_emu.h itself (the CPU stand-in the GPU kernel tests run on): __syncthreads is a
real barrier, __shared__ memory is shared by the threads of a block and blocks run one after
another, and a hazard a GPU leaves undefined (a thread that returns while the others still reach
a barrier) is an error, not a silent pass."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

import kernel_emu

SRC = r"""
__global__ void reverse_in_block(int *out) {
    __shared__ int s[1024];
    s[threadIdx.x] = (int)(threadIdx.x + 1000 * blockIdx.x);
    __syncthreads();  // every write of the block lands before any thread reads
    out[blockIdx.x * blockDim.x + threadIdx.x] = s[blockDim.x - 1 - threadIdx.x];
}
__global__ void twice(int *out) {
    __shared__ int sum;
    if (threadIdx.x == 0) sum = 0;
    __syncthreads();
    for (unsigned k = 0; k < blockDim.x; k++) {  // in turn, one barrier per turn
        if (k == threadIdx.x) sum += (int)threadIdx.x;
        __syncthreads();
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}
__global__ void early_exit(int *out) {
    if (threadIdx.x == 0) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}
"""

pytestmark = pytest.mark.skipif(
    not (shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")), reason="no C++ compiler"
)


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    lib = kernel_emu.build(tmp_path_factory.mktemp("emu-self"), source=SRC)
    return kernel_emu.EmulatedModule(lib, source=SRC)


@pytest.mark.parametrize("blocks,threads", [(1, 1), (3, 256), (2, 1024)])
def test_barrier_and_shared_memory(module, blocks, threads):
    out = np.full(blocks * threads, -1, np.int32)
    module.get_function("reverse_in_block")((blocks,), (threads,), (out,))
    t = np.arange(threads)
    want = np.concatenate([(threads - 1 - t) + 1000 * b for b in range(blocks)])
    assert np.array_equal(out, want)
    module.get_function("twice")((blocks,), (threads,), (out,))
    assert np.all(out == threads * (threads - 1) // 2)


def test_a_thread_that_returns_before_a_barrier_is_an_error(module):
    out = np.zeros(64, np.int32)
    hazard = r"early_exit: __syncthreads reached after a thread of the block exited"
    with pytest.raises(RuntimeError, match=hazard):
        module.get_function("early_exit")((1,), (64,), (out,))
    module.get_function("reverse_in_block")((1,), (64,), (out,))  # the next launch runs clean
    assert np.array_equal(out, np.arange(64)[::-1])
