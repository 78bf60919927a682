// The emulated CUDA device: a driver API table over host memory and host
// builds of the rendered kernels (see cuda_emu.h).
#include "engine/runtime/cuda_emu.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "engine/runtime/counters.h"
#include "engine/runtime/disk_cache.h"
#include "engine/runtime/thread_pool.h"

#ifndef TINY_HOST_CXX
#define TINY_HOST_CXX "c++"
#endif

namespace tiny {
namespace {

using namespace cu;

// ---------------------------------------------------------------- the module header

// Force-included before the rendered source: the CUDA dialect as C++, and the
// launch entry points the emulator calls (tiny_emu_launch_<name>).
const char* kShim = R"(// libm's functions, declared here: <math.h> in C++ takes 3x longer to parse than the rest
extern "C" {
#define TINY_LIBM1(n) double n(double) noexcept; float n##f(float) noexcept;
#define TINY_LIBM2(n) double n(double, double) noexcept; float n##f(float, float) noexcept;
TINY_LIBM1(exp) TINY_LIBM1(log) TINY_LIBM1(sin) TINY_LIBM1(cos) TINY_LIBM1(tan) TINY_LIBM1(sqrt) TINY_LIBM1(trunc)
TINY_LIBM1(floor) TINY_LIBM1(ceil) TINY_LIBM1(rint) TINY_LIBM1(erf) TINY_LIBM1(erfc) TINY_LIBM1(tanh) TINY_LIBM1(asin)
TINY_LIBM1(acos) TINY_LIBM1(atan) TINY_LIBM1(sinh) TINY_LIBM1(cosh) TINY_LIBM1(asinh) TINY_LIBM1(acosh)
TINY_LIBM1(atanh) TINY_LIBM1(expm1) TINY_LIBM1(log1p) TINY_LIBM1(exp2) TINY_LIBM1(log2) TINY_LIBM1(log10)
TINY_LIBM1(lgamma) TINY_LIBM1(fabs)
TINY_LIBM2(fmod) TINY_LIBM2(pow) TINY_LIBM2(atan2) TINY_LIBM2(hypot) TINY_LIBM2(copysign)
double fma(double, double, double) noexcept; float fmaf(float, float, float) noexcept;
}
#define memcpy __builtin_memcpy
struct tiny_uint3 { unsigned x, y, z; };
static thread_local tiny_uint3 threadIdx, blockIdx;
static tiny_uint3 blockDim, gridDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
// The threads of a block run on one OS thread, its blocks one after another.
#define __shared__ static thread_local
static inline unsigned atomicAdd(unsigned* p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST); }
static inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
static inline float __uint_as_float(unsigned x) { float f; memcpy(&f, &x, 4); return f; }
static inline unsigned __float_as_uint(float f) { unsigned x; memcpy(&x, &f, 4); return x; }
static inline long long __double_as_longlong(double d) { long long x; memcpy(&x, &d, 8); return x; }
static inline double __longlong_as_double(long long x) { double d; memcpy(&d, &x, 8); return d; }

// What the emulator gives a launch (its layout is the emulator's EmuEnv).
struct TinyEmuEnv {
  void* (*translate)(unsigned long long device_address);
  void (*run)(unsigned grid, unsigned block, int cooperative, void (*thread)(void*, unsigned, unsigned), void* arg);
  void (*barrier)();
  void (*warp_barrier)();
};
static const TinyEmuEnv* tiny_emu_env;
// A meeting of fibers; the resumed fiber gets its own indices back.
static inline void tiny_meet(void (*wait)()) {
  const tiny_uint3 t = threadIdx, b = blockIdx;
  wait();
  threadIdx = t;
  blockIdx = b;
}
// The fibers of one block meet here.
static inline void __syncthreads() { tiny_meet(tiny_emu_env->barrier); }
// The fibers of one warp meet here; the other warps go on to their next meeting.
static inline void tiny_warp_sync() { tiny_meet(tiny_emu_env->warp_barrier); }

// A warp shuffle as its warp meets it: each lane leaves its value, then reads lane + delta
// (its own past the warp's end).
template <class T> static inline T __shfl_down_sync(unsigned, T v, unsigned delta) {
  static thread_local unsigned long long lanes[1024];
  unsigned long long bits = 0, got;
  memcpy(&bits, &v, sizeof(T));
  lanes[threadIdx.x] = bits;
  tiny_warp_sync();
  const unsigned from = threadIdx.x + delta;
  got = (threadIdx.x & 31u) + delta < 32u && from < blockDim.x ? lanes[from] : bits;
  tiny_warp_sync();
  T r;
  memcpy(&r, &got, sizeof(T));
  return r;
}

// mma.sync as a warp meets it: each lane leaves its fragments of A (16 x k) and B (k x 8), then
// adds the products of its own 4 outputs to them.
// Fragments as the PTX ISA lays them out: m16n8k16 (16-bit factors, k = 16), m16n8k8 (TF32, k = 8).
static inline void tiny_warp_mma(float* d, const float* a, const float* b, unsigned k) {
  static thread_local float fa[1024][8], fb[1024][4];
  const unsigned t = threadIdx.x, lane = t & 31u, warp = t & ~31u;
  for (unsigned i = 0; i < k / 2; i++) fa[t][i] = a[i];
  for (unsigned i = 0; i < k / 4; i++) fb[t][i] = b[i];
  tiny_warp_sync();
  for (unsigned i = 0; i < 4; i++) {
    const unsigned row = lane / 4 + 8 * (i / 2), col = 2 * (lane % 4) + i % 2;
    float acc = d[i];
    for (unsigned kk = 0; kk < k; kk++) {
      // the lanes (and their elements) holding A[row][kk] and B[kk][col]
      const unsigned la = (row % 8) * 4 + (k == 16 ? (kk % 8) / 2 : kk % 4), lb = col * 4 + la % 4;
      const unsigned ea = k == 16 ? kk % 2 + 2 * (row / 8) + 4 * (kk / 8) : row / 8 + 2 * (kk / 4);
      const unsigned eb = k == 16 ? kk % 2 + 2 * (kk / 8) : kk / 4;
      acc += fa[warp + la][ea] * fb[warp + lb][eb];
    }
    d[i] = acc;
  }
  tiny_warp_sync();
}

// ldmatrix as a warp meets it: each lane leaves its row's address,
// then takes 32 bits of each of `count` 8x8 matrices of 16-bit values, as the PTX ISA lays them out.
static inline void tiny_warp_ldmatrix(unsigned* d, const void* row, unsigned count, bool trans) {
  static thread_local const unsigned char* rows[1024];
  const unsigned t = threadIdx.x, lane = t & 31u, warp = t & ~31u, g = lane / 4, q = lane % 4;
  rows[t] = (const unsigned char*)row;
  tiny_warp_sync();
  for (unsigned j = 0; j < count; j++) {
    const unsigned char* const* m = rows + warp + 8 * j;
    if (trans) {  // column g of rows 2q and 2q + 1
      unsigned short lo, hi;
      memcpy(&lo, m[2 * q] + 2 * g, 2);
      memcpy(&hi, m[2 * q + 1] + 2 * g, 2);
      d[j] = lo | (unsigned)hi << 16;
    } else {  // word q of row g
      memcpy(&d[j], m[g] + 4 * q, 4);
    }
  }
  tiny_warp_sync();
}

template <unsigned...> struct tiny_seq {};
template <unsigned N, unsigned... I> struct tiny_make_seq : tiny_make_seq<N - 1, N - 1, I...> {};
template <unsigned... I> struct tiny_make_seq<0, I...> { typedef tiny_seq<I...> type; };
// A kernel parameter from the driver's argument slot: device pointers are
// translated once per launch; launch words and the range pass as they are.
template <class T> static inline unsigned long long tiny_prep(void* slot, T**) {
  return (unsigned long long)tiny_emu_env->translate(*(unsigned long long*)slot);
}
static inline unsigned long long tiny_prep(void* slot, unsigned long long*) { return *(unsigned long long*)slot; }
static inline unsigned long long tiny_prep(void* slot, long long*) { return *(unsigned long long*)slot; }
template <class T> static inline T* tiny_get(unsigned long long v, T**) { return (T*)v; }
static inline unsigned long long tiny_get(unsigned long long v, unsigned long long*) { return v; }
static inline long long tiny_get(unsigned long long v, long long*) { return (long long)v; }

template <class... P> struct tiny_kernel {
  typedef typename tiny_make_seq<sizeof...(P)>::type seq;
  struct launch { void (*fn)(P...); unsigned long long v[sizeof...(P)]; };
  template <unsigned... I> static void call(const launch* L, tiny_seq<I...>) { L->fn(tiny_get(L->v[I], (P*)0)...); }
  template <unsigned... I> static void prep(launch* L, void** params, tiny_seq<I...>) {
    const unsigned long long v[] = {tiny_prep(params[I], (P*)0)...};
    memcpy(L->v, v, sizeof v);
  }
  static void thread(void* arg, unsigned b, unsigned t) {
    blockIdx.x = b;
    threadIdx.x = t;
    call((const launch*)arg, seq());
  }
  static void run(void (*fn)(P...), void** params, unsigned grid, unsigned block, int coop, const TinyEmuEnv* env) {
    tiny_emu_env = env;
    gridDim.x = grid; gridDim.y = gridDim.z = 1;
    blockDim.x = block; blockDim.y = blockDim.z = 1;
    launch L;
    L.fn = fn;
    prep(&L, params, seq());
    env->run(grid, block, coop, &thread, &L);
  }
};
template <class... P>
static void tiny_emu_run(void (*fn)(P...), void** params, unsigned grid, unsigned block, int coop, const TinyEmuEnv* env) {
  tiny_kernel<P...>::run(fn, params, grid, block, coop, env);
}
template <class... P> static unsigned tiny_emu_nparams(void (*)(P...)) { return sizeof...(P); }
)";

