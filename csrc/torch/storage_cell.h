// A tiny storage's DataPtr does not point at memory. Its context is a
// StorageCell: a mutable slot holding the current lazy value of the whole
// storage as one flat 1-D engine tensor. Reading a tensor looks at the cell's
// value through the tensor's (sizes, strides, offset); writing a tensor gives
// the cell a new value.
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
  const tiny::Tensor& raw_value() const { return value_; }
  bool pending() const { return value_.defined() && !value_.node()->realized(); }

 private:
  friend std::vector<tiny::Tensor> pending_cell_values();
  size_t nbytes_;
  tiny::Tensor value_;  // flat 1-D, or undefined (all zeros)
  StorageCell *prev_ = nullptr, *next_ = nullptr;  // the live cells, in creation order
};

StorageCell& cell_of(const c10::Storage& storage);
// Every live cell with work still pending (for synchronize), in the cells'
// creation order: the same program builds the same list every step, so its
// graph hits the schedule cache (an address order would differ per step).
std::vector<tiny::Tensor> pending_cell_values();

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
