"""View ops and aliasing, compared with the CPU.

Every chain is applied to a CPU base and to the same base on the device; the views must
agree in size, stride, storage offset, contiguity, storage size and (bit-exact) values.
The aliasing tests run the same sequence of writes and reads on both devices.
"""

import pytest
import torch

from conftest import DEV, assert_bitwise_equal, assert_same, assert_same_layout, to_dev


def _f32(*shape):
    n = 1
    for s in shape:
        n *= s
    return torch.arange(n, dtype=torch.float32).reshape(shape) * 0.5 - 7.0


def _i64(*shape):
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, dtype=torch.int64) * 7919 - 1000).reshape(shape)


def _f16(*shape):
    return _f32(*shape).to(torch.float16)


def _f64(*shape):
    return _f32(*shape).to(torch.float64) / 3


def _bool(*shape):
    return (torch.arange(_numel(shape)) % 3 == 0).reshape(shape)


def _numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


# name -> (base factory, chain). A chain takes a base and returns one view (or tensor).
CHAINS = {
    # single ops
    "view": (lambda: _f32(4, 5, 6), lambda x: x.view(6, 20)),
    "view-infer": (lambda: _f32(4, 5, 6), lambda x: x.view(-1, 3)),
    "reshape": (lambda: _f32(4, 5, 6), lambda x: x.reshape(10, 12)),
    "flatten": (lambda: _f32(4, 5, 6), lambda x: x.flatten()),
    "flatten-partial": (lambda: _f32(4, 5, 6), lambda x: x.flatten(1)),
    "transpose": (lambda: _f32(4, 5, 6), lambda x: x.transpose(0, 2)),
    "t": (lambda: _f32(6, 7), lambda x: x.t()),
    "t-1d": (lambda: _f32(6), lambda x: x.t()),
    "permute": (lambda: _f32(4, 5, 6), lambda x: x.permute(2, 0, 1)),
    "permute-neg": (lambda: _f32(2, 3, 4, 5), lambda x: x.permute(-1, 1, 0, -2)),
    "movedim": (lambda: _f32(2, 3, 4), lambda x: x.movedim(0, -1)),
    "slice-step": (lambda: _f32(4, 5, 6), lambda x: x[::2, 1::2, ::3]),
    "slice-offset": (lambda: _f32(4, 5, 6), lambda x: x[1:3, 2:, 4:5]),
    "slice-neg": (lambda: _f32(10), lambda x: x[-7:-2:2]),
    "select": (lambda: _f32(4, 5, 6), lambda x: x.select(1, 2)),
    "select-neg": (lambda: _f32(4, 5, 6), lambda x: x.select(-1, -2)),
    "index-int": (lambda: _f32(4, 5, 6), lambda x: x[2]),
    "index-last": (lambda: _f32(4, 5, 6), lambda x: x[:, :, 3]),
    "narrow": (lambda: _f32(4, 5, 6), lambda x: x.narrow(2, 1, 3)),
    "expand": (lambda: _f32(4, 1, 6), lambda x: x.expand(4, 5, 6)),
    "expand-new-dims": (lambda: _f32(6), lambda x: x.expand(3, 2, 6)),
    "expand_as": (lambda: _f32(1, 6), lambda x: x.expand_as(torch.empty(4, 6))),
    "unsqueeze": (lambda: _f32(4, 5), lambda x: x.unsqueeze(1)),
    "unsqueeze-neg": (lambda: _f32(4, 5), lambda x: x.unsqueeze(-1)),
    "squeeze-all": (lambda: _f32(1, 4, 1, 5, 1), lambda x: x.squeeze()),
    "squeeze-dim": (lambda: _f32(4, 1, 5), lambda x: x.squeeze(1)),
    "squeeze-noop": (lambda: _f32(4, 5), lambda x: x.squeeze(0)),
    "as_strided": (lambda: _f32(30), lambda x: x.as_strided((3, 3), (2, 1), 5)),
    "as_strided-overlap": (lambda: _f32(30), lambda x: x.as_strided((4, 5), (1, 1))),
    "as_strided-0stride": (lambda: _f32(30), lambda x: x.as_strided((3, 4), (0, 2), 3)),
    "diagonal": (lambda: _f32(5, 5), lambda x: x.diagonal()),
    "diagonal-offset": (lambda: _f32(4, 5, 6), lambda x: x.diagonal(offset=1, dim1=1, dim2=2)),
    "diagonal-neg": (lambda: _f32(5, 6), lambda x: x.diagonal(-2)),
    "unfold": (lambda: _f32(4, 5, 6), lambda x: x.unfold(2, 3, 2)),
    "unfold-overlap": (lambda: _f32(10), lambda x: x.unfold(0, 4, 1)),
    "split": (lambda: _f32(4, 5, 6), lambda x: x.split(2, dim=2)[1]),
    "split-sizes": (lambda: _f32(4, 5, 6), lambda x: x.split([1, 3, 2], dim=2)[2]),
    "split-last-short": (lambda: _f32(7, 3), lambda x: x.split(3)[2]),
    "chunk": (lambda: _f32(4, 6, 5), lambda x: x.chunk(3, dim=1)[-1]),
    "unbind": (lambda: _f32(3, 4), lambda x: x.unbind(1)[2]),
    "swapaxes": (lambda: _f32(2, 3, 4), lambda x: x.swapaxes(0, 1)),
    "view-dtype-same-size": (lambda: _f32(4, 6), lambda x: x.view(torch.int32)),
    "view-dtype-smaller": (lambda: _f32(4, 6), lambda x: x.view(torch.int16)),
    "view-dtype-bytes": (lambda: _f32(4, 6), lambda x: x.view(torch.uint8)),
    "view-dtype-larger": (lambda: _f32(4, 6), lambda x: x.view(torch.float64)),
    "view-dtype-bf16": (lambda: _f32(4, 6), lambda x: x.view(torch.bfloat16)),
    "view-dtype-i64-to-f16": (lambda: _i64(3, 4), lambda x: x.view(torch.float16)),
    "view-dtype-f16-to-i32": (lambda: _f16(3, 4), lambda x: x.view(torch.int32)),
    "view-dtype-bool-u8": (lambda: _bool(3, 4), lambda x: x.view(torch.uint8)),
    "view_as": (lambda: _f32(4, 6), lambda x: x.view_as(torch.empty(2, 12))),
    "real-view-of-int": (lambda: _i64(4, 5), lambda x: x.t()[1:, ::2]),
    # 0-d and empty
    "0d-select": (lambda: _f32(4, 5, 6), lambda x: x[1, 2, 3]),
    "0d-view": (lambda: _f32(4, 5), lambda x: x[2, 3].view(1, 1)),
    "0d-unsqueeze": (lambda: _f32(4, 5), lambda x: x[3, 1].unsqueeze(0)),
    "0d-expand": (lambda: _f32(4, 5), lambda x: x[1, 1].expand(3, 2)),
    "0d-base": (lambda: torch.tensor(3.5), lambda x: x.view(1)),
    "0d-base-expand": (lambda: torch.tensor(2.0), lambda x: x.expand(4)),
    "empty-slice": (lambda: _f32(4, 5), lambda x: x[:, 2:2]),
    "empty-rows": (lambda: _f32(4, 5), lambda x: x[3:1]),
    "empty-view": (lambda: _f32(4, 5), lambda x: x[2:2].view(0, 10)),
    "empty-base": (lambda: _f32(0, 3), lambda x: x.t()),
    "empty-base-reshape": (lambda: _f32(3, 0, 2), lambda x: x.reshape(0, 6)),
    # views of views
    "t-slice-unsqueeze-expand": (
        lambda: _f32(4, 5, 6),
        lambda x: x.transpose(0, 1)[1:, ::2].unsqueeze(0).expand(2, -1, -1, -1),
    ),
    "permute-select-narrow-unfold": (
        lambda: _f32(4, 5, 6),
        lambda x: x.permute(2, 1, 0).select(1, 3).narrow(0, 1, 4).unfold(1, 2, 1),
    ),
    "split-t-diagonal": (lambda: _f32(6, 8), lambda x: x.split(4, dim=1)[1].t().diagonal(1)),
    "slice-slice-slice": (lambda: _f32(40), lambda x: x[3:][::2][1:-1][::3]),
    "view-transpose-view": (lambda: _f32(4, 6), lambda x: x.view(2, 2, 6).transpose(0, 1)[0].view(2, 3, 2)),
    "narrow-as_strided": (lambda: _f32(30), lambda x: x.narrow(0, 4, 20).as_strided((2, 3), (3, 2))),
    "as_strided-offset-then-t": (
        lambda: _f32(40),
        lambda x: x[5:].as_strided((3, 4), (4, 1), 9).t(),
    ),
    "chunk-squeeze-unsqueeze": (lambda: _f32(4, 1, 6), lambda x: x.chunk(2)[1].squeeze(1).unsqueeze(0)),
    "expand-select": (lambda: _f32(1, 6), lambda x: x.expand(5, 6)[3]),
    "expand-transpose-slice": (lambda: _f32(3, 1), lambda x: x.expand(3, 4).t()[1:3]),
    "diagonal-of-permute": (lambda: _f32(3, 4, 4), lambda x: x.permute(1, 2, 0).diagonal(dim1=0, dim2=1)),
    "unfold-unfold": (lambda: _f32(4, 12), lambda x: x.unfold(1, 4, 2).unfold(0, 2, 1)),
    "slice-view-dtype": (lambda: _f32(4, 8), lambda x: x[1:3, :4].view(torch.float64)),
    "view-dtype-then-t": (lambda: _f32(4, 8), lambda x: x.view(torch.int16).t()),
    "slice-view-dtype-smaller": (lambda: _f64(4, 3), lambda x: x[1:, 1:].view(torch.int32)),
    "view-dtype-then-slice": (lambda: _f32(4, 8), lambda x: x.view(torch.uint8)[:, 3::4]),
    "i64-t-slice-select": (lambda: _i64(5, 4, 3), lambda x: x.transpose(0, 2)[1:].select(2, 4)),
    "f16-chain": (lambda: _f16(4, 6), lambda x: x.t().unsqueeze(0)[..., ::2]),
    "bool-chain": (lambda: _bool(4, 6), lambda x: x[1:].t().diagonal()),
    "ellipsis-none": (lambda: _f32(3, 4, 5), lambda x: x[..., None, 1:3]),
    # reshape / flatten of non-contiguous inputs copy; still must match the CPU
    "reshape-noncontig": (lambda: _f32(4, 5, 6), lambda x: x.transpose(0, 1).reshape(-1)),
    "flatten-noncontig": (lambda: _f32(4, 5), lambda x: x.t().flatten()),
    "reshape-view-compatible": (lambda: _f32(4, 5, 6), lambda x: x[:, 1:3].reshape(4, 2, 2, 3)),
}


