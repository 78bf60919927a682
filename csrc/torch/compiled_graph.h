#pragma once
#include <pybind11/pybind11.h>

namespace torch_tiny {

// Adds CompiledGraph and GraphSlot (torch.compile(backend="tiny")'s program) to the module.
void bind_compiled_graph(pybind11::module_& m);

}  // namespace torch_tiny
