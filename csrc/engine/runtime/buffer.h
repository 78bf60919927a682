// A Buffer is device memory holding `numel` elements of one dtype. The engine
// allocates it when a kernel first writes it and frees it with the last owner.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>

#include "engine/dtype/dtype.h"

namespace tiny {

class Device;

class Buffer {
 public:
  Buffer(Device* device, DType dtype, int64_t numel) : device_(device), dtype_(dtype), numel_(numel), id_(next_id()) {}
  // The memory of `base` from byte `byte_offset` on, seen as `numel` elements
  // of `dtype`: a bitcast of a flat buffer, or a window of it.
  Buffer(std::shared_ptr<Buffer> base, DType dtype, int64_t numel, size_t byte_offset = 0)
      : device_(base->device()),
        dtype_(dtype),
        numel_(numel),
        id_(next_id()),
        byte_offset_(byte_offset),
        base_(std::move(base)) {}
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  Device* device() const { return device_; }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return size_t(numel_) * itemsize(dtype_); }
  // Unique in the process (addresses are reused): names buffers in traces.
  uint64_t id() const { return id_; }
  bool allocated() const { return ptr_ != nullptr; }
  // The buffer that owns the memory (itself unless this is an alias).
  const Buffer* owner() const { return base_ ? base_->owner() : this; }
  const std::shared_ptr<Buffer>& base() const { return base_; }
  size_t byte_offset() const { return byte_offset_; }  // where it starts in base()
  // Where this buffer starts in its owner's memory, in bytes.
  size_t owner_offset() const { return base_ ? base_->owner_offset() + byte_offset_ : 0; }
  void* ptr();  // allocates on first use
  // Copy bytes between host memory and this buffer (host side of copies). copy_out waits
  // for the buffer's last writer where the device knows it (see mark_written).
  void copy_in(const void* src, size_t nbytes, size_t offset = 0);
  void copy_out(void* dst, size_t nbytes, size_t offset = 0);
  // Records that the device's queued work up to `position` (Device::queued_position) writes
  // this buffer's memory last, so far.
  void mark_written(uint64_t position) { owner()->written_at_.store(position, std::memory_order_relaxed); }

 private:
  static uint64_t next_id() {
    static std::atomic<uint64_t> last{0};
    return ++last;
  }
  Device* device_;
  DType dtype_;
  int64_t numel_;
  uint64_t id_;
  size_t byte_offset_ = 0;  // into base_
  void* ptr_ = nullptr;
  std::shared_ptr<Buffer> base_;
  // The owner's last writer's position; unknown (wait for everything) until marked.
  mutable std::atomic<uint64_t> written_at_{UINT64_MAX};
};

using BufferRef = std::shared_ptr<Buffer>;

}  // namespace tiny
