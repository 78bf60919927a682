"""Copies between CPU and the device, creation ops, and small tensor utilities.

Everything is compared with the same computation on the CPU.
"""

import math
import re
import warnings

import pytest
import torch

from conftest import ALL_DTYPES, DEV, assert_bitwise_equal, assert_same, sync, to_dev


def _name(dtype):
    return str(dtype).replace("torch.", "")


# ------------------------------------------------------------------ bit-exact payloads

# Special bit patterns per floating dtype: +-0, +-inf, quiet NaN with payload, negative
# NaN, signalling NaN, smallest subnormal, largest subnormal, smallest normal, max, 1.
_FLOAT_SPECIAL_BITS = {
    torch.float16: [0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E01, 0xFE00, 0x7C01, 0x0001,
                    0x03FF, 0x0400, 0x7BFF, 0xFBFF, 0x3C00],
    torch.bfloat16: [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC1, 0xFFC0, 0x7F81, 0x0001,
                     0x007F, 0x0080, 0x7F7F, 0xFF7F, 0x3F80],
    torch.float32: [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00001,
                    0xFFC00000, 0x7F800001, 0x00000001, 0x007FFFFF, 0x00800000,
                    0x7F7FFFFF, 0xFF7FFFFF, 0x3F800000, 0x7FFFFFFF, 0xFFFFFFFF],
    torch.float64: [0x0000000000000000, 0x8000000000000000, 0x7FF0000000000000,
                    0xFFF0000000000000, 0x7FF8000000000001, 0xFFF8000000000000,
                    0x7FF0000000000001, 0x0000000000000001, 0x000FFFFFFFFFFFFF,
                    0x0010000000000000, 0x7FEFFFFFFFFFFFFF, 0xFFEFFFFFFFFFFFFF,
                    0x3FF0000000000000, 0x7FFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF],
}
_SIGNED_BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _payload(dtype, n):
    """``n`` values of ``dtype`` led by special values / extremes, then random bits."""
    g = torch.Generator().manual_seed(1234 + n)
    if dtype == torch.bool:
        vals = torch.tensor([True, False], dtype=torch.bool)
        rest = torch.randint(0, 2, (max(n, 2),), generator=g).bool()
        return torch.cat([vals, rest])[:n].clone()
    itemsize = torch.empty((), dtype=dtype).element_size()
    rand = torch.randint(0, 256, (n * itemsize,), dtype=torch.uint8, generator=g).view(dtype)
    if dtype.is_floating_point:
        ints = [b - (1 << (8 * itemsize)) if b >= 1 << (8 * itemsize - 1) else b
                for b in _FLOAT_SPECIAL_BITS[dtype]]
        special = torch.tensor(ints, dtype=_SIGNED_BITS[itemsize]).view(dtype)
    else:
        info = torch.iinfo(dtype)
        special = torch.tensor(
            [info.min, info.max, 0, 1, info.max - 1, info.min + 1] + ([-1] if info.min < 0 else []),
            dtype=dtype,
        )
    return torch.cat([special, rand])[:n].clone()


def _base(dtype, numel):
    return _payload(dtype, numel)  # the 'contig' layout (64 elements) holds every special


# Source layouts: name -> function(dtype) -> CPU tensor (possibly a non-contiguous view).
_LAYOUTS = {
    "0d": lambda dt: _base(dt, 1).reshape(()),
    "0d-view-offset": lambda dt: _base(dt, 8)[5],
    "empty": lambda dt: _base(dt, 0),
    "empty-3x0x2": lambda dt: _base(dt, 0).reshape(3, 0, 2),
    "one": lambda dt: _base(dt, 1),
    "1x1x1": lambda dt: _base(dt, 1).reshape(1, 1, 1),
    "contig": lambda dt: _base(dt, 64).reshape(4, 16),
    "transposed": lambda dt: _base(dt, 35).reshape(5, 7).t(),
    "permuted-3d": lambda dt: _base(dt, 60).reshape(3, 4, 5).permute(2, 0, 1),
    "step-slice": lambda dt: _base(dt, 40)[::3],
    "step-slice-2d": lambda dt: _base(dt, 60).reshape(6, 10)[1::2, 2::3],
    "offset-view": lambda dt: _base(dt, 50)[7:],
    "offset-row": lambda dt: _base(dt, 48).reshape(6, 8)[2, 3:],
    "offset-col": lambda dt: _base(dt, 48).reshape(6, 8)[1:, 5],
    "expanded": lambda dt: _base(dt, 5).reshape(5, 1).expand(5, 4),
    "negative-ish-diag": lambda dt: _base(dt, 36).reshape(6, 6).diagonal(1),
}


