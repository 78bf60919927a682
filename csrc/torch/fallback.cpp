// Ops with no tiny kernel run on the CPU: arguments are copied over, the CPU
// kernel runs, results (and mutated arguments) are copied back. Each op warns
// once; TINY_STRICT=1 makes it an error instead.
#include <ATen/native/CPUFallback.h>
#include <torch/library.h>

#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

namespace torch_tiny {
namespace {

bool strict_mode() {
  const char* s = std::getenv("TINY_STRICT");
  return s && std::string(s) != "0" && std::string(s) != "";
}

void tiny_cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  std::string name = c10::toString(op.schema().operator_name());
  TORCH_CHECK_NOT_IMPLEMENTED(!strict_mode(), "tiny: the operator '", name,
                              "' has no tiny kernel (TINY_STRICT=1 forbids the CPU fallback)");
  {
    static std::mutex mu;
    static std::set<std::string> warned;
    std::lock_guard<std::mutex> g(mu);
    if (warned.insert(name).second)
      TORCH_WARN("tiny: the operator '", name, "' has no tiny kernel; it runs on the CPU (copies in and out). ",
                 "Set TINY_STRICT=1 to make this an error.");
  }
  at::native::cpu_fallback(op, stack);
}

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) { m.fallback(torch::CppFunction::makeFromBoxedFunction<&tiny_cpu_fallback>()); }

}  // namespace torch_tiny
