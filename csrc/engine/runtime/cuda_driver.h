// The subset of the CUDA driver API (cuda.h) the engine calls, as a table of
// function pointers: filled from libcuda.so.1 for a GPU, or from the emulator
// (cuda_emu.cpp) for TINY_DEVICE=cuda-emu, so both run the same device code.
// Stable ABI: the _v2 names are the ones every current driver exports.
#pragma once
#include <cstddef>
#include <cstdint>

namespace tiny::cu {

using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
using CUgraph = void*;
using CUgraphExec = void*;
using CUevent = void*;
using CUdeviceptr = unsigned long long;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_OUT_OF_MEMORY = 2;
constexpr CUresult CUDA_ERROR_INVALID_IMAGE = 200;
constexpr CUresult CUDA_ERROR_INVALID_HANDLE = 400;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr int CU_JIT_ERROR_LOG_BUFFER = 5;
constexpr int CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
constexpr unsigned CU_STREAM_NON_BLOCKING = 1;
constexpr int CU_STREAM_CAPTURE_MODE_RELAXED = 2;

// CUgraphExecUpdateResultInfo
struct GraphUpdateInfo {
  int result;
  void* error_node;
  void* error_from_node;
};

struct Api {
  CUresult (*Init)(unsigned);
  CUresult (*DriverGetVersion)(int*);
  CUresult (*DeviceGetCount)(int*);
  CUresult (*DeviceGet)(CUdevice*, int);
  CUresult (*DeviceGetName)(char*, int, CUdevice);
  CUresult (*DeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*DeviceTotalMem)(size_t*, CUdevice);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*CtxSetCurrent)(CUcontext);
  CUresult (*CtxSynchronize)();
  CUresult (*MemAlloc)(CUdeviceptr*, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemGetInfo)(size_t*, size_t*);
  CUresult (*MemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*MemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  // (synchronous, on the legacy stream: it does not wait for work on a non-blocking stream)
  CUresult (*MemcpyDtoH)(void*, CUdeviceptr, size_t);
  CUresult (*StreamCreate)(CUstream*, unsigned);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*StreamBeginCapture)(CUstream, int);
  CUresult (*StreamEndCapture)(CUstream, CUgraph*);
  CUresult (*GraphInstantiate)(CUgraphExec*, CUgraph, unsigned long long);
  CUresult (*GraphExecUpdate)(CUgraphExec, CUgraph, GraphUpdateInfo*);
  CUresult (*GraphLaunch)(CUgraphExec, CUstream);
  CUresult (*GraphDestroy)(CUgraph);
  CUresult (*GraphExecDestroy)(CUgraphExec);
  CUresult (*ModuleLoadDataEx)(CUmodule*, const void*, unsigned, int*, void**);
  CUresult (*ModuleUnload)(CUmodule);
  CUresult (*ModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream,
                           void**, void**);
  CUresult (*GetErrorString)(CUresult, const char**);
  CUresult (*MemHostAlloc)(void**, size_t, unsigned);
  CUresult (*MemFreeHost)(void*);
  CUresult (*EventCreate)(CUevent*, unsigned);
  CUresult (*EventRecord)(CUevent, CUstream);
  CUresult (*EventQuery)(CUevent);
  CUresult (*EventSynchronize)(CUevent);
  CUresult (*EventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*EventDestroy)(CUevent);
};

// Each Api field with the driver symbol it is loaded from.
#define TINY_CUDA_API(X)                                                                                          \
  X(Init, cuInit) X(DriverGetVersion, cuDriverGetVersion) X(DeviceGetCount, cuDeviceGetCount)                      \
  X(DeviceGet, cuDeviceGet) X(DeviceGetName, cuDeviceGetName) X(DeviceGetAttribute, cuDeviceGetAttribute)           \
  X(DeviceTotalMem, cuDeviceTotalMem_v2) X(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain)                         \
  X(CtxSetCurrent, cuCtxSetCurrent) X(CtxSynchronize, cuCtxSynchronize) X(MemAlloc, cuMemAlloc_v2)                  \
  X(MemFree, cuMemFree_v2) X(MemGetInfo, cuMemGetInfo_v2) X(MemcpyHtoDAsync, cuMemcpyHtoDAsync_v2)                  \
  X(MemcpyDtoHAsync, cuMemcpyDtoHAsync_v2) X(MemcpyDtoH, cuMemcpyDtoH_v2) X(StreamCreate, cuStreamCreate)            \
  X(StreamSynchronize, cuStreamSynchronize) X(StreamBeginCapture, cuStreamBeginCapture_v2)                          \
  X(StreamEndCapture, cuStreamEndCapture) X(GraphInstantiate, cuGraphInstantiateWithFlags)                          \
  X(GraphExecUpdate, cuGraphExecUpdate_v2) X(GraphLaunch, cuGraphLaunch) X(GraphDestroy, cuGraphDestroy)            \
  X(GraphExecDestroy, cuGraphExecDestroy) X(ModuleLoadDataEx, cuModuleLoadDataEx) X(ModuleUnload, cuModuleUnload)   \
  X(ModuleGetFunction, cuModuleGetFunction) X(LaunchKernel, cuLaunchKernel) X(GetErrorString, cuGetErrorString)    \
  X(MemHostAlloc, cuMemHostAlloc) X(MemFreeHost, cuMemFreeHost) X(EventCreate, cuEventCreate)                      \
  X(EventRecord, cuEventRecord) X(EventQuery, cuEventQuery) X(EventSynchronize, cuEventSynchronize)                \
  X(EventElapsedTime, cuEventElapsedTime) X(EventDestroy, cuEventDestroy_v2)

}  // namespace tiny::cu
