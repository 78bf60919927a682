"""Shape ops compared with the CPU: cat / stack / split family, flip, roll, repeat,
repeat_interleave, tile, padding (constant, reflect, replicate, circular) with their
gradients, unfold's gradient, sorting (sort, argsort, topk, kthvalue), unique, searchsorted
and bucketize, with the CPU's errors for bad arguments.
"""

import pytest
import torch
import torch.nn.functional as F

from conftest import DEV, assert_bitwise_equal, assert_same, requires_tiny, sync, to_dev


def _dev(x):
    if isinstance(x, torch.Tensor):
        return to_dev(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_dev(v) for v in x)
    return x


def _check(fn, *args, exact=False, **kw):
    expected = fn(*args)
    actual = fn(*_dev(args))
    if exact:
        if isinstance(expected, torch.Tensor):
            assert actual.device.type == DEV
            assert_bitwise_equal(actual, expected)
        else:
            assert len(actual) == len(expected)
            for a, e in zip(actual, expected):
                assert a.device.type == DEV
                assert_bitwise_equal(a, e)
    else:
        assert_same(actual, expected, **kw)
    return actual


def _check_raises(fn, *args, same_message=True):
    with pytest.raises(Exception) as cpu:
        fn(*args)
    with pytest.raises(Exception) as dev:
        fn(*_dev(args))
    assert type(dev.value) is type(cpu.value), f"{type(dev.value).__name__}: {dev.value}"
    if same_message:
        assert str(dev.value).splitlines()[0] == str(cpu.value).splitlines()[0]


def _rand(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape))
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=g).to(dtype)
    if dtype == torch.bool:
        return torch.rand(*shape, generator=g) > 0.5
    return torch.randint(-20, 20, shape, generator=g).to(dtype)


def _grads(fn, x, *rest):
    """Gradient of sum(fn(x) * w) on both devices."""
    a = x.clone().requires_grad_()
    b = to_dev(x).requires_grad_()
    ya = fn(a, *rest)
    yb = fn(b, *_dev(rest))
    w = _rand(*ya.shape, seed=7)
    (ya * w).sum().backward()
    (yb * to_dev(w)).sum().backward()
    assert_same(yb, ya)
    assert_same(b.grad, a.grad)


# ---------------------------------------------------------------------- cat / stack / split

@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16])
def test_cat(dim, dtype):
    a = _rand(2, 3, 4, dtype=dtype)
    b = _rand(2, 3, 4, dtype=dtype, seed=1)
    c = _rand(2, 3, 4, dtype=dtype, seed=2)
    _check(lambda a, b, c: torch.cat([a, b[:1] if dim == 0 else b, c], dim), a, b, c, exact=True)
    _check(lambda a, b: torch.cat([a.transpose(0, 2), b.transpose(0, 2)], dim), a, b, exact=True)


def test_cat_special_values_bit_exact():
    a = torch.tensor([0.0, -0.0, float("nan"), float("inf")])
    b = torch.tensor([-float("inf"), 1e-45, -1e-45, 3.0])
    _check(lambda a, b: torch.cat([a, b, a]), a, b, exact=True)
    _check(lambda a, b: torch.cat([a.double(), b.double()]), a, b, exact=True)


def test_cat_promotion_empty_and_many():
    _check(lambda a, b: torch.cat([a, b], 1), _rand(2, 3), _rand(2, 2, dtype=torch.int32))
    _check(lambda a, b: torch.cat([a, b], 0), _rand(2, 3, dtype=torch.int8), _rand(1, 3, dtype=torch.bool), exact=True)
    # the legacy empty 1-D tensor is skipped; empties along the dim are fine
    _check(lambda a, e: torch.cat([e, a, e]), _rand(2, 3), torch.empty(0), exact=True)
    _check(lambda a, e: torch.cat([a, e], 0), _rand(2, 3), torch.empty(0, 3), exact=True)
    _check(lambda e: torch.cat([e, e], 1), torch.empty(0, 3), exact=True)
    xs = [_rand(2, i % 3 + 1, seed=i) for i in range(40)]
    _check(lambda *xs: torch.cat(xs, 1), *xs, exact=True)
    _check(lambda a: torch.cat([a]), _rand(3), exact=True)
    _check(lambda a: torch.cat([a, a.flip(0)], 0), _rand(5, 2), exact=True)


