"""Linear algebra against the CPU: mm, addmm, bmm, baddbmm, addbmm, mv, addmv, dot, vdot,
addr / outer / ger, matmul of every rank pair (with broadcasting), einsum, tensordot,
kron, inner, linalg.vecdot / multi_dot, trace, diag, diag_embed, tril / triu.

Inputs cover the float dtypes (16-bit floats accumulate in float32), integers, empty
dims, transposed and strided operands, scalar beta / alpha including beta = 0 with NaN
in self, out= and in-place forms, and the CPU's error messages for bad shapes / dtypes.
"""

import pytest
import torch

from compare import check, check_grad, gradcheck, kernels_of, require_tiny_kernels
from conftest import FLOAT_DTYPES, IS_TINY, to_dev

MM_DTYPES = FLOAT_DTYPES + [torch.int64, torch.int32, torch.uint8, torch.int8]


def make(shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    if dtype == torch.uint8:
        return torch.randint(0, 5, shape, generator=g, dtype=dtype)
    return torch.randint(-4, 5, shape, generator=g).to(dtype)


def tol(dtype, k=8):
    """Sums of k products: 16-bit results may differ by an ulp of the sum's magnitude."""
    if dtype == torch.float16:
        return dict(rtol=2e-3, atol=2e-3 * k**0.5)
    if dtype == torch.bfloat16:
        return dict(rtol=1.6e-2, atol=1.6e-2 * k**0.5)
    if dtype == torch.float32:
        return dict(rtol=1e-5, atol=1e-5 * k**0.5)
    return {}


# ---------------------------------------------------------------- mm / addmm


@pytest.mark.parametrize("dtype", MM_DTYPES, ids=str)
def test_mm(dtype):
    a, b = make((5, 7), dtype), make((7, 3), dtype, seed=1)
    check(lambda a, b: a @ b, a, b, **tol(dtype, 7))
    check(lambda a, b: torch.mm(b.t(), a.t()), a, b, **tol(dtype, 7))  # transposed operands
    check(lambda a, b: torch.mm(a[::2, 1:], b[1:, ::2]), a, b, **tol(dtype, 6))  # strided
    check(lambda a, b: torch.mm(a[:, :1].expand(5, 4), b[:4]), a, b, **tol(dtype, 4))  # overlapping


def test_mm_shapes_and_errors():
    check(lambda a, b: a @ b, make((2, 0)), make((0, 3)))
    check(lambda a, b: a @ b, make((0, 4)), make((4, 3)))
    check(lambda a, b: a @ b, make((3, 4)), make((4, 0)))
    check(lambda a, b: torch.mm(a, b), make((2, 3)), make((2, 3)))
    check(lambda a, b: torch.mm(a, b), make((2, 3)), make((3,)))
    check(lambda a, b: torch.mm(a, b), make((3,)), make((3, 2)))
    check(lambda a, b: torch.mm(a, b), make((2, 3)), make((3, 2), torch.float64))
    check(lambda a, b: torch.mm(a, b), make((2, 3), torch.bool), make((3, 2), torch.bool))
    check(lambda a, b: torch.mm(a, b), make((2, 3), torch.int32), make((3, 2), torch.int64))


def test_mm_half_accumulates_in_float32():
    # 4096 products of ~1: a float16 running sum would be off by several units
    a = (1 + 0.01 * make((4, 4096), torch.float64)).half()
    b = (1 + 0.01 * make((4096, 3), torch.float64, seed=1)).half()
    check(lambda a, b: a @ b, a, b, rtol=2e-3, atol=0)
    check(lambda a, b: a.bfloat16() @ b.bfloat16(), a, b, rtol=1.6e-2, atol=0)


@pytest.mark.filterwarnings("ignore:An output with one or more elements was resized")
def test_mm_out():
    a, b = make((3, 4)), make((4, 5), seed=1)
    check(lambda a, b: torch.mm(a, b, out=torch.empty(0, device=a.device)), a, b, **tol(torch.float32))
    check(lambda a, b: torch.mm(a, b, out=torch.empty(0, dtype=torch.float64, device=a.device)), a, b)
    check(lambda a, b: torch.mm(a, b, out=torch.empty(7, device=a.device)), a, b, **tol(torch.float32))

    def into_view(a, b):
        y = torch.zeros(5, 8, device=a.device)
        torch.mm(a, b, out=y.t()[2:5])
        return y

    check(into_view, a, b, **tol(torch.float32))


@pytest.mark.parametrize("dtype", MM_DTYPES, ids=str)
def test_addmm(dtype):
    a, b = make((4, 6), dtype), make((6, 3), dtype, seed=1)
    t = tol(dtype, 6)
    for self_shape in [(4, 3), (3,), (1, 3), (4, 1), ()]:
        c = make(self_shape, dtype, seed=2)
        for beta, alpha in [(1, 1), (0, 1), (2, 3), (1, 0)] + ([(0.5, -1.5)] if dtype.is_floating_point else []):
            check(lambda c, a, b: torch.addmm(c, a, b, beta=beta, alpha=alpha), c, a, b,
                  msg=f"{self_shape} {beta} {alpha}", **t)
    check(lambda c, a, b: torch.addmm(c.t(), b.t(), a.t()), make((4, 3), dtype), a, b, **t)


def test_addmm_beta_zero_ignores_nan_and_errors():
    a, b = make((2, 3)), make((3, 2), seed=1)
    nan = torch.full((2, 2), float("nan"))
    check(lambda c, a, b: torch.addmm(c, a, b, beta=0), nan, a, b, **tol(torch.float32))
    check(lambda c, a, b: torch.addmm(c, a, b, beta=1), nan, a, b)
    check(lambda c, a, b: torch.addmm(c, a, b), make((3, 3)), a, b)
    check(lambda c, a, b: torch.addmm(c, a, b), make((2, 2), torch.float64), a, b)
    check(lambda c, a, b: torch.addmm(c, a, b), make((2, 2)), a, b.double())
    check(lambda c, a, b: torch.addmm(c, a, b), make((2, 2)), a[0], b)
    check(lambda c, a, b: torch.addmm(c, a, b), make((2, 2)), a, b[0])
    check(lambda c, a, b: torch.addmm(c, a, b), make((2, 2)), a, a)
    ints = [make((2, 2), torch.int64), make((2, 3), torch.int64), make((3, 2), torch.int64)]
    check(lambda c, a, b: torch.addmm(c, a, b, alpha=0.5, beta=2.7), *ints)
    check(lambda c, a, b: torch.addmm(c, a, b), *[t.bool() for t in ints])


def test_addmm_out_inplace():
    a, b = make((2, 3)), make((3, 4), seed=1)
    t = tol(torch.float32)
    check(lambda c, a, b: torch.addmm(c, a, b, out=torch.empty(0, device=a.device)), make((4,)), a, b, **t)
    check(lambda c, a, b: torch.addmm(c, a, b, out=torch.empty(0, dtype=torch.float64, device=a.device)),
          make((4,)), a, b)
    check(lambda c, a, b: c.clone().addmm_(a, b, beta=0.5, alpha=2), make((2, 4)), a, b, **t)
    check(lambda c, a, b: c.clone().t().addmm_(b.t(), a.t()), make((4, 2)), a, b, **t)
    check(lambda c, a, b: c.clone().addmm_(a, b), make((4,)), a, b)  # self must already have the shape
    check(lambda c, a, b: c.clone().t().addmm_(a, b), make((4, 2)), a, b)
    check(lambda c, m, v: c.clone().addmv_(m, v), make((1,)), a, b[:, 0])
    check(lambda c, x, y: c.clone().baddbmm_(x, y), make((4,)), make((2, 3, 5)), make((2, 5, 4)))


def test_addmm_activation():
    a, b, c = make((5, 6)), make((6, 4), seed=1), make((4,), seed=2)
    for gelu in [False, True]:
        check(lambda c, a, b: torch._addmm_activation(c, a, b, use_gelu=gelu), c, a, b, **tol(torch.float32))
        check(lambda c, a, b: torch._addmm_activation(c, a, b, beta=0.5, alpha=2, use_gelu=gelu), c, a, b,
              **tol(torch.float32))


# ---------------------------------------------------------------- bmm / baddbmm / addbmm


@pytest.mark.parametrize("dtype", MM_DTYPES, ids=str)
def test_bmm(dtype):
    a, b = make((3, 4, 5), dtype), make((3, 5, 2), dtype, seed=1)
    t = tol(dtype, 5)
    check(lambda a, b: torch.bmm(a, b), a, b, **t)
    check(lambda a, b: torch.bmm(b.transpose(1, 2), a.transpose(1, 2)), a, b, **t)
    check(lambda a, b: torch.bmm(a[::2], b[::2]), a, b, **t)
    for beta, alpha in [(1, 1), (0, 2), (2, 1)]:
        for c in [make((3, 4, 2), dtype, seed=2), make((4, 2), dtype, seed=2), make((1, 1, 2), dtype, seed=2)]:
            check(lambda c, a, b: torch.baddbmm(c, a, b, beta=beta, alpha=alpha), c, a, b, **t)
            check(lambda c, a, b: torch.addbmm(c[0] if c.dim() == 3 else c, a, b, beta=beta, alpha=alpha), c, a, b,
                  **tol(dtype, 15))


def test_bmm_errors_out_inplace():
    a, b, c = make((2, 2, 3)), make((2, 3, 2), seed=1), make((2, 2, 2), seed=2)
    check(lambda a, b: torch.bmm(a, b), a, make((3, 3, 2)))
    check(lambda a, b: torch.bmm(a, b), a, make((2, 2, 2)))
    check(lambda a, b: torch.bmm(a, b), a[0], b)
    check(lambda a, b: torch.bmm(a, b), a, b[0])
    check(lambda a, b: torch.bmm(a, b), a, b.double())
    check(lambda a, b: torch.bmm(a, b), a.bool(), b.bool())
    check(lambda c, a, b: torch.baddbmm(c, a, b), make((3, 2, 2)), a, b)
    check(lambda c, a, b: torch.baddbmm(c, a, b), c.double(), a, b)
    check(lambda c, a, b: torch.addbmm(c, a, b), make((3, 2)), a, b)
    check(lambda c, a, b: torch.addbmm(c, a, b), make((2, 2)), a, make((3, 3, 2)))
    check(lambda c, a, b: torch.addbmm(c, a, b), make((2, 2)), a, make((2, 4, 2)))
    check(lambda c, a, b: torch.addbmm(c, a, b), make((2, 2)).double(), a, b)
    t = tol(torch.float32)
    check(lambda a, b: torch.bmm(a, b, out=torch.empty(0, device=a.device)), a, b, **t)
    check(lambda a, b: torch.bmm(a, b, out=torch.empty(0, dtype=torch.float64, device=a.device)), a, b)
    check(lambda c, a, b: torch.baddbmm(c, a, b, out=torch.empty(0, device=a.device)), c, a, b, **t)
    check(lambda c, a, b: c.clone().baddbmm_(a, b, alpha=2), c, a, b, **t)
    check(lambda c, a, b: torch.addbmm(c[0], a, b, out=torch.empty(0, device=a.device)), c, a, b, **t)
    check(lambda c, a, b: c[0].clone().addbmm_(a, b, beta=0), c, a, b, **t)
    check(lambda a, b: torch.bmm(a, b), make((0, 2, 3)), make((0, 3, 4)))
    check(lambda a, b: torch.bmm(a, b), make((2, 2, 0)), make((2, 0, 4)))


# ---------------------------------------------------------------- mv / addmv / dot / vdot


@pytest.mark.parametrize("dtype", MM_DTYPES, ids=str)
def test_mv_addmv(dtype):
    m, v = make((5, 7), dtype), make((7,), dtype, seed=1)
    t = tol(dtype, 7)
    check(lambda m, v: torch.mv(m, v), m, v, **t)
    check(lambda m, v: m.t().mv(v[:5]), m, v, **t)
    check(lambda m, v: torch.mv(m[::2, ::2], v[::2]), m, v, **t)
    for c in [make((5,), dtype, seed=2), make((1,), dtype, seed=2), make((), dtype, seed=2)]:
        for beta, alpha in [(1, 1), (0, 1), (3, 2)]:
            check(lambda c, m, v: torch.addmv(c, m, v, beta=beta, alpha=alpha), c, m, v, **t)


def test_mv_addmv_errors_out_inplace():
    m, v, c = make((2, 3)), make((3,), seed=1), make((2,), seed=2)
    check(lambda m, v: torch.mv(m, v), m, make((2,)))
    check(lambda m, v: torch.mv(m, v), m, make((3, 1)))
    check(lambda m, v: torch.mv(m, v), make((3,)), v)
    check(lambda m, v: torch.mv(m, v), m, v.double())
    check(lambda m, v: torch.mv(m, v), m.bool(), v.bool())
    check(lambda c, m, v: torch.addmv(c, m, v), make((3,)), m, v)
    check(lambda c, m, v: torch.addmv(c, m, v), c, m, make((4,)))
    check(lambda c, m, v: torch.addmv(c, m, v), c.double(), m, v)
    check(lambda c, m, v: torch.addmv(c, m, v), make((2, 1)), m, v)
    check(lambda c, m, v: torch.addmv(c, m, v, beta=0), torch.full((2,), float("nan")), m, v)
    t = tol(torch.float32)
    check(lambda m, v: torch.mv(m, v, out=torch.empty(0, device=m.device)), m, v, **t)
    check(lambda c, m, v: torch.addmv(c, m, v, out=torch.empty(0, device=m.device)), c, m, v, **t)
    check(lambda c, m, v: c.clone().addmv_(m, v, alpha=0.5), c, m, v, **t)
    check(lambda m, v: torch.mv(m, v), make((0, 3)), v)
    check(lambda m, v: torch.mv(m, v), make((2, 0)), make((0,)))


@pytest.mark.parametrize("dtype", MM_DTYPES + [torch.bool], ids=str)
def test_dot_vdot(dtype):
    a, b = make((9,), dtype), make((9,), dtype, seed=1)
    check(lambda a, b: torch.dot(a, b), a, b, **tol(dtype, 9))
    check(lambda a, b: torch.vdot(a, b), a, b, **tol(dtype, 9))
    check(lambda a, b: torch.dot(a[::2], b[1::2]), a, b, **tol(dtype, 9))
    check(lambda a, b: a @ b, a, b, **tol(dtype, 9))


def test_dot_errors_and_edge_cases():
    a = make((3,))
    check(lambda a, b: torch.dot(a, b), a, make((4,)))
    check(lambda a, b: torch.dot(a, b), a, make((3, 1)))
    check(lambda a, b: torch.dot(a, b), a, a.double())
    check(lambda a, b: torch.vdot(a, b), a, make((2,)))
    check(lambda a, b: torch.vdot(a, b), a, make((3, 1)))
    check(lambda a, b: torch.dot(a, b), make((0,)), make((0,)))
    check(lambda a, b: torch.dot(a, b, out=torch.empty(0, device=a.device)), a, a)
    check(lambda a, b: torch.dot(a, b, out=torch.empty(0, dtype=torch.float64, device=a.device)), a, a)


# ---------------------------------------------------------------- addr / outer


@pytest.mark.parametrize("dtype", MM_DTYPES + [torch.bool], ids=str)
def test_addr_outer(dtype):
    u, v = make((4,), dtype), make((5,), dtype, seed=1)
    c = make((4, 5), dtype, seed=2)
    check(lambda u, v: torch.outer(u, v), u, v)
    check(lambda u, v: torch.ger(u, v), u, v)
    check(lambda c, u, v: torch.addr(c, u, v), c, u, v, **tol(dtype, 2))
    check(lambda c, u, v: torch.addr(c[0], u, v), c, u, v, **tol(dtype, 2))
    if dtype == torch.bool:
        for beta, alpha in [(False, True), (True, False), (0.5, True)]:
            check(lambda c, u, v: torch.addr(c, u, v, beta=beta, alpha=alpha), c, u, v)
    else:
        for beta, alpha in [(0, 2), (3, 1), (0.5, 1), (1, -1.5)]:
            check(lambda c, u, v: torch.addr(c, u, v, beta=beta, alpha=alpha), c, u, v, **tol(dtype, 2))
    check(lambda c, u, v: c.clone().addr_(u, v), c, u, v, **tol(dtype, 2))
    check(lambda c, u, v: torch.addr(c, u, v, out=torch.empty(0, dtype=dtype, device=c.device)), c, u, v,
          **tol(dtype, 2))


def test_addr_promotion_and_errors():
    u, v, c = make((2,)), make((3,), seed=1), make((2, 3), seed=2)
    check(lambda c, u, v: torch.addr(c, u, v), c.double(), u, v)
    check(lambda c, u, v: torch.addr(c, u, v), c, u.int(), v.half())
    check(lambda c, u, v: torch.addr(c, u, v), c, u, make((4,)))
    check(lambda c, u, v: torch.addr(c, u, v), c, u[None], v)
    check(lambda c, u, v: torch.addr(c, u, v), c, u, v[None])
    check(lambda c, u, v: torch.addr(c, u, v, beta=0), torch.full((2, 3), float("nan")), u, v)
    check(lambda c, u, v: torch.addr(c, u, v, out=torch.empty(0, dtype=torch.int64, device=c.device)), c, u, v)


# ---------------------------------------------------------------- matmul and composites


MATMUL_SHAPES = [
    ((5,), (5,)),
    ((5,), (5, 3)),
    ((4, 5), (5,)),
    ((4, 5), (5, 3)),
    ((2, 4, 5), (5,)),
    ((5,), (2, 5, 3)),
    ((2, 4, 5), (5, 3)),
    ((4, 5), (2, 5, 3)),
    ((2, 4, 5), (2, 5, 3)),
    ((3, 1, 4, 5), (2, 5, 3)),
    ((2, 1, 4, 5), (1, 3, 5, 2)),
    ((0, 4, 5), (5, 3)),
    ((4, 0), (0, 3)),
]


@pytest.mark.parametrize("sa,sb", MATMUL_SHAPES, ids=[f"{a}@{b}" for a, b in MATMUL_SHAPES])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64], ids=str)
def test_matmul_ranks(sa, sb, dtype):
    check(lambda a, b: torch.matmul(a, b), make(sa, dtype), make(sb, dtype, seed=1), **tol(dtype, 5))


