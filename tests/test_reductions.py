"""Reductions against the CPU: sum, mean, prod, nansum, nanmean, amax/amin, max/min (all,
.dim and out= forms), argmax/argmin, aminmax, any/all, count_nonzero, var/std (+ _mean),
norm / linalg.vector_norm / matrix_norm, logsumexp, equal.

Inputs cover every dtype, 0-d and empty tensors, keepdim, negative and repeated-free dim
lists, non-contiguous (permuted, strided, offset) and overlapping (expanded) views, NaN
and infinities, and ties (index reductions return the first occurrence, NaN counts as
the extreme).  Views are applied after the copy so the device sees real strided views.
"""

import math
import warnings

import pytest
import torch

from compare import check, check_grad, gradcheck, kernels_of, require_tiny_kernels
from conftest import ALL_DTYPES, FLOAT_DTYPES, INT_DTYPES, IS_TINY, to_dev

NUMERIC_DTYPES = [d for d in ALL_DTYPES if d != torch.bool]


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
        return torch.randint(0, 12, shape, generator=g, dtype=dtype)
    return torch.randint(-6, 7, shape, generator=g).to(dtype)


def with_specials(x):
    """x (floating) with NaN, +-inf sprinkled in."""
    x = x.clone()
    flat = x.view(-1)
    n = flat.numel()
    if n >= 8:
        flat[3] = float("nan")
        flat[n // 2] = float("inf")
        flat[n - 2] = float("-inf")
    return x


# views applied on both sides after the copy: (name, fn) for a (5, 7, 6) base
VIEWS = {
    "contig": lambda t: t,
    "permuted": lambda t: t.permute(2, 0, 1),
    "strided": lambda t: t[::2, 1:, ::3],
    "expanded": lambda t: t[:, :1, :].expand(5, 4, 6),
}
DIMS = [None, 0, -1, (0, 2), (-1, 1), ()]


def reduce_call(op, x, dim, keepdim, **kw):
    if dim is None:
        return op(x, **kw)
    return op(x, dim, keepdim=keepdim, **kw)


# ---------------------------------------------------------------- sum / prod / nansum / mean


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
@pytest.mark.parametrize("op", ["sum", "prod", "nansum"])
def test_sum_like(op, dtype):
    f = getattr(torch, op)
    base = make((5, 7, 6), dtype)
    tol = {}
    if op == "prod" and dtype.is_floating_point:
        base = (base.double() * 0.3 + 1).to(dtype)  # keep products finite
        # the CPU rounds every partial product to 16 bits; tiny rounds once
        tol = {torch.float16: dict(rtol=4e-3, atol=1e-3), torch.bfloat16: dict(rtol=3e-2, atol=1e-2)}.get(dtype, {})
    if op == "nansum":  # the CPU's nansum keeps its running sum in 16 bits; tiny in float32
        tol = {torch.float16: dict(rtol=4e-3, atol=2e-3), torch.bfloat16: dict(rtol=3e-2, atol=2e-2)}.get(dtype, {})
    for vname, view in VIEWS.items():
        for dim in DIMS:
            if op == "prod" and isinstance(dim, tuple):
                continue  # prod takes one dim
            for keepdim in (False, True):
                check(lambda x: reduce_call(f, view(x), dim, keepdim), base, msg=f"{op} {vname} {dim} {keepdim}",
                      **tol)


@pytest.mark.parametrize("op", ["sum", "prod", "nansum", "mean"])
def test_sum_like_dtype_arg(op):
    f = getattr(torch, op)
    for src in [torch.int32, torch.bool, torch.float16, torch.float32]:
        x = make((4, 5), src)
        for dt in [torch.float64, torch.float32, torch.int64, torch.float16]:
            if op == "mean" and not dt.is_floating_point:
                continue
            check(lambda x: f(x, dtype=dt), x, msg=f"{op} {src}->{dt}")
            check(lambda x: f(x, 1, dtype=dt), x, msg=f"{op} {src}->{dt} dim")


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_mean(dtype):
    base = make((5, 7, 6), dtype)
    for vname, view in VIEWS.items():
        for dim in DIMS:
            for keepdim in (False, True):
                check(lambda x: reduce_call(torch.mean, view(x), dim, keepdim), base, msg=f"{vname} {dim} {keepdim}")


def test_mean_rejects_integers():
    check(lambda x: x.mean(), make((3,), torch.int64))
    check(lambda x: x.mean(dtype=torch.int32), make((3,), torch.float32))


def test_nan_and_inf():
    x = with_specials(make((4, 8), torch.float32))
    for op in ["sum", "prod", "nansum", "mean", "amax", "amin", "logsumexp"]:
        f = getattr(torch, op)
        check(lambda x: f(x, 1), x, msg=op)
        check(lambda x: f(x, 0), x, msg=op)
    check(lambda x: torch.nanmean(x, 1), x)
    check(lambda x: x.max(1), x)
    check(lambda x: x.min(0), x)
    check(lambda x: x.argmax(), x)
    check(lambda x: x.argmin(1), x)
    check(lambda x: x.var(1), x)
    check(lambda x: x.aminmax(dim=1), x)


@pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0")
@pytest.mark.parametrize("op", ["sum", "prod", "mean", "nansum", "amax", "amin", "logsumexp", "var", "std",
                                "count_nonzero", "any", "all"])
def test_zero_dim_tensor(op):
    f = getattr(torch, op)
    x = torch.tensor(2.5)
    check(lambda x: f(x), x, msg=op)
    check(lambda x: f(x, 0), x, msg=op)
    check(lambda x: f(x, -1), x, msg=op)
    if op not in ("count_nonzero",):
        check(lambda x: f(x, 0, keepdim=True), x, msg=op)
    check(lambda x: f(x, 1), x, msg=op)  # out of range


@pytest.mark.parametrize("op", ["sum", "prod", "mean", "nansum", "amax", "amin", "logsumexp", "var", "std",
                                "count_nonzero", "any", "all", "max", "min", "argmax", "argmin"])
def test_empty(op):
    f = getattr(torch, op)
    x = torch.empty(0, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(lambda x: f(x), x, msg=op)
        check(lambda x: f(x, 0), x, msg=op)
        check(lambda x: f(x, 1), x, msg=op)
        if op not in ("count_nonzero",):
            check(lambda x: f(x, 1, keepdim=True), x, msg=op)
            check(lambda x: f(x, -1, keepdim=True), x, msg=op)


def test_dim_errors():
    x = make((2, 3), torch.float32)
    check(lambda x: x.sum(2), x)
    check(lambda x: x.sum((0, 0)), x)
    check(lambda x: x.amax((1, -1)), x)
    check(lambda x: x.max(5), x)
    check(lambda x: x.argmax(-3), x)


def test_large_sum_and_mean():
    # float32 accumulates in float32 (vectorized partial sums) where the CPU uses a
    # cascade sum: the bound is relative to sum(|x|) ~ 56000, not to the cancelled result
    x = make((3, 70000), torch.float32)
    check(lambda x: x.sum(1), x, rtol=1e-6, atol=2e-3)
    check(lambda x: x.mean(), x, rtol=1e-6, atol=1e-8)
    check(lambda x: x.sum(0), x)
    check(lambda x: x.double().sum(1), x)
    check(lambda x: x.half().sum(1), x, rtol=1e-3, atol=0.25)


# ---------------------------------------------------------------- out= variants


def test_out_variants():
    x = make((3, 4), torch.float32)
    for odt in [torch.float32, torch.float64, torch.int64, torch.float16]:
        check(lambda x: torch.sum(x, 0, out=torch.empty(0, dtype=odt, device=x.device)), x, msg=f"sum {odt}")
        check(lambda x: torch.prod(x, 1, out=torch.empty(0, dtype=odt, device=x.device)), x, msg=f"prod {odt}")
        check(lambda x: torch.mean(x, 0, out=torch.empty(0, dtype=odt, device=x.device)), x, msg=f"mean {odt}")
        check(lambda x: torch.nansum(x, 0, out=torch.empty(0, dtype=odt, device=x.device)), x, msg=f"nansum {odt}")
        check(lambda x: torch.amax(x, 0, out=torch.empty(0, dtype=odt, device=x.device)), x, msg=f"amax {odt}")
        check(lambda x: torch.max(x, out=torch.empty(0, dtype=odt, device=x.device)), x, msg=f"max {odt}")
        check(lambda x: torch.logsumexp(x, 0, out=torch.empty(0, dtype=odt, device=x.device)), x, msg=f"lse {odt}")
        check(lambda x: torch.var(x, 0, out=torch.empty(0, dtype=odt, device=x.device)), x, msg=f"var {odt}")
        check(lambda x: torch.std(x, 0, out=torch.empty(0, dtype=odt, device=x.device)), x, msg=f"std {odt}")
        check(lambda x: torch.norm(x, 2, 0, out=torch.empty(0, dtype=odt, device=x.device)), x, msg=f"norm {odt}")
        check(lambda x: torch.linalg.vector_norm(x, 1, 0, out=torch.empty(0, dtype=odt, device=x.device)), x)
        check(lambda x: torch.all(x, 0, out=torch.empty(0, dtype=odt, device=x.device)), x, msg=f"all {odt}")
        check(lambda x: torch.argmax(x, 0, out=torch.empty(0, dtype=odt, device=x.device)), x, msg=f"argmax {odt}")
    check(lambda x: torch.sum(x, 0, dtype=torch.float32, out=torch.empty(0, dtype=torch.float64, device=x.device)), x)
    check(lambda x: torch.sum(x, 0, dtype=torch.float64, out=torch.empty(0, dtype=torch.float64, device=x.device)), x)
    check(lambda x: torch.all(x, out=torch.empty(0, dtype=torch.uint8, device=x.device)), x)
    check(lambda x: torch.any(x, (0, 1), out=torch.empty(0, dtype=torch.bool, device=x.device)), x)
    check(lambda x: torch.sum(x, out=torch.empty(0, device=x.device)), x)
    check(lambda x: torch.prod(x, out=torch.empty(0, device=x.device)), x)


def test_out_into_view_and_overlap():
    x = make((4, 5), torch.float32)

    def into_column(x):
        out = torch.zeros(5, 3, device=x.device)
        torch.sum(x, 0, out=out[:, 1])
        return out

    check(into_column, x)

    def overlap(x):  # out aliases an input the reduction has read: lazy, so no clash
        y = x.clone()
        torch.mean(x, 0, out=y[0])
        return y

    check(overlap, x)


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
def test_values_indices_out():
    x = make((3, 4), torch.float32, ties=True)

    def dim_out(vdt, idt):
        def f(x):
            v = torch.empty(0, dtype=vdt, device=x.device)
            i = torch.empty(0, dtype=idt, device=x.device)
            r = torch.max(x, 1, out=(v, i))
            return (r[0], r[1], v, i)
        return f

    check(dim_out(torch.float32, torch.int64), x)
    check(dim_out(torch.float64, torch.int64), x)
    check(dim_out(torch.float32, torch.int32), x)

    def aminmax_out(x):
        mn = torch.empty(0, device=x.device)
        mx = torch.empty(0, device=x.device)
        torch.aminmax(x, dim=0, keepdim=True, out=(mn, mx))
        return mn, mx

    check(aminmax_out, x)

    def min_out(x):
        v = torch.empty(7, device=x.device)
        i = torch.empty(7, dtype=torch.int64, device=x.device)
        torch.min(x, 0, keepdim=True, out=(v, i))
        return v, i

    check(min_out, x)


# ---------------------------------------------------------------- amax / max / min / index reductions


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_amax_amin(dtype):
    base = make((5, 7, 6), dtype, ties=True)
    for vname, view in VIEWS.items():
        for dim in [0, -1, (0, 2), ()]:
            for keepdim in (False, True):
                check(lambda x: torch.amax(view(x), dim, keepdim), base, msg=f"amax {vname} {dim}")
                check(lambda x: torch.amin(view(x), dim, keepdim), base, msg=f"amin {vname} {dim}")
        check(lambda x: view(x).max(), base, msg=f"max {vname}")
        check(lambda x: view(x).min(), base, msg=f"min {vname}")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_max_min_dim(dtype):
    base = make((5, 7, 6), dtype, ties=True)
    for vname, view in VIEWS.items():
        for dim in [0, 1, -1]:
            for keepdim in (False, True):
                check(lambda x: torch.max(view(x), dim, keepdim), base, msg=f"max {vname} {dim} {keepdim}")
                check(lambda x: torch.min(view(x), dim, keepdim), base, msg=f"min {vname} {dim} {keepdim}")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_argmax_argmin(dtype):
    base = make((5, 7, 6), dtype, ties=True)
    for vname, view in VIEWS.items():
        for dim in [None, 0, 1, -1]:
            for keepdim in (False, True):
                check(lambda x: torch.argmax(view(x), dim, keepdim), base, msg=f"argmax {vname} {dim} {keepdim}")
                check(lambda x: torch.argmin(view(x), dim, keepdim), base, msg=f"argmin {vname} {dim} {keepdim}")


def test_index_first_occurrence_and_nan():
    x = torch.tensor([[1.0, 3.0, 3.0, 2.0], [float("nan"), 1.0, float("nan"), 5.0], [-1.0, -1.0, -1.0, -1.0],
                      [float("inf"), 2.0, float("inf"), float("-inf")]])
    for f in [torch.argmax, torch.argmin]:
        check(lambda x: f(x, 1), x)
        check(lambda x: f(x, 0), x)
        check(lambda x: f(x), x)
    check(lambda x: torch.max(x, 1), x)
    check(lambda x: torch.min(x, 1), x)
    check(lambda x: torch.max(x, 0), x)
    check(lambda x: x.t().argmax(0), x)  # non-contiguous
    ints = torch.tensor([[5, 1, 5, 0], [-2, -2, 7, 7]], dtype=torch.int8)
    check(lambda x: torch.max(x, 1), ints)
    check(lambda x: torch.min(x, 1), ints)
    check(lambda x: x.argmax(), ints)
    check(lambda x: x.argmin(), ints)


def test_index_reduction_large():
    x = make((3, 5000), torch.float32, ties=True)
    check(lambda x: x.argmax(1), x)
    check(lambda x: x.max(1), x)
    check(lambda x: x.argmin(), x)


def test_index_reduction_edge_cases():
    check(lambda x: x.max(0), torch.tensor(3.0))
    check(lambda x: x.argmax(0, keepdim=True), torch.tensor(3.0))
    check(lambda x: x.argmax(keepdim=True), make((2, 3), torch.float32))
    check(lambda x: x.max(0), torch.empty(0, 3))
    check(lambda x: x.max(1), torch.empty(0, 3))
    check(lambda x: x.argmax(1), torch.empty(0, 3))
    check(lambda x: x.argmax(), torch.empty(0, 3))
    check(lambda x: x.argmax(), torch.tensor([True, False]))
    check(lambda x: x.argmin(0), torch.tensor([True, False]))


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_aminmax(dtype):
    base = make((5, 7, 6), dtype, ties=True)
    for vname, view in VIEWS.items():
        check(lambda x: torch.aminmax(view(x)), base, msg=vname)
        for dim in [0, -1]:
            for keepdim in (False, True):
                check(lambda x: torch.aminmax(view(x), dim=dim, keepdim=keepdim), base, msg=f"{vname} {dim}")
    check(lambda x: torch.aminmax(x), torch.empty(0))
    check(lambda x: torch.aminmax(x, dim=0), torch.empty(0, 3))
    check(lambda x: torch.aminmax(x, dim=1), torch.empty(0, 3))
    check(lambda x: torch.aminmax(x), torch.tensor(1.0))


# ---------------------------------------------------------------- any / all / count_nonzero


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_any_all_count_nonzero(dtype):
    base = make((5, 7, 6), dtype)
    if dtype.is_floating_point:
        base = base.clone()
        base[base.abs() < 0.8] = 0
        base[0, 0, 0] = float("nan")
    for vname, view in VIEWS.items():
        for dim in [None, 0, -1, (0, 2)]:
            for keepdim in (False, True):
                if not isinstance(dim, tuple):
                    check(lambda x: reduce_call(torch.any, view(x), dim, keepdim), base, msg=f"any {vname} {dim}")
                    check(lambda x: reduce_call(torch.all, view(x), dim, keepdim), base, msg=f"all {vname} {dim}")
                else:
                    check(lambda x: torch.any(view(x), dim, keepdim), base, msg=f"any {vname} {dim}")
            check(lambda x: torch.count_nonzero(view(x), dim), base, msg=f"count_nonzero {vname} {dim}")
    check(lambda x: torch.count_nonzero(x, ()), base)
    check(lambda x: x.any(), torch.empty(0, dtype=dtype))
    check(lambda x: x.all(), torch.empty(0, dtype=dtype))


# ---------------------------------------------------------------- var / std


@pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0")
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_var_std(dtype):
    base = make((5, 7, 6), dtype)
    for vname, view in VIEWS.items():
        for dim in [None, 0, -1, (0, 2)]:
            for keepdim in (False, True):
                for corr in [None, 0, 1, 2.5]:
                    kw = {"correction": corr, "keepdim": keepdim}
                    for f in [torch.var, torch.std, torch.var_mean, torch.std_mean]:
                        check(lambda x: f(view(x), dim, **kw), base, msg=f"{f.__name__} {vname} {dim} {kw}")
    check(lambda x: torch.var(x, 1, unbiased=False), base)
    check(lambda x: torch.std(x, unbiased=True), base)
    check(lambda x: x.var(), base)


@pytest.mark.filterwarnings("ignore:.*degrees of freedom is <= 0")
def test_var_edge_cases():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(lambda x: x.var(0), torch.ones(1, 3))  # dof 0 -> nan
        check(lambda x: x.var(correction=3), torch.tensor([1.0, 2.0]))  # dof < 0 -> inf
        check(lambda x: x.std_mean(0), torch.empty(0, 3))
        check(lambda x: torch.var_mean(x, 1), torch.empty(0, 3))
    check(lambda x: x.var(), torch.tensor([1, 2]))
    check(lambda x: x.var(), torch.tensor(3.0))
    # a large offset: the two-pass form stays accurate
    x = torch.randn(4, 1000, dtype=torch.float64) * 1e-3 + 1e4
    check(lambda x: x.float().var(1), x)
    check(lambda x: x.var(1), x)


def test_var_warns_like_cpu():
    x = torch.ones(1, 3)
    with pytest.warns(UserWarning, match="degrees of freedom is <= 0"):
        to_dev(x).var(0).cpu()


# ---------------------------------------------------------------- norms


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_vector_norm(dtype):
    base = make((5, 7, 6), dtype)
    base = base.clone()
    base[0, 0] = 0
    for vname, view in VIEWS.items():
        for ord in [0, 1, 2, 3, 0.5, -1, -2.5, float("inf"), float("-inf")]:
            for dim in [None, 0, (0, -1)]:
                check(lambda x: torch.linalg.vector_norm(view(x), ord, dim), base, msg=f"{vname} {ord} {dim}")
        check(lambda x: torch.linalg.vector_norm(view(x), 2, -1, keepdim=True), base, msg=vname)
    check(lambda x: torch.linalg.vector_norm(x, 2, dtype=torch.float64), base)
    check(lambda x: torch.linalg.vector_norm(x, 2, dtype=torch.float16), base)


def test_norm_overloads():
    x = make((4, 6), torch.float32)
    check(lambda x: x.norm(), x)
    check(lambda x: x.norm(1), x)
    check(lambda x: x.norm(float("inf")), x)
    check(lambda x: x.norm(dim=1), x)
    check(lambda x: x.norm(p=3, dim=(0, 1), keepdim=True), x)
    check(lambda x: torch.norm(x, 2, 0, dtype=torch.float64), x)
    check(lambda x: torch.norm(x, None, 0), x)
    check(lambda x: torch.linalg.norm(x), x)
    check(lambda x: torch.linalg.norm(x, dim=1), x)
    check(lambda x: torch.linalg.norm(x, "fro"), x)
    check(lambda x: torch.linalg.norm(x, 1), x)
    check(lambda x: torch.linalg.norm(x, float("-inf")), x)
    check(lambda x: torch.linalg.matrix_norm(x), x)
    check(lambda x: torch.linalg.matrix_norm(x, 1), x)
    check(lambda x: torch.linalg.matrix_norm(x, float("inf")), x)
    check(lambda x: torch.linalg.matrix_norm(x, -1, keepdim=True), x)
    check(lambda x: torch.linalg.vector_norm(x, float("nan")), x)


def test_norm_errors_and_empty():
    check(lambda x: x.norm(), torch.tensor([1, 2]))
    check(lambda x: torch.linalg.vector_norm(x), torch.tensor([True]))
    check(lambda x: torch.linalg.vector_norm(x, dtype=torch.float16), torch.ones(3))
    check(lambda x: torch.linalg.vector_norm(x, dtype=torch.float16), torch.ones(3, dtype=torch.bfloat16))
    check(lambda x: torch.linalg.vector_norm(x, float("inf")), torch.empty(0))
    check(lambda x: torch.linalg.vector_norm(x, float("-inf"), 0), torch.empty(0, 3))
    check(lambda x: torch.linalg.vector_norm(x, -1, 1), torch.empty(0, 3))
    check(lambda x: torch.linalg.vector_norm(x, -1.5), torch.empty(0, 3))
    check(lambda x: torch.linalg.vector_norm(x, float("inf"), 1), torch.empty(0, 3))
    for ord in [0, 1, 2, 3]:
        check(lambda x: torch.linalg.vector_norm(x, ord), torch.empty(0, 3))
        check(lambda x: torch.linalg.vector_norm(x, ord, 0), torch.empty(0, 3))
    check(lambda x: torch.linalg.vector_norm(x), torch.tensor(-3.0))
    check(lambda x: torch.linalg.vector_norm(with_specials(x), 2, 1), make((3, 9), torch.float32))
    check(lambda x: torch.linalg.vector_norm(with_specials(x), float("inf"), 1), make((3, 9), torch.float32))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_renorm(dtype):
    x = make((4, 5, 3), dtype) * 2
    for p, dim, maxnorm in [(2, 0, 1.0), (1, 1, 3.0), (3, -1, 0.5), (2.5, 2, 100.0), (float("inf"), 0, 1.0), (2, 1, 0)]:
        check(lambda x: torch.renorm(x, p, dim, maxnorm), x, msg=f"{p} {dim} {maxnorm}")
    check(lambda x: x.clone().renorm_(2, 0, 1.0), x)
    check(lambda x: x.transpose(0, 2).renorm(2, 1, 1.0), x)
    check(lambda x: torch.renorm(x, 2, 0, 1.0, out=torch.empty(0, dtype=dtype, device=x.device)), x)


def test_renorm_errors():
    x = make((3, 4), torch.float32)
    check(lambda x: x.renorm(0, 0, 1.0), x)
    check(lambda x: x.renorm(2, 0, -1.0), x)
    check(lambda x: x[0].renorm(2, 0, 1.0), x)
    check(lambda x: x.renorm(2, 2, 1.0), x)
    check(lambda x: torch.renorm(x, 2, 0, 1.0, out=torch.empty(0, dtype=torch.float64, device=x.device)), x)


# ---------------------------------------------------------------- logsumexp / nanmean / equal


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_logsumexp(dtype):
    base = make((5, 7, 6), dtype)
    # the CPU rounds exp, sum and log to 16 bits one by one; tiny computes in float32
    tol = {torch.float16: dict(rtol=2e-3, atol=1e-3), torch.bfloat16: dict(rtol=2e-2, atol=1e-2)}.get(dtype, {})
    for vname, view in VIEWS.items():
        for dim in [0, -1, (0, 2)]:
            for keepdim in (False, True):
                check(lambda x: torch.logsumexp(view(x), dim, keepdim), base, msg=f"{vname} {dim} {keepdim}", **tol)


def test_logsumexp_extremes():
    x = torch.tensor([[1000.0, 1000.0], [-1000.0, -1001.0], [float("-inf"), float("-inf")],
                      [float("inf"), 1.0], [float("inf"), float("inf")], [float("nan"), 1.0]])
    check(lambda x: torch.logsumexp(x, 1), x)
    check(lambda x: torch.logsumexp(x, 0), torch.empty(0, 2))


def test_nanmean():
    x = with_specials(make((4, 9), torch.float32))
    x[1] = float("nan")
    check(lambda x: torch.nanmean(x), x)
    check(lambda x: torch.nanmean(x, 1), x)
    check(lambda x: torch.nanmean(x, 0, keepdim=True), x)
    check(lambda x: torch.nanmean(x), torch.tensor([1, 2]))


def test_equal():
    a = make((3, 4), torch.float32)
    check(lambda a, b: torch.equal(a, b), a, a.clone())
    check(lambda a, b: torch.equal(a, b), a, a + 1)
    check(lambda a, b: torch.equal(a, b), a, a[:2])
    check(lambda a, b: torch.equal(a, b), a, a.double())
    check(lambda a, b: torch.equal(a.t(), b.t()), a, a.clone())
    check(lambda a, b: torch.equal(a, b), torch.empty(0), torch.empty(0))
    nan = torch.tensor([float("nan")])
    check(lambda a, b: torch.equal(a, b), nan, nan.clone())


# ---------------------------------------------------------------- gradients


MASKED_FILL_S = "aten::masked_fill_.Scalar"
MASKED_FILL_T = "aten::masked_fill_.Tensor"
SCATTER = "aten::scatter.src_out"
SGN = "aten::sgn.out"

# (name, fn, ops the backward formula needs from other op families)
GRAD_CASES = [
    ("sum", lambda x: x.sum(1), ()),
    ("sum_all", lambda x: x.sum(), ()),
    ("mean", lambda x: x.mean((0, 2), keepdim=True), ()),
    ("prod", lambda x: x.prod(1), ()),
    ("prod_all", lambda x: x.prod(), ()),
    ("amax", lambda x: x.amax(1), ()),
    ("amin", lambda x: x.amin((0, 1)), ()),
    ("max_all", lambda x: x.max(), (MASKED_FILL_T,)),
    ("min_all", lambda x: x.min(), (MASKED_FILL_T,)),
    ("max_dim", lambda x: x.max(1)[0], (SCATTER,)),
    ("min_dim", lambda x: x.min(-1, keepdim=True)[0], (SCATTER,)),
    ("var", lambda x: x.var(1), ()),
    ("std", lambda x: x.std(0, correction=0), (MASKED_FILL_S,)),
    ("var_mean", lambda x: torch.var_mean(x, 1)[0] + torch.var_mean(x, 1)[1], ()),
    ("std_mean", lambda x: torch.std_mean(x, -1)[0], (MASKED_FILL_S,)),
    ("norm2", lambda x: x.norm(dim=1), (MASKED_FILL_S,)),
    ("norm1", lambda x: torch.linalg.vector_norm(x, 1, -1), (SGN,)),
    ("norm3", lambda x: torch.linalg.vector_norm(x, 3, 0), (MASKED_FILL_S,)),
    ("norm_inf", lambda x: torch.linalg.vector_norm(x, float("inf"), 1), (SGN, MASKED_FILL_S)),
    ("logsumexp", lambda x: x.logsumexp(1), ()),
    ("nansum", lambda x: x.nansum(1), ()),
    ("nanmean", lambda x: x.nanmean(0), ()),
    ("renorm", lambda x: x.renorm(2, 1, 1.0), (MASKED_FILL_S,)),
]


@pytest.mark.parametrize("name,fn,needs", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradients(name, fn, needs):
    require_tiny_kernels(*needs)
    x = make((3, 5, 4), torch.float32, seed=3)
    if name.startswith("prod"):
        x = x * 0.5 + 1
    check_grad(fn, x.requires_grad_(), msg=name)


@pytest.mark.parametrize("dim,needs", [(None, ("aten::cat.out",)), (1, ("aten::cat.out",))])
def test_prod_gradient_with_zeros(dim, needs):
    require_tiny_kernels(*needs)
    x = make((4, 6), torch.float32, seed=8)
    x[1, 2] = x[2, 0] = x[2, 4] = 0
    if dim is None:
        x[1:] = 1 + x[1:] * 0.1
        x[0, 1:] = 1
        x[0, 0] = 0  # exactly one zero: its gradient is the product of the others
    check_grad(lambda x: x.prod() if dim is None else x.prod(dim), x.requires_grad_())


def test_gradients_noncontiguous():
    x = make((5, 4), torch.float32, seed=4)
    check_grad(lambda x: x.t().sum(0) * 2, x.requires_grad_())
    check_grad(lambda x: x.t().amax(1), x.requires_grad_())
    check_grad(lambda x: x[::2].var(0), x.requires_grad_())


GRADCHECK_CASES = [
    ("sum", lambda x: x.sum(1), ()),
    ("mean", lambda x: x.mean(0), ()),
    ("prod", lambda x: x.prod(1), ()),
    ("amax", lambda x: x.amax(1), ()),
    ("max_dim", lambda x: x.max(0)[0], (SCATTER,)),
    ("var", lambda x: x.var(1), ()),
    ("std", lambda x: x.std(0), (MASKED_FILL_S,)),
    ("norm", lambda x: x.norm(dim=1), (MASKED_FILL_S,)),
    ("logsumexp", lambda x: x.logsumexp(1), ()),
]


@pytest.mark.parametrize("name,fn,needs", GRADCHECK_CASES, ids=[c[0] for c in GRADCHECK_CASES])
def test_gradcheck_float64(name, fn, needs):
    require_tiny_kernels(*needs)
    x = make((3, 4), torch.float64, seed=5) + 0.1
    gradcheck(fn, x.requires_grad_())


# ---------------------------------------------------------------- kernel counts


@pytest.mark.skipif(not IS_TINY, reason="kernel counts are tiny-specific")
def test_kernel_counts():
    x = make((64, 32), torch.float32)
    assert kernels_of(lambda x: x.sum(0), x) == 1
    assert kernels_of(lambda x: x.sum(), x) == 1
    assert kernels_of(lambda x: (x * 2 + 1).sum(1), x) == 1
    assert kernels_of(lambda x: x.aminmax(dim=0), x) == 1  # both reduces share one kernel
    # the extreme is hoisted out of the first-index reduce, and max.dim's two
    # outputs share one kernel
    assert kernels_of(lambda x: x.argmax(), x) == 1
    assert kernels_of(lambda x: x.argmin(1), x) == 1
    assert kernels_of(lambda x: x.max(1), x) == 1
    # var: the mean is hoisted into the squared-deviation reduce; var_mean's mean
    # output comes from the same kernel (the goal)
    assert kernels_of(lambda x: x.var(0), x) == 1
    assert kernels_of(lambda x: torch.var_mean(x, 0), x) == 1
    assert kernels_of(lambda x: torch.std_mean(x, 1), x) == 1
    assert kernels_of(lambda x: x.logsumexp(1), x) == 1


@pytest.mark.skipif(not IS_TINY, reason="lazy evaluation is tiny-specific")
def test_index_reduction_needs_no_host_copy():
    from torch_tiny.debug import count_kernels

    x = to_dev(make((16, 16), torch.float32))
    torch.tiny.synchronize()
    with count_kernels() as c:
        torch.max(x, 1)
        x.argmin()
    assert c.copies == 0


# ---------------------------------------------------------------- hash_tensor
def _hash_inputs():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4, 5, 6, generator=g)
    x[0, 0, :5] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0])
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int32, torch.int8, torch.uint8, torch.bool], ids=str)
def test_hash_tensor(dtype):
    x = _hash_inputs()
    x = (x * 1000).to(dtype) if not dtype.is_floating_point and dtype != torch.bool else x.to(dtype) \
        if dtype != torch.bool else x > 0
    for kw in ({}, dict(dim=0), dict(dim=-1, keepdim=True), dict(dim=(0, 2)), dict(dim=(-1, 1), keepdim=True)):
        check(lambda t: torch.hash_tensor(t, **kw), x, msg=f"hash_tensor {dtype} {kw}")
    check(lambda t: torch.hash_tensor(t.permute(2, 0, 1)[1::2], dim=1), x, msg="strided view")
    check(lambda t: torch.hash_tensor(t[:1].expand(3, 5, 6), dim=0), x, msg="expanded view")
    check(torch.hash_tensor, x[0, 0, 0], msg="0-d")


