// The in-process LLVM JIT for the host CPU (ORC LLJIT), with an on-disk
// object cache keyed by the IR text, the LLVM version and the host CPU.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llvm {
class Module;
class LLVMContext;
class TargetMachine;
}  // namespace llvm

namespace tiny {

// The vector registers kernels are generated for: float32 lanes per register
// and how many registers there are (register tiles are sized to fit them); whether it
// fuses multiply-adds (polynomials fitted for FMA rounding need them).
struct VectorUnit {
  int64_t lanes = 4;
  int64_t registers = 16;
  bool fma = false;
};

class LLVMJit {
 public:
  static LLVMJit& get();
  // Target triple, data layout and function attributes for kernels.
  void configure(llvm::Module& m) const;
  const std::string& cpu_name() const;
  const std::string& cpu_features() const;
  const VectorUnit& vector_unit() const;
  // Optimizes (O3, vectorized for the host) and compiles `m`; returns the
  // addresses of the functions named `fns`.
  std::vector<void*> compile(std::unique_ptr<llvm::Module> m, std::unique_ptr<llvm::LLVMContext> ctx,
                             const std::vector<std::string>& fns);

 private:
  LLVMJit();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tiny
