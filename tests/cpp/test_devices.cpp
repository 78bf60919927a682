// Realize through a device: the emulated CUDA device computes what the CPU
// computes through the whole engine path (schedule, programs, device memory,
// copies), a cached schedule replays as a CUDA graph, the caching allocator's
// statistics follow the buffers, running out of memory is an error the device
// survives, and device memory cannot be reached from the host.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "engine/runtime/buffer.h"
#include "engine/runtime/counters.h"
#include "engine/runtime/cuda_device.h"
#include "engine/runtime/cuda_driver.h"
#include "engine/runtime/cuda_emu.h"
#include "engine/runtime/thread_pool.h"
#include "engine/schedule/realize.h"
#include "engine/tensor/tensor.h"

using namespace tiny;

namespace {

Device& emu() {
  Device* d = cuda_emu_device();
  if (!d) throw std::runtime_error("no emulated device: " + cuda_emu_info().reason);
  return *d;
}

std::vector<float> values(int64_t n, float scale, float shift) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; i++) v[size_t(i)] = std::sin(float(i) * scale) * 3.0f + shift;
  return v;
}

// Builds a graph on `d` from host data, realizes it there and copies it back.
template <typename Build>
std::vector<float> compute_on(Device& d, Build build) {
  Tensor t = build(d).contiguous();
  realize_nodes({t.node()}, d);
  std::vector<float> out(size_t(t.numel()));
  t.node()->realized()->copy_out(out.data(), out.size() * sizeof(float));
  return out;
}

void expect_close(const std::vector<float>& want, const std::vector<float>& got, float tol) {
  ASSERT_EQ(want.size(), got.size());
  for (size_t i = 0; i < want.size(); i++) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
      continue;
    }
    EXPECT_NEAR(got[i], want[i], tol * (1.0f + std::fabs(want[i]))) << i;
  }
}

}  // namespace

// Jobs back to back, some of them short: every index of every job runs exactly once, on
// whichever thread took its slice (a worker waking late takes nothing of a later job before
// it is published, and the caller does not return before the last slice is done).
TEST(Devices, ThreadPoolRunsEveryIndexOfBackToBackJobsOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(4096);
  for (int job = 0; job < 3000; job++) {
    const int64_t n = 1 + job % 4096, grain = 1 + job % 7;
    pool.parallel_for(n, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; i++) hits[size_t(i)].fetch_add(1);
    }, grain, 1 + job % 5);
    for (int64_t i = 0; i < 4096; i++) {
      int want = i < n ? 1 : 0;
      ASSERT_EQ(hits[size_t(i)].exchange(0), want) << "job " << job << " index " << i;
    }
  }
}

// The CPU device times a kernel's first runs split over its threads and alone, then keeps
// the faster way: every run computes the same values, bit for bit (slices own disjoint
// outputs; a split reduce's chunks combine in one order however many threads ran them).
TEST(Devices, CpuKernelsComputeTheSameSplitOrAlone) {
  Device& d = *cpu_device();
  const int64_t n = (int64_t(1) << 20) + 3;
  std::vector<float> x0 = values(n, 0.001f, 0.25f);
  Tensor x = Tensor::from_host(x0.data(), {n}, DType::Float32, d);
  std::vector<float> first_y;
  float first_sum = 0;
  for (int run = 0; run < 10; run++) {  // through the trial runs and past them
    Tensor p = Tensor::param({n}, Scalar::from_double(0.5), DType::Float32);
    Tensor y = x.binary(Op::Mul, p);
    Tensor sum = y.reduce(ReduceOp::Sum, {0}, false);
    realize_nodes({y.node()}, d);  // one kernel each, run as the host waits: split or alone
    realize_nodes({sum.node()}, d);
    std::vector<float> yv(static_cast<size_t>(n));
    y.node()->realized()->copy_out(yv.data(), yv.size() * sizeof(float));
    float sv = 0;
    sum.node()->realized()->copy_out(&sv, sizeof(float));
    if (run == 0) {
      first_y = yv;
      first_sum = sv;
      double want = 0;
      for (float v : x0) want += 0.5 * double(v);
      EXPECT_NEAR(sv, want, 1e-4 * std::fabs(want) + 1e-2);
      for (int64_t i = 0; i < n; i += 4099) EXPECT_EQ(yv[size_t(i)], 0.5f * x0[size_t(i)]) << i;
      continue;
    }
    EXPECT_EQ(std::memcmp(&sv, &first_sum, sizeof(float)), 0) << "run " << run;
    EXPECT_EQ(yv, first_y) << "run " << run;
  }
}