@pytest.mark.parametrize("name", list(CHAINS))
def test_view_chain(name):
    make_base, chain = CHAINS[name]
    base_c = make_base()
    base_d = to_dev(base_c)
    vc = chain(base_c)
    vd = chain(base_d)
    assert vd.device.type == DEV
    assert vd.dtype == vc.dtype
    assert_same_layout(vd, vc, msg=name)
    assert vd._is_view() == vc._is_view(), name
    assert vd.untyped_storage().nbytes() == vc.untyped_storage().nbytes(), name
    assert_bitwise_equal(vd.cpu(), vc, msg=name)
    # Values read through a fresh contiguous copy as well.
    assert_bitwise_equal(vd.contiguous().cpu(), vc.contiguous(), msg=name + " contiguous")
    # The base is untouched by taking views.
    assert_bitwise_equal(base_d.cpu(), base_c, msg=name + " base")


@pytest.mark.parametrize("name", [n for n in CHAINS if not n.startswith("reshape-noncontig")
                                  and not n.startswith("flatten-noncontig")])
def test_view_shares_storage(name):
    """A view of a device tensor aliases the base's storage, as on the CPU."""
    make_base, chain = CHAINS[name]
    base_c = make_base()
    base_d = to_dev(base_c)
    vc, vd = chain(base_c), chain(base_d)
    same_c = vc.untyped_storage().data_ptr() == base_c.untyped_storage().data_ptr()
    same_d = vd.untyped_storage().data_ptr() == base_d.untyped_storage().data_ptr()
    assert same_d == same_c