def test_cat_out_and_stack_family():
    a, b = _rand(3, 4), _rand(3, 4, seed=1)
    out = torch.empty(0)
    dout = to_dev(out)
    torch.cat([a, b], 1, out=out)
    torch.cat([to_dev(a), to_dev(b)], 1, out=dout)
    assert_same(dout, out)
    _check(lambda a, b: torch.stack([a, b], 1), a, b, exact=True)
    _check(lambda a, b: torch.stack([a, b], -1), a, b, exact=True)
    _check(lambda a, b: torch.hstack([a, b]), a, b, exact=True)
    _check(lambda a, b: torch.vstack([a, b]), a, b, exact=True)
    _check(lambda a, b: torch.dstack([a, b]), a, b, exact=True)
    _check(lambda a: torch.split(a, [1, 3], 1), a, exact=True)
    _check(lambda a: torch.chunk(a, 2, 1), a, exact=True)
    _check(lambda a: torch.unbind(a, 1), a, exact=True)
    _check(lambda a: torch.tensor_split(a, 3, 1), a, exact=True)


def test_cat_of_three_is_one_kernel():
    requires_tiny()
    import torch_tiny

    a, b, c = (to_dev(_rand(8, 5, seed=i)) for i in range(3))
    sync()
    with torch_tiny.debug.count_kernels() as k:
        out = (torch.cat([a, b, c], 1) * 2).cpu()
    assert k.kernels == 1
    assert_same(out, torch.cat([a.cpu(), b.cpu(), c.cpu()], 1) * 2, check_device=False)


def test_cat_autograd():
    a = _rand(2, 3).requires_grad_()
    b = _rand(2, 2).requires_grad_()
    da = to_dev(a.detach()).requires_grad_()
    db = to_dev(b.detach()).requires_grad_()
    w = _rand(2, 5, seed=3)
    (torch.cat([a, b], 1) * w).sum().backward()
    (torch.cat([da, db], 1) * to_dev(w)).sum().backward()
    assert_same(da.grad, a.grad)
    assert_same(db.grad, b.grad)


@pytest.mark.parametrize(
    "fn",
    [
        lambda a: torch.cat([a, a[:, :2, None]], 0),
        lambda a: torch.cat([a, a.reshape(4, 3)], 0),
        lambda a: torch.cat([a, a], 2),
        lambda a: torch.cat([], 0),
        lambda a: torch.cat([a.sum(), a.sum()]),
        lambda a: torch.stack([a, a[:2]]),
    ],
    ids=["rank", "size", "dim", "empty-list", "0d", "stack-size"],
)
def test_cat_errors(fn):
    _check_raises(fn, _rand(3, 4))


# ---------------------------------------------------------------------- flip / roll / repeat

@pytest.mark.parametrize("dims", [(0,), (1,), (-1,), (0, 2), (0, 1, 2), ()])
def test_flip(dims):
    x = _rand(3, 4, 5)
    _check(lambda x: torch.flip(x, dims), x, exact=True)
    _check(lambda x: torch.flip(x.transpose(0, 2), dims), x, exact=True)


def test_flip_variants_and_errors():
    _check(lambda x: torch.fliplr(x), _rand(3, 4), exact=True)
    _check(lambda x: torch.flipud(x), _rand(3, 4, dtype=torch.int16), exact=True)
    _check(lambda x: torch.flip(x, (0,)), torch.tensor(2.5), exact=True)
    _check(lambda x: torch.flip(x, (0,)), torch.empty(0, 3), exact=True)
    _check(lambda x: torch.rot90(x, 1, (0, 1)), _rand(3, 4), exact=True)
    _check_raises(lambda x: torch.flip(x, (0, 0)), _rand(3, 4))
    _check_raises(lambda x: torch.flip(x, (2,)), _rand(3, 4))


@pytest.mark.parametrize(
    "shifts,dims",
    [(1, 0), (-2, 1), (7, 1), (0, 0), ((1, 2), (0, 1)), ((-1, 3), (1, -1)), (5, None), (-13, None)],
)
def test_roll(shifts, dims):
    x = _rand(3, 5, dtype=torch.int32)
    _check(lambda x: torch.roll(x, shifts, dims), x, exact=True)
    _check(lambda x: torch.roll(x.t(), shifts, dims), x, exact=True)