def test_matmul_errors_and_noncontiguous():
    check(lambda a, b: a @ b, make((3,)), make((4,)))
    check(lambda a, b: a @ b, make((2, 3)), make((4, 5)))
    check(lambda a, b: a @ b, make((2, 2, 3)), make((3, 3, 5)))
    check(lambda a, b: a @ b, make(()), make((3,)))
    t = tol(torch.float32)
    check(lambda a, b: a.transpose(-1, -2) @ b.transpose(0, 2), make((2, 5, 4)), make((3, 5, 2)), **t)
    check(lambda a, b: a[..., ::2] @ b[:, ::2], make((2, 4, 10)), make((10, 3)), **t)
    check(lambda a, b: torch.matmul(a, b, out=torch.empty(0, device=a.device)), make((2, 4, 5)), make((5, 3)), **t)


@pytest.mark.filterwarnings("ignore:torch.chain_matmul is deprecated")
def test_einsum_tensordot_kron_inner():
    t = tol(torch.float32, 16)
    a, b = make((3, 4)), make((4, 5), seed=1)
    sq, x3, y3 = make((4, 4), seed=2), make((2, 3, 4), seed=3), make((2, 4, 5), seed=4)
    check(lambda a, b: torch.einsum("ij,jk->ik", a, b), a, b, **t)
    check(lambda x, y: torch.einsum("bij,bjk->bik", x, y), x3, y3, **t)
    check(lambda s: torch.einsum("ii->i", s), sq)
    check(lambda s: torch.einsum("ii", s), sq, **t)
    check(lambda a, b: torch.einsum("i,j->ij", a[0], b[0]), a, b)
    check(lambda x: torch.einsum("ijk->kji", x), x3)
    check(lambda x: torch.einsum("ijk->j", x), x3, **t)
    q, k = make((2, 3, 4, 8), seed=5), make((2, 3, 6, 8), seed=6)
    check(lambda q, k: torch.einsum("bhqd,bhkd->bhqk", q, k), q, k, **t)
    check(lambda x, y: torch.tensordot(x, y, dims=([2], [1])), x3, y3, **t)
    check(lambda x, y: torch.tensordot(x, y, dims=2), make((3, 4, 5)), make((4, 5, 2)), **t)
    check(lambda a, b: torch.kron(a, b), a, b)
    check(lambda a, b: torch.kron(a, b), make((2, 1, 3)), make((3, 2)))
    check(lambda a, b: torch.inner(a, b), a, make((6, 4)), **t)
    check(lambda a, b: torch.linalg.vecdot(a, b), a, make((3, 4)), **t)
    check(lambda a, b, c: torch.linalg.multi_dot([a, b, c]), a, b, make((5, 2)), **t)
    check(lambda a, b, c: torch.chain_matmul(a, b, c), a, b, make((5, 2)), **t)


