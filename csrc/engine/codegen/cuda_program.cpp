#include "engine/codegen/cuda_program.h"

#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>

#include "engine/runtime/buffer.h"
#include "engine/runtime/counters.h"
#include "engine/runtime/cuda_device.h"

namespace tiny {

int cuda_default_arch() {
  const CudaInfo& i = cuda_info();
  return i.available ? i.cc_major * 10 + i.cc_minor : 80;
}

CudaBuild build_cuda(const Kernel& k, int arch, bool cubin, const CudaRenderOptions& opt) {
  CudaBuild b;
  b.src = render_cuda(k, opt);
  b.arch = arch > 0 ? arch : cuda_default_arch();
  b.cubin = cubin;
  b.out = nvrtc_compile(b.src.source, b.src.name, b.arch, cubin);
  return b;
}

std::unique_ptr<Program> compile_cuda(const Kernel& k, const CudaRenderOptions& opt) {
  if (!cuda_available()) throw std::runtime_error("tiny cuda: CUDA is not available: " + cuda_info().reason);
  if (!nvrtc_available()) throw std::runtime_error("tiny cuda: NVRTC is not available: " + nvrtc_info().reason);
  CudaKernelSource src = render_cuda(k, opt);
  if (debug_level() >= 4) std::fprintf(stderr, "%s\n", src.source.c_str());
  CudaLaunchShape shape{src.block_size, src.elements_per_block(), src.num_buffers};
  // A device binary for exactly this GPU first; PTX (JIT-compiled by the
  // driver) when this NVRTC does not know the GPU or the driver refuses it.
  int arch = cuda_default_arch();
  struct Attempt {
    int arch;
    bool cubin;
  };
  std::string errors;
  for (Attempt a : {Attempt{arch, true}, Attempt{arch, false}, Attempt{80, false}}) {
    NvrtcOutput out = nvrtc_compile(src.source, src.name, a.arch, a.cubin);
    std::string what = std::string(a.cubin ? "sm_" : "compute_") + std::to_string(a.arch);
    if (!out.ok) {
      errors += "\n[" + what + "] " + out.log;
      continue;
    }
    try {
      auto p = cuda_load_program(out.code, src.name, shape, src.outputs);
      p->name = k.name();
      counters().compiles++;
      return p;
    } catch (const std::exception& e) {
      errors += "\n[" + what + "] " + e.what();
    }
  }
  throw std::runtime_error("tiny cuda: cannot build " + src.name + ":" + errors + "\n--- source ---\n" + src.source);
}

std::shared_ptr<Program> cuda_program(const Kernel& k) {
  static std::mutex mu;
  static auto* cache = new std::unordered_map<std::string, std::shared_ptr<Program>>();
  std::string key = k.key();
  for (auto p : k.launch_params()) key += "," + std::to_string(p);  // the CUDA kernels bake them in
  {
    std::lock_guard<std::mutex> g(mu);
    auto it = cache->find(key);
    if (it != cache->end()) return it->second;
  }
  std::shared_ptr<Program> p = compile_cuda(k);
  std::lock_guard<std::mutex> g(mu);
  cache->emplace(key, p);
  return p;
}

void run_cuda_kernels(const std::vector<const Kernel*>& kernels, const std::unordered_map<const Buffer*, void*>& host,
                      const CudaRenderOptions& opt) {
  Device* dev = cuda_device();
  if (!dev) throw std::runtime_error("tiny cuda: CUDA is not available: " + cuda_info().reason);
  // Compile everything before touching memory, so a failure leaves nothing allocated.
  std::vector<std::unique_ptr<Program>> programs;
  for (auto* k : kernels) programs.push_back(compile_cuda(*k, opt));

  struct Mem {
    void* ptr;
    size_t nbytes;
    bool written = false;
  };
  std::unordered_map<const Buffer*, Mem> mem;
  auto release = [&] {
    for (auto& [owner, m] : mem) dev->free(m.ptr, m.nbytes);
  };
  try {
    for (auto* k : kernels) {
      for (auto& b : k->buffers) {
        const Buffer* owner = b->owner();
        if (mem.count(owner)) continue;
        auto h = host.find(owner);
        if (h == host.end()) throw std::invalid_argument("run_cuda_kernels: no host memory for a buffer");
        Mem m{dev->alloc(owner->nbytes()), owner->nbytes()};
        mem.emplace(owner, m);
        dev->copy_in(m.ptr, h->second, m.nbytes);
      }
    }
    for (size_t i = 0; i < kernels.size(); i++) {
      const Kernel& k = *kernels[i];
      std::vector<void*> ptrs;
      for (auto& b : k.buffers) ptrs.push_back(mem.at(b->owner()).ptr);
      for (auto& o : k.outputs) mem.at(k.buffers[size_t(o.buffer)]->owner()).written = true;
      dev->launch(*programs[i], ptrs.data());
      counters().kernels++;
    }
    for (auto& [owner, m] : mem)
      if (m.written) dev->copy_out(host.at(owner), m.ptr, m.nbytes);
  } catch (...) {
    release();
    throw;
  }
  release();
}

void run_cuda(const Kernel& k, const std::vector<void*>& host, const CudaRenderOptions& opt) {
  if (host.size() != k.buffers.size()) throw std::invalid_argument("run_cuda: one host pointer per kernel buffer");
  std::unordered_map<const Buffer*, void*> by_owner;
  for (size_t i = 0; i < host.size(); i++) by_owner.emplace(k.buffers[i]->owner(), host[i]);
  run_cuda_kernels({&k}, by_owner, opt);
}

}  // namespace tiny
