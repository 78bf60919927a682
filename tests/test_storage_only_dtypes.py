"""Dtypes tiny stores but does not compute with: complex (cfloat, cdouble, chalf) and uint16/32/64.

Copies both ways, conversions to and from them, views through their real / signed view
(conjugate and negative views included), the ops that build them (complex, polar;
hash_tensor's uint64 result is in test_reductions) and the complex arithmetic tiny has:
mul and sgn, enough for polar's backward.  Everything is compared with the CPU, bit for bit where the CPU is exact.
"""

import warnings

import pytest
import torch

from compare import check
from conftest import DEV, IS_TINY, to_dev  # noqa: F401

COMPLEX = [torch.complex64, torch.complex128, torch.complex32]
UNSIGNED = [torch.uint16, torch.uint32, torch.uint64]


def _bits(t):
    """An exact, comparable form: complex as its real view, unsigned as the signed view."""
    if t.is_complex():
        return torch.view_as_real(t.resolve_conj())
    signed = {torch.uint16: torch.int16, torch.uint32: torch.int32, torch.uint64: torch.int64}.get(t.dtype)
    return t.view(signed) if signed is not None else t


def _same(actual, expected, exact=True):
    assert actual.device.type == DEV
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    a, e = _bits(actual.cpu()), _bits(expected)
    if exact:
        assert torch.equal(a, e) or torch.testing.assert_close(a, e, rtol=0, atol=0, equal_nan=True) is None
    else:
        torch.testing.assert_close(a, e, equal_nan=True)


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ComplexHalf is experimental; complex -> real discards imag
        yield


def _samples():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, generator=g)
    x[0, :4] = torch.tensor([float("inf"), -float("inf"), float("nan"), -0.0])
    return x


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_complex_roundtrip_and_conversions(dtype):
    x = _samples()
    z = torch.complex(x, x.flip(0))
    if dtype != torch.complex64:
        z = z.to(dtype)
    _same(to_dev(z), z)  # CPU -> device -> CPU
    for src in (x, x.double(), x.half(), (x * 3).long(), x > 0):  # real -> complex on the device
        _same(to_dev(src).to(dtype), src.to(dtype))
    _same(to_dev(x).t().to(dtype), x.t().to(dtype))  # non-contiguous source
    _same(to_dev(x)[1::2, ::3].to(dtype), x[1::2, ::3].to(dtype))
    _same(to_dev(x).to(dtype).t(), x.to(dtype).t())  # non-contiguous complex view
    _same(to_dev(torch.tensor(2.5)).to(dtype), torch.tensor(2.5).to(dtype))  # 0-d
    _same(to_dev(torch.empty(0, 3)).to(dtype), torch.empty(0, 3).to(dtype))  # empty
    _same(to_dev(x).to(dtype, memory_format=torch.channels_last) if x.dim() == 4 else to_dev(x).to(dtype),
          x.to(dtype))
    for other in COMPLEX:  # complex -> complex
        _same(to_dev(z).to(other), z.to(other))
    for real in (torch.float32, torch.float64):  # complex -> real keeps the real part
        _same(to_dev(z).to(real), z.to(real))
    _same(to_dev(z[1:]).to(torch.int64), z[1:].to(torch.int64))  # finite values: float -> int is UB beyond
    # real / imag are views of the device storage
    _same(to_dev(z).real, z.real)
    _same(to_dev(z).imag, z.imag)
    _same(torch.view_as_real(to_dev(z)), torch.view_as_real(z))
    if dtype != torch.complex32:
        _same(torch.view_as_complex(to_dev(torch.view_as_real(z)).contiguous()), z)


def test_complex_copy_into_views_and_broadcast():
    x = _samples()
    z = torch.zeros(4, 6, dtype=torch.complex64)
    zt = to_dev(z)
    zt[1:3].copy_(to_dev(x[:1]))  # broadcast a real row into a complex slice
    z[1:3].copy_(x[:1])
    _same(zt, z)
    zt.real.copy_(to_dev(x))  # write the real parts through the view
    z.real.copy_(x)
    _same(zt, z)
    zt[:, ::2] = to_dev(torch.complex(x, -x))[:, 1::2]
    z[:, ::2] = torch.complex(x, -x)[:, 1::2]
    _same(zt, z)
    # CPU complex into a device complex view, and a conjugated CPU source
    c = torch.complex(x, x * 2)
    zt.copy_(c.conj())
    _same(zt, c.conj().resolve_conj())


