"""The remaining torch.nn.functional pieces of a model, forward and backward against the CPU:
linear and bilinear layers, l1 / kl_div losses, cosine similarity, dropout in train and eval
mode, scaled dot-product attention (math path), and nn.Module mode switches."""

import copy
import warnings

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import DEV, assert_same, to_dev
from nn_helpers import check_fwd_bwd

TOL = dict(rtol=1e-4, atol=1e-5)
REDS = ["mean", "sum", "none"]


def to_dev_module(m):
    return copy.deepcopy(m).to(DEV)


def test_linear():
    x, w, b = torch.randn(4, 7), torch.randn(3, 7), torch.randn(3)
    check_fwd_bwd(F.linear, x, w, b, **TOL)
    check_fwd_bwd(F.linear, x, w, **TOL)
    check_fwd_bwd(F.linear, torch.randn(2, 5, 7), w, b, **TOL)   # batched input
    check_fwd_bwd(F.linear, torch.randn(7), w, b, **TOL)         # 1-d input
    check_fwd_bwd(F.linear, torch.randn(0, 7), w, b, **TOL)      # empty batch
    check_fwd_bwd(F.linear, torch.randn(7, 4).t(), w, b, **TOL)  # non-contiguous input


@pytest.mark.parametrize("rows", [1, 5, 8, 13, 16, 32])
def test_linear_few_rows(rows):
    """Few rows over a wide reduce (a small batch): no tile rows at all (1 row), one partial tile,
    whole and partial tiles; a batch-shaped input, a ReLU after, strided operands, a reduce
    that is not whole vectors, non-finite values."""
    torch.manual_seed(rows)
    K, N = 256, 200  # (from 128 channels on, the threads split the channels)
    x, w, b = torch.randn(rows, K), torch.randn(N, K), torch.randn(N)
    for xs in (x, x.reshape(1, rows, K)):
        got = F.relu(F.linear(to_dev(xs), to_dev(w), to_dev(b)))
        assert_same(got, F.relu(F.linear(xs, w, b)), rtol=1e-4, atol=1e-4)
    check_fwd_bwd(F.linear, x, w, b, rtol=1e-4, atol=1e-4)
    # the weight transposed in storage (its rows strided along the reduce), x strided too
    wt = w.t().contiguous().t()
    assert_same(F.linear(to_dev(x), to_dev(wt), to_dev(b)), F.linear(x, wt, b), rtol=1e-4, atol=1e-4)
    xt = x.t().contiguous().t()
    assert_same(F.linear(to_dev(xt), to_dev(w), to_dev(b)), F.linear(xt, w, b), rtol=1e-4, atol=1e-4)
    # a reduce not a whole number of vectors
    x2, w2 = torch.randn(rows, K + 3), torch.randn(N, K + 3)
    assert_same(F.linear(to_dev(x2), to_dev(w2)), F.linear(x2, w2), rtol=1e-4, atol=1e-4)
    # non-finite values reach the outputs they belong to
    xn = x.clone()
    xn[0, 7] = float("inf")
    wn = w.clone()
    wn[3, 9] = float("nan")
    assert_same(F.linear(to_dev(xn), to_dev(wn)), F.linear(xn, wn), rtol=1e-4, atol=1e-4)


def test_linear_shape_error():
    for dev in ("cpu", DEV):
        with pytest.raises(RuntimeError, match="shapes cannot be multiplied"):
            F.linear(torch.randn(4, 6, device=dev), torch.randn(3, 7, device=dev))


def test_bilinear():
    x1, x2 = torch.randn(5, 4), torch.randn(5, 6)
    w, b = torch.randn(3, 4, 6), torch.randn(3)
    check_fwd_bwd(F.bilinear, x1, x2, w, b, **TOL)
    check_fwd_bwd(F.bilinear, torch.randn(2, 5, 4), torch.randn(2, 5, 6), w, None, **TOL)


@pytest.mark.parametrize("red", REDS)
def test_l1_loss(red):
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    b[0, 0] = a[0, 0]  # |a - b| = 0: the gradient is sign(0) = 0, as on the CPU
    check_fwd_bwd(F.l1_loss, a, b, reduction=red, **TOL)
    check_fwd_bwd(F.l1_loss, torch.randn(0, 3), torch.randn(0, 3), reduction=red)