@pytest.mark.parametrize("layout", list(_LAYOUTS))
@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_name)
def test_roundtrip_bitexact(dtype, layout):
    src = _LAYOUTS[layout](dtype)
    snapshot = src.clone()
    d = src.to(DEV)
    assert d.device.type == DEV
    assert d.dtype == dtype and d.shape == src.shape
    back = d.cpu()
    assert back.device.type == "cpu"
    assert_bitwise_equal(back, snapshot, msg=f"{layout}/{dtype}")
    # The source is untouched.
    assert_bitwise_equal(src, snapshot, msg="source modified")


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_name)
def test_roundtrip_all_specials_bitexact(dtype):
    """Every special pattern (incl. NaN payloads, -0.0, subnormals) survives CPU->dev->CPU."""
    if dtype.is_floating_point:
        n = len(_FLOAT_SPECIAL_BITS[dtype])
    else:
        n = 7
    src = _payload(dtype, n + 200)
    back = to_dev(src).cpu()
    assert_bitwise_equal(back, src)
    # And dev -> dev copy, then back.
    d2 = to_dev(src).clone()
    assert_bitwise_equal(d2.cpu(), src)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_name)
def test_roundtrip_into_existing_bitexact(dtype):
    """copy_ CPU->dev into a preallocated tensor, then copy_ dev->CPU into another."""
    src = _payload(dtype, 97)
    d = torch.empty(97, dtype=dtype, device=DEV)
    d.copy_(src)
    out = torch.empty(97, dtype=dtype)
    out.copy_(d)
    assert_bitwise_equal(out, src)


@pytest.mark.large
def test_roundtrip_large():
    """One >= 512 MiB tensor (allocated once): CPU -> dev -> CPU bit-exact, plus a far view."""
    nbytes = 512 * 2**20
    src = torch.arange(nbytes // 4, dtype=torch.int32).view(torch.uint8)  # positional bytes
    assert src.numel() == nbytes
    d = src.to(DEV)
    back = d.cpu()
    assert back.shape == src.shape
    assert torch.equal(back, src)
    del back
    # A view far into the storage (large storage offset).
    tail = d[nbytes - 4099 :: 3]
    assert tail.storage_offset() == nbytes - 4099
    assert torch.equal(tail.cpu(), src[nbytes - 4099 :: 3])
    del d, tail, src


# ------------------------------------------------------------------ copy_ in every direction


def _values(dtype, shape, *, allow_negative):
    g = torch.Generator().manual_seed(7)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    lo = -100 if allow_negative else 0
    ints = torch.randint(lo, 100, shape, generator=g)
    if dtype.is_floating_point:
        frac = torch.tensor([0.0, 0.25, 0.5, 0.75])[torch.randint(0, 4, shape, generator=g)]
        return (ints.double() + frac * torch.sign(ints.double() + 0.5)).to(dtype)
    return ints.to(dtype)


_COPY_PAIRS = [
    (torch.float32, torch.float32),
    (torch.int64, torch.float32),
    (torch.float32, torch.int32),
    (torch.float32, torch.int64),
    (torch.float64, torch.float16),
    (torch.float32, torch.bfloat16),
    (torch.bfloat16, torch.float32),
    (torch.float16, torch.float64),
    (torch.bool, torch.float32),
    (torch.float32, torch.bool),
    (torch.int32, torch.int8),
    (torch.uint8, torch.int64),
    (torch.int64, torch.bool),
    (torch.int16, torch.uint8),
]


def _on(where, t):
    return t.clone() if where == "cpu" else to_dev(t)


@pytest.mark.parametrize("non_blocking", [False, True], ids=["sync", "non_blocking"])
@pytest.mark.parametrize("broadcast", [False, True], ids=["same-shape", "broadcast"])
@pytest.mark.parametrize("src_dtype,dst_dtype", _COPY_PAIRS, ids=lambda d: _name(d))
@pytest.mark.parametrize("direction", ["cpu->dev", "dev->cpu", "dev->dev"])
def test_copy_(direction, src_dtype, dst_dtype, broadcast, non_blocking):
    src_where, dst_where = direction.split("->")
    unsigned = torch.uint8 in (src_dtype, dst_dtype)
    src_shape = (3,) if broadcast else (2, 3)
    src_cpu = _values(src_dtype, src_shape, allow_negative=not unsigned)
    dst_cpu = torch.zeros(2, 3, dtype=dst_dtype)
    if dst_dtype.is_floating_point or dst_dtype == torch.bool:
        dst_cpu.fill_(1)

    src = _on(src_where, src_cpu)
    dst = _on(dst_where, dst_cpu)
    r = dst.copy_(src, non_blocking=non_blocking)
    assert r is dst
    sync()

    expected = dst_cpu.clone().copy_(src_cpu)
    assert dst.device.type == (DEV if dst_where == "dev" else "cpu")
    assert_same(dst, expected, check_device=False)
    # The source is unchanged.
    assert_same(src, src_cpu, check_device=False)


@pytest.mark.parametrize("direction", ["cpu->dev", "dev->cpu", "dev->dev"])
def test_copy_noncontiguous_both_sides(direction):
    """A strided, transposed source into a strided view with a storage offset."""
    src_where, dst_where = direction.split("->")
    src_base_cpu = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    dst_base_cpu = torch.full((4, 8), -1.0)
    src = _on(src_where, src_base_cpu)[:, ::2].t()  # (3, 4), strides (2, 6)
    dst_base = _on(dst_where, dst_base_cpu)
    dst = dst_base[:3, 1::2]  # (3, 4), strides (8, 2), offset 1
    dst.copy_(src)
    exp_base = dst_base_cpu.clone()
    exp_base[:3, 1::2].copy_(src_base_cpu[:, ::2].t())
    assert_same(dst_base, exp_base, check_device=False)
    assert_same(src, src_base_cpu[:, ::2].t(), check_device=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.float16])
