"""Unary pointwise ops on the device vs the CPU: every float dtype on edge values, integer and
bool inputs (promotion or the CPU's error), in-place and out= variants, layouts (0-d, empty,
non-contiguous, overlapping), op-specific arguments, accuracy of erfinv, kernel counts."""

import math

import pytest
import torch

from conftest import FLOAT_DTYPES, INT_DTYPES, IS_TINY, assert_same, requires_tiny, sync, to_dev
from pointwise_util import INF, NAN, float_values, int_values, run_both, ulp_distance

UNARY = {
    "abs": torch.abs, "neg": torch.neg, "sign": torch.sign, "sgn": torch.sgn, "exp": torch.exp,
    "exp2": torch.exp2, "expm1": torch.expm1, "log": torch.log, "log2": torch.log2, "log10": torch.log10,
    "log1p": torch.log1p, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "reciprocal": torch.reciprocal,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "asin": torch.asin, "acos": torch.acos,
    "atan": torch.atan, "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh, "asinh": torch.asinh,
    "acosh": torch.acosh, "atanh": torch.atanh, "sigmoid": torch.sigmoid, "logit": torch.logit,
    "erf": torch.erf, "erfc": torch.erfc, "erfinv": torch.erfinv, "floor": torch.floor, "ceil": torch.ceil,
    "round": torch.round, "trunc": torch.trunc, "frac": torch.frac, "isnan": torch.isnan,
    "isinf": torch.isinf, "isfinite": torch.isfinite, "isposinf": torch.isposinf,
    "isneginf": torch.isneginf, "signbit": torch.signbit, "nan_to_num": torch.nan_to_num,
    "sinc": torch.sinc, "angle": torch.angle, "entr": torch.special.entr, "deg2rad": torch.deg2rad,
    "rad2deg": torch.rad2deg, "square": torch.square, "positive": torch.positive,
    "logical_not": torch.logical_not, "bitwise_not": torch.bitwise_not, "fix": torch.fix,
    "ndtr": torch.special.ndtr, "expit": torch.special.expit, "relu": torch.relu,
    "lgamma": torch.lgamma, "digamma": torch.digamma, "i0": torch.i0, "i0e": torch.special.i0e,
    "i1": torch.special.i1, "i1e": torch.special.i1e, "ndtri": torch.special.ndtri,
}
# ops whose CPU kernels use vectorized approximations a few ulp away from libm's on some inputs
LOOSE = {"lgamma": 1e-5, "digamma": 1e-5, "i0": 1e-5, "i1": 1e-5, "ndtri": 1e-5, "tan": 1e-5, "sinh": 1e-5, "cosh": 1e-5, "asinh": 1e-5, "acosh": 1e-5, "atanh": 1e-5,
         "erfinv": 1e-5, "expm1": 1e-5, "erfc": 1e-5, "sinc": 1e-5}


def _tols(name, dtype):
    if dtype in (torch.float32,) and name in LOOSE:
        return dict(rtol=LOOSE[name], atol=1e-6)
    return {}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
@pytest.mark.parametrize("name", list(UNARY))
def test_float_inputs(name, dtype):
    x = float_values(dtype)
    run_both(UNARY[name], x, msg=f"{name} {dtype}", **_tols(name, dtype))


@pytest.mark.parametrize("dtype", INT_DTYPES + [torch.bool], ids=str)
@pytest.mark.parametrize("name", list(UNARY))
def test_integer_and_bool_inputs(name, dtype):
    # promotion to float, exact integer results, or the CPU's "not implemented for" error
    run_both(UNARY[name], int_values(dtype), msg=f"{name} {dtype}", **_tols(name, torch.float32))


INPLACE = ["abs", "neg", "sign", "sgn", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt",
           "rsqrt", "reciprocal", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh",
           "acosh", "atanh", "sigmoid", "logit", "erf", "erfc", "erfinv", "floor", "ceil", "round", "trunc",
           "frac", "nan_to_num", "sinc", "deg2rad", "rad2deg", "square", "logical_not", "bitwise_not", "fix",
           "relu"]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
@pytest.mark.parametrize("name", INPLACE)
def test_inplace(name, dtype):
    x = float_values(dtype) if dtype.is_floating_point else int_values(dtype)
    method = getattr(torch.Tensor, name + "_")
    # int64 tensors cannot hold a float result: the CPU's error is the expected outcome
    run_both(lambda t: method(t.clone()), x, msg=name, **_tols(name, torch.float32))


@pytest.mark.parametrize("name", ["sin", "exp", "abs", "floor", "sigmoid", "erfinv", "isnan", "signbit",
                                  "logical_not", "nan_to_num", "frac", "isposinf", "angle", "entr"])
