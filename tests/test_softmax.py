"""softmax / log_softmax and their backward ops against the CPU.

torch.softmax / log_softmax (and nn.functional's forms with dtype=) decompose into
_softmax / _log_softmax; autograd calls _softmax_backward_data / _log_softmax_backward_data.
Covers every float dtype, each dim, 0-d and empty inputs, non-contiguous views, rows of
-inf / inf / NaN, large magnitudes, out=, the half_to_float flag (which the CPU rejects:
checked against the float computation), errors, gradients and kernel counts.
"""

import pytest
import torch
import torch.nn.functional as F

from compare import check, check_grad, gradcheck, kernels_of
from conftest import FLOAT_DTYPES, INT_DTYPES, IS_TINY, assert_same, to_dev


def make(shape, dtype, seed=0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=torch.float64) * scale).to(dtype)


VIEWS = {
    "contig": lambda t: t,
    "permuted": lambda t: t.permute(2, 0, 1),
    "strided": lambda t: t[::2, 1:, ::3],
    "expanded": lambda t: t[:, :1, :].expand(5, 4, 6),
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax(fn, dtype):
    base = make((5, 7, 6), dtype, scale=3)
    tol = {}
    if fn is torch.log_softmax:
        # the CPU rounds intermediates to 16 bits, tiny rounds the float32 result once
        # (tiny's error against float64 is no larger); values near 0 need an atol
        tol = {torch.float16: dict(rtol=1e-3, atol=1e-3), torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2)}.get(dtype, {})
    for vname, view in VIEWS.items():
        for dim in [0, 1, -1]:
            check(lambda x: fn(view(x), dim), base, msg=f"{vname} {dim}", **tol)


@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax], ids=["softmax", "log_softmax"])
def test_dtype_argument(fn):
    x = make((4, 9), torch.float16, scale=4)
    check(lambda x: fn(x, -1, dtype=torch.float32), x)
    check(lambda x: fn(x, 0, dtype=torch.float64), x)
    check(lambda x: fn(x.float(), 1, dtype=torch.float16), x, rtol=1e-3, atol=1e-3)


def test_extreme_rows():
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[1000.0, 1000.0, -1000.0, 0.0], [-inf, -inf, -inf, -inf], [inf, 1.0, 2.0, 3.0],
                      [-inf, 0.0, -inf, 1.0], [nan, 1.0, 2.0, 3.0], [-1e30, 1e30, 0.0, 5.0]])
    for fn in [torch.softmax, torch.log_softmax]:
        check(lambda x: fn(x, 1), x)
        check(lambda x: fn(x, 0), x)
        check(lambda x: fn(x.double(), 1), x)


def test_edge_shapes():
    for fn in [torch.softmax, torch.log_softmax]:
        check(lambda x: fn(x, 0), torch.tensor(2.5))
        check(lambda x: fn(x, -1), torch.tensor(float("nan")))
        check(lambda x: fn(x, 0), torch.empty(0, 3))
        check(lambda x: fn(x, 1), torch.empty(0, 3))
        check(lambda x: fn(x, 2), torch.empty(2, 3))
        check(lambda x: fn(x, 0), make((1, 5), torch.float32))
        check(lambda x: fn(x, -1), make((3000,), torch.float32, scale=5))
        check(lambda x: fn(x, 1), make((2, 70000), torch.float32, scale=5))


@pytest.mark.parametrize("dtype", INT_DTYPES + [torch.bool], ids=str)
def test_integer_inputs_raise(dtype):
    x = torch.ones(2, 3, dtype=dtype)
    check(lambda x: torch._softmax(x, 1, False), x)
    check(lambda x: torch._softmax(x, 0, False), x)
    check(lambda x: torch._log_softmax(x, 1, False), x)
    check(lambda x: torch._log_softmax(x, 0, False), x)
    check(lambda x: torch.softmax(x, 1, dtype=torch.float32), x)  # converts first: fine


def test_out_variants():
    x = make((3, 4), torch.float32)
    for odt in [torch.float32, torch.float64]:
        check(lambda x: torch._softmax(x, 1, False, out=torch.empty(0, dtype=odt, device=x.device)), x)
        check(lambda x: torch._log_softmax(x, 0, False, out=torch.empty(0, dtype=odt, device=x.device)), x)

    def into_view(x):
        # (a non-contiguous out= is filled as if contiguous by the CPU kernel, a CPU
        # quirk not mirrored: tiny writes through the strides)
        y = torch.zeros(6, 3, device=x.device)
        torch._softmax(x.t(), 0, False, out=y[2:])
        return y

    check(into_view, x)


