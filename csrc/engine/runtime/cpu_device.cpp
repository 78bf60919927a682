// The CPU device: aligned host memory under the caching allocator, kernel
// launches split across the thread pool.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "engine/runtime/buffer.h"
#include "engine/runtime/counters.h"
#include "engine/runtime/device.h"
#include "engine/runtime/launch_queue.h"
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

  // The host writes `dst` now only when no queued work might still read or write that memory;
  // otherwise the bytes are copied aside and the copy is queued.
  void copy_in(void* dst, const void* src, size_t nbytes) override {
    LaunchQueue* q = queue_.load(std::memory_order_acquire);
    if (!q || q->idle()) {
      std::memcpy(dst, src, nbytes);
      return;
    }
    QueuedWork w;
    w.bytes.assign(static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + nbytes);
    w.copy_to = dst;
    q->push(std::move(w));
  }
  void copy_out(void* dst, const void* src, size_t nbytes) override {
    synchronize();
    std::memcpy(dst, src, nbytes);
  }
  void copy_out_after(uint64_t position, void* dst, const void* src, size_t nbytes) override {
    if (LaunchQueue* q = queue_.load(std::memory_order_acquire)) {
      if (position < q->queued()) counters().copies_out_early++;
      q->wait_for(position);
    }
    std::memcpy(dst, src, nbytes);
  }
  bool counts_kernel_time() const override { return true; }
  uint64_t queued_position() const override {
    LaunchQueue* q = queue_.load(std::memory_order_acquire);
    return q ? q->queued() : 0;
  }
  void launch(LaunchStep&& step) override {
    if (!kAsync) {
      run_kernel(step);
      return;
    }
    QueuedWork w;
    w.launch = std::move(step);
    queue().push(std::move(w));
  }
  // A schedule of one kernel on an idle queue runs here: there is little to overlap it with
  // (its caller most often waits for it next: x.sum().item()), and a handoff to the queue's
  // thread costs the wake of a sleeping thread (a realize and item() of 16 elements in a
  // loop: 8 us here, 11 through the queue; x.sum() of 2^24: 0.96 -> 1.00 ms).
  void launch_all(std::vector<LaunchStep>& steps, std::unique_ptr<ReplayState>* state) override {
    LaunchQueue* q = queue_.load(std::memory_order_acquire);
    if (steps.size() == 1 && (!q || q->idle())) {
      run_kernel(steps[0]);
      return;
    }
    Device::launch_all(steps, state);
  }
  void synchronize() override {
    if (LaunchQueue* q = queue_.load(std::memory_order_acquire)) q->wait_for(q->queued());
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

 private:
  // TINY_CPU_ASYNC=0: each launch runs before it returns (to tell a queue problem from others).
  inline static const bool kAsync = [] {
    const char* s = std::getenv("TINY_CPU_ASYNC");
    return !(s && std::string(s) == "0");
  }();
  static constexpr int kFineSlicesPerThread = 4;

  // Whether a kernel the threads could split runs split or alone. A kernel of a few microseconds
  // gains nothing from a second thread: waking it costs the caller microseconds, and on a VM's 2
  // vCPUs it takes the core the host builds the next graph on (an LSTM step's 406 kernels of
  // 3-15 us ran faster with TINY_THREADS=1, and so did MobileNetV2's step; resnet18's did not).
  // A size threshold cannot tell them apart on every machine, so it is measured: of every
  // kTrialPeriod runs of a program, the first warms up, the next kTrialRuns run split, the next
  // kTrialRuns alone (only where split took under kTrialBelowNs: a long kernel always pays), each
  // timed; the rest run the faster way. (Trials again each period: one made while another
  // process held a core, PyTorch's spinning OpenMP threads in a benchmark, is not kept forever.)
  static constexpr uint32_t kTrialRuns = 2, kTrialPeriod = 512;
  static constexpr int64_t kTrialBelowNs = 200'000;
  static bool runs_alone(const Program& p, uint32_t run) {
    const Program::SplitTrial& t = p.split_trial;
    const uint32_t phase = run % kTrialPeriod;
    if (phase < 1 + kTrialRuns) return false;
    if (phase < 1 + 2 * kTrialRuns) return t.split_ns.load(std::memory_order_relaxed) < kTrialBelowNs;
    return t.alone_ns.load(std::memory_order_relaxed) <= t.split_ns.load(std::memory_order_relaxed);
  }
  static void record_trial(const Program& p, uint32_t run, bool alone, int64_t ns) {
    Program::SplitTrial& t = p.split_trial;
    const uint32_t phase = run % kTrialPeriod;
    if (phase == 0) {
      t.split_ns.store(INT64_MAX, std::memory_order_relaxed);
      t.alone_ns.store(INT64_MAX, std::memory_order_relaxed);
    } else if (phase < 1 + 2 * kTrialRuns) {
      std::atomic<int64_t>& best = alone ? t.alone_ns : t.split_ns;
      if (ns < best.load(std::memory_order_relaxed)) best.store(ns, std::memory_order_relaxed);
    }
    t.runs.fetch_add(1, std::memory_order_relaxed);
  }

  void run_kernel(const LaunchStep& step) {
    const Program& p = *step.program;
    void** args = const_cast<void**>(step.args.data());
    auto start = std::chrono::steady_clock::now();
    // Aim for slices of at least ~32k elements of work so threads pay off.
    int64_t min_slice = std::max<int64_t>(1, (1 << 15) / std::max<int64_t>(1, p.work_per_item));
    const int per_thread = p.fine_slices ? kFineSlicesPerThread : 1;
    // Run while the host builds the next graph, a kernel leaves it a core; while the host
    // waits for the queue, kernels take them all (where that pays: runs_alone).
    const bool host_builds = LaunchQueue::running_here() && !queue_.load()->host_waits();
    int threads = host_builds ? std::max(1, thread_pool().size() - 1) : thread_pool().size();
    const bool splits = threads > 1 && p.parallel_size >= 2 * min_slice;
    const uint32_t run = splits ? p.split_trial.runs.load(std::memory_order_relaxed) : 0;
    const bool alone = splits && runs_alone(p, run);
    if (alone) threads = 1;
    if (p.scratch_bytes == 0) {
      thread_pool().parallel_for(p.parallel_size, min_slice, [&](int64_t b, int64_t e) { p.run(args, b, e); },
                                 p.parallel_grain, per_thread, threads);
    } else {
      std::vector<void*> with_scratch(args, args + p.scratch_index);
      std::vector<uint64_t> scratch((p.scratch_bytes + 7) / 8);
      with_scratch.push_back(scratch.data());
      thread_pool().parallel_for(p.parallel_size, min_slice,
                                 [&](int64_t b, int64_t e) { p.run(with_scratch.data(), b, e); }, p.parallel_grain,
                                 1, threads);
      p.finish(with_scratch.data());
    }
    const int64_t ns =
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
    if (splits) record_trial(p, run, alone, ns);
    counters().kernel_ns += ns;
  }

  void run_work(QueuedWork& w) {
    if (w.launch.program) run_kernel(w.launch);
    else std::memcpy(w.copy_to, w.bytes.data(), w.bytes.size());
  }

  LaunchQueue& queue() {
    if (LaunchQueue* q = queue_.load(std::memory_order_acquire)) return *q;
    std::lock_guard<std::mutex> g(queue_mu_);
    if (!queue_.load()) {
      // Work still queued when the process exits finishes before the statics it runs on (the
      // thread pool, the JIT) are destroyed: those exist now, so they are destroyed after this.
      thread_pool();
      std::atexit([] {
        try {
          cpu_device()->synchronize();
        } catch (...) {  // an error nobody waited for: nothing left to report it to
        }
      });
      // Never deleted, as the device is not.
      queue_.store(new LaunchQueue([this](QueuedWork& w) { run_work(w); }), std::memory_order_release);
    }
    return *queue_.load();
  }
  std::atomic<LaunchQueue*> queue_{nullptr};
  std::mutex queue_mu_;
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
    block = cpu_device()->alloc(total, Device::Use::KernelScratch);
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
  else cpu_device()->free(block, total, Device::Use::KernelScratch);
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
  mark_written(device_->queued_position());
  counters().copies_in++;
  counters().bytes_in += int64_t(nbytes);
}

void Buffer::copy_out(void* dst, size_t nbytes, size_t offset) {
  const uint64_t writer = owner()->written_at_.load(std::memory_order_relaxed);
  device_->copy_out_after(writer, dst, static_cast<char*>(ptr()) + offset, nbytes);
  counters().copies_out++;
  counters().bytes_out += int64_t(nbytes);
}

}  // namespace tiny