# ---------------------------------------------------------------- trace / diag / tril / triu


@pytest.mark.parametrize("dtype", MM_DTYPES + [torch.bool], ids=str)
def test_trace(dtype):
    check(lambda x: torch.trace(x), make((5, 5), dtype))
    check(lambda x: torch.trace(x), make((3, 6), dtype))
    check(lambda x: torch.trace(x.t()), make((6, 3), dtype))
    check(lambda x: torch.trace(x[::2, 1:]), make((6, 5), dtype))
    check(lambda x: torch.trace(x), make((0, 3), dtype))
    check(lambda x: torch.trace(x), make((2, 3, 4), dtype))
    check(lambda x: torch.trace(x), make((4,), dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.bool], ids=str)
def test_diag_diag_embed(dtype):
    v, m = make((4,), dtype), make((4, 5), dtype, seed=1)
    for k in [0, 1, -2, 5]:
        check(lambda v: torch.diag(v, k), v, msg=f"diag 1-d {k}")
        check(lambda m: torch.diag(m, k), m, msg=f"diag 2-d {k}")
        check(lambda m: torch.diag_embed(m, k), m, msg=f"diag_embed {k}")
    x3 = make((2, 3, 4), dtype)
    for off, d1, d2 in [(0, 0, 2), (1, 0, 2), (-1, 2, 0), (0, -1, -2), (2, 1, 3), (0, 3, 0)]:
        check(lambda x: torch.diag_embed(x, off, d1, d2), x3, msg=f"{off} {d1} {d2}")
    check(lambda x: torch.diag_embed(x.transpose(0, 2)), x3)
    check(lambda x: torch.diag_embed(x, 0, 1, 1), x3)
    check(lambda x: torch.diag_embed(x, 0, 0, 5), x3)
    check(lambda x: torch.diag_embed(x), make((0,), dtype))
    check(lambda x: torch.diag_embed(x), make((3, 0), dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int32, torch.bool, torch.bfloat16], ids=str)
