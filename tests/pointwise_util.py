"""Helpers shared by the pointwise op tests (test_unary, test_binary, test_activations)."""

import math

import torch
from torch.utils._pytree import tree_map

from conftest import DEV, assert_same, to_dev

INF = math.inf
NAN = math.nan

# Values every float op sees: signed zeros, both infinities, NaN, a subnormal, the edges of
# the usual domains ([-1, 1], (0, inf), ...) and a spread of ordinary values.
EDGES = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 3.0, -3.0, 6.0, -6.0, 1e-3, -1e-3, 0.7, -0.7,
         0.999, -0.999, 10.0, -10.0, 20.5, -20.5, 88.5, -88.5, 1e4, -1e4, 1e30, -1e30, 1e-40, -1e-40,
         INF, -INF, NAN]


def float_values(dtype, n_random=64, scale=3.0, seed=0):
    """EDGES plus random normals (times ``scale``), as a 1-D CPU tensor of ``dtype``."""
    g = torch.Generator().manual_seed(seed)
    r = torch.randn(n_random, generator=g, dtype=torch.float64) * scale
    return torch.cat([torch.tensor(EDGES, dtype=torch.float64), r]).to(dtype)


def int_values(dtype, seed=0):
    """Small and extreme integers (and both bools) as a 1-D CPU tensor of ``dtype``."""
    if dtype == torch.bool:
        return torch.tensor([True, False, True, True, False])
    info = torch.iinfo(dtype)
    vals = [0, 1, 2, 3, 5, 7, 100, info.max, info.max - 1, info.min, info.min + 1]
    if info.min < 0:
        vals += [-1, -2, -3, -5, -7, -100]
    g = torch.Generator().manual_seed(seed)
    r = torch.randint(max(info.min, -1000), min(info.max, 1000), (32,), generator=g)
    return torch.cat([torch.tensor(vals, dtype=torch.int64), r]).to(dtype)


def _dev(x):
    return to_dev(x) if isinstance(x, torch.Tensor) else x


def _first_line(e):
    return str(e).strip().splitlines()[0] if str(e).strip() else ""


def run_both(fn, *args, rtol=None, atol=None, msg="", **kwargs):
    """``fn`` on the CPU arguments and on device copies of them.

    When the CPU raises, the device must raise the same exception type with the same first
    line of message.  Otherwise the results are compared with :func:`conftest.assert_same`.
    Returns the device result (None when both raised).
    """
    cpu_err = dev_err = None
    expected = actual = None
    dargs, dkwargs = tree_map(_dev, args), tree_map(_dev, kwargs)  # before fn can mutate args
    try:
        expected = fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001
        cpu_err = e
    try:
        actual = fn(*dargs, **dkwargs)
    except Exception as e:  # noqa: BLE001
        dev_err = e
    if cpu_err is not None:
        assert dev_err is not None, f"{msg}: CPU raised {type(cpu_err).__name__}({cpu_err}) but {DEV} did not"
        assert type(dev_err) is type(cpu_err), (
            f"{msg}: {DEV} raised {type(dev_err).__name__}({dev_err}), CPU {type(cpu_err).__name__}({cpu_err})")
        assert _first_line(dev_err) == _first_line(cpu_err), f"{msg}: message {dev_err!r} != {cpu_err!r}"
        return None
    if dev_err is not None:
        raise AssertionError(f"{msg}: {DEV} raised {type(dev_err).__name__}: {dev_err}") from dev_err
    try:
        assert_same(actual, expected, rtol=rtol, atol=atol)
    except AssertionError as e:
        raise AssertionError(f"{msg}: {e}") from None
    return actual


def ulp_distance(a, b):
    """Elementwise distance in units in the last place between two float32 CPU tensors."""
    ai = a.float().contiguous().view(torch.int32).to(torch.int64)
    bi = b.float().contiguous().view(torch.int32).to(torch.int64)
    # map the sign-magnitude bit patterns onto a monotonic integer line
    ai = torch.where(ai < 0, -(ai & 0x7FFFFFFF), ai)
    bi = torch.where(bi < 0, -(bi & 0x7FFFFFFF), bi)
    return (ai - bi).abs()