def test_roll_edge_cases():
    _check(lambda x: torch.roll(x, 2, 0), torch.empty(0, 3), exact=True)
    _check(lambda x: torch.roll(x, 3), torch.tensor(1.5), exact=True)
    _check_raises(lambda x: torch.roll(x, (1, 2), (0,)), _rand(3, 4))
    _grads(lambda x: torch.roll(x, (1, -1), (0, 1)), _rand(3, 4))


@pytest.mark.parametrize("reps", [(2,), (1, 3), (2, 1, 2), (3, 2, 1, 1), (0, 2), (1, 1)])
def test_repeat_and_tile(reps):
    x = _rand(2, 3)
    if len(reps) >= 2:
        _check(lambda x: x.repeat(*reps), x, exact=True)
        _check(lambda x: x.t().repeat(*reps), x, exact=True)
    _check(lambda x: x.tile(reps), x, exact=True)


def test_repeat_edge_cases():
    _check(lambda x: x.repeat(3), torch.tensor(2.0), exact=True)
    _check(lambda x: x.repeat(2, 2), torch.empty(0, 3), exact=True)
    _check(lambda x: x.expand(3, 4).repeat(2, 1), _rand(1, 4), exact=True)
    _check_raises(lambda x: x.repeat(2), _rand(2, 3))
    _check_raises(lambda x: x.repeat(2, -1), _rand(2, 3))
    _grads(lambda x: x.repeat(2, 3), _rand(2, 3))


def test_repeat_interleave():
    x = _rand(3, 4)
    _check(lambda x: x.repeat_interleave(2), x, exact=True)
    _check(lambda x: x.repeat_interleave(3, dim=1), x, exact=True)
    _check(lambda x, r: x.repeat_interleave(r, dim=0), x, torch.tensor([2, 0, 1]), exact=True)
    _check(lambda x, r: x.repeat_interleave(r, dim=0, output_size=3), x, torch.tensor([2, 0, 1]), exact=True)
    _check(lambda r: torch.repeat_interleave(r), torch.tensor([1, 3, 0, 2]), exact=True)
    _check(lambda x: x.repeat_interleave(2, dim=-1), torch.tensor([True, False]), exact=True)
    _check_raises(lambda x, r: x.repeat_interleave(r, dim=0), x, torch.tensor([1, -1, 2]))
    _check_raises(lambda x, r: x.repeat_interleave(r, dim=0), x, torch.tensor([1, 2]))


# ---------------------------------------------------------------------- padding

@pytest.mark.parametrize(
    "pad",
    [(1, 2), (0, 0), (2, 1, 1, 3), (-1, 2), (1, -2, -1, 1), (1, 1, 1, 1, 1, 1), (-1, -2)],
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool])
def test_constant_pad(pad, dtype):
    x = _rand(2, 3, 4, dtype=dtype)
    value = True if dtype == torch.bool else 7
    _check(lambda x: F.pad(x, pad, value=value), x, exact=True)
    _check(lambda x: torch.constant_pad_nd(x.transpose(1, 2), pad, 0), x, exact=True)


def test_constant_pad_special_values_and_grad():
    x = torch.tensor([[1.0, float("nan")], [-0.0, float("inf")]])
    _check(lambda x: F.pad(x, (1, 1), value=-0.0), x, exact=True)
    _check(lambda x: F.pad(x, (1, 0, 0, 1), value=float("nan")), x, exact=True)
    _grads(lambda x: F.pad(x, (1, -1, 2, 0), value=3.0), _rand(3, 4))


@pytest.mark.parametrize(
    "pad",
    [(1,), (1, 1, 1, 1, 1, 1, 1, 1), (-2, -3)],
    ids=["odd", "too-long", "negative-size"],
)
def test_constant_pad_errors(pad):
    _check_raises(lambda x: torch.constant_pad_nd(x, pad), _rand(2, 3, 4))


