"""Scans against the CPU: cumsum, cumprod (with dtype=, out=, in-place), cummax / cummin
(values and indices: ties move the index forward, NaN is the extreme), logcumsumexp.

Short axes use the direct triangular form, long ones the blocked form (several levels
for the longest), so lengths around and far beyond the block sizes are covered, on
contiguous, permuted, strided and expanded views, for every dtype the CPU supports.
"""

import pytest
import torch

from compare import check, check_grad, gradcheck, kernels_of, require_tiny_kernels
from conftest import ALL_DTYPES, FLOAT_DTYPES, IS_TINY, to_dev

LENGTHS = [1, 2, 7, 32, 33, 64, 65, 257, 1000, 2049]


def make(shape, dtype, seed=0, ties=False):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g, dtype=torch.float64)
        if ties:
            x = (x * 2).round() / 2
        return x.to(dtype)
    if dtype == torch.uint8:
        return torch.randint(0, 4, shape, generator=g, dtype=dtype)
    return torch.randint(-3, 4, shape, generator=g).to(dtype)


VIEWS = {
    "contig": lambda t: t,
    "permuted": lambda t: t.permute(2, 0, 1),
    "strided": lambda t: t[::2, 1:, ::3],
    "expanded": lambda t: t[:, :1, :].expand(5, 4, 6),
}


def near_one(shape, dtype, seed=0):
    """Factors whose long products stay finite."""
    return (1 + 0.01 * make(shape, torch.float64, seed)).to(dtype)


# ---------------------------------------------------------------- cumsum / cumprod


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_cumsum_cumprod(op, dtype):
    f = getattr(torch, op)
    base = make((5, 7, 6), dtype)
    tol = {}
    if op == "cumprod" and dtype in (torch.float16, torch.bfloat16):
        tol = dict(rtol=2e-2, atol=1e-2)  # the CPU rounds every running product to 16 bits
    for vname, view in VIEWS.items():
        for dim in [0, 1, -1]:
            check(lambda x: f(view(x), dim), base, msg=f"{op} {vname} {dim}", **tol)


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.float16])
def test_cumsum_lengths(n, dtype):
    x = make((3, n), dtype)
    tol = dict(rtol=2e-3, atol=2e-2) if dtype == torch.float16 else {}
    check(lambda x: x.cumsum(1), x, msg=f"n={n}", **tol)
    check(lambda x: x.t().cumsum(0), x, msg=f"n={n} transposed", **tol)


@pytest.mark.parametrize("n", LENGTHS)
def test_cumprod_lengths(n):
    check(lambda x: x.cumprod(-1), near_one((2, n), torch.float64))
    check(lambda x: x.cumprod(-1), near_one((2, n), torch.float32))
    check(lambda x: x.cumprod(0), make((n, 2), torch.int64))


def test_very_long_scan():
    # three levels of blocks above the direct scan of 10 totals
    x = make((40000,), torch.float64)
    check(lambda x: x.cumsum(0), x)
    check(lambda x: x.cummax(0), make((40000,), torch.float32, ties=True))
    check(lambda x: x.logcumsumexp(0), x)


def test_cumsum_dtype_out_inplace():
    x = make((4, 6), torch.int32)
    for dt in [torch.float64, torch.int16, torch.float16]:
        check(lambda x: x.cumsum(1, dtype=dt), x, msg=str(dt))
        check(lambda x: x.cumprod(0, dtype=dt), x, msg=str(dt))
    xf = make((4, 6), torch.float32)
    for odt in [torch.float32, torch.float64, torch.int64, torch.bool]:
        check(lambda x: torch.cumsum(x, 1, out=torch.empty(0, dtype=odt, device=x.device)), xf, msg=str(odt))
        check(lambda x: torch.cumprod(x, 0, out=torch.empty(0, dtype=odt, device=x.device)), xf, msg=str(odt))
    check(lambda x: torch.cumsum(x, 1, dtype=torch.float32, out=torch.empty(0, dtype=torch.float64, device=x.device)), xf)
    check(lambda x: x.clone().cumsum_(0), xf)
    check(lambda x: x.clone().cumprod_(1), xf)
    check(lambda x: x.clone().cumsum_(0, dtype=torch.float64), xf)
    check(lambda x: x.clone().cumsum_(0), x)
    check(lambda x: x.bool().cumsum_(0), x)

    def into_view(x):
        y = torch.zeros(6, 8, device=x.device)
        y.t()[1:5].cumsum_(1)
        torch.cumsum(x.t(), 0, out=y[:, ::2])
        return y

    check(into_view, xf)


