// torch_tiny._C: what the Python package needs from C++.
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include "engine/graph/node.h"
#include "engine/runtime/counters.h"
#include "engine/runtime/device.h"
#include "engine/schedule/trace.h"
#include "torch/compiled_graph.h"
#include "torch/generator.h"
#include "torch/tensor_value.h"

namespace {

pybind11::dict counters_dict() {
  auto& c = tiny::counters();
  pybind11::dict d;
  d["kernels"] = c.kernels.load();
  d["copies_in"] = c.copies_in.load();
  d["copies_out"] = c.copies_out.load();
  d["copies_out_early"] = c.copies_out_early.load();
  d["bytes_in"] = c.bytes_in.load();
  d["bytes_out"] = c.bytes_out.load();
  d["schedules"] = c.schedules.load();
  d["schedule_cache_hits"] = c.schedule_cache_hits.load();
  d["compiles"] = c.compiles.load();
  d["disk_cache_hits"] = c.disk_cache_hits.load();
  d["flops"] = c.flops.load();
  d["kernel_ns"] = c.kernel_ns.load();
  d["graph_nodes"] = c.graph_nodes.load();
  d["hash_cons_entries"] = tiny::hash_cons_entries();
  return d;
}

pybind11::dict device_properties() {
  tiny::Device& d = tiny::compute_device();
  tiny::DeviceProperties p = d.properties();
  pybind11::dict r;
  r["backend"] = tiny::device_kind_name(d.kind());
  r["name"] = p.name;
  r["arch"] = p.arch;
  r["major"] = p.cc_major;
  r["minor"] = p.cc_minor;
  r["multi_processor_count"] = p.multiprocessors;
  r["total_memory"] = p.total_memory;
  r["vector_bits"] = p.vector_bits;
  return r;
}

pybind11::dict memory_stats() {
  tiny::MemoryStats s = tiny::compute_device().memory_stats();
  pybind11::dict d;
  d["allocated"] = s.allocated;
  d["peak_allocated"] = s.peak_allocated;
  d["reserved"] = s.reserved;
  d["peak_reserved"] = s.peak_reserved;
  d["allocations"] = s.allocations;
  d["frees"] = s.frees;
  d["device_allocations"] = s.device_allocations;
  d["ooms"] = s.ooms;
  d["cache_flushes"] = s.cache_flushes;
  return d;
}

pybind11::list shape_list(const tiny::Shape& s) {
  pybind11::list l;
  for (auto d : s) l.append(d);
  return l;
}

// The trace recorded since _trace_start, as plain Python data: kernel
// descriptions once each ("infos"), runs referring to them by index.
pybind11::dict trace_dict(const tiny::TraceLog& log) {
  pybind11::list infos, kernels, schedules;
  std::unordered_map<const tiny::KernelInfo*, int> info_index;
  auto operands = [](const std::vector<tiny::KernelInfo::Operand>& ops, const std::vector<uint64_t>& ids) {
    pybind11::list l;
    for (size_t i = 0; i < ops.size(); i++) {
      pybind11::dict d;
      d["buffer"] = ids[i];
      d["dtype"] = tiny::dtype_name(ops[i].dtype);
      d["shape"] = shape_list(ops[i].shape);
      l.append(d);
    }
    return l;
  };
  for (auto& k : log.kernels) {
    auto [it, fresh] = info_index.emplace(k.info.get(), int(info_index.size()));
    if (fresh) {
      const tiny::KernelInfo& i = *k.info;
      pybind11::dict d;
      d["name"] = i.name;
      d["reason"] = i.reason;
      d["ops"] = i.ops;
      d["modules"] = i.modules;
      d["shape"] = shape_list(i.shape);
      d["flops"] = i.flops;
      d["bytes_read"] = i.bytes_read;
      d["bytes_written"] = i.bytes_written;
      infos.append(d);
    }
    pybind11::dict d;
    d["info"] = it->second;
    d["inputs"] = operands(k.info->inputs, k.input_ids);
    d["outputs"] = operands(k.info->outputs, k.output_ids);
    d["start_ns"] = k.start_ns;
    d["duration_ns"] = k.duration_ns;
    d["schedule"] = k.schedule;
    kernels.append(d);
  }
  for (auto& s : log.schedules) {
    pybind11::dict d;
    d["device"] = s.device;
    d["cause"] = s.cause;
    d["cached"] = s.cached;
    d["miss"] = s.miss;
    d["start_ns"] = s.start_ns;
    d["schedule_ns"] = s.schedule_ns;
    d["compile_ns"] = s.compile_ns;
    d["end_ns"] = s.end_ns;
    d["first_kernel"] = s.first_kernel;
    d["kernels"] = s.kernels;
    schedules.append(d);
  }
  pybind11::dict r;
  r["infos"] = infos;
  r["kernels"] = kernels;
  r["schedules"] = schedules;
  return r;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_tiny native extension";
  m.def("_synchronize", [] {
    pybind11::gil_scoped_release nogil;
    tiny::RealizeCause cause("torch.tiny.synchronize()");
    torch_tiny::synchronize();
  });
  // torch.tiny.Event: the pending work is launched, then the event marks its end in the
  // device's queue (a CUDA event on a GPU; the host clock after waiting on the CPU).
  pybind11::class_<tiny::DeviceEvent>(m, "_DeviceEvent")
      .def("complete", &tiny::DeviceEvent::complete, pybind11::call_guard<pybind11::gil_scoped_release>())
      .def("wait", &tiny::DeviceEvent::wait, pybind11::call_guard<pybind11::gil_scoped_release>())
      .def("ms_until", &tiny::DeviceEvent::ms_until, pybind11::call_guard<pybind11::gil_scoped_release>());
  m.def("_record_event", [] {
    pybind11::gil_scoped_release nogil;
    std::lock_guard<std::recursive_mutex> g(tiny::engine_mutex());
    tiny::RealizeCause cause("torch.tiny.Event.record()");
    torch_tiny::launch_pending();
    return tiny::compute_device().record_event();
  });
  m.def("_trace_start", [] {
    std::lock_guard<std::recursive_mutex> g(tiny::engine_mutex());
    tiny::start_trace();
  });
  m.def("_trace_stop", [] {
    tiny::TraceLog log;
    {
      pybind11::gil_scoped_release nogil;
      std::lock_guard<std::recursive_mutex> g(tiny::engine_mutex());
      log = tiny::stop_trace();
    }
    return trace_dict(log);
  });
  m.def("_tracing", [] { return tiny::tracing(); });
  m.def("_trace_clock_ns", [] { return tiny::trace_clock_ns(); });
  // The module path copied onto the nodes this thread makes ("" for none).
  m.def("_set_scope", [](const std::string& path) { tiny::set_scope(path); });
  m.def("_counters", &counters_dict);
  m.def("_backend", [] { return std::string(tiny::device_kind_name(tiny::compute_device().kind())); });
  m.def("_device_properties", &device_properties);
  m.def("_memory_stats", &memory_stats);
  m.def("_reset_peak_memory_stats", [] { tiny::compute_device().reset_peak_memory_stats(); });
  m.def("_empty_cache", [] { tiny::compute_device().empty_cache(); });
  m.def("_mem_get_info", [] { return tiny::compute_device().mem_get_info(); });
  m.def("_reset_counters", [] { tiny::counters().reset(); });
  m.def("_debug_level", [] { return tiny::debug_level(); });
  torch_tiny::bind_compiled_graph(m);
  m.def("_default_generator", [] {
    return pybind11::reinterpret_steal<pybind11::object>(
        THPGenerator_initDefaultGenerator(torch_tiny::default_generator()));
  });
}
