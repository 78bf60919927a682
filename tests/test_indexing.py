"""Indexing ops compared with the CPU: advanced indexing (index / index_put_), index_select,
index_add / index_copy / index_fill / index_reduce, gather and the scatter family, take / put_,
masked_scatter, embedding (forward and backward), and the CPU's errors for bad indices.

Every case runs the same function on CPU tensors and on copies on the device under test.
"""

import warnings

import pytest
import torch

from conftest import DEV, IS_TINY, assert_bitwise_equal, assert_same, requires_tiny, sync, to_dev


def _dev(x):
    if isinstance(x, torch.Tensor):
        return to_dev(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_dev(v) for v in x)
    return x


def _check(fn, *args, exact=False, **kw):
    """fn on CPU args vs fn on device copies of the args."""
    expected = fn(*args)
    actual = fn(*_dev(args))
    if exact:
        if isinstance(expected, torch.Tensor):
            assert actual.device.type == DEV
            assert_bitwise_equal(actual, expected)
        else:
            for a, e in zip(actual, expected):
                assert_bitwise_equal(a, e)
    else:
        assert_same(actual, expected, **kw)
    return actual


def _check_inplace(fn, base, *args, **kw):
    """fn mutates its first argument: compare the mutated tensors (and the base for views)."""
    cb = base.clone()
    db = to_dev(base)
    fn(cb, *args)
    fn(db, *_dev(args))
    assert_same(db, cb, **kw)


def _check_raises(fn, *args, same_message=True):
    with pytest.raises(Exception) as cpu:
        fn(*args)
    with pytest.raises(Exception) as dev:
        fn(*_dev(args))
    assert type(dev.value) is type(cpu.value), f"{type(dev.value).__name__}: {dev.value}"
    if same_message:
        assert str(dev.value).splitlines()[0] == str(cpu.value).splitlines()[0]


def _f32(*shape):
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, dtype=torch.float32) * 0.25 - 3).reshape(shape)


def _rand(*shape, dtype=torch.float32):
    g = torch.Generator().manual_seed(sum(shape) + len(shape))
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=g).to(dtype)
    if dtype == torch.bool:
        return torch.rand(*shape, generator=g) > 0.5
    return torch.randint(-50, 50, shape, generator=g).to(dtype)


L = lambda *v: torch.tensor(v, dtype=torch.long)  # noqa: E731


def _on(x, t):
    """t on x's device (error cases build their other operands from x)."""
    return t.to(x.device)


# ---------------------------------------------------------------------- index.Tensor