@pytest.mark.parametrize("red", ["batchmean", "mean", "sum", "none"])
@pytest.mark.parametrize("log_target", [False, True])
def test_kl_div(red, log_target):
    inp = torch.randn(6, 5).log_softmax(1)
    target = torch.randn(6, 5).softmax(1)
    if log_target:
        target = target.log()
    else:
        target[0, 0] = 0  # 0 * log 0 counts as 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "mean" is not "batchmean" (both are tested)
        check_fwd_bwd(F.kl_div, inp, target, reduction=red, log_target=log_target, **TOL)


def test_cosine_similarity():
    a, b = torch.randn(6, 8), torch.randn(6, 8)
    check_fwd_bwd(F.cosine_similarity, a, b, **TOL)
    check_fwd_bwd(F.cosine_similarity, a, b, dim=0, **TOL)
    check_fwd_bwd(F.cosine_similarity, torch.randn(3, 1, 8), torch.randn(1, 4, 8), dim=-1, **TOL)  # broadcast
    z = torch.randn(2, 8)
    z[1] = 0  # a zero vector: eps clamps the norm
    check_fwd_bwd(F.cosine_similarity, z, torch.randn(2, 8), **TOL)
    check_fwd_bwd(F.pairwise_distance, a, b, **TOL)


def test_dropout_train_and_eval():
    torch.manual_seed(0)
    x = torch.ones(200, 100)
    xd = to_dev(x)
    y = F.dropout(xd, p=0.3, training=True).cpu()
    kept = y != 0
    # survivors scaled by 1/(1-p); about 70% kept
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / 0.7), rtol=1e-6, atol=0)
    assert abs(kept.float().mean().item() - 0.7) < 0.02
    assert_same(F.dropout(xd, p=0.3, training=False), x, rtol=0, atol=0)
    assert F.dropout(xd, p=1.0, training=True).cpu().eq(0).all()
    assert_same(F.dropout(xd, p=0.0, training=True), x, rtol=0, atol=0)
    # the gradient goes through the same mask
    xg = xd.clone().requires_grad_()
    out = F.dropout(xg, p=0.5, training=True)
    out.sum().backward()
    assert torch.equal(xg.grad.cpu() != 0, out.detach().cpu() != 0)
    for dev in ("cpu", DEV):
        with pytest.raises(ValueError, match="dropout probability"):
            F.dropout(torch.ones(3, device=dev), p=1.5)


def test_module_modes():
    torch.manual_seed(0)
    # dropout after the batch norm: its training mask (a different generator) leaves the statistics alone
    m = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8), nn.Dropout(0.5))
    md = to_dev_module(m)
    x = torch.randn(16, 8)
    m.train(), md.train()
    m(x), md(to_dev(x))  # one training batch moves the running statistics
    m.eval(), md.eval()
    with torch.no_grad():
        out = md(to_dev(x))
    assert not out.requires_grad
    assert_same(out, m(x).detach(), **TOL)  # eval: no dropout, running statistics
    md.train()
    assert md.training and all(c.training for c in md.children())


@pytest.mark.parametrize("causal", [False, True])
def test_scaled_dot_product_attention(causal):
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 7, 4)
    check_fwd_bwd(F.scaled_dot_product_attention, q, k, v, is_causal=causal, **TOL)


def test_scaled_dot_product_attention_masks_and_scale():
    q, k, v = torch.randn(2, 4, 6), torch.randn(2, 5, 6), torch.randn(2, 5, 3)
    bool_mask = torch.rand(4, 5) > 0.3
    bool_mask[:, 0] = True  # every query sees something (an all-masked row is NaN on the CPU too)
    check_fwd_bwd(F.scaled_dot_product_attention, q, k, v, attn_mask=bool_mask, **TOL)
    check_fwd_bwd(F.scaled_dot_product_attention, q, k, v, attn_mask=torch.randn(2, 4, 5), scale=0.3, **TOL)


def test_multihead_attention_module():
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=True)
    x = torch.randn(2, 5, 16)
    ref, ref_w = mha(x, x, x)
    md = to_dev_module(mha)
    out, w = md(to_dev(x), to_dev(x), to_dev(x))
    assert_same(out, ref, **TOL)
    assert_same(w, ref_w, **TOL)