def test_copy_broadcast_from_0d_and_1xN(dtype):
    for src_cpu in (_values(dtype, (), allow_negative=True), _values(dtype, (1, 3), allow_negative=True),
                    _values(dtype, (2, 1), allow_negative=True)):
        for where in ("cpu", "dev"):
            dst = to_dev(torch.zeros(2, 3, dtype=dtype))
            dst.copy_(_on(where, src_cpu))
            assert_same(dst, torch.zeros(2, 3, dtype=dtype).copy_(src_cpu))


def test_copy_shape_mismatch_raises_like_cpu():
    with pytest.raises(RuntimeError):
        torch.zeros(2, 3).copy_(torch.zeros(4))
    with pytest.raises(RuntimeError):
        to_dev(torch.zeros(2, 3)).copy_(torch.zeros(4))
    with pytest.raises(RuntimeError):
        to_dev(torch.zeros(2, 3)).copy_(to_dev(torch.zeros(4)))


# ------------------------------------------------------------------ to(dtype)

_TO_PAIRS = [
    (torch.float32, torch.float64),
    (torch.float64, torch.float32),
    (torch.float32, torch.float16),
    (torch.float32, torch.bfloat16),
    (torch.float16, torch.float32),
    (torch.bfloat16, torch.float16),
    (torch.float32, torch.int32),
    (torch.float64, torch.int64),
    (torch.float32, torch.uint8),
    (torch.int64, torch.float32),
    (torch.int32, torch.float64),
    (torch.int64, torch.int32),
    (torch.int32, torch.int16),
    (torch.int16, torch.int64),
    (torch.uint8, torch.int32),
    (torch.int8, torch.int64),
    (torch.bool, torch.int64),
    (torch.bool, torch.float32),
    (torch.float32, torch.bool),
    (torch.int32, torch.bool),
]


