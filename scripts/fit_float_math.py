"""Fits the coefficients of the CPU code generator's float32 erf, exp, exp2, tanh and log
(llvm_codegen.cpp: erf_f32, exp_f32, tanh_f32 and log_f32), checks them and prints them as C++
initializers.

erf:

    |x| < 1:         erf(x) = x + x * q(x^2)          q of degree 6 (q = erf(x)/x - 1: the constant
                                                        2/sqrt(pi) - 1 rounds with a small error
                                                        next to the x added, where x * 1.128 would
                                                        round twice)
    1 <= |x| < X1:   erf(x) = 1 - e(|x| - MID)        e of degree 14 approximates erfc: its rounding
                                                        errors scale with erfc (at most 0.16)
    |x| >= X1:       erf(x) = 1                       X1: where erfc falls to half a unit of 1

exp:
    n = round(x / ln 2), r = x - n ln 2 (two FMAs, ln 2 as a float and its remainder)
    exp(x) = 2^n (1 + (r + r^2 p(r)))                  p of degree 4 on |r| <= ln 2 / 2
    exp2(x) likewise with n = round(x), r = (x - n) ln 2 (x - n exact; exact on integers)
    2^n as two factors 2^(n >> 1) 2^(n - (n >> 1)), each a normal float, so results below
    the normal range round once, into subnormals

tanh:
    |x| < 1:         tanh(x) = x + x^3 t(x^2)          t of degree 6
    |x| >= 1:        tanh(|x|) = 1 - 2 / (exp(min(2 |x|, 20)) + 1), with exp as above (from 20 the
                                                        result rounds to 1)

log:
    x = 2^e m with m in [sqrt(1/2), sqrt(2)) (from the bits: subtracting sqrt(1/2)'s moves the
    exponent where the mantissa passes it; subnormals scaled by 2^23 first), f = m - 1 (exact)
    log(x) = e ln 2 + (f + f^2 l(f))                   l of degree 8 on [sqrt(1/2) - 1, sqrt(2) - 1]

Least squares on Chebyshev nodes (near minimax), relative for q, p and t, absolute for e; then
the float32 evaluation (FMA Horner) is checked against mpmath on 2 million points: every result
within one unit of the correctly rounded value.

    python scripts/fit_float_math.py
"""
import mpmath as mp
import numpy as np
from numpy.polynomial import polynomial as P

mp.mp.dps = 40
LO, X1 = 1.0, 3.9192058  # erfc(3.9192058) = 2^-25
MID = (LO + X1) / 2
f32 = np.float32


def nodes(lo, hi, n):
    return np.cos(np.linspace(0, np.pi, n)) * (hi - lo) / 2 + (hi + lo) / 2


def fit():
    z = nodes(0.0, 1.0, 4000)
    ratio = np.array([float(mp.erf(mp.sqrt(v)) / mp.sqrt(v)) if v > 0 else float(2 / mp.sqrt(mp.pi)) for v in z])
    q = P.polyfit(z, ratio - 1.0, 6, w=1.0 / ratio)
    x = nodes(LO, X1, 6000)
    e = P.polyfit(x - MID, np.array([float(mp.erfc(v)) for v in x]), 14)
    return q.astype(f32), e.astype(f32)


def fma(a, b, c):  # float32 FMA: the product is exact in double
    return (a.astype(np.float64) * b + c).astype(f32)


def horner(coef, t):
    r = np.full_like(t, coef[-1])
    for k in coef[-2::-1]:
        r = fma(r, t, np.full_like(t, k))
    return r


def erf32(x, q, e):
    ax = np.abs(x)
    small = fma(ax, horner(q, ax * ax), ax)
    large = f32(1) - horner(e, ax - f32(MID))
    return np.copysign(np.where(ax < LO, small, np.where(ax >= f32(X1), f32(1), large)), x)


LN2_F = f32(np.log(2.0))
LN2_LO = f32(float(mp.log(2)) - float(LN2_F))


def fit_exp():
    r = nodes(-np.log(2) / 2, np.log(2) / 2, 4000)
    r = r[np.abs(r) > 1e-6]
    ratio = np.array([float((mp.exp(v) - 1 - v) / (mp.mpf(v) ** 2)) for v in r])
    return P.polyfit(r, ratio, 4, w=np.exp(-r)).astype(f32)  # relative to exp(r)


def pow2_exp(n, r, p):
    """2^n (1 + r + r^2 p(r)), 2^n as two normal factors."""
    t = fma((r * r).astype(f32), horner(p, r), r)
    k = n.astype(np.int64)
    h = k >> 1
    return ((f32(1) + t) * np.ldexp(f32(1), h).astype(f32) * np.ldexp(f32(1), k - h).astype(f32)).astype(f32)


def exp32(x, p):
    x = np.clip(x, f32(-104), f32(89))
    n = np.rint(x * f32(1 / np.log(2))).astype(f32)
    r = fma(-n, np.full_like(x, LN2_F), x)
    return pow2_exp(n, fma(-n, np.full_like(x, LN2_LO), r), p)


def exp2_32(x, p):
    x = np.clip(x, f32(-151), f32(129))
    n = np.rint(x).astype(f32)
    r = (x - n).astype(f32)  # exact
    return pow2_exp(n, fma(r, np.full_like(x, LN2_F), (r * LN2_LO).astype(f32)), p)


