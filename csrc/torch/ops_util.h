// Small helpers shared by the op files.
#pragma once
#include <ATen/Context.h>
#include <ATen/Tensor.h>
#include <c10/core/Device.h>

#include <mutex>
#include <optional>

#include "engine/graph/node.h"

namespace torch_tiny {

// Held while an op builds its graph: takes the engine lock and labels the
// nodes made with the op's name (for kernel debugging).
class TinyOp {
 public:
  explicit TinyOp(const char* name) : lock_(tiny::engine_mutex()), prev_(tiny::current_origin()) { tiny::set_origin(name); }
  ~TinyOp() { tiny::set_origin(prev_); }

 private:
  std::lock_guard<std::recursive_mutex> lock_;
  const char* prev_;
};

inline void check_device(const std::optional<c10::Device>& device) {
  if (device) {
    TORCH_CHECK(device->type() == c10::DeviceType::PrivateUse1, "tiny: expected the tiny device, got ", *device);
    TORCH_CHECK(!device->has_index() || device->index() == 0, "tiny: invalid device index ", int(device->index()),
                "; only tiny:0 exists");
  }
}

// Whether float32 matmuls and convolutions may round their factors to TF32 (tensor cores,
// where the device has them): the switch a user sets for CUDA matmuls,
// torch.backends.cuda.matmul.allow_tf32 or torch.set_float32_matmul_precision("high"), off by
// default. Convolutions follow it too rather than cuDNN's allow_tf32, which is on by default:
// tiny's float32 stays exact unless the user asks otherwise.
inline bool allow_tf32() { return at::globalContext().allowTF32CuBLAS(); }

}  // namespace torch_tiny
