"""Binary and ternary pointwise ops on the device vs the CPU: every pair of edge values
(broadcast grid), dtype pairs for type promotion, tensor-scalar and scalar-tensor forms,
integer semantics (division, remainder and shifts with negative operands, division by zero),
in-place and out= variants, layouts, errors, gradients, kernel counts."""

import math

import pytest
import torch

from conftest import IS_TINY, assert_same, requires_tiny, sync, to_dev
from pointwise_util import INF, NAN, float_values, int_values, run_both

F = torch.nn.functional

BINARY = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
    "div_trunc": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "div_floor": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "floor_divide": torch.floor_divide, "remainder": torch.remainder, "fmod": torch.fmod, "pow": torch.pow,
    "atan2": torch.atan2, "hypot": torch.hypot, "copysign": torch.copysign, "maximum": torch.maximum,
    "minimum": torch.minimum, "fmax": torch.fmax, "fmin": torch.fmin, "bitwise_and": torch.bitwise_and,
    "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor, "lshift": torch.bitwise_left_shift,
    "rshift": torch.bitwise_right_shift, "logical_and": torch.logical_and, "logical_or": torch.logical_or,
    "logical_xor": torch.logical_xor, "eq": torch.eq, "ne": torch.ne, "lt": torch.lt, "le": torch.le,
    "gt": torch.gt, "ge": torch.ge, "xlogy": torch.xlogy, "xlog1py": torch.special.xlog1py,
    "heaviside": torch.heaviside, "logaddexp": torch.logaddexp, "logaddexp2": torch.logaddexp2,
    "nextafter": torch.nextafter, "true_divide": torch.true_divide, "float_power": torch.float_power,
    "rsub": torch.rsub, "clamp_min": torch.clamp_min, "clamp_max": torch.clamp_max,
    "gcd": torch.gcd, "lcm": torch.lcm, "add_alpha": lambda a, b: torch.add(a, b, alpha=3), "sub_alpha": lambda a, b: torch.sub(a, b, alpha=2),
    "ldexp": lambda a, b: torch.ldexp(a, b.to(torch.int32) % 8 if not b.dtype.is_floating_point else b),
}
# CPU kernels built on vectorized approximations differ from libm by an ulp or so on some pairs
LOOSE = {"pow": 1e-5, "atan2": 1e-5, "hypot": 1e-5, "logaddexp": 1e-5, "logaddexp2": 1e-5, "xlogy": 1e-5,
         "xlog1py": 1e-5, "float_power": 1e-12}

DTYPE_PAIRS = [
    (torch.float32, torch.float32), (torch.float64, torch.float32), (torch.float16, torch.float16),
    (torch.bfloat16, torch.bfloat16), (torch.float16, torch.bfloat16), (torch.int64, torch.int64),
    (torch.int32, torch.int64), (torch.uint8, torch.int8), (torch.uint8, torch.uint8), (torch.bool, torch.bool),
    (torch.bool, torch.float32), (torch.int64, torch.float32), (torch.int16, torch.float16),
]


def _values(dtype, n_random=24):
    if dtype.is_floating_point:
        return float_values(dtype, n_random=n_random)
    v = int_values(dtype)
    if dtype != torch.bool:
        # INT_MIN / -1 kills the CPU process (SIGFPE) in truncating division: leave the minimum out
        v = v[v != torch.iinfo(dtype).min]
    return v


def _tols(name, a, b):
    if name in LOOSE and torch.float32 in (a, b):
        return dict(rtol=LOOSE[name], atol=1e-6)
    return {}


# For 16-bit floats ATen's result for these depends on which CPU loop runs: the vectorized
# one rounds once, the scalar one (small, broadcast or mixed-dtype inputs) rounds every step.
# tiny always rounds once, so the reference for them is the vectorized loop's result.
ONE_ROUNDING = {"add_alpha", "sub_alpha", "div_floor", "floor_divide"}


def _vectorized_reference(fn, a, b):
    common = torch.result_type(a, b)
    big_a, big_b = torch.broadcast_tensors(a.to(common), b.to(common))
    return fn(big_a.contiguous().float(), big_b.contiguous().float()).to(common)


@pytest.mark.parametrize("dtypes", DTYPE_PAIRS, ids=lambda p: f"{p[0]}-{p[1]}".replace("torch.", ""))
@pytest.mark.parametrize("name", list(BINARY))
def test_value_grid(name, dtypes):
    """Every pair of edge values (a column against a row: broadcasting), or the CPU's error."""
    da, db = dtypes
    a = _values(da).reshape(-1, 1)
    b = _values(db).reshape(1, -1)
    if name in ("remainder", "fmod"):
        # ATen's vectorized fmod returns NaN for subnormal divisors (flushed to zero): skip them
        b = b[:, ~((b[0] != 0) & (b[0].double().abs() < 1.2e-38))] if db.is_floating_point else b
    common = torch.result_type(a, b)
    if name in ONE_ROUNDING and common in (torch.float16, torch.bfloat16):
        got = BINARY[name](to_dev(a), to_dev(b))
        assert_same(got, _vectorized_reference(BINARY[name], a, b), msg=f"{name} {da} {db}")
        return
    run_both(BINARY[name], a, b, msg=f"{name} {da} {db}", **_tols(name, da, db))