INDEX_CASES = {
    "1d": (lambda: _f32(5, 4), lambda x: x[L(4, 0, -1, 2, 2)]),
    "neg": (lambda: _f32(5), lambda x: x[L(-5, -1)]),
    "dim1": (lambda: _f32(3, 6), lambda x: x[:, L(5, 0, -2)]),
    "two-bcast": (lambda: _f32(4, 5), lambda x: x[L(0, 3, 1).reshape(3, 1), L(4, 0)]),
    "adjacent-middle": (lambda: _f32(2, 4, 5, 3), lambda x: x[:, L(1, 3), L(0, 4)]),
    "non-adjacent": (lambda: _f32(4, 3, 5), lambda x: x[L(0, 3), :, L(4, 1)]),
    "non-adjacent-bcast": (lambda: _f32(4, 3, 5, 2), lambda x: x[L(0, 3).reshape(2, 1), :, L(4, 1, 2)]),
    "ellipsis": (lambda: _f32(2, 3, 4), lambda x: x[..., L(3, 0)]),
    "2d-index": (lambda: _f32(6, 2), lambda x: x[L(0, 5, 2, 2).reshape(2, 2)]),
    "0d-index": (lambda: _f32(6, 2), lambda x: x[torch.tensor(3)]),
    "empty-index": (lambda: _f32(6, 2), lambda x: x[torch.tensor([], dtype=torch.long)]),
    "empty-self": (lambda: _f32(0, 3), lambda x: x[:, L(2, 0)]),
    "int32": (lambda: _f32(5, 3), lambda x: x[torch.tensor([4, 1], dtype=torch.int32)]),
    "mask-full": (lambda: _f32(3, 4), lambda x: x[x > -1.5]),
    "mask-rows": (lambda: _f32(4, 3), lambda x: x[torch.tensor([True, False, True, True])]),
    "mask-cols": (lambda: _f32(2, 4, 3), lambda x: x[:, torch.tensor([False, True, False, True])]),
    "mask-and-index": (lambda: _f32(4, 3), lambda x: x[torch.tensor([True, False, True, True]), L(2, 0, 1)]),
    "none": (lambda: _f32(4, 3), lambda x: x[L(1, 2), None]),
    "slice-then-index": (lambda: _f32(6, 5), lambda x: x[1:5:2, L(4, 0)]),
    "transposed": (lambda: _f32(6, 5), lambda x: x.t()[L(4, 0, 1)]),
    "expanded": (lambda: _f32(1, 5), lambda x: x.expand(4, 5)[L(3, 0), L(1, 1)]),
    "int64-values": (lambda: torch.arange(20).reshape(4, 5) * 1000003, lambda x: x[L(3, 1), L(0, 4)]),
    "bool-values": (lambda: torch.arange(20).reshape(4, 5) % 3 == 0, lambda x: x[L(3, 1)]),
    "f16": (lambda: _f32(4, 5).half(), lambda x: x[:, L(3, 1)]),
    "bf16": (lambda: _f32(4, 5).bfloat16(), lambda x: x[L(3, 1)]),
    "f64": (lambda: _f32(4, 5).double(), lambda x: x[L(3, 1)]),
    "large": (lambda: _rand(1000, 64), lambda x: x[torch.randint(0, 1000, (777,), generator=torch.Generator().manual_seed(1))]),
}


@pytest.mark.parametrize("name", list(INDEX_CASES))
def test_index(name):
    make, fn = INDEX_CASES[name]
    _check(fn, make(), exact=True)


def test_index_cpu_indices_on_device_tensor():
    x = _f32(5, 4)
    idx = L(4, 0, 2)
    assert_bitwise_equal(to_dev(x)[idx], x[idx], check_device=True)
    assert_bitwise_equal(to_dev(x)[:, idx.remainder(4)], x[:, idx.remainder(4)], check_device=True)


def test_index_with_lazy_index():
    # the index is computed on the device (still lazy when indexing)
    x = _f32(7, 3)
    _check(lambda x, i: x[(i * 3) % 7], x, L(0, 1, 2, 3, 4), exact=True)


def test_index_out():
    x = _f32(4, 5)
    out = torch.empty(0)
    dout = to_dev(out)
    torch.index_select(x, 0, L(1), out=out)  # warm-up shapes only
    r = torch.ops.aten.index.Tensor_out(x, [L(3, 1)], out=out)
    d = torch.ops.aten.index.Tensor_out(to_dev(x), [to_dev(L(3, 1))], out=dout)
    assert_same(d, r)
    assert_same(dout, out)


def test_index_then_math_is_one_kernel():
    requires_tiny()
    import torch_tiny

    x = to_dev(_f32(64, 16))
    i = to_dev(L(5, 63, 0, 7))
    sync()
    with torch_tiny.debug.count_kernels() as c:
        y = (x[i] * 2 + 1).sum(1)
        out = y.cpu()
    assert c.kernels == 1
    assert_same(out, (_f32(64, 16)[L(5, 63, 0, 7)] * 2 + 1).sum(1), check_device=False)


def test_index_autograd():
    x = _f32(5, 3).requires_grad_()
    dx = to_dev(x.detach()).requires_grad_()
    idx = L(0, 4, 0, 2)
    (x[idx] * torch.arange(3.0)).sum().backward()
    (dx[to_dev(idx)] * to_dev(torch.arange(3.0))).sum().backward()
    assert_same(dx.grad, x.grad)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x[_on(x, L(5))],
        lambda x: x[_on(x, L(-6))],
        lambda x: x[:, _on(x, L(0, 3))],
        lambda x: x[_on(x, L(0)), _on(x, L(7))],
        lambda x: x[_on(x, torch.tensor([True, False]))],
        lambda x: x[_on(x, L(0, 1)), _on(x, L(0, 1, 2))],
        lambda x: x[_on(x, torch.tensor([0.0]))],
        lambda x: x[_on(x, L(0)), _on(x, L(0)), _on(x, L(0))],
        lambda x: x[:0][_on(x, L(0))],
    ],
    ids=["pos", "neg", "dim1", "second", "mask-shape", "bcast", "float", "too-many", "empty-dim"],
)
def test_index_errors(fn):
    _check_raises(fn, _f32(5, 3))


