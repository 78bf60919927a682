// torch_tiny._C: what the Python package needs from C++.
#include <torch/csrc/Generator.h>
#include <torch/extension.h>

#include "engine/runtime/counters.h"
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

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "torch_tiny native extension";
  m.def("_synchronize", [] {
    pybind11::gil_scoped_release nogil;
    torch_tiny::synchronize();
  });
  m.def("_counters", &counters_dict);
  m.def("_reset_counters", [] { tiny::counters().reset(); });
  m.def("_debug_level", [] { return tiny::debug_level(); });
  m.def("_default_generator", [] {
    return pybind11::reinterpret_steal<pybind11::object>(
        THPGenerator_initDefaultGenerator(torch_tiny::default_generator()));
  });
}
