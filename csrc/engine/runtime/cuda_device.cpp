#include "engine/runtime/cuda_device.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace tiny {
namespace {

// The subset of cuda.h we call (stable driver ABI; the _v2 names are the
// 64-bit ones every driver since CUDA 3.2 exports).
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
using CUdeviceptr = unsigned long long;
constexpr CUresult CUDA_SUCCESS = 0;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_JIT_ERROR_LOG_BUFFER = 5;
constexpr int CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;

struct Api {
  CUresult (*Init)(unsigned);
  CUresult (*DriverGetVersion)(int*);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetName)(char*, int, CUdevice);
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxSynchronize)();
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void*, size_t);
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*ModuleLoadDataEx)(CUmodule*, const void*, unsigned, int*, void**);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                           void**, void**);
  CUresult (*GetErrorString)(CUresult, const char**);
};

template <typename F>
bool sym(void* h, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(h, name));
  return fn != nullptr;
}

struct Driver {
  CudaInfo info;
  Api api{};
  CUcontext ctx = nullptr;
  CUdevice dev = 0;

  std::string error(CUresult r) const {
    const char* s = nullptr;
    if (api.GetErrorString && api.GetErrorString(r, &s) == CUDA_SUCCESS && s) return s;
    return "CUDA error " + std::to_string(r);
  }
  void check(CUresult r, const char* what) const {
    if (r != CUDA_SUCCESS) throw std::runtime_error(std::string("tiny cuda: ") + what + ": " + error(r));
  }
  // Driver calls need the context current on the calling thread.
  void bind() const { check(api.CtxSetCurrent(ctx), "cuCtxSetCurrent"); }
};

Driver& driver() {
  static Driver* d = [] {
    auto* dr = new Driver();  // never destroyed: buffers may outlive statics
    CudaInfo& info = dr->info;
    const char* off = std::getenv("TINY_DISABLE_CUDA");
    if (off && *off && std::string(off) != "0") {
      info.reason = "disabled by TINY_DISABLE_CUDA";
      return dr;
    }
    std::vector<std::string> names;
    if (const char* p = std::getenv("TINY_LIBCUDA")) names.emplace_back(p);
    names.emplace_back("libcuda.so.1");
    names.emplace_back("libcuda.so");
    void* h = nullptr;
    std::string tried;
    for (auto& n : names) {
      h = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h) break;
      const char* e = dlerror();
      tried += (tried.empty() ? "" : "; ") + std::string(e ? e : n + ": dlopen failed");
    }
    if (!h) {
      info.reason = "no CUDA driver (" + tried + ")";
      return dr;
    }
    Api& a = dr->api;
    bool ok = sym(h, "cuInit", a.Init) && sym(h, "cuDriverGetVersion", a.DriverGetVersion) &&
              sym(h, "cuDeviceGetCount", a.DeviceGetCount) && sym(h, "cuDeviceGet", a.DeviceGet) &&
              sym(h, "cuDeviceGetName", a.DeviceGetName) && sym(h, "cuDeviceGetAttribute", a.DeviceGetAttribute) &&
              sym(h, "cuDevicePrimaryCtxRetain", a.DevicePrimaryCtxRetain) &&
              sym(h, "cuCtxSetCurrent", a.CtxSetCurrent) && sym(h, "cuCtxSynchronize", a.CtxSynchronize) &&
              sym(h, "cuMemAlloc_v2", a.MemAlloc) && sym(h, "cuMemFree_v2", a.MemFree) &&
              sym(h, "cuMemcpyHtoD_v2", a.MemcpyHtoD) && sym(h, "cuMemcpyDtoH_v2", a.MemcpyDtoH) &&
              sym(h, "cuModuleLoadDataEx", a.ModuleLoadDataEx) && sym(h, "cuModuleUnload", a.ModuleUnload) &&
              sym(h, "cuModuleGetFunction", a.ModuleGetFunction) && sym(h, "cuLaunchKernel", a.LaunchKernel) &&
              sym(h, "cuGetErrorString", a.GetErrorString);
    if (!ok) {
      info.reason = "the CUDA driver library lacks required symbols";
      return dr;
    }
    CUresult r = a.Init(0);
    if (r != CUDA_SUCCESS) {
      info.reason = "cuInit failed: " + dr->error(r);
      return dr;
    }
    a.DriverGetVersion(&info.driver_version);
    int count = 0;
    r = a.DeviceGetCount(&count);
    if (r != CUDA_SUCCESS || count == 0) {
      info.reason = r != CUDA_SUCCESS ? "cuDeviceGetCount failed: " + dr->error(r) : "no CUDA GPU";
      return dr;
    }
    if ((r = a.DeviceGet(&dr->dev, 0)) != CUDA_SUCCESS ||
        (r = a.DevicePrimaryCtxRetain(&dr->ctx, dr->dev)) != CUDA_SUCCESS) {
      info.reason = "cannot open GPU 0: " + dr->error(r);
      return dr;
    }
    char name[256] = {0};
    a.DeviceGetName(name, sizeof name - 1, dr->dev);
    info.name = name;
    a.DeviceGetAttribute(&info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dr->dev);
    a.DeviceGetAttribute(&info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dr->dev);
    a.DeviceGetAttribute(&info.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dr->dev);
    info.available = true;
    return dr;
  }();
  return *d;
}

