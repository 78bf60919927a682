"""Kernel counting for users and tests.

``reset()`` zeroes the counters; ``kernel_count()`` is the number of kernels
run since; host<->device copies are counted apart (``copy_count()``).
``with count_kernels() as c:`` synchronizes on exit and leaves the number of
kernels run inside the block in ``c.kernels``, and in ``c.graph_nodes`` the nodes
of the graphs realized (what building, keying and releasing them cost the host).
"""
from .. import _C


def counters() -> dict:
    return dict(_C._counters())


def reset() -> None:
    _C._reset_counters()


def kernel_count() -> int:
    return _C._counters()["kernels"]


def copy_count() -> int:
    c = _C._counters()
    return c["copies_in"] + c["copies_out"]


class count_kernels:
    """Counts the kernels run inside a ``with`` block (synchronizes on exit)."""

    def __init__(self, synchronize: bool = True):
        self.synchronize = synchronize
        self.kernels = 0
        self.copies = 0
        self.graph_nodes = 0

    def __enter__(self):
        self._k0 = kernel_count()
        self._c0 = copy_count()
        self._n0 = _C._counters()["graph_nodes"]
        return self

    def __exit__(self, *exc):
        if self.synchronize and exc[0] is None:
            _C._synchronize()
        self.kernels = kernel_count() - self._k0
        self.copies = copy_count() - self._c0
        self.graph_nodes = _C._counters()["graph_nodes"] - self._n0
        return False