def test_tril_triu(dtype):
    x = make((2, 5, 6), dtype)
    for k in [0, 1, -1, 3, -7, 10]:
        for f in [torch.tril, torch.triu]:
            check(lambda x: f(x, k), x, msg=f"{f.__name__} {k}")
            check(lambda x: f(x.transpose(1, 2), k), x, msg=f"{f.__name__} {k} t")
            check(lambda x: f(x[:, ::2], k), x, msg=f"{f.__name__} {k} strided")
    check(lambda x: x.clone().tril_(1), x)
    check(lambda x: x.clone().triu_(-1), x)
    check(lambda x: x.clone().transpose(1, 2).triu_(), x)
    check(lambda x: torch.tril(x, out=torch.empty(0, dtype=dtype, device=x.device)), x)
    check(lambda x: torch.triu(x, 2, out=torch.empty(0, dtype=torch.float64, device=x.device)), x)
    check(lambda x: torch.tril(x), make((4,), dtype))
    check(lambda x: x.clone().triu_(), make((4,), dtype))
    check(lambda x: torch.tril(x), make((0, 3), dtype))
    nan = torch.full((3, 3), float("nan"))
    check(lambda x: torch.triu(x), nan)


# ---------------------------------------------------------------- gradients

INDEX_FILL = "aten::index_fill_.int_Tensor"

