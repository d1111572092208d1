// Run CUDA kernels on the CPU, for tests on machines without a GPU.
//
// The kernel source (seccomm/gpu/cuda/aead.cu, unchanged) is compiled as C++ after this header.  A launch runs
// its blocks one after another on one pool of OS threads, one per CUDA thread, so __syncthreads is a
// real barrier and __shared__ variables (function statics here) are shared by the block's threads.
// Hazards that are undefined on a GPU are errors here: a __syncthreads reached after a thread of the
// block has exited, or a thread exiting while others wait at a barrier.  Kernel arguments come as
// an array of pointers to their values, as cuLaunchKernel takes them; emu_sig_<name>() gives the
// parameter sizes so the caller can check what it passes.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

struct dim3 { unsigned x, y, z; };
struct uint4 { unsigned x, y, z, w; };

namespace emu {
inline std::mutex error_lock;
inline std::string error;
inline void fail(const std::string &what) {
    std::lock_guard<std::mutex> g(error_lock);
    if (error.empty()) error = what;
}

struct Block {
    std::mutex m;
    std::condition_variable cv;
    int live = 0, waiting = 0, exited = 0;
    unsigned long gen = 0;
    void release() { waiting = 0; gen++; cv.notify_all(); }
    void sync() {
        std::unique_lock<std::mutex> l(m);
        if (exited) fail("__syncthreads reached after a thread of the block exited");
        if (++waiting == live) { release(); return; }
        unsigned long g = gen;
        cv.wait(l, [&] { return gen != g; });
    }
    void leave() {
        std::unique_lock<std::mutex> l(m);
        live--; exited++;
        if (waiting) {
            fail("a thread exited while others wait at __syncthreads");
            if (waiting == live) release();
        }
    }
};

inline thread_local dim3 tid, bid;
inline dim3 bdim, gdim;
inline Block *block;

template <class... A, std::size_t... I>
void call(void (*k)(A...), void **args, std::index_sequence<I...>) {
    k(*reinterpret_cast<std::remove_cv_t<A> *>(args[I])...);
}

template <class... A>
int launch(void (*k)(A...), unsigned gx, unsigned bx, void **args) {
    error.clear();
    if (gx == 0 || bx == 0 || bx > 1024) { fail("invalid launch configuration"); return 1; }
    gdim = {gx, 1, 1};
    bdim = {bx, 1, 1};
    Block blk;
    blk.live = (int)bx;
    block = &blk;
    // One OS thread per CUDA thread for the whole launch; the blocks run one after another, and
    // the last thread to finish a block resets the barrier state for the next one.
    std::mutex m;
    std::condition_variable cv;
    unsigned done = 0;
    unsigned long round = 0;
    auto worker = [&](unsigned t) {
        tid = {t, 0, 0};
        for (unsigned b = 0; b < gx; b++) {
            bid = {b, 0, 0};
            if (error.empty()) call(k, args, std::index_sequence_for<A...>{});
            blk.leave();
            std::unique_lock<std::mutex> l(m);
            if (++done == bx) {
                done = 0;
                { std::lock_guard<std::mutex> g(blk.m); blk.live = (int)bx; blk.waiting = 0; blk.exited = 0; }
                round++;
                cv.notify_all();
            } else {
                unsigned long r = round;
                cv.wait(l, [&] { return round != r; });
            }
        }
    };
    std::vector<std::thread> threads;
    threads.reserve(bx);
    for (unsigned t = 0; t < bx; t++) threads.emplace_back(worker, t);
    for (auto &th : threads) th.join();
    return error.empty() ? 0 : 1;
}

template <class... A>
std::string signature(void (*)(A...)) {
    std::string s;
    ((s += std::to_string(sizeof(A)) + ","), ...);
    return s;
}
}  // namespace emu

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define threadIdx (emu::tid)
#define blockIdx (emu::bid)
#define blockDim (emu::bdim)
#define gridDim (emu::gdim)
inline void __syncthreads() { emu::block->sync(); }

#define EMU_KERNEL(name)                                                                   \
    extern "C" int emu_launch_##name(unsigned gx, unsigned bx, void **args) {              \
        return emu::launch(name, gx, bx, args);                                            \
    }                                                                                      \
    extern "C" const char *emu_sig_##name() {                                              \
        static std::string s = emu::signature(name);                                       \
        return s.c_str();                                                                  \
    }

// One translation unit includes this header (tests/kernel_emu.py), so this is defined once.
extern "C" const char *emu_error() { return emu::error.c_str(); }
