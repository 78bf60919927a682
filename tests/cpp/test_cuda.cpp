// CUDA code generation. Every case builds tensors through the engine API, takes
// the scheduler's kernels, and
//   1. renders CUDA C and compiles it with NVRTC to a sm_80 device binary (both
//      reduce modes where a kernel reduces): no errors, no warnings;
//   2. runs the rendered source on the host (tests/cpp/cuda_host_shim.h turns it
//      into C++ compiled by the build's compiler) in both reduce modes and
//      compares every requested result with the CPU backend bit for bit
//      (integers, casts, copies, + - * /) or within a dtype's tolerance;
//   3. when a GPU is present (cuda_available()), runs them on it and compares
//      the same way.
// NVRTC is found as runtime/nvrtc.h describes (TINY_NVRTC first, then the
// CUDA toolkit, the loader path and pip's nvidia wheels); without it the cases
// print why and skip.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "engine/codegen/cuda_program.h"
#include "engine/codegen/program_cache.h"
#include "engine/runtime/counters.h"
#include "engine/runtime/cuda_device.h"
#include "engine/runtime/nvrtc.h"
#include "engine/schedule/scheduler.h"
#include "engine/tensor/tensor.h"
#include "test_helpers.h"

#ifndef TINY_TEST_CXX
#define TINY_TEST_CXX "c++"
#endif
#ifndef TINY_TEST_MOCK_CUDA
#define TINY_TEST_MOCK_CUDA ""
#endif

using namespace tiny;

namespace {

// ---------------------------------------------------------------- inputs

uint32_t next(uint32_t& s) {
  s = s * 1664525u + 1013904223u;
  return s >> 8;
}

// Values of `dt` with the edge cases each kind of value has: NaN, infinities,
// signed zeros, ties for rounding, float overflow for casts and 16-bit floats,
// integer extremes, -1 and 0 divisors, shift counts past the width.
std::vector<uint8_t> make_bytes(DType dt, int64_t n, uint32_t seed, bool specials) {
  std::vector<uint8_t> out(size_t(n) * itemsize(dt));
  uint32_t s = seed * 7919u + 17u;
  const double fspecial[] = {NAN, INFINITY, -INFINITY, -0.0, 0.0, 0.5, 1.5, 2.5, -2.5, 1e30, -1e30, 65504.0,
                             70000.0, 1e-6, 3e9, -3e9, 1.0, -1.0};
  const int64_t ispecial[] = {0, -1, 1, 7, 8, 31, 32, 63, 64, std::numeric_limits<int64_t>::min(),
                              std::numeric_limits<int64_t>::max(), -128, 127, 255, 32767, -32768, 2147483647};
  for (int64_t i = 0; i < n; i++) {
    uint32_t r = next(s);
    bool sp = specials && r % 5 == 0;
    uint8_t* p = out.data() + size_t(i) * itemsize(dt);
    if (is_float(dt)) {
      double v = sp ? fspecial[next(s) % (sizeof fspecial / sizeof *fspecial)] : (double(next(s) % 80000) / 10000.0 - 4.0);
      if (dt == DType::Float64) std::memcpy(p, &v, 8);
      else if (dt == DType::Float32) { float f = float(v); std::memcpy(p, &f, 4); }
      else if (dt == DType::Float16) { uint16_t h = float_to_half_bits(float(v)); std::memcpy(p, &h, 2); }
      else { uint16_t h = float_to_bfloat16_bits(float(v)); std::memcpy(p, &h, 2); }
      continue;
    }
    int64_t v;
    if (dt == DType::Bool) v = r & 1;
    else if (sp) v = ispecial[next(s) % (sizeof ispecial / sizeof *ispecial)];
    else if (r % 2) v = int64_t(next(s) % 11) - 5;
    else v = int64_t((uint64_t(next(s)) << 40) ^ (uint64_t(next(s)) << 20) ^ next(s));
    switch (dt) {
      case DType::Bool: case DType::UInt8: case DType::Int8: { uint8_t x = uint8_t(v); std::memcpy(p, &x, 1); break; }
      case DType::Int16: { int16_t x = int16_t(v); std::memcpy(p, &x, 2); break; }
      case DType::Int32: { int32_t x = int32_t(v); std::memcpy(p, &x, 4); break; }
      default: std::memcpy(p, &v, 8); break;
    }
  }
  return out;
}

Tensor input(DType dt, const Shape& shape, uint32_t seed, bool specials = true) {
  auto bytes = make_bytes(dt, numel(shape), seed, specials);
  return Tensor::from_host(bytes.data(), shape, dt);
}

// Non-negative, moderate values (sums, products, logs).
Tensor positive(DType dt, const Shape& shape, uint32_t seed) {
  Tensor r = Tensor::rand(shape, seed, 0);
  return r.binary(Op::Add, Tensor::full(shape, Scalar::from_double(0.25), DType::Float32)).cast(dt);
}

const DType kAll[] = {DType::Bool, DType::UInt8, DType::Int8, DType::Int16, DType::Int32,
                      DType::Int64, DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
const DType kFloats[] = {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64};
const DType kInts[] = {DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64};

// ---------------------------------------------------------------- comparing

double element(const uint8_t* p, DType dt, int64_t i) {
  p += size_t(i) * itemsize(dt);
  switch (dt) {
    case DType::Float16: { uint16_t h; std::memcpy(&h, p, 2); return half_bits_to_float(h); }
    case DType::BFloat16: { uint16_t h; std::memcpy(&h, p, 2); return bfloat16_bits_to_float(h); }
    case DType::Float32: { float f; std::memcpy(&f, p, 4); return f; }
    case DType::Float64: { double d; std::memcpy(&d, p, 8); return d; }
    case DType::Bool: case DType::UInt8: return double(*p);
    case DType::Int8: return double(int8_t(*p));
    case DType::Int16: { int16_t x; std::memcpy(&x, p, 2); return x; }
    case DType::Int32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case DType::Int64: { int64_t x; std::memcpy(&x, p, 8); return double(x); }
  }
  return 0;
}

std::string hex_element(const uint8_t* p, DType dt, int64_t i) {
  std::ostringstream os;
  os << std::hex;
  for (size_t b = itemsize(dt); b-- > 0;) os << (p[size_t(i) * itemsize(dt) + b] >> 4) << (p[size_t(i) * itemsize(dt) + b] & 15);
  return os.str();
}

// Tolerances for float math that is not exactly rounded (transcendentals,
// reductions in another order): a few ulps of the result's dtype.
std::pair<double, double> tolerance(DType dt) {
  switch (dt) {
    case DType::Float16: return {4e-3, 2e-3};
    case DType::BFloat16: return {3e-2, 2e-2};
    case DType::Float32: return {2e-5, 1e-5};
    default: return {1e-12, 1e-12};
  }
}

// How a result must match the CPU's: bit for bit (pure copies and bitcasts),
// the same values (any NaN for a NaN: a GPU's arithmetic returns its canonical
// NaN, 0x7fffffff for float32), or within the dtype's tolerance.
enum class Match { Bits, Exact, Close };

// Compares `got` with the CPU's `want`; "" when they agree.
std::string compare(const uint8_t* want, const uint8_t* got, DType dt, int64_t n, Match match) {
  std::ostringstream os;
  int bad = 0;
  for (int64_t i = 0; i < n && bad < 5; i++) {
    bool same = std::memcmp(want + size_t(i) * itemsize(dt), got + size_t(i) * itemsize(dt), itemsize(dt)) == 0;
    if (same) continue;
    double w = element(want, dt, i), g = element(got, dt, i);
    if (match != Match::Bits && is_float(dt)) {
      if (std::isnan(w) && std::isnan(g)) continue;
      if (w == g && (w != 0 || std::signbit(w) == std::signbit(g))) continue;
      auto [rtol, atol] = tolerance(dt);
      if (match == Match::Close && std::isfinite(w) && std::isfinite(g) && std::fabs(w - g) <= atol + rtol * std::fabs(w))
        continue;
    }
    os << "  [" << i << "] cpu " << w << " (0x" << hex_element(want, dt, i) << ") vs " << g << " (0x"
       << hex_element(got, dt, i) << ")\n";
    bad++;
  }
  return os.str();
}

std::string shell_quote(const std::string& s) {
  std::string r = "'";
  for (char c : s) r += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return r + "'";
}

// ---------------------------------------------------------------- the check

using Bytes = std::vector<uint8_t>;
using Memory = std::map<const Buffer*, Bytes>;  // every buffer owner's bytes

bool has_reduce(const Kernel& k) { return k.name()[0] == 'r'; }

// Runs a schedule's kernels on a CUDA device (the GPU or the emulated one)
// through the engine's own path: cuda_programs, device memory, copies, launch.
// `shift`: every buffer starts that many bytes past an allocation's (aligned) start.
Memory run_on(Device& dev, const Schedule& sched, const Memory& before, const CudaRenderOptions& opt = {},
              size_t shift = 0) {
  std::vector<const Kernel*> ks;
  for (auto& k : sched.kernels) ks.push_back(&k);
  auto programs = cuda_programs(dev, ks, opt);
  std::map<const Buffer*, void*> mem;
  for (auto& [owner, bytes] : before) {
    mem[owner] = static_cast<char*>(dev.alloc(bytes.size() + shift)) + shift;
    dev.copy_in(mem[owner], bytes.data(), bytes.size());
  }
  for (size_t i = 0; i < ks.size(); i++) {
    std::vector<void*> args;
    for (auto& b : ks[i]->buffers) args.push_back(static_cast<char*>(mem.at(b->owner())) + b->owner_offset());
    dev.launch(LaunchStep(programs[i].get(), std::move(args), ks[i]->launch_params()));
  }
  Memory out = before;
  for (auto& [owner, p] : mem) {
    dev.copy_out(out[owner].data(), p, out[owner].size());
    dev.free(static_cast<char*>(p) - shift, out[owner].size() + shift);
  }
  return out;
}

// Host copies of every buffer a schedule touches before anything runs: inputs hold
// data, the rest a pattern the kernels must overwrite.
Memory initial_memory(const Schedule& sched) {
  Memory before;
  for (auto& k : sched.kernels)
    for (auto& b : k.buffers) {
      const Buffer* o = b->owner();
      if (before.count(o)) continue;
      Bytes bytes(o->nbytes(), 0xA5);
      if (o->allocated() && o->nbytes()) const_cast<Buffer*>(o)->copy_out(bytes.data(), o->nbytes());
      before[o] = std::move(bytes);
    }
  return before;
}

class CudaCheck {
 public:
  CudaCheck& add(const Tensor& t, bool exact, const std::string& label = "") {
    targets_.push_back({t, exact ? Match::Exact : Match::Close});
    labels_.push_back(label);
    return *this;
  }
  // Also run on the emulated device with these options (buffers `shift` bytes past alignment).
  CudaCheck& with(const CudaRenderOptions& o, const std::string& label, size_t shift = 0) {
    options_.push_back({label, o, shift});
    return *this;
  }
  // The result must match the CPU bit for bit (NaN payloads included).
  CudaCheck& add_bits(const Tensor& t, const std::string& label = "") {
    targets_.push_back({t, Match::Bits});
    labels_.push_back(label);
    return *this;
  }

  void run() {
    std::vector<NodeRef> nodes;
    for (auto& t : targets_) nodes.push_back(t.first.node());
    Schedule sched = create_schedule(nodes, *cpu_device());
    ASSERT_FALSE(sched.kernels.empty());
    kernels_ = int(sched.kernels.size());

    Memory before = initial_memory(sched);

    // 1. NVRTC: every kernel in the mode the renderer picks, and the other mode for reduces,
    //    for a GPU with tensor cores.
    for (auto& k : sched.kernels) {
      std::vector<int> modes = {-1};
      if (has_reduce(k)) modes = {0, 1};
      for (int m : modes) {
        CudaRenderOptions o;
        o.block_reduce = m;
        o.arch = 80;
        sources_.push_back(render_cuda(k, o).kernel);
        if (!nvrtc_available()) continue;
        CudaBuild b = build_cuda(k, 80, /*cubin=*/true, o);
        EXPECT_TRUE(b.out.ok) << b.out.log << "\n" << b.src.source;
        EXPECT_EQ(b.out.log, "") << b.src.kernel;
        EXPECT_FALSE(b.out.code.empty());
      }
      for (auto& v : options_) {  // and as each variant renders it
        if (!nvrtc_available()) break;
        CudaRenderOptions o = v.options;
        if (!o.arch) o.arch = 80;  // a GPU with tensor cores, as above
        CudaBuild b = build_cuda(k, o.arch, /*cubin=*/true, o);
        EXPECT_TRUE(b.out.ok) << v.label << ": " << b.out.log << "\n" << b.src.source;
        EXPECT_EQ(b.out.log, "") << v.label << ": " << b.src.kernel;
      }
    }

    // 2. the emulated device, both reduce modes (small blocks: the grid-stride
    //    loops wrap around and block reductions run every tree level)
    std::vector<std::pair<std::string, Memory>> results;
    Device* emu = cuda_emu_device();
    ASSERT_NE(emu, nullptr) << cuda_emu_info().reason;
    for (int m = 0; m < 2; m++) {
      CudaRenderOptions o;
      o.block_reduce = m;
      o.block_size = m ? 32 : 64;
      results.emplace_back(m ? "emulated, reduce per block" : "emulated, reduce per thread", run_on(*emu, sched, before, o));
    }
    // and one output per thread where the renderer gave threads register tiles or
    // vector lanes; lanes also with buffers 8 bytes past 16-byte alignment (32-bit
    // lanes then load element by element, 16-bit ones still as vectors)
    CudaRenderOptions per_thread, untiled;
    per_thread.block_reduce = untiled.block_reduce = 0;
    untiled.register_tile = false;
    untiled.vector_lanes = false;
    CudaRenderOptions per_block;
    per_block.block_reduce = 1;
    per_block.block_size = 32;
    bool any_tile = false, any_lanes = false, thread_vectors = false, block_vectors = false;
    for (auto& k : sched.kernels) {
      CudaKernelSource src = render_cuda(k, per_thread);
      any_tile |= src.tile_cols > 1;
      any_lanes |= src.lanes > 1;
      thread_vectors |= src.vectors;
      block_vectors |= render_cuda(k, per_block).vectors;
    }
    if (any_tile || any_lanes) results.emplace_back("emulated, one output per thread", run_on(*emu, sched, before, untiled));
    CudaRenderOptions registers_only = per_thread;
    registers_only.shared_tiles = false;
    bool any_shared = false;
    for (auto& k : sched.kernels) any_shared |= render_cuda(k, per_thread).shared_tile;
    if (any_shared) results.emplace_back("emulated, tiles without shared memory", run_on(*emu, sched, before, registers_only));
    if (thread_vectors) results.emplace_back("emulated, buffers 8 bytes off", run_on(*emu, sched, before, per_thread, 8));
    if (block_vectors)
      results.emplace_back("emulated, reduce per block, buffers 8 bytes off", run_on(*emu, sched, before, per_block, 8));
    for (auto& [label, o, shift] : options_) results.emplace_back("emulated, " + label, run_on(*emu, sched, before, o, shift));
    // 3. the GPU, when there is one
    if (Device* gpu = cuda_device()) results.emplace_back("on the GPU", run_on(*gpu, sched, before));

    // 4. the CPU backend: what realize() does
    for (auto& k : sched.kernels) {
      auto p = cpu_program(k);
      std::vector<void*> ptrs;
      for (auto& b : k.buffers) ptrs.push_back(b->ptr());
      cpu_device()->launch(LaunchStep(p.get(), std::move(ptrs), k.launch_params()));
    }
    cpu_device()->synchronize();  // the CPU's results are read from its memory below
    for (auto& [node, buf] : sched.realized) node->set_realized(buf);

    // 5. compare every requested value
    for (size_t ti = 0; ti < targets_.size(); ti++) {
      const Tensor& t = targets_[ti].first;
      BufferRef buf = t.node()->realized();
      ASSERT_TRUE(buf);
      if (!before.count(buf->owner())) continue;  // realized before: nothing ran for it
      const uint8_t* want = static_cast<const uint8_t*>(buf->ptr());
      std::string what = labels_[ti] + " " + dtype_name(buf->dtype()) + shape_str(t.shape());
      // an alias (bitcast) starts where its owner starts
      for (auto& [mode, mem] : results) {
        std::string diff = compare(want, mem.at(buf->owner()).data() + buf->owner_offset(), buf->dtype(), buf->numel(), targets_[ti].second);
        EXPECT_EQ(diff, "") << what << " " << mode << "\n" << kernels_text();
      }
    }
  }

  int kernels() const { return kernels_; }
  const std::vector<std::string>& sources() const { return sources_; }

 private:
  std::string kernels_text() const {
    std::string s;
    for (auto& k : sources_) s += k;
    return s.substr(0, 20000);
  }
  std::vector<std::pair<Tensor, Match>> targets_;
  std::vector<std::string> labels_;
  struct Variant {
    std::string label;
    CudaRenderOptions options;
    size_t shift;
  };
  std::vector<Variant> options_;
  std::vector<std::string> sources_;
  int kernels_ = 0;
};

class Cuda : public ::testing::Test {};

bool exact_float_op(Op op) {
  switch (op) {
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Max: case Op::Min: case Op::Neg: case Op::Abs:
    case Op::Sqrt: case Op::Recip: case Op::Trunc: case Op::Floor: case Op::Ceil: case Op::Round: case Op::Sign:
    case Op::IsNan: case Op::CmpLt: case Op::CmpLe: case Op::CmpEq: case Op::CmpNe: case Op::Copysign:
    case Op::Mod: case Op::Fmod: case Op::FloorMod:
      return true;
    default:
      return false;
  }
}

// ---------------------------------------------------------------- child processes


std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

// Runs this test binary again with `env` and a gtest filter; its exit code and output.
std::pair<int, std::string> run_child(const std::string& env, const std::string& filter) {
  char path[] = "/tmp/tiny_cuda_childXXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return {-1, "mkstemp failed"};
  close(fd);
  std::string cmd = env + " " + shell_quote(self_exe()) + " --gtest_filter=" + shell_quote(filter) + " > " +
                    shell_quote(path) + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::remove(path);
  return {rc, ss.str()};
}

// A function of the mock libcuda this process runs on ($TINY_LIBCUDA).
template <typename T>
T mock_fn(const char* name) {
  const char* p = std::getenv("TINY_LIBCUDA");
  void* lib = p ? dlopen(p, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  return lib ? reinterpret_cast<T>(dlsym(lib, name)) : nullptr;
}

// Builds tests/cpp/mock/libcuda_mock.cc into `dir`.
std::string build_mock(const std::string& dir) {
  std::string so = dir + "/libcuda_mock.so";
  std::string cmd = shell_quote(TINY_TEST_CXX) + " -std=c++17 -O1 -shared -fPIC " + shell_quote(TINY_TEST_MOCK_CUDA) +
                    " -o " + shell_quote(so) + " -ldl > /dev/null 2>&1";
  return std::system(cmd.c_str()) == 0 ? so : "";
}

struct TempDir {
  std::string path;
  TempDir() {
    char d[] = "/tmp/tiny_cuda_mockXXXXXX";
    if (mkdtemp(d)) path = d;
  }
  ~TempDir() {
    if (!path.empty()) std::system(("rm -rf " + shell_quote(path)).c_str());
  }
};

}  // namespace

// ---------------------------------------------------------------- environment

TEST(CudaEnv, NvrtcFoundOrExplained) {
  const NvrtcInfo& i = nvrtc_info();
  std::printf("[ nvrtc    ] %s\n", i.available ? (i.path + " (" + std::to_string(i.major) + "." +
                                                  std::to_string(i.minor) + ")").c_str()
                                                : i.reason.c_str());
  if (i.available) {
    EXPECT_FALSE(i.path.empty());
    EXPECT_GE(i.major, 11);
    EXPECT_TRUE(i.reason.empty());
  } else {
    EXPECT_NE(i.reason.find("TINY_NVRTC"), std::string::npos);
  }
  // the documented order: $TINY_NVRTC, CUDA_HOME/CUDA_PATH, the loader, fixed places, pip wheels
  auto c = nvrtc_candidates();
  ASSERT_FALSE(c.empty());
  auto pos = [&](const std::string& s) { return std::find(c.begin(), c.end(), s) - c.begin(); };
  // $CUDA_HOME / $CUDA_PATH (when set) before the loader's search, the loader before fixed places
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    const char* home = std::getenv(var);
    if (home && *home) {
      EXPECT_LT(pos(std::string(home) + "/lib64/libnvrtc.so"), pos("libnvrtc.so")) << var;
    }
  }
  EXPECT_LT(pos("libnvrtc.so"), pos("/usr/lib64/libnvrtc.so"));
  if (const char* e = std::getenv("TINY_NVRTC")) {
    struct stat st;
    if (*e && stat(e, &st) == 0 && !S_ISDIR(st.st_mode)) {
      EXPECT_EQ(c[0], e);
    }
  }
}

TEST(CudaEnv, OptimizationsSwitchedOffByName) {
  setenv("TINY_CUDA_OFF", "lanes,shared", 1);
  CudaRenderOptions o = cuda_options_from_env();
  EXPECT_FALSE(o.vector_lanes);
  EXPECT_FALSE(o.shared_tiles);
  EXPECT_TRUE(o.register_tile);
  EXPECT_TRUE(o.fused_multiply_add);
  EXPECT_TRUE(o.vector_staging && o.ldmatrix && o.balanced_splits);
  setenv("TINY_CUDA_OFF", "tiles,fma,occupancy,vstage,ldmatrix,balance", 1);
  o = cuda_options_from_env();
  EXPECT_FALSE(o.fused_multiply_add);
  EXPECT_FALSE(o.occupancy);
  EXPECT_FALSE(o.vector_staging);
  EXPECT_FALSE(o.ldmatrix);
  EXPECT_FALSE(o.balanced_splits);
  EXPECT_TRUE(o.vector_lanes);
  EXPECT_FALSE(o.register_tile);
  EXPECT_FALSE(o.shared_tiles);
  setenv("TINY_CUDA_OFF", "lanes,bogus", 1);
  EXPECT_THROW(cuda_options_from_env(), std::invalid_argument);
  unsetenv("TINY_CUDA_OFF");
  o = cuda_options_from_env();
  EXPECT_TRUE(o.vector_lanes && o.shared_tiles && o.register_tile && o.fused_multiply_add && o.occupancy);
  // not yet measured on a GPU: off unless switched on by name
  EXPECT_FALSE(o.async_copies);
  setenv("TINY_CUDA_ON", "async", 1);
  EXPECT_TRUE(cuda_options_from_env().async_copies);
  setenv("TINY_CUDA_ON", "async,bogus", 1);
  EXPECT_THROW(cuda_options_from_env(), std::invalid_argument);
  unsetenv("TINY_CUDA_ON");
}

TEST(CudaEnv, EveryOptionTellsProgramsApart) {
  // cuda_programs caches by this key: two option sets that render differently must differ in it
  const CudaRenderOptions d;
  std::vector<CudaRenderOptions> changed(11, d);
  changed[0].block_reduce = 1;
  changed[1].block_size = 64;
  changed[2].multiprocessors = 132;
  changed[3].arch = 90;
  changed[4].register_tile = false;
  changed[5].vector_lanes = false;
  changed[6].shared_tiles = false;
  changed[7].tensor_cores = false;
  changed[8].vector_staging = false;
  changed[9].ldmatrix = false;
  changed[10].async_copies = true;
  std::set<std::string> keys = {cuda_options_key(d)};
  for (auto& o : changed) keys.insert(cuda_options_key(o));
  CudaRenderOptions more = d;
  more.fused_multiply_add = more.occupancy = more.balanced_splits = false;
  keys.insert(cuda_options_key(more));
  EXPECT_EQ(keys.size(), changed.size() + 2);
}

TEST(CudaEnv, NvrtcReportsCompileErrors) {
  if (!nvrtc_available()) GTEST_SKIP() << nvrtc_info().reason;
  NvrtcOutput bad = nvrtc_compile("extern \"C\" __global__ void k(float* a) { a[0] = undefined_name; }", "bad");
  EXPECT_FALSE(bad.ok);
  EXPECT_NE(bad.log.find("undefined_name"), std::string::npos) << bad.log;
  NvrtcOutput good = nvrtc_compile("extern \"C\" __global__ void k(float* a) { a[threadIdx.x] *= 2.0f; }", "good", 80);
  ASSERT_TRUE(good.ok) << good.log;
  EXPECT_NE(good.code.find(".entry k"), std::string::npos);  // PTX text
  NvrtcOutput cubin = nvrtc_compile("extern \"C\" __global__ void k(float* a) { a[threadIdx.x] *= 2.0f; }", "good", 90, true);
  ASSERT_TRUE(cubin.ok) << cubin.log;
  EXPECT_EQ(cubin.code.substr(0, 4), std::string("\x7f" "ELF"));
}

TEST(CudaEnv, AvailabilityIsAStatusNotACrash) {
  const CudaInfo& i = cuda_info();
  std::printf("[ cuda     ] %s\n", i.available ? i.name.c_str() : i.reason.c_str());
  struct stat st;
  bool gpu_node = stat("/dev/nvidia0", &st) == 0;
  if (!gpu_node) {
    EXPECT_FALSE(cuda_available());  // no GPU on this machine: must say so
  }
  if (!cuda_available()) {
    EXPECT_FALSE(i.reason.empty());
    EXPECT_EQ(cuda_device(), nullptr);
    EXPECT_EQ(cuda_default_arch(), 80);
    // asking for the GPU explicitly is an error that says why
    auto [rc, out] = run_child("TINY_DEVICE=cuda", "CudaEnvChild.ComputeDeviceError");
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("TINY_DEVICE=cuda: no usable GPU: " + i.reason), std::string::npos) << out;
  } else {
    EXPECT_NE(cuda_device(), nullptr);
    EXPECT_GE(cuda_default_arch(), 50);
  }
}