# ---------------------------------------------------------------------- index_put_

@pytest.mark.parametrize("accumulate", [False, True])
@pytest.mark.parametrize(
    "case",
    [
        ((5, 3), [L(4, 0, 2)], (3, 3)),
        ((5, 3), [L(4, 0, 2)], (3,)),
        ((5, 3), [L(4, 0, 2)], ()),
        ((5, 3), [L(-1, 1)], (2, 1)),
        ((4, 5), [L(0, 3, 1).reshape(3, 1), L(4, 0)], (3, 2)),
        ((4, 3, 5), [L(0, 3), slice(None), L(4, 1)], (2, 3)),
        ((2, 4, 5), [slice(None), L(1, 3), L(0, 4)], (2, 2)),
        ((6,), [torch.tensor([], dtype=torch.long)], (0,)),
    ],
    ids=["rows", "bcast-row", "scalar", "neg", "two", "non-adjacent", "middle", "empty"],
)
def test_index_put(case, accumulate):
    shape, idx, vshape = case
    base = _f32(*shape)
    vals = _rand(*vshape) if vshape else torch.tensor(7.5)

    def fn(x, v, *idx):
        # slices (whole dims) are None entries, as Python indexing passes them
        key = tuple(k if isinstance(k, torch.Tensor) else None for k in idx)
        torch.ops.aten.index_put_(x, list(key), v, accumulate)

    _check_inplace(fn, base, vals, *idx)


def test_index_put_accumulate_duplicates():
    base = torch.zeros(4, 3)
    idx = L(0, 1, 0, 0, 3, 1)
    vals = _rand(6, 3)
    _check_inplace(lambda x, i, v: x.index_put_((i,), v, accumulate=True), base, idx, vals)
    ibase = torch.zeros(5, dtype=torch.int64)
    _check_inplace(lambda x, i, v: x.index_put_((i,), v, accumulate=True), ibase, L(1, 1, 4, 1), L(3, 4, 5, 6))


def test_index_put_masks_and_setitem():
    base = _f32(4, 5)
    _check_inplace(lambda x: x.__setitem__(x > 0, 0.0), base)
    _check_inplace(lambda x, v: x.__setitem__(x < -1, v), base, torch.tensor(9.0))
    m = torch.tensor([True, False, True, False])
    _check_inplace(lambda x, m, v: x.__setitem__(m, v), base, m, _rand(2, 5))
    _check_inplace(lambda x, i: x.__setitem__((slice(None), i), -1.0), base, L(4, 0))


def test_index_put_on_views():
    base = _f32(6, 5)
    _check_inplace(lambda x, i: x.t().__setitem__(i, 100.0), base, L(0, 3))
    _check_inplace(lambda x, i, v: x[1::2].index_put_((i,), v, accumulate=True), base, L(2, 0, 2), torch.ones(3, 5))


def test_index_put_functional():
    _check(lambda x, i, v: torch.index_put(x, (i,), v), _f32(4, 3), L(3, 0), _rand(2, 3))
    _check(lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True), _f32(4, 3), L(3, 3), _rand(2, 3))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.index_put_((_on(x, L(5)),), _on(x, torch.tensor(1.0))),
        lambda x: x.index_put_((_on(x, L(0)), _on(x, L(-4))), _on(x, torch.tensor(1.0)), accumulate=True),
        lambda x: x.index_put_((_on(x, L(0, 1)),), _on(x, torch.ones(2))),
        lambda x: x.index_put_((_on(x, L(0, 1)),), _on(x, torch.ones(2, 3, dtype=torch.long))),
        lambda x: x.index_put_((_on(x, L(0)), _on(x, L(0)), _on(x, L(0))), _on(x, torch.tensor(1.0))),
    ],
    ids=["oob", "oob-neg-acc", "value-shape", "value-dtype", "too-many"],
)
def test_index_put_errors(fn):
    _check_raises(fn, _f32(5, 3))


