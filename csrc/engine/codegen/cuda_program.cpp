#include "engine/codegen/cuda_program.h"

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/runtime/counters.h"
#include "engine/runtime/cuda_device.h"
#include "engine/runtime/disk_cache.h"
#include "engine/runtime/thread_pool.h"

namespace tiny {
namespace {

CudaLaunchShape launch_shape(const CudaKernelSource& s) {
  return {s.block_size, s.elements_per_block(), s.num_buffers, s.num_params, s.serial, s.split, s.split_threads,
          s.partial_slots};
}

// Keeps a failing kernel's source where the user can read it; returns the path.
std::string keep_source(const CudaKernelSource& s) {
  std::string dir = disk_cache_dir("failed");
  std::string path = (dir.empty() ? "/tmp" : dir) + "/" + s.name + ".cu";
  return write_file_atomic(path, s.source) ? path : "(could not be written)";
}

// What a GPU module is built from, in the order tried: a device binary for exactly
// this GPU; PTX (JIT-compiled by the driver) when this NVRTC does not know the GPU or
// the driver refuses the binary; PTX for sm_80 as the last resort.
struct GpuTarget {
  int arch;
  bool cubin;
  std::string name() const { return std::string(cubin ? "sm_" : "compute_") + std::to_string(arch); }
};

std::vector<GpuTarget> gpu_targets() {
  int arch = cuda_default_arch();
  return {{arch, true}, {arch, false}, {80, false}};
}

// A kernel's image for one target, from the disk cache (by source and target) or
// compiled by NVRTC and cached; empty, with NVRTC's log added to `errors`, when the
// compiler rejects the source. Thread-safe: NVRTC compiles separate programs
// concurrently and cache files are written atomically.
std::string gpu_image(const CudaKernelSource& src, const GpuTarget& t, std::string& errors) {
  const NvrtcInfo& nv = nvrtc_info();
  if (!nv.available) throw std::runtime_error("tiny cuda: NVRTC is not available: " + nv.reason);
  std::string dir = disk_cache_dir("cuda-nvrtc" + std::to_string(nv.major) + "." + std::to_string(nv.minor));
  std::string path = dir.empty() ? "" : dir + "/" + content_hash(src.source) + "-" + t.name() + (t.cubin ? ".cubin" : ".ptx");
  std::string image;
  if (!path.empty() && read_file(path, image)) {
    counters().disk_cache_hits++;
    return image;
  }
  NvrtcOutput out = nvrtc_compile(src.source, src.name, t.arch, t.cubin);
  if (!out.ok) {
    errors += "\n[" + t.name() + "] " + out.log;
    return "";
  }
  counters().compiles++;
  if (!path.empty()) write_file_atomic(path, out.code);
  return out.code;
}

// A GPU module for one kernel, from the first target whose image the driver loads;
// `first` is the first target's image (and `errors` what building it reported),
// made beforehand so that kernels compile in parallel.
std::unique_ptr<Program> load_for_gpu(Device& device, const CudaKernelSource& src, const std::string& first,
                                      std::string errors) {
  std::vector<GpuTarget> targets = gpu_targets();
  for (size_t i = 0; i < targets.size(); i++) {
    std::string image = i == 0 ? first : gpu_image(src, targets[i], errors);
    if (image.empty()) continue;
    try {
      return std::move(cuda_load_programs(device, image, {src.name}, {launch_shape(src)}, {src.outputs})[0]);
    } catch (const std::exception& e) {
      errors += "\n[" + targets[i].name() + "] " + e.what();
    }
  }
  throw std::runtime_error("tiny cuda: cannot build kernel " + src.name + " (source: " + keep_source(src) + "):" +
                           errors.substr(0, 8000));
}

// TINY_EMU_NVRTC=1: the emulated device also compiles every kernel with NVRTC,
// so code the GPU's compiler would reject fails here too.
void check_with_nvrtc(const CudaKernelSource& src) {
  static const bool on = [] {
    const char* e = std::getenv("TINY_EMU_NVRTC");
    return e && *e && std::string(e) != "0";
  }();
  if (!on) return;
  if (!nvrtc_available()) throw std::runtime_error("tiny cuda-emu: TINY_EMU_NVRTC is set but NVRTC is not available: " + nvrtc_info().reason);
  NvrtcOutput out = nvrtc_compile(src.source, src.name, 80, false);
  if (!out.ok)
    throw std::runtime_error("tiny cuda-emu: NVRTC rejects kernel " + src.name + " (source: " + keep_source(src) +
                             "):\n" + out.log.substr(0, 8000));
}

}  // namespace

std::string cuda_options_key(const CudaRenderOptions& o) {
  std::string key = std::to_string(o.block_reduce) + "," + std::to_string(o.block_size) + "," +
                    std::to_string(o.multiprocessors) + "," + std::to_string(o.arch) + ",";
  for (bool on : {o.register_tile, o.vector_lanes, o.shared_tiles, o.tensor_cores, o.fused_multiply_add, o.occupancy,
                  o.vector_staging, o.ldmatrix, o.balanced_splits, o.async_copies})
    key += on ? '1' : '0';
  return key;
}

CudaRenderOptions cuda_options_from_env() {
  CudaRenderOptions o;
  // optimizations not yet measured on a GPU, switched on by name
  if (const char* on = std::getenv("TINY_CUDA_ON"); on && *on) {
    std::stringstream list(on);
    for (std::string name; std::getline(list, name, ',');) {
      if (name == "async") o.async_copies = true;
      else if (!name.empty())
        throw std::invalid_argument("TINY_CUDA_ON: unknown optimization '" + name + "' (async)");
    }
  }
  const char* e = std::getenv("TINY_CUDA_OFF");
  if (!e || !*e) return o;
  std::stringstream list(e);
  for (std::string name; std::getline(list, name, ',');) {
    if (name == "lanes") o.vector_lanes = false;
    else if (name == "mma") o.tensor_cores = false;
    else if (name == "shared") o.shared_tiles = false;
    else if (name == "tiles") o.register_tile = o.shared_tiles = false;
    else if (name == "fma") o.fused_multiply_add = false;
    else if (name == "occupancy") o.occupancy = false;
    else if (name == "vstage") o.vector_staging = false;
    else if (name == "ldmatrix") o.ldmatrix = false;
    else if (name == "balance") o.balanced_splits = false;
    else if (!name.empty())
      throw std::invalid_argument("TINY_CUDA_OFF: unknown optimization '" + name +
                                  "' (balance, fma, ldmatrix, lanes, mma, occupancy, shared, tiles, vstage)");
  }
  return o;
}

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

std::vector<std::shared_ptr<Program>> cuda_programs(Device& device, const std::vector<const Kernel*>& kernels,
                                                    const CudaRenderOptions& opt) {
  if (!is_cuda(device)) throw std::invalid_argument("cuda_programs: " + device.name() + " is not a CUDA device");
  static std::mutex mu;
  static auto* cache = new std::unordered_map<std::string, std::shared_ptr<Program>>();
  std::lock_guard<std::mutex> g(mu);
  CudaRenderOptions o = opt;
  DeviceProperties props = device.properties();
  if (o.multiprocessors == 0) o.multiprocessors = props.multiprocessors;
  if (o.arch == 0) o.arch = props.cc_major * 10 + props.cc_minor;
  std::string tag = device.name() + "|" + cuda_options_key(o) + "|";
  std::vector<std::string> keys;
  std::vector<CudaKernelSource> fresh;  // distinct kernels not compiled before
  std::unordered_map<std::string, size_t> fresh_index;
  for (const Kernel* k : kernels) {
    keys.push_back(tag + k->key());
    if (cache->count(keys.back()) || fresh_index.count(keys.back())) continue;
    fresh_index[keys.back()] = fresh.size();
    fresh.push_back(render_cuda(*k, o));
    if (debug_level() >= 4) std::fprintf(stderr, "%s\n", fresh.back().kernel.c_str());
  }
  std::vector<std::unique_ptr<Program>> built;
  if (!fresh.empty() && device.kind() == DeviceKind::CudaEmu) {
    std::string source = cuda_prelude();
    std::vector<EmuKernel> names;
    std::vector<std::string> fns;
    std::vector<CudaLaunchShape> shapes;
    std::vector<int64_t> sizes;
    for (auto& s : fresh) {
      check_with_nvrtc(s);
      source += "\n" + s.kernel;
      names.push_back({s.name, s.cooperative()});
      fns.push_back(s.name);
      shapes.push_back(launch_shape(s));
      sizes.push_back(s.outputs);
    }
    built = cuda_load_programs(device, cuda_emu_compile(source, names), fns, shapes, sizes);
  } else {
    // NVRTC takes 0.1-1 s a kernel: a new schedule's kernels compile on every core, then load in order
    std::vector<std::string> images(fresh.size()), errors(fresh.size());
    GpuTarget first = gpu_targets()[0];
    thread_pool().for_each_task(fresh.size(), [&](size_t i) { images[i] = gpu_image(fresh[i], first, errors[i]); });
    for (size_t i = 0; i < fresh.size(); i++) built.push_back(load_for_gpu(device, fresh[i], images[i], errors[i]));
  }
  for (auto& [key, i] : fresh_index) {
    built[i]->name = fresh[i].name;
    cache->emplace(key, std::shared_ptr<Program>(std::move(built[i])));
  }
  std::vector<std::shared_ptr<Program>> out;
  for (auto& key : keys) out.push_back(cache->at(key));
  return out;
}

}  // namespace tiny
