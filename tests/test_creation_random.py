"""Creation and random ops.

Deterministic factories (linspace, logspace, eye, full/zeros/ones and *_like, tril/triu) are
compared with the CPU. Random ops cannot match the CPU's values (the generators differ), so
they are checked for shape, dtype, device, range, repeatability under torch.manual_seed and
explicit generators, and for their distribution: sample moments of large samples must lie
within a few standard errors of the exact ones. Bad arguments raise what the CPU raises.
"""

import math

import pytest
import torch
import torch.nn.functional as F

from conftest import DEV, IS_TINY, assert_bitwise_equal, assert_same, requires_tiny, sync, to_dev

N = 200_000  # sample size for the moment checks


def _check(fn, *args, exact=False, **kw):
    expected = fn(*args)
    actual = fn(*[to_dev(a) if isinstance(a, torch.Tensor) else a for a in args])
    if exact:
        assert actual.device.type == DEV
        assert_bitwise_equal(actual, expected)
    else:
        assert_same(actual, expected, **kw)


def _check_raises(fn, same_message=True):
    """fn(device) raises on the CPU and on the device under test alike."""
    with pytest.raises(Exception) as cpu:
        fn("cpu")
    with pytest.raises(Exception) as dev:
        fn(DEV)
    assert type(dev.value) is type(cpu.value), f"{type(dev.value).__name__}: {dev.value}"
    if same_message:
        assert str(dev.value).splitlines()[0] == str(cpu.value).splitlines()[0]


def _moments(x):
    x = x.detach().cpu().double().flatten()
    return x.mean().item(), x.var().item()


def _assert_mean(x, mean, var, k=6.0):
    """The sample mean of x is within k standard errors of `mean`."""
    m, _ = _moments(x)
    se = math.sqrt(var / x.numel())
    assert abs(m - mean) <= k * se, f"mean {m} vs {mean} (se {se})"


def _assert_var(x, var, rel=0.03):
    _, v = _moments(x)
    assert abs(v - var) <= rel * var, f"variance {v} vs {var}"


# ---------------------------------------------------------------------- deterministic factories

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int8, torch.int32])
@pytest.mark.parametrize("start,end,steps", [(-3, 7.5, 11), (0, 1, 1), (2.7, -3.3, 5), (1, 1, 4), (0, 10, 0),
                                             (-1000, 1000, 1001)])
def test_linspace(dtype, start, end, steps):
    if dtype == torch.int8 and abs(start) > 100:
        pytest.skip("out of int8 range")
    expected = torch.linspace(start, end, steps, dtype=dtype)
    actual = torch.linspace(start, end, steps, dtype=dtype, device=DEV)
    if dtype in (torch.float16, torch.bfloat16):
        # the CPU accumulates in the 16-bit type itself (step * i rounded, then added), so its
        # values are off by up to an ulp of the range; the device rounds the exact value once
        atol = 2 * torch.finfo(dtype).eps * max(abs(start), abs(end))
        assert_same(actual, expected, rtol=0, atol=atol)
    else:
        assert_same(actual, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64])
def test_logspace(dtype):
    for start, end, steps, base in [(-2, 2, 9, 10.0), (0, 10, 11, 2.0), (1, 3, 1, 10.0), (3, -1, 5, 3.0)]:
        expected = torch.logspace(start, end, steps, base=base, dtype=dtype)
        actual = torch.logspace(start, end, steps, base=base, dtype=dtype, device=DEV)
        assert_same(actual, expected)


def test_linspace_logspace_out_and_errors():
    out = torch.empty(0)
    dout = torch.empty(0, device=DEV)
    torch.linspace(0, 1, 7, out=out)
    torch.linspace(0, 1, 7, out=dout)
    assert_same(dout, out)
    torch.logspace(0, 1, 7, out=out)
    torch.logspace(0, 1, 7, out=dout)
    assert_same(dout, out)
    _check_raises(lambda d: torch.linspace(0, 1, -1, device=d))
    _check_raises(lambda d: torch.logspace(0, 1, -1, device=d))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16])
def test_eye(dtype):
    for args in [(4,), (3, 5), (5, 2), (0,), (0, 3), (1, 1)]:
        assert_bitwise_equal(torch.eye(*args, dtype=dtype, device=DEV), torch.eye(*args, dtype=dtype), check_device=True)
    out = torch.empty(0, dtype=dtype)
    dout = torch.empty(0, dtype=dtype, device=DEV)
    torch.eye(3, 4, out=out)
    torch.eye(3, 4, out=dout)
    assert_bitwise_equal(dout, out)
    _check_raises(lambda d: torch.eye(-1, device=d))
    _check_raises(lambda d: torch.eye(2, -1, device=d))