@pytest.mark.parametrize("src_dtype,dst_dtype", _TO_PAIRS, ids=lambda d: _name(d))
def test_to_dtype(src_dtype, dst_dtype):
    unsigned = torch.uint8 in (src_dtype, dst_dtype)
    c = _values(src_dtype, (4, 5), allow_negative=not unsigned)
    d = to_dev(c)
    assert_same(d.to(dst_dtype), c.to(dst_dtype))
    # Non-contiguous source.
    assert_same(d.t().to(dst_dtype), c.t().to(dst_dtype))
    # Device and dtype change in one call, both ways.
    assert_same(c.to(DEV, dst_dtype), c.to(dst_dtype))
    assert_same(d.to("cpu", dst_dtype), c.to(dst_dtype), check_device=False)
    assert d.to("cpu", dst_dtype).device.type == "cpu"


def test_to_same_dtype_returns_self():
    d = to_dev(torch.arange(4.0))
    assert d.to(torch.float32) is d
    assert d.to(DEV) is d
    e = d.to(torch.float32, copy=True)
    assert e is not d
    assert_same(e, torch.arange(4.0))


def test_dtype_shorthands():
    c = torch.tensor([1.5, -2.25, 0.0, 3.0])
    d = to_dev(c)
    assert_same(d.double(), c.double())
    assert_same(d.half(), c.half())
    assert_same(d.bfloat16(), c.bfloat16())
    assert_same(d.int(), c.int())
    assert_same(d.long(), c.long())
    assert_same(d.bool(), c.bool())
    assert_same(d.float(), c.float())


def test_float_specials_convert_like_cpu():
    c = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 65504.0, 70000.0, 1e-8])
    d = to_dev(c)
    for dt in (torch.float16, torch.bfloat16, torch.float64):
        assert_same(d.to(dt), c.to(dt))
    # -0.0 keeps its sign bit through float conversions.
    assert_bitwise_equal(d.to(torch.float64)[3:4].cpu(), c.to(torch.float64)[3:4])
    assert_bitwise_equal(d.to(torch.float16)[3:4].cpu(), c.to(torch.float16)[3:4])


# ------------------------------------------------------------------ creation ops


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_name)
def test_empty(dtype):
    for shape in [(), (0,), (3, 0, 2), (5,), (2, 3, 4)]:
        t = torch.empty(shape, dtype=dtype, device=DEV)
        c = torch.empty(shape, dtype=dtype)
        assert t.device.type == DEV
        assert t.dtype == dtype
        assert t.shape == c.shape
        assert t.stride() == c.stride()
        assert t.is_contiguous()
        assert t.untyped_storage().nbytes() == c.untyped_storage().nbytes()


def test_empty_memory_format():
    t = torch.empty(2, 3, 4, 5, device=DEV, memory_format=torch.channels_last)
    c = torch.empty(2, 3, 4, 5, memory_format=torch.channels_last)
    assert t.stride() == c.stride()
    assert t.is_contiguous(memory_format=torch.channels_last)
    assert not t.is_contiguous()


@pytest.mark.parametrize(
    "size,stride",
    [
        ((2, 3), (1, 2)),
        ((2, 3), (3, 1)),
        ((2, 3), (6, 2)),
        ((4, 3), (0, 1)),
        ((3,), (5,)),
        ((0, 3), (3, 1)),
        ((2, 0, 4), (1, 1, 1)),
        ((), ()),
        ((2, 3, 4), (1, 2, 6)),
    ],
)
def test_empty_strided(size, stride):
    t = torch.empty_strided(size, stride, device=DEV, dtype=torch.float32)
    c = torch.empty_strided(size, stride, dtype=torch.float32)
    assert t.device.type == DEV
    assert t.size() == c.size()
    assert t.stride() == c.stride() == tuple(stride)
    assert t.storage_offset() == 0
    assert t.is_contiguous() == c.is_contiguous()
    assert t.untyped_storage().nbytes() == c.untyped_storage().nbytes()
    # Writable and readable through its strides.
    t.fill_(2.5)
    c.fill_(2.5)
    assert_same(t, c)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_name)
@pytest.mark.parametrize("shape", [(), (0,), (3, 0, 2), (1,), (2, 3)], ids=str)
def test_zeros_ones(dtype, shape):
    assert_same(torch.zeros(shape, dtype=dtype, device=DEV), torch.zeros(shape, dtype=dtype))
    assert_same(torch.ones(shape, dtype=dtype, device=DEV), torch.ones(shape, dtype=dtype))


