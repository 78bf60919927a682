"""Pooling and resampling forward/backward vs the CPU: max (with indices, ceil_mode, dilation,
padding), avg (count_include_pad, divisor_override), adaptive avg/max, nearest/linear upsampling,
pixel shuffle."""

import pytest
import torch
import torch.nn.functional as F

from conftest import assert_same, to_dev
from nn_helpers import check_fwd_bwd

TOL = dict(rtol=1e-5, atol=1e-6)

MAX2D = [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
         dict(kernel_size=(3, 2), stride=(2, 3), padding=(1, 1), dilation=(2, 1), ceil_mode=True),
         dict(kernel_size=3, stride=1, dilation=2, ceil_mode=True), dict(kernel_size=(1, 4), stride=(1, 3)),
         # disjoint windows (kernel <= stride): an elementwise backward
         dict(kernel_size=2, ceil_mode=True), dict(kernel_size=2, stride=3, padding=1),
         dict(kernel_size=(2, 1), stride=(3, 2), padding=(1, 0), ceil_mode=True)]


@pytest.mark.parametrize("kw", MAX2D, ids=str)
def test_max_pool2d(kw):
    x = torch.randn(2, 3, 9, 10)
    r, t = check_fwd_bwd(F.max_pool2d, x, return_indices=True, **kw, **TOL)


def test_max_pool_1d_3d_unbatched():
    check_fwd_bwd(F.max_pool1d, torch.randn(2, 3, 11), 3, 2, 1, 1, True, True, **TOL)
    check_fwd_bwd(F.max_pool3d, torch.randn(2, 2, 5, 6, 7), 2, (1, 2, 2), 1, return_indices=True, **TOL)
    check_fwd_bwd(F.max_pool2d, torch.randn(3, 8, 8), 2, **TOL)


def test_max_pool_ties_and_infinities():
    # ties pick the first maximum; -inf everywhere still returns an in-window index
    x = torch.tensor([[[[1.0, 1.0, 0.0], [1.0, -1.0, 2.0], [2.0, 2.0, 2.0]]]])
    check_fwd_bwd(F.max_pool2d, x, 2, 1, return_indices=True, **TOL)
    y = torch.full((1, 1, 4, 4), float("-inf"))
    a, b = F.max_pool2d(y, 2, return_indices=True), F.max_pool2d(to_dev(y), 2, return_indices=True)
    assert_same(list(b), list(a))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_max_pool_nan_is_the_maximum(dtype):
    # a NaN in a window is its maximum and its index (the first NaN), beside infinities
    # and after a fused batch-norm-like epilogue, as the CPU gives
    x = torch.randn(2, 3, 8, 9).to(dtype)
    x[0, 0, 1, 1] = float("nan")
    x[0, 1, 0, :3] = float("nan")
    x[1, 2, 5, 5] = float("inf")
    x[1, 2, 6, 6] = float("nan")
    for f, args in [(F.max_pool2d, dict(kernel_size=3, stride=2, padding=1, return_indices=True)),
                    (F.max_pool2d, dict(kernel_size=2, return_indices=True)),
                    (F.adaptive_max_pool2d, dict(output_size=(3, 4), return_indices=True))]:
        assert_same(list(f(to_dev(x), **args)), list(f(x, **args)))
        assert_same(list(f(torch.relu(to_dev(x) * 0.5 - 0.1), **args)), list(f(torch.relu(x * 0.5 - 0.1), **args)))
    assert_same(F.max_pool3d(to_dev(x).unsqueeze(0), 2), F.max_pool3d(x.unsqueeze(0), 2))


def test_max_pool_errors():
    x = torch.randn(1, 1, 4, 4)
    for kw in [dict(kernel_size=2, padding=2), dict(kernel_size=5), dict(kernel_size=0)]:
        with pytest.raises(RuntimeError):
            F.max_pool2d(x, **kw)
        with pytest.raises(RuntimeError):
            F.max_pool2d(to_dev(x), **kw)
    with pytest.raises(RuntimeError):
        F.max_pool2d(to_dev(torch.ones(1, 1, 4, 4, dtype=torch.bool)), 2)
    with pytest.raises(RuntimeError):
        F.adaptive_max_pool2d(to_dev(torch.ones(1, 1, 4, 4, dtype=torch.long)), 2)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int8, torch.uint8, torch.float64])
def test_max_pool_dtypes(dtype):
    x = torch.randint(-100 if dtype != torch.uint8 else 0, 100, (2, 3, 7, 6)).to(dtype)
    for kw in [dict(kernel_size=3, stride=2, padding=1), dict(kernel_size=2, ceil_mode=True)]:
        assert_same(list(F.max_pool2d(to_dev(x), return_indices=True, **kw)),
                    list(F.max_pool2d(x, return_indices=True, **kw)))


AVG = [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
       dict(kernel_size=3, stride=2, padding=1, count_include_pad=False, ceil_mode=True),
       dict(kernel_size=3, stride=2, padding=1, divisor_override=4), dict(kernel_size=(2, 3), stride=(3, 1), ceil_mode=True)]


@pytest.mark.parametrize("kw", AVG, ids=str)
def test_avg_pool2d(kw):
    check_fwd_bwd(F.avg_pool2d, torch.randn(2, 3, 9, 10), **kw, **TOL)


def test_avg_pool_1d_3d():
    check_fwd_bwd(F.avg_pool1d, torch.randn(2, 3, 11), 3, 2, 1, True, True, **TOL)
    check_fwd_bwd(F.avg_pool3d, torch.randn(2, 2, 5, 6, 7), 2, (1, 2, 2), 1, count_include_pad=False, **TOL)
    check_fwd_bwd(F.avg_pool3d, torch.randn(2, 2, 5, 6, 7), 3, 2, 1, ceil_mode=True, divisor_override=5, **TOL)