def test_cumsum_edge_cases():
    check(lambda x: x.cumsum(0), torch.tensor(3))
    check(lambda x: x.cumsum(-1), torch.tensor(2.5))
    check(lambda x: x.cumsum(1), torch.tensor(2.5))
    check(lambda x: x.cumsum(2), make((2, 3), torch.float32))
    check(lambda x: x.cumsum(0), torch.empty(0, 3))
    check(lambda x: x.cumsum(1), torch.empty(0, 3))
    check(lambda x: x.cumprod(0), torch.empty(3, 0, dtype=torch.int64))
    x = torch.tensor([[1.0, float("nan"), 2.0, float("inf"), -float("inf"), 3.0]])
    check(lambda x: x.cumsum(1), x)
    check(lambda x: x.cumprod(1), x)
    check(lambda x: x.cumprod(1), torch.tensor([[2.0, 0.0, 3.0, float("inf"), 1.0]]))


# ---------------------------------------------------------------- cummax / cummin


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_cummax_cummin(op, dtype):
    f = getattr(torch, op)
    base = make((5, 7, 6), dtype, ties=True)
    for vname, view in VIEWS.items():
        for dim in [0, 1, -1]:
            check(lambda x: f(view(x), dim), base, msg=f"{op} {vname} {dim}")


@pytest.mark.parametrize("n", LENGTHS)
@pytest.mark.parametrize("op", ["cummax", "cummin"])
def test_cummax_lengths(op, n):
    f = getattr(torch, op)
    check(lambda x: f(x, 1), make((2, n), torch.float32, ties=True))
    check(lambda x: f(x, 0), make((n, 2), torch.int16))


def test_cummax_nan_inf_ties():
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[1.0, 1.0, 0.0, 2.0, 2.0, nan, 5.0, nan, 1.0],
                      [-inf, -inf, 3.0, inf, inf, 1.0, -1.0, 7.0, 7.0],
                      [nan, 0.0, 0.0, nan, nan, -inf, inf, 0.0, nan],
                      [2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]])
    for f in [torch.cummax, torch.cummin]:
        check(lambda x: f(x, 1), x)
        check(lambda x: f(x, 0), x)
    long = make((1, 300), torch.float32, ties=True)
    long[0, 150] = nan
    long[0, 200] = nan
    check(lambda x: torch.cummax(x, 1), long)
    check(lambda x: torch.cummin(x, 1), long)


def test_cummax_edge_cases_and_out():
    check(lambda x: torch.cummax(x, 0), torch.tensor(3.0))
    check(lambda x: torch.cummin(x, -1), torch.tensor(3))
    check(lambda x: torch.cummax(x, 0), torch.empty(0, 3))
    check(lambda x: torch.cummax(x, 2), torch.empty(0, 3))
    x = make((4, 5), torch.float32, ties=True)

    def out(vdt, idt):
        def f(x):
            v = torch.empty(0, dtype=vdt, device=x.device)
            i = torch.empty(0, dtype=idt, device=x.device)
            torch.cummax(x, 1, out=(v, i))
            return v, i
        return f

    check(out(torch.float32, torch.int64), x)
    check(out(torch.float64, torch.int64), x)
    check(out(torch.float32, torch.int32), x)


# ---------------------------------------------------------------- logcumsumexp


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_logcumsumexp(dtype):
    base = make((5, 7, 6), dtype)
    tol = {torch.float16: dict(rtol=2e-3, atol=2e-3), torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}.get(dtype, {})
    for vname, view in VIEWS.items():
        for dim in [0, 1, -1]:
            check(lambda x: torch.logcumsumexp(view(x), dim), base, msg=f"{vname} {dim}", **tol)


@pytest.mark.parametrize("n", LENGTHS)
def test_logcumsumexp_lengths(n):
    check(lambda x: x.logcumsumexp(1), make((2, n), torch.float32) * 30)
    check(lambda x: x.logcumsumexp(0), make((n, 2), torch.float64) * 300)