# ---------------------------------------------------------------------- index_select

@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16])
@pytest.mark.parametrize("dim", [0, 1, -1, 2])
def test_index_select(dim, dtype):
    x = _rand(4, 5, 6, dtype=dtype)
    idx = L(3, 0, 3, 1)
    _check(lambda x, i: torch.index_select(x, dim, i), x, idx, exact=True)
    _check(lambda x, i: torch.index_select(x.transpose(0, 2), dim, i), x, idx, exact=True)


def test_index_select_small_ranks_and_out():
    _check(lambda x, i: x.index_select(0, i), _f32(7), L(6, 0, 2), exact=True)
    _check(lambda x, i: x.index_select(0, i), torch.tensor(2.5), L(0), exact=True)
    _check(lambda x, i: x.index_select(0, i), _f32(7), torch.tensor([1, 2], dtype=torch.int32), exact=True)
    _check(lambda x, i: x.index_select(1, i), _f32(3, 4), torch.tensor([], dtype=torch.long), exact=True)
    out = torch.empty(0)
    dout = to_dev(out)
    torch.index_select(_f32(4, 3), 1, L(2, 2), out=out)
    torch.index_select(to_dev(_f32(4, 3)), 1, to_dev(L(2, 2)), out=dout)
    assert_same(dout, out)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.index_select(0, _on(x, L(3))),
        lambda x: x.index_select(0, _on(x, L(-1))),
        lambda x: x.index_select(1, _on(x, L(4))),
        lambda x: x.index_select(1, _on(x, L(-1))),
        lambda x: x[0].index_select(0, _on(x, L(4))),
        lambda x: x.index_select(0, _on(x, torch.tensor([0.0]))),
        lambda x: x.index_select(0, _on(x, L(0, 1).reshape(1, 2))),
    ],
    ids=["dim0", "dim0-neg", "dim1", "dim1-neg", "1d", "float-index", "2d-index"],
)
def test_index_select_errors(fn):
    _check_raises(fn, _f32(3, 4))


def test_embedding_forward_and_backward():
    w = _rand(10, 4).requires_grad_()
    dw = to_dev(w.detach()).requires_grad_()
    idx = L(1, 9, 1, 0, 3, 3, 3).reshape(7, 1)
    for kw in [{}, {"padding_idx": 3}, {"scale_grad_by_freq": True}, {"padding_idx": 1, "scale_grad_by_freq": True}]:
        w.grad = None
        dw.grad = None
        out = torch.nn.functional.embedding(idx, w, **kw)
        dout = torch.nn.functional.embedding(to_dev(idx), dw, **kw)
        assert_same(dout, out)
        g = _rand(7, 1, 4)
        out.backward(g)
        dout.backward(to_dev(g))
        assert_same(dw.grad, w.grad)
    _check_raises(lambda i, w: torch.nn.functional.embedding(i, w), L(10), w.detach())


# ---------------------------------------------------------------------- index_add / copy / fill / reduce

@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.float64])
def test_index_add_copy(dim, dtype):
    base = _rand(4, 5, dtype=dtype)
    idx = L(3, 0, 2) if dim == 0 else L(4, 0, 2)
    src = _rand(3, 5, dtype=dtype) if dim == 0 else _rand(4, 3, dtype=dtype)
    _check(lambda x, i, s: x.index_add(dim, i, s), base, idx, src)
    _check(lambda x, i, s: x.index_add(dim, i, s, alpha=3), base, idx, src)
    _check(lambda x, i, s: x.index_copy(dim, i, s), base, idx, src)
    _check_inplace(lambda x, i, s: x.index_add_(dim, i, s), base, idx, src)
    _check_inplace(lambda x, i, s: x.index_copy_(dim, i, s), base, idx, src)
    _check_inplace(lambda x, i, s: x.t().index_add_(1 - (dim % 2), i, s.t()), base, idx, src)
    out = torch.empty(0, dtype=dtype)
    dout = to_dev(out)
    torch.index_add(base, dim, idx, src, out=out)
    torch.index_add(to_dev(base), dim, to_dev(idx), to_dev(src), out=dout)
    assert_same(dout, out)


