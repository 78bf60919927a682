// torch_tiny._C: what the Python package needs from C++.
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include "engine/runtime/counters.h"
#include "engine/runtime/device.h"
#include "torch/generator.h"
#include "torch/tensor_value.h"

namespace {

pybind11::dict counters_dict() {
  auto& c = tiny::counters();
  pybind11::dict d;
  d["kernels"] = c.kernels.load();
  d["copies_in"] = c.copies_in.load();
  d["copies_out"] = c.copies_out.load();
  d["bytes_in"] = c.bytes_in.load();
  d["bytes_out"] = c.bytes_out.load();
  d["schedules"] = c.schedules.load();
  d["schedule_cache_hits"] = c.schedule_cache_hits.load();
  d["compiles"] = c.compiles.load();
  d["disk_cache_hits"] = c.disk_cache_hits.load();
  d["flops"] = c.flops.load();
  d["kernel_ns"] = c.kernel_ns.load();
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

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_tiny native extension";
  m.def("_synchronize", [] {
    pybind11::gil_scoped_release nogil;
    torch_tiny::synchronize();
  });
  m.def("_counters", &counters_dict);
  m.def("_backend", [] { return std::string(tiny::device_kind_name(tiny::compute_device().kind())); });
  m.def("_device_properties", &device_properties);
  m.def("_memory_stats", &memory_stats);
  m.def("_reset_peak_memory_stats", [] { tiny::compute_device().reset_peak_memory_stats(); });
  m.def("_empty_cache", [] { tiny::compute_device().empty_cache(); });
  m.def("_mem_get_info", [] { return tiny::compute_device().mem_get_info(); });
  m.def("_reset_counters", [] { tiny::counters().reset(); });
  m.def("_debug_level", [] { return tiny::debug_level(); });
  m.def("_default_generator", [] {
    return pybind11::reinterpret_steal<pybind11::object>(
        THPGenerator_initDefaultGenerator(torch_tiny::default_generator()));
  });
}
