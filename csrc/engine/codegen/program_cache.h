// Compiled programs by kernel key, so a repeated graph compiles nothing.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/codegen/kernel.h"
#include "engine/runtime/device.h"

namespace tiny {

// The compiled program for `k` on the CPU, from the cache when possible.
std::shared_ptr<Program> cpu_program(const Kernel& k);
// Programs for a schedule's kernels on `device` (the CPU's LLVM JIT, or the
// CUDA path for a GPU and the emulated device).
std::vector<std::shared_ptr<Program>> device_programs(Device& device, const std::vector<Kernel>& kernels);

}  // namespace tiny
