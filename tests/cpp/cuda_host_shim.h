// Runs rendered CUDA kernels on the host, for tests on machines without a GPU:
// this header is force-included (g++ -include) before the renderer's prelude
// and kernels, turning the CUDA dialect into plain C++. Threads of a block run
// one after another, except for kernels that use __syncthreads (block
// reductions), whose threads run as real threads meeting at a barrier.
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
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

struct tiny_barrier {
  std::mutex m;
  std::condition_variable cv;
  unsigned n = 1, waiting = 0, generation = 0;
  void wait() {
    std::unique_lock<std::mutex> l(m);
    unsigned gen = generation;
    if (++waiting == n) {
      waiting = 0;
      generation++;
      cv.notify_all();
      return;
    }
    cv.wait(l, [&] { return gen != generation; });
  }
};
inline tiny_barrier tiny_block_barrier;
inline void __syncthreads() { tiny_block_barrier.wait(); }

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
    tiny_block_barrier.n = block;
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < block; t++)
      threads.emplace_back([=] {
        blockIdx.x = b;
        threadIdx.x = t;
        tiny_host_call(fn, bufs, begin, end, Seq{});
      });
    for (auto& th : threads) th.join();
  }
}