const char* kModulePrefix = "tiny-emu-module:";

// ---------------------------------------------------------------- execution

struct EmuEnv {  // the shim's TinyEmuEnv
  void* (*translate)(unsigned long long);
  void (*run)(unsigned, unsigned, int, void (*)(void*, unsigned, unsigned), void*);
  void (*barrier)();
  void (*warp_barrier)();
};
using LaunchFn = void (*)(void**, unsigned, unsigned, const EmuEnv*);

std::atomic<int64_t> n_launches{0}, n_captured{0}, n_graph_launches{0}, n_instantiations{0}, n_updates{0};
std::atomic<bool> bad_address{false};  // a launch named memory that is not allocated

// Fibers of the block an OS thread is running (cooperative kernels): a stack
// per thread of the block, switched by tiny_fiber_switch, which saves the
// callee-saved registers and the floating-point control words on the current
// stack, stores its stack pointer in *from and resumes the stack `to` (about
// 5 ns; glibc's swapcontext makes a system call each time).
extern "C" void tiny_fiber_switch(void** from, void* to);
asm(R"(
  .text
  .p2align 4
  .type tiny_fiber_switch, @function
tiny_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size tiny_fiber_switch, .-tiny_fiber_switch
)");

struct Fibers {
  void* main = nullptr;          // the scheduler's saved stack pointer
  std::vector<void*> sp;         // each fiber's saved stack pointer
  std::vector<char*> stacks;
  std::vector<char> done;
  std::vector<char> at_warp_meet;  // the fiber waits at a warp's meeting (else at the block's, or runs)
  unsigned current = 0, block = 0;
  void (*thread)(void*, unsigned, unsigned) = nullptr;
  void* arg = nullptr;
  bool active = false;
  ~Fibers() {
    for (char* s : stacks) std::free(s);
  }
};
thread_local Fibers fibers;
constexpr size_t kFiberStack = 64 << 10;

