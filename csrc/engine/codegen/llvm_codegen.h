// Kernel -> LLVM IR (through IRBuilder) -> machine code for the host CPU.
#pragma once
#include <memory>
#include <string>

#include "engine/codegen/kernel.h"
#include "engine/runtime/device.h"

namespace tiny {

// The LLVM IR text for `k` (for TINY_DEBUG=4 and tests).
std::string llvm_ir(const Kernel& k);
std::unique_ptr<Program> compile_llvm(const Kernel& k);

}  // namespace tiny