def test_logcumsumexp_extremes():
    nan, inf = float("nan"), float("inf")
    x = torch.tensor([[-inf, -inf, 0.0, -inf, 1000.0, -1000.0, 1000.0],
                      [inf, 1.0, inf, -inf, 2.0, 3.0, 4.0],
                      [1.0, nan, 2.0, 3.0, inf, -inf, 0.0],
                      [-1000.0, -1001.0, -1002.0, 88.0, 89.0, 700.0, 710.0]])
    check(lambda x: x.logcumsumexp(1), x)
    check(lambda x: x.double().logcumsumexp(1), x)
    long = torch.full((1, 200), -inf)
    long[0, 120] = 5.0
    check(lambda x: x.logcumsumexp(1), long)
    check(lambda x: x.logcumsumexp(0), torch.tensor(2.0))
    check(lambda x: x.logcumsumexp(0), torch.empty(0, 2))
    check(lambda x: x.logcumsumexp(0), torch.tensor([1, 2]))
    check(lambda x: torch.logcumsumexp(x, 0, out=torch.empty(0, device=x.device)), make((3, 2), torch.float32))
    check(lambda x: torch.logcumsumexp(x, 0, out=torch.empty(0, dtype=torch.float64, device=x.device)),
          make((3, 2), torch.float32))


# ---------------------------------------------------------------- gradients

FLIP = "aten::flip"
SCATTER_ADD = "aten::scatter_add"

GRAD_CASES = [
    ("cumsum", lambda x: x.cumsum(1), (FLIP,)),
    ("cumsum_long", lambda x: x.reshape(-1).cumsum(0), (FLIP,)),
    ("cumprod", lambda x: x.cumprod(1), (FLIP,)),
    ("cummax", lambda x: x.cummax(1)[0], (SCATTER_ADD,)),
    ("cummin", lambda x: x.cummin(0)[0], (SCATTER_ADD,)),
    ("logcumsumexp", lambda x: x.logcumsumexp(1), (FLIP,)),
]


@pytest.mark.parametrize("name,fn,needs", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradients(name, fn, needs):
    require_tiny_kernels(*needs)
    x = make((6, 30), torch.float32, seed=2)
    if name == "cumprod":
        x = near_one((6, 30), torch.float32, seed=2)
    check_grad(fn, x.requires_grad_(), msg=name)


def test_cumprod_gradient_with_zeros():
    require_tiny_kernels(FLIP, "aten::gather.out", "aten::masked_fill_.Scalar")
    x = make((4, 6), torch.float32, seed=8)
    x[1, 2] = x[2, 0] = x[2, 4] = 0
    check_grad(lambda x: x.cumprod(1), x.requires_grad_())


@pytest.mark.parametrize("name,fn,needs", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradcheck_float64(name, fn, needs):
    require_tiny_kernels(*needs)
    x = make((3, 5), torch.float64, seed=6)
    gradcheck(fn, x.requires_grad_())


# ---------------------------------------------------------------- kernel counts


@pytest.mark.skipif(not IS_TINY, reason="kernel counts are tiny-specific")
def test_kernel_counts():
    small = make((8, 30), torch.float32)
    assert kernels_of(lambda x: x.cumsum(1), small) == 1  # one masked triangular reduce
    assert kernels_of(lambda x: (x.cumsum(1) * 2).exp(), small) == 1  # fused with its consumer
    assert kernels_of(lambda x: x.cumsum(1), make((8, 32), torch.float32)) == 1  # still direct
    # blocked: block totals (125), their totals (8) and the direct scan of those,
    # then the combine of each level (the scheduler merges some of these; the
    # block totals read inside the next level's reduce get kernels of their own; the result's
    # cast reads the blocked value, so its kernel merges with the level before: 5 -> 4)
    assert kernels_of(lambda x: x.cumsum(1), make((8, 2000), torch.float32)) == 4
    assert kernels_of(lambda x: x.cumsum(0), make((40000,), torch.float32)) == 6
    # values, then the scan of hit positions (it reads the stored values across the row)
    assert kernels_of(lambda x: x.cummax(1), small) == 2  # the values are stored, the index scan reads them
