"""Ops that used to leave the device (issue 14): median / nanmedian, mode, nonzero_static, histc, channel_shuffle,
linalg.cross, unfold (im2col), fold (col2im), max_unpool2d / 3d, cdist and pdist (with their backward),
embedding_renorm_ (nn.Embedding's max_norm), grid_sample (2-d and 3-d, every mode), the CPU's flash-attention op, each against the CPU on the same inputs, with the
edge cases (NaN, ties, empty, 0-d, broadcasting, 16-bit, out=) and the CPU's errors.
"""
import pytest
import torch
import torch.nn.functional as F

from conftest import DEV, IS_TINY, assert_same, to_dev

NAN = float("nan")


def same_on_both(fn, *args, **kw):
    """fn on the device and on the CPU, results compared."""
    expected = fn(*args)
    actual = fn(*[to_dev(a) if isinstance(a, torch.Tensor) else a for a in args])
    assert_same(actual, expected, **kw)
    return actual


def same_error(fn, *args, exc=RuntimeError, match=None):
    """fn raises the CPU's exception type, with the message `match`, on both devices."""
    with pytest.raises(exc, match=match):
        fn(*args)
    with pytest.raises(exc, match=match):
        fn(*[to_dev(a) if isinstance(a, torch.Tensor) else a for a in args])


# ----------------------------------------------------------------------------- median

ROWS = torch.tensor([[3., NAN, 1., NAN, 2.], [NAN] * 5, [5., 4., 3., 2., 1.], [1., 1., 1., 2., 2.],
                     [2., NAN, 1., 3., 0.]])


@pytest.mark.parametrize("fn", [torch.median, torch.nanmedian])
def test_median_rows_with_nan_and_ties(fn):
    same_on_both(lambda t: tuple(fn(t, 1)), ROWS)
    same_on_both(lambda t: tuple(fn(t, 0, keepdim=True)), ROWS)
    same_on_both(fn, ROWS)  # the whole tensor


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int32, torch.uint8])
def test_median_dtypes_and_views(dtype):
    x = (torch.randn(4, 7, 6) * 20).to(dtype)
    same_on_both(lambda t: tuple(torch.median(t, -1)), x)
    same_on_both(lambda t: tuple(torch.nanmedian(t.transpose(0, 2)[1:], 1)), x)  # a strided view
    same_on_both(torch.median, x)


def test_median_edges():
    same_on_both(lambda t: tuple(torch.median(t, 0)), torch.tensor(3.))  # 0-d
    for dtype in (torch.float32, torch.int64, torch.int32, torch.int8):
        # empty: NaN, converted as x86 converts it for integers
        same_on_both(torch.median, torch.tensor([], dtype=dtype))
    out = torch.empty(0, device=DEV), torch.empty(0, dtype=torch.long, device=DEV)
    torch.median(to_dev(ROWS), 1, out=out)
    assert_same(out, tuple(torch.median(ROWS, 1)))
    same_error(lambda t: torch.median(t, 1), torch.zeros(2, 0), exc=IndexError,
               match="Expected reduction dim 1 to have non-zero size")
    same_error(torch.median, torch.tensor([True]), exc=NotImplementedError, match="not implemented for 'Bool'")


def test_median_long_rows_take_the_host_path():
    x = torch.randn(3, 9000)  # over the lazy sort's budget
    same_on_both(lambda t: tuple(torch.median(t, 1)), x)
    same_on_both(torch.nanmedian, x[0])


# ----------------------------------------------------------------------------- mode