def test_view_errors_like_cpu():
    c = _f32(4, 6)
    d = to_dev(c)
    for f in (
        lambda x: x.t().view(24),  # not viewable
        lambda x: x.view(5, 5),  # wrong numel
        lambda x: x.t().view(torch.float64),  # last stride not 1
        lambda x: x[:, 1:4].view(torch.float64),  # odd size in last dim
        lambda x: x.expand(3, 4),  # bad expand
        lambda x: x.narrow(1, 5, 3),  # out of range
        lambda x: x.select(0, 4),
    ):
        with pytest.raises((RuntimeError, IndexError)) as ec:
            f(c)
        with pytest.raises(ec.type):
            f(d)


# --------------------------------------------------------------------------- aliasing
#
# A scenario takes a base tensor (on CPU or device) and the device string, performs
# reads and writes, and returns a list of tensors to compare.  Values computed from a
# view BEFORE a write must keep the old numbers.


def _src(where, t):
    return t.clone() if where == "cpu" else to_dev(t)


def sc_add_(base, where):
    v = base[1]
    w = base[:, 2]
    before = v * 1
    before_w = w + 0
    v.add_(1)
    return [base, v, w, before, before_w]


def sc_copy_(base, where):
    v = base.t()
    other = base[::2]
    before = other * 1
    src = _src(where, torch.arange(20, dtype=base.dtype).reshape(5, 4) * 3)
    v.copy_(src)
    return [base, v, other, before]


