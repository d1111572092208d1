// Run CUDA kernels on the CPU, for tests on machines without a GPU.
//
// The kernel source (kernels/aead.cu, unchanged) is compiled as C++ after this header.  A launch runs
// its blocks one after another; a block's CUDA threads are fibers (ucontext) on the calling OS thread,
// run in turn until each reaches __syncthreads or returns, so __syncthreads is a real barrier,
// __shared__ variables (function statics here) are shared by the block's threads, and a barrier
// costs a few context switches instead of waking hundreds of OS threads.  Launches are serialised.
// Hazards that are undefined on a GPU are errors here: a __syncthreads reached after a thread of the
// block has exited, or a thread exiting while others wait at a barrier.  Kernel arguments come as
// an array of pointers to their values, as cuLaunchKernel takes them; emu_sig_<name>() gives the
// parameter sizes so the caller can check what it passes.
#pragma once
#include <ucontext.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

struct dim3 { unsigned x, y, z; };
struct alignas(16) uint4 { unsigned x, y, z, w; };  // (aligned as CUDA's: a misaligned access is UB, caught below)

namespace emu {
inline std::mutex error_lock;
inline std::string error;
inline void fail(const std::string &what) {
    std::lock_guard<std::mutex> g(error_lock);
    if (error.empty()) error = what;
}

enum State { RUN, WAIT, DONE };
struct Fiber {
    ucontext_t ctx;
    State state;
};
constexpr std::size_t STACK_BYTES = 256 * 1024;  // per CUDA thread; the kernels' locals are small

inline std::mutex launch_lock;  // one launch at a time: the state below is the launch's
inline ucontext_t scheduler;
inline std::vector<Fiber> fibers;
inline std::vector<std::unique_ptr<char[]>> stacks;  // kept across launches
inline unsigned current = 0;
inline dim3 tid, bid, bdim, gdim;  // tid: set to the running fiber's before each switch to it
inline void *kernel_fn;
inline void **kernel_args;

struct Block {
    int live = 0, waiting = 0, exited = 0;
    void release() {
        waiting = 0;
        for (auto &f : fibers)
            if (f.state == WAIT) f.state = RUN;
    }
    void sync() {
        if (exited) fail("__syncthreads reached after a thread of the block exited");
        if (++waiting == live) { release(); return; }
        fibers[current].state = WAIT;
        swapcontext(&fibers[current].ctx, &scheduler);
    }
    void leave() {
        live--; exited++;
        if (waiting) {
            fail("a thread exited while others wait at __syncthreads");
            if (waiting == live) release();
        }
    }
};
inline Block block_state;
inline Block *block = &block_state;

template <class... A, std::size_t... I>
void call(void (*k)(A...), void **args, std::index_sequence<I...>) {
    k(*reinterpret_cast<std::remove_cv_t<A> *>(args[I])...);
}

template <class... A>
void fiber_main() {  // one CUDA thread of one block; returns to the scheduler (uc_link)
    if (error.empty())
        call(reinterpret_cast<void (*)(A...)>(kernel_fn), kernel_args, std::index_sequence_for<A...>{});
    block->leave();
    fibers[current].state = DONE;
}

// Apart from launch(): getcontext returns twice, which must not clobber the launch loop's locals.
__attribute__((noinline)) inline void start_fiber(unsigned t, void (*entry)()) {
    Fiber &f = fibers[t];
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = stacks[t].get();
    f.ctx.uc_stack.ss_size = STACK_BYTES;
    f.ctx.uc_link = &scheduler;
    makecontext(&f.ctx, entry, 0);
    f.state = RUN;
}

template <class... A>
int launch(void (*k)(A...), unsigned gx, unsigned bx, void **args) {
    std::lock_guard<std::mutex> one_at_a_time(launch_lock);
    error.clear();
    if (gx == 0 || bx == 0 || bx > 1024) { fail("invalid launch configuration"); return 1; }
    gdim = {gx, 1, 1};
    bdim = {bx, 1, 1};
    kernel_fn = reinterpret_cast<void *>(k);
    kernel_args = args;
    fibers.resize(bx);
    while (stacks.size() < bx) stacks.emplace_back(new char[STACK_BYTES]);
    for (unsigned b = 0; b < gx && error.empty(); b++) {
        bid = {b, 0, 0};
        *block = Block{};
        block->live = (int)bx;
        for (unsigned t = 0; t < bx; t++) start_fiber(t, fiber_main<A...>);
        for (;;) {  // run every runnable thread in turn until all returned
            bool ran = false, done = true;
            for (unsigned t = 0; t < bx; t++) {
                if (fibers[t].state != RUN) continue;
                current = t;
                tid = {t, 0, 0};
                ran = true;
                swapcontext(&scheduler, &fibers[t].ctx);
            }
            for (unsigned t = 0; t < bx; t++) done = done && fibers[t].state == DONE;
            if (done) break;
            if (!ran) {  // threads wait at a barrier the others will never reach
                fail("threads of a block wait at __syncthreads forever");
                break;
            }
        }
    }
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