def test_mode():
    # ties go to the smallest value, at its last index; NaN equals nothing
    same_on_both(lambda t: tuple(torch.mode(t, 1)), torch.tensor([[1., 2., 2., 1., 3.], [3., 3., 1., 1., 5.],
                                                                  [NAN, NAN, 1., 2., 2.], [5., 4., 3., 2., 1.]]))
    same_on_both(lambda t: tuple(torch.mode(t)), torch.tensor([2, 2, 1, 1, 2, 1, 1]))
    same_on_both(lambda t: tuple(torch.mode(t, 0, keepdim=True)), torch.randint(0, 4, (9, 5)))
    same_on_both(lambda t: tuple(torch.mode(t.transpose(0, 1), 1)), torch.randint(0, 3, (12, 4)).to(torch.int8))
    same_on_both(lambda t: tuple(torch.mode(t)), torch.tensor([True, False, True]))
    same_on_both(lambda t: tuple(torch.mode(t)), torch.tensor(3.))
    same_on_both(lambda t: tuple(torch.mode(t, 1)), torch.zeros(0, 3))
    same_error(lambda t: torch.mode(t, 1), torch.zeros(2, 0), exc=IndexError, match="non-zero size")


# ----------------------------------------------------------------------------- nonzero_static

def test_nonzero_static_stays_lazy():
    x = torch.tensor([[0, 1, 0], [2, 0, 3]])
    for size, fill in ((2, -1), (5, -7), (0, -1)):
        same_on_both(lambda t: torch.nonzero_static(t, size=size, fill_value=fill), x)
    same_on_both(lambda t: torch.nonzero_static(t, size=20), torch.randn(3, 4, 5) > 0.3)
    same_on_both(lambda t: torch.nonzero_static(t.transpose(0, 1), size=9), torch.randn(4, 5))  # a view
    same_on_both(lambda t: torch.nonzero_static(t, size=3, fill_value=9), torch.tensor([NAN, 0., 1.]))
    same_on_both(lambda t: torch.nonzero_static(t, size=700), torch.randn(2000) > 0)  # a blocked scan
    same_on_both(lambda t: torch.nonzero_static(t, size=2), torch.tensor(5.))
    same_on_both(lambda t: torch.nonzero_static(t, size=2), torch.tensor([]))
    same_error(lambda t: torch.nonzero_static(t, size=-1), x, match="must be an non-negative integer")
    if IS_TINY:
        from torch_tiny import debug
        t = to_dev(torch.randn(100) > 0)
        torch.tiny.synchronize()
        with debug.trace() as tr:
            torch.nonzero_static(t, size=10).cpu()
        assert len(tr.schedules) == 1  # nothing synchronizes before the copy to the host


# ----------------------------------------------------------------------------- histc

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_histc(dtype):
    x = torch.randn(3000).to(dtype)
    same_on_both(lambda t: torch.histc(t, 17), x)
    same_on_both(lambda t: torch.histc(t, 5, min=-1, max=1), x)
    same_on_both(lambda t: torch.histc(t[::3].reshape(10, 100), 4, min=0, max=2), x)  # view, 2-d


def test_histc_edges():
    same_on_both(lambda t: torch.histc(t, 4, min=1, max=3), torch.tensor([1., NAN, 2., 5., 3.]))  # NaN, outside
    same_on_both(lambda t: torch.histc(t, 4), torch.tensor([2., 2.]))  # one value: widened by 1
    same_on_both(lambda t: torch.histc(t, 3), torch.tensor([]))
    same_on_both(lambda t: torch.histc(t, 3), torch.tensor(0.5))
    same_on_both(lambda t: torch.histc(t, 100), torch.randn(2_000_000))  # the scatter path
    out = torch.empty(0, device=DEV)
    torch.histc(to_dev(torch.arange(10.)), 5, out=out)
    assert_same(out, torch.histc(torch.arange(10.), 5))
    same_error(lambda t: torch.histc(t, 3), torch.tensor([1, 2]), exc=NotImplementedError,
               match="not implemented for 'Long'")
    same_error(lambda t: torch.histc(t, 3), torch.tensor([1., NAN]), match="is not finite")
    same_error(lambda t: torch.histc(t, 3, min=0, max=float("inf")), torch.tensor([1.]), match="is not finite")
    same_error(lambda t: torch.histc(t, 0), torch.tensor([1.]), match="bins must be > 0")
    same_error(lambda t: torch.histc(t, 3, min=3, max=1), torch.tensor([1.]), match="max must be larger than min")


