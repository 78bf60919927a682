// A stand-in for libcuda.so.1 used by test_cuda.cpp (built at test time, loaded
// through TINY_LIBCUDA in a child process): device memory is host memory, and
// cuLaunchKernel calls a host build of the kernel (`host_<name>`, from a
// library the test registers with tiny_mock_register). It lets the engine's
// driver code run end to end on machines without a GPU.
//   TINY_MOCK_CUDA=noinit    cuInit fails (no device)
//   TINY_MOCK_CUDA=nodevice  cuInit works, no GPU is found
//   TINY_MOCK_CUDA=badimage  modules fail to load
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {

std::mutex mu;
std::vector<void*> libraries;
std::set<void*> live;  // allocations
long launches = 0, allocs = 0;

struct Module {
  bool ptx;
};
struct Function {
  std::string name;
};

const char* mode() {
  const char* m = std::getenv("TINY_MOCK_CUDA");
  return m ? m : "";
}

}  // namespace

extern "C" {

// ---- test hooks
void tiny_mock_register(void* library) {
  std::lock_guard<std::mutex> g(mu);
  libraries.push_back(library);
}
long tiny_mock_launches() { return launches; }
long tiny_mock_live_allocations() { return long(live.size()); }
long tiny_mock_allocations() { return allocs; }

// ---- driver API
int cuInit(unsigned) { return std::strcmp(mode(), "noinit") == 0 ? 100 : 0; }
int cuDriverGetVersion(int* v) {
  *v = 13000;
  return 0;
}
int cuDeviceGetCount(int* n) {
  *n = std::strcmp(mode(), "nodevice") == 0 ? 0 : 1;
  return 0;
}
int cuDeviceGet(int* d, int i) {
  *d = i;
  return i == 0 ? 0 : 101;
}
int cuDeviceGetName(char* name, int len, int) {
  std::strncpy(name, "Mock GPU", size_t(len));
  return 0;
}
int cuDeviceGetAttribute(int* v, int attr, int) {
  *v = attr == 75 ? 9 : attr == 76 ? 0 : attr == 16 ? 4 : 0;
  return 0;
}
int cuDevicePrimaryCtxRetain(void** ctx, int) {
  static int c;
  *ctx = &c;
  return 0;
}
int cuCtxSetCurrent(void* ctx) { return ctx ? 0 : 201; }
int cuCtxSynchronize() { return 0; }
int cuMemAlloc_v2(unsigned long long* p, size_t n) {
  void* m = std::malloc(n);
  if (!m) return 2;
  std::lock_guard<std::mutex> g(mu);
  live.insert(m);
  allocs++;
  *p = reinterpret_cast<unsigned long long>(m);
  return 0;
}
int cuMemFree_v2(unsigned long long p) {
  std::lock_guard<std::mutex> g(mu);
  if (!live.erase(reinterpret_cast<void*>(p))) return 1;
  std::free(reinterpret_cast<void*>(p));
  return 0;
}
int cuMemcpyHtoD_v2(unsigned long long dst, const void* src, size_t n) {
  std::memcpy(reinterpret_cast<void*>(dst), src, n);
  return 0;
}
int cuMemcpyDtoH_v2(void* dst, unsigned long long src, size_t n) {
  std::memcpy(dst, reinterpret_cast<void*>(src), n);
  return 0;
}
int cuModuleLoadDataEx(void** m, const void* image, unsigned n, int* opts, void** vals) {
  const char* p = static_cast<const char*>(image);
  bool elf = std::memcmp(p, "\x7f" "ELF", 4) == 0;
  bool ptx = !elf && std::strstr(p, ".entry") != nullptr;
  if (std::strcmp(mode(), "badimage") == 0 || (!elf && !ptx)) {
    for (unsigned i = 0; i < n; i++)
      if (opts[i] == 5) std::strncpy(static_cast<char*>(vals[i]), "mock: image rejected", 64);
    return 200;  // CUDA_ERROR_INVALID_IMAGE
  }
  *m = new Module{ptx};
  return 0;
}
int cuModuleUnload(void* m) {
  delete static_cast<Module*>(m);
  return 0;
}
int cuModuleGetFunction(void** f, void*, const char* name) {
  *f = new Function{name};  // leaked on purpose: handles live as long as their module
  return 0;
}
int cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz, unsigned,
                   void*, void** params, void**) {
  if (gy != 1 || gz != 1 || by != 1 || bz != 1 || gx == 0 || bx == 0 || bx > 1024) return 1;  // invalid value
  std::string sym = "host_" + static_cast<Function*>(f)->name;
  using Host = void (*)(void**, unsigned, unsigned);
  Host fn = nullptr;
  {
    std::lock_guard<std::mutex> g(mu);
    for (auto it = libraries.rbegin(); it != libraries.rend() && !fn; ++it)
      fn = reinterpret_cast<Host>(dlsym(*it, sym.c_str()));
    launches++;
  }
  if (!fn) return 500;  // CUDA_ERROR_NOT_FOUND
  fn(params, gx, bx);
  return 0;
}
int cuGetErrorString(int e, const char** s) {
  static std::map<int, std::string> names = {{100, "no CUDA-capable device is detected"},
                                             {200, "device kernel image is invalid"},
                                             {500, "named symbol not found"}};
  auto it = names.find(e);
  *s = it == names.end() ? "mock error" : it->second.c_str();
  return 0;
}

}  // extern "C"