PAD_CASES = [
    ("reflect", (2, 4), (1, 2)),
    ("reflect", (2, 3, 5), (4, 0)),
    ("reflect", (2, 3, 5), (-1, 2)),
    ("reflect", (2, 4, 5), (1, 2, 3, 0)),
    ("reflect", (1, 2, 4, 5), (1, 2, 3, 1)),
    ("reflect", (2, 3, 4, 5), (1, 2, 0, 1, 2, 1)),
    ("reflect", (1, 2, 3, 4, 5), (1, 1, 2, 2, 1, 0)),
    ("replicate", (2, 4), (3, 2)),
    ("replicate", (2, 3, 5), (7, 1)),
    ("replicate", (2, 4, 5), (1, 6, -2, 0)),
    ("replicate", (1, 2, 3, 4, 5), (2, 1, 0, 2, 3, 1)),
    ("circular", (2, 3, 5), (2, 3)),
    ("circular", (1, 2, 4, 5), (1, 2, 3, 1)),
]


@pytest.mark.parametrize("mode,shape,pad", PAD_CASES)
def test_mode_padding_and_grad(mode, shape, pad):
    x = _rand(*shape)
    _check(lambda x: F.pad(x, pad, mode=mode), x, exact=True)
    _grads(lambda x: F.pad(x, pad, mode=mode), x)


def test_mode_padding_dtypes_and_layouts():
    for dtype in [torch.float64, torch.float16, torch.int32]:
        x = _rand(2, 3, 5, dtype=dtype)
        if dtype.is_floating_point:
            _check(lambda x: F.pad(x, (2, 1), mode="reflect"), x, exact=True)
        _check(lambda x: F.pad(x, (2, 1), mode="replicate"), x, exact=True)
    _check(lambda x: F.pad(x.transpose(1, 2), (2, 1, 1, 2), mode="reflect"), _rand(2, 5, 4), exact=True)
    _check(lambda x: F.pad(x, (1, 1), mode="reflect"), torch.empty(0, 3, 4), exact=True)


def test_mode_padding_out_variants():
    x = _rand(2, 3, 5)
    for op, pad in [(torch.ops.aten.reflection_pad1d, [2, 1]), (torch.ops.aten.replication_pad1d, [3, 1]),
                    (torch.ops.aten.reflection_pad2d, [1, 1, 2, 0]), (torch.ops.aten.replication_pad2d, [1, 1, 2, 0])]:
        out = torch.empty(0)
        dout = to_dev(out)
        op.out(x, pad, out=out)
        op.out(to_dev(x), pad, out=dout)
        assert_same(dout, out)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: F.pad(x, (4, 0), mode="reflect"),
        lambda x: F.pad(x, (-3, -1), mode="reflect"),
        lambda x: F.pad(x, (1, 1, 3, 3), mode="reflect"),
        lambda x: torch.ops.aten.reflection_pad2d(x[0, 0], [1, 1, 1, 1]),
        lambda x: torch.ops.aten.reflection_pad1d(x[0, 0], [1, 1, 1]),
        lambda x: F.pad(x, (-5, 1), mode="replicate"),
        lambda x: torch.ops.aten.reflection_pad2d(x[:, :0], [1, 1, 1, 1]),
        lambda x: F.pad(x, (5, 5), mode="circular"),
    ],
    ids=["reflect-big", "reflect-small-out", "reflect2d-big", "reflect2d-rank", "pad-len", "replicate-small",
         "empty-dim", "circular-wrap"],
)
def test_mode_padding_errors(fn):
    _check_raises(fn, _rand(2, 3, 4))


def test_unfold_and_grad():
    x = _rand(3, 10)
    _check(lambda x: x.unfold(1, 4, 3), x, exact=True)
    _grads(lambda x: x.unfold(1, 4, 3), x)
    _grads(lambda x: x.unfold(1, 3, 1), x)
    _grads(lambda x: x.unfold(0, 2, 1), x)
    _grads(lambda x: x.unfold(0, 1, 1), torch.tensor(3.0))


# ---------------------------------------------------------------------- sorting

