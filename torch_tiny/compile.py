"""``torch.compile(model, backend="tiny")``.

Dynamo captures the model's Python into FX graphs; AOTAutograd turns each into ATen graphs for
the forward and the backward. Each ATen graph becomes a ``_C.CompiledGraph``: its operator calls
are resolved against PyTorch's dispatcher once, here, and a step then runs the whole graph from
C++ in one call. The operators build tiny's lazy graph exactly as eager code does, so the result
fuses into the same kernels and a repeated step finds its schedule in the cache.

The backend is found by Dynamo through the ``torch_dynamo_backends`` entry point, so importing
torch_tiny does not import Dynamo.

Inductor, torch.compile's default backend, has no code generator for tiny tensors. It looks for
one on the device module (``torch.tiny.Scheduling``); ``InductorRefusal`` is what it finds there,
so compiling a graph of tiny tensors fails with a message that names ``backend="tiny"`` (and
graphs of other devices compile as before).
"""
import operator
import warnings

import torch

from . import _C

graphs_run_by_python = 0
"""How many captured graphs held something the C++ program cannot run and run through FX instead."""


class _Unsupported(Exception):
    pass


def _program_of(gm: torch.fx.GraphModule) -> "_C.CompiledGraph":
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    program = _C.CompiledGraph(len(placeholders))
    values = {node: program.input(i) for i, node in enumerate(placeholders)}

    def value_of(arg):
        return torch.fx.node.map_arg(arg, lambda n: values[n])

    for node in gm.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "get_attr":
            values[node] = operator.attrgetter(node.target)(gm)
        elif node.op == "call_function" and node.target is operator.getitem:
            source, index = values[node.args[0]], node.args[1]
            values[node] = source[index] if isinstance(source, list) else program.list_item(source, index)
        elif node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            schema = node.target._schema
            args, kwargs = value_of(tuple(node.args)), value_of(dict(node.kwargs))
            if any(isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)) for a in
                   torch.utils._pytree.tree_leaves((args, kwargs))):
                raise _Unsupported(f"symbolic sizes in {node.format_node()}")
            results = program.call(schema.name, schema.overload_name, args, kwargs)
            values[node] = results[0] if len(schema.returns) == 1 else results
        elif node.op == "output":
            outputs = value_of(node.args[0])
            program.set_outputs(list(outputs) if isinstance(outputs, (list, tuple)) else [outputs])
        else:
            raise _Unsupported(node.format_node())
    return program


def compile_aten_graph(gm: torch.fx.GraphModule, example_inputs):
    """AOTAutograd's forward and backward compiler: returns a boxed callable running `gm`."""
    global graphs_run_by_python
    try:
        program = _program_of(gm)
    except _Unsupported as why:
        # Dynamic shapes and Python-level nodes: still correct, one Python call per operator.
        graphs_run_by_python += 1
        warnings.warn(f"tiny compile: running a graph through FX ({why})", stacklevel=2)
        from torch._functorch.aot_autograd import make_boxed_func
        return make_boxed_func(gm)

    def run(args):
        return program.run(args)

    run._boxed_call = True
    return run


def tiny_backend(gm, example_inputs, **kwargs):
    """The Dynamo backend: AOTAutograd into ATen graphs, each run as a C++ program."""
    from torch._dynamo.backends.common import aot_autograd
    return aot_autograd(fw_compiler=compile_aten_graph, bw_compiler=compile_aten_graph)(gm, example_inputs, **kwargs)


def _refuse_inductor(*args, **kwargs):
    raise RuntimeError('tiny: Inductor cannot generate code for tiny tensors; '
                       'compile with torch.compile(model, backend="tiny")')


class _RefusingType(type):
    def __getattr__(cls, name):
        _refuse_inductor()


class InductorRefusal(metaclass=_RefusingType):
    """What Inductor finds as tiny's scheduling, wrapper code generators and device overrides:
    each refuses as soon as Inductor uses it (constructs it or asks it anything)."""

    __init__ = _refuse_inductor

    def __getattr__(self, name):
        _refuse_inductor()


def inductor_codegen():
    """Called when Inductor registers the device's code generators (torch.tiny.Scheduling and
    its siblings): Inductor is loaded by then, and its device overrides, the first thing it looks
    up for a device when generating code, get the refusal too."""
    from torch._inductor.codegen.common import register_device_op_overrides
    register_device_op_overrides("tiny", object.__new__(InductorRefusal))
    return InductorRefusal