SCALARS = [0, 1, -3, 7, 2.5, -0.5, 0.0, True, False, INF, NAN]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.uint8, torch.bool, torch.float16], ids=str)
@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "div_trunc", "div_floor", "floor_divide", "remainder",
                                  "fmod", "pow", "maximum", "eq", "lt", "ge", "bitwise_and", "bitwise_xor", "lshift",
                                  "rshift", "xlogy", "atan2", "copysign", "logical_and", "clamp_min", "rsub",
                                  "float_power"])
def test_tensor_scalar(name, dtype):
    """Python scalars on either side: wrapped-number promotion rules."""
    fn = BINARY[name]
    x = _values(dtype, n_random=8)
    if name in ("remainder", "fmod") and dtype.is_floating_point:
        x = x[~((x != 0) & (x.double().abs() < 1.2e-38))]  # subnormal divisors: see test_value_grid
    for s in SCALARS:
        run_both(lambda t: fn(t, s), x, msg=f"{name}(t, {s!r})", **_tols(name, torch.float32, dtype))
        if name not in ("clamp_min",):
            run_both(lambda t: fn(s, t) if name not in ("maximum", "atan2", "copysign", "logical_and", "clamp_min")
                     else fn(torch.tensor(s), t), x, msg=f"{name}({s!r}, t)", **_tols(name, torch.float32, dtype))
        # a 0-d tensor behaves like a scalar for promotion but keeps its dtype category
        run_both(lambda t, z: fn(t, z), x, torch.tensor(s), msg=f"{name}(t, tensor({s!r}))",
                 **_tols(name, torch.float32, dtype))


def test_integer_division_semantics():
    a = torch.tensor([7, -7, 7, -7, 0, 1, -1, 5, -5, 127, -128], dtype=torch.int64).reshape(-1, 1)
    b = torch.tensor([2, 2, -2, -2, 3, -3, 1, -1, 7, -7], dtype=torch.int64).reshape(1, -1)
    for dt in (torch.int8, torch.int16, torch.int32, torch.int64):
        for name in ("div_trunc", "div_floor", "floor_divide", "remainder", "fmod"):
            run_both(BINARY[name], a.to(dt), b.to(dt), msg=f"{name} {dt}")
    for name in ("div_trunc", "div_floor", "floor_divide", "remainder", "fmod"):
        run_both(BINARY[name], a.abs().to(torch.uint8), b.abs().to(torch.uint8), msg=f"{name} uint8")
    # float versions with negative operands, zeros and infinities
    fa = torch.tensor([7.5, -7.5, 0.0, -0.0, INF, -INF, NAN, 1e-30, 5.0]).reshape(-1, 1)
    fb = torch.tensor([2.0, -2.0, 0.0, -0.0, INF, -INF, 0.5, 1e30]).reshape(1, -1)
    for name in ("div", "div_trunc", "div_floor", "floor_divide", "remainder", "fmod"):
        run_both(BINARY[name], fa, fb, msg=f"{name} float")
        run_both(BINARY[name], fa.double(), fb.double(), msg=f"{name} double")


def test_integer_division_by_zero_raises_like_cpu():
    a = torch.tensor([5, -3, 4])
    for name in ("div_trunc", "div_floor", "floor_divide", "remainder", "fmod"):
        fn = BINARY[name]
        run_both(fn, a, torch.tensor([1, 0, 2]), msg=f"{name} tensor divisor")  # a computed divisor
        run_both(lambda t: fn(t, 0), a, msg=f"{name} scalar 0")
        run_both(lambda t: fn(t, torch.tensor(0)), a, msg=f"{name} 0-d zero")
        run_both(lambda t: t.clone().remainder_(0) if name == "remainder" else fn(t, 0), a, msg=f"{name} inplace")
        run_both(lambda t: fn(t, 256), a.to(torch.uint8), msg=f"{name} 256 wraps to 0 in uint8")
    run_both(lambda t: torch.remainder(5, t), torch.tensor([2, 0]), msg="remainder(scalar, tensor)")
    # true division by zero is inf/nan, never an error
    run_both(torch.div, a, torch.tensor([0, 0, 0]), msg="true division")
    # a zero divisor that is itself an already computed device value is seen too
    if IS_TINY:
        d = to_dev(torch.tensor([2, 1, 1])) - 1  # [1, 0, 0], computed on the device
        sync()
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            torch.remainder(to_dev(a), d)