GRAD_CASES = [
    ("mm", lambda a, b: a @ b, [(4, 5), (5, 3)], ()),
    ("mm_t", lambda a, b: a.t() @ b.t(), [(5, 4), (3, 5)], ()),
    ("addmm", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2), [(3,), (4, 5), (5, 3)], ()),
    ("bmm", lambda a, b: torch.bmm(a, b), [(2, 4, 5), (2, 5, 3)], ()),
    ("baddbmm", lambda c, a, b: torch.baddbmm(c, a, b, alpha=0.5), [(4, 3), (2, 4, 5), (2, 5, 3)], ()),
    ("addbmm", lambda c, a, b: torch.addbmm(c, a, b, beta=2), [(4, 3), (2, 4, 5), (2, 5, 3)], ()),
    ("mv", lambda a, b: torch.mv(a, b), [(4, 5), (5,)], ()),
    ("addmv", lambda c, a, b: torch.addmv(c, a, b, alpha=3), [(4,), (4, 5), (5,)], ()),
    ("dot", lambda a, b: torch.dot(a, b), [(5,), (5,)], ()),
    ("vdot", lambda a, b: torch.vdot(a, b), [(5,), (5,)], ()),
    ("addr", lambda c, a, b: torch.addr(c, a, b, beta=2), [(4, 5), (4,), (5,)], ()),
    ("outer", lambda a, b: torch.outer(a, b), [(4,), (5,)], ()),
    ("matmul_1d_3d", lambda a, b: a @ b, [(5,), (2, 5, 3)], ()),
    ("matmul_bcast", lambda a, b: a @ b, [(3, 1, 4, 5), (2, 5, 3)], ()),
    ("einsum", lambda a, b: torch.einsum("bij,bkj->bik", a, b), [(2, 3, 4), (2, 5, 4)], ()),
    ("kron", lambda a, b: torch.kron(a, b), [(2, 3), (3, 2)], ()),
    ("trace", lambda a: torch.trace(a), [(4, 5)], (INDEX_FILL,)),
    ("tril", lambda a: torch.tril(a, -1), [(4, 5)], ()),
    ("triu", lambda a: torch.triu(a, 1), [(2, 4, 5)], ()),
    ("diag_embed", lambda a: torch.diag_embed(a, 1), [(3, 4)], ()),
    ("diag", lambda a: torch.diag(a, -1), [(4, 5)], ()),
]


