"""torch.fft against the CPU: fft / ifft / rfft / irfft / hfft / ihfft and their 2-d and n-d forms,
stft, over odd and even lengths, lengths 1 and prime, padding and trimming (n=, s=), every norm,
chosen and negative dims, real and complex inputs (conjugated, strided and 0-d-batch views),
float32 and float64, out= forms, gradients, conj_physical, and the CPU's errors.
"""

import pytest
import torch

from compare import check, check_grad
from conftest import to_dev

pytestmark = pytest.mark.filterwarnings("ignore:A window was not provided")


def make(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=torch.complex128).to(dtype)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def tol(dtype, n=8):
    real = dtype.to_real() if dtype.is_complex else dtype
    return dict(rtol=1e-5, atol=2e-6 * n) if real == torch.float32 else dict(rtol=1e-10, atol=1e-12 * n)


ONE_D = [torch.fft.fft, torch.fft.ifft, torch.fft.rfft, torch.fft.irfft, torch.fft.hfft, torch.fft.ihfft]
N_D = [torch.fft.fft2, torch.fft.ifft2, torch.fft.rfft2, torch.fft.irfft2, torch.fft.hfft2, torch.fft.ihfft2,
       torch.fft.fftn, torch.fft.ifftn, torch.fft.rfftn, torch.fft.irfftn, torch.fft.hfftn, torch.fft.ihfftn]
TAKES_COMPLEX = {torch.fft.fft, torch.fft.ifft, torch.fft.irfft, torch.fft.hfft, torch.fft.fft2, torch.fft.ifft2,
                 torch.fft.irfft2, torch.fft.hfft2, torch.fft.fftn, torch.fft.ifftn, torch.fft.irfftn, torch.fft.hfftn}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex64], ids=str)
@pytest.mark.parametrize("fn", ONE_D, ids=lambda f: f.__name__)
def test_one_dim(fn, dtype):
    if dtype.is_complex and fn not in TAKES_COMPLEX:
        pytest.skip("real input only")
    x = make((3, 8, 7), dtype)
    for n in (None, 1, 5, 8, 13, 16):
        for norm in (None, "forward", "ortho"):
            check(lambda t: fn(t, n=n, dim=1, norm=norm), x, **tol(dtype, 16), msg=f"n={n} norm={norm}")
    check(lambda t: fn(t, dim=-1), x, **tol(dtype))  # odd length
    check(lambda t: fn(t, dim=0), x, **tol(dtype))
    check(lambda t: fn(t[:, ::2, 1:]), x, **tol(dtype))  # strided view
    check(fn, make((11,), dtype), **tol(dtype, 11))  # prime length
    check(fn, make((1,), dtype), **tol(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.complex128], ids=str)
@pytest.mark.parametrize("fn", N_D, ids=lambda f: f.__name__)
def test_n_dim(fn, dtype):
    if dtype.is_complex and fn not in TAKES_COMPLEX:
        pytest.skip("real input only")
    x = make((2, 6, 5), dtype)
    check(fn, x, **tol(dtype, 30))
    check(lambda t: fn(t, s=(3, 10), dim=(1, 2), norm="ortho"), x, **tol(dtype, 30))
    check(lambda t: fn(t, dim=(0, 2), norm="forward"), x, **tol(dtype, 30))
    check(lambda t: fn(t, s=(4, 4)), x, **tol(dtype, 30))


def test_complex_views_and_conj():
    z = make((4, 6), torch.complex64)
    check(lambda t: torch.fft.fft(t.conj()), z, **tol(torch.float32))
    check(lambda t: torch.fft.ifft(t.mT), z, **tol(torch.float32))
    check(lambda t: torch.fft.irfft(t[:, 1:4].conj(), n=6), z, **tol(torch.float32))
    check(torch.conj_physical, z)
    check(lambda t: torch.conj_physical(t[:, ::2]), z)
    check(torch.conj_physical, make((3,)))
    zd = to_dev(z)
    zd.conj_physical_()
    torch.testing.assert_close(zd.cpu(), z.conj().resolve_conj())


def test_stft_and_empty_batch():
    x = make((100,))
    check(lambda t: torch.stft(t, n_fft=10, return_complex=True), x, **tol(torch.float32, 10))
    check(lambda t: torch.stft(t, n_fft=16, hop_length=4, window=torch.hann_window(16, device=t.device),
                               return_complex=True), x, **tol(torch.float32, 16))
    # no signals at all: the CPU's MKL rejects the plan ("Inconsistent configuration parameters");
    # the transform of nothing is an empty result of the right shape and dtype
    for fn, x, shape in ((lambda t: torch.fft.fft(t, dim=1), make((0, 5)), (0, 5)),
                         (torch.fft.rfft2, make((0, 4, 6)), (0, 4, 4))):
        y = fn(to_dev(x))
        assert y.shape == shape and y.dtype == torch.complex64 and y.device.type != "cpu"


def test_out_and_grad():
    x = make((3, 8))
    for fn in (torch.fft.fft, torch.fft.rfft, torch.fft.irfft, torch.fft.ifft):
        want = fn(x)
        out = to_dev(torch.empty(0, dtype=want.dtype))
        fn(to_dev(x), out=out)
        torch.testing.assert_close(out.cpu(), want, **tol(torch.float32))
    a = make((3, 8)).requires_grad_()
    check_grad(lambda t: torch.view_as_real(torch.fft.rfft(t, norm="ortho")), a, **tol(torch.float32, 8))
    check_grad(lambda t: torch.fft.irfft(torch.fft.rfft(t) * 2, n=8), a, **tol(torch.float32, 8))


def test_errors():
    check(torch.fft.fft, make((4,)).half())
    check(lambda t: torch.fft.fft(t, n=0), make((4,)))
    check(lambda t: torch.fft.fft(t, dim=2), make((4,)))
    check(lambda t: torch.fft.irfft(t, n=0), make((4,), torch.complex64))
    check(lambda t: torch.fft.rfft(t), make((4,), torch.complex64))
