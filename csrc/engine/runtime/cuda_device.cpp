#include "engine/runtime/cuda_device.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "engine/runtime/counters.h"
#include "engine/runtime/cuda_driver.h"

namespace tiny {
namespace {

using namespace cu;

// A driver API table with the context of its device 0.
struct Driver {
  CudaInfo info;
  Api api{};
  CUcontext ctx = nullptr;
  CUdevice dev = 0;
  DeviceKind kind = DeviceKind::Cuda;

  std::string error(CUresult r) const {
    const char* s = nullptr;
    if (api.GetErrorString && api.GetErrorString(r, &s) == CUDA_SUCCESS && s) return s;
    return "CUDA error " + std::to_string(r);
  }
  void check(CUresult r, const std::string& what) const {
    if (r != CUDA_SUCCESS) throw std::runtime_error("tiny " + std::string(device_kind_name(kind)) + ": " + what + ": " + error(r));
  }
  // Driver calls need the context current on the calling thread.
  void bind() const { check(api.CtxSetCurrent(ctx), "cuCtxSetCurrent"); }

  // cuInit, GPU 0, its context and description; info.reason says what failed.
  void open() {
    CUresult r = api.Init(0);
    if (r != CUDA_SUCCESS) {
      info.reason = "cuInit failed: " + error(r);
      return;
    }
    api.DriverGetVersion(&info.driver_version);
    int count = 0;
    r = api.DeviceGetCount(&count);
    if (r != CUDA_SUCCESS || count == 0) {
      info.reason = r != CUDA_SUCCESS ? "cuDeviceGetCount failed: " + error(r) : "no CUDA GPU";
      return;
    }
    if ((r = api.DeviceGet(&dev, 0)) != CUDA_SUCCESS || (r = api.DevicePrimaryCtxRetain(&ctx, dev)) != CUDA_SUCCESS) {
      info.reason = "cannot open GPU 0: " + error(r);
      return;
    }
    char name[256] = {0};
    api.DeviceGetName(name, sizeof name - 1, dev);
    info.name = name;
    api.DeviceGetAttribute(&info.cc_major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    api.DeviceGetAttribute(&info.cc_minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    api.DeviceGetAttribute(&info.multiprocessors, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
    size_t total = 0;
    api.DeviceTotalMem(&total, dev);
    info.total_memory = int64_t(total);
    info.available = true;
  }
};

template <typename F>
bool sym(void* h, const char* name, F& fn, std::string& missing) {
  fn = reinterpret_cast<F>(dlsym(h, name));
  if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
  return fn != nullptr;
}

Driver& gpu_driver() {
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
    std::string missing;
#define TINY_LOAD(field, symbol) sym(h, #symbol, a.field, missing);
    TINY_CUDA_API(TINY_LOAD)
#undef TINY_LOAD
    if (!missing.empty()) {
      info.reason = "the CUDA driver library lacks required symbols (" + missing + ")";
      return dr;
    }
    dr->open();
    return dr;
  }();
  return *d;
}

Driver& emu_driver() {
  static Driver* d = [] {
    auto* dr = new Driver();
    dr->kind = DeviceKind::CudaEmu;
    if (!cuda_emu_info().available) {
      dr->info.reason = cuda_emu_info().reason;
      return dr;
    }
    dr->api = cuda_emu_api();
    dr->open();
    return dr;
  }();
  return *d;
}

// A CUDA event recorded on the device's stream: timed by the GPU, the host not waiting.
struct CudaEvent final : DeviceEvent {
  const Driver& driver;
  CUevent event = nullptr;
  CudaEvent(const Driver& d, CUstream stream) : driver(d) {
    driver.check(driver.api.EventCreate(&event, 0), "cuEventCreate");
    driver.check(driver.api.EventRecord(event, stream), "cuEventRecord");
  }
  ~CudaEvent() override { driver.api.EventDestroy(event); }
  bool complete() override {
    driver.bind();
    CUresult r = driver.api.EventQuery(event);
    if (r == CUDA_ERROR_NOT_READY) return false;
    driver.check(r, "cuEventQuery");
    return true;
  }
  void wait() override {
    driver.bind();
    driver.check(driver.api.EventSynchronize(event), "cuEventSynchronize");
  }
  double ms_until(DeviceEvent& end) override {
    auto* e = dynamic_cast<CudaEvent*>(&end);
    if (!e || &e->driver != &driver) throw std::invalid_argument("elapsed time between events of different devices");
    wait();
    e->wait();
    float ms = 0;
    driver.check(driver.api.EventElapsedTime(&ms, event, e->event), "cuEventElapsedTime");
    return ms;
  }
};

// A captured launch sequence, in segments, and what it was captured with.
struct CudaGraph final : ReplayState {
  const Driver* driver = nullptr;
  std::vector<CUgraphExec> segments;  // executable graphs, launched in order
  std::vector<size_t> cuts;           // the kernels the segments but the last end with
  std::vector<uint64_t> signature;    // buffer addresses and launch words of every step
  // Kernels whose results the host read while later kernels of the sequence were still queued
  // (ascending; learned by CudaDevice::copy_out_after). The next capture ends a segment with
  // each, and an event after it lets such a read wait for that segment only: a training step's
  // loss.item() then returns once the forward pass is done, while the backward pass and the
  // optimizer run on behind the host building the next step (as eager CUDA's queued kernels do).
  std::shared_ptr<std::vector<size_t>> read_points = std::make_shared<std::vector<size_t>>();
  ~CudaGraph() override {
    if (driver->api.CtxSetCurrent(driver->ctx) != CUDA_SUCCESS) return;
    for (CUgraphExec e : segments)
      if (e) driver->api.GraphExecDestroy(e);
  }
};

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(Driver& d) : d_(d) {
    d_.bind();
    d_.check(d_.api.StreamCreate(&stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
  }
  DeviceKind kind() const override { return d_.kind; }
  std::string name() const override {
    const CudaInfo& i = d_.info;
    return std::string(device_kind_name(d_.kind)) + ":0 (" + i.name + ", sm_" + std::to_string(i.cc_major) +
           std::to_string(i.cc_minor) + ")";
  }
  DeviceProperties properties() const override {
    const CudaInfo& i = d_.info;
    DeviceProperties p;
    p.name = i.name;
    p.arch = "sm_" + std::to_string(i.cc_major) + std::to_string(i.cc_minor);
    p.cc_major = i.cc_major;
    p.cc_minor = i.cc_minor;
    p.multiprocessors = i.multiprocessors;
    p.total_memory = i.total_memory;
    return p;
  }
  std::pair<int64_t, int64_t> mem_get_info() override {
    d_.bind();
    size_t free_b = 0, total = 0;
    d_.check(d_.api.MemGetInfo(&free_b, &total), "cuMemGetInfo");
    return {int64_t(free_b), int64_t(total)};
  }

  void copy_in(void* dst, const void* src, size_t nbytes) override {
    if (!nbytes) return;
    d_.bind();
    // From pageable memory this returns once the source is staged: the caller
    // may reuse it. From pinned memory the copy is a DMA that runs on: wait
    // for it, since the caller may free or refill the source next.
    {
      std::lock_guard<std::mutex> g(queue_mu_);  // (numbered in the stream's order)
      d_.check(d_.api.MemcpyHtoDAsync(reinterpret_cast<CUdeviceptr>(dst), src, nbytes, stream_), "cuMemcpyHtoDAsync");
      queued_++;
    }
    if (host_pinned(src)) synchronize();
  }
  void copy_out(void* dst, const void* src, size_t nbytes) override {
    if (!nbytes) return;
    d_.bind();
    d_.check(d_.api.MemcpyDtoHAsync(dst, reinterpret_cast<CUdeviceptr>(src), nbytes, stream_), "cuMemcpyDtoHAsync");
    synchronize();
  }
  // Waits for the first mark at or after `position` where there is one short of the queue's
  // end; then copies on the legacy stream, which does not wait for the work queued after it.
  void copy_out_after(uint64_t position, void* dst, const void* src, size_t nbytes) override {
    if (!nbytes) return;
    d_.bind();
    std::unique_lock<std::mutex> g(queue_mu_);
    auto mark = std::find_if(marks_.begin(), marks_.end(), [&](const Mark& m) { return m.position >= position; });
    if (position == 0 || mark == marks_.end()) {
      learn_read_point(position);
      g.unlock();
      copy_out(dst, src, nbytes);
      return;
    }
    // (waited for unlocked: a mark released and recorded again meanwhile is later, still enough)
    const Mark passed = *mark;
    g.unlock();
    d_.check(d_.api.EventSynchronize(passed.event), "cuEventSynchronize");
    d_.check(d_.api.MemcpyDtoH(dst, reinterpret_cast<CUdeviceptr>(src), nbytes), "cuMemcpyDtoH");
    g.lock();
    release_marks_through(passed.position);
    counters().copies_out_early++;
  }
  uint64_t queued_position() const override { return queued_.load(std::memory_order_acquire); }
  void launch(LaunchStep&& step) override {
    std::lock_guard<std::mutex> g(queue_mu_);
    step.program->run(step.args.data(), 0, step.program->parallel_size);
    queued_++;
  }

  void launch_all(std::vector<LaunchStep>& steps, std::unique_ptr<ReplayState>* state) override {
    if (!state) {
      Device::launch_all(steps, state);
      return;
    }
    std::vector<uint64_t> signature;
    for (auto& s : steps) {
      for (size_t i = 0; i + 1 < s.args.size(); i++) signature.push_back(reinterpret_cast<uintptr_t>(s.args[i]));
      signature.insert(signature.end(), s.params.begin(), s.params.end());
    }
    auto* graph = dynamic_cast<CudaGraph*>(state->get());
    d_.bind();
    if (!graph) {
      state->reset(graph = new CudaGraph());
      graph->driver = &d_;
    }
    std::lock_guard<std::mutex> g(queue_mu_);  // (a copy from another thread stays out of a capture)
    if (graph->segments.empty() || graph->signature != signature || graph->cuts != *graph->read_points)
      capture(*graph, steps, std::move(signature));
    const uint64_t first = queued_ + 1;  // kernel k's position: first + k
    for (size_t s = 0; s < graph->segments.size(); s++) {
      d_.check(d_.api.GraphLaunch(graph->segments[s], stream_), "cuGraphLaunch");
      if (s < graph->cuts.size()) add_mark(first + graph->cuts[s]);
    }
    queued_ += steps.size();
    last_replay_ = {graph->read_points, first, steps.size()};
  }

  void synchronize() override {
    d_.bind();
    d_.check(d_.api.StreamSynchronize(stream_), "cuStreamSynchronize");
    std::lock_guard<std::mutex> g(queue_mu_);
    release_marks_through(UINT64_MAX);
  }

  std::unique_ptr<DeviceEvent> record_event() override {
    d_.bind();
    return std::make_unique<CudaEvent>(d_, stream_);
  }

  const Driver& driver() const { return d_; }
  CUstream stream() const { return stream_; }

 protected:
  void* raw_alloc(size_t nbytes) override {
    d_.bind();
    CUdeviceptr p = 0;
    CUresult r = d_.api.MemAlloc(&p, nbytes);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
    d_.check(r, "cuMemAlloc");
    return reinterpret_cast<void*>(p);
  }
  void raw_free(void* ptr, size_t) override {
    d_.bind();
    d_.api.MemFree(reinterpret_cast<CUdeviceptr>(ptr));
  }
  void* raw_host_alloc(size_t nbytes) override {
    d_.bind();
    void* p = nullptr;
    CUresult r = d_.api.MemHostAlloc(&p, nbytes, 0);
    if (r == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
    d_.check(r, "cuMemHostAlloc");
    return p;
  }
  void raw_host_free(void* p) override {
    d_.bind();
    d_.api.MemFreeHost(p);
  }
  size_t granularity(size_t) const override { return 512; }
  size_t max_cached_bytes() const override { return size_t(8) << 30; }

 private:
  // Captures the sequence again, a segment per cut: each executable graph is updated in place
  // where it can be, else instantiated.
  void capture(CudaGraph& graph, std::vector<LaunchStep>& steps, std::vector<uint64_t> signature) {
    std::vector<size_t> cuts;
    for (size_t k : *graph.read_points)
      if (k + 1 < steps.size()) cuts.push_back(k);
    if (graph.segments.size() != cuts.size() + 1) {
      for (CUgraphExec e : graph.segments)
        if (e) d_.api.GraphExecDestroy(e);
      graph.segments.assign(cuts.size() + 1, nullptr);
    }
    graph.signature.clear();  // (until every segment is captured)
    size_t begin = 0;
    for (size_t s = 0; s < graph.segments.size(); s++) {
      const size_t end = s < cuts.size() ? cuts[s] + 1 : steps.size();
      // Capture the launches (nothing runs), then update the executable graph in
      // place, or instantiate one when there is none or the update is refused.
      d_.check(d_.api.StreamBeginCapture(stream_, CU_STREAM_CAPTURE_MODE_RELAXED), "cuStreamBeginCapture");
      CUgraph captured = nullptr;
      try {
        for (size_t k = begin; k < end; k++) steps[k].program->run(steps[k].args.data(), 0, steps[k].program->parallel_size);
      } catch (...) {
        if (d_.api.StreamEndCapture(stream_, &captured) == CUDA_SUCCESS && captured) d_.api.GraphDestroy(captured);
        throw;
      }
      d_.check(d_.api.StreamEndCapture(stream_, &captured), "cuStreamEndCapture");
      CUgraphExec& exec = graph.segments[s];
      GraphUpdateInfo info{};
      if (exec && d_.api.GraphExecUpdate(exec, captured, &info) != CUDA_SUCCESS) {
        d_.api.GraphExecDestroy(exec);
        exec = nullptr;
      }
      CUresult r = CUDA_SUCCESS;
      if (!exec) r = d_.api.GraphInstantiate(&exec, captured, 0);
      d_.api.GraphDestroy(captured);
      d_.check(r, "cuGraphInstantiate");
      begin = end;
    }
    graph.cuts = std::move(cuts);
    graph.signature = std::move(signature);
  }

  // A point in the stream the host can wait for short of its end (under queue_mu_).
  struct Mark {
    uint64_t position;  // of the last kernel before it
    CUevent event;
  };
  void add_mark(uint64_t position) {
    CUevent e = nullptr;
    if (!spare_events_.empty()) {
      e = spare_events_.back();
      spare_events_.pop_back();
    } else {
      d_.check(d_.api.EventCreate(&e, 0), "cuEventCreate");
    }
    d_.check(d_.api.EventRecord(e, stream_), "cuEventRecord");
    marks_.push_back({position, e});
    if (marks_.size() > kMaxMarks) {  // (the host never read so far back: long passed)
      d_.check(d_.api.EventSynchronize(marks_.front().event), "cuEventSynchronize");
      release_marks_through(marks_.front().position);
    }
  }
  // The marks up to `position` have passed.
  void release_marks_through(uint64_t position) {
    while (!marks_.empty() && marks_.front().position <= position) {
      spare_events_.push_back(marks_.front().event);
      marks_.pop_front();
    }
  }
  // A read of what kernel `position` wrote waited for the whole queue: where that kernel is in
  // the latest replay and others follow it there, the replay's next capture ends a segment there.
  void learn_read_point(uint64_t position) {
    std::shared_ptr<std::vector<size_t>> points = last_replay_.read_points.lock();
    if (!points || position < last_replay_.first || position + 1 >= last_replay_.first + last_replay_.count) return;
    const size_t k = size_t(position - last_replay_.first);
    auto at = std::lower_bound(points->begin(), points->end(), k);
    if ((at == points->end() || *at != k) && points->size() < kMaxReadPoints) points->insert(at, k);
  }

  static constexpr size_t kMaxMarks = 64, kMaxReadPoints = 4;
  Driver& d_;
  CUstream stream_ = nullptr;
  // Launches and copies queued on stream_, numbered from 1. queue_mu_ makes queueing and
  // numbering one step (copies may come from other threads than realize's), and guards the rest.
  std::atomic<uint64_t> queued_{0};
  std::mutex queue_mu_;
  std::deque<Mark> marks_;  // ascending positions
  std::vector<CUevent> spare_events_;
  struct {
    std::weak_ptr<std::vector<size_t>> read_points;
    uint64_t first = 0;  // its kernel 0's position
    size_t count = 0;
  } last_replay_;
};

// A module loaded on a device; its functions' Programs share it.
struct LoadedModule {
  const Driver* driver;
  CUmodule module;
  ~LoadedModule() {
    if (driver->api.CtxSetCurrent(driver->ctx) == CUDA_SUCCESS) driver->api.ModuleUnload(module);
  }
};

class CudaProgram final : public Program {
 public:
  CudaProgram(const CudaDevice& dev, std::shared_ptr<LoadedModule> m, CUfunction f, const CudaLaunchShape& shape,
              int64_t outputs)
      : dev_(dev), module_(std::move(m)), fn_(f), shape_(shape) {
    if (shape_.split > 1 && outputs > 0) {
      // A split reduction's partial slots and zeroed tickets (its kernels leave them zero).
      const Driver& d = dev_.driver();
      d.bind();
      size_t slots = size_t(outputs) * size_t(shape_.split) * size_t(shape_.partial_slots);
      d.check(d.api.MemAlloc(&partials_, slots * 8), "cuMemAlloc");
      d.check(d.api.MemAlloc(&tickets_, size_t(outputs) * 4), "cuMemAlloc");
      std::vector<uint32_t> zero(size_t(outputs), 0);
      d.check(d.api.MemcpyHtoDAsync(tickets_, zero.data(), zero.size() * 4, dev_.stream()), "cuMemcpyHtoDAsync");
      d.check(d.api.StreamSynchronize(dev_.stream()), "cuStreamSynchronize");
    }
  }
  ~CudaProgram() override {
    const Driver& d = dev_.driver();
    if ((partials_ || tickets_) && d.api.CtxSetCurrent(d.ctx) == CUDA_SUCCESS) {
      if (partials_) d.api.MemFree(partials_);
      if (tickets_) d.api.MemFree(tickets_);
    }
  }
  void run(void** args, int64_t begin, int64_t end) const override {
    if (end <= begin) return;
    const Driver& d = dev_.driver();
    d.bind();
    // the driver copies the values behind these pointers at launch (or capture)
    std::vector<CUdeviceptr> ptrs(size_t(shape_.num_buffers));
    std::vector<void*> params;
    for (int i = 0; i < shape_.num_buffers; i++) {
      ptrs[size_t(i)] = reinterpret_cast<CUdeviceptr>(args[i]);
      params.push_back(&ptrs[size_t(i)]);
    }
    const uint64_t* words = static_cast<const uint64_t*>(args[shape_.num_buffers]);
    for (int i = 0; i < shape_.num_params; i++) params.push_back(const_cast<uint64_t*>(words + i));
    CUdeviceptr partials = partials_, tickets = tickets_;
    if (shape_.split > 1) {
      params.push_back(&partials);
      params.push_back(&tickets);
    }
    long long b = begin, e = end;
    params.push_back(&b);
    params.push_back(&e);
    int64_t epb = std::max<int64_t>(1, shape_.elements_per_block);
    // Grid-stride loops cover the rest; this many blocks fill any current GPU.
    // A split reduction has exactly `split` blocks (or threads) per output (few outputs).
    int64_t grid = shape_.serial           ? 1
                   : shape_.split_threads ? ((end - begin) * shape_.split + shape_.block_size - 1) / shape_.block_size
                   : shape_.split > 1     ? (end - begin) * shape_.split
                                          : std::min<int64_t>((end - begin + epb - 1) / epb, int64_t(1) << 20);
    d.check(d.api.LaunchKernel(fn_, unsigned(grid), 1, 1, unsigned(shape_.block_size), 1, 1, 0, dev_.stream(),
                               params.data(), nullptr),
            "cuLaunchKernel " + name);
  }

 private:
  const CudaDevice& dev_;
  std::shared_ptr<LoadedModule> module_;
  CUfunction fn_;
  CudaLaunchShape shape_;
  CUdeviceptr partials_ = 0, tickets_ = 0;
};

}  // namespace

const CudaInfo& cuda_info() { return gpu_driver().info; }
bool cuda_available() { return cuda_info().available; }

Device* cuda_device() {
  if (!cuda_available()) return nullptr;
  static CudaDevice* d = new CudaDevice(gpu_driver());  // never destroyed, like the CPU device
  return d;
}

Device* cuda_emu_device() {
  if (!emu_driver().info.available) return nullptr;
  static CudaDevice* d = new CudaDevice(emu_driver());
  return d;
}

bool is_cuda(const Device& d) { return d.kind() == DeviceKind::Cuda || d.kind() == DeviceKind::CudaEmu; }

std::vector<std::unique_ptr<Program>> cuda_load_programs(Device& device, const std::string& image,
                                                         const std::vector<std::string>& fns,
                                                         const std::vector<CudaLaunchShape>& shapes,
                                                         const std::vector<int64_t>& parallel_sizes) {
  auto* dev = dynamic_cast<CudaDevice*>(&device);
  if (!dev) throw std::invalid_argument("cuda_load_programs: " + device.name() + " is not a CUDA device");
  const Driver& d = dev->driver();
  d.bind();
  std::string log(8192, '\0');
  int opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* vals[] = {&log[0], reinterpret_cast<void*>(uintptr_t(log.size()))};
  CUmodule m = nullptr;
  CUresult r = d.api.ModuleLoadDataEx(&m, image.c_str(), 2, opts, vals);
  if (r != CUDA_SUCCESS) {
    log.resize(std::char_traits<char>::length(log.c_str()));
    throw std::runtime_error("tiny " + std::string(device_kind_name(d.kind)) + ": cuModuleLoadData: " + d.error(r) +
                             (log.empty() ? "" : "\n" + log));
  }
  std::shared_ptr<LoadedModule> module(new LoadedModule{&d, m});
  std::vector<std::unique_ptr<Program>> out;
  for (size_t i = 0; i < fns.size(); i++) {
    CUfunction f = nullptr;
    d.check(d.api.ModuleGetFunction(&f, m, fns[i].c_str()), "cuModuleGetFunction(" + fns[i] + ")");
    auto p = std::make_unique<CudaProgram>(*dev, module, f, shapes[i], parallel_sizes[i]);
    p->name = fns[i];
    p->parallel_size = parallel_sizes[i];
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace tiny
