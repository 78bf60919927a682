// A Device owns memory and runs compiled kernels: the CPU (always there), a
// CUDA GPU (when libcuda loads and a GPU answers), or the emulated CUDA device
// (the CUDA path with the GPU replaced by host code, for machines without one).
// realize() takes the device it computes on; compute_device() is the one the
// process chose (TINY_DEVICE).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <unordered_map>
#include <vector>

namespace tiny {

// A compiled kernel: `fn(args, begin, end)` runs the slice [begin, end) of
// the kernel's parallel axis. `args` holds the kernel's buffers followed by a
// pointer to its launch words (Kernel::launch_params).
struct Program {
  std::string name;
  int64_t parallel_size = 1;  // extent of the parallel axis
  int64_t work_per_item = 1;  // elements of work per parallel index (to size slices)
  int64_t parallel_grain = 1;  // slices of the parallel axis start at multiples of this
  // A slice costs no set-up that grows with the kernel (an elementwise kernel, or a tiled
  // product whose threads split its channels: a slice packs its own panels only): the axis
  // is cut into several slices per thread, each thread taking the next when it is done.
  bool fine_slices = false;
  // A split reduction: run() leaves one partial result per parallel index in
  // a scratch buffer (passed after the kernel's buffers), finish() combines them.
  size_t scratch_bytes = 0;
  size_t scratch_index = 0;  // where the scratch goes: after the buffers and the parameter array
  // The CPU device's measurement of whether splitting the kernel over threads pays (of every
  // 512 runs, two split and two alone, timed: see CpuDevice::runs_alone).
  struct SplitTrial {
    std::atomic<uint32_t> runs{0};  // its runs that the threads could split
    std::atomic<int64_t> split_ns{INT64_MAX}, alone_ns{INT64_MAX};
  };
  mutable SplitTrial split_trial;
  virtual ~Program() = default;
  virtual void run(void** args, int64_t begin, int64_t end) const = 0;
  virtual void finish(void** args) const {}
};

enum class DeviceKind { Cpu, Cuda, CudaEmu };
const char* device_kind_name(DeviceKind k);  // "cpu", "cuda", "cuda-emu"

// What a user asks torch.tiny.get_device_properties() for.
struct DeviceProperties {
  std::string name;             // the GPU's name, or the CPU's model name
  std::string arch;             // "sm_90", or the CPU name LLVM targets ("znver3")
  int cc_major = 0, cc_minor = 0;
  int multiprocessors = 0;      // SMs, or the threads kernels run on
  int64_t total_memory = 0;     // bytes
  int vector_bits = 0;          // CPU: the widest vector the JIT uses
};

// The caching allocator's figures (torch.tiny.memory_stats and friends).
struct MemoryStats {
  int64_t allocated = 0, peak_allocated = 0;  // bytes of live buffers (rounded sizes)
  int64_t reserved = 0, peak_reserved = 0;    // live + cached bytes obtained from the device
  int64_t allocations = 0, frees = 0;         // buffer allocations and releases
  int64_t device_allocations = 0;             // allocations that went to the device (cache misses)
  int64_t ooms = 0;                           // allocations that failed even after emptying the cache
  int64_t cache_flushes = 0;                  // times the cache was emptied to retry an allocation
};

// Out of memory on a device, after emptying the cache and retrying once.
class OutOfMemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Raises the out-of-memory error instead of OutOfMemoryError (it must throw):
// the torch layer makes it torch.OutOfMemoryError without the engine knowing torch.
using OutOfMemoryHandler = void (*)(const std::string& message);
void set_out_of_memory_handler(OutOfMemoryHandler handler);

// One kernel launch: the program, its buffers' addresses and its launch words.
struct LaunchStep {
  const Program* program = nullptr;
  std::vector<void*> args;  // buffers, then the address of `params` (moving a step keeps it valid)
  std::vector<uint64_t> params;
  LaunchStep() = default;
  LaunchStep(const Program* p, std::vector<void*> buffers, std::vector<uint64_t> words)
      : program(p), args(std::move(buffers)), params(std::move(words)) {
    args.push_back(params.data());
  }
  LaunchStep(LaunchStep&&) = default;
  LaunchStep& operator=(LaunchStep&&) = default;
  LaunchStep(const LaunchStep&) = delete;  // a copy's last argument would name the original's words
  LaunchStep& operator=(const LaunchStep&) = delete;
};
// Device state a replayed sequence keeps between calls (a CUDA graph).
struct ReplayState {
  virtual ~ReplayState() = default;
};

// A point in a device's queue of work, as a CUDA event is: complete once everything launched
// before it has finished.
class DeviceEvent {
 public:
  virtual ~DeviceEvent() = default;
  virtual bool complete() = 0;
  virtual void wait() = 0;
  // Milliseconds from this event to `end` (an event of the same device), waiting for both.
  virtual double ms_until(DeviceEvent& end) = 0;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  virtual std::string name() const = 0;
  virtual DeviceProperties properties() const = 0;