def test_pow_forms():
    x = torch.tensor([-3.0, -2.0, -1.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, 3.0, INF, -INF, NAN])
    for e in (0, 1, 2, 3, 0.5, -0.5, -1, -2, 2.5, -3, 1e10, INF, -INF, NAN, True):
        run_both(lambda t: torch.pow(t, e), x, msg=f"pow(x, {e})")
        run_both(lambda t: t.clone().pow_(e), x, msg=f"pow_(x, {e})")
        run_both(lambda t: torch.pow(e, t), x, msg=f"pow({e}, x)")
    xi = torch.tensor([-3, -2, -1, 0, 1, 2, 3, 10])
    for e in (0, 1, 2, 3, 5, 0.5, 2.5, -1, -2):
        run_both(lambda t: torch.pow(t, e), xi, msg=f"int pow(x, {e})")  # negative ints: the CPU's error
    run_both(torch.pow, xi, xi.flip(0).clamp(-2, 5), msg="int tensor ** int tensor with negatives")
    run_both(lambda t: torch.pow(2, t), xi, msg="pow(2, int tensor)")
    run_both(lambda t: torch.pow(t, torch.tensor(-1)), xi, msg="int ** 0-d tensor -1")
    run_both(lambda t: torch.pow(t, 2), torch.tensor([True, False]), msg="bool ** 2")
    run_both(lambda t: torch.pow(t, t), torch.tensor([True, False]), msg="bool ** bool")
    for dt in (torch.float16, torch.bfloat16, torch.float64):
        run_both(lambda t: torch.pow(t, 3), x.to(dt), msg=f"{dt} ** 3")
        run_both(lambda t: torch.pow(t, -0.5), x.to(dt), msg=f"{dt} ** -0.5")
    out = torch.empty(0)
    run_both(lambda t, o: (torch.pow(2.0, t, out=o), o)[1], x, out, msg="pow.Scalar_out")


def test_shifts():
    a = torch.tensor([1, -1, 5, -8, 127, -128, 0, 3], dtype=torch.int64).reshape(-1, 1)
    s = torch.tensor([0, 1, 3, 7, 8, 15, 31, 63, 64, 100, -1, -5]).reshape(1, -1)
    for dt in (torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64):
        x = a.to(dt) if dt != torch.uint8 else a.abs().to(dt)
        run_both(torch.bitwise_left_shift, x, s.to(dt) if dt != torch.uint8 else s.abs().to(dt), msg=f"<< {dt}")
        run_both(torch.bitwise_right_shift, x, s.to(dt) if dt != torch.uint8 else s.abs().to(dt), msg=f">> {dt}")
        run_both(lambda t: t << 3, x, msg=f"<< 3 {dt}")
        run_both(lambda t: t >> 2, x, msg=f">> 2 {dt}")
        run_both(lambda t: t.__ilshift__(1), x.clone(), msg=f"<<= {dt}")
        run_both(lambda t: t.__irshift__(torch.ones_like(t)), x.clone(), msg=f">>= {dt}")
    run_both(lambda t: t << 1, torch.randn(3), msg="float << is the CPU's error")
    run_both(lambda t: 3 >> t, torch.tensor([0, 1, 2]), msg="scalar >> tensor")


def test_comparisons_with_nan_and_inplace():
    a = float_values(torch.float32, n_random=8)
    b = a.flip(0)
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        fn = BINARY[name]
        run_both(fn, a, b, msg=name)
        run_both(lambda t, u: getattr(t.clone(), name + "_")(u), a, b, msg=f"{name}_ keeps dtype")
        run_both(lambda t: getattr(t.clone(), name + "_")(0.5), a, msg=f"{name}_ scalar")
        run_both(lambda t, u, o: (fn(t, u, out=o), o)[1], a, b, torch.empty(0, dtype=torch.int64), msg=f"{name} out")
        run_both(lambda t: fn(t, NAN), a, msg=f"{name} nan scalar")
    run_both(lambda t: t == 3, torch.arange(6, dtype=torch.uint8), msg="uint8 == 3")
    run_both(lambda t: t < -1, torch.arange(6, dtype=torch.uint8), msg="uint8 < -1")
    run_both(lambda t: t > 2.5, torch.arange(6), msg="int > 2.5")


def test_min_max_nan_rules():
    a = torch.tensor([1.0, NAN, -0.0, 0.0, NAN, INF, -INF, 2.0])
    b = torch.tensor([NAN, 1.0, 0.0, -0.0, NAN, 3.0, 3.0, 2.0])
    for name in ("maximum", "minimum", "fmax", "fmin"):
        run_both(BINARY[name], a, b, msg=name)
        run_both(BINARY[name], a.half(), b.half(), msg=f"{name} half")
        run_both(BINARY[name], torch.tensor([True, False, True]), torch.tensor([False, False, True]), msg=f"{name} bool")
        run_both(BINARY[name], torch.tensor([200, 3], dtype=torch.uint8), torch.tensor([5, 255], dtype=torch.uint8),
                 msg=f"{name} uint8")


def test_special_binaries():
    x = torch.tensor([0.0, -0.0, 1.0, 2.0, -1.0, INF, NAN, 0.0, 1e-30]).reshape(-1, 1)
    y = torch.tensor([0.0, -1.0, 1.0, NAN, INF, -INF, 1e-40, 2.0]).reshape(1, -1)
    for name in ("xlogy", "xlog1py", "copysign", "atan2", "hypot", "logaddexp", "logaddexp2", "nextafter",
                 "heaviside"):
        for dt in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
            run_both(BINARY[name], x.to(dt), y.to(dt), msg=f"{name} {dt}", **_tols(name, dt, dt))
    run_both(torch.xlogy, 0, y, msg="xlogy(scalar 0, t)")
    run_both(torch.xlogy, x, 3.0, msg="xlogy(t, scalar)")
    run_both(torch.special.xlogy, x, y, msg="special.xlogy")
    run_both(torch.heaviside, torch.tensor([-1, 0, 2]), torch.tensor([7, 7, 7]), msg="heaviside int")
    run_both(torch.heaviside, torch.tensor([-1.0, 0.0]), torch.tensor([1, 2]), msg="heaviside mixed dtypes error")
    run_both(lambda a, b, o: torch.heaviside(a, b, out=o), torch.tensor([-1.0, 0.0]), torch.tensor([1.0, 2.0]),
             torch.empty(0, dtype=torch.float64), msg="heaviside out dtype error")
    # nextafter steps exactly one ulp, across zero and into subnormals
    z = torch.tensor([0.0, -0.0, 1.0, -1.0, 1e-45, 3.4028235e38, INF])
    run_both(torch.nextafter, z, torch.full_like(z, INF), msg="towards +inf")
    run_both(torch.nextafter, z, torch.full_like(z, -INF), msg="towards -inf")
    run_both(torch.nextafter, z.double(), torch.zeros(7, dtype=torch.float64), msg="double towards 0")