TEST(Devices, EmulatedDeviceComputesWhatTheCpuComputes) {
  std::vector<float> a = values(6 * 40, 0.37f, 0.1f), b = values(40 * 9, 0.11f, -0.2f);
  std::vector<int64_t> at = {5, 0, 239, 17, 17, 100};
  auto build = [&](Device& d) {
    Tensor x = Tensor::from_host(a.data(), {6, 40}, DType::Float32, d);
    Tensor w = Tensor::from_host(b.data(), {40, 9}, DType::Float32, d);
    Tensor idx = Tensor::from_host(at.data(), {6, 1}, DType::Int64, d);
    // softmax over rows, a matmul, a gather, random numbers and a launch-time scalar
    Tensor m = x.reduce(ReduceOp::Max, {1}, true).expand({6, 40});
    Tensor e = x.binary(Op::Sub, m).unary(Op::Exp);
    Tensor sm = e.binary(Op::Div, e.reduce(ReduceOp::Sum, {1}, true).expand({6, 40}));
    Tensor y = sm.matmul(w);                                     // (6, 9)
    Tensor g = x.reshape({240}).gather(idx).expand({6, 9});     // a data-dependent read
    Tensor r = Tensor::rand({6, 9}, 1234, 56);
    Tensor p = Tensor::param({6, 9}, Scalar::from_double(0.75), DType::Float32);
    return y.binary(Op::Add, g.binary(Op::Mul, p)).binary(Op::Add, r);
  };
  std::vector<float> cpu = compute_on(*cpu_device(), build);
  std::vector<float> gpu = compute_on(emu(), build);
  expect_close(cpu, gpu, 1e-5f);
}

TEST(Devices, ASchedulesInputsLiveOnItsDevice) {
  std::vector<float> a = values(8, 1.0f, 0.0f);
  Tensor x = Tensor::from_host(a.data(), {8}, DType::Float32, *cpu_device());
  Tensor y = x.binary(Op::Mul, x);
  EXPECT_THROW(realize_nodes({y.node()}, emu()), std::logic_error);
}