[[noreturn]] void fiber_entry() {
  Fibers& f = fibers;
  f.thread(f.arg, f.block, f.current);
  f.done[f.current] = 1;
  void* unused;
  tiny_fiber_switch(&unused, f.main);  // never resumed
  __builtin_unreachable();
}

// A fresh stack whose first switch "returns" into fiber_entry, as if called.
void* fiber_stack(char* stack) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + kFiberStack) & ~uintptr_t(15);
  auto* w = reinterpret_cast<uint64_t*>(top);
  w[-1] = 0;                                             // fiber_entry's return address: none
  w[-2] = reinterpret_cast<uint64_t>(&fiber_entry);      // popped by ret
  for (int r = 3; r <= 8; r++) w[-r] = 0;                // rbp rbx r12 r13 r14 r15
  uint32_t mxcsr;
  uint16_t fpcw;
  asm volatile("stmxcsr %0" : "=m"(mxcsr));
  asm volatile("fnstcw %0" : "=m"(fpcw));
  auto* ctl = reinterpret_cast<char*>(&w[-9]);           // the control words, as the switch saves them
  std::memcpy(ctl, &mxcsr, 4);
  std::memcpy(ctl + 4, &fpcw, 2);
  return &w[-9];
}

void barrier() {
  Fibers& f = fibers;
  if (f.active) tiny_fiber_switch(&f.sp[f.current], f.main);
}

void warp_barrier() {
  Fibers& f = fibers;
  if (!f.active) return;
  f.at_warp_meet[f.current] = 1;
  tiny_fiber_switch(&f.sp[f.current], f.main);
}