def test_zeros_ones_like():
    c = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    d = to_dev(c)
    assert_same(torch.zeros_like(d), torch.zeros_like(c))
    assert_same(torch.ones_like(d), torch.ones_like(c))
    assert_same(torch.full_like(d, 7.5), torch.full_like(c, 7.5))
    assert_same(torch.ones_like(d, dtype=torch.int32), torch.ones_like(c, dtype=torch.int32))
    e, ec = torch.empty_like(d.t()), torch.empty_like(c.t())
    assert e.device.type == DEV and e.stride() == ec.stride() and e.shape == ec.shape


_FULL_VALUES = {
    torch.bool: [True, False],
    torch.uint8: [0, 255, 7],
    torch.int8: [-128, 127, -3],
    torch.int16: [-32768, 32767],
    torch.int32: [-(2**31), 2**31 - 1, 42],
    torch.int64: [-(2**63), 2**63 - 1, 2**40 + 3],
    torch.float16: [1.5, -65504.0, float("inf"), float("nan"), -0.0],
    torch.bfloat16: [1.5, -3.0e38, float("-inf"), float("nan")],
    torch.float32: [3.25, -1e-30, float("nan"), float("inf"), -0.0],
    torch.float64: [1.0 / 3.0, 1e300, -1e-310, float("nan"), -0.0],
}


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_name)
def test_full(dtype):
    for v in _FULL_VALUES[dtype]:
        for shape in [(), (0,), (2, 3), (1, 5, 1)]:
            t = torch.full(shape, v, dtype=dtype, device=DEV)
            c = torch.full(shape, v, dtype=dtype)
            assert_same(t, c, msg=f"full({shape}, {v})")
            if c.numel():
                assert_bitwise_equal(t.cpu(), c, msg=f"full bits {v}")


@pytest.mark.parametrize("value", [7, 7.5, True, -3], ids=str)
def test_full_dtype_inference(value):
    assert_same(torch.full((2, 2), value, device=DEV), torch.full((2, 2), value))


@pytest.mark.parametrize(
    "args,kwargs",
    [
        ((10,), {}),
        ((0,), {}),
        ((2, 20, 3), {}),
        ((20, 2, -3), {}),
        ((-5, 5), {"dtype": torch.int32}),
        ((0, 100, 7), {"dtype": torch.int16}),
        ((5.0,), {}),
        ((0, 1, 0.1), {}),
        ((5, -5, -1.5), {}),
        ((0, 10, 0.25), {"dtype": torch.float64}),
        ((-1, 1, 0.125), {"dtype": torch.float16}),
        ((1, 2.5, 0.5), {"dtype": torch.bfloat16}),
        ((3, 11, 2), {"dtype": torch.float32}),
        ((0, 5), {"dtype": torch.uint8}),
        ((2**40, 2**40 + 10, 3), {}),
    ],
    ids=lambda x: repr(x),
)
def test_arange(args, kwargs):
    t = torch.arange(*args, device=DEV, **kwargs)
    c = torch.arange(*args, **kwargs)
    assert_same(t, c)


def test_arange_out():
    o = torch.empty(0, dtype=torch.int64, device=DEV)
    torch.arange(0, 9, 2, out=o)
    assert_same(o, torch.arange(0, 9, 2))


# ------------------------------------------------------------------ fill_ / zero_


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=_name)
def test_fill_and_zero(dtype):
    c = _values(dtype, (4, 6), allow_negative=dtype != torch.uint8)
    for v in _FULL_VALUES[dtype]:
        d, e = to_dev(c), c.clone()
        assert d.fill_(v) is d
        e.fill_(v)
        assert_same(d, e, msg=f"fill_({v})")
    # On a non-contiguous view: only the view's elements change.
    d, e = to_dev(c), c.clone()
    d[::2, 1::3].fill_(1)
    e[::2, 1::3].fill_(1)
    assert_same(d, e)
    d.t()[2].zero_()
    e.t()[2].zero_()
    assert_same(d, e)
    assert d.zero_() is d
    e.zero_()
    assert_same(d, e)