// ---------------------------------------------------------------- elementwise

TEST_F(Cuda, UnaryFloatOps) {
  const Op ops[] = {Op::Neg, Op::Abs, Op::Exp, Op::Log, Op::Sin, Op::Cos, Op::Tan, Op::Sqrt, Op::Recip,
                    Op::Trunc, Op::Floor, Op::Ceil, Op::Round, Op::Erf, Op::Tanh, Op::Asin, Op::Acos, Op::Atan,
                    Op::Sinh, Op::Cosh, Op::Asinh, Op::Acosh, Op::Atanh, Op::Expm1, Op::Log1p, Op::Sigmoid, Op::Sign, Op::IsNan};
  CudaCheck c;
  for (DType dt : kFloats) {
    Tensor a = input(dt, {7, 9}, 11 + unsigned(dt));
    for (Op op : ops) c.add(a.unary(op), exact_float_op(op), op_name(op));
  }
  c.run();
  EXPECT_EQ(c.kernels(), 1);  // one multi-output kernel
}

TEST_F(Cuda, UnaryIntegerOps) {
  CudaCheck c;
  for (DType dt : kInts) {
    Tensor a = input(dt, {5, 13}, 3 + unsigned(dt));
    for (Op op : {Op::Neg, Op::Not, Op::Abs, Op::Sign, Op::Trunc, Op::Floor, Op::Ceil, Op::Round, Op::IsNan})
      c.add(a.unary(op), true, op_name(op));
  }
  Tensor b = input(DType::Bool, {5, 13}, 4);
  for (Op op : {Op::Not, Op::Abs, Op::Sign, Op::Neg, Op::IsNan}) c.add(b.unary(op), true, op_name(op));
  c.run();
}

TEST_F(Cuda, BinaryFloatOps) {
  const Op ops[] = {Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Mod, Op::Max, Op::Min, Op::Pow, Op::Atan2,
                    Op::CmpLt, Op::CmpLe, Op::CmpEq, Op::CmpNe, Op::FloorDiv, Op::FloorMod, Op::Fmod,
                    Op::Copysign, Op::Hypot};
  CudaCheck c;
  for (DType dt : kFloats) {
    Tensor a = input(dt, {6, 11}, 21 + unsigned(dt)), b = input(dt, {6, 11}, 22 + unsigned(dt));
    for (Op op : ops) c.add(a.binary(op, b), exact_float_op(op), op_name(op));
  }
  c.run();
}

TEST_F(Cuda, BinaryIntegerOps) {
  const Op ops[] = {Op::Add, Op::Sub, Op::Mul, Op::Div, Op::Mod, Op::Max, Op::Min, Op::Pow, Op::CmpLt,
                    Op::CmpLe, Op::CmpEq, Op::CmpNe, Op::And, Op::Or, Op::Xor, Op::Shl, Op::Shr,
                    Op::FloorDiv, Op::FloorMod, Op::Fmod};
  CudaCheck c;
  for (DType dt : kInts) {
    Tensor a = input(dt, {4, 37}, 31 + unsigned(dt)), b = input(dt, {4, 37}, 32 + unsigned(dt));
    for (Op op : ops) c.add(a.binary(op, b), true, op_name(op));
  }
  Tensor a = input(DType::Bool, {4, 37}, 5), b = input(DType::Bool, {4, 37}, 6);
  for (Op op : {Op::Add, Op::Sub, Op::Mul, Op::And, Op::Or, Op::Xor, Op::Max, Op::Min, Op::CmpLt, Op::CmpLe,
                Op::CmpEq, Op::CmpNe, Op::Shl, Op::Shr})
    c.add(a.binary(op, b), true, op_name(op));
  c.run();
}