void run_cooperative_block(unsigned b, unsigned block, void (*thread)(void*, unsigned, unsigned), void* arg) {
  Fibers& f = fibers;
  while (f.stacks.size() < block) {
    char* s = static_cast<char*>(std::malloc(kFiberStack));
    if (!s) throw std::bad_alloc();
    f.stacks.push_back(s);
  }
  f.sp.resize(block);
  f.done.assign(block, 0);
  f.at_warp_meet.assign(block, 0);
  f.block = b;
  f.thread = thread;
  f.arg = arg;
  for (unsigned t = 0; t < block; t++) f.sp[t] = fiber_stack(f.stacks[t]);
  f.active = true;
  // No thread passes block barrier k before every thread has reached it, nor a warp's meeting
  // before its warp has. Each warp runs as far as it can (to the next block barrier) before the
  // next one starts, so a warp that reads what another warp writes without a barrier between
  // them reads it too early, as it could on a GPU, and the tests see wrong results.
  for (bool running = true; running;) {
    running = false;
    for (unsigned w = 0; w < block; w += 32) {
      const unsigned end = std::min(block, w + 32);
      for (bool at_meet = true; at_meet;) {
        at_meet = false;
        for (unsigned t = w; t < end; t++) {
          if (f.done[t]) continue;
          f.current = t;
          f.at_warp_meet[t] = 0;
          tiny_fiber_switch(&f.main, f.sp[t]);
          running = true;
          at_meet |= f.at_warp_meet[t] != 0;
        }
      }
    }
  }
  f.active = false;
}

void run_grid(unsigned grid, unsigned block, int cooperative, void (*thread)(void*, unsigned, unsigned), void* arg) {
  if (bad_address.load()) return;  // the launch fails instead of touching wild memory
  int64_t min_slice = std::max<int64_t>(1, 2048 / int64_t(block));
  thread_pool().parallel_for(grid, min_slice, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; b++) {
      if (cooperative) {
        run_cooperative_block(unsigned(b), block, thread, arg);
        continue;
      }
      for (unsigned t = 0; t < block; t++) thread(arg, unsigned(b), t);
    }
  });
}

// ---------------------------------------------------------------- memory

struct Memory {
  std::mutex mu;
  uint64_t base = 0, size = 0, next = 0;  // the reserved device address range
  struct Block {
    char* host;
    size_t size;
  };
  std::map<uint64_t, Block> live;
  std::multimap<size_t, uint64_t> free_ranges;  // released device addresses by size
  size_t used = 0, capacity = 0;

  Memory() {
    // Reserved and inaccessible: a host dereference of a device address faults.
    for (uint64_t want = uint64_t(1) << 40; want >= (uint64_t(1) << 32) && !base; want >>= 2) {
      void* p = mmap(nullptr, want, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p != MAP_FAILED) {
        base = reinterpret_cast<uint64_t>(p);
        size = want;
      }
    }
    next = base;
    if (const char* m = std::getenv("TINY_EMU_MEMORY")) {
      char* end = nullptr;
      double v = std::strtod(m, &end);
      std::string unit = end ? end : "";
      double scale = unit == "K" || unit == "k" ? 1024.0 : unit == "M" ? 1024.0 * 1024 : unit == "G" ? 1024.0 * 1024 * 1024 : 1.0;
      capacity = size_t(v * scale);
    } else {
      capacity = size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE)) / 2;
    }
  }

  // The host memory behind [addr, addr + n), or nullptr.
  char* host(uint64_t addr, size_t n) {
    std::lock_guard<std::mutex> g(mu);
    auto it = live.upper_bound(addr);
    if (it == live.begin()) return nullptr;
    --it;
    uint64_t off = addr - it->first;
    if (off > it->second.size || n > it->second.size - off) return nullptr;
    return it->second.host + off;
  }
};

Memory& memory() {
  static Memory* m = new Memory();  // never destroyed: buffers may outlive statics
  return *m;
}

void* translate(unsigned long long addr) {
  char* p = memory().host(addr, 0);
  if (!p) bad_address = true;
  return p;
}

const EmuEnv kEnv = {&translate, &run_grid, &barrier, &warp_barrier};

// ---------------------------------------------------------------- modules, streams, graphs