def test_hurwitz_zeta():
    # negative q: ATen sums ~|q| terms, tiny a reflection through q's fractional part (same value)
    x = torch.tensor([1.0, 0.5, 2.0, 3.0, 4.0, 7.0, 2.5, 12.0, NAN, INF, 1.0001]).reshape(-1, 1)
    q = torch.tensor([1.0, 0.5, 1e-3, 0.0, -0.0, -1.0, -0.5, -2.3, -1.5, -2.7, -12.25, -7.999, 3.0, 9.5, 100.0,
                      1e6, NAN, INF]).reshape(1, -1)
    run_both(torch.special.zeta, x, q, msg="zeta float32", rtol=1e-5, atol=1e-6)
    run_both(torch.special.zeta, x.double(), q.double(), msg="zeta float64", rtol=1e-9, atol=1e-12)
    g = torch.Generator().manual_seed(0)
    xr, qr = torch.rand(64, generator=g) * 8 + 1, torch.rand(64, generator=g) * 18 - 9
    run_both(torch.special.zeta, xr.round(), qr, msg="zeta random q, integer x", rtol=1e-4, atol=1e-5)
    run_both(torch.special.zeta, xr, qr.abs(), msg="zeta random", rtol=1e-5, atol=1e-6)
    run_both(torch.special.zeta, torch.arange(1, 5).reshape(-1, 1), torch.arange(-2, 4), msg="zeta int64",
             rtol=1e-5, atol=1e-6)
    run_both(torch.special.zeta, torch.tensor([True, False]), torch.tensor([True, True]), msg="zeta bool")
    run_both(torch.special.zeta, 2.0, qr.abs(), msg="zeta(scalar, t)", rtol=1e-5, atol=1e-6)
    run_both(torch.special.zeta, xr, 2.0, msg="zeta(t, scalar)", rtol=1e-5, atol=1e-6)
    run_both(torch.special.zeta, xr.reshape(8, 8).t(), qr.abs().reshape(8, 8)[::2], msg="zeta strided",
             rtol=1e-5, atol=1e-6)
    run_both(torch.special.zeta, torch.tensor(3.0), torch.tensor(2.0), msg="zeta 0-d")
    run_both(torch.special.zeta, torch.empty(0, 3), torch.ones(3), msg="zeta empty")
    run_both(lambda a, b, o: (torch.special.zeta(a, b, out=o), o)[1], xr, qr.abs(), torch.empty(0),
             msg="zeta out=", rtol=1e-5, atol=1e-6)
    run_both(torch.special.zeta, x.half(), q.half(), msg="zeta half: the CPU's error")


def test_incomplete_gamma():
    # every method ATen picks: series, continued fraction, small-x series, the asymptotic band
    # a ~ x (a > 20), large a and x, and the boundary values
    g = torch.Generator().manual_seed(0)
    vals = torch.rand(400, generator=g, dtype=torch.float64) * 10
    vals = vals ** (torch.rand(400, generator=g, dtype=torch.float64) * 6)
    a = vals[torch.randint(0, 400, (3000,), generator=g)]
    x = vals[torch.randint(0, 400, (3000,), generator=g)]
    near = a * (torch.rand(3000, generator=g, dtype=torch.float64) * 2.7 + 0.3)
    x = torch.where(torch.rand(3000, generator=g) < 0.5, near, x)
    special = torch.tensor([0.0, -1.0, INF, NAN, 1.0, 2.0, 0.5, 1e-30, 20.5, 250.0], dtype=torch.float64)
    a = torch.cat([a, special.repeat_interleave(10)])
    x = torch.cat([x, special.repeat(10)])
    for fn in (torch.igamma, torch.igammac, torch.special.gammainc, torch.special.gammaincc):
        run_both(fn, a, x, msg=f"{fn.__name__} float64", rtol=1e-10, atol=1e-12)
        # float32: ATen computes in float (about 1e-6 off near 1), tiny in double
        run_both(fn, a.float(), x.float(), msg=f"{fn.__name__} float32", rtol=1.3e-6, atol=1e-5)
        run_both(fn, a.half(), x.half(), msg=f"{fn.__name__} float16")
        run_both(fn, a.bfloat16(), x.bfloat16(), msg=f"{fn.__name__} bfloat16")
        ab, xb = a[:60].float().reshape(6, 10), x[:60].float().reshape(6, 10)
        run_both(fn, ab.t(), xb.t()[::2].repeat(2, 1), msg=f"{fn.__name__} strided", rtol=1.3e-6, atol=1e-5)
        run_both(fn, ab[:, :1], xb[:1], msg=f"{fn.__name__} broadcast", rtol=1.3e-6, atol=1e-5)
        run_both(fn, torch.tensor(3.0), torch.tensor(2.5), msg=f"{fn.__name__} 0-d")
        run_both(fn, torch.empty(0, 3), torch.ones(3), msg=f"{fn.__name__} empty")
        run_both(fn, torch.arange(1, 4), torch.arange(1, 4), msg=f"{fn.__name__} int64: the CPU's error")
        run_both(fn, a[:5].float(), x[:5].double(), msg=f"{fn.__name__} mixed float types", rtol=1e-10, atol=1e-12)
    run_both(lambda s, o: s.clone().igamma_(o), a[:50].float(), x[:50].float(), msg="igamma_", rtol=1.3e-6, atol=1e-5)
    run_both(lambda s, o: s.clone().igammac_(o), a[:50].float(), x[:50].float(), msg="igammac_", rtol=1.3e-6, atol=1e-5)
    run_both(lambda s, o, out: (torch.igamma(s, o, out=out), out)[1], a[:50], x[:50], torch.empty(0, dtype=torch.float64),
             msg="igamma out=", rtol=1e-10, atol=1e-12)
    run_both(lambda s, o, out: torch.igammac(s, o, out=out), a[:50], x[:50], torch.empty(0, dtype=torch.int64),
             msg="igammac out= int64: the CPU's error")