def _with_ties_and_nans(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, shape, generator=g).float()
    flat = x.view(-1)
    flat[torch.randperm(flat.numel(), generator=g)[: max(1, flat.numel() // 7)]] = float("nan")
    flat[0] = -0.0
    return x


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_stable(dim, descending):
    x = _with_ties_and_nans(6, 9)
    _check(lambda x: torch.sort(x, dim=dim, descending=descending, stable=True), x, exact=True)
    _check(lambda x: torch.argsort(x, dim=dim, descending=descending, stable=True), x, exact=True)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int8, torch.uint8, torch.bool, torch.float16, torch.bfloat16,
                                   torch.float64])
def test_sort_dtypes(dtype):
    x = _rand(4, 7, dtype=dtype)
    _check(lambda x: torch.sort(x, stable=True), x, exact=True)
    _check(lambda x: torch.sort(x.t(), dim=0, descending=True, stable=True), x, exact=True)


def test_sort_unstable_is_a_valid_sort():
    x = _with_ties_and_nans(5, 11, seed=3)
    cv, ci = torch.sort(x, 1)
    dv, di = torch.sort(to_dev(x), 1)
    assert_same(dv, cv)  # values are unique up to ties
    assert_same(to_dev(x).gather(1, di), cv)  # indices point at those values
    assert torch.equal(di.cpu().sort(1).values, torch.arange(11).expand(5, 11))


def test_sort_edge_cases_and_out():
    _check(lambda x: torch.sort(x), torch.tensor(3.0), exact=True)
    _check(lambda x: torch.sort(x, 0), torch.empty(0, 3), exact=True)
    _check(lambda x: torch.sort(x, 1), torch.empty(2, 0), exact=True)
    _check(lambda x: torch.sort(x, dim=1, stable=True), _rand(3, 1), exact=True)
    _check(lambda x: torch.msort(x), _rand(5, 3), exact=True)
    x = _rand(4, 5)
    v, i = torch.empty(0), torch.empty(0, dtype=torch.long)
    dv, di = to_dev(v), to_dev(i)
    torch.sort(x, dim=1, stable=True, out=(v, i))
    torch.sort(to_dev(x), dim=1, stable=True, out=(dv, di))
    assert_same(dv, v)
    assert_same(di, i)
    _check_raises(lambda x: torch.sort(x, 2), x)


def test_sort_large_slice_host_path():
    # slices this long take the host path; the result must still match exactly
    x = _with_ties_and_nans(2, 20000, seed=5)
    _check(lambda x: torch.sort(x, dim=1, stable=True), x, exact=True)
    _check(lambda x: torch.sort(x, dim=1, descending=True, stable=True), x, exact=True)
    _check(lambda x: torch.topk(x, 5, 1), torch.randn(2, 20000), exact=True)


def test_sort_autograd():
    _grads(lambda x: torch.sort(x, dim=1, stable=True).values, _rand(3, 6))
    _grads(lambda x: torch.topk(x, 2, 1).values, _rand(3, 6))


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("k,dim", [(1, 1), (3, 1), (4, 0), (0, 1), (7, -1)])
def test_topk(k, dim, largest):
    x = _rand(4, 7)  # distinct values: the order is unique
    _check(lambda x: torch.topk(x, k, dim, largest=largest), x, exact=True)
    v, i = torch.topk(to_dev(x), k, dim, largest=largest, sorted=False)
    cv, _ = torch.topk(x, k, dim, largest=largest)
    assert_same(v.sort(dim, descending=largest).values, cv)
    assert_same(to_dev(x).gather(dim, i), v)


def test_topk_ties_nans_and_errors():
    x = _with_ties_and_nans(3, 10, seed=2)
    for largest in [True, False]:
        v, i = torch.topk(to_dev(x), 4, 1, largest=largest)
        cv, _ = torch.topk(x, 4, 1, largest=largest)
        assert_same(v, cv)
        assert_same(to_dev(x).gather(1, i), v)
    _check(lambda x: torch.topk(x, 1), torch.tensor(2.0), exact=True)
    _check_raises(lambda x: torch.topk(x, 11, 1), x)
    _check_raises(lambda x: torch.topk(x, -1, 1), x)


@pytest.mark.parametrize("keepdim", [False, True])
def test_kthvalue(keepdim):
    x = _rand(5, 6)
    for k, dim in [(1, 1), (3, 0), (6, -1), (5, 0)]:
        _check(lambda x: torch.kthvalue(x, k, dim, keepdim), x, exact=True)
    y = _with_ties_and_nans(4, 9, seed=4)
    v, i = torch.kthvalue(to_dev(y), 5, 1, keepdim)
    cv, _ = torch.kthvalue(y, 5, 1, keepdim)
    assert_same(v, cv)
    assert_same(to_dev(y).gather(1, i if keepdim else i[:, None]).reshape(v.shape), v)
    _check(lambda x: torch.kthvalue(x, 1), torch.tensor(4.0), exact=True)
    _check_raises(lambda x: torch.kthvalue(x, 7, 1), x)
    _check_raises(lambda x: torch.kthvalue(x, 0, 1), x)
    _check_raises(lambda x: torch.kthvalue(x, 1, 1), torch.empty(2, 0))


# ---------------------------------------------------------------------- unique

def test_unique():
    x = torch.tensor([[3, 1, 2], [3, 1, 2], [0, 5, 1]])
    for kw in [{}, {"return_inverse": True}, {"return_counts": True}, {"return_inverse": True, "return_counts": True}]:
        _check(lambda x: torch.unique(x, **kw), x, exact=True)
        _check(lambda x: torch.unique(x, dim=0, **kw), x, exact=True)
        _check(lambda x: torch.unique_consecutive(x, **kw), x, exact=True)
    _check(lambda x: torch.unique(x * 0.5), x, exact=True)
    _check(lambda x: torch.unique(x), torch.empty(0), exact=True)


# ---------------------------------------------------------------------- searchsorted / bucketize

@pytest.mark.parametrize("right", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.float64])
def test_searchsorted(right, dtype):
    b = torch.tensor([-5, -1, 0, 0, 2, 2, 2, 7, 9]).to(dtype)
    v = torch.tensor([[-9, -5, -1, 0, 1], [2, 3, 7, 9, 10]]).to(dtype)
    _check(lambda b, v: torch.searchsorted(b, v, right=right), b, v, exact=True)
    _check(lambda b, v: torch.searchsorted(b, v, side="right" if right else "left", out_int32=True), b, v, exact=True)
    _check(lambda b, v: torch.bucketize(v, b, right=right), b, v, exact=True)
    _check(lambda b: torch.searchsorted(b, 2, right=right), b, exact=True)
    _check(lambda b: torch.bucketize(2, b, right=right), b, exact=True)