TEST_F(Cuda, ChainsRoundHalfPrecisionAfterEveryOp) {
  CudaCheck c;
  for (DType dt : kFloats) {
    Tensor a = input(dt, {3, 50}, 41 + unsigned(dt), false), b = input(dt, {3, 50}, 42 + unsigned(dt), false);
    // exactly rounded ops only: the result is bit-identical even in 16-bit floats
    Tensor x = a.binary(Op::Mul, b).binary(Op::Add, a).binary(Op::Sub, b.binary(Op::Div, a)).binary(Op::Max, b);
    Tensor y = Tensor::where(a.binary(Op::CmpLt, b), a.unary(Op::Sqrt), b.unary(Op::Neg).binary(Op::Mul, b));
    Tensor z = a.unary(Op::Exp).binary(Op::Mul, b.unary(Op::Tanh)).binary(Op::Add, a.unary(Op::Sin));
    c.add(x, true, "x").add(y, true, "y").add(z, false, "z");
  }
  c.run();
}

TEST_F(Cuda, IntegerChainsWrap) {
  Tensor a = input(DType::Int32, {100}, 51), b = input(DType::Int32, {100}, 52);
  Tensor x = a.binary(Op::Mul, b).binary(Op::Add, b.binary(Op::Shl, a)).binary(Op::FloorDiv, a.binary(Op::Or, b));
  Tensor i8 = x.cast(DType::Int8).binary(Op::Mul, b.cast(DType::Int8)).binary(Op::Pow, a.cast(DType::Int8));
  CudaCheck c;
  c.add(x, true).add(i8, true).run();
}

// ---------------------------------------------------------------- casts

TEST_F(Cuda, CastsBetweenAllDtypes) {
  CudaCheck c;
  for (DType from : kAll) {
    Tensor a = input(from, {61}, 61 + unsigned(from));
    for (DType to : kAll)
      if (to != from) c.add(a.cast(to), true, std::string("from ") + dtype_name(from));
  }
  c.run();
}

TEST_F(Cuda, CastChainsRoundTwice) {
  // float64 -> float16 rounds through float32, as the CPU does
  Tensor d = input(DType::Float64, {200}, 71);
  Tensor big = input(DType::Int64, {200}, 72);
  CudaCheck c;
  c.add(d.cast(DType::Float16), true)
      .add(d.cast(DType::BFloat16).cast(DType::Float16), true)
      .add(big.cast(DType::Float16), true)
      .add(big.cast(DType::BFloat16), true)
      .add(d.cast(DType::Int8).cast(DType::Float32), true)
      .add(d.cast(DType::UInt8), true)
      .run();
}

TEST_F(Cuda, Bitcasts) {
  Tensor f = input(DType::Float32, {48}, 81);
  Tensor h = input(DType::Float16, {48}, 82);
  Tensor d = input(DType::Float64, {48}, 83);
  Tensor u = input(DType::UInt8, {48}, 84);
  CudaCheck c;
  c.add(f.bitcast(DType::Int32).binary(Op::Add, Tensor::full({48}, Scalar::from_int(1), DType::Int32)), true)
      .add_bits(h.bitcast(DType::Int16))
      .add_bits(h.bitcast(DType::BFloat16))
      .add_bits(d.bitcast(DType::Int64))
      .add_bits(u.bitcast(DType::Int8))
      .add(f.unary(Op::Neg).bitcast(DType::Int32), true)  // the sign of a NaN may differ on a GPU
      .add_bits(f.bitcast(DType::Int16))  // another itemsize: an aliased buffer
      .run();
}

// ---------------------------------------------------------------- views

TEST_F(Cuda, ViewsPermuteExpandFlipPad) {
  Tensor a = input(DType::Float32, {3, 4, 5}, 91);
  Tensor b = input(DType::Float32, {4, 1}, 92);
  CudaCheck c;
  c.add(a.permute({2, 0, 1}).contiguous(), true)
      .add(a.flip({true, false, true}).binary(Op::Add, a), true)
      .add(b.expand({4, 6}).binary(Op::Mul, input(DType::Float32, {4, 6}, 93)), true)
      .add(a.pad({{1, 2}, {0, 1}, {2, 0}}).contiguous(), true)
      .add(a.shrink({{1, 3}, {0, 4}, {2, 5}}).flip({false, true, false}).pad({{0, 1}, {1, 1}, {0, 0}}).contiguous(), true)
      .add(a.reshape({12, 5}).permute({1, 0}).pad({{1, 1}, {0, 0}}).reshape({7, 3, 4}).contiguous(), true)
      .run();
}

// How often `what` occurs in `text`.
size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

TEST_F(Cuda, ElementwiseKernelsTakeVectorLanes) {
  // 4 neighbouring outputs per thread: a and the bias load as vectors, the result stores as one
  Tensor a = input(DType::Float32, {6, 8}, 301), bias = input(DType::Float32, {8}, 302);
  Tensor col = input(DType::Float32, {6, 1}, 303);
  Tensor biased = a.binary(Op::Add, bias.reshape({1, 8}).expand({6, 8})).unary(Op::Exp);
  CudaKernelSource src = render_cuda(create_schedule({biased.node()}).kernels[0]);
  EXPECT_EQ(src.lanes, 4);
  EXPECT_EQ(src.outputs, 12);
  EXPECT_EQ(count(src.kernel, "*(const tiny_vec4<float>*)(b"), 2u) << src.kernel;
  EXPECT_EQ(count(src.kernel, "*(tiny_vec4<float>*)(b"), 1u) << src.kernel;
  // a value that does not move along the lanes is loaded once for them (once per pass)
  Tensor scaled = a.binary(Op::Mul, col.expand({6, 8}));
  src = render_cuda(create_schedule({scaled.node()}).kernels[0]);
  EXPECT_EQ(count(src.kernel, "*(const tiny_vec4<float>*)(b"), 1u) << src.kernel;
  EXPECT_EQ(count(src.kernel, " = b"), 1u + 1u + 4u) << src.kernel;  // col twice, a by lanes when misaligned
  // no lanes: a last dim they do not divide, a reduce, or switched off
  EXPECT_EQ(render_cuda(create_schedule({input(DType::Float32, {4, 6}, 304).unary(Op::Exp).node()}).kernels[0]).lanes, 1);
  EXPECT_EQ(render_cuda(create_schedule({a.reduce(ReduceOp::Sum, {0}, false).node()}).kernels[0]).lanes, 1);
  CudaRenderOptions off;
  off.vector_lanes = false;
  EXPECT_EQ(render_cuda(create_schedule({biased.node()}).kernels[0], off).lanes, 1);

  // results: broadcasts, a start that is not a multiple of the lanes, masks inside a group,
  // a transposed copy (vector stores, element loads), 16-bit, 8-bit, 64-bit and boolean lanes
  Tensor h = input(DType::Float16, {4, 12}, 305), i = input(DType::Int64, {3, 8}, 306);
  Tensor u = input(DType::UInt8, {2, 16}, 307);
  Tensor t = input(DType::Float32, {8, 12}, 308);
  CudaCheck c;
  c.add(biased, false, "bias exp")
      .add(scaled, true, "column")
      .add(a.shrink({{0, 6}, {1, 5}}).binary(Op::Mul, a.shrink({{0, 6}, {4, 8}})), true, "offset")
      .add(a.pad({{0, 0}, {2, 6}}).binary(Op::Add, input(DType::Float32, {6, 16}, 309)), true, "padded")
      .add(t.permute({1, 0}).contiguous(), true, "transposed")
      .add(h.binary(Op::Mul, h).binary(Op::Add, h), false, "float16")
      .add(i.binary(Op::Mul, i).binary(Op::Sub, i.flip({false, true})), true, "int64")
      .add(u.binary(Op::Add, u), true, "uint8")
      .add(a.binary(Op::CmpLt, a.flip({true, false})), true, "bool")
      .run();
}

TEST_F(Cuda, StridedAndOverlappingViews) {
  Tensor flat = input(DType::Int64, {40}, 101);
  CudaCheck c;
  c.add(flat.as_strided({5, 4}, {3, 2}, 1).contiguous(), true)   // overlapping windows
      .add(flat.as_strided({3, 3}, {0, 5}, 7).contiguous(), true)  // zero stride
      .add(flat.as_strided({4, 5}, {-1, 1}, 0).contiguous(), true)
      .run();
}

TEST_F(Cuda, PureCopiesKeepNaNPayloads) {  // bit for bit
  // half NaN payloads and negative zeros survive copies and views untouched
  std::vector<uint16_t> bits = {0x7c01, 0xfe00, 0x7d55, 0x8000, 0x0001, 0x7bff, 0xfc00, 0x7e00, 0x3c00, 0x0000, 0xffff, 0x7c00};
  Tensor h = Tensor::from_host(bits.data(), {3, 4}, DType::Float16);
  std::vector<float> fb(12);
  uint32_t fbits[] = {0x7f800001, 0xffc00001, 0x80000000, 0x00000001, 0x7fbfffff, 0x3f800000,
                      0x7fc12345, 0xff800000, 0x00800000, 0x80000001, 0x7f7fffff, 0x7fffffff};
  std::memcpy(fb.data(), fbits, sizeof fbits);
  Tensor f = Tensor::from_host(fb.data(), {12}, DType::Float32);
  CudaCheck c;
  c.add_bits(h.permute({1, 0}).contiguous())
      .add_bits(h.flip({true, true}).pad({{1, 0}, {0, 1}}).contiguous())
      .add_bits(f.reshape({3, 4}).permute({1, 0}).contiguous())
      .add_bits(f.reshape({12, 1}).expand({12, 3}).contiguous())
      .run();
}

// ---------------------------------------------------------------- reductions

TEST_F(Cuda, ReductionsOverAxes) {
  Tensor a = positive(DType::Float32, {6, 7, 8}, 111);
  Tensor i = input(DType::Int32, {6, 7, 8}, 112);
  std::vector<std::vector<int>> axes_list = {{0}, {1}, {2}, {0, 2}, {0, 1, 2}};
  CudaCheck c;
  for (auto& axes : axes_list) {
    c.add(a.reduce(ReduceOp::Sum, axes, false), false)
        .add(a.reduce(ReduceOp::Max, axes, true), true)
        .add(a.reduce(ReduceOp::Min, axes, false), true)
        .add(a.reduce(ReduceOp::Prod, axes, false), false)
        .add(i.reduce(ReduceOp::Sum, axes, false), true)
        .add(i.reduce(ReduceOp::Prod, axes, false), true)
        .add(i.reduce(ReduceOp::Max, axes, false), true)
        .add(i.reduce(ReduceOp::Min, axes, false), true)
        .add(i.binary(Op::CmpLt, Tensor::full(i.shape(), Scalar::from_int(0), DType::Int32))
                 .reduce(ReduceOp::Any, axes, false),
             true)
        .add(i.binary(Op::CmpNe, Tensor::full(i.shape(), Scalar::from_int(3), DType::Int32))
                 .reduce(ReduceOp::All, axes, false),
             true);
  }
  c.run();
}

TEST_F(Cuda, ReductionsInEveryDtype) {
  CudaCheck c;
  for (DType dt : kAll) {
    Tensor a = is_float(dt) ? positive(dt, {5, 40}, 121) : input(dt, {5, 40}, 122 + unsigned(dt));
    bool exact = !is_float(dt);
    c.add(a.reduce(ReduceOp::Sum, {1}, false), exact, "sum")
        .add(a.reduce(ReduceOp::Max, {0}, false), true, "max")
        .add(a.reduce(ReduceOp::Min, {1}, false), true, "min")
        .add(a.reduce(ReduceOp::Prod, {0}, false), exact, "prod");
    if (!is_float(dt)) c.add(a.reduce(ReduceOp::Xor, {1}, false), true, "xor");
  }
  // a long XOR: the block-level tree in the per-block mode
  Tensor l = input(DType::Int64, {3, 5000}, 140);
  c.add(l.reduce(ReduceOp::Xor, {1}, false), true, "long xor").add(l.reduce(ReduceOp::Xor, {0, 1}, false), true, "xor all");
  c.run();
}

TEST_F(Cuda, MaxPropagatesNaN) {
  Tensor a = input(DType::Float32, {9, 30}, 131);  // NaNs among the values
  Tensor h = input(DType::Float16, {9, 30}, 132);
  CudaCheck c;
  c.add(a.reduce(ReduceOp::Max, {1}, false), true)
      .add(a.reduce(ReduceOp::Min, {0}, false), true)
      .add(h.reduce(ReduceOp::Max, {1}, false), true)
      .add(a.binary(Op::Max, a.flip({true, false})), true)
      .run();
}

TEST_F(Cuda, FullReductionUsesABlock) {
  Tensor a = positive(DType::Float32, {300, 70}, 141);
  Tensor i = input(DType::Int64, {21000}, 142);
  Tensor s = a.reduce(ReduceOp::Sum, {0, 1}, false);
  Tensor m = a.reduce(ReduceOp::Max, {0, 1}, false);
  Tensor is = i.reduce(ReduceOp::Sum, {0}, false);
  // rows of 64 reduce by vectors of 4 (masked by a pad that keeps whole groups, or not)
  Tensor rows = positive(DType::Float32, {30, 64}, 143);
  Tensor padded = rows.pad({{0, 0}, {4, 0}}).reduce(ReduceOp::Sum, {1}, false);
  Tensor ragged = rows.pad({{0, 0}, {1, 3}}).reduce(ReduceOp::Max, {1}, false);
  CudaCheck c;
  c.add(s, false).add(m, true).add(is, true).add(rows.reduce(ReduceOp::Sum, {0, 1}, false), false)
      .add(padded, false).add(ragged, true).run();
  Schedule sched = create_schedule({a.reduce(ReduceOp::Min, {0, 1}, false).node()});
  ASSERT_EQ(sched.kernels.size(), 1u);
  CudaKernelSource src = render_cuda(sched.kernels[0]);
  EXPECT_TRUE(src.block_reduce);
  EXPECT_NE(src.kernel.find("__syncthreads"), std::string::npos);
  EXPECT_EQ(src.elements_per_block(), 1);
}