# ----------------------------------------------------------------------------- channel_shuffle

def test_channel_shuffle():
    same_on_both(lambda t: F.channel_shuffle(t, 3), torch.randn(2, 6, 4, 5))
    same_on_both(lambda t: F.channel_shuffle(t, 2), torch.randint(0, 9, (2, 4, 3)))
    same_on_both(lambda t: F.channel_shuffle(t.permute(0, 3, 1, 2), 2), torch.randn(2, 3, 5, 4))  # channels last
    same_on_both(lambda t: F.channel_shuffle(t, 2), torch.randn(0, 4, 3))
    same_error(lambda t: F.channel_shuffle(t, 4), torch.randn(2, 6, 3), match="must be divisible by groups")
    same_error(lambda t: F.channel_shuffle(t, 0), torch.randn(2, 6, 3), match="must be positive")
    same_error(lambda t: F.channel_shuffle(t, 3), torch.randn(2, 6), match="expects input with > 2 dims")


# ----------------------------------------------------------------------------- cross

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.int64, torch.int8])
def test_linalg_cross(dtype):
    a, b = (torch.randn(5, 3) * 4).to(dtype), (torch.randn(5, 3) * 4).to(dtype)
    same_on_both(torch.linalg.cross, a, b)
    same_on_both(lambda x, y: torch.cross(x.t(), y.t(), dim=0), a, b)  # transposed views, dim 0
    same_on_both(lambda x, y: torch.linalg.cross(x, y, dim=0), torch.randn(3, 1, 4).to(dtype),
                 torch.randn(3, 6, 4).to(dtype))  # broadcasting


def test_linalg_cross_out_and_errors():
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    out = torch.empty(0, device=DEV)
    torch.linalg.cross(to_dev(a), to_dev(b), out=out)
    assert_same(out, torch.linalg.cross(a, b))
    same_error(torch.linalg.cross, torch.randn(4, 2), torch.randn(4, 2), match="must have length 3")
    same_error(torch.linalg.cross, torch.randn(4, 3), torch.randn(3), match="same number of dimensions")
    same_error(torch.linalg.cross, torch.randn(4, 3), torch.randn(4, 3).double(),
               match="expected scalar type Float but found Double")
    same_error(lambda x, y: torch.cross(x, y, dim=1), torch.ones(2, 3, dtype=torch.bool),
               torch.ones(2, 3, dtype=torch.bool), exc=NotImplementedError, match="not implemented for 'Bool'")


# ----------------------------------------------------------------------------- unfold (im2col)

@pytest.mark.parametrize("kw", [dict(kernel_size=3), dict(kernel_size=(2, 3), dilation=(1, 2), padding=(1, 0),
                                                          stride=(2, 1)), dict(kernel_size=1, stride=3)])
def test_unfold(kw):
    same_on_both(lambda t: F.unfold(t, **kw), torch.randn(2, 3, 7, 8))
    same_on_both(lambda t: F.unfold(t, **kw), torch.randn(3, 7, 8))  # unbatched
    same_on_both(lambda t: F.unfold(t.transpose(2, 3), **kw), torch.randn(1, 2, 8, 7))  # a view


@pytest.mark.parametrize("kw", [dict(kernel_size=3), dict(kernel_size=(2, 3), dilation=(1, 2), padding=(1, 0),
                                                          stride=(2, 1)), dict(kernel_size=2, stride=3)])
