"""Client code written for CUDA behaves the same on tiny: Module.to() keeps Parameter objects,
autocast and GradScaler, RNG state round trips (checkpointing with dropout), isin, and the
torch.cuda-shaped Stream / Event API. Every result is compared with the CPU."""

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint

from conftest import DEV, assert_same, requires_tiny, sync, to_dev
from pointwise_util import run_both


# ----------------------------------------------------------------------- Module.to keeps Parameters


class TiedLM(nn.Module):
    """A weight-tied language-model head, as in GPT-2 (lm_head.weight is wte.weight)."""

    def __init__(self, vocab=11, dim=8):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.mix = nn.Linear(dim, dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids):
        return self.lm_head(torch.tanh(self.mix(self.wte(ids))))


def test_to_keeps_parameter_objects_and_tied_weights():
    requires_tiny()
    torch.manual_seed(0)
    model = TiedLM()
    params = list(model.parameters())
    wte = model.wte.weight
    model.to(DEV)
    assert [p for p in model.parameters()] == params  # the same objects, now on tiny
    assert all(p.device.type == "tiny" for p in params)
    assert model.lm_head.weight is model.wte.weight is wte
    assert isinstance(wte, nn.Parameter)
    assert torch._has_compatible_shallow_copy_type(torch.zeros(2), torch.zeros(2, device=DEV))
    model.to("cpu")
    assert model.wte.weight is wte and wte.device.type == "cpu"


def test_optimizer_made_before_to_trains_the_model():
    requires_tiny()
    torch.manual_seed(0)
    ref = TiedLM()
    model = copy.deepcopy(ref)
    opt_ref = torch.optim.AdamW(ref.parameters(), lr=0.05)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)  # before the move, as scripts often do
    model.to(DEV)
    ids = torch.randint(0, 11, (4, 6))
    for _ in range(3):
        for m, o, x in ((ref, opt_ref, ids), (model, opt, to_dev(ids))):
            o.zero_grad()
            loss = F.cross_entropy(m(x).reshape(-1, 11), x.reshape(-1))
            loss.backward()
            o.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert_same(p, q, rtol=1e-4, atol=1e-5)
    assert model.lm_head.weight is model.wte.weight


# ----------------------------------------------------------------------- autocast and GradScaler


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_autocast_casts_as_on_other_devices(dtype):
    requires_tiny()
    torch.manual_seed(0)
    lin = nn.Linear(16, 8)
    x = torch.randn(4, 16)
    dev_lin = copy.deepcopy(lin).to(DEV)
    with torch.autocast(device_type="cpu", dtype=dtype):
        want_mm = lin(x)
        want_sum = (want_mm.float() + want_mm).sum()
    # exp is on the float32 list of CUDA's autocast (and every backend's but the CPU's, whose
    # own list leaves it out): tiny behaves as cuda
    want_exp = torch.exp(want_mm.float())
    with torch.autocast(device_type="tiny", dtype=dtype):
        got_mm = dev_lin(to_dev(x))
        got_exp = torch.exp(got_mm)
        got_sum = (got_mm.float() + got_mm).sum()
    assert got_mm.dtype == want_mm.dtype == dtype
    assert got_exp.dtype == torch.float32
    assert got_sum.dtype == want_sum.dtype
    assert_same(got_mm, want_mm, rtol=1e-2, atol=1e-2)
    assert_same(got_exp, want_exp, rtol=2e-2, atol=1e-2)
    assert torch.amp.is_autocast_available("tiny")


def test_grad_scaler_unscales_and_skips_inf_steps():
    requires_tiny()
    # GradScaler's kernels directly, against the CPU's
    grads = [torch.randn(5, 3), torch.tensor([1.0, float("inf"), 2.0]), torch.randn(0), torch.randn(4).half()]
    for with_inf in (False, True):
        cpu = [g.clone() for g in grads] if with_inf else [grads[0].clone(), grads[3].clone()]
        dev = [to_dev(g) for g in cpu]
        found_c, found_d = torch.zeros(1), torch.zeros(1, device=DEV)
        inv_c = torch.full((1,), 0.25)
        torch._amp_foreach_non_finite_check_and_unscale_(cpu, found_c, inv_c)
        torch._amp_foreach_non_finite_check_and_unscale_(dev, found_d, to_dev(inv_c))
        assert_same(found_d, found_c)
        for d, c in zip(dev, cpu):
            assert_same(d, c)
    for found in (0.0, 1.0):
        for tracker in (0, 1):
            scale_c, tracker_c = torch.full((1,), 65536.0), torch.full((1,), tracker, dtype=torch.int32)
            scale_d, tracker_d = to_dev(scale_c), to_dev(tracker_c)
            args = (torch.full((1,), found), 2.0, 0.5, 2)
            torch._amp_update_scale_(scale_c, tracker_c, *args)
            torch._amp_update_scale_(scale_d, tracker_d, to_dev(args[0]), *args[1:])
            assert_same(scale_d, scale_c)
            assert_same(tracker_d, tracker_c)


