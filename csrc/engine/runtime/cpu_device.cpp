// The CPU device: aligned host memory under the caching allocator, kernel
// launches split across the thread pool.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/runtime/buffer.h"
#include "engine/runtime/counters.h"
#include "engine/runtime/device.h"
#ifndef TINY_NO_CPU_JIT
#include "engine/runtime/llvm_jit.h"
#endif
#include "engine/runtime/thread_pool.h"

namespace tiny {
namespace {

// MemAvailable and MemTotal from /proc/meminfo (bytes), or the physical pages.
std::pair<int64_t, int64_t> host_memory() {
  int64_t avail = -1, total = -1;
  if (FILE* f = std::fopen("/proc/meminfo", "r")) {
    char key[64];
    long long kb;
    while (std::fscanf(f, "%63s %lld kB", key, &kb) == 2) {
      if (!std::strcmp(key, "MemTotal:")) total = kb * 1024;
      if (!std::strcmp(key, "MemAvailable:")) avail = kb * 1024;
    }
    std::fclose(f);
  }
  if (total < 0) total = int64_t(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  if (avail < 0) avail = int64_t(sysconf(_SC_AVPHYS_PAGES)) * sysconf(_SC_PAGESIZE);
  return {avail, total};
}

std::string cpu_model_name() {
  std::string name = "x86-64 CPU";
  if (FILE* f = std::fopen("/proc/cpuinfo", "r")) {
    char line[512];
    while (std::fgets(line, sizeof line, f)) {
      if (std::strncmp(line, "model name", 10) != 0) continue;
      const char* v = std::strchr(line, ':');
      if (v) {
        name = v + 1;
        while (!name.empty() && (name.front() == ' ' || name.front() == '\t')) name.erase(name.begin());
        while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
      }
      break;
    }
    std::fclose(f);
  }
  return name;
}

class CpuDevice final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::Cpu; }
  std::string name() const override { return "cpu"; }
  DeviceProperties properties() const override {
    DeviceProperties p;
    p.name = cpu_model_name();
#ifdef TINY_NO_CPU_JIT
    p.arch = "none (built without the CPU JIT)";
#else
    const LLVMJit& jit = LLVMJit::get();
    p.arch = jit.cpu_name();
    const std::string& f = jit.cpu_features();
    p.vector_bits = f.find("+avx512f") != std::string::npos ? 512 : f.find("+avx") != std::string::npos ? 256 : 128;
#endif
    p.multiprocessors = thread_pool().size();
    p.total_memory = host_memory().second;
    return p;
  }
  std::pair<int64_t, int64_t> mem_get_info() override { return host_memory(); }

  void copy_in(void* dst, const void* src, size_t nbytes) override { std::memcpy(dst, src, nbytes); }
  void copy_out(void* dst, const void* src, size_t nbytes) override { std::memcpy(dst, src, nbytes); }

  static constexpr int kFineSlicesPerThread = 4;
  void launch(const Program& p, void** args) override {
    // Aim for slices of at least ~32k elements of work so threads pay off.
    int64_t min_slice = std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, p.work_per_item));
    const int per_thread = p.fine_slices ? kFineSlicesPerThread : 1;
    if (p.scratch_bytes == 0) {
      thread_pool().parallel_for(p.parallel_size, min_slice, [&](int64_t b, int64_t e) { p.run(args, b, e); },
                                 p.parallel_grain, per_thread);
      return;
    }
    std::vector<void*> with_scratch(args, args + p.scratch_index);
    std::vector<uint64_t> scratch((p.scratch_bytes + 7) / 8);
    with_scratch.push_back(scratch.data());
    thread_pool().parallel_for(p.parallel_size, min_slice,
                               [&](int64_t b, int64_t e) { p.run(with_scratch.data(), b, e); }, p.parallel_grain);
    p.finish(with_scratch.data());
  }

 protected:
  // Large blocks live on 2 MiB pages (transparent huge pages, where the kernel allows them
  // for madvised memory): a kernel streaming through tens of MiB on 4 KiB pages misses the
  // TLB every 4 KiB, which on a virtual machine's nested page tables costs up to half the
  // bandwidth (a sum over 64 MiB on one core of an AMD EPYC VM: 4.3 ms, 2.3 on huge pages).
  // From 4 MiB up, blocks round to whole huge pages, so the waste stays under a third.
  static constexpr size_t kHugePage = size_t(2) << 20;
  size_t granularity(size_t nbytes) const override { return nbytes >= 2 * kHugePage ? kHugePage : 64; }
  void* raw_alloc(size_t nbytes) override {
    // Linux overcommits: a block bigger than the memory available would be
    // granted and then kill the process when touched. Refuse it here instead.
    if (nbytes >= (size_t(256) << 20) && int64_t(nbytes) > host_memory().first) return nullptr;
    if (nbytes < 2 * kHugePage) return std::aligned_alloc(64, nbytes);
    void* p = std::aligned_alloc(kHugePage, nbytes);  // nbytes is a multiple (granularity)
    if (p) madvise(p, nbytes, MADV_HUGEPAGE);          // advice only: failure leaves 4 KiB pages
    return p;
  }
  void raw_free(void* ptr, size_t) override { std::free(ptr); }
};

}  // namespace

Device* cpu_device() {
  static CpuDevice* d = new CpuDevice();  // never destroyed: buffers may outlive statics
  return d;
}

// A block is the allocator's: its size sits in a 64-byte header before the memory handed out.
// Out of memory, a kernel cannot take an exception through the JIT's frames: plain malloc
// then, and a message before the abort where that fails too.
void* kernel_scratch_alloc(int64_t bytes) {
  constexpr size_t kHeader = 64;
  const size_t total = size_t(std::max<int64_t>(bytes, 0)) + kHeader;
  void* block = nullptr;
  try {
    block = cpu_device()->alloc(total);
  } catch (...) {
    block = std::aligned_alloc(64, (total + 63) / 64 * 64);
    if (!block) {
      std::fprintf(stderr, "tiny: out of memory for a kernel's %zu-byte scratch buffer\n", total);
      std::abort();
    }
    *static_cast<size_t*>(block) = 0;  // 0: malloc'ed
    return static_cast<char*>(block) + kHeader;
  }
  *static_cast<size_t*>(block) = total;
  return static_cast<char*>(block) + kHeader;
}

void kernel_scratch_free(void* p) {
  if (!p) return;
  char* block = static_cast<char*>(p) - 64;
  const size_t total = *reinterpret_cast<size_t*>(block);
  if (total == 0) std::free(block);
  else cpu_device()->free(block, total);
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
  if (base_) return static_cast<char*>(base_->ptr()) + byte_offset_;
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