@pytest.mark.parametrize("name,fn,shapes,needs", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradients(name, fn, shapes, needs):
    require_tiny_kernels(*needs)
    args = [make(s, torch.float32, seed=i).requires_grad_() for i, s in enumerate(shapes)]
    check_grad(fn, *args, msg=name, **tol(torch.float32, 16))


@pytest.mark.parametrize("name,fn,shapes,needs", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_gradcheck_float64(name, fn, shapes, needs):
    require_tiny_kernels(*needs)
    args = [make(s, torch.float64, seed=i).requires_grad_() for i, s in enumerate(shapes)]
    gradcheck(fn, *args)


# ---------------------------------------------------------------- kernel counts


@pytest.mark.skipif(not IS_TINY, reason="kernel counts are tiny-specific")
def test_kernel_counts():
    a, b, c = make((32, 16)), make((16, 8), seed=1), make((8,), seed=2)
    assert kernels_of(lambda a, b: a @ b, a, b) == 1
    assert kernels_of(lambda a, b, c: a @ b + c, a, b, c) == 1  # the bias fuses into the product
    assert kernels_of(lambda c, a, b: torch.addmm(c, a, b), c, a, b) == 1
    assert kernels_of(lambda a, b: torch.matmul(a.expand(3, 32, 16), b), a, b) == 1
    assert kernels_of(lambda a, b: torch.einsum("ij,jk->ik", a, b), a, b) == 1
    assert kernels_of(lambda a, b, c: (a @ b + c).relu(), a, b, c) == 1
    assert kernels_of(lambda c, a, b: torch._addmm_activation(c, a, b), c, a, b) == 1

    # Projections of one input (attention's q, k and v) keep a kernel each: merged into one
    # kernel with three reduces, none was register-tiled and they ran 40x slower.
    x, w = make((2, 24, 32)), [make((32, 32), seed=s) for s in (3, 4, 5)]
    assert kernels_of(lambda x, p, q, r: (x @ p, x @ q, x @ r), x, *w) == 3


def test_projections_of_one_input():
    x, ws, bs = make((2, 24, 32)), [make((32, 40), seed=s) for s in (3, 4, 5)], [make((40,), seed=s) for s in (6, 7, 8)]
    for f in (lambda x, *p: [x @ p[0], x @ p[1], x @ p[2]],
              lambda x, *p: [torch.nn.functional.linear(x, p[i].T, p[3 + i]) for i in range(3)],
              lambda x, *p: sum(torch.nn.functional.linear(x, p[i].T, p[3 + i]).relu() for i in range(3))):
        check(f, x, *ws, *bs)

# ---------------------------------------------------------------- triangular solves, Cholesky
def spd(*batch, n, dtype=torch.float32, seed=0):
    a = make((*batch, n, n), torch.float64, seed)
    return (a @ a.mT + n * torch.eye(n, dtype=torch.float64)).to(dtype)


def lin_tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("batch,n", [((), 5), ((3,), 4), ((2, 2), 7), ((), 1), ((), 0), ((0,), 3), ((), 33)])
def test_cholesky_ex(dtype, batch, n):
    a = spd(*batch, n=n, dtype=dtype)
    a = a + torch.triu(make(a.shape, dtype, 1), 1)  # only the named triangle is read
    for upper in (False, True):
        b = a.mT.contiguous() if upper else a
        check(lambda x: torch.linalg.cholesky_ex(x, upper=upper), b, **lin_tol(dtype), msg=f"upper={upper}")
        check(lambda x: torch.linalg.cholesky(x, upper=upper), b, **lin_tol(dtype))


def test_cholesky_not_positive_definite():
    # LAPACK stops at the first pivot that is not positive: info names it, the matrix is left
    # as updated so far; the error names the batch element
    a = torch.stack([torch.eye(3), -torch.eye(3), torch.tensor([[4.0, 2, 0], [2, 1, 0], [0, 0, 1]]),
                     torch.tensor([[1.0, 2, 3], [2, 1, 0], [3, 0, 5]]), torch.full((3, 3), float("nan"))])
    check(torch.linalg.cholesky_ex, a)
    check(torch.linalg.cholesky_ex, a[3])
    check(torch.linalg.cholesky, a, msg="error")
    check(torch.linalg.cholesky, a[1], msg="error, one matrix")
    check(lambda x: torch.linalg.cholesky_ex(x, check_errors=True), a, msg="check_errors")


def test_cholesky_errors_and_out():
    for x in [torch.ones(3), torch.ones(3, 4), torch.ones(3, 3, dtype=torch.long), torch.ones(3, 3).half()]:
        check(torch.linalg.cholesky_ex, x, msg=str((x.shape, x.dtype)))
    a = spd(2, n=4)
    L, info = torch.empty(0), torch.empty(0, dtype=torch.int32)
    Ld, infod = to_dev(L), to_dev(info)
    torch.linalg.cholesky_ex(to_dev(a), out=(Ld, infod))
    torch.testing.assert_close(Ld.cpu(), torch.linalg.cholesky(a), rtol=1e-5, atol=1e-5)
    assert infod.cpu().tolist() == [0, 0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_solve_triangular(dtype):
    A = make((3, 5, 5), dtype).tril() + 4 * torch.eye(5, dtype=dtype)
    A = A + torch.triu(make(A.shape, dtype, 2), 1) * 100  # the other triangle is never read
    B = make((3, 5, 2), dtype, 1)
    for upper in (False, True):
        AA = A.mT.contiguous() if upper else A
        for left in (True, False):
            BB = B if left else B.mT
            for unit in (False, True):
                check(lambda a, b: torch.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=unit),
                      AA, BB, **lin_tol(dtype), msg=f"upper={upper} left={left} unit={unit}")
    # broadcasting batch dims, non-contiguous B, type promotion, empty
    check(lambda a, b: torch.linalg.solve_triangular(a, b, upper=False), A[:1], make((2, 3, 5, 4), dtype, 3).mT.mT,
          **lin_tol(dtype))
    check(lambda a, b: torch.linalg.solve_triangular(a, b, upper=False), A.float(), B.double(), **lin_tol(torch.float32))
    check(lambda a, b: torch.linalg.solve_triangular(a, b, upper=True), A[:, :0, :0], B[:, :0])
    out = to_dev(torch.empty(0, dtype=dtype))
    torch.linalg.solve_triangular(to_dev(A), to_dev(B), upper=False, out=out)
    torch.testing.assert_close(out.cpu(), torch.linalg.solve_triangular(A, B, upper=False), **lin_tol(dtype))


def test_solve_triangular_errors():
    e3 = torch.eye(3)
    for a, b in [(e3, torch.ones(3)), (torch.ones(3, 4), torch.ones(3, 2)), (e3, torch.ones(4, 2)),
                 (e3.half(), torch.ones(3, 2).half()), (e3.long(), torch.ones(3, 2).long())]:
        check(lambda x, y: torch.linalg.solve_triangular(x, y, upper=True), a, b, msg=str((a.shape, b.shape, a.dtype)))


@pytest.mark.filterwarnings("ignore:torch.triangular_solve is deprecated")
def test_triangular_solve_cholesky_solve_and_inverse():
    A = make((2, 4, 4)).tril() + 4 * torch.eye(4)
    b = make((2, 4, 3), seed=1)
    for upper in (False, True):
        for transpose in (False, True):
            AA = A.mT.contiguous() if upper else A
            check(lambda x, y: torch.triangular_solve(x, y, upper=upper, transpose=transpose), b, AA, rtol=1e-5,
                  atol=1e-5, msg=f"triangular_solve upper={upper} transpose={transpose}")
    L = torch.linalg.cholesky(spd(2, n=4))
    for upper in (False, True):
        LL = L.mT.contiguous() if upper else L
        check(lambda x, y: torch.cholesky_solve(x, y, upper=upper), b, LL, rtol=1e-5, atol=1e-5)
        check(lambda x: torch.cholesky_inverse(x, upper=upper), LL, rtol=1e-5, atol=1e-5)
    check(torch.cholesky_solve, make((3, 2)), torch.eye(4), msg="sizes")
    check(torch.cholesky_inverse, torch.ones(3), msg="1-d")
    check(torch.cholesky_inverse, torch.ones(3, 3, dtype=torch.long), msg="long")


def test_cholesky_and_solves_backward():
    a = spd(2, n=4).requires_grad_()
    check_grad(torch.linalg.cholesky, a, rtol=1e-4, atol=1e-4)
    A = (make((4, 4)).tril() + 4 * torch.eye(4)).requires_grad_()
    B = make((4, 2), seed=1).requires_grad_()
    check_grad(lambda x, y: torch.linalg.solve_triangular(x, y, upper=False), A, B, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------- LU and what is built on it
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape", [(5, 5), (3, 4, 4), (4, 6), (6, 4), (2, 3, 3, 3), (0, 3, 3), (1, 1), (24, 24)])
def test_lu_factor_and_unpack(dtype, shape):
    a = make(shape, dtype)
    check(torch.linalg.lu_factor_ex, a, **lin_tol(dtype))
    check(torch.linalg.lu, a, **lin_tol(dtype))
    LU, piv = torch.linalg.lu_factor(a)
    check(torch.lu_unpack, LU, piv)
    check(lambda x, p: torch.lu_unpack(x, p, unpack_data=False), LU, piv)
    check(lambda x, p: torch.lu_unpack(x, p, unpack_pivots=False), LU, piv)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape", [(5, 5), (3, 4, 4), (2, 3, 3, 3), (0, 3, 3), (1, 1), (16, 16)])
def test_det_inv_solve(dtype, shape):
    a = make(shape, dtype)
    t = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else lin_tol(dtype)
    check(torch.linalg.det, a, **t)
    check(torch.linalg.slogdet, a, **t)
    # the factors these return are what their backward solves with: the CPU's (A^T's for det)
    check(torch.ops.aten._linalg_det, a, **t)
    check(torch.ops.aten._linalg_slogdet, a, **t)
    check(torch.ops.aten._linalg_solve_ex, a, make((*shape[:-1], 2), dtype, 1), **t)
    check(torch.linalg.inv, a, **t)
    check(torch.linalg.inv_ex, a, **t)
    b = make((*shape[:-1], 2), dtype, 1)
    check(torch.linalg.solve, a, b, **t)
    check(lambda x, y: torch.linalg.solve(x, y, left=False), a, b.mT, **t)
    LU, piv = torch.linalg.lu_factor(a)
    for adjoint in (False, True):
        check(lambda x, p, y: torch.linalg.lu_solve(x, p, y, adjoint=adjoint), LU, piv, b, **t)
        check(lambda x, p, y: torch.linalg.lu_solve(x, p, y, left=False, adjoint=adjoint), LU, piv, b.mT, **t)


def test_solve_broadcasting_and_vectors():
    a = make((2, 1, 4, 4))
    check(torch.linalg.solve, a, make((3, 4, 2), seed=1), rtol=1e-4, atol=1e-4)
    check(torch.linalg.solve, a[0, 0], make((4,), seed=1), rtol=1e-4, atol=1e-4)  # a vector right side
    check(torch.linalg.solve, make((3, 4, 4)), make((3, 4), seed=1), rtol=1e-4, atol=1e-4)  # batched vectors
    check(lambda x, y: torch.linalg.solve(x, y, left=False), make((3, 4, 4)), make((3, 4), seed=1), msg="left=False")


def test_singular_and_errors():
    # singular with an exact LU whichever way round LAPACK factors it (it may take the row-major
    # input as its transpose): with [[1, 2, 3], [2, 4, 6], [1, 0, 1]] the CPU gave det 3.6e-7 on an
    # Intel CPU (the transpose's 1/3 pivots rounded) and 0 for the same matrix stored column-major
    s = torch.tensor([[1.0, 2, 4], [2, 4, 8], [4, 0, 2]])
    check(torch.linalg.lu_factor_ex, s)
    check(torch.linalg.det, s)
    check(torch.linalg.slogdet, s)
    check(torch.linalg.inv_ex, torch.stack([s, torch.eye(3), torch.zeros(3, 3)]), msg="inv_ex info")
    for f in (torch.linalg.inv, lambda x: torch.linalg.solve(x, torch.ones(x.shape[:-1], device=x.device))):
        check(f, s, msg="singular")
        check(f, torch.ones(2, 3, 3), msg="singular batch")
    check(lambda x: torch.linalg.lu_factor_ex(x, check_errors=True), torch.zeros(3, 3), msg="check_errors")
    for x in (torch.ones(3), torch.ones(3, 3).long(), torch.ones(3, 3).half()):
        check(torch.linalg.lu_factor_ex, x, msg=str(x.dtype))
    check(lambda x: torch.linalg.lu_factor_ex(x, pivot=False), torch.eye(3))
    for f in (torch.linalg.det, torch.linalg.slogdet, torch.linalg.inv):
        for x in (torch.ones(3, 4), torch.ones(3), torch.ones(3, 3).long()):
            check(f, x, msg=str((x.shape, x.dtype)))
    check(torch.linalg.inv, torch.eye(3).half())
    check(torch.linalg.solve, torch.eye(3), torch.ones(4))
    check(torch.linalg.solve, torch.eye(3).long(), torch.ones(3).long())


def test_lu_family_backward():
    a = (make((4, 4)) + 4 * torch.eye(4)).requires_grad_()
    b = make((4, 2), seed=1).requires_grad_()
    check_grad(torch.linalg.det, a, rtol=1e-4, atol=1e-4)
    check_grad(torch.linalg.inv, a, rtol=1e-4, atol=1e-4)
    check_grad(torch.linalg.solve, a, b, rtol=1e-4, atol=1e-4)
    check_grad(lambda x: torch.linalg.slogdet(x)[1], a, rtol=1e-4, atol=1e-4)


def test_lu_family_out_variants():
    a, b = make((2, 4, 4)) + 4 * torch.eye(4), make((2, 4, 3), seed=1)

    def outs(*dtypes):
        return [to_dev(torch.empty(0, dtype=d)) for d in dtypes]
    f, i = torch.float32, torch.int32
    cases = [
        (lambda x, o: torch.linalg.lu_factor_ex(x, out=o), torch.linalg.lu_factor_ex, (f, i, i)),
        (lambda x, o: torch.linalg.lu(x, out=o), torch.linalg.lu, (f, f, f)),
        (lambda x, o: torch.linalg.det(x, out=o[0]), torch.linalg.det, (f,)),
        (lambda x, o: torch.linalg.slogdet(x, out=o), torch.linalg.slogdet, (f, f)),
        (lambda x, o: torch.linalg.inv(x, out=o[0]), torch.linalg.inv, (f,)),
        (lambda x, o: torch.linalg.inv_ex(x, out=o), torch.linalg.inv_ex, (f, i)),
        (lambda x, o: torch.linalg.solve(x, to_dev(b), out=o[0]), lambda x: torch.linalg.solve(x, b), (f,)),
    ]
    for run, ref, dtypes in cases:
        o = outs(*dtypes)
        run(to_dev(a), o)
        want = ref(a)
        want = [want] if isinstance(want, torch.Tensor) else list(want)
        for got, w in zip(o, want):
            torch.testing.assert_close(got.cpu(), w, rtol=1e-4, atol=1e-4)
    LU, piv = torch.linalg.lu_factor(a)
    o = outs(f)
    torch.linalg.lu_solve(to_dev(LU), to_dev(piv), to_dev(b), out=o[0])
    torch.testing.assert_close(o[0].cpu(), torch.linalg.lu_solve(LU, piv, b), rtol=1e-4, atol=1e-4)
    o = outs(f, f, f)
    torch.lu_unpack(to_dev(LU), to_dev(piv), out=o)
    for got, w in zip(o, torch.lu_unpack(LU, piv)):
        torch.testing.assert_close(got.cpu(), w)
