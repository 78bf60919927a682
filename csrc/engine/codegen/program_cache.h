// Compiled programs by kernel key, so a repeated graph compiles nothing.
#pragma once
#include <memory>
#include <string>

#include "engine/codegen/kernel.h"
#include "engine/runtime/device.h"

namespace tiny {

// The compiled program for `k` on the CPU, from the cache when possible.
std::shared_ptr<Program> cpu_program(const Kernel& k);

}  // namespace tiny