def test_fold_and_unfold_backward(kw):
    """col2im: fold sums overlapping patches (bit for bit: the CPU's order), and is unfold's backward."""
    size = (7, 8)
    cols = F.unfold(torch.randn(2, 3, *size), **kw)
    same_on_both(lambda t: F.fold(t, size, **kw), cols, rtol=0, atol=0)
    same_on_both(lambda t: F.fold(t[0], size, **kw), cols)  # unbatched
    x = torch.randn(2, 3, *size, requires_grad=True)
    xd = to_dev(x.detach()).requires_grad_()
    g = torch.randn_like(cols)
    F.unfold(x, **kw).backward(g)
    F.unfold(xd, **kw).backward(to_dev(g))
    assert_same(xd.grad, x.grad)


def test_unfold_errors():
    same_error(lambda t: F.unfold(t, 0), torch.randn(1, 3, 5, 5), match="kernel size should be greater than zero")
    same_error(lambda t: F.unfold(t, 9), torch.randn(1, 3, 5, 5), match="spatial size")
    same_error(lambda t: F.fold(t, (3, 3), 2), torch.randn(2, 5, 4), match="divisible by the product of kernel_size")


# ----------------------------------------------------------------------------- max_unpool2d

def test_max_unpool2d_inverts_max_pool():
    x = torch.randn(2, 3, 8, 8)
    out, idx = F.max_pool2d(x, 2, return_indices=True)
    same_on_both(lambda o, i: F.max_unpool2d(o, i, 2), out, idx)
    out, idx = F.max_pool2d(x[0], 3, stride=2, return_indices=True)  # overlapping windows, unbatched
    same_on_both(lambda o, i: F.max_unpool2d(o, i, 3, stride=2, output_size=(8, 8)), out, idx)
    same_on_both(lambda o, i: F.max_unpool2d(o, i, 2), torch.ones(0, 1, 2, 2), torch.zeros(0, 1, 2, 2, dtype=torch.long))


def test_max_unpool2d_errors():
    ones = torch.ones(1, 1, 2, 2)
    same_error(lambda o, i: F.max_unpool2d(o, i, 2), ones, torch.tensor([[[[0, 1], [2, 99]]]]),
               match="Found an invalid max index: 99")
    same_error(lambda o, i: F.max_unpool2d(o, i, 2), ones, torch.zeros(1, 1, 2, 2, dtype=torch.int32),
               match="should be type int64")
    same_error(lambda o, i: torch.ops.aten.max_unpool2d(o, i, [4]), ones, torch.zeros(1, 1, 2, 2, dtype=torch.long),
               match="exactly two elements")
    same_error(lambda o, i: torch.ops.aten.max_unpool2d(o, i, [4, 4]), ones, torch.zeros(1, 1, 2, 3, dtype=torch.long),
               match="Expected shape of indices")


def test_max_unpool3d():
    x = torch.randn(2, 3, 4, 6, 6)
    out, idx = F.max_pool3d(x, 2, return_indices=True)
    same_on_both(lambda o, i: F.max_unpool3d(o, i, 2), out, idx)
    out, idx = F.max_pool3d(x[0], 3, stride=2, return_indices=True)  # overlapping windows, unbatched
    same_on_both(lambda o, i: F.max_unpool3d(o, i, 3, stride=2, output_size=(4, 6, 6)), out, idx)
    ones, zeros = torch.ones(1, 1, 1, 2, 2), torch.zeros(1, 1, 1, 2, 2, dtype=torch.long)
    same_error(lambda o, i: F.max_unpool3d(o, i, 2), ones, zeros + 99, match="Found an invalid max index: 99")
    same_error(lambda o, i: torch.ops.aten.max_unpool3d(o, i, [2, 4], [2, 2, 2], [0, 0, 0]), ones, zeros,
               match="exactly three elements")
    same_error(lambda o, i: torch.ops.aten.max_unpool3d(o, i, [2, 4, 4], [0, 2, 2], [0, 0, 0]), ones, zeros,
               match="strides should be greater than zero")


# ----------------------------------------------------------------------------- grid_sample

