// Runs rendered CUDA kernels on the host, for tests on machines without a GPU:
// this header is force-included (g++ -include) before the renderer's prelude
// and kernels, turning the CUDA dialect into plain C++. Threads of a block run
// one after another; in kernels that use __syncthreads (block reductions) they
// run as fibers that meet at every barrier.
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <ucontext.h>

#include <cstddef>
#include <functional>
#include <tuple>
#include <utility>
#include <vector>

struct tiny_uint3 {
  unsigned x = 0, y = 0, z = 0;
};
inline thread_local tiny_uint3 threadIdx, blockIdx;
inline tiny_uint3 blockDim, gridDim;

#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
// Blocks run one at a time, so one static array serves as every block's shared memory.
#define __shared__ static

inline float __uint_as_float(unsigned x) {
  float f;
  memcpy(&f, &x, 4);
  return f;
}
inline unsigned __float_as_uint(float f) {
  unsigned x;
  memcpy(&x, &f, 4);
  return x;
}
inline long long __double_as_longlong(double d) {
  long long x;
  memcpy(&x, &d, 8);
  return x;
}
inline double __longlong_as_double(long long x) {
  double d;
  memcpy(&d, &x, 8);
  return d;
}

// Threads of a block that synchronizes run as fibers on one OS thread:
// __syncthreads switches back to the scheduler, which resumes every thread in
// turn, so no thread passes barrier k before all have reached it.
struct tiny_fibers {
  ucontext_t main;
  std::vector<ucontext_t> ctx;
  std::vector<std::vector<char>> stacks;
  std::vector<bool> done;
  unsigned current = 0;
  std::function<void()> body;
};
inline tiny_fibers* tiny_active_fibers = nullptr;
inline void __syncthreads() {
  tiny_fibers* f = tiny_active_fibers;
  if (f) swapcontext(&f->ctx[f->current], &f->main);
}
inline void tiny_fiber_entry() {
  tiny_fibers* f = tiny_active_fibers;
  f->body();
  f->done[f->current] = true;  // returning resumes `main` through uc_link
}

template <class... P, size_t... I>
void tiny_host_call(void (*fn)(P...), void** bufs, long long begin, long long end, std::index_sequence<I...>) {
  fn(static_cast<std::tuple_element_t<I, std::tuple<P...>>>(bufs[I])..., begin, end);
}

// Launches `fn` over `grid` blocks of `block` threads.
template <class... P>
void tiny_host_launch(void (*fn)(P...), void** bufs, long long begin, long long end, unsigned grid, unsigned block,
                      bool cooperative) {
  using Seq = std::make_index_sequence<sizeof...(P) - 2>;
  blockDim.x = block;
  gridDim.x = grid;
  for (unsigned b = 0; b < grid; b++) {
    if (!cooperative) {
      blockIdx.x = b;
      for (unsigned t = 0; t < block; t++) {
        threadIdx.x = t;
        tiny_host_call(fn, bufs, begin, end, Seq{});
      }
      continue;
    }
    tiny_fibers f;
    f.ctx.resize(block);
    f.stacks.resize(block);
    f.done.assign(block, false);
    f.body = [&] { tiny_host_call(fn, bufs, begin, end, Seq{}); };
    blockIdx.x = b;
    tiny_active_fibers = &f;
    for (unsigned t = 0; t < block; t++) {
      f.stacks[t].resize(1 << 18);
      getcontext(&f.ctx[t]);
      f.ctx[t].uc_stack.ss_sp = f.stacks[t].data();
      f.ctx[t].uc_stack.ss_size = f.stacks[t].size();
      f.ctx[t].uc_link = &f.main;
      makecontext(&f.ctx[t], tiny_fiber_entry, 0);
    }
    for (bool running = true; running;) {
      running = false;
      for (unsigned t = 0; t < block; t++) {
        if (f.done[t]) continue;
        f.current = t;
        threadIdx.x = t;
        swapcontext(&f.main, &f.ctx[t]);
        running = true;
      }
    }
    tiny_active_fibers = nullptr;
  }
}