def test_index_add_duplicates_and_small_ranks():
    _check(lambda x, i, s: x.index_add(0, i, s), torch.zeros(3, 2), L(0, 0, 2, 0), _rand(4, 2))
    _check(lambda x, i, s: x.index_add(0, i, s), torch.zeros(3), L(1, 1), torch.tensor([1.0, 2.0]))
    _check(lambda x, i, s: x.index_add(0, i, s), torch.tensor(1.0), L(0), torch.tensor(2.0))


@pytest.mark.filterwarnings("ignore:index_reduce")
@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_index_reduce(reduce, include_self, dtype):
    base = _rand(5, 3, dtype=dtype)
    src = _rand(6, 3, dtype=dtype)
    idx = L(0, 4, 0, 2, 0, 4)
    _check(lambda x, i, s: x.index_reduce(0, i, s, reduce, include_self=include_self), base, idx, src)
    _check_inplace(lambda x, i, s: x.index_reduce_(0, i, s, reduce, include_self=include_self), base, idx, src)


def test_index_fill():
    base = _f32(4, 5)
    _check(lambda x, i: x.index_fill(1, i, -2.0), base, L(4, 0, -1), exact=True)
    _check(lambda x, i: x.index_fill(0, i, 7), base.long(), L(3), exact=True)
    _check(lambda x, i, v: x.index_fill(1, i, v), base, L(2), torch.tensor(5.5), exact=True)
    _check(lambda x, i: x.index_fill(0, i, 1.0), torch.tensor(3.0), L(0), exact=True)
    _check_inplace(lambda x, i: x.t().index_fill_(0, i, 9.0), base, L(1, 3))


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.index_add(0, _on(x, L(3)), _on(x, torch.ones(1, 4))),
        lambda x: x.index_add(1, _on(x, L(-1)), _on(x, torch.ones(3, 1))),
        lambda x: x[0].index_add(0, _on(x, L(4)), _on(x, torch.ones(1))),
        lambda x: x.index_add(0, _on(x, L(0, 1)), _on(x, torch.ones(3, 4))),
        lambda x: x.index_add(0, _on(x, L(0)), _on(x, torch.ones(1, 4, dtype=torch.long))),
        lambda x: x.index_copy(0, _on(x, L(3)), _on(x, torch.ones(1, 4))),
        lambda x: x.index_copy(1, _on(x, L(-1)), _on(x, torch.ones(3, 1))),
        lambda x: x.index_fill(1, _on(x, L(-5)), 1.0),
        lambda x: x.index_fill(1, _on(x, torch.tensor([0], dtype=torch.int32)), 1.0),
        lambda x: x.index_reduce(0, _on(x, L(3)), _on(x, torch.ones(1, 4)), "amax"),
        lambda x: x.index_reduce(0, _on(x, L(0)), _on(x, torch.ones(1, 4)), "sum"),
    ],
    ids=["add", "add-neg", "add-1d", "add-count", "add-dtype", "copy", "copy-neg", "fill", "fill-int32",
         "reduce", "reduce-name"],
)
def test_index_family_errors(fn):
    _check_raises(fn, _f32(3, 4))


# ---------------------------------------------------------------------- gather / scatter

@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int16, torch.bool, torch.bfloat16])
def test_gather(dim, dtype):
    x = _rand(4, 5, 3, dtype=dtype)
    g = torch.Generator().manual_seed(3)
    shape = [3, 4, 2]
    shape[dim] = 6
    idx = torch.randint(0, x.shape[dim], shape, generator=g)
    _check(lambda x, i: torch.gather(x, dim, i), x, idx, exact=True)
    _check(lambda x, i: torch.gather(x.permute(2, 0, 1).permute(1, 2, 0), dim, i), x, idx, exact=True)