def test_out_variants(name):
    fn = UNARY[name]
    x = float_values(torch.float32).reshape(-1, 1)
    expected = fn(x)
    # right size, wrong size (resized), and another dtype where the result can be cast
    for out in (torch.empty_like(expected), torch.empty(0, dtype=expected.dtype),
                torch.empty(3, 5, dtype=expected.dtype)):
        run_both(lambda t, o: (fn(t, out=o), o)[1], x, out, msg=name, **_tols(name, torch.float32))
    # a wider out= gets the float32 result (or the CPU's dtype error): float32 tolerances
    wide = torch.float64 if expected.dtype.is_floating_point else torch.int64
    run_both(lambda t, o: (fn(t, out=o), o)[1], x, torch.empty(0, dtype=wide), msg=f"{name} -> {wide}",
             rtol=1.3e-6, atol=1e-5)
    # a float result into an integer out= is the CPU's error
    if expected.dtype.is_floating_point:
        run_both(lambda t, o: fn(t, out=o), x, torch.empty(0, dtype=torch.int64), msg=f"{name} -> int64")


@pytest.mark.parametrize("name", ["exp", "abs", "sigmoid", "round", "isinf", "logical_not", "erfinv"])
@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.tensor(0.25),  # 0-d
        lambda: torch.empty(0, 3),  # empty
        lambda: torch.randn(5, 7).t(),  # transposed
        lambda: torch.randn(6, 8)[1::2, ::3],  # strided slice with an offset
        lambda: torch.randn(1, 4).expand(3, 4),  # overlapping (stride 0) view
        lambda: torch.randn(1 << 18),  # large-ish
    ],
    ids=["0d", "empty", "transposed", "strided", "expanded", "large"],
)
def test_layouts(name, make):
    x = make().clamp(-0.99, 0.99) if name == "erfinv" else make()
    run_both(UNARY[name], x, msg=name, **_tols(name, torch.float32))


def test_inplace_on_views_and_overlap():
    base = torch.randn(4, 6)
    # writing through a strided view changes the base
    run_both(lambda b: (b[:, ::2].exp_(), b)[1], base.clone(), msg="view exp_")
    run_both(lambda b: (b.t().sigmoid_(), b)[1], base.clone(), msg="transposed sigmoid_")
    # an in-place op on an overlapping view is the CPU's error
    run_both(lambda b: b[:1].expand(3, 6).sin_(), base.clone(), msg="expanded sin_")


def test_round_decimals():
    x = float_values(torch.float32) * 1.2345
    for d in (-3, -1, 0, 1, 2, 3, 5):
        run_both(lambda t: torch.round(t, decimals=d), x, msg=f"decimals={d}")
        run_both(lambda t: t.clone().round_(decimals=d), x, msg=f"decimals={d} inplace")
    for dt in (torch.float64, torch.float16, torch.bfloat16):
        run_both(lambda t: torch.round(t, decimals=2), float_values(dt), msg=str(dt))
    # half-to-even like the CPU
    run_both(torch.round, torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5]))
    run_both(lambda t: torch.round(t, decimals=1), torch.tensor([0.25, 0.35, -0.25]))
    run_both(lambda t: torch.round(t, decimals=2), int_values(torch.int64), msg="int decimals")


def test_logit_eps():
    x = torch.tensor([-0.5, 0.0, 1e-8, 0.1, 0.5, 0.9, 1.0 - 1e-7, 1.0, 1.5, NAN])
    for eps in (None, 0.0, 1e-6, 0.2, -1.0):
        run_both(lambda t: torch.logit(t, eps=eps), x, msg=f"eps={eps}")
        run_both(lambda t: torch.logit(t, eps=eps), x.double(), msg=f"eps={eps} f64")
    run_both(lambda t: torch.logit(t, 0.1), torch.arange(3), msg="int")


def test_nan_to_num_arguments():
    for dt in FLOAT_DTYPES:
        x = float_values(dt)
        run_both(torch.nan_to_num, x, msg=str(dt))
        run_both(lambda t: torch.nan_to_num(t, nan=1.5, posinf=100.0, neginf=-7.0), x, msg=str(dt))
        run_both(lambda t: torch.nan_to_num(t, posinf=1e300), x, msg=f"{dt} overflowing posinf")
        run_both(lambda t: t.clone().nan_to_num_(nan=-1.0), x, msg=f"{dt} inplace")
    run_both(lambda t: torch.nan_to_num(t, nan=3.0), int_values(torch.int32), msg="int: identity")