def units_off(got, x, exact):
    """The most units `got` is from `exact` rounded to float32 over `x`, and the share exact."""
    with np.errstate(over="ignore"):
        want = np.array([float(exact(float(v))) for v in x]).astype(f32)
    units = np.abs(got.view(np.int32).astype(np.int64) - want.view(np.int32))
    return units.max(), (units == 0).mean()


def check_exp(p):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-104, 89, 1_500_000), rng.uniform(-1, 1, 400_000),
                        np.linspace(-0.36, 0.36, 100_001), np.linspace(-103.98, -87, 50_000)]).astype(f32)
    with np.errstate(over="ignore", under="ignore"):
        return units_off(exp32(x, p), x, mp.exp)


def check_exp2(p):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-151, 129, 1_500_000), rng.uniform(-1, 1, 400_000),
                        np.linspace(-0.5, 0.5, 100_001), np.arange(-150, 128)]).astype(f32)
    with np.errstate(over="ignore", under="ignore"):
        return units_off(exp2_32(x, p), x, lambda v: mp.mpf(2) ** v)


def fit_tanh():
    z = nodes(0.0, 1.0, 4000)
    z = z[z > 1e-8]
    ratio = np.array([float((mp.tanh(mp.sqrt(v)) - mp.sqrt(v)) / mp.sqrt(v) ** 3) for v in z])
    tz = np.array([float(mp.tanh(mp.sqrt(v)) / mp.sqrt(v) ** 3) for v in z])
    return P.polyfit(z, ratio, 6, w=z / tz).astype(f32)  # relative to tanh


def tanh32(x, t, p):
    ax = np.abs(x)
    small = fma((ax * ax * ax).astype(f32), horner(t, (ax * ax).astype(f32)), ax)
    with np.errstate(over="ignore"):
        large = (f32(1) - (f32(2) / (exp32(np.minimum(ax + ax, f32(20)), p) + f32(1))).astype(f32)).astype(f32)
    return np.copysign(np.where(ax < 1, small, large), x)


def check_tanh(t, p):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(0, 10, 1_000_000), rng.uniform(0, 1.2, 500_000),
                        np.linspace(0.99, 1.01, 100_001), rng.uniform(0, 1e-3, 100_000)]).astype(f32)
    return units_off(tanh32(x, t, p), x, mp.tanh)


SQRT_HALF_BITS = 0x3F3504F3  # the float sqrt(1/2)'s bits


def fit_log():
    half = float(np.array([SQRT_HALF_BITS], np.uint32).view(f32)[0])
    f = nodes(half - 1, 2 * half - 1, 6000)
    f = f[np.abs(f) > 1e-6]
    ratio = np.array([float((mp.log1p(v) - v) / mp.mpf(v) ** 2) for v in f])
    return P.polyfit(f, ratio, 8, w=f * f / np.abs([float(mp.log1p(v)) for v in f])).astype(f32)  # relative to log


def log32(x, q):
    sub = x < f32(2.0 ** -126)
    with np.errstate(over="ignore"):
        bits = np.where(sub, x * f32(2.0 ** 23), x).astype(f32).view(np.uint32).astype(np.int64)
    t = bits - SQRT_HALF_BITS
    e = ((t >> 23) - np.where(sub, 23, 0)).astype(f32)
    f = (((t & 0x7FFFFF) + SQRT_HALF_BITS).astype(np.uint32).view(f32) - f32(1)).astype(f32)
    y = fma((f * f).astype(f32), horner(q, f), f)
    return fma(e, np.full_like(e, LN2_F), fma(e, np.full_like(e, LN2_LO), y))


def check_log(q):
    rng = np.random.default_rng(0)
    x = np.concatenate([np.exp(rng.uniform(-103, 88, 1_000_000)), rng.uniform(0.5, 2, 500_000),
                        np.linspace(0.99, 1.01, 200_001), rng.uniform(1e-45, 1.2e-38, 100_000),
                        rng.uniform(0.7, 0.72, 100_000), rng.uniform(1.41, 1.42, 100_000)]).astype(f32)
    return units_off(log32(x[x > 0], q), x[x > 0], mp.log)


def check(q, e):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(0, 4.2, 1_700_000), np.linspace(0.99, 1.01, 200_001),
                        np.linspace(3.8, 4.0, 100_001), rng.uniform(0, 1e-2, 100_000)]).astype(f32)
    return units_off(erf32(x, q, e), x, mp.erf)


if __name__ == "__main__":
    q, e = fit()
    p = fit_exp()
    t = fit_tanh()
    l = fit_log()
    for what, (worst, exact) in (("erf", check(q, e)), ("exp", check_exp(p)), ("exp2", check_exp2(p)),
                                 ("tanh", check_tanh(t, p)), ("log", check_log(l))):
        print(f"// {what}: max {worst} unit(s) from the rounded value, {exact:.1%} exact")
    print(f"// ln 2 = {np.format_float_scientific(LN2_F, unique=True)}f + {np.format_float_scientific(LN2_LO, unique=True)}f")
    for name, c in (("kErfSmall", q), ("kErfLarge", e), ("kExp", p), ("kTanhSmall", t), ("kLog", l)):
        print(f"static const float {name}[] = {{  // from the highest degree")
        print("    " + ", ".join(np.format_float_scientific(v, unique=True) + "f" for v in c[::-1]) + "};")