POLYNOMIALS = ["chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
               "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l", "legendre_polynomial_p",
               "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
               "shifted_chebyshev_polynomial_w"]


@pytest.mark.parametrize("name", POLYNOMIALS)
def test_orthogonal_polynomials(name):
    fn = getattr(torch.special, name)
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.rand(100, generator=g) * 4 - 2,
                   torch.tensor([1.0, -1.0, 0.0, 0.5, 1.5, -1.5, NAN, 2.0, 0.25, 0.75])]).reshape(-1, 1)
    n = torch.cat([torch.arange(-3, 16).float(), torch.tensor([NAN, INF, -INF, 3.7, 9.99])]).reshape(1, -1)
    # the recurrence amplifies rounding (ATen's compiled loop may fuse multiply-adds): relative 1e-4
    run_both(fn, x, n, msg=f"{name} float32", rtol=1e-4, atol=1e-4)
    run_both(fn, x.double(), n.double(), msg=f"{name} float64", rtol=1e-9, atol=1e-9)
    run_both(lambda t: fn(t, 5), x, msg=f"{name} scalar degree", rtol=1e-4, atol=1e-4)
    run_both(lambda t: fn(t, torch.tensor(7)), x, msg=f"{name} 0-d int degree", rtol=1e-4, atol=1e-4)
    run_both(fn, torch.arange(-2, 3).reshape(-1, 1), torch.arange(0, 4), msg=f"{name} int64", rtol=1e-5, atol=1e-5)
    run_both(fn, x.half(), n.half(), msg=f"{name} half: the CPU's error")


def test_hermite_he_matches_the_fused_recurrence():
    # ATen's float loop is fma(x, q, -k p); near a root the cancellation makes an unfused
    # x q - k p differ in many ulps, so this compares bit for bit (the CPU kernels built for
    # AVX2 / AVX-512 are the fused ones)
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("the CPU's kernel for this host is not compiled with FMA")
    g = torch.Generator().manual_seed(3)
    x = (torch.rand(400, 1, generator=g) * 18 - 9)
    n = torch.arange(0, 14).float()
    run_both(torch.special.hermite_polynomial_he, x, n, msg="hermite_he float32", rtol=0, atol=0)
    roots = torch.tensor([2.3344142183389773, 0.7419637843027259, 1.3556261799742659, 2.8569700138728056])
    x = (roots.reshape(-1, 1) + torch.linspace(-1e-5, 1e-5, 21)).reshape(-1, 1)
    run_both(torch.special.hermite_polynomial_he, x, torch.tensor([6.0, 4.0, 5.0]), msg="near roots", rtol=0, atol=0)


def test_polynomial_degree_limit():
    requires_tiny()
    x = to_dev(torch.rand(4))
    with pytest.raises(NotImplementedError, match="unrolled recurrence limit"):
        torch.special.hermite_polynomial_h(x, 5000)


