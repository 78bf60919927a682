"""Losses forward/backward vs the CPU: nll_loss (1d, 2d, nd, weight, ignore_index, reductions),
cross_entropy (composite), mse, smooth_l1, huber, binary_cross_entropy (+ with_logits),
multi_margin_loss and multilabel_margin_loss."""

import math

import pytest
import torch
import torch.nn.functional as F

from conftest import IS_TINY, assert_same, to_dev
from nn_helpers import check_fwd_bwd

TOL = dict(rtol=1e-5, atol=1e-6)
REDS = ["none", "mean", "sum"]


@pytest.mark.parametrize("red", REDS)
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(red, weighted):
    x = torch.randn(6, 7).log_softmax(1)
    t = torch.tensor([0, 3, -100, 6, 1, 3])
    w = torch.rand(7) if weighted else None
    check_fwd_bwd(F.nll_loss, x, t, weight=w, reduction=red, **TOL)
    check_fwd_bwd(F.nll_loss, x, t.clamp(min=0), weight=w, ignore_index=3, reduction=red, **TOL)


@pytest.mark.parametrize("red", REDS)
def test_nll_loss_2d_nd_and_unbatched(red):
    check_fwd_bwd(F.nll_loss, torch.randn(2, 4, 3, 5), torch.randint(0, 4, (2, 3, 5)), weight=torch.rand(4),
                  reduction=red, **TOL)
    check_fwd_bwd(F.nll_loss, torch.randn(2, 4, 3, 5, 2), torch.randint(0, 4, (2, 3, 5, 2)), reduction=red, **TOL)
    check_fwd_bwd(F.nll_loss, torch.randn(7), torch.tensor(2), reduction=red, **TOL)


def test_nll_loss_all_ignored_and_empty():
    x = torch.randn(3, 4)
    t = torch.full((3,), -100)
    check_fwd_bwd(F.nll_loss, x, t, **TOL)  # mean over zero weight: NaN, as on the CPU
    e = torch.randn(0, 4)
    te = torch.zeros(0, dtype=torch.long)
    for red in REDS:
        assert_same(F.nll_loss(to_dev(e), to_dev(te), reduction=red), F.nll_loss(e, te, reduction=red))


def test_nll_loss_bad_target_is_nan_not_garbage():
    if not IS_TINY:
        pytest.skip("the CPU raises (a data-dependent check tiny does lazily)")
    out = F.nll_loss(to_dev(torch.randn(3, 4)), to_dev(torch.tensor([0, 9, 1])))
    assert math.isnan(out.item())


def test_nll_loss_errors():
    for x, t in [(torch.randn(3, 4), torch.zeros(4, dtype=torch.long)),
                 (torch.randn(3, 4), torch.zeros(3)),
                 (torch.randn(3, 4), torch.zeros(3, 1, dtype=torch.long))]:
        with pytest.raises((RuntimeError, ValueError)) as ec:
            F.nll_loss(x, t)
        with pytest.raises((RuntimeError, ValueError)) as ed:
            F.nll_loss(to_dev(x), to_dev(t))
        assert type(ed.value) is type(ec.value)


def test_cross_entropy():
    # composite: _log_softmax + nll_loss; label smoothing and probability targets add sums,
    # masked_fill and mul
    x = torch.randn(5, 6)
    t = torch.tensor([0, 5, 2, -100, 1])
    check_fwd_bwd(F.cross_entropy, x, t, **TOL)
    check_fwd_bwd(F.cross_entropy, x, t, weight=torch.rand(6), reduction="sum", **TOL)
    check_fwd_bwd(F.cross_entropy, x, t, label_smoothing=0.1, **TOL)
    check_fwd_bwd(F.cross_entropy, x, torch.rand(5, 6).softmax(1), grad_args=[0], **TOL)
    check_fwd_bwd(F.cross_entropy, torch.randn(2, 4, 3, 3), torch.randint(0, 4, (2, 3, 3)), **TOL)


@pytest.mark.parametrize("red", REDS)
def test_pointwise_losses(red):
    a, b = torch.randn(4, 5) * 2, torch.randn(4, 5) * 2
    check_fwd_bwd(F.mse_loss, a, b, reduction=red, **TOL)
    check_fwd_bwd(F.smooth_l1_loss, a, b, reduction=red, beta=0.5, **TOL)
    check_fwd_bwd(F.smooth_l1_loss, a, b, reduction=red, beta=2.0, **TOL)
    check_fwd_bwd(F.huber_loss, a, b, reduction=red, delta=0.7, **TOL)
    check_fwd_bwd(F.huber_loss, a, b, reduction=red, delta=3.0, **TOL)