struct Module {
  void* handle;
};
struct Function {
  std::string name;
  LaunchFn launch;
  unsigned nparams;
};
struct Launch {
  const Function* fn;
  unsigned grid, block;
  std::vector<unsigned long long> params;  // every kernel parameter is 8 bytes
};
struct Graph {
  std::vector<Launch> launches;
};
// Work queued on a stream runs when the host waits for it (the stream's or the context's
// synchronization, an event's, a free of device memory), not when it is queued: on a GPU it runs
// behind the host's back, so a host that reads memory before waiting for its writer reads what
// was there before, and here it does too (a wait too short fails the tests). Its operations are
// numbered from 1 in order; the first failure of one is answered by the next wait.
struct Stream {
  Graph* capture = nullptr;
  std::deque<std::function<CUresult()>> pending;
  uint64_t queued = 0, done = 0;
  CUresult failed = CUDA_SUCCESS;
};
std::recursive_mutex queue_mu;  // streams' queues (a kernel run holds it: work runs in order)
std::vector<Stream*>& streams() {
  static auto* all = new std::vector<Stream*>();  // streams are never destroyed (no cuStreamDestroy)
  return *all;
}
CUresult enqueue(CUstream st, std::function<CUresult()> op) {
  auto* s = static_cast<Stream*>(st);
  if (!s) return op();  // the legacy stream: nothing of ours runs on it, so at once
  std::lock_guard<std::recursive_mutex> g(queue_mu);
  s->pending.push_back(std::move(op));
  s->queued++;
  return CUDA_SUCCESS;
}
// Runs `s`'s work up to operation `position`.
CUresult run_until(Stream* s, uint64_t position) {
  std::lock_guard<std::recursive_mutex> g(queue_mu);
  while (s->done < position && !s->pending.empty()) {
    std::function<CUresult()> op = std::move(s->pending.front());
    s->pending.pop_front();
    s->done++;
    CUresult r = op();
    if (r != CUDA_SUCCESS && s->failed == CUDA_SUCCESS) s->failed = r;
  }
  return std::exchange(s->failed, CUDA_SUCCESS);
}
CUresult run_all_streams() {
  std::lock_guard<std::recursive_mutex> g(queue_mu);
  CUresult first = CUDA_SUCCESS;
  for (Stream* s : streams())
    if (CUresult r = run_until(s, s->queued); first == CUDA_SUCCESS) first = r;
  return first;
}

CUresult run_launch(const Launch& l) {
  std::vector<void*> slots;
  for (auto& v : l.params) slots.push_back(const_cast<unsigned long long*>(&v));
  bad_address = false;
  l.fn->launch(slots.data(), l.grid, l.block, &kEnv);
  n_launches++;
  return bad_address.exchange(false) ? 700 : CUDA_SUCCESS;  // CUDA_ERROR_ILLEGAL_ADDRESS
}

// ---------------------------------------------------------------- the driver API

CUresult cuInit(unsigned) { return memory().base ? CUDA_SUCCESS : 100; }
CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetCount(int* n) {
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice* d, int i) {
  *d = i;
  return i == 0 ? CUDA_SUCCESS : 101;  // CUDA_ERROR_INVALID_DEVICE
}
CUresult cuDeviceGetName(char* name, int len, CUdevice) {
  std::strncpy(name, "tiny CUDA emulator (host CPU)", size_t(len));
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int* v, int attr, CUdevice) {
  switch (attr) {
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *v = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *v = 0; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: {
      // $TINY_EMU_MULTIPROCESSORS: plan kernels as for a GPU of that size (132: an H100)
      const char* e = std::getenv("TINY_EMU_MULTIPROCESSORS");
      *v = e && std::atoi(e) > 0 ? std::atoi(e) : int(thread_pool().size());
      break;
    }
    default: *v = 0;
  }
  return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice) {
  *bytes = memory().capacity;
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice) {
  static int context;
  *ctx = &context;
  return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext ctx) { return ctx ? CUDA_SUCCESS : 201; }
CUresult cuCtxSynchronize() { return run_all_streams(); }

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  Memory& m = memory();
  size_t size = (std::max<size_t>(n, 1) + 255) & ~size_t(255);
  std::lock_guard<std::mutex> g(m.mu);
  if (m.used + size > m.capacity) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t addr;
  auto f = m.free_ranges.find(size);
  if (f != m.free_ranges.end()) {
    addr = f->second;
    m.free_ranges.erase(f);
  } else {
    if (m.next + size > m.base + m.size) return CUDA_ERROR_OUT_OF_MEMORY;
    addr = m.next;
    m.next += size;
  }
  char* host = static_cast<char*>(std::aligned_alloc(64, size));
  if (!host) {
    m.free_ranges.emplace(size, addr);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  m.live[addr] = {host, size};
  m.used += size;
  *p = addr;
  return CUDA_SUCCESS;
}
CUresult cuMemFree_v2(CUdeviceptr p) {
  run_all_streams();  // (as cudaFree waits for the device: queued work may still use the memory)
  Memory& m = memory();
  std::lock_guard<std::mutex> g(m.mu);
  auto it = m.live.find(p);
  if (it == m.live.end()) return 1;  // CUDA_ERROR_INVALID_VALUE
  std::free(it->second.host);
  m.used -= it->second.size;
  m.free_ranges.emplace(it->second.size, p);
  m.live.erase(it);
  return CUDA_SUCCESS;
}
// Pinned host memory is host memory the emulated copies read like any other.
CUresult cuMemHostAlloc(void** p, size_t n, unsigned) {
  *p = std::aligned_alloc(4096, (n + 4095) / 4096 * 4096);
  return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuMemFreeHost(void* p) {
  run_all_streams();
  std::free(p);
  return CUDA_SUCCESS;
}
CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  Memory& m = memory();
  std::lock_guard<std::mutex> g(m.mu);
  *free_bytes = m.capacity - m.used;
  *total = m.capacity;
  return CUDA_SUCCESS;
}
// (the source is staged now, as a GPU's driver stages pageable memory: the caller may reuse it)
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream stream) {
  char* d = memory().host(dst, n);
  if (!d) return 1;
  auto bytes = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + n);
  return enqueue(stream, [d, bytes] {
    std::memcpy(d, bytes->data(), bytes->size());
    return CUDA_SUCCESS;
  });
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream stream) {
  char* s = memory().host(src, n);
  if (!s) return 1;
  return enqueue(stream, [dst, s, n] {
    std::memcpy(dst, s, n);
    return CUDA_SUCCESS;
  });
}
// (the legacy stream: it does not wait for the engine's non-blocking stream)
CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) { return cuMemcpyDtoHAsync_v2(dst, src, n, nullptr); }