TEST(Devices, CachedScheduleReplaysAsACudaGraph) {
  Device& d = emu();
  const int64_t n = 1000;
  std::vector<float> w0 = values(n, 0.01f, 1.0f), g0 = values(n, 0.02f, 0.0f);
  Tensor w = Tensor::from_host(w0.data(), {n}, DType::Float32, d);
  Tensor g = Tensor::from_host(g0.data(), {n}, DType::Float32, d);
  // an SGD-like step whose learning rate is a launch word
  auto step = [&](double lr) {
    Tensor out = w.binary(Op::Sub, g.binary(Op::Mul, Tensor::param({n}, Scalar::from_double(lr), DType::Float32)));
    realize_nodes({out.node()}, d);
    std::vector<float> v(static_cast<size_t>(n));
    out.node()->realized()->copy_out(v.data(), v.size() * sizeof(float));
    for (int64_t i = 0; i < n; i += 97) EXPECT_FLOAT_EQ(v[size_t(i)], w0[size_t(i)] - g0[size_t(i)] * float(lr)) << lr;
  };
  auto builds = [] { return counters().compiles + counters().disk_cache_hits; };
  int64_t built = builds(), hits = counters().schedule_cache_hits;
  step(0.5);  // scheduled and compiled
  CudaEmuStats s0 = cuda_emu_stats();
  step(0.25);  // replay: launched one by one
  CudaEmuStats s1 = cuda_emu_stats();
  EXPECT_EQ(s1.graph_instantiations, s0.graph_instantiations);
  EXPECT_EQ(s1.kernel_launches, s0.kernel_launches + 1);
  step(0.125);  // second replay: captured and instantiated once
  CudaEmuStats s2 = cuda_emu_stats();
  EXPECT_EQ(s2.graph_instantiations, s1.graph_instantiations + 1);
  EXPECT_EQ(s2.graph_launches, s1.graph_launches + 1);
  step(0.0625);  // a new learning rate: the graph is updated in place, not instantiated again
  CudaEmuStats s3 = cuda_emu_stats();
  EXPECT_EQ(s3.graph_instantiations, s2.graph_instantiations);
  EXPECT_EQ(s3.graph_updates, s2.graph_updates + 1);
  EXPECT_EQ(s3.graph_launches, s2.graph_launches + 1);
  step(0.0625);  // the same buffers and words: the graph is launched as it is, nothing captured
  CudaEmuStats s4 = cuda_emu_stats();
  EXPECT_EQ(s4.captured_launches, s3.captured_launches);
  EXPECT_EQ(s4.graph_launches, s3.graph_launches + 1);
  EXPECT_EQ(builds(), built + 1);  // one program for every learning rate
  EXPECT_EQ(counters().schedule_cache_hits, hits + 4);
}

