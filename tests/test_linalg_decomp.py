"""QR, eigh, SVD and what is built on them, against the CPU: geqrf, householder_product, ormqr,
linalg.qr (every mode), eigh / eigvalsh, matrix_sqrth, svd / svdvals (full and reduced), pinv,
matrix_rank, matrix_norm / cond ('nuc', 2), polar, lstsq (every driver), matrix_exp.

Shapes cover square, tall and wide matrices, batches, 1x1 and empty ones, even and odd sizes
(the Jacobi rounds pair indices differently), repeated and zero singular values; dtypes
float32 and float64; out= forms, backward through the decompositions, and the CPU's errors.
Eigenvectors and singular vectors are unique only up to sign, so they are compared through
sign-free quantities (|V|, U diag(S) Vh, orthogonality), as PyTorch's own tests do.
"""

import pytest
import torch

from compare import check, check_grad
from conftest import to_dev

SHAPES = [(5, 5), (4, 4), (6, 4), (4, 6), (3, 5, 5), (2, 7, 3), (2, 2), (1, 1), (1, 3), (0, 0), (0, 3, 3), (3, 0),
          (2, 6, 6), (16, 16)]
DTYPES = [torch.float32, torch.float64]


def make(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)


def tol(dtype, scale=1.0):
    return dict(rtol=2e-5 * scale, atol=2e-5 * scale) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)


def close(got, want, dtype, scale=1.0, msg=""):
    assert got.device.type != "cpu" or got.numel() == 0 or True
    torch.testing.assert_close(got.cpu(), want, **tol(dtype, scale), msg=lambda m: f"{msg}: {m}")


def eye_like(x):
    return torch.eye(x.shape[-1], dtype=x.dtype).expand(x.shape[:-2] + (x.shape[-1], x.shape[-1]))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_qr_family(dtype, shape):
    a = make(shape, dtype)
    check(torch.geqrf, a, **tol(dtype))  # LAPACK's reflectors and signs, exactly
    for mode in ("reduced", "complete", "r"):
        check(lambda x: torch.linalg.qr(x, mode=mode), a, **tol(dtype), msg=mode)
    h, tau = torch.geqrf(a)
    if shape[-2] >= shape[-1]:
        check(torch.linalg.householder_product, h, tau, **tol(dtype))
    for left in (True, False):
        for transpose in (False, True):
            c = make((*shape[:-2], shape[-2], 3) if left else (*shape[:-2], 3, shape[-2]), dtype, 1)
            check(lambda x, t, y: torch.ormqr(x, t, y, left=left, transpose=transpose), h, tau, c, **tol(dtype),
                  msg=f"ormqr left={left} transpose={transpose}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [s for s in SHAPES if s[-1] == s[-2]], ids=str)
def test_eigh(dtype, shape):
    a = make(shape, dtype)
    scale = 1 + shape[-1] / 4
    for uplo in ("L", "U"):
        w, v = torch.linalg.eigh(to_dev(a), UPLO=uplo)
        cw, cv = torch.linalg.eigh(a, UPLO=uplo)
        close(w, cw, dtype, scale, "eigenvalues")
        close(v.abs(), cv.abs(), dtype, scale * 10, "|eigenvectors|")
        sym = cv @ torch.diag_embed(cw) @ cv.mT
        close(v @ torch.diag_embed(w) @ v.mT, sym, dtype, scale * 10, "V diag(w) V^T")
        check(lambda x: torch.linalg.eigvalsh(x, UPLO=uplo), a, **tol(dtype, scale))
    spd = a @ a.mT + torch.eye(shape[-1], dtype=dtype)
    check(torch.linalg.matrix_sqrth, spd, **tol(dtype, 10 * scale))


def test_eigh_repeated_and_diagonal():
    for a in (torch.eye(4), torch.diag(torch.tensor([3.0, -1.0, 3.0, 0.0])), torch.zeros(3, 3),
              torch.ones(5, 5)):  # repeated eigenvalues: only the values are unique
        check(torch.linalg.eigvalsh, a, rtol=1e-5, atol=1e-5)
        w, v = torch.linalg.eigh(to_dev(a))
        close(v.mT @ v, torch.eye(a.shape[-1]), torch.float32, 1, "orthonormal")
        close(v @ torch.diag(w) @ v.mT, a, torch.float32, 1, "reconstruction")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_svd(dtype, shape):
    a = make(shape, dtype)
    scale = 1 + max(shape[-2:]) / 4
    for full in (False, True):
        u, s, vh = torch.linalg.svd(to_dev(a), full_matrices=full)
        cu, cs, cvh = torch.linalg.svd(a, full_matrices=full)
        assert (u.shape, s.shape, vh.shape) == (cu.shape, cs.shape, cvh.shape)
        close(s, cs, dtype, scale, "S")
        k = s.shape[-1]
        close(u[..., :k].abs(), cu[..., :k].abs(), dtype, 10 * scale, "|U|")
        close(u[..., :k] @ vh[..., :k, :], cu[..., :k] @ cvh[..., :k, :], dtype, 10 * scale, "U Vh")
        close(u.mT @ u, eye_like(u), dtype, scale, "U orthonormal")
        close(vh @ vh.mT, eye_like(vh.mT), dtype, scale, "Vh orthonormal")
    check(torch.linalg.svdvals, a, **tol(dtype, scale))
    check(lambda x: torch.svd(x).S, a, **tol(dtype, scale))
    check(torch.linalg.pinv, a, **tol(dtype, 10 * scale))
    check(torch.linalg.matrix_rank, a)
    if shape[-1] and shape[-2]:
        check(lambda x: torch.linalg.matrix_norm(x, "nuc"), a, **tol(dtype, scale))
        check(lambda x: torch.linalg.matrix_norm(x, 2), a, **tol(dtype, scale))
        check(lambda x: torch.linalg.matrix_norm(x, -2), a, **tol(dtype, scale))
    if shape[-2] >= shape[-1]:
        check(torch.linalg.polar, a, **tol(dtype, 10 * scale))
    if shape[-1] == shape[-2] and shape[-1]:
        check(torch.linalg.cond, a, **tol(dtype, 100 * scale))


def test_svd_rank_deficient():
    a = make((6, 4))
    a[:, 3] = a[:, 1]  # one zero singular value: U still orthonormal
    b = torch.zeros(3, 3)
    for x in (a, a.mT, b, torch.ones(4, 4)):
        u, s, vh = torch.linalg.svd(to_dev(x))
        close(s, torch.linalg.svdvals(x), torch.float32, 1, "S")
        close(u.mT @ u, eye_like(u), torch.float32, 1, "U orthonormal")
        close(u[..., :s.shape[-1]] @ torch.diag_embed(s) @ vh[..., :s.shape[-1], :], x, torch.float32, 1, "A")
        check(torch.linalg.matrix_rank, x)
        check(torch.linalg.pinv, x, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,bshape", [((6, 4), (6, 2)), ((4, 6), (4, 2)), ((5, 5), (5,)), ((2, 6, 3), (2, 6)),
                                          ((2, 6, 3), (1, 6, 2)), ((3, 0), (3, 2)), ((0, 3), (0, 2))], ids=str)
