"""Seeing what torch_tiny runs.

Counters (counters.py): ``reset()``, ``kernel_count()``, ``copy_count()``,
``with count_kernels() as c``.

Traces (trace.py, report.py): ``with trace() as t:`` records every schedule and
kernel run in the block, with the module each kernel's work came from and why
its outputs were stored; then ``t.summary()``, ``t.save_html(path)``,
``t.save_chrome_trace(path)``, ``t.save_graph(path)``. From a shell:
``python -m torch_tiny.debug [--html out.html] [--trace out.json] [--steps N] script.py args...``.
"""
from .counters import copy_count, count_kernels, counters, kernel_count, reset
from .trace import KernelRun, ScheduleRun, Trace, trace

__all__ = ["copy_count", "count_kernels", "counters", "kernel_count", "reset", "trace", "Trace", "KernelRun",
           "ScheduleRun"]