def test_full_zeros_ones_and_like():
    for dtype in [torch.float32, torch.int32, torch.bool, torch.float64, torch.bfloat16]:
        assert_bitwise_equal(torch.zeros(2, 3, dtype=dtype, device=DEV), torch.zeros(2, 3, dtype=dtype), check_device=True)
        assert_bitwise_equal(torch.ones(4, dtype=dtype, device=DEV), torch.ones(4, dtype=dtype), check_device=True)
        assert_bitwise_equal(torch.full((2, 2), 3, dtype=dtype, device=DEV), torch.full((2, 2), 3, dtype=dtype))
    x = torch.arange(6.0).reshape(2, 3)
    _check(lambda x: torch.zeros_like(x), x, exact=True)
    _check(lambda x: torch.ones_like(x, dtype=torch.int16), x, exact=True)
    _check(lambda x: torch.full_like(x, -2.5), x, exact=True)
    _check(lambda x: torch.full_like(x.t(), float("nan")), x, exact=True)
    _check(lambda x: x.new_full((3,), 4), x, exact=True)
    _check(lambda x: x.new_zeros((2, 0)), x, exact=True)
    _check(lambda x: x.new_ones(()), x, exact=True)
    _check(lambda x: torch.zeros_like(x).fill_(1.5), x, exact=True)
    _check(lambda x: x.new_full((2, 2), -0.0) + x[:, :2] * 0, x, exact=True)


@pytest.mark.parametrize("diagonal", [0, 1, -1, 3, -5])
@pytest.mark.parametrize("shape", [(4, 5), (5, 3), (2, 3, 4), (0, 3), (3, 3)])
def test_tril_triu(shape, diagonal):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(0))
    _check(lambda x: torch.tril(x, diagonal), x, exact=True)
    _check(lambda x: torch.triu(x, diagonal), x, exact=True)
    _check(lambda x: torch.triu(x.transpose(-1, -2), diagonal), x, exact=True)
    for op in ["tril_", "triu_"]:
        a, b = x.clone(), to_dev(x)
        getattr(a, op)(diagonal)
        getattr(b, op)(diagonal)
        assert_bitwise_equal(b, a, check_device=True)


def test_tril_triu_out_grad_errors():
    x = torch.randn(4, 4, generator=torch.Generator().manual_seed(1))
    out, dout = torch.empty(0), torch.empty(0, device=DEV)
    torch.tril(x, 1, out=out)
    torch.tril(to_dev(x), 1, out=dout)
    assert_same(dout, out)
    _check(lambda x: torch.tril(x.long()), x, exact=True)
    _check(lambda x: torch.triu(x > 0), x, exact=True)
    a = x.clone().requires_grad_()
    b = to_dev(x).requires_grad_()
    torch.tril(a, -1).sum().backward()
    torch.tril(b, -1).sum().backward()
    assert_same(b.grad, a.grad)
    _check_raises(lambda d: torch.tril(torch.zeros(3, device=d)))
    _check_raises(lambda d: torch.triu(torch.zeros(3, device=d)))