def test_where_and_masked_fill():
    g = torch.Generator().manual_seed(0)
    c = torch.rand(4, 1, 5, generator=g) > 0.5
    a = torch.randn(3, 5, generator=g)
    b = torch.arange(5)
    run_both(torch.where, c, a, b, msg="where broadcast + promotion")
    run_both(lambda c_, a_: torch.where(c_, a_, 0.5), c, a, msg="where.ScalarOther")
    run_both(lambda c_, a_: torch.where(c_, 2, a_), c, a, msg="where.ScalarSelf")
    run_both(lambda c_: torch.where(c_, 1.0, 0), c, msg="where.Scalar")
    run_both(lambda c_, a_: torch.where(c_.to(torch.uint8), a_, a_ * 2), c, a, msg="uint8 condition")
    run_both(lambda c_, a_: torch.where(c_.long(), a_, a_), c, a, msg="int64 condition error")
    run_both(lambda c_, a_, o: (torch.where(c_, a_, a_, out=o), o)[1], c, a, torch.empty(0), msg="where out")
    run_both(lambda c_, a_, o: torch.where(c_, a_, a_, out=o), c, a, torch.empty(0, dtype=torch.float64),
             msg="where out dtype error")
    run_both(lambda c_: c_.nonzero().numel() and torch.where(c_), c, msg="where(cond) = nonzero")

    x = torch.randn(3, 5, generator=g)
    m = torch.rand(5, generator=g) > 0.5
    run_both(lambda t, m_: t.clone().masked_fill_(m_, 2.5), x, m, msg="masked_fill_ scalar")
    run_both(lambda t, m_: t.clone().masked_fill_(m_, torch.tensor(-1.0)), x, m, msg="masked_fill_ 0-d tensor")
    run_both(lambda t, m_: t.masked_fill(m_, float("nan")), x, m, msg="masked_fill nan")
    run_both(lambda t, m_: t.masked_fill(m_, 7), x.long(), m, msg="masked_fill int")
    run_both(lambda t, m_: t.masked_fill(m_, 2.7), x.long(), m, msg="masked_fill int <- float")
    run_both(lambda t, m_: t.masked_fill(m_, 3), x > 0, m, msg="masked_fill bool")
    run_both(lambda t, m_: t.masked_fill(m_.expand(2, 3, 5), 1.0), x, m,
             msg="masked_fill mask broadcasts self")
    run_both(lambda t, m_: t.clone().masked_fill_(m_.expand(2, 3, 5), 1.0), x, m, msg="masked_fill_ cannot grow self")
    run_both(lambda t, m_: t.masked_fill(m_.long(), 1.0), x, m, msg="non-bool mask error")
    run_both(lambda t, m_: t.masked_fill(m_, torch.ones(2)), x, m, msg="value with dims error")
    run_both(lambda t, m_: t[:, ::2].masked_fill_(m_[::2], 9.0) is not None and t, x.clone(), m, msg="through a view")


def test_clamp_family():
    x = float_values(torch.float32, n_random=16)
    for lo, hi in ((-1.0, 1.0), (None, 0.5), (0.5, None), (2.0, -2.0), (NAN, 1.0), (-1.0, NAN), (-INF, INF)):
        run_both(lambda t: torch.clamp(t, lo, hi), x, msg=f"clamp({lo}, {hi})")
        run_both(lambda t: t.clone().clamp_(lo, hi), x, msg=f"clamp_({lo}, {hi})")
        run_both(lambda t: torch.clip(t, lo, hi), x, msg=f"clip({lo}, {hi})")
    lo_t, hi_t = x.flip(0), x.roll(3)
    run_both(torch.clamp, x, lo_t, hi_t, msg="tensor bounds")
    run_both(lambda t, l: torch.clamp(t, min=l), x, lo_t, msg="tensor min only")
    run_both(lambda t, h: torch.clamp(t, max=h), x, hi_t, msg="tensor max only")
    run_both(lambda t, l: torch.clamp_min(t, l), x, lo_t, msg="clamp_min tensor")
    run_both(lambda t, h: t.clone().clamp_max_(h), x, hi_t, msg="clamp_max_ tensor")
    run_both(lambda t: torch.clamp_min(t, 0.25), x, msg="clamp_min scalar")
    run_both(lambda t: torch.clamp_max(t, -0.25), x, msg="clamp_max scalar")
    run_both(lambda t: torch.clamp(t, 0.5, 3.5), torch.arange(6), msg="int tensor, float bounds -> float")
    run_both(lambda t: torch.clamp(t, 2, 4), torch.arange(6, dtype=torch.uint8), msg="uint8")
    run_both(lambda t: torch.clamp(t, torch.tensor(2.5, dtype=torch.float64)), x, msg="0-d f64 bound")
    run_both(lambda t, lo: torch.clamp(t, lo), x, torch.ones(3, 1, dtype=torch.float64), msg="f64 bound promotes")
    run_both(torch.clamp, x, msg="no bounds error")
    run_both(lambda t: torch.clamp(t, False, True), torch.tensor([True, False]), msg="bool error")
    run_both(lambda t, o: torch.clamp(t, 0, 1, out=o), x, torch.empty(0, dtype=torch.float64), msg="out dtype error")
    run_both(lambda t, o: (torch.clamp(t, t, t, out=o), o)[1], x, torch.empty(0, dtype=torch.float64),
             msg="tensor bounds, out f64")
    for dt in (torch.float16, torch.bfloat16, torch.float64, torch.int16):
        v = float_values(dt) if dt.is_floating_point else int_values(dt)
        run_both(lambda t: torch.clamp(t, -2, 3), v, msg=str(dt))


