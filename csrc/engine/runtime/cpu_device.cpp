// The CPU device: a caching allocator over aligned host memory and kernel
// launches split across the thread pool.
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>
#include <mutex>

#include "engine/runtime/buffer.h"
#include "engine/runtime/counters.h"
#include "engine/runtime/device.h"
#include "engine/runtime/thread_pool.h"

namespace tiny {
namespace {

class CpuDevice final : public Device {
 public:
  ~CpuDevice() override {
    for (auto& [size, p] : cache_) std::free(p);
  }
  std::string name() const override { return "cpu"; }

  void* alloc(size_t nbytes) override {
    size_t size = round_up(nbytes);
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = cache_.find(size);
      if (it != cache_.end()) {
        void* p = it->second;
        cached_bytes_ -= size;
        cache_.erase(it);
        return p;
      }
    }
    void* p = std::aligned_alloc(64, size);
    if (!p) {
      release_cache();
      p = std::aligned_alloc(64, size);
      if (!p) throw std::bad_alloc();
    }
    return p;
  }

  void free(void* ptr, size_t nbytes) override {
    size_t size = round_up(nbytes);
    std::lock_guard<std::mutex> g(mu_);
    // Keep freed blocks for reuse: a training step frees and allocates the
    // same sizes every iteration. Bound the cache so memory goes back.
    if (cached_bytes_ + size > kMaxCachedBytes) {
      std::free(ptr);
      return;
    }
    cache_.emplace(size, ptr);
    cached_bytes_ += size;
  }

  void copy_in(void* dst, const void* src, size_t nbytes) override { std::memcpy(dst, src, nbytes); }
  void copy_out(void* dst, const void* src, size_t nbytes) override { std::memcpy(dst, src, nbytes); }

  void launch(const Program& p, void** buffers) override {
    // Aim for slices of at least ~32k elements of work so threads pay off.
    int64_t min_slice = std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, p.work_per_item));
    if (p.scratch_bytes == 0) {
      thread_pool().parallel_for(p.parallel_size, min_slice, [&](int64_t b, int64_t e) { p.run(buffers, b, e); });
      return;
    }
    std::vector<void*> args(buffers, buffers + p.scratch_index);
    std::vector<uint64_t> scratch((p.scratch_bytes + 7) / 8);
    args.push_back(scratch.data());
    thread_pool().parallel_for(p.parallel_size, min_slice, [&](int64_t b, int64_t e) { p.run(args.data(), b, e); });
    p.finish(args.data());
  }

 private:
  static size_t round_up(size_t n) {
    if (n == 0) n = 1;
    return (n + 63) & ~size_t(63);
  }
  void release_cache() {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [size, p] : cache_) std::free(p);
    cache_.clear();
    cached_bytes_ = 0;
  }
  static constexpr size_t kMaxCachedBytes = size_t(4) << 30;
  std::mutex mu_;
  std::multimap<size_t, void*> cache_;
  size_t cached_bytes_ = 0;
};

}  // namespace

Device* cpu_device() {
  static CpuDevice* d = new CpuDevice();  // never destroyed: buffers may outlive statics
  return d;
}

Counters& counters() {
  static Counters c;
  return c;
}

int debug_level() {
  static int level = [] {
    const char* s = std::getenv("TINY_DEBUG");
    return s ? std::atoi(s) : 0;
  }();
  return level;
}

Buffer::~Buffer() {
  if (ptr_) device_->free(ptr_, nbytes());
}

void* Buffer::ptr() {
  if (base_) return base_->ptr();
  if (!ptr_) ptr_ = device_->alloc(nbytes());
  return ptr_;
}

void Buffer::copy_in(const void* src, size_t nbytes, size_t offset) {
  device_->copy_in(static_cast<char*>(ptr()) + offset, src, nbytes);
  counters().copies_in++;
  counters().bytes_in += int64_t(nbytes);
}

void Buffer::copy_out(void* dst, size_t nbytes, size_t offset) {
  device_->copy_out(dst, static_cast<char*>(ptr()) + offset, nbytes);
  counters().copies_out++;
  counters().bytes_out += int64_t(nbytes);
}

}  // namespace tiny