def test_erfinv_accuracy():
    """Within a few ulp of the CPU over the whole domain, exact at the ends."""
    x = torch.cat([torch.linspace(-1, 1, 20001), torch.tensor([-1.0, 1.0, 1e-30, -1e-30, 0.0, -0.0, 1.5, NAN]),
                   1 - torch.logspace(-7, -1, 200), -1 + torch.logspace(-7, -1, 200)])
    expected = torch.erfinv(x)
    actual = torch.erfinv(to_dev(x)).cpu()
    assert torch.equal(actual.isnan(), expected.isnan())
    assert torch.equal(actual.isinf(), expected.isinf())
    finite = expected.isfinite()
    assert ulp_distance(actual[finite], expected[finite]).max() <= 4
    # float64 against the float64 CPU result
    xd = x.double()
    torch.testing.assert_close(torch.erfinv(to_dev(xd)).cpu(), torch.erfinv(xd), equal_nan=True,
                               rtol=1e-15, atol=1e-300)


def test_exact_powers_of_two_and_ten():
    k = torch.arange(-126, 128, dtype=torch.float32)
    run_both(torch.exp2, k, rtol=0, atol=0, msg="exp2 of integers")
    run_both(torch.log2, torch.exp2(k), rtol=0, atol=0, msg="log2 of powers of two")
    run_both(torch.log10, torch.tensor([10.0 ** i for i in range(-30, 31)]), rtol=0, atol=0, msg="log10")


def test_tanh_and_exp2_across_magnitudes():
    # float32 tanh and exp2 go through double exp (vectorized): within two float ulps of the
    # CPU from 1e-30 to the saturation and underflow ends, signed zeros, infinities, NaN
    mags = torch.logspace(-30, 2.1, 4000)
    x = torch.cat([mags, -mags, torch.tensor([0.0, -0.0, 1e-2, -1e-2, 0.00999, 9.0, 20.0, 88.0,
                                              float("inf"), -float("inf"), float("nan")])])
    run_both(torch.tanh, x, rtol=2.5e-7, atol=1e-45, msg="tanh")
    e = torch.cat([torch.linspace(-160, 130, 20000), torch.tensor([-149.0, -126.5, 127.99, 128.0, float("nan")])])
    run_both(torch.exp2, e, rtol=2.5e-7, atol=1e-45, msg="exp2")


def test_special_functions_over_their_domains():
    x = torch.cat([torch.linspace(-12, 12, 4801), torch.tensor([-0.0, 1e-30, -1e-30, 1e20, -1e20, -3.0, -2.5, 0.5])])
    p = torch.cat([torch.linspace(0, 1, 4001), torch.tensor([1e-30, 1e-10, 1e-5, 1 - 1e-7, 0.135, 0.865])])
    for dt in (torch.float32, torch.float64):
        tol = dict(rtol=1e-5, atol=1e-6) if dt == torch.float32 else {}
        for fn in (torch.lgamma, torch.digamma, torch.i0, torch.special.i0e, torch.special.i1, torch.special.i1e):
            run_both(fn, x.to(dt), msg=f"{fn} {dt}", **tol)
        run_both(torch.special.ndtri, p.to(dt), msg=f"ndtri {dt}", **tol)
        # mvlgamma is built on lgamma
        run_both(lambda t: torch.mvlgamma(t, 3), (x.abs() + 1.5).to(dt), msg=f"mvlgamma {dt}", **tol)
    run_both(torch.special.ndtri, p.half(), msg="ndtri half: the CPU's error")


BESSEL = ["bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1", "modified_bessel_i0", "modified_bessel_i1",
          "modified_bessel_k0", "modified_bessel_k1", "scaled_modified_bessel_k0", "scaled_modified_bessel_k1",
          "spherical_bessel_j0", "airy_ai"]  # airy_ai: an Airy (Bessel-type) function, same ranges


@pytest.mark.parametrize("name", BESSEL)
def test_bessel_functions(name):
    fn = getattr(torch.special, name)
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.linspace(-30, 30, 3001), torch.rand(200, generator=g) * 18 - 9,
                   torch.tensor([0.0, -0.0, INF, -INF, NAN, 1e-30, 1e-6, 1e20, 2.0, 5.0, 8.0, -8.0, 0.5, 700.0])])
    run_both(fn, x, msg=f"{name} float32", rtol=1e-5, atol=1e-6)
    run_both(fn, x.double(), msg=f"{name} float64", rtol=1e-10, atol=1e-12)
    run_both(fn, torch.arange(-3, 4), msg=f"{name} int64 -> float32", rtol=1e-5, atol=1e-6)
    run_both(fn, x.half(), msg=f"{name} half: the CPU's error")