def test_fill_conversions():
    # A float value into an integer tensor truncates as on the CPU.
    d, c = to_dev(torch.zeros(3, dtype=torch.int32)), torch.zeros(3, dtype=torch.int32)
    assert_same(d.fill_(2.7), c.fill_(2.7))
    assert_same(d.fill_(-2.7), c.fill_(-2.7))
    d, c = to_dev(torch.zeros(3, dtype=torch.bool)), torch.zeros(3, dtype=torch.bool)
    assert_same(d.fill_(0.5), c.fill_(0.5))
    # A 0-d tensor value, on the CPU or on the device.
    d, c = to_dev(torch.zeros(2, 2)), torch.zeros(2, 2)
    assert_same(d.fill_(torch.tensor(3.5)), c.fill_(torch.tensor(3.5)))
    assert_same(d.fill_(to_dev(torch.tensor(-1.25))), c.fill_(torch.tensor(-1.25)))
    with pytest.raises(RuntimeError):
        c.fill_(torch.tensor([1.0, 2.0]))
    with pytest.raises(RuntimeError):
        d.fill_(torch.tensor([1.0, 2.0]))


# ------------------------------------------------------------------ clone / contiguous


def _four_d_inputs():
    return {
        "contiguous": lambda x: x,
        "channels_last": lambda x: x.contiguous(memory_format=torch.channels_last),
        "permuted-dense": lambda x: x.permute(0, 2, 3, 1),
        "transposed": lambda x: x.transpose(1, 3),
        "sliced": lambda x: x[:, :, ::2],
        "expanded": lambda x: x[:, :1].expand(2, 3, 4, 5),
        "offset": lambda x: x[1:],
    }


@pytest.mark.parametrize("fmt", ["preserve", "contiguous", "channels_last"])
@pytest.mark.parametrize("kind", list(_four_d_inputs()))
def test_clone_memory_format(kind, fmt):
    mf = {
        "preserve": torch.preserve_format,
        "contiguous": torch.contiguous_format,
        "channels_last": torch.channels_last,
    }[fmt]
    make = _four_d_inputs()[kind]
    base_c = torch.arange(120, dtype=torch.float32).reshape(2, 3, 4, 5)
    xc = make(base_c)
    xd = make(to_dev(base_c))
    if kind == "channels_last":
        assert xd.stride() == xc.stride()
    rc = xc.clone(memory_format=mf)
    rd = xd.clone(memory_format=mf)
    assert rd.stride() == rc.stride(), f"{rd.stride()} != {rc.stride()}"
    assert rd.storage_offset() == rc.storage_offset() == 0
    assert rd.is_contiguous() == rc.is_contiguous()
    assert rd.is_contiguous(memory_format=torch.channels_last) == rc.is_contiguous(
        memory_format=torch.channels_last
    )
    assert_same(rd, rc)
    # The clone is independent of its source.
    rd.add_(1)
    assert_same(xd, xc)


def test_clone_default_and_independent():
    c = torch.arange(10.0)
    d = to_dev(c)
    k = d.clone()
    k[3] = 100.0
    assert_same(d, c)
    c2 = c.clone()
    c2[3] = 100.0
    assert_same(k, c2)


@pytest.mark.parametrize("kind", list(_four_d_inputs()))
def test_contiguous(kind):
    make = _four_d_inputs()[kind]
    base_c = torch.arange(120, dtype=torch.float32).reshape(2, 3, 4, 5)
    xc = make(base_c)
    xd = make(to_dev(base_c))
    assert xd.is_contiguous() == xc.is_contiguous()
    rc, rd = xc.contiguous(), xd.contiguous()
    assert rd.is_contiguous()
    assert rd.stride() == rc.stride()
    assert_same(rd, rc)
    if xc.is_contiguous():
        assert rd is xd
    rc2 = xc.contiguous(memory_format=torch.channels_last)
    rd2 = xd.contiguous(memory_format=torch.channels_last)
    assert rd2.stride() == rc2.stride()
    assert_same(rd2, rc2)


# ------------------------------------------------------------------ item / tolist / repr / equal