def test_complex_and_polar():
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(5, 1, generator=g), torch.randn(6, generator=g)
    for dt in (torch.float32, torch.float64, torch.float16):
        check(torch.complex, a.to(dt), b.to(dt), msg=f"complex {dt}")
        check(torch.polar, a.abs().to(dt), b.to(dt), msg=f"polar {dt}")
    check(torch.complex, a.t(), b[:5:2].reshape(3, 1), msg="complex strided")
    check(torch.complex, torch.tensor(1.0), torch.tensor(-2.0), msg="complex 0-d")
    check(torch.complex, torch.empty(0, 3), torch.empty(1, 3), msg="complex empty")
    for bad in ((a, b.double()), (a.long(), b.long()), (a.bfloat16(), b.bfloat16())):
        check(torch.complex, *bad, msg="complex dtype error")
        check(torch.polar, *bad, msg="polar dtype error")
    check(lambda x, y, o: torch.complex(x, y, out=o), a, b, torch.empty(0, dtype=torch.complex128), msg="out dtype")
    check(lambda x, y, o: (torch.complex(x, y, out=o), o)[1], a, b, torch.empty(2, dtype=torch.complex64),
          msg="out resized")
    check(lambda x, y, o: (torch.polar(x, y, out=o), o)[1], a.abs(), b, torch.empty(30, dtype=torch.complex64),
          msg="polar out")
    # gradients of complex() flow back through real / imag views of the device gradient
    x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
    go = torch.randn(5, 6, dtype=torch.complex64, generator=g)
    expected = torch.autograd.grad(torch.complex(x, y), (x, y), go)
    xt, yt = to_dev(a).requires_grad_(), to_dev(b).requires_grad_()
    actual = torch.autograd.grad(torch.complex(xt, yt), (xt, yt), to_dev(go))
    for e, t in zip(expected, actual):
        torch.testing.assert_close(t.cpu(), e)
    # and of x.to(complex)
    xt = to_dev(a).requires_grad_()
    (gt,) = torch.autograd.grad(xt.to(torch.complex128), xt, to_dev(go.to(torch.complex128)[:, :1]))
    x = a.clone().requires_grad_()
    (gc,) = torch.autograd.grad(x.to(torch.complex128), x, go.to(torch.complex128)[:, :1])
    torch.testing.assert_close(gt.cpu(), gc)


@pytest.mark.skipif(not IS_TINY, reason="what tiny does not compute with")
def test_other_complex_arithmetic_is_not_supported():
    zt = to_dev(torch.ones(3, dtype=torch.complex64))
    with pytest.raises(NotImplementedError, match="ComplexFloat is not supported"):
        torch.exp(zt)
    with pytest.raises(NotImplementedError, match="ComplexFloat is not supported"):
        zt + zt


@pytest.mark.parametrize("dtype", COMPLEX, ids=str)
def test_conj_and_neg_views(dtype):
    z = torch.complex(_samples(), _samples().flip(1)).to(dtype)
    _same(to_dev(z).conj(), z.conj().resolve_conj())
    _same(to_dev(z).conj().conj(), z)
    _same(to_dev(z).conj().t(), z.conj().t().resolve_conj())
    _same(to_dev(z).conj().to(torch.complex128), z.conj().to(torch.complex128))
    _same(to_dev(z).conj().clone(), z.conj().resolve_conj())
    _same(to_dev(z).conj().imag, z.conj().imag.resolve_neg())  # imag of a conjugate is a negative view
    _same(to_dev(z).conj().imag.clone(), z.conj().imag.clone())
    _same(to_dev(z).conj().real, z.real)