TEST_F(Cuda, FewOutputsSplitTheirReductionAcrossBlocks) {
  Tensor x = input(DType::Float32, {200000}, 171, false);
  Tensor h = input(DType::Float16, {3, 50000}, 172, false);
  Tensor i = input(DType::Int64, {120000}, 173);
  // on the emulated device (2 multiprocessors): 8 blocks per output, block sizes 32 and 64
  CudaCheck c;
  c.add(x.reduce(ReduceOp::Sum, {0}, false), false)
      .add(x.reduce(ReduceOp::Max, {0}, false), true)
      .add(h.reduce(ReduceOp::Sum, {1}, false), false)
      .add(i.reduce(ReduceOp::Sum, {0}, false), true)
      .add(x.binary(Op::CmpLt, x.unary(Op::Neg)).reduce(ReduceOp::Any, {0}, false), true)
      .run();

  CudaRenderOptions h100;
  h100.multiprocessors = 132;
  Schedule sum = create_schedule({x.reduce(ReduceOp::Sum, {0}, false).node()});
  CudaKernelSource src = render_cuda(sum.kernels[0], h100);
  EXPECT_EQ(src.split, 48);  // 200000 / (256 threads * 16): no thinner slices
  EXPECT_NE(src.kernel.find("atomicAdd(tiny_tickets + gid"), std::string::npos) << src.kernel;
  // each thread's slice moves 4 elements per load when x is aligned
  EXPECT_TRUE(src.vectors);
  EXPECT_NE(src.kernel.find("*(const tiny_vec4<float>*)(b1 + "), std::string::npos) << src.kernel;
  EXPECT_EQ(render_cuda(sum.kernels[0]).split, 1);  // rendered for no device: never split

  // the same partials and tickets serve every launch: a second run gives the same bits
  Device* emu = cuda_emu_device();
  ASSERT_NE(emu, nullptr);
  Memory before;
  for (auto& b : sum.kernels[0].buffers) {
    Bytes bytes(b->owner()->nbytes(), 0);
    if (b->owner()->allocated()) const_cast<Buffer*>(b->owner())->copy_out(bytes.data(), bytes.size());
    before[b->owner()] = std::move(bytes);
  }
  EXPECT_EQ(run_on(*emu, sum, before), run_on(*emu, sum, before));
}

TEST_F(Cuda, SeveralReducesOfASplitMeetOnce) {
  // A batch norm's backward: per channel, the sum of the gradient and of its product with the
  // input, one kernel reading both. Its blocks each stage a partial of every reduce and meet
  // once, after the last; the last to arrive combines them all in slice order. On the emulated
  // device (2 multiprocessors) 2 channels take 4 blocks each; also integer sum and max pairs.
  Tensor g = input(DType::Float32, {16, 2, 40, 40}, 181, false);
  Tensor x = input(DType::Float32, {16, 2, 40, 40}, 182, false);
  Tensor sg = g.reduce(ReduceOp::Sum, {0, 2, 3}, true);
  Tensor sgx = g.binary(Op::Mul, x).reduce(ReduceOp::Sum, {0, 2, 3}, true);
  Tensor two = Tensor::full(sg.shape(), Scalar::from_double(2.0), DType::Float32);
  Tensor both = sg.binary(Op::Mul, two).binary(Op::Add, sgx);
  Tensor i = input(DType::Int64, {2, 40000}, 183);
  Tensor ints = i.reduce(ReduceOp::Sum, {1}, false).binary(Op::Sub, i.reduce(ReduceOp::Max, {1}, false));
  CudaRenderOptions h100;
  h100.multiprocessors = 132;
  for (const Tensor& t : {both, ints}) {
    Schedule s = create_schedule({t.node()}, *cpu_device());
    ASSERT_EQ(s.kernels.size(), 1u);
    CudaKernelSource src = render_cuda(s.kernels[0], h100);
    EXPECT_TRUE(src.block_reduce) << src.kernel;
    EXPECT_GT(src.split, 1) << src.kernel;
    EXPECT_EQ(src.partial_slots, 2);  // one slot per reduce, output and slice
    const std::string ticket = "atomicAdd(tiny_tickets + gid";
    const size_t at = src.kernel.find(ticket);
    EXPECT_NE(at, std::string::npos) << src.kernel;
    EXPECT_EQ(src.kernel.find(ticket, at + 1), std::string::npos) << "one meeting point\n" << src.kernel;
    // the same partials and tickets serve every launch: a second run gives the same bits
    Device* emu = cuda_emu_device();
    ASSERT_NE(emu, nullptr);
    Memory before = initial_memory(s);
    EXPECT_EQ(run_on(*emu, s, before), run_on(*emu, s, before));
  }
  CudaCheck c;
  c.add(both, false).add(ints, true).run();
  // a reduce inside another (a softmax's denominator) would need a meeting point inside it,
  // also where the inner one is an output of the kernel too (walked before the outer one)
  Tensor rows = input(DType::Float32, {2, 40000}, 184, false);
  Tensor m = rows.reduce(ReduceOp::Max, {1}, true);
  Tensor denom = rows.binary(Op::Sub, m.expand(rows.shape())).unary(Op::Exp).reduce(ReduceOp::Sum, {1}, true);
  Schedule nested = create_schedule({m.node(), denom.node()}, *cpu_device());
  for (auto& k : nested.kernels) EXPECT_EQ(render_cuda(k, h100).split, 1) << render_cuda(k, h100).kernel;
  CudaCheck n;
  n.add(m, true).add(denom, false).run();
}

TEST_F(Cuda, LongReducesOfManyOutputsSplitAcrossThreads) {
  // A weight gradient's shape: 72 x 64 outputs, each a sum of 18816 products along the
  // factors' outer axis. Rendered for an H100 a block per output would read one element per
  // sector. Shared tiles take 64 x 64 outputs a block, 2 blocks for 132 multiprocessors: each
  // takes slices of the reduce on separate blocks (whole chunks of 16 steps), the last block of
  // each combining the partials in slice order. Without shared memory, register tiles of 4 x 4
  // take slices on separate threads the same way.
  const int64_t N = 18816, M = 72, K = 64;
  std::vector<float> a(size_t(N * M)), b(size_t(N * K));
  uint32_t state = 12345;
  auto next = [&] { state = state * 1664525u + 1013904223u; return float(int(state >> 9) % 2001 - 1000) / 1000.0f; };
  for (auto& v : a) v = next();
  for (auto& v : b) v = next();
  Tensor ta = Tensor::from_host(a.data(), {N, M}, DType::Float32), tb = Tensor::from_host(b.data(), {N, K}, DType::Float32);
  Tensor prod = ta.reshape({N, M, 1}).expand({N, M, K}).binary(Op::Mul, tb.reshape({N, 1, K}).expand({N, M, K}));
  Schedule s = create_schedule({prod.reduce(ReduceOp::Sum, {0}, false).node()}, *cpu_device());
  ASSERT_EQ(s.kernels.size(), 1u);
  CudaRenderOptions h100, h100_registers;
  h100.multiprocessors = h100_registers.multiprocessors = 132;
  h100_registers.shared_tiles = false;
  CudaKernelSource blocks = render_cuda(s.kernels[0], h100);
  EXPECT_TRUE(blocks.shared_tile) << blocks.kernel;
  EXPECT_FALSE(blocks.split_threads);
  // 1176 chunks; 64 slices at most (each at least 256 steps): 19 chunks each, 62 slices
  EXPECT_EQ(blocks.split, 62);
  EXPECT_EQ(blocks.outputs, 2);
  EXPECT_EQ(blocks.partial_slots, 64 * 64);
  CudaKernelSource threads = render_cuda(s.kernels[0], h100_registers);
  EXPECT_TRUE(threads.split_threads) << threads.kernel;
  EXPECT_EQ(threads.split, 18);  // 18816 steps / 1024 per slice at least; 1046 each, the last 1034
  EXPECT_EQ(threads.tile_outputs(), 16);
  EXPECT_EQ(threads.outputs, M * K / 16);
  // a thread per (tile, slice), neighbouring threads on neighbouring tiles
  EXPECT_NE(threads.kernel.find("for (i64 gid = tiny_begin + tiny_t % tiny_n;"), std::string::npos) << threads.kernel;
  EXPECT_FALSE(render_cuda(s.kernels[0]).split > 1);  // rendered for no device: never split
  if (nvrtc_available())
    for (auto* src : {&blocks, &threads}) {
      NvrtcOutput built = nvrtc_compile(src->source, src->name, 90, false);
      EXPECT_TRUE(built.ok) << built.log;
    }

  Device* emu = cuda_emu_device();
  ASSERT_NE(emu, nullptr);
  Memory before = initial_memory(s);
  const Buffer* out = s.kernels[0].buffers[0]->owner();
  // the float32 results against double-precision sums of x^T y
  auto expect_products = [&](const float* r, const std::vector<float>& x, const std::vector<float>& y,
                             const std::string& what) {
    for (int64_t m = 0; m < M; m++)
      for (int64_t k = 0; k < K; k++) {
        double want = 0, mag = 0;
        for (int64_t n = 0; n < N; n++) {
          want += double(x[size_t(n * M + m)]) * y[size_t(n * K + k)];
          mag += std::fabs(double(x[size_t(n * M + m)]) * y[size_t(n * K + k)]);
        }
        ASSERT_NEAR(r[m * K + k], want, 1e-5 * mag) << m << ", " << k << " (" << what << ")";
      }
  };
  for (auto* opt : {&h100, &h100_registers}) {
    Memory got = run_on(*emu, s, before, *opt);
    EXPECT_EQ(run_on(*emu, s, before, *opt), got);  // tickets reset: a second launch gives the same bits
    ASSERT_EQ(got.at(out).size(), size_t(M * K * 4));
    expect_products(reinterpret_cast<const float*>(got.at(out).data()), a, b, opt == &h100 ? "blocks" : "threads");
  }
  // float16 factors on tensor cores, split the same way (the values are multiples of 1/8:
  // exact in float16)
  std::vector<float> qa(a.size()), qb(b.size());
  for (size_t i = 0; i < a.size(); i++) qa[i] = std::round(a[i] * 32) / 8;
  for (size_t i = 0; i < b.size(); i++) qb[i] = std::round(b[i] * 32) / 8;
  const DType f16 = DType::Float16, f32 = DType::Float32;
  Tensor ha = Tensor::from_host(qa.data(), {N, M}, f32).cast(f16), hb = Tensor::from_host(qb.data(), {N, K}, f32).cast(f16);
  Tensor::realize_all({ha, hb});
  Tensor hprod = ha.cast(f32).reshape({N, M, 1}).expand({N, M, K}).binary(Op::Mul, hb.cast(f32).reshape({N, 1, K}).expand({N, M, K}));
  Schedule hs = create_schedule({hprod.reduce(ReduceOp::Sum, {0}, false).node()}, *cpu_device());
  ASSERT_EQ(hs.kernels.size(), 1u);
  CudaRenderOptions h100_mma = h100;
  h100_mma.arch = 90;
  CudaKernelSource cores = render_cuda(hs.kernels[0], h100_mma);
  EXPECT_EQ(cores.tensor_cores, "f16");
  EXPECT_EQ(cores.split, 59);  // 588 chunks of 32 steps, 64 slices at most: 10 chunks each, 59 slices
  Memory hgot = run_on(*emu, hs, initial_memory(hs), h100_mma);
  expect_products(reinterpret_cast<const float*>(hgot.at(hs.kernels[0].buffers[0]->owner()).data()), qa, qb,
                  "tensor cores");
  // integer products split the same way, exactly (partials of 64-bit sums in the u64 slots)
  std::vector<int32_t> ia(a.size()), ib(b.size());
  for (size_t i = 0; i < a.size(); i++) ia[i] = int32_t(a[i] * 1000);
  for (size_t i = 0; i < b.size(); i++) ib[i] = int32_t(b[i] * 1000);
  Tensor xa = Tensor::from_host(ia.data(), {N, M}, DType::Int32), xb = Tensor::from_host(ib.data(), {N, K}, DType::Int32);
  Tensor iprod = xa.cast(DType::Int64).reshape({N, M, 1}).expand({N, M, K}).binary(
      Op::Mul, xb.cast(DType::Int64).reshape({N, 1, K}).expand({N, M, K}));
  Schedule is = create_schedule({iprod.reduce(ReduceOp::Sum, {0}, false).node()}, *cpu_device());
  ASSERT_EQ(is.kernels.size(), 1u);
  EXPECT_EQ(render_cuda(is.kernels[0], h100).split, 62);
  EXPECT_TRUE(render_cuda(is.kernels[0], h100_registers).split_threads);
  for (auto* opt : {&h100, &h100_registers}) {
    Memory igot = run_on(*emu, is, initial_memory(is), *opt);
    const int64_t* ir = reinterpret_cast<const int64_t*>(igot.at(is.kernels[0].buffers[0]->owner()).data());
    for (int64_t m = 0; m < M; m++)
      for (int64_t k = 0; k < K; k++) {
        int64_t want = 0;
        for (int64_t n = 0; n < N; n++) want += int64_t(ia[size_t(n * M + m)]) * ib[size_t(n * K + k)];
        ASSERT_EQ(ir[m * K + k], want) << m << ", " << k;
      }
  }
}

TEST_F(Cuda, ReducesInsideAReduceAreComputedBeforeItsLoop) {
  // argmax: a max over the same row sits inside the index-min reduce; it is
  // computed once before the loop, not once per element (and never split)
  Tensor x = input(DType::Float32, {4, 3000}, 181, false);
  Tensor mx = x.reduce(ReduceOp::Max, {1}, true).expand(x.shape());
  Tensor idx = input(DType::Int64, {1, 3000}, 182, false).expand(x.shape());
  Tensor first = Tensor::where(x.binary(Op::CmpEq, mx), idx, idx.binary(Op::Mul, idx)).reduce(ReduceOp::Min, {1}, false);
  Schedule s = create_schedule({first.node()});  // render only; the check below realizes `first`
  ASSERT_EQ(s.kernels.size(), 1u);
  CudaRenderOptions h100;
  h100.multiprocessors = 132;
  for (int mode : {0, 1}) {
    h100.block_reduce = mode;
    CudaKernelSource src = render_cuda(s.kernels[0], h100);
    EXPECT_EQ(src.split, 1);
    // the max's loop closes before the min's loop opens: two loops, one after the other
    size_t gid_loop = src.kernel.find("for (");
    size_t max_loop = src.kernel.find("for (", gid_loop + 1), max_end = src.kernel.find("}", max_loop);
    size_t min_loop = src.kernel.find("for (", max_loop + 1);
    if (mode == 0) {
      EXPECT_LT(max_end, min_loop) << src.kernel;
    }
    EXPECT_NE(min_loop, std::string::npos) << src.kernel;
  }
  CudaCheck c;
  c.add(first, true).run();
}

TEST_F(Cuda, ReduceOfMaskedViewsAndMatmul) {
  Tensor a = input(DType::Float32, {5, 6}, 151, false);
  Tensor b = input(DType::Float32, {6, 4}, 152, false);
  Tensor padded = a.pad({{2, 1}, {0, 3}}).flip({true, false});
  Tensor i = input(DType::Int16, {5, 6}, 153);
  CudaCheck c;
  c.add(padded.reduce(ReduceOp::Sum, {0}, false), false)
      .add(padded.reduce(ReduceOp::Max, {1}, true), true)
      .add(a.matmul(b), false)
      .add(i.matmul(i.permute({1, 0})), true)
      .run();
}

