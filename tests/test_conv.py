"""Convolutions (1d/2d/3d, stride, padding modes, dilation, groups, transposed, bias) forward
and backward against the CPU, plus kernel counts of a fused conv block."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import DEV, IS_TINY, assert_same, requires_tiny, sync, to_dev
from nn_helpers import check_fwd_bwd

CONV2D = [
    dict(),
    dict(stride=2, padding=1),
    dict(stride=(2, 1), padding=(1, 2), dilation=(2, 1)),
    dict(padding="same"),
    dict(padding="same", dilation=2),
    dict(padding="valid", stride=3),
    dict(padding=2, dilation=(1, 3)),
]


@pytest.mark.parametrize("kw", CONV2D, ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d(kw, bias):
    x = torch.randn(2, 4, 9, 10)
    w = torch.randn(6, 4, 3, 3)
    b = torch.randn(6) if bias else None
    check_fwd_bwd(F.conv2d, x, w, b, **kw)


@pytest.mark.parametrize("groups,cin,cout", [(2, 4, 6), (4, 4, 4), (4, 4, 8), (3, 6, 3)])
def test_conv2d_groups_depthwise(groups, cin, cout):
    x = torch.randn(2, cin, 7, 8)
    w = torch.randn(cout, cin // groups, 3, 2)
    check_fwd_bwd(F.conv2d, x, w, torch.randn(cout), stride=(1, 2), padding=1, groups=groups)


def test_conv2d_even_kernel_same():
    # 'same' with an even kernel pads asymmetrically (ATen pads the input first)
    check_fwd_bwd(F.conv2d, torch.randn(1, 3, 6, 7), torch.randn(2, 3, 2, 4), None, padding="same")


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(dilation=3, padding="same"), dict(groups=2)],
                         ids=str)
def test_conv1d(kw):
    check_fwd_bwd(F.conv1d, torch.randn(3, 4, 17), torch.randn(6, 4 // kw.get("groups", 1), 3), torch.randn(6), **kw)


@pytest.mark.parametrize("kw", [dict(), dict(stride=(1, 2, 1), padding=1), dict(dilation=(2, 1, 1), groups=2)],
                         ids=str)
def test_conv3d(kw):
    w = torch.randn(4, 4 // kw.get("groups", 1), 2, 3, 2)
    check_fwd_bwd(F.conv3d, torch.randn(2, 4, 5, 6, 7), w, torch.randn(4), **kw)


@pytest.mark.parametrize("kw", [
    dict(),
    dict(stride=2, padding=1, output_padding=1),
    dict(stride=(2, 3), padding=(0, 2), dilation=(1, 2)),
    dict(stride=3, padding=2, output_padding=(2, 1), groups=2),
    dict(padding=3),  # padding larger than the kernel reach: crops
], ids=str)
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose2d(kw, bias):
    g = kw.get("groups", 1)
    x = torch.randn(2, 4, 6, 5)
    w = torch.randn(4, 6 // g, 3, 3)
    check_fwd_bwd(F.conv_transpose2d, x, w, torch.randn(6) if bias else None, **kw)


# Kernels equal to the stride (U-Net's 2x2 stride-2 upsampling): one product over the input
# channels, read back block by block; with groups or padding, the general forms.
@pytest.mark.parametrize("fn,x,w,kw", [
    (F.conv_transpose2d, (2, 8, 5, 7), (8, 3, 2, 2), dict(stride=2)),
    (F.conv_transpose2d, (3, 4, 4, 3), (4, 5, 3, 1), dict(stride=(3, 1))),
    (F.conv_transpose1d, (2, 6, 9), (6, 4, 4), dict(stride=4)),
    (F.conv_transpose3d, (1, 3, 3, 2, 4), (3, 2, 2, 2, 2), dict(stride=2)),
    (F.conv_transpose2d, (2, 4, 5, 5), (4, 3, 2, 2), dict(stride=2, padding=1)),
    (F.conv_transpose2d, (2, 4, 5, 5), (4, 3, 2, 2), dict(stride=2, groups=2)),
    (F.conv_transpose2d, (0, 8, 5, 7), (8, 3, 2, 2), dict(stride=2)),  # an empty batch
], ids=lambda v: str(v) if isinstance(v, (tuple, dict)) else v.__name__)
@pytest.mark.parametrize("bias", [True, False])
def test_conv_transpose_kernel_equal_to_stride(fn, x, w, kw, bias):
    torch.manual_seed(3)
    oc = w[1] * kw.get("groups", 1)
    check_fwd_bwd(fn, torch.randn(*x), torch.randn(*w), torch.randn(oc) if bias else None, **kw)


def test_conv_transpose1d_3d():
    check_fwd_bwd(F.conv_transpose1d, torch.randn(2, 4, 10), torch.randn(4, 3, 3), torch.randn(3), stride=3,
                  padding=1, output_padding=2)
    check_fwd_bwd(F.conv_transpose3d, torch.randn(1, 2, 3, 4, 3), torch.randn(2, 3, 2, 2, 3), None, stride=2,
                  padding=(0, 1, 1))


def test_conv_unbatched_and_noncontiguous():
    x = torch.randn(4, 9, 9)
    check_fwd_bwd(F.conv2d, x, torch.randn(5, 4, 3, 3), None, padding=1)
    # channels-last style permuted input and a transposed weight view
    xp = torch.randn(2, 8, 9, 4).permute(0, 3, 1, 2)
    wp = torch.randn(3, 3, 4, 5).permute(3, 2, 0, 1)
    check_fwd_bwd(F.conv2d, xp, wp, None, stride=2)


def test_conv_empty_batch():
    x = torch.randn(0, 4, 6, 6)
    w = torch.randn(3, 4, 3, 3)
    assert_same(F.conv2d(to_dev(x), to_dev(w)), F.conv2d(x, w))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_conv_dtypes(dtype):
    x = torch.randn(2, 3, 8, 8).to(dtype)
    w = torch.randn(4, 3, 3, 3).to(dtype)
    b = torch.randn(4).to(dtype)
    tol = dict(rtol=1e-2, atol=1e-2) if dtype in (torch.float16, torch.bfloat16) else dict(rtol=1e-7, atol=1e-7)
    # 16-bit: compare with the CPU computing in float32 and rounding once, as tiny does
    exp = F.conv2d(x.float(), w.float(), b.float(), padding=1).to(dtype) if dtype != torch.float64 else \
        F.conv2d(x, w, b, padding=1)
    assert_same(F.conv2d(to_dev(x), to_dev(w), to_dev(b), padding=1), exp, **tol)


def test_conv_errors():
    x = torch.randn(2, 4, 5, 5)
    for args, kw in [((torch.randn(3, 5, 3, 3),), {}), ((torch.randn(6, 2, 3, 3),), dict(groups=3)),
                     ((torch.randn(3, 4, 7, 7),), {})]:
        with pytest.raises(RuntimeError) as cpu_err:
            F.conv2d(x, *args, **kw)
        with pytest.raises(RuntimeError) as dev_err:
            F.conv2d(to_dev(x), *[to_dev(a) for a in args], **kw)
        assert type(dev_err.value) is type(cpu_err.value)


@pytest.mark.parametrize("k,pad,opad", [(3, 1, 1), (3, 0, 1), (4, 1, 0), (5, 2, 1), (2, 0, 0)], ids=str)
def test_stride2_gradients_by_output_phase(k, pad, opad):
    """Stride-2 transposed convolutions (a strided convolution's input gradient, and
    ConvTranspose itself) large enough to run per output phase: each output position takes
    only its own taps, never the zeros of an interleaved input; both pad parities, odd and
    even kernels, and the input gradient read channels-last by the weight gradient before it."""
    torch.manual_seed(3)
    x = torch.randn(8, 6, 16, 16)
    w = torch.randn(6, 5, k, k) * 0.2
    check_fwd_bwd(F.conv_transpose2d, x, w, None, stride=2, padding=pad, output_padding=opad,
                  rtol=1e-4, atol=1e-4)
    if IS_TINY:  # the products the kernels do: ceil(k/2)^2 taps per output, not k^2
        from torch_tiny import debug
        xd, wd = to_dev(x), to_dev(w)
        sync()
        with debug.trace() as t:
            y = F.conv_transpose2d(xd, wd, stride=2, padding=pad, output_padding=opad)
            sync()
        products = y.numel() * 6 * ((k + 1) // 2) ** 2
        assert sum(kern.flops for kern in t.kernels) <= 2 * products * 1.05
    w1, w2 = torch.randn(16, 8, 3, 3) * 0.2, torch.randn(32, 16, k, k) * 0.2

    def two_convs(x, w1, w2):  # conv2's input gradient is conv1's grad_output
        return F.conv2d(F.conv2d(x, w1, padding=1).relu(), w2, stride=2, padding=pad).square().sum()
    # w1's gradient sums 8192 products into values up to ~3e4, some nearly cancelling: float32
    # sums in another order differ by up to ~2e-6 of that scale (0.06 seen on the emulated GPU)
    check_fwd_bwd(two_convs, torch.randn(8, 8, 32, 32), w1, w2, rtol=1e-4, atol=0.2)
    # 1-d and 3-d, and a stride of 1 along one dim
    check_fwd_bwd(F.conv_transpose1d, torch.randn(8, 4, 64), torch.randn(4, 3, k), None, stride=2, padding=pad,
                  output_padding=opad, rtol=1e-4, atol=1e-4)
    check_fwd_bwd(F.conv_transpose3d, torch.randn(2, 3, 8, 8, 8), torch.randn(3, 2, k, 3, k), None,
                  stride=(2, 1, 2), padding=pad, output_padding=(opad, 0, opad), rtol=1e-4, atol=1e-4)


def test_conv_module_training_step():
    torch.manual_seed(1)
    mc = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 4, 3, stride=2, groups=4),
                       nn.ConvTranspose2d(4, 2, 3, stride=2, output_padding=1))
    import copy
    md = copy.deepcopy(mc).to(DEV)
    x = torch.randn(2, 3, 12, 12)
    loss_c = mc(x).square().mean()
    loss_d = md(to_dev(x)).square().mean()
    loss_c.backward()
    loss_d.backward()
    assert_same(loss_d, loss_c, rtol=1e-4, atol=1e-6)
    for pc, pd in zip(mc.parameters(), md.parameters()):
        assert_same(pd.grad, pc.grad, rtol=1e-4, atol=1e-5)


def test_conv_backward_large_computed_grad_output():
    """A computed grad_output of 2^20 elements or more (ReLU backward here) is stored padded
    for the input gradient and read back from there by the weight gradient."""
    torch.manual_seed(2)
    x = torch.randn(4, 16, 64, 64)
    w = torch.randn(64, 16, 3, 3) * 0.1
    r = torch.randn(4, 64, 64, 64)

    def fn(x, w):
        return (F.conv2d(x, w, padding=1).relu() * r.to(x.device)).sum()
    check_fwd_bwd(fn, x, w, rtol=1e-4, atol=1e-3)
    # a 1x1 convolution padded by 1: its input gradient crops grad_output (nothing to read back)
    w1 = torch.randn(64, 16, 1, 1) * 0.1
    r1 = torch.randn(4, 64, 66, 66)

    def fn1(x, w):
        return (F.conv2d(x, w, padding=1).relu() * r1.to(x.device)).sum()
    check_fwd_bwd(fn1, x, w1, rtol=1e-4, atol=1e-3)



# Maps smaller than the kernel's reach: taps that read only padding for every output (8 of a 3x3
# kernel's 9 over a 1x1 map) are left out, the weight gradient of those taps is zero. Strides,
# dilations and paddings where the live taps are not centred, and the ones where nothing is left
# out (a 2x2 map), against the CPU.
@pytest.mark.parametrize("size,k,kw", [
    ((1, 1), 3, dict(padding=1)),                    # resnet18's layer4 at 32x32 input
    ((2, 2), 3, dict(stride=2, padding=1)),          # its first convolution: taps 1..2 live
    ((2, 2), 3, dict(padding=1)),                    # every tap live
    ((1, 3), 5, dict(padding=2)),                    # one dim trimmed, the other not
    ((2, 1), 3, dict(padding=(2, 1), dilation=(2, 1))),  # dilated: live taps 1..2 along dim 0
    ((3, 3), 5, dict(stride=3, padding=2)),
    ((1, 1), 3, dict(padding=3)),                    # outputs reading padding only: zeros
], ids=str)
def test_conv2d_taps_reading_only_padding(size, k, kw):
    torch.manual_seed(0)
    x, w, b = torch.randn(3, 5, *size), torch.randn(7, 5, k, k), torch.randn(7)
    check_fwd_bwd(F.conv2d, x, w, b, **kw)
    check_fwd_bwd(lambda x, w: F.conv1d(x, w, padding=2), torch.randn(2, 4, 1), torch.randn(3, 4, 5))
    check_fwd_bwd(lambda x, w: F.conv3d(x, w, padding=1), torch.randn(2, 3, 1, 2, 1), torch.randn(4, 3, 3, 3, 3))


@pytest.mark.parametrize("n,c,size,k,kw", [
    (2, 96, (14, 14), 7, dict(padding=3)),          # ConvNeXt's depthwise layers: rows as one run
    (2, 64, (7, 7), 7, dict(padding=3)),
    (3, 32, (13, 10), 3, dict(padding=(2, 1), dilation=(2, 1))),
    (2, 32, (17, 17), 3, dict(padding=1, stride=2)),  # strided: not one run
    (2, 16, (6, 16), 3, dict(padding=1)),             # whole vectors wide: not one run
    (2, 384, (4, 4), 3, dict(padding=1)),             # MobileNetV2's small maps: padded operand stored
    (1, 96, (8, 5), 3, dict(padding=(1, 2))),
])
def test_conv2d_depthwise(n, c, size, k, kw):
    torch.manual_seed(0)
    x, w, b = torch.randn(n, c, *size), torch.randn(c, 1, k, k), torch.randn(c)
    # the weight gradient sums n * 14 * 14 products of unit normals per tap (a sum of ~20 in
    # size): summed in another order, it differs by ~4e-5 from the CPU's
    check_fwd_bwd(F.conv2d, x, w, b, groups=c, atol=1e-4, **kw)


@pytest.mark.parametrize("cin,cout,size", [(144, 24, 16), (150, 24, 16), (17, 5, 6), (160, 96, 2)], ids=str)
def test_pointwise_conv_input_gradient_behind_batch_norm(cin, cout, size):
    """The input gradient of a 1x1 convolution with its batch norm's backward fused in reads the
    weight in place along the input channels: the channels past the last whole tile take a tile
    of their whole vectors (16 of 144), the rest one at a time (150: 16 and 6)."""
    torch.manual_seed(0)
    mc = nn.Sequential(nn.ReLU6(), nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout))
    md = copy.deepcopy(mc).to(DEV)
    x, r = torch.randn(2, cin, size, size) * 3, torch.randn(2, cout, size, size)
    xc, xd = x.clone().requires_grad_(), to_dev(x).requires_grad_()
    for m, xx, rr in ((mc, xc, r), (md, xd, to_dev(r))):
        (m(xx) * rr).sum().backward()
    assert_same(xd.grad, xc.grad, rtol=1e-4, atol=1e-5)
    assert_same(md[1].weight.grad, mc[1].weight.grad, rtol=1e-4, atol=1e-4)


def test_conv3d_depthwise_rows_as_one_run():
    torch.manual_seed(0)
    check_fwd_bwd(F.conv3d, torch.randn(2, 8, 3, 9, 9), torch.randn(8, 1, 3, 3, 3), None, padding=1, groups=8)


def test_resnet_block_training_on_1x1_maps():
    """A residual block at 1x1 (resnet18's layer4 at 32x32 input) trained on the device: the 3x3
    convolutions reduce to their centre taps, the batch norm backward's small grad_output is
    stored for the weight gradient, the 1x1 maps' convolutions take channel tiles."""
    torch.manual_seed(1)
    C = 256  # grad_output 16 x 256, read 256 times per element by the weight gradient
    block = nn.Sequential(nn.Conv2d(C, C, 3, padding=1, bias=False), nn.BatchNorm2d(C), nn.ReLU(),
                          nn.Conv2d(C, C, 3, padding=1, bias=False), nn.BatchNorm2d(C))
    x = torch.randn(16, C, 1, 1)
    dev_block = copy.deepcopy(block).to(DEV)
    xd = x.to(DEV).requires_grad_()
    (dev_block(xd) + xd).relu().square().sum().backward()
    xc = x.clone().requires_grad_()
    (block(xc) + xc).relu().square().sum().backward()
    assert_same(xd.grad, xc.grad, rtol=1e-4, atol=1e-4)
    for pc, pd in zip(block.parameters(), dev_block.parameters()):
        assert_same(pd.grad, pc.grad, rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------------- kernel counts

def _block(residual):
    torch.manual_seed(0)
    conv = nn.Conv2d(8, 8, 3, padding=1)
    bn = nn.BatchNorm2d(8)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)

    def f(x):
        y = bn(conv(x))
        return torch.relu(y + x if residual else y)

    return conv, bn, f


@pytest.mark.parametrize("residual", [False, True])
def test_kernel_count_conv_bn_eval_relu(residual):
    requires_tiny()
    from torch_tiny import debug
    conv, bn, f = _block(residual)
    x = torch.randn(2, 8, 10, 10)
    conv.eval(), bn.eval()
    with torch.no_grad():
        expected = f(x)
    conv.to("tiny"), bn.to("tiny")
    xd = to_dev(x)
    sync()
    debug.reset()
    with torch.no_grad():
        with debug.count_kernels() as c:
            y = f(xd)
    assert_same(y, expected, rtol=1e-4, atol=1e-5)
    # the conv reduce with the bn/relu (and residual) epilogue
    assert c.kernels == 1


def test_parallel_convolutions_of_one_input():
    """Branches reading one input (Inception, ResNeXt) give the CPU's numbers, each
    convolution in a kernel of its own: merged into one kernel with two reduces, neither
    was register-tiled and they ran 40x slower."""
    torch.manual_seed(0)
    a, b = nn.Conv2d(8, 16, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1, bias=False)
    x = torch.randn(2, 8, 12, 12)
    f = lambda a, b, x: torch.cat([a(x), b(x).relu()], 1)  # noqa: E731
    expected = f(a, b, x)
    a.to(DEV), b.to(DEV)
    xd = to_dev(x)
    sync()
    assert_same(f(a, b, xd), expected, rtol=1e-4, atol=1e-5)
    if not IS_TINY:
        return
    from torch_tiny import debug
    with debug.trace() as t:
        f(a, b, xd).cpu()
    convs = [k for k in t.kernels if k.name.startswith("r") and "convolution" in k.ops]
    assert len(convs) == 2, [k.name for k in t.kernels]


def test_kernel_count_conv_bn_train_relu_forward():
    requires_tiny()
    from torch_tiny import debug
    conv, bn, f = _block(False)
    x = torch.randn(2, 8, 10, 10)
    cpu_bn = copy.deepcopy(bn)
    expected = torch.relu(cpu_bn(conv(x)))
    conv.to("tiny"), bn.to("tiny")
    xd = to_dev(x)
    sync()
    debug.reset()
    with debug.count_kernels() as c:
        y = f(xd)  # kept alive, as a training step does (autograd holds the conv output)
    assert_same(y, expected, rtol=1e-4, atol=1e-5)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        assert_same(getattr(bn, name), getattr(cpu_bn, name), rtol=1e-5, atol=1e-6, msg=name)
    # Goal <= 3: the conv (+ bias, kept for backward); the statistics with save_mean/save_invstd,
    # both running-stat updates and nn.BatchNorm2d's num_batches_tracked += 1 (a scalar riding
    # along the statistics kernel); the normalized, relu'd output.
    assert c.kernels == 3


def test_compiling_prints_nothing(tmp_path):
    """A stride-2 convolution of a 2x2 map with its gradients, compiled in a fresh process and
    cache: the code generator's missed optimizations (loops LLVM could not vectorize as asked)
    printed warnings to the user's stderr."""
    requires_tiny()
    import os
    import subprocess
    import sys
    import textwrap
    script = textwrap.dedent(
        f"""
        import torch, torch_tiny, torch.nn.functional as F
        torch.manual_seed(1)
        x = torch.randn(2, 32, 2, 2, device="{DEV}", requires_grad=True)
        w = torch.randn(8, 32, 3, 3, device="{DEV}", requires_grad=True)
        y = F.conv2d(x, w, stride=2, padding=2)
        gx, gw = torch.autograd.grad(y, (x, w), torch.ones_like(y))
        print("RESULT", float(gx.cpu().sum()), float(gw.cpu().sum()))
        """
    )
    env = dict(os.environ, TINY_CACHE_DIR=str(tmp_path), TINY_STRICT="0")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "RESULT" in out.stdout
    assert "warning" not in out.stderr and "remark" not in out.stderr, out.stderr


def test_long_residual_stage_stores_its_stream():
    """A stage of identity shortcuts (RegNet's last: 12 blocks) builds each block's input as
    one elementwise expression down every block before it. The 1x1 weight gradients read it
    once per output channel in plain loops (16 reduce steps); fused, the whole chain was
    recomputed per channel (a 12-block SGD step 362 ms, now 82). It is stored along the way:
    the gradients still match the CPU's."""
    requires_tiny()
    from torch_tiny import debug
    torch.manual_seed(0)
    blocks = nn.ModuleList(nn.Sequential(nn.Conv2d(64, 64, 1, bias=False), nn.BatchNorm2d(64)) for _ in range(12))
    x = torch.randn(4, 64, 2, 2)

    def run(mods, x):
        for b in mods:
            x = (b(x) + x).relu()
        x.square().mean().backward()
        return [b[0].weight.grad for b in mods]
    on_dev = copy.deepcopy(blocks).to(DEV)
    want = run(blocks, x)
    with debug.trace() as t:
        got = run(on_dev, to_dev(x))
        for g in got:
            g.cpu()
    for g, w in zip(got, want):
        assert_same(g, w, rtol=1e-3, atol=1e-5)
    assert any("expensive value" in k.why and "add" in k.ops for k in t.kernels), [k.why for k in t.kernels]
