"""Fits the coefficients of the CPU code generator's float32 erf (llvm_codegen.cpp, erf_f32).

    |x| < 1:         erf(x) = x + x * q(x^2)          q of degree 6 (q = erf(x)/x - 1: the constant
                                                        2/sqrt(pi) - 1 rounds with a small error
                                                        next to the x added, where x * 1.128 would
                                                        round twice)
    1 <= |x| < X1:   erf(x) = 1 - e(|x| - MID)        e of degree 14 approximates erfc: its rounding
                                                        errors scale with erfc (at most 0.16)
    |x| >= X1:       erf(x) = 1                       X1: where erfc falls to half a unit of 1

Least squares on Chebyshev nodes (near minimax), relative for q, absolute for e; then the
float32 evaluation (FMA Horner) is checked against mpmath on 2 million points: every result
within one unit of the correctly rounded value. Prints the coefficients as C++ initializers.

    python scripts/fit_erf.py
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


def check(q, e):
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(0, 4.2, 1_700_000), np.linspace(0.99, 1.01, 200_001),
                        np.linspace(3.8, 4.0, 100_001), rng.uniform(0, 1e-2, 100_000)]).astype(f32)
    want = np.array([float(mp.erf(float(v))) for v in x]).astype(f32)
    units = np.abs(erf32(x, q, e).view(np.int32).astype(np.int64) - want.view(np.int32))
    return units.max(), (units == 0).mean()


if __name__ == "__main__":
    q, e = fit()
    worst, exact = check(q, e)
    print(f"// max {worst} unit(s) from the rounded value, {exact:.1%} exact")
    for name, c in (("kErfSmall", q), ("kErfLarge", e)):
        print(f"static const float {name}[] = {{  // from the highest degree")
        print("    " + ", ".join(np.format_float_scientific(v, unique=True) + "f" for v in c[::-1]) + "};")