// A float sum adds a product of its own dtype as one fused multiply-add, as the CPU's generator
// contracts the pair: -(1 + 2^-11) + (1 + 2^-12)^2 is 2^-24 fused, 0 with the product rounded
// first (and likewise in float64). Per-block and tiled reduces accumulate the same way.
TEST_F(Cuda, SumsOfProductsFuseTheirMultiplyAndAdd) {
  Device* emu = cuda_emu_device();
  ASSERT_NE(emu, nullptr) << cuda_emu_info().reason;
  const float xf[] = {-(1.0f + 0x1p-11f), 1.0f + 0x1p-12f}, yf[] = {1.0f, 1.0f + 0x1p-12f};
  const double xd[] = {-(1.0 + 0x1p-26), 1.0 + 0x1p-27}, yd[] = {1.0, 1.0 + 0x1p-27};
  struct Case {
    DType dt;
    const void *x, *y;
    double fused;
  };
  for (Case c : {Case{DType::Float32, xf, yf, 0x1p-24}, Case{DType::Float64, xd, yd, 0x1p-54}}) {
    Tensor x = Tensor::from_host(c.x, {2}, c.dt), y = Tensor::from_host(c.y, {2}, c.dt);
    Tensor s = x.binary(Op::Mul, y).reduce(ReduceOp::Sum, {0}, false);
    Schedule sched = create_schedule({s.node()});
    ASSERT_EQ(sched.kernels.size(), 1u);
    const Buffer* out = nullptr;
    for (auto& [node, buf] : sched.realized)
      if (node == s.node()) out = buf->owner();
    ASSERT_NE(out, nullptr);
    Memory before = initial_memory(sched);
    for (bool fused : {true, false}) {
      CudaRenderOptions o;
      o.block_reduce = 0;  // one thread adds both products (a block's threads would take one each)
      o.fused_multiply_add = fused;
      const char* fma = c.dt == DType::Float32 ? "fmaf(" : "fma(";
      EXPECT_EQ(render_cuda(sched.kernels[0], o).kernel.find(fma) != std::string::npos, fused);
      Memory got = run_on(*emu, sched, before, o);
      EXPECT_EQ(element(got.at(out).data(), c.dt, 0), fused ? c.fused : 0.0)
          << dtype_name(c.dt) << (fused ? ", fused" : ", rounded");
      o.block_reduce = 1;
      EXPECT_EQ(render_cuda(sched.kernels[0], o).kernel.find(fma) != std::string::npos, fused);
    }
  }
  // a matmul's shared tile on an H100 accumulates with fmaf too
  Tensor a = input(DType::Float32, {256, 64}, 161, false), b = input(DType::Float32, {64, 256}, 162, false);
  Schedule mm = create_schedule({a.matmul(b).node()});
  CudaRenderOptions h100;
  h100.multiprocessors = 132;
  CudaKernelSource src = render_cuda(mm.kernels.back(), h100);
  EXPECT_TRUE(src.shared_tile);
  EXPECT_NE(src.kernel.find("= fmaf(s"), std::string::npos) << src.kernel;
}

TEST_F(Cuda, RegisterTilesOfMatmulOutputs) {
  // one thread per 4 x 4 tile: each step loads 4 values of a and 4 of b for 16 products
  Tensor a = input(DType::Float32, {12, 8}, 191, false);
  Tensor b = input(DType::Float32, {8, 20}, 192, false);
  Schedule mm = create_schedule({a.matmul(b).node()});
  ASSERT_EQ(mm.kernels.size(), 1u);
  CudaKernelSource src = render_cuda(mm.kernels[0]);
  EXPECT_EQ(src.tile_rows, 4);
  EXPECT_EQ(src.tile_cols, 4);
  EXPECT_EQ(src.outputs, 12 * 20 / 16);
  EXPECT_NE(src.kernel.find("4 x 4 tile of outputs (dims 0, 1)"), std::string::npos) << src.kernel;
  // 16 accumulators, 8 loads per step: a[i0 + r][k] for 4 rows, b[k][j0 + c] for 4 columns
  size_t loop = src.kernel.find("for (int r"), end = src.kernel.find("}", loop);
  std::string body = src.kernel.substr(loop, end - loop);
  size_t loads = 0;
  for (size_t at = body.find("= b"); at != std::string::npos; at = body.find("= b", at + 1)) loads++;
  EXPECT_EQ(loads, 8u) << body;
  CudaRenderOptions plain;
  plain.register_tile = false;
  EXPECT_EQ(render_cuda(mm.kernels[0], plain).tile_cols, 1);
  // a linear layer's x @ w.T: w moves by a whole row along the output columns, a
  // thread's scalar accumulators do not mind (the CPU's vectors would)
  Tensor w = input(DType::Float32, {20, 8}, 203, false);
  EXPECT_EQ(render_cuda(create_schedule({a.matmul(w.permute({1, 0})).node()}).kernels[0]).tile_cols, 4);
  // a column sum reuses nothing across its columns: one output per thread
  EXPECT_EQ(render_cuda(create_schedule({b.reduce(ReduceOp::Sum, {0}, false).node()}).kernels[0]).tile_cols, 1);

  // tiles divide their dims: 2 x 2 for a batched 6 x 10; none for 7 x 11 (11 has no even
  // tile) or 7 x 6 (two columns alone are not worth a tile)
  Tensor ba = input(DType::Float32, {3, 6, 5}, 193, false), bb = input(DType::Float32, {3, 5, 10}, 194, false);
  EXPECT_EQ(render_cuda(create_schedule({ba.matmul(bb).node()}).kernels[0]).tile_rows, 2);
  Tensor oa = input(DType::Float32, {7, 9}, 195, false), ob = input(DType::Float32, {9, 11}, 196, false);
  EXPECT_EQ(render_cuda(create_schedule({oa.matmul(ob).node()}).kernels[0]).tile_cols, 1);
  Tensor oc = input(DType::Float32, {9, 6}, 197, false);
  EXPECT_EQ(render_cuda(create_schedule({oa.matmul(oc).node()}).kernels[0]).tile_cols, 1);

  // a tile as wide as its dim (its first column is the constant 0): a sum over an expanded dim
  Tensor ex = input(DType::Float32, {5, 1, 6}, 204, false).expand({5, 4, 6}).reduce(ReduceOp::Sum, {0, 2}, true);
  EXPECT_EQ(render_cuda(create_schedule({ex.node()}).kernels[0]).tile_cols, 4);

  // results: transposed operands, a fused bias + exp epilogue, 16-bit and integer dtypes
  Tensor bias = input(DType::Float32, {20}, 198, false);
  Tensor h = input(DType::Float16, {8, 12}, 199, false), hb = input(DType::Float16, {16, 8}, 200, false);
  Tensor i = input(DType::Int32, {4, 6}, 201), ib = input(DType::Int32, {6, 8}, 202);
  CudaCheck c;
  c.add(a.matmul(b), false, "matmul")
      .add(b.permute({1, 0}).matmul(a.permute({1, 0})), false, "transposed")
      .add(a.matmul(w.permute({1, 0})), false, "linear")
      .add(a.matmul(b).binary(Op::Add, bias.reshape({1, 20}).expand({12, 20})).unary(Op::Exp), false, "bias exp")
      .add(ba.matmul(bb), false, "batched")
      .add(oa.matmul(ob), false, "odd")
      .add(h.permute({1, 0}).matmul(hb.permute({1, 0})), false, "float16")
      .add(i.matmul(ib), true, "int32")
      .add(ex, false, "expanded")
      .run();
}

TEST_F(Cuda, SharedMemoryTilesOfProducts) {
  // a block of 16 x 16 threads owns 64 x 64 outputs; per chunk of 16 reduce steps its
  // threads stage 64 rows of a and 64 columns of b in shared memory
  Tensor a = input(DType::Float32, {68, 40}, 401, false), b = input(DType::Float32, {40, 72}, 402, false);
  Schedule mm = create_schedule({a.matmul(b).node()});
  ASSERT_EQ(mm.kernels.size(), 1u);
  CudaKernelSource src = render_cuda(mm.kernels[0]);
  EXPECT_TRUE(src.shared_tile);
  EXPECT_TRUE(src.cooperative());
  EXPECT_EQ(src.block_size, 256);
  EXPECT_EQ(src.outputs, 2 * 2);  // 68 rows and 72 columns: two blocks each way, the second partial
  EXPECT_EQ(src.elements_per_block(), 1);
  EXPECT_NE(src.kernel.find("one block per 64 x 64 outputs"), std::string::npos) << src.kernel;
  // rows padded by a vector: every thread reads its 4 rows (and 4 columns) of a step as one vector
  EXPECT_NE(src.kernel.find("__shared__ float tiny_as[16][68]"), std::string::npos) << src.kernel;
  EXPECT_NE(src.kernel.find("reinterpret_cast<const tiny_vec4<float>*>(&tiny_as[kk]"), std::string::npos);
  EXPECT_NE(src.kernel.find("__syncthreads"), std::string::npos);
  CudaRenderOptions registers_only;
  registers_only.shared_tiles = false;
  EXPECT_FALSE(render_cuda(mm.kernels[0], registers_only).shared_tile);
  // 8 x 8 tiles per thread where the blocks of 128 x 128 still fill the GPU twice over
  CudaRenderOptions h100;
  h100.multiprocessors = 132;
  Tensor big = Tensor::rand({4096, 1024}, 415, 0), big_b = Tensor::rand({1024, 4096}, 416, 0);
  CudaKernelSource big_src = render_cuda(create_schedule({big.matmul(big_b).node()}).kernels.back(), h100);
  EXPECT_TRUE(big_src.shared_tile);
  EXPECT_EQ(big_src.tile_rows * big_src.tile_cols, 64);
  EXPECT_EQ(big_src.outputs, 32 * 32);
  // their ~200 registers capped at 128, so that two blocks of 256 threads share a multiprocessor
  EXPECT_NE(big_src.kernel.find("__launch_bounds__(256, 2)"), std::string::npos) << big_src.kernel.substr(0, 300);
  CudaRenderOptions h100_one_block = h100;
  h100_one_block.occupancy = false;
  EXPECT_NE(render_cuda(create_schedule({big.matmul(big_b).node()}).kernels.back(), h100_one_block)
                .kernel.find("__launch_bounds__(256) "),
            std::string::npos);
  EXPECT_EQ(render_cuda(mm.kernels[0], h100).tile_rows, 4);  // 68 x 72 outputs: 4 x 4 tiles
  // few blocks per multiprocessor: the reduce splits so that the busiest one has the fewest steps
  auto split_of = [](int64_t m, int64_t k, int64_t n, const CudaRenderOptions& o) {
    Tensor x = Tensor::rand({m, k}, 423, 0), y = Tensor::rand({k, n}, 424, 0);
    return render_cuda(create_schedule({x.matmul(y).node()}).kernels.back(), o).split;
  };
  EXPECT_EQ(split_of(2304, 12544, 256, h100), 8);  // 144 blocks of 64 x 64; unsplit, 12 take two
  EXPECT_EQ(split_of(576, 200704, 64, h100), 29);  // 9 blocks: 261, two per multiprocessor
  EXPECT_EQ(split_of(512, 4608, 3136, h100), 1);   // 392 blocks: three on each already
  CudaRenderOptions h100_unbalanced = h100;
  h100_unbalanced.balanced_splits = false;  // the rule before: two per multiprocessor, rounded up
  EXPECT_EQ(split_of(2304, 12544, 256, h100_unbalanced), 1);
  EXPECT_EQ(split_of(576, 200704, 64, h100_unbalanced), 30);
  // 8 columns: a block of 2 x 128 threads stages a chunk of b's 8 columns (128 values) with
  // half its threads
  Tensor na = positive(DType::Float32, {512, 24}, 419), nb = positive(DType::Float32, {24, 8}, 420);
  CudaKernelSource narrow = render_cuda(create_schedule({na.matmul(nb).node()}).kernels.back());
  EXPECT_TRUE(narrow.shared_tile) << narrow.kernel.substr(0, 400);
  EXPECT_EQ(narrow.block_size, 256);
  // too few tiles for 64 threads: registers only
  Tensor sa = input(DType::Float32, {8, 32}, 403, false), sb = input(DType::Float32, {32, 8}, 404, false);
  EXPECT_FALSE(render_cuda(create_schedule({sa.matmul(sb).node()}).kernels[0]).shared_tile);
  // a max over products is not a sum of products: registers only
  Tensor mx = a.reshape({68, 40, 1}).expand({68, 40, 72}).binary(Op::Mul, b.reshape({1, 40, 72}).expand({68, 40, 72}))
                  .reduce(ReduceOp::Max, {1}, false);
  EXPECT_FALSE(render_cuda(create_schedule({mx.node()}).kernels[0]).shared_tile);

  // results: partial blocks and a reduce that is not a multiple of the chunk, a linear
  // layer's w.T (staged along k), transposed a, batches, a fused bias + ReLU, a padded
  // 3x3 convolution (64 channels x 16 positions), 16-bit and integer products
  Tensor w = input(DType::Float32, {72, 40}, 405, false), bias = input(DType::Float32, {72}, 406, false);
  Tensor ba = input(DType::Float32, {3, 32, 24}, 407, false), bb = input(DType::Float32, {3, 24, 64}, 408, false);
  Tensor x = positive(DType::Float32, {2, 8, 6, 16}, 409), cw = positive(DType::Float32, {64, 8, 3, 3}, 410);
  Tensor h = input(DType::Float16, {64, 24}, 411, false), hb = input(DType::Float16, {24, 64}, 412, false);
  Tensor i = input(DType::Int32, {64, 20}, 413), ib = input(DType::Int32, {20, 64}, 414);
  // convolution as the torch layer writes it: windows of the padded input times the weight
  Tensor windows = x.pad({{0, 0}, {0, 0}, {1, 1}, {1, 1}})
                       .as_strided({2, 8, 6, 16, 3, 3}, {8 * 8 * 18, 8 * 18, 18, 1, 18, 1}, 0)
                       .permute({0, 2, 3, 1, 4, 5}).reshape({2, 1, 6, 16, 8, 3, 3}).expand({2, 64, 6, 16, 8, 3, 3});
  Tensor conv = windows.binary(Op::Mul, cw.reshape({1, 64, 1, 1, 8, 3, 3}).expand({2, 64, 6, 16, 8, 3, 3}))
                    .reduce(ReduceOp::Sum, {4, 5, 6}, false);
  CudaKernelSource conv_src = render_cuda(create_schedule({conv.node()}).kernels.back());
  EXPECT_TRUE(conv_src.shared_tile) << conv_src.kernel.substr(0, 300);
  CudaCheck c;
  c.add(a.matmul(b), false, "matmul")
      .add(a.matmul(w.permute({1, 0})).binary(Op::Add, bias.reshape({1, 72}).expand({68, 72})).binary(Op::Max, Tensor::full({68, 72}, Scalar::from_double(0.0), DType::Float32)), false, "linear bias relu")
      .add(b.permute({1, 0}).matmul(a.permute({1, 0})), false, "transposed")
      .add(ba.matmul(bb), false, "batched")
      .add(conv, false, "convolution")
      .add(input(DType::Float32, {256, 24}, 417, false).matmul(input(DType::Float32, {24, 256}, 418, false)), false,
           "8 x 8 tiles")  // 4 blocks: twice the emulated device's 2 multiprocessors
      .add(positive(DType::Float32, {200, 40}, 421).matmul(positive(DType::Float32, {40, 136}, 422)), false,
           "8 x 8 tiles, partial blocks")  // a thread's second group of rows or columns past the end
      .add(na.matmul(nb), false, "8 columns")
      .add(h.matmul(hb), false, "float16")
      .add(i.matmul(ib), true, "int32")
      .run();
}