// The emulated device runs queued work when the host waits for it, as a GPU runs it behind the
// host's back: a read on the legacy stream that does not wait sees the memory as it was.
TEST(Devices, EmulatedStreamsRunTheirWorkWhenWaitedFor) {
  using namespace cu;
  emu();
  const cu::Api& api = cuda_emu_api();
  CUstream stream = nullptr;
  ASSERT_EQ(api.StreamCreate(&stream, 0), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(api.MemAlloc(&p, 16), CUDA_SUCCESS);
  const float before[4] = {1, 2, 3, 4}, after[4] = {5, 6, 7, 8};
  float got[4] = {};
  ASSERT_EQ(api.MemcpyHtoDAsync(p, before, sizeof before, stream), CUDA_SUCCESS);
  ASSERT_EQ(api.StreamSynchronize(stream), CUDA_SUCCESS);
  CUevent queued = nullptr;
  ASSERT_EQ(api.EventCreate(&queued, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.MemcpyHtoDAsync(p, after, sizeof after, stream), CUDA_SUCCESS);
  ASSERT_EQ(api.EventRecord(queued, stream), CUDA_SUCCESS);
  EXPECT_EQ(api.EventQuery(queued), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(api.MemcpyDtoH(got, p, sizeof got), CUDA_SUCCESS);  // does not wait
  EXPECT_EQ(std::vector<float>(got, got + 4), std::vector<float>(before, before + 4));
  ASSERT_EQ(api.EventSynchronize(queued), CUDA_SUCCESS);
  EXPECT_EQ(api.EventQuery(queued), CUDA_SUCCESS);
  ASSERT_EQ(api.MemcpyDtoH(got, p, sizeof got), CUDA_SUCCESS);
  EXPECT_EQ(std::vector<float>(got, got + 4), std::vector<float>(after, after + 4));
  api.EventDestroy(queued);
  api.MemFree(p);
}

// A replayed schedule whose first kernel's result the host reads (a training step's loss) is
// captured again in two graphs, an event between them, and the read waits for the first only;
// the values stay those of each step (a wait on a mark set too early reads the previous step's).
TEST(Devices, AReadWaitsForItsWritersPartOfAReplay) {
  Device& d = emu();
  const int64_t n = 1000;
  std::vector<float> w0 = values(n, 0.01f, 1.0f), g0 = values(n, 0.02f, 0.0f);
  Tensor w = Tensor::from_host(w0.data(), {n}, DType::Float32, d);
  Tensor g = Tensor::from_host(g0.data(), {n}, DType::Float32, d);
  double w_sum = 0;
  for (float v : w0) w_sum += v;
  auto step = [&](double lr) {
    // the loss, a sum every element of the update reads (its own kernel, first)
    Tensor loss = w.binary(Op::Mul, Tensor::param({n}, Scalar::from_double(lr), DType::Float32))
                      .reduce(ReduceOp::Sum, {0}, true);
    Tensor update = w.binary(Op::Sub, g.binary(Op::Mul, loss.expand({n})));
    realize_nodes({loss.node(), update.node()}, d);
    float l = 0;
    loss.node()->realized()->copy_out(&l, sizeof l);
    EXPECT_NEAR(l, w_sum * lr, 1e-3 * std::abs(w_sum * lr)) << lr;
    std::vector<float> v(static_cast<size_t>(n));
    update.node()->realized()->copy_out(v.data(), v.size() * sizeof(float));
    for (int64_t i = 0; i < n; i += 97) EXPECT_NEAR(v[size_t(i)], w0[size_t(i)] - g0[size_t(i)] * l, 1e-4) << lr;
  };
  step(0.5);   // scheduled: two kernels
  step(0.25);  // replayed one by one
  int64_t early = counters().copies_out_early;
  CudaEmuStats s0 = cuda_emu_stats();
  step(0.125);  // captured whole; the loss's read waits for all of it, and says where it read
  CudaEmuStats s1 = cuda_emu_stats();
  EXPECT_EQ(s1.graph_launches, s0.graph_launches + 1);
  EXPECT_EQ(counters().copies_out_early, early);
  step(0.0625);  // captured again in two segments: the read waits for the first
  CudaEmuStats s2 = cuda_emu_stats();
  EXPECT_EQ(s2.graph_launches, s1.graph_launches + 2);
  EXPECT_EQ(s2.graph_instantiations, s1.graph_instantiations + 2);
  EXPECT_EQ(counters().copies_out_early, early + 1);
  step(0.03125);  // new words: both segments updated in place
  CudaEmuStats s3 = cuda_emu_stats();
  EXPECT_EQ(s3.graph_instantiations, s2.graph_instantiations);
  EXPECT_EQ(s3.graph_updates, s2.graph_updates + 2);
  EXPECT_EQ(counters().copies_out_early, early + 2);
}

TEST(Devices, MemoryStatisticsFollowTheBuffers) {
  for (Device* d : {cpu_device(), &emu()}) {
    SCOPED_TRACE(d->name());
    d->empty_cache();
    MemoryStats s0 = d->memory_stats();
    EXPECT_EQ(s0.reserved, s0.allocated);  // nothing cached after empty_cache
    d->reset_peak_memory_stats();
    {
      Buffer b(d, DType::Float32, 1 << 20);  // 4 MiB, allocated on first use
      EXPECT_EQ(d->memory_stats().allocated, s0.allocated);
      b.ptr();
      MemoryStats s1 = d->memory_stats();
      EXPECT_EQ(s1.allocated, s0.allocated + (4 << 20));
      EXPECT_EQ(s1.peak_allocated, s1.allocated);
      EXPECT_GE(s1.reserved, s1.allocated);
      EXPECT_EQ(s1.allocations, s0.allocations + 1);
    }
    MemoryStats s2 = d->memory_stats();
    EXPECT_EQ(s2.allocated, s0.allocated);          // freed ...
    EXPECT_EQ(s2.reserved, s0.reserved + (4 << 20));  // ... into the cache
    EXPECT_EQ(s2.peak_allocated, s0.allocated + (4 << 20));
    {
      Buffer b(d, DType::Int32, 1 << 20);  // the same size: the cached block
      b.ptr();
      EXPECT_EQ(d->memory_stats().device_allocations, s2.device_allocations);
    }
    d->empty_cache();
    EXPECT_EQ(d->memory_stats().reserved, s0.reserved);
    d->reset_peak_memory_stats();
    EXPECT_EQ(d->memory_stats().peak_allocated, s0.allocated);
    auto [free_b, total] = d->mem_get_info();
    EXPECT_GT(total, 0);
    EXPECT_LE(free_b, total);
  }
}

TEST(Devices, LargeCpuBlocksAreWholeHugePages) {
  Device* d = cpu_device();
  d->empty_cache();
  constexpr int64_t kHuge = int64_t(2) << 20;
  MemoryStats s0 = d->memory_stats();
  {
    Buffer large(d, DType::Float32, (5 << 20) / 4 + 1);  // 5 MiB and 4 bytes: three huge pages
    EXPECT_EQ(reinterpret_cast<uintptr_t>(large.ptr()) % kHuge, 0u);
    EXPECT_EQ(d->memory_stats().allocated, s0.allocated + 3 * kHuge);
    Buffer below(d, DType::Float32, (4 << 20) / 4 - 16);  // under 4 MiB: 64-byte blocks
    EXPECT_EQ(reinterpret_cast<uintptr_t>(below.ptr()) % 64, 0u);
    EXPECT_EQ(d->memory_stats().allocated, s0.allocated + 3 * kHuge + (4 << 20) - 64);
  }
  {
    Buffer reuse(d, DType::Float32, (6 << 20) / 4);  // the same three pages: the cached block
    reuse.ptr();
    EXPECT_EQ(d->memory_stats().device_allocations, s0.device_allocations + 2);
  }
  d->empty_cache();
}

// A CPU kernel's scratch (a matmul's packed panels) is a block of the caching allocator: a
// second run of the kernel takes the block the first one gave back, nothing new from the system.
TEST(Devices, CpuKernelScratchComesFromTheCachingAllocator) {
  Device* d = cpu_device();
  d->empty_cache();
  MemoryStats s0 = d->memory_stats();
  void* p = kernel_scratch_alloc(3 << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
  EXPECT_GE(d->memory_stats().allocated, s0.allocated + (3 << 20));
  std::memset(p, 1, 3 << 20);
  kernel_scratch_free(p);
  EXPECT_EQ(d->memory_stats().allocated, s0.allocated);
  void* again = kernel_scratch_alloc(3 << 20);
  EXPECT_EQ(again, p);
  kernel_scratch_free(again);
  kernel_scratch_free(nullptr);
  // through a kernel: a matmul whose b is packed into panels, run twice
  std::vector<float> a(64 * 256, 0.5f), b(256 * 512, 0.25f);
  auto run = [&] {
    Tensor x = Tensor::from_host(a.data(), {64, 256}, DType::Float32, *d);
    Tensor y = Tensor::from_host(b.data(), {256, 512}, DType::Float32, *d);
    std::vector<float> out(64 * 512);
    x.matmul(y).contiguous().copy_to_host(out.data());
    EXPECT_FLOAT_EQ(out[0], 256 * 0.125f);
  };
  // The first run schedules and launches through the queue (its kernel may run on fewer
  // threads, so fewer panels alive at once); from the second on, the cached one-kernel
  // schedule runs on the caller, every run alike.
  run();
  run();
  MemoryStats s1 = d->memory_stats();
  for (int i = 0; i < 4; i++) run();
  EXPECT_GT(d->memory_stats().allocations, s1.allocations);  // the buffers and the panels
  // served from the cache: at most one block more per thread whose panels were alive at once
  // with another's in a later run but not in the first (which threads overlap is timing)
  EXPECT_LE(d->memory_stats().device_allocations, s1.device_allocations + int64_t(thread_pool().size()) - 1);
  d->empty_cache();
}

TEST(Devices, OutOfMemoryIsAnErrorTheDeviceSurvives) {
  for (Device* d : {cpu_device(), &emu()}) {
    SCOPED_TRACE(d->name());
    int64_t total = d->mem_get_info().second;
    int64_t ooms = d->memory_stats().ooms;
    Buffer huge(d, DType::Float32, 2 * total / 4 + 1024);  // twice the device's memory
    try {
      huge.ptr();
      ADD_FAILURE() << "allocating twice the device's memory must fail";
    } catch (const OutOfMemoryError& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("out of memory"), std::string::npos) << m;
      EXPECT_NE(m.find("Tried to allocate"), std::string::npos) << m;
      EXPECT_NE(m.find(d->name()), std::string::npos) << m;
    }
    EXPECT_EQ(d->memory_stats().ooms, ooms + 1);
    EXPECT_FALSE(huge.allocated());
    // everything else still works
    std::vector<float> a = values(64, 0.3f, 0.0f);
    std::vector<float> got = compute_on(*d, [&](Device& dev) {
      return Tensor::from_host(a.data(), {64}, DType::Float32, dev).unary(Op::Neg);
    });
    for (size_t i = 0; i < a.size(); i++) EXPECT_EQ(got[i], -a[i]);
  }
}

TEST(Devices, PinnedHostMemory) {
  for (Device* d : {cpu_device(), &emu()}) {
    SCOPED_TRACE(d->name());
    const size_t n = 5000;
    auto* p = static_cast<float*>(d->host_alloc(n * sizeof(float)));
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
    EXPECT_TRUE(d->host_pinned(p));
    EXPECT_TRUE(d->host_pinned(p + n - 1));
    EXPECT_FALSE(d->host_pinned(p + n + 4096));
    std::vector<float> pageable(n);
    EXPECT_FALSE(d->host_pinned(pageable.data()));
    for (size_t i = 0; i < n; i++) p[i] = float(i) * 0.5f;
    Buffer b(d, DType::Float32, int64_t(n));
    b.copy_in(p, n * sizeof(float));
    std::fill(p, p + n, -1.0f);  // the copy has finished reading the source
    std::vector<float> back(n);
    b.copy_out(back.data(), n * sizeof(float));
    for (size_t i = 0; i < n; i++) ASSERT_EQ(back[i], float(i) * 0.5f);
    d->host_free(p);
    EXPECT_FALSE(d->host_pinned(p));
  }
}

TEST(Devices, EventsMarkTheQueueAndTimeTheWorkBetween) {
  std::vector<float> a = values(64 * 64, 0.3f, 0.0f);
  for (Device* d : {cpu_device(), &emu()}) {
    SCOPED_TRACE(d->name());
    std::unique_ptr<DeviceEvent> start = d->record_event();
    Tensor x = Tensor::from_host(a.data(), {64, 64}, DType::Float32, *d);
    Tensor y = x.matmul(x).unary(Op::Exp).reduce(ReduceOp::Sum, {0, 1}, false);
    realize_nodes({y.node()}, *d);
    std::unique_ptr<DeviceEvent> end = d->record_event();
    end->wait();
    EXPECT_TRUE(start->complete());
    EXPECT_TRUE(end->complete());
    double ms = start->ms_until(*end);
    EXPECT_GT(ms, 0.0);  // a 64^3 matmul lies between them
    EXPECT_LT(ms, 60e3);
    EXPECT_DOUBLE_EQ(end->ms_until(*start), -ms);
  }
  std::unique_ptr<DeviceEvent> on_cpu = cpu_device()->record_event();
  std::unique_ptr<DeviceEvent> on_emu = emu().record_event();
  EXPECT_THROW(on_cpu->ms_until(*on_emu), std::invalid_argument);
  EXPECT_THROW(on_emu->ms_until(*on_cpu), std::invalid_argument);
}

TEST(DevicesDeathTest, EmulatedDeviceMemoryIsUnreachableFromTheHost) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Buffer b(&emu(), DType::Float32, 16);
  std::vector<float> ones(16, 1.0f);
  b.copy_in(ones.data(), sizeof(float) * 16);  // through the device's copy: fine
  std::vector<float> back(16);
  b.copy_out(back.data(), sizeof(float) * 16);
  EXPECT_EQ(back, ones);
  volatile float* device_pointer = static_cast<float*>(b.ptr());
  EXPECT_DEATH({ float v = device_pointer[0]; (void)v; }, "");  // a host read faults
}
