// torch.compile(backend="tiny"): a captured FX graph of ATen operators, replayed through
// PyTorch's dispatcher from C++. A compiled step makes one Python call; every operator of the
// graph then builds its lazy nodes without passing through Python, and the schedule cache does
// the rest.
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/python/pybind_utils.h>
#include <torch/extension.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "torch/compiled_graph.h"

namespace py = pybind11;

namespace torch_tiny {
namespace {

// Where a value of the program lives: graph inputs first, then each call's results.
struct GraphSlot {
  int64_t index;
};

// One argument of a call: a value known when the graph is built, a slot filled at run time, or a
// list mixing both (torch.cat's tensors, index's optional tensors).
struct Argument {
  enum class Kind { Constant, Slot, List } kind = Kind::Constant;
  c10::IValue constant;
  int64_t slot = -1;
  c10::TypePtr element_type;
  std::vector<Argument> items;

  c10::IValue value(const std::vector<c10::IValue>& slots) const {
    switch (kind) {
      case Kind::Constant:
        return constant;
      case Kind::Slot:
        return slots[slot];
      case Kind::List: {
        c10::impl::GenericList list(element_type);
        list.reserve(items.size());
        for (const Argument& item : items) list.push_back(item.value(slots));
        return list;
      }
    }
    return {};
  }
};

struct Step {
  std::optional<c10::OperatorHandle> op;  // empty: take item `list_index` of `list_slot`
  std::vector<Argument> arguments;
  int64_t list_slot = -1;
  int64_t list_index = 0;
  std::vector<int64_t> results;
  std::vector<int64_t> dead_after;  // slots nothing reads after this step
};

// Graph inputs and constant outputs: tensors, or the plain numbers Dynamo passes for sizes.
c10::IValue plain_value(const py::handle& value) {
  if (THPVariable_Check(value.ptr())) return THPVariable_Unpack(value.ptr());
  if (value.is_none()) return {};
  if (py::isinstance<py::bool_>(value)) return value.cast<bool>();
  if (py::isinstance<py::int_>(value)) return value.cast<int64_t>();
  if (py::isinstance<py::float_>(value)) return value.cast<double>();
  throw std::invalid_argument("tiny compile: cannot pass a " + std::string(py::str(value.get_type())) +
                              " through a compiled graph");
}

c10::TypePtr unwrap_optional(const c10::TypePtr& type) {
  if (auto opt = type->cast<c10::OptionalType>()) return opt->getElementType();
  return type;
}

class CompiledGraph {
 public:
  explicit CompiledGraph(int64_t inputs) : inputs_(inputs), slots_(inputs) {}

  GraphSlot input(int64_t i) const {
    TORCH_CHECK(i >= 0 && i < inputs_, "tiny compile: input ", i, " of ", inputs_);
    return {i};
  }

  // Adds a call of `name.overload` with FX's args and kwargs; returns one slot per result.
  std::vector<GraphSlot> call(const std::string& name, const std::string& overload, const py::tuple& args,
                              const py::dict& kwargs) {
    Step step;
    step.op = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
    const c10::FunctionSchema& schema = step.op->schema();
    TORCH_CHECK(args.size() <= schema.arguments().size(), "tiny compile: ", schema, " got ", args.size(),
                " positional arguments");
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const c10::Argument& formal = schema.arguments()[i];
      if (i < args.size()) {
        step.arguments.push_back(argument(args[i], formal.type()));
      } else if (kwargs.contains(formal.name())) {
        step.arguments.push_back(argument(kwargs[formal.name().c_str()], formal.type()));
      } else {
        TORCH_CHECK(formal.default_value().has_value(), "tiny compile: ", schema, " is missing argument ",
                    formal.name());
        step.arguments.push_back(constant(*formal.default_value()));
      }
    }
    std::vector<GraphSlot> results;
    for (size_t r = 0; r < schema.returns().size(); ++r) {
      step.results.push_back(slots_);
      results.push_back({slots_++});
    }
    steps_.push_back(std::move(step));
    return results;
  }

  // operator.getitem on a result that is a list (split, unbind).
  GraphSlot list_item(GraphSlot list, int64_t index) {
    Step step;
    step.list_slot = list.index;
    step.list_index = index;
    step.results.push_back(slots_);
    steps_.push_back(std::move(step));
    return {slots_++};
  }