def test_gather_edge_cases():
    _check(lambda x, i: torch.gather(x, 0, i), torch.tensor(4.0), torch.tensor(0), exact=True)
    _check(lambda x, i: torch.gather(x, 0, i), _f32(5), L(4, 4, 0), exact=True)
    _check(lambda x, i: torch.gather(x, 1, i), _f32(3, 4), torch.zeros(3, 0, dtype=torch.long), exact=True)
    _check(lambda x, i: torch.take_along_dim(x, i, 1), _f32(3, 4), L(3, 0, 1).reshape(3, 1), exact=True)
    out = torch.empty(0)
    dout = to_dev(out)
    torch.gather(_f32(3, 4), 1, L(1, 2, 3).reshape(3, 1), out=out)
    torch.gather(to_dev(_f32(3, 4)), 1, to_dev(L(1, 2, 3).reshape(3, 1)), out=dout)
    assert_same(dout, out)


def test_gather_autograd():
    x = _rand(4, 3).requires_grad_()
    dx = to_dev(x.detach()).requires_grad_()
    idx = L(0, 2, 2, 1, 0, 0).reshape(2, 3)
    torch.gather(x, 0, idx).sum().backward()
    torch.gather(dx, 0, to_dev(idx)).sum().backward()
    assert_same(dx.grad, x.grad)


def _perm_index(shape, dim, size, seed):
    # distinct targets along `dim` (scatter without reduction is order-independent)
    g = torch.Generator().manual_seed(seed)
    out = torch.empty(shape, dtype=torch.long)
    moved = out.movedim(dim, -1)
    for pos in torch.cartesian_prod(*[torch.arange(s) for s in moved.shape[:-1]]).reshape(-1, moved.dim() - 1):
        moved[tuple(pos.tolist())] = torch.randperm(size, generator=g)[: moved.shape[-1]]
    return out


@pytest.mark.parametrize("dim", [0, 1])
def test_scatter(dim):
    base = _rand(5, 6)
    ishape = [3, 4]
    idx = _perm_index(ishape, dim, base.shape[dim], 5)
    src = _rand(4, 5)
    _check(lambda x, i, s: x.scatter(dim, i, s), base, idx, src, exact=True)
    _check(lambda x, i: x.scatter(dim, i, -1.5), base, idx, exact=True)
    _check_inplace(lambda x, i, s: x.scatter_(dim, i, s), base, idx, src)
    _check_inplace(lambda x, i, s: x.t().scatter_(1 - dim, i.t(), s.t()), base, idx, src)
    out = torch.empty(0)
    dout = to_dev(out)
    torch.scatter(base, dim, idx, src, out=out)
    torch.scatter(to_dev(base), dim, to_dev(idx), to_dev(src), out=dout)
    assert_same(dout, out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int8])
def test_scatter_add_and_legacy_reduce(dtype):
    base = _rand(4, 3, dtype=dtype)
    idx = L(0, 3, 0, 0, 1, 0, 3, 3, 3).reshape(3, 3)
    src = _rand(3, 3, dtype=dtype)
    _check(lambda x, i, s: x.scatter_add(0, i, s), base, idx, src)
    _check_inplace(lambda x, i, s: x.scatter_add_(0, i, s), base, idx, src)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the Tensor-src reduce argument is deprecated
        _check(lambda x, i, s: x.scatter(0, i, s, reduce="add"), base, idx, src)
        _check(lambda x, i, s: x.scatter(0, i, s, reduce="multiply"), base, idx, src)
    _check(lambda x, i: x.scatter(0, i, 2, reduce="multiply"), base, idx)
    _check(lambda x, i: x.scatter(0, i, 2, reduce="add"), base, idx)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_scatter_reduce(reduce, include_self, dtype):
    base = _rand(5, 4, dtype=dtype)
    idx = L(0, 4, 0, 2, 0, 4, 4, 1, 0, 0, 0, 2).reshape(3, 4)
    src = _rand(3, 4, dtype=dtype)
    _check(lambda x, i, s: x.scatter_reduce(0, i, s, reduce, include_self=include_self), base, idx, src)
    _check_inplace(lambda x, i, s: x.scatter_reduce_(1, i.t()[:, :3].remainder(4), s, reduce, include_self=include_self),
                   base, idx, src.t().contiguous())