def test_pointwise_losses_broadcast_and_dtypes():
    with pytest.warns(UserWarning):
        check_fwd_bwd(F.mse_loss, torch.randn(4, 5), torch.randn(5), grad_args=[0], **TOL)
    a, b = torch.randn(3, 4, dtype=torch.float64), torch.randn(3, 4, dtype=torch.float64)
    check_fwd_bwd(F.huber_loss, a, b, rtol=1e-12, atol=1e-12)
    check_fwd_bwd(F.mse_loss, torch.randn(0, 3), torch.randn(0, 3), reduction="sum")


@pytest.mark.parametrize("red", REDS)
def test_binary_cross_entropy(red):
    p = torch.rand(4, 5).clamp(1e-3, 1 - 1e-3)
    t = torch.rand(4, 5)
    check_fwd_bwd(F.binary_cross_entropy, p, t, reduction=red, grad_args=[0], **TOL)
    check_fwd_bwd(F.binary_cross_entropy, p, t, weight=torch.rand(5), reduction=red, grad_args=[0], **TOL)
    # log clamped at -100 for p in {0, 1}
    check_fwd_bwd(F.binary_cross_entropy, torch.tensor([0.0, 1.0, 0.5]), torch.tensor([1.0, 0.0, 1.0]),
                  reduction=red, grad_args=[0], **TOL)


@pytest.mark.parametrize("red", REDS)
def test_binary_cross_entropy_with_logits(red):
    x = torch.randn(4, 5) * 5
    t = torch.rand(4, 5)
    check_fwd_bwd(F.binary_cross_entropy_with_logits, x, t, reduction=red, grad_args=[0], **TOL)
    check_fwd_bwd(F.binary_cross_entropy_with_logits, x, t, weight=torch.rand(5), pos_weight=torch.rand(5),
                  reduction=red, grad_args=[0], **TOL)
    # large logits: no overflow
    check_fwd_bwd(F.binary_cross_entropy_with_logits, torch.tensor([100.0, -100.0, 0.0]),
                  torch.tensor([0.0, 1.0, 1.0]), reduction=red, grad_args=[0], **TOL)


def test_bce_size_mismatch():
    with pytest.raises(ValueError):
        F.binary_cross_entropy(to_dev(torch.rand(3)), to_dev(torch.rand(4)))


@pytest.mark.parametrize("red", REDS)
@pytest.mark.parametrize("p", [1, 2])
def test_multi_margin_loss(red, p):
    x = torch.randn(6, 5)
    x[0, 2] = x[0, 1] + 1.0  # a hinge exactly at 0 (margin 1): no gradient there
    t = torch.tensor([1, 0, 4, 4, 2, 3])
    check_fwd_bwd(F.multi_margin_loss, x, t, p=p, reduction=red, **TOL)
    check_fwd_bwd(F.multi_margin_loss, x, t, p=p, margin=0.3, weight=torch.rand(5), reduction=red, **TOL)
    check_fwd_bwd(F.multi_margin_loss, x[2], t[2], p=p, reduction=red, **TOL)  # one sample, 0-d target


@pytest.mark.parametrize("red", REDS)
def test_multilabel_margin_loss(red):
    # labels end at the first -1; a repeated label counts twice, as on the CPU
    x = torch.randn(5, 6)
    t = torch.tensor([[3, 0, -1, 1, 2, 0], [1, 2, 3, 4, 5, 0], [-1, 1, 2, 3, 4, 5], [0, 0, 2, -1, 1, 1],
                      [5, 4, 3, 2, 1, 0]])
    check_fwd_bwd(F.multilabel_margin_loss, x, t, reduction=red, **TOL)
    check_fwd_bwd(F.multilabel_margin_loss, x[0], t[0], reduction=red, **TOL)
    out, is_target = torch.ops.aten.multilabel_margin_loss_forward(to_dev(x), to_dev(t), 1)
    assert_same(is_target, torch.ops.aten.multilabel_margin_loss_forward(x, t, 1)[1])


def test_margin_loss_errors_and_bad_targets():
    x = torch.randn(3, 4)
    for f, t in [(lambda a, b: F.multi_margin_loss(a, b, p=3), torch.tensor([0, 1, 1])),
                 (F.multi_margin_loss, torch.tensor([0, 1])),
                 (F.multi_margin_loss, torch.tensor([0.0, 1, 1])),
                 (F.multilabel_margin_loss, torch.tensor([[0, 1, -1, 0]] * 2))]:
        with pytest.raises((RuntimeError, ValueError)) as ec:
            f(x, t)
        with pytest.raises((RuntimeError, ValueError)) as ed:
            f(to_dev(x), to_dev(t))
        assert type(ed.value) is type(ec.value) and str(ed.value).split("\n")[0] == str(ec.value).split("\n")[0]
    if IS_TINY:  # an out-of-range target: NaN where the CPU raises after reading it
        assert math.isnan(F.multi_margin_loss(to_dev(x), to_dev(torch.tensor([0, 5, 1]))).item())
        assert math.isnan(F.multilabel_margin_loss(to_dev(x), to_dev(torch.tensor([[0, 5, -1, 0]] * 3))).item())
