// A tiny storage's DataPtr does not point at memory. Its context is a
// StorageCell: a mutable slot holding the current lazy value of the whole
// storage as one flat 1-D engine tensor (or as written, in its own shape).
// Reading a tensor looks at the cell's value through the tensor's (sizes,
// strides, offset); writing a tensor gives the cell a new value.
#pragma once
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/tensor/tensor.h"

namespace torch_tiny {

class StorageCell {
 public:
  explicit StorageCell(size_t nbytes);
  ~StorageCell();
  StorageCell(const StorageCell&) = delete;
  StorageCell& operator=(const StorageCell&) = delete;

  size_t nbytes() const { return nbytes_; }
  // The storage's bytes as `n = nbytes / itemsize(dtype)` elements of `dtype`
  // (zeros if never written).
  tiny::Tensor value_as(tiny::DType dtype) const;
  void set_value(tiny::Tensor v);
  // A value that covers the storage in row-major order, kept in its own shape (a new tensor's
  // result): reads of that shape and dtype take it as it is rather than through the flat
  // value, which is made from it only where something needs it. Each of those two reshapes
  // built a view node: a tenth of the host's time in a MobileNetV2 training step.
  void set_whole(tiny::Tensor v);
  // The storage read whole, in order, as `sizes` of `dtype` (the row-major elements cover it).
  tiny::Tensor read_whole(tiny::DType dtype, const tiny::Shape& sizes) const;
  tiny::Tensor raw_value() const { return flat(); }
  // Whether the value is still to be computed (a flat value made from a stored whole one is
  // that one's reshape, not pending work).
  bool pending() const;

 private:
  friend std::vector<tiny::Tensor> pending_cell_values();
  friend void drop_realized_wholes();
  tiny::Tensor flat() const;  // value_, made from whole_ first where it was not
  size_t nbytes_;
  mutable tiny::Tensor value_;  // flat 1-D, or undefined: made from whole_, or all zeros
  tiny::Tensor whole_;          // set_whole's value, or undefined
  // read_whole's latest result through the flat value (a parameter is read so several times a
  // step), and whether the flat value was realized then (a realized one reads as a view of its
  // own buffer, a pending one as the value it reshapes)
  mutable tiny::Tensor last_read_;
  mutable bool last_read_realized_ = false;
  StorageCell *prev_ = nullptr, *next_ = nullptr;  // the live cells, in creation order
};

StorageCell& cell_of(const c10::Storage& storage);
// Every live cell with work still pending (for synchronize), in the cells'
// creation order: the same program builds the same list every step, so its
// graph hits the schedule cache (an address order would differ per step).
std::vector<tiny::Tensor> pending_cell_values();
// After a realize: cells whose flat value is now stored drop the whole value it reshaped, so the
// graph that computed it (and the buffers that graph still holds) is freed now, not when the
// storage dies (an LSTM's weight gradients, sums over its time steps, kept 1.85 MB of buffers,
// 4.6 times their own size, alive until zero_grad).
void drop_realized_wholes();

// Hands out unique, never-dereferenced address ranges (reserved, inaccessible
// virtual memory) so ATen's overlap checks see distinct storages.
class TinyAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override;
  void copy_data(void* dest, const void* src, size_t count) const override;
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
};

TinyAllocator* tiny_allocator();

}  // namespace torch_tiny