def test_polygamma():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.linspace(-12, 12, 1201), torch.rand(300, generator=g) * 18 - 9,
                   torch.tensor([0.0, -0.0, INF, -INF, NAN, 1e-30, 1e20, -3.0, -2.5, -60.5, -100.25, -1000.7, 60.3])])
    for n in range(0, 6):
        for dt in (torch.float32, torch.float64):
            # far negative x: tiny uses the reflection formula where ATen sums |x| terms (same value)
            tol = dict(rtol=1e-4, atol=1e-6) if dt == torch.float32 else dict(rtol=1e-8, atol=1e-12)
            run_both(lambda t: torch.polygamma(n, t), x.to(dt), msg=f"polygamma({n}) {dt}", **tol)
            run_both(lambda t: torch.special.polygamma(n, t), x.to(dt), msg=f"special.polygamma({n}) {dt}", **tol)
    run_both(lambda t: torch.polygamma(2, t), torch.arange(-3, 4), msg="int input")
    run_both(lambda t: t.clone().polygamma_(1), x, msg="in-place", rtol=1e-5, atol=1e-6)
    run_both(lambda t: torch.polygamma(-1, t), x, msg="negative n error")
    # gradients go through polygamma(n + 1)
    xd = (torch.rand(20, generator=g, dtype=torch.float64) * 5 + 0.1)
    for fn in (torch.digamma, lambda t: torch.polygamma(2, t)):
        xc = xd.clone().requires_grad_()
        (gc,) = torch.autograd.grad(fn(xc).sum(), xc)
        xt = to_dev(xd).requires_grad_()
        (gt,) = torch.autograd.grad(fn(xt).sum(), xt)
        assert_same(gt, gc, rtol=1e-9, atol=1e-12)


def test_erfcx_and_log_ndtr():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.linspace(-30, 60, 1801), torch.randn(200, generator=g) * 5,
                   torch.tensor([0.0, -0.0, INF, -INF, NAN, 1e-30, -1e-30, 1e10, 5e7, -9.3, -9.4, 26.0, -1.0])])
    for fn in (torch.special.erfcx, torch.special.log_ndtr):
        # float32: ATen computes in float (its own few-ulp error), tiny in double and rounds once
        run_both(fn, x, msg=f"{fn.__name__} float32", rtol=2e-6, atol=1e-6)
        run_both(fn, x.double(), msg=f"{fn.__name__} float64", rtol=1e-12, atol=1e-300)
        run_both(fn, torch.arange(-5, 6), msg=f"{fn.__name__} int64 -> float32", rtol=2e-6, atol=1e-6)
        run_both(fn, torch.tensor([True, False]), msg=f"{fn.__name__} bool -> float32")
        run_both(fn, x.half(), msg=f"{fn.__name__} half: the CPU's error")
        run_both(fn, x[:2013].reshape(-1, 3)[::2].t(), msg=f"{fn.__name__} non-contiguous", rtol=2e-6, atol=1e-6)
        run_both(fn, torch.tensor(-2.5), msg=f"{fn.__name__} 0-d")
        run_both(fn, torch.empty(0, 4), msg=f"{fn.__name__} empty")
        run_both(lambda t, o: (fn(t, out=o), o)[1], x, torch.empty(0), msg=f"{fn.__name__} out=", rtol=2e-6, atol=1e-6)
        xd = (torch.randn(30, generator=g, dtype=torch.float64) * 3)
        xc = xd.clone().requires_grad_()
        (gc,) = torch.autograd.grad(fn(xc).sum(), xc)
        xt = to_dev(xd).requires_grad_()
        (gt,) = torch.autograd.grad(fn(xt).sum(), xt)
        assert_same(gt, gc, rtol=1e-9, atol=1e-12)


def test_erfc_tail_keeps_precision():
    x = torch.linspace(0, 9, 91)
    got = torch.erfc(to_dev(x)).cpu()
    torch.testing.assert_close(got, torch.erfc(x), rtol=1e-5, atol=0)
    assert (got[x < 9] > 0).all()  # not 1 - erf(x), which underflows to 0 early


def test_frexp():
    x = torch.tensor([0.0, -0.0, 1e-40, -3e-42, 1.0, 0.5, 3.0, -5.5, 1e30, INF, -INF, NAN, 2.0 ** -126])
    for dt in FLOAT_DTYPES:
        run_both(lambda t: tuple(torch.frexp(t)), x.to(dt), msg=str(dt))
    run_both(lambda t: tuple(torch.frexp(t)), torch.randn(4, 5).t() * 1e3, msg="transposed")
    run_both(torch.frexp, torch.arange(4), msg="int input")