def test_lerp_addcmul_addcdiv():
    g = torch.Generator().manual_seed(1)
    s, e, w = torch.randn(4, 5, generator=g), torch.randn(5, generator=g), torch.rand(4, 1, generator=g) * 2 - 0.5
    for weight in (0.0, 0.3, 0.5, 1.0, -1.5, 2.0, NAN):
        run_both(lambda a, b: torch.lerp(a, b, weight), s, e, msg=f"lerp scalar {weight}")
        run_both(lambda a, b: a.clone().lerp_(b.expand(4, 5), weight), s, e, msg=f"lerp_ {weight}")
    run_both(torch.lerp, s, e, w, msg="lerp tensor weight (broadcast)")
    run_both(lambda a, b, c, o: (torch.lerp(a, b, c, out=o), o)[1], s, e, w, torch.empty(0), msg="lerp out")
    run_both(lambda a, b, c, o: torch.lerp(a, b, c, out=o), s, e, w, torch.empty(0, dtype=torch.float64),
             msg="lerp out dtype")
    run_both(torch.lerp, s, e.double(), w, msg="end dtype error")
    run_both(torch.lerp, s, e, w.double(), msg="weight dtype error")
    run_both(lambda a, b: torch.lerp(a, b, torch.tensor(0.25, dtype=torch.float64)), s, e, msg="0-d f64 weight")
    run_both(lambda a, b: torch.lerp(a, b, 0.5), s.long(), e.long(), msg="int error")
    for dt in (torch.float16, torch.bfloat16, torch.float64):
        run_both(torch.lerp, s.to(dt), e.to(dt), w.to(dt), msg=f"lerp {dt}")

    t1, t2 = torch.randn(4, 1, generator=g), torch.randn(5, generator=g)
    for v in (1, 0.5, -2, 0):
        run_both(lambda a, b, c: torch.addcmul(a, b, c, value=v), s, t1, t2, msg=f"addcmul {v}")
        run_both(lambda a, b, c: torch.addcdiv(a, b, c, value=v), s, t1, t2, msg=f"addcdiv {v}")
        run_both(lambda a, b, c: a.clone().addcmul_(b, c, value=v), s, t1, t2, msg=f"addcmul_ {v}")
        run_both(lambda a, b, c: a.clone().addcdiv_(b, c, value=v), s, t1, t2, msg=f"addcdiv_ {v}")
    ia, ib = torch.arange(6).reshape(2, 3), torch.arange(3) - 1
    run_both(lambda a, b: torch.addcmul(a, b, b, value=3), ia, ib, msg="addcmul int")
    run_both(lambda a, b: torch.addcmul(a, b, b, value=0.5), ia, ib, msg="addcmul int, float value")
    run_both(lambda a, b: torch.addcmul(a, b.float(), b, value=2), ia, ib, msg="addcmul promotes")
    run_both(lambda a, b: torch.addcdiv(a, b, b + 5), ia, ib, msg="addcdiv int error")
    run_both(lambda a, b: torch.addcdiv(a, b.float(), b + 5), ia, ib, msg="addcdiv int self, float tensor")
    run_both(lambda a: torch.addcmul(a, a, a), torch.tensor([True]), msg="addcmul bool error")
    for dt in (torch.float16, torch.bfloat16, torch.float64):
        run_both(torch.addcmul, s.to(dt), t1.to(dt), t2.to(dt), msg=f"addcmul {dt}")
        run_both(torch.addcdiv, s.to(dt), t1.to(dt), t2.to(dt), msg=f"addcdiv {dt}")


def test_inplace_and_out_rules():
    a, b = torch.randn(3, 4), torch.randn(4)
    run_both(lambda x, y: x.clone().add_(y, alpha=2), a, b, msg="add_ broadcast other")
    run_both(lambda x, y: y.clone().add_(x), a, b, msg="add_ cannot broadcast self")
    run_both(lambda x, y: x.long().add_(y), a, b, msg="float into int64 in-place error")
    run_both(lambda x, y: x.clone().mul_(2), a.long(), b, msg="int mul_ scalar")
    run_both(lambda x, y: x.clone().div_(y), a.long(), b, msg="int div_ error")
    run_both(lambda x, y: x.clone().div_(2, rounding_mode="floor"), a.long() * 7, b, msg="int div_ floor")
    run_both(lambda x, y, o: (torch.add(x, y, out=o), o)[1], a, b, torch.empty(0, dtype=torch.float64),
             msg="add out=f64")
    run_both(lambda x, y, o: torch.add(x, y, out=o), a, b, torch.empty(0, dtype=torch.int64), msg="add out=int64")
    run_both(lambda x, y, o: (torch.mul(x, y, out=o), o)[1], a, b, torch.empty(2, 2), msg="out resized")
    run_both(lambda x, y, o: (torch.sub(x, y, alpha=0.5, out=o), o)[1], a, b, torch.empty(3, 4), msg="sub alpha out")
    run_both(lambda x, y: torch.add(x.long(), y.long(), alpha=0.5), a, b, msg="float alpha with ints error")
    run_both(lambda x: x - x, torch.tensor([True]), msg="bool subtraction error")
    run_both(lambda x: torch.rsub(x, 2), a, msg="rsub scalar")
    run_both(lambda x: 1 - x, a.long(), msg="scalar - int tensor")
    run_both(lambda x, y: torch.add(x, y, alpha=True), a > 0, b > 0, msg="bool alpha")
    # in-place through views (a partially overlapping input is left out: ATen's result
    # depends on its loop order there, tiny reads the input as it was before the op)
    run_both(lambda x: (x.t().mul_(2), x)[1], a.clone(), msg="transposed view in-place")
    run_both(lambda x: x[:1].expand(3, 4).add_(1), a.clone(), msg="in-place on expanded view error")


