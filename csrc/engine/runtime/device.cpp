// What every device shares: the caching allocator and its statistics, the
// default launch of a replayed sequence, and the choice of the compute device.
#include "engine/runtime/device.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "engine/runtime/cuda_device.h"
#include "engine/runtime/launch_queue.h"
#include "engine/runtime/nvrtc.h"

namespace tiny {

const char* device_kind_name(DeviceKind k) {
  switch (k) {
    case DeviceKind::Cpu: return "cpu";
    case DeviceKind::Cuda: return "cuda";
    case DeviceKind::CudaEmu: return "cuda-emu";
  }
  return "?";
}

namespace {

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    u++;
  }
  char s[32];
  std::snprintf(s, sizeof s, u ? "%.2f %s" : "%.0f %s", b, units[u]);
  return s;
}

std::atomic<OutOfMemoryHandler> oom_handler{nullptr};

}  // namespace

void set_out_of_memory_handler(OutOfMemoryHandler handler) { oom_handler = handler; }

size_t Device::round_up(size_t n) const {
  if (n == 0) n = 1;
  size_t g = granularity(n);
  return (n + g - 1) / g * g;
}

void* Device::alloc(size_t nbytes, Use use) {
  size_t size = round_up(nbytes);
  auto count = [&](bool fresh) {  // under mu_
    stats_.allocations++;
    stats_.allocated += int64_t(size);
    stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
    if (fresh) {
      stats_.device_allocations++;
      stats_.reserved += int64_t(size);
      stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
    }
  };
  {
    std::lock_guard<std::mutex> g(mu_);
    auto& cache = cache_[int(use)];
    auto it = cache.find(size);
    if (it != cache.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      cached_bytes_ -= size;
      count(false);
      return p;
    }
  }
  void* p = raw_alloc(size);
  // Memory held for reuse goes back, then one more try. Queued work may still use cached
  // blocks (their buffers died after it was queued): wait for it first. Not on a thread that
  // runs queued work (a kernel's scratch), which cannot wait for what comes after it.
  if (!p && !LaunchQueue::running_here()) {
    synchronize();
    std::lock_guard<std::mutex> g(mu_);
    release_cache_locked();
    stats_.cache_flushes++;
  }
  if (!p) p = raw_alloc(size);
  std::lock_guard<std::mutex> g(mu_);
  if (!p) {
    stats_.ooms++;
    auto [free_b, total_b] = mem_get_info();
    std::string msg = "tiny: out of memory on " + name() + ". Tried to allocate " + human_bytes(double(size)) +
                      "; the device has " + human_bytes(double(total_b)) + " in all, " + human_bytes(double(free_b)) +
                      " free; tiny holds " + human_bytes(double(stats_.allocated)) + " in live buffers and " +
                      human_bytes(double(cached_bytes_)) + " cached.";
    if (OutOfMemoryHandler h = oom_handler.load()) h(msg);
    throw OutOfMemoryError(msg);
  }
  count(true);
  return p;
}

void Device::free(void* ptr, size_t nbytes, Use use) {
  size_t size = round_up(nbytes);
  {
    std::lock_guard<std::mutex> g(mu_);
    stats_.frees++;
    stats_.allocated -= int64_t(size);
    // Keep freed blocks for reuse: a training step frees and allocates the
    // same sizes every iteration. Bound the cache so memory goes back.
    if (cached_bytes_ + size <= max_cached_bytes()) {
      cache_[int(use)][size].push_back(ptr);
      cached_bytes_ += size;
      return;
    }
    stats_.reserved -= int64_t(size);
  }
  synchronize();  // work queued before the buffer died may still use its memory
  raw_free(ptr, size);
}

void Device::release_cache_locked() {
  for (auto& cache : cache_) {
    for (auto& [size, blocks] : cache)
      for (void* p : blocks) raw_free(p, size);
    cache.clear();
  }
  stats_.reserved -= int64_t(cached_bytes_);
  cached_bytes_ = 0;
}

MemoryStats Device::memory_stats() {
  std::lock_guard<std::mutex> g(mu_);
  return stats_;
}

