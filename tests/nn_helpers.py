"""Shared helpers for the neural-network op tests (conv, norms, pooling, losses, optim)."""

import torch

from conftest import DEV, assert_same


def fwd_bwd(fn, *args, grad_args=None, **kw):
    """Runs ``fn`` on CPU copies and device copies of ``args`` (tensors get requires_grad
    when floating and listed in ``grad_args``, default: all floating tensors), backpropagates
    the same random gradient and returns (cpu_out, dev_out, cpu_grads, dev_grads)."""
    def prep(a, i, dev):
        if not isinstance(a, torch.Tensor):
            return a
        t = a.detach().clone().to(dev)
        if a.is_floating_point() and (grad_args is None or i in grad_args):
            t.requires_grad_()
        return t

    cpu = [prep(a, i, "cpu") for i, a in enumerate(args)]
    dev = [prep(a, i, DEV) for i, a in enumerate(args)]
    kw_dev = {k: (v.to(DEV) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    r = fn(*cpu, **kw)
    t = fn(*dev, **kw_dev)
    r0 = r[0] if isinstance(r, tuple) else r
    t0 = t[0] if isinstance(t, tuple) else t
    if r0.requires_grad:
        g = torch.randn_like(r0)
        r0.backward(g)
        t0.backward(g.to(DEV))
    cg = [a.grad if isinstance(a, torch.Tensor) else None for a in cpu]
    dg = [a.grad if isinstance(a, torch.Tensor) else None for a in dev]
    return r, t, cg, dg


def check_fwd_bwd(fn, *args, rtol=1e-4, atol=1e-5, grad_args=None, **kw):
    r, t, cg, dg = fwd_bwd(fn, *args, grad_args=grad_args, **kw)
    assert_same(t, r, rtol=rtol, atol=atol, msg="forward")
    for i, (c, d) in enumerate(zip(cg, dg)):
        if c is None:
            assert d is None, f"grad {i}: device has a gradient, the CPU has none"
            continue
        assert d is not None, f"grad {i}: missing on the device"
        assert_same(d, c, rtol=rtol, atol=atol, msg=f"grad of argument {i}")
    return r, t