def test_searchsorted_nd_sorter_nan_and_promotion():
    b = torch.tensor([[1.0, 3.0, 5.0, 7.0], [2.0, 4.0, float("nan"), float("nan")]])
    v = torch.tensor([[0.0, 3.0, 8.0], [4.0, float("nan"), 5.0]])
    _check(lambda b, v: torch.searchsorted(b, v), b, v, exact=True)
    _check(lambda b, v: torch.searchsorted(b, v, right=True), b, v, exact=True)
    unsorted = torch.tensor([5.0, 1.0, 9.0, 3.0, 7.0])
    sorter = torch.argsort(unsorted)
    _check(lambda b, s, v: torch.searchsorted(b, v, sorter=s), unsorted, sorter, torch.tensor([0.0, 4.0, 9.0, 10.0]),
           exact=True)
    _check(lambda b, v: torch.searchsorted(b, v), torch.tensor([1, 5, 9]), torch.tensor([4.5, 5.0]), exact=True)
    _check(lambda b, v: torch.searchsorted(b, v), torch.arange(1000.0), torch.tensor([-1.0, 0.5, 998.5, 5000.0]),
           exact=True)
    _check(lambda b, v: torch.searchsorted(b, v), torch.empty(0), torch.tensor([1.0]), exact=True)
    out = torch.empty(0, dtype=torch.long)
    dout = to_dev(out)
    torch.searchsorted(b, v, out=out)
    torch.searchsorted(to_dev(b), to_dev(v), out=dout)
    assert_same(dout, out)


@pytest.mark.parametrize(
    "fn",
    [
        lambda b, v: torch.searchsorted(b, v, side="middle"),
        lambda b, v: torch.searchsorted(b, v, right=True, side="left"),
        lambda b, v: torch.searchsorted(b.reshape(2, 2), v),
        lambda b, v: torch.searchsorted(b, v, sorter=torch.tensor([0, 1, 2, 7], device=b.device)),
        lambda b, v: torch.searchsorted(b, v, sorter=torch.tensor([0, 1], device=b.device)),
        lambda b, v: torch.bucketize(v, b.reshape(2, 2)),
        lambda b, v: torch.searchsorted(b.sum(), v),
    ],
    ids=["side", "right-side", "leading-dims", "sorter-range", "sorter-size", "bucketize-rank", "0d-boundaries"],
)
def test_searchsorted_errors(fn):
    _check_raises(fn, torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([[1.5, 2.5, 3.5]]))