# ---------------------------------------------------------------------- random: shapes, ranges, seeds

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_rand_range_and_moments(dtype):
    x = torch.rand(N, dtype=dtype, device=DEV)
    assert x.device.type == DEV and x.dtype == dtype and x.shape == (N,)
    c = x.cpu()
    assert c.min() >= 0 and c.max() < 1
    _assert_mean(c, 0.5, 1 / 12)
    _assert_var(c, 1 / 12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_uniform_range(dtype):
    x = torch.empty(N, dtype=dtype, device=DEV).uniform_(-3, 5).cpu()
    assert x.min() >= -3 and x.max() <= 5
    _assert_mean(x, 1.0, 64 / 12)
    _assert_var(x, 64 / 12)
    y = torch.empty(100, device=DEV).uniform_(2, 2).cpu()
    assert torch.all(y == 2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_randn_moments(dtype):
    x = torch.randn(N, dtype=dtype, device=DEV)
    assert x.dtype == dtype and x.device.type == DEV
    c = x.cpu().double()
    _assert_mean(c, 0.0, 1.0)
    _assert_var(c, 1.0, rel=0.03 if dtype != torch.bfloat16 else 0.05)
    # the tails are there: P(|z| > 3) = 0.0027
    frac = (c.abs() > 3).double().mean().item()
    assert 0.0015 < frac < 0.004
    # symmetric
    assert abs((c > 0).double().mean().item() - 0.5) < 0.01


def test_normal_overloads():
    x = torch.empty(N, device=DEV).normal_(2.0, 3.0)
    _assert_mean(x, 2.0, 9.0)
    _assert_var(x, 9.0)
    mean = torch.linspace(-5, 5, N, device=DEV)
    y = torch.normal(mean, 0.5)
    assert y.shape == mean.shape and y.device.type == DEV
    _assert_mean(y - mean, 0.0, 0.25)
    _assert_var(y - mean, 0.25)
    std = torch.full((N,), 2.0, device=DEV)
    z = torch.normal(1.0, std)
    _assert_mean(z, 1.0, 4.0)
    _assert_var(z, 4.0)
    w = torch.normal(torch.zeros(N // 2, 2, device=DEV), torch.tensor([1.0, 3.0], device=DEV))
    assert w.shape == (N // 2, 2)
    _assert_var(w[:, 0], 1.0)
    _assert_var(w[:, 1], 9.0)
    v = torch.normal(-1.0, 0.5, size=(N,), device=DEV)
    _assert_mean(v, -1.0, 0.25)
    out = torch.empty(N, device=DEV)  # (the CPU's version rejects an out of another size)
    torch.normal(mean, 1.0, out=out)
    _assert_mean(out - mean, 0.0, 1.0)


def test_normal_std_zero_and_errors():
    x = torch.empty(10, device=DEV).normal_(4.0, 0.0).cpu()
    assert torch.all(x == 4.0)
    _check_raises(lambda d: torch.empty(3, device=d).normal_(0, -1))
    _check_raises(lambda d: torch.normal(torch.zeros(3, device=d), torch.tensor([1.0, -1.0, 1.0], device=d)))
    _check_raises(lambda d: torch.randn(3, dtype=torch.int64, device=d), same_message=False)


@pytest.mark.parametrize("low,high", [(0, 10), (-5, 5), (3, 4), (-(2**40), 2**40), (0, 2**62)])
def test_randint(low, high):
    x = torch.randint(low, high, (N,), device=DEV)
    assert x.dtype == torch.int64 and x.device.type == DEV
    c = x.cpu()
    assert c.min() >= low and c.max() < high
    n = high - low
    _assert_mean(c.double(), (low + high - 1) / 2, (n * n - 1) / 12)
    if n <= 10:
        counts = torch.bincount(c - low, minlength=n).double()
        expected = N / n
        chi2 = ((counts - expected) ** 2 / expected).sum().item()
        assert chi2 < n + 10 * math.sqrt(2 * n) + 10  # far in the tail of chi^2(n - 1)


@pytest.mark.parametrize(
    "dtype,hi",
    [(torch.bool, 1), (torch.uint8, 255), (torch.int8, 127), (torch.int16, 32767), (torch.int32, 2**31 - 1),
     (torch.int64, 2**63 - 1), (torch.float16, 2**11), (torch.bfloat16, 2**8), (torch.float32, 2**24),
     (torch.float64, 2**53)],
)
def test_random_default_range(dtype, hi):
    x = torch.empty(N, dtype=dtype, device=DEV).random_().cpu()
    assert x.dtype == dtype
    v = x.double()
    assert v.min() >= 0 and v.max() <= hi
    # uniform on [0, hi]: the mean is hi / 2
    _assert_mean(v / hi, 0.5, 1 / 12)


def test_random_from_to_variants():
    x = torch.empty(N, dtype=torch.int16, device=DEV).random_(-7, 3).cpu()
    assert x.min() == -7 and x.max() == 2
    y = torch.empty(N, dtype=torch.float32, device=DEV).random_(10).cpu()
    assert y.min() == 0 and y.max() == 9 and torch.all(y == y.round())
    z = torch.empty(N, dtype=torch.int64, device=DEV).random_(-(2**63), None).cpu()
    assert (z < 0).any() and (z > 0).any()
    _assert_mean(z.double() / 2**63, 0.0, 1 / 3)
    w = torch.empty(N, dtype=torch.int64, device=DEV).random_(-(2**62), 2**62 + 5).cpu()
    assert w.min() >= -(2**62) and w.max() < 2**62 + 5
    _assert_mean(w.double() / 2**62, 0.0, 1 / 3)
    u = torch.empty(N, dtype=torch.int8, device=DEV).random_(-100, None).cpu()
    assert u.min() >= -100 and u.max() <= 127


def test_random_errors():
    _check_raises(lambda d: torch.empty(3, device=d).random_(5, 2))
    _check_raises(lambda d: torch.empty(3, dtype=torch.int8, device=d).random_(0, 300))
    _check_raises(lambda d: torch.empty(3, dtype=torch.uint8, device=d).random_(-1, 5))
    _check_raises(lambda d: torch.randint(5, 5, (3,), device=d))
    _check_raises(lambda d: torch.empty(3, device=d).uniform_(2, 1))
    _check_raises(lambda d: torch.empty(3, dtype=torch.int64, device=d).uniform_())


def test_exponential_geometric_lognormal_cauchy():
    e = torch.empty(N, device=DEV).exponential_(2.0).cpu()
    assert e.min() > 0
    _assert_mean(e, 0.5, 0.25)
    _assert_var(e, 0.25, rel=0.05)
    g = torch.empty(N, device=DEV).geometric_(0.25).cpu()
    assert g.min() >= 1 and torch.all(g == g.round())
    _assert_mean(g, 4.0, 12.0)
    _assert_var(g, 12.0, rel=0.05)
    gi = torch.empty(N, dtype=torch.int32, device=DEV).geometric_(0.5).cpu()
    assert gi.dtype == torch.int32 and gi.min() >= 1
    _assert_mean(gi.double(), 2.0, 2.0)
    ln = torch.empty(N, device=DEV).log_normal_(1.0, 0.5).cpu()
    assert ln.min() > 0
    _assert_mean(ln.log(), 1.0, 0.25)
    _assert_var(ln.log(), 0.25)
    c = torch.empty(N, device=DEV).cauchy_(1.0, 2.0).cpu().double()
    # half the mass within one scale of the median
    assert abs(c.median().item() - 1.0) < 0.05
    assert abs(((c - 1.0).abs() < 2.0).double().mean().item() - 0.5) < 0.01
    e64 = torch.empty(N, dtype=torch.float64, device=DEV).exponential_().cpu()
    _assert_mean(e64, 1.0, 1.0)


def test_distribution_errors():
    _check_raises(lambda d: torch.empty(3, device=d).exponential_(-1))
    _check_raises(lambda d: torch.empty(3, dtype=torch.int64, device=d).exponential_())
    _check_raises(lambda d: torch.empty(3, device=d).geometric_(0))
    _check_raises(lambda d: torch.empty(3, device=d).geometric_(1.0))
    _check_raises(lambda d: torch.empty(3, device=d).log_normal_(0, 0))
    _check_raises(lambda d: torch.empty(3, device=d).cauchy_(0, -1))
    _check_raises(lambda d: torch.empty(3, dtype=torch.int64, device=d).cauchy_())
    _check_raises(lambda d: torch.empty(3, device=d).bernoulli_(1.5))
    _check_raises(lambda d: torch.empty(3, device=d).bernoulli_(torch.tensor([0.5, 2.0, 0.1], device=d)))


def test_bernoulli():
    b = torch.empty(N, device=DEV).bernoulli_(0.3).cpu()
    assert set(b.unique().tolist()) <= {0.0, 1.0}
    _assert_mean(b, 0.3, 0.21)
    p = torch.linspace(0, 1, N, device=DEV)
    t = torch.bernoulli(p).cpu()
    assert t.dtype == torch.float32 and t[0] == 0 and t[-1] == 1
    _assert_mean(t, 0.5, 1 / 6)  # E[p(1-p)] + Var[p] = 1/4
    bi = torch.empty(N, dtype=torch.int64, device=DEV).bernoulli_(torch.tensor(0.75, device=DEV)).cpu()
    assert bi.dtype == torch.int64
    _assert_mean(bi.double(), 0.75, 0.1875)
    bb = torch.bernoulli(torch.full((4, N // 4), 0.5, device=DEV), p=0.9).cpu()
    _assert_mean(bb, 0.9, 0.09)
    rows = torch.empty(2, N // 2, device=DEV).bernoulli_(torch.tensor([[0.1], [0.8]], device=DEV)).cpu()
    _assert_mean(rows[0], 0.1, 0.09)
    _assert_mean(rows[1], 0.8, 0.16)
    assert torch.all(torch.empty(50, device=DEV).bernoulli_(0.0).cpu() == 0)
    assert torch.all(torch.empty(50, device=DEV).bernoulli_(1.0).cpu() == 1)


def test_like_factories_and_explicit_shapes():
    x = torch.zeros(3, 4, dtype=torch.float64, device=DEV)
    for r in [torch.rand_like(x), torch.randn_like(x), torch.randint_like(x, 5), torch.randint_like(x, -2, 2)]:
        assert r.shape == (3, 4) and r.dtype == torch.float64 and r.device.type == DEV
    assert torch.rand(0, 3, device=DEV).shape == (0, 3)
    assert torch.randn((), device=DEV).shape == ()
    assert torch.randint(3, (2, 0), device=DEV).shape == (2, 0)
    # in-place draws into a view only touch the view
    base = torch.zeros(4, 6, device=DEV)
    base[:, ::2].uniform_(1, 2)
    c = base.cpu()
    assert torch.all(c[:, 1::2] == 0) and torch.all(c[:, ::2] >= 1)


def test_manual_seed_repeatability():
    def draw():
        return [t.cpu() for t in (torch.rand(5, device=DEV), torch.randn(3, 3, device=DEV),
                                  torch.randint(0, 100, (7,), device=DEV), torch.randperm(9, device=DEV),
                                  torch.empty(4, device=DEV).exponential_(),
                                  F.dropout(torch.ones(20, device=DEV), 0.5))]

    torch.manual_seed(123)
    a = draw()
    torch.manual_seed(123)
    b = draw()
    torch.manual_seed(124)
    c = draw()
    for x, y in zip(a, b):
        assert torch.equal(x, y)
    assert not torch.equal(a[0], c[0])
    # consecutive draws differ
    assert not torch.equal(torch.rand(100, device=DEV).cpu(), torch.rand(100, device=DEV).cpu())


def test_generator_objects():
    requires_tiny()
    g1 = torch.Generator(device=DEV).manual_seed(7)
    g2 = torch.Generator(device=DEV).manual_seed(7)
    a = torch.rand(10, device=DEV, generator=g1).cpu()
    b = torch.rand(10, device=DEV, generator=g2).cpu()
    assert torch.equal(a, b)
    # the default generator is untouched by explicit ones
    torch.manual_seed(1)
    x = torch.rand(4, device=DEV).cpu()
    torch.manual_seed(1)
    torch.rand(4, device=DEV, generator=g1)
    y = torch.rand(4, device=DEV).cpu()
    assert torch.equal(x, y)
    # state round trip
    state = g1.get_state()
    c = torch.randn(6, device=DEV, generator=g1).cpu()
    g1.set_state(state)
    d = torch.randn(6, device=DEV, generator=g1).cpu()
    assert torch.equal(c, d)
    with pytest.raises(RuntimeError, match="generator"):
        torch.rand(3, device=DEV, generator=torch.Generator())


def test_random_fuses_with_consumer():
    requires_tiny()
    import torch_tiny

    sync()
    with torch_tiny.debug.count_kernels() as k:
        y = (torch.rand(1000, device=DEV) * 2 - 1).abs().cpu()
    assert k.kernels == 1
    assert y.min() >= 0 and y.max() <= 1


# ---------------------------------------------------------------------- randperm / multinomial

@pytest.mark.parametrize("n", [0, 1, 7, 5000])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32])
def test_randperm(n, dtype):
    p = torch.randperm(n, dtype=dtype, device=DEV)
    assert p.dtype == dtype and p.device.type == DEV and p.shape == (n,)
    assert torch.equal(p.cpu().sort().values, torch.arange(n, dtype=dtype))


def test_randperm_uniform_and_errors():
    # every position sees every value about equally often
    counts = torch.zeros(4, 4)
    for _ in range(400):
        p = torch.randperm(4, device=DEV).cpu()
        counts[torch.arange(4), p] += 1
    assert counts.min() > 50 and counts.max() < 150
    _check_raises(lambda d: torch.randperm(-1, device=d))
    _check_raises(lambda d: torch.randperm(5000, dtype=torch.float16, device=d))


def test_multinomial():
    p = torch.tensor([0.1, 0.0, 0.6, 0.3])
    s = torch.multinomial(p.to(DEV), N, replacement=True)
    assert s.dtype == torch.int64 and s.shape == (N,) and s.device.type == DEV
    freq = torch.bincount(s.cpu(), minlength=4).double() / N
    assert freq[1] == 0
    assert torch.allclose(freq, p.double(), atol=0.005)
    rows = torch.tensor([[1.0, 1.0, 0.0, 2.0], [0.0, 5.0, 1.0, 0.0]], device=DEV)
    r = torch.multinomial(rows, 2).cpu()
    assert r.shape == (2, 2)
    for i in range(2):
        assert len(set(r[i].tolist())) == 2
        assert all(rows[i, j].item() > 0 for j in r[i].tolist())
    # without replacement, all categories: a permutation of the non-zero ones
    full = torch.multinomial(torch.tensor([3.0, 1.0, 2.0], device=DEV), 3).cpu()
    assert sorted(full.tolist()) == [0, 1, 2]
    # first draw without replacement follows p
    first = torch.multinomial(p.to(DEV).expand(20000, 4).contiguous(), 1).cpu().flatten()
    freq1 = torch.bincount(first, minlength=4).double() / 20000
    assert torch.allclose(freq1, p.double(), atol=0.02)
    out = torch.empty(0, dtype=torch.long, device=DEV)
    torch.multinomial(p.to(DEV), 3, out=out)
    assert out.shape == (3,)


@pytest.mark.parametrize(
    "fn",
    [
        lambda d: torch.multinomial(torch.tensor([0.2, -0.1], device=d), 1),
        lambda d: torch.multinomial(torch.tensor([0.2, 0.1], device=d), 3),
        lambda d: torch.multinomial(torch.tensor([0.0, 0.0], device=d), 1, True),
        lambda d: torch.multinomial(torch.tensor([1.0, float("nan")], device=d), 2, True),
        lambda d: torch.multinomial(torch.ones(2, 2, 2, device=d), 1),
        lambda d: torch.multinomial(torch.ones(3, dtype=torch.long, device=d), 1),
        lambda d: torch.multinomial(torch.ones(3, device=d), 0),
    ],
    ids=["negative", "too-many", "zero-sum", "nan", "rank", "dtype", "zero-samples"],
)
def test_multinomial_errors(fn):
    _check_raises(fn)


# ---------------------------------------------------------------------- dropout

@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_distribution(p):
    x = torch.ones(N, device=DEV)
    y = F.dropout(x, p, training=True)
    assert y.device.type == DEV
    c = y.cpu()
    kept = c != 0
    _assert_mean(kept.double(), 1 - p, p * (1 - p))
    assert torch.allclose(c[kept], torch.tensor(1 / (1 - p)))


def test_dropout_modes_and_edges():
    x = torch.randn(100, 10, generator=torch.Generator().manual_seed(0))
    dx = to_dev(x)
    assert_same(F.dropout(dx, 0.3, training=False), x)
    assert_same(F.dropout(dx, 0.0, training=True), x)
    assert_same(F.dropout(dx, 1.0, training=True), x * 0)
    m = torch.nn.Dropout(0.4).to(DEV)
    m.eval()
    assert_same(m(dx), x)
    m.train()
    y = m(dx).cpu()
    assert ((y == 0) | torch.isclose(y, x / 0.6)).all()
    out, mask = torch.native_dropout(dx, 0.5, True)
    assert mask.dtype == torch.bool and mask.device.type == DEV
    assert_same(out, torch.where(mask.cpu(), x * 2, torch.zeros(())))
    out, mask = torch.native_dropout(dx, 0.5, False)
    assert_same(out, x)
    assert bool(mask.cpu().all())
    # special values travel like the CPU's input * mask * scale
    s = torch.tensor([float("nan"), float("inf"), -0.0, 2.0] * 50, device=DEV)
    o, mk = torch.native_dropout(s, 0.5, True)
    expected = s.cpu() * mk.cpu() * 2.0
    assert_bitwise_equal(o.cpu(), expected)
    _check_raises(lambda d: F.dropout(torch.ones(3, device=d), 1.5))


def test_dropout_backward_and_feature_dropout():
    x = torch.randn(64, 32, generator=torch.Generator().manual_seed(1))
    dx = to_dev(x).requires_grad_()
    y = F.dropout(dx, 0.25, training=True)
    y.sum().backward()
    g = dx.grad.cpu()
    kept = y.detach().cpu() != 0
    assert torch.allclose(g[kept], torch.tensor(1 / 0.75))
    assert torch.all(g[~kept] == 0)
    grad = torch.ops.aten.native_dropout_backward(to_dev(x), to_dev(x > 0), 2.0)
    assert_same(grad, torch.ops.aten.native_dropout_backward(x, x > 0, 2.0))
    z = F.dropout2d(torch.ones(8, 16, 4, 4, device=DEV), 0.5, training=True).cpu()
    per_channel = z.reshape(8, 16, 16)
    # whole channels are dropped together
    assert torch.all((per_channel == 0).all(-1) | (per_channel == 2).all(-1))