def test_signbit_and_sign_of_zeros_and_nan():
    x = torch.tensor([0.0, -0.0, NAN, -NAN, INF, -INF, 1e-40, -1e-40])
    for fn in (torch.signbit, torch.sign, torch.sgn, torch.abs, torch.neg):
        run_both(fn, x, msg=str(fn))
        got = fn(to_dev(x)).cpu()
        if got.dtype.is_floating_point:  # -0.0 stays -0.0: compare bits where not NaN
            exp = fn(x)
            same = exp.isnan() | (exp.view(torch.int32) == got.view(torch.int32))
            assert same.all(), f"{fn}: {got} vs {exp}"


def test_errors_match_cpu():
    b = torch.tensor([True, False])
    run_both(torch.neg, b, msg="neg bool")
    run_both(torch.abs, b, msg="abs bool")
    run_both(torch.frac, torch.arange(3), msg="frac int")
    run_both(torch.bitwise_not, torch.randn(3), msg="bitwise_not float")
    run_both(torch.relu, b, msg="relu bool")
    run_both(lambda t: torch.round(t, decimals=1), torch.arange(3), msg="round decimals int")
    run_both(torch.frexp, torch.arange(3), msg="frexp int")
    run_both(lambda t: t.sqrt_(), torch.arange(3), msg="sqrt_ on int64")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_gradients(dtype):
    """Autograd through the unary ops gives the CPU's gradients."""
    fns = [torch.exp, torch.log, torch.sqrt, torch.rsqrt, torch.sin, torch.cos, torch.tan, torch.tanh,
           torch.sigmoid, torch.erf, torch.erfc, torch.erfinv, torch.asin, torch.acos, torch.atan, torch.sinh,
           torch.cosh, torch.asinh, torch.atanh, torch.log1p, torch.expm1, torch.exp2, torch.log2,
           torch.log10, torch.reciprocal, torch.abs, torch.sgn, torch.logit, torch.frac, torch.round,
           torch.nan_to_num, torch.sinc, lambda t: t.pow(3), torch.special.entr, torch.neg, torch.square,
           torch.lgamma, torch.i0, torch.special.i0e, torch.special.i1, torch.special.i1e, torch.special.ndtri]
    g = torch.Generator().manual_seed(3)
    x = (torch.rand(40, generator=g, dtype=dtype) * 0.9 + 0.05)
    go = torch.randn(40, generator=g, dtype=dtype)
    for fn in fns:
        xc = x.clone().requires_grad_()
        (gc,) = torch.autograd.grad(fn(xc), xc, go)
        xd = to_dev(x).requires_grad_()
        (gd,) = torch.autograd.grad(fn(xd), xd, to_dev(go))
        assert_same(gd, gc, msg=str(fn))


def test_eight_op_chain_is_one_kernel():
    requires_tiny()
    from torch_tiny import debug

    x = to_dev(torch.randn(64, 32))
    sync()
    with debug.count_kernels() as c:
        y = x.abs().add(1.0).log().mul(0.5).exp().neg().sigmoid().sqrt()
    assert c.kernels == 1
    xc = x.cpu()
    assert_same(y, xc.abs().add(1.0).log().mul(0.5).exp().neg().sigmoid().sqrt())


def test_composite_unaries_fuse():
    requires_tiny()
    from torch_tiny import debug

    x = to_dev(torch.rand(128) * 1.8 - 0.9)
    sync()
    for fn, n in ((torch.sigmoid, 1), (torch.logit, 1), (torch.sinc, 1), (torch.nan_to_num, 1),
                  (lambda t: torch.round(t, decimals=2), 1), (lambda t: torch.frexp(t)[0], 1)):
        with debug.count_kernels() as c:
            fn(x).cpu()
        assert c.kernels == n, f"{fn}: {c.kernels} kernels"
    # erfinv's Newton steps read the first guess many times, at the same index: one kernel
    with debug.count_kernels() as c:
        torch.erfinv(x).cpu()
    assert c.kernels == 1


def test_ported_special_functions_are_one_kernel_each():
    requires_tiny()
    from torch_tiny import debug

    x = torch.randn(500, generator=torch.Generator().manual_seed(6)) * 5
    xt = to_dev(x)
    sync()
    for fn in (torch.special.erfcx, torch.special.log_ndtr, torch.special.airy_ai):
        with debug.count_kernels() as c:
            r = fn(xt).exp()
        assert c.kernels == 1, fn
        assert_same(r, fn(x).exp(), rtol=2e-6, atol=1e-5)