def test_amp_training_step_with_grad_scaler():
    requires_tiny()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 3))
    dev_model = copy.deepcopy(model).to(DEV)
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    results = []
    for m, dev, xs, ys in ((model, "cpu", x, y), (dev_model, "tiny", to_dev(x), to_dev(y))):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(dev, init_scale=1024.0, growth_interval=2)
        for _ in range(3):
            opt.zero_grad()
            with torch.autocast(device_type=dev, dtype=torch.bfloat16):
                loss = F.cross_entropy(m(xs), ys)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        results.append((list(m.parameters()), scaler.get_scale()))
    (p_cpu, s_cpu), (p_dev, s_dev) = results
    assert s_dev == s_cpu
    for a, b in zip(p_dev, p_cpu):
        assert_same(a, b, rtol=2e-2, atol=2e-3)


# ----------------------------------------------------------------------- RNG state


def test_rng_state_round_trips():
    requires_tiny()
    torch.manual_seed(3)
    state = torch.tiny.get_rng_state()
    a = torch.rand(100, device=DEV).cpu()
    torch.tiny.set_rng_state(state)
    b = torch.rand(100, device=DEV).cpu()
    assert torch.equal(a, b)
    states = torch.tiny.get_rng_state_all()
    assert len(states) == torch.tiny.device_count()
    c = torch.rand(7, device=DEV).cpu()
    torch.tiny.set_rng_state_all(states)
    assert torch.equal(torch.rand(7, device=DEV).cpu(), c)