@pytest.mark.parametrize("out", [(3, 5), (4, 3), 1, (9, 10), (2, 1)], ids=str)
def test_adaptive_avg_pool2d(out):
    check_fwd_bwd(F.adaptive_avg_pool2d, torch.randn(2, 3, 9, 10), out, **TOL)


# outputs that repeat the input (VGG's 7x7 pool of a 1x1 map), some dims pooled and others
# repeated, and one neither (the tap tables)
@pytest.mark.parametrize("size,out", [((1, 1), (7, 7)), ((2, 3), (6, 3)), ((4, 2), (2, 6)), ((2, 7), (7, 7)),
                                      ((3, 5), (3, 5))], ids=str)
def test_adaptive_avg_pool2d_repeats(size, out):
    check_fwd_bwd(F.adaptive_avg_pool2d, torch.randn(2, 3, *size), out, **TOL)
    check_fwd_bwd(F.adaptive_avg_pool3d, torch.randn(2, 2, 1, *size), (2, *out), **TOL)


def test_adaptive_avg_pool_1d_3d():
    check_fwd_bwd(F.adaptive_avg_pool1d, torch.randn(2, 3, 11), 4, **TOL)
    check_fwd_bwd(F.adaptive_avg_pool3d, torch.randn(2, 2, 5, 6, 7), (2, 3, 4), **TOL)
    check_fwd_bwd(F.adaptive_avg_pool3d, torch.randn(2, 2, 4, 6, 8), (2, 3, 4), **TOL)


@pytest.mark.parametrize("out", [(3, 5), (4, 3), 1, (9, 10)], ids=str)
def test_adaptive_max_pool2d(out):
    check_fwd_bwd(F.adaptive_max_pool2d, torch.randn(2, 3, 9, 10), out, return_indices=True, **TOL)


def test_adaptive_max_pool_1d_3d():
    check_fwd_bwd(F.adaptive_max_pool1d, torch.randn(2, 3, 11), 4, return_indices=True, **TOL)
    check_fwd_bwd(F.adaptive_max_pool3d, torch.randn(2, 2, 5, 6, 7), (2, 3, 4), return_indices=True, **TOL)


INTERP = [dict(scale_factor=2), dict(size=(5, 17)), dict(scale_factor=(1.7, 0.6)), dict(size=(9, 10))]


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
@pytest.mark.parametrize("kw", INTERP, ids=str)
def test_upsample_nearest(mode, kw):
    check_fwd_bwd(F.interpolate, torch.randn(2, 3, 9, 10), mode=mode, **kw, **TOL)


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("kw", INTERP + [dict(scale_factor=(1.7, 0.6), recompute_scale_factor=False)], ids=str)
def test_upsample_bilinear(align, kw):
    check_fwd_bwd(F.interpolate, torch.randn(2, 3, 9, 10), mode="bilinear", align_corners=align, **kw,
                  rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("align", [False, True])
@pytest.mark.parametrize("kw", INTERP + [dict(size=(1, 3)), dict(scale_factor=0.4)], ids=str)
def test_upsample_bicubic(align, kw):
    # 4 taps per dim, clamped at the borders (small inputs clamp on both sides)
    check_fwd_bwd(F.interpolate, torch.randn(2, 3, 9, 10), mode="bicubic", align_corners=align, **kw,
                  rtol=1e-5, atol=1e-5)
    check_fwd_bwd(F.interpolate, torch.randn(1, 2, 2, 3), mode="bicubic", align_corners=align, size=(5, 4),
                  rtol=1e-5, atol=1e-5)
    check_fwd_bwd(F.interpolate, torch.randn(0, 2, 2, 3), mode="bicubic", align_corners=align, size=(5, 4))


@pytest.mark.parametrize("align", [False, True])
def test_upsample_linear_trilinear_nearest_1d_3d(align):
    check_fwd_bwd(F.interpolate, torch.randn(2, 3, 7), scale_factor=2.5, mode="linear", align_corners=align,
                  rtol=1e-5, atol=1e-5)
    check_fwd_bwd(F.interpolate, torch.randn(2, 2, 3, 4, 5), size=(5, 3, 7), mode="trilinear", align_corners=align,
                  rtol=1e-5, atol=1e-5)
    check_fwd_bwd(F.interpolate, torch.randn(2, 3, 7), scale_factor=2.5, mode="nearest", **TOL)
    check_fwd_bwd(F.interpolate, torch.randn(2, 2, 3, 4, 5), size=(5, 3, 7), mode="nearest", **TOL)


def test_pixel_shuffle_unshuffle():
    check_fwd_bwd(F.pixel_shuffle, torch.randn(2, 8, 3, 4), 2, **TOL)
    check_fwd_bwd(F.pixel_unshuffle, torch.randn(2, 2, 6, 4), 2, **TOL)
    check_fwd_bwd(F.pixel_shuffle, torch.randn(3, 2, 9, 2, 3), 3, **TOL)
    with pytest.raises(RuntimeError):
        F.pixel_shuffle(to_dev(torch.randn(1, 3, 2, 2)), 2)


def test_pool_empty_batch():
    x = torch.randn(0, 3, 8, 8)
    assert_same(F.max_pool2d(to_dev(x), 2), F.max_pool2d(x, 2))
    assert_same(F.avg_pool2d(to_dev(x), 2), F.avg_pool2d(x, 2))
    assert_same(F.adaptive_avg_pool2d(to_dev(x), 3), F.adaptive_avg_pool2d(x, 3))