CUresult cuStreamCreate(CUstream* s, unsigned) {
  auto* st = new Stream();
  std::lock_guard<std::recursive_mutex> g(queue_mu);
  streams().push_back(st);
  *s = st;
  return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream s) {
  auto* st = static_cast<Stream*>(s);
  return st ? run_until(st, st->queued) : run_all_streams();
}
CUresult cuStreamBeginCapture_v2(CUstream s, int) {
  auto* st = static_cast<Stream*>(s);
  if (!st || st->capture) return 900;  // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
  st->capture = new Graph();
  return CUDA_SUCCESS;
}
CUresult cuStreamEndCapture(CUstream s, CUgraph* g) {
  auto* st = static_cast<Stream*>(s);
  if (!st || !st->capture) return 901;  // CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
  *g = st->capture;
  st->capture = nullptr;
  return CUDA_SUCCESS;
}
CUresult cuGraphInstantiateWithFlags(CUgraphExec* e, CUgraph g, unsigned long long) {
  *e = new Graph(*static_cast<Graph*>(g));
  n_instantiations++;
  return CUDA_SUCCESS;
}
CUresult cuGraphExecUpdate_v2(CUgraphExec e, CUgraph g, GraphUpdateInfo* info) {
  auto* exec = static_cast<Graph*>(e);
  auto* graph = static_cast<Graph*>(g);
  bool same = exec->launches.size() == graph->launches.size();
  for (size_t i = 0; same && i < graph->launches.size(); i++) same = exec->launches[i].fn == graph->launches[i].fn;
  if (info) *info = {same ? 0 : 2, nullptr, nullptr};  // CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED
  if (!same) return 910;  // CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE
  *exec = *graph;  // only parameters (and launch shapes) changed
  n_updates++;
  return CUDA_SUCCESS;
}
CUresult cuGraphLaunch(CUgraphExec e, CUstream s) {
  n_graph_launches++;
  return enqueue(s, [launches = static_cast<Graph*>(e)->launches] {  // (the executable may change meanwhile)
    for (auto& l : launches)
      if (CUresult r = run_launch(l)) return r;
    return CUDA_SUCCESS;
  });
}
CUresult cuGraphDestroy(CUgraph g) {
  delete static_cast<Graph*>(g);
  return CUDA_SUCCESS;
}
CUresult cuGraphExecDestroy(CUgraphExec e) {
  delete static_cast<Graph*>(e);
  return CUDA_SUCCESS;
}