def test_hash_tensor_edges_and_errors():
    x = _hash_inputs()
    check(lambda t: torch.hash_tensor(t, dim=1), torch.empty(0, 3), msg="empty, non-empty dim")
    check(lambda t: torch.hash_tensor(t, dim=0), torch.empty(0, 3), msg="empty reduced dim")
    check(torch.hash_tensor, torch.empty(0, 3), msg="empty, every dim")
    check(lambda t: torch.hash_tensor(t, mode=1), x, msg="mode")
    check(lambda t: torch.hash_tensor(t, dim=(0, 0)), x, msg="repeated dim")
    check(lambda t: torch.hash_tensor(t, dim=5), x, msg="dim out of range")
    check(lambda t, o: torch.hash_tensor(t, out=o), x, torch.empty(0, dtype=torch.int64), msg="out dtype")
    check(lambda t, o: (torch.hash_tensor(t, dim=2, out=o), o)[1], x, torch.empty(0, dtype=torch.uint64),
          msg="out resized")
    # large: the full XOR reduction splits across threads
    big = torch.randn(1 << 18, generator=torch.Generator().manual_seed(2))
    check(torch.hash_tensor, big, msg="large")
    check(torch.hash_tensor, torch.tensor([1, 2 ** 63 + 5, 7], dtype=torch.uint64), msg="uint64: the CPU's error")
    check(torch.hash_tensor, torch.ones(3, dtype=torch.complex64), msg="complex: the CPU's error")
