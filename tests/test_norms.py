"""layer_norm, group_norm, instance_norm (composite over batch_norm) forward/backward vs the CPU."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import DEV, assert_same, to_dev
from nn_helpers import check_fwd_bwd

TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape,ns", [((4, 6, 5), (5,)), ((2, 3, 4, 4), (4, 4)), ((7,), (7,)),
                                      ((2, 3, 4, 5), (3, 4, 5))])
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(shape, ns, affine):
    x = torch.randn(*shape) * 2 + 1
    w = torch.rand(*ns) + 0.5 if affine else None
    b = torch.randn(*ns) if affine else None
    check_fwd_bwd(F.layer_norm, x, ns, w, b, 1e-5, **TOL)


def test_layer_norm_weight_only_and_noncontiguous():
    x = torch.randn(5, 8, 3).transpose(0, 1)
    check_fwd_bwd(F.layer_norm, x, (3,), torch.rand(3), None, **TOL)


def test_native_layer_norm_stats():
    x = torch.randn(3, 4, 6)
    exp = torch.native_layer_norm(x, (6,), None, None, 1e-5)
    got = torch.native_layer_norm(to_dev(x), (6,), None, None, 1e-5)
    assert_same(list(got), list(exp), **TOL)


def test_layer_norm_empty_and_errors():
    x = torch.randn(0, 4)
    assert_same(F.layer_norm(to_dev(x), (4,)), F.layer_norm(x, (4,)))
    with pytest.raises(RuntimeError):
        F.layer_norm(torch.randn(3, 4), (5,))
    with pytest.raises(RuntimeError):
        F.layer_norm(to_dev(torch.randn(3, 4)), (5,))


@pytest.mark.parametrize("shape,groups", [((2, 6, 4, 4), 3), ((3, 4, 5), 2), ((2, 6, 2, 3, 2), 6), ((4, 8), 1)])
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm(shape, groups, affine):
    x = torch.randn(*shape) * 3 - 1
    c = shape[1]
    w = torch.rand(c) + 0.5 if affine else None
    b = torch.randn(c) if affine else None
    check_fwd_bwd(F.group_norm, x, groups, w, b, 1e-5, **TOL)


def test_group_norm_module_and_errors():
    mc = nn.GroupNorm(2, 4)
    md = nn.GroupNorm(2, 4).to(DEV)
    x = torch.randn(3, 4, 5)
    assert_same(md(to_dev(x)), mc(x), **TOL)
    with pytest.raises(RuntimeError):
        F.group_norm(to_dev(torch.randn(2, 5, 3)), 2)


@pytest.mark.parametrize("track", [False, True])
def test_instance_norm(track):
    # composite: repeat/view + native_batch_norm (+ mean/copy_ of the running stats when tracked)
    x = torch.randn(3, 4, 5, 6)
    if track:
        rm, rv = torch.zeros(4), torch.ones(4)
        rmd, rvd = to_dev(rm), to_dev(rv)
    else:
        rm = rv = rmd = rvd = None
    w, b = torch.rand(4), torch.randn(4)
    xc = x.clone().requires_grad_()
    xd = to_dev(x).requires_grad_()
    yc = F.instance_norm(xc, rm, rv, w, b, use_input_stats=True)
    yd = F.instance_norm(xd, rmd, rvd, to_dev(w), to_dev(b), use_input_stats=True)
    assert_same(yd, yc, **TOL)
    g = torch.randn_like(yc)
    yc.backward(g)
    yd.backward(to_dev(g))
    assert_same(xd.grad, xc.grad, **TOL)
    if track:
        assert_same(rmd, rm, **TOL)
        assert_same(rvd, rv, **TOL)


@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm(affine):
    # composite in this torch (pow, mean, add, rsqrt, mul): covered by the core ops
    x = torch.randn(3, 5, 8)
    w = torch.rand(8) + 0.5 if affine else None
    check_fwd_bwd(F.rms_norm, x, (8,), w, 1e-6, **TOL)