class CudaDevice final : public Device {
 public:
  std::string name() const override {
    const CudaInfo& i = driver().info;
    return "cuda:0 (" + i.name + ", sm_" + std::to_string(i.cc_major) + std::to_string(i.cc_minor) + ")";
  }

  void* alloc(size_t nbytes) override {
    size_t size = round_up(nbytes);
    {
      std::lock_guard<std::mutex> g(mu_);
      auto it = cache_.find(size);
      if (it != cache_.end()) {
        void* p = it->second;
        cached_bytes_ -= size;
        cache_.erase(it);
        return p;
      }
    }
    const Driver& d = driver();
    d.bind();
    CUdeviceptr p = 0;
    CUresult r = d.api.MemAlloc(&p, size);
    if (r != CUDA_SUCCESS) {
      release_cache();  // memory held for reuse goes back, then try once more
      d.check(d.api.MemAlloc(&p, size), "cuMemAlloc");
    }
    return reinterpret_cast<void*>(p);
  }

  void free(void* ptr, size_t nbytes) override {
    size_t size = round_up(nbytes);
    std::lock_guard<std::mutex> g(mu_);
    if (cached_bytes_ + size > kMaxCachedBytes) {
      const Driver& d = driver();
      d.bind();
      d.api.MemFree(reinterpret_cast<CUdeviceptr>(ptr));
      return;
    }
    cache_.emplace(size, ptr);
    cached_bytes_ += size;
  }

  void copy_in(void* dst, const void* src, size_t nbytes) override {
    if (!nbytes) return;
    const Driver& d = driver();
    d.bind();
    d.check(d.api.MemcpyHtoD(reinterpret_cast<CUdeviceptr>(dst), src, nbytes), "cuMemcpyHtoD");
  }
  void copy_out(void* dst, const void* src, size_t nbytes) override {
    if (!nbytes) return;
    const Driver& d = driver();
    d.bind();
    // Synchronous on the legacy default stream: waits for the kernels before it.
    d.check(d.api.MemcpyDtoH(dst, reinterpret_cast<CUdeviceptr>(src), nbytes), "cuMemcpyDtoH");
  }
  void launch(const Program& p, void** buffers) override { p.run(buffers, 0, p.parallel_size); }
  void synchronize() override {
    const Driver& d = driver();
    d.bind();
    d.check(d.api.CtxSynchronize(), "cuCtxSynchronize");
  }