def test_lstsq(dtype, shape, bshape):
    a, b = make(shape, dtype), make(bshape, dtype, 1)
    for driver in ("gels", "gelsy", "gelsd", "gelss"):
        check(lambda x, y: torch.linalg.lstsq(x, y, driver=driver), a, b, **tol(dtype, 10), msg=driver)
    d = make((6, 4), dtype)
    d[:, 3] = d[:, 0]  # rank 3: the minimum-norm solution, rank and no residuals
    for driver in ("gelsy", "gelsd", "gelss"):
        check(lambda x, y: torch.linalg.lstsq(x, y, driver=driver), d, make((6, 2), dtype, 1), **tol(dtype, 100),
              msg=f"rank-deficient {driver}")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matrix_exp(dtype):
    for shape in ((5, 5), (3, 4, 4), (1, 1), (0, 0), (2, 0, 0)):
        a = make(shape, dtype)
        # the reference is the CPU's float64 result: its float32 one is less accurate than tiny's
        torch.testing.assert_close(torch.linalg.matrix_exp(to_dev(a)).cpu(),
                                   torch.linalg.matrix_exp(a.double()).to(dtype), **tol(dtype))
    big = make((4, 4), dtype) * 10
    want = torch.linalg.matrix_exp(big.double())
    got = torch.linalg.matrix_exp(to_dev(big)).cpu().double()
    assert ((got - want).abs().max() / want.abs().max()).item() < (1e-6 if dtype == torch.float32 else 1e-13)
    check(torch.linalg.matrix_exp, torch.zeros(3, 3))
    check(torch.linalg.matrix_exp, torch.diag(torch.tensor([1.0, -2.0, 0.5])), rtol=1e-6, atol=1e-6)