// A convolution's outputs seen as a matrix product: (output channels) x (images x positions),
// so that blocks of tiles fit maps of any size (a 7 x 7 map filled 7 columns of a block's 64);
// its weight gradient as (input channels x taps) x (output channels); a linear layer on a
// batch of sequences as (batch x tokens) x (features). Each as the torch layer writes it.
TEST_F(Cuda, ConvolutionsRunAsMatrixProducts) {
  const int64_t N = 4, C = 16, OC = 32, H = 7;
  Tensor x = positive(DType::Float32, {N, C, H, H}, 431), w = input(DType::Float32, {OC, C, 3, 3}, 432, false);
  Tensor xp = x.pad({{0, 0}, {0, 0}, {1, 1}, {1, 1}});
  const int64_t P = H + 2;
  Tensor win = xp.as_strided({N, 1, 1, H, H, C, 3, 3}, {C * P * P, C * P * P, 0, P, 1, P * P, P, 1}, 0)
                   .expand({N, 1, OC, H, H, C, 3, 3});
  Tensor conv = win.binary(Op::Mul, w.reshape({1, 1, OC, 1, 1, C, 3, 3}).expand({N, 1, OC, H, H, C, 3, 3}))
                    .reduce(ReduceOp::Sum, {5, 6, 7}, false);
  // the weight gradient from grad_output stored channels-last (N, H, W, OC)
  Tensor go = input(DType::Float32, {N, H, H, OC}, 433, false);
  Tensor::realize_all({go});
  Tensor wgrad = xp.as_strided({C, 3, 3, OC, N, H, H}, {P * P, P, 1, 0, C * P * P, P, 1}, 0)
                     .binary(Op::Mul, go.as_strided({C, 3, 3, OC, N, H, H}, {0, 0, 0, 1, H * H * OC, H * OC, OC}, 0))
                     .reduce(ReduceOp::Sum, {4, 5, 6}, false);
  Tensor seq = input(DType::Float32, {3, 5, 24}, 434, false), lw = input(DType::Float32, {40, 24}, 435, false);
  Tensor linear = seq.reshape({3, 5, 1, 24}).expand({3, 5, 40, 24})
                      .binary(Op::Mul, lw.reshape({1, 1, 40, 24}).expand({3, 5, 40, 24}))
                      .reduce(ReduceOp::Sum, {3}, false);
  auto rendered = [](const Tensor& t) { return render_cuda(create_schedule({t.node()}).kernels.back()); };
  CudaKernelSource fwd = rendered(conv), wg = rendered(wgrad), lin = rendered(linear);
  EXPECT_TRUE(fwd.shared_tile) << fwd.kernel.substr(0, 300);
  EXPECT_NE(fwd.kernel.find("seen as (32, 196)"), std::string::npos) << fwd.kernel.substr(0, 300);
  EXPECT_NE(wg.kernel.find("seen as (144, 32)"), std::string::npos) << wg.kernel.substr(0, 300);
  EXPECT_EQ(wg.tile_rows * wg.tile_cols, 16);  // 4 x 4: the kernel's width (3) gave rows of 1
  EXPECT_NE(lin.kernel.find("seen as (15, 40)"), std::string::npos) << lin.kernel.substr(0, 300);
  // a plain matmul is one already
  Tensor a = input(DType::Float32, {64, 40}, 436, false), b = input(DType::Float32, {40, 72}, 437, false);
  EXPECT_EQ(rendered(a.matmul(b)).kernel.find("seen as"), std::string::npos);
  // ragged edges: tiles of 4 x 4 that do not divide the rows (3 input channels x 9 taps = 27)
  // or either dim (37 x 30), each output past the ends unstored
  Tensor x3 = positive(DType::Float32, {N, 3, H, H}, 438);
  Tensor x3p = x3.pad({{0, 0}, {0, 0}, {1, 1}, {1, 1}});
  Tensor wgrad3 = x3p.as_strided({3, 3, 3, OC, N, H, H}, {P * P, P, 1, 0, 3 * P * P, P, 1}, 0)
                      .binary(Op::Mul, go.as_strided({3, 3, 3, OC, N, H, H}, {0, 0, 0, 1, H * H * OC, H * OC, OC}, 0))
                      .reduce(ReduceOp::Sum, {4, 5, 6}, false);
  Tensor ra = input(DType::Float32, {37, 45}, 439, false), rb = input(DType::Float32, {45, 30}, 440, false);
  CudaRenderOptions per_thread;  // these small ones would take a block per output
  per_thread.block_reduce = 0;
  for (const Tensor& t : {wgrad3, ra.matmul(rb)}) {
    CudaKernelSource src = render_cuda(create_schedule({t.node()}).kernels.back(), per_thread);
    EXPECT_TRUE(src.shared_tile) << src.kernel.substr(0, 300);
    EXPECT_EQ(src.tile_rows * src.tile_cols, 16);
  }
  // grouped (2 groups of 8 channels) and strided (2): the groups become a batch dim
  const int64_t G = 2, Cg = 8, OCg = 16, Hs = 8, Ps = Hs + 2, Ho = (Ps - 3) / 2 + 1;
  Tensor xs = positive(DType::Float32, {N, G * Cg, Hs, Hs}, 442), ws = input(DType::Float32, {G * OCg, Cg, 3, 3}, 443, false);
  Tensor grouped = xs.pad({{0, 0}, {0, 0}, {1, 1}, {1, 1}})
                       .as_strided({N, G, 1, Ho, Ho, Cg, 3, 3}, {G * Cg * Ps * Ps, Cg * Ps * Ps, 0, 2 * Ps, 2, Ps * Ps, Ps, 1}, 0)
                       .expand({N, G, OCg, Ho, Ho, Cg, 3, 3})
                       .binary(Op::Mul, ws.reshape({1, G, OCg, 1, 1, Cg, 3, 3}).expand({N, G, OCg, Ho, Ho, Cg, 3, 3}))
                       .reduce(ReduceOp::Sum, {5, 6, 7}, false);
  CudaKernelSource gsrc = render_cuda(create_schedule({grouped.node()}).kernels.back(), per_thread);
  EXPECT_TRUE(gsrc.shared_tile) << gsrc.kernel.substr(0, 300);
  EXPECT_NE(gsrc.kernel.find("seen as (2, 16, 64)"), std::string::npos) << gsrc.kernel.substr(0, 300);
  CudaCheck()
      .add(grouped, false, "grouped, stride 2")
      .add(wgrad3, false, "weight gradient, 27 rows")
      .add(ra.matmul(rb), false, "37 x 30")
      .add(ra.matmul(rb).binary(Op::Add, input(DType::Float32, {37, 30}, 441, false)), false, "37 x 30 + residual")
      .add(conv, false, "convolution, 7 x 7 maps")
      .add(wgrad, false, "weight gradient")
      .add(linear, false, "linear on (batch, tokens)")
      .add(conv.binary(Op::Max, Tensor::full({N, 1, OC, H, H}, Scalar::from_double(0.0), DType::Float32)), false,
           "convolution + ReLU")
      .run();
}

// float32 values as cvt.rna.tf32 leaves them: 10 mantissa bits, to nearest, ties away from zero
Tensor tf32_rounded(const Tensor& t) {
  std::vector<float> v = tiny::test::to_vec<float>(t);
  for (float& f : v) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7f800000u) != 0x7f800000u) x = (x + 0x1000u) & 0xffffe000u;
    std::memcpy(&f, &x, 4);
  }
  return Tensor::from_host(v.data(), t.shape(), DType::Float32);
}

TEST_F(Cuda, TensorCoreTiles) {
  // float16 factors of a float32 sum, as the torch layer casts them: 2 x 2 warps own a block
  // of 64 x 64 outputs in m16 x n8 pieces of mma.sync, staged 32 reduce steps at a time
  const DType f16 = DType::Float16, bf16 = DType::BFloat16, f32 = DType::Float32;
  Tensor a = input(f16, {77, 45}, 501, false), b = input(f16, {45, 70}, 502, false);
  Tensor prod = a.cast(f32).matmul(b.cast(f32));
  Schedule mm = create_schedule({prod.cast(f16).node()});
  ASSERT_EQ(mm.kernels.size(), 1u);
  CudaRenderOptions sm80;
  sm80.arch = 80;
  CudaKernelSource src = render_cuda(mm.kernels[0], sm80);
  EXPECT_EQ(src.tensor_cores, "f16");
  EXPECT_TRUE(src.shared_tile);
  EXPECT_EQ(src.block_size, 128);
  EXPECT_EQ(src.outputs, 2 * 2);  // 77 x 70 outputs: two blocks each way, the second partial
  EXPECT_NE(src.kernel.find("__shared__ u16 tiny_as[64][40]"), std::string::npos) << src.kernel;
  EXPECT_NE(src.kernel.find("tiny_mma_f16("), std::string::npos);
  // the casts' 16-bit values are staged as stored, without converting to float and back
  EXPECT_NE(src.kernel.find("u16 stage"), std::string::npos) << src.kernel;
  EXPECT_EQ(src.kernel.find("float stage"), std::string::npos) << src.kernel;
  // not below compute capability 8.0, nor when switched off: then shared tiles of scalars,
  // 4 x 4 per thread (ragged at 77 x 70)
  CudaRenderOptions sm75 = sm80, off = sm80;
  sm75.arch = 75;
  off.tensor_cores = false;
  Tensor ha = input(f16, {64, 40}, 505, false), hb = input(f16, {40, 64}, 506, false);
  Schedule even = create_schedule({ha.cast(f32).matmul(hb.cast(f32)).node()});
  EXPECT_EQ(render_cuda(even.kernels.back(), sm80).tensor_cores, "f16");
  for (const CudaRenderOptions& o : {sm75, off}) {
    CudaKernelSource ragged = render_cuda(mm.kernels[0], o);
    EXPECT_EQ(ragged.tensor_cores, "");
    EXPECT_EQ(ragged.tile_cols, 4);
    CudaKernelSource plain = render_cuda(even.kernels.back(), o);
    EXPECT_EQ(plain.tensor_cores, "");
    EXPECT_TRUE(plain.shared_tile);
  }
  // float32 only where TF32 is allowed; a product rounded to float16 before the sum, or
  // factors of two 16-bit types, not at all
  Tensor x = input(f32, {64, 40}, 503, false), y = input(f32, {40, 64}, 504, false);
  auto cores = [&](const Tensor& t, const CudaRenderOptions& o) {
    return render_cuda(create_schedule({t.node()}).kernels.back(), o).tensor_cores;
  };
  EXPECT_EQ(cores(x.matmul(y), sm80), "");
  EXPECT_EQ(cores(x.matmul(y, /*tf32=*/true), sm80), "tf32");
  EXPECT_EQ(cores(ha.matmul(hb), sm80), "");
  EXPECT_EQ(cores(ha.cast(f32).matmul(hb.cast(bf16).cast(f32)), sm80), "");
  EXPECT_EQ(cores(ha.cast(f32).matmul(hb.cast(bf16).cast(f32), true), sm80), "tf32");
  // 2 x 4 warps of 64 x 32 outputs where 128 x 128 blocks fill an H100 twice over
  CudaRenderOptions h100;
  h100.arch = 90;
  h100.multiprocessors = 132;
  Tensor big = Tensor::rand({4096, 1024}, 507, 0).cast(bf16), big_b = Tensor::rand({1024, 4096}, 508, 0).cast(bf16);
  CudaKernelSource big_src = render_cuda(create_schedule({big.cast(f32).matmul(big_b.cast(f32)).node()}).kernels.back(), h100);
  EXPECT_EQ(big_src.tensor_cores, "bf16");
  EXPECT_EQ(big_src.block_size, 256);
  EXPECT_EQ(big_src.outputs, 32 * 32);

  // results: partial blocks and a reduce past the last whole chunk, odd columns, float32
  // results, bfloat16, a linear layer's w.T with a fused bias + ReLU, batches, a padded 3x3
  // convolution, and TF32 factors that are already TF32 values (rounding them changes nothing)
  Tensor w = input(f16, {72, 45}, 509, false), bias = input(f32, {72}, 510, false);
  Tensor linear = a.cast(f32).matmul(w.cast(f32).permute({1, 0}));
  linear = linear.binary(Op::Add, bias.reshape({1, 72}).expand({77, 72}))
               .binary(Op::Max, Tensor::full({77, 72}, Scalar::from_double(0.0), f32));
  Tensor ba = input(bf16, {3, 40, 50}, 511, false), bb = input(bf16, {3, 50, 24}, 512, false);
  Tensor cx = input(f16, {2, 8, 6, 16}, 513, false), cw = input(f16, {64, 8, 3, 3}, 514, false);
  Tensor windows = cx.cast(f32).pad({{0, 0}, {0, 0}, {1, 1}, {1, 1}})
                       .as_strided({2, 8, 6, 16, 3, 3}, {8 * 8 * 18, 8 * 18, 18, 1, 18, 1}, 0)
                       .permute({0, 2, 3, 1, 4, 5}).reshape({2, 1, 6, 16, 8, 3, 3}).expand({2, 64, 6, 16, 8, 3, 3});
  Tensor conv = windows.binary(Op::Mul, cw.cast(f32).reshape({1, 64, 1, 1, 8, 3, 3}).expand({2, 64, 6, 16, 8, 3, 3}))
                    .reduce(ReduceOp::Sum, {4, 5, 6}, false);
  EXPECT_EQ(cores(conv, sm80), "f16");
  Tensor tx = tf32_rounded(input(f32, {50, 100}, 515, false)), ty = tf32_rounded(input(f32, {100, 33}, 516, false));
  // 16-byte staging loads where a factor runs along its staged side: a along k, b along its
  // columns, staged k-major and read by ldmatrix.trans (TF32: 32-bit loads); fragments by ldmatrix
  Tensor va = input(f16, {72, 48}, 519, false), vb = input(f16, {48, 80}, 520, false);
  CudaKernelSource vsrc = render_cuda(create_schedule({va.cast(f32).matmul(vb.cast(f32)).node()}).kernels.back(), sm80);
  EXPECT_NE(vsrc.kernel.find("tiny_vec<u32, 4> stage"), std::string::npos) << vsrc.kernel;  // 8 float16 values
  EXPECT_NE(vsrc.kernel.find("__shared__ u16 tiny_bs[32][72]"), std::string::npos) << vsrc.kernel;
  EXPECT_NE(vsrc.kernel.find("tiny_ldsm_trans_x4("), std::string::npos);
  EXPECT_NE(vsrc.kernel.find("tiny_ldsm_x4("), std::string::npos);
  EXPECT_TRUE(vsrc.vectors);
  CudaRenderOptions scalar_staging = sm80;
  scalar_staging.vector_staging = scalar_staging.ldmatrix = false;
  CudaKernelSource ssrc = render_cuda(create_schedule({va.cast(f32).matmul(vb.cast(f32)).node()}).kernels.back(), scalar_staging);
  EXPECT_EQ(ssrc.kernel.find("tiny_vec<"), std::string::npos) << ssrc.kernel;
  EXPECT_EQ(ssrc.kernel.find("tiny_ldsm"), std::string::npos) << ssrc.kernel;
  // (long sums of moderate positive values: no cancellation for the tensor cores' order to show)
  Tensor vx = tf32_rounded(positive(f32, {40, 96}, 523)), vy = tf32_rounded(positive(f32, {96, 72}, 524));
  Tensor sa = positive(f16, {64, 512}, 528), sb = positive(f16, {512, 64}, 529);
  Tensor::realize_all({sa, sb});
  Tensor vt = input(f16, {48, 72}, 525, false), vw = input(bf16, {56, 64}, 526, false), vv = input(bf16, {40, 64}, 527, false);
  CudaCheck c;
  c.add(va.cast(f32).matmul(vb.cast(f32)), false, "vector staging, partial blocks")
      .add(vt.cast(f32).permute({1, 0}).matmul(vb.cast(f32)), false, "a transposed: k-major a")
      .add(vv.cast(f32).matmul(vw.cast(f32).permute({1, 0})), false, "b transposed (a linear layer's w.T)")
      .add(sa.cast(f32).matmul(sb.cast(f32)), false, "vector staging, reduce split across blocks")
      .add(vx.matmul(vy, /*tf32=*/true), false, "tf32, both vector-staged")
      .add(tf32_rounded(positive(f32, {96, 40}, 530)).permute({1, 0}).matmul(vy, true), false, "tf32, a transposed");

  c.add(prod.cast(f16), false, "float16")
      .add(prod, false, "float16 factors, float32 sums")
      .add(input(f16, {40, 64}, 517, false).cast(f32).matmul(input(f16, {64, 33}, 518, false).cast(f32)), false,
           "odd columns")
      .add(linear.cast(f16), false, "linear bias relu")
      .add(ba.cast(f32).matmul(bb.cast(f32)).cast(bf16), false, "batched bfloat16")
      .add(conv.cast(f16), false, "convolution")
      .add(tx.matmul(ty, /*tf32=*/true), false, "tf32")
      .run();
  // and with scalar staging and 32-bit fragment loads (TINY_CUDA_OFF=vstage,ldmatrix)
  CudaCheck()
      .add(va.cast(f32).matmul(vb.cast(f32)), false, "float16")
      .add(vx.matmul(vy, /*tf32=*/true), false, "tf32")
      .with(scalar_staging, "scalar staging, 32-bit fragment loads")
      .run();
}