def test_complex_mul_and_sgn():
    g = torch.Generator().manual_seed(2)
    z = torch.randn(4, 5, dtype=torch.complex64, generator=g)
    z[0, 0] = 0
    w = torch.randn(5, dtype=torch.complex64, generator=g)
    x = torch.randn(4, 1, generator=g)
    check(torch.mul, z, w, msg="complex * complex, broadcast")
    check(lambda a, b: a.conj() * b, z, w, msg="conj * complex")
    check(torch.mul, z, x, msg="complex * real")
    check(torch.mul, x, w, msg="real * complex")
    check(lambda a: a * 1j, z, msg="complex * complex scalar")
    check(lambda a: a * 2.5, z, msg="complex * real scalar")
    check(lambda a: torch.tensor(2 - 1j) * a, x, msg="0-d CPU complex * real")
    check(torch.mul, z.double(), w.to(torch.complex128), msg="complex128")
    check(torch.mul, z.t(), w.reshape(5, 1), msg="strided")
    check(lambda a, b: a.clone().mul_(b), z, w, msg="mul_")
    check(lambda a, b: a.expand(4, 5).clone().mul_(b), x, w, msg="mul_ of a real tensor by a complex one: the CPU's error")
    check(lambda a, b, o: (torch.mul(a, b, out=o), o)[1], z, w, torch.empty(0, dtype=torch.complex128), msg="out=")
    check(lambda a, b, o: torch.mul(a, b, out=o), z, w, torch.empty(0), msg="out= real: the CPU's error")
    check(torch.sgn, z, msg="sgn (0 at 0)")
    check(torch.sgn, z.to(torch.complex128), msg="sgn complex128")
    check(lambda a: a.conj().sgn(), z, msg="sgn of a conjugate")
    check(lambda a: a.clone().sgn_(), z, msg="sgn_")
    check(torch.sgn, torch.empty(0, 2, dtype=torch.complex64), msg="sgn empty")
    check(torch.sgn, torch.tensor(3 - 4j), msg="sgn 0-d")


def test_polar_gradients():
    g = torch.Generator().manual_seed(3)
    a, b = torch.rand(4, 5, generator=g) + 0.1, torch.randn(5, generator=g)
    go = torch.randn(4, 5, dtype=torch.complex64, generator=g)
    x, y = a.clone().requires_grad_(), b.clone().requires_grad_()
    expected = torch.autograd.grad(torch.polar(x, y), (x, y), go)
    xt, yt = to_dev(a).requires_grad_(), to_dev(b).requires_grad_()
    actual = torch.autograd.grad(torch.polar(xt, yt), (xt, yt), to_dev(go))
    for t, e in zip(actual, expected):
        assert t.device.type == DEV
        torch.testing.assert_close(t.cpu(), e)


@pytest.mark.parametrize("dtype", UNSIGNED, ids=str)
def test_unsigned_roundtrip_and_conversions(dtype):
    bits = torch.iinfo(dtype).bits
    top = 2 ** (bits - 1)
    # the values as the signed type's bits (2^63 does not fit int64)
    vals = [0, 1, 5, top - 1, top, top + 7, 2 * top - 1]
    u = torch.tensor([v - 2 * top if v >= top else v for v in vals]).to(_bits(torch.empty(0, dtype=dtype)).dtype)
    u = u.view(dtype)
    _same(to_dev(u), u)
    _same(to_dev(u)[1::2], u[1::2])
    _same(to_dev(u.reshape(7, 1).expand(7, 3).t().contiguous()), u.reshape(7, 1).expand(7, 3).t().contiguous())
    # signed integers and bools convert by their bits (two's complement), as on the CPU
    s = torch.tensor([-1, 0, 3, -(2 ** 15), 2 ** 15 - 1])
    _same(to_dev(s).to(dtype), s.to(dtype))
    _same(to_dev(s > 0).to(dtype), (s > 0).to(dtype))
    # unsigned -> narrower or equally wide integers, and bool
    for dst in (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool, dtype):
        if dst == torch.bool or torch.iinfo(dst).bits <= bits:
            _same(to_dev(u).to(dst), u.to(dst))


@pytest.mark.skipif(not IS_TINY, reason="conversions tiny does not compute")
def test_unsigned_float_conversions_raise():
    with pytest.raises(NotImplementedError, match="is not supported on the tiny device"):
        to_dev(torch.ones(3)).to(torch.uint64)
    with pytest.raises(NotImplementedError, match="is not supported on the tiny device"):
        to_dev(torch.ones(3, dtype=torch.uint32)).to(torch.float32)