CUresult cuModuleLoadDataEx(CUmodule* m, const void* image, unsigned n, int* opts, void** vals) {
  auto fail = [&](const std::string& why) {
    for (unsigned i = 0; i < n; i++)
      if (opts[i] == CU_JIT_ERROR_LOG_BUFFER) {
        size_t cap = 0;
        for (unsigned j = 0; j < n; j++)
          if (opts[j] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) cap = reinterpret_cast<uintptr_t>(vals[j]);
        if (cap) std::snprintf(static_cast<char*>(vals[i]), cap, "%s", why.c_str());
      }
    return CUDA_ERROR_INVALID_IMAGE;
  };
  const char* p = static_cast<const char*>(image);
  size_t plen = std::strlen(kModulePrefix);
  if (std::strncmp(p, kModulePrefix, plen) != 0)
    return fail("the emulated CUDA device runs host builds (cuda_emu_compile), not PTX or CUBIN");
  void* h = dlopen(p + plen, RTLD_NOW | RTLD_LOCAL);
  if (!h) return fail(dlerror());
  *m = new Module{h};
  return CUDA_SUCCESS;
}
CUresult cuModuleUnload(CUmodule m) {
  run_all_streams();  // queued launches may run its functions
  auto* mod = static_cast<Module*>(m);
  dlclose(mod->handle);
  delete mod;
  return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction* f, CUmodule m, const char* name) {
  void* h = static_cast<Module*>(m)->handle;
  auto launch = reinterpret_cast<LaunchFn>(dlsym(h, ("tiny_emu_launch_" + std::string(name)).c_str()));
  auto nparams = reinterpret_cast<unsigned (*)()>(dlsym(h, ("tiny_emu_nparams_" + std::string(name)).c_str()));
  if (!launch || !nparams) return 500;  // CUDA_ERROR_NOT_FOUND
  *f = new Function{name, launch, nparams()};  // lives as long as the process, like the module's code
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, CUstream s, void** params, void** extra) {
  if (gy != 1 || gz != 1 || by != 1 || bz != 1 || gx == 0 || bx == 0 || bx > 1024 || shared || extra)
    return 1;  // CUDA_ERROR_INVALID_VALUE: the engine launches 1-D grids only
  auto* fn = static_cast<const Function*>(f);
  Launch l{fn, gx, bx, {}};
  for (unsigned i = 0; i < fn->nparams; i++) l.params.push_back(*static_cast<unsigned long long*>(params[i]));
  auto* st = static_cast<Stream*>(s);
  if (st && st->capture) {
    st->capture->launches.push_back(std::move(l));
    n_captured++;
    return CUDA_SUCCESS;
  }
  return enqueue(s, [l = std::move(l)] { return run_launch(l); });
}
// An event is the host clock when the work queued before it has run; recording it again moves
// it to the stream's end.
struct EventMark {
  bool reached = false;
  std::chrono::steady_clock::time_point at;
};
struct Event {
  Stream* stream = nullptr;  // null: never recorded
  uint64_t position = 0;     // its operation on the stream
  std::shared_ptr<EventMark> mark;
};
CUresult cuEventCreate(CUevent* e, unsigned) {
  *e = new Event();
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent e, CUstream s) {
  auto* st = static_cast<Stream*>(s);
  if (!e || !st) return CUDA_ERROR_INVALID_HANDLE;  // (the engine records on its own stream only)
  if (st->capture) return 900;
  auto* ev = static_cast<Event*>(e);
  auto mark = std::make_shared<EventMark>();
  std::lock_guard<std::recursive_mutex> g(queue_mu);
  ev->stream = st;
  ev->mark = mark;
  if (st->pending.empty()) {  // an idle stream: passed at once
    ev->position = st->queued;
    mark->at = std::chrono::steady_clock::now();
    mark->reached = true;
    return CUDA_SUCCESS;
  }
  ev->position = st->queued + 1;
  return enqueue(s, [mark] {
    mark->at = std::chrono::steady_clock::now();
    mark->reached = true;
    return CUDA_SUCCESS;
  });
}
CUresult cuEventQuery(CUevent e) {
  auto* ev = static_cast<Event*>(e);
  if (!ev || !ev->stream) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::recursive_mutex> g(queue_mu);
  return ev->mark->reached ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult cuEventSynchronize(CUevent e) {
  auto* ev = static_cast<Event*>(e);
  if (!ev || !ev->stream) return CUDA_ERROR_INVALID_HANDLE;
  return run_until(ev->stream, ev->position);
}
CUresult cuEventElapsedTime(float* ms, CUevent start, CUevent end) {
  for (CUevent e : {start, end})
    if (CUresult r = cuEventQuery(e)) return r;
  *ms = std::chrono::duration<float, std::milli>(static_cast<Event*>(end)->mark->at -
                                                 static_cast<Event*>(start)->mark->at)
            .count();
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy_v2(CUevent e) {
  delete static_cast<Event*>(e);
  return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult e, const char** s) {
  static const std::map<int, const char*> names = {
      {1, "invalid argument"}, {2, "out of memory"}, {100, "no CUDA-capable device is detected"},
      {101, "invalid device ordinal"}, {200, "device kernel image is invalid"}, {201, "invalid device context"}, {400, "invalid resource handle"},
      {500, "named symbol not found"}, {600, "device not ready"}, {700, "an illegal memory access was encountered"},
      {900, "operation not permitted when stream is capturing"}, {901, "operation failed due to a previous error during capture"},
      {910, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"}};
  auto it = names.find(e);
  *s = it == names.end() ? "unknown error" : it->second;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------- the host compiler

bool on_path(const std::string& exe) {
  if (exe.find('/') != std::string::npos) return access(exe.c_str(), X_OK) == 0;
  const char* path = std::getenv("PATH");
  std::string p = path ? path : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= p.size()) {
    size_t end = p.find(':', start);
    if (end == std::string::npos) end = p.size();
    std::string dir = p.substr(start, end - start);
    if (!dir.empty() && access((dir + "/" + exe).c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

std::string shell_quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

}  // namespace

const CudaEmuInfo& cuda_emu_info() {
  static const CudaEmuInfo info = [] {
    CudaEmuInfo i;
    std::vector<std::string> tried;
    if (const char* e = std::getenv("TINY_EMU_CXX")) tried.emplace_back(e);
    tried.emplace_back(TINY_HOST_CXX);  // the compiler that built the engine
    tried.emplace_back("c++");
    tried.emplace_back("g++");
    for (auto& c : tried)
      if (on_path(c)) {
        i.compiler = c;
        break;
      }
    if (i.compiler.empty()) {
      i.reason = "no host C++ compiler to build kernels with (tried";
      for (auto& c : tried) i.reason += " " + c;
      i.reason += "; set TINY_EMU_CXX)";
    } else if (!memory().base) {
      i.reason = "cannot reserve an address range for device memory";
    }
    i.available = i.reason.empty();
    return i;
  }();
  return info;
}

const cu::Api& cuda_emu_api() {
  static const cu::Api api = [] {
    cu::Api a{};
#define TINY_EMU_FILL(field, symbol) a.field = &symbol;
    TINY_CUDA_API(TINY_EMU_FILL)
#undef TINY_EMU_FILL
    return a;
  }();
  return api;
}

std::string cuda_emu_compile(const std::string& source, const std::vector<EmuKernel>& kernels) {
  const CudaEmuInfo& info = cuda_emu_info();
  if (!info.available) throw std::runtime_error("tiny cuda-emu: " + info.reason);
  std::string tu = std::string(kShim) + "\n" + source + "\n";
  for (auto& k : kernels) {
    tu += "extern \"C\" void tiny_emu_launch_" + k.name +
          "(void** p, unsigned grid, unsigned block, const TinyEmuEnv* env) { tiny_emu_run(&" + k.name +
          ", p, grid, block, " + (k.cooperative ? "1" : "0") + ", env); }\n";
    tu += "extern \"C\" unsigned tiny_emu_nparams_" + k.name + "() { return tiny_emu_nparams(&" + k.name + "); }\n";
  }
  const std::string flags = "-std=c++17 -O1 -ffp-contract=off -w -shared -fPIC";
  static std::mutex mu;
  std::lock_guard<std::mutex> g(mu);
  std::string dir = disk_cache_dir("cuda-emu");
  if (dir.empty()) {  // disk cache off: a folder of this process's own
    static const std::string own = [] {
      char d[] = "/tmp/torch_tiny_emuXXXXXX";
      return std::string(mkdtemp(d) ? d : "/tmp");
    }();
    dir = own;
  }
  std::string stem = dir + "/" + content_hash(tu + info.compiler + flags);
  std::string so = stem + ".so";
  struct stat st;
  if (stat(so.c_str(), &st) == 0) {
    counters().disk_cache_hits += int64_t(kernels.size());  // counted per kernel, like compiles
    return kModulePrefix + so;
  }
  std::string cpp = stem + ".cpp", log = stem + ".log", tmp = so + ".tmp" + std::to_string(::getpid());
  if (!write_file_atomic(cpp, tu)) throw std::runtime_error("tiny cuda-emu: cannot write " + cpp);
  std::string cmd = shell_quote(info.compiler) + " " + flags + " " + shell_quote(cpp) + " -o " + shell_quote(tmp) +
                    " -lm > " + shell_quote(log) + " 2>&1";
  int rc = std::system(cmd.c_str());
  if (rc != 0 || std::rename(tmp.c_str(), so.c_str()) != 0) {
    std::string text;
    read_file(log, text);
    std::remove(tmp.c_str());
    throw std::runtime_error("tiny cuda-emu: building kernels for the host failed (" + cmd + "); the source is " + cpp +
                             "\n" + text.substr(0, 8000));
  }
  std::remove(cpp.c_str());
  std::remove(log.c_str());
  counters().compiles += int64_t(kernels.size());
  return kModulePrefix + so;
}

CudaEmuStats cuda_emu_stats() {
  CudaEmuStats s;
  s.kernel_launches = n_launches;
  s.captured_launches = n_captured;
  s.graph_launches = n_graph_launches;
  s.graph_instantiations = n_instantiations;
  s.graph_updates = n_updates;
  Memory& m = memory();
  std::lock_guard<std::mutex> g(m.mu);
  s.live_allocations = int64_t(m.live.size());
  s.used_bytes = int64_t(m.used);
  return s;
}

}  // namespace tiny