def test_layouts_and_sizes():
    g = torch.Generator().manual_seed(2)
    cases = [
        (torch.tensor(2.0), torch.tensor(-3.0)),
        (torch.tensor(2.0), torch.randn(3, generator=g)),
        (torch.empty(0, 4), torch.randn(4, generator=g)),
        (torch.randn(5, 7, generator=g).t(), torch.randn(7, 1, generator=g)),
        (torch.randn(6, 8, generator=g)[::2, 1::3], torch.randn(3, 1, generator=g).expand(3, 3)),
        (torch.randn(1 << 18, generator=g), torch.randn(1 << 18, generator=g)),
        (torch.randn(2, 1, 3, 1, generator=g), torch.randn(4, 1, 5, generator=g)),
    ]
    for a, b in cases:
        for fn in (torch.add, torch.mul, torch.atan2, torch.maximum, torch.lt, torch.pow, torch.remainder):
            run_both(fn, a, b.abs() + 0.5 if fn is torch.pow else b, msg=f"{fn.__name__} {a.shape} {b.shape}")
    run_both(torch.add, torch.randn(2, 3), torch.randn(4), msg="shape mismatch error")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_gradients(dtype):
    g = torch.Generator().manual_seed(5)
    a = torch.rand(4, 5, generator=g, dtype=dtype) + 0.5
    b = torch.rand(5, generator=g, dtype=dtype) + 0.5
    w = torch.rand(4, 1, generator=g, dtype=dtype)
    go = torch.randn(4, 5, generator=g, dtype=dtype)
    fns = {
        "add": lambda x, y: torch.add(x, y, alpha=2), "sub": torch.sub, "mul": torch.mul, "div": torch.div,
        "pow": torch.pow, "atan2": torch.atan2, "hypot": torch.hypot, "maximum": torch.maximum,
        "fmin": torch.fmin, "xlogy": torch.xlogy, "logaddexp": torch.logaddexp, "copysign": torch.copysign,
        "fmod": torch.fmod, "remainder": torch.remainder, "lerp": lambda x, y: torch.lerp(x, y, 0.3),
        "lerp_t": lambda x, y: torch.lerp(x, y, (x * 0 + 0.7).detach()), "addcmul": lambda x, y: torch.addcmul(x, x, y, value=0.5),
        "addcdiv": lambda x, y: torch.addcdiv(x, x, y, value=2), "where": lambda x, y: torch.where(x > 1, x, y),
        "clamp": lambda x, y: torch.clamp(x, y * 0.9, y * 1.3), "clamp_min": lambda x, y: torch.clamp_min(x, y),
        "masked_fill": lambda x, y: (x * y).masked_fill(x > 1.2, 0.0), "pow_scalar": lambda x, y: x ** 2.5 + y ** -1,
        "rpow": lambda x, y: 2 ** x + y, "div_floor": lambda x, y: torch.div(x, y, rounding_mode="floor") + x * y,
    }
    for name, fn in fns.items():
        ac, bc = a.clone().requires_grad_(), b.clone().requires_grad_()
        exp = torch.autograd.grad(fn(ac, bc), (ac, bc), go, allow_unused=True)
        ad, bd = to_dev(a).requires_grad_(), to_dev(b).requires_grad_()
        got = torch.autograd.grad(fn(ad, bd), (ad, bd), to_dev(go), allow_unused=True)
        for x, y in zip(got, exp):
            if y is None:
                assert x is None or not x.cpu().any(), name
            else:
                assert_same(x, y, msg=name)


def test_where_relu_sum_is_one_kernel():
    requires_tiny()
    from torch_tiny import debug

    x = to_dev(torch.randn(64, 64))
    sync()
    with debug.count_kernels() as c:
        s = torch.where(x > 0, x, 0.1 * x).sum()
    assert c.kernels == 1
    xc = x.cpu()
    assert_same(s, torch.where(xc > 0, xc, 0.1 * xc).sum())


def test_ternary_ops_fuse():
    requires_tiny()
    from torch_tiny import debug

    a, b, c = (to_dev(torch.randn(32, 32)) for _ in range(3))
    sync()
    with debug.count_kernels() as k:
        y = torch.addcdiv(torch.addcmul(a, b, c, value=0.5), b, c.abs() + 1).lerp(a, 0.25).clamp(-1, 1)
        y = torch.where(y > 0, y, a).masked_fill(b > 1, 0.0)
    assert k.kernels == 1
    with debug.count_kernels() as k:
        z = torch.remainder(a, 3) + torch.floor_divide(b, 0.5) + torch.atan2(a, b) + torch.logaddexp(a, c)
    assert k.kernels == 1
    assert_same(z, torch.remainder(a.cpu(), 3) + torch.floor_divide(b.cpu(), 0.5) + torch.atan2(a.cpu(), b.cpu())
                + torch.logaddexp(a.cpu(), c.cpu()))


def test_special_binaries_are_one_kernel_each():
    # the unrolled series / fractions / reflections stay elementwise: one fused kernel each
    requires_tiny()
    from torch_tiny import debug

    g = torch.Generator().manual_seed(4)
    a, x = torch.rand(300, generator=g) * 40, torch.rand(300, generator=g) * 40
    at, xt = to_dev(a), to_dev(x)
    sync()
    for fn in (torch.igamma, torch.igammac, torch.special.zeta):
        with debug.count_kernels() as c:
            r = fn(at, xt) * 2
        assert c.kernels == 1, fn
        assert_same(r, fn(a, x) * 2, rtol=1.3e-6, atol=1e-5)