def sc_copy_from_cpu_into_view(base, where):
    # cross-device copy into a non-contiguous device view with a storage offset
    v = base.t()[1:4, 1::2]
    before = base.clone()
    v.copy_(torch.full((3, 2), -5, dtype=base.dtype))
    return [base, v, before]


def sc_fill_(base, where):
    v = base[::2]
    d = base.diagonal()
    before = d + 0
    v.fill_(0)
    return [base, v, d, before]


def sc_setitem(base, where):
    flat = base.view(-1)
    before = base[1:3] * 1
    flat[3:7] = _src(where, torch.tensor([100, 101, 102, 103], dtype=base.dtype))
    base[0, 1] = 55
    base[:, 3] = _src(where, torch.tensor([9, 8, 7, 6], dtype=base.dtype))
    base[2, ...] = -1
    base[..., 0] = flat[5]  # 0-d device value broadcast into a column
    return [base, flat, before]


def sc_mul_(base, where):
    d = base.diagonal()
    row = base[2]
    before = row.clone()
    d.mul_(2)
    return [base, d, row, before]


def sc_write_base_read_views(base, where):
    views = [base[1:], base.t(), base.view(-1)[::3], base.unsqueeze(0).expand(2, 4, 5)]
    before = [v * 1 for v in views]
    base.add_(10)
    return [base] + views + before


def sc_view_of_view_write(base, where):
    v = base.transpose(0, 1)[1:4].narrow(1, 1, 2)  # (3, 2)
    w = base.view(-1).as_strided((3, 2), (5, 1), 6)
    before_w = w * 1
    v.sub_(3)
    mid = w * 1
    w.add_(1)
    return [base, v, w, before_w, mid]


def sc_0d(base, where):
    s = base[1, 2]
    before = s * 1
    s.add_(5)
    s2 = base.view(-1)[7]
    s2.fill_(3)
    s3 = base[3, 4]
    s3.copy_(_src(where, torch.tensor(-2, dtype=base.dtype)))
    return [base, s, s2, s3, before]


def sc_empty_views(base, where):
    e = base[:, 2:2]
    e.fill_(1)
    e.add_(1)
    base[3:1] = 7
    return [base, e]


def sc_overlapping_reads(base, where):
    ex = base[0].expand(3, 5)
    ov = base.view(-1).as_strided((4, 3), (1, 1), 2)
    before_ex, before_ov = ex * 1, ov + 0
    base[0, 1] = 42
    base.view(-1)[3] = -42
    return [base, ex, ov, before_ex, before_ov, ex.sum(0), ov.sum(1)]


def sc_view_dtype_write(base, where):
    # base is float32 here: write raw bits through an int32 view
    iv = base.view(torch.int32)
    before = base * 1
    iv[0, 0] = 0x3F800000  # 1.0f
    iv[1].zero_()
    bv = base.view(torch.uint8)
    bv[2, 3::4] = 0x40  # flips the high byte of every float in row 2
    return [base, iv, bv, before]


def sc_repeated_writes(base, where):
    v = base[1:3, 1:4]
    snaps = []
    for i in range(4):
        v.mul_(2)
        base.add_(1)
        snaps.append(v * 1)
        snaps.append(base.sum())
    return [base, v] + snaps


def sc_inplace_from_other_view(base, where):
    base[1].copy_(base[0] * 2)
    base[2].add_(base[3])
    base[:, 0].mul_(base[:, 1])
    return [base]


def sc_clone_is_independent(base, where):
    c = base[1:].clone()
    k = base.t().contiguous()
    base.fill_(0)
    return [base, c, k]


def sc_detach_aliases(base, where):
    d = base.detach()
    d[0, 0] = 99
    v = base.data
    v[1, 1] = 98
    return [base, d, v]