  // The graph's outputs: slots, None or constants. Also decides when each slot dies.
  void set_outputs(const py::list& outputs) {
    outputs_.clear();
    for (const py::handle& out : outputs) {
      outputs_.push_back(py::isinstance<GraphSlot>(out) ? slot_argument(out.cast<GraphSlot>().index)
                                                        : constant(plain_value(out)));
    }
    std::vector<int64_t> last_read(slots_, -1);
    auto mark = [&](const Argument& a, int64_t step, auto&& self) -> void {
      if (a.kind == Argument::Kind::Slot) last_read[a.slot] = step;
      for (const Argument& item : a.items) self(item, step, self);
    };
    for (int64_t s = 0; s < static_cast<int64_t>(steps_.size()); ++s) {
      for (const Argument& a : steps_[s].arguments) mark(a, s, mark);
      if (steps_[s].list_slot >= 0) last_read[steps_[s].list_slot] = s;
    }
    for (const Argument& a : outputs_) mark(a, static_cast<int64_t>(steps_.size()), mark);
    for (Step& step : steps_) step.dead_after.clear();
    for (int64_t slot = 0; slot < slots_; ++slot) {
      if (last_read[slot] >= 0 && last_read[slot] < static_cast<int64_t>(steps_.size()))
        steps_[last_read[slot]].dead_after.push_back(slot);
    }
    finished_ = true;
  }

  // Runs the graph on `args` (AOTAutograd's boxed convention: the list is cleared, so inputs
  // the graph no longer needs can be freed while it runs).
  py::list run(py::list args) {
    TORCH_CHECK(finished_, "tiny compile: the graph has no outputs yet");
    TORCH_CHECK(static_cast<int64_t>(args.size()) == inputs_, "tiny compile: the graph takes ", inputs_,
                " inputs, got ", args.size());
    std::vector<c10::IValue> slots(slots_);
    for (int64_t i = 0; i < inputs_; ++i) slots[i] = plain_value(args[i]);
    args.attr("clear")();
    torch::jit::Stack stack;
    for (const Step& step : steps_) {
      if (step.op) {
        stack.clear();
        for (const Argument& a : step.arguments) stack.push_back(a.value(slots));
        step.op->callBoxed(stack);
        for (size_t r = 0; r < step.results.size(); ++r) slots[step.results[r]] = std::move(stack[r]);
      } else {
        slots[step.results[0]] = slots[step.list_slot].toListRef().at(step.list_index);
      }
      for (int64_t dead : step.dead_after) slots[dead] = c10::IValue();
    }
    py::list results;
    for (const Argument& out : outputs_) results.append(torch::jit::toPyObject(out.value(slots)));
    return results;
  }

  size_t calls() const { return steps_.size(); }

 private:
  static Argument constant(c10::IValue value) {
    Argument a;
    a.constant = std::move(value);
    return a;
  }

  static Argument slot_argument(int64_t slot) {
    Argument a;
    a.kind = Argument::Kind::Slot;
    a.slot = slot;
    return a;
  }

  static bool holds_slot(const py::handle& value) {
    if (py::isinstance<GraphSlot>(value)) return true;
    if (py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value)) {
      for (const py::handle& item : value)
        if (holds_slot(item)) return true;
    }
    return false;
  }

  Argument argument(const py::handle& value, const c10::TypePtr& type) const {
    if (py::isinstance<GraphSlot>(value)) return slot_argument(value.cast<GraphSlot>().index);
    if (!holds_slot(value)) {
      // FX keeps Python numbers where the schema takes a Tensor (add.Tensor(x, 1)); they become
      // wrapped numbers, as the Python argument parser makes them.
      torch::jit::ToIValueAllowNumbersAsTensors numbers_as_tensors(true);
      return constant(torch::jit::toIValue(value, type));
    }
    auto list_type = unwrap_optional(type)->cast<c10::ListType>();
    TORCH_CHECK(list_type, "tiny compile: a graph value passed as ", type->str());
    Argument list;
    list.kind = Argument::Kind::List;
    list.element_type = list_type->getElementType();
    for (const py::handle& item : value) list.items.push_back(argument(item, list.element_type));
    return list;
  }

  int64_t inputs_;
  int64_t slots_;
  std::vector<Step> steps_;
  std::vector<Argument> outputs_;
  bool finished_ = false;
};

}  // namespace

void bind_compiled_graph(py::module_& m) {
  py::class_<GraphSlot>(m, "GraphSlot").def_readonly("index", &GraphSlot::index).def("__repr__", [](const GraphSlot& s) {
    return "GraphSlot(" + std::to_string(s.index) + ")";
  });
  py::class_<CompiledGraph>(m, "CompiledGraph")
      .def(py::init<int64_t>())
      .def("input", &CompiledGraph::input)
      .def("call", &CompiledGraph::call)
      .def("list_item", &CompiledGraph::list_item)
      .def("set_outputs", &CompiledGraph::set_outputs)
      .def("run", &CompiledGraph::run)
      .def_property_readonly("calls", &CompiledGraph::calls);
}

}  // namespace torch_tiny
