"""Run one computation on the CPU and on the device under test and compare.

``check(fn, *args)`` calls ``fn`` with the CPU arguments and with device copies of them
(tensors anywhere in nested lists/tuples/dicts are copied; anything else is passed as is).
Results are compared with :func:`conftest.assert_same`; if the CPU raises, the device
must raise the same exception type with the same first message line.

``check_grad(fn, *args)`` compares the gradients of ``(fn(*args) * w).sum()`` with
respect to every floating-point tensor argument, for a fixed random ``w``.
"""

import pytest
import torch

from conftest import DEV, IS_TINY, assert_same, to_dev


def _map(obj, f):
    if isinstance(obj, torch.Tensor):
        return f(obj)
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_map(o, f) for o in obj)
    if isinstance(obj, list):
        return [_map(o, f) for o in obj]
    if isinstance(obj, dict):
        return {k: _map(v, f) for k, v in obj.items()}
    return obj


def _first_line(e):
    return str(e).strip().split("\n")[0]


def _normalize(msg):
    # device names legitimately differ; nothing else may
    return msg.replace(f"{DEV}:0", "DEV").replace("cpu", "DEV").replace(DEV, "DEV")


def device_args(args):
    return _map(args, to_dev)


def check(fn, *args, rtol=None, atol=None, kwargs=None, match_message=True, msg=""):
    """``fn(*args, **kwargs)`` on the device equals it on the CPU (or raises alike)."""
    kwargs = kwargs or {}
    try:
        expected = fn(*args, **kwargs)
        err = None
    except Exception as e:  # noqa: BLE001 - any CPU error must be reproduced
        expected, err = None, e
    dargs, dkwargs = device_args(args), device_args(kwargs)
    if err is not None:
        try:
            fn(*dargs, **dkwargs)
        except Exception as e:  # noqa: BLE001
            assert type(e) is type(err), f"{msg}: raised {type(e).__name__}({e}), CPU raised {type(err).__name__}({err})"
            if match_message:
                assert _normalize(_first_line(e)) == _normalize(_first_line(err)), (
                    f"{msg}: message {_first_line(e)!r} != CPU {_first_line(err)!r}"
                )
            return None
        raise AssertionError(f"{msg}: no error raised; CPU raised {type(err).__name__}: {err}")
    actual = fn(*dargs, **dkwargs)
    try:
        assert_same(actual, expected, rtol=rtol, atol=atol)
    except AssertionError as e:  # keep torch.testing's details and add the context
        raise AssertionError(f"{msg}: {e}") from None
    return actual


def _float_leaves(args):
    out = []
    _map(args, lambda t: out.append(t) if t.dtype.is_floating_point and t.requires_grad else None)
    return out


def check_grad(fn, *args, rtol=None, atol=None, msg=""):
    """Gradients of a weighted sum of ``fn``'s (first) output agree with the CPU's.

    Floating-point tensor arguments with ``requires_grad`` are the leaves."""
    cpu_args = _map(args, lambda t: t.detach().clone().requires_grad_(t.requires_grad))
    dev_args = _map(args, lambda t: to_dev(t.detach()).requires_grad_(t.requires_grad))

    out_c = fn(*cpu_args)
    out_c = out_c[0] if isinstance(out_c, (tuple, list)) else out_c
    g = torch.Generator().manual_seed(7)
    w = torch.randn(out_c.shape, generator=g, dtype=torch.float64).to(out_c.dtype)
    (out_c * w).sum().backward()
    out_d = fn(*dev_args)
    out_d = out_d[0] if isinstance(out_d, (tuple, list)) else out_d
    assert_same(out_d, out_c, rtol=rtol, atol=atol, msg=f"{msg} forward")
    (out_d * to_dev(w)).sum().backward()
    leaves_c, leaves_d = _float_leaves(cpu_args), _float_leaves(dev_args)
    assert leaves_c, "no leaf requires grad"
    for i, (lc, ld) in enumerate(zip(leaves_c, leaves_d)):
        assert (ld.grad is None) == (lc.grad is None), f"{msg}: grad presence differs for arg {i}"
        if lc.grad is not None:
            assert_same(ld.grad, lc.grad, rtol=rtol, atol=atol, msg=f"{msg} grad[{i}]")


def gradcheck(fn, *args, **kwargs):
    """torch.autograd.gradcheck on the device (float64 inputs, requires_grad set)."""
    dev_args = _map(args, lambda t: to_dev(t.detach()).requires_grad_(t.requires_grad))
    assert torch.autograd.gradcheck(fn, dev_args, **kwargs)


def require_tiny_kernels(*ops):
    """Skip unless every ATen op named has a tiny kernel.

    For backward formulas that use ops from other op families (masked_fill_, scatter,
    sgn, flip, ...): under TINY_STRICT a missing kernel is an error, not a fallback."""
    if not IS_TINY:
        return
    missing = [op for op in ops if not torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1")]
    if missing:
        pytest.skip("needs tiny kernels for " + ", ".join(missing))


def kernels_of(fn, *args):
    """Kernels tiny runs for ``fn`` on device copies of ``args`` (copies made first)."""
    from torch_tiny.debug import count_kernels

    dargs = [to_dev(a) for a in args]
    torch.tiny.synchronize()
    with count_kernels() as c:
        out = fn(*dargs)  # noqa: F841 - results must stay alive to be computed
    return c.kernels