TEST_F(Cuda, TensorCoreChunksCopiedAsynchronously) {
  // TINY_CUDA_ON=async: 16-bit factors staged as stored go by cp.async through a ring of
  // shared-memory stages, one barrier per chunk; not TF32 (rounded on the way) nor factors
  // that are computed, and not below compute capability 8.0
  const DType f16 = DType::Float16, bf16 = DType::BFloat16, f32 = DType::Float32;
  CudaRenderOptions async;
  async.arch = 80;
  async.async_copies = true;
  Tensor va = input(f16, {72, 48}, 519, false), vb = input(f16, {48, 80}, 520, false);
  Tensor mm = va.cast(f32).matmul(vb.cast(f32));
  CudaKernelSource src = render_cuda(create_schedule({mm.node()}).kernels.back(), async);
  // 64 x 64 blocks: a 64 x 40 and a 32 x 72 stage of 16-bit values, 9.6 KiB, four in 48 KiB
  EXPECT_NE(src.kernel.find("__shared__ u16 tiny_as[4][64][40]"), std::string::npos) << src.kernel;
  EXPECT_NE(src.kernel.find("__shared__ u16 tiny_bs[4][32][72]"), std::string::npos) << src.kernel;
  EXPECT_NE(src.kernel.find("tiny_cp_async16(&tiny_as[3]"), std::string::npos) << src.kernel;
  EXPECT_NE(src.kernel.find("tiny_cp_async_wait(2)"), std::string::npos) << src.kernel;
  EXPECT_EQ(src.kernel.find("> stage"), std::string::npos) << src.kernel;  // no staging registers
  // one barrier per chunk (the loop unrolled by the ring's 4 stages), one per block
  EXPECT_EQ(count(src.kernel, "__syncthreads()"), 5u) << src.kernel;
  CudaRenderOptions sm75 = async, off;
  sm75.arch = 75;
  off.arch = 80;
  for (const CudaRenderOptions& o : {sm75, off})
    EXPECT_EQ(render_cuda(create_schedule({mm.node()}).kernels.back(), o).kernel.find("tiny_cp_async"), std::string::npos);
  Tensor vx = tf32_rounded(positive(f32, {40, 96}, 523)), vy = tf32_rounded(positive(f32, {96, 72}, 524));
  EXPECT_EQ(render_cuda(create_schedule({vx.matmul(vy, true).node()}).kernels.back(), async).kernel.find("tiny_cp_async"),
            std::string::npos);
  Tensor computed = va.cast(f32).binary(Op::Mul, va.cast(f32)).cast(f16).cast(f32).matmul(vb.cast(f32));
  EXPECT_EQ(render_cuda(create_schedule({computed.node()}).kernels.back(), async).kernel.find("tiny_cp_async"),
            std::string::npos);
  // 128 x 128 blocks on an H100: a 19 KiB stage, two in 48 KiB
  CudaRenderOptions h100 = async;
  h100.arch = 90;
  h100.multiprocessors = 132;
  Tensor big = Tensor::rand({4096, 1024}, 507, 0).cast(bf16), big_b = Tensor::rand({1024, 4096}, 508, 0).cast(bf16);
  CudaKernelSource big_src = render_cuda(create_schedule({big.cast(f32).matmul(big_b.cast(f32)).node()}).kernels.back(), h100);
  EXPECT_NE(big_src.kernel.find("__shared__ u16 tiny_as[2][128][40]"), std::string::npos) << big_src.kernel;
  EXPECT_NE(big_src.kernel.find("tiny_cp_async_wait(0)"), std::string::npos);

  // results: partial blocks, a reduce past the last whole chunk and shorter than the ring, both
  // transposes, batches, bfloat16, a split reduce, a fused epilogue; also with every buffer
  // 8 bytes off 16-byte alignment (element-wise copies into the same ring)
  Tensor vt = input(f16, {48, 72}, 525, false), vw = input(bf16, {56, 64}, 526, false), vv = input(bf16, {40, 64}, 527, false);
  Tensor sa = positive(f16, {64, 512}, 528), sb = positive(f16, {512, 64}, 529);
  Tensor ba = input(bf16, {3, 40, 50}, 511, false), bb = input(bf16, {3, 56, 24}, 512, false);
  Tensor::realize_all({sa, sb});
  Tensor bias = input(f32, {80}, 531, false);
  Tensor epilogue = mm.binary(Op::Add, bias.reshape({1, 80}).expand({72, 80}))
                        .binary(Op::Max, Tensor::full({72, 80}, Scalar::from_double(0.0), f32));
  CudaRenderOptions async_emu;  // the emulated device's own architecture (9.0)
  async_emu.async_copies = true;
  CudaCheck()
      .add(mm, false, "partial blocks")
      .add(input(f16, {40, 16}, 532, false).cast(f32).matmul(input(f16, {16, 33}, 533, false).cast(f32)), false,
           "a reduce of 16 steps: one chunk in a ring of four")
      .add(vt.cast(f32).permute({1, 0}).matmul(vb.cast(f32)), false, "a transposed: k-major a")
      .add(vv.cast(f32).matmul(vw.cast(f32).permute({1, 0})), false, "b transposed (a linear layer's w.T)")
      .add(sa.cast(f32).matmul(sb.cast(f32)), false, "reduce split across blocks")
      .add(ba.cast(f32).matmul(bb.shrink({{0, 3}, {0, 50}, {0, 24}}).cast(f32)).cast(bf16), false, "batched bfloat16")
      .add(epilogue.cast(f16), false, "bias and ReLU")
      .with(async_emu, "cp.async ring")
      .with(async_emu, "cp.async ring, buffers 8 bytes off", 8)
      .run();
}

TEST_F(Cuda, TensorCoresRoundFactorsToTf32WhereAllowed) {
  // the emulated tensor cores round as the GPU's cvt.rna.tf32 does: the result is the CPU's
  // exact product of the rounded factors, not the exact product of the factors
  Tensor x = input(DType::Float32, {64, 96}, 521, false), y = input(DType::Float32, {96, 48}, 522, false);
  Schedule s = create_schedule({x.matmul(y, /*tf32=*/true).node()});
  ASSERT_EQ(s.kernels.size(), 1u);
  Device* emu = cuda_emu_device();
  ASSERT_NE(emu, nullptr) << cuda_emu_info().reason;
  Memory got = run_on(*emu, s, initial_memory(s));
  const Buffer* out = s.kernels[0].buffers[size_t(s.kernels[0].outputs[0].buffer)].get();
  std::vector<float> tensor_cores(size_t(out->numel()));
  std::memcpy(tensor_cores.data(), got.at(out->owner()).data() + out->owner_offset(), out->nbytes());
  std::vector<float> rounded = tiny::test::to_vec<float>(tf32_rounded(x).matmul(tf32_rounded(y)));
  std::vector<float> exact = tiny::test::to_vec<float>(x.matmul(y));
  int apart = 0;
  for (size_t i = 0; i < exact.size(); i++) {
    // sums of 96 products of up to 16 in two orders: float32 rounding apart
    EXPECT_NEAR(tensor_cores[i], rounded[i], 2e-5 * std::fabs(rounded[i]) + 1e-4) << i;
    apart += std::fabs(tensor_cores[i] - exact[i]) > 1e-4 * (std::fabs(exact[i]) + 1);
  }
  EXPECT_GT(apart, int(exact.size()) / 2);  // TF32 keeps 11 bits of each factor: ~3e-4 apart
}

TEST_F(Cuda, NestedReduceAndElementwiseAfter) {
  Tensor a = positive(DType::Float32, {4, 5, 6}, 161);
  // softmax-like: the max is realized, the exp-sum fuses into the last kernel
  Tensor mx = a.reduce(ReduceOp::Max, {2}, true);
  Tensor e = a.binary(Op::Sub, mx.expand(a.shape())).unary(Op::Exp);
  Tensor sm = e.binary(Op::Div, e.reduce(ReduceOp::Sum, {2}, true).expand(a.shape()));
  Tensor nested = a.reduce(ReduceOp::Sum, {2}, false).reduce(ReduceOp::Max, {1}, false);
  CudaCheck c;
  c.add(sm, false).add(nested, false).run();
}

// ---------------------------------------------------------------- creation

TEST_F(Cuda, RandIsBitIdentical) {
  Tensor r = Tensor::rand({17, 31}, 0x123456789abcdefULL, 77);
  Tensor r2 = Tensor::rand({1000}, 42, (uint64_t(1) << 32) - 3);  // counter crosses 32 bits
  CudaCheck c;
  c.add(r, true)
      .add(r2, true)
      .add(r.binary(Op::Mul, Tensor::full(r.shape(), Scalar::from_double(2.0), DType::Float32)).cast(DType::Float16), true)
      .run();
}

TEST_F(Cuda, Arange) {
  CudaCheck c;
  c.add(Tensor::arange(100, Scalar::from_int(-7), Scalar::from_int(3), DType::Int32), true)
      .add(Tensor::arange(300, Scalar::from_int(5), Scalar::from_int(-1), DType::Int8), true)
      .add(Tensor::arange(64, Scalar::from_double(0.1), Scalar::from_double(0.7), DType::Float32), true)
      .add(Tensor::arange(64, Scalar::from_double(-3.5), Scalar::from_double(0.25), DType::Float16), true)
      .add(Tensor::arange(64, Scalar::from_double(1.0), Scalar::from_double(1.0 / 3.0), DType::Float64), true)
      .add(Tensor::arange(12, Scalar::from_int(0), Scalar::from_int(1), DType::Int64).reshape({3, 4}).permute({1, 0}).contiguous(), true)
      .run();
}

TEST_F(Cuda, ConstantsAndScalars) {
  Tensor a = input(DType::Float32, {}, 171);
  Tensor k = Tensor::full({3, 3}, Scalar::from_double(-2.5), DType::Float32);
  CudaCheck c;
  c.add(a.binary(Op::Mul, a), true)  // a 0-d kernel
      .add(k.pad({{1, 0}, {0, 1}}).unary(Op::Neg), true)
      .add(Tensor::full({5}, Scalar::from_double(NAN), DType::Float16).pad({{1, 1}}).binary(Op::Add, input(DType::Float16, {7}, 172)), true)
      .add(Tensor::full({4}, Scalar::from_int(std::numeric_limits<int64_t>::min()), DType::Int64).pad({{0, 2}}).binary(
               Op::Sub, input(DType::Int64, {6}, 173)), true)
      .run();
}

// ---------------------------------------------------------------- writes

TEST_F(Cuda, PartialWrites) {
  Tensor base = input(DType::Float32, {30}, 181);
  Tensor v = input(DType::Float32, {3, 4}, 182);
  Tensor w = base.write_strided({3, 4}, {8, 2}, 1, v.unary(Op::Exp));
  Tensor w2 = w.write_strided({5}, {-1}, 29, input(DType::Float32, {5}, 183));
  Tensor hb = input(DType::Float16, {16}, 184);
  Tensor hw = hb.write_strided({2, 2}, {4, 1}, 5, input(DType::Float16, {2, 2}, 185).binary(Op::Mul, input(DType::Float16, {2, 2}, 186)));
  Tensor ib = input(DType::Int64, {10}, 187);
  Tensor iw = ib.write_strided({10}, {1}, 0, ib.flip({true}));
  CudaCheck c;
  c.add(w2, false).add(hw, true).add(iw, true).run();
  EXPECT_GE(c.kernels(), 4);
}

TEST_F(Cuda, EmptyAndUnitShapes) {
  Tensor e = input(DType::Float32, {0, 5}, 191);
  Tensor u = input(DType::Int32, {1, 1, 7}, 192);
  CudaCheck c;
  c.add(e.unary(Op::Exp), true)
      .add(u.binary(Op::Add, u).reshape({7, 1}).expand({7, 3}).contiguous(), true)
      .run();
}