 private:
  static size_t round_up(size_t n) {
    if (n == 0) n = 1;
    return (n + 511) & ~size_t(511);
  }
  void release_cache() {
    std::lock_guard<std::mutex> g(mu_);
    const Driver& d = driver();
    d.bind();
    for (auto& [size, p] : cache_) d.api.MemFree(reinterpret_cast<CUdeviceptr>(p));
    cache_.clear();
    cached_bytes_ = 0;
  }
  static constexpr size_t kMaxCachedBytes = size_t(8) << 30;
  std::mutex mu_;
  std::multimap<size_t, void*> cache_;
  size_t cached_bytes_ = 0;
};

class CudaProgram final : public Program {
 public:
  CudaProgram(CUmodule m, CUfunction f, const CudaLaunchShape& shape) : module_(m), fn_(f), shape_(shape) {}
  ~CudaProgram() override {
    const Driver& d = driver();
    if (d.api.CtxSetCurrent(d.ctx) == CUDA_SUCCESS) d.api.ModuleUnload(module_);
  }
  void run(void** buffers, int64_t begin, int64_t end) const override {
    if (end <= begin) return;
    const Driver& d = driver();
    d.bind();
    std::vector<CUdeviceptr> ptrs(size_t(shape_.num_buffers));
    std::vector<void*> params;
    for (int i = 0; i < shape_.num_buffers; i++) {
      ptrs[size_t(i)] = reinterpret_cast<CUdeviceptr>(buffers[i]);
      params.push_back(&ptrs[size_t(i)]);
    }
    long long b = begin, e = end;
    params.push_back(&b);
    params.push_back(&e);
    int64_t epb = std::max<int64_t>(1, shape_.elements_per_block);
    // Grid-stride loops cover the rest; this many blocks fill any current GPU.
    int64_t grid = std::min<int64_t>((end - begin + epb - 1) / epb, int64_t(1) << 20);
    d.check(d.api.LaunchKernel(fn_, unsigned(grid), 1, 1, unsigned(shape_.block_size), 1, 1, 0, nullptr,
                               params.data(), nullptr),
            ("cuLaunchKernel " + name).c_str());
  }

 private:
  CUmodule module_;
  CUfunction fn_;
  CudaLaunchShape shape_;
};

}  // namespace

const CudaInfo& cuda_info() { return driver().info; }
bool cuda_available() { return cuda_info().available; }

Device* cuda_device() {
  if (!cuda_available()) return nullptr;
  static CudaDevice* d = new CudaDevice();  // never destroyed, like the CPU device
  return d;
}

std::unique_ptr<Program> cuda_load_program(const std::string& image, const std::string& fn,
                                           const CudaLaunchShape& shape, int64_t parallel_size) {
  const Driver& d = driver();
  if (!d.info.available) throw std::runtime_error("tiny cuda: CUDA is not available: " + d.info.reason);
  d.bind();
  std::string log(8192, '\0');
  int opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* vals[] = {&log[0], reinterpret_cast<void*>(uintptr_t(log.size()))};
  CUmodule m = nullptr;
  CUresult r = d.api.ModuleLoadDataEx(&m, image.c_str(), 2, opts, vals);
  if (r != CUDA_SUCCESS) {
    log.resize(std::char_traits<char>::length(log.c_str()));
    throw std::runtime_error("tiny cuda: cuModuleLoadData: " + d.error(r) + (log.empty() ? "" : "\n" + log));
  }
  CUfunction f = nullptr;
  r = d.api.ModuleGetFunction(&f, m, fn.c_str());
  if (r != CUDA_SUCCESS) {
    d.api.ModuleUnload(m);
    throw std::runtime_error("tiny cuda: cuModuleGetFunction(" + fn + "): " + d.error(r));
  }
  auto p = std::make_unique<CudaProgram>(m, f, shape);
  p->name = fn;
  p->parallel_size = parallel_size;
  p->work_per_item = 1;
  return p;
}

}  // namespace tiny