@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("mode", ["bilinear", "nearest", "bicubic"])
@pytest.mark.parametrize("padding_mode", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_grid_sample(dims, mode, padding_mode, align_corners):
    if dims == 3 and mode == "bicubic":
        pytest.skip("bicubic is 2-d only, on the CPU too")
    g = torch.Generator().manual_seed(0)
    x = torch.randn((2, 3, 5, 6) if dims == 2 else (2, 3, 4, 5, 6), generator=g)
    grid = torch.rand((2, 4, 7, 2) if dims == 2 else (2, 3, 4, 7, 3), generator=g) * 2.6 - 1.3  # outside too
    grid.view(-1)[:4] = torch.tensor([1.0, -1.0, 0.0, 0.5])  # edges and centres exactly
    grid.view(-1)[4] = NAN  # a NaN coordinate reads nothing
    fn = lambda t, gr: F.grid_sample(t, gr, mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    same_on_both(fn, x, grid, rtol=1e-5, atol=1e-5)
    same_on_both(fn, x[:, :, ::2], grid[:, :2], rtol=1e-5, atol=1e-5)  # strided input, fewer points
    same_on_both(fn, x.double(), grid.double())


def test_grid_sample_errors():
    x, grid = torch.randn(1, 1, 3, 3), torch.rand(1, 2, 2, 2)
    same_error(lambda t, gr: F.grid_sample(t, gr, align_corners=False), x, grid.double(), match="expected scalar type")
    same_error(lambda t, gr: F.grid_sample(t, gr, align_corners=False), x.long(), grid.long(), exc=NotImplementedError,
               match="not implemented for 'Long'")
    same_error(lambda t, gr: F.grid_sample(t, gr, align_corners=False), x, torch.rand(2, 2, 2, 2),
               match="same batch size")
    same_error(lambda t, gr: F.grid_sample(t, gr, align_corners=False), x, torch.rand(1, 2, 2, 3),
               match="size 2 in last dimension")


# ----------------------------------------------------------------------------- flash attention (CPU op)

def test_flash_attention_for_cpu():
    op = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(s, generator=g) for s in ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 8)))
    same_on_both(lambda a, b, c: op(a, b, c), q, k, v, rtol=1e-5, atol=1e-5)
    same_on_both(lambda a, b, c: op(a, b, c, is_causal=True, scale=0.3), q, k, v, rtol=1e-5, atol=1e-5)
    mask = torch.randn(4, 6, generator=g)
    mask[0] = float("-inf")  # a query that sees no key: output and log-sum-exp 0, as the CPU gives
    same_on_both(lambda a, b, c, m: op(a, b, c, attn_mask=m), q, k, v, mask, rtol=1e-5, atol=1e-5)
    same_on_both(lambda a, b, c: op(a, b, c), q, k[:, :1], v[:, :1], rtol=1e-5, atol=1e-5)  # heads broadcast
    same_on_both(lambda a, b, c: op(a, b, c), q.double(), k.double(), v.double())
    same_error(lambda a, b, c: op(a, b, c, dropout_p=0.5), q, k, v, match="dropout")
    same_error(lambda a, b, c: op(a, b, c), q[0], k[0], v[0], match="4 dims")
    same_error(lambda a, b, c, m: op(a, b, c, attn_mask=m), q, k, v, mask > 0, match="same data type")


# ----------------------------------------------------------------------------- cdist / pdist

PS = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")]


@pytest.mark.parametrize("p", PS)
def test_cdist_forward_and_backward(p):
    a, b = torch.randn(2, 6, 5, dtype=torch.float64), torch.randn(1, 4, 5, dtype=torch.float64)
    a[0, 0] = b[0, 0]  # a zero distance
    a[1, 2, 1] = b[0, 3, 1]  # a zero difference
    g = torch.randn(2, 6, 4, dtype=torch.float64)
    results = []
    for dev in ("cpu", DEV):
        x1, x2 = a.to(dev, copy=True).requires_grad_(), b.to(dev, copy=True).requires_grad_()
        d = torch.cdist(x1, x2, p, compute_mode="donot_use_mm_for_euclid_dist")
        d.backward(g.to(dev))
        results.append((d, x1.grad, x2.grad))
    assert_same(results[1], results[0], check_device=False)
    same_on_both(lambda x, y: torch.cdist(x, y, p), torch.randn(30, 3), torch.randn(27, 3))  # matmul form at p=2