  // The caching allocator: freed blocks are kept by size and reused; when the
  // device refuses, the cache is emptied and the allocation tried once more,
  // then OutOfMemoryError names the size and the free / total memory.
  // Kernel scratch has a free list of its own: it is allocated while queued work runs, when a
  // buffer's freed block may still be used by work queued before the buffer died (a block the
  // host frees is safe for what the host queues next, which runs after that work).
  enum class Use { Buffer, KernelScratch };
  void* alloc(size_t nbytes, Use use = Use::Buffer);
  void free(void* ptr, size_t nbytes, Use use = Use::Buffer);
  MemoryStats memory_stats();
  void reset_peak_memory_stats();
  void empty_cache();
  // (free, total) bytes of the device's memory, as the device reports them.
  virtual std::pair<int64_t, int64_t> mem_get_info() = 0;

  // Pinned host memory (torch's pin_memory): page-locked on a GPU, so copies
  // from it go straight to the device; ordinary page-aligned memory on the
  // CPU, which has no DMA to wait for. host_pinned says whether `p` lies in a
  // live block of it.
  void* host_alloc(size_t nbytes);
  void host_free(void* p);
  bool host_pinned(const void* p);

  // Host <-> device copies, in order with the launches. copy_out waits for the work before
  // it; copy_in has finished reading `src` when it returns.
  virtual void copy_in(void* dst, const void* src, size_t nbytes) = 0;
  virtual void copy_out(void* dst, const void* src, size_t nbytes) = 0;
  // A device that numbers its queued work (see queued_position) waits only for the work up to
  // `position` (the last writer of what it reads); the others wait for all of it.
  virtual void copy_out_after(uint64_t position, void* dst, const void* src, size_t nbytes) {
    copy_out(dst, src, nbytes);
  }
  // Where the device's queue stands: launches and copies it queues are numbered 1, 2, ... in
  // order, and this is the last one's number. 0 on a device that numbers nothing.
  virtual uint64_t queued_position() const { return 0; }
  // Whether the device adds its kernels' run time to counters().kernel_ns itself (as they
  // run on its queue); otherwise realize adds the time its launches took.
  virtual bool counts_kernel_time() const { return false; }
  // Runs the whole parallel range. May return before the kernel finishes.
  virtual void launch(LaunchStep&& step) = 0;
  // Runs a cached schedule's kernels in order. `state` lets a device keep a
  // faster form of the sequence between replays (a CUDA graph); the default
  // launches one by one.
  virtual void launch_all(std::vector<LaunchStep>& steps, std::unique_ptr<ReplayState>* state);
  // Waits until everything launched has finished.
  virtual void synchronize() {}
  // Marks the end of what has been launched so far. The default, for a device that may still
  // be running work when launch returns but keeps no queue of its own: wait, read the clock.
  virtual std::unique_ptr<DeviceEvent> record_event();

 protected:
  // Device memory without caching: nullptr when the device has none left.
  virtual void* raw_alloc(size_t nbytes) = 0;
  virtual void raw_free(void* ptr, size_t nbytes) = 0;
  // Host memory for host_alloc (nullptr when refused); the default is page-aligned malloc.
  virtual void* raw_host_alloc(size_t nbytes);
  virtual void raw_host_free(void* p);
  // What a block of `nbytes` is rounded up to (the cache reuses blocks of equal rounded size).
  virtual size_t granularity(size_t /*nbytes*/) const { return 64; }
  virtual size_t max_cached_bytes() const { return size_t(4) << 30; }

 private:
  size_t round_up(size_t n) const;
  void release_cache_locked();
  std::mutex mu_;
  // freed blocks by size, by Use (a block list per size: a multimap made and freed a tree node
  // for each of a replay's hundreds of buffers)
  std::unordered_map<size_t, std::vector<void*>> cache_[2];
  size_t cached_bytes_ = 0;
  MemoryStats stats_;
  std::mutex host_mu_;
  std::map<uintptr_t, size_t> pinned_;  // start -> bytes of live host_alloc blocks
};

Device* cpu_device();

// Scratch memory of the CPU kernels (packed weight panels, blocked accumulators), called by the
// JIT's code: blocks of the CPU device's caching allocator, so a kernel run again reuses them.
// Each call used to malloc and free its own: panels above glibc's mmap threshold were mapped,
// faulted in and zeroed page by page every call (a quarter of a 16-row linear layer's time).
void* kernel_scratch_alloc(int64_t bytes);
void kernel_scratch_free(void* p);

// The device tiny computes on, chosen once per process by TINY_DEVICE:
// "cpu", "cuda" (error when no usable GPU, saying why), "cuda-emu"; unset or
// "auto": CUDA when a usable GPU and NVRTC are there, else the CPU (the
// emulated GPU in a build without the CPU JIT).
// Throws std::runtime_error for an unusable choice.
// (One device per process: tiny:0. Several GPUs are not used yet.)
Device& compute_device();

}  // namespace tiny
