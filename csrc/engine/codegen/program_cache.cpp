#include "engine/codegen/program_cache.h"

#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "engine/codegen/cuda_program.h"
#ifndef TINY_NO_CPU_JIT
#include "engine/codegen/llvm_codegen.h"
#endif
#include "engine/runtime/counters.h"

namespace tiny {

#ifdef TINY_NO_CPU_JIT
std::shared_ptr<Program> cpu_program(const Kernel& k) {
  throw std::runtime_error("tiny: kernel " + k.name() +
                           " cannot run on the CPU: this build has no CPU JIT (TINY_CPU_JIT=OFF); "
                           "kernels run on a CUDA device (TINY_DEVICE=cuda or cuda-emu)");
}
#else
std::shared_ptr<Program> cpu_program(const Kernel& k) {
  static std::mutex mu;
  static auto* cache = new std::unordered_map<std::string, std::shared_ptr<Program>>();
  std::string key = k.key();
  {
    std::lock_guard<std::mutex> g(mu);
    auto it = cache->find(key);
    if (it != cache->end()) return it->second;
  }
  if (debug_level() >= 4) std::fprintf(stderr, "%s\n", llvm_ir(k).c_str());
  std::shared_ptr<Program> p = compile_llvm(k);
  std::lock_guard<std::mutex> g(mu);
  cache->emplace(key, p);
  return p;
}
#endif

std::vector<std::shared_ptr<Program>> device_programs(Device& device, const std::vector<Kernel>& kernels) {
  if (device.kind() == DeviceKind::Cpu) {
    std::vector<std::shared_ptr<Program>> out;
    for (auto& k : kernels) out.push_back(cpu_program(k));
    return out;
  }
  std::vector<const Kernel*> ks;
  for (auto& k : kernels) ks.push_back(&k);
  return cuda_programs(device, ks);
}

}  // namespace tiny