def test_scatter_reduce_nan_propagates():
    base = torch.tensor([1.0, 2.0, 3.0])
    src = torch.tensor([float("nan"), 5.0, -1.0])
    idx = L(0, 1, 1)
    for r in ["amax", "amin", "sum"]:
        _check(lambda x, i, s: x.scatter_reduce(0, i, s, r), base, idx, src)


def test_scatter_autograd():
    x = _rand(4, 3).requires_grad_()
    s = _rand(2, 3).requires_grad_()
    dx = to_dev(x.detach()).requires_grad_()
    ds = to_dev(s.detach()).requires_grad_()
    idx = L(0, 3, 1, 2, 0, 3).reshape(2, 3)
    (x.scatter(0, idx, s) * torch.arange(3.0)).sum().backward()
    (dx.scatter(0, to_dev(idx), ds) * to_dev(torch.arange(3.0))).sum().backward()
    assert_same(dx.grad, x.grad)
    assert_same(ds.grad, s.grad)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.gather(0, _on(x, L(3).reshape(1, 1))),
        lambda x: x.gather(1, _on(x, L(-1).reshape(1, 1))),
        lambda x: x.gather(0, _on(x, L(0))),
        lambda x: x.gather(0, _on(x, torch.zeros(1, 1))),
        lambda x: x.scatter(0, _on(x, L(3).reshape(1, 1)), 1.0),
        lambda x: x.scatter(0, _on(x, L(0).reshape(1, 1)), _on(x, torch.ones(1, 1, dtype=torch.long))),
        lambda x: x.scatter_add(1, _on(x, L(4).reshape(1, 1)), _on(x, torch.ones(1, 1))),
        lambda x: x.scatter_reduce(0, _on(x, L(3).reshape(1, 1)), _on(x, torch.ones(1, 1)), "sum"),
        lambda x: x.scatter_reduce(0, _on(x, L(0).reshape(1, 1)), _on(x, torch.ones(1, 1)), "foo"),
        lambda x: x.scatter(0, _on(x, L(0).reshape(1, 1)), 1.0, reduce="foo"),
        lambda x: x.scatter(0, _on(x, L(0, 1, 2, 0).reshape(4, 1)), _on(x, torch.ones(2, 1))),
    ],
    ids=["gather", "gather-neg", "gather-rank", "gather-dtype", "scatter", "scatter-dtype", "scatter_add",
         "scatter_reduce", "reduce-name", "legacy-name", "src-small"],
)
def test_gather_scatter_errors(fn):
    _check_raises(fn, _f32(3, 4))


# ---------------------------------------------------------------------- take / put_

def test_take():
    x = _f32(3, 4)
    _check(lambda x, i: x.take(i), x, L(11, -1, 0, 5).reshape(2, 2), exact=True)
    _check(lambda x, i: x.t().take(i), x, L(11, -12, 0, 5, 6), exact=True)
    _check(lambda x, i: x[:, 1:3].take(i), x, L(5, 0, 3), exact=True)
    _check(lambda x, i: x.take(i), x, torch.zeros(0, dtype=torch.long), exact=True)
    _check(lambda x, i: torch.take(x, i), torch.tensor(3.0), L(0, -1), exact=True)


