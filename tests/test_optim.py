"""Optimizers (SGD, Adam, AdamW, RMSprop; foreach and single-tensor paths) and the _foreach_*
kernels vs the CPU; an optimizer step runs no kernel before a sync."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from conftest import DEV, IS_TINY, assert_same, requires_tiny, sync, to_dev

CONFIGS = [
    (torch.optim.SGD, dict(lr=0.1)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, maximize=True)),
    (torch.optim.Adam, dict(lr=0.01)),
    (torch.optim.Adam, dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
    (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
    (torch.optim.AdamW, dict(lr=0.01, betas=(0.8, 0.9), amsgrad=True)),
    (torch.optim.RMSprop, dict(lr=0.01)),
    (torch.optim.RMSprop, dict(lr=0.01, momentum=0.9, centered=True, weight_decay=0.1)),
]


def _model():
    # Linear + conv + pooling: ops of this layer and the core (no activations from elsewhere)
    return nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3 * 4 * 4, 5))


def _train(opt_cls, kw, foreach, steps=3, clip=False, fused=None):
    torch.manual_seed(0)
    mc = _model()
    md = copy.deepcopy(mc).to(DEV)
    if fused:
        kw = dict(kw, fused=True)
    oc = opt_cls(mc.parameters(), foreach=foreach, **kw)
    od = opt_cls(md.parameters(), foreach=foreach, **kw)
    for _ in range(steps):
        x, y = torch.randn(4, 2, 8, 8), torch.randn(4, 5)
        for m, o, xx, yy in [(mc, oc, x, y), (md, od, to_dev(x), to_dev(y))]:
            o.zero_grad()
            F.mse_loss(m(xx), yy).backward()
            if clip:
                nn.utils.clip_grad_norm_(m.parameters(), 0.05, foreach=foreach)
            o.step()
    for pc, pd in zip(mc.parameters(), md.parameters()):
        assert_same(pd, pc, rtol=1e-4, atol=1e-5)
    for sc, sd in zip(oc.state.values(), od.state.values()):
        for k in sc:
            if isinstance(sc[k], torch.Tensor):
                assert_same(sd[k], sc[k], rtol=1e-4, atol=1e-5, check_device=sd[k].device.type != "cpu", msg=k)


@pytest.mark.parametrize("opt_cls,kw", CONFIGS, ids=lambda v: v.__name__ if isinstance(v, type) else str(v))
def test_optimizer_foreach(opt_cls, kw):
    _train(opt_cls, kw, foreach=True)


@pytest.mark.parametrize("opt_cls,kw", CONFIGS, ids=lambda v: v.__name__ if isinstance(v, type) else str(v))
def test_optimizer_single_tensor(opt_cls, kw):
    _train(opt_cls, kw, foreach=False)


FUSED_CONFIGS = [
    (torch.optim.Adam, dict(lr=0.01)),
    (torch.optim.Adam, dict(lr=0.01, weight_decay=0.1, amsgrad=True)),
    (torch.optim.Adam, dict(lr=0.01, betas=(0.8, 0.95), maximize=True, eps=1e-6)),
    (torch.optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
    (torch.optim.AdamW, dict(lr=torch.tensor(0.02), amsgrad=True)),  # the tensor_lr overload
]


@pytest.mark.parametrize("opt_cls,kw", FUSED_CONFIGS, ids=lambda v: v.__name__ if isinstance(v, type) else str(v))
def test_optimizer_fused(opt_cls, kw):
    _train(opt_cls, kw, foreach=None, fused=True)


def test_fused_adam_grad_scale_and_found_inf():
    """The AMP path: grads are unscaled in place, and a step with found_inf == 1 changes nothing."""
    torch.manual_seed(0)
    shapes = [(3, 4), (5,), ()]
    for found in (0.0, 1.0):
        state = [[torch.randn(s) for s in shapes] for _ in range(4)]  # params, grads, exp_avgs, exp_avg_sqs
        state[3] = [t.abs() for t in state[3]]
        steps = [torch.tensor(3.0) for _ in shapes]
        kw = dict(lr=0.01, beta1=0.9, beta2=0.99, weight_decay=0.05, eps=1e-8, amsgrad=False, maximize=False)
        cpu = [[t.clone() for t in ts] for ts in state]
        dev = [[to_dev(t) for t in ts] for ts in state]
        torch._fused_adam_(*cpu, [], steps, grad_scale=torch.tensor(4.0), found_inf=torch.tensor(found), **kw)
        torch._fused_adam_(*dev, [], [to_dev(t) for t in steps], grad_scale=to_dev(torch.tensor(4.0)),
                           found_inf=to_dev(torch.tensor(found)), **kw)
        for name, cs, ds in zip(("param", "grad", "exp_avg", "exp_avg_sq"), cpu, dev):
            for c, d in zip(cs, ds):
                assert_same(d, c, rtol=1e-6, atol=1e-7, msg=f"{name}, found_inf={found}")


def test_fused_adam_step_is_lazy():
    """The step count is read in the kernel, not on the host: a fused step syncs nothing."""
    requires_tiny()
    from torch_tiny import debug
    torch.manual_seed(0)
    m = _model().to(DEV)
    opt = torch.optim.Adam(m.parameters(), lr=0.01, fused=True)
    F.mse_loss(m(to_dev(torch.randn(4, 2, 8, 8))), to_dev(torch.randn(4, 5))).backward()
    sync()
    debug.reset()
    opt.step()
    assert debug.kernel_count() == 0
    sync()
    assert debug.kernel_count() > 0


@pytest.mark.parametrize("cin,cout", [(320, 1280), (301, 1283)])
def test_weight_gradient_and_its_adamw_update_are_one_kernel(cin, cout):
    """A 1x1 convolution's weight gradient read by AdamW (the gradient stored, both moments and
    the weight updated) is computed once, in one kernel with all four outputs, not once per
    reader (MobileNetV2's last layer: its gradient was a kernel of its own and again in each
    moment's). Its tile's epilogue runs down each output channel's input channels, the stored
    order; 301 x 1283 leaves partial tiles both ways. The values match the CPU's over three
    steps."""
    requires_tiny()
    from torch_tiny import debug

    torch.manual_seed(0)
    mc = nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU6(),
                       nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cout, 10))
    md = copy.deepcopy(mc).to(DEV)
    oc, od = (torch.optim.AdamW(m.parameters(), lr=1e-3) for m in (mc, md))
    x, y = torch.randn(2, cin, 2, 2), torch.randint(0, 10, (2,))
    for _ in range(3):
        with debug.count_kernels() as c:
            for m, o, xx, yy in [(mc, oc, x, y), (md, od, to_dev(x), to_dev(y))]:
                o.zero_grad()
                F.cross_entropy(m(xx), yy).backward()
                o.step()
            sync()
    # An element whose gradient is near zero (ReLU6 clips most of them) moves by a tenth of lr
    # on rounding alone (its update is g / (|g| + eps)): the weights to 0.2 lr, and everything
    # downstream of them to what that shifts.
    for (name, pc), pd in zip(mc.named_parameters(), md.parameters()):
        assert_same(pd, pc, rtol=1e-4, atol=2e-4, msg=name)
        assert_same(pd.grad, pc.grad, rtol=1e-3, atol=1e-5, msg=name + ".grad")
    for sc, sd in zip(oc.state.values(), od.state.values()):
        assert_same(sd["exp_avg"], sc["exp_avg"], rtol=1e-3, atol=1e-6, msg="exp_avg")
        assert_same(sd["exp_avg_sq"], sc["exp_avg_sq"], rtol=1e-3, atol=1e-10, msg="exp_avg_sq")
    if cin == 320:
        assert c.kernels <= 14  # 17 with the gradient computed three times


@pytest.mark.parametrize("foreach", [True, False])
def test_clip_grad_norm(foreach):
    _train(torch.optim.SGD, dict(lr=0.1, momentum=0.9), foreach=foreach, clip=True)


def test_foreach_step_is_lazy():
    requires_tiny()
    from torch_tiny import debug
    torch.manual_seed(0)
    m = _model().to(DEV)
    opt = torch.optim.Adam(m.parameters(), lr=0.01, foreach=True)
    x, y = to_dev(torch.randn(4, 2, 8, 8)), to_dev(torch.randn(4, 5))
    for _ in range(2):
        opt.zero_grad()
        F.mse_loss(m(x), y).backward()
        before = debug.kernel_count()
        opt.step()
        assert debug.kernel_count() == before, "the optimizer step ran kernels before a sync"
        sync()


def test_foreach_ops():
    a = [torch.randn(3, 4), torch.randn(5), torch.randn(())]
    b = [torch.randn(3, 4), torch.randn(5), torch.randn(())]
    c = [torch.rand(3, 4) + 0.5, torch.rand(5) + 0.5, torch.rand(()) + 0.5]
    da, db, dc = ([to_dev(t) for t in l] for l in (a, b, c))
    checks = [
        (lambda x, y, z: torch._foreach_add(x, y, alpha=2)),
        (lambda x, y, z: torch._foreach_add(x, 1.5)),
        (lambda x, y, z: torch._foreach_sub(x, [1, 2, 3])),
        (lambda x, y, z: torch._foreach_mul(x, y)),
        (lambda x, y, z: torch._foreach_div(x, z)),
        (lambda x, y, z: torch._foreach_maximum(x, y)),
        (lambda x, y, z: torch._foreach_clamp_min(x, 0.1)),
        (lambda x, y, z: torch._foreach_pow(z, 1.5)),
        (lambda x, y, z: torch._foreach_sqrt(z)),
        (lambda x, y, z: torch._foreach_neg(x)),
        (lambda x, y, z: torch._foreach_reciprocal(z)),
        (lambda x, y, z: torch._foreach_addcmul(x, y, z, value=0.5)),
        (lambda x, y, z: torch._foreach_addcdiv(x, y, z, [0.1, 0.2, 0.3])),
        (lambda x, y, z: torch._foreach_lerp(x, y, 0.3)),
        (lambda x, y, z: torch._foreach_lerp(x, y, 0.7)),
        (lambda x, y, z: torch._foreach_lerp(x, y, z)),
        (lambda x, y, z: torch._foreach_norm(x)),
        (lambda x, y, z: torch._foreach_norm(x, 1)),
        (lambda x, y, z: torch._foreach_norm(x, float("inf"))),
        (lambda x, y, z: torch._foreach_norm(x, 3)),
    ]
    for i, f in enumerate(checks):
        assert_same(f(da, db, dc), f(a, b, c), rtol=1e-5, atol=1e-6, msg=f"check {i}")
    # one-tensor variants (what clip_grad_norm_ uses) with a device scalar
    s = torch.tensor(0.25)
    assert_same(torch._foreach_mul(da, to_dev(s)), torch._foreach_mul(a, s))
    assert_same(torch._foreach_add(da, to_dev(s), alpha=-1), torch._foreach_add(a, s, alpha=-1))


def test_foreach_lerp_scalar_weights():
    # A scalar weight picks lerp's formula when the graph is built; ATen picks it per element
    # from the weight in opmath (float32 for 16-bit tensors). ATen's vector kernel fuses the
    # multiply-add, so float32 results differ in the last bit.
    g = torch.Generator().manual_seed(3)
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        a = [(torch.randn(3, 4, generator=g) * 100).to(dt), torch.randn(5, generator=g).to(dt)]
        b = [(torch.randn(3, 4, generator=g) * 100).to(dt), torch.randn(5, generator=g).to(dt)]
        da, db = [to_dev(t) for t in a], [to_dev(t) for t in b]
        for w in (0.0, 0.1, 0.49999, 0.5, 0.7, 1.0, -0.5, 2.0, float("nan")):
            assert_same(torch._foreach_lerp(da, db, w), torch._foreach_lerp(a, b, w), msg=f"{dt} weight {w}")
        assert_same(torch._foreach_lerp(da, db, [0.3, 0.8]), torch._foreach_lerp(a, b, [0.3, 0.8]),
                    msg=f"{dt} weights [0.3, 0.8]")
        x, dx = [t.clone() for t in a], [t.clone() for t in da]
        torch._foreach_lerp_(x, b, 0.9)
        torch._foreach_lerp_(dx, db, 0.9)
        assert_same(dx, x, msg=f"{dt} in place")


def test_foreach_inplace_ops():
    a = [torch.randn(3, 4), torch.randn(5)]
    b = [torch.randn(3, 4), torch.randn(5)]
    da, db = [to_dev(t) for t in a], [to_dev(t) for t in b]
    views = [da[0][1], da[1][::2]]  # aliases must see the updates
    for f in [lambda x, y: torch._foreach_add_(x, y, alpha=0.5), lambda x, y: torch._foreach_mul_(x, 2.0),
              lambda x, y: torch._foreach_addcmul_(x, y, y, value=0.1), lambda x, y: torch._foreach_lerp_(x, y, 0.2),
              lambda x, y: torch._foreach_div_(x, [2.0, 4.0]), lambda x, y: torch._foreach_zero_(y)]:
        f(a, b)
        f(da, db)
        assert_same(da, a, rtol=1e-5, atol=1e-6)
        assert_same(db, b)
    assert_same(views[0], a[0][1], rtol=1e-5, atol=1e-6)
    assert_same(views[1], a[1][::2], rtol=1e-5, atol=1e-6)


def test_foreach_errors():
    a = [to_dev(torch.randn(3)), to_dev(torch.randn(2))]
    with pytest.raises(RuntimeError):
        torch._foreach_add(a, [to_dev(torch.randn(3))])
    with pytest.raises(RuntimeError):
        torch._foreach_mul_(a, [1.0])
    with pytest.raises(RuntimeError):
        torch._foreach_add_([to_dev(torch.ones(3, dtype=torch.long))], 1.5)