@pytest.mark.parametrize(
    "value,dtype",
    [
        (3.5, torch.float32),
        (-0.1, torch.float64),
        (1.5, torch.float16),
        (-2.5, torch.bfloat16),
        (2**40 + 1, torch.int64),
        (-7, torch.int32),
        (200, torch.uint8),
        (-100, torch.int8),
        (True, torch.bool),
        (False, torch.bool),
        (float("nan"), torch.float32),
        (float("-inf"), torch.float64),
    ],
    ids=str,
)
def test_item(value, dtype):
    c = torch.tensor(value, dtype=dtype)
    assert_same(to_dev(c).item(), c.item())
    assert_same(to_dev(c.reshape(1)).item(), c.item())
    assert_same(to_dev(c.reshape(1, 1, 1)).item(), c.item())
    # From a view with a storage offset.
    big = torch.stack([torch.zeros((), dtype=dtype), c, torch.zeros((), dtype=dtype)])
    assert_same(to_dev(big)[1].item(), c.item())


def test_item_of_computed_value():
    c = torch.tensor([1.0, 2.0, 3.5])
    assert_same((to_dev(c) * 2).sum().item(), (c * 2).sum().item())


def test_item_multi_element_raises():
    with pytest.raises(RuntimeError):
        torch.zeros(2).item()
    with pytest.raises(RuntimeError):
        to_dev(torch.zeros(2)).item()


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.arange(12, dtype=torch.float32).reshape(3, 4) / 4,
        lambda: torch.arange(12, dtype=torch.int64).reshape(2, 3, 2) - 5,
        lambda: torch.tensor([True, False, True]),
        lambda: torch.tensor(2.5, dtype=torch.float64),
        lambda: torch.zeros(0, 3),
        lambda: torch.arange(6, dtype=torch.int16).reshape(2, 3).t(),
        lambda: torch.tensor([0.5, -1.25], dtype=torch.bfloat16),
    ],
    ids=["float", "int64", "bool", "0d", "empty", "transposed", "bf16"],
)
def test_tolist(make):
    c = make()
    d = to_dev(c)
    assert_same(d.tolist(), c.tolist())
    if c.dim() == 2:  # a non-contiguous view made on the device
        assert_same(to_dev(c.contiguous()).t().tolist(), c.t().tolist())


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.tensor([1.5, 2.25, -3.0]),
        lambda: torch.tensor([[1, 2], [30, 40]]),
        lambda: torch.tensor(7.125, dtype=torch.float64),
        lambda: torch.tensor([True, False]),
        lambda: torch.zeros(0),
        lambda: torch.arange(2000, dtype=torch.float32),  # summarized
        lambda: torch.tensor([float("nan"), float("inf"), 1e-10]),
    ],
    ids=["float", "int", "0d-f64", "bool", "empty", "summarized", "specials"],
)
def test_repr_and_print(make, capsys):
    c = make()
    d = to_dev(c)
    r = repr(d)
    if DEV != "cpu":
        m = re.search(r"device='(%s(:0)?)'" % re.escape(DEV), r)
        assert m, r
        stripped = r.replace(f", device='{m.group(1)}'", "")
    else:
        stripped = r
    assert stripped == repr(c)
    print(d)
    out = capsys.readouterr().out
    assert str(d) in out
    # The numbers themselves appear.
    if c.numel() and c.dtype != torch.bool:
        first = c.flatten()[0].item()
        if isinstance(first, float) and math.isfinite(first):
            assert f"{first:.4f}".rstrip("0") in r or f"{first:g}" in r, r
        elif isinstance(first, int):
            assert str(first) in r
    assert str(d) == r