@pytest.mark.parametrize("accumulate", [False, True])
def test_put(accumulate):
    base = _f32(3, 4)
    idx = L(11, -1, 0, 5) if accumulate else L(11, 2, 0, 5)
    src = _rand(2, 2)
    _check_inplace(lambda x, i, s: x.put_(i, s, accumulate=accumulate), base, idx, src)
    _check_inplace(lambda x, i, s: x.t().put_(i, s, accumulate=accumulate), base, idx, src)
    _check(lambda x, i, s: x.put(i, s, accumulate=accumulate), base, idx, src)


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.take(_on(x, L(12))),
        lambda x: x.take(_on(x, L(-13))),
        lambda x: x[:0].take(_on(x, L(0))),
        lambda x: x.take(_on(x, torch.tensor([0], dtype=torch.int32))),
        lambda x: x.put_(_on(x, L(12)), _on(x, torch.ones(1))),
        lambda x: x.put_(_on(x, L(0, 1)), _on(x, torch.ones(1))),
        lambda x: x.put_(_on(x, L(0)), _on(x, torch.ones(1, dtype=torch.long))),
    ],
    ids=["take", "take-neg", "take-empty", "take-int32", "put", "put-count", "put-dtype"],
)
def test_take_put_errors(fn):
    _check_raises(fn, _f32(3, 4))


# ---------------------------------------------------------------------- masked_scatter / where

def test_masked_scatter():
    base = _f32(3, 4)
    mask = (torch.arange(12).reshape(3, 4) % 3) == 1
    src = _rand(20)
    _check(lambda x, m, s: x.masked_scatter(m, s), base, mask, src, exact=True)
    _check(lambda x, m, s: x.masked_scatter(m, s), base, mask[0], src, exact=True)
    _check_inplace(lambda x, m, s: x.t().masked_scatter_(m, s), base, mask.t().contiguous(), src)
    _check(lambda x, m, s: x.masked_scatter(m, s), base, torch.zeros(3, 4, dtype=torch.bool), src, exact=True)
    _check_raises(lambda x, m, s: x.masked_scatter(m, s), base, mask, _rand(2))
    _check_raises(lambda x, m, s: x.masked_scatter(m, s), base, mask, _rand(20).long())


def _has_kernel(op):
    return not IS_TINY or torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1")


@pytest.mark.skipif(not _has_kernel("aten::masked_fill_.Scalar"), reason="backward needs masked_fill_ (another branch)")
def test_masked_scatter_autograd():
    x = _f32(3, 4).requires_grad_()
    s = _rand(12).requires_grad_()
    dx = to_dev(x.detach()).requires_grad_()
    ds = to_dev(s.detach()).requires_grad_()
    m = (torch.arange(12).reshape(3, 4) % 2) == 0
    (x.masked_scatter(m, s) ** 2).sum().backward()
    (dx.masked_scatter(to_dev(m), ds) ** 2).sum().backward()
    assert_same(dx.grad, x.grad)
    assert_same(ds.grad, s.grad)


def test_where_single_argument():
    x = torch.tensor([[0.0, 1.5, 0.0], [-2.0, 0.0, 3.0]])
    _check(lambda x: torch.where(x), x, exact=True)
    _check(lambda x: torch.where(x > 0), x, exact=True)


# ---------------------------------------------------------------------- aliasing

def test_writes_through_views_and_expanded_tensors():
    def run(dev):
        out = []
        base = torch.arange(4.0, device=dev)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # index_put_ on expanded tensors is deprecated
            base.expand(3, 4).index_put_((torch.tensor([1], device=dev), torch.tensor([2], device=dev)),
                                         torch.tensor(9.0, device=dev))
            out.append(base.clone())
            z = torch.zeros(4, device=dev)
            z.expand(3, 4).index_put_((torch.tensor([0, 1, 2], device=dev), torch.tensor([1, 1, 1], device=dev)),
                                      torch.tensor(1.0, device=dev), accumulate=True)
            out.append(z)
        b = torch.arange(10.0, device=dev)
        v1, v2 = b[2:8], b[::2]
        before = v2 * 1  # computed before the write: keeps the old values
        v1[torch.tensor([0, 3], device=dev)] = -1.0
        out += [v2.clone(), b.clone(), before]
        c = torch.arange(10.0, device=dev)
        c[2:8].scatter_add_(0, torch.tensor([0, 0, 5], device=dev), torch.ones(3, device=dev))
        c[1::3].index_fill_(0, torch.tensor([2], device=dev), 100.0)
        c.t()[torch.tensor([9], device=dev)] += 0.5
        out.append(c)
        return out

    assert_same(run(DEV), run("cpu"))