def test_half_to_float():
    # The CPU rejects half_to_float; tiny follows the CUDA kernels: a half input, a float
    # result computed in float32. Compare with the CPU's float computation.
    if not IS_TINY:
        pytest.skip("the CPU rejects half_to_float")
    x = make((4, 7), torch.float16, scale=3)
    d = to_dev(x)
    assert_same(torch._softmax(d, 1, True), torch._softmax(x.float(), 1, False))
    assert_same(torch._log_softmax(d, 0, True), torch._log_softmax(x.float(), 0, False))
    with pytest.raises(RuntimeError, match="conversion is supported for Half type only"):
        torch._softmax(d.float(), 1, True)
    # backward of a half_to_float softmax: float grad, half input -> half grad_input
    y = torch._softmax(x.float(), 1, False)
    g = make((4, 7), torch.float32, seed=1)
    got = torch._softmax_backward_data(to_dev(g), to_dev(y), 1, torch.float16)
    want = torch._softmax_backward_data(g, y, 1, torch.float32).half()
    assert_same(got, want)
    got = torch._log_softmax_backward_data(to_dev(g), to_dev(y.log()), 1, torch.float16)
    want = torch._log_softmax_backward_data(g, y.log(), 1, torch.float32).half()
    assert_same(got, want)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_backward_data_ops(dtype):
    g = make((5, 7, 6), dtype, seed=1)
    y = torch.softmax(make((5, 7, 6), torch.float64), 1).to(dtype)
    for vname, view in VIEWS.items():
        for dim in [0, 1, -1]:
            check(lambda g, y: torch._softmax_backward_data(view(g), view(y), dim, dtype), g, y, msg=vname)
            check(lambda g, y: torch._log_softmax_backward_data(view(g), view(y.log()), dim, dtype), g, y,
                  msg=vname)


def test_backward_data_errors_and_out():
    g, y = make((2, 3), torch.float32), make((2, 3), torch.float32)
    # (input_dtype float16 with a float grad is the half_to_float backward: see above)
    check(lambda g, y: torch._softmax_backward_data(g.half(), y.half(), 1, torch.float32), g, y, rtol=1e-3, atol=1e-3)
    check(lambda g, y: torch._softmax_backward_data(g, y.double(), 1, torch.float32), g, y)
    check(lambda g, y: torch._softmax_backward_data(g, y, 1, torch.float64), g, y)
    check(lambda g, y: torch._softmax_backward_data(g, y[:1], 1, torch.float32), g, y)
    check(lambda g, y: torch._log_softmax_backward_data(g, y, 2, torch.float32), g, y)
    check(lambda g, y: torch._softmax_backward_data(g, y, 0, torch.float32,
                                                    out=torch.empty(0, device=g.device)), g, y)
    check(lambda g, y: torch._log_softmax_backward_data(g, y, 0, torch.float32,
                                                        out=torch.empty(0, dtype=torch.float64, device=g.device)), g, y)


# ---------------------------------------------------------------- autograd


@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_gradients(fn, dim):
    x = make((4, 5, 6), torch.float32, seed=3, scale=2)
    check_grad(lambda x: fn(x, dim), x.requires_grad_())
    check_grad(lambda x: fn(x.transpose(0, 2), dim), x.requires_grad_())


def test_gradients_cross_entropy_like():
    logits = make((8, 10), torch.float32, seed=4, scale=2)
    target = torch.randint(0, 10, (8,), generator=torch.Generator().manual_seed(0))
    onehot = torch.nn.functional.one_hot(target, 10).float()
    check_grad(lambda x, t: -(torch.log_softmax(x, 1) * t).sum(1).mean(), logits.requires_grad_(), onehot)
    check_grad(lambda x: torch.softmax(x, 1) @ torch.softmax(x, 1).t(), logits.requires_grad_())


@pytest.mark.parametrize("fn", [torch.softmax, torch.log_softmax], ids=["softmax", "log_softmax"])
def test_gradcheck_float64(fn):
    x = make((3, 4), torch.float64, seed=5)
    gradcheck(lambda x: fn(x, 1), x.requires_grad_())
    gradcheck(lambda x: fn(x, 0), x.requires_grad_())


# ---------------------------------------------------------------- kernel counts


@pytest.mark.skipif(not IS_TINY, reason="kernel counts are tiny-specific")
def test_kernel_counts():
    x = make((64, 128), torch.float32)
    # goal <= 2: the max and the exp-sum are hoisted out of the row loop, one kernel
    assert kernels_of(lambda x: torch.softmax(x, -1), x) == 1
    assert kernels_of(lambda x: torch.log_softmax(x, -1), x) == 1
    # over the outer dim: the max is realized, the exp-sum fuses with the output
    assert kernels_of(lambda x: torch.softmax(x, 0), x) == 2
    g, y = make((64, 128), torch.float32, seed=1), torch.softmax(x, -1)
    assert kernels_of(lambda g, y: torch._softmax_backward_data(g, y, -1, torch.float32), g, y) == 1
    assert kernels_of(lambda g, y: torch._log_softmax_backward_data(g, y, -1, torch.float32), g, y) == 1