// ---------------------------------------------------------------- every op, indexing

// Every unary and binary engine op in every dtype it takes (op_accepts)
// renders, compiles and computes what the CPU computes; other dtypes are refused.
TEST_F(Cuda, EveryOpRendersInEveryDtype) {
  std::vector<Op> unary, binary;
  for (int i = 0; i <= int(Op::Scatter); i++) {
    Op op = Op(i);
    if (op == Op::Cast || op == Op::Bitcast) continue;  // CastsBetweenAllDtypes, Bitcasts
    if (is_unary(op)) unary.push_back(op);
    if (is_binary(op)) binary.push_back(op);
  }
  ASSERT_GE(unary.size(), 30u);
  ASSERT_GE(binary.size(), 20u);
  CudaCheck c;
  int cases = 0;
  for (DType dt : kAll) {
    Tensor a = input(dt, {3, 7}, 300 + unsigned(dt)), b = input(dt, {3, 7}, 320 + unsigned(dt));
    auto match = [&](Op op) { return !is_float(dt) || exact_float_op(op); };
    for (Op op : unary) {
      if (!op_accepts(op, dt)) {
        EXPECT_THROW(a.unary(op), std::invalid_argument) << op_name(op) << " " << dtype_name(dt);
        continue;
      }
      c.add(a.unary(op), match(op), std::string(op_name(op)) + " " + dtype_name(dt));
      cases++;
    }
    for (Op op : binary) {
      if (!op_accepts(op, dt)) {
        EXPECT_THROW(a.binary(op, b), std::invalid_argument) << op_name(op) << " " << dtype_name(dt);
        continue;
      }
      c.add(a.binary(op, b), match(op), std::string(op_name(op)) + " " + dtype_name(dt));
      cases++;
    }
  }
  EXPECT_GE(cases, 300);
  c.run();
}

TEST_F(Cuda, GatherAndScatter) {
  Tensor src = input(DType::Float32, {6, 5}, 341);
  std::vector<int64_t> at = {0, 29, 7, 7, 12, -1, 30, 3};  // -1 and 30 are clamped to 0, as on the CPU
  Tensor idx = Tensor::from_host(at.data(), {2, 4}, DType::Int64);
  std::vector<int64_t> to = {3, 1, 3, 0, 5, 3};  // duplicates: applied in order
  Tensor where = Tensor::from_host(to.data(), {6}, DType::Int64);
  Tensor vals = input(DType::Float32, {6}, 342, false);
  Tensor ivals = input(DType::Int32, {6}, 343);
  Tensor base = input(DType::Float32, {8}, 344, false);
  Tensor ibase = input(DType::Int32, {8}, 345);
  CudaCheck c;
  c.add(src.reshape({30}).gather(idx), true, "gather")
      .add(src.reshape({30}).gather(idx).binary(Op::Mul, input(DType::Float32, {2, 4}, 346)), true, "gather * x")
      .add(base.scatter(where, vals, true), false, "scatter add")  // one thread, in index order
      .add(ibase.scatter(where, ivals, true, ReduceOp::Max), true, "scatter max")
      .add(ibase.scatter(where.binary(Op::Add, Tensor::full({6}, Scalar::from_int(9), DType::Int64)), ivals, true),
           true, "out of range: skipped")
      .run();
}

// ---------------------------------------------------------------- rendering details

TEST_F(Cuda, LargeShapesUse64BitIndices) {
  // compile only: 2^33 elements would not fit this machine's memory
  Tensor one = input(DType::Float32, {1, 1}, 201);
  Tensor big = one.expand({int64_t(1) << 17, int64_t(1) << 16});
  Schedule s = create_schedule({big.binary(Op::Add, big).node()});
  ASSERT_EQ(s.kernels.size(), 1u);
  CudaRenderOptions one_per_thread;
  one_per_thread.vector_lanes = false;
  CudaBuild b = build_cuda(s.kernels[0], 80, true, one_per_thread);
  EXPECT_TRUE(b.out.ok) << b.out.log;
  EXPECT_EQ(b.src.kernel.find("const u32 g"), std::string::npos) << b.src.kernel;  // no 32-bit flat index
  EXPECT_NE(b.src.kernel.find("(i64)"), std::string::npos);
  // 2^31 groups of 4 lanes: the group number fits 32 bits, the elements' indices do not
  CudaBuild lanes = build_cuda(s.kernels[0], 80, true);
  EXPECT_TRUE(lanes.out.ok) << lanes.out.log;
  EXPECT_EQ(lanes.src.lanes, 4);
  EXPECT_NE(lanes.src.kernel.find("const u32 g"), std::string::npos) << lanes.src.kernel;
  EXPECT_NE(lanes.src.kernel.find("* 65536LL)"), std::string::npos) << lanes.src.kernel;
  Schedule r = create_schedule({big.reduce(ReduceOp::Sum, {0, 1}, false).node()});
  CudaBuild rb = build_cuda(r.kernels[0], 80, true);
  EXPECT_TRUE(rb.out.ok) << rb.out.log;
  EXPECT_TRUE(rb.src.block_reduce);
}

TEST_F(Cuda, ReduceModeFollowsTheShape) {
  // render only: the choice between a thread and a block per output
  Tensor row = input(DType::Float32, {1, 512}, 221);
  Tensor col = input(DType::Float32, {512, 1}, 222);
  auto mode = [](const Tensor& t) {
    Schedule s = create_schedule({t.node()});
    return render_cuda(s.kernels.back()).block_reduce;
  };
  EXPECT_TRUE(mode(row.expand({20000, 512}).reduce(ReduceOp::Sum, {1}, false)));   // rows: contiguous axis
  Tensor window = input(DType::Float32, {1, 576}, 225);  // a 3x3 conv's 64-channel window, 200k outputs
  EXPECT_FALSE(mode(window.expand({200704, 576}).reduce(ReduceOp::Sum, {1}, false)));  // enough threads
  EXPECT_FALSE(mode(col.expand({512, 20000}).reduce(ReduceOp::Sum, {0}, false)));  // many columns
  EXPECT_TRUE(mode(col.expand({512, 100}).reduce(ReduceOp::Sum, {0}, false)));     // few columns
  EXPECT_FALSE(mode(input(DType::Float32, {100000, 8}, 224).reduce(ReduceOp::Max, {1}, false)));  // short rows
}

TEST_F(Cuda, SourceIsSelfContained) {
  Tensor a = input(DType::BFloat16, {8}, 211);
  Schedule s = create_schedule({a.unary(Op::Exp).node()});
  CudaKernelSource src = render_cuda(s.kernels[0]);
  EXPECT_EQ(src.source.find("#include"), std::string::npos);
  EXPECT_NE(src.source.find("extern \"C\" __global__"), std::string::npos);
  EXPECT_NE(src.kernel.find("tiny_round_bf16(expf("), std::string::npos) << src.kernel;
  EXPECT_EQ(src.num_buffers, 2);
  // the PTX for a GPU-less default arch
  CudaBuild b = build_cuda(s.kernels[0]);
  ASSERT_TRUE(b.out.ok) << b.out.log;
  EXPECT_NE(b.out.code.find(".target sm_" + std::to_string(cuda_default_arch())), std::string::npos);
}

// ---------------------------------------------------------------- the driver path, without a GPU

// Runs only inside a child process started by the CudaEnv.Mock* tests below.
TEST(CudaMockChild, DriverState) {
  const char* expect_env = std::getenv("TINY_MOCK_EXPECT");
  if (!expect_env) GTEST_SKIP() << "runs in a child process of CudaEnv.MockDriver*";
  std::string expect = expect_env;
  const CudaInfo& i = cuda_info();
  std::printf("[ cuda     ] %s\n", i.available ? i.name.c_str() : i.reason.c_str());
  if (expect.rfind("unavailable:", 0) == 0) {
    EXPECT_FALSE(cuda_available());
    EXPECT_EQ(cuda_device(), nullptr);
    EXPECT_NE(i.reason.find(expect.substr(12)), std::string::npos) << i.reason;
    return;
  }
  ASSERT_TRUE(cuda_available()) << i.reason;
  EXPECT_EQ(i.name, "Mock GPU");
  EXPECT_EQ(cuda_default_arch(), 90);
  Device* d = cuda_device();
  ASSERT_NE(d, nullptr);
  EXPECT_NE(d->name().find("sm_90"), std::string::npos);
  // memory through Buffer, as the engine uses it; freed blocks are reused
  std::vector<float> in = {1, 2, 3, 4, 5}, out(5, 0);
  {
    Buffer b(d, DType::Float32, 5);
    b.copy_in(in.data(), 20);
    b.copy_out(out.data(), 20);
  }
  EXPECT_EQ(out, in);
  long allocs = mock_fn<long (*)()>("tiny_mock_allocations")();
  {
    Buffer b(d, DType::Float32, 5);
    EXPECT_NE(b.ptr(), nullptr);
  }
  EXPECT_EQ(mock_fn<long (*)()>("tiny_mock_allocations")(), allocs);  // from the cache
  // modules: NVRTC's output loaded through the driver (the mock runs no kernels)
  Tensor a = input(DType::Float32, {10}, 7);
  Schedule s = create_schedule({a.unary(Op::Exp).node()}, *d);
  ASSERT_EQ(s.kernels.size(), 1u);
  if (expect == "badimage") {
    try {
      cuda_programs(*d, {&s.kernels[0]});
      ADD_FAILURE() << "a rejected image must throw";
    } catch (const std::runtime_error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("image rejected"), std::string::npos) << m;
      EXPECT_NE(m.find("[sm_90]"), std::string::npos) << m;
      EXPECT_NE(m.find("[compute_80]"), std::string::npos) << m;
      EXPECT_NE(m.find(s.kernels[0].name()), std::string::npos) << m;  // names the kernel
      size_t at = m.find("(source: ");
      ASSERT_NE(at, std::string::npos) << m;
      std::string path = m.substr(at + 9, m.find(')', at) - at - 9);
      std::ifstream kept(path);
      EXPECT_TRUE(kept.good()) << "the failing source is kept at " << path;
    }
    return;
  }
  auto p = cuda_programs(*d, {&s.kernels[0]});
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0]->parallel_size, 10);
  EXPECT_EQ(cuda_programs(*d, {&s.kernels[0]})[0], p[0]);  // cached
  // a schedule's new kernels compile in parallel and load in order
  Schedule two = create_schedule({a.unary(Op::Sqrt).node(), a.reduce(ReduceOp::Max, {0}, false).node()}, *d);
  ASSERT_EQ(two.kernels.size(), 2u);
  int64_t built = counters().compiles + counters().disk_cache_hits;
  auto q = cuda_programs(*d, {&two.kernels[0], &two.kernels[1]});
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0]->name.rfind(two.kernels[0].name() + "_", 0), 0u) << q[0]->name;  // E_10_<source hash>
  EXPECT_EQ(q[1]->name.rfind(two.kernels[1].name() + "_", 0), 0u) << q[1]->name;
  EXPECT_EQ(counters().compiles + counters().disk_cache_hits - built, 2);
}

TEST(CudaEnv, MockDriverFailuresAreStatuses) {
  TempDir dir;
  std::string so = build_mock(dir.path);
  ASSERT_FALSE(so.empty()) << "cannot build the mock driver";
  std::string lib = "TINY_LIBCUDA=" + shell_quote(so);
  struct Case {
    std::string env, expect;
  };
  std::vector<Case> cases = {
      {lib + " TINY_MOCK_CUDA=noinit", "unavailable:cuInit failed: no CUDA-capable device"},
      {lib + " TINY_MOCK_CUDA=nodevice", "unavailable:no CUDA GPU"},
      {lib + " TINY_DISABLE_CUDA=1", "unavailable:disabled by TINY_DISABLE_CUDA"},
      {"TINY_LIBCUDA=libm.so.6", "unavailable:lacks required symbols"},
  };
  if (nvrtc_available()) {
    cases.push_back({lib, "loads"});
    cases.push_back({lib + " TINY_MOCK_CUDA=badimage", "badimage"});
  }
  for (auto& c : cases) {
    auto [rc, out] = run_child(c.env + " TINY_DEVICE=cpu TINY_MOCK_EXPECT=" + shell_quote(c.expect), "CudaMockChild.*");
    EXPECT_EQ(rc, 0) << c.env << "\n" << out;
    EXPECT_NE(out.find("[  PASSED  ] 1 test"), std::string::npos) << out;
  }
}

TEST(CudaEnv, MissingNvrtcSkipsCleanly) {
  // A bare environment: no TINY_NVRTC file, no HOME, no PATH with Python (the
  // loader path stays: the test binary needs it for LLVM).
  const char* ld = std::getenv("LD_LIBRARY_PATH");
  std::string env = "env -i TINY_NVRTC=/nonexistent/libnvrtc.so.13 HOME=/nonexistent TINY_NO_DISK_CACHE=1 PATH=/usr/bin:/bin";
  if (ld) env += " LD_LIBRARY_PATH=" + shell_quote(ld);
  auto [rc, out] = run_child(env, "CudaEnv.NvrtcFoundOrExplained:Cuda.Arange");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("[  PASSED  ] 2 tests"), std::string::npos) << out;  // the emulated device needs no NVRTC
  if (out.find("[ nvrtc    ] libnvrtc not found") != std::string::npos) {
    EXPECT_NE(out.find("TINY_NVRTC=/nonexistent/libnvrtc.so.13: no such file"), std::string::npos) << out;
  }  // else this machine has NVRTC where the system looks: fine, it was found
}

// Runs in a child process of CudaEnv.AvailabilityIsAStatusNotACrash: TINY_DEVICE=cuda without a GPU.
TEST(CudaEnvChild, ComputeDeviceError) {
  const char* want = std::getenv("TINY_DEVICE");
  if (!want || std::string(want) != "cuda" || cuda_available())
    GTEST_SKIP() << "runs in a child process of CudaEnv.AvailabilityIsAStatusNotACrash";
  try {
    compute_device();
    ADD_FAILURE() << "TINY_DEVICE=cuda without a GPU must throw";
  } catch (const std::runtime_error& e) {
    std::printf("[ error    ] %s\n", e.what());
  }
}

// ---------------------------------------------------------------- CPU semantics found by the comparison

TEST(CudaCpuReference, SignOfLargeUint8IsOne) {
  // The CPU generator compared uint8 with a signed compare, so sign(200) was 0.
  std::vector<uint8_t> v = {0, 1, 127, 128, 200, 255};
  Tensor t = Tensor::from_host(v.data(), {6}, DType::UInt8).unary(Op::Sign);
  std::vector<uint8_t> out(6);
  t.contiguous().copy_to_host(out.data());
  EXPECT_EQ(out, (std::vector<uint8_t>{0, 1, 1, 1, 1, 1}));
}