void Device::reset_peak_memory_stats() {
  std::lock_guard<std::mutex> g(mu_);
  stats_.peak_allocated = stats_.allocated;
  stats_.peak_reserved = stats_.reserved;
}

void Device::empty_cache() {
  synchronize();  // queued work may still use cached blocks
  std::lock_guard<std::mutex> g(mu_);
  release_cache_locked();
}

namespace {
struct HostClockEvent final : DeviceEvent {
  std::chrono::steady_clock::time_point at = std::chrono::steady_clock::now();
  bool complete() override { return true; }
  void wait() override {}
  double ms_until(DeviceEvent& end) override {
    auto* e = dynamic_cast<HostClockEvent*>(&end);
    if (!e) throw std::invalid_argument("elapsed time between events of different devices");
    return std::chrono::duration<double, std::milli>(e->at - at).count();
  }
};
}  // namespace

std::unique_ptr<DeviceEvent> Device::record_event() {
  synchronize();
  return std::make_unique<HostClockEvent>();
}

void Device::launch_all(std::vector<LaunchStep>& steps, std::unique_ptr<ReplayState>*) {
  for (auto& s : steps) launch(std::move(s));
}

// ---------------------------------------------------------------- the compute device

namespace {

struct Choice {
  Device* device = nullptr;
  std::string error;
};

Choice choose() {
  const char* env = std::getenv("TINY_DEVICE");
  std::string want = env && *env ? env : "auto";
  Choice c;
  if (want == "cpu") {
    c.device = cpu_device();
  } else if (want == "cuda-emu") {
    c.device = cuda_emu_device();
    if (!c.device) c.error = "TINY_DEVICE=cuda-emu: the emulated CUDA device cannot run: " + cuda_emu_info().reason;
  } else if (want == "cuda" || want == "auto") {
    bool gpu = cuda_available(), compiler = nvrtc_available();
    if (gpu && compiler) c.device = cuda_device();
#ifdef TINY_NO_CPU_JIT
    else if (want == "auto") c.device = cuda_emu_device();  // no CPU JIT: the CPU cannot compile kernels
#else
    else if (want == "auto") c.device = cpu_device();
#endif
    else if (!gpu) c.error = "TINY_DEVICE=cuda: no usable GPU: " + cuda_info().reason;
    else c.error = "TINY_DEVICE=cuda: the GPU is there but NVRTC is not: " + nvrtc_info().reason;
  } else {
    c.error = "TINY_DEVICE must be cpu, cuda, cuda-emu or auto, not '" + want + "'";
  }
  if (!c.device && c.error.empty())
    c.error = "no device can run kernels: no usable GPU (" + cuda_info().reason +
              "), no CPU JIT in this build, and the emulated GPU cannot run (" + cuda_emu_info().reason + ")";
  return c;
}

}  // namespace

Device& compute_device() {
  static const Choice choice = choose();
  if (!choice.device) throw std::runtime_error("tiny: " + choice.error);
  return *choice.device;
}

void* Device::raw_host_alloc(size_t nbytes) {
  return std::aligned_alloc(4096, (nbytes + 4095) / 4096 * 4096);
}

void Device::raw_host_free(void* p) { std::free(p); }

void* Device::host_alloc(size_t nbytes) {
  void* p = raw_host_alloc(std::max<size_t>(nbytes, 1));
  if (!p) throw OutOfMemoryError("tiny: could not allocate " + std::to_string(nbytes) + " bytes of pinned host memory on " + name());
  std::lock_guard<std::mutex> g(host_mu_);
  pinned_[reinterpret_cast<uintptr_t>(p)] = std::max<size_t>(nbytes, 1);
  return p;
}

void Device::host_free(void* p) {
  if (!p) return;
  {
    std::lock_guard<std::mutex> g(host_mu_);
    pinned_.erase(reinterpret_cast<uintptr_t>(p));
  }
  raw_host_free(p);
}

bool Device::host_pinned(const void* p) {
  auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> g(host_mu_);
  auto it = pinned_.upper_bound(a);
  if (it == pinned_.begin()) return false;
  --it;
  return a < it->first + it->second;
}

}  // namespace tiny
