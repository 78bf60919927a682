#include "engine/codegen/program_cache.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

#include "engine/codegen/cuda_program.h"
#ifndef TINY_NO_CPU_JIT
#include "engine/codegen/llvm_codegen.h"
#endif
#include "engine/runtime/counters.h"
#include "engine/runtime/thread_pool.h"

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
  if (debug_level() >= 4)  // the key first: kernels with equal keys share this program
    std::fprintf(stderr, "tiny: key     %s %s\n%s\n", k.name().c_str(), key.c_str(), llvm_ir(k).c_str());
  auto start = std::chrono::steady_clock::now();
  std::shared_ptr<Program> p = compile_llvm(k);
  if (debug_level() >= 2)  // where a cold start's time goes (a disk-cache hit takes about a millisecond)
    std::fprintf(stderr, "tiny: program %-28s ready in %7.1f ms  reason: %s\n", k.name().c_str(),
                 std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count(),
                 k.reason.c_str());
  std::lock_guard<std::mutex> g(mu);
  cache->emplace(key, p);
  return p;
}
#endif

std::vector<std::shared_ptr<Program>> device_programs(Device& device, const std::vector<Kernel>& kernels) {
  if (device.kind() == DeviceKind::Cpu) {
    // Kernels of one key once; their compiles (most of a new schedule's cost) run in parallel.
    std::vector<const Kernel*> distinct;
    std::unordered_map<std::string, size_t> slot_of_key;
    std::vector<size_t> slot(kernels.size());
    for (size_t i = 0; i < kernels.size(); i++) {
      auto [it, fresh] = slot_of_key.emplace(kernels[i].key(), distinct.size());
      if (fresh) distinct.push_back(&kernels[i]);
      slot[i] = it->second;
    }
    std::vector<std::shared_ptr<Program>> programs(distinct.size());
    thread_pool().for_each_task(distinct.size(), [&](size_t i) { programs[i] = cpu_program(*distinct[i]); });
    std::vector<std::shared_ptr<Program>> out;
    for (size_t s : slot) out.push_back(programs[s]);
    return out;
  }
  std::vector<const Kernel*> ks;
  for (auto& k : kernels) ks.push_back(&k);
  return cuda_programs(device, ks, cuda_options_from_env());
}

}  // namespace tiny