def sc_whole_value_reads(base, where):
    # a value written over its whole storage is kept in its own shape (StorageCell::set_whole):
    # reads of that shape, of others over the same storage, strided and bitcast reads, before
    # and after its flat value exists and is realized, then partial and whole writes
    y = base * 2 + 1
    a, b = y.view(20), y.view(5, 4)
    snaps = [y * 1, a * 1, b + 0, y.t() * 1, a * 1, b + 0]
    y.copy_(base.flip(1))
    snaps += [b * 1, a + 0, y * 1]
    if where == "dev":
        torch.tiny.synchronize()
    snaps += [a * 1, b + 0, y * 1, y.view(torch.int32) + 0, y.t() * 1]
    y[1, 2] = -5
    snaps += [a * 1, y * 1, b.sum(0)]
    y.copy_(base.flip(0))
    snaps += [y * 1, b * 1, y.view(5, 4).t() + 0, y.view(torch.int32) * 1]
    return [base, y, a, b] + snaps


_SCENARIOS = {
    "add_": (sc_add_, torch.float32),
    "copy_": (sc_copy_, torch.float32),
    "copy_-cpu-into-view": (sc_copy_from_cpu_into_view, torch.float32),
    "fill_": (sc_fill_, torch.int64),
    "setitem": (sc_setitem, torch.float32),
    "setitem-int": (sc_setitem, torch.int32),
    "mul_": (sc_mul_, torch.float32),
    "write-base-read-views": (sc_write_base_read_views, torch.float32),
    "view-of-view-write": (sc_view_of_view_write, torch.int64),
    "0d": (sc_0d, torch.float32),
    "empty-views": (sc_empty_views, torch.float32),
    "overlapping-reads": (sc_overlapping_reads, torch.float32),
    "view-dtype-write": (sc_view_dtype_write, torch.float32),
    "repeated-writes": (sc_repeated_writes, torch.float64),
    "inplace-from-other-view": (sc_inplace_from_other_view, torch.float32),
    "clone-independent": (sc_clone_is_independent, torch.int16),
    "detach-aliases": (sc_detach_aliases, torch.float32),
    "whole-value-reads": (sc_whole_value_reads, torch.float32),
}


@pytest.mark.parametrize("name", list(_SCENARIOS))
def test_aliasing(name):
    scenario, dtype = _SCENARIOS[name]
    base_c = (torch.arange(20) - 6).reshape(4, 5).to(dtype)
    base_d = to_dev(base_c)
    out_c = scenario(base_c, "cpu")
    out_d = scenario(base_d, "dev")
    assert len(out_d) == len(out_c)
    for i, (d, c) in enumerate(zip(out_d, out_c)):
        if i == 0 or c._is_view():  # the base and views: same layout as on the CPU
            assert_same_layout(d, c, msg=f"{name}[{i}]")
        assert_same(d, c, msg=f"{name}[{i}]")


def test_alias_read_after_many_pending_writes():
    """Reads interleaved with writes on different views, materialized only at the end."""
    results = {}
    for where in ("cpu", "dev"):
        base = _src(where, torch.zeros(6, 6))
        rows = [base[i] for i in range(6)]
        cols = [base[:, j] for j in range(6)]
        snaps = []
        for i in range(6):
            rows[i].add_(i + 1)
            snaps.append(cols[i] * 1)
            cols[(i + 1) % 6].mul_(2)
        results[where] = [base] + snaps
    got, ref = results["dev"], results["cpu"]
    for i, (g, r) in enumerate(zip(got, ref)):
        assert_same(g, r, msg=f"[{i}]")


def test_storage_shared_between_views_after_write():
    c = torch.arange(12, dtype=torch.float32)
    d = to_dev(c)
    a_d, b_d = d[:6].view(2, 3), d[3:].view(3, 3)
    a_c, b_c = c[:6].view(2, 3), c[3:].view(3, 3)
    a_d[1].fill_(-1)  # elements 3..5, the first row of b
    a_c[1].fill_(-1)
    assert_same(b_d, b_c)
    assert_same(d, c)
    assert a_d.untyped_storage().data_ptr() == b_d.untyped_storage().data_ptr()


def test_set_and_storage_offset_views():
    c = torch.arange(10, dtype=torch.float32)
    d = to_dev(c)
    tc = torch.empty(0)
    td = torch.empty(0, device=DEV)
    tc.set_(c.untyped_storage(), 2, (2, 3), (3, 1))
    td.set_(d.untyped_storage(), 2, (2, 3), (3, 1))
    assert_same_layout(td, tc)
    assert_same(td, tc)
    td.fill_(0)
    tc.fill_(0)
    assert_same(d, c)
