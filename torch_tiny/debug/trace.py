"""Recording what tiny runs: ``with torch_tiny.debug.trace() as t:``.

While the block runs, the engine records every schedule it runs (a cached
replay or a new schedule, what forced it, how a new graph differs from the
closest cached one) and every kernel (time, bytes, FLOPs, buffers, why its
outputs were stored, the torch ops it holds). Python adds the module paths:
global forward hooks tell the engine which ``nn.Module`` is running, so the
nodes an op makes carry ``layer1.0.bn1``; the autograd nodes a module's
forward made are tagged too, and their backward runs under the same path.

Kernels run one at a time while tracing (each waits for its end), so the
times are the kernels' own; a traced step is slower than an untraced one.
"""
from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field

import torch

from .. import _C

_active_lock = threading.Lock()
_active: "trace | None" = None


@dataclass
class Operand:
    buffer: int   # engine buffer id (unique in the process)
    dtype: str
    shape: tuple


@dataclass
class KernelRun:
    index: int
    name: str
    reason: str          # the scheduler's rule for storing the outputs, with its numbers
    cause: str           # what forced the realize this kernel ran in
    ops: list            # torch ops whose work it holds
    modules: list        # module paths of that work (root class name first)
    module: str          # the innermost module holding all of it ("" = none)
    shape: tuple         # iteration shape
    flops: int
    bytes_read: int
    bytes_written: int
    inputs: list
    outputs: list
    start_us: float      # since the trace started
    duration_us: float
    schedule: int
    step: int

    @property
    def why(self) -> str:
        """The reason in words, with the cause for requested values."""
        if self.reason.startswith("requested"):
            return "requested by " + self.cause + self.reason[len("requested"):]
        return self.reason


@dataclass
class ScheduleRun:
    index: int
    device: str
    cause: str
    cached: bool
    miss: str            # for a new schedule: how its graph differs from the closest cached one
    start_us: float
    schedule_us: float   # cache lookup, or scheduling
    compile_us: float
    end_us: float
    kernels: list = field(default_factory=list)  # KernelRun indices
    step: int = 0


def _common_module(paths) -> str:
    """The longest common dotted prefix of module paths ("" when they share none)."""
    paths = [p.split(".") for p in paths]
    if not paths:
        return ""
    common = paths[0]
    for p in paths[1:]:
        n = 0
        while n < min(len(common), len(p)) and common[n] == p[n]:
            n += 1
        common = common[:n]
    return ".".join(common)


def reason_rule(reason: str) -> str:
    """The rule of a reason, its numbers left out (for counting by rule)."""
    return re.sub(r"\d+(\.\d+)?", "N", reason)


class Trace:
    """What a ``trace()`` block recorded; reports are in ``report.py``."""

    def __init__(self, log: dict, step_marks: list, root_name: str, module_classes: dict):
        self.root_name = root_name
        self.module_classes = module_classes  # path -> class name
        self.schedules: list[ScheduleRun] = []
        self.kernels: list[KernelRun] = []
        us = 1e-3
        for i, s in enumerate(log["schedules"]):
            step = sum(1 for m in step_marks if m <= s["start_ns"])
            self.schedules.append(ScheduleRun(
                i, s["device"], s["cause"], s["cached"], s["miss"], s["start_ns"] * us, s["schedule_ns"] * us,
                s["compile_ns"] * us, s["end_ns"] * us, [], step))
        infos = log["infos"]
        for i, k in enumerate(log["kernels"]):
            info = infos[k["info"]]
            sched = self.schedules[k["schedule"]]
            ops = [o for o in info["ops"].split(",") if o]
            self.kernels.append(KernelRun(
                i, info["name"], info["reason"], sched.cause, ops, list(info["modules"]),
                _common_module(info["modules"]), tuple(info["shape"]), info["flops"], info["bytes_read"],
                info["bytes_written"],
                [Operand(o["buffer"], o["dtype"], tuple(o["shape"])) for o in k["inputs"]],
                [Operand(o["buffer"], o["dtype"], tuple(o["shape"])) for o in k["outputs"]],
                k["start_ns"] * us, k["duration_ns"] * us, k["schedule"], sched.step))
            sched.kernels.append(i)
        self.step_count = len(step_marks)

    # --- figures
    @property
    def kernel_count(self) -> int:
        return len(self.kernels)

    def kernels_per_step(self) -> dict:
        """{step: kernels} for steps 1..step_count; 0 holds what ran before the first step began."""
        out = {s: 0 for s in range(self.step_count + 1)}
        for k in self.kernels:
            out[k.step] += 1
        return out

    def display_module(self, path: str) -> str:
        """A module path as users write it: relative to the model (`layer1.0.bn1`)."""
        if not path:
            return "(no module)"
        if self.root_name and path.startswith(self.root_name + "."):
            return path[len(self.root_name) + 1:]
        return path

    def describe_module(self, path: str) -> str:
        """`layer1.0.bn1 (BatchNorm2d)`."""
        cls = self.module_classes.get(path)
        name = self.display_module(path)
        return f"{name} ({cls})" if cls and cls != name else name

    # --- reports (report.py)
    def summary(self, top: int = 10, file=None) -> str:
        from .report import summary
        text = summary(self, top)
        print(text, file=file)
        return text

    def save_html(self, path: str, max_graph_steps: int = 4) -> None:
        from .report import save_html
        save_html(self, path, max_graph_steps)

    def save_chrome_trace(self, path: str) -> None:
        from .report import save_chrome_trace
        save_chrome_trace(self, path)

    def save_graph(self, path: str, step: int | None = None) -> None:
        """The schedule of one step (default: the last) drawn by Graphviz; the format from the suffix (svg, png)."""
        from .report import save_graph
        save_graph(self, path, step)


