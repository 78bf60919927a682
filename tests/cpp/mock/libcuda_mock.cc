// A stand-in for libcuda.so.1 used by test_cuda.cpp (built at test time, loaded
// through TINY_LIBCUDA in a child process): it exercises the engine's loading
// of a real driver library (dlopen, every symbol, cuInit, device queries,
// memory, module loading) and its failure modes. It runs no kernels: the
// emulated device (runtime/cuda_emu.*) runs the CUDA path end to end.
//   TINY_MOCK_CUDA=noinit    cuInit fails (no device)
//   TINY_MOCK_CUDA=nodevice  cuInit works, no GPU is found
//   TINY_MOCK_CUDA=badimage  modules fail to load
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>

namespace {

std::mutex mu;
std::set<void*> live;  // allocations
long allocs = 0;

const char* mode() {
  const char* m = std::getenv("TINY_MOCK_CUDA");
  return m ? m : "";
}

}  // namespace

extern "C" {

// ---- test hooks
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
int cuDeviceTotalMem_v2(size_t* bytes, int) {
  *bytes = size_t(1) << 30;
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
int cuMemHostAlloc(void** p, size_t n, unsigned) {
  *p = std::malloc(n ? n : 1);
  return *p ? 0 : 2;
}
int cuMemFreeHost(void* p) {
  std::free(p);
  return 0;
}
// events: recorded is all the mock knows
int cuEventCreate(void** e, unsigned) {
  *e = new int(0);
  return 0;
}
int cuEventRecord(void* e, void*) {
  *static_cast<int*>(e) = 1;
  return 0;
}
int cuEventQuery(void* e) { return *static_cast<int*>(e) ? 0 : 400; }
int cuEventSynchronize(void* e) { return cuEventQuery(e); }
int cuEventElapsedTime(float* ms, void* a, void* b) {
  *ms = 0;
  return cuEventQuery(a) | cuEventQuery(b);
}
int cuEventDestroy_v2(void* e) {
  delete static_cast<int*>(e);
  return 0;
}
int cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  *total = size_t(1) << 30;
  *free_bytes = *total / 2;
  return 0;
}
int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void* src, size_t n, void*) {
  std::memcpy(reinterpret_cast<void*>(dst), src, n);
  return 0;
}
int cuMemcpyDtoHAsync_v2(void* dst, unsigned long long src, size_t n, void*) {
  std::memcpy(dst, reinterpret_cast<void*>(src), n);
  return 0;
}
int cuMemcpyDtoH_v2(void* dst, unsigned long long src, size_t n) {
  std::memcpy(dst, reinterpret_cast<void*>(src), n);
  return 0;
}
int cuStreamCreate(void** s, unsigned) {
  static int stream;
  *s = &stream;
  return 0;
}
int cuStreamSynchronize(void*) { return 0; }
// no graphs: 801 is CUDA_ERROR_NOT_SUPPORTED
int cuStreamBeginCapture_v2(void*, int) { return 801; }
int cuStreamEndCapture(void*, void**) { return 801; }
int cuGraphInstantiateWithFlags(void**, void*, unsigned long long) { return 801; }
int cuGraphExecUpdate_v2(void*, void*, void*) { return 801; }
int cuGraphLaunch(void*, void*) { return 801; }
int cuGraphDestroy(void*) { return 0; }
int cuGraphExecDestroy(void*) { return 0; }
int cuModuleLoadDataEx(void** m, const void* image, unsigned n, int* opts, void** vals) {
  const char* p = static_cast<const char*>(image);
  bool elf = std::memcmp(p, "\x7f" "ELF", 4) == 0;
  bool ptx = !elf && std::strstr(p, ".entry") != nullptr;
  if (std::strcmp(mode(), "badimage") == 0 || (!elf && !ptx)) {
    for (unsigned i = 0; i < n; i++)
      if (opts[i] == 5) std::strncpy(static_cast<char*>(vals[i]), "mock: image rejected", 64);
    return 200;  // CUDA_ERROR_INVALID_IMAGE
  }
  static int module;
  *m = &module;
  return 0;
}
int cuModuleUnload(void*) { return 0; }
int cuModuleGetFunction(void** f, void*, const char*) {
  static int function;
  *f = &function;
  return 0;
}
int cuLaunchKernel(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, void*, void**, void**) {
  return 801;  // the mock runs no kernels
}
int cuGetErrorString(int e, const char** s) {
  static std::map<int, std::string> names = {{100, "no CUDA-capable device is detected"},
                                             {200, "device kernel image is invalid"},
                                             {801, "operation not supported"}};
  auto it = names.find(e);
  *s = it == names.end() ? "mock error" : it->second.c_str();
  return 0;
}

}  // extern "C"