@pytest.mark.parametrize(
    "a,b",
    [
        (torch.arange(6.0).reshape(2, 3), torch.arange(6.0).reshape(2, 3)),
        (torch.arange(6.0).reshape(2, 3), torch.arange(6.0).reshape(2, 3) + 1e-3),
        (torch.arange(6.0).reshape(2, 3), torch.arange(6.0)),
        (torch.arange(6.0).reshape(2, 3), torch.arange(6.0).reshape(3, 2)),
        (torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")])),
        (torch.tensor([0.0]), torch.tensor([-0.0])),
        (torch.zeros(0, 2), torch.zeros(0, 2)),
        (torch.tensor(3), torch.tensor(3)),
        (torch.tensor([True, False]), torch.tensor([True, True])),
        (torch.arange(12).reshape(3, 4).t(), torch.arange(12).reshape(3, 4).t().contiguous()),
    ],
    ids=["equal", "differ", "shape-1d", "shape-3x2", "nan", "signed-zero", "empty", "0d",
         "bool", "noncontig"],
)
def test_torch_equal(a, b):
    expected = torch.equal(a, b)
    if a.is_contiguous():
        da = to_dev(a)
    else:  # make the non-contiguous view on the device
        da = to_dev(a.t()).t()
        assert not da.is_contiguous()
    got = torch.equal(da, to_dev(b))
    assert type(got) is bool
    assert got == expected
    assert torch.equal(to_dev(b), da) == torch.equal(b, a)


# ------------------------------------------------------------------ out= resizing


def _run_add_out(where, out_maker):
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    b = torch.tensor([10.0, 20.0, 30.0])
    if where == "dev":
        a, b = to_dev(a), to_dev(b)
    o = out_maker(where)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = torch.add(a, b, out=o)
    resize_warnings = [str(x.message) for x in w if "resized" in str(x.message)]
    return r, o, resize_warnings


def _mk(shape, fill=7.0, dtype=torch.float32, transform=None):
    def make(where):
        t = torch.full(shape, fill, dtype=dtype)
        t = t.clone() if where == "cpu" else to_dev(t)
        return transform(t) if transform else t

    return make


@pytest.mark.parametrize(
    "out_maker",
    [
        _mk((2, 3)),
        _mk((0,)),
        _mk((5,)),
        _mk((3, 2)),
        _mk((4, 4)),
        _mk((1,)),
        _mk((2, 3), dtype=torch.float64),
        _mk((3, 2), transform=lambda t: t.t()),  # right shape, non-contiguous
        _mk((6, 6), transform=lambda t: t[::2, ::2][:2]),  # right shape, strided view
    ],
    ids=["exact", "empty", "wrong-5", "wrong-3x2", "bigger-4x4", "smaller-1", "f64",
         "transposed", "strided-view"],
)
def test_out_resize_like_cpu(out_maker):
    rc, oc, wc = _run_add_out("cpu", out_maker)
    rd, od, wd = _run_add_out("dev", out_maker)
    assert rd is od
    assert rc is oc
    assert od.shape == oc.shape
    assert od.stride() == oc.stride()
    assert od.dtype == oc.dtype
    assert_same(od, oc)
    assert len(wd) == len(wc), f"warnings differ: dev {wd} vs cpu {wc}"


def test_out_resize_nonempty_warns():
    """Sanity: the CPU reference itself warns for a non-empty wrong-size out, and the
    device matches."""
    _, _, wc = _run_add_out("cpu", _mk((5,)))
    _, _, wd = _run_add_out("dev", _mk((5,)))
    assert len(wc) == 1
    assert len(wd) == 1
    _, _, wc0 = _run_add_out("cpu", _mk((0,)))
    _, _, wd0 = _run_add_out("dev", _mk((0,)))
    assert wc0 == [] and wd0 == []


def test_out_wrong_dtype_raises_like_cpu():
    a = torch.arange(6, dtype=torch.float32)
    with pytest.raises(RuntimeError):
        torch.add(a, a, out=torch.empty(6, dtype=torch.int64))
    ad = to_dev(a)
    with pytest.raises(RuntimeError):
        torch.add(ad, ad, out=torch.empty(6, dtype=torch.int64, device=DEV))


def test_resize_():
    c = torch.arange(6, dtype=torch.float32)
    d = to_dev(c)
    for shape in [(2, 2), (3, 3), (0,), (2, 5), (6,)]:
        c.resize_(shape)
        d.resize_(shape)
        assert d.shape == c.shape and d.stride() == c.stride()
        assert d.untyped_storage().nbytes() == c.untyped_storage().nbytes()
    # Shrinking keeps the data in place; growing keeps the old prefix.
    c2 = torch.arange(6, dtype=torch.float32)
    d2 = to_dev(c2)
    c2.resize_(2, 2)
    d2.resize_(2, 2)
    assert_same(d2, c2)
    c2.resize_(3, 3)
    d2.resize_(3, 3)
    assert_same(d2.flatten()[:6], c2.flatten()[:6])
    # resize_as_
    c3, d3 = torch.zeros(1), to_dev(torch.zeros(1))
    c3.resize_as_(torch.empty(4, 5))
    d3.resize_as_(torch.empty(4, 5, device=DEV))
    assert d3.shape == c3.shape and d3.stride() == c3.stride()