def test_decompositions_backward():
    a = make((4, 4)).requires_grad_()
    check_grad(lambda x: torch.linalg.eigvalsh(x), a, rtol=1e-4, atol=1e-4)
    check_grad(lambda x: torch.linalg.svdvals(x), a, rtol=1e-4, atol=1e-4)
    check_grad(lambda x: torch.linalg.qr(x)[1], a, rtol=1e-4, atol=1e-4)
    check_grad(lambda x: torch.linalg.matrix_exp(x * 0.3), a, rtol=1e-4, atol=1e-4)
    check_grad(lambda x: torch.linalg.pinv(x), a, rtol=1e-3, atol=1e-3)
    b = make((6, 3), seed=2).requires_grad_()
    check_grad(lambda x: torch.linalg.lstsq(x, torch.ones(6, 2, device=x.device)).solution, b, rtol=1e-4, atol=1e-4)


def test_out_variants():
    a = make((2, 5, 4))

    def run(fn, *dtypes):
        outs = [to_dev(torch.empty(0, dtype=d)) for d in dtypes]
        fn(to_dev(a), outs)
        return [o.cpu() for o in outs]
    f = torch.float32
    close(run(lambda x, o: torch.linalg.svdvals(x, out=o[0]), f)[0], torch.linalg.svdvals(a), f, 1, "svdvals out")
    got = run(lambda x, o: torch.linalg.qr(x, out=o), f, f)
    for g, w in zip(got, torch.linalg.qr(a)):
        close(g, w, f, 1, "qr out")
    got = run(lambda x, o: torch.geqrf(x, out=o), f, f)
    for g, w in zip(got, torch.geqrf(a)):
        close(g, w, f, 1, "geqrf out")
    got = run(lambda x, o: torch.linalg.polar(x, out=o), f, f)
    for g, w in zip(got, torch.linalg.polar(a)):
        close(g, w, f, 10, "polar out")
    sq = a[:, :4] @ a[:, :4].mT
    got = run(lambda x, o: torch.linalg.eigvalsh(x[:, :4] @ x[:, :4].mT, out=o[0]), f)
    close(got[0], torch.linalg.eigvalsh(sq), f, 1, "eigvalsh out")
    got = run(lambda x, o: torch.ops.aten.linalg_matrix_exp.out(x[:, :4], out=o[0]), f)
    close(got[0], torch.linalg.matrix_exp(a[:, :4].double()).float(), f, 1, "matrix_exp out")


def test_errors():
    for x in (torch.ones(3), torch.ones(3, 3).long(), torch.ones(3, 3).half()):
        for fn in (torch.linalg.svd, torch.linalg.svdvals, torch.geqrf, torch.linalg.qr, torch.linalg.matrix_exp):
            if fn is not torch.linalg.matrix_exp or x.dtype != torch.half:  # half: see below
                check(fn, x, msg=f"{fn.__name__} {x.shape} {x.dtype}")
    for fn in (torch.linalg.eigh, torch.linalg.eigvalsh, torch.linalg.matrix_sqrth, torch.linalg.matrix_exp):
        check(fn, torch.ones(3, 4), msg=f"{fn.__name__} not square")
    check(lambda x: torch.linalg.eigh(x, UPLO="X"), torch.eye(3))
    check(lambda x: torch.linalg.qr(x, mode="full"), torch.eye(3))
    check(torch.linalg.polar, torch.ones(3, 5))
    check(lambda x: torch.linalg.svd(x, driver="gesvd"), torch.eye(3))
    check(torch.linalg.householder_product, torch.ones(3, 4), torch.ones(3))
    check(torch.linalg.householder_product, torch.ones(4, 3), torch.ones(4))
    check(torch.ormqr, torch.ones(4, 3), torch.ones(3), torch.ones(5, 2))
    check(lambda x, y: torch.linalg.lstsq(x, y, driver="gelsx"), torch.eye(3), torch.ones(3, 2))
    check(torch.linalg.lstsq, torch.eye(3), torch.ones(4, 2))
    check(torch.linalg.lstsq, torch.eye(3), torch.ones(3, 2).double())
    check(torch.linalg.lstsq, torch.ones(3), torch.ones(3))
    for x in (torch.ones(3, 3).long(), torch.ones(3, 3).half()):
        for fn in (torch.linalg.eigh, torch.linalg.matrix_sqrth, torch.linalg.polar, lambda y: torch.linalg.lstsq(y, y),
                   lambda y: torch.linalg.householder_product(y, y[0])):
            check(fn, x, msg=f"{x.dtype}")
    # 16-bit floats compute too; the CPU's own float16 matrix_exp of ones(3, 3) is inf and NaN (its
    # intermediate powers overflow), so the reference is its float32 result rounded
    for x in (make((3, 3)).half(), torch.ones(3, 3).half()):
        torch.testing.assert_close(torch.linalg.matrix_exp(to_dev(x)).cpu(),
                                   torch.linalg.matrix_exp(x.float()).half(), rtol=2e-3, atol=2e-3)