@pytest.mark.parametrize("use_reentrant", [False, True])
def test_checkpoint_recomputes_the_same_dropout_mask(use_reentrant):
    requires_tiny()
    torch.manual_seed(0)
    block = nn.Sequential(nn.Linear(10, 10), nn.Dropout(0.5), nn.Tanh()).to(DEV)
    x = to_dev(torch.randn(6, 10)).requires_grad_()

    def grads(checkpointed):
        torch.manual_seed(7)
        x.grad = None
        for p in block.parameters():
            p.grad = None
        if checkpointed:
            out = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=use_reentrant)
        else:
            out = block(x)
        out.square().sum().backward()
        return [x.grad.cpu()] + [p.grad.cpu() for p in block.parameters()]

    # A different mask moves gradients by O(1); the values may differ in the last bits, since
    # the recomputed forward fuses with the backward into other kernels, whose reductions sum in
    # vector-width order (seen with AVX-512, not with AVX2)
    for a, b in zip(grads(False), grads(True)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------- isin


@pytest.mark.parametrize("invert", [False, True])
def test_isin(invert):
    e = torch.tensor([[1, 5, 3], [7, 2, 2]])
    t = torch.tensor([2, 3, 9])
    run_both(lambda a, b: torch.isin(a, b, invert=invert), e, t, msg="tensor, tensor")
    run_both(lambda a: torch.isin(a, 2, invert=invert), e, msg="tensor, scalar")
    run_both(lambda b: torch.isin(3, b, invert=invert), t, msg="scalar, tensor")
    f = torch.tensor([0.5, float("nan"), 2.0, -0.0, float("inf")])
    run_both(lambda a, b: torch.isin(a, b, invert=invert), f, torch.tensor([0.0, float("nan"), float("inf")]),
             msg="floats: NaN is in nothing, -0 == 0")
    run_both(lambda a, b: torch.isin(a, b, invert=invert), e, t.double(), msg="promotion")
    run_both(lambda a, b: torch.isin(a, b, invert=invert), torch.tensor(3), t, msg="0-d")
    run_both(lambda a, b: torch.isin(a, b, invert=invert), e, torch.tensor([], dtype=torch.long), msg="empty test")
    g = torch.Generator().manual_seed(0)
    big_e, big_t = torch.randint(0, 20000, (3000,), generator=g), torch.randint(0, 20000, (9000,), generator=g)
    run_both(lambda a, b: torch.isin(a, b, invert=invert), big_e, big_t, msg="large: sorted search")
    run_both(lambda a, b, o: (torch.isin(a, b, invert=invert, out=o), o)[1], e, t, torch.empty(0, dtype=torch.bool),
             msg="out=")


def test_isin_is_lazy_and_fused():
    requires_tiny()
    from torch_tiny import debug

    e, t = to_dev(torch.arange(12).reshape(3, 4)), to_dev(torch.tensor([1, 4, 11]))
    sync()
    with debug.count_kernels() as c:
        r = torch.isin(e * 2, t)
        sync()
    assert c.kernels == 1
    assert_same(r, torch.isin(torch.arange(12).reshape(3, 4) * 2, torch.tensor([1, 4, 11])))


# ----------------------------------------------------------------------- streams and events


def test_streams_and_events_order_and_time_the_work():
    requires_tiny()
    s = torch.tiny.current_stream()
    assert s == torch.tiny.default_stream() and s.device == torch.device("tiny", 0)
    start, end = torch.tiny.Event(enable_timing=True), torch.tiny.Event(enable_timing=True)
    x = to_dev(torch.randn(256, 256))
    from torch_tiny import debug
    with torch.tiny.stream(s):
        start.record()
        y = (x @ x).relu().sum()
        with debug.count_kernels() as c:
            end.record()  # launches the pending matmul and sum
        assert c.kernels >= 1
    end.synchronize()
    assert end.query() and s.query()
    assert end.elapsed_time(start) < 0 < start.elapsed_time(end)
    with pytest.raises(ValueError, match="recorded"):
        start.elapsed_time(torch.tiny.Event(enable_timing=True))
    assert_same(y, (x.cpu() @ x.cpu()).relu().sum(), rtol=1e-4, atol=1e-2)
    with pytest.raises(ValueError, match="enable_timing"):
        torch.tiny.Event().elapsed_time(end)
    s.synchronize()
    assert s.record_event().query()


# ----------------------------------------------------------------------- loops that never read


def _long_recurrence(x, steps, kind):
    rotate = torch.tensor([1, 2, 3, 4, 0], device=x.device)
    for _ in range(steps):
        if kind == "in-place":
            x.mul_(0.999).add_(0.01)
        elif kind == "gathers":  # no elementwise op at all
            x = x[:, rotate]
        else:
            x = x * 0.999 + 0.01
    return x


@pytest.mark.parametrize("kind", ["new-values", "in-place", "gathers"])
def test_long_unread_loops_compute_as_on_the_cpu(kind):
    """A loop of thousands of steps that never reads its values (tiny's graph then is a chain
    thousands of operations deep) computes what the CPU does, without overflowing a stack."""
    x = torch.randn(3, 5)
    expected = _long_recurrence(x.clone(), 4000, kind)
    got = _long_recurrence(to_dev(x), 4000, kind)
    assert_same(got.cpu(), expected, check_device=False, rtol=1e-4, atol=1e-5)


def test_batch_norm_called_thousands_of_times_before_a_read():
    """nn.BatchNorm2d in training mode updates its running statistics in place on every call:
    3000 calls before anything is read leave them as on the CPU."""
    torch.manual_seed(0)
    x = torch.randn(4, 3, 5, 5)
    cpu_bn, dev_bn = nn.BatchNorm2d(3), nn.BatchNorm2d(3).to(DEV)
    xd = to_dev(x)
    for _ in range(3000):
        cpu_out, dev_out = cpu_bn(x), dev_bn(xd)
    assert_same(dev_out, cpu_out)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        assert_same(getattr(dev_bn, name), getattr(cpu_bn, name), rtol=1e-4, atol=1e-5, msg=name)


def test_long_unread_chain_is_freed_when_dropped():
    """A chain of 300k unread operations is freed when its last tensor goes (one node after
    another: freed inside each other, they overflowed the stack)."""
    y = to_dev(torch.ones(4))
    for _ in range(300_000):
        y = y + 1
    del y
    z = to_dev(torch.ones(4)) * 2  # the device still works
    assert_same(z, torch.full((4,), 2.0))
