// A Device owns memory and runs compiled kernels. The CPU device is always
// present; a CUDA device exists when libcuda loads and a GPU answers.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tiny {

// A compiled kernel: `fn(buffers, begin, end)` runs the slice [begin, end) of
// the kernel's parallel axis.
struct Program {
  std::string name;
  int64_t parallel_size = 1;  // extent of the parallel axis
  int64_t work_per_item = 1;  // elements of work per parallel index (to size slices)
  // A split reduction: run() leaves one partial result per parallel index in
  // a scratch buffer (passed after the kernel's buffers), finish() combines them.
  size_t scratch_bytes = 0;
  size_t scratch_index = 0;  // where the scratch goes: after the buffers and the parameter array
  virtual ~Program() = default;
  virtual void run(void** buffers, int64_t begin, int64_t end) const = 0;
  virtual void finish(void** buffers) const {}
};

class Device {
 public:
  virtual ~Device() = default;
  virtual std::string name() const = 0;
  virtual void* alloc(size_t nbytes) = 0;
  virtual void free(void* ptr, size_t nbytes) = 0;
  virtual void copy_in(void* dst, const void* src, size_t nbytes) = 0;
  virtual void copy_out(void* dst, const void* src, size_t nbytes) = 0;
  // Runs the whole parallel range, split across the device's workers.
  // `args` holds the kernel's buffers followed by its parameter array.
  virtual void launch(const Program& p, void** args) = 0;
  virtual void synchronize() {}
};

Device* cpu_device();

}  // namespace tiny