class _ModuleScopes:
    """Global module hooks that keep the engine told which module runs.

    A module's path is its parent's path and its attribute name; the outermost
    module called is named by its class. The autograd nodes a forward made (those
    reachable from its outputs and not from its inputs) are tagged with the path
    and hooked, so their backward runs under it too (on autograd's thread).
    """

    def __init__(self, owner: "trace"):
        self.owner = owner
        self.stack: list[tuple] = []       # (module, path, input grad_fns)
        self.names: dict = {}              # (id(parent), id(child)) -> attribute path
        self.handles: list = []

    def install(self):
        mm = torch.nn.modules.module
        self.handles = [mm.register_module_forward_pre_hook(self._enter),
                        mm.register_module_forward_hook(self._leave, always_call=True)]

    def remove(self):
        for h in self.handles:
            h.remove()
        self.handles = []
        self.stack = []
        _C._set_scope("")

    def _child_name(self, parent, module) -> str:
        key = (id(parent), id(module))
        name = self.names.get(key)
        if name is None:
            name = next((n for n, m in parent.named_modules() if m is module and n), None)
            name = name or f"<{type(module).__name__}>"
            self.names[key] = name
        return name

    def _enter(self, module, args):
        if not self.owner.recording:
            return
        if self.stack:
            parent, parent_path, _ = self.stack[-1]
            path = parent_path + "." + self._child_name(parent, module)
        else:
            path = type(module).__name__
            self.owner._root_call(module, path)
            if not self.owner.recording:
                return
        self.owner._module_classes[path] = type(module).__name__
        grads = {t.grad_fn for t in _tensors(args) if t.grad_fn is not None}
        self.stack.append((module, path, grads))
        _C._set_scope(path)

    def _leave(self, module, args, output):
        if not self.stack or self.stack[-1][0] is not module:
            return
        _, path, frontier = self.stack.pop()
        _C._set_scope(self.stack[-1][1] if self.stack else "")
        if torch.is_grad_enabled():
            self._tag_backward(output, path, frontier)

    def _tag_backward(self, output, path, frontier):
        todo = [t.grad_fn for t in _tensors(output) if t.grad_fn is not None]
        owner = self.owner
        while todo:
            node = todo.pop()
            if node is None or node in frontier or "tiny_module" in node.metadata:
                continue
            if type(node).__name__ == "AccumulateGrad":
                continue
            node.metadata["tiny_module"] = path
            node.register_prehook(lambda grads, p=path: owner._backward_scope(p))
            node.register_hook(lambda grads_in, grads_out: owner._backward_scope(""))
            todo.extend(n for n, _ in node.next_functions)


def _tensors(x):
    if isinstance(x, torch.Tensor):
        yield x
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _tensors(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _tensors(v)


class trace:
    """``with trace() as t:`` records the tiny work run inside the block.

    steps: stop recording once this many steps have run (a step begins with each
    call of the first top-level module seen, or with ``t.step()``).
    On exit (or when the steps are done) the block's pending work is synchronized
    and ``t`` holds the report (``t.summary()``, ``t.save_html()``, ...).
    """

    def __init__(self, steps: int | None = None):
        self.max_steps = steps
        self.recording = False
        self.result: Trace | None = None
        self._scopes = _ModuleScopes(self)
        self._step_marks: list[int] = []
        self._root = None
        self._root_name = ""
        self._module_classes: dict = {}

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop(synchronize=exc[0] is None)
        return False

    def start(self):
        """Starts recording (what ``with`` does); ``stop()`` ends it."""
        global _active
        with _active_lock:
            if _active is not None:
                raise RuntimeError("torch_tiny.debug.trace: another trace is already recording")
            _active = self
        _C._synchronize()  # work made before the block is not the block's
        _C._trace_start()
        self.recording = True
        self._scopes.install()
        return self

    def step(self):
        """Marks the start of a step (for loops that call no module)."""
        if self.recording:
            self._step_marks.append(_C._trace_clock_ns())
            if self.max_steps is not None and len(self._step_marks) > self.max_steps:
                self.stop(synchronize=False)  # what is pending now belongs to the next step

    def stop(self, synchronize: bool = True):
        global _active
        if not self.recording:
            return self.result
        self._scopes.remove()
        try:
            if synchronize:
                _C._synchronize()
        finally:
            self.recording = False
            log = _C._trace_stop()
            with _active_lock:
                _active = None
        marks = self._step_marks[:self.max_steps] if self.max_steps is not None else self._step_marks
        self.result = Trace(log, marks, self._root_name, self._module_classes)
        return self.result

    def _root_call(self, module, path):
        if self._root is None:
            self._root, self._root_name = module, path
        if module is self._root:
            self.step()

    def _backward_scope(self, path):
        if self.recording:
            _C._set_scope(path)

    def __getattr__(self, name):
        # the report's methods and figures, once the block has ended
        result = self.__dict__.get("result")
        if result is None:
            raise AttributeError(f"trace has no attribute {name!r} (the report exists once the block ends)")
        return getattr(result, name)
