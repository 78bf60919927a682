"""Batch norm against the CPU: training statistics, in-place running-stat updates (momentum and
cumulative average), eval mode, no-stats mode, backward in both modes, 1d/2d/3d."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import DEV, assert_same, to_dev

TOL = dict(rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cls,shape", [(nn.BatchNorm1d, (6, 4)), (nn.BatchNorm1d, (3, 4, 7)),
                                       (nn.BatchNorm2d, (3, 4, 5, 6)), (nn.BatchNorm3d, (2, 4, 3, 4, 2))])
@pytest.mark.parametrize("momentum", [0.1, 0.5, None])
@pytest.mark.parametrize("affine", [True, False])
def test_batchnorm_train_steps_then_eval(cls, shape, momentum, affine):
    mc = cls(4, momentum=momentum, affine=affine)
    if affine:
        with torch.no_grad():
            mc.weight.uniform_(0.5, 1.5)
            mc.bias.uniform_(-1, 1)
    md = copy.deepcopy(mc).to(DEV)
    for step in range(3):
        x = torch.randn(*shape) * 3 + 2
        xc = x.clone().requires_grad_()
        xd = to_dev(x).requires_grad_()
        yc, yd = mc(xc), md(xd)
        g = torch.randn_like(yc)
        yc.backward(g)
        yd.backward(to_dev(g))
        assert_same(yd, yc, **TOL, msg=f"step {step} output")
        assert_same(xd.grad, xc.grad, **TOL, msg=f"step {step} grad input")
        if affine:
            assert_same(md.weight.grad, mc.weight.grad, rtol=1e-4, atol=1e-4, msg="grad weight")
            assert_same(md.bias.grad, mc.bias.grad, rtol=1e-4, atol=1e-4, msg="grad bias")
        assert_same(md.running_mean, mc.running_mean, **TOL, msg="running_mean")
        assert_same(md.running_var, mc.running_var, **TOL, msg="running_var")
        assert_same(md.num_batches_tracked, mc.num_batches_tracked)
    mc.eval()
    md.eval()
    x = torch.randn(*shape)
    xc = x.clone().requires_grad_()
    xd = to_dev(x).requires_grad_()
    yc, yd = mc(xc), md(xd)
    yc.sum().backward()
    yd.sum().backward()
    assert_same(yd, yc, **TOL, msg="eval output")
    assert_same(xd.grad, xc.grad, **TOL, msg="eval grad input")


def test_batchnorm_running_stats_are_updated_in_place():
    rm, rv = torch.zeros(3), torch.ones(3)
    rmd, rvd = to_dev(rm), to_dev(rv)
    view_m = rmd.view(3)  # an alias sees the update
    x = torch.randn(5, 3, 4)
    F.batch_norm(x, rm, rv, training=True, momentum=0.3)
    F.batch_norm(to_dev(x), rmd, rvd, training=True, momentum=0.3)
    assert_same(rmd, rm, **TOL)
    assert_same(rvd, rv, **TOL)
    assert_same(view_m, rm, **TOL)


def test_batchnorm_running_stats_in_a_strided_buffer():
    # running stats that are views of a larger tensor: a partial write
    buf = torch.zeros(2, 3)
    bufd = to_dev(buf)
    x = torch.randn(4, 3)
    F.batch_norm(x, buf[0], buf[1].add_(1), training=True)
    F.batch_norm(to_dev(x), bufd[0], bufd[1].add_(1), training=True)
    assert_same(bufd, buf, **TOL)


def test_batchnorm_no_running_stats():
    x = torch.randn(4, 3, 5)
    w, b = torch.randn(3), torch.randn(3)
    assert_same(F.batch_norm(to_dev(x), None, None, to_dev(w), to_dev(b), training=True),
                F.batch_norm(x, None, None, w, b, training=True), **TOL)


def test_native_batch_norm_outputs():
    x = torch.randn(4, 3, 5, 2)
    rm, rv = torch.randn(3), torch.rand(3) + 0.5
    for training in (True, False):
        exp = torch.native_batch_norm(x, None, None, rm.clone(), rv.clone(), training, 0.1, 1e-5)
        got = torch.native_batch_norm(to_dev(x), None, None, to_dev(rm), to_dev(rv), training, 0.1, 1e-5)
        assert_same(list(got), list(exp), **TOL)


def test_batchnorm_large_mean_offset():
    # the shifted one-pass variance stays accurate when |mean| >> std
    x = torch.randn(8, 2, 16, 16) * 0.01 + 1000.0
    m = nn.BatchNorm2d(2)
    md = copy.deepcopy(m).to(DEV)
    assert_same(md(to_dev(x)), m(x), rtol=1e-3, atol=2e-3)
    assert_same(md.running_var, m.running_var, rtol=1e-3, atol=1e-6)


def test_batchnorm_bf16_input_float_params():
    x = torch.randn(4, 3, 5, 5).bfloat16()
    rm, rv, w, b = torch.zeros(3), torch.ones(3), torch.rand(3), torch.rand(3)
    exp = torch.native_batch_norm(x, w, b, rm.clone(), rv.clone(), True, 0.1, 1e-5)
    got = torch.native_batch_norm(to_dev(x), to_dev(w), to_dev(b), to_dev(rm), to_dev(rv), True, 0.1, 1e-5)
    assert [t.dtype for t in got] == [t.dtype for t in exp]
    assert_same(list(got), list(exp), rtol=2e-2, atol=2e-2)


def test_batchnorm_errors():
    x = torch.randn(4, 3)
    with pytest.raises(RuntimeError):
        F.batch_norm(x, torch.zeros(4), torch.ones(4), training=True)
    with pytest.raises(RuntimeError):
        F.batch_norm(to_dev(x), to_dev(torch.zeros(4)), to_dev(torch.ones(4)), training=True)
    with pytest.raises(ValueError):
        F.batch_norm(to_dev(torch.randn(1, 3)), None, None, training=True)