@pytest.mark.parametrize("p", PS)
def test_pdist_forward_and_backward(p):
    x = torch.randn(6, 3, dtype=torch.float64)
    x[4] = x[1]  # a zero distance
    g = torch.randn(15, dtype=torch.float64)
    results = []
    for dev in ("cpu", DEV):
        xd = x.to(dev, copy=True).requires_grad_()
        d = torch.pdist(xd, p)
        d.backward(g.to(dev))
        results.append((d, xd.grad))
    assert_same(results[1], results[0], check_device=False)


def test_distance_edges_and_errors():
    same_on_both(torch.cdist, torch.randn(0, 3), torch.randn(4, 3))
    same_on_both(torch.cdist, torch.randn(2, 0), torch.randn(4, 0))
    same_on_both(torch.pdist, torch.randn(1, 3))
    same_on_both(torch.pdist, torch.randn(3, 0))
    same_error(torch.cdist, torch.randn(3, 2).half(), torch.randn(4, 2).half(), exc=NotImplementedError,
               match="not implemented for 'Half'")
    same_error(torch.cdist, torch.ones(3, 2, dtype=torch.long), torch.ones(4, 2, dtype=torch.long),
               match="only supports floating-point dtypes")
    same_error(torch.cdist, torch.randn(3, 2), torch.randn(4, 3), match="same number of columns")
    same_error(lambda x: torch.pdist(x, -1), torch.randn(3, 2), match="non-negative p")
    same_error(torch.pdist, torch.randn(3), match="only supports 2D tensors")


# ----------------------------------------------------------------------------- embedding_renorm_

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("p", [1.0, 2.0, 3.0, float("inf")])
def test_embedding_renorm(dtype, p):
    w = (torch.randn(6, 3) * 3).to(dtype)
    idx = torch.tensor([1, 4, 1, -1])  # a repeat and a negative index
    expected, actual = w.clone(), to_dev(w)
    torch.embedding_renorm_(expected, idx, 2.0, p)
    torch.embedding_renorm_(actual, to_dev(idx), 2.0, p)
    assert_same(actual, expected)


def test_embedding_max_norm_module():
    cpu = torch.nn.Embedding(10, 4, max_norm=1.0)
    dev = torch.nn.Embedding(10, 4, max_norm=1.0)
    dev.load_state_dict(cpu.state_dict())
    dev.to(DEV)
    idx = torch.tensor([[1, 2], [2, 9]])
    assert_same(dev(to_dev(idx)), cpu(idx))
    assert_same(dev.weight, cpu.weight)  # renormalized in place
    same_error(lambda w, i: torch.embedding_renorm_(w, i, 2.0, 2.0), torch.randn(6, 3), torch.tensor([9]),
               exc=IndexError, match="index 9 out of range")
    same_error(lambda w, i: torch.embedding_renorm_(w, i, 2.0, 2.0), torch.randn(6, 3), torch.tensor([1.0]),
               match="to have one of the following scalar types: Long, Int")


def test_no_cpu_fallback():
    """These ops run on tiny: with TINY_STRICT=1 (the suite's default) a fallback would raise."""
    if not IS_TINY:
        pytest.skip("tiny-specific")
    x = to_dev(torch.randn(4, 6, 5, 5))
    torch.median(x, 1)
    torch.mode(x, 1)
    torch.nonzero_static(x, size=5)
    torch.histc(x, 10)
    F.channel_shuffle(x, 2)
    F.unfold(x, 2)
    torch.linalg.cross(x[:, :3, 0, 0], x[:, 3:, 0, 0])
